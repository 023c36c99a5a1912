"""``gpucomm rings`` and ``gpucomm trees``: ring channels with predicted bandwidth next to what NCCL's
own search would pick (planners/collectives/rings.py, planners/nccl/search.py), and NCCL's double binary trees
(planners/collectives/trees.py).  ``--compare LOG`` adds what NCCL actually did, read from its debug log
(probes/formats/nccllog.py)."""
# (no `from __future__ import annotations`: typer would compile every string annotation at start-up)

import re

from typing import Optional

import typer

from gpucomm.commands.common import (TOPO_HELP, flag_value, from_option, gpu_note_line, gpu_option, load_topo, max_nodes,
                                     nvlink_domain_option, nvlink_domain_value, topo_argument, usage_error)
from gpucomm.probes import units
from gpucomm.settings import diag

__all__ = ["TOPO_HELP", "parse_gpu_list"]


# ASCII digits only: str.isdigit() accepts superscripts that int() rejects.
_DIGITS = re.compile(r"[0-9]+\Z").match


def parse_gpu_list(text: Optional[str]) -> Optional[list]:
    """``0,1,2,3`` / ``0-3`` / ``GPU0,GPU2`` -> [ints]; None when not given.  InputError otherwise."""
    from gpucomm.probes.errors import InputError

    if text is None:
        return None
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if part.upper().startswith("GPU"):
            part = part[3:]
        if not part:
            continue
        if "-" in part:
            lo, _, hi = part.partition("-")
            if not (_DIGITS(lo.strip()) and _DIGITS(hi.strip())) or int(hi) < int(lo) or int(hi) - int(lo) > 4096:
                raise InputError(f"--gpus {text!r}: bad range {part!r}", expected="e.g. 0,1,2,3 or 0-3")
            out.extend(range(int(lo), int(hi) + 1))
        elif _DIGITS(part):
            out.append(int(part))
        else:
            raise InputError(f"--gpus {text!r}: {part!r} is not a GPU index", expected="e.g. 0,1,2,3 or 0-3")
    if not out:
        raise InputError("--gpus is empty", expected="e.g. 0,1,2,3")
    if len(set(out)) != len(out):
        dup = sorted({x for x in out if out.count(x) > 1})[0]
        raise InputError(f"--gpus {text!r}: GPU {dup} is listed twice")
    return out


COMPARE_HELP = ("NCCL debug log of a run on this machine (NCCL_DEBUG=INFO, best with "
                "NCCL_DEBUG_SUBSYS=INIT,GRAPH): show what NCCL did next to this plan and our model of NCCL. "
                "rings also takes an NCCL graph file (NCCL_GRAPH_DUMP_FILE, or rings --format nccl-graph).")


def _fmt(x) -> str:
    if x is None:
        return "-"
    return f"{x:g}" if isinstance(x, float) else str(x)


def _log_header(sec: dict) -> str:
    lay = "?"
    if sec.get("nranks") is not None:
        lay = f"{sec['nranks']} ranks"
        if sec.get("nnodes") and sec.get("local_ranks"):
            lay += f" = {sec['nnodes']} node{'s' if sec['nnodes'] != 1 else ''} x {sec['local_ranks']}"
    hosts = sec.get("hosts") or []
    shown = ", ".join(hosts[:4]) + (f", ... ({len(hosts)})" if len(hosts) > 4 else "")
    ver = f"NCCL {sec['version']}; " if sec.get("version") else ""
    return f"NCCL log {sec.get('source')}: {ver}{lay}" + (f"; hosts {shown}" if hosts else "")


def _order(gpus, nets=None) -> str:
    if not gpus:
        return "-"
    body = " ".join("?" if g is None else str(g) for g in gpus)
    if nets:
        return f"{nets[0]} > {body} > {nets[-1]}"
    return body


def _transports_text(sec: dict) -> str:
    by = (sec.get("transports") or {}).get("by_via") or {}
    if not by:
        return "-"
    items = sorted(by.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{k} x{v}" for k, v in items[:4]) + (f", +{len(items) - 4} more" if len(items) > 4 else "")
    return text


def _print_log_notes(console, sec: dict) -> None:
    # one line each (soft wrap), so they can be grepped and copied whole
    console.print(f"verdict: {sec['verdict']}", soft_wrap=True)
    for n in sec.get("notes") or []:
        console.print(f"note: {n}", soft_wrap=True)


def _log_diagnostics(sec: dict) -> None:
    for w in sec.get("warnings") or []:
        diag(f"gpucomm: warning: {w}")
    lw = sec.get("log_warnings") or []
    for w in lw[:3]:
        diag(f"gpucomm: warning: {w}")
    if len(lw) > 3:
        diag(f"gpucomm: warning: ... {len(lw) - 3} more unreadable lines in the log", verbose_only=False)
    for w in lw[3:]:
        diag(f"gpucomm: warning: {w}", verbose_only=True)


def domains_text(nodes: int, per_domain: int) -> str:
    """`` in 1 NVLink domain`` / `` in 2 NVLink domains of 18``; empty for nodes not joined by NVLink."""
    if per_domain <= 1:
        return ""
    doms = nodes // per_domain
    return " in 1 NVLink domain" if doms == 1 else f" in {doms} NVLink domains of {per_domain}"


def nodes_text(nodes: int, per_domain: int) -> str:
    """``1 node`` / ``4 nodes`` / ``2 nodes in 1 NVLink domain`` / ``36 nodes in 2 NVLink domains of 18``."""
    return ("1 node" if nodes == 1 else f"{nodes} nodes") + domains_text(nodes, per_domain)


def render_rings_log(console, sec: dict, out: dict) -> None:
    """The --compare part of ``gpucomm rings``: NCCL (log) | our model of NCCL | our rings."""
    from gpucomm.render.tables import print_table
    from gpucomm.render.plain import Table

    cmp_ = sec["comparison"]
    g = sec.get("graph")
    console.print(_log_header(sec))
    t = Table(show_header=True, title_justify="left")
    for c in ("", "NCCL (log)", "our model of NCCL", "our rings"):
        t.add_column(c, no_wrap=True)
    ch = cmp_["channels"]
    t.add_row("channels", f"{_fmt(ch['nccl'])}" + (f" ({sec['channels_from']})" if sec.get("channels_from") else ""),
              _fmt(ch["model"]), _fmt(ch["ours"]))
    ref = sec.get("model") or {}
    if g is not None:
        t.add_row("ring graph", f"{g['n_channels']} x {_fmt(g['bw_intra'])}/{_fmt(g['bw_inter'])} GB/s",
                  f"{_fmt(ref.get('search_channels'))} x {_fmt(ref.get('bw_intra'))}/{_fmt(ref.get('bw_inter'))} GB/s",
                  "-")
        t.add_row("path types (intra/inter)", f"{g['type_intra']}/{g['type_inter']}",
                  f"{_fmt(ref.get('type_intra'))}/{_fmt(ref.get('type_inter'))}", "-")
    bb = cmp_["busbw_GBps"]
    t.add_row("bus bandwidth", f"{_fmt(bb['nccl'])} GB/s" if bb["nccl"] is not None else "-",
              f"{_fmt(bb['model'])} GB/s", f"{_fmt(bb['ours'])} GB/s")
    oc = cmp_["order_channel0"]
    nets = g["channels"][0]["nets"] if g and g["channels"] else None
    t.add_row("channel 0 (GPUs)", _order(oc["nccl"], [f"NET/{n}" for n in nets] if nets else None),
              _order(oc["model"]), _order(oc["ours"]))
    o = cmp_.get("orders")
    if o:
        d = o["first_difference"]
        t.add_row("channel orders (node 0)", f"{o['checked']} channels",
                  f"{o['match']} the same" + (f" (channel {d['channel']}: {_order(d['model'])})" if d else ""), "-")
    t.add_row("transports", _transports_text(sec), "", "")
    print_table(console, t)
    rings = sec.get("rings") or []
    if rings:
        rt = Table(title="NCCL rings (log; node 0 as GPU indices)", title_justify="left")
        for c in ("channel", "ranks", "node 0 (GPUs)"):
            rt.add_column(c, no_wrap=True)
        for r in rings[:32]:
            ranks = " ".join(map(str, r["ranks"])) + ("" if r["complete"] else " ... (partial)")
            if len(ranks) > 100:
                ranks = ranks[:97] + "..."
            rt.add_row(str(r["channel"]), ranks, _order(r["node0_gpus"]))
        if len(rings) > 32:
            rt.add_row("...", f"({len(rings) - 32} more)", "")
        print_table(console, rt)
    _print_log_notes(console, sec)


def _graph_file_text(path: str) -> Optional[str]:
    """The text of ``--compare FILE`` when FILE is an NCCL graph file (``<graphs>``), else None (a log)."""
    from gpucomm.probes.load import read_text_input

    try:
        text = read_text_input(path)
    except Exception:   # the log reader names the problem
        return None
    return text if text.lstrip().startswith("<graphs") else None


def rings(
    topo: Optional[str] = topo_argument(),
    src: Optional[str] = from_option(),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="GPU indices to use, e.g. 0,1,2,3 or 0-3 (default: all)."),
    channels: str = typer.Option("auto", "--channels", help="auto, or the number of channels (1-64)."),
    nodes: int = typer.Option(1, "--nodes", "-N", help="Identical nodes joined through their NICs "
                              "(> 1: every channel enters and leaves each node through a NIC), or by NVLink "
                              "(--nvlink-domain)."),
    nvlink_domain: Optional[int] = nvlink_domain_option(),
    compare: Optional[str] = typer.Option(None, "--compare", metavar="LOG", help=COMPARE_HELP),
    calibration: Optional[str] = typer.Option(None, "--calibration", metavar="PROFILE.json",
                                              help="A calibration profile (gpucomm calibrate): add what NCCL's "
                                              "rings achieve on this machine (bus bandwidth, a 1 GiB all_reduce)."),
    gpu: Optional[str] = gpu_option(),
) -> None:
    """Ring channels maximising total bus bandwidth, with NCCL's own choice for comparison.

    Each channel is a cycle over the GPUs (or, across nodes, a NIC-to-NIC chain); link capacity is
    shared between channels.  Formats: table (default), json (schema gpucomm.rings/v1), yaml, and
    nccl-graph: an NCCL graph file of our rings for NCCL_GRAPH_FILE (one node; NCCL loads it instead of
    searching)."""
    from gpucomm.render.tables import plural, print_table
    from gpucomm.planners.collectives.rings import rings_report
    from gpucomm.render.output import emit

    ch = (channels or "").strip().lower()
    if ch != "auto" and not (ch.isascii() and ch.isdigit() and 1 <= int(ch) <= 64):
        usage_error(f"{channels!r} is not auto or a channel count 1-64", "--channels")
    gpu_list = flag_value("--gpus", gpus, parse=parse_gpu_list)
    flag_value("--nodes", nodes, lo=1, hi=max_nodes())
    nvlink_domain_value(nvlink_domain, nodes)
    graph_text = _graph_file_text(compare) if compare else None
    log = None
    if compare and graph_text is None:
        from gpucomm.probes.formats.nccllog import load_nccl_log

        log = load_nccl_log(compare)
    doc, _ = load_topo(topo, src, gpu=gpu)
    nvlink_domain_value(nvlink_domain, nodes, doc)
    if log is not None:
        from gpucomm.planners.collectives.logcompare import rings_with_log

        out = rings_with_log(doc, log, gpus=gpu_list, channels=channels, nodes=nodes, nvlink_domain=nvlink_domain)
    else:
        out = rings_report(doc, gpus=gpu_list, channels=channels, nodes=nodes, nvlink_domain=nvlink_domain)
    if graph_text is not None:
        from gpucomm.planners.nccl.graphfile import compare_ring_graph

        out["nccl_graph"] = compare_ring_graph(graph_text, compare, out)
    if calibration is not None:
        from gpucomm.commands.calibrate import read_calibration
        from gpucomm.planners.collectives.predict import achievable_summary

        out["calibrated"] = achievable_summary(doc, nodes=nodes, gpus=gpu_list, calibration=read_calibration(calibration),
                                               calibration_source=calibration)
    if out["nvlink_domain"]["systems"] > 1:   # the transport between the nodes, as the probe found it (docs/SWPATH.md)
        from gpucomm.planners.collectives.transport import from_probe
        from gpucomm.probes.topology import Topology

        out["transport"] = from_probe(Topology.of(doc)).to_dict()

    def table(console) -> None:
        from gpucomm.render.plain import Table

        if out.get("transport"):
            t = out["transport"]
            console.print(f"transport between nodes: {t['name']} ({t['source']}: {t['why']})", markup=False,
                          highlight=False)

        nd = out["nvlink_domain"]
        multi = nd["systems"] > 1
        note = gpu_note_line(doc)
        if note:
            console.print(note, soft_wrap=True, markup=False)
        t = Table(title=f"Rings: {plural(len(out['channels']), 'channel')}, {out['total_bw_GBps']:g} GB/s total "
                        f"({nodes_text(out['nodes'], nd['trays_per_system'])}, GPUs "
                        f"{','.join(map(str, out['gpus']))})", title_justify="left")
        t.add_column("channel", justify="right")
        t.add_column("order", no_wrap=True)
        t.add_column("GB/s", justify="right")
        t.add_column("bottleneck hop", no_wrap=True)
        for ch in out["channels"]:
            # a NIC hop inside the node (NCCL's NIC-joined domains): "GPU3 > nic_a ~ nic_b > GPU4"
            net_hops = {h["after"]: f"{h['nics'][0]} ~ {h['nics'][1]}" for h in ch.get("net_hops") or []}
            parts = []
            for k, g in enumerate(ch["gpus"]):
                parts.append(f"GPU{g}")
                if k in net_hops:
                    parts.append(net_hops[k])
            order = " > ".join(parts)
            if multi:
                order = f"{ch['nics'][0]} > {order} > {ch['nics'][1]}"
            else:
                order += f" > GPU{ch['gpus'][0]}"
            worst = min(ch["links"], key=lambda l: (l["path_bw_GBps"], l["type"])) if ch["links"] else None
            hop = f"{worst['from']}->{worst['to']} {worst['type']} {worst['path_bw_GBps']:g}" if worst else "-"
            t.add_row(str(ch["channel"]), order, f"{ch['bw_GBps']:g}", hop)
        print_table(console, t)
        if nd["trays_per_system"] > 1 and nd.get("note"):
            console.print(f"NVLink domain: {nd['note']}", soft_wrap=True, markup=False, highlight=False)
        ref = out["nccl_reference"]
        if ref:
            console.print(f"NCCL reference: {ref['channels']} channels ({ref['search_channels']} searched x "
                          f"{ref['bw_GBps']:g} GB/s, type {ref['type_intra']}/{ref['type_inter'] or '-'}) = "
                          f"{ref['total_bw_GBps']:g} GB/s; ours {out['total_bw_GBps']:g} GB/s "
                          f"({out['method']}{'' if out['exact'] else ', heuristic'})")
        for a in out["assumptions"]:
            console.print(f"assumed: {a}")
        cal = out.get("calibrated")
        if cal:
            ar = cal["all_reduce"]
            console.print(f"calibrated ({cal['source']}): NCCL's rings achieve {cal['ring_bus_bw_GBps']:g} GB/s bus "
                          f"bandwidth" + (f", network {cal['node_net_bw_GBps']:g} GB/s per node" if cal['node_net_bw_GBps'] else "")
                          + (f"; all_reduce of {units.format_size(ar['size_bytes'])}: {ar['busbw_GBps']:.2f} GB/s busbw "
                             f"({ar['algorithm']}/{ar['protocol']})" if ar else ""))
            for n in cal["notes"][1:]:
                console.print(f"note: {n}")
        if "nccl_log" in out:
            render_rings_log(console, out["nccl_log"], out)
        ng = out.get("nccl_graph")
        if ng:
            console.print(f"NCCL graph file {ng['file']}: {ng['nchannels']} ring channel(s) x {ng['bw_GBps']:g} GB/s = "
                          f"{ng['total_bw_GBps']:g} GB/s (type {ng['type_intra']}/{ng['type_inter']}); ours "
                          f"{ng['ours_total_bw_GBps']:g} GB/s" + (f" ({ng['ratio']:g}x)" if ng["ratio"] else ""))
            m = ng.get("model")
            if m:
                d = m["first_difference"]
                console.print(f"  our model of NCCL: {_fmt(m['nchannels'])} channel(s) x {_fmt(m['bw_GBps'])} GB/s, type "
                              f"{_fmt(m['type_intra'])}; channel for channel: {m['same_channels']} of {m['checked']} the "
                              "same order" + ("" if d is None else f" (first difference: channel {d['channel']})")
                              + (" -- agrees" if m["agrees"] else " -- differs"), soft_wrap=True, markup=False,
                              highlight=False)
            for i, ch in enumerate(ng["channels"][:16]):
                console.print(f"  graph channel {i}: " + " > ".join(f"GPU{g}" if isinstance(g, int) else str(g) for g in ch))
            if ng["covers_gpus"] is False:
                console.print("  note: its channels do not cover exactly this plan's GPUs")

    def nccl_graph() -> str:
        from gpucomm.planners.nccl.graphfile import ring_graph_from_report

        text, info = ring_graph_from_report(out)
        ref_total = info["nccl_total_bw_GBps"]
        diag(f"gpucomm: NCCL graph: {info['channels']} ring channel(s) x {info['bw_GBps']:g} GB/s = "
             f"{info['total_bw_GBps']:g} GB/s (type {info['type_intra']})"
             + (f"; NCCL's own search: {ref_total:g} GB/s" if ref_total is not None else ""))
        if ref_total is not None and info["total_bw_GBps"] <= ref_total:
            diag("gpucomm: warning: this graph is not faster than what NCCL finds itself; "
                 "NCCL_GRAPH_FILE would not help here")
        return text

    emit(out, table=table, extra={"nccl-graph": nccl_graph}, allowed=["table", "json", "yaml", "nccl-graph"])
    for w in out["warnings"]:
        diag(f"gpucomm: warning: {w}")
    if "nccl_log" in out:
        _log_diagnostics(out["nccl_log"])
    for w in doc.get("warnings") or []:
        diag(f"gpucomm: warning: {w}", verbose_only=True)


def render_trees_log(console, sec: dict, out: dict) -> None:
    """The --compare part of ``gpucomm trees``."""
    from gpucomm.render.tables import print_table
    from gpucomm.render.plain import Table

    cmp_ = sec["comparison"]
    g = sec.get("graph")
    console.print(_log_header(sec))
    t = Table(show_header=True, title_justify="left")
    for c in ("", "NCCL (log)", "our model of NCCL", "our trees"):
        t.add_column(c, no_wrap=True)
    ch = cmp_["channels"]
    t.add_row("tree channels", _fmt(ch["nccl"]), _fmt(ch["model"]), _fmt(ch["ours"]))
    ref = sec.get("model") or {}
    if g is not None:
        t.add_row("tree graph",
                  f"{g['pattern_name']} {g['n_channels']} x {_fmt(g['bw_intra'])}/{_fmt(g['bw_inter'])} GB/s",
                  f"{_fmt(ref.get('pattern'))} {_fmt(ref.get('search_channels'))} x {_fmt(ref.get('bw_intra'))}/"
                  f"{_fmt(ref.get('bw_inter'))} GB/s", out.get("pattern", "-"))
        t.add_row("path types (intra/inter)", f"{g['type_intra']}/{g['type_inter']}",
                  f"{_fmt(ref.get('type_intra'))}/{_fmt(ref.get('type_inter'))}", "-")
        chain = g["channels"][0]["gpus"] if g["channels"] else None
        t.add_row("chain 0 (GPUs)", _order(chain), "", _order((out.get("chains") or [None])[0]))
    lv = cmp_["links_vs_ours"]
    t.add_row("logged tree links", f"{lv['checked']} (channel, rank) entries",
              "", f"{lv['match']} agree" if lv["checked"] else lv.get("skipped", "-"))
    rb = cmp_.get("links_vs_nccl_chains")
    if rb:
        t.add_row("  rebuilt from NCCL's chains", "", "", f"{rb['match']} of {rb['checked']} agree")
    t.add_row("transports", _transports_text(sec), "", "")
    print_table(console, t)
    diffs = lv.get("differ") or []
    for d in diffs[:3]:
        console.print(f"differs: channel {d['channel']} rank {d['rank']}: NCCL up {d['nccl']['up']} down "
                      f"{d['nccl']['down']}, ours up {d['ours']['up']} down {d['ours']['down']}")
    _print_log_notes(console, sec)


def trees(
    topo: Optional[str] = topo_argument(),
    src: Optional[str] = from_option(),
    nodes: int = typer.Option(1, "--nodes", "-N", help="Number of identical nodes."),
    nvlink_domain: Optional[int] = nvlink_domain_option(),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", "-g", min=1,
                                                help="GPUs per node (default: all; the first G by index)."),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="GPU indices used per node, e.g. 0,1,2,3 or 0-3."),
    compare: Optional[str] = typer.Option(None, "--compare", metavar="LOG", help=COMPARE_HELP),
    gpu: Optional[str] = gpu_option(),
) -> None:
    """NCCL's double binary trees across nodes (chains inside a node), two tree channels per ring.

    Formats: table (default), json (schema gpucomm.trees/v1), yaml."""
    from gpucomm.render.tables import plural, print_table
    from gpucomm.planners.collectives.trees import trees_report
    from gpucomm.probes.errors import InputError
    from gpucomm.render.output import emit

    gpu_list = flag_value("--gpus", gpus, parse=parse_gpu_list)
    flag_value("--nodes", nodes, lo=1, hi=max_nodes())
    nvlink_domain_value(nvlink_domain, nodes)
    if gpu_list is not None and gpus_per_node is not None and gpus_per_node != len(gpu_list):
        raise InputError(f"--gpus lists {len(gpu_list)} GPUs but --gpus-per-node is {gpus_per_node}")
    log = None
    if compare:
        from gpucomm.probes.formats.nccllog import load_nccl_log

        log = load_nccl_log(compare)
    doc, _ = load_topo(topo, src, gpu=gpu)
    nvlink_domain_value(nvlink_domain, nodes, doc)
    if log is not None:
        from gpucomm.planners.collectives.logcompare import trees_with_log

        out = trees_with_log(doc, log, nodes=nodes, gpus_per_node=gpus_per_node, gpus=gpu_list,
                             nvlink_domain=nvlink_domain)
    else:
        out = trees_report(doc, nodes=nodes, gpus_per_node=gpus_per_node, gpus=gpu_list, nvlink_domain=nvlink_domain)

    def table(console) -> None:
        from gpucomm.render.plain import Table

        nd = out["nvlink_domain"]
        gpn = out["gpus_per_node"] * nd["trays_per_system"]   # ranks of one system: links between systems
        note = gpu_note_line(doc)
        if note:
            console.print(note, soft_wrap=True, markup=False)
        t = Table(title=f"Trees: {plural(len(out['channels']), 'channel')}, {plural(out['nranks'], 'rank')} "
                        f"({out['nodes']} x {out['gpus_per_node']}{domains_text(out['nodes'], nd['trays_per_system'])}), "
                        f"pattern {out['pattern']}, depth {out['depth']}",
                  title_justify="left")
        for c, j in (("channel", "right"), ("tree", "right"), ("root", "right"), ("chain (GPUs)", "left"),
                     ("node links parent>child (ranks)", "left")):
            t.add_column(c, justify=j)
        chains = out["chains"]
        for ch in out["channels"]:
            cross = [f"{r['up']}>{r['rank']}" for r in ch["ranks"]
                     if r["up"] != -1 and r["up"] // gpn != r["rank"] // gpn]
            chain = chains[ch["channel"] % len(chains)]
            shown = ", ".join(cross[:12]) + (f", ... ({len(cross)})" if len(cross) > 12 else "")
            t.add_row(str(ch["channel"]), str(ch["tree"]), str(ch["root"]), ">".join(map(str, chain)), shown or "-")
        print_table(console, t)
        if nd["trays_per_system"] > 1 and nd.get("note"):
            console.print(f"NVLink domain: {nd['note']}", soft_wrap=True, markup=False, highlight=False)
        ref = out["nccl_reference"]
        if ref:
            console.print(f"NCCL reference: {ref['channels']} channels (tree graph {ref['search_channels']} x "
                          f"{ref['bw_intra']}/{ref['bw_inter']} GB/s, {ref['pattern']})")
        for a in out["assumptions"]:
            console.print(f"assumed: {a}")
        if "nccl_log" in out:
            render_trees_log(console, out["nccl_log"], out)

    emit(out, table=table, allowed=["table", "json", "yaml"])
    for w in out.get("warnings") or []:
        diag(f"gpucomm: warning: {w}", verbose_only=True)
    if "nccl_log" in out:
        _log_diagnostics(out["nccl_log"])


def register(app: typer.Typer) -> None:
    app.command("rings")(rings)
    app.command("trees")(trees)
