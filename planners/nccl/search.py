"""A reference model of NCCL's own channel search (``ncclTopoCompute``, src/graph/search.cc, and the
channel count of ``ncclTopoPostset``, connect.cc), used as the baseline our ring
search must match or beat and by the cost model for NCCL's per-channel bandwidths.

What is modelled (2.30 semantics unless noted):

* the speed ladders per architecture (``ccMin`` = smallest sm), intra (1 node) and inter
  (multi-node), and the start index: first speed ``<= maxBw`` with ``speed * minChannels <= totalBw``
  (trees: ``totalBw * ngpus/(ngpus-1)``); ``maxBw`` = widest GPU->GPU (1 node) or GPU->NET path,
  ``totalBw`` = max over GPUs of max(PCI link, sum of NVLinks);
* channels consume ``speed`` on every link of every path they use (``followPath``), with NCCL's
  Intel P2P overhead and pre-Ampere reverse reservation (:func:`gpucomm.planners.nccl.paths.path_loads`), a NET
  port additionally carries at most ``net.bw / speed`` channels (node-level decrement, shared by
  NETs of the same asic+port);
* path-type limits ``typeIntra``/``typeInter`` raised step by step from the best observed type,
  cross-NIC allowed only after same-rail rings failed, lower speeds tried while
  ``next/solution > 0.49``; graphs compared by ``nChannels * bw`` then fewer hops;
* the recursive DFS of ``ncclTopoSearchRec``: finishing a channel recurses into the next one on the
  residual bandwidth, backtracking can revisit earlier channels, one step budget per search;
* DFS order: PCI (index) order first, replay of the previous channel, then NCCL's GPU scores (NET
  bandwidth/hops when the next hop returns to a NIC, then intra bw, hops, distance in index order);
  on NVSwitch systems only the index neighbours ``g+1``/``g-1``; NETs in ``ncclTopoSelectNets`` order
  (by path type, each GPU's local NICs rotated by its index);
* ``ncclTopoDupChannels`` (``bwIntra >= 25`` and not ``cc > 80 && bwIntra < 50 && nCh > 4``), pass 2
  (rings: higher speeds with at least as many channels; trees: ``bwIntra`` up to ``2 * bwInter``),
  the tree graph (``BALANCED_TREE``, min = max = ring channels; on sm90+ retried as ``TREE`` when it
  does not fit; trees also check the reverse path's type), ``nChannels = 2 * min(ring, tree)``,
  the sm90 multi-node x2 rule (``ring.bwIntra > 45`` and fewer than 16 channels), 64-channel cap;
  the fallback (1 channel, bw 0.1, SYS) when nothing is found.

Deviations (documented, deliberate): step budgets are 4096 per search and 65536 per graph (NCCL:
16384 and 524288 -- Python is ~100x slower; later searches get 256 steps); the DFS also prunes a
partial channel once no GPU able to close it is left and once the residual capacity cannot hold
more channels than the best found (NCCL would spend its budget there -- same results, sooner);
``sameChannels=1`` passes are folded into "replay the previous channel first"; path-type
thresholds that no path uses are skipped (identical searches); split NVLink domains (minChannels
2), CollNet/NVLS graphs, NCCL_MIN/MAX_NCHANNELS and the "unpack" net doubling are not modelled.
Checked: the worked examples (HGX A100 24, HGX H100 24, DGX B200 32 channels) and the Panlichen
RTX 3090 2-node log and graph dump (1 channel at 4 GB/s, typeIntra SYS) are reproduced.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Optional

from gpucomm.probes.errors import PlanInfeasible, TopologyError
from gpucomm.probes.model import PathType

from gpucomm.planners.nccl.graph import LOC_BW, gpu_nodes, net_nodes
from gpucomm.planners.nccl.paths import RANK, TYPES, PathSet, as_graph, compute_path_set, path_loads

MAXCHANNELS = 64
RING_MAX_CHANNELS = MAXCHANNELS // 2
STEP_BUDGET = 4096          # per search (NCCL: 1 << 14)
GLOBAL_BUDGET = 1 << 16     # per ncclTopoCompute (NCCL: 1 << 19); beyond it searches get LATE_BUDGET
LATE_BUDGET = 256
EPS = 1e-6

# search.cc ncclTopoCompute speed ladders (speedArrayIntra/Inter), GB/s.
SPEEDS = {
    "intra": {0: (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
              90: (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
              100: (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0)},
    "inter": {0: (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2,
                  0.24, 0.12),
              90: (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12),
              100: (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4,
                    1.2, 0.24, 0.12)},
}


def speed_ladder(cc_min: Optional[int], inter: bool) -> tuple:
    """The speed array NCCL uses for this compute capability (ccMin) and search kind."""
    table = SPEEDS["inter" if inter else "intra"]
    cc = cc_min or 0
    return table[100] if cc >= 100 else table[90] if cc >= 90 else table[0]


def channel_cap(cc_min: Optional[int], inter: bool) -> float:
    """Top of the ladder: the fastest a single NCCL channel is ever searched at."""
    return speed_ladder(cc_min, inter)[0]


# --------------------------------------------------------------------------------------------
class Capacity:
    """Residual bandwidth of every directed link (and NET port) while channels are placed."""

    def __init__(self, G, ps: PathSet, net_ports: bool = True):
        self.G = G
        self.ps = ps
        self.res = {(u, v): float(a["bw"]) for u, v, a in G.edges(data=True)}
        self._loads: dict = {}
        # NCCL decrements net.bw on every NET with the same asic+port (virtual NICs of one port).
        self.port_of: dict = {}
        self.port_res: dict = {}
        if net_ports:
            for n in net_nodes(G):
                a = G.nodes[n]
                key = (str(a.get("asic")), str(a.get("port")))
                self.port_of[n] = key
                self.port_res[key] = max(self.port_res.get(key, 0.0), float(a.get("bw") or 0.0))

    def loads(self, src: str, dst: str) -> Optional[list]:
        key = (src, dst)
        if key not in self._loads:
            p = self.ps.get(src, dst)
            self._loads[key] = None if p is None else sorted(path_loads(self.G, p).items())
        return self._loads[key]

    def take(self, src: str, dst: str, speed: float) -> bool:
        """Reserve ``speed`` along src->dst if every link has room; False (and no change) otherwise."""
        ld = self.loads(src, dst)
        if ld is None:
            return False
        res = self.res
        for e, f in ld:
            if res[e] + EPS < f * speed:
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


@dataclass
class Graph:
    """One NCCL graph (``struct ncclTopoGraph``) as the model finds it."""

    pattern: str
    n_channels: int = 0
    bw_intra: float = 0.0
    bw_inter: float = 0.0
    type_intra: str = "LOC"
    type_inter: Optional[str] = None
    cross_nic: int = 0
    n_hops: int = 0
    intra: list = field(default_factory=list)   # per channel: GPU node ids
    inter: list = field(default_factory=list)   # per channel: (net in, net out)

    def better_than(self, other: Optional["Graph"], min_channels: int) -> bool:
        """ncclTopoCompareGraphs."""
        if self.n_channels < min_channels or self.n_channels == 0:
            return False
        if other is None or other.n_channels == 0:
            return True
        a, b = self.n_channels * self.bw_intra, other.n_channels * other.bw_intra
        if abs(a - b) > EPS:
            return a > b
        return self.cross_nic == other.cross_nic and self.n_hops < other.n_hops


class _Search:
    """One search (fixed speeds, types, pattern, crossNic): NCCL's recursive DFS, where finishing a
    channel recurses into the next one on the residual bandwidth and backtracking can revisit
    earlier channels, all under one step budget.  Channel candidates come from generators that
    hold their bandwidth while the caller recurses and release it when resumed or closed."""

    def __init__(self, ref: "_Reference", pattern: str, speed_intra: float, speed_inter: float, t_intra: int,
                 t_inter: int, cross_nic: int, max_channels: int, total_bw: float = float("inf")):
        self.ref = ref
        self.pattern = pattern
        self.si, self.se = speed_intra, speed_inter
        self.t_intra, self.t_inter = t_intra, t_inter
        self.cross_nic = cross_nic
        self.max_channels = max_channels
        self.total_bw = total_bw
        self.cap = Capacity(ref.G, ref.ps)
        self.channels: list = []   # (gpu order, (net in, net out), hops)
        self.best: list = []
        self.steps = 0
        self.stop = False
        self.budget = STEP_BUDGET if ref.steps_total < GLOBAL_BUDGET else LATE_BUDGET

    # -- hops -------------------------------------------------------------------------------
    def _type_ok(self, src: str, dst: str, limit: int) -> bool:
        p = self.ref.ps.get(src, dst)
        if p is None or RANK[p.type] > limit:
            return False
        if self.pattern != "ring":  # trees are bidirectional: the reverse path must qualify too
            q = self.ref.ps.get(dst, src)
            if q is None or RANK[q.type] > limit:
                return False
        return True

    def _hop(self, src: str, dst: str, speed: float, limit: int) -> bool:
        return self._type_ok(src, dst, limit) and self.cap.take(src, dst, speed)

    def _tick(self) -> bool:
        self.steps += 1
        return self.steps <= self.budget and not self.stop

    # -- the recursion over channels ------------------------------------------------------------
    def run(self, min_channels: int) -> Graph:
        if self._upper_bound() >= max(1, min_channels):
            self._rec()
        self.ref.steps_total += self.steps
        g = Graph(pattern=self.pattern, n_channels=len(self.best), bw_intra=self.si, bw_inter=self.se,
                  type_intra=TYPES[self.t_intra], type_inter=TYPES[self.t_inter] if self.ref.nets else None,
                  cross_nic=self.cross_nic, n_hops=sum(c[2] for c in self.best),
                  intra=[list(c[0]) for c in self.best], inter=[c[1] for c in self.best])
        return g

    def _better(self) -> bool:
        if len(self.channels) != len(self.best):
            return len(self.channels) > len(self.best)
        return sum(c[2] for c in self.channels) < sum(c[2] for c in self.best)

    def _rec(self) -> None:
        gen = self._candidates()
        try:
            for ch in gen:
                self.channels.append(ch)
                if self._better():
                    self.best = list(self.channels)
                n = len(self.channels)
                if n >= self.max_channels or n * self.se >= self.total_bw - EPS:
                    self.stop = True   # NCCL: time = -1, a perfect solution
                elif n + self._upper_bound() > len(self.best):
                    self._rec()
                self.channels.pop()
                if self.stop or self.steps > self.budget:
                    break
        finally:
            gen.close()

    def _upper_bound(self) -> int:
        """Channels the residual capacity could still hold: every ring channel makes each GPU send and
        receive once (a chain: n-1 sends), and takes one NET port slot per channel."""
        res = self.cap.res
        G = self.ref.G
        ub = 10 ** 9
        s = self.si
        tot_out = 0
        for g in self.ref.gpus:
            out = sum(int((res[(g, v)] + EPS) // s) for v in G.successors(g))
            inn = sum(int((res[(u, g)] + EPS) // s) for u in G.predecessors(g))
            tot_out += out
            if self.pattern == "ring" or self.ref.nets:
                ub = min(ub, out, inn)
        if self.pattern != "ring" and not self.ref.nets and len(self.ref.gpus) > 1:
            ub = min(ub, tot_out // (len(self.ref.gpus) - 1))
        if self.ref.nets:
            ub = min(ub, sum(int((r + EPS) // self.se) for r in self.cap.port_res.values()))
        return ub

    # -- candidates for the next channel --------------------------------------------------------
    def _candidates(self):
        ref = self.ref
        gpus = ref.gpus
        prev = self.channels[-1] if self.channels else None
        if not ref.nets:
            yield from self._fixed(list(prev[0]) if prev else list(gpus), None)   # replay / PCI order
            for g in gpus:
                yield from self._dfs_intra([g])
            return
        for n in ref.select_nets(self.t_inter):
            port = self.cap.port_of.get(n)
            if port is not None and self.cap.port_res[port] + EPS < self.se:
                continue
            if port is not None:
                self.cap.port_res[port] -= self.se
            try:
                yield from self._fixed(list(prev[0]) if prev else list(gpus), n)
                for g in ref.local_gpus(n):
                    yield from self._dfs_inter(n, g)
            finally:
                if port is not None:
                    self.cap.port_res[port] += self.se

    def _hops_of(self, order: list, net_in: Optional[str], net_out: Optional[str]) -> list:
        """(src, dst, speed, type limit) of every hop of a channel with this GPU order."""
        hops = []
        if net_in is None:
            for a, b in zip(order, order[1:]):
                hops.append((a, b, self.si, self.t_intra))
            if self.pattern == "ring" and len(order) > 1:
                hops.append((order[-1], order[0], self.si, self.t_intra))
            return hops
        hops.append((net_in, order[0], self.se, self.t_inter))
        if self.pattern == "ring":
            for a, b in zip(order, order[1:]):
                hops.append((a, b, self.si, self.t_intra))
            hops.append((order[-1], net_out, self.se, self.t_inter))
        else:
            half = self.pattern == "balanced_tree" and len(order) > 1
            hops.append((order[0], net_out, self.se / 2 if half else self.se, self.t_inter))
            if half:
                hops.append((order[1], net_out, self.se / 2, self.t_inter))
            for a, b in zip(order, order[1:]):
                hops.append((a, b, self.si, self.t_intra))
        return hops

    def _hop_count(self, hops: list) -> int:
        return sum(self.ref.ps.get(a, b).hops for a, b, _, _ in hops)

    def _fixed(self, order: list, net_in: Optional[str]):
        """A whole channel in a fixed GPU order (PCI order first, then replay of the last channel)."""
        if not self._tick():
            return
        outs = [None] if net_in is None else \
            self._return_nets(net_in, order[-1] if self.pattern == "ring" else order[0])
        for net_out in outs:
            hops = self._hops_of(order, net_in, net_out)
            taken = []
            for src, dst, sp, lim in hops:
                if not self._hop(src, dst, sp, lim):
                    break
                taken.append((src, dst, sp))
            try:
                if len(taken) == len(hops):
                    yield (tuple(order), (net_in, net_out), self._hop_count(hops))
            finally:
                for src, dst, sp in reversed(taken):
                    self.cap.give(src, dst, sp)

    def _return_nets(self, net_in: str, gpu: str) -> list:
        """NETs the channel may leave through (ncclTopoSearchRecGpu backToNet)."""
        ref = self.ref
        out = []
        for m in ref.select_nets(self.t_inter, gpu):
            if self.pattern == "tree" and m != net_in:
                continue
            if self.cross_nic != 1 and ref.port_key(m) != ref.port_key(net_in):
                continue
            out.append(m)
        return out

    def _closers(self, first: str) -> set:
        """GPUs that may end a ring channel: they reach the first GPU (1 node) within typeIntra.
        Used to prune the DFS once none is left (NCCL would exhaust its step budget instead)."""
        key = ("close", first, self.t_intra)
        c = self.ref.memo.get(key)
        if c is None:
            c = {g for g in self.ref.gpus if g != first and self._type_ok(g, first, self.t_intra)}
            self.ref.memo[key] = c
        return c

    def _exits(self, net_in: str) -> set:
        """GPUs that may end an inter-node ring channel: an allowed return NET is within typeInter."""
        key = ("exit", net_in, self.t_inter, self.cross_nic, self.pattern)
        c = self.ref.memo.get(key)
        if c is None:
            c = {g for g in self.ref.gpus
                 if any(self._type_ok(g, m, self.t_inter) for m in self._return_nets(net_in, g))}
            self.ref.memo[key] = c
        return c

    def _next_gpus(self, order: list, sort_net: int, net_in: Optional[str] = None) -> list:
        """ncclTopoSearchNextGpuSort: on NVSwitch systems only the index neighbours (next, then
        previous); otherwise by NET bw/PCI bw/hops when the next hop returns to the NIC, then intra
        bw, intra hops and distance in index order (reversed when all intra scores tie and the
        channel still has to come back to a NIC)."""
        ref = self.ref
        cur = order[-1]
        used = set(order)
        n = len(ref.gpus)
        pos = ref.pos[cur]
        if ref.has_nvs:
            out = []
            for c in (ref.gpus[(pos + 1) % n], ref.gpus[(pos - 1) % n]):
                if c not in used and c not in out:
                    out.append(c)
            return out
        scores = []
        for i in range(1, n):
            g = ref.gpus[(pos + i) % n]
            if g in used:
                continue
            p = ref.ps.get(cur, g)
            if p is None:
                continue
            inter = (0.0, 0.0, 0)
            if sort_net == 1 and net_in is not None:
                q = ref.ps.get(g, net_in)
                inter = (q.bw if q else 0.0, ref.pci_bw.get(g, 0.0), q.hops if q else 99)
            scores.append((-inter[0], -inter[1], inter[2], -p.bw, p.hops, i, g))
        scores.sort()
        out = [sc[-1] for sc in scores]
        if sort_net == -1 and scores and len({(sc[3], sc[4]) for sc in scores}) == 1:
            out.reverse()
        return out

    def _dfs_intra(self, order: list):
        ref = self.ref
        n = len(ref.gpus)
        if not self._tick():
            return
        if len(order) == n:
            if self.pattern == "ring" and n > 1:
                if not self._hop(order[-1], order[0], self.si, self.t_intra):
                    return
                try:
                    yield (tuple(order), (None, None), self._hop_count(self._hops_of(order, None, None)))
                finally:
                    self.cap.give(order[-1], order[0], self.si)
            else:
                yield (tuple(order), (None, None), self._hop_count(self._hops_of(order, None, None)))
            return
        if self.pattern == "ring" and len(order) > 1 and not (self._closers(order[0]) - set(order)):
            return
        for g in self._next_gpus(order, 0):
            if self._hop(order[-1], g, self.si, self.t_intra):
                try:
                    yield from self._dfs_intra(order + [g])
                finally:
                    self.cap.give(order[-1], g, self.si)
            if self.stop or self.steps > self.budget:
                return

    def _dfs_inter(self, net_in: str, first: str):
        """NET n -> first GPU -> ... (-> NET)."""
        if not self._hop(net_in, first, self.se, self.t_inter):
            return
        try:
            yield from self._dfs_gpus(net_in, [first], None)
        finally:
            self.cap.give(net_in, first, self.se)

    def _tree_return(self, net_in: str, order: list):
        """Trees go back to the NIC from the first (TREE) or the first two (BALANCED_TREE, half the
        bandwidth each) GPUs, through the NET they came from (TREE) or a same-rail one."""
        half = self.pattern == "balanced_tree" and len(self.ref.gpus) > 1
        sp = self.se / 2 if half else self.se
        pts = order[:2] if half else order[:1]
        for m in self._return_nets(net_in, order[0]):
            taken = []
            for g in pts:
                if not self._hop(g, m, sp, self.t_inter):
                    break
                taken.append((g, m, sp))
            try:
                if len(taken) == len(pts):
                    yield from self._dfs_gpus(net_in, order, m)
            finally:
                for g, mm, s2 in reversed(taken):
                    self.cap.give(g, mm, s2)
            if self.stop or self.steps > self.budget:
                return

    def _dfs_gpus(self, net_in: str, order: list, net_out: Optional[str]):
        ref = self.ref
        n = len(ref.gpus)
        if not self._tick():
            return
        if self.pattern != "ring" and net_out is None:
            back = 0 if (self.pattern == "tree" or n == 1) else 1
            if len(order) == back + 1:
                yield from self._tree_return(net_in, order)
                return
        if len(order) == n:
            if self.pattern == "ring":
                for m in self._return_nets(net_in, order[-1]):
                    if self._hop(order[-1], m, self.se, self.t_inter):
                        try:
                            yield (tuple(order), (net_in, m), self._hop_count(self._hops_of(order, net_in, m)))
                        finally:
                            self.cap.give(order[-1], m, self.se)
                    if self.stop or self.steps > self.budget:
                        return
                return
            yield (tuple(order), (net_in, net_out), self._hop_count(self._hops_of(order, net_in, net_out)))
            return
        if self.pattern == "ring" and n > 1 and not (self._exits(net_in) - set(order)):
            return
        sort_net = (1 if len(order) == n - 1 else -1) if self.pattern == "ring" else 0
        for g in self._next_gpus(order, sort_net, net_in):
            if self._hop(order[-1], g, self.si, self.t_intra):
                try:
                    yield from self._dfs_gpus(net_in, order + [g], net_out)
                finally:
                    self.cap.give(order[-1], g, self.si)
            if self.stop or self.steps > self.budget:
                return


class _Reference:
    """Everything a search needs that does not change between searches."""

    def __init__(self, G, ps: PathSet, gpus: list, inter: bool):
        self.G, self.ps = G, ps
        self.gpus = gpus
        self.pos = {g: i for i, g in enumerate(gpus)}
        self.nets = net_nodes(G) if inter else []
        self.has_nvs = any(a.get("type") == "NVS" for _, a in G.nodes(data=True))
        sms = [G.nodes[g].get("sm") for g in gpus if G.nodes[g].get("sm")]
        self.cc_min = min(sms) if sms else None
        self.pci_bw = {}
        for g in gpus:
            for _, v, a in G.out_edges(g, data=True):
                if a["type"] == "PCI":
                    self.pci_bw[g] = min(a["bw"], G.edges[v, g]["bw"])
        self._select: dict = {}
        self.memo: dict = {}
        self.results: dict = {}
        self.steps_total = 0

    def port_key(self, n: str) -> tuple:
        a = self.G.nodes[n]
        return (str(a.get("asic")), str(a.get("port")))

    def select_nets(self, type_limit: int, gpu: Optional[str] = None) -> list:
        """ncclTopoSelectNets: NETs by path type, each GPU's local NETs rotated by its index."""
        key = (type_limit, gpu)
        if key in self._select:
            return self._select[key]
        out: list = []
        for t in range(type_limit + 1):
            for g in self.gpus:
                if gpu is not None and g != gpu:
                    continue
                local = [n for n in self.nets if self.ps.get(g, n) is not None and RANK[self.ps.get(g, n).type] == t]
                if not local:
                    continue
                r = self.G.nodes[g]["index"] % len(local)
                local = local[r:] + local[:r]
                for n in local:
                    if n not in out:
                        out.append(n)
        self._select[key] = out
        return out

    def local_gpus(self, net: str) -> list:
        """GPUs with the widest, then shortest NET->GPU path (the search's first GPU candidates)."""
        best = None
        out = []
        for g in self.gpus:
            p = self.ps.get(net, g)
            if p is None:
                continue
            key = (-p.bw, p.hops)
            if best is None or key < best:
                best, out = key, [g]
            elif key == best:
                out.append(g)
        # tryGpuBidir: GPUs with a PCI link first
        return sorted(out, key=lambda g: (0 if g in self.pci_bw else 1, self.pos[g]))


def _total_bw(G, gpus: list) -> float:
    tot = 0.0
    for g in gpus:
        nvl = sum(a["bw"] for _, _, a in G.out_edges(g, data=True) if a["type"] == "NVL")
        pci = max([a["bw"] for _, _, a in G.out_edges(g, data=True) if a["type"] == "PCI"] or [0.0])
        tot = max(tot, nvl, pci)
    return tot


def _compute(ref: _Reference, pattern: str, min_channels: int, max_channels: int, cross_nic_param: int = 2) -> Graph:
    """ncclTopoCompute for one pattern ("ring", "balanced_tree", "tree", "chain")."""
    G, ps, gpus = ref.G, ref.ps, ref.gpus
    inter = bool(ref.nets)
    ngpus = len(gpus)
    if ngpus == 1 and pattern != "ring":
        pattern = "tree" if inter else "chain"
    ladder = speed_ladder(ref.cc_min, inter)
    if ngpus == 1 and not inter:
        max_bw = total_bw = LOC_BW
    else:
        max_bw = 0.0
        for g in gpus:
            targets = ref.nets if inter else [h for h in gpus if h != g]
            for t in targets:
                p = ps.get(g, t)
                if p is not None:
                    max_bw = max(max_bw, p.bw)
        total_bw = _total_bw(G, gpus)
    tb = total_bw * (ngpus / (ngpus - 1) if (pattern != "ring" and ngpus > 1) else 1.0)
    start = 0
    while start < len(ladder) - 1 and (ladder[start] > max_bw + EPS or ladder[start] * min_channels > tb + EPS):
        start += 1
    gg = [(a, b) for a in gpus for b in gpus if a != b and ps.get(a, b) is not None]
    t_intra_min = min((RANK[ps.get(a, b).type] for a, b in gg), default=RANK["LOC"])
    t_intra_max = max((RANK[ps.get(a, b).type] for a, b in gg), default=RANK["LOC"])
    if ngpus == 1:
        t_intra_min = t_intra_max = RANK["LOC"]
    if inter:
        gn = [ps.get(g, n) for g in gpus for n in ref.nets if ps.get(g, n) is not None]
        if not gn:
            raise TopologyError("no path from any GPU to a NIC")
        t_inter_min = max(RANK["PIX"], min(RANK[p.type] for p in gn))
        t_inter_max = max(RANK[p.type] for p in gn)
        if (ref.cc_min or 0) < 90:
            t_inter_max = RANK["SYS"]
        t_inter_max = max(t_inter_max, t_inter_min)
        # 2.30: with NETs, maxTypeIntra = maxTypeInter (2.18 capped typeIntra at the current
        # typeInter instead, which is why older logs print e.g. SYS/SYS where this prints SYS/PHB).
        t_intra_max = max(t_intra_max, t_inter_max)
    else:
        t_inter_min = t_inter_max = RANK["PIX"]
    # Only path types that occur change what a search may use: thresholds in between give the same
    # result, so they are skipped (the loop conditions below still test "te - 1" as NCCL does).
    intra_types = sorted({RANK[ps.get(a, b).type] for a, b in gg} | {t_intra_min})
    intra_types = [t for t in intra_types if t_intra_min <= t <= t_intra_max] or [t_intra_min]
    if inter:
        seen = {RANK[p.type] for p in gn} | {RANK[ps.get(n, g).type] for g in gpus for n in ref.nets
                                            if ps.get(n, g) is not None}
        inter_types = [t for t in sorted(seen | {t_inter_min}) if t_inter_min <= t <= t_inter_max] or [t_inter_min]
    else:
        inter_types = [t_inter_min]
    cross_opts = [0] + ([1] if (inter and len(ref.nets) > 1 and cross_nic_param in (1, 2)) else [])
    if cross_nic_param == 1:
        cross_opts = [1]

    best: Optional[Graph] = None

    def optimal(gr: Optional[Graph]) -> bool:
        return gr is not None and (gr.n_channels >= max_channels or gr.n_channels * gr.bw_inter >= total_bw - EPS)

    def search(si, se, ti, te, cn, maxc=max_channels, pat=pattern):
        key = (pat, si, se, ti, te, cn, maxc, total_bw)
        if key not in ref.results:
            ref.results[key] = _Search(ref, pat, si, se, ti, te, cn, maxc, total_bw).run(min_channels)
        gr = ref.results[key]
        return replace(gr, intra=list(gr.intra), inter=list(gr.inter))

    idx = start
    done = False
    ref.steps_total = 0
    while idx < len(ladder) and not done:
        speed = ladder[idx]
        if best is not None and speed / best.bw_inter <= 0.49:
            break
        if best is not None and ref.steps_total > GLOBAL_BUDGET:
            break   # NCCL: "globalTimeout < 0" ends the relaxation once a solution exists
        for cn in cross_opts:
            if cn == 1 and best is not None:
                break
            for te in inter_types:
                # typeInter/typeIntra are raised only while no solution exists or they are still below
                # the solution's (typeInter also while below PXN): "te - 1" is the value being raised.
                if te > t_inter_min and best is not None and \
                        not (te - 1 < RANK[best.type_inter or "PIX"] or te - 1 < RANK["PXN"]):
                    break
                for ti in intra_types:
                    if ti > t_intra_min and best is not None and not ti - 1 < RANK[best.type_intra]:
                        break
                    gr = search(speed, speed, ti, te, cn)
                    if gr.better_than(best, min_channels):
                        best = gr
                    elif pattern == "balanced_tree" and (ref.cc_min or 0) >= 90:
                        # sm90+: a BALANCED_TREE that does not fit is retried as a plain TREE
                        gr = search(speed, speed, ti, te, cn, pat="tree")
                        if gr.better_than(best, min_channels):
                            best = gr
                    if optimal(best):
                        done = True
                        break
                if done or not inter:
                    break
            if done:
                break
        idx += 1
    if best is None:
        fb = Graph(pattern=pattern, n_channels=1, bw_intra=0.1, bw_inter=0.1, type_intra="SYS",
                   type_inter="SYS" if inter else None, intra=[list(gpus)],
                   inter=[(ref.nets[0], ref.nets[0])] if inter else [])
        fb.fallback = True  # type: ignore[attr-defined]
        return fb
    # Pass 2: ncclTopoDupChannels, then try higher speeds.
    cc = ref.cc_min or 0
    if best.bw_intra >= 25.0 and not (cc > 80 and best.bw_intra < 50.0 and best.n_channels > 4):
        dup = min(best.n_channels * 2, max_channels)
        div = -(-dup // best.n_channels)
        best.intra = (best.intra * 2)[:dup]
        best.inter = (best.inter * 2)[:dup]
        best.bw_intra /= div
        best.bw_inter /= div
        best.n_channels = dup
    idx = 0
    while idx < len(ladder) - 1 and ladder[idx] > best.bw_inter + EPS:
        idx += 1
    if pattern == "ring":
        while idx > 0:
            idx -= 1
            sp = ladder[idx]
            gr = search(sp, sp, RANK[best.type_intra], RANK[best.type_inter or "PIX"], best.cross_nic)
            if gr.better_than(best, best.n_channels):
                best = gr
    elif inter:
        # trees: raise bwIntra (channels fixed) while bwIntra < 2 * bwInter
        j = 0
        while j < len(ladder) - 1 and ladder[j] > best.bw_intra + EPS:
            j += 1
        while j > 0 and best.bw_intra < 2 * best.bw_inter - EPS:
            j -= 1
            gr = search(ladder[j], best.bw_inter, RANK[best.type_intra], RANK[best.type_inter or "PIX"],
                        best.cross_nic, maxc=best.n_channels)
            if gr.n_channels >= best.n_channels and ladder[j] > best.bw_intra:
                best = gr
            else:
                break
    return best


def _graph_dict(G, gr: Graph) -> dict:
    lab = lambda n: G.nodes[n].get("label", n) if n is not None else None  # noqa: E731
    return {"pattern": gr.pattern, "search_channels": gr.n_channels, "bw_intra": round(gr.bw_intra, 4),
            "bw_inter": round(gr.bw_inter, 4), "type_intra": gr.type_intra, "type_inter": gr.type_inter,
            "cross_nic": gr.cross_nic, "fallback": bool(getattr(gr, "fallback", False)),
            "channels": [{"gpus": [lab(g) for g in order], "nets": [lab(n) for n in nets] if nets and nets[0] else []}
                         for order, nets in zip(gr.intra, gr.inter or [(None, None)] * len(gr.intra))]}


def restrict_gpus(G, gpus: Optional[Iterable[int]]):
    """Sub-graph with only the chosen GPU indices (NCCL trims GPUs outside the communicator).
    Raises InputError naming a missing GPU."""
    from gpucomm.probes.errors import InputError

    all_g = gpu_nodes(G)
    if gpus is None:
        return G, all_g
    want = list(gpus)
    by_idx = {G.nodes[g]["index"]: g for g in all_g}
    if len(set(want)) != len(want):
        dup = sorted({x for x in want if want.count(x) > 1})
        raise InputError(f"GPU {dup[0]} listed twice", expected="distinct GPU indices")
    for x in want:
        if x not in by_idx:
            from gpucomm.planners.nccl.paths import _index_list

            raise InputError(f"no GPU {x} in topology (has {_index_list(G)})")
    keep = [by_idx[x] for x in want]
    drop = [g for g in all_g if g not in keep]
    if drop:
        H = G.copy()
        H.remove_nodes_from(drop)
        H.graph = dict(G.graph)
        return H, sorted(keep, key=lambda g: H.nodes[g]["index"])
    return G, sorted(keep, key=lambda g: G.nodes[g]["index"])


def nccl_reference(doc: Any, nodes: int = 1, gpus: Optional[Iterable[int]] = None, *, cross_nic: int = 2,
                   tree: bool = True) -> dict:
    """What NCCL's search would choose on this topology (stable interface, used by the cost model).

    ``doc``: topology document (or a graph from :func:`gpucomm.planners.nccl.graph.build_graph`); ``nodes``: number
    of identical nodes (> 1 searches NIC-to-NIC rings); ``gpus``: GPU indices of the communicator on
    each node (default all).  Returns::

        {"channels": final nChannels (2 x min(ring, tree), sm90 multi-node x2, <= 64),
         "search_channels": ring graph channels (after duplication), "bw_intra", "bw_inter": GB/s per
         search channel, "type_intra", "type_inter": path type names, "pattern": "ring",
         "total_bw": search_channels x (bw_intra if nodes <= 2 else bw_inter)  -- NCCL's ring busBw,
         "max_bw", "sys_total_bw": ncclTopoSearchInit values, "cc_min", "nodes", "gpus": [labels],
         "rings": [{"gpus": [...], "nets": [in, out]}], "tree": {same keys for the tree graph} | None,
         "fallback": bool}
    Raises TopologyError (no NICs for nodes > 1), InputError (unknown GPU), PlanInfeasible."""
    if not isinstance(nodes, int) or nodes < 1:
        raise PlanInfeasible(f"--nodes must be >= 1 (got {nodes})")
    G0 = as_graph(doc)
    G, sel = restrict_gpus(G0, gpus)
    if not sel:
        from gpucomm.probes.errors import NothingToDo

        raise NothingToDo("topology has no GPUs")
    inter = nodes > 1
    if inter and not net_nodes(G):
        raise TopologyError(f"topology has no NICs: --nodes {nodes} needs a network between nodes")
    if not inter:
        # ncclTopoTrimSystem: a single-node communicator drops its NETs.
        H = G.copy()
        H.remove_nodes_from([n for n in net_nodes(G)] + [n for n, a in G.nodes(data=True) if a.get("type") == "NIC"])
        H.graph = dict(G.graph)
        G = H
    ps = compute_path_set(G)
    ref = _Reference(G, ps, sel, inter)
    ring = _compute(ref, "ring", 1, RING_MAX_CHANNELS, cross_nic)
    tr = None
    if tree:
        pat = "balanced_tree" if inter else "chain"
        tr = _compute(ref, pat, ring.n_channels, ring.n_channels, cross_nic)
    n_ch = ring.n_channels if tr is None else min(ring.n_channels, max(tr.n_channels, 1))
    n_ch = min(MAXCHANNELS, n_ch * 2)
    if (ref.cc_min or 0) >= 90 and nodes > 1 and ring.bw_intra > 45.0 and n_ch < 16:
        n_ch = min(MAXCHANNELS, n_ch * 2)
    bw = ring.bw_intra if nodes <= 2 else ring.bw_inter
    max_bw = 0.0
    for g in sel:
        for t in (ref.nets if inter else [h for h in sel if h != g]):
            p = ps.get(g, t)
            if p is not None:
                max_bw = max(max_bw, p.bw)
    rd = _graph_dict(G, ring)
    return {
        "pattern": "ring",
        "channels": n_ch,
        "search_channels": ring.n_channels,
        "bw_intra": rd["bw_intra"],
        "bw_inter": rd["bw_inter"],
        "type_intra": ring.type_intra,
        "type_inter": ring.type_inter,
        "total_bw": round(ring.n_channels * bw, 4),
        "max_bw": round(max_bw if len(sel) > 1 or inter else LOC_BW, 4),
        "sys_total_bw": round(_total_bw(G, sel), 4),
        "cc_min": ref.cc_min,
        "nodes": nodes,
        "gpus": [G.nodes[g]["label"] for g in sel],
        "rings": rd["channels"],
        "fallback": rd["fallback"],
        "tree": None if tr is None else {k: v for k, v in _graph_dict(G, tr).items()},
    }


# --------------------------------------------------------------------------------------------
def nvswitch_document(ngpus: int = 8, sm: int = 90, nvlinks: int = 18, name: Optional[str] = None, nics: int = 0,
                      nic_gbps: float = 400.0, pcie_gen: Optional[int] = None, cpu_vendor: str = "GenuineIntel",
                      cpu_model: str = "Intel(R) Xeon(R) Platinum 8480+", numa_nodes: int = 2) -> dict:
    """A topology document for an NVSwitch machine -- the channel counts of connect.cc ncclTopoPostset (HGX A100
    ``sm=80, nvlinks=12``, HGX H100 ``sm=90, nvlinks=18``, DGX B200 ``sm=100, nvlinks=18``, NVL72 domain
    ``ngpus=72, sm=100``): ``ngpus`` GPUs each under its own PCIe switch (with ``nics`` NICs spread
    over the switches, one per switch first), half of the switches on each NUMA node, every GPU with
    ``nvlinks`` links to one NVSwitch.  Built with gpucomm.probes.model builders, so it is a real document."""
    from gpucomm.probes.facts import default_pcie_gen, nvlink_bw_per_link, pcie_bw_GBps
    from gpucomm.probes.model import finalize, gpu_record, link_record, new_document, nic_record, switch_record

    gen = pcie_gen or default_pcie_gen(sm)
    doc = new_document("json")
    doc["host"]["cpu_vendor"] = cpu_vendor
    doc["host"]["cpu_model"] = cpu_model
    doc["host"]["cpu_arch"] = "x86_64"
    gname = name or {80: "NVIDIA A100-SXM4-80GB", 90: "NVIDIA H100 80GB HBM3", 100: "NVIDIA B200"}.get(sm, "GPU")
    nps = max(1, numa_nodes)
    per_numa = -(-ngpus // nps)
    doc["numa_nodes"] = [{"id": i, "cpus": None, "memory_bytes": None, "distances": None} for i in range(nps)]
    doc["switches"].append(switch_record("NVS", kind="nvswitch"))
    pbw = pcie_bw_GBps(gen, 16)
    for i in range(ngpus):
        numa = min(i // per_numa, nps - 1)
        bus = 0x18 + i * 0x10 if ngpus <= 14 else 0x10 + i
        sw = f"0000:{bus - 2:02x}:00.0" if ngpus <= 14 else f"{0x1000 + i:04x}:00:00.0"
        gid = f"0000:{bus:02x}:00.0" if ngpus <= 14 else f"{0x2000 + i:04x}:01:00.0"
        doc["switches"].append(switch_record(sw, kind="pcie", pci_bus_id=sw, parent=f"CPU{numa}", numa_node=numa))
        doc["links"].append(link_record(sw, f"CPU{numa}", "pcie", pbw, gen=gen, width=16))
        doc["gpus"].append(gpu_record(i, name=gname, pci_bus_id=gid, compute_capability=f"{sm // 10}.{sm % 10}",
                                      numa_node=numa, parent=sw,
                                      pcie={"gen": gen, "width": 16, "max_gen": gen, "max_width": 16}))
        doc["links"].append(link_record(gid, sw, "pcie", pbw, gen=gen, width=16))
        doc["links"].append(link_record(gid, "NVS", "nvlink", nvlinks * nvlink_bw_per_link(sm), count=nvlinks))
    for k in range(nics):
        i = k % ngpus
        sw = doc["gpus"][i]["parent"]
        numa = doc["gpus"][i]["numa_node"]
        bus = f"{0x3000 + k:04x}:00:00.0"
        doc["nics"].append(nic_record(f"mlx5_{k}", pci_bus_id=bus, numa_node=numa, parent=sw, link_layer="InfiniBand",
                                      ports=[{"port": 1, "state": "ACTIVE", "rate_gbps": nic_gbps}],
                                      guid=f"0x{k + 1:016x}"))
        doc["links"].append(link_record(bus, sw, "pcie", pbw, gen=gen, width=16))
    # no smp links: the graph takes NCCL's inter-socket bandwidth for the host's CPU (facts.inter_cpu_bw)
    return finalize(doc)


__all__ = ["nccl_reference", "speed_ladder", "channel_cap", "Capacity", "nvswitch_document", "restrict_gpus",
           "PathType"]
