"""planners/collectives/trees.py: NCCL's double binary tree (trees.cc rules), chains inside a node, checked
against trees.cc's own illustrations and the tree lines of real NCCL logs; ``gpucomm trees``."""
from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support import CAPTURES, run_cli
from gpucomm.probes.errors import InputError, PlanInfeasible
from gpucomm.probes.load import load_topology

from gpucomm.planners.collectives.trees import (TreePlan, btree, build_trees, connect_trees, dtree, dtree_roots, log2i, parse_tree_log,
                            validate_trees)
from gpucomm.planners.collectives.validate import validate_tree


def _node_trees(n: int) -> tuple:
    """(up, down) dicts of tree 0 and tree 1 over n ranks from dtree."""
    out = []
    for t in (0, 1):
        up = {r: dtree(n, r)[t][0] for r in range(n)}
        down = {r: [c for c in dtree(n, r)[t][1:3] if c != -1] for r in range(n)}
        out.append((up, down))
    return tuple(out)


def test_btree_matches_the_trees_cc_illustration():
    # trees.cc: 0---8 ; 8 -> 4, 12 ; 4 -> 2, 6 ; 12 -> 10, 13 ; 2 -> 1, 3 ; ... (14 ranks)
    expect = {0: (-1, [8]), 8: (0, [4, 12]), 4: (8, [2, 6]), 12: (8, [10, 13]), 2: (4, [1, 3]), 6: (4, [5, 7]),
              10: (12, [9, 11]), 13: (12, []), 1: (2, []), 11: (10, [])}
    for r, (up, kids) in expect.items():
        u, d0, d1, _ = btree(14, r)
        assert u == up and [x for x in (d0, d1) if x != -1] == kids, r
    assert btree(1, 0) == (-1, -1, -1, 0)
    assert btree(2, 1)[:3] == (0, -1, -1)


def test_dtree_mirror_and_shift_match_the_trees_cc_illustrations():
    # 12 ranks (even): mirror -- 3----11 ; 3 -> 1, 7 ; 7 -> 5, 9
    t1 = {r: dtree(12, r)[1] for r in range(12)}
    assert t1[11][0] == -1 and 3 in t1[11][1:3]
    assert t1[3][0] == 11 and sorted(x for x in t1[3][1:3] if x != -1) == [1, 7]
    assert sorted(x for x in t1[7][1:3] if x != -1) == [5, 9]
    # 13 ranks (odd): shift -- 1---9 ; 9 -> 5, 0 ; 5 -> 3, 7 ; 0 -> 11 ; 11 -> 10, 12
    s1 = {r: dtree(13, r)[1] for r in range(13)}
    assert s1[1][0] == -1 and 9 in s1[1][1:3]
    assert sorted(x for x in s1[9][1:3] if x != -1) == [0, 5]
    assert sorted(x for x in s1[5][1:3] if x != -1) == [3, 7]
    assert [x for x in s1[0][1:3] if x != -1] == [11]
    assert sorted(x for x in s1[11][1:3] if x != -1) == [10, 12]


@pytest.mark.parametrize("n", range(1, 65))
def test_double_binary_tree_properties(n):
    (up0, dn0), (up1, dn1) = _node_trees(n)
    r0 = validate_tree(up0, dn0, range(n))
    r1 = validate_tree(up1, dn1, range(n))
    assert (r0, r1) == dtree_roots(n)
    if n % 2 == 0 and n > 1:   # every rank is a leaf in at least one of the two trees
        assert all(not dn0[r] or not dn1[r] for r in range(n))
    # parentChildType: a rank below its parent is that parent's child 0 (its first child)
    for r in range(1, n):
        u, _, _, pct = btree(n, r)
        assert pct == (0 if r < u else 1)
        d0 = btree(n, u)[1]
        assert (d0 == r) == (pct == 0) or u == 0


def test_validate_tree_rejects_broken_trees():
    # a cycle hanging off nothing: 1 <-> 2, each the other's parent and child (consistent links)
    with pytest.raises(PlanInfeasible, match="cycle"):
        validate_tree({0: -1, 1: 2, 2: 1}, {0: [], 1: [2], 2: [1]}, [0, 1, 2])
    # a longer cycle below a healthy part: 0 root -> 3; 1 -> 2 -> 4 -> 1
    with pytest.raises(PlanInfeasible, match="cycle"):
        validate_tree({0: -1, 3: 0, 1: 4, 2: 1, 4: 2}, {0: [3], 3: [], 1: [2], 2: [4], 4: [1]}, [0, 1, 2, 3, 4],
                      max_children=1)
    with pytest.raises(PlanInfeasible, match="2 roots"):
        validate_tree({0: -1, 1: -1}, {0: [], 1: []}, [0, 1])
    with pytest.raises(PlanInfeasible, match="parent is"):
        validate_tree({0: -1, 1: 0, 2: 0}, {0: [1], 1: [2], 2: []}, [0, 1, 2])
    with pytest.raises(PlanInfeasible, match="children"):
        validate_tree({0: -1, 1: 0, 2: 0, 3: 0}, {0: [1, 2, 3], 1: [], 2: [], 3: []}, range(4))


def test_validate_tree_deep_chain():
    """A chain 200,000 ranks deep (a tree that is one long chain) validates: each rank is walked
    once, not once per rank below it (that was ~2 x 10^10 steps)."""
    n = 200_000
    up = {r: r - 1 for r in range(n)}
    up[0] = -1
    down = {r: [r + 1] if r + 1 < n else [] for r in range(n)}
    assert validate_tree(up, down, range(n), max_children=1) == 0


@pytest.mark.parametrize("nodes,gpn", [(1, 8), (2, 8), (3, 4), (4, 1), (7, 2), (16, 8), (64, 8)])
def test_connect_trees_are_valid_with_chains(nodes, gpn):
    rnd = random.Random(nodes * 100 + gpn)
    chains = [list(range(gpn))]
    for _ in range(2):
        c = list(range(gpn))
        rnd.shuffle(c)
        chains.append(c)
    chans = connect_trees(nodes, chains)
    assert len(chans) == 2 * len(chains) and [c["channel"] for c in chans] == list(range(2 * len(chains)))
    validate_trees(chans, nodes * gpn)
    for ch in chans:
        chain = chains[ch["channel"] % len(chains)]
        for node in range(nodes):
            ranks = [node * gpn + lr for lr in chain]
            for a, b in zip(ranks, ranks[1:]):     # chain inside the node
                assert ch["up"][b] == a and ch["down"][a][0] == b
            for r in ranks[1:]:
                assert ch["up"][r] // gpn == node   # only the chain head faces other nodes
        cross = [(u, r) for r, u in ch["up"].items() if u != -1 and u // gpn != r // gpn]
        assert len(cross) == nodes - 1


def _log_layout(text: str, entries: dict) -> tuple:
    """(GPUs per node, nodes) of the run: nccl-tests' "Rank r Pid p on host device d" lines give
    the ranks per host; a log kept by one host lists only its own ranks, so the highest rank the
    tree lines mention completes the count."""
    ranks = re.findall(r"Rank\s+(\d+) Pid\s+\d+ on (\S+) device", text)
    per_host: dict = {}
    for r, h in ranks:
        per_host.setdefault(h, []).append(int(r))
    gpn = len(next(iter(per_host.values())))
    mentioned = {int(r) for r, _ in ranks} | {r for _, r in entries} | \
        {x for up, down in entries.values() for x in [up] + down if x >= 0}
    return gpn, -(-(max(mentioned) + 1) // gpn)


@pytest.mark.parametrize("log", sorted((CAPTURES / "nccllogs").glob("*.log")), ids=lambda p: p.name)
def test_trees_match_real_nccl_logs(log):
    text = log.read_text()
    entries = parse_tree_log(text)
    gpn, nodes = _log_layout(text, entries)
    assert entries and (gpn, nodes) == (8, 2)
    # the tree graph of that run (Pattern 1 line: NET/0 GPU/r ... NET/0, GPUs printed as ranks)
    m = re.search(r"Pattern 1, .*\n.*? 0 : NET/\d+ ((?:GPU/\d+ )+)NET", text)
    chain = [int(x) % gpn for x in re.findall(r"GPU/(\d+)", m.group(1))] if m else list(range(gpn))
    chans = connect_trees(nodes, [chain])
    for (c, rank), (up, down) in entries.items():
        ch = chans[c]
        assert ch["up"][rank] == up and ch["down"][rank] == down, (c, rank)
    assert len(entries) >= 4


def test_log_line_format_and_depth():
    plan = build_trees(load_topology("example:hgx-h100"), nodes=2, chains=[list(range(8))], reference=False)
    assert plan.log_line(0, 0) == "Trees [0] 1/8/-1->0->-1"
    assert plan.log_line(1, 8) == "Trees [1] 9/0/-1->8->-1"
    assert plan.depth == 8 - 1 + log2i(2)
    assert parse_tree_log(plan.log_line(1, 8)) == {(1, 8): (-1, [9, 0])}


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(1, 4), st.randoms(use_true_random=False), st.lists(st.text(max_size=40),
                                                                                          max_size=5))
def test_parse_tree_log_round_trip(nodes, gpn, rnd, junk):
    chain = list(range(gpn))
    rnd.shuffle(chain)
    chans = connect_trees(nodes, [chain])
    plan = TreePlan(nodes, gpn, list(range(gpn)), [chain], "balanced_tree", chans)
    lines = list(junk)
    for ch in chans:
        for r in range(nodes * gpn):
            if rnd.random() < 0.5:
                lines.append(f"host:1:2 [{r % gpn}] NCCL INFO " + plan.log_line(ch["channel"], r))
            else:   # NCCL <= 2.18 wording
                d = (ch["down"][r] + [-1, -1, -1])[:3]
                lines.append(f"host:1:2 [{r % gpn}] NCCL INFO Tree {ch['channel']} : {ch['up'][r]} -> {r} -> "
                             f"{d[0]}/{d[1]}/{d[2]}")
    rnd.shuffle(lines)
    got = parse_tree_log("\n".join(lines))
    for ch in chans:
        for r in range(nodes * gpn):
            assert got[(ch["channel"], r)] == (ch["up"][r], ch["down"][r])


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=300))
def test_parse_tree_log_never_crashes(text):
    out = parse_tree_log(text + "\nTree 1 : -1 -> 0 -> 1/-1/-1\nTrees [x] 1/2->3")
    assert out[(1, 0)] == (-1, [1])


def test_build_trees_from_a_topology():
    plan = build_trees(load_topology("example:hgx-h100"), nodes=4)
    d = plan.to_dict()
    assert d["schema"] == "gpucomm.trees/v1" and d["nranks"] == 32 and d["gpus_per_node"] == 8
    assert len(d["channels"]) == 2 * len(d["chains"]) and d["nccl_reference"]["channels"] >= 2
    roots = {c["tree"]: c["root"] for c in d["channels"] if c["channel"] in (0, len(d["chains"]))}
    assert roots[0] // 8 == 0 and roots[1] // 8 == 3   # tree 0 rooted on node 0, tree 1 (mirror) on node 3
    small = build_trees(load_topology("example:hgx-h100"), nodes=3, gpus_per_node=2, reference=False)
    assert small.gpu_indices == [0, 1] and small.nranks == 6
    one = build_trees(load_topology("example:hgx-h100"), nodes=5, gpus=[6], reference=False)
    assert one.to_dict()["pattern"] == "tree" and one.gpu_indices == [6]


def test_build_trees_errors():
    doc = load_topology("example:hgx-h100")
    with pytest.raises(PlanInfeasible, match="--gpus-per-node 9"):
        build_trees(doc, nodes=2, gpus_per_node=9)
    with pytest.raises(InputError, match="--nodes"):
        build_trees(doc, nodes=0)
    with pytest.raises(InputError, match=r"no GPU 8 in topology \(has 0-7\)"):
        build_trees(doc, nodes=2, gpus=[0, 8])
    with pytest.raises(PlanInfeasible, match="not a permutation"):
        connect_trees(2, [[0, 1], [1, 1]])


def test_cli_trees():
    r = run_cli("trees", "example:dgx-a100", "--nodes", "2", "--format", "json")
    assert r.code == 0, r.stderr
    d = r.json()
    assert d["schema"] == "gpucomm.trees/v1" and d["nodes"] == 2 and d["nranks"] == 16
    ranks = d["channels"][0]["ranks"]
    assert {"rank", "node", "gpu", "up", "down"} <= set(ranks[0])
    t = run_cli("trees", "example:dgx-a100", "--nodes", "2")
    assert t.code == 0 and t.stderr == "" and "Trees:" in t.stdout and "NCCL reference" in t.stdout
    for args, code in ((("--nodes", "2", "--gpus-per-node", "9"), 4), (("--nodes", "0"), 2),
                       (("--gpus", "0,1", "--gpus-per-node", "4"), 1), (("--gpus", "x"), 2)):
        e = run_cli("trees", "example:dgx-a100", *args)
        assert e.code == code and "Traceback" not in e.stderr, args
        assert len(e.stderr.strip().splitlines()) == 1 if code != 2 else "Usage: gpucomm trees" in e.stderr
    assert run_cli("trees", "example:cpu-only").code == 3


def test_cli_trees_compare_with_real_logs():
    """--compare LOG: the RTX 3090 2-node run had P2P off (GeForce), which the topology XML cannot
    say: on the XML our model of NCCL (ncclsim agrees) chains the GPUs 4..7,0..3, NCCL chained 0..7;
    with P2P off as the log shows, our model of NCCL's trees are every tree link NCCL logged."""
    xml = str(CAPTURES / "ncclxml" / "panlichen-rtx3090-8gpu-topo.xml")
    log = str(CAPTURES / "nccllogs" / "panlichen-rtx3090-4node-log.log")
    r = run_cli("trees", xml, "--nodes", "2", "--compare", log, "--format", "json")
    assert r.code == 0 and r.stderr == "", r.stderr
    c = r.json()["nccl_log"]["comparison"]
    assert c["channels"] == {"nccl": 2, "model": 2, "match": True, "ours": 2}
    assert (c["links_vs_ours"]["checked"], c["links_vs_ours"]["match"]) == (8, 4)
    assert (c["links_vs_nccl_chains"]["checked"], c["links_vs_nccl_chains"]["match"]) == (8, 8)
    assert (c["links_vs_adjusted_model"]["checked"], c["links_vs_adjusted_model"]["match"]) == (8, 8)
    assert c["search_channels"] == {"nccl": 1, "model": 1, "match": True}
    t = run_cli("trees", xml, "--nodes", "2", "--compare", log)
    assert t.code == 0 and "our trees: 4 of 8 logged tree links agree; rebuilt from NCCL's own chains: 8 of 8; " \
        "with P2P off as in the log, our model of NCCL's trees: 8 of 8" in t.stdout
    e = run_cli("trees", xml, "--compare", str(CAPTURES / "ncclxml" / "panlichen-rtx3090-graph.xml"))
    assert e.code == 1 and "no NCCL debug lines found" in e.stderr and len(e.stderr.strip().splitlines()) == 1


def _examples():
    from gpucomm.probes.examples import list_examples

    return [e["name"] if isinstance(e, dict) else str(e) for e in list_examples()]


@pytest.mark.parametrize("name", _examples())
def test_trees_are_nccls_trees_on_every_example(name):
    """``gpucomm trees`` connects NCCL's own tree-graph chains: rank 0's parent and children in every
    tree channel are those of our model of NCCL's communicator (ncclTopoPreset + connectTrees, which
    tools/ncclsim_goldens.py checks against NCCL 2.30.7 itself), on 1 to 4 nodes."""
    from gpucomm.probes.errors import TopologyError
    from gpucomm.planners.nccl.comm import nccl_comm

    doc = load_topology(f"example:{name}")
    if not doc.get("gpus"):
        pytest.skip("no GPUs: nothing to connect")
    for nodes in (1, 2, 3, 4):
        try:
            res = nccl_comm(doc, nodes=nodes)
        except TopologyError:
            continue     # no NIC: one node only
        plan = build_trees(doc, nodes=nodes)   # an MNNVL clique of several nodes: one system, as NCCL's
        if plan.nranks < 2:
            continue
        # NCCL may copy its channels once more after connecting the trees (ncclTopoPostset): channel
        # c + 2K is channel c
        K2 = len(plan.channels)
        assert K2 == 2 * len(plan.chains) and len(res.trees) in (K2, 2 * K2) or len(res.trees) < K2, nodes
        for c, want in enumerate(res.trees):
            ch = plan.channels[c % K2]
            assert (ch["up"][0], ch["down"][0]) == (want["up"], [d for d in want["down"] if d != -1]), (nodes, c)
