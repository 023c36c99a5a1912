"""``gpucomm doctor`` (find degraded links) and ``gpucomm diff`` (compare nodes).

Exit codes: doctor 5 when it finds an error or a warning, 0 when clean or info only; diff 0 when
the nodes are identical, 5 when they differ (``diff(1)`` returns 1, which is gpucomm's
bad-input code).  Bad inputs exit 1 as everywhere else.
"""
# (no `from __future__ import annotations`: typer would compile every string annotation at start-up)

from typing import List, Optional

import typer

from gpucomm.commands.common import LIVE_HELP, TOPO_HELP, from_option, load_topo, usage_error
from gpucomm.exitcodes import ExitCode

_SEV_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _describe(doc: dict, src: Optional[str]) -> str:
    from gpucomm.render.tables import plural
    h = doc.get("host") or {}
    name = src or f"this node ({h.get('hostname') or 'unknown host'})"
    return f"{name}: {plural(len(doc.get('gpus', [])), 'GPU')}, {plural(len(doc.get('nics', [])), 'NIC')}"


def _job_env() -> dict:
    """The NCCL settings a job started from this shell would get (mnnvl-settings judges them)."""
    import os

    return {k: v for k, v in os.environ.items() if k.startswith("NCCL_MNNVL_") or k == "NCCL_CUMEM_ENABLE"}


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
    fleet: Optional[List[str]] = typer.Argument(None, metavar="[TOPO ...]", show_default=False,
                                                help=TOPO_HELP + LIVE_HELP + " Several: one fleet report, nodes "
                                                "grouped by their findings, the outliers named."),
    src: Optional[str] = from_option(),
    rules: Optional[str] = typer.Option(None, "--rules", help="Comma list of rules to run (default: all): "
                                        "pcie-downtrained, nvlink-inactive, ib-port-down, ib-rate-low, "
                                        "nic-numa-mismatch, p2p-blocked, cpu-affinity-mismatch, measured-bw-low, "
                                        "mig-enabled, matrix-asymmetric, gpu-driver, fabric-state, fabric-health, fabric-clique, "
                                        "nvlink-tray-down, imex-domain, mnnvl-settings."),
) -> None:
    """Find degraded or misconfigured links: PCIe down-trained, NVLink down, IB ports down or slow, GPU/NIC
    NUMA mismatches, ACS/IOMMU blocking P2P, MIG; on multi-node NVLink trays the fabric state and health,
    cliques, the IMEX domain and NCCL_MNNVL_* settings. Exits 5 when it finds errors or warnings."""
    from gpucomm.render.tables import plural, print_table
    from gpucomm.planners.health.doctor import parse_rules, run_doctor

    from gpucomm.render.output import emit

    only = parse_rules(rules)
    if fleet and (len(fleet) > 1 or src):
        inputs = ([src] if src else []) + list(fleet)
        if inputs.count("-") > 1:
            usage_error("standard input (-) can be read once")
        return doctor_many(inputs, only)
    doc, name = load_topo(fleet[0] if fleet else None, src)
    report = run_doctor(doc, only, env=_job_env())
    title = _describe(doc, name)

    def table(console):
        from rich.markup import escape
        from gpucomm.render.plain import Table, print_prose

        c = report["counts"]
        summary = f"{plural(c['error'], 'error')}, {plural(c['warning'], 'warning')}, {c['info']} info"
        skipped = report.get("not_checked") or []
        not_checked = "not checked: " + "; ".join(f"{n['rule']} ({n['reason']})" for n in skipped)
        if not report["findings"]:
            print_prose(console, f"gpucomm doctor: {title}: no problems found by the "
                                 f"{plural(len(report['checked']), 'rule')} checked"
                                 + (f"; {len(skipped)} could not run" if skipped else ""))
            if skipped:
                print_prose(console, not_checked, rest="  ")
            return
        t = Table(title=f"gpucomm doctor: {title} -- {summary}", show_lines=True, title_justify="left")
        t.add_column("severity", no_wrap=True)
        t.add_column("rule", no_wrap=True)
        t.add_column("subject", no_wrap=True)
        t.add_column("finding and fix")
        for f in report["findings"]:
            t.add_row(f"[{_SEV_STYLE[f['severity']]}]{f['severity']}[/]", f["rule"], f["subject"],
                      f"{f['message']}\nfix: {f['fix']}")
        def lines(c) -> None:   # too narrow for the whole table: one finding per block, prose wrapped
            for f in report["findings"]:
                c.print(f"[{_SEV_STYLE[f['severity']]}]{f['severity']}[/] {f['rule']} {escape(f['subject'])}")
                print_prose(c, f["message"], "  ")
                print_prose(c, f["fix"], "  fix: ", "       ")

        print_table(console, t, narrow=lines)
        print_prose(console, f"checked: {', '.join(report['checked'])}", rest="  ")
        if skipped:
            print_prose(console, not_checked, rest="  ")

    emit(report, table=table)
    raise typer.Exit(int(ExitCode.DEGRADED) if report["degraded"] else int(ExitCode.OK))


def doctor_many(inputs: List[str], only: Optional[list]) -> None:
    """``gpucomm doctor A B C ...``: the fleet report (gpucomm.doctor-fleet/v1), streamed over the inputs."""
    from gpucomm.planners.health.doctor import doctor_sources

    from gpucomm.render.output import emit

    report = doctor_sources(zip(short_names(inputs), inputs), only, env=_job_env())

    def table(console):
        from gpucomm.render.plain import Table

        classes = report["classes"]
        bad = report["degraded_nodes"]
        console.print(f"gpucomm doctor: {report['nodes']} nodes in {len(classes)} class(es) by findings; "
                      f"{bad} degraded, {report['nodes'] - bad} without errors or warnings", soft_wrap=True)
        if report["outliers"]:
            out = report["outliers"]
            console.print("outliers: " + ", ".join(out[:20]) + (f", ... ({len(out)})" if len(out) > 20 else ""),
                          soft_wrap=True)
        for c in classes[:20]:
            m = c["members"]
            cnt = c["counts"]
            console.print(f"class {c['class']}: {c['size']} node(s): " + ", ".join(m[:4])
                          + (f", ... ({len(m)})" if len(m) > 4 else "")
                          + f" -- {cnt['error']} error(s), {cnt['warning']} warning(s), {cnt['info']} info",
                          soft_wrap=True)
        if len(classes) > 20:
            console.print(f"... {len(classes) - 20} more classes (--format json lists every one)")
        t = Table(title="findings by class", show_lines=True, title_justify="left")
        for col in ("class", "severity", "rule", "subject", "finding and fix"):
            t.add_column(col, no_wrap=col != "finding and fix")
        for c in classes[:20]:
            for f in c["findings"]:
                t.add_row(f"{c['class']} ({c['size']})", f"[{_SEV_STYLE[f['severity']]}]{f['severity']}[/]",
                          f["rule"], f["subject"], f"{f['message']}\nfix: {f['fix']}")
        if t.row_count:
            console.print(t)
        for f in report.get("fleet_findings") or []:
            console.print(f"[{_SEV_STYLE[f['severity']]}]{f['severity']}[/] {f['rule']} {f['subject']} (across nodes): "
                          f"{f['message']}\n  fix: {f['fix']}", soft_wrap=True)
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
    from gpucomm.render.tables import plural, print_table
    from gpucomm.planners.health.diff import diff_sources, format_value

    from gpucomm.render.output import emit

    inputs = list(inputs or []) + list(more or [])
    if len(inputs) < 2:
        usage_error(f"diff needs at least two inputs, got {len(inputs)} (gpucomm diff A B [C ...])")
    if inputs.count("-") > 1:
        usage_error("standard input (-) can be read once")
    fps: list = []   # each input's fingerprint, one object per class of identical inputs
    report = diff_sources(zip(short_names(inputs), inputs), fingerprints=fps if all_attrs else None)

    def table(console):
        from gpucomm.render.plain import Table

        names = [i["name"] for i in report["inputs"]]
        if len(names) > CLASS_VIEW_INPUTS:
            draw_diff_classes(report, console, fps if all_attrs else None)
            return
        if report["identical"]:
            console.print(f"gpucomm diff: identical ({report['compared']} attributes compared across "
                          f"{len(names)} inputs)")
        rows = report["differences"]
        if all_attrs:
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


CLASS_VIEW_INPUTS = 8    # more inputs than this: one column per class of identical nodes
CLASS_COLUMNS = 8


def draw_diff_classes(report: dict, console, fps: Optional[list] = None) -> None:
    """The diff table of a fleet: identical inputs grouped into classes (largest first), one column
    per class, and the outliers named."""
    from gpucomm.render.plain import Table

    from gpucomm.planners.health.diff import format_value

    names = [i["name"] for i in report["inputs"]]
    index = {n: i for i, n in enumerate(names)}
    classes = report["classes"]
    shown = classes[:CLASS_COLUMNS]

    def members(c: dict) -> str:
        m = c["members"]
        return ", ".join(m[:4]) + (f", ... ({len(m)})" if len(m) > 4 else "")

    head = f"gpucomm diff: {len(names)} inputs in {len(classes)} class(es) of identical nodes"
    if report["identical"]:
        console.print(f"{head}: identical ({report['compared']} attributes compared)")
    else:
        out = report["outliers"]
        console.print(f"{head}; {len(report['differences'])} difference(s); "
                      + (f"outliers: {', '.join(out[:20])}" + (f", ... ({len(out)})" if len(out) > 20 else "")
                         if out else "no single majority class"), soft_wrap=True)
    for c in classes[:20]:
        why = f" -- departs from the majority in {len(c['departs'])} attribute(s)" if c["departs"] else ""
        console.print(f"class {c['class']}: {c['size']} input(s): {members(c)}{why}", soft_wrap=True)
    if len(classes) > 20:
        console.print(f"... {len(classes) - 20} more classes (--format json lists every one)")
    rows = [(r["attribute"], r["values"], r["majority"]) for r in report["differences"]]
    if fps is not None:
        rows = []
        for k in sorted(set().union(*[f.keys() for f in fps])):
            rows.append((k, [f.get(k) for f in fps], None))
    if not rows:
        return
    t = Table(title=f"attributes by class{'' if len(shown) == len(classes) else f' (first {len(shown)} classes)'}",
              title_justify="left")
    t.add_column("attribute", no_wrap=True)
    for c in shown:
        t.add_column(f"class {c['class']} ({c['size']})")
    majority = any(m is not None for _, _, m in rows)
    if majority:
        t.add_column("majority")
    for attr, values, maj in rows:
        cells = [format_value(values[index[c["members"][0]]]) for c in shown]
        t.add_row(attr, *cells, *([format_value(maj)] if majority else []))
    console.print(t)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
    app.command("diff")(diff)
