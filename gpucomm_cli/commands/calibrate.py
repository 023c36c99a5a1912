"""``gpucomm calibrate TOPO RUN.log [RUN.log ...] -o PROFILE.json``: fit the physical parameters NCCL's
tuning model cannot know from the user's own nccl-tests (or ``gpucomm bench``) runs
(:mod:`gpucomm.planners.collectives.calibrate`), and the ``--calibration PROFILE.json`` reader
``predict``, ``plan`` and ``rings`` share."""

from typing import List, Optional

import typer

from gpucomm.commands.common import gpu_option, nvlink_domain_option
from gpucomm.settings import SETTINGS, diag


def read_calibration(path: str) -> dict:
    """The ``gpucomm.calibration/v1`` document at ``path`` (checked: one-line InputError otherwise)."""
    from gpucomm.planners.collectives.calibrate import profile_from_document
    from gpucomm.probes.load import parse_json, read_text_input

    text = read_text_input(path)
    doc = parse_json(text, path, expected="a calibration profile written by gpucomm calibrate")
    profile_from_document(doc, path)   # raises on anything that is not a usable profile
    return doc


def read_run_texts(paths: List[str]) -> list:
    """(path, nccl-tests text) per input: nccl-tests/rccl-tests output as it is, a ``gpucomm bench
    collective --format json`` result rendered as the nccl-tests table it stands for."""
    from gpucomm.planners.measure.results import SCHEMA as BENCH_SCHEMA
    from gpucomm.render.bench import render_collective_table
    from gpucomm.probes.errors import InputError
    from gpucomm.probes.load import parse_json, read_text_input

    out = []
    for p in paths:
        text = read_text_input(p)
        if text.lstrip().startswith("{"):
            try:   # bounded: depth, digits (probes/parse.py)
                doc = parse_json(text, p, expected="gpucomm bench collective --format json output, or nccl-tests output")
            except InputError:
                doc = None
            if isinstance(doc, dict) and doc.get("schema") == BENCH_SCHEMA:
                if doc.get("kind") != "collective":
                    raise InputError(f"a gpucomm bench {doc.get('kind')} result has no collective sweep", p,
                                     expected="gpucomm bench collective --format json output, or nccl-tests output")
                text = render_collective_table(doc)
        out.append((p, text))
    return out


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def calibration_text(doc: dict, width: Optional[int] = None) -> str:
    """The human summary of a calibration: parameters (fitted or default), each run's residual, notes
    (``width``: the output's columns; prose wraps, run names never break)."""
    m = doc.get("machine") or {}
    lines = [f"# gpucomm calibrate: {doc['topology']} ({m.get('gpus')} x {m.get('gpu')}, {m.get('nics')} NICs), "
             f"{doc['residual'].get('runs')} run(s), {doc['residual'].get('sizes')} sizes; median |time error| "
             f"{_fmt(doc['residual'].get('median_abs_time_error_pct'))}% (on the runs fitted: the fit, not a prediction)",
             "#", f"# {'parameter':24} {'value':>12}  source"]
    for k, v in doc["parameters"].items():
        lines.append(f"  {k:24} {_fmt(v):>12}  {'fitted' if k in doc['fitted'] else 'default'}")
    # the run names stay whole (a path someone copies): the column is as wide as the longest, and a
    # row wider than the output puts the name on a line of its own
    srcs = [f"{r['source']}:{r['line']}" for r in doc["runs"]]
    w = max([len(s) for s in srcs] + [3])
    own_line = width is not None and 2 + w + 48 > width
    head = f"{'coll':14} {'nodes':>5} {'gpn':>3} {'sizes':>5} {'largest':>8} {'med>=1MiB':>9}"
    lines += ["#", "# run", f"#     {head}"] if own_line else ["#", f"# {'run':{w}} {head}"]
    for src, r in zip(srcs, doc["runs"]):
        cells = (f"{r['collective']:14} {r['nodes']:>5} {r['gpus_per_node']:>3} {r['sizes']:>5} "
                 f"{_fmt(r['largest_error_pct']):>8} {_fmt(r['median_abs_error_pct_ge_1MiB']):>9}")
        lines += [f"  {src}", f"      {cells}"] if own_line else [f"  {src:{w}} {cells}"]
    for n in doc.get("notes") or []:
        lines.append(f"# note: {n}")
    return "\n".join(lines) + "\n"


def calibrate(
    topo: str = typer.Argument(..., help="Topology of one node of the measured machine: a saved topology, "
                               "snapshot, nvidia-smi topo -m output, NCCL topology XML, or example:<name>."),
    runs: List[str] = typer.Argument(..., help="nccl-tests/rccl-tests outputs (however launched: srun/mpirun "
                                     "labels and NCCL INFO lines are skipped), or gpucomm bench collective --format "
                                     "json results.  Runs at several node counts let the fit see fabric congestion."),
    collective: Optional[str] = typer.Option(None, "--collective", "-c", help="Only these runs / the collective of "
                                             "tables that do not say (default: every run, its own collective)."),
    nodes: Optional[int] = typer.Option(None, "--nodes", "-N", help="Nodes of every run (default: from each "
                                        "file's hosts and ranks)."),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", "-g", help="GPUs per node of every run "
                                                "(default: from the file)."),
    nvlink_domain: Optional[int] = nvlink_domain_option(),
    fabric_gbps: Optional[float] = typer.Option(None, "--fabric-gbps", help="What one NIC delivers, in Gb/s, "
                                                "when the topology has no NIC (see predict --fabric-gbps)."),
    gpu: Optional[str] = gpu_option(),
) -> None:
    """Fit a calibration profile (gpucomm.calibration/v1) from measured runs: the per-NIC rate, the all_to_all
    and point-to-point efficiencies, fabric congestion over node counts, intra-node efficiencies, NCCL's latency
    scaled, a latency per network step and per ring step, the LL/LL128 efficiencies and the pipeline ramp of
    mid sizes. NCCL's tuning model still picks every algorithm; the profile says how long it takes (and, on
    GH200/GB200, whether the NCCL that ran uses LL128 across nodes: NCCL before 2.27 does not).

    Formats: table (summary; default on a terminal), json (the profile; default with -o FILE), yaml.
    Use the profile with predict/plan/rings --calibration PROFILE.json (docs/CALIBRATION.md)."""
    from gpucomm.commands.common import flag_value, gpu_note_line, max_nodes, nvlink_domain_value, with_gpu_model
    from gpucomm.planners.collectives.calibrate import SETUP_WARNING, build_calibration
    from gpucomm.probes.load import load_topology
    from gpucomm.probes.units import MAX_FABRIC_GBPS
    from gpucomm.render.output import emit, text_width, wrap_comment_lines

    flag_value("--nodes", nodes, lo=1, hi=max_nodes())
    flag_value("--gpus-per-node", gpus_per_node, lo=1)
    flag_value("--fabric-gbps", fabric_gbps, above=0, hi=MAX_FABRIC_GBPS)
    nvlink_domain_value(nvlink_domain, nodes)
    doc = with_gpu_model(load_topology(topo), gpu)
    if nodes is not None:   # else each run's ranks say how many
        nvlink_domain_value(nvlink_domain, nodes, doc)
    texts = read_run_texts(runs)
    cal = build_calibration(doc, texts, topo, collective=collective, nodes=nodes, gpus_per_node=gpus_per_node,
                            fabric_gbps=fabric_gbps, nvlink_domain=nvlink_domain)
    default = "json" if SETTINGS.output and SETTINGS.output != "-" else "table"
    note = gpu_note_line(doc, "# ")
    emit(cal, extra={"table": lambda: wrap_comment_lines((note + "\n" if note else "")
                                                         + calibration_text(cal, text_width()))},
         allowed=["table", "json", "yaml"], default=default)
    if default == "json" and (SETTINGS.format or "json") == "json":
        diag(f"gpucomm: calibration of {len(cal['runs'])} run(s) written to {SETTINGS.output} (fitted: "
             f"{', '.join(cal['fitted'])}; median |time error| on those runs "
             f"{_fmt(cal['residual'].get('median_abs_time_error_pct'))}%)")
    for n in cal.get("notes") or []:
        if n.startswith(SETUP_WARNING):     # calibrate.setup_warning: always said
            diag(f"gpucomm: warning: {n}")
        else:
            diag(f"gpucomm: note: {n}", verbose_only=True)


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)
