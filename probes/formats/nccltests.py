"""Parser for the result tables printed by NVIDIA nccl-tests and ROCm rccl-tests.

What a run prints (nccl-tests ``src/common.cu``; see nccl-tests doc/PERFORMANCE.md and
``reference/placement/nccl-tests-bw.md``)::

    # nccl-tests version 2.17.8 nccl-headers=22902 nccl-library=22902      (2.14+, optional)
    # Collective test starting: all_reduce_perf                             (recent versions)
    # nThread 1 nGpus 1 minBytes 4 maxBytes 1073741824 step: 2(factor) warmup iters: 5 ...
    # Using devices
    #  Rank  0 Group  0 Pid  36291 on x3006c0s1b1n0 device  0 [0x07] NVIDIA A100-SXM4-40GB
    #                                          out-of-place                       in-place
    #       size         count      type   redop    root     time   algbw   busbw #wrong     time ...
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us) ...
               4             1     float     sum      -1    48.77    0.00    0.00      0    44.82 ...
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 2.96746

Variants handled: no ``root`` column and a float ``error`` column instead of ``#wrong`` (older
nccl-tests and rccl-tests), ``N/A`` cells (in-place columns of tests that have none), a row whose
``count`` cell was lost (seen in a pasted issue: the row is recovered and the count recomputed from
the size and the data type), interleaved ``NCCL INFO``/MPI lines, CRLF, headers missing entirely
(the modern column layout is assumed, with a warning), nccl-tests 1.x headers (``bytes N type op
... res``), a header that lost its ``#``, launcher labels (``srun --label``, ``mpirun
--tag-output``), rccl-tests' version line.

A log with several runs (one per collective, or repeated runs) is cut at each run's
``# nccl-tests version`` / ``# Collective test starting`` / ``# nThread`` line:
:func:`split_nccltests` returns every run, :func:`parse_nccltests` the first (or the one of the
requested collective) with a warning naming the others.

The collective comes from ``# Collective test starting: <name>_perf`` when printed, else from the
caller, else it is inferred from the ratio busbw/algbw (nccl-tests' factors: 2(n-1)/n all_reduce,
(n-1)/n all_gather/reduce_scatter/alltoall, 1 broadcast/reduce/sendrecv) and the redop/root
columns; ``collective`` stays None when that is ambiguous (all_gather vs alltoall, gather vs
scatter, or a ratio the 2-decimal printing cannot place).
"""
from __future__ import annotations

import math
import re
from typing import Optional

from gpucomm.probes.errors import InputError
from gpucomm.probes.formats.scan import HostPrefixed
from gpucomm.probes.limits import MAX_HOST_GPUS, MAX_NODES
from gpucomm.probes.units import busbw_factor

SCHEMA = "gpucomm.nccltests/v1"

# Bytes per element for the type names nccl-tests (src/common.cu test_typenames) and rccl-tests print.
TYPE_SIZES = {
    "int8": 1, "uint8": 1, "char": 1, "f8e4m3": 1, "f8e5m2": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
    "half": 2, "float16": 2, "fp16": 2, "bfloat16": 2, "bf16": 2,
    "int32": 4, "uint32": 4, "int": 4, "float": 4, "float32": 4, "fp32": 4,
    "int64": 8, "uint64": 8, "double": 8, "float64": 8, "fp64": 8,
}

# Reduction operations nccl-tests prints (src/common.cu test_opnames; "none" for collectives
# without one; rccl-tests the same).
REDOPS = {"sum", "prod", "max", "min", "avg", "mulsum", "premulsum", "none"}

# nccl-tests binary names (without ``_perf``) -> gpucomm collective names.
COLLECTIVE_NAMES = {
    "all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce", "alltoall": "all_to_all", "all_to_all": "all_to_all",
    "sendrecv": "send_recv", "send_recv": "send_recv", "gather": "gather", "scatter": "scatter",
    "hypercube": "hypercube",
}

# The modern header (nccl-tests >= 2.10 / rccl-tests): used when a pasted table lost its header.
DEFAULT_COLUMNS = ["size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                   "time", "algbw", "busbw", "#wrong"]

_DEVICE_RE = re.compile(
    r"^#\s*Rank\s+(?P<rank>\d+)(?:\s+Group\s+(?P<group>\d+))?\s+Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)"
    r"\s+device\s+(?P<device>\d+)\s+\[(?P<bus>[^\]]*)\]\s*(?P<name>.*?)\s*$")
_STARTING_RE = re.compile(r"^#\s*Collective test starting:\s*(?P<name>[A-Za-z0-9_]+)")
_VERSION_RE = re.compile(r"^#\s*[nr]ccl-tests version\s+(?P<v>\S+)(?P<rest>.*)$", re.I)
_AVG_RE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<v>\S+)")
_OOB_RE = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<v>\d+)")
# (a key is at most 40 characters: a long run of words is crossed in linear time)
_PARAM_RE = re.compile(r"(?P<k>[A-Za-z][A-Za-z ]{0,40}?)\s*:?\s+(?P<v>-?\d+(?:\.\d+)?)(?:\((?P<unit>[a-z]+)\))?")
_INT_RE = re.compile(r"^-?\d+$")
# Launcher output labels: ``srun --label`` ("0: ", " 12: "), Open MPI ``--tag-output``
# ("[1,0]<stdout>:"), Intel MPI / MPICH ``-prepend-rank`` ("[0] "), pdsh/clush host prefixes
# ("node01: ").  Only stripped when an nccl-tests line follows (a ``#`` line or a result row).
_LABEL_RE = re.compile(r"^\s*(?:\d+:\s|\[\d+,\d+\]<std(?:out|err)>:\s?|\[\d+\]\s|[A-Za-z][\w.-]*:\s)"
                       r"(?=\s*(?:#|\d+\s+\d))")
# Open MPI's --tag-output tags every write, so a row printed in several writes carries the tag in
# the middle too (before the time columns): removed wherever it is.
_MPI_TAG_RE = re.compile(r"\[\d+,\d+\]<std(?:out|err)>:")
# An NCCL debug line (``host:pid:tid [dev] NCCL INFO ...``, src/debug.cc), possibly glued to the end of
# a result row another thread was printing (the row continues on a later line).
_NCCL_LOG_RE = HostPrefixed(r"[A-Za-z]", r"[\w.-]", r":\d+:\d+ \[\d+\] NCCL (?:INFO|WARN|TRACE|ABORT)\b")
_NUM_RE = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")
# NCCL's banner in its INFO lines (init.cc: "NCCL version 2.23.4+cuda12.6")
_NCCL_VERSION_RE = re.compile(r"NCCL INFO NCCL version (\d+)\.(\d+)\.(\d+)")


def library_code(run: dict) -> Optional[int]:
    """The NCCL_VERSION_CODE a parsed run says it ran with (``nccl_library``), or None."""
    v = str(run.get("nccl_library") or "")
    return int(v) if v.isdigit() and 2000 <= int(v) < 100000 else None


def version_text(code: int) -> str:
    """The version an NCCL_VERSION_CODE stands for (:func:`nccl_version_code` inverted).

    >>> version_text(22304), version_text(2804)
    ('2.23.4', '2.8.4')
    """
    major, rest = (code // 10000, code % 10000) if code >= 20900 else (code // 1000, code % 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def nccl_version_code(major: int, minor: int, patch: int) -> int:
    """NCCL_VERSION_CODE of a version (nccl.h: X*10000 + Y*100 + Z from 2.9 on, X*1000 + Y*100 + Z
    before), the number nccl-tests prints as ``nccl-library=``.

    >>> nccl_version_code(2, 23, 4), nccl_version_code(2, 8, 4)
    (22304, 2804)
    """
    return major * 10000 + minor * 100 + patch if (major, minor) >= (2, 9) else major * 1000 + minor * 100 + patch

# NCCL lines kept per run for the transport they show (nccllog.net_summary): NET/..., Using network, version
MAX_NCCL_NET_LINES = 2000
_NCCL_NET_HINT = re.compile(r"NCCL INFO (?:NET/|Using network|NCCL version|Channel \d+/\d+ : .* via NET/)")


def nccl_net(run: dict) -> Optional[dict]:
    """The inter-node transport the NCCL INFO lines of a parsed run show
    (:func:`gpucomm.probes.formats.nccllog.net_summary`), or None when it has none."""
    return run.get("nccl_net")


def _net_of_lines(lines: list, path: str) -> Optional[dict]:
    if not lines:
        return None
    from gpucomm.probes.formats.nccllog import parse_nccl_log

    try:
        return parse_nccl_log("\n".join(lines), path).get("net")
    except InputError:
        return None

# Ceiling on what a row may claim before it is called absurd (2**50 B = 1 PiB; 1e6 GB/s).
_MAX_SIZE = 1 << 50
_MAX_BW = 1e6


def _num(tok: str) -> Optional[float]:
    """A finite float, None for ``N/A``/``-``; raises ValueError on anything else."""
    if tok in ("N/A", "n/a", "-", "NA"):
        return None
    if not _NUM_RE.match(tok):
        raise ValueError(tok)
    v = float(tok)
    if not math.isfinite(v):
        raise ValueError(tok)
    return v


# nccl-tests 1.x (2016-2017, src/common.cu print_header) named the columns "bytes N type op
# [root] time algbw busbw res"; the res (max relative error) column is a float like the later "error".
_HEADER_SYNONYMS = {"bytes": "size", "n": "count", "op": "redop", "res": "error", "delta": "error"}


def _clean(raw: str) -> str:
    """NUL bytes, zero-width characters and BOMs dropped; NBSP (web copies) made a plain space."""
    return raw.replace("\x00", "").replace("\u200b", "").replace("\ufeff", "").replace("\u00a0", " ")


def _unlabel(line: str) -> str:
    """A line without its launcher label (and without Open MPI tags anywhere in it), stripped."""
    line = _LABEL_RE.sub("", line)
    if "]<std" in line:
        line = _MPI_TAG_RE.sub("", line)
    return line.strip()


def _header_columns(line: str) -> Optional[list[str]]:
    """Column names from a ``#  size  count  type ...`` header line, or None."""
    toks = line.lstrip("#").split()
    low = [_HEADER_SYNONYMS.get(t.lower(), t.lower()) for t in toks]
    if len(low) >= 4 and low[0] == "size" and "time" in low and "algbw" in low:
        return low
    return None


def _parse_params(line: str) -> dict:
    """``# nThread 1 nGpus 1 minBytes 4 maxBytes 1073741824 step: 2(factor) warmup iters: 5 ...``"""
    out: dict = {}
    body = line.lstrip("#").strip()
    for m in _PARAM_RE.finditer(body):
        key = "_".join(m.group("k").split())
        try:
            val: object = int(m.group("v"))
        except ValueError:
            val = float(m.group("v"))
        out[key] = val
        if m.group("unit"):
            out[key + "_unit"] = m.group("unit")
    return out


def _row_values(cols: list[str], toks: list[str]) -> dict:
    """Map row tokens onto header columns.  Raises ValueError (with a reason) when they do not fit."""
    # A row whose count cell was lost: one token short and the second token is a type name.
    if len(toks) == len(cols) - 1 and "count" in cols and len(toks) > 1 and not _INT_RE.match(toks[1]):
        i = cols.index("count")
        toks = toks[:i] + [None] + toks[i:]  # type: ignore[list-item]
    if len(toks) != len(cols):
        raise ValueError(f"{len(toks)} cells where the header has {len(cols)}")
    lead: dict = {}
    sets: list[dict] = []
    cur: Optional[dict] = None
    for name, tok in zip(cols, toks):
        if name in ("size", "count", "root"):
            if tok is None:
                lead[name] = None
                continue
            if not _INT_RE.match(tok):
                raise ValueError(f"{name} {tok!r} is not an integer")
            lead[name] = int(tok)
        elif name in ("type", "redop"):
            lead[name] = tok
        elif name == "time":
            cur = {"time_us": _num(tok), "algbw_GBps": None, "busbw_GBps": None, "wrong": None}
            sets.append(cur)
        elif name in ("algbw", "busbw"):
            if cur is None:
                raise ValueError(f"{name} before time")
            cur[f"{name}_GBps"] = _num(tok)
        elif name in ("#wrong", "wrong", "error", "#error", "errors"):
            if cur is None:
                raise ValueError(f"{name} before time")
            v = _num(tok)
            cur["wrong"] = (int(v) if v is not None and float(v).is_integer() and "e" not in tok.lower() else v)
        else:  # unknown extra column (future versions): keep it verbatim
            lead.setdefault("extra", {})[name] = tok
    lead["sets"] = sets
    return lead


def _split_blocks(lines: list[tuple[int, str]]) -> list[list[tuple[int, str]]]:
    """Cut a log into one block per test run.  A run starts at ``# nccl-tests version``,
    ``# Collective test starting:`` or ``# nThread`` -- but only once the current block already has
    result rows, so that the version/starting/nThread lines of one run stay together.  Logs that
    concatenate several binaries (``all_reduce_perf; all_gather_perf``), gpucomm's own ``bench``
    table and nccl-tests' multi-collective runs all look like this."""
    blocks: list[list[tuple[int, str]]] = [[]]
    has_rows = False
    for lineno, raw in lines:
        line = _unlabel(_clean(raw))
        m = _NCCL_LOG_RE.search(line)
        if m:
            line = line[:m.start()].strip()
        if has_rows and (_STARTING_RE.match(line) or _VERSION_RE.match(line) or re.match(r"^#\s*nThread\b", line)):
            blocks.append([])
            has_rows = False
        blocks[-1].append((lineno, raw))
        toks = line.split()
        if toks and _INT_RE.match(toks[0]):
            has_rows = True
    return blocks


def split_nccltests(text: str, path: str = "<nccl-tests output>", collective: Optional[str] = None) -> list[dict]:
    """Every test run in ``text`` (one ``gpucomm.nccltests/v1`` dict each, in file order).

    Raises InputError when no run has result rows."""
    if not isinstance(text, str):
        raise InputError("not text", path)
    runs = [r for r in (_parse_block(b, path, collective) for b in _split_blocks(list(enumerate(text.splitlines(), 1))))
            if r is not None]
    if not runs:
        raise InputError("no nccl-tests result rows found", path,
                         expected="nccl-tests/rccl-tests output with '#  size  count  type ...' and result rows")
    bench = _BENCH_HEADER_RE.search(text[:4096])
    if bench:
        # gpucomm bench's own table names its ranks and nodes once, for every run it holds
        for r in runs:
            if r["n_ranks_source"] != "devices":
                r["n_ranks"], r["n_ranks_source"] = int(bench.group("ranks")), "gpucomm bench header"
            if r["nodes"] is None:
                r["nodes"] = int(bench.group("nodes"))
    return runs


# gpucomm_cli/render/bench.py render_collective_table's first line
_BENCH_HEADER_RE = re.compile(r"^#\s*gpucomm bench collective: backend \S+, (?P<ranks>\d{1,7}) rank\(s\) on "
                              r"(?P<nodes>\d{1,7}) node\(s\)", re.M)


def parse_nccltests(text: str, path: str = "<nccl-tests output>", collective: Optional[str] = None) -> dict:
    """Parse one nccl-tests/rccl-tests output.  Returns a ``gpucomm.nccltests/v1`` dict.

    A log with several runs (several collectives, or the same one twice) gives the first run --
    or, with ``collective``, the first run of that collective -- and a warning that names the
    others; :func:`split_nccltests` returns them all.  Raises InputError when no result row can be
    found; rows that cannot be read become warnings."""
    runs = split_nccltests(text, path, collective)
    if len(runs) == 1:
        return runs[0]
    chosen = runs[0]
    if collective:
        # every run carries the requested name now; pick the first whose own header agrees
        match = [r for r in runs if r["test_name"] and COLLECTIVE_NAMES.get(r["test_name"]) == r["collective"]]
        chosen = match[0] if match else chosen
    others = [_run_label(r) for r in runs if r is not chosen]
    chosen["warnings"].append(f"{path}: the log holds {len(runs)} test runs; this result is {_run_label(chosen)}, "
                              f"not {', '.join(others)} (split_nccltests returns each run)")
    return chosen


def _run_label(run: dict) -> str:
    return f"{run['test_name'] or run['collective'] or 'unnamed'} (line {run['rows'][0]['line']})"


class _Block:
    """Accumulators while reading one test run."""

    def __init__(self, path: str):
        self.path = path
        self.warnings: list[str] = []
        self.devices: list[dict] = []
        self.params: dict = {}
        self.version: Optional[str] = None
        self.library: Optional[str] = None
        self.starting: Optional[str] = None
        self.avg: Optional[float] = None
        self.oob: Optional[int] = None
        self.cols: Optional[list[str]] = None
        self.rows: list[dict] = []
        self.assumed_header = False
        # what was not part of the table (reported by :func:`ignored_summary`)
        self.labels = 0               # lines whose launcher label was stripped
        self.nccl_log = 0             # NCCL debug lines
        self.nccl_lines: list[str] = []   # the NCCL lines that tell the transport and version (net_summary)
        self.other = 0                # anything else (launcher chatter, prompts, counters)
        self.other_examples: list[str] = []
        self.pending: Optional[tuple[int, list[str]]] = None   # a row cut by a glued NCCL log line


def _parse_block(lines: list[tuple[int, str]], path: str, collective: Optional[str]) -> Optional[dict]:
    """One test run -> result dict, or None when the block has no result rows."""
    b = _Block(path)
    for lineno, raw in lines:
        # NBSP from web copies would glue device names; launcher labels hide the '#'.
        cleaned = _clean(raw)
        line = _unlabel(cleaned)
        if len(line) != len(cleaned.strip()):
            b.labels += 1
        if not line:
            continue
        glued = _NCCL_LOG_RE.search(line)
        if glued:
            b.nccl_log += 1
            msg = line[glued.start():]
            if len(b.nccl_lines) < MAX_NCCL_NET_LINES and _NCCL_NET_HINT.search(msg):
                b.nccl_lines.append(msg)
            ver = _NCCL_VERSION_RE.search(line, glued.start())
            if ver and b.library is None:
                b.library = str(nccl_version_code(*(int(x) for x in ver.groups())))
            head = line[:glued.start()].strip()
            if head and _INT_RE.match(head.split()[0]) and not head.startswith("#"):
                # a result row another thread's NCCL log line cut: keep its cells for the rest
                b.pending = (lineno, head.split())
            continue
        if line.startswith("#"):
            _comment_line(b, line, lineno)
            continue
        toks = line.split()
        if not _INT_RE.match(toks[0]) and not (b.pending and _NUM_RE.match(toks[0])):
            hc = _header_columns(line) if toks[0].lower() in ("size", "bytes") else None
            if hc is not None:  # a header whose '#' was lost in a copy
                _new_table(b, lineno)
                b.cols = hc
            else:               # MPI chatter, prompts, launcher output
                b.other += 1
                if len(b.other_examples) < 3:
                    b.other_examples.append(f"line {lineno}: {line[:60]}")
            continue
        if b.cols is None:
            b.cols = list(DEFAULT_COLUMNS)
            b.assumed_header = True
        if b.pending is not None:
            start, head = b.pending
            if len(head) + len(toks) == len(b.cols) or (len(head) + len(toks) == len(b.cols) - 1 and "count" in b.cols):
                b.pending = None
                b.warnings.append(f"{path}:{start}: a result row was cut by an NCCL log line; re-joined with line {lineno}")
                toks, lineno = head + toks, start
            elif len(toks) < len(b.cols) - 1:
                b.pending = (start, head + toks)   # the rest may still follow
                continue
        row = _result_row(b, b.cols, toks, lineno)
        if row is not None:
            b.rows.append(row)
    if b.pending is not None:
        b.warnings.append(f"{path}:{b.pending[0]}: a result row was cut by an NCCL log line and never completed; skipped")
    if not b.rows:
        return None
    if b.assumed_header:
        b.warnings.append(f"{path}: no column header found; assumed the nccl-tests >= 2.10 layout")
    return _run_result(b, collective)


def ignored_summary(run: dict) -> Optional[str]:
    """One sentence on what a parsed run's lines held besides the table (NCCL log lines, launcher
    labels, other text), or None when nothing was ignored."""
    ig = run.get("ignored") or {}
    parts = []
    if ig.get("nccl_log_lines"):
        parts.append(f"{ig['nccl_log_lines']} NCCL debug line(s)")
    if ig.get("other_lines"):
        ex = "; ".join(ig.get("other_examples") or [])
        parts.append(f"{ig['other_lines']} other line(s)" + (f" (e.g. {ex})" if ex else ""))
    labels = f"launcher labels stripped from {ig['labelled_lines']} line(s)" if ig.get("labelled_lines") else ""
    if not parts and not labels:
        return None
    text = "ignored " + ", ".join(parts) if parts else ""
    return "; ".join(x for x in (text, labels) if x)


def _comment_line(b: _Block, line: str, lineno: int) -> None:
    """A ``#`` line (nccl-tests src/common.cu): device list, test name, version, averages, parameters or header."""
    path = b.path
    m = _DEVICE_RE.match(line)
    if m:
        b.devices.append({
            "rank": int(m.group("rank")),
            "group": int(m.group("group")) if m.group("group") is not None else None,
            "pid": int(m.group("pid")), "host": m.group("host"), "device": int(m.group("device")),
            "bus_id": m.group("bus"), "name": m.group("name") or None,
        })
        return
    m = _STARTING_RE.match(line)
    if m:
        b.starting = m.group("name")
        return
    m = _VERSION_RE.match(line)
    if m:
        b.version = m.group("v")
        lib = re.search(r"[nr]ccl-library=(\S+)", m.group("rest"))
        b.library = lib.group(1) if lib else b.library
        return
    m = _AVG_RE.match(line)
    if m:
        try:
            b.avg = _num(m.group("v"))
        except ValueError:
            b.warnings.append(f"{path}:{lineno}: unreadable average bus bandwidth {m.group('v')!r}")
        return
    m = _OOB_RE.match(line)
    if m:
        b.oob = int(m.group("v"))
        return
    if re.match(r"^#\s*nThread\b", line):
        b.params = _parse_params(line)
        return
    hc = _header_columns(line)
    if hc is not None:
        _new_table(b, lineno)
        b.cols = hc


def _new_table(b: _Block, lineno: int) -> None:
    """A column header after result rows with no run banner between them (``# nThread``, ``# nccl-tests
    version``, ``# Collective test starting``): two tables merged into one, which no nccl-tests run
    prints -- a document quoting tables (a README), not a run."""
    if b.rows:
        raise InputError("a second table starts here inside one run (no '# nThread' or '# Collective test "
                         "starting' line before it): not one nccl-tests run", b.path, lineno,
                         expected="nccl-tests/rccl-tests output, one table per run")


def _result_row(b: _Block, cols: list[str], toks: list[str], lineno: int) -> Optional[dict]:
    """One result row, or None (with a warning) when it does not fit the table or its values are absurd."""
    path, warnings = b.path, b.warnings
    try:
        vals = _row_values(cols, toks)
    except ValueError as e:
        warnings.append(f"{path}:{lineno}: skipped a row that does not fit the table ({e})")
        return None
    size = vals.get("size")
    if size is None or size < 0 or size > _MAX_SIZE:
        warnings.append(f"{path}:{lineno}: skipped a row with an absurd size {size}")
        return None
    sets = vals["sets"]
    bad = [s for s in sets for k in ("time_us", "algbw_GBps", "busbw_GBps")
           if s.get(k) is not None and (not math.isfinite(s[k]) or s[k] < 0 or s[k] > (_MAX_BW if k != "time_us" else 1e12)
                                        or (k == "time_us" and s[k] == 0 and size > 0))]  # no transfer takes 0 us
    if bad or not sets or sets[0]["time_us"] is None:
        warnings.append(f"{path}:{lineno}: skipped a row with missing or absurd time/bandwidth values")
        return None
    redop = vals.get("redop")
    if redop is not None and str(redop).lower() not in REDOPS:
        warnings.append(f"{path}:{lineno}: skipped a row with an unknown reduction operation {str(redop)[:20]!r}")
        return None
    dtype = vals.get("type")
    count = vals.get("count")
    if count is None and "count" in cols:
        tsize = TYPE_SIZES.get(str(dtype).lower())
        if tsize:
            count = size // tsize
            warnings.append(f"{path}:{lineno}: row has no count cell; count {count} computed from "
                            f"size {size} and type {dtype}")
        else:
            warnings.append(f"{path}:{lineno}: row has no count cell and type {dtype!r} is unknown")
    return {
        "line": lineno, "size_bytes": size, "count": count, "type": dtype,
        "redop": vals.get("redop"), "root": vals.get("root"),
        "out_of_place": sets[0], "in_place": sets[1] if len(sets) > 1 else None,
    }


def _run_result(b: _Block, collective: Optional[str]) -> dict:
    """The ``gpucomm.nccltests/v1`` dict of a block with rows: hosts, rank count and collective."""
    hosts: list[str] = []
    for d in b.devices:
        if d["host"] not in hosts:
            hosts.append(d["host"])
    n_ranks: Optional[int] = None
    n_ranks_source: Optional[str] = None
    truncated = False
    if b.devices:
        ranks = {d["rank"] for d in b.devices}
        n_ranks = len(ranks)
        n_ranks_source = "devices"
        if n_ranks < max(ranks) + 1 <= MAX_NODES * MAX_HOST_GPUS:
            # a shortened rank list ("#  Rank 0 ...", "...", "#  Rank 127 ..."): the ranks run to the highest one
            # listed, on hosts the list no longer shows all of
            n_ranks, n_ranks_source, truncated = max(ranks) + 1, "devices (list shortened: highest rank)", True
            b.warnings.append(f"{b.path}: the device list shows {len(ranks)} of {n_ranks} ranks (shortened): "
                              f"{n_ranks} ranks on hosts it does not all show (--nodes says how many)")
    coll, coll_source, candidates, factor = _block_collective(b, collective, n_ranks)
    if n_ranks is None and coll is not None and factor is not None:
        n = _ranks_from_factor(coll, factor)
        if n is not None:
            n_ranks, n_ranks_source = n, "inferred from busbw/algbw"
    starting = b.starting
    return {
        "schema": SCHEMA,
        "source": b.path,
        "test_name": starting.lower().removesuffix("_perf") if starting else None,
        "collective": coll,
        "collective_source": coll_source,
        "collective_candidates": candidates if coll is None else [coll],
        "n_ranks": n_ranks,
        "n_ranks_source": n_ranks_source,
        "nodes": len(hosts) if hosts and not truncated else None,
        "hosts": hosts,
        "devices": b.devices,
        "params": b.params,
        "version": b.version,
        "nccl_library": b.library,
        "nccl_net": _net_of_lines(b.nccl_lines, b.path),
        "rows": b.rows,
        "out_of_bounds": b.oob,
        "avg_busbw_GBps": b.avg,
        "ignored": {"nccl_log_lines": b.nccl_log, "other_lines": b.other, "other_examples": b.other_examples,
                    "labelled_lines": b.labels},
        "warnings": b.warnings,
    }


def _block_collective(b: _Block, collective: Optional[str],
                      n_ranks: Optional[int]) -> tuple[Optional[str], Optional[str], list[str], Optional[float]]:
    """(collective, its source, candidates, busbw/algbw): given, else from the header, else inferred from the factor."""
    path = b.path
    coll: Optional[str] = None
    coll_source: Optional[str] = None
    candidates: list[str] = []
    if collective:
        coll = COLLECTIVE_NAMES.get(collective.replace("-", "_").lower().removesuffix("_perf"))
        if coll is None:
            raise InputError(f"unknown collective {collective!r}", path,
                             expected=", ".join(sorted(set(COLLECTIVE_NAMES.values()))))
        coll_source = "given"
    elif b.starting:
        name = b.starting.lower().removesuffix("_perf")
        coll = COLLECTIVE_NAMES.get(name)
        coll_source = "header" if coll else None
        if coll is None:
            b.warnings.append(f"{path}: unknown test {b.starting!r}")
    factor = _bus_factor(b.rows)
    if coll is None:
        candidates = _infer_collectives(b.rows, factor, n_ranks)
        if len(candidates) == 1:
            coll, coll_source = candidates[0], "inferred"
        elif len(candidates) > 1:
            named = _collective_in_file_name(path, candidates)
            if named:
                coll, coll_source = named, "file name"
                b.warnings.append(f"{path}: the table fits {' or '.join(candidates)}; {named} taken from the file name")
    return coll, coll_source, candidates, factor


# How nccl-tests binaries and the logs people keep spell each collective (all_gather_perf,
# allgather, all-to-all, sendrecv ...).
_NAME_SPELLINGS = {
    "all_reduce": ("all_reduce", "allreduce", "all-reduce"), "all_gather": ("all_gather", "allgather", "all-gather"),
    "reduce_scatter": ("reduce_scatter", "reducescatter", "reduce-scatter"),
    "all_to_all": ("alltoall", "all_to_all", "all-to-all"), "send_recv": ("sendrecv", "send_recv", "send-recv"),
    "broadcast": ("broadcast", "bcast"), "reduce": ("reduce",), "gather": ("gather",), "scatter": ("scatter",),
}


def _collective_in_file_name(path: str, candidates: list[str]) -> Optional[str]:
    """The one candidate whose name the file's base name carries as a word (``all_gather_output.dat.1``),
    else None.  Only the base name: folders name studies, not runs."""
    base = re.split(r"[\\/]", str(path or ""))[-1].lower()
    hits = []
    for c in candidates:
        for spelling in _NAME_SPELLINGS.get(c, (c,)):
            if re.search(rf"(?<![a-z]){re.escape(spelling)}(?![a-z])", base):
                hits.append(c)
                break
    return hits[0] if len(hits) == 1 else None


def _best_row(rows: list[dict]) -> Optional[tuple[float, float]]:
    """(algbw, busbw) of the row with the largest algbw (2-decimal rounding matters least there)."""
    best = None
    for r in rows:
        s = r["out_of_place"]
        a, b = s.get("algbw_GBps"), s.get("busbw_GBps")
        if a and b and a > 0 and (best is None or a > best[0]):
            best = (a, b)
    if best is None or best[0] < 0.5:
        return None
    return best


def _bus_factor(rows: list[dict]) -> Optional[float]:
    """busbw/algbw measured on the row with the largest algbw."""
    best = _best_row(rows)
    return None if best is None else best[1] / best[0]


def _factor_tolerance(rows: list[dict]) -> float:
    """How far the printed busbw/algbw can be from nccl-tests' exact factor: both are printed with
    2 decimals (+-0.005), so |f - f_true| <= 0.005 * (1 + f) / (algbw - 0.005)."""
    best = _best_row(rows)
    if best is None:
        return 1.0
    a, b = best
    return 0.005 * (1 + b / a) / max(a - 0.005, 1e-9) + 1e-9


def _ranks_from_factor(coll: str, f: float) -> Optional[int]:
    """Invert nccl-tests' busbw factor: 2(n-1)/n -> n = 2/(2-f); (n-1)/n -> n = 1/(1-f)."""
    try:
        if coll == "all_reduce":
            n = 2.0 / (2.0 - f)
        elif coll in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"):
            n = 1.0 / (1.0 - f)
        else:
            return None
    except ZeroDivisionError:
        return None
    if not math.isfinite(n) or n < 1.5 or n > 1_000_000:
        return None
    r = round(n)
    return r if abs(n - r) <= 0.15 * max(1.0, r / 8) else None


def _infer_collectives(rows: list[dict], f: Optional[float], n_ranks: Optional[int]) -> list[str]:
    """Collectives consistent with the busbw factor and the redop/root columns."""
    if f is None:
        return []
    redops = {str(r.get("redop")).lower() for r in rows}
    roots = {r.get("root") for r in rows}
    reduces = bool(redops - {"none", "-", "n/a"})
    rooted = any(isinstance(x, int) and x >= 0 for x in roots)
    # gather_perf/scatter_perf share the (n-1)/n factor but print a root >= 0 (nccl-tests gather.cu)
    n1_family = ["reduce_scatter"] if reduces else (["gather", "scatter"] if rooted else ["all_gather", "all_to_all"])
    rounding = _factor_tolerance(rows)
    out = []
    if n_ranks and n_ranks > 1:
        ar, ag = busbw_factor("all_reduce", n_ranks), busbw_factor("all_gather", n_ranks)
        # (n-1)/n and 1 are 1/n apart: a fixed tolerance would call a 64-rank broadcast a gather.
        # The ratio is exact up to the 2-decimal printing, so a tolerance well under 1/(2n) is safe;
        # when the printing is too coarse for that, both match and the answer stays ambiguous.
        tol = min(0.03, max(0.45 / n_ranks, rounding))
        if abs(f - ar) < tol and reduces and not rooted:  # all_reduce prints root -1; n=2 gives f=1 like reduce
            out.append("all_reduce")
        if abs(f - ag) < tol:
            out += n1_family
        if abs(f - 1.0) < tol:
            if rooted:
                out.append("reduce" if reduces else "broadcast")
            elif not reduces or n_ranks > 2:
                # sendrecv_perf prints the redop of its (unused) reduction, "sum" by default
                # (nccl-tests src/sendrecv.cu); with 2 ranks a summing all_reduce also has factor 1
                out.append("send_recv")
        return out
    # Rank count unknown: f == 1 (to printing precision) is a rooted op, send_recv, or a 2-rank
    # all_reduce; f > 1 is all_reduce; f < 1 is (n-1)/n for some n (a 64-rank all_gather has 0.984).
    if abs(f - 1.0) <= rounding:
        if rooted:
            return ["reduce" if reduces else "broadcast"]
        return ["all_reduce"] if reduces else ["send_recv"]
    if f > 1.0:
        return ["all_reduce"] if reduces and not rooted else []
    return n1_family


def load_nccltests(path: str, collective: Optional[str] = None) -> dict:
    """Read a file with :func:`gpucomm.probes.parse.read_text_input` (size/encoding checks) and parse it."""
    from gpucomm.probes.parse import read_text_input

    return parse_nccltests(read_text_input(path), path=path, collective=collective)


def measured_series(parsed: dict, which: str = "out_of_place") -> list[dict]:
    """[{size_bytes, time_us, algbw_GBps, busbw_GBps}] for rows that have the chosen column set."""
    out = []
    for r in parsed["rows"]:
        s = r.get(which)
        if s and s.get("time_us") is not None:
            out.append({"size_bytes": r["size_bytes"], "time_us": s["time_us"],
                        "algbw_GBps": s.get("algbw_GBps"), "busbw_GBps": s.get("busbw_GBps")})
    return out
