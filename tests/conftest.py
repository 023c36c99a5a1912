"""pytest hooks and fixtures only; shared helpers live in support.py.

The suite writes nothing into the checkout: no bytecode caches (set here, before the test modules
are imported), no hypothesis example database, no pytest cache (``-p no:cacheprovider`` in
pyproject.toml); tests write their files under pytest's ``tmp_path``."""
from __future__ import annotations

import atexit
import shutil
import sys
import tempfile

sys.dont_write_bytecode = True

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402
from hypothesis.configuration import set_hypothesis_home_dir  # noqa: E402

from support import run_cli  # noqa: E402

_HYPOTHESIS_HOME = tempfile.mkdtemp(prefix="gpucomm-hypothesis-")   # not ./.hypothesis
atexit.register(shutil.rmtree, _HYPOTHESIS_HOME, True)
set_hypothesis_home_dir(_HYPOTHESIS_HOME)
settings.register_profile("gpucomm", database=None)
settings.load_profile("gpucomm")


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
