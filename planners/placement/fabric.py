"""What a fabric document (``gpucomm.fabric/v1``, gpucomm.probes.fabric) tells the schedulers: Slurm's
topology.conf (topology/tree, or topology/block where NVLink domains are known), Slurm's
topology.yaml (several topologies, Slurm 25.05's format), a cluster file for ``plan --cluster``; each
host's locality (leaf, spine, block, NVLink domain: the Kueue levels and node labels of
gpucomm.planners.launch.k8s) and what leaving a leaf costs (oversubscription).  Pure functions of
the document.
"""
from __future__ import annotations

from typing import Dict, List, Optional

from gpucomm.probes.errors import InputError, NothingToDo
from gpucomm.probes.fabric import FABRIC_SCHEMA, domain_blocks, fabric_tree, role_of
from gpucomm.probes.formats.slurm_topology import compress_hostlist, write_block_conf, write_topology_conf
from gpucomm.probes.model import natural_key as _natural

def require_hosts(doc: dict) -> None:
    """NothingToDo (exit 3) for a capture with no switch, or no host under one."""
    path = (doc.get("source") or {}).get("path") or "the fabric"
    if not doc.get("switches") and not doc.get("blocks"):
        if any(f.startswith("k8s-labels") for f in (doc.get("source") or {}).get("formats") or []):
            names = ", ".join(h["name"] for h in (doc.get("hosts") or [])[:5])
            raise NothingToDo(f"{path}: node labels of {len(doc.get('hosts') or [])} node(s) ({names}) that name no "
                              "switch and no NVLink clique (no topology.k8s.aws/network-node-layer-*, cloud.google.com/gce-topology-*, "
                              "oci.oraclecloud.com/rdma.* or nvidia.com/gpu.clique label)")
        n = len(doc.get("hosts") or []) + len(doc.get("others") or [])
        raise NothingToDo(f"{path}: no switch in this capture ({n} CA(s) alone: run ibnetdiscover on a node "
                          "attached to the fabric's switches)")


# ============================================================================================
# NVLink domains
def with_nvlink_domains(doc: dict, domains: Dict[str, str], source: str) -> dict:
    """A copy of ``doc`` whose hosts carry ``nvlink_domain`` and whose blocks are the domains (one
    block per domain; BlockSizes = the smallest domain, Slurm's planning base)."""
    out = dict(doc)
    hosts = []
    for h in doc["hosts"]:
        h = dict(h)
        if h["name"] in domains:
            h["nvlink_domain"] = domains[h["name"]]
        hosts.append(h)
    out["hosts"] = hosts
    out["blocks"], out["block_sizes"] = domain_blocks(hosts, host_order(doc))  # in switch-tree order
    out["nvlink_domains_from"] = source
    return out


def consecutive_domains(doc: dict, k: int) -> Dict[str, str]:
    """``--nvlink-domain K``: hosts in switch-tree order, consecutive groups of K share a domain."""
    if k < 1:
        raise InputError(f"--nvlink-domain {k}", expected="an integer >= 1")
    order = host_order(doc)
    return {h: f"domain{i // k + 1}" for i, h in enumerate(order)}


def host_order(doc: dict) -> List[str]:
    """Hosts in switch-tree order (leaves in order, hosts naturally sorted), then any host outside the tree."""
    seen = []
    if doc.get("tree") or doc.get("blocks"):
        seen = fabric_tree(doc).dfs_nodes()
    got = set(seen)
    return seen + [h["name"] for h in doc["hosts"] if h["name"] not in got]


# ============================================================================================
# Slurm
def _header(doc: dict, what: str) -> List[str]:
    src = doc.get("source") or {}
    counts = ", ".join(f"{l['switches']} {l['role']}" for l in doc.get("levels") or [] if l["level"] is not None)
    first = f"gpucomm fabric: {len(doc['hosts'])} hosts" + (f", switches: {counts}" if counts else "")
    return [first + (f" (from {src['path']})" if src.get("path") else ""), what]


def slurm_tree(doc: dict) -> str:
    """topology/tree ``topology.conf``: the document's tree, top down (as topograph writes it); a tree
    switch that stands for several physical switches names them in a comment."""
    require_hosts(doc)
    if not doc.get("tree"):
        raise NothingToDo(f"{(doc.get('source') or {}).get('path') or 'the fabric'}: no host is linked to a switch "
                          "(no links in the capture): no switch tree to write")
    by_name = {t["name"]: t for t in doc["tree"]}
    tree = fabric_tree(doc)
    order: List[str] = []
    queue = list(tree.roots())
    while queue:
        n = queue.pop(0)
        order.append(n)
        queue.extend(sorted(tree.switches[n].switches, key=_natural))
    names = {s["id"]: s["name"] for s in doc["switches"]}
    recs = []
    for n in order:
        t = by_name[n]
        members = t.get("members") or []
        comment = None
        if len(members) > 1:
            shown = [names.get(m, m) for m in members]
            comment = (f"{n}: {len(members)} {role_of(t.get('level'))} switches: " + ", ".join(shown[:8])
                       + (f", ... ({len(shown)})" if len(shown) > 8 else ""))
        recs.append({"name": n, "nodes": t.get("nodes") or [], "switches": t.get("switches") or [], "comment": comment})
    missing = [h["name"] for h in doc["hosts"] if h["name"] not in tree.node_leaf]
    comments = _header(doc, "topology/tree (slurm.conf: TopologyPlugin=topology/tree)")
    if missing:
        comments.append(f"{len(missing)} host(s) reach no switch of the tree and are left out: "
                        + compress_hostlist(missing)[:200])
    return write_topology_conf(recs, comments)


def slurm_blocks(doc: dict, block_sizes: Optional[List[int]] = None) -> str:
    """topology/block ``topology.conf``: one ``BlockName=`` per block (NVLink domain), BlockSizes."""
    require_hosts(doc)
    if not doc.get("blocks"):
        raise NothingToDo("no NVLink domains or blocks are known for these hosts: give node documents with the GPUs' "
                          "fabric info (gpucomm cluster), --nvlink-domain K, or a block topology.conf")
    sizes = block_sizes or doc.get("block_sizes") or [min(len(b["nodes"]) for b in doc["blocks"])]
    check_block_sizes(sizes, doc["blocks"])
    blocks = [{"name": b["name"], "nodes": b["nodes"],
               "comment": f"{b['name']}: {len(b['nodes'])} nodes" + (f", NVLink domain {b['nvlink_domain']}"
                                                                    if b.get("nvlink_domain") else "")}
              for b in doc["blocks"]]
    return write_block_conf(blocks, sizes, _header(doc, "topology/block (slurm.conf: TopologyPlugin=topology/block); "
                                                        "jobs spanning blocks: sbatch --segment"))


def check_block_sizes(sizes: List[int], blocks: List[dict]) -> None:
    """Slurm's rules: every block holds at least the base size; each further size is the one before
    times a power of two."""
    smallest = min(len(b["nodes"]) for b in blocks)
    if sizes[0] > smallest:
        raise InputError(f"BlockSizes={','.join(map(str, sizes))}: the base size {sizes[0]} is larger than the "
                         f"smallest block ({smallest} nodes)", expected=f"a base size <= {smallest}")
    for a, b in zip(sizes, sizes[1:]):
        q = b // a if a and b % a == 0 else 0
        if q < 2 or q & (q - 1):
            raise InputError(f"BlockSizes={','.join(map(str, sizes))}: {b} is not {a} times a power of two",
                             expected="sizes that double (or x4, x8, ...) from the base")


def slurm(doc: dict) -> str:
    """``--emit slurm``: topology/block where NVLink domains (blocks) are known, else topology/tree."""
    return slurm_blocks(doc) if doc.get("blocks") else slurm_tree(doc)


def slurm_yaml(doc: dict) -> str:
    """Slurm's ``topology.yaml`` (several topologies; Slurm 25.05 and later): the switch tree
    (``tree``), and the blocks where NVLink domains are known (``block``, the cluster default then)."""
    import yaml

    require_hosts(doc)
    topos = []
    has_blocks = bool(doc.get("blocks"))
    if doc.get("tree"):
        tree = fabric_tree(doc)
        order, queue = [], list(tree.roots())
        while queue:
            n = queue.pop(0)
            order.append(n)
            queue.extend(sorted(tree.switches[n].switches, key=_natural))
        sw = []
        for n in order:
            s = tree.switches[n]
            rec: dict = {"switch": n}
            if s.switches:
                rec["children"] = ",".join(sorted(s.switches, key=_natural))   # switch names as they are
            if s.nodes:
                rec["nodes"] = compress_hostlist(s.nodes)
            sw.append(rec)
        topos.append({"topology": "fabric", "cluster_default": not has_blocks, "tree": {"switches": sw}})
    if has_blocks:
        sizes = doc.get("block_sizes") or [min(len(b["nodes"]) for b in doc["blocks"])]
        check_block_sizes(sizes, doc["blocks"])
        topos.append({"topology": "nvlink", "cluster_default": True,
                      "block": {"block_sizes": list(sizes),
                                "blocks": [{"block": b["name"], "nodes": compress_hostlist(b["nodes"])} for b in doc["blocks"]]}})
    if not topos:
        raise NothingToDo("no switch tree and no blocks: nothing to write")
    head = "\n".join(f"# {c}" for c in _header(doc, "Slurm topology.yaml (replaces topology.conf; Slurm 25.05+)")) + "\n"
    return head + yaml.safe_dump(topos, sort_keys=False, default_flow_style=False)


# ============================================================================================
# Locality, Kueue
def host_locality(doc: dict) -> Dict[str, Dict[str, str]]:
    """{host: {"leaf": tree switch, "spine": ..., "core": ..., "block": ..., "nvlink-domain": ...}}: the
    switches above each host by role, its block and NVLink domain where known."""
    out: Dict[str, Dict[str, str]] = {h["name"]: {} for h in doc["hosts"]}
    if doc.get("tree"):
        tree = fabric_tree(doc)
        level = {t["name"]: t.get("level") for t in doc["tree"]}
        for h in out:
            for sw in tree.chain(h):
                out[h].setdefault(role_of(level.get(sw)), sw)
    for b in doc.get("blocks") or []:
        for n in b["nodes"]:
            if n in out:
                out[n]["block"] = b["name"]
    for h in doc["hosts"]:
        if h.get("nvlink_domain"):
            out[h["name"]]["nvlink-domain"] = h["nvlink_domain"]
    return out


def native_labels(doc: dict) -> Dict[str, str]:
    """{locality kind: node label} for the levels the nodes already carry as labels (a fabric read from
    Kubernetes node labels: ``leaf`` -> ``oci.oraclecloud.com/rdma.local_block_id``, ``nvlink-domain`` ->
    ``nvidia.com/gpu.clique`` unless the domains were replaced since); {} for other fabrics."""
    out = dict((doc.get("source") or {}).get("labels") or {})
    if doc.get("nvlink_domains_from"):
        out.pop("nvlink-domain", None)
    return out


# ============================================================================================
# Cluster file, and what leaving a leaf costs
def cluster_file(doc: dict, topology: Optional[str] = None) -> dict:
    """A ``gpucomm.cluster/v1`` file over the fabric's hosts, the fabric embedded (``plan --cluster``
    reads it; the node topology comes from ``topology`` or plan's TOPO)."""
    require_hosts(doc)
    hosts = host_order(doc)
    out: dict = {"schema": "gpucomm.cluster/v1", "name": "fabric",
                 "nodes": [{"names": compress_hostlist(hosts)}], "fabric": {"document": doc}}
    if topology:
        out["topology"] = topology
    return out


def leaf_costs(doc: dict) -> Dict[str, dict]:
    """Per tree leaf: hosts, oversubscription of its uplinks (worst physical leaf in it) and the
    share of a host link that traffic leaving the leaf gets when every host sends at once."""
    ratio = {s["id"]: s.get("oversubscription") for s in doc["switches"]}
    out = {}
    for t in doc.get("tree") or []:
        if t.get("level") != 1:
            continue
        rs = [ratio.get(m) for m in t.get("members") or [] if ratio.get(m)]
        worst = max(rs) if rs else None
        out[t["name"]] = {"hosts": len(t.get("nodes") or []), "oversubscription": worst,
                          "uplink_share": round(1.0 / worst, 3) if worst and worst > 1 else 1.0}
    return out


__all__ = ["compress_hostlist", "slurm", "slurm_tree", "slurm_blocks", "slurm_yaml", "cluster_file", "host_locality",
           "with_nvlink_domains", "consecutive_domains", "host_order", "leaf_costs", "require_hosts", "native_labels",
           "FABRIC_SCHEMA"]
