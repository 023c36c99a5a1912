"""The rich console commands draw on: colour and a terminal's width on a terminal; on a pipe or a file
(or with ``-o``) no colour, no styles, and the width of :func:`plain_width`.

Below :mod:`gpucomm.render.output` and :mod:`gpucomm.render.plain`, which both make one (plain's for what
it does not write itself); rich is imported only when a console is made."""
from __future__ import annotations

import os
import sys
from typing import Optional

from gpucomm.settings import SETTINGS


_SAFE_CONSOLE = None


def safe_console_class():
    """rich's Console printing every text through :func:`gpucomm.render.text.printable`: strings before
    rich lays them out (so tables stay aligned), and whatever text a renderable built itself as it is
    written (rich's own control sequences, colours included, are not text and pass)."""
    global _SAFE_CONSOLE
    if _SAFE_CONSOLE is None:
        from rich.console import Console
        from rich.segment import Segment

        from gpucomm.render.text import printable

        class SafeConsole(Console):
            def render_str(self, text, *args, **kwargs):
                return super().render_str(printable(text), *args, **kwargs)

            def render(self, renderable, options=None):
                for seg in super().render(renderable, options):
                    if seg.control or not seg.text or printable(seg.text) is seg.text:
                        yield seg
                    else:
                        yield Segment(printable(seg.text), seg.style, seg.control)

        _SAFE_CONSOLE = SafeConsole
    return _SAFE_CONSOLE


def make_console(file=None, width: Optional[int] = None):
    target = file if file is not None else sys.stdout
    is_tty = hasattr(target, "isatty") and target.isatty() and not SETTINGS.output
    if width is None and not is_tty:
        width = plain_width()
    return safe_console_class()(file=target, width=width, force_terminal=is_tty if is_tty else False,
                   no_color=not is_tty or bool(os.environ.get("NO_COLOR")), highlight=False,
                   soft_wrap=True,   # text lines are never broken; tables fit themselves (render/tables.py)
                   emoji=False)      # ":cd:" in a bus id (0000:cd:00.0) is not an emoji


def plain_width() -> int:
    """The width of output that is not a terminal: $COLUMNS, else 80 (as a terminal of unknown size)."""
    return int(os.environ.get("COLUMNS", "0") or 0) or 80
