"""The ``gpucomm.bench/v1`` result and nccl-tests' formulas, without torch: the collectives and element
types a benchmark knows, the message sizes nccl-tests rounds to, one row of a sweep, a collective's summary.

Bandwidth definitions are nccl-tests' (``doc/PERFORMANCE.md`` and ``src/*.cu`` ``*GetBw``):
``algbw = S / t`` in GB/s (1e9 bytes), ``busbw = algbw * factor``:

==============  ==============================  ============
collective      S                               factor
==============  ==============================  ============
all_reduce      count * typesize                2(n-1)/n
all_gather      count * typesize * n (output)   (n-1)/n
reduce_scatter  count * typesize * n (input)    (n-1)/n
broadcast       count * typesize                1
all_to_all      count * typesize * n            (n-1)/n
==============  ==============================  ============

where ``count`` is what nccl-tests prints in its ``count`` column (per rank for all_gather,
reduce_scatter and all_to_all).  Message sizes are rounded down the way nccl-tests does
(``base = (count / (ALIGN*n)) * ALIGN`` elements with ALIGN = 4, src/all_gather.cu).
"""
from __future__ import annotations

from typing import Optional

from gpucomm.probes import units
from gpucomm.probes.errors import InputError

SCHEMA = "gpucomm.bench/v1"

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
# nccl-tests prints the redop for reductions and "none" otherwise; root -1 for unrooted collectives.
REDOP = {"all_reduce": "sum", "reduce_scatter": "sum", "all_gather": "none", "broadcast": "none",
         "all_to_all": "none"}
ROOTED = {"broadcast"}
# Collectives whose S is count * typesize * n (count printed per rank).
PER_RANK_COUNT = {"all_gather", "reduce_scatter", "all_to_all"}
ALIGN = 4  # elements; nccl-tests src/all_gather.cu, reduce_scatter.cu, alltoall.cu

# nccl-tests type names (src/common.cu test_typenames) -> (torch dtype attribute, bytes).
DTYPES = {
    "int8": ("int8", 1), "uint8": ("uint8", 1), "int32": ("int32", 4), "int64": ("int64", 8),
    "half": ("float16", 2), "float": ("float32", 4), "double": ("float64", 8), "bfloat16": ("bfloat16", 2),
}


def dtype_size(dtype: str) -> int:
    if dtype not in DTYPES:
        raise InputError(f"--dtype {dtype!r} is not supported", expected=", ".join(DTYPES))
    return DTYPES[dtype][1]


# --------------------------------------------------------------------------------------------
# nccl-tests formulas
def message_layout(op: str, size_bytes: int, nranks: int, typesize: int) -> tuple[int, int]:
    """(S bytes, count) for a requested size, rounded as nccl-tests does.

    all_reduce/broadcast: count = size / typesize elements, S = count * typesize.
    all_gather/reduce_scatter/all_to_all: count = per-rank elements rounded down to a multiple of
    ALIGN (nccl-tests ``base = (count/(ALIGN*nranks))*ALIGN``), S = count * typesize * n.
    Returns (0, 0) when the size is too small to give every rank one aligned chunk (nccl-tests skips)."""
    elems = size_bytes // typesize
    if op in PER_RANK_COUNT:
        base = (elems // (ALIGN * nranks)) * ALIGN
        return base * typesize * nranks, base
    return elems * typesize, elems


def _sig(x: float, digits: int = 7) -> float:
    """Round to significant digits: gloo on CPU gives MB/s-range numbers that 6 decimals would blur."""
    return float(f"{x:.{digits}g}")


def make_row(op: str, size_bytes: int, count: int, dtype: str, time_s: float, nranks: int,
             wrong: Optional[int]) -> dict:
    alg, bus = units.bandwidths(op, size_bytes, time_s, nranks)
    return {
        "size_bytes": int(size_bytes), "count": int(count), "type": dtype, "redop": REDOP[op],
        "root": 0 if op in ROOTED else -1, "time_us": round(time_s * 1e6, 3),
        "algbw_GBps": _sig(alg), "busbw_GBps": _sig(bus), "wrong": wrong,
    }


def summarise_collective(op: str, rows: list, note: Optional[str] = None) -> dict:
    bus = [r["busbw_GBps"] for r in rows]
    wrong = [r["wrong"] for r in rows if r["wrong"] is not None]
    return {"op": op, "rows": rows, "note": note,
            "avg_busbw_GBps": round(sum(bus) / len(bus), 6) if bus else 0.0,
            "peak_busbw_GBps": round(max(bus), 6) if bus else 0.0,
            "wrong_total": int(sum(wrong)) if wrong else 0}


__all__ = ["SCHEMA", "OPS", "DTYPES", "dtype_size", "message_layout", "make_row", "summarise_collective"]
