"""Measurements back into a topology document, pure (``gpucomm bench ... --save TOPO``): a bench result's
GPUs matched to the topology's, measured bandwidths written where docs/ARCHITECTURE.md says planners read
them."""
from __future__ import annotations

from gpucomm.planners.measure.results import SCHEMA
from gpucomm.probes.errors import InputError


def _match_gpu(topo, ep: dict) -> tuple:
    """The topology GPU (:class:`gpucomm.probes.topology.GPU`) an endpoint measured, by UUID, then PCI
    bus id, then CUDA index."""
    from gpucomm.probes.model import normalize_bus_id

    gpus = topo.gpus
    if ep.get("uuid"):
        for g in gpus:
            if g.uuid and g.uuid.lower() == str(ep["uuid"]).lower():
                return g, "uuid"
    if ep.get("pci_bus_id"):
        want = normalize_bus_id(ep["pci_bus_id"])
        for g in gpus:
            if g.pci_bus_id and g.pci_bus_id == want:
                return g, "pci_bus_id"
    idx = ep.get("cuda_index")
    if idx is not None:
        for g in gpus:
            if g.index == idx:
                return g, "index"
    return None, ""


def _slot(d: dict, key: str, empty):
    """``d[key]`` when it holds a ``type(empty)``, else a new ``empty`` put there (null counts as absent)."""
    v = d.get(key)
    if not isinstance(v, type(empty)):
        v = d[key] = empty
    return v


def apply_measurements(doc: dict, result: dict) -> tuple[dict, list]:
    """Write a bench result into a topology document; returns (doc, notes).

    Conventions (docs/ARCHITECTURE.md): direct GPU-GPU links get ``measured_bw_GBps`` (the slower
    direction: a link is as fast as its bottleneck); every measured GPU pair goes to
    ``measured.p2p.GPU<a>.GPU<b> = {bw_GBps, lat_us}`` (pairs through NVSwitch or PCIe have no single
    link to hold it); host<->device to ``measured.host_device``; process-to-process results over
    gloo (no GPUs) to ``measured.process_p2p``; collectives to ``measured.collectives`` (one entry
    per op/backend/world size/dtype, replaced when measured again).  The GPUs are read through the
    typed view; the document is what this writes into."""
    from gpucomm.probes.topology import Topology

    notes: list = []
    measured = _slot(doc, "measured", {})
    if result.get("kind") == "collective":
        coll = _slot(measured, "collectives", [])
        for res in result["results"]:
            if not res["rows"]:
                continue
            entry = {"op": res["op"], "backend": result["backend"], "device": result["device"],
                     "world_size": result["world_size"], "nodes": result["nodes"], "dtype": result["dtype"],
                     "peak_busbw_GBps": res["peak_busbw_GBps"],
                     "rows": [{k: r[k] for k in ("size_bytes", "time_us", "algbw_GBps", "busbw_GBps")}
                              for r in res["rows"]]}
            key = tuple(entry[k] for k in ("op", "backend", "world_size", "nodes", "dtype"))
            coll[:] = [c for c in coll if tuple(c.get(k) for k in ("op", "backend", "world_size", "nodes", "dtype")) != key]
            coll.append(entry)
        coll.sort(key=lambda c: (c["op"], c["backend"], c["world_size"], c["nodes"], c["dtype"]))
        notes.append(f"saved {sum(1 for r in result['results'] if r['rows'])} collective sweep(s) under measured.collectives")
        return doc, notes
    if result.get("kind") != "p2p":
        raise InputError("not a gpucomm bench result", expected=f"schema {SCHEMA}")
    eps = result["endpoints"]
    gpu_eps = [e for e in eps if e.get("cuda_index") is not None]
    if result.get("device") == "cpu" or len(gpu_eps) != len(eps):
        measured["process_p2p"] = {"backend": result.get("backend"), "label": result["label"],
                                   "size_bytes": result["size_bytes"], "bw_GBps": result["bw_GBps"],
                                   "lat_us": result["lat_us"]}
        notes.append("endpoints are processes, not GPUs: saved under measured.process_p2p")
        return doc, notes
    # map each endpoint to a topology GPU
    topo = Topology.of(doc)
    mapping, how = {}, set()
    for e in eps:
        g, via = _match_gpu(topo, e)
        if g is None:
            raise InputError(f"measured device {e['key']} ({e.get('pci_bus_id') or e.get('uuid') or 'no id'}) "
                             "is not a GPU of this topology", expected="a topology of the node that was measured")
        if any(m is g for m in mapping.values()):
            raise InputError(f"two measured devices map to {g.key} of the topology")
        mapping[e["key"]] = g
        how.add(via)
    if how == {"index"}:
        notes.append("matched GPUs by CUDA index (no PCI bus id or UUID): set CUDA_DEVICE_ORDER=PCI_BUS_ID when measuring")
    p2p = _slot(measured, "p2p", {})
    for a, row in result["bw_GBps"].items():
        for b, v in row.items():
            if v is None:
                continue
            ka, kb = mapping[a].key, mapping[b].key
            cell = {"bw_GBps": v}
            lat = result.get("lat_us", {}).get(a, {}).get(b)
            if lat is not None:
                cell["lat_us"] = lat
            _slot(p2p, ka, {})[kb] = cell
    if result.get("host_device"):
        hd = _slot(measured, "host_device", {})
        for k, v in result["host_device"].items():
            hd[mapping[k].key] = dict(v)
    # direct GPU-GPU links: the slower direction
    by_id = {g.id: g.key for g in topo.gpus}
    n_links = 0
    for link in doc.get("links", []):
        if link.get("a") in by_id and link.get("b") in by_id:
            ka, kb = by_id[link["a"]], by_id[link["b"]]
            vals = [p2p.get(ka, {}).get(kb, {}).get("bw_GBps"), p2p.get(kb, {}).get(ka, {}).get("bw_GBps")]
            vals = [v for v in vals if v is not None]
            if vals:
                link["measured_bw_GBps"] = round(min(vals), 4)
                n_links += 1
    notes.append(f"saved {sum(len(r) for r in p2p.values())} GPU pair(s) under measured.p2p"
                 + (f" and measured_bw_GBps on {n_links} direct link(s)" if n_links else ""))
    return doc, notes


__all__ = ["apply_measurements"]
