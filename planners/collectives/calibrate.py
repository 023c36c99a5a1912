"""``gpucomm calibrate``: fit the physical parameters NCCL's tuning model cannot know from the user's
own nccl-tests (or ``gpucomm bench``) runs, into a ``gpucomm.calibration/v1`` profile that
``predict``, ``plan --model`` and ``rings`` take with ``--calibration`` (docs/CALIBRATION.md).

What is fitted (the parameters of :class:`gpucomm.planners.collectives.timing.Profile`; a parameter
is fitted only when some run depends on it, the others keep their documented default):

* ``net_gbps_per_nic`` -- what one NIC delivers to a streaming collective (all_reduce, all_gather,
  reduce_scatter, broadcast, reduce across nodes): the IB/RoCE verbs, net-plugin or socket
  transport's efficiency folded into one rate;
* ``alltoall_efficiency``, ``p2p_efficiency`` -- all_to_all and send_recv across nodes, relative to
  that rate (many peers at once; one flow through one NIC);
* ``congestion`` -- how the network rate falls as the job spans more nodes (runs at >= 2 node
  counts, one of them above 2);
* ``intra_efficiency``, ``nvls_efficiency``, ``intra_p2p_efficiency`` -- single-node runs: rings,
  NVLS and point-to-point inside a node relative to NCCL's own figures;
* ``latency_scale``, ``net_step_latency_us``, ``ramp`` -- NCCL's latency model scaled, a latency per
  network step (per hop across nodes, per remote peer for all_to_all), and the pipeline fill of mid
  sizes (timing's ``ramp``);
* ``step_floor_us`` -- the least time a step of a multi-node ring (Simple protocol) takes: a floor its
  transfer hides (timing's ``max(S / B, step_floor_us x steps)``), searched on a grid around the
  linear stage.

How: NCCL's tuning model (our reproduction of it) decides the algorithm and protocol of every
measured size -- the fit never changes that choice.  The bandwidth parameters are fitted first, by
golden-section search one parameter at a time (two sweeps), on the sizes where the transfer time
dominates (the largest sixteenth of each run, and >= 1 MiB); then the three latency parameters,
which enter the time linearly, by non-negative least squares of the relative time error over every
size; both steps once more.  Each run weighs the same, whatever its number of sizes.

Pure functions: the CLI reads the files (``gpucomm_cli/commands/calibrate.py``).
"""
from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass, field, replace
from typing import Iterable, Optional, Sequence, Union

from gpucomm.planners.collectives import compare, cost, timing
from gpucomm.planners.nccl.tuning import allowed_algos, ll128_c2c_by_version, nccl_choice, tuning_table
from gpucomm.probes import units
from gpucomm.probes.errors import InputError, NothingToDo
from gpucomm.probes.formats.nccltests import ignored_summary, library_code, measured_series, version_text
from gpucomm.probes.topology import Topology

SCHEMA = "gpucomm.calibration/v1"
RING_FAMILY = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")

# Search ranges of the fitted parameters (golden section in log space for the positive ones).
BOUNDS = {
    "net_gbps_per_nic": (0.1, 3200.0), "alltoall_efficiency": (0.02, 2.0), "p2p_efficiency": (0.02, 2.0),
    "congestion": (0.0, 2.0), "intra_efficiency": (0.05, 2.0), "nvls_efficiency": (0.05, 2.0),
    "intra_p2p_efficiency": (0.05, 2.0),
}
# What a profile may hold (profile_from_document): the fitted ranges above, the protocol efficiencies
# within the fit's clamp, a latency scale from the fit's floor, the fill window of at least a byte;
# a value outside (a denormal rate, an efficiency of 0 that divides a time) means nothing physically.
PROFILE_RANGES = {
    **BOUNDS, "net_ll_efficiency": (0.02, 1.5), "net_ll128_efficiency": (0.02, 1.5), "latency_scale": (1e-3, 1e6),
    "net_step_latency_us": (0.0, 1e6), "step_latency_us": (0.0, 1e6), "ramp": (0.0, 1e6), "net_fill": (0.0, 1e6),
    "net_fill_bytes": (1.0, float(1 << 50)), "step_floor_us": (0.0, 1e6),
}
LATENCY_PARAMETERS = ("latency_scale", "net_step_latency_us", "step_latency_us", "ramp", "net_ll_efficiency",
                      "net_ll128_efficiency", "net_fill", "step_floor_us")
FILL_WINDOWS = tuple(float(1 << k) for k in range(16, 28, 2))   # 64 KiB .. 64 MiB
# The ring step floor (timing's ``step_floor_us``) is not linear in the time: it is searched on this
# grid (0 and 1 .. 256 us, x sqrt 2), then refined between the grid neighbours of the best value.
FLOOR_GRID = (0.0,) + tuple(2.0 ** (k / 2) for k in range(17))
FLOOR_REFINE = 8
# the linear stage fits 1 / efficiency for the protocol parameters (they divide a transfer time)
_INVERSE = ("net_ll_efficiency", "net_ll128_efficiency")
ROUNDS = 5            # bandwidth stage then latency stage, this many times
PRIOR_WEIGHT = 0.02   # per run, of each latency parameter's prior (one run's sizes weigh 1)
# A NIC cannot deliver more than its line rate: the fitted per-NIC rate stays <= this x the rate
# the topology gives (a NIC whose rate the topology does not know keeps the wide bound).
LINE_RATE_SLACK = 1.02


@dataclass
class Run:
    """One measured run to fit or check: the parsed nccl-tests run and the layout it ran on."""

    source: str
    run: dict
    nodes: int
    gpus_per_node: int
    notes: list = field(default_factory=list)

    @property
    def collective(self) -> str:
        return units.normalize_collective(self.run["collective"])

    @property
    def label(self) -> str:
        return f"{self.source}:{self.run['rows'][0]['line']}"


def runs_from_texts(topo: Union[Topology, dict], texts: Sequence[tuple[str, str]], collective: Optional[str] = None,
                    nodes: Optional[int] = None, gpus_per_node: Optional[int] = None) -> tuple[list[Run], list[str]]:
    """Every usable run of the given (path, text) nccl-tests outputs, laid out on ``topo``'s nodes,
    and the notes on what was skipped or ignored.  Raises InputError (one line) for a file that has
    no run at all, or for a run that does not fit the topology."""
    topo = Topology.of(topo)
    out: list[Run] = []
    notes: list[str] = []
    for path, text in texts:
        runs, warnings = compare.select_runs(text, path, collective)
        notes += warnings
        for r in runs:
            where = f"{path}:{r['rows'][0]['line']}"
            n, gpn, lay = compare.resolve_layout(r["n_ranks"], r["nodes"], len(topo.gpus), nodes=nodes,
                                                 gpus_per_node=gpus_per_node, where=where)
            if n * gpn < 2:
                notes.append(f"{where}: skipped: one rank moves no data")
                continue
            run_notes = lay + list(r.get("warnings") or [])
            ig = ignored_summary(r)
            if ig:
                run_notes.append(f"{where}: {ig}")
            out.append(Run(path, r, n, gpn, run_notes))
    if not out:
        raise InputError("no run to calibrate on" + (": " + "; ".join(notes) if notes else ""),
                         texts[0][0] if texts else None)
    return out, notes


# --------------------------------------------------------------------------------------------
# Precomputed cases: NCCL's choice per size (fixed), the graphs and the measured times
@dataclass
class _Row:
    size: int
    t_meas: float
    algo: str
    proto: Optional[str]


@dataclass
class _Case:
    run: Run
    coll: str
    graph: object           # CommGraph without achievable fields
    hw: timing.Hardware
    rows: list
    top: list               # the rows of the bandwidth stage
    tables: dict = field(default_factory=dict)   # achievable tuning tables by (ring, tree, nvls) bus bw


class Layouts:
    """NCCL's graphs per (nodes, GPUs per node) of one topology, searched once.  ``transport``
    (:class:`gpucomm.planners.collectives.transport.Transport`): the inter-node transport whose
    documented efficiency the uncalibrated layer applies (``base``); ``consts``: other values of its
    fitted constants (cross-validation)."""

    def __init__(self, topo: Union[Topology, dict], fabric_gbps: Optional[float] = None, transport=None,
                 consts: Optional[dict] = None, nvlink_domain: Optional[int] = None):
        from gpucomm.planners.collectives import transport as tr

        self.topo = Topology.of(topo)
        self.nvlink_domain = nvlink_domain   # trays per NVLink domain (cost.graphs; None: NCCL's default)
        self.fabric_gbps = fabric_gbps
        self.transport = transport
        self.consts = consts
        self.base = tr.profile(transport, consts=consts) if transport is not None else timing.DEFAULT
        self._cache: dict = {}
        self._raw: dict = {}

    def get(self, nodes: int, gpn: int):
        key = (nodes, gpn)
        if key not in self._cache:
            if key not in self._raw:
                self._raw[key] = cost.graphs(self.topo, nodes=nodes, gpus_per_node=gpn, fabric_gbps=self.fabric_gbps,
                                             nvlink_domain=self.nvlink_domain)
            g, hw = self._raw[key]
            if self.transport is not None and g.n_nodes > 1 and self.fabric_gbps is None:
                from gpucomm.planners.collectives.transport import hardware

                hw = hardware(hw, self.transport, g.type_inter, self.consts)
            self._cache[key] = (g, hw)
        return self._cache[key]

    def with_transport(self, transport, consts: Optional[dict] = None) -> "Layouts":
        """The same graphs (not searched again) under another transport or constants."""
        out = Layouts.__new__(Layouts)
        out.__dict__.update(self.__dict__)
        from gpucomm.planners.collectives import transport as tr

        out.transport, out.consts, out._cache = transport, consts, {}
        out.base = tr.profile(transport, consts=consts) if transport is not None else timing.DEFAULT
        return out


def _case(layouts: Layouts, run: Run, algo: str = "auto", ll128_c2c: Optional[bool] = None) -> Optional[_Case]:
    coll = run.collective
    g, hw = layouts.get(run.nodes, run.gpus_per_node)
    g0 = timing.apply(g, hw, replace(timing.DEFAULT, ll128_c2c=ll128_c2c))
    meas = [m for m in measured_series(run.run) if m["size_bytes"] > 0 and m["time_us"] and m["time_us"] > 0]
    if not meas:
        return None
    rows = []
    if coll in ("all_to_all", "send_recv"):
        rows = [_Row(m["size_bytes"], float(m["time_us"]), "p2p", "Simple") for m in meas]
    else:
        nccl = tuning_table(g0, coll, achievable=False)
        allowed = allowed_algos(g0, coll, algo)
        for m in meas:
            best = nccl_choice(g0, coll, m["size_bytes"], allowed, cells=nccl)
            if best is None:
                return None
            rows.append(_Row(m["size_bytes"], float(m["time_us"]), best[1], best[2]))
    rows, dips = _without_dips(rows, coll, run.nodes * run.gpus_per_node)
    if dips:
        run.notes.append(f"{run.label}: not fitted: {len(dips)} size(s) whose busbw falls below {DIP:g} x that of "
                         f"a smaller size ({', '.join(units.format_size(d) for d in dips[:4])}): a measurement dip")
    if not rows:
        return None
    smax = max(r.size for r in rows)
    top = [r for r in rows if r.size >= max(smax / 16, min(smax, 1 << 20))]
    return _Case(run, coll, g, hw, rows, top)


# nccl-tests' bus bandwidth grows with the size for one algorithm; NCCL's switches between
# protocols and algorithms dent it by ~20% at most in the published tables.  A size whose busbw
# falls below DIP x the best of the smaller sizes is a disturbed measurement (another job, a
# network timeout, a retransmission): the fit leaves it out and says so.
DIP = 0.6


def _without_dips(rows: list, coll: str, n: int) -> tuple[list, list]:
    keep, dips, best = [], [], 0.0
    for r in sorted(rows, key=lambda r: r.size):
        bus = timing.busbw_GBps(coll, n, r.size, r.t_meas)
        if best > 0.05 and bus < DIP * best:
            dips.append(r.size)
            continue
        best = max(best, bus)
        keep.append(r)
    return keep, dips


def _predict_rows(case: _Case, rows: Iterable[_Row], p: timing.Profile) -> list[timing.Terms]:
    g = timing.apply(case.graph, case.hw, p)
    table = None
    if case.coll not in ("all_to_all", "send_recv"):
        key = (g.ring_bus_bw, g.tree_bus_bw, g.nvls_bus_bw)   # all the achievable table depends on
        table = case.tables.get(key)
        if table is None:
            table = case.tables[key] = tuning_table(g, case.coll, achievable=True)
            if len(case.tables) > 256:
                case.tables.clear()
                case.tables[key] = table
    return [timing.terms(g, case.coll, r.algo, r.proto, r.size, p, table) for r in rows]


# Robust loss of a run's log error in the bandwidth stage: quadratic up to ~10%, linear beyond
# (soft L1), so that one run the model cannot explain (e.g. an algorithm NCCL ran that its tuning
# model -- ours -- does not pick) does not drag every parameter towards it.
ROBUST_SCALE = 0.1


def _bw_loss(cases: Sequence[_Case], p: timing.Profile) -> float:
    total = 0.0
    for c in cases:
        loss = 0.0
        for r, t in zip(c.top, _predict_rows(c, c.top, p)):
            tp = t.time(p)
            z = (math.log(tp / r.t_meas) ** 2 if math.isfinite(tp) and tp > 0 else 25.0) / ROBUST_SCALE ** 2
            loss += 2.0 * (math.sqrt(1.0 + z) - 1.0)
        total += loss / len(c.top)
    return total


def _golden(f, lo: float, hi: float, log: bool, iters: int = 28) -> float:
    """Minimum of a unimodal-ish f on [lo, hi] (log scale when ``log``), golden-section search."""
    a, b = (math.log(lo), math.log(hi)) if log else (lo, hi)
    conv = (lambda x: math.exp(x)) if log else (lambda x: x)
    gr = (math.sqrt(5) - 1) / 2
    c, d = b - gr * (b - a), a + gr * (b - a)
    fc, fd = f(conv(c)), f(conv(d))
    for _ in range(iters):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - gr * (b - a)
            fc = f(conv(c))
        else:
            a, c, fc = c, d, fd
            d = a + gr * (b - a)
            fd = f(conv(d))
    return conv((a + b) / 2)


def _active(cases: Sequence[_Case]) -> list[str]:
    """The bandwidth parameters some run depends on (module docstring)."""
    multi = [c for c in cases if c.run.nodes > 1]
    single = [c for c in cases if c.run.nodes == 1]
    out = []
    ring_multi = [c for c in multi if c.coll in RING_FAMILY]
    a2a_multi = [c for c in multi if c.coll == "all_to_all"]
    p2p_multi = [c for c in multi if c.coll == "send_recv"]
    if ring_multi:
        out.append("net_gbps_per_nic")
    if a2a_multi:
        out.append("alltoall_efficiency")
    if p2p_multi:
        out.append("p2p_efficiency")
    counts = {c.run.nodes for c in multi}
    if len(counts) >= 2 and max(counts) > 2:
        out.append("congestion")
    if any(c.coll in RING_FAMILY and any(r.algo != "nvls" for r in c.top) for c in single):
        out.append("intra_efficiency")
    if any(any(r.algo == "nvls" for r in c.top) for c in single):
        out.append("nvls_efficiency")
    if any(c.coll in ("all_to_all", "send_recv") and c.run.gpus_per_node > 1 for c in single):
        out.append("intra_p2p_efficiency")
    return out


def _latency_fit(cases: Sequence[_Case], p: timing.Profile, active: Sequence[str]) -> timing.Profile:
    """Non-negative least squares of the relative time error in the latency parameters and the
    network protocol efficiencies (the time is linear in them -- in 1/efficiency for the latter --
    once the bandwidths are fixed), for each fill window when the fill is fitted (the best one wins);
    every run weighs the same.  The ring step floor, when fitted, is searched around the linear
    stage (:data:`FLOOR_GRID`): each value it takes gives the others' least squares."""
    fit_floor = "step_floor_us" in active
    active = [k for k in active if k != "step_floor_us"]
    if not active:
        return p
    base = replace(p, net_ll_efficiency=1.0, net_ll128_efficiency=1.0)
    samples = []
    for c in cases:
        w = 1.0 / len(c.rows)
        for r, t in zip(c.rows, _predict_rows(c, c.rows, base)):
            if math.isfinite(t.transfer) and math.isfinite(t.lat):
                proto = (c.run.nodes > 1 and r.proto in ("LL", "LL128")) and r.proto
                samples.append((r.t_meas, t, proto, w))
    if not samples:
        return p
    windows = FILL_WINDOWS if "net_fill" in active else (p.net_fill_bytes,)
    prior_w = PRIOR_WEIGHT * len(cases)

    def at(floor: float, wins) -> Optional[tuple]:
        best = None
        for window in wins:
            got = _nnls_at(samples, active, window, prior_w, floor)
            if got is not None and (best is None or got[0] < best[0]):
                best = got + (window, floor)
        return best

    best = at(p.step_floor_us, windows)
    if best is None:
        return p
    if fit_floor:
        window = (best[2],)
        tried = [(f, at(f, window)) for f in FLOOR_GRID]
        tried = [(f, b) for f, b in tried if b is not None]
        i = min(range(len(tried)), key=lambda k: tried[k][1][0])
        if 0 < i < len(tried) - 1 and tried[i][0] > 0:   # refine between the grid neighbours
            lo, hi = max(tried[i - 1][0], FLOOR_GRID[1] / 2), tried[i + 1][0]
            f = _golden(lambda v: (at(v, window) or (math.inf,))[0], lo, hi, True, FLOOR_REFINE)
            cand = at(f, window)
            if cand is not None and cand[0] < tried[i][1][0]:
                tried[i] = (f, cand)
        best = at(tried[i][0], windows) or tried[i][1]
    vals = dict(zip(active, best[1]))
    if fit_floor:
        vals["step_floor_us"] = best[3]
    if vals.get("net_fill"):
        vals["net_fill_bytes"] = best[2]
    if "latency_scale" in vals and vals["latency_scale"] <= 0:
        vals["latency_scale"] = 1e-3
    for k in _INVERSE:
        if k in vals:   # 1/efficiency -> efficiency, within [0.02, 1.5]
            vals[k] = min(1.5, max(0.02, 1.0 / vals[k])) if vals[k] > 0 else 1.5
    return replace(p, **vals)


def _nnls_at(samples: list, active: Sequence[str], window: float, prior_w: float,
             floor: float = 0.0) -> Optional[tuple[float, list]]:
    """(weighted squared error, coefficients >= 0) of the linear stage for one fill window and ring
    step floor: the normal equations are accumulated once, then every subset of free coefficients
    is solved on them (the subset with the smallest error whose solution is non-negative wins: exact NNLS for a
    handful of unknowns)."""
    n = len(active)
    ata = [[0.0] * n for _ in range(n)]
    aty = [0.0] * n
    yy = 0.0
    for t_meas, t, proto, w in samples:
        ramp_x = 2.0 * math.sqrt(t.lat * t.transfer) if t.lat > 0 and t.transfer > 0 else 0.0
        feats = {"latency_scale": t.lat, "net_step_latency_us": t.steps_net, "step_latency_us": t.steps, "ramp": ramp_x,
                 "net_ll_efficiency": t.transfer if proto == "LL" else 0.0,
                 "net_ll128_efficiency": t.transfer if proto == "LL128" else 0.0,
                 "net_fill": t.fill_x(window)}
        x = [feats[k] / t_meas for k in active]
        fixed = 0.0 if (proto and f"net_{proto.lower()}_efficiency" in active) else t.moved(floor)
        y = 1.0 - fixed / t_meas
        _accumulate(ata, aty, x, y, w)
        yy += w * y * y
    # Weak priors towards the defaults (NCCL's latency, no per-step extra, no ramp or fill, NCCL's
    # protocol bandwidths): sizes that do not show a parameter leave it there.
    for i, k in enumerate(active):
        x = [0.0] * n
        x[i] = 0.1 if k in ("net_step_latency_us", "step_latency_us") else 1.0
        y = 1.0 if k in ("latency_scale",) + _INVERSE else 0.0
        _accumulate(ata, aty, x, y, prior_w)
        yy += prior_w * y * y
    best = None
    for k in range(n, 0, -1):
        for subset in itertools.combinations(range(n), k):
            sol = _solve([[ata[i][j] for j in subset] for i in subset], [aty[i] for i in subset])
            if sol is None or any(v < 0 for v in sol):
                continue
            full = [0.0] * n
            for i, v in zip(subset, sol):
                full[i] = v
            # sum w (x.c - y)^2 = c'Ac - 2 c'b + yy
            err = sum(full[i] * ata[i][j] * full[j] for i in range(n) for j in range(n)) \
                - 2 * sum(full[i] * aty[i] for i in range(n)) + yy
            if best is None or err < best[0]:
                best = (err, full)
    return best


def _accumulate(ata: list, aty: list, x: list, y: float, w: float) -> None:
    n = len(x)
    for i in range(n):
        if x[i]:
            wx = w * x[i]
            aty[i] += wx * y
            row = ata[i]
            for j in range(n):
                row[j] += wx * x[j]


def _solve(m: list, b: list) -> Optional[list]:
    """m x = b by Gaussian elimination with partial pivoting (None when singular)."""
    n = len(b)
    a = [row[:] + [v] for row, v in zip(m, b)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[piv][col]) < 1e-18:
            return None
        a[col], a[piv] = a[piv], a[col]
        for r in range(n):
            if r != col and a[r][col]:
                f = a[r][col] / a[col][col]
                a[r] = [x - f * y for x, y in zip(a[r], a[col])]
    return [a[i][n] / a[i][i] for i in range(n)]


def _line_rate_gbps(layouts: Layouts, cases: Sequence[_Case]) -> Optional[float]:
    """The NIC line rate (Gb/s) of the multi-node runs, when the topology knows it (not assumed)."""
    if layouts.fabric_gbps is not None:
        return None
    rates = [c.hw.nic_line_GBps * 8.0 for c in cases if c.run.nodes > 1 and c.hw.nic_line_GBps]
    known = all(n.rate_gbps for n in layouts.topo.nics)
    return max(rates) if rates and known else None


def fit(layouts: Layouts, runs: Sequence[Run], start: Optional[timing.Profile] = None,
        algo: str = "auto") -> tuple[timing.Profile, list[str], list[_Case]]:
    """(fitted profile, names of the fitted parameters, the cases) for ``runs`` on ``layouts``' topology.

    Where some multi-node run's GPUs reach their NICs over the CPU's C2C link (:func:`_c2c_graphs`),
    NCCL versions differ in whether LL128 runs across the nodes (:func:`tuning.ll128_default`): the
    runs' NCCL version decides where they print it (nccl-tests' ``nccl-library=``, NCCL's INFO
    banner); otherwise the fit is made both ways and the one whose runs it describes better (median of
    the runs' median |time error|) is kept, as the profile's ``ll128_c2c``.  NCCL_LL128_C2C=0 in the
    environment is taken as given."""
    start = start or timing.DEFAULT
    open_graphs = [] if start.ll128_c2c is not None else _c2c_graphs(layouts, runs)
    if not open_graphs:
        return _fit(layouts, runs, start, algo)
    if not all(g.ll128_c2c for g in open_graphs):    # NCCL_LL128_C2C=0 in the environment: given, not fitted
        return _fit(layouts, runs, replace(start, ll128_c2c=False), algo)
    eras = {ll128_c2c_by_version(library_code(r.run)) for r in runs}
    if len(eras) == 1 and None not in eras:   # the runs say which NCCL ran
        given = eras.pop()
        code = min(library_code(r.run) for r in runs)
        _say(runs, f"ll128_c2c {str(given).lower()}: the runs print NCCL {version_text(code)} (nccl-library), which "
             + ("runs LL128 across the C2C-attached NICs (P2C)" if given else
                "has no P2C path (before 2.27): no LL128 across the C2C-attached NICs"))
        p, fitted, cases = _fit(layouts, runs, replace(start, ll128_c2c=given), algo)
        return p, fitted + ["ll128_c2c"], cases
    tried = []
    for choice in (True, False):
        got = _fit(layouts, runs, replace(start, ll128_c2c=choice), algo)
        tried.append((statistics.median(_run_summary(c, got[0])["median_abs_time_error_pct"] for c in got[2]), got))
    (with_, fit_with), (without, fit_without) = tried
    p, fitted, cases = fit_without if without < with_ - LL128_C2C_MARGIN_PCT else fit_with
    _say(runs, f"ll128_c2c {str(p.ll128_c2c).lower()}: the runs' median |time error| is {with_:.1f}% with LL128 "
         f"across the C2C-attached NICs (NCCL 2.27+) and {without:.1f}% without (NCCL before 2.27, or NCCL_LL128_C2C=0)")
    return p, fitted + ["ll128_c2c"], cases


def _say(runs: Sequence[Run], note: str) -> None:
    """The fit's one note on ll128_c2c, on the first run (a refit, as in cross-validation, replaces it)."""
    runs[0].notes[:] = [n for n in runs[0].notes if not n.startswith("ll128_c2c ")] + [note]


LL128_C2C_MARGIN_PCT = 1.0
"""NCCL 2.30.7's default (LL128 over C2C) stays unless the other reading fits the runs' median |time
error| better by more than this many points."""


def _c2c_graphs(layouts: Layouts, runs: Sequence[Run]) -> list:
    """The graphs of ``runs``' multi-node layouts where NCCL_LL128_C2C changes NCCL's choices: sm>=90
    GPUs that reach their NICs through a C2C link (inter-node path P2C)."""
    out = []
    for key in sorted({(r.nodes, r.gpus_per_node) for r in runs if r.nodes > 1}):
        g, _ = layouts.get(*key)
        if g.cc >= 90 and (g.type_inter or "").upper() == "P2C":
            out.append(g)
    return out


def _fit(layouts: Layouts, runs: Sequence[Run], start: timing.Profile,
         algo: str = "auto") -> tuple[timing.Profile, list[str], list[_Case]]:
    cases = [c for c in (_case(layouts, r, algo, start.ll128_c2c) for r in runs) if c is not None]
    if not cases:
        raise NothingToDo("no measured sizes to fit (every run is empty or zero-sized)")
    p = start
    active = _active(cases)
    if "net_gbps_per_nic" in active and p.net_gbps_per_nic is None:
        multi = next(c for c in cases if c.run.nodes > 1)
        nic = timing.per_nic_GBps(multi.hw, p)
        p = replace(p, net_gbps_per_nic=(nic or 25.0) * 8.0)
    multi_protos = {r.proto for c in cases if c.run.nodes > 1 for r in c.rows}
    lat_active = ["latency_scale", "ramp"] + (["net_step_latency_us", "step_latency_us", "net_fill"]
                                              if any(c.run.nodes > 1 for c in cases) else []) \
        + [f"net_{x.lower()}_efficiency" for x in ("LL", "LL128") if x in multi_protos] \
        + (["step_floor_us"] if any(c.run.nodes > 1 and r.algo == "ring" and r.proto == "Simple"
                                    for c in cases for r in c.rows) else [])
    bounds = dict(BOUNDS)
    line = _line_rate_gbps(layouts, cases)
    if line:
        bounds["net_gbps_per_nic"] = (BOUNDS["net_gbps_per_nic"][0], line * LINE_RATE_SLACK)
    for _ in range(ROUNDS):
        before = p
        for _ in range(2):
            for name in active:
                lo, hi = bounds[name]
                log = name != "congestion"
                sub = _relevant(cases, name)   # the other runs' loss does not depend on it
                val = _golden(lambda v: _bw_loss(sub, replace(p, **{name: v})), lo, hi, log)
                if name == "congestion" and _bw_loss(sub, replace(p, congestion=0.0)) <= _bw_loss(sub, replace(p, congestion=val)):
                    val = 0.0
                p = replace(p, **{name: val})
        p = _latency_fit(cases, p, [k for k in LATENCY_PARAMETERS if k in lat_active])
        if _converged(before, p):
            break
    return p, active + [k for k in LATENCY_PARAMETERS if k in lat_active], cases


def _relevant(cases: Sequence[_Case], name: str) -> list:
    """The cases whose predicted time depends on the bandwidth parameter ``name``."""
    p2p = ("all_to_all", "send_recv")
    rule = {
        "net_gbps_per_nic": lambda c: c.run.nodes > 1,
        "alltoall_efficiency": lambda c: c.run.nodes > 1 and c.coll == "all_to_all",
        "p2p_efficiency": lambda c: c.run.nodes > 1 and c.coll == "send_recv",
        "congestion": lambda c: c.run.nodes > 2,
        "intra_efficiency": lambda c: c.coll not in p2p,
        "nvls_efficiency": lambda c: c.run.nodes == 1 and c.coll not in p2p,
        "intra_p2p_efficiency": lambda c: c.coll in p2p,
    }.get(name, lambda c: True)
    return [c for c in cases if rule(c)] or list(cases)


def _converged(a: timing.Profile, b: timing.Profile, rel: float = 5e-3) -> bool:
    """No parameter moved by more than ``rel`` (relative; absolute for ones near 0) in a round."""
    da, db = a.to_dict(), b.to_dict()
    return all((x is None and y is None) or (x is not None and y is not None and abs(x - y) <= rel * max(abs(x), abs(y), 1e-2))
               for x, y in ((da[k], db[k]) for k in da))


# --------------------------------------------------------------------------------------------
# The gpucomm.calibration/v1 document
def _run_summary(case: _Case, p: timing.Profile) -> dict:
    terms = _predict_rows(case, case.rows, p)
    n = case.run.nodes * case.run.gpus_per_node
    rows = []
    meas_by_size = {m["size_bytes"]: m for m in measured_series(case.run.run)}
    for r, t in zip(case.rows, terms):
        tp = t.time(p)
        mb = meas_by_size.get(r.size, {}).get("busbw_GBps")
        pb = timing.busbw_GBps(case.coll, n, r.size, tp)
        rows.append({"size_bytes": r.size, "measured_busbw_GBps": mb, "predicted_busbw_GBps": pb,
                     "error_pct": compare.error_pct(pb, mb), "algorithm": r.algo, "protocol": r.proto,
                     "measured_time_us": r.t_meas, "predicted_time_us": tp})
    s = compare.summarize_rows(rows)
    L = s["largest"] or {}
    return {"source": case.run.source, "line": case.run.run["rows"][0]["line"], "collective": case.coll,
            "nodes": case.run.nodes, "gpus_per_node": case.run.gpus_per_node, "sizes": len(rows),
            "largest_size_bytes": L.get("size_bytes"),
            "largest_error_pct": _r(L.get("error_pct")),
            "median_abs_error_pct_ge_1MiB": _r(s["median_abs_error_pct_ge_1MiB"]),
            "median_abs_time_error_pct": _r(statistics.median(abs(100.0 * (t.time(p) / r.t_meas - 1))
                                                               for r, t in zip(case.rows, terms)))}


def _r(x: Optional[float], nd: int = 3) -> Optional[float]:
    return None if x is None else round(float(x), nd)


def machine_summary(topo: Union[Topology, dict], hw: Optional[timing.Hardware] = None) -> dict:
    """What a profile was fitted on, to recognise another machine when it is applied."""
    topo = Topology.of(topo)
    gpu = topo.gpus[0].name if topo.gpus else None
    rates = sorted({n.rate_gbps for n in topo.nics if n.rate_gbps})
    return {"gpu": gpu, "gpus": len(topo.gpus), "nics": len(topo.nics), "nic_gbps": rates[-1] if rates else None}


def build_calibration(topo_doc: Union[Topology, dict], texts: Sequence[tuple[str, str]], topology_source: str,
                      collective: Optional[str] = None, nodes: Optional[int] = None,
                      gpus_per_node: Optional[int] = None, fabric_gbps: Optional[float] = None,
                      nvlink_domain: Optional[int] = None) -> dict:
    """The ``gpucomm.calibration/v1`` document of ``gpucomm calibrate`` (no I/O).  ``nvlink_domain``:
    trays per NVLink domain of every run (default: NCCL's, from the topology's fabric info)."""
    from gpucomm.planners.collectives import transport as tr

    topo = Topology.of(topo_doc)
    runs, notes = runs_from_texts(topo, texts, collective=collective, nodes=nodes, gpus_per_node=gpus_per_node)
    # the transport the runs' own NCCL lines show: one profile describes one transport (calibrate each apart)
    seen = {}
    for r in runs:
        t = tr.from_log({"net": r.run.get("nccl_net")}, r.label)
        if t is not None:
            seen.setdefault(t.name, []).append(r.label)
    if len(seen) > 1:
        notes.append("the runs show different inter-node transports (" + "; ".join(
            f"{k}: {', '.join(v[:2])}" for k, v in sorted(seen.items())) + "): a profile describes one; calibrate each "
            "transport separately")
    layouts = Layouts(topo, fabric_gbps, nvlink_domain=nvlink_domain)
    p, fitted, cases = fit(layouts, runs)
    summaries = [_run_summary(c, p) for c in cases]
    for c in cases:
        notes += [n for n in c.run.notes if n not in notes]
    med_time = statistics.median(s["median_abs_time_error_pct"] for s in summaries)
    warn = setup_warning(summaries, med_time)
    if warn:
        notes.append(warn)
    if len(seen) == 1:
        notes.insert(0, f"transport: {next(iter(seen))} (the runs' NCCL lines)")
    return document(p, fitted, topo, topology_source, summaries, notes, fabric_gbps=fabric_gbps,
                    residual={"runs": len(summaries), "sizes": sum(s["sizes"] for s in summaries),
                              "median_abs_time_error_pct": _r(med_time)})


MIXED_SETUP_PCT = 25.0
"""A fitted run whose largest size the fit still misses by more than this (busbw) is one that the
profile's single set of physical parameters does not describe: most often runs of different transport
setups given together (NCCL's socket transport vs IB verbs or a net plugin, different NCCL versions or
NCCL_* settings: the published Polaris tables run at 38 to 146 Gb/s per NIC on the same machine), or a
run where NCCL chose an algorithm the model of its search does not (``predict --compare`` shows it)."""

SETUP_WARNING = "the profile does not describe"


def setup_warning(summaries: Sequence[dict], median_time_error_pct: Optional[float] = None) -> Optional[str]:
    """The warning of a fit that misses some of its own runs at their largest size by more than
    :data:`MIXED_SETUP_PCT`, naming them (worst first), or None.

    >>> setup_warning([{"source": "a.txt", "largest_error_pct": 3.0}]) is None
    True
    >>> setup_warning([{"source": "a.txt", "largest_error_pct": 3.0},
    ...                {"source": "b.txt", "largest_error_pct": -70.0}])[:62]
    'the profile does not describe 1 of its 2 runs: b.txt (largest '
    """
    bad = sorted((s for s in summaries if s.get("largest_error_pct") is not None
                  and abs(s["largest_error_pct"]) > MIXED_SETUP_PCT), key=lambda s: -abs(s["largest_error_pct"]))
    if not bad:
        return None
    names = ", ".join(f"{s['source']} (largest size {s['largest_error_pct']:+.0f}%)" for s in bad[:3])
    more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
    return (f"{SETUP_WARNING} {len(bad)} of its {len(summaries)} runs: {names}{more}. Do the runs share one "
            f"transport setup (NCCL version, NCCL_NET / net plugin, NCCL_* settings)? Calibrate each setup "
            f"separately; a run where NCCL chose another algorithm shows in predict --compare.")


def document(p: timing.Profile, fitted: Sequence[str], topo, topology_source: str, runs: list, notes: list,
             fabric_gbps: Optional[float] = None, residual: Optional[dict] = None, created_by: str = "gpucomm calibrate") -> dict:
    params = p.to_dict()
    return {
        "schema": SCHEMA,
        "created_by": created_by,
        "topology": topology_source,
        "machine": machine_summary(topo),
        "fabric_gbps": fabric_gbps,
        "parameters": params,
        "fitted": [k for k in timing.PARAMETERS if k in fitted],
        "defaults": [k for k in timing.PARAMETERS if k not in fitted],
        "runs": runs,
        "residual": residual or {},
        "notes": list(notes),
    }


def profile_from_document(profile, source: str = "<calibration>") -> timing.Profile:
    """The :class:`~gpucomm.planners.collectives.timing.Profile` of a ``gpucomm.calibration/v1``
    document.  Raises InputError (one line, naming ``source``) for anything else."""
    if not isinstance(profile, dict) or profile.get("schema") != SCHEMA:
        raise InputError("not a calibration profile", source, expected=f'a JSON document with "schema": "{SCHEMA}" '
                         "(written by gpucomm calibrate or gpucomm bench --save-calibration)")
    params = profile.get("parameters")
    if not isinstance(params, dict):
        raise InputError("calibration profile has no 'parameters' mapping", source)
    vals = {}
    for k, v in params.items():
        if k not in timing.PARAMETERS:
            raise InputError(f"calibration profile: unknown parameter {k!r}", source,
                             expected=", ".join(timing.PARAMETERS))
        if k == "ll128_c2c":
            if v is not None and not isinstance(v, bool):
                raise InputError(f"calibration profile: parameter ll128_c2c = {v!r}", source,
                                 expected="true, false or null")
            vals[k] = v
            continue
        if v is None:
            if k != "net_gbps_per_nic":
                raise InputError(f"calibration profile: parameter {k} is null", source, expected="a number")
            continue
        lo, hi = PROFILE_RANGES[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:   # NaN fails too
            raise InputError(f"calibration profile: parameter {k} = {v!r}", source,
                             expected=f"a number from {lo:g} to {hi:g}")
        vals[k] = float(v)
    return timing.Profile(**vals)


def applied_note(profile: dict, source: str, topo: Union[Topology, dict]) -> list[str]:
    """The notes a prediction with a profile carries: which profile, and any sign that it was fitted
    on another machine (GPU model, GPU count, NIC rate)."""
    out = [f"calibrated: {source} (fitted: {', '.join(profile.get('fitted') or []) or 'nothing'})"]
    fitted_on = profile.get("machine") if isinstance(profile.get("machine"), dict) else {}
    here = machine_summary(topo)
    diffs = [f"{k} {fitted_on.get(k)!r} there, {here.get(k)!r} here" for k in ("gpu", "gpus", "nic_gbps")
             if fitted_on.get(k) is not None and here.get(k) is not None and fitted_on.get(k) != here.get(k)]
    if diffs:
        out.append("the calibration profile was fitted on another machine: " + "; ".join(diffs))
    return out



# --------------------------------------------------------------------------------------------
# Honest accuracy: leave one node count out (tools/crossval.py, tests/test_predict_calibration.py)
def check_run(layouts: Layouts, run: Run, profile: Optional[timing.Profile]) -> dict:
    """One run predicted under ``profile`` (None: the documented defaults) and compared size by size
    with what was measured -- every measured size, dips included: the code of ``gpucomm predict
    --compare``.  Returns {collective, nodes, gpus_per_node, largest_size_bytes, largest_error_pct,
    median_abs_error_pct_ge_1MiB, peak80_measured_bytes, peak80_predicted_bytes, algorithm}."""
    g, hw = layouts.get(run.nodes, run.gpus_per_node)
    profile = profile or layouts.base
    graph = timing.apply(g, hw, profile)
    c = compare.compare_run(layouts.topo, run.run, nodes=run.nodes, gpus_per_node=run.gpus_per_node,
                            graph=graph, profile=profile)
    s = c["summary"]
    L = s["largest"] or {}
    return {"collective": c["collective"], "nodes": run.nodes, "gpus_per_node": run.gpus_per_node,
            "largest_size_bytes": L.get("size_bytes"), "largest_error_pct": _r(L.get("error_pct"), 2),
            "median_abs_error_pct_ge_1MiB": _r(s["median_abs_error_pct_ge_1MiB"], 2),
            "peak80_measured_bytes": s["peak"]["measured_size_bytes"],
            "peak80_predicted_bytes": s["peak"]["predicted_size_bytes"],
            "algorithm": f"{L.get('algorithm')}/{L.get('protocol')}" if L else None}


def cross_validate(layouts: Layouts, runs: Sequence[Run], extrapolate: bool = False) -> dict:
    """Leave one node count out over the runs of one machine and environment: for every node count N
    the profile is fitted on the runs at the other node counts and checked on the runs at N
    (``predicted``: no figure there comes from data the fit saw); ``fitted`` is every run checked
    under the profile fitted on all of them (the fit's residual, not a prediction); ``uncalibrated``
    every run under the documented defaults.  With ``extrapolate``, ``extrapolated``: every node count
    predicted from a fit on the smaller ones only (what a user with small runs asks of a large job).
    Each record: :func:`check_run` plus ``source`` and, for predictions, ``fitted_on`` (the node
    counts of the fit)."""
    counts = sorted({r.nodes for r in runs})
    out: dict = {"node_counts": counts, "predicted": [], "fitted": [], "uncalibrated": [], "profiles": [],
                 "extrapolated": []}
    for r in runs:
        out["uncalibrated"].append(dict(check_run(layouts, r, None), source=r.source))
    if len(counts) > 1:
        for n in counts:
            train = [r for r in runs if r.nodes != n]
            p, fitted, _ = fit(layouts, train)
            out["profiles"].append({"held_out_nodes": n, "fitted": fitted, "parameters": p.to_dict()})
            for r in runs:
                if r.nodes == n:
                    out["predicted"].append(dict(check_run(layouts, r, p), source=r.source,
                                                 fitted_on=sorted({t.nodes for t in train})))
    if extrapolate:
        for n in counts:
            train = [r for r in runs if r.nodes < n]
            if not any(r.nodes > 1 for r in train):
                continue    # no multi-node run to fit the network on
            p, _, _ = fit(layouts, train)
            out["extrapolated"] += [dict(check_run(layouts, r, p), source=r.source,
                                         fitted_on=sorted({t.nodes for t in train})) for r in runs if r.nodes == n]
    p, fitted, _ = fit(layouts, runs)
    for r in runs:
        out["fitted"].append(dict(check_run(layouts, r, p), source=r.source))
    return out


__all__ = ["SCHEMA", "Run", "Layouts", "runs_from_texts", "fit", "build_calibration", "document",
           "profile_from_document", "applied_note", "machine_summary", "check_run", "cross_validate"]
