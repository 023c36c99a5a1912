"""``gpucomm doctor`` (find degraded links) and ``gpucomm diff`` (compare nodes).

Exit codes: doctor 5 when it finds an error or a warning, 0 when clean or info only; diff 0 when
the nodes are identical, 5 when they differ (``diff(1)`` returns 1, which is gpucomm's
bad-input code).  Bad inputs exit 1 as everywhere else.
"""
from __future__ import annotations

from typing import List, Optional

import typer

from gpucomm.commands.common import from_option, load_topo, topo_argument, usage_error
from gpucomm.exitcodes import ExitCode
from gpucomm.render.tables import plural, print_table

_SEV_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _describe(doc: dict, src: Optional[str]) -> str:
    h = doc.get("host") or {}
    name = src or f"this node ({h.get('hostname') or 'unknown host'})"
    return f"{name}: {plural(len(doc.get('gpus', [])), 'GPU')}, {plural(len(doc.get('nics', [])), 'NIC')}"


def short_names(inputs: List[str]) -> List[str]:
    """Column labels for diff: the file or directory name without its extension, or the full
    argument when two inputs would get the same label."""
    import os
    import re

    labels = []
    for s in inputs:
        if s.startswith("example:"):
            labels.append(s)
            continue
        base = os.path.basename(s.rstrip("/")) or s
        labels.append(re.sub(r"\.(tar\.gz|tgz|json|ya?ml|txt|xml)$", "", base) or base)
    return labels if len(set(labels)) == len(labels) else list(inputs)


def doctor(
    topo: Optional[str] = topo_argument(),
    src: Optional[str] = from_option(),
    rules: Optional[str] = typer.Option(None, "--rules", help="Comma list of rules to run (default: all): "
                                        "pcie-downtrained, nvlink-inactive, ib-port-down, ib-rate-low, "
                                        "nic-numa-mismatch, p2p-blocked, cpu-affinity-mismatch, measured-bw-low, "
                                        "mig-enabled, matrix-asymmetric."),
) -> None:
    """Find degraded or misconfigured links: PCIe down-trained, NVLink down, IB ports down or slow, GPU/NIC
    NUMA mismatches, ACS/IOMMU blocking P2P, MIG. Exits 5 when it finds errors or warnings."""
    from gpucomm.planners.health.doctor import parse_rules, run_doctor

    from gpucomm.render.output import emit

    only = parse_rules(rules)
    doc, name = load_topo(topo, src)
    report = run_doctor(doc, only)
    title = _describe(doc, name)

    def table(console):
        from rich.markup import escape
        from rich.table import Table

        c = report["counts"]
        summary = f"{plural(c['error'], 'error')}, {plural(c['warning'], 'warning')}, {c['info']} info"
        if not report["findings"]:
            console.print(f"gpucomm doctor: {title}: no problems found ({len(report['checked'])} rules checked)")
            return
        t = Table(title=f"gpucomm doctor: {title} -- {summary}", show_lines=True, title_justify="left")
        t.add_column("severity", no_wrap=True)
        t.add_column("rule", no_wrap=True)
        t.add_column("subject", no_wrap=True)
        t.add_column("finding and fix")
        for f in report["findings"]:
            t.add_row(f"[{_SEV_STYLE[f['severity']]}]{f['severity']}[/]", f["rule"], f["subject"],
                      f"{f['message']}\nfix: {f['fix']}")
        def lines(c) -> None:   # too narrow for the whole table: one finding per block, no line broken
            for f in report["findings"]:
                c.print(f"[{_SEV_STYLE[f['severity']]}]{f['severity']}[/] {f['rule']} {escape(f['subject'])}")
                c.print(f"  {escape(f['message'])}")
                c.print(f"  fix: {escape(f['fix'])}")

        print_table(console, t, narrow=lines)
        console.print(f"checked: {', '.join(report['checked'])}")

    emit(report, table=table)
    raise typer.Exit(int(ExitCode.DEGRADED) if report["degraded"] else int(ExitCode.OK))


def diff(
    inputs: Optional[List[str]] = typer.Argument(None, metavar="A B [C ...]", help="Two or more topologies (any "
                                                 "TOPO: saved JSON/YAML, snapshot, topo -m capture, NCCL XML, "
                                                 "example:<name>, - for standard input once)."),
    more: Optional[List[str]] = typer.Option(None, "--from", metavar="TOPO", help="One more input (repeatable; "
                                             "the same as a positional one)."),
    all_attrs: bool = typer.Option(False, "--all", help="Table: also list attributes that are equal."),
) -> None:
    """What differs between nodes (GPU models/count, NVLink counts, PCIe width, NICs and rates, NUMA, driver);
    with 3 or more inputs, the odd node out. Exits 0 when identical, 5 when they differ."""
    from gpucomm.planners.health.diff import diff_documents, fingerprint, format_value
    from gpucomm.probes.load import load_topology

    from gpucomm.render.output import emit

    inputs = list(inputs or []) + list(more or [])
    if len(inputs) < 2:
        usage_error(f"diff needs at least two inputs, got {len(inputs)} (gpucomm diff A B [C ...])")
    if inputs.count("-") > 1:
        usage_error("standard input (-) can be read once")
    named = list(zip(short_names(inputs), [load_topology(src) for src in inputs]))
    report = diff_documents(named)

    def table(console):
        from rich.table import Table

        names = [i["name"] for i in report["inputs"]]
        if report["identical"]:
            console.print(f"gpucomm diff: identical ({report['compared']} attributes compared across "
                          f"{len(names)} inputs)")
        rows = report["differences"]
        if all_attrs:
            fps = [fingerprint(d) for _, d in named]
            keys = sorted(set().union(*[f.keys() for f in fps]), key=lambda a: a)
            differing = {r["attribute"] for r in rows}
            rows = [{"attribute": k, "values": [f.get(k) for f in fps], "differs": [], "majority": None,
                     "same": k not in differing} for k in keys]
        if not rows:
            return
        title = f"gpucomm diff: {plural(len(report['differences']), 'difference')}"
        if report["outlier"]:
            title += f"; outlier: {report['outlier']} ({report['counts'][report['outlier']]} attributes differ " \
                     "from the majority)"
        t = Table(title=title, title_justify="left")
        t.add_column("attribute", no_wrap=True)
        for n in names:
            t.add_column(n + (" (outlier)" if n == report["outlier"] else ""))
        if any(r.get("majority") is not None for r in rows):
            t.add_column("majority")
        for r in rows:
            cells = []
            for n, v in zip(names, r["values"]):
                txt = format_value(v)
                cells.append(f"[bold]{txt}[/]" if n in r.get("differs", []) and len(names) > 2 else txt)
            extra = [format_value(r.get("majority"))] if any(x.get("majority") is not None for x in rows) else []
            t.add_row(r["attribute"], *cells, *extra)
        print_table(console, t)

    emit(report, table=table)
    raise typer.Exit(int(ExitCode.OK) if report["identical"] else int(ExitCode.DEGRADED))


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
    app.command("diff")(diff)
