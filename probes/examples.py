"""Bundled recorded hosts, named ``example:<name>`` (the CLI contract, docs/ARCHITECTURE.md).

The recorded hosts are the snapshot directories of ``fixtures/hosts/`` (about 1,400 sysfs files
each).  The package ships what ``example:<name>`` needs in a form read in milliseconds:
``probes/examples/<name>.json`` is the document a replay of that snapshot gives (``load_snapshot``
then ``finalize``), compact and in the replay's own key order, and ``probes/examples/index.json``
holds each host's ``meta.json`` (description, the real capture it agrees with).  Both are written
by ``fixtures/pack_examples.py``; the suite replays every snapshot and checks that the shipped
document is exactly what the replay gives (tests/test_fixture_hosts.py), so the shortcut can never
answer differently from the recorded host.

In a source checkout a host that has not been packed yet (a new ``fixtures/hosts/<name>``) is
replayed from its directory.

The package also ships the few real captures the README's tour reads (``probes/examples/captures/``,
copied by ``fixtures/pack_examples.py`` with their SOURCES.md lines): ``example:<file name>`` names
one wherever a file is read (a topology, ``predict --compare``, ``calibrate``'s runs)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from gpucomm.probes.errors import InputError

_HERE = Path(__file__).resolve().parent
PACKED = _HERE / "examples"
INDEX = "index.json"
CAPTURES = PACKED / "captures"
MAX_EXAMPLE_BYTES = 16 * 1024 * 1024  # a packed document is ~100 KB; bounded like every read


def _packed() -> dict:
    """{name: path of the packed document} of the shipped examples."""
    if not PACKED.is_dir():
        return {}
    return {p.name[: -len(".json")]: p for p in PACKED.glob("*.json") if p.name != INDEX}


def list_examples() -> dict:
    """{name: path} of every bundled host: the packed document (``probes/examples/<name>.json``),
    or, in a source checkout, the ``fixtures/hosts/<name>`` snapshot directory of a host not packed
    yet."""
    out = _packed()
    hosts = _HERE.parent / "fixtures" / "hosts"
    if hosts.is_dir():
        for p in hosts.iterdir():
            if p.is_dir() and (p / "meta.json").is_file():
                out.setdefault(p.name, p)
    return dict(sorted(out.items()))


def _read_json(path: Path):
    with open(path, "rb") as f:
        data = f.read(MAX_EXAMPLE_BYTES + 1)
    if len(data) > MAX_EXAMPLE_BYTES:
        raise ValueError(f"larger than {MAX_EXAMPLE_BYTES} bytes")
    return json.loads(data.decode("utf-8"))


def example_meta(path: Path) -> dict:
    """meta.json of a bundled host (packed document or snapshot directory); {} when unreadable."""
    try:
        if path.is_dir():
            return _read_json(path / "meta.json")
        meta = _read_json(path.parent / INDEX).get(path.name[: -len(".json")])
        return meta if isinstance(meta, dict) else {}
    except (OSError, ValueError, AttributeError):
        return {}


def list_captures() -> dict:
    """{file name: path} of the shipped real captures (``example:<file name>``)."""
    if not CAPTURES.is_dir():
        return {}
    return {p.name: p for p in sorted(CAPTURES.iterdir()) if p.is_file() and p.name != "SOURCES.md"}


def capture_path(spec: str) -> Optional[str]:
    """The file of ``example:<file name>`` when it names a shipped capture, else None."""
    if not spec.startswith("example:"):
        return None
    p = list_captures().get(spec.split(":", 1)[1])
    return str(p) if p is not None else None


def example_path(name: str) -> Path:
    ex = list_examples()
    if name not in ex:
        raise InputError(f"no bundled example {name!r}", f"example:{name}",
                         expected="one of: " + (", ".join(sorted(ex) + sorted(list_captures())) or "(none installed)"))
    return ex[name]


def load_example(name: str) -> dict:
    """The topology document of ``example:<name>`` (not yet finalized: the caller does that).  An
    unpacked example (a snapshot directory, in a source checkout) is loaded by
    :func:`gpucomm.probes.load.load_topology`, which knows snapshots; this module imports no reader."""
    path = example_path(name)
    if path.is_dir():
        raise InputError("is a snapshot directory: load it with gpucomm.probes.load.load_topology", f"example:{name}")
    try:
        doc = _read_json(path)
    except (OSError, ValueError) as e:
        raise InputError(f"bundled example is unreadable ({e}); reinstall gpucomm", f"example:{name}") from None
    if not isinstance(doc, dict):
        raise InputError("bundled example is not a topology document; reinstall gpucomm", f"example:{name}")
    return doc
