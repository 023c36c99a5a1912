"""NCCL's double binary tree across nodes, chains inside a node (src/graph/trees.cc,
connect.cc ``ncclTopoPreset``/``connectTrees``).

* :func:`btree` is ``ncclGetBtree`` exactly: ``bit`` = lowest set bit of the rank (rank 0: no
  parent, one child ``bit >> 1`` where the loop ends at the first power of two >= n); parent
  ``(rank ^ bit) | (bit << 1)``, or ``rank ^ bit`` when that is out of range; children
  ``rank -/+ bit/2``, the second one halved until it is in range.
* :func:`dtree` is ``ncclGetDtree``: tree 0 is the btree; tree 1 is its **mirror** (``n-1-x``) when
  n is even, or the btree **shifted** by one (``(x-1+n) % n`` then ``+1``) when n is odd.
* Within a node each channel is a chain of its GPUs (NCCL's tree graph order, from our model of
  NCCL's tree search, :func:`gpucomm.planners.nccl.comm.nccl_reference`): ``up`` is the
  previous GPU, ``down[0]`` the next.  Between nodes, by the pattern NCCL's tree search settled on:
  ``BALANCED_TREE`` -- the node's first GPU faces the parent node and takes child 1, the second GPU
  takes child 0 (``treeToParent = intra[0]``, ``treeToChild0 = intra[1]``, ``treeToChild1 =
  intra[0]``); ``TREE`` (and one GPU per node) -- the first GPU does all three, so it may have three
  children (:data:`NCCL_MAX_TREE_ARITY`); ``SPLIT_TREE`` -- the second GPU takes both children.
* Channel ``c`` uses tree 0 and channel ``c + K`` the same chain with tree 1 (K = search channels),
  so a plan with K chains has 2K tree channels, as NCCL's ``nChannels = 2 * min(ring, tree)``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from gpucomm.probes.errors import InputError, NothingToDo, PlanInfeasible
from gpucomm.probes.topology import Topology, check_document

from gpucomm.planners.collectives.validate import validate_tree
from gpucomm.planners.nccl import comm as nccl_comm
from gpucomm.planners.nccl.names import BALANCED_TREE, PATTERN_NAMES, SPLIT_TREE, TREE

TREE_PATTERNS = tuple(PATTERN_NAMES[p].lower() for p in (BALANCED_TREE, TREE, SPLIT_TREE))
NCCL_MAX_TREE_ARITY = 3
"""Children a rank may have in NCCL's tree (device.h ``down[NCCL_MAX_TREE_ARITY]``): with the ``tree``
pattern a node's first GPU takes its local child and both remote children."""


def btree(nranks: int, rank: int) -> tuple:
    """ncclGetBtree(nranks, rank) -> (up, down0, down1, parentChildType); -1 = none.  For rank 0
    parentChildType is undefined in NCCL (never set); 0 is returned.  One rule with NCCL's model
    (:func:`gpucomm.planners.nccl.comm.btree`), checked here."""
    if nranks < 1 or not 0 <= rank < nranks:
        raise ValueError(f"rank {rank} out of range for {nranks} ranks")
    return nccl_comm.btree(nranks, rank)


def dtree(nranks: int, rank: int) -> tuple:
    """ncclGetDtree -> ((up, d0, d1, pct) of tree 0, (up, d0, d1, pct) of tree 1)."""
    if nranks < 1 or not 0 <= rank < nranks:
        raise ValueError(f"rank {rank} out of range for {nranks} ranks")
    t = nccl_comm.dtree(nranks, rank)
    return t[:4], t[4:]


def dtree_roots(nranks: int) -> tuple:
    """ncclGetDtreeRoots: tree 0 is rooted at 0, tree 1 at 1 (n odd) or n-1 (n even)."""
    return 0, (1 if (nranks % 2 == 1 and nranks > 1) else nranks - 1)


def log2i(n: int) -> int:
    """NCCL's log2i: floor(log2(n)) (0 for n <= 1)."""
    r = 0
    while n > 1:
        n >>= 1
        r += 1
    return r


def connect_trees(nodes: int, chains: list, pattern: str = "balanced_tree") -> list:
    """Trees for ``nodes`` nodes whose channel c runs through the local ranks ``chains[c]`` (same on
    every node).  Returns ``[{channel, tree, up: {rank: up}, down: {rank: [children]}}]`` for
    channels 0..2K-1 (channel c: tree 0, channel c+K: tree 1), NCCL's children order (local child
    first, then the remote ones)."""
    if pattern not in TREE_PATTERNS:
        raise InputError(f"unknown tree pattern {pattern!r}", expected=", ".join(TREE_PATTERNS))
    if nodes < 1:
        raise PlanInfeasible(f"--nodes must be >= 1 (got {nodes})")
    out = []
    K = len(chains)
    if K == 0:
        raise PlanInfeasible("no channels to build trees on")
    gpn = len(chains[0])
    nranks = nodes * gpn
    for c, chain in enumerate(chains):
        if sorted(chain) != list(range(gpn)):
            raise PlanInfeasible(f"channel {c} chain {chain} is not a permutation of local ranks 0-{gpn - 1}")
    pat = "tree" if gpn == 1 else pattern
    p_idx = 0
    c0_idx = 0 if pat == "tree" else 1
    c1_idx = 1 if pat == "split_tree" else 0
    dt = [dtree(nodes, i) for i in range(nodes)]
    for t in (0, 1):
        for c, chain in enumerate(chains):
            up = {r: -1 for r in range(nranks)}
            down = {r: [] for r in range(nranks)}
            ttp, ttc0, ttc1 = [], [], []
            for i in range(nodes):
                ranks = [i * gpn + lr for lr in chain]
                for j, r in enumerate(ranks):
                    up[r] = ranks[j - 1] if j > 0 else -1
                    if j < len(ranks) - 1:
                        down[r].append(ranks[j + 1])
                ttp.append(ranks[p_idx])
                ttc0.append(ranks[c0_idx])
                ttc1.append(ranks[c1_idx])
            for i in range(nodes):
                u, d0, d1, pct = dt[i][t]
                if u != -1:
                    up[ttp[i]] = (ttc0 if pct == 0 else ttc1)[u]
                if d0 != -1:
                    down[ttc0[i]].append(ttp[d0])
                if d1 != -1:
                    down[ttc1[i]].append(ttp[d1])
            out.append({"channel": c + t * K, "tree": t, "up": up, "down": down})
    return sorted(out, key=lambda x: x["channel"])


_OLD_TREE = re.compile(r"\bTree (\d+) : (-?\d+) -> (-?\d+) -> (-?\d+)/(-?\d+)/(-?\d+)")
_NEW_TREE = re.compile(r"\[(\d+)\] (-?\d+)/(-?\d+)/(-?\d+)->(-?\d+)->(-?\d+)")


def parse_tree_log(text: str) -> dict:
    """Tree lines of an NCCL debug log (``NCCL_DEBUG=INFO``, ``NCCL_DEBUG_SUBSYS`` incl. GRAPH/INIT):
    ``Tree c : up -> rank -> d0/d1/d2`` (NCCL <= 2.18, one channel per line) and
    ``Trees [c] d0/d1/d2->rank->up [c+1] ...`` (newer, all channels of a rank on one line).
    Returns ``{(channel, rank): (up, [children])}`` (-1 entries dropped from the children); lines
    that are not tree lines, or are garbled, are ignored."""
    out: dict = {}
    for line in str(text).splitlines():
        if "Tree" not in line:
            continue
        for m in _OLD_TREE.finditer(line):
            c, up, rank, d0, d1, d2 = (int(x) for x in m.groups())
            out[(c, rank)] = (up, [d for d in (d0, d1, d2) if d != -1])
        if "Trees" in line:
            for m in _NEW_TREE.finditer(line):
                c, d0, d1, d2, rank, up = (int(x) for x in m.groups())
                out[(c, rank)] = (up, [d for d in (d0, d1, d2) if d != -1])
    return out


@dataclass
class TreePlan:
    """Result of :func:`build_trees`."""

    nodes: int
    gpus_per_node: int
    gpu_indices: list          # local rank -> GPU index
    chains: list               # per search channel: local ranks in chain order
    pattern: str
    channels: list             # connect_trees output
    nccl_reference: Optional[dict] = None
    warnings: list = field(default_factory=list)
    assumptions: list = field(default_factory=list)
    hosts_per_system: int = 1     # trays NCCL fuses into one system (an MNNVL clique): ``nodes`` are systems
    layout_note: Optional[str] = None

    @property
    def nranks(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def depth(self) -> int:
        """connectTrees' approximation: nRanks/nNodes - 1 + log2i(nNodes)."""
        return self.nranks // self.nodes - 1 + log2i(self.nodes)

    def log_line(self, channel: int, rank: int) -> str:
        """The line NCCL >= 2.19 prints for this rank: ``Trees [c] d0/d1/d2->rank->up``."""
        ch = self.channels[channel]
        d = (ch["down"][rank] + [-1, -1, -1])[:3]
        return f"Trees [{channel}] {d[0]}/{d[1]}/{d[2]}->{rank}->{ch['up'][rank]}"

    def to_dict(self) -> dict:
        chans = []
        per_tray = self.gpus_per_node // self.hosts_per_system
        for ch in self.channels:
            root = next(r for r, u in ch["up"].items() if u == -1)
            chans.append({
                "channel": ch["channel"], "tree": ch["tree"], "root": root,
                "ranks": [{"rank": r, "node": r // per_tray,
                           "gpu": self.gpu_indices[r % self.gpus_per_node],
                           "up": ch["up"][r], "down": list(ch["down"][r])} for r in sorted(ch["up"])],
            })
        ref = self.nccl_reference
        return {
            "schema": "gpucomm.trees/v1",
            "nodes": self.nodes * self.hosts_per_system,
            "gpus_per_node": per_tray,
            "nvlink_domain": {"trays_per_system": self.hosts_per_system, "systems": self.nodes,
                              "note": self.layout_note},
            "nranks": self.nranks,
            "pattern": self.pattern if self.gpus_per_node > 1 else "tree",
            "depth": self.depth,
            "chains": [[self.gpu_indices[lr] for lr in chain] for chain in self.chains],
            "channels": chans,
            "nccl_reference": None if ref is None else {
                "channels": ref["channels"],
                "search_channels": (ref.get("tree") or {}).get("search_channels", ref["search_channels"]),
                "bw_intra": (ref.get("tree") or {}).get("bw_intra"), "bw_inter": (ref.get("tree") or {}).get("bw_inter"),
                "pattern": (ref.get("tree") or {}).get("pattern")},
            "assumptions": list(self.assumptions),
            "warnings": list(self.warnings),
        }


def validate_trees(plan_channels: list, nranks: int) -> None:
    """validate_tree on every channel."""
    for ch in plan_channels:
        validate_tree(ch["up"], ch["down"], range(nranks), max_children=NCCL_MAX_TREE_ARITY)


def build_trees(doc: Any, nodes: int = 1, gpus_per_node: Optional[int] = None, *,
                gpus: Optional[Iterable[int]] = None, chains: Optional[list] = None,
                pattern: Optional[str] = None, reference: bool = True,
                nvlink_domain: Optional[int] = None) -> TreePlan:
    """Double binary trees for ``nodes`` identical nodes of this topology.

    GPUs per node: ``gpus`` (indices) or the first ``gpus_per_node`` GPUs by index (default all);
    local rank k = k-th of them.  Chains: given (lists of local ranks, one per search channel), else
    NCCL's: the channels of the tree graph our model of NCCL searches (its first ``min(ring, tree)``
    channels, as ``ncclTopoPreset``) with that graph's pattern -- so the trees are the ``Trees [c]``
    lines NCCL prints.  Without the model (``reference=False``, or a layout it cannot run) the
    channel orders of :func:`gpucomm.planners.collectives.rings.search_rings` on the same GPUs, with
    ``pattern`` (default ``balanced_tree``).  Every tree is validated (one root, one parent per other
    rank, at most :data:`NCCL_MAX_TREE_ARITY` children, every rank once).

    ``nvlink_domain``: nodes (trays) per NVLink domain (default NCCL's,
    :func:`gpucomm.planners.nccl.comm.tray_layout`): the trays NCCL fuses into one system (an MNNVL clique)
    are one node of the trees -- a chain runs through all of their GPUs over NVLink, the binary trees join
    the cliques through the NICs.  A document of several hosts is its hosts (``gpus``: its indices, the
    same GPUs of every host), ``nodes`` copies of it."""
    from gpucomm.planners.nccl.comm import nccl_reference, tray_layout
    from gpucomm.planners.nccl.pinning import first_host, host_gpus
    from gpucomm.planners.collectives.rings import search_rings

    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        raise InputError(f"--nodes {nodes!r} is out of range", expected="an integer >= 1")
    check_document(doc)
    topo = Topology.of(doc)
    allg = sorted(g.index for g in topo.gpus)
    if not allg:
        raise NothingToDo("topology has no GPUs")
    tray = first_host(topo)
    if gpus is not None:
        _known_gpus(list(gpus), allg)
        sel = sorted(host_gpus(topo, list(gpus)))
    else:
        sel = sorted(g.index for g in tray.gpus)
    if gpus_per_node is not None:
        if not isinstance(gpus_per_node, int) or gpus_per_node < 1:
            raise InputError(f"--gpus-per-node {gpus_per_node!r} is out of range", expected="an integer >= 1")
        if gpus_per_node > len(sel):
            raise PlanInfeasible(f"--gpus-per-node {gpus_per_node} but the topology has {len(sel)} GPUs")
        sel = sel[:gpus_per_node]
    lay = tray_layout(topo, nodes, sel, nvlink_domain=nvlink_domain, tray_gpus=True)
    H = lay.hosts
    # the ranks of one system (a tray, or the trays of an MNNVL clique) -> the job's GPU indices
    idx = [lay.tray_gpu_index(h, d) for h in range(H) for d in sel]
    gpn = len(idx)
    copies, nodes = nodes, lay.systems
    ref = None
    warnings: list = []
    if reference and (nodes > 1 or gpn > 1):
        ref = nccl_reference(topo, nodes=copies, gpus=sel, nvlink_domain=nvlink_domain)
    if chains is None and ref is not None:
        chains, nccl_pattern = nccl_tree_chains(ref, sel, H)
        pattern = pattern or nccl_pattern
    if chains is None:
        if gpn == 1 and nodes == 1:
            chains = [[0]]
        else:
            plan = search_rings(tray, gpus=sel, nodes=copies * len(topo.hosts), reference=False,
                                nvlink_domain=lay.nvlink_domain)
            pos = {g: k for k, g in enumerate(idx)}
            chains = [[pos[plan.ns.nodes[g]["index"]] for g in ch.gpus] for ch in plan.channels]
            warnings.extend(plan.warnings)
            # identical chains make identical trees: keep each distinct order once
            uniq = []
            for ch in chains:
                if ch not in uniq:
                    uniq.append(ch)
            chains = uniq
    pattern = pattern or "balanced_tree"
    chans = connect_trees(nodes, [list(c) for c in chains], pattern)
    validate_trees(chans, nodes * gpn)
    return TreePlan(nodes, gpn, idx, [list(c) for c in chains], pattern, chans, ref, warnings,
                    tray.all_assumptions(), hosts_per_system=H, layout_note=lay.note)


def _known_gpus(want: list, have: list) -> list:
    """``want`` (GPU indices), each once and each in ``have``; InputError naming the first that is not."""
    from gpucomm.probes.model import format_cpulist

    if len(set(want)) != len(want):
        dup = sorted({x for x in want if want.count(x) > 1})
        raise InputError(f"GPU {dup[0]} listed twice", expected="distinct GPU indices")
    for x in want:
        if x not in have:
            raise InputError(f"no GPU {x} in topology (has {format_cpulist(have) or 'none'})")
    return want


def nccl_tree_chains(ref: dict, idx: list, hosts: int = 1) -> tuple:
    """(chains as local ranks, pattern) of the tree graph in ``ref`` (our model of NCCL), or
    (None, None) when it has none: NCCL connects its first min(ring, tree) search channels.  ``idx``: the
    GPU indices on a tray; ``hosts`` > 1: the trays of an MNNVL clique, whose GPUs NCCL's model names
    ``GPU<dev>@<host>`` (rank ``host x len(idx) + position``)."""
    tree = ref.get("tree") or {}
    chans = tree.get("channels") or []
    if not chans or tree.get("pattern") not in TREE_PATTERNS:
        return None, None
    n = min(len(chans), ref.get("search_channels") or len(chans))
    pos = {f"GPU{gi}": k for k, gi in enumerate(idx)}
    pos.update({f"GPU{gi}@{h}": h * len(idx) + k for h in range(hosts) for k, gi in enumerate(idx)})
    out = []
    for ch in chans[:n]:
        loc = [pos.get(str(x)) for x in ch.get("gpus") or []]
        if None in loc or sorted(loc) != list(range(len(idx) * hosts)):
            return None, None
        out.append(loc)
    return out, tree["pattern"]


def trees_report(doc, nodes: int = 1, gpus_per_node: Optional[int] = None, gpus: Optional[list] = None,
                 nvlink_domain: Optional[int] = None) -> dict:
    """The ``gpucomm.trees/v1`` document of ``gpucomm trees`` (with an NCCL log:
    :func:`gpucomm.planners.collectives.logcompare.trees_with_log`)."""
    return build_trees(doc, nodes=nodes, gpus_per_node=gpus_per_node, gpus=gpus, nvlink_domain=nvlink_domain).to_dict()

