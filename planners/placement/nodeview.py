"""Placement's view of one node (``gpucomm plan``, ``select``): pair bandwidth between GPUs (NCCL's
path between them in NCCL's system of the node, planners/nccl/sysview.py, weighed by its type), the
nvidia-smi code of each pair (NV#, PIX, PXB, PHB, NODE, SYS), NVLink domains, the nearest NIC(s) of
each GPU (:mod:`gpucomm.planners.placement.nics`) and the NUMA-local CPUs -- all read from the typed
:class:`~gpucomm.probes.topology.Topology`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from gpucomm.probes.errors import NothingToDo, PlanInfeasible
from gpucomm.probes.model import format_cpulist
from gpucomm.probes.model import natural_key as _natural
from gpucomm.probes.topology import GPU, NIC, Topology, nv_count

from gpucomm.planners.nccl import names as nccl_names
from gpucomm.planners.placement.nics import compute_nics, nearest_nics

# Relative cost of the paths NCCL takes between two GPUs, by NCCL's path type, for ranking GPU sets
# (not a prediction; the cost model does timing): NVLink (NVL) and C2C at NCCL's bandwidth; NVB (NCCL
# relays through a third GPU, over two NVLinks the relay's own traffic needs too) at half; P2P over
# PCIe (NCCL_P2P_LEVEL default PXB, paths.cc) at the link rate, a little less through a switch
# hierarchy; PHB/SYS go through host memory (NCCL routes them through the CPU: SHM), SYS also over
# the CPU-CPU link (already NCCL's path bandwidth); pairs NCCL connects through the NICs (PATH_NET)
# and anything else least.
_N = nccl_names
PATH_BW_FACTOR = {_N.PATH_LOC: 1.0, _N.PATH_NVL: 1.0, _N.PATH_NVB: 0.5, _N.PATH_C2C: 1.0, _N.PATH_PIX: 1.0,
                  _N.PATH_PXB: 0.9, _N.PATH_P2C: 0.9, _N.PATH_PXN: 0.9, _N.PATH_PHB: 0.6, _N.PATH_SYS: 0.35,
                  _N.PATH_NET: 0.3, _N.PATH_DIS: 0.0}


@dataclass
class NodeView:
    """Placement's view of one node: GPU pair bandwidths (from NCCL's paths) and nvidia-smi levels,
    NVLink domains, each GPU's NICs, the CPUs of each NUMA node -- derived from the typed Topology
    (``topo``) and NCCL's system of it."""

    topo: Topology
    gpus: List[GPU]                        # the GPUs ranks go on, in index order
    index: List[int]                       # their NVML indices
    bw: Dict[Tuple[int, int], float]       # (gpu index a, gpu index b) -> relative GB/s (PATH_BW_FACTOR)
    level: Dict[Tuple[int, int], str]      # matrix code between two GPUs (NV#, PIX, ..., SYS)
    nvlink_domains: List[List[int]]        # connected components of NVLink, by GPU index
    nvswitch: bool                         # GPUs meet on NVSwitch(es): uniform all-to-all NVLink
    gpu_nics: Dict[int, List[str]]         # GPU index -> nearest NIC names (primary first)
    gpu_nic_level: Dict[int, str]          # GPU index -> matrix code to its primary NIC
    nics: Dict[str, NIC]                   # NICs with an active port (or no port state), by name
    numa_cpus: Dict[int, List[int]]        # NUMA id -> cpus
    all_cpus: List[int]
    p2p_disabled: List[Tuple[int, int]]    # pairs NVML reports without P2P
    mig: List[int]                         # GPU indices with MIG enabled
    notes: List[str] = field(default_factory=list)
    cache: Dict[tuple, object] = field(default_factory=dict, repr=False)  # per-view memo (cost model graphs)

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    def gpu(self, index: int) -> GPU:
        return self.gpus[self.index.index(index)]

    def pair_bw(self, a: int, b: int) -> float:
        if a == b:
            return float("inf")
        return self.bw[(a, b)]

    def nvlink_bw_per_gpu(self, index: int) -> float:
        """Total NVLink bandwidth of a GPU (GB/s, one direction), 0 without NVLink: its NVSwitch
        uplink, or the sum of its direct bonds (Topology.nvlink)."""
        gid = self.topo.gpu(index).id
        fab = self.topo.nvlink
        if gid in fab.nvs:
            return fab.nvs[gid][1]
        return sum(v[1] for k, v in fab.pairs.items() if gid in k) + \
            sum(v[1] for k, v in fab.cpu.items() if k[0] == gid)

    def pcie_bw(self, index: int) -> float:
        """GB/s of the GPU's PCIe link (max speed, trained width; the view's default when unknown)."""
        return gpu_pcie_bw(self.topo, index)

    def memory_bytes(self) -> Optional[int]:
        mems = [g.memory_bytes for g in self.gpus]
        if not mems or any(not isinstance(m, int) or m <= 0 for m in mems):
            return None
        return min(mems)

    def nic_GBps(self, name: str) -> Optional[float]:
        """A NIC's rate in GB/s (the view's named default when unknown); None for an unknown NIC."""
        nic = self.topo.nic(name)
        return self.topo.nic_gbps(nic) / 8.0 if nic else None


def pcie_level(topo: Topology, a: GPU, b: GPU) -> Optional[str]:
    """nvidia-smi's PCIe-level code between two GPUs even when NVLink hides it in the matrix (NVML's
    view, what go-gpuallocator scores): the matrix's code, else the PCI tree's
    (:meth:`Topology.pci_code`); None when the tree does not place them."""
    code = topo.code(a.key, b.key)
    if code and not nv_count(code) and code not in ("X",):
        return code
    return topo.pci_code(a, b)


def node_view(doc, gpu_subset: Optional[Iterable[int]] = None) -> NodeView:
    """Build the placement view of one topology (a :class:`Topology` or a document).  ``gpu_subset``
    restricts it to some GPU indices (``--gpus``/``select``).  Raises NothingToDo when there are no
    GPUs."""
    topo = Topology.of(doc)
    try:
        gpus = topo.select(gpu_subset)
    except KeyError as e:
        raise PlanInfeasible(f"GPU index {e.args[0]} does not exist (the topology has GPUs "
                             f"{format_cpulist([g.index for g in topo.gpus]) or 'none'})") from None
    if not gpus:
        raise NothingToDo("the topology has no GPUs to place ranks on")
    index = [g.index for g in gpus]
    notes: List[str] = []
    bw: Dict[Tuple[int, int], float] = {}
    level: Dict[Tuple[int, int], str] = {}
    p2p_disabled: List[Tuple[int, int]] = []
    mig = [g.index for g in gpus if g.mig]
    fab = topo.nvlink
    by_id = {g.id: g for g in gpus}
    for g in gpus:
        for other_id, status in g.p2p.items():
            o = by_id.get(other_id)
            if o is None or str(status).upper() in ("OK", "SUPPORTED", "ENABLED"):
                continue
            # NVML says "not supported" for every SYS pair of a dual-socket box; it only matters
            # where NCCL would try P2P: NVLink or PCIe up to PXB (NCCL_P2P_LEVEL default).
            code = topo.code(g.key, o.key) or ""
            if not (nv_count(code) or code in ("PIX", "PXB")):
                continue
            key = tuple(sorted((g.index, o.index)))
            if key not in p2p_disabled:
                p2p_disabled.append(key)
    ns = _nccl_system(topo, index, notes)
    for a in gpus:
        for b in gpus:
            if a is b:
                continue
            ia, ib = a.index, b.index
            level[(ia, ib)] = topo.code(a.key, b.key) or pcie_level(topo, a, b) or "N/A"
            # the path NCCL takes between the two (P2P, NVB through a peer, or through the CPU where
            # P2P is not possible), at its bandwidth (measured where the topology has it)
            p = ns.path(ns.gpu_of_index(ia), ns.gpu_of_index(ib))
            val = p.bw * PATH_BW_FACTOR[nccl_names.path_rank(p.type)] if p is not None else 0.0
            if ia in mig or ib in mig:
                # No P2P between MIG slices (NCCL does not know MIG): SHM through host memory at best.
                val = min(val, gpu_pcie_bw(topo, ia) * PATH_BW_FACTOR[nccl_names.PATH_PHB])
            bw[(ia, ib)] = round(val, 4)
    # NVLink domains (connected components over NVLink, MIG GPUs left out).
    ids = [g.id for g in gpus if g.index not in mig]
    idx_of = {g.id: g.index for g in gpus}
    domains = sorted((sorted(idx_of[x] for x in d) for d in fab.domains(ids)), key=lambda c: c[0])
    nvswitch = fab.nvswitch
    numa_cpus = topo.numa_cpus()
    all_cpus = sorted({c for cs in numa_cpus.values() for c in cs})
    nics = {n.name: n for n in topo.nics if n.up}
    down = sorted((n.name for n in topo.nics if not n.up), key=_natural)
    if down:
        notes.append("NIC(s) with no ACTIVE port left out: " + ", ".join(down))
    gpu_nics, gpu_nic_level = nearest_nics(topo, gpus, compute_nics(nics), ns)
    return NodeView(topo=topo, gpus=gpus, index=index, bw=bw, level=level, nvlink_domains=domains,
                    nvswitch=nvswitch, gpu_nics=gpu_nics, gpu_nic_level=gpu_nic_level, nics=nics,
                    numa_cpus=numa_cpus, all_cpus=all_cpus, p2p_disabled=sorted(p2p_disabled), mig=mig,
                    notes=notes)


def _nccl_system(topo: Topology, index: List[int], notes: List[str]):
    """NCCL's system of the view's GPUs (planners/nccl/sysview.py: the system and paths predict's model
    of NCCL runs on).  Where NCCL would refuse to start (P2P disabled between NVLinked GPUs), the system
    NCCL_IGNORE_DISABLED_P2P=1 gives (P2P off there), with a note."""
    from gpucomm.planners.nccl.ncclxml import NcclFailed
    from gpucomm.planners.nccl.settings import NcclSettings
    from gpucomm.planners.nccl.sysview import node_system

    s = NcclSettings.from_env()
    gpus = None if sorted(index) == sorted(g.index for g in topo.gpus) else index   # the whole node: as it is
    try:
        return node_system(topo, gpus, s)
    except NcclFailed as e:
        if s.ignore_disabled_p2p:
            raise
        notes.append(f"{e}; GPU pairs ranked as with NCCL_IGNORE_DISABLED_P2P=1 (no P2P there)")
        return node_system(topo, gpus, s.replace(ignore_disabled_p2p=1))


def gpu_pcie_bw(topo: Topology, index: int) -> float:
    """GB/s of a GPU's PCIe link (max speed, trained width; the view's default when unknown)."""
    p = topo.gpu(index).pcie
    bw = p.usable_bw_GBps if p else None
    return bw if bw is not None else topo.default_pcie_bw()


RING_EXACT_MAX = 8   # best_ring enumerates every cycle up to this many GPUs (7!/2 = 2520 for 8)


def best_ring(view: NodeView, gpus: Sequence[int]) -> Tuple[float, bool]:
    """(narrowest hop of the best ring through ``gpus``, whether that ring is all NVLink).

    A ring collective runs at the pace of its narrowest hop, and NCCL searches for the ring (the
    Hamiltonian cycle) whose hops are widest -- not the slowest *pair* of the group: on a DGX-1's
    hybrid cube mesh an 8-GPU ring stays on NVLink although some pairs only meet over SYS.
    Exact up to :data:`RING_EXACT_MAX` GPUs (ties prefer more NVLink hops); beyond that the slowest
    pair (a lower bound)."""
    g = list(gpus)
    if len(g) < 2:
        return float("inf"), False
    key = ("best_ring", tuple(sorted(g)))
    hit = view.cache.get(key)
    if hit is not None:
        return hit  # type: ignore[return-value]

    def is_nv(a: int, b: int) -> bool:
        return bool(nv_count(view.level.get((a, b))))

    if len(g) == 2:
        out = (view.pair_bw(g[0], g[1]), is_nv(g[0], g[1]))
    elif len(g) <= RING_EXACT_MAX:
        import itertools

        first, rest = g[0], g[1:]
        best = None
        for perm in itertools.permutations(rest):
            if perm[0] > perm[-1]:
                continue  # a cycle and its mirror are the same ring
            cyc = (first,) + perm
            hops = [(cyc[i], cyc[(i + 1) % len(cyc)]) for i in range(len(cyc))]
            bw = min(view.pair_bw(a, b) for a, b in hops)
            nv = sum(1 for a, b in hops if is_nv(a, b))
            if best is None or (bw, nv) > best[:2]:
                best = (bw, nv, len(hops))
        out = (best[0], best[1] == best[2])
    else:
        pairs = [(a, b) for i, a in enumerate(g) for b in g[i + 1:]]
        out = (min(view.pair_bw(a, b) for a, b in pairs), all(is_nv(a, b) for a, b in pairs))
    view.cache[key] = out
    return out
