"""NCCL/CUDA env and launch emitters: one test per user-reported pain point (GitHub issues cited) that the plan
addresses, and emitted files checked by their own tools where those are installed (bash, numactl,
sbatch/srun --test-only, mpirun)."""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess

import pytest

from support import run_cli
from gpucomm.planners.plan import build_full_plan
from gpucomm.probes import facts
from gpucomm.planners.launch import env as penv
from gpucomm.planners.launch import scripts as launch
from gpucomm.planners.placement import binding as pbind
from gpucomm.planners.placement import nodeview as pview
from gpucomm.probes.matrix import compute_matrix
from gpucomm.probes.model import finalize, nic_record, parse_cpulist
from support import hgx_doc, pcie_pairs_doc, vm_flat_doc


def nccl_hca_matches(spec: str, name: str) -> bool:
    """NCCL_IB_HCA matching as NCCL does it (env.rst; utils.cc matchIfList): a leading '=' means
    exact names, otherwise each entry is a prefix."""
    exact = spec.startswith("=")
    body = spec[1:] if exact else spec
    for entry in body.split(","):
        hca = entry.split(":")[0]
        if (name == hca) if exact else name.startswith(hca):
            return True
    return False


# --------------------------------------------------------------------------------------------
def test_ib_hca_is_exact_against_prefix_matching():
    names = [f"mlx5_{i}" for i in (0, 1, 2, 3, 4, 5, 6, 7)]
    doc = hgx_doc(nic_names=names)
    # storage NICs mlx5_10, mlx5_11 on the same switches, slower: not rail NICs
    for k in (10, 11):
        doc["nics"].append(nic_record(f"mlx5_{k}", netdev=f"enp{k}", pci_bus_id=f"0000:{k + 0x60:02x}:00.0", numa_node=0,
                                      link_layer="Ethernet", parent="0000:16:00.0",
                                      ports=[{"port": 1, "state": "ACTIVE", "rate_gbps": 100.0}]))
    compute_matrix(doc)
    finalize(doc)
    plan = build_full_plan(doc, nodes=2, tp=8)
    hca = plan["env"]["NCCL_IB_HCA"]
    assert hca["value"] == "=" + ",".join(f"mlx5_{i}:1" for i in range(8))
    assert "mlx5_10" in hca["reason"]
    # The pain point itself: without '=', mlx5_1 selects the storage NICs too.
    assert nccl_hca_matches(hca["value"][1:], "mlx5_10")
    assert not nccl_hca_matches(hca["value"], "mlx5_10") and not nccl_hca_matches(hca["value"], "mlx5_11")
    assert all(nccl_hca_matches(hca["value"], n) for n in names)


def test_single_node_needs_no_network_env():
    plan = build_full_plan(hgx_doc(), nodes=1, tp=8)
    assert "NCCL_IB_HCA" not in plan["env"] and "NCCL_CROSS_NIC" not in plan["env"]
    assert plan["env"]["CUDA_DEVICE_ORDER"]["value"] == "PCI_BUS_ID"
    assert all(v["reason"] for v in plan["env"].values())


def test_gdr_level_from_gpu_nic_distance():
    plan = build_full_plan(hgx_doc(), nodes=2, tp=8)
    assert plan["env"]["NCCL_NET_GDR_LEVEL"]["value"] == "PIX"
    # one NIC on a different switch: GPUs 2,3 meet it at the host bridge -> keep NCCL's PXB limit, warn
    doc = pcie_pairs_doc(n_gpus=4, pairs=((0, 1), (2, 3)), nic_switch=0)
    plan = build_full_plan(doc, nodes=2, tp=2)
    assert plan["env"]["NCCL_NET_GDR_LEVEL"]["value"] == "PXB"
    assert any("no GPUDirect RDMA" in w for w in plan["warnings"])


def test_cuda_device_order_when_nvml_order_is_not_pci_order():
    doc = hgx_doc()
    g0, g1 = doc["gpus"][0], doc["gpus"][1]
    g0["pci_bus_id"], g1["pci_bus_id"] = g1["pci_bus_id"], g0["pci_bus_id"]
    v = pview.node_view(doc)
    idx = penv.cuda_indices(v)
    assert idx[0] == 1 and idx[1] == 0
    plan = build_full_plan(doc, nodes=1, tp=8)
    assert plan["env"]["CUDA_VISIBLE_DEVICES"]["value"].startswith("1,0,")
    assert any("PCI bus order" in w for w in plan["warnings"])


def test_vm_flat_tree_gets_a_topology_file_that_imports_back(tmp_path):
    from gpucomm.probes.formats.nccl_xml import parse_nccl_xml

    doc = vm_flat_doc()
    v = pview.node_view(doc)
    assert penv.flat_pcie(v)
    plan = build_full_plan(doc, nodes=2, tp=8, topo_file_path="/opt/nccl-topo.xml")
    assert plan["env"]["NCCL_TOPO_FILE"]["value"] == "/opt/nccl-topo.xml"
    text = plan["files"]["nccl-topo.xml"]
    assert "ffff:ff:01.0" in text and not text.startswith("<?xml")
    back = parse_nccl_xml(text, path="nccl-topo.xml")
    by_bus = {g["pci_bus_id"]: g["index"] for g in back["gpus"]}
    for g in doc["gpus"]:
        nic = v.gpu_nics[g["index"]][0]
        assert back["matrix"][f"GPU{by_bus[g['pci_bus_id']]}"][nic] == "PIX", (g["index"], nic)
    # NVLink survives the skeleton
    assert back["matrix"]["GPU0"]["GPU1"].startswith("NV")
    # The CLI prints it
    r = run_cli("plan", _save(doc, tmp_path), "--nodes", "2", "--tp", "8", "--emit", "nccl-xml")
    assert r.code == 0 and r.stdout == text


def test_vm_with_numa_minus_one_is_flat_but_bare_metal_is_not(tmp_path):
    assert penv.flat_pcie(pview.node_view(vm_flat_doc(n_gpus=2, n_nics=1, numa_minus_one=True)))
    assert not penv.flat_pcie(pview.node_view(hgx_doc()))
    r = run_cli("plan", _save(hgx_doc(), tmp_path), "--tp", "8", "--emit", "nccl-xml")
    # bare metal: the XML NCCL detects itself, saying so (issue 29: never exit 3 and no output)
    assert r.code == 0 and "NCCL would find the same on its own" in r.stdout


def test_p2p_disabled_by_nvml():
    plan = build_full_plan(pcie_pairs_doc(pairs=(), p2p_disabled=True), nodes=1, tp=2)
    assert plan["env"]["NCCL_P2P_DISABLE"]["value"] == "1"
    # NVLink pairs fine, PCIe P2P refused: restrict P2P to NVLink
    doc = pcie_pairs_doc(pairs=((0, 2), (1, 3)), p2p_disabled=True)   # PIX pairs (0,1), (2,3) refused
    for a, b in ((0, 2), (1, 3)):
        doc["gpus"][a]["p2p"][doc["gpus"][b]["pci_bus_id"]] = "OK"
        doc["gpus"][b]["p2p"][doc["gpus"][a]["pci_bus_id"]] = "OK"
    plan = build_full_plan(doc, nodes=1, tp=4)
    assert plan["env"]["NCCL_P2P_LEVEL"]["value"] == "NVL"
    # SYS pairs that NVML calls unsupported are normal (NCCL would not use P2P there)
    d2 = pcie_pairs_doc(pairs=(), numa_nodes=2)
    d2["gpus"][0]["p2p"] = {d2["gpus"][3]["pci_bus_id"]: "NOT_SUPPORTED"}
    assert d2["matrix"]["GPU0"]["GPU3"] == "SYS"
    plan = build_full_plan(d2, nodes=1, tp=2)
    assert "NCCL_P2P_DISABLE" not in plan["env"] and "NCCL_P2P_LEVEL" not in plan["env"]


def test_consumer_gpus_without_p2p_info_get_a_note():
    doc = pcie_pairs_doc(pairs=(), name="NVIDIA GeForce RTX 4090", cc="8.9")
    plan = build_full_plan(doc, nodes=1, tp=4)
    assert any("consumer GPUs" in w for w in plan["warnings"])


def test_mig_plan_warns_and_refuses_tp(tmp_path):
    doc = hgx_doc(mig=True)
    p = tmp_path / "mig.json"
    p.write_text(json.dumps(doc))
    r = run_cli("plan", str(p), "--tp", "2")
    assert r.code == 4 and "MIG" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("plan", str(p), "--format", "json")
    assert r.code == 0 and any("MIG" in w for w in r.json()["warnings"])


def test_numa_binding_identical_under_torchrun_srun_mpirun():
    doc = hgx_doc()
    plan = build_full_plan(doc, nodes=2, tp=8, hosts=["a", "b"])
    binding = {b["local_rank"]: b for b in plan["binding"]}
    v = pview.node_view(doc)
    # wrapper (torchrun --no-python / srun / mpirun all run it)
    wrapper = plan["launch"]["wrapper"]
    cases = dict(re.findall(r"^  (\d+)\) GPUCOMM_CPUS=([^;]*);", wrapper, re.M))
    assert {int(k): v_ for k, v_ in cases.items()} == {k: b["cpus"] for k, b in binding.items()}
    # srun --cpu-bind=mask_cpu: one mask per local task, the same CPUs
    m = re.search(r"--cpu-bind=verbose,mask_cpu:(\S+)", plan["launch"]["slurm"])
    masks = m.group(1).split(",")
    for lr, mask in enumerate(masks):
        cpus = [i for i in range(256) if int(mask, 16) >> i & 1]
        assert cpus == parse_cpulist(binding[lr]["cpus"])
    assert "--mem-bind=map_mem:0,0,0,0,1,1,1,1" in plan["launch"]["slurm"]
    # rankfile: logical cores (hwloc numbering) of the same CPU sets
    core_of = pbind.core_map(v)
    cores = sorted(set(core_of.values()))
    for line in plan["launch"]["rankfile"].splitlines():
        if line.startswith("rank "):
            r, host, slot = re.match(r"rank (\d+)=(\S+) slot=(\S+)", line).groups()
            lr = int(r) % 8
            want = sorted({cores.index(core_of[c]) for c in parse_cpulist(binding[lr]["cpus"])})
            assert parse_cpulist(slot) == want
            assert host == ("a" if int(r) < 8 else "b")
    # torchrun's own --numa-binding=exclusive gives these sets (cuda:i = local rank i)
    assert "--numa-binding=exclusive" in plan["launch"]["torchrun"]


def test_torchrun_falls_back_to_no_binding_without_numa():
    doc = hgx_doc()
    for g in doc["gpus"]:
        g["numa_node"] = None
        g["numa_affinity"] = []
        g["cpu_affinity"] = None
    plan = build_full_plan(doc, nodes=1, tp=8)
    assert "--numa-binding" not in plan["launch"]["torchrun"].splitlines()[-1]
    assert any("NUMA/CPU affinity unknown" in w for w in plan["warnings"])


# --------------------------------------------------------------------------------------------
# Emitted shell is valid and does what it says
@pytest.fixture(scope="module")
def hgx_plan():
    return build_full_plan(hgx_doc(), nodes=2, tp=8, pp=2)


@pytest.mark.parametrize("kind", ["torchrun", "slurm", "wrapper"])
def test_scripts_parse_with_bash(hgx_plan, tmp_path, kind):
    f = tmp_path / f"{kind}.sh"
    f.write_text(hgx_plan["launch"][kind])
    r = subprocess.run(["bash", "-n", str(f)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr


def test_env_emit_parses_and_exports(hgx_plan, tmp_path):
    f = tmp_path / "env.sh"
    f.write_text(penv.env_shell(hgx_plan))
    r = subprocess.run(["bash", "-c", f"source {f} && echo \"$NCCL_IB_HCA|$CUDA_DEVICE_ORDER\""],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout.strip() == hgx_plan["env"]["NCCL_IB_HCA"]["value"] + "|PCI_BUS_ID"


def _small_plan(**kw):
    """Two GPUs on a one-NUMA-node host whose CPUs are this machine's first two (0-1), so that the
    binding really applies here."""
    doc = hgx_doc(n_gpus=2, numa_nodes=1, cpus_per_numa=2, smt=False)
    return build_full_plan(doc, nodes=1, tp=1, **kw)


def test_wrapper_runs_and_binds(tmp_path):
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs 2 CPUs")
    plan = _small_plan()
    w = tmp_path / launch.WRAPPER_NAME
    w.write_text(plan["launch"]["wrapper"])
    w.chmod(w.stat().st_mode | stat.S_IEXEC)
    probe = ["bash", "-c", 'grep Cpus_allowed_list /proc/self/status; echo "$LOCAL_RANK $CUDA_VISIBLE_DEVICES $OMP_NUM_THREADS $RANK"']
    env = dict(os.environ, SLURM_LOCALID="1", SLURM_PROCID="1", SLURM_NTASKS="2")
    env.pop("LOCAL_RANK", None)
    env.pop("RANK", None)
    r = subprocess.run([str(w)] + probe, capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[-1] == "1 0,1 1 1"
    if shutil.which("numactl") or shutil.which("taskset"):
        assert lines[0].split()[-1] == "1"     # bound to CPU 1
    env["GPUCOMM_CPU_BIND"] = "none"
    r = subprocess.run([str(w)] + probe, capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 0 and r.stdout.splitlines()[0].split()[-1] != "1" or os.cpu_count() == 1
    bad = dict(env, SLURM_LOCALID="7")
    r = subprocess.run([str(w), "true"], capture_output=True, text=True, env=bad, timeout=30)
    assert r.returncode == 2 and "not in this plan" in r.stderr


@pytest.mark.parametrize("torch_version,bind", [
    ("2.13.0+cpu", ["--numa-binding=exclusive", "train.py"]),
    ("2.5.1", ["--no-python", "./gpucomm-rank.sh", "python", "train.py"]),
    (None, ["--no-python", "./gpucomm-rank.sh", "python", "train.py"]),
])
def test_torchrun_script_runs_with_a_stub_torchrun(tmp_path, torch_version, bind):
    # --numa-binding only where the torch the plan is made with has it (torch >= 2.9), else the wrapper
    plan = build_full_plan(hgx_doc(), nodes=2, tp=8, hosts=["n1", "n2"], command="train.py --lr 3e-4",
                           torch_version=torch_version)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    stub = bindir / "torchrun"
    stub.write_text('#!/bin/bash\necho "$CUDA_VISIBLE_DEVICES $NCCL_IB_HCA"\nprintf "%s\\n" "$@"\n')
    stub.chmod(0o755)
    s = tmp_path / "run.sh"
    s.write_text(plan["launch"]["torchrun"])
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", NODE_RANK="1")
    r = subprocess.run(["bash", str(s)], capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == "0,1,2,3,4,5,6,7 " + plan["env"]["NCCL_IB_HCA"]["value"]
    assert out[1:] == ["--nnodes=2", "--nproc-per-node=8", "--node-rank=1", "--master-addr=n1", "--master-port=29500",
                       *bind, "--lr", "3e-4"]
    if torch_version is None:
        assert "needs torch >= 2.9" in plan["launch"]["torchrun"]


def _slurm_env(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=gpucommtest\nSlurmctldHost=localhost\nSlurmctldPort=6999\nMessageTimeout=1\n"
                    "SelectType=select/cons_tres\nGresTypes=gpu\nTaskPlugin=task/affinity\n"
                    "NodeName=node[01-16] CPUs=128 Gres=gpu:8 State=UNKNOWN\nPartitionName=debug Nodes=node[01-16] Default=YES\n")
    return dict(os.environ, SLURM_CONF=str(conf))


@pytest.mark.skipif(not shutil.which("sbatch"), reason="Slurm client not installed")
def test_sbatch_accepts_the_script(hgx_plan, tmp_path):
    env = _slurm_env(tmp_path)
    f = tmp_path / "job.sh"
    f.write_text(hgx_plan["launch"]["slurm"])
    r = subprocess.run(["sbatch", "--test-only", str(f)], capture_output=True, text=True, env=env, timeout=60)
    # Every #SBATCH option parsed: sbatch got as far as contacting the (absent) controller.
    assert "unrecognized option" not in r.stderr and "invalid" not in r.stderr.lower(), r.stderr
    assert "Unable to contact slurm controller" in r.stderr, r.stderr
    # and a broken option is caught the same way (the check can fail)
    bad = tmp_path / "bad.sh"
    bad.write_text(hgx_plan["launch"]["slurm"].replace("#SBATCH --exclusive", "#SBATCH --exclusiv-typo"))
    r = subprocess.run(["sbatch", "--test-only", str(bad)], capture_output=True, text=True, env=env, timeout=60)
    assert "unrecognized option" in r.stderr


@pytest.mark.skipif(not shutil.which("srun"), reason="Slurm client not installed")
def test_srun_accepts_the_step_options(hgx_plan, tmp_path):
    env = _slurm_env(tmp_path)
    line = next(l for l in hgx_plan["launch"]["slurm"].splitlines() if l.startswith("srun "))
    opts = [t for t in line.split()[1:] if t.startswith("--")]
    r = subprocess.run(["srun", "--test-only", "-N", "2", "-n", "16"] + opts + ["true"], capture_output=True,
                       text=True, env=env, timeout=60)
    assert "Unable to contact slurm controller" in r.stderr, r.stderr
    r = subprocess.run(["srun", "--test-only", "-N", "1", "--gpu-bind=bogus", "true"], capture_output=True,
                       text=True, env=env, timeout=60)
    assert "Invalid --gpu-bind" in r.stderr


@pytest.mark.skipif(not shutil.which("scontrol"), reason="Slurm client not installed")
def test_slurm_hostfile_lines_for_cluster_order(tmp_path):
    env = _slurm_env(tmp_path)
    plan = build_full_plan(hgx_doc(), nodes=3, tp=8, hosts=["node03", "node01", "node02"])
    s = plan["launch"]["slurm"]
    expr = re.search(r"GPUCOMM_HOSTS=(\S+)", s).group(1).strip("'")
    r = subprocess.run(["scontrol", "show", "hostnames", expr], capture_output=True, text=True, env=env, timeout=30)
    assert r.stdout.split() == ["node03", "node01", "node02"]
    assert "--distribution=arbitrary" in s and "#SBATCH --nodelist=node[01-03]" in s


@pytest.mark.skipif(not shutil.which("mpirun"), reason="Open MPI not installed")
def test_mpirun_applies_the_rankfile(tmp_path):
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs 2 CPUs")
    plan = _small_plan(hosts=["localhost"])
    rf = tmp_path / "rankfile"
    rf.write_text(plan["launch"]["rankfile"])
    cmd = ["mpirun", "--allow-run-as-root", "-np", "2", "--rankfile", str(rf), "bash", "-c",
           'echo "$OMPI_COMM_WORLD_RANK $(grep Cpus_allowed_list /proc/self/status | cut -f2)"']
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0 and "not enough slots" in (r.stdout + r.stderr).lower():
        pytest.skip("Open MPI refuses to oversubscribe here")
    assert r.returncode == 0, r.stdout + r.stderr
    got = dict(l.split() for l in r.stdout.strip().splitlines())
    assert got == {"0": plan["binding"][0]["cpus"], "1": plan["binding"][1]["cpus"]}


def test_plan_json_validates_against_the_shipped_schema(hgx_plan):
    jsonschema = pytest.importorskip("jsonschema")
    from pathlib import Path

    from gpucomm import planners

    schema = json.loads((Path(planners.__file__).parent / "schema" / "plan.schema.json").read_text())
    jsonschema.validate(hgx_plan, schema)
    broken = dict(hgx_plan, parallelism=dict(hgx_plan["parallelism"], tp=0))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def _save(doc, tmp_path):
    path = tmp_path / "plan-test.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return str(path)


def test_down_rail_nic_degrades_to_one_shared_nic():
    # GPU3's NIC is down: it shares the nearest NIC instead of collecting its NUMA node's rail NICs,
    # and the down NIC is not in NCCL_IB_HCA.
    doc = hgx_doc()
    doc["nics"][3]["ports"][0]["state"] = "DOWN"
    plan = build_full_plan(doc, nodes=2, tp=8)
    nics = {lr["gpu"]: lr["nics"] for lr in plan["local_ranks"]}
    assert len(nics[3]) == 1 and nics[3][0] in ("mlx5_0", "mlx5_1", "mlx5_2")
    assert all(nics[g] == [f"mlx5_{g}"] for g in range(8) if g != 3)
    assert "mlx5_3" not in plan["env"]["NCCL_IB_HCA"]["value"]
    assert any("mlx5_3" in w for w in plan["warnings"])


def test_gb200_keeps_gpudirect_over_c2c():
    from gpucomm.probes.examples import list_examples
    from gpucomm.probes.load import load_topology

    if "gb200-tray" not in list_examples():
        pytest.skip("gb200-tray not installed")
    plan = build_full_plan(load_topology("example:gb200-tray"), nodes=2, tp=4)
    assert plan["env"]["NCCL_NET_GDR_C2C"]["value"] == "1"
    assert "NCCL_NET_GDR_LEVEL" not in plan["env"]      # a PXB limit would switch GDR off on P2C paths
    # one 400G IB rail NIC per GPU, not the 200G Ethernet ports; CPUs of the GPU's Grace, split in two
    assert [len(lr["nics"]) for lr in plan["local_ranks"]] == [1, 1, 1, 1]
    assert [lr["cpus"] for lr in plan["local_ranks"]] == ["0-35", "36-71", "72-107", "108-143"]
    # torch would read the GPU's memory-only NUMA node: no --numa-binding, the wrapper binds instead
    last = plan["launch"]["torchrun"].splitlines()[-1]
    assert "--numa-binding" not in last and "--no-python ./gpucomm-rank.sh python train.py" in last


def test_rankfile_logical_cores_follow_hwloc_order_on_interleaved_numbering():
    """Regression: with the interleaved numbering of many dual-socket BIOSes (NUMA 0 = even cpus)
    rankfile slots were the cores' OS numbers; hwloc's logical cores go package by package, so
    socket 0's cores are L#0..L#n-1 whatever their OS ids (slot=1,3,5 landed on socket 0)."""
    doc = hgx_doc()
    # 2 sockets x 4 cores x 2 threads, interleaved: socket 0 = even cpus, siblings c and c+8
    doc["numa_nodes"][0]["cpus"] = "0,2,4,6,8,10,12,14"
    doc["numa_nodes"][1]["cpus"] = "1,3,5,7,9,11,13,15"
    doc["numa_nodes"] = doc["numa_nodes"][:2]
    plan = build_full_plan(doc, nodes=1, tp=8)
    slots = dict(re.findall(r"^rank (\d+)=\S+ slot=(\S+)$", plan["launch"]["rankfile"], re.M))
    # 4 ranks per socket, 4 cores per socket: one core (two threads) each
    assert [lr["cpus"] for lr in plan["local_ranks"]] == ["0,8", "2,10", "4,12", "6,14", "1,9", "3,11", "5,13", "7,15"]
    assert [slots[str(r)] for r in range(8)] == ["0", "1", "2", "3", "4", "5", "6", "7"]


def test_rankfile_slots_on_the_interleaved_capture():
    from support import CAPTURES
    from gpucomm.probes.load import load_topology

    doc = load_topology(str(CAPTURES / "topo" / "09_a100-sxm4-80gb-x8_8nic.txt"))
    plan = build_full_plan(doc, nodes=2, tp=8)
    slots = dict(re.findall(r"^rank (\d+)=\S+ slot=(\S+)$", plan["launch"]["rankfile"], re.M))
    # NUMA 0 = cpus 0,2,...,10 = socket 0 = hwloc cores L#0-2; NUMA 1 = L#3-5
    assert {slots[str(r)] for r in (0, 1, 2, 3, 8, 11)} == {"0-2"}
    assert {slots[str(r)] for r in (4, 5, 6, 7, 12, 15)} == {"3-5"}


def test_smi_capture_nics_are_rdma_devices():
    """Regression: an `nvidia-smi topo -m` capture lists NICs by RDMA device name (mlx5_0) with no
    ports; they were taken for plain Ethernet: no NCCL_IB_HCA, a 'no RDMA NIC' warning, and
    NCCL_SOCKET_IFNAME='=mlx5_0' (not a network interface at all)."""
    from support import CAPTURES
    from gpucomm.probes.load import load_topology

    doc = load_topology(str(CAPTURES / "topo" / "09_a100-sxm4-80gb-x8_8nic.txt"))
    plan = build_full_plan(doc, nodes=2, tp=8)
    env = plan["env"]
    assert env["NCCL_IB_HCA"]["value"] == "=" + ",".join(f"mlx5_{i}:1" for i in range(8))
    assert env["NCCL_NET_GDR_LEVEL"]["value"] == "PXB"
    assert "NCCL_SOCKET_IFNAME" not in env
    assert not any("without RDMA" in w for w in plan["warnings"])
    assert [lr["nics"] for lr in plan["local_ranks"]] == [[f"mlx5_{i}"] for i in range(8)]
    # a plain interface stays plain
    assert not facts.nic_is_rdma({"name": "eno1", "netdev": "eno1", "ports": []})
    assert not facts.nic_is_rdma({"name": "mlx5_0", "rdma": False})
    assert facts.nic_is_rdma({"name": "mlx5_bond_0", "ports": []}) and facts.nic_is_rdma({"name": "rocep49s0f0"})


def test_rankfile_rank_without_cpus_gets_every_core_not_every_thread():
    """Regression: a rank with unknown CPUs got slot=0-223 on a 112-core SMT node (one slot per
    hardware thread); rankfile slots are logical *cores*."""
    doc = hgx_doc()
    for g in doc["gpus"]:
        g["numa_node"] = None
        g["numa_affinity"] = []
        g["cpu_affinity"] = None
    plan = build_full_plan(doc, nodes=1, tp=8)
    ncores = len(set(pbind.core_map(pview.node_view(doc)).values()))
    assert ncores == 112
    slots = set(re.findall(r"^rank \d+=\S+ slot=(\S+)$", plan["launch"]["rankfile"], re.M))
    assert slots == {f"0-{ncores - 1}"}


def test_odd_nic_in_a_shared_set_is_not_a_rail():
    """Regression: on Azure ND A100 v4 (capture 85) GPU2 and GPU3 are NODE to mlx5_2, mlx5_3 and the
    9th NIC mlx5_8; dealing the three out gave GPU2 two NICs (mlx5_2 and mlx5_8) and put the odd
    NIC in NCCL_IB_HCA.  Rails are symmetric: one each, the odd one unused."""
    from support import CAPTURES
    from gpucomm.probes.load import load_topology

    doc = load_topology(str(CAPTURES / "topo" / "85_a100-sxm4-80gb-x8_9nic_azure-nd-a100-v4_esc.txt"))
    plan = build_full_plan(doc, nodes=2, tp=8)
    assert [lr["nics"] for lr in plan["local_ranks"]] == [[f"mlx5_{i}"] for i in range(8)]
    assert "mlx5_8" not in plan["env"]["NCCL_IB_HCA"]["value"]
    # two HCAs per GPU (an even split) are still both kept
    doc2 = hgx_doc(n_gpus=4, numa_nodes=1)
    for i in range(4):
        extra = dict(doc2["nics"][i], name=f"mlx5_{4 + i}", netdev=f"ibp{4 + i}s0",
                     pci_bus_id=f"0000:{0xe0 + i:02x}:00.0")
        doc2["nics"].append(extra)
    compute_matrix(doc2)
    finalize(doc2)
    v = pview.node_view(doc2)
    assert all(len(v.gpu_nics[g]) == 2 for g in range(4))


def test_nccl_xml_skeleton_nics_never_named_by_bus_id():
    """Regression: an NCCL XML skeleton's bare <pci class="0x02..."> NICs are known only by bus id;
    that id went into NCCL_SOCKET_IFNAME='=0000:10:1b.0' (not an interface name: Linux forbids ':')
    and, for InfiniBand/EFA NICs, they were taken for plain Ethernet ("falls back to TCP")."""
    from support import CAPTURES
    from gpucomm.probes.load import load_topology

    for name in ("aws-p4d-24xl-topo.xml", "azure-ndv4-topo.xml", "oci-topo-flattened.xml"):
        doc = load_topology(str(CAPTURES / "ncclxml" / name))
        plan = build_full_plan(doc, nodes=2)
        for var in ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"):
            if var in plan["env"]:
                assert not re.search(r"[0-9a-f]{4}:[0-9a-f]{2}:", plan["env"][var]["value"]), (name, var)
    # EFA (1d0f:efa0) and InfiniBand-class (0x0207) NICs are RDMA: no "TCP sockets" claim
    for name in ("aws-p4d-24xl-topo.xml", "azure-ndv4-topo.xml"):
        plan = build_full_plan(load_topology(str(CAPTURES / "ncclxml" / name)), nodes=2)
        assert not any("TCP sockets" in w for w in plan["warnings"]), name
        assert any("no device name" in w for w in plan["warnings"]), name
    assert not penv._valid_ifname("0000:10:1b.0") and penv._valid_ifname("enp31s0np0")
    assert not penv._valid_ifname("a-very-long-interface-name")
