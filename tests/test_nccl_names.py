"""The names and constants NCCL's model owns are defined once (planners/nccl/names.py; NCCL's words the
readers of NCCL's files need too -- path types, graph patterns, kvConvertToInt -- in probes/model.py,
which names.py gives NCCL's C names): no other module of the package spells them.  Found by scanning
the source (ast), so a new copy fails here whatever it is called."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from support import ROOT
from gpucomm.planners.nccl import names
from gpucomm.probes.model import GraphPattern, PathType

FOLDERS = ("gpucomm_cli", "probes", "planners")
OWNERS = {Path("planners/nccl/names.py"), Path("probes/model.py")}

PATH_NAMES = {t.name for t in PathType}
# path type names nvidia-smi does not also use (its matrix codes PIX/PXB/PHB/SYS are NCCL's too)
NCCL_ONLY = PATH_NAMES - {"PIX", "PXB", "PHB", "SYS"}
PATTERNS = {p.name for p in GraphPattern}
# what defines a constant of NCCL's model: an assignment to one of these names
OWNED_NAME = re.compile(r"^(PATH_(%s)|LINK_(LOC|NVL|C2C|PCI|SYS|NET)|(PATTERN_)?(%s)|\w*MAX_DEVS_PER_NIC|MAXCHANNELS)$"
                        % ("|".join(PATH_NAMES) + "|PORT", "|".join(PATTERNS)))


def _sources() -> list:
    out = []
    for folder in FOLDERS:
        for p in sorted((ROOT / folder).rglob("*.py")):
            out.append(p.relative_to(ROOT))
    return out


def _strings(node) -> list:
    """The string constants of a literal tuple/list/set (or a dict's keys and values)."""
    elts = list(node.keys) + list(node.values) if isinstance(node, ast.Dict) else node.elts
    return [e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]


def _prefix_match(node) -> bool:
    """A loop or comprehension over (key, value) pairs, or over a constant key table (an UPPER_CASE name
    or a literal), testing ``s.startswith(key)``: kvConvertToInt again."""
    it = node.iter
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr == "items":
        it = it.func.value
    pairs = isinstance(node.target, ast.Tuple) and len(node.target.elts) == 2
    table = isinstance(it, (ast.Tuple, ast.List, ast.Dict)) or \
        (isinstance(it, (ast.Name, ast.Attribute)) and re.fullmatch(r"_?[A-Z][A-Z0-9_]*", getattr(it, "id", None)
                                                                    or getattr(it, "attr", "")) is not None)
    if not (pairs or table):
        return False
    if isinstance(node, ast.For):
        targets = [node.target] if isinstance(node.target, ast.Name) else \
            list(node.target.elts) if isinstance(node.target, ast.Tuple) else []
        body = node.body
    elif isinstance(node, ast.comprehension):
        targets = [node.target] if isinstance(node.target, ast.Name) else \
            list(node.target.elts) if isinstance(node.target, ast.Tuple) else []
        body = [node]
    else:
        return False
    keys = {t.id for t in targets if isinstance(t, ast.Name)}
    parent = getattr(node, "_parent", None)
    scope = body + ([parent] if parent is not None else [])
    for stmt in scope:
        for sub in ast.walk(stmt):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "startswith" \
                    and len(sub.args) == 1 and isinstance(sub.args[0], ast.Name) and sub.args[0].id in keys:
                return True
    return False


def _violations(path: Path) -> list:
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            child._parent = node
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
            words = set(_strings(node))
            if len(words & PATH_NAMES) >= 4 and len(words & NCCL_ONLY) >= 2:
                out.append(f"line {node.lineno}: NCCL's path types spelled ({', '.join(sorted(words & PATH_NAMES))})")
            if len(words & PATTERNS) >= 2 or len({w.upper() for w in words} & {"BALANCED_TREE", "SPLIT_TREE"}) >= 2:
                out.append(f"line {node.lineno}: NCCL's graph patterns spelled ({', '.join(sorted(words))})")
        elif isinstance(node, ast.ClassDef):
            attrs = {t.id for st in node.body if isinstance(st, ast.Assign) for t in st.targets
                     if isinstance(t, ast.Name)}
            if len(attrs & PATH_NAMES) >= 4 or len(attrs & PATTERNS) >= 3:
                out.append(f"line {node.lineno}: class {node.name} defines NCCL's path types or graph patterns")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            flat = []
            for t in targets:
                flat += list(t.elts) if isinstance(t, ast.Tuple) else [t]
            for t in flat:
                if isinstance(t, ast.Name) and OWNED_NAME.match(t.id):
                    out.append(f"line {node.lineno}: defines {t.id}")
        elif isinstance(node, (ast.For, ast.comprehension)) and _prefix_match(node):
            out.append(f"line {getattr(node, 'lineno', getattr(node.target, 'lineno', 0))}: prefix matching over a "
                       "key table (NCCL's kvConvertToInt: use names.kv / probes.model.nccl_kv)")
    return out


@pytest.mark.parametrize("path", [p for p in _sources() if p not in OWNERS], ids=str)
def test_no_module_spells_what_nccls_model_owns(path):
    bad = _violations(path)
    assert not bad, f"{path}: " + "; ".join(bad)


def test_the_owners_define_them():
    """The scan finds the definitions where they are (so it would find a copy elsewhere)."""
    found = {str(p): _violations(p) for p in OWNERS}
    text = " ".join(found["planners/nccl/names.py"])
    for name in ("PATH_LOC", "PATH_PORT", "RING", "BALANCED_TREE", "LINK_PCI", "NCCL_NET_MAX_DEVS_PER_NIC",
                 "MAXCHANNELS"):
        assert f"defines {name}" in text, name
    model = " ".join(found["probes/model.py"])
    assert "class PathType" in model and "class GraphPattern" in model and "kvConvertToInt" in model


def test_nccls_names_and_order():
    assert names.PATH_NAMES == ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "NET", "DIS")
    assert [names.PATH_NAMES[i] for i in (names.PATH_LOC, names.PATH_PXN, names.PATH_DIS)] == ["LOC", "PXN", "DIS"]
    assert names.PATTERN_NAMES == {1: "BALANCED_TREE", 2: "SPLIT_TREE", 3: "TREE", 4: "RING", 5: "NVLS",
                                   6: "COLLNET_DIRECT"}
    assert names.NCCL_NET_MAX_DEVS_PER_NIC == 8 and names.MAXCHANNELS == 64
    assert dict(names.GRAPH_LINK_TYPES) == {"LOC": 0, "NVL": 1, "NVB": 2, "PIX": 4, "PXB": 5, "P2C": 6, "PXN": 7,
                                            "PHB": 8, "SYS": 9}
    assert dict(names.NIC_PATH_LEVELS)["PORT"] == names.PATH_NVL


@pytest.mark.parametrize("text,want", [("PXB", 5), ("PXBX", 5), ("PORT", 1), ("P", -1), ("", -1), ("pxb", -1),
                                       ("SYSTEM", 9)])
def test_kv_is_a_prefix_match_in_table_order(text, want):
    assert names.kv(text, names.NIC_PATH_LEVELS, -1) == want


def test_a_copy_is_found(tmp_path, monkeypatch):
    """Each rule fires on a copy (the scan is not vacuous)."""
    src = tmp_path / "planners" / "copy.py"
    src.parent.mkdir()
    src.write_text('ORDER = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB")\n'
                   'PATTERNS = {4: "RING", 1: "BALANCED_TREE"}\n'
                   'NET_MAX_DEVS_PER_NIC = 4\n'
                   'def f(s, table):\n'
                   '    for k, v in table:\n'
                   '        if s.startswith(k):\n'
                   '            return v\n'
                   'ok = any(s.startswith(k) for k in ("a", "b"))\n')
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    bad = " ".join(_violations(Path("planners/copy.py")))
    assert "path types" in bad and "graph patterns" in bad and "NET_MAX_DEVS_PER_NIC" in bad
    assert bad.count("kvConvertToInt") == 2
