"""Our rings: K channels, each a Hamiltonian cycle over the chosen GPUs (one node) or a chain entering
and leaving the node through NICs (several identical nodes), sharing link capacity, chosen to maximise
the total bus bandwidth (the sum over channels of each channel's bandwidth).

The model is NCCL's own system of the node (:func:`gpucomm.planners.nccl.sysview.node_system`: the
system and paths ``predict`` and NCCL's search run on), so the comparison with NCCL is like for like:
every hop of a channel follows the route NCCL's transports use and takes ``bw x amount`` on each
link of it (``followPath``'s amounts); the search and its capacity model are
:mod:`gpucomm.planners.collectives.ringsearch`.  One channel never gets more than the top of NCCL's
speed ladder (40/60/90 GB/s intra, 48/48/96 inter, :func:`gpucomm.planners.nccl.search.channel_cap`).

Variants, the better total wins: ``widest-cycle`` gives each channel its whole bottleneck,
``water-filling`` a quarter of the channel cap at a time (so channels sharing links are balanced --
on a fully connected 4-GPU mesh it reaches 188 of the 192 GB/s possible, where NCCL's rings reach
180).  Across nodes, among equally wide chains each variant prefers leaving through the entry NIC
(rail aligned), then the shorter route; both are also run with the shorter route first
(``.../cross-nic``, what NCCL_CROSS_NIC allows): a rail-aligned exit from a GPU that is not next to
the NIC is routed through another GPU (PXN) or across the CPU, which costs capacity the next channels
need (OCI H100 at 2 nodes: rail-first is narrower than cross-nic, as NCCL's rings, which enter by GPU
i's NIC and leave by GPU j's).  Channels with the same order are merged and cut into cap-sized
channels.

Where NCCL splits the node into domains joined by the network (``ncclTopoCheckNet``: two GPUs that both
reach a NIC over a path of type <= PXB faster than over their P2P path; NCCL_NET_DISABLE_INTRA=1 turns it
off -- :meth:`gpucomm.planners.nccl.sysview.NodeSystem.domains`), a channel may do the same: one
NET-to-NET chain per domain, chain k leaving through a NIC that sends to the NIC chain k+1 enters through
(``RingChannel.breaks``).  Whole-node cycles (P2P across the domains) remain a candidate.

The NCCL reference's rings, placed in the same capacity model and topped up, are a third candidate
(``nccl-seeded``); the plan reports which one won (``method``), so a regression of the search itself
stays visible.  NICs are NCCL's network devices: the ports NCCL fuses into one virtual NIC
(``mlx5_0+mlx5_1``) are one device here too.  The search stops when the widest channel left is under
5% of the first one.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Union

from gpucomm.probes.errors import InputError, NothingToDo, PlanInfeasible, TopologyError
from gpucomm.probes.topology import Topology, check_document

from gpucomm.planners.nccl.comm import nccl_reference, tray_layout
from gpucomm.planners.nccl.names import MAXCHANNELS
from gpucomm.planners.nccl.search import RING_MAX_CHANNELS, channel_cap
from gpucomm.planners.nccl.sysview import NodeSystem, node_system
from gpucomm.planners.collectives.ringsearch import (EXACT_MAX_GPUS, MAX_ROUNDS, MIN_SHARE, QUANTUM_PARTS, Capacity,
                                                     Packer, RingChannel, _hops, consolidate, port_bw)
from gpucomm.planners.collectives.validate import validate_capacity, validate_ring


@dataclass
class RingPlan:
    """Result of :func:`search_rings`: channels over NCCL's system ``ns`` of the node."""

    ns: NodeSystem
    gpus: list
    nodes: int
    channels: list
    cap: float
    method: str
    exact: bool
    nccl_reference: Optional[dict] = None
    warnings: list = field(default_factory=list)
    domains: Optional[list] = None    # the NIC-joined domains (ncclTopoCheckNet) the channels chain through
    assumptions: list = field(default_factory=list)
    trays: Optional[int] = None       # the job's trays (hosts): nodes x hosts_per_system (None: nodes)
    hosts_per_system: int = 1         # trays NCCL fuses into one system (an MNNVL clique); ``nodes`` = systems
    layout_note: Optional[str] = None

    @property
    def total_bw(self) -> float:
        return round(sum(c.bw for c in self.channels), 4)

    def hops(self, ch: RingChannel) -> list:
        """(src, dst) of every path of a channel (a NIC hop inside the node is its two paths GPU -> NET
        and NET -> GPU; the network between the two NICs is not a path of the system)."""
        return _hops(ch.gpus, ch.nets, ch.breaks)

    def to_dict(self) -> dict:
        """The ``gpucomm.rings/v1`` document."""
        ns = self.ns
        idx = lambda g: ns.nodes[g]["index"]  # noqa: E731
        name = lambda n: ns.nodes[n]["name"]  # noqa: E731
        chans = []
        for i, ch in enumerate(self.channels):
            links = []
            for s, d in _hops(ch.gpus, ch.nets, ch.breaks, wire=True):
                if ns.nodes[s]["type"] == "NET" and ns.nodes[d]["type"] == "NET":
                    links.append({"from": ns.label(s), "to": ns.label(d), "type": "NET", "hops": 1, "via": None,
                                  "path_bw_GBps": round(min(port_bw(ns, s, send=True), port_bw(ns, d, send=False)), 3)})
                    continue
                p = ns.path(s, d)
                links.append({"from": ns.label(s), "to": ns.label(d), "type": p.type, "path_bw_GBps": round(p.bw, 3),
                              "hops": p.hops, "via": ns.label(p.via) if p.via else None})
            item = {"channel": i, "gpus": [idx(g) for g in ch.gpus], "bw_GBps": round(ch.bw, 3), "links": links}
            if self.nodes > 1:
                item["nics"] = [name(ch.nets[0]), name(ch.nets[1])]
            if ch.breaks:
                item["net_hops"] = [{"after": k, "from": idx(ch.gpus[k]), "to": idx(ch.gpus[(k + 1) % len(ch.gpus)]),
                                     "nics": [name(x), name(y)]} for k, x, y in ch.breaks]
            chans.append(item)
        ref = self.nccl_reference
        trays = self.trays or self.nodes
        return {
            "schema": "gpucomm.rings/v1",
            "nodes": trays,
            "nvlink_domain": {"trays_per_system": self.hosts_per_system, "systems": self.nodes,
                              "note": self.layout_note},
            "gpus": [idx(g) for g in self.gpus],
            "channels": chans,
            "total_bw_GBps": self.total_bw,
            "per_channel_cap_GBps": self.cap,
            "method": self.method,
            "exact": self.exact,
            "nccl_reference": None if ref is None else {
                "channels": ref["channels"], "search_channels": ref["search_channels"],
                "bw_GBps": ref["bw_intra"] if self.nodes <= 2 else ref["bw_inter"],
                "total_bw_GBps": ref["total_bw"], "type_intra": ref["type_intra"], "type_inter": ref["type_inter"],
                "nccl_nodes": ref["nccl_nodes"], "orders": _reference_orders(ns, ref)},
            "assumptions": list(self.assumptions),
            "warnings": list(self.warnings),
            **({"net_domains": [[idx(g) for g in d] for d in self.domains]} if self.domains else {}),
        }


def _reference_orders(ns: NodeSystem, ref: dict) -> list:
    """The GPU order (indices, None for a GPU not in ``ns``) of every ring channel NCCL's search found, as
    our model of NCCL has it (``ref["rings"]``; a GPU of a system of several hosts is ``GPU<dev>@<host>``)."""
    by_label = {f"GPU{a['dev']}@{a['host']}": a["index"] for a in ns.nodes.values() if a["type"] == "GPU"}
    by_label.update({a["label"]: a["index"] for a in ns.nodes.values() if a["type"] == "GPU"})
    return [[by_label.get(x) for x in r.get("gpus") or []] for r in ref.get("rings") or []]


def _parse_channels(channels: Union[str, int, None]) -> Optional[int]:
    if channels is None or (isinstance(channels, str) and channels.strip().lower() == "auto"):
        return None
    try:
        n = int(str(channels).strip())
    except ValueError:
        raise InputError(f"--channels {channels!r} is not a number", expected=f"auto or an integer 1-{MAXCHANNELS}") \
            from None
    if n < 1 or n > MAXCHANNELS:
        raise InputError(f"--channels {n} is out of range", expected=f"auto or an integer 1-{MAXCHANNELS}")
    return n


def _net_domains(ns: NodeSystem, sel: list) -> Optional[list]:
    """NCCL's NIC-joined domains of the chosen GPUs (:meth:`NodeSystem.domains`), or None when NCCL
    keeps the node whole."""
    if len(sel) < 2:
        return None
    doms = ns.domains()
    return doms if len(doms) > 1 else None


def search_rings(doc: Any, gpus: Optional[Iterable[int]] = None, channels: Union[str, int] = "auto",
                 nodes: int = 1, *, reference: bool = True, settings: Any = None,
                 nvlink_domain: Optional[int] = None) -> RingPlan:
    """Find ring channels (stable interface, used by the cost model and the CLI).

    ``doc``: topology document (or view); ``gpus``: GPU indices to use, in rank order (default all);
    ``channels``: ``"auto"`` or a count 1-64 (a count larger than the distinct rings found splits the
    widest channels, keeping the total); ``nodes``: identical nodes joined through their NICs (> 1
    makes each channel a NIC-to-NIC chain).  ``reference``: also run :func:`nccl_reference` for the
    comparison (and as a candidate); ``settings``: NCCL_* settings (default: the environment's).
    ``nvlink_domain``: nodes (trays) per NVLink domain (default: NCCL's, from the fabric info; see
    :func:`gpucomm.planners.nccl.comm.tray_layout`): the trays NCCL fuses into one system (an MNNVL clique)
    are one system here too -- a channel is a cycle over all of their GPUs through the NVSwitch, and only
    between cliques a NIC-to-NIC chain.  A document of several hosts is its hosts, ``nodes`` copies of it.
    Raises InputError (unknown GPU, bad count), TopologyError (no NICs for nodes > 1), PlanInfeasible
    (fewer than 2 GPUs on one node, disconnected GPUs, NCCL would fail)."""
    want = _parse_channels(channels)
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        raise InputError(f"--nodes {nodes!r} is out of range", expected="an integer >= 1")
    check_document(doc)
    topo = Topology.of(doc)
    if not topo.gpus:
        raise NothingToDo("topology has no GPUs")
    user = list(gpus) if gpus is not None else None
    lay = tray_layout(topo, nodes, user, settings, nvlink_domain)
    # the system our rings run on is NCCL's: one tray, or the trays of an MNNVL clique fused into one
    ns = node_system(lay.tray, lay.gpus, settings, hosts=lay.hosts)
    sel = list(ns.gpus)
    copies, nodes = nodes, lay.systems
    inter = nodes > 1
    if inter and not topo.nics:
        raise TopologyError(f"topology has no NICs: --nodes {copies} needs a network between "
                            + ("NVLink domains" if lay.hosts > 1 else "nodes"))
    if not inter and len(sel) < 2:
        raise PlanInfeasible(f"a ring needs at least 2 GPUs on one node (got {len(sel)})")
    domains = _net_domains(ns, sel)
    for a in sel:
        for b in sel:
            if a != b and ns.path(a, b) is None:
                raise PlanInfeasible(f"{ns.label(a)} cannot reach {ns.label(b)}")
    cc = min(ns.nodes[g]["sm"] for g in sel)
    cap = channel_cap(cc, inter)
    # a split node is searched as NCCL searches it: NIC-to-NIC chains, on the inter-node speed ladder
    split_cap = channel_cap(cc, True)
    limit = want or RING_MAX_CHANNELS

    def pack(seed: Optional[list], quantum: Optional[float], rail: bool = True, split: bool = False) -> tuple:
        """Hand out bandwidth to the widest channel on the residual capacity, all of its bottleneck
        at once (``quantum=None``) or ``quantum`` at a time (water filling: balances several cycles
        that share links, e.g. the 6 rings of a fully connected 4-GPU xGMI/NVLink mesh); ``rail``:
        among equally wide channels prefer the entry NIC's rail over the shorter route; with
        ``split`` every channel chains through the NIC-joined domains."""
        c = split_cap if split else cap
        pk = Packer(ns, sel, inter, c, rail, domains if split else None)
        alloc: dict = {}
        first = None
        for ch in seed or []:
            pk.take(ch.gpus, ch.nets, ch.bw, ch.breaks)
            key = (tuple(ch.gpus), tuple(ch.nets), tuple(ch.breaks))
            alloc[key] = alloc.get(key, 0.0) + ch.bw
            first = max(first or 0.0, ch.bw)
        for _ in range(MAX_ROUNDS):
            got = pk.best_channel()
            if got is None:
                break
            order, nets, bw, breaks = got
            first = first or bw
            if bw <= 1e-6 or bw < MIN_SHARE * first:
                break
            step = min(bw, quantum) if quantum else bw
            pk.take(order, nets, step, breaks)
            key = (tuple(order), tuple(nets), tuple(breaks))
            alloc[key] = alloc.get(key, 0.0) + step
        chans_ = consolidate(alloc, c)
        if len(chans_) > limit:   # keep the widest channels (auto: NCCL's 32-channel ring search limit)
            keep = sorted(range(len(chans_)), key=lambda k: (-chans_[k].bw, k))[:limit]
            chans_ = [chans_[k] for k in sorted(keep)]
        return chans_, pk.exact

    best = None
    variants = [("widest-cycle", None, True, False), ("water-filling", cap / QUANTUM_PARTS, True, False)]
    if inter:
        variants += [("widest-cycle/cross-nic", None, False, False),
                     ("water-filling/cross-nic", cap / QUANTUM_PARTS, False, False)]
    if domains is not None:   # NCCL would route between the domains through NICs: so may we
        variants += [("widest-cycle", None, True, True), ("water-filling", split_cap / QUANTUM_PARTS, True, True)]
    for method, quantum, rail, split in variants:
        got, exact_ = pack(None, quantum, rail, split)
        if best is None or sum(c.bw for c in got) > sum(c.bw for c in best[0]) + 1e-6:
            best = (got, exact_, method, split)
    chans, exact, method, used_split = best
    plan_cap = split_cap if used_split else cap
    ref = None
    if reference:
        ref = nccl_reference(topo, nodes=copies, gpus=lay.gpus, settings=settings, nvlink_domain=nvlink_domain)
        ref_doms = ref.get("domain_rings") or []
        split_seed = len(ref_doms) > 1
        seed_cap = split_cap if split_seed else cap
        seed = _reference_channels(ns, ref, inter, seed_cap)[:limit] if (split_seed or not ref_doms) else []
        if any(set(c.gpus) != set(sel) for c in seed):
            seed = []
        if seed:
            try:
                alt, alt_exact = pack(seed, seed_cap / QUANTUM_PARTS, True, split_seed)
            except PlanInfeasible:
                alt = []
            if alt and sum(c.bw for c in alt) > sum(c.bw for c in chans) + 1e-6:
                try:   # NCCL's bandwidths can exceed what our capacity model holds: keep the seed only if it fits
                    check_plan(RingPlan(ns, sel, nodes, alt, seed_cap, "nccl-seeded", alt_exact, ref))
                    chans, exact, method, used_split, plan_cap = alt, alt_exact, "nccl-seeded", split_seed, seed_cap
                except PlanInfeasible:
                    pass
    if not chans:
        raise PlanInfeasible("no ring fits: every candidate channel has zero bandwidth")
    if want is not None:
        while len(chans) < want:   # split the widest channel in two, keeping its order and total
            i = max(range(len(chans)), key=lambda k: (chans[k].bw, -k))
            c = chans[i]
            chans[i] = RingChannel(list(c.gpus), c.bw / 2, c.nets, c.breaks)
            chans.insert(i + 1, RingChannel(list(c.gpus), c.bw / 2, c.nets, c.breaks))
    plan = RingPlan(ns, sel, nodes, chans, plan_cap, method, exact, ref,
                    domains=domains if used_split else None, assumptions=lay.tray.all_assumptions(),
                    trays=lay.trays, hosts_per_system=lay.hosts, layout_note=lay.note)
    if not exact:
        plan.warnings.append(f"{len(sel)} GPUs: channels found by a heuristic search (exact up to "
                             f"{EXACT_MAX_GPUS} GPUs or on a single NVSwitch)")
    if used_split:
        lab = lambda g: str(ns.nodes[g]["index"])  # noqa: E731
        plan.warnings.append(
            "NCCL connects GPUs of different domains (" + " | ".join(",".join(map(lab, d)) for d in domains)
            + ") through the network (ncclTopoCheckNet: their NICs are faster than their P2P path; "
            "NCCL_NET_DISABLE_INTRA=1 turns this off): every channel chains through the domains NIC to NIC; "
            + ("NCCL's own chains, placed in our capacity model and topped up" if method == "nccl-seeded" else
               "each domain's chain is searched exactly, their combination one domain after the other"))
    check_plan(plan)
    return plan


def _reference_channels(ns: NodeSystem, ref: dict, inter: bool, cap: float) -> list:
    """The NCCL reference's rings as channels of our model (labels -> node ids; a GPU of a system of
    several hosts is ``GPU<dev>@<host>`` in NCCL's model)."""
    by_label = {a["label"]: n for n, a in ns.nodes.items() if a["type"] in ("GPU", "NET")}
    by_label.update({f"GPU{a['dev']}@{a['host']}": n for n, a in ns.nodes.items() if a["type"] == "GPU"})
    bw = min(ref["bw_intra"], cap)
    out = []
    if ref.get("fallback") or bw <= 0:
        return out
    if len(ref.get("domain_rings") or []) > 1 or inter:
        return _reference_chains(by_label, ref.get("domain_rings") or [ref["rings"]], inter, bw)
    for r in ref["rings"]:
        order = [by_label.get(x) for x in r["gpus"]]
        if None in order or len(set(order)) != len(order):
            return []
        out.append(RingChannel(order, bw, (None, None)))
    return out


def _reference_chains(by_label: dict, domain_rings: list, inter: bool, bw: float) -> list:
    """NCCL's rings through NICs: channel c is every domain's chain c (NET to NET) in domain order --
    one domain on a node NCCL keeps whole across nodes; on a node it splits into NIC-joined domains,
    domain k's exit NIC sends to domain k+1's entry NIC (on one node the last domain's back to the
    first's; across nodes the node enters at the first domain's entry NIC and leaves at the last
    domain's exit NIC)."""
    out = []
    for c in range(min(len(d) for d in domain_rings)):
        order, breaks, ends = [], [], []
        for j, d in enumerate(domain_rings):
            ch = d[c]
            part = [by_label.get(x) for x in ch["gpus"]]
            nets = [by_label.get(x) for x in ch["nets"]]
            if None in part or len(nets) != 2 or None in nets:
                return []
            order.extend(part)
            ends.append(nets)
        for j in range(len(ends)):
            if j + 1 < len(ends) or not inter:
                breaks.append((sum(len(d[c]["gpus"]) for d in domain_rings[:j + 1]) - 1, ends[j][1],
                               ends[(j + 1) % len(ends)][0]))
        if len(set(order)) != len(order):
            return []
        nets = (ends[0][0], ends[-1][1]) if inter else (None, None)
        out.append(RingChannel(order, bw, nets, tuple(breaks)))
    return out


def check_plan(plan: RingPlan) -> None:
    """validate_ring on every channel and validate_capacity on the whole plan."""
    ns = plan.ns
    usage: dict = {}
    cap = Capacity(ns)
    for ch in plan.channels:
        validate_ring(ch.gpus, plan.gpus, closed=plan.nodes == 1)
        if plan.nodes > 1 and (ch.nets[0] is None or ch.nets[1] is None):
            raise PlanInfeasible("a multi-node channel must enter and leave through a NIC")
        for i, x, y in ch.breaks:
            if not 0 <= i < len(ch.gpus) or (plan.nodes > 1 and i == len(ch.gpus) - 1) or \
                    any(ns.nodes.get(n, {}).get("type") != "NET" for n in (x, y)):
                raise PlanInfeasible("a NIC hop inside the node must join two GPUs of the channel through two NICs")
        if len({i for i, _, _ in ch.breaks}) != len(ch.breaks):
            raise PlanInfeasible("two NIC hops at the same position of a channel")
        for s, d in _hops(ch.gpus, ch.nets, ch.breaks):
            if ns.path(s, d) is None:
                raise PlanInfeasible(f"no path from {ns.label(s)} to {ns.label(d)}")
            for e, f in cap.loads(s, d) or []:
                usage[e] = usage.get(e, 0.0) + f * ch.bw
    validate_capacity(usage, ns.capacity, "ring plan")


def rings_report(doc, gpus: Optional[list] = None, channels: str = "auto", nodes: int = 1,
                 nvlink_domain: Optional[int] = None) -> dict:
    """The ``gpucomm.rings/v1`` document of ``gpucomm rings`` (with an NCCL log:
    :func:`gpucomm.planners.collectives.logcompare.rings_with_log`)."""
    return search_rings(Topology.of(doc), gpus=gpus, channels=channels, nodes=nodes,
                        nvlink_domain=nvlink_domain).to_dict()


__all__ = ["RingPlan", "RingChannel", "search_rings", "rings_report", "check_plan"]
