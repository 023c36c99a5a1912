"""``gpucomm rings`` and ``gpucomm trees``: ring channels with predicted bandwidth next to what NCCL's
own search would pick (planners/rings.py, planners/nccl_ref.py), and NCCL's double binary trees
(planners/trees.py)."""
from __future__ import annotations

import re

from typing import Optional

import typer

from .settings import diag

TOPO_HELP = ("Topology: a saved topology, snapshot, `nvidia-smi topo -m` output, NCCL topology XML, "
             "rocm-smi output, or example:<name>.")


# ASCII digits only: str.isdigit() accepts superscripts that int() rejects.
_DIGITS = re.compile(r"[0-9]+\Z").match


def parse_gpu_list(text: Optional[str]) -> Optional[list]:
    """``0,1,2,3`` / ``0-3`` / ``GPU0,GPU2`` -> [ints]; None when not given.  InputError otherwise."""
    from probes.errors import InputError

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


def build_rings(doc: dict, gpus: Optional[list] = None, channels: str = "auto", nodes: int = 1) -> dict:
    """The ``gpucomm.rings/v1`` document (no I/O)."""
    from planners.rings import search_rings

    return search_rings(doc, gpus=gpus, channels=channels, nodes=nodes).to_dict()


def rings(
    topo: str = typer.Argument(..., help=TOPO_HELP),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="GPU indices to use, e.g. 0,1,2,3 or 0-3 (default: all)."),
    channels: str = typer.Option("auto", "--channels", help="auto, or the number of channels (1-64)."),
    nodes: int = typer.Option(1, "--nodes", "-N", help="Identical nodes joined through their NICs "
                              "(> 1: every channel enters and leaves each node through a NIC)."),
) -> None:
    """Ring channels maximising total bus bandwidth, with NCCL's own choice for comparison.

    Each channel is a cycle over the GPUs (or, across nodes, a NIC-to-NIC chain); link capacity is
    shared between channels.  Formats: table (default), json (schema gpucomm.rings/v1), yaml."""
    from probes.load import load_topology

    from .render import emit

    gpu_list = parse_gpu_list(gpus)
    doc = load_topology(topo)
    out = build_rings(doc, gpus=gpu_list, channels=channels, nodes=nodes)

    def table(console) -> None:
        from rich.table import Table

        multi = out["nodes"] > 1
        t = Table(title=f"Rings: {len(out['channels'])} channels, {out['total_bw_GBps']:g} GB/s total "
                        f"({'%d nodes' % out['nodes'] if multi else '1 node'}, GPUs "
                        f"{','.join(map(str, out['gpus']))})", title_justify="left")
        t.add_column("channel", justify="right")
        t.add_column("order", no_wrap=True)
        t.add_column("GB/s", justify="right")
        t.add_column("bottleneck hop", no_wrap=True)
        for ch in out["channels"]:
            order = " > ".join(f"GPU{g}" for g in ch["gpus"])
            if multi:
                order = f"{ch['nics'][0]} > {order} > {ch['nics'][1]}"
            else:
                order += f" > GPU{ch['gpus'][0]}"
            worst = min(ch["links"], key=lambda l: (l["path_bw_GBps"], l["type"])) if ch["links"] else None
            hop = f"{worst['from']}->{worst['to']} {worst['type']} {worst['path_bw_GBps']:g}" if worst else "-"
            t.add_row(str(ch["channel"]), order, f"{ch['bw_GBps']:g}", hop)
        console.print(t)
        ref = out["nccl_reference"]
        if ref:
            console.print(f"NCCL reference: {ref['channels']} channels ({ref['search_channels']} searched x "
                          f"{ref['bw_GBps']:g} GB/s, type {ref['type_intra']}/{ref['type_inter'] or '-'}) = "
                          f"{ref['total_bw_GBps']:g} GB/s; ours {out['total_bw_GBps']:g} GB/s "
                          f"({out['method']}{'' if out['exact'] else ', heuristic'})")
        for a in out["assumptions"]:
            console.print(f"assumed: {a}")

    emit(out, table=table, allowed=["table", "json", "yaml"])
    for w in out["warnings"]:
        diag(f"gpucomm: warning: {w}")
    for w in doc.get("warnings") or []:
        diag(f"gpucomm: warning: {w}", verbose_only=True)


def build_tree_doc(doc: dict, nodes: int = 1, gpus_per_node: Optional[int] = None,
                   gpus: Optional[list] = None) -> dict:
    """The ``gpucomm.trees/v1`` document (no I/O)."""
    from planners.trees import build_trees

    return build_trees(doc, nodes=nodes, gpus_per_node=gpus_per_node, gpus=gpus).to_dict()


def trees(
    topo: str = typer.Argument(..., help=TOPO_HELP),
    nodes: int = typer.Option(1, "--nodes", "-N", help="Number of identical nodes."),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", "-g",
                                                help="GPUs per node (default: all; the first G by index)."),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="GPU indices used per node, e.g. 0,1,2,3 or 0-3."),
) -> None:
    """NCCL's double binary trees across nodes (chains inside a node), two tree channels per ring.

    Formats: table (default), json (schema gpucomm.trees/v1), yaml."""
    from probes.errors import InputError
    from probes.load import load_topology

    from .render import emit

    gpu_list = parse_gpu_list(gpus)
    if gpu_list is not None and gpus_per_node is not None and gpus_per_node != len(gpu_list):
        raise InputError(f"--gpus lists {len(gpu_list)} GPUs but --gpus-per-node is {gpus_per_node}")
    doc = load_topology(topo)
    out = build_tree_doc(doc, nodes=nodes, gpus_per_node=gpus_per_node, gpus=gpu_list)

    def table(console) -> None:
        from rich.table import Table

        gpn = out["gpus_per_node"]
        t = Table(title=f"Trees: {len(out['channels'])} channels, {out['nranks']} ranks "
                        f"({out['nodes']} x {gpn}), pattern {out['pattern']}, depth {out['depth']}",
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
        console.print(t)
        ref = out["nccl_reference"]
        if ref:
            console.print(f"NCCL reference: {ref['channels']} channels (tree graph {ref['search_channels']} x "
                          f"{ref['bw_intra']}/{ref['bw_inter']} GB/s, {ref['pattern']})")
        for a in out["assumptions"]:
            console.print(f"assumed: {a}")

    emit(out, table=table, allowed=["table", "json", "yaml"])
    for w in out.get("warnings") or []:
        diag(f"gpucomm: warning: {w}", verbose_only=True)


def register(app: typer.Typer) -> None:
    app.command("rings")(rings)
    app.command("trees")(trees)
