"""Honest accuracy of ``gpucomm predict`` on the published nccl-tests scaling tables
(fixtures/captures/nccltests/scaling/, SOURCES.md there): for every system and environment, each
node count predicted from a calibration fitted on the *other* node counts (leave one node count
out), next to the uncalibrated prediction (the topology alone) and the fit's own residual.

    python tools/crossval.py              # every table, per role
    python tools/crossval.py --markdown   # the README table (predicted tables only) and the totals
    python tools/crossval.py --extrapolate   # also: each node count from a fit on the smaller ones

The tables are grouped by system and environment from their file names
(``NNN_<system>_<N>n_<collective>_<environment>.txt``: the same nodes, NCCL version, plugin and
transport settings -- a profile describes one fabric and transport, never a mix), and each system is
predicted on the bundled example of its machine type (:data:`MACHINES`, the reasons below).  The
calibration and the checks are :func:`gpucomm.planners.collectives.calibrate.cross_validate` -- the
code of ``gpucomm calibrate`` and ``gpucomm predict --compare`` -- so the README table and the suite
(tests/test_predict_calibration.py) report the same figures.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCALING = ROOT / "fixtures" / "captures" / "nccltests" / "scaling"

# system (file-name token) -> the bundled example of its machine type, and why that one
MACHINES = {
    "polaris": ("example:polaris", "ALCF Polaris itself (4x A100, 2x Slingshot-11)"),
    "sirius": ("example:polaris", "ALCF's Polaris-like test system: the same node (4x A100, Slingshot-11)"),
    "sophia": ("example:dgx-a100", "ALCF Sophia is DGX A100 (8x A100, 8x 200G HDR)"),
    "alps-gh200": ("example:alps-gh200", "CSCS Alps GH200 nodes themselves"),
    "h100ib-c01": ("example:hgx-h100", "an HGX H100 8-GPU InfiniBand cluster (8x 400G)"),
    "snellius-h100": ("example:hgx-h100-4gpu", "Snellius gpu_h100 (HGX H100 4-GPU, 4x 200G)"),
    "b200-use3a": ("example:dgx-b200", "a DGX B200 cluster (8x 400G)"),
}
COLLECTIVE_TOKENS = ("all_reduce", "all_gather", "alltoall", "reduce_scatter", "sendrecv")
# Tables a documented default constant was fitted to: their uncalibrated error shows that fit, not a
# prediction (gpucomm.planners.collectives.timing names the capture of each constant).
DEFAULTS_FITTED_ON = {"083_h100ib-c01_2n_all_reduce_g1.txt": "NET_EFFICIENCY"}
# Done-when thresholds of a predicted table (the acceptance figures)
LARGEST_PCT = 15.0
MEDIAN_PCT = 25.0


def group_key(name: str) -> tuple[str, str]:
    """(system, environment) of a table file name; the GPUs-per-node token (g8, g1) is a layout,
    not an environment."""
    stem = name[:-4].split("_") if name.endswith(".txt") else name.split("_")
    system = stem[1]
    rest = "_".join(stem[3:])
    for c in COLLECTIVE_TOKENS:
        rest = rest.replace(c, "")
    env = "_".join(t for t in rest.split("_") if t and not re.match(r"^g\d+$", t))
    return system, env or "default"


def groups(folder: Path = SCALING) -> dict:
    out: dict = {}
    for p in sorted(folder.glob("*.txt")):
        out.setdefault(group_key(p.name), []).append(p)
    return out


def run_all(folder: Path = SCALING, systems=None, extrapolate: bool = False) -> list[dict]:
    """Every group cross-validated: [{system, environment, topology, node_counts, predicted, fitted,
    uncalibrated, profiles, seconds}]."""
    from gpucomm.planners.collectives import calibrate
    from gpucomm.probes.load import load_topology

    topos: dict = {}
    out = []
    for (system, env), files in groups(folder).items():
        if systems and system not in systems:
            continue
        topo_src = MACHINES[system][0]
        topo = topos.setdefault(topo_src, load_topology(topo_src))
        t0 = time.perf_counter()
        runs, _ = calibrate.runs_from_texts(topo, [(str(f), f.read_text(encoding="utf-8")) for f in files])
        res = calibrate.cross_validate(calibrate.Layouts(topo), runs, extrapolate=extrapolate)
        res.update(system=system, environment=env, topology=topo_src, seconds=round(time.perf_counter() - t0, 2))
        for role in ("predicted", "fitted", "uncalibrated", "extrapolated"):
            for rec in res[role]:
                rec["table"] = Path(rec["source"]).name
        out.append(res)
    return out


def passes(rec: dict) -> bool:
    """A table within the done-when figures: |error| at the largest size <= 15%, median |error| over
    sizes >= 1 MiB <= 25% (a table without sizes >= 1 MiB is judged on the largest size alone)."""
    L, m = rec["largest_error_pct"], rec["median_abs_error_pct_ge_1MiB"]
    return L is not None and abs(L) <= LARGEST_PCT and (m is None or m <= MEDIAN_PCT)


def _size(n) -> str:
    from gpucomm.probes.units import format_size

    return "-" if n is None else format_size(int(n))


def _pct(v) -> str:
    return "n/a" if v is None else f"{v:+.1f}%"


def markdown(results: list[dict]) -> str:
    """The README table: every predicted (held-out) table, then the totals of every role."""
    lines = ["| system / environment | table | nodes x GPUs | fitted on nodes | error at largest size | "
             "median \\|error\\| >= 1 MiB | 80% of peak (measured / predicted) | uncalibrated error at largest |",
             "|---|---|---|---|---|---|---|---|"]
    for res in results:
        unc = {r["table"]: r for r in res["uncalibrated"]}
        for r in res["predicted"]:
            u = unc[r["table"]]
            med = r["median_abs_error_pct_ge_1MiB"]
            ufit = f" (fitted: {DEFAULTS_FITTED_ON[r['table']]})" if r["table"] in DEFAULTS_FITTED_ON else ""
            lines.append(f"| {res['system']} {res['environment']} | {r['table'][:-4]} | {r['nodes']} x {r['gpus_per_node']} | "
                         f"{','.join(map(str, r['fitted_on']))} | {_pct(r['largest_error_pct'])} | "
                         f"{'n/a' if med is None else f'{med:.1f}%'} | {_size(r['peak80_measured_bytes'])} / "
                         f"{_size(r['peak80_predicted_bytes'])} | {_pct(u['largest_error_pct'])}{ufit} |")
    lines += ["", totals(results)]
    return "\n".join(lines) + "\n"


def totals(results: list[dict]) -> str:
    pred = [r for res in results for r in res["predicted"]]
    fit = [r for res in results for r in res["fitted"]]
    unc = [r for res in results for r in res["uncalibrated"] if r["table"] not in DEFAULTS_FITTED_ON]
    unc15 = [r for r in unc if r["largest_error_pct"] is not None and abs(r["largest_error_pct"]) <= LARGEST_PCT]
    ext = [r for res in results for r in res.get("extrapolated") or []]
    ext_line = (f" Extrapolated (fitted on the smaller node counts only, e.g. 2 -> 8, 1-16 -> 32): "
                f"{sum(map(passes, ext))} of {len(ext)}." if ext else "")
    return (f"Predicted (leave one node count out): {sum(map(passes, pred))} of {len(pred)} tables within "
            f"{LARGEST_PCT:g}% at the largest size and {MEDIAN_PCT:g}% median |error| >= 1 MiB. "
            f"Uncalibrated (topology only; not counting {', '.join(DEFAULTS_FITTED_ON)}, which NET_EFFICIENCY was "
            f"fitted to): {len(unc15)} of {len(unc)} tables within {LARGEST_PCT:g}% at the largest "
            f"size. Fitted (the fit's own residual, not accuracy): {sum(map(passes, fit))} of {len(fit)}." + ext_line)


def text(results: list[dict]) -> str:
    lines = []
    for res in results:
        lines.append(f"## {res['system']} {res['environment']} on {res['topology']} (node counts "
                     f"{res['node_counts']}, {res['seconds']} s)")
        for role in ("predicted", "extrapolated", "uncalibrated", "fitted"):
            for r in res.get(role) or []:
                on = f" fitted on {r['fitted_on']}" if role in ("predicted", "extrapolated") else ""
                if role == "uncalibrated" and r["table"] in DEFAULTS_FITTED_ON:
                    on = f" (fitted: {DEFAULTS_FITTED_ON[r['table']]})"
                med = r["median_abs_error_pct_ge_1MiB"]
                lines.append(f"  {role:12} {'ok ' if passes(r) else 'BAD'} {r['table'][:-4]:48} {r['nodes']:>3}x{r['gpus_per_node']} "
                             f"largest {_pct(r['largest_error_pct']):>8} median {'n/a' if med is None else f'{med:.1f}%':>7} "
                             f"80%: {_size(r['peak80_measured_bytes'])}/{_size(r['peak80_predicted_bytes'])} "
                             f"{r['algorithm']}{on}")
    lines.append("")
    lines.append(totals(results))
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--markdown", action="store_true", help="print the README table")
    ap.add_argument("--system", action="append", help="only these systems (file-name token, e.g. polaris)")
    ap.add_argument("--extrapolate", action="store_true",
                    help="also predict every node count from a fit on the smaller ones only")
    args = ap.parse_args(argv)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    results = run_all(systems=args.system, extrapolate=args.extrapolate)
    sys.stdout.write(markdown(results) if args.markdown else text(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
