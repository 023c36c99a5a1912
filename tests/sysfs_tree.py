"""Build small synthetic sysfs trees (real Linux layout, relative symlinks) for probe tests.

Used by tests/test_sysfs.py, test_merge.py, test_snapshot.py, test_nvml.py.  Paths and link
targets follow docs/SNAPSHOT_FORMAT.md, e.g.::

    sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0/...      device directories
    sys/bus/pci/devices/0000:18:00.0 -> ../../../devices/pci0000:17/0000:17:01.0/0000:18:00.0
    sys/class/infiniband/mlx5_0 -> ../../devices/pci0000:17/.../0000:1b:00.0/infiniband/mlx5_0
"""
from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Optional

BRIDGE = "0x060400"
GPU_3D = "0x030200"
NIC_ETH = "0x020000"
NIC_IB = "0x020700"
NVSWITCH = "0x068000"


def _w(path: Path, text) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(str(text) + "\n")


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(target, link.parent), link)


def acs_config(ctrl: int, cap: int = 0x5F) -> bytes:
    """A 4 KiB config space whose extended list holds AER (0x0001) then ACS (0x000D)."""
    blob = bytearray(4096)
    struct.pack_into("<HH", blob, 0, 0x10B5, 0x8796)
    struct.pack_into("<I", blob, 0x100, 0x0001 | (1 << 16) | (0x148 << 20))   # AER -> next 0x148
    struct.pack_into("<I", blob, 0x148, 0x000D | (1 << 16) | (0 << 20))       # ACS, end of list
    struct.pack_into("<HH", blob, 0x14C, cap, ctrl)
    return bytes(blob)


class SysfsTree:
    """A fake root: ``root/sys/...``, ``root/proc/cpuinfo``."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.sys = self.root / "sys"
        (self.sys / "bus/pci/devices").mkdir(parents=True, exist_ok=True)

    # -- NUMA / CPU --------------------------------------------------------------------------
    def numa(self, nid: int, cpus: str, mem_kb: int = 1024 * 1024, distances: str = "10") -> None:
        d = self.sys / f"devices/system/node/node{nid}"
        _w(d / "cpulist", cpus)
        _w(d / "distance", distances)
        _w(d / "meminfo", f"Node {nid} MemTotal:       {mem_kb} kB\nNode {nid} MemFree:        1 kB")

    def cpu_online(self, cpus: str) -> None:
        _w(self.sys / "devices/system/cpu/online", cpus)

    def cpuinfo(self, vendor: str = "GenuineIntel", model_name: str = "Intel(R) Xeon(R) Platinum 8480+",
                sockets: int = 2, cpus_per_socket: int = 2, family: int = 6, model: int = 0x8F) -> None:
        blocks = []
        n = 0
        for s in range(sockets):
            for _ in range(cpus_per_socket):
                blocks.append(f"processor\t: {n}\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n"
                              f"model name\t: {model_name}\nphysical id\t: {s}\n")
                n += 1
        _w(self.root / "proc/cpuinfo", "\n".join(blocks))

    def meta(self, **kw) -> None:
        import json

        meta = {"schema": "gpucomm.snapshot/v1", "name": "synthetic", "description": "", "hostname": "synthetic",
                "collected_at": None, "os": None, "kernel": None, "cpu_vendor": None, "cpu_model": None,
                "cpu_arch": "x86_64", "sockets": None, "capture": None, "generated_by": "tests"}
        meta.update(kw)
        _w(self.root / "meta.json", json.dumps(meta))

    # -- PCI ---------------------------------------------------------------------------------
    def host_bridge(self, name: str = "pci0000:17", under: Optional[Path] = None) -> Path:
        d = (under if under is not None else self.sys / "devices") / name
        d.mkdir(parents=True, exist_ok=True)
        return d

    def device(self, parent: Path, bdf: str, cls: str, vendor: str = "0x10de", device: str = "0x2330",
               speed: Optional[str] = "32.0 GT/s PCIe", width: Optional[int] = 16,
               max_speed: Optional[str] = None, max_width: Optional[int] = None, numa: Optional[int] = 0,
               cpulist: Optional[str] = "0-1", config: Optional[bytes] = None, **extra) -> Path:
        d = parent / bdf
        d.mkdir(parents=True, exist_ok=True)
        attrs = {"class": cls, "vendor": vendor, "device": device, "subsystem_vendor": vendor,
                 "subsystem_device": "0x16c1", "current_link_speed": speed, "current_link_width": width,
                 "max_link_speed": max_speed if max_speed is not None else speed,
                 "max_link_width": max_width if max_width is not None else width,
                 "numa_node": numa, "local_cpulist": cpulist}
        attrs.update(extra)
        for k, v in attrs.items():
            if v is not None:
                _w(d / k, v)
        if config is not None:
            _w(d / "config", config)
        _link(self.sys / "bus/pci/devices" / bdf, d)
        return d

    def bridge(self, parent: Path, bdf: str, **kw) -> Path:
        kw.setdefault("vendor", "0x10b5")
        kw.setdefault("device", "0xc010")
        return self.device(parent, bdf, BRIDGE, **kw)

    def switch(self, parent: Path, up_bdf: str, down_bdfs: list, **kw) -> tuple:
        """A PCIe switch: upstream port ``up_bdf`` and its downstream ports; returns (up, [downs])."""
        up = self.bridge(parent, up_bdf, **kw)
        return up, [self.bridge(up, b, **kw) for b in down_bdfs]

    # -- RDMA / net --------------------------------------------------------------------------
    def ib(self, dev: Path, name: str, ports: Optional[dict] = None, node_guid: str = "b859:9f03:00d5:2a0c",
           sys_image_guid: Optional[str] = None, netdev: Optional[str] = None, fw_ver: str = "28.39.1002") -> Path:
        ports = ports if ports is not None else {1: {}}
        d = dev / "infiniband" / name
        _w(d / "node_guid", node_guid)
        _w(d / "sys_image_guid", sys_image_guid or node_guid)
        _w(d / "fw_ver", fw_ver)
        for p, attrs in ports.items():
            a = {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "400 Gb/sec (4X NDR)",
                 "link_layer": "InfiniBand"}
            a.update(attrs)
            for k, v in a.items():
                if v is not None:
                    _w(d / "ports" / str(p) / k, v)
        _link(d / "device", dev)
        _link(self.sys / "class/infiniband" / name, d)
        if netdev:
            self.net(dev, netdev, speed=400000 if "Ethernet" in str(ports) else None)
        return d

    def net(self, dev: Optional[Path], ifname: str, operstate: str = "up", speed: Optional[int] = 100000,
            typ: int = 1, dev_port: int = 0) -> Path:
        if dev is None:
            d = self.sys / "devices/virtual/net" / ifname
        else:
            d = dev / "net" / ifname
            _link(d / "device", dev)
            _w(d / "dev_port", dev_port)
        _w(d / "operstate", operstate)
        if speed is not None:
            _w(d / "speed", speed)
        _w(d / "type", typ)
        _link(self.sys / "class/net" / ifname, d)
        return d


def two_socket_switch_tree(root: Path) -> SysfsTree:
    """Two sockets; socket 0: a PCIe switch holding GPU0, GPU1 and mlx5_0 (IB), a second root
    port with GPU2; socket 1: host bridge with GPU3 and a RoCE NIC (mlx5_1, netdev ens2np0)."""
    t = SysfsTree(root)
    t.numa(0, "0-1", distances="10 21")
    t.numa(1, "2-3", distances="21 10")
    t.cpu_online("0-3")
    t.cpuinfo()
    hb0 = t.host_bridge("pci0000:17")
    rp0 = t.bridge(hb0, "0000:17:01.0", numa=0)
    up, (d0, d1, d2) = t.switch(rp0, "0000:18:00.0", ["0000:19:00.0", "0000:19:01.0", "0000:19:02.0"], numa=0)
    t.device(d0, "0000:1a:00.0", GPU_3D, numa=0)
    t.device(d1, "0000:1b:00.0", GPU_3D, numa=0)
    nic0 = t.device(d2, "0000:1c:00.0", NIC_IB, vendor="0x15b3", device="0x1021", numa=0)
    t.ib(nic0, "mlx5_0", netdev=None)
    rp1 = t.bridge(hb0, "0000:17:02.0", numa=0)
    t.device(rp1, "0000:20:00.0", GPU_3D, numa=0)
    hb1 = t.host_bridge("pci0000:97")
    rp2 = t.bridge(hb1, "0000:97:01.0", numa=1, cpulist="2-3")
    t.device(rp2, "0000:98:00.0", GPU_3D, numa=1, cpulist="2-3")
    rp3 = t.bridge(hb1, "0000:97:02.0", numa=1, cpulist="2-3")
    nic1 = t.device(rp3, "0000:99:00.0", NIC_ETH, vendor="0x15b3", device="0x1021", numa=1, cpulist="2-3")
    t.ib(nic1, "mlx5_1", ports={1: {"link_layer": "Ethernet", "rate": "200 Gb/sec (4X HDR)"}}, netdev="ens2np0",
         node_guid="b859:9f03:00d5:2a0d")
    t.net(None, "lo", operstate="unknown", speed=None, typ=772)
    return t


_VALIDATOR = None


def validate(doc: dict) -> None:
    """Validate a topology document against the shipped JSON Schema (validator built once)."""
    global _VALIDATOR
    if _VALIDATOR is None:
        import json

        import jsonschema

        from gpucomm.probes.model import schema_path

        with open(schema_path()) as f:
            schema = json.load(f)
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        _VALIDATOR = cls(schema)
    _VALIDATOR.validate(doc)
