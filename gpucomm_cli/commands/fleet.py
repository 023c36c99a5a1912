"""``gpucomm fleet probe|manifest`` (and the per-node halves ``fleet node``, ``fleet labels``): gather every
node's topology through Slurm (:mod:`gpucomm.probes.fleet`) and end with the fleet doctor/diff
(:func:`gpucomm.planners.fleet.fleet_report`); a Kubernetes DaemonSet publishing labels through NFD
(:func:`gpucomm.planners.launch.k8s.fleet_manifest`)."""
# (no `from __future__ import annotations`: typer would compile every string annotation at start-up)

from pathlib import Path
from typing import List, Optional

import typer

from gpucomm.commands.common import out_directory, usage_error
from gpucomm.exitcodes import ExitCode
from gpucomm.settings import diag

fleet_app = typer.Typer(name="fleet", help="Gather topologies from every node (Slurm) or label every node (Kubernetes).",
                        no_args_is_help=True, rich_markup_mode=None)


def _this_node(sysfs_root: Optional[Path]) -> dict:
    from gpucomm.commands.common import probe_this_node

    return probe_this_node(sysfs_root)


@fleet_app.command("node", hidden=True)
def node(
    name: Optional[str] = typer.Option(None, "--name", help="This node's name (default: $SLURMD_NODENAME, else the host name)."),
    sysfs_root: Optional[Path] = typer.Option(None, "--sysfs-root", help="Read /sys (and /proc) under DIR."),
) -> None:
    """The per-node half of `fleet probe`: probe this node and print its document as framed lines on stdout."""
    import os
    import socket
    import sys

    from gpucomm.probes.errors import GpucommError
    from gpucomm.probes.fleet import frame_document, frame_error
    from gpucomm.probes.model import dumps_json

    me = name or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    try:
        text = dumps_json(_this_node(sysfs_root))
        lines = frame_document(me, text)
    except GpucommError as e:
        lines = [frame_error(me, str(e))]
    except Exception as e:  # a bug on one node must not lose the others' documents
        lines = [frame_error(me, f"internal error: {type(e).__name__}: {e}")]
    for line in lines:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def draw_fleet(rep: dict, console) -> None:
    from gpucomm.render.tables import plural

    console.print(f"gpucomm fleet probe: {plural(len(rep['gathered']), 'node')} gathered into {rep['out_dir']}"
                  + (f"; {plural(len(rep['failed']), 'node')} failed" if rep["failed"] else ""), soft_wrap=True)
    for f in rep["failed"][:50]:
        console.print(f"  failed: {f['node']}: {f['why']}", soft_wrap=True)
    d = rep.get("doctor")
    if d:
        console.print(f"doctor: {d['nodes']} nodes in {len(d['classes'])} class(es) by findings; {d['degraded_nodes']} degraded"
                      + (f"; outliers: {', '.join(d['outliers'][:10])}" if d["outliers"] else ""), soft_wrap=True)
        for c in d["classes"][:10]:
            cnt = c["counts"]
            rules = sorted({f["rule"] for f in c["findings"] if f["severity"] != "info"})
            console.print(f"  class {c['class']}: {c['size']} node(s) ({', '.join(c['members'][:4])}"
                          + (", ..." if len(c["members"]) > 4 else "") + f"): {cnt['error']} error(s), "
                          f"{cnt['warning']} warning(s)" + (f" [{', '.join(rules)}]" if rules else ""), soft_wrap=True)
    df = rep.get("diff")
    if df:
        console.print(f"diff: {len(df['classes']) if df.get('classes') else 1} class(es) of identical nodes"
                      + ("; identical" if df["identical"] else f"; {len(df['differences'])} difference(s)")
                      + (f"; outliers: {', '.join((df.get('outliers') or [df.get('outlier')])[:10])}"
                         if (df.get("outliers") or df.get("outlier")) else ""), soft_wrap=True)
    console.print(f"next: gpucomm cluster {rep['out_dir']} --fabric FABRIC -o cluster.json", soft_wrap=True)


@fleet_app.command("probe")
def probe(
    out_dir: Path = typer.Option(..., "--out-dir", "-d", help="Directory for the documents: one NODE.json per node "
                                 "(written atomically; existing ones kept unless --force)."),
    partition: Optional[str] = typer.Option(None, "--partition", "-p", help="Every responding node of this partition."),
    nodelist: Optional[str] = typer.Option(None, "--nodelist", "-w", help="These nodes (a Slurm hostlist); default: "
                                           "the allocation's (inside salloc/sbatch)."),
    timeout: float = typer.Option(600.0, "--timeout", min=1.0, max=86400.0, help="Seconds to wait for every node; "
                                  "the nodes not heard from by then are reported as timed out."),
    remote: Optional[str] = typer.Option(None, "--gpucomm", metavar="COMMAND", help="How the nodes run gpucomm "
                                         "(default: this Python with -m gpucomm: a shared file system or the same "
                                         "install on every node)."),
    srun_arg: Optional[List[str]] = typer.Option(None, "--srun-arg", help="One more srun option (repeatable), e.g. "
                                                 "--srun-arg=--account=ops."),
) -> None:
    """Gather every node's topology through Slurm (srun, one task per node) into a directory, report the nodes that
    failed or timed out, and end with the fleet doctor and diff. Exits 5 when a node failed or is degraded."""
    import shlex
    import sys

    from gpucomm.planners.fleet import fleet_report
    from gpucomm.probes.errors import InputError
    from gpucomm.probes.files import check_writable
    from gpucomm.probes.fleet import expected_nodes, run_fleet, srun_argv
    from gpucomm.render.output import emit
    from gpucomm.settings import SETTINGS

    import os

    if nodelist is None and partition is None and not os.environ.get("SLURM_JOB_NODELIST"):
        usage_error("outside an allocation give --partition P or --nodelist HOSTS (or run inside salloc/sbatch)")
    out_directory(out_dir)
    expected = expected_nodes(nodelist, partition)
    for n in expected or []:
        check_writable(out_dir / f"{n}.json", SETTINGS.force)
    command = shlex.split(remote) if remote else [sys.executable, "-m", "gpucomm"]
    argv = srun_argv(command + ["fleet", "node"], expected if (nodelist or partition) else None, partition,
                     len(expected) if expected else None, max(1, int(timeout // 60) + 1), srun_arg or [])
    if SETTINGS.verbose:
        diag("gpucomm: running " + " ".join(shlex.quote(a) for a in argv))
    res = run_fleet(argv, expected, str(out_dir), timeout, SETTINGS.force,
                    on_node=lambda n, t: diag(f"gpucomm: {n}: {'document written' if t else 'failed'}") if SETTINGS.verbose else None)
    for line in res["noise"][:20]:
        diag(f"gpucomm: srun: {line}")
    if not res["gathered"] and not res["failed"]:
        raise InputError(f"srun gave no node document (exit {res['returncode']})"
                         + (f": {res['noise'][-1]}" if res["noise"] else ""), expected="a working Slurm and gpucomm on the nodes")
    rep = fleet_report([(n, str(out_dir / f"{n}.json")) for n in sorted(res["gathered"])], res["failed"])
    rep["out_dir"] = str(out_dir)
    emit(rep, table=lambda console: draw_fleet(rep, console), allowed=["table", "json", "yaml"])
    bad = rep["failed"] or (rep.get("doctor") or {}).get("degraded")
    raise typer.Exit(int(ExitCode.DEGRADED) if bad else int(ExitCode.OK))


@fleet_app.command("labels", hidden=True)
def labels(
    node_name: Optional[str] = typer.Option(None, "--node", help="This node's Kubernetes name (the DaemonSet passes "
                                            "spec.nodeName); default: the host name."),
    sysfs_root: Optional[Path] = typer.Option(None, "--sysfs-root", help="Read /sys (and /proc) under DIR (/host in "
                                              "the DaemonSet, where the host's /sys is mounted read-only)."),
    locality: Optional[str] = typer.Option(None, "--locality", metavar="FILE", help="Each node's locality ({node: "
                                           "{leaf, spine, block, nvlink-domain}}), as `fleet manifest --fabric` ships it."),
    gfd_names: bool = typer.Option(True, "--gfd-names/--no-gfd-names", help="Also write GPU Feature Discovery's "
                                   "nvidia.com/gpu.* names (leave them to GFD where it runs)."),
    topo: Optional[str] = typer.Option(None, "--from", metavar="TOPO", help="Label from a saved topology instead of a "
                                       "live probe."),
) -> None:
    """The per-node half of `fleet manifest`: this node's labels as an NFD features.d file (name=value lines)."""
    import socket

    from gpucomm.planners.launch.k8s import feature_file, fleet_labels
    from gpucomm.probes.errors import InputError
    from gpucomm.probes.load import parse_json, read_text_input
    from gpucomm.render.output import write_text

    if topo is not None:
        from gpucomm.probes.load import load_topology

        doc = load_topology(topo)
    else:
        doc = _this_node(sysfs_root)
    me = node_name or socket.gethostname().split(".")[0]
    loc = None
    if locality is not None:
        data = parse_json(read_text_input(locality), locality, "a JSON object {node: {kind: id}}")
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise InputError("not a mapping of nodes to their locality", locality, expected='{"node01": {"leaf": "sw1"}}')
        loc = {str(k): str(v) for k, v in (data.get(me) or {}).items()}
    write_text(feature_file(fleet_labels(doc, loc, gfd_names), me))


@fleet_app.command("manifest")
def manifest(
    image: str = typer.Option("python:3.12-slim", "--image", help="Container image; with --install (default) any "
                              "Python 3.9+ image, else one with gpucomm installed."),
    install: str = typer.Option("", "--install", help="pip requirement installed at start (default: gpucomm==THIS "
                                "VERSION; '-' for none: the image has gpucomm)."),
    namespace: str = typer.Option("gpucomm", "--namespace", "-n", help="Namespace of the DaemonSet."),
    interval: int = typer.Option(3600, "--interval", min=60, max=604800, help="Seconds between probes of a node."),
    fabric_file: Optional[str] = typer.Option(None, "--fabric", metavar="FILE", help="A fabric (ibnetdiscover output, "
                                              "topology.conf, fabric or cluster document): each node also gets its "
                                              "leaf/spine/block/NVLink-domain labels (a ConfigMap)."),
    nvlink_domain: Optional[int] = typer.Option(None, "--nvlink-domain", min=1, help="With --fabric: consecutive groups "
                                                "of K nodes share an NVLink domain."),
    gfd_names: bool = typer.Option(True, "--gfd-names/--no-gfd-names", help="Write GPU Feature Discovery's nvidia.com/gpu.* "
                                   "names too (turn off where GFD runs, so that two writers do not fight)."),
    runtime_class: str = typer.Option("nvidia", "--runtime-class", help="RuntimeClass that mounts the driver's NVML "
                                      "('' for the node's default runtime)."),
) -> None:
    """A Kubernetes DaemonSet (GPU nodes only, host /sys read-only, NVML from the driver) that probes each node and
    publishes labels through Node Feature Discovery's features.d: GFD's names where they overlap, and the locality ids
    (leaf, block, NVLink domain) Kueue levels use. kubectl apply -f the output."""
    from gpucomm import __version__
    from gpucomm.planners.launch.k8s import check_label, fleet_manifest, fleet_manifest_yaml, label_value, locality_label
    from gpucomm.render.output import chosen_format, write_text

    loc = None
    if fabric_file is not None:
        from gpucomm.planners.placement import fabric as pf
        from gpucomm.probes.fabric import load_fabric

        doc = load_fabric(fabric_file)
        pf.require_hosts(doc)
        if nvlink_domain:
            doc = pf.with_nvlink_domains(doc, pf.consecutive_domains(doc, nvlink_domain), f"--nvlink-domain {nvlink_domain}")
        loc = pf.host_locality(doc)
        bad = [p for v in loc.values() for p in (check_label(locality_label(k), label_value(x)) for k, x in v.items()) if p]
        for p in sorted(set(bad))[:5]:
            diag(f"gpucomm: warning: {p}")
    elif nvlink_domain:
        usage_error("--nvlink-domain needs --fabric (the order of the nodes)", "--nvlink-domain")
    req = f"gpucomm=={__version__}" if install == "" else (None if install == "-" else install)
    objs = fleet_manifest(image, req, namespace, interval, loc, gfd_names, runtime_class or None)
    fmt = chosen_format("yaml", ["yaml", "json", "table"])
    if fmt == "json":
        from gpucomm.probes.model import dumps_json

        write_text(dumps_json({"apiVersion": "v1", "kind": "List", "items": objs}))
    else:
        write_text(fleet_manifest_yaml(objs))


def register(app: typer.Typer) -> None:
    app.add_typer(fleet_app, name="fleet")
