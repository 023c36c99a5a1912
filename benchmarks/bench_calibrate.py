"""Benchmark ``gpucomm calibrate`` and ``predict --calibration``.

* ``gpucomm calibrate example:polaris`` on the 30 published Polaris tables (fixtures/captures/
  nccltests/scaling/0[0-3]?_polaris_*), in-process (the fit and NCCL's graph searches of both node
  counts) and as a subprocess (the whole command: start-up, topology, parsing, fit, JSON);
* what ``--calibration PROFILE.json`` adds to ``gpucomm predict``: the same prediction with and
  without the profile, in-process (reading the profile included) and as subprocesses.

Usage: ``.venv/bin/python benchmarks/bench_calibrate.py [--repeat N]``.  Nothing is asserted; the
numbers go into the README (speed is measured, not tested)."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import python_baseline, time_call, time_cmd  # noqa: E402

SCALING = ROOT / "fixtures" / "captures" / "nccltests" / "scaling"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    files = sorted(SCALING.glob("0[0-3]?_polaris_*.txt"))
    assert len(files) == 30, len(files)
    base = python_baseline(args.repeat)
    print(f"python -c pass: {base * 1000:.1f} ms (= 1.0x); {os.cpu_count()} CPUs; median of {args.repeat}")

    from gpucomm.commands.calibrate import read_calibration
    from gpucomm.planners.collectives.calibrate import build_calibration
    from gpucomm.planners.collectives.predict import build_prediction
    from gpucomm.probes.load import load_topology
    from gpucomm.probes.model import dumps_json

    texts = [(str(f), f.read_text(encoding="utf-8")) for f in files]

    def fit():
        return build_calibration(load_topology("example:polaris"), texts, "example:polaris")

    t = time_call(fit, args.repeat)
    print(f"in-process calibrate, 30 Polaris tables (topology load + NCCL graph searches + fit): {t:.2f} s "
          f"({t / base:.1f}x)")
    with tempfile.TemporaryDirectory() as tmp:
        prof = Path(tmp) / "polaris.json"
        prof.write_text(dumps_json(fit()), encoding="utf-8")
        py = [sys.executable, "-m", "gpucomm_cli"]
        t = time_cmd(py + ["calibrate", "example:polaris", *map(str, files), "-o", str(Path(tmp) / "x.json"),
                        "--force"],   # every repeat rewrites the profile (without --force the second one refuses)
                     args.repeat)
        print(f"subprocess `gpucomm calibrate example:polaris <30 tables> -o x.json`: {t:.2f} s ({t / base:.1f}x)")

        doc = load_topology("example:polaris")
        kw = dict(nodes=8)
        plain = time_call(lambda: build_prediction(doc, "all_reduce", "8B:8GiB", **kw), args.repeat)
        cal = time_call(lambda: build_prediction(doc, "all_reduce", "8B:8GiB", calibration=read_calibration(str(prof)),
                                                 calibration_source=str(prof), **kw), args.repeat)
        print(f"in-process predict 8 nodes, 8B:8GiB: {plain * 1000:.1f} ms; with --calibration (read + apply): "
              f"{cal * 1000:.1f} ms; added {(cal - plain) * 1000:+.1f} ms")
        argv = py + ["predict", "example:polaris", "--nodes", "8", "--size", "8B:8GiB"]
        t0 = time_cmd(argv, args.repeat)
        t1 = time_cmd(argv + ["--calibration", str(prof)], args.repeat)
        print(f"subprocess predict: {t0 * 1000:.0f} ms; with --calibration {t1 * 1000:.0f} ms; added "
              f"{(t1 - t0) * 1000:+.0f} ms")


if __name__ == "__main__":
    main()
