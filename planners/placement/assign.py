"""Which physical GPU serves each local rank: the local-rank -> GPU map that puts the groups of the
busiest axes (TP, then CP/EP, then DP) on the best-connected GPUs (``gpucomm plan``).  Launchers give a
node the contiguous block of ranks ``[node*G, (node+1)*G)`` (torchrun ``RANK =
GROUP_RANK*LOCAL_WORLD_SIZE + LOCAL_RANK``; srun block distribution); the same map on every node makes
pipeline/data-parallel peers on different nodes use the NIC of the same rail."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from gpucomm.planners.placement.nodeview import NodeView
from gpucomm.planners.placement.ranks import RankGenerator

# How much each axis' groups matter when choosing the local-rank -> GPU map, without a model.
# Ordered like the per-step volumes of Narayanan et al., SC'21 (TP moves activations 4x per layer per
# micro-batch, CP/EP per attention/MoE layer, DP once per step, PP one activation per micro-batch).
DEFAULT_AXIS_WEIGHTS = {"tp": 100.0, "cp": 30.0, "ep": 30.0, "dp": 10.0, "pp": 1.0, "etp": 100.0, "edp": 10.0}


def _set_cost(view: NodeView, gpus: Sequence[int]) -> float:
    """Cost of a GPU set used by one group: its slowest pair dominates (a ring or an all-reduce
    runs at the pace of its narrowest hop), the mean breaks ties."""
    if len(gpus) < 2:
        return 0.0
    inv = [1.0 / max(view.pair_bw(a, b), 1e-9) for i, a in enumerate(gpus) for b in gpus[i + 1:]]
    return max(inv) + sum(inv) / len(inv)


def local_group_pattern(gen: RankGenerator, gpn: int, node: int = 0,
                        egen: Optional[RankGenerator] = None) -> Dict[str, List[List[int]]]:
    """For each axis, the groups restricted to one node, as local-rank lists (members on the node
    only; singletons dropped).  With the expert generator ``egen``: also the expert-parallel groups,
    and the expert TP / expert DP groups where they differ from the dense ones."""
    lo, hi = node * gpn, (node + 1) * gpn
    pattern: Dict[str, List[List[int]]] = {}
    sources: List[Tuple[str, RankGenerator, str]] = [(a, gen, a) for a in ("tp", "cp", "dp", "pp")]
    if egen is not None:
        sources.append(("ep", egen, "ep"))
        if egen.ep > 1 or egen.tp != gen.tp:
            sources += [("etp", egen, "tp"), ("edp", egen, "dp")]
    else:
        sources.append(("ep", gen, "ep"))
    for axis, g, token in sources:
        if g.name_to_size.get(token, 1) <= 1:
            continue
        if axis == "etp" and g.tp == gen.tp:
            continue   # the same groups as tp
        groups = [[m - lo for m in grp] for grp in g.get_local_ranks(token, lo, hi) if len(grp) > 1]
        if groups:
            pattern[axis] = groups
    return pattern


def _perm_cost(view: NodeView, perm: Sequence[int], pattern: Dict[str, List[List[int]]],
               weights: Dict[str, float], memo: Optional[dict] = None) -> float:
    """``memo``: the costs of GPU lists already computed for this view."""
    total = 0.0
    for axis, groups in pattern.items():
        w = weights.get(axis, 1.0)
        for grp in groups:
            gs = [perm[l] for l in grp]
            if memo is None:
                total += w * _set_cost(view, gs)
                continue
            key = tuple(gs)
            c = memo.get(key)
            if c is None:
                c = memo[key] = _set_cost(view, gs)
            total += w * c
    return total


def _greedy_perm(view: NodeView, gpn: int, pattern: Dict[str, List[List[int]]],
                 weights: Dict[str, float], gpus: List[int]) -> List[int]:
    """Fill the heaviest axis' groups one by one: seed with the lowest free GPU, then add the
    free GPU with the best bandwidth to the GPUs already in the group."""
    perm: List[Optional[int]] = [None] * gpn
    free = list(gpus)
    order = sorted(pattern, key=lambda a: -weights.get(a, 1.0))
    for axis in order:
        for grp in pattern[axis]:
            chosen = [perm[l] for l in grp if perm[l] is not None]
            for l in grp:
                if perm[l] is not None:
                    continue
                if not chosen:
                    pick = free[0]
                else:
                    pick = max(free, key=lambda f: (min(view.pair_bw(f, c) for c in chosen),
                                                    sum(view.pair_bw(f, c) for c in chosen), -f))
                perm[l] = pick
                chosen.append(pick)
                free.remove(pick)
    for l in range(gpn):
        if perm[l] is None:
            perm[l] = free.pop(0)
    return [int(p) for p in perm]  # type: ignore[arg-type]


def _hill_climb(view: NodeView, perm: List[int], pattern, weights) -> Tuple[List[int], float]:
    memo: dict = {}
    best = _perm_cost(view, perm, pattern, weights, memo)
    improved = True
    n = len(perm)
    while improved:
        improved = False
        for i in range(n):
            for j in range(i + 1, n):
                perm[i], perm[j] = perm[j], perm[i]
                c = _perm_cost(view, perm, pattern, weights, memo)
                if c < best - 1e-12:
                    best = c
                    improved = True
                else:
                    perm[i], perm[j] = perm[j], perm[i]
    return perm, best


def choose_local_gpus(view: NodeView, gen: RankGenerator, gpn: int,
                      weights: Optional[Dict[str, float]] = None, node: int = 0,
                      gpus: Optional[List[int]] = None, egen: Optional[RankGenerator] = None) -> List[int]:
    """The GPU index for each local rank 0..gpn-1 of a node (the same map serves every node with
    the same group pattern).  Minimises the weighted cost of the in-node groups of each axis;
    starts from the identity (local rank i -> i-th GPU, what users expect) and from a greedy fill,
    improves both by swaps, keeps the cheaper (ties: the identity)."""
    weights = dict(DEFAULT_AXIS_WEIGHTS, **(weights or {}))
    gpus = list(gpus if gpus is not None else view.index)[:gpn]
    pattern = local_group_pattern(gen, gpn, node, egen)
    if not pattern:
        return gpus
    ident, c_ident = _hill_climb(view, list(gpus), pattern, weights)
    greedy, c_greedy = _hill_climb(view, _greedy_perm(view, gpn, pattern, weights, gpus), pattern, weights)
    base = _perm_cost(view, list(gpus), pattern, weights)
    if base <= min(c_ident, c_greedy) + 1e-12:
        return list(gpus)
    return ident if c_ident <= c_greedy + 1e-12 else greedy
