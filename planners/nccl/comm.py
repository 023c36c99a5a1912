"""What NCCL 2.30.7 builds for a communicator on a topology: the first half of
``initTransportsRank`` (src/init.cc) for every local rank -- system from the XML, paths, trim,
ring/tree/NVLS search, ``ncclTopoPreset`` -- then rank 0's all-gather merge (cross-rank minimum of
the graphs, NCCL's node count), ``ncclNvlsTuning``, ``ncclTopoPostset`` (connect.cc: rings joined
across nodes, double binary trees of trees.cc, channel doubling) and the tuning model
(:mod:`gpucomm.planners.nccl.tuning`).

Identical nodes: the ranks of node n are rank 0's node shifted by ``n * localRanks`` (NCCL computes
the same from the same topology).  The input is the XML NCCL would load on the host
(:func:`pinned_xml`: the document exported as NCCL's topology XML, every value NCCL would read from
the host written in -- compute capability, PCIe speeds, NIC speeds, GUIDs and GDR, the CPU's identity
-- each default a named assumption of the view).  Results are cached per (XML, GPUs, nodes,
settings): :func:`nccl_comm` is cheap to call again.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Union

from gpucomm.probes.errors import InputError, PlanInfeasible
from gpucomm.probes.model import format_cpulist
from gpucomm.probes.topology import Topology

from gpucomm.planners.nccl import mnnvl as M
from gpucomm.planners.nccl import ncclxml as X
from gpucomm.planners.nccl.ncclxml import NcclFailed
from gpucomm.planners.nccl.names import (BALANCED_TREE, MAXCHANNELS, NVLS, PATH_NAMES, PATTERN_NAMES, RING, SPLIT_TREE,
                                         TREE)
from gpucomm.planners.nccl.pinning import distinct_gpus, first_host, host_gpus, nccl_inputs, pin
from gpucomm.planners.nccl.search import TGraph, compute
from gpucomm.planners.nccl.settings import NcclSettings
from gpucomm.planners.nccl.system import CPU, GPU, NET, NVS, Topo, f32, system_from_xml

DEFAULT_SIZES = tuple(8 << (2 * i) for i in range(17))      # 8 B .. 32 GiB by 4x; callers pass their own


# --------------------------------------------------------------------------------------------
# The XML NCCL would load on the host
def pinned_xml(doc: Union[Topology, dict]) -> str:
    """The document as the NCCL topology XML that NCCL would build on the host, with every value
    NCCL reads from the host written in (see :func:`gpucomm.planners.nccl.pinning.pin`)."""
    topo = Topology.of(doc)
    return topo.derived("nccl-pinned-xml", lambda: pin(topo))   # a view does not change: pinned once


# --------------------------------------------------------------------------------------------
@dataclass
class RankState:
    """One local rank after ncclTopoPreset: its system, graphs and the all-gathered data."""

    topo: Topo
    graphs: dict                  # "ring", "tree", "nvls", "collnet_chain", "collnet_direct" -> TGraph
    nvls_support: int
    cpu_arch: int
    cpu_vendor: int
    local_net_count: int
    min_net_bw: float
    all_nvlink: int
    n_channels: int               # min(tree, ring) before the merge
    topo_ranks: dict
    channels: list                # [{"up": int, "down": [3 ints]}] (rank's channel trees after Preset)


@dataclass
class CommResult:
    """Everything NCCL decided for one communicator (fields named after NCCL's)."""

    nodes: int
    local: list                   # [SimGpu] in local-rank order
    machine: Any
    rank0: RankState
    graphs: dict                  # merged graphs (rank 0 after the all-gather)
    n_nodes: int                  # NCCL's nNodes (a split node counts twice)
    n_ranks: int
    n_channels: int
    coll_channels: int
    nvls_support: int
    nvls_channels: int
    rings: list                   # per channel: ranks in ring order starting at rank 0
    trees: list                   # rank 0's channels: {"up", "down"}
    max_tree_pattern: int
    cpu_arch: int
    cpu_vendor: int
    min_cc: int
    max_cc: int
    tuning: dict                  # the inputs of ncclTopoTuneModel (tuning.CommTuning's fields)
    notes: list = field(default_factory=list)
    settings: Optional[NcclSettings] = None
    xml: str = ""
    domains: list = field(default_factory=list)   # RankState of each NIC-joined domain, in domain order
    mnnvl: int = 0                # comm->MNNVL: the ranks of an NVLink clique of several hosts are one system
    clique_size: int = 0          # ranks per MNNVL clique (the ranks searched together); 0 without MNNVL
    nvl_domain_size: int = 0      # nvlDomainSize: ranks sharing rank 0's cluster UUID
    clique_id: int = 0
    _tables: Any = field(default=None, repr=False, compare=False)

    @property
    def tables(self):
        """tuning.TuneTables: ncclTopoTuneModel's tables, computed on first use (the ring and tree
        answers do not need them)."""
        if self._tables is None:
            from gpucomm.planners.nccl.tuning import CommTuning, tune_model

            self._tables = tune_model(CommTuning(**self.tuning))
        return self._tables

    # ---- views
    def net_name(self, net_id: int) -> str:
        """A NET's name; in a system of several hosts (MNNVL), ``@`` and its host's index in the clique."""
        sys = self.rank0.topo.sys
        for n in sys.nodes[NET]:
            if n.id == net_id:
                return self.machine.props(n.dev).name + (f"@{n.id >> 56}" if sys.n_hosts > 1 else "")
        return f"NET?{net_id:x}"

    def p2p_nets(self) -> list:
        """Names of the NETs the GPUs of rank 0's system send point-to-point traffic through (each
        GPU's local NETs channel by channel, ncclTopoGetLocalNet, as search.cc ncclTopoGetNetDev picks
        them for a peer on another node), in first-use order; a NET of tray h of an MNNVL clique is
        ``name@h``."""
        t = self.rank0.topo
        sys = t.sys
        out: dict = {}
        for gpu in sys.nodes[GPU]:
            for n in t.channel_nets(gpu.rank):
                out.setdefault(self.net_name(sys.nodes[NET][n].id), None)
        return list(out)

    def gpu_of_rank(self, rank: int):
        return self.local[rank % len(self.local)]

    def graph_dict(self, g: TGraph) -> dict:
        """The graph as ncclsim prints it (``--json`` ``graphs``)."""
        sys = self.rank0.topo.sys
        ng = len(sys.nodes[GPU])
        chans = []
        for c in range(g.n_channels):
            item = {"ranks": list(g.intra[c * ng:c * ng + ng])}
            if sys.inter:
                item["nets"] = [self.net_name(g.inter[c * 2]), self.net_name(g.inter[c * 2 + 1])]
            chans.append(item)
        return {"pattern": PATTERN_NAMES.get(g.pattern, "?"), "nChannels": g.n_channels, "bwIntra": g.bw_intra,
                "bwInter": g.bw_inter, "totalBw": f32(g.n_channels * g.bw_intra),
                "typeIntra": PATH_NAMES[g.type_intra], "typeInter": PATH_NAMES[g.type_inter],
                "sameChannels": g.same_channels, "crossNic": g.cross_nic, "nHops": g.n_hops, "channels": chans}

    def paths_dict(self) -> dict:
        """GPU->GPU and GPU->NET paths of rank 0's system (ncclsim ``paths``)."""
        sys = self.rank0.topo.sys
        gg = []
        for gi in sys.nodes[GPU]:
            gg.append({"from": gi.rank, "to": [{"rank": gj.rank, "type": PATH_NAMES[p.type], "bw": p.bw,
                                                 "hops": p.count}
                                                for gj, p in zip(sys.nodes[GPU], gi.paths[GPU])]})
        gn = []
        for gi in sys.nodes[GPU]:
            if not sys.nodes[NET]:
                break
            gn.append({"from": gi.rank, "to": [{"net": self.net_name(n.id), "type": PATH_NAMES[p.type], "bw": p.bw}
                                                for n, p in zip(sys.nodes[NET], gi.paths[NET])]})
        return {"gpu_gpu": gg, "gpu_net": gn}

    def algo(self, coll: str, nbytes: int) -> dict:
        """NCCL's choice for one operation of ``nbytes`` (ncclGetAlgoInfo)."""
        from gpucomm.planners.nccl.tuning import algo_info

        return algo_info(self.tables, coll, nbytes)

    def to_ncclsim(self, sizes: Iterable[int] = (), colls: Iterable[str] = ("all_reduce",)) -> dict:
        """The same document ``ncclsim --json`` prints, for field-by-field comparison."""
        from gpucomm.planners.nccl.tuning import COLLS

        r0 = self.rank0
        sys = r0.topo.sys
        G = len(self.local)
        searched = self.clique_size if self.mnnvl else G
        out = {
            "nodes": self.nodes, "nRanks": self.n_ranks, "localRanks": G,
            "gpus": [{"rank": l, "host": l // G, "gpu": self.local[l % G].dev, "busId": self.local[l % G].bus,
                      "sm": self.local[l % G].sm} for l in range(searched)],
            "nets": [{"dev": n.dev, "name": self.net_name(n.id), "bw": n.bw, "gdr": n.gdr} for n in sys.nodes[NET]],
            "system": {"maxBw": sys.max_bw, "totalBw": sys.total_bw, "inter": sys.inter, "cpuArch": self.cpu_arch,
                       "cpuVendor": self.cpu_vendor},
            "paths": self.paths_dict(),
            "graphs": {"ring": self.graph_dict(r0.graphs["ring"]), "tree": self.graph_dict(r0.graphs["tree"])},
            "comm": {"nChannels": self.n_channels, "collChannels": self.coll_channels,
                     "nvlsSupport": self.nvls_support, "nvlsChannels": self.nvls_channels, "nNodes": self.n_nodes,
                     "rings": [list(r) for r in self.rings], "trees": [dict(t) for t in self.trees]},
        }
        if self.mnnvl:
            out["mnnvl"] = {"MNNVL": 1, "cliqueId": self.clique_id, "cliqueSize": self.clique_size,
                            "nvlDomainSize": self.nvl_domain_size, "hosts": self.clique_size // G}
        if r0.nvls_support:
            out["graphs"]["nvls"] = self.graph_dict(r0.graphs["nvls"])
        for coll in colls:
            key = "allreduce" if coll == "all_reduce" else coll.replace("_", "")
            rows = []
            for b in sizes:
                a = self.algo(coll, b)
                rows.append({"bytes": b, "algo": a["algo"], "proto": a["proto"], "nChannels": a["nChannels"],
                             "nWarps": a["nWarps"], "time_us": a["time_us"]})
            out[key] = rows
            if coll in COLLS:
                out.setdefault("tuning", {})[key] = self.tables.table(coll)
        return out


# --------------------------------------------------------------------------------------------
def _graph(id_: int, pattern: int, lo: int, hi: int, coll_net: int = 0) -> TGraph:
    g = TGraph(id_, pattern, lo, hi)
    g.coll_net = coll_net
    return g


_RANK_STATES: dict = {}   # (inputs of a rank's system and searches) -> RankState, oldest dropped first


def _rank_init(fused: X.Xml, rank: int, n_ranks: int, cc: int, s: NcclSettings,
               fresh: Optional[Topo] = None, host: int = 0) -> RankState:
    """initTransportsRank up to ncclTopoPreset for one local rank (a fresh system from the fused XML;
    ``fresh``: that system with its first paths already computed, untrimmed, taken over)."""
    if fresh is not None:
        topo = fresh
        sys = topo.sys
    else:
        sys = system_from_xml(fused, X.host_hash(host))
        topo = Topo(sys, s)
        topo.compute_paths()
    if topo.trim(rank, n_ranks):
        topo.compute_paths()
    # else: nothing was trimmed from a system whose paths are computed -- computing them again (as
    # initTransportsRank does) gives the same paths: they are a function of the nodes, links and settings
    topo.search_init()
    c0 = sys.nodes[CPU][0]
    nvls_support = 0
    if s.nvls_enable != 0 and len(sys.nodes[GPU]) >= 2:
        nvls_support = (1 if (cc >= 90 and sys.nodes[NVS]) else 0) if s.nvls_enable == 2 else 1
    ring = compute(topo, _graph(0, RING, 1, MAXCHANNELS // 2))
    tree = compute(topo, _graph(1, BALANCED_TREE, ring.n_channels, ring.n_channels))
    nvls = _graph(3, NVLS, 1, MAXCHANNELS)
    if nvls_support:
        compute(topo, nvls)
    graphs = {"ring": ring, "tree": tree, "nvls": nvls,
              "collnet_chain": _graph(2, TREE, ring.n_channels, ring.n_channels, 1),
              "collnet_direct": _graph(4, 6, 1, MAXCHANNELS, 1)}
    g = sys.rank_to_index(rank)
    count, _bw = topo.local_net_count_by_bw(g)
    min_net = topo.min_net_bw(rank)
    n_ch = min(tree.n_channels, ring.n_channels)
    topo_ranks, channels = _preset(sys, graphs, rank, n_ch)
    return RankState(topo, graphs, nvls_support, c0.arch, c0.vendor, count, min_net, topo.all_nvlink(), n_ch,
                     topo_ranks, channels)


def _preset(sys, graphs: dict, rank: int, n_ch: int) -> tuple:
    """``ncclTopoPreset``."""
    local = len(sys.nodes[GPU])
    tr = {"crossNicRing": graphs["ring"].cross_nic, "ringRecv": [0] * MAXCHANNELS, "ringSend": [0] * MAXCHANNELS,
          "ringPrev": [0] * MAXCHANNELS, "ringNext": [0] * MAXCHANNELS, "treeToParent": [0] * MAXCHANNELS,
          "treeToChild0": [0] * MAXCHANNELS, "treeToChild1": [0] * MAXCHANNELS, "nvlsHeads": []}
    channels = [{"up": 0, "down": [0, 0, 0]} for _ in range(MAXCHANNELS)]
    ring, tree = graphs["ring"], graphs["tree"]
    for c in range(n_ch):
        channels[c] = {"up": -1, "down": [-1, -1, -1]}
        ri = ring.intra[c * local:(c + 1) * local]
        ti = tree.intra[c * local:(c + 1) * local]
        # NCCL loops over the channel's positions; a rank holds at most one (the last one found wins)
        i = _last(ri, rank)
        if i >= 0:
            tr["ringRecv"][c] = ri[0]
            tr["ringSend"][c] = ri[local - 1]
            tr["ringPrev"][c] = -1 if i == 0 else ri[i - 1]
            tr["ringNext"][c] = -1 if i == local - 1 else ri[i + 1]
        i = _last(ti, rank)
        if i >= 0:
            c0 = 0 if tree.pattern == TREE else 1
            c1 = 1 if tree.pattern == SPLIT_TREE else 0
            tr["treeToParent"][c] = ti[0]
            tr["treeToChild0"][c] = ti[c0]
            tr["treeToChild1"][c] = ti[c1]
            channels[c]["up"] = -1 if i == 0 else ti[i - 1]
            channels[c]["down"][0] = -1 if i == local - 1 else ti[i + 1]
    for c in range(n_ch):
        channels[n_ch + c] = _copy_ch(channels[c])
    nv = graphs["nvls"]
    for c in range(nv.n_channels):
        h = nv.intra[c * local]
        if h not in tr["nvlsHeads"]:
            tr["nvlsHeads"].append(h)
    return tr, channels


def _last(xs: list, x: int) -> int:
    """The index of the last ``x`` in ``xs``, -1 if none."""
    if x not in xs:
        return -1
    return len(xs) - 1 - xs[::-1].index(x)


def _copy_ch(ch: dict) -> dict:
    """A channel's tree ends ({"up": int, "down": [int x 3]}), copied."""
    return {"up": ch["up"], "down": list(ch["down"])}


def _copy_tr(tr: dict) -> dict:
    """topoRanks (ints and lists of ints), copied."""
    return {k: list(v) if isinstance(v, list) else v for k, v in tr.items()}


class _Shifted:
    """A copy node's (or clique's) topoRanks: a searched rank's, every rank ``delta`` higher, each list
    shifted when first read (a communicator of 1440 ranks reads two lists of most of them)."""

    __slots__ = ("base", "delta", "lists")

    def __init__(self, base: dict, delta: int) -> None:
        self.base = base
        self.delta = delta
        self.lists: dict = {}

    def __getitem__(self, key: str):
        v = self.base[key]
        if not isinstance(v, list):
            return v
        got = self.lists.get(key)
        if got is None:
            d = self.delta
            got = self.lists[key] = [x if x < 0 else x + d for x in v]
        return got

    def items(self):
        return ((k, self[k]) for k in self.base)


def _shift(tr: dict, delta: int) -> _Shifted:
    return _Shifted(tr, delta)


def btree(n: int, rank: int) -> tuple:
    """``ncclGetBtree`` (trees.cc) -> (up, down0, down1, parentChildType)."""
    bit = 1
    while bit < n:
        if bit & rank:
            break
        bit <<= 1
    if rank == 0:
        return -1, -1, (bit >> 1) if n > 1 else -1, 0
    up = (rank ^ bit) | (bit << 1)
    if up >= n:
        up = rank ^ bit
    pct = 0 if rank < up else 1
    low = bit >> 1
    d0 = -1 if low == 0 else rank - low
    d1 = -1 if low == 0 else rank + low
    while d1 >= n:
        d1 = -1 if low == 0 else rank + low
        low >>= 1
    return up, d0, d1, pct


def dtree(n: int, rank: int) -> tuple:
    """``ncclGetDtree`` -> (s0, d0_0, d0_1, pct0, s1, d1_0, d1_1, pct1)."""
    s0, d00, d01, p0 = btree(n, rank)
    if n % 2 == 1:
        sh = (rank - 1 + n) % n
        u, d0, d1, p1 = btree(n, sh)
        s1 = -1 if u == -1 else (u + 1) % n
        d10 = -1 if d0 == -1 else (d0 + 1) % n
        d11 = -1 if d1 == -1 else (d1 + 1) % n
    else:
        u, d0, d1, p1 = btree(n, n - 1 - rank)
        s1 = -1 if u == -1 else n - 1 - u
        d10 = -1 if d0 == -1 else n - 1 - d0
        d11 = -1 if d1 == -1 else n - 1 - d1
    return s0, d00, d01, p0, s1, d10, d11, p1


def run(xml_text: str, gpus: Optional[list], nodes: int, s: NcclSettings, default_sm: int = 80,
        nic_speed_mbps: int = 100000, fabric: Optional[M.Fabric] = None) -> CommResult:
    """The whole communicator on ``nodes`` identical nodes (hosts) of the machine ``xml_text`` describes;
    ``gpus``: NVML indices of the local ranks in rank order (default: all, by index); ``fabric``: the
    GPUs' NVML fabric info per host (:mod:`gpucomm.planners.nccl.mnnvl`; default none).  With MNNVL on,
    the ranks of rank 0's clique (several hosts) build one fused system, and the other cliques are copies
    of it; otherwise each host is its own system and the other hosts are copies of host 0."""
    machine, local, xml = X.machine_gpus(xml_text, gpus, default_sm, nic_speed_mbps)
    G = len(local)
    NR = G * nodes
    infos = M.infos(fabric, G, NR, s) if fabric is not None else None
    clique = M.check(fabric, G, NR, 0, s, infos) if fabric is not None else None
    L = G
    if clique is not None and clique.mnnvl:
        L = len(clique.ranks)
        _check_symmetric(fabric, G, NR, L, s, infos)
    try:
        fkey = (xml_text, default_sm, nic_speed_mbps, tuple(g.dev for g in local), L, s.key())
        front = _FRONTS.get(fkey)
        t = None
        if front is None:
            fused = _fused(xml, machine, local, L, s)
            # Ranks of one domain see the same system (ncclTopoTrimSystem keeps the rank's domain);
            # NVLS support depends on the rank's GPU.
            probe = system_from_xml(fused, X.host_hash(0))
            t = Topo(probe, s)
            t.compute_paths()
            dom = t.domains()
            ranks_ = [g.rank for g in probe.nodes[GPU]]     # before the system is handed on (and trimmed)
            if len(_FRONTS) >= 16:
                _FRONTS.pop(next(iter(_FRONTS)))
            _FRONTS[fkey] = (machine, local, fused, dom, ranks_)
        else:
            # the same machine, GPUs, clique and settings as before: the same fused XML and domains
            machine, local, fused, dom, ranks_ = front
        states: dict = {}
        per_rank: list = []
        for l in range(L):
            sm = local[l % G].sm
            mine = next((dom[i] for i, r in enumerate(ranks_) if r == l), 0)
            key = (tuple(sorted(r for i, r in enumerate(ranks_) if dom[i] == mine)), sm >= 90)
            st = states.get(key)
            if st is None or st.topo_ranks is None:
                # a rank's system depends on the node count only through "are there ranks outside my
                # domain" (ncclTopoTrimSystem's inter): the searches of 2 and 512 nodes are the same
                inter = len(key[0]) != NR
                ckey = (xml_text, default_sm, nic_speed_mbps, tuple(g.dev for g in local), L, l, inter, sm, s.key())
                st = _RANK_STATES.get(ckey)
                if st is None:
                    # the first rank searched takes over the system just built for the domains (the
                    # same system_from_xml + compute_paths its own initialisation would start with)
                    st = _rank_init(fused, l, NR, sm, s, fresh=t, host=l // G)
                    t = None
                    if len(_RANK_STATES) >= 64:
                        _RANK_STATES.pop(next(iter(_RANK_STATES)))
                    _RANK_STATES[ckey] = st
                states[key] = st
                per_rank.append(st)
            else:
                topo = st.topo
                tr, chans = _preset(topo.sys, st.graphs, l, st.n_channels)
                count, _bw = topo.local_net_count_by_bw(topo.sys.rank_to_index(l))
                per_rank.append(RankState(topo, st.graphs, st.nvls_support, st.cpu_arch, st.cpu_vendor, count,
                                          topo.min_net_bw(l), st.all_nvlink, st.n_channels, tr, chans))
        res = _merge(per_rank, local, machine, nodes, s, xml_text, L)
        if clique is not None and clique.mnnvl:
            res.mnnvl = 1
            res.clique_size = L
            res.nvl_domain_size = clique.domain_size
            res.clique_id = clique.clique_id
        seen: set = set()
        for key, st in sorted(states.items(), key=lambda kv: min(kv[0][0])):
            if key[0] not in seen:
                seen.add(key[0])
                res.domains.append(st)
        return res
    except X.NcclFailure as e:
        raise NcclFailed(f"NCCL would fail to initialise: {e}") from None


_FRONTS: dict = {}   # (inputs of the fused XML) -> (machine, local GPUs, fused XML, domains, ranks), oldest out first


def _fused(xml: X.Xml, machine: X.Machine, local: list, L: int, s: NcclSettings) -> X.Xml:
    """ncclTopoGetSystem's XML work for the ``L`` ranks searched together (a host's, or an MNNVL clique's:
    ``L // len(local)`` hosts): every rank's XML, fused in rank order."""
    G = len(local)
    fused = X.fuse_ranks(xml, machine, local, s.merge_level, s.force_merge)
    if L > G:
        # the clique's other hosts: their ranks' XMLs are host 0's but for the host hash on every CPU and
        # the ranks on the GPUs, so NCCL's fusion appends each host's CPUs, fused as host 0's are
        fused = X.replicate_hosts(fused, L // G, G)
    return fused


def _check_symmetric(fabric: M.Fabric, G: int, NR: int, L: int, s: NcclSettings, infos: list) -> None:
    """The model's limit: rank 0's MNNVL clique is ranks 0..L-1 (whole hosts) and every other clique is the
    next L ranks (other cliques are copies of the first)."""
    ok = L % G == 0 and NR % L == 0
    for c in range(NR // L if ok else 0):
        got = M.check(fabric, G, NR, c * L, s, infos)
        if not got.mnnvl or got.ranks != tuple(range(c * L, (c + 1) * L)):
            ok = False
            break
    if not ok:
        raise InputError("MNNVL cliques that are not equal blocks of consecutive hosts are not modelled",
                         expected="nodes in consecutive groups of equal size per NVLink clique")


def _merge(per_rank: list, local: list, machine, nodes: int, s: NcclSettings, xml_text: str,
           L: Optional[int] = None) -> CommResult:
    """Rank 0's view after the all-gather (init.cc), ncclNvlsTuning, ncclTopoPostset; the tuning model's
    inputs (its tables are computed when first asked for: ``CommResult.tables``).  ``per_rank``: the ``L``
    ranks searched (a host, or an MNNVL clique); the others are copies of them, ranks shifted."""
    G = len(local)
    NR = G * nodes
    L = L or G
    ags = []
    for r in range(NR):
        st = per_rank[r % L]
        tr = st.topo_ranks if r < L else _shift(st.topo_ranks, (r // L) * L)
        ags.append((st, tr))
    r0 = per_rank[0]
    algos = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls", "tree")
    merged = {k: v.copy() for k, v in r0.graphs.items()}
    node_of: dict = {}
    first_ranks: list = []
    rank_to_node = []
    cpu_arch, cpu_vendor = r0.cpu_arch, r0.cpu_vendor
    for r, (st, tr) in enumerate(ags):
        fr = tr["ringRecv"][0]
        node = node_of.get(fr)
        if node is None:
            node = node_of[fr] = len(first_ranks)
            first_ranks.append(fr)
        rank_to_node.append(node)
        if cpu_arch != st.cpu_arch:
            cpu_arch = 4
        if cpu_vendor != st.cpu_vendor:
            cpu_vendor = 4
    n_nodes = len(first_ranks)
    local_ranks = [0] * n_nodes
    for n in rank_to_node:
        local_ranks[n] += 1
    max_tree = 0
    min_net_bw = r0.min_net_bw
    for st, _tr in ags:
        for a in algos:
            m, o = merged[a], st.graphs[a]
            m.n_channels = min(o.n_channels, m.n_channels)
            m.same_channels = min(o.same_channels, m.same_channels)
            m.bw_intra = min(o.bw_intra, m.bw_intra)
            m.bw_inter = min(o.bw_inter, m.bw_inter)
            m.type_intra = max(o.type_intra, m.type_intra)
            m.type_inter = max(o.type_inter, m.type_inter)
            m.cross_nic = max(o.cross_nic, m.cross_nic)
        max_tree = max(max_tree, st.graphs["tree"].pattern)
        min_net_bw = min(min_net_bw, st.min_net_bw)
    nvls_support = r0.nvls_support
    nvls_channels = 0
    if merged["nvls"].n_channels == 0:
        nvls_support = 0
    cc0 = local[0].sm
    ccs = [g.sm for g in local]
    min_cc, max_cc = min(ccs), max(ccs)
    if nvls_support:
        nvls_channels = _nvls_tuning(cc0, min_cc, n_nodes, min(local_ranks), min_net_bw, merged["nvls"].type_inter)
    n_orig = r0.n_channels
    n_ch = min(merged["tree"].n_channels, merged["ring"].n_channels)
    merged["tree"].n_channels = merged["ring"].n_channels = n_ch
    channels = [_copy_ch(c) for c in r0.channels]
    if n_ch < n_orig:
        for i in range(n_ch):
            channels[n_ch + i] = _copy_ch(channels[n_orig + i])
    n_ch, coll_ch, rings, nvls_channels = _postset(ags, first_ranks, rank_to_node, n_ch, NR, nodes, channels, merged,
                                                   min_cc, nvls_channels, s)
    trees = [{"up": channels[c]["up"], "down": list(channels[c]["down"])} for c in range(n_ch)]
    nvs_count = len(r0.topo.sys.nodes[NVS])
    tuning = dict(n_ranks=NR, n_nodes=n_nodes, n_channels=n_ch, nvls_channels=nvls_channels,
                  nvls_support=nvls_support, graphs=merged, max_tree_pattern=max_tree, cpu_arch=cpu_arch,
                  cpu_vendor=cpu_vendor, min_cc=min_cc, max_cc=max_cc, nvs_count=nvs_count,
                  local_ranks=min(local_ranks), max_local_ranks=max(local_ranks), settings=s)
    return CommResult(nodes=nodes, local=local, machine=machine, rank0=r0, graphs=merged, n_nodes=n_nodes,
                      n_ranks=NR, n_channels=n_ch, coll_channels=coll_ch, nvls_support=nvls_support,
                      nvls_channels=nvls_channels, rings=rings, trees=trees, max_tree_pattern=max_tree,
                      cpu_arch=cpu_arch, cpu_vendor=cpu_vendor, min_cc=min_cc, max_cc=max_cc, tuning=tuning,
                      settings=s, xml=xml_text)


def _nvls_tuning(cc: int, min_cc: int, n_nodes: int, ppn: int, nic_bw: float, path_type: int) -> int:
    """``ncclNvlsTuning`` (transport/nvls.cc): NVLS channels."""
    if cc >= 100:
        n = 32 if n_nodes > 1 else 24
    else:
        n = 16
    if min_cc >= 100 and n_nodes > 1:
        if n_nodes == 2 and nic_bw >= 48.0:
            n = 32
        elif nic_bw >= 96.0:
            n = 24 if ppn <= 8 else 32
        elif nic_bw >= 48.0:
            n = 24
    return max(1, min(MAXCHANNELS, n))


def _postset(ags: list, first_ranks: list, rank_to_node: list, n_ch: int, NR: int, nodes: int, channels: list,
             graphs: dict, min_cc: int, nvls_channels: int, s: NcclSettings) -> tuple:
    """``ncclTopoPostset`` for rank 0 -> (nChannels, collChannels, rings, nvlsChannels)."""
    nn = len(first_ranks)
    trs = [tr for _st, tr in ags]       # read only, except the swaps below (on a copy)
    for r in range(NR):
        if trs[r]["crossNicRing"] == 2 and n_ch % 2 == 0 and rank_to_node[r] % 2 == 1:
            trs[r] = _copy_tr(trs[r])
            for c in range(0, n_ch, 2):
                for k in ("ringRecv", "ringSend", "ringPrev", "ringNext"):
                    trs[r][k][c], trs[r][k][c ^ 1] = trs[r][k][c ^ 1], trs[r][k][c]
    prev = [[0] * NR for _ in range(MAXCHANNELS)]
    nxt = [[0] * NR for _ in range(MAXCHANNELS)]
    recv = [[trs[first_ranks[n]]["ringRecv"][c] for n in range(nn)] for c in range(n_ch)]
    send = [[trs[first_ranks[n]]["ringSend"][c] for n in range(nn)] for c in range(n_ch)]
    tp = [[trs[first_ranks[n]]["treeToParent"][c] for n in range(nn)] for c in range(n_ch)]
    tc0 = [[trs[first_ranks[n]]["treeToChild0"][c] for n in range(nn)] for c in range(n_ch)]
    tc1 = [[trs[first_ranks[n]]["treeToChild1"][c] for n in range(nn)] for c in range(n_ch)]
    for r in range(NR):
        tr = trs[r]
        if isinstance(tr, _Shifted):        # a copy's: shifted here, entry by entry
            d, pl, nl = tr.delta, tr.base["ringPrev"], tr.base["ringNext"]
            for c in range(n_ch):
                v, w = pl[c], nl[c]
                prev[c][r] = v if v < 0 else v + d
                nxt[c][r] = w if w < 0 else w + d
        else:
            pl, nl = tr["ringPrev"], tr["ringNext"]
            for c in range(n_ch):
                prev[c][r] = pl[c]
                nxt[c][r] = nl[c]
    min_heads = min(len(trs[first_ranks[n]]["nvlsHeads"]) for n in range(nn))
    for c in range(n_ch):
        for n in range(nn):
            prev[c][recv[c][n]] = send[c][(n - 1 + nn) % nn]
            nxt[c][send[c][n]] = recv[c][(n + 1) % nn]
    node = rank_to_node[0]
    t0u, t0d0, t0d1, t0ct, t1u, t1d0, t1d1, t1ct = dtree(nn, node)
    for c in range(n_ch):
        ch0, ch1 = channels[c], channels[c + n_ch]
        ttp, ttc0, ttc1 = tp[c], tc0[c], tc1[c]
        if ttp[node] == 0:
            if t0u != -1:
                ch0["up"] = (ttc0 if t0ct == 0 else ttc1)[t0u]
            if t1u != -1:
                ch1["up"] = (ttc0 if t1ct == 0 else ttc1)[t1u]
        if ttc0[node] == 0:
            _down(ch0, ttp, t0d0)
            _down(ch1, ttp, t1d0)
        if ttc1[node] == 0:
            _down(ch0, ttp, t0d1)
            _down(ch1, ttp, t1d1)
    for c in range(n_ch):
        prev[n_ch + c] = list(prev[c])
        nxt[n_ch + c] = list(nxt[c])
    n = min(MAXCHANNELS, n_ch * 2)
    if min_cc >= 90 and nn > 1 and graphs["ring"].bw_intra > 45.0 and n < 16:
        n = _copy_channels(channels, prev, nxt, n, 2 * n)
    max_n = MAXCHANNELS if s.max_nchannels == -2 else s.max_nchannels
    max_n = max(1, min(max_n, MAXCHANNELS))
    min_n = 0 if s.min_nchannels == -2 else max(0, min(s.min_nchannels, MAXCHANNELS))
    n = min(max_n, n, MAXCHANNELS)
    n = _copy_channels(channels, prev, nxt, n, max(min_n, 1))
    coll = n
    if min_heads == 0:
        nvls_channels = 0
    rings = []
    for c in range(n):
        cur = 0
        ring = []
        for _ in range(NR):
            ring.append(cur)
            cur = nxt[c][cur]
        if cur != 0:
            raise X.NcclFailure(f"Error : ring {c} does not loop back to start ({cur} != 0)")
        rings.append(ring)
    return n, coll, rings, nvls_channels


def _down(ch: dict, indexes: list, d: int) -> None:
    if d == -1:
        return
    for x in range(3):
        if ch["down"][x] < 0:
            ch["down"][x] = indexes[d]
            return
    raise X.NcclFailure("Internal error : tree already has 3 children")


def _copy_channels(channels: list, prev: list, nxt: list, start: int, end: int) -> int:
    c = start
    while c < end:
        prev[c] = list(prev[c - start])
        nxt[c] = list(nxt[c - start])
        channels[c] = _copy_ch(channels[c - start])
        c += 1
    return max(c, start)


# --------------------------------------------------------------------------------------------
# Entry points with caching
@functools.lru_cache(maxsize=64)
def _run_cached(xml_text: str, gpus: Optional[tuple], nodes: int, skey: tuple, s: NcclSettings,
                fabric: Optional[M.Fabric] = None) -> CommResult:
    return run(xml_text, list(gpus) if gpus is not None else None, nodes, s, fabric=fabric)


def nccl_comm(doc: Union[Topology, dict, str], nodes: int = 1, gpus: Optional[Iterable[int]] = None,
              settings: Optional[NcclSettings] = None, nvlink_domain: Optional[int] = None,
              fabric: Optional[M.Fabric] = None) -> CommResult:
    """NCCL's communicator on ``nodes`` identical copies of ``doc``'s node with the GPUs ``gpus``
    (indices, rank order; default all).  ``doc`` may also be an NCCL topology XML text (used as it is).

    ``nvlink_domain`` K: the nodes come in consecutive groups of K that share one NVLink domain (one
    MNNVL clique each: NCCL fuses a group's hosts into one system; groups are joined by the NICs).
    Default: from the GPUs' fabric info (``gpus[].fabric``) where the document has it -- every node is a
    copy, so all share the recorded clique (K = nodes), in NVLink domains no larger than the document's
    (``Topology.nvlink_domain()``: an IMEX capture's nodes; the largest equal split of the nodes that
    fits) -- else 1 (no fabric info: one system per node).
    A group of several nodes whose GPUs record no fabric info is taken to be one clique with its
    registration completed (as ``--nvlink-domain`` says).  Whether NCCL then runs MNNVL is NCCL's
    decision (NCCL_MNNVL_ENABLE, fabric states, cuMem): :mod:`gpucomm.planners.nccl.mnnvl`.  ``fabric``:
    every rank's fabric info given outright (:class:`~gpucomm.planners.nccl.mnnvl.Fabric`), instead.

    Cached per (XML, GPUs, nodes, settings, fabric).  Raises TopologyError (no NIC for several NVLink
    domains), InputError (unknown GPU, nodes not a multiple of K), NothingToDo (no GPU), NcclFailed
    (NCCL itself would fail)."""
    text, g, nodes, s, fabric = _comm_inputs(doc, nodes, gpus, settings, nvlink_domain, fabric)
    return _run_cached(text, g, int(nodes), s.key(), s, fabric)


def _comm_inputs(doc: Union[Topology, dict, str], nodes: int, gpus: Optional[Iterable[int]],
                 settings: Optional[NcclSettings], nvlink_domain: Optional[int],
                 fabric: Optional[M.Fabric]) -> tuple:
    """(pinned XML, GPUs, hosts, settings, fabric) of :func:`nccl_comm`: everything NCCL's
    initialisation reads before its search (no search runs here)."""
    s = settings if settings is not None else NcclSettings.from_env()
    recorded: Optional[tuple] = None
    hosts = 1
    domain_nodes: Optional[int] = None
    if not isinstance(doc, str):
        topo = Topology.of(doc)
        if topo.multi_host:
            # several hosts (NCCL's fused dump of an MNNVL clique): the nodes are copies of them in turn
            hosts = len(topo.hosts)
            recorded = _recorded_fabric_hosts(topo, gpus)
            topo = first_host(topo)
            nodes = nodes * hosts
    if nvlink_domain is not None and (nvlink_domain < 1 or nodes % nvlink_domain):
        raise InputError(f"{nodes} nodes do not split into NVLink domains of {nvlink_domain}",
                         expected="--nvlink-domain K >= 1 dividing --nodes")
    text, s = nccl_inputs(doc if isinstance(doc, str) else topo, nodes, s, nvlink_domain=nvlink_domain or 1)
    if not isinstance(doc, str):
        if hosts == 1:
            one = _recorded_fabric(topo.gpus, gpus)
            recorded = (one,) if one is not None else None
            if recorded is not None and nvlink_domain is None:
                domain_nodes = topo.nvlink_domain().nodes
    g = distinct_gpus(gpus)
    if fabric is None:
        # a document of several hosts without fabric info is NCCL's fused dump: its hosts were one clique
        k = nvlink_domain if nvlink_domain is not None else (hosts if hosts > 1 and recorded is None else None)
        if k is None and domain_nodes:
            # copies of a tray whose NVLink domain has domain_nodes trays (an IMEX capture says so): the
            # nodes fill domains of that size, or split into equal ones no larger
            k = M.equal_domains(nodes, domain_nodes)
        fabric = _fabric(recorded, int(nodes), k, len(g) if g is not None else None, text)
    return text, g, nodes, s, fabric


@dataclass(frozen=True)
class TrayLayout:
    """How a job's trays (hosts) make NCCL's systems: ``hosts`` trays fused into one system (NCCL's MNNVL
    clique; 1 without MNNVL), ``systems`` of them joined by the NICs.  ``tray`` is the view of one tray
    (the first host of a document of several), ``gpus`` the GPU indices used on every tray (None: all),
    ``per_tray`` their count; ``copies`` the nodes asked for (copies of the document), ``trays`` =
    copies x the document's hosts; ``nvlink_domain`` the trays per NVLink domain NCCL was given
    (asked, or the default) and ``note`` why it is what it is."""

    tray: Topology
    gpus: Optional[tuple]
    per_tray: int
    copies: int
    trays: int
    hosts: int
    nvlink_domain: int
    mnnvl: bool
    note: str

    @property
    def systems(self) -> int:
        return self.trays // self.hosts

    @property
    def ranks(self) -> int:
        return self.trays * self.per_tray

    def tray_gpu_index(self, host: int, local: int) -> int:
        """The job's index of a GPU: host ``host``'s GPU of index ``local``, host by host (a tray's GPUs
        numbered from 0, the next host's after them), as a document of several hosts numbers them."""
        return host * len(self.tray.gpus) + local


def tray_layout(doc: Union[Topology, dict], nodes: int = 1, gpus: Optional[Iterable[int]] = None,
                settings: Optional[NcclSettings] = None, nvlink_domain: Optional[int] = None, *,
                tray_gpus: bool = False) -> TrayLayout:
    """The :class:`TrayLayout` of ``nodes`` copies of ``doc`` (a tray, or a document of several hosts:
    its GPU indices ``gpus`` are then the document's, the same GPUs of every host): NCCL's decision whether
    and which trays it fuses (init.cc / mnnvl.cc, :func:`gpucomm.planners.nccl.mnnvl.check`), without
    its search.  ``nvlink_domain``: trays per NVLink domain (default: :func:`nccl_comm`'s); ``tray_gpus``:
    ``gpus`` are indices on one tray (host) already.  Raises
    InputError (unknown GPU, GPUs not alike on every host, K not dividing the trays), NothingToDo,
    TopologyError (several NVLink domains and no NIC)."""
    topo = Topology.of(doc)
    s = settings if settings is not None else NcclSettings.from_env()
    local = distinct_gpus(gpus) if tray_gpus else host_gpus(topo, gpus)
    tray = first_host(topo)
    if local is not None:
        have = {x.index for x in tray.gpus}
        for x in local:
            if x not in have:
                raise InputError(f"no GPU {x} in topology (has {format_cpulist(sorted(have)) or 'none'})")
    text, g, trays, s, fabric = _comm_inputs(topo, nodes, local, s, nvlink_domain, None)
    G = len(g) if g is not None else len(tray.gpus)
    k = nvlink_domain
    hosts, mnnvl, note = 1, False, "one system per node (no multi-node NVLink)"
    if fabric is not None:
        k = k or _clique_hosts(fabric, G)
        infos = M.infos(fabric, G, G * trays, s)
        cl = M.check(fabric, G, G * trays, 0, s, infos)
        if cl.mnnvl:
            hosts, mnnvl = len(cl.ranks) // G, True
            note = (f"NCCL fuses the {hosts} trays of an NVLink clique into one system (MNNVL)" if hosts > 1 else
                    "every tray its own NVLink domain: the trays are joined by their NICs")
        elif trays == 1:
            note = "one tray"
        else:
            note = ("NCCL keeps every tray its own system (MNNVL off: NCCL_MNNVL_ENABLE, the fabric state, "
                    "cuMem or NCCL_P2P_LEVEL; the trays are joined by their NICs)")
    return TrayLayout(tray, g, G, nodes, trays, hosts, k or 1, mnnvl, note)


def _clique_hosts(fabric: M.Fabric, per_host: int) -> int:
    """Hosts in the first NVLink domain of ``fabric`` (the hosts sharing host 0's cluster UUID)."""
    first = fabric.hosts[0][0].uuid if fabric.hosts and fabric.hosts[0] else None
    n = 0
    for h in fabric.hosts:
        if not h or h[0].uuid != first:
            break
        n += 1
    return max(1, n)


def _recorded_fabric(host_gpus: list, gpus: Optional[Iterable[int]]) -> Optional[tuple]:
    """The NVML fabric info of the ranks' GPUs (``host_gpus``: one host's GPU views, indexed by their
    index on the host; ``gpus``: the ranks' indices) when every one of them records it, else None."""
    by_index = {x.index: x for x in host_gpus}
    order = list(gpus) if gpus is not None else sorted(by_index)
    out = []
    for i in order:
        x = by_index.get(i)
        f = M.gpu_fabric(x.fabric) if x is not None else None
        if f is None:
            return None
        out.append(f)
    return tuple(out)


def _recorded_fabric_hosts(topo: Topology, gpus: Optional[Iterable[int]]) -> Optional[tuple]:
    """:func:`_recorded_fabric` of every host of a document of several (GPUs by their index on the host)."""
    out = []
    for h in topo.hosts:
        on = [dataclasses.replace(x, index=x.local_index if x.local_index is not None else x.index)
              for x in topo.gpus_on(h.id)]
        one = _recorded_fabric(on, gpus)
        if one is None:
            return None
        out.append(one)
    return tuple(out)


def _fabric(recorded: Optional[tuple], nodes: int, k: Optional[int], n_gpus: Optional[int],
            text: str) -> Optional[M.Fabric]:
    """The fabric info of every rank's GPU (see :func:`nccl_comm`), None for none anywhere."""
    if recorded is not None:
        return M.of_gpus(recorded, nodes, k or nodes)
    if k is None or k == 1:
        return None
    per_host = n_gpus if n_gpus is not None else len(X.Machine(X.parse(text)).gpus)
    return M.grouped(nodes, per_host, k)


def label_index(label: Any) -> Optional[int]:
    """The GPU index of one of :func:`reference_dict`'s labels (``GPU3`` -> 3); None for anything else
    (a NIC, a malformed label)."""
    t = str(label)
    return int(t[3:]) if t.startswith("GPU") and t[3:].isdigit() and len(t) <= 12 else None


def reference_dict(res: CommResult, tree: bool = True) -> dict:
    """The summary :func:`gpucomm.planners.nccl.comm.nccl_reference` returns."""
    r0 = res.rank0
    sys = r0.topo.sys
    ring = r0.graphs["ring"]

    def channels(g: TGraph, sys_) -> list:
        ng = len(sys_.nodes[GPU])
        # a system of several hosts (an MNNVL clique): GPUs by index and host, as ring0 names them
        lab = {x.rank: f"GPU{x.dev}" + (f"@{x.id >> 56}" if sys_.n_hosts > 1 else "") for x in sys_.nodes[GPU]}
        chans = []
        for c in range(g.n_channels):
            order = [lab.get(x, f"rank{x}") for x in g.intra[c * ng:(c + 1) * ng]]
            nets = [res.net_name(g.inter[c * 2]), res.net_name(g.inter[c * 2 + 1])] if sys_.inter else []
            chans.append({"gpus": order, "nets": nets})
        return chans

    def gd(g: TGraph) -> dict:
        chans = channels(g, sys)
        return {"pattern": PATTERN_NAMES.get(g.pattern, "?").lower(), "search_channels": g.n_channels,
                "bw_intra": round(g.bw_intra, 4), "bw_inter": round(g.bw_inter, 4),
                "type_intra": PATH_NAMES[g.type_intra], "type_inter": PATH_NAMES[g.type_inter] if sys.inter else None,
                "cross_nic": g.cross_nic, "fallback": g.n_channels == 1 and abs(g.bw_intra - 0.1) < 1e-6,
                "channels": chans}

    rd = gd(ring)
    bw = ring.bw_intra if res.n_nodes <= 2 else ring.bw_inter
    ring0 = [f"GPU{res.gpu_of_rank(r).dev}" + (f"@{r // len(res.local)}" if res.nodes > 1 else "")
             for r in (res.rings[0] if res.rings else [])]
    out = {
        "pattern": "ring", "channels": res.n_channels, "search_channels": ring.n_channels,
        "bw_intra": rd["bw_intra"], "bw_inter": rd["bw_inter"], "type_intra": rd["type_intra"],
        "type_inter": rd["type_inter"], "total_bw": round(ring.n_channels * bw, 4),
        "max_bw": round(sys.max_bw, 4), "sys_total_bw": round(sys.total_bw, 4), "cc_min": res.min_cc,
        "nodes": res.nodes, "nccl_nodes": res.n_nodes, "gpus": [f"GPU{g.dev}" for g in res.local],
        "rings": rd["channels"], "ring0": ring0, "fallback": rd["fallback"],
        # sameChannels of the ring graph ncclTopoTuneModel reads (merged over the ranks): a ring
        # broadcast/reduce pays one step of latency with it, one per rank without
        "same_channels": bool(res.graphs["ring"].same_channels),
        "tree": gd(r0.graphs["tree"]) if tree else None,
        "nvls": ({"channels": res.nvls_channels, "search_channels": r0.graphs["nvls"].n_channels,
                  "bw_intra": round(r0.graphs["nvls"].bw_intra, 4), "bw_inter": round(r0.graphs["nvls"].bw_inter, 4)}
                 if res.nvls_support else None),
        "settings": (res.settings.changed() if res.settings else {}),
    }
    if len(res.domains) > 1:
        # a node NCCL splits into NIC-joined domains: every domain's own ring channels (NET to NET),
        # rank 0's domain first; NCCL's ring joins channel c of each domain in domain order
        out["domain_rings"] = [channels(st.graphs["ring"], st.topo.sys) for st in res.domains]
    return out


def nccl_reference(doc: Union[Topology, dict, str], nodes: int = 1, gpus: Optional[Iterable[int]] = None, *,
                   cross_nic: Optional[int] = None, tree: bool = True, settings: Optional[NcclSettings] = None,
                   nvlink_domain: Optional[int] = None) -> dict:
    """What NCCL 2.30.7 decides on this topology (stable interface, used by the cost model, our ring
    and tree searches and the CLI): :func:`nccl_comm` summarised (:func:`reference_dict`).

    ``doc``: topology document or view; ``nodes``: identical nodes; ``gpus``: GPU indices of the
    communicator on each node (default all); ``cross_nic``: NCCL_CROSS_NIC (default: the settings'
    value, from the environment); ``settings``: :class:`gpucomm.planners.nccl.settings.NcclSettings`;
    ``nvlink_domain``: nodes per NVLink domain (MNNVL clique; see :func:`nccl_comm`).  Returns::

        {"channels": nChannels after ncclTopoPostset, "search_channels": ring graph channels,
         "bw_intra", "bw_inter": GB/s per ring channel, "type_intra", "type_inter", "pattern": "ring",
         "total_bw": search_channels x (bw_intra if NCCL's node count <= 2 else bw_inter) -- NCCL's ring busBw,
         "max_bw", "sys_total_bw": ncclTopoSearchInit values, "cc_min", "nodes", "nccl_nodes" (nNodes as
         NCCL counts them: a node split into NIC-joined domains counts several), "gpus": [labels],
         "rings": [{"gpus": [...], "nets": [in, out]}], "ring0": the GPU order of ring 0 after setup,
         "tree": {same keys for the tree graph} | None, "nvls": {channels, bw_intra, bw_inter} | None,
         "fallback": bool, "settings": the NCCL_* values used,
         "domain_rings": [[{"gpus", "nets"}] per domain] -- only where NCCL splits the node into
         NIC-joined domains: each domain's ring channels, NET to NET, in domain order}
    Raises TopologyError (no NICs for nodes > 1), InputError (unknown GPU), PlanInfeasible."""
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        raise PlanInfeasible(f"--nodes must be >= 1 (got {nodes})")
    s = settings if settings is not None else NcclSettings.from_env()
    if cross_nic is not None and cross_nic != s.cross_nic:
        s = s.replace(cross_nic=cross_nic)
    res = nccl_comm(doc, nodes=nodes, gpus=gpus, settings=s, nvlink_domain=nvlink_domain)
    return reference_dict(res, tree=tree)



__all__ = ["nccl_comm", "nccl_reference", "tray_layout", "TrayLayout", "run", "pinned_xml", "CommResult", "reference_dict", "NcclFailed",
           "dtree", "btree"]
