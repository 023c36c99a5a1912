"""``nvidia-smi topo -m`` parser, over every real capture in fixtures/captures/topo/ plus fuzzing.

Each capture has a hand-checked expectation below (cells read off the file by eye, the source
status, per-GPU affinities).  A new capture dropped into the folder fails
``test_every_capture_has_expectations`` until someone reads it and adds its cells here.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucomm.probes.errors import InputError
from gpucomm.probes.model import dumps_json, finalize, format_cpulist, parse_cpulist, schema_path
from gpucomm.probes.formats.smi_topo import looks_like, parse_topo_text

ROOT = Path(__file__).resolve().parent.parent
TOPO = ROOT / "fixtures" / "captures" / "topo"
FILES = sorted(p for p in TOPO.glob("*.txt"))
VALIDATOR = jsonschema.Draft202012Validator(json.loads(Path(schema_path()).read_text()))
CELL = re.compile(r"^(X|NV[0-9]+|PIX|PXB|PHB|NODE|SYS|N/A)$")
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


def read(p: Path) -> str:
    return p.read_bytes().decode("utf-8")


def parse_file(p: Path) -> dict:
    return finalize(parse_topo_text(read(p), path=p.name))


def by_prefix(prefix: str) -> Path:
    (p,) = [f for f in FILES if f.name.startswith(prefix + "_")]
    return p


# prefix -> (status, {(row, col): cell}, {gpu index: (cpu_affinity, numa_affinity, numa_node)}, nic names)
# "nics" None means "not checked beyond the generic checks".
EXPECT = {
    "01": ("ok", {("GPU0", "GPU1"): "NV12", ("GPU0", "rocep49s0"): "SYS", ("rocep49s0", "GPU3"): "SYS"},
           {0: ("32-63,96-127", [1], 1)}, ["rocep49s0"]),
    "06": ("ok", {("GPU2", "mlx5_16"): "PIX", ("mlx5_16", "mlx5_17"): "PIX", ("GPU0", "GPU7"): "NV2",
                  ("GPU0", "mlx5_17"): "NODE", ("mlx5_17", "GPU4"): "SYS", ("GPU1", "GPU6"): "NV2"},
           {4: ("24-47,72-95", [1], 1)}, [f"mlx5_{i}" for i in range(18)]),
    "07": ("ok", {("GPU0", "GPU1"): "NV2", ("GPU0", "GPU3"): "NV1", ("GPU0", "mlx5_0"): "SYS",
                  ("GPU7", "GPU6"): "NV2"}, {0: ("0-23", [0], 0)}, ["mlx5_0"]),
    "09": ("ok", {("GPU3", "mlx5_3"): "PXB", ("GPU3", "mlx5_4"): "SYS", ("mlx5_7", "GPU7"): "PXB"},
           {0: ("0,2,4,6,8,10", [0], 0), 5: ("1,3,5,7,9,11", [1], 1)}, [f"mlx5_{i}" for i in range(8)]),
    "11": ("ok", {("GPU0", "mlx5_0"): "PXB", ("mlx5_8", "mlx5_9"): "PIX", ("GPU6", "mlx5_7"): "PXB",
                  ("GPU6", "mlx5_8"): "SYS"}, {4: ("112-127,240-255", [7], 7)}, [f"mlx5_{i}" for i in range(10)]),
    "13": ("ok", {("GPU0", "mlx5_0"): "NODE", ("GPU1", "mlx5_0"): "SYS", ("GPU0", "GPU1"): "NV12"},
           {1: ("24-47", [1], 1)}, ["mlx5_0"]),
    "15": ("ok", {("GPU0", "GPU2"): "NV8", ("GPU4", "GPU7"): "NV6", ("GPU5", "GPU6"): "NV4",
                  ("GPU0", "mlx5_1"): "PIX", ("mlx5_0", "mlx5_1"): "NODE", ("GPU0", "GPU1"): "PIX"},
           {7: ("32-47,96-111", [2], 2)}, ["mlx5_0", "mlx5_1"]),
    "17": ("ok", {("GPU4", "mlx5_8"): "PIX", ("GPU5", "mlx5_9"): "PIX", ("mlx5_11", "GPU7"): "PIX",
                  ("GPU0", "mlx5_3"): "SYS"}, {6: ("91-103", [7], 7)}, [f"mlx5_{i}" for i in range(12)]),
    "18": ("ok", {("GPU0", "mlx5_8"): "NODE", ("GPU4", "mlx5_4"): "PIX", ("GPU4", "mlx5_8"): "SYS"},
           {4: ("32-63,96-127", [1], 1)}, [f"mlx5_{i}" for i in range(9)]),
    "20": ("ok", {("GPU0", "GPU2"): "NV6", ("GPU2", "GPU0"): "SYS", ("GPU3", "GPU2"): "NV6",
                  ("GPU1", "mlx5_0"): "PIX", ("GPU3", "mlx5_1"): "PIX"}, {2: ("48-59", [4], 4)},
           ["mlx5_0", "mlx5_1"]),
    "21": ("ok", {("GPU0", "GPU1"): "NV12", ("GPU0", "GPU2"): "PHB"}, {3: ("0-253", [0, 1], None)}, []),
    "28": ("ok", {("GPU0", "GPU1"): "PIX", ("GPU0", "GPU4"): "SYS"}, {5: ("32-63,96-127", [1], 1)}, []),
    "30": ("ok", {("GPU2", "GPU3"): "NV4", ("GPU0", "GPU1"): "NODE"}, {0: ("0-127", [0], 0)}, []),
    "31": ("ok", {("GPU0", "GPU1"): "NV4", ("GPU6", "GPU7"): "NV4", ("GPU1", "GPU2"): "SYS"},
           {4: ("14-27,70-83", [1], 1)}, []),
    "36": ("ok", {("GPU0", "GPU7"): "PHB"}, {7: ("0-191", [0, 1], None)}, []),
    "42": ("ok", {("GPU0", "GPU1"): "SYS", ("GPU7", "GPU6"): "SYS"}, {0: (None, [], None)}, []),
    "45": ("ok", {("GPU1", "GPU2"): "NODE", ("GPU0", "GPU1"): "SYS"}, {0: ("0-9,20-29", [0], 0), 3: ("10-19,30-39", [1], 1)}, []),
    "47": ("ok", {("GPU2", "GPU3"): "NV17", ("GPU0", "GPU1"): "NV18", ("GPU0", "GPU2"): "NODE"},
           {4: ("128-255,384-511", [1], 1)}, []),
    "48": ("ok", {("GPU4", "mlx5_0"): "SYS", ("mlx5_0", "mlx5_1"): "PIX", ("GPU0", "mlx5_1"): "NODE"},
           {0: ("0-55,112-167", [0], 0)}, ["mlx5_0", "mlx5_1"]),
    # NIC0..NIC3 legend entries are garbled ("A", "DE  N/A", ...): those columns keep NIC#.
    "50": ("partial", {("GPU0", "NIC0"): "NODE", ("GPU1", "mlx5_11"): "SYS", ("GPU0", "mlx5_10"): "NODE",
                       ("mlx5_bond_0", "mlx5_118"): "PIX", ("NIC3", "mlx5_10"): "PIX", ("GPU0", "GPU1"): "SYS"},
           {0: (None, [], None), 1: ("88-91,184-187", [1], 1)}, None),
    "54": ("ok", {("GPU2", "GPU3"): "PHB", ("GPU0", "GPU1"): "NODE"}, {5: ("0-47", [0], 0)}, []),
    "70": ("ok", {("GPU0", "GPU7"): "NV18"}, {4: ("52-103,156-207", [1], 1)}, []),
    # header order mlx5_2, mlx5_0, mlx5_3, mlx5_1: each column must land on its own name.
    "75": ("ok", {("GPU0", "mlx5_0"): "PIX", ("GPU0", "mlx5_1"): "PHB", ("GPU0", "mlx5_2"): "SYS",
                  ("GPU4", "mlx5_2"): "PIX", ("GPU6", "mlx5_3"): "PIX", ("mlx5_2", "mlx5_3"): "PHB",
                  ("mlx5_0", "mlx5_1"): "PHB", ("mlx5_1", "GPU2"): "PIX", ("GPU0", "GPU3"): "NV2"},
           {0: ("0-19,40-59", [], None)}, ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]),
    "76": ("ok", {("GPU0", "GPU2"): "SYS", ("GPU0", "GPU1"): "PHB", ("GPU2", "mlx4_0"): "PHB",
                  ("mlx4_0", "GPU0"): "SYS"}, {2: ("6-11", [], None)}, ["mlx4_0"]),
    "80": ("ok", {("GPU0", "GPU1"): "NV18", ("mlx5_2", "mlx5_3"): "PIX", ("mlx5_6", "mlx5_7"): "PIX",
                  ("GPU0", "mlx5_0"): "SYS"},
           {0: ("0-71", [0, *range(3, 10), *range(11, 18)], 2), 1: ("0-71", [0, *range(3, 10), *range(11, 18)], 10),
            2: ("72-143", [1, *range(19, 26), *range(27, 34)], 18), 3: ("72-143", [1, *range(19, 26), *range(27, 34)], 26)},
           [f"mlx5_{i}" for i in range(8)]),
    "85": ("ok", {("GPU0", "mlx5_0"): "NODE", ("GPU2", "mlx5_8"): "NODE", ("GPU0", "GPU7"): "NV12"},
           {0: ("24-47", [1], 1), 6: ("48-71", [2], 2)}, [f"mlx5_{i}" for i in range(9)]),
    "86": ("ok", {("GPU4", "mlx5_4"): "NODE", ("GPU0", "mlx5_8"): "NODE", ("GPU0", "GPU1"): "NV18"},
           {0: ("0-47", [0], 0), 7: ("48-95", [1], 1)}, [f"mlx5_{i}" for i in range(9)]),
    # re-typed from the ALCF Polaris documentation table (no GPU NUMA ID column, NIC names in the header)
    "91": ("ok", {("GPU0", "GPU1"): "NV4", ("GPU3", "mlx5_0"): "PHB", ("GPU1", "mlx5_1"): "PHB",
                  ("mlx5_0", "mlx5_1"): "SYS", ("GPU0", "mlx5_0"): "SYS"},
           {0: ("24-31,56-63", [3], 3), 3: ("0-7,32-39", [0], 0)}, ["mlx5_0", "mlx5_1"]),
    "90": ("ok", {("GPU0", "GPU1"): "NV1", ("GPU7", "GPU0"): "NV2", ("GPU4", "GPU3"): "NV1"},
           {0: (None, [], None)}, []),
}


def _prefix(p: Path) -> str:
    return p.name.split("_", 1)[0]


def _row_count(text: str, kind: str) -> int:
    """Independent count of device rows: lines whose 2nd token is a matrix cell."""
    n = 0
    for line in text.replace("\r", "").split("\n"):
        toks = line.split()
        if len(toks) >= 2 and re.match(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$", toks[1]):
            if (kind == "gpu") == bool(re.match(r"^GPU\d+$", toks[0])):
                n += 1
    return n


def test_every_capture_has_expectations():
    assert FILES, "no captures found"
    assert sorted(_prefix(p) for p in FILES) == sorted(EXPECT)


@pytest.mark.parametrize("path", FILES, ids=[p.name[:40] for p in FILES])
def test_capture(path: Path):
    text = read(path)
    assert looks_like(text)
    doc = parse_file(path)
    VALIDATOR.validate(doc)
    status, cells, gpus, nics = EXPECT[_prefix(path)]
    src = doc["sources"][0]
    assert src["name"] == "nvidia-smi" and src["status"] == status, (src, doc["warnings"])
    if status == "partial":
        assert doc["warnings"]
    assert doc["host"]["provenance"] == "nvidia-smi"

    m = doc["matrix"]
    keys = set(m)
    gpu_keys = {f"GPU{g['index']}" for g in doc["gpus"]}
    nic_keys = {n["name"] for n in doc["nics"]}
    assert keys == gpu_keys | nic_keys and not gpu_keys & nic_keys
    assert len(doc["gpus"]) == _row_count(text, "gpu")
    assert len(doc["nics"]) == _row_count(text, "nic")
    for r, row in m.items():
        assert set(row) == keys, f"row {r} is not square"
        for c, v in row.items():
            assert CELL.match(v), (r, c, v)
            assert (v == "X") == (r == c), (r, c, v)
            if status == "ok":
                assert v != "N/A", (r, c)   # none of the real captures has an N/A cell
    for (r, c), v in cells.items():
        assert m[r][c] == v, (r, c, m[r][c], v)
    if nics is not None:
        assert sorted(nic_keys) == sorted(nics)
        assert not any(re.match(r"^NIC\d+$", k) for k in nic_keys)
    by_idx = {g["index"]: g for g in doc["gpus"]}
    for idx, (cpu, numa, node) in gpus.items():
        g = by_idx[idx]
        assert (g["cpu_affinity"], g["numa_affinity"], g["numa_node"]) == (cpu, numa, node)
    for g in doc["gpus"]:
        if g["cpu_affinity"] is not None:
            assert g["cpu_affinity"] == format_cpulist(parse_cpulist(g["cpu_affinity"]))
        assert g["numa_affinity"] == sorted(set(g["numa_affinity"]))
    # NVLink links: one per unordered GPU pair whose two cells agree on NV#.
    expected_links = set()
    for a in gpu_keys:
        for b in gpu_keys:
            if a < b and m[a][b] == m[b][a] and m[a][b].startswith("NV"):
                expected_links.add((a, b, int(m[a][b][2:])))
    got = {(min(l["a"], l["b"]), max(l["a"], l["b"]), l["count"]) for l in doc["links"] if l["kind"] == "nvlink"}
    assert got == expected_links
    # determinism
    assert dumps_json(doc) == dumps_json(parse_file(path))


def test_specific_semantics():
    d20 = parse_file(by_prefix("20"))
    assert any("not symmetric" in w and "GPU2" in w and "MIG" in w for w in d20["warnings"])
    assert {(l["a"], l["b"]) for l in d20["links"]} == {("GPU0", "GPU1"), ("GPU0", "GPU3")}
    d76 = parse_file(by_prefix("76"))
    assert any("SOC" in w for w in d76["warnings"])
    d80 = parse_file(by_prefix("80"))
    assert [g["gpu_numa_id"] for g in d80["gpus"]] == [2, 10, 18, 26]
    assert d80["host"]["sockets"] == 2
    assert len(d80["numa_nodes"]) == 34   # SOURCES.md: "34 NUMA nodes"
    d50 = parse_file(by_prefix("50"))
    assert any("62 of 122" in w for w in d50["warnings"])
    assert any("garbled" in w for w in d50["warnings"])
    assert [n["name"] for n in d50["nics"]][:5] == ["NIC0", "NIC1", "NIC2", "NIC3", "mlx5_10"]
    d86 = parse_file(by_prefix("86"))
    assert any("glued" in w for w in d86["warnings"]) and d86["sources"][0]["status"] == "ok"
    d11 = parse_file(by_prefix("11"))
    assert d11["host"]["sockets"] == 4   # NUMA Affinity 3, 1, 7, 5 (EPYC NPS4)
    assert next(n for n in d11["nics"] if n["name"] == "mlx5_0")["numa_node"] == 3
    link = next(l for l in d11["links"] if (l["a"], l["b"]) == ("GPU0", "GPU1"))
    assert (link["count"], link["bw_GBps"]) == (12, 240.0)
    d = parse_topo_text(read(by_prefix("11")), gpu_names=["NVIDIA A100-SXM4-40GB"] * 8)
    assert d["gpus"][0]["arch"] == "ampere" and d["gpus"][0]["compute_capability"] == "8.0"


def test_count_report(capsys):
    exact = partial = 0
    for p in FILES:
        status = parse_file(p)["sources"][0]["status"]
        exact += status == "ok"
        partial += status == "partial"
    line = f"topo captures: {exact} parsed exactly, {partial} partial"
    print(line)
    expected_partial = sum(1 for e in EXPECT.values() if e[0] == "partial")
    assert (exact, partial) == (len(FILES) - expected_partial, expected_partial), line


# --------------------------------------------------------------------------------------------
# Unrecoverable input
@pytest.mark.parametrize("text, line, what", [
    ("", None, "empty"),
    ("   \n\t\n", None, "empty"),
    ("GPU0 GPU1\n\x00\x01\x02GPU0 GPU1\x00", 2, "binary"),
    ("hello\nworld\n", 1, "no header"),
    ("Legend:\n  X = Self\nGPU0 X NV4\n", 3, "no header"),
    ("\n\nGPU0\tGPU1\tCPU Affinity\n\n", 4, "no matrix rows"),
])
def test_unrecoverable(text, line, what):
    with pytest.raises(InputError) as e:
        parse_topo_text(text, path="cap.txt")
    msg = str(e.value)
    assert msg.startswith("cap.txt") and what in msg and "\n" not in msg
    assert e.value.line == line


def test_damaged_rows_keep_anchored_cells():
    text = ("\tGPU0\tGPU1\tGPU2\tNIC0\tCPU Affinity\tNUMA Affinity\n"
            "GPU0\t X \tNV4\tSYS\tPIX\t0-7\t0\n"
            "GPU1\tNV4\t X \tPIX\t0-7\t0\n"          # one cell missing after the X
            "GPU2\tSYS\tSYS\t X\n"                 # truncated after its X: no NIC0 cell, no affinity
            "NIC0\tPIX\t X \tSYS\tNODE\n"           # X in the wrong column: nothing is anchored
            "\nNIC Legend:\n\n  NIC0: mlx5_0\n")
    d = parse_topo_text(text, "dmg.txt")
    VALIDATOR.validate(d)
    m = d["matrix"]
    assert d["sources"][0]["status"] == "partial"
    assert m["GPU0"] == {"GPU0": "X", "GPU1": "NV4", "GPU2": "SYS", "mlx5_0": "PIX"}
    assert m["GPU1"]["GPU0"] == "NV4" and m["GPU1"]["GPU2"] == "N/A" and m["GPU1"]["mlx5_0"] == "N/A"
    # trailing values are told apart from cells by type (cpulist vs vocabulary), so a missing
    # cell does not shift them
    assert d["gpus"][1]["cpu_affinity"] == "0-7"
    assert m["GPU2"]["GPU0"] == "SYS" and m["GPU2"]["GPU1"] == "SYS" and m["GPU2"]["mlx5_0"] == "N/A"
    assert set(m["mlx5_0"].values()) == {"X", "N/A"}
    assert any("line 3" in w and "GPU1" in w for w in d["warnings"])
    assert any("line 5" in w and "NIC0" in w for w in d["warnings"])
    assert [l["count"] for l in d["links"]] == [4]


def test_glued_cells_are_split():
    text = "GPU0\tGPU1\tGPU2\tCPU Affinity\nGPU0\t X \tNV2SYS\t0-3\nGPU1\tNV2\t X \tSYS\t0-3\nGPU2\tSYS\tSYS\tX0-3\n"
    d = parse_topo_text(text)
    assert d["matrix"]["GPU0"] == {"GPU0": "X", "GPU1": "NV2", "GPU2": "SYS"}
    assert d["gpus"][2]["cpu_affinity"] == "0-3"
    assert any("glued" in w for w in d["warnings"])
    # NV12 glued to a cpulist is ambiguous (NV12+0-3 or NV120+-3): never split
    d = parse_topo_text("GPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV120-3\nGPU1\tNV12\t X \t0-3\n")
    assert d["matrix"]["GPU0"]["GPU1"] == "N/A" and d["sources"][0]["status"] == "partial"


def test_legend_mapping_two_columns_to_one_name():
    text = ("GPU0\tNIC0\tNIC1\nGPU0\t X \tPIX\tSYS\nNIC0\tPIX\t X \tSYS\nNIC1\tSYS\tSYS\t X\n\n"
            "NIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_0\n")
    d = parse_topo_text(text)
    assert d["matrix"]["GPU0"] == {"GPU0": "X", "NIC0": "PIX", "NIC1": "SYS"}
    assert d["sources"][0]["status"] == "partial" and any("mlx5_0" in w for w in d["warnings"])


def test_no_legend_keeps_placeholders_and_warns():
    d = parse_topo_text("GPU0\tNIC0\tCPU Affinity\nGPU0\t X \tPIX\t0-3\nNIC0\tPIX\t X\n")
    assert [n["name"] for n in d["nics"]] == ["NIC0"]
    assert d["sources"][0]["status"] == "partial" and any("NIC Legend" in w for w in d["warnings"])


# --------------------------------------------------------------------------------------------
# Fuzzing
def _mutate(text: str, op: str, pos: float, junk: str) -> str:
    lines = text.split("\n")
    i = int(pos * max(len(lines) - 1, 0))
    k = int(pos * len(text))
    if op == "truncate":
        return text[:k]
    if op == "delete_line":
        return "\n".join(lines[:i] + lines[i + 1:])
    if op == "dup_line":
        return "\n".join(lines[:i + 1] + lines[i:])
    if op == "swap_lines":
        j = (i + 3) % len(lines)
        lines[i], lines[j] = lines[j], lines[i]
        return "\n".join(lines)
    if op == "insert":
        return text[:k] + junk + text[k:]
    if op == "replace_char":
        return text[:k] + junk[:1] + text[k + 1:]
    raise AssertionError(op)


def _whitespace(text: str, op: str) -> str:
    if op == "tabs_to_spaces":
        return text.replace("\t", "    ")
    if op == "collapse":
        return "\n".join(" ".join(l.split()) for l in text.replace("\r\n", "\n").split("\n"))
    if op == "crlf":
        return text.replace("\r\n", "\n").replace("\n", "\r\n")
    if op == "ansi":
        i = text.find("GPU0")
        return text[:i] + "\x1b[4m" + text[i:].replace("\n", "\x1b[0m\n", 1)
    if op == "bare_ansi":
        i = text.find("GPU0")
        return text[:i] + "[4m" + text[i:].replace("\n", "[0m\n", 1)
    if op == "double_space":
        return text.replace("\n", "\n\n")
    raise AssertionError(op)


@FUZZ
@given(st.sampled_from(FILES),
       st.sampled_from(["truncate", "delete_line", "dup_line", "swap_lines", "insert", "replace_char"]),
       st.floats(0, 1), st.text(min_size=1, max_size=12))
def test_fuzz_mutations_only_input_error(path, op, pos, junk):
    text = _mutate(read(path), op, pos, junk)
    try:
        d = parse_topo_text(text, "m.txt")
    except InputError as e:
        assert "\n" not in str(e) and str(e).startswith("m.txt")
        return
    VALIDATOR.validate(d)
    for r, row in d["matrix"].items():
        assert set(row) == set(d["matrix"])
        assert all(CELL.match(v) for v in row.values())


@FUZZ
@given(st.sampled_from(FILES),
       st.lists(st.sampled_from(["tabs_to_spaces", "collapse", "crlf", "ansi", "bare_ansi", "double_space"]),
                min_size=1, max_size=3))
def test_fuzz_whitespace_changes_keep_matrix(path, ops):
    text = read(path)
    for op in ops:
        text = _whitespace(text, op)
    ref = parse_file(path)
    d = finalize(parse_topo_text(text))
    assert d["matrix"] == ref["matrix"]
    assert [(g["cpu_affinity"], g["numa_affinity"], g["numa_node"]) for g in d["gpus"]] == \
        [(g["cpu_affinity"], g["numa_affinity"], g["numa_node"]) for g in ref["gpus"]]


@FUZZ
@given(st.one_of(st.text(max_size=300), st.binary(max_size=300).map(lambda b: b.decode("latin-1"))))
def test_fuzz_junk(text):
    try:
        d = parse_topo_text(text)
    except InputError:
        return
    VALIDATOR.validate(d)


_VOCAB = ["PIX", "PXB", "PHB", "NODE", "SYS", "NV1", "NV2", "NV4", "NV12", "NV18", "N/A"]


@st.composite
def grids(draw):
    n = draw(st.integers(1, 8))
    m = draw(st.integers(0, 5))
    style = draw(st.sampled_from(["tabs", "spaces", "collapsed", "old"]))
    names = draw(st.lists(st.sampled_from([f"mlx5_{i}" for i in range(12)] + ["rocep49s0", "mlx5_bond_0", "ibp24s0"]),
                          min_size=m, max_size=m, unique=True))
    keys = [f"GPU{i}" for i in range(n)] + names
    cells = {r: {c: ("X" if r == c else draw(st.sampled_from(_VOCAB))) for c in keys} for r in keys}
    trailing = draw(st.sampled_from([(), ("CPU Affinity",), ("CPU Affinity", "NUMA Affinity"),
                                     ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")]))
    aff = {}
    for i in range(n):
        cpus = sorted(draw(st.sets(st.integers(0, 255), min_size=1, max_size=6)))
        numa = sorted(draw(st.sets(st.integers(0, 7), min_size=1, max_size=3)))
        aff[f"GPU{i}"] = (format_cpulist(cpus), format_cpulist(numa), draw(st.sampled_from(["N/A", "2", "10"])))
    return keys, names, cells, trailing, aff, style


def _render(keys, names, cells, trailing, aff, style):
    """Render a grid the ways nvidia-smi (and copies of it) do."""
    label = {k: k for k in keys}
    if style != "old":
        label.update({nm: f"NIC{j}" for j, nm in enumerate(names)})
    sep = "\t" if style == "tabs" else (" " if style == "collapsed" else "        ")
    head = sep + sep.join(label[k] for k in keys) + (sep + sep.join(trailing) if trailing else "")
    lines = [head]
    for r in keys:
        vals = [(" X " if style == "tabs" else "X") if cells[r][c] == "X" else cells[r][c] for c in keys]
        if r.startswith("GPU") and r in aff:
            vals += list(aff[r][:len(trailing)])
        lines.append(label[r] + sep + sep.join(vals))
    if style != "old" and names:
        lines += ["", "NIC Legend:", ""] + [f"  NIC{j}: {nm}" for j, nm in enumerate(names)]
    return "\n".join(lines) + "\n"


@FUZZ
@given(grids())
def test_generated_grid_parses_exactly(grid):
    keys, names, cells, trailing, aff, style = grid
    d = parse_topo_text(_render(*grid))
    assert d["matrix"] == cells
    assert d["sources"][0]["status"] == "ok", d["warnings"]
    for g in d["gpus"]:
        cpu, numa, gnid = aff[f"GPU{g['index']}"]
        if "CPU Affinity" in trailing:
            assert g["cpu_affinity"] == cpu
        if "NUMA Affinity" in trailing:
            assert format_cpulist(g["numa_affinity"]) == numa
        if "GPU NUMA ID" in trailing:
            assert g["gpu_numa_id"] == (None if gnid == "N/A" else int(gnid))


# --------------------------------------------------------------------------------------------
def test_parsing_imports_neither_networkx_nor_rich():
    code = ("import sys; from gpucomm.probes.formats.smi_topo import parse_topo_text; from gpucomm.probes.formats.smi_nvlink import parse_nvlink_status;"
            f"parse_topo_text(open({str(by_prefix('11'))!r}, encoding='utf-8').read());"
            "bad = [m for m in ('networkx', 'rich', 'torch') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
