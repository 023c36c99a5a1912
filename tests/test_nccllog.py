"""probes/formats/nccllog.py: NCCL debug logs (NCCL_DEBUG=INFO) read back, on the real logs of
fixtures/captures/nccllogs/ (values checked by reading the files), synthetic logs built with NCCL's
own print formats (round trip), and damaged input (only InputError or a partial result)."""
from __future__ import annotations

import json
import random
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import CAPTURES
from gpucomm.probes.errors import InputError
from gpucomm.probes.load import load_topology
from gpucomm.probes.model import dumps_json

from gpucomm.planners.collectives.logcompare import compare_rings, compare_trees, pick_graph
from gpucomm.probes.formats.nccllog import PATH_TYPES, header_bus_id, nccl_bus_id, parse_nccl_log
from gpucomm.planners.collectives.trees import connect_trees

LOGS = CAPTURES / "nccllogs"
PANLICHEN_XML = CAPTURES / "ncclxml" / "panlichen-rtx3090-8gpu-topo.xml"
ALL_LOGS = sorted(LOGS.glob("*.log"))


def _parse(name: str) -> dict:
    p = LOGS / name
    return parse_nccl_log(p.read_text(), str(p))


def _tree(d: dict, c: int, r: int) -> tuple:
    t = next(t for t in d["trees"] if t["channel"] == c and t["rank"] == r)
    return t["up"], t["down"]


# ----------------------------------------------------------------------------------------------
# Every real log
@pytest.mark.parametrize("path", ALL_LOGS, ids=lambda p: p.name)
def test_every_real_log_parses_cleanly(path):
    d = parse_nccl_log(path.read_text(), str(path))
    assert d["schema"] == "gpucomm.nccllog/v1" and d["source"] == str(path)
    assert d["warnings"] == [] and d["nccl_warnings"] == []
    assert d["nranks"] and d["hosts"]
    assert d["rings"] or d["trees"] or d["graphs"] or d["transports"]
    json.loads(dumps_json(d))   # deterministic JSON, no NaN


def test_real_log_panlichen_two_nodes():
    """Panlichen/nccl-tests log.log: 2 hosts x 8 RTX 3090 (the nccl-tests header lists ranks 0-15
    on oneflow-27 and oneflow-25), NCCL 2.18.1, per-rank Ring/Tree lines of the Panlichen fork."""
    d = _parse("panlichen-rtx3090-4node-log.log")
    assert d["version"] == "2.18.1+cuda11.7" and d["hosts"] == ["oneflow-25", "oneflow-27"]
    assert (d["nranks"], d["nnodes"], d["local_ranks"]) == (16, 2, 8)
    assert (d["channels"], d["channels_from"]) == (2, "tree lines")
    assert [(r["channel"], r["ranks"], r["complete"]) for r in d["rings"]] == [
        (0, list(range(16)), True), (1, list(range(16)), True)]
    # "Tree 0 : -1 -> 0 -> 1/8/-1", "Tree 1 : 8 -> 0 -> 1/-1/-1", "Tree 1 : -1 -> 8 -> 9/0/-1"
    assert _tree(d, 0, 0) == (-1, [1, 8]) and _tree(d, 1, 0) == (8, [1])
    assert _tree(d, 0, 8) == (0, [9]) and _tree(d, 1, 8) == (-1, [9, 0]) and _tree(d, 1, 9) == (8, [10])
    assert len(d["trees"]) == 8
    # each node prints its own graphs: GPU/0..7 on oneflow-27, GPU/8..15 on oneflow-25
    assert sorted((g["pattern"], g["channels"][0]["ranks"][0], tuple(g["hosts"])) for g in d["graphs"]) == [
        (1, 0, ("oneflow-27",)), (1, 8, ("oneflow-25",)), (4, 0, ("oneflow-27",)), (4, 8, ("oneflow-25",))]
    ring = pick_graph(d, (4,))
    assert {k: ring[k] for k in ("pattern_name", "cross_nic", "n_channels", "bw_intra", "bw_inter", "type_intra",
                                 "type_inter", "same_channels")} == {
        "pattern_name": "ring", "cross_nic": 0, "n_channels": 1, "bw_intra": 4.0, "bw_inter": 4.0,
        "type_intra": "SYS", "type_inter": "SYS", "same_channels": 1}
    assert ring["channels"] == [{"nets": ["0", "0"], "ranks": list(range(8))}]
    assert d["system"] == {"max_bw": 7.0, "total_bw": 24.0}
    assert d["topology"]["link_bw"] == {"NET": 7.0, "PCI": 24.0, "SYS": 10.0}
    assert {"host": "oneflow-25", "bus_id": "0000:0f:00.0", "rank": 8} in d["topology"]["gpus"]
    assert len(d["topology"]["gpus"]) == 16
    r0 = d["ranks"][0]
    assert (r0["rank"], r0["host"], r0["cuda_dev"], r0["bus_id"], r0["gpu_name"]) == (
        0, "oneflow-27", 0, "0000:0f:00.0", "NVIDIA GeForce RTX 3090")
    paths = {(p["from"], p["to"]): (p["hops"], p["bw"], p["type"]) for p in d["paths"]}
    assert paths[("GPU/F000", "GPU/10000")] == (4, 24.0, "PHB")     # same switch, but P2P is off: via CPU
    assert paths[("GPU/F000", "GPU/9B000")] == (5, 10.0, "SYS")
    assert paths[("GPU/F000", "NET/0")] == (6, 7.0, "SYS")


def test_real_log_panlichen_one_host_only():
    """log27: only oneflow-27's lines; the ring lines name ranks 8 and 15 of the other host."""
    d = _parse("panlichen-rtx3090-4node-log27.log")
    assert d["version"] is None and d["hosts"] == ["oneflow-27"]
    assert (d["nranks"], d["nnodes"], d["local_ranks"]) == (16, 2, 8)
    assert d["layout_from"] == "highest rank seen, graph print"
    assert [(r["ranks"], r["complete"]) for r in d["rings"]] == [(list(range(9)), False)] * 2
    assert len(d["trees"]) == 4 and _tree(d, 1, 0) == (8, [1])
    assert [g["pattern"] for g in d["graphs"]] == [4, 1]









# ----------------------------------------------------------------------------------------------
# Small pieces
def test_bus_ids():
    assert nccl_bus_id("F000") == "0000:0f:00.0" and nccl_bus_id("9B000") == "0000:9b:00.0"
    assert nccl_bus_id("10f010") == "0001:0f:01.0" and nccl_bus_id("0-0") is None
    assert header_bus_id("0x0f") == "0000:0f:00.0" and header_bus_id("0000:18:00") == "0000:18:00.0"
    assert header_bus_id("junk") is None


def test_prefixes_messages_and_variants():
    text = "\n".join([
        "0: nodeA:1:2 [0] NCCL INFO comm 0x1 rank 0 nRanks 4 nNodes 2 localRanks 2 localRank 0 MNNVL 0",
        "[1,0]<stdout>:nodeA:1:2 [0] NCCL INFO Channel 00/02 :    0   1   2   3",
        "2025-01-01 10:00:00,000 - INFO - nodeA:1:2 [0] NCCL INFO Channel 01/02 :    0   1   2   3",
        "(Worker pid=7) nodeB:5:6 [1] NCCL INFO Trees [0] -1/-1/-1->3->2 [1] -1/-1/-1->3->2 nodeB:5:6 [1] NCCL INFO "
        "Connected all rings",
        "nodeA:1:3 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via SHM/direct/direct",
        "nodeA:1:3 [1] NCCL INFO Channel 01/0 : 1[1] -> 2[0] [send] via NET/IB/0/GDRDMA",
        "nodeA:1:3 [1] NCCL INFO 2 coll channels, 0 collnet channels, 0 nvls channels, 4 p2p channels, "
        "2 p2p channels per peer",
        "nodeA:1:3 [1] NCCL INFO NCCL_P2P_LEVEL set by environment to LOC",
        "nodeA:1:3 [1] NCCL INFO NVLS multicast support is not available on dev 1",
        "nodeA:1:3 [1] NCCL WARN NET/IB : something odd",
        "nodeA:1:3 [1] NCCL INFO Using network IB",
    ])
    d = parse_nccl_log(text, "t.log")
    assert d["hosts"] == ["nodeA", "nodeB"] and (d["nranks"], d["nnodes"], d["local_ranks"]) == (4, 2, 2)
    assert [r["ranks"] for r in d["rings"]] == [[0, 1, 2, 3]] * 2 and d["channels"] == 2
    assert _tree(d, 1, 3) == (2, []) and d["connected"]["rings"] is True
    assert d["transport_kinds"] == {"NET": 1, "SHM": 1} and d["env"] == {"NCCL_P2P_LEVEL": "LOC"}
    assert d["coll_channels"] == {"coll": 2, "collnet": 0, "nvls": 0, "p2p": 4, "p2p_per_peer": 2}
    assert d["collnet"] is False and d["nvls"]["multicast"] is False and d["network"] == "IB"
    assert d["nccl_warnings"] == ["nodeA: NET/IB : something odd"] and d["warnings"] == []


def test_hosts_with_different_nccl_versions_are_flagged():
    text = ("a:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\nb:2:2 [0] NCCL INFO NCCL version 2.18.1+cuda12.1\n"
            "a:1:1 [0] NCCL INFO Channel 00/01 :    0   1")
    d = parse_nccl_log(text, "v.log")
    assert d["version"] == "2.21.5+cuda12.4" and d["host_versions"] == {"a": "2.21.5+cuda12.4", "b": "2.18.1+cuda12.1"}
    assert d["warnings"] == ["v.log: hosts run different NCCL versions: a 2.21.5+cuda12.4, b 2.18.1+cuda12.1"]


def test_damaged_lines_become_warnings_with_line_numbers():
    lines = (LOGS / "panlichen-rtx3090-4node-log27.log").read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if "Pattern 4" in ln)
    cut = "\n".join(lines[:at + 1])            # the log stops right after a graph header
    d = parse_nccl_log(cut, "cut.log")
    assert d["warnings"] == [f"cut.log:{at + 1}: graph print stops after 0 of its 1 channels "
                             f"(Pattern 4; truncated log?)"]
    bad = ("h:1:2 [0] NCCL INFO Trees [0] 1/2->0->x\nh:1:2 [0] NCCL INFO Channel 00/02 :    0   0\n"
           "h:1:2 [0] NCCL INFO Pattern 4, crossNic 0, nChannels 1, bw 4/4, type XYZ/SYS, sameChannels 1\n"
           "h:1:2 [0] NCCL INFO comm 0x1 rank 9 nRanks 4 nNodes 1 localRanks 4 localRank 1 MNNVL 0")
    d = parse_nccl_log(bad, "bad.log")
    assert [w.split(": ", 1)[0] for w in d["warnings"][:4]] == ["bad.log:1", "bad.log:2", "bad.log:3", "bad.log:4"]
    assert d["trees"] == [] and d["rings"] == [] and d["graphs"] == []


@pytest.mark.parametrize("text,msg", [
    ("", "no NCCL debug lines found"),
    ("hello\nworld\n", "t.log:1: no NCCL debug lines found"),
    ("h:1:2 [0] NCCL INFO ok\nab\x00cd", "t.log:2: binary data in the log"),
    (b"h:1:2 [0] NCCL INFO x", "not text"),
])
def test_bad_input_is_one_input_error(text, msg):
    with pytest.raises(InputError) as e:
        parse_nccl_log(text, "t.log")
    assert msg in str(e.value) and "\n" not in str(e.value)


# ----------------------------------------------------------------------------------------------
# Round trip: logs written in NCCL's own formats, interleaved across threads, with launcher labels
LABELS = ["", "0: ", "[1,0]<stdout>:", "[0] ", "2024-05-01 12:00:00,123 - INFO - ", "(RayWorker pid=12) ", "> "]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(nodes=st.integers(1, 4), gpn=st.integers(1, 8), k=st.integers(1, 3), rnd=st.randoms(use_true_random=False),
       label=st.sampled_from(LABELS), old_trees=st.booleans(),
       junk=st.lists(st.text(alphabet=string.ascii_letters + " .,=-#/", max_size=40), max_size=6),
       bw=st.sampled_from([0.1, 3.0, 4.0, 24.0, 40.0]), ti=st.sampled_from(PATH_TYPES[:10]),
       te=st.sampled_from(PATH_TYPES[:10]))
def test_round_trip_synthetic_logs(nodes, gpn, k, rnd, label, old_trees, junk, bw, ti, te):
    n = nodes * gpn
    chains = []
    for _ in range(k):
        c = list(range(gpn))
        rnd.shuffle(c)
        chains.append(c)
    trees = connect_trees(nodes, chains) if gpn > 1 or nodes > 1 else []
    threads: dict = {}

    def say(rank: int, msg: str) -> None:
        node = rank // gpn
        threads.setdefault(rank, []).append(
            f"{label}host-{node}:{100 + rank}:{200 + rank} [{rank % gpn}] NCCL INFO {msg}")

    for r in range(n):
        say(r, f"comm 0x{r + 1:x} rank {r} nRanks {n} nNodes {nodes} localRanks {gpn} localRank {r % gpn} MNNVL 0")
    rings = [[node * gpn + x for node in range(nodes) for x in c] for c in chains]
    for c, order in enumerate(rings):
        say(0, f"Channel {c:02d}/{k:02d} :" + "".join(f"{x:4d}" for x in order))
    # the ring graph, as rank 0 prints it (GPU/<rank>, NETs only when there is a network)
    say(0, f"Pattern 4, crossNic 0, nChannels {k}, bw {bw:f}/{bw:f}, type {ti}/{te}, sameChannels 1")
    for c, ch in enumerate(chains):
        net = " NET/0" if nodes > 1 else ""
        say(0, f"{c:2d} :{net}" + "".join(f" GPU/{x}" for x in ch) + net)
    expected = {}
    for t in trees:
        for r in range(n):
            d = (t["down"][r] + [-1, -1, -1])[:3]
            expected[(t["channel"], r)] = (t["up"][r], list(t["down"][r]))
            if old_trees:
                say(r, f"Tree {t['channel']} : {t['up'][r]} -> {r} -> {d[0]}/{d[1]}/{d[2]}")
    if not old_trees:
        for r in range(n):
            items = []
            for t in trees:
                d = (t["down"][r] + [-1, -1, -1])[:3]
                items.append(f"[{t['channel']}] {d[0]}/{d[1]}/{d[2]}->{r}->{t['up'][r]}")
            if items:
                say(r, "Trees " + " ".join(items))
    queues = [list(q) for q in threads.values()] + [list(junk)]
    lines = []
    while any(queues):   # interleave threads, keeping each thread's own order
        q = rnd.choice([q for q in queues if q])
        lines.append(q.pop(0))
    d = parse_nccl_log("\n".join(lines), "synthetic.log")
    assert d["warnings"] == []
    assert (d["nranks"], d["nnodes"], d["local_ranks"]) == (n, nodes, gpn)
    assert [r["ranks"] for r in d["rings"]] == rings and d["channels"] == k
    got = {(t["channel"], t["rank"]): (t["up"], t["down"]) for t in d["trees"]}
    assert got == expected
    g = pick_graph(d, (4,))
    assert (g["n_channels"], g["bw_intra"], g["type_intra"], g["type_inter"]) == (k, bw, ti, te)
    assert [c["ranks"] for c in g["channels"]] == chains
    assert d["hosts"] == [f"host-{i}" for i in range(nodes)]


# ----------------------------------------------------------------------------------------------
# Damaged input: only InputError or a partial result
_REAL_LINES = [ln for p in ALL_LOGS for ln in p.read_text().splitlines()[:60]]


def _mangle(line: str, rnd: random.Random) -> str:
    op = rnd.randrange(4)
    if op == 0 and line:
        return line[:rnd.randrange(len(line))]                      # truncated
    if op == 1 and line:
        i = rnd.randrange(len(line))
        return line[:i] + rnd.choice("x-/ []>:0123456789\t") + line[i + 1:]   # one character garbled
    if op == 2:
        return line.replace(" ", "  ", 1)
    return line


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_REAL_LINES), st.text(max_size=80)), max_size=25),
       st.randoms(use_true_random=False))
def test_fuzz_only_input_error_or_partial_result(lines, rnd):
    text = "\n".join(_mangle(ln, rnd) for ln in lines)
    try:
        d = parse_nccl_log(text, "fuzz.log")
    except InputError as e:
        assert "\n" not in str(e) and str(e).startswith("fuzz.log")
        return
    assert d["schema"] == "gpucomm.nccllog/v1" and all(isinstance(w, str) for w in d["warnings"])
    json.loads(dumps_json(d))


# ----------------------------------------------------------------------------------------------
# The comparison itself (CLI runs are in test_rings.py / test_trees.py)
@pytest.fixture(scope="module")
def panlichen():
    from gpucomm.planners.collectives.rings import search_rings
    from gpucomm.planners.collectives.trees import build_trees

    doc = load_topology(str(PANLICHEN_XML))
    rp = search_rings(doc, nodes=2)
    tp = build_trees(doc, nodes=2)
    return doc, rp, tp


def test_compare_rings_on_the_panlichen_log(panlichen):
    doc, rp, _ = panlichen
    sec = compare_rings(_parse("panlichen-rtx3090-4node-log.log"), rp.to_dict(), rp.nccl_reference, doc, 2)
    c = sec["comparison"]
    assert c["channels"] == {"nccl": 2, "model": 2, "match": True, "ours": 1}
    assert c["search_channels"]["match"] and c["type_intra"] == {"nccl": "SYS", "model": "SYS", "match": True}
    # the topology XML does not carry NVML's P2P status; NCCL found P2P off (GeForce): 4 vs 7 GB/s
    assert c["bw_intra"] == {"nccl": 4.0, "model": 7.0, "match": False}
    assert c["busbw_GBps"] == {"nccl": 4.0, "model": 7.0, "ours": 7.0}
    assert sec["rank_to_gpu_from"] == "PCI bus id" and c["order_channel0"]["nccl"] == list(range(8))
    assert c["paths"]["compared"] == 56 and c["paths"]["same"] == 32
    adj = c["adjusted_model"]
    assert adj["p2p_off_pairs"] == [[a, b] for grp in (range(4), range(4, 8)) for a in grp for b in grp if a < b]
    assert (adj["search_channels"], adj["bw_intra"], adj["bw_inter"], adj["type_intra"]) == (1, 4.0, 4.0, "SYS")
    assert sec["warnings"] == []
    assert sec["verdict"].startswith("NCCL used 2 channels (ring graph 1 x 4 GB/s, SYS/SYS); our model of NCCL "
                                     "predicted 2 (1 x 7, SYS/SYS) (differs:")   # NCCL 2.30.7 (ncclsim): SYS/SYS


def test_compare_trees_on_the_panlichen_log(panlichen):
    doc, _, tp = panlichen
    sec = compare_trees(_parse("panlichen-rtx3090-4node-log.log"), tp.to_dict(), tp.nccl_reference, doc, 2)
    c = sec["comparison"]
    assert c["channels"]["nccl"] == 2 and c["channels"]["match"]
    # the XML cannot say NCCL had P2P off (GeForce): on it NCCL's tree search chains 4..7,0..3
    assert (c["links_vs_ours"]["checked"], c["links_vs_ours"]["match"]) == (8, 4)
    assert (c["links_vs_nccl_chains"]["checked"], c["links_vs_nccl_chains"]["match"]) == (8, 8)
    assert (c["links_vs_adjusted_model"]["checked"], c["links_vs_adjusted_model"]["match"]) == (8, 8)
    assert "with P2P off as in the log, our model of NCCL's trees: 8 of 8" in sec["verdict"]


def test_trees_are_the_trees_nccl_logged_on_two_snellius_nodes(snellius):
    from gpucomm.planners.collectives.trees import build_trees

    doc, _, log = snellius
    tp = build_trees(doc, nodes=2)
    assert tp.pattern == "tree" and tp.chains == [[0, 1, 2, 3], [1, 2, 3, 0], [2, 0, 1, 3], [3, 0, 2, 1]]
    sec = compare_trees(log, tp.to_dict(), tp.nccl_reference, doc, 2)
    assert (sec["comparison"]["links_vs_ours"]["checked"], sec["comparison"]["links_vs_ours"]["match"]) == (8, 8)
    # "Trees [0] 1/4/-1->0->-1 ... [4] 1/-1/-1->0->4": the TREE pattern, GPU0 faces the network both ways
    assert tp.log_line(0, 0) == "Trees [0] 1/4/-1->0->-1" and tp.log_line(4, 0) == "Trees [4] 1/-1/-1->0->4"


def test_compare_warns_when_the_log_is_from_another_layout(panlichen):
    doc, _, _ = panlichen
    from gpucomm.planners.collectives.rings import search_rings

    rp = search_rings(doc, nodes=1)
    sec = compare_rings(_parse("panlichen-rtx3090-4node-log.log"), rp.to_dict(), rp.nccl_reference, doc, 1)
    assert sec["warnings"] == ["the log is from 2 node(s) (16 ranks); this plan is for --nodes 1: rerun with "
                               "--nodes 2 to compare like with like"]
    assert sec["graph"]["n_channels"] == 1     # the log's view is still there


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from([p for p in ALL_LOGS]), st.randoms(use_true_random=False), st.integers(0, 400))
def test_compare_never_crashes_on_damaged_logs(panlichen, path, rnd, keep):
    doc, rp, tp = panlichen
    lines = path.read_text().splitlines()
    lines = [_mangle(ln, rnd) for ln in lines[:keep]] or ["h:1:2 [0] NCCL INFO Using network IB"]
    try:
        log = parse_nccl_log("\n".join(lines), "m.log")
    except InputError:
        return
    for sec in (compare_rings(log, rp.to_dict(), rp.nccl_reference, doc, 2),
                compare_trees(log, tp.to_dict(), tp.nccl_reference, doc, 2)):
        assert isinstance(sec["verdict"], str) and sec["verdict"]
        json.loads(dumps_json(sec))


# ----------------------------------------------------------------------------------------------
# A 2-node Snellius (4x H100, 4 IB NICs) log: NCCL 2.22.3's eight ring channels, one INFO line
# written into the middle of a table row (fixtures/captures/nccltests/scaling/evidence/SOURCES.md)
SNELLIUS_LOG = CAPTURES / "nccltests" / "scaling" / "evidence" / "snellius-h100_ibstat_nccl-info.txt"


@pytest.fixture(scope="module")
def snellius():
    from gpucomm.planners.collectives.rings import search_rings

    doc = load_topology("example:hgx-h100-4gpu")
    rp = search_rings(doc, nodes=2)
    return doc, rp, parse_nccl_log(SNELLIUS_LOG.read_text(), str(SNELLIUS_LOG))


def test_a_line_written_into_a_table_row_keeps_its_host(snellius):
    # "...  sum      -1gcn151:1904979:1905073 [0] NCCL INFO Channel 00/0 : 7[3] -> 0[0] [receive] ..."
    _, _, log = snellius
    assert log["hosts"] == ["gcn151"]
    assert log["version"] == "2.22.3+cuda12.6"
    text = "h7:1:2 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0\n" \
           "    1024   256  float  sum  -1h7:1:2 [0] NCCL INFO Connected all rings\n" \
           "    2048   512  float  sum  -1h8:1:2 [0] NCCL INFO Connected all rings\n"
    # only a number in front of another host of the same process is a row's tail: h8 stays a host
    assert parse_nccl_log(text, "t.log")["hosts"] == ["-1h8", "h7"]


def test_the_version_ends_where_the_version_does():
    text = '# the log prints "NCCL version 2.20.5+cuda12.4", quoted\nh:1:2 [0] NCCL INFO Using network IB\n'
    assert parse_nccl_log(text, "t.log")["version"] == "2.20.5+cuda12.4"


def test_every_logged_channel_order_is_checked_against_the_model(snellius):
    doc, rp, log = snellius
    sec = compare_rings(log, rp.to_dict(), rp.nccl_reference, doc, 2)
    # the log's node-0 orders 0123 / 1320 / 2103 / 3102, twice: NCCL 2.30.7's search gives the same four
    assert [r["node0_gpus"] for r in sec["rings"][:4]] == [[0, 1, 2, 3], [1, 3, 2, 0], [2, 1, 0, 3], [3, 1, 0, 2]]
    assert sec["comparison"]["orders"] == {"checked": 8, "match": 8, "first_difference": None}
    assert "channel orders: 8 of 8 as our model of NCCL" in sec["verdict"]
    # one ring written otherwise in the log is found, and named
    other = SNELLIUS_LOG.read_text().replace("Channel 05/08 :    0   5   7   6   4   1   3   2",
                                             "Channel 05/08 :    0   5   7   6   4   1   2   3")
    sec = compare_rings(parse_nccl_log(other, "x.log"), rp.to_dict(), rp.nccl_reference, doc, 2)
    assert sec["comparison"]["orders"] == {"checked": 8, "match": 7,
                                           "first_difference": {"channel": 5, "nccl": [1, 2, 3, 0],
                                                                "model": [1, 3, 2, 0]}}
