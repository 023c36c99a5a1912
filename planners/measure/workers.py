"""What each rank of a benchmark runs, torch handed in by the caller (:mod:`gpucomm.planners.measure.world`
imports it): the collective sweep (:func:`collective_body`), the rank-to-rank send/recv matrix
(:func:`p2p_sendrecv_body`), the GPU-to-GPU copy matrix of one process (:func:`p2p_cuda_copy`), and the
functions ``torch.multiprocessing`` starts in each spawned worker (at module level: spawn pickles them
by name)."""
from __future__ import annotations

import socket
from typing import Optional

from gpucomm.planners.measure.results import DTYPES, SCHEMA, dtype_size, make_row, message_layout, summarise_collective
from gpucomm.planners.measure.world import run_spawned, worker_guard
from gpucomm.probes import units


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


def collective_spawn_worker(local_rank: int, cfg: dict) -> None:
    worker_guard(_collective_spawn_body, local_rank, cfg)


def _collective_spawn_body(local_rank: int, cfg: dict) -> None:
    run_spawned(collective_body, local_rank, cfg)


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


def p2p_sendrecv_spawn_worker(local_rank: int, cfg: dict) -> None:
    worker_guard(_p2p_sendrecv_spawn_body, local_rank, cfg)


def _p2p_sendrecv_spawn_body(local_rank: int, cfg: dict) -> None:
    run_spawned(p2p_sendrecv_body, local_rank, cfg)


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


__all__ = ["collective_body", "p2p_sendrecv_body", "p2p_cuda_copy", "collective_spawn_worker", "p2p_sendrecv_spawn_worker"]
