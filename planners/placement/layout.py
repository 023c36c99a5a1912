"""The plan of ``gpucomm plan``: Megatron's groups (:mod:`~gpucomm.planners.placement.ranks`) laid on
nodes, each local rank on a GPU (:mod:`~gpucomm.planners.placement.assign`) with its CPUs
(:mod:`~gpucomm.planners.placement.binding`) and NICs (:mod:`~gpucomm.planners.placement.nics`), read from
placement's view of the node (:mod:`~gpucomm.planners.placement.nodeview`) -> the ``gpucomm.plan/v1``
document (:func:`build_plan`, :func:`plan_document`).

Launchers give a node the contiguous block of ranks ``[node*G, (node+1)*G)``, so what a planner chooses
is (a) which physical GPU serves each local rank and (b) which host serves each node rank (see
:mod:`gpucomm.planners.placement.cluster`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from gpucomm.probes.errors import InputError, PlanInfeasible
from gpucomm.probes.model import format_cpulist
from gpucomm.probes.topology import Topology, nv_count

from gpucomm.planners.placement.assign import choose_local_gpus, local_group_pattern
from gpucomm.planners.placement.binding import cpu_binding
from gpucomm.planners.placement.nodeview import NodeView, best_ring, node_view
from gpucomm.planners.placement.nvldomain import fits_nvlink_domain, view_domain_nodes
from gpucomm.planners.placement.ranks import (AXES, DEFAULT_ORDER, MEGATRON_GROUPS, TIER_AXES, RankGenerator,
                                              megatron_generators, mesh_translations, normalize_axes, resolve_axes)


def check_feasible(view: NodeView, axes: Dict[str, int], gpn: int, nodes: int) -> List[str]:
    """Raise PlanInfeasible for layouts that cannot work; return warnings for poor ones."""
    warnings: List[str] = []
    tp = axes["tp"]
    if gpn > view.gpu_count:
        raise PlanInfeasible(f"{gpn} GPUs per node requested but the topology has {view.gpu_count}")
    if tp > gpn or gpn % tp:
        fits_nvlink_domain("tp", tp, gpn, nodes, view)
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
    if nodes > 1 and dom >= gpn:     # trays of one multi-node NVLink domain: NVLink between them too
        dom = gpn * view_domain_nodes(view, nodes)
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
    _domain_nodes: Optional[int] = None
    _tiers: Optional[dict] = None

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
        in-node bottleneck bandwidth and the network bandwidth available to it; where nodes share
        NVLink domains, also how the groups lie on them (:meth:`_domain_spread`)."""
        if self._tiers is None:
            self._tiers = {}
        if axis not in self._tiers:
            self._tiers[axis] = self._axis_tier(axis)
        return dict(self._tiers[axis])

    def _axis_tier(self, axis: str) -> dict:
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
                    nv_count(self.view.level.get((a, b))) for i, a in enumerate(local) for b in local[i + 1:]):
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
        out = {"size": size, "gpus": local, "ranks_per_node": rpn, "nodes": nnodes,
               "intra_GBps": round(intra, 3) if intra is not None else None,
               "inter_GBps": round(inter, 3) if inter is not None else None, "where": where}
        dn = self.domain_nodes
        if nnodes > 1 and dn > 1:
            out.update(self._domain_spread(gen, token, dn))
            if out["domains"] == 1:
                # every group's trays share one NVLink domain (MNNVL): its traffic stays on NVLink
                nv = min(self.view.nvlink_bw_per_gpu(g) for g in local)
                out.update(where="nvlink", intra_GBps=round(nv, 3) if nv else out["intra_GBps"], inter_GBps=None)
        return out

    @property
    def domain_nodes(self) -> int:
        """Consecutive nodes (trays) of this job per NVLink domain (1: none spans nodes)."""
        if self._domain_nodes is None:
            self._domain_nodes = view_domain_nodes(self.view, self.nodes) if self.nodes > 1 else 1
        return self._domain_nodes

    def _domain_spread(self, gen: RankGenerator, token: str, dn: int) -> dict:
        """How ``token``'s groups lie on NVLink domains of ``dn`` consecutive nodes: the most domains one
        group spans (``domains``), the fewest of its nodes that share one domain in such a group
        (``domain_nodes``: what the cost model fuses), and how many groups cross a domain boundary."""
        worst, fewest, crossing = 1, None, 0
        for grp in gen.get_ranks(token):
            per: Dict[int, set] = {}
            for r in grp:
                node = r // self.gpn
                per.setdefault(node // dn, set()).add(node)
            n = len(per)
            if n > 1:
                crossing += 1
            least = min(len(v) for v in per.values())
            if n > worst or (n == worst and (fewest is None or least < fewest)):
                worst, fewest = n, least
        return {"domains": worst, "domain_nodes": fewest, "groups_crossing_domains": crossing}


def make_layout(view: NodeView, nodes: int, gpn: int, axes: Dict[str, int], order: str = DEFAULT_ORDER,
                weights: Optional[Dict[str, float]] = None, gpus: Optional[List[int]] = None) -> Layout:
    """Resolve the generators and the local map for ``nodes`` identical nodes of ``gpn`` GPUs."""
    axes = normalize_axes(axes)
    warnings = check_feasible(view, axes, gpn, nodes)
    gen, egen = megatron_generators(axes, order)
    if gen.world_size != nodes * gpn:
        raise PlanInfeasible(f"tp*cp*dp*pp = {gen.world_size} but {nodes} node(s) x {gpn} GPUs = {nodes * gpn}")
    for name, g, token in (("TP", gen, "tp"), ("expert TP", egen, "tp")):
        if 1 < g.name_to_size["tp"] <= gpn:   # (a larger one spans the trays of an NVLink domain)
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


def plan_document(layout: Layout, hosts: Optional[List[str]] = None, node_docs: Optional[list] = None) -> dict:
    """Expand a :class:`Layout` into the per-rank plan document (``node_docs``: each node's topology, a
    :class:`Topology` or a document, when the nodes differ)."""
    gen, view, gpn, nodes = layout.gen, layout.view, layout.gpn, layout.nodes
    binding = cpu_binding(view, layout.local_gpus)
    local_info = []
    for lr, gi in enumerate(layout.local_gpus):
        g = view.gpu(gi)
        local_info.append({
            "gpu": gi,
            "pci_bus_id": g.pci_bus_id,
            "uuid": g.uuid,
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
                cache[id(d)] = {g.index: g.uuid for g in Topology.of(d).gpus} if shared[id(d)] == 1 else {}
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
