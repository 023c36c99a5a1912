"""sysfs PCI / InfiniBand / net / NUMA sources on synthetic trees built in tmp_path."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucomm.probes.sources import ib
from gpucomm.probes.sources import net
from gpucomm.probes.sources import numa
from gpucomm.probes import facts
from gpucomm.probes.sources import sysfs
from gpucomm.probes.sources.host import Host
from gpucomm.probes.sources.probe import probe_host
from support import (GPU_3D, NIC_ETH, NIC_IB, NVSWITCH, SysfsTree, acs_config, two_socket_switch_tree,
                        validate)



def probe(root, sources=None):
    doc = probe_host(Host(root=Path(root)), sources)
    validate(doc)
    return doc


def by_index(doc):
    return {g["index"]: g for g in doc["gpus"]}


# --------------------------------------------------------------------------------------------
# attribute parsers
@pytest.mark.parametrize("text,gen", [("16.0 GT/s PCIe", 4), ("32.0 GT/s PCIe", 5), ("8.0 GT/s PCIe", 3),
                                      ("2.5 GT/s PCIe", 1), ("5.0 GT/s", 2), ("64.0 GT/s PCIe", 6),
                                      ("32 GT/s PCIe/s", 5), ("Unknown", None), ("", None), (None, None),
                                      ("12.0 GT/s", None), ("fast", None)])
def test_parse_link_speed(text, gen):
    assert sysfs.parse_link_speed(text) == gen


@pytest.mark.parametrize("text,width", [("16", 16), ("8\n", 8), ("0", None), ("-1", None), ("64", None),
                                        ("x16", None), (None, None)])
def test_parse_link_width(text, width):
    assert sysfs.parse_link_width(text) == width


def test_parse_small_attrs():
    assert sysfs.parse_numa("-1") is None and sysfs.parse_numa("3") == 3 and sysfs.parse_numa("x") is None
    assert sysfs.parse_class("0x030200") == 0x030200 and sysfs.parse_class("junk") is None
    assert sysfs.parse_hex_id("0x10DE") == "0x10de" and sysfs.parse_hex_id("0x123456") is None
    assert sysfs.parse_cpus("0-3,8,9") == "0-3,8-9"
    assert sysfs.parse_cpus(None, "00000000,0000000f") == "0-3"
    assert sysfs.parse_cpus("garbage", None) is None


def test_split_pci_path_vmd_and_hyperv():
    hb, chain = sysfs.split_pci_path("/sys/devices/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:1d.0/10000:e1:00.0")
    assert hb == "pci10000:e0" and chain == ["10000:e0:1d.0", "10000:e1:00.0"]
    hb, chain = sysfs.split_pci_path("/sys/devices/LNXSYSTM:00/LNXSYBUS:00/PNP0A03:00/device:07/VMBUS:01/"
                                     "47505500-0001-0000-3130-444531303244/pci0001:00/0001:00:00.0")
    assert hb == "pci0001:00" and chain == ["0001:00:00.0"]
    assert sysfs.nearest_bdf("/sys/devices/pci0000:00/0000:00:03.0/virtio2") == "0000:00:03.0"
    assert sysfs.nearest_bdf("/sys/devices/virtual/net/lo") is None


def test_parse_acs():
    acs = sysfs.parse_acs(acs_config(0x001D))
    assert acs["ctrl"] == 0x1D and acs["ctrl_flags"] == ["SV", "RR", "CR", "UF"]
    assert sysfs.parse_acs(acs_config(0)) == {"cap": 0x5F, "ctrl": 0, "ctrl_flags": []}
    assert sysfs.parse_acs(b"\x00" * 64) is None          # non-root readers only see 64 bytes
    loop = bytearray(4096)
    loop[0x100:0x104] = (0x0001 | (0x100 << 20)).to_bytes(4, "little")  # points at itself
    assert sysfs.parse_acs(bytes(loop)) is None


@given(st.binary(min_size=0, max_size=600))
@settings(max_examples=80, deadline=None)
def test_parse_acs_never_crashes(blob):
    r = sysfs.parse_acs(blob + b"\x00" * (0x100 - min(len(blob), 0x100)) + blob)
    assert r is None or set(r) == {"cap", "ctrl", "ctrl_flags"}


# --------------------------------------------------------------------------------------------
# trees
def test_switch_gpu_and_nic_is_pix_two_sockets_sys(tmp_path):
    two_socket_switch_tree(tmp_path)
    doc = probe(tmp_path)
    m = doc["matrix"]
    assert m["GPU0"]["GPU1"] == "PIX" and m["GPU0"]["mlx5_0"] == "PIX"
    assert m["GPU0"]["GPU2"] == "PHB"          # same host bridge, different root ports
    assert m["GPU0"]["GPU3"] == "SYS" and m["GPU3"]["mlx5_1"] == "PHB"
    g = by_index(doc)
    assert [g[i]["pci_bus_id"] for i in range(4)] == ["0000:1a:00.0", "0000:1b:00.0", "0000:20:00.0", "0000:98:00.0"]
    assert g[0]["parent"] == "0000:18:00.0" and g[2]["parent"] == "pci0000:17" and g[3]["parent"] == "pci0000:97"
    assert g[3]["numa_node"] == 1 and g[3]["cpu_affinity"] == "2-3" and g[3]["numa_affinity"] == [1]
    sw = {s["id"]: s for s in doc["switches"]}
    assert sw["0000:18:00.0"]["kind"] == "pcie" and sw["0000:18:00.0"]["parent"] == "pci0000:17"
    assert sw["pci0000:17"]["kind"] == "host_bridge" and sw["pci0000:17"]["parent"] == "CPU0"
    assert sw["pci0000:97"]["numa_node"] == 1
    # root ports and downstream ports are not nodes
    assert not any(s["id"] in ("0000:17:01.0", "0000:19:00.0") for s in doc["switches"])
    links = {(l["a"], l["b"]): l for l in doc["links"]}
    assert links[("0000:1a:00.0", "0000:18:00.0")]["bw_GBps"] == 48.0
    assert links[("CPU0", "CPU1")]["kind"] == "smp" and links[("CPU0", "CPU1")]["bw_GBps"] == 22.0  # SPR
    nics = {n["name"]: n for n in doc["nics"]}
    assert nics["mlx5_0"]["parent"] == "0000:18:00.0" and nics["mlx5_0"]["link_layer"] == "InfiniBand"
    assert nics["mlx5_0"]["ports"][0]["rate_gbps"] == 400.0 and nics["mlx5_0"]["ports"][0]["state"] == "ACTIVE"
    assert nics["mlx5_1"]["netdev"] == "ens2np0" and nics["mlx5_1"]["link_layer"] == "Ethernet"
    assert {s["name"]: s["status"] for s in doc["sources"]} == {
        "nvml": "unavailable", "smi": "unavailable", "sysfs": "ok", "ib": "ok", "net": "ok", "numa": "ok",
        # a sysfs tree records no software path (docs/SWPATH.md): not recorded
        **{k: "unavailable" for k in ("driver", "nccl", "netplugin", "gdr", "iommu", "hypervisor", "services")}}
    assert doc["host"]["sockets"] == 2 and doc["host"]["cpu_vendor"] == "GenuineIntel"
    assert [n["id"] for n in doc["numa_nodes"]] == [0, 1] and doc["numa_nodes"][1]["distances"] == [21, 10]
    assert doc["numa_nodes"][0]["memory_bytes"] == 1024 * 1024 * 1024
    assert doc["warnings"] == []


def test_roce_netdev_left_to_ib_and_listed(tmp_path):
    two_socket_switch_tree(tmp_path)
    doc = probe(tmp_path)
    names = [n["name"] for n in doc["nics"]]
    assert "ens2np0" not in names and "lo" not in names
    ifs = {i["name"]: i for i in doc["net_interfaces"]}
    assert ifs["ens2np0"]["rdma"] == "mlx5_1" and ifs["ens2np0"]["pci_bus_id"] == "0000:99:00.0"
    assert ifs["lo"]["kind"] == "virtual"


def test_nested_switches_give_pxb(tmp_path):
    t = SysfsTree(tmp_path)
    t.numa(0, "0-3")
    hb = t.host_bridge("pci0000:00")
    rp = t.bridge(hb, "0000:00:01.0")
    up1, (d10, d11) = t.switch(rp, "0000:01:00.0", ["0000:02:00.0", "0000:02:01.0"])
    up2, (d20,) = t.switch(d10, "0000:03:00.0", ["0000:04:00.0"])
    t.device(d20, "0000:05:00.0", GPU_3D)
    t.device(d11, "0000:06:00.0", GPU_3D)
    doc = probe(tmp_path)
    assert doc["matrix"]["GPU0"]["GPU1"] == "PXB"
    g = by_index(doc)
    assert g[0]["parent"] == "0000:03:00.0" and g[1]["parent"] == "0000:01:00.0"
    sw = {s["id"]: s for s in doc["switches"]}
    assert sw["0000:03:00.0"]["parent"] == "0000:01:00.0"
    assert len([s for s in doc["switches"] if s["kind"] == "pcie"]) == 2


def test_two_host_bridges_one_numa_node_is_node(tmp_path):
    t = SysfsTree(tmp_path)
    t.numa(0, "0-3")
    for hbn, rp, dev in (("pci0000:15", "0000:15:01.0", "0000:16:00.0"), ("pci0000:35", "0000:35:01.0", "0000:36:00.0")):
        hb = t.host_bridge(hbn)
        t.device(t.bridge(hb, rp), dev, GPU_3D)
    doc = probe(tmp_path)
    assert doc["matrix"]["GPU0"]["GPU1"] == "NODE"


def test_down_trained_link(tmp_path):
    t = SysfsTree(tmp_path)
    t.numa(0, "0-3")
    rp = t.bridge(t.host_bridge(), "0000:17:01.0")
    t.device(rp, "0000:18:00.0", GPU_3D, speed="2.5 GT/s PCIe", max_speed="32.0 GT/s PCIe", width=8, max_width=16)
    doc = probe(tmp_path)
    g = doc["gpus"][0]
    assert g["pcie"] == {"gen": 1, "width": 8, "max_gen": 5, "max_width": 16}
    link = next(l for l in doc["links"] if l["a"] == "0000:18:00.0")
    # idle GPUs drop speed (NCCL uses max speed) but a narrower trained width is real
    assert (link["gen"], link["width"], link["bw_GBps"]) == (5, 8, 24.0)


def test_link_uses_slower_of_device_and_port(tmp_path):
    t = SysfsTree(tmp_path)
    t.numa(0, "0-3")
    rp = t.bridge(t.host_bridge(), "0000:17:01.0", speed="16.0 GT/s PCIe")
    t.device(rp, "0000:18:00.0", GPU_3D, speed="32.0 GT/s PCIe")
    doc = probe(tmp_path)
    link = next(l for l in doc["links"] if l["a"] == "0000:18:00.0")
    assert (link["gen"], link["bw_GBps"]) == (4, 24.0)


def test_ib_port_down(tmp_path):
    t = SysfsTree(tmp_path)
    t.numa(0, "0-3")
    rp = t.bridge(t.host_bridge(), "0000:17:01.0")
    nic = t.device(rp, "0000:18:00.0", NIC_IB, vendor="0x15b3")
    t.ib(nic, "mlx5_3", ports={1: {"state": "1: DOWN", "phys_state": "3: Disabled", "rate": "10 Gb/sec (4X SDR)"}})
    doc = probe(tmp_path)
    nic = doc["nics"][0]
    assert nic["ports"][0]["state"] == "DOWN" and nic["ports"][0]["phys_state"] == "Disabled"
    assert nic["ports"][0]["rate_gbps"] == 10.0
    assert "0 active port(s)" in next(s["detail"] for s in doc["sources"] if s["name"] == "ib")


def test_plain_ethernet_nic_and_virtio(tmp_path):
    t = SysfsTree(tmp_path)
    t.numa(0, "0-3")
    hb = t.host_bridge("pci0000:00")
    eth = t.device(hb, "0000:00:03.0", NIC_ETH, vendor="0x1af4", device="0x1041", numa="-1", speed=None, width=None)
    virt = eth / "virtio2"
    virt.mkdir()
    t.net(virt, "eth0", speed=-1)
    (virt / "net/eth0/device").unlink()
    os.symlink("../../../virtio2", virt / "net/eth0/device")
    t.net(None, "docker0", operstate="down")
    t.device(hb, "0000:00:05.0", GPU_3D, numa="-1")
    doc = probe(tmp_path)
    assert [n["name"] for n in doc["nics"]] == ["eth0"]
    assert doc["matrix"] == {"GPU0": {"GPU0": "X"}}   # like nvidia-smi: only RDMA NICs get columns
    nic = doc["nics"][0]
    assert nic["pci_bus_id"] == "0000:00:03.0" and nic["parent"] == "pci0000:00" and nic["numa_node"] is None
    assert nic["ports"] == [{"port": 1, "state": "ACTIVE", "rate_gbps": None}]
    assert {i["name"]: i["kind"] for i in doc["net_interfaces"]} == {"eth0": "physical", "docker0": "virtual"}
    # numa_node -1 on a one-node machine: the host bridge is that node's
    assert next(s for s in doc["switches"] if s["id"] == "pci0000:00")["parent"] == "CPU0"


def test_gpu_less_host_reports_pci_devices(tmp_path):
    t = SysfsTree(tmp_path)
    t.numa(0, "0-1")
    hb = t.host_bridge("pci0000:00")
    t.device(hb, "0000:00:00.0", "0x060000", vendor="0x8086", speed=None, width=None)
    t.device(hb, "0000:00:02.0", "0x010802", vendor="0x144d", speed=None, width=None)   # NVMe
    t.device(hb, "0000:00:04.0", "0x030000", vendor="0x1a03", speed=None, width=None)   # ASPEED BMC VGA
    doc = probe(tmp_path)
    assert doc["gpus"] == []  # a BMC VGA is not a GPU
    devs = {d["bdf"]: d for d in doc["pci_devices"]}
    assert devs["0000:00:02.0"]["class"] == "0x010802" and devs["0000:00:04.0"]["role"] == "other"


def test_nvswitch_amd_gpu_and_acs(tmp_path):
    t = SysfsTree(tmp_path)
    t.numa(0, "0-3")
    rp = t.bridge(t.host_bridge(), "0000:17:01.0")
    up, (d0, d1) = t.switch(rp, "0000:18:00.0", ["0000:19:00.0", "0000:19:01.0"])
    (d0 / "config").write_bytes(acs_config(0x1D))
    t.device(d0, "0000:1a:00.0", NVSWITCH, device="0x22a3")
    t.device(d1, "0000:1b:00.0", "0x038000", vendor="0x1002", device="0x74a1")
    doc = probe(tmp_path)
    sw = {s["id"]: s for s in doc["switches"]}
    assert sw["0000:1a:00.0"]["kind"] == "nvswitch" and sw["0000:1a:00.0"]["parent"] == "0000:18:00.0"
    assert sw["0000:18:00.0"]["acs"] == {"0000:19:00.0": ["SV", "RR", "CR", "UF"]}
    assert doc["gpus"][0]["vendor"] == "amd"


def test_iommu_and_gdr_host_facts(tmp_path):
    t = SysfsTree(tmp_path)
    t.numa(0, "0-1")
    t.device(t.bridge(t.host_bridge(), "0000:17:01.0"), "0000:18:00.0", GPU_3D)
    (tmp_path / "sys/kernel/iommu_groups/0").mkdir(parents=True)
    (tmp_path / "sys/kernel/iommu_groups/0/type").write_text("identity\n")
    (tmp_path / "sys/module/nvidia_peermem").mkdir(parents=True)
    (tmp_path / "sys/module/nvidia_peermem/version").write_text("550.90.07\n")
    doc = probe(tmp_path)
    assert doc["host"]["iommu"] == "identity" and doc["host"]["gdr"] == "nvidia_peermem"


def test_missing_and_broken_files_warn_without_crash(tmp_path):
    t = SysfsTree(tmp_path)
    t.numa(0, "0-3")
    rp = t.bridge(t.host_bridge(), "0000:17:01.0")
    g = t.device(rp, "0000:18:00.0", GPU_3D)
    (g / "numa_node").unlink()
    os.symlink("does-not-exist", g / "numa_node")          # broken symlink
    (g / "max_link_width").unlink()
    (g / "max_link_width").mkdir()                          # a directory where a file is expected
    (g / "current_link_speed").write_text("fast\n")         # junk
    bad = t.device(rp, "0000:18:00.1", GPU_3D)
    (bad / "class").unlink()
    (bad / "class").mkdir()
    os.symlink("../../../devices/nowhere/0000:99:00.0", tmp_path / "sys/bus/pci/devices/0000:99:00.0")
    (tmp_path / "sys/devices/system/node/node0/distance").write_text("ten twenty\n")
    doc = probe(tmp_path)
    w = "\n".join(doc["warnings"])
    assert "0000:18:00.0: current_link_speed 'fast'" in w
    assert "0000:18:00.1: unreadable or invalid class" in w
    assert "0000:99:00.0: listed in /sys/bus/pci/devices but its device directory cannot be resolved" in w
    assert "distance 'ten twenty'" in w
    gpu = doc["gpus"][0]
    assert gpu["numa_node"] is None and gpu["pcie"]["max_width"] is None and gpu["pcie"]["gen"] is None
    assert next(s for s in doc["sources"] if s["name"] == "sysfs")["status"] == "partial"


def test_empty_root_reports_why(tmp_path):
    doc = probe(tmp_path)
    st_ = {s["name"]: s for s in doc["sources"]}
    assert st_["sysfs"]["status"] == "unavailable" and "no PCI devices" in st_["sysfs"]["detail"]
    assert st_["numa"]["status"] == "unavailable"
    assert doc["gpus"] == [] and doc["matrix"] == {}


def test_no_numa_dir_falls_back_to_cpu_online(tmp_path):
    t = SysfsTree(tmp_path)
    t.cpu_online("0-7")
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/meminfo").write_text("MemTotal:       16384 kB\n")
    doc = probe(tmp_path, ["numa"])
    assert doc["numa_nodes"] == [{"id": 0, "cpus": "0-7", "memory_bytes": 16384 * 1024, "distances": None}]


@pytest.mark.parametrize("vendor,family,model,arch,bw", [
    ("GenuineIntel", 6, 0xCF, "x86_64", 40.0), ("GenuineIntel", 6, 0x8F, "x86_64", 22.0),
    ("GenuineIntel", 6, 0x55, "x86_64", 10.0), ("GenuineIntel", 6, 0x4F, "x86_64", 6.0),
    ("AuthenticAMD", 25, 1, "x86_64", 16.0), (None, None, None, "aarch64", 6.0), ("IBM", None, None, "ppc64le", 32.0),
    ("CentaurHauls", 7, 0x5B, "x86_64", 9.0)])
def test_inter_cpu_bw_matches_nccl(vendor, family, model, arch, bw):
    info = facts.cpu_identity({"vendor": vendor, "familyid": family, "modelid": model, "arch": arch}, None)
    assert facts.inter_cpu_bw(info) == bw


def test_parse_cpuinfo_arm():
    info = numa.parse_cpuinfo("processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd4f\n")
    assert info["cpu_vendor"] == "ARM" and info["cpu_model"] == "Neoverse-V2" and info["arch_hint"] == "aarch64"


@pytest.mark.parametrize("text,expected", [("4: ACTIVE", "ACTIVE"), ("1: DOWN", "DOWN"), ("ACTIVE", "ACTIVE"),
                                           ("junk: 1 2", None), ("", None)])
def test_ib_state(text, expected):
    assert ib.parse_state(text) == expected


def test_ib_rate_and_guid():
    assert ib.parse_rate("400 Gb/sec (4X NDR)") == (400.0, "4X", "NDR")
    assert ib.parse_rate("2.5 Gb/sec (1X SDR)") == (2.5, "1X", "SDR")
    assert ib.parse_rate("100 Gb/sec") == (100.0, None, None)
    assert ib.parse_rate("Unknown") == (None, None, None)
    assert ib.parse_guid("B859:9F03:00D5:2A0C") == "b859:9f03:00d5:2a0c"
    assert ib.parse_guid("0000:0000:0000:0000") is None
    assert net.parse_speed_mbps("-1") is None and net.parse_speed_mbps("400000") == 400000


# --------------------------------------------------------------------------------------------
# fuzz: garbage in every attribute file never crashes and always gives a valid document
_ATTRS = ["current_link_speed", "current_link_width", "max_link_speed", "max_link_width", "numa_node",
          "local_cpulist", "class", "vendor"]
_junk = st.one_of(st.text(max_size=40), st.sampled_from(["-1", "Unknown", "0x", "16.0 GT/s PCIe", "99999999999",
                                                          "0-", "3-1", "1,,2", "\x00\x01", "2.5 GT/s", "0x0604"]))


@pytest.fixture(scope="module")
def fuzz_base(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzzbase")
    two_socket_switch_tree(root)
    return root


@given(values=st.dictionaries(st.sampled_from(_ATTRS), _junk, min_size=1, max_size=6),
       port=st.dictionaries(st.sampled_from(["state", "rate", "phys_state", "link_layer"]), _junk, max_size=4),
       node=st.dictionaries(st.sampled_from(["cpulist", "distance", "meminfo"]), _junk, max_size=3),
       netattrs=st.dictionaries(st.sampled_from(["operstate", "speed", "type", "dev_port"]), _junk, max_size=4),
       which=st.sampled_from(["0000:1a:00.0", "0000:18:00.0", "0000:1c:00.0", "0000:17:01.0"]))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_fuzz_sysfs_attributes(fuzz_base, values, port, node, netattrs, which):
    root = fuzz_base
    dev = Path(os.path.realpath(root / "sys/bus/pci/devices" / which))
    files = [(dev / k, v) for k, v in values.items()]
    files += [(root / "sys/class/infiniband/mlx5_0/ports/1" / k, v) for k, v in port.items()]
    files += [(root / "sys/devices/system/node/node0" / k, v) for k, v in node.items()]
    files += [(root / "sys/class/net/ens2np0" / k, v) for k, v in netattrs.items()]
    saved = {f: f.read_bytes() if f.exists() else None for f, _ in files}
    try:
        for f, v in files:
            f.write_text(v, encoding="utf-8", errors="surrogateescape")
        doc = probe(root)
    finally:  # restore the shared tree for the next example
        for f, data in saved.items():
            if data is None:
                f.unlink(missing_ok=True)
            else:
                f.write_bytes(data)
    from gpucomm.probes.sources.probe import DEFAULT_SOURCES

    assert {s["name"] for s in doc["sources"]} == set(DEFAULT_SOURCES)
    assert not any(s["status"] == "error" for s in doc["sources"]), doc["sources"]
