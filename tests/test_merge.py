"""merge(): precedence attribute by attribute, identity of GPUs/NICs across sources, link ownership,
and where the matrix comes from."""
from __future__ import annotations

import copy
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from gpucomm.probes.merge import merge, partial_priority
from gpucomm.probes.model import (finalize, gpu_record, link_record, new_document, nic_record,
                          source_record, switch_record)
from support import validate



def part(name, **kw):
    d = new_document()
    d["sources"] = [source_record(name, "ok", "")]
    for k, v in kw.items():
        if k == "host":
            d["host"].update(v)
        else:
            d[k] = v
    return d


B0, B1 = "0000:18:00.0", "0000:2a:00.0"


def sysfs_part():
    return part("sysfs",
                gpus=[gpu_record(0, pci_bus_id=B0, numa_node=0, cpu_affinity="0-3", parent="pci0000:17",
                                 pcie={"gen": 1, "width": 16, "max_gen": 5, "max_width": 16}),
                      gpu_record(1, pci_bus_id=B1, numa_node=0, cpu_affinity="0-3", parent="pci0000:17",
                                 pcie={"gen": 1, "width": 16, "max_gen": 5, "max_width": 16})],
                switches=[switch_record("pci0000:17", "host_bridge", numa_node=0, parent="CPU0")],
                links=[link_record(B0, "pci0000:17", "pcie", 48.0, gen=5, width=16),
                       link_record(B1, "pci0000:17", "pcie", 48.0, gen=5, width=16)],
                host={"iommu": "off", "driver_version": "sysfs-should-lose"})


def nvml_part():
    g0 = gpu_record(0, pci_bus_id=B0, name="NVIDIA H100 80GB HBM3", uuid="GPU-a", numa_node=None,
                    pcie={"gen": 5, "width": None, "max_gen": 5, "max_width": None})
    g1 = gpu_record(1, pci_bus_id=B1, name="NVIDIA H100 80GB HBM3", uuid="GPU-b")
    return part("nvml", gpus=[g0, g1], switches=[switch_record("NVS", "nvswitch")],
                links=[link_record(B0, "NVS", "nvlink", 18 * 20.6, count=18),
                       link_record(B1, "NVS", "nvlink", 18 * 20.6, count=18)],
                host={"driver_version": "550.90.07"})


def smi_part(matrix=None):
    return part("smi", gpus=[gpu_record(0, numa_node=0, cpu_affinity="0-7"), gpu_record(1, numa_node=0)],
                nics=[nic_record("mlx5_0")],
                links=[link_record("GPU0", "GPU1", "nvlink", 18 * 20.6, count=18)],
                matrix=matrix or {"GPU0": {"GPU0": "X", "GPU1": "NV18", "mlx5_0": "PXB"},
                                  "GPU1": {"GPU0": "NV18", "GPU1": "X", "mlx5_0": "PXB"},
                                  "mlx5_0": {"GPU0": "PXB", "GPU1": "PXB", "mlx5_0": "X"}})


def ib_part():
    return part("ib", nics=[nic_record("mlx5_0", pci_bus_id="0000:1c:00.0", numa_node=0, parent="pci0000:17",
                                       link_layer="InfiniBand",
                                       ports=[{"port": 1, "state": "ACTIVE", "rate_gbps": 400.0}])],
                links=[link_record("0000:1c:00.0", "pci0000:17", "pcie", 48.0, gen=5, width=16)],
                switches=[switch_record("pci0000:17", "host_bridge", numa_node=0, parent="CPU0", domain="0000")])


def test_priorities():
    assert [partial_priority(p) for p in (nvml_part(), smi_part(), ib_part(), sysfs_part())] == [10, 20, 25, 30]
    p = sysfs_part()
    p["priority"] = 0
    assert partial_priority(p) == 0


def test_attribute_precedence_fills_only_missing():
    doc = merge([sysfs_part(), smi_part(), nvml_part()])
    validate(finalize(doc))
    g0 = next(g for g in doc["gpus"] if g["pci_bus_id"] == B0)
    assert g0["name"] == "NVIDIA H100 80GB HBM3" and g0["uuid"] == "GPU-a"      # nvml
    assert g0["cpu_affinity"] == "0-7"                                           # smi beats sysfs
    assert g0["numa_node"] == 0 and g0["parent"] == "pci0000:17"                 # nvml had none: smi/sysfs fill
    assert g0["pcie"] == {"gen": 5, "width": 16, "max_gen": 5, "max_width": 16}   # field by field
    assert doc["host"]["driver_version"] == "550.90.07" and doc["host"]["iommu"] == "off"
    assert [s["name"] for s in doc["sources"]] == ["sysfs", "smi", "nvml"]        # probe order kept


def test_explicit_file_beats_everything():
    f = part("file", gpus=[gpu_record(0, pci_bus_id=B0, name="Renamed by user")], host={"driver_version": "user"})
    doc = merge([nvml_part(), f, sysfs_part()])
    assert next(g for g in doc["gpus"] if g["index"] == 0)["name"] == "Renamed by user"
    assert doc["host"]["driver_version"] == "user"


def test_gpu_known_by_index_and_bus_id_is_one_node():
    doc = merge([smi_part(), sysfs_part()])   # no NVML: smi's GPU0 must become 0000:18:00.0
    assert len(doc["gpus"]) == 2
    ids = {l["a"] for l in doc["links"]} | {l["b"] for l in doc["links"]}
    assert "GPU0" not in ids and "GPU1" not in ids
    nv = [l for l in doc["links"] if l["kind"] == "nvlink"]
    assert len(nv) == 1 and (nv[0]["a"], nv[0]["b"], nv[0]["count"]) == (B0, B1, 18)
    assert doc["matrix"]["GPU0"]["GPU1"] == "NV18"


def test_nvlink_owned_by_best_source_not_added_up():
    doc = merge([nvml_part(), smi_part(), sysfs_part()])
    nv = [l for l in doc["links"] if l["kind"] == "nvlink"]
    assert sorted((l["a"], l["b"]) for l in nv) == [(B0, "NVS"), (B1, "NVS")]
    assert doc["matrix"]["GPU0"]["GPU1"] == "NV18"   # not NV36


def test_nic_matched_by_name_then_bus_id():
    net = part("net", nics=[nic_record("ens1np0", netdev="ens1np0", pci_bus_id="0000:1c:00.0",
                                       ports=[{"port": 1, "state": "ACTIVE", "rate_gbps": 100.0}])])
    doc = merge([net, smi_part(), ib_part(), sysfs_part()])
    assert [n["name"] for n in doc["nics"]] == ["mlx5_0"]
    n = doc["nics"][0]
    assert n["pci_bus_id"] == "0000:1c:00.0" and n["netdev"] == "ens1np0" and n["rate_gbps"] == 400.0
    assert n["id"] == "0000:1c:00.0" and n["parent"] == "pci0000:17"


def test_links_and_switches_deduplicated():
    ib2 = ib_part()
    ib2["links"].append(link_record("pci0000:17", "CPU0", "pcie", 5000.0))
    s = sysfs_part()
    s["links"].append(link_record("pci0000:17", "CPU0", "pcie", 5000.0))
    s["links"].append(link_record("CPU1", "CPU0", "smp", 22.0))
    numa = part("numa", links=[link_record("CPU0", "CPU1", "smp", 22.0)])
    doc = merge([s, ib2, numa])
    keys = [(l["kind"], l["a"], l["b"]) for l in doc["links"]]
    assert len(keys) == len(set(keys))
    assert keys.count(("pcie", "pci0000:17", "CPU0")) == 1 and keys.count(("smp", "CPU0", "CPU1")) == 1
    hb = [x for x in doc["switches"] if x["id"] == "pci0000:17"]
    assert len(hb) == 1 and hb[0]["domain"] == "0000"   # filled from the ib source's copy


def test_matrix_sources():
    # a tree: computed, and a disagreeing nvidia-smi matrix is reported
    doc = merge([smi_part(), sysfs_part(), ib_part()])
    assert doc["matrix"]["GPU0"]["mlx5_0"] == "PHB"
    assert any("different answer than nvidia-smi" in w and "GPU0/mlx5_0: PHB vs PXB" in w for w in doc["warnings"])
    # no tree: nvidia-smi's matrix as captured
    doc = merge([nvml_part(), smi_part()])
    assert doc["matrix"]["GPU0"]["mlx5_0"] == "PXB"
    # neither
    doc = merge([nvml_part()])
    assert doc["matrix"] == {} and any("matrix not computed" in w for w in doc["warnings"])


def test_index_collision_renumbered():
    extra = part("sysfs", gpus=[gpu_record(0, pci_bus_id="0000:99:00.0", parent="pci0000:97")])
    doc = merge([nvml_part(), extra])
    assert sorted(g["index"] for g in doc["gpus"]) == [0, 1, 2]
    assert next(g for g in doc["gpus"] if g["pci_bus_id"] == "0000:99:00.0")["index"] == 2
    assert any("NVML does not list it" in w for w in doc["warnings"])


def test_inputs_not_modified():
    ps = [nvml_part(), smi_part(), sysfs_part(), ib_part()]
    before = copy.deepcopy(ps)
    merge(ps)
    assert ps == before


def _canon(doc):
    d = copy.deepcopy(finalize(doc))
    d.pop("sources")
    d["warnings"] = sorted(d["warnings"])
    return json.dumps(d, sort_keys=True)


@given(st.permutations(range(4)))
@settings(max_examples=24, deadline=None)
def test_merge_independent_of_input_order(perm):
    ps = [nvml_part(), smi_part(), sysfs_part(), ib_part()]
    ref = _canon(merge(ps))
    assert _canon(merge([ps[i] for i in perm])) == ref
