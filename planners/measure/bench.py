"""``gpucomm bench``: measure collectives and point-to-point bandwidth with torch.distributed -- the two
entry points, :func:`run_collective_bench` and :func:`run_p2p_bench`, and their flags, checked before torch
is imported (a typo is reported without it).

Backends are torch.distributed's own: ``nccl`` on GPUs, ``gloo`` on CPU (so that the whole path is tested
on a machine without GPUs).  The modules beside this one, one job each:

* :mod:`~gpucomm.planners.measure.results`: the ``gpucomm.bench/v1`` result and nccl-tests' formulas (no torch);
* :mod:`~gpucomm.planners.measure.world`: the processes: torch imported, the backend chosen, a launcher's world
  joined (``torchrun``/``srun`` across nodes) or workers spawned on this node;
* :mod:`~gpucomm.planners.measure.workers`: what each rank runs;
* :mod:`~gpucomm.planners.measure.save`: measured numbers written back into a topology (``--save``).

The tables (nccl-tests' layout, p2pBandwidthLatencyTest's) are :mod:`gpucomm.render.bench`'s.
"""
from __future__ import annotations

from typing import Optional

from gpucomm.planners.measure.results import OPS, dtype_size
from gpucomm.planners.measure.workers import (collective_body, collective_spawn_worker, p2p_cuda_copy,
                                              p2p_sendrecv_body, p2p_sendrecv_spawn_worker)
from gpucomm.planners.measure.world import choose_backend, import_torch, launcher_env, run_in_launcher_world, spawn
from gpucomm.probes import units
from gpucomm.probes.errors import InputError

# nccl-tests defaults: -w 5 warm-up iterations, -n 20 timed iterations.
DEFAULT_WARMUP = 5
DEFAULT_ITERS = 20
DEFAULT_SIZES = {"nccl": "1KiB:1GiB", "gloo": "1KiB:16MiB"}
DEFAULT_P2P_SIZE = {"cuda-copy": 64 << 20, "send-recv": 4 << 20}
MAX_SIZE = 1 << 40  # 1 TiB: anything larger is a typo, not a benchmark


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
        return run_in_launcher_world(env, cfg, collective_body, dist, torch, be, timeout_s)
    if nproc is None:
        nproc = torch.cuda.device_count() if device == "cuda" else 2
        cfg["notes"].append(f"--nproc not given: {nproc} process(es) "
                            + ("(one per visible GPU)" if device == "cuda" else "(gloo default)"))
    if nproc < 1:
        raise InputError(f"--nproc {nproc} must be >= 1")
    if device == "cuda" and nproc > torch.cuda.device_count():
        raise InputError(f"--nproc {nproc} is more than the {torch.cuda.device_count()} visible GPU(s)")
    cfg["launcher"] = "spawn"
    return spawn(collective_spawn_worker, nproc, cfg, timeout_s)


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
        return run_in_launcher_world(env, cfg, p2p_sendrecv_body, dist, torch, be, timeout_s)
    if nproc is None:
        nproc = torch.cuda.device_count() if device == "cuda" else 2
    if nproc < 2:
        raise InputError(f"--nproc {nproc}: a p2p matrix needs at least 2 processes")
    if device == "cuda" and nproc > torch.cuda.device_count():
        raise InputError(f"--nproc {nproc} is more than the {torch.cuda.device_count()} visible GPU(s)")
    cfg["launcher"] = "spawn"
    return spawn(p2p_sendrecv_spawn_worker, nproc, cfg, timeout_s)


__all__ = ["DEFAULT_WARMUP", "DEFAULT_ITERS", "parse_size", "parse_size_sweep", "parse_ops", "run_collective_bench",
           "run_p2p_bench"]
