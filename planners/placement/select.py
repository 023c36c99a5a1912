"""``gpucomm select``: the best K of a node's free GPUs, for schedulers and device plugins
(``gpucomm select``).

Two policies over the same inputs:

* :func:`gpuallocator_besteffort` -- NVIDIA go-gpuallocator's best-effort policy, reproduced
  faithfully (``gpuallocator/besteffort_policy.go``, ``internal/links/device.go`` @ 876e7b76;
  ``placement/go-gpuallocator-besteffort.md``).  Pair score = sum of the links NVML reports between
  two GPUs: the PCIe common-ancestor level (SYSTEM 10, NODE 20, HOSTBRIDGE 30, MULTIPLE 40,
  SINGLE 50, INTERNAL 60) plus 100 per NVLink whose *remote PCI bus id is the peer GPU* -- so behind
  an NVSwitch (remote = the switch) NVLink adds nothing ("TODO(klueska): Handle NVSwitch
  semantics").  ``Allocate`` pads the free list to a multiple of K, enumerates every partition into
  sets of K (first device of each set increasing; sets with partial padding skipped), keeps the
  highest-scoring partition that has a padding-free set holding the required GPUs, and returns the
  best set of that partition (ties: first found).  K == 1 returns the first free GPU.
  This is what Kubernetes' NVIDIA device plugin returns from ``GetPreferredAllocation``.

* :func:`select_gpus` (ours) -- ranks every K-subset by, in order: the bandwidth a ring over the set
  can sustain (NVSwitch = every pair at the GPU's full NVLink bandwidth; PCIe levels by their
  path), fewer NUMA nodes, more distinct NICs next to the set (PIX/PXB; multi-node jobs), how little
  the choice fragments the GPUs left free (a 1-GPU job should not split an NVLink pair,
  k8s-device-plugin#1193), then total pair bandwidth and the lowest indices.
"""
from __future__ import annotations

import itertools
import math
from typing import Dict, List, Optional, Sequence, Tuple

from gpucomm.probes.errors import InputError, NothingToDo, PlanInfeasible
from gpucomm.probes.model import natural_key as _natural
from gpucomm.probes.model import normalize_bus_id
from gpucomm.probes.topology import GPU, Topology, nv_count

from gpucomm.planners.placement.nics import NIC_LEVEL_RANK, compute_nics
from gpucomm.planners.placement.nodeview import NodeView, node_view, pcie_level

# NVML nvmlGpuTopologyLevel_t -> go-gpuallocator P2PLinkType points, by nvidia-smi code.
PCIE_POINTS = {"SYS": 10, "SOC": 10, "NODE": 20, "PHB": 30, "PXB": 40, "PIX": 50}
NVLINK_POINTS = 100          # per link, up to 18 links (EighteenNVLINKLinks)
MAX_PARTITIONS = 2_000_000   # Python needs ~1 us per partition per set; beyond this we refuse
EXHAUSTIVE_SETS = 50_000     # our policy enumerates C(n, k) sets up to this many, else greedy


def _direct_nvlinks(topo: Topology, a: GPU, b: GPU) -> int:
    """Enabled NVLinks of ``a`` whose remote PCI bus id is ``b`` (go-gpuallocator GetNVLink)."""
    target = b.pci_bus_id
    if a.nvlink_states:
        n = 0
        for l in a.nvlink_states:
            state = str(l.state or "").lower()
            if state and state not in ("up", "active", "enabled", "1", "true"):
                continue
            if l.remote is None:
                continue
            r = normalize_bus_id(l.remote) or l.remote
            if (target and r == target) or r == b.key:
                n += 1
        return min(n, 18)
    # No per-link records: GPU-GPU nvlink links of the document (never GPU-NVSwitch ones).
    ida = a.pci_bus_id or a.key
    idb = b.pci_bus_id or b.key
    total = 0
    found = False
    for l in topo.links:
        if l.kind == "nvlink":
            found = True
            if {l.a, l.b} == {ida, idb}:
                total += l.count or 1
    if found:
        return min(total, 18)
    # A bare `nvidia-smi topo -m` capture: NV# is all we know.  Without NVSwitch records it is
    # taken as direct links (true on NVLink-bridge and hybrid-cube-mesh boxes).
    if any(s.kind == "nvswitch" for s in topo.switches.values()):
        return 0
    return min(nv_count((topo.matrix.get(a.key) or {}).get(b.key)), 18)


def gpuallocator_pair_scores(topo) -> Dict[Tuple[int, int], int]:
    """{(i, j): score} for every ordered pair of GPUs (go-gpuallocator calculateGPUPairScore) of a
    topology (a :class:`Topology` or a document)."""
    topo = Topology.of(topo)
    scores: Dict[Tuple[int, int], int] = {}
    for a in topo.gpus:
        for b in topo.gpus:
            if a is b:
                continue
            lvl = pcie_level(topo, a, b)
            s = PCIE_POINTS.get(lvl or "", 0)
            s += NVLINK_POINTS * _direct_nvlinks(topo, a, b)
            scores[(a.index, b.index)] = s
    return scores


def _set_score(scores: Dict[Tuple[int, int], int], s: Sequence[Optional[int]]) -> int:
    total = 0
    for i, a in enumerate(s):
        if a is None:
            continue
        for b in s[i + 1:]:
            if b is not None:
                total += scores[(a, b)]
    return total


def count_partitions(n: int, k: int) -> int:
    """Partitions go-gpuallocator enumerates for n free GPUs padded to a multiple of k (upper bound
    ignoring the padding pruning): (m*k)! / ((k!)^m * m!) with m = ceil(n/k)."""
    m = -(-n // k)
    return math.factorial(m * k) // (math.factorial(k) ** m * math.factorial(m))


def gpuallocator_besteffort(topo, free: Sequence[int], k: int, required: Sequence[int] = ()) -> List[int]:
    """go-gpuallocator ``bestEffortPolicy.Allocate(available=free, required, size=k)`` over a topology (a
    :class:`Topology` or a document); [] when it would return no devices."""
    free = list(free)
    if k <= 0 or len(free) < k or len(required) > k:
        return []
    if k == 1:
        # iterateGPUPartitions' size==1 shortcut: each device is a partition; all score 0, so the
        # first partition holding the required device wins.
        for d in free:
            if all(r == d for r in required):
                return [d]
        return []
    if count_partitions(len(free), k) > MAX_PARTITIONS:
        raise InputError(f"go-gpuallocator's exhaustive search over {len(free)} free GPUs in sets of {k} "
                         f"means about {count_partitions(len(free), k):,} partitions; too many to reproduce here",
                         expected="fewer free GPUs (--free) or another --count")
    scores = gpuallocator_pair_scores(topo)
    devices: List[Optional[int]] = free + [None] * ((-len(free)) % k)
    padding = devices.count(None)
    req = set(required)
    best_part: Optional[List[List[Optional[int]]]] = None
    best_score = 0
    cache: Dict[Tuple, int] = {}

    def sscore(s: Tuple) -> int:
        v = cache.get(s)
        if v is None:
            v = cache[s] = _set_score(scores, s)
        return v

    def iterate(devs: List[Optional[int]], accum: List[Tuple]) -> None:
        nonlocal best_part, best_score
        if len(devs) == k:
            cand = accum + [tuple(devs)]
            if not any(req <= set(s) and None not in s for s in cand):
                return
            sc = sum(sscore(s) for s in cand)
            if sc > best_score or best_part is None:
                best_part, best_score = [list(s) for s in cand], sc
            return
        first = devs[0]
        for rest in itertools.combinations(devs[1:], k - 1):
            s = (first,) + rest
            p = s.count(None)
            if not (p == 0 or p == padding):
                continue
            remaining = list(devs[1:])
            for x in rest:
                remaining.remove(x)
            iterate(remaining, accum + [s])

    iterate(devices, [])
    if best_part is None:
        return []
    filtered = [s for s in best_part if req <= set(s)]
    if not filtered:
        return []
    best = filtered[0]
    bs = sscore(tuple(best))
    for s in filtered[1:]:
        sc = sscore(tuple(s))
        if sc > bs:
            best, bs = s, sc
    return [d for d in best if d is not None]


# --------------------------------------------------------------------------------------------
def ring_bw(view: NodeView, gpus: Sequence[int]) -> float:
    """Bandwidth a ring through the set can sustain (GB/s): the best Hamiltonian cycle's narrowest
    hop, exact up to 7 GPUs; above that the bound "every GPU needs two ring neighbours" (the
    second-best link of the worst GPU), exact on uniform fabrics like NVSwitch."""
    g = list(gpus)
    if len(g) < 2:
        return float("inf")
    if len(g) == 2:
        return view.pair_bw(g[0], g[1])
    if view.nvswitch and all(nv_count(view.level.get((a, b))) for a in g for b in g if a != b):
        return min(view.nvlink_bw_per_gpu(x) for x in g)
    if len(g) <= 7:
        first, rest = g[0], g[1:]
        best = 0.0
        for perm in itertools.permutations(rest):
            if perm[0] > perm[-1]:
                continue  # a cycle and its mirror are the same ring
            cyc = (first,) + perm
            bw = min(view.pair_bw(cyc[i], cyc[(i + 1) % len(cyc)]) for i in range(len(cyc)))
            best = max(best, bw)
        return best
    return min(sorted((view.pair_bw(a, b) for b in g if b != a), reverse=True)[1] for a in g)


def _best_partner(view: NodeView, x: int, pool: Sequence[int]) -> float:
    return max((view.pair_bw(x, y) for y in pool if y != x), default=0.0)


def _score(view: NodeView, s: Tuple[int, ...], free: Sequence[int]) -> Tuple:
    numa = {view.gpu(x).numa_node for x in s}
    numa.discard(None)
    nics = set()
    for x in s:
        lvl = view.gpu_nic_level.get(x)
        if lvl is not None and NIC_LEVEL_RANK.get(lvl, 9) <= NIC_LEVEL_RANK["PXB"]:
            nics.update(view.gpu_nics.get(x, []))
    rest = [y for y in free if y not in s]
    frag = sum(1 for y in rest if _best_partner(view, y, rest) < _best_partner(view, y, free) - 1e-9)
    total = sum(view.pair_bw(a, b) for i, a in enumerate(s) for b in s[i + 1:])
    rb = ring_bw(view, s)
    return (round(rb if math.isfinite(rb) else 0.0, 3), -len(numa), len(nics), -frag, round(total, 3),
            tuple(-x for x in s))


def select_gpus(topo, k: int, free: Optional[Sequence[int]] = None, compare: bool = True) -> dict:
    """Our choice of ``k`` GPUs among ``free`` (default: all) of a topology (a :class:`Topology` or a
    document), with the reasons, and go-gpuallocator's choice on the same input for comparison
    (``compare``)."""
    view = node_view(topo)
    all_idx = view.index
    if free is None:
        free = list(all_idx)
    free = sorted(set(int(f) for f in free))
    bad = [f for f in free if f not in all_idx]
    if bad:
        raise InputError(f"--free lists GPU {bad[0]}, which the topology does not have",
                         expected="indices among " + ",".join(map(str, all_idx)))
    if k < 1:
        raise InputError(f"--count {k}", expected="an integer >= 1")
    if not free:
        raise NothingToDo("no free GPUs to select from")
    if k > len(free):
        raise PlanInfeasible(f"--count {k} but only {len(free)} GPU(s) are free")
    warnings: List[str] = list(view.notes) + view.topo.all_assumptions()
    if view.mig and k > 1:
        warnings.append("MIG-enabled GPUs in the set: no P2P between MIG slices (nccl#1716)")
    if math.comb(len(free), k) <= EXHAUSTIVE_SETS:
        cands = itertools.combinations(free, k)
        best = max(cands, key=lambda s: _score(view, s, free))
        method = "exhaustive"
    else:
        best = None
        for seed in free:
            s = [seed]
            while len(s) < k:
                nxt = max((y for y in free if y not in s),
                          key=lambda y: (min(view.pair_bw(y, x) for x in s), sum(view.pair_bw(y, x) for x in s), -y))
                s.append(nxt)
            t = tuple(sorted(s))
            if best is None or _score(view, t, free) > _score(view, best, free):
                best = t
        method = "greedy"
    ours = list(best)
    out = {"schema": "gpucomm.select/v1", "count": k, "free": free, "policy": "gpucomm", "method": method,
           "gpus": ours, "devices": devices(view, ours), "details": _details(view, ours, free), "gpuallocator": None,
           "warnings": warnings}
    if compare:
        try:
            theirs = gpuallocator_besteffort(view.topo, free, k)
            scores = gpuallocator_pair_scores(view.topo)
            out["gpuallocator"] = {"gpus": theirs, "devices": devices(view, theirs), "score": _set_score(scores, theirs),
                                   "details": _details(view, theirs, free) if theirs else None}
            out["details"]["gpuallocator_score"] = _set_score(scores, ours)
        except InputError as e:
            warnings.append(str(e))
    return out


def devices(view: NodeView, s: Sequence[int]) -> List[dict]:
    """What a device plugin or a job needs to name the chosen GPUs: NVML index, PCI bus id, UUID
    (``CUDA_VISIBLE_DEVICES`` / ``NVIDIA_VISIBLE_DEVICES`` accept UUIDs), NUMA node."""
    out = []
    for i in s:
        g = view.gpu(i)
        numa = g.numa_node
        out.append({"index": i, "pci_bus_id": g.pci_bus_id, "uuid": g.uuid,
                    "numa_node": numa if numa is not None and numa >= 0 else None})
    return out


def _details(view: NodeView, s: List[int], free: Sequence[int]) -> dict:
    sc = _score(view, tuple(s), free)
    nics = sorted({n for x in s for n in view.gpu_nics.get(x, [])
                   if NIC_LEVEL_RANK.get(view.gpu_nic_level.get(x, "SYS"), 9) <= NIC_LEVEL_RANK["PXB"]})
    return {"ring_GBps": sc[0] if len(s) > 1 else None, "numa_nodes": -sc[1], "nearby_nics": nics,
            "fragmented_free_gpus": -sc[3], "pair_bw_sum_GBps": sc[4],
            "links": {f"{a}-{b}": view.level.get((a, b)) for i, a in enumerate(s) for b in s[i + 1:]}}


def parse_index_list(text: Optional[str], what: str = "--free") -> Optional[List[int]]:
    """``0,1,3`` or ``0-3,6`` -> [ints]; None stays None."""
    if text is None:
        return None
    from gpucomm.probes.model import parse_cpulist

    try:
        vals = parse_cpulist(text)
    except (ValueError, TypeError):
        raise InputError(f"{what} {text!r} is not a list of GPU indices", expected="e.g. 0,1,3 or 0-3,6") from None
    if not vals and text.strip():
        raise InputError(f"{what} {text!r} is not a list of GPU indices", expected="e.g. 0,1,3 or 0-3,6")
    return vals


# ============================================================================================
# Nodes of a cluster: ``gpucomm select --nodes N --cluster FILE``
NODES_SCHEMA = "gpucomm.select-nodes/v1"


def _best_fit(groups: Dict[str, List[str]], count: int) -> Optional[str]:
    """The group with the fewest candidates that still holds ``count`` (leaves bigger groups whole);
    ties: natural order of the group's name."""
    fit = [g for g, hs in groups.items() if len(hs) >= count]
    return min(fit, key=lambda g: (len(groups[g]), _natural(g))) if fit else None


def select_nodes(cluster, count: int, free: Optional[Sequence[str]] = None, nic_gbps: Optional[float] = None) -> dict:
    """N nodes for one job out of a cluster (gpucomm.planners.placement.cluster.Cluster): healthy ones
    (no doctor error when the cluster was joined), in ``free`` when given, as close as the fabric
    allows -- one NVLink domain, else one leaf, else under the lowest switch that has room (its leaves
    taken whole, fullest first) -- and what leaving a leaf costs (``nic_gbps``: one node's rate)."""
    from gpucomm.planners.placement.fabric import leaf_costs
    from gpucomm.probes.formats.slurm_topology import compress_hostlist

    if count < 1:
        raise InputError(f"--nodes {count}", expected="an integer >= 1")
    free_set = set(free) if free is not None else None
    unknown = sorted(free_set - set(cluster.nodes), key=_natural) if free_set is not None else []
    cand = [h for h in cluster.nodes if h not in cluster.unhealthy and (free_set is None or h in free_set)]
    excluded = {"unhealthy": sum(1 for h in cluster.nodes if h in cluster.unhealthy),
                "not_free": 0 if free_set is None else sum(1 for h in cluster.nodes if h not in free_set)}
    warnings = [f"--free names {len(unknown)} host(s) the cluster does not have: {', '.join(unknown[:5])}"] if unknown else []
    if len(cand) < count:
        raise PlanInfeasible(f"{count} nodes wanted but only {len(cand)} are free and healthy"
                             + (f" ({excluded['unhealthy']} unhealthy)" if excluded["unhealthy"] else ""))
    fab = cluster.fabric
    order = fab.dfs_nodes() if fab is not None else list(cluster.nodes)
    rank = {h: i for i, h in enumerate(order)}
    cand.sort(key=lambda h: (rank.get(h, len(rank)), _natural(h)))
    chosen: Optional[List[str]] = None
    span: dict = {}
    doms: Dict[str, List[str]] = {}
    for h in cand:
        if cluster.domain_of.get(h):
            doms.setdefault(cluster.domain_of[h], []).append(h)
    d = _best_fit(doms, count) if doms else None
    if d is not None:
        chosen, span = doms[d][:count], {"within": "nvlink-domain", "name": d}
    elif fab is not None:
        leaves: Dict[str, List[str]] = {}
        for h in cand:
            leaves.setdefault(fab.node_leaf.get(h, "?"), []).append(h)
        lf = _best_fit(leaves, count)
        if lf is not None:
            chosen, span = leaves[lf][:count], {"within": "leaf", "name": lf}
        else:
            # the lowest switch above the leaves with room: its leaves whole, fullest first, the rest best-fit
            by_switch: Dict[Tuple[int, str], List[str]] = {}
            for h in cand:
                for lvl, sw in enumerate(fab.chain(h)[1:], 2):
                    by_switch.setdefault((lvl, sw), []).append(h)
            for lvl in sorted({k[0] for k in by_switch}):
                level_groups = {sw: hs for (L, sw), hs in by_switch.items() if L == lvl}
                sw = _best_fit(level_groups, count)
                if sw is None:
                    continue
                members = set(level_groups[sw])
                under = {lf: [h for h in hs if h in members] for lf, hs in leaves.items()}
                under = {lf: hs for lf, hs in under.items() if hs}
                chosen, used = [], set()
                for lf in sorted(under, key=lambda x: (-len(under[x]), _natural(x))):
                    need = count - len(chosen)
                    if need <= 0:
                        break
                    if len(under[lf]) > need and any(x != lf and x not in used and need <= len(under[x]) < len(under[lf])
                                                     for x in under):
                        continue       # a smaller leaf holds the remainder: keep this one whole for later jobs
                    chosen += under[lf][:need]
                    used.add(lf)
                if len(chosen) < count:   # pragma: no cover - the switch has room by construction
                    chosen += [h for h in level_groups[sw] if h not in chosen][:count - len(chosen)]
                span = {"within": f"level{lvl}", "name": sw}
                break
    if chosen is None:
        chosen, span = cand[:count], {"within": "fabric" if fab is None else "several fabrics", "name": None}
        if fab is not None:
            warnings.append("no switch has room for all of them: the nodes share no switch (separate fabrics)")
    used_leaves = sorted({fab.node_leaf.get(h) for h in chosen} - {None}, key=_natural) if fab is not None else []
    used_domains = sorted({cluster.domain_of[h] for h in chosen if cluster.domain_of.get(h)}, key=_natural)
    if cluster.fabric_doc:      # the fabric's own host links, where it gives their rates
        link = {h["name"]: sum(c.get("rate_gbps") or 0 for c in h.get("hcas") or []) for h in cluster.fabric_doc["hosts"]}
        rates = [link.get(h) for h in chosen]
        if rates and all(rates):
            nic_gbps = min(rates) if nic_gbps is None else min(min(rates), nic_gbps)
    cost = None
    if len(used_leaves) > 1:
        costs = leaf_costs(cluster.fabric_doc) if cluster.fabric_doc else {}
        worst = [costs[lf] for lf in used_leaves if lf in costs and costs[lf]["oversubscription"]]
        share = min((c["uplink_share"] for c in worst), default=None)
        largest = max((len([h for h in cand if fab.node_leaf.get(h) == lf]) for lf in set(fab.node_leaf.values())), default=0)
        text = (f"the {count} nodes span {len(used_leaves)} leaves (the largest leaf has {largest} free healthy node(s)): "
                "traffic between them crosses the spine")
        if share is not None and share < 1:
            text += (f"; those leaves' uplinks are oversubscribed up to {max(c['oversubscription'] for c in worst):g}:1, so "
                     f"when every node sends at once each gets {share:.0%} of its link"
                     + (f" (~{nic_gbps * share:g} of {nic_gbps:g} Gb/s)" if nic_gbps else ""))
        elif cluster.fabric_doc is None:
            text += "; link rates are unknown here (a Slurm topology): one more switch hop each way"
        else:
            text += "; the uplinks are not oversubscribed: one more switch hop each way, no bandwidth lost"
        cost = {"leaves": len(used_leaves), "uplink_share": share, "per_node_gbps": (nic_gbps * share) if (nic_gbps and share) else None,
                "text": text}
    return {"schema": NODES_SCHEMA, "count": count, "nodes": chosen, "hostlist": compress_hostlist(chosen),
            "span": dict(span, leaves=used_leaves, nvlink_domains=used_domains), "crosses_spine": len(used_leaves) > 1,
            "cost": cost, "candidates": len(cand), "excluded": excluded, "warnings": warnings}


def node_nic_gbps(topo) -> Optional[float]:
    """One node's RDMA rate to the fabric (its compute NICs, summed; ``topo``: a :class:`Topology` or a
    document), or None."""
    nics = {n.name: n for n in Topology.of(topo).nics}
    return sum((n.rate_gbps or 0) for n in compute_nics(nics).values() if n.rdma) or None


def cluster_network(cluster, nodes: int, topo, selection: Optional[dict] = None) -> dict:
    """What one NIC delivers to a job of ``nodes`` nodes of ``cluster`` (picked as :func:`select_nodes`
    picks them; ``selection``: its answer, where the caller has it): the slower of the node's NIC
    (``topo``: a :class:`Topology` or a document) and the fabric's host link, times the leaf uplinks'
    share when the nodes span leaves.  -> {"nodes", "fabric_gbps" (None: the topology's own NIC rate),
    "note", "selection"}."""
    sel = selection if selection is not None else select_nodes(cluster, nodes)
    rates = [n.rate_gbps for n in compute_nics({n.name: n for n in Topology.of(topo).nics}).values() if n.rdma]
    per_nic = max((r for r in rates if r), default=None)
    link = None
    if cluster.fabric_doc:
        hosts = {h["name"]: h for h in cluster.fabric_doc["hosts"]}
        links = [c["rate_gbps"] for n in sel["nodes"] for c in (hosts.get(n) or {}).get("hcas") or [] if c.get("rate_gbps")]
        link = min(links) if links else None
    base = min(x for x in (per_nic, link) if x) if (per_nic or link) else None
    share = (sel["cost"] or {}).get("uplink_share") or 1.0
    gbps = round(base * share, 3) if base and (share < 1 or (link and per_nic and link < per_nic)) else None
    where = sel["span"]["within"]
    note = (f"--cluster: {nodes} node(s) {sel['hostlist']} within {where}"
            + (f"; leaf uplinks {1 / share:.2f}:1 oversubscribed: each NIC gets ~{gbps:g} Gb/s" if share < 1 and gbps else "")
            + (f"; the fabric's host links run {link:g} Gb/s (the node's NIC: {per_nic:g})"
               if link and per_nic and link < per_nic else ""))
    return {"nodes": nodes, "fabric_gbps": gbps, "note": note, "selection": sel}
