"""The README's tour shows real output: every line of its excerpts is a line the command prints today
(a line elided with "..." must begin one; a trailing "# ..." is the README's comment), so a change that
moves a figure fails here until the README is re-run.  The matrix excerpt is checked against the real
capture in test_fixture_hosts; the probe excerpt depends on the machine."""
from __future__ import annotations

import re

import pytest

from support import FIXTURES, ROOT, run_cli

README = ROOT / "README.md"
SCALING = FIXTURES / "captures" / "nccltests" / "scaling"


def _block(after: str) -> list[str]:
    """The lines of the first ``` block after the text ``after``."""
    text = README.read_text(encoding="utf-8")
    i = text.index("\n```", text.index(after)) + 1          # the opening fence (``` or ```bash)
    j = text.index("\n", i) + 1
    return text[j:text.index("\n```", j) + 1].splitlines()


def _words(line: str) -> str:
    return " ".join(line.split())      # an excerpt may trim a table's columns; every figure stays


def _missing(lines: list[str], out: str) -> list[str]:
    """Excerpt lines the output does not show."""
    printed = [_words(ln) for ln in out.splitlines()]
    bad = []
    for ln in lines:
        if not ln.strip():
            continue
        if not ln.startswith("#"):
            ln = re.sub(r"\s+# .*$", "", ln)        # the README's own comment
        if "..." in ln:
            head = _words(ln.split("...")[0])
            if head and not any(p.startswith(head) for p in printed):
                bad.append(ln)
        elif _words(ln) not in printed:
            bad.append(ln)
    return bad


def _ok(*args: str, code: int = 0) -> str:
    r = run_cli(*args)
    assert r.code == code, (args, r.stderr)
    return r.stdout


@pytest.mark.parametrize("after, args", [
    ("**Rings, beside what NCCL would pick**", ["rings", "example:hgx-h100", "--nodes", "2"]),
    ("**Predictions you can check**", ["predict", "example:hgx-h100", "--collective", "all_reduce",
                                       "--size", "1KiB:4GiB:x16"]),
    ("**Check a prediction against your own nccl-tests run**",
     ["predict", "example:hgx-h100", "--compare", str(FIXTURES / "captures" / "nccltests" /
                                                     "09_h100-x8_1node_allreduce_cluster01.txt")]),
    ("**A plan and a launch script**", ["plan", "example:hgx-h100", "--nodes", "2", "--tp", "8", "--pp", "2",
                                        "--emit", "slurm"]),
    ("**The degraded link NCCL routes around**", ["doctor", "--from", "example:hgx-h100-degraded"]),
])
def test_tour_excerpt_is_what_the_command_prints(after, args, monkeypatch):
    monkeypatch.setenv("COLUMNS", WIDE)
    lines = [ln for ln in _block(after) if not ln.startswith("$ ")]
    assert lines
    assert _missing(lines, _ok(*args, code=5 if args[0] == "doctor" else 0)) == []


# the excerpts show unwrapped lines, as a wide terminal prints them (a pipe without COLUMNS is 80 wide)
WIDE = "240"


def test_calibrate_excerpt_is_what_the_commands_print(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", WIDE)
    block = _block("**Calibrate on the runs you have")
    cmds = [i for i, ln in enumerate(block) if ln.startswith("$ ")]
    assert len(cmds) == 3
    tables = [f"example:{next(SCALING.glob(f'{n}_*.txt')).name}" for n in ("005", "010", "015")]
    assert block[cmds[0]].split()[4] == tables[0]
    cal = _ok("calibrate", "example:polaris", *tables, "--format", "table")
    assert _missing(block[cmds[0] + 1:cmds[1]], cal) == []
    profile = tmp_path / "polaris.json"
    _ok("calibrate", "example:polaris", *tables, "-o", str(profile))
    assert block[cmds[1] + 1:cmds[2]] == []          # -o writes the profile, prints nothing on stdout
    args = block[cmds[2]].split()[2:]
    pred = _ok(*[str(profile) if a == "polaris.json" else a for a in args])
    assert _missing(block[cmds[2] + 1:], pred) == []


@pytest.mark.parametrize("after", ["**Which GPUs for my job**", "**The cluster: fabric, racks",
                                   "**A GB200/GB300 NVL72 rack**"])
def test_every_command_of_a_block_prints_its_lines(after, monkeypatch):
    """A block of `$ gpucomm ...` lines, each followed by lines of what it prints."""
    monkeypatch.setenv("COLUMNS", WIDE)
    block = _block(after)
    cmds = [i for i, ln in enumerate(block) if ln.startswith("$ gpucomm ")]
    assert cmds and cmds[0] == 0
    for i, j in zip(cmds, cmds[1:] + [len(block)]):
        lines = block[i + 1:j]
        assert lines, block[i]
        assert _missing(lines, _ok(*block[i].split()[2:])) == [], block[i]
