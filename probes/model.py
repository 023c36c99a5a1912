"""The topology document (``schema: gpucomm.topology/v1``) and the small vocabulary shared by
every probe and planner.

The document is plain JSON-serialisable data (dicts, lists, str, int, float, bool, None) so that a
probe record, a saved ``gpucomm probe --format json`` and a fixture are the same thing.  Builders
here fill every field the schema requires (with ``None`` where unknown) so that consumers never
need ``.get`` chains; :func:`finalize` sorts everything for byte-identical output.

Graph ids: GPUs and NICs by normalised PCI bus id when known, else ``GPU<index>`` /
the NIC name; NUMA nodes (NCCL's CPU nodes) are ``CPU<numa id>``; switches by their ``id``.

Extra fields used by gpucomm beyond the schema's minimum (all optional in the schema):
  gpus[].parent / nics[].parent / switches[].parent  -- graph id of the upstream PCI node
        (a switch, a host bridge or ``CPU<n>``); this is the PCI tree NCCL builds.
  gpus[].id / nics[].id  -- the graph id (derived; see :func:`gpu_id`).
  gpus[].p2p  -- {other GPU id: "OK"|"disabled"|...} from NVML's P2P status.
  nics[].rate_gbps -- best active port rate (derived convenience, written once by merge with
        facts.nic_rate_gbps; readers ask facts/the view, which read the ports).
"""
from __future__ import annotations

import re
from enum import IntEnum
from typing import Any, Iterable, Optional

from gpucomm.probes.limits import MAX_CPUS, MAX_WARNINGS

SCHEMA = "gpucomm.topology/v1"
PROVENANCES = ("live", "snapshot", "nvidia-smi", "nccl-xml", "rocm-smi", "json", "fixture", "nccl-log")


# --------------------------------------------------------------------------------------------
# Path types: NCCL's names and order (graph.h, >= 2.28).  Always compare by name, never by the
# numeric value another NCCL version printed.
class PathType(IntEnum):
    LOC = 0
    NVL = 1
    NVB = 2
    C2C = 3
    PIX = 4
    PXB = 5
    P2C = 6
    PXN = 7
    PHB = 8
    SYS = 9
    NET = 10
    DIS = 11


# NCCL's graph patterns (graph.h NCCL_TOPO_PATTERN_*): the numbers its graph files and logs print.
class GraphPattern(IntEnum):
    BALANCED_TREE = 1
    SPLIT_TREE = 2
    TREE = 3
    RING = 4
    NVLS = 5
    COLLNET_DIRECT = 6


# kvDictPciClass (topo.cc): a PCI class -> NCCL's node type, prefix-matched (others: PCI)
NCCL_PCI_CLASSES = (("0x060400", "PCI"), ("0x080100", "PCI"), ("0x068000", "NVS"), ("0x068001", "CPU"), ("0x03", "GPU"),
                    ("0x02", "NIC"))


def nccl_kv(s: str, table, default):
    """NCCL's ``kvConvertToInt``: the value of the first key of ``table`` (pairs or a dict) that is a
    prefix of ``s`` (NCCL compares with ``strncmp(s, key, strlen(key))``), else ``default``.  How NCCL
    reads its XML's and environment's words (PCIe speeds, CPU vendors, path levels, link types).

    >>> nccl_kv("32.0 GT/s PCIe/s", (("16.0 GT/s PCIe", 120), ("32.0 GT/s PCIe", 240)), 60)
    240
    """
    for k, v in (table.items() if isinstance(table, dict) else table):
        if s.startswith(k):
            return v
    return default


# nvidia-smi topo -m legend, best first.  NODE has no NCCL equivalent (NCCL collapses all root
# complexes of one NUMA node into one CPU node, i.e. PHB).  SOC (drivers < ~384) means SYS.
SMI_LEVELS = ("X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS")
SMI_TO_PATH = {"X": "LOC", "PIX": "PIX", "PXB": "PXB", "PHB": "PHB", "NODE": "PHB", "SYS": "SYS", "SOC": "SYS"}

_NV_RE = re.compile(r"^NV(\d{1,4})$")  # more digits: not a link count


def smi_rank(code: str) -> int:
    """Order of an nvidia-smi cell, best (0) first; NV# ranks by link count (more is better)."""
    m = _NV_RE.match(code or "")
    if m:
        return 1 * 1000 - int(m.group(1))  # all NV# better than PIX (2000)
    try:
        return SMI_LEVELS.index(code) * 1000
    except ValueError:
        return 99_000


# --------------------------------------------------------------------------------------------
# PCI ids and CPU lists
_BDF_RE = re.compile(
    r"^(?:(?P<dom>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<dev>[0-9a-fA-F]{1,2})\.(?P<fn>[0-7])$"
)


def normalize_bus_id(value: Any) -> Optional[str]:
    """``00000000:18:00.0`` (NVML), ``18:00.0`` (lspci), ``0000:18:00.0`` -> ``0000:18:00.0``.

    Returns None for anything that is not a PCI BDF (including NCCL's ``fffffff:ff:ff.0`` sentinel,
    which is returned normalised so callers can recognise it with :func:`is_sentinel_bus_id`)."""
    if not isinstance(value, str):
        return None
    m = _BDF_RE.match(value.strip())
    if not m:
        return None
    dom = int(m.group("dom") or "0", 16)
    # NVML pads the domain to 8 hex digits; Linux uses 4.  Keep 4 unless the value needs more.
    dom_s = f"{dom:04x}" if dom <= 0xFFFF else f"{dom:x}"
    return f"{dom_s}:{int(m.group('bus'), 16):02x}:{int(m.group('dev'), 16):02x}.{m.group('fn')}"


def is_sentinel_bus_id(bus_id: Optional[str]) -> bool:
    """NCCL/NVML placeholder for an NVLink peer it cannot see (an NVSwitch in a VM/container)."""
    return bool(bus_id) and bus_id.lower().startswith(("fffffff", "ffffffff"))


def parse_cpulist(text: str, limit: int = MAX_CPUS) -> list[int]:
    """Linux cpulist (``0-3,8,10-11``) -> sorted unique ints.  Raises ValueError on junk and on an
    id of ``limit`` or more (:data:`~gpucomm.probes.limits.MAX_CPUS`): the ranges are merged
    before anything is expanded, so the result never holds more than ``limit`` ids whatever the
    number and width of the ranges.

    >>> parse_cpulist("8,0-3, 2-5")
    [0, 1, 2, 3, 4, 5, 8]
    >>> parse_cpulist(",".join(["0-16383"] * 1000)) == list(range(16384))
    True
    """
    text = (text or "").strip()
    if not text:
        return []
    spans = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo_s, dash, hi_s = part.partition("-")
        lo = _cpu_number(lo_s, part, limit)
        hi = _cpu_number(hi_s, part, limit) if dash else lo
        if hi < lo:
            raise ValueError(f"bad cpu range {part!r}")
        spans.append((lo, hi))
    spans.sort()
    out: list[int] = []
    top = -1
    for lo, hi in spans:
        if hi > top:
            out.extend(range(max(lo, top + 1), hi + 1))
            top = hi
    return out


def _cpu_number(s: str, part: str, limit: int) -> int:
    s = s.strip()
    if not (s.isascii() and s.isdigit()) or len(s) > 9:
        raise ValueError(f"bad cpu range {part[:40]!r}")
    v = int(s)
    if v >= limit:
        raise ValueError(f"cpu id {v} is past the limit of {limit}")
    return v


def format_cpulist(cpus: Iterable[int]) -> str:
    """Sorted unique ints -> canonical cpulist (merged ranges): [0,1,2,5] -> ``0-2,5``."""
    cs = sorted(set(int(c) for c in cpus))
    parts: list[str] = []
    i = 0
    while i < len(cs):
        j = i
        while j + 1 < len(cs) and cs[j + 1] == cs[j] + 1:
            j += 1
        parts.append(str(cs[i]) if i == j else f"{cs[i]}-{cs[j]}")
        i = j + 1
    return ",".join(parts)


def canonical_cpulist(text: Optional[str]) -> Optional[str]:
    """Canonicalise a cpulist string; None/empty/``N/A`` -> None."""
    if text is None:
        return None
    t = str(text).strip()
    if not t or t.upper() == "N/A":
        return None
    return format_cpulist(parse_cpulist(t)) or None


def cpumask_to_list(mask: str, limit: int = MAX_CPUS) -> list[int]:
    """Kernel/NCCL hex cpumask (``00000000,000000ff,ffffffff``; comma-separated 32-bit groups,
    most significant first) -> list of cpu ids; ValueError for a mask naming an id of ``limit``
    or more."""
    m = (mask or "").strip().replace(",", "").lower()
    if m.startswith("0x"):
        m = m[2:]
    if not m:
        return []
    value = int(m, 16)
    if value.bit_length() > limit:
        raise ValueError(f"cpumask names cpu {value.bit_length() - 1}, past the limit of {limit}")
    return [i for i in range(value.bit_length()) if value >> i & 1]


def cpulist_to_mask(cpus: Iterable[int]) -> str:
    """Inverse of :func:`cpumask_to_list` in the kernel's format (32-bit groups)."""
    value = 0
    for c in cpus:
        value |= 1 << int(c)
    groups = max(1, (value.bit_length() + 31) // 32)
    words = [(value >> (32 * g)) & 0xFFFFFFFF for g in reversed(range(groups))]
    return ",".join(f"{w:08x}" for w in words)


# --------------------------------------------------------------------------------------------
# Builders
def new_document(provenance: str = "live") -> dict:
    """An empty, schema-valid topology document."""
    return {
        "schema": SCHEMA,
        "host": {
            "hostname": None,
            "os": None,
            "kernel": None,
            "driver_version": None,
            "cuda_version": None,
            "cpu_vendor": None,
            "cpu_model": None,
            "cpu_arch": None,
            "sockets": None,
            "collected_at": None,
            "provenance": provenance,
        },
        "sources": [],
        "numa_nodes": [],
        "gpus": [],
        "nics": [],
        "switches": [],
        "links": [],
        "matrix": {},
        "warnings": [],
    }


def gpu_record(index: int, **kw: Any) -> dict:
    rec = {
        "index": int(index),
        "uuid": None,
        "name": None,
        "pci_bus_id": None,
        "arch": None,
        "compute_capability": None,
        "memory_bytes": None,
        "numa_node": None,
        "numa_affinity": [],
        "cpu_affinity": None,
        "pcie": None,
        "nvlink": [],
        "mig": None,
        "vendor": "nvidia",
        "parent": None,
    }
    rec.update(kw)
    rec["pci_bus_id"] = normalize_bus_id(rec["pci_bus_id"]) if rec["pci_bus_id"] else None
    return rec


def nic_record(name: str, **kw: Any) -> dict:
    rec = {
        "name": name,
        "netdev": None,
        "pci_bus_id": None,
        "numa_node": None,
        "link_layer": None,
        "ports": [],
        "guid": None,
        "parent": None,
    }
    rec.update(kw)
    rec["pci_bus_id"] = normalize_bus_id(rec["pci_bus_id"]) if rec["pci_bus_id"] else None
    return rec


def switch_record(id: str, kind: str = "pcie", **kw: Any) -> dict:
    rec = {"id": id, "kind": kind, "pci_bus_id": None, "parent": None, "numa_node": None}
    rec.update(kw)
    return rec


def link_record(a: str, b: str, kind: str, bw_GBps: float, count: Optional[int] = None,
                gen: Optional[int] = None, width: Optional[int] = None, **kw: Any) -> dict:
    rec = {"a": a, "b": b, "kind": kind, "count": count, "bw_GBps": round(float(bw_GBps), 4),
           "gen": gen, "width": width}
    rec.update(kw)
    return rec


FABRIC_KEYS = ("cluster_uuid", "clique_id", "state", "status", "health_mask", "health_summary")
PLATFORM_KEYS = ("chassis_serial", "slot", "tray_index", "host_id", "module_id")


def fabric_record(raw: Any) -> Optional[dict]:
    """``gpus[].fabric`` from what a reader found (NVML, nvidia-smi -q, an NCCL log): the cluster UUID
    as UUID text, the clique id, the state (one of :data:`gpucomm.probes.facts.FABRIC_STATES`), NVML's
    status, health mask and summary; a value of the wrong kind is left out.  None when nothing usable
    is left.

    >>> fabric_record({"cluster_uuid": "3143b15bc2cd192b.28cc9b5473fb5b93", "clique_id": 0x7ffe, "state": 3,
    ...                "health_mask": 0xaa})["cluster_uuid"]
    '2b19cdc2-5bb1-4331-935b-fb73549bcc28'
    """
    from gpucomm.probes import facts

    if not isinstance(raw, dict):
        return None
    out: dict = {}
    cu = facts.normalize_cluster_uuid(raw.get("cluster_uuid"))
    if cu:
        out["cluster_uuid"] = cu
    for key, hi in (("clique_id", 0xFFFFFFFF), ("health_mask", 0xFFFFFFFF)):
        v = raw.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= hi:
            out[key] = v
    st = raw.get("state")
    if isinstance(st, int) and not isinstance(st, bool) and 0 <= st < len(facts.FABRIC_STATES):
        st = facts.FABRIC_STATES[st]
    if isinstance(st, str) and st.strip().lower().replace(" ", "_") in facts.FABRIC_STATES:
        out["state"] = st.strip().lower().replace(" ", "_")
    for key in ("status", "health_summary"):
        v = raw.get(key)
        if isinstance(v, str) and v.strip() and len(v) <= 80:
            out[key] = v.strip()
    return out or None


def source_record(name: str, status: str, detail: str = "") -> dict:
    assert status in ("ok", "unavailable", "partial", "error"), status
    return {"name": name, "status": status, "detail": detail}


def host_of(rec: Any) -> int:
    """The host (NCCL's system id) a record is on: its ``host`` field, 0 when absent or not a
    non-negative integer.  Documents of one node have no ``host`` fields at all."""
    h = rec.get("host") if isinstance(rec, dict) else None
    return h if isinstance(h, int) and not isinstance(h, bool) and h > 0 else 0


def host_qualified(local_id: str, host: int) -> str:
    """A graph id on host ``host``: the local id on host 0 (every one-node document), ``<host>/<id>``
    beyond (``1/0008:06:00.0``, ``1/CPU0``): hosts of one NVLink domain share bus ids and NUMA ids,
    as NCCL's system ids (bits 56+ of a node id, topo.h NCCL_TOPO_ID) keep them apart.

    >>> host_qualified("0008:06:00.0", 0), host_qualified("0008:06:00.0", 1)
    ('0008:06:00.0', '1/0008:06:00.0')
    """
    return f"{host}/{local_id}" if host else local_id


_HOST_ID = re.compile(r"^(\d{1,5})/(.+)$")


def split_host_id(graph_id: str) -> tuple:
    """``"1/CPU0"`` -> ``(1, "CPU0")``; an id without a host prefix is on host 0.

    >>> split_host_id("1/CPU0"), split_host_id("0008:06:00.0")
    ((1, 'CPU0'), (0, '0008:06:00.0'))
    """
    m = _HOST_ID.match(graph_id) if isinstance(graph_id, str) else None
    return (int(m.group(1)), m.group(2)) if m else (0, graph_id)


def gpu_id(gpu: dict) -> str:
    bus = gpu.get("pci_bus_id")
    return host_qualified(bus, host_of(gpu)) if bus else f"GPU{gpu['index']}"


def nic_id(nic: dict) -> str:
    bus = nic.get("pci_bus_id")
    return host_qualified(bus, host_of(nic)) if bus else nic["name"]


def cpu_id(numa: Optional[int], host: int = 0) -> str:
    return host_qualified(f"CPU{numa if numa is not None and numa >= 0 else 0}", host)


def host_document(doc: dict, host: int) -> dict:
    """The part of a document of several hosts on ``host``, as a document of one node: its devices,
    links, NUMA nodes and PCI devices with their ``h/`` prefixes and ``host`` fields dropped (graph ids
    and NIC names as on that host alone), GPUs renumbered by ``local_index``; the shared NVSwitch
    (``NVS``) is kept.  A document of one host comes back as a copy."""
    import copy

    d = copy.deepcopy(doc)
    hosts = d.pop("hosts", None)

    def local(x: Any) -> Any:
        if not isinstance(x, str):
            return x
        h, rest = split_host_id(x)
        return rest if h == host else x

    def mine(rec: dict) -> bool:
        return host_of(rec) == host

    gpus = [g for g in d.get("gpus", []) if mine(g)]
    for g in gpus:
        if isinstance(g.get("local_index"), int):
            g["index"] = g.pop("local_index")
        for k in ("parent", "raw_parent", "id"):
            if k in g:
                g[k] = local(g[k])
        for nl in g.get("nvlink") or []:
            if isinstance(nl, dict):
                nl["remote"] = local(nl.get("remote"))
        g.pop("host", None)
    d["gpus"] = gpus
    for key in ("nics", "switches", "numa_nodes", "pci_devices"):
        items = [x for x in d.get(key) or [] if isinstance(x, dict) and (mine(x) or x.get("id") == "NVS")]
        for x in items:
            for k in ("name", "id", "parent", "raw_parent"):
                if k in x:
                    x[k] = local(x[k])
            x.pop("host", None)
        if key in d:
            d[key] = items
    keep = {gpu_id(g) for g in gpus} | {f"GPU{g['index']}" for g in gpus}
    keep |= {nic_id(n) for n in d.get("nics", [])} | {s["id"] for s in d.get("switches", [])}
    keep |= {cpu_id(n.get("id")) for n in d.get("numa_nodes", [])}
    links = []
    for l in d.get("links", []):
        ends = (l.get("a"), l.get("b"))
        if not all(isinstance(e, str) and (e == "NVS" or split_host_id(e)[0] == host) for e in ends):
            continue
        a, b = local(ends[0]), local(ends[1])
        if (a in keep or a == "NVS") and (b in keep or b == "NVS"):
            links.append(dict(l, a=a, b=b))
    d["links"] = links
    if hosts:
        named = next((h for h in hosts if isinstance(h, dict) and h.get("id") == host), None)
        if named and named.get("hostname"):
            d["host"] = dict(d.get("host") or {}, hostname=named["hostname"])
    d["matrix"] = {}
    return d


def warn(doc: dict, message: str) -> None:
    """Add a warning once.  A document keeps at most MAX_WARNINGS distinct warnings and then one
    line saying that more were left out, so de-duplication costs O(MAX_WARNINGS) = O(1) per call
    whatever the input (an 8 MB capture of junk lines warns once per line)."""
    if len(message) > 500:  # a warning quotes the input: never all of it
        message = message[:497] + "..."
    ws = doc["warnings"]
    if len(ws) > MAX_WARNINGS or message in ws:
        return
    if len(ws) == MAX_WARNINGS:
        ws.append(f"more than {MAX_WARNINGS} warnings; the rest are left out")
        return
    ws.append(message)


# --------------------------------------------------------------------------------------------
# Serialisation
def _sort_key_link(l: dict) -> tuple:
    return (l.get("kind", ""), l.get("a", ""), l.get("b", ""))


def _matrix_key(k: str) -> tuple:
    m = re.match(r"^GPU(\d{1,6})$", k)
    return (0, int(m.group(1)), "") if m else (1, 0, k)


def finalize(doc: dict) -> dict:
    """Sort lists into their canonical order so that output is deterministic."""
    doc["gpus"].sort(key=lambda g: g["index"])
    doc["nics"].sort(key=lambda n: (host_of(n), _natural(n["name"])))
    doc["switches"].sort(key=lambda s: s["id"])
    doc["links"].sort(key=_sort_key_link)
    doc["numa_nodes"].sort(key=lambda n: (host_of(n), n["id"]))
    # sources keep insertion (probe) order; warnings keep emission order
    for g in doc["gpus"]:
        g["nvlink"].sort(key=lambda l: (l.get("link") if l.get("link") is not None else -1, str(l.get("remote"))))
    return doc


def natural_key(s) -> tuple:
    """Sort key that orders embedded numbers numerically: mlx5_2 < mlx5_10, GPU9 < GPU10.
    (``re.split`` with a group alternates text and digits, so the tuples always compare.)"""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", "" if s is None else str(s)))


_natural = natural_key


def matrix_order(doc: dict) -> list[str]:
    """Row/column order of the matrix as nvidia-smi prints it: GPUs by index, then NICs."""
    keys = list(doc.get("matrix", {}).keys())
    gpus = sorted([k for k in keys if re.match(r"^GPU\d+$", k)], key=_matrix_key)
    nic_order = [n["name"] for n in doc.get("nics", []) if n["name"] in keys]
    rest = [k for k in keys if k not in gpus and k not in nic_order]
    return gpus + nic_order + sorted(rest, key=_natural)


def dumps_json(doc: Any) -> str:
    """Deterministic JSON: sorted keys, 2-space indent, trailing newline -- byte for byte
    ``json.dumps(doc, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\\n"``,
    written by :func:`write_json` (several times faster on large documents).

    >>> print(dumps_json({"b": [1, 2.5, None], "a": {}, "c": {"x": "é"}}), end="")
    {
      "a": {},
      "b": [
        1,
        2.5,
        null
      ],
      "c": {
        "x": "é"
      }
    }
    """
    parts: list = []
    write_json(doc, parts.append)
    return "".join(parts)


# The writer behind dumps_json.  With ``indent`` the standard library encodes in pure Python, one
# generator per nesting level that every token is yielded through (json.encoder._make_iterencode:
# about 2.5 s and ~10^7 small strings held at once for the 35 MB plan of 65,536 ranks).  Here a
# container whose items are all plain scalars (most of a large document: rank records, groups) is
# encoded by json's C encoder with the separators of its depth, which gives exactly the indented
# text; the containers above them are walked in Python, appending to a list that is handed on in
# ~1 MB pieces, so a large plan or tree report streams to its file.  The rules are json.dumps':
# sorted keys (sorted first, then converted: str, float, bool, None, int), tuples as lists, int
# and float subclasses by value, NaN/Infinity refused; tests/test_model.py compares the two on
# generated documents.
from itertools import chain as _chain  # noqa: E402
from json import encoder as _json_encoder  # noqa: E402

_json_str = _json_encoder.encode_basestring   # the C function when _json is built
_FLUSH_PARTS = 1 << 14     # pieces joined and handed to ``write`` at a time
_INF = float("inf")
_PLAIN = frozenset((str, int, float, bool, type(None)))   # exact types: subclasses go the long way
_INT = {int}
_LIST = {list}
_LEAF_ENCODERS: dict = {}
_KEY_TEXT: dict = {}       # str key -> its JSON text (keys repeat across records)


def _indent(d: int) -> str:
    return "\n" + "  " * d


def _json_float(o: float) -> str:
    if o != o or o == _INF or o == -_INF:
        raise ValueError("Out of range float values are not JSON compliant: " + repr(o))
    return float.__repr__(o)


def _json_key(k: Any) -> str:
    if isinstance(k, str):
        return k
    if isinstance(k, float):
        return _json_float(k)
    if k is True:
        return "true"
    if k is False:
        return "false"
    if k is None:
        return "null"
    if isinstance(k, int):
        return int.__repr__(k)
    raise TypeError(f"keys must be str, int, float, bool or None, not {k.__class__.__name__}")


def _key_text(k: Any) -> str:
    t = _KEY_TEXT.get(k) if type(k) is str else None
    if t is None:
        t = _json_str(_json_key(k))
        if type(k) is str and len(_KEY_TEXT) < 4096:
            _KEY_TEXT[k] = t
    return t


def _json_scalar(o: Any) -> Optional[str]:
    """The JSON text of a scalar, None for a container."""
    if isinstance(o, str):
        return _json_str(o)
    if o is None:
        return "null"
    if o is True:
        return "true"
    if o is False:
        return "false"
    if isinstance(o, int):
        return int.__repr__(o)
    if isinstance(o, float):
        return _json_float(o)
    if isinstance(o, (list, tuple, dict)):
        return None
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


def _no_default(o: Any):
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


def _leaf_encoder(d: int):
    """json's C encoder whose item separator is the indentation of depth ``d + 1`` (None without
    the C extension)."""
    enc = _LEAF_ENCODERS.get(d)
    if enc is None and _json_encoder.c_make_encoder is not None:
        enc = _json_encoder.c_make_encoder(None, _no_default, _json_str, None, ": ", "," + _indent(d + 1),
                                           True, False, False)
        _LEAF_ENCODERS[d] = enc
    return enc


def write_json(doc: Any, write, depth: int = 0) -> None:
    """Call ``write(text)`` with the pieces of ``dumps_json(doc)``, in order: a file's ``write``
    streams the document without holding its text."""
    parts: list = []
    _json_value(doc, depth, parts, write)
    parts.append("\n")
    write("".join(parts))


def _json_value(o: Any, d: int, parts: list, write) -> None:
    text = _json_scalar(o)
    if text is not None:
        parts.append(text)
    elif isinstance(o, dict):
        _json_dict(o, d, parts, write)
    else:
        _json_list(o, d, parts, write)


def _json_leaf(o, d: int, parts: list) -> bool:
    """Encode a non-empty container of plain scalars in one C call; False when it is not one."""
    kinds = set(map(type, o.values() if isinstance(o, dict) else o))
    if kinds == _INT and not isinstance(o, dict):   # ranks and GPU indices: one join
        inner = _INDENTS[d + 1]
        parts.append("[" + inner + ("," + inner).join(map(int.__repr__, o)) + _INDENTS[d] + "]")
        return True
    if kinds == _LIST and not isinstance(o, dict) and set(map(type, _chain.from_iterable(o))) <= _INT:   # groups: lists of rank lists
        i1, i2 = _INDENTS[d + 1], _INDENTS[d + 2]
        sep1, sep2, close2 = "," + i1, "," + i2, i1 + "]"
        parts.append("[" + i1 + sep1.join("[" + i2 + sep2.join(map(int.__repr__, x)) + close2 if x else "[]"
                                          for x in o) + _INDENTS[d] + "]")
        return True
    if not kinds <= _PLAIN:
        return False
    enc = _LEAF_ENCODERS.get(d) or _leaf_encoder(d)
    if enc is None:
        return False
    body = "".join(enc(o, 0))
    parts.append(body[0] + _INDENTS[d + 1] + body[1:-1] + _INDENTS[d] + body[-1])
    return True


def _json_dict(o: dict, d: int, parts: list, write) -> None:
    if not o:
        parts.append("{}")
        return
    if len(_INDENTS) < d + 3:
        _INDENTS.extend(_indent(i) for i in range(len(_INDENTS), d + 3))
    if _json_leaf(o, d, parts):
        return
    inner = "," + _INDENTS[d + 1]
    sep = "{" + _INDENTS[d + 1]
    plain, keys, append = _PLAIN_TEXT, _KEY_TEXT, parts.append
    for k, v in sorted(o.items()):
        key = keys.get(k) if type(k) is str else None
        if key is None:
            key = _key_text(k)
        f = plain.get(type(v))
        if f is not None:
            append(f"{sep}{key}: {f(v)}")
        else:
            text = _json_scalar(v)
            if text is not None:
                append(f"{sep}{key}: {text}")
            else:
                append(f"{sep}{key}: ")
                if isinstance(v, dict):
                    _json_dict(v, d + 1, parts, write)
                else:
                    _json_list(v, d + 1, parts, write)
        sep = inner
    append(_INDENTS[d] + "}")
    if len(parts) > _FLUSH_PARTS:
        write("".join(parts))
        parts.clear()


def _json_list(o, d: int, parts: list, write) -> None:
    if not o:
        parts.append("[]")
        return
    if len(_INDENTS) < d + 3:
        _INDENTS.extend(_indent(i) for i in range(len(_INDENTS), d + 3))
    if _json_leaf(o, d, parts):
        return
    inner = "," + _INDENTS[d + 1]
    done = _json_records(o, d, parts, write) if type(o[0]) is dict else 0
    sep = inner if done else "[" + _INDENTS[d + 1]
    plain, append = _PLAIN_TEXT, parts.append
    for v in (o[done:] if done else o):
        f = plain.get(type(v))
        if f is not None:
            append(sep + f(v))
        else:
            text = _json_scalar(v)
            if text is not None:
                append(sep + text)
            else:
                append(sep)
                if isinstance(v, dict):
                    _json_dict(v, d + 1, parts, write)
                else:
                    _json_list(v, d + 1, parts, write)
        sep = inner
    append(_INDENTS[d] + "]")
    if len(parts) > _FLUSH_PARTS:
        write("".join(parts))
        parts.clear()


def _json_records(o, d: int, parts: list, write) -> int:
    """Rank records: the dicts that open the list ``o`` (depth ``d``) and have the first one's str
    keys, each value a plain scalar or a list of them, are written from one sorted key list; returns
    how many were (the caller writes the rest, from the first record that is not one)."""
    first = o[0]
    keys = sorted(first)
    if not keys or any(type(k) is not str for k in keys):
        return 0
    if len(_INDENTS) < d + 5:
        _INDENTS.extend(_indent(i) for i in range(len(_INDENTS), d + 5))
    i1, i2, i3 = _INDENTS[d + 1], _INDENTS[d + 2], _INDENTS[d + 3]
    heads = [("{" if j == 0 else ",") + i2 + _key_text(k) + ": " for j, k in enumerate(keys)]
    tail, sep, sep3, close3 = i1 + "}", "[" + i1, "," + i3, i2 + "]"
    shape, plain, append = first.keys(), _PLAIN_TEXT, parts.append
    n = 0
    for r in o:
        if type(r) is not dict or r.keys() != shape:
            return n
        texts = []
        for head, k in zip(heads, keys):
            v = r[k]
            f = plain.get(type(v))
            if f is not None:
                texts.append(head + f(v))
            elif type(v) is list or type(v) is tuple:
                if not v:
                    texts.append(head + "[]")
                    continue
                kinds = set(map(type, v))
                if kinds == _INT:
                    texts.append(head + "[" + i3 + sep3.join(map(int.__repr__, v)) + close3)
                elif kinds <= _PLAIN:
                    texts.append(head + "[" + i3 + sep3.join([plain[type(x)](x) for x in v]) + close3)
                else:
                    return n
            else:
                return n
        append(sep + "".join(texts) + tail)
        sep = "," + i1
        n += 1
        if not n & 2047:   # a record is one piece: hand on ~2048 at a time
            write("".join(parts))
            parts.clear()
    return n


_INDENTS = [_indent(d) for d in range(16)]
_PLAIN_TEXT = {str: _json_str, int: int.__repr__, float: _json_float, bool: lambda b: "true" if b else "false",
               type(None): lambda _: "null"}


def dumps_yaml(doc: Any) -> str:
    import yaml  # lazy

    return yaml.safe_dump(doc, sort_keys=True, default_flow_style=False, allow_unicode=True)


def schema_path(name: str = "topology") -> str:
    from pathlib import Path

    return str(Path(__file__).with_name("schema") / f"{name}.schema.json")
