"""The topology document as NCCL's graph: nodes GPU / PCI / NVS / CPU / NIC / NET joined by directed
links with NCCL's bandwidths (GB/s, one direction), so that paths, rings and the NCCL reference
search all reason over the same model.

Modelled after NCCL's ``ncclTopoGetSystem`` (src/graph/topo.cc, topo.h), with NCCL <= 2.29
semantics (a GPU is one device):

* **PCI** links, both directions, ``width * lane / 80`` GB/s (``gpucomm.probes.facts.pcie_bw_GBps``), taken
  from the document's ``pcie`` link records (child -> parent).  A PCIe switch is one node (its
  upstream port).  Host bridges (``switches[].kind == "host_bridge"``) are folded into their NUMA
  node's CPU, exactly as NCCL collapses every root complex of a NUMA node into one CPU node; a NIC
  listed directly under a CPU (virtual NIC, ``<cpu><nic>``) gets NCCL's ``LOC_BW`` link.
* **NVL** links: GPU<->GPU (DGX-1, bridges) or GPU<->NVS where *all* NVSwitches collapse into one
  ``NVS`` node (topo.cc:849-853), bw = count x ``nvlink_bw_per_link(sm)``.  AMD xGMI links are
  treated as NVL (RCCL does the same).  An NVLink to a CPU (Power9) links the GPU to that CPU.
* **C2C** GPU<->CPU (Grace), **SYS** between every pair of CPUs with ``ncclTopoGetInterCpuBw``
  (topo.cc:60-83, :func:`gpucomm.probes.facts.inter_cpu_bw`).
* **NET**: one NET node per NIC record (a port, as NCCL's net plugin reports it) under its NIC
  (PCI function) node, bw = port rate / 8 (topo.cc:415-418).
* ``measured_bw_GBps`` on a link record overrides the nominal bandwidth (planners prefer
  measured values).
* NUMA nodes without CPUs (Grace exposes GPU memory as NUMA nodes, also CXL memory) fold into the
  nearest NUMA node with CPUs; NVLink "bonds" from a GPU to every peer that add up to more links
  than the GPU has (how nvidia-smi shows an NVSwitch) become one NVSwitch link.
* The document is read through its typed view (:class:`gpucomm.probes.topology.Topology`): numbers
  are finite and non-negative there, facts come from :mod:`gpucomm.probes.facts`, and every default
  the view applied is listed in ``G.graph["assumptions"]`` (PCIe generation, NIC speed, CPU model, ...).

A bare ``nvidia-smi topo -m`` capture has no PCI tree, only a matrix: :func:`graph_from_matrix`
rebuilds an equivalent tree from the matrix codes (PIX -> same switch, PXB -> switches under a
common switch, PHB/NODE -> same CPU, SYS -> different CPUs, NV# -> NVLinks or an NVSwitch) with
NCCL's default bandwidths; every default it had to assume is listed in ``G.graph["assumptions"]``.

Node attributes: ``type`` (GPU, PCI, NVS, CPU, NIC, NET), ``label`` (``GPU3``, ``mlx5_0``, ``CPU1``,
a switch id), plus per type: GPU ``index, sm, gdr, p2p``; CPU ``arch, vendor, family, model``;
NET ``name, bw, asic, port, gdr, nic``.  Edge attributes: ``type`` (NVL, PCI, SYS, NET, C2C, LOC),
``bw`` (capacity used by planners), ``nominal_bw``, ``measured`` (bool), ``kind`` (document kind).
"""
from __future__ import annotations

import re
from typing import Any, Optional, Union

from gpucomm.probes import facts
from gpucomm.probes.errors import InputError
from gpucomm.probes.model import cpu_id
from gpucomm.probes.model import natural_key as _natural
from gpucomm.probes.topology import NVS_ID, Topology

LOC_BW = facts.LOC_BW


# --------------------------------------------------------------------------------------------
class _Builder:
    """Accumulates nodes/edges (bw of same-type parallel links add up, as ncclTopoConnectNodes)."""

    def __init__(self, topo: Topology) -> None:
        self.nodes: dict = {}
        self.edges: dict = {}   # (u, v) -> attrs
        self.topo = topo

    def node(self, nid: str, **attrs: Any) -> None:
        if nid in self.nodes:
            for k, v in attrs.items():
                if self.nodes[nid].get(k) is None:
                    self.nodes[nid][k] = v
        else:
            self.nodes[nid] = dict(attrs)

    def link(self, u: str, v: str, type_: str, bw: float, kind: str, measured: Optional[float] = None,
             add: bool = True) -> None:
        """Directed link u->v; a second link of the same type between the same nodes adds its bw."""
        eff = float(measured) if measured is not None else float(bw)
        cur = self.edges.get((u, v))
        if cur is not None and cur["type"] == type_ and add:
            cur["nominal_bw"] += float(bw)
            cur["bw"] += eff
            cur["measured"] = cur["measured"] or measured is not None
        elif cur is None or eff > cur["bw"]:
            self.edges[(u, v)] = {"type": type_, "bw": eff, "nominal_bw": float(bw), "kind": kind,
                                  "measured": measured is not None}

    def both(self, u: str, v: str, type_: str, bw: float, kind: str, measured: Optional[float] = None,
             add: bool = True) -> None:
        self.link(u, v, type_, bw, kind, measured, add)
        self.link(v, u, type_, bw, kind, measured, add)

    def to_graph(self) -> "PathGraph":
        G = PathGraph()
        for nid in sorted(self.nodes):
            G.add_node(nid, **self.nodes[nid])
        for (u, v) in sorted(self.edges):
            a = self.edges[(u, v)]
            a["bw"] = round(a["bw"], 4)
            a["nominal_bw"] = round(a["nominal_bw"], 4)
            G.add_edge(u, v, **a)
        G.graph["assumptions"] = self.topo.all_assumptions()
        G.graph["source"] = self.topo.host.get("provenance")
        G.graph["topology"] = self.topo   # the view NCCL's model (nccl_reference) runs on
        return G


class _NodeView:
    """``G.nodes``: ``G.nodes[n]`` (attributes), ``G.nodes(data=True)``, ``n in G.nodes``, iteration."""

    __slots__ = ("_n",)

    def __init__(self, nodes: dict) -> None:
        self._n = nodes

    def __getitem__(self, n):
        return self._n[n]

    def __contains__(self, n) -> bool:
        return n in self._n

    def __iter__(self):
        return iter(self._n)

    def __len__(self) -> int:
        return len(self._n)

    def __call__(self, data: bool = False):
        return list(self._n.items()) if data else list(self._n)


class _EdgeView:
    """``G.edges``: ``G.edges[u, v]`` (attributes), ``G.edges(data=True)``, ``(u, v) in G.edges``."""

    __slots__ = ("_g",)

    def __init__(self, g: "PathGraph") -> None:
        self._g = g

    def __getitem__(self, uv):
        return self._g._succ[uv[0]][uv[1]]

    def __contains__(self, uv) -> bool:
        return uv[0] in self._g._succ and uv[1] in self._g._succ[uv[0]]

    def __iter__(self):
        return iter(self())

    def __len__(self) -> int:
        return sum(len(d) for d in self._g._succ.values())

    def __call__(self, data: bool = False):
        out = []
        for u, nbrs in self._g._succ.items():
            for v, a in nbrs.items():
                out.append((u, v, a) if data else (u, v))
        return out


class PathGraph:
    """The directed graph the planners read: the part of ``networkx.DiGraph``'s interface they use
    (nodes/edges views with attribute dicts, successors, out_edges, copy, remove_nodes_from, ``graph``),
    in insertion order.  Kept here so that commands do not pay networkx's import (about 0.15 s)."""

    def __init__(self) -> None:
        self._nodes: dict = {}
        self._succ: dict = {}
        self._pred: dict = {}
        self.graph: dict = {}
        self.nodes = _NodeView(self._nodes)
        self.edges = _EdgeView(self)

    def add_node(self, n, **attr) -> None:
        if n not in self._nodes:
            self._nodes[n] = {}
            self._succ[n] = {}
            self._pred[n] = {}
        self._nodes[n].update(attr)

    def add_edge(self, u, v, **attr) -> None:
        self.add_node(u)
        self.add_node(v)
        d = self._succ[u].get(v)
        if d is None:
            d = self._succ[u][v] = {}
            self._pred[v][u] = d
        d.update(attr)

    def successors(self, n):
        return iter(self._succ[n])

    def predecessors(self, n):
        return iter(self._pred[n])

    def out_edges(self, n, data: bool = False):
        return [(n, v, a) if data else (n, v) for v, a in self._succ[n].items()]

    def in_edges(self, n, data: bool = False):
        return [(u, n, a) if data else (u, n) for u, a in self._pred[n].items()]

    def has_edge(self, u, v) -> bool:
        return (u, v) in self.edges

    def remove_nodes_from(self, nodes) -> None:
        for n in list(nodes):
            if n not in self._nodes:
                continue
            for v in self._succ.pop(n):
                del self._pred[v][n]
            for u in self._pred.pop(n):
                del self._succ[u][n]
            del self._nodes[n]

    def copy(self) -> "PathGraph":
        """Nodes, edges and attribute dicts copied (one level, as networkx copies); ``graph`` too."""
        H = PathGraph()
        for n, a in self._nodes.items():
            H._nodes[n] = dict(a)
            H._succ[n] = {}
            H._pred[n] = {}
        succ, pred = H._succ, H._pred
        for u, nbrs in self._succ.items():
            su = succ[u]
            for v, a in nbrs.items():
                su[v] = pred[v][u] = dict(a)
        H.graph = dict(self.graph)
        return H

    def number_of_nodes(self) -> int:
        return len(self._nodes)

    def number_of_edges(self) -> int:
        return len(self.edges)

    def __contains__(self, n) -> bool:
        return n in self._nodes

    def __iter__(self):
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)


def _add_gpus(b: _Builder) -> dict:
    """GPU nodes; returns {gpu id: GPU}."""
    out = {}
    for g in b.topo.gpus:
        b.node(g.id, type="GPU", label=g.key, index=g.index, sm=g.sm, gdr=g.gdr, p2p=dict(g.p2p), numa=g.numa_node,
               vendor=g.vendor)
        out[g.id] = g
    return out


def _cpu_nodes(b: _Builder, cpus: set) -> None:
    """CPU nodes with their model, and SYS links between every pair (topo.cc:270-283)."""
    topo = b.topo
    smp: dict = {}
    alias = topo.cpu_alias
    for l in topo.links:
        if l.kind == "smp":
            a, c = alias.get(l.a, l.a), alias.get(l.b, l.b)
            if a != c and a in cpus and c in cpus:
                smp[(a, c)] = l
    for c in sorted(cpus):
        m = re.match(r"^CPU(-?\d+)$", c)
        cpu = topo.cpu_for(int(m.group(1)) if m else None)
        b.node(c, type="CPU", label=c, arch=cpu.arch, vendor=cpu.vendor, family=cpu.family, model=cpu.model)
    clist = sorted(cpus)
    for i, a in enumerate(clist):
        for c in clist[i + 1:]:
            rec = smp.get((a, c)) or smp.get((c, a))
            if rec is not None and rec.bw_GBps:
                b.both(a, c, "SYS", rec.bw_GBps, "smp", rec.measured_bw_GBps, add=False)
                continue
            bws = [x.sys_bw for x in (topo.cpu_for(_numa_of(a)), topo.cpu_for(_numa_of(c))) if x.sys_bw is not None]
            bw = min(bws) if bws else topo.inter_cpu_bw(topo.cpu_for(_numa_of(a)))
            b.both(a, c, "SYS", bw, "smp", add=False)


def _numa_of(cpu: str) -> Optional[int]:
    m = re.match(r"^CPU(-?\d+)$", cpu)
    return int(m.group(1)) if m else None


def _add_nvlinks(b: _Builder, gpus: dict, cpus: set) -> None:
    """NVLink edges from the view's fabric (one rule for NVSwitch detection: Topology.nvlink)."""
    fab = b.topo.nvlink
    for (x, y), (count, bw, m) in sorted(fab.pairs.items()):
        if x in gpus and y in gpus:
            b.both(x, y, "NVL", bw, "nvlink", m, add=False)
    for g, (count, bw, m) in sorted(fab.nvs.items()):
        if g in gpus:
            b.node(NVS_ID, type="NVS", label=NVS_ID)
            b.both(g, NVS_ID, "NVL", bw, "nvlink", m, add=False)
    for (g, cpu), (count, bw, m) in sorted(fab.cpu.items()):
        if g in gpus:
            b.node(cpu, type="CPU", label=cpu)
            b.both(g, cpu, "NVL", bw, "nvlink", m, add=False)


def _add_nets(b: _Builder) -> None:
    """A NET node per NIC record (a port), under its NIC (PCI function) node."""
    topo = b.topo
    net_bw: dict = {}
    for l in topo.links:
        if l.kind == "net" and l.bw_GBps:
            net_bw[l.a] = (l.bw_GBps, l.measured_bw_GBps)
    for n in topo.nics:
        measured = None
        if n.id in net_bw or n.name in net_bw:
            bw, measured = net_bw.get(n.id) or net_bw.get(n.name)
        else:
            bw = topo.nic_gbps(n) / 8.0
        port = n.ports[0].port if n.ports else None
        net = f"NET:{n.name}"
        b.node(net, type="NET", label=n.name, name=n.name, bw=bw, asic=n.guid or n.id, port=port, gdr=n.gdr, nic=n.id)
        b.both(n.id, net, "NET", bw, "net", measured, add=False)


# --------------------------------------------------------------------------------------------
def has_pci_tree(doc: Union[Topology, dict]) -> bool:
    """True when the document carries a PCI tree (parents or pcie links), not only a matrix."""
    return Topology.of(doc).has_pci_tree


def build_graph(doc: Union[Topology, dict]):
    """Topology (or document) -> :class:`PathGraph` (a directed graph) in NCCL's model (see module docstring).

    Documents without a PCI tree but with an nvidia-smi matrix go through :func:`graph_from_matrix`.
    Raises InputError for something that is not a topology document.  The defaults applied are the
    view's (``G.graph["assumptions"]``, also added to the Topology passed in)."""
    if not isinstance(doc, (dict, Topology)) or (isinstance(doc, dict) and not isinstance(doc.get("gpus", []), list)):
        raise InputError("not a topology document", expected="a gpucomm.topology/v1 mapping")
    topo = Topology.of(doc)
    if not topo.has_pci_tree and topo.matrix:
        return graph_from_matrix(topo)
    # NCCL merges the two levels of Broadcom PEX switches before it computes paths (topo.cc
    # ncclTopoFlattenBcmSwitches); the document keeps the real tree (nvidia-smi's view, PXB), the
    # graph takes NCCL's (PIX).  A no-op for NCCL XML imports, which are flattened on import.
    from gpucomm.probes.formats.nccl_xml import flatten_bcm, has_bcm_switch

    view = topo
    if has_bcm_switch(topo.doc):
        flat = flatten_bcm(_bcm_copy(topo.doc))
        view = topo if flat["switches"] == topo.doc["switches"] else Topology(flat)
    G = _build_tree_graph(view)
    if view is not topo:    # the flattened copy's defaults are the caller's too
        topo.absorb(view)
    return G


def _bcm_copy(doc: dict) -> dict:
    """A copy of ``doc`` that :func:`flatten_bcm` may change without touching ``doc``: the device and
    switch records it re-parents and marks (and their ``bcm_merged`` lists), the switch, link and
    warning lists it rewrites; everything else shared (a deepcopy of the whole document cost more
    than the graph)."""
    flat = dict(doc)
    for k in ("gpus", "nics", "pci_devices"):
        flat[k] = [dict(r) for r in doc.get(k) or []]
    flat["switches"] = [dict(s, bcm_merged=list(s["bcm_merged"])) if isinstance(s.get("bcm_merged"), list)
                        else dict(s) for s in doc.get("switches") or []]
    flat["links"] = list(doc.get("links") or [])
    flat["warnings"] = list(doc.get("warnings") or [])
    return flat


def _build_tree_graph(topo: Topology):
    b = _Builder(topo)
    gpus = _add_gpus(b)
    switches = topo.switches
    host_bridges = {k for k, s in switches.items() if s.kind == "host_bridge"}
    pci_switches = {k for k, s in switches.items() if s.kind not in ("host_bridge", "nvswitch")}
    cpus: set = set()
    alias = topo.cpu_alias

    def resolve(parent: Optional[str], numa: Optional[int]) -> Optional[str]:
        """Parent id in NCCL's graph: host bridges fold into their CPU."""
        seen = set()
        while parent in host_bridges and parent not in seen:
            seen.add(parent)
            hb = switches[parent]
            parent = hb.parent or (cpu_id(hb.numa_node) if hb.numa_node is not None else None)
            if parent is None:
                parent = cpu_id(numa)
        if parent is None:
            parent = cpu_id(numa) if numa is not None else None
        return alias.get(parent, parent) if parent else parent

    for sid in sorted(pci_switches):
        b.node(sid, type="PCI", label=sid, kind=switches[sid].kind)
    pcie_recs: dict = {}
    for l in topo.links:
        if l.kind == "pcie":
            pcie_recs[l.a] = l

    def connect(child: str, parent_raw: Optional[str], numa: Optional[int], is_bare_nic: bool = False,
                pcie=None, what: str = "") -> None:
        parent = resolve(parent_raw, numa)
        if parent is None:
            parent = alias.get(cpu_id(numa), cpu_id(numa))
            topo.assume(f"{what or child}: position in the PCI tree unknown, attached to {parent}")
        if parent.startswith("CPU"):
            cpus.add(parent)
        elif parent not in b.nodes:
            b.node(parent, type="PCI", label=parent)
        link = pcie_recs.get(child)
        if link is not None and link.bw_GBps:
            bw, meas = link.bw_GBps, link.measured_bw_GBps
        elif is_bare_nic and parent.startswith("CPU"):
            bw, meas = LOC_BW, None  # NCCL: a <nic> directly under <cpu> is a LOC_BW PCI link
        else:
            bw = pcie.max_bw_GBps if pcie is not None else None
            if bw is None:
                bw = topo.default_pcie_bw()
            meas = None
        b.both(child, parent, "PCI", bw, "pcie", meas, add=False)

    for sid in sorted(pci_switches):
        s = switches[sid]
        connect(sid, s.parent, s.numa_node, what=f"switch {sid}")
    for gid, g in gpus.items():
        connect(gid, g.parent, g.numa_node, pcie=g.pcie, what=g.key)
    nic_done = set()
    for n in topo.nics:
        b.node(n.id, type="NIC", label=n.name if not n.pci_bus_id else n.id, names=[])
        b.nodes[n.id].setdefault("names", []).append(n.name)
        if n.id in nic_done:
            continue
        nic_done.add(n.id)
        connect(n.id, n.parent, n.numa_node, is_bare_nic=not n.pci_bus_id, what=f"NIC {n.name}")
    for l in topo.links:
        if l.kind == "c2c" and l.a in gpus and re.match(r"^CPU\d+$", l.b):
            cpu = alias.get(l.b, l.b)
            cpus.add(cpu)
            b.both(l.a, cpu, "C2C", l.bw_GBps or 0.0, "c2c", l.measured_bw_GBps)
    # CPUs without devices do not matter to NCCL's paths: only CPUs in the tree become nodes.
    _add_nvlinks(b, gpus, cpus)
    _cpu_nodes(b, cpus)
    _add_nets(b)
    return b.to_graph()


# --------------------------------------------------------------------------------------------
class _UF:
    def __init__(self, items):
        self.p = {i: i for i in items}

    def find(self, x):
        while self.p[x] != x:
            self.p[x] = self.p[self.p[x]]
            x = self.p[x]
        return x

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            if str(rb) < str(ra):
                ra, rb = rb, ra
            self.p[rb] = ra

    def groups(self):
        out: dict = {}
        for i in self.p:
            out.setdefault(self.find(i), []).append(i)
        return out


def graph_from_matrix(doc: Union[Topology, dict]):
    """Graph for a document that only has an nvidia-smi matrix (a bare ``nvidia-smi topo -m``).

    The matrix hides the PCI relation of NVLinked pairs and all bandwidths, so this rebuilds the
    smallest PCI tree consistent with the codes and uses defaults, each recorded in
    ``G.graph["assumptions"]``: PCIe Gen5 x16 (48 GB/s) for Hopper/Blackwell GPUs, Gen4 x16 (24)
    for Ampere/Ada, Gen3 x16 (12) for older or unknown; NVLink count x NCCL's per-link bw; an NV#
    row whose total exceeds the GPU's NVLink count (e.g. NV18 to 7 peers) means an NVSwitch."""
    topo = Topology.of(doc)
    matrix = topo.matrix
    b = _Builder(topo)
    gpus = _add_gpus(b)
    by_key = {g.key: g.id for g in gpus.values()}
    nic_by_name = {n.name: n for n in topo.nics}
    devs = [k for k in matrix if k in by_key or k in nic_by_name]
    # A matrix may mention GPUs/NICs the records lack (or vice versa): keep the intersection with
    # records for GPUs; NICs found only in the matrix become bare NIC records.
    for k in matrix:
        if re.match(r"^GPU\d+$", k) and k not in by_key:
            idx = int(k[3:])
            b.node(k, type="GPU", label=k, index=idx, sm=None, gdr=True, p2p={}, numa=None, vendor="nvidia")
            by_key[k] = k
            devs.append(k) if k not in devs else None
    sm_hint = topo.sm_hint
    gid_of = {k: (by_key[k] if k in by_key else nic_by_name[k].id) for k in devs}
    numa_of = {}
    for k in devs:
        if k in by_key:
            g = topo.gpu_by_key(k)
            numa_of[k] = g.numa_node if g else None
        else:
            numa_of[k] = nic_by_name[k].numa_node

    def rel(a: str, c: str) -> str:
        v = (matrix.get(a) or {}).get(c) or (matrix.get(c) or {}).get(a) or "N/A"
        return "SYS" if v == "SOC" else v

    pix, pxb, cpu_uf = _UF(devs), _UF(devs), _UF(devs)
    for i, a in enumerate(devs):
        for c in devs[i + 1:]:
            r = rel(a, c)
            if r == "PIX":
                pix.union(a, c)
            if r in ("PIX", "PXB"):
                pxb.union(a, c)
            if r in ("PIX", "PXB", "PHB", "NODE"):
                cpu_uf.union(a, c)
    # CPU groups: components of non-SYS relations, merged greedily when nothing says SYS between
    # them and their NUMA nodes do not differ (NVLinked pairs hide their PCI relation).
    comps = sorted(cpu_uf.groups().values(), key=lambda g: min(devs.index(x) for x in g))
    groups: list = []
    for comp in comps:
        numas = {numa_of[x] for x in comp if numa_of[x] is not None}
        placed = False
        for grp in groups:
            if any(rel(x, y) == "SYS" for x in comp for y in grp["devs"]):
                continue
            if numas and grp["numas"] and not (numas & grp["numas"]):
                continue
            grp["devs"].extend(comp)
            grp["numas"] |= numas
            placed = True
            break
        if not placed:
            groups.append({"devs": list(comp), "numas": set(numas)})
    gen = facts.default_pcie_gen(sm_hint)
    pbw = facts.pcie_bw_GBps(gen, 16)
    if devs:
        topo.assume(f"topology matrix only (no PCI tree): PCIe links assumed Gen{gen} x16 ({pbw:g} GB/s), "
                    f"tree rebuilt from the PIX/PXB/PHB/NODE/SYS codes")
    cpus: set = set()
    used_numa = set()
    all_numas = {x for g2 in groups for x in g2["numas"]}
    for grp in groups:
        numa = min(grp["numas"]) if grp["numas"] else None
        if numa is None or numa in used_numa:
            numa = 0
            while numa in used_numa or numa in all_numas:
                numa += 1
        used_numa.add(numa)
        cpu = cpu_id(numa)
        cpus.add(cpu)
        members = grp["devs"]
        # PXB groups -> a top switch; PIX groups inside -> leaf switches.
        pxb_groups: dict = {}
        for x in members:
            pxb_groups.setdefault(pxb.find(x), []).append(x)
        for root, pg in sorted(pxb_groups.items(), key=lambda kv: min(devs.index(x) for x in kv[1])):
            if len(pg) == 1:
                x = pg[0]
                b.both(gid_of[x], cpu, "PCI", pbw, "pcie", add=False)
                continue
            pix_groups: dict = {}
            for x in pg:
                pix_groups.setdefault(pix.find(x), []).append(x)
            first = min(pg, key=devs.index)
            top = f"SW:{first}"
            b.node(top, type="PCI", label=top)
            b.both(top, cpu, "PCI", pbw, "pcie", add=False)
            if len(pix_groups) == 1:
                for x in pg:
                    b.both(gid_of[x], top, "PCI", pbw, "pcie", add=False)
                continue
            for proot, xg in sorted(pix_groups.items(), key=lambda kv: min(devs.index(x) for x in kv[1])):
                leaf = f"SW:{min(xg, key=devs.index)}/leaf"
                b.node(leaf, type="PCI", label=leaf)
                b.both(leaf, top, "PCI", pbw, "pcie", add=False)
                for x in xg:
                    b.both(gid_of[x], leaf, "PCI", pbw, "pcie", add=False)
    for k in devs:
        if k in nic_by_name:
            b.node(gid_of[k], type="NIC", label=k, names=[k])
    # NVLinks: the view's fabric (explicit records when the parser made them, else the NV# codes)
    _add_nvlinks(b, gpus, cpus)
    _cpu_nodes(b, cpus)
    _add_nets(b)
    return b.to_graph()


def node_label(G, nid: str) -> str:
    """Human name of a graph node (GPU3, mlx5_0, CPU1, ...)."""
    return G.nodes[nid].get("label") or nid if nid in G.nodes else nid


def gpu_nodes(G) -> list:
    """GPU node ids sorted by GPU index."""
    return sorted((n for n, a in G.nodes(data=True) if a.get("type") == "GPU"), key=lambda n: G.nodes[n]["index"])


def net_nodes(G) -> list:
    """NET node ids in document (name) order."""
    return sorted((n for n, a in G.nodes(data=True) if a.get("type") == "NET"), key=lambda n: _natural(n))
