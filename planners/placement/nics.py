"""The NICs of a node as placement uses them: which NICs carry collectives (:func:`compute_nics`),
each GPU's nearest NIC(s) by NCCL's path (rails, :func:`nearest_nics`), nvidia-smi's levels between a
GPU and a NIC, and which NIC names can go into NCCL_IB_HCA / NCCL_SOCKET_IFNAME."""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

from gpucomm.probes.model import natural_key as _natural
from gpucomm.probes.model import normalize_bus_id
from gpucomm.probes.topology import GPU, NIC, Topology

from gpucomm.planners.nccl import names as nccl_names

NIC_LEVEL_RANK = {"X": 0, "PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}
# For NCCL_NET_GDR_LEVEL: nvidia-smi code -> NCCL path name (NODE is PHB for NCCL, nvmlGpuTopologyLevel_t vs paths.cc).
SMI_TO_NCCL_LEVEL = {"PIX": "PIX", "PXB": "PXB", "PHB": "PHB", "NODE": "PHB", "SYS": "SYS"}


def nic_has_device_name(name: Optional[str]) -> bool:
    """False for a placeholder that stands in for a NIC's name when the source did not give one:
    the PCI bus id of an NCCL XML skeleton's bare ``<pci>`` NIC, or nvidia-smi's ``NIC<i>`` column
    label when its NIC Legend is missing or garbled.  Such a name cannot go into NCCL_IB_HCA or
    NCCL_SOCKET_IFNAME."""
    return bool(name) and normalize_bus_id(name) is None and not re.fullmatch(r"NIC\d+", name)


def compute_nics(nics: Dict[str, NIC]) -> Dict[str, NIC]:
    """The NICs collectives should use, by name: RDMA NICs at >= 3/4 of the fastest RDMA rate (drops
    the management port and slower storage/front-end NICs; a NIC of unknown rate is kept).  Without
    any RDMA NIC, every NIC (TCP sockets)."""
    rdma = {k: v for k, v in nics.items() if v.rdma}
    if not rdma:
        return dict(nics)
    rates = [v.rate_gbps for v in rdma.values()]
    top = max((r for r in rates if r), default=None)
    if top is None:
        return rdma
    return {k: v for k, v in rdma.items() if (v.rate_gbps or top) >= 0.75 * top}


def _nic_signature(nic: NIC) -> tuple:
    return ((nic.link_layer or "").lower() or None, nic.rate_gbps)


def nearest_nics(topo: Topology, gpus: List[GPU], nics: Dict[str, NIC], ns) -> Tuple[Dict[int, List[str]], Dict[int, str]]:
    """Each GPU's nearest NIC(s): the best type of NCCL's path from the NIC (its network device in
    NCCL's system ``ns``; the ports NCCL fuses share theirs) to the GPU wins (PIX < PXB < PHB < SYS,
    a NIC without GPUDirect RDMA through the CPU, as NCCL routes it); when several GPUs share the
    same closest set (two GPUs behind one switch with two NICs, or all GPUs of a NUMA node
    equidistant from its NICs) they are dealt out in order -- the k-th GPU gets the k-th NIC, and
    more than one each only when they divide evenly -- which is the rail assignment NCCL's
    rail-optimised networks expect (NCCL_CROSS_NIC, nccl#1591).  A GPU that alone owns several NICs
    keeps those with the same link layer and rate as its first (a second HCA of the rail), not a
    storage NIC.  The level reported per GPU is nvidia-smi's code to its first NIC (the matrix's, else
    by NUMA node)."""
    if not nics:
        return {g.index: [] for g in gpus}, {}
    names = sorted(nics, key=_natural)
    net_of = {part: n for n in ns.nets for part in ns.nodes[n]["name"].split("+")}
    best: Dict[int, Tuple[int, List[str], str]] = {}
    for g in gpus:
        gid = ns.gpu_of_index(g.index)
        ranked = []
        for n in names:
            code = topo.code(g.key, n)
            if code is None or code not in NIC_LEVEL_RANK:
                gn, nn = g.numa_node, nics[n].numa_node
                if gn is not None and nn is not None and gn >= 0 and nn >= 0:
                    code = "NODE" if gn == nn else "SYS"
                else:
                    code = "SYS"
            p = ns.path(net_of[n], gid) if n in net_of and gid is not None else None
            ranked.append((nccl_names.path_rank(p.type) if p is not None else len(nccl_names.PATH_NAMES), n, code))
        top = min(r[0] for r in ranked)
        tie = [r[1] for r in ranked if r[0] == top]
        code = next(r[2] for r in ranked if r[0] == top)
        best[g.index] = (top, tie, code)
    # A NIC that is some GPU's closer neighbour (its rail NIC) is not handed to a GPU that only
    # sees it from further away, unless that GPU has nothing else (then it shares one NIC): a GPU
    # whose own NIC is down must not collect the rail NICs of its whole NUMA node.
    owner_rank: Dict[str, int] = {}
    for idx, (top, tie, _) in best.items():
        for n in tie:
            owner_rank[n] = min(owner_rank.get(n, 99), top)
    shared_only: Dict[int, bool] = {}
    for idx, (top, tie, code) in list(best.items()):
        free = [n for n in tie if owner_rank[n] >= top]
        shared_only[idx] = not free
        best[idx] = (top, free or tie, code)
    # Group GPUs by identical tie sets; deal NICs out within each group.
    groups: Dict[tuple, List[int]] = {}
    for idx, (_, tie, _) in best.items():
        groups.setdefault(tuple(tie), []).append(idx)
    out: Dict[int, List[str]] = {}
    levels: Dict[int, str] = {}
    for tie, members in groups.items():
        members = sorted(members)
        k = len(members)
        for pos, idx in enumerate(members):
            if len(tie) >= k and not shared_only[idx]:
                # Rails are symmetric: several NICs each only when they divide evenly between the
                # GPUs (2 HCAs per GPU); an odd one out (a front-end NIC under the same host bridge,
                # Azure NDv4's 9th mlx5) is left to nobody rather than doubling one GPU's share.
                mine = list(tie[pos::k]) if len(tie) % k == 0 else [tie[pos]]
            else:
                mine = [tie[pos % len(tie)]]
            sig = _nic_signature(nics[mine[0]])
            mine = [mine[0]] + [n for n in mine[1:] if _nic_signature(nics[n]) == sig]
            out[idx] = mine
            levels[idx] = best[idx][2]
    return out, levels
