"""What a collective takes on a topology: NCCL's graphs of the machine (search.cc, through
:func:`gpucomm.planners.nccl.comm.nccl_reference`), NCCL's choice of algorithm and protocol
(:mod:`gpucomm.planners.nccl.tuning`), and the time that choice takes with the bandwidth the
hardware actually delivers -- the calibrated "achievable" layer -- in nccl-tests' algbw/busbw terms.

* :func:`summarize` -- topology -> :class:`~gpucomm.planners.nccl.tuning.CommGraph`: NCCL's graphs
  plus the achievable bus bandwidths (NVLink: NCCL's own figure; PCIe rings, networks: calibrated).
* :func:`predict` -- per size, the algorithm/protocol NCCL picks (its own tuning model run exactly on
  the communicator the graphs came from, :func:`gpucomm.planners.nccl.tuning.nccl_choice`:
  ``time = lat + bytes / (1000 * algbw)``, ``ncclTopoGetAlgoTime``), and the time it takes with
  the *achievable* bus bandwidth.  Rows carry time, algbw = S/t and busbw = algbw * nccl-tests factor.

Why two layers: NCCL's graph bandwidths are search heuristics (speed ladders, NCCL's per-CPU
inter-socket constants, the NIC's *link* speed even when the transport is TCP sockets).  They
decide which algorithm NCCL runs, so they must drive the choice; the time itself is bounded by what
the hardware delivers: :mod:`gpucomm.planners.collectives.timing` turns the hardware figures this
module reads (:func:`hardware`) and a profile of physical parameters into achievable bandwidths
and times.  Without a profile its documented constants apply (``PCIE_RING_EFFICIENCY``,
``NET_EFFICIENCY``; NCCL's TCP socket transport: ``transport.SOCKET_GBPS`` per NIC, ``--transport socket``);
with one fitted from the user's runs (``gpucomm calibrate``) the fitted values do.

Algorithms modelled: ring, tree (double binary tree), NVLS / NVLSTree (NVSwitch + sm>=90), PAT
(one GPU per node, AG/RS); CollNet is not (it needs a SHARP plugin, off by default).  all_to_all and
send_recv are not tuned by NCCL (point-to-point); their model is an explicit bound described at
:func:`_p2p_row`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence, Union

from gpucomm.probes import facts
from gpucomm.probes.errors import InputError, NothingToDo, PlanInfeasible, TopologyError
from gpucomm.probes.limits import MAX_NODES
from gpucomm.probes.topology import Topology
from gpucomm.probes.units import MAX_FABRIC_GBPS, busbw_factor, gbps_to_GBps, normalize_collective
from gpucomm.planners.collectives import timing
from gpucomm.planners.collectives.transport import SOCKET_GBPS
from gpucomm.planners.nccl.names import BALANCED_TREE, PATTERN_NAMES, TREE
from gpucomm.planners.nccl.search import speed_ladder
from gpucomm.planners.nccl.tuning import ALGOS, CommGraph, allowed_algos, nccl_choice, path_rank, tuning_table

# The calibrated constants live with the achievable layer (re-exported here).
PCIE_RING_EFFICIENCY = timing.PCIE_RING_EFFICIENCY
NET_EFFICIENCY = timing.NET_EFFICIENCY


def predict(g: CommGraph, collective: str, sizes: Iterable[int], algo: str = "auto",
            dtype_bytes: int = 4, profile: Optional[timing.Profile] = None) -> list[dict]:
    """Predicted rows, one per size (nccl-tests' ``size`` convention for the collective).

    Each row: {size_bytes, count, time_us, algbw_GBps, busbw_GBps, algorithm, protocol, nccl_time_us}.
    ``nccl_time_us`` is NCCL's own estimate for the chosen algorithm (uncalibrated); ``time_us`` is the
    prediction (:func:`gpucomm.planners.collectives.timing.time_us` under ``profile``, the one ``g``
    was summarized with).  Raises PlanInfeasible when ``algo`` cannot run this collective on this graph."""
    prof = profile or timing.DEFAULT
    coll = normalize_collective(collective)
    sizes = [int(s) for s in sizes]
    if g.n_ranks < 2 and coll != "send_recv":
        # nccl-tests' bus factors are 0 for one rank and NCCL does a local copy: nothing to predict
        # (send_recv to oneself is a real, timed copy in nccl-tests, so it stays).
        raise NothingToDo(f"{coll} over {g.n_ranks} rank moves no data between GPUs; use 2 or more GPUs (or --nodes)")
    if coll in ("all_to_all", "send_recv"):
        if algo not in (None, "auto", "ring"):
            raise PlanInfeasible(f"--algo {algo}: {coll} is point-to-point in NCCL (no ring/tree/NVLS choice)")
        return [_p2p_row(g, coll, s, dtype_bytes, prof) for s in sizes]
    allowed = allowed_algos(g, coll, algo)
    nccl = tuning_table(g, coll, achievable=False)
    ach = tuning_table(g, coll, achievable=True)
    if not any(a in allowed for a, _ in nccl):
        have = sorted({a for a, _ in nccl}, key=ALGOS.index)
        why = ""
        if "nvls" in allowed and not g.nvls:
            why = " (NVLS needs an NVSwitch and compute capability >= 9.0)"
        raise PlanInfeasible(f"--algo {algo} cannot run {coll} on this topology{why}; available: {', '.join(have)}")
    n = g.n_ranks
    rows = []
    for s in sizes:
        best = nccl_choice(g, coll, s, allowed, cells=nccl)
        assert best is not None  # guarded above
        t_nccl, a, p = best
        t = timing.time_us(g, coll, a, p, s, prof, ach if (a, p) in ach else nccl)
        rows.append(_row(coll, n, s, t, a, p, dtype_bytes, t_nccl))
    return rows


def _row(coll: str, n: int, size: int, t_us: float, algo: str, proto: Optional[str], dtype_bytes: int,
         t_nccl: Optional[float] = None) -> dict:
    algbw = (size / (t_us * 1e-6) / 1e9) if t_us > 0 else 0.0
    per_rank = coll in ("all_gather", "reduce_scatter", "all_to_all")
    count = size // dtype_bytes // (n if per_rank else 1)
    row = {
        "size_bytes": int(size), "count": int(count), "type": _DTYPE_NAMES.get(dtype_bytes, f"{dtype_bytes}B"),
        "time_us": round(t_us, 3), "algbw_GBps": round(algbw, 4),
        "busbw_GBps": round(algbw * busbw_factor(coll, n), 4), "algorithm": algo, "protocol": proto,
    }
    if t_nccl is not None:
        row["nccl_time_us"] = round(t_nccl, 3)
    return row


_DTYPE_NAMES = {1: "int8", 2: "half", 4: "float", 8: "double"}


def _p2p_row(g: CommGraph, coll: str, size: int, dtype_bytes: int, profile: Optional[timing.Profile] = None) -> dict:
    """all_to_all and send_recv: NCCL runs them as grouped point-to-point operations, which its tuner
    does not model.  Bound used here (derived, not NCCL's; :func:`timing.terms`):

    * all_to_all (nccl-tests alltoall: S = bytes each rank sends in total, S/n per peer): a rank sends
      (g-1)S/n to node peers over its own NVLink/PCIe (``gpu_bw``) and (n-g)S/n to other nodes over
      the node's NICs, shared by the g GPUs of the node (``node_net_bw`` x the all_to_all efficiency);
      both proceed concurrently: t = lat + max((g-1)S/n / gpu_bw, g(n-g)S/n / node_net_bw).
    * send_recv (rank r -> r+1): t = lat + S / min(p2p_bw, one NIC x the p2p efficiency if several nodes).
    lat = one Ring/Simple step: baseLat + hwLat[intra or NET][Ring][Simple] (tuning.cc ncclTopoTuneModel),
    plus a step per peer for all_to_all (:func:`timing.p2p_latency`)."""
    t = timing.time_us(g, coll, "p2p", "Simple", size, profile or timing.DEFAULT)
    return _row(coll, g.n_ranks, size, t, "p2p", "Simple", dtype_bytes)


# --------------------------------------------------------------------------------------------
# Topology -> CommGraph
@dataclass
class NodeFacts:
    """What :func:`summarize` reads from one node's topology (selected GPUs only), all taken from the
    typed view (:class:`gpucomm.probes.topology.Topology`)."""

    topo: Topology
    gpus: list            # the selected GPUs (topology.GPU)
    ids: list             # their graph ids
    cc: int               # the oldest compute capability (NCCL tunes for the minimum)
    cc_max: int
    nvswitch: bool
    nvs_bw: dict          # gpu id -> GB/s to the NVSwitch fabric
    nvl_pair: dict        # (id, id) -> GB/s of direct NVLink
    pcie_bw: dict         # gpu id -> GB/s the GPU's PCIe link delivers (max speed, trained width)
    numa: dict            # gpu id -> numa node or None
    nics: list            # [(name, GB/s, numa)]: rate from the topology, or the view's named default
    cpu_vendor: Optional[str]
    cpu_arch: str
    cc_known: bool = True


# The CPU architecture names of NCCL's tuning tables (tuning.cc: x86 / power / arm)
_TUNING_ARCH = {"x86_64": "x86", "ppc64": "power", "arm64": "arm"}


def node_facts(doc: Union[Topology, dict], gpus: Optional[Sequence[int]] = None) -> NodeFacts:
    topo = Topology.of(doc)
    if not topo.gpus:
        raise NothingToDo("topology has no GPUs")
    try:
        sel = topo.select(gpus)
    except KeyError as e:
        raise InputError(f"--gpus: no GPU {e.args[0]} in the topology",
                         expected="indices among " + ",".join(str(g.index) for g in topo.gpus)) from None
    if gpus is not None:
        order = {g.index: g for g in sel}
        sel = [order[i] for i in gpus]
    ids = [g.id for g in sel]
    ccs = [g.sm for g in sel if g.sm]
    cc_known = all(g.sm_source in ("record", "name") for g in sel)
    cc = min(ccs) if ccs else facts.DEFAULT_SM
    if not ccs:   # AMD GPUs (RCCL): NCCL's tables at NCCL's default stand in
        topo.assume(facts.assumption("sm", sm=cc, why=f"{sel[0].vendor} GPUs have none"))
    cc_max = max(ccs) if ccs else cc
    fab = topo.nvlink
    idset = set(ids)
    nvs_bw = {i: (m if m is not None else bw) for i, (_n, bw, m) in fab.nvs.items() if i in idset}
    nvl_pair = {k: (m if m is not None else bw) for k, (_n, bw, m) in fab.pairs.items()}
    pcie_bw: dict = {}
    pcie_links = {l.a: l for l in topo.links if l.kind == "pcie"}
    for g in sel:
        bw = g.pcie.usable_bw_GBps if g.pcie else None
        if bw is None and g.id in pcie_links:
            lk = pcie_links[g.id]
            bw = lk.measured_bw_GBps or lk.bw_GBps
        pcie_bw[g.id] = bw or topo.default_pcie_bw()
    numa = {g.id: g.numa_node for g in sel}
    nics = [(n.name, gbps_to_GBps(topo.nic_gbps(n)), n.numa_node) for n in topo.nics]
    # NCCL tunes for its first CPU node (ncclTopoCpuType: system->nodes[CPU].nodes[0])
    cpu = topo.cpu_for(min((c.numa for c in topo.cpus.values() if c.numa is not None), default=None))
    # an NVSwitch fabric for these GPUs only when every one of them reaches it (a GPU whose links were dropped does not)
    on_nvs = fab.nvswitch and bool(ids) and all(i in nvs_bw for i in ids)
    return NodeFacts(topo, sel, ids, cc, cc_max, on_nvs, nvs_bw, nvl_pair, pcie_bw, numa, nics,
                     cpu.vendor, _TUNING_ARCH.get(cpu.arch or "", "x86"), cc_known=cc_known)


def _ladder_pick(bw: float, ladder: Sequence[float]) -> Optional[float]:
    for s in ladder:
        if s <= bw + 1e-9:
            return float(s)
    return None


def _nvls_graph(f: NodeFacts) -> tuple[int, float]:
    """NVLS graph on one node (search.cc ncclTopoSearchTryNvls): one channel per
    head GPU (nGPUs, <= 32); each channel reserves bw on every GPU<->NVS link, twice on the head's, so
    a GPU link carries (nGPUs+1)*bw over all channels.  Returns (channels, bwIntra)."""
    n = len(f.ids)
    if not f.nvswitch or f.cc < 90 or n < 2:
        return 0, 0.0
    link = min(f.nvs_bw.get(i, 0.0) for i in f.ids)
    nch = min(32, n)
    s = _ladder_pick(link / (n + 1), speed_ladder(f.cc, False))
    return (nch, s) if s else (0, 0.0)


def summarize(doc: Union[Topology, dict], nodes: int = 1, gpus_per_node: Optional[int] = None,
              fabric_gbps: Optional[float] = None, gpus: Optional[Sequence[int]] = None,
              profile: Optional[timing.Profile] = None, transport=None,
              nvlink_domain: Optional[int] = None) -> CommGraph:
    """Build the :class:`CommGraph` of ``nodes`` identical copies of ``doc``'s node: NCCL's graphs
    (:func:`graphs`) with the achievable bandwidths of ``profile`` (:func:`timing.apply`; the
    documented defaults of ``transport`` when None: :mod:`gpucomm.planners.collectives.transport`).
    ``nvlink_domain``: trays per NVLink domain (:func:`graphs`)."""
    g, hw = graphs(doc, nodes=nodes, gpus_per_node=gpus_per_node, fabric_gbps=fabric_gbps, gpus=gpus,
                   transport=transport, nvlink_domain=nvlink_domain)
    if profile is None and transport is not None:
        from gpucomm.planners.collectives.transport import profile as transport_profile

        profile = transport_profile(transport)
    return timing.apply(g, hw, profile or timing.DEFAULT)


def graphs(doc: Union[Topology, dict], nodes: int = 1, gpus_per_node: Optional[int] = None,
           fabric_gbps: Optional[float] = None, gpus: Optional[Sequence[int]] = None,
           transport=None, nvlink_domain: Optional[int] = None) -> tuple[CommGraph, "timing.Hardware"]:
    """NCCL's graphs of ``nodes`` identical copies of ``doc``'s node and the hardware figures the
    achievable layer reads (the expensive part of :func:`summarize`, independent of any profile).

    Ring and tree graphs: :func:`gpucomm.planners.nccl.comm.nccl_reference` (NCCL's search
    reproduced; across nodes when the topology has NICs).  NVLS graph: :func:`_nvls_graph`.
    Multi-node: NICs from the topology (rate -- or the view's named default --, count, GPU<->NIC path
    type).  ``fabric_gbps`` is what one NIC delivers (Gb/s): it sets the achievable network
    bandwidth, and NCCL's graph rate only for NICs without a rate (a NIC's link rate is what NCCL
    itself sees and chooses algorithms by); with no NIC in the topology it stands for one NIC per node.

    Multi-node NVLink (GB200/GB300 NVL72): the trays NCCL fuses into one system (an MNNVL clique,
    ``nvlink_domain`` trays per NVLink domain, default NCCL's from the fabric info:
    :func:`gpucomm.planners.nccl.comm.tray_layout`) are one node of the graph -- its GPUs all of the
    clique's, their traffic at NVLink figures (NCCL's ring over the fused system, NVLS within it); only
    between cliques the NICs (all of the clique's trays' NICs).  A document of several hosts (NCCL's
    fused dump) is its hosts, ``nodes`` copies of it; ``gpus`` its indices, the same GPUs of every host.
    Raises TopologyError when several nodes are asked for and there is no network to use."""
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1 or nodes > MAX_NODES:
        raise InputError(f"--nodes {nodes!r}: must be a positive integer", expected=f"1 to {MAX_NODES}")
    topo = Topology.of(doc)
    if topo.multi_host:   # NCCL's fused dump of several trays: its first tray, nodes x its hosts
        from gpucomm.planners.nccl.comm import tray_layout
        from gpucomm.planners.nccl.pinning import first_host, host_gpus

        gpus = host_gpus(topo, gpus)
        if nvlink_domain is None:   # the dump's recorded fabric says which trays NCCL fuses
            lay = tray_layout(topo, nodes, gpus, nvlink_domain=None, tray_gpus=True)
            nvlink_domain = lay.hosts if lay.mnnvl else 1
        nodes, topo = nodes * len(topo.hosts), first_host(topo)
        if gpus_per_node is not None and gpus is not None and gpus_per_node != len(gpus):
            gpus_per_node = len(gpus)
        doc = topo
    return _graphs(doc, nodes, gpus_per_node, fabric_gbps, gpus, transport, nvlink_domain)


def _graphs(doc, nodes: int, gpus_per_node: Optional[int], fabric_gbps: Optional[float],
            gpus: Optional[Sequence[int]], transport, nvlink_domain: Optional[int]) -> tuple:
    """:func:`graphs` of one tray's document ``doc`` (``nodes``: trays)."""
    if fabric_gbps is not None and (isinstance(fabric_gbps, bool) or not isinstance(fabric_gbps, (int, float))
                                    or not math.isfinite(fabric_gbps) or fabric_gbps <= 0 or fabric_gbps > MAX_FABRIC_GBPS):
        raise InputError(f"--fabric-gbps {fabric_gbps!r}: must be a positive number of Gb/s")
    topo = Topology.of(doc)
    n_doc = len(topo.gpus)
    if gpus_per_node is not None:
        if not isinstance(gpus_per_node, int) or isinstance(gpus_per_node, bool) or gpus_per_node < 1:
            raise InputError(f"--gpus-per-node {gpus_per_node!r}: must be a positive integer")
        if gpus is None:
            if gpus_per_node > n_doc:
                raise PlanInfeasible(f"--gpus-per-node {gpus_per_node}: the topology has {n_doc} GPUs")
            gpus = [x.index for x in topo.gpus][:gpus_per_node]
        elif len(gpus) != gpus_per_node:
            raise InputError(f"--gpus lists {len(gpus)} GPUs but --gpus-per-node is {gpus_per_node}")
    ref_topo = _topology_for_reference(topo, fabric_gbps)
    f = node_facts(ref_topo, gpus)
    notes: list[str] = []
    from gpucomm.planners.nccl.comm import tray_layout
    from gpucomm.planners.nccl.settings import NcclSettings

    settings = NcclSettings.from_env()
    idx = [x.index for x in f.gpus]
    trays = nodes
    try:
        lay = tray_layout(ref_topo, trays, idx, settings, nvlink_domain, tray_gpus=True)
    except TopologyError:
        lay = None           # several NVLink domains and no NIC: said below (or --fabric-gbps stands for one)
    H = lay.hosts if lay is not None else 1   # trays of one NCCL system (an MNNVL clique), 1 without MNNVL
    nodes = trays // H       # from here on: NCCL's systems, joined by the NICs
    g = len(f.ids) * H       # GPUs of one system
    if lay is not None and H > 1:
        notes.append(f"multi-node NVLink: {lay.note}; {trays} trays = {nodes} system(s) of {g} GPUs, joined "
                     "by their NICs" if nodes > 1 else f"multi-node NVLink: {lay.note}")

    # ---- network (per node)
    nic_bw = None     # one NIC's line rate as NCCL sees it (GB/s)
    n_nics = 0
    if nodes > 1:
        if not f.nics and fabric_gbps is None:
            raise TopologyError(f"topology has no NICs; --nodes {nodes} needs a network (or pass --fabric-gbps)")
        if fabric_gbps is not None:
            per_nic = gbps_to_GBps(fabric_gbps)
            n_nics = max(1, len(f.nics))
            if not f.nics:
                notes.append(f"no NICs in the topology: one {fabric_gbps:g} Gb/s NIC per node assumed (--fabric-gbps)")
        else:
            rates = [r for _, r, _ in f.nics]
            top = max(rates)
            per_nic, n_nics = top, len([r for r in rates if r >= top / 2])   # ignore management/storage ports
        n_nics *= H       # an MNNVL clique's NICs: those of all its trays
        nic_bw = per_nic

    # ---- NCCL's graphs
    from gpucomm.planners.nccl.comm import nccl_comm, nccl_reference, reference_dict

    multi_ref = nodes > 1 and bool(f.nics)
    comm = nccl_comm(ref_topo, nodes=trays if multi_ref else H, gpus=idx, settings=settings,
                     nvlink_domain=H if H > 1 else nvlink_domain)
    ref = reference_dict(comm)
    if ref.get("fallback"):
        notes.append("NCCL's search finds no ring here and falls back to 1 channel at 0.1 GB/s")
    used = {n for r in ref.get("rings") or [] if isinstance(r, dict) for n in r.get("nets") or []}
    used_names = {str(n).split("@")[0] for n in used}   # NCCL's model names a NIC of tray h ``name@h``
    if multi_ref and fabric_gbps is not None:
        # --fabric-gbps says what each NIC delivers, not which NICs carry the job: the same ones as without it
        top = max(r for _, r, _ in f.nics)
        n_nics = len(used) if used else len([r for _, r, _ in f.nics if r >= top / 2]) * H
    if multi_ref and used and fabric_gbps is None:
        n_nics = len(used)   # the NICs NCCL's rings leave and enter the node through
        nic_bw = (min(r for name, r, _ in f.nics if name in used_names) if any(nm in used_names for nm, _, _ in f.nics)
                  else nic_bw)
    # all_to_all's NICs: each GPU's local NICs (NCCL's p2p channels), which an MNNVL clique's rings do not all use
    p2p_n_nics = p2p_line = None
    if multi_ref:
        rate = {name: r for name, r, _ in f.nics}
        p2p = []          # the line rate of each: a NIC of tray h is ``name@h``, NCCL's fused ports ``a+b``
        for n in comm.p2p_nets():
            parts = n.split("@")[0].split("+")
            if all(p in rate for p in parts):
                p2p.append(sum(rate[p] for p in parts))
        if p2p:
            p2p_n_nics = len(p2p)
            p2p_line = None if fabric_gbps is not None else min(p2p)
    if nodes > 1 and fabric_gbps is None and f.nics:
        top = max(r for _, r, _ in f.nics)
        carrying = used_names or {name for name, r, _ in f.nics if r >= top / 2}   # the NICs the job's traffic takes
        plain = sorted(n.name for n in topo.nics if n.name in carrying and not n.rdma)
        if plain and len(plain) == len(carrying) and transport is not None:
            notes.append(f"{', '.join(plain)}: not RDMA devices, as far as the topology says: NCCL reaches them "
                         f"through a net plugin (--transport plugin:NAME, e.g. aws-ofi-nccl) or its TCP socket "
                         f"transport (--transport socket); the transport line says which is assumed")
        elif plain and len(plain) == len(carrying):
            notes.append(f"{', '.join(plain)}: not RDMA devices, as far as the topology says: NCCL reaches "
                         f"them through a net plugin (e.g. aws-ofi-nccl; assumed here: the line rate x "
                         f"NET_EFFICIENCY) or, without one, its TCP socket transport (far slower: "
                         f"~{SOCKET_GBPS:g} Gb/s per 200 Gb/s NIC on Polaris, --fabric-gbps); "
                         f"gpucomm calibrate fits what yours delivers")
    nch = max(1, int(ref.get("search_channels") or ref["channels"]))
    bw_intra = float(ref.get("bw_intra") or 0.1)
    bw_inter = float(ref.get("bw_inter") or bw_intra)
    type_intra = str(ref.get("type_intra") or ("LOC" if g == 1 else "SYS")).upper()
    type_inter = str(ref.get("type_inter") or "PIX").upper()
    tree = ref.get("tree") if isinstance(ref.get("tree"), dict) and not ref["tree"].get("fallback") else None
    tree_pattern = PATTERN_NAMES[TREE if g == 1 else BALANCED_TREE]
    if tree and str(tree.get("pattern", "")).upper() == PATTERN_NAMES[TREE]:
        tree_pattern = PATTERN_NAMES[TREE]
    pcie_min = min(f.pcie_bw[i] for i in f.ids)
    if nodes > 1 and not multi_ref:
        # No NIC in the topology (fabric_gbps only): NCCL's inter-node ring leaves/enters every node
        # through a NIC at a ladder speed <= min(NIC, GPU PCIe), one channel per NIC (connect.cc).
        speed = _ladder_pick(min(nic_bw, pcie_min), speed_ladder(f.cc, True)) or 0.12
        nch = max(1, min(n_nics, int((nch * bw_intra if g > 1 else speed) // speed) or 1))
        bw_intra = bw_inter = speed
        type_inter = "PHB"
        tree = None

    # ---- hardware figures of the achievable layer (timing.apply)
    if g == 1:
        intra_raw, intra_pcie = None, False
    elif path_rank(type_intra) <= path_rank("NVB"):
        # NVLink: NCCL's own single-node ring bandwidth (the multi-node graph's speed is NIC-bound)
        one = ref if nodes == 1 else nccl_reference(ref_topo, gpus=idx, nodes=H, settings=settings,
                                                    nvlink_domain=H if H > 1 else None)
        intra_raw, intra_pcie = int(one.get("search_channels") or one["channels"]) * float(one.get("bw_intra") or 0.1), False
    else:
        intra_raw, intra_pcie = pcie_min, True
        notes.append(f"PCIe ring: busbw = {PCIE_RING_EFFICIENCY} x {pcie_min:g} GB/s (PCIE_RING_EFFICIENCY)")

    # ---- per-GPU bandwidth to node peers (all_to_all) and to a neighbour (send_recv)
    if g == 1:
        gpu_bw = p2p_bw = None
    elif f.nvswitch:
        gpu_bw = p2p_bw = min(f.nvs_bw[i] for i in f.ids)
    else:
        nvl_tot = [sum(bw for (a, b), bw in f.nvl_pair.items() if i in (a, b) and a in f.ids and b in f.ids)
                   for i in f.ids]
        full_mesh = all(((a, b) if a < b else (b, a)) in f.nvl_pair for a in f.ids for b in f.ids if a != b)
        gpu_bw = min(nvl_tot) if full_mesh and min(nvl_tot) > 0 else PCIE_RING_EFFICIENCY * pcie_min
        hop = []
        for k in range(g):
            a, b = f.ids[k], f.ids[(k + 1) % g]
            nv = f.nvl_pair.get((a, b) if a < b else (b, a), 0.0)
            hop.append(nv if nv > 0 else PCIE_RING_EFFICIENCY * pcie_min)
        p2p_bw = min(hop)

    if nodes == 1 or multi_ref:
        # NCCL's own NVLS graph (search.cc ncclTopoCompute: one channel per head GPU; pass 2 raises bwInter,
        # to the top of the ladder on one node where no NET limits it -- what capture 09, HGX H100, 482 GB/s
        # measured vs 476 modelled, supports), the one ncclTopoTuneModel reads
        nv = ref.get("nvls") if isinstance(ref.get("nvls"), dict) else None
        nvls_ch = int(nv["search_channels"]) if nv else 0
        nvls_bw = float(nv["bw_intra"]) if nv else 0.0
        nvls_inter = float(nv["bw_inter"]) if nv else 0.0
    else:
        # no NIC in the topology (--fabric-gbps): NCCL's search never ran across nodes; the single-node
        # NVLS graph with bwInter at the NIC's ladder speed
        nvls_ch, nvls_bw = _nvls_graph(f)
        nvls_inter = (_ladder_pick(min(nic_bw, pcie_min), speed_ladder(f.cc, True)) or 0.0) if nvls_ch else 0.0
    # NCCL's node count: a node it splits into NIC-joined domains (ncclTopoCheckNet) counts as several
    tune_nodes = int(ref.get("nccl_nodes") or 1) * (1 if (nodes == 1 or multi_ref) else nodes)
    graph = CommGraph(
        n_ranks=nodes * g, n_nodes=nodes, gpus_per_node=g, channels=nch, bw_intra=bw_intra,
        bw_inter=bw_inter, type_intra=type_intra, type_inter=type_inter if tune_nodes > 1 else "PIX",
        nccl_nodes=tune_nodes if tune_nodes != nodes else None,
        nccl_tuning=comm.tuning if (nodes == 1 or multi_ref) else None,
        cc=f.cc, cc_max=f.cc_max, nvls=bool(nvls_ch), cpu_vendor=f.cpu_vendor, cpu_arch=f.cpu_arch,
        same_channels=bool(ref.get("same_channels", True)),
        tree_channels=int(tree["search_channels"]) if tree else None,
        tree_bw_intra=float(tree["bw_intra"]) if tree else None,
        tree_bw_inter=float(tree["bw_inter"]) if tree else None,
        tree_pattern=tree_pattern,
        nvls_channels=nvls_ch, nvls_bw_intra=nvls_bw, nvls_bw_inter=nvls_inter,
        ll128_c2c=bool(settings.ll128_c2c), trays_per_node=H,
        notes=tuple(notes + [a for a in ref_topo.all_assumptions(nics=nodes > 1) if a not in notes]),
    )
    hw = timing.Hardware(nodes=nodes, gpus_per_node=g, intra_bus_bw=intra_raw, intra_is_pcie=intra_pcie,
                         pcie_bw=pcie_min, n_nics=n_nics,
                         nic_line_GBps=nic_bw if nodes > 1 and fabric_gbps is None else None,
                         fabric_GBps=gbps_to_GBps(fabric_gbps) if nodes > 1 else None,
                         gpu_bw=gpu_bw, p2p_bw=p2p_bw, p2p_n_nics=p2p_n_nics, p2p_nic_line_GBps=p2p_line)
    if transport is not None and nodes > 1 and fabric_gbps is None:
        # the inter-node transport's share of the line rate (collectives/transport.py)
        from gpucomm.planners.collectives.transport import hardware as transport_hardware

        hw = transport_hardware(hw, transport, graph.type_inter)
    return graph, hw


def _topology_for_reference(topo: Topology, fabric_gbps: Optional[float]) -> Topology:
    """The topology NCCL's search sees: ``topo`` itself, or with ``fabric_gbps`` a view in which NICs
    without a known rate have that one.  A NIC that has a rate keeps it: NCCL's algorithm choice
    sees the link speed the net plugin reports (e.g. 200 Gb/s for a Slingshot NIC under the TCP
    socket transport) even when the transport delivers less."""
    if fabric_gbps is None or all(n.rate_gbps for n in topo.nics):
        return topo
    return topo.with_nic_rate(fabric_gbps)


# --------------------------------------------------------------------------------------------
# The layout-cost entry: predict's model for the groups of a rank layout
class LayoutCost:
    """Seconds of collectives on groups of GPUs of one node type, as ``gpucomm plan --model`` ranks
    rank layouts by them: for a group of the local GPUs ``gpus`` on each of ``nodes`` identical nodes,
    exactly what ``gpucomm predict TOPO --gpus GPUS --nodes NODES --size S`` predicts --
    :func:`summarize` (NCCL's graphs of the group and the achievable layer under ``profile``, the
    ``--calibration`` profile) then :func:`predict` (the algorithm and protocol NCCL's tuning model
    picks and the time they take).  NCCL's graphs of each (GPUs, nodes) are built once.

    ``options`` are :func:`summarize`'s keyword options as predict passes them (``fabric_gbps``, and
    any transport or efficiency choice summarize takes): such a choice enters here, once, for both
    commands.  One policy is plan's own: a group across the nodes of a topology without any network
    device, where predict asks for ``--fabric-gbps``, runs over NCCL's socket transport on the one
    interface NCCL always has (:data:`gpucomm.probes.facts.SOCKET_NIC_GBPS`), named as an assumption.

    >>> from gpucomm.probes.load import load_topology
    >>> topo = Topology.of(load_topology("example:hgx-h100"))
    >>> lc = LayoutCost(topo)
    >>> t = lc.seconds("all_reduce", 1 << 30, [0, 1, 2, 3, 4, 5, 6, 7])
    >>> row = predict(summarize(topo), "all_reduce", [1 << 30], dtype_bytes=2)[0]
    >>> t == row["time_us"] * 1e-6, lc.seconds("all_reduce", 1 << 30, [0]) == 0.0
    (True, True)
    """

    def __init__(self, doc: Union[Topology, dict], profile: Optional[timing.Profile] = None, **options) -> None:
        self.topo = Topology.of(doc)
        self.profile = profile
        self.options = options
        # predict's profile: the calibration's, else the transport's defaults (as build_prediction)
        self._timing = profile
        if profile is None and options.get("transport") is not None:
            from gpucomm.planners.collectives.transport import profile as transport_profile

            self._timing = transport_profile(options["transport"])
        self._graphs: dict = {}
        self._times: dict = {}

    def has_graph(self, gpus: Sequence[int], nodes: int = 1, domain: Optional[int] = None) -> bool:
        """True when NCCL's graphs of this group are built (timing it costs no search)."""
        return (tuple(gpus), int(nodes), domain) in self._graphs

    def graph(self, gpus: Sequence[int], nodes: int = 1, domain: Optional[int] = None) -> CommGraph:
        """:func:`summarize` of the group (cached); ``domain``: how many of its nodes share one NVLink
        domain, where the caller knows how the group lies on the job's domains."""
        key = (tuple(gpus), int(nodes), domain)
        g = self._graphs.get(key)
        if g is None:
            opts = dict(self.options)
            if domain is not None:
                # NCCL's systems of a group over domains: equal ones of at most ``domain`` trays
                from gpucomm.planners.nccl.mnnvl import equal_domains

                opts["nvlink_domain"] = equal_domains(key[1], domain)
            elif opts.get("nvlink_domain") is not None:
                # a group over n consecutive nodes in domains of K: gcd(n, K) of its nodes share one
                opts["nvlink_domain"] = math.gcd(key[1], int(opts["nvlink_domain"]))
            if key[1] > 1 and not self.topo.nics and opts.get("fabric_gbps") is None:
                opts["fabric_gbps"] = facts.SOCKET_NIC_GBPS
                self.topo.assume(facts.assumption("no-nic"))
            g = self._graphs[key] = summarize(self.topo, nodes=key[1], gpus=list(key[0]), profile=self.profile, **opts)
        return g

    def seconds(self, collective: str, nbytes: float, gpus: Sequence[int], nodes: int = 1,
                dtype_bytes: int = 2, domain: Optional[int] = None) -> float:
        """Seconds of one ``collective`` of ``nbytes`` (nccl-tests' size) on the group: predict's
        ``time_us`` (0 for a group of one GPU or nothing to move); ``domain`` as :meth:`graph`."""
        gpus = tuple(gpus)
        if len(gpus) * nodes <= 1 or nbytes <= 0:
            return 0.0
        size = max(1, int(nbytes))
        key = (collective, size, gpus, int(nodes), dtype_bytes, domain)
        t = self._times.get(key)
        if t is None:
            row = predict(self.graph(gpus, nodes, domain), collective, [size], dtype_bytes=dtype_bytes,
                          profile=self._timing)[0]
            t = self._times[key] = row["time_us"] * 1e-6
        return t


def summary_dict(g: CommGraph) -> dict:
    """JSON-friendly view of a CommGraph (for ``predict --format json``)."""
    out = {}
    for k, v in g.__dict__.items():
        if k == "nccl_tuning":   # NCCL's communicator, not a figure of the summary
            continue
        if isinstance(v, float):
            v = round(v, 4)
        if isinstance(v, tuple):
            v = list(v)
        out[k] = v
    return out


__all__ = [
    "PCIE_RING_EFFICIENCY", "NET_EFFICIENCY",
    "predict", "summarize", "node_facts", "summary_dict", "LayoutCost",
]
