"""NCCL's model on multi-node NVLink (docs/MNNVL.md): how long the whole communicator takes, cold.

Each row runs in a fresh Python process (imports, the XML of a GB200/GB300 tray, NCCL's clique
fusion, paths, ring/tree/NVLS searches, postset; some rows also NCCL's tuning model and its choice for
all_reduce at 8 B .. 8 GiB): wall seconds, the process's CPU seconds (user + system, Python's start-up and
imports included: the measure of benchmarks/bench_install.py on a shared machine) and the CPU seconds of
the import and model alone ("model"), medians of ``--runs`` processes:

  * one NVL72 domain: 18 trays, one clique of 72 GPUs (the search within one NVLink system);
  * 2 and 20 racks of 18 trays (cliques joined by the NICs: 144 and 1440 GPUs);
  * 2 trays (the real 2-tray log's machine).

Run: ``.venv/bin/python benchmarks/bench_mnnvl.py [--runs N]``.  Nothing is asserted: the numbers go
into docs/MNNVL.md.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRAYS = ROOT / "fixtures" / "ncclsim" / "trays"

_CHILD = r"""
import json, sys, time
t0 = time.process_time()
from gpucomm.planners.nccl.comm import nccl_comm
xml, nodes, k, tune = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
res = nccl_comm(open(xml).read(), nodes=nodes, nvlink_domain=k)
if tune:
    for i in range(31):
        res.algo("all_reduce", 8 << i)
print(json.dumps({"cpu": time.process_time() - t0, "nNodes": res.n_nodes, "ring": res.graphs["ring"].n_channels,
                  "bw": res.graphs["ring"].bw_intra, "clique": res.clique_size}))
"""


def _run(xml: Path, nodes: int, k: int, tune: bool) -> tuple:
    """(wall seconds, the child's CPU seconds -- user + system, start-up included --, its answer)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", _CHILD, str(xml), str(nodes), str(k), "1" if tune else "0"],
                       capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(p.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="fresh processes per row (the median is reported)")
    args = ap.parse_args()
    rows = [("2 GB300 trays, one clique", "gb300-tray.xml", 2, 2, False),
            ("NVL72: 18 GB200 trays, one clique", "gb200-tray.xml", 18, 18, False),
            ("NVL72 + all_reduce choice at 31 sizes", "gb200-tray.xml", 18, 18, True),
            ("2 racks of 18 GB200 trays (144 GPUs)", "gb200-tray.xml", 36, 18, True),
            ("20 racks of 18 GB200 trays (1440 GPUs)", "gb200-tray.xml", 360, 18, True)]
    print(f"{'what':44s} {'wall s':>7s} {'cpu s':>6s} {'model':>6s}  answer")
    imp = [_cpu([sys.executable, "-c", "import gpucomm.planners.nccl.comm"]) for _ in range(args.runs)]
    print(f"{'python -c import gpucomm.planners.nccl.comm':44s} {statistics.median(w for w, _ in imp):7.3f} "
          f"{statistics.median(c for _, c in imp):6.3f}")
    for label, tray, nodes, k, tune in rows:
        walls, cpus, model, got = [], [], [], None
        for _ in range(args.runs):
            w, c, got = _run(TRAYS / tray, nodes, k, tune)
            walls.append(w)
            cpus.append(c)
            model.append(got["cpu"])
        print(f"{label:44s} {statistics.median(walls):7.3f} {statistics.median(cpus):6.3f} "
              f"{statistics.median(model):6.3f}  {got['ring']} x {got['bw']:g} GB/s ring, nNodes {got['nNodes']}, "
              f"clique {got['clique']}")
    return 0


def _cpu(argv: list) -> tuple:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - t, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


if __name__ == "__main__":
    sys.exit(main())
