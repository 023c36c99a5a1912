"""``gpucomm predict``: predicted time, algbw and busbw of a collective (NCCL's tuning model over the
topology, calibrated against real nccl-tests runs; see planners/cost.py)."""
from __future__ import annotations

from typing import Optional

import typer

from .settings import diag

PREDICT_SCHEMA = "gpucomm.predict/v1"


def build_prediction(doc: dict, collective: str, size: str, nodes: int = 1, gpus_per_node: Optional[int] = None,
                     fabric_gbps: Optional[float] = None, algo: str = "auto", gpus: Optional[list] = None,
                     dtype: str = "float") -> dict:
    """The ``gpucomm.predict/v1`` document (no I/O; used by the command and by benchmarks)."""
    from planners import cost
    from planners.nccltests import TYPE_SIZES
    from probes.errors import InputError

    coll = cost.normalize_collective(collective)
    sizes = cost.parse_sizes(size, "--size")
    dt = (dtype or "float").lower()
    if dt not in TYPE_SIZES:
        raise InputError(f"--dtype {dtype}: unknown type", expected=", ".join(sorted(TYPE_SIZES)))
    algo_l = (algo or "auto").lower()
    if algo_l not in cost.USER_ALGOS:
        raise InputError(f"--algo {algo}: unknown algorithm", expected=", ".join(cost.USER_ALGOS))
    graph = cost.summarize(doc, nodes=nodes, gpus_per_node=gpus_per_node, fabric_gbps=fabric_gbps, gpus=gpus)
    rows = cost.predict(graph, coll, sizes, algo=algo_l, dtype_bytes=TYPE_SIZES[dt])
    for r in rows:
        r["type"] = dt
    return {
        "schema": PREDICT_SCHEMA,
        "collective": coll,
        "nodes": graph.n_nodes,
        "gpus_per_node": graph.gpus_per_node,
        "n_ranks": graph.n_ranks,
        "algo": algo_l,
        "fabric_gbps": fabric_gbps,
        "graph": cost.summary_dict(graph),
        "rows": rows,
        "warnings": list(doc.get("warnings") or []),
    }


def table_text(pred: dict) -> str:
    """nccl-tests-style text table."""
    g = pred["graph"]
    plural = "s" if pred["nodes"] != 1 else ""
    lines = [
        f"# gpucomm predict: {pred['collective']}, {pred['n_ranks']} ranks "
        f"({pred['nodes']} node{plural} x {pred['gpus_per_node']} GPUs), algo {pred['algo']}",
        f"# NCCL ring graph: {g['channels']} channels x {g['bw_intra']:g}/{g['bw_inter']:g} GB/s, "
        f"type {g['type_intra']}/{g['type_inter']}, sm{g['cc']}"
        + (f"; NVLS {g['nvls_channels']} channels x {g['nvls_bw_intra']:g} GB/s" if g.get("nvls") else ""),
    ]
    ach = []
    if g.get("ring_bus_bw"):
        ach.append(f"ring {g['ring_bus_bw']:g}")
    if g.get("node_net_bw"):
        ach.append(f"network {g['node_net_bw']:g} per node")
    if ach:
        lines.append("# achievable bus bandwidth (GB/s): " + ", ".join(ach))
    for n in g.get("notes") or []:
        lines.append(f"# note: {n}")
    lines.append("#")
    lines.append(f"# {'size':>12} {'count':>13} {'type':>8} {'time':>12} {'algbw':>9} {'busbw':>9}  algorithm")
    lines.append(f"# {'(B)':>12} {'(elements)':>13} {'':>8} {'(us)':>12} {'(GB/s)':>9} {'(GB/s)':>9}")
    for r in pred["rows"]:
        algo = r["algorithm"] + (f"/{r['protocol']}" if r.get("protocol") else "")
        lines.append(f"  {r['size_bytes']:>12} {r['count']:>13} {r['type']:>8} {_fmt_time(r['time_us']):>12} "
                     f"{r['algbw_GBps']:>9.2f} {r['busbw_GBps']:>9.2f}  {algo}")
    return "\n".join(lines) + "\n"


def _fmt_time(t: float) -> str:
    # nccl-tests prints 4 significant-ish digits: 32.29, 206.2, 14920
    return f"{t:.2f}" if t < 100 else f"{t:.1f}" if t < 10000 else f"{t:.0f}"


def predict(
    topo: str = typer.Argument(..., help="Topology: a saved topology, snapshot, `nvidia-smi topo -m` output, "
                               "NCCL topology XML, rocm-smi output, or example:<name>."),
    collective: str = typer.Option("all_reduce", "--collective", "-c", help="all_reduce, all_gather, "
                                   "reduce_scatter, broadcast, reduce, all_to_all, send_recv."),
    size: str = typer.Option("1GiB", "--size", "-s", help="Bytes per operation with nccl-tests' meaning: 1GiB, "
                             "a sweep 8B:8GiB (doubling), 1K:1G:x4 (factor 4), or a list 1M,2M."),
    nodes: int = typer.Option(1, "--nodes", "-N", help="Number of identical nodes."),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", "-g",
                                                help="GPUs used per node (default: all; the first G by index)."),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="GPU indices used per node, e.g. 0,1,2,3 or 0-3."),
    fabric_gbps: Optional[float] = typer.Option(None, "--fabric-gbps", help="What one NIC delivers, in Gb/s: "
                                                "sets the network bandwidth of the prediction (NCCL's algorithm "
                                                "choice still sees the NIC link rate when the topology has one); "
                                                "without NICs in the topology: one NIC per node. For NCCL's TCP "
                                                "socket transport on a 200G NIC use about 38 (fitted to a "
                                                "Polaris nccl-tests run)."),
    algo: str = typer.Option("auto", "--algo", help="auto (what NCCL would pick), ring, tree, nvls, pat."),
    dtype: str = typer.Option("float", "--dtype", help="Element type for the count column (float, half, ...)."),
) -> None:
    """Predict time, algbw and busbw of a collective (nccl-tests formulas), per size.

    Formats: table (nccl-tests layout, default), json (schema gpucomm.predict/v1), yaml."""
    from probes.load import load_topology

    from .render import emit

    from .cmd_collective import parse_gpu_list

    gpu_list = parse_gpu_list(gpus)
    doc = load_topology(topo)
    pred = build_prediction(doc, collective, size, nodes=nodes, gpus_per_node=gpus_per_node,
                            fabric_gbps=fabric_gbps, algo=algo, gpus=gpu_list, dtype=dtype)
    emit(pred, extra={"table": lambda: table_text(pred)}, allowed=["table", "json", "yaml"])
    for w in pred["warnings"]:
        diag(f"gpucomm: warning: {w}", verbose_only=True)


def register(app: typer.Typer) -> None:
    app.command("predict")(predict)
