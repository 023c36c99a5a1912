"""Our own ring search (better than NCCL's) and its capacity model, over NCCL's system of the node
(:class:`gpucomm.planners.nccl.sysview.NodeSystem`): the links NCCL knows with NCCL's bandwidths,
each hop of a channel along the route NCCL's transports take (:meth:`NodeSystem.path`).

Capacity (:class:`Capacity`): a hop takes ``bw x amount`` on each directed link of its route, the
amounts ``followPath`` takes (:func:`gpucomm.planners.nccl.search.follow_amounts`: the Intel P2P
overhead on PCI links of a PHB path, the pre-Ampere reverse reservation, POWER's NVLink); the sum
over channels may not exceed any link's bandwidth.  A NIC carries its rate in each direction
(NCCL's own search additionally charges a whole channel to the port once; physically a port is
full duplex).  One channel is one CTA: it never gets more than the top of NCCL's speed ladder for
the architecture (:func:`gpucomm.planners.nccl.search.channel_cap`).

Search (:class:`Packer`): bandwidth is handed out greedily, each time to the *widest* channel on the
residual capacity (bottleneck = min over links of residual / amount, counting links a channel
crosses several times), all of its bottleneck at once (``widest-cycle``) or a quarter of the
channel cap at a time (``water-filling``, which balances channels sharing links).  The widest
channel itself is found

* <= 10 GPUs: exactly, by branch and bound over all cycles (rotation fixed), pruned by the best
  bottleneck so far and stopped as soon as an upper bound (every GPU's best single hop in and out,
  the channel cap, the NICs) is reached;
* all GPUs on one NVSwitch and nothing else in their paths (HGX, DGX, NVL72): every cycle loads
  each GPU's NVSwitch link once in each direction, so any order is optimal -- index order, O(n)
  (across nodes only the entry and exit GPUs next to the NIC matter);
* otherwise (> 10 GPUs): candidates from index order, the PCI tree's depth-first order and a
  widest-next-hop greedy walk, improved by 2-opt on the true (shared-link) bottleneck.

Across nodes a channel is a chain entering and leaving the node through network devices; among
equally wide chains the search prefers leaving through the entry NIC (rail aligned), or with
``rail=False`` the shorter route (what NCCL_CROSS_NIC allows).  Where NCCL splits the node into
NIC-joined domains, a channel is one NET-to-NET chain per domain (``RingChannel.breaks``).
:mod:`gpucomm.planners.collectives.rings` runs the variants and picks the best.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from gpucomm.probes.errors import PlanInfeasible

from gpucomm.planners.nccl.search import follow_amounts

EXACT_MAX_GPUS = 10
NODE_BUDGET = 50_000
QUANTUM_PARTS = 4        # bandwidth is handed out a quarter of the channel cap at a time
MAX_ROUNDS = 400
MIN_SHARE = 0.05
EPS = 1e-9


@dataclass
class RingChannel:
    """One channel: GPU node ids in ring order, its bandwidth, and (multi-node) the NETs it enters
    and leaves the node through."""

    gpus: list
    bw: float
    nets: tuple = (None, None)
    breaks: tuple = ()      # NIC hops inside the node: (position i, NET out, NET in) for gpus[i] -> gpus[i+1]


def _hops(order: list, nets: tuple, breaks: tuple = (), wire: bool = False) -> list:
    """The paths (src, dst) a channel takes: NIC in -> first GPU, GPU -> GPU, last GPU -> NIC out (or
    back to the first GPU); a NIC hop ``(i, x, y)`` of ``breaks`` replaces order[i] -> order[i+1] by
    order[i] -> x and y -> order[i+1] (with ``wire``, also x -> y: the network between them)."""
    if nets and nets[0] is not None:
        hops = [(nets[0], order[0])] + list(zip(order, order[1:])) + [(order[-1], nets[1])]
        off = 1
    elif len(order) < 2:
        return []
    else:
        hops = list(zip(order, order[1:])) + [(order[-1], order[0])]
        off = 0
    if not breaks:
        return hops
    by_pos = {i: (x, y) for i, x, y in breaks}
    out = []
    for k, (s, d) in enumerate(hops):
        i = k - off
        if 0 <= i < len(order) and s == order[i] and i in by_pos:
            x, y = by_pos[i]
            out.append((s, x))
            if wire:
                out.append((x, y))
            out.append((y, d))
        else:
            out.append((s, d))
    return out


def port_bw(ns, net: str, send: bool) -> float:
    """A network device's rate in one direction: sending is the NIC -> NET link, receiving NET -> NIC."""
    out = ns.out[net]
    cap = ns.capacity
    bws = [cap[(k[1], k[0], k[2])] if send else cap[k] for k in out if (k[1], k[0], k[2]) in cap]
    return min(bws) if bws else float(ns.nodes[net].get("bw") or 0.0)


class _Stop(Exception):
    pass


class Packer:
    """Residual capacity and the widest-cycle search on it, over NCCL's system ``ns``: channels over
    ``gpus`` (node ids), NET to NET with ``inter``, at most ``cap`` GB/s each."""

    def __init__(self, ns, gpus: list, inter: bool, cap: float, rail: bool = True,
                 domains: Optional[list] = None):
        self.ns, self.cap = ns, cap
        # among equally wide channels prefer leaving through the entry NIC (rail) or the shorter route;
        # ``tie``: how much wider a candidate must be to be tried (cross-nic: an equally wide one may
        # still be shorter)
        self.rail = rail
        self.tie = 1e-9 if rail else -1e-9
        self.capacity = Capacity(ns)
        self.res = self.capacity.res
        self._hb: dict = {}
        self._xr: dict = {}     # _symmetric_chain's exit ranks (valid until the residual or the focus changes)
        self.exact = True
        # NIC-joined domains (ncclTopoCheckNet): every channel is one chain per domain, NET to NET,
        # the chains joined through the network (and, on several nodes, the node's first and last
        # NIC as usual)
        self.domains = domains if domains and len(domains) > 1 else None
        self.nodes_inter = inter
        self._focus(gpus, inter)

    def _focus(self, gpus: list, inter: bool) -> None:
        """Search channels over ``gpus`` (a whole cycle, or with ``inter`` a NET-to-NET chain)."""
        ns = self.ns
        self.gpus, self.inter = gpus, inter
        self._xr = {}
        self.nets = list(ns.nets) if inter else []
        self.pos = {g: i for i, g in enumerate(gpus)}
        nvs = [n for n, a in ns.nodes.items() if a["type"] == "NVS"]
        self.symmetric = False
        if len(nvs) == 1 and len(gpus) > 1:
            # the same for every packer on this system (search_rings builds several)
            memo = ns.derived
            key = ("rings.symmetric", tuple(gpus), nvs[0])
            if key not in memo:
                memo[key] = all(_through(ns, a, b, nvs[0]) for a in gpus for b in gpus if a != b)
            self.symmetric = memo[key]

    # -- evaluation -----------------------------------------------------------------------------
    def loads(self, s: str, d: str) -> list:
        ld = self.capacity.loads(s, d)
        if ld is None:
            raise PlanInfeasible(f"no path from {self.ns.label(s)} to {self.ns.label(d)}")
        return ld

    def evaluate(self, order: list, nets: tuple = (None, None), breaks: tuple = ()) -> tuple:
        """(bottleneck capped at the channel cap, total hops) of a whole channel on the residual."""
        agg: dict = {}
        hops = 0
        for s, d in _hops(order, nets, breaks):
            if self.ns.path(s, d) is None:
                return 0.0, 10 ** 9
            hops += self.ns.path(s, d).hops
            for e, f in self.loads(s, d):
                agg[e] = agg.get(e, 0.0) + f
        bn = min([self.res[e] / f for e, f in agg.items()] or [float("inf")])
        return min(bn, self.cap), hops

    def take(self, order: list, nets: tuple, bw: float, breaks: tuple = ()) -> None:
        self._hb.clear()
        self._xr.clear()
        for s, d in _hops(order, nets, breaks):
            for e, f in self.loads(s, d):
                self.res[e] = self.res[e] - f * bw

    def hop_bn(self, s: str, d: str) -> float:
        """The width one hop has left (memoised until the residual changes: ``take``, ``_restore``)."""
        got = self._hb.get((s, d))
        if got is not None:
            return got
        ld = self.capacity.loads(s, d)
        got = -1.0 if ld is None else min([self.res[e] / f for e, f in ld] or [float("inf")])
        self._hb[(s, d)] = got
        return got

    def _restore(self, snap: dict) -> None:
        self._hb.clear()
        self._xr.clear()
        self.res.clear()
        self.res.update(snap)

    def upper_bound(self) -> float:
        """No channel can be wider than any GPU's best single hop out or in (or a NIC port)."""
        ub = self.cap
        ends = self.nets if self.inter else []
        for g in self.gpus:
            outs = [self.hop_bn(g, h) for h in self.gpus if h != g] + [self.hop_bn(g, n) for n in ends]
            ins = [self.hop_bn(h, g) for h in self.gpus if h != g] + [self.hop_bn(n, g) for n in ends]
            ub = min(ub, max(outs or [0.0]), max(ins or [0.0]))
        if self.inter:
            ub = min(ub, max(max(self.hop_bn(n, g) for g in self.gpus) for n in self.nets))
        return ub

    # -- the widest cycle ---------------------------------------------------------------------------
    def best_channel(self) -> Optional[tuple]:
        """(order, nets, bw, breaks) of the widest channel on the residual capacity, or None."""
        if self.domains:
            return self._split_channel()
        got = self._best()
        return None if got is None else (got[0], got[1], got[2], ())

    def _split_channel(self) -> Optional[tuple]:
        """The widest channel through every domain: each domain's widest NET-to-NET chain (exact as
        a whole node's), searched one domain after the other on the capacity the earlier ones left
        (each taken at most at the width the others could reach alone), every domain first in turn;
        joined in domain order, chain k's exit NIC sending to chain k+1's entry NIC."""
        doms = self.domains
        saved = (self.gpus, self.inter)
        best = None
        try:
            alone = []
            for dom in doms:
                self._focus(dom, True)
                got = self._best()
                if got is None:
                    return None
                alone.append(got[2])
            for first in range(len(doms)):
                snap = dict(self.res)
                chains: dict = {}
                try:
                    for k in list(range(first, len(doms))) + list(range(first)):
                        self._focus(doms[k], True)
                        got = self._best()
                        if got is None:
                            break
                        chains[k] = got
                        self.take(got[0], got[1], min(got[2], min(alone)))
                finally:
                    self._restore(snap)
                if len(chains) != len(doms):
                    continue
                order, breaks = [], []
                for k in range(len(doms)):
                    order.extend(chains[k][0])
                    if k + 1 < len(doms) or not self.nodes_inter:
                        breaks.append((len(order) - 1, chains[k][1][1], chains[(k + 1) % len(doms)][1][0]))
                nets = (chains[0][1][0], chains[len(doms) - 1][1][1]) if self.nodes_inter else (None, None)
                self._focus(saved[0], saved[1])
                bw, hops = self.evaluate(order, nets, tuple(breaks))
                key = (round(bw, 6), -hops)
                if best is None or key > best[0]:
                    best = (key, (order, nets, bw, tuple(breaks)))
        finally:
            self._focus(saved[0], saved[1])
        return None if best is None or best[1][2] <= EPS else best[1]

    def _best(self) -> Optional[tuple]:
        """(order, nets, bw) of the widest cycle (or NET-to-NET chain) over the focused GPUs."""
        if not self.inter:
            if self.symmetric:
                order = list(self.gpus)
                bw, _ = self.evaluate(order)
                return (order, (None, None), bw) if bw > EPS else None
            if len(self.gpus) <= EXACT_MAX_GPUS:
                return self._bnb(None)
            return self._heuristic(None)
        best = None
        for n in self.nets:
            if best is not None and self._net_ub(n) < best[2] - 1e-9:
                continue
            if self.symmetric:
                got = self._symmetric_chain(n)
            else:
                got = self._bnb(n) if len(self.gpus) <= EXACT_MAX_GPUS else self._heuristic(n)
            if got is not None and (best is None or self._key(got) > self._key(best)):
                best = got
            if best is not None and best[2] >= self.cap - 1e-9 and best[1][0] == best[1][1] and self.rail:
                break
        return best

    def _net_ub(self, net_in: str) -> float:
        """A channel entering through ``net_in`` is no wider than its best first hop, nor than the
        best way back out to a NIC."""
        first = max([self.hop_bn(net_in, g) for g in self.gpus] or [0.0])
        out = max([self.hop_bn(g, m) for g in self.gpus for m in self._exits(net_in)] or [0.0])
        return min(self.cap, first, out)

    def _symmetric_chain(self, net_in: str) -> Optional[tuple]:
        """All GPUs on one NVSwitch: only the GPU the chain enters and the one it leaves from
        matter (every other GPU loads its NVSwitch link once each way), so try the few best
        entry and exit GPUs with the others in index order."""
        firsts = sorted(self.gpus, key=lambda g: (-min(self.hop_bn(net_in, g), self.cap), self.pos[g]))[:4]
        def exit_rank(g: str) -> tuple:
            # the exits are every NET whichever NET the chain entered by: the rank depends on g alone
            got = self._xr.get(g)
            if got is None:
                widths = []
                for m in self._exits(net_in):
                    p = self.ns.path(g, m)
                    if p is not None:
                        widths.append((round(min(self.hop_bn(g, m), self.cap), 6), -p.hops))
                w = max(widths or [(0.0, 0)])
                got = self._xr[g] = (-w[0], self.pos[g]) if self.rail else (-w[0], -w[1], self.pos[g])
            return got

        lasts = sorted(self.gpus, key=exit_rank)[:4]
        best = None
        for f in firsts:
            for last in lasts:
                if last == f and len(self.gpus) > 1:
                    continue
                if best is not None and min(self.hop_bn(net_in, f), self.cap) < best[0][0] + self.tie:
                    continue
                mid = [g for g in self.gpus if g not in (f, last)]
                order = [f] + mid + ([last] if last != f else [])
                key, nets = self._score(order, net_in)
                if best is None or key > best[0]:
                    best = (key, order, nets)
        if best is None or best[0][0] <= EPS:
            return None
        return best[1], best[2], best[0][0]

    def _key(self, ch: tuple) -> tuple:
        order, nets, bw = ch
        return self._rank(bw, nets[0] == nets[1], self.evaluate(order, nets)[1])

    def _rank(self, bw: float, same: bool, hops: int) -> tuple:
        if self.rail:
            return (round(bw, 6), same, -hops)
        return (round(bw, 6), -hops, same)

    def _exits(self, net_in: str) -> list:
        """NETs a channel entering through ``net_in`` may leave through: the same one first (rail
        aligned: node i's exit NIC talks to node i+1's entry NIC on the same rail)."""
        return [net_in] + [m for m in self.nets if m != net_in]

    def _bnb(self, net_in: Optional[str]) -> Optional[tuple]:
        gpus = self.gpus
        n = len(gpus)
        res = self.res
        cap = self.cap
        agg: dict = {}
        best = {"bw": EPS, "hops": 10 ** 9, "same": False, "order": None, "nets": (None, None)}
        ub = self.upper_bound() if net_in is None else min(self.upper_bound(), self._net_ub(net_in))
        if ub <= EPS:
            return None
        count = [0]

        def push(s: str, d: str, bn: float) -> tuple:
            undo = []
            for e, f in self.loads(s, d):
                old = agg.get(e, 0.0)
                undo.append((e, old))
                agg[e] = old + f
                v = res[e] / agg[e]
                if v < bn:
                    bn = v
            return bn, undo

        def pop(undo: list) -> None:
            for e, old in reversed(undo):
                if old == 0.0:
                    del agg[e]
                else:
                    agg[e] = old

        def better(bn: float, same: bool, hops: int) -> bool:
            bn = min(bn, cap)
            if abs(bn - best["bw"]) > 1e-9:
                return bn > best["bw"]
            if self.rail and same != best["same"]:
                return same
            if hops != best["hops"]:
                return hops < best["hops"]
            return same and not best["same"]

        def finish(order: list, bn: float, hops: int) -> None:
            if net_in is None:
                s, d = order[-1], order[0]
                p = self.ns.path(s, d)
                if p is None:
                    return
                b2, undo = push(s, d, bn)
                if better(b2, False, hops + p.hops):
                    best.update(bw=min(b2, cap), hops=hops + p.hops, same=False, order=list(order), nets=(None, None))
                pop(undo)
            else:
                for m in self._exits(net_in):
                    p = self.ns.path(order[-1], m)
                    if p is None:
                        continue
                    b2, undo = push(order[-1], m, bn)
                    if better(b2, m == net_in, hops + p.hops):
                        best.update(bw=min(b2, cap), hops=hops + p.hops, same=m == net_in, order=list(order),
                                    nets=(net_in, m))
                    pop(undo)
            if best["bw"] >= ub - 1e-9 and (net_in is None or best["same"] or not self.rail):
                raise _Stop

        def rec(order: list, used: set, bn: float, hops: int) -> None:
            count[0] += 1
            if count[0] > NODE_BUDGET:
                self.exact = False
                raise _Stop
            if len(order) == n:
                finish(order, bn, hops)
                return
            cur = order[-1]
            cands = []
            for g in gpus:
                if g in used:
                    continue
                p = self.ns.path(cur, g)
                if p is None:
                    continue
                cands.append((-min(self.hop_bn(cur, g), cap), p.hops, self.pos[g], g))
            cands.sort()
            for negb, h, _, g in cands:
                if -negb < best["bw"] - 1e-9:
                    break
                b2, undo = push(cur, g, bn)
                cb = min(b2, cap)
                # Only strictly wider channels are explored once one is known (a same-NIC exit may
                # still replace a cross-NIC one of equal width); among equals the DFS order --
                # widest then shortest hop first -- already found the preferred one.
                if cb > best["bw"] + 1e-9 or (self.rail and net_in is not None and not best["same"]
                                               and cb > best["bw"] - 1e-9):
                    used.add(g)
                    order.append(g)
                    rec(order, used, b2, hops + h)
                    order.pop()
                    used.discard(g)
                pop(undo)

        try:
            if net_in is None:
                rec([gpus[0]], {gpus[0]}, float("inf"), 0)
            else:
                firsts = sorted(gpus, key=lambda g: (-min(self.hop_bn(net_in, g), cap), self.pos[g]))
                for g in firsts:
                    if min(self.hop_bn(net_in, g), cap) < best["bw"] - 1e-9:
                        break
                    b1, undo = push(net_in, g, float("inf"))
                    rec([g], {g}, b1, self.ns.path(net_in, g).hops)
                    pop(undo)
        except _Stop:
            pass
        if best["order"] is None:
            return None
        return best["order"], best["nets"], best["bw"]

    # -- large node counts --------------------------------------------------------------------------
    def _pci_order(self) -> list:
        """GPUs in depth-first order of the PCI tree (CPU, then switch chain, then index): rings
        that follow it cross every tree link once in each direction."""
        ns = self.ns

        def chain(g: str) -> tuple:
            out = []
            cur = next((k[1] for k in ns.out[g] if ns.nodes[k[1]]["type"] == "DEV"), g)   # the GPU's device
            seen = {g, cur}
            while True:
                ups = [k[1] for k in ns.out[cur] if k[2] == "PCI" and k[1] not in seen
                       and ns.nodes[k[1]]["type"] in ("PCI", "CPU")]
                if not ups:
                    break
                cur = sorted(ups)[0]
                seen.add(cur)
                out.append(cur)
                if ns.nodes[cur]["type"] == "CPU":
                    break
            return tuple(reversed(out))

        return sorted(self.gpus, key=lambda g: (chain(g), self.pos[g]))

    def _greedy_walk(self, first: str) -> list:
        order = [first]
        used = {first}
        while len(order) < len(self.gpus):
            cur = order[-1]
            nxt = max((g for g in self.gpus if g not in used and self.ns.path(cur, g) is not None),
                      key=lambda g: (min(self.hop_bn(cur, g), self.cap), -self.ns.path(cur, g).hops, -self.pos[g]),
                      default=None)
            if nxt is None:
                return []
            order.append(nxt)
            used.add(nxt)
        return order

    def _heuristic(self, net_in: Optional[str]) -> Optional[tuple]:
        self.exact = False
        gpus = self.gpus
        starts = [list(gpus), self._pci_order()]
        if net_in is not None:
            first = max(gpus, key=lambda g: (min(self.hop_bn(net_in, g), self.cap), -self.pos[g]))
            starts = [[first] + [g for g in s if g != first] for s in starts]
            starts.append(self._greedy_walk(first))
        else:
            starts.append(self._greedy_walk(gpus[0]))
        best = None
        for order in starts:
            if len(order) != len(gpus):
                continue
            got = self._two_opt(order, net_in)
            if got is not None and (best is None or self._key(got) > self._key(best)):
                best = got
        return best if best is not None and best[2] > EPS else None

    def _score(self, order: list, net_in: Optional[str]) -> tuple:
        if net_in is None:
            bw, hops = self.evaluate(order)
            return (round(bw, 6), True, -hops), (None, None)
        best = None
        # the chain up to its last GPU is the same for every exit: its loads once, then each exit's
        # last hop on top (the same sums in the same order as evaluate(order, (net_in, m)))
        ns, res = self.ns, self.res
        base: dict = {}
        hops0 = 0
        broken = False
        for s, d in [(net_in, order[0])] + list(zip(order, order[1:])):
            p = ns.path(s, d)
            if p is None:
                broken = True
                break
            hops0 += p.hops
            for e, f in self.loads(s, d):
                base[e] = base.get(e, 0.0) + f
        base_bn = min([res[e] / f for e, f in base.items()] or [float("inf")])
        for m in self._exits(net_in):
            if best is not None and min(self.hop_bn(order[-1], m), self.cap) < best[0][0] + self.tie:
                continue   # its last hop alone is no wider than the best exit: cannot win
            p = None if broken else ns.path(order[-1], m)
            if p is None:
                bw, hops = 0.0, 10 ** 9
            else:
                last: dict = {}
                for e, f in self.loads(order[-1], m):
                    last[e] = last.get(e, base.get(e, 0.0)) + f
                if any(res[e] < 0 for e in last):   # the shortcut assumes adding load only narrows
                    bw, hops = self.evaluate(order, (net_in, m))
                else:
                    bw = min([base_bn] + [res[e] / v for e, v in last.items()])
                    bw, hops = min(bw, self.cap), hops0 + p.hops
            key = self._rank(bw, m == net_in, hops)
            if best is None or key > best[0]:
                best = (key, (net_in, m))
        return best

    def _two_opt(self, order: list, net_in: Optional[str]) -> Optional[tuple]:
        key, nets = self._score(order, net_in)
        lo = 1 if net_in is None else 0   # with a fixed first GPU (rotation) only reverse inside
        n = len(order)
        evals = 0
        improved = True
        while improved and evals < 4000:
            improved = False
            for i in range(lo, n - 1):
                for j in range(i + 2, n + 1):
                    cand = order[:i] + order[i:j][::-1] + order[j:]
                    k2, nets2 = self._score(cand, net_in)
                    evals += 1
                    if k2 > key:
                        order, key, nets, improved = cand, k2, nets2, True
                        break
                    if evals >= 4000:
                        break
                if improved or evals >= 4000:
                    break
        return order, nets, key[0]




def consolidate(alloc: dict, cap: float) -> list:
    """Bandwidth given to each distinct channel order -> channels of at most ``cap`` each (full
    channels first, then the remainder; remainders under 1% of the cap are dropped)."""
    out = []
    for (order, nets, breaks), total in alloc.items():
        full = int((total + 1e-9) // cap)
        rest = total - full * cap
        for _ in range(full):
            out.append(RingChannel(list(order), round(cap, 6), nets, breaks))
        if rest > 0.01 * cap:
            out.append(RingChannel(list(order), round(rest, 6), nets, breaks))
    return out


def _through(ns, a: str, b: str, nvs: str) -> bool:
    """NCCL's path a -> b is GPU -> its device -> the NVSwitch -> b's device -> GPU, nothing else."""
    p = ns.path(a, b)
    return p is not None and len(p.nodes) == 5 and p.nodes[2] == nvs and \
        ns.nodes[p.nodes[1]]["type"] == ns.nodes[p.nodes[3]]["type"] == "DEV"


class Capacity:
    """Residual bandwidth of every directed link of NCCL's system while channels are placed."""

    def __init__(self, ns) -> None:
        self.ns = ns
        self.res = dict(ns.capacity)
        self._loads: dict = {}

    def loads(self, src: str, dst: str) -> Optional[list]:
        """``[(link key, amount)]`` one GB/s from ``src`` to ``dst`` takes (sorted, each link once);
        None when NCCL has no path."""
        key = (src, dst)
        if key not in self._loads:
            self._loads[key] = path_loads(self.ns, src, dst)
        return self._loads[key]

    def take(self, src: str, dst: str, speed: float) -> bool:
        """Reserve ``speed`` along src->dst if every link has room; False (and no change) otherwise."""
        ld = self.loads(src, dst)
        if ld is None:
            return False
        res = self.res
        for e, f in ld:
            if res[e] + 1e-6 < f * speed:
                return False
        for e, f in ld:
            res[e] = round(res[e] - f * speed, 6)
        return True

    def give(self, src: str, dst: str, speed: float) -> None:
        for e, f in self.loads(src, dst) or []:
            self.res[e] = round(self.res[e] + f * speed, 6)

    def bottleneck(self, src: str, dst: str) -> float:
        """Largest speed src->dst could still take (links only)."""
        ld = self.loads(src, dst)
        if not ld:
            return 0.0 if ld is None else float("inf")
        return min(self.res[e] / f for e, f in ld)


def path_loads(ns, src: str, dst: str) -> Optional[list]:
    """What one GB/s along NCCL's path from ``src`` to ``dst`` takes on each directed link (the
    amounts of ``followPath``, :func:`gpucomm.planners.nccl.search.follow_amounts`), summed per link
    and sorted; None when NCCL has no path."""
    p = ns.path(src, dst)
    if p is None:
        return None
    start = ns.node(src)
    pl = start.paths[ns.node(dst).type][ns.node(dst).idx]
    out: dict = {}
    for link, amount in follow_amounts(pl, start):
        k = ns.link_key(link)
        out[k] = out.get(k, 0.0) + amount
    return sorted(out.items())

