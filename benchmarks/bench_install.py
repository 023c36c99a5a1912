"""Speed as users get it: build the wheel, install it into a temporary virtual environment, and time
every command from there in one run, side by side with the floor of any typer CLI.

    python benchmarks/bench_install.py                  # build, install, time (medians of 7)
    python benchmarks/bench_install.py --venv DIR       # reuse/refresh the venv in DIR (faster reruns)
    python benchmarks/bench_install.py --no-cluster     # only the start-up table
    python benchmarks/bench_install.py --importtime     # also: the slowest imports of each command

Why a wheel: an editable install (``pip install -e .``) adds an import hook that makes even
``python -c pass`` about 2.5x slower, which flatters every ratio.  Each command runs as a fresh
process (``VENV/bin/gpucomm``, cwd outside the checkout, bytecode compiled at install as pip does).
The rows of one table are timed round-robin (one warm-up round, then ``--runs`` rounds), so a busy
moment on the machine hits every row alike; the figure is the median.

Start-up table: wall-time ratios to ``python -c "import typer"`` (the floor of a typer CLI) and to
``python -c pass``, with the goal of each row.  Cluster-scale table: wall and CPU seconds (user +
system, the issue's measure: on a shared machine wall time also counts other people's work) and
peak memory (the child's ``ru_maxrss``) of commands on 10^3-10^5 GPUs, and of ``diff``/``doctor``
over 1000 and 10,000 saved node topologies (written into the temporary folder first).  Nothing is
asserted: the README quotes the output.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (label, argv after `gpucomm`, goal as x `import typer`)
STARTUP = [
    ("gpucomm --help", ["--help"], 1.3),
    ("gpucomm show example:hgx-h100 --format json", ["show", "example:hgx-h100", "--format", "json"], 2.0),
    ("gpucomm rings example:hgx-h100", ["rings", "example:hgx-h100"], 3.0),
    ("gpucomm predict example:hgx-h100 --size 8B:8GiB", ["predict", "example:hgx-h100", "--size", "8B:8GiB"], 3.0),
    ("gpucomm plan example:hgx-h100 --nodes 2 --tp 8 --pp 2",
     ["plan", "example:hgx-h100", "--nodes", "2", "--tp", "8", "--pp", "2"], 3.0),
]
# more rows, no goal in the issue: what users run next
STARTUP_MORE = [
    ("gpucomm examples --format json", ["examples", "--format", "json"]),
    ("gpucomm doctor --from example:hgx-h100-degraded --format json",
     ["doctor", "--from", "example:hgx-h100-degraded", "--format", "json"]),
    ("gpucomm trees example:hgx-h100 --nodes 4 --format json", ["trees", "example:hgx-h100", "--nodes", "4",
                                                               "--format", "json"]),
    ("gpucomm show <nvidia-smi topo -m capture> --format json",
     ["show", str(ROOT / "fixtures" / "captures" / "topo" / "17_h100-sxm-x8_12nic.txt"), "--format", "json"]),
    ("gpucomm show <NCCL topology XML> --format json",
     ["show", str(ROOT / "fixtures" / "captures" / "ncclxml" / "oci-H100-topology.xml"), "--format", "json"]),
    ("gpucomm probe --format json (this machine, live /sys)", ["probe", "--format", "json"]),
]


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["COLUMNS"] = "160"
    return env


def build_venv(venv: Path, fresh: bool) -> Path:
    """Build the wheel of this checkout and install it (with its dependencies) into ``venv``."""
    py = venv / "bin" / "python"
    wheels = venv.parent / "wheel"
    shutil.rmtree(wheels, ignore_errors=True)
    src = venv.parent / "src"   # setuptools builds in the source tree (build/, *.egg-info): a copy of it
    shutil.rmtree(src, ignore_errors=True)
    for name in ("gpucomm_cli", "probes", "planners"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(src)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:  # no index for an isolated build: use this interpreter's setuptools/wheel
        r = subprocess.run(cmd[:4] + ["--no-build-isolation"] + cmd[4:], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("building the wheel failed:\n" + r.stderr[-2000:])
    whl = next(wheels.glob("gpucomm-*.whl"))
    if fresh or not py.exists():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        cmd = [str(py), "-m", "pip", "install", "-q", str(whl)]
    else:
        cmd = [str(py), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(whl)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("installing the wheel failed:\n" + r.stderr[-2000:])
    print(f"# wheel {whl.name} ({whl.stat().st_size / 1024:.0f} KiB) installed in {venv}", file=sys.stderr)
    return py


def run_once(argv: list, cwd: Path, stdout=subprocess.DEVNULL) -> tuple:
    """(wall s, CPU s, peak RSS MiB, exit code) of one process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, cwd=cwd, env=_env(), stdout=stdout, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, p.returncode


def round_robin(rows: list, runs: int, cwd: Path) -> dict:
    """{label: [wall seconds]} with one untimed warm-up round."""
    out = {label: [] for label, _ in rows}
    for i in range(runs + 1):
        for label, argv in rows:
            wall, _cpu, _rss, code = run_once(argv, cwd)
            if code not in (0, 5):
                raise SystemExit(f"failed ({code}): {' '.join(map(str, argv))}")
            if i:
                out[label].append(wall)
    return out


def startup_table(py: Path, runs: int, cwd: Path) -> list:
    gpucomm = [str(py.parent / "gpucomm")]
    rows = [("python -c pass", [str(py), "-c", "pass"]),
            ('python -c "import typer"', [str(py), "-c", "import typer"])]
    rows += [(label, gpucomm + args) for label, args, _ in STARTUP]
    rows += [(label, gpucomm + args) for label, args in STARTUP_MORE]
    times = round_robin(rows, runs, cwd)
    med = {k: statistics.median(v) for k, v in times.items()}
    base, typer_ = med["python -c pass"], med['python -c "import typer"']
    goals = {label: goal for label, _, goal in STARTUP}
    print(f"\n## start-up, wheel install (median of {runs}, round-robin; {os.cpu_count()} CPUs)\n")
    print("| command | ms | x `import typer` | goal | x `python -c pass` |")
    print("|---|---|---|---|---|")
    result = []
    for label, _ in rows:
        ratio = med[label] / typer_
        goal = goals.get(label)
        mark = "" if goal is None else (f"<= {goal:g} {'ok' if ratio <= goal else 'MISSED'}")
        print(f"| `{label}` | {med[label] * 1000:.0f} | {ratio:.2f} | {mark} | {med[label] / base:.1f} |")
        result.append((label, med[label], ratio, goal))
    return result


def importtime(py: Path, cwd: Path, top: int = 8) -> None:
    """The slowest imports (cumulative, top-level modules) of each start-up row."""
    print("\n## slowest imports (python -X importtime, one run each; cumulative us)\n")
    for label, args, _ in STARTUP:
        code = ("import sys; from gpucomm.app import run; sys.argv[0] = 'gpucomm'; "
                f"sys.exit(run({args!r}))")
        r = subprocess.run([str(py), "-X", "importtime", "-c", code], cwd=cwd, env=_env(),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        rows = []
        for line in r.stderr.splitlines():
            if not line.startswith("import time:") or "cumulative" in line:
                continue
            _self, cum, name = line.split("|")
            depth = (len(name) - len(name.lstrip())) // 2
            if depth == 0:
                rows.append((int(cum), name.strip()))
        rows.sort(reverse=True)
        print(f"{label}: " + ", ".join(f"{n} {c / 1000:.0f} ms" for c, n in rows[:top]))


# ------------------------------------------------------------------------------------------------
# cluster scale
def _node_docs(py: Path, tmp: Path, count: int) -> list:
    """``count`` saved node topologies (JSON, as `gpucomm probe --format json -o` writes them): copies
    of example:hgx-h100 under their own hostnames, with three planted outliers (a degraded node, a
    node with a NIC on the wrong NUMA node, a node with one GPU missing)."""
    folder = tmp / f"nodes{count}"
    if folder.is_dir() and len(list(folder.iterdir())) == count:
        return sorted(folder.iterdir())
    folder.mkdir(exist_ok=True)
    script = r"""
import copy, json, sys
from pathlib import Path
from gpucomm.probes.load import load_topology
from gpucomm.probes.model import dumps_json
folder, count = Path(sys.argv[1]), int(sys.argv[2])
good = load_topology("example:hgx-h100")
bad = load_topology("example:hgx-h100-degraded")
numa = copy.deepcopy(good); numa["nics"][0]["numa_node"] = 1
short = copy.deepcopy(good); short["gpus"] = short["gpus"][:-1]
odd = {count // 3: bad, count // 2: numa, count - 1: short}
for i in range(count):
    d = copy.deepcopy(odd.get(i, good))
    d["host"]["hostname"] = f"node{i:05d}"
    (folder / f"node{i:05d}.json").write_text(dumps_json(d), encoding="utf-8")
"""
    subprocess.run([str(py), "-c", script, str(folder), str(count)], check=True, env=_env())
    return sorted(folder.iterdir())


def cluster_table(py: Path, runs: int, tmp: Path, big: bool, only: "str | None" = None) -> None:
    gpucomm = [str(py.parent / "gpucomm")]
    out = tmp / "out.json"
    rows = [
        ("plan --model llama-70b, 4096 GPUs (512 x hgx-h100), JSON", 2.0,
         ["plan", "example:hgx-h100", "--nodes", "512", "--model", "llama-70b", "--format", "json", "-o", out, "--force"]),
        ("trees --nodes 4096 (32768 ranks), JSON", None,
         ["trees", "example:hgx-h100", "--nodes", "4096", "--format", "json", "-o", out, "--force"]),
        ("plan 32768 GPUs (4096 x hgx-h100, the --nodes bound) tp8 pp4, JSON", None,
         ["plan", "example:hgx-h100", "--nodes", "4096", "--tp", "8", "--pp", "4", "--format", "json", "-o", out, "--force"]),
        ("plan 8192 GPUs (1024 x hgx-h100) tp8 pp4, JSON", None,
         ["plan", "example:hgx-h100", "--nodes", "1024", "--tp", "8", "--pp", "4", "--format", "json", "-o", out, "--force"]),
    ]
    # the NVL72 rack (issue 27): NCCL's fused system of 18 GB300 trays, 8 racks planned, 20 racks predicted
    rows += [
        ("rings, one NVL72 domain (18 x gb300-nvl72 trays, MNNVL), JSON", 0.5,
         ["rings", "example:gb300-nvl72", "--nodes", "18", "--format", "json", "-o", out, "--force"]),
        ("plan --model llama-405b, 8 NVL72 racks (576 GPUs), JSON", 2.0,
         ["plan", "example:gb300-nvl72", "--nodes", "144", "--nvlink-domain", "18", "--model", "llama-405b",
          "--format", "json", "-o", out, "--force"]),
        ("predict all_reduce, 20 NVL72 racks (1440 GPUs), JSON", 1.0,
         ["predict", "example:gb300-nvl72", "--nodes", "360", "--nvlink-domain", "18", "--format", "json", "-o", out,
          "--force"]),
    ]
    # (one host of 72 or 288 NVSwitch GPUs is past the per-host bound, docs/LIMITS.md: the NVL72 rows above
    # are the 72-GPU NVLink domain as it is built, 18 trays of 4)
    for count, goal in ((1000, 2.0), (10000, 20.0)) if big else ((1000, 2.0),):
        if only and not any(only in f"{what} over {count} saved node topologies" for what in ("diff", "doctor")):
            continue
        files = _node_docs(py, tmp, count)
        lst = [str(f) for f in files]
        rows.append((f"diff over {count} saved node topologies, JSON", goal,
                     ["diff", *lst, "--format", "json", "-o", out, "--force"]))
        rows.append((f"diff over {count} saved node topologies, table", goal, ["diff", *lst]))
        rows.append((f"doctor over {count} saved node topologies, JSON", goal,
                     ["doctor", *lst, "--format", "json", "-o", out, "--force"]))
    if only:
        rows = [r for r in rows if only in r[0]]
    print(f"\n## cluster scale, wheel install (median of {runs}; wall s, CPU s, peak RSS)\n")
    print_rows(gpucomm, rows, runs, tmp)


def print_rows(gpucomm: list, rows: list, runs: int, cwd: Path) -> None:
    """A markdown table of (label, goal in CPU s or None, argv after ``gpucomm``) rows: medians of
    ``runs`` wall and CPU seconds, the peak RSS."""
    print("| what | wall s | CPU s | peak MiB | goal (CPU s) |")
    print("|---|---|---|---|---|")
    for label, goal, args in rows:
        res = []
        for _ in range(runs):
            wall, cpu, rss, code = run_once(gpucomm + [str(a) for a in args], cwd)
            if code not in (0, 5):
                raise SystemExit(f"failed ({code}): {label}")
            res.append((wall, cpu, rss))
        wall = statistics.median(r[0] for r in res)
        cpu = statistics.median(r[1] for r in res)
        rss = max(r[2] for r in res)
        mark = "" if goal is None else f"<= {goal:g} {'ok' if cpu <= goal else 'MISSED'}"
        print(f"| `{label}` | {wall:.2f} | {cpu:.2f} | {rss:.0f} | {mark} |", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7, help="timed rounds; the median is reported (default 7)")
    ap.add_argument("--venv", type=Path, help="keep the virtual environment in DIR/venv (reused when present)")
    ap.add_argument("--fresh", action="store_true", help="recreate the venv even when it exists")
    ap.add_argument("--no-cluster", action="store_true", help="skip the cluster-scale table")
    ap.add_argument("--small", action="store_true", help="cluster scale without the 10,000-node rows")
    ap.add_argument("--cluster-runs", type=int, default=None, help="rounds for the cluster-scale rows "
                    "(default: --runs)")
    ap.add_argument("--importtime", action="store_true", help="also print each command's slowest imports")
    ap.add_argument("--only", metavar="TEXT", help="only the cluster-scale rows whose label contains TEXT "
                    "(e.g. '72 GPUs'), after the start-up table unless --no-startup")
    ap.add_argument("--no-startup", action="store_true", help="skip the start-up table")
    a = ap.parse_args(argv)
    tmp_ctx = None
    if a.venv:
        work = a.venv.resolve()
        work.mkdir(parents=True, exist_ok=True)
    else:
        tmp_ctx = tempfile.TemporaryDirectory(prefix="gpucomm-bench-")
        work = Path(tmp_ctx.name)
    try:
        py = build_venv(work / "venv", a.fresh)
        check = subprocess.run([str(py), "-c", "import gpucomm, sys; print(gpucomm.__file__)"], cwd=work,
                               capture_output=True, text=True, env=_env())
        if str(work) not in check.stdout:
            raise SystemExit(f"gpucomm does not import from the venv: {check.stdout.strip()}")
        ver = subprocess.run([str(py), "-c", "import sys, typer; print(sys.version.split()[0], typer.__version__)"],
                             capture_output=True, text=True, env=_env()).stdout.split()
        print(f"# Python {ver[0]}, typer {ver[1]}, {os.cpu_count()} CPUs, load average "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; gpucomm from the wheel in {work}")
        if not a.no_startup:
            startup_table(py, a.runs, work)
        if a.importtime:
            importtime(py, work)
        if not a.no_cluster:
            cluster_table(py, a.cluster_runs or a.runs, work, big=not a.small, only=a.only)
    finally:
        if tmp_ctx is not None:
            tmp_ctx.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
