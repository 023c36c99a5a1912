"""The layout docs/ARCHITECTURE.md describes, checked: one import name, the package list, the
import rules between layers, no import cycle between modules, no private name of another
distribution, where NVML/networkx/torch may be imported, and that the document names every module."""
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
               "gpucomm.usage", "gpucomm.__main__")
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
        if name.startswith("gpucomm.render") and mod.startswith(("gpucomm.commands", "gpucomm.app")):
            bad.append(f"render imports {mod} (commands call render, never the other way)")
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


def import_graph() -> dict:
    """{module: the gpucomm modules it imports}, from the source: every ``import``/``from ... import``
    statement, at module level or inside a function (a lazy import closes a cycle as well)."""
    graph = {}
    for name, path in MODULES.items():
        graph[name] = {mod for mod, _ in _imports(path) if mod in MODULES and mod != name}
    return graph


def import_cycles(graph: dict) -> list:
    """The strongly connected components of ``graph`` with more than one module (each a sorted list;
    Tarjan's algorithm, iterative), in sorted order."""
    index: dict = {}
    low: dict = {}
    stack: list = []
    on_stack: set = set()
    out = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def cycle_path(graph: dict, comp: list) -> list:
    """One cycle through the first module of ``comp`` (a strongly connected component), shortest
    first: [a, b, ..., a]."""
    start, inside = comp[0], set(comp)
    prev = {start: None}
    queue = [start]
    for v in queue:
        for w in sorted(graph[v] & inside):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return path[::-1] + [start]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return comp   # pragma: no cover - a component always holds a cycle


# Cycles other helpers are taking apart (issue 26): allowed until their branches are merged, then
# removed from this list (an entry that no longer matches a cycle fails the test, so it is removed).
KNOWN_CYCLES: list = [
    # none: a cycle found here is a bug (each entry would be a set of modules, with the reason it stays)
]


def test_cycle_finder_finds_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e", "d"}, "f": {"g"}, "g": {"f"}}
    assert import_cycles(graph) == [["a", "b", "c"], ["f", "g"]]
    assert cycle_path(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]
    assert cycle_path(graph, ["f", "g"]) == ["f", "g", "f"]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    """No module imports, directly or through others, a module that imports it back: the modules
    form layers (docs/ARCHITECTURE.md), so each can be read, tested and replaced from the bottom up."""
    graph = import_graph()
    cycles = import_cycles(graph)
    bad = [" -> ".join(cycle_path(graph, c)) for c in cycles if not any(set(c) <= k for k in KNOWN_CYCLES)]
    stale = [sorted(k) for k in KNOWN_CYCLES if not any(set(c) <= k for c in cycles)]
    assert not bad, "import cycles: " + "; ".join(bad)
    assert not stale, f"KNOWN_CYCLES lists cycles that are gone: remove {stale}"


def _private(parts) -> bool:
    return any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts)


def private_names(path: Path) -> list:
    """The names starting with ``_`` a file takes from modules outside gpucomm: imported, or reached as
    an attribute of an imported module (``typer._click.exceptions``).  Dunders (``__version__``) are public."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bad = []
    modules = set()     # names bound to another distribution's modules by `import x` / `import x.y as z`
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] != "gpucomm":
                    modules.add(a.asname or a.name.split(".")[0])
                    if _private(a.name.split(".")):
                        bad.append(f"import {a.name}")
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module.split(".")[0] not in ("gpucomm",
                                                                                                      "__future__"):
            for a in node.names:
                if _private(node.module.split(".") + [a.name]):
                    bad.append(f"from {node.module} import {a.name}")
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}    # a.b of a.b.c
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:
            chain = [node.attr]
            v = node.value
            while isinstance(v, ast.Attribute):
                chain.append(v.attr)
                v = v.value
            if isinstance(v, ast.Name) and v.id in modules and _private(chain):
                bad.append(f"{v.id}." + ".".join(reversed(chain)))
    return sorted(set(bad))


def test_private_names_are_found(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("import typer\nimport os.path as osp\nfrom typer import _click, Exit\nfrom typer._click.globals import "
                 "get_current_context\nimport torch._C\nfrom gpucomm.probes.load import _TooLong\n"
                 "from __future__ import annotations\nx = typer._click.exceptions\ny = typer.__version__\n"
                 "z = osp._joinrealpath\n")
    assert private_names(p) == ["from typer import _click", "from typer._click.globals import get_current_context",
                                "import torch._C", "osp._joinrealpath", "typer._click.exceptions"]


def test_no_private_name_of_another_distribution():
    """A name starting with ``_`` is private to its distribution and changes without notice (typer 0.26
    moved click into ``typer._click``): no gpucomm module uses one."""
    bad = [f"{path.relative_to(ROOT)}: {', '.join(found)}" for path in MODULES.values() if (found := private_names(path))]
    assert not bad, "private names of other distributions: " + "; ".join(bad)


# ---- planners read the typed view (probes/topology.py), never the raw topology document ----------
# Keys of a topology document (gpucomm.topology/v1) and of its GPU/NIC/NUMA records that a view reads.
DOC_KEYS = {"gpus", "nics", "links", "switches", "numa_nodes", "matrix", "host", "hosts", "pci_devices", "measured",
            "sources", "nccl", "imex", "nccl_graph", "fabric", "pcie", "ports", "cpus"}
# Where a planner may still handle the raw document, "file" (every function) or "file::function".
# Composers and loaders, which build or load documents rather than read a machine:
DOCUMENT_COMPOSERS = {
    # loads saved node texts; checks a text's identifiers against its parsed document (content keys)
    # and sums up nodes that are never viewed (fleets of 10,000 read each distinct text once)
    "planners/health/stream.py",
    # writes measured bandwidths into the topology document (bench --save)
    "planners/measure/save.py",
    # a copy of the document whose names NCCL's XML can hold, before the view and the XML are built
    "planners/nccl/pinning.py::_writable_names",
    # reads fabric documents (gpucomm.fabric/v1: switches, hosts, blocks), which have no typed view
    "planners/placement/fabric.py",
}


def _is_doc(node) -> bool:
    """A name for a topology document: ``doc``, ``document``, ``*_doc`` (``fabric_doc`` is a fabric)."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return name is not None and name != "fabric_doc" and (name in ("doc", "document") or name.endswith("_doc"))


def document_reads(source: str) -> list:
    """[(function, line, expression)] where the code indexes a topology document: ``doc["gpus"]``,
    ``doc.get("host")`` (a document name with a document key), or anything reached through a view's raw
    parts, ``topo.doc[...]``/``topo.doc.get(...)``, ``gpu.rec[...]``/``gpu.rec.get(...)``."""
    out = []

    def visit(node, where):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            where = f"{where}.{node.name}" if where else node.name
        recv = key = None
        if isinstance(node, ast.Subscript) and not isinstance(node.ctx, ast.Store) \
                and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            recv, key = node.value, node.slice.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            recv, key = node.func.value, node.args[0].value
        if recv is not None and ((isinstance(recv, ast.Attribute) and recv.attr in ("doc", "rec"))
                                 or (_is_doc(recv) and key in DOC_KEYS)):
            out.append((where or "<module>", node.lineno, ast.unparse(node)))
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(ast.parse(source), "")
    return out


def test_document_reads_are_found():
    src = ("def f(doc, topo, view, fabric_doc, plan):\n"
           "    a = doc['gpus']; b = doc.get('host') or {}; c = topo.doc.get('nics')\n"
           "    d = view.topo.doc['links']; e = topo.gpus[0].rec.get('c2c')\n"
           "    ok = [topo.host.get('hostname'), fabric_doc['hosts'], plan.get('gpus'), doc.get(k)]\n"
           "    doc['summary'] = 1\n"
           "class C:\n"
           "    def g(self):\n"
           "        return self.topo_doc.get('matrix')\n")
    assert [(w, ln) for w, ln, _ in document_reads(src)] == [("f", 2), ("f", 2), ("f", 2), ("f", 3), ("f", 3),
                                                             ("C.g", 8)]


def test_planners_read_the_typed_view_not_the_document():
    """Planners are pure functions over :class:`Topology` (docs/ARCHITECTURE.md): a planner module that
    indexes a topology document -- outside the composers listed above -- fails here."""
    bad, listed = [], set()
    for path in sorted((ROOT / "planners").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for where, line, expr in document_reads(path.read_text(encoding="utf-8")):
            allowed = {rel, f"{rel}::{where}"} & DOCUMENT_COMPOSERS
            if allowed:
                listed |= allowed
            else:
                bad.append(f"{rel}:{line} ({where}): {expr}")
    stale = sorted(DOCUMENT_COMPOSERS - listed)
    assert not bad, "planners index the topology document instead of its view: " + "; ".join(bad)
    assert not stale, f"allow-listed but reading no document any more: remove {stale}"


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
