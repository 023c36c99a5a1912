"""Honest accuracy of ``gpucomm predict`` on the published nccl-tests scaling tables
(fixtures/captures/nccltests/scaling/, SOURCES.md there): for every system and environment, each
node count predicted from a calibration fitted on the *other* node counts (leave one node count
out), next to the uncalibrated prediction (the topology alone) and the fit's own residual.

    python tools/crossval.py              # every table, per role
    python tools/crossval.py --markdown   # the README table (predicted tables only) and the totals
    python tools/crossval.py --extrapolate   # also: each node count from a fit on the smaller ones
    python tools/crossval.py --transports    # uncalibrated, with each table's transport: the fitted
                                             # transport constants and their cross-validated errors

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
# The inter-node transport of each table (no table carries NCCL INFO lines: SOURCES.md's legend says which
# transport each environment ran; --transport states it, as a user would).  Polaris' own NCCL log
# (evidence/polaris_nccl-info_cxi.txt: "via NET/AWS Libfabric/3/GDRDMA") agrees with the plugin setups
# (tests/test_swpath.py reads it).
TRANSPORTS = {
    ("polaris", "env1"): ("socket", "legend env1: no NCCL/FI variables, no plugin (README: 'uses TCP')"),
    ("polaris", "env4"): ("plugin:aws-ofi-nccl", "legend env4: aws-ofi-nccl (NCCL_NET='AWS Libfabric'), NCCL_NET_GDR_LEVEL=PHB"),
    ("polaris", "env5"): ("plugin:aws-ofi-nccl", "legend env5: env4 + alltoall FI_CXI settings"),
    ("sirius", "env5"): ("plugin:aws-ofi-nccl", "legend env5 (as Polaris)"),
    ("alps-gh200", "cxituned"): ("plugin:aws-ofi-nccl", "legend alps-cxituned: NCCL_NET='AWS Libfabric', GDR level PHB"),
    ("sophia", ""): ("ib", "SOURCES: plugin none (NCCL IB verbs), HDR InfiniBand"),
    ("h100ib-c01", ""): ("ib", "SOURCES: plugin none, InfiniBand"),
    ("snellius-h100", ""): ("ib", "evidence: NET/IB ... GDRDMA"),
    ("b200-use3a", ""): ("ib", "SOURCES: plugin none, InfiniBand CX-7"),
}
RING_TOKENS = ("all_reduce", "all_gather", "reduce_scatter")
# constant -> (how it is cross-validated: "system" = leave one system out, "table" = leave one table out;
# the tables it is fitted on: (system, environment token, collective tokens, least node count))
FIT_SETS = {
    "PLUGIN_NET_EFFICIENCY": ("table", [("alps-gh200", "cxituned", RING_TOKENS, 2)]),
    "GDR_HOST_BRIDGE_EFFICIENCY": ("system", [("polaris", "env4", RING_TOKENS, 2), ("polaris", "env5", RING_TOKENS, 2),
                                              ("sirius", "env5", RING_TOKENS, 2)]),
    "PLUGIN_ALLTOALL": ("system", [("polaris", "env4", ("alltoall",), 2), ("polaris", "env5", ("alltoall",), 2),
                                   ("sirius", "env5", ("alltoall",), 2)]),
    "SOCKET_GBPS": ("table", [("polaris", "env1", RING_TOKENS, 2)]),
    "SOCKET_ALLTOALL": ("table", [("polaris", "env1", ("alltoall",), 2)]),
}
FIT_ROUNDS = 4


def transport_for(system: str, env: str) -> tuple[str, str]:
    """(--transport value, the reason) of a table group."""
    for (sys_, tok), v in TRANSPORTS.items():
        if sys_ == system and (not tok or tok in env):
            return v
    raise KeyError(f"no transport stated for {system} {env}")

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


class _Table:
    def __init__(self, name, system, env, run, layouts):
        self.name, self.system, self.env, self.run, self.layouts = name, system, env, run, layouts
        self.coll = run.collective

    def in_set(self, spec) -> bool:
        return any(self.system == s and tok in self.env and any(c in self.name for c in colls) and self.run.nodes >= n
                   for s, tok, colls, n in spec)


def transport_tables(folder: Path = SCALING, systems=None) -> list:
    """Every table with the layouts of its system under its stated transport."""
    from gpucomm.planners.collectives import calibrate
    from gpucomm.planners.collectives.transport import parse
    from gpucomm.probes.load import load_topology

    topos, base, out = {}, {}, []
    for (system, env), files in groups(folder).items():
        if systems and system not in systems:
            continue
        src = MACHINES[system][0]
        topo = topos.setdefault(src, load_topology(src))
        lay = base.setdefault(src, calibrate.Layouts(topo))
        t = parse(transport_for(system, env)[0])
        runs, _ = calibrate.runs_from_texts(topo, [(str(f), f.read_text(encoding="utf-8")) for f in files])
        for r in runs:
            out.append(_Table(Path(r.source).name, system, env, r, lay.with_transport(t)))
    return out


def _check(tb: "_Table", consts: dict) -> dict:
    from gpucomm.planners.collectives import calibrate

    lay = tb.layouts.with_transport(tb.layouts.transport, consts)
    return calibrate.check_run(lay, tb.run, None)


def fit_transport_constants(tables: list, exclude=frozenset(), only=None) -> dict:
    """The transport constants fitted on their tables (FIT_SETS, in order), leaving out ``exclude``:
    each is scaled by the geometric mean over its tables of predicted / measured busbw at the largest
    size (busbw is proportional to each of them where it binds), FIT_ROUNDS times."""
    import math
    from gpucomm.planners.collectives.transport import constants

    consts = dict(constants())
    for name, (_mode, spec) in FIT_SETS.items():
        if only is not None and name not in only:
            continue
        train = [t for t in tables if t.in_set(spec) and t.name not in exclude]
        if not train:
            continue
        for _ in range(FIT_ROUNDS):
            logs = []
            for t in train:
                e = _check(t, consts)["largest_error_pct"]
                if e is not None and e > -100:
                    logs.append(math.log(1.0 + e / 100.0))
            if not logs:
                break
            consts[name] = consts[name] / math.exp(sum(logs) / len(logs))
    return consts


def transport_report(tables: list) -> dict:
    """{constants: fitted on all their tables, rows: per table the uncalibrated error with its transport
    -- a table some constant was fitted on is predicted with the constants refitted without it (its
    system, or itself: FIT_SETS) --, fitted_on: constant -> tables}."""
    shipped = fit_transport_constants(tables)
    rows = []
    for tb in tables:
        excl = set()
        for _name, (mode, spec) in FIT_SETS.items():
            if tb.in_set(spec):
                excl |= {t.name for t in tables if t.in_set(spec) and (t.system == tb.system if mode == "system"
                                                                      else t.name == tb.name)}
        consts = fit_transport_constants(tables, frozenset(excl)) if excl else shipped
        rec = _check(tb, consts)
        rec.update(table=tb.name, system=tb.system, env=tb.env, transport=tb.layouts.transport.name,
                   cross_validated=bool(excl), fitted_default=tb.name in DEFAULTS_FITTED_ON)
        rows.append(rec)
    fitted_on = {n: sorted(t.name[:-4] for t in tables if t.in_set(spec)) for n, (_m, spec) in FIT_SETS.items()}
    return {"constants": shipped, "rows": rows, "fitted_on": fitted_on}


def transport_text(rep: dict) -> str:
    lines = ["# transport constants fitted on all their tables (planners/collectives/transport.py ships these):"]
    for k, v in rep["constants"].items():
        lines.append(f"#   {k} = {v:.4g}  fitted on {', '.join(rep['fitted_on'].get(k, [])) or '-'}"
                     f"  ({FIT_SETS[k][0] if k in FIT_SETS else ''} left out when checked)")
    lines.append("# uncalibrated, transport as stated; cv = the constants refitted without the table (or its system)")
    ok = 0
    counted = 0
    for r in rep["rows"]:
        L = r["largest_error_pct"]
        within = L is not None and abs(L) <= LARGEST_PCT
        tag = "fitted: NET_EFFICIENCY" if r["fitted_default"] else ("cv" if r["cross_validated"] else "")
        if not r["fitted_default"]:
            counted += 1
            ok += within
        lines.append(f"  {'ok ' if within else 'BAD'} {r['table'][:-4]:48} {r['transport']:22} {r['nodes']:>3}x"
                     f"{r['gpus_per_node']} largest {_pct(L):>8} {r['algorithm']} {tag}")
    lines.append(f"Uncalibrated with the transport (cross-validated where a constant was fitted on the table; not "
                 f"counting {', '.join(DEFAULTS_FITTED_ON)}): {ok} of {counted} tables within {LARGEST_PCT:g}% at "
                 f"the largest size.")
    return "\n".join(lines) + "\n"


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
    ap.add_argument("--transports", action="store_true",
                    help="uncalibrated predictions with each table's transport; fit and cross-validate the "
                         "transport constants")
    args = ap.parse_args(argv)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    if args.transports:
        sys.stdout.write(transport_text(transport_report(transport_tables(systems=args.system))))
        return 0
    results = run_all(systems=args.system, extrapolate=args.extrapolate)
    sys.stdout.write(markdown(results) if args.markdown else text(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
