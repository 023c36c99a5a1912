"""Every command's table at 80 and 120 columns: no value a user copies (ring orders, env values,
bus ids, CPU lists, GPU lists, host names, sizes) is split across lines or cut with an ellipsis,
no line carries trailing padding, and plurals agree with their numbers."""
from __future__ import annotations

import re

import pytest

from support import TABLE_CASES as CASES, run_cli

WIDTHS = (80, 120)


_JSON: dict = {}


def _render(monkeypatch, width, *args):
    monkeypatch.setenv("COLUMNS", str(width))
    r = run_cli(*args)
    if "--format" in args or "--emit" in args:
        return r, None
    if args not in _JSON:   # the document does not depend on the width: one run per command
        j = run_cli(*args, "--format", "json")
        _JSON[args] = j.json() if j.code in (0, 5) else None
    return r, _JSON[args]


def _check_common(text: str, width: int):
    assert "…" not in text, "a value was cut with an ellipsis"
    for line in text.splitlines():
        assert line == line.rstrip(), f"trailing padding: {line!r}"
    # plurals: "1 channels", "1 nodes", "1 GPUs" ...
    assert not re.search(r"(?<![\d.])1 (channels|nodes|ranks|GPUs|NICs|errors|warnings|groups)\b", text), text


def _intact(text: str, value: str):
    value = str(value)
    assert any(value in line for line in text.splitlines()), f"{value!r} is not on one line of:\n{text}"


COPYABLE = {
    "rings": lambda d: [" > ".join([c["nics"][0]] + [f"GPU{g}" for g in c["gpus"]] + [c["nics"][1]])
                        if c.get("nics") else " > ".join(f"GPU{g}" for g in c["gpus"] + c["gpus"][:1])
                        for c in d["channels"]],
    "plan": lambda d: [v["value"] for v in d["env"].values()]
                      + [lr["cpus"] for lr in d["local_ranks"] if lr.get("cpus")]
                      + [lr["pci_bus_id"] for lr in d["local_ranks"] if lr.get("pci_bus_id")],
    "select": lambda d: ["CUDA_VISIBLE_DEVICES=" + ",".join(map(str, d["gpus"]))],
    "paths": lambda d: [r["src"] for r in d["rows"]] + [r["dst"] for r in d["rows"]],
    "show": lambda d: [g["pci_bus_id"] for g in d["gpus"] if g.get("pci_bus_id")]
                      + [n["name"] for n in d["nics"]],
    "doctor": lambda d: [f["subject"] for f in d["findings"]]
                        + [m for f in d["findings"] for m in re.findall(r"`[^`]+`", f["fix"] + f["message"])],
    "trees": lambda d: [">".join(map(str, c)) for c in d["chains"]],
}



@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("args", CASES, ids=lambda a: "-".join(x.split("/")[-1] for x in a)[:60])
def test_tables_keep_copyable_values_whole(monkeypatch, width, args):
    r, doc = _render(monkeypatch, width, *args)
    assert r.code in (0, 5), r.stderr
    _check_common(r.stdout, width)
    if doc is not None and args[0] in COPYABLE:
        for v in COPYABLE[args[0]](doc):
            _intact(r.stdout, v)


@pytest.mark.parametrize("width", WIDTHS)
def test_narrow_terminals_get_every_column(monkeypatch, width):
    """At 80 columns the rings table still shows the channel number, its bandwidth and the
    bottleneck hop (a narrower layout, not columns squeezed to nothing)."""
    r, doc = _render(monkeypatch, width, "rings", "example:hgx-h100", "--nodes", "2")
    for ch in doc["channels"]:
        worst = min(ch["links"], key=lambda l: (l["path_bw_GBps"], l["type"]))
        _intact(r.stdout, f"{worst['from']}->{worst['to']} {worst['type']} {worst['path_bw_GBps']:g}")
    assert re.search(r"\b48\b", r.stdout)


def test_plurals_follow_the_count(monkeypatch):
    r, _ = _render(monkeypatch, 120, "rings", "example:hgx-h100", "--gpus", "0,1", "--channels", "1")
    assert "1 channel," in r.stdout or "1 channel " in r.stdout
    r, _ = _render(monkeypatch, 120, "plan", "example:hgx-h100", "--tp", "8")
    assert "1 node x 8 GPUs" in r.stdout


def test_does_not_fit_says_by_how_much_and_what_would(monkeypatch):
    r, _ = _render(monkeypatch, 120, "plan", "example:hgx-h100", "--model", "llama-405b")
    assert r.code == 4
    assert re.search(r"needs [\d.]+ GiB per GPU, [\d.]+ GiB available \([\d.]+ GiB short\)", r.stderr), r.stderr
    assert re.search(r"at least \d+ GPUs|--nodes \d+", r.stderr), r.stderr


def test_bus_ids_are_not_emoji_and_tree_lines_are_whole(monkeypatch):
    # rich would read ":cd:" in 0000:cd:00.0 as the emoji code for a disc
    for fmt in ("tree",):
        r, _ = _render(monkeypatch, 120, "show", "example:dgx-a100", "--format", fmt)
        assert "0000:cd:00.0" in r.stdout and "\U0001f4bf" not in r.stdout
    r, _ = _render(monkeypatch, 240, "show", "example:dgx-a100", "--format", "tree")
    assert all("0000:cf:00.0" in l or "NV2" not in l or l.rstrip().endswith(")") for l in r.stdout.splitlines())
