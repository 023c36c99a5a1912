"""Field-by-field comparison of our model of NCCL with NCCL's own code run by ncclsim (NCCL 2.30.7's
topology, search and tuning sources on a CPU): the compact "golden" form of an ``ncclsim --json``
document (or of :meth:`gpucomm.planners.nccl.comm.CommResult.to_ncclsim`, the same shape), the
comparison, and the agreement table.

Fields compared (the issue's list): GPU->GPU and GPU->NIC path type and bandwidth (every pair),
the ring/tree/NVLS graphs (channels, bandwidth per channel, types, the channels' GPU and NIC
order), the channels after ``ncclTopoPostset``, NCCL's node count, ring 0 and the trees after
setup, and per message size the algorithm/protocol NCCL's tuning model picks for all_reduce,
all_gather and reduce_scatter with its predicted time.  Floats are compared to ncclsim's printed
precision (6 significant digits).
"""
from __future__ import annotations

from typing import Iterable, Optional

SIZES = tuple(8 << i for i in range(31))        # 8 B .. 8 GiB
COLLS = ("all_reduce", "all_gather", "reduce_scatter")
_KEYS = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reducescatter"}
REL = 2e-5

CASE_FIELDS = ("MNNVL clique", "paths GPU-GPU", "paths GPU-NIC", "ring channels", "ring bw per channel",
               "ring total bw", "ring GPU/NIC order", "tree channels", "tree bw", "tree order", "NVLS channels",
               "NVLS bw", "NCCL nodes", "channels after setup", "ring 0 after setup", "trees after setup")
SIZE_FIELDS = tuple(f"{c} {k}" for c in COLLS for k in ("algo/proto", "time"))


def _close(a: float, b: float) -> bool:
    return abs(float(a) - float(b)) <= REL * max(1e-6, abs(float(a)), abs(float(b)))


def compact(js: dict) -> dict:
    """The compared fields of an ncclsim/model JSON document, in lists (small golden files)."""
    def graph(x: Optional[dict]) -> Optional[dict]:
        if x is None:
            return None
        return {"n": x["nChannels"], "bwIntra": x["bwIntra"], "bwInter": x["bwInter"], "typeIntra": x["typeIntra"],
                "typeInter": x["typeInter"], "pattern": x["pattern"], "same": x["sameChannels"],
                "crossNic": x["crossNic"], "nHops": x["nHops"],
                "channels": [list(c["ranks"]) + list(c.get("nets", [])) for c in x["channels"]]}

    paths = js.get("paths") or {}
    gg = [[f["from"], t["rank"], t["type"], t["bw"]] for f in paths.get("gpu_gpu", []) for t in f["to"]
          if t["rank"] != f["from"]]
    gn = [[f["from"], t["net"], t["type"], t["bw"]] for f in paths.get("gpu_net", []) for t in f["to"]]
    c = js["comm"]
    out = {
        "gpus": [[g["rank"], g["gpu"], g["sm"]] for g in js.get("gpus", [])],
        **({"mnnvl": [js["mnnvl"][k] for k in ("MNNVL", "cliqueSize", "nvlDomainSize", "hosts")]}
           if js.get("mnnvl") else {}),
        "nets": [[n["dev"], n["name"], n["bw"]] for n in js.get("nets", [])],
        "system": [js["system"]["maxBw"], js["system"]["totalBw"], js["system"]["inter"]],
        "gpu_gpu": gg, "gpu_net": gn,
        "ring": graph(js["graphs"].get("ring")), "tree": graph(js["graphs"].get("tree")),
        "nvls": graph(js["graphs"].get("nvls")),
        "comm": {"nChannels": c["nChannels"], "collChannels": c["collChannels"], "nvlsSupport": c["nvlsSupport"],
                 "nvlsChannels": c["nvlsChannels"], "nNodes": c["nNodes"],
                 "ring0": c["rings"][0] if c["rings"] else [], "trees": [[t["up"]] + list(t["down"]) for t in c["trees"]]},
    }
    for coll, key in _KEYS.items():
        if key in js:
            out[coll] = [[r["bytes"], r["algo"], r["proto"], r["nChannels"], r["nWarps"], r["time_us"]] for r in js[key]]
    return out


def _graph_fields(a: Optional[dict], b: Optional[dict]) -> dict:
    if a is None and b is None:
        return {"n": True, "bw": True, "order": True}
    if a is None or b is None:
        return {"n": False, "bw": False, "order": False}
    return {"n": a["n"] == b["n"],
            "bw": _close(a["bwIntra"], b["bwIntra"]) and _close(a["bwInter"], b["bwInter"]) and
            a["typeIntra"] == b["typeIntra"] and a["typeInter"] == b["typeInter"],
            "order": a["channels"] == b["channels"] and a["pattern"] == b["pattern"]}


def compare(golden: dict, model: dict) -> tuple[dict, dict]:
    """(case fields -> bool, size fields -> [bool per size]) for one case (both compacted)."""
    def pairs(x: list, y: list) -> bool:
        return len(x) == len(y) and all(p[:3] == q[:3] and _close(p[3], q[3]) for p, q in zip(x, y))

    r = _graph_fields(golden["ring"], model["ring"])
    t = _graph_fields(golden["tree"], model["tree"])
    v = _graph_fields(golden.get("nvls"), model.get("nvls"))
    gr, mr = golden["ring"], model["ring"]
    total = gr is not None and mr is not None and _close(gr["n"] * gr["bwIntra"], mr["n"] * mr["bwIntra"])
    gc, mc = golden["comm"], model["comm"]
    case = {
        "MNNVL clique": golden.get("mnnvl") == model.get("mnnvl") and golden["gpus"] == model["gpus"],
        "paths GPU-GPU": pairs(golden["gpu_gpu"], model["gpu_gpu"]),
        "paths GPU-NIC": pairs(golden["gpu_net"], model["gpu_net"]),
        "ring channels": r["n"], "ring bw per channel": r["bw"], "ring total bw": total,
        "ring GPU/NIC order": r["order"], "tree channels": t["n"], "tree bw": t["bw"], "tree order": t["order"],
        "NVLS channels": v["n"] and gc["nvlsChannels"] == mc["nvlsChannels"], "NVLS bw": v["bw"],
        "NCCL nodes": gc["nNodes"] == mc["nNodes"],
        "channels after setup": gc["nChannels"] == mc["nChannels"] and gc["collChannels"] == mc["collChannels"],
        "ring 0 after setup": gc["ring0"] == mc["ring0"], "trees after setup": gc["trees"] == mc["trees"],
    }
    sizes: dict = {}
    for coll in COLLS:
        g, m = golden.get(coll), model.get(coll)
        if g is None or m is None:
            continue
        sizes[f"{coll} algo/proto"] = [x[1:3] == y[1:3] for x, y in zip(g, m)]
        sizes[f"{coll} time"] = [x[1:5] == y[1:5] and _close(x[5], y[5]) for x, y in zip(g, m)]
    return case, sizes


def model_case(xml_text: str, case: dict) -> dict:
    """Our model's compact answer for one golden case (``nodes``, ``gpus``, ``env``) on the XML text:
    :func:`gpucomm.planners.nccl.comm.nccl_comm` with the case's NCCL_* settings, in the golden form;
    ``{"error": ...}`` where our model says NCCL fails to initialise (ncclsim's golden then has one too)."""
    from gpucomm.planners.nccl import mnnvl
    from gpucomm.planners.nccl.comm import NcclFailed, nccl_comm
    from gpucomm.planners.nccl.settings import NcclSettings
    from gpucomm.probes.errors import GpucommError

    s = NcclSettings.from_env(case.get("env") or {})
    try:
        fabric = None
        m = case.get("mnnvl")
        if m:
            # the harness's --mnnvl-clique/--mnnvl-domain/--fabric-state layout
            from gpucomm.planners.nccl import ncclxml as X

            per_host = len(case["gpus"]) if case.get("gpus") else len(X.Machine(X.parse(xml_text)).gpus)
            fabric = mnnvl.grouped(case.get("nodes", 1), per_host, m["clique"], m.get("domain"),
                                   m.get("state", mnnvl.COMPLETED))
        res = nccl_comm(xml_text, nodes=case.get("nodes", 1), gpus=case.get("gpus"), settings=s, fabric=fabric)
        return compact(res.to_ncclsim(SIZES, COLLS))
    except NcclFailed as e:
        return {"error": str(e)}
    except GpucommError as e:   # an input NCCL would refuse too (no GPU, no NIC for several nodes)
        return {"error": str(e)}


def compare_case(golden: dict, model: dict) -> tuple[dict, dict]:
    """:func:`compare`, where either side may be an error: both errors agree on every field, one error
    disagrees on every field."""
    if "error" in golden or "error" in model:
        ok = "error" in golden and "error" in model
        case = {k: ok for k in CASE_FIELDS}
        sizes = {k: [ok] * len(SIZES) for k in SIZE_FIELDS}
        return case, sizes
    return compare(golden, model)


def differing(case: dict, sizes: dict) -> list:
    """Names of the fields that differ in one compared case."""
    out = [k for k, ok in case.items() if not ok]
    out += [k for k, oks in sizes.items() if not all(oks)]
    return out


def agreement(results: Iterable[tuple]) -> list:
    """Rows ``(field, agree, total, percent)`` over ``(case fields, size fields)`` results."""
    counts: dict = {}
    for case, sizes in results:
        for k, ok in case.items():
            a = counts.setdefault(k, [0, 0])
            a[0] += bool(ok)
            a[1] += 1
        for k, oks in sizes.items():
            a = counts.setdefault(k, [0, 0])
            a[0] += sum(bool(o) for o in oks)
            a[1] += len(oks)
    order = list(CASE_FIELDS) + list(SIZE_FIELDS)
    rows = []
    for k in order + sorted(set(counts) - set(order)):
        if k in counts:
            a, n = counts[k]
            rows.append((k, a, n, round(100.0 * a / n, 2) if n else 100.0))
    return rows


def format_table(rows: list, title: str = "") -> str:
    lines = [title] if title else []
    lines.append(f"{'field':<28} {'agree':>7} {'of':>7} {'%':>7}")
    for k, a, n, p in rows:
        lines.append(f"{k:<28} {a:>7} {n:>7} {p:>7.2f}")
    return "\n".join(lines)


__all__ = ["SIZES", "COLLS", "compact", "compare", "compare_case", "model_case", "differing", "agreement", "format_table"]
