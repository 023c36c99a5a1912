"""``gpucomm probe``, ``show``, ``snapshot``, ``examples``: discovery and its rendering."""
# (no `from __future__ import annotations`: typer would compile every string annotation at start-up)

import sys
from pathlib import Path
from typing import Optional

import typer

from gpucomm.commands.common import from_option, load_topo, topo_argument
from gpucomm.settings import SETTINGS, diag

TOPO_FORMATS = ["table", "json", "yaml", "matrix", "tree", "dot", "nccl-xml", "k8s-labels", "nfd"]
ALL_SOURCES = ("nvml", "smi", "sysfs", "ib", "net", "numa")  # for --help; gpucomm.probes.sources.probe validates


def _render_topology(doc: dict) -> None:
    from gpucomm.probes.model import finalize

    from gpucomm.render.output import emit

    finalize(doc)

    def render_topo():  # lazy: only table/matrix/tree/dot need rich
        from gpucomm.render import topology as rt

        return rt

    def nccl_xml() -> str:
        from gpucomm.probes.formats.nccl_xml import export_nccl_xml

        return export_nccl_xml(doc)

    emit(
        doc,
        table=lambda console: render_topo().summary_table(doc, console),
        extra={
            "matrix": lambda: render_topo().matrix_text(doc),
            "tree": lambda: _capture(lambda c: render_topo().tree(doc, c)),
            "dot": lambda: render_topo().dot(doc),
            "nccl-xml": nccl_xml,
            "k8s-labels": lambda: _k8s().labels_json(doc),
            "nfd": lambda: _k8s().nfd_feature_file(doc),
        },
        allowed=TOPO_FORMATS,
    )
    for w in doc.get("warnings", []):
        diag(f"gpucomm: warning: {w}")


def _k8s():
    from gpucomm.planners.launch import k8s

    return k8s


def _capture(draw) -> str:
    import io

    from gpucomm.render.console import make_console

    buf = io.StringIO()
    draw(make_console(buf))
    return buf.getvalue()


def probe(
    topo: Optional[str] = topo_argument(),
    src: Optional[str] = from_option(),
    sources: Optional[str] = typer.Option(None, "--sources", help="Comma list of sources to use: "
                                          + ",".join(ALL_SOURCES) + " (default: all available)."),
    sysfs_root: Optional[Path] = typer.Option(None, "--sysfs-root", help="Read /sys (and /proc) under DIR."),
) -> None:
    """Discover this node (or replay TOPO) and print the topology.

    Formats: table (default), json, yaml, matrix (nvidia-smi layout), tree (PCIe hierarchy), dot,
    nccl-xml, k8s-labels (Kubernetes node labels, JSON), nfd (a Node Feature Discovery feature file)."""
    from gpucomm.commands.common import pick_source

    chosen = pick_source(topo, src)
    if chosen:
        from gpucomm.probes.load import load_topology

        doc = load_topology(chosen)
    else:
        from gpucomm.probes.sources.host import Host
        from gpucomm.probes.sources.probe import probe_host

        host = Host(root=sysfs_root) if sysfs_root else Host()
        if sysfs_root and not sysfs_root.is_dir():
            from gpucomm.probes.errors import InputError

            raise InputError("not a directory", str(sysfs_root), expected="a directory holding sys/")
        if sysfs_root:
            host.provenance = "snapshot"
        doc = probe_host(host, sources)  # validates --sources (gpucomm.probes.sources.probe.parse_sources)
    _render_topology(doc)


def show(
    topo: Optional[str] = topo_argument(),
    src: Optional[str] = from_option(),
) -> None:
    """Render a topology as table, matrix, tree, dot, json, yaml, nccl-xml, k8s-labels or nfd."""
    doc, _ = load_topo(topo, src)
    _render_topology(doc)


def snapshot(
    out: Optional[str] = typer.Argument(None, metavar="OUT", help="Output .tar.gz or directory (or use -o)."),
    sysfs_root: Optional[Path] = typer.Option(None, "--sysfs-root", help="Record from DIR instead of /."),
) -> None:
    """Record this node's raw inputs (sysfs subset, NVML dump, nvidia-smi outputs) for offline replay."""
    from gpucomm.probes.errors import InputError
    from gpucomm.probes.sources.host import Host
    from gpucomm.probes.sources.snapshot import write_snapshot

    target = out or SETTINGS.output
    if not target:
        raise InputError("snapshot needs an output path", expected="gpucomm snapshot -o node.tar.gz (- for stdout)")
    if target == "-" and sys.stdout.isatty():
        raise InputError("will not write a .tar.gz to a terminal", "-", expected="-o FILE.tar.gz, or - with stdout redirected")
    if sysfs_root and not sysfs_root.is_dir():
        raise InputError("not a directory", str(sysfs_root), expected="a directory holding sys/")
    host = Host(root=sysfs_root) if sysfs_root else Host()
    res = write_snapshot(host, target, force=SETTINGS.force)
    if target == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(res["data"])
        sys.stdout.buffer.flush()
    where = "standard output" if str(res["path"]) == "-" else res["path"]
    diag(f"gpucomm: snapshot written to {where} ({res.get('files', 0)} files, {res.get('bytes', 0)} bytes)")


def examples() -> None:
    """List the bundled example machines (use them as example:<name>) and the real captures shipped
    with them (example:<file name>, wherever a file is read: --compare, calibrate's runs, TOPO)."""
    from gpucomm.render.tables import print_table
    from gpucomm.probes.examples import example_meta, list_captures, list_examples

    from gpucomm.render.output import emit

    rows = []
    for name, path in list_examples().items():
        meta = example_meta(path)
        rows.append({"name": f"example:{name}", "description": meta.get("description", ""),
                     "capture": meta.get("capture")})
    captures = [{"name": f"example:{name}", "path": str(path)} for name, path in list_captures().items()]

    def table(console):
        from gpucomm.render.plain import Table

        t = Table(title="bundled example machines", show_lines=False)
        t.add_column("name", style="bold")
        t.add_column("description")
        for r in rows:
            t.add_row(r["name"], r["description"])
        print_table(console, t, prose=("description",))
        if captures:
            c = Table(title="real captures (nvidia-smi topo -m, nccl-tests, ibnetdiscover): show, --compare, calibrate, fabric",
                      show_lines=False)
            c.add_column("name", style="bold")
            c.add_column("file")
            for r in captures:
                c.add_row(r["name"], r["path"])
            print_table(console, c)

    emit({"schema": "gpucomm.examples/v1", "examples": rows, "captures": captures}, table=table)


def register(app: typer.Typer) -> None:
    app.command("probe")(probe)
    app.command("show")(show)
    app.command("snapshot")(snapshot)
    app.command("examples")(examples)
