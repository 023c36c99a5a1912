"""The topology XML NCCL would load on the host a document describes, with every value NCCL reads
from the host written in ("pinned"), so that NCCL's own code (or ncclsim) and our model read the same.

Starting point: :func:`gpucomm.probes.formats.nccl_xml.export_nccl_xml` (NCCL's XML of the
document: CPUs, PCI tree, GPUs with NVLinks/C2C, NICs with their ports).  Then, where the document
does not say, what NCCL would read on the host, each default recorded as a named assumption of the
view (``topo.assume``):

* ``<cpu>``: ``affinity`` (the NUMA node's CPUs), ``arch``/``vendor``/``familyid``/``modelid``
  (CPUID on the host; from the document's CPU identity, else assumed);
* GPUs: ``<gpu dev sm>`` (NVML; the view's compute capability), ``link_speed``/``link_width``
  (NVML: the document's PCIe link -- its generation, or, where it has a bandwidth but no generation
  (an NCCL dump's ``link_speed=""``), the speed of that bandwidth, as NCCL read it there -- else the
  view's default PCIe generation, x16); other PCI devices the same from sysfs;
* NICs: one ``<net>`` per network device of the plugin NCCL uses (RDMA devices when there are
  any, else the plain interfaces of the socket transport), with ``speed`` (the view's rate),
  ``port``, ``guid`` (a NIC without one is its own ASIC), ``gdr`` and ``latency`` (what the network
  plugin reports: an NCCL dump's own value, else 75 us for AWS EFA devices --
  :func:`gpucomm.probes.facts.nic_net_latency_us` -- else none, NCCL's 0); a document without any
  network device gets the socket transport's Ethernet port NCCL always has;
* PCI devices without a class and without children (skeleton leaves NCCL would trim) are dropped.

A document without a PCI tree (a bare ``nvidia-smi topo -m`` matrix) is written from the tree
:func:`gpucomm.planners.nccl.graph.graph_from_matrix` rebuilds, with made-up bus ids.
"""
from __future__ import annotations


from gpucomm.probes import facts
from gpucomm.probes.errors import TopologyError
from gpucomm.probes.model import cpulist_to_mask, normalize_bus_id
from gpucomm.probes.topology import Topology

from gpucomm.planners.nccl import ncclxml as X

_VENDOR_CPUID = {"intel": "GenuineIntel", "amd": "AuthenticAMD", "zhaoxin": "CentaurHauls"}
_GEN_SPEED = facts.PCI_GEN_SPEED                                # the link_speed text NCCL writes
_KNOWN_SPEEDS = tuple(k for k, _lane in facts.NCCL_PCI_GEN_SPEEDS)   # the ones NCCL's table knows
SOCKET_NIC_MBPS = facts.nic_speed_mbps(facts.SOCKET_NIC_GBPS)   # NCCL's socket default


def pin(topo: Topology) -> str:
    """The pinned NCCL topology XML of ``topo`` (see the module docstring)."""
    from gpucomm.probes.formats.nccl_xml import export_nccl_xml

    doc = topo.doc
    if any(not g.pci_bus_id for g in topo.gpus) or not topo.has_pci_tree:
        text = _xml_from_matrix(topo)
    else:
        try:
            text = export_nccl_xml(doc)
        except TopologyError:
            text = _xml_from_matrix(topo)
    xml = X.parse(text)
    _Pinner(topo, xml).run()
    return X.dumps(xml)


class _Pinner:
    def __init__(self, topo: Topology, xml: X.Xml):
        self.topo = topo
        self.xml = xml
        self.gpu_by_bus = {normalize_bus_id(g.pci_bus_id or "") or "": g for g in topo.gpus}
        self.nic_by_name = {n.name: n for n in topo.nics}
        # PCIe links the document gives a bandwidth but no generation (an NCCL dump's link_speed="",
        # a sysfs without link speeds): NCCL on that host read the same, so the speed pinned is the
        # one of that bandwidth (NCCL's fallback lane speed for 12 GB/s at x16), not a default
        self.gen_of_bw: dict = {}
        for l in topo.links:
            if l.kind == "pcie" and l.bw_GBps and not l.gen:
                gen = facts.pcie_gen_of_lane(round(l.bw_GBps * 80.0 / (l.width or 16), 6))
                if gen is not None:
                    self.gen_of_bw[normalize_bus_id(l.a) or l.a] = (gen, l.width or 16)

    def run(self) -> None:
        top = self.xml.top()
        for cpu in [s for s in top.subs if s.name == "cpu"]:
            self._cpu(cpu)
            for s in list(cpu.subs):
                if s.name == "pci":
                    self._pci(s)
        self._nets()

    # ---- CPUs
    def _cpu(self, node: X.XNode) -> None:
        topo = self.topo
        numa = X.strtol(node.get("numaid")) if node.get("numaid") is not None else -1
        cpu = topo.cpu_for(numa if numa >= 0 else None)
        if node.index("affinity") == -1:
            mask = ""
            if cpu.cpus:
                try:
                    mask = cpulist_to_mask(list(cpu.cpus))
                except ValueError:
                    mask = ""
            node.set("affinity", mask if len(mask) <= 250 else "")
        arch = node.get("arch")
        if arch is None:
            arch = cpu.arch or ("arm64" if any((g.sm or 0) >= 90 and self._c2c(g) for g in topo.gpus) else "x86_64")
            if cpu.arch is None:
                topo.assume(f"CPU architecture unknown: assumed {arch} (NCCL reads it from the host)")
            node.set("arch", arch)
        if arch != "x86_64":
            return
        vendor = node.get("vendor")
        if vendor is None:
            vendor = _VENDOR_CPUID.get(cpu.vendor or "")
            if vendor is None:
                vendor = "AuthenticAMD"
                # AMD's rules give NCCL's AMD_BW (16 GB/s) between sockets: the one wording of that default
                topo.assume(facts.assumption("cpu"))
            node.set("vendor", vendor)
        if node.index("familyid") == -1 or node.index("modelid") == -1:
            fam, mod = cpu.family, cpu.model
            if vendor == "GenuineIntel" and (fam is None or mod is None):
                sm = topo.sm_hint or 0
                fam, mod, name = (6, 0x8F, "Sapphire Rapids") if sm >= 90 else (6, 0x6A, "Ice Lake") if sm >= 80 \
                    else (6, 0x55, "Skylake")
                topo.assume(f"Intel CPU model unknown: assumed {name} (family 6, model {mod:#x}), typical for the GPU "
                            "generation (NCCL's inter-socket bandwidth of that class)")
            if fam is None or mod is None:
                fam, mod = (25, 1) if vendor == "AuthenticAMD" else (6, 0)
            if node.index("familyid") == -1:
                node.set_int("familyid", fam)
            if node.index("modelid") == -1:
                node.set_int("modelid", mod)

    def _c2c(self, g) -> bool:
        return any(l.kind == "c2c" and g.id in (l.a, l.b) for l in self.topo.links)

    # ---- PCI devices
    def _pci(self, node: X.XNode) -> None:
        topo = self.topo
        cls = node.get("class")
        if cls is None and not node.subs:
            node.parent.subs.remove(node)
            return
        if cls is None:
            node.set("class", "0x060400")
        bus = normalize_bus_id(node.get("busid") or "") or ""
        gpu = self.gpu_by_bus.get(bus) if (node.get("class") or "").startswith("0x03") else None
        if gpu is not None:
            self._gpu(node, gpu)
        speed = node.get("link_speed")
        if bus in self.gen_of_bw:
            # sysfs (what NCCL reads) said nothing on the host: NCCL's fallback, whatever NVML knows
            gen, width = self.gen_of_bw[bus]
            node.set("link_speed", _GEN_SPEED[gen])
            node.set_int("link_width", width)
        elif speed is None or not any(speed.startswith(k) for k in _KNOWN_SPEEDS):
            gen = facts.default_pcie_gen(topo.sm_hint)
            if gpu is not None and gpu.pcie is not None and (gpu.pcie.gen or gpu.pcie.max_gen):
                gen = gpu.pcie.gen or gpu.pcie.max_gen
            else:
                topo.assume(facts.assumption("pcie", gen=gen))
            node.set("link_speed", _GEN_SPEED.get(gen, _GEN_SPEED[4]))
        width = node.get("link_width")
        if width is None or X.strtol(width) <= 0:
            node.set_int("link_width", (gpu.pcie.width or gpu.pcie.max_width or 16)
                         if gpu is not None and gpu.pcie is not None else 16)
        for s in list(node.subs):
            if s.name == "pci":
                self._pci(s)

    def _gpu(self, pci: X.XNode, gpu) -> None:
        g = pci.sub("gpu")
        if g is None:
            g = self.xml.add_node(pci, "gpu")
        if g.index("dev") == -1:
            g.set_int("dev", gpu.index)
        if g.index("sm") == -1:
            g.set_int("sm", gpu.sm or facts.DEFAULT_SM)

    # ---- network devices
    def _nets(self) -> None:
        topo, xml = self.topo, self.xml
        rdma = [n for n in topo.nics if n.rdma]
        nets = [n for n in xml.nodes if n.name == "net" and n.parent is not None and n in n.parent.subs]
        if rdma:
            for net in nets:
                nic = self.nic_by_name.get(net.get("name") or "")
                if nic is not None and not nic.rdma:
                    net.parent.subs.remove(net)
            for nicnode in [n for n in xml.nodes if n.name == "nic" and n.parent is not None]:
                if not nicnode.subs and nicnode in nicnode.parent.subs:
                    nicnode.parent.subs.remove(nicnode)
        used = {X.strtol(n.get("dev")) for n in xml.nodes if n.name == "net" and n.get("dev") is not None}
        nxt = max(used) + 1 if used else 0
        for pci in [n for n in xml.nodes if n.name == "pci" and (n.get("class") or "").startswith("0x02")
                    and n.sub("nic") is None and n.parent is not None and n in n.parent.subs]:
            bus = normalize_bus_id(pci.get("busid") or "") or pci.get("busid") or ""
            name = next((n.name for n in topo.nics if n.pci_bus_id == bus), bus)
            nic = self.xml.add_node(pci, "nic")
            net = self.xml.add_node(nic, "net")
            net.set("name", name)
            net.set_int("dev", nxt)
            nxt += 1
        live = [n for n in xml.nodes if n.name == "net" and n.parent is not None and n in n.parent.subs]
        if not live:
            top = xml.top()
            cpu = next((s for s in top.subs if s.name == "cpu"), None)
            if cpu is not None:
                nic = xml.add_node(cpu, "nic")
                net = xml.add_node(nic, "net")
                for k, v in (("name", "eth0"), ("dev", "0"), ("speed", str(SOCKET_NIC_MBPS)), ("port", "0"),
                             ("guid", "0x0"), ("gdr", "0")):
                    net.set(k, v)
                topo.assume(facts.assumption("no-nic"))
            return
        efa = []
        for net in live:
            if self._net(net):
                efa.append(net.get("name") or "?")
        if efa:
            topo.assume(facts.assumption("net-latency", names=efa, us=facts.OFI_AWS_NET_LATENCY_US))

    def _net(self, net: X.XNode) -> bool:
        """Pin one ``<net>``; True when its latency is the EFA plugin's default (an assumption)."""
        topo = self.topo
        nic = self.nic_by_name.get(net.get("name") or "")
        assumed = False
        if net.index("latency") == -1 and nic is not None:
            lat = facts.nic_net_latency_us(nic.rec)
            if lat:
                if lat.is_integer():
                    net.set_int("latency", int(lat))     # as NCCL writes props.latency (xmlInitAttrInt)
                else:
                    net.set("latency", f"{lat:f}")
                assumed = facts.nic_recorded_latency_us(nic.rec) is None     # the EFA default, not a dump's
        if net.index("speed") == -1 or X.strtol(net.get("speed")) <= 0:
            gbps = topo.nic_gbps(nic) if nic is not None else topo.unknown_nic_gbps(net.get("name") or "?")
            net.set_int("speed", facts.nic_speed_mbps(gbps))     # the trip: facts.nccl_nic_GBps
        if net.index("port") == -1:
            port = None
            if nic is not None and nic.ports:
                port = nic.ports[0].port
            net.set_int("port", port if isinstance(port, int) else 1)
        if net.index("guid") == -1:
            pci = net.parent.parent if net.parent is not None else None
            bus = pci.get("busid") if pci is not None and pci.name == "pci" else None
            net.set("guid", "0x%x" % X._own_asic(bus, net.get("name") or ""))
        if net.index("gdr") == -1:
            gdr = 1
            if nic is not None:
                gdr = 1 if (nic.gdr and nic.rdma) else 0
            net.set_int("gdr", gdr)
        return assumed


# --------------------------------------------------------------------------------------------
def _xml_from_matrix(topo: Topology) -> str:
    """An NCCL XML from the PCI tree :func:`graph_from_matrix` rebuilds (made-up bus ids)."""
    from gpucomm.planners.nccl.graph import graph_from_matrix

    G = graph_from_matrix(topo)
    bus: dict = {}
    counter = [0x10]

    def bus_of(n: str) -> str:
        if n not in bus:
            a = G.nodes[n]
            b = normalize_bus_id(str(a.get("pci_bus_id") or "")) if a.get("type") == "GPU" else None
            if not b:
                b = "0000:%02x:00.0" % counter[0]
                counter[0] += 1
            bus[n] = b
        return bus[n]

    children: dict = {}
    seen = set()
    frontier = sorted(n for n, a in G.nodes(data=True) if a.get("type") == "CPU")
    seen.update(frontier)
    while frontier:      # the PCI tree, breadth first from the CPUs
        nxt = []
        for v in frontier:
            for u in sorted(G.successors(v)):
                if u in seen or G.edges[v, u].get("type") != "PCI" or G.nodes[u].get("type") not in ("PCI", "GPU", "NIC"):
                    continue
                seen.add(u)
                children.setdefault(v, []).append(u)
                if G.nodes[u].get("type") == "PCI":
                    nxt.append(u)
        frontier = nxt
    net_dev = [0]
    gen = facts.default_pcie_gen(topo.sm_hint)
    lines = ['<system version="1">']

    def emit(n: str, depth: int) -> None:
        a = G.nodes[n]
        pad = "  " * depth
        t = a.get("type")
        if t == "PCI":
            lines.append(f'{pad}<pci busid="{bus_of(n)}" class="0x060400" link_speed="{_GEN_SPEED[gen]}" link_width="16">')
            for c in sorted(children.get(n, []), key=bus_of):
                emit(c, depth + 1)
            lines.append(f"{pad}</pci>")
        elif t == "GPU":
            g = topo.gpu_by_id(n) or topo.gpu_by_key(n)
            idx = a.get("index")
            sm = (g.sm if g is not None else None) or facts.DEFAULT_SM
            lines.append(f'{pad}<pci busid="{bus_of(n)}" class="0x030200" link_speed="{_GEN_SPEED[gen]}" link_width="16">')
            lines.append(f'{pad}  <gpu dev="{idx}" sm="{sm}" rank="{idx}">')
            for _u, v, e in G.out_edges(n, data=True):
                if e.get("type") != "NVL":
                    continue
                vt = G.nodes[v].get("type")
                count = max(1, int(round(e.get("nominal_bw", e["bw"]) / facts.nvlink_bw_per_link(sm))))
                if vt == "GPU":
                    lines.append(f'{pad}    <nvlink target="{bus_of(v)}" count="{count}" tclass="0x030200"/>')
                elif vt == "NVS":
                    lines.append(f'{pad}    <nvlink target="fffffff:ffff:ff" count="{count}" tclass="0x068000"/>')
            lines.append(f"{pad}  </gpu>")
            lines.append(f"{pad}</pci>")
        elif t == "NIC":
            names = a.get("names") or [a.get("label")]
            lines.append(f'{pad}<pci busid="{bus_of(n)}" class="0x020700" link_speed="{_GEN_SPEED[gen]}" link_width="16">')
            lines.append(f"{pad}  <nic>")
            for name in names:
                lines.append(f'{pad}    <net name="{name}" dev="{net_dev[0]}"/>')
                net_dev[0] += 1
            lines.append(f"{pad}  </nic>")
            lines.append(f"{pad}</pci>")

    for c in sorted(n for n, a in G.nodes(data=True) if a.get("type") == "CPU"):
        numa = c[3:] if c.startswith("CPU") else "0"
        lines.append(f'  <cpu numaid="{numa}">')
        for ch in sorted(children.get(c, []), key=bus_of):
            emit(ch, 2)
        lines.append("  </cpu>")
    lines.append("</system>")
    return "\n".join(lines) + "\n"


__all__ = ["pin"]
