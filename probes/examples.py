"""Bundled recorded hosts, named ``example:<name>`` (the CLI contract, docs/ARCHITECTURE.md).

In a source checkout they are the directories of ``fixtures/hosts/``; the installed package ships the
same hosts as snapshot archives in ``probes/examples/<name>.tar.gz`` (written by
``fixtures/pack_examples.py``; a test keeps the two in sync)."""
from __future__ import annotations

from pathlib import Path

from gpucomm.probes.errors import InputError

_HERE = Path(__file__).resolve().parent


def list_examples() -> dict:
    """{name: path} of every bundled host: a fixtures/hosts directory when this is a source checkout,
    else the packaged archive."""
    out: dict = {}
    hosts = _HERE.parent / "fixtures" / "hosts"
    if hosts.is_dir():
        for p in sorted(hosts.iterdir()):
            if p.is_dir() and (p / "meta.json").is_file():
                out[p.name] = p
    packed = _HERE / "examples"
    if packed.is_dir():
        for p in sorted(packed.glob("*.tar.gz")):
            out.setdefault(p.name[: -len(".tar.gz")], p)
    return dict(sorted(out.items()))


def example_meta(path: Path) -> dict:
    """meta.json of a bundled host (directory or archive)."""
    import json
    import tarfile

    try:
        if path.is_dir():
            return json.loads((path / "meta.json").read_text(encoding="utf-8"))
        with tarfile.open(path, "r:gz") as tf:
            for m in tf.getmembers():
                if m.name.count("/") == 1 and m.name.endswith("/meta.json") and m.isfile():
                    f = tf.extractfile(m)
                    return json.loads(f.read().decode("utf-8")) if f else {}
    except (OSError, ValueError, tarfile.TarError):
        pass
    return {}


def example_path(name: str) -> Path:
    ex = list_examples()
    if name not in ex:
        raise InputError(f"no bundled example {name!r}", f"example:{name}",
                         expected="one of: " + (", ".join(sorted(ex)) or "(none installed)"))
    return ex[name]
