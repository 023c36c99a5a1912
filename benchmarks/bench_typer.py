"""typer versions side by side: the same gpucomm wheel installed once per typer release, its start-up
timed the way bench_install.py times it (fresh processes, round-robin, medians), and optionally the CLI
contract tests run under each release.  The evidence for pyproject.toml's typer range
(docs/DEPENDENCIES.md).

    python benchmarks/bench_typer.py                          # typer 0.28.0 against 0.29.2 (medians of 15)
    python benchmarks/bench_typer.py --versions 0.16.0 0.28.0 0.29.2 --tests
    python benchmarks/bench_typer.py --venvs DIR              # keep/reuse the environments in DIR

Each release is installed over the wheel's own dependencies with pip (so typer brings the click or
pydantic it asks for, even outside pyproject.toml's range: pip warns, and that is the point).
``--tests`` runs tests/test_cli_contract.py and tests/test_layout.py from this checkout against each
environment (pytest, hypothesis and jsonschema are installed there too).  Nothing is asserted.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_install import ROOT, _env, build_venv, round_robin  # noqa: E402

ROWS = [
    ("python -c pass", None),
    ('python -c "import typer"', None),
    ("gpucomm --help", ["--help"]),
    ("gpucomm show example:hgx-h100 --format json", ["show", "example:hgx-h100", "--format", "json"]),
    ("gpucomm rings example:hgx-h100", ["rings", "example:hgx-h100"]),
]


def prepare(work: Path, version: str, tests: bool) -> Path:
    """A venv in ``work/<version>`` with this checkout's wheel and typer ``version``."""
    py = build_venv(work / version / "venv", fresh=False)
    extra = ["pytest", "hypothesis", "jsonschema"] if tests else []
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", f"typer=={version}", *extra],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"installing typer {version} failed:\n{r.stderr[-2000:]}")
    return py


def installed(py: Path) -> str:
    r = subprocess.run([str(py), "-m", "pip", "list", "--format", "freeze"], capture_output=True, text=True)
    keep = ("typer==", "click==", "pydantic==")
    return ", ".join(x for x in r.stdout.split() if x.lower().startswith(keep))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--versions", nargs="+", default=["0.28.0", "0.29.2"], help="typer releases to compare")
    ap.add_argument("--runs", type=int, default=15, help="timed rounds; the median is reported (default 15)")
    ap.add_argument("--venvs", type=Path, help="keep the environments in DIR (reused when present)")
    ap.add_argument("--tests", action="store_true", help="also run the CLI contract tests under each release")
    a = ap.parse_args(argv)
    ctx = None if a.venvs else tempfile.TemporaryDirectory(prefix="gpucomm-typer-")
    work = a.venvs.resolve() if a.venvs else Path(ctx.name)
    try:
        pys = {v: prepare(work, v, a.tests) for v in a.versions}
        rows = []
        for v, py in pys.items():
            for label, args in ROWS:
                argv_ = [str(py), "-c", "pass" if label.endswith("pass") else "import typer"] if args is None \
                    else [str(py.parent / "gpucomm"), *args]
                rows.append((f"{v} {label}", argv_))
        med = {k: statistics.median(t) * 1000 for k, t in round_robin(rows, a.runs, work).items()}
        print(f"## start-up by typer release, wheel install (median of {a.runs} ms, round-robin)\n")
        for v, py in pys.items():
            print(f"* typer {v}: {installed(py)}")
        print("\n| command | " + " | ".join(f"typer {v}" for v in pys) + " |")
        print("|---|" + "---|" * len(pys))
        for label, _ in ROWS:
            print(f"| `{label}` | " + " | ".join(f"{med[f'{v} {label}']:.0f}" for v in pys) + " |")
        if a.tests:
            print("\n## tests/test_cli_contract.py + tests/test_layout.py\n")
            for v, py in pys.items():
                r = subprocess.run([str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "not wheel",
                                    "tests/test_cli_contract.py", "tests/test_layout.py"],
                                   cwd=ROOT, capture_output=True, text=True, env=_env())
                last = (r.stdout.strip().splitlines() or ["?"])[-1]
                print(f"* typer {v} ({installed(py)}): {last}")
    finally:
        if ctx is not None:
            ctx.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
