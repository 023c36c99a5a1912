"""Source ``net``: network interfaces from ``/sys/class/net``.

An interface whose ``device`` link resolves to a PCI function is a physical NIC.  Those that an
RDMA device already covers (the function has ``infiniband/<dev>``: RoCE Ethernet ports, IPoIB) are
left to the ``ib`` source; the others (plain Ethernet, virtio-net in VMs) become NIC records named
after the interface, as NCCL's socket transport sees them (``realpath(/sys/class/net/<if>/device)``,
``speed`` in Mbps; net plugin getProperties, xml.cc ncclTopoFillNet).  Virtual interfaces (``lo``, bridges, docker, veth, ifb,
bonds, VLANs: anything under ``/sys/devices/virtual``) are listed in ``net_interfaces`` only.
"""
from __future__ import annotations

from typing import Optional

from gpucomm.probes.sources.host import Host
from gpucomm.probes.facts import gbps_of_mbps
from gpucomm.probes.model import new_document, nic_record, source_record, warn
from gpucomm.probes.sources.sysfs import PciTree, merge_switch, nearest_bdf

NET_CLASS = "/sys/class/net"

# ARPHRD_* values of /sys/class/net/<if>/type (include/uapi/linux/if_arp.h)
ARPHRD = {1: "Ethernet", 32: "InfiniBand", 772: "loopback", 768: "tunnel", 776: "sit", 65534: "none"}


def parse_speed_mbps(text: Optional[str]) -> Optional[int]:
    """``speed`` in Mb/s; ``-1`` (link down / unknown), 0, junk, absurd values -> None."""
    if text is None:
        return None
    try:
        v = int(text.strip())
    except ValueError:
        return None
    return v if 0 < v <= 10_000_000 else None


def parse_operstate(text: Optional[str]) -> Optional[str]:
    if not text:
        return None
    t = text.strip().lower()
    return t if t in ("up", "down", "unknown", "dormant", "lowerlayerdown", "notpresent", "testing") else None


def parse_type(text: Optional[str]) -> Optional[int]:
    try:
        return int((text or "").strip())
    except ValueError:
        return None


def collect(host: Host) -> dict:
    doc = new_document(host.provenance)
    tree = PciTree(host)
    switches: dict = {}
    links: dict = {}
    nics = []
    ifaces = []
    for ifname in host.listdir(NET_CLASS):
        base = f"{NET_CLASS}/{ifname}"
        real = host.realpath(base)
        operstate = parse_operstate(host.read_text(f"{base}/operstate"))
        speed = parse_speed_mbps(host.read_text(f"{base}/speed"))
        typ = parse_type(host.read_text(f"{base}/type"))
        entry = {"name": ifname, "kind": "virtual", "operstate": operstate, "speed_mbps": speed,
                 "type": ARPHRD.get(typ, typ), "pci_bus_id": None, "rdma": None}
        ifaces.append(entry)
        if real is None:
            entry["kind"] = "unknown"
            warn(doc, f"net: {ifname}: {base} cannot be resolved (broken link)")
            continue
        devreal = host.realpath(f"{base}/device")
        if devreal is None or real.startswith("/sys/devices/virtual/"):
            continue
        entry["kind"] = "physical"
        if host.read_text(f"{base}/phy80211/name") is not None:
            entry["kind"] = "wireless"
            continue
        bdf = nearest_bdf(devreal)
        pd = tree.get(bdf) if bdf else None
        if pd is None:
            continue  # USB / platform NICs: listed, not placed in the PCI tree
        entry["pci_bus_id"] = pd.bdf
        rdma = host.listdir(f"{pd.path}/infiniband")
        if rdma:
            entry["rdma"] = rdma[0]
            continue  # the ib source reports this function under its RDMA name
        parent, nodes, chain_links = tree.place(pd)
        for n in nodes:
            merge_switch(switches, n)
        for l in chain_links:
            links.setdefault((l["a"], l["b"]), l)
        up = tree.uplink(pd.bdf, pd, parent)
        if up:
            links.setdefault((up["a"], up["b"]), up)
        state = {"up": "ACTIVE", "down": "DOWN"}.get(operstate or "", (operstate or "").upper() or None)
        nic = nic_record(ifname, netdev=ifname, pci_bus_id=pd.bdf, numa_node=pd.numa,
                         link_layer="Ethernet" if typ in (1, None) else ARPHRD.get(typ),
                         ports=[{"port": 1, "state": state, "rate_gbps": gbps_of_mbps(speed)}],
                         guid=None, parent=parent, operstate=operstate, cpu_affinity=pd.cpus, rdma=False)
        nics.append(nic)
    doc["nics"] = nics
    doc["switches"] = list(switches.values())
    doc["links"] = list(links.values())
    doc["net_interfaces"] = ifaces
    for w in tree.warnings:
        warn(doc, w)
    n_virtual = sum(1 for i in ifaces if i["kind"] == "virtual")
    doc["sources"] = [source_record("net", "ok", f"{len(ifaces)} interface(s): {len(nics)} non-RDMA PCI NIC(s), "
                                                 f"{n_virtual} virtual")]
    return doc


class _NetSource:
    name = "net"
    priority = 27

    def available(self, host: Host):
        if host.listdir(NET_CLASS):
            return True
        return f"no network interfaces under {host.path(NET_CLASS)}"

    def collect(self, host: Host) -> dict:
        return collect(host)


SOURCE = _NetSource()
