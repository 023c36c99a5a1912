"""Tables that stay readable at any width without breaking what users copy.

A value a user copies -- a ring order, an env value, a bus id, a CPU list, a host name -- is never
wrapped or cut: columns are ``no_wrap`` except the prose ones a command names (reasons, findings,
descriptions), which may wrap.  When the table cannot fit the terminal that way it is printed in a
narrower layout -- one record per row, one ``header: value`` per line -- instead of squeezing
columns to nothing.  Titles are printed as their own lines, wrapped at spaces like other prose
(:func:`gpucomm.render.plain.wrap_prose`).  Output that is not a terminal is as wide as $COLUMNS
says, else 80 columns (``doctor | cat`` gets the list layout a narrow terminal gets).

rich is imported inside the functions (``gpucomm --help`` must not pay for it).
"""
from __future__ import annotations

from typing import Iterable


def plural(n: int, word: str, many: str = "") -> str:
    """``1 channel``, ``2 channels``; ``many`` for irregular plurals.

    >>> plural(1, "channel"), plural(8, "channel"), plural(1, "node"), plural(2, "NIC")
    ('1 channel', '8 channels', '1 node', '2 NICs')
    """
    return f"{n} {word if n == 1 else (many or word + 's')}"


def _plain(cell) -> str:
    from gpucomm.render.plain import plain_text

    if plain_text(cell):      # a plain string is its own text (no rich needed)
        return cell
    from rich.text import Text

    if isinstance(cell, Text):
        return cell.plain
    try:
        return Text.from_markup(str(cell)).plain
    except Exception:  # noqa: BLE001 - a cell that is not markup is its own text
        return str(cell)


def print_table(console, table, prose: Iterable[str] = (), narrow=None) -> None:
    """Print ``table`` whole: its title as a line, then the table if it fits with only the
    ``prose`` columns wrapping (on a terminal; a pipe or a file gets tables only at their natural
    width), else ``narrow(console)`` or one record per row (prose wrapped)."""
    from gpucomm.render.plain import PlainConsole, Table as PlainTable

    prose = set(prose)
    plain_out = not console.is_terminal and console.no_color
    title = table.title
    table.title = None
    if title:
        from gpucomm.render.plain import print_prose

        print_prose(console, title if isinstance(title, str) else _plain(title))   # a title is prose: it wraps
    if isinstance(table, PlainTable):
        text = table.text_within(console.width) if plain_out else None
        if text is not None:
            console.file.write(text)    # what the plain console below would write
            return
        if plain_out and table.lines() is not None:   # too wide: the narrow layout, still without rich
            if narrow is not None:
                narrow(console)
            else:
                print_records(console, table, prose)
            return
        table = table.__rich__()
    if isinstance(console, PlainConsole):
        console = console.rich()
    for col in table.columns:
        if _plain(col.header) not in prose:
            col.no_wrap = True
    natural, text = _natural(table)
    if natural <= console.width and plain_out:
        # a plain console (a pipe, a file) prints the table at its natural width exactly as measured
        console.file.write(text)
        return
    if not plain_out and _min_width(table, prose, natural) <= console.width:
        console.print(table, soft_wrap=False)
        return
    if narrow is not None:
        narrow(console)
        return
    print_records(console, table, prose)


PROSE_MIN = 24   # a prose column narrower than this reads as a word per line


def _natural(table) -> tuple:
    """(width, text) of the table printed without a width limit, in plain text."""
    import io

    from gpucomm.render.console import safe_console_class

    wide = safe_console_class()(file=io.StringIO(), width=100_000, color_system=None, highlight=False)
    wide.print(table, soft_wrap=False)
    text = wide.file.getvalue()
    return max((len(line.rstrip()) for line in text.split("\n")), default=0), text


def _min_width(table, prose, natural: int) -> int:
    """The width the table needs when only its prose columns wrap (down to PROSE_MIN each)."""
    from rich.cells import cell_len

    need = natural
    for col in table.columns:
        if _plain(col.header) in prose:
            nat = max([cell_len(line) for c in col._cells for line in _plain(c).split("\n")]
                      + [cell_len(_plain(col.header))])
            need -= max(0, nat - PROSE_MIN)
    return need


def print_records(console, table, prose: Iterable[str] = ()) -> None:
    """The narrow layout: ``header0 value0`` then ``  header: value`` for the other columns, the
    ``prose`` ones wrapped at the console's width (values whole)."""
    from gpucomm.render.plain import print_prose

    prose = set(prose)
    headers = [_plain(c.header) for c in table.columns]
    cells = [[_plain(x) for x in c._cells] for c in table.columns]
    rows = len(cells[0]) if cells else 0
    for r in range(rows):
        first = cells[0][r]
        console.print(f"{headers[0]} {first}".strip() if headers[0] else first, soft_wrap=True, highlight=False,
                      markup=False)
        for h, col in zip(headers[1:], cells[1:]):
            value = col[r]
            if not value:
                continue
            lines = value.split("\n")
            if h in prose and len(lines) == 1:
                print_prose(console, lines[0], f"  {h}: " if h else "  ", "    ")
                continue
            console.print(f"  {h}: {lines[0]}" if h else f"  {lines[0]}", soft_wrap=True, highlight=False,
                          markup=False)
            for more in lines[1:]:
                console.print(f"    {more}", soft_wrap=True, highlight=False, markup=False)
