"""The tables ``gpucomm bench`` prints: a collective sweep in nccl-tests' layout (which
:mod:`gpucomm.probes.formats.nccltests` reads back: ``calibrate`` fits profiles from it) and the p2p matrices
in p2pBandwidthLatencyTest's."""
from __future__ import annotations


def _fmt_time(us: float) -> str:
    # nccl-tests prints "%7.2f" and lets large numbers grow (e.g. 15668.1 in captures); keep 7 wide.
    if us >= 1e5:
        return f"{us:7.0f}"
    if us >= 1e4:
        return f"{us:7.1f}"
    return f"{us:7.2f}"


def render_collective_table(result: dict) -> str:
    """The nccl-tests table (one block per collective) plus a header naming what was run."""
    lines = [
        f"# gpucomm bench collective: backend {result['backend']}, {result['world_size']} rank(s) on "
        f"{result['nodes']} node(s), device {result['device']}, launcher {result['launcher']}",
        f"# minBytes {result['min_bytes']} maxBytes {result['max_bytes']} warmup iters: {result['warmup']} "
        f"iters: {result['iters']} validation: 1 dtype: {result['dtype']}",
    ]
    for note in result.get("notes", []):
        lines.append(f"# note: {note}")
    for res in result["results"]:
        lines += ["#", f"# Collective test starting: {res['op']}_perf"]
        if res.get("note"):
            lines.append(f"# note: {res['note']}")
        if not res["rows"]:
            lines.append("# (no rows)")
            continue
        lines += [
            "#",
            "#       size         count      type   redop    root     time   algbw   busbw  #wrong",
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)        ",
        ]
        for r in res["rows"]:
            wrong = "N/A" if r["wrong"] is None else str(r["wrong"])
            lines.append(f"{r['size_bytes']:12d}  {r['count']:12d}  {r['type']:>8s}  {r['redop']:>6s}  "
                         f"{r['root']:6d}  {_fmt_time(r['time_us'])}  {r['algbw_GBps']:6.2f}  "
                         f"{r['busbw_GBps']:6.2f}  {wrong:>6s}")
        lines.append(f"# Out of bounds values : {res['wrong_total'] or 0} {'OK' if not res['wrong_total'] else 'FAILED'}")
        lines.append(f"# Avg bus bandwidth    : {res['avg_busbw_GBps']:.6g}")
        lines += ["#", f"# Collective test concluded: {res['op']}_perf"]
    return "\n".join(lines) + "\n"


def _matrix_lines(title: str, keys: list, mat: dict, fmt: str) -> list:
    w = max(8, max((len(k) for k in keys), default=0) + 1)
    out = [title, "D\\D".rjust(w) + "".join(k.rjust(w) for k in keys)]
    for a in keys:
        cells = []
        for b in keys:
            v = mat.get(a, {}).get(b)
            cells.append(("-" if a == b else "n/a") if v is None else format(v, fmt))
        out.append(a.rjust(w) + "".join(c.rjust(w) for c in cells))
    return out


def render_p2p_table(result: dict) -> str:
    """Bandwidth and latency matrices in p2pBandwidthLatencyTest's layout (row = source)."""
    keys = [e["key"] for e in result["endpoints"]]
    lines = [f"# gpucomm bench p2p: {result['label']}",
             f"# message {result['size_bytes']} B, warmup {result['warmup']}, iters {result['iters']}"]
    for note in result.get("notes", []):
        lines.append(f"# note: {note}")
    lines.append("")
    lines += _matrix_lines("Unidirectional bandwidth matrix (GB/s), row = source, column = destination",
                           keys, result["bw_GBps"], ".2f")
    lines.append("")
    lines += _matrix_lines("Latency matrix (us)", keys, result["lat_us"], ".2f")
    if result.get("peer_access"):
        lines.append("")
        lines += _matrix_lines("P2P access (1 = cudaDeviceCanAccessPeer)", keys,
                               {a: {b: int(v) for b, v in row.items()} for a, row in result["peer_access"].items()},
                               "d")
    if result.get("host_device"):
        lines += ["", "Host <-> device (GB/s, pinned host memory)",
                  f"{'device':>8s}{'H2D':>10s}{'D2H':>10s}"]
        for k in keys:
            hd = result["host_device"].get(k)
            if hd:
                lines.append(f"{k:>8s}{hd['h2d_GBps']:10.2f}{hd['d2h_GBps']:10.2f}")
    return "\n".join(lines) + "\n"


__all__ = ["render_collective_table", "render_p2p_table"]
