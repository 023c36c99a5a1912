"""planners/nccl/search.py (NCCL's channel search reproduced) and planners/collectives/rings.py +
ringsearch.py (our ring search over NCCL's system of the node):
the worked examples, a real NCCL log/graph dump, exactness on small machines, our rings >= NCCL on
every real topology capture and every fixture host, and ``gpucomm rings``."""
from __future__ import annotations

import itertools
import re
from typing import Optional
from itertools import permutations

import defusedxml.ElementTree as ET
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import CAPTURES, run_cli
from gpucomm.probes.errors import InputError, PlanInfeasible, TopologyError
from gpucomm.probes.examples import list_examples
from gpucomm.probes.load import load_topology
from gpucomm.probes.model import link_record

from gpucomm.planners.nccl.comm import nccl_reference
from gpucomm.planners.nccl.sysview import node_system
from gpucomm.planners.collectives.rings import search_rings
from gpucomm.planners.placement.nvldomain import job_domain_nodes
from gpucomm.planners.collectives.ringsearch import Capacity, Packer, path_loads
from support import nvswitch_document, p2p_disabled, pci_trees

# ----------------------------------------------------------------------------------------------
# connect.cc ncclTopoPostset channel counts
@pytest.mark.parametrize("sm,links,channels,search,bw", [
    (80, 12, 24, 12, 20.0),    # HGX A100: 240/40 = 6 ch, dup -> 12 @ 20, x2 -> 24 (logs: Trees [0]..[23])
    (90, 18, 24, 12, 30.0),    # HGX H100: 370.8, speed 60 -> 6 ch, dup -> 12 @ 30, x2 -> 24
    (100, 18, 32, 16, 45.0),   # DGX B200: 721.8, speed 90 -> 8 ch, dup -> 16 @ 45, x2 -> 32 (log: Channel 04/32)
])
def test_nccl_reference_worked_examples(sm, links, channels, search, bw):
    ref = nccl_reference(nvswitch_document(8, sm, links))
    assert (ref["channels"], ref["search_channels"], ref["bw_intra"]) == (channels, search, bw)
    assert ref["type_intra"] == "NVL" and ref["tree"]["search_channels"] == search
    assert ref["rings"][0]["gpus"] == [f"GPU{i}" for i in range(8)]   # NVSwitch: PCI (index) order


def test_nccl_reference_multinode_h100_with_rail_nics():
    ref = nccl_reference(nvswitch_document(8, 90, 18, nics=8, nic_gbps=400), nodes=2)
    # 8 NETs at 50 GB/s, each on its GPU's PCIe switch: one 48-GB/s channel per rail (the search's
    # speed ladder below 50), GPU->NIC through the switch (PIX); no dup (> 4 channels on sm90); x2 -> 16.
    # NCCL 2.30.7 itself (ncclsim --nodes 2 on this document's pinned XML) answers 8 x 48 PIX, 16 after setup.
    assert (ref["channels"], ref["search_channels"], ref["bw_inter"], ref["type_inter"]) == (16, 8, 48.0, "PIX")
    # NCCL_CROSS_NIC=2 (default): each channel enters through one rail and leaves through its pair, as
    # NCCL 2.30.7 prints them (mlx5_0/mlx5_1, mlx5_1/mlx5_0, ...)
    assert [r["nets"] for r in ref["rings"]][:2] == [["mlx5_0", "mlx5_1"], ["mlx5_1", "mlx5_0"]]


def _log_graph(path) -> tuple:
    text = path.read_text()
    m = re.search(r"Pattern 4, crossNic (\d+), nChannels (\d+), bw ([\d.]+)/([\d.]+), type (\w+)/(\w+)", text)
    hosts = set(re.findall(r"Rank\s+\d+ Pid\s+\d+ on (\S+) device", text))
    return int(m.group(2)), float(m.group(3)), m.group(5), m.group(6), max(1, len(hosts))


def test_nccl_reference_matches_a_real_two_node_log():
    log = CAPTURES / "nccllogs" / "panlichen-rtx3090-4node-log.log"
    nch, bw, type_intra, type_inter, nodes = _log_graph(log)
    assert (nch, bw, nodes) == (1, 4.0, 2)
    doc = p2p_disabled(load_topology(str(CAPTURES / "ncclxml" / "panlichen-rtx3090-8gpu-topo.xml")))
    ref = nccl_reference(doc, nodes=nodes)
    assert (ref["search_channels"], ref["bw_inter"], ref["type_intra"]) == (nch, bw, type_intra)
    # NCCL 2.18 printed SYS/SYS: it capped typeIntra at the current typeInter, so only the SYS pass
    # found the ring; 2.30 (modelled) lets typeIntra reach SYS while typeInter is PHB.
    assert type_inter == "SYS" and ref["type_inter"] in ("PHB", "SYS")
    # the graph NCCL dumped for that run (NCCL_GRAPH_DUMP_FILE) says the same
    root = ET.fromstring((CAPTURES / "ncclxml" / "panlichen-rtx3090-graph.xml").read_text())
    ring = next(g for g in root.iter("graph") if g.get("id") == "0")
    assert int(ring.get("nchannels")) == ref["search_channels"] and float(ring.get("speedinter")) == ref["bw_inter"]
    assert ring.get("typeintra") == ref["type_intra"]


# ----------------------------------------------------------------------------------------------
# Our search vs NCCL on every real topology capture and every fixture host
def _sources() -> list:
    out = []
    for p in sorted((CAPTURES / "ncclxml").glob("*.xml")):
        if "<graphs" in p.read_text(errors="replace")[:4096]:
            continue   # a graph dump (NCCL_GRAPH_DUMP_FILE), not a topology
        out.append((p.name, str(p)))
    for name in sorted(list_examples()):
        out.append((f"example:{name}", f"example:{name}"))
    return out


@pytest.fixture(scope="module")
def comparison() -> list:
    rows = []
    for label, src in _sources():
        doc = load_topology(src)
        if not doc["gpus"]:
            rows.append((label, None, None, None))
            continue
        for nodes in (1, 2):
            if nodes > 1 and not doc["nics"]:
                continue
            if nodes == 1 and len(doc["gpus"]) < 2:
                continue
            plan = search_rings(doc, nodes=nodes)
            # NCCL's node count: every NIC-joined domain of every node, the trays of one MNNVL clique
            # fused into one (job_domain_nodes: consecutive nodes per NVLink domain, from the fabric info)
            k = job_domain_nodes(doc, nodes)
            rows.append((label, nodes, plan, len(node_system(doc).domains()) * nodes // k))
    return rows


def _tool(name: str):
    """A module of tools/ (tools/rings_vs_ncclsim.py's accounting of what NCCL's rings carry)."""
    from support import ROOT, load_script

    return load_script(ROOT / "tools" / f"{name}.py", name)


def _table(rows: list) -> str:
    lines = [f"{'topology':38} {'nodes':>5}  {'NCCL reference':>30}  {'ours':>26}  {'ours/NCCL':>9}  method",
             "-" * 130]
    for label, nodes, plan, _ in rows:
        if plan is None:
            lines.append(f"{label:38} {'-':>5}  {'(no GPUs in this file)':>30}")
            continue
        ref = plan.nccl_reference
        r = f"{ref['channels']:>2} ch ({ref['search_channels']:>2} x {ref['bw_intra']:>5g}) = {ref['total_bw']:>6g}"
        o = f"{len(plan.channels):>2} ch (max {max(c.bw for c in plan.channels):>5g}) = {plan.total_bw:>6g}"
        ratio = plan.total_bw / ref["total_bw"] if ref["total_bw"] else float("inf")
        lines.append(f"{label:38} {nodes:>5}  {r:>30}  {o:>26}  {ratio:>9.3f}  {plan.method}")
    return "\n".join(lines) + "\n"


@pytest.mark.slow   # NCCL's search in Python on 2-node GPU subsets: tens of seconds
def test_our_rings_match_or_beat_nccl_everywhere(comparison):
    table = _table(comparison)
    print("\nRing search vs NCCL reference (total bus bandwidth, GB/s):\n" + table)
    compared = [(lab, n, p) for lab, n, p, _ in comparison if p is not None]
    assert len(compared) >= 25
    losses = {(label, nodes) for label, nodes, plan in compared
              if plan.total_bw < plan.nccl_reference["total_bw"] - 1e-6}
    # the NIC-joined domains our rings chain through are NCCL's (a split node counts per domain)
    assert [(lab, n) for lab, n, p, want in comparison if p is not None and want != p.nccl_reference["nccl_nodes"]] \
        == []
    # Ours is equal or better everywhere (NCCL's rings are also a seeded candidate; where NCCL joins a
    # node's sockets through NICs, ncclTopoCheckNet, our channels may chain through NICs too; at 2+ nodes
    # the cross-NIC variants leave by the NIC next to the chain's last GPU) -- except where NCCL's own
    # rings over-book a link: NCCL searches each NIC-joined domain on its own trimmed system, so the
    # domains' channels together can need more than a link has.  OCI's flattened 8-GPU XML at 2 nodes:
    # 4 domains whose bare NIC 0000:0c:00.0 has no GPUDirect RDMA in NCCL's XML, so NCCL routes its
    # traffic through the CPU; NCCL's 2 x 12 GB/s need 60 GB/s on a 24 GB/s PCIe uplink (they carry
    # 9.6), ours 12 fit.  A new loss names its topology here; every loss is over-booked NCCL rings.
    known = {("oci-topo-flattened.xml", 2), ("oci-topo-flattened-b4.xml", 2)}
    assert losses <= known, sorted(losses - known)
    overload = _tool("rings_vs_ncclsim")._overload
    for label, nodes, plan in compared:
        if (label, nodes) in losses:
            share, note = overload(plan)
            assert share is not None and plan.total_bw >= plan.nccl_reference["total_bw"] * share - 1e-6, note
    assert len(compared) - len(losses) >= 35
    # the search alone (not seeded by NCCL's rings) wins or ties on every one-node topology -- except
    # on the NVLink full meshes without NVSwitch (HGX 4-GPU boards, GH200 quad nodes), where NCCL's
    # rings seed the winner: listed here so that a search that learns them fails this test until
    # the list is emptied.
    seeded = sorted(lab for lab, n, p in compared if n == 1 and p.method not in ("widest-cycle", "water-filling"))
    assert seeded == ["example:alps-gh200", "example:hgx-h100-4gpu", "example:polaris"], seeded


# ----------------------------------------------------------------------------------------------
# Exactness: on small machines the widest channel is the best of all cycles
@st.composite
def small_machines(draw):
    doc = draw(pci_trees())
    gpus = [g["pci_bus_id"] for g in doc["gpus"]]
    for a, b in itertools.combinations(gpus, 2):
        if draw(st.integers(0, 4)) == 0:
            doc["links"].append(link_record(a, b, "nvlink", 20.0 * draw(st.integers(1, 4)),
                                            count=draw(st.integers(1, 4))))
    return doc


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(small_machines())
def test_widest_channel_is_exact_on_small_machines(doc):
    idx = sorted(g["index"] for g in doc["gpus"])[:6]
    if len(idx) < 2:
        return
    ns = node_system(doc, gpus=idx)
    gpus = ns.gpus
    pk = Packer(ns, gpus, False, 1e9)
    got = pk.best_channel()
    brute = max(pk.evaluate([gpus[0]] + list(p))[0] for p in permutations(gpus[1:]))
    assert got is not None and got[2] == pytest.approx(brute)


def _usage_ok(plan) -> None:
    cap = Capacity(plan.ns)
    usage: dict = {}
    for ch in plan.channels:
        assert sorted(ch.gpus) == sorted(plan.gpus)
        for s, d in plan.hops(ch):
            for e, f in path_loads(plan.ns, s, d):
                usage[e] = usage.get(e, 0.0) + f * ch.bw
    for e, u in usage.items():
        assert u <= plan.ns.capacity[e] + 1e-6, e
    assert cap.res  # the model has links at all


@pytest.mark.parametrize("src", ["example:dgx1-v100", "example:pcie-8x-consumer", "example:hgx-h100",
                                 str(CAPTURES / "ncclxml" / "azure-ndv4-topo.xml")])
def test_plans_respect_link_capacity(src):
    doc = load_topology(src)
    for nodes in (1, 2):
        plan = search_rings(doc, nodes=nodes, reference=False)
        _usage_ok(plan)
        assert all(c.bw <= plan.cap + 1e-9 for c in plan.channels)


def test_explicit_channel_count_and_gpu_subset():
    doc = load_topology("example:hgx-h100")
    auto = search_rings(doc, reference=False)
    for n in (1, 4, 24):
        plan = search_rings(doc, channels=n, reference=False)
        assert len(plan.channels) == n and plan.total_bw <= auto.total_bw + 1e-6
    assert search_rings(doc, channels=24, reference=False).total_bw == pytest.approx(auto.total_bw)
    sub = search_rings(doc, gpus=[0, 2, 5], reference=False)
    assert all(sorted(plan_idx(sub, c)) == [0, 2, 5] for c in sub.channels)


def plan_idx(plan, ch) -> list:
    return [plan.ns.nodes[g]["index"] for g in ch.gpus]


def test_nvl72_any_ring_is_optimal_and_fast_enough():
    plan = search_rings(nvswitch_document(72, 100, 18), reference=False)
    assert len(plan.channels) == 8 and plan.total_bw == pytest.approx(720.0)   # 8 channels at the 90 GB/s cap
    assert plan_idx(plan, plan.channels[0]) == list(range(72))


def test_multinode_channels_are_rail_aligned_and_start_next_to_their_nic():
    plan = search_rings(load_topology("example:hgx-h100"), nodes=2)
    assert plan.total_bw >= plan.nccl_reference["total_bw"]
    # each channel enters next to its first GPU and leaves next to its last (NCCL_CROSS_NIC=2 lets the
    # exit NIC be the pair's other rail, as NCCL 2.30.7 does on this machine)
    for ch in plan.channels:
        assert plan.ns.path(ch.nets[0], ch.gpus[0]).type in ("PIX", "PXB")
        assert plan.ns.path(ch.gpus[-1], ch.nets[1]).type in ("PIX", "PXB")
    d = plan.to_dict()
    assert d["nodes"] == 2 and len({c["nics"][0] for c in d["channels"]}) == 8


def test_search_errors():
    doc = nvswitch_document(8, 90, 18)
    with pytest.raises(InputError, match=r"no GPU 9 in topology \(has 0-7\)"):
        search_rings(doc, gpus=[0, 9])
    for bad in (0, 65, "x"):
        with pytest.raises(InputError, match="--channels"):
            search_rings(doc, channels=bad)
    with pytest.raises(PlanInfeasible, match="at least 2 GPUs"):
        search_rings(doc, gpus=[3])
    with pytest.raises(TopologyError, match="no NICs"):
        search_rings(doc, nodes=2)
    with pytest.raises(TopologyError, match="no NICs"):
        nccl_reference(doc, nodes=2)
    assert len(search_rings(nvswitch_document(8, 90, 18, nics=1), gpus=[3], nodes=2).channels) >= 1


# ----------------------------------------------------------------------------------------------
# CLI
def test_cli_rings_json_schema():
    r = run_cli("rings", "example:dgx-a100", "--format", "json")
    assert r.code == 0, r.stderr
    d = r.json()
    assert d["schema"] == "gpucomm.rings/v1"
    assert {"channels", "total_bw_GBps", "nccl_reference"} <= set(d)
    assert {"gpus", "bw_GBps", "links"} <= set(d["channels"][0])
    assert {"channels", "bw_GBps"} <= set(d["nccl_reference"])
    assert d["nccl_reference"]["channels"] == 24 and d["total_bw_GBps"] >= d["nccl_reference"]["total_bw_GBps"]
    assert sum(c["bw_GBps"] for c in d["channels"]) == pytest.approx(d["total_bw_GBps"], abs=1e-3)
    assert run_cli("rings", "example:dgx-a100", "--format", "json").stdout == r.stdout   # deterministic


@pytest.mark.slow   # NCCL's search in Python on 2-node GPU subsets: tens of seconds
def test_cli_rings_table_multinode_and_subset():
    r = run_cli("rings", "example:hgx-h100", "--nodes", "2", "--gpus", "0-3", "--channels", "2")
    assert r.code == 0, r.stderr
    assert "NCCL reference" in r.stdout and "mlx5_" in r.stdout and "GPU4" not in r.stdout


@pytest.mark.parametrize("args,code,text", [
    (("rings", "example:hgx-h100", "--gpus", "0,9"), 1, "no GPU 9 in topology (has 0-7)"),
    (("rings", "example:hgx-h100", "--gpus", "0,a"), 2, "not a GPU index"),
    (("rings", "example:hgx-h100", "--channels", "0"), 2, "'0' is not auto or a channel count 1-64"),
    (("rings", "example:hgx-h100", "--channels", "many"), 2, "--channels"),
    (("rings", "example:hgx-h100", "--channels", "100"), 2, "--channels"),
    (("rings", "example:hgx-h100", "--gpus", "3"), 4, "at least 2 GPUs"),
    (("rings", str(CAPTURES / "topo" / "21_h100-nvl-x4_nv12_tabs.txt"), "--nodes", "2"), 1, "no NICs"),
    (("rings", "example:hgx-h100", "--nodes", "0"), 2, "--nodes"),
    (("rings", "example:cpu-only"), 3, "no GPUs"),
])
def test_cli_rings_errors(args, code, text):
    r = run_cli(*args)
    assert r.code == code, (r.code, r.stderr)
    assert text in r.stderr and "Traceback" not in r.stderr
    # input errors are one line; usage errors carry click's usage line and a pointer to -h
    assert len(r.stderr.strip().splitlines()) == 1 if code != 2 else "Usage: gpucomm rings" in r.stderr


# ----------------------------------------------------------------------------------------------
# Robustness: damaged documents give a plan or a one-line GpucommError, never another exception
@st.composite
def damaged_docs(draw):
    doc = nvswitch_document(4, draw(st.sampled_from([70, 80, 90, 100])), 12, nics=draw(st.integers(0, 2)))
    ids = [g["pci_bus_id"] for g in doc["gpus"]] + [s["id"] for s in doc["switches"]] + ["CPU0", "CPU7", "junk", None]
    for _ in range(draw(st.integers(0, 6))):
        what = draw(st.integers(0, 7))
        if what == 0 and doc["links"]:
            doc["links"].pop(draw(st.integers(0, len(doc["links"]) - 1)))
        elif what == 1 and doc["links"]:
            l = doc["links"][draw(st.integers(0, len(doc["links"]) - 1))]
            l["bw_GBps"] = draw(st.sampled_from([0, 0.001, 1e9, None, "fast", -5]))
        elif what == 2:
            rec = draw(st.sampled_from(doc["gpus"] + doc["switches"] + doc["nics"]))
            rec["parent"] = draw(st.sampled_from(ids))
        elif what == 3:
            draw(st.sampled_from(doc["gpus"]))["compute_capability"] = draw(st.sampled_from(["x", "9", None, "12.0"]))
        elif what == 4:
            g = draw(st.sampled_from(doc["gpus"]))
            g["p2p"] = {o: draw(st.sampled_from(["OK", "NOT_SUPPORTED", None, {"read": "OK"}])) for o in ids[:4] if o}
        elif what == 5:
            doc["links"].append(link_record(draw(st.sampled_from(ids[:-1])), draw(st.sampled_from(ids[:-1])),
                                            draw(st.sampled_from(["nvlink", "pcie", "c2c", "smp", "xgmi", "net"])),
                                            draw(st.sampled_from([0.0, 20.0, 400.0])), count=draw(st.integers(0, 18))))
        elif what == 6 and doc["nics"]:
            draw(st.sampled_from(doc["nics"]))["ports"] = draw(st.sampled_from([[], [{"port": 1}], "x"]))
        else:
            doc["numa_nodes"] = draw(st.sampled_from([[], [{"id": 0, "cpus": None, "distances": "x"}]]))
    return doc


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(damaged_docs(), st.sampled_from([1, 2]))
def test_damaged_documents_never_crash(doc, nodes):
    from gpucomm.probes.errors import GpucommError

    try:
        plan = search_rings(doc, nodes=nodes)
        assert plan.channels and plan.total_bw > 0
        build_trees_ok = __import__("gpucomm.planners.collectives.trees", fromlist=["build_trees"]).build_trees(doc, nodes=nodes,
                                                                                             reference=False)
        assert build_trees_ok.channels
    except GpucommError as e:
        assert str(e) and "\n" not in str(e)


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.text(max_size=30), st.just("0-3"), st.just("GPU0,GPU2"), st.just("7-2")))
def test_gpu_list_parser_never_crashes(text):
    from gpucomm.commands.collective import parse_gpu_list

    try:
        out = parse_gpu_list(text)
    except InputError as e:
        assert "--gpus" in str(e)
        return
    assert out and all(isinstance(x, int) and x >= 0 for x in out) and len(set(out)) == len(out)


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.text(max_size=8), st.integers(-5, 100), st.none()))
def test_channel_count_parser(value):
    from gpucomm.planners.collectives.rings import _parse_channels

    try:
        n = _parse_channels(value)
    except InputError as e:
        assert "--channels" in str(e)
        return
    assert n is None or 1 <= n <= 64


def _pcie_box(nsw: int, per: int) -> dict:
    """nsw PCIe Gen4 switches with ``per`` L40S each, spread over two SPR sockets."""
    from gpucomm.probes.model import finalize, gpu_record, new_document, switch_record

    doc = new_document("json")
    doc["host"].update(cpu_vendor="GenuineIntel", cpu_model="Intel(R) Xeon(R) Platinum 8480+")
    i = 0
    for s in range(nsw):
        cpu = f"CPU{s * 2 // nsw}"
        sid = f"0000:{0x10 + s * 0x10:02x}:00.0"
        doc["switches"].append(switch_record(sid, kind="pcie", pci_bus_id=sid, parent=cpu))
        doc["links"].append(link_record(sid, cpu, "pcie", 24.0, gen=4, width=16))
        for _ in range(per):
            bid = f"0000:{0x11 + s * 0x10 + i % per:02x}:00.0"
            doc["gpus"].append(gpu_record(i, pci_bus_id=bid, name="NVIDIA L40S", compute_capability="8.9",
                                          parent=sid, numa_node=int(cpu[3:])))
            doc["links"].append(link_record(bid, sid, "pcie", 24.0, gen=4, width=16))
            i += 1
    doc["numa_nodes"] = [{"id": c, "cpus": f"{c * 8}-{c * 8 + 7}", "memory_bytes": None, "distances": None}
                         for c in range(2)]
    return finalize(doc)


def test_heuristic_search_beyond_ten_gpus():
    plan = search_rings(_pcie_box(4, 4))
    assert not plan.exact and plan.warnings and len(plan.gpus) == 16
    assert plan.total_bw >= plan.nccl_reference["total_bw"] - 1e-6
    _usage_ok(plan)
    # the PCI tree's depth-first order keeps each switch's GPUs together (one uplink crossing each way)
    first = plan_idx(plan, plan.channels[0])
    switch_of = [i // 4 for i in first]
    assert sum(1 for a, b in zip(switch_of, switch_of[1:] + switch_of[:1]) if a != b) == 4


# ----------------------------------------------------------------------------------------------
# --compare LOG: NCCL's own debug log next to our rings and our model of NCCL (probes/formats/nccllog.py)
_NCCLLOGS = CAPTURES / "nccllogs"
_PANLICHEN_XML = str(CAPTURES / "ncclxml" / "panlichen-rtx3090-8gpu-topo.xml")


def test_cli_rings_compare_with_the_panlichen_log():
    """The RTX 3090 topology XML with the log of a 2-node run on it: our model of NCCL matches the
    log's channel counts (2 channels, ring graph 1 channel) and typeIntra SYS; its bandwidth (7 vs
    4 GB/s) only matches once P2P is off between the GPUs NCCL routed through the CPU (GeForce: the
    XML does not carry NVML's P2P status, the log's path print does)."""
    log = str(_NCCLLOGS / "panlichen-rtx3090-4node-log.log")
    r = run_cli("rings", _PANLICHEN_XML, "--nodes", "2", "--compare", log, "--format", "json")
    assert r.code == 0 and r.stderr == "", r.stderr
    sec = r.json()["nccl_log"]
    assert (sec["nranks"], sec["nnodes"], sec["local_ranks"], sec["version"]) == (16, 2, 8, "2.18.1+cuda11.7")
    c = sec["comparison"]
    assert c["channels"] == {"nccl": 2, "model": 2, "match": True, "ours": 1}
    assert c["search_channels"] == {"nccl": 1, "model": 1, "match": True}
    assert c["type_intra"] == {"nccl": "SYS", "model": "SYS", "match": True}
    assert c["bw_intra"] == {"nccl": 4.0, "model": 7.0, "match": False}
    assert c["type_inter"] == {"nccl": "SYS", "model": "SYS", "match": True}   # NCCL 2.30.7 (ncclsim): SYS too
    adj = c["adjusted_model"]
    assert (adj["search_channels"], adj["bw_intra"], adj["bw_inter"], adj["type_intra"]) == (1, 4.0, 4.0, "SYS")
    assert sec["graph"]["channels"][0]["gpus"] == list(range(8)) and sec["rings"][0]["node0_gpus"] == list(range(8))
    t = run_cli("rings", _PANLICHEN_XML, "--nodes", "2", "--compare", log)
    assert t.code == 0 and t.stderr == ""
    assert "NCCL (log)" in t.stdout and "our model of NCCL" in t.stdout
    assert ("verdict: NCCL used 2 channels (ring graph 1 x 4 GB/s, SYS/SYS); our model of NCCL predicted 2 "
            "(1 x 7, SYS/SYS) (differs: bw_intra 4 vs 7, bw_inter 4 vs 7); "
            "channel orders: 2 of 2 as our model of NCCL; our rings give 7 GB/s vs NCCL's 4") in t.stdout
    assert "with P2P off there our model of NCCL predicts 2 channels, ring graph 1 x 4/4 GB/s SYS/SYS" in t.stdout


def test_cli_rings_compare_layout_warning():
    # a 2-node log against a 1-node plan: warned, and the log's view is still shown
    w = run_cli("rings", _PANLICHEN_XML, "--compare", str(_NCCLLOGS / "panlichen-rtx3090-4node-log27.log"))
    assert w.code == 0 and "NCCL rings (log" in w.stdout
    assert w.stderr == ("gpucomm: warning: the log is from 2 node(s) (16 ranks); this plan is for --nodes 1: "
                        "rerun with --nodes 2 to compare like with like\n")


@pytest.mark.parametrize("target,text", [
    ("missing.log", "missing.log: no such file"),
    (_PANLICHEN_XML, "no NCCL debug lines found"),
    (str(_NCCLLOGS), "is a directory"),
])
def test_cli_rings_compare_errors(target, text):
    r = run_cli("rings", "example:hgx-h100", "--compare", target)
    assert r.code == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("gpucomm: error:") and text in r.stderr and len(r.stderr.strip().splitlines()) == 1


# ----------------------------------------------------------------------------------------------
# NIC hops inside a node: where NCCL splits the node into NIC-joined domains (ncclTopoCheckNet)
def _two_socket_document(gpus_per_socket: int = 2, nic_gbps: float = 400.0, smp_GBps: Optional[float] = None) -> dict:
    """Two Skylake sockets (NCCL's inter-socket bandwidth 10 GB/s; ``smp_GBps``: an smp link measured at
    that), each with one Gen5 PCIe switch holding ``gpus_per_socket`` A100s and one NIC of ``nic_gbps``."""
    from gpucomm.probes.facts import pcie_bw_GBps
    from gpucomm.probes.model import finalize, gpu_record, new_document, nic_record, switch_record

    doc = new_document("json")
    doc["host"].update(cpu_vendor="GenuineIntel", cpu_model="Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz", cpu_arch="x86_64")
    doc["numa_nodes"] = [{"id": i, "cpus": None, "memory_bytes": None, "distances": None} for i in range(2)]
    pbw = pcie_bw_GBps(5, 16)
    for s in range(2):
        sw = f"0000:{0x10 + 0x40 * s:02x}:00.0"
        doc["switches"].append(switch_record(sw, kind="pcie", pci_bus_id=sw, parent=f"CPU{s}", numa_node=s))
        doc["links"].append(link_record(sw, f"CPU{s}", "pcie", pbw, gen=5, width=16))
        for k in range(gpus_per_socket):
            i = s * gpus_per_socket + k
            gid = f"0000:{0x11 + 0x40 * s + k:02x}:00.0"
            doc["gpus"].append(gpu_record(i, name="NVIDIA A100-SXM4-80GB", pci_bus_id=gid, compute_capability="8.0",
                                          numa_node=s, parent=sw,
                                          pcie={"gen": 5, "width": 16, "max_gen": 5, "max_width": 16}))
            doc["links"].append(link_record(gid, sw, "pcie", pbw, gen=5, width=16))
        bus = f"0000:{0x30 + 0x40 * s:02x}:00.0"
        doc["nics"].append(nic_record(f"mlx5_{s}", pci_bus_id=bus, numa_node=s, parent=sw, link_layer="InfiniBand",
                                      ports=[{"port": 1, "state": "ACTIVE", "rate_gbps": nic_gbps}], guid=f"0x{s + 1:016x}"))
        doc["links"].append(link_record(bus, sw, "pcie", pbw, gen=5, width=16))
    if smp_GBps is not None:
        doc["links"].append(dict(link_record("CPU0", "CPU1", "smp", 10.0), measured_bw_GBps=smp_GBps))
    return finalize(doc)


@pytest.mark.parametrize("nodes", [1, 2])
def test_nic_hop_between_sockets_where_nccl_splits_the_node(nodes):
    from gpucomm.planners.collectives.rings import check_plan

    doc = _two_socket_document()
    plan = search_rings(doc, nodes=nodes)
    ref = plan.nccl_reference
    assert ref["nccl_nodes"] == 2 * nodes            # NCCL splits each node in two (PATH_NET between sockets)
    assert [[plan.ns.nodes[g]["index"] for g in d] for d in plan.domains] == [[0, 1], [2, 3]]
    # without the NIC hop a channel crosses the 10 GB/s inter-socket link (each direction at most once per
    # GB/s: a ring, or at 2 nodes two chains crossing in opposite directions); through the 50 GB/s NICs not
    whole = search_rings(doc, nodes=nodes, reference=False,
                         settings=__import__("gpucomm.planners.nccl.settings", fromlist=["x"]).NcclSettings(
                             net_disable_intra=1))
    assert whole.domains is None and whole.total_bw <= 10.0 * nodes + 1e-6
    assert plan.total_bw > whole.total_bw and plan.total_bw >= ref["total_bw"] - 1e-6
    check_plan(plan)
    _usage_ok(plan)
    for ch in plan.channels:
        assert len(ch.breaks) == (2 if nodes == 1 else 1)
        for i, x, y in ch.breaks:
            assert plan.ns.nodes[x]["type"] == plan.ns.nodes[y]["type"] == "NET"
            assert {plan.ns.nodes[ch.gpus[i]]["index"], plan.ns.nodes[ch.gpus[(i + 1) % 4]]["index"]} & {0, 1}
        hops = plan.hops(ch)
        assert all(plan.ns.path(s, d) is not None for s, d in hops)
        assert not any(plan.ns.path(s, d).type == "SYS" for s, d in hops)   # never the inter-socket link
    # every NIC port carries at most its rate in each direction (the honest accounting of the hop)
    port = 50.0
    for net in plan.ns.nets:
        for direction in (0, 1):
            used = sum(ch.bw for ch in plan.channels for s, d in plan.hops(ch) if (s, d)[direction] == net)
            assert used <= port + 1e-6


def test_nic_hop_in_the_rings_document_and_table(tmp_path):
    import json
    from pathlib import Path

    import jsonschema

    from gpucomm import planners

    p = tmp_path / "two-socket.json"
    p.write_text(json.dumps(_two_socket_document()))
    r = run_cli("rings", str(p), "--format", "json")
    assert r.code == 0, r.stderr
    out = r.json()
    schema = json.loads((Path(planners.__file__).parent / "schema" / "rings.schema.json").read_text())
    jsonschema.validate(out, schema, cls=jsonschema.Draft202012Validator)
    ch = out["channels"][0]
    assert out["net_domains"] == [[0, 1], [2, 3]]
    assert [h["after"] for h in ch["net_hops"]] == [1, 3]
    assert all(len(h["nics"]) == 2 for h in ch["net_hops"])
    wire = [l for l in ch["links"] if l["type"] == "NET"]
    assert len(wire) == 2 and all(l["path_bw_GBps"] == 50.0 for l in wire)
    assert not any(l["type"] == "SYS" for l in ch["links"])
    assert "through the network" in r.stderr
    table = run_cli("rings", str(p))
    assert table.code == 0 and " ~ " in table.stdout            # GPU1 > nic ~ nic > GPU2
    assert run_cli("rings", str(p), "--format", "nccl-graph").code != 0   # no graph file of NIC hops


def test_no_nic_hop_when_the_inter_socket_link_is_fast_or_disabled(monkeypatch):
    # an inter-socket link measured at 100 GB/s beats the 50 GB/s NICs: our rings stay in the node (NCCL,
    # which knows only its 10 GB/s constant, still splits it: the NIC-hop channels remain a candidate)
    plan = search_rings(_two_socket_document(smp_GBps=100.0), reference=False)
    assert plan.domains is None and all(not ch.breaks for ch in plan.channels) and plan.total_bw > 10.0
    assert len(plan.ns.domains()) == 2
    # NCCL_NET_DISABLE_INTRA=1, read as the NCCL model reads it
    monkeypatch.setenv("NCCL_NET_DISABLE_INTRA", "1")
    plan = search_rings(_two_socket_document())
    assert plan.domains is None and plan.nccl_reference["nccl_nodes"] == 1
    assert all(not ch.breaks for ch in plan.channels)


@pytest.mark.parametrize("nodes", [1, 2])
def test_nccl_rings_over_its_domains_seed_ours(nodes):
    """A node NCCL splits into NIC-joined domains (two Skylake sockets of PCIe H100s, 8 NICs): NCCL's
    own rings -- every domain's chains, joined NIC to NIC -- are a candidate of ours, placed in our
    capacity model, so ours is at least NCCL's 7 x 6 GB/s; every hop between domains goes NIC to NIC."""
    from support import FIXTURES
    from gpucomm.planners.collectives.rings import check_plan

    doc = load_topology(str(FIXTURES / "ncclsim" / "corpus" / "m049-h100x8-none-skl2s-sw2-g5-8x100g.xml"))
    plan = search_rings(doc, nodes=nodes)
    ref = plan.nccl_reference
    assert ref["nccl_nodes"] == 2 * nodes and len(ref["domain_rings"]) == 2
    assert [sorted(c["gpus"]) for c in ref["domain_rings"][1]][0] == ["GPU4", "GPU5", "GPU6", "GPU7"]
    assert ref["total_bw"] == 42.0 and plan.total_bw >= 42.0 - 1e-6
    check_plan(plan)
    _usage_ok(plan)
    assert plan.domains is not None and all(ch.breaks for ch in plan.channels)
    assert plan.to_dict()["net_domains"]


# MNNVL: NCCL 2.30.7's own ring bandwidth (ncclsim, fixtures/ncclsim/goldens.json, group mnnvl) on trays fused into
# NVLink cliques of K (the harness's --mnnvl-clique K), against our rings with --nvlink-domain K: one clique of 2, 4,
# 8 and 18 trays, and several cliques joined by their NICs (2x2, 2x4, 2x8, 2 racks of 18 trays).
MNNVL_CASES = [("mnnvl/gb300.xml", n, k) for n, k in ((2, 2), (4, 4), (8, 8), (18, 18), (4, 2), (8, 4), (16, 8))] \
    + [("mnnvl/gb200.xml", n, k) for n, k in ((2, 2), (8, 8), (4, 2))] + [("mnnvl/gb300-bond.xml", 4, 2)]


def _mnnvl_golden(xml: str, nodes: int, k: int) -> dict:
    import json

    from support import ROOT

    cases = json.loads((ROOT / "fixtures" / "ncclsim" / "goldens.json").read_text())["cases"]
    return next(c for c in cases if c["xml"] == xml and c["nodes"] == nodes and not c.get("env") and not c.get("gpus")
                and (c.get("mnnvl") or {}) == {"clique": k, "domain": k, "state": 3})


@pytest.mark.parametrize("xml,nodes,k", MNNVL_CASES)
def test_our_rings_over_an_mnnvl_clique_match_or_beat_nccl(xml, nodes, k):
    from gpucomm.planners.collectives.rings import check_plan
    from support import ROOT

    case = _mnnvl_golden(xml, nodes, k)
    ring = case["golden"]["ring"]
    nccl = _tool("rings_vs_ncclsim").nccl_total(case["golden"])
    plan = search_rings(load_topology(str(ROOT / "fixtures" / "ncclsim" / xml)), nodes=nodes, nvlink_domain=k)
    check_plan(plan)
    assert plan.hosts_per_system == k and plan.nodes == nodes // k
    assert plan.total_bw >= nccl - 1e-6, (plan.total_bw, nccl, ring)
    # within a clique every channel visits every GPU of all its trays (over the NVSwitch, no NIC)
    per_tray = len(plan.ns.gpus) // k
    if nodes == k:
        assert all(len(ch.gpus) == per_tray * k and not ch.breaks for ch in plan.channels)
