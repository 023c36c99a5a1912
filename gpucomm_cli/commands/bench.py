"""``gpucomm bench p2p|collective``: measure with torch.distributed (docs/ARCHITECTURE.md).

torch is an optional extra (``pip install 'gpucomm[bench]'``) and is imported only when a benchmark
actually runs, so ``gpucomm --help`` stays light.

One node: ``gpucomm bench collective --nproc 8`` starts 8 workers with torch.multiprocessing
(spawn, FileStore rendezvous in a private temporary directory).  Several nodes: run gpucomm under
the launcher you already use; it reads RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR from the environment
and only rank 0 prints::

    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST0:29500 \\
        --no-python gpucomm bench collective --sizes 1MiB:8GiB
    torchrun ... -m gpucomm_cli bench collective            # the same, through python -m
    export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
    srun --ntasks-per-node 8 --gpus-per-node 8 gpucomm bench collective
"""
# (no `from __future__ import annotations`: typer would compile every string annotation at start-up)

import sys
from typing import Optional

import typer

from gpucomm.commands.common import flag_value
from gpucomm.settings import SETTINGS, diag

bench_app = typer.Typer(
    name="bench",
    help="Measure with torch.distributed: p2p bandwidth/latency matrix, or an nccl-tests style collective table. "
         "Needs torch (pip install 'gpucomm[bench]').",
    epilog="One node: --nproc N starts N workers (torch.multiprocessing spawn). Several nodes: run under your "
           "launcher, which sets RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR, e.g. `torchrun --nnodes 2 --nproc-per-node 8 "
           "--rdzv-backend c10d --rdzv-endpoint HOST0:29500 --no-python gpucomm bench collective`, or "
           "`srun --ntasks-per-node 8 gpucomm bench collective` with MASTER_ADDR exported; only rank 0 prints.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


def _progress_enabled() -> bool:
    return not SETTINGS.quiet and hasattr(sys.stderr, "isatty") and sys.stderr.isatty()


def _emit_result(result: dict, render) -> None:
    from gpucomm.render.output import emit

    emit(result, extra={"table": lambda: render(result)}, allowed=["table", "json", "yaml"])


def _check_save(path: Optional[str]) -> None:
    """Refuse a --save target before the benchmark runs, not after."""
    if path:
        _read_save_target(path)


def _read_save_target(path: str):
    """(document or None when PATH does not exist, as_yaml) -- refusing what --save cannot update."""
    from pathlib import Path

    from gpucomm.probes.errors import InputError
    from gpucomm.probes.files import check_writable

    p = Path(path)
    if p.is_symlink():
        raise InputError("is a symbolic link; not followed", path, expected="the topology file itself")
    if not p.exists():
        check_writable(path)
        return None, False
    from gpucomm.probes.load import detect_kind, load_saved, read_text_input

    if p.is_dir():
        raise InputError("--save needs a topology file, not a directory", path,
                         expected="a JSON/YAML topology (gpucomm probe --format json -o topo.json)")
    text = read_text_input(path)
    kind = detect_kind(text)
    if kind not in ("json", "yaml"):
        raise InputError("--save can only update a saved topology document", path,
                         expected="JSON/YAML from `gpucomm probe --format json -o FILE`")
    from gpucomm.probes.errors import report
    from gpucomm.probes.validate import validate_document

    repaired: list = []
    doc = validate_document(load_saved(text, path, kind), path, saved=True,
                            report=report if SETTINGS.force else repaired.append)
    if repaired:
        # rewriting it would drop what reading had to repair or leave out: the user's data, lost
        first = repaired[0][len(path) + 2:] if repaired[0].startswith(path + ": ") else repaired[0]
        more = f" (and {len(repaired) - 1} more)" if len(repaired) > 1 else ""
        raise InputError(f"--save would rewrite it without what reading had to repair: {first}{more}", path,
                         expected="a topology document that reads without warnings, or --force to save anyway")
    return doc, kind == "yaml"


def _save(path: str, result: dict) -> None:
    """Merge ``result`` into the topology at PATH (created from a live probe when it does not exist)."""
    from gpucomm.planners.measure.save import apply_measurements
    from gpucomm.probes.files import write_atomic
    from gpucomm.probes.model import dumps_json, dumps_yaml, finalize

    doc, as_yaml = _read_save_target(path)
    if doc is None:
        from gpucomm.probes.sources.host import Host
        from gpucomm.probes.sources.probe import probe_host

        doc = probe_host(Host())
    doc, notes = apply_measurements(doc, result)
    finalize(doc)
    # --save updates the file it read: replaced atomically (a failed write leaves it as it was)
    write_atomic(path, dumps_yaml(doc) if as_yaml else dumps_json(doc), force=True, updates_input=True)
    for n in notes:
        diag(f"gpucomm: {n} in {path}")


def _torch_missing(e: Exception) -> None:
    print(str(e), file=sys.stderr)
    raise typer.Exit(1)


_BACKEND_HELP = "nccl (GPUs) or gloo (CPU); default nccl when CUDA GPUs are visible, else gloo."
_NPROC_HELP = ("Processes to start on this node (torch.multiprocessing spawn). Not used under torchrun/srun, "
               "which set RANK/WORLD_SIZE. Default: one per visible GPU, or 2 for gloo.")


@bench_app.command("collective")
def collective(
    backend: Optional[str] = typer.Option(None, "--backend", help=_BACKEND_HELP),
    sizes: Optional[str] = typer.Option(None, "--sizes", help="MIN:MAX[:FACTOR] sweep (nccl-tests -b/-e/-f; "
                                        "K/M/G and KiB/MiB/GiB are powers of 1024, KB/MB/GB of 1000) or a comma list. Default 1KiB:1GiB "
                                        "(nccl), 1KiB:16MiB (gloo)."),
    iters: int = typer.Option(20, "--iters", "-n", help="Timed iterations per size (nccl-tests -n)."),
    warmup: int = typer.Option(5, "--warmup", "-w", help="Warm-up iterations before each size (nccl-tests -w)."),
    ops: Optional[str] = typer.Option(None, "--ops", help="Comma list of all_reduce, all_gather, reduce_scatter, "
                                      "broadcast, all_to_all (default: all)."),
    nproc: Optional[int] = typer.Option(None, "--nproc", help=_NPROC_HELP),
    dtype: str = typer.Option("float", "--dtype", help="Element type: float, half, bfloat16, double, int32, ..."),
    save: Optional[str] = typer.Option(None, "--save", metavar="TOPO", help="Record the busbw sweep under "
                                       "measured.collectives of this topology JSON (probed live when absent)."),
    save_calibration: Optional[str] = typer.Option(None, "--save-calibration", metavar="PROFILE.json",
                                                   help="Fit a calibration profile (gpucomm calibrate) from this "
                                                   "sweep and write it there: for predict/plan/rings --calibration."),
    topology: Optional[str] = typer.Option(None, "--topology", metavar="TOPO", help="With --save-calibration: "
                                           "the topology of one node (default: --save's, else a live probe)."),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds before a stuck collective is abandoned."),
) -> None:
    """nccl-tests style sweep: size, count, type, redop, root, time, algbw, busbw (same busbw formulas)."""
    from gpucomm.planners.measure.bench import parse_size_sweep, run_collective_bench
    from gpucomm.planners.measure.world import TorchMissing
    from gpucomm.render.bench import render_collective_table

    _check_runs(iters, warmup, nproc, timeout)
    flag_value("--sizes", sizes, parse=parse_size_sweep)

    _check_save(save)
    if save_calibration:
        from gpucomm.probes.files import check_writable

        check_writable(save_calibration, SETTINGS.force)   # refused before the benchmark runs
    try:
        result = run_collective_bench(backend=backend, sizes=sizes, iters=iters, warmup=warmup, ops=ops,
                                      nproc=nproc, dtype=dtype, progress=_progress_enabled(), timeout_s=timeout)
    except TorchMissing as e:
        _torch_missing(e)
        return
    if result is None:  # a non-zero rank under torchrun/srun: rank 0 reports
        return
    if save:
        _save(save, result)
    if save_calibration:
        _save_calibration(save_calibration, result, topology or save)
    _emit_result(result, render_collective_table)


def _save_calibration(path: str, result: dict, topology: Optional[str]) -> None:
    """Fit a profile from a collective sweep (the nccl-tests table it prints) and write it atomically."""
    from gpucomm.planners.collectives.calibrate import build_calibration
    from gpucomm.render.bench import render_collective_table
    from gpucomm.probes.model import dumps_json
    from gpucomm.probes.files import write_atomic

    if topology:
        from gpucomm.probes.load import load_topology

        doc, source = load_topology(topology), topology
    else:
        from gpucomm.probes.sources.host import Host
        from gpucomm.probes.sources.probe import probe_host

        doc, source = probe_host(Host()), "this node (live probe)"
    nodes = max(1, int(result.get("nodes") or 1))
    world = int(result.get("world_size") or 1)
    cal = build_calibration(doc, [("gpucomm bench collective", render_collective_table(result))], source,
                            nodes=nodes, gpus_per_node=max(1, world // nodes))
    cal["created_by"] = "gpucomm bench collective --save-calibration"
    write_atomic(path, dumps_json(cal), force=SETTINGS.force)
    diag(f"gpucomm: calibration of {len(cal['runs'])} run(s) written to {path} (fitted: {', '.join(cal['fitted'])})")


@bench_app.command("p2p")
def p2p(
    backend: Optional[str] = typer.Option(None, "--backend", help=_BACKEND_HELP + " Used by --mode sendrecv."),
    mode: Optional[str] = typer.Option(None, "--mode", help="copy: GPU-to-GPU copies in this process "
                                       "(p2pBandwidthLatencyTest style, default with GPUs); sendrecv: rank-to-rank "
                                       "send/recv over the process group (default on CPU and under torchrun)."),
    size: Optional[str] = typer.Option(None, "--size", help="Message size (default 64MiB copy, 4MiB sendrecv)."),
    iters: int = typer.Option(20, "--iters", "-n", help="Timed iterations per pair."),
    warmup: int = typer.Option(5, "--warmup", "-w", help="Warm-up iterations per pair."),
    nproc: Optional[int] = typer.Option(None, "--nproc", help=_NPROC_HELP),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="CUDA device indices for --mode copy, e.g. 0,1,2,3."),
    save: Optional[str] = typer.Option(None, "--save", metavar="TOPO", help="Write the matrix into this topology "
                                       "JSON: measured_bw_GBps on direct links, measured.p2p for every pair."),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds before a stuck transfer is abandoned."),
) -> None:
    """Pairwise bandwidth (both directions) and latency matrix; host<->device per GPU in copy mode."""
    from gpucomm.planners.measure.bench import parse_size, run_p2p_bench
    from gpucomm.planners.measure.world import TorchMissing
    from gpucomm.render.bench import render_p2p_table

    _check_runs(iters, warmup, nproc, timeout)
    flag_value("--size", size, parse=lambda t: parse_size(t, "--size"))

    _check_save(save)
    try:
        result = run_p2p_bench(backend=backend, size=size, iters=iters, warmup=warmup, nproc=nproc, gpus=gpus,
                               mode=mode, progress=_progress_enabled(), timeout_s=timeout)
    except TorchMissing as e:
        _torch_missing(e)
        return
    if result is None:
        return
    if save:
        _save(save, result)
    _emit_result(result, render_p2p_table)


def _check_runs(iters: int, warmup: int, nproc: Optional[int], timeout: float) -> None:
    flag_value("--iters", iters, lo=1)
    flag_value("--warmup", warmup, lo=0)
    flag_value("--nproc", nproc, lo=1)
    flag_value("--timeout", timeout, above=0)


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")
