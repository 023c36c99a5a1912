"""Ring search timing (goal: ring search for 72 GPUs well under a second).

Times, as a ratio to a bare ``python -c pass`` start-up on the same machine:
  * in-process: NCCL's system and paths of the node, then ``search_rings`` (system + paths + search,
    NCCL reference off and on) for 8 GPUs (HGX H100),
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
sys.path.insert(0, str(HERE.parent / "tests"))     # support.nvswitch_document

from _timing import python_baseline, report, time_call, time_cmd  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="repetitions per measurement (median is reported)")
    args = ap.parse_args()

    from support import nvswitch_document
    from gpucomm.planners.collectives.rings import search_rings
    from gpucomm.probes.model import dumps_json
    from gpucomm.probes.topology import Topology

    cases = [
        ("8 GPUs (HGX H100)", nvswitch_document(8, 90, 18, nics=8), 1),
        ("16 GPUs (2 x HGX H100, 8 NICs)", nvswitch_document(8, 90, 18, nics=8), 2),
        ("72 GPUs (NVL72, sm100)", nvswitch_document(72, 100, 18), 1),
    ]
    base = python_baseline(args.runs)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, doc, nodes in cases:
            G = Topology.of(doc)
            plan = search_rings(G, nodes=nodes, reference=False)
            # NCCL's system and paths of the node (pinned XML, system, ncclTopoComputePaths), uncached
            rows.append((f"{name}: NCCL's system", time_call(lambda d=doc: _fresh_system(d), args.runs)))
            rows.append((f"{name}: system + paths + search",
                         time_call(lambda: _fresh_search(G, nodes, False), args.runs)))
            rows.append((f"{name}: search + NCCL reference",
                         time_call(lambda: _fresh_search(G, nodes, True), max(1, args.runs // 2))))
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


def _fresh_system(doc):
    """NCCL's system and paths of the node, built again (the cache emptied first)."""
    from gpucomm.planners.nccl import sysview

    sysview._cached.cache_clear()
    return sysview.node_system(doc)


def _fresh_search(doc, nodes: int, reference: bool):
    """search_rings with NCCL's system built again (as every command run does)."""
    from gpucomm.planners.collectives.rings import search_rings
    from gpucomm.planners.nccl import sysview

    sysview._cached.cache_clear()
    return search_rings(doc, nodes=nodes, reference=reference)


if __name__ == "__main__":
    sys.exit(main())
