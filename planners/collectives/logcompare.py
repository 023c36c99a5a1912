"""NCCL's own debug log beside our model: ``gpucomm rings/trees --compare LOG``.

A log parsed by :mod:`gpucomm.probes.formats.nccllog` is put next to our rings/trees (``plan``) and our
model of NCCL (:func:`gpucomm.planners.nccl.comm.nccl_reference`): which GPU each rank was (by PCI
bus id, else CUDA device), NCCL's graphs against the model's, the pairs where NCCL had no P2P
(SHM transport) and what the model gives without them, path types from NCCL's topology dump
against ours.  :func:`compare_rings` and :func:`compare_trees` write the verdict the CLI prints.
Pure functions, no I/O.
"""
from __future__ import annotations

import re
from typing import Any, Optional

from gpucomm.probes.formats.nccllog import PATH_TYPES, TREE_PATTERNS, nccl_bus_id
from gpucomm.probes.topology import Topology


def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:g}"
    return str(x)


def pick_graph(log: dict, patterns: tuple) -> Optional[dict]:
    """The graph of one of ``patterns`` printed for the lowest ranks (node 0's view; every node
    prints its own ranks)."""
    cands = [g for g in log.get("graphs") or [] if g["pattern"] in patterns]
    if not cands:
        return None
    return min(cands, key=lambda g: (min((r for c in g["channels"] for r in c["ranks"]), default=1 << 40),
                                     g.get("line") or 0))


def _bus_ids(topo: Topology) -> dict:
    """GPU index -> PCI bus id (lower case) of the GPUs that have one."""
    return {g.index: g.pci_bus_id.lower() for g in topo.gpus if g.pci_bus_id}


def rank_to_gpu(log: dict, topo: Topology, gpus: list) -> tuple:
    """Local rank -> GPU index of ``topo`` for the ``len(gpus)`` ranks of a node: by PCI bus id (the
    log's topology dump, comm lines or nccl-tests header), else by CUDA device (assumes no
    CUDA_VISIBLE_DEVICES reordering), else local rank k = k-th of ``gpus``.  Returns (mapping,
    how, warnings)."""
    L = log.get("local_ranks") or len(gpus)
    n = len(gpus)
    bus_to_idx = {b: i for i, b in _bus_ids(topo).items() if i in gpus}
    by_bus: dict = {}
    by_dev: dict = {}
    for info in sorted(log.get("ranks") or [], key=lambda x: x["rank"]):
        lr = info["rank"] % L if L else None
        if lr is None or lr >= n:
            continue
        if info.get("bus_id") and info["bus_id"] in bus_to_idx:
            by_bus.setdefault(lr, bus_to_idx[info["bus_id"]])
        if info.get("cuda_dev") is not None and info["cuda_dev"] in gpus:
            by_dev.setdefault(lr, info["cuda_dev"])
    warnings = []
    mapping, hows = {}, set()
    for lr in range(n):
        if lr in by_bus:
            mapping[lr] = by_bus[lr]
            hows.add("PCI bus id")
        elif lr in by_dev:
            mapping[lr] = by_dev[lr]
            hows.add("CUDA device")
        else:
            mapping[lr] = gpus[lr]
            hows.add("local rank order")
    if len(set(mapping.values())) != len(mapping):
        warnings.append("the log's ranks map to the same GPU twice (CUDA_VISIBLE_DEVICES?); "
                        "ranks are matched to GPUs in local rank order instead")
        mapping = {lr: gpus[lr] for lr in range(n)}
        hows = {"local rank order"}
    order = ("PCI bus id", "CUDA device", "local rank order")
    return mapping, " + ".join(h for h in order if h in hows), warnings


def _layout_warnings(log: dict, nodes: int, ngpus: int) -> list:
    out = []
    lnodes, local, nranks = log.get("nnodes"), log.get("local_ranks"), log.get("nranks")
    if lnodes is not None and lnodes != nodes:
        out.append(f"the log is from {lnodes} node(s) ({nranks} ranks); this plan is for --nodes {nodes}: "
                   f"rerun with --nodes {lnodes} to compare like with like")
    if local is not None and local != ngpus:
        out.append(f"the log has {local} ranks per node; this plan uses {ngpus} GPUs per node "
                   f"(--gpus to pick the same ones)")
    if lnodes is None and local is None and nranks is not None and nranks != nodes * ngpus:
        out.append(f"the log has {nranks} ranks; this plan has {nodes} x {ngpus}")
    return out


def _graph_summary(g: Optional[dict], L: Optional[int], mapping: dict) -> Optional[dict]:
    if g is None:
        return None
    chans = []
    for c in g["channels"]:
        gpus_ = None
        if L and c["ranks"] and all((r % L) in mapping for r in c["ranks"]):
            gpus_ = [mapping[r % L] for r in c["ranks"]]
        chans.append({"nets": list(c["nets"]), "ranks": list(c["ranks"]), "gpus": gpus_})
    return {k: g[k] for k in ("pattern", "pattern_name", "n_channels", "bw_intra", "bw_inter", "type_intra",
                              "type_inter", "cross_nic", "same_channels", "hosts")} | {"channels": chans}


def _node_chain(order: list, L: int, node: int = 0) -> Optional[list]:
    """The stretch of a cyclic ring order that runs through ``node`` (ranks node*L ..), rotated so
    it is contiguous; None when the node's ranks are not one stretch."""
    mine = [i for i, r in enumerate(order) if r // L == node]
    if not mine:
        return None
    n = len(order)
    start = next((i for i in mine if order[(i - 1) % n] // L != node), mine[0])
    chain = []
    i = start
    while order[i % n] // L == node and len(chain) < n:
        chain.append(order[i % n])
        i += 1
    return chain if len(chain) == len(mine) else None


def _paths_vs_ours(log: dict, topo: Topology) -> dict:
    """NCCL's GPU->GPU path types (its path print, for the first host that printed one) next to our
    model's (NCCL's system of the node, :func:`gpucomm.planners.nccl.sysview.node_system`), matched by
    PCI bus id."""
    from gpucomm.planners.nccl.names import path_rank
    from gpucomm.planners.nccl.sysview import node_system

    rows = [p for p in log.get("paths") or [] if p["from"].startswith("GPU/") and p["to"].startswith("GPU/")
            and p["from"] != p["to"]]
    if not rows:
        return {"compared": 0, "same": 0, "differ": [], "p2p_off": []}
    host = rows[0]["host"]
    by_bus = {b: i for i, b in _bus_ids(topo).items()}
    ns = node_system(topo)   # the plan was built from this topology, so NCCL's model runs on it
    by_node = {ns.nodes[g]["bus"]: g for g in ns.gpus}
    compared = same = 0
    differ, off = [], []
    for p in rows:
        if p["host"] != host:
            continue
        a, b = nccl_bus_id(p["from"].split("/", 1)[1]), nccl_bus_id(p["to"].split("/", 1)[1])
        if a not in by_bus or b not in by_bus:
            continue
        ours = ns.path(by_node[a], by_node[b]) if a in by_node and b in by_node else None
        if ours is None:
            continue
        compared += 1
        if ours.type == p["type"]:
            same += 1
            continue
        differ.append({"from": by_bus[a], "to": by_bus[b], "nccl": p["type"], "ours": ours.type})
        if p["type"] in PATH_TYPES and path_rank(p["type"]) >= path_rank("PHB") > path_rank(ours.type):
            off.append(tuple(sorted((by_bus[a], by_bus[b]))))
    differ.sort(key=lambda d: (d["from"], d["to"]))
    return {"compared": compared, "same": same, "differ": differ, "p2p_off": sorted(set(off)), "host": host}


def _shm_pairs(log: dict, mapping: dict) -> list:
    """GPU pairs of one node that NCCL connected through shared memory (no P2P between them)."""
    L = log.get("local_ranks")
    if not L:
        return []
    out = []
    for t in log.get("transports") or []:
        if t.get("kind") == "SHM" and t["from"] // L == t["to"] // L:
            a, b = mapping.get(t["from"] % L), mapping.get(t["to"] % L)
            if a is not None and b is not None and a != b:
                out.append(tuple(sorted((a, b))))
    return sorted(set(out))


def _adjusted_reference(topo: Topology, pairs: list, nodes: int, gpus: list) -> Optional[dict]:
    """nccl_reference on the machine of ``topo`` with NVML P2P status NOT_SUPPORTED between ``pairs``."""
    from gpucomm.probes.errors import GpucommError

    from gpucomm.planners.nccl.comm import nccl_reference

    try:
        return nccl_reference(topo.with_p2p(pairs, "NOT_SUPPORTED"), nodes=nodes, gpus=gpus)
    except GpucommError:
        return None


def _cmp(nccl: Any, model: Any) -> dict:
    match = None
    if nccl is not None and model is not None:
        match = abs(nccl - model) < 1e-6 if isinstance(nccl, (int, float)) and isinstance(model, (int, float)) \
            else nccl == model
    return {"nccl": nccl, "model": model, "match": match}


def _graph_diffs(g: Optional[dict], ref: Optional[dict], inter: bool) -> tuple:
    """Field-by-field comparison of a logged graph with a graph of the reference model."""
    rows = {}
    if g is None or ref is None:
        return rows, []
    rows["search_channels"] = _cmp(g["n_channels"], ref.get("search_channels"))
    rows["bw_intra"] = _cmp(g["bw_intra"], ref.get("bw_intra"))
    rows["type_intra"] = _cmp(g["type_intra"], ref.get("type_intra"))
    if inter:
        rows["bw_inter"] = _cmp(g["bw_inter"], ref.get("bw_inter"))
        rows["type_inter"] = _cmp(g["type_inter"], ref.get("type_inter"))
    diffs = [f"{k} {_fmt(v['nccl'])} vs {_fmt(v['model'])}" for k, v in rows.items() if v["match"] is False]
    return rows, diffs


def _model_summary(ref: Optional[dict], key: str) -> Optional[dict]:
    """The reference model's graph (ring, or the tree graph for ``key="tree"``) in the log's terms."""
    if not ref:
        return None
    src = ref if key == "ring" else (ref.get("tree") or {})
    return {"channels": ref.get("channels"), "pattern": src.get("pattern"),
            "search_channels": src.get("search_channels"), "bw_intra": src.get("bw_intra"),
            "bw_inter": src.get("bw_inter"), "type_intra": src.get("type_intra"),
            "type_inter": src.get("type_inter"), "total_bw": ref.get("total_bw") if key == "ring" else None}


def _version_note(log: dict, diffs: list) -> list:
    """Our model follows NCCL 2.30's search; say so when an older log differs only in typeInter."""
    v = log.get("version") or ""
    m = re.match(r"(\d+)\.(\d+)", v)
    if diffs and all(d.startswith("type_inter") for d in diffs) and m and (int(m.group(1)), int(m.group(2))) < (2, 30):
        return [f"our model follows NCCL 2.30's search; this log is from NCCL {v}, whose search can settle on a "
                f"higher typeInter for the same rings"]
    return []


def _base_section(log: dict, nodes: int, gpus: list, topo: Topology) -> tuple:
    mapping, how, warns = rank_to_gpu(log, topo, gpus)
    warns = _layout_warnings(log, nodes, len(gpus)) + warns
    kinds = dict(log.get("transport_kinds") or {})
    by_via: dict = {}
    for t in log.get("transports") or []:
        by_via[t["via"]] = by_via.get(t["via"], 0) + len(t["channels"])
    sec = {
        "source": log.get("source"),
        "version": log.get("version"),
        "hosts": list(log.get("hosts") or []),
        "nranks": log.get("nranks"), "nnodes": log.get("nnodes"), "local_ranks": log.get("local_ranks"),
        "layout_from": log.get("layout_from"),
        "channels": log.get("channels"), "channels_from": log.get("channels_from"),
        "coll_channels": log.get("coll_channels"),
        "transports": {"kinds": kinds, "by_via": dict(sorted(by_via.items())),
                       "gdr": any(t.get("gdr") for t in log.get("transports") or []) if kinds.get("NET") else None},
        "network": log.get("network"), "nics": [n["name"] for n in log.get("nics") or []],
        "nvls": log.get("nvls"), "env": log.get("env") or {},
        "rank_to_gpu": [{"local_rank": k, "gpu": v} for k, v in sorted(mapping.items())],
        "rank_to_gpu_from": how,
        "log_warnings": list(log.get("warnings") or [])[:10],
        "nccl_warnings": list(log.get("nccl_warnings") or [])[:10],
    }
    return sec, mapping, warns


def _p2p_note(log: dict, topo: Topology, mapping: dict, nodes: int, gpus: list,
              g: Optional[dict], key: str = "ring") -> tuple:
    """Pairs where NCCL had no P2P but our topology would (path print or SHM transports), and what
    our model of NCCL predicts with P2P off there.  Returns (paths summary, adjusted dict, notes,
    the adjusted model's full reference dict or None)."""
    paths = _paths_vs_ours(log, topo)
    pairs = sorted(set(paths.pop("p2p_off")) | set(_shm_pairs(log, mapping)))
    notes = []
    if paths["compared"]:
        notes.append(f"path types: {paths['same']} of {paths['compared']} GPU pairs in NCCL's path print "
                     f"({paths['host']}) have our model's type" +
                     ("; differing: " + ", ".join(f"GPU{d['from']}->GPU{d['to']} NCCL {d['nccl']} vs ours "
                                                  f"{d['ours']}" for d in paths["differ"][:4]) +
                      (f" (+{len(paths['differ']) - 4} more)" if len(paths["differ"]) > 4 else "")
                      if paths["differ"] else ""))
    adjusted = adj = None
    if pairs:
        why = [k for k in ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL") if k in (log.get("env") or {})]
        adj = _adjusted_reference(topo, pairs, nodes, gpus)
        if adj is not None:
            adjusted = dict(_model_summary(adj, key) or {}, p2p_off_pairs=[list(p) for p in pairs])
            _, diffs = _graph_diffs(g, adjusted, (log.get("nnodes") or nodes) > 1)
            verdict = "" if g is None else \
                " -- " + ("matches the log" if not diffs else "still differs: " + ", ".join(diffs))
            adjusted["matches_log"] = None if g is None else not diffs
            notes.append(
                f"NCCL had no P2P between {len(pairs)} GPU pair(s) that our topology connects directly "
                f"({'set by ' + ', '.join(why) if why else 'e.g. GeForce cards, ACS/IOMMU, or a VM'}); with P2P "
                f"off there our model of NCCL predicts {adjusted['channels']} channels, {key} graph "
                f"{_fmt(adjusted['search_channels'])} x {_fmt(adjusted['bw_intra'])}/{_fmt(adjusted['bw_inter'])} GB/s "
                f"{adjusted['type_intra']}/{_fmt(adjusted['type_inter'])}{verdict}")
            notes.extend(_version_note(log, diffs))
    return paths, adjusted, notes, adj


def compare_rings(log: dict, plan: dict, ref: Optional[dict], topo, nodes: int) -> dict:
    """The ``nccl_log`` section of ``gpucomm rings --compare``: what NCCL did per the log (channels,
    ring graph, per-channel orders, transports) next to our model of NCCL (``ref``, the full
    :func:`gpucomm.planners.nccl.comm.nccl_reference` dict) and our rings (``plan``, gpucomm.rings/v1),
    with a one-line verdict."""
    gpus = list(plan.get("gpus") or [])
    topo = Topology.of(topo)
    sec, mapping, warns = _base_section(log, nodes, gpus, topo)
    L = log.get("local_ranks") or len(gpus)
    lnodes = log.get("nnodes") or nodes
    g = pick_graph(log, (4,))
    sec["graph"] = _graph_summary(g, L, mapping)
    sec["model"] = _model_summary(ref, "ring")
    rings = []
    for r in log.get("rings") or []:
        chain = _node_chain(r["ranks"], L) if r["complete"] else \
            [x for x in r["ranks"] if x // L == 0] or None
        rings.append({"channel": r["channel"], "ranks": list(r["ranks"]), "complete": r["complete"],
                      "node0_gpus": [mapping.get(x % L) for x in chain] if chain else None})
    sec["rings"] = rings
    inter = lnodes > 1
    comp: dict = {"channels": _cmp(log.get("channels"), ref.get("channels") if ref else None)}
    comp["channels"]["ours"] = len(plan.get("channels") or [])
    rows, diffs = _graph_diffs(g, ref, inter)
    comp.update(rows)
    nccl_bw = None
    if g is not None:
        nccl_bw = round(g["n_channels"] * (g["bw_intra"] if lnodes <= 2 else g["bw_inter"]), 4)
    comp["busbw_GBps"] = {"nccl": nccl_bw, "model": ref.get("total_bw") if ref else None,
                          "ours": plan.get("total_bw_GBps")}
    order_nccl = None
    if sec["graph"] and sec["graph"]["channels"]:
        order_nccl = sec["graph"]["channels"][0]["gpus"]
    elif rings and rings[0]["node0_gpus"] and None not in rings[0]["node0_gpus"]:
        order_nccl = rings[0]["node0_gpus"]
    ours0 = (plan.get("channels") or [{}])[0].get("gpus")
    model0 = _gpu_indices(((ref or {}).get("rings") or [{}])[0].get("gpus")) or None
    comp["order_channel0"] = {"nccl": order_nccl, "model": model0, "ours": ours0,
                              "same_as_ours": None if not order_nccl or not ours0 else
                              (_same_cycle(order_nccl, ours0) if not inter else order_nccl == ours0)}
    comp["orders"] = _orders_vs_model(rings, ref, inter)
    paths, adjusted, notes, _ = _p2p_note(log, topo, mapping, nodes, gpus, g, "ring")
    comp["paths"] = paths
    comp["adjusted_model"] = adjusted
    if order_nccl and ours0 and len(order_nccl) == len(ours0) and not comp["order_channel0"]["same_as_ours"]:
        if set(order_nccl) == set(ours0) and _one_nvswitch(topo):
            notes.append("channel orders differ, which costs nothing here: every GPU hangs off one NVSwitch, "
                         "so any order loads each NVLink the same")
    sec["comparison"] = comp
    # Verdict
    C = log.get("channels")
    if C is not None:
        s = f"NCCL used {C} channels"
        if g is not None:
            s += f" (ring graph {g['n_channels']} x {_fmt(g['bw_intra'])} GB/s, {g['type_intra']}" + \
                 (f"/{g['type_inter']}" if inter else "") + ")"
    elif g is not None:
        s = f"NCCL's ring graph: {g['n_channels']} x {_fmt(g['bw_intra'])} GB/s ({g['type_intra']}" + \
            (f"/{g['type_inter']}" if inter else "") + "), final channel count not in the log"
    else:
        s = "the log shows neither a channel count nor a ring graph (NCCL_DEBUG_SUBSYS=INIT,GRAPH prints both)"
    parts = [s]
    if ref:
        cdiff = [] if comp["channels"]["match"] is not False else [f"channels {C} vs {ref['channels']}"]
        alld = cdiff + diffs
        m = f"our model of NCCL predicted {ref['channels']}"
        if g is not None:
            m += f" ({ref['search_channels']} x {_fmt(ref['bw_intra'])}, {ref['type_intra']}" + \
                 (f"/{_fmt(ref['type_inter'])}" if inter else "") + ")"
        known = comp["channels"]["match"] is not None or g is not None
        if known:
            m += " (match)" if not alld else f" (differs: {', '.join(alld)})"
        else:
            m += " (nothing in the log to check it against)"
        parts.append(m)
    o = comp["orders"]
    if o:
        parts.append(f"channel orders: {o['match']} of {o['checked']} as our model of NCCL")
    ours_bw = plan.get("total_bw_GBps")
    parts.append(f"our rings give {_fmt(ours_bw)} GB/s" +
                 (f" vs NCCL's {_fmt(nccl_bw)}" if nccl_bw is not None else ""))
    sec["verdict"] = "; ".join(parts)
    sec["transport"], tnote = transport_vs_probe(log, topo)
    if tnote:
        notes.append(tnote)
    sec["notes"] = notes + [n for n in _version_note(log, diffs) if n not in notes]
    sec["warnings"] = warns
    return sec


def transport_vs_probe(log: dict, topo) -> tuple[Optional[dict], Optional[str]]:
    """({log, probe, differs}, the note when the log's inter-node transport is not the one the probe
    expects NCCL to choose) -- None when the log shows no network."""
    from gpucomm.planners.collectives import transport as tr

    seen = tr.from_log(log, log.get("source") or "the NCCL log")
    if seen is None:
        return None, None
    expect = tr.from_probe(Topology.of(topo))
    differs = seen.name != expect.name
    rec = {"log": seen.to_dict(), "probe": expect.to_dict(), "differs": differs}
    if not differs:
        return rec, None
    return rec, (f"the log's inter-node transport is {seen.name} ({seen.why}), the probe expects {expect.name} "
                 f"({expect.source}: {expect.why}); predictions follow the log (predict --nccl-log) -- "
                 f"see gpucomm doctor for why NCCL chose it")


def _gpu_indices(labels) -> list:
    """GPU labels of our model (``GPU3``) as indices, the way the log's orders are written (anything
    else as it is)."""
    from gpucomm.planners.nccl.comm import label_index

    return [x if (i := label_index(x)) is None else i for x in labels or []]


def _same_rotation(a: list, b: list) -> bool:
    """The same ring, in the same direction, whichever GPU it is written from."""
    if len(a) != len(b) or not a or a[0] not in b:
        return False
    i = b.index(a[0])
    return b[i:] + b[:i] == a


def _orders_vs_model(rings: list, ref: Optional[dict], inter: bool) -> Optional[dict]:
    """Every logged ring channel's order through node 0 next to our model of NCCL's ring for that
    channel (NCCL repeats its searched channels: channel c runs graph channel c mod their count).
    Across nodes the node's stretch, NIC to NIC, must be the same; on one node the same ring
    written from another GPU is the same ring.  None when there is nothing to check (no
    complete ring in the log, or NCCL splits the node into NIC-joined domains, whose rings
    :func:`_node_chain` cannot line up with the graph's)."""
    model = [_gpu_indices(r.get("gpus")) for r in (ref or {}).get("rings") or []]
    if not model or (ref or {}).get("domain_rings"):
        return None
    checked = match = 0
    first = None
    for r in rings:
        got = r.get("node0_gpus")
        if not got or None in got:
            continue
        want = model[r["channel"] % len(model)]
        same = got == want if inter else _same_rotation(got, want)
        checked += 1
        match += same
        if not same and first is None:
            first = {"channel": r["channel"], "nccl": got, "model": want}
    if not checked:
        return None
    return {"checked": checked, "match": match, "first_difference": first}


def _same_cycle(a: list, b: list) -> bool:
    """Same ring up to rotation and direction."""
    if len(a) != len(b) or set(a) != set(b) or not a:
        return False
    i = b.index(a[0])
    rot = b[i:] + b[:i]
    return rot == a or [rot[0]] + rot[1:][::-1] == a


def _one_nvswitch(topo: Topology) -> bool:
    """Every GPU's NVLinks go to NVSwitches (HGX/DGX): any ring order loads each link the same."""
    nvs = {s.id for s in topo.switches.values() if s.kind == "nvswitch"}
    gpus = [g.id for g in topo.gpus]
    if not nvs or not gpus:
        return False
    ends: dict = {}
    for lk in topo.links:
        if lk.kind == "nvlink":
            for a, b in ((lk.a, lk.b), (lk.b, lk.a)):
                ends.setdefault(a, set()).add(b)
    return all(ends.get(g) and ends[g] <= nvs for g in gpus)


def compare_trees(log: dict, plan: dict, ref: Optional[dict], topo, nodes: int) -> dict:
    """The ``nccl_log`` section of ``gpucomm trees --compare``: NCCL's tree channels and tree graph
    per the log next to our model of NCCL and our trees (``plan``, gpucomm.trees/v1); every logged
    ``(channel, rank) -> up/down`` entry is checked against our trees and against trees rebuilt
    (:func:`gpucomm.planners.collectives.trees.connect_trees`) from NCCL's own tree-graph chains."""
    from gpucomm.probes.errors import GpucommError

    from gpucomm.planners.collectives.trees import TREE_PATTERNS as TP, connect_trees, nccl_tree_chains

    # our rank space: node * gpn + local rank, local rank k = the plan's k-th GPU (index order)
    first = (plan.get("channels") or [{}])[0].get("ranks") or []
    sel = [r["gpu"] for r in sorted(first, key=lambda r: r["rank"]) if r.get("node") == 0]
    gpn = plan.get("gpus_per_node") or len(sel)
    topo = Topology.of(topo)
    sec, mapping, warns = _base_section(log, nodes, sel, topo)
    L = log.get("local_ranks") or gpn
    lnodes = log.get("nnodes") or nodes
    g = pick_graph(log, TREE_PATTERNS)
    sec["graph"] = _graph_summary(g, L, mapping)
    sec["model"] = _model_summary(ref, "tree")
    pos = {idx: k for k, idx in enumerate(sel)}
    back = {idx: lr for lr, idx in mapping.items()}

    def ours_rank(r: int) -> Optional[int]:
        if r < 0:
            return -1
        idx = mapping.get(r % L)
        if idx is None or idx not in pos:
            return None
        return (r // L) * gpn + pos[idx]

    entries = log.get("trees") or []
    tree_channels = (max(t["channel"] for t in entries) + 1) if entries else None
    ours_ch = {c["channel"]: {r["rank"]: (r["up"], r["down"]) for r in c["ranks"]} for c in plan.get("channels") or []}

    def log_rank(q: int) -> Optional[int]:
        """Our rank -> the log's numbering (inverse of ours_rank)."""
        if q < 0:
            return -1
        lr = back.get(sel[q % gpn]) if q % gpn < len(sel) else None
        return None if lr is None else (q // gpn) * L + lr

    def check(chans: dict) -> dict:
        ok = total = 0
        bad = []
        if not chans:
            return {"checked": 0, "match": 0, "differ": []}
        K = len(chans)
        for t in entries:
            r = ours_rank(t["rank"])
            up = ours_rank(t["up"])
            down = [ours_rank(d) for d in t["down"]]
            ch = chans.get(t["channel"] % K)
            if r is None or up is None or None in down or ch is None or r not in ch:
                continue
            total += 1
            if ch[r] == (up, down):
                ok += 1
            elif len(bad) < 6:
                bad.append({"channel": t["channel"], "rank": t["rank"], "nccl": {"up": t["up"], "down": t["down"]},
                            "ours": {"up": log_rank(ch[r][0]), "down": [log_rank(x) for x in ch[r][1]]}})
        return {"checked": total, "match": ok, "differ": bad}

    comp: dict = {"channels": _cmp(tree_channels if tree_channels is not None else log.get("channels"),
                                   ref.get("channels") if ref else None)}
    comp["channels"]["ours"] = len(plan.get("channels") or [])
    rows, diffs = _graph_diffs(g, (ref or {}).get("tree"), lnodes > 1)
    comp.update(rows)
    same_layout = log.get("nnodes") in (None, nodes) and L == gpn
    comp["links_vs_ours"] = check(ours_ch) if same_layout else {"checked": 0, "match": 0, "differ": [],
                                                                 "skipped": "layout differs"}
    # (bounded: a damaged comm line must not make us build millions of ranks)
    buildable = L == gpn and 1 <= lnodes and lnodes * gpn <= 1 << 16

    def check_chains(chains: Optional[list], pattern: Optional[str]) -> Optional[dict]:
        """The log's tree links against the trees connect_trees builds on ``chains`` (local ranks)."""
        if not chains or not buildable:
            return None
        try:
            rb = connect_trees(lnodes, chains, pattern)
        except GpucommError:
            return None
        return check({c["channel"]: {r: (c["up"][r], list(c["down"][r])) for r in c["up"]} for c in rb})

    rebuilt = None
    if g is not None and g["pattern_name"] in TP:
        chains = []
        for c in g["channels"]:
            loc = [ours_rank(r % L) for r in c["ranks"]]
            if None in loc or sorted(loc) != list(range(gpn)):
                chains = []
                break
            chains.append(loc)
        rebuilt = check_chains(chains, g["pattern_name"])
    comp["links_vs_nccl_chains"] = rebuilt
    paths, adjusted, notes, adj_ref = _p2p_note(log, topo, mapping, nodes, sel, g, "tree")
    comp["paths"] = paths
    comp["adjusted_model"] = adjusted
    # the trees our model of NCCL builds with P2P off where the log shows it off
    comp["links_vs_adjusted_model"] = check_chains(*nccl_tree_chains(adj_ref, sel)) \
        if adj_ref is not None and same_layout else None
    sec["trees"] = [dict(t) for t in entries[:512]]
    sec["comparison"] = comp
    C = comp["channels"]["nccl"]
    s = f"NCCL used {C} tree channels" if C is not None else "the log shows no tree channels"
    if g is not None:
        s += f" (tree graph {g['pattern_name']} {g['n_channels']} x {_fmt(g['bw_intra'])}/" \
             f"{_fmt(g['bw_inter'])} GB/s, " \
             f"{g['type_intra']}/{g['type_inter']})"
    parts = [s]
    if ref:
        cd = [] if comp["channels"]["match"] is not False else [f"channels {C} vs {ref['channels']}"]
        tr = ref.get("tree") or {}
        m = f"our model of NCCL predicted {ref['channels']}"
        if g is not None and tr:
            m += f" ({tr.get('search_channels')} x {_fmt(tr.get('bw_intra'))}/{_fmt(tr.get('bw_inter'))})"
        known = comp["channels"]["match"] is not None or g is not None
        m += (" (match)" if not cd + diffs else f" (differs: {', '.join(cd + diffs)})") if known else ""
        parts.append(m)
    lv = comp["links_vs_ours"]
    if lv["checked"]:
        parts.append(f"our trees: {lv['match']} of {lv['checked']} logged tree links agree")
    if rebuilt and rebuilt["checked"]:
        parts.append(f"rebuilt from NCCL's own chains: {rebuilt['match']} of {rebuilt['checked']}")
    la = comp["links_vs_adjusted_model"]
    if la and la["checked"]:
        parts.append(f"with P2P off as in the log, our model of NCCL's trees: {la['match']} of {la['checked']}")
    sec["verdict"] = "; ".join(parts)
    sec["notes"] = notes + [n for n in _version_note(log, diffs) if n not in notes]
    sec["warnings"] = warns
    return sec


def rings_with_log(doc, log: dict, gpus: Optional[list] = None, channels: str = "auto", nodes: int = 1,
                   nvlink_domain: Optional[int] = None) -> dict:
    """``gpucomm rings --compare LOG``: our rings (gpucomm.rings/v1) with the ``nccl_log`` section of
    :func:`compare_rings` (``log``: a parsed NCCL debug log)."""
    from gpucomm.planners.collectives.rings import search_rings

    topo = Topology.of(doc)
    plan = search_rings(topo, gpus=gpus, channels=channels, nodes=nodes, nvlink_domain=nvlink_domain)
    out = plan.to_dict()
    out["nccl_log"] = compare_rings(log, out, plan.nccl_reference, topo, nodes)
    return out


def trees_with_log(doc, log: dict, nodes: int = 1, gpus_per_node: Optional[int] = None,
                   gpus: Optional[list] = None, nvlink_domain: Optional[int] = None) -> dict:
    """``gpucomm trees --compare LOG``: our trees (gpucomm.trees/v1) with the ``nccl_log`` section of
    :func:`compare_trees`."""
    from gpucomm.planners.collectives.trees import build_trees

    topo = Topology.of(doc)
    plan = build_trees(topo, nodes=nodes, gpus_per_node=gpus_per_node, gpus=gpus, nvlink_domain=nvlink_domain)
    out = plan.to_dict()
    out["nccl_log"] = compare_trees(log, out, plan.nccl_reference, topo, nodes)
    return out
