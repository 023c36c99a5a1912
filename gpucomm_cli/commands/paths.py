"""``gpucomm paths``: path type, hops and bottleneck bandwidth between GPUs and NICs (NCCL's system and
paths, planners/nccl/sysview.py)."""
# (no `from __future__ import annotations`: typer would compile every string annotation at start-up)

from typing import Optional, Tuple

import typer

from gpucomm.commands.common import from_option, gpu_note_line, gpu_option, load_topo, topo_argument, usage_error
from gpucomm.settings import diag

PATHS_SCHEMA = "gpucomm.paths/v1"


def build_paths(doc: dict, between: Optional[Tuple[str, str]] = None, rule: str = "widest") -> dict:
    """The ``gpucomm.paths/v1`` document (no I/O)."""
    from gpucomm.planners.nccl.sysview import path_table
    from gpucomm.probes.topology import Topology

    topo = Topology.of(doc)
    rows = path_table(topo, between=between, rule=rule)
    return {"schema": PATHS_SCHEMA, "rule": rule, "rows": rows, "assumptions": topo.all_assumptions()}


def paths(
    topo: Optional[str] = topo_argument(),
    src: Optional[str] = from_option(),
    between: Optional[Tuple[str, str]] = typer.Option(None, "--between", help="Only the path between two devices: "
                                                      "GPU<index>, an index, a GPU bus id or a NIC name."),
    rule: str = typer.Option("widest", "--rule", help="widest: NCCL's route, or a wider one over the same links "
                             "where there is one; nccl: the route NCCL's transports take (best type, then "
                             "bandwidth, then hops; P2P, PXN and GDR rules applied)."),
    gpu: Optional[str] = gpu_option(),
) -> None:
    """Path type, hops and bottleneck bandwidth for every GPU->GPU and GPU<->NIC pair (or one pair).

    Paths are NCCL 2.30's: its system of the node (GPUs hang off their device, NIC ports fused as NCCL
    fuses them), its types (LOC NVL NVB C2C PIX PXB P2C PXN PHB SYS NET), hop counts and per-link
    bandwidths (PCIe width*speed, NVLink count*per-link).
    Formats: table (default), json (schema gpucomm.paths/v1), yaml."""
    from gpucomm.render.tables import print_table
    from gpucomm.render.output import emit

    rule_l = (rule or "").strip().lower()
    if rule_l not in ("widest", "nccl"):
        usage_error(f"{rule!r} is not a path rule (widest or nccl)", "--rule")
    doc, _ = load_topo(topo, src, gpu=gpu)
    out = build_paths(doc, between=between, rule=rule_l)

    def table(console) -> None:
        from gpucomm.render.plain import Table

        note = gpu_note_line(doc)
        if note:
            console.print(note, soft_wrap=True, markup=False)
        t = Table(title=f"Paths ({'widest route' if rule_l == 'widest' else 'NCCL route'})", title_justify="left")
        for c, j in (("src", "left"), ("dst", "left"), ("type", "left"), ("hops", "right"),
                     ("bottleneck GB/s", "right"), ("via", "left")):
            t.add_column(c, justify=j, no_wrap=True)
        for r in out["rows"]:
            t.add_row(r["src"], r["dst"], r["type"], str(r["hops"]), f"{r['bw_GBps']:g}", r["via"] or "-")
        print_table(console, t)
        for a in out["assumptions"]:
            console.print(f"assumed: {a}")

    emit(out, table=table, allowed=["table", "json", "yaml"])
    for w in doc.get("warnings") or []:
        diag(f"gpucomm: warning: {w}", verbose_only=True)


def register(app: typer.Typer) -> None:
    app.command("paths")(paths)
