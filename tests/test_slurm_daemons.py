"""The Slurm files gpucomm writes, read by a real Slurm: munged, slurmctld and slurmd started on
127.0.0.1 under a private directory (its own munge key, socket, ports, state and logs), the node
registering with the emitted ``gres.conf`` and the cluster's ``topology.conf``, and ``sbatch
--test-only`` scheduling the emitted batch script on it.  Every daemon is stopped, by its own
process, whatever the test's outcome.  Skipped where slurm-wlm and munge are not installed
(.ci/run installs them)."""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from support import run_cli

TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS) or os.geteuid() != 0,
                                 reason="slurm-wlm/munge not installed (or not root: slurmd needs it)")]

NODES = 4            # gpunode[01-04] in slurm.conf and topology.conf; slurmd runs for gpunode01
GPU_TYPE = "nvidia_h100_80gb_hbm3"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(pred, timeout: float, what: str, logs=()) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.3)
    text = "\n".join(f"--- {p}\n" + (Path(p).read_text(errors="replace")[-3000:] if Path(p).exists() else "(none)")
                     for p in logs)
    raise AssertionError(f"timed out waiting for {what}\n{text}")


class Daemons:
    def __init__(self) -> None:
        self.procs: list = []

    def start(self, args, env, log) -> subprocess.Popen:
        p = subprocess.Popen(args, env=env, stdout=open(log, "ab"), stderr=subprocess.STDOUT,
                             start_new_session=True)
        self.procs.append(p)
        return p

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)


def slurm_conf(d: Path, ctld_port: int, slurmd_port: int, sock: Path, plugin: str, nodes: str, extra: str = "",
               name: str = "gpucommfabric", per_node: bool = True) -> str:
    """A slurm.conf for daemons on 127.0.0.1 under ``d`` (state, spool, pid and log files there; with
    ``per_node`` each slurmd's pid and log file carry its node name), topology/``plugin``, the
    ``nodes`` lines and one partition of them all."""
    sd = f"{d / 'slurmd'}-%n" if per_node else f"{d / 'slurmd'}"
    return f"""ClusterName={name}
SlurmctldHost={socket.gethostname()}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d / 'state'}
SlurmdSpoolDir={d / 'spool'}/%n
SlurmctldPidFile={d / 'slurmctld.pid'}
SlurmdPidFile={sd}.pid
SlurmctldLogFile={d / 'slurmctld.log'}
SlurmdLogFile={sd}.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
TopologyPlugin=topology/{plugin}
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MailProg=/bin/true
{nodes}
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
{extra}
"""


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    d = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool", "spool/gpunode01", "munge"):
        (d / sub).mkdir()
    os.chmod(d / "munge", 0o700)
    key = d / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    sock = d / "munge" / "munge.socket"
    # gres.conf and topology.conf exactly as gpucomm prints them
    r = run_cli("plan", "example:hgx-h100", "--emit", "gres")
    assert r.code == 0, r.stderr
    devdir = d / "dev"
    devdir.mkdir()
    for i in range(8):   # slurmd wants every File= to be a character device; this machine has no /dev/nvidia*
        os.mknod(devdir / f"nvidia{i}", 0o600 | __import__("stat").S_IFCHR, os.makedev(1, 3))
    gres = r.stdout.replace("/dev/nvidia", f"{devdir}/nvidia")
    (d / "gres.conf").write_text(gres)
    r = run_cli("synth", "example:hgx-h100", "--nodes", str(NODES), "--prefix", "gpunode", "--nodes-per-leaf", "2",
                "--fat-tree", "2", "--out-dir", str(d / "synth"))
    assert r.code == 0, r.stderr
    shutil.copy(d / "synth" / "topology.conf", d / "topology.conf")
    ctld_port, slurmd_port = _free_port(), _free_port()
    conf = d / "slurm.conf"
    conf.write_text(slurm_conf(d, ctld_port, slurmd_port, sock, "tree",
                               f"NodeName=gpunode[01-{NODES:02d}] NodeAddr=127.0.0.1 Sockets=2 CoresPerSocket=32 "
                               f"ThreadsPerCore=2 RealMemory=1000 Gres=gpu:{GPU_TYPE}:8 State=UNKNOWN",
                               "SlurmctldDebug=info\nSlurmdDebug=info\nGresTypes=gpu\nSlurmdParameters=config_overrides",
                               name="gpucommtest", per_node=False))
    env = dict(os.environ, SLURM_CONF=str(conf), MUNGE_SOCKET=str(sock))
    daemons = Daemons()
    logs = [d / "munged.log", d / "slurmctld.log", d / "slurmd.log"]
    try:
        daemons.start(["munged", "--foreground", "--force", f"--key-file={key}", f"--socket={sock}",
                       f"--pid-file={d / 'munge' / 'munged.pid'}", f"--seed-file={d / 'munge' / 'seed'}",
                       f"--log-file={d / 'munged.log'}"], env, d / "munged.out")
        _wait(lambda: sock.exists(), 20, "munged", logs)
        daemons.start(["slurmctld", "-D", "-i", "-f", str(conf)], env, d / "slurmctld.out")
        _wait(lambda: subprocess.run(["scontrol", "ping"], env=env, capture_output=True, text=True,
                                     timeout=10).stdout.count("UP") >= 1, 40, "slurmctld", logs + [d / "slurmctld.out"])
        daemons.start(["slurmd", "-D", "-N", "gpunode01", "-f", str(conf)], env, d / "slurmd.out")

        def idle() -> bool:
            out = subprocess.run(["scontrol", "show", "node", "gpunode01"], env=env, capture_output=True,
                                 text=True, timeout=10).stdout
            return bool(re.search(r"State=IDLE\b", out))
        _wait(idle, 60, "gpunode01 to register", logs + [d / "slurmd.out"])
        yield {"dir": d, "env": env}
    finally:
        daemons.stop()


def _errors_about(log: str, *words: str) -> list:
    """Error lines of a Slurm log that concern the files under test (this sandbox also logs
    unrelated ones: no PMIx library, no hwloc topology)."""
    return [l for l in log.splitlines() if ("error" in l.lower() or "fatal" in l.lower())
            and any(w in l.lower() for w in words)]


def _run(args, env, **kw):
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=60, **kw)


def test_slurmd_accepts_the_gres_conf(slurm):
    out = _run(["scontrol", "show", "node", "gpunode01"], slurm["env"]).stdout
    # the node registered idle (not drained for a GRES mismatch) with eight GPUs of the emitted type,
    # each bound to the cores of its socket
    assert re.search(rf"Gres=gpu:{GPU_TYPE}:8\(S:0-1\)", out), out
    assert "State=IDLE" in out and "Reason=" not in out, out
    log = (slurm["dir"] / "slurmd.log").read_text(errors="replace")
    assert not _errors_about(log, "gres", "nvidia", "links", "cores"), log[-3000:]
    gres = _run(["slurmd", "-G", "-N", "gpunode01", "-f", str(slurm["dir"] / "slurm.conf")], slurm["env"])
    text = gres.stdout + gres.stderr
    # slurmd's own reading of the file: each GPU's socket cores and its 18 NVLinks to every other GPU
    rows = re.findall(r"Index=(\d+) .*? Cores=(\S+) .*?Links=(\S+)", text)
    assert len(rows) == 8, text
    for idx, cores, links in rows:
        assert cores == ("0-31" if int(idx) < 4 else "32-63"), text
        assert links.split(",") == ["-1" if j == int(idx) else "18" for j in range(8)], text


def test_slurmctld_loads_the_topology_conf(slurm):
    out = _run(["scontrol", "show", "topology"], slurm["env"]).stdout
    names = re.findall(r"SwitchName=(\S+)", out)
    assert len(names) >= 3 and "gpunode[01-02]" in out and "gpunode[03-04]" in out, out
    assert not _errors_about((slurm["dir"] / "slurmctld.log").read_text(errors="replace"), "topolog", "switch")


def test_sbatch_test_only_schedules_the_emitted_script(slurm, tmp_path):
    r = run_cli("plan", "example:hgx-h100", "--tp", "8", "--hosts", "gpunode01", "--emit", "slurm")
    assert r.code == 0, r.stderr
    job = tmp_path / "job.sh"
    job.write_text(r.stdout.replace("#SBATCH --gpus-per-node=8", f"#SBATCH --gpus-per-node={GPU_TYPE}:8"))
    res = _run(["sbatch", "--test-only", str(job)], slurm["env"], cwd=tmp_path)
    assert res.returncode == 0 and re.search(r"Job \d+ to start at .* on nodes gpunode01", res.stderr), res.stderr
    # and the controller refuses what the node cannot give, so the check can fail
    bad = tmp_path / "bad.sh"
    bad.write_text(r.stdout.replace("#SBATCH --gpus-per-node=8", "#SBATCH --gpus-per-node=9"))
    res = _run(["sbatch", "--test-only", str(bad)], slurm["env"], cwd=tmp_path)
    assert res.returncode != 0, res.stderr
