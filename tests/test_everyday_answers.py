"""Issue 29, "Wrong or unusable answers": the everyday answers a user acts on in the first hour,
each checked the way the user would meet it (the launch file runs, the tool it is for accepts it,
the exit code says what happened)."""
from __future__ import annotations

import os
import stat
import subprocess

import pytest

from support import run_cli


# ============================================================================================
# 5. Launch files that launch: scripts are written executable
@pytest.mark.parametrize("emit", ["wrapper", "torchrun", "slurm"])
def test_scripts_are_written_executable(tmp_path, emit):
    out = tmp_path / f"{emit}.sh"
    r = run_cli("plan", "example:hgx-h100", "--tp", "8", "--emit", emit, "-o", str(out))
    assert r.code == 0, r.stderr
    mode = stat.S_IMODE(out.stat().st_mode)
    assert mode & stat.S_IXUSR, oct(mode)
    assert out.read_text().startswith("#!")


def test_the_wrapper_runs_as_torchrun_and_mpirun_start_it(tmp_path):
    w = tmp_path / "gpucomm-rank.sh"
    assert run_cli("plan", "example:hgx-h100", "--tp", "8", "--emit", "wrapper", "-o", str(w)).code == 0
    r = subprocess.run(["./gpucomm-rank.sh", "sh", "-c", "echo $LOCAL_RANK $CUDA_VISIBLE_DEVICES"], cwd=tmp_path,
                       env=dict(os.environ, LOCAL_RANK="3", GPUCOMM_CPU_BIND="none"), capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "3"


def test_data_files_are_not_executable(tmp_path):
    out = tmp_path / "ranks.txt"
    assert run_cli("plan", "example:hgx-h100", "--tp", "8", "--emit", "rankfile", "-o", str(out)).code == 0
    assert not stat.S_IMODE(out.stat().st_mode) & 0o111
