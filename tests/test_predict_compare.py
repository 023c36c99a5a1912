"""``gpucomm predict TOPO --compare FILE`` and planners/collectives/compare.py: predictions checked against measured
nccl-tests runs.

The three real captures (fixtures/captures/nccltests) are compared against the topologies the
calibration test builds for them (tests/test_predict_calibration.py: the 8x RTX A6000 PCIe box, 2
nodes x 4 A100 Polaris over NCCL's socket transport, example:hgx-h100), through the CLI with the
topology saved as a file; the summary must be the calibration table's figures.  Synthetic logs are
written in nccl-tests' own layout (src/common.cu: size count type redop root time algbw busbw
#wrong, twice), with algbw = size / time and busbw = algbw x the collective's factor."""
from __future__ import annotations

import functools
import json
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support import HOSTS, ROOT, run_cli
from gpucomm.probes import units

import support as calib
from gpucomm.planners.collectives import compare
from gpucomm.planners.collectives import cost
from gpucomm.probes.errors import InputError
from gpucomm.probes.model import dumps_json

SCHEMA_FILE = ROOT / "planners" / "schema" / "predict-compare.schema.json"
H100 = "example:hgx-h100"
MiB = 1 << 20


def _validate(rep: dict) -> None:
    import jsonschema

    jsonschema.validate(rep, json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def calibration():
    return {c[0]: calib.calibrate(*c) for c in calib.CASES}


@pytest.fixture(scope="module")
def topo_files(tmp_path_factory):
    """Each capture's topology as the calibration builds it, saved as a gpucomm topology file."""
    d = tmp_path_factory.mktemp("topo")
    out = {}
    for name, builder, _nodes, _fabric in calib.CASES:
        if builder is calib.build_h100 and (HOSTS / "hgx-h100").is_dir():
            out[name] = H100   # what build_h100 loads; the example name is what a user types
            continue
        p = d / f"{name[:2]}.json"
        p.write_text(dumps_json(builder(calib.load_nccltests(str(calib.NT / name)))), encoding="utf-8")
        out[name] = str(p)
    return out


def _args(name: str, topo_files: dict) -> list:
    fabric = calib.case_fabric(name)
    return ["predict", topo_files[name], "--compare", calib.NT / name] + (
        ["--fabric-gbps", str(fabric)] if fabric else [])


# ------------------------------------------------------------------ the three real captures
@pytest.mark.parametrize("name", [c[0] for c in calib.CASES])
def test_captures_match_calibration_table(name, topo_files, calibration):
    r = run_cli(*_args(name, topo_files), "--format", "json")
    assert r.code == 0, r.stderr
    rep = r.json()
    _validate(rep)
    assert rep["schema"] == "gpucomm.predict-compare/v1" and len(rep["comparisons"]) == 1
    c, cal = rep["comparisons"][0], calibration[name]
    # layout from the file: ranks and hosts (no --nodes given)
    assert (c["collective"], c["n_ranks"], c["nodes"]) == (cal["collective"], cal["n_ranks"], cal["nodes"])
    assert [x["size_bytes"] for x in c["rows"]] == [x["size"] for x in cal["rows"]]
    for x, y in zip(c["rows"], cal["rows"]):
        assert x["measured_busbw_GBps"] == y["meas_busbw"] and x["predicted_busbw_GBps"] == y["pred_busbw"]
        assert f"{x['algorithm']}/{x['protocol']}" == y["algo"]
        assert (x["error_pct"] is None) == (y["err_pct"] is None)
        if x["error_pct"] is not None:
            assert x["error_pct"] == pytest.approx(y["err_pct"], abs=1e-4)
    s, L = c["summary"], cal["largest"]
    assert s["largest"]["size_bytes"] == L["size"]
    assert s["largest"]["error_pct"] == pytest.approx(L["err_pct"], abs=1e-4)
    assert s["median_abs_error_pct_ge_1MiB"] == pytest.approx(cal["median_abs_err_ge_1MiB"], abs=1e-4)
    # the calibration's goals hold for the command's figures too
    assert abs(s["largest"]["error_pct"]) <= 15.0
    assert s["median_abs_error_pct_ge_1MiB"] <= calib.MEDIAN_BOUND[name]


@pytest.mark.parametrize("name", [c[0] for c in calib.CASES])
def test_table_summary_line_prints_the_calibration_figures(name, topo_files, calibration, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")    # the summary line whole (narrower output wraps its prose)
    r = run_cli(*_args(name, topo_files))
    assert r.code == 0, r.stderr
    cal = calibration[name]
    L = cal["largest"]
    summary = [ln for ln in r.stdout.splitlines() if ln.startswith("# summary:")]
    assert len(summary) == 1
    # the same figures as the README calibration table row
    assert f"({calib._human(L['size'])}) busbw measured {L['meas_busbw']:.2f} GB/s, " \
           f"predicted {L['pred_busbw']:.2f} GB/s ({L['err_pct']:+.1f}%)" in summary[0]
    assert f">= 1MiB: {cal['median_abs_err_ge_1MiB']:.1f}%;" in summary[0]
    rows = [ln.split() for ln in r.stdout.splitlines() if ln and not ln.startswith("#")]
    assert len(rows) == len(cal["rows"])
    assert rows[-1][-1] == L["algo"] and rows[-1][0] == str(L["size"])


def test_peak_fraction_sizes_on_the_a6000_capture(topo_files):
    """80% of the measured peak (15.74 GB/s -> 12.59) is first reached at 4 MiB (14.59; 2 MiB has
    12.32), read off the capture by hand."""
    name = "02_rtxa6000-x8_1node_allreduce.txt"
    rep = run_cli(*_args(name, topo_files), "--format", "json").json()
    pk = rep["comparisons"][0]["summary"]["peak"]
    assert pk["measured_peak_busbw_GBps"] == 15.74 and pk["measured_size_bytes"] == 4 * MiB
    assert pk["fraction"] == 0.8 and pk["predicted_size_bytes"] is not None


def test_polaris_nodes_inferred_from_ranks(topo_files):
    """A --nodes that does not fit the file's 8 ranks on a 4-GPU node is replaced by 8 / 4 = 2, with a note."""
    name = "04_polaris-a100-40gb-x4_2nodes_allreduce_default-tcp.txt"
    r = run_cli(*_args(name, topo_files), "--nodes", "1", "--format", "json")
    assert r.code == 0, r.stderr
    c = r.json()["comparisons"][0]
    assert (c["nodes"], c["gpus_per_node"]) == (2, 4)
    assert any("using --nodes 2" in n for n in c["notes"])


def test_one_host_run_on_a_smaller_node_is_named(tmp_path, topo_files):
    """8 ranks printed on one host against a 4-GPU node: compared as 2 nodes x 4, and the note says so."""
    log = tmp_path / "one-host.log"
    log.write_text(_run_text("all_reduce", 8, [(MiB, 500.0), (64 * MiB, 15000.0)]), encoding="utf-8")
    polaris = topo_files["04_polaris-a100-40gb-x4_2nodes_allreduce_default-tcp.txt"]
    r = run_cli("predict", polaris, "--compare", log, "--format", "json")
    assert r.code == 0, r.stderr
    c = r.json()["comparisons"][0]
    assert (c["nodes"], c["gpus_per_node"]) == (2, 4)
    assert "the file's ranks ran on 1 host(s); compared as 2 node(s) x 4 GPUs" in c["notes"]


# ------------------------------------------------------------------ synthetic logs
def _run_text(coll: str, n_ranks: int, rows: list[tuple[int, float]], hosts: int = 1, dtype: str = "float",
              header: bool = True) -> str:
    """One nccl-tests run in its own layout (rows: (size bytes, time us))."""
    esize = {"float": 4, "double": 8, "half": 2}[dtype]
    per_host = n_ranks // hosts
    lines = []
    if header:
        lines += ["# nccl-tests version 2.17.8 nccl-headers=22902 nccl-library=22902",
                  f"# Collective test starting: {coll}_perf"]
    lines += ["# nThread 1 nGpus 1 minBytes 1048576 maxBytes 1073741824 step: 4(factor) warmup iters: 5 "
              "iters: 20 agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    for r in range(n_ranks):
        lines.append(f"#  Rank {r:2d} Group  0 Pid {1000 + r:6d} on     node{r // per_host} device {r % per_host:2d} "
                     f"[0000:{0x18 + r % per_host:02x}:00] NVIDIA H100 80GB HBM3")
    lines += ["#",
              "#                                                              out-of-place                       in-place",
              "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"]
    name = {"all_reduce": "all_reduce", "all_gather": "all_gather", "alltoall": "all_to_all"}.get(coll, coll)
    redop = "sum" if coll in ("all_reduce", "reduce_scatter", "reduce") else "none"
    per_rank = coll in ("all_gather", "reduce_scatter", "alltoall")
    for size, t in rows:
        algbw = size / t / 1e3
        # nccl-tests' factors: gather/scatter (n-1)/n like all_gather (gather.cu), the rest from gpucomm.planners.collectives.cost
        busbw = algbw * (units.busbw_factor(name, n_ranks) if name in units.COLLECTIVES else (n_ranks - 1) / n_ranks)
        count = size // esize // (n_ranks if per_rank else 1)
        cell = f"{t:8.2f} {algbw:7.2f} {busbw:7.2f}       0"
        lines.append(f"{size:12d}  {count:12d}  {dtype:>8}  {redop:>6}  {-1:6d}  {cell}  {cell}")
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 1.0", "#"]
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=None)
def _h100_doc() -> dict:
    from gpucomm.probes.load import load_topology

    return load_topology(H100)


def _predicted(coll: str, sizes: list[int]) -> list[dict]:
    return cost.predict(cost.summarize(_h100_doc()), coll, sizes)


SIZES = [MiB << (2 * k) for k in range(6)]   # 1 MiB .. 1 GiB, factor 4


def _slow_run(coll: str, slowdown: float, header: bool = True) -> str:
    """A run that takes ``slowdown`` x the predicted time at every size: error = slowdown - 1."""
    return _run_text(coll, 8, [(p["size_bytes"], p["time_us"] * slowdown) for p in _predicted(coll, SIZES)],
                     header=header)


def test_two_collectives_in_one_log(tmp_path):
    log = tmp_path / "two.log"
    log.write_text(_slow_run("all_reduce", 1.25) + _slow_run("all_gather", 0.8), encoding="utf-8")
    r = run_cli("predict", H100, "--compare", log, "--format", "json")
    assert r.code == 0, r.stderr
    rep = r.json()
    _validate(rep)
    assert [c["collective"] for c in rep["comparisons"]] == ["all_reduce", "all_gather"]
    for c, want in zip(rep["comparisons"], (25.0, -20.0)):   # predicted busbw / measured busbw - 1
        assert [x["size_bytes"] for x in c["rows"]] == SIZES
        assert c["n_ranks"] == 8 and c["nodes"] == 1
        for x in c["rows"]:
            assert x["error_pct"] == pytest.approx(want, abs=0.3)   # 2-decimal printing of busbw
        assert c["summary"]["median_abs_error_pct_ge_1MiB"] == pytest.approx(abs(want), abs=0.3)
        assert c["summary"]["sizes_ge_1MiB"] == len(SIZES)
        # a uniform slowdown keeps the shape: both series reach 80% of their peak at the same size
        assert c["summary"]["peak"]["measured_size_bytes"] == c["summary"]["peak"]["predicted_size_bytes"]
    assert rep["comparisons"][1]["rows"][0]["count"] == MiB // 4 // 8   # all_gather count is per rank

    one = run_cli("predict", H100, "--compare", log, "--collective", "allgather", "--format", "json")
    assert one.code == 0, one.stderr
    assert [c["collective"] for c in one.json()["comparisons"]] == ["all_gather"]

    table = run_cli("predict", H100, "--compare", log)
    assert table.code == 0, table.stderr
    assert table.stdout.count("# summary:") == 2 and "(all_gather_perf)" in table.stdout
    assert "-20.0%" in table.stdout and "+25.0%" in table.stdout

    missing = run_cli("predict", H100, "--compare", log, "--collective", "broadcast")
    assert missing.code == 1 and "no broadcast run in the file" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


def test_unmodelled_and_unnamed_runs(tmp_path):
    """A gather_perf run is skipped with a warning; a headerless run whose busbw/algbw ratio fits two
    collectives (all_gather or alltoall) is compared once --collective names it."""
    log = tmp_path / "mixed.log"
    gather = _run_text("gather", 8, [(MiB, 100.0), (4 * MiB, 300.0)])
    log.write_text(gather.replace("    -1  ", "     0  ") + _slow_run("all_reduce", 1.0), encoding="utf-8")
    r = run_cli("predict", H100, "--compare", log, "--format", "json")
    assert r.code == 0, r.stderr
    assert [c["collective"] for c in r.json()["comparisons"]] == ["all_reduce"]
    assert "gather is not modelled" in r.stderr

    bare = tmp_path / "bare.log"
    bare.write_text(_slow_run("all_gather", 1.1, header=False), encoding="utf-8")
    r = run_cli("predict", H100, "--compare", bare)
    assert r.code == 1 and "cannot tell its collective" in r.stderr and "pass --collective" in r.stderr
    r = run_cli("predict", H100, "--compare", bare, "--collective", "all_gather", "--format", "json")
    assert r.code == 0, r.stderr
    c = r.json()["comparisons"][0]
    assert c["collective"] == "all_gather"
    assert c["summary"]["largest"]["error_pct"] == pytest.approx(10.0, abs=0.3)


def test_rank_count_mismatch_is_one_line(tmp_path):
    """12 ranks on one host cannot be an 8-GPU node (nor 12 / 8 nodes of it)."""
    log = tmp_path / "r12.log"
    log.write_text(_run_text("all_reduce", 12, [(MiB, 50.0), (4 * MiB, 120.0)]), encoding="utf-8")
    r = run_cli("predict", H100, "--compare", log)
    assert r.code == 1 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert "12 ranks on 1 host(s)" in r.stderr and "8 GPUs per node" in r.stderr and "r12.log:" in r.stderr
    r = run_cli("predict", H100, "--compare", log, "--gpus-per-node", "5")
    assert r.code == 1 and "not a multiple of --gpus-per-node 5" in r.stderr
    # 12 ranks on 2 hosts: 6 of the 8 GPUs per node
    two = tmp_path / "r12x2.log"
    two.write_text(_run_text("all_reduce", 12, [(MiB, 50.0), (4 * MiB, 120.0)], hosts=2), encoding="utf-8")
    r = run_cli("predict", H100, "--compare", two, "--fabric-gbps", "400", "--format", "json")
    assert r.code == 0, r.stderr
    c = r.json()["comparisons"][0]
    assert (c["nodes"], c["gpus_per_node"]) == (2, 6) and any("first 6" in n for n in c["notes"])


@pytest.mark.parametrize("extra,needle", [
    (["--size", "1GiB"], "--size and --compare exclude each other"),
    (["--dtype", "half"], "--dtype and --compare exclude each other"),
    (["--collective", "allfoo"], "unknown collective"),
    (["--algo", "bogus"], "--algo"),
])
def test_flag_errors_one_line(extra, needle):
    r = run_cli("predict", H100, "--compare", calib.NT / "09_h100-x8_1node_allreduce_cluster01.txt", *extra)
    usage = extra[0] in ("--collective", "--algo")    # a value outside the flag's list: a usage error (exit 2)
    assert r.code == (2 if usage else 1), (r.code, r.stderr)
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 if not usage else "Usage: gpucomm predict" in r.stderr


@pytest.mark.parametrize("content", [b"", b"hello\nworld\n", b"\x00\x01\x02binary", "# size count\n".encode()])
def test_unparsable_file_is_one_line(tmp_path, content):
    p = tmp_path / "bad.txt"
    p.write_bytes(content)
    r = run_cli("predict", H100, "--compare", p)
    assert r.code == 1 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert str(p) in r.stderr
    r = run_cli("predict", H100, "--compare", tmp_path / "missing.txt")
    assert r.code == 1 and "no such file" in r.stderr


def test_plain_predict_unchanged_defaults():
    """Without --compare the defaults are still all_reduce, 1 GiB, 1 node, float."""
    r = run_cli("predict", H100, "--format", "json")
    assert r.code == 0, r.stderr
    d = r.json()
    assert (d["schema"], d["collective"], d["nodes"]) == ("gpucomm.predict/v1", "all_reduce", 1)
    assert [(x["size_bytes"], x["type"]) for x in d["rows"]] == [(1 << 30, "float")]


# ------------------------------------------------------------------ gpucomm.planners.collectives.compare, property-based
_meas = st.one_of(st.none(), st.floats(min_value=0, max_value=1000, allow_nan=False))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1 << 34), _meas, st.floats(min_value=0, max_value=1000, allow_nan=False)),
                min_size=1, max_size=30))
def test_compare_properties(data):
    meas = [{"size_bytes": s, "time_us": 1.0, "busbw_GBps": m} for s, m, _ in data]
    pred = [{"size_bytes": s, "time_us": 1.0, "busbw_GBps": p, "algorithm": "ring", "protocol": "LL"}
            for s, _, p in data]
    rows = compare.compare_series(meas, pred)
    for x in rows:
        m, p = x["measured_busbw_GBps"], x["predicted_busbw_GBps"]
        if m is None or m < compare.MIN_MEASURED_BUSBW:
            assert x["error_pct"] is None
        else:
            assert x["error_pct"] == pytest.approx(100 * (p - m) / m) and x["error_pct"] >= -100 - 1e-9
    s = compare.summarize_rows(rows)
    assert s["largest"]["size_bytes"] == max(d[0] for d in data)
    big = [abs(x["error_pct"]) for x in rows if x["size_bytes"] >= MiB and x["error_pct"] is not None]
    assert s["sizes_ge_1MiB"] == len(big)
    assert s["median_abs_error_pct_ge_1MiB"] == (statistics.median(big) if big else None)
    for which in ("measured", "predicted"):
        size, peak = s["peak"][f"{which}_size_bytes"], s["peak"][f"{which}_peak_busbw_GBps"]
        vals = [(x["size_bytes"], x[f"{which}_busbw_GBps"]) for x in rows if x[f"{which}_busbw_GBps"] is not None]
        if size is not None:
            assert peak > 0 and any(sz == size and v >= 0.8 * peak for sz, v in vals)
            assert all(v < 0.8 * peak for sz, v in vals if sz < size)


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.none(), st.integers(1, 300)), st.one_of(st.none(), st.integers(1, 40)), st.integers(1, 16),
       st.one_of(st.none(), st.integers(1, 40)), st.one_of(st.none(), st.integers(1, 16)))
def test_resolve_layout_properties(ranks, hosts, topo_gpus, nodes, gpn):
    try:
        n, g, notes = compare.resolve_layout(ranks, hosts, topo_gpus, nodes=nodes, gpus_per_node=gpn, where="f")
    except InputError as e:
        assert str(e).startswith("f: ") and "\n" not in str(e)
        assert ranks is not None
        return
    assert n >= 1 and g >= 1 and all(isinstance(x, str) for x in notes)
    if ranks is not None:
        assert n * g == ranks
        if gpn:
            assert g == gpn
        else:
            assert g <= topo_gpus
            if nodes and ranks % nodes == 0 and ranks // nodes <= topo_gpus:
                assert n == nodes   # a --nodes that fits is kept


_LOG_LINES = st.sampled_from([
    "# Collective test starting: all_reduce_perf", "# Collective test starting: gather_perf",
    "#  Rank  0 Group  0 Pid 1 on h0 device  0 [0000:18:00] NVIDIA H100 80GB HBM3",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    "     1048576        262144     float     sum      -1    20.00   52.43   91.75      0    20.00   52.43   91.75      0",
    "     4194304       1048576     float    none      -1    50.00   83.89   73.40      0    50.00   83.89   73.40      0",
    "     4194304       1048576     float     sum       0    50.00   83.89   83.89    N/A      N/A     N/A     N/A    N/A",
    "# nThread 1 nGpus 1", "garbage -1 x", "  12 3", "",
])


@settings(max_examples=60, deadline=None)
@given(st.lists(_LOG_LINES, max_size=12), st.one_of(st.none(), st.sampled_from(["all_reduce", "broadcast"])))
def test_fuzz_logs_give_a_report_or_one_input_error(lines, coll):
    from gpucomm.planners.collectives.predict import build_comparison

    try:
        rep = build_comparison(_h100_doc(), "\n".join(lines), "fuzz.log", collective=coll)
    except InputError as e:
        assert "\n" not in str(e)
        return
    _validate(json.loads(dumps_json(rep)))


def test_one_rank_run_is_one_line(tmp_path):
    """A 1-rank run moves nothing between GPUs: refused in one line (not a division by zero)."""
    log = tmp_path / "r1.log"
    log.write_text(_run_text("all_reduce", 1, [(MiB, 10.0)]), encoding="utf-8")
    r = run_cli("predict", H100, "--compare", log)
    assert r.code == 1 and "1 rank: nothing to predict" in r.stderr and len(r.stderr.strip().splitlines()) == 1
