"""Ring search timing (goal: ring search for 72 GPUs well under a second).

Times, as a ratio to a bare ``python -c pass`` start-up on the same machine:
  * in-process ``search_rings`` (paths + search, NCCL reference off and on) for 8 GPUs (HGX H100),
    16 GPUs (2 x HGX H100 through their NICs) and 72 GPUs (an NVL72 domain: 72 GPUs, one NVSwitch,
    sm 100);
  * the whole command, ``python -m gpucomm_cli rings TOPO --format json``, in a subprocess.

Run: ``.venv/bin/python benchmarks/bench_rings.py [--runs N]``.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _timing import python_baseline, report, time_call, time_cmd  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="repetitions per measurement (median is reported)")
    args = ap.parse_args()

    from gpucomm.planners.nccl.graph import build_graph
    from gpucomm.planners.nccl.search import nvswitch_document
    from gpucomm.planners.collectives.rings import search_rings
    from gpucomm.probes.model import dumps_json

    cases = [
        ("8 GPUs (HGX H100)", nvswitch_document(8, 90, 18, nics=8), 1),
        ("16 GPUs (2 x HGX H100, 8 NICs)", nvswitch_document(8, 90, 18, nics=8), 2),
        ("72 GPUs (NVL72, sm100)", nvswitch_document(72, 100, 18), 1),
    ]
    base = python_baseline(args.runs)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, doc, nodes in cases:
            G = build_graph(doc)
            plan = search_rings(G, nodes=nodes, reference=False)
            rows.append((f"{name}: graph", time_call(lambda d=doc: build_graph(d), args.runs)))
            rows.append((f"{name}: search", time_call(lambda: search_rings(G, nodes=nodes, reference=False),
                                                      args.runs)))
            rows.append((f"{name}: search + NCCL reference",
                         time_call(lambda: search_rings(G, nodes=nodes), max(1, args.runs // 2))))
            path = Path(tmp) / f"topo{len(rows)}.json"
            path.write_text(dumps_json(doc))
            argv = [sys.executable, "-m", "gpucomm_cli", "rings", str(path), "--nodes", str(nodes), "--format", "json"]
            rows.append((f"{name}: gpucomm rings (process)", time_cmd(argv, max(1, args.runs // 2))))
            print(f"# {name}: {len(plan.channels)} channels, {plan.total_bw:g} GB/s total "
                  f"(per-channel cap {plan.cap:g} GB/s)", file=sys.stderr)
            out = json.loads(__import__("subprocess").run(argv, capture_output=True, text=True).stdout)
            assert out["schema"] == "gpucomm.rings/v1"
    report(rows, base)
    return 0


if __name__ == "__main__":
    sys.exit(main())
