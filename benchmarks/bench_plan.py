"""Planning speed (goal: planning for 8192 GPUs in about a second).

Measures, as ratios to a bare ``python -c pass`` start-up on the same machine:
  * ``gpucomm plan example:hgx-h100 --nodes 1024 --tp 8 --pp 4`` (8192 GPUs, full JSON plan: every
    rank, every group, env, torchrun/Slurm/rankfile/wrapper) as a command, and the planning itself
    in-process;
  * the same on a synthetic 1024-node cluster under a 3-level fat tree (switch-aware host order and
    the cross-switch traffic report), in-process;
  * ranking the factorizations of llama-70b on 64 GPUs (8 x HGX H100).

Run: ``.venv/bin/python benchmarks/bench_plan.py`` (uses the bundled example hgx-h100, or a built-in
HGX-like document when the examples are not installed).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _timing import python_baseline, report, time_call, time_cmd  # noqa: E402


def _topology() -> str:
    from gpucomm.probes.examples import list_examples

    if "hgx-h100" in list_examples():
        return "example:hgx-h100"
    sys.path.insert(0, str(HERE.parent / "tests"))
    from test_placement import hgx_doc  # a synthetic HGX-like node

    fd, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(hgx_doc(), f)
    return path


def main() -> None:
    from gpucomm.planners.placement.cluster import load_cluster
    from gpucomm.planners.plan import build_full_plan
    from gpucomm.planners.placement.cluster import synth_cluster
    from gpucomm.probes.load import load_topology

    topo = _topology()
    doc = load_topology(topo)
    gpucomm = [sys.executable, "-m", "gpucomm_cli"]
    base = python_baseline()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "plan.json")
        rows.append(("plan 1024 x hgx-h100 tp8 pp4, 8192 GPUs (CLI, JSON)",
                     time_cmd(gpucomm + ["plan", topo, "--nodes", "1024", "--tp", "8", "--pp", "4",
                                         "--format", "json", "-o", out], runs=3)))
        size = os.path.getsize(out)
        rows.append(("  same, in-process",
                     time_call(lambda: build_full_plan(doc, nodes=1024, tp=8, pp=4), runs=3)))
        rows.append(("  same + --model llama-70b estimate, in-process",
                     time_call(lambda: build_full_plan(doc, nodes=1024, tp=8, pp=4, model="llama-70b,gbs=2048"),
                               runs=3)))
        cdoc, conf = synth_cluster(1024, topo, 3, 32, 8, topology_conf_name="topology.conf")
        Path(tmp, "topology.conf").write_text(conf)
        import yaml

        Path(tmp, "cluster.yaml").write_text(yaml.safe_dump(cdoc))
        cl = load_cluster(os.path.join(tmp, "cluster.yaml"))
        rows.append(("  1024-node fat-tree cluster (hosts+traffic), in-proc",
                     time_call(lambda: build_full_plan(None, cluster=cl, tp=8, pp=4), runs=3)))
        rows.append(("rank llama-70b factorizations, 64 GPUs (CLI)",
                     time_cmd(gpucomm + ["plan", topo, "--nodes", "8", "--model", "llama-70b", "--format", "json"],
                              runs=3)))
        rows.append(("  same, in-process",
                     time_call(lambda: build_full_plan(doc, nodes=8, model="llama-70b"), runs=3)))
    report(rows, base)
    print(f"(8192-GPU plan JSON: {size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
