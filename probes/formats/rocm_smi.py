"""``rocm-smi --showtopo`` (and the ``--showtopotype`` matrix-only variant) captures -> topology
document for AMD GPUs (vendor ``amd``, provenance ``rocm-smi``).

Sections read (each is a banner line ``==== <title> ====`` followed by a GPU matrix or list):
``Weight between two GPUs`` (KFD io-link weight), ``Hops between two GPUs``, ``Link Type between
two GPUs`` (``XGMI``/``PCIE``), ``Numa Nodes`` (``GPU[0] : (Topology) Numa Node: 0`` and
``... Numa Affinity: 0``).  CRLF, tabs, trailing spaces and ANSI colour codes are tolerated; other
sections (``--showproductname`` output pasted around it, ``End of ROCm SMI Log``) are skipped,
though a product name found there selects the XGMI generation.

The ``matrix`` of an AMD document carries rocm-smi's own link types, not nvidia-smi codes:
``X`` on the diagonal, ``XGMI`` or ``PCIE`` elsewhere (``N/A`` when the capture has no link-type
section); the schema allows these values for exactly this reason.  Planners compare path types by
name and treat XGMI like a direct GPU-GPU link.

``links``: one ``xgmi`` link per GPU pair whose link type is XGMI and that is one hop apart, with
``hops`` and ``weight`` as extra fields.  rocm-smi does not report link bandwidth or how many links
join a pair, so ``bw_GBps`` is a documented per-link default for the XGMI generation (one link per
pair), marked ``bw_estimated: true``:

* CDNA3 (MI300X/MI300A/MI325X): 64 GB/s per direction -- 4th-gen Infinity Fabric, x16 links at
  32 Gb/s per lane = 128 GB/s bidirectional per link, 7 links per MI300X (AMD MI300 launch material,
  e.g. wheelersnetwork.com 2024-01 "AMD Looks to Infinity for AI Interconnects").  Also the default
  when the capture does not name the GPU (an estimate; a warning says so).
* CDNA2 (MI250/MI250X/MI210): 50 GB/s per direction -- AMD's MI250X specification lists Infinity
  Fabric links of 100 GB/s peak bidirectional (estimate from the datasheet).
* CDNA1 (MI100): 46 GB/s per direction -- 3 links, 276 GB/s aggregate peak bidirectional (estimate
  from the datasheet).
"""
from __future__ import annotations

import re
from typing import Optional

from gpucomm.probes.errors import InputError
from gpucomm.probes.model import finalize, gpu_record, link_record, new_document, source_record, warn

# Per-link, per-direction XGMI bandwidth (GB/s) by GPU generation; see the module docstring.
XGMI_LINK_GBPS = {"cdna3": 64.0, "cdna2": 50.0, "cdna1": 46.0}
DEFAULT_XGMI_GEN = "cdna3"

_PRODUCTS = ((r"\bMI3\d\d[AX]?\b|gfx94\d|gfx95\d", "cdna3"), (r"\bMI2[15]0X?\b|gfx90a", "cdna2"),
             (r"\bMI100\b|gfx908", "cdna1"))
# ANSI SGR codes, with or without the ESC byte (pastes often drop it and keep "[0m").
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b|\[[0-9;]*m")
_BANNER = re.compile(r"^\s*={3,}\s*(.*?)\s*={3,}\s*$")
_NUMA = re.compile(r"^\s*GPU\[(\d+)\]\s*:\s*\(Topology\)\s*Numa (Node|Affinity)\s*:\s*(\S+)\s*$", re.I)
_SECTIONS = {
    "weight between two gpus": "weight",
    "hops between two gpus": "hops",
    "link type between two gpus": "type",
    "numa nodes": "numa",
}
_MAX_GPUS = 1024


def _clean(text: str) -> list[str]:
    text = text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    # Web copies turn spaces into U+00A0 and add U+200B/U+FEFF; section titles must still match.
    text = text.replace("\u00a0", " ").replace("\u200b", "").replace("\ufeff", "")
    return [_ANSI.sub("", line) for line in text.split("\n")]


def _product_gen(text: str) -> tuple[Optional[str], Optional[str]]:
    for pat, gen in _PRODUCTS:
        m = re.search(pat, text, re.I)
        if m:
            return gen, m.group(0)
    return None, None


def _parse_matrix(rows: list[tuple[int, str]], kind: str, path: Optional[str], doc: dict) -> dict:
    """Lines of one matrix section -> {(i, j): token}.  Rows whose cell count differs from the
    header are skipped with a warning rather than mis-assigned."""
    header: Optional[list[int]] = None
    cells: dict[tuple[int, int], str] = {}
    for lineno, line in rows:
        toks = line.split()
        if not toks:
            continue
        if header is None:
            if all(re.fullmatch(r"GPU\d+", t) for t in toks):
                header = [int(t[3:]) for t in toks]
                if len(header) > _MAX_GPUS or len(set(header)) != len(header):
                    raise InputError(f"bad {kind} header", path, lineno, expected="distinct GPU columns")
                continue
            raise InputError(f"{kind} section does not start with a GPU header", path, lineno,
                             expected="a line 'GPU0 GPU1 ...'")
        m = re.fullmatch(r"GPU(\d+)", toks[0])
        if not m:
            warn(doc, f"{path or 'rocm-smi'}:{lineno}: unexpected line in the {kind} section ignored")
            continue
        row = int(m.group(1))
        vals = toks[1:]
        if len(vals) != len(header):
            warn(doc, f"{path or 'rocm-smi'}:{lineno}: GPU{row} has {len(vals)} {kind} cells for {len(header)} "
                      "columns; row ignored")
            continue
        for col, v in zip(header, vals):
            cells[(row, col)] = v
    if header is not None and not cells:
        warn(doc, f"{path or 'rocm-smi'}: the {kind} section has a header but no GPU rows")
    return cells


def parse_rocm_text(text: str, path: Optional[str] = None) -> dict:
    """A ``rocm-smi --showtopo`` / ``--showtopotype`` capture -> topology document.

    Raises :class:`InputError` (one line naming file and line) when no topology section is found
    or a section is malformed beyond recovery; recoverable oddities become warnings."""
    if not isinstance(text, str):
        raise InputError("not text", path, expected="rocm-smi --showtopo output")
    lines = _clean(text)
    sections = _split_sections(lines, path)

    doc = new_document(provenance="rocm-smi")
    first = min(rows[0][0] if rows else len(lines) for rows in sections.values()) - 1
    stray = [i for i, line in enumerate(lines[:first], start=1) if re.match(r"^\s*GPU\d+\s+\S", line)]
    if stray:   # a matrix pasted above its own header is not read: say so
        warn(doc, f"{path or 'rocm-smi'}:{stray[0]}: {len(stray)} GPU row(s) before any rocm-smi section header; "
                  "ignored")
    mats = {k: _parse_matrix(sections[k], k, path, doc) for k in ("weight", "hops", "type") if k in sections}
    numa_node, numa_aff = _parse_numa(sections.get("numa", []), path, doc)

    indices = sorted({i for cells in mats.values() for pair in cells for i in pair} | set(numa_node) | set(numa_aff))
    if len(indices) > _MAX_GPUS:
        raise InputError(f"{len(indices)} GPUs", path, expected=f"at most {_MAX_GPUS}")

    gen, product = _product_gen(text)
    if gen is None:
        gen = DEFAULT_XGMI_GEN
        if any(v.upper() == "XGMI" for v in mats.get("type", {}).values()):
            warn(doc, "rocm-smi --showtopo does not name the GPU model: XGMI links assumed to be MI300-class "
                      f"({XGMI_LINK_GBPS[gen]:g} GB/s per link per direction, an estimate)")
    per_link = XGMI_LINK_GBPS[gen]

    for i in indices:
        node = numa_node.get(i, numa_aff.get(i))
        aff = numa_aff.get(i, numa_node.get(i))
        rec = gpu_record(i, vendor="amd", numa_node=node, numa_affinity=[aff] if aff is not None else [],
                         arch=gen if product else None, name=f"AMD Instinct {product.upper()}" if product and product.upper().startswith("MI")
                         else None)
        doc["gpus"].append(rec)
    for n in sorted({v for v in [*numa_node.values(), *numa_aff.values()] if v is not None}):
        doc["numa_nodes"].append({"id": n, "cpus": None, "memory_bytes": None, "distances": None})

    _link_type_matrix(doc, indices, mats)
    _xgmi_links(doc, indices, mats, per_link)
    detail = ", ".join(k for k in ("weight", "hops", "type", "numa") if k in sections)
    doc["sources"].append(source_record("rocm-smi", "ok", f"rocm-smi --showtopo sections: {detail}"))
    return finalize(doc)


def _split_sections(lines: list[str], path: Optional[str]) -> dict[str, list[tuple[int, str]]]:
    """Known ``==== title ====`` sections -> their (line number, line) pairs; InputError when none or one repeats."""
    sections: dict[str, list[tuple[int, str]]] = {}
    current: Optional[str] = None
    for i, line in enumerate(lines, start=1):
        m = _BANNER.match(line)
        if m:
            current = _SECTIONS.get(" ".join(m.group(1).split()).lower())
            if current is not None and current in sections:
                raise InputError(f"section {m.group(1).strip()!r} appears twice", path, i,
                                 expected="one rocm-smi --showtopo output")
            if current is not None:
                sections[current] = []
            continue
        if current is not None:
            sections[current].append((i, line))
    if not sections:
        raise InputError("no rocm-smi topology section found", path,
                         expected="'Weight/Hops/Link Type between two GPUs' or 'Numa Nodes' sections")
    return sections


def _parse_numa(rows: list[tuple[int, str]], path: Optional[str],
                doc: dict) -> tuple[dict[int, Optional[int]], dict[int, Optional[int]]]:
    """Numa Nodes section (``GPU[0] : (Topology) Numa Node: 0`` / ``Numa Affinity: 0``) -> (node, affinity) by GPU."""
    numa_node: dict[int, Optional[int]] = {}
    numa_aff: dict[int, Optional[int]] = {}
    for lineno, line in rows:
        if not line.strip():
            continue
        m = _NUMA.match(line)
        if not m:
            warn(doc, f"{path or 'rocm-smi'}:{lineno}: unrecognised line in the Numa Nodes section ignored")
            continue
        gpu, what, value = int(m.group(1)), m.group(2).lower(), m.group(3)
        if gpu >= _MAX_GPUS:
            raise InputError(f"GPU index {gpu} is out of range", path, lineno, expected=f"< {_MAX_GPUS}")
        try:
            n: Optional[int] = int(value)
        except ValueError:
            n = None  # "N/A"
        if n is not None and n < 0:
            n = None  # -1 = NUMA_NO_NODE
        (numa_node if what == "node" else numa_aff)[gpu] = n
    return numa_node, numa_aff


def _link_type_matrix(doc: dict, indices: list[int], mats: dict) -> None:
    """``doc["matrix"]`` from the Link Type section: X on the diagonal, XGMI or PCIE elsewhere, else N/A."""
    types = mats.get("type", {})
    matrix: dict = {}
    asym = 0
    for a in indices:
        row = {}
        for b in indices:
            if a == b:
                row[f"GPU{b}"] = "X"
                continue
            t = types.get((a, b))
            t = t.upper() if t else None
            if t not in ("XGMI", "PCIE"):
                if t is not None and t != "N/A":
                    warn(doc, f"unknown link type {types.get((a, b))!r} for GPU{a}-GPU{b}; shown as N/A")
                t = "N/A"
            row[f"GPU{b}"] = t
            if types.get((a, b)) != types.get((b, a)):
                asym += 1
        matrix[f"GPU{a}"] = row
    if asym:
        warn(doc, f"rocm-smi link types are asymmetric for {asym // 2 or asym} GPU pair(s); kept as captured")
    if "type" not in mats:
        warn(doc, "capture has no 'Link Type between two GPUs' section: matrix cells are N/A")
    doc["matrix"] = matrix


def _xgmi_links(doc: dict, indices: list[int], mats: dict, per_link: float) -> None:
    """One estimated-bandwidth ``xgmi`` link per XGMI pair one hop apart, with its hops and weight."""
    hops = mats.get("hops", {})
    weights = mats.get("weight", {})
    matrix = doc["matrix"]
    multi_hop = 0
    for ai, a in enumerate(indices):
        for b in indices[ai + 1:]:
            if matrix[f"GPU{a}"][f"GPU{b}"] != "XGMI":
                continue
            h = _num(hops.get((a, b)))
            w = _num(weights.get((a, b)))
            if h is not None and h > 1:
                multi_hop += 1
                continue
            doc["links"].append(link_record(f"GPU{a}", f"GPU{b}", "xgmi", per_link, count=None, hops=h, weight=w,
                                            bw_estimated=True))
    if multi_hop:
        warn(doc, f"{multi_hop} XGMI GPU pair(s) are more than one hop apart: no direct link recorded")


def _num(token: Optional[str]) -> Optional[int]:
    if token is None:
        return None
    try:
        v = int(token)
    except ValueError:
        return None
    return v if 0 <= v < 1_000_000 else None


__all__ = ["parse_rocm_text", "XGMI_LINK_GBPS"]
