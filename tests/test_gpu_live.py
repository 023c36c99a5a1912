"""Checks on real hardware (``pytest --run-gpu`` on a node with NVIDIA GPUs): the live probe agrees
with the driver's own view, and the NCCL benchmark runs.  Skipped everywhere else."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from support import run_cli

pytestmark = pytest.mark.gpu


def _smi(*args: str) -> str:
    return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=60, check=True).stdout


def test_live_probe_sees_every_gpu_nvml_sees():
    r = run_cli("probe", "--format", "json")
    assert r.code == 0, r.stderr
    doc = r.json()
    nvml = next(s for s in doc["sources"] if s["name"] == "nvml")
    assert nvml["status"] in ("ok", "partial"), nvml
    bus_ids = sorted(line.strip().lower()[-12:] for line in
                     _smi("--query-gpu=pci.bus_id", "--format=csv,noheader").splitlines() if line.strip())
    assert sorted(g["pci_bus_id"][-12:] for g in doc["gpus"]) == bus_ids


def test_live_matrix_agrees_with_nvidia_smi_topo():
    """Our matrix (from NVML + sysfs) against nvidia-smi's own, cell by cell on the GPU rows."""
    from gpucomm.probes.formats.smi_topo import parse_topo_text

    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi not on PATH")
    theirs = parse_topo_text(_smi("topo", "-m"), path="nvidia-smi topo -m")["matrix"]
    ours = run_cli("probe", "--sources", "nvml,sysfs,ib,net,numa", "--format", "json").json()["matrix"]
    gpus = [k for k in theirs if k.startswith("GPU")]
    assert {(a, b): ours[a][b] for a in gpus for b in gpus} == {(a, b): theirs[a][b] for a in gpus for b in gpus}


def test_nccl_collective_bench_runs():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    n = min(torch.cuda.device_count(), 8)
    r = run_cli("bench", "collective", "--backend", "nccl", "--nproc", str(max(n, 1)), "--sizes", "1MiB:16MiB",
                "--iters", "5", "--warmup", "2", "--ops", "all_reduce", "--format", "json")
    assert r.code == 0, r.stderr
