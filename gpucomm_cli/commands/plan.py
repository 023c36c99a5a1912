"""``gpucomm plan``, ``gpucomm select``, ``gpucomm synth``: parse the flags, call
:func:`gpucomm.planners.plan.build_full_plan`, :func:`gpucomm.planners.placement.select.select_gpus` or
:func:`gpucomm.planners.placement.cluster.synth_cluster`, render the result."""
# (no `from __future__ import annotations`: typer would compile every string annotation at start-up)

import os
from pathlib import Path
from typing import Optional

import typer

from gpucomm.commands.common import (MAX_HOSTS, TOPO_HELP, flag_value, from_option, gpu_note_line, gpu_option, hostlist_option,
                                     load_topo, max_nodes, nvlink_domain_option, nvlink_domain_value, out_directory,
                                     pick_source, topo_argument, usage_error, with_gpu_model)
from gpucomm.settings import SETTINGS, diag

EMITS = ("torchrun", "slurm", "rankfile", "env", "wrapper", "json", "nccl-xml", "nccl-graph", "megatron", "deepspeed",
         "hostfile", "machinefile", "gres")


# ============================================================================================
def _fmt_bytes(n: Optional[float]) -> str:
    if n is None:
        return "-"
    for unit, div in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{int(n)} B"


def _fmt_s(x: Optional[float]) -> str:
    if x is None:
        return "-"
    return f"{x * 1e3:.2f} ms" if x < 1 else f"{x:.2f} s"


def draw_plan(plan: dict, console, note: Optional[str] = None) -> None:
    from gpucomm.render.tables import plural, print_table
    from gpucomm.render.plain import Table, print_prose

    if note:
        print_prose(console, note)
    p = plan["parallelism"]
    print_prose(console, f"gpucomm plan: {plural(plan['nodes'], 'node')} x {plural(plan['gpus_per_node'], 'GPU')} = "
                         f"{plural(plan['world_size'], 'rank')}; "
                         f"tp={p['tp']} cp={p['cp']} ep={p['ep']} dp={p['dp']} pp={p['pp']} (order {p['order']})"
                         + (f"; expert layers etp={p['etp']} ep={p['ep']} edp={p['edp']}"
                            if p["ep"] > 1 or p["etp"] != p["tp"] else ""), rest="  ")
    if (plan.get("nvlink_domain") or {}).get("note"):
        print_prose(console, "  " + plan["nvlink_domain"]["note"], rest="    ")
    torch = f"  torch: {plan['mesh']['device_mesh']['code']};"   # code to copy: one line, whole
    deepspeed = f"DeepSpeed axes {plan['mesh']['deepspeed_axes']} dims {plan['mesh']['deepspeed_dims']}"
    if len(torch) + 2 + len(deepspeed) <= console.width:
        console.print(f"{torch}  {deepspeed}", soft_wrap=True, highlight=False, markup=False)
    else:
        console.print(torch, soft_wrap=True, highlight=False, markup=False)
        console.print(f"  {deepspeed}", soft_wrap=True, highlight=False, markup=False)
    if plan.get("candidates"):
        t = Table(title="Candidate factorizations (best first)")
        for c in ("#", "tp", "cp", "ep", "dp", "pp", "micro-batches", "step", "comm", "bubble", "memory/GPU", "fits"):
            t.add_column(c, justify="right")
        for c in plan["candidates"]:
            q = c["parallelism"]
            t.add_row(str(c["rank"]), str(q["tp"]), str(q["cp"]), str(q["ep"]), str(q["dp"]), str(q["pp"]),
                      str(c["micro_batches"]), _fmt_s(c["step_time_s"]), _fmt_s(c["comm_s"]), _fmt_s(c["bubble_s"]),
                      _fmt_bytes(c["memory_per_gpu_bytes"]), {True: "yes", False: "no", None: "?"}[c["fits"]])
        print_table(console, t)
    t = Table(title="Local ranks (the same on every node)")
    for c in ("local rank", "GPU", "bus id", "NUMA", "CPUs", "NICs"):
        t.add_column(c)
    for lr in plan["local_ranks"]:
        t.add_row(str(lr["local_rank"]), str(lr["gpu"]), lr.get("pci_bus_id") or "-",
                  "-" if lr.get("numa_node") is None else str(lr["numa_node"]), lr.get("cpus") or "-",
                  ",".join(lr.get("nics") or []) or "-")
    print_table(console, t)
    t = Table(title="Groups")
    for c in ("axis", "groups", "size", "spans", "link", "first groups"):
        t.add_column(c)
    expert = p["ep"] > 1 or p["etp"] != p["tp"]
    for axis in ("tp", "cp", "ep", "dp", "pp", "etp", "edp"):
        groups = plan["groups"][axis]
        tier = plan["tiers"].get(axis) or {"size": 1}
        if tier["size"] <= 1 or (axis in ("etp", "edp") and not expert) or (axis == "etp" and p["etp"] == p["tp"]):
            continue
        bw = tier.get("inter_GBps") if tier["where"] == "network" else tier.get("intra_GBps")
        link = tier["where"] + (f" ~{bw:g} GB/s" if bw else "")
        first = " ".join(str(g) for g in groups[:2]) + (" ..." if len(groups) > 2 else "")
        spans = plural(tier['nodes'], 'node')
        if tier.get("domains"):
            spans += f", {plural(tier['domains'], 'NVLink domain')}"
        t.add_row(axis, str(len(groups)), str(tier["size"]), spans, link, first)
    print_table(console, t)
    if plan.get("estimate"):
        e = plan["estimate"]
        t = Table(title=f"Estimate per step ({e['model']['name']}, {e['micro_batches']} micro-batches; {e['cost_model']})")
        for c in ("part", "collective", "group", "where", "per GPU", "time"):
            t.add_column(c)
        t.add_row("compute", "-", "-", "-", "-", _fmt_s(e["compute_s"]))
        t.add_row("pipeline bubble", "-", "-", "-", f"{e['bubble_fraction']:.3f} of ideal", _fmt_s(e["bubble_s"]))
        for axis, c in e["comm"].items():
            t.add_row(axis, c["collective"], f"{plural(c['group_size'], 'rank')} / {plural(c['nodes_per_group'], 'node')}",
                      c["where"] or "-", _fmt_bytes(c["bytes_per_gpu"]), _fmt_s(c["time_s"]))
        t.add_row("step", "", "", "", "", _fmt_s(e["step_time_s"]))
        print_table(console, t)
        m = e["memory"]
        print_prose(console, f"memory per GPU: {_fmt_bytes(m['per_gpu_bytes'])} (weights+optimizer "
                             f"{_fmt_bytes(m['weights_optimizer_bytes'])}, activations "
                             f"{_fmt_bytes(m['activation_bytes'])}) of {_fmt_bytes(m['capacity_bytes'])}", "  ")
    if plan.get("traffic") and plan["traffic"].get("by_level"):
        tr = plan["traffic"]
        t = Table(title="Traffic between nodes" + (f" (fabric {tr['fabric']}, {tr['leaf_switches']} leaf switches)"
                                                   if tr.get("fabric") else ""))
        for c in ("crosses", "edges", "bytes/step"):
            t.add_column(c)
        for lvl, v in tr["by_level"].items():
            t.add_row(lvl, str(v["edges"]), _fmt_bytes(v["bytes_per_step"]) if v["bytes_per_step"] is not None else "-")
        print_table(console, t)
    t = Table(title="Environment")
    for c in ("variable", "value", "why"):
        t.add_column(c, overflow="fold")
    for k, v in plan["env"].items():
        t.add_row(k, v["value"], v["reason"])
    print_table(console, t, prose=("why",), narrow=lambda c: [
        (print_prose(c, v["reason"], "# "),
         c.print(f"{k}={v['value']}", soft_wrap=True, highlight=False, markup=False)) for k, v in plan["env"].items()])
    print_prose(console, "launch: --emit " + " | ".join(e for e in EMITS if e not in ("nccl-graph",)
                                                       and (e != "gres" or "gres" in plan["launch"])), "  ", "    ")


def installed_torch_version() -> Optional[str]:
    """The torch installed here, from the name of its ``torch-<version>.dist-info`` folder on sys.path
    (importing torch would take seconds, importlib.metadata pulls in zipfile and email)."""
    import sys

    for folder in sys.path:
        try:
            names = os.listdir(folder or ".")
        except OSError:
            continue
        for n in names:
            if n.startswith("torch-") and n.endswith(".dist-info"):
                return n[len("torch-"):-len(".dist-info")]
    return None


MODEL_HELP = ("A model: a preset (llama-8b, llama-70b, llama-405b) optionally followed by ,key=value overrides, "
              "or key=value pairs alone. Keys: layers (transformer layers), hidden (hidden size), heads (attention "
              "heads), kv_heads (KV heads, GQA; default heads), ffn (MLP hidden size; default 4*hidden), vocab "
              "(vocabulary; default 32000), params (total parameters; default counted from the shape), seq "
              "(sequence length; default 8192), mbs (micro-batch size; default 1), gbs (global batch size; "
              "default 1024), dtype (bf16, fp16, fp32, fp8; default bf16), zero (0 = plain DDP, 1 = Megatron "
              "distributed optimizer / ZeRO-1, 2, 3; default 1), experts (MoE experts per layer; default 0 = "
              "dense), topk (experts per token; default 2), mfu (fraction of dense peak FLOP/s reached; default "
              "0.4), name (a label). E.g. llama-70b,seq=4096,gbs=512 or layers=32,hidden=4096,heads=32,experts=8.")


def plan(
    topo: Optional[str] = typer.Argument(None, metavar="[TOPO]", show_default=False,
                                         help=TOPO_HELP + " Required unless --cluster names the nodes."),
    src: Optional[str] = from_option(),
    tp: Optional[int] = typer.Option(None, "--tp", min=1, help="Tensor-parallel size (kept inside a node's NVLink "
                                     "domain)."),
    pp: Optional[int] = typer.Option(None, "--pp", min=1, help="Pipeline-parallel size."),
    dp: Optional[int] = typer.Option(None, "--dp", min=1, help="Data-parallel size (default: what is left; the world "
                                     "is tp*cp*dp*pp, as in Megatron-LM)."),
    cp: Optional[int] = typer.Option(None, "--cp", min=1, help="Context-parallel size."),
    ep: Optional[int] = typer.Option(None, "--ep", min=1, help="Expert-parallel size: carved out of dp*cp as in "
                                     "Megatron-LM (etp*ep must divide tp*dp*cp), not a factor of the world size."),
    etp: Optional[int] = typer.Option(None, "--etp", min=1, help="Expert tensor-parallel size (Megatron's "
                                      "--expert-tensor-parallel-size; default: tp)."),
    vpp: Optional[int] = typer.Option(None, "--vpp", min=1, help="Virtual pipeline stages per pipeline rank "
                                      "(interleaved 1F1B; Megatron needs pp > 2)."),
    nodes: Optional[int] = typer.Option(None, "--nodes", "-N", help="Number of identical nodes (default 1)."),
    nvlink_domain: Optional[int] = nvlink_domain_option(),
    cluster: Optional[str] = typer.Option(None, "--cluster", help="Cluster file (YAML/JSON: nodes + fabric)."),
    order: str = typer.Option("tp-cp-ep-dp-pp", "--order", help="Megatron rank order, leftmost = adjacent ranks "
                              "(tp-cp-ep-pp-dp = Megatron's --use-tp-pp-dp-mapping)."),
    model: Optional[str] = typer.Option(None, "--model", help=MODEL_HELP),
    emit: Optional[str] = typer.Option(None, "--emit", help="Print one artifact: " + ", ".join(EMITS) + "."),
    top: int = typer.Option(5, "--top", min=1, help="Candidate factorizations to show (with --model and free axes)."),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", "-g", min=1,
                                                help="Use K GPUs per node (the best K, as `gpucomm select`)."),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="GPU indices to use on each node, e.g. 0-3."),
    command: str = typer.Option("train.py", "--command", help="Training script and its arguments for the launch files."),
    topo_file_path: Optional[str] = typer.Option(None, "--topo-file-path",
                                                 help="Where NCCL_TOPO_FILE will live on the nodes (VMs)."),
    port: int = typer.Option(29500, "--master-port", min=1, max=65535, help="Rendezvous port."),
    hosts: Optional[str] = typer.Option(None, "--hosts", help="Host names of the nodes in node-rank order "
                                        "(Slurm hostlist, e.g. node[01-04]); default: relative/allocated hosts."),
    calibration: Optional[str] = typer.Option(None, "--calibration", metavar="PROFILE.json",
                                              help="A calibration profile (gpucomm calibrate) that times the "
                                              "collectives of the --model estimate."),
    transport: Optional[str] = typer.Option(None, "--transport", help="The inter-node transport that times "
                                            "--model's collectives across nodes: ib, ib-nogdr, socket, plugin:NAME "
                                            "(default: what the probe found; docs/SWPATH.md)."),
    nccl_graph: bool = typer.Option(False, "--nccl-graph", help="Also search our rings (one node) and set "
                                    "NCCL_GRAPH_FILE where they beat NCCL's own ring search by 5% or more "
                                    "(--emit nccl-graph writes the file; implied by it)."),
    gpu: Optional[str] = gpu_option(),
) -> None:
    """Rank mapping, groups, env and launch configs for TP/PP/DP/CP/EP on a node or a cluster.

    Without --emit: a table (or --format json|yaml: the gpucomm.plan/v1 document).  With --model and
    no --tp/--pp/--dp: candidate factorizations ranked by estimated step time (--cp/--ep stay fixed)."""
    from gpucomm.planners.placement.cluster import load_cluster
    from gpucomm.planners.placement.select import parse_index_list
    from gpucomm.planners.plan import build_full_plan
    from gpucomm.probes.errors import InputError, NothingToDo
    from gpucomm.probes.load import load_topology
    from gpucomm.render.output import emit as emit_doc
    from gpucomm.render.output import write_text

    if emit is not None and emit not in EMITS:
        usage_error(f"{emit!r} is not one of {', '.join(EMITS)}", "--emit")
    topo = pick_source(topo, src)
    if topo is None and cluster is None:
        usage_error("give a topology (TOPO, - for standard input) or --cluster FILE: gpucomm plan TOPO --tp 8 ...")
    flag_value("--nodes", nodes, lo=1, hi=max_nodes())
    nvlink_domain_value(nvlink_domain, nodes, {} if nodes is not None else None)
    gpu_list = flag_value("--gpus", gpus, parse=lambda t: parse_index_list(t, "--gpus"))
    if gpus is not None and not gpu_list:
        raise InputError("--gpus is empty", expected="e.g. 0-3")
    host_list = None
    if hosts is not None:
        host_list = hostlist_option(hosts, "--hosts")
        if nodes is None:
            nodes = len(host_list)
    cl = load_cluster(cluster, default_topology=topo) if cluster else None
    doc = with_gpu_model(load_topology(topo), gpu) if (topo and cl is None) else None
    cal = None
    if calibration is not None:
        from gpucomm.commands.calibrate import read_calibration

        cal = read_calibration(calibration)
    result = build_full_plan(doc, nodes=nodes, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, order=order, model=model,
                             top=top, gpus_per_node=gpus_per_node, gpus=gpu_list, cluster=cl, command=command,
                             topo_file_path=topo_file_path, port=port, hosts=host_list, etp=etp, vpp=vpp,
                             torch_version=installed_torch_version(), calibration=cal,
                             calibration_source=calibration, nccl_graph=nccl_graph or emit == "nccl-graph",
                             force=SETTINGS.force, nccl_xml=emit == "nccl-xml", transport=transport,
                             nvlink_domain=nvlink_domain)
    if emit is not None:
        from gpucomm.probes.model import dumps_json

        if emit == "json":
            text = dumps_json(result)
        elif emit == "env":
            from gpucomm.planners.launch.env import env_shell

            text = env_shell(result)
        elif emit == "nccl-xml":
            text = result["files"]["nccl-topo.xml"]
        elif emit == "nccl-graph":
            text = (result.get("files") or {}).get("nccl-graph.xml")
            if text is None:
                raise NothingToDo("NCCL's own ring search does as well here (or the plan spans several nodes): "
                                  "no NCCL_GRAPH_FILE; `gpucomm rings TOPO --format nccl-graph` writes one anyway")
        else:
            text = result["launch"][emit]
            if emit == "deepspeed" and model is None:
                diag(f"gpucomm: note: no --model: train_batch_size {result['deepspeed']['train_batch_size']} is gpucomm's "
                     "default global batch (a multiple of the data-parallel size); set yours with --model ...,gbs=N")
        # a script (#!) is written executable: torchrun/mpirun start ./gpucomm-rank.sh, sbatch and users the rest
        write_text(text if text.endswith("\n") else text + "\n", executable=text.startswith("#!"))
    else:
        note = gpu_note_line(doc) if doc is not None else None
        emit_doc(result, table=lambda console: draw_plan(result, console, note), allowed=["table", "json", "yaml"])
    for w in result.get("warnings", []):
        diag(f"gpucomm: warning: {w}")


# ============================================================================================
def draw_select(res: dict, console, note: Optional[str] = None) -> None:
    from gpucomm.render.tables import print_table
    from gpucomm.render.plain import Table

    if note:
        console.print(note, soft_wrap=True, markup=False)
    d = res["details"]
    console.print(f"gpucomm select: {res['count']} of free GPUs {res['free']} -> {res['gpus']}  "
                  f"(CUDA_VISIBLE_DEVICES={','.join(map(str, res['gpus']))})")
    t = Table(title="Why")
    for c in ("policy", "GPUs", "ring GB/s", "NUMA nodes", "nearby NICs", "free GPUs fragmented", "go-gpuallocator score"):
        t.add_column(c)
    ga = res.get("gpuallocator")
    t.add_row("gpucomm", str(res["gpus"]), _g(d["ring_GBps"]), str(d["numa_nodes"]), ",".join(d["nearby_nics"]) or "-",
              str(d["fragmented_free_gpus"]), str(d.get("gpuallocator_score", "-")))
    if ga and ga.get("details"):
        g = ga["details"]
        t.add_row("go-gpuallocator", str(ga["gpus"]), _g(g["ring_GBps"]), str(g["numa_nodes"]),
                  ",".join(g["nearby_nics"]) or "-", str(g["fragmented_free_gpus"]), str(ga["score"]))
    print_table(console, t)
    console.print("  links: " + ", ".join(f"{k} {v}" for k, v in d["links"].items()) if d["links"] else "")


def _g(x) -> str:
    return "-" if x is None else f"{x:g}"


def select(
    topo: Optional[str] = topo_argument(),
    src: Optional[str] = from_option(),
    count: Optional[int] = typer.Option(None, "--count", "-k", min=1, help="How many GPUs to allocate."),
    free: Optional[str] = typer.Option(None, "--free", help="Free GPU indices, e.g. 0,1,3 or 0-3,6 (default: all); "
                                       "with --nodes, free hosts as a Slurm hostlist, e.g. node[01-40]."),
    policy: str = typer.Option("gpucomm", "--policy", help="gpucomm (default) or gpuallocator (NVIDIA "
                               "go-gpuallocator's best-effort policy, as the Kubernetes device plugin)."),
    gpu: Optional[str] = gpu_option(),
    nodes: Optional[int] = typer.Option(None, "--nodes", "-N", min=1, help="Pick N nodes of --cluster for one job "
                                        "instead: healthy, free, in one NVLink domain, else one leaf, else under the "
                                        "lowest switch with room; says what crossing a spine costs."),
    nvlink_domain: Optional[int] = nvlink_domain_option(),
    cluster: Optional[str] = typer.Option(None, "--cluster", help="With --nodes: a cluster file (gpucomm cluster), "
                                          "or a fabric (ibnetdiscover output, topology.conf) with TOPO as every node."),
) -> None:
    """The best K of the free GPUs (for schedulers and device plugins), or with --nodes N --cluster FILE the
    best N nodes of a cluster for one job.

    Formats: table, json (gpucomm.select/v1, gpucomm.select-nodes/v1), yaml, list (the indices, or the hostlist)."""
    from gpucomm.planners.placement.select import parse_index_list, select_gpus
    from gpucomm.probes.errors import InputError

    from gpucomm.render.output import emit as emit_doc

    if nodes is not None or cluster is not None:
        flag_value("--nodes", nodes, lo=1, hi=MAX_HOSTS)
        nvlink_domain_value(nvlink_domain, nodes, {} if nodes is not None else None)
        return select_nodes_cmd(topo or src, nodes, cluster, free, count, nvlink_domain)
    if nvlink_domain is not None:
        usage_error("--nvlink-domain K goes with --nodes N --cluster FILE (nodes of a cluster)", "--nvlink-domain")
    if count is None:
        usage_error("give --count K (GPUs of a node), or --nodes N --cluster FILE (nodes of a cluster)")

    if policy not in ("gpucomm", "gpuallocator"):
        usage_error(f"{policy!r} is not a policy (gpucomm or gpuallocator)", "--policy")
    free_list = flag_value("--free", free, parse=parse_index_list)
    doc, _ = load_topo(topo, src, gpu=gpu)
    res = select_gpus(doc, count, free_list, compare=True)
    if policy == "gpuallocator":
        ga = res.get("gpuallocator")
        if not ga or not ga.get("gpus"):
            raise InputError("go-gpuallocator's policy returns no devices for this request")
        res = dict(res, policy="gpuallocator", gpus=ga["gpus"], devices=ga["devices"], details=ga["details"])
    emit_doc(res, table=lambda console: draw_select(res, console, gpu_note_line(doc)),
             extra={"list": lambda: ",".join(str(g) for g in res["gpus"])},
             allowed=["table", "json", "yaml", "list"])
    for w in res.get("warnings", []):
        diag(f"gpucomm: warning: {w}")


def draw_select_nodes(res: dict, console) -> None:
    sp = res["span"]
    where = {"nvlink-domain": "one NVLink domain", "leaf": "one leaf switch"}.get(sp["within"], f"switch level {sp['within'][5:]}"
                                                                                if sp["within"].startswith("level") else sp["within"])
    console.print(f"gpucomm select: {res['count']} node(s) -> {res['hostlist']}", soft_wrap=True)
    console.print(f"  within {where}" + (f" ({sp['name']})" if sp.get("name") else "")
                  + f"; leaves: {', '.join(sp['leaves']) or '-'}" + (f"; NVLink domains: {', '.join(sp['nvlink_domains'])}"
                                                                    if sp["nvlink_domains"] else ""), soft_wrap=True)
    ex = res["excluded"]
    console.print(f"  {res['candidates']} candidate(s); left out: {ex['unhealthy']} unhealthy, {ex['not_free']} not free",
                  soft_wrap=True)
    if res.get("cost"):
        console.print(f"  crossing the spine: {res['cost']['text']}", soft_wrap=True)


def select_nodes_cmd(topo: Optional[str], nodes: Optional[int], cluster: Optional[str], free: Optional[str],
                     count: Optional[int], nvlink_domain: Optional[int] = None) -> None:
    from gpucomm.planners.placement.cluster import load_cluster
    from gpucomm.planners.placement.select import node_nic_gbps, select_nodes
    from gpucomm.render.output import emit as emit_doc

    if nodes is None or cluster is None:
        usage_error("--nodes N and --cluster FILE go together: gpucomm select --nodes 8 --cluster cluster.yaml")
    if count is not None:
        usage_error("--count picks GPUs of one node; --nodes picks nodes of a cluster: give one", "--count")
    free_hosts = hostlist_option(free, "--free") if free is not None else None
    cl = load_cluster(cluster, default_topology=topo)
    if nvlink_domain is not None:
        from gpucomm.planners.placement.cluster import with_consecutive_domains

        cl = with_consecutive_domains(cl, nvlink_domain)
    res = select_nodes(cl, nodes, free_hosts, nic_gbps=node_nic_gbps(cl.doc(cl.nodes[0])))
    emit_doc(res, table=lambda console: draw_select_nodes(res, console), extra={"list": lambda: res["hostlist"]},
             allowed=["table", "json", "yaml", "list"])
    for w in res.get("warnings", []) + cl.warnings:
        diag(f"gpucomm: warning: {w}")




# ============================================================================================
def synth(
    topo: Optional[str] = typer.Argument(None, metavar="[TOPO]", show_default=False,
                                         help=TOPO_HELP + " The topology of every node (or --node)."),
    nodes: Optional[int] = typer.Option(None, "--nodes", "-N", help="Number of nodes (or --fabric)."),
    nvlink_domain: Optional[int] = nvlink_domain_option(),
    node: Optional[str] = typer.Option(None, "--node", "--from", metavar="TOPO",
                                       help="Topology of every node, e.g. example:hgx-h100 (the same as TOPO)."),
    fabric_file: Optional[str] = typer.Option(None, "--fabric", metavar="FILE", help="A real fabric instead of a "
                                              "synthetic fat tree (ibnetdiscover/iblinkinfo output, topology.conf): "
                                              "every host of it gets TOPO; the cluster file names FILE."),
    fat_tree: int = typer.Option(3, "--fat-tree", min=1, max=3, help="Levels of the fat tree (1, 2 or 3)."),
    nodes_per_leaf: int = typer.Option(32, "--nodes-per-leaf", min=1, help="Nodes under each leaf switch."),
    leaves_per_spine: int = typer.Option(8, "--leaves-per-spine", min=1, help="Leaf switches under each spine "
                                         "(3 levels)."),
    prefix: str = typer.Option("node", "--prefix", help="Host name prefix."),
    out_dir: Optional[Path] = typer.Option(None, "--out-dir", help="Write cluster.yaml and topology.conf here "
                                           "(default: print the cluster file with the topology.conf inline)."),
) -> None:
    """Write a synthetic cluster: NODES copies of a node under a fat tree (cluster YAML + Slurm topology.conf + the
    ibnetdiscover output of that fabric; --format ibnetdiscover prints the latter alone)."""
    import yaml

    from gpucomm.planners.placement.cluster import synth_cluster, synth_ibnetdiscover
    from gpucomm.planners.placement.select import node_nic_gbps
    from gpucomm.probes.load import load_topology

    from gpucomm.render.output import chosen_format, write_text

    flag_value("--nodes", nodes, lo=1, hi=MAX_HOSTS)
    nvlink_domain_value(nvlink_domain, nodes, {} if nodes is not None else None)
    if nvlink_domain is not None and fabric_file is not None:
        usage_error("--fabric FILE says its own blocks; --nvlink-domain K goes with --nodes N", "--nvlink-domain")
    node = pick_source(topo, node)
    if node is None:
        usage_error("give the topology of every node (TOPO or --node), e.g. gpucomm synth example:hgx-h100 -N 64")
    if (nodes is None) == (fabric_file is None):
        usage_error("give --nodes N (a synthetic fat tree) or --fabric FILE (a real one), not both")
    doc = load_topology(node)  # the node must load, and gives the uplink speed
    rate = node_nic_gbps(doc)
    src = node
    if out_dir is not None and not node.startswith("example:"):
        src = os.path.relpath(os.path.abspath(node), os.path.abspath(out_dir))
    fmt = chosen_format("yaml", ["yaml", "json", "table", "ibnetdiscover"])
    if fmt not in ("yaml", "json", "table", "ibnetdiscover"):
        usage_error(f"{fmt!r} is not a format of synth (it has yaml, json, ibnetdiscover)", "--format")
    ibnet = None
    if fabric_file is not None:
        from gpucomm.planners.placement import fabric as pf
        from gpucomm.probes.fabric import load_fabric

        if fmt == "ibnetdiscover":
            usage_error("with --fabric the fabric is FILE itself: no ibnetdiscover is written", "--format")
        fdoc = load_fabric(fabric_file)
        conf = pf.slurm(fdoc)
        hosts = pf.host_order(fdoc)
        nodes, fat_tree = len(hosts), max((lv["level"] or 0 for lv in fdoc["levels"]), default=1) or 1
        fsrc = fabric_file if out_dir is None else os.path.relpath(os.path.abspath(fabric_file), os.path.abspath(out_dir))
        cluster_doc = {"schema": "gpucomm.cluster/v1", "name": f"{nodes}x-{node.split(':')[-1]}",
                       "nodes": [{"names": pf.compress_hostlist(hosts), "topology": src}], "fabric": {"file": fsrc}}
    else:
        cluster_doc, conf = synth_cluster(nodes, src, fat_tree, nodes_per_leaf, leaves_per_spine, prefix,
                                          link_gbps=rate or None,
                                          topology_conf_name="topology.conf" if out_dir is not None else None,
                                          nvlink_domain=nvlink_domain)
        ibnet = synth_ibnetdiscover(nodes, fat_tree, nodes_per_leaf, leaves_per_spine, prefix)
    if fmt == "ibnetdiscover" and out_dir is None:
        write_text(ibnet)
        return
    if out_dir is not None:
        from gpucomm.probes.files import check_writable, write_atomic

        out_directory(out_dir)
        names = ("topology.conf", "cluster.yaml") + (("ibnetdiscover.out",) if ibnet is not None else ())
        for name in names:  # all refused before any is written
            check_writable(out_dir / name, SETTINGS.force)
        write_atomic(out_dir / "topology.conf", conf, force=SETTINGS.force)
        if ibnet is not None:
            write_atomic(out_dir / "ibnetdiscover.out", ibnet, force=SETTINGS.force)
        write_atomic(out_dir / "cluster.yaml", yaml.safe_dump(cluster_doc, sort_keys=True), force=SETTINGS.force)
        diag(f"gpucomm: wrote {', '.join(str(out_dir / n) for n in names)} ({nodes} nodes)")
        summary = {"schema": "gpucomm.synth/v1", "cluster": str(out_dir / "cluster.yaml"), "topology_conf": str(out_dir / "topology.conf"),
                   "nodes": nodes, "levels": min(fat_tree, 3)}
        if ibnet is not None:
            summary["ibnetdiscover"] = str(out_dir / "ibnetdiscover.out")
        from gpucomm.probes.model import dumps_json

        write_text(dumps_json(summary) if fmt == "json" else yaml.safe_dump(summary, sort_keys=True))
        return
    if fmt == "json":
        from gpucomm.probes.model import dumps_json

        write_text(dumps_json(cluster_doc))
    else:
        write_text(yaml.safe_dump(cluster_doc, sort_keys=True))


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
    app.command("select")(select)
    app.command("synth")(synth)
