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
    allowed = list(allowed)
    if fmt not in allowed:
        raise InputError(f"--format {fmt} is not available for this command", expected=", ".join(allowed))


def make_console(file=None, width: Optional[int] = None):
    from rich.console import Console

    target = file if file is not None else sys.stdout
    is_tty = hasattr(target, "isatty") and target.isatty() and not SETTINGS.output
    if width is None and not is_tty:
        width = int(os.environ.get("COLUMNS", "0") or 0) or 240
    return Console(file=target, width=width, force_terminal=is_tty if is_tty else False,
                   no_color=not is_tty or bool(os.environ.get("NO_COLOR")), highlight=False,
                   soft_wrap=False)


def write_text(text: str) -> None:
    """Write data to -o FILE or stdout."""
    if SETTINGS.output and SETTINGS.output != "-":
        try:
            with open(SETTINGS.output, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            raise InputError(f"cannot write: {e.strerror}", SETTINGS.output) from None
    else:
        sys.stdout.write(text)
        sys.stdout.flush()


def write_stream(produce: Callable) -> None:
    """Like :func:`write_text` for a large document: ``produce(write)`` hands the text over piece
    by piece (``gpucomm.probes.model.write_json``), so it is never held whole."""
    if SETTINGS.output and SETTINGS.output != "-":
        try:
            with open(SETTINGS.output, "w", encoding="utf-8") as f:
                produce(f.write)
        except OSError as e:
            raise InputError(f"cannot write: {e.strerror}", SETTINGS.output) from None
    else:
        produce(sys.stdout.write)
        sys.stdout.flush()


def render_rich(draw: Callable) -> None:
    """Call ``draw(console)``; to a file the output is captured without colour."""
    if SETTINGS.output and SETTINGS.output != "-":
        buf = io.StringIO()
        draw(make_console(buf))
        write_text(buf.getvalue())
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
