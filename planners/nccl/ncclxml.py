"""NCCL's topology XML as NCCL itself processes it for a communicator (src/graph/xml.cc, xml.h and
the XML half of ``ncclTopoGetSystem`` in src/graph/topo.cc, NCCL 2.30.7), reproduced step by step:

1. every local rank reads the XML (``NCCL_TOPO_FILE``) and fills in its own GPU (``ncclTopoFillGpu``:
   ``dev``/``sm``/``rank``/``gdr`` on the ``<gpu>``, ``link_speed``/``link_width`` and the CPU's
   identity where the file has none);
2. the network plugin's devices are added (``ncclTopoProcessNet``: ``ncclTopoPopulateNics`` sets
   ``dev``/``speed``/``port``/``guid``/``gdr``... on each ``<net>``; NIC fusion (``ncclTopoMakeVNics``,
   ``NCCL_NET_MERGE_LEVEL``, default ``PORT``) merges the ports of one NIC into a virtual device
   ``a+b`` with the summed speed, as the IB plugin's ``makeVDevice`` does);
3. branches without a kept GPU or NIC are trimmed (``ncclTopoTrimXml``) and the ranks' XMLs are
   fused in rank order (``ncclTopoFuseXml``): the order of the fused tree -- which NCCL's GPU and
   NIC indices, and so its search order, follow -- is rank 0's tree, then what each further rank adds.

The host layer NCCL talks to (NVML, sysfs, the net plugin) is :class:`Machine`: it answers from the
XML itself and, where the XML is silent, from the values a caller pins (see
:func:`gpucomm.planners.nccl.system.pinned_xml`, which writes every such value into the XML, so that
NCCL itself would read the same).  Float and integer parsing follow C's ``strtol``/``strtof``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import AbstractSet, Iterable, Optional

from gpucomm.probes.errors import InputError, NothingToDo, PlanInfeasible

from gpucomm.planners.nccl.names import (NCCL_NET_MAX_DEVS_PER_NIC, NIC_PATH_LEVELS, PATH_DIS, PATH_LOC, PATH_PHB,
                                         PATH_PIX, PATH_PORT, PATH_PXB, PATH_SYS, kv)

NODE_NONE, NODE_OPEN = 0, 1
MAX_ATTR_COUNT = 16           # xml.h: extra attributes are ignored by NCCL's parser
PCI_BRIDGE_CLASS = "0x060400"
NVSWITCH_CLASS = "0x068000"


# --------------------------------------------------------------------------------------------
# C number parsing
_INT_RE = re.compile(r"\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")


def strtol(s: Optional[str], base: int = 0) -> int:
    """C ``strtol(s, NULL, base)`` (base 0: 0x.. hex, 0.. octal, else decimal; 0 when nothing parses)."""
    if s is None:
        return 0
    if base == 16:
        m = re.match(r"\s*([+-]?)(?:0[xX])?([0-9a-fA-F]+)", s)
        return (-1 if m and m.group(1) == "-" else 1) * int(m.group(2), 16) if m else 0
    m = _INT_RE.match(s)
    if not m:
        return 0
    sign = -1 if m.group(1) == "-" else 1
    t = m.group(2)
    if t[:2] in ("0x", "0X"):
        return sign * int(t, 16)
    if t.startswith("0"):
        return sign * int(t, 8) if len(t) > 1 else 0
    return sign * int(t)


def c_int(v: int) -> int:
    """A C ``int`` (strtol's long assigned to int: two's complement wrap)."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


_FLOAT_RE = re.compile(r"\s*[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)")


def strtof(s: Optional[str]) -> float:
    """C ``strtof`` on the leading number (0.0 when none)."""
    if not s:
        return 0.0
    m = _FLOAT_RE.match(s)
    return float(m.group(0)) if m else 0.0


def bus_to_int(bus: str) -> int:
    """``busIdToInt64`` (misc/utils.cc): the hex digits of a bus id up to the first other character."""
    out = []
    for c in bus:
        if c in ".:":
            continue
        if c in "0123456789abcdefABCDEF":
            out.append(c)
            if len(out) == 16:
                break
        else:
            break
    return int("".join(out), 16) if out else 0


def int_to_bus(v: int) -> str:
    """``int64ToBusId``: ``%04lx:%02lx:%02lx.%01lx``."""
    return f"{v >> 20:04x}:{(v & 0xff000) >> 12:02x}:{(v & 0xff0) >> 4:02x}.{v & 0xf:01x}"


# --------------------------------------------------------------------------------------------
class XNode:
    """``struct ncclXmlNode``: name, attributes in order (at most 16 are kept), children, parent."""

    __slots__ = ("name", "attrs", "subs", "parent", "type")

    def __init__(self, name: str, parent: Optional["XNode"] = None, type_: int = NODE_NONE):
        self.name = name
        self.attrs: list = []
        self.subs: list = []
        self.parent = parent
        self.type = type_

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"<{self.name} {' '.join(f'{k}={v!r}' for k, v in self.attrs)}>"

    def index(self, key: str) -> int:
        for i, (k, _v) in enumerate(self.attrs):
            if k == key:
                return i
        return -1

    def get(self, key: str) -> Optional[str]:
        for k, v in self.attrs:
            if k == key:
                return v
        return None

    def get_str(self, key: str) -> str:
        v = self.get(key)
        if v is None:
            raise NcclFailure(f"Attribute {key} of node {self.name} not found")
        return v

    def get_int(self, key: str) -> int:
        return c_int(strtol(self.get_str(key)))

    def get_int_default(self, key: str, default: int) -> int:
        v = self.get(key)
        return c_int(strtol(v)) if v is not None else default

    def set(self, key: str, value: str) -> None:
        """``xmlSetAttr``."""
        i = self.index(key)
        value = str(value)[:255]
        if i == -1:
            self.attrs.append([key, value])
        else:
            self.attrs[i][1] = value

    def set_int(self, key: str, value: int) -> None:
        self.set(key, "%d" % value)

    def set_long(self, key: str, value: int) -> None:
        """``xmlSetAttrLong``: ``%#lx`` of the uint64 (``0`` for zero)."""
        v = value & 0xFFFFFFFFFFFFFFFF
        self.set(key, "0" if v == 0 else "0x%x" % v)

    def set_if_unset(self, key: str, value: str) -> None:
        if self.index(key) == -1:
            self.attrs.append([key, str(value)])

    def init_int(self, key: str, value: int) -> None:
        """``xmlInitAttrInt``: only when absent."""
        if self.index(key) == -1:
            self.attrs.append([key, "%d" % value])

    def init_uint64(self, key: str, value: int) -> None:
        if self.index(key) == -1:
            self.attrs.append([key, "0x%x" % (value & 0xFFFFFFFFFFFFFFFF)])

    def unset(self, key: str) -> None:
        i = self.index(key)
        if i != -1:
            del self.attrs[i]

    def sub(self, name: str) -> Optional["XNode"]:
        for s in self.subs:
            if s.name == name:
                return s
        return None

    def sub_kv(self, name: str, key: str, value: str) -> Optional["XNode"]:
        for s in self.subs:
            if s.name == name and s.get(key) == value:
                return s
        return None


class NcclFailure(Exception):
    """NCCL itself would stop here (an ``NCCLCHECK`` failing): the message is NCCL's WARN text."""


class NcclFailed(PlanInfeasible):
    """NCCL itself would fail to initialise on this topology (its WARN message): what the model's
    entry points raise for an :class:`NcclFailure` (exit 4)."""


class Xml:
    """``struct ncclXml``: every node in creation order (what xmlFindTag scans) plus the tree."""

    def __init__(self) -> None:
        self.nodes: list = []

    def add_node(self, parent: Optional[XNode], name: str) -> XNode:
        """``xmlAddNode``: appended to the node array and to the parent's children."""
        n = XNode(name, parent)
        self.nodes.append(n)
        if parent is not None:
            parent.subs.append(n)
        return n

    def find_tag(self, name: str) -> Optional[XNode]:
        for n in self.nodes:
            if n.name == name:
                return n
        return None

    def find_tag_kv(self, name: str, key: str, value: str) -> Optional[XNode]:
        for n in self.nodes:
            if n.name == name and n.get(key) == value:
                return n
        return None

    def top(self) -> Optional[XNode]:
        return self.find_tag("system")

    def copy(self, drop: AbstractSet = frozenset()) -> "Xml":
        """A deep copy keeping the creation order (``memcpy`` of the XML in ncclTopoGetSystem), without
        the nodes whose ``id`` is in ``drop`` (whole subtrees: see :class:`RankCopies`)."""
        out = Xml()
        clone = {}
        for n in self.nodes:
            if id(n) in drop:
                continue
            c = XNode(n.name, None, n.type)
            c.attrs = [[k, v] for k, v in n.attrs]
            clone[id(n)] = c
            out.nodes.append(c)
        for n in self.nodes:
            c = clone.get(id(n))
            if c is None:
                continue
            c.parent = clone.get(id(n.parent)) if n.parent is not None else None
            c.subs = [clone[id(s)] for s in n.subs if id(s) not in drop]
        return out

    def add_tree(self, parent: Optional[XNode], src: XNode) -> XNode:
        """``xmlAddTree``."""
        d = XNode(src.name, parent, src.type)
        d.attrs = [[k, v] for k, v in src.attrs]
        self.nodes.append(d)
        if parent is not None:
            parent.subs.append(d)
        for s in src.subs:
            self.add_tree(d, s)
        return d


_TOKEN = re.compile(r"<!--.*?-->|<(/?)([A-Za-z_][\w.-]*)((?:\s+[^\s=/>]+\s*=\s*(?:\"[^\"]*\"|'[^']*'))*)\s*(/?)>|(\S)",
                    re.S)
_ATTR = re.compile(r"([^\s=/>]+)\s*=\s*(?:\"([^\"]*)\"|'([^']*)')")


TOPOLOGY_HANDLERS = {None: {"system"}, "system": {"cpu"}, "cpu": {"pci", "nic"},
                     "pci": {"pci", "gpu", "nic", "pcilink"}, "gpu": {"nvlink", "c2c"}, "nic": {"net"}, "net": set(),
                     "nvlink": set(), "c2c": set(), "pcilink": set()}
# ncclTopoGetXmlGraphFromFile: ncclTopoXmlGraphLoadGraphs / LoadGraph / LoadChannel / LoadNet, LoadGpu
GRAPH_HANDLERS = {None: {"graphs"}, "graphs": {"graph"}, "graph": {"channel"}, "channel": {"net", "gpu"},
                  "net": set(), "gpu": set()}


def parse(text: str, handlers: Optional[dict] = None, root: str = "system") -> Xml:
    """An NCCL topology XML (the grammar NCCL's parser accepts for ``<system>``; with
    ``GRAPH_HANDLERS`` and root ``graphs``, an NCCL graph file) -> :class:`Xml`.
    Elements NCCL's loaders do not know (``ncclTopoXmlLoad*`` handlers) are skipped with their
    children, as NCCL does.  Raises :class:`InputError` for text that is not XML."""
    handlers = TOPOLOGY_HANDLERS if handlers is None else handlers
    xml = Xml()
    stack: list = []          # (node or None when skipped, name)
    for m in _TOKEN.finditer(text):
        if m.group(0).startswith("<!--"):
            continue
        if m.group(5) is not None:
            raise InputError(f"not NCCL XML near {text[max(0, m.start() - 20):m.start() + 20]!r}")
        closing, name, attrs, single = m.group(1), m.group(2), m.group(3), m.group(4)
        if closing:
            if not stack or stack[-1][1] != name:
                raise InputError(f"XML mismatch: </{name}>")
            stack.pop()
            continue
        parent = stack[-1][0] if stack else None
        parent_name = parent.name if parent is not None else None
        skipped = bool(stack) and stack[-1][0] is None
        known = not skipped and name in handlers.get(parent_name, set())
        node = None
        if known:
            node = XNode(name, parent, NODE_OPEN)
            for am in _ATTR.finditer(attrs or ""):
                if len(node.attrs) < MAX_ATTR_COUNT:
                    node.attrs.append([am.group(1), am.group(2) if am.group(2) is not None else am.group(3)])
            xml.nodes.append(node)
            if parent is not None:
                parent.subs.append(node)
        if not single:
            stack.append((node, name))
    if stack:
        raise InputError(f"XML: unterminated <{stack[-1][1]}>")
    if xml.find_tag(root) is None:
        raise InputError(f"no <{root}> element",
                         expected="an NCCL topology XML" if root == "system" else "an NCCL graph file (<graphs>)")
    return xml


def dumps(xml: Xml, root: str = "system") -> str:
    """NCCL's ``ncclTopoDumpXmlRec`` layout (2-space indent, one element per line)."""
    lines: list = []

    def rec(n: XNode, depth: int) -> None:
        attrs = "".join(f' {k}="{v}"' for k, v in n.attrs)
        if n.subs:
            lines.append(f"{'  ' * depth}<{n.name}{attrs}>")
            for s in n.subs:
                rec(s, depth + 1)
            lines.append(f"{'  ' * depth}</{n.name}>")
        else:
            lines.append(f"{'  ' * depth}<{n.name}{attrs}/>")

    top = xml.find_tag(root)
    if top is not None:
        rec(top, 0)
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# The machine NCCL runs on: NVML's GPUs and the network plugin's devices
@dataclass
class SimGpu:
    bus: str
    dev: int
    sm: int


@dataclass
class SimNic:
    name: str
    bus: Optional[str]               # PCI path (bus id) or None (not a PCI device)
    guid: int
    speed: int                       # Mb/s
    port: int
    latency: float = 0.0
    max_comms: int = 65536
    gdr: bool = True
    devs: list = field(default_factory=list)   # a virtual (fused) device: its physical devices


class Machine:
    """NVML and the network plugin as NCCL sees them on this host: the GPUs (NVML index = ``<gpu
    dev>``, else PCI order; compute capability = ``<gpu sm>``, else ``default_sm``) and one network
    device per ``<net>`` (in ``dev`` order), then per bare NIC ``<pci>`` (class 0x02, no ``<nic>``),
    with a fused virtual device per group ``makeVDevice`` builds.  Values the XML lacks come from
    ``nic_speed_mbps``/``gdr``; a NIC without a GUID is its own ASIC (one per PCI function)."""

    def __init__(self, xml: Xml, default_sm: int = 80, nic_speed_mbps: int = 100000, gdr: bool = True,
                 merge: bool = True):
        self.gpus: list = []
        self.nics: list = []
        self.merge = merge
        known = []
        for n in xml.nodes:
            if n.name != "pci":
                continue
            cls, bus = n.get("class"), n.get("busid")
            if not cls or not bus or not cls.startswith("0x03"):
                continue
            g = n.sub("gpu")
            dev = strtol(g.get("dev")) if g is not None and g.get("dev") is not None else -1
            sm = strtol(g.get("sm")) if g is not None and g.get("sm") is not None else -1
            self.gpus.append(SimGpu(bus, dev, sm))
            if sm > 0:
                known.append(sm)
        fallback = min(known) if known else default_sm
        for g in self.gpus:
            if g.sm <= 0:
                g.sm = fallback
        used = {g.dev for g in self.gpus if g.dev >= 0}
        nxt = 0
        for g in sorted((g for g in self.gpus if g.dev < 0), key=lambda g: g.bus):
            while nxt in used:
                nxt += 1
            g.dev = nxt
            used.add(nxt)
        self.gpus.sort(key=lambda g: g.dev)
        nets = []
        for order, n in enumerate(x for x in xml.nodes if x.name == "net"):
            name = n.get("name")
            if not name:
                continue
            pci = n.parent.parent if n.parent is not None else None
            bus = pci.get("busid") if pci is not None and pci.name == "pci" else None
            v = n.get("guid")
            guid = strtol(v, 0) & 0xFFFFFFFFFFFFFFFF if v is not None else _own_asic(bus, name)
            v = n.get("speed")
            speed = c_int(strtol(v)) if v is not None else nic_speed_mbps
            port = c_int(strtol(n.get("port"))) if n.get("port") is not None else 1
            lat = strtof(n.get("latency")) if n.get("latency") is not None else 0.0
            maxc = c_int(strtol(n.get("maxconn"))) if n.get("maxconn") is not None else 65536
            g = c_int(strtol(n.get("gdr"))) if n.get("gdr") is not None else (1 if gdr else 0)
            dev = c_int(strtol(n.get("dev"))) if n.get("dev") is not None else 1000 + order
            nets.append((dev * 10000 + order, SimNic(name, bus, guid, speed, port, lat, maxc, bool(g))))
        nets.sort(key=lambda t: t[0])
        self.nics = [x[1] for x in nets]
        bare = 0
        for n in xml.nodes:
            cls, bus = n.get("class"), n.get("busid")
            if n.name != "pci" or not cls or not bus or not cls.startswith("0x02") or n.sub("nic") is not None:
                continue
            self.nics.append(SimNic(f"nic{bare}@{bus}", bus, _own_asic(bus, bus), nic_speed_mbps, 1, gdr=gdr))
            bare += 1
        self.n_phys = len(self.nics)
        self.n_virt: Optional[int] = None   # NCCL_UNDEF_DEV_COUNT until fusion ran once

    def gpu_by_bus(self, bus: str) -> Optional[SimGpu]:
        for g in self.gpus:
            if g.bus.lower() == bus.lower():
                return g
        return None

    def props(self, d: int) -> SimNic:
        """getProperties: a virtual device answers with its first device's PCI path, GUID, port..."""
        n = self.nics[d]
        if n.devs:
            f = self.nics[n.devs[0]]
            return SimNic(n.name, f.bus, f.guid, n.speed, f.port, f.latency, f.max_comms, f.gdr, list(n.devs))
        return n

    def make_vdevice(self, devs: list) -> int:
        """The IB plugin's makeVDevice: name ``a+b``, speed = sum, the rest from the first device."""
        for p in devs:
            if p < 0 or p >= self.n_phys:
                raise NcclFailure("makeVDevice: bad device")
        first = self.nics[devs[0]]
        v = SimNic("+".join(self.nics[p].name for p in devs), first.bus, first.guid,
                   sum(self.nics[p].speed for p in devs), first.port, first.latency, first.max_comms, first.gdr,
                   list(devs))
        self.nics.append(v)
        return len(self.nics) - 1


HOST_HASH_BASE = 0x6e63636c5f686f73     # any value: only which CPUs share a hash matters


def host_hash(host: int) -> int:
    """``getHostHash()`` of host ``host`` (0 = the first host of the communicator): the ``host_hash``
    NCCL writes on every ``<cpu>``; ncclTopoGetSystemFromXml numbers the hosts of a fused XML by it."""
    return (HOST_HASH_BASE + host * 0x100000001) & 0xFFFFFFFFFFFFFFFF


def _own_asic(bus: Optional[str], name: str) -> int:
    """A GUID for a NIC that has none: its own ASIC per PCI function (two ports of one function share it)."""
    key = bus or name
    h = 0xCBF29CE484222325
    for c in key.encode():
        h = ((h ^ c) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h | 1


# --------------------------------------------------------------------------------------------
# NCCL's XML operations for one rank
class RankXml:
    """ncclTopoGetSystem's XML work for one local rank: :meth:`fill_gpu`, :meth:`process_net`, :meth:`trim`."""

    def __init__(self, xml: Xml, machine: Machine, cpu_fill: dict, merge_level: int = PATH_PORT,
                 force_merge: Optional[str] = None, host: int = 0):
        self.xml = xml
        self.m = machine
        self.cpu_fill = cpu_fill           # attributes NCCL's GetXmlFromCpu would read from the host
        self.merge_level = merge_level
        self.force_merge = force_merge
        self.host_hash = host_hash(host)
        # ncclTopoGetSystem: every <cpu> of the file gets this host's hash (not kept from the file)
        for n in xml.nodes:
            if n.name == "cpu":
                n.set_long("host_hash", self.host_hash)

    def _pci_from_sys(self, bus: str, cls: str) -> XNode:
        """The <pci busid=bus> node (made detached when the XML lacks it), its class set if unset,
        filled from "sysfs" (ncclTopoFillGpu / ncclTopoFillNet before ncclTopoGetXmlFromSys)."""
        node = self.xml.find_tag_kv("pci", "busid", bus)
        if node is None:
            node = self.xml.add_node(None, "pci")
            node.set("busid", bus)
        node.set_if_unset("class", cls)
        self._from_sys(node)
        return node

    # ---- GPU (xml.cc ncclTopoFillGpu, ncclTopoGetXmlFromSys, ncclTopoGetXmlFromGpu)
    def fill_gpu(self, bus: str, rank: int) -> None:
        node = self._pci_from_sys(bus, "0x03")
        gpu = self._from_gpu(node)
        if gpu is not None:
            gpu.set_int("keep", 1)
            gpu.set_int("rank", rank)
            gpu.init_int("gdr", 1)
            gpu.set_int("mlopart", -1)

    def _from_sys(self, node: XNode) -> None:
        """``ncclTopoGetXmlFromSys`` with no sysfs: NVML answers for GPUs (link speed unknown ->
        "16.0 GT/s", width 16), other devices get empty link attributes; then up to the CPU."""
        cls = node.get("class")
        nvml = (cls is None or cls == "" or cls.startswith("0x03")) and \
            self.m.gpu_by_bus(node.get("busid") or "") is not None
        if node.index("link_speed") == -1:
            node.set("link_speed", "16.0 GT/s" if nvml else "")
        if node.index("link_width") == -1:
            if nvml:
                node.set_int("link_width", 16)
            else:
                node.set("link_width", "")
        parent = node.parent
        if parent is None:
            parent = self.xml.find_tag_kv("cpu", "numaid", "-1")
            if parent is None:
                top = self.xml.top()
                parent = self.xml.add_node(top, "cpu")
                parent.set_long("host_hash", self.host_hash)
                parent.set("numaid", "-1")
                self._from_cpu(parent)
            node.parent = parent
            bus = node.get("busid") or ""
            at = len(parent.subs)
            for i, s in enumerate(parent.subs):
                b = s.get("busid")
                if b is not None and bus < b:
                    at = i
                    break
            parent.subs.insert(at, node)
        if parent.name == "pci":
            self._from_sys(parent)
        elif parent.name == "cpu":
            self._from_cpu(parent)

    def _from_cpu(self, cpu: XNode) -> None:
        """``ncclTopoGetXmlFromCpu``: affinity, arch, vendor, family and model when missing."""
        if cpu.index("affinity") == -1:
            cpu.set("affinity", self.cpu_fill.get("affinity", ""))
        if cpu.index("arch") == -1:
            cpu.set("arch", self.cpu_fill.get("arch", "x86_64"))
        if cpu.index("vendor") == -1 and self.cpu_fill.get("vendor"):
            cpu.set("vendor", self.cpu_fill["vendor"])
        if cpu.index("familyid") == -1 and self.cpu_fill.get("familyid") is not None:
            cpu.set_int("familyid", self.cpu_fill["familyid"])
            cpu.set_int("modelid", self.cpu_fill.get("modelid", 0))

    def _from_gpu(self, pci: XNode) -> Optional[XNode]:
        gpu = pci.sub("gpu")
        if gpu is None:
            gpu = self.xml.add_node(pci, "gpu")
        sim = self.m.gpu_by_bus(pci.get("busid") or "")
        if gpu.index("dev") == -1:
            if sim is None:
                raise NcclFailure(f"no NVML device for {pci.get('busid')}")
            gpu.set_int("dev", sim.dev)
        if gpu.get_int("dev") == -1:
            return None
        if gpu.index("sm") == -1:
            gpu.set_int("sm", sim.sm if sim is not None else 80)
        for s in gpu.subs:
            if s.name == "nvlink" and s.index("tclass") == -1:
                s.set("tclass", NVSWITCH_CLASS)   # target class not readable: NVSwitch assumed
        return gpu

    # ---- network (topo.cc ncclTopoProcessNet and what it calls)
    def process_net(self) -> None:
        m = self.m
        self._populate(0, m.n_phys, virtual=False)
        if m.merge:
            if m.n_virt is None:
                self._make_vnics(m.n_phys)
                m.n_virt = len(m.nics) - m.n_phys
            if m.n_virt > 0:
                self._update_vnics()
                self._populate(m.n_phys, m.n_phys + m.n_virt, virtual=True)

    def _populate(self, start: int, end: int, virtual: bool) -> None:
        for d in range(start, end):
            p = self.m.props(d)
            parent = None
            if virtual and self.xml.find_tag_kv("net", "name", p.name) is None:
                parent = self._vnic_parent(p.devs)
            net = self._fill_net(p.bus, p.name, parent)
            net.set_int("keep", 1)
            net.set_int("dev", d)
            net.init_int("latency", int(p.latency))
            net.init_int("speed", p.speed)
            net.init_int("port", p.port)
            net.init_uint64("guid", p.guid)
            net.init_int("maxconn", p.max_comms)
            net.init_int("gdr", 1 if p.gdr else 0)
            cur = net.get("net")
            is_net = strtol(cur) if cur is not None else 0
            net.set_int("net", 1 if (1 or is_net) else 0)

    def _fill_net(self, bus: Optional[str], name: str, force_parent: Optional[XNode]) -> XNode:
        """``ncclTopoFillNet``."""
        xml = self.xml
        net = xml.find_tag_kv("net", "name", name)
        if net is not None:
            return net
        parent = force_parent
        if parent is None:
            if bus:
                parent = self._pci_from_sys(bus, "0x02")
            else:
                parent = xml.find_tag("cpu")
        if parent is None:
            top = xml.top()
            parent = xml.add_node(top, "cpu")
            parent.set_long("host_hash", self.host_hash)
            parent.set("numaid", "0")
        nic = parent.sub("nic")
        if nic is None:
            nic = xml.add_node(parent, "nic")
        net = xml.add_node(nic, "net")
        net.set("name", name)
        return net

    def _update_vnics(self) -> None:
        """``ncclTopoUpdateVNics``: the physical devices of a virtual one are no longer net devices."""
        m = self.m
        for d in range(m.n_phys, m.n_phys + (m.n_virt or 0)):
            for p in m.nics[d].devs:
                node = self.xml.find_tag_kv("net", "name", m.nics[p].name)
                if node is not None:
                    node.set_int("net", 0)
                    net = node.get_int("net")
                    gin = node.get_int_default("gin", 0)
                    coll = node.get_int_default("coll", 0)
                    if net == 0 and gin == 0 and coll == 0:
                        node.set_int("keep", 0)

    def _make_vnics(self, n_phys: int) -> None:
        """``ncclTopoMakeVNics``: NCCL_NET_FORCE_MERGE groups, then automatic merging of devices at
        most ``merge_level`` apart (default PORT: the ports of one NIC)."""
        if n_phys == 0:
            return
        nodes = [self.xml.find_tag_kv("net", "name", self.m.props(i).name) for i in range(n_phys)]
        placed = [0] * n_phys
        if self.force_merge:
            for group in self.force_merge.split(";"):
                names = [s.strip() for s in group.split(",") if s.strip()]
                devs = [i for i in range(n_phys) if self.m.props(i).name in names]
                if len(devs) != len(names) or len(devs) > NCCL_NET_MAX_DEVS_PER_NIC:
                    raise NcclFailure(f"NCCL_NET_FORCE_MERGE: could not merge {group}")
                if len(devs) > 1:
                    self.m.make_vdevice(devs)
                for i in devs:
                    placed[i] = 1
        paths = [[xml_path([nodes[i], nodes[j]])[0] for j in range(n_phys)] for i in range(n_phys)]
        i = 0
        while i < n_phys:
            if placed[i] == 0:
                devs = [i]
                placed[i] = 1
                for j in range(n_phys):
                    if paths[i][j] <= self.merge_level and placed[j] == 0 and j != i:
                        devs.append(j)
                        placed[j] = 1
                    if len(devs) == NCCL_NET_MAX_DEVS_PER_NIC:
                        break
                if len(devs) > 1:
                    self.m.make_vdevice(devs)
            i += 1

    def _vnic_parent(self, devs: list) -> XNode:
        """``ncclTopoGetVNicParent``: the common parent of the fused devices, under a made-up PCI
        function when that parent is a switch or a CPU (``ncclTopoMakePciParent``)."""
        xml = self.xml
        phys = [xml.find_tag_kv("net", "name", self.m.props(d).name) for d in devs]
        path, parent = xml_path(phys)
        width = 0
        if path in (PATH_PHB, PATH_PXB, PATH_PIX):
            width = _find_link_width(parent, phys)
        phys_parent = parent
        if parent is not None:
            if parent.name == "pci":
                if parent.get("class") == PCI_BRIDGE_CLASS:
                    parent = self._make_pci_parent(parent, phys[0])
            elif parent.name == "cpu":
                parent = self._make_pci_parent(parent, phys[0])
            elif parent.name == "system":
                raise NcclFailure("Fusing NET devices from different NUMA domains is not supported.")
        if width > 0:
            node = parent
            while node is not None:
                if node.name == "pci":
                    node.set_int("link_width", width)
                if node is phys_parent:
                    break
                node = node.parent
        return parent

    def _make_pci_parent(self, parent: XNode, phys_net: XNode) -> XNode:
        pci = phys_net.parent.parent if phys_net.parent is not None else None
        if pci is None or pci.name != "pci":
            raise NcclFailure(f"TOPO/NET : Can't find busId of child 0 {phys_net.get('name')}")
        v = bus_to_int(pci.get_str("busid"))
        for _ in range(100):
            v += 1
            bus = int_to_bus(v)
            if self.xml.find_tag_kv("pci", "busid", bus) is None:
                new = self.xml.add_node(parent, "pci")
                new.set("busid", bus)
                for k, val in pci.attrs:
                    new.set(k, val)
                new.set("busid", bus)
                return new
        raise NcclFailure("TOPO/NET : Couldn't generate unique busId after 100 tries")

    # ---- trim (xml.cc ncclTopoTrimXml)
    def trim(self) -> None:
        _trim(self.xml.nodes[0])


class RankCopies:
    """The copies of a machine's XML that ncclTopoGetSystem works on, one per local rank, without the
    subtrees that rank's work never reads and ncclTopoTrimXml drops whole: a PCI subtree of GPUs only
    (``pci`` nodes ending in a ``gpu``, its ``nvlink``/``c2c``/``pcilink`` entries; no ``keep``) that
    does not hold the rank's GPU.  Nothing in such a subtree is looked up (bus ids are unique, and none
    is one NIC fusion could generate: within 100 functions above a NIC's), marked kept, or left by trim,
    so the trimmed copy -- and the fused XML -- is the one a full copy gives; on 72 GPUs behind one
    NVSwitch that is a few nodes per rank instead of the whole machine.  Where any of that cannot be
    shown (a ``keep`` in the input, duplicate bus ids, a node outside the tree first) every copy is whole."""

    _PURE_LEAVES = ("gpu", "nvlink", "c2c", "pcilink")

    def __init__(self, xml: Xml, machine: "Machine") -> None:
        self.xml = xml
        self.pure: set = set()
        self._subtrees: dict = {}     # id of a pure node -> ids of its subtree (the same for every rank)
        nodes = xml.nodes
        buses = [n.get("busid") for n in nodes if n.name == "pci"]
        self.ok = bool(nodes) and nodes[0].name == "system" and len(set(buses)) == len(buses) and \
            all(n.index("keep") == -1 for n in nodes)
        if not self.ok:
            return
        self._near = [bus_to_int(nic.bus) for nic in machine.nics if nic.bus]
        self._mark(nodes[0])

    def _mark(self, n: XNode) -> bool:
        """Whether ``n`` is part of a GPU-only subtree (``pci`` nodes that are: recorded in ``pure``)."""
        kids = [self._mark(c) for c in n.subs]
        if n.name != "pci":
            return n.name in self._PURE_LEAVES and all(kids)
        if not all(kids) or not any(c.name in ("pci", "gpu") for c in n.subs):
            return False
        v = bus_to_int(n.get("busid") or "")
        if any(0 < v - b <= 100 for b in self._near):
            return False
        self.pure.add(id(n))
        return True

    def copy_for(self, bus: str) -> Xml:
        """The copy for the rank whose GPU has PCI bus id ``bus`` (as ncclTopoFillGpu looks it up)."""
        xml = self.xml
        if not self.ok:
            return xml.copy()
        mine = xml.find_tag_kv("pci", "busid", bus)
        chain = set()
        while mine is not None:
            chain.add(id(mine))
            mine = mine.parent
        drop: set = set()
        stack = [xml.nodes[0]]
        pure = self.pure
        subtrees = self._subtrees
        while stack:
            n = stack.pop()
            for c in n.subs:
                if id(c) in pure and id(c) not in chain:
                    ids = subtrees.get(id(c))
                    if ids is None:
                        ids = set()
                        _collect(c, ids)
                        ids = subtrees[id(c)] = frozenset(ids)
                    drop |= ids
                else:
                    stack.append(c)
        return xml.copy(drop)


def _collect(n: XNode, into: set) -> None:
    into.add(id(n))
    for c in n.subs:
        _collect(c, into)


def _trim(node: XNode) -> int:
    if node.get("keep") == "1":
        node.unset("keep")
        return 1
    keep = 0
    for s in list(node.subs):
        keep += _trim(s)
    if keep == 0 and node.name in ("pci", "cpu", "nic", "net"):
        node.type = NODE_NONE
        if node.parent is not None and node in node.parent.subs:
            node.parent.subs.remove(node)
    return keep


def xml_path(nodes: list) -> tuple:
    """``ncclTopoGetPath`` (topo.cc): the path type between XML nodes and their first common PCI parent."""
    if len(nodes) == 1:
        common = nodes[0]
        return PATH_LOC, _first_pci_parent(common)
    stacks = []
    for n in nodes:
        st = []
        t = n
        while t is not None:
            st.append(t)
            t = None if t.name == "system" else t.parent
        stacks.append(st)
    common = None
    path = None
    c = True
    while c and stacks[0]:
        temp = stacks[0][-1]
        for st in stacks[1:]:
            if st:
                c = c and temp is st[-1]
            else:
                c = False
                break
        if c:
            common = temp
            for st in stacks:
                st.pop()
        else:
            bus = temp.get("busid")
            multi = bus is not None
            if multi:
                for st in stacks[1:]:
                    if st:
                        b = st[-1].get("busid")
                        if b is None or len(b) != len(bus) or b[:len(b) - 1] != bus[:len(b) - 1]:
                            multi = False
                            break
            if multi:
                path = PATH_PORT
                break
    if path is None:
        if common is None:
            path = PATH_DIS
        elif common.name == "system":
            path = PATH_SYS
        elif common.name == "cpu":
            path = PATH_PHB
        elif common.name in ("nic", "net"):
            path = PATH_PORT
        elif _check_pix(common, nodes):
            path = PATH_PIX
        else:
            path = PATH_PXB
    return path, _first_pci_parent(common)


def _first_pci_parent(node: Optional[XNode]) -> Optional[XNode]:
    n = node
    while n is not None and n.name != "pci":
        n = n.parent
        if n is None or n.name == "system":
            return node
    return n if n is not None else node


def _check_pix(common: XNode, nodes: list) -> bool:
    if common.get("busid") is None:
        return False
    for n in nodes:
        if n.name == "net":
            n = n.parent
            if n is None:
                return False
            if n.name == "nic":
                n = n.parent
                if n is None:
                    return False
                if n.name == "pci" and n.parent is not common:
                    return False
    return True


def _find_link_width(parent: XNode, phys: list) -> int:
    total = 0
    for child in parent.subs:
        found, w = _link_width_rec(child, phys)
        if found:
            total += w
    return total


def _link_width_rec(node: XNode, phys: list) -> tuple:
    mine = strtol(node.get_str("link_width")) if node.name == "pci" else 0
    found = any(node is p for p in phys)
    child_total = 0
    for s in node.subs:
        f, w = _link_width_rec(s, phys)
        if f:
            found = True
            child_total += w
    if not found:
        return False, 0
    if child_total == 0:
        return True, mine
    return True, (min(mine, child_total) if mine > 0 else child_total)


def fuse(xmls: Iterable[Xml]) -> Xml:
    """``ncclTopoFuseXml`` of the local ranks' XMLs, in rank order."""
    dst = Xml()
    for src in xmls:
        top_d = dst.top()
        top_s = src.nodes[0]
        if top_d is None:
            dst.add_tree(None, top_s)
        else:
            _fuse_rec(dst, top_d, top_s)
    return dst


def replicate_hosts(fused: Xml, hosts: int, per_host: int) -> Xml:
    """The fusion of ``hosts`` hosts' rank XMLs in rank order (an MNNVL clique), from the fusion of the
    first host's ``per_host`` ranks: every host's rank XMLs are the first host's but for the host hash on
    every ``<cpu>`` (host h: :func:`host_hash`) and the rank on every ``<gpu>`` (``per_host`` x h more).
    ncclTopoFuseXml merges nodes with equal attributes only, so no CPU of one host merges with another's:
    the fused XML is the first host's CPUs, then the second host's (fused among themselves as the first
    host's are), and so on."""
    top = fused.top()
    out = Xml()
    dst = out.add_tree(None, top) if top is not None else None
    if dst is None or any(c.name != "cpu" for c in top.subs):
        raise NcclFailure("replicate_hosts: a fused XML of <cpu> elements expected")
    for h in range(1, hosts):
        hh = "0x%x" % host_hash(h)
        for cpu in top.subs:
            c = out.add_tree(dst, cpu)
            for n in _subtree(c):
                if n.name == "cpu":
                    n.set("host_hash", hh)
                elif n.name == "gpu" and n.index("rank") != -1:
                    n.set_int("rank", n.get_int("rank") + per_host * h)
    return out


def _subtree(n: XNode):
    yield n
    for c in n.subs:
        yield from _subtree(c)


def _fuse_rec(dst: Xml, dparent: XNode, sparent: XNode) -> None:
    for s in sparent.subs:
        d = _find_node(dparent, s)
        if d is None:
            dst.add_tree(dparent, s)
        else:
            _fuse_rec(dst, d, s)


def _find_node(parent: XNode, search: XNode) -> Optional[XNode]:
    """``xmlFindNode``: same name, type, attribute count and values."""
    for n in parent.subs:
        if n.name == search.name and n.type == search.type and len(n.attrs) == len(search.attrs):
            if all(n.get(k) == v for k, v in search.attrs):
                return n
    return None


# --------------------------------------------------------------------------------------------
# A communicator's XML
def machine_gpus(xml_text: str, gpus: Optional[list], default_sm: int = 80, nic_speed_mbps: int = 100000) -> tuple:
    """(the host NCCL talks to, its GPUs of the communicator in rank order, the parsed XML) for ``xml_text``;
    ``gpus``: NVML indices (default: all, by index)."""
    xml = parse(xml_text)
    machine = Machine(xml, default_sm=default_sm, nic_speed_mbps=nic_speed_mbps, merge=True)
    if not machine.gpus:
        raise NothingToDo("topology has no GPUs")
    if gpus is None:
        return machine, list(machine.gpus), xml
    local = []
    for i in gpus:
        g = next((x for x in machine.gpus if x.dev == i), None)
        if g is None:
            raise InputError(f"no GPU {i} in topology (has {', '.join(str(x.dev) for x in machine.gpus)})")
        local.append(g)
    return machine, local, xml


def fuse_ranks(xml: Xml, machine: Machine, local: list, merge_level: int = PATH_PORT,
               force_merge: Optional[str] = None) -> Xml:
    """The XML every local rank builds (its copy, its GPU filled in, the network devices with
    NCCL_NET_MERGE_LEVEL / NCCL_NET_FORCE_MERGE, trimmed), fused in rank order: what
    ``ncclTopoGetSystem`` hands to ``ncclTopoGetSystemFromXml``."""
    cpu_fill = {"affinity": "", "arch": "x86_64"}
    rank_xmls = []
    copies = RankCopies(xml, machine)
    for l, g in enumerate(local):
        bus = int_to_bus(bus_to_int(g.bus))
        x = copies.copy_for(bus)
        rx = RankXml(x, machine, cpu_fill, merge_level, force_merge)
        rx.fill_gpu(bus, l)
        rx.process_net()
        rx.trim()
        rank_xmls.append(x)
    return fuse(rank_xmls)


def merge_level(value: Optional[str]) -> int:
    """NCCL_NET_MERGE_LEVEL (``ncclTopoGetFusionEnv``: prefix match in nicPathKvList, default PORT)."""
    if value is None:
        return PATH_PORT
    return kv(value, NIC_PATH_LEVELS, 0)
