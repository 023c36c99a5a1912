"""Source ``sysfs``: the PCI tree from ``/sys/bus/pci/devices`` and ``/sys/devices/pci*``.

What is read, per device (the files NCCL reads, xml.cc ncclTopoGetXmlFromSys, plus the ones it does not need
but ``doctor`` does): ``class``, ``vendor``, ``device``, ``subsystem_vendor``,
``subsystem_device``, ``current_link_speed/width``, ``max_link_speed/width``, ``numa_node``,
``local_cpulist`` (``local_cpus`` mask as fallback) and, when readable, the binary ``config``
space of bridges (for the ACS extended capability).

The tree is built the way NCCL builds it (xml.cc ``ncclTopoGetXmlFromSys``):
  * the host bridge is the ``pciDDDD:BB`` component of the real path (record kind ``host_bridge``,
    id ``pci0000:17``, parent ``CPU<numa>``);
  * root ports are not nodes: a device right below a root port hangs off the host bridge;
  * a PCIe switch is one node, its *upstream port* (a bridge whose parent is a root port or a
    switch downstream port); its downstream ports are not nodes.
NCCL implements this as "continue on every second sysfs level"; for regular trees that is the
same as the role assignment below (root port / upstream / downstream alternate), which also copes
with endpoints that sit directly on a switch's upstream bus.

Everything goes through :class:`gpucomm.probes.sources.host.Host`, so the same code reads ``/``, a
``--sysfs-root``, a snapshot and a generated fixture.  Unreadable or garbage attribute files become
``None`` plus a warning; nothing here raises on bad sysfs content.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Optional

from gpucomm.probes.sources.host import Host
from gpucomm.probes.facts import LOC_BW, PCI_GT_TO_GEN, pcie_bw_GBps
from gpucomm.probes.model import (canonical_cpulist, cpu_id, cpumask_to_list, format_cpulist, gpu_record,
                                  link_record, new_document, normalize_bus_id, source_record, switch_record,
                                  warn)

PCI_DEVICES = "/sys/bus/pci/devices"
VENDOR_NVIDIA = 0x10DE
VENDOR_AMD = 0x1002

# NCCL LOC_BW (topo.h): the hop from a root complex into its CPU is not a bottleneck; NCCL has no
# host-bridge node at all (it folds root complexes into the CPU node), so this link is "free".
HOST_BRIDGE_BW = LOC_BW

_BDF_COMPONENT = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_HOSTBRIDGE_COMPONENT = re.compile(r"^pci[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}$")
_GTS_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*GT/s", re.I)

# Extended capability id of Access Control Services (PCIe base spec 7.7.8).
PCI_EXT_CAP_ID_ACS = 0x000D
ACS_BITS = {0: "SV", 1: "TB", 2: "RR", 3: "CR", 4: "UF", 5: "EC", 6: "DT"}
# RR (P2P Request Redirect) and CR (P2P Completion Redirect) force peer-to-peer traffic up to the
# root complex, which is what breaks/slows GPU P2P below a switch (NCCL troubleshooting docs).
ACS_P2P_REDIRECT = 0x4 | 0x8


# ------------------------------------------------------------------------------------------
# Attribute parsers: each takes the raw text of one sysfs file (or None) and returns a value or
# None.  They never raise.
def parse_link_speed(text: Optional[str]) -> Optional[int]:
    """``"16.0 GT/s PCIe"`` -> 4 (PCIe generation); ``"Unknown"``/junk/None -> None.

    Prefix match on ``<float> GT/s`` like NCCL (``kvConvertToInt`` uses strncmp), so the
    ``"32 GT/s PCIe/s"`` seen in an AWS p5 topology file also parses."""
    if not text:
        return None
    m = _GTS_RE.match(text)
    if not m:
        return None
    try:
        return PCI_GT_TO_GEN.get(float(m.group(1)))
    except ValueError:
        return None


def parse_link_width(text: Optional[str]) -> Optional[int]:
    """``"16"`` -> 16; 0, negative, absurd or junk -> None (x32 is the widest PCIe link)."""
    v = _int(text, 10)
    return v if v is not None and 1 <= v <= 32 else None


def parse_numa(text: Optional[str]) -> Optional[int]:
    """``numa_node``: ``-1`` (no proximity information, typical in VMs) and junk -> None."""
    v = _int(text, 10)
    return v if v is not None and 0 <= v < 4096 else None


def parse_class(text: Optional[str]) -> Optional[int]:
    """``"0x030200"`` -> 0x030200 (24-bit class code)."""
    v = _int(text, 16)
    return v if v is not None and 0 <= v <= 0xFFFFFF else None


def parse_hex_id(text: Optional[str]) -> Optional[str]:
    """``"0x10de"`` -> ``"0x10de"`` (normalised, 4 hex digits); junk -> None."""
    v = _int(text, 16)
    return f"0x{v:04x}" if v is not None and 0 <= v <= 0xFFFF else None


def parse_cpus(cpulist: Optional[str], mask: Optional[str] = None) -> Optional[str]:
    """``local_cpulist`` (canonicalised) or, if absent/broken, the ``local_cpus`` hex mask."""
    try:
        c = canonical_cpulist(cpulist)
        if c:
            return c
    except ValueError:
        pass
    if mask:
        try:
            return format_cpulist(cpumask_to_list(mask)) or None
        except ValueError:
            return None
    return None


def _int(text: Optional[str], base: int) -> Optional[int]:
    if text is None:
        return None
    t = text.strip()
    if not t:
        return None
    try:
        return int(t, base)
    except ValueError:
        return None


def parse_acs(config: Optional[bytes]) -> Optional[dict]:
    """Find the ACS extended capability in a PCI config-space blob.

    Returns ``{"cap": int, "ctrl": int, "ctrl_flags": ["RR", ...]}`` or None when the blob is
    shorter than the extended space (non-root readers only get 64/256 bytes) or has no ACS."""
    if not config or len(config) < 0x104:
        return None
    off, seen = 0x100, set()
    while 0x100 <= off <= len(config) - 8 and off not in seen and len(seen) < 128:
        seen.add(off)
        (hdr,) = struct.unpack_from("<I", config, off)
        if hdr in (0, 0xFFFFFFFF):
            return None
        cap_id, nxt = hdr & 0xFFFF, (hdr >> 20) & 0xFFC
        if cap_id == PCI_EXT_CAP_ID_ACS:
            cap, ctrl = struct.unpack_from("<HH", config, off + 4)
            return {"cap": cap, "ctrl": ctrl,
                    "ctrl_flags": [n for b, n in sorted(ACS_BITS.items()) if ctrl >> b & 1]}
        if nxt == 0:
            return None
        off = nxt
    return None


def read_bytes(host: Host, p: str, limit: int = 4096) -> Optional[bytes]:
    """Binary read through the host (a recording host may intercept it), None on failure."""
    fn = getattr(host, "read_bytes", None)
    if fn is not None:
        return fn(p, limit)
    try:
        with open(host.path(p), "rb") as f:
            return f.read(limit)
    except (OSError, ValueError):
        return None


# ------------------------------------------------------------------------------------------
@dataclass
class PciDev:
    """One PCI function as sysfs shows it."""

    bdf: str                      # normalised (0000:18:00.0)
    path: str                     # real host path (/sys/devices/pci0000:17/.../0000:18:00.0)
    host_bridge: Optional[str]    # "pci0000:17" (None when the path has no such component)
    chain: list                   # BDFs from below the host bridge down to this device
    cls: Optional[int] = None
    vendor: Optional[str] = None
    device: Optional[str] = None
    subsystem_vendor: Optional[str] = None
    subsystem_device: Optional[str] = None
    cur_gen: Optional[int] = None
    cur_width: Optional[int] = None
    max_gen: Optional[int] = None
    max_width: Optional[int] = None
    numa: Optional[int] = None
    cpus: Optional[str] = None
    acs: Optional[dict] = None
    role: str = "endpoint"        # root_port | switch_up | switch_down | endpoint
    has_child: bool = False       # seen above another device in some chain

    @property
    def is_bridge_class(self) -> bool:
        # 0x0604 PCI-to-PCI bridge, 0x0609 subtractive-decode bridge
        return self.cls is not None and (self.cls >> 8) in (0x0604, 0x0609)

    def kind(self) -> str:
        """What the device becomes in the topology: gpu | nic | nvswitch | bridge | other."""
        c = self.cls
        if self.role != "endpoint":
            return "bridge"
        if c is None:
            return "other"
        base = c >> 16
        ven = _int(self.vendor, 16)
        if base == 0x03 and ven in (VENDOR_NVIDIA, VENDOR_AMD):
            return "gpu"
        if (c >> 8) == 0x0680 and ven == VENDOR_NVIDIA:
            return "nvswitch"
        if base == 0x02 or (c >> 8) == 0x0C06:  # network controllers; 0x0c06 = old InfiniBand class
            return "nic"
        return "other"


def split_pci_path(real: str) -> tuple[Optional[str], list]:
    """``/sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0`` -> ("pci0000:17", [bdfs...]).

    The *last* ``pciDDDD:BB`` component is the host bridge: Intel VMD and Hyper-V put a second
    root bus below another device (``.../0000:00:0e.0/pci10000:e0/10000:e0:1d.0``)."""
    parts = [p for p in real.split("/") if p]
    hb, start = None, 0
    for i, p in enumerate(parts):
        if _HOSTBRIDGE_COMPONENT.match(p):
            hb, start = p.lower(), i + 1
    chain = [normalize_bus_id(p) for p in parts[start:] if _BDF_COMPONENT.match(p)]
    return hb, [c for c in chain if c]


def nearest_bdf(real: Optional[str]) -> Optional[str]:
    """Nearest PCI function at or above a sysfs path (``.../0000:00:03.0/virtio2`` -> 0000:00:03.0)."""
    if not real:
        return None
    for p in reversed([p for p in real.split("/") if p]):
        if _BDF_COMPONENT.match(p):
            return normalize_bus_id(p)
        if _HOSTBRIDGE_COMPONENT.match(p):
            return None
    return None


class PciTree:
    """Lazily read PCI devices of one host and place them in NCCL's tree.

    Shared by the sysfs, ib and net sources so that all of them give the same parent ids."""

    def __init__(self, host: Host):
        self.host = host
        self.devs: dict = {}          # bdf -> PciDev
        self.warnings: list = []
        self._numa_nodes: Optional[list] = None

    # -- reading --------------------------------------------------------------------------
    def list_bdfs(self) -> list:
        out = []
        for name in self.host.listdir(PCI_DEVICES):
            b = normalize_bus_id(name)
            if b:
                out.append(b)
        return sorted(set(out), key=_bdf_key)

    def dev_path(self, bdf: str) -> Optional[str]:
        """Real path of a device: via /sys/bus/pci/devices, else /sys/class/pci_bus/<bus>/../../<bdf>
        (the path NCCL itself uses, ncclOsGetPciPath)."""
        for cand in (f"{PCI_DEVICES}/{bdf}", f"/sys/class/pci_bus/{bdf[:-5]}/../../{bdf}"):
            real = self.host.realpath(cand)
            if real and real.startswith("/sys/devices/"):
                return real
        return None

    def get(self, bdf: str) -> Optional[PciDev]:
        bdf = normalize_bus_id(bdf) or bdf
        if bdf in self.devs:
            return self.devs[bdf]
        real = self.dev_path(bdf)
        if real is None:
            self.devs[bdf] = None
            return None
        dev = self._read(bdf, real)
        self.devs[bdf] = dev
        return dev

    def _read(self, bdf: str, real: str) -> PciDev:
        h = self.host
        hb, chain = split_pci_path(real)
        if not chain or chain[-1] != bdf:
            chain = chain + [bdf] if bdf not in chain else chain[: chain.index(bdf) + 1]
        d = PciDev(bdf=bdf, path=real, host_bridge=hb, chain=chain)
        rd = lambda name: h.read_text(f"{real}/{name}")  # noqa: E731

        raw_cls = rd("class")
        d.cls = parse_class(raw_cls)
        if d.cls is None:
            self._warn(f"sysfs: {bdf}: unreadable or invalid class {_show(raw_cls)}")
        d.vendor = parse_hex_id(rd("vendor"))
        d.device = parse_hex_id(rd("device"))
        d.subsystem_vendor = parse_hex_id(rd("subsystem_vendor"))
        d.subsystem_device = parse_hex_id(rd("subsystem_device"))
        raw = {k: rd(k) for k in ("current_link_speed", "current_link_width", "max_link_speed", "max_link_width")}
        d.cur_gen = parse_link_speed(raw["current_link_speed"])
        d.max_gen = parse_link_speed(raw["max_link_speed"])
        d.cur_width = parse_link_width(raw["current_link_width"])
        d.max_width = parse_link_width(raw["max_link_width"])
        for k, v in raw.items():
            # "Unknown" is what the kernel prints for a link it cannot read (e.g. behind a
            # virtual bridge); anything else that does not parse is junk worth a warning.
            if v is not None and v.strip() and v.strip().lower() not in ("unknown",) and \
                    (parse_link_speed(v) if "speed" in k else parse_link_width(v)) is None:
                self._warn(f"sysfs: {bdf}: {k} {_show(v)} is not a PCIe {'speed' if 'speed' in k else 'width'}")
        raw_numa = rd("numa_node")
        d.numa = parse_numa(raw_numa)
        if raw_numa is not None and d.numa is None and _int(raw_numa, 10) != -1:
            self._warn(f"sysfs: {bdf}: numa_node {_show(raw_numa)} is not a NUMA node id")
        raw_cpus = rd("local_cpulist")
        d.cpus = parse_cpus(raw_cpus, rd("local_cpus") if not raw_cpus else None)
        if raw_cpus and d.cpus is None:
            self._warn(f"sysfs: {bdf}: local_cpulist {_show(raw_cpus)} is not a cpu list")
        return d

    def _warn(self, msg: str) -> None:
        if msg not in self.warnings:
            self.warnings.append(msg)

    def numa_nodes(self) -> list:
        if self._numa_nodes is None:
            ids = []
            for n in self.host.listdir("/sys/devices/system/node"):
                m = re.match(r"^node(\d+)$", n)
                if m:
                    ids.append(int(m.group(1)))
            self._numa_nodes = sorted(ids)
        return self._numa_nodes

    # -- placement ------------------------------------------------------------------------
    def chain_devs(self, dev: PciDev) -> list:
        """PciDev objects of every component of ``dev.chain`` (None where unreadable), with roles."""
        devs = [self.get(b) if b != dev.bdf else dev for b in dev.chain]
        prev_role = None
        for i, d in enumerate(devs):
            if d is None:
                prev_role = None
                continue
            # A component with a PCI child below it is a bridge whatever its class says.
            if i < len(devs) - 1:
                d.has_child = True
            is_bridge = d.is_bridge_class or d.has_child
            if not is_bridge:
                d.role = "endpoint"
            elif i == 0:
                d.role = "root_port"
            elif prev_role in ("root_port", "switch_down"):
                d.role = "switch_up"
            elif prev_role == "switch_up":
                d.role = "switch_down"
            else:  # parent unreadable: guess from depth parity like NCCL's every-second-level walk
                d.role = "switch_up" if i % 2 == 1 else "switch_down"
            prev_role = d.role
        return devs

    def host_bridge_numa(self, dev: PciDev, devs: list) -> Optional[int]:
        for d in devs:
            if d is not None and d.numa is not None:
                return d.numa
        # numa_node -1 on a single-node machine (VMs, one-socket boxes without SRAT proximity):
        # everything is local to that one node, which is what NCCL's <cpu numaid=-1> means too.
        nodes = self.numa_nodes()
        return nodes[0] if len(nodes) == 1 else None

    def place(self, dev: PciDev) -> tuple:
        """(parent id, [switch records], [pcie links between those nodes]) for ``dev``.

        The parent is the nearest switch upstream port above the device, else its host bridge,
        else ``CPU<numa>``."""
        devs = self.chain_devs(dev)
        numa = self.host_bridge_numa(dev, devs)
        nodes: list = []
        links: list = []
        hb_id = dev.host_bridge
        top_id = None
        if hb_id:
            hb = switch_record(hb_id, "host_bridge", numa_node=numa, parent=cpu_id(numa) if numa is not None else None)
            hb["domain"] = hb_id[3:].split(":")[0]
            acs = self._bridge_acs([d for d in devs if d is not None and d.role == "root_port"])
            if acs:
                hb["acs"] = acs
            nodes.append(hb)
            if numa is not None:
                links.append(link_record(hb_id, cpu_id(numa), "pcie", HOST_BRIDGE_BW))
            top_id = hb_id
        elif numa is not None:
            top_id = cpu_id(numa)
        parent = top_id
        ups = [i for i, d in enumerate(devs[:-1]) if d is not None and d.role == "switch_up"]
        for i in ups:
            up = devs[i]
            rec = switch_record(up.bdf, "pcie", pci_bus_id=up.bdf, parent=parent, numa_node=numa,
                                vendor=up.vendor, device=up.device,
                                subsystem_vendor=up.subsystem_vendor, subsystem_device=up.subsystem_device)
            downs = [d for d in devs[i + 1:] if d is not None and d.role == "switch_down"][:1]
            acs = self._bridge_acs([up] + downs)
            if acs:
                rec["acs"] = acs
            nodes.append(rec)
            if parent is not None:
                links.append(self._link(up.bdf, parent, up, devs[i - 1] if i > 0 else None))
            parent = up.bdf
        return parent, nodes, links

    def uplink(self, child_id: str, dev: PciDev, parent_id: Optional[str]) -> Optional[dict]:
        """The pcie link from a device to its parent node."""
        if parent_id is None:
            return None
        devs = self.chain_devs(dev)
        above = devs[-2] if len(devs) >= 2 else None
        return self._link(child_id, parent_id, dev, above)

    def _link(self, a: str, b: str, dev: PciDev, port_above: Optional[PciDev]) -> dict:
        # NCCL (xml.cc:663-728): the smaller of the device's and the port above's *max* speed and
        # width; current_link_speed is never used because GPUs drop to 2.5 GT/s when idle.
        gens = [g for g in (dev.max_gen, port_above.max_gen if port_above else None) if g]
        widths = [w for w in (dev.max_width, port_above.max_width if port_above else None) if w]
        gen = min(gens) if gens else dev.cur_gen
        width = min(widths) if widths else dev.cur_width
        # ...but a link that trained narrower than it can (x8 in an x16 slot) really is narrower:
        # width does not change with power management, so trust current_link_width when lower.
        if dev.cur_width and width and dev.cur_width < width:
            width = dev.cur_width
        return link_record(a, b, "pcie", pcie_bw_GBps(gen, width), gen=gen, width=width)

    def _bridge_acs(self, bridges: list) -> dict:
        out = {}
        for d in bridges:
            if d is None:
                continue
            if d.acs is None:
                d.acs = parse_acs(read_bytes(self.host, f"{d.path}/config")) or {}
            if d.acs:
                out[d.bdf] = d.acs["ctrl_flags"]
        return out


def _bdf_key(b: str) -> tuple:
    dom, bus, rest = b.split(":")
    dev, fn = rest.split(".")
    return (int(dom, 16), int(bus, 16), int(dev, 16), int(fn))


def _show(v: Optional[str]) -> str:
    if v is None:
        return "(missing)"
    v = v.strip()
    return repr(v[:40] + ("..." if len(v) > 40 else ""))


def device_summary(d: PciDev) -> dict:
    """Entry of the document's ``pci_devices`` list."""
    return {"bdf": d.bdf, "class": f"0x{d.cls:06x}" if d.cls is not None else None, "vendor": d.vendor,
            "device": d.device, "numa_node": d.numa, "role": d.role if d.role != "endpoint" else d.kind()}


def merge_switch(nodes: dict, rec: dict) -> None:
    """Add a switch record, filling attributes of an existing one with the same id."""
    cur = nodes.get(rec["id"])
    if cur is None:
        nodes[rec["id"]] = rec
        return
    for k, v in rec.items():
        if cur.get(k) is None and v is not None:
            cur[k] = v
        elif k == "acs" and isinstance(v, dict):
            cur.setdefault("acs", {}).update(v)


# ------------------------------------------------------------------------------------------
def host_facts(host: Host) -> dict:
    """IOMMU and GPUDirect RDMA facts (extra ``host`` fields)."""
    groups = host.listdir("/sys/kernel/iommu_groups")
    iommu: Optional[str] = "off"
    if groups:
        types = set()
        for g in groups[:1]:
            t = host.read_text(f"/sys/kernel/iommu_groups/{g}/type")
            if t:
                types.add(t.strip())
        iommu = "/".join(sorted(types)) if types else "on"
    gdr = None
    # NCCL gdr.cc: any of these means the GPUDirect RDMA peer-memory module is loaded.
    for path, name in (("/sys/kernel/mm/memory_peers/nv_mem/version", "nv_peer_mem"),
                       ("/sys/kernel/mm/memory_peers/nv_mem_nc/version", "nv_peer_mem_nc"),
                       ("/sys/module/nvidia_peermem/version", "nvidia_peermem")):
        if host.read_text(path) is not None:
            gdr = name
            break
    return {"iommu": iommu, "gdr": gdr}


def collect(host: Host) -> dict:
    """Partial document: GPUs, NVSwitches, PCIe switches and host bridges, pcie links,
    ``pci_devices`` (every function with its class), host IOMMU/GDR facts."""
    doc = new_document(host.provenance)
    tree = PciTree(host)
    bdfs = tree.list_bdfs()
    switches: dict = {}
    links: dict = {}
    gpus = []
    pci_devices = []
    for b in bdfs:
        d = tree.get(b)
        if d is None:
            tree._warn(f"sysfs: {b}: listed in {PCI_DEVICES} but its device directory cannot be resolved")
            continue
        tree.chain_devs(d)  # assigns roles to d and its ancestors
    for b in bdfs:
        d = tree.devs.get(b)
        if d is None:
            continue
        pci_devices.append(device_summary(d))
        kind = d.kind()
        if kind not in ("gpu", "nvswitch", "nic"):
            continue
        # Like NCCL's trim, only switches above GPUs, NVSwitches and NICs become nodes.
        parent, nodes, chain_links = tree.place(d)
        for n in nodes:
            merge_switch(switches, n)
        for l in chain_links:
            links.setdefault((l["a"], l["b"]), l)
        if kind == "nic":
            continue  # NIC records and their uplinks come from the ib/net sources (they know names)
        up = tree.uplink(d.bdf, d, parent)
        if up:
            links.setdefault((up["a"], up["b"]), up)
        if kind == "nvswitch":
            merge_switch(switches, switch_record(d.bdf, "nvswitch", pci_bus_id=d.bdf, parent=parent,
                                                 numa_node=d.numa, vendor=d.vendor, device=d.device))
            continue
        g = gpu_record(len(gpus), pci_bus_id=d.bdf, numa_node=d.numa,
                       numa_affinity=[d.numa] if d.numa is not None else [],
                       cpu_affinity=d.cpus, parent=parent,
                       vendor="amd" if _int(d.vendor, 16) == VENDOR_AMD else "nvidia",
                       pcie={"gen": d.cur_gen, "width": d.cur_width, "max_gen": d.max_gen, "max_width": d.max_width},
                       pci_device_id=d.device)
        gpus.append(g)
    doc["gpus"] = gpus  # index = PCI bus order among GPUs (NVML's own index overrides in merge)
    doc["switches"] = list(switches.values())
    doc["links"] = list(links.values())
    doc["pci_devices"] = pci_devices
    doc["host"].update(host_facts(host))
    for w in tree.warnings:
        warn(doc, w)
    detail = f"{len(pci_devices)} PCI functions, {len(gpus)} GPUs, " \
             f"{sum(1 for s in switches.values() if s['kind'] == 'pcie')} PCIe switches"
    status = "partial" if tree.warnings else "ok"
    doc["sources"] = [source_record("sysfs", status, detail + (f"; {len(tree.warnings)} unreadable attribute(s)"
                                                               if tree.warnings else ""))]
    return doc


class _SysfsSource:
    name = "sysfs"
    priority = 30

    def available(self, host: Host):
        if host.listdir(PCI_DEVICES):
            return True
        return f"no PCI devices under {host.path(PCI_DEVICES)}"

    def collect(self, host: Host) -> dict:
        return collect(host)


SOURCE = _SysfsSource()
