"""Model presets, ``--model`` parsing, per-step communication volume and memory per GPU, and the
ranking of candidate (tp, cp, ep, dp, pp) factorizations (``gpucomm plan --model``).

Formulas (Megatron-LM parallel_state.py; Narayanan et al., SC'21; b = micro-batch, s = sequence, h = hidden, l = layers,
t/p/d/c/e = TP/PP/DP/CP/EP sizes, g = bytes per element, m = micro-batches per step = B/(b*d)):

* DP gradient all-reduce: ``2(d-1)/d * Psi' * g`` bytes per GPU, Psi' = parameters per model-parallel
  shard (Patarasuk & Yuan 2009; nccl-tests busbw factor).  ZeRO-1/2 and Megatron's distributed
  optimizer move the same bytes (reduce-scatter + all-gather); ZeRO-3/FSDP 1.5x (ZeRO, arXiv:1910.02054
  [recalled]; FSDP, VLDB'23 [recalled]).  With CP, Megatron reduces gradients over the dp*cp group.
* TP (Megatron, with or without sequence parallel): 4 all-reduces of ``b*s*h`` per layer per
  micro-batch, 2 forward + 2 backward (Shoeybi et al. 2019 Fig. 4; Narayanan et al. 2021 §3.2), i.e.
  ``8*b*s*h*(t-1)/t*g`` bytes per GPU per layer per micro-batch; sequence parallel turns each into
  RS+AG with the same bytes (Korthikanti et al. 2022 [recalled]).
* PP: ``b*s*h*g`` forward + the same backward per micro-batch at each stage boundary; with TP, Megatron's
  scatter/gather sends ``b*s*h/t`` per rank (Narayanan 2021).  Bubble fraction of the ideal time
  ``(p-1)/m`` (Narayanan 2021 [paper]).
* CP (ring attention): about ``(c-1)*2*b*(s/c)*h_kv*g`` per attention layer forward, ~2x that
  backward [derived from Narayanan et al., SC'21].
* EP (MoE): ``2*b*s*k*h*g*(e-1)/e`` per MoE layer forward (dispatch + combine all-to-all), the same
  backward [derived].

Memory (Megatron ``megatron/training/theoretical_memory_usage.py``, see :func:`memory_per_gpu`): the
most loaded GPU (first pipeline stage, with the embedding) at 18 bytes per parameter without the
distributed optimizer, ``6 + 12/DP`` with it; activations per layer (sequence parallel + selective
recompute) ``s*b*h*(18 + 4*ffn/h) / t``; the first pipeline stage holds p micro-batches of l/p layers,
so l layers' worth in all, plus the embedding and (p == 1) output-layer terms.

Time: each collective is timed on the group that runs it -- TP inside a node on NVLink/PCIe, DP and
PP across nodes through the NICs of their ranks -- by ``gpucomm predict``'s model, the one cost model
(:class:`gpucomm.planners.collectives.cost.LayoutCost`: ``summarize`` of the group's GPUs on its number
of nodes, then ``predict``, under the ``--calibration`` profile).  Compute time uses
``6 * params * tokens`` FLOPs (no recompute) at an assumed 40% of the GPU's dense BF16 peak.
"""
from __future__ import annotations

import math
import re
from typing import Dict, List, Optional, Tuple

from gpucomm.probes import units
from gpucomm.probes.errors import InputError, PlanInfeasible
from gpucomm.planners.placement.nvldomain import NVLINK_DOMAIN_KEY, view_domain_nodes

# --------------------------------------------------------------------------------------------
# Presets: Meta Llama 3.1 model cards / params.json [recalled; the notes do not list them].
# Every preset is a Llama 3.1 decoder: RoPE with base 500000 and Llama 3.1's scaling (factor 8),
# untied input/output embeddings, SwiGLU, RMSNorm (eps 1e-5), GQA with 8 KV heads, no biases, no dropout.
LLAMA31 = {"rope_base": 500000, "rope_scaling": 8.0, "norm_eps": 1e-5}
PRESETS: Dict[str, dict] = {
    "llama-8b": {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336, "vocab": 128256,
                 "params": 8.03e9, **LLAMA31},
    "llama-70b": {"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "ffn": 28672, "vocab": 128256,
                  "params": 70.6e9, **LLAMA31},
    "llama-405b": {"layers": 126, "hidden": 16384, "heads": 128, "kv_heads": 8, "ffn": 53248, "vocab": 128256,
                   "params": 405.9e9, **LLAMA31},
}
# A custom model (key=value) is the same Llama-style decoder with Megatron's own defaults for what
# --model does not set (RoPE base 10000, no scaling, RMSNorm eps 1e-5).
CUSTOM_SHAPE = {"rope_base": 10000, "rope_scaling": None, "norm_eps": 1e-5}
PRESET_ALIASES = {"llama3-8b": "llama-8b", "llama3-70b": "llama-70b", "llama3-405b": "llama-405b",
                  "llama-3.1-8b": "llama-8b", "llama-3.1-70b": "llama-70b", "llama-3.1-405b": "llama-405b"}
# Training-run defaults applied to presets and custom specs alike (overridable in --model).
RUN_DEFAULTS = {"seq": 8192, "mbs": 1, "gbs": 1024, "dtype": "bf16", "zero": 1, "experts": 0, "topk": 2,
                "mfu": 0.4}
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1, "float16": 2, "bfloat16": 2, "float32": 4}
INT_KEYS = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq", "mbs", "gbs", "zero", "experts", "topk")
FLOAT_KEYS = ("params", "mfu")
ALL_KEYS = INT_KEYS + FLOAT_KEYS + ("dtype", "name")
LIMITS = {"layers": 10_000, "hidden": 1 << 20, "heads": 1 << 16, "kv_heads": 1 << 16, "ffn": 1 << 22,
          "vocab": 1 << 24, "seq": 1 << 24, "mbs": 1 << 16, "gbs": 1 << 24, "zero": 3, "experts": 1 << 16,
          "topk": 1 << 10}

# Dense BF16 tensor-core peak per GPU, TFLOP/s (NVIDIA datasheets [recalled]); only used to turn the
# pipeline bubble into seconds.
PEAK_TFLOPS_BY_SM = {60: 21, 70: 125, 75: 65, 80: 312, 86: 150, 89: 180, 90: 989, 100: 2250}

MEMORY_RESERVE = 0.10     # CUDA context, NCCL buffers and fragmentation


def parse_model_spec(text: Optional[str]) -> Optional[dict]:
    """``llama-70b``, ``llama-70b,seq=4096,gbs=256`` or
    ``layers=80,hidden=8192,heads=64,seq=8192,mbs=1,dtype=bf16,params=70e9,gbs=512`` -> model dict.

    Raises InputError (one line, naming the key) on unknown keys, non-numbers, absurd values."""
    if text is None:
        return None
    raw = str(text).strip()
    if not raw:
        raise InputError("--model is empty", expected="a preset (" + ", ".join(PRESETS) + ") or key=value list")
    model: dict = {}
    name = None
    for i, part in enumerate(p.strip() for p in raw.split(",")):
        if not part:
            continue
        if "=" not in part:
            key = part.lower()
            key = PRESET_ALIASES.get(key, key)
            if i == 0 and key in PRESETS:
                model.update(PRESETS[key])
                name = key
                continue
            raise InputError(f"--model: {part!r} is neither a preset nor key=value",
                             expected="one of " + ", ".join(PRESETS) + " or key=value")
        key, _, value = part.partition("=")
        key, value = key.strip().lower(), value.strip()
        key = {"micro_batch": "mbs", "global_batch": "gbs", "seq_len": "seq", "num_layers": "layers",
               "hidden_size": "hidden", "kv": "kv_heads", "ffn_hidden": "ffn"}.get(key, key)
        if key not in ALL_KEYS:
            raise InputError(f"--model: unknown key {key!r}", expected="one of " + ", ".join(ALL_KEYS))
        if key == "dtype":
            if value.lower() not in DTYPE_BYTES:
                raise InputError(f"--model: dtype={value!r}", expected="one of " + ", ".join(sorted(DTYPE_BYTES)))
            model["dtype"] = value.lower()
        elif key == "name":
            name = value or None
        elif key in INT_KEYS:
            try:
                f = float(value)
            except ValueError:
                raise InputError(f"--model: {key}={value!r} is not a number") from None
            if not math.isfinite(f) or f != int(f) or f < 0 or f > LIMITS[key]:
                raise InputError(f"--model: {key}={value!r} is out of range", expected=f"an integer 0..{LIMITS[key]}")
            model[key] = int(f)
        else:
            try:
                f = float(value)
            except ValueError:
                raise InputError(f"--model: {key}={value!r} is not a number") from None
            hi = 1e15 if key == "params" else 1.0
            if not math.isfinite(f) or f <= 0 or f > hi:
                raise InputError(f"--model: {key}={value!r} is out of range", expected=f"a number in (0, {hi:g}]")
            model[key] = f
    for k, v in RUN_DEFAULTS.items():
        model.setdefault(k, v)
    for k in ("layers", "hidden"):
        if not model.get(k):
            raise InputError(f"--model: {k} is required (or use a preset: " + ", ".join(PRESETS) + ")")
    model.setdefault("heads", max(1, model["hidden"] // 128))
    model.setdefault("kv_heads", model["heads"])
    model.setdefault("ffn", 4 * model["hidden"])
    model.setdefault("vocab", 32000)
    for k in ("heads", "kv_heads", "seq", "mbs", "gbs", "ffn"):
        if not model.get(k):
            raise InputError(f"--model: {k} must be > 0")
    if model["heads"] % model["kv_heads"]:
        raise InputError(f"--model: heads={model['heads']} is not a multiple of kv_heads={model['kv_heads']}")
    if model["hidden"] % model["heads"]:   # Megatron: kv_channels = hidden / heads (validate_args)
        raise InputError(f"--model: hidden={model['hidden']} is not a multiple of heads={model['heads']}")
    for k, v in CUSTOM_SHAPE.items():
        model.setdefault(k, v)
    if model["experts"] and not (1 <= model["topk"] <= model["experts"]):
        raise InputError(f"--model: topk={model['topk']} must be 1..experts={model['experts']}")
    if "params" not in model:
        model["params"] = float(count_params(model))
    model["name"] = name or "custom"
    return model


def count_params(model: dict) -> int:
    """Parameters of a Llama-style decoder (GQA attention, SwiGLU MLP, untied embeddings)."""
    h, l, ffn = model["hidden"], model["layers"], model["ffn"]
    kv_dim = h * model["kv_heads"] // model["heads"]
    attn = 2 * h * h + 2 * h * kv_dim
    mlp = 3 * h * ffn * max(1, model.get("experts") or 1)
    return l * (attn + mlp + 2 * h) + 2 * model["vocab"] * h


def expert_params(model: dict) -> float:
    if not model.get("experts"):
        return 0.0
    return float(model["layers"] * model["experts"] * 3 * model["hidden"] * model["ffn"])


# --------------------------------------------------------------------------------------------
def memory_per_gpu(model: dict, axes: Dict[str, int], micro_batches: Optional[int] = None) -> dict:
    """Megatron's theoretical memory of the most loaded GPU (bytes), after
    ``megatron/training/theoretical_memory_usage.py`` (sequence parallel + selective recompute):

    * weights+grads+optimizer: the most loaded shard is the first pipeline stage, which holds
      ``l/p`` layers *plus the input embedding* (``vocab*h``), and with ``p == 1`` the untied output
      layer as well: ``(transformer/p + embedding [+ embedding if p == 1]) / t`` parameters, times
      18 bytes (no distributed optimizer) or ``6 + 12/DP``.  Expert weights are divided by EP too.
      An uneven split counts the ``ceil(l/p)``-layer stage.
    * activations: ``s*b*h*(18 + 4*ffn/h)`` per layer, ``l`` layers' worth on the first stage (p
      micro-batches of l/p layers in flight; ``p*ceil(l/p)`` when uneven), plus the embedding
      input (``8*s*b*p``) and its dropout
      (``s*b*h*p``); times ``min(1, m/p)`` when fewer micro-batches than stages are in flight
      (non-interleaved 1F1B); with ``p == 1`` also the inputs of the output layer and the loss,
      ``4*s*b*h*(1 + vocab/h)``; all divided by ``t`` (and by ``cp``: each rank holds s/cp tokens).
    ZeRO-2/3 variants are [recalled], not Megatron's."""
    t, p, d, c, e = axes["tp"], axes["pp"], axes["dp"], axes["cp"], axes["ep"]
    et = axes.get("etp") or t
    # Megatron: expert weights are sharded over etp*ep and their optimizer state over the expert
    # data-parallel group, edp = tp*cp*dp / (etp*ep) (parallel_state.py's expert generator).
    edp = max(1, (t * c * d) // (et * e))
    layers = model["layers"]
    # Layers on the most loaded stage: l/p, or ceil(l/p) when the split is uneven (Megatron
    # --decoder-first/last-pipeline-num-layers); p stages of it in flight on the first stage.
    stage_layers = math.ceil(layers / p) if layers else 0
    stage_share = stage_layers / layers if layers else 1.0 / p
    psi_e = expert_params(model)
    embedding = float(model.get("vocab") or 0) * model["hidden"]
    # Presets and count_params() have untied input/output embeddings (Llama 3).
    transformer = max(0.0, model["params"] - psi_e - 2.0 * embedding)
    dense_shard = (transformer * stage_share + embedding + (embedding if p == 1 else 0.0)) / t
    expert_shard = psi_e * stage_share / (et * e)
    shard = dense_shard + expert_shard
    zero = model["zero"]

    def bytes_per_param(dd: int) -> float:
        if zero == 0:
            return 18.0
        if zero == 1:
            return 6.0 + 12.0 / dd         # Megatron distributed optimizer
        if zero == 2:
            return 2.0 + 16.0 / dd         # ZeRO-2: grads sharded too [recalled]
        return 18.0 / dd                   # ZeRO-3 / FSDP: everything sharded [recalled]

    per_param = bytes_per_param(d * c)  # Megatron shards the dense optimizer over the dp*cp group
    weights = dense_shard * per_param + expert_shard * bytes_per_param(edp)
    s, b, h = model["seq"] / c, model["mbs"], model["hidden"]
    activations = s * b * h * (18.0 + 4.0 * model["ffn"] / h) * p * stage_layers
    activations += 8.0 * s * b * p + s * b * h * p
    if p > 1 and micro_batches is not None:
        activations *= min(1.0, micro_batches / p)
    if p == 1:
        activations += s * b * h * 4.0 * (1.0 + float(model.get("vocab") or 0) / h)
    activations /= t
    return {"weights_optimizer": weights, "activations": activations, "total": weights + activations,
            "bytes_per_param": per_param, "params_on_gpu": shard}


def peak_tflops(view) -> Optional[float]:
    vals = []
    for i in view.index:
        t = view.topo.gpu(i)
        sm = t.sm if t.sm_source in ("record", "name") else None   # an assumed sm says nothing of the peak
        if sm is None:
            return None
        name = t.name or ""
        if sm == 90 and re.search(r"PCIe", name, re.I):
            vals.append(756.0)          # H100 PCIe
        elif sm == 90 and re.search(r"NVL", name):
            vals.append(835.0)          # H100 NVL
        elif sm in PEAK_TFLOPS_BY_SM:
            vals.append(float(PEAK_TFLOPS_BY_SM[sm]))
        else:
            best = max((k for k in PEAK_TFLOPS_BY_SM if k <= sm), default=None)
            if best is None:
                return None
            vals.append(float(PEAK_TFLOPS_BY_SM[best]))
    return min(vals) if vals else None


# --------------------------------------------------------------------------------------------
# Timing one collective on one group: predict's model (gpucomm.planners.collectives.cost.LayoutCost)
CALIBRATION_KEY = ("calibration",)   # view.cache entry: (profile, source) of --calibration
_OPTIONS_KEY = ("cost-options",)     # view.cache entry: summarize's options (use_cost_options)
_COST_KEY = ("layout-cost",)         # view.cache entry: the view's LayoutCost


def use_nvlink_domain(view, k: Optional[int]) -> None:
    """Nodes (trays) per NVLink domain of this view's job (``gpucomm plan --nvlink-domain K``; None: NCCL's
    default, from the GPUs' fabric info): which groups may span trays (nvldomain.fits_nvlink_domain).
    The cost model gets it through :func:`use_cost_options` (``nvlink_domain``)."""
    view.cache[NVLINK_DOMAIN_KEY] = k


def use_calibration(view, profile, source: str) -> None:
    """Time this view's collectives with a calibration profile (``gpucomm plan --calibration``)."""
    view.cache[CALIBRATION_KEY] = (profile, source)
    view.cache.pop(_COST_KEY, None)


def use_cost_options(view, **options) -> None:
    """Time this view's collectives with these options of ``cost.summarize`` -- what ``predict``
    passes for the same choice (``transport``, ``fabric_gbps``): one parameter for both commands."""
    view.cache[_OPTIONS_KEY] = dict(options)
    view.cache.pop(_COST_KEY, None)


def layout_cost(view):
    """The view's :class:`gpucomm.planners.collectives.cost.LayoutCost` (predict's model, under the
    ``--calibration`` profile and the options of :func:`use_cost_options`), built once per view."""
    lc = view.cache.get(_COST_KEY)
    if lc is None:
        from gpucomm.planners.collectives.cost import LayoutCost

        profile = (view.cache.get(CALIBRATION_KEY) or (None, None))[0]
        lc = view.cache[_COST_KEY] = LayoutCost(view.topo, profile, **view.cache.get(_OPTIONS_KEY, {}))
    return lc


def collective_time(kind: str, nbytes: float, tier: dict, view, dtype_bytes: int = 2) -> float:
    """Seconds for one ``kind`` collective of ``nbytes`` (nccl-tests' S) over one group described
    by ``tier`` (from ``Layout.axis_tier``: size, gpus, nodes, ...): ``gpucomm predict``'s time for
    ``tier['gpus']`` on each of ``tier['nodes']`` nodes (:func:`layout_cost`)."""
    if tier["size"] <= 1 or nbytes <= 0:
        return 0.0
    return layout_cost(view).seconds(kind, nbytes, tier["gpus"], int(tier.get("nodes", 1)), dtype_bytes,
                                     domain=tier.get("domain_nodes"))


def cost_model_name(view) -> str:
    """What timed the collectives of an estimate (shown with every ranked factorization)."""
    cal = view.cache.get(CALIBRATION_KEY) if view is not None else None
    return ("gpucomm predict (NCCL's tuning model over NCCL's graph search"
            + (f", calibrated by {cal[1]}" if cal else "") + ")")


# --------------------------------------------------------------------------------------------
def step_parts(model: dict, layout) -> dict:
    """Everything of one layout's step estimate but the collectives' times: the collectives of each
    axis (``comm``: axis -> (collective, message bytes, count per step, tier, what)), compute and
    bubble time, memory.  :func:`step_estimate` times the collectives and assembles the estimate."""
    axes = layout.axes
    t, p, d, c, e = axes["tp"], axes["pp"], axes["dp"], axes["cp"], axes["ep"]
    et = axes.get("etp") or t
    g = DTYPE_BYTES[model["dtype"]]
    b, s, h, l = model["mbs"], model["seq"], model["hidden"], model["layers"]
    world = t * p * d * c      # Megatron: experts are carved out of dp*cp, not a factor of the world
    edp = max(1, world // (et * e * p))
    if model["gbs"] % (b * d):
        raise PlanInfeasible(f"global batch {model['gbs']} is not a multiple of mbs*dp = {b * d}")
    m = model["gbs"] // (b * d)
    s_local = s / c
    # the slowest stage sets the pace: ceil when layers do not divide evenly across stages
    layers_per_stage = math.ceil(l / p)
    tier = layout.axis_tier      # the group of an axis, asked for only where the axis communicates
    comm: Dict[str, tuple] = {}
    # TP: 4 all-reduces of b*s*h per layer per micro-batch.
    if t > 1:
        size = b * s_local * h * g
        count = 4 * layers_per_stage * m
        comm["tp"] = ("all_reduce", size, count, tier("tp"), "4 all-reduces of b*s*h per layer per micro-batch")
    # PP: one activation forward + one gradient backward per micro-batch, scattered over TP ranks.
    if p > 1:
        size = b * s_local * h * g / t
        comm["pp"] = ("send_recv", size, 2 * m, tier("pp"), "b*s*h/t forward + backward per micro-batch")
    # CP: K/V blocks round the ring, (c-1) steps forward and 2x backward per attention layer.
    if c > 1:
        kv_dim = h * model["kv_heads"] / model["heads"]
        size = 2 * b * s_local * kv_dim * g
        count = 3 * (c - 1) * layers_per_stage * m
        comm["cp"] = ("send_recv", size, count, tier("cp"), "(cp-1) K/V block passes per attention layer, x3 fwd+bwd")
    # EP: dispatch + combine all-to-all per MoE layer, forward and backward.
    if e > 1 and model.get("experts"):
        size = b * s_local * model["topk"] * h * g
        count = 4 * layers_per_stage * m
        comm["ep"] = ("all_to_all", size, count, tier("ep"), "dispatch+combine per MoE layer, fwd+bwd")
    # DP: gradients of one model-parallel shard over the dp*cp group once per step.
    dd = d * c
    psi_e = expert_params(model)
    factor = 1.5 if model["zero"] >= 3 else 1.0
    if dd > 1:
        shard = (model["params"] - psi_e) / (t * p) + (psi_e / (et * p * e) if edp == dd and et == t else 0.0)
        comm["dp"] = ("all_reduce", shard * g * factor, 1, tier("dp-cp" if c > 1 else "dp"),
                      "gradient all-reduce (or RS+AG) of one model shard" + (", x1.5 ZeRO-3" if factor > 1 else ""))
    if psi_e and edp > 1 and not (edp == dd and et == t):
        # Expert weights reduce over the expert data-parallel group (Megatron's EXPERT_DATA_PARALLEL_GROUP).
        comm["edp"] = ("all_reduce", psi_e / (et * p * e) * g * factor, 1, tier("edp"),
                       "gradient all-reduce (or RS+AG) of one expert shard over the expert data-parallel group")
    peak = peak_tflops(layout.view)
    tokens = model["gbs"] * s
    active = model["params"] - expert_params(model) + expert_params(model) * (
        model["topk"] / model["experts"] if model.get("experts") else 0)
    flops = 6.0 * active * tokens
    # The slowest stage sets the pipeline's pace: with uneven stages (l % p != 0) every micro-batch
    # waits for a ceil(l/p)-layer stage, i.e. p*ceil(l/p)/l of the balanced time.
    imbalance = p * layers_per_stage / l if l else 1.0
    compute_s = flops / (world * peak * 1e12 * model["mfu"]) * imbalance if peak else None
    bubble_fraction = (p - 1) / m
    bubble_s = compute_s * bubble_fraction if compute_s is not None else None
    mem = memory_per_gpu(model, axes, m)
    cap = layout.view.memory_bytes()
    fits = None if cap is None else mem["total"] <= cap * (1 - MEMORY_RESERVE)
    return {"model": model, "layout": layout, "dtype_bytes": g, "micro_batches": m, "comm": comm,
            "peak": peak, "compute_s": compute_s, "bubble_fraction": bubble_fraction, "bubble_s": bubble_s,
            "memory": mem, "capacity": cap, "fits": fits, "layers_per_stage": layers_per_stage}


def comm_entry(parts: dict, axis: str) -> dict:
    """One axis's collectives of :func:`step_parts`, timed (``time_s`` per step)."""
    kind, size, count, tier, what = parts["comm"][axis]
    one = collective_time(kind, size, tier, parts["layout"].view, parts["dtype_bytes"])
    n = tier["size"]
    return {"collective": kind, "message_bytes": int(size), "count": round(count, 3),
            "bytes_per_gpu": int(size * units.busbw_factor(kind, n) * count), "time_s": _r(one * count),
            "group_size": n, "nodes_per_group": tier.get("nodes", 1), "where": tier.get("where"), "what": what}


def step_estimate(model: dict, layout, parts: Optional[dict] = None, timed: Optional[Dict[str, dict]] = None) -> dict:
    """Per-step communication volume and time per axis, bubble, memory fit, for one layout; every
    collective timed by predict's model (:func:`collective_time`).  ``parts``/``timed``: the layout's
    :func:`step_parts` and the axes already timed (:func:`comm_entry`), when the caller has them."""
    parts = parts if parts is not None else step_parts(model, layout)
    timed = timed or {}
    comm = {a: timed[a] if a in timed else comm_entry(parts, a) for a in parts["comm"]}
    p, l = layout.axes["pp"], model["layers"]
    compute_s, bubble_s, mem, cap, fits = parts["compute_s"], parts["bubble_s"], parts["memory"], parts["capacity"], parts["fits"]
    comm_s = sum(v["time_s"] for v in comm.values())
    step = (compute_s or 0.0) + (bubble_s or 0.0) + comm_s
    return {
        "model": {k: model[k] for k in sorted(model)},
        "micro_batches": parts["micro_batches"],
        "bubble_fraction": round(parts["bubble_fraction"], 6),
        "compute_s": _r(compute_s),
        "bubble_s": _r(bubble_s),
        "comm_s": _r(comm_s),
        "step_time_s": _r(step),
        "comm": comm,
        "memory": {"per_gpu_bytes": int(mem["total"]), "weights_optimizer_bytes": int(mem["weights_optimizer"]),
                   "activation_bytes": int(mem["activations"]), "bytes_per_param": round(mem["bytes_per_param"], 4),
                   "capacity_bytes": cap, "fits": fits},
        "cost_model": cost_model_name(layout.view),
        "assumptions": [f"{int(model['mfu'] * 100)}% of dense peak for compute" if parts["peak"] else "GPU peak unknown: no compute time",
                        "DP gradient reduction counted as exposed (no overlap)",
                        "1F1B pipeline without interleaving"]
        + ([f"{l} layers over pp={p}: uneven stages (Megatron --decoder-first/last-pipeline-num-layers); "
            f"the {parts['layers_per_stage']}-layer stages set the pace"] if l % p else []),
    }


def _r(x: Optional[float]) -> Optional[float]:
    return None if x is None else float(f"{x:.6g}")


def axis_weights(model: dict, axes: Dict[str, int]) -> Dict[str, float]:
    """Weights for the local GPU map: per-step bytes each axis moves (relative)."""
    b, s, h, l, g = model["mbs"], model["seq"], model["hidden"], model["layers"], DTYPE_BYTES[model["dtype"]]
    m = max(1, model["gbs"] // (b * axes["dp"]))
    w = {
        "tp": 8 * b * s * h * g * l / axes["pp"] * m,
        "pp": 2 * b * s * h * g * m,
        "cp": 6 * b * s * h * g * l / axes["pp"] * m,
        "ep": 4 * b * s * h * g * l / axes["pp"] * m if model.get("experts") else 1.0,
        "dp": 2 * model["params"] / (axes["tp"] * axes["pp"]) * g,
    }
    top = max(w.values()) or 1.0
    return {k: max(v / top * 100.0, 1e-3) for k, v in w.items()}


# --------------------------------------------------------------------------------------------
def _divisors(n: int) -> List[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def pipeline_split(layers: int, pp: int, vpp: Optional[int] = None) -> Optional[Tuple[int, int, int]]:
    """``(first, middle, last)`` layers per pipeline stage (``middle``: each of the ``pp - 2`` middle
    stages) for Megatron: ``layers/pp`` each when it divides, else the most balanced uneven split
    Megatron takes (``--decoder-first/last-pipeline-num-layers``; the middle stages even; every stage
    at least one layer; with ``vpp``, every stage's count a multiple of it), None when there is none.

    >>> pipeline_split(80, 4), pipeline_split(80, 3), pipeline_split(126, 16)
    ((20, 20, 20), (27, 26, 27), (7, 8, 7))
    """
    v = vpp if vpp and vpp > 1 else 1
    if pp < 1 or layers < pp * v:
        return None
    if layers % pp == 0:
        q = layers // pp
        return (q, q, q) if q % v == 0 else None
    if pp == 2:
        splits = [(f, 0, layers - f) for f in range(1, layers)]
    else:
        splits = []
        for mid in {layers // pp, -(-layers // pp)}:
            rest = layers - mid * (pp - 2)
            if mid >= 1 and rest >= 2:
                splits += [(f, mid, rest - f) for f in range(1, rest)]
    splits = [s for s in splits if all(x % v == 0 for x in s)]
    if not splits:
        return None
    # the least loaded busiest stage; then first and last as even as they can be, the smaller first
    # (the first stage holds the embedding too)
    return min(splits, key=lambda s: (max(s), abs(s[0] - s[2]), s[0] > s[2]))


def megatron_refusal(model: dict, axes: Dict[str, int], vpp: Optional[int] = None) -> Optional[str]:
    """Why Megatron-LM (``megatron/training/arguments.py`` validate_args), Megatron-Core
    (TransformerConfig, the tensor-parallel layers' ``divide``) or ``parallel_state`` would refuse
    ``model`` laid out as ``axes``; None when they accept it.  The checks, in their words:

    * heads a multiple of tp; query groups (KV heads) a multiple or a divisor of tp;
    * the MLP width (and the experts' width) a multiple of tp (etp): ColumnParallelLinear divides it;
    * layers over pp: evenly, or an uneven split with first/last stages (:func:`pipeline_split`),
      each stage a multiple of the virtual stages with interleaving (vpp needs pp > 2);
    * context parallelism: seq a multiple of 2*cp; sequence parallelism (every tp > 1 here, and
      required with MoE): seq/cp a multiple of tp;
    * experts a multiple of ep, ep > 1 only with experts; etp*ep | tp*cp*dp (the expert layout);
    * the global batch a multiple of micro-batch * dp."""
    tp, cp, dp, pp, ep = axes["tp"], axes["cp"], axes["dp"], axes["pp"], axes["ep"]
    etp = axes.get("etp") or tp
    heads, groups, seq = model["heads"], model["kv_heads"], model["seq"]
    if heads % tp:
        return f"{heads} attention heads are not a multiple of tp={tp}"
    if groups % tp and tp % groups:
        return f"{groups} query groups (KV heads) are neither a multiple nor a divisor of tp={tp}"
    if model["ffn"] % tp:
        return f"the MLP width {model['ffn']} is not a multiple of tp={tp}"
    if model.get("experts") and model["ffn"] % etp:
        return f"the experts' MLP width {model['ffn']} is not a multiple of etp={etp}"
    if vpp is not None and vpp > 1 and pp <= 2:
        return f"--vpp {vpp} (interleaved pipeline) needs pp > 2 (pp={pp}; with --overlap-p2p-comm pp > 1)"
    if pipeline_split(model["layers"], pp, vpp) is None:
        if vpp is not None and vpp > 1:
            return (f"{model['layers']} layers over pp={pp} do not split into {vpp} equal virtual stages per "
                    "pipeline rank")
        return f"{model['layers']} layers do not split over pp={pp} (every stage needs a layer)"
    if cp > 1 and seq % (2 * cp):
        return f"seq={seq} is not a multiple of 2*cp = {2 * cp} (context parallelism)"
    if tp > 1 and (seq // cp) % tp:
        return f"seq/cp = {seq // cp} is not a multiple of tp={tp} (sequence parallelism)"
    if model.get("experts"):
        if model["experts"] % ep:
            return f"{model['experts']} experts are not a multiple of ep={ep}"
    elif ep > 1:
        return f"ep={ep} without experts (--num-experts)"
    if (tp * cp * dp) % (etp * ep):
        return f"etp*ep = {etp * ep} does not divide tp*cp*dp = {tp * cp * dp} (expert layout)"
    if model["gbs"] % (model["mbs"] * dp):
        return f"gbs={model['gbs']} is not a multiple of mbs*dp = {model['mbs'] * dp}"
    return None


def candidate_axes(model: dict, total: int, gpn: int, fixed: Dict[str, Optional[int]],
                   uneven_pp: bool = False, domain_nodes: int = 1) -> List[Dict[str, int]]:
    """Every (tp, cp, ep, dp, pp) with ``tp*cp*dp*pp = total`` and ``ep | dp*cp`` that Megatron accepts for ``model``
    (:func:`megatron_refusal`), tp dividing the GPUs per node; pp divides the layers, or, with
    ``uneven_pp`` or an explicit --pp, splits them unevenly as Megatron's
    --decoder-first/last-pipeline-num-layers do.  Axes in ``fixed`` (non-None) are kept as given.
    ``domain_nodes`` > 1: consecutive nodes share an NVLink domain, and tp may also span whole trays of it."""
    out = []
    for tp in _divisors(gpn) + [gpn * m for m in _divisors(domain_nodes) if m > 1]:
        if fixed.get("tp") and tp != fixed["tp"]:
            continue
        rest_tp = total // tp if total % tp == 0 else None
        if rest_tp is None:
            continue
        for pp in _divisors(rest_tp):
            if fixed.get("pp") and pp != fixed["pp"]:
                continue
            if model["layers"] % pp and not fixed.get("pp") and not uneven_pp:
                continue
            rest_pp = rest_tp // pp
            for cp in _divisors(rest_pp):
                if fixed.get("cp") and cp != fixed["cp"]:
                    continue
                if not fixed.get("cp") and cp > 8:
                    continue
                dp = rest_pp // cp
                if fixed.get("dp") and dp != fixed["dp"]:
                    continue
                # Megatron carves the expert-parallel ranks out of dp*cp: etp*ep | tp*dp*cp.
                etp = fixed.get("etp") or tp
                eps = [e for e in _divisors(tp * dp * cp) if (tp * dp * cp) % (e * etp) == 0] \
                    if model.get("experts") else [1]
                for ep in eps:
                    if fixed.get("ep") and ep != fixed["ep"]:
                        continue
                    axes = {"tp": tp, "cp": cp, "ep": ep, "dp": dp, "pp": pp, "etp": etp}
                    if megatron_refusal(model, axes) is None:
                        out.append(axes)
    return out


def fits_somewhere(model: dict, total: int, gpn: int, capacity: int, fixed: Optional[Dict[str, Optional[int]]] = None
                   ) -> Optional[Dict[str, int]]:
    """The leanest factorization of ``total`` GPUs whose memory fits ``capacity`` bytes per GPU
    (Megatron's theoretical memory, :func:`memory_per_gpu`), or None -- arithmetic only, no layout."""
    best = None
    for uneven in (False, True):
        for axes in candidate_axes(model, total, gpn, fixed or {}, uneven_pp=uneven):
            m = model["gbs"] // (model["mbs"] * axes["dp"])
            mem = memory_per_gpu(model, axes, m)["total"]
            if mem <= capacity * (1 - MEMORY_RESERVE) and (best is None or mem < best[0]):
                best = (mem, axes)
        if best:
            return best[1]
    return None


def fit_suggestion(model: dict, gpn: int, nodes: int, capacity: Optional[int],
                   fixed: Optional[Dict[str, Optional[int]]] = None) -> str:
    """What would fit: the fewest whole nodes (up to 64 times as many) on which some factorization
    of ``model`` fits in ``capacity`` bytes per GPU."""
    if not capacity:
        return "GPU memory unknown"
    free = {k: v for k, v in (fixed or {}).items() if k in ("cp", "ep", "etp") and v}
    n = nodes + 1
    while n <= max(64 * nodes, 64):
        axes = fits_somewhere(model, n * gpn, gpn, capacity, free)
        if axes:
            return (f"it would fit on {n} nodes of {gpn} GPUs ({n * gpn} GPUs), e.g. --nodes {n} --tp {axes['tp']} "
                    f"--pp {axes['pp']} --dp {axes['dp']}")
        n = n + 1 if n < nodes + 8 else n * 2
    return f"nothing up to {max(64 * nodes, 64)} nodes fits: lower seq/mbs, or raise zero"


def rank_factorizations(view, nodes: int, gpn: int, model: dict, order: str,
                        fixed: Optional[Dict[str, Optional[int]]] = None, top: int = 5,
                        gpus: Optional[List[int]] = None, force: bool = False) -> List[dict]:
    """The ``top`` best candidates, best first: those that fit in memory by estimated step time
    (compute + bubble + exposed communication, every collective timed by predict's model,
    :func:`collective_time`), then those that do not fit by memory need (PlanInfeasible when none
    fits, unless ``force``).

    Every candidate is ranked by that one model, but timed only as far as it takes to know it cannot
    be among the first ``top``: candidates go in order of their compute + bubble time, and one stops
    being timed once that time plus its collectives timed so far (groups whose NCCL graphs are built
    first) exceeds the ``top``-th best step time found -- communication time is never negative, so
    the ranking is the one timing every candidate gives."""
    from gpucomm.planners.placement.layout import check_feasible, make_layout

    fixed = fixed or {}
    total = nodes * gpn
    domain_nodes = view_domain_nodes(view, nodes)
    cands: List[dict] = []
    seen: set = set()

    def screen(uneven: bool) -> None:
        for axes in candidate_axes(model, total, gpn, fixed, uneven_pp=uneven, domain_nodes=domain_nodes):
            try:
                check_feasible(view, axes, gpn, nodes)
                layout = make_layout(view, nodes, gpn, axes, order, axis_weights(model, axes), gpus)
                parts = step_parts(model, layout)
            except (PlanInfeasible, InputError):
                continue
            par = dict(layout.axes, order=layout.gen.order)
            k = tuple(sorted(par.items()))
            if k in seen:
                continue
            seen.add(k)
            cands.append({"parallelism": par, "layout": layout, "parts": parts, "local_gpus": layout.local_gpus})

    screen(False)
    if not any(c["parts"]["fits"] is not False for c in cands):
        # Nothing fits with pp | layers (llama-405b: 126 layers, power-of-two GPU counts allow only
        # pp = 1 or 2): deeper, uneven pipelines are how such models are trained (Llama 3 405B:
        # 126 layers on pp=16).
        screen(True)
    if not cands:
        why = []
        if fixed.get("tp") and model["heads"] % fixed["tp"]:
            why.append(f"tp={fixed['tp']} does not divide {model['heads']} heads")
        if fixed.get("dp") and model["gbs"] % (model["mbs"] * fixed["dp"]):
            why.append(f"gbs={model['gbs']} is not a multiple of mbs*dp = {model['mbs'] * fixed['dp']}")
        raise PlanInfeasible(f"no factorization of {total} GPUs suits {model['name']} as Megatron-LM checks it: "
                             + ("; ".join(why) if why else
                                f"needs tp | heads ({model['heads']}), KV groups ({model['kv_heads']}), the MLP width "
                                f"and GPUs per node, layers ({model['layers']}) split over pp, "
                                f"tp*cp | seq ({model['seq']}), mbs*dp | gbs ({model['mbs']}, {model['gbs']})"))

    def shape(p: dict) -> Tuple:
        return (p["tp"] * p["pp"] * p["cp"] * p["ep"], p["tp"], p["pp"], p["cp"], p["ep"])

    def key(r: dict) -> Tuple:
        est = r["estimate"]
        fits = est["memory"]["fits"]
        return (0 if fits in (True, None) else 1,
                est["step_time_s"] if fits in (True, None) else est["memory"]["per_gpu_bytes"]) + shape(r["parallelism"])

    if all(c["parts"]["fits"] is False for c in cands) and not force:
        best = min(cands, key=lambda c: (c["parts"]["memory"]["total"],) + shape(c["parallelism"]))["parts"]
        raise PlanInfeasible(does_not_fit(model, {"per_gpu_bytes": int(best["memory"]["total"]),
                                                  "capacity_bytes": best["capacity"]}, gpn, nodes, fixed))
    top = max(1, top)
    lc = layout_cost(view)
    rows: List[dict] = []
    failed: Dict[str, None] = {}
    fitting = [c for c in cands if c["parts"]["fits"] is not False]
    floor = {id(c): (c["parts"]["compute_s"] or 0.0) + (c["parts"]["bubble_s"] or 0.0) for c in fitting}
    fitting.sort(key=lambda c: (floor[id(c)],) + shape(c["parallelism"]))
    for c in fitting:
        # the top-th best step time so far; a step time above it (beyond rounding) cannot rank
        bound = rows[top - 1]["estimate"]["step_time_s"] * (1 + 1e-5) if len(rows) >= top else math.inf
        if floor[id(c)] > bound:
            break                       # and so does every later candidate (sorted by floor)
        parts, timed = c["parts"], {}
        spent = floor[id(c)]
        # groups whose graphs are built first, then the fewest nodes (the cheapest searches)
        todo = sorted(parts["comm"], key=lambda a: (not lc.has_graph(parts["comm"][a][3]["gpus"],
                                                                    parts["comm"][a][3].get("nodes", 1),
                                                                    parts["comm"][a][3].get("domain_nodes")),
                                                    parts["comm"][a][3].get("nodes", 1), a))
        for a in todo:
            try:
                timed[a] = comm_entry(parts, a)
            except PlanInfeasible as e:
                failed[str(e)] = None   # NCCL would fail to initialise one of the layout's groups
                break
            spent += timed[a]["time_s"]
            if spent > bound:
                break
        if len(timed) < len(todo):
            continue
        rows.append({"parallelism": c["parallelism"], "local_gpus": c["local_gpus"],
                     "estimate": step_estimate(model, c["layout"], parts, timed)})
        rows.sort(key=key)
        del rows[top:]
    if len(rows) < top:
        # then the candidates that do not fit, leanest first
        over = sorted((c for c in cands if c["parts"]["fits"] is False),
                      key=lambda c: (c["parts"]["memory"]["total"],) + shape(c["parallelism"]))
        for c in over[:top - len(rows)]:
            try:
                est = step_estimate(model, c["layout"], c["parts"])
            except PlanInfeasible:
                continue
            rows.append({"parallelism": c["parallelism"], "local_gpus": c["local_gpus"], "estimate": est})
    for why in failed:
        view.notes.append(f"candidate factorizations with a group NCCL cannot run left out ({why})")
    if (fitting and not any(r["estimate"]["memory"]["fits"] is not False for r in rows)) or not rows:
        raise PlanInfeasible(f"no layout of {model['name']} on {total} GPUs that fits can run: NCCL would fail "
                             "to initialise a group of every one")
    for i, r in enumerate(rows, 1):
        r["rank"] = i
    return rows


def does_not_fit(model: dict, memory: dict, gpn: int, nodes: int, fixed: Optional[Dict[str, Optional[int]]] = None,
                 layout: Optional[str] = None) -> str:
    """Why ``model`` does not fit (``memory``: a step estimate's memory, fits False): one sentence
    for the ranked path (the leanest layout) and for sizes given explicitly (``layout``) alike."""
    need, cap = memory["per_gpu_bytes"] / 2**30, memory["capacity_bytes"] / 2**30
    what = f"as {layout}" if layout else "the leanest layout"
    return (f"{model['name']} does not fit on {nodes * gpn} GPUs: {what} needs {need:.1f} GiB per GPU, "
            f"{cap:.1f} GiB available ({need - cap:.1f} GiB short); "
            + fit_suggestion(model, gpn, nodes, memory["capacity_bytes"], fixed))


# --------------------------------------------------------------------------------------------
# Megatron-LM and DeepSpeed arguments for a plan
def megatron_arguments(parallelism: dict, model: Optional[dict] = None, vpp: Optional[int] = None) -> dict:
    """The Megatron-LM command-line arguments (``megatron/training/arguments.py``) that give the
    plan's layout: ``{"args": [[flag, value or None], ...], "notes": [...]}``.

    Megatron derives the data-parallel size (world / (tp*cp*pp)) and the expert data-parallel size
    itself; the order is ``tp-cp-ep-dp-pp`` unless ``--use-tp-pp-dp-mapping`` (``tp-cp-ep-pp-dp``,
    which Megatron allows only without CP and EP).  TP > 1 gets ``--sequence-parallel`` (MoE with TP
    needs it; the memory estimate assumes it).  With a model, a layout Megatron would refuse
    (:func:`megatron_refusal`) is PlanInfeasible; layers that do not divide by pp get
    ``--decoder-first/last-pipeline-num-layers`` (:func:`pipeline_split`); interleaving (``vpp``
    virtual stages per pipeline rank) needs pp > 2 and gives ``--num-layers-per-virtual-pipeline-stage``
    for even stages, else ``--num-virtual-stages-per-pipeline-rank``; and the model's own shape
    flags follow (RoPE, untied embeddings, SwiGLU, RMSNorm, GQA groups, widths, vocabulary, no
    biases or dropout), since Megatron's defaults describe another model.

    >>> a = megatron_arguments({"tp": 2, "cp": 1, "ep": 4, "dp": 4, "pp": 1, "etp": 2, "edp": 1,
    ...                         "order": "tp-cp-ep-dp-pp"})
    >>> [" ".join(str(x) for x in kv if x is not None) for kv in a["args"]][:4]
    ['--tensor-model-parallel-size 2', '--pipeline-model-parallel-size 1', '--context-parallel-size 1', '--expert-model-parallel-size 4']
    """
    p = parallelism
    t, c, e, pp = p["tp"], p["cp"], p["ep"], p["pp"]
    et = p.get("etp") or t
    args: List[list] = [["--tensor-model-parallel-size", t], ["--pipeline-model-parallel-size", pp],
                        ["--context-parallel-size", c], ["--expert-model-parallel-size", e]]
    notes: List[str] = []
    if e > 1 or et != t:
        args.append(["--expert-tensor-parallel-size", et])
    order = p.get("order") or "tp-cp-ep-dp-pp"
    canonical = order.split("-")
    if canonical == ["tp", "cp", "ep", "pp", "dp"]:
        if c > 1 or e > 1:
            raise PlanInfeasible("Megatron's --use-tp-pp-dp-mapping (order tp-cp-ep-pp-dp) does not allow CP or EP "
                                 f"(cp={c}, ep={e})")
        args.append(["--use-tp-pp-dp-mapping", None])
    elif canonical != ["tp", "cp", "ep", "dp", "pp"]:
        notes.append(f"order {order}: Megatron's command line offers tp-cp-ep-dp-pp and --use-tp-pp-dp-mapping "
                     f"only; pass order={order!r} to megatron.core.parallel_state.initialize_model_parallel")
    if t > 1:
        # Megatron: MoE with TP needs sequence parallelism; for dense models it is what the memory
        # estimate assumes (activations / tp) -- and Megatron-LM's own Llama recipes set it
        args.append(["--sequence-parallel", None])
    if model:
        why = megatron_refusal(model, dict(p, etp=et), vpp)
        if why:
            raise PlanInfeasible(f"Megatron-LM would refuse {model['name']} with tp={t} cp={c} ep={e} pp={pp}"
                                 + (f" vpp={vpp}" if vpp and vpp > 1 else "") + f": {why}")
    if model and model.get("experts"):
        args += [["--num-experts", model["experts"]], ["--moe-router-topk", model["topk"]]]
    elif e > 1:
        notes.append(f"add --num-experts N (a multiple of ep={e}) for your MoE model"
                     + ("; Megatron-Core allows linear biases in MoE layers only with expert TP 1: "
                        "add --disable-bias-linear" if et > 1 else ""))
    if vpp is not None and vpp < 1:
        raise InputError(f"--vpp {vpp}", expected="an integer >= 1")
    if vpp is not None and vpp > 1 and pp <= 2:
        raise PlanInfeasible(f"--vpp {vpp} (interleaved pipeline) needs pp > 2 in Megatron (pp={pp}; with "
                             "--overlap-p2p-comm pp > 1)")
    split = pipeline_split(model["layers"], pp, vpp) if model else None
    if split is not None and len(set(split)) > 1:
        args += [["--decoder-first-pipeline-num-layers", split[0]], ["--decoder-last-pipeline-num-layers", split[2]]]
        notes.append(f"{model['layers']} layers over pp={pp}: {split[0]} on the first stage, {split[1]} on each "
                     f"middle one, {split[2]} on the last")
    if vpp is not None and vpp > 1:
        if split is not None and split[0] == split[1] == split[2]:
            args.append(["--num-layers-per-virtual-pipeline-stage", split[1] // vpp])
        else:
            args.append(["--num-virtual-stages-per-pipeline-rank", vpp])
    if model:
        args += [["--num-layers", model["layers"]], ["--hidden-size", model["hidden"]],
                 ["--ffn-hidden-size", model["ffn"]], ["--num-attention-heads", model["heads"]]]
        if model["kv_heads"] != model["heads"]:
            args += [["--group-query-attention", None], ["--num-query-groups", model["kv_heads"]]]
        # the Llama-style decoder count_params() describes: RoPE, untied embeddings, SwiGLU MLP,
        # RMSNorm, no linear biases (Megatron-Core also refuses MoE biases with expert TP > 1), no
        # dropout; Megatron's defaults are learned absolute positions, tied embeddings, GeLU,
        # LayerNorm, biases and 0.1 dropout
        args += [["--position-embedding-type", "rope"], ["--rotary-base", model.get("rope_base") or 10000]]
        if model.get("rope_scaling"):
            args += [["--use-rope-scaling", None], ["--rope-scaling-factor", model["rope_scaling"]]]
        args += [["--untie-embeddings-and-output-weights", None], ["--swiglu", None],
                 ["--normalization", "RMSNorm"], ["--norm-epsilon", model.get("norm_eps") or 1e-5],
                 ["--disable-bias-linear", None], ["--attention-dropout", 0.0], ["--hidden-dropout", 0.0]]
        args += [["--seq-length", model["seq"]], ["--max-position-embeddings", model["seq"]],
                 ["--vocab-size", model["vocab"]],
                 ["--micro-batch-size", model["mbs"]], ["--global-batch-size", model["gbs"]]]
        notes.append(f"--vocab-size {model['vocab']} is the model's; Megatron takes the vocabulary from the tokenizer "
                     "(--tokenizer-type/--tokenizer-model) when one is given, and pads it to a multiple of 128*tp")
        if model["dtype"] in ("bf16", "bfloat16"):
            args.append(["--bf16", None])
        elif model["dtype"] in ("fp16", "float16"):
            args.append(["--fp16", None])
        if model.get("zero", 1) >= 1:
            args.append(["--use-distributed-optimizer", None])
    return {"args": args, "notes": notes}


# DeepSpeed's PipelineEngine (deepspeed/runtime/pipe/engine.py) asserts a ZeRO stage below 2:
# "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism".
DEEPSPEED_PIPELINE_MAX_ZERO = 1


def deepspeed_config(parallelism: dict, model: Optional[dict] = None, notes: Optional[List[str]] = None) -> dict:
    """A DeepSpeed config (``ds_config.json``) consistent with the plan: DeepSpeed's batch rule
    ``train_batch_size = train_micro_batch_size_per_gpu * gradient_accumulation_steps * data-parallel
    size`` with the plan's dp (DeepSpeed counts dp*cp ranks as data parallel when no sequence/context
    engine is used, so the plan's dp is what it divides by), ZeRO stage and precision from
    ``--model`` (defaults: :data:`RUN_DEFAULTS`' global batch, micro-batch 1, ZeRO-1, bf16; without
    a model the global batch is the default rounded up to a multiple of dp).  With pipeline
    parallelism the ZeRO stage is at most 1 (DeepSpeed's pipeline engine refuses 2 and 3).
    What was changed from the request is said in ``notes``."""
    notes = notes if notes is not None else []
    dp = parallelism["dp"] * parallelism["cp"]
    mbs = (model or {}).get("mbs", RUN_DEFAULTS["mbs"])
    gbs = model["gbs"] if model is not None else -(-RUN_DEFAULTS["gbs"] // (mbs * dp)) * mbs * dp
    if gbs % (mbs * dp):
        raise PlanInfeasible(f"global batch {gbs} is not a multiple of micro-batch*dp = {mbs * dp}")
    dtype = (model or {}).get("dtype", RUN_DEFAULTS["dtype"])
    zero = min(3, (model or {}).get("zero", RUN_DEFAULTS["zero"]))
    if parallelism["pp"] > 1 and zero > DEEPSPEED_PIPELINE_MAX_ZERO:
        notes.append(f"DeepSpeed config: ZeRO stage {DEEPSPEED_PIPELINE_MAX_ZERO} instead of {zero}: DeepSpeed's "
                     f"pipeline engine refuses ZeRO 2 and 3 with pipeline parallelism (pp={parallelism['pp']})")
        zero = DEEPSPEED_PIPELINE_MAX_ZERO
    cfg = {
        "train_batch_size": gbs,
        "train_micro_batch_size_per_gpu": mbs,
        "gradient_accumulation_steps": gbs // (mbs * dp),
        "zero_optimization": {"stage": zero},
        "bf16": {"enabled": dtype in ("bf16", "bfloat16")},
        "fp16": {"enabled": dtype in ("fp16", "float16")},
        "gradient_clipping": 1.0,
        "steps_per_print": 100,
    }
    return cfg
