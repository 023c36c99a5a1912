"""The topology document as NCCL's graph: nodes GPU / PCI / NVS / CPU / NIC / NET joined by directed
links with NCCL's bandwidths (GB/s, one direction), so that paths, rings and the NCCL reference
search all reason over the same model.

Modelled after NCCL's ``ncclTopoGetSystem`` (src/graph/topo.cc; NCCL_NOTES §2.1), with NCCL <= 2.29
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
  (topo.cc:60-83): Power 32, ARM 6, Intel ERP 40 / SRP 22 / SKL 10 / BDW 6, AMD 16, Zhaoxin 9/6.
* **NET**: one NET node per NIC record (a port, as NCCL's net plugin reports it) under its NIC
  (PCI function) node, bw = port rate / 8 (topo.cc:415-418).
* ``measured_bw_GBps`` on a link record overrides the nominal bandwidth (SPEC §5: planners prefer
  measured values).
* NUMA nodes without CPUs (Grace exposes GPU memory as NUMA nodes, also CXL memory) fold into the
  nearest NUMA node with CPUs; NVLink "bonds" from a GPU to every peer that add up to more links
  than the GPU has (how nvidia-smi shows an NVSwitch) become one NVSwitch link.
* Numbers are taken from the document only when they are finite and non-negative; a missing or
  unusable value falls back to the default, and every default used is listed in
  ``G.graph["assumptions"]`` (PCIe generation, NIC speed, CPU model, ...).

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

import copy
import re
from typing import Any, Optional

from gpucomm.probes.errors import InputError
from gpucomm.probes.model import natural_key as _natural
from gpucomm.probes.facts import arch_from_name, nvlink_bw_per_link, pcie_bw_GBps
from gpucomm.probes.model import cpu_id, gpu_id, is_sentinel_bus_id, nic_id

# NCCL constants (topo.h) -- GB/s, one direction.
LOC_BW = 5000.0
P9_BW, ARM_BW, AMD_BW = 32.0, 6.0, 16.0
ERP_QPI_BW, SRP_QPI_BW, SKL_QPI_BW, QPI_BW = 40.0, 22.0, 10.0, 6.0
YONGFENG_ZPI_BW, ZPI_BW = 9.0, 6.0
# NCCL always knows the CPU (CPUID); a document may not.  Take AMD_BW, the middle of the modern x86
# range (ICX 10 .. SPR 22), and say so in the assumptions.
UNKNOWN_CPU_SYS_BW = AMD_BW

NVS_ID = "NVS"

# ncclTopoGetXmlFromGpu (xml.cc:934): how many NVLinks a GPU of this sm can have.
def max_nvlinks(sm: Optional[int]) -> Optional[int]:
    if sm is None:
        return None
    return 0 if sm < 60 else 4 if sm < 70 else 6 if sm < 80 else 12 if sm < 90 else 18


# --------------------------------------------------------------------------------------------
# Small helpers shared with paths/rings
def gpu_sm(g: dict) -> Optional[int]:
    """Compute capability as NCCL's ``sm`` (major*10+minor), from the record or the GPU name."""
    cc = g.get("compute_capability")
    if isinstance(cc, str):
        m = re.match(r"^\s*(\d+)\.(\d+)\s*$", cc)
        if m:
            return int(m.group(1)) * 10 + int(m.group(2))
    if isinstance(cc, (list, tuple)) and len(cc) == 2 and all(isinstance(x, int) for x in cc):
        return cc[0] * 10 + cc[1]
    if isinstance(g.get("sm"), int):
        return g["sm"]
    return arch_from_name(g.get("name"))[1]


def default_pcie_gen(sm: Optional[int]) -> int:
    """PCIe generation a GPU of this architecture normally sits on (when a capture does not say):
    Hopper/Blackwell Gen5, Ampere/Ada Gen4, older Gen3."""
    if sm is None:
        return 4
    return 5 if sm >= 90 else 4 if sm >= 80 else 3


def default_nic_gbps(sm: Optional[int]) -> float:
    """Rail NIC speed typical for the GPU generation when a capture does not give NIC rates
    (NCCL's own fallback, 10 Gb/s, only applies when a net plugin reports nothing)."""
    if sm is None:
        return 100.0
    return 400.0 if sm >= 90 else 200.0 if sm >= 80 else 100.0


def _num(v: Any) -> Optional[float]:
    """A usable non-negative finite number from a document field, else None (documents come from
    users: strings, NaN, negative or absurd values are ignored rather than trusted)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    if f != f or f < 0 or f > 1e7:
        return None
    return f


def _nic_rate(ports: list) -> Optional[float]:
    """Best rate (Gb/s) among active ports, or among all ports when none says ACTIVE."""
    act = [_num(p.get("rate_gbps")) for p in ports if str(p.get("state", "")).upper().endswith("ACTIVE")]
    anyp = [_num(p.get("rate_gbps")) for p in ports]
    vals = [v for v in act if v] or [v for v in anyp if v]
    return max(vals) if vals else None


def _count(v: Any) -> int:
    f = _num(v)
    return int(f) if f is not None and f >= 1 and f == int(f) else 1


def _truthy(v: Any, default: bool = True) -> bool:
    if v is None:
        return default
    if isinstance(v, str):
        return v.strip().lower() not in ("0", "false", "no", "off", "")
    return bool(v)


# --------------------------------------------------------------------------------------------
# CPU model -> inter-CPU bandwidth (ncclTopoGetInterCpuBw)
_INTEL_NAME_MODEL = [
    # Xeon Scalable generation by SKU number -> a CPUID model of that generation.
    (r"\b(?:Platinum|Gold|Silver|Bronze)\s*[5-9]5\d\d", 0xCF),   # 5th gen Emerald Rapids
    (r"\b(?:Platinum|Gold|Silver|Bronze|Max)\s*[3-9]4\d\d", 0x8F),  # 4th gen Sapphire Rapids
    (r"\bXeon\s*6\d{3}", 0xAD),                                  # Xeon 6 (Granite Rapids): SRP class
    (r"\b(?:Platinum|Gold|Silver|Bronze)\s*[3-9]3\d\d", 0x6A),   # 3rd gen Ice Lake
    (r"\b(?:Platinum|Gold|Silver|Bronze)\s*[3-9]2\d\d", 0x55),   # Cascade Lake
    (r"\b(?:Platinum|Gold|Silver|Bronze)\s*[3-9]1\d\d", 0x55),   # Skylake-SP
    (r"\bE5-\d{4}|\bE7-\d{4}", 0x4F),                            # Broadwell/Haswell
]


def cpu_info(doc: dict, numa: Optional[int] = None) -> dict:
    """{arch, vendor, family, model} of a NUMA node's CPU, from ``numa_nodes[]`` extras (an NCCL XML
    ``<cpu>`` carries arch/vendor/familyid/modelid) or from ``host``; None where unknown."""
    info: dict = {"arch": None, "vendor": None, "family": None, "model": None, "name": None}
    host = doc.get("host") or {}
    rec = None
    for n in doc.get("numa_nodes") or []:
        if isinstance(n, dict) and n.get("id") == numa:
            rec = n
            break
    for src in (rec or {}, host):
        if not isinstance(src, dict):
            continue
        for key, names in (("arch", ("arch", "cpu_arch")), ("vendor", ("vendor", "cpu_vendor")),
                           ("family", ("familyid", "family", "cpu_family")),
                           ("model", ("modelid", "model_id", "cpu_model_id")),
                           ("name", ("cpu_model", "model_name"))):
            if info[key] is not None:
                continue
            for nm in names:
                v = src.get(nm)
                if v is not None and v != "":
                    info[key] = v
                    break
    for key in ("family", "model"):
        v = info[key]
        if isinstance(v, str):
            try:
                info[key] = int(v, 0)
            except ValueError:
                info[key] = None
    vendor = str(info["vendor"] or "").lower()
    name = str(info["name"] or "")
    if not vendor and name:
        low = name.lower()
        vendor = "intel" if "intel" in low or "xeon" in low else "amd" if ("amd" in low or "epyc" in low) else ""
        if "grace" in low or "neoverse" in low or "ampere" in low:
            info["arch"] = info["arch"] or "arm64"
    if "intel" in vendor:
        info["vendor"] = "intel"
    elif "amd" in vendor:
        info["vendor"] = "amd"
    elif "centaur" in vendor or "shanghai" in vendor or "zhaoxin" in vendor:
        info["vendor"] = "zhaoxin"
    elif vendor:
        info["vendor"] = vendor
    else:
        info["vendor"] = None
    arch = str(info["arch"] or "").lower()
    if arch in ("x86_64", "amd64", "x86"):
        info["arch"] = "x86_64"
    elif arch in ("arm64", "aarch64", "arm"):
        info["arch"] = "arm64"
    elif arch.startswith("ppc") or arch.startswith("power"):
        info["arch"] = "ppc64"
    elif info["vendor"] in ("intel", "amd", "zhaoxin"):
        info["arch"] = "x86_64"
    if info["vendor"] == "intel" and info["model"] is None and name:
        for pat, model in _INTEL_NAME_MODEL:
            if re.search(pat, name, re.I):
                info["model"], info["family"] = model, 6
                break
    return info


def inter_cpu_bw(info: dict) -> Optional[float]:
    """ncclTopoGetInterCpuBw for one CPU; None when the CPU is unknown (caller picks a default)."""
    arch, vendor, model, family = info.get("arch"), info.get("vendor"), info.get("model"), info.get("family")
    if arch == "ppc64":
        return P9_BW
    if arch == "arm64":
        return ARM_BW
    if vendor == "intel":
        if model is None:
            return None
        if family == 6 or family is None:
            return ERP_QPI_BW if model >= 0xCF else SRP_QPI_BW if model >= 0x8F else \
                SKL_QPI_BW if model >= 0x55 else QPI_BW
        return QPI_BW
    if vendor == "amd":
        return AMD_BW
    if vendor == "zhaoxin":
        return YONGFENG_ZPI_BW if (family == 7 and model == 0x5B) else ZPI_BW
    return None


# --------------------------------------------------------------------------------------------
class _Builder:
    """Accumulates nodes/edges (bw of same-type parallel links add up, as ncclTopoConnectNodes)."""

    def __init__(self) -> None:
        self.nodes: dict = {}
        self.edges: dict = {}   # (u, v) -> attrs
        self.assumptions: list = []

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

    def assume(self, text: str) -> None:
        if text not in self.assumptions:
            self.assumptions.append(text)

    def to_networkx(self, doc: dict):
        import networkx as nx  # lazy: planners are imported by the CLI

        G = nx.DiGraph()
        for nid in sorted(self.nodes):
            G.add_node(nid, **self.nodes[nid])
        for (u, v) in sorted(self.edges):
            a = self.edges[(u, v)]
            a["bw"] = round(a["bw"], 4)
            a["nominal_bw"] = round(a["nominal_bw"], 4)
            G.add_edge(u, v, **a)
        G.graph["assumptions"] = list(self.assumptions)
        G.graph["source"] = (doc.get("host") or {}).get("provenance")
        return G


def cpu_aliases(doc: dict) -> dict:
    """{"CPU<n>": "CPU<m>"} folding memory-only NUMA nodes (no CPUs: GPU HBM exposed as NUMA
    memory on Grace, CXL memory) into the nearest NUMA node that has CPUs, by the distance matrix.
    NCCL's CPU nodes are where devices' root complexes are; a node without cores cannot be one."""
    nodes = {n["id"]: n for n in doc.get("numa_nodes") or [] if isinstance(n, dict) and isinstance(n.get("id"), int)}
    with_cpus = sorted(i for i, n in nodes.items() if n.get("cpus"))
    out: dict = {}
    if not with_cpus:
        return out
    for i, n in nodes.items():
        if n.get("cpus") or i in with_cpus:
            continue
        dist = n.get("distances") if isinstance(n.get("distances"), list) else None
        ids = sorted(nodes)
        best = None
        for j in with_cpus:
            d = None
            if dist and len(dist) == len(ids) and j in ids:
                d = dist[ids.index(j)]
            key = (d if isinstance(d, (int, float)) else 10 ** 6, j)
            if best is None or key < best:
                best = key
        out[f"CPU{i}"] = f"CPU{best[1]}"
    return out


def _doc_gpus(doc: dict) -> list:
    gpus = [g for g in doc.get("gpus") or [] if isinstance(g, dict) and isinstance(g.get("index"), int)]
    return sorted(gpus, key=lambda g: g["index"])


def _cpu_nodes(b: _Builder, doc: dict, cpus: set) -> None:
    """CPU nodes with their model, and SYS links between every pair (topo.cc:270-283)."""
    smp: dict = {}
    alias = cpu_aliases(doc)
    for l in doc.get("links") or []:
        if l.get("kind") == "smp" and l.get("a") and l.get("b"):
            a, c = alias.get(l["a"], l["a"]), alias.get(l["b"], l["b"])
            if a != c and a in cpus and c in cpus:
                smp[(a, c)] = l
    if not cpus:
        return
    for c in sorted(cpus):
        m = re.match(r"^CPU(-?\d+)$", c)
        info = cpu_info(doc, int(m.group(1)) if m else None)
        b.node(c, type="CPU", label=c, arch=info["arch"], vendor=info["vendor"], family=info["family"],
               model=info["model"])
    clist = sorted(cpus)
    for i, a in enumerate(clist):
        for c in clist[i + 1:]:
            rec = smp.get((a, c)) or smp.get((c, a))
            if rec is not None and _num(rec.get("bw_GBps")):
                b.both(a, c, "SYS", _num(rec["bw_GBps"]), "smp", _num(rec.get("measured_bw_GBps")), add=False)
                continue
            bws = [inter_cpu_bw(cpu_info(doc, int(x[3:]) if re.match(r"^CPU\d+$", x) else None)) for x in (a, c)]
            bws = [x for x in bws if x is not None]
            if bws:
                bw = min(bws)
            else:
                bw = UNKNOWN_CPU_SYS_BW
                b.assume(f"CPU model unknown: inter-socket (SYS) bandwidth assumed {bw:g} GB/s")
            b.both(a, c, "SYS", bw, "smp", add=False)


def _nvlink_records(doc: dict, gpu_ids: set) -> list:
    """nvlink/xgmi link records; falls back to gpus[].nvlink per-link entries when ``links`` has none."""
    recs = [l for l in doc.get("links") or [] if l.get("kind") in ("nvlink", "xgmi") and l.get("a") and l.get("b")]
    if recs:
        return recs
    agg: dict = {}
    for g in _doc_gpus(doc):
        gid = gpu_id(g)
        for nl in g.get("nvlink") or []:
            if not isinstance(nl, dict):
                continue
            state = str(nl.get("state") or "active").lower()
            if state not in ("active", "up", "ok", "true", "1"):
                continue
            remote = nl.get("remote")
            if not remote:
                continue
            key = (gid, str(remote))
            agg[key] = agg.get(key, 0) + 1
    return [{"a": a, "b": r, "kind": "nvlink", "count": c, "bw_GBps": None} for (a, r), c in sorted(agg.items())]


def _add_gpus(b: _Builder, doc: dict) -> dict:
    """GPU nodes; returns {gpu id: record}."""
    out = {}
    for g in _doc_gpus(doc):
        gid = gpu_id(g)
        sm = gpu_sm(g)
        p2p = g.get("p2p") if isinstance(g.get("p2p"), dict) else {}
        b.node(gid, type="GPU", label=f"GPU{g['index']}", index=g["index"], sm=sm,
               gdr=_truthy(g.get("gdr"), True), p2p=dict(p2p), numa=g.get("numa_node"),
               vendor=g.get("vendor") or "nvidia")
        out[gid] = g
    return out


def _add_nvlinks(b: _Builder, doc: dict, gpus: dict, cpus: set) -> None:
    nvs_ids = {s["id"] for s in doc.get("switches") or [] if s.get("kind") == "nvswitch"}
    # Sum per orientation, then take the larger orientation per unordered pair: documents list a
    # GPU-GPU bond either once, once per side (NCCL XML: each GPU lists its targets) or per link.
    per_dir: dict = {}
    meas: dict = {}
    for l in _nvlink_records(doc, set(gpus)):
        a, bb = l["a"], l["b"]
        if a == bb:
            continue  # Azure NCv4 skeleton: a GPU "linked" to itself -- meaningless, NCCL ignores it too
        if a not in gpus and bb in gpus:
            a, bb = bb, a
        if a not in gpus:
            continue
        if bb in gpus:
            peer = bb
        elif bb in nvs_ids or bb == NVS_ID or is_sentinel_bus_id(bb) or bb not in cpus and not bb.startswith("CPU"):
            peer = NVS_ID
        else:
            peer = bb  # NVLink to a CPU (Power9 NPU)
        sm = b.nodes[a].get("sm")
        count = _count(l.get("count"))
        bw = _num(l.get("bw_GBps"))
        if not bw:
            bw = count * nvlink_bw_per_link(sm)
        key = (a, peer)
        cur = per_dir.setdefault(key, [0, 0.0])
        cur[0] += count
        cur[1] += float(bw)
        if _num(l.get("measured_bw_GBps")) is not None:
            meas[key] = meas.get(key, 0.0) + _num(l["measured_bw_GBps"])
    # A "GPU-GPU" bond to every peer that adds up to more NVLinks than the GPU has (NV18 to 7 peers,
    # as nvidia-smi shows an NVSwitch system) is an NVSwitch port, not 7 bonds: one NVS link.
    pair_counts: dict = {}
    for (a, peer), (count, bw) in per_dir.items():
        if peer in gpus:
            for x, y in ((a, peer), (peer, a)):
                pair_counts.setdefault(x, {})[y] = max(pair_counts.get(x, {}).get(y, 0), count)
    on_nvs = {}
    for g, peers in pair_counts.items():
        limit = max_nvlinks(b.nodes[g].get("sm")) or 18
        if len(peers) > 1 and sum(peers.values()) > limit:
            on_nvs[g] = max(peers.values())
    if on_nvs:
        for key in [k for k in per_dir if k[1] in gpus and k[0] in on_nvs and k[1] in on_nvs]:
            del per_dir[key]
        for g, count in sorted(on_nvs.items()):
            if (g, NVS_ID) not in per_dir:
                per_dir[(g, NVS_ID)] = [count, count * nvlink_bw_per_link(b.nodes[g].get("sm"))]
        b.assume("NVLink bonds to every peer exceed the GPUs' link count: modelled as an NVSwitch")
    done = set()
    for (a, peer), (count, bw) in sorted(per_dir.items()):
        if peer in gpus:
            pair = tuple(sorted((a, peer)))
            if pair in done:
                continue
            done.add(pair)
            other = per_dir.get((peer, a), [0, 0.0])
            bw = max(bw, other[1])
            m = meas.get((a, peer), meas.get((peer, a)))
            b.both(a, peer, "NVL", bw, "nvlink", m, add=False)
        elif peer == NVS_ID:
            b.node(NVS_ID, type="NVS", label=NVS_ID)
            b.both(a, NVS_ID, "NVL", bw, "nvlink", meas.get((a, peer)), add=False)
        else:
            b.node(peer, type="CPU", label=peer)
            b.both(a, peer, "NVL", bw, "nvlink", meas.get((a, peer)), add=False)


def _add_nets(b: _Builder, doc: dict, sm_hint: Optional[int]) -> None:
    """A NET node per NIC record (a port), under its NIC (PCI function) node."""
    net_bw: dict = {}
    for l in doc.get("links") or []:
        if l.get("kind") == "net" and _num(l.get("bw_GBps")) and isinstance(l.get("a"), str):
            net_bw[l["a"]] = (_num(l["bw_GBps"]), _num(l.get("measured_bw_GBps")))
    unknown: dict = {}
    for n in doc.get("nics") or []:
        if not isinstance(n, dict) or not n.get("name"):
            continue
        nid = nic_id(n)
        ports = [p for p in n.get("ports") or [] if isinstance(p, dict)] if isinstance(n.get("ports"), list) else []
        rate = _nic_rate(ports)
        measured = None
        if nid in net_bw or n["name"] in net_bw:
            bw, measured = net_bw.get(nid) or net_bw.get(n["name"])
        elif rate:
            bw = float(rate) / 8.0
        else:
            guess = default_nic_gbps(sm_hint)
            bw = guess / 8.0
            unknown.setdefault(guess, []).append(n["name"])
        port = ports[0].get("port") if ports else None
        net = f"NET:{n['name']}"
        b.node(net, type="NET", label=n["name"], name=n["name"], bw=bw, asic=n.get("guid") or nid,
               port=port, gdr=_truthy(n.get("gdr"), True), nic=nid)
        b.both(nid, net, "NET", bw, "net", measured, add=False)
    for guess, names in sorted(unknown.items()):
        b.assume(f"NIC speed unknown ({', '.join(names)}): assumed {guess:g} Gb/s, typical for the GPU generation")


# --------------------------------------------------------------------------------------------
def has_pci_tree(doc: dict) -> bool:
    """True when the document carries a PCI tree (parents or pcie links), not only a matrix."""
    if any(g.get("parent") for g in doc.get("gpus") or [] if isinstance(g, dict)):
        return True
    if any(n.get("parent") for n in doc.get("nics") or [] if isinstance(n, dict)):
        return True
    return any(l.get("kind") == "pcie" for l in doc.get("links") or [] if isinstance(l, dict))


def build_graph(doc: dict):
    """Topology document -> ``networkx.DiGraph`` in NCCL's model (see module docstring).

    Documents without a PCI tree but with an nvidia-smi matrix go through :func:`graph_from_matrix`.
    Raises InputError for something that is not a topology document."""
    if not isinstance(doc, dict) or not isinstance(doc.get("gpus", []), list):
        raise InputError("not a topology document", expected="a gpucomm.topology/v1 mapping")
    if not has_pci_tree(doc) and doc.get("matrix"):
        return graph_from_matrix(doc)
    # NCCL merges the two levels of Broadcom PEX switches before it computes paths (topo.cc
    # ncclTopoFlattenBcmSwitches); the document keeps the real tree (nvidia-smi's view, PXB), the
    # graph takes NCCL's (PIX).  A no-op for NCCL XML imports, which are flattened on import.
    from gpucomm.probes.formats.nccl_xml import flatten_bcm

    doc = flatten_bcm(copy.deepcopy(doc))
    b = _Builder()
    gpus = _add_gpus(b, doc)
    sms = [b.nodes[g]["sm"] for g in gpus if b.nodes[g].get("sm")]
    sm_hint = min(sms) if sms else None
    switches = {s["id"]: s for s in doc.get("switches") or [] if isinstance(s, dict) and s.get("id")}
    host_bridges = {k for k, s in switches.items() if s.get("kind") == "host_bridge"}
    pci_switches = {k for k, s in switches.items() if s.get("kind") not in ("host_bridge", "nvswitch")}
    cpus: set = set()
    alias = cpu_aliases(doc)

    def resolve(parent: Optional[str], numa: Optional[int]) -> Optional[str]:
        """Parent id in NCCL's graph: host bridges fold into their CPU."""
        seen = set()
        while parent in host_bridges and parent not in seen:
            seen.add(parent)
            hb = switches[parent]
            parent = hb.get("parent") or (cpu_id(hb["numa_node"]) if hb.get("numa_node") is not None else None)
            if parent is None:
                parent = cpu_id(numa)
        if parent is None:
            parent = cpu_id(numa) if numa is not None else None
        return alias.get(parent, parent) if parent else parent

    for sid in sorted(pci_switches):
        s = switches[sid]
        b.node(sid, type="PCI", label=sid, kind=s.get("kind"))
    pcie_recs: dict = {}
    for l in doc.get("links") or []:
        if l.get("kind") == "pcie" and l.get("a") and l.get("b"):
            pcie_recs[l["a"]] = l
    gen_default = default_pcie_gen(sm_hint)
    default_bw = pcie_bw_GBps(gen_default, 16)

    def connect(child: str, parent_raw: Optional[str], numa: Optional[int], rec: Optional[dict], is_nic: bool = False,
                pcie: Optional[dict] = None, what: str = "") -> None:
        parent = resolve(parent_raw, numa)
        if parent is None:
            parent = alias.get(cpu_id(numa), cpu_id(numa))
            b.assume(f"{what or child}: position in the PCI tree unknown, attached to {parent}")
        if parent.startswith("CPU"):
            cpus.add(parent)
        elif parent not in b.nodes:
            b.node(parent, type="PCI", label=parent)
        link = pcie_recs.get(child)
        if link is not None and _num(link.get("bw_GBps")):
            bw = _num(link["bw_GBps"])
            meas = _num(link.get("measured_bw_GBps"))
        elif is_nic and rec is not None and not rec.get("pci_bus_id") and parent.startswith("CPU"):
            bw, meas = LOC_BW, None  # NCCL: a <nic> directly under <cpu> is a LOC_BW PCI link
        else:
            p = pcie or {}
            gen = p.get("max_gen") or p.get("gen")
            width = p.get("max_width") or p.get("width")
            if gen:
                bw = pcie_bw_GBps(gen, width)
            else:
                bw = default_bw
                b.assume(f"PCIe link bandwidth unknown: assumed Gen{gen_default} x16 ({default_bw:g} GB/s)")
            meas = None
        b.both(child, parent, "PCI", bw, "pcie", meas, add=False)

    for sid in sorted(pci_switches):
        s = switches[sid]
        connect(sid, s.get("parent"), s.get("numa_node"), s, what=f"switch {sid}")
    for gid, g in gpus.items():
        connect(gid, g.get("parent"), g.get("numa_node"), g, pcie=g.get("pcie"), what=f"GPU{g['index']}")
    nic_done = set()
    for n in doc.get("nics") or []:
        if not isinstance(n, dict) or not n.get("name"):
            continue
        nid = nic_id(n)
        b.node(nid, type="NIC", label=n["name"] if not n.get("pci_bus_id") else nid, names=[])
        b.nodes[nid].setdefault("names", []).append(n["name"])
        if nid in nic_done:
            continue
        nic_done.add(nid)
        connect(nid, n.get("parent"), n.get("numa_node"), n, is_nic=True, what=f"NIC {n['name']}")
    for l in doc.get("links") or []:
        if l.get("kind") == "c2c" and l.get("a") in gpus and isinstance(l.get("b"), str) and \
                re.match(r"^CPU\d+$", l["b"]):
            cpu = alias.get(l["b"], l["b"])
            cpus.add(cpu)
            b.both(l["a"], cpu, "C2C", _num(l.get("bw_GBps")) or 0.0, "c2c", _num(l.get("measured_bw_GBps")))
    # CPUs without devices do not matter to NCCL's paths: only CPUs in the tree become nodes.
    _add_nvlinks(b, doc, gpus, cpus)
    _cpu_nodes(b, doc, cpus)
    _add_nets(b, doc, sm_hint)
    return b.to_networkx(doc)


# --------------------------------------------------------------------------------------------
_NV = re.compile(r"^NV(\d+)$")


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


def _sm_from_nvlinks(matrix: dict, b: _Builder) -> Optional[int]:
    """A topo -m capture has no GPU names; the NVLink counts still tell the generation: a GPU with
    more links than the previous generation allowed is at least of this one (P100 4, V100 6, A100 12,
    H100 18 links).  Applied to GPUs whose sm is unknown, and stated as an assumption."""
    most = 0
    for k, row in matrix.items():
        if not re.match(r"^GPU\d+$", str(k)) or not isinstance(row, dict):
            continue
        counts = [int(m.group(1)) for v in row.values() for m in [_NV.match(str(v))] if m]
        if counts:
            # on an NVSwitch every peer shows the GPU's full count; otherwise the counts add up
            most = max(most, max(counts) if len(counts) > 2 and len(set(counts)) == 1 and max(counts) >= 8
                       else sum(counts))
    if most == 0:
        return None
    sm = 60 if most <= 4 else 70 if most <= 6 else 80 if most <= 12 else 90
    for n, a in b.nodes.items():
        if a.get("type") == "GPU" and a.get("sm") is None:
            a["sm"] = sm
    b.assume(f"GPU architecture unknown: {most} NVLinks per GPU suggest sm{sm} (per-link bandwidth and PCIe "
             f"generation of that class)")
    return sm


def graph_from_matrix(doc: dict):
    """Graph for a document that only has an nvidia-smi matrix (a bare ``nvidia-smi topo -m``).

    The matrix hides the PCI relation of NVLinked pairs and all bandwidths, so this rebuilds the
    smallest PCI tree consistent with the codes and uses defaults, each recorded in
    ``G.graph["assumptions"]``: PCIe Gen5 x16 (48 GB/s) for Hopper/Blackwell GPUs, Gen4 x16 (24)
    for Ampere/Ada, Gen3 x16 (12) for older or unknown; NVLink count x NCCL's per-link bw; an NV#
    row whose total exceeds the GPU's NVLink count (e.g. NV18 to 7 peers) means an NVSwitch."""
    matrix = doc.get("matrix") or {}
    b = _Builder()
    gpus = _add_gpus(b, doc)
    by_key = {f"GPU{g['index']}": gid for gid, g in gpus.items()}
    nic_by_name = {n["name"]: n for n in doc.get("nics") or [] if isinstance(n, dict) and n.get("name")}
    devs = [k for k in matrix if k in by_key or k in nic_by_name]
    # A matrix may mention GPUs/NICs the records lack (or vice versa): keep the intersection with
    # records for GPUs; NICs found only in the matrix become bare NIC records.
    for k in matrix:
        if re.match(r"^GPU\d+$", k) and k not in by_key:
            idx = int(k[3:])
            gid = f"GPU{idx}"
            b.node(gid, type="GPU", label=k, index=idx, sm=None, gdr=True, p2p={}, numa=None, vendor="nvidia")
            by_key[k] = gid
            gpus[gid] = {"index": idx}
            devs.append(k) if k not in devs else None
    sms = [b.nodes[g]["sm"] for g in gpus if b.nodes[g].get("sm")]
    sm_hint = min(sms) if sms else None
    if sm_hint is None:
        sm_hint = _sm_from_nvlinks(matrix, b)
    gid_of = {k: (by_key[k] if k in by_key else nic_id(nic_by_name[k])) for k in devs}
    numa_of = {}
    for k in devs:
        rec = gpus.get(by_key[k]) if k in by_key else nic_by_name.get(k)
        numa_of[k] = rec.get("numa_node") if isinstance(rec, dict) else None

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
    gen = default_pcie_gen(sm_hint)
    pbw = pcie_bw_GBps(gen, 16)
    if devs:
        b.assume(f"topology matrix only (no PCI tree): PCIe links assumed Gen{gen} x16 ({pbw:g} GB/s), "
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
            nid = gid_of[k]
            b.node(nid, type="NIC", label=k, names=[k])
    # NVLinks: explicit records when the parser made them, else from the NV# codes.
    if any(l.get("kind") in ("nvlink", "xgmi") for l in doc.get("links") or []):
        _add_nvlinks(b, doc, gpus, cpus)
    else:
        gkeys = [k for k in devs if k in by_key]
        rows = {k: {c: int(_NV.match(rel(k, c)).group(1)) for c in gkeys if c != k and _NV.match(rel(k, c))}
                for k in gkeys}
        for k in gkeys:
            gid = by_key[k]
            sm = b.nodes[gid].get("sm")
            row = rows[k]
            if not row:
                continue
            limit = max_nvlinks(sm) or 18
            if sum(row.values()) > limit:
                count = max(row.values())
                b.node(NVS_ID, type="NVS", label=NVS_ID)
                b.both(gid, NVS_ID, "NVL", count * nvlink_bw_per_link(sm), "nvlink", add=False)
            else:
                for c, count in row.items():
                    if sum(rows[c].values()) > (max_nvlinks(b.nodes[by_key[c]].get("sm")) or 18):
                        continue
                    bw = count * nvlink_bw_per_link(sm)
                    b.link(gid, by_key[c], "NVL", bw, "nvlink", add=False)
    _cpu_nodes(b, doc, cpus)
    _add_nets(b, doc, sm_hint)
    return b.to_networkx(doc)


def node_label(G, nid: str) -> str:
    """Human name of a graph node (GPU3, mlx5_0, CPU1, ...)."""
    return G.nodes[nid].get("label") or nid if nid in G.nodes else nid


def gpu_nodes(G) -> list:
    """GPU node ids sorted by GPU index."""
    return sorted((n for n, a in G.nodes(data=True) if a.get("type") == "GPU"), key=lambda n: G.nodes[n]["index"])


def net_nodes(G) -> list:
    """NET node ids in document (name) order."""
    return sorted((n for n, a in G.nodes(data=True) if a.get("type") == "NET"), key=lambda n: _natural(n))


