"""Shared test helpers: run the CLI in-process, locate fixtures and ../shared captures."""
from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
HOSTS = FIXTURES / "hosts"
CAPTURES = FIXTURES / "captures"          # copies of ../shared/captures used by tests (with SOURCES.md)
SHARED_CAPTURES = ROOT.parent / "shared" / "captures"


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    def json(self):
        return json.loads(self.stdout)


def run_cli(*args: str) -> Result:
    """Run ``gpucomm ARGS`` in-process; returns exit code, stdout, stderr."""
    from gpucomm.app import run

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = run([str(a) for a in args])
    return Result(code, out.getvalue(), err.getvalue())


@pytest.fixture
def cli():
    return run_cli


def pytest_addoption(parser):
    parser.addoption("--run-gpu", action="store_true", default=False,
                     help="run the @pytest.mark.gpu tests (need an NVIDIA GPU, its driver and NVML)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-gpu"):
        return
    skip = pytest.mark.skip(reason="needs a GPU: run with --run-gpu on a GPU node")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
