"""NCCL's tuning model (src/graph/tuning.cc ``ncclTopoTuneModel``, ``ncclTopoGetAlgoTime``;
enqueue.cc ``ncclGetAlgoInfo``): per collective, algorithm and protocol, the latency and bandwidth
NCCL assigns from its graphs, and the choice it makes per message size.

:class:`CommGraph` is what the model reads -- NCCL's ring/tree/NVLS graphs (channels, per-channel
bandwidths, path types), the compute capability and the CPU -- plus the achievable bus bandwidths
of :mod:`gpucomm.planners.collectives.cost`, which :func:`tuning_table` uses when asked
(``achievable=True``) for the time once NCCL's own table has chosen the algorithm.
Constants are NCCL v2.30.7's (tuning.cc:148-212 defaults, tuning.cc:243-655 the model).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

from gpucomm.probes.errors import InputError

from gpucomm.planners.nccl.names import BALANCED_TREE, PATH_NAMES, PATTERN_NAMES, TREE

ALGOS = ("tree", "ring", "nvls", "nvls_tree", "pat")   # NCCL order minus CollNet (tuning.cc ncclTopoTuneModel)

PROTOS = ("LL", "LL128", "Simple")

USER_ALGOS = ("auto", "ring", "tree", "nvls", "pat")

# NCCL constants.  All from NCCL v2.30.7 src/graph/tuning.cc
# ("defaults tuning.cc:148-212", "ncclTopoTuneModel tuning.cc:243-618"); indices [algo][proto]
# with algos (tree, ring, nvls, nvls_tree, pat) and protos (LL, LL128, Simple).
BASE_LAT = {  # baseLatencies, us (tuning.cc:148-212)
    "tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4),
    "nvls": (0.0, 0.0, 0.0), "nvls_tree": (0.0, 0.0, 0.0), "pat": (8.0, 8.0, 8.0),
}

HW_NVLINK, HW_PCI, HW_NET = 0, 1, 2

HW_LAT = {  # hwLatencies[hw][algo][proto], us (tuning.cc:148-212)
    HW_NVLINK: {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "nvls": (0.0, 0.0, 25.0),
                "nvls_tree": (0.0, 0.0, 25.0), "pat": (0.0, 0.0, 4.0)},
    HW_PCI: {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7), "nvls": (0.0, 0.0, 0.0),
             "nvls_tree": (0.0, 0.0, 0.0), "pat": (0.0, 0.0, 4.0)},
    HW_NET: {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0), "nvls": (0.0, 0.0, 18.0),
             "nvls_tree": (0.0, 0.0, 20.9), "pat": (0.0, 0.0, 14.0)},
}

# [compcap index: Volta 0, Ampere 1, Hopper 2, Blackwell 3][index2: N1, N2, N4+] (tuning.cc:148-212)
LL_MAX_BWS = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))

PER_CH_MAX_RING_LL128_BWS = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7), (40.0, 40.0, 40.0))

PER_CH_MAX_TREE_LL128_BWS = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))

PER_CH_MAX_TREE_BWS = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))

PER_CH_MAX_NVLS_TREE_BWS = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5), (0.0, 96.0, 80.0))

NVLS_EFFICIENCY = (0.0, 0.0, 0.85, 0.74)  # nvlsEfficiency (src/graph/tuning.cc nvlsEfficiency; src/tuning/nvls.cc in 2.29+)

# Network post overhead per ring step, us (getNetOverhead, tuning.cc ncclTopoTuneModel): Intel 1.0, AMD 2.0, other 1.0;
# x3 for Simple.
NET_OVERHEAD_US = {"intel": 1.0, "amd": 2.0}

# treeCorrectionFactor[proto][log2(nBytes>>6)], 64 B .. 256 MiB (tuning.cc:623-627;
# values from NVIDIA/nccl src/graph/tuning.cc, unchanged 2.19-2.30).
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
)

# Ring/Simple AllReduce on several nodes: latency x1.9 before Ampere, x1.4 from Ampere on, when
# nBytes/(nChannels*nRanks) >= 64 ("plateau effect", ncclTopoGetAlgoTime, tuning.cc:630-655).
RING_PLATEAU = (1.9, 1.4)

PATH_ORDER = PATH_NAMES

def compcap_index(cc: int) -> int:
    """Volta 0 / Ampere 1 / Hopper 2 / Blackwell 3 by minimum compute capability (tuning.cc ncclTopoTuneModel)."""
    return 3 if cc >= 100 else 2 if cc >= 90 else 1 if cc >= 80 else 0


def path_rank(t: Optional[str]) -> int:
    try:
        return PATH_ORDER.index((t or "SYS").upper())
    except ValueError:
        return PATH_ORDER.index("SYS")

@dataclass(frozen=True)
class CommGraph:
    """Graph summary the cost model runs on (one communicator).

    channels/bw_intra/bw_inter/type_*: NCCL's ring graph (``Pattern 4, nChannels N, bw intra/inter,
    type intra/inter``, before connect.cc's channel doubling).  tree_*/nvls_*: the tree and NVLS
    graphs (tree defaults to the ring graph, as NCCL searches it with min=max=ring.nChannels).
    ring_bus_bw/tree_bus_bw/nvls_bus_bw: achievable bus bandwidth (GB/s) used for the time once the
    algorithm is chosen (None -> NCCL's ``nChannels * bw``).  gpu_bw: per-GPU injection bandwidth
    to its node peers (all_to_all); p2p_bw: neighbour bandwidth (send_recv); node_net_bw: network
    bandwidth per node (GB/s) through the NICs NCCL's rings use; p2p_net_bw: the same through the NICs its
    point-to-point channels use (ncclTopoGetLocalNet, all_to_all; None: node_net_bw); nic_bw: one NIC (GB/s).  nccl_nodes: the nodes NCCL's tuning model
    counts where it splits a node into NIC-joined domains (ncclTopoCheckNet; None: ``n_nodes``).
    ll128_c2c: NCCL_LL128_C2C as the graph was built (the environment's) or as a calibration profile
    found its runs (:func:`ll128_default`).  nccl_tuning: what NCCL's ncclTopoTuneModel reads on this
    communicator (:class:`CommTuning`'s fields, from :func:`gpucomm.planners.nccl.comm.nccl_comm`), so
    that :func:`nccl_choice` is NCCL's own decision; None for a summary built by hand."""

    n_ranks: int
    n_nodes: int
    gpus_per_node: int
    channels: int
    bw_intra: float
    bw_inter: float
    type_intra: str = "NVL"
    type_inter: str = "PIX"
    cc: int = 80
    nvls: bool = False
    cpu_vendor: Optional[str] = None
    cpu_arch: str = "x86"
    cc_max: Optional[int] = None
    same_channels: bool = True
    latency_inter: float = 0.0
    tree_channels: Optional[int] = None
    tree_bw_intra: Optional[float] = None
    tree_bw_inter: Optional[float] = None
    tree_pattern: str = PATTERN_NAMES[BALANCED_TREE]
    nvls_channels: int = 0
    nvls_bw_intra: float = 0.0
    nvls_bw_inter: float = 0.0
    ring_bus_bw: Optional[float] = None
    tree_bus_bw: Optional[float] = None
    nvls_bus_bw: Optional[float] = None
    gpu_bw: Optional[float] = None
    p2p_bw: Optional[float] = None
    node_net_bw: Optional[float] = None
    nic_bw: Optional[float] = None
    p2p_net_bw: Optional[float] = None   # network per node for point-to-point (all_to_all): the NICs NCCL's
                                         # p2p channels use (None: node_net_bw)
    notes: tuple = field(default_factory=tuple)
    ll128_c2c: bool = True
    nccl_nodes: Optional[int] = None
    nccl_tuning: Optional[dict] = field(default=None, compare=False, repr=False)
    trays_per_node: int = 1     # hosts (trays) NCCL fuses into each node: an MNNVL clique (1: none)

    def __post_init__(self):
        for name in ("n_ranks", "n_nodes", "gpus_per_node", "channels"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InputError(f"graph summary: {name} must be a positive integer, got {v!r}")
        if self.n_ranks != self.n_nodes * self.gpus_per_node:
            raise InputError(f"graph summary: n_ranks {self.n_ranks} != n_nodes {self.n_nodes} x "
                             f"gpus_per_node {self.gpus_per_node}")
        for name in ("bw_intra", "bw_inter"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise InputError(f"graph summary: {name} must be a positive number of GB/s, got {v!r}")

    # ---- derived views
    @property
    def tune_nodes(self) -> int:
        """The node count ncclTopoTuneModel reads (NIC-joined domains count as nodes)."""
        return self.nccl_nodes or self.n_nodes

    @property
    def ppn(self) -> float:
        return self.n_ranks / self.tune_nodes

    def graph(self, algo: str) -> tuple[int, float, float]:
        """(nChannels, bwIntra, bwInter) of the graph NCCL uses for ``algo``."""
        if algo == "tree" or algo == "pat":
            return (self.tree_channels or self.channels, self.tree_bw_intra or self.bw_intra,
                    self.tree_bw_inter or self.bw_inter)
        if algo in ("nvls", "nvls_tree"):
            return (self.nvls_channels, self.nvls_bw_intra, self.nvls_bw_inter)
        return (self.channels, self.bw_intra, self.bw_inter)

@dataclass(frozen=True)
class Cell:
    """One entry of NCCL's tuning table: latency (us) and algorithm bandwidth (GB/s, 0 = disabled)."""

    lat: float
    bw: float

def ll128_default(type_inter: int, type_intra: int, min_cc: int, max_cc: int, ll128_c2c: bool = True) -> bool:
    """Whether NCCL 2.30.7 enables LL128 by default on a graph (tuning.cc ncclTopoTuneModel, the
    ``protoEnable == 2`` branch), path types as :data:`PATH_ORDER` ranks: the inter-node path at most
    PXN on sm>=90 with NCCL_LL128_C2C (default 1), at most PXB otherwise; the intra-node path at most
    NVB; compute capabilities equal (or all >= 90) and >= 70.

    NCCL before 2.27 had no P2C path: a GPU that reaches its NIC through the CPU's C2C link (GH200,
    GB200) was PHB to it, above either limit, so those versions ran no LL128 across such nodes --
    what ``ll128_c2c=False`` (NCCL_LL128_C2C=0) gives on them.

    >>> ll128_default(PATH_ORDER.index("P2C"), PATH_ORDER.index("NVL"), 90, 90)
    True
    >>> ll128_default(PATH_ORDER.index("P2C"), PATH_ORDER.index("NVL"), 90, 90, ll128_c2c=False)
    False
    """
    limit = PATH_ORDER.index("PXN" if ll128_c2c and min_cc >= 90 else "PXB")
    return (type_inter <= limit and type_intra <= PATH_ORDER.index("NVB")
            and (min_cc == max_cc or min_cc >= 90) and min_cc >= 70)


P2C_SINCE = 22700
"""NCCL_VERSION_CODE of NCCL 2.27.0, the first with the P2C path type (and LL128 over it)."""


def ll128_c2c_by_version(code: Optional[int]) -> Optional[bool]:
    """What an NCCL of NCCL_VERSION_CODE ``code`` does across nodes whose GPUs reach their NICs over
    C2C (:func:`ll128_default`'s ``ll128_c2c``): LL128 from 2.27 on, none before; None when unknown.

    >>> ll128_c2c_by_version(22304), ll128_c2c_by_version(22902), ll128_c2c_by_version(None)
    (False, True, None)
    """
    if code is None:
        return None
    return code >= P2C_SINCE


def _ll128_enabled(g: CommGraph) -> bool:
    """:func:`ll128_default` on the ring graph of ``g`` (one node: no inter-node path)."""
    inter = path_rank(g.type_inter) if g.tune_nodes > 1 else 0
    cc_max = g.cc_max if g.cc_max is not None else g.cc
    return ll128_default(inter, path_rank(g.type_intra), min(g.cc, cc_max), max(g.cc, cc_max), g.ll128_c2c)

def _hw_intra(type_intra: str) -> int:
    return HW_NVLINK if (type_intra or "").upper() == "NVL" else HW_PCI

def tuning_table(g: CommGraph, collective: str, achievable: bool = False) -> dict:
    """NCCL's ``comm->latencies/bandwidths[coll][algo][proto]`` for one collective.

    Returns {(algo, proto): Cell}.  With ``achievable=True`` the bus bandwidth each algorithm starts
    from is the calibrated one (``ring_bus_bw`` ...) instead of ``nChannels * bw``; every refinement
    (protocol factors, per-channel caps, busBw->algBw ratio) is NCCL's in both cases."""
    coll = collective
    if coll not in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"):
        raise InputError(f"{coll} is not tuned by NCCL's model", expected="all_reduce, all_gather, "
                         "reduce_scatter, broadcast, reduce")
    n, nn = g.n_ranks, g.tune_nodes
    ci = compcap_index(g.cc)
    index2 = nn - 1 if nn <= 2 else 2
    index1 = ci if nn == 1 else (1 if (g.cpu_vendor or "").lower() == "amd" else 0)
    ll_max = LL_MAX_BWS[index1][index2]
    per_tree = PER_CH_MAX_TREE_BWS[ci][index2]
    per_ring_ll128 = PER_CH_MAX_RING_LL128_BWS[ci][index2]
    per_tree_ll128 = PER_CH_MAX_TREE_LL128_BWS[ci][index2]
    per_nvls_tree = PER_CH_MAX_NVLS_TREE_BWS[ci][index2]
    ppn = g.ppn
    nsteps = 2 * (n - 1) if coll == "all_reduce" else (n - 1) if coll in ("all_gather", "reduce_scatter") else n
    ll128 = _ll128_enabled(g)
    out: dict = {}
    for a in ALGOS:
        # Which algorithms implement which collective (tuning.cc loop guards / model inits).
        if coll in ("broadcast", "reduce") and a != "ring":
            continue
        if coll in ("all_gather", "reduce_scatter") and a not in ("ring", "nvls", "pat"):
            continue
        if coll == "all_reduce" and a == "pat":
            continue
        nch, bw_intra, bw_inter = g.graph(a)
        for pi, p in enumerate(PROTOS):
            if a in ("nvls", "nvls_tree", "pat") and p != "Simple":
                continue
            if p == "LL128" and not ll128:
                continue
            bus = _bus_bw(g, coll, a, pi, nch, bw_intra, bw_inter, achievable, ll_max, per_tree,
                          per_ring_ll128, per_tree_ll128, per_nvls_tree, ppn, ci)
            if bus <= 0:
                continue
            if a == "ring" or a in ("nvls", "nvls_tree"):
                algbw = bus * n / nsteps
            elif a == "pat":
                algbw = bus  # stored directly (src/tuning/pat.cc)
            else:
                algbw = bus * 0.5
            out[(a, p)] = Cell(_latency(g, coll, a, pi, nsteps), algbw)
    return out

def _bus_bw(g, coll, a, pi, nch, bw_intra, bw_inter, achievable, ll_max, per_tree, per_ring_ll128,
            per_tree_ll128, per_nvls_tree, ppn, ci) -> float:
    nn = g.tune_nodes
    if a in ("nvls", "nvls_tree"):
        if not g.nvls or g.cc < 90 or nch < 2:
            return 0.0
        if a == "nvls" and nn > 1:      # multi-node NVLS needs CollNet (off by default)
            return 0.0
        if a == "nvls_tree" and (nn == 1 or coll != "all_reduce"):
            return 0.0
        intra = bw_intra * NVLS_EFFICIENCY[ci] * (nch - 1) / nch
        intra *= 2.0 if coll == "all_reduce" else (ppn - 1) / ppn
        inter = bw_inter * (2 if (a == "nvls_tree" and nn <= 2) else 1)
        bw = min(intra, inter, per_nvls_tree if a == "nvls_tree" else float("inf"))
        bus = nch * bw
        if achievable and g.nvls_bus_bw is not None:
            bus = min(bus, g.nvls_bus_bw)
        return bus
    if a == "pat":
        # PAT: one rank per node only (ncclPatEnable), Simple; busBw = min(bwInter, bwIntra)*nCh*0.75.
        if g.ppn != 1 or nn < 2:
            return 0.0
        bus = min(bw_inter, bw_intra) * nch
        if achievable and g.tree_bus_bw is not None:
            bus = g.tree_bus_bw
        return bus * 0.75
    bw = bw_intra if nn <= 2 else bw_inter
    bus = nch * bw
    if achievable:
        ach = g.ring_bus_bw if a == "ring" else g.tree_bus_bw
        if ach is not None:
            bus = ach
    p = PROTOS[pi]
    if a == "ring" and p == "LL":
        bus = min(ll_max, bus * 0.5)
    if a == "ring" and p == "LL128":
        bus = min(bus * 0.92, nch * per_ring_ll128)
    if a == "tree":
        if coll == "all_reduce":
            bus = min(bus * 0.92, nch * per_tree)
        if p == "LL":
            bus = min(bus / 3.8, ll_max)
        if p == "LL128":
            bus = min(bus * (7.0 / 9.0 if nn == 1 else 120.0 / 128.0), nch * per_tree_ll128)
        if g.tree_pattern == PATTERN_NAMES[TREE] and not achievable:
            # NCCL's discount for a tree whose NET in is its NET out: it steers the choice (kept there),
            # but the achievable layer books each node's NIC load itself (timing.apply: the same per
            # node, whichever NIC a channel leaves by), so the time does not take it twice.  Chosen after
            # looking at the Alps 2-node tables (README: How good the answers are)
            bus *= 0.85
    return bus

def _latency(g: CommGraph, coll: str, a: str, pi: int, nsteps: int) -> float:
    nn, n = g.tune_nodes, g.n_ranks
    base = BASE_LAT[a][pi]
    intra_hw = _hw_intra(g.type_intra)
    hw_lat = dict(HW_LAT[HW_PCI])
    if (g.cpu_arch or "").lower() in ("power", "ppc64le", "ppc64"):
        # Power: PCI Tree/Simple latency := Ring/Simple (tuning.cc ncclTopoTuneModel)
        t = list(hw_lat["tree"])
        t[2] = hw_lat["ring"][2]
        hw_lat["tree"] = tuple(t)
    table = {HW_NVLINK: HW_LAT[HW_NVLINK], HW_PCI: hw_lat, HW_NET: HW_LAT[HW_NET]}
    intra_lat = table[intra_hw][a][pi]
    inter_lat = table[HW_NET]["tree" if g.ppn == 1 and a in ("ring", "tree") else a][pi] + g.latency_inter
    if PROTOS[pi] == "Simple":
        inter_lat += g.latency_inter
    lat = base
    if a == "ring":
        hw = intra_hw if nn == 1 else HW_NET
        if coll in ("broadcast", "reduce"):
            if g.same_channels:
                lat += table[hw]["ring"][pi]
            else:
                step = table[hw]["tree"][pi] if PROTOS[pi] == "Simple" else table[hw]["ring"][pi]
                lat += nsteps * step
        else:
            overhead = 0.0
            if nn > 1:
                overhead = NET_OVERHEAD_US.get((g.cpu_vendor or "").lower(), 1.0)
                if PROTOS[pi] == "Simple":
                    overhead *= 3
            intra_lat = max(intra_lat, overhead)
            n_inter = 0 if nn == 1 else (2 * (nn - 1) if coll == "all_reduce" else nn - 1)
            lat += (nsteps - n_inter) * intra_lat + n_inter * inter_lat
    elif a == "tree":
        lat += 2 * ((n // nn - 1) * intra_lat + _log2i(nn) * inter_lat)
    elif a == "nvls":
        lat = intra_lat + (inter_lat if nn > 1 else 0.0)
    elif a == "nvls_tree":
        lat += intra_lat + 2 * _log2i(nn) * inter_lat
    elif a == "pat":
        lat += _log2i(nn) * inter_lat / 3.5 + n * 2.8
    return lat

def algo_time(g: CommGraph, collective: str, a: str, p: str, cell: Cell, nbytes: int) -> float:
    """``ncclTopoGetAlgoTime`` (tuning.cc:630-655): lat * latCount + nBytes / (1000 * bw), latCount = 1
    (one operation), with the tree correction factor and the multi-node ring plateau."""
    bw, lat = cell.bw, cell.lat
    if bw <= 0:
        return math.inf
    log_size = _log2i(nbytes >> 6) if nbytes >= 64 else -1
    pi = PROTOS.index(p)
    if a == "tree" and collective == "all_reduce" and 0 <= log_size < len(TREE_CORRECTION[pi]):
        bw *= TREE_CORRECTION[pi][log_size]
    if (a == "ring" and p == "Simple" and collective == "all_reduce" and g.tune_nodes > 1
            and nbytes / (g.channels * g.n_ranks) >= 64):
        lat *= RING_PLATEAU[0] if g.cc < 80 else RING_PLATEAU[1]
    return lat + nbytes / (1000.0 * bw)

# Prediction
def choose(g: CommGraph, coll: str, nbytes: int, nccl: dict, allowed: Sequence[str]) -> Optional[tuple]:
    best = None
    for (a, p), cell in sorted(nccl.items(), key=lambda kv: (ALGOS.index(kv[0][0]), PROTOS.index(kv[0][1]))):
        if a not in allowed:
            continue
        t = algo_time(g, coll, a, p, cell, nbytes)
        if best is None or t < best[0]:
            best = (t, a, p)
    return best

def allowed_algos(g: CommGraph, coll: str, algo: str) -> tuple:
    algo = (algo or "auto").lower()
    if algo not in USER_ALGOS:
        raise InputError(f"--algo {algo}: unknown algorithm", expected=", ".join(USER_ALGOS))
    if algo == "auto":
        return ALGOS
    if algo == "nvls":
        return ("nvls", "nvls_tree")
    return (algo,)


def nccl_choice(g: CommGraph, coll: str, nbytes: int, allowed: Sequence[str] = ALGOS,
                cells: Optional[dict] = None) -> Optional[tuple]:
    """NCCL's (time us, algorithm, protocol) for ``nbytes`` of ``coll`` among ``allowed``: its own
    tuning model run exactly (:func:`tune_model`, :func:`algo_time_exact`, ``ncclGetAlgoInfo``'s
    order and per-rank sizing) on the communicator ``g`` was built from, with ``g.ll128_c2c``;
    :func:`choose` on ``cells`` (default :func:`tuning_table`) for a summary without one, or where
    NCCL's pick is not among ``cells`` (the caller times it from them)."""
    cells = tuning_table(g, coll) if cells is None else cells
    best = _exact_choice(g, coll, nbytes, allowed) if g.nccl_tuning is not None and coll in _FUNC else None
    if best is None and g.nccl_tuning is not None and coll in _FUNC:
        s = g.nccl_tuning.get("settings")
        if s is not None and (s.algo or s.proto) and _exact_choice(g, coll, nbytes, ALGOS) is None:
            from gpucomm.probes.errors import PlanInfeasible

            # NCCL accepts the setting and stops at the first collective (enqueue.cc topoGetAlgoInfo)
            raise PlanInfeasible(f"NCCL finds no algorithm/protocol for {coll}: NCCL_ALGO={s.algo or '(unset)'} "
                                 f"NCCL_PROTO={s.proto or '(unset)'} leave none (NCCL stops with 'No "
                                 "algorithm/protocol available')")
    if best is None or (best[1], best[2]) not in cells:
        best = choose(g, coll, nbytes, cells, allowed)
    return best


def _exact_choice(g: CommGraph, coll: str, nbytes: int, allowed: Sequence[str]) -> Optional[tuple]:
    _, table = algo_times(_exact_tables(g), coll, nbytes)
    names = {A_TREE: "tree", A_RING: "ring", A_NVLS: "nvls", A_NVLS_TREE: "nvls_tree", A_PAT: "pat"}
    best = None
    for a in range(7):
        if names.get(a) not in allowed:
            continue
        for p in range(3):
            v = table[a][p]
            if v >= 0.0 and (best is None or v < best[0]):
                best = (v, names[a], PROTOS[p])
    return best


_EXACT: dict = {}


def _exact_tables(g: CommGraph) -> "TuneTables":
    from gpucomm.planners.nccl.settings import NcclSettings

    tun = g.nccl_tuning
    s = tun.get("settings") or NcclSettings()
    if bool(s.ll128_c2c) != g.ll128_c2c:
        s = s.replace(ll128_c2c=int(g.ll128_c2c))
    key = (id(tun), s.key())
    hit = _EXACT.get(key)
    if hit is None or hit[0] is not tun:
        if len(_EXACT) > 256:
            _EXACT.clear()
        hit = _EXACT[key] = (tun, tune_model(CommTuning(**dict(tun, settings=s))))
    return hit[1]


# --------------------------------------------------------------------------------------------
# NCCL's tuning model, exactly (tuning.cc ncclTopoTuneModel / ncclTopoGetAlgoTime, enqueue.cc
# topoGetAlgoInfo), on the communicator of gpucomm.planners.nccl.comm: C float arithmetic,
# NCCL's (algorithm, protocol) order for ties, NCCL_ALGO / NCCL_PROTO as NCCL parses them.
COLLS = ("broadcast", "reduce", "all_gather", "reduce_scatter", "all_reduce")   # NCCL_NUM_FUNCTIONS order
_FUNC = {"broadcast": 0, "reduce": 1, "all_gather": 2, "reduce_scatter": 3, "all_reduce": 4}
_ALGO_STR = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
_PROTO_STR = PROTOS
_FUNC_STR = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
A_TREE, A_RING, A_CD, A_CC, A_NVLS, A_NVLS_TREE, A_PAT = range(7)
P_LL, P_LL128, P_SIMPLE = range(3)
# defaults tuning.cc (indices [algo][proto], algos in NCCL order incl. CollNet)
_BASE = ((6.8, 14.0, 8.4), (6.6, 14.0, 8.4), (0, 0, 0), (0, 0, 0), (0, 0, 0), (0, 0, 0), (8.0, 8.0, 8.0))
_HW = (((0.6, 1.25, 4.0), (0.6, 1.9, 3.4), (0, 0, 3.7), (0, 0, 2.8), (0, 0, 25), (0, 0, 25), (0, 0, 4.0)),
       ((1.0, 1.9, 4.0), (1.0, 2.5, 5.7), (0, 0, 3.7), (0, 0, 2.8), (0, 0, 0), (0, 0, 0), (0, 0, 4.0)),
       ((5.0, 8.5, 14), (2.7, 4.0, 14.0), (0, 0, 31), (0, 0, 30), (0, 0, 18), (0, 0, 20.9), (0, 0, 14)))
_TREE_CORR24 = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
)
PCI_BW = 12.0
WARP = 32
SIMPLE_MAX_NTHREADS, LL_MAX_NTHREADS, LL128_MAX_NTHREADS, MAX_NTHREADS = 512, 512, 640, 640

import struct as _struct  # noqa: E402

_F32 = _struct.Struct("f")


def _f(x: float) -> float:
    return _F32.unpack(_F32.pack(x))[0]


@dataclass
class CommTuning:
    """What ncclTopoTuneModel reads from the communicator (after ncclTopoPostset)."""

    n_ranks: int
    n_nodes: int
    n_channels: int
    nvls_channels: int
    nvls_support: int
    graphs: dict              # "ring", "tree", "nvls", "collnet_chain", "collnet_direct" -> TGraph
    max_tree_pattern: int
    cpu_arch: int
    cpu_vendor: int
    min_cc: int
    max_cc: int
    nvs_count: int
    local_ranks: int
    max_local_ranks: int
    settings: object = None


@dataclass
class TuneTables:
    """``comm->bandwidths/latencies/maxThreads/threadThresholds`` and what topoGetAlgoInfo needs."""

    ct: CommTuning
    bw: list                  # [coll][algo][proto] float32
    lat: list
    max_threads: list         # [algo][proto]
    thresholds: list          # [algo][proto]

    def table(self, coll: str) -> dict:
        """{Algo: {Proto: [latency us, algbw GB/s]}} in NCCL's names (ncclsim ``tuning``)."""
        f = _FUNC[coll]
        return {_ALGO_STR[a]: {_PROTO_STR[p]: [self.lat[f][a][p], self.bw[f][a][p]] for p in range(3)}
                for a in range(7)}


def _graph_of(ct: CommTuning, a: int):
    g = ct.graphs
    return (g["tree"], g["ring"], g["collnet_direct"], g["collnet_chain"], g["nvls"], g["nvls"], g["tree"])[a]


def _log2i(n: int) -> int:
    return n.bit_length() - 1 if n > 0 else -1


def _nthreads(env: int, lo: int, hi: int, default: int) -> int:
    if env > 0:
        if env % WARP != 0:
            return hi
        return hi if env > hi else lo if env < lo else env
    return default


def _parse_list(text: str, prefixes: tuple, elems: tuple, table: list) -> None:
    """``parseList`` (tuning.cc): ``[func:]elem,elem;func:^elem``."""
    from gpucomm.probes.errors import InputError as _IE

    for i, full in enumerate(text.split(";")):
        if not full:
            continue
        parts = full.split(":")
        if len(parts) == 1:
            if i != 0:
                raise _IE(f"{text!r}: all entries except the first must have a prefix")
            prefix, lst = None, parts[0]
        else:
            prefix, lst = parts[0], parts[1]
        unset, setv = (1, 0) if lst.startswith("^") else (0, 1)
        if lst.startswith("^"):
            lst = lst[1:]
        found = False
        for pi, p in enumerate(prefixes):
            if prefix is not None and prefix.lower() != p.lower():
                continue
            found = True
            for e in range(len(elems)):
                table[pi][e] = unset
            for el in [x for x in lst.split(",") if x]:
                for e, name in enumerate(elems):
                    if el.lower() == name.lower():
                        table[pi][e] = setv
                        break
                else:
                    raise _IE(f"unrecognized element {el!r} in {text!r}", expected=", ".join(elems))
        if not found:
            raise _IE(f"unrecognized prefix {prefix!r} in {text!r}", expected=", ".join(prefixes))


def tune_model(ct: CommTuning) -> TuneTables:
    """``ncclTopoTuneModel`` (tuning.cc), float for float."""
    from gpucomm.planners.nccl.settings import NcclSettings

    s = ct.settings or NcclSettings()
    ring = ct.graphs["ring"]
    simple_def = 256 if _f(ring.bw_intra * ring.n_channels) <= PCI_BW else SIMPLE_MAX_NTHREADS
    mt = [[0, 0, 0] for _ in range(7)]
    mt[A_RING][P_SIMPLE] = _nthreads(s.nthreads, 2 * WARP, SIMPLE_MAX_NTHREADS, simple_def)
    mt[A_TREE][P_SIMPLE] = _nthreads(s.nthreads, 2 * WARP, SIMPLE_MAX_NTHREADS, SIMPLE_MAX_NTHREADS)
    for a in (A_CD, A_CC, A_NVLS, A_NVLS_TREE):
        mt[a][P_SIMPLE] = MAX_NTHREADS
    mt[A_RING][P_LL] = mt[A_TREE][P_LL] = _nthreads(s.nthreads, 2 * WARP, LL_MAX_NTHREADS, LL_MAX_NTHREADS)
    mt[A_RING][P_LL128] = mt[A_TREE][P_LL128] = _nthreads(s.ll128_nthreads, LL128_MAX_NTHREADS // 4,
                                                          LL128_MAX_NTHREADS, LL128_MAX_NTHREADS)
    bw = [[[0.0] * 3 for _ in range(7)] for _ in range(5)]
    lat = [[[0.0] * 3 for _ in range(7)] for _ in range(5)]
    nn, nr = ct.n_nodes, ct.n_ranks
    # ncclTopoTuneModel returns before setting threadThresholds when nRanks <= 1: they stay 0
    thr = [[8, 8, 64] for _ in range(7)] if nr > 1 else [[0, 0, 0] for _ in range(7)]
    if nr > 1:
        cci = 3 if ct.min_cc >= 100 else 2 if ct.min_cc >= 90 else 1 if ct.min_cc >= 80 else 0
        i2 = nn - 1 if nn <= 2 else 2
        i1 = cci if nn == 1 else (1 if ct.cpu_vendor in (2, 4) else 0)
        ll_max = LL_MAX_BWS[i1][i2]
        pc_tree = PER_CH_MAX_TREE_BWS[cci][i2]
        pc_ring_ll128 = PER_CH_MAX_RING_LL128_BWS[cci][i2]
        pc_tree_ll128 = PER_CH_MAX_TREE_LL128_BWS[cci][i2]
        pc_nvls_tree = PER_CH_MAX_NVLS_TREE_BWS[cci][i2]
        hw = [[list(r) for r in t] for t in _HW]
        if ct.cpu_arch == 2:   # POWER: Tree/Simple PCI latency := Ring/Simple
            hw[1][A_TREE][P_SIMPLE] = hw[1][A_RING][P_SIMPLE]
        ppn = _f(nr / nn)
        intra_hw = [0 if _graph_of(ct, a).type_intra == 1 else 1 for a in range(7)]
        hwa = [intra_hw[a] if nn == 1 else 2 for a in range(7)]
        nvls_eff = (0.0, 0.0, 0.85, 0.74)[cci]
        for coll in range(5):
            nsteps = 2 * (nr - 1) if coll == 4 else nr - 1 if coll in (2, 3) else nr
            for a in range(7):
                if coll in (0, 1) and a != A_RING:
                    continue
                if coll in (2, 3) and a not in (A_PAT, A_RING, A_NVLS, A_CD):
                    continue
                if coll == 4 and a == A_PAT:
                    continue
                g = _graph_of(ct, a)
                for p in range(3):
                    if a in (A_NVLS, A_NVLS_TREE) and p != P_SIMPLE:
                        continue
                    if coll in (2, 3) and a == A_PAT and (p != P_SIMPLE or not _pat_enable(ct, s)):
                        continue
                    collnet = a in (A_CD, A_CC)
                    b = g.bw_intra if (nn <= 2 or collnet) else g.bw_inter
                    if a in (A_NVLS_TREE, A_NVLS):
                        if g.n_channels < 2:
                            continue
                        ib = _f(_f(_f(g.bw_intra * _f(nvls_eff)) * (g.n_channels - 1)) / g.n_channels)
                        ib = _f(ib * 2.0) if coll == 4 else _f(ib * _f(_f(ppn - 1) / ppn))
                        eb = _f(g.bw_inter * (2 if (nn <= 2 and a == A_NVLS_TREE) else 1))
                        b = min(ib, eb, _f(pc_nvls_tree) if a == A_NVLS_TREE else 3.4e38)
                    bus = _f(g.n_channels * b)
                    if a == A_RING and p == P_LL:
                        bus = _f(min(ll_max, bus * .5))
                    if a == A_RING and p == P_LL128:
                        bus = _f(min(bus * 0.92, g.n_channels * pc_ring_ll128))
                    if a == A_TREE and coll == 4:
                        bus = _f(min(bus * .92, g.n_channels * pc_tree))
                    if a == A_TREE and p == P_LL:
                        bus = _f(min(bus * 1.0 / 3.8, ll_max))
                    if a == A_TREE and p == P_LL128:
                        bus = _f(min(bus * (7.0 / 9.0 if nn == 1 else 120.0 / 128.0), g.n_channels * pc_tree_ll128))
                    if a == A_TREE and ct.max_tree_pattern == TREE:
                        bus = _f(bus * .85)
                    if a == A_PAT:
                        bus = _f(bus * .75)
                    if collnet and p != P_SIMPLE:
                        bus = 0.0
                    if a == A_CD and p == P_SIMPLE:
                        if coll in (2, 3):
                            bus = _f(ppn * min(g.bw_intra, _f(g.bw_inter * _f(0.9))))
                        elif g.n_channels:
                            factor = ppn / (1.0 * g.n_channels)
                            factor -= (factor - 1) / 2
                            bus = _f(bus / factor)
                            if ct.min_cc >= 90:
                                bus = _f(bus * .85)
                    if a in (A_NVLS, A_CD) and p == P_SIMPLE and coll in (2, 3) and nn > 1:
                        bus = 0.0   # no CollNet plugin: NVLS/CollNet AG/RS across nodes are off
                    if not (a != A_RING and coll in (2, 3)):
                        ratio = _f(1.0 * (1.0 * nr) / nsteps) if a in (A_RING, A_NVLS, A_NVLS_TREE) else _f(.5)
                        bus = _f(bus * ratio)
                    bw[coll][a][p] = bus
                    L = _f(_BASE[a][p])
                    intra_lat = _f(hw[intra_hw[a]][a][p])
                    inter_lat = _f(hw[2][A_TREE][p]) if ppn == 1 else _f(hw[2][a][p])
                    inter_lat = _f(inter_lat + g.latency_inter)
                    if p == P_SIMPLE:
                        inter_lat = _f(inter_lat + g.latency_inter)
                    if a == A_RING:
                        lt = _f(hw[hwa[a]][a][p])
                        if coll in (0, 1):
                            if g.same_channels:
                                L = _f(L + lt)
                            else:
                                if p == P_SIMPLE:
                                    lt = _f(hw[hwa[a]][A_TREE][p])
                                L = _f(L + _f(nsteps * lt))
                        else:
                            ovh = 0.0
                            if nn > 1:
                                ovh = _net_overhead(ct, s)
                                if p == P_SIMPLE:
                                    ovh = _f(ovh * 3)
                            intra_lat = max(intra_lat, ovh)
                            n_inter = 0 if nn == 1 else (2 * (nn - 1) if coll == 4 else nn - 1)
                            L = _f(L + _f(_f((nsteps - n_inter) * intra_lat) + _f(n_inter * inter_lat)))
                    elif a == A_TREE:
                        if coll == 4:
                            L = _f(L + _f(2 * _f(_f((nr // nn - 1) * intra_lat) + _f(_log2i(nn) * inter_lat))))
                    elif a == A_CD:
                        L = _f(L + _f(2 * (min(1, nr // nn - 1) * intra_lat + (nr // nn - 1) * 0.4) + inter_lat))
                    elif a == A_CC:
                        L = _f(L + _f(_f(2 * (nr // nn - 1) * intra_lat) + inter_lat))
                    elif a == A_NVLS:
                        L = intra_lat
                        if nn > 1:
                            L = _f(L + inter_lat)
                    elif a == A_NVLS_TREE:
                        L = _f(L + _f(intra_lat + _f(2 * _log2i(nn) * inter_lat)))
                    elif a == A_PAT:
                        if coll in (2, 3):
                            L = _f(L + (_log2i(nn) * (inter_lat / 3.5) + nr * 2.8))
                    lat[coll][a][p] = L
        proto_en = [[1, 2, 1] for _ in range(5)]
        algo_en = [[1] * 7 for _ in range(5)]
        if s.proto:
            _parse_list(s.proto, _FUNC_STR, _PROTO_STR, proto_en)
        if s.algo:
            _parse_list(s.algo, _FUNC_STR, _ALGO_STR, algo_en)
        for f in range(5):
            for a in range(7):
                dis = (nn == 1 and a == A_NVLS_TREE) or a in (A_CD, A_CC) or (a == A_NVLS and nn > 1) or \
                    (ct.nvs_count == 0 and a == A_CD)
                if dis:
                    algo_en[f][a] = 0
        for c in range(5):
            for a in range(7):
                g = _graph_of(ct, a)
                for p in range(3):
                    pe = proto_en[c][p]
                    if pe == 2 and p == P_LL128:
                        pe = int(ll128_default(g.type_inter, g.type_intra, ct.min_cc, ct.max_cc, bool(s.ll128_c2c)))
                    if pe == 0 or algo_en[c][a] == 0:
                        bw[c][a][p] = 0.0
    thr[A_RING][P_LL] *= nr
    thr[A_CD][P_SIMPLE] = 512
    thr[A_CC][P_SIMPLE] = 512
    return TuneTables(ct, bw, lat, mt, thr)


def _pat_enable(ct: CommTuning, s) -> int:
    if ct.min_cc < 60:
        return 0
    if s.pat_enable != 2:
        return s.pat_enable
    return 1 if ct.n_nodes == ct.n_ranks else 0


def _net_overhead(ct: CommTuning, s) -> float:
    if s.net_overhead != -2:
        return _f(s.net_overhead * .001)
    if ct.cpu_arch == 1 and ct.cpu_vendor == 1:
        return 1.0
    if ct.cpu_arch == 1 and ct.cpu_vendor == 2:
        return 2.0
    return 1.0


def algo_time_exact(t: TuneTables, coll: int, a: int, p: int, nbytes: int) -> float:
    """``ncclTopoGetAlgoTime`` (one operation): -1 when the algorithm/protocol is disabled."""
    ct = t.ct
    bw = t.bw[coll][a][p]
    lat = t.lat[coll][a][p]
    if bw == 0:
        return -1.0
    ls = _log2i(nbytes >> 6)
    if a == A_TREE and coll == 4 and 0 <= ls < 23:
        bw = _f(bw * _f(_TREE_CORR24[p][ls]))
    if a == A_NVLS_TREE and coll == 4 and 0 <= ls < 24 and ct.min_cc >= 100 and ct.cpu_arch == 1:
        bw = _f(bw * _f(_TREE_CORR24[p][ls]))
    if a == A_RING and p == P_SIMPLE and ct.n_nodes > 1 and coll == 4 and \
            nbytes // (ct.n_channels * ct.n_ranks) >= 64:
        lat = _f(lat * (1.9 if ct.min_cc < 80 else 1.4))
    return _f(lat + _f(_f(float(nbytes)) / _f(1000 * bw)))


def algo_times(t: TuneTables, coll: str, nbytes: int, nvls: Optional[bool] = None) -> tuple[int, list]:
    """(the size NCCL tunes for, ``[algo][proto]`` times in us, -1 where disabled): the candidates
    ``ncclGetAlgoInfo`` weighs for one ``coll`` of ``nbytes`` (all_gather/reduce_scatter: the total,
    nccl-tests' size)."""
    ct = t.ct
    f = _FUNC[coll]
    if coll in ("all_gather", "reduce_scatter") and ct.n_ranks > 0:
        # NCCL sizes the operation from the per-rank count (ncclFuncMaxSendRecvCount: count x nRanks);
        # nccl-tests' total of float32s gives count = bytes / 4 / nRanks, truncated.
        nbytes = (int(nbytes) // (4 * ct.n_ranks)) * 4 * ct.n_ranks
    nvls = bool(ct.nvls_support) if nvls is None else nvls
    table = [[-1.0] * 3 for _ in range(7)]
    if ct.n_ranks == 1:
        table[A_RING][P_SIMPLE] = 0.0
        return nbytes, table
    for a in range(7):
        if a in (A_CD, A_CC):
            continue
        if a in (A_NVLS, A_NVLS_TREE) and (not nvls or (f != 4 and ct.local_ranks > 32)):
            continue
        if a == A_NVLS and ct.n_nodes > 1:
            continue
        for p in range(3):
            table[a][p] = algo_time_exact(t, f, a, p, nbytes)
    return nbytes, table


def algo_info(t: TuneTables, coll: str, nbytes: int, nvls: Optional[bool] = None) -> dict:
    """``ncclGetAlgoInfo`` without a tuner plugin or CollNet: NCCL's algorithm, protocol, channels,
    warps and estimated time (us) for one ``coll`` of ``nbytes`` (all_gather/reduce_scatter: the
    total, nccl-tests' size)."""
    ct = t.ct
    nbytes, table = algo_times(t, coll, nbytes, nvls)
    best, ba, bp = 3.4e38, -1, -1
    for a in range(7):
        for p in range(3):
            v = table[a][p]
            if v >= 0.0 and v < best:
                best, ba, bp = v, a, p
    if ba < 0:
        from gpucomm.probes.errors import PlanInfeasible as _PI

        raise _PI(f"NCCL finds no algorithm/protocol for {coll}" + (" (NCCL_ALGO/NCCL_PROTO restrict it)"
                                                                    if ct.settings and (ct.settings.algo or ct.settings.proto)
                                                                    else ""))
    nc = ct.n_channels
    nt = t.max_threads[ba][bp]
    th = t.thresholds[ba][bp]
    if ba in (A_NVLS, A_NVLS_TREE):
        nc = min(ct.nvls_channels, ct.n_channels) if (ct.n_nodes > 1 and ba == A_NVLS) else ct.nvls_channels
    else:
        while nbytes < nc * nt * th:
            if nc >= 2:
                nc -= 1
            else:
                break
    if ba not in (A_NVLS, A_NVLS_TREE, A_CD):
        while nbytes < nc * nt * th:
            if nt % 128 == 0:
                nt //= 2
            else:
                break
    if bp == P_SIMPLE:
        if ba == A_RING:
            nt += WARP
        if ba == A_TREE:
            nt += 4 * WARP
    nt = 3 * WARP if nt // WARP < 3 else nt
    if ba in (A_TREE, A_PAT):
        nt = MAX_NTHREADS
    return {"algo": _ALGO_STR[ba], "proto": _PROTO_STR[bp], "time_us": best, "nChannels": nc, "nWarps": nt // WARP,
            "algorithm": _OUR_ALGO[ba], "protocol": _PROTO_STR[bp]}


_OUR_ALGO = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
