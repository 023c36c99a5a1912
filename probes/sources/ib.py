"""Source ``ib``: RDMA devices (InfiniBand and RoCE) from ``/sys/class/infiniband``.

Per device: ``node_guid``, ``sys_image_guid`` (what NCCL calls the NIC's guid: ports of one card
share it), ``fw_ver``, the PCI function behind ``device`` (placed in the PCI tree exactly like the
sysfs source places GPUs), the netdevs under ``device/net`` (a RoCE port's Ethernet interface or an
IB port's IPoIB interface), and per port ``state`` (``"4: ACTIVE"``), ``phys_state``
(``"5: LinkUp"``), ``rate`` (``"400 Gb/sec (4X NDR)"``) and ``link_layer``.  NCCL itself asks
libibverbs; these files are the sysfs equivalents (net plugin getProperties, xml.cc ncclTopoFillNet).
"""
from __future__ import annotations

import re
from typing import Optional

from gpucomm.probes.sources.host import Host
from gpucomm.probes.model import new_document, nic_record, source_record, warn
from gpucomm.probes.sources.sysfs import PciTree, merge_switch, nearest_bdf

IB_CLASS = "/sys/class/infiniband"
MAX_GIDS = 1024   # entries of one port's GID table read (ConnectX: 255; RoCE with many VLANs/IPs more)
_ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
_GID_RE = re.compile(r"^[0-9a-fA-F]{4}(:[0-9a-fA-F]{4}){7}$")

_STATE_RE = re.compile(r"^\s*(\d+)\s*:\s*([A-Za-z_][A-Za-z_ ]*?)\s*$")
_WORD_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z_]*)\s*$")
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec(?:\s*\((\d+X)\s*([A-Za-z0-9]+)\))?", re.I)
_GUID_RE = re.compile(r"^[0-9a-fA-F]{4}(:[0-9a-fA-F]{4}){3}$")


def parse_state(text: Optional[str], upper: bool = True) -> Optional[str]:
    """``"4: ACTIVE"`` -> ``"ACTIVE"``; ``"5: LinkUp"`` -> ``"LinkUp"`` (upper=False); junk -> None."""
    if not text:
        return None
    m = _STATE_RE.match(text) or _WORD_RE.match(text)
    if not m:
        return None
    word = m.group(m.lastindex)
    return word.upper() if upper else word


def parse_rate(text: Optional[str]) -> tuple:
    """``"400 Gb/sec (4X NDR)"`` -> (400.0, "4X", "NDR"); junk -> (None, None, None)."""
    if not text:
        return None, None, None
    m = _RATE_RE.match(text)
    if not m:
        return None, None, None
    try:
        v = float(m.group(1))
    except ValueError:  # pragma: no cover - the regex only admits numbers
        return None, None, None
    if not (0 < v < 100_000):
        return None, None, None
    return v, (m.group(2) or None), (m.group(3).upper() if m.group(3) else None)


def parse_guid(text: Optional[str]) -> Optional[str]:
    """``"b859:9f03:00d5:2a0c"`` (lower-cased); all-zero or junk -> None."""
    if not text:
        return None
    t = text.strip().lower()
    if not _GUID_RE.match(t) or set(t) <= {"0", ":"}:
        return None
    return t


def read_gids(host: Host, port_dir: str) -> list:
    """A port's GID table: ``[{index, gid, type}]`` for the non-zero GIDs of ``ports/N/gids/I``
    with their ``gid_attrs/types/I`` (``IB/RoCE v1``, ``RoCE v2``; None where unreadable, as in
    containers that do not map every entry).  What NCCL's RoCE GID choice walks
    (:mod:`gpucomm.planners.nccl.gid`)."""
    out = []
    names = sorted((n for n in host.listdir(f"{port_dir}/gids") if n.isdigit()), key=int)[:MAX_GIDS]
    for n in names:
        gid = (host.read_text(f"{port_dir}/gids/{n}") or "").strip().lower()
        if not _GID_RE.match(gid) or gid == _ZERO_GID:
            continue
        typ = (host.read_text(f"{port_dir}/gid_attrs/types/{n}") or "").strip() or None
        out.append({"index": int(n), "gid": gid, "type": typ[:32] if typ else None})
    return out


def parse_link_layer(text: Optional[str]) -> Optional[str]:
    if not text:
        return None
    t = text.strip().lower()
    return {"infiniband": "InfiniBand", "ethernet": "Ethernet"}.get(t)


def collect(host: Host) -> dict:
    doc = new_document(host.provenance)
    tree = PciTree(host)
    switches: dict = {}
    links: dict = {}
    nics = []
    for dev in host.listdir(IB_CLASS):
        base = f"{IB_CLASS}/{dev}"
        real = host.realpath(base)
        if real is None:
            warn(doc, f"ib: {dev}: {base} cannot be resolved (broken link)")
            continue
        devreal = host.realpath(f"{base}/device")
        bdf = nearest_bdf(devreal)
        pd = tree.get(bdf) if bdf else None
        parent = None
        if pd is not None:
            parent, nodes, chain_links = tree.place(pd)
            for n in nodes:
                merge_switch(switches, n)
            for l in chain_links:
                links.setdefault((l["a"], l["b"]), l)
            up = tree.uplink(pd.bdf, pd, parent)
            if up:
                links.setdefault((up["a"], up["b"]), up)
        elif "/virtual/" not in real:
            warn(doc, f"ib: {dev}: no PCI device behind {base}/device")

        # netdevs of this function, with the port each one serves (dev_port is 0-based)
        netdevs: dict = {}
        if pd is not None:
            for nd in host.listdir(f"{pd.path}/net"):
                dp = host.read_text(f"{pd.path}/net/{nd}/dev_port")
                try:
                    port = int(dp) + 1 if dp is not None else None
                except ValueError:
                    port = None
                netdevs[nd] = port
        ports = []
        for p in host.listdir(f"{base}/ports"):
            if not p.isdigit():
                continue
            pb = f"{base}/ports/{p}"
            raw_state, raw_rate = host.read_text(f"{pb}/state"), host.read_text(f"{pb}/rate")
            rate, width, speed = parse_rate(raw_rate)
            state = parse_state(raw_state)
            if raw_state is not None and state is None:
                warn(doc, f"ib: {dev} port {p}: state {raw_state.strip()[:40]!r} not understood")
            if raw_rate is not None and rate is None and raw_rate.strip().lower() not in ("", "unknown"):
                warn(doc, f"ib: {dev} port {p}: rate {raw_rate.strip()[:40]!r} not understood")
            port_netdev = next((nd for nd, np in sorted(netdevs.items()) if np == int(p)), None)
            if port_netdev is None and len(netdevs) == 1:
                port_netdev = next(iter(netdevs))
            layer = parse_link_layer(host.read_text(f"{pb}/link_layer"))
            ports.append({"port": int(p), "state": state,
                          "phys_state": parse_state(host.read_text(f"{pb}/phys_state"), upper=False),
                          "rate_gbps": rate, "width": width, "speed": speed,
                          "link_layer": layer, "netdev": port_netdev})
            if layer == "Ethernet":     # RoCE: the table NCCL picks its GID index from
                gids = read_gids(host, pb)
                if gids:
                    ports[-1]["gids"] = gids
        ports.sort(key=lambda x: x["port"])
        if not ports:
            warn(doc, f"ib: {dev}: no ports under {base}/ports")
        layers = {p["link_layer"] for p in ports if p["link_layer"]}
        netdev = next((p["netdev"] for p in ports if p["netdev"]), None) or (sorted(netdevs)[0] if netdevs else None)
        nic = nic_record(dev, netdev=netdev, pci_bus_id=pd.bdf if pd else None,
                         numa_node=pd.numa if pd else None,
                         link_layer=(ports[0]["link_layer"] if len(layers) <= 1 and ports else
                                     "/".join(sorted(layers)) or None),
                         ports=ports, guid=parse_guid(host.read_text(f"{base}/node_guid")), parent=parent,
                         sys_image_guid=parse_guid(host.read_text(f"{base}/sys_image_guid")),
                         fw_ver=(host.read_text(f"{base}/fw_ver") or "").strip() or None,
                         cpu_affinity=pd.cpus if pd else None, rdma=True)
        nics.append(nic)
    doc["nics"] = nics
    doc["switches"] = list(switches.values())
    doc["links"] = list(links.values())
    for w in tree.warnings:
        warn(doc, w)
    active = sum(1 for n in nics for p in n["ports"] if p["state"] == "ACTIVE")
    doc["sources"] = [source_record("ib", "ok" if nics else "partial",
                                    f"{len(nics)} RDMA device(s), {active} active port(s)")]
    return doc


class _IbSource:
    name = "ib"
    priority = 25

    def available(self, host: Host):
        if host.listdir(IB_CLASS):
            return True
        return f"no RDMA devices ({IB_CLASS} is absent or empty: no InfiniBand/RoCE driver loaded)"

    def collect(self, host: Host) -> dict:
        return collect(host)


SOURCE = _IbSource()

__all__ = ["SOURCE", "collect", "parse_state", "parse_rate", "parse_guid", "parse_link_layer"]
