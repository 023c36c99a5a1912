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


# ------------------------------------------------------------------------------------------
# dumps_json / write_json: the same bytes as json.dumps(indent=2, sort_keys=True) (probes/model.py)
def _stdlib_json(doc) -> str:
    return json.dumps(doc, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                     st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
                     st.sampled_from([model.PathType.NVL, model.PathType.SYS, "é\u2028\x00\"\\", -0.0, 1e300]))
_KEYS = st.one_of(st.text(max_size=6), st.sampled_from(["a", "b", "ranks", "GPU0", "é"]))
_JSONISH = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=6), st.tuples(inner, inner),
                            st.dictionaries(_KEYS, inner, max_size=6),
                            st.lists(st.lists(st.integers(-5, 5), max_size=4), max_size=5),
                            st.lists(st.integers(-5, 5), max_size=5),
                            # rank records: same keys, scalars and lists of them (and sometimes not)
                            st.lists(st.fixed_dictionaries({"down": st.lists(st.integers(-5, 5), max_size=3),
                                                            "rank": inner, "up": _SCALARS,
                                                            "é": st.lists(_SCALARS, max_size=2)}), max_size=4)),
    max_leaves=60)


@given(_JSONISH)
@settings(max_examples=400, deadline=None)
def test_dumps_json_is_json_dumps(doc):
    assert model.dumps_json(doc) == _stdlib_json(doc)


@given(st.dictionaries(st.one_of(st.integers(-3, 3), st.floats(-2, 2, allow_nan=False), st.booleans(), st.none()),
                       st.integers(), max_size=1))
@settings(max_examples=60, deadline=None)
def test_dumps_json_non_string_keys(doc):
    """json converts int/float/bool/None keys after sorting; so do we (one key: mixed keys do not sort)."""
    assert model.dumps_json({"k": doc, "x": [doc]}) == _stdlib_json({"k": doc, "x": [doc]})


def test_dumps_json_deep_and_wide_documents():
    deep: object = 1
    for i in range(40):                      # deeper than the prepared indents
        deep = {"d": [deep, {"i": i}], "e": []}
    rows = [{"rank": r, "nics": [f"mlx5_{r % 8}"], "coords": {"tp": r % 8, "pp": r // 8}, "up": None,
             "bw": r / 3} for r in range(3000)]
    doc = {"deep": deep, "ranks": rows, "groups": {"tp": [list(range(i, i + 8)) for i in range(0, 3000, 8)],
                                                   "cp": [[r] for r in range(3000)], "empty": [[], [1], []]}}
    assert model.dumps_json(doc) == _stdlib_json(doc)


def test_dumps_json_records_and_their_exceptions():
    rows = [{"rank": r, "down": [r + 1, r + 2][: r % 3], "up": r - 1 if r else None, "nics": ["mlx5_0"]}
            for r in range(5000)]
    rows[4000] = dict(rows[4000], up={"node": 3})          # not a record: the rest goes the long way
    rows.insert(4500, {"rank": 1})                          # other keys
    doc = {"ranks": rows, "": [[1, 2]], "x": [{"": []}, {1: [2]}, {"a": (1, 2.5)}, {"a": ((1,),)}]}
    assert model.dumps_json(doc) == _stdlib_json(doc)


def test_write_json_streams_in_pieces():
    rows = [{"rank": r, "gpus": [r, r + 1], "name": f"n{r}"} for r in range(40_000)]
    pieces: list = []
    model.write_json({"ranks": rows}, pieces.append)
    assert len(pieces) > 4 and max(map(len, pieces)) < len("".join(pieces)) / 4   # not one big string
    assert "".join(pieces) == _stdlib_json({"ranks": rows})


@pytest.mark.parametrize("bad,exc", [(float("nan"), ValueError), ({"x": float("inf")}, ValueError),
                                     ([-float("inf")], ValueError), ({"s": {1, 2}}, TypeError),
                                     ({(1, 2): 3}, TypeError), ([object()], TypeError)])
def test_dumps_json_refuses_what_json_refuses(bad, exc):
    with pytest.raises(exc):
        _stdlib_json(bad)
    with pytest.raises(exc):
        model.dumps_json(bad)
