"""Slurm's own topology descriptions, text in, one plain record out: ``topology.conf``
(topology/tree ``SwitchName=`` lines, topology/block ``BlockName=``/``BlockSizes=``) and the output
of ``scontrol show topology`` (``SwitchName=s0 Level=0 LinkSpeed=1 Nodes=...``;
``BlockName=b1 BlockIndex=0 Nodes=... BlockSize=2``, ``AggregatedBlock=...``) -- and Slurm's
hostlist expressions, which both use.

The record (JSON-serialisable)::

    {"source": "topology.conf"|"scontrol", "switches": [{"name", "nodes": [...], "switches": [...],
     "link_speed", "line"}], "blocks": [{"name", "nodes": [...], "line"}], "block_sizes": [int, ...],
     "warnings": [...]}

Syntax (``topology.conf(5)``, ``placement/slurm-config-examples.md``): one switch or block per line,
``Key=Value`` pairs, case-insensitive keys, ``#`` comments, ``\\`` continues a line; ``LinkSpeed``
is kept but, as in Slurm, not used for decisions.  Hostlist expressions follow Slurm's:
``node[01-16]``, ``gpu[1,3,5-7]``, ``a[1-2]b[1-2]`` (cartesian, leftmost slowest), comma-separated
lists; zero padding follows the width of the range's lower bound.  What the names mean (a switch
tree, blocks) is gpucomm.probes.fabric's.
"""
from __future__ import annotations

import math
import re
from typing import Dict, Iterable, List, Optional, Tuple

from gpucomm.probes.errors import InputError
from gpucomm.probes.limits import MAX_HOSTS

# ============================================================================================
# Hostlists
def _split_top(text: str) -> List[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ValueError("nested '['")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError("']' without '['")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise ValueError("'[' without ']'")
    parts.append("".join(cur))
    return parts


_HOST_OK = re.compile(r"^[A-Za-z0-9._\-]+$")


def _parse_hostlist(expr: str) -> List[List[object]]:
    """A hostlist expression -> per top-level element, its pieces: a literal string, or a list of
    (lo, hi, width) ranges.  Nothing is expanded."""
    text = (expr or "").strip()
    if not text:
        raise ValueError("empty hostlist")
    elements: List[List[object]] = []
    for part in _split_top(text):
        part = part.strip()
        if not part:
            raise ValueError(f"empty element in {expr[:80]!r}")
        pieces: List[object] = []
        for p in re.split(r"(\[[^\]]*\])", part):
            if not p:
                continue
            if p.startswith("["):
                body = p[1:-1]
                if not body:
                    raise ValueError(f"empty brackets in {part[:80]!r}")
                ranges = []
                for rng in body.split(","):
                    rng = rng.strip()
                    m = re.fullmatch(r"(\d{1,18})(?:-(\d{1,18}))?", rng)
                    if not m:
                        raise ValueError(f"bad range {rng[:40]!r} in {part[:80]!r}")
                    lo_s, hi_s = m.group(1), m.group(2)
                    lo, hi = int(lo_s), int(hi_s) if hi_s is not None else int(lo_s)
                    if hi < lo:
                        raise ValueError(f"range {rng!r} goes backwards")
                    ranges.append((lo, hi, len(lo_s)))
                pieces.append(ranges)
            else:
                if "[" in p or "]" in p or not _HOST_OK.match(p):
                    raise ValueError(f"bad host name text {p[:40]!r}")
                pieces.append(p)
        elements.append(pieces)
    return elements


def count_hostlist(expr: str) -> int:
    """How many names a hostlist expression stands for, without expanding it (a product of range
    sizes per element: ``n[0-999]x[0-999]`` is 1,000,000)."""
    total = 0
    for pieces in _parse_hostlist(expr):
        n = 1
        for p in pieces:
            if isinstance(p, list):
                n *= sum(hi - lo + 1 for lo, hi, _ in p)
        total += n
    return total


def expand_hostlist(expr: str, limit: int = MAX_HOSTS) -> List[str]:
    """Slurm hostlist expression -> host names, in order.  Raises ValueError with the reason,
    also when the expression stands for more than ``limit`` names (counted before expanding)."""
    elements = _parse_hostlist(expr)
    n = count_hostlist(expr)
    if n > limit:
        raise ValueError(f"{n} hosts, more than the limit of {limit}")
    out: List[str] = []
    for pieces in elements:
        names = [""]
        for p in pieces:
            if isinstance(p, list):
                vals = [str(v).zfill(width) for lo, hi, width in p for v in range(lo, hi + 1)]
                names = [a + b for a in names for b in vals]
            else:
                names = [a + p for a in names]
        out.extend(names)
    return out


_NUM_TAIL = re.compile(r"^(.*?)(\d+)([^\d]*)$")


def compress_hostlist(hosts: Iterable[str], keep_order: bool = False) -> str:
    """Host names -> a Slurm hostlist expression (inverse of :func:`expand_hostlist`).
    ``keep_order`` keeps the given order (ranges only over neighbours in the list); otherwise
    hosts are sorted by prefix and number first."""
    items = []
    for h in hosts:
        m = _NUM_TAIL.match(h)
        if m and not m.group(3):
            items.append((m.group(1), m.group(2)))
        else:
            items.append((h, None))
    if not keep_order:
        items = sorted(set(items), key=lambda it: (it[0], it[1] is not None, int(it[1] or 0), len(it[1] or "")))
    # runs of consecutive numbers with one prefix that a bracket range reproduces exactly
    # (expand_hostlist pads every number to the width of the range's lower bound).
    runs: List[Tuple[str, Optional[Tuple[str, str]]]] = []
    for pfx, num in items:
        if num is None:
            runs.append((pfx, None))
            continue
        if runs and runs[-1][1] is not None and runs[-1][0] == pfx:
            lo, hi = runs[-1][1]
            if int(num) == int(hi) + 1 and num == str(int(num)).zfill(len(lo)):
                runs[-1] = (pfx, (lo, num))
                continue
        runs.append((pfx, (num, num)))
    # merge neighbouring runs of the same prefix into one bracket list
    out: List[str] = []
    i = 0
    while i < len(runs):
        pfx, rng = runs[i]
        if rng is None:
            out.append(pfx)
            i += 1
            continue
        group = [rng]
        j = i + 1
        while j < len(runs) and runs[j][1] is not None and runs[j][0] == pfx:
            group.append(runs[j][1])
            j += 1
        if len(group) == 1 and group[0][0] == group[0][1]:
            out.append(pfx + group[0][0])
        else:
            body = ",".join(lo if lo == hi else f"{lo}-{hi}" for lo, hi in group)
            out.append(f"{pfx}[{body}]")
        i = j
    return ",".join(out)



# ============================================================================================
# topology.conf and scontrol show topology
_TOPO_KEYS = {"switchname": "SwitchName", "switches": "Switches", "nodes": "Nodes", "linkspeed": "LinkSpeed",
              "blockname": "BlockName", "blocksizes": "BlockSizes"}
# what ``scontrol show topology`` adds to the topology.conf keys (read and, but for the sizes, set aside)
_SCONTROL_KEYS = {"level": "Level", "blockindex": "BlockIndex", "blocksize": "BlockSize",
                  "aggregatedblock": "AggregatedBlock"}
_NAME_OK = re.compile(r"[A-Za-z0-9._\-]+")


def looks_like(text: str) -> Optional[str]:
    """``"topology.conf"`` or ``"scontrol"`` when ``text`` is one of Slurm's topology descriptions
    (its first meaningful line starts with SwitchName=, BlockName=, BlockSizes= or
    AggregatedBlock=; scontrol's output has Level= or BlockIndex=), else None."""
    for raw in text[:65536].splitlines()[:200]:
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if not re.match(r"(?i)(SwitchName|BlockName|BlockSizes|AggregatedBlock)=", line):
            return None
        return "scontrol" if re.search(r"(?i)\b(Level|BlockIndex|BlockSize)=", line) else "topology.conf"
    return None


def _logical_lines(text: str) -> List[Tuple[int, str]]:
    logical: List[Tuple[int, str]] = []
    buf, start = "", None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if start is None:
            start = lineno
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        if buf.strip():
            logical.append((start, buf.strip()))
        buf, start = "", None
    if buf.strip():
        logical.append((start or 1, buf.strip()))
    return logical


def read_topology_conf(text: str, path: str = "topology.conf") -> dict:
    """Slurm's topology.conf, or ``scontrol show topology`` output (detected by its Level=/BlockIndex=
    keys), -> the record of the module docstring.  Errors name the file and line."""
    scontrol = looks_like(text) == "scontrol"
    keys = dict(_TOPO_KEYS, **(_SCONTROL_KEYS if scontrol else {}))
    switches: List[dict] = []
    blocks: List[dict] = []
    sizes: List[int] = []
    seen: Dict[str, int] = {}
    seen_sizes: List[int] = []
    budget = {"Nodes": MAX_HOSTS, "Switches": MAX_HOSTS}  # names in the whole file, counted before expanding
    for lineno, line in _logical_lines(text):
        pairs: Dict[str, str] = {}
        first = None
        for tok in line.split():
            if "=" not in tok:
                raise InputError(f"{tok[:40]!r} is not Key=Value", path, lineno,
                                 expected="SwitchName=NAME Switches=...|Nodes=... or BlockName=NAME Nodes=...")
            k, _, v = tok.partition("=")
            key = keys.get(k.lower())
            if key is None:
                raise InputError(f"unknown key {k[:40]!r}", path, lineno,
                                 expected="SwitchName, Switches, Nodes, LinkSpeed, BlockName or BlockSizes")
            if key in pairs:
                raise InputError(f"{key} given twice", path, lineno)
            if not v:
                if scontrol and key in ("Nodes", "Switches"):
                    continue
                raise InputError(f"{key}= has no value", path, lineno)
            pairs[key] = v
            first = first or key
        if first == "BlockSizes":
            for part in pairs["BlockSizes"].split(","):
                if not re.fullmatch(r"\d{1,7}", part.strip()) or int(part) < 1:
                    raise InputError(f"BlockSizes={pairs['BlockSizes'][:40]}: {part[:20]!r} is not a node count",
                                     path, lineno, expected="a comma-separated list of numbers >= 1")
                sizes.append(int(part))
            continue
        if scontrol and re.fullmatch(r"\d{1,7}", pairs.get("BlockSize", "")) and int(pairs["BlockSize"]) not in seen_sizes:
            seen_sizes.append(int(pairs["BlockSize"]))   # scontrol: the BlockSizes at work, base first
        if first == "AggregatedBlock":
            continue        # scontrol: a union of base blocks (BlockSizes at work), not a block of its own
        if first not in ("SwitchName", "BlockName"):
            raise InputError(f"a line must start with SwitchName= or BlockName=, not {first}=", path, lineno)
        name = pairs[first]
        if not _NAME_OK.fullmatch(name):
            raise InputError(f"bad {'switch' if first == 'SwitchName' else 'block'} name {name[:40]!r}", path, lineno)
        if name in seen:
            raise InputError(f"{name!r} defined twice (first on line {seen[name]})", path, lineno)
        seen[name] = lineno
        rec: dict = {"name": name, "nodes": [], "switches": [], "link_speed": None, "line": lineno}
        if scontrol and first == "SwitchName" and "Switches" in pairs:
            pairs.pop("Nodes", None)        # scontrol lists every node below an upper switch
        for key in ("Nodes", "Switches"):
            if key in pairs:
                try:
                    lst = expand_hostlist(pairs[key], budget[key])
                except ValueError as e:
                    raise InputError(f"{key}={pairs[key][:80]}: {e}", path, lineno,
                                     expected=f"a Slurm hostlist like node[01-16]; at most {MAX_HOSTS} names in all") from None
                budget[key] -= len(lst)
                if key == "Switches" and first == "BlockName":
                    raise InputError("BlockName lines take Nodes=, not Switches=", path, lineno)
                rec[key.lower()] = lst
        if "LinkSpeed" in pairs:
            try:
                rec["link_speed"] = float(pairs["LinkSpeed"])
            except ValueError:
                raise InputError(f"LinkSpeed={pairs['LinkSpeed'][:40]} is not a number", path, lineno) from None
            if not math.isfinite(rec["link_speed"]) or rec["link_speed"] < 0:
                raise InputError(f"LinkSpeed={pairs['LinkSpeed'][:40]} is not a speed", path, lineno,
                                 expected="a number >= 0")
        if not rec["nodes"] and not rec["switches"]:
            raise InputError(f"{name!r} has neither Nodes= nor Switches=", path, lineno)
        if first == "BlockName":
            blocks.append({"name": name, "nodes": rec["nodes"], "line": lineno})
        else:
            switches.append(rec)
    if not switches and not blocks:
        raise InputError("no SwitchName= or BlockName= line", path, expected="a Slurm topology.conf")
    return {"source": "scontrol" if scontrol else "topology.conf", "switches": switches, "blocks": blocks,
            "block_sizes": sizes or sorted(seen_sizes), "warnings": []}


def write_topology_conf(switches: List[dict], comments: Optional[List[str]] = None) -> str:
    """topology/tree ``topology.conf`` lines from [{"name", "nodes", "switches", "comment"}] (hostlists
    compressed, in the given order)."""
    lines = [f"# {c}" for c in comments or []]
    for s in switches:
        if s.get("comment"):
            lines.append(f"# {s['comment']}")
        parts = [f"SwitchName={s['name']}"]
        if s.get("switches"):
            parts.append(f"Switches={','.join(s['switches'])}")   # switch names as they are (GUIDs are hex)
        if s.get("nodes"):
            parts.append(f"Nodes={compress_hostlist(s['nodes'])}")
        if s.get("link_speed"):
            parts.append(f"LinkSpeed={int(s['link_speed'])}")
        lines.append(" ".join(parts))
    return "\n".join(lines) + "\n"


def write_block_conf(blocks: List[dict], block_sizes: Optional[List[int]] = None,
                     comments: Optional[List[str]] = None) -> str:
    """topology/block ``topology.conf``: ``BlockName=`` per [{"name", "nodes", "comment"}] and
    ``BlockSizes=`` when given."""
    lines = [f"# {c}" for c in comments or []]
    for b in blocks:
        if b.get("comment"):
            lines.append(f"# {b['comment']}")
        lines.append(f"BlockName={b['name']} Nodes={compress_hostlist(b['nodes'])}")
    if block_sizes:
        lines.append("BlockSizes=" + ",".join(str(s) for s in block_sizes))
    return "\n".join(lines) + "\n"
