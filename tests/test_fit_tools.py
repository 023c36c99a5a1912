"""The artefacts users hand to their own tools -- Megatron-LM arguments, DeepSpeed config and
hostfile, MPICH machinefile, Kubernetes labels / NFD file, the wrapper's fallback -- checked by
those tools where they are installed (mpirun, megatron-core, bash, numactl), and the one way every
command takes its input (TOPO positional, --from, - for stdin, this node without one), its global
options and its usage errors."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from gpucomm.planners.launch import k8s
from gpucomm.planners.plan import build_full_plan
from gpucomm.planners.placement import models as ms

from support import hgx_doc, run_cli

EXAMPLES = ["hgx-h100", "dgx-a100", "dgx1-v100", "pcie-8x-consumer", "a100-pcie-4x-nvbridge", "gb200-tray",
            "cpu-only", "hgx-h100-degraded", "dgx-a100-numa-mismatch"]


# ============================================================================================
# Megatron-LM
def test_plan_emits_megatron_arguments_for_tp2_ep4():
    r = run_cli("plan", "example:hgx-h100", "--tp", "2", "--ep", "4", "--emit", "megatron")
    assert r.code == 0, r.stderr
    args = _bash_array(r.stdout)
    assert args[:10] == ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "1",
                         "--context-parallel-size", "1", "--expert-model-parallel-size", "4",
                         "--expert-tensor-parallel-size", "2"]
    assert "--sequence-parallel" in args            # Megatron: MoE with TP needs sequence parallelism
    assert "world 8 = tp 2 x cp 1 x dp 4 x pp 1" in r.stdout and "etp 2 x ep 4 x edp 1" in r.stdout


def _bash_array(text: str) -> list:
    """The MEGATRON_PARALLEL_ARGS array as bash itself expands it."""
    r = subprocess.run(["bash", "-c", text + '\nprintf "%s\\n" "${MEGATRON_PARALLEL_ARGS[@]}"'],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.split("\n")[:-1]


def test_megatron_arguments_with_a_model_and_interleaving():
    r = run_cli("plan", "example:hgx-h100", "--nodes", "4", "--tp", "8", "--pp", "4", "--vpp", "2",
                "--model", "llama-70b,gbs=64", "--emit", "megatron")
    assert r.code == 0, r.stderr
    args = _bash_array(r.stdout)
    i = args.index("--num-layers-per-virtual-pipeline-stage")
    assert args[i + 1] == "10"                      # 80 layers / pp 4 / vpp 2
    assert args[args.index("--num-layers") + 1] == "80" and "--group-query-attention" in args
    # Megatron's rules refuse what it would refuse
    assert run_cli("plan", "example:hgx-h100", "--tp", "8", "--vpp", "2", "--emit", "megatron").code == 4
    bad = run_cli("plan", "example:hgx-h100", "--nodes", "4", "--tp", "8", "--pp", "4", "--vpp", "3",
                  "--model", "llama-70b,gbs=64", "--emit", "megatron")
    assert bad.code == 4 and "virtual stages" in bad.stderr
    moe = run_cli("plan", "example:hgx-h100", "--tp", "2", "--ep", "4",
                  "--model", "layers=8,hidden=1024,heads=8,experts=6", "--emit", "megatron")
    assert moe.code == 4 and "not a multiple of ep=4" in moe.stderr


# Megatron-Core's TransformerConfig and Megatron-LM's validate_args read the emitted arguments for
# real in tests/test_everyday_answers.py (the released arguments.py over megatron-core).


# ============================================================================================
# DeepSpeed, Open MPI, MPICH
def test_deepspeed_config_follows_deepspeeds_batch_rule():
    r = run_cli("plan", "example:hgx-h100", "--nodes", "2", "--tp", "4", "--model", "llama-8b,gbs=256,mbs=2",
                "--emit", "deepspeed")
    assert r.code == 0, r.stderr
    cfg = json.loads(r.stdout)
    dp = 16 // 4
    assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * dp
    assert (cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"]) == (256, 2)
    assert cfg["bf16"]["enabled"] and cfg["zero_optimization"]["stage"] == 1


def test_deepspeed_accepts_the_config(monkeypatch):
    """DeepSpeed's own DeepSpeedConfig (batch assertion, ZeRO/precision sections) reads the emitted
    config with the plan's data-parallel size as its world (mpu), as under Megatron-DeepSpeed."""
    dc = pytest.importorskip("deepspeed.runtime.config")
    monkeypatch.setattr(dc.dist, "get_rank", lambda *a, **k: 0)   # no process group in this test
    r = run_cli("plan", "example:hgx-h100", "--nodes", "2", "--tp", "4", "--model", "llama-8b,gbs=256,mbs=2",
                "--emit", "deepspeed")
    cfg = json.loads(r.stdout)

    class MPU:
        def get_data_parallel_world_size(self):
            return 4

    c = dc.DeepSpeedConfig(cfg, mpu=MPU())
    assert (c.train_batch_size, c.gradient_accumulation_steps, c.zero_optimization_stage) == (256, 32, 1)
    cfg["train_batch_size"] = 250
    with pytest.raises(AssertionError):
        dc.DeepSpeedConfig(cfg, mpu=MPU())


def test_hostfile_and_machinefile_name_the_plans_hosts():
    r = run_cli("plan", "example:hgx-h100", "--hosts", "n[3,1,2]", "--tp", "8", "--emit", "hostfile")
    assert r.code == 0, r.stderr
    body = [l for l in r.stdout.splitlines() if l and not l.startswith("#")]
    assert body == ["n3 slots=8", "n1 slots=8", "n2 slots=8"]
    m = run_cli("plan", "example:hgx-h100", "--hosts", "n[3,1,2]", "--tp", "8", "--emit", "machinefile")
    assert [l for l in m.stdout.splitlines() if l and not l.startswith("#")] == ["n3:8", "n1:8", "n2:8"]


@pytest.mark.skipif(not shutil.which("mpirun"), reason="Open MPI not installed")
def test_mpirun_reads_the_hostfile(tmp_path):
    plan = build_full_plan(hgx_doc(n_gpus=2, numa_nodes=1, cpus_per_numa=2, smt=False), nodes=1, tp=1,
                           hosts=["localhost"])
    hf = tmp_path / "hostfile"
    hf.write_text(plan["launch"]["hostfile"])
    r = subprocess.run(["mpirun", "--allow-run-as-root", "--hostfile", str(hf), "-np", "2", "bash", "-c",
                        'echo "$OMPI_COMM_WORLD_RANK $OMPI_COMM_WORLD_LOCAL_SIZE"'],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(r.stdout.split("\n")[:-1]) == ["0 2", "1 2"]
    # one slot too few is refused, so the check can fail
    hf.write_text(plan["launch"]["hostfile"].replace("slots=2", "slots=1"))
    r = subprocess.run(["mpirun", "--allow-run-as-root", "--hostfile", str(hf), "-np", "2", "true"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0


def test_deepspeed_reads_the_hostfile(tmp_path):
    runner = pytest.importorskip("deepspeed.launcher.runner")
    plan = build_full_plan(hgx_doc(), nodes=2, tp=8, hosts=["gpu-a", "gpu-b"])
    hf = tmp_path / "hostfile"
    hf.write_text(plan["launch"]["hostfile"])
    assert dict(runner.fetch_hostfile(str(hf))) == {"gpu-a": 8, "gpu-b": 8}


# ============================================================================================
# The wrapper when the plan's CPUs are not on this node
@pytest.mark.skipif(not (shutil.which("numactl") or shutil.which("taskset")), reason="numactl/taskset missing")
def test_wrapper_runs_unbound_with_a_warning_when_the_plans_cpus_are_absent(tmp_path):
    plan = build_full_plan(hgx_doc(), nodes=1, tp=8)          # CPUs 0-223: far more than this machine has
    w = tmp_path / "gpucomm-rank.sh"
    w.write_text(plan["launch"]["wrapper"])
    w.chmod(0o755)
    r = subprocess.run([str(w), "bash", "-c", "echo ran"], capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, LOCAL_RANK="7"))
    if (os.cpu_count() or 1) > 200:
        pytest.skip("this machine has the plan's CPUs")
    assert r.returncode == 0 and r.stdout == "ran\n", r.stderr
    assert "are not usable on" in r.stderr and "running unbound" in r.stderr
    assert "usage" not in r.stderr.lower()                    # no numactl usage text


# ============================================================================================
# Kubernetes
@pytest.mark.parametrize("name", EXAMPLES)
def test_labels_are_valid_kubernetes_labels(name):
    r = run_cli("probe", f"example:{name}", "--format", "k8s-labels")
    assert r.code == 0, r.stderr
    d = r.json()
    # the one warning a label set may carry: a multi-node NVLink tray whose rack size nothing gives
    assert d["labels"] and all("nvlink.domain-size left out" in w for w in d["warnings"])
    for key, value in d["labels"].items():
        assert k8s.check_label(key, value) is None, (key, value)
        assert key.startswith("feature.node.kubernetes.io/gpucomm-") or key == k8s.GFD_CLIQUE
    nfd = run_cli("probe", f"example:{name}", "--format", "nfd")
    lines = [l for l in nfd.stdout.splitlines() if l and not l.startswith("#")]
    assert dict(l.split("=", 1) for l in lines) == d["labels"]


def test_labels_say_what_schedulers_need():
    lab = k8s.node_labels(hgx_doc())
    p = "feature.node.kubernetes.io/gpucomm-"
    assert lab[p + "gpu.count"] == "8" and lab[p + "gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert lab[p + "nvlink.domain-size"] == "8" and lab[p + "nvswitch"] == "true"
    assert lab[p + "rdma.nic-count"] == "8" and lab[p + "rdma.nic-rate-gbps"] == "400"
    assert lab[p + "numa.nodes"] == "2" and lab[p + "numa.gpus"] == "0x4_1x4"
    pcie = k8s.node_labels(hgx_doc(nvswitch=False, nics=False))
    assert pcie[p + "nvswitch"] == "false" and pcie[p + "rdma.nic-count"] == "0"
    # the label checker itself refuses what the API server refuses
    assert k8s.check_label(p + "x", "a b") and k8s.check_label("feature.node.kubernetes.io/-x", "1") and k8s.check_label("Bad_/x", "1")


def test_select_json_names_devices_by_bus_id_and_uuid():
    r = run_cli("select", "example:hgx-h100", "-k", "2", "--format", "json")
    assert r.code == 0, r.stderr
    d = r.json()
    assert [x["index"] for x in d["devices"]] == d["gpus"]
    assert all(re.match(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$", x["pci_bus_id"]) for x in d["devices"])
    assert all(x["uuid"].startswith("GPU-") for x in d["devices"])


# ============================================================================================
# One way to give inputs; global options; usage errors
def test_every_topology_command_takes_topo_positionally_from_from_and_stdin(tmp_path):
    saved = run_cli("show", "example:dgx1-v100", "--format", "json").stdout
    f = tmp_path / "t.json"
    f.write_text(saved)
    for cmd in (["show"], ["probe"], ["paths"], ["rings"], ["trees"], ["predict", "--size", "1M"], ["doctor"],
                ["select", "-k", "2"], ["plan", "--tp", "2"]):
        a = run_cli(*cmd[:1], str(f), *cmd[1:], "--format", "json")
        b = run_cli(*cmd[:1], "--from", str(f), *cmd[1:], "--format", "json")
        assert a.code == b.code and a.code in (0, 5), (cmd, a.stderr)
        assert a.stdout == b.stdout, cmd
        c = subprocess.run([sys.executable, "-m", "gpucomm", *cmd[:1], "-", *cmd[1:], "--format", "json"],
                           input=saved, capture_output=True, text=True, timeout=120)
        assert c.returncode == a.code and c.stdout == a.stdout, (cmd, c.stderr)
    two = run_cli("show", str(f), "--from", "example:hgx-h100")
    assert two.code == 2 and "two inputs" in two.stderr


def test_no_topo_means_this_node_where_that_makes_sense():
    probe = run_cli("probe", "--format", "json")
    assert probe.code == 0
    host = probe.json()["host"]["hostname"]
    for cmd in (["show"], ["doctor"]):
        r = run_cli(*cmd, "--format", "json")
        assert r.code in (0, 5), (cmd, r.stderr)
    sel = run_cli("select", "-k", "1")
    gpus = len(probe.json()["gpus"])
    assert sel.code == (0 if gpus else 3)
    assert host


@pytest.mark.parametrize("cmd", [["probe"], ["show"], ["snapshot"], ["examples"], ["paths"], ["rings"], ["trees"],
                                 ["predict"], ["plan"], ["select"], ["synth"], ["doctor"], ["diff"],
                                 ["bench", "p2p"], ["bench", "collective"]])
def test_global_options_are_in_every_subcommands_help(cmd):
    r = run_cli(*cmd, "--help")
    assert r.code == 0, r.stderr
    for opt in ("--format", "--output", "--quiet", "--verbose"):
        assert opt in r.stdout, (cmd, opt)


@pytest.mark.parametrize("args", [
    ["select", "example:hgx-h100", "-k", "0"],
    ["plan", "example:hgx-h100", "--nodes", "0"],
    ["rings", "example:hgx-h100", "--nodes", "0"],
    ["trees", "example:hgx-h100", "--nodes", "0"],
    ["predict", "example:hgx-h100", "--nodes", "0"],
    ["synth", "example:hgx-h100", "--nodes", "0"],
    ["rings", "example:hgx-h100", "--channels", "100"],
    ["show", "example:hgx-h100", "--format", "bogus"],
    ["plan", "example:hgx-h100", "--format", "bogus"],
    ["diff", "example:hgx-h100"],
    ["plan"],
    ["plan", "--tp", "8"],
    ["plan", "example:hgx-h100", "--emit", "bogus"],
    ["plan", "example:hgx-h100", "--tp", "0"],
])
def test_usage_errors_exit_2(args):
    r = run_cli(*args)
    assert r.code == 2, (args, r.code, r.stderr)
    assert "Usage: gpucomm" in r.stderr and "Traceback" not in r.stderr


def test_model_help_lists_every_key():
    r = run_cli("plan", "--help")
    text = " ".join(r.stdout.split())
    for key in ms.ALL_KEYS:
        assert re.search(rf"\b{key} \(", text), key
