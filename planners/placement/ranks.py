"""Megatron-LM's rank order: which ranks form the groups of each parallelism axis (``gpucomm plan``).

:class:`RankGenerator` -- Megatron-LM's ``RankGenerator`` semantics exactly
(``megatron/core/parallel_state.py`` @ d98e8a64): the ``order`` string (default ``tp-cp-ep-dp-pp``) is a
mixed radix whose *leftmost* token has stride 1; a token missing from ``order`` is appended when its size
is 1 and is an error otherwise; ``get_ranks('dp')`` returns every group of ranks that differ only in the
masked coordinates (multi-axis tokens such as ``'tp-pp'`` mask several axes).

Expert parallelism as Megatron-LM builds it (``initialize_model_parallel``): the world is
``tp * cp * dp * pp`` (the *dense* generator, ``RankGenerator(tp, ep=1, dp, pp, cp, order)``), and the
expert layers re-factor the same world as ``etp * ep * edp * pp`` (the *expert* generator,
``RankGenerator(tp=etp, ep, dp=edp, pp, cp=1, order)``, ``etp`` = ``--expert-tensor-parallel-size``,
default tp; ``edp = world / (etp*ep*pp)``): experts are carved out of ``dp * cp``.  Megatron asserts
``world % (etp*ep*pp) == 0``, ``order.endswith("pp") or pp == 1 or edp == dp``, and that both
generators give the same pipeline groups; :func:`megatron_generators` applies the same checks;
:func:`resolve_axes` fills the axes a user left out.

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

import math
from typing import Dict, List, Optional, Sequence, Tuple

from gpucomm.probes.errors import InputError, PlanInfeasible
from gpucomm.planners.placement.nvldomain import fits_nvlink_domain

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


def resolve_axes(total: int, tp: Optional[int], pp: Optional[int], dp: Optional[int], cp: Optional[int],
                 ep: Optional[int], gpn: Optional[int] = None, etp: Optional[int] = None,
                 domain_nodes: int = 1) -> Dict[str, int]:
    """Fill the axes the user left out (dp absorbs the rest) and check the product, as Megatron-LM
    does: ``world = tp*cp*dp*pp``; the experts re-factor the same world as ``etp*ep*edp*pp``
    (``etp`` defaults to tp), so ``ep`` must divide ``dp*cp*tp/etp``.  With ``gpn`` (GPUs per node),
    TP is checked against the node first: that is the error users need to see (or, with ``domain_nodes``
    > 1 consecutive nodes sharing an NVLink domain, against whole trays of it)."""
    for name, v in (("tp", tp), ("pp", pp), ("dp", dp), ("cp", cp), ("ep", ep), ("etp", etp)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise InputError(f"--{name} {v} is not a positive integer", expected="an integer >= 1")
    if gpn:
        for name, v in (("tp", tp), ("etp", etp)):
            if not v:
                continue
            if v > gpn or gpn % v:
                fits_nvlink_domain(name, v, gpn, total // gpn, None, domain_nodes)
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
