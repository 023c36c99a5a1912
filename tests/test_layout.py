"""The layout docs/ARCHITECTURE.md describes, checked: one import name, the package list, the
import rules between layers, where NVML/networkx/torch may be imported, and that the document
names every module."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from support import ROOT

FOLDERS = {"gpucomm_cli": "gpucomm", "probes": "gpucomm.probes", "planners": "gpucomm.planners"}
CLI_MODULES = ("gpucomm.app", "gpucomm.commands", "gpucomm.render", "gpucomm.settings", "gpucomm.exitcodes",
               "gpucomm.__main__")
# planners subpackages, lowest first: a subpackage may import only those before it (and probes)
PLANNER_LAYERS = ["nccl", "collectives", "placement", "launch"]
PLANNER_LEAVES = {"health", "measure"}     # import probes only (and themselves)
PLANNER_TOP = {"plan", "fleet"}            # composers above every subpackage (planners/plan.py, planners/fleet.py)


def _modules() -> dict:
    """{module name: path} of every module in the three folders."""
    out = {}
    for folder, pkg in FOLDERS.items():
        for p in sorted((ROOT / folder).rglob("*.py")):
            rel = p.relative_to(ROOT / folder).with_suffix("")
            parts = [x for x in rel.parts if x != "__init__"]
            out[".".join([pkg] + parts)] = p
    return out


MODULES = _modules()


def _imports(path: Path) -> list:
    """(module imported, at top level?) for every import statement of a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = set(id(n) for n in tree.body)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, id(node) in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                out.append(("." * node.level + (node.module or ""), id(node) in top))
            elif node.module:
                out.append((node.module, id(node) in top))
                out += [(f"{node.module}.{a.name}", id(node) in top) for a in node.names]
    return out


def test_package_list_matches_the_folders():
    tomllib = pytest.importorskip("tomllib")   # Python 3.11+

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for folder, pkg in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([pkg] + list(rel.parts)))
    assert listed == found


@pytest.mark.parametrize("name", sorted(MODULES))
def test_import_rules(name):
    path = MODULES[name]
    imports = _imports(path)
    bad = []
    for mod, at_top in imports:
        root = mod.split(".")[0]
        if mod.startswith("."):
            bad.append(f"relative import {mod} (use gpucomm.… names)")
        if root in ("probes", "planners", "gpucomm_cli"):
            bad.append(f"imports {mod}: only the gpucomm name exists")
        if name.startswith("gpucomm.probes") and (mod.startswith("gpucomm.planners") or mod.startswith(CLI_MODULES)):
            bad.append(f"probes import {mod} (probes are below planners and the CLI)")
        if name.startswith("gpucomm.planners") and mod.startswith(CLI_MODULES):
            bad.append(f"planners import {mod} (the CLI is above planners)")
        if root in ("pynvml",) and name != "gpucomm.probes.sources.nvml":
            bad.append("imports pynvml (only gpucomm.probes.sources.nvml does)")
        if root in ("networkx", "torch") and at_top:
            bad.append(f"imports {root} at module level (lazy, inside the function that needs it)")
        if root == "torch" and not name.startswith("gpucomm.planners.measure"):
            bad.append("imports torch (only gpucomm.planners.measure does)")
        m = re.match(r"gpucomm\.planners\.(\w+)", name)
        t = re.match(r"gpucomm\.planners\.(\w+)", mod)
        if m and t and m.group(1) != t.group(1) and m.group(1) not in PLANNER_TOP:
            mine, theirs = m.group(1), t.group(1)
            if mine in PLANNER_LEAVES or theirs in PLANNER_LEAVES or theirs in PLANNER_TOP:
                bad.append(f"{mine} imports {theirs}")
            elif mine in PLANNER_LAYERS and PLANNER_LAYERS.index(theirs) > PLANNER_LAYERS.index(mine):
                bad.append(f"{mine} imports {theirs}, a layer above it")
    assert not bad, f"{path.relative_to(ROOT)}: " + "; ".join(sorted(set(bad)))


def test_architecture_document_names_every_module():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    missing = []
    for name, path in MODULES.items():
        if path.name == "__init__.py":
            continue
        if path.name not in text and name not in text:
            missing.append(str(path.relative_to(ROOT)))
    assert not missing, "docs/ARCHITECTURE.md does not mention " + ", ".join(missing)


def test_no_module_outside_the_package_names_old_roots():
    """benchmarks, tools and fixtures scripts import gpucomm.… too."""
    bad = []
    for folder in ("benchmarks", "tools", "fixtures", "tests"):
        for p in (ROOT / folder).rglob("*.py"):
            if "hosts" in p.parts:
                continue
            for mod, _ in _imports(p):
                if mod.split(".")[0] in ("probes", "planners", "gpucomm_cli"):
                    bad.append(f"{p.relative_to(ROOT)}: {mod}")
    assert not bad, bad


def build_wheel(tmp_path) -> Path:
    """A wheel of the repository, built in ``tmp_path`` (skips where no wheel can be built)."""
    import shutil

    src = tmp_path / "src"     # setuptools builds in the source tree (build/, *.egg-info): not in the checkout
    for name in ("gpucomm_cli", "probes", "planners"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path),
           str(src)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0 and ("No module named" in r.stderr or "bdist_wheel" in r.stderr):
        # no `wheel` next to this setuptools: let pip build in an isolated environment instead
        r = subprocess.run([c for c in cmd if c != "--no-build-isolation"], capture_output=True, text=True,
                           timeout=300)
        if r.returncode != 0:
            pytest.skip("cannot build a wheel here: " + (r.stderr.strip().splitlines() or ["?"])[-1])
    assert r.returncode == 0, r.stderr
    return next(tmp_path.glob("gpucomm-*.whl"))


@pytest.mark.slow
def test_wheel_installs_only_gpucomm_at_the_top(tmp_path):
    """A wheel built from the repo puts one name at the top of site-packages."""
    wheel = build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert len(tops) == 2 and "gpucomm" in tops and any(t.endswith(".dist-info") for t in tops), tops
    for must in ("gpucomm/__init__.py", "gpucomm/app.py", "gpucomm/probes/topology.py",
                 "gpucomm/probes/schema/topology.schema.json", "gpucomm/planners/plan.py"):
        assert must in names
    # the bundled examples, in the packed form example:<name> reads (fixtures/pack_examples.py)
    assert "gpucomm/probes/examples/index.json" in names and "gpucomm/probes/examples/hgx-h100.json" in names
