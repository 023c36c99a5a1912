"""What each command imports: nothing it does not use, and a failure when the set grows.

Start-up time is most of what a command costs (benchmarks/bench_install.py times them from a wheel
install; ``python -X importtime`` shows where it goes).  Each command below runs in a fresh
interpreter; the modules it leaves in ``sys.modules`` beyond those of ``import typer`` (the floor of
any typer CLI) are its import set.  (``sys.modules`` rather than ``-X importtime``: importtime does
not log modules loaded through ``importlib.import_module``, which is how the command modules are
registered.)

* Rules that always hold: no tarfile/gzip/zipfile (archives), networkx, rich (tables), yaml or
  pynvml where a command does not need them (JSON output never draws a table; a bundled example
  is a JSON document, not an archive).
* Growth: tests/import_sets.json records each command's set (gpucomm modules by full name, other
  packages by top-level name; standard-library names are compared only under the Python version
  that recorded them).  A module that is not recorded fails the test; when the new import is
  wanted, rerun with ``GPUCOMM_UPDATE_IMPORTS=1`` to record the new sets.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support import ROOT

RECORD = ROOT / "tests" / "import_sets.json"
UPDATE = os.environ.get("GPUCOMM_UPDATE_IMPORTS") == "1"

# command -> modules it must not import (top-level names, or gpucomm.* prefixes)
ARCHIVES = {"tarfile", "gzip", "zipfile", "lzma", "bz2", "gpucomm.probes.sources.snapshot"}
NO_GRAPH = {"networkx", "gpucomm.planners.nccl"}
# placement reads NCCL's system and paths (planners/nccl/sysview.py), never NCCL's search or communicator
NO_SEARCH = {"networkx", "gpucomm.planners.nccl.search", "gpucomm.planners.nccl.comm", "gpucomm.planners.nccl.tuning"}
NO_TABLES = {"rich"}
COMMANDS = {
    "--help": ARCHIVES | NO_GRAPH | NO_TABLES | {"yaml", "json", "gpucomm.probes.model", "gpucomm.planners",
                                                "gpucomm.render"},
    "show example:hgx-h100 --format json": ARCHIVES | NO_GRAPH | NO_TABLES | {"yaml", "gpucomm.planners",
                                                                             "gpucomm.probes.topology"},
    "show example:hgx-h100": ARCHIVES | NO_GRAPH | {"yaml", "gpucomm.planners"},
    "examples --format json": ARCHIVES | NO_GRAPH | NO_TABLES | {"yaml", "gpucomm.planners"},
    # a table to a pipe is plain text written without rich (gpucomm.render.plain)
    "rings example:hgx-h100": ARCHIVES | NO_TABLES | {"yaml", "networkx", "gpucomm.probes.formats.nccllog",
                                          "gpucomm.planners.collectives.logcompare",   # only with --compare
                                          "gpucomm.planners.nccl.tuning"},             # rings need no tuning
    "predict example:hgx-h100 --size 8B:8GiB": ARCHIVES | NO_TABLES | {"yaml", "networkx"},
    "examples": ARCHIVES | NO_GRAPH | NO_TABLES | {"yaml", "gpucomm.planners"},
    "plan example:hgx-h100 --nodes 2 --tp 8 --pp 2": ARCHIVES | NO_SEARCH | {"yaml"},
    "plan example:hgx-h100 --nodes 2 --tp 8 --pp 2 --format json": ARCHIVES | NO_SEARCH | NO_TABLES | {"yaml"},
    "doctor --from example:hgx-h100-degraded --format json": ARCHIVES | NO_GRAPH | NO_TABLES | {"yaml"},
    "diff example:hgx-h100 example:hgx-h100-degraded --format json": ARCHIVES | NO_GRAPH | NO_TABLES | {"yaml"},
    "select example:hgx-h100 --count 2 --format json": ARCHIVES | NO_SEARCH | NO_TABLES | {"yaml"},
}
_RUN = ("import io, json, sys, contextlib\n"
        "from gpucomm.app import run\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        "    code = run(sys.argv[2:])\n"
        "open(sys.argv[1], 'w').write(json.dumps({'code': code, 'modules': sorted(sys.modules)}))\n")
_BASE = "import json, sys, typer\nopen(sys.argv[1], 'w').write(json.dumps(sorted(sys.modules)))\n"
_STDLIB = getattr(sys, "stdlib_module_names", None)   # Python >= 3.10
PY = f"{sys.version_info[0]}.{sys.version_info[1]}"


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONSTARTUP", "PYTHONPATH")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _modules(code: str, tmp_path, *args: str):
    out = tmp_path / "modules.json"
    r = subprocess.run([sys.executable, "-c", code, str(out), *args], capture_output=True, text=True,
                       timeout=120, env=_env(), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text(encoding="utf-8"))


_BASELINE: dict = {}


def _import_set(cmd: str, tmp_path) -> dict:
    if cmd in _BASELINE:     # each command runs once per session
        return _BASELINE[cmd]
    if "typer" not in _BASELINE:
        _BASELINE["typer"] = set(_modules(_BASE, tmp_path))
    res = _modules(_RUN, tmp_path, *cmd.split())
    assert res["code"] in (0, 5), f"{cmd}: exit {res['code']}"
    mods = set(res["modules"]) - _BASELINE["typer"]
    ours = sorted(m for m in mods if m == "gpucomm" or m.startswith("gpucomm."))
    tops = {m.split(".")[0] for m in mods if not (m == "gpucomm" or m.startswith("gpucomm."))}
    tops = {t for t in tops if not t.startswith("_") or t in ("_json", "_decimal", "_pickle", "_blake2")}
    std = sorted(t for t in tops if _STDLIB is not None and t in _STDLIB)
    _BASELINE[cmd] = {"gpucomm": ours, "packages": sorted(tops - set(std)), "stdlib": std}
    return _BASELINE[cmd]


def _recorded() -> dict:
    return json.loads(RECORD.read_text(encoding="utf-8")) if RECORD.is_file() else {"python": PY, "commands": {}}


@pytest.mark.parametrize("cmd", list(COMMANDS))
def test_command_imports_nothing_it_does_not_use(cmd, tmp_path):
    got = _import_set(cmd, tmp_path)
    names = set(got["gpucomm"]) | set(got["packages"]) | set(got["stdlib"])
    banned = sorted(m for m in names for b in COMMANDS[cmd] if m == b or m.startswith(b + "."))
    assert not banned, f"`gpucomm {cmd}` imports {banned}"


def _grown(fresh: dict, rec: dict) -> list:
    """What each command imports now that the record does not list."""
    groups = ("gpucomm", "packages") + (("stdlib",) if rec.get("python") == PY else ())
    out = []
    for cmd, got in fresh.items():
        was = rec["commands"].get(cmd)
        if was is None:
            out.append(f"`gpucomm {cmd}` has no recorded import set")
            continue
        for g in groups:
            new = sorted(set(got[g]) - set(was[g]))
            if new:
                out.append(f"`gpucomm {cmd}` now imports {', '.join(new)}")
    return out


def test_import_sets_do_not_grow(tmp_path):
    fresh = {cmd: _import_set(cmd, tmp_path) for cmd in COMMANDS}
    if UPDATE:
        RECORD.write_text(json.dumps({"python": PY, "commands": fresh}, indent=1, sort_keys=True) + "\n",
                          encoding="utf-8")
    assert RECORD.is_file(), f"{RECORD.name} missing: GPUCOMM_UPDATE_IMPORTS=1 pytest {__file__}"
    grown = _grown(fresh, _recorded())
    assert not grown, ("; ".join(grown) + " -- if that is wanted, record it: GPUCOMM_UPDATE_IMPORTS=1 "
                       "python -m pytest tests/test_imports.py")


def test_the_growth_check_catches_one_more_module(tmp_path):
    rec = _recorded()
    code = _RUN.replace("from gpucomm.app import run\n", "from gpucomm.app import run\nimport gpucomm.probes.topology\n")
    base = set(_modules(_BASE, tmp_path))
    mods = set(_modules(code, tmp_path, "--help")["modules"]) - base
    fresh = {"--help": {"gpucomm": sorted(m for m in mods if m.startswith("gpucomm")), "packages": [], "stdlib": []}}
    (msg,) = _grown(fresh, rec)
    assert msg.startswith("`gpucomm --help` now imports ") and "gpucomm.probes.topology" in msg
    assert _grown({"--help": rec["commands"]["--help"]}, rec) == []
