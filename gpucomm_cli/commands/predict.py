"""``gpucomm predict``: parse the flags, call :mod:`gpucomm.planners.collectives.predict`, render the
nccl-tests-style table (or JSON/YAML)."""
# (no `from __future__ import annotations`: typer would compile every string annotation at start-up)

from typing import Optional

import typer

from gpucomm.commands.common import (flag_value, from_option, gpu_note_line, gpu_option, load_topo, max_nodes,
                                     nvlink_domain_option, nvlink_domain_value, topo_argument, with_gpu_model)
from gpucomm.probes import units
from gpucomm.settings import diag

def layout_text(nodes: int, gpus_per_node: int, graph: Optional[dict]) -> str:
    """``2 nodes x 4 GPUs``, or where NCCL fuses trays into one system (multi-node NVLink)
    ``32 trays = 2 NVLink domains of 16 trays x 4 GPUs``."""
    k = int((graph or {}).get("trays_per_node") or 1)
    if k > 1:
        return (f"{nodes * k} trays = {nodes} NVLink domain{'s' if nodes != 1 else ''} of {k} trays x "
                f"{gpus_per_node // k} GPUs")
    return f"{nodes} node{'s' if nodes != 1 else ''} x {gpus_per_node} GPUs"


def table_text(pred: dict) -> str:
    """nccl-tests-style text table."""
    lines = [
        f"# gpucomm predict: {pred['collective']}, {pred['n_ranks']} ranks "
        f"({layout_text(pred['nodes'], pred['gpus_per_node'], pred.get('graph'))}), algo {pred['algo']}",
    ] + transport_lines(pred.get("transport")) + _graph_lines(pred["graph"])
    lines.append("#")
    lines.append(f"# {'size':>12} {'count':>13} {'type':>8} {'time':>12} {'algbw':>9} {'busbw':>9}  algorithm")
    lines.append(f"# {'(B)':>12} {'(elements)':>13} {'':>8} {'(us)':>12} {'(GB/s)':>9} {'(GB/s)':>9}")
    for r in pred["rows"]:
        algo = r["algorithm"] + (f"/{r['protocol']}" if r.get("protocol") else "")
        lines.append(f"  {r['size_bytes']:>12} {r['count']:>13} {r['type']:>8} {_fmt_time(r['time_us']):>12} "
                     f"{r['algbw_GBps']:>9.2f} {r['busbw_GBps']:>9.2f}  {algo}")
    return "\n".join(lines) + "\n"


def transport_lines(t: Optional[dict]) -> list:
    """``# transport: ...`` (the inter-node transport, why, and what it applies), none on one node."""
    if not t or str(t.get("applies", "")).startswith("no: one node"):
        return []
    return [f"# transport: {t['name']} ({t['source']}: {t['why']})" if t.get("why") else
            f"# transport: {t['name']} ({t['source']})", f"# transport efficiency: {t['applies']}"]


def _human(n: Optional[int]) -> str:
    return "n/a" if n is None else units.format_size(n)


def _fmt_opt(v: Optional[float], fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


def summary_line(summary: dict) -> str:
    """One line: error at the largest size, median |error| >= 1 MiB, and the 80%-of-peak sizes."""
    L = summary["largest"]
    if L is None:
        return "# summary: no rows"
    pk = summary["peak"]
    med = summary["median_abs_error_pct_ge_1MiB"]
    return (f"# summary: at the largest size ({_human(L['size_bytes'])}) busbw measured "
            f"{_fmt_opt(L['measured_busbw_GBps'], '.2f')} GB/s, predicted {L['predicted_busbw_GBps']:.2f} GB/s "
            f"({_fmt_opt(L['error_pct'], '+.1f')}%); median |error| over {summary['sizes_ge_1MiB']} sizes >= 1MiB: "
            + (f"{med:.1f}%" if med is not None else "n/a")
            + f"; {pk['fraction'] * 100:g}% of peak busbw reached at {_human(pk['measured_size_bytes'])} measured, "
            f"{_human(pk['predicted_size_bytes'])} predicted")


COMPARE_ROW_WIDTH = 101   # a --compare row with its count and type columns


def compare_table_text(rep: dict, width: Optional[int] = None) -> str:
    """nccl-tests-like text: per compared run, the graph lines, one row per size, a summary line.
    Narrower than a whole row (``width``), the count and type columns (the file's own) are left out."""
    slim = width is not None and width < COMPARE_ROW_WIDTH
    blocks = []
    for c in rep["comparisons"]:
        lines = [f"# gpucomm predict --compare: {c['collective']}, {c['n_ranks']} ranks "
                 f"({layout_text(c['nodes'], c['gpus_per_node'], c.get('graph'))}), algo {c['algo']}",
                 f"# measured: {rep['source']} line {c['line']}"
                 + (f" ({c['test_name']}_perf)" if c.get("test_name") else "") + ", out-of-place columns"]
        lines += transport_lines(c.get("transport"))
        lines += _graph_lines(c["graph"])
        lines += [f"# note: {n}" for n in c["notes"]]
        lines.append("#")
        ct = ("", "", "") if slim else (f" {'count':>13} {'type':>8}", f" {'(elements)':>13} {'':>8}", None)
        lines.append(f"# {'size':>12}{ct[0]} {'measured':>10} {'predicted':>10} "
                     f"{'measured':>10} {'predicted':>10} {'error':>8}  predicted")
        lines.append(f"# {'(B)':>12}{ct[1]} {'time (us)':>10} {'time (us)':>10} "
                     f"{'busbw':>10} {'busbw':>10} {'(%)':>8}  algorithm")
        for r in c["rows"]:
            algo = r["algorithm"] + (f"/{r['protocol']}" if r.get("protocol") else "")
            mt = _fmt_time(r["measured_time_us"]) if r["measured_time_us"] is not None else "n/a"
            count_type = "" if slim else f" {_fmt_opt(r['count'], 'd'):>13} {str(r['type'] or '-'):>8}"
            lines.append(f"  {r['size_bytes']:>12}{count_type} "
                         f"{mt:>10} {_fmt_time(r['predicted_time_us']):>10} "
                         f"{_fmt_opt(r['measured_busbw_GBps'], '.2f'):>10} {r['predicted_busbw_GBps']:>10.2f} "
                         f"{_fmt_opt(r['error_pct'], '+.1f'):>8}  {algo}")
        lines.append(summary_line(c["summary"]))
        blocks.append("\n".join(lines))
    return "\n#\n".join(blocks) + "\n"


def _graph_lines(g: dict) -> list[str]:
    """The ``#`` lines describing NCCL's graphs and the achievable bandwidths (``cost.summary_dict``)."""
    lines = [
        f"# NCCL ring graph: {g['channels']} channels x {g['bw_intra']:g}/{g['bw_inter']:g} GB/s, "
        f"type {g['type_intra']}/{g['type_inter']}, sm{g['cc']}"
        + (f"; NVLS {g['nvls_channels']} channels x {g['nvls_bw_intra']:g} GB/s" if g.get("nvls") else ""),
    ]
    ach = []
    if g.get("ring_bus_bw"):
        ach.append(f"ring {g['ring_bus_bw']:g}")
    if g.get("node_net_bw"):
        per = "NVLink domain" if (g.get("trays_per_node") or 1) > 1 else "node"
        p2p = g.get("p2p_net_bw")
        if p2p and abs(p2p - g["node_net_bw"]) > 1e-6 * p2p:
            ach.append(f"network {g['node_net_bw']:g} per {per} (the rings' NICs), {p2p:g} for point-to-point "
                       "(all_to_all: every GPU's NICs)")
        else:
            ach.append(f"network {g['node_net_bw']:g} per {per}")
    if ach:
        lines.append("# achievable bus bandwidth (GB/s): " + ", ".join(ach))
    for n in g.get("notes") or []:
        lines.append(f"# note: {n}")
    return lines


def _fmt_time(t: float) -> str:
    # nccl-tests prints 4 significant-ish digits: 32.29, 206.2, 14920
    return f"{t:.2f}" if t < 100 else f"{t:.1f}" if t < 10000 else f"{t:.0f}"


def predict(
    topo: Optional[str] = topo_argument(),
    src: Optional[str] = from_option(),
    collective: Optional[str] = typer.Option(None, "--collective", "-c", help="all_reduce (default), all_gather, "
                                             "reduce_scatter, broadcast, reduce, all_to_all, send_recv. With "
                                             "--compare: only that collective's runs (default: every run)."),
    size: Optional[str] = typer.Option(None, "--size", "-s", help="Bytes per operation: 1GiB (default), a sweep "
                                       "8B:8GiB (doubling), 1K:1G:x4 (factor 4), or a list 1M,2M.  K/M/G and "
                                       "KiB/MiB/GiB are powers of 1024 (as nccl-tests' -b/-e), KB/MB/GB powers of "
                                       "1000.  With --compare: the file's sizes."),
    nodes: Optional[int] = typer.Option(None, "--nodes", "-N", help="Number of identical nodes (default 1; with "
                                        "--compare: from the file's hosts and ranks)."),
    nvlink_domain: Optional[int] = nvlink_domain_option(),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", "-g", min=1,
                                                help="GPUs used per node (default: all; the first G by index)."),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="GPU indices used per node, e.g. 0,1,2,3 or 0-3."),
    fabric_gbps: Optional[float] = typer.Option(None, "--fabric-gbps", help="What one NIC delivers, in Gb/s: "
                                                "sets the network bandwidth of the prediction (NCCL's algorithm "
                                                "choice still sees the NIC link rate when the topology has one); "
                                                "without NICs in the topology: one NIC per node. For NCCL's TCP "
                                                "socket transport on a 200G NIC use about 38 (fitted to a "
                                                "Polaris nccl-tests run)."),
    algo: str = typer.Option("auto", "--algo", help="auto (what NCCL would pick), ring, tree, nvls, pat."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="Element type for the count column (float, "
                                        "half, ...; default float; with --compare: the file's)."),
    compare_file: Optional[str] = typer.Option(None, "--compare", help="nccl-tests/rccl-tests output to check "
                                               "the prediction against: same collective, ranks and sizes; "
                                               "measured (out-of-place) vs predicted busbw and the error per size."),
    calibration: Optional[str] = typer.Option(None, "--calibration", metavar="PROFILE.json",
                                              help="A calibration profile (gpucomm calibrate): its fitted network, "
                                              "latency and protocol parameters replace the defaults."),
    gpu: Optional[str] = gpu_option(),
    cluster: Optional[str] = typer.Option(None, "--cluster", help="A cluster file (gpucomm cluster) or a fabric "
                                          "(ibnetdiscover output, topology.conf) with TOPO as every node: --nodes N "
                                          "are picked as `select --nodes` picks them, and a network that leaves a leaf "
                                          "gets the leaf uplinks' share (oversubscription)."),
    transport: Optional[str] = typer.Option(None, "--transport", help="The inter-node transport NCCL runs: ib, "
                                            "ib-nogdr, socket, plugin:NAME (e.g. plugin:aws-ofi-nccl), "
                                            "plugin:NAME:nogdr. Default: what the run's NCCL lines show, else "
                                            "what the probe found (docs/SWPATH.md)."),
    nccl_log: Optional[str] = typer.Option(None, "--nccl-log", metavar="LOG", help="An NCCL_DEBUG=INFO log of a "
                                           "run on these nodes (or next to the --compare output): its transport "
                                           "(NET/IB, NET/Socket, a plugin, GDRDMA) is used."),
) -> None:
    """Predict time, algbw and busbw of a collective (nccl-tests formulas), per size.

    With --compare FILE: the prediction next to a measured nccl-tests run, with the error per size and
    a summary (error at the largest size, median |error| >= 1 MiB, size reaching 80% of peak busbw).

    Formats: table (nccl-tests layout, default), json (schema gpucomm.predict/v1, or
    gpucomm.predict-compare/v1 with --compare), yaml."""
    from gpucomm.commands.calibrate import read_calibration
    from gpucomm.commands.collective import parse_gpu_list
    from gpucomm.planners.collectives.predict import build_comparison, build_prediction
    from gpucomm.probes.errors import InputError
    from gpucomm.probes.load import read_text_input
    from gpucomm.render.output import emit, text_width

    from gpucomm.planners.collectives.predict import TYPE_SIZES, USER_ALGOS

    gpu_list = flag_value("--gpus", gpus, parse=parse_gpu_list)
    flag_value("--collective", collective, parse=units.normalize_collective)
    flag_value("--algo", algo, choices=USER_ALGOS)
    flag_value("--dtype", dtype, choices=TYPE_SIZES)
    flag_value("--nodes", nodes, lo=1, hi=max_nodes())
    nvlink_domain_value(nvlink_domain, nodes)
    flag_value("--fabric-gbps", fabric_gbps, above=0, hi=units.MAX_FABRIC_GBPS)
    flag_value("--size", size, parse=lambda t: units.parse_sizes(t, "--size", minimum=1))
    cal = read_calibration(calibration) if calibration is not None else None
    log = None
    if nccl_log is not None:
        from gpucomm.probes.formats.nccllog import load_nccl_log

        log = load_nccl_log(nccl_log)
    if transport is not None:
        from gpucomm.planners.collectives.transport import parse

        parse(transport)   # a bad value is an input error before anything is loaded
    if compare_file is not None:
        for flag, value in (("--size", size), ("--dtype", dtype)):
            if value is not None:
                raise InputError(f"{flag} and --compare exclude each other: --compare predicts the file's sizes "
                                 "and types")
        text = read_text_input(compare_file)
        doc, _ = load_topo(topo, src, gpu=gpu)
        if nodes is not None:   # else the file's ranks say how many
            nvlink_domain_value(nvlink_domain, nodes, doc)
        rep = build_comparison(doc, text, compare_file, collective=collective, nodes=nodes, nvlink_domain=nvlink_domain,
                               gpus_per_node=gpus_per_node, fabric_gbps=fabric_gbps, algo=algo, gpus=gpu_list,
                               calibration=cal, calibration_source=calibration, transport=transport, nccl_log=log)
        emit(rep, extra={"table": lambda: _noted(doc, compare_table_text(rep, text_width()))},
             allowed=["table", "json", "yaml"])
        topo_warnings = set(doc.get("warnings") or [])
        for w in rep["warnings"]:   # skipped runs matter; topology warnings only with --verbose, as below
            diag(f"gpucomm: warning: {w}", verbose_only=w in topo_warnings)
        return
    notes = []
    if cluster is not None:
        from gpucomm.planners.placement.cluster import load_cluster
        from gpucomm.planners.placement.select import cluster_network

        cl = load_cluster(cluster, default_topology=topo or src)
        doc = with_gpu_model(cl.doc(cl.nodes[0]), gpu)
        net = cluster_network(cl, nodes or 2, doc)
        nodes = net["nodes"]
        if fabric_gbps is None:
            fabric_gbps = net["fabric_gbps"]
        notes.append(net["note"])
    else:
        doc, _ = load_topo(topo, src, gpu=gpu)
    nvlink_domain_value(nvlink_domain, nodes, doc)
    pred = build_prediction(doc, collective or "all_reduce", size or "1GiB", nodes=1 if nodes is None else nodes,
                            nvlink_domain=nvlink_domain,
                            gpus_per_node=gpus_per_node, fabric_gbps=fabric_gbps, algo=algo, gpus=gpu_list,
                            dtype=dtype or "float", calibration=cal, calibration_source=calibration,
                            transport=transport, nccl_log=log)
    if notes:
        pred["cluster"] = notes[0]
    emit(pred, extra={"table": lambda: _noted(doc, table_text(pred))}, allowed=["table", "json", "yaml"])
    for n in notes:
        diag(f"gpucomm: {n}")
    for w in pred["warnings"]:
        diag(f"gpucomm: warning: {w}", verbose_only=True)


def _noted(doc: dict, text: str) -> str:
    """``text`` after the line that says where the GPU model came from, when the topology has none;
    its prose lines wrapped at the output's width."""
    from gpucomm.render.output import wrap_comment_lines

    note = gpu_note_line(doc, "# ")
    return wrap_comment_lines(f"{note}\n{text}" if note else text)


def register(app: typer.Typer) -> None:
    app.command("predict")(predict)
