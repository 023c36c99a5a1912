"""Rendering shared by every command: deterministic JSON/YAML, rich tables, and the choice of
stdout or ``-o FILE``.  Data goes to stdout, diagnostics to stderr."""
from __future__ import annotations

import io
import os
import sys
from typing import Callable, Iterable, Optional

from gpucomm.probes.errors import InputError
from gpucomm.probes.model import dumps_yaml, write_json

from gpucomm.settings import SETTINGS


def chosen_format(default: str = "table") -> str:
    return (SETTINGS.format or default).lower()


def check_format(fmt: str, allowed: Iterable[str]) -> None:
    """A --format the command does not have is a usage error (exit 2)."""
    allowed = list(allowed)
    if fmt not in allowed:
        from gpucomm.commands.common import usage_error

        usage_error(f"{fmt!r} is not a format of this command (it has {', '.join(allowed)})", "--format")


def make_console(file=None, width: Optional[int] = None):
    from rich.console import Console

    target = file if file is not None else sys.stdout
    is_tty = hasattr(target, "isatty") and target.isatty() and not SETTINGS.output
    if width is None and not is_tty:
        width = int(os.environ.get("COLUMNS", "0") or 0) or 240
    return Console(file=target, width=width, force_terminal=is_tty if is_tty else False,
                   no_color=not is_tty or bool(os.environ.get("NO_COLOR")), highlight=False,
                   soft_wrap=True,   # text lines are never broken; tables fit themselves (render/tables.py)
                   emoji=False)      # ":cd:" in a bus id (0000:cd:00.0) is not an emoji


def write_text(text: str) -> None:
    """Write data to -o FILE (atomically: a reader never sees half a file) or stdout."""
    if SETTINGS.output and SETTINGS.output != "-":
        write_file_atomic(SETTINGS.output, text)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()


def write_file_atomic(path: str, text) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename;
    ``text`` may be a producer ``produce(write)`` that hands the text over piece by piece."""
    import tempfile

    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".gpucomm-", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            if callable(text):
                text(f.write)
            else:
                f.write(text)
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise InputError(f"cannot write: {e.strerror}", path) from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def write_stream(produce: Callable) -> None:
    """Like :func:`write_text` for a large document: ``produce(write)`` hands the text over piece
    by piece (``gpucomm.probes.model.write_json``), so it is never held whole."""
    if SETTINGS.output and SETTINGS.output != "-":
        write_file_atomic(SETTINGS.output, produce)
    else:
        produce(sys.stdout.write)
        sys.stdout.flush()


def render_rich(draw: Callable) -> None:
    """Call ``draw(console)``; to a file or a pipe the output is captured without colour and
    without the padding rich leaves at the end of lines."""
    to_file = SETTINGS.output and SETTINGS.output != "-"
    if to_file or not (hasattr(sys.stdout, "isatty") and sys.stdout.isatty()):
        buf = io.StringIO()
        draw(make_console(buf))
        text = "\n".join(line.rstrip() for line in buf.getvalue().split("\n"))
        if to_file:
            write_text(text)
        else:
            sys.stdout.write(text)
            sys.stdout.flush()
    else:
        draw(make_console())


def emit(doc, *, table: Optional[Callable] = None, extra: Optional[dict] = None,
         default: str = "table", allowed: Optional[Iterable[str]] = None) -> None:
    """Render ``doc`` in the chosen --format.

    table: ``draw(console)`` for the table format; extra: {format: callable -> str} for
    command-specific formats (matrix, dot, nccl-xml, torchrun, ...)."""
    extra = extra or {}
    fmt = chosen_format(default)
    allowed = list(allowed) if allowed is not None else (["table"] if table else []) + ["json", "yaml"] + list(extra)
    check_format(fmt, allowed)
    if fmt == "json":
        write_stream(lambda write: write_json(doc, write))
    elif fmt == "yaml":
        write_text(dumps_yaml(doc))
    elif fmt in extra:
        text = extra[fmt]()
        write_text(text if text.endswith("\n") else text + "\n")
    elif fmt == "table" and table is not None:
        render_rich(table)
    else:  # pragma: no cover - check_format guards this
        raise InputError(f"--format {fmt} is not available for this command")
