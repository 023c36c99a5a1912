"""The processes a benchmark runs in, torch.distributed's own machinery (no home-made transport): torch
imported (:func:`import_torch`), the backend chosen (``nccl`` on GPUs, ``gloo`` on CPU), and either the world
of a launcher that is already running joined (torchrun, srun: :func:`launcher_env`) or workers started on
this node (``torch.multiprocessing.start_processes`` with a ``FileStore`` rendezvous in a private temporary
directory: :func:`spawn`), a failed worker reported in one line."""
from __future__ import annotations

import os
from typing import Callable, Optional

from gpucomm.probes.errors import GpucommError, InputError

NEEDS_TORCH = "gpucomm bench needs torch: pip install 'gpucomm[bench]'"


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
def spawn(fn: Callable, nproc: int, cfg: dict, timeout_s: float) -> dict:
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


def worker_guard(body: Callable, local_rank: int, cfg: dict) -> None:
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


def run_in_launcher_world(env: dict, cfg: dict, body, dist, torch, backend: str, timeout_s: float):
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


def run_spawned(body, local_rank: int, cfg: dict) -> None:
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


__all__ = ["NEEDS_TORCH", "launcher_env", "import_torch", "TorchMissing", "BenchError", "choose_backend", "spawn",
           "worker_guard", "run_in_launcher_world", "run_spawned"]
