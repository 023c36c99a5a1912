"""``gpucomm plan`` end to end: placement (:mod:`gpucomm.planners.placement`), NCCL/CUDA settings and
launch artefacts (:mod:`gpucomm.planners.launch`) for one node type or a cluster, as one
``gpucomm.plan/v1`` document.  Pure: the topology and cluster come in already read."""
from __future__ import annotations

from typing import List, Optional, Union

from gpucomm.planners.launch import env as penv
from gpucomm.planners.launch import scripts as launch
from gpucomm.planners.placement import layout as placement
from gpucomm.planners.placement.binding import core_map
from gpucomm.planners.placement.ranks import parse_order
from gpucomm.planners.placement import models as model_specs
from gpucomm.planners.placement.cluster import block_segment, choose_host_order, leaf_uplinks, traffic_report
from gpucomm.planners.placement.nvldomain import domain_note, job_domain_nodes
from gpucomm.planners.placement.select import select_gpus
from gpucomm.probes.errors import InputError, PlanInfeasible
from gpucomm.probes.topology import Topology


def build_full_plan(doc: Union[Topology, dict, None], *, nodes: Optional[int] = None, tp=None, pp=None, dp=None, cp=None,
                    ep=None, order: str = "tp-cp-ep-dp-pp", model: Optional[str] = None, top: int = 5,
                    gpus_per_node: Optional[int] = None, gpus: Optional[List[int]] = None, cluster=None,
                    command: str = "train.py", topo_file_path: Optional[str] = None, port: int = 29500,
                    hosts: Optional[List[str]] = None, etp: Optional[int] = None, vpp: Optional[int] = None,
                    torch_version: Optional[str] = None, calibration: Optional[dict] = None,
                    calibration_source: Optional[str] = None, nccl_graph: bool = False, force: bool = False,
                    nccl_xml: bool = False, transport: Optional[str] = None,
                    nvlink_domain: Optional[int] = None) -> dict:
    """Everything ``gpucomm plan`` computes, as the ``gpucomm.plan/v1`` document (no I/O): the
    factorization (given, or ranked for ``model``), the rank layout, env settings with reasons, launch
    artefacts, and with ``cluster`` the host order and cross-switch traffic.  ``calibration``: a
    ``gpucomm.calibration/v1`` document that times the collectives of ``model``'s estimate.
    ``nccl_graph``: set NCCL_GRAPH_FILE (file ``nccl-graph.xml``) where our rings beat NCCL's search.
    A ``model`` that does not fit in GPU memory is PlanInfeasible, whether the sizes were ranked or
    given; ``force`` plans it anyway, with the reason in ``forced`` (and in the launch files).
    ``nccl_xml``: ``files['nccl-topo.xml']`` always (the XML NCCL detects by itself where the host's
    own tree serves, the VM skeleton where it does not; each says which in a comment).
    ``transport``: the ``--transport`` value timing ``model``'s multi-node collectives (default: the
    probe's, :mod:`gpucomm.planners.collectives.transport`).  ``nvlink_domain``: consecutive nodes per
    NVLink domain timing ``model``'s collectives across nodes (default: NCCL's, from the fabric info)."""
    order = parse_order(order)
    mspec = model_specs.parse_model_spec(model)
    hosts_pool = None
    if cluster is not None:
        ref_host = cluster.nodes[0]
        views = {src: Topology.of(d) for src, d in cluster.docs.items()}   # one view per topology file
        doc = views[cluster.topology_of[ref_host]]
        counts = {h: len(views[cluster.topology_of[h]].gpus) for h in cluster.nodes}
        want = gpus_per_node or (len(gpus) if gpus else counts[ref_host])
        hosts_pool = [h for h in cluster.nodes if counts[h] >= want and h not in cluster.unhealthy]
        if not hosts_pool:
            raise PlanInfeasible(f"no healthy node of the cluster has {want} GPUs")
    if doc is None:
        raise InputError("plan needs a topology (TOPO) or --cluster FILE")
    topo = Topology.of(doc)
    view = placement.node_view(topo)
    if gpus is None and gpus_per_node is not None and gpus_per_node < view.gpu_count:
        if gpus_per_node < 1:
            raise InputError(f"--gpus-per-node {gpus_per_node}", expected="an integer >= 1")
        gpus = select_gpus(topo, gpus_per_node, compare=False)["gpus"]
    if gpus is not None:
        view = placement.node_view(topo, gpus)
    gpn = len(gpus) if gpus is not None else (gpus_per_node or view.gpu_count)
    if gpn > view.gpu_count:
        raise PlanInfeasible(f"{gpn} GPUs per node requested but the topology has {view.gpu_count}")
    chosen = None
    if mspec is not None:   # only the --model estimate times collectives (no cost-model import otherwise)
        from gpucomm.planners.collectives import transport as tr

        chosen = tr.choose(topo, transport)
        model_specs.use_cost_options(view, transport=chosen)
    elif transport is not None:
        from gpucomm.planners.collectives.transport import parse

        parse(transport)   # a bad value is still an input error
    cal_notes: List[str] = []
    if calibration is not None:
        from gpucomm.planners.collectives import calibrate as cal

        src = calibration_source or "<calibration>"
        model_specs.use_calibration(view, cal.profile_from_document(calibration, src), src)
        cal_notes = cal.applied_note(calibration, src, topo) if mspec is not None else \
            [f"--calibration {src}: used only by --model estimates"]
    if nodes is None:
        if hosts_pool is not None:
            if tp and pp and dp:
                total_req = tp * pp * dp * (cp or 1)
                if total_req % gpn:
                    raise PlanInfeasible(f"tp*cp*dp*pp = {total_req} is not a whole number of {gpn}-GPU nodes")
                nodes = total_req // gpn
            else:
                nodes = len(hosts_pool)
        else:
            nodes = 1
    if not isinstance(nodes, int) or nodes < 1:
        raise InputError(f"--nodes {nodes}", expected="an integer >= 1")
    if hosts_pool is not None and nodes > len(hosts_pool):
        raise PlanInfeasible(f"the plan needs {nodes} nodes but the cluster has {len(hosts_pool)} with {gpn} GPUs")
    total = nodes * gpn
    candidates = None
    warnings: List[str] = []
    # nodes that share an NVLink domain (NVL72 trays): model-parallel groups may span them; a cluster
    # file's NVLink domains (synth --nvlink-domain, gpucomm cluster) say it where --nvlink-domain does not
    if nvlink_domain is None and cluster is not None and cluster.domain_of:
        sizes: dict = {}
        for d in cluster.domain_of.values():
            sizes[d] = sizes.get(d, 0) + 1
        nvlink_domain = min(sizes.values())
    model_specs.use_nvlink_domain(view, nvlink_domain)
    selection = None
    if cluster is not None and nodes > 1 and hosts_pool is not None:
        # one choice of nodes: those select --nodes picks (one NVLink domain, else one leaf, else the lowest
        # switch with room), which the host order lays out and whose leaves set the estimate's network rate
        from gpucomm.planners.placement.select import select_nodes

        try:
            selection = select_nodes(cluster, nodes)
        except (InputError, PlanInfeasible):
            pass
        picked = [h for h in (selection or {}).get("nodes") or [] if h in hosts_pool]
        if len(picked) == nodes:
            hosts_pool = picked
    cost_opts: dict = {}
    if chosen is not None and nvlink_domain is not None:   # --model's collectives timed with it too
        cost_opts["nvlink_domain"] = nvlink_domain
    if chosen is not None and cluster is not None and nodes > 1:
        # what each NIC gets on the cluster's fabric (the leaf uplinks' share where the nodes span leaves,
        # slower host links), as predict --cluster times it: the --model estimate uses it too
        from gpucomm.planners.placement.select import cluster_network

        try:
            net = cluster_network(cluster, nodes, topo, selection)
        except (InputError, PlanInfeasible) as e:
            net = {"fabric_gbps": None}
            warnings.append(f"--cluster: the estimate uses the node's own NICs ({e})")
        if net["fabric_gbps"] is not None:
            cost_opts["fabric_gbps"] = net["fabric_gbps"]
            cal_notes.append(net["note"] + " (the --model estimate times the network at that rate)")
    if cost_opts:
        model_specs.use_cost_options(view, transport=chosen, **cost_opts)
    domain_nodes = job_domain_nodes(topo, nodes, nvlink_domain)
    if mspec is not None and tp is None and pp is None and dp is None:
        fixed = {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": ep, "etp": etp}
        rows = model_specs.rank_factorizations(view, nodes, gpn, mspec, order, fixed, top=top, gpus=gpus,
                                               force=force)
        candidates = [{"rank": r["rank"], "parallelism": r["parallelism"],
                       "step_time_s": r["estimate"]["step_time_s"], "comm_s": r["estimate"]["comm_s"],
                       "bubble_s": r["estimate"]["bubble_s"], "micro_batches": r["estimate"]["micro_batches"],
                       "memory_per_gpu_bytes": r["estimate"]["memory"]["per_gpu_bytes"],
                       "fits": r["estimate"]["memory"]["fits"]} for r in rows]
        best = rows[0]["parallelism"]
        axes = {k: best[k] for k in placement.AXES + ("etp",)}
    else:
        if mspec is None and tp is None and pp is None and dp is None and cp is None and ep is None:
            warnings.append("no --tp/--pp/--dp/--model given: plain data parallelism over all GPUs")
        axes = placement.resolve_axes(total, tp, pp, dp, cp, ep, gpn, etp=etp, domain_nodes=domain_nodes)
    weights = model_specs.axis_weights(mspec, axes) if mspec else None
    layout = placement.make_layout(view, nodes, gpn, axes, order, weights, gpus)
    node_docs = None
    if hosts is not None:
        if cluster is not None:
            raise InputError("--hosts and --cluster together", expected="one of them (a cluster file names its hosts)")
        if len(hosts) != nodes or len(set(hosts)) != len(hosts):
            raise InputError(f"--hosts names {len(hosts)} distinct host(s) for {nodes} node(s)",
                             expected=f"{nodes} distinct host names, node rank order")
    estimate = model_specs.step_estimate(mspec, layout) if mspec is not None else None
    host_order = None
    if hosts_pool is not None:
        skeleton = {"groups": {a: layout.groups(a) for a in placement.AXES}, "nodes": nodes,
                    "gpus_per_node": gpn, "estimate": estimate}
        hosts, host_order = choose_host_order(cluster, hosts_pool, nodes, layout.gen, gpn, skeleton)
        node_docs = [cluster.doc(h) for h in hosts]
    plan = placement.plan_document(layout, hosts=hosts, node_docs=node_docs)
    plan["host_order"] = host_order
    tiers = {a: layout.axis_tier(a) for a in ("tp", "cp", "ep", "dp", "pp")}
    note = domain_note(gpn, domain_nodes, layout.axes, nodes, tiers)
    for a in ("tp", "cp", "ep"):
        t = tiers[a]
        if t.get("domains", 1) > 1:
            k = t["groups_crossing_domains"]
            warnings.append(f"{a}={layout.axes[a]}: {k} of its groups cross{'es' if k == 1 else ''} an NVLink "
                            f"domain boundary ({domain_nodes} nodes per domain) and run over the NICs there")
    plan["nvlink_domain"] = {"nodes": domain_nodes, "gpus": domain_nodes * gpn, "note": note} if note else None
    plan["warnings"] = list(dict.fromkeys(warnings + plan["warnings"] + (cluster.warnings if cluster else [])
                                          + cal_notes))
    plan["forced"] = None
    if mspec is not None:
        plan["estimate"] = estimate
        if nodes > 1 and chosen is not None:   # the estimate's inter-node collectives run over this transport (named first)
            plan["estimate"]["transport"] = chosen.to_dict()
            plan["warnings"].insert(0, f"transport: {chosen.describe()}")
        mem = plan["estimate"]["memory"]
        if mem["fits"] is False:
            a = layout.axes
            why = model_specs.does_not_fit(mspec, mem, gpn, nodes, {"cp": cp, "ep": ep, "etp": etp},
                                           layout=" ".join(f"{k}={a[k]}" for k in placement.AXES))
            if not force:
                raise PlanInfeasible(why + " (--force plans it anyway)")
            plan["forced"] = why
            plan["warnings"].append("--force: " + why)
        elif mem["fits"] is None:
            plan["warnings"].append("GPU memory unknown: memory fit not checked")
    plan["candidates"] = candidates
    penv.build_env(plan, view, topo_file_path=topo_file_path or penv.DEFAULT_TOPO_FILE, nccl_graph=nccl_graph)
    if nccl_xml and "nccl-topo.xml" not in plan["files"]:
        plan["files"]["nccl-topo.xml"] = penv.pinned_topo_xml(view)
    traffic = None
    if nodes > 1 or cluster is not None:
        traffic = traffic_report(plan, cluster.fabric if cluster is not None else None)
    plan["traffic"] = traffic
    switches = traffic["leaf_switches"] if traffic and traffic.get("leaf_switches") else None
    segment = None
    if cluster is not None and cluster.blocks():
        switches = None          # topology/block has no switches: --segment instead, never --switches
        segment = block_segment(cluster, plan.get("hosts") or [], layout.gen, gpn)
        if cluster.unhealthy:
            plan["warnings"].append(f"{len(cluster.unhealthy)} unhealthy node(s) left out: "
                                    + ", ".join(sorted(cluster.unhealthy)[:5]))
    elif cluster is not None and cluster.unhealthy:
        plan["warnings"].append(f"{len(cluster.unhealthy)} unhealthy node(s) left out: " + ", ".join(sorted(cluster.unhealthy)[:5]))
    if cluster is not None and cluster.fabric_doc and traffic:
        traffic["leaf_uplinks"] = leaf_uplinks(cluster, plan.get("hosts") or [], traffic, plan["warnings"])
    plan["megatron"] = model_specs.megatron_arguments(plan["parallelism"], mspec, vpp)
    plan["deepspeed"] = model_specs.deepspeed_config(plan["parallelism"], mspec, plan["warnings"])
    launch.build_launch(plan, command=command, all_cpus=view.all_cpus, node_gpus=len(topo.gpus),
                        switches=switches, port=port, n_cores=len(set(core_map(view).values())) or None,
                        torch_version=torch_version, view=placement.node_view(topo), segment=segment)
    return plan
