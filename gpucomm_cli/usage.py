"""Usage errors (exit 2), and the click exceptions :func:`gpucomm.app.run` turns into exit codes, through
typer's public API.

A usage error -- a flag value out of range, a missing input, a format the command does not have -- exits 2
(the CLI contract, docs/ARCHITECTURE.md); errors in the inputs themselves exit 1 (gpucomm.probes.errors).

typer exports click's ``BadParameter`` as ``typer.BadParameter`` in every release gpucomm supports: click's
own up to typer 0.25 (click is then typer's dependency), the copy of click typer vendors from 0.26 on (in
``typer._click``, a private module gpucomm never imports).  click documents ``BadParameter`` as a
``UsageError``, itself a ``ClickException``: those two are named here as that class's bases, whichever
click it is.  A usage error raised without a context gets the running command's from click
(``Context.invoke`` adds it), so it prints the command's ``Usage:`` line.

Only typer is imported here (``gpucomm --help`` start-up time)."""
from __future__ import annotations

from typing import NoReturn, Optional

import typer


def _click_class(name: str) -> type:
    """The base class ``name`` of typer's public ``BadParameter`` (click's exception hierarchy)."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)


UsageError = _click_class("UsageError")            # exit 2
ClickException = _click_class("ClickException")    # any other error click reports itself: exit 1


def usage_error(message: str, param: Optional[str] = None) -> NoReturn:
    """Raise click's usage error (exit 2): ``Invalid value for 'PARAM': message`` when a flag is named,
    else the message alone, under the command's usage line."""
    if param:
        raise typer.BadParameter(message, param_hint=f"'{param}'")
    raise UsageError(message)
