"""`gpucomm --help` and probes of recorded hosts, as ratios to a bare Python start-up.

Run: python benchmarks/bench_cli.py   (goal from the brief: within 3x of python start-up)
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import python_baseline, report, time_cmd  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    gpucomm = [sys.executable, "-m", "gpucomm_cli"]
    os.chdir(ROOT)
    base = python_baseline()
    rows = [("gpucomm --help", time_cmd(gpucomm + ["--help"]))]
    hosts = ROOT / "fixtures" / "hosts"
    for name in ("hgx-h100", "cpu-only"):
        if (hosts / name).is_dir():
            rows.append((f"gpucomm probe --from example:{name} --format json",
                         time_cmd(gpucomm + ["probe", "--from", f"example:{name}", "--format", "json"])))
    cap = ROOT / "fixtures" / "captures" / "topo" / "17_h100-sxm-x8_12nic.txt"
    rows.append(("gpucomm show <nvidia-smi topo -m capture> --format json",
                 time_cmd(gpucomm + ["show", str(cap), "--format", "json"])))
    xml = ROOT / "fixtures" / "captures" / "ncclxml" / "oci-H100-topology.xml"
    rows.append(("gpucomm show <NCCL XML dump> --format json", time_cmd(gpucomm + ["show", str(xml), "--format", "json"])))
    rows.append(("gpucomm probe (this machine, live /sys) --format json",
                 time_cmd(gpucomm + ["probe", "--format", "json"])))
    report(rows, base)


if __name__ == "__main__":
    main()
