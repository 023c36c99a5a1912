"""Validation of every topology document on load, in one place: :func:`validate_document`.

``load_topology`` runs it on whatever it read (a saved JSON/YAML document, a capture's parse, a
snapshot's probe).  Problems are refused (exit 1, one line naming the file and the field) or
repaired with a warning naming the file and the field, never passed on silently:

refused
    a document that is not a ``gpucomm.topology/v1`` mapping; a device list, ``host``, ``matrix``,
    ``gpus[].nvlink``, ``gpus[].numa_affinity`` or ``nics[].ports`` of the wrong type; a GPU, NIC,
    switch, link or NUMA node that is not a mapping or lacks its identity (``index``, ``name``,
    ``id``, ``a``/``b``/``kind``); two GPUs with one index, PCI bus id or UUID; two NICs with one
    name; two different switches or NUMA nodes with one id; a switch with a GPU's or NIC's id; a
    GPU, NIC or switch that is its own PCI parent, a cycle of PCI parents, a PCI tree deeper than
    MAX_PCI_DEPTH (the planners walk it recursively); more devices than
    :mod:`gpucomm.probes.limits` allows.
repaired, with a warning
    any other field of the wrong type, out of range (negative counts or bandwidths, NaN, Infinity,
    absurd values) or not JSON (YAML timestamps, binary): unknown (``null``) or, where the schema
    has no ``null``, removed; list items of the wrong shape in ``sources``, ``warnings``,
    ``gpus[].nvlink``, ``nics[].ports``, ... : dropped; links to a device the document does not
    have, links of a device to itself, links of an unknown kind, NVLinks to a NIC, link counts
    above MAX_NVLINKS and bandwidths that are not a sane number: dropped; an exact copy of a switch
    or NUMA node: dropped; a GPU or NIC on a NUMA node the document does not have, NUMA distances
    of the wrong length, a GPU listing more than MAX_NVLINKS NVLinks: unknown; more than
    MAX_WARNINGS warnings: the rest counted in one line.

The types are the shipped JSON Schema's (``schema/topology.schema.json``) plus the fields gpucomm
reads that the schema leaves open (:data:`EXTRA`).  The same checks the typed view
(:class:`gpucomm.probes.topology.Topology`) applies later find nothing left to clean.

>>> doc = {"schema": "gpucomm.topology/v1", "gpus": [{"index": 0, "pcie": "x"}],
...        "links": [{"a": "GPU0", "b": "GPU0", "kind": "nvlink", "bw_GBps": 20.0}]}
>>> notes = []
>>> _ = validate_document(doc, "t.json", saved=True, report=notes.append)
>>> doc["gpus"][0]["pcie"], doc["links"]
(None, [])
>>> print("\\n".join(notes))
t.json: gpus[0].pcie is 'x' (expected a mapping or null); treated as unknown
t.json: links[0]: GPU0 linked to itself; link dropped
"""
from __future__ import annotations

import datetime
import json
import math
import re
from typing import Any, Callable, Optional

from gpucomm.probes.errors import InputError
from gpucomm.probes.limits import (MAX_GPUS, MAX_HOST_GPUS, MAX_HOST_NICS, MAX_NICS, MAX_NVLINKS, MAX_PCI_DEPTH,
                                   MAX_SWITCHES, MAX_WARNINGS)
from gpucomm.probes.model import SCHEMA, gpu_id, host_of, new_document, nic_id, parse_cpulist, schema_path, warn

_TYPES = {"gpus": list, "nics": list, "switches": list, "links": list, "numa_nodes": list,
          "sources": list, "warnings": list, "matrix": dict, "host": dict}

_MAX_SANE = 1e7        # facts.MAX_SANE: bandwidths, rates, counts
_MAX_INT = 2 ** 63
LINK_KINDS = ("nvlink", "pcie", "smp", "c2c", "xgmi", "net")

_NULL_STR = {"type": ["string", "null"]}
_NULL_INT = {"type": ["integer", "null"]}
_NULL_NUM = {"type": ["number", "null"], "minimum": 0}
_NULL_BOOL = {"type": ["boolean", "null"]}
_PCIE = {"type": ["object", "null"], "properties": {k: {"type": ["integer", "null"], "minimum": 0}
                                                   for k in ("gen", "width", "max_gen", "max_width")}}
_IDS = {"type": ["object", "null"], "additionalProperties": _NULL_STR}
_CPULIST = {"type": ["string", "null"], "x-cpulist": True}
_MAX_HOST_ID = 65535
_HOST = {"type": "integer", "minimum": 0, "maximum": _MAX_HOST_ID}   # hosts[].id of a device's host

# Fields gpucomm reads beyond (or more strictly than) the shipped schema, in the schema's dialect.
# "x-bad": what a wrong value means -- "refuse" (the document is broken), "drop" (the list item
# holding it is dropped), "drop-entry" (this entry of a mapping is dropped), default: unknown
# (null, or removed where null is not allowed).
EXTRA: dict = {
    "properties": {
        "host": {"x-bad": "refuse", "properties": {"iommu": _NULL_STR, "gdr": _NULL_STR, "provenance": {"x-bad": "unknown"}}},
        "gpus": {"x-bad": "refuse", "items": {"x-bad": "refuse", "properties": {
            "index": {"x-bad": "refuse", "maximum": 65535},
            "compute_capability": {"type": ["string", "number", "array", "null"]},
            "numa_affinity": {"x-bad": "refuse"},
            "nvlink": {"x-bad": "refuse", "items": {"x-bad": "drop", "properties": {
                "link": {"minimum": 0}, "version": {"minimum": 0}, "bw_GBps": {"minimum": 0},
                "remote_type": _NULL_STR}}},
            "cpu_affinity": _CPULIST, "pcie": _PCIE, "p2p": {"type": ["object", "null"], "additionalProperties": _NULL_STR},
            "gpu_numa_id": _NULL_INT, "id": _NULL_STR, "sm": {"type": ["integer", "null"], "minimum": 0},
            "gdr": _NULL_INT, "nccl_rank": _NULL_INT, "pci_ids": _IDS, "pci_device_id": _NULL_STR, "raw_parent": _NULL_STR,
            "index_inferred": _NULL_BOOL, "numa_node": {"maximum": 65535}, "memory_bytes": {"maximum": _MAX_INT},
            "host": _HOST, "local_index": {"type": ["integer", "null"], "minimum": 0, "maximum": 65535},
            "fabric": {"properties": {"clique_id": {"maximum": 0xFFFFFFFF}, "health_mask": {"maximum": 0xFFFFFFFF}}},
            "platform": {"properties": {k: {"maximum": 255} for k in ("slot", "tray_index", "host_id", "module_id")}},
            "persistence_mode": _NULL_BOOL, "ecc": {"type": ["object", "null"]},
            "retired_pages": {"type": ["object", "null"]}, "remapped_rows": {"type": ["object", "null"]}}}},
        "nics": {"x-bad": "refuse", "items": {"x-bad": "refuse", "properties": {
            "name": {"x-bad": "refuse"},
            "ports": {"x-bad": "refuse", "items": {"x-bad": "drop", "properties": {
                "port": {"x-bad": "drop"}, "phys_state": _NULL_STR, "link_layer": _NULL_STR, "netdev": _NULL_STR,
                "speed": _NULL_STR, "width": _NULL_STR}}},
            "rdma": _NULL_BOOL, "pcie": _PCIE, "pci_ids": _IDS, "fw_ver": _NULL_STR, "rate_gbps": _NULL_NUM,
            "operstate": _NULL_STR, "cpu_affinity": _CPULIST, "id": _NULL_STR, "sys_image_guid": _NULL_STR,
            "gdr": _NULL_INT, "nccl_dev": _NULL_INT, "nccl_busid": _NULL_STR, "raw_parent": _NULL_STR,
            "nccl_attrs": {"type": ["object", "null"], "additionalProperties": _NULL_STR},
            "numa_node": {"maximum": 65535}, "host": _HOST}}},
        "switches": {"x-bad": "refuse", "items": {"x-bad": "refuse", "properties": {
            "id": {"x-bad": "refuse"}, "kind": {"type": ["string", "null"], "enum": ["pcie", "nvswitch", "host_bridge", None]},
            "numa_node": _NULL_INT, "vendor": _NULL_STR, "device": _NULL_STR, "class": _NULL_STR,
            "subsystem_vendor": _NULL_STR, "subsystem_device": _NULL_STR, "domain": _NULL_STR, "raw_parent": _NULL_STR,
            "gen": {"type": ["integer", "null"], "minimum": 0}, "width": {"type": ["integer", "null"], "minimum": 0},
            "pcie": _PCIE, "bcm_gen": _NULL_INT, "host": _HOST,
            "acs": {"type": ["object", "null"], "additionalProperties": {"type": "array", "items": {"type": "string"}}}}}},
        "links": {"x-bad": "refuse", "items": {"x-bad": "refuse", "properties": {
            "a": {"x-bad": "refuse"}, "b": {"x-bad": "refuse"},
            "kind": {"type": "string", "x-bad": "refuse", "enum": None},  # an unknown kind: the link is dropped (below)
            "count": {"minimum": 0, "maximum": MAX_NVLINKS}, "bw_GBps": {"type": ["number", "null"], "minimum": 0, "x-bad": "refuse"},
            "gen": {"minimum": 0}, "width": {"minimum": 0}, "measured_bw_GBps": _NULL_NUM,
            "hops": _NULL_INT, "weight": _NULL_INT, "bw_estimated": _NULL_BOOL}}},
        "numa_nodes": {"x-bad": "refuse", "items": {"x-bad": "refuse", "properties": {
            "id": {"x-bad": "refuse", "minimum": 0, "maximum": 65535}, "cpus": {"x-cpulist": True},
            "distances": {"items": {"x-bad": "drop", "minimum": 0}},
            "arch": _NULL_STR, "vendor": _NULL_STR, "familyid": _NULL_INT, "modelid": _NULL_INT, "host": _HOST}}},
        "hosts": {"x-bad": "refuse", "items": {"x-bad": "refuse", "properties": {
            "id": {"x-bad": "refuse", "maximum": _MAX_HOST_ID}}}},
        "imex": {"properties": {"nodes": {"items": {"x-bad": "drop", "properties": {
            "index": {"x-bad": "drop", "maximum": 65535}}}}}},
        "sources": {"x-bad": "refuse", "items": {"x-bad": "drop", "properties": {
            "name": {"x-bad": "drop"}, "status": {"x-bad": "drop"}, "detail": {"type": ["string", "null"]}}}},
        "warnings": {"x-bad": "refuse", "items": {"x-bad": "drop"}},
        "matrix": {"x-bad": "refuse", "additionalProperties": {
            "type": "object", "x-bad": "drop-entry",
            "additionalProperties": {"type": "string", "x-bad": "drop-entry", "x-cell": True}}},
        "net_interfaces": {"type": "array", "items": {"type": "object", "x-bad": "drop", "properties": {
            "name": {"type": "string", "x-bad": "drop"}, "kind": _NULL_STR, "operstate": _NULL_STR,
            "pci_bus_id": _NULL_STR, "rdma": _NULL_STR, "speed_mbps": {"type": ["integer", "null"], "minimum": 0},
            "type": _NULL_STR}}},
        "pci_devices": {"type": "array", "items": {"type": "object", "x-bad": "drop", "properties": {
            "bdf": {"type": "string", "x-bad": "drop"}, "class": _NULL_STR, "device": _NULL_STR, "vendor": _NULL_STR,
            "subsystem_vendor": _NULL_STR, "subsystem_device": _NULL_STR, "parent": _NULL_STR, "raw_parent": _NULL_STR,
            "role": _NULL_STR, "numa_node": _NULL_INT, "gen": {"type": ["integer", "null"], "minimum": 0},
            "width": {"type": ["integer", "null"], "minimum": 0}}}},
        "measured": {"type": "object", "properties": {
            "p2p": {"type": "object", "additionalProperties": {"type": "object", "x-bad": "drop-entry", "additionalProperties": {
                "type": "object", "x-bad": "drop-entry", "properties": {"bw_GBps": _NULL_NUM, "lat_us": _NULL_NUM}}}},
            "host_device": {"type": ["object", "array", "null"]}, "collectives": {"type": ["object", "array", "null"]},
            "process_p2p": {"type": ["object", "array", "null"]}}},
        "nccl_graph": {"type": "object"},
        "software": {"type": "object", "additionalProperties": {"type": "object", "x-bad": "drop-entry", "properties": {
            "status": {"type": "string", "enum": ["found", "absent", "unreadable"]}, "why": {"type": ["string", "null"]}}}},
        "planted_fault": _NULL_STR,
    },
}

_SPEC: Optional[dict] = None
_NV_CELL = re.compile(r"^NV(\d+)$")
_CPU_ID = re.compile(r"^(?:\d{1,5}/)?CPU(?:-1|\d{1,5})$")   # CPU-1: an NCCL XML CPU without a NUMA node beside real ones


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        if k in ("properties", "additionalProperties", "items") and isinstance(v, dict) and isinstance(out.get(k), dict):
            if k == "properties":
                props = dict(out[k])
                for name, sub in v.items():
                    props[name] = _merge(props.get(name, {}), sub)
                out[k] = props
            else:
                out[k] = _merge(out[k], v)
        elif k == "enum" and v is None:
            out.pop("enum", None)
        else:
            out[k] = v
    return out


def spec() -> dict:
    """The shipped JSON Schema merged with :data:`EXTRA` (what :func:`validate_document` checks)."""
    global _SPEC
    if _SPEC is None:
        with open(schema_path("topology"), encoding="utf-8") as f:
            _SPEC = _merge(json.load(f), EXTRA)
    return _SPEC


# --------------------------------------------------------------------------------------------
def _short(v: Any) -> str:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, (dict, list)):
        return f"a {'mapping' if isinstance(v, dict) else 'list'}" if v else ("{}" if isinstance(v, dict) else "[]")
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


_NAMES = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "true/false",
          "null": "null", "object": "a mapping", "array": "a list"}


def _expected(s: dict) -> str:
    types = s.get("type")
    types = [types] if isinstance(types, str) else list(types or [])
    if s.get("enum"):
        words = "one of " + ", ".join(str(e) for e in s["enum"] if e is not None) + (" or null" if None in s["enum"] else "")
    else:
        words = " or ".join(_NAMES.get(t, t) for t in types) or "a value"
    if "minimum" in s:
        words += f" >= {s['minimum']}"
    if s.get("x-cpulist"):
        words = "a CPU list like 0-31,64-95" + (" or null" if "null" in types else "")
    if s.get("x-cell"):
        words = "an nvidia-smi code: X, NV# (up to 4 digits), PIX, PXB, PHB, NODE, SYS"
    return words


def _type_ok(v: Any, t: str) -> bool:
    if t == "null":
        return v is None
    if t == "boolean":
        return isinstance(v, bool)
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if t == "string":
        return isinstance(v, str)
    if t == "object":
        return isinstance(v, dict)
    if t == "array":
        return isinstance(v, list)
    return True


def _ok(v: Any, s: dict) -> bool:
    types = s.get("type")
    if types is not None:
        types = [types] if isinstance(types, str) else types
        if not any(_type_ok(v, t) for t in types):
            return False
    if "const" in s and v != s["const"]:
        return False
    if s.get("enum") is not None and v not in s["enum"]:
        return False
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if isinstance(v, float) and not math.isfinite(v):
            return False
        if abs(v) > (_MAX_INT if isinstance(v, int) else _MAX_SANE) and "maximum" not in s:
            return False
        if "minimum" in s and v < s["minimum"]:
            return False
        if "maximum" in s and v > s["maximum"]:
            return False
    if isinstance(v, str):
        if s.get("x-cpulist") and v:
            try:
                parse_cpulist(v)
            except (ValueError, TypeError):
                return False
        if s.get("x-cell"):
            m = _NV_CELL.match(v)
            if m and len(m.group(1)) > 4:
                return False
    return True


class _Drop(Exception):
    """The list item holding the bad field is dropped (_DropEntry: the mapping entry itself)."""

    def __init__(self, where: str, v: Any, s: dict) -> None:
        super().__init__(where)
        self.where, self.what = where, f"is {_short(v)} (expected {_expected(s)})"

    def note(self, at: str) -> str:
        return f"{self.what}; dropped" if self.where == at else f"dropped: {self.where} {self.what}"


class _DropEntry(_Drop):
    pass


class _Validator:
    def __init__(self, path: str) -> None:
        self.path = path
        self.notes: dict = {}   # (generic field, reason) -> [concrete examples]

    def note(self, where: str, reason: str) -> None:
        generic = re.sub(r"\[\d+\]", "[]", where)
        self.notes.setdefault((generic, reason), []).append(where)

    def refuse(self, where: str, v: Any, s: dict) -> None:
        raise InputError(f"{where} is {_short(v)}", self.path, expected=_expected(s))

    # ---- generic: values JSON cannot hold -------------------------------------------------
    def scrub(self, doc: Any) -> None:
        """NaN/Infinity, non-JSON values (YAML timestamps, binary, sets) and non-string keys,
        anywhere in the document: unknown, with a note (iterative: depth is already bounded)."""
        stack = [(doc, "")]
        while stack:
            o, where = stack.pop()
            if isinstance(o, dict):
                for k in list(o):
                    w = f"{where}.{k}" if where else str(k)
                    if not isinstance(k, str):
                        v = o.pop(k)
                        if isinstance(k, (int, float, bool)) or k is None:
                            nk = json.dumps(k) if not isinstance(k, float) or math.isfinite(k) else str(k)
                            if nk not in o:
                                o[nk] = v
                                self.note(w, f"key {_short(k)} is not text; read as {nk!r}")
                                stack.append((v, w))
                                continue
                        self.note(w, f"key {_short(k)} is not text; dropped")
                        continue
                    self._scrub_value(o, k, w, stack)
            elif isinstance(o, list):
                for i in range(len(o)):
                    self._scrub_value(o, i, f"{where}[{i}]", stack)

    def _scrub_value(self, c: Any, k: Any, w: str, stack: list) -> None:
        v = c[k]
        if isinstance(v, (dict, list)):
            stack.append((v, w))
        elif isinstance(v, float) and not math.isfinite(v):
            c[k] = None
            self.note(w, f"is {v} (expected a finite number); treated as unknown")
        elif isinstance(v, (datetime.date, datetime.datetime)):
            c[k] = v.isoformat()
        elif not (v is None or isinstance(v, (str, int, float, bool))):
            c[k] = None
            self.note(w, f"is a {type(v).__name__}, not a JSON value; treated as unknown")

    # ---- the schema --------------------------------------------------------------------------
    def walk(self, obj: dict, s: dict, where: str) -> None:
        props = s.get("properties") or {}
        addl = s.get("additionalProperties")
        for key in list(obj):
            sub = props.get(key)
            if sub is None and isinstance(addl, dict):
                sub = addl
            if sub is None:
                continue
            w = f"{where}.{key}" if where else key
            try:
                self.value(obj, key, sub, w)
            except _DropEntry as d:  # an entry of a mapping (a matrix cell, a measured pair)
                del obj[key]
                self.note(w, d.note(w))

    def value(self, c: dict, key: str, s: dict, where: str) -> None:
        v = c[key]
        if not _ok(v, s):
            bad = s.get("x-bad")
            if bad == "refuse":
                self.refuse(where, v, s)
            if bad == "drop":
                raise _Drop(where, v, s)
            if bad == "drop-entry":
                raise _DropEntry(where, v, s)
            types = s.get("type")
            types = [types] if isinstance(types, str) else list(types or [])
            if "null" in types or (s.get("enum") and None in s["enum"]) or (not types and not s.get("enum")):
                c[key] = None
            else:
                del c[key]
            self.note(where, f"is {_short(v)} (expected {_expected(s)}); treated as unknown")
            return
        if isinstance(v, dict):
            self.walk(v, s, where)
        elif isinstance(v, list) and isinstance(s.get("items"), dict):
            self.items(v, s["items"], where)

    def items(self, lst: list, s: dict, where: str) -> None:
        keep = []
        for i, it in enumerate(lst):
            w = f"{where}[{i}]"
            try:
                if not _ok(it, s):
                    if s.get("x-bad") == "refuse":
                        self.refuse(w, it, s)
                    raise _Drop(w, it, s)
                if isinstance(it, dict):
                    self.walk(it, s, w)
                elif isinstance(it, list) and isinstance(s.get("items"), dict):
                    self.items(it, s["items"], w)
            except _Drop as d:
                self.note(w, d.note(w))
                continue
            keep.append(it)
        lst[:] = keep

    # ---- meaning -----------------------------------------------------------------------------
    def semantics(self, doc: dict) -> None:
        """Duplicates, the PCI tree (cycles, depth), NUMA references, dangling, self and impossible
        links, unknown link kinds (every kind of input)."""
        gpus = [g for g in doc.get("gpus") or [] if isinstance(g, dict)]
        by_index: dict = {}
        by_bus: dict = {}
        for i, g in enumerate(gpus):
            idx = g.get("index")
            if idx in by_index:
                raise InputError(f"gpus[{i}].index {idx} is also gpus[{by_index[idx]}]'s", self.path,
                                 expected="one index per GPU")
            by_index[idx] = i
            b = g.get("pci_bus_id")
            if isinstance(b, str) and b:
                key = (host_of(g), b.lower())   # hosts of one NVLink domain share bus ids
                if key in by_bus:
                    raise InputError(f"gpus[{i}] (GPU{idx}) and gpus[{by_bus[key]}] share PCI bus id {b}"
                                     + (f" on host {key[0]}" if key[0] else ""),
                                     self.path, expected="one bus id per GPU and host")
                by_bus[key] = i
        for i, g in enumerate(gpus):
            if isinstance(g.get("nvlink"), list) and len(g["nvlink"]) > MAX_NVLINKS:
                self.note(f"gpus[{i}].nvlink", f"lists {len(g['nvlink'])} NVLinks, more than the {MAX_NVLINKS} a GPU "
                                               "can have; treated as unknown")
                g["nvlink"] = []
        self.unique(gpus, "gpus", "uuid")
        self.unique([n for n in doc.get("nics") or [] if isinstance(n, dict)], "nics", "name", per_host=True)
        self.unique_records(doc, "switches", "id")
        self.unique_records(doc, "numa_nodes", "id")
        self.pci_tree(doc)
        self.numa_references(doc)
        known = set()
        nic_ids = set()
        for g in gpus:
            if isinstance(g.get("index"), int):
                known.add(f"GPU{g['index']}")
                known.add(gpu_id(g))
        for n in doc.get("nics") or []:
            if isinstance(n, dict) and isinstance(n.get("name"), str):
                known.add(n["name"])
                nic_ids.add(n["name"])
                if isinstance(n.get("pci_bus_id"), str):
                    known.add(nic_id(n))
                    nic_ids.add(nic_id(n))
        for s in doc.get("switches") or []:
            if isinstance(s, dict):
                known.update(x for x in (s.get("id"), s.get("pci_bus_id")) if isinstance(x, str))
        links = doc.get("links")
        if not isinstance(links, list):
            return
        keep = []
        for i, l in enumerate(links):
            if not isinstance(l, dict) or not all(isinstance(l.get(k), str) for k in ("a", "b", "kind")):
                keep.append(l)  # refused by check_document for a saved document; the view drops it
                continue
            w = f"links[{i}]"
            if l["kind"] not in LINK_KINDS:
                self.note(w, f"unknown kind {_short(l['kind'])}; link dropped")
                continue
            if l["a"] == l["b"]:
                self.note(w, f"{l['a']} linked to itself; link dropped")
                continue
            missing = [e for e in (l["a"], l["b"]) if e not in known and e != "NVS" and not _CPU_ID.match(e)]
            if missing:
                self.note(w, f"{l['kind']} link {l['a']}-{l['b']}: no device {missing[0]} in this document; link dropped")
                continue
            if l["kind"] == "nvlink" and (l["a"] in nic_ids or l["b"] in nic_ids):
                nic = l["a"] if l["a"] in nic_ids else l["b"]
                self.note(w, f"NVLink {l['a']}-{l['b']}: {nic} is a NIC, which has no NVLink; link dropped")
                continue
            count, bw = l.get("count"), l.get("bw_GBps")
            if isinstance(count, int) and not isinstance(count, bool) and not 0 <= count <= MAX_NVLINKS:
                self.note(w, f"{l['kind']} link {l['a']}-{l['b']}: count {_short(count)} (expected 0 to "
                             f"{MAX_NVLINKS} links); link dropped")
                continue
            if isinstance(bw, (int, float)) and not isinstance(bw, bool) and not 0 <= bw <= _MAX_SANE:
                self.note(w, f"{l['kind']} link {l['a']}-{l['b']}: bw_GBps {_short(bw)} (expected 0 to "
                             f"{_MAX_SANE:g}); link dropped")
                continue
            keep.append(l)
        links[:] = keep

    def unique(self, items: list, key: str, field: str, per_host: bool = False) -> None:
        """Refuse two ``key`` items with one ``field`` value (UUIDs; NIC names, ``per_host``: the hosts
        of a multi-host document each have their mlx5_0)."""
        seen: dict = {}
        for i, it in enumerate(items):
            v = it.get(field)
            if isinstance(v, str) and v:
                k = (host_of(it), v) if per_host else v
                if k in seen:
                    raise InputError(f"{key}[{i}].{field} {_short(v)} is also {key}[{seen[k]}]'s", self.path,
                                     expected=f"one {field} per {'GPU' if key == 'gpus' else 'NIC'}")
                seen[k] = i

    def unique_records(self, doc: dict, key: str, field: str) -> None:
        """Switches / NUMA nodes: an exact copy of an earlier record is dropped with a note, two
        different records with one ``field`` are refused."""
        items = doc.get(key)
        if not isinstance(items, list):
            return
        seen: dict = {}
        keep = []
        for i, it in enumerate(items):
            v = it.get(field) if isinstance(it, dict) else None
            if v is None or isinstance(v, (dict, list)):
                keep.append(it)
                continue
            v = (host_of(it), v)   # the hosts of a multi-host document share NUMA ids and bus ids
            if v in seen:
                j, first = seen[v]
                if it == first:
                    self.note(f"{key}[{i}]", f"a copy of {key}[{j}] ({field} {_short(v[1])}); dropped")
                    continue
                raise InputError(f"{key}[{i}].{field} {_short(v[1])} is also {key}[{j}]'s", self.path,
                                 expected=f"one record per {field}")
            seen[v] = (i, it)
            keep.append(it)
        items[:] = keep

    def pci_tree(self, doc: dict) -> None:
        """Refuse a PCI tree the planners cannot walk: a device or switch that is its own parent, a
        cycle of parents, a switch that has a GPU's or NIC's id, or a device more than
        MAX_PCI_DEPTH levels below its CPU (iteratively: the tree is not trusted yet)."""
        where: dict = {}     # graph id -> the record's place in the document
        parent: dict = {}    # graph id -> parent graph id
        devices: dict = {}
        for key, id_of in (("gpus", gpu_id), ("nics", nic_id)):
            for i, r in enumerate(doc.get(key) or []):
                if isinstance(r, dict) and (key != "gpus" or isinstance(r.get("index"), int)) and \
                        (key != "nics" or isinstance(r.get("name"), str)):
                    rid = id_of(r)
                    devices[rid] = devices[rid.lower()] = f"{key}[{i}]"
                    where[rid], parent[rid] = f"{key}[{i}]", r.get("parent")
        for i, s in enumerate(doc.get("switches") or []):
            if not isinstance(s, dict) or not isinstance(s.get("id"), str):
                continue
            sid = s["id"]
            clash = devices.get(sid) or devices.get(sid.lower())
            if clash:
                raise InputError(f"switches[{i}].id {_short(sid)} is also {clash}'s id", self.path,
                                 expected="a switch id no GPU or NIC has")
            where[sid], parent[sid] = f"switches[{i}]", s.get("parent")
        depth: dict = {}
        for start in where:
            chain = []
            on_chain: set = set()
            x = start
            while x in where and x not in depth:
                p = parent[x]
                if p == x:
                    noun = {"gpus": "GPU", "nics": "NIC", "switches": "switch"}[where[x].split("[")[0]]
                    raise InputError(f"{where[x]}.parent {_short(p)} is the {noun} itself",
                                     self.path, expected="the id of the PCI switch or CPU above it")
                if x in on_chain:
                    cyc = chain[chain.index(x):] + [x]
                    raise InputError(f"{where[cyc[0]]}.parent: the PCI parents form a cycle "
                                     f"({' -> '.join(map(str, cyc[:6]))}{' -> ...' if len(cyc) > 6 else ''})",
                                     self.path, expected="a tree of PCI switches below the CPUs")
                chain.append(x)
                on_chain.add(x)
                if not isinstance(p, str):
                    break
                x = p
            base = depth.get(x, 0) if x in depth else 0
            for k, node in enumerate(reversed(chain)):
                depth[node] = base + k + 1
                if depth[node] > MAX_PCI_DEPTH:
                    raise InputError(f"{where[node]} is {depth[node]} levels below its CPU in the PCI tree, more "
                                     f"than {MAX_PCI_DEPTH}", self.path,
                                     expected=f"a PCI tree at most {MAX_PCI_DEPTH} levels deep (README: Limits)")

    def numa_references(self, doc: dict) -> None:
        """A GPU or NIC on a NUMA node the document does not have, distances of the wrong length:
        treated as unknown, with a note."""
        nodes = [n for n in doc.get("numa_nodes") or [] if isinstance(n, dict)]
        if not nodes:
            return
        ids: dict = {}   # host -> its NUMA ids (the hosts of a multi-host document each have their own)
        for n in nodes:
            ids.setdefault(host_of(n), set()).add(n.get("id"))
        for key in ("gpus", "nics"):
            for i, r in enumerate(doc.get(key) or []):
                v = r.get("numa_node") if isinstance(r, dict) else None
                have = ids.get(host_of(r), set())
                if isinstance(v, int) and not isinstance(v, bool) and v not in have and have:
                    r["numa_node"] = None
                    self.note(f"{key}[{i}].numa_node", f"NUMA node {v} is not in this document's numa_nodes "
                                                      f"({', '.join(str(x) for x in sorted(have, key=str)[:8])}); "
                                                      "treated as unknown")
        for i, n in enumerate(doc.get("numa_nodes") or []):
            d = n.get("distances") if isinstance(n, dict) else None
            count = len(ids.get(host_of(n), ())) if isinstance(n, dict) else 0
            if isinstance(d, list) and d and len(d) != count:
                n["distances"] = None
                self.note(f"numa_nodes[{i}].distances", f"has {len(d)} entries for {count} NUMA nodes; "
                                                         "treated as unknown")

    def messages(self) -> list:
        out = []
        for (generic, reason), wheres in self.notes.items():
            sep = " " if reason.startswith("is ") else ": "
            if len(wheres) == 1:
                out.append(f"{wheres[0]}{sep}{reason}")
            else:
                shown = ", ".join(wheres[:3]) + (", ..." if len(wheres) > 3 else "")
                out.append(f"{generic} ({len(wheres)} items: {shown}){sep}{reason}")
        return out


def _caps(doc: dict, path: str) -> None:
    for key, limit in (("gpus", MAX_GPUS), ("nics", MAX_NICS), ("switches", MAX_SWITCHES)):
        v = doc.get(key)
        if isinstance(v, list) and len(v) > limit:
            raise InputError(f"{len(v)} {key}, more than the limit of {limit} per document", path,
                             expected=f"at most {limit} {key} (docs/LIMITS.md)")
    for key, limit in (("gpus", MAX_HOST_GPUS), ("nics", MAX_HOST_NICS)):
        per: dict = {}
        for r in doc.get(key) if isinstance(doc.get(key), list) else []:
            h = host_of(r)
            per[h] = per.get(h, 0) + 1
            if per[h] > limit:
                raise InputError(f"more than {limit} {key} on " + (f"host {h}" if h else "the node"), path,
                                 expected=f"at most {limit} {key} per host (docs/LIMITS.md)")
    m = doc.get("matrix")
    if isinstance(m, dict) and len(m) > MAX_GPUS + MAX_NICS:
        raise InputError(f"a matrix of {len(m)} rows, more than the limit of {MAX_GPUS + MAX_NICS}", path,
                         expected="at most one row per GPU and NIC (docs/LIMITS.md)")


def _cap_warnings(doc: dict) -> None:
    """A saved document's warnings as :func:`gpucomm.probes.model.warn` keeps them: distinct, each at
    most 500 characters, at most MAX_WARNINGS and then one line counting the rest."""
    ws = doc.get("warnings")
    if not isinstance(ws, list) or not all(isinstance(w, str) for w in ws) or (
            len(ws) <= MAX_WARNINGS and len(set(ws)) == len(ws) and all(len(w) <= 500 for w in ws)):
        return
    marker = f"more than {MAX_WARNINGS} warnings; "
    out: list = []
    seen: set = set()
    rest = 0
    for w in ws:
        w = w if len(w) <= 500 else w[:497] + "..."
        if w in seen or w.startswith(marker):
            continue
        seen.add(w)
        if len(out) < MAX_WARNINGS:
            out.append(w)
        else:
            rest += 1
    if rest:
        out.append(f"{marker}{rest} more are left out")
    ws[:] = out


def check_document(doc: Any, path: str) -> dict:
    """Structural check of a user's document: the top level and the device lists (one line, the
    first problem).  Fills the fields a document may leave out."""
    if not isinstance(doc, dict):
        raise InputError(f"top level is {type(doc).__name__}", path, expected="a mapping with schema: " + SCHEMA)
    if doc.get("schema") != SCHEMA:
        raise InputError(f"schema is {_short(doc.get('schema'))}", path, expected=repr(SCHEMA))
    base = new_document(doc.get("host", {}).get("provenance", "json") if isinstance(doc.get("host"), dict) else "json")
    for key, typ in _TYPES.items():
        if key not in doc:
            doc[key] = base[key]
        elif not isinstance(doc[key], typ):
            raise InputError(f"field {key!r} is {type(doc[key]).__name__}", path, expected=typ.__name__)
    _caps(doc, path)
    for i, g in enumerate(doc["gpus"]):
        if not isinstance(g, dict) or not isinstance(g.get("index"), int) or isinstance(g.get("index"), bool):
            raise InputError(f"gpus[{i}] has no integer index", path, expected="{index: int, ...}")
        for k, t in (("nvlink", list), ("numa_affinity", list)):
            if k in g and not isinstance(g[k], t):
                raise InputError(f"gpus[{i}].{k} is {type(g[k]).__name__}", path, expected=t.__name__)
        g.setdefault("nvlink", [])
        g.setdefault("numa_affinity", [])
        g.setdefault("vendor", "nvidia")
    for i, n in enumerate(doc["nics"]):
        if not isinstance(n, dict) or not isinstance(n.get("name"), str) or not n.get("name"):
            raise InputError(f"nics[{i}] has no name", path, expected="{name: str, ...}")
        if "ports" in n and not isinstance(n["ports"], list):
            raise InputError(f"nics[{i}].ports is {type(n['ports']).__name__}", path, expected="list")
        n.setdefault("ports", [])
    for i, l in enumerate(doc["links"]):
        if not isinstance(l, dict) or not all(isinstance(l.get(k), str) for k in ("a", "b", "kind")):
            raise InputError(f"links[{i}] lacks a/b/kind strings", path, expected="{a, b, kind, bw_GBps}")
    for i, s in enumerate(doc["switches"]):
        if not isinstance(s, dict) or not isinstance(s.get("id"), str):
            raise InputError(f"switches[{i}] has no id", path, expected="{id, kind}")
    for i, n in enumerate(doc["numa_nodes"]):
        if not isinstance(n, dict) or not isinstance(n.get("id"), int) or isinstance(n.get("id"), bool):
            raise InputError(f"numa_nodes[{i}] has no integer id", path, expected="{id: int, cpus, ...}")
    for k, row in doc["matrix"].items():
        if not isinstance(row, dict):
            raise InputError(f"matrix row {k!r} is not a mapping of strings", path)
    return doc


def validate_document(doc: Any, path: str, saved: bool = False,
                      report: Optional[Callable[[str], None]] = None) -> dict:
    """Check ``doc`` (read from ``path``) and repair what can be repaired; see the module
    docstring.  ``saved``: a document a user wrote or edited (JSON/YAML), held to the schema;
    otherwise one of gpucomm's own readers built it, and only the device limits and the meaning
    of its links are checked.  Each repair is a warning in the document and goes to ``report``."""
    v = _Validator(path)
    if saved:
        if isinstance(doc, dict):
            v.scrub(doc)
        check_document(doc, path)
        v.walk(doc, spec(), "")
        _cap_warnings(doc)
    elif isinstance(doc, dict):
        _caps(doc, path)
    if isinstance(doc, dict):
        v.semantics(doc)
        for msg in v.messages():
            line = f"{path}: {msg}"
            if isinstance(doc.get("warnings"), list):
                warn(doc, line)
            if report is not None:
                report(line)
    return doc


__all__ = ["validate_document", "check_document", "spec", "EXTRA", "LINK_KINDS"]
