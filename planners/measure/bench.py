"""``gpucomm bench``: measure collectives and point-to-point bandwidth with torch.distributed.

Two halves:

* pure helpers (no torch): size parsing, nccl-tests' bandwidth formulas, the table renderers, the
  launcher-environment detection and :func:`apply_measurements`, which writes measured numbers into
  a topology document.  These are what most tests exercise, so they run where torch is absent (CI
  installs only the ``[test]`` extra).
* the measurement itself (torch imported inside functions): :func:`run_collective_bench` and
  :func:`run_p2p_bench`.  Backends are torch.distributed's own: ``nccl`` on GPUs, ``gloo`` on CPU
  (so that the whole path is tested on a machine without GPUs).  Processes are started by torch's
  own machinery -- ``torch.multiprocessing.start_processes`` with a ``FileStore`` rendezvous in a
  private temporary directory on one node, or an existing ``torchrun``/``srun`` environment
  (``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``MASTER_ADDR``) across nodes.  No home-made transport.

Bandwidth definitions are nccl-tests' (``doc/PERFORMANCE.md`` and ``src/*.cu`` ``*GetBw``):
``algbw = S / t`` in GB/s (1e9 bytes), ``busbw = algbw * factor``:

==============  ==============================  ============
collective      S                               factor
==============  ==============================  ============
all_reduce      count * typesize                2(n-1)/n
all_gather      count * typesize * n (output)   (n-1)/n
reduce_scatter  count * typesize * n (input)    (n-1)/n
broadcast       count * typesize                1
all_to_all      count * typesize * n            (n-1)/n
==============  ==============================  ============

where ``count`` is what nccl-tests prints in its ``count`` column (per rank for all_gather,
reduce_scatter and all_to_all).  Message sizes are rounded down the way nccl-tests does
(``base = (count / (ALIGN*n)) * ALIGN`` elements with ALIGN = 4, src/all_gather.cu).
"""
from __future__ import annotations

import os

import socket
from typing import Callable, Optional

from gpucomm.probes import units
from gpucomm.probes.errors import GpucommError, InputError

SCHEMA = "gpucomm.bench/v1"

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
# nccl-tests prints the redop for reductions and "none" otherwise; root -1 for unrooted collectives.
REDOP = {"all_reduce": "sum", "reduce_scatter": "sum", "all_gather": "none", "broadcast": "none",
         "all_to_all": "none"}
ROOTED = {"broadcast"}
# Collectives whose S is count * typesize * n (count printed per rank).
PER_RANK_COUNT = {"all_gather", "reduce_scatter", "all_to_all"}
ALIGN = 4  # elements; nccl-tests src/all_gather.cu, reduce_scatter.cu, alltoall.cu

# nccl-tests type names (src/common.cu test_typenames) -> (torch dtype attribute, bytes).
DTYPES = {
    "int8": ("int8", 1), "uint8": ("uint8", 1), "int32": ("int32", 4), "int64": ("int64", 8),
    "half": ("float16", 2), "float": ("float32", 4), "double": ("float64", 8), "bfloat16": ("bfloat16", 2),
}

# nccl-tests defaults: -w 5 warm-up iterations, -n 20 timed iterations.
DEFAULT_WARMUP = 5
DEFAULT_ITERS = 20
DEFAULT_SIZES = {"nccl": "1KiB:1GiB", "gloo": "1KiB:16MiB"}
DEFAULT_P2P_SIZE = {"cuda-copy": 64 << 20, "send-recv": 4 << 20}
MAX_SIZE = 1 << 40  # 1 TiB: anything larger is a typo, not a benchmark

NEEDS_TORCH = "gpucomm bench needs torch: pip install 'gpucomm[bench]'"


# --------------------------------------------------------------------------------------------
# Sizes: gpucomm.probes.units (K/M/G and KiB/MiB/GiB binary, KB/MB/GB decimal, in every command)
def parse_size(text: str, what: str = "--sizes") -> int:
    """One message size, 1 byte .. 1 TiB (see :mod:`gpucomm.probes.units`)."""
    return units.parse_size(str(text), what, max_size=MAX_SIZE, minimum=1)


def parse_size_sweep(spec: str, what: str = "--sizes") -> list[int]:
    """``MIN:MAX[:FACTOR]`` (nccl-tests' -b/-e/-f; factor 2 by default), ``A,B,C`` or one size; the
    sizes run in increasing order, each once (nccl-tests' order).

    >>> parse_size_sweep("1KiB:8KiB")
    [1024, 2048, 4096, 8192]
    """
    return sorted(set(units.parse_sizes(str(spec), what, max_size=MAX_SIZE, minimum=1)))



def dtype_size(dtype: str) -> int:
    if dtype not in DTYPES:
        raise InputError(f"--dtype {dtype!r} is not supported", expected=", ".join(DTYPES))
    return DTYPES[dtype][1]


def parse_ops(spec: Optional[str]) -> list[str]:
    """``all_reduce,all_gather`` / ``all`` -> list in the canonical order; aliases as nccl-tests names them."""
    if spec is None or spec.strip() in ("", "all"):
        return list(OPS)
    out = []
    for tok in spec.split(","):
        t = units.normalize_collective(tok, "--ops")
        if t not in OPS:
            raise InputError(f"--ops: unknown collective {tok.strip()!r}", expected=", ".join(OPS))
        if t not in out:
            out.append(t)
    return [o for o in OPS if o in out]


# --------------------------------------------------------------------------------------------
# nccl-tests formulas
def message_layout(op: str, size_bytes: int, nranks: int, typesize: int) -> tuple[int, int]:
    """(S bytes, count) for a requested size, rounded as nccl-tests does.

    all_reduce/broadcast: count = size / typesize elements, S = count * typesize.
    all_gather/reduce_scatter/all_to_all: count = per-rank elements rounded down to a multiple of
    ALIGN (nccl-tests ``base = (count/(ALIGN*nranks))*ALIGN``), S = count * typesize * n.
    Returns (0, 0) when the size is too small to give every rank one aligned chunk (nccl-tests skips)."""
    elems = size_bytes // typesize
    if op in PER_RANK_COUNT:
        base = (elems // (ALIGN * nranks)) * ALIGN
        return base * typesize * nranks, base
    return elems * typesize, elems


def _sig(x: float, digits: int = 7) -> float:
    """Round to significant digits: gloo on CPU gives MB/s-range numbers that 6 decimals would blur."""
    return float(f"{x:.{digits}g}")


def make_row(op: str, size_bytes: int, count: int, dtype: str, time_s: float, nranks: int,
             wrong: Optional[int]) -> dict:
    alg, bus = units.bandwidths(op, size_bytes, time_s, nranks)
    return {
        "size_bytes": int(size_bytes), "count": int(count), "type": dtype, "redop": REDOP[op],
        "root": 0 if op in ROOTED else -1, "time_us": round(time_s * 1e6, 3),
        "algbw_GBps": _sig(alg), "busbw_GBps": _sig(bus), "wrong": wrong,
    }


# --------------------------------------------------------------------------------------------
# Rendering (nccl-tests' layout; probes/formats/nccltests.py parses it back)
def _fmt_time(us: float) -> str:
    # nccl-tests prints "%7.2f" and lets large numbers grow (e.g. 15668.1 in captures); keep 7 wide.
    if us >= 1e5:
        return f"{us:7.0f}"
    if us >= 1e4:
        return f"{us:7.1f}"
    return f"{us:7.2f}"


def render_collective_table(result: dict) -> str:
    """The nccl-tests table (one block per collective) plus a header naming what was run."""
    lines = [
        f"# gpucomm bench collective: backend {result['backend']}, {result['world_size']} rank(s) on "
        f"{result['nodes']} node(s), device {result['device']}, launcher {result['launcher']}",
        f"# minBytes {result['min_bytes']} maxBytes {result['max_bytes']} warmup iters: {result['warmup']} "
        f"iters: {result['iters']} validation: 1 dtype: {result['dtype']}",
    ]
    for note in result.get("notes", []):
        lines.append(f"# note: {note}")
    for res in result["results"]:
        lines += ["#", f"# Collective test starting: {res['op']}_perf"]
        if res.get("note"):
            lines.append(f"# note: {res['note']}")
        if not res["rows"]:
            lines.append("# (no rows)")
            continue
        lines += [
            "#",
            "#       size         count      type   redop    root     time   algbw   busbw  #wrong",
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)        ",
        ]
        for r in res["rows"]:
            wrong = "N/A" if r["wrong"] is None else str(r["wrong"])
            lines.append(f"{r['size_bytes']:12d}  {r['count']:12d}  {r['type']:>8s}  {r['redop']:>6s}  "
                         f"{r['root']:6d}  {_fmt_time(r['time_us'])}  {r['algbw_GBps']:6.2f}  "
                         f"{r['busbw_GBps']:6.2f}  {wrong:>6s}")
        lines.append(f"# Out of bounds values : {res['wrong_total'] or 0} {'OK' if not res['wrong_total'] else 'FAILED'}")
        lines.append(f"# Avg bus bandwidth    : {res['avg_busbw_GBps']:.6g}")
        lines += ["#", f"# Collective test concluded: {res['op']}_perf"]
    return "\n".join(lines) + "\n"


def _matrix_lines(title: str, keys: list, mat: dict, fmt: str) -> list:
    w = max(8, max((len(k) for k in keys), default=0) + 1)
    out = [title, "D\\D".rjust(w) + "".join(k.rjust(w) for k in keys)]
    for a in keys:
        cells = []
        for b in keys:
            v = mat.get(a, {}).get(b)
            cells.append(("-" if a == b else "n/a") if v is None else format(v, fmt))
        out.append(a.rjust(w) + "".join(c.rjust(w) for c in cells))
    return out


def render_p2p_table(result: dict) -> str:
    """Bandwidth and latency matrices in p2pBandwidthLatencyTest's layout (row = source)."""
    keys = [e["key"] for e in result["endpoints"]]
    lines = [f"# gpucomm bench p2p: {result['label']}",
             f"# message {result['size_bytes']} B, warmup {result['warmup']}, iters {result['iters']}"]
    for note in result.get("notes", []):
        lines.append(f"# note: {note}")
    lines.append("")
    lines += _matrix_lines("Unidirectional bandwidth matrix (GB/s), row = source, column = destination",
                           keys, result["bw_GBps"], ".2f")
    lines.append("")
    lines += _matrix_lines("Latency matrix (us)", keys, result["lat_us"], ".2f")
    if result.get("peer_access"):
        lines.append("")
        lines += _matrix_lines("P2P access (1 = cudaDeviceCanAccessPeer)", keys,
                               {a: {b: int(v) for b, v in row.items()} for a, row in result["peer_access"].items()},
                               "d")
    if result.get("host_device"):
        lines += ["", "Host <-> device (GB/s, pinned host memory)",
                  f"{'device':>8s}{'H2D':>10s}{'D2H':>10s}"]
        for k in keys:
            hd = result["host_device"].get(k)
            if hd:
                lines.append(f"{k:>8s}{hd['h2d_GBps']:10.2f}{hd['d2h_GBps']:10.2f}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# Launcher environment
def launcher_env(environ: Optional[dict] = None) -> Optional[dict]:
    """Rank/world/local rank/master of an existing launcher, or None when there is none.

    torchrun (and ``torch.distributed.run``) sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
    MASTER_ADDR, MASTER_PORT.  Under ``srun`` without torchrun only SLURM_PROCID/SLURM_NTASKS/
    SLURM_LOCALID exist; MASTER_ADDR must then be exported by the job script (the first host of
    ``scontrol show hostnames "$SLURM_JOB_NODELIST"``), MASTER_PORT defaults to 29500."""
    env = os.environ if environ is None else environ
    if env.get("RANK") is not None and env.get("WORLD_SIZE") is not None:
        kind = "torchrun" if env.get("TORCHELASTIC_RUN_ID") or env.get("LOCAL_WORLD_SIZE") else "env"
        rank, world = env["RANK"], env["WORLD_SIZE"]
        local = env.get("LOCAL_RANK", "0")
    elif env.get("SLURM_PROCID") is not None and env.get("SLURM_NTASKS") is not None:
        kind = "srun"
        rank, world, local = env["SLURM_PROCID"], env["SLURM_NTASKS"], env.get("SLURM_LOCALID", "0")
    else:
        return None
    try:
        r, w, lr = int(rank), int(world), int(local)
    except ValueError:
        raise InputError(f"launcher environment: RANK={rank!r} WORLD_SIZE={world!r} LOCAL_RANK={local!r} "
                         "are not integers") from None
    if w < 1 or not 0 <= r < w or lr < 0:
        raise InputError(f"launcher environment: rank {r} is not within world size {w}")
    addr = env.get("MASTER_ADDR")
    if kind == "srun" and w > 1 and not addr:
        raise InputError("running under srun with more than one task but MASTER_ADDR is not set",
                         expected='export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)')
    return {"launcher": kind, "rank": r, "world_size": w, "local_rank": lr,
            "master_addr": addr or "127.0.0.1", "master_port": int(env.get("MASTER_PORT") or 29500)}


# --------------------------------------------------------------------------------------------
# torch import
def import_torch():
    """(torch, torch.distributed) or raise :class:`TorchMissing`."""
    import warnings

    try:
        with warnings.catch_warnings():
            # CPU wheels without numpy warn on import; irrelevant to communication benchmarks.
            warnings.simplefilter("ignore")
            import torch
            import torch.distributed as dist
    except ImportError:
        raise TorchMissing(NEEDS_TORCH) from None
    if not dist.is_available():
        raise TorchMissing("this torch build has no torch.distributed; install a build with distributed support")
    return torch, dist


class TorchMissing(GpucommError):
    exit_code = 1


class BenchError(GpucommError):
    """A benchmark that could not run (a worker failed, a backend is missing)."""

    exit_code = 1


def choose_backend(requested: Optional[str], torch, dist) -> tuple[str, str]:
    """(backend, device kind) -- nccl on CUDA GPUs, gloo on CPU."""
    have_cuda = bool(torch.cuda.is_available() and torch.cuda.device_count() > 0)
    if requested is None:
        requested = "nccl" if have_cuda and dist.is_nccl_available() else "gloo"
    requested = requested.lower()
    if requested == "nccl":
        if not have_cuda:
            raise InputError("--backend nccl needs CUDA GPUs and none are visible", expected="--backend gloo on CPU")
        if not dist.is_nccl_available():
            raise InputError("--backend nccl: this torch build has no NCCL", expected="--backend gloo")
        return "nccl", "cuda"
    if requested == "gloo":
        if not dist.is_gloo_available():
            raise InputError("--backend gloo: this torch build has no Gloo")
        return "gloo", "cpu"
    raise InputError(f"--backend {requested!r} is not supported", expected="nccl or gloo")


# --------------------------------------------------------------------------------------------
# Spawning on one node (torch's own launcher machinery)
def _spawn(fn: Callable, nproc: int, cfg: dict, timeout_s: float) -> dict:
    """Run ``fn(local_rank, cfg)`` in ``nproc`` processes rendezvousing through a FileStore in a
    private temporary directory; return rank 0's result (written to a JSON file there)."""
    import json
    import tempfile

    torch, _ = import_torch()
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="gpucomm-bench-") as tmp:
        cfg = dict(cfg, init_method="file://" + os.path.join(tmp, "store"), world_size=nproc,
                   result_path=os.path.join(tmp, "result.json"), error_dir=tmp, timeout_s=timeout_s)
        # Workers re-import torch; a CPU wheel without numpy warns on import -- not our business.
        saved = os.environ.get("PYTHONWARNINGS")
        os.environ["PYTHONWARNINGS"] = "ignore::UserWarning"
        try:
            ctx = mp.start_processes(fn, args=(cfg,), nprocs=nproc, join=False, start_method="spawn")
            while not ctx.join(timeout=max(1.0, timeout_s)):
                pass
        except Exception as e:  # a worker died; its own one-line reason is in error-<rank>.txt
            reasons = []
            for name in sorted(os.listdir(tmp)):
                if name.startswith("error-"):
                    with open(os.path.join(tmp, name), encoding="utf-8") as f:
                        reasons.append(f.read().strip())
            msg = reasons[0] if reasons else " ".join(str(e).split())[:300]
            raise BenchError(f"benchmark worker failed: {msg}") from None
        finally:
            if saved is None:
                os.environ.pop("PYTHONWARNINGS", None)
            else:
                os.environ["PYTHONWARNINGS"] = saved
        if not os.path.exists(cfg["result_path"]):
            raise BenchError("benchmark workers finished without a result")
        with open(cfg["result_path"], encoding="utf-8") as f:
            return json.load(f)


def _worker_guard(body: Callable, local_rank: int, cfg: dict) -> None:
    """Run a worker body; on failure record a one-line reason and exit non-zero (spawn then stops
    the other workers instead of letting them wait for a collective forever)."""
    import sys

    try:
        body(local_rank, cfg)
    except BaseException as e:  # noqa: BLE001 - reported to the parent, then re-raised as exit 1
        if isinstance(e, SystemExit) and not e.code:
            return
        path = os.path.join(cfg.get("error_dir") or ".", f"error-{local_rank}.txt")
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(f"rank {cfg.get('rank_offset', 0) + local_rank}: {type(e).__name__}: "
                        + " ".join(str(e).split())[:300])
        except OSError:
            pass
        sys.exit(1)


def _run_in_launcher_world(env: dict, cfg: dict, body, dist, torch, backend: str, timeout_s: float):
    """Join the world torchrun/srun set up (RANK, WORLD_SIZE, MASTER_ADDR/PORT from the launcher)
    and run ``body`` on this rank."""
    cfg["launcher"] = env["launcher"]
    os.environ.setdefault("MASTER_ADDR", env["master_addr"])
    os.environ.setdefault("MASTER_PORT", str(env["master_port"]))
    _init_group(dist, torch, backend, env["rank"], env["world_size"], None, timeout_s)
    try:
        return body(env["rank"], env["world_size"], env["local_rank"], cfg, dist, torch)
    finally:
        dist.destroy_process_group()


def _init_group(dist, torch, backend: str, rank: int, world: int, init_method: Optional[str], timeout_s: float):
    from datetime import timedelta

    kwargs = {"backend": backend, "rank": rank, "world_size": world, "timeout": timedelta(seconds=timeout_s)}
    if init_method:
        kwargs["init_method"] = init_method
    else:
        kwargs["init_method"] = "env://"
    dist.init_process_group(**kwargs)


def _device(torch, device_kind: str, local_rank: int):
    if device_kind == "cuda":
        n = torch.cuda.device_count()
        torch.cuda.set_device(local_rank % n)
        return torch.device("cuda", local_rank % n)
    return torch.device("cpu")


def _sync(torch, device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _hostname() -> str:
    return socket.gethostname()


def _allgather_json(dist, torch, device, obj, world: int) -> list:
    """all_gather of a small JSON-able object per rank.  (``all_gather_object`` would do, but it
    needs numpy, which CPU-only torch installs may lack.)"""
    import json

    data = json.dumps(obj, sort_keys=True).encode("utf-8")[:4096]
    buf = torch.zeros(4096 + 4, dtype=torch.uint8, device=device)
    buf[:4] = torch.tensor(list(len(data).to_bytes(4, "little")), dtype=torch.uint8)
    if data:
        buf[4:4 + len(data)] = torch.tensor(list(data), dtype=torch.uint8)
    out = torch.empty(world * buf.numel(), dtype=torch.uint8, device=device)
    (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(out, buf)
    vals = out.view(world, -1).cpu().tolist()
    res = []
    for row in vals:
        n = int.from_bytes(bytes(row[:4]), "little")
        res.append(json.loads(bytes(row[4:4 + n]).decode("utf-8")))
    return res


# --------------------------------------------------------------------------------------------
# Collectives
def _collective_fns(op: str, dist, torch, device, dtype, count: int, n: int, rank: int):
    """(run(), fill_for_check(), check() -> wrong count) for one collective at one size."""
    tdt = getattr(torch, dtype)
    # torch >= 2.13 renamed the tensor variants (*_single); older releases only have *_tensor.
    ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    rs = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    if op == "all_reduce":
        buf = torch.empty(count, dtype=tdt, device=device)

        def run():
            dist.all_reduce(buf, op=dist.ReduceOp.SUM)

        def fill():
            buf.fill_(rank + 1)

        def check():
            return int((buf != n * (n + 1) // 2).sum().item())
    elif op == "all_gather":
        inp = torch.empty(count, dtype=tdt, device=device)
        out = torch.empty(count * n, dtype=tdt, device=device)

        def run():
            ag(out, inp)

        def fill():
            inp.fill_(rank + 1)

        def check():
            want = torch.arange(1, n + 1, device=device).to(tdt).repeat_interleave(count)
            return int((out != want).sum().item())
    elif op == "reduce_scatter":
        inp = torch.empty(count * n, dtype=tdt, device=device)
        out = torch.empty(count, dtype=tdt, device=device)

        def run():
            rs(out, inp, op=dist.ReduceOp.SUM)

        def fill():
            inp.fill_(rank + 1)

        def check():
            return int((out != n * (n + 1) // 2).sum().item())
    elif op == "broadcast":
        buf = torch.empty(count, dtype=tdt, device=device)

        def run():
            dist.broadcast(buf, src=0)

        def fill():
            buf.fill_(7 if rank == 0 else 0)

        def check():
            return int((buf != 7).sum().item())
    elif op == "all_to_all":
        inp = torch.empty(count * n, dtype=tdt, device=device)
        out = torch.empty(count * n, dtype=tdt, device=device)

        def run():
            dist.all_to_all_single(out, inp)

        def fill():
            # chunk j of rank r holds r*n + j; after the exchange chunk j of rank r holds j*n + r.
            # Values stay below n*n, exact in every dtype for the rank counts int8 can hold.
            inp.copy_((torch.arange(n, device=device) + rank * n).to(tdt).repeat_interleave(count))

        def check():
            want = (torch.arange(n, device=device) * n + rank).to(tdt).repeat_interleave(count)
            return int((out != want).sum().item())
    else:  # pragma: no cover - parse_ops guards this
        raise ValueError(op)
    return run, fill, check


def _progress(enabled: bool, total: int):
    """A rich progress bar on stderr (rank 0 only), or a no-op."""
    if not enabled:
        return None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    prog = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True)
    prog.start()
    prog.add_task("bench", total=total)
    return prog


def collective_body(rank: int, world: int, local_rank: int, cfg: dict, dist, torch) -> Optional[dict]:
    """Every rank runs this inside an initialised process group; rank 0 returns the result."""
    import time

    device = _device(torch, cfg["device"], local_rank)
    n = world
    typesize = dtype_size(cfg["dtype"])
    # which nodes take part (for the header and nodes count)
    names = _allgather_json(dist, torch, device, _hostname(), n)
    results = []
    prog = _progress(cfg.get("progress", False) and rank == 0, len(cfg["ops"]) * len(cfg["sizes"]))
    try:
        for op in cfg["ops"]:
            rows, note = [], None
            for size in cfg["sizes"]:
                if prog is not None:
                    prog.update(prog.task_ids[0], description=f"{op} {units.format_size(size)}")
                S, count = message_layout(op, size, n, typesize)
                if count == 0:
                    if prog is not None:
                        prog.advance(prog.task_ids[0])
                    continue
                run, fill, check = _collective_fns(op, dist, torch, device, DTYPES[cfg["dtype"]][0], count, n, rank)
                try:
                    fill()
                    for _ in range(cfg["warmup"]):
                        run()
                    _sync(torch, device)
                    dist.barrier()
                    t0 = time.perf_counter()
                    for _ in range(cfg["iters"]):
                        run()
                    _sync(torch, device)
                    dt = (time.perf_counter() - t0) / max(1, cfg["iters"])
                    # validation run (nccl-tests -c 1): one more call on known data
                    fill()
                    run()
                    _sync(torch, device)
                    wrong = check()
                except RuntimeError as e:
                    # e.g. reduce_scatter on gloo in older torch: skip the collective with a note
                    msg = " ".join(str(e).split())[:160]
                    if "not supported" in msg.lower() or "unsupported" in msg.lower() or "not implemented" in msg.lower():
                        note = f"skipped: {cfg['backend']} in torch {torch.__version__} does not support {op} ({msg})"
                        rows = []
                        break
                    raise
                # nccl-tests averages the per-rank time over ranks (its default -a 1)
                stats = torch.tensor([dt, float(wrong)], dtype=torch.float64, device=device)
                dist.all_reduce(stats, op=dist.ReduceOp.SUM)
                rows.append(make_row(op, S, count, cfg["dtype"], stats[0].item() / n, n, int(stats[1].item())))
                if prog is not None:
                    prog.advance(prog.task_ids[0])
            results.append(summarise_collective(op, rows, note))
    finally:
        if prog is not None:
            prog.stop()
    if rank != 0:
        return None
    return {
        "schema": SCHEMA, "kind": "collective", "backend": cfg["backend"], "device": cfg["device"],
        "world_size": n, "nodes": len(set(names)), "hosts": sorted(set(names)), "launcher": cfg["launcher"],
        "dtype": cfg["dtype"], "warmup": cfg["warmup"], "iters": cfg["iters"],
        "min_bytes": min(cfg["sizes"]), "max_bytes": max(cfg["sizes"]),
        "torch_version": torch.__version__.split("+")[0], "results": results, "notes": list(cfg.get("notes", [])),
    }


def summarise_collective(op: str, rows: list, note: Optional[str] = None) -> dict:
    bus = [r["busbw_GBps"] for r in rows]
    wrong = [r["wrong"] for r in rows if r["wrong"] is not None]
    return {"op": op, "rows": rows, "note": note,
            "avg_busbw_GBps": round(sum(bus) / len(bus), 6) if bus else 0.0,
            "peak_busbw_GBps": round(max(bus), 6) if bus else 0.0,
            "wrong_total": int(sum(wrong)) if wrong else 0}


def _collective_spawn_worker(local_rank: int, cfg: dict) -> None:
    _worker_guard(_collective_spawn_body, local_rank, cfg)


def _run_spawned(body, local_rank: int, cfg: dict) -> None:
    """One worker started by torch.multiprocessing: join the FileStore world, run ``body``, and
    leave rank 0's result in ``cfg['result_path']`` for the parent."""
    import json

    torch, dist = import_torch()
    torch.set_num_threads(1)  # n processes on a small host: one compute thread each
    _init_group(dist, torch, cfg["backend"], local_rank, cfg["world_size"], cfg["init_method"], cfg["timeout_s"])
    try:
        res = body(local_rank, cfg["world_size"], local_rank, cfg, dist, torch)
    finally:
        dist.destroy_process_group()
    if res is not None:
        with open(cfg["result_path"], "w", encoding="utf-8") as f:
            json.dump(res, f)


def _collective_spawn_body(local_rank: int, cfg: dict) -> None:
    _run_spawned(collective_body, local_rank, cfg)


def run_collective_bench(*, backend: Optional[str] = None, sizes: Optional[str] = None, iters: int = DEFAULT_ITERS,
                         warmup: int = DEFAULT_WARMUP, ops: Optional[str] = None, nproc: Optional[int] = None,
                         dtype: str = "float", progress: bool = False, timeout_s: float = 300.0,
                         environ: Optional[dict] = None) -> Optional[dict]:
    """Run the collective sweep.  Returns the ``gpucomm.bench/v1`` result on rank 0 (or the
    spawning parent) and None on other ranks of an external launcher."""
    # flags first: a typo is reported before torch is even imported
    op_list = parse_ops(ops)
    dtype_size(dtype)
    if iters < 1 or warmup < 0:
        raise InputError("--iters must be >= 1 and --warmup >= 0")
    size_list = parse_size_sweep(sizes) if sizes else None
    if backend is not None and backend.lower() not in ("nccl", "gloo"):
        raise InputError(f"--backend {backend!r} is not supported", expected="nccl or gloo")
    torch, dist = import_torch()
    be, device = choose_backend(backend, torch, dist)
    size_list = size_list or parse_size_sweep(DEFAULT_SIZES[be])
    env = launcher_env(environ)
    cfg = {"backend": be, "device": device, "dtype": dtype, "iters": int(iters), "warmup": int(warmup),
           "ops": op_list, "sizes": size_list, "progress": progress, "notes": []}
    if env is not None:
        if nproc is not None and nproc != env["world_size"]:
            raise InputError(f"--nproc {nproc} conflicts with the launcher's WORLD_SIZE={env['world_size']}",
                             expected="no --nproc under torchrun/srun")
        return _run_in_launcher_world(env, cfg, collective_body, dist, torch, be, timeout_s)
    if nproc is None:
        nproc = torch.cuda.device_count() if device == "cuda" else 2
        cfg["notes"].append(f"--nproc not given: {nproc} process(es) "
                            + ("(one per visible GPU)" if device == "cuda" else "(gloo default)"))
    if nproc < 1:
        raise InputError(f"--nproc {nproc} must be >= 1")
    if device == "cuda" and nproc > torch.cuda.device_count():
        raise InputError(f"--nproc {nproc} is more than the {torch.cuda.device_count()} visible GPU(s)")
    cfg["launcher"] = "spawn"
    return _spawn(_collective_spawn_worker, nproc, cfg, timeout_s)


# --------------------------------------------------------------------------------------------
# Point to point
def p2p_sendrecv_body(rank: int, world: int, local_rank: int, cfg: dict, dist, torch) -> Optional[dict]:
    """Rank-to-rank send/recv bandwidth and ping-pong latency over the process group (every
    ordered pair in turn; the other ranks wait at the barrier)."""
    import time

    device = _device(torch, cfg["device"], local_rank)
    n = world
    nbytes = cfg["size_bytes"]
    buf = torch.zeros(nbytes, dtype=torch.uint8, device=device)
    small = torch.zeros(1, dtype=torch.int32, device=device)
    bw = torch.zeros(n, n, dtype=torch.float64, device=device)
    lat = torch.zeros(n, n, dtype=torch.float64, device=device)
    info = {"host": _hostname(), "local_rank": local_rank}
    if device.type == "cuda":
        info.update(_cuda_identity(torch, device.index))
    names = _allgather_json(dist, torch, device, info, n)
    pairs = [(s, d) for s in range(n) for d in range(n) if s != d]
    prog = _progress(cfg.get("progress", False) and rank == 0, len(pairs))
    try:
        for s, d in pairs:
            dist.barrier()
            if rank in (s, d):
                for _ in range(cfg["warmup"]):
                    if rank == s:
                        dist.send(buf, d)
                    else:
                        dist.recv(buf, s)
                _sync(torch, device)
                # bandwidth: timed on the receiver, from its first recv to the last byte in
                t0 = time.perf_counter()
                for _ in range(cfg["iters"]):
                    if rank == s:
                        dist.send(buf, d)
                    else:
                        dist.recv(buf, s)
                _sync(torch, device)
                dt = time.perf_counter() - t0
                if rank == d:
                    bw[s, d] = nbytes * cfg["iters"] / dt / 1e9
                # latency: ping-pong of one 4-byte element, half the round trip, timed on the sender
                reps = max(10, cfg["iters"])
                t0 = time.perf_counter()
                for _ in range(reps):
                    if rank == s:
                        dist.send(small, d)
                        dist.recv(small, d)
                    else:
                        dist.recv(small, s)
                        dist.send(small, s)
                _sync(torch, device)
                if rank == s:
                    lat[s, d] = (time.perf_counter() - t0) / reps / 2 * 1e6
            if prog is not None:
                prog.advance(prog.task_ids[0])
    finally:
        if prog is not None:
            prog.stop()
    dist.all_reduce(bw, op=dist.ReduceOp.SUM)
    dist.all_reduce(lat, op=dist.ReduceOp.SUM)
    if rank != 0:
        return None
    endpoints = []
    for r, nm in enumerate(names):
        ep = {"key": f"rank{r}", "rank": r, "host": nm["host"], "local_rank": nm["local_rank"]}
        for k in ("cuda_index", "pci_bus_id", "uuid", "name"):
            if k in nm:
                ep[k] = nm[k]
        endpoints.append(ep)
    keys = [e["key"] for e in endpoints]
    bwm = {a: {b: round(bw[i, j].item(), 4) for j, b in enumerate(keys) if i != j} for i, a in enumerate(keys)}
    latm = {a: {b: round(lat[i, j].item(), 3) for j, b in enumerate(keys) if i != j} for i, a in enumerate(keys)}
    if cfg["device"] == "cpu":
        label = (f"process-to-process send/recv over {cfg['backend']} between {n} CPU processes "
                 "(not GPU peer-to-peer: this measures the host transport, e.g. TCP loopback)")
    else:
        label = f"rank-to-rank send/recv over {cfg['backend']} between {n} GPU ranks"
    return {"schema": SCHEMA, "kind": "p2p", "mode": "send-recv", "backend": cfg["backend"], "device": cfg["device"],
            "label": label, "launcher": cfg["launcher"], "world_size": n, "nodes": len({e["host"] for e in endpoints}),
            "endpoints": endpoints, "size_bytes": nbytes, "warmup": cfg["warmup"], "iters": cfg["iters"],
            "bw_GBps": bwm, "lat_us": latm, "peer_access": None, "host_device": None,
            "torch_version": torch.__version__.split("+")[0], "notes": list(cfg.get("notes", []))}


def _cuda_identity(torch, index: int) -> dict:
    """CUDA index, PCI bus id and UUID of a device, for matching it to a topology's GPUs (CUDA's
    default order is FASTEST_FIRST, NVML's is PCI order -- NVIDIA/nccl issue reports)."""
    p = torch.cuda.get_device_properties(index)
    out = {"cuda_index": index, "name": getattr(p, "name", None)}
    bus, dev, dom = getattr(p, "pci_bus_id", None), getattr(p, "pci_device_id", None), getattr(p, "pci_domain_id", None)
    if bus is not None and dev is not None:
        out["pci_bus_id"] = f"{int(dom or 0):04x}:{int(bus):02x}:{int(dev):02x}.0"
    uuid = getattr(p, "uuid", None)
    if uuid is not None:
        s = str(uuid)
        out["uuid"] = s if s.startswith("GPU-") else f"GPU-{s}"
    return out


def _p2p_sendrecv_spawn_worker(local_rank: int, cfg: dict) -> None:
    _worker_guard(_p2p_sendrecv_spawn_body, local_rank, cfg)


def _p2p_sendrecv_spawn_body(local_rank: int, cfg: dict) -> None:
    _run_spawned(p2p_sendrecv_body, local_rank, cfg)


def p2p_cuda_copy(torch, devices: list, nbytes: int, warmup: int, iters: int, progress: bool = False) -> dict:
    """GPU-to-GPU copy bandwidth/latency matrix and host<->device bandwidth in one process
    (p2pBandwidthLatencyTest/nvbandwidth ``device_to_device_memcpy_*_ce`` style: copy-engine
    memcpy via ``Tensor.copy_``, which uses cudaMemcpyPeer when peer access is possible)."""
    import time

    def timed(fn, reps, devs):
        for _ in range(warmup):
            fn()
        for d in devs:
            torch.cuda.synchronize(d)
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        for d in devs:
            torch.cuda.synchronize(d)
        return (time.perf_counter() - t0) / reps

    ids = {d: _cuda_identity(torch, d) for d in devices}
    keys = {d: f"GPU{d}" for d in devices}
    bufs = {d: torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{d}") for d in devices}
    dsts = {d: torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{d}") for d in devices}
    tiny_src = {d: torch.zeros(1, dtype=torch.int32, device=f"cuda:{d}") for d in devices}
    tiny_dst = {d: torch.zeros(1, dtype=torch.int32, device=f"cuda:{d}") for d in devices}
    bw: dict = {keys[d]: {} for d in devices}
    lat: dict = {keys[d]: {} for d in devices}
    peer: dict = {keys[d]: {} for d in devices}
    pairs = [(a, b) for a in devices for b in devices if a != b]
    prog = _progress(progress, len(pairs) + len(devices))
    try:
        for a, b in pairs:
            peer[keys[a]][keys[b]] = bool(torch.cuda.can_device_access_peer(a, b))
            t = timed(lambda: dsts[b].copy_(bufs[a], non_blocking=True), iters, [a, b])
            bw[keys[a]][keys[b]] = round(nbytes / t / 1e9, 4)
            t = timed(lambda: tiny_dst[b].copy_(tiny_src[a], non_blocking=True), max(100, iters), [a, b])
            lat[keys[a]][keys[b]] = round(t * 1e6, 3)
            if prog is not None:
                prog.advance(prog.task_ids[0])
        hd = {}
        for d in devices:
            host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
            h2d = timed(lambda: bufs[d].copy_(host, non_blocking=True), iters, [d])
            d2h = timed(lambda: host.copy_(bufs[d], non_blocking=True), iters, [d])
            hd[keys[d]] = {"h2d_GBps": round(nbytes / h2d / 1e9, 4), "d2h_GBps": round(nbytes / d2h / 1e9, 4)}
            if prog is not None:
                prog.advance(prog.task_ids[0])
    finally:
        if prog is not None:
            prog.stop()
    endpoints = [dict({"key": keys[d], "host": _hostname()}, **ids[d]) for d in devices]
    return {"schema": SCHEMA, "kind": "p2p", "mode": "cuda-copy", "backend": None, "device": "cuda",
            "label": f"GPU-to-GPU copy (Tensor.copy_, copy engines) between {len(devices)} GPU(s) in one process",
            "launcher": "single", "world_size": 1, "nodes": 1, "endpoints": endpoints, "size_bytes": nbytes,
            "warmup": warmup, "iters": iters, "bw_GBps": bw, "lat_us": lat, "peer_access": peer,
            "host_device": hd, "torch_version": torch.__version__.split("+")[0], "notes": []}


def run_p2p_bench(*, backend: Optional[str] = None, size: Optional[str] = None, iters: int = DEFAULT_ITERS,
                  warmup: int = DEFAULT_WARMUP, nproc: Optional[int] = None, gpus: Optional[str] = None,
                  mode: Optional[str] = None, progress: bool = False, timeout_s: float = 300.0,
                  environ: Optional[dict] = None) -> Optional[dict]:
    """``mode`` ``copy`` (CUDA copies in one process; the default when GPUs are visible and no
    launcher is active) or ``sendrecv`` (rank-to-rank over the process group; the default on CPU
    and under torchrun/srun)."""
    if iters < 1 or warmup < 0:
        raise InputError("--iters must be >= 1 and --warmup >= 0")
    if mode not in (None, "copy", "sendrecv"):
        raise InputError(f"--mode {mode!r}", expected="copy or sendrecv")
    if size:
        parse_size(size, "--size")
    torch, dist = import_torch()
    env = launcher_env(environ)
    have_cuda = bool(torch.cuda.is_available() and torch.cuda.device_count() > 0)
    if mode is None:
        mode = "copy" if have_cuda and env is None and backend in (None, "nccl") else "sendrecv"
    if mode == "copy":
        if not have_cuda:
            raise InputError("--mode copy needs CUDA GPUs and none are visible", expected="--mode sendrecv (gloo)")
        n = torch.cuda.device_count()
        devices = list(range(n))
        if gpus:
            try:
                devices = sorted({int(x) for x in gpus.split(",") if x.strip()})
            except ValueError:
                raise InputError(f"--gpus {gpus!r}", expected="comma-separated CUDA device indices") from None
            bad = [d for d in devices if not 0 <= d < n]
            if bad:
                raise InputError(f"--gpus: device(s) {bad} not visible (found {n})")
        nbytes = parse_size(size, "--size") if size else DEFAULT_P2P_SIZE["cuda-copy"]
        res = p2p_cuda_copy(torch, devices, nbytes, warmup, iters, progress)
        if len(devices) < 2:
            res["notes"].append("only one GPU: no GPU pair to measure, host<->device only")
        return res
    be, device = choose_backend(backend, torch, dist)
    nbytes = parse_size(size, "--size") if size else DEFAULT_P2P_SIZE["send-recv"]
    cfg = {"backend": be, "device": device, "size_bytes": nbytes, "iters": int(iters), "warmup": int(warmup),
           "progress": progress, "notes": []}
    if env is not None:
        return _run_in_launcher_world(env, cfg, p2p_sendrecv_body, dist, torch, be, timeout_s)
    if nproc is None:
        nproc = torch.cuda.device_count() if device == "cuda" else 2
    if nproc < 2:
        raise InputError(f"--nproc {nproc}: a p2p matrix needs at least 2 processes")
    if device == "cuda" and nproc > torch.cuda.device_count():
        raise InputError(f"--nproc {nproc} is more than the {torch.cuda.device_count()} visible GPU(s)")
    cfg["launcher"] = "spawn"
    return _spawn(_p2p_sendrecv_spawn_worker, nproc, cfg, timeout_s)


# --------------------------------------------------------------------------------------------
# Feeding measurements back into a topology (pure)
def _match_gpu(topo, ep: dict) -> tuple:
    """The topology GPU (:class:`gpucomm.probes.topology.GPU`) an endpoint measured, by UUID, then PCI
    bus id, then CUDA index."""
    from gpucomm.probes.model import normalize_bus_id

    gpus = topo.gpus
    if ep.get("uuid"):
        for g in gpus:
            if g.uuid and g.uuid.lower() == str(ep["uuid"]).lower():
                return g, "uuid"
    if ep.get("pci_bus_id"):
        want = normalize_bus_id(ep["pci_bus_id"])
        for g in gpus:
            if g.pci_bus_id and g.pci_bus_id == want:
                return g, "pci_bus_id"
    idx = ep.get("cuda_index")
    if idx is not None:
        for g in gpus:
            if g.index == idx:
                return g, "index"
    return None, ""


def _slot(d: dict, key: str, empty):
    """``d[key]`` when it holds a ``type(empty)``, else a new ``empty`` put there (null counts as absent)."""
    v = d.get(key)
    if not isinstance(v, type(empty)):
        v = d[key] = empty
    return v


def apply_measurements(doc: dict, result: dict) -> tuple[dict, list]:
    """Write a bench result into a topology document; returns (doc, notes).

    Conventions (docs/ARCHITECTURE.md): direct GPU-GPU links get ``measured_bw_GBps`` (the slower
    direction: a link is as fast as its bottleneck); every measured GPU pair goes to
    ``measured.p2p.GPU<a>.GPU<b> = {bw_GBps, lat_us}`` (pairs through NVSwitch or PCIe have no single
    link to hold it); host<->device to ``measured.host_device``; process-to-process results over
    gloo (no GPUs) to ``measured.process_p2p``; collectives to ``measured.collectives`` (one entry
    per op/backend/world size/dtype, replaced when measured again).  The GPUs are read through the
    typed view; the document is what this writes into."""
    from gpucomm.probes.topology import Topology

    notes: list = []
    measured = _slot(doc, "measured", {})
    if result.get("kind") == "collective":
        coll = _slot(measured, "collectives", [])
        for res in result["results"]:
            if not res["rows"]:
                continue
            entry = {"op": res["op"], "backend": result["backend"], "device": result["device"],
                     "world_size": result["world_size"], "nodes": result["nodes"], "dtype": result["dtype"],
                     "peak_busbw_GBps": res["peak_busbw_GBps"],
                     "rows": [{k: r[k] for k in ("size_bytes", "time_us", "algbw_GBps", "busbw_GBps")}
                              for r in res["rows"]]}
            key = tuple(entry[k] for k in ("op", "backend", "world_size", "nodes", "dtype"))
            coll[:] = [c for c in coll if tuple(c.get(k) for k in ("op", "backend", "world_size", "nodes", "dtype")) != key]
            coll.append(entry)
        coll.sort(key=lambda c: (c["op"], c["backend"], c["world_size"], c["nodes"], c["dtype"]))
        notes.append(f"saved {sum(1 for r in result['results'] if r['rows'])} collective sweep(s) under measured.collectives")
        return doc, notes
    if result.get("kind") != "p2p":
        raise InputError("not a gpucomm bench result", expected=f"schema {SCHEMA}")
    eps = result["endpoints"]
    gpu_eps = [e for e in eps if e.get("cuda_index") is not None]
    if result.get("device") == "cpu" or len(gpu_eps) != len(eps):
        measured["process_p2p"] = {"backend": result.get("backend"), "label": result["label"],
                                   "size_bytes": result["size_bytes"], "bw_GBps": result["bw_GBps"],
                                   "lat_us": result["lat_us"]}
        notes.append("endpoints are processes, not GPUs: saved under measured.process_p2p")
        return doc, notes
    # map each endpoint to a topology GPU
    topo = Topology.of(doc)
    mapping, how = {}, set()
    for e in eps:
        g, via = _match_gpu(topo, e)
        if g is None:
            raise InputError(f"measured device {e['key']} ({e.get('pci_bus_id') or e.get('uuid') or 'no id'}) "
                             "is not a GPU of this topology", expected="a topology of the node that was measured")
        if any(m is g for m in mapping.values()):
            raise InputError(f"two measured devices map to {g.key} of the topology")
        mapping[e["key"]] = g
        how.add(via)
    if how == {"index"}:
        notes.append("matched GPUs by CUDA index (no PCI bus id or UUID): set CUDA_DEVICE_ORDER=PCI_BUS_ID when measuring")
    p2p = _slot(measured, "p2p", {})
    for a, row in result["bw_GBps"].items():
        for b, v in row.items():
            if v is None:
                continue
            ka, kb = mapping[a].key, mapping[b].key
            cell = {"bw_GBps": v}
            lat = result.get("lat_us", {}).get(a, {}).get(b)
            if lat is not None:
                cell["lat_us"] = lat
            _slot(p2p, ka, {})[kb] = cell
    if result.get("host_device"):
        hd = _slot(measured, "host_device", {})
        for k, v in result["host_device"].items():
            hd[mapping[k].key] = dict(v)
    # direct GPU-GPU links: the slower direction
    by_id = {g.id: g.key for g in topo.gpus}
    n_links = 0
    for link in doc.get("links", []):
        if link.get("a") in by_id and link.get("b") in by_id:
            ka, kb = by_id[link["a"]], by_id[link["b"]]
            vals = [p2p.get(ka, {}).get(kb, {}).get("bw_GBps"), p2p.get(kb, {}).get(ka, {}).get("bw_GBps")]
            vals = [v for v in vals if v is not None]
            if vals:
                link["measured_bw_GBps"] = round(min(vals), 4)
                n_links += 1
    notes.append(f"saved {sum(len(r) for r in p2p.values())} GPU pair(s) under measured.p2p"
                 + (f" and measured_bw_GBps on {n_links} direct link(s)" if n_links else ""))
    return doc, notes


__all__ = [
    "SCHEMA", "OPS", "parse_size", "parse_size_sweep", "parse_ops", "message_layout",
    "make_row", "render_collective_table", "render_p2p_table", "launcher_env",
    "run_collective_bench", "run_p2p_bench", "apply_measurements", "import_torch", "NEEDS_TORCH",
]
