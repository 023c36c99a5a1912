"""GPU selection: NVIDIA go-gpuallocator's best-effort policy reproduced (its own test cases on its
DGX-1 Volta node), and where our policy does better on the same inputs."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support import run_cli
from gpucomm.planners.placement.select import (count_partitions, gpuallocator_besteffort, gpuallocator_pair_scores, parse_index_list,
                             select_gpus)
from gpucomm.probes.errors import InputError, PlanInfeasible
from gpucomm.probes.matrix import compute_matrix
from gpucomm.probes.model import finalize, gpu_record, link_record, new_document, switch_record
from support import hgx_doc, pcie_pairs_doc

# go-gpuallocator gpuallocator/common_test.go NewDGX1VoltaNode: NVLink counts and PCIe levels.
DGX1V_NVLINK = {(0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2, (1, 2): 2, (1, 3): 1, (1, 5): 2, (2, 3): 2, (2, 6): 1,
                (3, 7): 1, (4, 5): 1, (4, 6): 1, (4, 7): 2, (5, 6): 2, (5, 7): 1, (6, 7): 2}


def dgx1_volta_doc():
    """The go-gpuallocator DGX-1 Volta test node as a topology: GPU pairs (0,1) (2,3) (4,5) (6,7)
    under one PCIe switch each (SINGLE), pairs of switches under a host bridge per socket
    (HOSTBRIDGE), sockets apart (SYSTEM), and the hybrid cube-mesh NVLinks."""
    doc = new_document("json")
    doc["numa_nodes"] = [{"id": 0, "cpus": "0-19", "memory_bytes": None, "distances": None},
                         {"id": 1, "cpus": "20-39", "memory_bytes": None, "distances": None}]
    for sock in (0, 1):
        doc["switches"].append(switch_record(f"pci{sock}", "host_bridge", numa_node=sock, parent=f"CPU{sock}"))
        for k in (0, 1):
            sw = f"0000:{0x10 * (sock * 2 + k) + 0x10:02x}:00.0"
            doc["switches"].append(switch_record(sw, "pcie", pci_bus_id=sw, parent=f"pci{sock}", numa_node=sock))
    for i in range(8):
        sock, k = i // 4, (i // 2) % 2
        sw = f"0000:{0x10 * (sock * 2 + k) + 0x10:02x}:00.0"
        doc["gpus"].append(gpu_record(i, name="Tesla V100-SXM2-32GB", compute_capability="7.0",
                                      pci_bus_id=f"0000:{0x10 * (sock * 2 + k) + 0x11 + i % 2:02x}:00.0",
                                      numa_node=sock, numa_affinity=[sock], memory_bytes=32 * 2**30, mig=False,
                                      parent=sw))
    for (a, b), n in DGX1V_NVLINK.items():
        ga, gb = doc["gpus"][a], doc["gpus"][b]
        doc["links"].append(link_record(ga["pci_bus_id"], gb["pci_bus_id"], "nvlink", 25.0 * n, count=n))
        for x, y in ((ga, gb), (gb, ga)):
            base = len(x["nvlink"])
            x["nvlink"] += [{"link": base + j, "state": "up", "remote": y["pci_bus_id"], "version": 2, "bw_GBps": 25.0}
                            for j in range(n)]
    compute_matrix(doc)
    return finalize(doc)


DGX1V = dgx1_volta_doc()
ALL = list(range(8))


def test_pair_scores_match_the_go_node():
    s = gpuallocator_pair_scores(DGX1V)
    assert s[(0, 1)] == 50 + 100          # single switch + 1 NVLink
    assert s[(0, 3)] == 30 + 200          # host bridge + 2 NVLinks
    assert s[(0, 4)] == 10 + 200          # cross CPU + 2 NVLinks
    assert s[(0, 5)] == 10 and s[(2, 3)] == 50 + 200
    assert all(s[(a, b)] == s[(b, a)] for a, b in itertools.permutations(ALL, 2))


# besteffort_test.go TestBestEffortAllocate, verbatim cases
@pytest.mark.parametrize("desc,available,required,size,result", [
    ("Single NVLINK, prefer same switch", [0, 2, 4, 5], [], 2, [4, 5]),
    ("Single NVLINK, prefer same socket", [0, 4, 5, 6], [], 2, [5, 6]),
    ("Prefer dual NVLINK same socket", [0, 3, 1], [], 2, [0, 3]),
    ("Prefer dual NVLINK cross socket", [0, 1, 4], [], 2, [0, 4]),
    ("Must include with allocation size 1", ALL, [4], 1, [4]),
    ("Must include with allocation size 2", ALL, [4], 2, [4, 7]),
    ("Must include with allocation size 4", ALL, [4], 4, [4, 5, 6, 7]),
    ("Must include with unavailable device", [1, 2, 3, 4, 5, 6, 7], [0, 1, 2, 3], 4, []),
    ("Must include with full set specified", ALL, [0, 2, 4, 6], 4, [0, 2, 4, 6]),
    ("Must include with too many devices specified", ALL, [1, 2, 3, 4, 5, 6], 4, []),
    ("Required too many devices than available", [1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 6], 1, []),
])
def test_go_gpuallocator_policy_cases(desc, available, required, size, result):
    assert sorted(gpuallocator_besteffort(DGX1V, available, size, required)) == result, desc


# TestBestEffortDGX1VoltaGPUAlloc{One,Two,Four,Eight}: successive allocations from one allocator
@pytest.mark.parametrize("size,expected", [
    (1, [[0], [1], [2], [3], [4], [5], [6], [7], []]),
    (2, [[0, 3], [1, 2], [4, 7], [5, 6], []]),
    (4, [[0, 1, 2, 3], [4, 5, 6, 7], []]),
    (8, [ALL, []]),
])
def test_go_gpuallocator_successive_allocations(size, expected):
    free = list(ALL)
    for want in expected:
        got = gpuallocator_besteffort(DGX1V, free, size)
        assert sorted(got) == want
        free = [g for g in free if g not in got]


def test_go_gpuallocator_keeps_the_best_partition_14_gpus():
    # TestBestEffortAllocateRetainsBestPartition: pairs with 2 NVLinks, and (12,13) with 4.
    doc = new_document("json")
    for i in range(14):
        doc["gpus"].append(gpu_record(i, pci_bus_id=f"0000:{0x10 + i:02x}:00.0", compute_capability="7.0"))
    for a in range(0, 14, 2):
        n = 4 if a == 12 else 2
        ga, gb = doc["gpus"][a], doc["gpus"][a + 1]
        ga["nvlink"] = [{"link": j, "state": "up", "remote": gb["pci_bus_id"], "version": 2, "bw_GBps": 25.0} for j in range(n)]
        gb["nvlink"] = [{"link": j, "state": "up", "remote": ga["pci_bus_id"], "version": 2, "bw_GBps": 25.0} for j in range(n)]
    assert sorted(gpuallocator_besteffort(doc, list(range(14)), 2)) == [12, 13]


def test_partition_count_guard():
    assert count_partitions(4, 2) == 3 and count_partitions(8, 2) == 105
    doc = hgx_doc()
    doc["gpus"] += [dict(g, index=g["index"] + 8, pci_bus_id=None) for g in doc["gpus"]] * 2
    with pytest.raises(InputError, match="partitions"):
        gpuallocator_besteffort(doc, list(range(24)), 2)


# --------------------------------------------------------------------------------------------
# Where our policy differs, and why it is better
def _nvswitch_box_with_a_lonely_gpu():
    """HGX-like NVSwitch box where GPU3 lost its NVLinks and shares GPU2's PCIe switch."""
    doc = hgx_doc(n_gpus=4, numa_nodes=1, nics=False)
    g2, g3 = doc["gpus"][2], doc["gpus"][3]
    g3["parent"] = g2["parent"]
    doc["links"] = [l for l in doc["links"] if not (l["kind"] == "nvlink" and l["a"] == g3["pci_bus_id"])]
    compute_matrix(doc)
    return finalize(doc)


def test_nvswitch_semantics():
    doc = _nvswitch_box_with_a_lonely_gpu()
    assert doc["matrix"]["GPU2"]["GPU3"] == "PIX" and doc["matrix"]["GPU0"]["GPU1"].startswith("NV")
    theirs = gpuallocator_besteffort(doc, [0, 1, 2, 3], 2)
    # NVLink peers are the NVSwitch, not the GPU: go-gpuallocator scores only PCIe and takes the
    # PCIe-switch pair, one of which has no NVLink at all ("TODO: Handle NVSwitch semantics").
    assert sorted(theirs) == [2, 3]
    res = select_gpus(doc, 2, [0, 1, 2, 3])
    assert 3 not in res["gpus"]
    assert all(doc["matrix"][f"GPU{a}"][f"GPU{b}"].startswith("NV") for a, b in [res["gpus"]])
    assert res["details"]["ring_GBps"] > 5 * res["gpuallocator"]["details"]["ring_GBps"]  # NVLink vs PCIe


def test_one_gpu_jobs_do_not_split_nvlink_pairs():
    # k8s-device-plugin#1193: 1-GPU pods fragment NVLink pairs.  Pairs (0,1), (2,3); GPU3 is taken.
    doc = pcie_pairs_doc(pairs=((0, 1), (2, 3)))
    assert gpuallocator_besteffort(doc, [0, 1, 2], 1) == [0]          # breaks the free pair (0,1)
    res = select_gpus(doc, 1, [0, 1, 2])
    assert res["gpus"] == [2] and res["details"]["fragmented_free_gpus"] == 0
    assert res["gpuallocator"]["details"]["fragmented_free_gpus"] == 1
    # the next 2-GPU job then still gets an NVLink pair
    assert select_gpus(doc, 2, [0, 1])["details"]["links"] == {"0-1": "NV12"}


def test_nic_aware_choice():
    # two equal PCIe-switch pairs; only the second switch has a NIC
    doc = pcie_pairs_doc(pairs=(), nic_switch=1)
    assert sorted(gpuallocator_besteffort(doc, [0, 1, 2, 3], 2)) == [0, 1]
    res = select_gpus(doc, 2, [0, 1, 2, 3])
    assert res["gpus"] == [2, 3] and res["details"]["nearby_nics"] == ["mlx5_0"]


def test_numa_local_sets_on_nvswitch():
    res = select_gpus(hgx_doc(), 4, [2, 3, 4, 5, 6, 7])
    assert res["gpus"] == [4, 5, 6, 7] and res["details"]["numa_nodes"] == 1


def test_errors():
    with pytest.raises(InputError):
        select_gpus(hgx_doc(), 2, [0, 9])
    with pytest.raises(PlanInfeasible):
        select_gpus(hgx_doc(), 3, [0, 1])
    with pytest.raises(InputError):
        select_gpus(hgx_doc(), 0)


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="0123456789,-x ", max_size=20))
def test_parse_index_list_never_crashes(text):
    try:
        out = parse_index_list(text)
    except InputError:
        return
    assert out == sorted(set(out))


@settings(max_examples=30, deadline=None)
@given(st.sets(st.integers(0, 7), min_size=1), st.integers(1, 8))
def test_select_properties(free, k):
    free = sorted(free)
    if k > len(free):
        with pytest.raises(PlanInfeasible):
            select_gpus(DGX1V, k, free, compare=False)
        return
    res = select_gpus(DGX1V, k, free, compare=True)
    assert len(res["gpus"]) == k and set(res["gpus"]) <= set(free)
    theirs = res["gpuallocator"]["gpus"]
    assert len(theirs) == k and set(theirs) <= set(free)
    # ours never has a worse ring bandwidth than go-gpuallocator's pick
    if k > 1:
        assert res["details"]["ring_GBps"] >= res["gpuallocator"]["details"]["ring_GBps"] - 1e-9


def test_select_cli(tmp_path):
    import json

    p = tmp_path / "n.json"
    p.write_text(json.dumps(_nvswitch_box_with_a_lonely_gpu()))
    r = run_cli("select", str(p), "--count", "2", "--format", "json")
    assert r.code == 0 and r.json()["schema"] == "gpucomm.select/v1" and 3 not in r.json()["gpus"]
    r = run_cli("select", str(p), "--count", "2", "--policy", "gpuallocator", "--format", "list")
    assert r.code == 0 and r.stdout.strip() == "2,3"
    r = run_cli("select", str(p), "--count", "2")
    assert r.code == 0 and "go-gpuallocator" in r.stdout
    assert run_cli("select", str(p), "--count", "5").code == 4
    r = run_cli("select", str(p), "--count", "1", "--free", "0,x")
    assert r.code == 2 and "Traceback" not in r.stderr
    assert run_cli("select", str(p), "--count", "1", "--policy", "nope").code == 2
