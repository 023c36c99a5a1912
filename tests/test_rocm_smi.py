"""rocm-smi --showtopo captures (probes/formats/rocm_smi.py) on fixtures/captures/rocm.

Expected values were read off the capture files (quoted next to each check)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import CAPTURES, run_cli
from gpucomm.probes.errors import InputError
from gpucomm.probes.model import schema_path
from gpucomm.probes.formats.rocm_smi import XGMI_LINK_GBPS, parse_rocm_text

ROCM_DIR = CAPTURES / "rocm"
ALL_ROCM = sorted(p.name for p in ROCM_DIR.glob("*.txt"))


def _text(name: str) -> str:
    # newline="" keeps CRLF as captured (01 and 10 are CRLF files)
    with open(ROCM_DIR / name, encoding="utf-8", newline="") as f:
        return f.read()


@pytest.fixture(scope="module")
def validator():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(Path(schema_path()).read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("name", ALL_ROCM)
def test_every_capture_parses_schema_valid(name, validator):
    doc = parse_rocm_text(_text(name), name)
    errors = list(validator.iter_errors(doc))
    assert not errors, errors[0].message
    assert doc["host"]["provenance"] == "rocm-smi"
    assert {g["vendor"] for g in doc["gpus"]} == {"amd"}
    n = len(doc["gpus"])
    assert sorted(doc["matrix"]) == [f"GPU{i}" for i in range(n)]
    for i in range(n):
        assert doc["matrix"][f"GPU{i}"][f"GPU{i}"] == "X"
    # every capture here is an all-to-all XGMI hive: one link per pair
    assert len([l for l in doc["links"] if l["kind"] == "xgmi"]) == n * (n - 1) // 2


EXPECTED = {
    # file: (GPUs, NUMA node per GPU from "GPU[i] : (Topology) Numa Node: n", sections)
    "01_mi250x-x8_showtopo.txt": (8, [0, 0, 0, 0, 1, 1, 1, 1], "weight, hops, type, numa"),
    "02_mi300x-x8_showtopo.txt": (8, [0, 0, 0, 0, 1, 1, 1, 1], "weight, hops, type, numa"),
    "07_mi300a-x4_showtopo.txt": (4, [0, 1, 2, 3], "weight, hops, type, numa"),
    "10_mi300x-x8_showtopotype.txt": (8, [None] * 8, "type"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_gpus_numa_and_sections(name):
    count, numa, sections = EXPECTED[name]
    doc = parse_rocm_text(_text(name), name)
    assert [g["index"] for g in doc["gpus"]] == list(range(count))
    assert [g["numa_node"] for g in doc["gpus"]] == numa
    assert [g["numa_affinity"] for g in doc["gpus"]] == [[n] if n is not None else [] for n in numa]
    assert sorted(n["id"] for n in doc["numa_nodes"]) == sorted({n for n in numa if n is not None})
    assert doc["sources"][0]["detail"].endswith(sections)


def test_crlf_captures_really_are_crlf():
    assert "\r\n" in _text("01_mi250x-x8_showtopo.txt") and "\r\n" in _text("10_mi300x-x8_showtopotype.txt")
    assert "\r\n" not in _text("02_mi300x-x8_showtopo.txt")


def test_mi250x_weights_and_hops_on_links():
    doc = parse_rocm_text(_text("01_mi250x-x8_showtopo.txt"))
    link = {(l["a"], l["b"]): l for l in doc["links"]}
    # Weight matrix: GPU0-GPU1 15, GPU0-GPU3 30, GPU1-GPU7 45; Hops all 1
    assert link[("GPU0", "GPU1")]["weight"] == 15 and link[("GPU0", "GPU3")]["weight"] == 30
    assert link[("GPU1", "GPU7")]["weight"] == 45
    assert {l["hops"] for l in doc["links"]} == {1}
    assert {l["bw_GBps"] for l in doc["links"]} == {XGMI_LINK_GBPS["cdna3"]}
    assert all(l["bw_estimated"] for l in doc["links"])
    assert doc["matrix"]["GPU3"]["GPU5"] == "XGMI"
    assert any("does not name the GPU model" in w for w in doc["warnings"])
    assert all(g["pci_bus_id"] is None and g["arch"] is None for g in doc["gpus"])


def test_topotype_only_capture():
    doc = parse_rocm_text(_text("10_mi300x-x8_showtopotype.txt"), "10.txt")
    assert {(l["hops"], l["weight"]) for l in doc["links"]} == {(None, None)}
    assert doc["numa_nodes"] == []


def test_product_name_selects_xgmi_generation():
    text = "Card series:            AMD Instinct MI250X\n" + _text("01_mi250x-x8_showtopo.txt")
    doc = parse_rocm_text(text)
    assert {l["bw_GBps"] for l in doc["links"]} == {50.0}
    assert {g["arch"] for g in doc["gpus"]} == {"cdna2"} and doc["gpus"][0]["name"] == "AMD Instinct MI250X"
    assert not any("does not name" in w for w in doc["warnings"])


def test_pcie_pairs_and_multi_hop_pairs_have_no_direct_link():
    text = _text("02_mi300x-x8_showtopo.txt")
    lines = text.split("\n")
    # make GPU0<->GPU1 PCIE (both rows) and GPU2<->GPU3 two hops apart
    def edit(section: str, row: str, col: int, value: str) -> None:
        start = next(i for i, l in enumerate(lines) if section in l)
        i = next(i for i in range(start, len(lines)) if lines[i].startswith(row + " "))
        toks = lines[i].split()
        toks[col + 1] = value
        lines[i] = "   ".join(toks)
    edit("Link Type", "GPU0", 1, "PCIE")
    edit("Link Type", "GPU1", 0, "PCIE")
    edit("Hops", "GPU2", 3, "2")
    edit("Hops", "GPU3", 2, "2")
    doc = parse_rocm_text("\n".join(lines))
    assert doc["matrix"]["GPU0"]["GPU1"] == "PCIE" and doc["matrix"]["GPU1"]["GPU0"] == "PCIE"
    pairs = {(l["a"], l["b"]) for l in doc["links"]}
    assert ("GPU0", "GPU1") not in pairs and ("GPU2", "GPU3") not in pairs and len(pairs) == 26
    assert any("more than one hop" in w for w in doc["warnings"])


def test_asymmetric_and_unknown_cells_are_kept_with_warnings():
    text = _text("07_mi300a-x4_showtopo.txt").replace("GPU0   0            XGMI", "GPU0   0            FOO", 1)
    doc = parse_rocm_text(text)
    assert doc["matrix"]["GPU0"]["GPU1"] == "N/A" and doc["matrix"]["GPU1"]["GPU0"] == "XGMI"
    w = " | ".join(doc["warnings"])
    assert "unknown link type 'FOO'" in w and "asymmetric" in w


def test_short_row_is_skipped_not_misassigned():
    text = _text("07_mi300a-x4_showtopo.txt").replace("GPU2   XGMI         XGMI         0            XGMI",
                                                       "GPU2   XGMI         0            XGMI", 1)
    doc = parse_rocm_text(text, "short.txt")
    assert doc["matrix"]["GPU2"]["GPU3"] == "N/A" and doc["matrix"]["GPU3"]["GPU2"] == "XGMI"
    assert any("short.txt:" in w and "GPU2 has 3 type cells for 4 columns" in w for w in doc["warnings"])


def test_ansi_colours_and_tabs_are_tolerated():
    text = _text("07_mi300a-x4_showtopo.txt").replace("GPU0   0 ", "\x1b[1mGPU0\x1b[0m\t0 ")
    doc = parse_rocm_text(text)
    assert doc["matrix"]["GPU0"]["GPU3"] == "XGMI"


@pytest.mark.parametrize("text,match,line", [
    ("", "no rocm-smi topology section", None),
    ("hello\nworld\n", "no rocm-smi topology section", None),
    ("=== Link Type between two GPUs ===\nGPU0 XGMI\n", "does not start with a GPU header", 2),
    ("=== Link Type between two GPUs ===\n  GPU0 GPU0\n", "bad type header", 2),
    ("=== Numa Nodes ===\nGPU[0] : (Topology) Numa Node: 0\n=== Numa Nodes ===\n", "appears twice", 3),
    ("=== Numa Nodes ===\nGPU[5000] : (Topology) Numa Node: 0\n", "out of range", 2),
])
def test_bad_captures_are_one_line_input_errors(text, match, line):
    with pytest.raises(InputError, match=match) as e:
        parse_rocm_text(text, "bad.txt")
    assert e.value.line == line and "\n" not in str(e.value)


# --------------------------------------------------------------------------------------------
_SEEDS = [_text(n) for n in ALL_ROCM]
_PIECES = st.sampled_from(["GPU0", "GPU9", "XGMI", "PCIE", "N/A", "0", "15", "-1", "=====", " ", "\t", "\r\n", "\n",
                           "GPU[3]", ": (Topology) Numa Node: ", "Link Type between two GPUs", "\x1b[0m", "x"])


@st.composite
def mutated(draw):
    text = draw(st.sampled_from(_SEEDS))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 120)))
        junk = "".join(draw(st.lists(_PIECES, max_size=8)))
        text = text[:i] + junk + text[j:] if draw(st.booleans()) else text[:i]
    return text


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=mutated())
def test_fuzz_never_raises_anything_but_input_error(text, validator):
    try:
        doc = parse_rocm_text(text, "fuzz.txt")
    except InputError as e:
        assert "\n" not in str(e)
        return
    assert not list(validator.iter_errors(doc))
    json.dumps(doc, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=400))
def test_fuzz_random_text(text):
    try:
        parse_rocm_text(text)
    except InputError:
        pass


# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL_ROCM)
def test_loader_and_cli_show(name):
    from gpucomm.probes.load import detect_kind, load_topology

    assert detect_kind(_text(name)) == "rocm-smi"
    doc = load_topology(str(ROCM_DIR / name))
    res = run_cli("show", str(ROCM_DIR / name), "--format", "json")
    assert res.code == 0, res.stderr
    assert res.json()["matrix"] == doc["matrix"] == parse_rocm_text(_text(name))["matrix"]
