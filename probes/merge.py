"""Combine the partial documents of several sources into one topology document.

Precedence, attribute by attribute, filling only what is still missing:
explicit file (0) > nvml (10) > smi (20) > ib (25) > net (27) > sysfs (30) > numa (35) > default (90).
A partial's priority comes from its ``priority`` key when present, else from the name of its first
``sources`` record.

Identity:
  * GPUs are matched by normalised PCI bus id, falling back to the index for records that have no
    bus id (``nvidia-smi topo -m`` knows GPUs only as ``GPU<i>``, and nvidia-smi numbers them the
    way NVML does).  Links of every partial are rewritten to the merged GPU's final graph id, so a
    GPU called ``GPU0`` by one source and ``0000:18:00.0`` by another is one node.
  * NICs by name, falling back to bus id (the ``ib`` source names an RDMA function ``mlx5_0``, the
    ``net`` source would call the same function ``ens1f0np0``).
  * switches by id; links by (kind, a, b), unordered for the symmetric kinds (nvlink between two
    GPUs, smp, xgmi).
  * NVLink, C2C and xGMI links are *owned* by the highest-priority source that reports any link of
    that kind: NVML's GPU->NVSwitch links and the GPU<->GPU ``NV#`` links that topo -m implies
    describe the same wires, and must not be added up.

The matrix is computed from the merged PCI tree (:func:`gpucomm.probes.matrix.compute_matrix`) whenever a
device has a PCI parent; otherwise nvidia-smi's matrix is copied; otherwise it stays empty with a
warning.  When both exist and disagree, the computed one is kept and the difference is reported.
Like nvidia-smi, the matrix has columns only for RDMA NICs (``rdma`` not False).
"""
from __future__ import annotations

import copy
from typing import Optional

from gpucomm.probes.facts import nic_rate_gbps
from gpucomm.probes.model import gpu_id, new_document, nic_id, warn

PRIORITY = {"file": 0, "nvml": 10, "smi": 20, "nvidia-smi": 20, "ib": 25, "net": 27, "sysfs": 30, "numa": 35,
            "default": 90}
OWNED_LINK_KINDS = ("nvlink", "c2c", "xgmi")
SYMMETRIC_KINDS = ("smp", "xgmi")
EXTRA_LISTS = {"pci_devices": "bdf", "net_interfaces": "name"}
MERGED_SECTIONS = ("software",)   # mappings several sources fill, entry by entry (sources/swpath.py)
_CORE = {"schema", "host", "sources", "numa_nodes", "gpus", "nics", "switches", "links", "matrix", "warnings",
         "priority"}


def partial_priority(p: dict) -> int:
    pr = p.get("priority")
    if isinstance(pr, int) and not isinstance(pr, bool):
        return pr
    names = [s.get("name") for s in p.get("sources") or [] if isinstance(s, dict)]
    return min((PRIORITY.get(n, 50) for n in names), default=50)


def _source_name(p: dict) -> str:
    for s in p.get("sources") or []:
        if isinstance(s, dict) and s.get("name"):
            return str(s["name"])
    return "?"


def _empty(v) -> bool:
    return v is None or (isinstance(v, (list, dict, str)) and not v)


def fill(dst: dict, src: dict) -> None:
    """Copy into ``dst`` every attribute of ``src`` that ``dst`` lacks (None / empty)."""
    for k, v in src.items():
        if k.startswith("_"):
            continue
        if k not in dst or (_empty(dst[k]) and not _empty(v)):
            dst[k] = copy.deepcopy(v)
        elif isinstance(dst[k], dict) and isinstance(v, dict) and k in ("pcie", "acs", "p2p", "c2c", "fabric"):
            for kk, vv in v.items():
                if dst[k].get(kk) is None and vv is not None:
                    dst[k][kk] = copy.deepcopy(vv)


def merge(partials: list, provenance: str = "live") -> dict:
    """Merge partial documents (any order) into one document (not yet finalised)."""
    parts = [p for p in partials if isinstance(p, dict)]
    order = sorted(range(len(parts)), key=lambda i: (partial_priority(parts[i]), i))
    doc = new_document(provenance)

    for p in parts:  # sources and warnings keep probe order
        doc["sources"].extend(copy.deepcopy(s) for s in p.get("sources") or [])
        for w in p.get("warnings") or []:
            warn(doc, w)

    for i in order:
        for k, v in (parts[i].get("host") or {}).items():
            if k != "provenance" and doc["host"].get(k) is None and v is not None:
                doc["host"][k] = copy.deepcopy(v)

    numa: dict = {}
    for i in order:
        for n in parts[i].get("numa_nodes") or []:
            if n.get("id") in numa:
                fill(numa[n["id"]], n)
            else:
                numa[n["id"]] = copy.deepcopy(n)
    doc["numa_nodes"] = list(numa.values())

    gpus, gpu_maps = _merge_gpus(doc, parts, order)
    nics, nic_maps = _merge_nics(parts, order)
    doc["gpus"], doc["nics"] = gpus, nics

    switches: dict = {}
    for i in order:
        for s in parts[i].get("switches") or []:
            if s["id"] in switches:
                fill(switches[s["id"]], s)
            else:
                switches[s["id"]] = copy.deepcopy(s)
    doc["switches"] = list(switches.values())

    doc["links"] = _merge_links(parts, order, gpu_maps, nic_maps)

    for key, ident in EXTRA_LISTS.items():
        seen: dict = {}
        for i in order:
            for e in parts[i].get(key) or []:
                if isinstance(e, dict) and e.get(ident) not in seen:
                    seen[e.get(ident)] = copy.deepcopy(e)
                elif isinstance(e, dict):
                    fill(seen[e.get(ident)], e)
        if seen:
            doc[key] = list(seen.values())
    for i in order:
        for k, v in parts[i].items():
            if k not in _CORE and k not in doc:
                doc[k] = copy.deepcopy(v)
            elif k in MERGED_SECTIONS and isinstance(doc.get(k), dict) and isinstance(v, dict):
                for kk, vv in v.items():   # each source writes its own entries of the section
                    doc[k].setdefault(kk, copy.deepcopy(vv))

    _matrix(doc, parts, order)

    for g in doc["gpus"]:
        if not g.get("numa_affinity") and g.get("numa_node") is not None:
            g["numa_affinity"] = [g["numa_node"]]
        g["id"] = gpu_id(g)
    for n in doc["nics"]:
        n["rate_gbps"] = nic_rate_gbps(n)   # the one writer of this derived field (facts.nic_rate_gbps)
        n["id"] = nic_id(n)
    return doc


def _merge_gpus(doc: dict, parts: list, order: list) -> tuple:
    merged: list = []
    maps: dict = {}
    for i in order:
        src = _source_name(parts[i])
        idmap: dict = {}
        for g in parts[i].get("gpus") or []:
            m = _match_gpu(merged, g)
            if m is None:
                m = copy.deepcopy(g)
                m["_seen"] = [src]
                merged.append(m)
            else:
                fill(m, g)
                m["_seen"].append(src)
            idmap[gpu_id(g)] = m
            idmap[f"GPU{g['index']}"] = m
        maps[i] = idmap
    # A GPU that only a lower-priority source saw may carry an index a better source already gave
    # to another GPU (sysfs numbers by bus order): renumber it after the others, and say so.
    used: set = set()
    nvml_saw_gpus = any(_source_name(parts[i]) == "nvml" and parts[i].get("gpus") for i in order)
    for m in merged:
        if m["index"] in used:
            new = max(used | {g["index"] for g in merged}) + 1
            warn(doc, f"GPU {m.get('pci_bus_id') or m['index']}: index {m['index']} is already taken; "
                      f"numbered {new}")
            m["index"] = new
        used.add(m["index"])
        if nvml_saw_gpus and "nvml" not in m["_seen"] and m.get("pci_bus_id") and m.get("vendor") == "nvidia":
            warn(doc, f"GPU {m['pci_bus_id']} is on the PCI bus but NVML does not list it "
                      f"(driver did not attach, or the GPU fell off the bus)")
    for m in merged:
        m.pop("_seen", None)
    return merged, maps


def _match_gpu(merged: list, g: dict) -> Optional[dict]:
    b = g.get("pci_bus_id")
    if b:
        for m in merged:
            if m.get("pci_bus_id") == b:
                return m
        for m in merged:
            if not m.get("pci_bus_id") and m["index"] == g["index"]:
                return m
        return None
    for m in merged:
        if m["index"] == g["index"]:
            return m
    return None


def _merge_nics(parts: list, order: list) -> tuple:
    merged: list = []
    maps: dict = {}
    for i in order:
        idmap: dict = {}
        for n in parts[i].get("nics") or []:
            m = next((x for x in merged if x["name"] == n["name"]), None)
            if m is None and n.get("pci_bus_id"):
                m = next((x for x in merged if x.get("pci_bus_id") == n["pci_bus_id"]), None)
            if m is None:
                m = copy.deepcopy(n)
                merged.append(m)
            else:
                fill(m, n)
            idmap[nic_id(n)] = m
            idmap[n["name"]] = m
        maps[i] = idmap
    return merged, maps


def _merge_links(parts: list, order: list, gpu_maps: dict, nic_maps: dict) -> list:
    owner: dict = {}
    for i in order:
        for l in parts[i].get("links") or []:
            if l.get("kind") in OWNED_LINK_KINDS:
                owner.setdefault(l["kind"], i)
    out: dict = {}
    for i in order:
        gm, nm = gpu_maps.get(i, {}), nic_maps.get(i, {})

        def final(x: str) -> str:
            if x in gm:
                return gpu_id(gm[x])
            if x in nm:
                return nic_id(nm[x])
            return x

        gpu_ids = {gpu_id(m) for m in gm.values()}
        for l in parts[i].get("links") or []:
            kind = l.get("kind")
            if kind in owner and owner[kind] != i:
                continue
            a, b = final(l["a"]), final(l["b"])
            if a == b:
                continue
            sym = kind in SYMMETRIC_KINDS or (kind == "nvlink" and a in gpu_ids and b in gpu_ids)
            if sym and b < a:
                a, b = b, a
            key = (kind, a, b)
            rec = copy.deepcopy(l)
            rec["a"], rec["b"] = a, b
            if key in out:
                fill(out[key], rec)
            else:
                out[key] = rec
    return list(out.values())


def _matrix(doc: dict, parts: list, order: list) -> None:
    smi = next((parts[i]["matrix"] for i in order if parts[i].get("matrix")), None)
    has_tree = any(g.get("parent") for g in doc["gpus"]) or any(n.get("parent") for n in doc["nics"])
    if has_tree:
        from gpucomm.probes.matrix import compute_matrix

        compute_matrix(doc)
        # nvidia-smi lists only RDMA devices as NICs (every NIC legend in the captures is an
        # ibverbs name): plain Ethernet interfaces stay in nics/links but not in the matrix.
        plain = {n["name"] for n in doc["nics"] if n.get("rdma") is False}
        if plain:
            doc["matrix"] = {r: {c: v for c, v in row.items() if c not in plain}
                             for r, row in doc["matrix"].items() if r not in plain}
        if smi:
            _compare(doc, smi)
    elif smi:
        doc["matrix"] = copy.deepcopy(smi)
    elif doc["gpus"] or doc["nics"]:
        warn(doc, "matrix: no PCI tree (sysfs) and no nvidia-smi topo -m output; matrix not computed")


def _compare(doc: dict, smi: dict) -> None:
    diffs = []
    for r, row in sorted(doc["matrix"].items()):
        for c, v in sorted(row.items()):
            s = (smi.get(r) or {}).get(c)
            if s is not None and s != v and s != "N/A":
                diffs.append(f"{r}/{c}: {v} vs {s}")
    if diffs:
        warn(doc, f"matrix: the PCI tree gives a different answer than nvidia-smi topo -m in {len(diffs)} cell(s) "
                  f"({', '.join(diffs[:4])}{', ...' if len(diffs) > 4 else ''}); keeping the computed one")
