"""Exceptions shared by probes and planners.  The CLI maps each to an exit code (the CLI contract, docs/ARCHITECTURE.md);
nothing below the CLI prints or exits: a problem that is not fatal (a field repaired while a file
is loaded) goes to :func:`report`, which the CLI points at stderr."""
from __future__ import annotations

from typing import Callable, Optional

_reporter: Optional[Callable[[str], None]] = None


def set_reporter(fn: Optional[Callable[[str], None]]) -> None:
    """Where :func:`report` sends its lines (None: nowhere; the CLI sets its warning printer)."""
    global _reporter
    _reporter = fn


def report(message: str) -> None:
    """A non-fatal problem with an input, as it is found (also kept in the document's warnings)."""
    if _reporter is not None:
        _reporter(message)


class GpucommError(Exception):
    """Base class: a user-facing, one-line error."""

    exit_code = 1

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:  # one line, always
        return " ".join(str(self.message).split())


class InputError(GpucommError):
    """A source the user can fix: a bad file or flag value (exit 1)."""

    exit_code = 1

    def __init__(self, message: str, path: Optional[str] = None, line: Optional[int] = None,
                 expected: Optional[str] = None):
        where = ""
        if path:
            where = f"{path}"
            if line is not None:
                where += f":{line}"
            where += ": "
        text = where + message
        if expected:
            text += f" (expected {expected})"
        super().__init__(text)
        self.path, self.line, self.expected = path, line, expected


class TopologyError(InputError):
    """A topology that lacks what a command needs (e.g. no NICs for --nodes 4)."""


class NothingToDo(GpucommError):
    """Nothing to work on, e.g. ``plan`` on a topology without GPUs (exit 3)."""

    exit_code = 3


class PlanInfeasible(GpucommError):
    """A request that cannot be satisfied (exit 4), e.g. tp=3 on 8 GPUs."""

    exit_code = 4
