"""gpucomm.planners.collectives.cost: NCCL's tuning model on hand-built graph summaries (expected values computed by hand
from tuning.cc ncclTopoTuneModel), size parsing, topology summaries, and the ``gpucomm predict`` command."""
from __future__ import annotations

import dataclasses
import json
import math

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucomm.planners.collectives import cost
from gpucomm.planners.collectives.cost import predict
from gpucomm.planners.collectives.transport import SOCKET_GBPS
from gpucomm.planners.nccl import tuning
from gpucomm.planners.nccl.tuning import CommGraph, tuning_table
from gpucomm.probes import units
from gpucomm.probes.units import parse_size, parse_sizes
from gpucomm.probes.errors import InputError, PlanInfeasible, TopologyError
from gpucomm.probes.model import dumps_json, gpu_record, link_record, new_document, nic_record

from support import CAPTURES

TOPO = CAPTURES / "topo"
H100_SMI = TOPO / "17_h100-sxm-x8_12nic.txt"
A6000_SMI = TOPO / "31_rtxa6000-x8_nv4_collapsed-spaces.txt"

# HGX H100 as NCCL sees it (connect.cc): ring 12 channels x 30 GB/s; NVLS 8 heads x 40 GB/s,
# bwInter raised to the top of the sm90 ladder (60).
H100 = CommGraph(n_ranks=8, n_nodes=1, gpus_per_node=8, channels=12, bw_intra=30.0, bw_inter=30.0,
                 type_intra="NVL", cc=90, nvls=True, nvls_channels=8, nvls_bw_intra=40.0, nvls_bw_inter=60.0)
PCIE = CommGraph(n_ranks=8, n_nodes=1, gpus_per_node=8, channels=1, bw_intra=10.0, bw_inter=10.0,
                 type_intra="SYS", cc=86)
TWO_NODES = CommGraph(n_ranks=16, n_nodes=2, gpus_per_node=8, channels=8, bw_intra=48.0, bw_inter=48.0,
                      type_intra="NVL", type_inter="PIX", cc=90, cpu_vendor="intel", nvls=True,
                      nvls_channels=8, nvls_bw_intra=40.0, nvls_bw_inter=48.0)


def cell(g, coll, algo, proto, achievable=False):
    return tuning_table(g, coll, achievable)[(algo, proto)]


# ---------------------------------------------------------------- NCCL's table, by hand
@pytest.mark.parametrize("algo,proto,lat,bw", [
    # Ring Simple: 8.4 + 14*3.4; busBw 12*30 = 360 -> *8/14
    ("ring", "Simple", 56.0, 360 * 8 / 14),
    # Ring LL: min(llMaxBw Hopper-N1 141, 360*0.5) = 141; 6.6 + 14*0.6
    ("ring", "LL", 15.0, 141 * 8 / 14),
    # Ring LL128: min(360*0.92, 12*36.7); 14 + 14*1.9
    ("ring", "LL128", 40.6, 331.2 * 8 / 14),
    # Tree Simple AR: min(360*0.92, 12*38.7) * 0.5; 8.4 + 2*7*4.0
    ("tree", "Simple", 64.4, 165.6),
    # Tree LL: min(331.2/3.8, 141) * 0.5; 6.8 + 2*7*0.6
    ("tree", "LL", 15.2, 331.2 / 3.8 * 0.5),
    # Tree LL128: min(331.2*7/9, 12*36.7) * 0.5; 14 + 2*7*1.25
    ("tree", "LL128", 31.5, 331.2 * 7 / 9 * 0.5),
    # NVLS: min(40*0.85*7/8*2, 60) * 8 channels * 8/14; latency hwLat NVLINK NVLS Simple = 25
    ("nvls", "Simple", 25.0, 59.5 * 8 * 8 / 14),
])
def test_h100_allreduce_table(algo, proto, lat, bw):
    c = cell(H100, "all_reduce", algo, proto)
    assert c.lat == pytest.approx(lat) and c.bw == pytest.approx(bw)


def test_h100_table_has_no_pat_or_nvls_tree_on_one_node():
    t = tuning_table(H100, "all_reduce")
    assert set(a for a, _ in t) == {"ring", "tree", "nvls"}
    ag = tuning_table(H100, "all_gather")
    assert set(a for a, _ in ag) == {"ring", "nvls"}
    # NVLS all_gather: intra 40*0.85*7/8*(7/8) = 26.03 per channel, x8, x n/(n-1)
    assert ag[("nvls", "Simple")].bw == pytest.approx(40 * 0.85 * 7 / 8 * 7 / 8 * 8 * 8 / 7)
    assert set(a for a, _ in tuning_table(H100, "broadcast")) == {"ring"}


def test_broadcast_is_one_step_of_latency():
    c = cell(H100, "broadcast", "ring", "Simple")
    assert c.lat == pytest.approx(8.4 + 3.4) and c.bw == pytest.approx(360.0)   # nsteps = n -> algBw = busBw
    not_same = dataclasses.replace(H100, same_channels=False)
    # not sameChannels: nsteps * hwLat (Simple uses the Tree/Simple chunk latency, NVLINK 4.0)
    assert cell(not_same, "broadcast", "ring", "Simple").lat == pytest.approx(8.4 + 8 * 4.0)


def test_pcie_ring_no_ll128_and_pci_latencies():
    t = tuning_table(PCIE, "all_reduce")
    assert ("ring", "LL128") not in t and ("tree", "LL128") not in t
    assert t[("ring", "Simple")].lat == pytest.approx(8.4 + 14 * 5.7)
    assert t[("ring", "LL")].bw == pytest.approx(min(87.7, 10 * 0.5) * 8 / 14)   # Ampere-N1 llMaxBw 87.7


@pytest.mark.parametrize("g, expect", [
    (replace(PCIE, type_intra="NVL"), True),     # sm86 over NVLink: tuning.cc only needs compcap >= 70
    (replace(PCIE, type_intra="NVL", cc=61), False),
    (replace(TWO_NODES, type_inter="PXN"), True),
    (replace(TWO_NODES, type_inter="PXN", ll128_c2c=False), False),   # NCCL_LL128_C2C=0: at most PXB
    (replace(TWO_NODES, type_inter="P2C"), True),
    (replace(TWO_NODES, type_inter="PHB"), False),
])
def test_ll128_follows_nccls_rule(g, expect):
    """The cost model's LL128 availability is :func:`ll128_default`, the rule of the exact model."""
    assert (("ring", "LL128") in tuning_table(g, "all_reduce")) is expect


def test_nics_that_are_not_rdma_devices_are_named_with_their_transports():
    """Across nodes, NICs that are not RDMA devices (Polaris' Slingshot Cassini) take NCCL's traffic
    through a net plugin or its socket transport, not IB verbs: the prediction says which it assumed."""
    from gpucomm.probes.load import load_topology

    pol, _ = cost.graphs(load_topology("example:polaris"), nodes=2)
    assert any(n.startswith("hsn0, hsn1: not RDMA devices") and "--fabric-gbps" in n for n in pol.notes)
    h100, _ = cost.graphs(load_topology("example:hgx-h100"), nodes=2)
    assert not any("not RDMA" in n for n in h100.notes)
    one, _ = cost.graphs(load_topology("example:polaris"), nodes=1)
    assert not any("not RDMA" in n for n in one.notes)


def test_two_nodes_latencies_and_caps():
    # Ring Simple: intraLat max(3.4, Intel 1.0*3); 28 intra steps + 2 inter steps of 14
    c = cell(TWO_NODES, "all_reduce", "ring", "Simple")
    assert c.lat == pytest.approx(8.4 + 28 * 3.4 + 2 * 14.0)
    assert c.bw == pytest.approx(8 * 48 * 16 / 30)
    # Ring LL on 2 nodes: llMaxBw[Intel][N2] = 39
    assert cell(TWO_NODES, "all_reduce", "ring", "LL").bw == pytest.approx(39.0 * 16 / 30)
    assert cell(TWO_NODES, "all_reduce", "ring", "LL").lat == pytest.approx(6.6 + 28 * 1.0 + 2 * 2.7)
    # Tree Simple: perChMaxTreeBw Hopper-N2 41.4 caps 8*48*0.92; latency 2*(7*4.0 + 1*14)
    t = cell(TWO_NODES, "all_reduce", "tree", "Simple")
    assert t.bw == pytest.approx(8 * 41.4 * 0.5) and t.lat == pytest.approx(8.4 + 2 * (7 * 4.0 + 14.0))
    # NVLSTree: min(59.5, 48*2, perChMaxNVLSTreeBw Hopper-N2 57.7) * 8 * 16/30; lat 25 + 2*log2(2)*20.9
    n = cell(TWO_NODES, "all_reduce", "nvls_tree", "Simple")
    assert n.bw == pytest.approx(57.7 * 8 * 16 / 30) and n.lat == pytest.approx(25 + 2 * 20.9)
    assert ("nvls", "Simple") not in tuning_table(TWO_NODES, "all_reduce")   # needs CollNet across nodes
    amd = dataclasses.replace(TWO_NODES, cpu_vendor="amd")
    assert cell(amd, "all_reduce", "ring", "LL").bw == pytest.approx(22.5 * 16 / 30)   # llMaxBw[AMD][N2]
    assert cell(amd, "all_reduce", "ring", "Simple").lat == pytest.approx(8.4 + 28 * 6.0 + 2 * 14.0)


def test_ring_plateau_and_tree_correction():
    g = TWO_NODES
    c = cell(g, "all_reduce", "ring", "Simple")
    small, big = 8191, 8192   # nBytes/(nCh*nRanks) >= 64 -> lat x1.4 on Ampere+
    assert tuning.algo_time(g, "all_reduce", "ring", "Simple", c, small) == pytest.approx(c.lat + small / (1000 * c.bw))
    assert tuning.algo_time(g, "all_reduce", "ring", "Simple", c, big) == pytest.approx(1.4 * c.lat + big / (1000 * c.bw))
    t = cell(H100, "all_reduce", "tree", "Simple")
    size = 1 << 20   # log2(2^20 >> 6) = 14 -> Simple factor .5
    assert tuning.algo_time(H100, "all_reduce", "tree", "Simple", t, size) == pytest.approx(t.lat + size / (1000 * t.bw * 0.5))


def test_tree_pattern_tree_is_85_percent():
    g = dataclasses.replace(H100, tree_pattern="TREE")
    assert cell(g, "all_reduce", "tree", "Simple").bw == pytest.approx(165.6 * 0.85)


def test_pat_one_gpu_per_node():
    g = CommGraph(n_ranks=4, n_nodes=4, gpus_per_node=1, channels=2, bw_intra=24.0, bw_inter=24.0, cc=90)
    c = cell(g, "all_gather", "pat", "Simple")
    assert c.bw == pytest.approx(24 * 2 * 0.75) and c.lat == pytest.approx(8 + 2 * 14 / 3.5 + 4 * 2.8)
    assert ("pat", "Simple") not in tuning_table(TWO_NODES, "all_gather")


# ---------------------------------------------------------------- predict
def test_predict_h100_picks_ll_then_nvls():
    rows = predict(H100, "all_reduce", [8, 1 << 30])
    assert (rows[0]["algorithm"], rows[0]["protocol"]) == ("ring", "LL")
    assert rows[0]["time_us"] == pytest.approx(15.0, abs=0.01)
    big = rows[1]
    assert (big["algorithm"], big["protocol"]) == ("nvls", "Simple")
    assert big["time_us"] == pytest.approx(25 + (1 << 30) / (1000 * 272.0), rel=1e-6)
    assert big["busbw_GBps"] == pytest.approx(big["algbw_GBps"] * 14 / 8, rel=1e-4)
    assert big["count"] == (1 << 30) // 4 and big["type"] == "float"


def test_predict_uses_achievable_bandwidth_after_nccl_choice():
    g = dataclasses.replace(PCIE, ring_bus_bw=15.744, tree_bus_bw=15.744)
    r = predict(g, "all_reduce", [1 << 27])[0]
    assert (r["algorithm"], r["protocol"]) == ("ring", "Simple")
    assert r["busbw_GBps"] == pytest.approx(15.65, abs=0.02)     # 128 MiB of the A6000 capture: 15.74
    assert r["nccl_time_us"] > r["time_us"]                      # NCCL's own 10 GB/s ring is slower


def test_predict_algo_restrictions():
    assert {r["algorithm"] for r in predict(H100, "all_reduce", [1 << 30], algo="ring")} == {"ring"}
    assert predict(H100, "all_reduce", [1 << 30], algo="tree")[0]["algorithm"] == "tree"
    with pytest.raises(PlanInfeasible, match="NVLS needs an NVSwitch"):
        predict(PCIE, "all_reduce", [1024], algo="nvls")
    with pytest.raises(PlanInfeasible):
        predict(H100, "all_gather", [1024], algo="tree")
    with pytest.raises(InputError):
        predict(H100, "all_reduce", [1024], algo="collnet")
    with pytest.raises(InputError):
        predict(H100, "allfoo", [1024])
    assert predict(TWO_NODES, "all_reduce", [1 << 30], algo="nvls")[0]["algorithm"] == "nvls_tree"


def test_collective_names():
    for name, want in [("allreduce", "all_reduce"), ("all-gather", "all_gather"), ("alltoall", "all_to_all"),
                       ("sendrecv", "send_recv"), ("reduce_scatter_perf", "reduce_scatter"), ("bcast", "broadcast")]:
        assert units.normalize_collective(name) == want


def test_busbw_factors():
    assert units.busbw_factor("all_reduce", 8) == pytest.approx(1.75)
    for c in ("all_gather", "reduce_scatter", "all_to_all"):
        assert units.busbw_factor(c, 8) == pytest.approx(7 / 8)
    for c in ("broadcast", "reduce", "send_recv"):
        assert units.busbw_factor(c, 8) == 1.0


def test_all_to_all_and_send_recv():
    g = dataclasses.replace(H100, gpu_bw=370.8, p2p_bw=370.8)
    S = 1 << 30
    a2a = predict(g, "all_to_all", [S])[0]
    lat = 8.4 + 7 * 3.4      # baseLat + one NVLink Ring/Simple step per peer (timing.p2p_latency)
    assert a2a["time_us"] == pytest.approx(lat + 7 / 8 * S / (1000 * 370.8), rel=1e-6)
    assert a2a["busbw_GBps"] == pytest.approx(370.8, rel=2e-2)     # busbw -> per-GPU injection bandwidth (less 7 steps of latency)
    assert a2a["count"] == S // 4 // 8
    sr = predict(g, "send_recv", [S])[0]
    assert sr["busbw_GBps"] == pytest.approx(sr["algbw_GBps"]) and sr["algorithm"] == "p2p"
    # across nodes the NICs of a node carry g(n-g)/n of every rank's bytes
    m = dataclasses.replace(TWO_NODES, gpu_bw=370.8, node_net_bw=400.0, nic_bw=50.0)
    r = predict(m, "all_to_all", [S])[0]
    # 7 node peers (NVLink steps) and 8 remote ones (network steps)
    assert r["time_us"] == pytest.approx(8.4 + 7 * 3.4 + 8 * 14.0 + 8 * 8 * S / 16 / (1000 * 400.0), rel=1e-6)
    assert predict(m, "send_recv", [S])[0]["busbw_GBps"] == pytest.approx(50.0, rel=0.01)
    with pytest.raises(PlanInfeasible):
        predict(g, "all_to_all", [S], algo="tree")


def test_graph_summary_validation():
    with pytest.raises(InputError):
        CommGraph(n_ranks=8, n_nodes=2, gpus_per_node=8, channels=1, bw_intra=1.0, bw_inter=1.0)
    with pytest.raises(InputError):
        CommGraph(n_ranks=8, n_nodes=1, gpus_per_node=8, channels=0, bw_intra=1.0, bw_inter=1.0)
    with pytest.raises(InputError):
        CommGraph(n_ranks=8, n_nodes=1, gpus_per_node=8, channels=1, bw_intra=float("nan"), bw_inter=1.0)


graphs = st.builds(
    lambda nodes, gpn, ch, bwi, bwe, typ, cc, vendor, ach: CommGraph(
        n_ranks=nodes * gpn, n_nodes=nodes, gpus_per_node=gpn, channels=ch, bw_intra=bwi, bw_inter=bwe,
        type_intra=typ, type_inter="PIX" if nodes == 1 else "PHB", cc=cc, cpu_vendor=vendor,
        nvls=cc >= 90 and typ == "NVL", nvls_channels=min(gpn, 32) if gpn > 1 else 0,
        nvls_bw_intra=bwi, nvls_bw_inter=bwe, ring_bus_bw=ach, tree_bus_bw=ach, gpu_bw=ach, p2p_bw=ach,
        node_net_bw=ach if nodes > 1 else None, nic_bw=ach if nodes > 1 else None),
    st.integers(1, 64), st.integers(1, 16), st.integers(1, 32),
    st.floats(0.1, 500), st.floats(0.1, 500), st.sampled_from(["NVL", "NVB", "PIX", "PHB", "SYS"]),
    st.sampled_from([70, 80, 86, 90, 100]), st.sampled_from([None, "intel", "amd"]),
    st.one_of(st.none(), st.floats(0.5, 1000)))


@given(graphs, st.sampled_from(units.COLLECTIVES))
@settings(max_examples=80, deadline=None)
def test_prediction_invariants(g, coll):
    sizes = [1 << k for k in range(0, 34, 3)]
    if g.n_ranks == 1 and coll != "send_recv":
        return
    rows = predict(g, coll, sizes)
    assert [r["size_bytes"] for r in rows] == sizes
    prev_nccl = 0.0
    for r in rows:
        assert math.isfinite(r["time_us"]) and r["time_us"] > 0
        assert r["algbw_GBps"] >= 0 and math.isfinite(r["busbw_GBps"])
        if r["algbw_GBps"] > 1:
            assert r["algbw_GBps"] * r["time_us"] * 1e3 == pytest.approx(r["size_bytes"], rel=2e-3)
            assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * units.busbw_factor(coll, g.n_ranks), rel=2e-3)
        if "nccl_time_us" in r:   # NCCL's own estimate is monotone in size (min of monotone functions)
            assert r["nccl_time_us"] >= prev_nccl - 1e-6
            prev_nccl = r["nccl_time_us"]
    json.dumps(rows, allow_nan=False)


@given(graphs, st.floats(1.1, 8.0))
@settings(max_examples=60, deadline=None)
def test_more_bandwidth_is_never_slower_for_nccl(g, k):
    faster = dataclasses.replace(g, bw_intra=g.bw_intra * k, bw_inter=g.bw_inter * k,
                          nvls_bw_intra=g.nvls_bw_intra * k, nvls_bw_inter=g.nvls_bw_inter * k)
    if g.n_ranks == 1:
        return
    for a, b in zip(predict(g, "all_reduce", [1 << 10, 1 << 20, 1 << 30]),
                    predict(faster, "all_reduce", [1 << 10, 1 << 20, 1 << 30])):
        assert b["nccl_time_us"] <= a["nccl_time_us"] + 1e-6


# ---------------------------------------------------------------- sizes
@pytest.mark.parametrize("text,value", [
    ("8", 8), ("8B", 8), ("1K", 1024), ("1KiB", 1024), ("1KB", 1000), ("1.5GiB", 3 << 29), ("8GiB", 8 << 30),
    ("32M", 32 << 20), (" 2 MiB ", 2 << 20), ("1gb", 10 ** 9), ("0", 0),
])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1Q", "-1", "1.5B", "2PiB", "1e3", "GiB", "1 2"])
def test_parse_size_errors_name_the_flag(text):
    with pytest.raises(InputError, match="--size"):
        parse_size(text)


def test_parse_sizes():
    assert parse_sizes("8B:8GiB") == [8 << k for k in range(31)]
    assert parse_sizes("1K:1M:x4") == [1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20]
    assert parse_sizes("1K:1M:4") == parse_sizes("1K:1M:x4")
    assert parse_sizes("1M,2M,3M") == [1 << 20, 2 << 20, 3 << 20]
    assert parse_sizes("1GiB") == [1 << 30]
    assert parse_sizes("3:3") == [3]
    for bad in ("1M:1K", "0:1K", "1K:1M:x1", "1K:1M:x0.5", "1:2:3:4", "1K:1M:xy", "1:1P", "1:1T:x1.0001"):
        with pytest.raises(InputError, match="--size"):
            parse_sizes(bad)


@given(st.text(max_size=30))
@settings(max_examples=100, deadline=None)
def test_parse_sizes_fuzz_only_input_error(text):
    try:
        out = parse_sizes(text)
    except InputError as e:
        assert "--size" in str(e)
        return
    assert out and all(isinstance(v, int) and 0 <= v <= units.MAX_SIZE for v in out)


# ---------------------------------------------------------------- topology -> summary
def _pcie_doc(n=4, numa_split=True, nics=0, rate=None):
    doc = new_document("fixture")
    for i in range(n):
        bus = f"0000:{0x10 + i:02x}:00.0"
        numa = (i * 2 // n) if numa_split else 0
        doc["gpus"].append(gpu_record(i, name="NVIDIA RTX A6000", pci_bus_id=bus, numa_node=numa, parent=f"CPU{numa}",
                                      pcie={"gen": 4, "width": 16, "max_gen": 4, "max_width": 16}))
        doc["links"].append(link_record(bus, f"CPU{numa}", "pcie", 24.0, gen=4, width=16))
    for k in range(nics):
        ports = [{"port": 1, "state": "ACTIVE", "rate_gbps": rate}] if rate else []
        doc["nics"].append(nic_record(f"mlx5_{k}", pci_bus_id=f"0000:{0x80 + k:02x}:00.0", numa_node=0,
                                      parent="CPU0", ports=ports))
    return doc


def test_summarize_h100_capture():
    from gpucomm.probes.load import load_topology

    g = cost.summarize(load_topology(str(H100_SMI)))
    assert (g.n_ranks, g.gpus_per_node, g.cc, g.type_intra) == (8, 8, 90, "NVL")
    assert g.nvls and (g.nvls_channels, g.nvls_bw_intra) == (8, 40.0)
    assert g.channels * g.bw_intra == pytest.approx(360.0)     # 12 x 30 (connect.cc ncclTopoPostset channel counts)
    assert g.gpu_bw == pytest.approx(18 * 20.6)
    assert any("compute capability unknown" in n for n in g.notes)


def test_summarize_pcie_box_uses_calibrated_efficiency():
    g = cost.summarize(_pcie_doc(8))
    assert g.type_intra in ("PHB", "SYS") and not g.nvls and g.cc == 86
    assert g.ring_bus_bw == pytest.approx(cost.PCIE_RING_EFFICIENCY * 24.0)
    sub = cost.summarize(_pcie_doc(8), gpus_per_node=2)
    assert sub.n_ranks == 2


def test_summarize_errors():
    with pytest.raises(TopologyError, match="topology has no NICs; --nodes 4 needs a network"):
        cost.summarize(_pcie_doc(4), nodes=4)
    # an unknown NIC rate is the view's named default, as in every command (not a refusal)
    g = cost.summarize(_pcie_doc(4, nics=2), nodes=2)
    assert any("NIC speed unknown" in n and "assumed" in n for n in g.notes)
    with pytest.raises(PlanInfeasible):
        cost.summarize(_pcie_doc(4), gpus_per_node=5)
    with pytest.raises(InputError):
        cost.summarize(_pcie_doc(4), nodes=0)
    with pytest.raises(InputError):
        cost.summarize(_pcie_doc(4), gpus=[0, 9])
    with pytest.raises(InputError):
        cost.summarize(_pcie_doc(4), nodes=2, fabric_gbps=-1.0)


def test_summarize_network():
    g = cost.summarize(_pcie_doc(4, nics=2, rate=100.0), nodes=4)
    assert g.n_nodes == 4 and g.n_ranks == 16
    # one 100 Gb/s NIC delivers NET_EFFICIENCY of its line rate; the rings use both NICs
    assert g.nic_bw == pytest.approx(12.5 * cost.NET_EFFICIENCY) and g.node_net_bw == pytest.approx(25.0 * cost.NET_EFFICIENCY)
    assert g.ring_bus_bw == pytest.approx(min(25.0, cost.PCIE_RING_EFFICIENCY * 24.0))
    f = cost.summarize(_pcie_doc(4, nics=2, rate=100.0), nodes=4, fabric_gbps=SOCKET_GBPS)
    assert f.node_net_bw == pytest.approx(2 * SOCKET_GBPS / 8)
    nonic = cost.summarize(_pcie_doc(4), nodes=2, fabric_gbps=200.0)
    assert nonic.node_net_bw == pytest.approx(25.0) and any("one 200 Gb/s NIC" in n for n in nonic.notes)


# ---------------------------------------------------------------- CLI
def test_cli_table(cli):
    r = cli("predict", H100_SMI, "--collective", "all_reduce", "--size", "8B:1GiB:x8")
    assert r.code == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if l and not l.startswith("#")]
    assert len(lines) == 10   # 8 B x 8^k up to 1 GiB
    first = lines[0].split()
    assert first[:3] == ["8", "2", "float"] and first[-1] == "ring/LL"
    assert lines[-1].split()[-1] == "nvls/Simple"
    assert "time" in r.stdout and "busbw" in r.stdout


def test_cli_json(cli):
    r = cli("predict", H100_SMI, "-c", "allgather", "--size", "1MiB,1GiB", "--format", "json")
    assert r.code == 0, r.stderr
    doc = r.json()
    assert doc["schema"] == "gpucomm.predict/v1" and doc["collective"] == "all_gather"
    assert doc["nodes"] == 1 and doc["gpus_per_node"] == 8
    assert [x["size_bytes"] for x in doc["rows"]] == [1 << 20, 1 << 30]
    for x in doc["rows"]:
        assert set(x) >= {"size_bytes", "time_us", "algbw_GBps", "busbw_GBps", "algorithm", "protocol"}
    again = cli("predict", H100_SMI, "-c", "allgather", "--size", "1MiB,1GiB", "--format", "json")
    assert again.stdout == r.stdout


def test_cli_multi_node_and_gpus(cli, tmp_path):
    p = tmp_path / "t.json"
    p.write_text(dumps_json(_pcie_doc(4, nics=2, rate=200.0)))
    r = cli("predict", p, "--nodes", "2", "--gpus", "0,1", "--format", "json")
    assert r.code == 0, r.stderr
    d = r.json()
    assert d["n_ranks"] == 4 and d["gpus_per_node"] == 2 and d["nodes"] == 2
    r = cli("predict", p, "--nodes", "2", "--gpus-per-node", "3", "--fabric-gbps", "37.8", "-c", "all_to_all")
    assert r.code == 0, r.stderr


@pytest.mark.parametrize("args,code,needle", [
    (["--size", "12XB"], 2, "--size"),
    (["--size", "1M:1K"], 2, "MAX is smaller"),
    (["--collective", "allfoo"], 2, "unknown collective"),
    (["--nodes", "4"], 1, "topology has no NICs; --nodes 4 needs a network (or pass --fabric-gbps)"),
    (["--algo", "nvls"], 4, "NVLS needs an NVSwitch"),
    (["--algo", "bogus"], 2, "--algo"),
    (["--gpus", "0,x"], 2, "--gpus"),
    (["--gpus-per-node", "9"], 4, "--gpus-per-node 9"),
    (["--dtype", "float7"], 2, "--dtype"),
    (["--fabric-gbps", "0", "--nodes", "2"], 2, "--fabric-gbps"),
])
def test_cli_errors_one_line(cli, args, code, needle):
    r = cli("predict", A6000_SMI, *args)
    assert r.code == code, (r.code, r.stderr)
    assert needle in r.stderr and "Traceback" not in r.stderr
    # a usage error (2) prints click's usage line and the error; the others one line
    assert len(r.stderr.strip().splitlines()) == 1 if code != 2 else "Usage: gpucomm predict" in r.stderr


def test_cli_bad_topology_file(cli, tmp_path):
    p = tmp_path / "junk.txt"
    p.write_bytes(b"\x00\x01junk")
    r = cli("predict", p)
    assert r.code == 1 and "Traceback" not in r.stderr


def test_fabric_gbps_sets_delivered_rate_not_nccls_choice():
    """A NIC with a known link rate keeps it in NCCL's graph (NCCL picks algorithms by what its net plugin
    reports); --fabric-gbps only lowers what the network delivers (e.g. the TCP socket transport)."""
    doc = _pcie_doc(4, nics=2, rate=200.0)
    plain = cost.summarize(doc, nodes=2)
    sock = cost.summarize(doc, nodes=2, fabric_gbps=SOCKET_GBPS)
    assert (sock.channels, sock.bw_intra, sock.bw_inter) == (plain.channels, plain.bw_intra, plain.bw_inter)
    # the same NICs carry the job (here the one NCCL's rings use), each delivering the fabric rate
    assert sock.node_net_bw / sock.nic_bw == pytest.approx(plain.node_net_bw / plain.nic_bw)
    assert sock.node_net_bw == pytest.approx(SOCKET_GBPS / 8)
    assert sock.node_net_bw < plain.node_net_bw
    a, b = predict(plain, "all_reduce", [1 << 30])[0], predict(sock, "all_reduce", [1 << 30])[0]
    assert (a["algorithm"], a["protocol"], a["nccl_time_us"]) == (b["algorithm"], b["protocol"], b["nccl_time_us"])
    assert b["time_us"] > a["time_us"]


def test_one_rank_has_nothing_to_predict(cli):
    """A single GPU moves no data: exit 3 with one line, not a division by zero."""
    r = cli("predict", "example:hgx-h100", "--gpus-per-node", "1")
    assert r.code == 3, r.stderr
    assert r.stderr.startswith("gpucomm: error:") and "1 rank" in r.stderr
