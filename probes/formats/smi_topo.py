"""``nvidia-smi topo -m`` captures -> topology document (``provenance: nvidia-smi``).

The matrix is copied exactly as captured (nvidia-smi's meaning): keyed ``GPU<i>`` for GPUs and by the NIC's
real name for NICs (``NIC3`` is translated through the *NIC Legend*; old drivers print the name,
e.g. ``mlx5_0``, directly in the header).  ``SOC`` (drivers before ~384) is read as ``SYS``.

Real captures come in many shapes (see ``fixtures/captures/topo/SOURCES.md``): tabs or spaces or
whitespace collapsed to one space, CRLF or CR-only, ANSI underline escapes with or without the ESC byte,
no legend, the old SOC legend, out-of-order NIC columns, names wider than nvidia-smi's 8-column
tab stops (``mlx5_16   mlx5_17``), one, two or three trailing columns (CPU Affinity / NUMA
Affinity / GPU NUMA ID), glued header titles (``NUMA AffinityGPU NUMA ID``), a garbled NIC Legend
from nvidia-smi's many-NIC bug, hand-reformatted markdown with blank lines between rows.  Text
around the block (a prompt, a fence, the rest of a collect_env report) is ignored; a second
matrix pasted below the first is reported and not read; ``topo -p2p`` output is refused by name.

Because column *offsets* are unreliable in all of these, rows are tokenised by the known cell
vocabulary (``X``, ``NV#``, ``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``, ``SOC``, ``N/A``) and
by whitespace; a cell is assigned to a column only by its ordinal position, and only when that
position is unambiguous.  When a row does not have exactly one cell per column, the cells that
the diagonal ``X`` anchors are kept, the rest become ``N/A`` and a warning names the line:
never a silent guess.

Derived fields (documented so that consumers know how much to trust them):

* ``gpus[].numa_affinity``: the NUMA Affinity cell as a list (``0,3-9,11-17`` is allowed).
* ``gpus[].numa_node``: the GPU NUMA ID when it is a number (Grace-Hopper/Blackwell expose the
  GPU's memory as its own NUMA node); otherwise the NUMA Affinity when it names exactly one node;
  otherwise None.  ``gpus[].gpu_numa_id`` keeps the raw GPU NUMA ID (None for ``N/A``).
* ``nics[].numa_node``: the NUMA node shared with a GPU whose single-node affinity is known and
  whose cell to the NIC is PIX/PXB/PHB/NODE (all four mean "same NUMA node"); None if the GPUs
  disagree or none qualifies.
* ``links``: one ``nvlink`` link per unordered GPU pair whose two cells agree on ``NV#``
  (count #, bw = # x ``nvlink_bw_per_link(sm)``); topo -m cannot tell direct NVLink from
  NVSwitch, so the link is GPU-GPU either way.  Asymmetric pairs (MIG) get no link and a warning.
* ``host.sockets``: the number of distinct GPU NUMA Affinity sets when they are pairwise
  disjoint and each names one node (or there are several), else None.
* ``numa_nodes``: every node mentioned; ``cpus`` from the CPU Affinity of GPUs whose NUMA
  Affinity is that single node (when they agree), else None.

Running nvidia-smi on a host (live or recorded) is :mod:`gpucomm.probes.sources.smi`'s job; this module only parses.
"""
from __future__ import annotations

import os
import re
from typing import Iterable, Optional

from gpucomm.probes import facts
from gpucomm.probes.errors import InputError
from gpucomm.probes.limits import MAX_MATRIX_COLUMNS
from gpucomm.probes.facts import arch_from_name, nvlink_bw_per_link
from gpucomm.probes.model import (canonical_cpulist, gpu_record, link_record, new_document, nic_record,
                                  parse_cpulist, source_record, warn)

SOURCE_NAME = "nvidia-smi"
EXPECTED = "`nvidia-smi topo -m` output: a header line starting with GPU0 followed by one row per device"

# One matrix cell.  NV# is "a bonded set of # NVLinks"; SOC is the pre-384 spelling of SYS.
_CELL = r"X|NV\d{1,4}|PIX|PXB|PHB|NODE|SYS|SOC|N/A"  # NV<5 digits or more> is not a link count
_CELL_RE = re.compile(rf"^(?:{_CELL})$")
_CELL_SCAN = re.compile(_CELL)
# ANSI SGR escapes; collect_env/markdown copies sometimes lose the ESC byte and keep "[4m".
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b|\[[0-9;]*m")
_TRAILING_TITLES = (
    ("cpu", "CPU Affinity", re.compile(r"CPU\s*Affinity", re.I)),
    ("numa", "NUMA Affinity", re.compile(r"NUMA\s*Affinity", re.I)),
    ("gpunuma", "GPU NUMA ID", re.compile(r"GPU\s*NUMA\s*ID", re.I)),
)
_GPU_COL = re.compile(r"^GPU(\d{1,6})$")
_NIC_COL = re.compile(r"^NIC(\d{1,6})$")
_GPU_LIKE = re.compile(r"^GPU[\W_]{0,3}(\d{1,6})$", re.I)
_GLUED_COLS = re.compile(r"^(?:GPU\d+|NIC\d+){2,}$")
_NIC_LEGEND = re.compile(r"^\s*NIC(\d{1,6})\s*:\s*(.*?)\s*$")
_LEGEND_START = re.compile(r"^\s*(?:NIC\s+)?Legend\s*:", re.I)
_LEGEND_ENTRY = re.compile(r"^\s*(?:X|SOC|SYS|NODE|PHB|PXB|PIX|NV#)\s*=")
_PREFACE_NICS = re.compile(r"(\d{1,9})\s+NICs\s+found\s+in\s+the\s+topology,\s*only\s+displaying\s+(\d{1,9})", re.I)
# An RDMA device name: mlx5_0, mlx4_0, rocep49s0, mlx5_bond_0, ibp24s0, bnxt_re0, efa_0 ...
_NIC_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.:\-]{0,63}$")
_INT = re.compile(r"^\d{1,9}$")


# --------------------------------------------------------------------------------------------
# Small helpers
def _clean_line(line: str) -> str:
    """Strip ANSI escapes (with or without ESC), a trailing CR, and markdown table pipes."""
    # U+FEFF (a BOM pasted mid-text) and U+200B (zero-width space from web copies) are invisible
    # and not whitespace to str.split(); they would glue onto a label ("\ufeffGPU0").
    line = _ANSI_RE.sub("", line.replace("\r", "").replace("\ufeff", "").replace("\u200b", ""))
    s = line.strip()
    if s.startswith("|") and s.endswith("|"):
        if re.fullmatch(r"[|:\-\s]+", s):  # markdown separator row
            return ""
        line = line.replace("|", " ")
    return line.rstrip()


def _split_lines(text: str) -> list:
    """Lines of ``text`` for LF, CRLF and CR-only (old Mac / some clipboard tools) line ends;
    ``\r\r\n`` (a CRLF file converted twice) gives an extra blank line, which rows tolerate."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _is_cell(tok: str) -> bool:
    return bool(_CELL_RE.match(tok))


def _split_glued(tok: str) -> Optional[list]:
    """``PIXSYS`` -> [PIX, SYS]; ``SYS0-23`` -> [SYS, 0-23].  None when ``tok`` does not start
    with glued cells or the split point is ambiguous (``NV120-23``: NV12+0-23 or NV120+-23)."""
    parts = []
    pos = 0
    while pos < len(tok):
        m = _CELL_SCAN.match(tok, pos)
        if not m or m.end() == m.start():
            break
        parts.append(m.group(0))
        pos = m.end()
    if len(parts) == 0 or (len(parts) == 1 and pos == len(tok)):
        return None
    rest = tok[pos:]
    if rest:
        # After NV# the digits could run on into the rest (NV120-3: NV12 + 0-3, or NV120 + -3?):
        # only a letter after the digits marks the boundary unambiguously.
        if parts[-1][-1].isdigit() and not rest[0].isalpha():
            return None
        parts.append(rest)
    else:
        for a, b in zip(parts, parts[1:]):
            if a[-1].isdigit() and b[0].isdigit():
                return None
    return parts


def _is_binary(text: str) -> bool:
    sample = text[:65536]
    if "\x00" in sample:
        return True
    ctrl = sum(1 for ch in sample if ord(ch) < 32 and ch not in "\t\n\r\x1b\x0c")
    return ctrl > max(8, len(sample) // 100)


def _row_label_ok(tok: str) -> bool:
    return bool(_GPU_COL.match(tok) or _NIC_COL.match(tok))


def _header_index(lines: list) -> Optional[int]:
    for i, line in enumerate(lines):
        toks = line.split()
        if toks and toks[0] == "GPU0" and (len(toks) == 1 or not (_is_cell(toks[1]) or _split_glued(toks[1]))):
            return i
        if toks and re.match(r"^GPU0(?:GPU\d+|NIC\d+)+$", toks[0]):  # glued header start
            return i
    return None


def _repeat_header(line: str) -> bool:
    """A header line (``GPU0 GPU1 ...``) inside the matrix: a second capture starts there.  Only
    column labels count, so that a damaged ``GPU0`` row is not mistaken for one."""
    toks = line.split()
    return (len(toks) >= 2 and toks[0] == "GPU0" and _row_label_ok(toks[1])) or \
        bool(toks and re.match(r"^GPU0(?:GPU\d+|NIC\d+)+$", toks[0]))


def looks_like(text: str) -> bool:
    """True when ``text`` looks like ``nvidia-smi topo -m`` output (a GPU0 header and a GPU0 row)."""
    if not isinstance(text, str):
        return False
    lines = [_clean_line(l) for l in _split_lines(text[:200_000])]
    h = _header_index(lines)
    if h is None:
        return False
    for line in lines[h + 1:]:
        toks = line.split()
        if len(toks) >= 2 and toks[0] == "GPU0" and (_is_cell(toks[1]) or _split_glued(toks[1])):
            return True
    return False


# --------------------------------------------------------------------------------------------
def _parse_header(line: str, lineno: int, doc: dict, path: Optional[str]) -> tuple[list, list]:
    """Header line -> (device column labels, trailing column keys in order)."""
    matches = []
    for key, title, rx in _TRAILING_TITLES:
        ms = list(rx.finditer(line))
        if ms:
            matches.append((ms[0].start(), ms[0].end(), key, title))
            if len(ms) > 1:
                warn(doc, f"line {lineno}: header repeats {title!r}; the first occurrence is used")
    matches.sort()
    first = matches[0][0] if matches else len(line)
    trailing = [m[2] for m in matches]
    # What lies between/after the titles must be whitespace; "AffinityGPU" is nvidia-smi gluing
    # two titles when a column is wider than its tab stop (capture 86).
    prev_end = None
    for start, end, key, title in matches:
        if prev_end is not None:
            between = line[prev_end:start]
            if between.strip():
                warn(doc, f"line {lineno}: unexpected text {between.strip()!r} between trailing header columns (ignored)")
            elif between == "":
                warn(doc, f"line {lineno}: header titles glued together ({line[matches[0][0]:end].strip()!r}); "
                          "read as separate columns")
        prev_end = end
    if prev_end is not None and line[prev_end:].strip():
        warn(doc, f"line {lineno}: unexpected text {line[prev_end:].strip()!r} after the last header column (ignored)")
        # A column title this parser does not know (a newer driver): the known columns still come
        # first, and each of their values is one token, so rows keep them by position.
        trailing.append("_extra")
    cols: list = []
    for tok in line[:first].split():
        if _GLUED_COLS.match(tok):
            parts = re.findall(r"GPU\d+|NIC\d+", tok)
            warn(doc, f"line {lineno}: header cells glued together ({tok!r}); split into {', '.join(parts)}")
            cols.extend(parts)
        else:
            cols.append(tok)
    return cols, trailing


def _legend(lines: list, start: int) -> tuple[dict, dict, bool]:
    """NIC Legend (index -> (raw value, line number)), and whether the old SOC legend is present."""
    legend: dict = {}
    soc = False
    dup: dict = {}
    for i in range(start, len(lines)):
        line = lines[i]
        if re.match(r"^\s*SOC\s*=", line):
            soc = True
        m = _NIC_LEGEND.match(line)
        if m:
            idx = int(m.group(1))
            if idx in legend:
                dup[idx] = i + 1
                continue
            legend[idx] = (m.group(2), i + 1)
    return legend, dup, soc


def _nic_name_ok(value: str, header_words: set) -> bool:
    """A plausible RDMA device name, not a fragment of the header (nvidia-smi's many-NIC bug
    prints leftovers of the header line as legend values: ``NIC0: A``, ``NIC2: IC59 NIC60 ...``)."""
    if not value or not _NIC_NAME.match(value):
        return False
    if _row_label_ok(value) or value.upper() in ("N/A", "X"):
        return False
    return not any(value in w and value != w for w in header_words) and value not in header_words


def _split_row(tokens: list, ncols: int) -> tuple[list, list, bool]:
    """Row tokens (after the label) -> (cells, rest, glued).  ``cells`` is the leading run of
    vocabulary tokens, except that ``N/A`` beyond the column count belongs to the trailing columns."""
    expanded: list = []
    glued = False
    for t in tokens:
        if _is_cell(t):
            expanded.append(t)
            continue
        parts = _split_glued(t)
        if parts:
            glued = True
            expanded.extend(parts)
        else:
            expanded.append(t)
    run = 0
    while run < len(expanded) and _is_cell(expanded[run]):
        run += 1
    if run >= ncols and all(t == "N/A" for t in expanded[ncols:run]):
        return expanded[:ncols], expanded[ncols:], glued
    return expanded[:run], expanded[run:], glued


def _trailing_values(rest: list, trailing: list, label: str, lineno: int, doc: dict) -> tuple[dict, bool]:
    """Assign trailing tokens to the trailing columns; returns ({key: raw or None}, lost)."""
    if trailing and trailing[-1] == "_extra":
        known = trailing[:-1]
        if len(rest) > len(known) and known:
            warn(doc, f"line {lineno}: {label}: value(s) {' '.join(rest[len(known):])!r} under the unknown header "
                      "column(s) ignored")
            return _trailing_values(rest[:len(known)], known, label, lineno, doc)
        trailing = known
    vals = {k: None for k in trailing}
    if not trailing:
        if rest:
            warn(doc, f"line {lineno}: {label}: extra values {' '.join(rest)!r} after the matrix cells (ignored)")
            return vals, True
        return vals, False
    if len(rest) == len(trailing):
        for k, v in zip(trailing, rest):
            vals[k] = None if v.upper() == "N/A" else v
        return vals, False
    if all(v.upper() == "N/A" for v in rest):
        # WSL and many-NIC captures print only "N/A" (blank CPU/NUMA affinity): nothing to place.
        if not rest:
            warn(doc, f"line {lineno}: {label}: no values for the trailing columns "
                      f"({', '.join(_title(k) for k in trailing)})")
            return vals, True
        return vals, False
    warn(doc, f"line {lineno}: {label}: {len(rest)} value(s) {' '.join(rest)!r} for {len(trailing)} trailing "
              f"column(s) ({', '.join(_title(k) for k in trailing)}); affinities left unknown rather than guessed")
    return vals, True


def _title(key: str) -> str:
    return next(t for k, t, _ in _TRAILING_TITLES if k == key)


# --------------------------------------------------------------------------------------------
def parse_topo_text(text: str, path: Optional[str] = None, gpu_names: Optional[Iterable] = None) -> dict:
    """Parse a ``nvidia-smi topo -m`` capture into a topology document.

    ``gpu_names``: optional GPU marketing names by index (a list, or a dict index -> name); when
    given, ``name``/``arch``/``compute_capability`` are filled and NVLink bandwidth uses the
    architecture's per-link constant (NCCL topo.h ncclTopoNVLinkBw).

    Raises :class:`gpucomm.probes.errors.InputError` (file, line, what was expected) when the text is
    empty, binary or has no ``GPU0`` header.  Damage that leaves part of the matrix readable gives
    a document whose ``sources[0].status`` is ``partial`` and whose ``warnings`` say what was lost.
    """
    lines = _input_lines(text, path)
    doc = new_document(provenance="nvidia-smi")
    h = _find_header(lines, path)
    partial = _preface_notes(lines, h, doc)

    cols, trailing = _parse_header(lines[h], h + 1, doc, path)
    if len(cols) > MAX_MATRIX_COLUMNS:  # before any per-column work: the rows are as wide
        raise InputError(f"{len(cols)} columns, more than the limit of {MAX_MATRIX_COLUMNS} GPUs and NICs", path,
                         line=h + 1, expected="at most one column per GPU and NIC (README: Limits)")
    if not cols or cols[0] != "GPU0":
        raise InputError("header has no GPU0 column", path, line=h + 1, expected=EXPECTED)
    end, (legend, legend_dups, soc_legend), second = _matrix_extent(lines, h, doc)
    partial |= second

    col_keys, label_pos, legend_bad, lost = _column_keys(cols, lines[h], h, legend, doc)
    partial |= lost
    gpu_cols = [int(k[3:]) for k in col_keys if k is not None and _GPU_COL.match(k)]
    nic_cols = [(cols[i], k) for i, k in enumerate(col_keys) if k is not None and not _GPU_COL.match(k)]
    partial |= _legend_warnings(nic_cols, legend, legend_bad, legend_dups, doc)

    _reject_p2p_matrix(lines, h, end, label_pos, path)
    end = _rows_end(lines, h, end, label_pos)
    rows, row_trailing, soc_seen, lost = _read_rows(lines, h, end, label_pos, col_keys, len(cols), trailing, doc)
    partial |= lost
    if not rows:
        raise InputError("header found but no matrix rows follow it", path, line=min(h + 2, len(lines)),
                         expected="rows such as 'GPU0  X  NV12 ...'")
    if soc_seen or soc_legend:
        warn(doc, "old nvidia-smi legend (SOC = across CPU sockets, drivers before ~384): SOC read as SYS")

    partial |= _build_matrix(doc, col_keys, rows)
    _asymmetry(doc, [k for k in col_keys if k is not None])
    partial |= _add_gpus(doc, gpu_cols, row_trailing, gpu_names)

    # ---- NICs ----
    for _label, key in nic_cols:
        n = nic_record(key)
        n["numa_node"] = _nic_numa(doc, key)
        doc["nics"].append(n)

    _nvlinks(doc)
    _numa(doc)

    detail = (f"topo -m capture{' ' + os.path.basename(path) if path else ''}: {len(doc['gpus'])} GPU(s), {len(doc['nics'])} NIC(s)")
    if doc["warnings"]:
        detail += f"; {len(doc['warnings'])} warning(s)"
    doc["sources"].append(source_record(SOURCE_NAME, "partial" if partial else "ok", detail))
    return doc


def _input_lines(text: str, path: Optional[str]) -> list:
    """Cleaned lines of a capture; InputError when it is not text, empty or binary."""
    if not isinstance(text, str):
        raise InputError("not text", path, expected=EXPECTED)
    text = text.lstrip("\ufeff")
    if not text.strip():
        raise InputError("empty input", path, expected=EXPECTED)
    if _is_binary(text):
        bad = next((i for i, ch in enumerate(text) if ord(ch) < 32 and ch not in "\t\n\r\x1b\x0c"), 0)
        raise InputError("binary data", path, line=text.count("\n", 0, bad) + 1, expected=EXPECTED)
    raw_lines = _split_lines(text)
    return [_clean_line(l) for l in raw_lines]


def _find_header(lines: list, path: Optional[str]) -> int:
    """Index of the ``GPU0 GPU1 ...`` header line; InputError naming the first GPU0 row (or text) when there is none."""
    h = _header_index(lines)
    if h is None:
        first_row = next((i for i, l in enumerate(lines) if re.match(r"^\s*GPU0\s", l)), None)
        line_no = first_row + 1 if first_row is not None else next(
            (i + 1 for i, l in enumerate(lines) if l.strip()), 1)
        raise InputError("no header line starting with GPU0", path, line=line_no, expected=EXPECTED)
    return h


def _preface_notes(lines: list, h: int, doc: dict) -> bool:
    """Warn about nvidia-smi's own notes before the header ("122 NICs found ... only displaying 62"); True if any."""
    partial = False
    for i in range(h):
        m = _PREFACE_NICS.search(lines[i])
        if m:
            warn(doc, f"line {i + 1}: nvidia-smi shows only {m.group(2)} of {m.group(1)} NICs in the matrix; "
                      f"the other {int(m.group(1)) - int(m.group(2))} are missing from this capture")
            partial = True
    return partial


def _matrix_extent(lines: list, h: int, doc: dict) -> tuple[int, tuple, bool]:
    """(end of the matrix, :func:`_legend` of the first capture, whether a second matrix follows and is skipped)."""
    # End of the matrix: the legend, or the end of the text.
    end = next((i for i in range(h + 1, len(lines)) if _LEGEND_START.match(lines[i]) or
                _LEGEND_ENTRY.match(lines[i]) or _NIC_LEGEND.match(lines[i]) or
                _repeat_header(lines[i])), len(lines))
    # A second capture pasted below the first (two nodes in one report): only the first is read,
    # and its legend ends where the second header starts.
    h2 = _header_index(lines[end:]) if end < len(lines) else None
    if h2 is not None and looks_like("\n".join(lines[end + h2:end + h2 + 8])):
        warn(doc, f"line {end + h2 + 1}: a second topo -m matrix follows; only the first one (line {h + 1}) is read")
        return end, _legend(lines[:end + h2], end), True
    return end, _legend(lines, end), False


def _column_keys(cols: list, header: str, h: int, legend: dict, doc: dict) -> tuple[list, dict, list, bool]:
    """Header labels -> (matrix key per column or None, label -> position, garbled legend entries, partial)."""
    # Column labels -> matrix keys (NIC# through the legend).  A label or key seen twice makes
    # its column ambiguous: the NIC falls back to its placeholder, or the column is dropped.
    partial = False
    header_words = set(header.split())
    seen: dict = {}          # label -> position
    col_keys: list = []      # per position: matrix key, or None when the column is dropped
    legend_bad: list = []
    for pos, label in enumerate(cols):
        if label in seen:
            warn(doc, f"line {h + 1}: column {label!r} appears twice in the header; its cells are ignored")
            partial = True
            col_keys.append(None)
            continue
        seen[label] = pos
        g, n = _GPU_COL.match(label), _NIC_COL.match(label)
        if not g and not n and _GPU_LIKE.match(label):   # "GPU-1", "gpu1": a GPU, not a NIC named so
            g = _GPU_LIKE.match(label)
            warn(doc, f"line {h + 1}: column {label!r} is not spelled GPU<n>; read as GPU{int(g.group(1))}")
            partial = True
        key = f"GPU{int(g.group(1))}" if g else label
        if n and int(n.group(1)) in legend:
            value, lno = legend[int(n.group(1))]
            if _nic_name_ok(value, header_words):
                key = value
            else:
                legend_bad.append((label, value, lno))
        col_keys.append(key)
    counts: dict = {}
    for k in col_keys:
        if k is not None:
            counts[k] = counts.get(k, 0) + 1
    clash = sorted(k for k, c in counts.items() if c > 1)
    if clash:
        warn(doc, f"line {h + 1}: several columns resolve to {', '.join(clash)}; NIC columns keep their NIC# "
                  "labels and any remaining duplicate column is ignored")
        partial = True
        col_keys = [cols[i] if k in clash and _NIC_COL.match(cols[i]) else k for i, k in enumerate(col_keys)]
        used: set = set()
        for i, k in enumerate(col_keys):
            if k is not None and k in used:
                col_keys[i] = None
            elif k is not None:
                used.add(k)
    return col_keys, dict(seen), legend_bad, partial


def _legend_warnings(nic_cols: list, legend: dict, legend_bad: list, legend_dups: dict, doc: dict) -> bool:
    """Warn about a garbled, repeated, missing or surplus NIC Legend entry; True when a NIC name is lost."""
    partial = False
    if legend_bad:
        shown = ", ".join(f"{lab}: {' '.join(val.split())[:24]!r}" for lab, val, _ in legend_bad[:6])
        more = f" and {len(legend_bad) - 6} more" if len(legend_bad) > 6 else ""
        warn(doc, f"line {legend_bad[0][2]}: NIC Legend garbled ({shown}{more}); "
                  f"{'that column keeps its' if len(legend_bad) == 1 else 'those columns keep their'} "
                  "nvidia-smi placeholder name")
        partial = True
    if legend_dups:
        warn(doc, f"NIC Legend lists {', '.join('NIC%d' % i for i in sorted(legend_dups))} more than once; "
                  "the first entry is used")
    placeholders = [lab for lab, k in nic_cols if _NIC_COL.match(lab) and k == lab]
    missing_legend = [lab for lab in placeholders if int(lab[3:]) not in legend]
    if missing_legend:
        warn(doc, f"no NIC Legend entry for {', '.join(missing_legend)}; "
                  "the NIC keeps nvidia-smi's placeholder name (real device name unknown)")
        partial = True
    used_legend = {int(lab[3:]) for lab, _ in nic_cols if _NIC_COL.match(lab)}
    extra_legend = sorted(set(legend) - used_legend)
    if extra_legend:
        warn(doc, f"NIC Legend names {len(extra_legend)} NIC(s) that have no matrix column "
                  f"({', '.join('NIC%d' % i for i in extra_legend[:8])})")
    return partial


def _rows_end(lines: list, h: int, end: int, label_pos: dict) -> int:
    """End of the matrix rows: the line after the last row, at most ``end``."""
    # Without a legend the matrix runs to the end of the text, which in pasted reports is followed
    # by unrelated text (a closing ``` fence, the rest of a vLLM collect_env report): lines after
    # the last row are not part of the matrix, so they are dropped without a warning (nothing is
    # lost; a row missing from the end is reported by "no row for ..." below).
    last_row = max((i for i in range(h + 1, end) if lines[i].split() and lines[i].split()[0] in label_pos),
                   default=h)
    return min(end, last_row + 1)


def _read_rows(lines: list, h: int, end: int, label_pos: dict, col_keys: list, ncols: int, trailing: list,
               doc: dict) -> tuple[dict, dict, bool, bool]:
    """Matrix rows -> (key -> cells, GPU key -> trailing values, whether SOC was seen, partial)."""
    partial = False
    rows: dict = {}        # matrix key -> list of cells (len ncols) or None entries for unknown
    row_trailing: dict = {}
    soc_seen = False
    glued_lines: list = []
    for i in range(h + 1, end):
        line = lines[i]
        toks = line.split()
        if not toks:
            continue
        label = toks[0]
        if label not in label_pos:
            # A device missing from the header, or a line that is not a row at all.
            if _row_label_ok(label):
                warn(doc, f"line {i + 1}: row {label!r} has no column in the header; ignored")
            else:
                warn(doc, f"line {i + 1}: unrecognised line {line.strip()[:40]!r} inside the matrix; ignored")
            partial = True
            continue
        pos = label_pos[label]
        key = col_keys[pos]
        if key is None:
            continue
        if key in rows:
            warn(doc, f"line {i + 1}: second row for {label}; ignored")
            partial = True
            continue
        is_gpu = bool(_GPU_COL.match(key))
        cells, rest, glued = _split_row(toks[1:], ncols)
        if glued:
            glued_lines.append(i + 1)
        if any(c == "SOC" for c in cells):
            soc_seen = True
        cells = ["SYS" if c == "SOC" else c for c in cells]
        known = _anchor_cells(cells, ncols, pos, label, i + 1, doc, is_gpu and bool(trailing) and not rest)
        if known is None:
            partial = True
            known = [None] * ncols
        elif any(c is None for c in known):
            partial = True
        rows[key] = known
        if is_gpu:
            vals, lost = _trailing_values(rest, trailing, label, i + 1, doc)
            partial |= lost
            row_trailing[key] = vals
        elif rest:
            extra = [t for t in rest if t.upper() != "N/A"]
            if extra:
                warn(doc, f"line {i + 1}: {label}: extra values {' '.join(extra)!r} after the matrix cells (ignored)")
    if glued_lines:
        warn(doc, f"line(s) {', '.join(map(str, glued_lines[:8]))}: cells glued together (no space between them); "
                  "split by the cell vocabulary")
    return rows, row_trailing, soc_seen, partial


def _build_matrix(doc: dict, col_keys: list, rows: dict) -> bool:
    """``doc["matrix"]`` exactly as captured, unknown cells N/A so that it stays square; True if a row is missing."""
    partial = False
    matrix: dict = {}
    missing_rows = []
    for pos_r, kr in enumerate(col_keys):
        if kr is None:
            continue
        cells = rows.get(kr)
        if cells is None:
            missing_rows.append(kr)
        row = {}
        for pos_c, kc in enumerate(col_keys):
            if kc is None:
                continue
            if kc == kr:
                row[kc] = "X"
            elif cells is None or cells[pos_c] is None:
                row[kc] = "N/A"
            else:
                row[kc] = cells[pos_c]
        matrix[kr] = row
    if missing_rows:
        warn(doc, f"no row for {', '.join(missing_rows[:8])}{' ...' if len(missing_rows) > 8 else ''} "
                  "(truncated capture?); its cells are unknown (N/A)")
        partial = True
    doc["matrix"] = matrix
    return partial


def _add_gpus(doc: dict, gpu_cols: list, row_trailing: dict, gpu_names: Optional[Iterable]) -> bool:
    """One GPU record per GPU column, with affinities from its trailing values; True when a value was unreadable."""
    partial = False
    names = _names_by_index(gpu_names)
    for idx in sorted(set(gpu_cols)):
        key = f"GPU{idx}"
        g = gpu_record(idx)
        partial |= _gpu_affinities(g, key, row_trailing.get(key, {}), doc)
        if g["gpu_numa_id"] is not None:
            g["numa_node"] = g["gpu_numa_id"]
        elif len(g["numa_affinity"]) == 1:
            g["numa_node"] = g["numa_affinity"][0]
        name = names.get(idx)
        if name:
            arch, sm = arch_from_name(name)
            g["name"], g["arch"] = name, arch
            g["compute_capability"] = f"{sm // 10}.{sm % 10}" if sm else None
        doc["gpus"].append(g)
    return partial


def _gpu_affinities(g: dict, key: str, vals: dict, doc: dict) -> bool:
    """Fill CPU Affinity, NUMA Affinity and GPU NUMA ID of GPU record ``g``; True when one is unreadable."""
    partial = False
    cpu = vals.get("cpu")
    if cpu is not None:
        try:
            g["cpu_affinity"] = canonical_cpulist(cpu)
        except ValueError:
            warn(doc, f"{key}: CPU Affinity {cpu!r} is not a cpulist; left unknown")
            partial = True
    numa = vals.get("numa")
    if numa is not None:
        try:
            g["numa_affinity"] = parse_cpulist(numa)
        except ValueError:
            warn(doc, f"{key}: NUMA Affinity {numa!r} is not a node list; left unknown")
            partial = True
    gnuma = vals.get("gpunuma")
    g["gpu_numa_id"] = None
    if gnuma is not None:
        if _INT.match(gnuma):
            g["gpu_numa_id"] = int(gnuma)
        else:
            warn(doc, f"{key}: GPU NUMA ID {gnuma!r} is not a number; left unknown")
            partial = True
    return partial


_P2P_CODES = {"OK", "CNS", "GNS", "TNS", "NS", "U"}


def _reject_p2p_matrix(lines: list, h: int, end: int, label_pos: dict, path: Optional[str]) -> None:
    """``nvidia-smi topo -p2p r|w|n|a|p`` prints the same GPU grid with P2P capability codes
    (OK, CNS, GNS, TNS, NS, U) instead of path types; reading it as ``topo -m`` would give a matrix
    of N/A, so it is refused with a message that names the command."""
    first = None
    codes = other = 0
    for i in range(h + 1, end):
        toks = lines[i].split()
        if not toks or toks[0] not in label_pos:
            continue
        first = first if first is not None else i + 1
        codes += sum(1 for t in toks[1:] if t in _P2P_CODES)
        other += sum(1 for t in toks[1:] if _is_cell(t) and t not in ("X", "N/A"))
    if codes and not other:
        raise InputError("this is `nvidia-smi topo -p2p` output (P2P status codes OK/CNS/GNS/TNS/NS/U)", path,
                         line=first,
                         expected="`nvidia-smi topo -m` output (path types X, NV#, PIX, PXB, PHB, NODE, SYS)")


def _anchor_cells(cells: list, ncols: int, pos: int, label: str, lineno: int, doc: dict,
                  tail_ambiguous: bool) -> Optional[list]:
    """Cells of one row placed by position, or None entries where the position is ambiguous.

    A row with exactly one cell per column and its ``X`` on the diagonal is taken as is.
    Otherwise the ``X`` anchors what precedes it (a missing or extra cell before the X would
    have moved it) and the part after it is kept only if its length fits."""
    x_positions = [i for i, c in enumerate(cells) if c == "X"]
    if len(cells) == ncols and x_positions == [pos] and not tail_ambiguous:
        return list(cells)
    if tail_ambiguous and len(cells) == ncols and x_positions == [pos] and cells[-1] == "N/A":
        # "... SYS N/A" with no other trailing value: the N/A is either the last cell (and the
        # trailing columns are missing) or the GPU NUMA ID (and a cell after the X is missing).
        out = list(cells[:pos + 1]) + [None] * (ncols - pos - 1)
        warn(doc, f"line {lineno}: {label}: cannot tell whether the final N/A is a cell or a trailing value; "
                  "the cells after its X are left unknown (N/A)")
        return out
    out: list = [None] * ncols
    if x_positions and x_positions[0] == pos:
        out[:pos + 1] = cells[:pos + 1]
        tail = cells[pos + 1:]
        if len(tail) == ncols - pos - 1:
            out[pos + 1:] = tail
        kept = sum(1 for c in out if c is not None)
        warn(doc, f"line {lineno}: {label} has {len(cells)} cell(s) for {ncols} column(s); "
                  f"kept the {kept} cell(s) anchored by its X, the rest are unknown (N/A)")
        return out
    warn(doc, f"line {lineno}: {label} has {len(cells)} cell(s) for {ncols} column(s) and no X in its own column; "
              "its cells are unknown (N/A) rather than guessed")
    return None


def _names_by_index(gpu_names) -> dict:
    if not gpu_names:
        return {}
    if isinstance(gpu_names, dict):
        return {int(k): v for k, v in gpu_names.items() if v}
    return {i: v for i, v in enumerate(gpu_names) if v}


def _asymmetry(doc: dict, keys: list) -> None:
    """Warn about cells whose mirror differs (MIG-enabled GPUs report SYS to everyone while their
    peers still report NV#).  The matrix keeps both sides as captured ."""
    m = doc["matrix"]
    pairs = []
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            x, y = m[a][b], m[b][a]
            if x != y and "N/A" not in (x, y):
                pairs.append((a, b, x, y))
    if not pairs:
        return
    shown = ", ".join(f"{a}->{b} {x} but {b}->{a} {y}" for a, b, x, y in pairs[:6])
    more = f" and {len(pairs) - 6} more" if len(pairs) > 6 else ""
    # A GPU whose own row has no NVLink while peers list NVLinks to it: typical of MIG mode.
    suspects = sorted({b if x.startswith("NV") else a for a, b, x, y in pairs
                       if x.startswith("NV") != y.startswith("NV")}, key=lambda k: (len(k), k))
    hint = f"; {', '.join(suspects)} likely in MIG mode (no NVLink P2P)" if suspects else ""
    warn(doc, f"matrix is not symmetric: {shown}{more}{hint}; kept as captured, "
              "and no NVLink link is recorded for a pair whose two cells disagree")


def _nic_numa(doc: dict, nic: str) -> Optional[int]:
    nodes = set()
    for g in doc["gpus"]:
        if len(g["numa_affinity"]) != 1:
            continue
        cell = doc["matrix"].get(f"GPU{g['index']}", {}).get(nic)
        if cell in ("PIX", "PXB", "PHB", "NODE"):
            nodes.add(g["numa_affinity"][0])
    return nodes.pop() if len(nodes) == 1 else None


def _nvlinks(doc: dict) -> None:
    m = doc["matrix"]
    by_idx = {g["index"]: g for g in doc["gpus"]}
    idxs = sorted(by_idx)
    one_sided: list = []
    for i, a in enumerate(idxs):
        for b in idxs[i + 1:]:
            ka, kb = f"GPU{a}", f"GPU{b}"
            x, y = m.get(ka, {}).get(kb), m.get(kb, {}).get(ka)
            mx = re.match(r"^NV(\d{1,4})$", x or "")
            my = re.match(r"^NV(\d{1,4})$", y or "")
            if not (mx or my):
                continue
            if x != y:
                # Disagreeing cells are already reported by _asymmetry; a pair with one side
                # unknown (damaged row) is reported here.  Either way no link is guessed.
                if "N/A" in (x, y):
                    one_sided.append(f"{ka}-{kb}")
                continue
            count = int(mx.group(1))
            if count == 0:
                continue
            sm_a = facts.compute_capability(by_idx[a].get("compute_capability"))
            sm = sm_a if sm_a == facts.compute_capability(by_idx[b].get("compute_capability")) else None
            doc["links"].append(link_record(ka, kb, "nvlink", nvlink_bw_per_link(sm) * count, count=count))
    if one_sided:
        warn(doc, f"NVLink known from one side only ({', '.join(one_sided[:8])}); no link recorded for "
                  f"{'it' if len(one_sided) == 1 else 'them'}")


def _numa(doc: dict) -> None:
    gpus = doc["gpus"]
    nodes: set = set()
    cpus_by_node: dict = {}
    for g in gpus:
        nodes.update(g["numa_affinity"])
        if g.get("gpu_numa_id") is not None:
            nodes.add(g["gpu_numa_id"])
        if len(g["numa_affinity"]) == 1 and g["cpu_affinity"]:
            cpus_by_node.setdefault(g["numa_affinity"][0], set()).add(g["cpu_affinity"])
    for n in sorted(nodes):
        cpus = cpus_by_node.get(n)
        doc["numa_nodes"].append({"id": n, "cpus": next(iter(cpus)) if cpus and len(cpus) == 1 else None,
                                  "memory_bytes": None, "distances": None})
    sets = {tuple(g["numa_affinity"]) for g in gpus if g["numa_affinity"]}
    if sets and all(g["numa_affinity"] for g in gpus):
        flat = [n for s in sets for n in s]
        disjoint = len(flat) == len(set(flat))
        if disjoint and (len(sets) > 1 or all(len(s) == 1 for s in sets)):
            doc["host"]["sockets"] = len(sets)


__all__ = ["parse_topo_text", "looks_like"]
