"""Global options (``--format``, ``-o``, ``--force``, ``--quiet``, ``--verbose``, ``--traceback``),
set once by the app callback and read by commands and renderers."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Optional


@dataclass
class Settings:
    format: Optional[str] = None
    output: Optional[str] = None
    quiet: bool = False
    verbose: bool = False
    traceback: bool = False
    force: bool = False
    said: set = field(default_factory=set)  # diagnostics printed in this run (each once)
    stdout: object = field(default_factory=lambda: sys.stdout)
    stderr: object = field(default_factory=lambda: sys.stderr)


SETTINGS = Settings()


def reset() -> Settings:
    global SETTINGS
    SETTINGS.__dict__.update(Settings().__dict__)
    return SETTINGS


def diag(message: str, *, verbose_only: bool = False) -> None:
    """A diagnostic line on stderr (suppressed by --quiet; --verbose-only lines need --verbose)."""
    if SETTINGS.quiet or (verbose_only and not SETTINGS.verbose) or message in SETTINGS.said:
        return
    SETTINGS.said.add(message)
    from gpucomm.render.text import printable

    print(printable(message), file=sys.stderr)
