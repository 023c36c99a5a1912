"""``gpucomm plan`` end to end, and the model side (presets, --model parsing, volumes, memory,
ranking of factorizations)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucomm import planners
from support import run_cli
from gpucomm.planners.plan import build_full_plan
from gpucomm.planners.placement import models as ms
from gpucomm.planners.placement import layout as pl
from gpucomm.planners.placement import nodeview as pview
from gpucomm.planners.placement import ranks as pranks
from gpucomm.probes.errors import InputError, PlanInfeasible
from support import hgx_doc

SCHEMA = json.loads((Path(planners.__file__).parent / "schema" / "plan.schema.json").read_text())


@pytest.fixture(scope="module")
def hgx_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("topo") / "hgx.json"
    p.write_text(json.dumps(hgx_doc()))
    return str(p)


def _example(name):
    from gpucomm.probes.examples import list_examples

    return f"example:{name}" if name in list_examples() else None


# --------------------------------------------------------------------------------------------
def test_slurm_emit_is_submit_ready(hgx_file, tmp_path):
    topo = _example("hgx-h100") or hgx_file
    r = run_cli("plan", topo, "--nodes", "2", "--tp", "8", "--pp", "2", "--emit", "slurm")
    assert r.code == 0, r.stderr
    s = r.stdout
    assert s.startswith("#!/bin/bash\n#SBATCH ")
    for opt in ("--nodes=2", "--ntasks-per-node=8", "--gpus-per-node=8", "--exclusive"):
        assert f"#SBATCH {opt}\n" in s
    assert "srun " in s and "--gpu-bind=none" in s and "--cpu-bind=verbose,mask_cpu:" in s
    f = tmp_path / "job.sh"
    f.write_text(s)
    assert subprocess.run(["bash", "-n", str(f)], capture_output=True, timeout=30).returncode == 0
    if shutil.which("sbatch"):
        conf = tmp_path / "slurm.conf"
        conf.write_text("ClusterName=t\nSlurmctldHost=localhost\nSlurmctldPort=6999\nMessageTimeout=1\n"
                        "SelectType=select/cons_tres\nGresTypes=gpu\nNodeName=n[1-2] CPUs=224 Gres=gpu:8\n"
                        "PartitionName=p Nodes=n[1-2] Default=YES\n")
        import os

        out = subprocess.run(["sbatch", "--test-only", str(f)], capture_output=True, text=True, timeout=60,
                             env=dict(os.environ, SLURM_CONF=str(conf)))
        assert "Unable to contact slurm controller" in out.stderr, out.stderr


def test_json_emit_validates_and_is_deterministic(hgx_file):
    jsonschema = pytest.importorskip("jsonschema")
    topo = _example("hgx-h100") or hgx_file
    a = run_cli("plan", topo, "--nodes", "2", "--tp", "8", "--pp", "2", "--emit", "json")
    b = run_cli("plan", topo, "--nodes", "2", "--tp", "8", "--pp", "2", "--emit", "json")
    assert a.code == 0 and a.stdout == b.stdout
    doc = json.loads(a.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert doc["schema"] == "gpucomm.plan/v1" and doc["world_size"] == 16
    assert set(doc["launch"]) >= {"torchrun", "slurm", "rankfile", "wrapper"}
    c = run_cli("plan", topo, "--nodes", "2", "--tp", "8", "--pp", "2", "--format", "json")
    assert c.stdout == a.stdout
    assert pl.check_plan_invariants(doc) == []


@pytest.mark.parametrize("emit,needle", [("torchrun", "exec torchrun --nnodes=2"), ("rankfile", "rank 15=+n1 slot="),
                                         ("env", "export NCCL_IB_HCA='="), ("wrapper", 'exec "$@"')])
def test_other_emits(hgx_file, emit, needle):
    r = run_cli("plan", hgx_file, "--nodes", "2", "--tp", "8", "--emit", emit)
    assert r.code == 0 and needle in r.stdout, r.stdout[-500:]


def test_table_output(hgx_file):
    r = run_cli("plan", hgx_file, "--nodes", "2", "--tp", "8", "--pp", "2", "--model", "llama-8b")
    assert r.code == 0, r.stderr
    for part in ("Local ranks", "Groups", "Estimate per step", "Environment", "NCCL_IB_HCA", "init_device_mesh"):
        assert part in r.stdout


def test_output_file(hgx_file, tmp_path):
    out = tmp_path / "plan.json"
    r = run_cli("plan", hgx_file, "--tp", "8", "--emit", "json", "-o", str(out))
    assert r.code == 0 and r.stdout == "" and json.loads(out.read_text())["world_size"] == 8


@pytest.mark.parametrize("args,code,msg", [
    (["--tp", "3"], 4, "tp=3 does not divide 8 GPUs per node"),
    (["--tp", "8", "--dp", "3"], 4, "tp*cp*dp*pp = 24"),
    (["--model", "llama-405b", "--tp", "8", "--pp", "1", "--dp", "1"], 4, "does not fit on 8 GPUs: as tp=8"),
    (["--model", "llama-405b", "--tp", "8", "--pp", "1", "--dp", "1", "--force"], 0, "--force: llama-405b does not fit"),
    (["--model", "llama-405b"], 4, "does not fit on 8 GPUs"),
    (["--model", "layers=80,hidden=x"], 1, "hidden='x' is not a number"),
    (["--model", "gpt-9"], 1, "neither a preset"),
    (["--order", "tp-zz"], 1, "unknown axis"),
    (["--emit", "docx"], 2, "'docx' is not one of"),
    (["--gpus", "0,9"], 4, "GPU index 9"),
    (["--gpus-per-node", "9"], 4, "9 GPUs per node"),
    (["--tp", "0"], 2, "Invalid value for '--tp': 0 is not in the range x>=1"),
    (["--hosts", "a[1-"], 1, "--hosts"),
    (["--hosts", "a,b", "--nodes", "3", "--tp", "8"], 1, "names 2 distinct host(s) for 3"),
])
def test_errors(hgx_file, args, code, msg):
    r = run_cli("plan", hgx_file, *args)
    assert r.code == code, (r.code, r.stderr)
    assert msg in r.stderr and "Traceback" not in r.stderr


def test_nothing_to_do_without_gpus_or_topology(tmp_path):
    from gpucomm.probes.model import new_document

    p = tmp_path / "empty.json"
    p.write_text(json.dumps(new_document("json")))
    r = run_cli("plan", str(p), "--tp", "1")
    assert r.code == 3 and "no GPUs" in r.stderr
    r = run_cli("plan", "--tp", "1")
    assert r.code == 2 and "give a topology" in r.stderr   # plan never probes this node by itself


def test_gpus_per_node_picks_a_numa_local_set(hgx_file):
    r = run_cli("plan", hgx_file, "--gpus-per-node", "4", "--tp", "4", "--format", "json")
    assert r.code == 0, r.stderr
    p = r.json()
    assert [lr["gpu"] for lr in p["local_ranks"]] == [0, 1, 2, 3]
    assert p["env"]["CUDA_VISIBLE_DEVICES"]["value"] == "0,1,2,3"
    assert {lr["numa_node"] for lr in p["local_ranks"]} == {0}
    # the 4 ranks split NUMA node 0's 56 cores: 14 each
    assert p["local_ranks"][1]["cpus"] == "14-27,126-139"


# --------------------------------------------------------------------------------------------
# Model side
def test_presets_and_parsing():
    m = ms.parse_model_spec("llama-70b,seq=4096,gbs=256")
    assert (m["layers"], m["hidden"], m["heads"], m["kv_heads"], m["ffn"]) == (80, 8192, 64, 8, 28672)
    assert m["seq"] == 4096 and m["gbs"] == 256 and m["name"] == "llama-70b"
    c = ms.parse_model_spec("layers=80,hidden=8192,heads=64,seq=8192,mbs=1,dtype=bf16,params=70e9")
    assert c["params"] == 70e9 and c["name"] == "custom"
    # params counted when not given: the Llama-3 70B shape is within 1% of Meta's 70.6B
    d = ms.parse_model_spec("layers=80,hidden=8192,heads=64,kv_heads=8,ffn=28672,vocab=128256")
    assert abs(d["params"] / 70.6e9 - 1) < 0.01
    assert ms.parse_model_spec(None) is None


@settings(max_examples=80, deadline=None)
@given(st.text(alphabet="layershidn=0123456789.,e-+_xbf", max_size=40))
def test_model_spec_parser_only_raises_input_error(text):
    try:
        m = ms.parse_model_spec(text)
    except InputError:
        return
    assert m["layers"] > 0 and m["hidden"] > 0 and m["params"] > 0


def test_memory_matches_megatron_estimator():
    m = ms.parse_model_spec("layers=10,hidden=1000,heads=10,ffn=4000,params=1e9,seq=100,mbs=2,zero=0")
    axes = {"tp": 2, "pp": 1, "dp": 4, "cp": 1, "ep": 1}
    mem = ms.memory_per_gpu(m, axes)
    # pp=1: the one stage holds every layer and both (untied) embeddings -> params / t
    assert mem["bytes_per_param"] == 18 and mem["weights_optimizer"] == pytest.approx(1e9 / 2 * 18)
    # activations s*b*h*(18 + 4*ffn/h)/t per layer, l layers in flight on the first stage, plus the
    # embedding input (8sbp) and dropout (sbhp) and, with pp=1, the output layer + loss 4sbh(1+V/h)
    s, b, h, v = 100, 2, 1000, 32000
    assert mem["activations"] == pytest.approx(
        (s * b * h * (18 + 16) * 10 + 8 * s * b + s * b * h + 4 * s * b * h * (1 + v / h)) / 2)
    m1 = dict(m, zero=1)
    assert ms.memory_per_gpu(m1, axes)["bytes_per_param"] == pytest.approx(6 + 12 / 4)


def _megatron_theoretical_memory(L, h, ffn, V, params, s, b, t, p, dp, m, distributed_optimizer):
    """megatron/training/theoretical_memory_usage.py (compute_weight_and_optimizer_memory and
    compute_activation_memory, untied embeddings, no interleaving), in its own variable names."""
    embedding_size = h * V
    num_parameters_in_transformer_layers = params - 2 * embedding_size
    most_loaded = (num_parameters_in_transformer_layers / p + embedding_size) / t
    if p == 1:
        most_loaded += embedding_size / t
    num_bytes_per_parameter = 18 if not distributed_optimizer else 6 + (12 / dp)
    weight_and_optimizer_memory = most_loaded * num_bytes_per_parameter
    activation_memory = (s * b * h) * (18 + (4 * (ffn / h)))
    activation_memory *= L
    activation_memory += 8 * s * b * p
    activation_memory += s * b * h * p
    if p > 1:
        activation_memory *= min(1, m / p)
    if p == 1:
        activation_memory += s * b * h * 4 * (1 + (V / h))
    return weight_and_optimizer_memory, activation_memory / t


def test_memory_most_loaded_stage_holds_the_embedding():
    """Regression: weights were params/(t*p), an average; Megatron's estimator sizes the first
    stage, which also holds the 128256x8192 input embedding (llama-70b, tp=8 pp=4: 38.1 GiB of
    weights+optimizer, not 37.0), and discounts activations when m < p."""
    m = ms.parse_model_spec("llama-70b")
    for (t, p, d, mb, zero) in ((8, 4, 1, 1024, 1), (4, 8, 2, 3, 0), (8, 1, 4, 256, 1), (2, 16, 1, 8, 1)):
        axes = {"tp": t, "pp": p, "dp": d, "cp": 1, "ep": 1}
        got = ms.memory_per_gpu(dict(m, zero=zero), axes, mb)
        w, a = _megatron_theoretical_memory(80, 8192, 28672, 128256, 70.6e9, 8192, 1, t, p, d, mb, zero == 1)
        assert got["weights_optimizer"] == pytest.approx(w, rel=1e-9)
        assert got["activations"] == pytest.approx(a, rel=1e-9)
    got = ms.memory_per_gpu(m, {"tp": 8, "pp": 4, "dp": 1, "cp": 1, "ep": 1}, 1024)
    assert got["weights_optimizer"] / 2**30 == pytest.approx(38.08, abs=0.01)
    # fewer micro-batches than stages in flight: activations shrink by m/p
    few = ms.memory_per_gpu(m, {"tp": 4, "pp": 8, "dp": 1, "cp": 1, "ep": 1}, 2)
    many = ms.memory_per_gpu(m, {"tp": 4, "pp": 8, "dp": 1, "cp": 1, "ep": 1}, 64)
    assert few["activations"] == pytest.approx(many["activations"] * 2 / 8)


def test_volumes_and_bubble():
    doc = hgx_doc()
    v = pview.node_view(doc)
    m = ms.parse_model_spec("llama-8b,gbs=64,seq=4096")
    axes = {"tp": 8, "pp": 2, "dp": 1, "cp": 1, "ep": 1}
    lay = pl.make_layout(v, 2, 8, axes)
    est = ms.step_estimate(m, lay)
    b, s, h, l, g = 1, 4096, 4096, 32, 2
    mm = 64
    tp = est["comm"]["tp"]
    assert tp["count"] == 4 * (l // 2) * mm and tp["message_bytes"] == b * s * h * g
    # 8*b*s*h*(t-1)/t*g per layer per micro-batch per GPU (Narayanan 2021)
    assert tp["bytes_per_gpu"] == pytest.approx(8 * b * s * h * 7 / 8 * g * (l // 2) * mm, rel=1e-6)
    assert tp["where"] == "nvlink" and est["comm"]["pp"]["where"] == "network"
    assert est["comm"]["pp"]["message_bytes"] == b * s * h * g // 8 and est["comm"]["pp"]["count"] == 2 * mm
    assert est["bubble_fraction"] == pytest.approx((2 - 1) / mm)
    assert est["memory"]["fits"] is True and est["step_time_s"] > est["comm_s"] > 0
    # TP inside NVLink is timed far faster per byte than PP over one NIC
    per_byte_tp = tp["time_s"] / tp["bytes_per_gpu"]
    per_byte_pp = est["comm"]["pp"]["time_s"] / est["comm"]["pp"]["bytes_per_gpu"]
    assert per_byte_tp < per_byte_pp / 3


def test_plan_times_collectives_with_predicts_model():
    """One cost model: every collective of a ``plan --model`` estimate is what ``gpucomm predict``
    says for its group (the group's GPUs on its number of nodes, the size, the element size) -- inside
    a node and across nodes, uncalibrated and under a calibration profile.  (plan had an alpha-beta
    model of its own with its own NCCL latencies and a 0.9 network efficiency; it ranked layouts.)"""
    from gpucomm.planners.collectives import cost, timing
    from gpucomm.planners.collectives.predict import build_prediction

    v = pl.node_view(hgx_doc())
    lay = pl.make_layout(v, 4, 8, {"tp": 4, "pp": 2, "dp": 4, "cp": 1, "ep": 1})
    seen = set()
    for axis, coll in (("tp", "all_reduce"), ("dp", "all_reduce"), ("pp", "send_recv")):
        tier = lay.axis_tier(axis)
        got = ms.collective_time(coll, 1 << 26, tier, v, 2)
        want = build_prediction(v.topo, coll, str(1 << 26), nodes=tier["nodes"], gpus=tier["gpus"], dtype="half")
        assert got == pytest.approx(want["rows"][0]["time_us"] * 1e-6, rel=1e-12) and got > 0
        seen.add(tier["nodes"] > 1)
    assert seen == {False, True}
    prof = timing.Profile(net_gbps_per_nic=100.0, latency_scale=2.0)
    ms.use_calibration(v, prof, "prof.json")
    tier = lay.axis_tier("dp")
    got = ms.collective_time("all_reduce", 1 << 26, tier, v, 2)
    g = cost.summarize(v.topo, nodes=tier["nodes"], gpus=tier["gpus"], profile=prof)
    assert got == cost.predict(g, "all_reduce", [1 << 26], dtype_bytes=2, profile=prof)[0]["time_us"] * 1e-6
    assert "calibrated by prof.json" in ms.step_estimate(ms.parse_model_spec("llama-8b"), lay)["cost_model"]
    # the transport (plan --transport, predict --transport): the same times for the same choice
    from gpucomm.planners.collectives import transport as tr

    v2 = pl.node_view(hgx_doc())
    for name in ("socket", "ib-nogdr"):
        ms.use_cost_options(v2, transport=tr.parse(name))
        got = ms.collective_time("all_reduce", 1 << 26, tier, v2, 2)
        want = build_prediction(v2.topo, "all_reduce", str(1 << 26), nodes=tier["nodes"], gpus=tier["gpus"],
                                dtype="half", transport=name)
        assert got == pytest.approx(want["rows"][0]["time_us"] * 1e-6, rel=1e-12), name
    # a choice predict takes as an option of summarize reaches plan's times as the same option
    ms.use_cost_options(v, fabric_gbps=25.0)
    got = ms.collective_time("all_reduce", 1 << 26, tier, v, 2)
    g = cost.summarize(v.topo, nodes=tier["nodes"], gpus=tier["gpus"], profile=prof, fabric_gbps=25.0)
    assert got == cost.predict(g, "all_reduce", [1 << 26], dtype_bytes=2, profile=prof)[0]["time_us"] * 1e-6


def test_no_network_device_means_nccls_socket_default():
    """A topology without any NIC, planned across nodes: NCCL's socket transport on its one 10 Gb/s
    interface (facts.SOCKET_NIC_GBPS, what predict --fabric-gbps 10 says), named -- not plan's old
    12.5 GB/s (100 Gb/s) fallback."""
    from gpucomm.planners.collectives.predict import build_prediction
    from gpucomm.probes import facts

    doc = hgx_doc(nics=False)
    plan = build_full_plan(doc, nodes=2, tp=8, model="llama-8b,gbs=64")
    assert facts.assumption("no-nic") in plan["warnings"]
    dp = plan["estimate"]["comm"]["dp"]
    tier = {"size": 2, "gpus": [0], "nodes": 2}
    want = build_prediction(doc, "all_reduce", str(dp["message_bytes"]), nodes=2, gpus=[0], dtype="half",
                            fabric_gbps=facts.SOCKET_NIC_GBPS)
    assert dp["time_s"] == pytest.approx(want["rows"][0]["time_us"] * 1e-6 * dp["count"], rel=1e-5)
    v = pl.node_view(doc)
    assert ms.collective_time("all_reduce", dp["message_bytes"], tier, v, 2) == want["rows"][0]["time_us"] * 1e-6


@pytest.mark.parametrize("nodes,model,top", [(8, "llama-70b", 3), (4, "llama-8b,gbs=256", 2), (16, "llama-70b", 5)])
def test_ranking_stops_timing_only_what_cannot_rank(nodes, model, top):
    """The ranking times a candidate only until it cannot be among the first ``top``; the answer is
    the one timing every candidate fully gives (here: asking for all of them)."""
    v = pl.node_view(hgx_doc())
    m = ms.parse_model_spec(model)
    everything = ms.rank_factorizations(v, nodes, 8, m, pl.DEFAULT_ORDER, top=10_000)
    assert len(everything) > top
    v2 = pl.node_view(hgx_doc())
    first = ms.rank_factorizations(v2, nodes, 8, m, pl.DEFAULT_ORDER, top=top)
    assert [(r["parallelism"], r["estimate"]) for r in first] == [(r["parallelism"], r["estimate"])
                                                                  for r in everything[:top]]
    times = [r["estimate"]["step_time_s"] for r in everything if r["estimate"]["memory"]["fits"]]
    assert times == sorted(times)


def test_ranking_llama70b_on_64_gpus():
    v = pview.node_view(hgx_doc())
    m = ms.parse_model_spec("llama-70b")
    assert len(ms.candidate_axes(m, 64, 8, {})) > 20
    rows = ms.rank_factorizations(v, 8, 8, m, pranks.DEFAULT_ORDER, top=4)
    assert len(rows) == 4 and all(r["estimate"]["memory"]["fits"] for r in rows)
    times = [r["estimate"]["step_time_s"] for r in rows]
    assert times == sorted(times)
    assert all(r["estimate"]["cost_model"].startswith("gpucomm predict") for r in rows)
    for r in rows:
        p = r["parallelism"]
        assert p["tp"] * p["pp"] * p["dp"] * p["cp"] * p["ep"] == 64 and 8 % p["tp"] == 0 and 80 % p["pp"] == 0
    # pure DP of a 70B model does not fit in 80 GiB
    lay = pl.make_layout(v, 8, 8, {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "dp": 64})
    assert ms.step_estimate(m, lay)["memory"]["fits"] is False


def test_ranking_through_the_cli(hgx_file):
    r = run_cli("plan", hgx_file, "--nodes", "8", "--model", "llama-70b", "--top", "3", "--format", "json")
    assert r.code == 0, r.stderr
    p = r.json()
    assert len(p["candidates"]) == 3 and p["candidates"][0]["rank"] == 1
    best = p["candidates"][0]["parallelism"]
    assert {k: p["parallelism"][k] for k in ("tp", "cp", "ep", "dp", "pp")} == {k: best[k] for k in ("tp", "cp", "ep", "dp", "pp")}
    assert p["estimate"]["step_time_s"] == p["candidates"][0]["step_time_s"]
    # with an axis given, the layout is the user's: one estimate, no ranking
    r = run_cli("plan", hgx_file, "--nodes", "8", "--model", "llama-70b", "--tp", "8", "--pp", "4", "--format", "json")
    assert r.code == 0 and r.json()["candidates"] is None and r.json()["parallelism"]["dp"] == 2
    assert r.json()["estimate"]["memory"]["fits"] is True


def test_uneven_pipeline_stages_for_405b():
    v = pview.node_view(hgx_doc())
    m = ms.parse_model_spec("llama-405b,gbs=2048")
    rows = ms.rank_factorizations(v, 64, 8, m, pranks.DEFAULT_ORDER, {"tp": 8, "pp": 16})
    assert rows and all(r["parallelism"]["pp"] == 16 for r in rows)
    assert any("uneven stages" in a for a in rows[0]["estimate"]["assumptions"])
    with pytest.raises(PlanInfeasible, match="does not fit"):
        ms.rank_factorizations(v, 1, 8, m, pranks.DEFAULT_ORDER)


@pytest.mark.slow   # NCCL's search in Python on 2-node GPU subsets: tens of seconds
def test_moe_needs_experts_for_ep():
    v = pview.node_view(hgx_doc())
    m = ms.parse_model_spec("layers=16,hidden=4096,heads=32,experts=8,topk=2,ffn=14336,gbs=64")
    assert any(a["ep"] > 1 for a in ms.candidate_axes(m, 16, 8, {}))
    rows = ms.rank_factorizations(v, 2, 8, m, pranks.DEFAULT_ORDER, {"ep": 4}, top=2)
    # Megatron: ep comes out of dp*cp (the world is tp*cp*dp*pp), and cp may be > 1 beside ep.
    assert rows and all(r["parallelism"]["ep"] == 4 for r in rows)
    assert all((p["tp"] * p["cp"] * p["dp"] * p["pp"], (p["dp"] * p["cp"] * p["tp"]) % (p["ep"] * p["etp"]))
               == (16, 0) for p in (r["parallelism"] for r in rows))
    assert rows[0]["estimate"]["comm"]["ep"]["collective"] == "all_to_all"
    dense = ms.parse_model_spec("llama-8b")
    assert all(a["ep"] == 1 for a in ms.candidate_axes(dense, 16, 8, {}))
    with pytest.raises(InputError):
        ms.parse_model_spec("llama-8b,experts=4,topk=9")


def test_build_full_plan_fixture_hosts():
    from gpucomm.probes.examples import list_examples
    from gpucomm.probes.load import load_topology

    for name in ("hgx-h100", "dgx-a100", "gb200-tray", "dgx1-v100"):
        if name not in list_examples():
            continue
        doc = load_topology(f"example:{name}")
        gpn = len(doc["gpus"])
        p = build_full_plan(doc, nodes=2, tp=gpn if gpn <= 8 else 8, model="llama-8b,gbs=64")
        assert pl.check_plan_invariants(p) == []
        assert p["estimate"]["memory"]["fits"] in (True, None)
        assert all(v["reason"] for v in p["env"].values())


def test_405b_without_axes_falls_back_to_uneven_pipelines():
    """Regression: `plan --model llama-405b` on 512 (or 8192) GPUs said "does not fit": 126 layers
    and a power-of-two GPU count leave only pp = 1 or 2 when pp must divide the layers, and the
    6 bytes/param that the distributed optimizer does not shard need a deep pipeline.  Llama 3
    405B trains on pp=16 with uneven stages; the ranking now tries those when nothing else fits."""
    v = pview.node_view(hgx_doc())
    m = ms.parse_model_spec("llama-405b")
    even = ms.candidate_axes(m, 512, 8, {})
    assert {a["pp"] for a in even} <= {1, 2}
    rows = ms.rank_factorizations(v, 64, 8, m, pranks.DEFAULT_ORDER, top=1)
    best = rows[0]
    assert best["estimate"]["memory"]["fits"] is True and 126 % best["parallelism"]["pp"]
    assert any("uneven stages" in a for a in best["estimate"]["assumptions"])


def test_uneven_stages_cost_compute_and_memory():
    """The slowest (ceil(l/p)-layer) stage sets the pace and the memory: 10 layers on pp=4 run at
    12/10 of the balanced compute time, and the first stage holds 3 layers' weights, not 2.5."""
    m = ms.parse_model_spec("layers=10,hidden=4096,heads=32,ffn=14336,vocab=1000,gbs=64,zero=0")
    v = pview.node_view(hgx_doc())
    est = {}
    for pp in (2, 4):
        lay = pl.make_layout(v, 1, 8, {"tp": 2, "pp": pp, "dp": 8 // (2 * pp), "cp": 1, "ep": 1})
        est[pp] = ms.step_estimate(m, lay)
    per_gpu = {pp: est[pp]["compute_s"] * 8 for pp in est}   # same world size: compare directly
    assert per_gpu[4] / per_gpu[2] == pytest.approx(12 / 10, rel=1e-4)
    mem = ms.memory_per_gpu(m, {"tp": 1, "pp": 4, "dp": 1, "cp": 1, "ep": 1}, 64)
    transformer = m["params"] - 2 * 1000 * 4096
    assert mem["params_on_gpu"] == pytest.approx(transformer * 3 / 10 + 1000 * 4096)
