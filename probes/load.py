"""``--from SRC`` / ``TOPO``: read any supported input into a topology document, detecting the
format by content, never by file name (the CLI contract, docs/ARCHITECTURE.md).

Supported: a saved topology (JSON/YAML), a snapshot (directory or .tar.gz), a
``nvidia-smi topo -m`` capture, an NCCL topology XML, a ``rocm-smi --showtopo`` capture, and
``example:<name>`` for the bundled recorded hosts.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Optional

from gpucomm.probes.errors import InputError
from gpucomm.probes.model import SCHEMA, finalize

MAX_INPUT_BYTES = 64 * 1024 * 1024
# ANSI SGR escapes, with or without the ESC byte (same pattern as gpucomm.probes.formats.smi_topo).
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b|\[[0-9;]*m")


def read_text_input(path: str) -> str:
    """Read a text input, rejecting binary junk and wrong encodings with a one-line error."""
    p = Path(path)
    try:
        size = p.stat().st_size
    except FileNotFoundError:
        raise InputError("no such file", path) from None
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", path) from None
    if size > MAX_INPUT_BYTES:
        raise InputError(f"file is {size} bytes, larger than the {MAX_INPUT_BYTES} byte limit", path)
    try:
        data = p.read_bytes()
    except IsADirectoryError:
        raise InputError("is a directory but not a snapshot", path, expected="a snapshot with meta.json or sys/") from None
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", path) from None
    return decode_text_input(data, path)


def decode_text_input(data: bytes, path: str) -> str:
    """The text of an input's bytes (read_text_input's checks: empty, binary, encoding)."""
    if not data.strip():
        raise InputError("file is empty", path, expected="a topology, snapshot, nvidia-smi topo -m, NCCL XML or rocm-smi capture")
    # UTF-16 with BOM (PowerShell's `>` on Windows/WSL writes it) is common enough for smi captures.
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        try:
            text16 = data.decode("utf-16")
            if "\x00" not in text16:
                return text16
        except UnicodeDecodeError:
            pass
    if b"\x00" in data[:65536]:
        raise InputError("file is binary", path, expected="a text capture or topology document")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    try:
        text = data.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes everything
        raise InputError("not valid UTF-8 text", path) from None
    if sum(1 for ch in text if ord(ch) > 127) > len(text) // 20:
        raise InputError("not valid UTF-8 text", path, expected="a UTF-8 text file")
    return text


def detect_kind(text: str) -> Optional[str]:
    """Guess the format of a text input from its content."""
    # ANSI colour/underline codes go first: nvidia-smi underlines the topo -m header, and pasted
    # copies often keep "[4m" without its ESC byte, which would otherwise read as a JSON list.
    head = _ANSI_RE.sub("", text.lstrip("\ufeff \t\r\n")[:4096]).lstrip("\ufeff \t\r\n")
    if head.startswith("{") or head.startswith("["):
        return "json"
    if "schema:" in head and "gpucomm.topology" in head:
        return "yaml"  # first: a saved topology's warnings may quote "<system ...>"
    if head.startswith("<?xml") or re.search(r"<(?:system|graphs)[\s>/]", text[:65536]):
        return "nccl-xml"
    if re.search(r"ROCm\s+System\s+Management\s+Interface", text[:8192]) or \
            re.search(r"(?:Link\s+Type|Weight)\s+between\s+two\s+GPUs", text):
        return "rocm-smi"
    from gpucomm.probes.formats.smi_topo import looks_like

    bare = _ANSI_RE.sub("", text[:20000])
    if looks_like(text) or (re.search(r"(^|\s)GPU0(\s|$)", bare) and re.search(r"\bX\b", bare)):
        return "nvidia-smi"
    if re.match(r"^[A-Za-z_]+:\s", head) or head.startswith("---"):
        return "yaml"
    # Any other markup is tried as XML last: GitHub issue pastes wrap topo -m / rocm-smi output
    # in <details><summary>, which the checks above have already recognised.
    if head.startswith("<"):
        return "nccl-xml"
    return None


def load_document(text: str, path: str, kind: str) -> dict:
    if kind in ("json", "yaml"):
        return load_saved(text, path, kind)
    if kind == "nvidia-smi":
        from gpucomm.probes.formats.smi_topo import parse_topo_text

        return parse_topo_text(text, path=path)
    if kind == "nccl-xml":
        from gpucomm.probes.formats.nccl_xml import parse_nccl_xml

        return parse_nccl_xml(text, path=path)
    if kind == "rocm-smi":
        from gpucomm.probes.formats.rocm_smi import parse_rocm_text

        return parse_rocm_text(text, path=path)
    raise InputError(f"unknown input kind {kind}", path)  # pragma: no cover


def load_saved(text: str, path: str, kind: str) -> dict:
    """A saved topology document (JSON or YAML, the latter with safe_load only)."""
    if kind == "json":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(f"invalid JSON: {e.msg}", path, line=e.lineno, expected="a gpucomm topology document") from None
    else:
        import yaml

        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as e:
            line = getattr(getattr(e, "problem_mark", None), "line", None)
            msg = str(getattr(e, "problem", None) or "invalid YAML")
            raise InputError(f"invalid YAML: {msg}", path, line=(line + 1) if line is not None else None,
                             expected="a gpucomm topology document") from None
    from gpucomm.probes.validate import check_document

    check_document(doc, path)
    return doc


def resolve_example(name: str) -> Path:
    from gpucomm.probes.examples import example_path

    return example_path(name)


STDIN = "-"


def _load_stdin() -> dict:
    """``-``: a topology, capture or XML on standard input (a snapshot .tar.gz too), read bounded."""
    import sys
    import tempfile

    stream = getattr(sys.stdin, "buffer", None)
    data = stream.read(MAX_INPUT_BYTES + 1) if stream is not None else (sys.stdin.read(MAX_INPUT_BYTES + 1) or "").encode()
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(f"standard input is larger than the {MAX_INPUT_BYTES} byte limit", "<stdin>")
    if data[:2] == b"\x1f\x8b":
        from gpucomm.probes.sources.snapshot import load_snapshot

        with tempfile.TemporaryDirectory(prefix="gpucomm-stdin-") as tmp:
            path = Path(tmp) / "stdin.tar.gz"
            path.write_bytes(data)
            return finalize(load_snapshot(path))
    with tempfile.NamedTemporaryFile(prefix="gpucomm-stdin-", suffix=".txt") as f:
        f.write(data)
        f.flush()
        try:
            text = read_text_input(f.name)
        except InputError as e:
            raise InputError(str(e).replace(f.name, "<stdin>", 1)) from None
    kind = detect_kind(text)
    if kind is None:
        raise InputError("unrecognised content", "<stdin>",
                         expected="a gpucomm topology (JSON/YAML), `nvidia-smi topo -m` output, an NCCL topology XML, "
                                  "`rocm-smi --showtopo` output or a snapshot .tar.gz")
    return finalize(load_document(text, "<stdin>", kind))


def load_topology(src: str) -> dict:
    """Any supported input -> topology document (finalised); ``-`` reads standard input."""
    return load_topology_text(src)[0]


def read_topology_text(src: str) -> Optional[str]:
    """The text of a text input (as :func:`load_topology` reads it), None for standard input, an
    example, a snapshot directory or an archive."""
    if src == STDIN or src.startswith("example:") or src.endswith((".tar.gz", ".tgz")):
        return None
    try:
        with open(src, "rb") as f:   # one read: the gzip magic (a snapshot archive) and the text
            data = f.read(MAX_INPUT_BYTES + 1)
    except (IsADirectoryError, PermissionError, FileNotFoundError, OSError):
        return None   # a snapshot directory, or an error load_topology reports in its own words
    if data[:2] == b"\x1f\x8b" or len(data) > MAX_INPUT_BYTES:
        return None   # an archive; or too large, which load_topology refuses with the size
    return decode_text_input(data, src)


def load_topology_text(src: str, text: Optional[str] = None) -> tuple:
    """(document, the text it was read from) -- the text is None for standard input, a snapshot or
    an example; ``text``: the input's text when the caller read it already
    (:func:`read_topology_text`).  Fleet commands key their per-node work on the text
    (planners/health/diff.py)."""
    if text is not None:
        return _from_text(text, src), text
    if src == STDIN:
        return _load_stdin(), None
    if src.startswith("example:"):
        from gpucomm.probes.examples import load_example

        return finalize(load_example(src.split(":", 1)[1])), None
    src_path = src
    p = Path(src_path)
    if p.is_dir():
        from gpucomm.probes.sources.snapshot import load_snapshot

        return finalize(load_snapshot(p)), None
    if src_path.endswith((".tar.gz", ".tgz")) or _is_gzip(p):
        from gpucomm.probes.sources.snapshot import load_snapshot

        return finalize(load_snapshot(p)), None
    text = read_text_input(src_path)
    return _from_text(text, src_path), text


def _from_text(text: str, src_path: str) -> dict:
    kind = detect_kind(text)
    if kind is None:
        raise InputError("unrecognised content", src_path,
                         expected="a gpucomm topology (JSON/YAML), a snapshot, `nvidia-smi topo -m` output, "
                                  "an NCCL topology XML or `rocm-smi --showtopo` output")
    return finalize(load_document(text, src_path, kind))


def _is_gzip(p: Path) -> bool:
    try:
        with open(p, "rb") as f:
            return f.read(2) == b"\x1f\x8b"
    except OSError:
        return False


__all__ = ["load_topology", "load_topology_text", "read_topology_text", "detect_kind", "read_text_input", "SCHEMA", "os"]
