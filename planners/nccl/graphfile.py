"""NCCL graph files (``NCCL_GRAPH_FILE``, ``NCCL_GRAPH_DUMP_FILE``): ``<graphs><graph><channel>`` with
``<gpu dev>``/``<net dev>`` entries.

- :func:`load_graph` is NCCL's reader as ncclTopoCompute runs it when NCCL_GRAPH_FILE is set
  (ncclTopoGetXmlGraphFromFile, ncclTopoGetGraphFromXml / ...Sub / ncclTopoGetChannelFromXml in
  search.cc): the graph whose ``id`` matches is taken as it is and the search is skipped.
- :func:`ring_graph_xml` writes a ring plan of ours in the format NCCL's exporter writes
  (ncclTopoGetXmlFromGraph), for NCCL_GRAPH_FILE.
"""
from __future__ import annotations

from typing import Optional

from gpucomm.probes.errors import InputError
from gpucomm.planners.nccl import ncclxml as X
from gpucomm.planners.nccl.names import GRAPH_LINK_TYPES, RING, kv
from gpucomm.planners.nccl.ncclxml import NcclFailure
from gpucomm.planners.nccl.system import GPU, f32, topo_id

MAX_GRAPH_BYTES = 4 * 1024 * 1024
LINK_TYPES = dict(GRAPH_LINK_TYPES)     # kvDictLinkType (search.cc)


def _kv(s: str) -> int:
    """``kvConvertToInt`` with kvDictLinkType: the first entry that is a prefix of ``s``, else 0."""
    return kv(s, GRAPH_LINK_TYPES, 0)


def read_graph_xml(path: str) -> X.Xml:
    """The file NCCL_GRAPH_FILE names, parsed as NCCL parses it; NcclFailure as NCCL fails."""
    from gpucomm.probes.files import read_limited

    try:
        data = read_limited(path, MAX_GRAPH_BYTES)
    except InputError as e:
        raise NcclFailure(f"Could not open XML graph file {path} : {e}") from None
    try:
        return X.parse(data.decode("utf-8", "replace"), X.GRAPH_HANDLERS, "graphs")
    except InputError as e:
        raise NcclFailure(f"XML graph file {path}: {e}") from None


def load_graph(path: str, topo, graph) -> bool:
    """NCCL_GRAPH_FILE in ncclTopoCompute: load ``graph`` (its ``id`` selects the entry) from the
    file; True when read (``graph.n_channels`` > 0 then means NCCL skips its search)."""
    xml = read_graph_xml(path)
    graphs = xml.find_tag("graphs")
    for sub in graphs.subs:
        _load_sub(sub, topo, graph)
    return True


def _load_sub(node, topo, graph) -> None:
    """``ncclTopoGetGraphFromXmlSub``."""
    if node.get_int("id") != graph.id:
        return
    cross = node.get_int("crossnic")
    if topo.s.cross_nic == 0 and cross == 1:
        return
    graph.cross_nic = cross
    graph.pattern = node.get_int("pattern")
    graph.n_channels = node.get_int("nchannels")
    graph.bw_intra = f32(X.strtof(node.get_str("speedintra")))
    graph.bw_inter = f32(X.strtof(node.get_str("speedinter")))
    lat = node.get("latencyinter")
    graph.latency_inter = f32(X.strtof(lat)) if lat is not None else 0.0
    for key, attr in (("typeintra", "type_intra"), ("typeinter", "type_inter")):
        v = node.get(key)
        if v is None:
            raise NcclFailure(f"graph file: attribute {key} of node graph not found")
        setattr(graph, attr, _kv(v))
    graph.same_channels = node.get_int("samechannels")
    if graph.n_channels < 0 or len(node.subs) > len(graph.inter) // 2:
        raise NcclFailure(f"graph file: {max(graph.n_channels, len(node.subs))} channels, more than NCCL holds")
    for c, ch in enumerate(node.subs):
        _load_channel(ch, c, topo.sys, graph)


def _load_channel(ch, c: int, sys, graph) -> None:
    """``ncclTopoGetChannelFromXml``."""
    ngpus = len(sys.nodes[GPU])
    n = g = 0
    for sub in ch.subs:
        dev = X.strtol(sub.get_str("dev"), 16)
        if sub.name == "net":
            if n >= 2:
                raise NcclFailure(f"graph file: channel {c} has more than 2 NICs")
            graph.inter[2 * c + n] = dev
            n += 1
        elif sub.name == "gpu":
            r = sub.get("rank")
            if r is not None:
                rank = X.c_int(X.strtol(r))
            else:
                rank = -1
                for gpu in sys.nodes[GPU]:
                    sid = (gpu.parent.id >> 56) if gpu.parent is not None else 0
                    if topo_id(sid, gpu.dev) == dev:
                        rank = gpu.rank
                if rank == -1:
                    raise NcclFailure(f"XML Import Channel : dev {dev} not found.")
            if g >= ngpus:
                raise NcclFailure(f"graph file: channel {c} has more GPUs than the node ({ngpus})")
            graph.intra[ngpus * c + g] = rank
            g += 1


def ring_graph_xml(channels: list, bw_intra: float, type_intra: str, gpu_dev: Optional[dict] = None) -> str:
    """An NCCL graph file with one ring graph (id 0, pattern 4) for one node: ``channels`` lists GPU
    orders (NVML indices, or keys of ``gpu_dev``), all at ``bw_intra`` GB/s per channel."""
    xml = X.Xml()
    root = xml.add_node(None, "graphs")
    root.set_int("version", 1)
    gr = xml.add_node(root, "graph")
    for k, v in (("id", 0), ("pattern", RING), ("crossnic", 0), ("nchannels", len(channels))):
        gr.set_int(k, v)
    gr.set("speedintra", "%g" % bw_intra)
    gr.set("speedinter", "%g" % bw_intra)
    gr.set("latencyinter", "0")
    t = type_intra if type_intra in LINK_TYPES else "SYS"
    gr.set("typeintra", t)
    gr.set("typeinter", "PIX")
    gr.set_int("samechannels", 0)
    for order in channels:
        ch = xml.add_node(gr, "channel")
        for gpu in order:
            dev = gpu_dev[gpu] if gpu_dev is not None else gpu
            xml.add_node(ch, "gpu").set_long("dev", int(dev))
    return X.dumps(xml, "graphs")


__all__ = ["load_graph", "read_graph_xml", "ring_graph_xml", "LINK_TYPES", "MAX_GRAPH_BYTES"]


def ring_graph_from_report(report: dict) -> tuple:
    """The NCCL graph file for a ``gpucomm.rings/v1`` report (one node): NCCL gives every channel of a
    graph one bandwidth, so the file keeps the k widest of our channels at the k-th widest bandwidth,
    with k maximising k x bandwidth.  Returns (text, {"channels", "bw_GBps", "total_bw_GBps",
    "type_intra", "nccl_total_bw_GBps"}).  Raises InputError for a multi-node report."""
    if report.get("nodes", 1) != 1:
        raise InputError("an NCCL graph file is written for one node (NCCL repeats a node's graph on every node)",
                         expected="--nodes 1")
    ref = report.get("nccl_reference") or {}
    if (ref.get("nccl_nodes") or 1) > 1:
        # each rank's system then holds only its domain's GPUs: a file naming the others fails to load
        raise InputError(f"NCCL splits this node into {ref['nccl_nodes']} domains joined through NICs (GPU pairs "
                         "it routes through the network); a graph file of whole-node rings would not load",
                         expected="a node whose GPUs NCCL connects directly (P2P or shared memory)")
    if any(c.get("net_hops") for c in report.get("channels") or []):
        raise InputError("these rings go through NICs inside the node (NCCL's NIC-joined domains); an NCCL graph "
                         "file holds whole-node rings only", expected="a node whose GPUs NCCL connects directly")
    chans = sorted(report.get("channels") or [], key=lambda c: -float(c["bw_GBps"]))
    if not chans:
        raise InputError("no ring channels to write", expected="a topology with at least one GPU")
    best_k, best = 1, -1.0
    for k in range(1, len(chans) + 1):
        total = k * float(chans[k - 1]["bw_GBps"])
        if total > best + 1e-9:
            best_k, best = k, total
    keep = chans[:best_k]
    bw = float(keep[-1]["bw_GBps"])
    order = {name: i for i, name in enumerate(LINK_TYPES)}
    types = [l["type"] for c in keep for l in c.get("links") or [] if l.get("type") in order]
    type_intra = max(types, key=lambda t: order[t]) if types else "LOC"
    text = ring_graph_xml([c["gpus"] for c in keep], bw, type_intra)
    return text, {"channels": best_k, "bw_GBps": bw, "total_bw_GBps": round(best_k * bw, 3), "type_intra": type_intra,
                  "nccl_total_bw_GBps": ref.get("total_bw_GBps")}


__all__ += ["ring_graph_from_report"]


def compare_ring_graph(text: str, path: str, report: dict) -> dict:
    """An NCCL graph file (NCCL_GRAPH_DUMP_FILE of a run, or one of ours) read as a graph beside a
    ``gpucomm.rings/v1`` report: its ring graph (id 0) -- channels as GPU indices (the ``dev`` NVML
    index; ``rank`` where given), bandwidth per channel, total -- and ours.  InputError naming the file
    when it is not a graph file or has no ring graph."""
    try:
        xml = X.parse(text, X.GRAPH_HANDLERS, "graphs")
    except InputError as e:
        raise InputError(str(e).split(": ", 1)[-1], path, expected="an NCCL graph file (<graphs><graph id=\"0\">)") \
            from None
    ring = next((g for g in xml.find_tag("graphs").subs if g.get("id") == "0"), None)
    if ring is None:
        raise InputError("has no ring graph (graph id 0)", path, expected="an NCCL graph file with <graph id=\"0\">")
    from gpucomm.probes.formats.nccl_xml import graph_gpu_label

    chans = []
    for ch in ring.subs:
        order = []
        for sub in ch.subs:
            if sub.name == "gpu":
                r = sub.get("rank")
                dev = X.strtol(sub.get("dev"), 16)
                # without a rank, a GPU of another host of the clique (system id in bits 56+) is named
                # "<host>/GPU<dev>" (gpucomm.probes.formats.nccl_xml.graph_gpu_label), not a 64-bit number
                order.append(X.c_int(X.strtol(r)) if r is not None else dev if dev >> 56 == 0 else graph_gpu_label(dev))
        chans.append(order)
    bw = X.strtof(ring.get("speedintra"))
    n = X.c_int(X.strtol(ring.get("nchannels"))) if ring.get("nchannels") is not None else len(chans)
    gpus = sorted(report.get("gpus") or [])
    covered = all(all(isinstance(x, int) for x in c) and sorted(c) == gpus for c in chans) \
        if (report.get("nvlink_domain") or {}).get("systems", report.get("nodes", 1)) == 1 else None
    total = round(n * bw, 3)
    ours = report.get("total_bw_GBps")
    return {"file": path, "channels": chans, "nchannels": n, "bw_GBps": bw, "total_bw_GBps": total,
            "type_intra": ring.get("typeintra"), "type_inter": ring.get("typeinter"),
            "covers_gpus": covered, "ours_total_bw_GBps": ours,
            "ratio": round(ours / total, 3) if ours and total else None,
            "model": _beside_model(chans, n, bw, ring.get("typeintra"), report.get("nccl_reference"))}


def _beside_model(chans: list, n: int, bw: float, type_intra: Optional[str], ref: Optional[dict]) -> Optional[dict]:
    """The graph file's ring graph beside our model of NCCL's (``report["nccl_reference"]``: its search's
    channels, bandwidth, type and every channel's GPU order): channel for channel, the same order or the
    first that differs.  None without the model."""
    if not ref or ref.get("orders") is None:
        return None
    orders = ref["orders"]
    same = sum(1 for a, b in zip(chans, orders) if list(a) == list(b))
    diff = next((i for i, (a, b) in enumerate(zip(chans, orders)) if list(a) != list(b)), None)
    return {"nchannels": ref.get("search_channels"), "bw_GBps": ref.get("bw_GBps"), "type_intra": ref.get("type_intra"),
            "same_channels": same, "checked": min(len(chans), len(orders)),
            "agrees": (n == ref.get("search_channels") and abs(bw - (ref.get("bw_GBps") or 0)) < 1e-3
                       and type_intra == ref.get("type_intra") and len(chans) == len(orders) and same == len(chans)),
            "first_difference": None if diff is None else {"channel": diff, "file": chans[diff], "model": orders[diff]}}


__all__ += ["compare_ring_graph"]
