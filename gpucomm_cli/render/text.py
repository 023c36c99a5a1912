"""Text that reaches a terminal: every character a terminal would act on instead of printing, escaped.

The lowest module of the render layer (it imports nothing of gpucomm): the consoles, the writers and the
diagnostics on stderr all escape through it."""
from __future__ import annotations

import re

# What a terminal acts on instead of printing: C0 controls but tab and newline, DEL, C1 controls (ESC [ and
# its one-byte form CSI), and the bidirectional overrides that reorder what is shown ("Trojan Source").
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on written as a ``\\uXXXX`` escape (valid in
    JSON and YAML strings, readable in a table): names, warnings and errors from an input never reach the
    terminal raw.  Every text render goes through it once: the consoles (:func:`gpucomm.render.console.make_console`),
    :func:`gpucomm.render.output.write_text`, and the diagnostics on stderr.

    >>> printable("GPU0\\x1b]0;x\\x07 \\u202egnp.exe\\tok\\n")
    'GPU0\\\\u001b]0;x\\\\u0007 \\\\u202egnp.exe\\tok\\n'
    """
    if not _UNSAFE.search(text):
        return text
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
