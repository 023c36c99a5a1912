"""Tables and lines for a pipe or a file, written without importing rich.

Output that is not a terminal is plain text: no colour, no styles, every table at its natural width
(:mod:`gpucomm.render.tables`).  rich takes ~35 ms to import, a seventh of a command's start-up, so for
that case :class:`PlainConsole` writes the same bytes itself: a line of text as ``print`` would, a
:class:`Table` in rich's default box (``HEAVY_HEAD``) with one space of padding.  What it does not cover
(rich markup, control or non-ASCII characters, rich renderables, a table wider than the console,
options beyond the ones below) goes to a real rich console writing to the same file, imported then.
tests/test_plain_render.py checks both give the same bytes, on generated tables and on every command.

:class:`Table` is also what commands build for a terminal: rich renders it through ``__rich__``.
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

_JUSTIFY = ("left", "right", "center")
# HEAVY_HEAD, as rich draws it: top, header row, below the header, rows, between rows, bottom
_TOP, _HEAD, _HEAD_ROW, _ROW, _ROW_SEP, _BOTTOM = "┏━┳┓", "┃ ┃┃", "┡━╇┩", "│ ││", "├─┼┤", "└─┴┘"


# rich's markup tags (rich.markup.RE_TAGS); text without one, and without an escaped bracket, is printed as it is
_TAG = re.compile(r"((\\*)\[([a-z#/@][^[]*?)])")

def plain_text(s: Any, markup: bool = True) -> bool:
    """Whether rich would print ``s`` as it is: a str of printable ASCII (and line breaks) with no
    markup tag when markup is on.

    >>> plain_text("GPU0 > GPU1"), plain_text("axes ['pp', 'tp']"), plain_text("[bold]x[/]"), plain_text("µs")
    (True, True, False, False)
    >>> plain_text("[b]x", markup=False), plain_text("a \\\\[b"), plain_text("tab\\there")
    (True, False, False)
    """
    if not isinstance(s, str) or not s.isascii():
        return False
    if markup and "[" in s and ("\\[" in s or _TAG.search(s)):
        return False
    return all(" " <= c <= "~" or c == "\n" for c in s)


_QUOTED = re.compile(r"`[^`]*`")
NBSP = "\u00a0"


def wrap_prose(text: str, width: int, first: str = "", rest: Optional[str] = None) -> List[str]:
    """``text`` broken at spaces into lines of at most ``width`` columns, ``first`` before the first
    line and ``rest`` (default: as many spaces) before the others.  What a user copies stays whole:
    a word longer than the line (a path, a bus id, a file name) is never broken, nor a `quoted
    command`.

    >>> wrap_prose("fix: run `nvidia-smi nvlink -s` then reset the GPU", 24, "  ")
    ['  fix: run', '  `nvidia-smi nvlink -s`', '  then reset the GPU']
    """
    import textwrap

    rest = " " * len(first) if rest is None else rest
    held = _QUOTED.sub(lambda m: m.group(0).replace(" ", NBSP), text)
    lines = textwrap.wrap(held, width=max(20, width), initial_indent=first, subsequent_indent=rest,
                          break_long_words=False, break_on_hyphens=False) or [first.rstrip()]
    return [ln.replace(NBSP, " ") for ln in lines]


def print_prose(console, text: str, first: str = "", rest: Optional[str] = None) -> None:
    """Print ``text`` as :func:`wrap_prose` breaks it at the console's width."""
    for line in wrap_prose(text, console.width, first, rest):
        console.print(line, soft_wrap=True, highlight=False, markup=False)


class Column:
    """One column: what :func:`gpucomm.render.tables.print_table` reads (``header``, ``no_wrap``, ``_cells``)."""

    def __init__(self, header: Any, kwargs: dict):
        self.header = header
        self.kwargs = kwargs
        self.justify = kwargs.get("justify", "left")
        self.no_wrap = kwargs.get("no_wrap", False)
        self._cells: List[Any] = []


class Table:
    """The part of ``rich.table.Table`` commands use: ``Table(title=..., title_justify=..., show_header=...,
    show_lines=...)``, ``add_column(header, justify=, no_wrap=, style=, overflow=)``, ``add_row(*cells)``,
    ``row_count``, ``columns``, ``title``.  Other options are kept for rich, which then draws the table."""

    _OWN = {"title", "title_justify", "show_lines"}
    _COLUMN_OWN = {"justify", "no_wrap", "style", "overflow", "header_style"}

    def __init__(self, *headers: Any, **kwargs: Any):
        self.title = kwargs.get("title")
        self.show_lines = bool(kwargs.get("show_lines", False))
        self.kwargs = kwargs
        self.columns: List[Column] = []
        self.row_count = 0
        self._row_kwargs: Dict[int, dict] = {}     # rich-only options of rows (such a table is rich's to draw)
        self._rich_only = kwargs.get("show_header", True) is not True or any(
            k not in self._OWN | {"show_header"} for k in kwargs)
        for h in headers:
            self.add_column(h)

    def add_column(self, header: Any = "", **kwargs: Any) -> None:
        col = Column(header, kwargs)
        if any(k not in self._COLUMN_OWN for k in kwargs) or col.justify not in _JUSTIFY:
            self._rich_only = True
        if self.row_count:
            col._cells.extend([""] * self.row_count)
        self.columns.append(col)

    def add_row(self, *cells: Any, **kwargs: Any) -> None:
        if kwargs or len(cells) > len(self.columns):
            self._rich_only = True
            self._row_kwargs[self.row_count] = kwargs
            while len(self.columns) < len(cells):
                self.add_column("")
        for i, col in enumerate(self.columns):
            col._cells.append(cells[i] if i < len(cells) else "")
        self.row_count += 1

    # -- rich -------------------------------------------------------------------------------------
    def __rich__(self):
        """The same table as ``rich.table.Table`` (for a terminal, and whatever :meth:`lines` leaves out)."""
        from rich.table import Table as RichTable

        t = RichTable(**{**self.kwargs, "title": self.title})
        for col in self.columns:
            t.add_column(col.header, **{**col.kwargs, "no_wrap": col.no_wrap})
        for r in range(self.row_count):
            t.add_row(*[col._cells[r] for col in self.columns], **self._row_kwargs.get(r, {}))
        return t

    # -- plain ------------------------------------------------------------------------------------
    def lines(self) -> Optional[List[str]]:
        """The table (without its title) at its natural width, as rich draws it on a plain console;
        None when rich must draw it."""
        if self._rich_only or not self.columns:
            return None
        cols = self.columns
        if not all(plain_text(c.header) for c in cols) or not all(plain_text(x) for c in cols for x in c._cells):
            return None
        if any(line != line.strip() for c in cols for x in [c.header, *c._cells] for line in x.split("\n")):
            return None     # rich trims and re-justifies padded text: it draws those
        widths = [max(len(line) for x in [c.header, *c._cells] for line in x.split("\n")) for c in cols]

        def rule(box: str) -> str:
            return box[0] + box[2].join(box[1] * (w + 2) for w in widths) + box[3]

        def row(box: str, cells: list) -> List[str]:
            split = [x.split("\n") for x in cells]
            height = max(len(s) for s in split)
            out = []
            for k in range(height):
                parts = []
                for c, w, s in zip(cols, widths, split):
                    text = s[k] if k < len(s) else ""
                    gap = w - len(text)
                    if c.justify == "right":
                        text = " " * gap + text
                    elif c.justify == "center":
                        text = " " * (gap // 2) + text + " " * (gap - gap // 2)
                    else:
                        text = text + " " * gap
                    parts.append(f" {text} ")
                out.append(box[0] + box[2].join(parts) + box[3])
            return out

        lines = [rule(_TOP), *row(_HEAD, [c.header for c in cols]), rule(_HEAD_ROW)]
        for r in range(self.row_count):
            if r and self.show_lines:
                lines.append(rule(_ROW_SEP))
            lines.extend(row(_ROW, [c._cells[r] for c in cols]))
        lines.append(rule(_BOTTOM))
        return lines

    def text_within(self, width: int) -> Optional[str]:
        """The plain table as text when :meth:`lines` draws it and it is at most ``width`` wide."""
        lines = self.lines()
        if lines is None or max(map(len, lines)) > width:
            return None
        return "\n".join(lines) + "\n"


class PlainConsole:
    """The console for a pipe or a file: ``print`` of plain lines and :class:`Table` s without rich;
    anything else through a rich console (created on first need) writing to the same file."""

    is_terminal = False
    no_color = True

    def __init__(self, file, width: int):
        self.file = file
        self.width = width
        self._console = None

    def rich(self):
        """The rich console this one stands for (imports rich)."""
        if self._console is None:
            from gpucomm.render.console import make_console

            self._console = make_console(self.file, width=self.width)
        return self._console

    def print(self, *objects: Any, **kwargs: Any) -> None:
        markup = kwargs.get("markup", True)
        if len(objects) == 1 and set(kwargs) <= {"soft_wrap", "highlight", "markup"}:
            obj = objects[0]
            if isinstance(obj, Table):
                text = obj.text_within(self.width) if obj.title is None else None
                if text is not None:
                    self.file.write(text)
                    return
            elif kwargs.get("soft_wrap", True) and plain_text(obj, markup=markup) and "\n" not in obj:
                self.file.write(obj + "\n")
                return
        self.rich().print(*objects, **kwargs)

    def measure(self, renderable: Any):
        return self.rich().measure(renderable)
