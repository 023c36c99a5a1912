"""NCCL's system graph and paths, as NCCL 2.30.7 computes them (src/graph/topo.cc
``ncclTopoGetSystemFromXml``, src/graph/paths.cc ``ncclTopoComputePaths``/``ncclTopoTrimSystem``).

Nodes are NCCL's (GPU, PCI, NVS, CPU, NIC, NET, DEV): a GPU hangs off its DEV node (the physical
device, 2.30) with a LOC link; PCI links carry ``width * lane / 80`` GB/s, NVLinks ``count x
ncclTopoNVLinkBw(sm)``, CPUs are joined by SYS links of ``ncclTopoGetInterCpuBw``.  Links are kept
in NCCL's order (``ncclTopoConnectNodes`` keeps them sorted by bandwidth, ``ncclTopoSortSystem``
puts the PCI uplink last), because NCCL's breadth-first path search and its channel search visit
them in that order.  Bandwidths are C ``float``s: every stored value is rounded to float32, as the
C code stores them, so comparisons and the search's bandwidth book-keeping match NCCL bit for bit.

Paths (``ncclTopoSetPaths``): per destination, a BFS that keeps a better type, then more bandwidth,
then fewer hops; the post-processing of ``ncclTopoComputePaths``: GPU pairs without P2P (beyond
``NCCL_P2P_LEVEL``, default PXB, SYS on AMD with <= 2 GPUs) through the CPU; pairs for which
going through the NICs is faster than P2P/SHM (``ncclTopoCheckNet``; NCCL_NET_DISABLE_INTRA) marked
PATH_NET and trimmed into separate domains; P2C for Grace; PXN through an NVLink peer; no GDR
through the CPU.  ``settings`` carries the NCCL_* parameters these steps read.
"""
from __future__ import annotations

import struct
from typing import Optional

from gpucomm.probes import facts
from gpucomm.probes.facts import (AMD_BW, ARM_BW, BDW_QPI_BW, ERP_QPI_BW, LOC_BW, P9_BW, SKL_QPI_BW, SRP_QPI_BW,
                                  YONGFENG_ZPI_BW, ZPI_BW)
from gpucomm.probes.model import NCCL_PCI_CLASSES

from gpucomm.planners.nccl.names import (LINK_C2C, LINK_LOC, LINK_NET, LINK_NVL, LINK_PCI, LINK_SYS, MAXCHANNELS,
                                         PATH_C2C, PATH_DIS, PATH_LOC, PATH_NAMES, PATH_NET, PATH_NVB, PATH_NVL,
                                         PATH_P2C, PATH_PHB, PATH_PIX, PATH_PXB, PATH_PXN, PATH_SYS, kv)
from gpucomm.planners.nccl.ncclxml import NcclFailure, XNode, Xml, bus_to_int, c_int, strtol

# node types (topo.h)
GPU, PCI, NVS, CPU, NIC, NET, GIN, RMA, DEV, CXB = range(10)
NODE_TYPES = ("GPU", "PCI", "NVS", "CPU", "NIC", "NET", "GIN", "RMA", "DEV", "CXB")

MLOPART_LOC_BW = 2618.0
ARCH_X86, ARCH_POWER, ARCH_ARM = 1, 2, 3
VENDOR_INTEL, VENDOR_AMD, VENDOR_ZHAOXIN = 1, 2, 3
MODEL_BDW, MODEL_SKL, MODEL_SRP, MODEL_ERP = 1, 2, 3, 4
MODEL_YONGFENG = 1
UNDEF = -1
ID_MASK = 0x00FFFFFFFFFFFFFF

_F = struct.Struct("f")


def f32(x: float) -> float:
    """Round to a C float (IEEE single precision)."""
    return _F.unpack(_F.pack(x))[0]


def nvlink_bw(cc: int) -> float:
    """``ncclTopoNVLinkBw`` (topo.h, :func:`gpucomm.probes.facts.nvlink_bw_per_link`), as a float."""
    return f32(facts.nvlink_bw_per_link(cc))


def topo_id(system_id: int, local: int) -> int:
    return ((system_id << 56) + (local & ID_MASK)) & 0xFFFFFFFFFFFFFFFF


class Link:
    __slots__ = ("type", "bw", "rem")

    def __init__(self, type_: int, bw: float, rem: "Node"):
        self.type = type_
        self.bw = bw
        self.rem = rem


class PathL:
    """``struct ncclTopoLinkList``: the links from a node to a destination, hop count, bw, type."""

    __slots__ = ("list", "count", "bw", "type", "fast")

    def __init__(self) -> None:
        self.list: list = []
        self.count = 0
        self.bw = 0.0
        self.type = PATH_DIS
        self.fast = None      # the search's precomputed steps (search.py), reset when the list changes


class Node:
    __slots__ = ("type", "id", "idx", "links", "paths", "used",
                 "dev", "rank", "cc", "gdr", "mlo", "parent", "device", "ngpus",
                 "pci_id", "asic", "port", "bw", "latency", "coll", "max_channels", "local_gpu", "rail", "plane",
                 "name", "arch", "vendor", "model", "bus", "set_links", "mark", "lcache")

    def __init__(self, type_: int, id_: int):
        self.type = type_
        self.id = id_
        self.idx = 0
        self.links: list = []
        self.paths: list = [None] * 10
        self.used = 0
        self.dev = UNDEF
        self.rank = UNDEF
        self.cc = UNDEF
        self.gdr = 0
        self.mlo = UNDEF
        self.parent: Optional[Node] = None
        self.device = 0
        self.ngpus = 0
        self.pci_id = None
        self.set_links: list = []    # the links as ncclTopoSetPaths reads them (path_links, per path computation)
        self.mark = 0                # set_paths' "queued in this round" stamp
        self.lcache = None           # get_local's answers from this node's paths (dropped when they change)
        self.asic = 0
        self.port = UNDEF
        self.bw = 0.0
        self.latency = 0.0
        self.coll = 0
        self.max_channels = MAXCHANNELS
        self.local_gpu = -1
        self.rail = UNDEF
        self.plane = UNDEF
        self.name = None
        self.arch = UNDEF
        self.vendor = UNDEF
        self.model = UNDEF
        self.bus = None

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"{NODE_TYPES[self.type]}/{self.id:x}"


class System:
    """``struct ncclTopoSystem``."""

    def __init__(self) -> None:
        self.nodes: list = [[] for _ in range(10)]
        self.max_bw = 0.0
        self.total_bw = 0.0
        self.inter = 0
        self.n_hosts = 0
        self.host_hashes: list = []     # ncclGetSystemId: host hashes in the order the XML's CPUs name them
        self.system_id = 0              # the local host's index in host_hashes
        self.pver = 0                   # counts changes to paths after ncclTopoSetPaths (add_inter_step, types)

    def create(self, type_: int, id_: int) -> Node:
        n = Node(type_, id_)
        n.idx = len(self.nodes[type_])
        self.nodes[type_].append(n)
        self.__dict__.pop("_ids", None)
        return n

    def get(self, type_: int, id_: int) -> Optional[Node]:
        for n in self.nodes[type_]:
            if n.id == id_:
                return n
        return None

    def remove(self, type_: int, index: int) -> None:
        """``ncclTopoRemoveNode``."""
        dn = self.nodes[type_][index]
        for t in range(10):
            for n in self.nodes[t]:
                if n is dn:
                    continue
                n.links = [l for l in n.links if l.rem is not dn]
        if type_ == DEV:
            for g in self.nodes[GPU]:
                if g.parent is dn:
                    g.parent = None
        del self.nodes[type_][index]
        for i, n in enumerate(self.nodes[type_]):
            n.idx = i
        self.__dict__.pop("_r2i", None)
        self.__dict__.pop("_ids", None)
        for nodes in self.nodes:
            for n in nodes:
                n.lcache = None

    def rank_to_index(self, rank: int) -> int:
        """``ncclTopoRankToIndex``: the first GPU with ``rank`` (remembered; checked on every use)."""
        gpus = self.nodes[GPU]
        memo = self.__dict__.setdefault("_r2i", {})
        i = memo.get(rank)
        if i is not None and i < len(gpus) and gpus[i].rank == rank:
            return i       # valid: ranks are set when GPUs are made, and remove() forgets the indices
        for i, g in enumerate(gpus):
            if g.rank == rank:
                memo[rank] = i
                return i
        return -1

    def id_to_index(self, type_: int, id_: int) -> int:
        """The index of the first node of ``type_`` with id ``id_``, -1 if none."""
        ids = self.__dict__.get("_ids")
        if ids is None:
            ids = self._ids = [{} for _ in range(10)]
            for t, nodes in enumerate(self.nodes):
                for i in range(len(nodes) - 1, -1, -1):
                    ids[t][nodes[i].id] = i
        return ids[type_].get(id_, -1)

    def dev_to_rank(self, system_id: int, dev: int) -> int:
        """``ncclTopoDevToRank``: the rank of NVML device ``dev`` on host ``system_id``."""
        for g in self.nodes[GPU]:
            if g.id >> 56 == system_id and g.dev == dev:
                return g.rank
        raise NcclFailure(f"ncclTopoDevToRank could not find rank for nvml dev {dev} in systemId {system_id}")

    def system_id_of(self, host_hash: int) -> int:
        """``ncclGetSystemId``: the host's index, a new one for a hash not seen yet."""
        try:
            return self.host_hashes.index(host_hash)
        except ValueError:
            self.host_hashes.append(host_hash)
            self.n_hosts = len(self.host_hashes)
            return self.n_hosts - 1


def connect(node: Node, rem: Node, type_: int, bw: float) -> None:
    """``ncclTopoConnectNodes``: aggregate into an existing link of the same type, keep bw-descending order."""
    links = node.links
    k = None
    for i, l in enumerate(links):
        if l.rem is rem and l.type == type_:
            k = i
            break
    if k is None:
        links.append(Link(type_, f32(bw), rem))
        k = len(links) - 1
    else:
        links[k].bw = f32(links[k].bw + bw)
    save = links[k]
    while k > 0 and not links[k - 1].bw >= save.bw:
        links[k] = links[k - 1]
        k -= 1
    links[k] = save


def _attached(sys, kind: int, nid: int, peer: Node, type_: int, bw: float) -> Node:
    """The ``kind`` node ``nid``; created and connected both ways to ``peer`` when it is new (the
    get-or-create NCCL does for a CPU's <nic> and for a C2C bridge)."""
    node = sys.get(kind, nid)
    if node is None:
        node = sys.create(kind, nid)
        connect(peer, node, type_, bw)
        connect(node, peer, type_, bw)
    return node


# --------------------------------------------------------------------------------------------
# ncclTopoGetSystemFromXml
_PCI_CLASS = tuple((k, NODE_TYPES.index(t)) for k, t in NCCL_PCI_CLASSES)
_ARCHS = (("x86_64", ARCH_X86), ("arm64", ARCH_ARM), ("ppc64", ARCH_POWER))
_VENDORS = (("GenuineIntel", VENDOR_INTEL), ("AuthenticAMD", VENDOR_AMD), ("CentaurHauls", VENDOR_ZHAOXIN),
            ("  Shanghai  ", VENDOR_ZHAOXIN))


def _int_device(x: XNode) -> int:
    v = 0
    for key, shift in (("vendor", 48), ("device", 32), ("subsystem_vendor", 16), ("subsystem_device", 0)):
        s = x.get(key)
        if s is not None:
            v += strtol(s) << shift
    return v & 0xFFFFFFFFFFFFFFFF


def _add_net(sys: System, x: XNode, nic: Node, system_id: int) -> None:
    dev = x.get_int("dev")
    nid = topo_id(system_id, dev)
    net = sys.create(NET, nid)
    net.dev = dev
    net.name = x.get("name")
    g = x.get("guid")
    net.asic = strtol(g, 16) & 0xFFFFFFFFFFFFFFFF if g is not None else nid
    net.bw = f32(facts.nccl_net_GBps(x.get_int_default("speed", 0)))
    lat = x.get("latency")
    net.latency = f32(float(lat)) if lat is not None and _is_float(lat) else 0.0
    net.port = x.get_int_default("port", 0)
    net.gdr = x.get_int_default("gdr", 0)
    net.max_channels = x.get_int_default("maxconn", MAXCHANNELS)
    net.coll = x.get_int_default("coll", 0)
    net.rail = x.get_int_default("rail", UNDEF)
    net.plane = x.get_int_default("plane", UNDEF)
    p = x.parent
    while p is not None and p.name != "pci":
        p = p.parent
    bus = p.get("busid") if p is not None else None
    net.pci_id = bus if bus is not None else ("asic", net.asic)   # pciId: a hash of the bus id, else of the GUID
    connect(nic, net, LINK_NET, net.bw)
    connect(net, nic, LINK_NET, net.bw)


def _is_float(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def _add_nic(sys: System, x: XNode, nic: Node, system_id: int) -> None:
    for s in x.subs:
        if s.name != "net" or s.index("dev") == -1:
            continue
        if s.get_int_default("net", 1):
            _add_net(sys, s, nic, system_id)


def _add_gpu_sub(sys: System, xpci: XNode, xgpu: XNode, parent: Node, system_id: int, bus: int, bw: float) -> None:
    mlo = xgpu.get_int_default("mlopart", UNDEF)
    xgpu.get_int("sm")
    dev_bus = bus
    if mlo != UNDEF:
        dev_bus = bus | (((mlo << 1) | 1) & 3)
    dn = sys.get(DEV, topo_id(system_id, dev_bus))
    if dn is None:
        dn = sys.create(DEV, topo_id(system_id, dev_bus))
        dn.device = _int_device(xpci)
        dn.cc = xgpu.get_int("sm")
        dn.dev = xgpu.get_int("dev")
        dn.bus = xpci.get("busid")
        connect(dn, parent, LINK_PCI, bw)
        connect(parent, dn, LINK_PCI, bw)
        for sib in _dev_nodes(sys, dn.id):
            if sib is not dn:
                connect(dn, sib, LINK_LOC, MLOPART_LOC_BW)
                connect(sib, dn, LINK_LOC, MLOPART_LOC_BW)
    g = sys.create(GPU, topo_id(system_id, ((dn.ngpus << 40) | (dev_bus & ((1 << 40) - 1)))))
    g.rank = xgpu.get_int("rank")
    g.cc = xgpu.get_int("sm")
    g.dev = xgpu.get_int("dev")
    g.gdr = xgpu.get_int("gdr")
    g.mlo = xgpu.get_int_default("mlopart", UNDEF)
    g.bus = xpci.get("busid")
    g.parent = dn
    connect(dn, g, LINK_LOC, LOC_BW)
    connect(g, dn, LINK_LOC, LOC_BW)
    dn.ngpus += 1


def _dev_nodes(sys: System, base: int) -> list:
    masked = base & ~3
    return [d for d in sys.nodes[DEV] if (d.id & ~3) == masked]


def _add_pci(sys: System, x: XNode, parent: Node, system_id: int, numa: int) -> None:
    type_ = kv(x.get_str("class"), _PCI_CLASS, PCI)
    bus = bus_to_int(x.get_str("busid"))
    width = x.get_int("link_width")
    if width == 0:
        width = 16
    speed = kv(x.get_str("link_speed"), facts.NCCL_PCI_GEN_SPEEDS, facts.NCCL_PCI_LANE_DEFAULT)
    bw = f32(width * speed / 80.0)
    for g in [s for s in x.subs if s.name == "gpu"]:
        if g.index("rank") == -1:
            return
        _add_gpu_sub(sys, x, g, parent, system_id, bus, bw)
    node = None
    xnic = x.sub("nic")
    if xnic is not None:
        nid = topo_id(system_id, ((numa << 56) + bus))
        nic = sys.get(NIC, nid)
        if nic is None:
            nic = sys.create(NIC, nid)
            nic.bus = x.get("busid")
            node = nic
        _add_nic(sys, xnic, nic, system_id)
    elif type_ == PCI:
        node = sys.create(PCI, topo_id(system_id, bus))
        node.device = _int_device(x)
        node.bus = x.get("busid")
        for s in x.subs:
            if s.name != "pcilink":
                _add_pci(sys, s, node, system_id, numa)
    if node is not None:
        connect(node, parent, LINK_PCI, bw)
        connect(parent, node, LINK_PCI, bw)


def _cpu_system_id(sys: System, x: XNode) -> int:
    """The system id of a <cpu> (its ``host_hash``, ``strtoull(.., 16)``; 0 when it has none)."""
    h = x.get("host_hash")
    return sys.system_id_of(strtol(h, 16) & 0xFFFFFFFFFFFFFFFF if h is not None else 0)


def _add_cpu(sys: System, x: XNode) -> None:
    numa = x.get_int("numaid")
    system_id = _cpu_system_id(sys, x)
    cpu = sys.create(CPU, topo_id(system_id, numa))
    cpu.name = f"CPU{numa}"
    cpu.arch = kv(x.get_str("arch"), _ARCHS, 0)
    if cpu.arch == ARCH_X86:
        cpu.vendor = kv(x.get_str("vendor"), _VENDORS, 0)
        if cpu.vendor == VENDOR_INTEL:
            fam, mod = x.get_int("familyid"), x.get_int("modelid")
            cpu.model = MODEL_ERP if fam == 6 and mod >= 0xCF else MODEL_SRP if fam == 6 and mod >= 0x8F else \
                MODEL_SKL if fam == 6 and mod >= 0x55 else MODEL_BDW
        elif cpu.vendor == VENDOR_ZHAOXIN:
            fam, mod = x.get_int("familyid"), x.get_int("modelid")
            if fam == 7 and mod == 0x5B:
                cpu.model = MODEL_YONGFENG
    for s in x.subs:
        if s.name == "pci":
            _add_pci(sys, s, cpu, system_id, numa)
        if s.name == "nic":
            nic = _attached(sys, NIC, topo_id(system_id, (numa << 56)), cpu, LINK_PCI, LOC_BW)
            _add_nic(sys, s, nic, system_id)


def _local_cpu_up(node: Node, frm: Optional[Node]) -> Optional[Node]:
    """``findLocalCpu``: up the PCI tree through PCI switches."""
    if node.type == CPU:
        return node
    for l in node.links:
        if l.type == LINK_PCI and l.rem is not frm and l.rem.type in (PCI, CPU):
            c = _local_cpu_up(l.rem, node)
            if c is not None:
                return c
    return None


def _primary_gpu(xgpu: XNode) -> bool:
    mine = xgpu.get_int_default("mlopart", UNDEF)
    for s in xgpu.parent.subs:
        if s.name != "gpu":
            continue
        if s is xgpu:
            break
        if s.get_int_default("mlopart", UNDEF) == mine:
            return False
    return True


def _gpu_dev_node(sys: System, xgpu: XNode, bus: str, system_id: int) -> Optional[Node]:
    raw = bus_to_int(bus)
    mlo = xgpu.get_int_default("mlopart", UNDEF)
    xgpu.get_int("sm")
    dev_bus = (raw | (((mlo << 1) | 1) & 3)) if mlo != UNDEF else raw
    return sys.get(DEV, topo_id(system_id, dev_bus))


def _tagged(sys: System, x: XNode, tag: str, parent_bus: Optional[str], system_id: int = 0):
    """The ``tag`` elements under ``x``, depth first, each with the busid of its nearest ancestor that
    has one and the system id of its <cpu>: the descent ncclTopoAddNvLinks / AddC2c / AddPciLinks share
    (their subtrees not entered)."""
    if x.name == tag:
        yield x, parent_bus, system_id
        return
    if x.name == "cpu":
        system_id = _cpu_system_id(sys, x)
    bus = x.get("busid")
    for s in x.subs:
        yield from _tagged(sys, s, tag, bus if bus is not None else parent_bus, system_id)


def _link_gpu(sys: System, x: XNode, parent_bus: Optional[str], system_id: int, what: str) -> Optional[Node]:
    """The DEV node of the GPU a <nvlink>/<c2c> element belongs to; None when that GPU is not the
    primary one of its device (its links are the primary's); NCCL's error when it has none."""
    if not _primary_gpu(x.parent):
        return None
    dn = _gpu_dev_node(sys, x.parent, parent_bus or "", system_id)
    if dn is None:
        raise NcclFailure(f"Add {what} error : could not find DEV for GPU {parent_bus}")
    return dn


def _add_nvlink(sys: System, x: XNode, parent_bus: Optional[str], system_id: int) -> None:
    dn = _link_gpu(sys, x, parent_bus, system_id, "NVLink")
    if dn is None:
        return
    local = len(_dev_nodes(sys, dn.id))
    count = x.get_int("count")
    ttype = kv(x.get_str("tclass"), _PCI_CLASS, PCI)
    nvl = nvlink_bw(dn.cc)
    if ttype == GPU:
        rem = _dev_nodes(sys, topo_id(system_id, bus_to_int(x.get_str("target"))))
        for r in rem:
            connect(dn, r, LINK_NVL, f32(f32(f32(count * nvl) / len(rem)) / local))
    else:
        remote = None
        if ttype == CPU:
            remote = _local_cpu_up(dn, None)
        else:
            remote = sys.nodes[NVS][0] if sys.nodes[NVS] else sys.create(NVS, 0)
        if remote is not None:
            bw = f32(f32(count * nvl) / local)
            connect(dn, remote, LINK_NVL, bw)
            connect(remote, dn, LINK_NVL, bw)


def _add_c2c_link(sys: System, x: XNode, parent_bus: Optional[str], system_id: int) -> None:
    dn = _link_gpu(sys, x, parent_bus, system_id, "C2c")
    if dn is None:
        return
    sibs = len(_dev_nodes(sys, dn.id))
    count, bw = x.get_int("count"), x.get_int("bw")
    c2c = f32((bw * count) / 1000.0)
    cpu = _local_cpu_up(dn, None)
    if cpu is None:
        return
    if sibs > 1:
        xb = _attached(sys, CXB, dn.id & ~3, cpu, LINK_C2C, c2c)
        connect(dn, xb, LINK_C2C, c2c)
        connect(xb, dn, LINK_C2C, c2c)
    else:
        connect(dn, cpu, LINK_C2C, c2c)
        connect(cpu, dn, LINK_C2C, c2c)


def _add_pcilink(sys: System, x: XNode, parent_bus: Optional[str], system_id: int) -> None:
    pci = sys.get(PCI, topo_id(system_id, bus_to_int(parent_bus or "")))
    if pci is None:
        raise NcclFailure("Add PCI Link error : could not find PCI SW")
    rem = sys.get(PCI, topo_id(system_id, bus_to_int(x.get_str("target"))))
    if rem is not None:
        connect(pci, rem, LINK_LOC, LOC_BW)


def _bcm_gen(dev: int, level: int) -> int:
    if (dev & 0xFFFFFFFFFFFFF000) == 0x1000C0101000A000:
        return 4
    if (dev & 0xFFFFFFFFFFFFF000) == (0x1000C03010000000 | level * 0x1000):
        return 5
    return 0


def _flatten_bcm(sys: System) -> None:
    """``ncclTopoFlattenBcmSwitches``."""
    s = 0
    while s < len(sys.nodes[PCI]):
        sw = sys.nodes[PCI][s]
        gen = _bcm_gen(sw.device, 0)
        if not gen:
            s += 1
            continue
        subs = []
        keep = []
        for l in sw.links:
            if l.rem.type == PCI and _bcm_gen(l.rem.device, 1) == gen:
                subs.append(l.rem.id)
            else:
                keep.append(l)
        sw.links = keep
        for sid in subs:
            idx = sys.id_to_index(PCI, sid)
            sub = sys.nodes[PCI][idx]
            for l in sub.links:
                rem = l.rem
                if rem is sw:
                    continue
                sw.links.append(l)
                for rl in rem.links:
                    if rl.rem is sub:
                        rl.rem = sw
                        break
            sys.remove(PCI, idx)
        sw.device |= 0xFFFF
        s = 0


def _inter_cpu_bw(cpu: Node) -> float:
    if cpu.arch == ARCH_POWER:
        return P9_BW
    if cpu.arch == ARCH_ARM:
        return ARM_BW
    bw = LOC_BW
    if cpu.arch == ARCH_X86 and cpu.vendor == VENDOR_INTEL:
        bw = ERP_QPI_BW if cpu.model == MODEL_ERP else SRP_QPI_BW if cpu.model == MODEL_SRP else \
            SKL_QPI_BW if cpu.model == MODEL_SKL else BDW_QPI_BW
    if cpu.arch == ARCH_X86 and cpu.vendor == VENDOR_AMD:
        bw = AMD_BW
    if cpu.arch == ARCH_X86 and cpu.vendor == VENDOR_ZHAOXIN:
        bw = YONGFENG_ZPI_BW if cpu.model == MODEL_YONGFENG else ZPI_BW
    return bw


def _sort(node: Node, up: Optional[Node]) -> None:
    """``ncclTopoSort``: the link to the upper node goes last, recursively down the PCI tree."""
    if up is not None:
        for i, l in enumerate(node.links):
            if l.rem is up:
                node.links.append(node.links.pop(i))
                break
    for l in list(node.links):
        if l.type == LINK_PCI and l.rem is not up:
            _sort(l.rem, node)


def system_from_xml(xml: Xml, local_host_hash: Optional[int] = None) -> System:
    """``ncclTopoGetSystemFromXml`` on the fused XML; ``local_host_hash``: the host hash of the rank's
    host (``getHostHash()``; None: the first host's, the only one of a one-host XML)."""
    sys = System()
    top = xml.top()
    if top is None:
        raise NcclFailure("ncclTopoGetSystemFromXml: system node not found in XML")
    for s in top.subs:
        if s.name == "cpu":
            _add_cpu(sys, s)
    if local_host_hash is not None:
        if local_host_hash not in sys.host_hashes:
            raise NcclFailure(f"localHostHash = {local_host_hash:#x} not found in the list of system hostHashes")
        sys.system_id = sys.host_hashes.index(local_host_hash)
    for tag, add in (("nvlink", _add_nvlink), ("c2c", _add_c2c_link), ("pcilink", _add_pcilink)):
        for x, bus, sid in _tagged(sys, top, tag, None):   # ncclTopoAddNvLinks, ncclTopoAddC2c, ncclTopoAddPciLinks
            add(sys, x, bus, sid)
    _flatten_bcm(sys)
    cpus = sys.nodes[CPU]
    for a in cpus:
        for b in cpus:
            if a is not b and a.id >> 56 == b.id >> 56:     # ncclTopoConnectCpus: CPUs of one host
                connect(a, b, LINK_SYS, _inter_cpu_bw(a))
    for c in cpus:
        _sort(c, None)
    return sys


# --------------------------------------------------------------------------------------------
# Paths (paths.cc)
_NO_PATH = PathL()   # every path not found yet (count 0, bw 0, PATH_DIS): one shared object, never changed


def _alloc_paths(node: Node, sys: System, t: int) -> list:
    """``node->paths[t]``: one path per node of type ``t``, none found yet.  They all start as the shared
    _NO_PATH, replaced by a path of its own where one is found or changed (:func:`own_path`)."""
    p = node.paths[t]
    if p is None:
        p = [_NO_PATH] * len(sys.nodes[t])
        node.paths[t] = p
    return p


def own_path(node: Node, t: int, i: int) -> PathL:
    """``node``'s path to node ``i`` of type ``t``, made its own to change (not the shared _NO_PATH)."""
    p = node.paths[t][i]
    if p is _NO_PATH:
        p = node.paths[t][i] = PathL()
    return p


def path_links(sys: System) -> None:
    """Every node's links as ``ncclTopoSetPaths`` reads them (``Node.set_links``), worked out once per path
    computation: ``(remote node, its type, link bw, link type, hop type, reverse link, DEV rule)``.  The hop
    type is the path type the link adds before the NVB and "no better than the path so far" rules (PXB
    between PCI switches, PHB on a PCI link to a CPU, LOC for a NET link); the reverse link is the remote
    node's first link back of the same type (NCCL scans the remote node's links for it), None if it has
    none; the DEV rule says when a path may leave a DEV other than the base's: 0 always (to its GPU),
    1 over NVLink to another DEV only as NVB's one middle hop, 2 never."""
    first: dict = {}
    for nodes in sys.nodes:
        for n in nodes:
            f: dict = {}
            for l in n.links:
                f.setdefault((id(l.rem), l.type), l)
            first[id(n)] = f
    for nodes in sys.nodes:
        for n in nodes:
            nt_ = n.type
            rows = []
            for l in n.links:
                rem, lt = l.rem, l.type
                rt = rem.type
                hop = LINK_LOC if lt == LINK_NET else lt
                if nt_ == PCI and rt == PCI:
                    hop = PATH_PXB
                if lt == LINK_PCI and (nt_ == CPU or rt == CPU):
                    hop = PATH_PHB
                rule = 0 if (lt == LINK_LOC and rt == GPU) else 1 if (lt == LINK_NVL and rt == DEV) else 2
                rows.append((rem, rt, l.bw, lt, hop, first[id(rem)].get((id(n), lt)), rule))
            n.set_links = rows


_ROUND = [0]     # set_paths' rounds, for the nodes' "queued in this round" stamps


def set_paths(base: Node, sys: System, nvb_disable: bool) -> None:
    """``ncclTopoSetPaths``: BFS from ``base`` storing at every node its path to ``base`` (the nodes'
    ``set_links``: :func:`path_links` of ``sys`` as it is now)."""
    bt, bi = base.type, base.idx
    _alloc_paths(base, sys, bt)
    bp = own_path(base, bt, bi)
    bp.list = []
    bp.count = 0
    bp.bw = LOC_BW
    bp.type = PATH_LOC
    max_len = 2 if bt == GPU else 1
    base_dev = base.parent if bt == GPU else base
    nodelist = [base]
    while nodelist:
        nxt: list = []
        _ROUND[0] += 1
        stamp = _ROUND[0]
        for node in nodelist:
            path = node.paths[bt][bi]
            pbw, ptype, pcount, plist = path.bw, path.type, path.count, path.list
            is_dev = node.type == DEV
            # a DEV other than the base's is left only to its GPU, or over NVLink as NVB's middle hop
            limited = is_dev and node is not base_dev
            nvb_ok = not nvb_disable and pcount <= max_len
            nvb_up = is_dev and ptype == PATH_NVL and pcount == max_len
            count = pcount + 1
            for rem, rt, lbw, lt, hop, rev, rule in node.set_links:
                if limited and rule and (rule == 2 or not nvb_ok):
                    continue
                rpaths = rem.paths[bt]
                if rpaths is None:
                    rpaths = _alloc_paths(rem, sys, bt)
                rp = rpaths[bi]
                bw = pbw if pbw < lbw else lbw
                nt = PATH_NVB if (nvb_up and hop == PATH_NVL) else hop
                if ptype > nt:
                    nt = ptype
                rt_ = rp.type
                if nt < rt_ or (nt == rt_ and (rp.bw < bw or (rp.bw == bw and rp.count > count))):
                    if rev is None:
                        if not rp.list:
                            raise NcclFailure("Failed to find reverse path")
                        rev = rp.list[0]
                    if rp is _NO_PATH:
                        rp = rpaths[bi] = PathL()
                    rp.list = [rev] + plist
                    rp.fast = None
                    rp.count = count
                    rp.bw = bw
                    rp.type = nt
                    if rem.mark != stamp:
                        rem.mark = stamp
                        nxt.append(rem)
        nodelist = nxt


def get_local(sys: System, t: int, index: int, rt: int) -> tuple:
    """``ncclTopoGetLocal``: indices of nodes of type ``rt`` with the widest, then best-typed path (a list
    the caller must not change: it is remembered until the node's paths change, see ``Node.lcache``)."""
    node = sys.nodes[t][index]
    cache = node.lcache
    if cache is None:
        cache = node.lcache = {}
    got = cache.get(rt)
    if got is None:
        got = cache[rt] = _get_local(node, len(sys.nodes[rt]), rt)
    return got


def _get_local(node: Node, count: int, rt: int) -> tuple:
    paths = node.paths[rt]
    if paths is None:
        return [], PATH_DIS
    min_type, max_bw = PATH_DIS, 0.0
    out: list = []
    path_type = PATH_DIS
    for i in range(count):
        p = paths[i]
        if p.bw > max_bw or (p.bw == max_bw and p.type < min_type):
            max_bw, min_type = p.bw, p.type
            path_type = min_type
            out = []
        if p.bw == max_bw and p.type == min_type:
            out.append(i)
    return out, path_type


def local_cpu(sys: System, g: int) -> int:
    """``ncclGetLocalCpu``."""
    cpus, _ = get_local(sys, GPU, g, CPU)
    if not cpus:
        raise NcclFailure(f"Error : could not find CPU close to GPU {g}")
    paths = sys.nodes[GPU][g].paths[CPU]
    best = cpus[0]
    for c in cpus[1:]:
        if paths[c].count < paths[best].count:
            best = c
    return best


def merge_type(a: int, b: int) -> int:
    hi, lo = max(a, b), min(a, b)
    return PATH_P2C if hi == PATH_PHB and lo == PATH_C2C else hi


def add_inter_step(sys: System, tx: int, ix: int, t1: int, i1: int, t2: int, i2: int) -> None:
    """``addInterStep``: route ``t1/i1 -> t2/i2`` through ``tx/ix`` (a CPU, or a GPU for PXN)."""
    mid = sys.nodes[tx][ix]
    src = sys.nodes[t1][i1]
    src.lcache = None
    sys.pver += 1
    a = src.paths[tx][ix]
    b = mid.paths[t2][i2]
    p = own_path(src, t2, i2)
    p.list = list(a.list) + list(b.list)
    p.fast = None
    p.count = len(p.list)
    p.type = PATH_PXN if tx == GPU else merge_type(a.type, b.type)
    p.bw = a.bw if a.bw < b.bw else b.bw


def _is_pow2(v: int) -> bool:
    return (v & (v - 1)) == 0


def _mirror_bits(v: int, pow2: int) -> int:
    m, b, mb = 0, 1, pow2 >> 1
    while b < pow2:
        if v & b:
            m |= mb
        b <<= 1
        mb >>= 1
    return m


class Topo:
    """A system with the NCCL parameters that steer path computation and NIC selection."""

    def __init__(self, sys: System, settings) -> None:
        self.sys = sys
        self.s = settings

    # ---- NIC selection (topo.cc)
    def _local_nets(self, g: int) -> tuple:
        """What ncclTopoGetLocalNet computes for GPU index ``g`` before the channel: (NET ids, first, per)."""
        sys = self.sys
        nets, _ = get_local(sys, GPU, g, NET)
        if not nets:
            raise NcclFailure(f"Could not find any local path from gpu {g} to net.")
        gpus, _ = get_local(sys, NET, nets[0], GPU)
        policy, num = self.s.netdevs_policy
        n_local = len(nets)
        if policy == "ALL":
            per = n_local
        elif policy == "MAX":
            per = min(num, n_local)
        else:
            per = -(-n_local // len(gpus))
        net = sys.nodes[GPU][g].dev % len(gpus)
        if _is_pow2(n_local):
            net = _mirror_bits(net, n_local)
        return [sys.nodes[NET][n].id for n in nets], net, per

    def local_net(self, rank: int, channel: int) -> int:
        """``ncclTopoGetLocalNet``: the id of the NET ``rank`` uses for ``channel``."""
        g = self.sys.rank_to_index(rank)
        if g < 0:
            raise NcclFailure(f"ncclTopoRankToIndex could not find rank {rank}")
        ids, net, per = self._local_nets(g)
        return ids[(net + channel % per) % len(ids)]

    def local_gpu(self, net_id: int) -> int:
        """``ncclTopoGetLocalGpu``: the first GPU (channel by channel) whose local NET is ``net_id``
        (remembered until a GPU-NET path changes: ``System.pver``)."""
        sys = self.sys
        key = (net_id, sys.pver, len(sys.nodes[GPU]), len(sys.nodes[NET]))
        memo = self.__dict__.setdefault("_lg", {})
        got = memo.get(key)
        if got is None:
            got = memo[key] = self._local_gpu(net_id)
        return got

    def _local_gpu(self, net_id: int) -> int:
        sys = self.sys
        ni = sys.id_to_index(NET, net_id)
        gpus, _ = get_local(sys, NET, ni, GPU)
        parts: list = [None] * len(gpus)   # ncclTopoGetLocalNet less the channel, computed when first needed
        for c in range(MAXCHANNELS):
            for k, g in enumerate(gpus):
                if parts[k] is None:
                    parts[k] = self._local_nets(g)
                ids, net, per = parts[k]
                if ids[(net + c % per) % len(ids)] == net_id:
                    return g
        return -1

    def intermediate_rank(self, rank: int, net_id: int) -> int:
        """``ncclTopoGetIntermediateRank``."""
        sys = self.sys
        n = sys.id_to_index(NET, net_id)
        g = sys.rank_to_index(rank)
        path = sys.nodes[GPU][g].paths[NET][n]
        if path.type != PATH_PXN:
            return rank
        i = 1
        while i < path.count and path.list[i].rem.type == NVS:
            i += 1
        node = path.list[i].rem
        if node.type == DEV:
            for l in node.links:
                if l.rem.type == GPU:
                    node = l.rem
                    break
        if node.type != GPU:
            raise NcclFailure(f"Could not find intermediate GPU between GPU rank {rank} and NIC {net_id:x}")
        return sys.dev_to_rank(node.id >> 56, node.dev)

    def check_gdr(self, rank: int, net_id: int, read: int) -> int:
        """``ncclTopoCheckGdr``: 0 disabled, 1 default, 2 PCI mapping."""
        sys, s = self.sys, self.s
        n = sys.id_to_index(NET, net_id)
        net = sys.nodes[NET][n]
        g = sys.rank_to_index(rank)
        gpu = sys.nodes[GPU][g]
        if net.gdr == 0 or gpu.gdr == 0:
            return 0
        if gpu.mlo != UNDEF and not s.net_gdr_mlopart:
            return 0
        if read:
            if s.net_gdr_read == 0:
                return 0
            if s.net_gdr_read < 0 and gpu.cc < 80:
                nvlink = len(sys.nodes[GPU]) == 1
                for i in range(len(sys.nodes[GPU])):
                    if i != g and gpu.paths[GPU][i].type == PATH_NVL:
                        nvlink = True
                        break
                if not nvlink:
                    return 0
        level = PATH_P2C if s.net_gdr_c2c else PATH_PXB
        if s.net_gdr_level is not None:
            level = s.net_gdr_level
        distance = gpu.paths[NET][n].type
        if distance == PATH_PXN:
            proxy = self.intermediate_rank(gpu.rank, net_id)
            g = sys.rank_to_index(proxy)
            gpu = sys.nodes[GPU][g]
            distance = gpu.paths[NET][n].type
        if distance > level:
            return 0
        c = local_cpu(sys, g)
        return 2 if gpu.paths[CPU][c].type == PATH_C2C and distance != PATH_P2C else 1

    # ---- P2P / SHM / NET between two GPUs (paths.cc, and the transports' canConnect)
    def check_p2p(self, rank1: int, rank2: int) -> tuple:
        """``ncclTopoCheckP2p`` -> (p2p, intermediate rank)."""
        sys = self.sys
        g1 = sys.rank_to_index(rank1)
        if g1 < 0:
            raise NcclFailure(f"ncclTopoRankToIndex could not find rank {rank1}")
        g2 = sys.rank_to_index(rank2)
        if g2 < 0:
            return 0, -1
        return self.check_p2p_index(g1, g2)

    def check_p2p_index(self, g1: int, g2: int) -> tuple:
        """:meth:`check_p2p` between the GPUs of indices ``g1`` and ``g2``."""
        sys, s = self.sys, self.s
        gpu1 = sys.nodes[GPU][g1]
        path = gpu1.paths[GPU][g2]
        inter_index, inter_rank = -1, -1
        if path.count == 4:
            node = path.list[1].rem
            if node.type == DEV:
                inter_rank = sys.dev_to_rank(node.id >> 56, node.dev)
                inter_index = sys.rank_to_index(inter_rank)
        level = self.p2p_level()
        p2p = 1 if path.type <= level else 0
        gpu2 = sys.nodes[GPU][g2]
        # NVML's P2P status is asked only for two GPUs of the rank's own host (MNNVL peers are not)
        if p2p and s.ignore_disabled_p2p != 2 and gpu1.parent is not gpu2.parent and s.p2p_blocked and \
                gpu1.id >> 56 == gpu2.id >> 56 == sys.system_id:
            devs = [gpu1.dev] + ([sys.nodes[GPU][inter_index].dev] if inter_index != -1 else []) + [gpu2.dev]
            for a, b in zip(devs, devs[1:]):
                if (a, b) in s.p2p_blocked:
                    if not s.ignore_disabled_p2p and path.type <= PATH_NVB:
                        raise NcclFailure(f"P2P is disabled between NVLINK connected GPUs {a} and {b}.")
                    p2p = 0
        return p2p, inter_rank

    def p2p_level(self) -> int:
        """The worst path type ncclTopoCheckP2p allows P2P over: NCCL_P2P_LEVEL, default PXB (SYS on
        AMD x86 with at most 2 devices)."""
        sys = self.sys
        level = PATH_PXB
        c0 = sys.nodes[CPU][0]
        if c0.arch == ARCH_X86 and c0.vendor == VENDOR_AMD and len(sys.nodes[DEV]) <= 2:
            level = PATH_SYS
        if self.s.p2p_level is not None:
            level = self.s.p2p_level
        return level

    def check_net(self, rank1: int, rank2: int) -> int:
        """``ncclTopoCheckNet``: 1 when both GPUs reach a NIC (<= PXB) faster than each other."""
        sys = self.sys
        if self.s.net_disable_intra == 1:
            return 0
        g1, g2 = sys.rank_to_index(rank1), sys.rank_to_index(rank2)
        if g1 < 0 or g2 < 0:
            return 0
        return self.check_net_index(g1, g2)

    def check_net_index(self, g1: int, g2: int) -> int:
        """:meth:`check_net` between the GPUs of indices ``g1`` and ``g2``."""
        sys = self.sys
        gpu1, gpu2 = sys.nodes[GPU][g1], sys.nodes[GPU][g2]
        speed = gpu1.paths[GPU][g2].bw
        return 1 if (self._net_speed(gpu1) > speed and self._net_speed(gpu2) > speed) else 0

    def _net_speed(self, gpu: Node) -> float:
        """The widest path of ``gpu`` to a NET through PXB or better (remembered with its paths)."""
        cache = gpu.lcache
        if cache is None:
            cache = gpu.lcache = {}
        got = cache.get("net_speed")
        if got is None:
            got = 0.0
            paths = gpu.paths[NET]
            for n in range(len(self.sys.nodes[NET])):
                p = paths[n]
                if p.type <= PATH_PXB and p.bw > got:
                    got = p.bw
            cache["net_speed"] = got
        return got

    def p2p_can_connect(self, r1: int, r2: int) -> int:
        p2p, inter = self.check_p2p(r1, r2)
        if p2p == 0 or inter != -1:
            return p2p
        return 0 if self.check_net(r1, r2) else 1

    def shm_can_connect(self, r1: int, r2: int) -> int:
        """shmCanConnect: not disabled, not faster through the NICs, and both ranks on one host."""
        if self.s.shm_disable:
            return 0
        if self.check_net(r1, r2):
            return 0
        sys = self.sys
        g1, g2 = sys.rank_to_index(r1), sys.rank_to_index(r2)
        if g1 >= 0 and g2 >= 0 and sys.nodes[GPU][g1].id >> 56 != sys.nodes[GPU][g2].id >> 56:
            return 0
        return 1

    # ---- ncclTopoComputePaths
    def compute_paths(self) -> None:
        sys, s = self.sys, self.s
        for t in range(10):
            for n in sys.nodes[t]:
                n.paths = [None] * 10
                n.lcache = None
        sys.pver += 1
        path_links(sys)
        for t in (CPU, DEV, GPU, NET, GIN, RMA, NVS):
            for n in sys.nodes[t]:
                set_paths(n, sys, s.nvb_disable)
        gpus = sys.nodes[GPU]
        # NCCL passes ranks, which name the GPUs back by index where they are distinct
        by_index = len({x.rank for x in gpus}) == len(gpus)
        for g in range(len(gpus)):
            seen = []
            for p in range(len(gpus)):
                p2p, inter = self.check_p2p_index(p, g) if by_index else self.check_p2p(gpus[p].rank, gpus[g].rank)
                seen.append((p2p, inter))
                if p2p == 0:
                    add_inter_step(sys, CPU, local_cpu(sys, g), GPU, p, GPU, g)
            for p in range(len(gpus)):
                if p == g:
                    continue
                # p2pCanConnect asks ncclTopoCheckP2p again: the same answer where the loop above left
                # the path alone (P2P possible), asked again where it routed the path through the CPU
                p2p, inter = seen[p]
                if p2p == 0 or not by_index:
                    ok = self.p2p_can_connect(gpus[p].rank, gpus[g].rank)
                elif inter != -1:
                    ok = p2p
                else:
                    ok = 0 if (self.s.net_disable_intra != 1 and self.check_net_index(p, g)) else 1
                if ok == 0:
                    if self.shm_can_connect(gpus[p].rank, gpus[g].rank) == 0:
                        own_path(gpus[p], GPU, g).type = PATH_NET
                        gpus[p].lcache = None
                        sys.pver += 1
        for g in range(len(gpus)):
            gn = gpus[g]
            c = local_cpu(sys, g)
            nets, _ = get_local(sys, GPU, g, NET)
            for n in nets:
                nn = sys.nodes[NET][n]
                if merge_type(gn.paths[CPU][c].type, nn.paths[CPU][c].type) == PATH_P2C:
                    own_path(gn, NET, n).type = min(PATH_P2C, gn.paths[NET][n].type)
                    own_path(nn, GPU, g).type = min(PATH_P2C, nn.paths[GPU][g].type)
                    gn.lcache = nn.lcache = None
                    sys.pver += 1
        for n, net in enumerate(sys.nodes[NET]):
            for g in range(len(gpus)):
                gpu = gpus[g]
                if not s.pxn_disable:
                    lg = self.local_gpu(net.id)
                    if lg != g and lg != -1:
                        peer = gpus[lg]
                        gdr = self.check_gdr(peer.rank, net.id, 1)
                        pxn_type = PATH_P2C if s.pxn_c2c else PATH_PXB
                        if peer.paths[NET][n].type <= pxn_type and gdr != 0 and \
                                peer.paths[GPU][g].type <= PATH_NVL and peer.id >> 56 == gpu.id >> 56 and \
                                (peer.paths[NET][n].bw > gpu.paths[NET][n].bw or gpu.paths[NET][n].type > PATH_PXN):
                            add_inter_step(sys, GPU, lg, GPU, g, NET, n)
                if gpu.paths[NET][n].type < PATH_PHB:
                    if self.check_gdr(gpu.rank, net.id, 0) == 0:
                        c = local_cpu(sys, g)
                        add_inter_step(sys, CPU, c, NET, n, GPU, g)
                        add_inter_step(sys, CPU, c, GPU, g, NET, n)
        for net in sys.nodes[NET]:
            net.local_gpu = self.local_gpu(net.id)

    def domains(self) -> list:
        """The domain of each GPU as ncclTopoTrimSystem numbers them (GPUs joined by paths better than
        PATH_NET share one)."""
        gpus = self.sys.nodes[GPU]
        dom = list(range(len(gpus)))
        for g in range(len(gpus)):
            for p in range(g):
                if gpus[g].paths[GPU][p].type < PATH_NET:
                    dom[g] = min(dom[g], dom[p])
        return dom

    def trim(self, rank: int, n_ranks: int) -> int:
        """``ncclTopoTrimSystem``: keep only the GPUs of ``rank``'s domain (GPUs joined by paths better
        than PATH_NET); ``inter`` when the communicator has ranks outside it.  Returns how many GPUs it
        removed."""
        sys = self.sys
        gpus = sys.nodes[GPU]
        dom = self.domains()
        ids = [g.id for g in gpus]
        mine = 0
        for g in range(len(gpus)):
            if gpus[g].rank == rank:
                mine = dom[g]
        removed = 0
        for i in range(len(ids)):
            if dom[i] == mine:
                continue
            sys.remove(GPU, sys.id_to_index(GPU, ids[i]))
            removed += 1
        sys.inter = 0 if len(sys.nodes[GPU]) == n_ranks else 1
        return removed

    def search_init(self) -> None:
        """``ncclTopoSearchInit``: maxBw (widest DEV->DEV or DEV->NET path) and totalBw."""
        sys = self.sys
        sys.max_bw = 0.0
        sys.total_bw = 0.0
        if sys.inter == 0 and len(sys.nodes[GPU]) == 1:
            sys.max_bw = sys.total_bw = LOC_BW
            return
        t = NET if sys.inter else DEV
        for d in sys.nodes[DEV]:
            paths = d.paths[t] or []
            m = 0.0
            for p in paths:
                if p.count == 0:
                    continue
                m = max(m, p.bw)
            sys.max_bw = max(sys.max_bw, m)
            nvl = 0.0
            pci = 0.0
            for l in d.links:
                if l.type == LINK_NVL:
                    nvl = f32(nvl + l.bw)
                if l.type == LINK_PCI:
                    pci = l.bw
            sys.total_bw = max(sys.total_bw, max(pci, nvl))

    # ---- queries
    def gpu_max_path(self, t: int) -> int:
        """ncclTopoGetGpuMaxPath: the worst path type from any GPU to any node of type ``t``."""
        return self._gpu_path_extreme(t, max, PATH_LOC)

    def gpu_min_path(self, t: int) -> int:
        """ncclTopoGetGpuMinPath: the best path type from any GPU to any node of type ``t``."""
        return self._gpu_path_extreme(t, min, PATH_SYS)

    def _gpu_path_extreme(self, t: int, pick, start: int) -> int:
        """``pick`` (min or max) of ``start`` and the types of every GPU's paths to the nodes of type ``t``."""
        m = start
        n = len(self.sys.nodes[t])
        for i, g in enumerate(self.sys.nodes[GPU]):
            paths = g.paths[t]
            if paths is None:
                continue
            types = [paths[j].type for j in range(n) if not (t == GPU and i == j)]
            if types:
                m = pick(m, pick(types))
        return m

    def comp_cap(self) -> tuple:
        devs = self.sys.nodes[DEV]
        if not devs:
            raise NcclFailure("no DEV node")
        ccs = [d.cc for d in devs]
        return min(ccs), max(ccs)

    def channel_nets(self, rank: int):
        """The NET indices ``rank`` uses channel by channel (ncclTopoGetLocalNet) until the first one
        comes round again."""
        first = None
        for c in range(MAXCHANNELS):
            nid = self.local_net(rank, c)
            if c == 0:
                first = nid
            elif nid == first:
                return
            yield self.sys.id_to_index(NET, nid)

    def min_net_bw(self, rank: int) -> float:
        """``ncclTopoGetMinNetBw``."""
        sys = self.sys
        g = sys.rank_to_index(rank)
        m = None
        for n in self.channel_nets(rank):
            bw = sys.nodes[GPU][g].paths[NET][n].bw
            m = bw if m is None else min(m, bw)
        return m if m is not None else 0.0

    def local_net_count_by_bw(self, g: int) -> tuple:
        sys = self.sys
        c = local_cpu(sys, g)
        gpu_bw = sys.nodes[GPU][g].paths[CPU][c].bw
        rank = sys.nodes[GPU][g].rank
        count, total = 0, 0.0
        for n in self.channel_nets(rank):
            total = f32(total + sys.nodes[GPU][g].paths[NET][n].bw)
            count += 1
            if total >= gpu_bw:
                break
        return count, total

    def all_nvlink(self) -> int:
        return 0 if self.gpu_max_path(GPU) >= PATH_PIX else 1

    def split_nvlink(self) -> int:
        """``ncclTopoSplitNvLink``: exactly two NVLink domains."""
        gpus = self.sys.nodes[GPU]
        dom = list(range(len(gpus)))
        for g in range(len(gpus)):
            d = dom[g]
            for p in range(g + 1, len(gpus)):
                if gpus[g].paths[GPU][p].type == PATH_NVL:
                    dom[p] = d
        cnt = [0] * len(gpus)
        for g in range(len(gpus)):
            cnt[dom[g]] += 1
        return 1 if sum(1 for c in cnt if c > 1) == 2 else 0


def cpu_type(sys: System) -> tuple:
    c = sys.nodes[CPU][0]
    return c.arch, c.vendor, c.model


__all__ = ["System", "Topo", "Node", "Link", "system_from_xml", "f32", "PATH_NAMES", "c_int"]
