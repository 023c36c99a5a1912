"""Paths between GPUs and NICs with NCCL's rules (graph.h path types; src/graph/paths.cc).

For every source (GPU, NET, CPU) we compute one path to every other node:

* **type** = worst hop (``mergePathType``: C2C then PCIe through the CPU is P2C), NCCL order ``LOC < NVL < NVB < C2C < PIX < PXB < P2C < PXN < PHB < SYS``:
  an NVLink hop is NVL, a PCI hop between two PCI switches PXB, a PCI hop touching a CPU PHB, other
  PCI hops PIX, a CPU-CPU hop SYS, C2C hops C2C; NET links do not count (NCCL: "we only care about
  the NIC->GPU path").  A GPU is never a transit node except as the single middle GPU of an NVLink
  GPU->GPU->x path (``ncclTopoSetPaths``: "allow routing through a GPU only as 1 hop"), which makes
  a GPU->GPU->GPU path NVB (unless ``nvb=False``, NCCL_NVB_DISABLE=1).
* **bw** = narrowest hop.  Route selection, ``rule=``: ``"nccl"`` replays NCCL's BFS
  (``ncclTopoSetPaths``; 2.30: better type, then more bandwidth, then fewer hops -- NCCL <= 2.29
  took fewer hops, then more bandwidth; both prefer a direct single NVLink over a wider NVB detour,
  as on DGX-1) and is what the planners use, since it is the route NCCL's transports take;
  ``"widest"`` keeps the widest route, ties broken by fewer hops then type (what the product asks of ``paths``).
  On PCIe trees and NVSwitch systems both rules give the same paths.
* Post-processing as ``ncclTopoComputePaths`` (paths.cc:721-865):
  (a) GPU pairs without P2P -- NVML P2P status not OK (``gpus[].p2p``) or type above
      ``NCCL_P2P_LEVEL`` (default PXB; SYS for AMD CPUs with <= 2 GPUs) -- are rerouted through the
      CPU local to the destination GPU (``addInterStep``), so the type becomes >= PHB;
  (c) GPU->NET becomes P2C when GPU->CPU is C2C and the NIC hangs off that CPU (Grace);
  (d) PXN: GPU g reaches NIC n through the NVLink peer p that is local to n when p->n is <= PXB
      (<= P2C with NCCL_PXN_C2C=1, the default), p->g is NVL, p has GDR, and p has more bandwidth
      to n or g's own path is worse than PXN -- path g->p->n, type PXN;
  (e) without GPUDirect RDMA (``gdr`` false on the GPU or NIC, or distance above
      ``NCCL_NET_GDR_LEVEL``, default P2C) GPU<->NET traffic goes through the GPU's local CPU.

Paths also know how much capacity one unit of traffic takes on each link (:func:`path_loads`),
including NCCL's ``INTEL_P2P_OVERHEAD`` (x1.2 on PCI links of a PHB path through an Intel CPU) and
the pre-Ampere reverse reservation (bw/8 on the reverse link when a non-GPU sends into a sm<80 GPU).
"""
from __future__ import annotations

import heapq
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from gpucomm.probes.errors import InputError
from gpucomm.probes.model import PathType

from gpucomm.planners.nccl.graph import build_graph, gpu_nodes, net_nodes, node_label

TYPES = [t.name for t in PathType]
RANK = {t.name: t.value for t in PathType}

INTEL_P2P_OVERHEAD = 6.0 / 5.0   # search.cc: INTEL_P2P_OVERHEAD(bw) = bw*6/5


def worse(a: str, b: str) -> str:
    """The worse (higher) of two path type names."""
    return a if RANK[a] >= RANK[b] else b


def merge_type(a: str, b: str) -> str:
    """NCCL's mergePathType: a path that goes over C2C and then PCIe through the CPU is P2C (GPU ->
    C2C -> CPU -> PCIe -> NIC on Grace), otherwise the worse of the two."""
    if {a, b} == {"C2C", "PHB"}:
        return "P2C"
    return worse(a, b)


@dataclass(frozen=True)
class Path:
    """One directed path: NCCL type name, bottleneck bw (GB/s), hop count, node ids src..dst and
    ``via`` -- the intermediate GPU (NVB/PXN) or CPU (P2P/GDR reroute) when there is one."""

    src: str
    dst: str
    type: str
    bw: float
    hops: int
    nodes: tuple
    via: Optional[str] = None

    def edges(self) -> list:
        return list(zip(self.nodes, self.nodes[1:]))


def as_graph(doc_or_graph: Any):
    """Accept a topology document or an already built graph."""
    if hasattr(doc_or_graph, "nodes") and hasattr(doc_or_graph, "edges") and hasattr(doc_or_graph, "graph"):
        return doc_or_graph
    return build_graph(doc_or_graph)


def _hop_type(ntype: dict, u: str, v: str, et: str) -> str:
    if et in ("NET", "LOC"):
        return "LOC"
    if et == "NVL":
        return "NVL"
    if et == "C2C":
        return "C2C"
    if et == "SYS":
        return "SYS"
    tu, tv = ntype[u], ntype[v]
    if tu == "CPU" or tv == "CPU":
        return "PHB"
    if tu == "PCI" and tv == "PCI":
        return "PXB"
    return "PIX"


class _Adj:
    """Plain-dict adjacency of the graph (attribute-dict lookups are too slow in inner loops)."""

    def __init__(self, G):
        self.G = G
        self.ntype = {n: a.get("type") for n, a in G.nodes(data=True)}
        self.out: dict = {n: [] for n in G.nodes}
        for u, v, a in sorted(G.edges(data=True), key=lambda e: (e[0], e[1])):
            self.out[u].append((v, float(a["bw"]), a["type"], _hop_type(self.ntype, u, v, a["type"])))
        # the links into each node as NCCL's BFS reads them: (from, bw, hop type rank, from a GPU, NVLink)
        self.inn: dict = {n: [] for n in G.nodes}
        for u, v, a in sorted(G.edges(data=True), key=lambda e: (e[1], e[0])):
            et = a["type"]
            self.inn[v].append((u, float(a["bw"]), RANK[_hop_type(self.ntype, u, v, et)],
                                self.ntype[u] == "GPU", et == "NVL"))
        self.cap = {(u, v): float(a["bw"]) for u, v, a in G.edges(data=True)}
        self.etype = {(u, v): a["type"] for u, v, a in G.edges(data=True)}


def _transit_ok(adj: _Adj, src: str, u: str) -> bool:
    return u == src or adj.ntype[u] not in ("GPU", "NET")


def _paths_from(adj: _Adj, src: str, nvb: bool = True) -> dict:
    """Best path from ``src`` to every reachable node (see module docstring for the order)."""
    # 1. widest bottleneck to every node (max-min Dijkstra).
    best = {src: float("inf")}
    heap = [(-float("inf"), src)]
    done = set()
    while heap:
        nb, u = heapq.heappop(heap)
        if u in done:
            continue
        done.add(u)
        if not _transit_ok(adj, src, u):
            continue
        for v, bw, _et, _ht in adj.out[u]:
            cand = min(-nb, bw)
            if cand > best.get(v, -1.0):
                best[v] = cand
                heapq.heappush(heap, (-cand, v))
    # 2. for each bottleneck value, fewest hops (then best type) using only links at least that wide.
    result: dict = {}
    for t in sorted({b for n, b in best.items() if n != src}, reverse=True):
        targets = {n for n, b in best.items() if b == t and n != src}
        lab = {src: (0, "LOC", None)}   # node -> (hops, type, parent)
        frontier = [src]
        hops = 0
        while frontier and targets - set(lab):
            hops += 1
            nxt: dict = {}
            for u in frontier:
                if not _transit_ok(adj, src, u):
                    continue
                tu = lab[u][1]
                for v, bw, _et, ht in adj.out[u]:
                    if bw < t or v in lab:
                        continue
                    ty = merge_type(tu, ht)
                    if v not in nxt or RANK[ty] < RANK[nxt[v][1]]:
                        nxt[v] = (hops, ty, u)
            lab.update(nxt)
            frontier = sorted(nxt)
        for v in targets:
            if v not in lab:
                continue
            nodes = [v]
            while nodes[-1] != src:
                nodes.append(lab[nodes[-1]][2])
            nodes.reverse()
            result[v] = Path(src, v, lab[v][1], t, lab[v][0], tuple(nodes))
    # 3. NVB: src GPU -NVL-> middle GPU -> destination (exactly two hops).
    if nvb and adj.ntype[src] == "GPU":
        for m, bw1, et1, _ in adj.out[src]:
            if et1 != "NVL" or adj.ntype[m] != "GPU":
                continue
            for v, bw2, et2, ht2 in adj.out[m]:
                if v == src:
                    continue
                ty = "NVB" if et2 == "NVL" else merge_type("NVL", ht2)
                cand = Path(src, v, ty, min(bw1, bw2), 2, (src, m, v), via=m)
                cur = result.get(v)
                if cur is None or (-cand.bw, cand.hops, RANK[cand.type]) < (-cur.bw, cur.hops, RANK[cur.type]):
                    result[v] = cand
    return result


_R_LOC, _R_NVL, _R_NVB, _R_C2C, _R_PHB, _R_P2C = (RANK[t] for t in ("LOC", "NVL", "NVB", "C2C", "PHB", "P2C"))
_NAME = {v: k for k, v in RANK.items()}


def _nccl_paths_to(adj: _Adj, base: str, nvb: bool = True, ends: Optional[set] = None) -> dict:
    """NCCL's ``ncclTopoSetPaths`` (paths.cc) for one base node, literally: a BFS outwards from
    the base that stores, at every node, its path *to* the base; a node's path is replaced when
    the new one has a better type, or the same type and more bandwidth, or the same type and
    bandwidth and fewer hops (2.30 rule); a GPU is crossed only as the single middle GPU of an
    NVLink GPU->GPU->base path.  Returns {node: Path(node -> base)} (only the nodes in ``ends``
    when given)."""
    ntype = adj.ntype
    inbound = adj.inn
    lab = {base: (_R_LOC, float("inf"), 0, (base,))}
    nodelist = [base]
    while nodelist:
        nxt: list = []
        queued: set = set()
        for node in nodelist:
            ptype, pbw, pcount, pnodes = lab[node]
            is_gpu = ntype[node] == "GPU"
            # allow routing through a GPU only as 1 hop (GPU -NVL-> GPU -> base)
            transit = is_gpu and node != base
            nvb_ok = nvb and pcount <= 1
            nvb_up = is_gpu and ptype == _R_NVL and pcount + 1 > 1
            count = pcount + 1
            for rem, bw_link, hop, rem_gpu, nvl in inbound[node]:
                if transit and not (nvb_ok and nvl and rem_gpu):
                    continue
                bw = pbw if pbw < bw_link else bw_link
                if nvb_up and hop == _R_NVL:
                    hop = _R_NVB
                if (ptype == _R_C2C and hop == _R_PHB) or (ptype == _R_PHB and hop == _R_C2C):
                    ty = _R_P2C
                else:
                    ty = ptype if ptype >= hop else hop
                cur = lab.get(rem)
                if cur is None or ty < cur[0] or (ty == cur[0] and (cur[1] < bw or (cur[1] == bw and cur[2] > count))):
                    if rem == base:
                        continue
                    lab[rem] = (ty, bw, count, (rem,) + pnodes)
                    if rem not in queued:
                        queued.add(rem)
                        nxt.append(rem)
        nodelist = nxt
    out = {}
    for n, (ty, bw, count, nodes) in lab.items():
        if n == base or (ends is not None and n not in ends):
            continue
        via = None
        if len(nodes) == 3 and ntype[nodes[1]] == "GPU" and ntype[nodes[0]] == "GPU":
            via = nodes[1]
        out[n] = Path(n, base, _NAME[ty], bw, count, nodes, via=via)
    return out


def _concat(p1: Path, p2: Path, type_: Optional[str] = None, via: Optional[str] = None) -> Path:
    return Path(p1.src, p2.dst, type_ or merge_type(p1.type, p2.type), min(p1.bw, p2.bw), p1.hops + p2.hops,
                p1.nodes + p2.nodes[1:], via=via)


def _p2p_status_ok(G, a: str, b: str) -> bool:
    """NVML P2P status between two GPUs (missing = OK)."""
    for x, y in ((a, b), (b, a)):
        st = G.nodes[x].get("p2p") or {}
        for key in (y, G.nodes[y].get("label"), str(G.nodes[y].get("index"))):
            if key in st:
                val = st[key]
                if isinstance(val, dict):  # {"read": "OK", "write": "OK"}
                    if not all(str(v).upper() == "OK" for v in val.values()):
                        return False
                elif str(val).upper() not in ("OK", "TRUE", "1"):
                    return False
    return True


def default_p2p_level(G) -> str:
    """NCCL_P2P_LEVEL default: PXB; SYS on AMD x86 CPUs with at most 2 GPUs (paths.cc:355-368)."""
    cpus = [a for _, a in G.nodes(data=True) if a.get("type") == "CPU"]
    if len(gpu_nodes(G)) <= 2 and cpus and all(c.get("vendor") == "amd" for c in cpus):
        return "SYS"
    return "PXB"


@dataclass
class PathSet:
    """All paths of one graph: ``table[(src, dst)] -> Path`` for GPU, NET and CPU endpoints."""

    G: Any
    table: dict = field(default_factory=dict)
    # what planners derive from the paths once per path set (keyed by the planner)
    derived: dict = field(default_factory=dict, repr=False, compare=False)

    def get(self, src: str, dst: str) -> Optional[Path]:
        return self.table.get((src, dst))

    def local_cpu(self, gpu: str) -> Optional[str]:
        """ncclGetLocalCpu: the CPU with the fewest hops from the GPU (first by id on ties)."""
        best = None
        for c in sorted(n for n, a in self.G.nodes(data=True) if a.get("type") == "CPU"):
            p = self.table.get((gpu, c))
            if p is not None and (best is None or p.hops < best[0]):
                best = (p.hops, c)
        return best[1] if best else None

    def local_gpu(self, net: str) -> Optional[str]:
        """ncclTopoGetLocalGpu: the GPU with the best path to a NET (type, then bw, then hops)."""
        best = None
        for g in gpu_nodes(self.G):
            p = self.table.get((g, net))
            if p is None:
                continue
            key = (RANK[p.type], -p.bw, p.hops, self.G.nodes[g]["index"])
            if best is None or key < best[0]:
                best = (key, g)
        return best[1] if best else None


RULES = ("nccl", "widest")


def compute_path_set(doc_or_graph: Any, *, rule: str = "nccl", p2p_level: Optional[str] = None,
                     gdr_level: str = "P2C", nvb: bool = True, pxn: bool = True, pxn_c2c: bool = True) -> PathSet:
    """Paths between GPUs, NETs and CPUs with all of NCCL's post-processing (module docstring).

    ``rule="nccl"`` selects routes exactly as NCCL 2.30's BFS does (best type, then bandwidth,
    then hops: a direct single NVLink beats a wider two-hop NVB detour) -- the routes NCCL's
    transports will actually use, so planners use it; ``rule="widest"`` keeps the widest route
    (ties: fewer hops, better type), the product's definition, used by ``gpucomm paths`` by default."""
    if rule not in RULES:
        raise InputError(f"unknown path rule {rule!r}", expected=" or ".join(RULES))
    G = as_graph(doc_or_graph)
    adj = _Adj(G)
    ps = PathSet(G)
    sources = [n for n, t in adj.ntype.items() if t in ("GPU", "NET", "CPU")]
    ends = set(sources)
    for s in sorted(sources):
        if rule == "widest":
            for d, p in _paths_from(adj, s, nvb=nvb).items():
                if d in ends:
                    ps.table[(s, d)] = p
        else:
            for n, p in _nccl_paths_to(adj, s, nvb=nvb, ends=ends).items():
                ps.table[(n, s)] = p
    gpus = gpu_nodes(G)
    nets = net_nodes(G)
    level = p2p_level or default_p2p_level(G)
    # (a) P2P not possible -> through the destination GPU's local CPU.
    rerouted = {}
    status = any(G.nodes[g].get("p2p") for g in gpus)     # NVML's P2P status recorded for some GPU
    for g in gpus:
        cpu = ps.local_cpu(g)
        for p in gpus:
            if p == g:
                continue
            path = ps.get(p, g)
            if path is None:
                continue
            ok = RANK[path.type] <= RANK[level]
            if ok and status:
                if path.via and adj.ntype.get(path.via) == "GPU":
                    # NVB: NVML is asked about each NVLink hop, not about the end points
                    ok = _p2p_status_ok(G, p, path.via) and _p2p_status_ok(G, path.via, g)
                else:
                    ok = _p2p_status_ok(G, p, g)
            if not ok and cpu is not None and ps.get(p, cpu) and ps.get(cpu, g):
                rerouted[(p, g)] = _concat(ps.get(p, cpu), ps.get(cpu, g), type_=worse("PHB", worse(
                    ps.get(p, cpu).type, ps.get(cpu, g).type)), via=cpu)
    ps.table.update(rerouted)
    # (c) P2C, (d) PXN, (e) no GDR.
    gdr_max = RANK[gdr_level]
    pxn_max = RANK["P2C" if pxn_c2c else "PXB"]
    for n in nets:
        lg = ps.local_gpu(n)
        for g in gpus:
            cpu = ps.local_cpu(g)
            gp = ps.get(g, n)
            if gp is None:
                continue
            if cpu is not None:
                gc, cn = ps.get(g, cpu), ps.get(cpu, n)
                if gc is not None and cn is not None and gc.type == "C2C" and cn.type == "PHB":
                    gp = _concat(gc, cn, type_="P2C", via=cpu)
                    ps.table[(g, n)] = gp
            peer_dist = None
            if pxn and lg is not None and lg != g:
                lp, pg, gl = ps.get(lg, n), ps.get(lg, g), ps.get(g, lg)
                if lp is not None and pg is not None and gl is not None and RANK[lp.type] <= pxn_max \
                        and RANK[pg.type] <= RANK["NVL"] and G.nodes[lg].get("gdr", True) \
                        and (lp.bw > gp.bw or RANK[gp.type] > RANK["PXN"]):
                    gp = _concat(gl, lp, type_="PXN", via=lg)
                    ps.table[(g, n)] = gp
                    peer_dist = lp.type
            dist = peer_dist or gp.type
            gdr = G.nodes[g].get("gdr", True) and G.nodes[n].get("gdr", True) and RANK[dist] <= gdr_max
            if not gdr and cpu is not None:
                a1, a2 = ps.get(g, cpu), ps.get(cpu, n)
                b1, b2 = ps.get(n, cpu), ps.get(cpu, g)
                if a1 and a2:
                    ps.table[(g, n)] = _concat(a1, a2, via=cpu)
                if b1 and b2:
                    ps.table[(n, g)] = _concat(b1, b2, via=cpu)
    return ps


def compute_paths(doc_or_graph: Any, **kw: Any) -> dict:
    """``{(src, dst): Path}`` for every ordered pair of GPUs and NICs (NET nodes, one per NIC port)
    of a topology document (or graph).  Keyword arguments as :func:`compute_path_set`."""
    ps = compute_path_set(doc_or_graph, **kw)
    keep = {n for n, a in ps.G.nodes(data=True) if a.get("type") in ("GPU", "NET")}
    return {k: p for k, p in ps.table.items() if k[0] in keep and k[1] in keep}


def path_loads(G, path: Path) -> dict:
    """Capacity one unit of traffic along ``path`` takes on each directed link (search.cc followPath):
    x1.2 on PCI links of a PHB path that starts at a GPU and crosses an Intel x86 CPU; a non-GPU
    sending into a GPU with sm < 80 reserves 1/8 on the reverse link; an NVLink into a CPU (Power)
    reserves the same amount in reverse."""
    nodes = G.nodes
    pci = 1.0
    if path.type == "PHB" and nodes[path.src].get("type") == "GPU":
        for n in path.nodes[1:]:
            a = nodes[n]
            if a.get("type") == "CPU" and a.get("arch") in ("x86_64", None) and a.get("vendor") == "intel":
                pci = INTEL_P2P_OVERHEAD
    start_gpu = nodes[path.src].get("type") == "GPU"
    loads: dict = {}
    for u, v in path.edges():
        et = G.edges[u, v]["type"]
        fw = pci if et == "PCI" else 1.0
        loads[(u, v)] = loads.get((u, v), 0.0) + fw
        rv = nodes[v]
        if rv.get("type") == "GPU" and rv.get("sm") is not None and rv["sm"] < 80 and not start_gpu:
            loads[(v, u)] = loads.get((v, u), 0.0) + fw / 8.0
        if rv.get("type") == "CPU" and et == "NVL":
            loads[(v, u)] = loads.get((v, u), 0.0) + fw
    return loads


# --------------------------------------------------------------------------------------------
# CLI helpers
def _index_list(G) -> str:
    idx = sorted(G.nodes[g]["index"] for g in gpu_nodes(G))
    if not idx:
        return "none"
    if idx == list(range(idx[0], idx[-1] + 1)):
        return f"{idx[0]}-{idx[-1]}" if len(idx) > 1 else str(idx[0])
    return ",".join(map(str, idx))


def resolve_endpoint(G, name: str) -> str:
    """``GPU3`` / ``3`` / a GPU bus id / a NIC name / ``NET:mlx5_0`` -> graph node id (GPU or NET)."""
    s = str(name).strip()
    m = re.match(r"^(?:GPU|gpu|cuda:)?(\d+)$", s)
    if m:
        idx = int(m.group(1))
        for g in gpu_nodes(G):
            if G.nodes[g]["index"] == idx:
                return g
        raise InputError(f"no GPU {idx} in topology (has {_index_list(G)})")
    if s in G.nodes and G.nodes[s].get("type") in ("GPU", "NET"):
        return s
    for n, a in G.nodes(data=True):
        if a.get("type") == "NET" and (a.get("name") == s or n == f"NET:{s}"):
            return n
    from gpucomm.probes.model import normalize_bus_id

    bdf = normalize_bus_id(s)
    if bdf and bdf in G.nodes and G.nodes[bdf].get("type") == "GPU":
        return bdf
    nics = sorted(a.get("name") for _, a in G.nodes(data=True) if a.get("type") == "NET")
    raise InputError(f"no GPU or NIC named {s!r} in topology",
                     expected="GPU<index>, an index, or a NIC name" + (f" ({', '.join(nics)})" if nics else ""))


def path_row(G, p: Path) -> dict:
    return {"src": node_label(G, p.src), "dst": node_label(G, p.dst), "type": p.type, "hops": p.hops,
            "bw_GBps": round(p.bw, 3), "via": node_label(G, p.via) if p.via else None,
            "route": [node_label(G, n) for n in p.nodes]}


def path_table(doc_or_graph: Any, between: Optional[Iterable[str]] = None, rule: str = "widest", **kw: Any) -> list:
    """Rows for ``gpucomm paths``: every GPU->GPU and GPU<->NIC path (or one pair with ``between``),
    each ``{src, dst, type, hops, bw_GBps, via, route}``, GPUs by index then NICs.  ``rule`` as in
    :func:`compute_path_set` (default ``widest``; ``nccl`` = the route NCCL uses)."""
    kw["rule"] = rule
    G = as_graph(doc_or_graph)
    if not gpu_nodes(G):
        from gpucomm.probes.errors import NothingToDo

        raise NothingToDo("topology has no GPUs")
    table = compute_paths(G, **kw)
    if between is not None:
        pair = list(between)
        if len(pair) != 2:
            raise InputError("--between needs exactly two devices", expected="e.g. --between GPU0 GPU3")
        a, b = (resolve_endpoint(G, x) for x in pair)
        if a == b:
            raise InputError(f"--between names the same device twice ({pair[0]})")
        p = table.get((a, b))
        if p is None:
            raise InputError(f"no path between {pair[0]} and {pair[1]}")
        return [path_row(G, p)]
    order = {n: i for i, n in enumerate(gpu_nodes(G) + net_nodes(G))}
    rows = []
    for (s, d), p in sorted(table.items(), key=lambda kv: (order[kv[0][0]], order[kv[0][1]])):
        if G.nodes[s]["type"] == "NET" and G.nodes[d]["type"] == "NET":
            continue
        rows.append(path_row(G, p))
    return rows


# --------------------------------------------------------------------------------------------
# ncclTopoCheckNet: GPU pairs NCCL connects through the network inside a node
NET_MAX_DEVS_PER_NIC = 4    # NCCL_NET_MAX_DEVS_PER_NIC: the most ports one virtual NIC fuses
_PATH_PORT = RANK["NVL"]    # PATH_PORT (graph.h): two functions of one PCI device


def fused_nics(G, nets: list, merge_level: int = _PATH_PORT, force_merge: Optional[str] = None) -> list:
    """The NET nodes NCCL fuses into one virtual NIC (``ncclTopoMakeVNics``): NCCL_NET_FORCE_MERGE's
    groups (``"mlx5_0,mlx5_1;..."``), then, in NCCL's device order, each NIC with the following ones at
    most ``merge_level`` apart (NCCL_NET_MERGE_LEVEL, default PORT: the ports of one card, functions of
    one PCI device), up to :data:`NET_MAX_DEVS_PER_NIC`.  Returns groups of NET node ids.

    >>> from gpucomm.planners.nccl.graph import PathGraph
    >>> G = PathGraph()
    >>> for name, bus in (("mlx5_0", "0000:1c:00.0"), ("mlx5_1", "0000:1c:00.1"), ("mlx5_2", "0000:1d:00.0")):
    ...     G.add_node("NET:" + name, type="NET", name=name, nic=bus)
    >>> fused_nics(G, ["NET:mlx5_0", "NET:mlx5_1", "NET:mlx5_2"])
    [['NET:mlx5_0', 'NET:mlx5_1'], ['NET:mlx5_2']]
    >>> fused_nics(G, ["NET:mlx5_0", "NET:mlx5_1", "NET:mlx5_2"], merge_level=0)
    [['NET:mlx5_0'], ['NET:mlx5_1'], ['NET:mlx5_2']]
    """
    placed: set = set()
    groups: list = []
    names = {G.nodes[n].get("name"): n for n in nets}
    for group in (force_merge or "").split(";"):
        members = [names[x.strip()] for x in group.split(",") if x.strip() in names]
        if len(members) > 1:
            groups.append(members)
            placed.update(members)

    def device(n: str) -> Optional[str]:
        bus = G.nodes[n].get("nic")
        return bus[:-1] if isinstance(bus, str) and len(bus) > 1 else None

    adj = None
    for i, n in enumerate(nets):
        if n in placed:
            continue
        members = [n]
        placed.add(n)
        for m in nets[i + 1:]:
            if len(members) == NET_MAX_DEVS_PER_NIC:
                break
            if m in placed:
                continue
            if device(n) is not None and device(n) == device(m):
                apart = _PATH_PORT
            elif merge_level > _PATH_PORT:      # a wider NCCL_NET_MERGE_LEVEL: the PCI path between the NICs
                if adj is None:
                    adj = _Adj(G)
                nic_n, nic_m = G.nodes[n].get("nic"), G.nodes[m].get("nic")
                p = _nccl_paths_to(adj, nic_n).get(nic_m) if nic_n in G and nic_m in G else None
                apart = RANK[p.type] if p is not None else RANK["SYS"] + 1
            else:
                continue
            if apart <= merge_level:
                members.append(m)
                placed.add(m)
        groups.append(members)
    return groups


def net_domains(doc_or_graph: Any, ps: PathSet, gpus: Optional[list] = None, *, net_disable_intra: int = 0,
                shm_disable: int = 0, merge_level: int = _PATH_PORT, force_merge: Optional[str] = None) -> list:
    """The domains NCCL splits a node's GPUs into (paths.cc ``ncclTopoComputePaths`` marking PATH_NET,
    ``ncclTopoTrimSystem`` numbering them), as lists of GPU node ids in ``gpus`` order (default: all
    GPUs by index); one domain when nothing is split.

    A pair p -> g is PATH_NET when P2P cannot connect it (``ncclTopoCheckNet``: both GPUs reach a NIC
    over a path of type <= PXB wider than the p -> g path, unless NCCL_NET_DISABLE_INTRA=1; or P2P is
    not possible and NCCL_SHM_DISABLE=1).  The GPU -> NET paths are the ones NCCL has at that point
    (its BFS, before the P2C/PXN/no-GDR post-processing), the GPU -> GPU paths ``ps``'s (after the
    P2P reroute through the CPU, as NCCL's).  A NIC is the virtual NIC NCCL fuses from ports
    (:func:`fused_nics`; ``merge_level``/``force_merge``: NCCL_NET_MERGE_LEVEL/NCCL_NET_FORCE_MERGE): its
    bandwidth is the sum of its ports', up to the PCI path to the card.  Domains as NCCL numbers them:
    GPU g joins the lowest domain of an earlier GPU p whose g -> p path is not PATH_NET (a single pass,
    as in NCCL)."""
    G = as_graph(doc_or_graph)
    order = list(gpus) if gpus is not None else gpu_nodes(G)
    nets = net_nodes(G)
    if len(order) < 2:
        return [order]
    best_net: dict = {g: 0.0 for g in order}
    if nets and not net_disable_intra:
        adj = _Adj(G)
        for group in fused_nics(G, nets, merge_level, force_merge):
            to_n = _nccl_paths_to(adj, group[0])
            if len(group) > 1:      # the card's PCI path, at the ports' summed speed
                nic = G.nodes[group[0]].get("nic")
                to_card = _nccl_paths_to(adj, nic) if nic in G else {}
                speed = sum(float(G.nodes[m].get("bw") or 0.0) for m in group)
            for g in order:
                p = to_n.get(g)
                if p is None or RANK[p.type] > RANK["PXB"]:
                    continue
                bw = p.bw
                if len(group) > 1 and to_card.get(g) is not None:
                    bw = min(to_card[g].bw, speed)
                if bw > best_net[g]:
                    best_net[g] = bw

    def is_net(a: str, b: str) -> bool:
        p = ps.get(a, b)
        if p is None:
            return False
        if not net_disable_intra and best_net[a] > p.bw and best_net[b] > p.bw:
            via_gpu = p.via is not None and G.nodes[p.via].get("type") == "GPU"
            return not via_gpu          # P2P through an intermediate GPU is taken before the NET check
        via_cpu = p.via is not None and G.nodes[p.via].get("type") == "CPU"
        return bool(shm_disable) and via_cpu

    dom = list(range(len(order)))
    for i, g in enumerate(order):
        for j in range(i):
            if not is_net(g, order[j]):
                dom[i] = min(dom[i], dom[j])
    out: dict = {}
    for i, g in enumerate(order):
        out.setdefault(dom[i], []).append(g)
    return [out[k] for k in sorted(out)]
