"""The examples in docstrings (``>>>``) are part of the suite: every module of the package is
imported and its doctests run."""
from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import gpucomm
import gpucomm.planners
import gpucomm.probes


def _modules() -> list[str]:
    """Every module of the three folders (package-dir mapping: walk each package's own path);
    ``gpucomm.__main__`` runs the CLI on import and has no examples."""
    names = set()
    for pkg in (gpucomm, gpucomm.probes, gpucomm.planners):
        names.add(pkg.__name__)
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            names.add(info.name)
    return sorted(n for n in names if n != "gpucomm.__main__")


MODULES = _modules()


def test_every_module_is_found():
    assert {"gpucomm.probes.units", "gpucomm.probes.facts", "gpucomm.probes.topology",
            "gpucomm.planners.nccl.names", "gpucomm.app"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    mod = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(mod, name) if t.examples]
    for t in tests:
        runner.run(t)
    res = runner.summarize(verbose=False)
    assert res.failed == 0, f"{res.failed} docstring example(s) of {name} failed (run python -m doctest -v)"
