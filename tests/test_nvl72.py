"""The NVL72 rack end to end (issue 27): ``--nvlink-domain K`` on every command that takes ``--nodes``, NCCL's
fused 2-tray dump through rings/trees/predict, and predictions on the GB300 nccl-tests tables
(fixtures/captures/nvl72/006-013, SOURCES.md there).  Nothing is fitted on these tables: NCCL's model and
the example's documented figures only."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from gpucomm.planners.collectives.predict import build_comparison, build_prediction
from gpucomm.probes.formats.nccltests import parse_nccltests
from gpucomm.probes.load import load_topology
from support import CAPTURES, run_cli

NVL = CAPTURES / "nvl72"
FUSED = NVL / "c01_gb300-nvl72_2trays-8gpu_fused-topo-dump_CONSTRUCTED.xml"
GRAPH = NVL / "c02_gb300-nvl72_2trays-8gpu_graph-dump_CONSTRUCTED.xml"

# table -> (trays, the error bound at the largest size).  013 (alltoall across 2 racks over the NICs) is not
# here: its run's fabric delivered about half of what NCCL's rules and the NICs allow (see
# test_alltoall_across_racks_is_bound_by_the_fabric and docs/NVL72.md, "Predictions").
TABLES = {"006": (1, 15), "007": (2, 15), "008": (16, 15), "009": (32, 15),
          "010": (1, 15), "011": (2, 15), "012": (16, 15)}


def _table(key: str):
    return next(NVL.glob(f"{key}_gb300-oci_*.txt"))


@pytest.fixture(scope="module")
def gb300():
    return load_topology("example:gb300-nvl72")


@pytest.mark.parametrize("cmd", [["rings"], ["trees"], ["predict"], ["plan", "--tp", "4"], ["calibrate"],
                                 ["synth"], ["select"]])
def test_nvlink_domain_is_one_flag_validated_on_every_command(cmd):
    extra = {"calibrate": [str(_table("006"))], "select": ["--cluster", "x.yaml"]}.get(cmd[0], [])
    for k, nodes in (("0", "4"), ("3", "4"), ("x", "4")):
        args = cmd[:1] + ["example:gb300-nvl72"] + cmd[1:] + extra + ["--nodes", nodes, "--nvlink-domain", k]
        r = run_cli(*args)
        assert r.code == 2, (args, r.stderr)
        assert "--nvlink-domain" in r.stderr and "No such option" not in r.stderr
    ok = run_cli(*(cmd[:1] + ["example:gb300-nvl72"] + cmd[1:] + extra + ["--nodes", "4", "--nvlink-domain", "2"]))
    assert ok.code != 2, ok.stderr


def test_fused_dump_reads_as_8_gpus_on_2_hosts_everywhere():
    doc = load_topology(str(FUSED))
    assert len(doc["gpus"]) == 8 and len(doc["hosts"]) == 2
    r = run_cli("rings", str(FUSED), "--format", "json")
    assert r.code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["nodes"] == 2 and sorted(out["gpus"]) == list(range(8))
    assert out["nvlink_domain"]["trays_per_system"] == 2
    assert out["total_bw_GBps"] >= 720 - 1e-6 and out["total_bw_GBps"] >= out["nccl_reference"]["total_bw_GBps"]
    t = run_cli("trees", str(FUSED), "--format", "json")
    assert t.code == 0, t.stderr
    assert json.loads(t.stdout)["nranks"] == 8
    p = run_cli("predict", str(FUSED), "--format", "json")     # was: "no GPU 4 in topology (has 0, 0, 1, 1, ...)"
    assert p.code == 0, p.stderr
    pred = json.loads(p.stdout)
    assert pred["n_ranks"] == 8 and pred["graph"]["trays_per_node"] == 2
    # the same GPUs of both hosts
    p2 = run_cli("predict", str(FUSED), "--gpus", "0,1,4,5", "--format", "json")
    assert p2.code == 0 and json.loads(p2.stdout)["n_ranks"] == 4
    assert run_cli("predict", str(FUSED), "--gpus", "0,1,4").code == 1


def test_rings_on_one_tray_as_two_in_one_domain_and_compare_channel_for_channel():
    r = run_cli("rings", "example:gb300-nvl72", "--nodes", "2", "--nvlink-domain", "2", "--format", "json")
    assert r.code == 0, r.stderr
    out = json.loads(r.stdout)
    assert len(out["gpus"]) == 8 and out["total_bw_GBps"] >= 720 - 1e-6
    c = run_cli("rings", str(FUSED), "--compare", str(GRAPH), "--format", "json")
    assert c.code == 0, c.stderr
    m = json.loads(c.stdout)["nccl_graph"]["model"]
    assert m["agrees"] and m["same_channels"] == m["checked"] == 16
    # K = 1: every tray its own system, joined by the NICs -- far less than over NVLink
    one = json.loads(run_cli("rings", "example:gb300-nvl72", "--nodes", "2", "--nvlink-domain", "1",
                             "--format", "json").stdout)
    assert one["nvlink_domain"]["trays_per_system"] == 1 and one["total_bw_GBps"] < 720


@pytest.mark.parametrize("key", sorted(TABLES))
def test_gb300_tables_predicted_within_bound(gb300, key):
    trays, bound = TABLES[key]
    path = _table(key)
    rep = build_comparison(gb300, path.read_text(), str(path), nodes=trays)
    (c,) = rep["comparisons"]
    assert c["n_ranks"] == 4 * trays
    assert c["graph"]["trays_per_node"] * c["nodes"] == trays
    err = c["summary"]["largest"]["error_pct"]
    assert abs(err) <= bound, (key, err)


def test_alltoall_drops_once_traffic_leaves_nvlink(gb300):
    """16 trays (one rack, NVLink) vs 32 trays (2 racks of 16: the NICs between them): measured ~667 -> 48 GB/s."""
    one = build_prediction(gb300, "all_to_all", "16GiB", nodes=16)["rows"][0]["busbw_GBps"]
    two = build_prediction(gb300, "all_to_all", "16GiB", nodes=32, nvlink_domain=16)["rows"][0]["busbw_GBps"]
    assert one > 600 and two < one / 4


def test_alltoall_across_racks_is_bound_by_the_fabric(gb300):
    """013: all_to_all over 2 racks of 16 trays.  NCCL's point-to-point channels leave each tray through the NICs
    local to its GPUs (ncclTopoGetLocalNet: every NIC of the 16 trays, not the 33 its inter-clique rings use),
    so the model predicts what those NICs carry -- more than the run's RoCE fabric between the racks delivered
    (its capacity is in no input: --fabric-gbps, a --cluster fabric or calibrate say it)."""
    path = _table("013")
    rep = build_comparison(gb300, path.read_text(), str(path), nodes=32)
    (c,) = rep["comparisons"]
    assert c["graph"]["trays_per_node"] == 16 and c["nodes"] == 2
    g = c["graph"]
    assert g["p2p_net_bw"] > g["node_net_bw"]          # all the clique's NICs > the rings' NICs
    assert c["summary"]["largest"]["error_pct"] > 15     # an upper bound: the fabric is not modelled


def test_nvlink_domain_one_keeps_trays_apart(gb300):
    fused = build_prediction(gb300, "all_reduce", "1GiB", nodes=2)
    apart = build_prediction(gb300, "all_reduce", "1GiB", nodes=2, nvlink_domain=1)
    assert fused["graph"]["trays_per_node"] == 2 and fused["nodes"] == 1
    assert apart["graph"]["trays_per_node"] == 1 and apart["nodes"] == 2
    assert fused["rows"][0]["busbw_GBps"] > 3 * apart["rows"][0]["busbw_GBps"]


def test_shortened_rank_list_counts_to_the_highest_rank():
    run = parse_nccltests(_table("009").read_text(), str(_table("009")))
    assert run["n_ranks"] == 128 and run["nodes"] is None
    assert any("shortened" in w for w in run["warnings"])


@settings(max_examples=40, deadline=None)
@given(st.sets(st.integers(0, 300), min_size=1, max_size=6))
def test_rank_list_any_subset(ranks):
    lines = ["# Collective test starting: all_reduce_perf", "# Using devices"]
    lines += [f"#  Rank {r:3d} Group  0 Pid 1 on h{r // 4} device {r % 4} [0000:01:00] NVIDIA GB300"
              for r in sorted(ranks)]
    lines += ["#       size         count      type   redop    root     time   algbw   busbw #wrong     time   "
              "algbw   busbw #wrong",
              "  1048576        262144     float     sum      -1   100.0   10.49   15.00      0   100.0   10.49   "
              "15.00      0"]
    run = parse_nccltests("\n".join(lines) + "\n", "t.txt")
    assert run["n_ranks"] == max(ranks) + 1
    assert (run["nodes"] is None) == (len(ranks) < max(ranks) + 1)


def test_synth_writes_nvl72_racks_as_slurm_blocks_and_select_keeps_a_job_in_one(tmp_path):
    r = run_cli("synth", "example:gb300-nvl72", "--nodes", "36", "--nvlink-domain", "18", "--out-dir", str(tmp_path))
    assert r.code == 0, r.stderr
    conf = (tmp_path / "topology.conf").read_text()
    assert "BlockName=nvl01 Nodes=node[01-18]" in conf and "BlockName=nvl02 Nodes=node[19-36]" in conf
    assert "BlockSizes=18" in conf
    s = run_cli("select", "--nodes", "18", "--cluster", str(tmp_path / "cluster.yaml"), "--format", "json")
    assert s.code == 0, s.stderr
    res = s.json()
    assert res["span"]["within"] == "nvlink-domain" and len(res["span"]["nvlink_domains"]) == 1
    # a plain fat tree told its NVLink domains on the command line
    (tmp_path / "t").mkdir()
    assert run_cli("synth", "example:gb300-nvl72", "--nodes", "8", "--fat-tree", "1",
                   "--out-dir", str(tmp_path / "t")).code == 0
    s2 = run_cli("select", "--nodes", "4", "--cluster", str(tmp_path / "t" / "cluster.yaml"), "--nvlink-domain", "4",
                 "--format", "json")
    assert s2.code == 0, s2.stderr
    assert s2.json()["span"]["within"] == "nvlink-domain"
    em = run_cli("plan", "--cluster", str(tmp_path / "cluster.yaml"), "--nodes", "36", "--tp", "4", "--pp", "4",
                 "--emit", "slurm")
    assert em.code == 0 and "#SBATCH --segment=18" in em.stdout


def test_plan_puts_tensor_parallel_across_trays_of_one_nvlink_domain_only():
    r = run_cli("plan", "example:gb300-nvl72", "--nodes", "36", "--tp", "8", "--pp", "2", "--format", "json")
    assert r.code == 0, r.stderr
    plan = r.json()
    assert plan["parallelism"]["tp"] == 8 and plan["nvlink_domain"]["nodes"] == 18
    assert "spans 2 trays" in plan["nvlink_domain"]["note"] and "2 domains" in plan["nvlink_domain"]["note"]
    # every TP group stays inside one domain of 18 consecutive nodes
    gpn = plan["gpus_per_node"]
    for grp in plan["groups"]["tp"]:
        assert len({rank // (gpn * 18) for rank in grp}) == 1
    # 16 GPUs = 4 trays do not tile 18-tray domains; trays kept apart (K = 1) keep TP inside a tray
    assert run_cli("plan", "example:gb300-nvl72", "--nodes", "36", "--tp", "16").code == 4
    assert run_cli("plan", "example:gb300-nvl72", "--nodes", "36", "--tp", "8", "--nvlink-domain", "1").code == 4
    # a node without multi-node NVLink: TP stays inside the node, as before
    assert run_cli("plan", "example:hgx-h100", "--nodes", "2", "--tp", "16").code == 4


def test_calibrate_fits_nvl72_runs(gb300):
    from gpucomm.planners.collectives.calibrate import build_calibration

    texts = [(str(_table(k)), _table(k).read_text()) for k in ("006", "008", "012", "013")]
    cal = build_calibration(gb300, texts, "example:gb300-nvl72")
    assert len(cal["runs"]) == 4
    assert {r["nodes"] for r in cal["runs"]} >= {1, 16, 32}
    # the fit on these four runs is no worse than the defaults on them
    assert cal["residual"]["median_abs_time_error_pct"] < 15


def test_plan_on_a_cluster_of_racks_reads_their_nvlink_domains(tmp_path):
    assert run_cli("synth", "example:gb300-nvl72", "--nodes", "8", "--nvlink-domain", "2",
                   "--out-dir", str(tmp_path)).code == 0
    r = run_cli("plan", "--cluster", str(tmp_path / "cluster.yaml"), "--nodes", "8", "--tp", "8", "--format", "json")
    assert r.code == 0, r.stderr
    assert r.json()["nvlink_domain"]["nodes"] == 2
    # racks of 2 trays: a TP group of 4 trays would leave its domain
    assert run_cli("plan", "--cluster", str(tmp_path / "cluster.yaml"), "--nodes", "8", "--tp", "16").code == 4


def test_tp_across_trays_of_a_domain_is_not_warned_as_pcie():
    """tp=8 on 4-GPU trays of one NVLink domain runs over NVLink: no 'cross PCIe' warning; a node whose
    NVLink domains are pairs still gets it."""
    r = run_cli("plan", "example:gb300-nvl72", "--nodes", "36", "--tp", "8", "--pp", "2", "--format", "json")
    assert r.code == 0, r.stderr
    assert not [w for w in r.json()["warnings"] if "PCIe" in w and "tp" in w], r.json()["warnings"]
    r = run_cli("plan", "example:a100-pcie-4x-nvbridge", "--nodes", "2", "--tp", "4", "--format", "json")
    assert r.code == 0 and any("tp=4 is larger than the NVLink domain (2 GPUs)" in w for w in r.json()["warnings"])


# ---- placement over NVLink domains: where each axis's groups lie (issue 27, item 5)
from gpucomm.planners.plan import build_full_plan  # noqa: E402


def _domains_of(group, gpn, dn):
    return {(r // gpn) // dn for r in group}


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([(36, 18), (32, 16), (32, 8), (12, 6), (8, 4)]),
       st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4, 8]))
def test_group_tiers_say_truthfully_which_groups_stay_in_a_domain(gb300, shape, tp, cp):
    nodes, dn = shape
    try:
        plan = build_full_plan(gb300, nodes=nodes, nvlink_domain=dn, tp=tp, cp=cp, pp=1)
    except Exception as e:            # a layout Megatron cannot build is refused with one line
        assert type(e).__name__ in ("PlanInfeasible", "InputError"), e
        return
    gpn = plan["gpus_per_node"]
    for axis in ("tp", "cp", "dp"):
        tier, groups = plan["tiers"][axis], plan["groups"][axis]
        if tier["size"] <= 1 or tier["nodes"] <= 1:
            continue
        worst = max(len(_domains_of(g, gpn, dn)) for g in groups)
        assert tier["domains"] == worst, (axis, tier)
        assert tier["groups_crossing_domains"] == sum(len(_domains_of(g, gpn, dn)) > 1 for g in groups)
        assert tier["where"] == ("nvlink" if worst == 1 else "network"), (axis, tier)
    crossing = [a for a in ("tp", "cp") if plan["tiers"][a].get("domains", 1) > 1]
    note = (plan.get("nvlink_domain") or {}).get("note") or ""
    for a in crossing:
        assert any(w.startswith(f"{a}=") and "cross an NVLink domain boundary" in w for w in plan["warnings"])
        assert f"{a}={plan['parallelism'][a]} (" in note       # named as crossing, not as staying inside


def test_cp_groups_that_straddle_racks_are_named_and_timed_over_the_nics(gb300):
    # 18-tray racks, cp groups of 4 trays (16 ranks with tp=4): 18/4 is not whole, some groups straddle
    plan = build_full_plan(gb300, nodes=36, nvlink_domain=18, tp=4, cp=4, pp=1)
    cp = plan["tiers"]["cp"]
    assert cp["domains"] == 2 and cp["where"] == "network" and cp["groups_crossing_domains"] > 0
    # 16-tray domains: every cp group of 4 trays stays inside one, on NVLink
    ok = build_full_plan(gb300, nodes=32, nvlink_domain=16, tp=4, cp=4, pp=1)["tiers"]["cp"]
    assert ok["domains"] == 1 and ok["where"] == "nvlink" and ok["intra_GBps"] > 700
    traffic = build_full_plan(gb300, nodes=32, nvlink_domain=16, tp=4, cp=4, pp=2)["traffic"]["by_level"]
    assert traffic["nvlink"]["edges"] > 0 and traffic["network"]["edges"] > 0


def test_model_estimate_times_groups_across_racks_over_the_nics(gb300):
    plan = build_full_plan(gb300, nodes=32, nvlink_domain=16, tp=8, pp=2, model="llama-405b")
    comm = plan["estimate"]["comm"]
    assert comm["tp"]["where"] == "nvlink" and comm["pp"]["where"] == "network"
    # the pp pair (one tray in each rack) is not fused into one NVLink system: slower than the same
    # send_recv between two trays of one rack
    from gpucomm.planners.placement.models import layout_cost
    from gpucomm.planners.placement.nodeview import node_view
    view = node_view(gb300)
    lc = layout_cost(view)
    size = comm["pp"]["message_bytes"]
    apart, together = lc.seconds("send_recv", size, [0], 2, domain=1), lc.seconds("send_recv", size, [0], 2, domain=2)
    assert apart > 2 * together


def test_fabric_congestion_counts_the_trays_on_the_fabric(gb300):
    """A calibrated congestion grows with the hosts the fabric sees: 2 cliques of 16 trays are 32 hosts on it,
    not 2 (NCCL's systems)."""
    from gpucomm.planners.collectives import cost, timing

    prof = timing.Profile(congestion=0.1)
    base = cost.summarize(gb300, nodes=32, nvlink_domain=16)
    cong = cost.summarize(gb300, nodes=32, nvlink_domain=16, profile=prof)
    assert base.n_nodes == 2 and base.trays_per_node == 16
    assert cong.node_net_bw == pytest.approx(base.node_net_bw / (1 + 0.1 * 4), rel=1e-6)   # log2(32 / 2) = 4


def test_model_ranking_over_racks_times_groups_that_straddle_them(gb300):
    """--model ranks candidates whose groups straddle two 18-tray racks unevenly (e.g. 9 trays, 4 + 5): each
    is timed as NCCL would split it (equal systems), not refused."""
    plan = build_full_plan(gb300, nodes=36, nvlink_domain=18, ep=16,
                           model="layers=32,hidden=4096,heads=32,experts=64,topk=8")
    assert plan["estimate"]["step_time_s"] > 0 and plan["candidates"]
    for axis, c in plan["estimate"]["comm"].items():
        assert c["time_s"] >= 0, axis
