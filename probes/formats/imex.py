"""``nvidia-imex-ctl -N``: the IMEX domain a multi-node NVLink tray belongs to.

IMEX (the NVIDIA Internode Memory Exchange service) runs on every tray of an NVLink domain (a
GB200/GB300 NVL72 rack) and exports/imports the memory handles that NCCL's MNNVL transport uses
(``CU_MEM_HANDLE_TYPE_FABRIC``); without a working domain NCCL stops with "MNNVL ... is available but
not working on this system. Check the IMEX configuration (nvidia-imex-ctl -N)" (mnnvl.cc).  The
command prints a legend, a timestamp, the nodes, a connectivity matrix and the domain state::

    Nodes:
    Node #0   - 172.31.48.81    - READY                - Version: 570.172
    ...
     Nodes From\\To  0   1   2
           0        C   C   C
    ...
    Domain State: UP

:func:`parse_imex_status` returns ``{"domain_state", "nodes": [{index, address, state, version}],
"connectivity": {code: cells}, "not_connected": [[from, to, code], ...] (first 64), "timestamp"}``
(the document's ``imex``); :func:`imex_document` wraps it in a topology document of no GPUs, so that
``gpucomm doctor IMEX.txt`` checks the domain.  Lines are read once each (linear); the node count is
bounded by :data:`gpucomm.probes.limits.MAX_HOSTS`.
"""
from __future__ import annotations

import re
from typing import Optional

from gpucomm.probes.errors import InputError
from gpucomm.probes.limits import MAX_HOSTS
from gpucomm.probes.model import finalize, new_document, source_record, warn

EXPECTED = "`nvidia-imex-ctl -N` output: 'Node #<n> - <address> - <state>' lines and 'Domain State: <state>'"

_NODE = re.compile(r"^\s*Node\s*#\s*(?P<i>\d{1,6})\s*-\s*(?P<addr>[^\s-][^\s]{0,253})\s*-\s*(?P<state>[A-Za-z_!]"
                   r"[A-Za-z_ !]{0,40}?)\s*(?:-\s*Version\s*:\s*(?P<ver>\S{1,40}))?\s*$")
_DOMAIN = re.compile(r"^\s*Domain\s+State\s*:\s*(?P<state>[A-Za-z_]{1,40})\s*$")
_MATRIX_HEAD = re.compile(r"^\s*Nodes\s+From\\To\b(?P<cols>[\d\s]{0,600000})$")
_TIME = re.compile(r"^\s*(?P<t>\d{1,2}/\d{1,2}/\d{4}\s+\d{1,2}:\d{2}:\d{2}(?:\.\d{1,6})?)\s*$")
_CELL = re.compile(r"^(?:![A-Z]!|[A-Z])$")
CONNECTED = "C"
CODES = {"I": "invalid", "N": "never connected", "R": "recovering", "D": "disconnected", "A": "authenticating",
         "!V!": "version mismatch", "!M!": "node map mismatch", "C": "connected"}
"""The connectivity codes of the command's legend."""
MAX_NOT_CONNECTED = 64


def parse_imex_status(text: str, path: Optional[str] = None) -> dict:
    """Parse ``nvidia-imex-ctl -N`` output (structure in the module docstring).  InputError when the
    text has neither a node line nor a domain state."""
    if not isinstance(text, str):
        raise InputError("not text", path, expected=EXPECTED)
    out: dict = {"domain_state": None, "nodes": [], "connectivity": None, "not_connected": [], "timestamp": None,
                 "warnings": []}
    seen: set = set()
    conn: dict = {}
    in_matrix = False
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not line.strip():
            in_matrix = False
            continue
        m = _NODE.match(line)
        if m:
            i = int(m.group("i"))
            if len(out["nodes"]) >= MAX_HOSTS:
                raise InputError(f"more than {MAX_HOSTS} IMEX nodes", path, n, expected="one line per node")
            if i in seen:
                out["warnings"].append(f"line {n}: node #{i} listed twice; the first is kept")
                continue
            seen.add(i)
            out["nodes"].append({"index": i, "address": m.group("addr"), "state": m.group("state").strip().upper(),
                                 "version": m.group("ver")})
            continue
        m = _DOMAIN.match(line)
        if m:
            out["domain_state"] = m.group("state").upper()
            in_matrix = False
            continue
        if _MATRIX_HEAD.match(line):
            in_matrix = True
            continue
        if in_matrix:
            toks = line.split()
            if len(toks) > 1 and toks[0].isdigit() and len(toks[0]) <= 6 and all(_CELL.match(t) for t in toks[1:]):
                src = int(toks[0])
                for dst, cell in enumerate(toks[1:]):
                    conn[cell] = conn.get(cell, 0) + 1
                    if cell != CONNECTED and len(out["not_connected"]) < MAX_NOT_CONNECTED:
                        out["not_connected"].append([src, dst, cell])
                continue
            in_matrix = False
        m = _TIME.match(line)
        if m and out["timestamp"] is None:
            out["timestamp"] = m.group("t")
    if not out["nodes"] and out["domain_state"] is None:
        raise InputError("no 'Node #' line and no 'Domain State'", path, expected=EXPECTED)
    out["nodes"].sort(key=lambda x: x["index"])
    out["connectivity"] = dict(sorted(conn.items())) if conn else None
    if out["domain_state"] is None:
        out["warnings"].append("no 'Domain State:' line (output cut?): the domain state is unknown")
    return out


def imex_document(status: dict, path: Optional[str] = None) -> dict:
    """A topology document holding only an IMEX domain (no GPUs: the command describes the domain)."""
    doc = new_document(provenance="nvidia-smi")
    doc["imex"] = {k: status[k] for k in ("domain_state", "nodes", "connectivity", "not_connected", "timestamp")}
    for w in status.get("warnings") or []:
        warn(doc, f"{path or 'nvidia-imex-ctl -N'}: {w}")
    n = len(status["nodes"])
    ready = sum(1 for x in status["nodes"] if x["state"] == "READY")
    doc["sources"].append(source_record("imex", "ok", f"nvidia-imex-ctl -N: domain {status['domain_state'] or 'state unknown'}, "
                                                      f"{ready} of {n} node(s) READY"))
    return finalize(doc)


def looks_like(text: str) -> bool:
    """True when ``text`` looks like ``nvidia-imex-ctl -N`` output."""
    if not isinstance(text, str):
        return False
    head = text[:65536]
    # [ \t], not \s, after ^: \s would run over blank lines from every line start (quadratic)
    return bool(re.search(r"(?m)^[ \t]*Domain[ \t]+State[ \t]*:", head) or
                re.search(r"(?m)^[ \t]*Node[ \t]*#[ \t]*\d{1,6}[ \t]*-[ \t]*\S+[ \t]*-[ \t]*[A-Z]", head)
                and "Connectivity" in head)


__all__ = ["parse_imex_status", "imex_document", "looks_like", "CODES", "CONNECTED", "EXPECTED"]
