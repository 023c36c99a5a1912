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

import planners
from conftest import run_cli
from gpucomm_cli.cmd_plan import build_full_plan
from planners import model_specs as ms
from planners import placement as pl
from probes.errors import InputError, PlanInfeasible
from test_placement import hgx_doc

SCHEMA = json.loads((Path(planners.__file__).parent / "schema" / "plan.schema.json").read_text())


@pytest.fixture(scope="module")
def hgx_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("topo") / "hgx.json"
    p.write_text(json.dumps(hgx_doc()))
    return str(p)


def _example(name):
    from probes.examples import list_examples

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
    (["--tp", "8", "--dp", "3"], 4, "tp*cp*ep*dp*pp = 24"),
    (["--model", "llama-405b", "--tp", "8", "--pp", "1", "--dp", "1"], 0, "needs about"),
    (["--model", "llama-405b"], 4, "does not fit on 8 GPUs"),
    (["--model", "layers=80,hidden=x"], 1, "hidden='x' is not a number"),
    (["--model", "gpt-9"], 1, "neither a preset"),
    (["--order", "tp-zz"], 1, "unknown axis"),
    (["--emit", "docx"], 1, "--emit docx"),
    (["--gpus", "0,9"], 4, "GPU index 9"),
    (["--gpus-per-node", "9"], 4, "9 GPUs per node"),
    (["--tp", "0"], 1, "--tp 0"),
    (["--hosts", "a[1-"], 1, "--hosts"),
    (["--hosts", "a,b", "--nodes", "3", "--tp", "8"], 1, "names 2 distinct host(s) for 3"),
])
def test_errors(hgx_file, args, code, msg):
    r = run_cli("plan", hgx_file, *args)
    assert r.code == code, (r.code, r.stderr)
    assert msg in r.stderr and "Traceback" not in r.stderr


def test_nothing_to_do_without_gpus_or_topology(tmp_path):
    from probes.model import new_document

    p = tmp_path / "empty.json"
    p.write_text(json.dumps(new_document("json")))
    r = run_cli("plan", str(p), "--tp", "1")
    assert r.code == 3 and "no GPUs" in r.stderr
    r = run_cli("plan", "--tp", "1")
    assert r.code == 1


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
    assert mem["bytes_per_param"] == 18 and mem["weights_optimizer"] == pytest.approx(1e9 / 2 * 18)
    # activations s*b*h*(18 + 4*ffn/h)/t per layer, l layers in flight on the first stage
    assert mem["activations"] == pytest.approx(100 * 2 * 1000 * (18 + 16) / 2 * 10)
    m1 = dict(m, zero=1)
    assert ms.memory_per_gpu(m1, axes)["bytes_per_param"] == pytest.approx(6 + 12 / 4)


def test_volumes_and_bubble():
    doc = hgx_doc()
    v = pl.node_view(doc)
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


def test_collective_time_alpha_beta_fallback():
    tier = {"size": 8, "gpus": [], "ranks_per_node": 8, "nodes": 1, "intra_GBps": 100.0, "inter_GBps": None,
            "where": "nvlink"}
    t = ms.collective_time("all_reduce", 1e9, tier)
    assert t == pytest.approx((8.4 + 14 * 3.4) * 1e-6 + 1e9 * 2 * 7 / 8 / 100e9)
    net = dict(tier, nodes=4, ranks_per_node=2, inter_GBps=50.0)
    assert ms.collective_time("all_reduce", 1e9, net) > t


def test_ranking_llama70b_on_64_gpus():
    v = pl.node_view(hgx_doc())
    m = ms.parse_model_spec("llama-70b")
    assert len(ms.candidate_axes(m, 64, 8, {})) > 20
    rows = ms.rank_factorizations(v, 8, 8, m, pl.DEFAULT_ORDER, top=4)
    assert len(rows) == 4 and all(r["estimate"]["memory"]["fits"] for r in rows)
    times = [r["estimate"]["step_time_s"] for r in rows]
    assert times == sorted(times)
    assert all(r["estimate"]["cost_model"].startswith("planners.cost") for r in rows)
    for r in rows:
        p = r["parallelism"]
        assert p["tp"] * p["pp"] * p["dp"] * p["cp"] * p["ep"] == 64 and 8 % p["tp"] == 0 and 80 % p["pp"] == 0
    # pure DP of a 70B model does not fit in 80 GiB
    lay = pl.make_layout(v, 8, 8, {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "dp": 64})
    assert ms.step_estimate(m, lay, use_cost_model=False)["memory"]["fits"] is False


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
    v = pl.node_view(hgx_doc())
    m = ms.parse_model_spec("llama-405b,gbs=2048")
    rows = ms.rank_factorizations(v, 64, 8, m, pl.DEFAULT_ORDER, {"tp": 8, "pp": 16})
    assert rows and all(r["parallelism"]["pp"] == 16 for r in rows)
    assert any("uneven stages" in a for a in rows[0]["estimate"]["assumptions"])
    with pytest.raises(PlanInfeasible, match="does not fit"):
        ms.rank_factorizations(v, 1, 8, m, pl.DEFAULT_ORDER)


def test_moe_needs_experts_for_ep():
    v = pl.node_view(hgx_doc())
    m = ms.parse_model_spec("layers=16,hidden=4096,heads=32,experts=8,topk=2,ffn=14336,gbs=64")
    assert any(a["ep"] > 1 for a in ms.candidate_axes(m, 16, 8, {}))
    rows = ms.rank_factorizations(v, 2, 8, m, pl.DEFAULT_ORDER, {"ep": 4}, top=2)
    assert rows and all(r["parallelism"]["ep"] == 4 and r["parallelism"]["cp"] == 1 for r in rows)
    assert rows[0]["estimate"]["comm"]["ep"]["collective"] == "all_to_all"
    dense = ms.parse_model_spec("llama-8b")
    assert all(a["ep"] == 1 for a in ms.candidate_axes(dense, 16, 8, {}))
    with pytest.raises(InputError):
        ms.parse_model_spec("llama-8b,experts=4,topk=9")


def test_build_full_plan_fixture_hosts():
    from probes.examples import list_examples
    from probes.load import load_topology

    for name in ("hgx-h100", "dgx-a100", "gb200-tray", "dgx1-v100"):
        if name not in list_examples():
            continue
        doc = load_topology(f"example:{name}")
        gpn = len(doc["gpus"])
        p = build_full_plan(doc, nodes=2, tp=gpn if gpn <= 8 else 8, model="llama-8b,gbs=64")
        assert pl.check_plan_invariants(p) == []
        assert p["estimate"]["memory"]["fits"] in (True, None)
        assert all(v["reason"] for v in p["env"].values())
