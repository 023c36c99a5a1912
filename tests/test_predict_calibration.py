"""Calibration of gpucomm.planners.collectives.cost against the real nccl-tests captures in fixtures/captures/nccltests.

For each capture we build the topology of the machine it ran on, predict the same sweep, and report
per row predicted vs measured bus bandwidth (out-of-place columns).  ``calibration_table()`` returns
the printed table ;
``pytest -rA`` shows it in the captured output of ``test_calibration_report``.

The machines (see fixtures/captures/nccltests/SOURCES.md):

* 02 -- 8x RTX A6000 "(PCIe, 2 sockets), 1 node, no NIC involved" (vllm#17348).  SOURCES does not
  mention NVLink bridges, so this is *not* the NV4-bridged A6000 box of topo/31 (another issue,
  vllm#4209); it is modelled as a plain 2-socket PCIe Gen4 x16 box, GPUs on their socket's root
  complexes, split by bus number (< 0x80 socket 0), bus ids and names from the capture's
  "# Using devices" lines.
* 04 -- ALCF Polaris, 2 nodes x 4 A100-SXM4-40GB (HGX A100 4-GPU board: 4 NVLinks between every
  pair), 1 AMD EPYC socket, 2 Slingshot-11 200 Gb/s NICs per node, NCCL 2.18 with no network plugin,
  i.e. NCCL's TCP socket transport: the network is modelled with the per-NIC rate this table itself
  gives at 1 GiB (``support.socket_rate_of_table``, ~37.8 Gb/s, the equivalent of ``--fabric-gbps
  37.8``, what ``gpucomm calibrate`` would fit); the sizes below 1 GiB are predictions.
* 09 -- 1 node x 8 H100 80GB HBM3 (HGX H100: NV18 to every peer through NVSwitch); topology from
  fixtures/hosts/hgx-h100 when present, else the nvidia-smi capture topo/17 (8x H100 80GB HBM3,
  NV18) with the GPU names of the nccl-tests capture.
"""
from __future__ import annotations

import pytest

from gpucomm.planners.collectives import cost
from gpucomm.probes.formats.nccltests import load_nccltests
from support import CASES, MEDIAN_BOUND, NT, _human, calibrate


# The captures a constant was fitted to: their errors show the fit, not the accuracy of predictions.
FITTED = {
    "02_rtxa6000-x8_1node_allreduce.txt": "fitted: PCIE_RING_EFFICIENCY",
    "04_polaris-a100-40gb-x4_2nodes_allreduce_default-tcp.txt": "fitted: its own per-NIC socket rate at 1 GiB",
}


def calibration_table(detail: bool = True) -> str:
    """Markdown: one summary line per capture, then (detail) every row with its error."""
    results = [calibrate(*c) for c in CASES]
    lines = ["| capture | role | ranks | largest size | measured busbw | predicted busbw | error | "
             "median abs err (>= 1 MiB) |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        L = r["largest"]
        role = FITTED.get(r["capture"], "held out (no constant fitted to it)")
        lines.append(f"| {r['capture']} | {role} | {r['n_ranks']} ({r['nodes']} node{'s' if r['nodes'] > 1 else ''}) | "
                     f"{_human(L['size'])} | {L['meas_busbw']:.2f} GB/s | {L['pred_busbw']:.2f} GB/s "
                     f"({L['algo']}) | {L['err_pct']:+.1f}% | {r['median_abs_err_ge_1MiB']:.1f}% |")
    if detail:
        for r in results:
            lines += ["", f"{r['capture']} ({r['collective']}, {r['n_ranks']} ranks)", "",
                      "| size | measured us | predicted us | measured busbw | predicted busbw | error | algo/proto |",
                      "|---|---|---|---|---|---|---|"]
            for x in r["rows"]:
                e = f"{x['err_pct']:+.1f}%" if x["err_pct"] is not None else "n/a"
                lines.append(f"| {_human(x['size'])} | {x['meas_us']:.1f} | {x['pred_us']:.1f} | "
                             f"{x['meas_busbw']:.2f} | {x['pred_busbw']:.2f} | {e} | {x['algo']} |")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def results():
    return {c[0]: calibrate(*c) for c in CASES}


def test_calibration_report(results, capsys):
    # Printed so that `pytest -rA` shows it (captured stdout of a passing test).
    print()
    print(calibration_table())
    assert len(results) == 3


@pytest.mark.parametrize("capture", [c[0] for c in CASES])
def test_largest_size_within_15_percent(results, capture):
    """The goal: within 15% of the measured bus bandwidth at the largest size of every capture."""
    r = results[capture]
    assert abs(r["largest"]["err_pct"]) <= 15.0, r["largest"]


# Median abs error over sizes >= 1 MiB actually achieved (asserted with a little headroom).  The
# Polaris bound is looser: NCCL's socket transport ramps up slowly (time - S/B grows to ~1.7 ms at
# 64 MiB-1 GiB and 50% of the time is overhead at 8 MiB), which NCCL's latency model (~150 us for a
# 2-node ring) does not describe; the error is < 6% from 128 MiB on and ~60-80% at 1-4 MiB.
@pytest.mark.parametrize("capture", [c[0] for c in CASES])
def test_median_error_ge_1MiB(results, capture):
    assert results[capture]["median_abs_err_ge_1MiB"] <= MEDIAN_BOUND[capture]


def test_h100_picks_nvls_and_pcie_box_picks_ring(results):
    """What NCCL runs at large sizes: NVLS on an NVSwitch H100 node (sm90), a ring on the PCIe box
    and on the 2-node socket run (trees lose there in NCCL's own model)."""
    assert results["09_h100-x8_1node_allreduce_cluster01.txt"]["largest"]["algo"] == "nvls/Simple"
    assert results["02_rtxa6000-x8_1node_allreduce.txt"]["largest"]["algo"] == "ring/Simple"
    assert results["04_polaris-a100-40gb-x4_2nodes_allreduce_default-tcp.txt"]["largest"]["algo"] == "ring/Simple"


def test_constants_reproduce_their_fit():
    """The calibrated constants are the measured figure of the capture they were fitted to, divided
    by the model's hardware figure (so a change in either shows up here)."""
    a6000 = load_nccltests(str(NT / "02_rtxa6000-x8_1node_allreduce.txt"))
    assert cost.PCIE_RING_EFFICIENCY == pytest.approx(a6000["rows"][-1]["out_of_place"]["busbw_GBps"] / 24.0, abs=0.002)
    # (the socket transport's one constant, transport.SOCKET_GBPS, is checked against its fit by
    # tests/test_swpath.py::test_shipped_transport_constants_are_the_fit_and_most_tables_pass;
    # capture 04 runs with its own rate, support.socket_rate_of_table)


if __name__ == "__main__":
    print(calibration_table())


# ============================================================================================
# Honest accuracy at scale: the published scaling tables (fixtures/captures/nccltests/scaling),
# every node count predicted from a calibration fitted on the other node counts of the same system
# and environment (tools/crossval.py: the README table comes from the same code).
from support import ROOT  # noqa: E402


def _crossval_module():
    from support import load_script

    return load_script(ROOT / "tools" / "crossval.py", "tools_crossval")


CV = _crossval_module()

# Predicted tables outside the done-when figures (15% at the largest size, 25% median |error| >= 1 MiB),
# each with the reason.  Pinned: a change that fixes one -- or breaks another -- fails
# test_leave_one_node_count_out until this list says so.
KNOWN_MISSES = {
    # measurement: 256 MiB-1 GiB take 10x longer than 2 GiB (busbw 5 GB/s, then 92)
    "069_alps-gh200_32n_all_reduce_cxituned_aws192.txt": "disturbed measurement at 256 MiB-1 GiB",
    # measurement: busbw 7.47 GB/s at 512 MiB, 5.98 at 1 GiB (socket transport at 8 nodes)
    "021_polaris_8n_all_reduce_nccl218_env1.txt": "largest size 20% below the one before",
    # all_to_all loses ~20% more on 8 nodes than on 2 with the OFI plugin: a fit on one node count
    # cannot see it (congestion is fitted only from >= 2 node counts)
    "027_polaris_8n_alltoall_nccl218_env5.txt": "all_to_all congestion unseen by a 2-node fit",
}


@pytest.fixture(scope="module")
def crossval():
    return CV.run_all()


def test_leave_one_node_count_out(crossval, capsys):
    """Done when: every predicted table within 15% at the largest size and 25% median |error| >= 1 MiB.
    Printed (pytest -rA) as the README table; the misses are pinned in KNOWN_MISSES with a reason."""
    print()
    print(CV.markdown(crossval))
    predicted = [r for res in crossval for r in res["predicted"]]
    assert len(predicted) == 50   # Polaris 5 envs x 6, Alps 2 x 6, the H100 cluster 8
    # no figure from data the fit saw: a predicted table's node count is never one the fit used
    assert all(r["nodes"] not in r["fitted_on"] for r in predicted)
    misses = sorted(r["table"] for r in predicted if not CV.passes(r))
    assert misses == sorted(KNOWN_MISSES), misses


def test_alps_extrapolates_from_the_smaller_node_counts():
    """What a user with small runs asks of a large job: each Alps node count (aws-ofi 1.13) predicted
    from a fit on the smaller ones only -- within the done-when figures from 4 nodes on; the fits that
    span 4+ nodes read NCCL 2.23's behaviour (no LL128 across the C2C-attached NICs) from the runs."""
    from gpucomm.planners.collectives import calibrate as cal
    from gpucomm.probes.load import load_topology

    topo = load_topology("example:alps-gh200")
    files = sorted((NT / "scaling").glob("0*_alps-gh200_*n_all_reduce_cxituned_aws1130.txt"))
    runs, _ = cal.runs_from_texts(topo, [(str(f), f.read_text()) for f in files])
    res = cal.cross_validate(cal.Layouts(topo), runs, extrapolate=True)
    ext = res["extrapolated"]
    assert [r["nodes"] for r in ext] == [4, 8, 16, 32]
    assert all(max(r["fitted_on"]) < r["nodes"] for r in ext)
    assert all(CV.passes(r) for r in ext), [(r["table"], r["largest_error_pct"], r["median_abs_error_pct_ge_1MiB"]) for r in ext]
    assert all(p["parameters"]["ll128_c2c"] is False for p in res["profiles"])   # every leave-one-out fit


def test_uncalibrated_tables(crossval):
    """Uncalibrated (the topology alone): where the fabric delivers what its NIC rate says (InfiniBand
    with IB verbs, Slingshot on Alps) the largest size is within 15%; the Polaris/Sirius tables are not
    (the TCP socket transport and the OFI plugin deliver 19% and 73% of the 200 Gb/s the topology shows:
    a calibration's job).  Alps on 2 nodes, where NCCL runs a TREE-pattern tree (busbw 158 GB/s, more
    than the 4 x 25 GB/s a ring can use), is within 15% since the achievable layer stopped applying
    NCCL's 0.85 for that pattern (tuning.py _bus_bw; a rule chosen after looking at these two tables)."""
    unc = {r["table"]: r for res in crossval for r in res["uncalibrated"]}
    assert len(unc) == 66
    assert set(CV.DEFAULTS_FITTED_ON) == {"083_h100ib-c01_2n_all_reduce_g1.txt"}   # NET_EFFICIENCY's capture
    misses = {t for t, r in unc.items() if abs(r["largest_error_pct"]) > CV.LARGEST_PCT}
    slingshot_a100 = {t for t in unc if t.split("_")[1] in ("polaris", "sirius")}
    assert misses - slingshot_a100 == {"097_snellius-h100_1n_reduce_scatter.txt"}, sorted(misses - slingshot_a100)
    # InfiniBand and Alps' Slingshot beyond 2 nodes: the NIC rate x NET_EFFICIENCY holds
    for t in ("052_sophia_2n_all_gather_env1.txt", "084_h100ib-c01_2n_alltoall_g8.txt",
              "068_alps-gh200_32n_all_reduce_cxituned_aws1130.txt", "104_b200-use3a_2n_sendrecv.txt"):
        assert abs(unc[t]["largest_error_pct"]) <= 10.0, unc[t]


def test_fitted_and_predicted_are_reported_apart(crossval):
    """Every table of a multi-node-count group appears once as predicted (fit on the others) and once as
    fitted (the all-in fit's residual); single-node-count groups have no predicted table at all."""
    for res in crossval:
        tables = sorted(r["table"] for r in res["fitted"])
        if len(res["node_counts"]) > 1:
            assert sorted(r["table"] for r in res["predicted"]) == tables
        else:
            assert res["predicted"] == []
