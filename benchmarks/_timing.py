"""Shared timing helpers for the benchmark scripts: wall time of a command, as a ratio to a bare
Python start-up measured the same way on the same machine."""
from __future__ import annotations

import statistics
import subprocess
import sys
import time
from typing import Sequence


def time_cmd(argv: Sequence[str], runs: int = 7) -> float:
    """Median wall seconds of running argv (output discarded)."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def python_baseline(runs: int = 7) -> float:
    return time_cmd([sys.executable, "-c", "pass"], runs)


def time_call(fn, runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def report(rows, base: float) -> None:
    print(f"{'what':58s} {'seconds':>9s} {'x python start-up':>18s}")
    print(f"{'python -c pass (baseline)':58s} {base:9.4f} {1.0:18.2f}")
    for name, secs in rows:
        print(f"{name:58s} {secs:9.4f} {secs / base:18.2f}")
