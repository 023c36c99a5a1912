"""Issue 29, "Wrong or unusable answers": the everyday answers a user acts on in the first hour,
each checked the way the user would meet it (the launch file runs, the tool it is for accepts it,
the exit code says what happened)."""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import io
import json
import os
import stat
import subprocess
import sys
import types
from pathlib import Path

import pytest

from gpucomm.planners.placement import models as ms
from gpucomm.probes.errors import PlanInfeasible

from support import ROOT, run_cli


# ============================================================================================
# 5. Launch files that launch: scripts are written executable
@pytest.mark.parametrize("emit", ["wrapper", "torchrun", "slurm"])
def test_scripts_are_written_executable(tmp_path, emit):
    out = tmp_path / f"{emit}.sh"
    r = run_cli("plan", "example:hgx-h100", "--tp", "8", "--emit", emit, "-o", str(out))
    assert r.code == 0, r.stderr
    mode = stat.S_IMODE(out.stat().st_mode)
    assert mode & stat.S_IXUSR, oct(mode)
    assert out.read_text().startswith("#!")


def test_the_wrapper_runs_as_torchrun_and_mpirun_start_it(tmp_path):
    w = tmp_path / "gpucomm-rank.sh"
    assert run_cli("plan", "example:hgx-h100", "--tp", "8", "--emit", "wrapper", "-o", str(w)).code == 0
    r = subprocess.run(["./gpucomm-rank.sh", "sh", "-c", "echo $LOCAL_RANK $CUDA_VISIBLE_DEVICES"], cwd=tmp_path,
                       env=dict(os.environ, LOCAL_RANK="3", GPUCOMM_CPU_BIND="none"), capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "3"


def test_data_files_are_not_executable(tmp_path):
    out = tmp_path / "ranks.txt"
    assert run_cli("plan", "example:hgx-h100", "--tp", "8", "--emit", "rankfile", "-o", str(out)).code == 0
    assert not stat.S_IMODE(out.stat().st_mode) & 0o111


# ============================================================================================
# 2. plan --model recommends only layouts Megatron accepts: Megatron-LM's real validate_args and
#    core_transformer_config_from_args (-> Megatron-Core's TransformerConfig), tag core_v0.16.1
#    (fixtures/megatron-lm/core_v0.16.1/SOURCES.md), over the installed megatron-core==0.16.1
MEGATRON_LM = ROOT / "fixtures" / "megatron-lm" / "core_v0.16.1"
MEGATRON_LM_BLOBS = {"arguments": "46f3c28b1dae1ac20535fe1c92a8fc3bb59c9270",
                     "argument_utils": "b9f7c7b22d159cd1b0bc797578e54e4a85983fcc",
                     "training_config": "27c3f384c2f53771b843d8837417058e5897045d",
                     "common_config": "d1096e91154cc706c18b7409208a62376ae2be6d",
                     "resilience_config": "dd0bd716521b83fd546d104300f1af35d7dd3e95"}


def _git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_vendored_megatron_lm_files_are_the_released_ones():
    for name, blob in MEGATRON_LM_BLOBS.items():
        assert _git_blob((MEGATRON_LM / f"{name}.py.txt").read_bytes()) == blob, name


class MegatronLM:
    """Megatron-LM's argument parser and checks, loaded from the released files over megatron-core."""

    def __init__(self):
        self.arch = 9   # compute capability major of the plan's GPUs (get_device_arch_version)
        pkg = types.ModuleType("megatron.training")
        pkg.__path__ = []
        utils = types.ModuleType("megatron.training.utils")
        utils.print_rank_0 = utils.warn_rank_0 = lambda message, rank=None: None
        utils.is_rank0 = lambda: False

        def update_use_dist_ckpt(args):   # megatron/training/utils.py, verbatim
            args.use_dist_ckpt = args.ckpt_format != "torch"

        utils.update_use_dist_ckpt = update_use_dist_ckpt
        utils.get_device_arch_version = lambda: self.arch
        self.saved = {k: sys.modules.get(k) for k in ["megatron.training", "megatron.training.utils"]
                      + [f"megatron.training.{n}" for n in MEGATRON_LM_BLOBS]}
        sys.modules["megatron.training"] = pkg
        sys.modules["megatron.training.utils"] = utils
        for name in ("argument_utils", "common_config", "resilience_config", "training_config", "arguments"):
            mod = types.ModuleType(f"megatron.training.{name}")
            mod.__package__ = "megatron.training"
            mod.__file__ = str(MEGATRON_LM / f"{name}.py.txt")
            sys.modules[mod.__name__] = mod
            exec(compile((MEGATRON_LM / f"{name}.py.txt").read_text(), mod.__file__, "exec", dont_inherit=True),
                 mod.__dict__)
        self.arguments = sys.modules["megatron.training.arguments"]
        self.parser = argparse.ArgumentParser(allow_abbrev=False)
        self.arguments.add_megatron_arguments(self.parser)

    def close(self):
        for k, v in self.saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v

    def check(self, flags: list, world: int, env: dict, arch: int = 9):
        """Parse ``flags`` as pretrain_gpt.py does and run validate_args, then build Megatron-Core's
        TransformerConfig from them; raises what Megatron raises."""
        import warnings

        self.arch = arch
        # this machine has no Transformer Engine, which RoPE fusion (on by default) needs
        args = self.parser.parse_args([str(f) for f in flags] + ["--no-rope-fusion"])
        args.rank, args.world_size = 0, world
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                warnings.simplefilter("ignore")
                self.arguments.validate_args(args)
                cfg = self.arguments.core_transformer_config_from_args(args)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        # what the layers and the schedule then divide (megatron.core.utils.divide asserts):
        # ColumnParallelLinear's MLP width over tp, sequence parallelism's split of seq/cp over tp,
        # and the micro-batch calculator's gbs over mbs*dp (num_microbatches_calculator)
        from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator
        from megatron.core.utils import divide

        divide(cfg.ffn_hidden_size, cfg.tensor_model_parallel_size)
        if cfg.num_moe_experts:
            divide(cfg.moe_ffn_hidden_size, cfg.expert_tensor_parallel_size)
        if cfg.sequence_parallel:
            divide(args.seq_length // cfg.context_parallel_size, cfg.tensor_model_parallel_size)
        ConstantNumMicroBatchesCalculator(args.global_batch_size, args.micro_batch_size, args.data_parallel_size,
                                          False, 1)
        return args, cfg


def _megatron_lm():
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import torch  # noqa: F401
            from megatron.core.transformer import TransformerConfig  # noqa: F401
    except Exception:  # noqa: BLE001 - no torch or no megatron-core: not checkable here
        return None
    return True


needs_megatron_lm = pytest.mark.skipif(_megatron_lm() is None, reason="torch and megatron-core not installed")


@pytest.fixture(scope="module")
def megatron_lm():
    m = MegatronLM()
    yield m
    m.close()


def _flags(megatron: dict) -> list:
    out = []
    for flag, value in megatron["args"]:
        out.append(flag)
        if value is not None:
            out.append(str(value))
    return out


def _megatron_env(plan_env: dict) -> dict:
    return {k: v["value"] for k, v in plan_env.items() if k == "CUDA_DEVICE_MAX_CONNECTIONS"}


SWEEP_MODELS = ["llama-8b", "llama-70b", "llama-405b,gbs=2048", "llama-8b,seq=4096,gbs=96,mbs=2",
                "layers=24,hidden=2048,heads=16,kv_heads=4,experts=8,topk=2,seq=4096",
                "layers=30,hidden=3072,heads=24,kv_heads=6,ffn=8192,seq=6144,gbs=480"]
SWEEP_NODES = [1, 2, 3, 4, 6, 16]


@needs_megatron_lm
@pytest.mark.parametrize("model", SWEEP_MODELS)
def test_every_candidate_passes_megatrons_validate_args(megatron_lm, model):
    """Every layout the planner would consider (even and uneven pipelines) for presets and custom
    models on 1..16 nodes of 8 GPUs: Megatron-LM's validate_args and Megatron-Core's config accept
    the emitted arguments."""
    m = ms.parse_model_spec(model)
    checked = 0
    for nodes in SWEEP_NODES:
        for uneven in (False, True):
            for axes in ms.candidate_axes(m, nodes * 8, 8, {}, uneven_pp=uneven):
                p = dict(axes, order="tp-cp-ep-dp-pp")
                flags = _flags(ms.megatron_arguments(p, m))
                env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if axes["tp"] > 1 or axes["cp"] > 1 else {}
                try:
                    megatron_lm.check(flags, nodes * 8, env)
                except Exception as e:  # noqa: BLE001 - Megatron raises AssertionError/ValueError/...
                    pytest.fail(f"{model} on {nodes} nodes {axes}: Megatron refuses: {type(e).__name__}: {e}")
                checked += 1
    assert checked > 20


@needs_megatron_lm
@pytest.mark.parametrize("model", SWEEP_MODELS[:3] + SWEEP_MODELS[4:])
def test_megatron_refusal_says_what_megatron_says(megatron_lm, model):
    """Both ways: over every factorization of 16 and 24 GPUs (tp | 8), our refusal is None exactly
    where Megatron accepts."""
    m = ms.parse_model_spec(model)
    for total in (16, 24):
        for tp in (1, 2, 4, 8):
            for pp in (p for p in range(1, total // tp + 1) if (total // tp) % p == 0):
                for cp in (c for c in (1, 2, 4) if (total // tp // pp) % c == 0):
                    dp = total // (tp * pp * cp)
                    for ep in ([e for e in (1, 2, 4, 8) if (tp * cp * dp) % (e * tp) == 0] if m["experts"] else [1]):
                        axes = {"tp": tp, "cp": cp, "dp": dp, "pp": pp, "ep": ep, "etp": tp}
                        ours = ms.megatron_refusal(m, axes)
                        p = dict(axes, order="tp-cp-ep-dp-pp")
                        try:
                            flags = _flags(ms.megatron_arguments(p, m))
                        except PlanInfeasible as e:
                            assert ours is not None and ours in str(e)
                            flags = _flags(ms.megatron_arguments(p, None)) + _model_flags(m)
                        try:
                            megatron_lm.check(flags, total, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"})
                            theirs = None
                        except Exception as e:  # noqa: BLE001
                            theirs = f"{type(e).__name__}: {e}"
                        assert (ours is None) == (theirs is None), (model, axes, ours, theirs)


def _model_flags(m: dict) -> list:
    """The model's flags alone (for a layout our planner refuses, to hear Megatron refuse it too)."""
    flags = _flags(ms.megatron_arguments({"tp": 1, "cp": 1, "ep": 1, "dp": 1, "pp": 1, "etp": 1,
                                          "order": "tp-cp-ep-dp-pp"}, dict(m, gbs=m["mbs"])))
    i = flags.index("--num-layers")
    out = flags[i:]
    j = out.index("--global-batch-size")
    out[j + 1] = str(m["gbs"])
    if m["experts"]:
        out += ["--num-experts", str(m["experts"]), "--moe-router-topk", str(m["topk"])]
    return out


def test_the_issues_plan_is_valid_for_megatron():
    """plan example:hgx-h100 --nodes 3 --model llama-70b used to rank tp8/pp3 first and write 80
    layers over pp=3 with nothing else: Megatron refuses that.  Now an uneven pipeline says where
    the layers go, or another layout is chosen."""
    r = run_cli("plan", "example:hgx-h100", "--nodes", "3", "--model", "llama-70b", "--emit", "megatron")
    assert r.code == 0, r.stderr
    args = _bash_array(r.stdout)
    pp = int(args[args.index("--pipeline-model-parallel-size") + 1])
    if 80 % pp:
        first = int(args[args.index("--decoder-first-pipeline-num-layers") + 1])
        last = int(args[args.index("--decoder-last-pipeline-num-layers") + 1])
        assert (80 - first - last) % (pp - 2 or 1) == 0 and first > 0 and last > 0
    # the model's own shape, not Megatron's defaults (learned positions, tied embeddings, GeLU, LayerNorm)
    for flag in ("--position-embedding-type", "--untie-embeddings-and-output-weights", "--swiglu", "--normalization",
                 "--num-query-groups", "--ffn-hidden-size", "--vocab-size", "--rotary-base", "--disable-bias-linear"):
        assert flag in args, flag
    assert args[args.index("--position-embedding-type") + 1] == "rope"
    assert args[args.index("--rotary-base") + 1] == "500000"


@needs_megatron_lm
@pytest.mark.parametrize("nodes,model,extra", [
    (3, "llama-70b", []), (1, "llama-8b", ["--tp", "4", "--pp", "2"]),
    (4, "llama-70b,gbs=64", ["--tp", "8", "--pp", "4", "--vpp", "2"]), (2, "llama-8b", ["--tp", "4", "--cp", "2"]),
    (2, "layers=24,hidden=2048,heads=16,kv_heads=4,experts=8,seq=4096", ["--tp", "2", "--ep", "4"])])
def test_emitted_megatron_arguments_and_env_pass_megatron(megatron_lm, nodes, model, extra):
    """End to end: the plan's --emit megatron array with the plan's own env (CUDA_DEVICE_MAX_CONNECTIONS)."""
    r = run_cli("plan", "example:hgx-h100", "--nodes", str(nodes), "--model", model, *extra, "--format", "json")
    assert r.code == 0, r.stderr
    plan = r.json()
    megatron_lm.check(_flags(plan["megatron"]), plan["world_size"], _megatron_env(plan["env"]))


def _bash_array(text: str) -> list:
    r = subprocess.run(["bash", "-c", text + '\nprintf "%s\\n" "${MEGATRON_PARALLEL_ARGS[@]}"'],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.split("\n")[:-1]


# ============================================================================================
# 3. Explicit sizes get the same infeasible verdict as ranked ones
def test_explicit_sizes_that_do_not_fit_are_infeasible_unless_forced(tmp_path):
    ranked = run_cli("plan", "example:hgx-h100", "--nodes", "2", "--model", "llama-70b", "--emit", "slurm")
    given = run_cli("plan", "example:hgx-h100", "--nodes", "2", "--tp", "8", "--pp", "2", "--model", "llama-70b",
                    "--emit", "slurm")
    assert ranked.code == given.code == 4 and given.stdout == ""
    assert "does not fit on 16 GPUs" in given.stderr and "--force" in given.stderr
    out = tmp_path / "job.sbatch"
    forced = run_cli("plan", "example:hgx-h100", "--nodes", "2", "--tp", "8", "--pp", "2", "--model", "llama-70b",
                     "--emit", "slurm", "--force", "-o", str(out))
    assert forced.code == 0, forced.stderr
    assert "# WARNING: planned with --force although it does not fit: llama-70b does not fit" in out.read_text()
    forced_ranked = run_cli("plan", "example:hgx-h100", "--nodes", "2", "--model", "llama-70b", "--force",
                            "--emit", "torchrun")
    assert forced_ranked.code == 0 and "does not fit" in forced_ranked.stdout


# ============================================================================================
# 4. DeepSpeed: no ZeRO 2/3 with pipeline parallelism; a real batch without --model
def test_deepspeed_never_gets_zero_2_or_3_with_pipeline_parallelism():
    r = run_cli("plan", "example:hgx-h100", "--nodes", "2", "--tp", "4", "--pp", "2", "--model", "llama-8b,zero=3",
                "--emit", "deepspeed")
    assert r.code == 0, r.stderr
    cfg = json.loads(r.stdout)
    assert cfg["zero_optimization"]["stage"] <= 1
    assert "pipeline engine refuses ZeRO 2 and 3" in r.stderr
    # without pipeline parallelism the requested stage stays
    r = run_cli("plan", "example:hgx-h100", "--nodes", "2", "--tp", "8", "--model", "llama-8b,zero=3",
                "--emit", "deepspeed")
    assert json.loads(r.stdout)["zero_optimization"]["stage"] == 3


def test_deepspeeds_pipeline_engine_still_refuses_zero_2_and_3():
    """The rule above is DeepSpeed's own (deepspeed/runtime/pipe/engine.py), in the installed version."""
    spec = importlib.util.find_spec("deepspeed")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("deepspeed not installed")
    src = Path(list(spec.submodule_search_locations)[0], "runtime", "pipe", "engine.py").read_text()
    assert "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism" in src
    assert ms.DEEPSPEED_PIPELINE_MAX_ZERO == 1


def test_deepspeed_without_a_model_has_a_real_batch():
    r = run_cli("plan", "example:hgx-h100", "--tp", "8", "--emit", "deepspeed")
    assert r.code == 0, r.stderr
    cfg = json.loads(r.stdout)
    assert cfg["train_batch_size"] == ms.RUN_DEFAULTS["gbs"] and cfg["gradient_accumulation_steps"] == 1024
    assert "--model ...,gbs=N" in r.stderr


@pytest.mark.parametrize("nodes,extra", [(1, ["--tp", "8"]), (2, ["--tp", "4", "--pp", "2"]), (3, ["--tp", "8"]),
                                         (2, ["--tp", "2", "--pp", "2", "--model", "llama-8b,zero=2,gbs=96"]),
                                         (4, ["--model", "llama-70b,zero=3"])])
def test_deepspeed_accepts_every_emitted_config(monkeypatch, nodes, extra):
    """DeepSpeed's own DeepSpeedConfig reads each config with the plan's data-parallel world."""
    dc = pytest.importorskip("deepspeed.runtime.config")
    monkeypatch.setattr(dc.dist, "get_rank", lambda *a, **k: 0)   # no process group in this test
    r = run_cli("plan", "example:hgx-h100", "--nodes", str(nodes), *extra, "--format", "json")
    assert r.code == 0, r.stderr
    plan = r.json()
    dp = plan["parallelism"]["dp"] * plan["parallelism"]["cp"]

    class MPU:
        def get_data_parallel_world_size(self):
            return dp

    c = dc.DeepSpeedConfig(plan["deepspeed"], mpu=MPU())
    assert c.train_batch_size == c.train_micro_batch_size_per_gpu * c.gradient_accumulation_steps * dp
    assert c.train_batch_size >= ms.RUN_DEFAULTS["gbs"] or "gbs=" in " ".join(extra)
    if plan["parallelism"]["pp"] > 1:
        assert c.zero_optimization_stage < 2


# ============================================================================================
# 8. Inputs that are not what they seem; flag values out of range are usage errors everywhere
NT_HEADER = ("#                                                              out-of-place                       in-place\n"
             "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
             "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n")
NT_ROWS = [(1048576, 262144, 40.1, 26.15, 45.76), (4194304, 1048576, 60.2, 69.67, 121.9),
           (16777216, 4194304, 120.4, 139.3, 243.8), (67108864, 16777216, 300.5, 223.3, 390.8),
           (268435456, 67108864, 900.1, 298.2, 521.9)]


def _nt_row(size, count, t, alg, bus, tag=None) -> str:
    left = f"{size:12d}  {count:12d}     float     sum      -1"
    right = f"  {t:7.1f}  {alg:6.2f}  {bus:6.2f}       0  {t:7.1f}  {alg:6.2f}  {bus:6.2f}       0"
    if tag:   # Open MPI --tag-output: one tag per write; nccl-tests writes a row in several printf calls
        return f"{tag}{left}{tag}{right}{tag}\n"
    return f"{left}{right}\n"


def test_open_mpi_tags_anywhere_in_a_row_are_stripped(tmp_path):
    tag = "[1,0]<stdout>:"
    text = "".join(tag + line + "\n" for line in
                   ("# nThread 1 nGpus 1 minBytes 1048576 maxBytes 268435456 step: 4(factor) warmup iters: 5 "
                    "iters: 20 agg iters: 1 validation: 1 graph: 0",) + tuple(NT_HEADER.splitlines()))
    text += "".join(_nt_row(*r, tag=tag) for r in NT_ROWS)
    f = tmp_path / "tagged.txt"
    f.write_text(text)
    from gpucomm.probes.formats.nccltests import parse_nccltests

    run = parse_nccltests(text, str(f))
    assert [r["size_bytes"] for r in run["rows"]] == [r[0] for r in NT_ROWS]
    assert not any("skipped" in w for w in run["warnings"])
    r = run_cli("predict", "example:hgx-h100", "--compare", str(f))
    assert r.code == 0, r.stderr


def test_a_file_of_two_tables_is_not_one_run(tmp_path):
    """README.md quotes a predict table and a --compare table: their rows used to merge into one run
    (a 7,228% median error with exit 0)."""
    two = NT_HEADER + "".join(_nt_row(*r) for r in NT_ROWS) + "\nsome prose\n" + NT_HEADER + \
        "".join(_nt_row(*r) for r in NT_ROWS[:2])
    f = tmp_path / "two.md"
    f.write_text(two)
    r = run_cli("predict", "example:hgx-h100", "--compare", str(f))
    assert r.code == 1 and "second table" in r.stderr and f"{f}:" in r.stderr and "Traceback" not in r.stderr
    readme = ROOT / "README.md"
    if readme.exists():
        assert run_cli("predict", "example:hgx-h100", "--compare", str(readme)).code == 1


@pytest.mark.parametrize("args", [
    ("predict", "example:hgx-h100", "--size", "-5"), ("predict", "example:hgx-h100", "--size", "0"),
    ("predict", "example:hgx-h100", "--size", "1K:0"), ("predict", "example:hgx-h100", "--nodes", "0"),
    ("predict", "example:hgx-h100", "--nodes", "99999999999999999999"),
    ("predict", "example:hgx-h100", "--fabric-gbps", "0"), ("predict", "example:hgx-h100", "--fabric-gbps", "nan"),
    ("predict", "example:hgx-h100", "--gpus", "0,x"), ("rings", "example:hgx-h100", "--nodes", "0"),
    ("predict", "example:hgx-h100", "--algo", "bogus"), ("predict", "example:hgx-h100", "--collective", "allfoo"),
    ("predict", "example:hgx-h100", "--dtype", "float7"),
    ("rings", "example:hgx-h100", "--gpus", "a-b"), ("trees", "example:hgx-h100", "--nodes", "1000001"),
    ("plan", "example:hgx-h100", "--nodes", "0"), ("plan", "example:hgx-h100", "--nodes", "100000000"),
    ("plan", "example:hgx-h100", "--gpus", "x"), ("select", "example:hgx-h100", "-k", "2", "--free", "x"),
    ("select", "example:hgx-h100", "-k", "0"), ("synth", "example:hgx-h100", "-N", "100000000"),
    ("calibrate", "example:hgx-h100", "x.txt", "--nodes", "0"),
    ("calibrate", "example:hgx-h100", "x.txt", "--fabric-gbps", "-1"),
    ("bench", "collective", "--iters", "0"), ("bench", "collective", "--sizes", "-1"),
    ("bench", "collective", "--timeout", "0"), ("bench", "p2p", "--size", "0"), ("bench", "p2p", "--warmup", "-1"),
])
def test_flag_values_out_of_range_are_usage_errors(args):
    r = run_cli(*args)
    assert r.code == 2, (r.code, r.stderr)
    assert "Traceback" not in r.stderr


# ============================================================================================
# 10. NCCL's model figure and the data sheet's NVLink bandwidth, each labelled as what it is
def test_show_and_labels_name_the_nccl_and_the_spec_sheet_figures():
    r = run_cli("show", "example:hgx-h100")
    assert r.code == 0, r.stderr
    assert "NCCL model 370.8 GB/s, spec 450 GB/s/dir" in r.stdout
    labels = run_cli("probe", "example:hgx-h100", "--format", "k8s-labels").json()["labels"]
    pre = "feature.node.kubernetes.io/gpucomm-"
    assert labels[pre + "nvlink.gpu-nccl-GBps"] == "370.8" and labels[pre + "nvlink.gpu-spec-GBps"] == "450"
    assert pre + "nvlink.gpu-GBps" not in labels
    b200 = run_cli("probe", "example:dgx-b200", "--format", "k8s-labels").json()["labels"]
    assert b200[pre + "nvlink.gpu-spec-GBps"] == "900"


# ============================================================================================
# 7. doctor: NVIDIA GPUs without a driver answer are a finding; a rule that could not run is not "checked"
def test_doctor_finds_a_driverless_node_and_does_not_call_its_nvlinks_checked(tmp_path):
    import shutil

    host = tmp_path / "hgx-h100"
    shutil.copytree(ROOT / "fixtures" / "hosts" / "hgx-h100", host, symlinks=True)
    (host / "nvml.json").unlink()
    for f in (host / "commands").iterdir():     # no nvidia-smi output recorded
        f.unlink()
    r = run_cli("doctor", str(host))
    assert r.code == 5, r.stdout + r.stderr
    assert "error gpu-driver" in r.stdout and "neither NVML nor nvidia-smi answered" in r.stdout
    assert "no problems found" not in r.stdout
    checked = next(ln for ln in r.stdout.splitlines() if ln.startswith("checked: "))
    assert "nvlink-inactive" not in checked and "mig-enabled" not in checked
    assert "not checked: nvlink-inactive" in r.stdout
    rep = run_cli("doctor", str(host), "--format", "json").json()
    assert "nvlink-inactive" not in rep["checked"]
    assert {n["rule"] for n in rep["not_checked"]} >= {"nvlink-inactive", "mig-enabled"}
    assert rep["degraded"] and rep["findings"][0]["rule"] == "gpu-driver"
    from jsonschema import validate as js_validate   # the report is a valid gpucomm.doctor/v1 document

    js_validate(rep, json.loads((ROOT / "planners" / "schema" / "doctor.schema.json").read_text()))


def test_doctor_with_a_driver_checks_every_rule():
    rep = run_cli("doctor", "example:hgx-h100", "--format", "json").json()
    assert "nvlink-inactive" in rep["checked"] and not rep["findings"]
    # only the software-path rules could not run: a bundled example has no software section
    assert all("no software path" in n["reason"] for n in rep["not_checked"])
    # a capture without NICs: the RDMA rules could not run, and say so
    cap = run_cli("doctor", "example:a100-pcie-4x-nvbridge", "--format", "json").json()
    assert all(n["reason"] for n in cap["not_checked"])
    assert not set(cap["checked"]) & {n["rule"] for n in cap["not_checked"]}


# ============================================================================================
# 6. plan --emit nccl-xml emits the XML NCCL should load, and says whether NCCL finds it by itself
EXAMPLES_WITH_GPUS = sorted(p.stem for p in (ROOT / "probes" / "examples").glob("*.json")
                            if p.stem not in ("index", "cpu-only"))
VM_XMLS = ["azure-ndv2-topo.xml", "azure-ndv4-topo.xml", "azure-ndv5-topo.xml", "aws-p4d-24xl-topo.xml"]


def _emitted_xml(src: str, tmp_path) -> str:
    out = tmp_path / "topo.xml"
    r = run_cli("plan", src, "--emit", "nccl-xml", "-o", str(out))
    assert r.code == 0, (src, r.stderr)
    text = out.read_text()
    assert text.startswith("<!-- gpucomm: ") and "<system" in text
    return text


@pytest.mark.parametrize("name", EXAMPLES_WITH_GPUS)
def test_nccl_xml_of_every_example(name, tmp_path):
    text = _emitted_xml(f"example:{name}", tmp_path)
    # the comment says what the plan does: NCCL_TOPO_FILE where NCCL would not find the topology itself
    env = run_cli("plan", f"example:{name}", "--format", "json").json()["env"]
    if "NCCL_TOPO_FILE" in env:
        assert "NCCL would NOT find it on its own" in text
    else:
        assert "NCCL would find the same on its own" in text
    from gpucomm.probes.load import load_topology   # and it reads back: the same GPUs

    back = load_topology(str(tmp_path / "topo.xml"))
    assert len(back["gpus"]) == len(load_topology(f"example:{name}")["gpus"])


@pytest.mark.parametrize("name", VM_XMLS)
def test_nccl_xml_of_vm_topology_files(name, tmp_path):
    text = _emitted_xml(str(ROOT / "fixtures" / "captures" / "ncclxml" / name), tmp_path)
    assert "NCCL would NOT find this on its own" in text


def test_nccl_xml_of_a_flat_vm_snapshot(tmp_path):
    from support import vm_flat_doc

    f = tmp_path / "vm.json"
    f.write_text(json.dumps(vm_flat_doc()))
    text = _emitted_xml(str(f), tmp_path)
    assert "NCCL would NOT find it on its own" in text and "ffff:ff:01.0" in text


def test_nccl_xml_without_bus_ids_says_so_and_writes_nothing(tmp_path):
    cap = ROOT / "fixtures" / "captures" / "topo" / "86_h100-x8_9nic_azure-nd-h100-v5.txt"
    out = tmp_path / "topo.xml"
    r = run_cli("plan", str(cap), "--emit", "nccl-xml", "-o", str(out))
    assert r.code == 1 and "no PCI bus ids" in r.stderr and "PCIe tree" not in r.stderr
    assert not out.exists()


def _ncclsim_binary(tmp_path):
    env = os.environ.get("NCCLSIM_BIN")
    if env and os.access(env, os.X_OK):
        return env
    import shutil

    src = Path(os.environ.get("NCCLSIM_SRC", ROOT.parent / "shared" / "tools" / "ncclsim"))
    if shutil.which("g++") is None or not (src / "nccl" / "src").is_dir():
        pytest.skip("needs NCCLSIM_BIN, or g++ and the NCCL sources of ncclsim (../shared/tools/ncclsim)")
    sys.path.insert(0, str(ROOT / "tools"))
    import ncclsim_goldens as G  # noqa: E402

    return str(G.build_ncclsim(tmp_path / "ncclsim", src))


@pytest.mark.slow
def test_ncclsim_loads_every_nccl_xml_we_emit(tmp_path):
    """NCCL's own topology code (ncclsim) loads each emitted file without a warning."""
    binary = _ncclsim_binary(tmp_path)
    inputs = [f"example:{n}" for n in EXAMPLES_WITH_GPUS] + \
        [str(ROOT / "fixtures" / "captures" / "ncclxml" / n) for n in VM_XMLS]
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    env["NCCL_DEBUG"] = "WARN"
    for i, src in enumerate(inputs):
        out = tmp_path / f"{i}.xml"
        assert run_cli("plan", src, "--emit", "nccl-xml", "-o", str(out)).code == 0, src
        p = subprocess.run([binary, str(out)], capture_output=True, text=True, env=env, timeout=300)
        assert p.returncode == 0 and "WARN" not in p.stdout + p.stderr, (src, (p.stdout + p.stderr)[-400:])


# ============================================================================================
# 12. A wheel user can follow the README's tour: the captures it reads ship as example:<file name>
IB_FABRIC = "006_ibnetdiscover_edr-switchib-x6_2spine-4leaf_gpu-node-cluster_blanklines-stripped_flask-embed.txt"
README_CAPTURES = ["09_h100-x8_1node_allreduce_cluster01.txt", "005_polaris_2n_all_gather_nccl221_env5.txt",
                   "010_polaris_2n_all_reduce_nccl221_env5.txt", "015_polaris_2n_alltoall_nccl221_env5.txt",
                   "025_polaris_8n_all_reduce_nccl221_env5.txt", "18_h100-sxm-x8_9nic_tabs.txt", IB_FABRIC,
                   "009_gb300-oci_32trays-2racks-128gpu_allreduce_nccl2.28.7_oci-quickstart_truncated.txt"]


def test_shipped_captures_are_the_fixtures_byte_for_byte():
    r = subprocess.run([sys.executable, str(ROOT / "fixtures" / "pack_examples.py"), "--check"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    listed = {c["name"] for c in run_cli("examples", "--format", "json").json()["captures"]}
    assert listed == {f"example:{n}" for n in README_CAPTURES}


def test_the_tour_with_example_captures():
    r = run_cli("predict", "example:hgx-h100", "--compare", "example:09_h100-x8_1node_allreduce_cluster01.txt")
    assert r.code == 0 and "median |error| over 10 sizes" in r.stdout, r.stderr
    runs = [f"example:{n}" for n in README_CAPTURES[1:4]]
    c = run_cli("calibrate", "example:polaris", *runs, "--format", "json")
    assert c.code == 0 and "net_gbps_per_nic" in c.json()["fitted"], c.stderr
    m = run_cli("show", "example:18_h100-sxm-x8_9nic_tabs.txt", "--format", "matrix")
    assert m.code == 0 and "NV18" in m.stdout
    f = run_cli("fabric", f"example:{IB_FABRIC}", "--format", "json")
    assert f.code == 0 and len(f.json()["hosts"]) == 96, f.stderr
    assert "ib-link-downtrained" in {x["rule"] for x in f.json()["findings"]}
    bad = run_cli("predict", "example:hgx-h100", "--compare", "example:hgx-h100")
    assert bad.code == 1 and "not a text file" in bad.stderr


@pytest.mark.slow
def test_a_wheel_user_runs_the_tour_from_another_directory(tmp_path):
    """Built wheel, installed alone into a folder, run from outside the checkout: the README's
    --compare and calibrate steps work with the shipped captures."""
    from test_layout import build_wheel

    wheel = build_wheel(tmp_path / "build")
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = dict(os.environ, PYTHONPATH=str(site))

    def gpucomm(*args):
        return subprocess.run([sys.executable, "-m", "gpucomm", *args], capture_output=True, text=True, cwd=elsewhere,
                              env=env, timeout=300)

    where = subprocess.run([sys.executable, "-c", "import gpucomm; print(gpucomm.__file__)"], capture_output=True,
                           text=True, cwd=elsewhere, env=env, timeout=60).stdout
    assert where.startswith(str(site)), where
    p = gpucomm("predict", "example:hgx-h100", "--compare", "example:09_h100-x8_1node_allreduce_cluster01.txt")
    assert p.returncode == 0 and "# summary:" in p.stdout, p.stderr
    c = gpucomm("calibrate", "example:polaris", *[f"example:{n}" for n in README_CAPTURES[1:4]], "-o", "polaris.json")
    assert c.returncode == 0, c.stderr
    p8 = gpucomm("predict", "example:polaris", "--compare", "example:025_polaris_8n_all_reduce_nccl221_env5.txt",
                 "--calibration", "polaris.json")
    assert p8.returncode == 0 and "# summary:" in p8.stdout, p8.stderr


# ============================================================================================
# 13. RoCE: NCCL_IB_GID_INDEX from the GID table the probe reads; dual-port cards and NCCL_CROSS_NIC=0
GIDS_V1V2 = [("fe80:0000:0000:0000:ba59:9fff:fe00:0001", "IB/RoCE v1"),
             ("fe80:0000:0000:0000:ba59:9fff:fe00:0001", "RoCE v2"),
             ("0000:0000:0000:0000:0000:ffff:0a00:0101", "IB/RoCE v1"),
             ("0000:0000:0000:0000:0000:ffff:0a00:0101", "RoCE v2")]


def test_the_ib_probe_reads_the_gid_table(tmp_path):
    from gpucomm.probes.sources import ib
    from gpucomm.probes.sources.host import Host
    from support import NIC_ETH, SysfsTree

    t = SysfsTree(tmp_path)
    t.numa(0, "0-3")
    hb = t.host_bridge("pci0000:17")
    rp = t.bridge(hb, "0000:17:01.0", numa=0)
    nic = t.device(rp, "0000:18:00.0", NIC_ETH, vendor="0x15b3", device="0x1021", numa=0)
    attrs = {"link_layer": "Ethernet", "rate": "200 Gb/sec (4X HDR)"}
    for i, (gid, typ) in enumerate(GIDS_V1V2):
        attrs[f"gids/{i}"] = gid
        attrs[f"gid_attrs/types/{i}"] = typ
    attrs["gids/4"] = "0000:0000:0000:0000:0000:0000:0000:0000"
    t.ib(nic, "mlx5_0", ports={1: attrs}, netdev="ens1np0")
    doc = ib.collect(Host(root=tmp_path))
    gids = doc["nics"][0]["ports"][0]["gids"]
    assert [(g["index"], g["type"]) for g in gids] == [(0, "IB/RoCE v1"), (1, "RoCE v2"), (2, "IB/RoCE v1"),
                                                       (3, "RoCE v2")]
    from gpucomm.planners.nccl.gid import nccl_gid_index

    assert nccl_gid_index(gids) == 3


def _roce_doc(gid_sets):
    from support import hgx_doc

    doc = hgx_doc()
    for n, gids in zip(doc["nics"], gid_sets):
        n["link_layer"] = "Ethernet"
        for p in n["ports"]:
            p["link_layer"] = "Ethernet"
            if gids is not None:
                p["gids"] = [{"index": i, "gid": g, "type": t} for i, (g, t) in enumerate(gids)]
    return doc


def test_roce_plans_set_nccl_ib_gid_index(tmp_path):
    from gpucomm.planners.plan import build_full_plan

    plan = build_full_plan(_roce_doc([GIDS_V1V2] * 8), nodes=2, tp=8)
    assert plan["env"]["NCCL_IB_GID_INDEX"]["value"] == "3"
    # one NIC with its IPv4 RoCE v2 address elsewhere: no single index, said so
    other = GIDS_V1V2[:3] + [("0000:0000:0000:0000:0000:ffff:0a00:0102", "IB/RoCE v1"),
                             ("0000:0000:0000:0000:0000:ffff:0a00:0102", "RoCE v2")]      # NCCL picks 4 there
    plan = build_full_plan(_roce_doc([GIDS_V1V2] * 7 + [other]), nodes=2, tp=8)
    assert "NCCL_IB_GID_INDEX" not in plan["env"] and any("GID tables differ" in w for w in plan["warnings"])
    plan = build_full_plan(_roce_doc([None] * 8), nodes=2, tp=8)
    assert "NCCL_IB_GID_INDEX" not in plan["env"] and any("without a GID table" in w for w in plan["warnings"])
    ib_plan = build_full_plan(__import__("support").hgx_doc(), nodes=2, tp=8)   # InfiniBand: NCCL uses GID 0
    assert "NCCL_IB_GID_INDEX" not in ib_plan["env"]


def test_dual_port_cards_warn_that_cross_nic_0_does_not_hold():
    from gpucomm.planners.plan import build_full_plan
    from support import hgx_doc

    doc = hgx_doc()
    for i, n in enumerate(doc["nics"]):
        n["sys_image_guid"] = f"b859:9f03:00d5:2a{i // 2:02x}"    # two devices (ports) per card
    plan = build_full_plan(doc, nodes=2, tp=8)
    assert plan["env"]["NCCL_CROSS_NIC"]["value"] == "0"
    assert any("NCCL_CROSS_NIC=0 does not hold on dual-port cards" in w for w in plan["warnings"])
    single = build_full_plan(hgx_doc(), nodes=2, tp=8)
    assert not any("dual-port" in w for w in single["warnings"])


# ============================================================================================
# 9. --gpu MODEL where the topology does not name the GPU, said in the first line; --fabric-gbps
#    moves every algorithm that crosses nodes
B200_SMI = ROOT / "fixtures" / "captures" / "topo" / "48_b200-x8_2nic_tabs.txt"


def _busbw(r) -> float:
    return float(r.stdout.strip().splitlines()[-1].split()[-2])


def test_gpu_model_of_a_capture_that_lacks_it():
    assumed = run_cli("predict", str(B200_SMI))
    assert assumed.code == 0, assumed.stderr
    assert assumed.stdout.splitlines()[0].startswith("# GPU compute capability unknown: sm90 assumed")
    given = run_cli("predict", str(B200_SMI), "--gpu", "B200")
    assert given.stdout.splitlines()[0] == "# GPU model B200 (sm100) from --gpu for 8 GPU(s) the topology does not name"
    real = run_cli("predict", "example:dgx-b200")
    assert abs(_busbw(given) - _busbw(real)) < 0.01 * _busbw(real) and _busbw(assumed) < 0.7 * _busbw(real)
    # the topology's own model wins where it has one (and the first line stays the command's own)
    h100 = run_cli("predict", "example:hgx-h100", "--gpu", "B200")
    assert h100.stdout.splitlines()[0].startswith("# gpucomm predict:")
    assert _busbw(h100) == _busbw(run_cli("predict", "example:hgx-h100"))


@pytest.mark.parametrize("cmd", [["rings"], ["trees"], ["paths"], ["plan"], ["select", "-k", "4"],
                                 ["predict", "--compare", "example:09_h100-x8_1node_allreduce_cluster01.txt"]])
def test_every_command_that_models_the_gpu_takes_gpu(cmd):
    r = run_cli(cmd[0], str(B200_SMI), *cmd[1:], "--gpu", "B200")
    assert r.code in (0, 5), (cmd, r.stderr)
    assert "GPU model B200 (sm100) from --gpu" in r.stdout.splitlines()[0], (cmd, r.stdout[:300])
    assert run_cli(cmd[0], str(B200_SMI), *cmd[1:], "--gpu", "Z9000").code == 2


def test_calibrate_takes_gpu():
    runs = [f"example:{n}" for n in README_CAPTURES[1:4]]
    r = run_cli("calibrate", "example:polaris", *runs, "--gpu", "A100")
    assert r.code == 0 and r.stdout.startswith("# gpucomm calibrate:"), r.stderr   # polaris names its GPUs


@pytest.mark.parametrize("algo", ["auto", "ring", "tree", "nvls"])
def test_fabric_gbps_moves_every_algorithm_across_nodes(algo):
    slow = run_cli("predict", "example:hgx-h100", "--nodes", "2", "--algo", algo, "--fabric-gbps", "100")
    mid = run_cli("predict", "example:hgx-h100", "--nodes", "2", "--algo", algo, "--fabric-gbps", "150")
    default = run_cli("predict", "example:hgx-h100", "--nodes", "2", "--algo", algo)
    assert slow.code == mid.code == default.code == 0
    # 8 x 400G NICs by default; 8 x 100 and 8 x 150 Gb/s are slower for every algorithm
    assert _busbw(slow) < _busbw(mid) < 0.95 * _busbw(default), (algo, _busbw(slow), _busbw(mid), _busbw(default))


def test_half_the_network_slows_a_two_node_nvls_tree():
    """The issue's case: 8 x 200 Gb/s instead of 8 x 400 left the 2-node NVLS-tree prediction as it was
    (the fabric was spread over all 10 NICs of the node, management and storage ports included)."""
    half = run_cli("predict", "example:hgx-h100", "--nodes", "2", "--fabric-gbps", "200")
    full = run_cli("predict", "example:hgx-h100", "--nodes", "2")
    assert "nvls_tree" in half.stdout.splitlines()[-1] and _busbw(half) < 0.95 * _busbw(full)


# ============================================================================================
# 11. Narrow terminals and pipes: 80 columns fit, values stay whole, prose wraps
NARROW_CASES = [
    ("doctor", "example:hgx-h100-degraded"),
    ("calibrate", "example:polaris", *[f"example:{n}" for n in README_CAPTURES[1:4]]),
    ("plan", "example:hgx-h100", "--nodes", "2", "--model", "llama-70b", "--force"),
    ("plan", "example:hgx-h100", "--nodes", "2", "--tp", "8"),
    ("predict", "example:hgx-h100", "--compare", "example:09_h100-x8_1node_allreduce_cluster01.txt"),
]


@pytest.mark.parametrize("args", NARROW_CASES, ids=lambda a: a[0])
def test_80_columns_fit(args, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    r = run_cli(*args)
    assert r.code in (0, 5), r.stderr
    for line in r.stdout.splitlines():
        if len(line) > 80:
            # only a value nobody may break (an env value, a path) is longer than the line, alone on it
            assert len(line.split()) <= 2 and "=" in line or line.strip().startswith(("example:", "/")), line


def test_calibrate_never_cuts_run_names(tmp_path, monkeypatch):
    long = tmp_path / ("a-very-long-directory-name-" * 3) / "005_polaris_2n_all_gather_nccl221_env5.txt"
    long.parent.mkdir(parents=True)
    long.write_bytes((ROOT / "probes" / "examples" / "captures" / long.name).read_bytes())
    for width in ("200", "80"):
        monkeypatch.setenv("COLUMNS", width)
        r = run_cli("calibrate", "example:polaris", str(long))
        assert r.code == 0, r.stderr
        assert any(ln.strip().startswith(f"{long}:") for ln in r.stdout.splitlines()), (width, r.stdout)


def test_doctor_through_a_pipe_without_columns_uses_the_list_layout(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    p = subprocess.run([sys.executable, "-m", "gpucomm", "doctor", "example:hgx-h100-degraded"], capture_output=True,
                       text=True, env=env, cwd=tmp_path, timeout=120)
    assert p.returncode == 5, p.stderr
    assert "error ib-port-down mlx5_5/1" in p.stdout and "┃" not in p.stdout
    assert max(len(ln) for ln in p.stdout.splitlines()) <= 80
