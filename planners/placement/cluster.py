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
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from gpucomm.probes.errors import InputError, PlanInfeasible
from gpucomm.probes.limits import MAX_DEPTH, MAX_HOSTS, MAX_NODES
from gpucomm.probes.model import natural_key as _natural
CLUSTER_SCHEMA = "gpucomm.cluster/v1"


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
# The fabric
@dataclass
class Switch:
    name: str
    nodes: List[str] = field(default_factory=list)
    switches: List[str] = field(default_factory=list)
    link_speed: Optional[float] = None
    line: Optional[int] = None
    parent: Optional[str] = None


@dataclass
class Fabric:
    """A switch tree: leaves hold nodes, inner switches hold switches."""

    switches: Dict[str, Switch]
    source: str = "topology.conf"
    warnings: List[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.node_leaf: Dict[str, str] = {}
        for s in self.switches.values():
            for n in s.nodes:
                self.node_leaf.setdefault(n, s.name)
        self._depth: Dict[str, int] = {}
        self._lca: Dict[Tuple[str, str], Optional[int]] = {}

    def roots(self) -> List[str]:
        return sorted((s.name for s in self.switches.values() if s.parent is None), key=_natural)

    def chain(self, node: str) -> List[str]:
        """Switches from the node's leaf up to its root."""
        out = []
        cur = self.node_leaf.get(node)
        while cur is not None:
            out.append(cur)
            cur = self.switches[cur].parent
        return out

    def level_between(self, a: str, b: str) -> Optional[int]:
        """Switch level two nodes meet at: 0 same node, 1 same leaf, 2 the leaf's parent, ...;
        None when they share no switch (separate fabrics)."""
        if a == b:
            return 0
        key = (a, b) if a < b else (b, a)
        if key in self._lca:
            return self._lca[key]
        ca, cb = self.chain(a), self.chain(b)
        sb = set(cb)
        lvl = None
        for i, s in enumerate(ca):
            if s in sb:
                lvl = i + 1
                break
        self._lca[key] = lvl
        return lvl

    def dfs_nodes(self) -> List[str]:
        """Nodes in switch-tree order (children sorted naturally)."""
        out: List[str] = []

        def walk(name: str) -> None:
            s = self.switches[name]
            out.extend(sorted(s.nodes, key=_natural))
            for c in sorted(s.switches, key=_natural):
                walk(c)

        for r in self.roots():
            walk(r)
        return out

    def leaves(self) -> List[str]:
        return [s.name for s in self.switches.values() if s.nodes]




_TOPO_KEYS = {"switchname": "SwitchName", "switches": "Switches", "nodes": "Nodes", "linkspeed": "LinkSpeed",
              "blockname": "BlockName", "blocksizes": "BlockSizes"}


def parse_topology_conf(text: str, path: str = "topology.conf") -> Fabric:
    """Parse Slurm's topology.conf (tree: ``SwitchName=`` lines; block: ``BlockName=`` lines, each
    block a leaf under one implicit root).  Errors name the file and line."""
    switches: Dict[str, Switch] = {}
    blocks: List[str] = []
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
    budget = {"Nodes": MAX_HOSTS, "Switches": MAX_HOSTS}  # names in the whole file, counted before expanding
    for lineno, line in logical:
        pairs = {}
        first = None
        for tok in line.split():
            if "=" not in tok:
                raise InputError(f"{tok!r} is not Key=Value", path, lineno, expected="SwitchName=NAME Switches=...|Nodes=...")
            k, _, v = tok.partition("=")
            key = _TOPO_KEYS.get(k.lower())
            if key is None:
                raise InputError(f"unknown key {k!r}", path, lineno,
                                 expected="SwitchName, Switches, Nodes, LinkSpeed, BlockName or BlockSizes")
            if key in pairs:
                raise InputError(f"{key} given twice", path, lineno)
            if not v:
                raise InputError(f"{key}= has no value", path, lineno)
            pairs[key] = v
            first = first or key
        if first == "BlockSizes":
            continue  # sizes of aggregated blocks: no effect on which nodes are close
        if first not in ("SwitchName", "BlockName"):
            raise InputError(f"a line must start with SwitchName= or BlockName=, not {first}=", path, lineno)
        name = pairs[first]
        if not re.fullmatch(r"[A-Za-z0-9._\-]+", name):
            raise InputError(f"bad switch name {name!r}", path, lineno)
        if name in switches:
            raise InputError(f"switch {name!r} defined twice (first on line {switches[name].line})", path, lineno)
        sw = Switch(name=name, line=lineno)
        for key in ("Nodes", "Switches"):
            if key in pairs:
                try:
                    lst = expand_hostlist(pairs[key], budget[key])
                except ValueError as e:
                    raise InputError(f"{key}={pairs[key][:80]}: {e}", path, lineno,
                                     expected=f"a Slurm hostlist like node[01-16]; at most {MAX_HOSTS} names in all") from None
                budget[key] -= len(lst)
                if key == "Nodes":
                    sw.nodes = lst
                else:
                    if first == "BlockName":
                        raise InputError("BlockName lines take Nodes=, not Switches=", path, lineno)
                    sw.switches = lst
        if "LinkSpeed" in pairs:
            try:
                sw.link_speed = float(pairs["LinkSpeed"])
            except ValueError:
                raise InputError(f"LinkSpeed={pairs['LinkSpeed'][:40]} is not a number", path, lineno) from None
            if not math.isfinite(sw.link_speed) or sw.link_speed < 0:
                raise InputError(f"LinkSpeed={pairs['LinkSpeed'][:40]} is not a speed", path, lineno,
                                 expected="a number >= 0")
        if not sw.nodes and not sw.switches:
            raise InputError(f"switch {name!r} has neither Nodes= nor Switches=", path, lineno)
        if first == "BlockName":
            blocks.append(name)
        switches[name] = sw
    if not switches:
        raise InputError("no SwitchName= or BlockName= line", path, expected="a Slurm topology.conf")
    if blocks:
        root = "_blocks"
        while root in switches:
            root += "_"
        switches[root] = Switch(name=root, switches=list(blocks))
    return _link_fabric(switches, path)


def _link_fabric(switches: Dict[str, Switch], path: str) -> Fabric:
    seen_node: Dict[str, str] = {}
    for s in switches.values():
        for c in s.switches:
            if c not in switches:
                raise InputError(f"switch {s.name!r} lists unknown switch {c!r}", path, s.line)
            if switches[c].parent is not None and switches[c].parent != s.name:
                raise InputError(f"switch {c!r} has two parents ({switches[c].parent!r} and {s.name!r})", path, s.line)
            if c == s.name:
                raise InputError(f"switch {s.name!r} lists itself", path, s.line)
            switches[c].parent = s.name
        for n in s.nodes:
            if n in seen_node and seen_node[n] != s.name:
                raise InputError(f"node {n!r} is under two switches ({seen_node[n]!r} and {s.name!r})", path, s.line)
            seen_node[n] = s.name
    depth: Dict[str, int] = {}  # levels above each switch: linear, with cycle detection
    for s in switches.values():
        chain, seen, cur = [], set(), s.name
        while cur is not None and cur not in depth:
            if cur in seen:
                raise InputError(f"switch {cur!r} is part of a cycle", path, switches[cur].line)
            chain.append(cur)
            seen.add(cur)
            cur = switches[cur].parent
        d = depth[cur] if cur is not None else -1
        for name in reversed(chain):
            d += 1
            depth[name] = d
            if d >= MAX_DEPTH:
                raise InputError(f"switch {name!r} is {d} levels below the top of the tree, more than {MAX_DEPTH}",
                                 path, switches[name].line, expected="a switch tree a few levels deep")
    return Fabric(switches=switches, source=path)


def parse_fabric_yaml(items, path: str) -> Fabric:
    """``fabric.switches`` of a cluster file: [{name, nodes|switches, link_gbps}]."""
    if not isinstance(items, list) or not items:
        raise InputError("fabric.switches must be a non-empty list", path, expected="[{name, nodes|switches, link_gbps}]")
    switches: Dict[str, Switch] = {}
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
        sw = Switch(name=name, line=None)
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
            setattr(sw, key, lst)
        if it.get("link_gbps") is not None:
            v = it["link_gbps"]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0 or v > 1e7:
                raise InputError(f"{where}.link_gbps is {v!r}", path, expected="a number > 0 (Gb/s)")
            sw.link_speed = float(v)
        if not sw.nodes and not sw.switches:
            raise InputError(f"{where}: switch {name!r} has neither nodes nor switches", path)
        switches[name] = sw
    return _link_fabric(switches, path)


# ============================================================================================
# Cluster files
@dataclass
class Cluster:
    nodes: List[str]                      # host names, in file order
    topology_of: Dict[str, str]           # host -> topology source (resolved)
    docs: Dict[str, dict]                 # topology source -> document
    fabric: Optional[Fabric]
    path: str
    warnings: List[str] = field(default_factory=list)

    def doc(self, host: str) -> dict:
        return self.docs[self.topology_of[host]]


def parse_cluster(obj, path: str, base_dir: str, load_topology: Callable[[str], dict],
                  read_text: Callable[[str], str], default_topology: Optional[str] = None) -> Cluster:
    """Validate a parsed cluster file and load what it names.  ``load_topology(src)`` and
    ``read_text(path)`` are the caller's I/O (the CLI passes gpucomm.probes.load's)."""
    import os

    if not isinstance(obj, dict):
        raise InputError("the cluster file is not a mapping", path, expected="nodes: [...] and fabric: {...}")
    unknown = set(obj) - {"schema", "name", "topology", "nodes", "fabric"}
    if unknown:
        raise InputError(f"unknown key {sorted(unknown)[0]!r}", path, expected="schema, name, topology, nodes, fabric")
    if obj.get("schema") not in (None, CLUSTER_SCHEMA):
        raise InputError(f"schema is {obj.get('schema')!r}", path, expected=repr(CLUSTER_SCHEMA))
    default = obj.get("topology") or default_topology
    entries = obj.get("nodes")
    if not isinstance(entries, list) or not entries:
        raise InputError("nodes must be a non-empty list", path, expected="[{names: node[01-04], topology: FILE}]")

    def resolve(src: str) -> str:
        if src.startswith("example:") or os.path.isabs(src):
            return src
        return os.path.normpath(os.path.join(base_dir, src))

    hosts: List[str] = []
    topo_of: Dict[str, str] = {}
    for i, e in enumerate(entries):
        where = f"nodes[{i}]"
        if isinstance(e, str):
            e = {"names": e}
        if not isinstance(e, dict):
            raise InputError(f"{where} is not a mapping", path)
        bad = set(e) - {"name", "names", "topology"}
        if bad:
            raise InputError(f"{where} has unknown key {sorted(bad)[0]!r}", path, expected="names, topology")
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
                             expected="topology: FILE|example:NAME here or at the top level")
        for n in names:
            if n in topo_of:
                raise InputError(f"{where}: node {n!r} is listed twice", path)
            topo_of[n] = resolve(src)
            hosts.append(n)
    docs: Dict[str, dict] = {}
    for src in sorted(set(topo_of.values())):
        docs[src] = load_topology(src)
    fabric = None
    fab = obj.get("fabric")
    warnings: List[str] = []
    if fab is not None:
        if not isinstance(fab, dict):
            raise InputError("fabric is not a mapping", path, expected="topology_conf: FILE | switches: [...]")
        bad = set(fab) - {"topology_conf", "topology_conf_text", "switches"}
        if bad:
            raise InputError(f"fabric has unknown key {sorted(bad)[0]!r}", path,
                             expected="topology_conf, topology_conf_text or switches")
        if len(set(fab) & {"topology_conf", "topology_conf_text", "switches"}) != 1:
            raise InputError("fabric needs exactly one of topology_conf, topology_conf_text, switches", path)
        if "topology_conf" in fab:
            tpath = resolve(str(fab["topology_conf"]))
            fabric = parse_topology_conf(read_text(tpath), tpath)
        elif "topology_conf_text" in fab:
            if not isinstance(fab["topology_conf_text"], str):
                raise InputError("fabric.topology_conf_text is not text", path)
            fabric = parse_topology_conf(fab["topology_conf_text"], f"{path} (fabric.topology_conf_text)")
        else:
            fabric = parse_fabric_yaml(fab["switches"], path)
        missing = [h for h in hosts if h not in fabric.node_leaf]
        if missing:
            raise InputError(f"node {missing[0]!r} is not attached to any switch in {fabric.source}"
                             + (f" ({len(missing)} such nodes)" if len(missing) > 1 else ""), path)
        extra = len(set(fabric.node_leaf) - set(hosts))
        if extra:
            warnings.append(f"{extra} node(s) of {fabric.source} are not in the cluster file and are ignored")
    return Cluster(nodes=hosts, topology_of=topo_of, docs=docs, fabric=fabric, path=path, warnings=warnings)


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


def _level_weight(lvl: str) -> int:
    if lvl.startswith("level"):
        return int(lvl[5:]) - 1      # leaf-local traffic is free; each level up costs one more
    return 100 if lvl == "disconnected" else 1


def traffic_cost(report: dict) -> Tuple[float, float]:
    """Scalar to minimise: bytes per step weighted by how far up the tree they go (level L counts
    L-1 times); without an estimate, edges weighted by the axis' usual volume
    (placement.DEFAULT_AXIS_WEIGHTS: DP gradients outweigh PP activations)."""
    from gpucomm.planners.placement.layout import DEFAULT_AXIS_WEIGHTS

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
    Level 0 = inside a node, 1 = through a leaf switch, 2 = one level up, ...

    Rings follow NCCL's node-by-node ring: an edge between consecutive distinct nodes of a group,
    each carrying ``bus_factor * message`` per collective (for a ring all-reduce every node
    boundary carries 2(n-1)/n of the data, nccl-tests PERFORMANCE.md)."""
    hosts = plan.get("hosts") or [f"node{i}" for i in range(plan["nodes"])]
    gpn = plan["gpus_per_node"]
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
                  topology_conf_name: Optional[str] = None) -> Tuple[dict, str]:
    """(cluster document, topology.conf text) for ``nodes`` copies of ``topology`` under a
    ``levels``-level fat tree: leaves of ``nodes_per_leaf`` nodes, spines of ``leaves_per_spine``
    leaves, one core above the spines (levels=3); levels=2 puts every leaf under one core;
    levels=1 is a single switch."""
    if nodes < 1 or nodes > MAX_NODES:
        raise InputError(f"--nodes {nodes} is out of range", expected=f"1..{MAX_NODES}")
    if levels not in (1, 2, 3):
        raise InputError(f"--fat-tree {levels}", expected="1, 2 or 3 levels")
    if nodes_per_leaf < 1 or leaves_per_spine < 1:
        raise InputError("--nodes-per-leaf and --leaves-per-spine must be >= 1")
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_\-]*", prefix):
        raise InputError(f"--prefix {prefix!r} is not a host name prefix", expected="letters, digits, '-' or '_'")
    width = max(2, len(str(nodes)))
    names = [f"{prefix}{i:0{width}d}" for i in range(1, nodes + 1)]
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


def load_cluster(path: str, default_topology: Optional[str] = None):
    """Read and validate a cluster file (YAML or JSON) and every topology it names (the I/O of
    :func:`parse_cluster`, through :mod:`gpucomm.probes.load`)."""
    import os

    from gpucomm.probes.load import load_topology, parse_yaml, read_text_input

    text = read_text_input(path)
    obj = parse_yaml(text, path, expected="a gpucomm cluster file (nodes:, fabric:)")  # bounded; JSON is YAML
    base = os.path.dirname(os.path.abspath(path))
    return parse_cluster(obj, path, base, load_topology, read_text_input, default_topology)
