"""Predictions you can check: NCCL's tuning model (planners/collectives/cost.py) against a measured nccl-tests run.

Pure functions (no I/O) used by ``gpucomm predict TOPO --compare FILE`` and by the calibration test
(tests/test_predict_calibration.py):

* :func:`select_runs` -- the runs of an nccl-tests/rccl-tests log to compare (one per collective run,
  or those of the requested collective);
* :func:`resolve_layout` -- nodes x GPUs per node for a run, from the flags, the file's rank and host
  counts and the topology's GPU count;
* :func:`compare_series` -- measured (out-of-place) rows vs predicted rows, size by size;
* :func:`summarize_rows` -- error at the largest size, median absolute error over sizes >= 1 MiB, and
  the size at which each series first reaches 80% of its own peak bus bandwidth;
* :func:`compare_run` -- all of the above for one parsed run and one topology document.

Bus bandwidth is nccl-tests' ``busbw`` (algbw x the collective's factor, nccl-tests
doc/PERFORMANCE.md); the measured figures are the out-of-place columns, as in the calibration.
"""
from __future__ import annotations

import statistics
from typing import Optional, Sequence

from gpucomm.probes import units
from gpucomm.probes.errors import InputError

SCHEMA = "gpucomm.predict-compare/v1"
MiB = 1 << 20
# nccl-tests prints busbw with 2 decimals: below 0.05 GB/s the printed figure is off by up to 10%,
# so an error percentage there measures the printing, not the model.
MIN_MEASURED_BUSBW = 0.05
# Sizes from which a run is bandwidth-bound enough for the median error to describe the model's
# bandwidth side (smaller sizes are latency-bound; see the calibration's per-row tables).
MEDIAN_FROM_BYTES = MiB
PEAK_FRACTION = 0.8


def error_pct(predicted: Optional[float], measured: Optional[float]) -> Optional[float]:
    """100 (predicted - measured) / measured, or None when the measured busbw is missing or too small
    for its 2-decimal printing (< MIN_MEASURED_BUSBW)."""
    if predicted is None or measured is None or measured < MIN_MEASURED_BUSBW:
        return None
    return 100.0 * (predicted - measured) / measured


def compare_series(measured: Sequence[dict], predicted: Sequence[dict]) -> list[dict]:
    """Pair measured rows (``gpucomm.probes.formats.nccltests.measured_series``) with predicted rows
    (``gpucomm.planners.collectives.cost.predict`` over the same sizes, same order).

    Each row: {size_bytes, count, type, measured_time_us, predicted_time_us, measured_busbw_GBps,
    predicted_busbw_GBps, error_pct, algorithm, protocol}.  Raises ValueError when the two lists do
    not describe the same sizes (a programming error, not bad input)."""
    if len(measured) != len(predicted):
        raise ValueError(f"{len(measured)} measured rows vs {len(predicted)} predicted rows")
    rows = []
    for m, p in zip(measured, predicted):
        if int(m["size_bytes"]) != int(p["size_bytes"]):
            raise ValueError(f"size {m['size_bytes']} measured vs {p['size_bytes']} predicted")
        rows.append({
            "size_bytes": int(m["size_bytes"]),
            "count": m.get("count") if m.get("count") is not None else p.get("count"),
            "type": m.get("type") or p.get("type"),
            "measured_time_us": m.get("time_us"),
            "predicted_time_us": p["time_us"],
            "measured_busbw_GBps": m.get("busbw_GBps"),
            "predicted_busbw_GBps": p["busbw_GBps"],
            "error_pct": error_pct(p["busbw_GBps"], m.get("busbw_GBps")),
            "algorithm": p["algorithm"],
            "protocol": p.get("protocol"),
        })
    return rows


def _first_at_fraction(rows: Sequence[dict], key: str, fraction: float) -> tuple[Optional[float], Optional[int]]:
    """(peak, smallest size whose value reaches fraction x peak) of one busbw column."""
    vals = [(r["size_bytes"], r[key]) for r in rows if r.get(key) is not None]
    if not vals:
        return None, None
    peak = max(v for _, v in vals)
    if peak <= 0:
        return peak, None
    return peak, min(s for s, v in vals if v >= fraction * peak)


def summarize_rows(rows: Sequence[dict], fraction: float = PEAK_FRACTION) -> dict:
    """The summary of compared rows (see the module docstring).  ``largest`` is the row of the largest
    size (the last one when a size repeats); None for every figure that has no data."""
    if not rows:
        return {"largest": None, "median_abs_error_pct_ge_1MiB": None, "sizes_ge_1MiB": 0,
                "peak": {"fraction": fraction, "measured_peak_busbw_GBps": None, "predicted_peak_busbw_GBps": None,
                         "measured_size_bytes": None, "predicted_size_bytes": None}}
    top = max(range(len(rows)), key=lambda i: (rows[i]["size_bytes"], i))
    L = rows[top]
    big = [abs(r["error_pct"]) for r in rows if r["size_bytes"] >= MEDIAN_FROM_BYTES and r["error_pct"] is not None]
    mpeak, msize = _first_at_fraction(rows, "measured_busbw_GBps", fraction)
    ppeak, psize = _first_at_fraction(rows, "predicted_busbw_GBps", fraction)
    return {
        "largest": {"size_bytes": L["size_bytes"], "measured_busbw_GBps": L["measured_busbw_GBps"],
                    "predicted_busbw_GBps": L["predicted_busbw_GBps"], "error_pct": L["error_pct"],
                    "algorithm": L["algorithm"], "protocol": L["protocol"]},
        "median_abs_error_pct_ge_1MiB": statistics.median(big) if big else None,
        "sizes_ge_1MiB": len(big),
        "peak": {"fraction": fraction, "measured_peak_busbw_GBps": mpeak, "predicted_peak_busbw_GBps": ppeak,
                 "measured_size_bytes": msize, "predicted_size_bytes": psize},
    }


def resolve_layout(n_ranks: Optional[int], file_nodes: Optional[int], topo_gpus: int,
                   nodes: Optional[int] = None, gpus_per_node: Optional[int] = None,
                   where: str = "<nccl-tests output>") -> tuple[int, int, list[str]]:
    """(nodes, GPUs per node, notes) that reproduce a run of ``n_ranks`` ranks.

    Order: ``gpus_per_node`` when given (then nodes = ranks / it); else the requested ``nodes`` or, without
    it, the file's host count, when the ranks split evenly over them onto at most ``topo_gpus`` GPUs each
    (a run on 4 of 8 GPUs uses the first 4); else nodes = ranks / topology GPUs when that divides (a
    ``--nodes`` that does not fit is overridden).  Every departure from the flags or the file's hosts
    is named in the notes.  Raises InputError (one line) when nothing fits."""
    notes: list[str] = []
    if n_ranks is None:
        n = nodes or file_nodes or 1
        gpn = gpus_per_node or topo_gpus
        notes.append(f"the file does not show its rank count; {n} node(s) x {gpn} GPUs assumed")
        return n, gpn, notes
    if topo_gpus < 1:
        raise InputError("the topology has no GPUs to compare with", where)
    if gpus_per_node:
        if n_ranks % gpus_per_node:
            raise InputError(f"the run has {n_ranks} ranks, not a multiple of --gpus-per-node {gpus_per_node}", where)
        n = n_ranks // gpus_per_node
        if nodes and nodes != n:
            notes.append(f"--nodes {nodes} x {gpus_per_node} GPUs is not the run's {n_ranks} ranks; using --nodes {n}")
        return n, gpus_per_node, notes
    layout = None
    for hint in ((nodes,) if nodes else (file_nodes,)):
        if hint and n_ranks % hint == 0 and n_ranks // hint <= topo_gpus:
            layout = (hint, n_ranks // hint)
            break
    if layout is None and n_ranks % topo_gpus == 0:
        layout = (n_ranks // topo_gpus, topo_gpus)
    if layout is not None:
        n, gpn = layout
        if nodes and nodes != n:
            notes.append(f"--nodes {nodes} does not fit the run's {n_ranks} ranks on nodes of {topo_gpus} GPUs; "
                         f"using --nodes {n}")
        if file_nodes and file_nodes != n:
            notes.append(f"the file's ranks ran on {file_nodes} host(s); compared as {n} node(s) x {gpn} GPUs")
        if gpn < topo_gpus:
            notes.append(f"{n_ranks} ranks on {n} node(s): the first {gpn} of the topology's {topo_gpus} GPUs "
                         "per node are used (pass --gpus to choose others)")
        return n, gpn, notes
    asked = f" on {nodes} node(s)" if nodes else (f" on {file_nodes} host(s)" if file_nodes else "")
    raise InputError(f"the run has {n_ranks} ranks{asked}, which does not fit a topology of {topo_gpus} GPUs "
                     f"per node ({n_ranks} is not a multiple of {topo_gpus})", where,
                     expected="--nodes N and --gpus-per-node G with N x G = the run's ranks")


def _label(run: dict) -> str:
    return f"{run['test_name'] or run['collective'] or 'unnamed run'} (line {run['rows'][0]['line']})"


def select_runs(text: str, path: str, collective: Optional[str] = None) -> tuple[list[dict], list[str]]:
    """(runs to compare, warnings) of an nccl-tests/rccl-tests log.

    Without ``collective``: every run whose collective is known and modelled by gpucomm.planners.collectives.cost; runs
    that are not are named in the warnings.  With it: the runs of that collective -- or, when the file
    does not say which collective its runs are (a pasted table without header), those runs read as
    that collective.  Raises InputError (one line) when the file does not parse or nothing is left."""
    from gpucomm.probes.formats.nccltests import split_nccltests

    runs = split_nccltests(text, path)
    warnings: list[str] = []
    if collective:
        want = units.normalize_collective(collective)
        keep = [r for r in runs if r["collective"] == want]
        if keep:
            return keep, warnings
        unknown = [i for i, r in enumerate(runs) if r["collective"] is None]
        if unknown:
            # the same blocks parsed with the collective named (split is by lines, so indices match)
            named = split_nccltests(text, path, want)
            return [named[i] for i in unknown], warnings
        have = ", ".join(_label(r) for r in runs)
        raise InputError(f"no {want} run in the file (it holds {have})", path)
    out = []
    for r in runs:
        warnings.extend(w for w in r.get("warnings") or [] if w not in warnings)  # skipped rows, unknown test names
        if r["collective"] is None:
            cands = " or ".join(r["collective_candidates"]) or "no known collective"
            warnings.append(f"{path}: skipped {_label(r)}: cannot tell its collective (busbw/algbw fits {cands}); "
                            "pass --collective")
        elif r["collective"] not in units.COLLECTIVES:
            warnings.append(f"{path}: skipped {_label(r)}: {r['collective']} is not modelled "
                            f"(modelled: {', '.join(units.COLLECTIVES)})")
        else:
            out.append(r)
    if not out:
        raise InputError("no run to compare: " + "; ".join(w.split(": ", 1)[1] for w in warnings), path)
    return out, warnings


def compare_run(doc: dict, run: dict, nodes: int, gpus_per_node: Optional[int] = None,
                fabric_gbps: Optional[float] = None, algo: str = "auto",
                gpus: Optional[Sequence[int]] = None, graph=None, profile=None) -> dict:
    """Predict the sizes of one parsed run (``gpucomm.nccltests/v1``) on ``nodes`` copies of ``doc``'s
    node and compare.  ``graph``: an already built ``cost.summarize`` result for these arguments;
    ``profile``: a :class:`gpucomm.planners.collectives.timing.Profile` (a calibration).

    Returns {collective, n_ranks, nodes, gpus_per_node, algo, line, test_name, graph (the CommGraph),
    rows, summary}."""
    from gpucomm.planners.collectives import cost
    from gpucomm.probes.formats.nccltests import TYPE_SIZES, measured_series

    g = graph if graph is not None else cost.summarize(doc, nodes=nodes, gpus_per_node=gpus_per_node,
                                                       fabric_gbps=fabric_gbps, gpus=gpus, profile=profile)
    if g.n_ranks < 2:
        # one rank moves nothing between GPUs (nccl-tests prints busbw 0); NCCL's model has no steps
        raise InputError(f"the run has {g.n_ranks} rank: nothing to predict", run.get("source"),
                         expected="a run with 2 or more ranks")
    meas = measured_series(run)
    extra = {r["size_bytes"]: r for r in run["rows"]}
    for m in meas:   # count and type for the table: measured_series keeps only the timings
        src = extra.get(m["size_bytes"]) or {}
        m["count"], m["type"] = src.get("count"), src.get("type")
    dtype = next((m["type"] for m in meas if m.get("type")), None)
    dtype_bytes = TYPE_SIZES.get(str(dtype).lower(), 4)
    pred = cost.predict(g, run["collective"], [m["size_bytes"] for m in meas], algo=algo, dtype_bytes=dtype_bytes,
                        profile=profile)
    rows = compare_series(meas, pred)
    return {"collective": units.normalize_collective(run["collective"]), "test_name": run.get("test_name"),
            "line": run["rows"][0]["line"] if run["rows"] else None, "n_ranks": g.n_ranks, "nodes": g.n_nodes,
            "gpus_per_node": g.gpus_per_node, "algo": algo, "graph": g, "rows": rows, "summary": summarize_rows(rows)}


__all__ = ["SCHEMA", "MiB", "MIN_MEASURED_BUSBW", "PEAK_FRACTION", "error_pct", "compare_series", "summarize_rows",
           "resolve_layout", "select_runs", "compare_run"]
