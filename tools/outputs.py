"""Run every command on every bundled example and every capture in fixtures/, and write what each
printed (exit code, stdout, stderr) into one folder, so that two trees can be compared with
``diff -r``: the check that a refactoring or a speed-up leaves the output unchanged.

    python tools/outputs.py OUT_DIR [--quick]

Runs the CLI in-process (the same entry point as the console script).  Not part of the suite:
the suite checks behaviour; this shows every byte that changed between two versions.
"""
from __future__ import annotations

import argparse
import io
import os
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "fixtures" / "captures"


def _run():
    try:
        from gpucomm.cli.app import run  # the package layout after the restructuring
    except ImportError:
        from gpucomm.app import run  # type: ignore[no-redef]
    return run


def inputs() -> list[tuple[str, str]]:
    names = sorted(p.name for p in (ROOT / "fixtures" / "hosts").iterdir() if p.is_dir())
    out = [(f"example-{n}", f"example:{n}") for n in names]
    for sub in ("topo", "ncclxml", "rocm"):
        for p in sorted((CAPTURES / sub).iterdir()):
            if p.name != "SOURCES.md":
                out.append((f"{sub}-{p.stem}", str(p)))
    return out


COMMANDS = [
    ("show-table", ["show", "{t}"]),
    ("show-json", ["show", "{t}", "--format", "json"]),
    ("show-matrix", ["show", "{t}", "--format", "matrix"]),
    ("show-tree", ["show", "{t}", "--format", "tree"]),
    ("show-dot", ["show", "{t}", "--format", "dot"]),
    ("show-ncclxml", ["show", "{t}", "--format", "nccl-xml"]),
    ("paths", ["paths", "{t}", "--format", "json"]),
    ("paths-nccl", ["paths", "{t}", "--rule", "nccl"]),
    ("rings", ["rings", "{t}"]),
    ("rings-json", ["rings", "{t}", "--format", "json"]),
    ("rings-2n", ["rings", "{t}", "--nodes", "2", "--format", "json"]),
    ("trees-4n", ["trees", "{t}", "--nodes", "4", "--format", "json"]),
    ("predict", ["predict", "{t}", "--size", "8B:8GiB:x8"]),
    ("predict-ag", ["predict", "{t}", "--collective", "all_gather", "--size", "1MiB:1GiB:x32", "--format", "json"]),
    ("predict-2n", ["predict", "{t}", "--nodes", "2", "--size", "8B:8GiB:x8", "--format", "json"]),
    ("plan", ["plan", "{t}", "--format", "json"]),
    ("plan-2n", ["plan", "{t}", "--nodes", "2", "--emit", "env"]),
    ("plan-model", ["plan", "{t}", "--nodes", "4", "--model", "llama-8b", "--format", "json"]),
    ("select", ["select", "{t}", "--count", "2", "--format", "json"]),
    ("doctor", ["doctor", "--from", "{t}", "--format", "json"]),
]
QUICK = {"show-json", "rings-json", "predict", "plan", "doctor", "select", "rings-2n"}

EXTRA = [
    ("compare-09", ["predict", "example:hgx-h100", "--compare", str(CAPTURES / "nccltests/09_h100-x8_1node_allreduce_cluster01.txt")]),
    ("compare-02", ["predict", str(CAPTURES / "topo/31_rtxa6000-x8_nv4_collapsed-spaces.txt"), "--compare", str(CAPTURES / "nccltests/02_rtxa6000-x8_1node_allreduce.txt")]),
    ("rings-compare-log", ["rings", str(CAPTURES / "ncclxml/panlichen-rtx3090-8gpu-topo.xml"), "--compare", str(CAPTURES / "nccllogs/panlichen-rtx3090-4node-log.log")]),
    ("diff-examples", ["diff", "example:hgx-h100", "example:hgx-h100-degraded", "--format", "json"]),
    ("plan-slurm", ["plan", "example:hgx-h100", "--nodes", "2", "--tp", "8", "--pp", "2", "--emit", "slurm"]),
    ("plan-torchrun", ["plan", "example:dgx-a100", "--nodes", "2", "--tp", "4", "--emit", "torchrun"]),
    ("plan-rankfile", ["plan", "example:dgx-a100", "--nodes", "2", "--tp", "4", "--emit", "rankfile"]),
    ("examples", ["examples", "--format", "json"]),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--quick", action="store_true", help="a subset of the commands")
    ap.add_argument("--only", help="only commands whose name contains this")
    a = ap.parse_args(argv)
    run = _run()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("COLUMNS", "160")
    jobs = []
    for tname, t in inputs():
        for cname, args in COMMANDS:
            if a.quick and cname not in QUICK:
                continue
            jobs.append((f"{tname}/{cname}", [x.format(t=t) for x in args]))
    jobs += [(f"extra/{n}", args) for n, args in EXTRA]
    for name, args in jobs:
        if a.only and a.only not in name:
            continue
        o, e = io.StringIO(), io.StringIO()
        with redirect_stdout(o), redirect_stderr(e):
            code = run(args)
        p = out / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.with_suffix(".txt").write_text(f"$ gpucomm {' '.join(args)}\nexit {code}\n--- stdout\n{o.getvalue()}"
                                         f"--- stderr\n{e.getvalue()}", encoding="utf-8")
    print(f"{len(jobs)} runs written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
