"""Fabric and fleet speed at cluster scale, from a wheel install (as bench_install.py builds it).

    python benchmarks/bench_fabric.py                  # build, install, time (medians of 3)
    python benchmarks/bench_fabric.py --venv DIR       # reuse/refresh the venv in DIR

Rows (wall and CPU seconds, peak RSS of the command's process; goals from issue 28, compared with CPU
seconds because on a shared machine wall time also counts other people's work):

* ``fabric IB --emit slurm``: a 10,000-node ``ibnetdiscover`` capture (written by ``gpucomm synth
  --format ibnetdiscover``: 10,000 hosts, 313 leaves, 40 spines, one core, 30,000 links, 6 MB) read
  and turned into topology.conf -- goal <= 3 s;
* ``fabric IB --format json``: the same into the fabric document;
* ``cluster DIR --fabric IB``: 10,000 saved node topologies (bench_install's planted fleet: copies of
  example:hgx-h100 with three odd nodes) joined with that fabric into one cluster document -- goal
  <= 20 s, memory bounded (one parse per distinct text, one embedded topology per class);
* ``select --nodes 512`` and ``plan --tp 8 --pp 4`` on that cluster document.

Nothing is asserted; the README quotes the output.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_install import _env, _node_docs, build_venv, print_rows  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", type=Path, help="reuse/refresh this venv (default: a fresh temporary one)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=10000)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gpucomm-bench-fabric-") as t:
        tmp = Path(t)
        venv = args.venv or tmp / "venv"
        py = build_venv(venv, fresh=args.venv is None)
        gpucomm = [str(py.parent / "gpucomm")]
        ib = tmp / "ib.out"
        with open(ib, "w") as f:
            subprocess.run(gpucomm + ["synth", "example:hgx-h100", "-N", str(args.nodes), "--format", "ibnetdiscover"],
                           check=True, stdout=f, env=_env())
        files = _node_docs(py, tmp, args.nodes)
        out, cluster = tmp / "out", tmp / "cluster.json"
        rows = [
            (f"fabric <{args.nodes}-node ibnetdiscover, {ib.stat().st_size / 1e6:.1f} MB> --emit slurm", 3.0,
             ["fabric", ib, "--emit", "slurm", "-o", out, "--force"]),
            (f"fabric <{args.nodes}-node ibnetdiscover> --format json", None,
             ["fabric", ib, "--format", "json", "-o", out, "--force"]),
            (f"cluster <{args.nodes} node topologies> --fabric <ibnetdiscover> -o cluster.json", 20.0,
             ["cluster", files[0].parent, "--fabric", ib, "-o", cluster, "--force"]),
            ("select --nodes 512 --cluster cluster.json", None,
             ["select", "--nodes", "512", "--cluster", cluster, "--format", "json", "-o", out, "--force"]),
            ("plan --cluster cluster.json --tp 8 --pp 4 --dp 32 (1024 nodes), JSON", None,
             ["plan", "--cluster", cluster, "--tp", "8", "--pp", "4", "--dp", "32", "--format", "json", "-o", out, "--force"]),
        ]
        print(f"\n## fabric and fleet at {args.nodes} nodes, wheel install (median of {args.runs}; wall s, CPU s, peak RSS)\n")
        print_rows(gpucomm, rows, args.runs, tmp)
        print(f"\n(cluster.json: {cluster.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
