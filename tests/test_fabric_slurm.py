"""The fabric's Slurm outputs and ``fleet probe`` against real Slurm daemons on 127.0.0.1 (slow):

* the installed Slurm (Debian 12: 22.05) loads ``gpucomm fabric EDR --emit slurm`` with topology/tree and a
  slurm.conf of the capture's 96 hosts, and ``scontrol show topology`` gives the tree back;
* ``gpucomm fleet probe`` gathers this machine through real srun (slurmd for one node), reports a node
  whose gpucomm fails and one that times out, and the directory feeds ``cluster``, ``doctor``, ``diff``;
* Slurm 24.11 (topology/block; Debian 13) in a chroot named by ``GPUCOMM_SLURM_CHROOT`` (debootstrap
  --variant=minbase trixie DIR, then apt-get install slurmctld slurmd munge inside): the block
  topology.conf of the Azure GB200 capture loads, ``scontrol show topology`` reads back, and the
  ``--segment`` of an emitted sbatch script is scheduled by four slurmds; ``topology.yaml`` is checked
  where the chroot's Slurm reads it (25.05 and later; 24.11 does not).
Every daemon is stopped, by its own process, whatever the outcome; skipped where the tools are missing."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from support import CAPTURES, run_cli
from test_slurm_daemons import Daemons, _free_port, _wait, slurm_conf

pytestmark = pytest.mark.slow
EDR = next((CAPTURES / "ib-fabric").glob("006_*"))
AZURE_BLOCKS = next((CAPTURES / "nvl72").glob("004_*"))
HOST_TOOLS = ("munged", "slurmctld", "slurmd", "srun", "scontrol", "sbatch")
host_slurm = pytest.mark.skipif(any(shutil.which(t) is None for t in HOST_TOOLS) or os.geteuid() != 0,
                                reason="slurm-wlm/munge not installed (or not root: slurmd needs it)")


class Cluster:
    """munged + slurmctld (+ slurmds) under ``d``, run directly or inside a chroot (paths then
    relative to the chroot's root)."""

    def __init__(self, d: Path, root: Path = None) -> None:
        self.d, self.root, self.daemons = d, root, Daemons()
        self.inner = d if root is None else Path("/") / d.relative_to(root)
        for sub in ("state", "spool", "munge"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(d / "munge", 0o700)
        (d / "munge" / "munge.key").write_bytes(os.urandom(1024))
        os.chmod(d / "munge" / "munge.key", 0o400)
        self.sock = self.inner / "munge" / "munge.socket"
        self.env = dict(os.environ, SLURM_CONF=str(self.inner / "slurm.conf"), MUNGE_SOCKET=str(self.sock))

    def argv(self, args: list) -> list:
        return (["chroot", str(self.root), "env", f"SLURM_CONF={self.env['SLURM_CONF']}"] if self.root else []) + args

    def run(self, *args, **kw):
        return subprocess.run(self.argv(list(args)), env=self.env, capture_output=True, text=True, timeout=120, **kw)

    def logs(self) -> list:
        return sorted(self.d.glob("*.log")) + sorted(self.d.glob("*.out"))

    def start(self, conf: str, slurmds=()) -> None:
        (self.d / "slurm.conf").write_text(conf)
        if self.root is not None:      # no cgroup file system in a chroot: slurmd (24.11) is told so
            (self.d / "cgroup.conf").write_text("CgroupPlugin=disabled\n")
        m = self.inner / "munge"
        self.daemons.start(self.argv(["munged", "--foreground", "--force", f"--key-file={m / 'munge.key'}",
                                      f"--socket={self.sock}", f"--pid-file={m / 'munged.pid'}", f"--seed-file={m / 'seed'}",
                                      f"--log-file={self.inner / 'munged.log'}"]), self.env, self.d / "munged.out")
        _wait(lambda: (self.d / "munge" / "munge.socket").exists(), 20, "munged", self.logs())
        self.daemons.start(self.argv(["slurmctld", "-D", "-i", "-f", self.env["SLURM_CONF"]]), self.env, self.d / "slurmctld.out")
        _wait(lambda: "UP" in self.run("scontrol", "ping").stdout, 60, "slurmctld", self.logs())
        for n in slurmds:
            (self.d / "spool" / n).mkdir(parents=True, exist_ok=True)
            self.daemons.start(self.argv(["slurmd", "-D", "-N", n, "-f", self.env["SLURM_CONF"]]), self.env,
                               self.d / f"slurmd-{n}.out")
        for n in slurmds:
            _wait(lambda: re.search(r"State=(IDLE|MIXED)", self.run("scontrol", "show", "node", n).stdout), 90,
                  f"{n} to register", self.logs())

    def stop(self) -> None:
        self.daemons.stop()


def _show_topology(c: "Cluster", plugin: str, nodes: str) -> str:
    """Start ``c``'s munged and slurmctld with topology/``plugin`` over ``nodes`` (its topology file
    written already), and return ``scontrol show topology``."""
    try:
        c.start(slurm_conf(c.inner, _free_port(), _free_port(), c.sock, plugin, nodes))
        return c.run("scontrol", "show", "topology").stdout
    finally:
        c.stop()


def _errors(log: Path, *words: str) -> list:
    text = log.read_text(errors="replace") if log.exists() else ""
    msgs = [l.split("error:", 1)[-1].split("fatal:", 1)[-1] for l in text.splitlines()
            if ("error:" in l.lower() or "fatal:" in l.lower()) and "state file" not in l]
    return [m for m in msgs if any(w in m.lower() for w in words)]


# --------------------------------------------------------------------------------------------
@host_slurm
def test_slurmctld_tree_loads_the_edr_topology(tmp_path):
    r = run_cli("fabric", str(EDR), "--emit", "slurm")
    assert r.code == 0
    c = Cluster(tmp_path)
    (tmp_path / "topology.conf").write_text(r.stdout)
    hosts = run_cli("fabric", str(EDR), "--format", "json").json()["hosts"]
    from gpucomm.probes.formats.slurm_topology import compress_hostlist

    nodes = f"NodeName={compress_hostlist([h['name'] for h in hosts])} NodeAddr=127.0.0.1 CPUs=1 RealMemory=100 State=UNKNOWN"
    out = _show_topology(c, "tree", nodes)
    got = {m.group(1): m.group(2) for m in re.finditer(r"SwitchName=(\S+) Level=(\d+)", out)}
    assert got == {"S-ec0d9a0300ec81e0": "1", "S-ec0d9a0300ec8240": "0", "S-ec0d9a0300ec8480": "0",
                   "S-ec0d9a0300f548c0": "0", "S-ec0d9a0300f548e0": "0"}, out
    assert "gpu[021-044]" in out
    assert not _errors(tmp_path / "slurmctld.log", "topolog", "switch"), (tmp_path / "slurmctld.log").read_text()[-2000:]
    # what scontrol printed reads back as the same tree
    from gpucomm.probes.fabric import parse_topology_conf

    back = parse_topology_conf(out, "scontrol")
    assert len(back.node_leaf) == 96 and back.roots() == ["S-ec0d9a0300ec81e0"]


@host_slurm
def test_fleet_probe_through_srun_feeds_cluster_doctor_diff(tmp_path):
    c = Cluster(tmp_path / "slurm")
    (c.d / "topology.conf").write_text("SwitchName=leaf1 Nodes=fleet[01-02]\n")
    nodes = "NodeName=fleet[01-02] NodeAddr=127.0.0.1 CPUs=1 RealMemory=100 State=UNKNOWN"
    import sys

    old = dict(os.environ)
    try:
        c.start(slurm_conf(c.d, _free_port(), _free_port(), c.sock, "tree", nodes), slurmds=["fleet01"])
        os.environ.update(SLURM_CONF=c.env["SLURM_CONF"], MUNGE_SOCKET=c.env["MUNGE_SOCKET"])
        out = tmp_path / "out"
        r = run_cli("fleet", "probe", "--nodelist", "fleet01", "--out-dir", str(out), "--timeout", "120",
                    "--gpucomm", f"{sys.executable} -m gpucomm", "--format", "json")
        assert r.code in (0, 5), r.stderr
        rep = r.json()
        from test_schemas import validate

        validate(rep)
        assert rep["gathered"] == ["fleet01"] and not rep["failed"] and rep["doctor"]["nodes"] == 1
        doc = __import__("json").loads((out / "fleet01.json").read_text())
        assert doc["schema"] == "gpucomm.topology/v1" and doc["host"]["provenance"] == "live"
        # a second pass, for diff; then a node whose gpucomm fails, and one that never answers
        r2 = run_cli("fleet", "probe", "--nodelist", "fleet01", "--out-dir", str(tmp_path / "out2"), "--timeout", "120",
                     "--gpucomm", f"{sys.executable} -m gpucomm")
        assert r2.code in (0, 5) and "1 node gathered" in r2.stdout, r2.stderr
        bad = run_cli("fleet", "probe", "--nodelist", "fleet01", "--out-dir", str(tmp_path / "bad"), "--timeout", "60",
                      "--gpucomm", "/bin/sh -c 'exit 3' --", "--format", "json")
        assert bad.code == 5 and bad.json()["failed"] == [{"node": "fleet01", "why": "sent no document (its task failed or never ran)"}]
        slow = run_cli("fleet", "probe", "--nodelist", "fleet01", "--out-dir", str(tmp_path / "slow"), "--timeout", "4",
                       "--gpucomm", "/bin/sh -c 'sleep 60' --", "--format", "json")
        assert slow.code == 5 and slow.json()["failed"] == [{"node": "fleet01", "why": "timed out after 4s"}]
        assert not list((tmp_path / "slow").iterdir())
    finally:
        os.environ.clear()
        os.environ.update(old)
        c.stop()
    cl = run_cli("cluster", str(out), "--format", "json")
    assert cl.code == 0 and cl.json()["summary"]["nodes"] == 1
    d = run_cli("doctor", str(out / "fleet01.json"))
    assert d.code in (0, 5) and "gpucomm doctor" in d.stdout
    df = run_cli("diff", str(out / "fleet01.json"), str(tmp_path / "out2" / "fleet01.json"))
    assert df.code == 0 and "identical" in df.stdout, df.stdout


# --------------------------------------------------------------------------------------------
# Slurm 24.11 (topology/block) in a Debian 13 chroot
CHROOT = os.environ.get("GPUCOMM_SLURM_CHROOT")


@pytest.fixture()
def chroot(tmp_path):
    if not CHROOT or not Path(CHROOT, "usr/sbin/slurmctld").exists():
        pytest.skip("no Slurm 24.11+ chroot (set GPUCOMM_SLURM_CHROOT to a Debian 13 root with slurmctld slurmd munge)")
    if os.geteuid() != 0:
        pytest.skip("chroot needs root")
    root = Path(CHROOT)
    mounted = False
    if not (root / "proc" / "self").exists():       # slurmctld reads /proc/self/exe
        if subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], capture_output=True).returncode:
            pytest.skip("cannot mount /proc in the chroot")
        mounted = True
    d = root / "tmp" / f"gpucomm-test-{os.getpid()}-{tmp_path.name}"
    d.mkdir(parents=True)
    version = subprocess.run(["chroot", str(root), "slurmctld", "-V"], capture_output=True, text=True).stdout.split()[-1]
    try:
        yield root, d, tuple(int(x) for x in version.split(".")[:2])
    finally:
        shutil.rmtree(d, ignore_errors=True)
        if mounted:
            subprocess.run(["umount", str(root / "proc")], capture_output=True)


def test_slurm_2411_block_topology_and_segment(chroot, tmp_path):
    root, d, version = chroot
    assert version >= (23, 11), "topology/block needs Slurm 23.11+"
    # the Azure GB200 blocks (18/16/8/9 nodes, BlockSizes=5), as gpucomm writes them
    conf = run_cli("fabric", str(AZURE_BLOCKS), "--emit", "slurm")
    assert conf.code == 0
    c = Cluster(d / "a", root)
    (c.d / "topology.conf").write_text(conf.stdout)
    hosts = sorted(re.findall(r"Nodes=(\S+)", conf.stdout))
    out = _show_topology(c, "block", f"NodeName={','.join(hosts)} NodeAddr=127.0.0.1 CPUs=1 RealMemory=100 State=UNKNOWN")
    from gpucomm.probes.formats.slurm_topology import read_topology_conf

    back = read_topology_conf(out, "scontrol")
    assert [len(b["nodes"]) for b in back["blocks"]] == [18, 16, 8, 9] and back["block_sizes"][0] == 5, out
    assert not _errors(c.d / "slurmctld.log", "topolog", "block")
    # four trays in two NVLink domains of two: the plan's sbatch script says --segment=2 and Slurm schedules it
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    tray = run_cli("probe", "example:gb200-tray", "--format", "json").json()
    import json

    for i in range(1, 5):
        doc = json.loads(json.dumps(tray))
        for g in doc["gpus"]:
            g["fabric"]["cluster_uuid"] = "aaaaaaaa-0001" if i <= 2 else "bbbbbbbb-0002"
        (nodes / f"tray{i}.json").write_text(json.dumps(doc))
    synth = run_cli("synth", "example:gb200-tray", "-N", "4", "--prefix", "tray", "--fat-tree", "1", "--format", "ibnetdiscover")
    (tmp_path / "ib.out").write_text(synth.stdout.replace("tray01", "tray1").replace("tray02", "tray2")
                                     .replace("tray03", "tray3").replace("tray04", "tray4"))
    r = run_cli("cluster", str(nodes), "--fabric", str(tmp_path / "ib.out"), "-o", str(tmp_path / "c.json"))
    assert r.code == 0, r.stderr
    block = run_cli("fabric", str(tmp_path / "c.json"), "--emit", "slurm")
    assert block.code == 0 and block.stdout.count("BlockName=") == 2 and "BlockSizes=2" in block.stdout
    job = run_cli("plan", "--cluster", str(tmp_path / "c.json"), "--tp", "4", "--dp", "4", "--pp", "1", "--emit", "slurm")
    assert job.code == 0 and "#SBATCH --segment=2" in job.stdout and "--switches" not in job.stdout
    c = Cluster(d / "b", root)
    (c.d / "topology.conf").write_text(block.stdout)
    ports = [_free_port() for _ in range(4)]
    nodes_conf = "\n".join(f"NodeName=tray{i} NodeAddr=127.0.0.1 Port={p} CPUs=1 RealMemory=100 State=UNKNOWN"
                           for i, p in enumerate(ports, 1))
    script = c.d / "job.sh"
    script.write_text(job.stdout.replace("#SBATCH --gpus-per-node=4\n", "").replace("--ntasks-per-node=4", "--ntasks-per-node=1"))
    try:
        c.start(slurm_conf(c.inner, _free_port(), _free_port(), c.sock, "block", nodes_conf),
                slurmds=[f"tray{i}" for i in range(1, 5)])
        res = c.run("sbatch", "--test-only", str(c.inner / "job.sh"), cwd=str(c.d))
        wrong = c.run("sbatch", "--test-only", "--segment=3", str(c.inner / "job.sh"), cwd=str(c.d))
    finally:
        c.stop()
    assert res.returncode == 0 and re.search(r"to start at .* on nodes tray\[1-4\]", res.stderr), res.stderr
    assert wrong.returncode != 0, wrong.stderr      # a segment no block can hold is refused: the check can fail


def test_slurm_topology_yaml_where_slurm_reads_it(chroot):
    root, d, version = chroot
    if version < (25, 5):
        pytest.skip(f"Slurm {version[0]}.{version[1]} reads no topology.yaml (Slurm 25.05 and later do)")
    y = run_cli("fabric", str(EDR), "--nvlink-domain", "8", "--emit", "slurm-yaml")
    assert y.code == 0
    hosts = run_cli("fabric", str(EDR), "--format", "json").json()["hosts"]
    from gpucomm.probes.formats.slurm_topology import compress_hostlist

    c = Cluster(d / "y", root)
    (c.d / "topology.yaml").write_text(y.stdout)
    out = _show_topology(c, "tree", f"NodeName={compress_hostlist([h['name'] for h in hosts])} NodeAddr=127.0.0.1 "
                                    "CPUs=1 RealMemory=100")
    assert "BlockName=nvl01" in out or "SwitchName=" in out, out
