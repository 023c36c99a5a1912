"""Rank placement: Megatron-style rank order, groups per parallelism axis, and the mapping of ranks to
nodes, GPUs, CPUs and NICs (``gpucomm plan``).

Three layers, each a pure function over plain data:

1. :class:`RankGenerator` -- Megatron-LM's ``RankGenerator`` semantics exactly
   (``megatron/core/parallel_state.py`` @ d98e8a64): the ``order`` string
   (default ``tp-cp-ep-dp-pp``) is a mixed radix whose *leftmost* token has stride 1; a token missing
   from ``order`` is appended when its size is 1 and is an error otherwise; ``get_ranks('dp')`` returns
   every group of ranks that differ only in the masked coordinates (multi-axis tokens such as
   ``'tp-pp'`` mask several axes).
2. :class:`NodeView` -- what placement needs to know about one node: pair bandwidth between GPUs
   (NCCL's path between them in NCCL's system of the node, planners/nccl/sysview.py, weighed by its
   type), the nvidia-smi code of each pair (NV#, PIX, PXB, PHB, NODE, SYS), NVLink domains, the
   nearest NIC(s) of each GPU (by NCCL's path from the NIC, ties broken by rail = same position),
   and the NUMA-local CPUs.
3. :func:`build_plan` -- launchers give a node the contiguous block of ranks
   ``[node*G, (node+1)*G)`` (torchrun ``RANK = GROUP_RANK*LOCAL_WORLD_SIZE + LOCAL_RANK``; srun block
   distribution), so what a planner chooses is (a) which physical GPU serves each local rank and
   (b) which host serves each node rank (see ``gpucomm.planners.placement.cluster``).  (a) is chosen so that the groups
   of the busiest axes (TP, then CP/EP, then DP) sit on the best-connected GPUs; the same
   local-rank->GPU map on every node makes pipeline/data-parallel peers on different nodes use the
   NIC of the same rail.

Expert parallelism as Megatron-LM builds it (``initialize_model_parallel``): the world is
``tp * cp * dp * pp`` (the *dense* generator, ``RankGenerator(tp, ep=1, dp, pp, cp, order)``), and the
expert layers re-factor the same world as ``etp * ep * edp * pp`` (the *expert* generator,
``RankGenerator(tp=etp, ep, dp=edp, pp, cp=1, order)``, ``etp`` = ``--expert-tensor-parallel-size``,
default tp; ``edp = world / (etp*ep*pp)``): experts are carved out of ``dp * cp``.  Megatron asserts
``world % (etp*ep*pp) == 0``, ``order.endswith("pp") or pp == 1 or edp == dp``, and that both
generators give the same pipeline groups; :func:`megatron_generators` applies the same checks.

Translations of the axis order (PyTorch DeviceMesh, torchtitan, DeepSpeed):
  * Megatron ``order='tp-cp-ep-dp-pp'`` (leftmost fastest) ==
    ``torch.distributed.init_device_mesh("cuda", (pp, dp, ep, cp, tp),
    mesh_dim_names=("pp", "dp", "ep", "cp", "tp"))`` -- DeviceMesh is row-major, its *last* dim holds
    contiguous ranks, so the names are the Megatron tokens *reversed*;
  * DeepSpeed ``ProcessTopology(axes=[...])`` is row-major as well (last axis fastest): its axes are the
    Megatron tokens reversed, with DeepSpeed's names (pp->pipe, dp->data, tp->model).
Size-1 axes are kept in the order string (Megatron appends them) but dropped from the DeviceMesh
shape that :func:`mesh_translations` reports, since ``init_device_mesh`` users rarely carry them.
"""
from __future__ import annotations

import re

import math
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from gpucomm.probes import facts
from gpucomm.probes.errors import InputError, NothingToDo, PlanInfeasible
from gpucomm.probes.model import canonical_cpulist, format_cpulist, gpu_id, parse_cpulist
from gpucomm.probes.model import natural_key as _natural
from gpucomm.probes.topology import Topology

from gpucomm.planners.nccl import names as nccl_names

AXES = ("tp", "cp", "ep", "dp", "pp")
# Every group Megatron-LM's initialize_model_parallel builds, by our key: (generator, token given to
# RankGenerator.get_ranks, Megatron's group name).  "dense" = the decoder generator (ep=1), "expert" =
# the expert generator (tp=etp, dp=edp, cp=1) -- megatron/core/parallel_state.py.
MEGATRON_GROUPS = {
    "tp": ("dense", "tp", "TENSOR_MODEL_PARALLEL_GROUP"),
    "cp": ("dense", "cp", "CONTEXT_PARALLEL_GROUP"),
    "dp": ("dense", "dp", "DATA_PARALLEL_GROUP"),
    "pp": ("dense", "pp", "PIPELINE_MODEL_PARALLEL_GROUP"),
    "dp-cp": ("dense", "dp-cp", "DATA_PARALLEL_GROUP_WITH_CP"),
    "tp-pp": ("dense", "tp-pp", "MODEL_PARALLEL_GROUP"),
    "tp-cp": ("dense", "tp-cp", "TENSOR_AND_CONTEXT_PARALLEL_GROUP"),
    "tp-dp": ("dense", "tp-dp", "TENSOR_AND_DATA_PARALLEL_GROUP"),
    "tp-dp-cp": ("dense", "tp-dp-cp", "TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP"),
    "ep": ("expert", "ep", "EXPERT_MODEL_PARALLEL_GROUP"),
    "etp": ("expert", "tp", "EXPERT_TENSOR_PARALLEL_GROUP"),
    "etp-ep": ("expert", "tp-ep", "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP"),
    "etp-ep-pp": ("expert", "tp-ep-pp", "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP"),
    "edp": ("expert", "dp", "EXPERT_DATA_PARALLEL_GROUP"),
}
# Axes whose groups choose the local-rank -> GPU map and get a tier (how one group is spread).
TIER_AXES = ("tp", "cp", "ep", "dp", "pp", "etp", "edp")
DEFAULT_ORDER = "tp-cp-ep-dp-pp"
# Megatron's ``--use-tp-pp-dp-mapping`` order (megatron/training/initialize.py).
TP_PP_DP_ORDER = "tp-cp-ep-pp-dp"
DEEPSPEED_NAMES = {"pp": "pipe", "dp": "data", "tp": "model", "cp": "context", "ep": "expert"}

# How much each axis' groups matter when choosing the local-rank -> GPU map, without a model.
# Ordered like the per-step volumes of Narayanan et al., SC'21 (TP moves activations 4x per layer per
# micro-batch, CP/EP per attention/MoE layer, DP once per step, PP one activation per micro-batch).
DEFAULT_AXIS_WEIGHTS = {"tp": 100.0, "cp": 30.0, "ep": 30.0, "dp": 10.0, "pp": 1.0, "etp": 100.0, "edp": 10.0}


# ============================================================================================
# 1. Megatron RankGenerator
def _prefix_product(a: Sequence[int], init: int = 1) -> List[int]:
    r = [init]
    for v in a:
        init *= v
        r.append(init)
    return r


def generate_masked_orthogonal_rank_groups(world_size: int, parallel_size: Sequence[int],
                                           mask: Sequence[bool]) -> List[List[int]]:
    """Megatron's ``generate_masked_orthogonal_rank_groups``: every group of ranks whose coordinates
    differ only on the masked axes.  ``parallel_size`` is in ``order`` (stride 1 first).

    >>> generate_masked_orthogonal_rank_groups(8, [2, 2, 2], [True, False, False])
    [[0, 1], [2, 3], [4, 5], [6, 7]]
    >>> generate_masked_orthogonal_rank_groups(8, [2, 2, 2], [False, True, False])
    [[0, 2], [1, 3], [4, 6], [5, 7]]
    """
    bases, members = _group_parts(world_size, parallel_size, mask)
    return [[b + m for m in members] for b in bases]


def _group_parts(world_size: int, parallel_size: Sequence[int], mask: Sequence[bool]) -> Tuple[List[int], List[int]]:
    """(the first rank of each group, the offsets of a group's members): every group is its base plus
    the same offsets."""
    masked_shape = [s for s, m in zip(parallel_size, mask) if m]
    unmasked_shape = [s for s, m in zip(parallel_size, mask) if not m]
    global_stride = _prefix_product(parallel_size)
    masked_stride = [d for d, m in zip(global_stride, mask) if m]
    unmasked_stride = [d for d, m in zip(global_stride, mask) if not m]
    group_size = math.prod(masked_shape)
    num_groups = world_size // group_size
    # Offsets of the members inside a group are the same for every group, and the group bases are
    # the same sums over the unmasked axes: both built axis by axis, the first axis varying fastest
    # (Megatron decomposes every index; same lists, and 10^4-rank plans stay fast).
    members = _axis_sums(masked_shape, masked_stride)
    bases = _axis_sums(unmasked_shape, unmasked_stride)
    assert len(members) == group_size and len(bases) == num_groups
    return bases, members


def _axis_sums(shape: Sequence[int], stride: Sequence[int]) -> List[int]:
    """``[sum(i_k * stride_k) for every index (i_0, i_1, ...) of shape]``, i_0 varying fastest."""
    out = [0]
    for size, st in zip(shape, stride):
        out = [b + i * st for i in range(size) for b in out]
    return out


class RankGenerator:
    """Megatron-LM ``RankGenerator(tp, ep, dp, pp, cp, order, rank_offset=0)``.

    ``world_size = tp*ep*dp*pp*cp``; ``order`` tokens are split on ``-``, the leftmost has stride 1.

    >>> g = RankGenerator(tp=2, ep=1, dp=2, pp=4, cp=1, order="tp-cp-ep-dp-pp")
    >>> g.get_ranks("dp")[:2], g.get_ranks("pp")[0]
    ([[0, 2], [1, 3]], [0, 4, 8, 12])
    """

    def __init__(self, tp: int, ep: int, dp: int, pp: int, cp: int, order: str = DEFAULT_ORDER,
                 rank_offset: int = 0):
        if ep > 1 and cp > 1:
            # Megatron: "CP is only included in default RankGenerator, and EP only in expert RankGenerator."
            raise PlanInfeasible(f"one rank generator with ep={ep} and cp={cp}: Megatron's RankGenerator needs "
                                 "ep == 1 or cp == 1 (the dense generator has ep=1, the expert one cp=1)")
        self.tp, self.ep, self.dp, self.pp, self.cp = tp, ep, dp, pp, cp
        self.rank_offset = rank_offset
        self.world_size = tp * dp * pp * cp * ep
        self.name_to_size = {"tp": tp, "pp": pp, "dp": dp, "ep": ep, "cp": cp}
        order = parse_order(order)
        tokens = order.split("-")
        for name, size in self.name_to_size.items():
            if name not in tokens:
                if size != 1:
                    # Megatron raises RuntimeError with this wording.
                    raise InputError(f"the size of {name} is {size}, but the order {order!r} does not name it",
                                     expected="an --order naming every axis larger than 1, e.g. " + DEFAULT_ORDER)
                tokens.append(name)
        self.order = "-".join(tokens)
        self.tokens = tokens
        self.ordered_size = [self.name_to_size[t] for t in tokens]
        self.strides = dict(zip(tokens, _prefix_product(self.ordered_size)))
        self._parts: Dict[str, Tuple[List[int], List[int]]] = {}

    def get_mask(self, token: str) -> List[bool]:
        parts = token.split("-")
        mask = [False] * len(self.tokens)
        for t in parts:
            if t not in self.tokens:
                raise InputError(f"unknown axis {t!r}", expected="tp, cp, ep, dp or pp")
            mask[self.tokens.index(t)] = True
        return mask

    def get_ranks(self, token: str) -> List[List[int]]:
        bases, members = self.group_parts(token)
        return [[b + m for m in members] for b in bases]

    def group_parts(self, token: str) -> Tuple[List[int], List[int]]:
        """``get_ranks(token)`` as (group bases, member offsets): group i is ``bases[i] + offsets``
        (computed once per token: the generator does not change)."""
        got = self._parts.get(token)
        if got is None:
            bases, members = _group_parts(self.world_size, self.ordered_size, self.get_mask(token))
            got = self._parts[token] = ([b + self.rank_offset for b in bases], members)
        return got

    def first_group(self, token: str) -> List[int]:
        """``get_ranks(token)[0]`` without the others."""
        bases, members = self.group_parts(token)
        return [bases[0] + m for m in members]

    def get_local_ranks(self, token: str, lo: int, hi: int) -> List[List[int]]:
        """``[[m for m in g if lo <= m < hi] for g in get_ranks(token)]`` without the empty lists,
        computed from the ranks in [lo, hi) only (a node's share of a 10^4-rank world)."""
        mask = self.get_mask(token)
        strides = _prefix_product(self.ordered_size)
        u_shape = [s for s, m in zip(self.ordered_size, mask) if not m]
        m_shape = [s for s, m in zip(self.ordered_size, mask) if m]
        u_pp, m_pp = _prefix_product(u_shape), _prefix_product(m_shape)
        found: Dict[int, List[Tuple[int, int]]] = {}
        for rank in range(max(lo, self.rank_offset), min(hi, self.rank_offset + self.world_size)):
            c = [((rank - self.rank_offset) // d) % s for s, d in zip(self.ordered_size, strides)]
            uc = [x for x, m in zip(c, mask) if not m]
            mc = [x for x, m in zip(c, mask) if m]
            g = sum(x * d for x, d in zip(uc, u_pp))
            pos = sum(x * d for x, d in zip(mc, m_pp))
            found.setdefault(g, []).append((pos, rank))
        return [[r for _p, r in sorted(found[g])] for g in sorted(found)]

    def coords(self, rank: int) -> Dict[str, int]:
        """{axis: coordinate} of a global rank (the inverse of the mixed radix)."""
        r = rank - self.rank_offset
        return {t: (r // self.strides[t]) % self.name_to_size[t] for t in self.tokens}


def parse_order(order: Optional[str]) -> str:
    """Validate an ``--order`` string (``tp-cp-ep-dp-pp``, ``tp-pp-dp``...); lower-cased."""
    text = (order or DEFAULT_ORDER).strip().lower()
    tokens = [t for t in text.split("-")]
    if not tokens or any(t not in AXES for t in tokens):
        raise InputError(f"--order {order!r} has an unknown axis", expected="tokens from tp, cp, ep, dp, pp joined by '-'")
    if len(set(tokens)) != len(tokens):
        raise InputError(f"--order {order!r} names an axis twice", expected="each of tp, cp, ep, dp, pp at most once")
    return "-".join(tokens)


def _device_mesh(gen: RankGenerator, names: Optional[Dict[str, str]] = None) -> dict:
    names = names or {}
    tokens = [t for t in gen.tokens if gen.name_to_size[t] > 1] or [gen.tokens[0]]
    rev = list(reversed(tokens))
    dims = [names.get(t, t) for t in rev]
    return {
        "mesh_shape": [gen.name_to_size[t] for t in rev],
        "mesh_dim_names": dims,
        "code": "init_device_mesh(\"cuda\", (%s), mesh_dim_names=(%s))" % (
            ", ".join(str(gen.name_to_size[t]) for t in rev) + ("," if len(rev) == 1 else ""),
            ", ".join(f'"{d}"' for d in dims) + ("," if len(rev) == 1 else "")),
    }


EXPERT_MESH_NAMES = {"tp": "etp", "dp": "edp", "ep": "ep", "pp": "pp", "cp": "cp"}


def mesh_translations(gen: RankGenerator, egen: Optional[RankGenerator] = None) -> dict:
    """The same layout in the vocabularies of PyTorch DeviceMesh, DeepSpeed and Megatron.  With an
    expert generator whose layout differs from the dense one (ep > 1 or etp != tp), also the expert
    layers' DeviceMesh (dims ``etp``/``ep``/``edp``/``pp``, the expert generator's tokens reversed)."""
    tokens = [t for t in gen.tokens if gen.name_to_size[t] > 1] or [gen.tokens[0]]
    rev = list(reversed(tokens))
    out = {
        "megatron_order": gen.order,
        "device_mesh": _device_mesh(gen),
        "deepspeed_axes": [DEEPSPEED_NAMES[t] for t in rev],
        "deepspeed_dims": [gen.name_to_size[t] for t in rev],
        "expert_device_mesh": None,
    }
    if egen is not None and (egen.ep > 1 or egen.tp != gen.tp):
        out["expert_device_mesh"] = _device_mesh(egen, EXPERT_MESH_NAMES)
    return out


def megatron_generators(axes: Dict[str, int], order: str = DEFAULT_ORDER) -> Tuple[RankGenerator, RankGenerator]:
    """Megatron-LM's two rank generators for ``axes`` (tp, cp, dp, pp, ep and optionally etp), with
    ``initialize_model_parallel``'s checks as PlanInfeasible: the dense (decoder) generator
    ``RankGenerator(tp, ep=1, dp, pp, cp)`` and the expert generator ``RankGenerator(etp, ep, edp, pp,
    cp=1)`` with ``edp = world // (etp*ep*pp)``.

    >>> d, e = megatron_generators({"tp": 2, "cp": 1, "ep": 4, "dp": 4, "pp": 1})
    >>> d.get_ranks("dp")[0], e.get_ranks("ep")[0], e.get_ranks("dp")[0]
    ([0, 2, 4, 6], [0, 2, 4, 6], [0])
    """
    tp, cp, dp, pp, ep = axes["tp"], axes["cp"], axes["dp"], axes["pp"], axes["ep"]
    etp = axes.get("etp") or tp
    world = tp * cp * dp * pp
    dense = RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order=order)
    etmp = etp * ep * pp
    if world % etmp:
        raise PlanInfeasible(f"world size {world} (tp*cp*dp*pp) is not divisible by etp*ep*pp = {etp}*{ep}*{pp} = "
                             f"{etmp}: Megatron carves the experts out of dp*cp = {dp * cp}")
    edp = world // etmp
    expert = RankGenerator(tp=etp, ep=ep, dp=edp, pp=pp, cp=1, order=order)
    if not (dense.order.split("-")[-1] == "pp" or pp == 1 or edp == dp):
        raise PlanInfeasible(f"with --order {dense.order} (not ending in pp) and pp={pp}, Megatron needs the "
                             f"expert data-parallel size ({edp}) to equal the data-parallel size ({dp})")
    if pp > 1 and dense.group_parts("pp") != expert.group_parts("pp") and dense.get_ranks("pp") != expert.get_ranks("pp"):
        raise PlanInfeasible(f"with --order {dense.order}, the expert layers' pipeline groups differ from the "
                             "dense ones (Megatron asserts they are the same)")
    return dense, expert


# ============================================================================================
# 2. The node: pair bandwidths, NVLink domains, NICs, CPUs
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
NIC_LEVEL_RANK = {"X": 0, "PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}
# For NCCL_NET_GDR_LEVEL: nvidia-smi code -> NCCL path name (NODE is PHB for NCCL, nvmlGpuTopologyLevel_t vs paths.cc).
SMI_TO_NCCL_LEVEL = {"PIX": "PIX", "PXB": "PXB", "PHB": "PHB", "NODE": "PHB", "SYS": "SYS"}


def _nv_count(code: str) -> int:
    if isinstance(code, str) and code.startswith("NV") and code[2:].isdigit():
        return int(code[2:])
    return 0


def nic_has_device_name(name: Optional[str]) -> bool:
    """False for a placeholder that stands in for a NIC's name when the source did not give one:
    the PCI bus id of an NCCL XML skeleton's bare ``<pci>`` NIC, or nvidia-smi's ``NIC<i>`` column
    label when its NIC Legend is missing or garbled.  Such a name cannot go into NCCL_IB_HCA or
    NCCL_SOCKET_IFNAME."""
    from gpucomm.probes.model import normalize_bus_id

    return bool(name) and normalize_bus_id(name) is None and not re.fullmatch(r"NIC\d+", name)


def compute_nics(nics: Dict[str, dict]) -> Dict[str, dict]:
    """The NICs collectives should use: RDMA NICs at >= 3/4 of the fastest RDMA rate (drops the
    management port and slower storage/front-end NICs; a NIC of unknown rate is kept).  Without any
    RDMA NIC, every NIC (TCP sockets)."""
    rdma = {k: v for k, v in nics.items() if facts.nic_is_rdma(v)}
    if not rdma:
        return dict(nics)
    rates = [facts.nic_rate_gbps(v) for v in rdma.values()]
    top = max((r for r in rates if r), default=None)
    if top is None:
        return rdma
    return {k: v for k, v in rdma.items() if (facts.nic_rate_gbps(v) or top) >= 0.75 * top}




@dataclass
class NodeView:
    """Placement's view of one node: GPU pair bandwidths (from NCCL's paths) and nvidia-smi levels,
    NVLink domains, each GPU's NICs, the CPUs of each NUMA node -- derived from the typed Topology
    (``topo``) and NCCL's system of it."""

    topo: Topology
    gpus: List[dict]                       # usable GPU records (cleaned), by index
    index: List[int]                       # their NVML indices
    bw: Dict[Tuple[int, int], float]       # (gpu index a, gpu index b) -> relative GB/s (PATH_BW_FACTOR)
    level: Dict[Tuple[int, int], str]      # matrix code between two GPUs (NV#, PIX, ..., SYS)
    nvlink_domains: List[List[int]]        # connected components of NVLink, by GPU index
    nvswitch: bool                         # GPUs meet on NVSwitch(es): uniform all-to-all NVLink
    gpu_nics: Dict[int, List[str]]         # GPU index -> nearest NIC names (primary first)
    gpu_nic_level: Dict[int, str]          # GPU index -> matrix code to its primary NIC
    nics: Dict[str, dict]                  # usable NIC records by name
    numa_cpus: Dict[int, List[int]]        # NUMA id -> cpus
    all_cpus: List[int]
    p2p_disabled: List[Tuple[int, int]]    # pairs NVML reports without P2P
    mig: List[int]                         # GPU indices with MIG enabled
    notes: List[str] = field(default_factory=list)
    cache: Dict[tuple, object] = field(default_factory=dict, repr=False)  # per-view memo (cost model graphs)

    @property
    def doc(self) -> dict:
        """The cleaned topology document (see :class:`Topology`)."""
        return self.topo.doc

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    def gpu(self, index: int) -> dict:
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
        p = self.topo.gpu(index).pcie
        bw = p.usable_bw_GBps if p else None
        return bw if bw is not None else self.topo.default_pcie_bw()

    def memory_bytes(self) -> Optional[int]:
        mems = [g.get("memory_bytes") for g in self.gpus]
        if not mems or any(not isinstance(m, int) or m <= 0 for m in mems):
            return None
        return min(mems)

    def nic_GBps(self, name: str) -> Optional[float]:
        """A NIC's rate in GB/s (the view's named default when unknown); None for an unknown NIC."""
        nic = self.topo.nic(name)
        return self.topo.nic_gbps(nic) / 8.0 if nic else None


def _matrix_code(doc: dict, a: str, b: str) -> Optional[str]:
    m = doc.get("matrix") or {}
    v = (m.get(a) or {}).get(b)
    if v is None:
        v = (m.get(b) or {}).get(a)
    return v


def pcie_level(doc: dict, a: dict, b: dict) -> Optional[str]:
    """nvidia-smi's PCIe-level code between two GPUs even when NVLink hides it in the matrix (NVML's
    view, what go-gpuallocator scores): the matrix's code, else the PCI tree's (probes/matrix.py,
    the one definition of nvidia-smi's levels); None when the tree does not place them."""
    code = _matrix_code(doc, f"GPU{a['index']}", f"GPU{b['index']}")
    if code and not _nv_count(code) and code not in ("X",):
        return code
    from gpucomm.probes.matrix import ancestors, pci_level

    switches = {s["id"]: s for s in doc.get("switches") or [] if isinstance(s, dict) and s.get("id")}
    level = pci_level(ancestors(a.get("parent"), switches, a.get("numa_node")),
                      ancestors(b.get("parent"), switches, b.get("numa_node")), switches)
    return None if level == "N/A" else level


def node_view(doc, gpu_subset: Optional[Iterable[int]] = None) -> NodeView:
    """Build the placement view of one topology (a :class:`Topology` or a document).  ``gpu_subset``
    restricts it to some GPU indices (``--gpus``/``select``).  Raises NothingToDo when there are no
    GPUs."""
    topo = Topology.of(doc)
    doc = topo.doc
    try:
        sel = topo.select(gpu_subset)
    except KeyError as e:
        raise PlanInfeasible(f"GPU index {e.args[0]} does not exist (the topology has GPUs "
                             f"{format_cpulist([g.index for g in topo.gpus]) or 'none'})") from None
    gpus = [g.rec for g in sel]
    if not gpus:
        raise NothingToDo("the topology has no GPUs to place ranks on")
    index = [g["index"] for g in gpus]
    notes: List[str] = []
    bw: Dict[Tuple[int, int], float] = {}
    level: Dict[Tuple[int, int], str] = {}
    p2p_disabled: List[Tuple[int, int]] = []
    mig = [g["index"] for g in gpus if g.get("mig")]
    fab = topo.nvlink
    by_id = {gpu_id(g): g for g in gpus}
    for g in gpus:
        for other_id, status in g["p2p"].items():
            o = by_id.get(other_id)
            if o is None or str(status).upper() in ("OK", "SUPPORTED", "ENABLED"):
                continue
            # NVML says "not supported" for every SYS pair of a dual-socket box; it only matters
            # where NCCL would try P2P: NVLink or PCIe up to PXB (NCCL_P2P_LEVEL default).
            code = _matrix_code(doc, f"GPU{g['index']}", f"GPU{o['index']}") or ""
            if not (_nv_count(code) or code in ("PIX", "PXB")):
                continue
            key = tuple(sorted((g["index"], o["index"])))
            if key not in p2p_disabled:
                p2p_disabled.append(key)
    ns = _nccl_system(topo, index, notes)
    for a in gpus:
        for b in gpus:
            if a is b:
                continue
            ia, ib = a["index"], b["index"]
            level[(ia, ib)] = _matrix_code(doc, f"GPU{ia}", f"GPU{ib}") or pcie_level(doc, a, b) or "N/A"
            # the path NCCL takes between the two (P2P, NVB through a peer, or through the CPU where
            # P2P is not possible), at its bandwidth (measured where the topology has it)
            p = ns.path(ns.gpu_of_index(ia), ns.gpu_of_index(ib))
            val = p.bw * PATH_BW_FACTOR[nccl_names.path_rank(p.type)] if p is not None else 0.0
            if ia in mig or ib in mig:
                # No P2P between MIG slices (NCCL does not know MIG): SHM through host memory at best.
                val = min(val, _pcie_bw(topo, ia) * PATH_BW_FACTOR[nccl_names.PATH_PHB])
            bw[(ia, ib)] = round(val, 4)
    # NVLink domains (connected components over NVLink, MIG GPUs left out).
    ids = [gpu_id(g) for g in gpus if g["index"] not in mig]
    idx_of = {gpu_id(g): g["index"] for g in gpus}
    domains = sorted((sorted(idx_of[x] for x in d) for d in fab.domains(ids)), key=lambda c: c[0])
    nvswitch = fab.nvswitch
    numa_cpus = topo.numa_cpus()
    all_cpus = sorted({c for cs in numa_cpus.values() for c in cs})
    nics = {n.name: n.rec for n in topo.nics if n.up}
    down = sorted((n.name for n in topo.nics if not n.up), key=_natural)
    if down:
        notes.append("NIC(s) with no ACTIVE port left out: " + ", ".join(down))
    gpu_nics, gpu_nic_level = _nearest_nics(doc, gpus, compute_nics(nics), ns)
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


def _pcie_bw(topo: Topology, index: int) -> float:
    p = topo.gpu(index).pcie
    bw = p.usable_bw_GBps if p else None
    return bw if bw is not None else topo.default_pcie_bw()


def _nic_signature(nic: dict) -> tuple:
    return (str(nic.get("link_layer") or "").lower() or None, facts.nic_rate_gbps(nic))


def _nearest_nics(doc: dict, gpus: List[dict], nics: Dict[str, dict], ns) -> Tuple[Dict[int, List[str]], Dict[int, str]]:
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
        return {g["index"]: [] for g in gpus}, {}
    names = sorted(nics, key=_natural)
    net_of = {part: n for n in ns.nets for part in ns.nodes[n]["name"].split("+")}
    best: Dict[int, Tuple[int, List[str], str]] = {}
    for g in gpus:
        gid = ns.gpu_of_index(g["index"])
        ranked = []
        for n in names:
            code = _matrix_code(doc, f"GPU{g['index']}", n)
            if code is None or code not in NIC_LEVEL_RANK:
                gn, nn = g.get("numa_node"), nics[n].get("numa_node")
                if gn is not None and nn is not None and gn >= 0 and nn >= 0:
                    code = "NODE" if gn == nn else "SYS"
                else:
                    code = "SYS"
            p = ns.path(net_of[n], gid) if n in net_of and gid is not None else None
            ranked.append((nccl_names.path_rank(p.type) if p is not None else len(nccl_names.PATH_NAMES), n, code))
        top = min(r[0] for r in ranked)
        tie = [r[1] for r in ranked if r[0] == top]
        code = next(r[2] for r in ranked if r[0] == top)
        best[g["index"]] = (top, tie, code)
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


# ============================================================================================
# 3. CPU binding (torchrun --numa-binding=exclusive semantics)
def smt_siblings(all_cpus: List[int]) -> Dict[int, int]:
    """{logical cpu: its physical core's id (lowest sibling)}.

    The topology document has no thread siblings, so this assumes the Linux enumeration of x86
    servers with SMT on: cpu ``c`` and ``c + N/2`` share a core when the machine's cpus are exactly
    ``0..N-1`` and N is even.  :func:`cpu_binding` only applies it when the NUMA cpulists come in two
    halves (``0-55,112-167``); otherwise every logical cpu is its own core."""
    n = len(all_cpus)
    if n >= 2 and n % 2 == 0 and all_cpus == list(range(n)):
        return {c: (c if c < n // 2 else c - n // 2) for c in all_cpus}
    return {c: c for c in all_cpus}


def _smt_layout_plausible(numa_cpus: Dict[int, List[int]], all_cpus: List[int]) -> bool:
    n = len(all_cpus)
    if n < 2 or n % 2 or all_cpus != list(range(n)) or len(numa_cpus) < 1:
        return False
    half = n // 2
    gap = False
    for cpus in numa_cpus.values():
        lo = [c for c in cpus if c < half]
        hi = [c - half for c in cpus if c >= half]
        if lo != hi:
            return False
        gap = gap or (cpus[-1] - cpus[0] + 1 != len(cpus))
    # One contiguous range per node ("0-9") fits both SMT and no SMT: only a split list
    # ("0-55,112-167") is evidence of siblings; without it each logical cpu counts as a core.
    return gap


def core_map(view: NodeView) -> Dict[int, int]:
    """{logical cpu: physical core id} with the SMT rule of :func:`smt_siblings` applied only
    when the NUMA cpulists show it."""
    if _smt_layout_plausible(view.numa_cpus, view.all_cpus):
        return smt_siblings(view.all_cpus)
    return {c: c for c in view.all_cpus}


def logical_core_index(view: NodeView, core_of: Optional[Dict[int, int]] = None) -> Dict[int, int]:
    """{physical core id: hwloc logical core index} -- what Open MPI rankfile slots and Slurm's
    ``Cores=`` count (hwloc's lstopo -l).  hwloc numbers cores depth-first through
    the tree: package by package, and inside a package by the first PU of each core.  The document
    has no package ids, so NUMA nodes (numbered socket by socket by Linux) stand in for them.  With
    contiguous numbering this is just the order of the cores' first cpu; with the interleaved
    numbering of many dual-socket BIOSes (NUMA 0 = ``0,2,4,...``) core ``c`` of socket 1 is *not*
    logical core ``c``: socket 0's cores come first."""
    core_of = core_of if core_of is not None else core_map(view)
    numa_of_cpu = {c: n for n, cs in view.numa_cpus.items() for c in cs}
    first_cpu: Dict[int, int] = {}
    for c, core in core_of.items():
        first_cpu[core] = min(first_cpu.get(core, c), c)
    big = 1 << 30
    order = sorted(first_cpu, key=lambda core: (numa_of_cpu.get(first_cpu[core], big), first_cpu[core]))
    return {core: i for i, core in enumerate(order)}


def cpu_binding(view: NodeView, local_gpus: List[int]) -> List[dict]:
    """Per local rank: the CPUs it is bound to -- the GPU's NUMA-local CPUs split evenly, by
    physical core, between the local ranks whose GPUs share that NUMA node; lower local ranks get
    the extra cores.  This is ``torchrun --numa-binding=exclusive`` (torch/numa/binding.py
    ``_exclusive_get_logical_cpus_to_bind_to``) when CUDA device i is local rank i's GPU.

    Returns [{local_rank, gpu, numa_node, cpus (cpulist str|None), cores (int), mems (int|None),
    numa_source ("gpu": the GPU's own NUMA node, "affinity": from its CPU affinity), logical_cores
    (hwloc-style logical core indexes, :func:`logical_core_index`: Open MPI rankfile slots)}]."""
    core_of = core_map(view)
    logical = logical_core_index(view, core_of)
    by_numa: Dict[Optional[int], List[int]] = {}
    numa_of: Dict[int, Optional[int]] = {}
    source: Dict[int, str] = {}
    for lr, gi in enumerate(local_gpus):
        g = view.gpu(gi)
        numa = g.get("numa_node")
        source[lr] = "gpu"
        if not (isinstance(numa, int) and numa >= 0 and numa in view.numa_cpus):
            # GB200/GH200: the GPU's own NUMA node holds its memory, no CPUs; and captures may only
            # give NUMA/CPU affinity.  Use the one CPU NUMA node inside the GPU's CPU affinity.
            numa = None
            source[lr] = "affinity"
            aff = g.get("numa_affinity") or []
            cands = [a for a in aff if a in view.numa_cpus]
            try:
                cpus_aff = set(parse_cpulist(g.get("cpu_affinity") or ""))
            except (ValueError, TypeError):
                cpus_aff = set()
            if cpus_aff:
                inside = [n for n, cs in view.numa_cpus.items() if set(cs) <= cpus_aff]
                if len(inside) == 1:
                    numa = inside[0]
            if numa is None and len(cands) == 1:
                numa = cands[0]
        numa_of[lr] = numa
        by_numa.setdefault(numa, []).append(lr)
    out = []
    for lr, gi in enumerate(local_gpus):
        numa = numa_of[lr]
        g = view.gpu(gi)
        if numa is None:
            # No NUMA node: bind to the GPU's cpu_affinity if NVML gave one (whole set, shared).
            aff = canonical_cpulist(g.get("cpu_affinity")) if g.get("cpu_affinity") else None
            try:
                cpus = parse_cpulist(aff) if aff else []
            except ValueError:
                cpus = []
            out.append({"local_rank": lr, "gpu": gi, "numa_node": None, "cpus": format_cpulist(cpus) or None,
                        "cores": len({core_of.get(c, c) for c in cpus}) if cpus else None, "mems": None,
                        "numa_source": None,
                        "logical_cores": format_cpulist({logical[core_of[c]] for c in cpus if c in core_of}) or None})
            continue
        cpus = view.numa_cpus[numa]
        cores: Dict[int, List[int]] = {}
        for c in cpus:
            cores.setdefault(core_of.get(c, c), []).append(c)
        core_ids = sorted(cores)
        sharers = by_numa[numa]
        pos = sharers.index(lr)
        per, extra = divmod(len(core_ids), len(sharers))
        if per < 1:
            # fewer cores than ranks: share the node's cpus (torchrun raises here; we warn in env).
            mine = cpus
            ncores = len(core_ids)
        else:
            start = pos * per + min(pos, extra)
            end = start + per + (1 if pos < extra else 0)
            mine = sorted(c for cid in core_ids[start:end] for c in cores[cid])
            ncores = end - start
        out.append({"local_rank": lr, "gpu": gi, "numa_node": numa, "cpus": format_cpulist(mine),
                    "cores": ncores, "mems": numa, "numa_source": source[lr],
                    "logical_cores": format_cpulist({logical[core_of[c]] for c in mine if c in core_of}) or None})
    return out


# ============================================================================================
# 4. Choosing the local-rank -> GPU map
def _set_cost(view: NodeView, gpus: Sequence[int]) -> float:
    """Cost of a GPU set used by one group: its slowest pair dominates (a ring or an all-reduce
    runs at the pace of its narrowest hop), the mean breaks ties."""
    if len(gpus) < 2:
        return 0.0
    inv = [1.0 / max(view.pair_bw(a, b), 1e-9) for i, a in enumerate(gpus) for b in gpus[i + 1:]]
    return max(inv) + sum(inv) / len(inv)


def local_group_pattern(gen: RankGenerator, gpn: int, node: int = 0,
                        egen: Optional[RankGenerator] = None) -> Dict[str, List[List[int]]]:
    """For each axis, the groups restricted to one node, as local-rank lists (members on the node
    only; singletons dropped).  With the expert generator ``egen``: also the expert-parallel groups,
    and the expert TP / expert DP groups where they differ from the dense ones."""
    lo, hi = node * gpn, (node + 1) * gpn
    pattern: Dict[str, List[List[int]]] = {}
    sources: List[Tuple[str, RankGenerator, str]] = [(a, gen, a) for a in ("tp", "cp", "dp", "pp")]
    if egen is not None:
        sources.append(("ep", egen, "ep"))
        if egen.ep > 1 or egen.tp != gen.tp:
            sources += [("etp", egen, "tp"), ("edp", egen, "dp")]
    else:
        sources.append(("ep", gen, "ep"))
    for axis, g, token in sources:
        if g.name_to_size.get(token, 1) <= 1:
            continue
        if axis == "etp" and g.tp == gen.tp:
            continue   # the same groups as tp
        groups = [[m - lo for m in grp] for grp in g.get_local_ranks(token, lo, hi) if len(grp) > 1]
        if groups:
            pattern[axis] = groups
    return pattern


def _perm_cost(view: NodeView, perm: Sequence[int], pattern: Dict[str, List[List[int]]],
               weights: Dict[str, float], memo: Optional[dict] = None) -> float:
    """``memo``: the costs of GPU lists already computed for this view."""
    total = 0.0
    for axis, groups in pattern.items():
        w = weights.get(axis, 1.0)
        for grp in groups:
            gs = [perm[l] for l in grp]
            if memo is None:
                total += w * _set_cost(view, gs)
                continue
            key = tuple(gs)
            c = memo.get(key)
            if c is None:
                c = memo[key] = _set_cost(view, gs)
            total += w * c
    return total


def _greedy_perm(view: NodeView, gpn: int, pattern: Dict[str, List[List[int]]],
                 weights: Dict[str, float], gpus: List[int]) -> List[int]:
    """Fill the heaviest axis' groups one by one: seed with the lowest free GPU, then add the
    free GPU with the best bandwidth to the GPUs already in the group."""
    perm: List[Optional[int]] = [None] * gpn
    free = list(gpus)
    order = sorted(pattern, key=lambda a: -weights.get(a, 1.0))
    for axis in order:
        for grp in pattern[axis]:
            chosen = [perm[l] for l in grp if perm[l] is not None]
            for l in grp:
                if perm[l] is not None:
                    continue
                if not chosen:
                    pick = free[0]
                else:
                    pick = max(free, key=lambda f: (min(view.pair_bw(f, c) for c in chosen),
                                                    sum(view.pair_bw(f, c) for c in chosen), -f))
                perm[l] = pick
                chosen.append(pick)
                free.remove(pick)
    for l in range(gpn):
        if perm[l] is None:
            perm[l] = free.pop(0)
    return [int(p) for p in perm]  # type: ignore[arg-type]


def _hill_climb(view: NodeView, perm: List[int], pattern, weights) -> Tuple[List[int], float]:
    memo: dict = {}
    best = _perm_cost(view, perm, pattern, weights, memo)
    improved = True
    n = len(perm)
    while improved:
        improved = False
        for i in range(n):
            for j in range(i + 1, n):
                perm[i], perm[j] = perm[j], perm[i]
                c = _perm_cost(view, perm, pattern, weights, memo)
                if c < best - 1e-12:
                    best = c
                    improved = True
                else:
                    perm[i], perm[j] = perm[j], perm[i]
    return perm, best


def choose_local_gpus(view: NodeView, gen: RankGenerator, gpn: int,
                      weights: Optional[Dict[str, float]] = None, node: int = 0,
                      gpus: Optional[List[int]] = None, egen: Optional[RankGenerator] = None) -> List[int]:
    """The GPU index for each local rank 0..gpn-1 of a node (the same map serves every node with
    the same group pattern).  Minimises the weighted cost of the in-node groups of each axis;
    starts from the identity (local rank i -> i-th GPU, what users expect) and from a greedy fill,
    improves both by swaps, keeps the cheaper (ties: the identity)."""
    weights = dict(DEFAULT_AXIS_WEIGHTS, **(weights or {}))
    gpus = list(gpus if gpus is not None else view.index)[:gpn]
    pattern = local_group_pattern(gen, gpn, node, egen)
    if not pattern:
        return gpus
    ident, c_ident = _hill_climb(view, list(gpus), pattern, weights)
    greedy, c_greedy = _hill_climb(view, _greedy_perm(view, gpn, pattern, weights, gpus), pattern, weights)
    base = _perm_cost(view, list(gpus), pattern, weights)
    if base <= min(c_ident, c_greedy) + 1e-12:
        return list(gpus)
    return ident if c_ident <= c_greedy + 1e-12 else greedy


# ============================================================================================
# 5. Axes and the plan
def resolve_axes(total: int, tp: Optional[int], pp: Optional[int], dp: Optional[int], cp: Optional[int],
                 ep: Optional[int], gpn: Optional[int] = None, etp: Optional[int] = None) -> Dict[str, int]:
    """Fill the axes the user left out (dp absorbs the rest) and check the product, as Megatron-LM
    does: ``world = tp*cp*dp*pp``; the experts re-factor the same world as ``etp*ep*edp*pp``
    (``etp`` defaults to tp), so ``ep`` must divide ``dp*cp*tp/etp``.  With ``gpn`` (GPUs per node),
    TP is checked against the node first: that is the error users need to see."""
    for name, v in (("tp", tp), ("pp", pp), ("dp", dp), ("cp", cp), ("ep", ep), ("etp", etp)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise InputError(f"--{name} {v} is not a positive integer", expected="an integer >= 1")
    if gpn:
        for name, v in (("tp", tp), ("etp", etp)):
            if not v:
                continue
            if v > gpn:
                raise PlanInfeasible(f"{name}={v} does not fit in {gpn} GPUs per node (tensor parallelism must stay "
                                     "inside a node)")
            if gpn % v:
                raise PlanInfeasible(f"{name}={v} does not divide {gpn} GPUs per node")
    axes = {"tp": tp or 1, "pp": pp or 1, "cp": cp or 1, "ep": ep or 1}
    model = axes["tp"] * axes["pp"] * axes["cp"]
    if dp is None:
        if total % model:
            raise PlanInfeasible(f"{total} GPUs are not divisible by tp*cp*pp = {model}")
        axes["dp"] = total // model
    else:
        axes["dp"] = dp
        if model * dp != total:
            raise PlanInfeasible(f"tp*cp*dp*pp = {model * dp} but the plan has {total} GPUs "
                                 "(Megatron: experts come out of dp*cp, ep is not a factor of the world size)")
    axes["etp"] = etp or axes["tp"]
    etmp = axes["etp"] * axes["ep"] * axes["pp"]
    if total % etmp:
        raise PlanInfeasible(f"etp*ep*pp = {axes['etp']}*{axes['ep']}*{axes['pp']} = {etmp} does not divide the "
                             f"{total} GPUs: Megatron carves the {axes['ep']} expert-parallel ranks out of "
                             f"dp*cp = {axes['dp'] * axes['cp']}")
    axes["edp"] = total // etmp
    return axes


def check_feasible(view: NodeView, axes: Dict[str, int], gpn: int, nodes: int) -> List[str]:
    """Raise PlanInfeasible for layouts that cannot work; return warnings for poor ones."""
    warnings: List[str] = []
    tp = axes["tp"]
    if gpn > view.gpu_count:
        raise PlanInfeasible(f"{gpn} GPUs per node requested but the topology has {view.gpu_count}")
    if tp > gpn:
        raise PlanInfeasible(f"tp={tp} does not fit in {gpn} GPUs per node (tensor parallelism must stay inside a node)")
    if gpn % tp:
        raise PlanInfeasible(f"tp={tp} does not divide {gpn} GPUs per node")
    if view.mig and tp > 1:
        raise PlanInfeasible(f"tp={tp} across MIG instances: MIG slices cannot use P2P, NVLink or NVLS "
                             "(nvidia/nccl#1716) and a process sees one MIG instance (pytorch#130181)")
    if view.mig:
        warnings.append("MIG is enabled on GPU(s) " + format_cpulist(view.mig) + ": no P2P/NVLS between slices; "
                        "collectives go through host memory or the network (nccl#1716)")
    for axis in ("cp", "ep"):
        if axes[axis] > 1 and view.mig:
            raise PlanInfeasible(f"{axis}={axes[axis]} across MIG instances is not supported (nccl#1716)")
    dom = max((len(d) for d in view.nvlink_domains), default=0)
    inner = tp * axes["cp"]
    if dom and inner > dom and inner <= gpn:
        warnings.append(f"tp*cp = {inner} is larger than the largest NVLink domain ({dom} GPUs): "
                        "some model-parallel traffic will cross PCIe")
    einner = (axes.get("etp") or tp) * axes["ep"]
    if axes["ep"] > 1 and dom and einner > dom and einner <= gpn:
        warnings.append(f"etp*ep = {einner} is larger than the largest NVLink domain ({dom} GPUs): "
                        "expert all-to-alls will cross PCIe")
    if dom and tp > dom:
        warnings.append(f"tp={tp} is larger than the NVLink domain ({dom} GPUs): TP all-reduces cross PCIe")
    if nodes > 1 and not view.nics:
        warnings.append("no RDMA NIC in the topology: NCCL will use TCP sockets between nodes")
    return warnings


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
        return bool(_nv_count(view.level.get((a, b), "")))

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


@dataclass
class Layout:
    """A resolved layout: Megatron's dense and expert generators, the local-rank -> GPU map and
    per-axis tiers."""

    gen: RankGenerator
    axes: Dict[str, int]
    nodes: int
    gpn: int
    local_gpus: List[int]
    view: NodeView
    warnings: List[str]
    egen: Optional[RankGenerator] = None

    def generator(self, axis: str) -> Tuple[RankGenerator, str]:
        """(generator, token) that builds ``axis``' groups (a key of MEGATRON_GROUPS, or a dense token)."""
        kind, token, _ = MEGATRON_GROUPS.get(axis) or ("dense", axis, None)
        if kind == "expert":
            return (self.egen or megatron_generators(self.axes, self.gen.order)[1]), token
        return self.gen, token

    def groups(self, axis: str) -> List[List[int]]:
        gen, token = self.generator(axis)
        return gen.get_ranks(token)

    def axis_tier(self, axis: str) -> dict:
        """How one group of ``axis`` is spread: size, ranks per node, nodes spanned, the
        in-node bottleneck bandwidth and the network bandwidth available to it."""
        gen, token = self.generator(axis)
        size = math.prod(gen.name_to_size[a] for a in token.split("-"))
        if size <= 1:
            return {"size": 1, "gpus": [], "ranks_per_node": 1, "nodes": 1, "intra_GBps": None,
                    "inter_GBps": None, "where": "none"}
        members = sorted(gen.first_group(token))  # every group of an axis is laid out alike
        per_node: Dict[int, List[int]] = {}
        for m in members:
            per_node.setdefault(m // self.gpn, []).append(m % self.gpn)
        rpn = max(len(v) for v in per_node.values())
        nnodes = len(per_node)
        first = per_node[min(per_node)]
        local = [self.local_gpus[l] for l in first]
        ring_nvlink = False
        if len(local) > 1:
            intra, ring_nvlink = best_ring(self.view, local)
            if ring_nvlink and self.view.nvswitch and all(
                    _nv_count(self.view.level.get((a, b), "")) for i, a in enumerate(local) for b in local[i + 1:]):
                # On NVLink a ring's hop uses a GPU's whole NVLink bandwidth when peers are on NVSwitch.
                intra = min(self.view.nvlink_bw_per_gpu(g) for g in local)
        else:
            intra = None
        inter = None
        if nnodes > 1:
            nic_bw = []
            for g in local:
                rates = [self.view.nic_GBps(n) for n in self.view.gpu_nics.get(g, [])]
                rates = [r for r in rates if r]
                nic_bw.append(sum(rates) if rates else None)
            known = [b for b in nic_bw if b]
            if known:
                # rail-aligned: every rank of the group on this node drives its own NIC(s).
                inter = min(known) * len(local)
            else:
                inter = None
        where = "network" if nnodes > 1 else ("nvlink" if intra and ring_nvlink else "pcie")
        return {"size": size, "gpus": local, "ranks_per_node": rpn, "nodes": nnodes,
                "intra_GBps": round(intra, 3) if intra is not None else None,
                "inter_GBps": round(inter, 3) if inter is not None else None, "where": where}


def normalize_axes(axes: Dict[str, int]) -> Dict[str, int]:
    """``axes`` with ``etp`` (default tp) and ``edp`` (world / (etp*ep*pp), when whole) filled in."""
    out = dict(axes)
    out.setdefault("ep", 1)
    out.setdefault("cp", 1)
    out["etp"] = out.get("etp") or out["tp"]
    world = out["tp"] * out["cp"] * out["dp"] * out["pp"]
    etmp = out["etp"] * out["ep"] * out["pp"]
    out["edp"] = world // etmp if world % etmp == 0 else 0
    return out


def make_layout(view: NodeView, nodes: int, gpn: int, axes: Dict[str, int], order: str = DEFAULT_ORDER,
                weights: Optional[Dict[str, float]] = None, gpus: Optional[List[int]] = None) -> Layout:
    """Resolve the generators and the local map for ``nodes`` identical nodes of ``gpn`` GPUs."""
    axes = normalize_axes(axes)
    warnings = check_feasible(view, axes, gpn, nodes)
    gen, egen = megatron_generators(axes, order)
    if gen.world_size != nodes * gpn:
        raise PlanInfeasible(f"tp*cp*dp*pp = {gen.world_size} but {nodes} node(s) x {gpn} GPUs = {nodes * gpn}")
    for name, g, token in (("TP", gen, "tp"), ("expert TP", egen, "tp")):
        if g.name_to_size["tp"] > 1:
            # Launchers give each node a contiguous block of ranks; an order that puts other axes before
            # tp strides TP groups across that block, and possibly across nodes.
            bases, members = g.group_parts(token)
            for b in bases:
                if (b + members[0]) // gpn != (b + members[-1]) // gpn:
                    raise PlanInfeasible(f"with --order {gen.order}, {name} groups span nodes (e.g. ranks "
                                         f"{b + members[0]} and {b + members[-1]} with {gpn} GPUs per node): "
                                         "put tp first in the order")
    local = choose_local_gpus(view, gen, gpn, weights, 0, gpus, egen=egen)
    # Patterns can differ between nodes when groups straddle node boundaries unevenly; the map of
    # node 0 is reused (rail alignment needs one map), and such layouts are flagged.
    if nodes > 1 and local_group_pattern(gen, gpn, 0, egen) != local_group_pattern(gen, gpn, nodes - 1, egen):
        warnings.append("parallel groups straddle node boundaries unevenly; nodes use node 0's GPU order")
    if axes["tp"] > 1:
        doms = [set(d) for d in view.nvlink_domains]
        for grp in local_group_pattern(gen, gpn, 0).get("tp", []):
            gs = {local[l] for l in grp}
            if doms and not any(gs <= d for d in doms) and max(len(d) for d in doms) >= len(gs):
                warnings.append(f"TP group on GPUs {sorted(gs)} is not inside one NVLink domain")
    return Layout(gen=gen, axes=axes, nodes=nodes, gpn=gpn, local_gpus=local, view=view, warnings=warnings,
                  egen=egen)


def build_plan(doc: dict, *, nodes: int = 1, tp: Optional[int] = None, pp: Optional[int] = None,
               dp: Optional[int] = None, cp: Optional[int] = None, ep: Optional[int] = None,
               order: str = DEFAULT_ORDER, gpus_per_node: Optional[int] = None,
               gpus: Optional[List[int]] = None, weights: Optional[Dict[str, float]] = None,
               hosts: Optional[List[str]] = None, node_docs: Optional[List[dict]] = None,
               etp: Optional[int] = None) -> dict:
    """The plan document (``schema: gpucomm.plan/v1``) without env/launch/estimate sections,
    which :mod:`gpucomm.planners.launch.env`, :mod:`gpucomm.planners.launch.scripts` and :mod:`gpucomm.planners.placement.models` add.

    doc: the node topology (all nodes assumed identical unless ``node_docs`` gives one per node);
    gpus: GPU indices to use on each node (default: all); hosts: host names per node rank."""
    if not isinstance(nodes, int) or nodes < 1:
        raise InputError(f"--nodes {nodes} is not a positive integer", expected="an integer >= 1")
    view = node_view(doc, gpus)
    gpn = gpus_per_node or view.gpu_count
    if gpn > view.gpu_count:
        raise PlanInfeasible(f"{gpn} GPUs per node requested but the topology has {view.gpu_count}")
    if gpn < 1:
        raise InputError("--gpus-per-node must be >= 1")
    total = nodes * gpn
    axes = resolve_axes(total, tp, pp, dp, cp, ep, gpn, etp=etp)
    layout = make_layout(view, nodes, gpn, axes, order, weights, gpus)
    return plan_document(layout, hosts=hosts, node_docs=node_docs)


def plan_document(layout: Layout, hosts: Optional[List[str]] = None, node_docs: Optional[List[dict]] = None) -> dict:
    """Expand a :class:`Layout` into the per-rank plan document."""
    gen, view, gpn, nodes = layout.gen, layout.view, layout.gpn, layout.nodes
    binding = cpu_binding(view, layout.local_gpus)
    local_info = []
    for lr, gi in enumerate(layout.local_gpus):
        g = view.gpu(gi)
        local_info.append({
            "gpu": gi,
            "pci_bus_id": g.get("pci_bus_id"),
            "uuid": g.get("uuid"),
            "numa_node": binding[lr]["numa_node"],
            "cpus": binding[lr]["cpus"],
            "nics": list(view.gpu_nics.get(gi, [])),
        })
    egen = layout.egen or megatron_generators(layout.axes, gen.order)[1]
    tokens, etokens = gen.tokens, egen.tokens
    strides, estrides = [gen.strides[t] for t in tokens], [egen.strides[t] for t in etokens]
    sizes, esizes = gen.ordered_size, egen.ordered_size
    # GPU UUIDs are facts about one host: with one document for N identical nodes only node 0 (the
    # host that was probed) has them; in a cluster, a document shared by several hosts (a
    # synthetic or "same as" entry) gives none.
    uuids: List[Dict[int, Optional[str]]] = []
    if node_docs is not None:
        shared: Dict[int, int] = {}
        for d in node_docs:
            shared[id(d)] = shared.get(id(d), 0) + 1
        cache: Dict[int, Dict[int, Optional[str]]] = {}
        for d in node_docs:
            if id(d) not in cache:
                cache[id(d)] = ({g["index"]: g.get("uuid") for g in d.get("gpus") or [] if isinstance(g, dict)}
                                if shared[id(d)] == 1 else {})
            uuids.append(cache[id(d)])
    else:
        uuids = [{li["gpu"]: li["uuid"] for li in local_info}] + [{}] * (nodes - 1)
    ranks = []
    for r in range(gen.world_size):
        node, lr = divmod(r, gpn)
        li = local_info[lr]
        coords = {t: (r // s) % n for t, s, n in zip(tokens, strides, sizes)}
        ecoords = {t: (r // s) % n for t, s, n in zip(etokens, estrides, esizes)}
        coords["ep"] = ecoords["ep"]
        uuid = uuids[node].get(li["gpu"])
        ranks.append({
            "rank": r, "node": node, "host": hosts[node] if hosts else None, "local_rank": lr,
            "gpu": li["gpu"], "gpu_uuid": uuid, "pci_bus_id": li["pci_bus_id"], "numa_node": li["numa_node"],
            "cpus": li["cpus"], "nics": li["nics"], "coords": {a: coords.get(a, 0) for a in AXES},
            "expert_coords": {"etp": ecoords["tp"], "ep": ecoords["ep"], "edp": ecoords["dp"], "pp": ecoords["pp"]},
        })
    # Every group Megatron-LM's initialize_model_parallel builds, from the generator that builds it.
    groups = {}
    for key, (kind, token, _) in MEGATRON_GROUPS.items():
        groups[key] = (egen if kind == "expert" else gen).get_ranks(token)
    warnings = list(dict.fromkeys(view.notes + layout.warnings + view.topo.all_assumptions()))
    return {
        "schema": "gpucomm.plan/v1",
        "world_size": gen.world_size,
        "nodes": nodes,
        "gpus_per_node": gpn,
        "hosts": list(hosts) if hosts else None,
        "parallelism": {"tp": layout.axes["tp"], "cp": layout.axes["cp"], "ep": layout.axes["ep"],
                        "dp": layout.axes["dp"], "pp": layout.axes["pp"], "etp": egen.tp, "edp": egen.dp,
                        "order": gen.order},
        "mesh": mesh_translations(gen, egen),
        "local_ranks": [dict(local_rank=lr, **{k: v for k, v in li.items() if k != "uuid"},
                             cores=binding[lr]["cores"], mems=binding[lr]["mems"],
                             numa_source=binding[lr]["numa_source"], logical_cores=binding[lr]["logical_cores"])
                        for lr, li in enumerate(local_info)],
        "tiers": {a: layout.axis_tier(a) for a in TIER_AXES},
        "nvlink_domains": view.nvlink_domains,
        "ranks": ranks,
        "groups": groups,
        "group_names": {k: v[2] for k, v in MEGATRON_GROUPS.items()},
        "env": {},
        "launch": {},
        "estimate": None,
        "warnings": warnings,
    }


def check_plan_invariants(plan: dict, view: Optional[NodeView] = None) -> List[str]:
    """Problems with a plan (empty when it is sound): every rank once, groups partition the ranks,
    TP groups on one node and inside one NVLink domain when the node has one."""
    problems = []
    world = plan["world_size"]
    ranks = [r["rank"] for r in plan["ranks"]]
    if sorted(ranks) != list(range(world)):
        problems.append("ranks are not 0..world-1 exactly once")
    by_rank = {r["rank"]: r for r in plan["ranks"]}
    for axis in plan["groups"]:
        flat = sorted(x for g in plan["groups"][axis] for x in g)
        if flat != list(range(world)):
            problems.append(f"{axis} groups do not partition the ranks")
    domains = [set(d) for d in plan.get("nvlink_domains") or []]
    for grp in plan["groups"].get("etp") or []:
        if len({r // plan["gpus_per_node"] for r in grp}) > 1:
            problems.append(f"expert TP group {grp} spans nodes")
    for grp in plan["groups"]["tp"]:
        if any(r not in by_rank for r in grp):
            problems.append(f"TP group {grp} names ranks that have no placement")
            continue
        nodes = {by_rank[r]["node"] for r in grp}
        if len(nodes) > 1:
            problems.append(f"TP group {grp} spans nodes {sorted(nodes)}")
        gs = {by_rank[r]["gpu"] for r in grp}
        if domains and len(grp) > 1 and max(len(d) for d in domains) >= len(grp) and not any(gs <= d for d in domains):
            problems.append(f"TP group {grp} (GPUs {sorted(gs)}) is not inside one NVLink domain")
    seen = set()
    for r in plan["ranks"]:
        key = (r["node"], r["gpu"])
        if key in seen:
            problems.append(f"GPU {r['gpu']} of node {r['node']} is used twice")
        seen.add(key)
    return problems
