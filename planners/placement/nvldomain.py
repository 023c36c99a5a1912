"""Parallel groups across the trays of an NVLink domain (GB200/GB300 NVL72: 18 trays of 4 GPUs on one NVLink
fabric, which NCCL runs as one system -- MNNVL).  A tensor/context/expert-parallel group may span trays when
they share an NVLink domain: its traffic stays on NVLink.  The job's consecutive nodes come in groups that
share a domain: ``--nvlink-domain K``, else the fabric info's (:meth:`gpucomm.probes.topology.Topology.nvlink_domain`),
split as NCCL splits them (:func:`gpucomm.planners.nccl.comm.nccl_comm`: the largest size <= K dividing the
nodes)."""
from __future__ import annotations

from typing import Optional

from gpucomm.probes.errors import PlanInfeasible
from gpucomm.probes.topology import Topology

NVLINK_DOMAIN_KEY = ("nvlink_domain",)   # view.cache entry: nodes (trays) per NVLink domain (--nvlink-domain)


def job_domain_nodes(topo, nodes: int, k: Optional[int] = None) -> int:
    """Consecutive nodes of the job that share one NVLink domain: ``k`` (--nvlink-domain), else the
    topology's (its fabric info: an IMEX domain's nodes, the hosts of NCCL's fused dump, all the nodes
    where the size is unknown; 1 without multi-node NVLink), at most ``nodes`` and dividing them.

    >>> job_domain_nodes(None, 32, 18), job_domain_nodes(None, 4, 18), job_domain_nodes(None, 6, 1)
    (16, 4, 1)
    """
    if k is None:
        dom = Topology.of(topo).nvlink_domain() if topo is not None else None
        # a tray whose domain size is unknown: its copies share its clique, as NCCL's model takes them
        # (planners/nccl/comm.py nccl_comm: K = the nodes)
        k = (dom.nodes or nodes) if dom is not None and dom.multi_node else 1
    if int(k) <= 1:
        return 1          # no multi-node NVLink: NCCL's MNNVL module is not needed
    from gpucomm.planners.nccl.mnnvl import equal_domains

    return equal_domains(nodes, k)


def view_domain_nodes(view, nodes: int) -> int:
    """:func:`job_domain_nodes` of a node view: its topology and the --nvlink-domain it was given
    (``view.cache[NVLINK_DOMAIN_KEY]``, models.use_nvlink_domain)."""
    return job_domain_nodes(view.topo, nodes, view.cache.get(NVLINK_DOMAIN_KEY))


def domain_note(gpn: int, domain_nodes: int, axes: dict, nodes: int, tiers: Optional[dict] = None) -> Optional[str]:
    """Why the plan's groups are where they are, when nodes share NVLink domains (None otherwise).
    ``tiers``: axis -> ``Layout.axis_tier`` (how its groups lie on the domains); without them every
    model-parallel group is taken to fit."""
    if domain_nodes <= 1:
        return None
    tiers = tiers or {}
    inner, crossing = [], []
    for a in ("tp", "cp", "ep"):
        if axes.get(a, 1) <= 1:
            continue
        t = tiers.get(a) or {}
        if t.get("domains", 1) > 1:
            k = t.get("groups_crossing_domains", 0)
            crossing.append(f"{a}={axes[a]} ({k} group{'s cross' if k != 1 else ' crosses'} a domain boundary)")
        else:
            inner.append(f"{a}={axes[a]}")
    span = [f"tp={axes['tp']} spans {axes['tp'] // gpn} trays"] if axes.get("tp", 1) > gpn else []
    doms = nodes // domain_nodes
    text = (f"NVLink domain: {domain_nodes} consecutive nodes x {gpn} GPUs = {domain_nodes * gpn} GPUs share one NVLink "
            "fabric (NCCL runs them as one system, MNNVL)")
    if inner or not crossing:
        text += (": the model-parallel groups" + (f" ({', '.join(inner)})" if inner else "") + " stay inside it"
                 + (f", {'; '.join(span)} over NVLink" if span else ""))
    if crossing:
        text += ("; " if inner else ": ") + ", ".join(crossing) + (
            f": their traffic between domains goes over the NICs (a group stays inside when its trays divide "
            f"the domain's {domain_nodes})")
    if doms == 1:
        return text + "; the whole job is in one domain"
    outer = [a for a in ("dp", "pp") if axes.get(a, 1) > 1 and (not tiers or (tiers.get(a) or {}).get("domains", 1) > 1)]
    return text + (f"; {'/'.join(outer)} cross{'es' if len(outer) == 1 else ''} the {doms} domains over the NICs"
                   if outer else f"; the {doms} domains exchange data only through the groups above")


def fits_nvlink_domain(name: str, v: int, gpn: int, nodes: int, view=None, domain_nodes: Optional[int] = None) -> None:
    """Raise PlanInfeasible unless a ``name`` group of ``v`` consecutive ranks stays inside one node (``v``
    divides its ``gpn`` GPUs) or inside one NVLink domain of the job (``v`` a multiple of ``gpn`` whose
    trays divide the domain's nodes).  ``view``: the node view whose topology (and --nvlink-domain)
    say the domain, unless ``domain_nodes`` does."""
    if v <= gpn and gpn % v == 0:
        return
    if domain_nodes is None:
        domain_nodes = view_domain_nodes(view, nodes) if view is not None else job_domain_nodes(None, nodes)
    if domain_nodes > 1 and v % gpn == 0 and domain_nodes % (v // gpn) == 0:
        return
    if domain_nodes > 1:
        raise PlanInfeasible(f"{name}={v} does not fit in {gpn} GPUs per node nor in whole trays of the NVLink "
                             f"domain ({domain_nodes} nodes x {gpn} GPUs): tensor parallelism must stay inside a node "
                             "or an NVLink domain")
    if v > gpn:
        raise PlanInfeasible(f"{name}={v} does not fit in {gpn} GPUs per node (tensor parallelism must stay inside a "
                             "node)")
    raise PlanInfeasible(f"{name}={v} does not divide {gpn} GPUs per node")


__all__ = ["NVLINK_DOMAIN_KEY", "job_domain_nodes", "view_domain_nodes", "fits_nvlink_domain", "domain_note"]
