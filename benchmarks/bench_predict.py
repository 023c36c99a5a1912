"""Benchmark ``predict``: 8B:8GiB sweeps of every collective on 1 node and on 128 nodes, in-process
and as ``gpucomm predict`` subprocesses, printed as ratios to a bare ``python -c pass`` start-up.

Usage: ``.venv/bin/python benchmarks/bench_predict.py [--repeat N]``.  Nothing is asserted; the
numbers go into the README (speed is measured, not tested)."""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOPO = ROOT / "fixtures" / "captures" / "topo" / "17_h100-sxm-x8_12nic.txt"   # 8x H100 NV18, 12 NICs
SWEEP = "8B:8GiB"
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "send_recv")
CASES = ((1, None), (128, 400.0))   # (nodes, --fabric-gbps): the capture has no NIC rates


def _time(fn, repeat: int) -> float:
    best = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best.append(time.perf_counter() - t0)
    return statistics.median(best)


def _env(cached: bool) -> dict:
    """Subprocess environment: ``cached`` drops PYTHONDONTWRITEBYTECODE so that .pyc files are written
    once and reused (a normal install); otherwise every run recompiles every module it imports."""
    env = dict(os.environ)
    if cached:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run(argv: list[str], cached: bool = True) -> None:
    r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT, timeout=120,
                       env=_env(cached))
    if r.returncode != 0:
        raise SystemExit(f"failed: {' '.join(argv)}: {r.stderr.decode(errors='replace')[:300]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    py = sys.executable
    base = _time(lambda: _run([py, "-c", "pass"]), args.repeat)
    print(f"python -c pass: {base * 1000:.1f} ms (= 1.0x)")

    from gpucomm.planners.collectives.predict import build_prediction
    from gpucomm.probes.load import load_topology

    doc = load_topology(str(TOPO))
    for nodes, fabric in CASES:
        def in_process():
            for c in COLLECTIVES:
                build_prediction(doc, c, SWEEP, nodes=nodes, fabric_gbps=fabric)
        t = _time(in_process, args.repeat)
        rows = 31 * len(COLLECTIVES)
        print(f"in-process, {nodes:>3} node(s): {len(COLLECTIVES)} collectives x 31 sizes = {rows} rows "
              f"in {t * 1000:.1f} ms ({t / base:.2f}x python start-up; topology already loaded)")
    gpucomm = [py, "-m", "gpucomm_cli"]
    for nodes, fabric in CASES:
        argv = gpucomm + ["predict", str(TOPO), "--collective", "all_reduce", "--size", SWEEP, "--nodes", str(nodes)]
        if fabric:
            argv += ["--fabric-gbps", str(fabric)]
        _run(argv, cached=True)   # warm-up: writes the bytecode cache
        for cached in (True, False):
            label = "bytecode cached" if cached else "no bytecode cache"
            t = _time(lambda: _run(argv, cached), args.repeat)
            print(f"subprocess `gpucomm predict --size {SWEEP} --nodes {nodes}` ({label}): "
                  f"{t * 1000:.1f} ms ({t / base:.2f}x)")
        t = _time(lambda: _run(argv + ["--format", "json"]), args.repeat)
        print(f"subprocess, --format json (bytecode cached): {t * 1000:.1f} ms ({t / base:.2f}x)")
    print(f"(median of {args.repeat}; {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
