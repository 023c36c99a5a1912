"""NCCL's channel search, reproduced exactly (src/graph/search.cc of NCCL 2.30.7:
``ncclTopoSearchInit``, ``ncclTopoCompute`` and the recursive ``ncclTopoSearchRec*``), run on the
system of :mod:`gpucomm.planners.nccl.system`; :func:`gpucomm.planners.nccl.comm.nccl_reference` is the
stable entry point (the whole communicator, :mod:`gpucomm.planners.nccl.comm`).

Everything is NCCL's: the speed ladders per architecture, the start speed (``maxBw``/``totalBw``),
the order GPUs and NICs are tried in (PCI order first, replay of the previous channel, GPU scores,
NVSwitch neighbours, ``ncclTopoSelectNets``), bandwidth taken on every link of every path with
C ``float`` rounding (``SUB_ROUND``), the Intel P2P overhead and pre-Ampere reverse reservation,
NET bandwidth shared per ASIC and port (with NCCL's ``int`` truncation of ``bwInter``), the step
budgets (16384 per search, 256 when replaying channels, 1024 for the PCI-order seed, 2^19 overall:
results that timed out are NCCL's timed-out results), the relaxation order (same channels, simpler
tree on sm90, typeIntra, typeInter, cross-NIC, lower speeds while ``> 0.49`` of the solution),
``ncclTopoDupChannels``, pass 2 (higher speeds; trees raise bwIntra up to 2x bwInter; NVLS raises
bwInter) and the fallback (1 channel at 0.1 GB/s).  NCCL_CROSS_NIC and NCCL_GRAPH_FILE are read as
NCCL does (through the settings object).

The speed ladders (:func:`speed_ladder`, :func:`channel_cap`) and what ``followPath`` takes on each
link of a path (:func:`follow_amounts`) are also read by our own ring search
(:mod:`gpucomm.planners.collectives.ringsearch`).
"""
from __future__ import annotations

import math
import random
import sys as _pysys
from typing import Callable, Iterable, Optional

from gpucomm.planners.nccl.names import BALANCED_TREE, COLLNET_DIRECT, MAXCHANNELS, NVLS, RING, SPLIT_TREE, TREE
from gpucomm.planners.nccl.ncclxml import NcclFailure
from gpucomm.planners.nccl.system import (CPU, DEV, GPU, LINK_LOC, LINK_NVL, LINK_PCI, NET, NVS, PATH_DIS, PATH_PIX,
                                          PATH_PXN, PATH_SYS, ARCH_POWER, ARCH_X86, VENDOR_AMD, VENDOR_INTEL, Topo,
                                          f32, get_local)

RING_MAX_CHANNELS = MAXCHANNELS // 2
NCCL_MAX_NVLS_ARITY = 32
NCCL_MAX_DIRECT_ARITY = 7
EPS = 1e-6


SEARCH_GLOBAL_TIMEOUT = 1 << 19
SEARCH_TIMEOUT = 1 << 14
SEARCH_TIMEOUT_TREE = 1 << 14
SEARCH_TIMEOUT_SAMECHANNELS = 1 << 8
FORCED_ORDER_PCI, FORCED_ORDER_REPLAY = 1, 2

# search.cc ncclTopoCompute speed ladders (speedArrayIntra/Inter), GB/s, as C floats.
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


def _roundf(x: float) -> float:
    return math.copysign(math.floor(abs(x) + 0.5), x)


def _sub_round(a: float, b: float) -> float:
    """``SUB_ROUND``: roundf((a - b) * 1000) / 1000 in C floats."""
    return f32(_roundf(f32(f32(a - b) * 1000.0)) / 1000.0)


# --------------------------------------------------------------------------------------------
class TGraph:
    """``struct ncclTopoGraph``."""

    __slots__ = ("id", "pattern", "cross_nic", "coll_net", "min_channels", "max_channels", "n_channels", "bw_intra",
                 "bw_inter", "latency_inter", "type_intra", "type_inter", "same_channels", "n_hops", "intra", "inter")

    def __init__(self, id_: int = 0, pattern: int = RING, min_channels: int = 1, max_channels: int = MAXCHANNELS):
        self.id = id_
        self.pattern = pattern
        self.cross_nic = 0
        self.coll_net = 0
        self.min_channels = min_channels
        self.max_channels = max_channels
        self.n_channels = 0
        self.bw_intra = 0.0
        self.bw_inter = 0.0
        self.latency_inter = 0.0
        self.type_intra = 0
        self.type_inter = 0
        self.same_channels = 0
        self.n_hops = 0
        self.intra: list = []
        self.inter: list = [0] * (MAXCHANNELS * 2)

    def copy(self) -> "TGraph":
        g = TGraph.__new__(TGraph)
        for k in TGraph.__slots__:
            setattr(g, k, getattr(self, k))
        g.intra = list(self.intra)
        g.inter = list(self.inter)
        return g

    def assign(self, other: "TGraph") -> None:
        for k in TGraph.__slots__:
            setattr(self, k, getattr(other, k))
        self.intra = list(other.intra)
        self.inter = list(other.inter)


class _Ctx:
    """One ncclTopoCompute: the topology, the NET/GPU preference lists (fixed during a search)."""

    def __init__(self, topo: Topo):
        self.topo = topo
        self.sys = topo.sys
        self.s = topo.s
        self.ngpus = len(self.sys.nodes[GPU])
        self._nets: dict = {}
        self._pref: dict = {}
        self.net_index = {n.id: i for i, n in enumerate(self.sys.nodes[NET])}
        self.net_ids = [n.id for n in self.sys.nodes[NET]]
        self._back: dict = {}
        self.gpu_index = {g.rank: i for i, g in enumerate(self.sys.nodes[GPU])}
        self._order: dict = {}
        self.pci_links = [_pci_links(g) for g in self.sys.nodes[GPU]]
        nets = self.sys.nodes[NET]
        # the NETs of each NET's port (a NIC's bandwidth is taken from all of them), and the GPUs
        # ncclTopoGetLocal finds from each NET (path widths and types do not change during a search)
        self.port_mates = [[o for o in nets if o.asic == n.asic and o.port == n.port] for n in nets]
        self.net_local_gpus = [get_local(self.sys, NET, i, GPU) for i in range(len(nets))]

    def back_nets(self, graph: TGraph, start: int, gpu: int) -> list:
        """``ncclTopoSelectNets(typeInter, gpu)`` less the NETs ncclTopoSearchCheckNet refuses whatever
        the search has done: another plane, another NET than the one in (TREE), another rail (crossNic 0)."""
        key = (graph.type_inter, gpu, start, graph.pattern, graph.cross_nic)
        got = self._back.get(key)
        if got is None:
            nets = self.sys.nodes[NET]
            s = nets[start]
            got = []
            for n in self.select_nets(graph.type_inter, gpu):
                net = nets[n]
                if net.plane != -1 and s.plane != -1 and net.plane != s.plane:
                    continue
                if graph.pattern == TREE and net.id != s.id:
                    continue
                if graph.cross_nic == 0:
                    if net.rail != -1 and s.rail != -1:
                        if net.rail != s.rail:
                            continue
                    elif self.s.mnnvl_rail_per_host and net.id >> 56 != s.id >> 56:
                        # NCCL_MNNVL_RAIL_PER_HOST: on another host of the clique, the rail is the PCI id
                        if net.pci_id != s.pci_id or net.port != s.port:
                            continue
                    elif net.asic != s.asic or net.port != s.port:
                        continue
                got.append(n)
            self._back[key] = got
        return got

    def select_nets(self, type_inter: int, gpu: int) -> list:
        """``ncclTopoSelectNets`` (channel-first preferred NICs, then all NICs up to typeInter)."""
        key = (type_inter, gpu)
        got = self._nets.get(key)
        if got is not None:
            return got
        sys = self.sys
        nets: list = []
        if sys.n_hosts > 1 and self.s.mnnvl_scatter_nets:
            # MNNVL (NCCL_MNNVL_SCATTER_NETS_ENABLE): ncclTopoPrefNetsGpuFirst -- channel by channel, each
            # GPU's NET for that channel, until each GPU's first NET comes round again
            gids = list(range(len(sys.nodes[GPU]))) if gpu == -1 else [gpu]
            prefs = [self._pref_nets(g) for g in gids]
            for c in range(MAXCHANNELS):
                if all(c >= len(p) for p in prefs):
                    break
                for p in prefs:
                    if c < len(p) and p[c] not in nets:
                        nets.append(p[c])
        else:
            for g in range(len(sys.nodes[GPU])):
                if gpu != -1 and gpu != g:
                    continue
                local = self._pref_nets(g)
                for n in local:
                    if n not in nets:
                        nets.append(n)
        policy, num = self.s.netdevs_policy
        max_dev = num * (len(sys.nodes[GPU]) if gpu == -1 else 1) if policy == "MAX" else 640
        if len(nets) < max_dev:
            done = False
            for t in range(type_inter + 1):
                for g in range(len(sys.nodes[GPU])):
                    if gpu != -1 and gpu != g:
                        continue
                    paths = sys.nodes[GPU][g].paths[NET]
                    for n in range(min(len(sys.nodes[NET]), MAXCHANNELS)):
                        if paths[n].type == t and n not in nets:
                            nets.append(n)
                            if len(nets) >= max_dev:
                                done = True
                                break
                    if done:
                        break
                if done:
                    break
        self._nets[key] = nets
        return nets

    def _pref_nets(self, g: int) -> list:
        got = self._pref.get(g)
        if got is None:
            sys = self.sys
            rank = sys.nodes[GPU][g].rank
            got = []
            for c in range(MAXCHANNELS):
                n = sys.id_to_index(NET, self.topo.local_net(rank, c))
                if got and n == got[0]:
                    break
                got.append(n)
            self._pref[g] = got
        return got


_SR: dict = {}      # memo of SUB_ROUND(a, b): the few distinct bandwidths make it hit almost always
_I65: dict = {}     # memo of INTEL_P2P_OVERHEAD(bw)


def _steps(path, start) -> tuple:
    """Per path, once: whether the Intel P2P overhead applies, the links, which are PCI, and per
    link the reverse link and kind (1 = pre-Ampere bw/8 reservation, 2 = POWER NVLink, 3 = both)
    -- ``simple`` when no link needs a reverse reservation."""
    intel = False
    if path.type == 8 and start.type == GPU:   # PATH_PHB
        for l in path.list:
            node = l.rem
            if node.type == CPU and node.arch == ARCH_X86 and node.vendor == VENDOR_INTEL:
                intel = True
    out = []
    node = start
    simple = True
    for link in path.list:
        rem = link.rem
        rev, kind = None, 0
        if rem.type == DEV and rem.cc < 80 and start.type != GPU:
            rev, kind = _rev_link(node, rem, link.type), 1
        if rem.type == CPU and rem.arch == ARCH_POWER and link.type == LINK_NVL:
            rev, kind = rev or _rev_link(node, rem, link.type), kind | 2
        if kind:
            simple = False
        out.append((link, link.type == LINK_PCI, rev, kind))
        node = rem
    links = [t[0] for t in out]
    pcis = [t[1] for t in out]
    path.fast = (intel and any(pcis), simple, links, pcis, out)
    return path.fast


_RA: dict = {}      # memo of _rev_amount


def _sr(a: float, b: float) -> float:
    """SUB_ROUND(a, b) through the memo."""
    d = _SR.get(b) or _memo(b)
    v = d.get(a)
    if v is None:
        v = d[a] = _sub_round(a, b)
    return v


def _memo(fw: float) -> dict:
    d = _SR.get(fw)
    if d is None:
        if len(_SR) > 4096:
            _SR.clear()
        d = _SR[fw] = {}
    return d


def _rev_amount(fw: float, kind: int) -> float:
    """What followPath also takes on the reverse link: bw/8 before Ampere (kind 1), bw to a POWER CPU
    over NVLink (kind 2), both summed in C floats."""
    rb = 0.0
    if kind & 1:
        rb = f32(rb + f32(fw / 8.0))
    if kind & 2:
        rb = f32(rb + fw)
    return rb


def follow_amounts(path, start) -> list:
    """What ``followPath`` takes on each link of ``path`` (a ``PathL`` from node ``start``) per GB/s of a
    channel, as ``[(link, amount)]`` in path order (a link may come twice): 6/5 on the PCI links of a
    PHB path from a GPU through an Intel x86 CPU (``INTEL_P2P_OVERHEAD``), and on the reverse link
    1/8 of that when a non-GPU sends into a GPU before Ampere, the whole amount on an NVLink into a
    POWER CPU.  Real numbers (no float rounding): the book-keeping of our own ring search."""
    overhead, _simple, _links, _pcis, steps = path.fast or _steps(path, start)
    pci = 6.0 / 5.0 if overhead else 1.0
    out = []
    for link, is_pci, rev, kind in steps:
        fw = pci if is_pci else 1.0
        out.append((link, fw))
        if kind & 1:
            out.append((rev, fw / 8.0))
        if kind & 2:
            out.append((rev, fw))
    return out


def _follow(path, start, max_steps: int, bw: float) -> int:
    """``followPath``: take ``bw`` on the first ``max_steps`` links; the step that lacked room."""
    overhead, _simple, _links, _pcis, steps = path.fast or _steps(path, start)
    if overhead:
        pci_bw = _I65.get(bw)
        if pci_bw is None:
            pci_bw = _I65[bw] = f32(f32(bw * 6.0) / 5.0)
    else:
        pci_bw = bw
    for i in range(max_steps):
        link, is_pci, rev, kind = steps[i]
        fw = pci_bw if is_pci else bw
        lb = link.bw
        if kind:
            rb = _RA.get((fw, kind))
            if rb is None:
                if len(_RA) > 4096:
                    _RA.clear()
                rb = _RA[fw, kind] = _rev_amount(fw, kind)
            if lb < fw or (rb and rev.bw < rb):
                return i
            link.bw = _sr(lb, fw)
            if rb:
                rev.bw = _sr(rev.bw, rb)
            continue
        if lb < fw:
            return i
        d = _SR.get(fw) or _memo(fw)
        v = d.get(lb)
        if v is None:
            v = d[lb] = _sub_round(lb, fw)
        link.bw = v
    return max_steps


def _rev_link(node1, node2, type_: int):
    for l in node2.links:
        if l.rem is node1 and l.type == type_:
            return l
    raise NcclFailure("Could not find rev link")


def follow_path(ctx: _Ctx, graph: TGraph, t1: int, i1: int, t2: int, i2: int, mult: float):
    """``ncclTopoFollowPath``: the destination node when ``graph``'s bandwidth fits on the path
    (``mult`` = -1 gives it back), else None."""
    nodes = ctx.sys.nodes
    node2 = nodes[t2][i2]
    if t1 == -1:
        return node2
    node1 = nodes[t1][i1]
    path = node1.paths[t2][i2]
    if (t1 == GPU or t1 == NVS) and (t2 == GPU or t2 == NVS):
        bw, typ = graph.bw_intra, graph.type_intra
    else:
        bw, typ = graph.bw_inter, graph.type_inter
    ptype = path.type
    if ptype >= PATH_DIS:
        return None
    if mult == 1:
        if ptype > typ:
            return None
        if graph.pattern <= TREE and node2.paths[t1][i1].type > typ:   # BALANCED_TREE, SPLIT_TREE, TREE
            return None
        # bw * 1 is bw
    elif mult == -1:
        bw = -bw
    else:
        bw = f32(bw * mult)
    if not _reserve(path, node1, bw):
        return None
    graph.n_hops = int(graph.n_hops + mult * path.count)
    return node2


def _reserve(path, node1, bw: float) -> bool:
    """followPath's reservation of ``bw`` (< 0 gives it back) on every link of ``path`` from ``node1``:
    False, with nothing taken, when a link lacks room."""
    count = path.count
    fast = path.fast or _steps(path, node1)
    links = fast[2]
    if fast[1] and not fast[0] and len(links) == count:
        # no reverse reservation, no overhead: the links are distinct, so checking them all before
        # taking any is followPath's take-then-give-back-on-failure
        if bw > 0:
            for link in links:
                if link.bw < bw:
                    return False
        d = _SR.get(bw) or _memo(bw)
        for link in links:
            lb = link.bw
            v = d.get(lb)
            if v is None:
                v = d[lb] = _sub_round(lb, bw)
            link.bw = v
        return True
    step = _follow(path, node1, count, bw)
    if step < count:
        _follow(path, node1, step, -bw)
        return False
    return True


def _pci_links(gpu) -> Optional[tuple]:
    """(DEV -> PCI parent link, its reverse): what ``gpuPciBw`` reads."""
    dev = gpu.parent
    for l in dev.links:
        if l.type != LINK_PCI:
            continue
        for l2 in l.rem.links:
            if l2.rem is dev:
                return l, l2
    return None


def _next_gpu_sort(ctx: _Ctx, graph: TGraph, gpu, sort_net: int) -> list:
    """``ncclTopoSearchNextGpuSort``."""
    sys = ctx.sys
    flag = 1 << graph.n_channels
    ngpus = ctx.ngpus
    gnodes = sys.nodes[GPU]
    paths = gpu.paths[GPU]
    if sys.nodes[NVS]:
        # NVSwitch: only the index neighbours are tried (the sort order of the others is discarded)
        idx = gpu.idx
        prev_g = (idx - 1 + ngpus) % ngpus
        next_g = (idx + 1) % ngpus
        first = [next_g, prev_g] if graph.pattern == RING else [prev_g, next_g] \
            if graph.pattern in (SPLIT_TREE, BALANCED_TREE) else [next_g]
        if next_g == prev_g:
            first = first[:1]
        out: list = []
        for f in first:
            if f != idx and paths[f].count != 0 and not gnodes[f].used & flag:
                out.insert(0, f)
        return out
    if not sort_net:
        key = gpu.idx
        order = ctx._order.get(key)
        if order is None:
            start = gpu.idx
            scores = []
            for i in range(1, ngpus):
                g = (start + i) % ngpus
                p = paths[g]
                if p.count == 0:
                    continue
                scores.append(((-int(p.bw), p.count, i), g))
            scores.sort()
            order = ctx._order[key] = [(g, k[0], k[1]) for k, g in scores]
    else:
        # the GPU's PCI bandwidth left (gpuPciBw) changes as channels take bandwidth: sorted live
        net_paths = sys.nodes[NET][ctx.net_index[graph.inter[graph.n_channels * 2]]].paths[GPU]
        start = gpu.idx
        scores = []
        for i in range(1, ngpus):
            g = (start + i) % ngpus
            p = paths[g]
            if p.count == 0 or gnodes[g].used & flag:
                continue
            q = net_paths[g]
            pl = ctx.pci_links[g]
            pci = -1 if pl is None else int(pl[0].bw if pl[0].bw < pl[1].bw else pl[1].bw)
            scores.append(((-int(q.bw), -pci, q.count, -int(p.bw), p.count, i), g))
        scores.sort()
        order = [(g, k[3], k[4]) for k, g in scores]
    cand = [t for t in order if not gnodes[t[0]].used & flag]
    if sort_net == -1 and cand and all(t[1] == cand[0][1] and t[2] == cand[0][2] for t in cand):
        nxt = [t[0] for t in reversed(cand)]
    else:
        nxt = [t[0] for t in cand]
    return nxt


class _Search:
    """The recursive search (``ncclTopoSearchRec`` and friends) for one ncclTopoCompute."""

    def __init__(self, ctx: _Ctx):
        self.ctx = ctx
        self.time = 0
        # Subtree memo (exact; see rec_gpu): ``h`` hashes the multiset of bandwidth reservations and
        # used-GPU marks in force, ``version`` counts changes of the best graph found (``save``).
        self.memo: Optional[dict] = None
        self.memo_ok = False
        self.read_intra = True
        self.read_prev_nets = True
        self.h = 0
        self.cur: list = []    # this channel's reservations (the others' are in ``h`` without their channel)
        self.version = 0
        self.zob: dict = {}
        self.tz: dict = {}     # (t1, i1, GPU g, bw) -> (what try_gpu adds to h, GPU g's used mark)
        self.rand = random.Random(0x6e63636c)
        # set by compute for a pass whose outcome is fixed once the best graph passes this test (the search
        # then stops; with CHECK_WIDENING it goes on, and done_at is the version at which it would have)
        self.done_when: Optional[Callable] = None
        self.done_at: Optional[int] = None
        self.stopped = False
        # one node's NVLS passes (see try_nvls): what each head GPU's reservations came to, per
        # (bwIntra, typeIntra), and whether this pass takes them from there instead of reserving
        self.nvls_line: Optional[list] = None
        self.nvls_replay = False

    def start_pass(self, graph: TGraph) -> None:
        """One ncclTopoSearchRec call from ncclTopoCompute: a fresh memo (the pass's parameters are fixed)."""
        self.h = 0
        self.cur = []
        self.memo = {} if self.memo_ok and graph.pattern not in (NVLS, COLLNET_DIRECT) else None
        # GPU orders are read back only to replay the previous channel: always within a node (rec),
        # across nodes only when the pass keeps channels the same (rec_net)
        self.read_intra = not self.ctx.sys.inter or graph.same_channels == 1
        self.read_prev_nets = graph.pattern == RING and graph.cross_nic == 2

    def _z(self, key) -> int:
        """A random 96-bit number per key (kept for this compute, so sums stay consistent)."""
        z = self.zob.get(key)
        if z is None:
            z = self.zob[key] = self.rand.getrandbits(96)
        return z

    def _path_h(self, t1: int, i1: int, t2: int, i2: int, bw: float) -> int:
        """What reserving ``bw`` on the path adds to ``h``: sum over its links of a random number per
        link times the bandwidth taken in 1/1000 GB/s (as followPath takes it), so equal use of the links
        hashes alike whichever paths made it."""
        key = (t1, i1, t2, i2, bw)
        v = self.zob.get(key)
        if v is not None:
            return v
        v = 0
        if t1 != -1:
            nodes = self.ctx.sys.nodes
            node1 = nodes[t1][i1]
            path = node1.paths[t2][i2]
            overhead, _simple, _links, _pcis, steps = path.fast or _steps(path, node1)
            pci_bw = f32(f32(bw * 6.0) / 5.0) if overhead else bw
            for link, is_pci, rev, kind in steps[:path.count]:
                fw = pci_bw if is_pci else bw
                v += self._z(("L", id(link))) * round(fw * 1000)
                amounts = [fw]
                if kind:
                    rb = _rev_amount(fw, kind)
                    v += self._z(("L", id(rev))) * round(rb * 1000)
                    amounts.append(rb)
                if not all(_grid(x) for x in amounts):
                    # off SUB_ROUND's grid: the order of reservations could matter; no memo from here on
                    self.memo = None
                    self.memo_ok = False
        self.zob[key] = v
        return v

    def replay_gpu(self, graph: TGraph, step: int) -> int:
        ng = self.ctx.ngpus
        rank = graph.intra[(graph.n_channels - 1) * ng + step + 1]
        g = self.ctx.gpu_index.get(rank)
        if g is None:
            raise NcclFailure("replay: rank not found")
        return g

    def try_gpu(self, graph, save, step, back_net, back_first, forced, t1, i1, g) -> None:
        """``ncclTopoSearchTryGpu``: followPath to GPU ``g`` (inlined: the path is looked up and checked
        once for the take and the give-back), the recursion, the give-back."""
        flag = 1 << graph.n_channels
        nodes = self.ctx.sys.nodes
        gpu = nodes[GPU][g]
        if t1 == -1:
            path = node1 = None
            bw = graph.bw_inter
        else:
            node1 = nodes[t1][i1]
            path = node1.paths[GPU][g]
            if t1 == GPU or t1 == NVS:
                bw, typ = graph.bw_intra, graph.type_intra
            else:
                bw, typ = graph.bw_inter, graph.type_inter
            ptype = path.type
            if ptype >= PATH_DIS or ptype > typ:
                return
            if graph.pattern <= TREE and gpu.paths[t1][i1].type > typ:   # BALANCED_TREE, SPLIT_TREE, TREE
                return
            if not _reserve(path, node1, bw):
                return
            graph.n_hops = int(graph.n_hops + path.count)
        gpu.used ^= flag
        if self.memo is None:
            self.rec_gpu(graph, save, gpu, step, back_net, back_first, forced)
        else:
            # the links it took, and GPU g used in this channel
            tz = self.tz.get((t1, i1, g, bw))
            if tz is None:
                zu = self._z(("u", g))
                tz = self.tz[t1, i1, g, bw] = (self._path_h(t1, i1, GPU, g, bw) + zu, zu)
            d, zu = tz
            self.h += d
            self.cur.append(zu)
            self.rec_gpu(graph, save, gpu, step, back_net, back_first, forced)
            self.cur.pop()
            self.h -= d
        gpu.used ^= flag
        if path is not None:
            _reserve(path, node1, -bw)
            graph.n_hops = int(graph.n_hops - path.count)

    def compare(self, graph: TGraph, ref: TGraph) -> bool:
        """``ncclTopoCompareGraphs``."""
        if graph.n_channels < graph.min_channels:
            return False
        if graph.pattern == NVLS:
            copy = False
            if graph.n_channels > ref.n_channels and graph.n_channels <= self.ctx.ngpus:
                copy = True
            if f32(graph.n_channels * graph.bw_inter) > f32(ref.n_channels * ref.bw_inter):
                copy = True
            return copy
        a, b = f32(graph.n_channels * graph.bw_intra), f32(ref.n_channels * ref.bw_intra)
        if a > b:
            return True
        if a < b:
            return False
        return graph.pattern == ref.pattern and graph.cross_nic == ref.cross_nic and graph.n_hops < ref.n_hops

    def rec_gpu(self, graph, save, gpu, step, back_net, back_first, forced) -> None:
        """``ncclTopoSearchRecGpu``, with an exact memo of the subtrees that leave the best graph alone.

        What a subtree does depends only on: the bandwidth left on every link and NIC and the GPUs
        marked used (a function of the multiset of reservations in force, hashed in ``h``: each
        reservation subtracts a fixed amount rounded to NCCL's 1/1000 grid, so the order does not
        matter -- checked by ``memo_ok``), the arguments, the channel count and hop count, the
        entries of ``intra``/``inter`` it can read (this channel so far, the previous channel for
        replay and NIC pairing), the pass's parameters (fixed: the memo is per pass) and the best
        graph so far (``version``).  A subtree that left the best graph alone and did not run out of
        time is recorded with the steps it took; met again, it is skipped by taking those steps
        (or all the time left, where the original would have run out inside it finding nothing)."""
        if self.time <= 0:
            return
        memo = self.memo
        if memo is None:
            self._rec_gpu(graph, save, gpu, step, back_net, back_first, forced)
            return
        n = graph.n_channels
        if self.read_intra:
            # this channel so far (the next channel replays it); the previous channel only while
            # replaying it (FORCED_ORDER_REPLAY passes down a channel's steps, nothing else reads it)
            ng = self.ctx.ngpus
            lo = (n - 1) * ng if n and forced == FORCED_ORDER_REPLAY else n * ng
            intra = tuple(graph.intra[lo:n * ng + step])
        else:
            intra = None
        # this channel's NICs are in ``h`` (their reservations); the previous channel's are read back
        # only to pair NICs across channels (NCCL_CROSS_NIC=2 rings)
        prev = tuple(graph.inter[(n - 1) * 2:n * 2]) if n and self.read_prev_nets else None
        key = (self.h, -1 if gpu is None else gpu.idx, step, back_net, back_first, forced, n, graph.n_hops,
               graph.bw_inter, intra, prev)
        took = memo.get(key)
        if took is not None:
            left = self.time - took
            self.time = left if left > 0 else 0
            return
        t0, v0 = self.time, self.version
        self._rec_gpu(graph, save, gpu, step, back_net, back_first, forced)
        if self.version == v0 and self.time > 0 and self.memo is memo:
            memo[key] = t0 - self.time

    def _rec_gpu(self, graph, save, gpu, step, back_net, back_first, forced) -> None:
        self.time -= 1
        ctx = self.ctx
        sys = ctx.sys
        ngpus = ctx.ngpus
        if step == ngpus:
            graph.n_channels += 1
            if self.compare(graph, save):
                save.assign(graph)
                self.version += 1
                if self.memo is not None:
                    self.memo = {}      # recorded against the previous best graph
                if graph.n_channels == graph.max_channels:
                    self.time = -1
                elif self.done_when is not None and self.done_when(save):
                    # nothing later in this pass can be kept, and its time left is read by nothing
                    if CHECK_WIDENING:
                        self.done_at = self.version if self.done_at is None else self.done_at
                    else:
                        self.time = 0
                        self.stopped = True
            if graph.n_channels < graph.max_channels:
                if self.memo is not None:
                    # the channel is done: its reservations stay, but which channel made them no longer matters
                    ops = self.cur
                    delta = sum(ops)
                    self.h -= delta
                    self.cur = []
                    self.rec(graph, save)
                    self.cur = ops
                    self.h += delta
                else:
                    self.rec(graph, save)
            graph.n_channels -= 1
            return
        graph.intra[graph.n_channels * ngpus + step] = gpu.rank
        g = gpu.idx
        if step == back_net:
            if sys.inter:
                nch = graph.n_channels
                si = ctx.net_index[graph.inter[nch * 2]]
                # ncclTopoSearchCheckNet: its fixed rules applied once per (start NET, GPU, pass), the two
                # that read this search's NETs here
                pair = graph.pattern == RING and graph.cross_nic == 2 and nch & 1
                want = graph.inter[(nch - 1) * 2] if pair else graph.inter[nch * 2 + 1] \
                    if graph.pattern == BALANCED_TREE and step != 0 else None
                for n in ctx.back_nets(graph, si, g):
                    if want is not None and ctx.net_ids[n] != want:
                        continue
                    next_back = -1
                    save_inter = graph.bw_inter
                    if graph.pattern == BALANCED_TREE:
                        if step == 0:
                            next_back = 1
                        graph.bw_inter = graph.bw_inter / 2     # halving a C float is exact
                    net = follow_path(ctx, graph, GPU, g, NET, n, 1)
                    d = (self._path_h(GPU, g, NET, n, graph.bw_inter) if self.memo is not None else 0)
                    graph.bw_inter = save_inter
                    if net is not None:
                        graph.inter[graph.n_channels * 2 + 1] = net.id
                        if self.memo is not None:
                            zb = self._z(("b", n))      # this channel's NIC out
                            self.h += d + zb
                            self.cur.append(zb)
                            self.rec_gpu(graph, save, gpu, step, next_back, back_first, forced)
                            self.cur.pop()
                            self.h -= d + zb
                        else:
                            self.rec_gpu(graph, save, gpu, step, next_back, back_first, forced)
                        if graph.pattern == BALANCED_TREE:
                            graph.bw_inter = graph.bw_inter / 2
                        follow_path(ctx, graph, GPU, g, NET, n, -1)
                        graph.bw_inter = save_inter
        elif graph.pattern == NVLS:
            self.try_nvls(graph, save, g, ngpus)
        elif graph.pattern == COLLNET_DIRECT:
            raise NcclFailure("CollNet graphs are not searched here")
        elif step < ngpus - 1:
            if forced == FORCED_ORDER_PCI:
                nxt = [step + 1]
            elif forced == FORCED_ORDER_REPLAY:
                nxt = [self.replay_gpu(graph, step)]
            else:
                nxt = _next_gpu_sort(ctx, graph, gpu, 0 if back_net == -1 else 1 if back_net == step + 1 else -1)
            for x in nxt:
                self.try_gpu(graph, save, step + 1, back_net, back_first, forced, GPU, g, x)
        elif step == back_first:
            p = ctx.gpu_index[graph.intra[graph.n_channels * ngpus]]
            first = follow_path(ctx, graph, GPU, g, GPU, p, 1)
            if first is not None:
                if self.memo is not None:
                    d = self._path_h(GPU, g, GPU, p, graph.bw_intra)
                    self.h += d
                    self.rec_gpu(graph, save, first, step + 1, back_net, -1, forced)
                    self.h -= d
                else:
                    self.rec_gpu(graph, save, first, step + 1, back_net, -1, forced)
                follow_path(ctx, graph, GPU, g, GPU, p, -1)
        else:
            self.rec_gpu(graph, save, gpu, ngpus, -1, -1, forced)

    def try_nvls(self, graph, save, g: int, ngpus: int) -> None:
        """``ncclTopoSearchTryNvls``: followPath from the NVSwitch to every GPU, then from every GPU to
        it (twice the bandwidth for the head GPU ``g``, whose path type is not checked), in GPU order,
        stopping at the first that lacks room; the recursion when all fit; the give-back in reverse."""
        line = self.nvls_line
        if self.nvls_replay:
            # the same head after the same heads before it, from the same link state: the same outcome
            fits, hops = line[g]
            if fits:
                graph.n_hops = int(graph.n_hops + hops)
                self.rec_gpu(graph, save, None, ngpus, -1, -1, 0)
                graph.n_hops = int(graph.n_hops - hops)
            return
        hops0 = graph.n_hops
        nodes = self.ctx.sys.nodes
        gpus = nodes[GPU]
        nvs = nodes[NVS][0]
        count = len(gpus)
        bw, typ = graph.bw_intra, graph.type_intra
        bw2 = f32(bw * 2.0)
        down = nvs.paths[GPU]
        d0 = 0
        while d0 < count:
            path = down[d0]
            head = d0 == g
            if path.type >= PATH_DIS or (not head and path.type > typ) or \
                    not _reserve(path, nvs, bw2 if head else bw):
                break
            graph.n_hops = int(graph.n_hops + (2 if head else 1) * path.count)
            d0 += 1
        if d0 == count:
            d1 = 0
            while d1 < count:
                gpu = gpus[d1]
                path = gpu.paths[NVS][0]
                head = d1 == g
                if path.type >= PATH_DIS or (not head and path.type > typ) or \
                        not _reserve(path, gpu, bw2 if head else bw):
                    break
                graph.n_hops = int(graph.n_hops + (2 if head else 1) * path.count)
                d1 += 1
            if d1 == count:
                if line is not None:
                    _nvls_record(line, g, True, graph.n_hops - hops0)
                self.rec_gpu(graph, save, None, ngpus, -1, -1, 0)
            elif line is not None:
                _nvls_record(line, g, False, 0)
            while d1:
                d1 -= 1
                gpu = gpus[d1]
                path = gpu.paths[NVS][0]
                head = d1 == g
                _reserve(path, gpu, -bw2 if head else -bw)
                graph.n_hops = int(graph.n_hops - (2 if head else 1) * path.count)
        elif line is not None:
            _nvls_record(line, g, False, 0)
        while d0:
            d0 -= 1
            path = down[d0]
            head = d0 == g
            _reserve(path, nvs, -bw2 if head else -bw)
            graph.n_hops = int(graph.n_hops - (2 if head else 1) * path.count)

    def rec_net(self, graph, save, back_net: int, back_first: int) -> None:
        """``ncclTopoSearchRecNet``."""
        ctx = self.ctx
        sys = ctx.sys
        bw = int(graph.bw_inter)          # NCCL: const int bw = graph->bwInter
        nets = ctx.select_nets(graph.type_inter, -1)
        found = False
        all_nets = sys.nodes[NET]
        for i in range(len(nets)):
            if graph.pattern in (NVLS, COLLNET_DIRECT) and found:
                break
            n = nets[(graph.n_channels + i) % len(nets)]
            net = all_nets[n]
            if graph.coll_net and net.coll == 0:
                continue
            if net.bw < bw:
                continue
            if graph.pattern == RING and graph.cross_nic == 2 and (graph.n_channels & 1) and \
                    net.id != graph.inter[(graph.n_channels - 1) * 2 + 1]:
                continue
            graph.inter[graph.n_channels * 2] = net.id
            graph.latency_inter = net.latency
            mates = ctx.port_mates[n]
            for o in mates:
                # a whole number off a C float below 2^23 that stays >= 0 is exact (f32 is then a no-op)
                v = o.bw - bw
                o.bw = v if v >= 0 and o.bw < 8388608.0 else f32(v)
            tracked = self.memo is not None
            if tracked:
                # the NIC bandwidth taken (every NET of its port), and this channel's NIC in
                zs = self._z(("s", n))
                zm = self.zob.get(("m", n))     # the sum over the port's NETs of their link numbers
                if zm is None:
                    zm = self.zob[("m", n)] = sum(self._z(("L", id(o))) for o in mates)
                dn = zs + zm * bw
                self.h += dn
                self.cur.append(zs)
            skip_restore = False
            if graph.pattern in (NVLS, COLLNET_DIRECT):
                if graph.n_channels < len(nets):
                    gpu = net.local_gpu
                    if gpu != -1:
                        dup = any(graph.intra[gc * ctx.ngpus] == sys.nodes[GPU][gpu].rank
                                  for gc in range(graph.n_channels))
                        if not dup:
                            self.try_gpu(graph, save, 0, back_net, back_first, 0, NET, n, gpu)
                            found = True
            else:
                if graph.n_channels > 0 and graph.same_channels == 1:
                    g = self.replay_gpu(graph, -1)
                    self.try_gpu(graph, save, 0, back_net, back_first, FORCED_ORDER_REPLAY, NET, n, g)
                else:
                    if graph.n_channels == 0 and not sys.nodes[NVS]:
                        saved = self.time
                        self.time = 1 << 10
                        self.try_gpu(graph, save, 0, back_net, back_first, FORCED_ORDER_PCI, NET, n, 0)
                        t = self.time
                        self.time = -1 if t == -1 else saved
                    local = net.local_gpu
                    if local != -1:
                        self.try_gpu(graph, save, 0, back_net, back_first, 0, NET, n, local)
                    gpus, ptype = ctx.net_local_gpus[n]
                    if ptype == PATH_DIS:
                        skip_restore = True     # NCCL's "continue" skips giving the NET bandwidth back
                    else:
                        for g in gpus:
                            if g == local:
                                continue
                            self.try_gpu(graph, save, 0, back_net, back_first, 0, NET, n, g)
            if skip_restore:
                # the reservation stays in force (NCCL's "continue"): the memo cannot describe that state
                self.memo = None
                self.memo_ok = False
                continue
            if tracked:
                self.cur.pop()
                self.h -= dn
            for o in mates:
                o.bw = o.bw + bw if o.bw >= 0 and o.bw < 8388608.0 else f32(o.bw + bw)

    def rec(self, graph, save) -> None:
        """``ncclTopoSearchRec``."""
        sys = self.ctx.sys
        ng = len(sys.nodes[GPU])
        if sys.inter:
            back_net = ng - 1 if graph.pattern == RING else 1 if graph.pattern == SPLIT_TREE else 0
            self.rec_net(graph, save, back_net, -1)
            return
        back_first = ng - 1 if graph.pattern == RING else -1
        if graph.pattern == NVLS:
            self.try_gpu(graph, save, 0, -1, back_first, 0, -1, -1, graph.n_channels)
            return
        if graph.n_channels == 0:
            self.try_gpu(graph, save, 0, -1, back_first, FORCED_ORDER_PCI, -1, -1, 0)
        else:
            g = self.replay_gpu(graph, -1)
            self.try_gpu(graph, save, 0, -1, back_first, FORCED_ORDER_REPLAY, -1, -1, g)
        if graph.same_channels == 0 or graph.n_channels == 0:
            for g in range(ng):
                self.try_gpu(graph, save, 0, -1, back_first, 0, -1, -1, g)


def _nvls_record(line: list, g: int, fits: bool, hops: int) -> None:
    """Note what head GPU ``g``'s NVLS reservations came to (heads are tried in order 0, 1, ...: the
    line grows by one); met again, they must come to the same."""
    if g == len(line):
        line.append((fits, hops))
    elif g > len(line) or line[g] != (fits, hops):
        raise AssertionError(f"NVLS head {g}: {(fits, hops)} after {line[:g + 1]}")


def _reservations_on_grid(amounts: Iterable[float], kinds, intel: bool = True) -> bool:
    """Every one of ``amounts`` a pass reserves, with the Intel P2P overhead on each (where the system has an
    Intel CPU: ``intel``) and the reverse amounts of the reservation ``kinds`` the system has, is on
    SUB_ROUND's grid (so giving it back is exact)."""
    for a in amounts:
        for fw in (a, f32(f32(a * 6.0) / 5.0)) if intel else (a,):
            if not all(_grid(x) for x in (fw,) + tuple(_rev_amount(fw, k) for k in kinds)):
                return False
    return True


def _nvls_on_grid(speeds: list, kinds, intel: bool = True) -> bool:
    """Every amount an NVLS pass at any of ``speeds`` reserves (bwIntra, twice it for the head GPU) is on
    SUB_ROUND's grid (:func:`_reservations_on_grid`)."""
    return _reservations_on_grid([a for s in speeds for a in (s, f32(s * 2.0))], kinds, intel)


def _nvls_known(line: list, max_channels: int) -> bool:
    """Every head a one-node NVLS pass of at most ``max_channels`` channels would try is in ``line``."""
    for i in range(max_channels):
        if i >= len(line):
            return False
        if not line[i][0]:
            return True
    return True


class _Passes:
    """Passes of one ncclTopoCompute that must end alike.  A pass reads ``type_intra``/``type_inter``
    only as thresholds on the types of existing paths (followPath, ncclTopoSelectNets), so two
    thresholds with no path type between them search the same; a pass that left the best graph alone
    is recorded with the time it left, and a later pass with the same parameters, thresholds and best
    graph is given that time without searching (NCCL steps through every type for every speed, and
    on a machine where no graph fits, each of those passes runs out its time)."""

    def __init__(self, sys) -> None:
        intra, inter = set(), set()
        gn, nn, vn = sys.nodes[GPU], sys.nodes[NET], sys.nodes[NVS]
        for a in gn + vn:
            for t2 in (GPU, NVS):
                for p in (a.paths[t2] or []):
                    intra.add(p.type)
        for a in gn:
            for p in (a.paths[NET] or []):
                inter.add(p.type)
        for a in nn:
            for p in (a.paths[GPU] or []):
                inter.add(p.type)
        self.intra = sorted(intra)
        self.inter = sorted(inter)
        self.memo: dict = {}

    @staticmethod
    def _level(types: list, threshold: int) -> int:
        lvl = -1
        for t in types:
            if t <= threshold:
                lvl = t
        return lvl

    def keys(self, g: TGraph, budget: int, search: "_Search", save: TGraph, inter: int) -> list:
        """The keys under which an earlier pass's outcome holds for this one, the pass's own key first.

        Within one node (no ``inter``), and for the TREE pattern (its NET out is its NET in, so
        ncclTopoSearchCheckNet's crossNic rules never apply), crossNic steers nothing but
        ncclTopoCompareGraphs' tie-break (a graph of equal bandwidth and fewer hops wins only with the
        same pattern and crossNic as the best one): there it enters the key only as "can a tie win", and
        a pass that found nothing where a tie could win also covers one where it cannot."""
        base = (g.pattern, g.same_channels, g.bw_intra, g.bw_inter, g.min_channels, g.max_channels, g.coll_net,
                g.n_hops, self._level(self.intra, g.type_intra), self._level(self.inter, g.type_inter), budget,
                search.version)
        if inter and g.pattern != TREE:
            return [base + (g.cross_nic,)]
        ties = g.pattern == save.pattern and g.cross_nic == save.cross_nic
        return [base + ("ties", ties)] + ([] if ties else [base + ("ties", True)])

    def twin_key(self, g: TGraph, budget: int) -> Optional[tuple]:
        """What a pass within one node searches but for crossNic (None for NVLS/CollNet passes)."""
        if g.pattern in (NVLS, COLLNET_DIRECT) or g.coll_net:
            return None
        return (g.pattern, g.same_channels, g.bw_intra, g.bw_inter, g.min_channels, g.max_channels, g.n_hops,
                self._level(self.intra, g.type_intra), self._level(self.inter, g.type_inter), budget)


# Tests set CHECK_WIDENING to search the passes _Widening covers anyway and fail where one ends otherwise
# than the rule says; CHECKED_WIDENINGS collects the patterns of those checked.
CHECK_WIDENING = False
CHECKED_WIDENINGS: list = []
CHECKED_FINALS: list = []     # the same for the last passes of the second phase that keep nothing
CHECKED_DONE: list = []       # and for first-phase passes whose best graph became unbeatable
CHECKED_TWINS: list = []      # and for crossNic twins within one node (see compute)
CHECK_NVLS_REPLAY = False     # reserve anyway where a one-node NVLS pass would take its heads from the line
CHECKED_NVLS_REPLAYS: list = []


def _fits(cap: float, amount: float) -> int:
    """At most how many reservations of ``amount`` one link of ``cap`` GB/s can hold (generous by
    1/1000 both ways: SUB_ROUND rounds each subtraction to the nearest 1/1000)."""
    if amount <= 0.002:
        return 1 << 30
    return int((cap + 1e-3) / (amount - 1e-3))


class _Widening:
    """Passes that ran out of time, and the rule that gives a later pass their outcome without searching.

    Lowering the speed or raising a path-type threshold only widens a pass's search tree: along the same
    choices every followPath that fits at speed s fits at s' <= s (the bandwidth left is no smaller:
    SUB_ROUND and the f32 halvings are monotone), ncclTopoSelectNets' list at a higher threshold extends
    the one at a lower, and the candidates' order may change but not their set.  The tree does not read
    the best graph, so a pass whose narrower twin (same pattern, sameChannels, crossNic, maxChannels,
    time budget; speeds >= and thresholds <= its own) ran out of time runs out of time too -- unless it
    keeps a graph on the way (ncclTopoCompareGraphs), which can end it early at maxChannels.  Where the
    capacity of the links shows that no graph it can build would be kept, its outcome is known: the best
    graph unchanged and no time left.  Only while no NET bandwidth has leaked between passes (NCCL's
    ``continue`` in ncclTopoSearchRecNet; ``memo_ok``), so every pass starts from the same system."""

    def __init__(self, ctx: _Ctx) -> None:
        sys = ctx.sys
        self.sys = sys
        self.ctx = ctx
        self.ran_out: list = []
        gpus = sys.nodes[GPU]
        inside = set(map(id, gpus)) | set(map(id, sys.nodes[NVS]))
        inside |= {id(l.rem) for g in gpus for l in g.links if l.type == LINK_LOC}     # the GPU's PCI device
        # the links into the GPUs (their devices, the NVSwitches) from anything else: every channel across
        # nodes enters a GPU from a NET by a path that crosses one of them, taking at least bwInter on it
        self.entry = [l for t in range(len(sys.nodes)) for node in sys.nodes[t] if id(node) not in inside
                      for l in node.links if id(l.rem) in inside]
        self.ngpus = len(gpus)
        self._out: dict = {}
        # reverse reservations (see _steps): to a device of compute capability < 80, over NVLink to POWER
        self.kinds = ([1] if any(d.cc < 80 for d in sys.nodes[DEV]) else []) + \
            ([2, 3] if any(c.arch == ARCH_POWER for c in sys.nodes[CPU]) else [])
        # the Intel P2P overhead (_steps) is taken only on a path through an x86 Intel CPU
        self.intel = any(c.arch == ARCH_X86 and c.vendor == VENDOR_INTEL for c in sys.nodes[CPU])

    @staticmethod
    def _params(g: TGraph, budget: int) -> tuple:
        # TREE: crossNic does not shape the search (see _Passes.keys)
        return (g.pattern, g.same_channels, -1 if g.pattern == TREE else g.cross_nic, g.max_channels, g.coll_net,
                budget)

    def record(self, g: TGraph, budget: int, time_left: int) -> None:
        if time_left == 0:
            self.ran_out.append((self._params(g, budget), g.bw_intra, g.bw_inter, g.type_intra, g.type_inter))

    def covered(self, g: TGraph, budget: int, ref: TGraph) -> bool:
        """True when the pass ``g`` would run out of time and keep nothing (see the class)."""
        if g.pattern in (NVLS, COLLNET_DIRECT) or g.coll_net:
            return False
        key = self._params(g, budget)
        if not any(k == key and bi >= g.bw_intra and be >= g.bw_inter and ti <= g.type_intra and te <= g.type_inter
                   for k, bi, be, ti, te in self.ran_out):
            return False
        return self.keeps_nothing(g, ref)

    def keeps_nothing(self, g: TGraph, ref: TGraph) -> bool:
        """True when the pass ``g`` cannot keep a graph against ``ref`` and, searched, would give every
        link its bandwidth back exactly (so not searching it leaves the system as searching it would)."""
        return self.searchable(g) and self._nothing_kept(g, ref)

    def searchable(self, g: TGraph) -> bool:
        """The pass is one the capacity bound applies to (not NVLS/CollNet: other comparison rules) and
        every amount it reserves is on SUB_ROUND's grid."""
        return g.pattern not in (NVLS, COLLNET_DIRECT) and not g.coll_net and self._amounts_on_grid(g)

    def _amounts_on_grid(self, g: TGraph) -> bool:
        """Every amount the pass could reserve is on SUB_ROUND's grid, so searching it would have given
        every link its bandwidth back exactly (off the grid, NCCL's give-backs drift, and a pass not
        searched would not drift it as NCCL does): the speeds, half bwInter (BALANCED_TREE), the Intel
        P2P overhead on each, the reverse amounts where the system has links that take them."""
        half = (g.bw_inter / 2,) if g.pattern == BALANCED_TREE else ()
        return _reservations_on_grid((g.bw_intra, g.bw_inter) + half, self.kinds, self.intel)

    def _out_links(self, g: TGraph, gi: int) -> tuple:
        """The first links of the paths GPU ``gi`` may send on in this pass (GPU->GPU within typeIntra,
        GPU->NET within typeInter across nodes), with the fewest hops of those paths."""
        sys = self.sys
        key = (gi, g.type_intra, g.type_inter if sys.inter else None)
        got = self._out.get(key)
        if got is not None:
            return got
        node = sys.nodes[GPU][gi]
        links: dict = {}
        hops = None
        targets = [(GPU, g.type_intra)] + ([(NET, g.type_inter)] if sys.inter else [])
        for t2, typ in targets:
            for j, p in enumerate(node.paths[t2] or []):
                if (t2 == GPU and j == gi) or p.count == 0 or p.type > typ or p.type >= PATH_DIS:
                    continue
                first = next((l for l in p.list if l.type != LINK_LOC), p.list[0])    # past the GPU's device
                links[id(first)] = first
                hops = p.count if hops is None else min(hops, p.count)
        got = self._out[key] = (list(links.values()), hops or 0)
        return got

    def _nothing_kept(self, g: TGraph, ref: TGraph) -> bool:
        """No graph this pass can complete passes ncclTopoCompareGraphs against ``ref``: it needs
        min_channels channels, and more bandwidth than ``ref`` (or as much with fewer hops, same pattern
        and crossNic).  The channel count is bounded by the capacity of the links every channel uses
        (as they are now: call it before the pass reserves anything)."""
        return self.beats_none(g, self.bound(g), ref)

    def bound(self, g: TGraph) -> tuple:
        """(most channels, fewest hops per channel or 0) any graph of the pass ``g`` can have, from the
        links' bandwidth as it is now."""
        sys = self.sys
        n_max = g.max_channels
        if sys.inter:
            n_max = min(n_max, sum(_fits(l.bw, g.bw_inter) for l in self.entry), self._net_channels(g))
        hop_lb = 0
        if self.ngpus >= 2:
            caps, hops = [], []
            amount = min(g.bw_intra, g.bw_inter) if sys.inter else g.bw_intra
            for gi in range(self.ngpus):
                links, h = self._out_links(g, gi)
                caps.append(sum(_fits(l.bw, amount) for l in links))
                hops.append(h)
            if g.pattern == RING:
                # every GPU sends once per ring channel (to the next GPU, or the last one to a NET): at least
                # its shortest path's hops (a channel across nodes also enters from a NET: more, not fewer)
                n_max = min(n_max, min(caps))
                hop_lb = sum(hops) + (self._entry_hops(g) if sys.inter else 0)
            else:
                # a chain: every GPU but one sends once per channel
                n_max = min(n_max, sum(caps) // (self.ngpus - 1))
        return n_max, hop_lb

    def _entry_hops(self, g: TGraph) -> int:
        """The fewest hops of a path from a NET of ncclTopoSelectNets(typeInter) to a GPU within typeInter:
        how a ring channel across nodes enters its first GPU (0 when there is none)."""
        sys = self.sys
        best = 0
        for n in self.ctx.select_nets(g.type_inter, -1):
            for p in sys.nodes[NET][n].paths[GPU] or []:
                if p.count > 0 and p.type <= g.type_inter and (best == 0 or p.count < best):
                    best = p.count
        return best

    def _net_channels(self, g: TGraph) -> int:
        """The most channels the NICs allow: ncclTopoSearchRecNet starts every channel on a NET of
        ncclTopoSelectNets(typeInter) whose ``net.bw`` is at least ``(int)bwInter`` and takes that much off
        every NET of its ASIC and port until the channel is undone, so each port (as its bandwidth is now)
        starts at most as many channels as that amount fits in it, one after the other."""
        amount = int(g.bw_inter)
        if amount <= 0 or g.pattern not in (RING, BALANCED_TREE, SPLIT_TREE, TREE):
            return g.max_channels
        nets = self.sys.nodes[NET]
        total = 0
        seen: set = set()
        for n in self.ctx.select_nets(g.type_inter, -1):
            port = (nets[n].asic, nets[n].port)
            if port in seen:
                continue
            seen.add(port)
            left = nets[n].bw
            while left >= amount:
                left = f32(left - amount)
                total += 1
                if total >= g.max_channels:
                    return total
        return total

    @staticmethod
    def beats_none(g: TGraph, bound: tuple, ref: TGraph) -> bool:
        """No graph of the pass ``g`` within ``bound`` (:meth:`bound`) passes ncclTopoCompareGraphs
        against ``ref``."""
        n_max, hop_lb = bound
        if n_max < max(g.min_channels, 1):
            return True
        a, b = f32(n_max * g.bw_intra), f32(ref.n_channels * ref.bw_intra)
        if a > b:
            return False
        if a < b:
            return True
        if g.pattern != ref.pattern or g.cross_nic != ref.cross_nic:
            return True
        return hop_lb > 0 and g.n_hops + n_max * hop_lb >= ref.n_hops


def _grid(x: float) -> bool:
    return _sub_round(x, 0.0) == x


def _on_grid(sys) -> bool:
    """Every link and NIC bandwidth already on SUB_ROUND's 1/1000 grid (so reserving and giving back
    bandwidth returns it exactly, and the bandwidth left is a function of the reservations in force)."""
    for t in range(len(sys.nodes)):
        for node in sys.nodes[t]:
            for l in node.links:
                if _sub_round(l.bw, 0.0) != l.bw:
                    return False
    for net in sys.nodes[NET]:
        if _sub_round(net.bw, 0.0) != net.bw or f32(net.bw) != net.bw:
            return False
    return True


def dup_channels(graph: TGraph, cc_min: int, ngpus: int) -> None:
    """``ncclTopoDupChannels``."""
    if graph.n_channels == 0 or graph.pattern == NVLS or graph.bw_intra < 25.0:
        return
    if cc_min > 80 and graph.bw_intra < 50.0 and graph.n_channels > 4:
        return
    dup = min(graph.n_channels * 2, graph.max_channels)
    n = graph.n_channels
    graph.intra[n * ngpus:dup * ngpus] = graph.intra[0:(dup - n) * ngpus]
    graph.inter[n * 2:dup * 2] = graph.inter[0:(dup - n) * 2]
    div = -(-dup // n)
    graph.bw_intra = f32(graph.bw_intra / div)
    graph.bw_inter = f32(graph.bw_inter / div)
    graph.n_channels = dup


def _second_phase_step(graph: TGraph, tmp: TGraph, si: int) -> Optional[str]:
    """Where ncclTopoCompute's second phase goes after a pass that left time (``graph`` the best graph,
    ``tmp`` the pass, ``si`` its speed index): a faster ring ("ring"), NVLS with a faster bwInter ("nvls"),
    a faster bwIntra ("intra"), or None: the search ends."""
    if si <= 0:
        return None
    if graph.pattern == RING:
        return "ring"
    if graph.pattern == NVLS and tmp.bw_inter == graph.bw_inter and tmp.bw_inter < tmp.bw_intra * 2:
        return "nvls"
    if tmp.bw_intra == graph.bw_intra and tmp.bw_intra < tmp.bw_inter * 2:
        return "intra"
    return None


def compute(topo: Topo, graph: TGraph) -> TGraph:
    """``ncclTopoCompute``: search ``graph`` (pattern, min/max channels set by the caller) in place."""
    sys = topo.sys
    s = topo.s
    ctx = _Ctx(topo)
    cc_min, _ = topo.comp_cap()
    # NCCL's search recurses once per GPU and channel (up to 64 x nGPUs x 3 frames); Python >= 3.11
    # does not use the C stack for these calls, so the limit only needs to allow the depth.
    need = 4000 + 4 * MAXCHANNELS * max(1, len(sys.nodes[GPU]) + len(sys.nodes[NET]))
    if _pysys.getrecursionlimit() < need:
        _pysys.setrecursionlimit(need)
    ngpus = len(sys.nodes[GPU])
    ndevs = len(sys.nodes[DEV])
    graph.intra = [0] * (MAXCHANNELS * max(ngpus, 1))
    graph.inter = [0] * (MAXCHANNELS * 2)
    cross = s.cross_nic if (len(sys.nodes[NET]) > 1 and graph.pattern in (RING, BALANCED_TREE, SPLIT_TREE)) else 0
    graph.cross_nic = 1 if cross == 1 else 0
    graph.bw_intra = graph.bw_inter = 0.0
    graph.latency_inter = 0.0
    min_intra, min_inter, max_intra, max_inter = 0, PATH_PIX, PATH_SYS, PATH_SYS
    if ngpus > 1:
        min_intra = topo.gpu_min_path(GPU)
        max_intra = topo.gpu_max_path(GPU)
    if sys.inter:
        min_inter = topo.gpu_min_path(NET)
        max_inter = topo.gpu_max_path(NET)
        max_intra = max_inter
    if cc_min < 90:
        max_inter = PATH_SYS
    graph.type_intra = min_intra
    graph.type_inter = min_inter
    graph.n_channels = 0
    try_same = 0 if graph.pattern == NVLS else 1
    graph.same_channels = try_same
    c0 = sys.nodes[CPU][0]
    cpu_arch, cpu_vendor = c0.arch, c0.vendor
    if s.graph_file is not None:
        from gpucomm.planners.nccl.graphfile import load_graph

        if load_graph(s.graph_file, topo, graph) and graph.n_channels > 0:
            return graph
    if graph.pattern == NVLS and (not sys.nodes[NVS] or cc_min < 90):
        return graph
    if graph.pattern == NVLS:
        graph.max_channels = min(NCCL_MAX_NVLS_ARITY, ngpus)
    if graph.pattern == COLLNET_DIRECT:
        graph.max_channels = min(NCCL_MAX_DIRECT_ARITY + 1, ngpus)
    if ngpus == 1 and graph.pattern != RING:
        graph.pattern = TREE
    if sys.inter == 0 and graph.pattern == NVLS:
        graph.min_channels = graph.max_channels
    if graph.pattern == RING and topo.split_nvlink():
        if graph.max_channels >= 2 and graph.min_channels == 1:
            graph.min_channels = 2
    tmp = graph.copy()
    speeds = [f32(x) for x in speed_ladder(cc_min, bool(sys.inter))]
    nspeeds = len(speeds)
    pass_ = 1
    si = 0
    max_bw = sys.max_bw
    total_bw = sys.total_bw
    if ndevs > 1 and graph.pattern != RING:
        total_bw = f32(total_bw * (ndevs * 1.0 / (ndevs - 1)))
    while (speeds[si] > max_bw or f32(speeds[si] * graph.min_channels) > total_bw) and si < nspeeds - 1:
        si += 1
    tmp.bw_intra = tmp.bw_inter = f32(speeds[si])
    global_timeout = SEARCH_GLOBAL_TIMEOUT
    search = _Search(ctx)
    search.memo_ok = _on_grid(sys)
    passes = _Passes(sys)
    twins: dict = {}      # twin_key of a pass that ran out of time -> the best graph's version after it
    widening = _Widening(ctx)
    nvls_lines = {} if graph.pattern == NVLS and not sys.inter and search.memo_ok and \
        _nvls_on_grid(speeds, widening.kinds, widening.intel) else None
    while True:
        # search:
        time = SEARCH_TIMEOUT_SAMECHANNELS if tmp.same_channels else \
            SEARCH_TIMEOUT_TREE if tmp.pattern == TREE else SEARCH_TIMEOUT
        tmp.n_channels = 0
        global_timeout -= time
        search.time = time
        search.stopped = False
        pkeys = passes.keys(tmp, time, search, graph, sys.inter) if search.memo_ok else []
        pkey = pkeys[0] if pkeys else None
        left = next((passes.memo[k] for k in pkeys if k in passes.memo), None)
        covered = left is None and search.memo_ok and widening.covered(tmp, time, graph)
        # within one node crossNic shapes no search tree: a pass whose twin of another crossNic ran out of time
        # just before (the best graph unchanged since) walks the same tree, so keeps nothing better than the
        # best graph (which is the best of that tree), and runs out of time too -- when ties cannot win
        tkey = passes.twin_key(tmp, time) if search.memo_ok and not sys.inter else None
        twin = left is None and not covered and tkey is not None and twins.get(tkey) == search.version and \
            not (tmp.pattern == graph.pattern and tmp.cross_nic == graph.cross_nic)
        # the last pass of the second phase: after it the search stops whatever time it leaves (below,
        # `if pass_ == 2`), so one that can keep nothing changes nothing -- not even the time that follows
        final = left is None and not covered and search.memo_ok and pass_ == 2 and \
            _second_phase_step(graph, tmp, si) is None and widening.keeps_nothing(tmp, graph)
        if left is not None:
            search.time = left      # the same search again, against the same best graph: the same outcome
        elif covered and not CHECK_WIDENING:
            search.time = 0         # a wider twin of a pass that ran out of time, that can keep nothing
        elif final and not CHECK_WIDENING:
            search.time = 0         # its time left is read by nothing: the search ends after it
        elif twin and not CHECK_WIDENING:
            search.time = 0         # the twin's tree again, nothing in it better than the best graph
        else:
            v0 = search.version
            search.start_pass(tmp)
            # The first phase ends at once when the best graph reaches the system's bandwidth (goto_done
            # below, whatever time is left); once it does and the capacity of the links shows nothing later
            # in this pass could be kept (the widening rule's bound, from this pass's start), the rest of
            # the pass changes nothing: every link gets its bandwidth back exactly (on SUB_ROUND's grid).
            start = tmp.copy() if pass_ == 1 and search.memo_ok and widening.searchable(tmp) else None
            if start is not None:
                bound = widening.bound(start)       # before the pass reserves anything
                search.done_when = lambda best: f32(best.n_channels * best.bw_inter) >= sys.total_bw and \
                    widening.beats_none(start, bound, best)
            else:
                search.done_when = None
            search.done_at = None
            if nvls_lines is not None:
                # one node's NVLS pass is a line (head GPU 0, 1, ... while each fits): a pass with the same
                # bandwidth and type threshold meets the same heads in the same link state, so the heads
                # already tried are taken from the line (every pass gives every link its bandwidth back
                # exactly: all on SUB_ROUND's grid)
                search.nvls_line = nvls_lines.setdefault((tmp.bw_intra, tmp.type_intra), [])
                known = _nvls_known(search.nvls_line, tmp.max_channels)
                search.nvls_replay = known and not CHECK_NVLS_REPLAY
                if known and CHECK_NVLS_REPLAY:
                    CHECKED_NVLS_REPLAYS.append(tmp.max_channels)
            search.rec(tmp, graph)
            search.nvls_line = None
            search.nvls_replay = False
            search.done_when = None
            if search.done_at is not None:
                if search.version != search.done_at:
                    raise AssertionError(f"a pass kept {search.version - search.done_at} graphs after its best "
                                         "graph was unbeatable")
                CHECKED_DONE.append(tmp.pattern)
            if pkey is not None and search.version == v0 and search.memo_ok:
                passes.memo[pkey] = search.time
            if covered:
                if search.time != 0 or search.version != v0:
                    raise AssertionError(f"a widened pass ended otherwise: time {search.time}, "
                                         f"kept {search.version - v0} graphs")
                CHECKED_WIDENINGS.append(tmp.pattern)
            if final:
                if search.time == -1 or search.version != v0:
                    raise AssertionError(f"a final pass kept {search.version - v0} graphs (time {search.time})")
                CHECKED_FINALS.append(tmp.pattern)
            if twin and not covered and not final:
                if search.time != 0 or search.version != v0:
                    raise AssertionError(f"a crossNic twin ended otherwise: time {search.time}, "
                                         f"kept {search.version - v0} graphs")
                CHECKED_TWINS.append(tmp.pattern)
            if tkey is not None and search.time == 0 and not search.stopped:
                twins[tkey] = search.version
        if search.memo_ok and not final and not search.stopped:
            widening.record(tmp, time, search.time)     # (a pass stopped early did not run out of time)
        time = search.time
        goto_done = time == -1 or f32(graph.n_channels * graph.bw_inter) >= sys.total_bw
        if not goto_done and pass_ == 1:
            if tmp.same_channels == 1 and not (cpu_arch == ARCH_X86 and cpu_vendor == VENDOR_AMD
                                               and tmp.type_intra == PATH_SYS):
                tmp.same_channels = 0
                continue
            tmp.same_channels = try_same
            if time != -1:
                global_timeout += time
            else:
                global_timeout = SEARCH_GLOBAL_TIMEOUT
            if not (global_timeout < 0 and graph.n_channels):
                if cc_min >= 90 and tmp.pattern == BALANCED_TREE:
                    tmp.pattern = TREE
                    continue
                tmp.pattern = graph.pattern
                max_i = tmp.type_inter if sys.inter else max_intra
                if tmp.type_intra < max_i and (graph.n_channels == 0 or tmp.type_intra < graph.type_intra):
                    tmp.type_intra += 1
                    if tmp.type_intra < PATH_DIS:
                        continue
                tmp.type_intra = min_intra
                if sys.inter and tmp.type_inter < max_inter and \
                        (graph.n_channels == 0 or tmp.type_inter < graph.type_inter or tmp.type_inter < PATH_PXN):
                    tmp.type_inter += 1
                    if tmp.type_inter < PATH_DIS:
                        continue
                tmp.type_inter = min_inter
                if cross == 2 and tmp.cross_nic == 0 and graph.pattern in (RING, BALANCED_TREE):
                    tmp.cross_nic = 2
                    continue
                tmp.cross_nic = 1 if cross == 1 else 0
                if si < nspeeds - 1 and (graph.n_channels == 0 or f32(speeds[si + 1] / graph.bw_inter) > .49):
                    si += 1
                    tmp.bw_inter = tmp.bw_intra = f32(speeds[si])
                    continue
                si = 0
                while speeds[si] > max_bw and si < nspeeds - 1:
                    si += 1
                tmp.bw_intra = tmp.bw_inter = f32(speeds[si])
        # done:
        if pass_ == 1:
            time = -1
            dup_channels(graph, cc_min, ngpus)
            tmp = graph.copy()
            si = 0
            while speeds[si] > graph.bw_inter and si < nspeeds - 1:
                si += 1
            tmp.bw_intra = tmp.bw_inter = f32(speeds[si])
            tmp.min_channels = graph.n_channels
            pass_ = 2
        if pass_ == 2:
            step = _second_phase_step(graph, tmp, si) if time != 0 else None
            if step is not None:
                si -= 1
                if step == "ring":
                    tmp.bw_intra = tmp.bw_inter = f32(speeds[si])
                elif step == "nvls":
                    tmp.min_channels = tmp.max_channels = graph.n_channels
                    tmp.bw_inter = f32(speeds[si])
                else:
                    tmp.bw_intra = f32(speeds[si])
                continue
            time = -1
            tmp = graph.copy()
        break
    if graph.n_channels == 0 and graph.coll_net == 0 and graph.pattern != NVLS:
        for i in range(ngpus):
            graph.intra[i] = sys.nodes[GPU][i].rank
        graph.bw_intra = f32(0.1)
        graph.type_intra = PATH_SYS
        nets0 = ctx.select_nets(-1, 0) if sys.nodes[NET] else []
        nets1 = ctx.select_nets(-1, ngpus - 1) if sys.nodes[NET] else []
        graph.inter[0] = sys.nodes[NET][nets0[0]].id if nets0 else -1
        graph.inter[1] = sys.nodes[NET][nets1[0]].id if nets1 else -1
        if graph.inter[0] != -1 and graph.inter[1] != -1:
            graph.bw_inter = f32(0.1)
            graph.type_inter = PATH_SYS
        else:
            graph.inter[0] = graph.inter[1] = -1
            graph.bw_inter = 0.0
            graph.type_inter = PATH_DIS
        graph.n_channels = 1
    return graph


__all__ = ["speed_ladder", "channel_cap", "follow_amounts", "compute", "TGraph"]
