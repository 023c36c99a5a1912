"""Output to a pipe or a file is written without rich where it can be (gpucomm.render.plain), and is
byte for byte what rich writes there: on generated tables and lines, and on every command's table."""
from __future__ import annotations

import io

import pytest
from hypothesis import given, settings, strategies as st

from gpucomm.render import output
from gpucomm.render.plain import PlainConsole, Table
from gpucomm.render.tables import print_table
from support import TABLE_CASES, run_cli

# printable ASCII with what rich treats specially (markup brackets, escapes, line breaks), a tab,
# and a few characters outside ASCII (wide, combining, accented)
_TEXT = st.text(alphabet=st.sampled_from(list("ab Z09-_>.,:/[]\\@#=\n\t") + ["µ", "字", "é", "\u0301"]),
                max_size=14)
_ASCII = st.text(alphabet=st.sampled_from(list("ab Z09-_>.,:/ ")), max_size=14)


def _both(draw, width: int):
    """(plain console output, rich console output) of ``draw(console)``, each as render_rich keeps it."""
    def run(console) -> str:
        try:
            draw(console)
        except Exception as e:   # noqa: BLE001 - markup rich refuses (a stray "[/]"): refused alike
            return f"{type(e).__name__}: {e}"
        return "\n".join(line.rstrip() for line in console.file.getvalue().split("\n"))  # render_rich's step

    return run(PlainConsole(io.StringIO(), width)), run(output.make_console(io.StringIO(), width=width))


@st.composite
def tables(draw, text=_TEXT):
    ncols = draw(st.integers(1, 4))
    spec = dict(title=draw(st.one_of(st.none(), text)), show_lines=draw(st.booleans()))
    if draw(st.booleans()):
        spec["title_justify"] = "left"
    cols = [(draw(text), draw(st.sampled_from(["left", "right", "center"])), draw(st.booleans()))
            for _ in range(ncols)]
    rows = draw(st.lists(st.lists(text, min_size=ncols, max_size=ncols), max_size=4))
    return spec, cols, rows


def _build(spec, cols, rows) -> Table:
    t = Table(**spec)
    for header, justify, no_wrap in cols:
        t.add_column(header, justify=justify, no_wrap=no_wrap)
    for r in rows:
        t.add_row(*r)
    return t


@settings(max_examples=150, deadline=None)
@given(tables(), st.sampled_from([20, 60, 240]))
def test_print_table_writes_what_rich_writes(table, width):
    plain, rich = _both(lambda c: print_table(c, _build(*table)), width)
    assert plain == rich


@settings(max_examples=100, deadline=None)
@given(tables(text=_ASCII), st.sampled_from([30, 240]))
def test_printing_a_table_writes_what_rich_writes(table, width):
    plain, rich = _both(lambda c: c.print(_build(*table)), width)
    assert plain == rich


@settings(max_examples=200, deadline=None)
@given(_TEXT, st.booleans(), st.sampled_from([10, 240]))
def test_printing_a_line_writes_what_rich_writes(text, markup, width):
    plain, rich = _both(lambda c: c.print(text, soft_wrap=True, highlight=False, markup=markup), width)
    assert plain == rich


def test_plain_tables_need_no_rich():
    t = Table(title="Rings", title_justify="left")
    t.add_column("channel", justify="right")
    t.add_column("order", no_wrap=True)
    t.add_row("0", "GPU0 > GPU1 > GPU0")
    assert t.lines() == ["┏━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━┓",
                         "┃ channel ┃ order              ┃",
                         "┡━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━┩",
                         "│       0 │ GPU0 > GPU1 > GPU0 │",
                         "└─────────┴────────────────────┘"]
    t.add_row("1", "[bold]x[/]")               # markup: rich draws it
    assert t.lines() is None
    assert Table(box=None).lines() is None     # an option the plain writer does not have


@pytest.mark.parametrize("width", [80, 240])
@pytest.mark.parametrize("args", TABLE_CASES, ids=lambda a: "-".join(x.split("/")[-1] for x in a)[:60])
def test_every_command_writes_what_rich_writes(monkeypatch, width, args):
    monkeypatch.setenv("COLUMNS", str(width))
    plain = run_cli(*args)
    monkeypatch.setattr(output, "plain_console", lambda f: output.make_console(f))
    rich = run_cli(*args)
    assert (plain.code, plain.stdout) == (rich.code, rich.stdout)
