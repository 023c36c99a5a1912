"""Parser robustness against captures we have not seen (helper R1).

Two kinds of evidence, for every text format gpucomm reads:

1. *Transformations* of the real captures in ``fixtures/captures/`` that people's copy/paste
   habits apply (shell prompt, markdown fence or 4-space code block, a collect_env heading and
   the rest of the report after the block, CRLF / CR-only, tabs <-> spaces, trailing blanks,
   ANSI codes, a BOM, non-breaking spaces, blank lines between rows, ``<details>`` wrappers,
   launcher labels ...).  The parse result must be *unchanged* (same GPUs, NIC names, matrix,
   affinities, links) and the content detection must still name the format.
2. *Synthesised* outputs we have no capture of, rendered the way the tools print them (studied
   from the captures and the tools' sources: nvidia-smi's tab layout with `` X `` and the double
   tab before GPU NUMA ID; rocm_smi.py's ``%-6s``/``%-12s`` tables and ``printLogSpacer``
   banners; NCCL's xml.cc dump writer; nccl-tests' common.cu headers of every era).  The parse
   must give back exactly what was rendered, or -- where the format really loses information --
   a partial result with a warning, never a wrong cell and never an exception other than
   :class:`gpucomm.probes.errors.InputError`.

Each bug these found has a regression test here (marked "regression").
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucomm.probes.formats.nccltests import parse_nccltests, split_nccltests
from gpucomm.probes.errors import InputError
from gpucomm.probes.load import detect_kind
from gpucomm.probes.model import finalize, format_cpulist, schema_path
from gpucomm.probes.formats.nccl_xml import parse_nccl_xml
from gpucomm.probes.formats.rocm_smi import parse_rocm_text
from gpucomm.probes.formats.smi_nvlink import parse_nvlink_status
from gpucomm.probes.formats.smi_topo import parse_topo_text

ROOT = Path(__file__).resolve().parent.parent
CAP = ROOT / "fixtures" / "captures"
TOPO_FILES = sorted((CAP / "topo").glob("*.txt"))
NVL_FILES = sorted((CAP / "extra").glob("*nvlink-status*.txt"))
XML_FILES = sorted((CAP / "ncclxml").glob("*.xml"))
ROCM_FILES = sorted((CAP / "rocm").glob("*.txt"))
NT_FILES = sorted((CAP / "nccltests").glob("*.txt"))
VALIDATOR = jsonschema.Draft202012Validator(json.loads(Path(schema_path()).read_text()))
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


def _read(p: Path) -> str:
    return p.read_bytes().decode("utf-8")


def _lf(t: str) -> str:
    return t.replace("\r\n", "\n")


def _lines(t: str) -> list:
    return _lf(t).split("\n")


# --------------------------------------------------------------------------------------------
# What copy/paste does to a block of tool output.  Every transformation keeps all information.
COLLECT_ENV_TAIL = (
    "\n\nNvidia driver version: 550.54.15\ncuDNN version: Could not collect\nHIP runtime version: N/A\n"
    "MIOpen runtime version: N/A\nIs XNNPACK available: True\n\nCPU:\nArchitecture:                       x86_64\n"
    "CPU(s):                             128\nNUMA node(s):                       2\n"
    "NUMA node0 CPU(s):                  0-31,64-95\nNUMA node1 CPU(s):                  32-63,96-127\n\n"
    "Versions of relevant libraries:\n[pip3] numpy==1.26.4\n[pip3] torch==2.4.0\n[conda] Could not collect\n"
    "NVIDIA_VISIBLE_DEVICES=all\nCUDA_VISIBLE_DEVICES=0,1,2,3\nNCCL_CUMEM_ENABLE=0\n"
)
TRANSFORMS = {
    "prompt": lambda t: "$ nvidia-smi topo -m\n" + t,
    "root_prompt": lambda t: "root@gpu-node-17:~# nvidia-smi topo -m\n" + t,
    "fence": lambda t: "```\n" + t + "\n```\n",
    "fence_lang_and_prose": lambda t: "Here is the output:\n```text\n" + t + "\n```\nThanks for looking!\n",
    "details_wrapper": lambda t: "<details>\n<summary>topology</summary>\n\n```\n" + t + "\n```\n</details>\n",
    "heading_gpu_topology": lambda t: "GPU Topology:\n" + t,
    "heading_nvidia_topology": lambda t: "NVIDIA Topology: \n" + t,
    "indent4": lambda t: "\n".join("    " + l if l.strip() else l for l in _lines(t)),
    "indent_tab": lambda t: "\n".join("\t" + l if l.strip() else l for l in _lines(t)),
    "tabs_to_spaces": lambda t: t.expandtabs(8),
    "spaces_to_tabs": lambda t: re.sub(r" {2,}", "\t", t),
    "collapse_whitespace": lambda t: re.sub(r"[ \t]+", " ", t),
    "crlf": lambda t: _lf(t).replace("\n", "\r\n"),
    "cr_only": lambda t: _lf(t).replace("\n", "\r"),
    "double_cr": lambda t: _lf(t).replace("\n", "\r\r\n"),
    "trailing_whitespace": lambda t: "\n".join(l + "   \t" for l in _lines(t)),
    "collect_env_tail": lambda t: _lf(t).rstrip("\n") + COLLECT_ENV_TAIL,
    "collect_env_around": lambda t: ("Collecting environment information...\nPyTorch version: 2.4.0\n"
                                     "Is CUDA available: True\nGPU models and configuration:\nGPU 0: NVIDIA H100\n"
                                     "GPU 1: NVIDIA H100\n\nGPU Topology:\n" + t + COLLECT_ENV_TAIL),
    "ansi_cells": lambda t: re.sub(r"(?<=\s)(NV\d+|SYS|PIX|PXB|NODE|PHB|XGMI|PCIE)(?=\s)",
                                   lambda m: "\x1b[32m" + m.group(1) + "\x1b[0m", t),
    "ansi_labels_no_esc": lambda t: re.sub(r"(?<=\s)(GPU\d+)(?=\s)", lambda m: "[4m" + m.group(1) + "[0m", t),
    "bom": lambda t: "\ufeff" + t,
    "nbsp_single_spaces": lambda t: re.sub(r"(?<=\S) (?=\S)", "\u00a0", t),
    "nbsp_everywhere": lambda t: t.replace(" ", "\u00a0"),
    "zero_width_spaces": lambda t: "\u200b" + t.replace("\n", "\n\u200b"),
    "blank_lines_between": lambda t: "\n\n".join(_lines(t)),
    "leading_blank_lines": lambda t: "\n\n\n" + t,
}


def _apply(text: str, names) -> str:
    for n in names:
        text = TRANSFORMS[n](text)
    return text


# --------------------------------------------------------------------------------------------
# nvidia-smi topo -m
def topo_core(doc: dict) -> dict:
    return {
        "gpus": [(g["index"], g["cpu_affinity"], g["numa_affinity"], g["numa_node"], g.get("gpu_numa_id"))
                 for g in doc["gpus"]],
        "nics": [(n["name"], n["numa_node"]) for n in doc["nics"]],
        "matrix": doc["matrix"],
        "links": sorted((l["a"], l["b"], l["kind"], l.get("count")) for l in doc["links"]),
        "status": doc["sources"][0]["status"],
        "sockets": doc["host"].get("sockets"),
    }


_TOPO_REF = {p.name: topo_core(parse_topo_text(_read(p), path=p.name)) for p in TOPO_FILES}


def _check_topo(text: str, ref: dict, what: str) -> dict:
    assert detect_kind(text) == "nvidia-smi", what
    doc = parse_topo_text(text, path="x.txt")
    got = topo_core(doc)
    diff = [k for k in ref if ref[k] != got[k]]
    assert not diff, f"{what}: {diff} differ; warnings {doc['warnings'][:3]}"
    return doc


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_topo_transformation_keeps_result(name):
    for p in TOPO_FILES:
        _check_topo(TRANSFORMS[name](_read(p)), _TOPO_REF[p.name], f"{p.name} / {name}")


@FUZZ
@given(st.sampled_from(TOPO_FILES), st.lists(st.sampled_from(sorted(TRANSFORMS)), min_size=2, max_size=5))
def test_topo_composed_transformations_keep_result(path, names):
    doc = _check_topo(_apply(_read(path), names), _TOPO_REF[path.name], f"{path.name} / {names}")
    VALIDATOR.validate(finalize(doc))


def test_topo_cr_only_line_ends_regression():
    """regression: CR-only text was one long line ("header found but no matrix rows")."""
    p = next(f for f in TOPO_FILES if f.name.startswith("17_"))
    doc = parse_topo_text(_lf(_read(p)).replace("\n", "\r"))
    assert doc["matrix"]["GPU4"]["mlx5_8"] == "PIX" and len(doc["nics"]) == 12


def test_topo_trailing_report_after_legendless_capture_regression():
    """regression: without a legend the matrix ran to the end of the text, so a closing fence or
    the rest of a collect_env report made the result 'partial' with 'unrecognised line' warnings."""
    p = next(f for f in TOPO_FILES if f.name.startswith("45_"))
    doc = parse_topo_text("```\n" + _read(p) + "\n```\n" + COLLECT_ENV_TAIL)
    assert doc["sources"][0]["status"] == "ok" and not doc["warnings"]


def test_topo_header_underline_without_esc_is_not_json_regression():
    """regression: a capture whose first line starts with "[4m" (ESC lost in a paste) was
    detected as JSON and failed with 'invalid JSON'."""
    text = "[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID[0m\nGPU0\t X \tNV4\t0-15\t0\t\tN/A\n" \
           "GPU1\tNV4\t X \t0-15\t0\t\tN/A\n"
    assert detect_kind(text) == "nvidia-smi"
    assert parse_topo_text(text)["matrix"]["GPU0"]["GPU1"] == "NV4"


def test_details_wrapper_is_not_xml_regression():
    """regression: GitHub issue bodies wrap outputs in <details>; any text starting with '<' was
    taken for NCCL XML."""
    p = next(f for f in TOPO_FILES if f.name.startswith("09_"))
    assert detect_kind(TRANSFORMS["details_wrapper"](_read(p))) == "nvidia-smi"
    r = next(f for f in ROCM_FILES if f.name.startswith("02_"))
    assert detect_kind(TRANSFORMS["details_wrapper"](_read(r))) == "rocm-smi"
    x = XML_FILES[0]  # an AWS file: a long copyright comment before <system>
    assert _read(x).lstrip().startswith("<!--") and detect_kind(_read(x)) == "nccl-xml"


def test_topo_mid_text_bom_and_zero_width_space_regression():
    """regression: a BOM or U+200B before a row label glued onto it ("\\ufeffGPU0")."""
    p = next(f for f in TOPO_FILES if f.name.startswith("86_"))
    _check_topo("```\n\ufeff" + _read(p).replace("\nGPU3", "\n\u200bGPU3"), _TOPO_REF[p.name], "bom")


def test_topo_second_capture_in_one_file_is_reported_regression():
    """regression: two reports pasted one after the other (two nodes) were silently read as one,
    the second's rows as 'second row for GPU0' noise or (after a legend) not at all."""
    pa = next(f for f in TOPO_FILES if f.name.startswith("09_"))
    a, b = _read(pa), _read(next(f for f in TOPO_FILES if f.name.startswith("17_")))
    ref = _TOPO_REF[pa.name]["matrix"]
    doc = parse_topo_text("node-a:\n" + a + "\nnode-b:\n" + b)
    assert doc["matrix"] == ref and [n["name"] for n in doc["nics"]] == [f"mlx5_{i}" for i in range(8)]
    assert doc["sources"][0]["status"] == "partial"
    assert any("second topo -m matrix" in w for w in doc["warnings"])
    # legend cut from the first: its NICs keep their placeholders, its GPU cells are intact
    doc = parse_topo_text(a[:a.index("Legend")] + "\n" + b)
    assert any("second topo -m matrix" in w for w in doc["warnings"])
    gpus = [f"GPU{i}" for i in range(8)]
    assert {r: {c: doc["matrix"][r][c] for c in gpus} for r in gpus} == {r: {c: ref[r][c] for c in gpus} for r in gpus}
    assert doc["matrix"]["GPU3"]["NIC3"] == ref["GPU3"]["mlx5_3"]


def test_topo_p2p_matrix_is_refused():
    """``nvidia-smi topo -p2p r`` has the same grid with OK/CNS/... codes: refused by name instead
    of a matrix of N/A."""
    text = (" \tGPU0\tGPU1\tGPU2\tGPU3\t\n GPU0\tX\tOK\tOK\tCNS\t\n GPU1\tOK\tX\tOK\tCNS\t\n"
            " GPU2\tOK\tOK\tX\tCNS\t\n GPU3\tCNS\tCNS\tCNS\tX\t\n\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n"
            "  CNS  = Chipset not supported\n  GNS  = GPU not supported\n  TNS  = Topology not supported\n"
            "  NS   = Not supported\n  U    = Unknown\n")
    with pytest.raises(InputError, match=r"x\.txt:2: .*topo -p2p"):
        parse_topo_text(text, path="x.txt")


# ---- synthesised nvidia-smi layouts -----------------------------------------------------------
SMI_LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""
RDMA_NAMES = ["mlx5_bond_0", "rocep1s0f0", "bnxt_re0", "irdma0", "ibp12s0", "rdmap79s0", "erdma_0", "hns_0",
              "qedr0", "mlx5_ib0", "rxe0", "siw0", "mlx5_eth4", "ionic_0", "efa_0", "roceP2p3s0f0"]


def render_smi(ngpu: int, nics: list, cell, trailing: dict, names_in_header: bool = False, expand: bool = True,
               lead_tab: bool = True) -> str:
    """nvidia-smi's own layout: tab-separated cells, `` X `` on the diagonal, NIC rows without the
    trailing columns, two tabs after NUMA Affinity (its title is wider than one tab stop), legend
    and NIC Legend; ``expand`` gives the terminal/paste form (tabs expanded to 8 columns).
    ``trailing``: {gpu index: (cpu affinity, numa affinity, gpu numa id)[:k]}, k = 0..3."""
    keys = [f"GPU{i}" for i in range(ngpu)] + list(nics)
    lab = {k: k for k in keys}
    if not names_in_header:
        lab.update({n: f"NIC{j}" for j, n in enumerate(nics)})
    k = len(next(iter(trailing.values()))) if trailing else 0
    titles = ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"][:k]
    out = [("\t" if lead_tab else "") + "\t".join(lab[x] for x in keys) + ("\t" + "\t".join(titles) if titles else "")]
    for r in keys:
        line = lab[r] + "\t" + "\t".join(" X " if r == c else cell(r, c) for c in keys)
        if r.startswith("GPU") and k:
            vals = trailing[int(r[3:])]
            line += "\t" + vals[0] + ("\t" + vals[1] if k > 1 else "") + ("\t\t" + vals[2] if k > 2 else "")
        out.append(line)
    text = "\n".join(out) + "\n" + SMI_LEGEND
    if nics and not names_in_header:
        text += "\nNIC Legend:\n\n" + "".join(f"  NIC{j}: {n}\n" for j, n in enumerate(nics))
    return text.expandtabs(8) if expand else text


def _expected(ngpu, nics, cell):
    keys = [f"GPU{i}" for i in range(ngpu)] + list(nics)
    return {r: {c: "X" if r == c else cell(r, c) for c in keys} for r in keys}


def _is_gpu(k):
    return k.startswith("GPU")


def _dgx2_cell(nics):
    pos = {n: 2 * j for j, n in enumerate(nics)}  # NIC j sits next to GPUs 2j, 2j+1

    def cell(a, b):
        if _is_gpu(a) and _is_gpu(b):
            return "NV6"
        ia = int(a[3:]) if _is_gpu(a) else pos[a]
        ib = int(b[3:]) if _is_gpu(b) else pos[b]
        if ia // 8 != ib // 8:
            return "SYS"
        return "PXB" if ia // 2 == ib // 2 else "NODE"
    return cell


_TR16 = {i: ("0-23,48-71" if i < 8 else "24-47,72-95", "0" if i < 8 else "1", "N/A") for i in range(16)}
_TR4 = {i: ("0-23,48-71", "0", "N/A") for i in range(4)}
_GB200 = {0: ("0-71", "0,3-9,11-17", "2"), 1: ("0-71", "0,3-9,11-17", "10"),
          2: ("72-143", "1,19-25,27-33", "18"), 3: ("72-143", "1,19-25,27-33", "26")}
_LONG = format_cpulist(list(range(0, 224, 2)))  # SNC / odd-even split: "0,2,4,...,222" (one long cell)
_NV_ELSE_SYS = (lambda a, b: "NV12" if _is_gpu(a) and _is_gpu(b) else "SYS")

SYNTH = {
    # DGX-2 / HGX-2: 16 V100 on NVSwitch, GPU10..GPU15 columns, NV6 everywhere
    "dgx2_16gpu": (16, [], lambda a, b: "NV6", _TR16, {}),
    "dgx2_16gpu_8nic": (16, [f"mlx5_{i}" for i in range(8)], _dgx2_cell([f"mlx5_{i}" for i in range(8)]), _TR16, {}),
    # 4 GPUs + 18 NICs: NIC10..NIC17 labels, a wide matrix
    "4gpu_18nic": (4, [f"mlx5_{i}" for i in range(18)], _NV_ELSE_SYS, _TR4, {}),
    # non-mlx5 RDMA names through the NIC Legend, and (old drivers) straight in the header
    "rdma_names_legend": (4, RDMA_NAMES, _NV_ELSE_SYS, _TR4, {}),
    "rdma_names_header": (4, RDMA_NAMES, _NV_ELSE_SYS, _TR4, {"names_in_header": True}),
    "gb200_numa_lists": (4, ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"],
                         lambda a, b: "NV18" if _is_gpu(a) and _is_gpu(b) else "SYS", _GB200, {}),
    "na_numa_affinity": (4, [], lambda a, b: "PHB",
                         {0: ("0-23,48-71", "N/A", "N/A"), 1: ("0-23,48-71", "0", "N/A"), 2: ("N/A", "N/A", "N/A"),
                          3: ("24-47,72-95", "1", "N/A")}, {}),
    "long_cpu_affinity": (2, ["mlx5_0"], lambda a, b: "NODE", {0: (_LONG, "0", "N/A"), 1: (_LONG, "0", "N/A")}, {}),
    "cpu_affinity_only": (8, ["mlx5_0", "mlx5_1"], lambda a, b: "SYS", {i: ("0-19,40-59",) for i in range(8)}, {}),
    "no_trailing_columns": (3, [], lambda a, b: "NV2", {}, {}),
    "no_leading_tab": (8, ["mlx5_0"], lambda a, b: "NV18" if _is_gpu(a) and _is_gpu(b) else "PIX",
                       {i: ("0-55", "0", "N/A") for i in range(8)}, {"lead_tab": False}),
}


@pytest.mark.parametrize("name", sorted(SYNTH))
@pytest.mark.parametrize("expand", [True, False], ids=["spaces", "tabs"])
def test_synthesised_topo_layouts_parse_exactly(name, expand):
    ngpu, nics, cell, trailing, kw = SYNTH[name]
    text = render_smi(ngpu, nics, cell, trailing, expand=expand, **kw)
    assert detect_kind(text) == "nvidia-smi"
    doc = parse_topo_text(text)
    assert doc["matrix"] == _expected(ngpu, nics, cell)
    assert [n["name"] for n in doc["nics"]] == list(nics)
    assert doc["sources"][0]["status"] == "ok", doc["warnings"]
    for g in doc["gpus"]:
        vals = trailing.get(g["index"], ())
        if len(vals) > 0:
            assert g["cpu_affinity"] == (None if vals[0] == "N/A" else vals[0])
        if len(vals) > 1:
            assert format_cpulist(g["numa_affinity"]) == ("" if vals[1] == "N/A" else vals[1])
        if len(vals) > 2:
            assert g["gpu_numa_id"] == (None if vals[2] == "N/A" else int(vals[2]))
    VALIDATOR.validate(finalize(doc))


def test_synthesised_dgx2_semantics():
    ngpu, nics, cell, trailing, _ = SYNTH["dgx2_16gpu_8nic"]
    doc = parse_topo_text(render_smi(ngpu, nics, cell, trailing))
    nv = [l for l in doc["links"] if l["kind"] == "nvlink"]
    assert len(nv) == 16 * 15 // 2 and {l["count"] for l in nv} == {6}
    assert doc["host"]["sockets"] == 2
    assert {n["name"]: n["numa_node"] for n in doc["nics"]} == {f"mlx5_{i}": 0 if i < 4 else 1 for i in range(8)}


def test_synthesised_gb200_gpu_numa_id_wins():
    ngpu, nics, cell, trailing, _ = SYNTH["gb200_numa_lists"]
    doc = parse_topo_text(render_smi(ngpu, nics, cell, trailing))
    assert [g["numa_node"] for g in doc["gpus"]] == [2, 10, 18, 26]
    assert doc["gpus"][2]["numa_affinity"] == [1, *range(19, 26), *range(27, 34)]


def test_synthesised_mig_rows_are_kept_as_captured_without_links():
    """8x H100 with GPU3 and GPU5 in MIG mode: their rows say SYS to every GPU while the peers
    still print NV18 (capture 20 shows this on 4 GPUs).  Kept as captured, warned, no NVLink
    recorded for a pair whose two cells disagree."""
    mig = {3, 5}

    def cell(a, b):
        if _is_gpu(a) and _is_gpu(b):
            return "SYS" if int(a[3:]) in mig else "NV18"
        return "PIX" if int((a if _is_gpu(a) else b)[3:]) == 0 else "SYS"
    trailing = {i: ("0-51,104-155" if i < 4 else "52-103,156-207", "0" if i < 4 else "1", "N/A") for i in range(8)}
    doc = parse_topo_text(render_smi(8, ["mlx5_0"], cell, trailing))
    assert doc["matrix"] == _expected(8, ["mlx5_0"], cell)
    assert doc["matrix"]["GPU0"]["GPU3"] == "NV18" and doc["matrix"]["GPU3"]["GPU0"] == "SYS"
    pairs = {(l["a"], l["b"]) for l in doc["links"] if l["kind"] == "nvlink"}
    assert len(pairs) == 6 * 5 // 2 and not any("GPU3" in p or "GPU5" in p for p in pairs)
    assert any("GPU3, GPU5 likely in MIG mode" in w for w in doc["warnings"])


def test_unknown_future_trailing_column_keeps_known_affinities():
    """A driver that adds a column after GPU NUMA ID: the known columns come first and hold one
    token each, so they are kept; the unknown column's values are ignored with a warning."""
    trailing = {0: ("0-55", "0", "N/A", "1"), 1: ("56-111", "1", "N/A", "1")}
    text = render_smi(2, ["mlx5_0"], lambda a, b: "NV18" if _is_gpu(a) and _is_gpu(b) else "PIX",
                      {i: v[:3] for i, v in trailing.items()}, expand=False)
    lines = text.split("\n")
    lines[0] += "\tFabric Clique"
    lines[1] += "\t\t1"
    lines[2] += "\t\t1"
    doc = parse_topo_text("\n".join(lines).expandtabs(8))
    assert [(g["cpu_affinity"], g["numa_affinity"]) for g in doc["gpus"]] == [("0-55", [0]), ("56-111", [1])]
    assert doc["matrix"]["GPU1"]["mlx5_0"] == "PIX"
    assert any("Fabric Clique" in w for w in doc["warnings"]) and any("unknown header" in w for w in doc["warnings"])


@st.composite
def smi_renders(draw):
    """Random nvidia-smi outputs in the real layout, then a random copy/paste transformation."""
    ngpu = draw(st.integers(1, 16))
    nics = draw(st.lists(st.sampled_from(RDMA_NAMES + [f"mlx5_{i}" for i in range(18)]), max_size=18, unique=True))
    keys = [f"GPU{i}" for i in range(ngpu)] + nics
    vocab = ["PIX", "PXB", "PHB", "NODE", "SYS", "NV1", "NV2", "NV4", "NV6", "NV12", "NV18"]
    table = {(a, b): draw(st.sampled_from(vocab)) for a in keys for b in keys if a != b}
    k = draw(st.integers(0, 3))
    trailing = {}
    for i in range(ngpu):
        cpus = format_cpulist(sorted(draw(st.sets(st.integers(0, 511), min_size=1, max_size=40))))
        numa = draw(st.one_of(st.just("N/A"), st.sets(st.integers(0, 33), min_size=1, max_size=8).map(
            lambda s: format_cpulist(sorted(s)))))
        trailing[i] = (cpus, numa, draw(st.sampled_from(["N/A", "0", "2", "26"])))[:k]
    kw = {"expand": draw(st.booleans()), "lead_tab": draw(st.booleans()),
          "names_in_header": draw(st.booleans()) and bool(nics)}
    extra = draw(st.lists(st.sampled_from(["prompt", "fence", "crlf", "indent4", "trailing_whitespace",
                                           "heading_gpu_topology", "collect_env_tail", "ansi_cells"]), max_size=2))
    return ngpu, nics, table, trailing, kw, extra


@FUZZ
@given(smi_renders())
def test_random_nvidia_smi_renders_parse_exactly(case):
    ngpu, nics, table, trailing, kw, extra = case
    cell = (lambda a, b: table[(a, b)])
    text = _apply(render_smi(ngpu, nics, cell, trailing if ngpu else {}, **kw), extra)
    assert detect_kind(text) == "nvidia-smi"
    doc = parse_topo_text(text)
    assert doc["matrix"] == _expected(ngpu, nics, cell)
    assert [n["name"] for n in doc["nics"]] == nics
    assert doc["sources"][0]["status"] == "ok", doc["warnings"]
    VALIDATOR.validate(finalize(doc))


# --------------------------------------------------------------------------------------------
# nvidia-smi nvlink -s
_NVL_TRANSFORMS = sorted(set(TRANSFORMS) - {"collect_env_around"})  # collect_env's "GPU 0: name" lines are GPUs too


@pytest.mark.parametrize("name", _NVL_TRANSFORMS)
def test_nvlink_status_transformation_keeps_result(name):
    for p in NVL_FILES:
        ref = parse_nvlink_status(_read(p))["gpus"]
        got = parse_nvlink_status(TRANSFORMS[name](_read(p)))["gpus"]
        assert got == ref, f"{p.name} / {name}"


def test_nvlink_status_cr_only_and_nbsp_regression():
    """regression: CR-only text merged every GPU into one line; NBSP stayed inside GPU names."""
    p = next(f for f in NVL_FILES if f.name.startswith("01_"))
    ref = parse_nvlink_status(_read(p))
    assert parse_nvlink_status(_lf(_read(p)).replace("\n", "\r"))["gpus"] == ref["gpus"]
    got = parse_nvlink_status(_read(p).replace(" ", "\u00a0"))
    assert got["gpus"][0]["name"] == ref["gpus"][0]["name"] == "NVIDIA A100-SXM4-80GB"


# --------------------------------------------------------------------------------------------
# NCCL topology / graph XML
def xml_core(doc: dict):
    if "nccl_graph" in doc:
        return doc["nccl_graph"]
    return {
        "gpus": [(g["index"], g["pci_bus_id"], g["numa_node"], g["cpu_affinity"], g.get("sm")) for g in doc["gpus"]],
        "nics": [(n["name"], n["pci_bus_id"], n["numa_node"], n.get("ports")) for n in doc["nics"]],
        "links": sorted((l["a"], l["b"], l["kind"], l["bw_GBps"], l.get("count")) for l in doc["links"]),
        "switches": sorted(s["id"] for s in doc["switches"]),
        "matrix": doc.get("matrix"),
    }


XML_TRANSFORMS = {
    "xml_declaration": lambda t: '<?xml version="1.0" encoding="UTF-8"?>\n' + t,
    "bom_and_declaration": lambda t: '\ufeff<?xml version="1.0"?>\n' + t,
    "tab_indent": lambda t: re.sub(r"^( +)", lambda m: "\t" * (len(m.group(1)) // 2), _lf(t), flags=re.M),
    "crlf": lambda t: _lf(t).replace("\n", "\r\n"),
    "cr_only": lambda t: _lf(t).replace("\n", "\r"),
    "comments_between_elements": lambda t: re.sub(r"(<(?:pci|gpu|nic|net|nvlink|channel)\b)",
                                                  r"<!-- hand edit -- keep -->\n\1", t),
    "single_quotes": lambda t: re.sub(r'(\w+)="([^"\']*)"', r"\1='\2'", t),
    "unknown_element_and_attribute": lambda t: re.sub(r"<(cpu|graph) ", r'<\1 x_note="a" ', t, count=1).replace(
        "</cpu>", '  <x_vendor_hint level="3"/>\n</cpu>', 1),
    "shell_prompt": lambda t: "$ cat $NCCL_TOPO_DUMP_FILE\n" + t,
    "markdown_fence": lambda t: "```xml\n" + t + "\n```\n",
    "trailing_whitespace": lambda t: "\n".join(l + "  " for l in _lines(t)),
    "indent4": lambda t: "\n".join("    " + l for l in _lines(t)),
    "attributes_on_several_lines": lambda t: re.sub(r'" (\w+=)', r'"\n      \1', t),
    "space_before_selfclose": lambda t: t.replace("/>", " />"),
    "one_line": lambda t: re.sub(r">\s+<", "><", t),
}
_XML_REF = {p.name: xml_core(parse_nccl_xml(_read(p))) for p in XML_FILES}


@pytest.mark.parametrize("name", sorted(XML_TRANSFORMS))
def test_nccl_xml_transformation_keeps_result(name):
    for p in XML_FILES:
        text = XML_TRANSFORMS[name](_read(p))
        assert detect_kind(text) == "nccl-xml", f"{p.name} / {name}"
        assert xml_core(parse_nccl_xml(text)) == _XML_REF[p.name], f"{p.name} / {name}"


def _gb200_dump(gpu_body=None) -> str:
    """A GB200 compute tray as NCCL >= 2.27 dumps it (xml.cc ncclTopoDumpXmlRec): 2 Grace CPUs
    (arm64), 4 B200 GPUs straight under the CPU root ports with ``<c2c bw count>`` and an NVLink
    to the sentinel ``fffffff:ffff:ff`` (NVSwitch outside the tray), 4 CX-7 with ``rail``/``plane``
    and, on the first, the ``<gin>``/``<rma>`` views of the same device."""
    def gpu(bus, dev):
        body = gpu_body(dev) if gpu_body else (
            f'      <gpu dev="{dev}" sm="100" rank="{dev}" gdr="1">\n'
            '        <nvlink target="fffffff:ffff:ff" count="18" tclass="0x068000"/>\n'
            '        <c2c bw="40000" count="10"/>\n      </gpu>\n')
        return (f'    <pci busid="{bus}" class="0x030200" vendor="0x10de" device="0x2941" subsystem_vendor="0x10de" '
                f'subsystem_device="0x2046" link_speed="32.0 GT/s PCIe" link_width="16">\n{body}    </pci>\n')

    def nic(bus, dev, extra=""):
        guid = f"0x8c8a4c0003a1b2{0xc8 + dev:02x}"
        return (f'    <pci busid="{bus}" class="0x020000" vendor="0x15b3" device="0x1021" subsystem_vendor="0x15b3" '
                f'subsystem_device="0x0023" link_speed="32.0 GT/s PCIe" link_width="16">\n      <nic>\n'
                f'        <net name="mlx5_{dev}" dev="{dev}" latency="0" speed="400000" port="1" guid="{guid}" '
                f'maxconn="131072" gdr="1" coll="0" rail="{dev}" plane="0"/>\n{extra}      </nic>\n    </pci>\n')
    gin = ('        <gin name="mlx5_0" dev="0" speed="400000" guid="0x8c8a4c0003a1b2c8" rail="0" plane="0"/>\n'
           '        <rma name="mlx5_0" dev="0" speed="400000" guid="0x8c8a4c0003a1b2c8" rail="0" plane="0"/>\n')
    return ('<system version="1">\n'
            '  <cpu host_hash="0x9d1f6e0a2b7c4e11" numaid="0" affinity="00000000,00000000,000000ff,ffffffff,ffffffff" '
            'arch="arm64">\n' + nic("0000:03:00.0", 0, gin) + nic("0002:03:00.0", 1) + gpu("0008:01:00.0", 0)
            + gpu("0009:01:00.0", 1) + '  </cpu>\n'
            '  <cpu host_hash="0x9d1f6e0a2b7c4e11" numaid="1" affinity="0000ffff,ffffffff,ffffff00,00000000,00000000" '
            'arch="arm64">\n' + nic("0010:03:00.0", 2) + nic("0012:03:00.0", 3) + gpu("0018:01:00.0", 2)
            + gpu("0019:01:00.0", 3) + '  </cpu>\n</system>\n')


def test_gb200_dump():
    doc = parse_nccl_xml(_gb200_dump())
    VALIDATOR.validate(doc)
    assert not doc["warnings"], doc["warnings"]  # gin/rma are roles of mlx5_0, not ignored elements
    assert [(g["index"], g["numa_node"], g["cpu_affinity"], g["arch"]) for g in doc["gpus"]] == [
        (0, 0, "0-71", "blackwell"), (1, 0, "0-71", "blackwell"), (2, 1, "72-143", "blackwell"),
        (3, 1, "72-143", "blackwell")]
    c2c = [l for l in doc["links"] if l["kind"] == "c2c"]
    assert len(c2c) == 4 and {l["bw_GBps"] for l in c2c} == {400.0} and {l["count"] for l in c2c} == {10}
    nvl = [l for l in doc["links"] if l["kind"] == "nvlink"]
    assert {(l["b"], l["count"]) for l in nvl} == {("NVS", 18)} and len(nvl) == 4
    assert doc["matrix"]["GPU0"]["GPU3"] == "NV18" and doc["matrix"]["GPU0"]["mlx5_2"] == "SYS"
    nics = {n["name"]: n for n in doc["nics"]}
    assert nics["mlx5_0"]["nccl_roles"] == ["net", "gin", "rma"] and "nccl_roles" not in nics["mlx5_1"]
    assert nics["mlx5_3"]["nccl_attrs"]["rail"] == "3" and nics["mlx5_3"]["ports"][0]["rate_gbps"] == 400.0


def test_gin_without_net_is_still_reported():
    text = _gb200_dump().replace('<gin name="mlx5_0"', '<gin name="mlx5_9"')
    assert any("<gin> under <nic>" in w for w in parse_nccl_xml(text)["warnings"])


def test_mlopart_partitions_are_not_dropped_silently_regression():
    """regression: NCCL >= 2.28 writes one ``<gpu mlopart>`` per MLOPart partition under the GPU's
    ``<pci>``; only the first was read and the others vanished without a word."""
    def two(dev):
        return "".join(f'      <gpu dev="{2 * dev + m}" sm="103" rank="{2 * dev + m}" gdr="1" mlopart="{m}">\n'
                       '        <nvlink target="fffffff:ffff:ff" count="9" tclass="0x068000"/>\n      </gpu>\n'
                       for m in (0, 1))
    doc = parse_nccl_xml(_gb200_dump(two))
    VALIDATOR.validate(doc)
    assert [g["index"] for g in doc["gpus"]] == [0, 2, 4, 6]
    assert [[d["dev"] for d in g["mlopart_devs"]] for g in doc["gpus"]] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert any("MLOPart" in w and "dev 0, 1" in w for w in doc["warnings"])


def test_older_sentinel_and_vm_numaid():
    """A KVM guest's dump (nccl-tests#256): ``numaid="-1"`` and the pre-2.30 sentinel
    ``fffffff:ff:ff.0``: one NVS switch, GPU without a NUMA node."""
    text = ('<system version="1">\n  <cpu numaid="-1" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">\n'
            '    <pci busid="0000:1a:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16">\n'
            '      <gpu dev="0" sm="90" rank="0" gdr="1">\n'
            '        <nvlink target="fffffff:ff:ff.0" count="18" tclass="0x068000"/>\n      </gpu>\n'
            '    </pci>\n  </cpu>\n</system>\n')
    doc = parse_nccl_xml(text)
    assert doc["gpus"][0]["numa_node"] is None
    assert [(l["b"], l["count"]) for l in doc["links"] if l["kind"] == "nvlink"] == [("NVS", 18)]


# --------------------------------------------------------------------------------------------
# rocm-smi --showtopo / --showtopotype
def rocm_core(doc: dict):
    return (doc["matrix"], [(g["index"], g["numa_node"], g["numa_affinity"], g["name"]) for g in doc["gpus"]],
            sorted((l["a"], l["b"], l.get("hops"), l.get("weight"), l["bw_GBps"]) for l in doc["links"]))


_ROCM_REF = {p.name: rocm_core(parse_rocm_text(_read(p))) for p in ROCM_FILES}


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_rocm_transformation_keeps_result(name):
    for p in ROCM_FILES:
        text = TRANSFORMS[name](_read(p))
        assert detect_kind(text) == "rocm-smi", f"{p.name} / {name}"
        assert rocm_core(parse_rocm_text(text)) == _ROCM_REF[p.name], f"{p.name} / {name}"


def test_rocm_nbsp_in_section_titles_regression():
    """regression: NBSP inside "Link Type between two GPUs" hid every section ("no rocm-smi
    topology section found") and the content detection."""
    p = next(f for f in ROCM_FILES if f.name.startswith("10_"))
    text = _read(p).replace(" ", "\u00a0")
    assert detect_kind(text) == "rocm-smi" and rocm_core(parse_rocm_text(text)) == _ROCM_REF[p.name]


def render_rocm(n, weight, hops, types, numa, width=90, sections=("weight", "hops", "type", "numa"),
                low_power_warning=False, trailer="") -> str:
    """rocm_smi.py's layout: printLogSpacer banners (80 wide in ROCm 5.x, 90 in 6.x), tables as
    ``'%-6s'`` row label + ``'%-12s'`` cells each followed by a space, ``0`` on the diagonal, and
    ``GPU[i]\\t\\t: (Topology) Numa Node: n`` lines (printLog)."""
    def spacer(title):
        t = f" {title} "
        if len(t) % 2:
            t += "="
        side = (width - len(t)) // 2
        return "=" * side + t + "=" * side

    def table(vals):
        rows = ["%-6s " % "" + "".join("%-12s " % f"GPU{j}" for j in range(n))]
        for i in range(n):
            rows.append("%-6s " % f"GPU{i}" + "".join("%-12s " % ("0" if i == j else vals(i, j)) for j in range(n)))
        return rows
    out = [spacer("ROCm System Management Interface")]
    if low_power_warning:
        out.append("WARNING: AMD GPU device(s) is/are in a low-power state. Check power control/runtime_status")
        out.append("")
    titles = {"weight": "Weight between two GPUs", "hops": "Hops between two GPUs",
              "type": "Link Type between two GPUs", "numa": "Numa Nodes"}
    src = {"weight": weight, "hops": hops, "type": types}
    for k, sec in enumerate(sections):
        if k:
            out.append("")
        out.append(spacer(titles[sec]))
        if sec == "numa":
            for i in range(n):
                out.append(f"GPU[{i}]\t\t: (Topology) Numa Node: {numa[i]}")
                out.append(f"GPU[{i}]\t\t: (Topology) Numa Affinity: {numa[i]}")
        else:
            out += table(src[sec])
    out.append(spacer("End of ROCm SMI Log"))
    return "\n".join(out) + "\n" + trailer


def _mi250x_16():
    """16 GCDs (8 MI250X): the two GCDs of a package are 1 hop, weight 15; packages 0-3 and 4-7
    form two XGMI hives (1 hop, weight 30); between hives the path is PCIe (3 hops, weight 72)."""
    def same_pkg(i, j):
        return i // 2 == j // 2

    def same_hive(i, j):
        return i // 8 == j // 8
    types = (lambda i, j: "XGMI" if same_hive(i, j) else "PCIE")
    hops = (lambda i, j: 1 if same_hive(i, j) else 3)
    weight = (lambda i, j: 15 if same_pkg(i, j) else (30 if same_hive(i, j) else 72))
    return weight, hops, types, [0 if i < 8 else 1 for i in range(16)]


@pytest.mark.parametrize("width", [80, 90], ids=["rocm5", "rocm6"])
@pytest.mark.parametrize("extra", [(), ("crlf",), ("collapse_whitespace", "fence"), ("trailing_whitespace",)])
def test_synthesised_16_gcd_mi250x(width, extra):
    weight, hops, types, numa = _mi250x_16()
    text = _apply(render_rocm(16, weight, hops, types, numa, width=width, low_power_warning=True,
                              trailer="\nROCM Version: 6.3.42131\nGPU models: AMD Instinct MI250X/MI250 (gfx90a)\n"),
                  extra)
    assert detect_kind(text) == "rocm-smi"
    doc = parse_rocm_text(text)
    assert doc["matrix"] == {f"GPU{i}": {f"GPU{j}": "X" if i == j else types(i, j) for j in range(16)}
                             for i in range(16)}
    links = {(l["a"], l["b"]): l for l in doc["links"]}
    want = {(f"GPU{i}", f"GPU{j}") for i in range(16) for j in range(i + 1, 16) if types(i, j) == "XGMI"}
    assert set(links) == want and len(want) == 2 * 28
    assert links[("GPU0", "GPU1")]["weight"] == 15 and links[("GPU0", "GPU2")]["weight"] == 30
    assert {l["bw_GBps"] for l in links.values()} == {50.0}  # gfx90a in the report -> CDNA2 per-link default
    assert [g["numa_node"] for g in doc["gpus"]] == numa
    assert not doc["warnings"], doc["warnings"]


def test_synthesised_showtopotype_only_and_unreadable_cells():
    """``--showtopotype`` alone (sglang check_env), with rocm-smi's ``XXXX`` for an unknown link
    type and an error line from printErrLog inside the section: warnings, no guessed link."""
    types = (lambda i, j: "XXXX" if {i, j} == {0, 3} else "XGMI")
    text = render_rocm(4, None, None, types, None, sections=("type",))
    err = "ERROR: GPU[2]\t\t: Cannot read Link Type: Not supported on this machine"
    text = text.replace("\nGPU2 ", f"\n{err}\nGPU2 ", 1)
    doc = parse_rocm_text(text)
    assert doc["matrix"]["GPU0"]["GPU3"] == "N/A" and doc["matrix"]["GPU1"]["GPU2"] == "XGMI"
    assert ("GPU0", "GPU3") not in {(l["a"], l["b"]) for l in doc["links"]}
    assert any("XXXX" in w for w in doc["warnings"]) and any("unexpected line" in w for w in doc["warnings"])


# --------------------------------------------------------------------------------------------
# nccl-tests / rccl-tests
def nt_core(p: dict):
    return ([(r["size_bytes"], r["count"], r["type"], r["redop"], r["root"], r["out_of_place"], r["in_place"])
             for r in p["rows"]], p["collective"], p["n_ranks"], p["nodes"], p["avg_busbw_GBps"],
            [(d["rank"], d["host"], d["device"], d["name"]) for d in p["devices"]])


_NT_REF = {p.name: nt_core(parse_nccltests(_read(p))) for p in NT_FILES}
NT_TRANSFORMS = dict(TRANSFORMS)
NT_TRANSFORMS.update({
    # NCCL_DEBUG=INFO interleaves the library's log lines with the table
    "nccl_info_interleaved": lambda t: "\n".join(
        l + ("\ngpu-node-1:1234:1250 [3] NCCL INFO Channel 02/0 : 3[3] -> 4[4] via P2P/CUMEM/read"
             if re.match(r"\s+\d", l) else "") for l in _lines(t)),
    "srun_label": lambda t: "\n".join("0: " + l for l in _lines(t)),
    "mpirun_tag_output": lambda t: "\n".join("[1,0]<stdout>:" + l for l in _lines(t)),
    "mpich_prepend_rank": lambda t: "\n".join("[0] " + l for l in _lines(t)),
    "mpi_chatter_before": lambda t: ("--------------------------------------------------------------------------\n"
                                     "[node-14:12807] 15 more processes have sent help message help-mca-var.txt\n"
                                     "/opt/nccl-tests/build/all_reduce_perf: /usr/lib/libnl-3.so.200: no version "
                                     "information available (required by /usr/lib64/libcxi.so.1)\n" + t),
})


@pytest.mark.parametrize("name", sorted(NT_TRANSFORMS))
def test_nccltests_transformation_keeps_result(name):
    for p in NT_FILES:
        assert nt_core(parse_nccltests(NT_TRANSFORMS[name](_read(p)))) == _NT_REF[p.name], f"{p.name} / {name}"


def test_nccltests_launcher_labels_regression():
    """regression: ``srun --label`` / ``mpirun --tag-output`` prefixes hid every row ("no nccl-tests
    result rows found")."""
    p = NT_FILES[1]
    for name in ("srun_label", "mpirun_tag_output", "mpich_prepend_rank"):
        assert nt_core(parse_nccltests(NT_TRANSFORMS[name](_read(p)))) == _NT_REF[p.name]


def test_several_collectives_in_one_log_regression():
    """regression: a log with several runs (``for t in all_reduce all_gather ...``, or gpucomm's
    own bench table) merged every run's rows into one result named after the last header."""
    ar = _read(next(f for f in NT_FILES if f.name.startswith("09_")))
    ag = ar.replace("all_reduce_perf", "all_gather_perf").replace("     sum      -1", "    none      -1")
    text = "$ for t in all_reduce all_gather; do ./build/${t}_perf -b 32M -e 1G -g 8; done\n" + ar + ag
    runs = split_nccltests(text, "log.txt")
    n = len(_NT_REF[next(f.name for f in NT_FILES if f.name.startswith("09_"))][0])
    assert [(r["test_name"], r["collective"], len(r["rows"])) for r in runs] == [
        ("all_reduce", "all_reduce", n), ("all_gather", "all_gather", n)]
    assert runs[1]["rows"][0]["line"] > runs[0]["rows"][-1]["line"]
    assert runs[0]["avg_busbw_GBps"] == _NT_REF[next(f.name for f in NT_FILES if f.name.startswith("09_"))][4]
    first = parse_nccltests(text, "log.txt")
    assert first["collective"] == "all_reduce" and len(first["rows"]) == n
    assert any("holds 2 test runs" in w and "all_gather" in w for w in first["warnings"])
    chosen = parse_nccltests(text, "log.txt", collective="all_gather_perf")
    assert chosen["test_name"] == "all_gather" and chosen["rows"][0]["line"] == runs[1]["rows"][0]["line"]
    # two runs without "Collective test starting" (older nccl-tests): split at the second "# nThread"
    old = re.sub(r"# (nccl-tests version|Collective test starting).*\n", "", ar)
    assert len(split_nccltests(old + old)) == 2


# ---- synthesised nccl-tests tables of every era ------------------------------------------------
# busbw = algbw * factor (nccl-tests src/*.cu getBw)
FACTORS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
           "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
           "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0, "send_recv": lambda n: 1.0,
           "gather": lambda n: (n - 1) / n, "scatter": lambda n: (n - 1) / n}
OPS = {"all_reduce": ("sum", -1), "all_gather": ("none", -1), "reduce_scatter": ("sum", -1),
       "all_to_all": ("none", -1), "broadcast": ("none", 0), "reduce": ("sum", 0), "send_recv": ("none", -1),
       "gather": ("none", 0), "scatter": ("none", 0)}
BINARY = {"all_to_all": "alltoall", "send_recv": "sendrecv"}


def render_nccltests(coll, n, era="modern", devices=True, hosts=1, named=True, dtype="float"):
    """A run as nccl-tests prints it.  ``era``: "v1" (2016-17: bytes N type op [root] ... res),
    "v2" (2018-20: size count type redop [root] ... error, no Group), "modern" (#wrong, Group,
    version and "Collective test starting" lines), "rccl" (rccl-tests' header)."""
    redop, root = OPS[coll]
    out = []
    binary = BINARY.get(coll, coll) + "_perf"
    if era == "modern" and named:
        out += ["# nccl-tests version 2.17.8 nccl-headers=22907 nccl-library=22907",
                f"# Collective test starting: {binary}"]
    if era == "rccl" and named:
        out += ["# rccl-tests version 2.18.3", f"# Collective test starting: {binary}"]
    out.append("# nThread 1 nGpus 1 minBytes 33554432 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 "
               "agg iters: 1 validation: 1 graph: 0")
    out += ["#", "# Using devices"]
    per = max(1, n // hosts)
    if devices:
        for r in range(n):
            grp = "" if era in ("v1", "v2") else " Group  0"
            out.append(f"#  Rank {r:2d}{grp} Pid {4000 + r:6d} on {'node-%d' % (r // per):>10} device {r % per:2d} "
                       f"[0000:{0x1b + 16 * (r % per):02x}:00] NVIDIA H100 80GB HBM3")
    out.append("#")
    rooted = era not in ("v1", "v2") or coll in ("broadcast", "reduce", "gather", "scatter")
    if era == "v1":
        head = ["bytes", "N", "type", "op"] + (["root"] if rooted else []) + ["time", "algbw", "busbw", "res"] * 2
    elif era == "v2":
        head = ["size", "count", "type", "redop"] + (["root"] if rooted else []) + ["time", "algbw", "busbw",
                                                                                       "error"] * 2
    else:
        head = ["size", "count", "type", "redop", "root"] + ["time", "algbw", "busbw", "#wrong"] * 2
    out.append("#" + "".join(f"{h:>12}" for h in head))
    rows = []
    f = FACTORS[coll](n)
    for k in range(6):
        size = 33554432 << k
        t = size / (150e3 * (1 - 0.5 ** (k + 1)))  # us; algbw approaches 150 GB/s
        algbw = size / t / 1e3
        wrong = "0e+00" if era in ("v1", "v2") else "0"
        cells = [str(size), str(size // 4), dtype, redop] + ([str(root)] if rooted else [])
        cells += [f"{t:.2f}", f"{algbw:.2f}", f"{algbw * f:.2f}", wrong] * 2
        out.append("".join(f"{c:>12}" for c in cells))
        rows.append((size, round(algbw, 2), round(algbw * f, 2)))
    out += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 123.456", "#"]
    return "\n".join(out) + "\n", rows


@pytest.mark.parametrize("era", ["v1", "v2", "modern", "rccl"])
@pytest.mark.parametrize("coll", sorted(FACTORS))
def test_synthesised_nccltests_eras(era, coll):
    text, rows = render_nccltests(coll, 8, era=era)
    p = parse_nccltests(text)
    assert [(r["size_bytes"], r["out_of_place"]["algbw_GBps"], r["out_of_place"]["busbw_GBps"]) for r in p["rows"]] \
        == rows
    assert p["n_ranks"] == 8 and not p["warnings"], p["warnings"]
    named = era in ("modern", "rccl")
    if named:
        assert p["collective"] == coll and p["collective_source"] == "header"
    else:  # inferred from busbw/algbw and the redop/root columns: right, or honestly ambiguous
        assert coll in p["collective_candidates"]
        assert p["collective"] in (coll, None)
    if era == "rccl":
        assert p["version"] == "2.18.3"


def test_v1_res_column_regression():
    """regression: nccl-tests 1.x headers (``bytes N type op ... res``) were not recognised, so
    every row was checked against the modern 13-column layout and dropped."""
    text, rows = render_nccltests("all_reduce", 4, era="v1")
    p = parse_nccltests(text)
    assert len(p["rows"]) == 6 and p["rows"][0]["out_of_place"]["wrong"] == 0.0 and p["collective"] == "all_reduce"
    assert not any("no column header" in w for w in p["warnings"])


def test_header_without_hash_regression():
    """regression: a copy that lost the '#' of the header line fell back to the assumed layout."""
    text, rows = render_nccltests("all_reduce", 8, era="v2")
    text = re.sub(r"^#(\s+size)", r" \1", text, flags=re.M)
    p = parse_nccltests(text)
    assert len(p["rows"]) == 6 and not p["warnings"]


def test_multinode_device_lines():
    text, _ = render_nccltests("all_reduce", 16, hosts=2)
    text = text.replace("#  Rank 12 Group  0 Pid   4012 on     node-1 device  4 [0000:5b:00] NVIDIA H100 80GB HBM3",
                        "# Rank 12 Group 0 Pid 4012 on node-1 device 4 [0000:9a:00] NVIDIA H100")
    p = parse_nccltests(text)
    assert p["n_ranks"] == 16 and p["nodes"] == 2 and p["hosts"] == ["node-0", "node-1"]
    d12 = next(d for d in p["devices"] if d["rank"] == 12)
    assert (d12["host"], d12["device"], d12["bus_id"], d12["name"]) == ("node-1", 4, "0000:9a:00", "NVIDIA H100")


@FUZZ
@given(st.sampled_from(sorted(FACTORS)), st.integers(2, 64), st.booleans(), st.sampled_from(["v2", "modern"]))
def test_collective_inference_is_right_or_ambiguous(coll, n, devices, era):
    """Without a name, the busbw/algbw ratio (and redop/root) never names a wrong collective, and
    with the rank count known it names the right one except for the pairs the table cannot tell
    apart (all_gather/alltoall, gather/scatter)."""
    text, _ = render_nccltests(coll, n, era=era, devices=devices, named=False)
    p = parse_nccltests(text)
    assert p["collective"] in (coll, None)
    if p["collective"] is None:
        assert coll in p["collective_candidates"] or not devices
    if devices and coll not in ("all_gather", "all_to_all", "gather", "scatter"):
        assert p["collective"] == coll
    if p["collective"] == coll and not devices and coll in ("all_reduce", "all_gather", "reduce_scatter"):
        assert p["n_ranks"] in (n, None)  # 2-decimal rounding can blur large n; never a wrong guess
