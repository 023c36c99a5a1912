"""Expert parallelism and every parallel group as Megatron-LM builds them, checked against
Megatron-Core's own ``RankGenerator`` (``megatron.core.parallel_state``; skipped when megatron-core
is not installed) and, under ``torchrun`` with gloo, against ``init_device_mesh`` and Megatron's own
``initialize_model_parallel`` (skipped without torch)."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucomm.planners.placement import layout as pl
from gpucomm.planners.placement import ranks as pranks
from gpucomm.probes.errors import PlanInfeasible

from support import hgx_doc, run_cli


def _megatron():
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from megatron.core import parallel_state
        return parallel_state
    except Exception:  # noqa: BLE001 - any import failure (no torch, no numpy) means "not here"
        return None


MEGATRON = _megatron()
needs_megatron = pytest.mark.skipif(MEGATRON is None, reason="megatron-core not installed")


def megatron_reference(axes: dict, order: str) -> dict:
    """Megatron's groups for ``axes``, built exactly as initialize_model_parallel builds them."""
    tp, cp, dp, pp, ep = axes["tp"], axes["cp"], axes["dp"], axes["pp"], axes["ep"]
    etp = axes.get("etp") or tp
    world = tp * cp * dp * pp
    dense = MEGATRON.RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order=order, rank_offset=0)
    expert = MEGATRON.RankGenerator(tp=etp, ep=ep, dp=world // (etp * ep * pp), pp=pp, cp=1, order=order,
                                    rank_offset=0)
    out = {}
    for key, (kind, token, _) in pranks.MEGATRON_GROUPS.items():
        out[key] = (expert if kind == "expert" else dense).get_ranks(token)
    return out


LAYOUTS = [  # (nodes, tp, cp, dp, pp, ep, etp, order) on 8-GPU nodes
    (1, 2, 1, 4, 1, 4, None, "tp-cp-ep-dp-pp"),
    (1, 2, 1, 4, 1, 2, None, "tp-cp-ep-dp-pp"),
    (1, 1, 2, 4, 1, 4, None, "tp-cp-ep-dp-pp"),
    (2, 2, 2, 2, 2, 2, None, "tp-cp-ep-dp-pp"),
    (2, 4, 1, 2, 2, 2, 1, "tp-cp-ep-dp-pp"),
    (2, 2, 2, 2, 2, 2, None, "tp-cp-ep-pp-dp"),
    (4, 8, 1, 2, 2, 2, None, "tp-cp-ep-dp-pp"),
    (2, 2, 2, 4, 1, 8, 1, "tp-cp-ep-dp-pp"),
]


@pytest.mark.parametrize("nodes,tp,cp,dp,pp,ep,etp,order", LAYOUTS)
def test_plan_groups_are_megatrons(nodes, tp, cp, dp, pp, ep, etp, order):
    plan = pl.build_plan(hgx_doc(), nodes=nodes, tp=tp, cp=cp, dp=dp, pp=pp, ep=ep, etp=etp, order=order)
    p = plan["parallelism"]
    assert p["tp"] * p["cp"] * p["dp"] * p["pp"] == plan["world_size"] == nodes * 8
    assert p["etp"] * p["ep"] * p["edp"] * p["pp"] == plan["world_size"]
    assert pl.check_plan_invariants(plan) == []
    # the expert layout re-factors dp*cp: each EP group sits inside one dense DP x CP x TP block
    for grp in plan["groups"]["ep"]:
        assert len({plan["ranks"][r]["coords"]["pp"] for r in grp}) == 1
    assert set(plan["group_names"]) == set(plan["groups"])
    if MEGATRON is not None:
        assert plan["groups"] == megatron_reference(p, order)


@needs_megatron
@settings(max_examples=80, deadline=None)
@given(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 3]),
       st.sampled_from([1, 2, 4, 8]), st.sampled_from([None, 1, 2]),
       st.sampled_from(["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", "tp-ep-cp-dp-pp", "tp-dp-cp-ep-pp"]))
def test_generators_agree_with_megatron_core(tp, cp, dp, pp, ep, etp, order):
    axes = {"tp": tp, "cp": cp, "dp": dp, "pp": pp, "ep": ep, "etp": etp}
    try:
        dense, expert = pranks.megatron_generators(axes, order)
    except PlanInfeasible:
        world = tp * cp * dp * pp
        e = (etp or tp) * ep * pp
        # refused exactly where Megatron refuses: a world not divisible by etp*ep*pp, or the
        # pp-last / expert-dp rule, or different pipeline groups
        if world % e == 0:
            ref = megatron_reference(axes, order)
            edp = world // e
            assert (not order.endswith("pp") and pp > 1 and edp != dp) or ref["pp"] != MEGATRON.RankGenerator(
                tp=etp or tp, ep=ep, dp=edp, pp=pp, cp=1, order=order).get_ranks("pp")
        return
    ref = megatron_reference(axes, order)
    for key, (kind, token, _) in pranks.MEGATRON_GROUPS.items():
        assert (expert if kind == "expert" else dense).get_ranks(token) == ref[key], key


def test_tp2_ep2_dp4_on_8_gpus_is_accepted():
    # Megatron: world = tp*cp*dp*pp = 8; ep=2 is carved out of dp=4 (expert dp = 2).
    r = run_cli("plan", "example:hgx-h100", "--tp", "2", "--ep", "2", "--dp", "4", "--format", "json")
    assert r.code == 0, r.stderr
    p = r.json()["parallelism"]
    assert (p["tp"], p["dp"], p["ep"], p["etp"], p["edp"]) == (2, 4, 2, 2, 2)
    assert r.json()["groups"]["ep"][:2] == [[0, 2], [1, 3]]
    assert r.json()["groups"]["edp"][:2] == [[0, 4], [1, 5]]


# ============================================================================================
# torchrun + gloo: DeviceMesh groups and Megatron's initialize_model_parallel, in real processes
WORKER = r'''
import json, os, sys, warnings
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

plans = json.load(open(sys.argv[1]))
out = sys.argv[2]
dist.init_process_group("gloo")
rank = dist.get_rank()
try:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core import parallel_state as ps
except Exception:
    ps = None
results = []
for plan in plans:
    res = {"mesh": {}, "megatron": {}}
    for which in ("device_mesh", "expert_device_mesh"):
        m = plan["mesh"][which]
        if not m:
            continue
        mesh = init_device_mesh("cpu", tuple(m["mesh_shape"]), mesh_dim_names=tuple(m["mesh_dim_names"]))
        for name in m["mesh_dim_names"]:
            res["mesh"][which + ":" + name] = sorted(dist.get_process_group_ranks(mesh.get_group(name)))
    if ps is not None:
        p = plan["parallelism"]
        ps.initialize_model_parallel(tensor_model_parallel_size=p["tp"], pipeline_model_parallel_size=p["pp"],
                                     context_parallel_size=p["cp"], expert_model_parallel_size=p["ep"],
                                     expert_tensor_parallel_size=p["etp"], order=p["order"],
                                     create_gloo_process_groups=False)
        res["megatron"] = {
            "tp": dist.get_process_group_ranks(ps.get_tensor_model_parallel_group()),
            "pp": dist.get_process_group_ranks(ps.get_pipeline_model_parallel_group()),
            "dp": dist.get_process_group_ranks(ps.get_data_parallel_group()),
            "dp-cp": dist.get_process_group_ranks(ps.get_data_parallel_group(with_context_parallel=True)),
            "cp": dist.get_process_group_ranks(ps.get_context_parallel_group()),
            "ep": dist.get_process_group_ranks(ps.get_expert_model_parallel_group()),
            "etp": dist.get_process_group_ranks(ps.get_expert_tensor_parallel_group()),
            "edp": dist.get_process_group_ranks(ps.get_expert_data_parallel_group()),
        }
        ps.destroy_model_parallel()
    results.append(res)
with open(os.path.join(out, "rank%d.json" % rank), "w") as f:
    json.dump(results, f)
dist.destroy_process_group()
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torch():
    try:
        import torch  # noqa: F401

        return shutil.which("torchrun") or os.path.join(os.path.dirname(sys.executable), "torchrun")
    except ImportError:
        return None


TORCHRUN = _torch()


@pytest.mark.slow
@pytest.mark.skipif(TORCHRUN is None or not os.path.exists(TORCHRUN or ""), reason="torch not installed")
def test_torchrun_gloo_device_mesh_and_megatron_groups(tmp_path):
    """Eight gloo processes on this machine, one launch for several layouts: the groups of every
    DeviceMesh dim the plan prints (dense and expert) and of Megatron's own initialize_model_parallel
    (when megatron-core is installed) are the plan's groups."""
    layouts = [(2, 1, 4, 1, 4, None, "tp-cp-ep-dp-pp"), (1, 2, 2, 2, 2, None, "tp-cp-ep-dp-pp"),
               (2, 1, 2, 2, 2, 1, "tp-cp-ep-dp-pp"), (1, 2, 2, 2, 2, None, "tp-cp-ep-pp-dp")]
    plans = [pl.build_plan(hgx_doc(), tp=tp, cp=cp, dp=dp, pp=pp, ep=ep, etp=etp, order=order)
             for tp, cp, dp, pp, ep, etp, order in layouts]
    (tmp_path / "plan.json").write_text(json.dumps(plans))
    (tmp_path / "worker.py").write_text(WORKER)
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    r = subprocess.run([TORCHRUN, "--nnodes=1", "--nproc-per-node=8", "--master-addr=127.0.0.1",
                        f"--master-port={_free_port()}", str(tmp_path / "worker.py"), str(tmp_path / "plan.json"),
                        str(out)], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    dims = {"pp": "pp", "dp": "dp", "cp": "cp", "tp": "tp", "ep": "ep", "etp": "etp", "edp": "edp"}
    for rank in range(8):
        results = json.loads((out / f"rank{rank}.json").read_text())
        assert len(results) == len(plans)
        for plan, res in zip(plans, results):
            assert res["mesh"], "no DeviceMesh dims"
            for key, ranks in res["mesh"].items():
                dim = key.split(":")[1]
                grp = next(g for g in plan["groups"][dims[dim]] if rank in g)
                assert ranks == sorted(grp), (rank, key)
            assert bool(res["megatron"]) == (MEGATRON is not None)
            for key, ranks in res["megatron"].items():
                grp = next(g for g in plan["groups"][key] if rank in g)
                assert ranks == grp, (plan["parallelism"], rank, key)


def _megatron_groups(world_size, parallel_size, mask):
    """Megatron-LM's generate_masked_orthogonal_rank_groups as written there (every index decomposed)."""
    def prefix_product(a, init=1):
        r = [init]
        for v in a:
            init = init * v
            r.append(init)
        return r

    def inner_product(a, b):
        return sum(x * y for x, y in zip(a, b))

    def decompose(index, shape, stride=None):
        if stride is None:
            stride = prefix_product(shape)
        return [(index // d) % s for s, d in zip(shape, stride)]

    masked_shape = [s for s, m in zip(parallel_size, mask) if m]
    unmasked_shape = [s for s, m in zip(parallel_size, mask) if not m]
    global_stride = prefix_product(parallel_size)
    masked_stride = [d for d, m in zip(global_stride, mask) if m]
    unmasked_stride = [d for d, m in zip(global_stride, mask) if not m]
    group_size = prefix_product(masked_shape)[-1]
    num_of_group = world_size // group_size
    ranks = []
    for group_index in range(num_of_group):
        decomposed_group_idx = decompose(group_index, unmasked_shape)
        rank = []
        for rank_in_group in range(group_size):
            decomposed_rank_idx = decompose(rank_in_group, masked_shape)
            rank.append(inner_product(decomposed_rank_idx, masked_stride)
                        + inner_product(decomposed_group_idx, unmasked_stride))
        ranks.append(rank)
    return ranks


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=5), st.data())
def test_rank_groups_equal_megatrons_algorithm(shape, data):
    mask = data.draw(st.lists(st.booleans(), min_size=len(shape), max_size=len(shape)))
    world = 1
    for s in shape:
        world *= s
    assert pranks.generate_masked_orthogonal_rank_groups(world, shape, mask) == _megatron_groups(world, shape, mask)
