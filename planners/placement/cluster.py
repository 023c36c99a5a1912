"""Clusters: a YAML/JSON file listing nodes (each a topology file, snapshot or
``example:<name>``) and the fabric -- a Slurm ``topology.conf`` (topology/tree ``SwitchName=``
lines, or topology/block ``BlockName=``) or a YAML list of switches with link speeds.

Placement keeps TP inside a node (gpucomm.planners.placement.layout) and chooses which host serves each node
rank so that the node blocks of the innermost cross-node axis sit under one leaf switch and the
rest follow the switch tree; :func:`traffic_report` says how many bytes per step cross each
switch level.  :func:`synth_cluster` writes big synthetic clusters (e.g. 1024 x HGX H100 under a
3-level fat tree) so scale is tested.

Cluster file (YAML or JSON; unknown keys are errors)::

    schema: gpucomm.cluster/v1          # optional
    topology: example:hgx-h100          # default node topology (optional)
    nodes:
      - names: node[001-016]            # Slurm hostlist expression (or ``name:``)
        topology: snapshots/n1.tar.gz   # path relative to this file, or example:<name>
    fabric:
      topology_conf: topology.conf      # or topology_conf_text: "SwitchName=..."
      # or
      switches:
        - {name: leaf1, nodes: "node[001-008]", link_gbps: 3200}
        - {name: spine, switches: "leaf[1-2]", link_gbps: 6400}

Slurm syntax (``topology.conf(5)``, ``placement/slurm-config-examples.md``): one switch per line,
``Key=Value`` pairs, case-insensitive keys, ``#`` comments, ``\\`` continues a line; ``LinkSpeed`` is
kept but, as in Slurm, not used for decisions.  Hostlist expressions follow Slurm's: ``node[01-16]``,
``gpu[1,3,5-7]``, ``a[1-2]b[1-2]`` (cartesian, leftmost slowest), comma-separated lists; zero
padding follows the width of the range's lower bound.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from gpucomm.probes.errors import InputError, PlanInfeasible
from gpucomm.probes.fabric import SwitchTree, TreeSwitch, parse_topology_conf, tree_from_records
from gpucomm.probes.formats.slurm_topology import compress_hostlist, expand_hostlist
from gpucomm.probes.limits import MAX_HOSTS
from gpucomm.probes.model import natural_key as _natural

CLUSTER_SCHEMA = "gpucomm.cluster/v1"


# Slurm hostlists, topology.conf and the switch tree are read in gpucomm.probes (formats.slurm_topology,
# fabric); the names stay importable from here.
Switch = TreeSwitch
Fabric = SwitchTree


def parse_fabric_yaml(items, path: str) -> Fabric:
    """``fabric.switches`` of a cluster file: [{name, nodes|switches, link_gbps}]."""
    if not isinstance(items, list) or not items:
        raise InputError("fabric.switches must be a non-empty list", path, expected="[{name, nodes|switches, link_gbps}]")
    switches: Dict[str, dict] = {}
    budget = MAX_HOSTS * 2  # nodes and switch names in all
    for i, it in enumerate(items):
        where = f"fabric.switches[{i}]"
        if not isinstance(it, dict):
            raise InputError(f"{where} is not a mapping", path)
        unknown = set(it) - {"name", "nodes", "switches", "link_gbps"}
        if unknown:
            raise InputError(f"{where} has unknown key {sorted(unknown)[0]!r}", path, expected="name, nodes, switches, link_gbps")
        name = it.get("name")
        if not isinstance(name, str) or not name:
            raise InputError(f"{where} has no name", path)
        if name in switches:
            raise InputError(f"{where}: switch {name!r} defined twice", path)
        sw = {"name": name, "nodes": [], "switches": [], "link_speed": None, "line": None}
        for key in ("nodes", "switches"):
            val = it.get(key)
            if val is None:
                continue
            exprs = val if isinstance(val, list) else [val]
            lst: List[str] = []
            for e in exprs:
                if not isinstance(e, str):
                    raise InputError(f"{where}.{key} has a non-string entry", path)
                try:
                    got = expand_hostlist(e, budget)
                except ValueError as ex:
                    raise InputError(f"{where}.{key}: {ex}", path) from None
                budget -= len(got)
                lst.extend(got)
            sw[key] = lst
        if it.get("link_gbps") is not None:
            v = it["link_gbps"]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0 or v > 1e7:
                raise InputError(f"{where}.link_gbps is {v!r}", path, expected="a number > 0 (Gb/s)")
            sw["link_speed"] = float(v)
        if not sw["nodes"] and not sw["switches"]:
            raise InputError(f"{where}: switch {name!r} has neither nodes nor switches", path)
        switches[name] = sw
    return tree_from_records(list(switches.values()), path)


# ============================================================================================
# Cluster files
@dataclass
class Cluster:
    nodes: List[str]                      # host names, in file order
    topology_of: Dict[str, str]           # host -> topology source (resolved), or "#key" of an embedded one
    docs: Dict[str, dict]                 # topology source -> document
    fabric: Optional[Fabric]
    path: str
    warnings: List[str] = field(default_factory=list)
    fabric_doc: Optional[dict] = None     # the gpucomm.fabric/v1 document, when the fabric came as one
    domain_of: Dict[str, str] = field(default_factory=dict)    # host -> NVLink domain (where known)
    unhealthy: Dict[str, str] = field(default_factory=dict)    # host -> why (doctor errors at join time)

    def blocks(self) -> Dict[str, str]:
        """host -> block (Slurm topology/block), or NVLink domain where the fabric has no blocks."""
        fab = self.fabric
        if fab is not None and fab.blocks:
            return {h: fab.node_leaf[h] for h in self.nodes if h in fab.node_leaf}
        if self.fabric_doc and self.fabric_doc.get("blocks"):
            return {n: b["name"] for b in self.fabric_doc["blocks"] for n in b["nodes"]}
        return dict(self.domain_of)

    def block_base(self) -> Optional[int]:
        """Slurm's planning base block size: BlockSizes' first, else the smallest block."""
        for sizes in ((self.fabric.block_sizes if self.fabric is not None else None),
                      (self.fabric_doc or {}).get("block_sizes")):
            if sizes:
                return int(sizes[0])
        counts: Dict[str, int] = {}
        for b in self.blocks().values():
            counts[b] = counts.get(b, 0) + 1
        return min(counts.values()) if counts else None

    def doc(self, host: str) -> dict:
        return self.docs[self.topology_of[host]]


_FABRIC_KEYS = ("topology_conf", "topology_conf_text", "switches", "file", "document")


def parse_cluster(obj, path: str, base_dir: str, load_topology: Callable[[str], dict],
                  read_text: Callable[[str], str], default_topology: Optional[str] = None,
                  load_fabric: Optional[Callable[[str], dict]] = None) -> Cluster:
    """Validate a parsed cluster file and load what it names.  ``load_topology(src)``,
    ``read_text(path)`` and ``load_fabric(path)`` are the caller's I/O (the CLI passes
    gpucomm.probes.load's and gpucomm.probes.fabric's).

    Beyond hand-written files, ``gpucomm cluster`` writes ``topologies:`` (one embedded document per
    class of identical nodes, named by key; ``nodes[].topology: "#key"``), ``nodes[].nvlink_domain``,
    ``nodes[].unhealthy`` and ``fabric.document`` (the gpucomm.fabric/v1 document)."""
    import os

    from gpucomm.probes.fabric import check_fabric_document, fabric_tree

    if not isinstance(obj, dict):
        raise InputError("the cluster file is not a mapping", path, expected="nodes: [...] and fabric: {...}")
    unknown = set(obj) - {"schema", "name", "topology", "nodes", "fabric", "topologies", "summary"}
    if unknown:
        raise InputError(f"unknown key {sorted(unknown)[0]!r}", path, expected="schema, name, topology, nodes, fabric")
    if obj.get("schema") not in (None, CLUSTER_SCHEMA):
        raise InputError(f"schema is {obj.get('schema')!r}", path, expected=repr(CLUSTER_SCHEMA))
    embedded = obj.get("topologies") or {}
    if not isinstance(embedded, dict) or not all(isinstance(k, str) and isinstance(v, dict) for k, v in embedded.items()):
        raise InputError("topologies is not a mapping of names to topology documents", path)
    default = obj.get("topology") or default_topology
    entries = obj.get("nodes")
    if not isinstance(entries, list) or not entries:
        raise InputError("nodes must be a non-empty list", path, expected="[{names: node[01-04], topology: FILE}]")

    def resolve(src: str) -> str:
        if src.startswith(("example:", "#")) or os.path.isabs(src):
            return src
        return os.path.normpath(os.path.join(base_dir, src))

    hosts: List[str] = []
    topo_of: Dict[str, str] = {}
    domain_of: Dict[str, str] = {}
    unhealthy: Dict[str, str] = {}
    for i, e in enumerate(entries):
        where = f"nodes[{i}]"
        if isinstance(e, str):
            e = {"names": e}
        if not isinstance(e, dict):
            raise InputError(f"{where} is not a mapping", path)
        bad = set(e) - {"name", "names", "topology", "nvlink_domain", "unhealthy"}
        if bad:
            raise InputError(f"{where} has unknown key {sorted(bad)[0]!r}", path,
                             expected="names, topology, nvlink_domain, unhealthy")
        expr = e.get("names", e.get("name"))
        if not isinstance(expr, str) or not expr.strip():
            raise InputError(f"{where} has no names", path, expected="a Slurm hostlist like node[01-16]")
        try:
            names = expand_hostlist(expr, MAX_HOSTS - len(hosts))
        except ValueError as ex:
            raise InputError(f"{where}.names: {ex}", path,
                             expected=f"a Slurm hostlist like node[01-16]; at most {MAX_HOSTS} hosts in all") from None
        src = e.get("topology") or default
        if not isinstance(src, str) or not src:
            raise InputError(f"{where} ({names[0]}...) has no topology", path,
                             expected="topology: FILE|example:NAME here or at the top level (or plan's TOPO)")
        if src.startswith("#") and src[1:] not in embedded:
            raise InputError(f"{where}.topology {src!r} names no entry of topologies:", path)
        for key, store in (("nvlink_domain", domain_of), ("unhealthy", unhealthy)):
            val = e.get(key)
            if val is not None and not isinstance(val, str):
                raise InputError(f"{where}.{key} is not text", path)
            if val:
                store.update((n, val) for n in names)
        for n in names:
            if n in topo_of:
                raise InputError(f"{where}: node {n!r} is listed twice", path)
            topo_of[n] = resolve(src)
            hosts.append(n)
    docs: Dict[str, dict] = {}
    for src in sorted(set(topo_of.values())):
        if src.startswith("#"):
            from gpucomm.probes.model import finalize
            from gpucomm.probes.validate import validate_document

            docs[src] = finalize(validate_document(embedded[src[1:]], f"{path} (topologies.{src[1:]})", saved=True))
        else:
            docs[src] = load_topology(src)
    fabric = fabric_doc = None
    fab = obj.get("fabric")
    warnings: List[str] = []
    if fab is not None:
        if not isinstance(fab, dict):
            raise InputError("fabric is not a mapping", path, expected="topology_conf: FILE | file: FILE | switches: [...]")
        bad = set(fab) - set(_FABRIC_KEYS)
        if bad:
            raise InputError(f"fabric has unknown key {sorted(bad)[0]!r}", path, expected=", ".join(_FABRIC_KEYS))
        if len(set(fab) & set(_FABRIC_KEYS)) != 1:
            raise InputError(f"fabric needs exactly one of {', '.join(_FABRIC_KEYS)}", path)
        if "topology_conf" in fab:
            tpath = resolve(str(fab["topology_conf"]))
            fabric = parse_topology_conf(read_text(tpath), tpath)
        elif "topology_conf_text" in fab:
            if not isinstance(fab["topology_conf_text"], str):
                raise InputError("fabric.topology_conf_text is not text", path)
            fabric = parse_topology_conf(fab["topology_conf_text"], f"{path} (fabric.topology_conf_text)")
        elif "switches" in fab:
            fabric = parse_fabric_yaml(fab["switches"], path)
        else:
            if "file" in fab:
                if load_fabric is None or not isinstance(fab["file"], str):
                    raise InputError("fabric.file is not a file name", path)
                fabric_doc = load_fabric(resolve(fab["file"]))
            else:
                fabric_doc = check_fabric_document(fab["document"], f"{path} (fabric.document)")
            fabric = fabric_tree(fabric_doc, path)
            for h in fabric_doc["hosts"]:
                if h.get("nvlink_domain") and h["name"] in topo_of:
                    domain_of.setdefault(h["name"], h["nvlink_domain"])
        missing = [h for h in hosts if h not in fabric.node_leaf]
        if missing:
            raise InputError(f"node {missing[0]!r} is not attached to any switch in {fabric.source}"
                             + (f" ({len(missing)} such nodes)" if len(missing) > 1 else ""), path)
        extra = len(set(fabric.node_leaf) - set(hosts))
        if extra and fabric_doc is None:
            warnings.append(f"{extra} node(s) of {fabric.source} are not in the cluster file and are ignored")
    return Cluster(nodes=hosts, topology_of=topo_of, docs=docs, fabric=fabric, path=path, warnings=warnings,
                   fabric_doc=fabric_doc, domain_of=domain_of, unhealthy=unhealthy)


# ============================================================================================
# Choosing hosts for node ranks
def node_blocks(gen, gpn: int) -> List[int]:
    """Node counts of the nested contiguous blocks that the rank order forms across nodes:
    after each axis (in order) the ranks covered so far, in nodes, when that is a whole number > 1.
    E.g. tp=8, dp=4, pp=2 on 8-GPU nodes (order tp-...-dp-pp): [4, 8] -- DP groups are 4 consecutive
    nodes, PP pairs nodes 4 apart."""
    out = []
    cum = 1
    for t, s in zip(gen.tokens, gen.ordered_size):
        cum *= s
        if s > 1 and cum % gpn == 0 and cum // gpn > 1:
            b = cum // gpn
            if not out or out[-1] != b:
                out.append(b)
    return out


def order_hosts(cluster: Cluster, hosts: List[str], count: int, blocks: List[int]) -> List[str]:
    """``count`` hosts in node-rank order.  Without a fabric: file order.  With one: switch-tree
    order, taking whole blocks of the innermost cross-node axis from each leaf first (so those
    groups stay under one leaf switch) and leaf remainders last."""
    if count > len(hosts):
        raise PlanInfeasible(f"the plan needs {count} nodes but the cluster has {len(hosts)} with enough GPUs")
    fab = cluster.fabric
    if fab is None:
        return hosts[:count]
    allowed = set(hosts)
    b1 = blocks[0] if blocks else 1
    main: List[str] = []
    rest: List[str] = []

    def walk(name: str) -> None:
        s = fab.switches[name]
        ns = [n for n in sorted(s.nodes, key=_natural) if n in allowed]
        full = len(ns) - len(ns) % b1
        main.extend(ns[:full])
        rest.extend(ns[full:])
        for c in sorted(s.switches, key=_natural):
            walk(c)

    for r in fab.roots():
        walk(r)
    ordered = main + rest
    return ordered[:count]


def node_axes(gen, gpn: int) -> Optional[List[Tuple[str, int]]]:
    """The rank order seen at node granularity: [(axis, nodes it spans)] in order (stride 1 first),
    for the axes that cross nodes; None when groups do not align with node boundaries."""
    out: List[Tuple[str, int]] = []
    cum = 1
    for t, size in zip(gen.tokens, gen.ordered_size):
        lo, hi = cum, cum * size
        cum = hi
        if size == 1 or hi <= gpn:
            continue
        if lo >= gpn:
            if lo % gpn:
                return None
            out.append((t, size))
        else:
            if hi % gpn:
                return None
            out.append((t, hi // gpn))
    return out


def candidate_host_orders(cluster: Cluster, hosts: List[str], count: int, gen, gpn: int) -> List[Tuple[str, List[str]]]:
    """Host orders to compare: for each order of the cross-node axes by physical closeness, the
    node ranks laid out so that the first axis' node blocks fill leaf switches (mixed radix over
    the switch-tree order).  The rank order itself (Megatron's) never changes: only which host
    plays which node rank.  Without a fabric: file order."""
    if cluster.fabric is None:
        return [("file order", hosts[:count])]
    axes = node_axes(gen, gpn)
    if not axes:
        return [("switch-tree order", order_hosts(cluster, hosts, count, node_blocks(gen, gpn)))]
    import itertools
    import math as _m

    sizes = [f for _, f in axes]
    if _m.prod(sizes) != count:
        return [("switch-tree order", order_hosts(cluster, hosts, count, node_blocks(gen, gpn)))]
    out = []
    for perm in itertools.permutations(range(len(axes))):
        seq = order_hosts(cluster, hosts, count, [sizes[perm[0]]])
        order = []
        for n in range(count):
            coords, rest = [], n
            for f in sizes:
                coords.append(rest % f)
                rest //= f
            p, mul = 0, 1
            for i in perm:
                p += coords[i] * mul
                mul *= sizes[i]
            order.append(seq[p])
        out.append(("/".join(axes[i][0] for i in perm) + " innermost first", order))
    return out


def block_segment(cluster: Cluster, hosts: List[str], gen, gpn: int) -> Optional[int]:
    """``sbatch --segment`` for a job on a block topology (topology/block, or NVLink domains): None
    when the job's hosts sit in one block; else the largest node count that divides the job, fits
    the planning base block (BlockSizes' first), and keeps whole the node groups of the innermost
    cross-node axis where it can."""
    block_of = cluster.blocks()
    if not hosts or len({block_of.get(h) for h in hosts}) <= 1:
        return None
    base = cluster.block_base() or 1
    n = len(hosts)
    divisors = [d for d in range(1, min(base, n) + 1) if n % d == 0]
    inner = node_blocks(gen, gpn)
    aligned = [d for d in divisors if inner and inner[0] <= base and d % inner[0] == 0]
    return max(aligned or divisors)


def leaf_uplinks(cluster: Cluster, hosts: List[str], traffic: dict, warnings: List[str]) -> Dict[str, dict]:
    """The leaves a plan's hosts use with their uplinks' oversubscription (the fabric document's
    link rates); a warning when traffic leaves an oversubscribed leaf."""
    from gpucomm.planners.placement.fabric import leaf_costs

    costs = leaf_costs(cluster.fabric_doc)
    used = sorted({cluster.fabric.node_leaf.get(h) for h in hosts} - {None}, key=_natural)
    out = {lf: costs[lf] for lf in used if lf in costs}
    crossing = sum(v["edges"] for k, v in (traffic.get("by_level") or {}).items()
                   if k.startswith("level") and int(k[5:]) >= 2)
    worst = [v for v in out.values() if v["uplink_share"] < 1]
    if crossing and worst:
        w = max(v["oversubscription"] for v in worst)
        warnings.append(f"{crossing} node-to-node edge(s) leave their leaf switch, whose uplinks are oversubscribed "
                        f"up to {w:g}:1: when every node sends at once that traffic gets {1 / w:.0%} of a host link")
    return out


def _level_weight(lvl: str) -> int:
    if lvl.startswith("level"):
        return int(lvl[5:]) - 1      # leaf-local traffic is free; each level up costs one more
    return 100 if lvl == "disconnected" else 1


def traffic_cost(report: dict) -> Tuple[float, float]:
    """Scalar to minimise: bytes per step weighted by how far up the tree they go (level L counts
    L-1 times); without an estimate, edges weighted by the axis' usual volume
    (placement.DEFAULT_AXIS_WEIGHTS: DP gradients outweigh PP activations)."""
    from gpucomm.planners.placement.assign import DEFAULT_AXIS_WEIGHTS

    b = e = 0.0
    for axis, a in report["by_axis"].items():
        for lvl, v in a["levels"].items():
            w = _level_weight(lvl)
            e += w * v["edges"] * DEFAULT_AXIS_WEIGHTS.get(axis, 1.0)
            if v.get("bytes_per_step") is not None:
                b += w * v["bytes_per_step"]
    return (b, e)


def choose_host_order(cluster: Cluster, hosts: List[str], count: int, gen, gpn: int, skeleton: dict) -> Tuple[List[str], str]:
    """The candidate host order with the least cross-switch traffic for ``skeleton`` (a plan with
    groups, nodes, gpus_per_node and optional estimate)."""
    best = None
    for name, order in candidate_host_orders(cluster, hosts, count, gen, gpn):
        rep = traffic_report(dict(skeleton, hosts=order), cluster.fabric)
        cost = traffic_cost(rep)
        if best is None or cost < best[0]:
            best = (cost, order, name)
    return best[1], best[2]


def traffic_report(plan: dict, fabric: Optional[Fabric]) -> dict:
    """Per axis, the node-to-node edges its groups' rings (DP/TP/CP/EP) or chains (PP) use and the
    switch level each edge crosses, with bytes per step when the plan has an estimate.
    Level 0 = inside a node, 1 = through a leaf switch, 2 = one level up, ...; ``nvlink``: between
    two nodes of one NVLink domain (``plan["nvlink_domain"]``), which never touches the fabric.

    Rings follow NCCL's node-by-node ring: an edge between consecutive distinct nodes of a group,
    each carrying ``bus_factor * message`` per collective (for a ring all-reduce every node
    boundary carries 2(n-1)/n of the data, nccl-tests PERFORMANCE.md)."""
    hosts = plan.get("hosts") or [f"node{i}" for i in range(plan["nodes"])]
    gpn = plan["gpus_per_node"]
    # consecutive nodes sharing an NVLink domain (MNNVL): an edge between two of them stays on NVLink
    dn = int(((plan.get("nvlink_domain") or {}).get("nodes")) or 1)
    est = (plan.get("estimate") or {}).get("comm") or {}
    by_level: Dict[str, dict] = {}
    by_axis: Dict[str, dict] = {}
    leaves_used = set()
    if fabric is not None:
        for h in hosts:
            if h in fabric.node_leaf:
                leaves_used.add(fabric.node_leaf[h])
    from gpucomm.probes import units

    for axis in ("tp", "cp", "ep", "dp", "pp", "edp"):
        groups = plan["groups"].get(axis) or []
        if not groups or len(groups[0]) < 2:
            continue
        entry = est.get(axis)
        per_edge = None
        if entry:
            n = entry["group_size"]
            factor = 1.0 if axis == "pp" else units.busbw_factor(entry["collective"], n)
            per_edge = entry["message_bytes"] * factor * entry["count"]
        levels: Dict[str, dict] = {}
        max_leaves = 0
        for g in groups:
            nodes_seq: List[int] = []
            for r in g:
                nd = r // gpn
                if not nodes_seq or nodes_seq[-1] != nd:
                    nodes_seq.append(nd)
            if fabric is not None:
                max_leaves = max(max_leaves, len({fabric.node_leaf.get(hosts[n]) for n in set(nodes_seq)}))
            if len(set(nodes_seq)) < 2:
                continue
            pairs = list(zip(nodes_seq, nodes_seq[1:]))
            if axis != "pp" and len(nodes_seq) > 1:
                pairs.append((nodes_seq[-1], nodes_seq[0]))
            for a, b in pairs:
                if a == b:
                    continue
                if dn > 1 and a // dn == b // dn:
                    key = "nvlink"
                else:
                    lvl = fabric.level_between(hosts[a], hosts[b]) if fabric is not None else None
                    key = "network" if fabric is None else ("disconnected" if lvl is None else f"level{lvl}")
                slot = levels.setdefault(key, {"edges": 0, "bytes_per_step": 0 if per_edge is not None else None})
                slot["edges"] += 1
                if per_edge is not None:
                    slot["bytes_per_step"] += per_edge
        if levels:
            by_axis[axis] = {"levels": {k: _round_slot(v) for k, v in sorted(levels.items())},
                             "max_leaf_switches_per_group": max_leaves if fabric is not None else None}
            for k, v in levels.items():
                s = by_level.setdefault(k, {"edges": 0, "bytes_per_step": 0 if v["bytes_per_step"] is not None else None})
                s["edges"] += v["edges"]
                if v["bytes_per_step"] is not None and s["bytes_per_step"] is not None:
                    s["bytes_per_step"] += v["bytes_per_step"]
    return {"by_level": {k: _round_slot(v) for k, v in sorted(by_level.items())}, "by_axis": by_axis,
            "leaf_switches": len(leaves_used) if fabric is not None else None,
            "fabric": fabric.source if fabric is not None else None}


def _round_slot(v: dict) -> dict:
    out = dict(v)
    if out.get("bytes_per_step") is not None:
        out["bytes_per_step"] = int(out["bytes_per_step"])
    return out


# ============================================================================================
# Synthetic clusters
def synth_cluster(nodes: int, topology: str, levels: int = 3, nodes_per_leaf: int = 32,
                  leaves_per_spine: int = 8, prefix: str = "node", link_gbps: Optional[float] = None,
                  topology_conf_name: Optional[str] = None, nvlink_domain: Optional[int] = None) -> Tuple[dict, str]:
    """(cluster document, topology.conf text) for ``nodes`` copies of ``topology`` under a
    ``levels``-level fat tree: leaves of ``nodes_per_leaf`` nodes, spines of ``leaves_per_spine``
    leaves, one core above the spines (levels=3); levels=2 puts every leaf under one core;
    levels=1 is a single switch.

    ``nvlink_domain`` K (NVL72 racks: trays of 4 GPUs, K <= 18 per rack): consecutive groups of K nodes
    share an NVLink domain -- the cluster's nodes say which (``nvlink_domain: nvlNN``) and topology.conf is
    Slurm's block topology (``BlockName=nvlNN`` per domain, ``BlockSizes=K``; jobs spanning blocks:
    ``sbatch --segment``); the fat tree (of the NICs between the racks) is then ibnetdiscover's alone."""
    if nodes < 1 or nodes > MAX_HOSTS:
        raise InputError(f"--nodes {nodes} is out of range", expected=f"1..{MAX_HOSTS}")
    if levels not in (1, 2, 3):
        raise InputError(f"--fat-tree {levels}", expected="1, 2 or 3 levels")
    if nodes_per_leaf < 1 or leaves_per_spine < 1:
        raise InputError("--nodes-per-leaf and --leaves-per-spine must be >= 1")
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_\-]*", prefix):
        raise InputError(f"--prefix {prefix!r} is not a host name prefix", expected="letters, digits, '-' or '_'")
    if nvlink_domain is not None and (nvlink_domain < 1 or nodes % nvlink_domain):
        raise InputError(f"--nvlink-domain {nvlink_domain} does not divide --nodes {nodes}",
                         expected="K >= 1 dividing the nodes")
    width = max(2, len(str(nodes)))
    names = [f"{prefix}{i:0{width}d}" for i in range(1, nodes + 1)]
    if nvlink_domain is not None:
        return _synth_blocks(names, nodes, topology, nvlink_domain, topology_conf_name)
    speed = f" LinkSpeed={int(link_gbps)}" if link_gbps else ""
    lines = [f"# gpucomm synth: {nodes} x {topology}, {levels}-level fat tree",
             "# topology/tree (slurm.conf: TopologyPlugin=topology/tree)"]
    def group(children: list, per: int, name: str, member: str) -> list:
        """Switches named ``<name>01..`` over ``per`` children each; returns their names."""
        count = (len(children) + per - 1) // per
        w = max(2, len(str(count)))
        made = []
        for k in range(count):
            made.append(f"{name}{k + 1:0{w}d}")
            lines.append(f"SwitchName={made[-1]} {member}={compress_hostlist(children[k * per:(k + 1) * per])}{speed}")
        return made

    if levels == 1:
        lines.append(f"SwitchName=core Nodes={compress_hostlist(names)}{speed}")
    else:
        top = group(names, nodes_per_leaf, "leaf", "Nodes")
        if levels == 3:
            top = group(top, leaves_per_spine, "spine", "Switches")
        lines.append(f"SwitchName=core Switches={compress_hostlist(top)}{speed}")
    conf = "\n".join(lines) + "\n"
    fabric = {"topology_conf": topology_conf_name} if topology_conf_name else {"topology_conf_text": conf}
    doc = {"schema": CLUSTER_SCHEMA, "name": f"synth-{nodes}x-{topology.split(':')[-1]}",
           "nodes": [{"names": compress_hostlist(names), "topology": topology}], "fabric": fabric}
    return doc, conf


def with_consecutive_domains(cl: Cluster, k: int) -> Cluster:
    """``cl`` whose nodes, in fabric order (else file order), come in consecutive groups of ``k`` that
    share an NVLink domain (``--nvlink-domain K``: ``nvlNN``), replacing what the cluster file said."""
    from dataclasses import replace

    if k < 1:
        raise InputError(f"--nvlink-domain {k}", expected="an integer >= 1")
    order = cl.fabric.dfs_nodes() if cl.fabric is not None else []
    got = set(order)
    order = [h for h in order if h in set(cl.nodes)] + [h for h in cl.nodes if h not in got]
    w = max(2, len(str((len(order) + k - 1) // k)))
    return replace(cl, domain_of={h: f"nvl{i // k + 1:0{w}d}" for i, h in enumerate(order)})


def _synth_blocks(names: List[str], nodes: int, topology: str, k: int, conf_name: Optional[str]) -> Tuple[dict, str]:
    """:func:`synth_cluster` with NVLink domains of ``k`` consecutive nodes (a block topology.conf)."""
    from gpucomm.probes.formats.slurm_topology import write_block_conf

    count = nodes // k
    w = max(2, len(str(count)))
    blocks = [{"name": f"nvl{i + 1:0{w}d}", "nodes": names[i * k:(i + 1) * k],
               "comment": f"nvl{i + 1:0{w}d}: {k} nodes, NVLink domain nvl{i + 1:0{w}d}"} for i in range(count)]
    conf = write_block_conf(blocks, [k], [f"gpucomm synth: {nodes} x {topology}, {count} NVLink domain(s) of {k} nodes",
                                          "topology/block (slurm.conf: TopologyPlugin=topology/block); jobs spanning "
                                          "blocks: sbatch --segment"])
    fabric = {"topology_conf": conf_name} if conf_name else {"topology_conf_text": conf}
    doc = {"schema": CLUSTER_SCHEMA, "name": f"synth-{nodes}x-{topology.split(':')[-1]}",
           "nodes": [{"names": compress_hostlist(b["nodes"]), "topology": topology, "nvlink_domain": b["name"]}
                     for b in blocks], "fabric": fabric}
    return doc, conf


def synth_ibnetdiscover(nodes: int, levels: int = 3, nodes_per_leaf: int = 32, leaves_per_spine: int = 8,
                        prefix: str = "node", hca: str = "mlx5_0", width: str = "4x", speed: str = "NDR") -> str:
    """``ibnetdiscover`` output for the fat tree :func:`synth_cluster` describes: one HCA per node
    (``<node> mlx5_0``) under leaves of ``nodes_per_leaf``, as many uplinks per leaf as hosts (1:1),
    spines of ``leaves_per_spine`` leaves and one core (levels=3), leaves under the core (2), one
    switch (1).  Switch descriptions ``MF0;leaf01:MQM9700/U1`` name them as the topology.conf does."""
    from gpucomm.probes.formats.ibnet import write_ibnetdiscover

    if nodes < 1 or nodes > MAX_HOSTS:
        raise InputError(f"--nodes {nodes} is out of range", expected=f"1..{MAX_HOSTS}")
    width_n = max(2, len(str(nodes)))
    names = [f"{prefix}{i:0{width_n}d}" for i in range(1, nodes + 1)]
    switches: List[dict] = []
    cas: List[dict] = []
    links: List[dict] = []
    lid = [0]
    ports: Dict[str, int] = {}

    def new_switch(name: str) -> str:
        sid = f"S-0002c90300{len(switches) + 1:06x}"
        lid[0] += 1
        switches.append({"id": sid, "description": f"MF0;{name}:MQM9700/U1", "lid": lid[0], "ports": 64})
        return sid

    def link(a: str, b: str) -> None:
        pa, pb = ports.get(a, 0) + 1, ports.get(b, 0) + 1
        ports[a], ports[b] = pa, pb
        links.append({"a": a, "a_port": pa, "b": b, "b_port": pb, "width": width, "speed": speed})

    def group(children: List[str], per: int, name: str, uplinks_each: List[int]) -> Tuple[List[str], List[int]]:
        count = (len(children) + per - 1) // per
        w = max(2, len(str(count)))
        made, up = [], []
        for k in range(count):
            sid = new_switch(f"{name}{k + 1:0{w}d}")
            made.append(sid)
            n = 0
            for c, u in zip(children[k * per:(k + 1) * per], uplinks_each[k * per:(k + 1) * per]):
                for _ in range(u):
                    link(c, sid)
                n += u
            up.append(n)
        return made, up

    for i, h in enumerate(names):
        cid = f"H-0002c90400{i + 1:06x}"
        lid[0] += 1
        cas.append({"id": cid, "description": f"{h} {hca}", "lid": lid[0], "ports": 1})
    host_ids = [c["id"] for c in cas]
    if levels == 1:
        core = new_switch("core")
        for c in host_ids:
            link(c, core)
    else:
        leaves, up = group(host_ids, nodes_per_leaf, "leaf", [1] * len(host_ids))
        if levels == 3:
            leaves, up = group(leaves, leaves_per_spine, "spine", up)
        core = new_switch("core")
        for sw, u in zip(leaves, up):
            for _ in range(u):
                link(sw, core)
    return write_ibnetdiscover(switches, cas, links, stamp=f"gpucomm synth ({nodes} nodes, {levels}-level fat tree)")


def load_cluster(path: str, default_topology: Optional[str] = None):
    """Read and validate a cluster file (YAML or JSON) and every topology it names (the I/O of
    :func:`parse_cluster`, through :mod:`gpucomm.probes.load`).  A fabric input given instead
    (ibnetdiscover/iblinkinfo output, a Slurm topology, Kubernetes node labels, a gpucomm fabric
    document) is a cluster of its hosts, each with ``default_topology`` (plan's TOPO)."""
    import os

    from gpucomm.probes.fabric import FABRIC_SCHEMA, check_fabric_document, detect_fabric, fabric_from_text, load_fabric
    from gpucomm.probes.load import load_topology, parse_json, parse_yaml, read_text_input

    text = read_text_input(path)
    kind = detect_fabric(text)
    if kind in ("ib", "slurm", "k8s"):
        doc = fabric_from_text(text, path)
    else:
        expected = "a gpucomm cluster file (nodes:, fabric:)"
        obj = parse_json(text, path, expected) if text.lstrip("\ufeff \t\r\n").startswith("{") else \
            parse_yaml(text, path, expected=expected)   # bounded; JSON read as JSON (YAML's loader is slow on MBs)
        doc = check_fabric_document(obj, path) if isinstance(obj, dict) and obj.get("schema") == FABRIC_SCHEMA else None
    if doc is not None:
        from gpucomm.planners.placement.fabric import cluster_file

        if default_topology is None:
            raise InputError("a fabric names no node topology", path,
                             expected="the node topology as plan's TOPO: gpucomm plan TOPO --cluster FABRIC")
        obj = cluster_file(doc)
    base = os.path.dirname(os.path.abspath(path))
    return parse_cluster(obj, path, base, load_topology, read_text_input, default_topology, load_fabric)
