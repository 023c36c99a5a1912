"""Units, in one place: message sizes, collective names and nccl-tests' bus-bandwidth factors.

Sizes (``--size``, ``--sizes``, ``--model seq=...`` never; every flag that takes bytes):

* a bare number or ``B``: bytes;
* ``K``, ``M``, ``G``, ``T`` (one letter): powers of 1024, as nccl-tests reads ``-b 8 -e 128M``
  (nccl-tests ``parsesize()``);
* ``KiB``, ``MiB``, ``GiB``, ``TiB``: powers of 1024 (IEC 80000-13);
* ``KB``, ``MB``, ``GB``, ``TB``: powers of 1000 (SI; IEC 80000-13 keeps these decimal).

So ``1M`` = ``1MiB`` = 1,048,576 bytes and ``1MB`` = 1,000,000 bytes, in every command.

Sweeps: ``MIN:MAX`` doubles (nccl-tests ``-f 2``), ``MIN:MAX:xF`` (or ``:F``) multiplies by F,
``A,B,C`` lists sizes in the order given.

Bandwidth: GB/s means 1e9 bytes per second, one direction (nccl-tests' algbw/busbw, NCCL's graph
bandwidths); NIC rates are Gb/s (1e9 bits per second) and :func:`gbps_to_GBps` converts.

>>> parse_size("1M"), parse_size("1MiB"), parse_size("1MB")
(1048576, 1048576, 1000000)
>>> parse_sizes("1KiB:8KiB")
[1024, 2048, 4096, 8192]
>>> busbw_factor("all_reduce", 8)
1.75
"""
from __future__ import annotations

import math
import re
from typing import Optional

from gpucomm.probes.errors import InputError

# --------------------------------------------------------------------------------------------
# Sizes
_SIZE_RE = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?|\.\d+)\s*(?P<unit>[A-Za-z]*)\s*$")
_UNITS = {
    "": 1, "b": 1,
    "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30,
    "t": 1 << 40, "tib": 1 << 40,
    "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12,
}
UNIT_HELP = "B, K/KiB, M/MiB, G/GiB, T/TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000)"
MAX_SIZE = 1 << 50          # 1 PiB: anything larger is a typo
MAX_SWEEP_POINTS = 256      # a sweep longer than this is a typo (8B:8GiB doubling is 31 sizes)
MAX_FABRIC_GBPS = 1e6       # --fabric-gbps: what one NIC delivers, Gb/s; more is a typo


def parse_size(text: str, flag: str = "--size", *, max_size: int = MAX_SIZE, minimum: int = 0) -> int:
    """One size (see the module docstring) -> bytes.

    Raises :class:`InputError` naming ``flag`` for junk, an unknown unit, a fraction of a byte, a size
    below ``minimum`` or above ``max_size``."""
    if not isinstance(text, str):
        raise InputError(f"{flag} {text!r}: not a size", expected="e.g. 8B, 1MiB, 1GiB")
    m = _SIZE_RE.match(text)
    if not m:
        raise InputError(f"{flag} {text!r}: not a size", expected=f"a number with an optional unit {UNIT_HELP}")
    unit = m.group("unit").lower()
    if unit not in _UNITS:
        raise InputError(f"{flag} {text!r}: unknown unit {m.group('unit')!r}", expected=UNIT_HELP)
    value = float(m.group("num")) * _UNITS[unit]
    if value > max_size:
        raise InputError(f"{flag} {text!r}: larger than {format_size(max_size)}",
                         expected=f"a size up to {format_size(max_size)}")
    if abs(value - round(value)) > 1e-6:
        raise InputError(f"{flag} {text!r}: not a whole number of bytes")
    if value < minimum:
        raise InputError(f"{flag} {text!r}: must be at least {minimum} byte{'s' if minimum != 1 else ''}")
    return int(round(value))


def parse_sizes(text: str, flag: str = "--size", *, max_size: int = MAX_SIZE, minimum: int = 0) -> list[int]:
    """``1GiB`` -> [1073741824]; ``8B:8GiB`` -> doubling sweep, both ends included; ``1K:1M:x4`` or
    ``1K:1M:4`` -> factor 4; ``a,b,c`` -> that list, in that order."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"{flag} is empty", expected="a size like 1GiB or a sweep like 8B:8GiB")
    text = text.strip()
    if "," in text:
        out: list[int] = []
        for part in text.split(","):
            if part.strip():
                out.extend(parse_sizes(part, flag, max_size=max_size, minimum=minimum))
            if len(out) > MAX_SWEEP_POINTS:
                raise InputError(f"{flag} {text!r}: more than {MAX_SWEEP_POINTS} sizes")
        if not out:
            raise InputError(f"{flag} {text!r}: no sizes", expected="a comma-separated list of sizes")
        return out
    parts = text.split(":")
    if len(parts) == 1:
        return [parse_size(parts[0], flag, max_size=max_size, minimum=minimum)]
    if len(parts) > 3:
        raise InputError(f"{flag} {text!r}: too many ':'", expected="MIN:MAX or MIN:MAX:xFACTOR")
    lo = parse_size(parts[0], flag, max_size=max_size, minimum=minimum)
    hi = parse_size(parts[1], flag, max_size=max_size, minimum=minimum)
    factor = 2.0
    if len(parts) == 3:
        f = parts[2].strip().lower().lstrip("x*")
        try:
            factor = float(f)
        except ValueError:
            raise InputError(f"{flag} {text!r}: bad factor {parts[2]!r}", expected="xF with F > 1, e.g. x2") from None
        if not math.isfinite(factor) or factor <= 1.0:
            raise InputError(f"{flag} {text!r}: factor must be > 1", expected="xF with F > 1, e.g. x2")
    if lo <= 0:
        raise InputError(f"{flag} {text!r}: a sweep must start above 0 bytes")
    if hi < lo:
        raise InputError(f"{flag} {text!r}: MAX is smaller than MIN", expected="MIN:MAX with MIN <= MAX")
    out = []
    v = float(lo)
    while v <= hi * (1 + 1e-12):
        out.append(int(round(v)))
        if len(out) > MAX_SWEEP_POINTS:
            raise InputError(f"{flag} {text!r}: more than {MAX_SWEEP_POINTS} sizes", expected="a larger factor")
        v *= factor
    return out


def format_size(n: int) -> str:
    """Bytes -> the shortest exact binary spelling (``1048576`` -> ``1MiB``, ``1000`` -> ``1000B``).

    >>> format_size(1 << 50), format_size(3 << 20), format_size(1536)
    ('1024TiB', '3MiB', '1536B')
    """
    for unit, mult in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{unit}"
    return f"{n}B"


# --------------------------------------------------------------------------------------------
# Bandwidth
def gbps_to_GBps(gbps: Optional[float]) -> Optional[float]:
    """A NIC rate in Gb/s -> GB/s (bytes): 400 Gb/s NDR -> 50 GB/s.  None stays None."""
    return None if gbps is None else float(gbps) / 8.0


# --------------------------------------------------------------------------------------------
# Collectives: names and nccl-tests' bus bandwidth
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "send_recv")
_ALIASES = {
    "allreduce": "all_reduce", "ar": "all_reduce", "allgather": "all_gather", "ag": "all_gather",
    "reducescatter": "reduce_scatter", "rs": "reduce_scatter", "bcast": "broadcast",
    "alltoall": "all_to_all", "a2a": "all_to_all", "sendrecv": "send_recv", "p2p": "send_recv",
}


def normalize_collective(name: str, flag: str = "--collective") -> str:
    """``all_reduce``/``allreduce``/``all-reduce``/``all_reduce_perf``/``ar`` -> ``all_reduce``.

    Raises :class:`InputError` naming ``flag`` for anything else."""
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"{flag} is empty", expected=", ".join(COLLECTIVES))
    key = name.strip().lower().replace("-", "_")
    if key.endswith("_perf"):
        key = key[: -len("_perf")]
    key = _ALIASES.get(key.replace("_", ""), _ALIASES.get(key, key))
    if key not in COLLECTIVES:
        raise InputError(f"{flag} {name}: unknown collective", expected=", ".join(COLLECTIVES))
    return key


def busbw_factor(collective: str, n: int) -> float:
    """nccl-tests' busbw/algbw factor for ``n`` ranks (nccl-tests src/*.cu ``*GetBw``, doc/PERFORMANCE.md):
    all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast, reduce and
    send/recv 1.  With one rank the data-moving collectives have factor 0 (nothing crosses a link).

    >>> busbw_factor("all_gather", 4), busbw_factor("send_recv", 2), busbw_factor("all_reduce", 1)
    (0.75, 1.0, 0.0)
    """
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}")
    n = int(n)
    if n < 1:
        raise ValueError("a collective needs at least one rank")
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def bandwidths(collective: str, size_bytes: int, time_s: float, nranks: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for ``size_bytes`` moved in ``time_s`` seconds (nccl-tests ``*GetBw``:
    algbw = S / t with S in 1e9 bytes)."""
    if time_s <= 0:
        return 0.0, 0.0
    alg = size_bytes / 1.0e9 / time_s
    return alg, alg * busbw_factor(collective, nranks)
