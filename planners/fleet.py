"""Fleets: many nodes' topology documents at once -- joined with the fabric into one cluster
document (``gpucomm cluster``), and the summary ``gpucomm fleet probe`` ends with.  Like plan.py, a
composer above the other planners: it reads node documents through the fleet streaming of
gpucomm.planners.health (one parse per distinct text, constant memory per node), checks each class
of identical nodes with the doctor, and writes what gpucomm.planners.placement.cluster reads.

The cluster document (``gpucomm.cluster/v1``, docs/FABRIC.md)::

    schema: gpucomm.cluster/v1
    topologies: {c1: <topology document>, ...}     # one per class of identical nodes
    nodes: [{names: node[001-018], topology: "#c1", nvlink_domain: "<clusterUUID>.<cliqueId>",
             unhealthy: "doctor: 1 error (nvlink-inactive)"}, ...]
    fabric: {document: <gpucomm.fabric/v1, hosts carrying their NVLink domain, blocks = domains>}
    summary: {...}                                 # counts, for people
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Tuple

from gpucomm.planners.health.diff import _class_key, fingerprint
from gpucomm.planners.health.stream import VOLATILE_KEYS, stream_sources
from gpucomm.planners.health.doctor import run_doctor
from gpucomm.planners.placement.cluster import CLUSTER_SCHEMA
from gpucomm.planners.placement.fabric import consecutive_domains, host_order, with_nvlink_domains
from gpucomm.probes.errors import InputError
from gpucomm.probes.fabric import nvlink_domain
from gpucomm.probes.formats.slurm_topology import compress_hostlist
from gpucomm.probes.model import natural_key as _natural


def _health(report: dict) -> Optional[str]:
    errs = [f for f in report["findings"] if f["severity"] == "error"]
    if not errs:
        return None
    rules = sorted({f["rule"] for f in errs})
    return f"doctor: {len(errs)} error{'s' if len(errs) > 1 else ''} ({', '.join(rules)})"


def join_cluster(named_sources: Iterable[Tuple[str, str]], fabric: Optional[dict] = None,
                 nvlink_domain_size: Optional[int] = None, name: str = "cluster") -> dict:
    """(host name, topology source) pairs, read one at a time, and an optional fabric document ->
    the cluster document (module docstring).  Hosts the fabric does not have are left out (named
    in the summary); NVLink domains come from the GPUs' fabric info, else ``nvlink_domain_size``
    consecutive hosts in switch-tree order, else the fabric's (node labels' cliques)."""
    classes: Dict[str, str] = {}          # fingerprint key -> class name
    reps: Dict[str, dict] = {}            # class name -> its first document
    by_text: Dict[bytes, Tuple[str, Optional[str], Optional[str]]] = {}   # content key -> (class, domain, health)
    health_of: Dict[str, Optional[str]] = {}
    rows: List[Tuple[str, str, Optional[str], Optional[str]]] = []
    seen = set()
    for host, doc, key, info in stream_sources(named_sources, VOLATILE_KEYS):
        if host in seen:
            raise InputError(f"host {host!r} is given twice", expected="one topology per host")
        seen.add(host)
        if doc is None:
            c, dom, bad = by_text[key]
        else:
            fk = _class_key(fingerprint(doc))
            c = classes.get(fk)
            if c is None:
                c = classes[fk] = f"c{len(classes) + 1}"
                reps[c] = doc
                health_of[c] = _health(run_doctor(doc))
            dom, bad = nvlink_domain(doc), health_of[c]
            if key is not None:
                by_text[key] = (c, dom, bad)
        rows.append((host, c, dom, bad))
    if not rows:
        raise InputError("no node topology given", expected="a directory of saved topologies (gpucomm fleet probe)")
    warnings: List[str] = []
    domains = {h: d for h, _, d, _ in rows if d}
    if fabric is not None:
        known = {h["name"] for h in fabric["hosts"]}
        outside = [h for h, *_ in rows if h not in known]
        if outside:
            warnings.append(f"{len(outside)} node(s) the fabric does not have are left out: {compress_hostlist(outside)[:200]}")
        rows = [r for r in rows if r[0] in known]
        if not rows:
            raise InputError("none of the nodes is in the fabric", expected="node documents named as the fabric's hosts")
        if domains:
            fabric = with_nvlink_domains(fabric, domains, "the GPUs' fabric info (cluster UUID, clique ID)")
        elif nvlink_domain_size:
            sub = dict(fabric, hosts=[h for h in fabric["hosts"] if h["name"] in {r[0] for r in rows}])
            domains = consecutive_domains(sub, nvlink_domain_size)
            fabric = with_nvlink_domains(fabric, domains, f"--nvlink-domain {nvlink_domain_size}")
        else:       # the fabric's own (Kubernetes nodes' nvidia.com/gpu.clique labels)
            kept = {r[0] for r in rows}
            domains = {h["name"]: h["nvlink_domain"] for h in fabric["hosts"] if h.get("nvlink_domain") and h["name"] in kept}
        order = {h: i for i, h in enumerate(host_order(fabric))}
        rows.sort(key=lambda r: (order.get(r[0], len(order)), _natural(r[0])))
    elif nvlink_domain_size and not domains:
        domains = {h: f"domain{i // nvlink_domain_size + 1}" for i, (h, *_) in enumerate(rows)}
    nodes: List[dict] = []
    for host, c, _, bad in rows:      # runs of hosts alike, in order
        dom = domains.get(host)
        entry = {"topology": f"#{c}"}
        if dom:
            entry["nvlink_domain"] = dom
        if bad:
            entry["unhealthy"] = bad
        if nodes and {k: v for k, v in nodes[-1].items() if k != "_hosts"} == entry:
            nodes[-1]["_hosts"].append(host)
        else:
            nodes.append(dict(entry, _hosts=[host]))
    for n in nodes:
        n["names"] = compress_hostlist(n.pop("_hosts"), keep_order=True)
    used = {n["topology"][1:] for n in nodes}
    doc: dict = {"schema": CLUSTER_SCHEMA, "name": name,
                 "topologies": {c: reps[c] for c in sorted(used, key=_natural)},
                 "nodes": [{k: n[k] for k in ("names", "topology", "nvlink_domain", "unhealthy") if k in n} for n in nodes]}
    if fabric is not None:
        doc["fabric"] = {"document": fabric}
    doc["summary"] = {"nodes": len(rows), "classes": len(used),
                      "unhealthy": sum(1 for r in rows if r[3]),
                      "nvlink_domains": len({domains[h] for h, *_ in rows if h in domains}),
                      "fabric": (fabric.get("source") or {}).get("path") if fabric is not None else None,
                      "warnings": warnings}
    return doc


def fleet_report(named_sources: List[Tuple[str, str]], failed: Dict[str, str]) -> dict:
    """What ``gpucomm fleet probe`` ends with: the nodes gathered, those that failed (and why), and
    the fleet doctor and diff over the gathered documents (gpucomm.planners.health)."""
    from gpucomm.planners.health.diff import diff_sources
    from gpucomm.planners.health.doctor import doctor_sources

    out = {"schema": "gpucomm.fleet/v1", "gathered": [n for n, _ in named_sources],
           "failed": [{"node": n, "why": w} for n, w in sorted(failed.items(), key=lambda kv: _natural(kv[0]))]}
    if named_sources:
        out["doctor"] = doctor_sources(named_sources)
        out["diff"] = diff_sources(named_sources) if len(named_sources) > 1 else None
    else:
        out["doctor"] = out["diff"] = None
    return out


__all__ = ["join_cluster", "fleet_report"]
