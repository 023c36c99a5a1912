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
  nics[].rate_gbps -- best active port rate (derived convenience).
"""
from __future__ import annotations

import json
import re
from enum import IntEnum
from typing import Any, Iterable, Optional

from gpucomm.probes.limits import MAX_WARNINGS

SCHEMA = "gpucomm.topology/v1"
PROVENANCES = ("live", "snapshot", "nvidia-smi", "nccl-xml", "rocm-smi", "json", "fixture")


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


def parse_cpulist(text: str) -> list[int]:
    """Linux cpulist (``0-3,8,10-11``) -> sorted unique ints.  Raises ValueError on junk."""
    out: set[int] = set()
    text = (text or "").strip()
    if not text:
        return []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo_s, hi_s = part.split("-", 1)
            lo, hi = int(lo_s), int(hi_s)
            if hi < lo or hi - lo > 1_000_000:
                raise ValueError(f"bad cpu range {part!r}")
            out.update(range(lo, hi + 1))
        else:
            out.add(int(part))
    if any(c < 0 for c in out):
        raise ValueError("negative cpu id")
    return sorted(out)


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


def cpumask_to_list(mask: str) -> list[int]:
    """Kernel/NCCL hex cpumask (``00000000,000000ff,ffffffff``; comma-separated 32-bit groups,
    most significant first) -> list of cpu ids."""
    m = (mask or "").strip().replace(",", "").lower()
    if m.startswith("0x"):
        m = m[2:]
    if not m:
        return []
    value = int(m, 16)
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


def source_record(name: str, status: str, detail: str = "") -> dict:
    assert status in ("ok", "unavailable", "partial", "error"), status
    return {"name": name, "status": status, "detail": detail}


def gpu_id(gpu: dict) -> str:
    return gpu.get("pci_bus_id") or f"GPU{gpu['index']}"


def nic_id(nic: dict) -> str:
    return nic.get("pci_bus_id") or nic["name"]


def cpu_id(numa: Optional[int]) -> str:
    return f"CPU{numa if numa is not None and numa >= 0 else 0}"


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
    doc["nics"].sort(key=lambda n: _natural(n["name"]))
    doc["switches"].sort(key=lambda s: s["id"])
    doc["links"].sort(key=_sort_key_link)
    doc["numa_nodes"].sort(key=lambda n: n["id"])
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
    """Deterministic JSON: sorted keys, 2-space indent, trailing newline."""
    return json.dumps(doc, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def dumps_yaml(doc: Any) -> str:
    import yaml  # lazy

    return yaml.safe_dump(doc, sort_keys=True, default_flow_style=False, allow_unicode=True)


def schema_path(name: str = "topology") -> str:
    from pathlib import Path

    return str(Path(__file__).with_name("schema") / f"{name}.schema.json")
