"""The CLI contract of the CLI contract, docs/ARCHITECTURE.md global flags anywhere, stdout for data, stderr for diagnostics,
exit codes, no tracebacks on bad input."""
from __future__ import annotations


import pytest

from gpucomm.app import hoist_globals
from gpucomm.probes.model import dumps_json, gpu_record, new_document


def test_version(cli):
    r = cli("--version")
    assert r.code == 0 and r.stdout.startswith("gpucomm ")


def test_help_lists_commands(cli):
    r = cli("--help")
    assert r.code == 0
    for cmd in ("probe", "show", "snapshot", "examples"):
        assert cmd in r.stdout


def test_usage_error_is_exit_2(cli):
    r = cli("probe", "--no-such-flag")
    assert r.code == 2
    assert "Traceback" not in r.stderr + r.stdout


def test_hoist_globals():
    assert hoist_globals(["show", "x.json", "--format", "json", "-q"]) == ["--format", "json", "-q", "show", "x.json"]
    assert hoist_globals(["show", "--format=yaml", "x"]) == ["--format=yaml", "show", "x"]
    assert hoist_globals(["show", "--", "--format"]) == ["show", "--", "--format"]


@pytest.fixture
def saved(tmp_path):
    doc = new_document("json")
    doc["gpus"].append(gpu_record(0, name="NVIDIA H100 80GB HBM3", pci_bus_id="0000:18:00.0"))
    doc["matrix"] = {"GPU0": {"GPU0": "X"}}
    p = tmp_path / "topo.json"
    p.write_text(dumps_json(doc))
    return p


def test_show_saved_json_round_trip(cli, saved):
    r = cli("show", saved, "--format", "json")
    assert r.code == 0, r.stderr
    doc = r.json()
    assert doc["gpus"][0]["pci_bus_id"] == "0000:18:00.0"
    r2 = cli("--format", "json", "show", saved)
    assert r2.stdout == r.stdout  # byte-identical reruns, flag position irrelevant


def test_output_file(cli, saved, tmp_path):
    out = tmp_path / "o.yaml"
    r = cli("show", saved, "--format", "yaml", "-o", out)
    assert r.code == 0 and r.stdout == ""
    import yaml

    assert yaml.safe_load(out.read_text())["schema"] == "gpucomm.topology/v1"


def test_unknown_format_is_a_usage_error(cli, saved):
    r = cli("show", saved, "--format", "pdf")
    assert r.code == 2
    assert "Usage: gpucomm show" in r.stderr and "'pdf' is not a format of this command" in r.stderr


@pytest.mark.parametrize("content,needle", [
    (b"", "empty"),
    (b"\x00\x01\x02binary", "binary"),
    (b"hello world\n", "unrecognised"),
    (b'{"schema": "gpucomm.topology/v1", "gpus": "many"}', "gpus"),
    (b'{"schema": "something-else"}', "schema"),
    (b'{"schema": "gpucomm.topology/v1", "gpus": [{"index": "zero"}]}', "index"),
    (b'{"schema": "gpucomm.topology/v1", "links": [{"a": "x", "b": "y", "kind": "pcie", "bw_GBps": -3}]}', "bw_GBps"),
    (b'{"schema": "gpucomm.topology/v1", ', "invalid JSON"),
    (b"schema: gpucomm.topology/v1\ngpus: !!python/object/apply:os.system ['true']\n", "YAML"),
    (b"schema: gpucomm.topology/v1\ngpus: [\n", "YAML"),
])
def test_bad_inputs_one_line_exit_1(cli, tmp_path, content, needle):
    p = tmp_path / "bad.txt"
    p.write_bytes(content)
    r = cli("show", p)
    assert r.code == 1, (r.code, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1, r.stderr
    assert str(p) in r.stderr
    assert needle.lower() in r.stderr.lower()


def test_missing_file(cli, tmp_path):
    r = cli("show", tmp_path / "nope.json")
    assert r.code == 1 and "no such file" in r.stderr


def test_unknown_example(cli):
    r = cli("show", "example:not-a-machine")
    assert r.code == 1 and "example" in r.stderr


def test_internal_error_is_123_and_one_line(cli, monkeypatch, saved):
    from gpucomm.probes import load as load_module

    def boom(src):
        raise ZeroDivisionError("oops")

    monkeypatch.setattr(load_module, "load_topology", boom)
    r = cli("show", saved)
    assert r.code == 123
    assert "bug" in r.stderr and "Traceback" not in r.stderr


def test_traceback_flag_reraises(cli, tmp_path):
    p = tmp_path / "empty.txt"
    p.write_text("")
    from gpucomm.probes.errors import InputError

    with pytest.raises(InputError):
        cli("--traceback", "show", p)


def test_utf16_capture_with_bom_reads(cli, tmp_path):
    """PowerShell's `nvidia-smi topo -m > f.txt` writes UTF-16 with a BOM."""
    from support import FIXTURES

    src = (FIXTURES / "captures" / "topo" / "42_rtx4000ada-x8_collapsed-spaces.txt").read_text(encoding="utf-8")
    p = tmp_path / "topo16.txt"
    p.write_bytes(src.encode("utf-16"))
    r = cli("show", p, "--format", "json")
    assert r.code == 0, r.stderr
    assert len(r.json()["gpus"]) == 8


def test_command_owners_are_what_each_module_registers():
    """A run imports only the module of its command (gpucomm.app.COMMAND_OWNERS): the table must say
    what the modules really register."""
    import importlib

    import typer

    from gpucomm.app import COMMAND_MODULES, COMMAND_OWNERS

    names = {}
    for mod in COMMAND_MODULES:
        t = typer.Typer()
        importlib.import_module(mod).register(t)
        for info in list(t.registered_commands) + list(t.registered_groups):
            names[info.name] = mod
    assert names == COMMAND_OWNERS


def test_help_lists_every_command_in_order_after_a_command_ran():
    """--help after a run that registered one module lists every command, in the usual order."""
    import subprocess
    import sys

    code = """
import io, contextlib, sys
from gpucomm.app import run
if sys.argv[1] == "rings-first":
    with contextlib.redirect_stdout(io.StringIO()):
        run(["rings", "example:hgx-h100", "-f", "json"])
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    run(["--help"])
print(buf.getvalue())
"""
    helps = []
    for first in ("rings-first", "help-only"):
        r = subprocess.run([sys.executable, "-c", code, first], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        helps.append(r.stdout)
    assert helps[0] == helps[1] and helps[0].index("  probe ") < helps[0].index("  rings ") < helps[0].index("  bench ")
