"""Rendering shared by every command: deterministic JSON/YAML, rich tables, and the choice of
stdout or ``-o FILE``.  Data goes to stdout, diagnostics to stderr.

``-o FILE``: the format follows FILE's extension (:data:`EXTENSION_FORMATS`) unless --format says
otherwise; FILE is written atomically (a temporary file in its directory, then a rename), an
existing FILE is replaced only with --force and a symbolic link is never followed
(:func:`gpucomm.probes.files.write_atomic`); ``-o -`` is stdout."""
from __future__ import annotations

import io
import sys
from typing import Callable, Iterable, Optional

from gpucomm.probes.errors import InputError
from gpucomm.probes.model import dumps_yaml, write_json

from gpucomm.render.console import make_console, plain_width
from gpucomm.settings import SETTINGS

# -o FILE.ext -> --format (data formats that read back, and the Graphviz picture)
EXTENSION_FORMATS = {".json": "json", ".yaml": "yaml", ".yml": "yaml", ".xml": "nccl-xml", ".dot": "dot", ".gv": "dot"}


def output_file() -> Optional[str]:
    """The -o FILE data goes to, None for stdout (no -o, or ``-o -``)."""
    out = SETTINGS.output
    return out if out and out != "-" else None


def format_from_output() -> Optional[str]:
    """The format -o FILE's extension names (None: no -o, or no known extension)."""
    out = output_file()
    if out is None:
        return None
    low = out.lower()
    return next((fmt for ext, fmt in EXTENSION_FORMATS.items() if low.endswith(ext)), None)


def chosen_format(default: str = "table", allowed: Optional[Iterable[str]] = None) -> str:
    """--format, else the one -o FILE's extension names, else ``default``."""
    if SETTINGS.format:
        return SETTINGS.format.lower()
    implied = format_from_output()
    if implied is not None:
        allowed = list(allowed) if allowed is not None else None
        if allowed is not None and implied not in allowed:
            raise InputError(f"the extension asks for {implied}, which this command does not write",
                             SETTINGS.output, expected="--format " + "|".join(allowed) + ", or another file name")
        return implied
    return default


def check_format(fmt: str, allowed: Iterable[str]) -> None:
    """A --format the command does not have is a usage error (exit 2)."""
    allowed = list(allowed)
    if fmt not in allowed:
        from gpucomm.usage import usage_error

        usage_error(f"{fmt!r} is not a format of this command (it has {', '.join(allowed)})", "--format")


def plain_console(file):
    """The console of :func:`make_console` for a pipe or a file, without importing rich for plain
    lines and tables (:mod:`gpucomm.render.plain`)."""
    from gpucomm.render.plain import PlainConsole

    return PlainConsole(file, plain_width())


def text_width() -> int:
    """The columns text output has: the terminal's, else :func:`gpucomm.render.console.plain_width`."""
    if output_file() is None and hasattr(sys.stdout, "isatty") and sys.stdout.isatty():
        import shutil

        return shutil.get_terminal_size((80, 24)).columns
    return plain_width()


def wrap_comment_lines(text: str, width: Optional[int] = None) -> str:
    """nccl-tests-style text with its long ``# ...`` prose lines wrapped at ``width`` (continued as
    ``#   ...``); data rows and short lines as they are."""
    width = width or text_width()
    lines = text.split("\n")

    def prose(line: str) -> bool:   # a long '# ' line that is not a table header (aligned columns)
        return line.startswith("# ") and len(line) > width and "  " not in line[2:].strip()

    if not any(prose(line) for line in lines):
        return text
    from gpucomm.render.plain import wrap_prose

    out = []
    for line in lines:
        out += wrap_prose(line[2:], width, "# ", "#   ") if prose(line) else [line]
    return "\n".join(out)


def write_text(text: str, executable: bool = False) -> None:
    """Write data to -o FILE (atomically; see the module docstring; ``executable``: a script,
    written with the execute bits) or stdout, every character a terminal would act on escaped
    (:func:`gpucomm.render.text.printable`)."""
    from gpucomm.render.text import printable

    text = printable(text)
    out = output_file()
    if out is not None:
        from gpucomm.probes.files import write_atomic

        write_atomic(out, text, force=SETTINGS.force, executable=executable)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()


def write_stream(produce: Callable) -> None:
    """Like :func:`write_text` for a large document: ``produce(write)`` hands the text over piece
    by piece (``gpucomm.probes.model.write_json``), so it is never held whole."""
    out = output_file()
    if out is not None:
        from gpucomm.probes.files import write_atomic

        write_atomic(out, produce, force=SETTINGS.force)
    else:
        produce(sys.stdout.write)
        sys.stdout.flush()


def render_rich(draw: Callable) -> None:
    """Call ``draw(console)``; to a file or a pipe the output is captured without colour and
    without the padding rich leaves at the end of lines."""
    to_file = output_file() is not None
    if to_file or not (hasattr(sys.stdout, "isatty") and sys.stdout.isatty()):
        buf = io.StringIO()
        draw(plain_console(buf))
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
    allowed = list(allowed) if allowed is not None else (["table"] if table else []) + ["json", "yaml"] + list(extra)
    fmt = chosen_format(default, allowed)
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
