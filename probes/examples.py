"""Bundled recorded hosts, named ``example:<name>`` (SPEC §2)."""
from __future__ import annotations

from pathlib import Path

from .errors import InputError


def examples_dirs() -> list:
    here = Path(__file__).resolve().parent
    return [d for d in (here / "examples", here.parent / "fixtures" / "hosts") if d.is_dir()]


def list_examples() -> dict:
    """{name: path} of every bundled host (a directory with meta.json)."""
    out = {}
    for d in examples_dirs():
        for p in sorted(d.iterdir()):
            if p.is_dir() and (p / "meta.json").is_file() and p.name not in out:
                out[p.name] = p
    return out


def example_path(name: str) -> Path:
    ex = list_examples()
    if name not in ex:
        raise InputError(f"no bundled example {name!r}", f"example:{name}",
                         expected="one of: " + (", ".join(sorted(ex)) or "(none installed)"))
    return ex[name]
