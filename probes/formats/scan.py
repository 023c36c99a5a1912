"""Searches that stay linear in the length of a line, for the readers of recorded tool output.

Python's regular expressions backtrack: ``re.search(r"[A-Za-z][\\w.-]*:\\d+ ...", line)`` starts
again at every character of a long run of word characters and crosses the rest of the run each
time, so one line of 256 KiB takes minutes.  :class:`HostPrefixed` finds the same leftmost match
of ``FIRST RUN* TAIL`` (a host name, then a tail that starts with a character the host never
holds, such as NCCL's ``:pid:tid [dev] NCCL INFO``) by searching for the tail first and then
walking back over the host once.

>>> s = HostPrefixed(r"[A-Za-z]", r"[\\w.-]", r":\\d+:\\d+ \\[\\d+\\] NCCL INFO\\b")
>>> line = "  1.5 12gpu-7.x:42:43 [0] NCCL INFO Channel 00"
>>> m = s.search(line)
>>> m.start(), m.group(0)
(8, 'gpu-7.x:42:43 [0] NCCL INFO')
>>> s.search("a" * 100000) is None
True
"""
from __future__ import annotations

import re
from typing import Optional


class Span:
    """The part of :class:`re.Match` the readers use: ``start()``, ``end()``, ``group(0)``."""

    __slots__ = ("string", "_start", "_end")

    def __init__(self, string: str, start: int, end: int) -> None:
        self.string, self._start, self._end = string, start, end

    def start(self) -> int:
        return self._start

    def end(self) -> int:
        return self._end

    def group(self, n: int = 0) -> str:
        if n != 0:
            raise IndexError(n)
        return self.string[self._start:self._end]


class HostPrefixed:
    """``re.compile(FIRST + RUN + "*" + TAIL).search`` in linear time, where FIRST and RUN are
    one-character classes (FIRST within RUN) and TAIL's first character is never in RUN."""

    def __init__(self, first: str, run: str, tail: str) -> None:
        self.first = re.compile(first)
        self.run = re.compile(run)
        self.tail = re.compile(tail)

    def search(self, line: str, pos: int = 0) -> Optional[Span]:
        floor = pos
        for m in self.tail.finditer(line, pos):
            c = m.start()
            p = c
            while p > floor and self.run.match(line, p - 1):   # back to where the run of host characters starts
                p -= 1
            q = p
            while q < c and not self.first.match(line, q):   # its first character that may start a host
                q += 1
            if q < c:
                return Span(line, q, m.end())
            floor = c + 1   # the next tail's run cannot reach back past this tail's first character
        return None


__all__ = ["HostPrefixed", "Span"]
