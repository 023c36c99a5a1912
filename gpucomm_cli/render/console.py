"""The rich console commands draw on: colour and a terminal's width on a terminal; on a pipe or a file
(or with ``-o``) no colour, no styles, and the width of :func:`plain_width`.

Below :mod:`gpucomm.render.output` and :mod:`gpucomm.render.plain`, which both make one (plain's for what
it does not write itself); rich is imported only when a console is made."""
from __future__ import annotations

import os
import sys
from typing import Optional

from gpucomm.settings import SETTINGS


def make_console(file=None, width: Optional[int] = None):
    from rich.console import Console

    target = file if file is not None else sys.stdout
    is_tty = hasattr(target, "isatty") and target.isatty() and not SETTINGS.output
    if width is None and not is_tty:
        width = plain_width()
    return Console(file=target, width=width, force_terminal=is_tty if is_tty else False,
                   no_color=not is_tty or bool(os.environ.get("NO_COLOR")), highlight=False,
                   soft_wrap=True,   # text lines are never broken; tables fit themselves (render/tables.py)
                   emoji=False)      # ":cd:" in a bus id (0000:cd:00.0) is not an emoji


def plain_width() -> int:
    """The width of output that is not a terminal: $COLUMNS, else 240."""
    return int(os.environ.get("COLUMNS", "0") or 0) or 240
