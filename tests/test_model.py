"""gpucomm.probes.model: cpulists, bus ids, constants -- property-based where it is a parser."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucomm.probes import facts, model


@given(st.sets(st.integers(min_value=0, max_value=4096), max_size=200))
@settings(max_examples=200, deadline=None)
def test_cpulist_round_trip(cpus):
    text = model.format_cpulist(cpus)
    assert model.parse_cpulist(text) == sorted(cpus)
    # canonical: re-formatting is a fixed point
    assert model.canonical_cpulist(text) == (text or None)


@given(st.text(max_size=40))
@settings(max_examples=200, deadline=None)
def test_parse_cpulist_only_valueerror(text):
    try:
        model.parse_cpulist(text)
    except ValueError:
        pass


@pytest.mark.parametrize("raw,canon", [
    ("0-51,104-155", "0-51,104-155"),
    ("3,1,2,0", "0-3"),
    ("0-3,4-7", "0-7"),
    ("N/A", None),
    ("", None),
])
def test_canonical_cpulist(raw, canon):
    assert model.canonical_cpulist(raw) == canon


@given(st.sets(st.integers(min_value=0, max_value=511), max_size=100))
@settings(max_examples=100, deadline=None)
def test_cpumask_round_trip(cpus):
    assert model.cpumask_to_list(model.cpulist_to_mask(cpus)) == sorted(cpus)


def test_cpumask_nccl_example():
    # NCCL XML affinity of oci-H100 NUMA 0 (xml.cc topology XML): 32-bit groups, most significant first
    cpus = model.cpumask_to_list("00000000,000000ff,ffffffff,ffff0000,00000000,00ffffff,ffffffff")
    assert model.format_cpulist(cpus) == "0-55,112-167"


@pytest.mark.parametrize("raw,norm", [
    ("00000000:18:00.0", "0000:18:00.0"),
    ("0000:AB:00.1", "0000:ab:00.1"),
    ("18:00.0", "0000:18:00.0"),
    ("fffffff:ff:ff.0", "fffffff:ff:ff.0"),
    ("not-a-bdf", None),
    (None, None),
])
def test_normalize_bus_id(raw, norm):
    assert model.normalize_bus_id(raw) == norm


def test_sentinel():
    assert model.is_sentinel_bus_id(model.normalize_bus_id("fffffff:ff:ff.0"))
    assert not model.is_sentinel_bus_id("0000:18:00.0")


@pytest.mark.parametrize("gen,width,bw", [(3, 16, 12.0), (4, 16, 24.0), (5, 16, 48.0), (6, 16, 96.0),
                                          (1, 1, 0.1875), (None, None, 12.0), (4, 0, 24.0)])
def test_pcie_bw_matches_nccl(gen, width, bw):
    assert facts.pcie_bw_GBps(gen, width) == pytest.approx(bw)


@pytest.mark.parametrize("sm,bw", [(100, 40.1), (90, 20.6), (86, 12.0), (80, 20.0), (70, 20.0), (60, 18.0)])
def test_nvlink_bw_matches_nccl(sm, bw):
    assert facts.nvlink_bw_per_link(sm) == bw


@pytest.mark.parametrize("name,arch,sm", [
    ("NVIDIA H100 80GB HBM3", "hopper", 90), ("NVIDIA A100-SXM4-80GB", "ampere", 80),
    ("NVIDIA A10G", "ampere", 86), ("Tesla V100-SXM2-32GB", "volta", 70), ("NVIDIA B200", "blackwell", 100),
    ("NVIDIA GeForce RTX 4090", "ada", 89), ("Mystery GPU", None, None),
])
def test_arch_from_name(name, arch, sm):
    assert facts.arch_from_name(name) == (arch, sm)


def test_new_document_is_schema_valid_and_deterministic():
    jsonschema = pytest.importorskip("jsonschema")
    doc = model.new_document("live")
    doc["gpus"].append(model.gpu_record(1, pci_bus_id="00000000:2A:00.0"))
    doc["gpus"].append(model.gpu_record(0, pci_bus_id="0000:18:00.0"))
    model.finalize(doc)
    schema = json.loads(open(model.schema_path()).read())
    jsonschema.validate(doc, schema)
    assert [g["index"] for g in doc["gpus"]] == [0, 1]
    assert doc["gpus"][1]["pci_bus_id"] == "0000:2a:00.0"
    assert model.dumps_json(doc) == model.dumps_json(json.loads(model.dumps_json(doc)))


def test_path_type_order_is_nccls():
    names = [p.name for p in sorted(model.PathType)]
    assert names == ["LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "NET", "DIS"]
