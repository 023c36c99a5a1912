"""One function per fact (gpucomm.probes.facts), read once through the typed view
(gpucomm.probes.topology): the odd cases go through every command that uses the fact, and the
commands agree -- the same value, and the same named assumption when the value is unknown."""
from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpucomm.probes import facts
from gpucomm.probes.model import dumps_json
from gpucomm.probes.topology import Topology
from support import hgx_doc, pcie_pairs_doc, run_cli


def _write(tmp_path, doc, name="t.json"):
    p = tmp_path / name
    p.write_text(dumps_json(doc), encoding="utf-8")
    return str(p)


def _ok(*args):
    r = run_cli(*args)
    assert r.code == 0, (args, r.stderr)
    return r


# --------------------------------------------------------------------------------------------
# compute capability: every spelling is one number everywhere
@pytest.mark.parametrize("cc", ["9.0", [9, 0], (9, 0), 90, "sm_90", 9.0])
def test_compute_capability_spellings(cc):
    assert facts.compute_capability(cc) == 90


@given(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=8),
                 st.lists(st.integers(), max_size=3)))
def test_compute_capability_never_crashes(v):
    sm = facts.compute_capability(v)
    assert sm is None or 10 <= sm < 1000


def test_compute_capability_list_agrees_in_every_command(tmp_path):
    doc = hgx_doc(name=None, cc=[9, 0])   # no name: the [9, 0] is all there is
    path = _write(tmp_path, doc)
    assert {g.sm for g in Topology.of(doc).gpus} == {90}
    pred = json.loads(_ok("predict", path, "--format", "json").stdout)
    assert pred["graph"]["cc"] == 90
    rings = json.loads(_ok("rings", path, "--format", "json").stdout)
    # NVLink per link at sm90 (20.6 GB/s): 18 links to the NVSwitch = 370.8 GB/s per GPU
    assert not any("compute capability" in a for a in rings["assumptions"])
    paths = json.loads(_ok("paths", path, "--format", "json").stdout)
    nvl = [p for p in paths["rows"] if p["type"] == "NVL"]
    assert nvl and all(p["bw_GBps"] == pytest.approx(370.8) for p in nvl)
    xml = _ok("show", path, "--format", "nccl-xml").stdout
    assert 'sm="90"' in xml
    plan = json.loads(_ok("plan", path, "--tp", "8", "--model", "llama-8b", "--format", "json").stdout)
    assert not any("GPU peak unknown" in a for a in plan["estimate"]["assumptions"])


# --------------------------------------------------------------------------------------------
# the inter-socket bandwidth of an unidentified CPU: one default, one sentence
def _two_socket_unknown_cpu():
    doc = pcie_pairs_doc(n_gpus=4, pairs=(), numa_nodes=2)
    for k in ("cpu_vendor", "cpu_model", "cpu_arch"):
        doc["host"][k] = None
    doc["links"] = [l for l in doc["links"] if l["kind"] != "smp"]
    return doc


def test_unknown_cpu_agrees_in_every_command(tmp_path):
    doc = _two_socket_unknown_cpu()
    path = _write(tmp_path, doc)
    text = facts.assumption("cpu")
    paths = json.loads(_ok("paths", path, "--format", "json").stdout)
    sys_paths = [p for p in paths["rows"] if p["type"] == "SYS"]
    assert sys_paths and all(p["bw_GBps"] <= facts.DEFAULT_INTER_CPU_BW for p in sys_paths)
    assert text in paths["assumptions"]
    rings = json.loads(_ok("rings", path, "--format", "json").stdout)
    assert text in rings["assumptions"]
    pred = json.loads(_ok("predict", path, "--format", "json").stdout)
    assert text in pred["graph"]["notes"]
    # an identified CPU: NCCL's value, no assumption
    doc["host"].update(cpu_vendor="GenuineIntel", cpu_model="Intel(R) Xeon(R) Platinum 8480+")
    path = _write(tmp_path, doc, "known.json")
    paths = json.loads(_ok("paths", path, "--format", "json").stdout)
    assert text not in paths["assumptions"]
    # GPU pairs across the sockets (the GPU <-> NIC rows are NCCL's assumed 10 Gb/s socket port)
    assert {p["bw_GBps"] for p in paths["rows"] if p["type"] == "SYS" and p["dst"].startswith("GPU")
            and p["src"].startswith("GPU")} == {facts.SRP_QPI_BW}


# --------------------------------------------------------------------------------------------
# RDMA-ness: plan (NCCL_IB_HCA), placement (compute NICs) and doctor use the same rule
def test_eth_nic_with_guid_is_rdma_everywhere(tmp_path):
    nic = {"name": "eth0", "guid": "0x1234"}
    assert facts.nic_is_rdma(nic)
    doc = hgx_doc(n_gpus=2, numa_nodes=1, nics=False)
    doc["nics"].append({"name": "eth0", "guid": "0x1234", "netdev": None, "pci_bus_id": None, "numa_node": 0,
                        "link_layer": None, "ports": [], "parent": None})
    path = _write(tmp_path, doc)
    topo = Topology.of(doc)
    assert topo.nic("eth0").rdma
    env = _ok("plan", path, "--nodes", "2", "--tp", "2", "--emit", "env").stdout
    assert "NCCL_IB_HCA='=eth0" in env and "NCCL_SOCKET_IFNAME='=eth0'" not in env
    from gpucomm.planners.health.doctor import RULES
    from gpucomm.planners.placement.nics import compute_nics

    assert "eth0" in compute_nics({"eth0": topo.nic("eth0")})
    # the doctor's IB rules look at the same NICs (a down port on it would be reported)
    d2 = copy.deepcopy(doc)
    d2["nics"][0]["ports"] = [{"port": 1, "state": "DOWN", "rate_gbps": 100.0}]
    d2["nics"].append(dict(d2["nics"][0], name="eth1", guid="0x5678",
                           ports=[{"port": 1, "state": "ACTIVE", "rate_gbps": 100.0}]))
    findings = RULES["ib-port-down"](Topology.of(d2), {})
    assert [f["subject"] for f in findings] == ["eth0/1"]


# --------------------------------------------------------------------------------------------
# an unknown NIC rate: the same assumption in predict, rings and plan -- never a refusal
def test_unknown_nic_rate_agrees_in_every_command(tmp_path):
    doc = hgx_doc()
    for n in doc["nics"]:
        n["ports"] = [{"port": 1, "state": "ACTIVE", "rate_gbps": None}]
    path = _write(tmp_path, doc)
    text = facts.assumption("nic-rate", names=[f"mlx5_{i}" for i in range(8)], gbps=400.0)
    pred = json.loads(_ok("predict", path, "--nodes", "2", "--format", "json").stdout)
    assert text in pred["graph"]["notes"]
    rings = json.loads(_ok("rings", path, "--nodes", "2", "--format", "json").stdout)
    assert text in rings["assumptions"]
    plan = json.loads(_ok("plan", path, "--nodes", "2", "--tp", "8", "--model", "llama-8b",
                          "--format", "json").stdout)
    assert text in plan["warnings"]
    # one node: no NIC carries traffic, so predict does not mention it
    pred1 = json.loads(_ok("predict", path, "--format", "json").stdout)
    assert not any("NIC speed" in n for n in pred1["graph"]["notes"])


# --------------------------------------------------------------------------------------------
# the view: cleaning names what it dropped; facts are single-sourced
def test_view_names_the_problems_it_cleaned():
    doc = hgx_doc(n_gpus=2)
    doc["gpus"].append({"index": "x"})
    doc["links"].append({"a": "GPU0", "b": "GPU0", "kind": "nvlink", "bw_GBps": 1.0})
    doc["links"].append({"a": "GPU0", "b": "GPU1", "kind": "warp", "bw_GBps": 1.0})
    doc["links"][0]["bw_GBps"] = float("nan")
    topo = Topology.of(doc)
    text = " | ".join(topo.problems)
    assert "gpus[2]" in text and "linked to itself" in text and "unknown kind 'warp'" in text
    assert "not a usable bandwidth" in text
    assert len(topo.gpus) == 2


# --------------------------------------------------------------------------------------------
# an EFA NIC: NCCL's network latency is what the aws-ofi-nccl plugin reports (75 us), and NCCL's
# tuning model -- so predict's choice -- moves with it (ncclsim, NCCL 2.30.7, on the pinned XML:
# 64 KiB on 2 nodes Tree/LL instead of Ring/LL; 1 MiB on 16 nodes Tree/Simple instead of Ring/LL)
def test_efa_network_latency_reaches_nccls_tuning(tmp_path):
    from support import CAPTURES
    from gpucomm.planners.nccl.comm import nccl_comm, pinned_xml
    from gpucomm.probes.load import load_topology

    src = str(CAPTURES / "ncclxml" / "aws-p4d-24xl-topo.xml")
    topo = Topology.of(load_topology(src))
    assert all(facts.nic_is_efa(n.rec) and facts.nic_net_latency_us(n.rec) == 75.0 for n in topo.nics)
    xml = pinned_xml(topo)
    assert xml.count(' latency="75"') == len(topo.nics) == 4
    assert nccl_comm(topo, nodes=2).graphs["ring"].latency_inter == 75.0
    text = facts.assumption("net-latency", names=[n.name for n in topo.nics], us=75.0)
    for nodes, size, algo in ((2, "64KiB", "tree/LL"), (16, "1MiB", "tree/Simple")):
        pred = json.loads(_ok("predict", src, "--nodes", str(nodes), "--size", size, "--format", "json").stdout)
        r = pred["rows"][0]
        assert f"{r['algorithm']}/{r['protocol']}" == algo, (nodes, r)
        assert text in pred["graph"]["notes"]
    # an NCCL dump says what the plugin reported: its value wins (0 here), no assumption
    doc = copy.deepcopy(topo.doc)
    for n in doc["nics"]:
        n["nccl_attrs"] = {"latency": "0.000000"}
    assert ' latency="75"' not in pinned_xml(Topology.of(doc))
    assert nccl_comm(doc, nodes=2).graphs["ring"].latency_inter == 0
    # InfiniBand: NCCL's own transport reports 0
    assert facts.nic_net_latency_us({"name": "mlx5_0", "link_layer": "InfiniBand"}) is None


# --------------------------------------------------------------------------------------------
# Each fact defined once: facts.py, and nowhere else
def _code_constants(tree):
    """(assigned names with a literal value, string constants, float constants) of a module's code,
    docstrings left out."""
    import ast

    docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    names, strings, floats = [], [], []
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and all(isinstance(c, ast.Constant) for c in ast.walk(n.value)
                                             if isinstance(c, ast.expr) and not isinstance(c, (ast.Tuple, ast.List,
                                                                                               ast.Dict, ast.Set,
                                                                                               ast.UnaryOp, ast.USub))):
            names += [(t.id, n.lineno) for t in n.targets if isinstance(t, ast.Name)]
        elif isinstance(n, ast.Constant) and id(n) not in docs:
            if isinstance(n.value, str):
                strings.append((n.value, n.lineno))
            elif isinstance(n.value, float):
                floats.append((n.value, n.lineno))
    return names, strings, floats


def test_hardware_facts_are_defined_once():
    """A constant facts.py defines is given a literal value nowhere else; NCCL's PCIe speed table
    (kvDictPciGen) and per-link NVLink bandwidths (ncclTopoNVLinkBw) are spelled only there.  (They
    were in four and two places: facts, the NCCL XML reader, NCCL's system model and pinning.)"""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    mine = {k for k, v in vars(facts).items() if k.isupper() and isinstance(v, (int, float, str, tuple, dict))}
    speeds = {k for k, _ in facts.NCCL_PCI_GEN_SPEEDS}
    nvlink = {facts.nvlink_bw_per_link(sm) for sm in (60, 70, 80, 86, 90, 100)} - {18.0, 20.0, 12.0}  # 20.6, 40.1
    found = []
    for path in sorted(p for d in ("probes", "planners", "gpucomm_cli") for p in (root / d).rglob("*.py")):
        if path == root / "probes" / "facts.py":
            continue
        names, strings, floats = _code_constants(ast.parse(path.read_text(encoding="utf-8")))
        rel = path.relative_to(root)
        found += [f"{rel}:{line} defines {n}" for n, line in names if n in mine]
        found += [f"{rel}:{line} spells {s!r}" for s, line in strings if s in speeds]
        found += [f"{rel}:{line} spells {f}" for f, line in floats if f in nvlink]
    assert nvlink == {20.6, 40.1} and len(speeds) == 11
    assert found == []


def test_nic_rate_round_trip_through_nccls_xml():
    """A NIC's rate has one unit (Gb/s) up to the two places that leave it: NCCL's system graph
    holds exactly facts.nccl_nic_GBps of the view's rate (document -> pinned XML text in Mb/s ->
    reparsed -> NCCL's float GB/s), for every NIC of the bundled examples NCCL does not fuse."""
    import struct

    from gpucomm.planners.nccl.comm import nccl_comm
    from gpucomm.planners.nccl.system import NET
    from gpucomm.probes.examples import list_examples
    from gpucomm.probes.load import load_topology

    f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]   # noqa: E731
    checked = 0
    for name in list_examples():
        topo = Topology.of(load_topology(f"example:{name}"))
        if not topo.gpus or not topo.nics:
            continue
        nets = nccl_comm(topo).rank0.topo.sys.nodes[NET]
        for net in nets:
            nic = topo.nic(net.name)
            if nic is None:
                continue            # a fused NIC (a+b): the sum of its ports' speeds
            assert net.bw == f32(facts.nccl_nic_GBps(topo.nic_gbps(nic))), (name, net.name)
            checked += 1
    assert checked >= 20
    assert facts.nic_speed_mbps(400.0) == 400000 and facts.gbps_of_mbps(400000) == 400.0
    assert facts.nccl_net_GBps(-1) == facts.NCCL_NET_FALLBACK_MBPS / 8000.0


@given(st.floats(min_value=0.001, max_value=1e5, allow_nan=False))
def test_nic_rate_unit_conversions_invert(gbps):
    mbps = facts.nic_speed_mbps(gbps)
    assert isinstance(mbps, int) and abs(mbps - gbps * 1000) <= 0.5
    back = facts.gbps_of_mbps(mbps)
    assert back is None if mbps <= 0 else back == round(mbps / 1000, 3)


def test_k8s_compute_capability_label_reads_the_view():
    """The label is the view's compute capability of GPUs whose record gives one: any spelling of
    the record (here NVML's (major, minor) pair, which used to make the label set raise) reads the
    same, an assumed one gives no label."""
    from gpucomm.planners.launch.k8s import PREFIX, node_labels

    for cc in ([9, 0], "9.0", "sm_90", 90):
        labels = node_labels(hgx_doc(name=None, cc=cc))
        assert labels[PREFIX + "gpu.compute-capability"] == "9.0", cc
    assert PREFIX + "gpu.compute-capability" not in node_labels(hgx_doc(name=None, cc=None))
