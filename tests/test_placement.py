"""Placement: Megatron RankGenerator semantics, rank -> node/GPU/CPU/NIC mapping, invariants,
infeasible requests.  Also home of the small document builders the other plan tests import
(hgx_doc, pcie_pairs_doc, vm_flat_doc)."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucomm.planners.placement import layout as pl
from gpucomm.planners.placement import binding as pbind
from gpucomm.planners.placement import nics as pnics
from gpucomm.planners.placement import nodeview as pview
from gpucomm.planners.placement import ranks as pranks
from gpucomm.probes.errors import InputError, NothingToDo, PlanInfeasible
from gpucomm.probes.matrix import compute_matrix
from gpucomm.probes.model import (new_document, nic_record, parse_cpulist)
from support import hgx_doc, pcie_pairs_doc

# ============================================================================================
# Megatron RankGenerator
def test_megatron_docstring_example_16_gpus_tp2_pp4():
    # parallel_state.initialize_model_parallel docstring: 16 GPUs, TP=2, PP=4 (so DP=2).
    g = pranks.RankGenerator(tp=2, ep=1, dp=2, pp=4, cp=1, order="tp-cp-ep-dp-pp")
    assert g.get_ranks("dp") == [[0, 2], [1, 3], [4, 6], [5, 7], [8, 10], [9, 11], [12, 14], [13, 15]]
    assert g.get_ranks("tp") == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11], [12, 13], [14, 15]]
    assert g.get_ranks("pp") == [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]


def test_worked_example_2x8_both_orders():
    g = pranks.RankGenerator(tp=2, ep=1, dp=4, pp=2, cp=1, order="tp-cp-ep-dp-pp")
    assert g.get_ranks("tp")[:2] == [[0, 1], [2, 3]]
    assert g.get_ranks("dp") == [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]]
    assert g.get_ranks("pp") == [[i, i + 8] for i in range(8)]
    g2 = pranks.RankGenerator(tp=2, ep=1, dp=4, pp=2, cp=1, order="tp-cp-ep-pp-dp")
    assert g2.get_ranks("pp")[:3] == [[0, 2], [1, 3], [4, 6]]
    assert g2.get_ranks("dp")[:2] == [[0, 4, 8, 12], [1, 5, 9, 13]]


def test_order_missing_axis_of_size_one_is_appended_and_larger_is_an_error():
    g = pranks.RankGenerator(tp=2, ep=1, dp=2, pp=1, cp=1, order="tp-dp")
    assert g.order == "tp-dp-pp-ep-cp"
    with pytest.raises(InputError, match="pp is 2"):
        pranks.RankGenerator(tp=2, ep=1, dp=2, pp=2, cp=1, order="tp-dp")
    with pytest.raises(InputError):
        pranks.parse_order("tp-xx-dp")
    with pytest.raises(InputError):
        pranks.parse_order("tp-tp")


def test_multi_axis_token_masks_several_axes():
    g = pranks.RankGenerator(tp=2, ep=1, dp=2, pp=2, cp=1)
    # model-parallel group = tp-pp: ranks differing only in tp and pp
    assert g.get_ranks("tp-pp") == [[0, 1, 4, 5], [2, 3, 6, 7]]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([1, 2, 3, 4]), min_size=5, max_size=5), st.permutations(list(pranks.AXES)))
def test_rank_generator_properties(sizes, perm):
    tp, cp, ep, dp, pp = sizes
    if ep > 1 and cp > 1:
        ep = 1
    order = "-".join(perm)
    g = pranks.RankGenerator(tp=tp, ep=ep, dp=dp, pp=pp, cp=cp, order=order)
    world = g.world_size
    for axis in pranks.AXES:
        groups = g.get_ranks(axis)
        assert sorted(r for grp in groups for r in grp) == list(range(world))
        size = g.name_to_size[axis]
        assert all(len(grp) == size for grp in groups)
        for grp in groups:  # members differ only in this axis' coordinate
            cs = [g.coords(r) for r in grp]
            for other in pranks.AXES:
                if other != axis:
                    assert len({c[other] for c in cs}) == 1
            assert sorted(c[axis] for c in cs) == list(range(size))
    # leftmost token has stride 1
    first = order.split("-")[0]
    if g.name_to_size[first] > 1:
        assert g.get_ranks(first)[0][:2] == [0, 1]


def test_mesh_translations_reverse_the_order():
    g = pranks.RankGenerator(tp=8, ep=1, dp=4, pp=2, cp=1)
    m = pranks.mesh_translations(g)
    assert m["device_mesh"]["mesh_dim_names"] == ["pp", "dp", "tp"]
    assert m["device_mesh"]["mesh_shape"] == [2, 4, 8]
    assert m["deepspeed_axes"] == ["pipe", "data", "model"]
    assert 'init_device_mesh("cuda", (2, 4, 8), mesh_dim_names=("pp", "dp", "tp"))' == m["device_mesh"]["code"]
    # DeviceMesh row-major: groups of the last dim are contiguous ranks, same as Megatron's tp groups.
    shape = m["device_mesh"]["mesh_shape"]
    ranks = list(range(2 * 4 * 8))
    last = [ranks[i:i + shape[-1]] for i in range(0, len(ranks), shape[-1])]
    assert last == g.get_ranks("tp")


# ============================================================================================
# Node view, CPUs, NICs
def test_node_view_hgx():
    v = pview.node_view(hgx_doc())
    assert v.nvswitch and v.nvlink_domains == [list(range(8))]
    assert v.gpu_nics == {i: [f"mlx5_{i}"] for i in range(8)}
    assert set(v.gpu_nic_level.values()) == {"PIX"}
    assert v.nvlink_bw_per_gpu(0) == pytest.approx(18 * 20.6)


def test_cpu_binding_matches_torchrun_exclusive_split():
    # 2 NUMA nodes x 56 cores (+ SMT siblings at +112), 4 GPUs per NUMA node: 14 cores each,
    # whole physical cores (both hyperthreads), lowest local rank first.
    v = pview.node_view(hgx_doc())
    b = pbind.cpu_binding(v, list(range(8)))
    assert b[0]["cpus"] == "0-13,112-125" and b[0]["cores"] == 14 and b[0]["mems"] == 0
    assert b[4]["cpus"] == "56-69,168-181" and b[4]["mems"] == 1
    all_cpus = [c for x in b for c in parse_cpulist(x["cpus"])]
    assert len(all_cpus) == len(set(all_cpus)) == 224  # exclusive and complete


def test_cpu_binding_remainder_goes_to_lower_ranks():
    v = pview.node_view(hgx_doc(n_gpus=3, numa_nodes=1, cpus_per_numa=10, smt=False))
    b = pbind.cpu_binding(v, [0, 1, 2])
    assert [x["cores"] for x in b] == [4, 3, 3]
    assert [x["cpus"] for x in b] == ["0-3", "4-6", "7-9"]


def test_nics_rail_tie_break_and_storage_nic_ignored():
    doc = hgx_doc()
    # a slow front-end Ethernet NIC under GPU0's switch must not become a rail NIC
    doc["nics"].append(nic_record("mlx5_8", netdev="enp1", pci_bus_id="0000:1a:00.0", numa_node=0,
                                  link_layer="Ethernet", parent="0000:16:00.0",
                                  ports=[{"port": 1, "state": "ACTIVE", "rate_gbps": 100.0}]))
    compute_matrix(doc)
    v = pview.node_view(doc)
    assert v.gpu_nics[0] == ["mlx5_0"]
    # two GPUs, two NICs under one switch: dealt out in order (rail k -> NIC k)
    d2 = pcie_pairs_doc(n_gpus=2, pairs=())
    d2["nics"] = [nic_record(n, netdev=n + "x", pci_bus_id=f"0000:1{k + 5}:00.0", numa_node=0, link_layer="InfiniBand",
                             parent="0000:10:00.0", ports=[{"port": 1, "state": "ACTIVE", "rate_gbps": 200.0}])
                  for k, n in enumerate(["mlx5_0", "mlx5_1"])]
    compute_matrix(d2)
    v2 = pview.node_view(d2)
    assert v2.gpu_nics == {0: ["mlx5_0"], 1: ["mlx5_1"]}


def test_down_nic_left_out():
    doc = hgx_doc()
    doc["nics"][3]["ports"][0]["state"] = "DOWN"
    v = pview.node_view(doc)
    assert "mlx5_3" not in v.nics and any("mlx5_3" in n for n in v.notes)


# ============================================================================================
# Plans
def test_plan_hgx_two_nodes_tp8_pp2_invariants():
    doc = hgx_doc()
    p = pl.build_plan(doc, nodes=2, tp=8, pp=2)
    assert pl.check_plan_invariants(p) == []
    assert p["world_size"] == 16 and p["parallelism"]["dp"] == 1
    assert p["groups"]["pp"] == [[i, i + 8] for i in range(8)]
    v = pview.node_view(doc)
    for r in p["ranks"]:
        # NIC of each rank on its GPU's PCIe switch (PIX)
        assert r["nics"] and doc["matrix"][f"GPU{r['gpu']}"][r["nics"][0]] == "PIX"
        assert r["numa_node"] == v.gpu(r["gpu"]).numa_node
    # rail alignment: PP peers use NICs of the same rail
    by = {r["rank"]: r for r in p["ranks"]}
    for a, b in p["groups"]["pp"]:
        assert by[a]["nics"] == by[b]["nics"] and by[a]["node"] != by[b]["node"]
    assert p["ranks"][8]["gpu_uuid"] is None and p["ranks"][0]["gpu_uuid"].startswith("GPU-")


def test_tp_groups_follow_nvlink_pairs_in_a_pcie_box():
    # NVLink bridges on (0,2) and (1,3); PCIe switches pair (0,1) and (2,3).
    doc = pcie_pairs_doc(pairs=((0, 2), (1, 3)))
    p = pl.build_plan(doc, nodes=1, tp=2)
    assert pl.check_plan_invariants(p) == []
    tp_gpus = sorted(sorted(p["ranks"][r]["gpu"] for r in g) for g in p["groups"]["tp"])
    assert tp_gpus == [[0, 2], [1, 3]]
    # bridges on the switch pairs: identity map
    p2 = pl.build_plan(pcie_pairs_doc(pairs=((0, 1), (2, 3))), nodes=1, tp=2)
    assert [lr["gpu"] for lr in p2["local_ranks"]] == [0, 1, 2, 3]


def test_tp_prefers_same_switch_without_nvlink():
    doc = pcie_pairs_doc(n_gpus=4, pairs=(), numa_nodes=2)
    p = pl.build_plan(doc, nodes=1, tp=2, gpus=[0, 2, 1, 3])
    for g in p["groups"]["tp"]:
        a, b = (p["ranks"][r]["gpu"] for r in g)
        assert doc["matrix"][f"GPU{a}"][f"GPU{b}"] == "PIX"


@pytest.mark.parametrize("kw,msg", [
    (dict(tp=3), "tp=3 does not divide 8 GPUs per node"),
    (dict(tp=16), "does not fit in 8 GPUs per node"),
    (dict(tp=2, dp=3), "tp\\*cp\\*dp\\*pp = 6 but the plan has 8 GPUs"),
    (dict(tp=2, pp=3), "not divisible by tp\\*cp\\*pp = 6"),
    (dict(tp=2, ep=8), r"etp\*ep\*pp = 2\*8\*1 = 16 does not divide the 8 GPUs"),
    (dict(tp=1, dp=4, pp=2, ep=2, order="tp-cp-ep-pp-dp"), r"expert data-parallel size \(2\) to equal"),
    (dict(tp=2, gpus_per_node=9), "9 GPUs per node requested but the topology has 8"),
    (dict(tp=4, dp=4, order="dp-tp-pp", nodes=2), "TP groups span nodes"),
])
def test_infeasible(kw, msg):
    kw = dict(kw)
    nodes = kw.pop("nodes", 1)
    with pytest.raises(PlanInfeasible, match=msg):
        pl.build_plan(hgx_doc(), nodes=nodes, **kw)


def test_no_gpus_is_nothing_to_do_and_bad_values_are_input_errors():
    with pytest.raises(NothingToDo):
        pl.build_plan(new_document("json"), tp=1)
    with pytest.raises(InputError):
        pl.build_plan(hgx_doc(), tp=0)
    with pytest.raises(InputError):
        pl.build_plan(hgx_doc(), nodes=0)
    with pytest.raises(PlanInfeasible, match="GPU index 9"):
        pl.build_plan(hgx_doc(), gpus=[0, 9])


def test_mig_refuses_tp_and_warns_otherwise():
    doc = hgx_doc(mig=True)
    with pytest.raises(PlanInfeasible, match="MIG"):
        pl.build_plan(doc, tp=2)
    p = pl.build_plan(doc, tp=1)
    assert any("MIG" in w for w in p["warnings"])


def test_groups_straddling_nodes_are_flagged():
    # 3 nodes of 8: tp=2 x dp=12 fine; tp=2 x dp=4 x pp=3 straddles unevenly
    p = pl.build_plan(hgx_doc(), nodes=3, tp=2, dp=4, pp=3)
    assert pl.check_plan_invariants(p) == []


def test_check_plan_invariants_detects_problems():
    p = pl.build_plan(hgx_doc(), nodes=2, tp=8, pp=2)
    bad = dict(p, groups=dict(p["groups"], tp=[[0, 8]] + p["groups"]["tp"][1:]))
    assert any("spans nodes" in x for x in pl.check_plan_invariants(bad))
    bad2 = dict(p, ranks=p["ranks"][:-1])
    assert pl.check_plan_invariants(bad2)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 3]),
       st.sampled_from(["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", "tp-dp-pp"]))
def test_plan_invariants_hold(tp, pp, nodes, order):
    total = nodes * 8
    if total % (tp * pp):
        return
    p = pl.build_plan(HGX, nodes=nodes, tp=tp, pp=pp, order=order)
    assert pl.check_plan_invariants(p) == []
    assert len({(r["node"], r["gpu"]) for r in p["ranks"]}) == total


HGX = hgx_doc()


def test_fixture_hosts_plan(tmp_path):
    from gpucomm.probes.examples import list_examples
    from gpucomm.probes.load import load_topology

    names = [n for n in ("hgx-h100", "dgx-a100", "dgx1-v100", "a100-pcie-4x-nvbridge", "gb200-tray",
                         "pcie-8x-consumer") if n in list_examples()]
    if not names:
        pytest.skip("no recorded hosts installed")
    for n in names:
        doc = load_topology(f"example:{n}")
        v = pview.node_view(doc)
        tp = 2
        p = pl.build_plan(doc, nodes=2, tp=tp)
        assert pl.check_plan_invariants(p) == [], n
        # every TP pair is an NVLink pair when the box has NVLink domains that fit
        if v.nvlink_domains:
            for g in p["groups"]["tp"]:
                a, b = (p["ranks"][r]["gpu"] for r in g)
                assert doc["matrix"][f"GPU{a}"][f"GPU{b}"].startswith("NV"), (n, a, b)
        for r in p["ranks"]:
            lvl = [doc["matrix"][f"GPU{r['gpu']}"].get(x) for x in r["nics"]]
            best = min((pnics.NIC_LEVEL_RANK.get(doc["matrix"][f"GPU{r['gpu']}"].get(x.get("name")), 9)
                        for x in doc["nics"] if x["name"] in v.gpu_nics.get(r["gpu"], [])), default=None)
            if best is not None:
                assert min(pnics.NIC_LEVEL_RANK.get(x, 9) for x in lvl) == best


def test_dgx1_hybrid_cube_mesh_tp4_stays_in_a_quad():
    from gpucomm.probes.examples import list_examples
    from gpucomm.probes.load import load_topology

    if "dgx1-v100" not in list_examples():
        pytest.skip("dgx1-v100 not installed")
    doc = load_topology("example:dgx1-v100")
    p = pl.build_plan(doc, tp=4)
    for g in p["groups"]["tp"]:
        gs = [p["ranks"][r]["gpu"] for r in g]
        for a, b in itertools.combinations(gs, 2):
            assert doc["matrix"][f"GPU{a}"][f"GPU{b}"].startswith("NV")


def test_dgx1_tp8_ring_stays_on_nvlink():
    """Regression: a TP group's in-node bandwidth was its slowest *pair* (GPU0-GPU5 meet over SYS
    on a DGX-1: 'pcie ~4.2 GB/s'), but a ring runs on its best Hamiltonian cycle, and the hybrid
    cube mesh has one made of NV2 links only (0-3-2-1-5-6-7-4).  The alpha-beta screening of
    --model candidates used that number and priced tp=8 ~10x too slow."""
    from gpucomm.probes.examples import list_examples
    from gpucomm.probes.load import load_topology

    if "dgx1-v100" not in list_examples():
        pytest.skip("dgx1-v100 not installed")
    doc = load_topology("example:dgx1-v100")
    p = pl.build_plan(doc, tp=8)
    tier = p["tiers"]["tp"]
    assert tier["where"] == "nvlink"
    v = pview.node_view(doc)
    assert tier["intra_GBps"] == pytest.approx(2 * 20.0)          # NV2 on V100: 2 x 20 GB/s (NCCL sm70)
    assert pview.best_ring(v, [0, 1, 2, 3, 4, 5, 6, 7]) == (pytest.approx(40.0), True)
    # brute force agrees: no cycle does better, and some pair is narrower (GPU0-GPU5: no NVLink, NCCL
    # relays through a peer, NVB)
    assert min(v.pair_bw(a, b) for a, b in itertools.combinations(range(8), 2)) < 40
    # a group split over two sockets without NVLink between them stays "pcie"
    pc = load_topology("example:pcie-8x-consumer") if "pcie-8x-consumer" in list_examples() else None
    if pc is not None:
        vp = pview.node_view(pc)
        bw, nv = pview.best_ring(vp, [0, 2, 4, 6])
        assert not nv and bw == pytest.approx(min(vp.pair_bw(0, 4), vp.pair_bw(2, 6)))


@settings(max_examples=60, deadline=None)
@given(numa_nodes=st.integers(1, 4), cores=st.integers(1, 24), smt=st.booleans(),
       interleave=st.booleans(), gpu_numa=st.lists(st.integers(0, 3), min_size=1, max_size=8))
def test_cpu_binding_partitions_each_numa_node(numa_nodes, cores, smt, interleave, gpu_numa):
    """Per-rank CPU sets never overlap and cover their NUMA node, whatever the numbering (contiguous
    or interleaved between nodes, with or without SMT siblings), whenever the node has at least as
    many cores as ranks; rankfile slots are a permutation of the cores used."""
    doc = hgx_doc(n_gpus=len(gpu_numa), numa_nodes=numa_nodes, cpus_per_numa=cores, smt=smt, nics=False)
    total = cores * numa_nodes
    for n in range(numa_nodes):
        first = [n + numa_nodes * k for k in range(cores)] if interleave else list(range(n * cores, (n + 1) * cores))
        cpus = first + ([c + total for c in first] if smt else [])
        doc["numa_nodes"][n]["cpus"] = ",".join(map(str, sorted(cpus)))
    for g, n in zip(doc["gpus"], gpu_numa):
        g["numa_node"] = n % numa_nodes
        g["numa_affinity"] = [n % numa_nodes]
    v = pview.node_view(doc)
    b = pbind.cpu_binding(v, [g["index"] for g in doc["gpus"]])
    by_numa = {}
    for x in b:
        by_numa.setdefault(x["numa_node"], []).append(x)
    slots = []
    core_of = pbind.core_map(v)
    for numa, xs in by_numa.items():
        node_cpus = set(parse_cpulist(doc["numa_nodes"][numa]["cpus"]))
        sets = [set(parse_cpulist(x["cpus"])) for x in xs]
        assert all(s <= node_cpus for s in sets)
        # the document has no thread siblings: interleaved lists without SMT read as SMT (c, c+N/2),
        # so "enough cores" is judged by the same core model the binding uses
        if len(xs) <= len({core_of[c] for c in node_cpus}):
            assert sum(len(s) for s in sets) == len(set().union(*sets)) == len(node_cpus)
            slots += [c for x in xs for c in parse_cpulist(x["logical_cores"])]
    assert len(slots) == len(set(slots))
    assert all(0 <= s < len(set(pbind.core_map(v).values())) for s in slots)


@settings(max_examples=200, deadline=None)
@given(tp=st.sampled_from([1, 2, 4]), ep=st.sampled_from([1, 2]), dp=st.sampled_from([1, 2, 3]),
       pp=st.sampled_from([1, 2, 4]), order=st.sampled_from(["tp-cp-ep-dp-pp", "tp-pp-dp", "tp-dp-pp", "pp-dp-tp"]),
       token=st.sampled_from(["tp", "dp", "pp", "ep", "tp-pp", "dp-pp"]), offset=st.sampled_from([0, 8]),
       lo=st.integers(0, 60), width=st.integers(1, 16))
def test_a_nodes_share_of_the_groups_equals_the_filtered_groups(tp, ep, dp, pp, order, token, offset, lo, width):
    """RankGenerator.get_local_ranks (a node's share, computed from its ranks only) equals Megatron's
    groups filtered to the node."""
    from gpucomm.planners.placement.ranks import RankGenerator

    if "ep" not in order and ep > 1:
        order += "-ep"
    g = RankGenerator(tp=tp, ep=ep, dp=dp, pp=pp, cp=1, order=order, rank_offset=offset)
    hi = lo + width
    expected = [[m for m in grp if lo <= m < hi] for grp in g.get_ranks(token)]
    assert g.get_local_ranks(token, lo, hi) == [e for e in expected if e]
    # and the groups as bases plus offsets, the first group alone
    bases, members = g.group_parts(token)
    assert [[b + m for m in members] for b in bases] == g.get_ranks(token)
    assert g.first_group(token) == g.get_ranks(token)[0]
