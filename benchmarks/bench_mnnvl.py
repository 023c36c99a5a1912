"""NCCL's model on multi-node NVLink (docs/MNNVL.md): how long the whole communicator takes, cold.

Each row runs in a fresh Python process (imports, the XML of a GB200/GB300 tray, NCCL's clique
fusion, paths, ring/tree/NVLS searches, postset; ``--tune`` rows also NCCL's tuning model and its choice
for all_reduce at 8 B .. 8 GiB), timed from the outside (wall) and inside (the model alone, CPU):

  * one NVL72 domain: 18 trays, one clique of 72 GPUs (the search within one NVLink system);
  * 2 and 20 racks of 18 trays (cliques joined by the NICs: 144 and 1440 GPUs);
  * 2 trays (the real 2-tray log's machine).

Run: ``.venv/bin/python benchmarks/bench_mnnvl.py [--runs N]``.  Nothing is asserted: the numbers go
into docs/MNNVL.md.
"""
from __future__ import annotations

import argparse
import json
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
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", _CHILD, str(xml), str(nodes), str(k), "1" if tune else "0"],
                       capture_output=True, text=True, check=True)
    return time.perf_counter() - t, json.loads(p.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="fresh processes per row (the median is reported)")
    args = ap.parse_args()
    rows = [("2 GB300 trays, one clique", "gb300-tray.xml", 2, 2, False),
            ("NVL72: 18 GB200 trays, one clique", "gb200-tray.xml", 18, 18, False),
            ("NVL72 + all_reduce choice at 31 sizes", "gb200-tray.xml", 18, 18, True),
            ("2 racks of 18 GB200 trays (144 GPUs)", "gb200-tray.xml", 36, 18, True),
            ("20 racks of 18 GB200 trays (1440 GPUs)", "gb200-tray.xml", 360, 18, True)]
    base = statistics.median(_wall([sys.executable, "-c", "import gpucomm.planners.nccl.comm"]) for _ in range(3))
    print(f"{'what':44s} {'wall s':>8s} {'cpu s':>7s}  answer")
    print(f"{'python -c import gpucomm.planners.nccl.comm':44s} {base:8.3f}")
    for label, tray, nodes, k, tune in rows:
        walls, cpus, got = [], [], None
        for _ in range(args.runs):
            w, got = _run(TRAYS / tray, nodes, k, tune)
            walls.append(w)
            cpus.append(got["cpu"])
        print(f"{label:44s} {statistics.median(walls):8.3f} {statistics.median(cpus):7.3f}  "
              f"{got['ring']} x {got['bw']:g} GB/s ring, nNodes {got['nNodes']}, clique {got['clique']}")
    return 0


def _wall(argv: list) -> float:
    t = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - t


if __name__ == "__main__":
    sys.exit(main())
