"""NCCL 2.30.7's multi-node NVLink (MNNVL) clique formation: which ranks NCCL treats as one NVLink system.

Every GPU reports NVML fabric info (``nvmlDeviceGetGpuFabricInfoV``: a 128-bit cluster UUID, a clique
id, a registration state).  ``fillInfo`` (src/init.cc) takes it with two overrides, NCCL_MNNVL_UUID (both
halves of the UUID) and NCCL_MNNVL_CLIQUE_ID; ``initTransportsRank`` runs the MNNVL check when the
communicator spans hosts and NCCL_MNNVL_ENABLE is not 0 (and NCCL_P2P_LEVEL is not LOC), or when
NCCL_MNNVL_ENABLE=1; ``ncclMnnvlCheck`` (src/mnnvl.cc) needs cuMem (NCCL_CUMEM_ENABLE not 0), FABRIC
handles (here: GPUs that report fabric info), every rank's fabric state COMPLETED and a non-zero UUID,
and then takes as the rank's clique the ranks with its UUID and clique id (``nvlDomainSize``: the ranks
with its UUID).  MNNVL is on when the clique or the domain has more than one rank.

With MNNVL on, NCCL fuses the XMLs of the clique's ranks (not only the host's) into one system
(:mod:`gpucomm.planners.nccl.comm`), and NCCL's node count is the number of cliques.

:func:`grouped` lays out the fabric of ``nodes`` hosts in consecutive groups of ``clique`` hosts (one
clique each; ``domain`` hosts per cluster UUID), every GPU in ``state`` -- the layout ncclsim's harness
(tools/ncclsim, ``--mnnvl-clique``/``--mnnvl-domain``/``--fabric-state``) gives its GPUs, value for value.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from gpucomm.probes import facts

NOT_SUPPORTED, COMPLETED = facts.FABRIC_STATES.index("not_supported"), facts.FABRIC_STATES.index("completed")
STATE_NAMES = {name: i for i, name in enumerate(facts.FABRIC_STATES)}     # NVML_GPU_FABRIC_STATE_* by name
_U64 = 0xFFFFFFFFFFFFFFFF


@dataclass(frozen=True)
class GpuFabric:
    """One GPU's NVML fabric info: ``uuid`` the 16 bytes of the cluster UUID as a little-endian int
    (0: none), ``clique`` the clique id, ``state`` NVML_GPU_FABRIC_STATE_*."""

    uuid: int
    clique: int
    state: int


@dataclass(frozen=True)
class Fabric:
    """The fabric info of every GPU of every host: ``hosts[h][i]`` for host h's i-th GPU (rank h*G+i)."""

    hosts: tuple

    def gpu(self, rank: int, per_host: int) -> GpuFabric:
        return self.hosts[rank // per_host][rank % per_host]


# The layout of tools/ncclsim's harness (main.cc fillFabricInfo): UUID halves "nvldom"+domain and
# "NCCLSIM", clique ids counting down from 0x7ffe within a domain.
_UUID_HI = 0x4E43434C53494D
_UUID_LO = 0x6E766C646F6D0000
_CLIQUE0 = 0x7FFE


def equal_domains(nodes: int, k: int) -> int:
    """Trays per NVLink domain when ``nodes`` trays fill domains of up to ``k``: ``k`` where it divides them,
    else the largest equal split no larger (32 trays of 18-tray racks: 16; a group of 9 trays over two
    racks of 4 + 5: 3).

    >>> equal_domains(32, 18), equal_domains(4, 18), equal_domains(9, 4), equal_domains(6, 1)
    (16, 4, 3, 1)
    """
    k = max(1, min(int(k), int(nodes)))
    return max(d for d in range(1, k + 1) if nodes % d == 0)


def grouped(nodes: int, per_host: int, clique: int, domain: Optional[int] = None, state: int = COMPLETED) -> Fabric:
    """``nodes`` hosts of ``per_host`` GPUs: hosts in consecutive groups of ``clique`` share a clique id,
    groups of ``domain`` (default ``clique``) a cluster UUID; every GPU in ``state``."""
    dom = domain or clique
    hosts = []
    for h in range(nodes):
        f = GpuFabric((_UUID_LO + h // dom) | (_UUID_HI << 64), _CLIQUE0 - (h % dom) // clique, state)
        hosts.append((f,) * per_host)
    return Fabric(tuple(hosts))


def of_gpus(per_host: tuple, nodes: int, clique: int) -> Fabric:
    """``nodes`` hosts, copies in turn of the hosts whose GPUs report ``per_host`` (per host a tuple of
    :class:`GpuFabric`, rank order; one host's for a document of one node), in consecutive groups of
    ``clique`` hosts: each group its own NVLink domain (the recorded cluster UUIDs made distinct per
    group), the recorded clique ids and states kept."""
    hosts = []
    for h in range(nodes):
        grp = h // clique
        hosts.append(tuple(GpuFabric(f.uuid ^ grp if f.uuid else 0, f.clique, f.state)
                           for f in per_host[h % len(per_host)]))
    return Fabric(tuple(hosts))


def gpu_fabric(rec: Any) -> Optional[GpuFabric]:
    """A GPU's fabric info -- the view's ``GPU.fabric`` (probes/topology.py) or a document's
    ``gpus[].fabric`` record: ``cluster_uuid``, ``clique_id``, ``state`` as NVML names it
    (facts.FABRIC_STATES) -- as :class:`GpuFabric`; None when there is none or it cannot be read."""
    if rec is not None and not isinstance(rec, dict):
        rec = {k: getattr(rec, k, None) for k in ("cluster_uuid", "clique_id", "state")}
    if not isinstance(rec, dict):
        return None
    state = rec.get("state")
    if isinstance(state, str):
        state = STATE_NAMES.get(state.strip().lower().replace(" ", "_"))
    if not isinstance(state, int) or isinstance(state, bool) or not 0 <= state <= 255:   # NVML: an unsigned char
        return None
    import uuid as _uuid      # here: only documents with fabric info need it (start-up time)

    cu = rec.get("cluster_uuid")
    try:
        uuid = int.from_bytes(_uuid.UUID(str(cu)).bytes, "little") if cu else 0
    except ValueError:
        return None
    clique = rec.get("clique_id")
    if not isinstance(clique, int) or isinstance(clique, bool):
        clique = 0
    return GpuFabric(uuid, clique & 0xFFFFFFFF, state)


def none(nodes: int, per_host: int) -> Fabric:
    """GPUs without fabric info (NVML: NOT_SUPPORTED), as on any GPU outside an NVLink fabric."""
    f = GpuFabric(0, 0, NOT_SUPPORTED)
    return Fabric(tuple((f,) * per_host for _ in range(nodes)))


def filled(f: GpuFabric, settings) -> GpuFabric:
    """``fillInfo``'s overrides: NCCL_MNNVL_UUID (both 64-bit halves), NCCL_MNNVL_CLIQUE_ID."""
    if f.state == NOT_SUPPORTED:
        return f
    uuid, clique = f.uuid, f.clique
    if settings.mnnvl_uuid != -1:
        v = settings.mnnvl_uuid & _U64
        uuid = v | (v << 64)
    if settings.mnnvl_clique_id != -1:
        clique = settings.mnnvl_clique_id & 0xFFFFFFFF
    return GpuFabric(uuid, clique, f.state)


@dataclass(frozen=True)
class Clique:
    """The outcome of the MNNVL check for one rank: ``mnnvl`` on or off, the clique's ranks (in rank
    order), the rank's index in it, the clique id and ``nvlDomainSize``."""

    mnnvl: int
    ranks: tuple
    rank_in_clique: int
    clique_id: int
    domain_size: int


def infos(fabric: Fabric, per_host: int, n_ranks: int, settings) -> list:
    """Every rank's fabric info as fillInfo leaves it (:func:`filled`)."""
    done: dict = {}
    out = []
    for r in range(n_ranks):
        f = fabric.gpu(r, per_host)
        got = done.get(f)
        if got is None:
            got = done[f] = filled(f, settings)
        out.append(got)
    return out


def check(fabric: Fabric, per_host: int, n_ranks: int, rank: int, settings, filled_infos: Optional[list] = None
          ) -> Clique:
    """init.cc's gate and ``ncclMnnvlCheck`` for ``rank`` of ``n_ranks`` (``per_host`` ranks per host);
    ``filled_infos``: :func:`infos`, when the caller has it."""
    off = Clique(0, (), 0, 0, 0)
    infos_ = filled_infos if filled_infos is not None else infos(fabric, per_host, n_ranks, settings)
    hosts = n_ranks // per_host
    p2p_level = -1 if settings.p2p_level is None else settings.p2p_level
    en = settings.mnnvl_enable
    if not ((hosts > 1 and en != 0 and p2p_level != 0) or en == 1):
        return off
    if settings.cumem_enable == 0:                       # MNNVL requires cuMem
        return off
    me = infos_[rank]
    if me.state == NOT_SUPPORTED:                        # no FABRIC handle support
        return off
    if any(i.state != COMPLETED for i in infos_):
        return off
    ranks: list = []
    dom = 0
    mine = 0
    for r, i in enumerate(infos_):
        if i.uuid == 0:
            return off
        if i.uuid == me.uuid:
            dom += 1
            if i.clique == me.clique:
                if r == rank:
                    mine = len(ranks)
                ranks.append(r)
    if len(ranks) <= 1 and dom <= 1:
        return off
    return Clique(1, tuple(ranks), mine, me.clique, dom)


__all__ = ["GpuFabric", "Fabric", "Clique", "equal_domains", "grouped", "of_gpus", "gpu_fabric", "none", "filled", "infos", "check",
           "COMPLETED", "NOT_SUPPORTED", "STATE_NAMES"]
