"""Our ring search: K channels, each a Hamiltonian cycle over the chosen GPUs (one node) or a chain
entering and leaving the node through NICs (several identical nodes), sharing link capacity,
chosen to maximise the total bus bandwidth (the sum over channels of each channel's bandwidth).

Model (shared with :mod:`gpucomm.planners.nccl.search`, so the comparison is like for like): every hop of a
channel follows the route NCCL's transports use (:func:`gpucomm.planners.nccl.paths.compute_path_set`, rule
``nccl``) and takes ``bw x load`` on each directed link of that route (:func:`path_loads`: Intel
P2P overhead, pre-Ampere reverse reservation); the sum over channels may not exceed any link's
capacity.  A NIC port carries its rate in each direction (NCCL's own search additionally charges
a whole channel to the port once; physically a port is full duplex).  One channel is one CTA: it
never gets more than the top of NCCL's speed ladder for the architecture (40/60/90 GB/s intra,
48/48/96 inter, :func:`gpucomm.planners.nccl.search.channel_cap`), which is also what makes the channel
count realistic.

Search: bandwidth is handed out greedily, each time to the *widest* channel on the residual
capacity (bottleneck = min over links of residual / load, counting links a channel crosses several
times), in two variants whose better total wins: ``widest-cycle`` gives each channel its whole
bottleneck, ``water-filling`` a quarter of the channel cap at a time (so channels sharing links are
balanced -- on a fully connected 4-GPU mesh it reaches 188 of the 192 GB/s possible, where NCCL's
rings reach 180).  Across nodes, among equally wide chains each variant prefers leaving through
the entry NIC (rail aligned), then the shorter route; both are also run with the shorter route
first (``.../cross-nic``, what NCCL_CROSS_NIC allows): a rail-aligned exit from a GPU that is not
next to the NIC is routed through another GPU (PXN, one more NVLink hop) or across the CPU, which
costs capacity the next channels need (OCI H100 at 2 nodes: 370.8 rail-first, 384 cross-nic, as
NCCL's rings, which enter by GPU i's NIC and leave by GPU j's).  Channels with the same order are then merged and cut into cap-sized channels.
The widest channel itself is found:

* <= 10 GPUs: exactly, by branch and bound over all cycles (rotation fixed), pruned by the best
  bottleneck so far and stopped as soon as an upper bound (every GPU's best single hop in and out,
  the channel cap, the NICs) is reached;
* all GPUs on one NVSwitch and nothing else in their paths (HGX, DGX, NVL72): every cycle loads
  each GPU's NVSwitch link once in each direction, so any order is optimal -- index order, O(n)
  (across nodes only the entry and exit GPUs next to the NIC matter);
* otherwise (> 10 GPUs): candidates from index order, the PCI tree's depth-first order and a
  widest-next-hop greedy walk, improved by 2-opt on the true (shared-link) bottleneck.

Where NCCL splits the node into domains joined by the network (``ncclTopoCheckNet``: two GPUs that both
reach a NIC over a path of type <= PXB faster than over their P2P path; NCCL_NET_DISABLE_INTRA=1 turns it
off -- :func:`gpucomm.planners.nccl.paths.net_domains`), a channel may do the same: one NET-to-NET chain
per domain (each searched like a several-node chain), chain k leaving through a NIC that sends to the NIC
chain k+1 enters through (``RingChannel.breaks``); the hop loads the path GPU -> NIC (with its NIC port
sending) and NIC -> GPU (the other port receiving).  Whole-node cycles (P2P across the domains) remain a
candidate; the better total wins.

The NCCL reference's rings, placed in the same capacity model and topped up, are a third
candidate (``nccl-seeded``); the plan reports which one won (``method``), so a regression of the
search itself stays visible.  Our NETs are physical ports; a ring NCCL routes through a fused
virtual NIC (``mlx5_0+mlx5_1``: dual-port fusion, the IB plugin stripes each message over the
ports) is placed as one channel per port pairing, each with an equal share of its bandwidth.  The search stops when the widest channel left is under 5% of the
first one.
"""
from __future__ import annotations

import math

from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Union

from gpucomm.probes.errors import InputError, PlanInfeasible, TopologyError

from gpucomm.planners.nccl.graph import gpu_nodes, net_nodes
from gpucomm.planners.nccl.search import Capacity, channel_cap, nccl_reference, restrict_gpus
from gpucomm.planners.nccl.paths import PathSet, as_graph, compute_path_set, net_domains
from gpucomm.planners.collectives.validate import validate_capacity, validate_ring

EXACT_MAX_GPUS = 10
NODE_BUDGET = 50_000
AUTO_MAX_CHANNELS = 32
QUANTUM_PARTS = 4        # bandwidth is handed out a quarter of the channel cap at a time
MAX_ROUNDS = 400
MAX_CHANNELS = 64
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


@dataclass
class RingPlan:
    """Result of :func:`search_rings`."""

    G: Any
    ps: PathSet
    gpus: list
    nodes: int
    channels: list
    cap: float
    method: str
    exact: bool
    nccl_reference: Optional[dict] = None
    warnings: list = field(default_factory=list)
    domains: Optional[list] = None    # the NIC-joined domains (ncclTopoCheckNet) the channels chain through

    @property
    def total_bw(self) -> float:
        return round(sum(c.bw for c in self.channels), 4)

    def hops(self, ch: RingChannel) -> list:
        """(src, dst) of every path of a channel (a NIC hop inside the node is its two paths GPU -> NET
        and NET -> GPU; the network between the two NICs is not a path of the graph)."""
        return _hops(ch.gpus, ch.nets, ch.breaks)

    def to_dict(self) -> dict:
        """The ``gpucomm.rings/v1`` document."""
        G = self.G
        lab = lambda n: G.nodes[n].get("label", n) if n is not None else None  # noqa: E731
        chans = []
        for i, ch in enumerate(self.channels):
            links = []
            for s, d in _hops(ch.gpus, ch.nets, ch.breaks, wire=True):
                if s is not None and G.nodes[s].get("type") == "NET" and d is not None and \
                        G.nodes[d].get("type") == "NET":
                    links.append({"from": lab(s), "to": lab(d), "type": "NET", "hops": 1, "via": None,
                                  "path_bw_GBps": round(min(_port_bw(G, s, send=True), _port_bw(G, d, send=False)), 3)})
                    continue
                p = self.ps.get(s, d)
                links.append({"from": lab(s), "to": lab(d), "type": p.type, "path_bw_GBps": round(p.bw, 3),
                              "hops": p.hops, "via": lab(p.via) if p.via else None})
            item = {"channel": i, "gpus": [G.nodes[g]["index"] for g in ch.gpus], "bw_GBps": round(ch.bw, 3),
                    "links": links}
            if self.nodes > 1:
                item["nics"] = [G.nodes[ch.nets[0]]["name"], G.nodes[ch.nets[1]]["name"]]
            if ch.breaks:
                item["net_hops"] = [{"after": k, "from": G.nodes[ch.gpus[k]]["index"],
                                     "to": G.nodes[ch.gpus[(k + 1) % len(ch.gpus)]]["index"],
                                     "nics": [G.nodes[x]["name"], G.nodes[y]["name"]]} for k, x, y in ch.breaks]
            chans.append(item)
        ref = self.nccl_reference
        return {
            "schema": "gpucomm.rings/v1",
            "nodes": self.nodes,
            "gpus": [G.nodes[g]["index"] for g in self.gpus],
            "channels": chans,
            "total_bw_GBps": self.total_bw,
            "per_channel_cap_GBps": self.cap,
            "method": self.method,
            "exact": self.exact,
            "nccl_reference": None if ref is None else {
                "channels": ref["channels"], "search_channels": ref["search_channels"],
                "bw_GBps": ref["bw_intra"] if self.nodes <= 2 else ref["bw_inter"],
                "total_bw_GBps": ref["total_bw"], "type_intra": ref["type_intra"], "type_inter": ref["type_inter"],
                "nccl_nodes": ref["nccl_nodes"]},
            "assumptions": list(G.graph.get("assumptions") or []),
            "warnings": list(self.warnings),
            **({"net_domains": [[G.nodes[g]["index"] for g in d] for d in self.domains]} if self.domains else {}),
        }


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


def _port_bw(G, net: str, send: bool) -> float:
    """A NET node's port rate in one direction: sending is the NIC -> NET edge, receiving NET -> NIC."""
    bws = [float(a["bw"]) for _, _, a in (G.in_edges(net, data=True) if send else G.out_edges(net, data=True))]
    return min(bws) if bws else float(G.nodes[net].get("bw") or 0.0)


class _Stop(Exception):
    pass


class _Packer:
    """Residual capacity and the widest-cycle search on it."""

    def __init__(self, G, ps: PathSet, gpus: list, inter: bool, cap: float, rail: bool = True,
                 domains: Optional[list] = None):
        self.G, self.ps, self.cap = G, ps, cap
        # among equally wide channels prefer leaving through the entry NIC (rail) or the shorter route;
        # ``tie``: how much wider a candidate must be to be tried (cross-nic: an equally wide one may
        # still be shorter)
        self.rail = rail
        self.tie = 1e-9 if rail else -1e-9
        self.capacity = Capacity(G, ps, net_ports=False)
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
        G, ps = self.G, self.ps
        self.gpus, self.inter = gpus, inter
        self._xr = {}
        self.nets = net_nodes(G) if inter else []
        self.pos = {g: i for i, g in enumerate(gpus)}
        nvs = [n for n, a in G.nodes(data=True) if a.get("type") == "NVS"]
        self.symmetric = False
        if len(nvs) == 1 and len(gpus) > 1:
            # the same for every packer on this path set (search_rings builds several)
            memo = ps.derived
            key = ("rings.symmetric", tuple(gpus), nvs[0])
            if key not in memo:
                table = ps.table
                memo[key] = all(
                    (p := table.get((a, b))) is not None and p.nodes == (a, nvs[0], b)
                    for a in gpus for b in gpus if a != b)
            self.symmetric = memo[key]

    # -- evaluation -----------------------------------------------------------------------------
    def loads(self, s: str, d: str) -> list:
        ld = self.capacity.loads(s, d)
        if ld is None:
            raise PlanInfeasible(f"no path from {self.G.nodes[s].get('label', s)} to {self.G.nodes[d].get('label', d)}")
        return ld

    def evaluate(self, order: list, nets: tuple = (None, None), breaks: tuple = ()) -> tuple:
        """(bottleneck capped at the channel cap, total hops) of a whole channel on the residual."""
        agg: dict = {}
        hops = 0
        for s, d in _hops(order, nets, breaks):
            if self.ps.get(s, d) is None:
                return 0.0, 10 ** 9
            hops += self.ps.get(s, d).hops
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
                    p = self.ps.get(g, m)
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
                p = self.ps.get(s, d)
                if p is None:
                    return
                b2, undo = push(s, d, bn)
                if better(b2, False, hops + p.hops):
                    best.update(bw=min(b2, cap), hops=hops + p.hops, same=False, order=list(order), nets=(None, None))
                pop(undo)
            else:
                for m in self._exits(net_in):
                    p = self.ps.get(order[-1], m)
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
                p = self.ps.get(cur, g)
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
                    rec([g], {g}, b1, self.ps.get(net_in, g).hops)
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
        G = self.G

        def chain(g: str) -> tuple:
            out = []
            cur = g
            seen = {g}
            while True:
                ups = [v for v in G.successors(cur) if G.edges[cur, v]["type"] == "PCI" and v not in seen
                       and G.nodes[v].get("type") in ("PCI", "CPU")]
                if not ups:
                    break
                cur = sorted(ups)[0]
                seen.add(cur)
                out.append(cur)
                if G.nodes[cur].get("type") == "CPU":
                    break
            return tuple(reversed(out))

        return sorted(self.gpus, key=lambda g: (chain(g), self.pos[g]))

    def _greedy_walk(self, first: str) -> list:
        order = [first]
        used = {first}
        while len(order) < len(self.gpus):
            cur = order[-1]
            nxt = max((g for g in self.gpus if g not in used and self.ps.get(cur, g) is not None),
                      key=lambda g: (min(self.hop_bn(cur, g), self.cap), -self.ps.get(cur, g).hops, -self.pos[g]),
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
        ps, res = self.ps, self.res
        base: dict = {}
        hops0 = 0
        broken = False
        for s, d in [(net_in, order[0])] + list(zip(order, order[1:])):
            p = ps.get(s, d)
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
            p = None if broken else ps.get(order[-1], m)
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


def _parse_channels(channels: Union[str, int, None]) -> Optional[int]:
    if channels is None or (isinstance(channels, str) and channels.strip().lower() == "auto"):
        return None
    try:
        n = int(str(channels).strip())
    except ValueError:
        raise InputError(f"--channels {channels!r} is not a number", expected="auto or an integer 1-64") from None
    if n < 1 or n > MAX_CHANNELS:
        raise InputError(f"--channels {n} is out of range", expected=f"auto or an integer 1-{MAX_CHANNELS}")
    return n


def _net_domains(G, ps: PathSet, sel: list, settings: Any = None) -> Optional[list]:
    """NCCL's NIC-joined domains of the chosen GPUs (:func:`gpucomm.planners.nccl.paths.net_domains`,
    NCCL_NET_DISABLE_INTRA and NCCL_SHM_DISABLE read as the NCCL model reads them), or None when NCCL
    keeps the node whole."""
    from gpucomm.planners.nccl.settings import NcclSettings

    if len(sel) < 2 or not net_nodes(G):
        return None
    s = settings if settings is not None else NcclSettings.from_env()
    doms = net_domains(G, ps, sel, net_disable_intra=s.net_disable_intra, shm_disable=s.shm_disable,
                       merge_level=s.merge_level, force_merge=s.force_merge)
    return doms if len(doms) > 1 else None


def search_rings(doc: Any, gpus: Optional[Iterable[int]] = None, channels: Union[str, int] = "auto",
                 nodes: int = 1, *, reference: bool = True, settings: Any = None) -> RingPlan:
    """Find ring channels (stable interface, used by the cost model and the CLI).

    ``doc``: topology document (or graph); ``gpus``: GPU indices to use (default all); ``channels``:
    ``"auto"`` or a count 1-64 (a count larger than the distinct rings found splits the widest
    channels, keeping the total); ``nodes``: identical nodes joined through their NICs (> 1 makes
    each channel a NIC-to-NIC chain).  ``reference``: also run :func:`nccl_reference` for the
    comparison (and as a candidate).  Raises InputError (unknown GPU, bad count), TopologyError
    (no NICs for nodes > 1), PlanInfeasible (fewer than 2 GPUs on one node, disconnected GPUs)."""
    want = _parse_channels(channels)
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        raise InputError(f"--nodes {nodes!r} is out of range", expected="an integer >= 1")
    G0 = as_graph(doc)
    if not gpu_nodes(G0):
        from gpucomm.probes.errors import NothingToDo

        raise NothingToDo("topology has no GPUs")
    G, sel = restrict_gpus(G0, list(gpus) if gpus is not None else None)
    inter = nodes > 1
    if inter and not net_nodes(G):
        raise TopologyError(f"topology has no NICs: --nodes {nodes} needs a network between nodes")
    if not inter and len(sel) < 2:
        raise PlanInfeasible(f"a ring needs at least 2 GPUs on one node (got {len(sel)})")
    G_net = G
    if not inter:
        H = G.copy()
        H.remove_nodes_from([n for n, a in G.nodes(data=True) if a.get("type") in ("NET", "NIC")])
        H.graph = dict(G.graph)
        G = H
    ps = compute_path_set(G, rule="nccl")
    # GPU -> GPU paths do not cross NICs (leaves of the PCI tree), so ``ps`` has NCCL's P2P paths
    domains = _net_domains(G_net, ps, sel, settings)
    if domains is not None and not inter:   # the NICs stay: channels go through them
        G = G_net
        ps = compute_path_set(G, rule="nccl")
    for a in sel:
        for b in sel:
            if a != b and ps.get(a, b) is None:
                raise PlanInfeasible(f"{G.nodes[a]['label']} cannot reach {G.nodes[b]['label']}")
    sms = [G.nodes[g].get("sm") for g in sel if G.nodes[g].get("sm")]
    cc = min(sms) if sms else None
    cap = channel_cap(cc, inter)
    # a split node is searched as NCCL searches it: NIC-to-NIC chains, on the inter-node speed ladder
    split_cap = channel_cap(cc, True)
    limit = want or AUTO_MAX_CHANNELS

    def pack(seed: Optional[list], quantum: Optional[float], rail: bool = True, split: bool = False) -> tuple:
        """Hand out bandwidth to the widest channel on the residual capacity, all of its bottleneck
        at once (``quantum=None``) or ``quantum`` at a time (water filling: balances several cycles
        that share links, e.g. the 6 rings of a fully connected 4-GPU xGMI/NVLink mesh); ``rail``:
        among equally wide channels prefer the entry NIC's rail over the shorter route; with
        ``split`` every channel chains through the NIC-joined domains."""
        c = split_cap if split else cap
        pk = _Packer(G, ps, sel, inter, c, rail, domains if split else None)
        alloc: dict = {}
        first = None
        for ch in seed or []:
            pk.take(ch.gpus, ch.nets, ch.bw, ch.breaks)
            key = (tuple(ch.gpus), tuple(ch.nets), tuple(ch.breaks))
            alloc[key] = alloc.get(key, 0.0) + ch.bw
            first = max(first or 0.0, ch.bw)
        for _ in range(MAX_ROUNDS):
            got = pk.best_channel()
            if got is None:
                break
            order, nets, bw, breaks = got
            first = first or bw
            if bw <= 1e-6 or bw < MIN_SHARE * first:
                break
            step = min(bw, quantum) if quantum else bw
            pk.take(order, nets, step, breaks)
            key = (tuple(order), tuple(nets), tuple(breaks))
            alloc[key] = alloc.get(key, 0.0) + step
        chans_ = _consolidate(alloc, c)
        if len(chans_) > limit:   # keep the widest channels (auto: NCCL's 32-channel ring search limit)
            keep = sorted(range(len(chans_)), key=lambda k: (-chans_[k].bw, k))[:limit]
            chans_ = [chans_[k] for k in sorted(keep)]
        return chans_, pk.exact

    best = None
    variants = [("widest-cycle", None, True, False), ("water-filling", cap / QUANTUM_PARTS, True, False)]
    if inter:
        variants += [("widest-cycle/cross-nic", None, False, False),
                     ("water-filling/cross-nic", cap / QUANTUM_PARTS, False, False)]
    if domains is not None:   # NCCL would route between the domains through NICs: so may we
        variants += [("widest-cycle", None, True, True), ("water-filling", split_cap / QUANTUM_PARTS, True, True)]
    for method, quantum, rail, split in variants:
        got, exact_ = pack(None, quantum, rail, split)
        if best is None or sum(c.bw for c in got) > sum(c.bw for c in best[0]) + 1e-6:
            best = (got, exact_, method, split)
    chans, exact, method, used_split = best
    plan_cap = split_cap if used_split else cap
    ref = None
    if reference:
        ref = nccl_reference(G0, nodes=nodes, gpus=list(gpus) if gpus is not None else None, settings=settings)
        ref_doms = ref.get("domain_rings") or []
        split_seed = len(ref_doms) > 1
        if split_seed and domains is None:
            # NCCL splits where our rule does not: its rings still count, over its domains
            lab = by_label_of(G)
            found = [[lab.get(x) for x in d[0]["gpus"]] for d in ref_doms if d]
            if len(found) == len(ref_doms) and not any(None in d for d in found):
                domains = [sorted(d, key=lambda g: G.nodes[g]["index"]) for d in found]
            else:
                split_seed = False
        seed_cap = split_cap if split_seed else cap
        seed = _reference_channels(G, ref, inter, seed_cap)[:limit] if (split_seed or not ref_doms) else []
        if any(set(c.gpus) != set(sel) for c in seed):
            seed = []
        if seed:
            try:
                alt, alt_exact = pack(seed, seed_cap / QUANTUM_PARTS, True, split_seed)
            except PlanInfeasible:
                alt = []
            if alt and sum(c.bw for c in alt) > sum(c.bw for c in chans) + 1e-6:
                try:   # NCCL's bandwidths can exceed what our path graph holds: keep the seed only if it fits
                    check_plan(RingPlan(G, ps, sel, nodes, alt, seed_cap, "nccl-seeded", alt_exact, ref))
                    chans, exact, method, used_split, plan_cap = alt, alt_exact, "nccl-seeded", split_seed, seed_cap
                except PlanInfeasible:
                    pass
    if not chans:
        raise PlanInfeasible("no ring fits: every candidate channel has zero bandwidth")
    if want is not None:
        while len(chans) < want:   # split the widest channel in two, keeping its order and total
            i = max(range(len(chans)), key=lambda k: (chans[k].bw, -k))
            c = chans[i]
            chans[i] = RingChannel(list(c.gpus), c.bw / 2, c.nets, c.breaks)
            chans.insert(i + 1, RingChannel(list(c.gpus), c.bw / 2, c.nets, c.breaks))
    plan = RingPlan(G, ps, sel, nodes, chans, plan_cap, method, exact, ref,
                    domains=domains if used_split else None)
    if not exact:
        plan.warnings.append(f"{len(sel)} GPUs: channels found by a heuristic search (exact up to "
                             f"{EXACT_MAX_GPUS} GPUs or on a single NVSwitch)")
    if used_split:
        lab = lambda g: str(G.nodes[g]["index"])  # noqa: E731
        plan.warnings.append(
            "NCCL connects GPUs of different domains (" + " | ".join(",".join(map(lab, d)) for d in domains)
            + ") through the network (ncclTopoCheckNet: their NICs are faster than their P2P path; "
            "NCCL_NET_DISABLE_INTRA=1 turns this off): every channel chains through the domains NIC to NIC; "
            + ("NCCL's own chains, placed in our capacity model and topped up" if method == "nccl-seeded" else
               "each domain's chain is searched exactly, their combination one domain after the other"))
    check_plan(plan)
    return plan


def _consolidate(alloc: dict, cap: float) -> list:
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


def _reference_channels(G, ref: dict, inter: bool, cap: float) -> list:
    """The NCCL reference's rings as channels of our model (labels -> node ids)."""
    by_label = by_label_of(G)
    by_name = {a.get("name"): n for n, a in G.nodes(data=True) if a.get("type") == "NET"}
    bw = min(ref["bw_intra"], cap)
    out = []
    if ref.get("fallback") or bw <= 0:
        return out
    if len(ref.get("domain_rings") or []) > 1 or inter:
        return _reference_chains(by_label, by_name, ref.get("domain_rings") or [ref["rings"]], inter, bw)
    for r in ref["rings"]:
        order = [by_label.get(x) for x in r["gpus"]]
        if None in order or len(set(order)) != len(order):
            return []
        out.append(RingChannel(order, bw, (None, None)))
    return out


def _reference_chains(by_label: dict, by_name: dict, domain_rings: list, inter: bool, bw: float) -> list:
    """NCCL's rings through NICs: channel c is every domain's chain c (NET to NET) in domain order --
    one domain on a node NCCL keeps whole across nodes; on a node it splits into NIC-joined domains,
    domain k's exit NIC sends to domain k+1's entry NIC (on one node the last domain's back to the
    first's; across nodes the node enters at the first domain's entry NIC and leaves at the last
    domain's exit NIC).  A fused NIC ("mlx5_0+mlx5_1", NCCL's makeVDevice) spreads the channel's
    traffic evenly over its ports (the IB plugin stripes every message over the merged devices' QPs):
    one channel of ours per port pairing, each with an equal share, so every port carries bw / ports."""
    out = []
    for c in range(min(len(d) for d in domain_rings)):
        parts = []
        for d in domain_rings:
            ch = d[c]
            order = [by_label.get(x) for x in ch["gpus"]]
            if None in order or len(ch["nets"]) != 2:
                return []
            ins, outs = (_ports(by_name, x) for x in ch["nets"])
            if not ins or not outs:
                return []
            parts.append((order, ins, outs))
        k = 1
        for _o, ins, outs in parts:
            for m in (len(ins), len(outs)):
                k = k * m // math.gcd(k, m)
        for i in range(k):
            order, breaks = [], []
            for j, (o, _ins, outs) in enumerate(parts):
                order.extend(o)
                if j + 1 < len(parts) or not inter:
                    nxt_ins = parts[(j + 1) % len(parts)][1]
                    breaks.append((len(order) - 1, outs[i % len(outs)], nxt_ins[i % len(nxt_ins)]))
            nets = (parts[0][1][i % len(parts[0][1])], parts[-1][2][i % len(parts[-1][2])]) if inter else (None, None)
            if len(set(order)) != len(order):
                return []
            out.append(RingChannel(order, bw / k, nets, tuple(breaks)))
    return out


def by_label_of(G) -> dict:
    """GPU/NIC label -> node id."""
    return {a.get("label"): n for n, a in G.nodes(data=True)}


def _ports(by_name: dict, name: str) -> list:
    """The NET node(s) behind a NIC name of the NCCL reference: the NET itself, or the ports of a
    fused virtual NIC named ``a+b``; [] when any is unknown."""
    if name in by_name:
        return [by_name[name]]
    parts = name.split("+")
    if len(parts) < 2 or any(x not in by_name for x in parts):
        return []
    return [by_name[x] for x in parts]


def check_plan(plan: RingPlan) -> None:
    """validate_ring on every channel and validate_capacity on the whole plan."""
    usage: dict = {}
    cap = Capacity(plan.G, plan.ps, net_ports=False)
    for ch in plan.channels:
        validate_ring(ch.gpus, plan.gpus, closed=plan.nodes == 1)
        if plan.nodes > 1 and (ch.nets[0] is None or ch.nets[1] is None):
            raise PlanInfeasible("a multi-node channel must enter and leave through a NIC")
        for i, x, y in ch.breaks:
            if not 0 <= i < len(ch.gpus) or (plan.nodes > 1 and i == len(ch.gpus) - 1) or \
                    any(plan.G.nodes[n].get("type") != "NET" for n in (x, y) if n in plan.G) or \
                    x not in plan.G or y not in plan.G:
                raise PlanInfeasible("a NIC hop inside the node must join two GPUs of the channel through two NICs")
        if len({i for i, _, _ in ch.breaks}) != len(ch.breaks):
            raise PlanInfeasible("two NIC hops at the same position of a channel")
        for s, d in _hops(ch.gpus, ch.nets, ch.breaks):
            if plan.ps.get(s, d) is None:
                raise PlanInfeasible(f"no path from {s} to {d}")
            for e, f in cap.loads(s, d) or []:
                usage[e] = usage.get(e, 0.0) + f * ch.bw
    validate_capacity(usage, {(u, v): float(a["bw"]) for u, v, a in plan.G.edges(data=True)}, "ring plan")


def rings_report(doc, gpus: Optional[list] = None, channels: str = "auto", nodes: int = 1,
                 log: Optional[dict] = None) -> dict:
    """The ``gpucomm.rings/v1`` document of ``gpucomm rings``; with ``log`` (a parsed NCCL debug log)
    it gains an ``nccl_log`` section (:func:`gpucomm.planners.collectives.logcompare.compare_rings`)."""
    from gpucomm.probes.topology import Topology

    topo = Topology.of(doc)
    plan = search_rings(topo, gpus=gpus, channels=channels, nodes=nodes)
    out = plan.to_dict()
    if log is not None:
        from gpucomm.planners.collectives.logcompare import compare_rings

        out["nccl_log"] = compare_rings(log, out, plan.nccl_reference, topo.doc, nodes)
    return out

