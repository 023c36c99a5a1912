"""Invariants every ring/tree plan must satisfy before a planner returns it.

A violation here is a bug in a planner, not a user error, so these raise ``PlanInfeasible`` with
the reason (the CLI then exits 4 with one line) rather than returning a wrong plan.
"""
from __future__ import annotations

from typing import Iterable, Optional

from gpucomm.probes.errors import PlanInfeasible

EPS = 1e-6


def validate_ring(order: Iterable, members: Iterable, closed: bool = True) -> None:
    """A ring channel visits every member exactly once (and, when ``closed``, returns to the
    first: a cycle needs at least 2 members; an open chain between NICs needs 1)."""
    order = list(order)
    want = list(members)
    if len(order) != len(set(order)):
        dup = sorted({str(x) for x in order if order.count(x) > 1})
        raise PlanInfeasible(f"ring visits {dup[0]} more than once")
    missing = [str(x) for x in want if x not in set(order)]
    if missing:
        raise PlanInfeasible(f"ring misses {missing[0]}")
    extra = [str(x) for x in order if x not in set(want)]
    if extra:
        raise PlanInfeasible(f"ring visits {extra[0]}, which is not in the chosen set")
    if closed and len(order) < 2:
        raise PlanInfeasible("a closed ring needs at least 2 GPUs")


def validate_capacity(usage: dict, capacity: dict, what: str = "plan") -> None:
    """No directed link carries more than its capacity: ``usage[(u, v)]`` GB/s (summed over all
    channels, overheads included) <= ``capacity[(u, v)]``."""
    for e in sorted(usage):
        cap = capacity.get(e)
        if cap is None:
            raise PlanInfeasible(f"{what} uses a link {e[0]}->{e[1]} that does not exist")
        if usage[e] > cap * (1 + 1e-9) + EPS:
            raise PlanInfeasible(f"{what} puts {usage[e]:.3f} GB/s on {e[0]}->{e[1]} (capacity {cap:.3f} GB/s)")


def validate_tree(up: dict, down: dict, ranks: Iterable[int], max_children: int = 2,
                  root: Optional[int] = None) -> int:
    """A tree over ``ranks``: every rank appears once, exactly one root (``up == -1``), every other
    rank has one parent that lists it as a child, no rank has more than ``max_children`` children,
    and every rank reaches the root (no cycles).  Returns the root.  Linear in the ranks (trees of
    10^5 ranks are checked for every channel)."""
    ranks = list(ranks)
    rset = set(ranks)
    if len(rset) != len(ranks):
        raise PlanInfeasible("tree lists a rank twice")
    if up.keys() != rset or down.keys() != rset:
        raise PlanInfeasible("tree does not cover every rank exactly once")
    roots = [r for r in ranks if up[r] == -1]
    if len(roots) != 1:
        raise PlanInfeasible(f"tree has {len(roots)} roots (expected 1)")
    if root is not None and roots[0] != root:
        raise PlanInfeasible(f"tree root is {roots[0]}, expected {root}")
    listed = 0
    for r in ranks:
        kids = down[r]
        if -1 in kids:
            kids = [c for c in kids if c != -1]
        if len(kids) > max_children:
            raise PlanInfeasible(f"rank {r} has {len(kids)} children (at most {max_children})")
        if len(kids) > 1 and len(set(kids)) != len(kids):
            raise PlanInfeasible(f"rank {r} lists a child twice")
        for c in kids:
            if c not in rset:
                raise PlanInfeasible(f"rank {r} has child {c} outside the tree")
            if up[c] != r:
                raise PlanInfeasible(f"rank {c} is a child of {r} but its parent is {up[c]}")
        listed += len(kids)
    # Each listed child names its lister as parent, so no rank is listed twice; when fewer than
    # every non-root rank are listed, some rank's parent does not list it: name it.
    if listed != len(ranks) - 1:
        for r in ranks:
            p = up[r]
            if p != -1:
                if p not in rset:
                    raise PlanInfeasible(f"rank {r} has parent {p} outside the tree")
                if r not in down[p]:
                    raise PlanInfeasible(f"rank {r} names parent {p}, which does not list it as a child")
    # Every rank reaches the root: walk up from each rank until a rank already known to reach it,
    # then mark the whole walk -- each rank is walked once, so the check is linear in the ranks
    # (walking every rank to the root is O(ranks x depth), and a chain is deep).
    reaches = {roots[0]}
    for r in ranks:
        if r in reaches:
            continue
        walk = []
        on_walk = set()
        cur = r
        while cur not in reaches:
            if cur in on_walk:
                raise PlanInfeasible(f"tree has a cycle through rank {cur}")
            on_walk.add(cur)
            walk.append(cur)
            cur = up[cur]
        reaches.update(walk)
    return roots[0]
