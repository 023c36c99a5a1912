"""``gpucomm diff A B [C ...]``: what differs between nodes' topologies, and which node is odd.

Each document is flattened into ``attribute -> value`` pairs that should be equal on identical
nodes (:func:`fingerprint`): GPU models and count, per-GPU PCIe width and maximum, NUMA node, CPU
affinity, active NVLink count, every matrix cell (NV#, PIX, ...), NICs with their ports' state
and rate, NUMA layout, driver/CUDA versions, IOMMU/GPUDirect state.  Attributes that are
naturally different on every node (hostname, UUIDs, GUIDs, collection time) are left out, and an
attribute one input does not know (``None``: e.g. the driver version of a ``topo -m`` capture) is
not counted as a difference; a device present on one node and absent on another is.

With three or more inputs every attribute gets a majority value (the most common one, when it is
unique) and each input counts the attributes where it departs from it; the **outlier** is the
single input with the highest count (none when tied): the odd node out of a cluster.

Fleets: the inputs are read one at a time (:func:`diff_stream` takes an iterator) and only their
fingerprints are kept, one per **class** of identical nodes -- a node costs its name and its class
number, not its document, so 10,000 saved topologies are compared in constant memory per node.
With three or more inputs the report also lists the classes (largest first, with the attributes
where each departs from the majority) and the **outliers**: every input outside the largest class,
when one class is larger than every other.

Exit status (gpucomm_cli): 0 when the inputs are identical, 5 when they differ -- the ``diff(1)``
convention, shifted because 1 is gpucomm's "bad input" code.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Any, Optional

from gpucomm.planners.health.stream import VOLATILE_KEYS, NodeClasses, stream_sources
from gpucomm.probes.model import natural_key as _natural
from gpucomm.probes.topology import PCIe, Topology, json_scalar

SCHEMA = "gpucomm.diff/v1"


def _pcie_text(p: Optional[PCIe]) -> Optional[str]:
    if p is None:
        return None
    # current gen is left out on purpose: GPUs drop PCIe speed when idle, width does not change.
    w, mw, mg = p.width, p.max_width, p.max_gen
    if w is None and mw is None:
        return None
    s = f"x{w}" if w is not None else "x?"
    if mw is not None or mg is not None:
        s += f" (max {'Gen' + str(mg) + ' ' if mg else ''}x{mw if mw is not None else '?'})"
    return s


def _gib(v: Optional[int]) -> Optional[int]:
    return round(v / (1 << 30)) if v is not None else None


def fingerprint(topo) -> dict:
    """Flatten a topology (a :class:`Topology` or a document) into comparable attributes (see the
    module docstring)."""
    from gpucomm.planners.health.doctor import nvlink_totals

    topo = Topology.of(topo)
    fp: dict = {}
    for k in ("driver_version", "cuda_version", "cpu_vendor", "cpu_model", "cpu_arch", "sockets", "os", "kernel",
              "iommu", "gdr"):
        fp[f"host.{k}"] = json_scalar(topo.host.get(k))
    gpus = topo.gpus    # in index order
    fp["gpus.count"] = len(gpus)
    # a GPU without a name (an NCCL XML names none) makes the summary unknown, not a difference
    models = Counter(g.name for g in gpus)
    fp["gpus.models"] = (", ".join(f"{n}x {m}" for m, n in sorted(models.items()))
                         if gpus and None not in models else None)
    nvl = nvlink_totals(topo)
    for g in gpus:
        k = g.key
        fp[f"{k}.present"] = True
        fp[f"{k}.name"] = g.name
        fp[f"{k}.pci_bus_id"] = g.pci_bus_id
        fp[f"{k}.memory_GiB"] = _gib(g.memory_bytes)
        fp[f"{k}.compute_capability"] = g.compute_capability
        fp[f"{k}.numa_node"] = g.numa_node
        fp[f"{k}.cpu_affinity"] = g.cpu_affinity
        fp[f"{k}.pcie"] = _pcie_text(g.pcie)
        fp[f"{k}.nvlinks_active"] = nvl.get(k, (None,))[0]
        fp[f"{k}.mig"] = g.mig
    nics = sorted(topo.nics, key=lambda n: _natural(n.name))
    fp["nics.count"] = len(nics)
    for n in nics:
        k = n.name
        fp[f"{k}.present"] = True
        fp[f"{k}.pci_bus_id"] = n.pci_bus_id
        fp[f"{k}.numa_node"] = n.numa_node
        fp[f"{k}.link_layer"] = n.link_layer
        fp[f"{k}.fw_ver"] = n.fw_ver
        fp[f"{k}.pcie"] = _pcie_text(n.pcie)
        for p in n.ports:
            fp[f"{k}.port{p.port}.state"] = p.state
            fp[f"{k}.port{p.port}.rate_gbps"] = p.rate_gbps
    numa = sorted(topo.cpus.values(), key=lambda c: c.numa)
    fp["numa.count"] = len(numa) if numa else None
    for c in numa:
        fp[f"numa{c.numa}.cpus"] = c.cpulist
        fp[f"numa{c.numa}.memory_GiB"] = _gib(c.memory_bytes)
    kinds = Counter(s.kind for s in topo.switches.values())
    for kind in ("pcie", "nvswitch", "host_bridge"):
        fp[f"switches.{kind}"] = kinds.get(kind, 0) if topo.switches else None
    # PCIe link widths/gens from each GPU/NIC to its parent (down-trained links show here)
    names = {g.id: g.key for g in gpus}
    names.update({n.id: n.name for n in nics})
    for l in topo.links:
        if l.kind == "pcie" and l.a in names:
            # both known, or not compared (an NCCL XML's link_width="0": NCCL could not read it)
            fp[f"{names[l.a]}.uplink"] = f"Gen{l.gen} x{l.width}" if l.gen and l.width else None
    m = topo.matrix
    keys = sorted(m, key=_natural)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            x, y = (m.get(a) or {}).get(b), (m.get(b) or {}).get(a)
            if x is None and y is None:
                continue
            fp[f"matrix.{a}.{b}"] = x if x == y or y is None else f"{x}/{y}"
    return fp


def _presence(attr: str) -> bool:
    """Attributes where "absent" is a value of its own (a GPU missing from one node)."""
    return attr.endswith(".present") or attr in ("gpus.count", "nics.count")


def diff_documents(named: list) -> dict:
    """``named`` = [(input name, topology), ...] (2 or more; a :class:`Topology` or a document each)
    -> the ``gpucomm.diff/v1`` report."""
    return diff_stream(iter(named))


def _class_key(fp: dict) -> str:
    return repr(sorted(fp.items()))


def _summary(topo: Topology) -> dict:
    """What a fleet report says about an input given as a view: host name, provenance, GPU and NIC
    counts (:func:`stream_sources` gives the same summary of each input it loads)."""
    return {"hostname": topo.host.get("hostname"), "provenance": topo.host.get("provenance"), "gpus": len(topo.gpus),
            "nics": len(topo.nics)}


def diff_sources(named_sources, fingerprints: Optional[list] = None) -> dict:
    """:func:`diff_stream` over (name, source) pairs (:func:`stream_sources`)."""
    return diff_stream(stream_sources(named_sources, VOLATILE_KEYS), fingerprints)


def diff_stream(named, fingerprints: Optional[list] = None) -> dict:
    """:func:`diff_documents` over an iterable of (name, topology[, content key, summary]) items,
    read one at a time: each topology is reduced to its fingerprint and dropped; nodes with the
    same fingerprint share one, and an item whose content key was seen before takes that input's
    class without a fingerprint of its own (its document may then be None, its summary given:
    :func:`stream_sources`).
    ``fingerprints``: a list that receives each input's fingerprint (one object per class)."""
    names: list = []
    seen: Counter = Counter()
    inputs: list = []
    grouped = NodeClasses(fingerprint, _class_key)
    member, classes, first_member = grouped.member, grouped.classes, grouped.first_member
    for item in named:
        name, topo = item[0], item[1]
        text_key = item[2] if len(item) > 2 else None
        seen[name] += 1
        names.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
        if topo is None:     # stream_sources: same text as an earlier input, which has the class
            inputs.append({"name": names[-1], **item[3]})
        else:
            topo = Topology.of(topo)
            inputs.append({"name": names[-1], **_summary(topo)})
        c = grouped.add(topo, text_key)
        if fingerprints is not None:
            fingerprints.append(classes[c])
    n = len(names)
    size = Counter(member)
    attrs = sorted(set().union(*[fp.keys() for fp in classes]), key=_attr_key)
    diffs = []
    departs = [[] for _ in classes]   # class -> attributes where it departs from the majority
    for a in attrs:
        default = False if a.endswith(".present") else None
        cvals = [fp.get(a, default) for fp in classes]
        presence = _presence(a)
        known: Counter = Counter()   # repr -> inputs holding it
        first: dict = {}
        for c, v in enumerate(cvals):     # classes are numbered in the order of their first input
            if v is None and not presence:
                continue
            r = repr(v)
            known[r] += size[c]
            first.setdefault(r, v)
        if len(known) <= 1:
            continue
        majority = None
        if n >= 3:
            (top, n_top), *rest = known.most_common()
            if not rest or rest[0][1] < n_top:
                majority = first[top]
        if n == 2:
            differs = list(names)
            for c in range(len(classes)):
                departs[c].append(a)
        else:
            bad = {c for c, v in enumerate(cvals)
                   if (v is not None or presence) and majority is not None and repr(v) != repr(majority)}
            differs = [nm for nm, c in zip(names, member) if c in bad]
            for c in bad:
                departs[c].append(a)
        diffs.append({"attribute": a, "values": [cvals[c] for c in member], "majority": majority,
                      "differs": differs})
    counts = {nm: len(departs[c]) for nm, c in zip(names, member)}
    outlier = None
    if n >= 3 and diffs:
        top = max(counts.values())
        leaders = [nm for nm, k in counts.items() if k == top]
        if top > 0 and len(leaders) == 1:
            outlier = leaders[0]
    report = {"schema": SCHEMA, "inputs": inputs, "identical": not diffs, "differences": diffs,
              "compared": len(attrs), "counts": counts if n >= 3 else {}, "outlier": outlier}
    if n >= 3:
        order = sorted(range(len(classes)), key=lambda c: (-size[c], first_member[c]))
        report["classes"] = [{"class": i + 1, "size": size[c],
                              "members": [nm for nm, m in zip(names, member) if m == c],
                              "departs": departs[c]} for i, c in enumerate(order)]
        largest = order[0]
        unique = len(order) == 1 or size[order[1]] < size[largest]
        report["outliers"] = [nm for nm, m in zip(names, member) if m != largest] if unique else []
    return report


def _attr_key(a: str) -> tuple:
    # host first, then gpus, GPU<i>, NICs, numa, switches, matrix -- each in natural order
    head = a.split(".", 1)[0]
    if head == "host":
        grp = 0
    elif head == "gpus":
        grp = 1
    elif re.match(r"^GPU\d+$", head):
        grp = 2
    elif head == "nics":
        grp = 3
    elif head.startswith("numa"):
        grp = 5
    elif head == "switches":
        grp = 6
    elif head == "matrix":
        grp = 7
    else:
        grp = 4  # NIC names
    return (grp, _natural(a))


def _unique(names: list) -> list:
    seen: Counter = Counter()
    out = []
    for n in names:
        seen[n] += 1
        out.append(n if seen[n] == 1 else f"{n}#{seen[n]}")
    return out


def format_value(v: Any) -> str:
    if v is None:
        return "-"
    if v is True:
        return "yes"
    if v is False:
        return "no"
    return str(v)


__all__ = ["SCHEMA", "fingerprint", "diff_documents", "diff_stream", "diff_sources", "format_value"]
