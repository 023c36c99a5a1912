"""NCCL's system graph and paths of one node, as the planners read them: the system
:mod:`gpucomm.planners.nccl.system` builds from the XML NCCL would load (the communicator's GPUs,
its network devices after NIC fusion) with the paths of ``ncclTopoComputePaths`` -- the same system
``predict`` and ``trees`` run NCCL's search on, before ``ncclTopoTrimSystem`` -- under readable names.

* Nodes are NCCL's: ``GPU3``, its device ``DEV3`` (NCCL 2.30: a GPU hangs off its physical device
  with a LOC link), PCI switches by bus id, ``NVS``, ``CPU0``, a NIC (``NIC:<bus>``) and its network
  devices (``NET:mlx5_0``; a fused virtual NIC is one device ``NET:mlx5_0+mlx5_1`` with the summed
  speed, as NCCL's ``ncclTopoMakeVNics`` builds it).  ``nodes[id]`` holds ``type`` and ``label`` and,
  per type, ``index``/``sm``/``gdr`` (GPU), ``name``/``bw``/``asic``/``port`` (NET), ``arch``/
  ``vendor`` (CPU).
* Links are directed, keyed ``(from, to, type)`` (types LOC NVL C2C PCI SYS NET), with NCCL's
  bandwidth in GB/s (C floats): :attr:`NodeSystem.links`.  NCCL does not know measured values;
  :attr:`NodeSystem.capacity` is the same with a document's ``measured_bw_GBps`` in place of NCCL's
  constant (planners prefer measured values: path bandwidths and our rings' link capacity read it).
* :meth:`NodeSystem.path` is NCCL's path between two nodes (type, bandwidth, hop count, route) after
  the post-processing NCCL applies: P2P through the CPU beyond NCCL_P2P_LEVEL, PATH_NET between GPUs
  NCCL connects through the network, P2C, PXN, no GDR through the CPU.  :meth:`NodeSystem.widest` is
  the widest route over the same links where NCCL's route leaves bandwidth unused (the view
  ``gpucomm paths`` shows by default), NCCL's own route where its rules fix it.

:func:`node_system` is cached per (pinned XML, GPUs, settings), as :func:`gpucomm.planners.nccl.comm.nccl_comm`;
it imports neither the search nor the communicator (start-up of the commands that need only the system).
"""
from __future__ import annotations

import copy
import functools
import heapq
import re
from dataclasses import dataclass
from typing import Iterable, Optional, Union

from gpucomm.probes.errors import InputError, NothingToDo
from gpucomm.probes.model import format_cpulist, normalize_bus_id
from gpucomm.probes.topology import NVS_ID, Topology, check_document

from gpucomm.planners.nccl import ncclxml as X
from gpucomm.planners.nccl.names import LINK_NAMES, PATH_NAMES, PATH_NET, PATH_NVB, PATH_PXN
from gpucomm.planners.nccl.pinning import distinct_gpus, first_host, host_gpus, nccl_inputs
from gpucomm.planners.nccl.settings import NcclSettings
from gpucomm.planners.nccl.system import (CPU, DEV, GPU, LINK_LOC, NET, NIC, NODE_TYPES, NVS, PCI,
                                          Topo, local_cpu, system_from_xml)

_ARCHS = {1: "x86_64", 2: "ppc64", 3: "arm64"}
_VENDORS = {1: "intel", 2: "amd", 3: "zhaoxin"}


@dataclass(frozen=True)
class Path:
    """One directed path: NCCL's type name, bottleneck bandwidth (GB/s), NCCL's hop count, the node
    ids ``src .. dst``, the links (keys of :attr:`NodeSystem.links`) and ``via`` -- the GPU a path
    crosses (NVB, PXN) or the CPU NCCL routes it through (no P2P, no GDR), else None."""

    src: str
    dst: str
    type: str
    bw: float
    hops: int
    nodes: tuple
    links: tuple
    via: Optional[str] = None


class NodeSystem:
    """NCCL's system of one node with its computed paths (see the module docstring)."""

    def __init__(self, topo: Topo, machine, gpus: list) -> None:
        self.topo = topo               # system.Topo: the system and the settings, paths computed
        self.machine = machine
        self.local = gpus              # the communicator's GPUs in rank order (ncclxml.SimGpu)
        sys = topo.sys
        self._id: dict = {}
        self._node: dict = {}
        self.nodes: dict = {}
        index = _gpu_indices(sys.nodes[GPU], len(machine.gpus) if machine is not None else None)
        many = sys.n_hosts > 1
        for t, nodes in enumerate(sys.nodes):
            for n in nodes:
                nid, attrs = _describe(t, n, index.get(id(n)), many)
                if nid in self._node:   # two nodes NCCL keeps apart under one name (never expected): keep both
                    nid = f"{nid}#{n.idx}"
                self._id[id(n)] = nid
                self._node[nid] = n
                self.nodes[nid] = attrs
        self.links: dict = {}          # (from, to, type) -> GB/s
        self.out: dict = {nid: [] for nid in self.nodes}
        self._key: dict = {}           # id(Link) -> key
        for nodes in sys.nodes:
            for n in nodes:
                u = self._id[id(n)]
                for l in n.links:
                    key = (u, self._id[id(l.rem)], LINK_NAMES.get(l.type, str(l.type)))
                    self.links[key] = float(l.bw)
                    self._key[id(l)] = key
                    self.out[u].append(key)
        self.gpus = sorted((self._id[id(g)] for g in sys.nodes[GPU]), key=lambda g: self.nodes[g]["index"])
        self.nets = [self._id[id(n)] for n in sys.nodes[NET]]     # NCCL's order (network device index)
        self.capacity: dict = self.links   # with measured values in place of NCCL's (see with_measured)
        self.measured: dict = {}
        self._paths: dict = {}
        self._widest: dict = {}
        self.derived: dict = {}        # what planners derive from this system once (keyed by the planner)
        self._level = None             # Topo.p2p_level(), once

    def with_measured(self, measured: dict) -> "NodeSystem":
        """This system with ``measured`` ({link key: GB/s}) in place of NCCL's bandwidths in
        :attr:`capacity` and in path bandwidths (NCCL's routes are unchanged: NCCL chose them on its
        constants); itself when there is nothing measured."""
        if not measured:
            return self
        ns = copy.copy(self)
        ns.measured = dict(measured)
        ns.capacity = {**self.links, **measured}
        ns._paths, ns._widest, ns.derived = {}, {}, {}
        return ns
    # ---- names
    def label(self, nid: Optional[str]) -> Optional[str]:
        return self.nodes[nid]["label"] if nid in self.nodes else nid

    def node(self, nid: str):
        """NCCL's node (system.Node) behind an id."""
        return self._node[nid]

    def link_key(self, link) -> tuple:
        """The key of one of NCCL's links (system.Link)."""
        return self._key[id(link)]

    def gpu_of_index(self, index: int) -> Optional[str]:
        return next((g for g in self.gpus if self.nodes[g]["index"] == index), None)

    # ---- NCCL's paths
    def path(self, src: str, dst: str) -> Optional[Path]:
        """NCCL's path from ``src`` to ``dst`` (None when NCCL has none: a disconnected node, a type
        NCCL computes no paths to)."""
        key = (src, dst)
        got = self._paths.get(key)
        if got is None and key not in self._paths:
            got = self._paths[key] = self._nccl_path(src, dst)
        return got

    def _nccl_path(self, src: str, dst: str) -> Optional[Path]:
        if src == dst or src not in self._node or dst not in self._node:
            return None
        a, b = self._node[src], self._node[dst]
        paths = a.paths[b.type]
        if paths is None or b.idx >= len(paths):
            return None
        p = paths[b.idx]
        if p.count == 0 or p.type >= len(PATH_NAMES) - 1 and not p.list:
            return None
        nodes = [src]
        for l in p.list:
            nodes.append(self._id[id(l.rem)])
        links = tuple(self._key[id(l)] for l in p.list)
        bw = min(self.capacity[k] for k in links) if self.measured else float(p.bw)
        return Path(src, dst, PATH_NAMES[p.type], bw, int(p.count), tuple(nodes), links,
                    self._via(a, b, p.type, nodes))

    def _via(self, a, b, ptype: int, nodes: list) -> Optional[str]:
        """The GPU an NVB/PXN path crosses; the CPU NCCL routes a GPU<->GPU or GPU<->NET path through
        because P2P (ncclTopoCheckP2p) or GDR (ncclTopoCheckGdr) is not possible."""
        mid = nodes[1:-1]
        if ptype in (PATH_NVB, PATH_PXN):
            for x in mid:
                if self.nodes[x]["type"] == "GPU":
                    return x
            own = {self._id[id(n.parent)] for n in (a, b) if n.type == GPU and n.parent is not None}
            for x in mid:
                if self.nodes[x]["type"] == "DEV" and x not in own:
                    return self._gpu_of_dev(x)
            return None
        t = self.topo
        sys = t.sys
        if a.type == GPU and b.type == GPU:
            if self._level is None:
                self._level = t.p2p_level()
            if (ptype <= self._level and not t.s.p2p_blocked) or t.check_p2p_index(a.idx, b.idx)[0]:
                return None     # P2P (ncclTopoCheckP2p; NVML's status only where the topology has one)
            cpu = self._id[id(sys.nodes[CPU][local_cpu(sys, b.idx)])]
        elif {a.type, b.type} == {GPU, NET}:
            gpu, net = (a, b) if a.type == GPU else (b, a)
            if t.check_gdr(gpu.rank, net.id, 0):
                return None
            cpu = self._id[id(sys.nodes[CPU][local_cpu(sys, gpu.idx)])]
        else:
            return None
        return cpu if cpu in mid else None

    def _gpu_of_dev(self, dev: str) -> Optional[str]:
        d = self._node[dev]
        for l in d.links:
            if l.rem.type == GPU:
                return self._id[id(l.rem)]
        return dev

    # ---- the widest route
    def widest(self, src: str, dst: str) -> Optional[Path]:
        """The widest route from ``src`` to ``dst`` over NCCL's links (then fewer hops, then the
        better type) where it is wider than NCCL's path, else NCCL's path -- also where NCCL's own
        rules fix the route (P2P or GDR through the CPU, PATH_NET).  The type is the worst hop as NCCL
        types hops (PXB between PCI switches, PHB through a CPU, NVB through one GPU); a GPU is
        crossed only as the one middle GPU of two NVLinks, as NCCL allows."""
        nccl = self.path(src, dst)
        if nccl is not None and (nccl.type == PATH_NAMES[PATH_NET] or
                                 (nccl.via is not None and self.nodes[nccl.via]["type"] == "CPU")):
            return nccl
        if src not in self._widest:
            self._widest[src] = self._widest_from(src)
        w = self._widest[src].get(dst)
        if w is None or (nccl is not None and nccl.bw >= w.bw):
            return nccl
        return w

    def _widest_from(self, src: str) -> dict:
        """Max-min routes from ``src`` (ties: fewer hops, then the better type), NCCL's transit rules:
        a GPU or network device is never crossed, another GPU's device only to that GPU; then the NVB
        routes GPU -> its device -NVL-> device -NVL-> device -> GPU."""
        s = self._node[src]
        own_dev = self._id[id(s.parent)] if s.type == GPU and s.parent is not None else None
        best: dict = {src: (float("inf"), 0, 0, None, None)}     # node -> (bw, hops, type, parent, link)
        heap = [(-float("inf"), 0, 0, src)]
        done: set = set()
        while heap:
            nb, hops, ty, u = heapq.heappop(heap)
            if u in done:
                continue
            done.add(u)
            un = self._node[u]
            if u != src and un.type in (GPU, NET):
                continue
            foreign_dev = un.type == DEV and u != own_dev
            for row in un.set_links:
                rem, _rt, _lbw, lt, hop, _rev, _rule = row
                if foreign_dev and not (lt == LINK_LOC and rem.type == GPU):
                    continue
                v = self._id[id(rem)]
                key = self._link_key(un, rem, lt)
                cand = (min(-nb, self.capacity[key]), hops + 1, max(ty, hop))
                cur = best.get(v)
                if cur is None or (-cand[0], cand[1], cand[2]) < (-cur[0], cur[1], cur[2]):
                    best[v] = cand + (u, key)
                    heapq.heappush(heap, (-cand[0], cand[1], cand[2], v))
        out = {}
        level = self.topo.p2p_level()
        for v, (bw, hops, ty, _p, _k) in best.items():
            if v == src:
                continue
            nodes, links = [v], []
            while nodes[-1] != src:
                links.append(best[nodes[-1]][4])
                nodes.append(best[nodes[-1]][3])
            nodes.reverse()
            via = None
            if s.type == GPU and self.nodes[v]["type"] == "GPU" and ty > level:
                # beyond NCCL_P2P_LEVEL: no P2P, the transport goes through host memory (the CPU)
                via = next((x for x in nodes if self.nodes[x]["type"] == "CPU"), None)
            out[v] = Path(src, v, PATH_NAMES[ty], bw, hops, tuple(nodes), tuple(reversed(links)), via)
        if own_dev is not None and not self.topo.s.nvb_disable:
            self._nvb_routes(src, own_dev, out)
        return out

    def _nvb_routes(self, src: str, own_dev: str, out: dict) -> None:
        """GPU -> its device -NVL-> a peer's device -NVL-> a third device -> its GPU (NVB)."""
        nvl = lambda d: [k for k in self.out[d] if k[2] == "NVL" and self.nodes[k[1]]["type"] == "DEV"]  # noqa: E731
        up = (src, own_dev, "LOC")
        for k1 in nvl(own_dev):
            mid = k1[1]
            for k2 in nvl(mid):
                dev = k2[1]
                if dev == own_dev:
                    continue
                for k3 in self.out[dev]:
                    g = k3[1]
                    if k3[2] != "LOC" or self.nodes[g]["type"] != "GPU":
                        continue
                    links = (up, k1, k2, k3)
                    bw = min(self.capacity[k] for k in links)
                    cand = Path(src, g, PATH_NAMES[PATH_NVB], bw, 4, (src, own_dev, mid, dev, g), links,
                                self._gpu_of_dev(mid))
                    cur = out.get(g)
                    if cur is None or (-cand.bw, cand.hops, PATH_NVB) < (-cur.bw, cur.hops, PATH_NAMES.index(cur.type)):
                        out[g] = cand

    def _link_key(self, node, rem, lt: int) -> tuple:
        for l in node.links:
            if l.rem is rem and l.type == lt:
                return self._key[id(l)]
        raise KeyError((node, rem, lt))    # pragma: no cover - set_links are built from links

    # ---- NCCL's answers about the node
    def domains(self) -> list:
        """The GPUs NCCL keeps together (``ncclTopoTrimSystem``'s domains: GPUs joined by paths better
        than PATH_NET), in NCCL's order, each by GPU index; one domain when nothing is split."""
        sys = self.topo.sys
        dom = self.topo.domains()
        out: dict = {}
        for i, g in enumerate(sys.nodes[GPU]):
            out.setdefault(dom[i], []).append(self._id[id(g)])
        return [sorted(out[k], key=lambda g: self.nodes[g]["index"]) for k in sorted(out)]

    def local_cpu(self, gpu: str) -> str:
        """``ncclGetLocalCpu``: the CPU NCCL takes as the GPU's."""
        sys = self.topo.sys
        return self._id[id(sys.nodes[CPU][local_cpu(sys, self._node[gpu].idx)])]

    def local_nets(self, gpu: str) -> list:
        """The network devices NCCL gives the GPU's channels (``ncclTopoGetLocalNet``, channel 0, 1, ...
        until the first comes round again), ids in that order."""
        sys = self.topo.sys
        rank = self._node[gpu].rank
        out: list = []
        for c in range(64):
            nid = self.topo.local_net(rank, c)
            net = self._id[id(sys.nodes[NET][sys.id_to_index(NET, nid)])]
            if out and net == out[0]:
                break
            out.append(net)
        return out


def _gpu_indices(gpus: list, per_tray: Optional[int] = None) -> dict:
    """{id(GPU node): the topology's GPU index}: NVML's index (``dev``); in a system of several hosts (an
    MNNVL clique fused by NCCL, each host's GPUs numbered from 0) host h's GPU d is ``d + h * per_tray``
    (``per_tray``: the GPUs of one host), the numbering of a document of several hosts."""
    hosts = {g.id >> 56 for g in gpus}
    if len(hosts) <= 1:
        return {id(g): g.dev for g in gpus}
    per = per_tray or len({g.dev for g in gpus})
    return {id(g): g.dev + (g.id >> 56) * per for g in gpus}


def _describe(t: int, n, index: Optional[int] = None, many: bool = False) -> tuple:
    """(id, attributes) of one of NCCL's nodes (``index``: a GPU's index, :func:`_gpu_indices`).  In a
    system of several hosts (``many``) a node of host h > 0 has the id ``h/<id>`` (a document's graph ids
    of several hosts), a NET the label ``<name>@h`` (NCCL's model names them so: ``CommResult.net_name``)."""
    name = NODE_TYPES[t]
    host = n.id >> 56
    if t == GPU:
        idx = n.dev if index is None else index
        lab = f"GPU{idx}"
        return lab, {"type": name, "label": lab, "index": idx, "rank": n.rank, "sm": n.cc, "gdr": bool(n.gdr),
                     "bus": _bus(n.bus), "host": host, "dev": n.dev}
    pre = f"{host}/" if many and host else ""
    if t == DEV:
        lab = f"{pre}DEV{n.dev}"
        return lab, {"type": name, "label": lab, "sm": n.cc, "bus": _bus(n.bus)}
    if t == NET:
        lab = f"{n.name}@{host}" if many else n.name
        return f"NET:{lab}", {"type": name, "label": lab, "name": lab, "bw": float(n.bw), "asic": n.asic,
                              "port": n.port, "gdr": bool(n.gdr), "dev": n.dev, "host": host}
    if t == NIC:
        bus = _bus(n.bus)
        lab = pre + (bus or f"NIC{n.idx}")
        return f"NIC:{lab}", {"type": name, "label": lab, "bus": bus}
    if t == CPU:
        lab = pre + (n.name or f"CPU{n.idx}")
        return lab, {"type": name, "label": lab, "arch": _ARCHS.get(n.arch), "vendor": _VENDORS.get(n.vendor)}
    if t == PCI:
        lab = pre + (_bus(n.bus) or f"PCI{n.idx}")
        return lab, {"type": name, "label": lab}
    lab = "NVS" if t == NVS and n.idx == 0 else f"{name}{n.idx}"
    return lab, {"type": name, "label": lab}


def _bus(bus: Optional[str]) -> Optional[str]:
    return (normalize_bus_id(bus) or bus.lower()) if bus else None


# --------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=32)
def _cached(xml_text: str, gpus: Optional[tuple], skey: tuple, s: NcclSettings, hosts: int = 1) -> NodeSystem:
    machine, local, xml = X.machine_gpus(xml_text, list(gpus) if gpus is not None else None)
    try:
        fused = X.fuse_ranks(xml, machine, local, s.merge_level, s.force_merge)
        if hosts > 1:   # an MNNVL clique: the hosts' rank XMLs fused as NCCL fuses them (comm._fused)
            fused = X.replicate_hosts(fused, hosts, len(local))
        sys = system_from_xml(fused, X.host_hash(0) if hosts > 1 else None)
        topo = Topo(sys, s)
        topo.compute_paths()
    except X.NcclFailure as e:
        raise X.NcclFailed(f"NCCL would fail to initialise: {e}") from None
    return NodeSystem(topo, machine, local)


def node_system(doc: Union[Topology, dict, str], gpus: Optional[Iterable[int]] = None,
                settings: Optional[NcclSettings] = None, hosts: Optional[int] = None) -> NodeSystem:
    """NCCL's system of one node of ``doc`` (a topology, or an NCCL topology XML text) for the
    communicator of the GPUs ``gpus`` (indices in rank order; default all), with NCCL's paths.  The
    defaults the pinned XML needed are the view's assumptions (``Topology.all_assumptions()``).

    ``hosts`` > 1: the system NCCL builds for an MNNVL clique of that many trays (copies of the tray, fused
    as :func:`gpucomm.planners.nccl.comm.nccl_comm` fuses them: one system, every GPU on the NVSwitch,
    host h's GPU d numbered ``d + h x the tray's GPUs``).  A document of several hosts (NCCL's fused dump)
    is its first host fused with copies of it, ``hosts`` defaulting to its hosts, ``gpus`` its indices
    (the same GPUs of every host).  Raises NothingToDo (no GPU), InputError (an unknown or repeated GPU,
    an NCCL graph file), NcclFailed (NCCL itself would fail)."""
    check_document(doc)
    if not isinstance(doc, str):
        topo = Topology.of(doc)
        if topo.multi_host:
            gpus = host_gpus(topo, gpus)
            hosts = hosts or len(topo.hosts)
            doc = first_host(topo)
    k = hosts or 1
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InputError(f"hosts {hosts!r}: not a positive number of trays")
    text, s = nccl_inputs(doc, 1, settings)
    g = distinct_gpus(gpus)
    if isinstance(doc, str):
        return _cached(text, g, s.key(), s, k)
    topo = Topology.of(doc)
    if g is not None:
        have = [x.index for x in topo.gpus]
        for x in g:
            if x not in have:
                raise InputError(f"no GPU {x} in topology (has {format_cpulist(have) or 'none'})")
    ns = _cached(text, g, s.key(), s, k)
    return ns.with_measured(_measured(ns, topo))


def _measured(ns: NodeSystem, topo: Topology) -> dict:
    """{link key: GB/s} of the document's measured link bandwidths (``measured_bw_GBps``) on NCCL's
    links: PCIe (a device's or switch's uplink, both ways), NVLink (to the NVSwitch or a peer), C2C, the
    CPUs' SYS link, a NIC's network link.  Links NCCL does not have (a trimmed GPU, a merged switch) are
    left out."""
    meas = [l for l in topo.links if l.measured_bw_GBps is not None]
    if not meas:
        return {}
    by_bus = {a["bus"]: n for n, a in ns.nodes.items() if a.get("bus") and a["type"] in ("DEV", "NIC")}
    alias = topo.cpu_alias

    def node_of(x: str) -> Optional[str]:
        x = alias.get(x, x)
        if x in ns.nodes and ns.nodes[x]["type"] in ("CPU", "PCI", "NVS"):
            return x
        bdf = normalize_bus_id(x)
        if bdf in by_bus:
            return by_bus[bdf]
        if bdf in ns.nodes:
            return bdf
        n = next((n for n in topo.nics if n.name == x or n.id == x), None)
        if n is not None and n.pci_bus_id and normalize_bus_id(n.pci_bus_id) in by_bus:
            return by_bus[normalize_bus_id(n.pci_bus_id)]
        return None

    kinds = {"pcie": "PCI", "nvlink": "NVL", "xgmi": "NVL", "c2c": "C2C", "smp": "SYS"}
    out: dict = {}
    for l in meas:
        a = node_of(l.a)
        if a is None:
            continue
        if l.kind == "net":
            keys = [k for k in ns.out[a] if k[2] == "NET"]
        elif l.kind == "pcie":
            up = [k for k in ns.out[a] if k[2] == "PCI"]
            keys = up[-1:]      # a node's uplink is its last PCI link (ncclTopoSortSystem)
        else:
            sw = topo.switches.get(l.b)
            b = NVS_ID if l.b == NVS_ID or (sw is not None and sw.kind == "nvswitch") else node_of(l.b)
            keys = [k for k in ns.out[a] if k[1] == b and k[2] == kinds.get(l.kind)]
        for k in keys:
            for key in (k, (k[1], k[0], k[2])):
                if key in ns.links:
                    out[key] = float(l.measured_bw_GBps)
    return out


# --------------------------------------------------------------------------------------------
# gpucomm paths
RULES = ("widest", "nccl")


def resolve_endpoint(ns: NodeSystem, name: str) -> str:
    """``GPU3`` / ``3`` / a GPU bus id / a NIC name / ``NET:mlx5_0`` -> node id (GPU or NET)."""
    s = str(name).strip()
    m = re.match(r"^(?:GPU|gpu|cuda:)?(\d+)$", s)
    if m and len(m.group(1)) <= 12:
        idx = int(m.group(1))
        g = ns.gpu_of_index(idx)
        if g is None:
            raise InputError(f"no GPU {idx} in topology (has "
                             f"{format_cpulist([ns.nodes[x]['index'] for x in ns.gpus]) or 'none'})")
        return g
    if s in ns.nodes and ns.nodes[s]["type"] in ("GPU", "NET"):
        return s
    for n in ns.nets:
        if ns.nodes[n]["name"] == s or s in ns.nodes[n]["name"].split("+"):
            return n
    bdf = normalize_bus_id(s)
    for g in ns.gpus:
        if bdf and ns.nodes[g]["bus"] == bdf:
            return g
    nics = [ns.nodes[n]["name"] for n in ns.nets]
    raise InputError(f"no GPU or NIC named {s!r} in topology",
                     expected="GPU<index>, an index, or a NIC name" + (f" ({', '.join(nics)})" if nics else ""))


def path_row(ns: NodeSystem, p: Path) -> dict:
    return {"src": ns.label(p.src), "dst": ns.label(p.dst), "type": p.type, "hops": p.hops,
            "bw_GBps": round(p.bw, 3), "via": ns.label(p.via) if p.via else None,
            "route": [ns.label(n) for n in p.nodes]}


def path_table(doc: Union[Topology, dict], between: Optional[Iterable[str]] = None, rule: str = "widest",
               settings: Optional[NcclSettings] = None) -> list:
    """Rows of ``gpucomm paths``: every GPU -> GPU, GPU -> NIC and NIC -> GPU path (or one pair with
    ``between``), each ``{src, dst, type, hops, bw_GBps, via, route}``, GPUs by index then NICs in
    NCCL's order.  ``rule``: ``widest`` (:meth:`NodeSystem.widest`) or ``nccl`` (the route NCCL's
    transports take, :meth:`NodeSystem.path`)."""
    if rule not in RULES:
        raise InputError(f"unknown path rule {rule!r}", expected=" or ".join(RULES))
    topo = Topology.of(doc)
    if not topo.gpus:
        raise NothingToDo("topology has no GPUs")
    ns = node_system(topo, settings=settings)
    get = ns.widest if rule == "widest" else ns.path
    if between is not None:
        pair = list(between)
        if len(pair) != 2:
            raise InputError("--between needs exactly two devices", expected="e.g. --between GPU0 GPU3")
        a, b = (resolve_endpoint(ns, x) for x in pair)
        if a == b:
            raise InputError(f"--between names the same device twice ({pair[0]})")
        p = get(a, b)
        if p is None:
            raise InputError(f"no path between {pair[0]} and {pair[1]}")
        return [path_row(ns, p)]
    rows = []
    ends = ns.gpus + ns.nets
    for s in ends:
        for d in ends:
            if s == d or (s in ns.nets and d in ns.nets):
                continue
            p = get(s, d)
            if p is not None:
                rows.append(path_row(ns, p))
    return rows


__all__ = ["NodeSystem", "Path", "node_system", "path_table", "resolve_endpoint", "RULES"]
