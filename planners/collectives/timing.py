"""How long the algorithm NCCL picks really takes: the achievable layer of the cost model.

NCCL's tuning model (:mod:`gpucomm.planners.nccl.tuning`) decides *which* algorithm and protocol a
collective runs; its numbers are search heuristics, not what the hardware delivers.  This module
turns the machine's hardware figures (:class:`Hardware`, read from the topology by
:func:`gpucomm.planners.collectives.cost.hardware`) and a :class:`Profile` of physical parameters
into the achievable bandwidths of a :class:`~gpucomm.planners.nccl.tuning.CommGraph`
(:func:`apply`) and into the time of the chosen algorithm (:func:`time_us`).

The time of one operation of ``S`` bytes (nccl-tests' size) is::

    t = latency_scale * L_nccl + net_step_latency_us * steps_net + step_latency_us * steps
        + max(S / B, step_floor_us * steps if floored) + ramp * 2 * sqrt(L_nccl * S / B)
        + net_fill * steps_net * S_w / B

* ``L_nccl``: NCCL's latency for the chosen algorithm/protocol (tuning.cc ``ncclTopoTuneModel``,
  with ``ncclTopoGetAlgoTime``'s ring plateau) -- or, for the point-to-point collectives NCCL does
  not tune, one Simple ring step plus one per peer (:func:`p2p_latency`);
* ``steps_net``: the network steps of the algorithm (ring all_reduce ``2(N-1)``, tree ``2 log2 N``,
  all_to_all one per remote peer, ...; :func:`net_steps`); ``steps``: every step when the job spans
  nodes (:func:`all_steps`; all_to_all's are in its ``L_nccl``), each of which waits for the network proxy;
* ``floored``: a multi-node ring running NCCL's Simple protocol, each of whose ``steps`` takes at
  least ``step_floor_us``: the transfer of a step hides the transport's per-step latency (a
  rendezvous handshake per message, the proxy's round trip) up to that floor, so a ring sweep is
  flat at ``step_floor_us x steps`` until its transfer takes longer and bandwidth-bound beyond --
  what the published ALCF Polaris sweeps with the aws-ofi-nccl plugin show (all_reduce and
  all_gather flat at ~1 ms on 2 nodes, ~2-3 ms on 8, from 1 to 16 MiB; fitted 35-45 us a step).
  LL and LL128 move small flag-synchronised lines without that handshake, and trees pipeline
  their chunks through the tree: neither is floored;
* ``S_w = min(S, net_fill_bytes)``: a multi-node pipeline fills over its network steps until its
  chunks reach their full size (``Terms.fill_x``);
* ``B``: the algorithm bandwidth NCCL's refinements give (protocol factors, per-channel caps, tree
  correction) starting from the *achievable* bus bandwidth instead of NCCL's ``nChannels * bw``;
* the last term is the pipeline fill of a chunked ring: with ``k`` steps of latency ``a`` and
  optimal chunking a pipeline takes ``(sqrt(k a) + sqrt(S/B))^2`` (the cross term is the fill);
  NCCL's fixed chunk sizes fill less efficiently, hence the free factor ``ramp`` (0 = NCCL's own
  latency + size/bandwidth model, 1 = an optimally chunked pipeline).

Achievable bus bandwidths (:func:`apply`), all in nccl-tests busbw terms:

* network per node: ``n_nics * per_nic * congestion(N)``, ``per_nic`` = the NIC line rate x
  :data:`NET_EFFICIENCY` or the fitted ``net_gbps_per_nic``; GPUs reach the NICs over their own PCIe
  links (``gpus_per_node * pcie`` caps it); ``congestion(N) = 1 / (1 + congestion * log2(N / 2))``
  from 2 nodes on (fabric congestion as the job spans more of the fabric; N counts its hosts, every
  tray of an MNNVL clique one);
* ring: ``min(intra, network)``; tree and NVLS-tree: ``min(intra, network x 2)`` on 2 nodes (each
  node's NICs carry half of a ring's traffic), ``min(intra, network)`` beyond;
* intra-node: NCCL's own single-node ring bandwidth over NVLink, :data:`PCIE_RING_EFFICIENCY` x the
  PCIe link over PCIe, times ``intra_efficiency``; NVLS on one node: NCCL's figure x ``nvls_efficiency``;
* all_to_all: ``g(n-g)S/n`` bytes leave each node at ``network x alltoall_efficiency`` -- the network of
  the NICs NCCL's point-to-point channels use (each GPU's local NICs, ncclTopoGetLocalNet), which can be
  more than its rings use (an MNNVL clique's inter-clique rings leave through some of its trays) -- while each GPU
  sends ``(g-1)S/n`` to its node peers at ``gpu_bw x intra_p2p_efficiency`` (both at once);
* send_recv (rank r -> r+1): the slowest hop -- a node boundary crosses one NIC at
  ``per_nic x p2p_efficiency``, a hop inside a node the GPUs' link x ``intra_p2p_efficiency``;
* the protocols across nodes: NCCL's LL and LL128 bandwidths x ``net_ll_efficiency`` and
  ``net_ll128_efficiency`` (flag-based protocols through a network proxy, whose cost depends on
  the transport: the mid-size ramp of a multi-node sweep).

One parameter is NCCL's behaviour, not physics: ``ll128_c2c`` (NCCL_LL128_C2C), whether LL128 runs
across nodes whose GPUs reach their NICs through the CPU's C2C link (GH200, GB200).  NCCL 2.27+ does by
default; earlier versions did not (no P2C path: the NIC was PHB to the GPU) -- ``gpucomm calibrate``
decides it from the runs where it matters, and :func:`apply` hands it to NCCL's tuning model.

Without a profile every parameter has its documented default (:data:`DEFAULT`): NCCL's model plus
the constants below.  A profile fitted from the user's own runs (``gpucomm calibrate``,
:mod:`gpucomm.planners.collectives.calibrate`) replaces the ones its runs could determine.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Optional

from gpucomm.probes.units import busbw_factor, gbps_to_GBps
from gpucomm.planners.nccl.tuning import (BASE_LAT, HW_LAT, HW_NET, PROTOS, RING_PLATEAU, TREE_CORRECTION,
                                           CommGraph, _hw_intra, _log2i, tuning_table)

# --------------------------------------------------------------------------------------------
# Documented constants (the uncalibrated defaults)
PCIE_RING_EFFICIENCY = 0.656
"""Achieved ring busbw / GPU PCIe link bw (NCCL units) for rings over PCIe (no NVLink hop).
Fitted to nccltests/02_rtxa6000-x8_1node_allreduce.txt: 15.74 GB/s at 128 MiB over Gen4 x16 (24 GB/s).
A plausible reading (not measured here): PCIe DMA reaches ~80-85% of the raw link rate, and ring hops
between sockets go through host memory (NCCL's SHM transport), which costs more."""

NET_EFFICIENCY = 0.926
"""Fraction of the NIC line rate NCCL's network transport (IB verbs or a net plugin) delivers to a
large collective.  Fitted to nccltests/scaling/083_h100ib-c01_2n_all_reduce_g1.txt: 2 nodes x 1
H100, one 400 Gb/s NDR NIC each, busbw 46.32 GB/s at 512 MiB = 0.926 x 50 GB/s (no NVLink in the
way: the ring is the NIC).  The rest of the visible tables are predictions with it
(tools/crossval.py, uncalibrated column)."""


@dataclass(frozen=True)
class Profile:
    """The physical parameters of the achievable layer (see the module docstring).  ``None`` for
    ``net_gbps_per_nic`` means the NIC line rate x :data:`NET_EFFICIENCY`."""

    net_gbps_per_nic: Optional[float] = None     # achieved Gb/s of one NIC in a streaming collective
    alltoall_efficiency: float = 1.0             # many-peer exchange / streaming, per NIC
    p2p_efficiency: float = 1.0                  # one point-to-point flow through one NIC / streaming
    congestion: float = 0.0                      # bandwidth loss per doubling of nodes beyond 2
    intra_efficiency: float = 1.0                # intra-node rings / NCCL's figure
    nvls_efficiency: float = 1.0                 # NVLS on one node / NCCL's figure
    intra_p2p_efficiency: float = 1.0            # all_to_all and send_recv inside a node / the GPUs' links
    net_ll_efficiency: float = 1.0               # LL across nodes / NCCL's LL bandwidth
    net_ll128_efficiency: float = 1.0            # LL128 across nodes / NCCL's LL128 bandwidth
    latency_scale: float = 1.0                   # x NCCL's latency model
    net_step_latency_us: float = 0.0             # added per network step
    step_latency_us: float = 0.0                 # added per algorithm step (every hop) when the job spans nodes
    ramp: float = 0.0                            # pipeline fill (0: NCCL's model, 1: optimal chunking)
    net_fill: float = 0.0                        # pipeline fill per network step, x the transfer of a window
    net_fill_bytes: float = 4194304.0            # the window (bytes) beyond which the fill stops growing
    step_floor_us: float = 0.0                   # a multi-node ring step (Simple) takes at least this long
    ll128_c2c: Optional[bool] = None             # NCCL_LL128_C2C the runs showed (None: the environment's)

    def to_dict(self) -> dict:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


def _plain(v):
    if v is None or isinstance(v, bool):
        return v
    return round(float(v), 6)


DEFAULT = Profile()
PARAMETERS = tuple(f.name for f in fields(Profile))


@dataclass(frozen=True)
class Hardware:
    """What the achievable layer reads about one node of the job (from :func:`cost.hardware`)."""

    nodes: int
    gpus_per_node: int
    intra_bus_bw: Optional[float]     # NCCL's single-node ring bus bandwidth (NVLink) or None (one GPU)
    intra_is_pcie: bool               # the ring's intra-node hops are PCIe (PCIE_RING_EFFICIENCY applies)
    pcie_bw: float                    # the smallest GPU PCIe link (NCCL GB/s)
    n_nics: int                       # NICs that carry the job's traffic (rate >= half the best)
    nic_line_GBps: Optional[float]    # one NIC's line rate (GB/s), None on one node without NICs
    fabric_GBps: Optional[float]      # --fabric-gbps: what one NIC delivers (overrides the efficiency)
    gpu_bw: Optional[float]           # a GPU's bandwidth to its node peers (all_to_all)
    p2p_bw: Optional[float]           # the slowest neighbour hop inside a node (send_recv)
    notes: tuple = field(default_factory=tuple)
    net_efficiency: float = NET_EFFICIENCY   # fraction of the line rate the inter-node transport delivers
    net_cap_GBps: Optional[float] = None     # what one NIC delivers at most under that transport (sockets,
                                             # GPUDirect RDMA through a root complex; collectives/transport.py)
    p2p_n_nics: Optional[int] = None         # NICs NCCL's point-to-point channels use (ncclTopoGetLocalNet over
                                             # the node's GPUs): all_to_all's; None: n_nics
    p2p_nic_line_GBps: Optional[float] = None   # the slowest of them (GB/s line rate); None: nic_line_GBps


def per_nic_GBps(hw: Hardware, profile: Profile, line_GBps: Optional[float] = None) -> Optional[float]:
    """What one NIC delivers to a streaming collective (GB/s); ``line_GBps``: another NIC's line rate
    than ``hw.nic_line_GBps`` (the NICs of point-to-point traffic)."""
    if profile.net_gbps_per_nic is not None:
        return gbps_to_GBps(profile.net_gbps_per_nic)
    if hw.fabric_GBps is not None:
        return hw.fabric_GBps
    line = line_GBps if line_GBps is not None else hw.nic_line_GBps
    if line is None:
        return None
    per = line * hw.net_efficiency
    return min(per, hw.net_cap_GBps) if hw.net_cap_GBps else per


def congestion_factor(nodes: int, profile: Profile) -> float:
    """1 on 1-2 nodes; ``1 / (1 + c log2(N/2))`` beyond."""
    if nodes <= 2 or profile.congestion <= 0:
        return 1.0
    return 1.0 / (1.0 + profile.congestion * math.log2(nodes / 2.0))


def apply(g: CommGraph, hw: Hardware, profile: Profile = DEFAULT) -> CommGraph:
    """``g`` (NCCL's graphs) with the achievable bandwidths of ``hw`` under ``profile``."""
    nodes, gpn = hw.nodes, hw.gpus_per_node
    if hw.intra_bus_bw is None:
        intra = None
    else:
        intra = hw.intra_bus_bw * (PCIE_RING_EFFICIENCY if hw.intra_is_pcie else 1.0) * profile.intra_efficiency
    node_net = nic = p2p_net = None
    if nodes > 1:
        nic = per_nic_GBps(hw, profile)
        # the fabric sees every tray of an MNNVL clique as a host of its own: congestion grows with those
        cong = congestion_factor(nodes * max(1, g.trays_per_node), profile)
        node_net = min(max(1, hw.n_nics) * nic, gpn * hw.pcie_bw) * cong
        if hw.p2p_n_nics:
            # point-to-point traffic leaves through the NICs local to each GPU, not the rings' NICs
            p2p_nic = per_nic_GBps(hw, profile, hw.p2p_nic_line_GBps)
            p2p_net = min(hw.p2p_n_nics * p2p_nic, gpn * hw.pcie_bw) * cong
    ring = tree = intra
    nvls = None
    if node_net is not None:
        ring = min(x for x in (intra, node_net) if x is not None)
        tree = min(x for x in (intra, node_net * (2 if nodes <= 2 else 1)) if x is not None)
        nvls = node_net * (2 if nodes <= 2 else 1)
    ie = profile.intra_p2p_efficiency
    if profile.ll128_c2c is not None:
        g = replace(g, ll128_c2c=profile.ll128_c2c)
    return replace(g, ring_bus_bw=ring, tree_bus_bw=tree, nvls_bus_bw=nvls,
                   gpu_bw=hw.gpu_bw * ie if hw.gpu_bw else None, p2p_bw=hw.p2p_bw * ie if hw.p2p_bw else None,
                   node_net_bw=node_net, nic_bw=nic, p2p_net_bw=p2p_net)


# --------------------------------------------------------------------------------------------
# Time of the chosen algorithm
def net_steps(g: CommGraph, coll: str, algo: str) -> int:
    """Network steps one operation of ``algo`` makes (the count ``net_step_latency_us`` multiplies)."""
    nn = g.n_nodes
    if nn <= 1:
        return 0
    if coll == "all_to_all":
        return g.n_ranks - g.gpus_per_node       # one exchange per remote peer
    if coll == "send_recv":
        return 1
    if algo == "ring":
        return 2 * (nn - 1) if coll == "all_reduce" else nn - 1
    if algo in ("tree", "nvls_tree"):
        return 2 * max(1, _log2i(nn))
    if algo == "pat":
        return max(1, _log2i(nn))
    return 1


def all_steps(g: CommGraph, coll: str, algo: str) -> int:
    """Every step of one operation when the job spans nodes (0 on one node), the count
    ``step_latency_us`` multiplies: ring ``2(n-1)`` / ``n-1`` hops, tree ``2 (log2 N + g - 1)`` (the
    chain inside each node, the tree across nodes, up and down), send_recv 1.
    In a multi-node ring every hop waits for the network proxy's progress (tuning.cc makes each
    intra-node step at least the net overhead), so every hop pays what the transport adds.
    all_to_all counts none: its per-peer steps are already in :func:`p2p_latency` (scaled by
    ``latency_scale``); counting them again made one ``step_latency_us`` serve two different things
    (sequential ring hops, ~8 us each on the published Polaris sweeps, and grouped point-to-point sends)
    and the fit a compromise that missed 8-node all_gather mid sizes from a 2-node fit."""
    nn, n, gpn = g.n_nodes, g.n_ranks, g.gpus_per_node
    if nn <= 1 or coll == "all_to_all":
        return 0
    if coll == "send_recv":
        return 1
    if algo == "ring":
        return 2 * (n - 1) if coll == "all_reduce" else n - 1
    if algo in ("tree", "nvls_tree"):
        return 2 * (max(1, _log2i(nn)) + gpn - 1)
    return max(1, _log2i(nn))


def p2p_latency(g: CommGraph, coll: str) -> float:
    """NCCL's latency for the grouped point-to-point collectives, which its tuner does not model,
    from its Ring/Simple constants (tuning.cc ncclTopoTuneModel): send_recv is one step (baseLat +
    hwLat[intra or NET][Ring][Simple]); all_to_all is one send/recv per peer, each a step over
    NVLink/PCIe to a node peer and over the network to a remote one (the published Polaris sweeps
    grow ~linearly with the peers: ~57 us for 7 peers on 2 nodes, ~280 us for 31 on 8)."""
    nn, n, gpn = g.n_nodes, g.n_ranks, g.gpus_per_node
    intra_step = HW_LAT[_hw_intra(g.type_intra)]["ring"][2]
    net_step = HW_LAT[HW_NET]["ring"][2]
    if coll == "all_to_all":
        return BASE_LAT["ring"][2] + (gpn - 1) * intra_step + (n - gpn) * net_step
    return BASE_LAT["ring"][2] + (net_step if nn > 1 else intra_step)


def p2p_seconds_per_byte(g: CommGraph, coll: str, profile: Profile = DEFAULT) -> float:
    """1 / bandwidth (us per byte x 1e-3, i.e. the ``S / (1000 B)`` divisor) of all_to_all / send_recv
    under ``profile``'s all_to_all and point-to-point efficiencies."""
    n, gpn, nn = g.n_ranks, g.gpus_per_node, g.n_nodes
    intra = g.gpu_bw or g.ring_bus_bw or g.channels * g.bw_intra
    if coll == "all_to_all":
        t_intra = ((gpn - 1) / n) / (1000.0 * intra) if gpn > 1 else 0.0
        # the node's share leaves at the all_to_all efficiency of the network
        net = g.p2p_net_bw or g.node_net_bw
        t_inter = (gpn * (n - gpn) / n) / (1000.0 * net * profile.alltoall_efficiency) if nn > 1 and net else 0.0
        return max(t_intra, t_inter)
    if nn > 1 and g.nic_bw:
        # a node boundary crosses one NIC at the point-to-point efficiency
        nic = g.nic_bw * profile.p2p_efficiency
        bw = min(g.p2p_bw or nic, nic) if gpn > 1 else nic
    else:
        bw = g.p2p_bw or intra
    return 1.0 / (1000.0 * bw)


@dataclass(frozen=True)
class Terms:
    """The parts of one predicted time: NCCL's latency, the network steps, S / B (all us), and the
    size (bytes)."""

    lat: float
    steps_net: int
    transfer: float
    size: int = 0
    steps: int = 0
    floored: bool = False

    def moved(self, floor_us: float) -> float:
        """The transfer when every step takes at least ``floor_us`` (a floored ring): max(S / B,
        floor x steps), the steps' transfers hiding the transport's per-step latency up to the floor."""
        if self.floored and floor_us > 0:
            return max(self.transfer, floor_us * self.steps)
        return self.transfer

    def fill_x(self, window: float) -> float:
        """The network pipeline fill per unit of ``net_fill``: steps x the transfer time of
        min(S, window) bytes (chunks fill the pipeline until they reach their full size)."""
        if not self.steps_net or self.transfer <= 0 or self.size <= 0:
            return 0.0
        return self.steps_net * self.transfer * min(1.0, window / self.size)

    def time(self, p: Profile) -> float:
        t = p.latency_scale * self.lat + p.net_step_latency_us * self.steps_net + self.moved(p.step_floor_us) \
            + p.step_latency_us * self.steps
        if p.ramp and self.transfer > 0 and self.lat > 0:
            t += p.ramp * 2.0 * math.sqrt(self.lat * self.transfer)
        if p.net_fill:
            t += p.net_fill * self.fill_x(p.net_fill_bytes)
        return t


def terms(g: CommGraph, coll: str, algo: str, proto: Optional[str], size: int, profile: Profile = DEFAULT,
          table: Optional[dict] = None) -> Terms:
    """The :class:`Terms` of ``size`` bytes of ``coll`` run as ``algo``/``proto`` on ``g`` (whose
    achievable fields :func:`apply` set).  ``table``: ``tuning_table(g, coll, achievable=True)``
    when the caller has it."""
    if coll in ("all_to_all", "send_recv"):
        per_byte = p2p_seconds_per_byte(g, coll, profile)
        return Terms(p2p_latency(g, coll), net_steps(g, coll, "p2p"), size * per_byte, size,
                     all_steps(g, coll, "p2p"))
    if table is None:
        table = tuning_table(g, coll, achievable=True)
    cell = table.get((algo, proto))
    if cell is None or cell.bw <= 0:
        return Terms(math.inf, 0, math.inf, size)
    bw, lat = cell.bw, cell.lat
    pi = PROTOS.index(proto)
    log_size = _log2i(size >> 6) if size >= 64 else -1
    if algo == "tree" and coll == "all_reduce" and 0 <= log_size < len(TREE_CORRECTION[pi]):
        bw *= TREE_CORRECTION[pi][log_size]
    if (algo == "ring" and proto == "Simple" and coll == "all_reduce" and g.tune_nodes > 1
            and size / (g.channels * g.n_ranks) >= 64):
        lat *= RING_PLATEAU[0] if g.cc < 80 else RING_PLATEAU[1]
    if algo == "nvls" and g.n_nodes == 1:
        bw *= profile.nvls_efficiency
    if g.n_nodes > 1 and proto == "LL":
        bw *= profile.net_ll_efficiency
    elif g.n_nodes > 1 and proto == "LL128":
        bw *= profile.net_ll128_efficiency
    return Terms(lat, net_steps(g, coll, algo), size / (1000.0 * bw), size, all_steps(g, coll, algo),
                 algo == "ring" and proto == "Simple" and g.n_nodes > 1)


def time_us(g: CommGraph, coll: str, algo: str, proto: Optional[str], size: int, profile: Profile = DEFAULT,
            table: Optional[dict] = None) -> float:
    """Predicted time (us) of one operation (see the module docstring)."""
    return terms(g, coll, algo, proto, size, profile, table).time(profile)


def busbw_GBps(coll: str, n: int, size: int, t_us: float) -> float:
    """nccl-tests' busbw of ``size`` bytes in ``t_us``."""
    return (size / (t_us * 1e-6) / 1e9) * busbw_factor(coll, n) if t_us > 0 else 0.0


__all__ = ["PCIE_RING_EFFICIENCY", "NET_EFFICIENCY", "Profile", "DEFAULT", "PARAMETERS",
           "Hardware", "per_nic_GBps", "congestion_factor", "apply", "net_steps", "p2p_latency", "Terms", "terms",
           "time_us", "busbw_GBps"]
