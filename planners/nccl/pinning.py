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

A document without a PCI tree (a bare ``nvidia-smi topo -m`` matrix) is written from the smallest
PCI tree consistent with its codes (:func:`_matrix_tree`), with made-up bus ids.
"""
from __future__ import annotations

import re
from typing import Iterable, Optional, Union

from gpucomm.probes import facts
from gpucomm.probes.errors import InputError, NothingToDo, TopologyError
from gpucomm.probes.model import cpu_id, cpulist_to_mask, format_cpulist, host_document, natural_key, normalize_bus_id
from gpucomm.probes.topology import NVS_ID, Topology

from gpucomm.planners.nccl import ncclxml as X
from gpucomm.planners.nccl.names import kv
from gpucomm.planners.nccl.settings import NcclSettings

_VENDOR_CPUID = {"intel": "GenuineIntel", "amd": "AuthenticAMD", "zhaoxin": "CentaurHauls"}
_GEN_SPEED = facts.PCI_GEN_SPEED                                # the link_speed text NCCL writes
SOCKET_NIC_MBPS = facts.nic_speed_mbps(facts.SOCKET_NIC_GBPS)   # NCCL's socket default


def pin(topo: Topology) -> str:
    """The pinned NCCL topology XML of ``topo`` (see the module docstring)."""
    from gpucomm.probes.formats.nccl_xml import export_nccl_xml

    doc = _writable_names(topo.doc)
    if doc is not topo.doc:
        topo = Topology.of(doc)
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


_UNWRITABLE = re.compile("[\"<>&\x00-\x1f\x7f-\x9f]")


def _escape(text: str) -> str:
    return _UNWRITABLE.sub(lambda m: "\\u%04x" % ord(m.group(0)), text)


def _writable_names(doc: dict) -> dict:
    """``doc``, or a copy whose device and host names NCCL's XML can hold: a character xml.cc cannot
    read back (quotes, <, >, &, control characters -- a hostile or garbled name) is written ``\\uXXXX``
    (as the renderers escape it), so the model runs on the machine instead of on nothing."""
    def bad(v) -> bool:
        return isinstance(v, str) and _UNWRITABLE.search(v) is not None

    lists = ("gpus", "nics")
    if not any(bad(r.get("name")) for k in lists for r in doc.get(k) or [] if isinstance(r, dict)) \
            and not bad((doc.get("host") or {}).get("hostname")):
        return doc
    out = dict(doc)
    renamed: dict = {}
    for k in lists:
        rows = []
        for r in doc.get(k) or []:
            if isinstance(r, dict) and bad(r.get("name")):
                renamed[r["name"]] = _escape(r["name"])
                r = dict(r, name=renamed[r["name"]])
            rows.append(r)
        out[k] = rows
    if renamed:   # links name a NIC by its name where it has no bus id
        out["links"] = [dict(l, **{e: renamed[l[e]] for e in ("a", "b") if l.get(e) in renamed})
                        if isinstance(l, dict) else l for l in doc.get("links") or []]
    if bad((doc.get("host") or {}).get("hostname")):
        out["host"] = dict(doc["host"], hostname=_escape(doc["host"]["hostname"]))
    return out


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
        elif speed is None or not kv(speed, facts.NCCL_PCI_GEN_SPEEDS, 0):
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
            known = [n for n in topo.nics if n.pci_bus_id == bus]
            if rdma and known and not any(n.rdma for n in known):
                continue     # NCCL's IB transport lists RDMA ports only: a plain Ethernet port is not its device
            name = known[0].name if known else bus
            nic = self.xml.add_node(pci, "nic")
            net = self.xml.add_node(nic, "net")
            net.set("name", name)
            net.set_int("dev", nxt)
            nxt += 1
        if rdma:
            self._ib_devs_cap()
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

    def _ib_devs_cap(self) -> None:
        """NCCL's IB transport opens at most facts.NCCL_MAX_IB_DEVS ports (an SR-IOV node has more RDMA
        devices): the ``<net>``s past them, in name order, are not NCCL's devices."""
        xml = self.xml
        nets = [n for n in xml.nodes if n.name == "net" and n.parent is not None and n in n.parent.subs
                and (n.get("name") or "") in self.nic_by_name and self.nic_by_name[n.get("name") or ""].rdma]
        if len(nets) <= facts.NCCL_MAX_IB_DEVS:
            return
        # name order (mlx5_2 before mlx5_10): the order the kernel registers them, ibv_get_device_list's
        nets.sort(key=lambda n: (natural_key(n.get("name")), X.strtol(n.get("port") or "1")))
        for net in nets[facts.NCCL_MAX_IB_DEVS:]:
            node = net       # the <net>, then its <nic> and <pci> once nothing else hangs there
            while node.parent is not None and node in node.parent.subs and (node is net or not node.subs) \
                    and node.name in ("net", "nic", "pci"):
                parent = node.parent
                parent.subs.remove(node)
                node = parent
        self.topo.assume(facts.assumption("ib-devs", count=len(nets), first=nets[0].get("name"),
                                          last=nets[facts.NCCL_MAX_IB_DEVS - 1].get("name")))

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
class _UF:
    """Union-find over the matrix's devices (the smaller key names a group)."""

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


def _matrix_tree(topo: Topology) -> tuple:
    """The smallest PCI tree consistent with an ``nvidia-smi topo -m`` matrix: PIX -> same switch, PXB
    -> switches under a common switch, PHB/NODE -> same CPU, SYS -> different CPUs (NVLinked pairs hide
    their PCI relation: their groups merge where nothing says SYS and their NUMA nodes agree).  Returns
    (children: {parent id: [child ids]} from the CPUs ``CPU<numa>`` down, kinds: {id: GPU|NIC|PCI},
    GPUs: {id: (index, sm)})."""
    matrix = topo.matrix
    by_key = {g.key: g.id for g in topo.gpus}
    gpus = {g.id: (g.index, g.sm) for g in topo.gpus}
    nic_by_name = {n.name: n for n in topo.nics}
    devs = [k for k in matrix if k in by_key or k in nic_by_name]
    for k in matrix:      # GPUs only the matrix knows
        if re.match(r"^GPU\d+$", k) and k not in by_key:
            by_key[k] = k
            gpus[k] = (int(k[3:]), None)
            if k not in devs:
                devs.append(k)
    gid_of = {k: (by_key[k] if k in by_key else nic_by_name[k].id) for k in devs}
    numa_of = {}
    for k in devs:
        g = topo.gpu_by_key(k) if k in by_key else None
        numa_of[k] = (g.numa_node if g else None) if k in by_key else nic_by_name[k].numa_node

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
    comps = sorted(cpu_uf.groups().values(), key=lambda g: min(devs.index(x) for x in g))
    groups: list = []
    for comp in comps:
        numas = {numa_of[x] for x in comp if numa_of[x] is not None}
        for grp in groups:
            if any(rel(x, y) == "SYS" for x in comp for y in grp["devs"]):
                continue
            if numas and grp["numas"] and not (numas & grp["numas"]):
                continue
            grp["devs"].extend(comp)
            grp["numas"] |= numas
            break
        else:
            groups.append({"devs": list(comp), "numas": set(numas)})
    edges: list = []      # (child, parent)
    kinds = {gid_of[k]: ("GPU" if k in by_key else "NIC") for k in devs}
    used_numa: set = set()
    all_numas = {x for g2 in groups for x in g2["numas"]}
    for grp in groups:
        numa = min(grp["numas"]) if grp["numas"] else None
        if numa is None or numa in used_numa:
            numa = 0
            while numa in used_numa or numa in all_numas:
                numa += 1
        used_numa.add(numa)
        cpu = cpu_id(numa)
        kinds[cpu] = "CPU"
        pxb_groups: dict = {}
        for x in grp["devs"]:
            pxb_groups.setdefault(pxb.find(x), []).append(x)
        for _root, pg in sorted(pxb_groups.items(), key=lambda kv: min(devs.index(x) for x in kv[1])):
            if len(pg) == 1:
                edges.append((gid_of[pg[0]], cpu))
                continue
            pix_groups: dict = {}
            for x in pg:
                pix_groups.setdefault(pix.find(x), []).append(x)
            top = f"SW:{min(pg, key=devs.index)}"
            kinds[top] = "PCI"
            edges.append((top, cpu))
            if len(pix_groups) == 1:
                edges.extend((gid_of[x], top) for x in pg)
                continue
            for _proot, xg in sorted(pix_groups.items(), key=lambda kv: min(devs.index(x) for x in kv[1])):
                leaf = f"SW:{min(xg, key=devs.index)}/leaf"
                kinds[leaf] = "PCI"
                edges.append((leaf, top))
                edges.extend((gid_of[x], leaf) for x in xg)
    children: dict = {}
    for child, parent in edges:
        children.setdefault(parent, []).append(child)
    return {p: sorted(c) for p, c in children.items()}, kinds, gpus


def _xml_from_matrix(topo: Topology) -> str:
    """An NCCL XML for a document without a PCI tree (a bare ``nvidia-smi topo -m`` matrix): the tree
    :func:`_matrix_tree` rebuilds, with made-up bus ids, NCCL's default PCIe speed of the GPU
    generation (a named assumption), the NVLinks of the view's fabric."""
    children, kinds, gpus = _matrix_tree(topo)
    gen = facts.default_pcie_gen(topo.sm_hint)
    if len(kinds) > len([k for k in kinds if kinds[k] == "CPU"]):
        topo.assume(f"topology matrix only (no PCI tree): PCIe links assumed Gen{gen} x16 "
                    f"({facts.pcie_bw_GBps(gen, 16):g} GB/s), tree rebuilt from the PIX/PXB/PHB/NODE/SYS codes")
    fab = topo.nvlink
    nvl: dict = {}      # GPU id -> [(target id, links, GB/s)] in target order
    for (x, y), (count, bw, _m) in fab.pairs.items():
        if x in gpus and y in gpus:
            nvl.setdefault(x, []).append((y, count, bw))
            nvl.setdefault(y, []).append((x, count, bw))
    for g, (count, bw, _m) in fab.nvs.items():
        if g in gpus:
            nvl.setdefault(g, []).append((NVS_ID, count, bw))
    bus: dict = {}
    counter = [0x10]

    def bus_of(n: str) -> str:
        if n not in bus:
            bus[n] = "0000:%02x:00.0" % counter[0]
            counter[0] += 1
        return bus[n]

    nic_names = {n.id: n.name for n in topo.nics}
    net_dev = [0]
    lines = ['<system version="1">']
    speed = _GEN_SPEED[gen]

    def emit(n: str, depth: int) -> None:
        pad = "  " * depth
        t = kinds.get(n)
        if t == "PCI":
            lines.append(f'{pad}<pci busid="{bus_of(n)}" class="0x060400" link_speed="{speed}" link_width="16">')
            for c in sorted(children.get(n, []), key=bus_of):
                emit(c, depth + 1)
            lines.append(f"{pad}</pci>")
        elif t == "GPU":
            idx, sm = gpus[n]
            sm = sm or facts.DEFAULT_SM
            lines.append(f'{pad}<pci busid="{bus_of(n)}" class="0x030200" link_speed="{speed}" link_width="16">')
            lines.append(f'{pad}  <gpu dev="{idx}" sm="{sm}" rank="{idx}">')
            for v, links, bw in sorted(nvl.get(n, [])):
                # the links the topology counts; a link known by its bandwidth only (rocm-smi's xGMI
                # estimate) as that bandwidth in NCCL's per-link units of the GPU's generation
                count = max(1, int(links or 0), int(round(bw / facts.nvlink_bw_per_link(sm))))
                if v == NVS_ID:
                    lines.append(f'{pad}    <nvlink target="fffffff:ffff:ff" count="{count}" tclass="0x068000"/>')
                else:
                    lines.append(f'{pad}    <nvlink target="{bus_of(v)}" count="{count}" tclass="0x030200"/>')
            lines.append(f"{pad}  </gpu>")
            lines.append(f"{pad}</pci>")
        elif t == "NIC":
            lines.append(f'{pad}<pci busid="{bus_of(n)}" class="0x020700" link_speed="{speed}" link_width="16">')
            lines.append(f"{pad}  <nic>")
            lines.append(f'{pad}    <net name="{nic_names.get(n, n)}" dev="{net_dev[0]}"/>')
            net_dev[0] += 1
            lines.append(f"{pad}  </nic>")
            lines.append(f"{pad}</pci>")

    for c in sorted(k for k, t in kinds.items() if t == "CPU"):
        lines.append(f'  <cpu numaid="{c[3:]}">')
        for ch in sorted(children.get(c, []), key=bus_of):
            emit(ch, 2)
        lines.append("  </cpu>")
    lines.append("</system>")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# What NCCL's model runs on
def nccl_inputs(doc: Union[Topology, dict, str], nodes: int = 1, settings: Optional[NcclSettings] = None,
                nvlink_domain: int = 1) -> tuple:
    """(the XML NCCL loads, the settings it runs with) for ``doc`` (a topology or an NCCL XML text used
    as it is): the pinned XML (:func:`pin`) and ``settings`` (default: the environment's) with NVML's
    P2P status of the document (:func:`p2p_blocked`).  Raises InputError (an NCCL graph file),
    NothingToDo (no GPU), TopologyError (no NIC for nodes in several NVLink domains of ``nvlink_domain``)."""
    s = settings if settings is not None else NcclSettings.from_env()
    if isinstance(doc, str):
        return doc, s
    topo = Topology.of(doc)
    if topo.is_nccl_graph:
        # an NCCL graph file (NCCL_GRAPH_FILE / NCCL_GRAPH_DUMP_FILE) names channels, not the machine:
        # NCCL cannot load it as a topology (ncclTopoGetSystem), so neither does its model
        raise InputError("an NCCL graph file (<graphs>) is not a topology: NCCL's model needs the machine",
                         expected="an NCCL topology XML (<system>), a snapshot or a topology document")
    if not topo.gpus:
        raise NothingToDo("topology has no GPUs")
    if nodes > 1 and not topo.nics and nvlink_domain < nodes:
        raise TopologyError(f"topology has no NICs: --nodes {nodes} needs a network between nodes")
    text = pin(topo)
    if not s.p2p_blocked:
        blocked = p2p_blocked(topo)
        if blocked:
            s = s.replace(p2p_blocked=blocked)
    return text, s


def distinct_gpus(gpus: Optional[Iterable[int]]) -> Optional[tuple]:
    """``gpus`` as a tuple (None: all); InputError when one is listed twice."""
    g = tuple(gpus) if gpus is not None else None
    if g is not None and len(set(g)) != len(g):
        dup = sorted({x for x in g if g.count(x) > 1})
        raise InputError(f"GPU {dup[0]} listed twice", expected="distinct GPU indices")
    return g


def p2p_blocked(topo: Topology) -> frozenset:
    """NVML's P2P status NCCL reads from the driver (``ncclTopoCheckP2p``: nvmlDeviceGetP2PStatus read
    and write must be OK): the (index, index) pairs whose recorded status (``gpus[].p2p``) is not OK."""
    by_bus = {normalize_bus_id(g.pci_bus_id): g.index for g in topo.gpus if g.pci_bus_id}
    out = set()
    for g in topo.gpus:
        for bus, status in (g.p2p or {}).items():
            other = by_bus.get(normalize_bus_id(bus))
            if other is not None and other != g.index and str(status).upper() != "OK":
                out.update({(g.index, other), (other, g.index)})
    return frozenset(out)


_FIRST_HOSTS: dict = {}   # id(view of several hosts) -> (that view, the view of its first host)


def first_host(topo: Topology) -> Topology:
    """The view of the first host of a document of several hosts (:func:`gpucomm.probes.model.host_document`:
    a tray as a document of one node), remembered per view; ``topo`` itself when it has one host."""
    if not topo.multi_host:
        return topo
    got = _FIRST_HOSTS.get(id(topo))
    if got is None or got[0] is not topo:
        if len(_FIRST_HOSTS) >= 16:
            _FIRST_HOSTS.pop(next(iter(_FIRST_HOSTS)))
        got = _FIRST_HOSTS[id(topo)] = (topo, Topology.of(host_document(topo.doc, topo.hosts[0].id)))
    return got[1]


def host_gpus(topo: Topology, gpus: Optional[Iterable[int]]) -> Optional[tuple]:
    """The GPU indices of one host of ``topo`` that ``gpus`` (the document's indices) name: on a document
    of several hosts ``gpus`` must name the same GPUs of every host (InputError otherwise); on one host,
    ``gpus`` as they are.  None for all."""
    g = distinct_gpus(gpus)
    if g is None or not topo.multi_host:
        return g
    by_index = {x.index: x for x in topo.gpus}
    per_host: dict = {}
    for i in g:
        x = by_index.get(i)
        if x is None:
            raise InputError(f"no GPU {i} in topology (has {format_cpulist(sorted(by_index)) or 'none'})")
        per_host.setdefault(x.host, []).append(x.local_index if x.local_index is not None else x.index)
    sets = {tuple(v) for v in per_host.values()}
    if len(per_host) != len(topo.hosts) or len(sets) != 1:
        raise InputError(f"--gpus {','.join(map(str, g))}: a document of {len(topo.hosts)} hosts is used whole; "
                         "name the same GPUs of every host", expected="e.g. 0,1,4,5 for GPUs 0 and 1 of 2 hosts of 4")
    return sets.pop()


__all__ = ["pin", "nccl_inputs", "p2p_blocked", "distinct_gpus", "first_host", "host_gpus"]
