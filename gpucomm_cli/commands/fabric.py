"""``gpucomm fabric FILE``: the cluster's switch fabric from ibnetdiscover/iblinkinfo/ibswitches output (or
a Slurm topology, or a saved fabric/cluster document): read by :func:`gpucomm.probes.fabric.load_fabric`,
written for the schedulers by :mod:`gpucomm.planners.placement.fabric` and :mod:`gpucomm.planners.launch.k8s`."""
# (no `from __future__ import annotations`: typer would compile every string annotation at start-up)

from typing import Optional

import typer

from gpucomm.commands.common import usage_error
from gpucomm.settings import diag

EMITS = ("slurm", "slurm-tree", "slurm-block", "slurm-yaml", "kueue", "cluster")


def _g(x) -> str:
    return "-" if x is None else f"{x:g}"


def draw_fabric(doc: dict, console) -> None:
    from gpucomm.render.plain import Table
    from gpucomm.render.tables import plural, print_table

    src = doc.get("source") or {}
    lv = ", ".join(plural(l["switches"], l["role"], "leaves" if l["role"] == "leaf" else "") for l in doc.get("levels") or [])
    console.print(f"gpucomm fabric: {src.get('path') or 'fabric'} ({'+'.join(src.get('formats') or []) or 'document'}): "
                  f"{plural(len(doc['hosts']), 'host')}, {lv or 'no switch'}"
                  + (f"; {plural(len({o['id'] for o in doc['others']}), 'other CA')} not taken for hosts"
                     if doc.get("others") else "")
                  + ("; rail-optimised" if (doc.get("rails") or {}).get("rail_optimised") else ""), soft_wrap=True)
    if doc["switches"]:
        t = Table(title="Switches")
        for c in ("switch", "role", "hosts", "to hosts Gb/s", "uplinks Gb/s", "oversubscription", "description"):
            t.add_column(c)
        for s in sorted(doc["switches"], key=lambda s: (-(s["level"] or 0), s["name"])):
            t.add_row(s["name"], s["role"], str(s["hosts"]), _g(s.get("down_gbps")), _g(s.get("up_gbps")),
                      f"{s['oversubscription']:g}:1" if s.get("oversubscription") else "-", s.get("description") or "-")
        print_table(console, t)
    if doc.get("tree"):
        t = Table(title="Switch tree (what Slurm and Kueue get)")
        for c in ("tree switch", "level", "switches", "children"):
            t.add_column(c)
        for r in doc["tree"]:
            from gpucomm.probes.formats.slurm_topology import compress_hostlist

            kids = compress_hostlist(r["switches"]) if r.get("switches") else compress_hostlist(r["nodes"]) if r.get("nodes") else "-"
            t.add_row(r["name"], str(r.get("level")), str(len(r.get("members") or [r["name"]])), kids)
        print_table(console, t)
    rails = (doc.get("rails") or {}).get("rails") or []
    if len(rails) > 1:
        t = Table(title="Rails (HCA -> leaves)")
        for c in ("HCA", "hosts", "leaves"):
            t.add_column(c)
        for r in rails:
            t.add_row(r["hca"], str(r["hosts"]), ", ".join(r["leaves"]))
        print_table(console, t)
    if doc.get("blocks"):
        t = Table(title="Blocks" + (f" (BlockSizes={','.join(map(str, doc['block_sizes']))})" if doc.get("block_sizes") else ""))
        for c in ("block", "nodes", "NVLink domain"):
            t.add_column(c)
        from gpucomm.probes.formats.slurm_topology import compress_hostlist

        for b in doc["blocks"]:
            t.add_row(b["name"], compress_hostlist(b["nodes"]), b.get("nvlink_domain") or "-")
        print_table(console, t)
    if doc.get("findings"):
        t = Table(title="Findings", show_lines=True)
        for c in ("severity", "rule", "subject", "finding and fix"):
            t.add_column(c)
        for f in doc["findings"]:
            t.add_row(f["severity"], f["rule"], f["subject"], f"{f['message']}\nfix: {f['fix']}")
        print_table(console, t)
    console.print("  --emit " + " | ".join(EMITS))


def fabric(
    src: str = typer.Argument(..., metavar="FILE", help="ibnetdiscover [-p], iblinkinfo or ibswitches/ibhosts output "
                              "(any mix, prompts included), a Slurm topology.conf or `scontrol show topology` output, "
                              "Kubernetes node labels (kubectl get nodes -o json|yaml, kubectl describe nodes), "
                              "or a gpucomm fabric/cluster document; detected by content."),
    emit: Optional[str] = typer.Option(None, "--emit", help="Print one artefact: slurm (topology.conf: block where "
                                       "NVLink domains are known, else tree), slurm-tree, slurm-block, slurm-yaml "
                                       "(topology.yaml), kueue (Kueue Topology + NFD NodeFeature labels), cluster "
                                       "(a cluster file for plan --cluster, JSON)."),
    nvlink_domain: Optional[int] = typer.Option(None, "--nvlink-domain", min=1, help="Consecutive groups of K hosts "
                                                "(in switch-tree order) share one NVLink domain (NVL72: 18 trays)."),
    block_sizes: Optional[str] = typer.Option(None, "--block-sizes", help="Slurm BlockSizes for slurm-block/"
                                              "slurm-yaml, e.g. 18,36 (default: the smallest block)."),
    node: Optional[str] = typer.Option(None, "--node", metavar="TOPO", help="--emit cluster: the topology of every "
                                       "node (else plan's TOPO gives it)."),
) -> None:
    """The cluster's switch fabric: switch levels, hosts and their HCAs/rails, degraded links; Slurm topology (tree,
    block, topology.yaml), Kueue topology, or a cluster file. Exits 3 for a capture with no switch."""
    from gpucomm.planners.placement import fabric as pf
    from gpucomm.probes.errors import InputError
    from gpucomm.probes.fabric import load_fabric
    from gpucomm.render.output import emit as emit_doc
    from gpucomm.render.output import write_text

    if emit is not None and emit not in EMITS:
        usage_error(f"{emit!r} is not one of {', '.join(EMITS)}", "--emit")
    sizes = None
    if block_sizes is not None:
        try:
            sizes = [int(x) for x in block_sizes.split(",")]
        except ValueError:
            usage_error(f"{block_sizes!r} is not a list of numbers, e.g. 18,36", "--block-sizes")
        if not sizes or any(s < 1 for s in sizes):
            usage_error(f"{block_sizes!r}: sizes must be >= 1", "--block-sizes")
    doc = load_fabric(src)
    pf.require_hosts(doc)
    if nvlink_domain is not None:
        doc = pf.with_nvlink_domains(doc, pf.consecutive_domains(doc, nvlink_domain), f"--nvlink-domain {nvlink_domain}")
    if sizes is not None:
        if not doc.get("blocks"):
            raise InputError("--block-sizes needs blocks: NVLink domains (--nvlink-domain K, or node documents with the "
                             "GPUs' fabric info) or a block topology")
        pf.check_block_sizes(sizes, doc["blocks"])
        doc = dict(doc, block_sizes=sizes)
    if emit is not None:
        if emit == "cluster":
            from gpucomm.probes.model import dumps_json

            text = dumps_json(pf.cluster_file(doc, node))   # JSON: it holds the whole fabric (YAML reads slowly)
        elif emit == "kueue":
            from gpucomm.planners.launch.k8s import kueue_document, kueue_yaml
            from gpucomm.render.output import chosen_format

            if chosen_format("yaml", ["yaml", "json"]) == "json":
                from gpucomm.probes.model import dumps_json

                text = dumps_json(kueue_document(pf.host_locality(doc), native=pf.native_labels(doc)))
            else:
                text = kueue_yaml(pf.host_locality(doc), native=pf.native_labels(doc))
        else:
            text = {"slurm": pf.slurm, "slurm-tree": pf.slurm_tree, "slurm-block": pf.slurm_blocks,
                    "slurm-yaml": pf.slurm_yaml}[emit](doc)
        write_text(text if text.endswith("\n") else text + "\n")
    else:
        emit_doc(doc, table=lambda console: draw_fabric(doc, console), allowed=["table", "json", "yaml"])
    for w in doc.get("warnings") or []:
        diag(f"gpucomm: warning: {src}: {w}")


def register(app: typer.Typer) -> None:
    app.command("fabric")(fabric)
