"""One function per fact, and one documented default for each: every probe, reader and planner
asks here, so that a fact cannot be computed two ways.

Bandwidths are GB/s (1e9 bytes per second), one direction, as NCCL's graph and nccl-tests use them;
NIC rates are Gb/s.  Sources cited are NCCL 2.30 (src/graph/topo.h, topo.cc, xml.cc), the Linux
kernel's sysfs ABI and the IB verbs/rdma-core conventions.

Where a value is unknown the function returns None; the caller that needs a number takes the one
default defined here (``DEFAULT_*`` / ``default_*``) and states it with :func:`assumption` text, so
that every command says the same thing the same way.  :class:`gpucomm.probes.topology.Topology`
is the one place that applies them to a document.
"""
from __future__ import annotations

import math
import re
from typing import Any, Optional

# --------------------------------------------------------------------------------------------
# Numbers from documents: documents come from users, so a field may hold anything.
MAX_SANE = 1e7   # GB/s, Gb/s, counts: anything larger is a corrupt value, not a machine


def number(v: Any) -> Optional[float]:
    """A usable non-negative finite number, else None (strings, bools, NaN, negative or absurd
    values are never trusted).

    >>> number(12), number("12"), number(float("nan")), number(-1), number(True)
    (12.0, None, None, None, None)
    """
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:   # an int too large for a float
        return None
    if not math.isfinite(f) or f < 0 or f > MAX_SANE:
        return None
    return f


def integer(v: Any) -> Optional[int]:
    """An int (not a bool), else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) else None


# --------------------------------------------------------------------------------------------
# GPU: compute capability and architecture
def compute_capability(value: Any) -> Optional[int]:
    """A compute capability in any spelling a document or tool uses -> NCCL's ``sm``
    (major*10 + minor), else None.

    ``"9.0"``, ``"9"``, ``[9, 0]``, ``(9, 0)``, ``9.0``, ``"sm_90"``, ``"sm90"``, ``"90"`` and ``90``
    all give 90 (NCCL XML ``<gpu sm="90">``, NVML's (major, minor), nvidia-smi's ``9.0``).

    >>> [compute_capability(v) for v in ("9.0", [9, 0], 8.6, "sm_100", 70, "x", None)]
    [90, 90, 86, 100, 70, None, None]
    """
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (list, tuple)):
        if len(value) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in value):
            major, minor = value
            return major * 10 + minor if 0 < major < 100 and 0 <= minor < 10 else None
        return None
    if isinstance(value, int):
        return value if 10 <= value < 1000 else value * 10 if 0 < value < 10 else None
    if isinstance(value, float):
        if not math.isfinite(value) or not 1 <= value < 100:
            return None
        return int(round(value * 10))
    if isinstance(value, str):
        s = value.strip().lower()
        m = re.fullmatch(r"(?:sm_?)?(\d{1,2})\.(\d)", s)
        if m:
            return int(m.group(1)) * 10 + int(m.group(2))
        m = re.fullmatch(r"(?:sm_?)?(\d{1,3})", s)
        if m:
            v = int(m.group(1))
            return v if v >= 10 else v * 10 if v > 0 else None
    return None


# The one default compute capability: NCCL's for a GPU it cannot identify (and what ncclsim assumes),
# whose NVLink and PCIe constants are also the defaults of nvlink_bw_per_link and default_pcie_gen.
DEFAULT_SM = 80


def format_compute_capability(sm: Optional[int]) -> Optional[str]:
    """90 -> ``"9.0"`` (the document's spelling), None -> None."""
    return None if sm is None else f"{sm // 10}.{sm % 10}"


# Architecture by GPU name (for captures that only give a name).  First match wins.
_ARCH_BY_NAME = [
    (r"GB200|GB300|B200|B100|B300|RTX 50\d\d|RTX PRO 6000 Blackwell", "blackwell", 100),
    (r"H100|H200|H800|H20\b|GH200|H100 NVL", "hopper", 90),
    (r"RTX 40\d\d|RTX \d+ Ada|L40|L4\b|L20|RTX 4000 Ada|RTX 6000 Ada", "ada", 89),
    (r"A100|A800|A30\b|A10\b|A10G|A40|A16|A2\b|RTX 30\d\d|RTX A\d+|A6000|A5000|A4000", "ampere", 80),
    (r"V100|TITAN V|Quadro GV100", "volta", 70),
    (r"T4\b|RTX 20\d\d|Quadro RTX|TITAN RTX", "turing", 75),
    (r"P100|P40|P4\b|GTX 10\d\d|TITAN X", "pascal", 60),
    (r"K40|K80|K20", "kepler", 35),
    (r"MI300|MI325|MI355", "cdna3", None),
    (r"MI250|MI210|MI200", "cdna2", None),
    (r"MI100", "cdna1", None),
]
# sm of the parts of an architecture that are not its x.0
_SM_EXCEPTIONS = [(r"GB300|B300", 103),   # Blackwell Ultra: compute capability 10.3 (captures/k8s/005)
                  (r"A10G|A10\b|A40|A16|A2\b|RTX 30\d\d|RTX A\d+|A6000|A5000|A4000", 86),
                  (r"T4\b|RTX 20|Quadro RTX|TITAN RTX", 75)]
_ARCH_BY_SM = [(100, "blackwell"), (90, "hopper"), (89, "ada"), (80, "ampere"), (75, "turing"), (70, "volta"),
               (60, "pascal"), (50, "maxwell"), (30, "kepler")]


def arch_from_name(name: Optional[str]) -> tuple[Optional[str], Optional[int]]:
    """(arch, sm) guessed from a marketing name; (None, None) when unknown.

    >>> arch_from_name("NVIDIA H100 80GB HBM3"), arch_from_name("NVIDIA A10G")
    (('hopper', 90), ('ampere', 86))
    """
    if not name or not isinstance(name, str):
        return None, None
    for pat, arch, sm in _ARCH_BY_NAME:
        if re.search(pat, name, re.I):
            for p2, sm2 in _SM_EXCEPTIONS:
                if re.search(p2, name, re.I):
                    return arch, sm2
            return arch, sm
    return None, None


def arch_from_sm(sm: Optional[int]) -> Optional[str]:
    """Architecture name of a compute capability: 90 -> ``hopper``."""
    if sm is None:
        return None
    for lo, arch in _ARCH_BY_SM:
        if sm >= lo:
            return arch
    return None


def gpu_sm(gpu: dict) -> tuple[Optional[int], Optional[str]]:
    """(sm, where it came from) of a GPU record: its ``compute_capability`` (``"record"``), an
    ``sm`` field (NCCL XML extras, ``"record"``), else its name (``"name"``), else (None, None)."""
    sm = compute_capability(gpu.get("compute_capability"))
    if sm is None:
        sm = compute_capability(gpu.get("sm"))
    if sm is not None:
        return sm, "record"
    sm = arch_from_name(gpu.get("name"))[1]
    return (sm, "name") if sm is not None else (None, None)


# --------------------------------------------------------------------------------------------
# NVLink
NVML_NVLINK_MAX_LINKS = 18   # nvml.h: links per GPU NVML can report (also the default for an unknown GPU)


def max_nvlinks(sm: Optional[int]) -> int:
    """How many NVLinks a GPU of this compute capability can have (NCCL xml.cc
    ``ncclTopoGetXmlFromGpu``: sm<60 0, <70 4, <80 6, <90 12, else 18); unknown sm ->
    :data:`NVML_NVLINK_MAX_LINKS`."""
    if sm is None:
        return NVML_NVLINK_MAX_LINKS
    return 0 if sm < 60 else 4 if sm < 70 else 6 if sm < 80 else 12 if sm < 90 else 18


def nvlink_bw_per_link(sm: Optional[int]) -> float:
    """NCCL's per-link NVLink bandwidth (topo.h ``ncclTopoNVLinkBw``): sm100+ 40.1, sm90 20.6,
    sm86 12, sm80/sm70 20, sm60 18 GB/s; unknown -> 20 (NCCL's SM80 default)."""
    if sm is None:
        return 20.0
    if sm >= 100:
        return 40.1
    if sm >= 90:
        return 20.6
    if sm == 86:
        return 12.0
    if sm >= 70:
        return 20.0
    if sm >= 60:
        return 18.0
    return 20.0


def nvlink_spec_GBps_per_link(sm: Optional[int]) -> Optional[float]:
    """The data sheet's NVLink bandwidth per link and direction (GB/s), which is not NCCL's model
    figure (:func:`nvlink_bw_per_link`): NVLink 1 (P100, sm60) 20; NVLink 2/3/4 (V100, A100, H100:
    sm70/80/90) 25 -- 18 links = the 450 GB/s per direction of the H100 SXM data sheet ("900 GB/s"
    both ways); NVLink 3 bridges of sm86 boards (RTX A6000: 112.5 GB/s over 4 links, both ways)
    14.0625; NVLink 5 (B200/GB200, sm100) 50.  None for an unknown GPU [NVIDIA data sheets, recalled]."""
    if sm is None:
        return None
    if sm >= 100:
        return 50.0
    if sm == 86:
        return 14.0625
    if sm >= 70:
        return 25.0
    if sm >= 60:
        return 20.0
    return None


# --------------------------------------------------------------------------------------------
# PCIe
PCI_GT_TO_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
PCI_GEN_TO_GT = {v: k for k, v in PCI_GT_TO_GEN.items()}
# NCCL's table of PCIe link speeds (topo.cc kvDictPciGen): the ``link_speed`` text (sysfs
# ``max_link_speed``, an NCCL XML's attribute) -> lane speed in 100 Mb/s units, matched by prefix, first
# key first (so AWS's "32 GT/s PCIe/s" reads as "32 GT/s"); the "X.0 GT/s PCIe" spellings are what Linux
# >= 5.7 and NCCL's own dumps write.  A speed no key matches is NCCL_PCI_LANE_DEFAULT (8 GT/s).
# bw = width * lane / 80 (GB/s).
NCCL_PCI_GEN_SPEEDS = (("2.5 GT/s", 15), ("5 GT/s", 30), ("8 GT/s", 60), ("16 GT/s", 120), ("32 GT/s", 240),
                       ("2.5 GT/s PCIe", 15), ("5.0 GT/s PCIe", 30), ("8.0 GT/s PCIe", 60), ("16.0 GT/s PCIe", 120),
                       ("32.0 GT/s PCIe", 240), ("64.0 GT/s PCIe", 480))
NCCL_PCI_LANE_DEFAULT = 60
# by generation: NCCL's lane speed, and the ``link_speed`` text Linux and NCCL write
NCCL_PCI_LANE = {PCI_GT_TO_GEN[float(k.split()[0])]: lane for k, lane in NCCL_PCI_GEN_SPEEDS}
PCI_GEN_SPEED = {PCI_GT_TO_GEN[float(k.split()[0])]: k for k, _ in NCCL_PCI_GEN_SPEEDS if k.endswith(" PCIe")}
LOC_BW = 5000.0   # NCCL topo.h LOC_BW: a device to itself, a NIC directly under a CPU


def pcie_gen_of_lane(lane: Optional[float]) -> Optional[int]:
    """The PCIe generation of one of NCCL's lane speeds (100 Mb/s units): 120 -> 4; None for others.

    >>> pcie_gen_of_lane(120), pcie_gen_of_lane(480), pcie_gen_of_lane(100)
    (4, 6, None)
    """
    for gen, v in NCCL_PCI_LANE.items():
        if v == lane:
            return gen
    return None


def pcie_bw_GBps(gen: Optional[int], width: Optional[int]) -> float:
    """NCCL's PCIe link bandwidth: Gen3 x16 = 12, Gen4 x16 = 24, Gen5 x16 = 48 GB/s.
    Unknown gen -> NCCL's default lane speed (Gen3); width 0/unknown -> 16."""
    lane = NCCL_PCI_LANE.get(gen or 0, NCCL_PCI_LANE_DEFAULT)
    w = width if width else 16
    return w * lane / 80.0


def default_pcie_gen(sm: Optional[int]) -> int:
    """The PCIe generation a GPU of this architecture sits on when a capture does not say:
    Hopper/Blackwell Gen5, Ampere/Ada (and unknown) Gen4, older Gen3."""
    if sm is None:
        return 4
    return 5 if sm >= 90 else 4 if sm >= 80 else 3


# --------------------------------------------------------------------------------------------
# CPU: identity and the inter-socket bandwidth (ncclTopoGetInterCpuBw, topo.cc:60-83)
P9_BW, ARM_BW, AMD_BW = 32.0, 6.0, 16.0
ERP_QPI_BW, SRP_QPI_BW, SKL_QPI_BW, BDW_QPI_BW = 40.0, 22.0, 10.0, 6.0
YONGFENG_ZPI_BW, ZPI_BW = 9.0, 6.0
# NCCL always knows the CPU it runs on (CPUID); a document may not.  The one default: AMD_BW, the
# middle of the modern x86 range (Ice Lake 10 .. Sapphire Rapids 22), stated as an assumption.
DEFAULT_INTER_CPU_BW = AMD_BW

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


def cpu_identity(numa_record: Optional[dict], host: Optional[dict]) -> dict:
    """``{arch, vendor, family, model, name}`` of a NUMA node's CPU, from the ``numa_nodes[]`` record
    (an NCCL XML ``<cpu>`` carries arch/vendor/familyid/modelid) then ``host``; None where unknown.

    arch is ``x86_64``/``arm64``/``ppc64``; vendor ``intel``/``amd``/``zhaoxin`` or as given
    (``GenuineIntel`` and ``AuthenticAMD`` as CPUID spells them are understood); an Intel Xeon
    model *name* gives a CPUID model of its generation when the id is missing."""
    info: dict = {"arch": None, "vendor": None, "family": None, "model": None, "name": None}
    for src in (numa_record or {}, host or {}):
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
                if v is not None and v != "" and not isinstance(v, (dict, list, bool)):
                    info[key] = v
                    break
    for key in ("family", "model"):
        v = info[key]
        if isinstance(v, str):
            try:
                info[key] = int(v, 0)
            except ValueError:
                info[key] = None
        elif not isinstance(v, int):
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
    else:
        info["vendor"] = vendor or None
    arch = str(info["arch"] or "").lower()
    if arch in ("x86_64", "amd64", "x86"):
        info["arch"] = "x86_64"
    elif arch in ("arm64", "aarch64", "arm"):
        info["arch"] = "arm64"
    elif arch.startswith("ppc") or arch.startswith("power"):
        info["arch"] = "ppc64"
    elif info["vendor"] in ("intel", "amd", "zhaoxin"):
        info["arch"] = "x86_64"
    else:
        info["arch"] = arch or None
    if info["vendor"] == "intel" and info["model"] is None and name:
        for pat, model in _INTEL_NAME_MODEL:
            if re.search(pat, name, re.I):
                info["model"], info["family"] = model, 6
                break
    return info


def inter_cpu_bw(cpu: dict) -> Optional[float]:
    """NCCL's SMP bandwidth out of a CPU (``ncclTopoGetInterCpuBw``) for a :func:`cpu_identity`:
    POWER 32, ARM 6, Intel by CPUID model (Emerald Rapids 40, Sapphire Rapids 22, Skylake..Ice
    Lake 10, older 6), AMD 16, Zhaoxin Yongfeng 9 / others 6.  None when the CPU is not identified
    (NCCL would know it); the caller then takes :data:`DEFAULT_INTER_CPU_BW` and says so.

    >>> inter_cpu_bw({"arch": "x86_64", "vendor": "intel", "family": 6, "model": 0x8F})
    22.0
    >>> inter_cpu_bw({"arch": None, "vendor": None, "family": None, "model": None}) is None
    True
    """
    arch, vendor, model, family = cpu.get("arch"), cpu.get("vendor"), cpu.get("model"), cpu.get("family")
    if arch == "ppc64":
        return P9_BW
    if arch == "arm64":
        return ARM_BW
    if vendor == "intel":
        if model is None:
            return None
        if family == 6 or family is None:
            return ERP_QPI_BW if model >= 0xCF else SRP_QPI_BW if model >= 0x8F else \
                SKL_QPI_BW if model >= 0x55 else BDW_QPI_BW
        return BDW_QPI_BW
    if vendor == "amd":
        return AMD_BW
    if vendor == "zhaoxin":
        return YONGFENG_ZPI_BW if (family == 7 and model == 0x5B) else ZPI_BW
    return None


# --------------------------------------------------------------------------------------------
# NICs: rate, state, RDMA
def port_active(state: Any) -> bool:
    """An IB/RoCE port state (``4: ACTIVE``, ``ACTIVE``, ``PORT_ACTIVE``) that carries traffic."""
    return str(state or "").strip().upper().endswith("ACTIVE")


def _ports(nic: dict) -> list:
    ports = nic.get("ports")
    return [p for p in ports if isinstance(p, dict)] if isinstance(ports, list) else []


def nic_rate_gbps(nic: dict) -> Optional[float]:
    """A NIC's rate in Gb/s: the best ACTIVE port, else the best port of any state; None when no
    port gives a usable rate.  The one reading of a NIC's rate: the ports are the record's truth;
    ``nics[].rate_gbps`` is this value, written once by :func:`gpucomm.probes.merge.merge` for the
    reader of a saved document (``jq``), and read by nothing (the view asks here).

    >>> nic_rate_gbps({"ports": [{"state": "DOWN", "rate_gbps": 400}, {"state": "ACTIVE", "rate_gbps": 200}]})
    200.0
    """
    ports = _ports(nic)
    act = [number(p.get("rate_gbps")) for p in ports if port_active(p.get("state"))]
    anyp = [number(p.get("rate_gbps")) for p in ports]
    vals = [v for v in act if v] or [v for v in anyp if v]
    return max(vals) if vals else None


# A NIC's rate on its way to a prediction.  Documents and the view carry Gb/s (nic_rate_gbps,
# Topology.nic_gbps, with its one default).  Two things leave that unit, each through one function:
# * the achievable layer of the cost model takes GB/s: units.gbps_to_GBps;
# * NCCL's model reads the NCCL topology XML gpucomm pins (planners/nccl/pinning.py): the rate goes
#   in as ``<net speed>``, an int in Mb/s as a net plugin reports it (ncclNetProperties_t.speed:
#   nic_speed_mbps; the XML export writes the same), NCCL's XML code reads it back as text (and NIC
#   fusion sums the speeds of the ports it fuses), and ncclTopoAddNet turns it into the float GB/s of
#   the NET node (nccl_net_GBps).  nccl_nic_GBps is that whole trip for one NIC.
NCCL_NET_FALLBACK_MBPS = 10000
"""The speed ncclTopoAddNet (topo.cc) gives a ``<net>`` whose ``speed`` is <= 0 ("Some NICs define
speed = -1")."""


def nic_speed_mbps(gbps: float) -> int:
    """A NIC rate (Gb/s) as NCCL's XML carries it: ``<net speed>``, whole Mb/s.

    >>> nic_speed_mbps(400), nic_speed_mbps(53.125)
    (400000, 53125)
    """
    return int(round(gbps * 1000))


def gbps_of_mbps(mbps: Any) -> Optional[float]:
    """A speed in Mb/s (sysfs ``/sys/class/net/IF/speed``, an NCCL XML's ``<net speed>``) -> Gb/s;
    None for a speed that is not positive (unknown: ``-1`` on virtio).

    >>> gbps_of_mbps(25000), gbps_of_mbps(-1)
    (25.0, None)
    """
    return round(mbps / 1000.0, 3) if isinstance(mbps, (int, float)) and mbps > 0 else None


def nccl_net_GBps(mbps: int) -> float:
    """ncclTopoAddNet's bandwidth of a NET node (GB/s, before NCCL stores it as a C float) from its
    ``<net speed>`` (Mb/s; <= 0: :data:`NCCL_NET_FALLBACK_MBPS`)."""
    return (mbps if mbps > 0 else NCCL_NET_FALLBACK_MBPS) / 8000.0


def nccl_nic_GBps(gbps: float) -> float:
    """What NCCL's system graph holds (GB/s, before the C float) for a NIC of ``gbps`` Gb/s: the whole
    document -> pinned XML text -> NCCL's bandwidth trip (see above).

    >>> nccl_nic_GBps(400), nccl_nic_GBps(0.0001)
    (50.0, 1.25)
    """
    return nccl_net_GBps(nic_speed_mbps(gbps))


SOCKET_NIC_GBPS = 10.0
"""NCCL's socket transport's rate for an interface whose speed it cannot read
(``/sys/class/net/IF/speed`` absent or <= 0, as on virtio NICs in VMs): net_socket.cc
ncclNetSocketGetSpeed, "Could not get speed from ... Defaulting to 10 Gbps" (seen on a live H200 VM)."""


def default_nic_gbps(sm: Optional[int], rdma: bool = True) -> float:
    """The one default rate of a NIC whose rate is unknown.  An RDMA NIC (IB/RoCE/EFA, whose rate the
    verbs port gives NCCL): the rail NIC of the GPU generation (Hopper and later 400 Gb/s NDR, Ampere
    200 Gb/s HDR, older or unknown 100 Gb/s EDR).  A plain interface (NCCL's socket transport):
    :data:`SOCKET_NIC_GBPS`, what NCCL itself assumes.

    >>> default_nic_gbps(90), default_nic_gbps(90, rdma=False)
    (400.0, 10.0)
    """
    if not rdma:
        return SOCKET_NIC_GBPS
    if sm is None:
        return 100.0
    return 400.0 if sm >= 90 else 200.0 if sm >= 80 else 100.0


# --------------------------------------------------------------------------------------------
# InfiniBand link speeds (IBTA; infiniband-diags' dump_linkspeed / iblinkinfo, ibstat's "Rate")
IB_LANE_GBPS = {"SDR": 2.5, "DDR": 5.0, "QDR": 10.0, "FDR10": 10.0, "FDR": 14.0, "EDR": 25.0,
                "HDR": 50.0, "NDR": 100.0, "XDR": 200.0}
"""Nominal Gb/s of one lane per IB speed, as ``ibstat``'s ``Rate`` counts them (4X EDR = 100,
4X HDR = 200, 4X FDR10 = 40): a link's rate is its width times this."""

IB_LANE_SIGNAL_GBPS = {2.5: "SDR", 5.0: "DDR", 10.0: "QDR", 10.3125: "FDR10", 14.0625: "FDR",
                       25.78125: "EDR", 53.125: "HDR", 106.25: "NDR", 212.5: "XDR"}
"""The per-lane signalling rate ``iblinkinfo`` prints (``4X 25.78125 Gbps``) -> the IB speed name."""


def ib_speed_name(lane_gbps: Any) -> Optional[str]:
    """The IB speed of a lane signalling rate as iblinkinfo prints it (``25.78125`` -> ``EDR``;
    ``53.125`` -> ``HDR``); None when it is none of IBTA's.

    >>> ib_speed_name("25.78125"), ib_speed_name(10.0), ib_speed_name(7)
    ('EDR', 'QDR', None)
    """
    try:
        v = float(lane_gbps)
    except (TypeError, ValueError):
        return None
    for rate, name in IB_LANE_SIGNAL_GBPS.items():
        if abs(v - rate) < 1e-3:
            return name
    return None


def ib_rate_gbps(width: Any, speed: Optional[str]) -> Optional[float]:
    """A link's nominal rate (Gb/s, as ibstat's ``Rate``) from its width (``4x``, ``4X`` or 4) and
    speed name (``EDR``); None when either is unknown.

    >>> ib_rate_gbps("4x", "EDR"), ib_rate_gbps(4, "HDR"), ib_rate_gbps("1X", "SDR"), ib_rate_gbps("4x", "???")
    (100.0, 200.0, 2.5, None)
    """
    m = re.fullmatch(r"(\d{1,2})[xX]?", str(width if width is not None else "").strip())
    w = int(m.group(1)) if m else None
    lane = IB_LANE_GBPS.get(str(speed or "").upper())
    if not w or lane is None:
        return None
    return float(w) * lane


def nic_is_up(nic: dict) -> bool:
    """False when the NIC lists ports and none is ACTIVE (an unplugged or down HCA)."""
    ports = _ports(nic)
    return not ports or any(port_active(p.get("state")) for p in ports)


def nic_active_ports(nic: dict) -> list[int]:
    """Port numbers NCCL would use (the ACTIVE ones; else the first known port; else port 1)."""
    ports = _ports(nic)
    act = [p.get("port") for p in ports if port_active(p.get("state")) and integer(p.get("port")) is not None]
    if act:
        return sorted(act)
    known = [p.get("port") for p in ports if integer(p.get("port")) is not None]
    return sorted(known)[:1] or [1]


# RDMA (verbs) device names: mlx4_/mlx5_ (NVIDIA/Mellanox, incl. mlx5_bond_0), bnxt_re (Broadcom),
# irdma (Intel), efa (AWS), qedr, hfi1, rxe/siw (soft RoCE/iWARP), erdma, ionic, cxgb4, hns, and
# rdma-core's persistent names (rocep49s0, ibp12s0...).  ``nvidia-smi topo -m`` lists NICs by these
# names only, so a capture's NIC legend names RDMA devices.
_RDMA_NAME_RE = re.compile(r"^(mlx\d+_|bnxt_re|irdma|efa|qedr|hfi\d|rxe|siw|erdma|ionic_|cxgb|hns_?\d|roce[ps]|ibp)",
                           re.I)


def nic_is_rdma(nic: dict) -> bool:
    """An RDMA device (InfiniBand HCA, RoCE or EFA port: NCCL's IB/net plugin) rather than a plain
    interface for NCCL's socket transport.  In order, the first that applies decides:

    1. the probes' own ``rdma`` flag (sysfs knows);
    2. a non-zero node ``guid``: only RDMA devices have one (``/sys/class/infiniband/*/node_guid``);
       a record named after its own netdev (``eno1``) is the plain interface;
    3. link layer InfiniBand, or IB-style ``ports`` (the ib probe lists ports of RDMA devices only);
    4. PCI ids of an RDMA controller: class 0x0207 (InfiniBand), vendor 0x15b3 (Mellanox/NVIDIA
       ConnectX, RoCE in Ethernet mode), AWS EFA (0x1d0f:0xefa*);
    5. an RDMA device name (``mlx5_0``, ``efa0``, ``rocep49s0``, ...);
    otherwise a plain interface (``eno1``, ``eth0``).

    >>> nic_is_rdma({"name": "eth0", "guid": "0x1234"}), nic_is_rdma({"name": "eth0", "netdev": "eth0"})
    (True, False)
    """
    flag = nic.get("rdma")
    if isinstance(flag, bool):
        return flag
    guid = str(nic.get("guid") or "").lower().replace("0x", "").replace(":", "").strip()
    if guid.strip("0"):
        return True
    if nic.get("netdev") and nic.get("name") == nic.get("netdev"):
        return False   # a record named after its interface (``eno1``) is the interface itself
    if str(nic.get("link_layer") or "").lower() == "infiniband" or _ports(nic):
        return True
    ids = nic.get("pci_ids") if isinstance(nic.get("pci_ids"), dict) else {}
    cls, vendor = str(ids.get("class") or "").lower(), str(ids.get("vendor") or "").lower()
    device = str(ids.get("device") or "").lower()
    if cls.startswith("0x0207") or vendor == "0x15b3" or _efa_ids(vendor, device):
        return True
    return bool(_RDMA_NAME_RE.match(str(nic.get("name") or "")))


OFI_AWS_NET_LATENCY_US = 75.0
"""The network latency (us) the aws-ofi-nccl plugin reports to NCCL for AWS EFA devices
(``ncclNetProperties.latency``; src/platform-aws.c(pp): 75 us on p4d, p4de, p5, p5e, g5 and trn and for
instance types it does not list, 150 us on p3dn; from plugin 1.15 on, 35 us on p5en and p6 -- a
topology cannot tell those apart, so 75 is the default and an NCCL topology dump's own value wins;
"NET/OFI Internode latency set at 75.0 us" in the p5 log of
fixtures/captures/nccltests/scaling/evidence/).  NCCL's tuning model adds it to every network step's
latency (twice for Simple: the flush), so it moves NCCL's algorithm and protocol choices.  NCCL's own
IB and socket transports report 0 ("Not set")."""


def _efa_ids(vendor: str, device: str) -> bool:
    """PCI ids of an AWS Elastic Fabric Adapter (0x1d0f:0xefa*), lower-case hex strings."""
    return vendor == "0x1d0f" and device.startswith("0xefa")


def nic_is_efa(nic: dict) -> bool:
    """An AWS Elastic Fabric Adapter: PCI ids 0x1d0f:0xefa*, or an ``efa``/``rdmap`` device name."""
    ids = nic.get("pci_ids") if isinstance(nic.get("pci_ids"), dict) else {}
    if _efa_ids(str(ids.get("vendor") or "").lower(), str(ids.get("device") or "").lower()):
        return True
    return bool(re.match(r"^(efa|rdmap)", str(nic.get("name") or ""), re.I))


def nic_recorded_latency_us(nic: dict) -> Optional[float]:
    """The ``latency`` an NCCL topology dump recorded for this NIC (what its plugin reported), or None."""
    attrs = nic.get("nccl_attrs") if isinstance(nic.get("nccl_attrs"), dict) else {}
    raw = attrs.get("latency")     # the XML's text ("0.000000"), as NCCL's strtof reads it
    try:
        return number(float(raw[:32])) if isinstance(raw, str) else number(raw)
    except ValueError:
        return None


def nic_net_latency_us(nic: dict) -> Optional[float]:
    """The latency NCCL's network plugin reports for this NIC (``ncclNetProperties.latency``, us), or
    None when nothing says it differs from NCCL's 0: the NCCL dump's own value
    (:func:`nic_recorded_latency_us`), else :data:`OFI_AWS_NET_LATENCY_US` for an EFA device.

    >>> nic_net_latency_us({"name": "rdmap16s27"}), nic_net_latency_us({"name": "mlx5_0"})
    (75.0, None)
    """
    lat = nic_recorded_latency_us(nic)
    if lat is not None:
        return lat
    return OFI_AWS_NET_LATENCY_US if nic_is_efa(nic) else None


# --------------------------------------------------------------------------------------------
# Multi-node NVLink fabric (GB200/GB300 NVL72): NVML's fabric info, as nvml.h defines it
FABRIC_STATES = ("not_supported", "not_started", "in_progress", "completed")
"""nvmlGpuFabricState_t by value (NVML_GPU_FABRIC_STATE_*); NCCL forms a clique only of GPUs whose
state is ``completed`` (mnnvl.cc ncclMnnvlCheck)."""

# nvmlGpuFabricInfo_v2 healthMask: (field, shift, width, {value: meaning}), nvml.h
# NVML_GPU_FABRIC_HEALTH_MASK_*; value 0 is "not supported" for every field.  A bad meaning is
# one :func:`fabric_health_problems` reports.
FABRIC_HEALTH_FIELDS = (
    ("degraded_bw", 0, 0x3, {1: "degraded", 2: "full"}),
    ("route_recovery", 2, 0x3, {1: "in_progress", 2: "none"}),
    ("route_unhealthy", 4, 0x3, {1: "unhealthy", 2: "healthy"}),
    ("access_timeout_recovery", 6, 0x3, {1: "in_progress", 2: "none"}),
    ("incorrect_configuration", 8, 0xF, {1: "none", 2: "incorrect_sysguid", 3: "incorrect_chassis_sn",
                                         4: "no_partition", 5: "insufficient_nvlinks", 6: "incompatible_gpu_fw",
                                         7: "invalid_location", 8: "gpu_state_invalid"}),
    ("partition_assigned", 12, 0x3, {1: "assigned", 2: "not_assigned"}),
    ("gfm_state", 14, 0x3, {1: "connected", 2: "disconnected"}),
)
FABRIC_HEALTH_GOOD = {"degraded_bw": "full", "route_recovery": "none", "route_unhealthy": "healthy",
                      "access_timeout_recovery": "none", "incorrect_configuration": "none",
                      "partition_assigned": "assigned", "gfm_state": "connected"}
FABRIC_HEALTH_SUMMARIES = {1: "healthy", 2: "unhealthy", 3: "limited_capacity"}
"""nvmlGpuFabricInfo_v3 healthSummary (NVML_GPU_FABRIC_HEALTH_SUMMARY_*); 0 = not supported."""


def decode_fabric_health(mask: Optional[int]) -> dict:
    """NVML's fabric health mask -> {field: meaning} for the fields the driver reports (value != 0).

    >>> decode_fabric_health(0x1aa)     # NCCL logs 0x1aa on healthy GB300 trays (capture 014)
    {'degraded_bw': 'full', 'route_recovery': 'none', 'route_unhealthy': 'healthy', \
'access_timeout_recovery': 'none', 'incorrect_configuration': 'none'}
    """
    out: dict = {}
    if not isinstance(mask, int) or isinstance(mask, bool) or mask < 0:
        return out
    for name, shift, width, meanings in FABRIC_HEALTH_FIELDS:
        v = (mask >> shift) & width
        if v:
            out[name] = meanings.get(v, f"unknown_{v}")
    return out


def encode_fabric_health(fields: dict) -> int:
    """The inverse of :func:`decode_fabric_health` ({field: meaning} -> mask); unknown fields and
    meanings contribute 0 ("not supported")."""
    mask = 0
    for name, shift, _width, meanings in FABRIC_HEALTH_FIELDS:
        want = fields.get(name)
        code = next((k for k, v in meanings.items() if v == want), 0)
        mask |= code << shift
    return mask


def fabric_health_problems(mask: Optional[int]) -> list:
    """The fields of a health mask whose meaning is not the healthy one, as ``field=meaning``."""
    return [f"{k}={v}" for k, v in decode_fabric_health(mask).items() if FABRIC_HEALTH_GOOD.get(k) != v]


def cluster_uuid_from_bytes(raw: Any) -> Optional[str]:
    """NVML's 16-byte ``clusterUuid`` -> the UUID text nvidia-smi -q and GPU Feature Discovery print
    (``dc6e40c4-d722-4357-9ba6-5291dd461278``); None for all zeros (no fabric) or a wrong length."""
    import uuid as _uuid

    try:
        b = bytes(bytearray(raw))
    except (TypeError, ValueError):
        return None
    if len(b) != 16 or not any(b):
        return None
    return str(_uuid.UUID(bytes=b))


def cluster_uuid_from_nccl(text: Any) -> Optional[str]:
    """NCCL's spelling of a cluster UUID (init.cc ``fabric UUID %lx.%lx``: the 16 bytes as two
    little-endian 64-bit words) -> the UUID text; None when it is not two hex words.

    >>> cluster_uuid_from_nccl("3143b15bc2cd192b.28cc9b5473fb5b93")
    '2b19cdc2-5bb1-4331-935b-fb73549bcc28'
    """
    m = re.fullmatch(r"([0-9a-fA-F]{1,16})\.([0-9a-fA-F]{1,16})", str(text).strip()) if text is not None else None
    if not m:
        return None
    raw = int(m.group(1), 16).to_bytes(8, "little") + int(m.group(2), 16).to_bytes(8, "little")
    return cluster_uuid_from_bytes(raw)


def normalize_cluster_uuid(text: Any) -> Optional[str]:
    """A cluster UUID as any tool prints it (UUID text, NCCL's two words) -> the UUID text (lower
    case); None for anything else, and for the all-zero UUID of a GPU without a fabric."""
    import uuid as _uuid

    if not isinstance(text, str) or not text.strip():
        return None
    t = text.strip()
    if "." in t:
        return cluster_uuid_from_nccl(t)
    try:
        u = _uuid.UUID(t)
    except ValueError:
        return None
    return str(u) if u.int else None


# --------------------------------------------------------------------------------------------
# Named assumptions: the one wording of each default, used by every command's output.
NCCL_MAX_IB_DEVS = 32
"""RDMA ports NCCL's IB transport opens at most (net_ib/common.h MAX_IB_DEVS; init.cc keeps the first active
ports in ``ibv_get_device_list`` order, after NCCL_IB_HCA): an SR-IOV node's further virtual functions are
not NCCL's network devices."""


def assumption(kind: str, **kw: Any) -> str:
    """The sentence a command prints when it had to use a default (one wording per fact)."""
    if kind == "cpu":
        return f"CPU model unknown: inter-socket (SYS) bandwidth assumed {DEFAULT_INTER_CPU_BW:g} GB/s"
    if kind == "nic-rate":
        why = ("NCCL's socket-transport default" if kw.get("rdma") is False
               else "typical for the GPU generation")
        return f"NIC speed unknown ({', '.join(kw['names'])}): assumed {kw['gbps']:g} Gb/s, {why}"
    if kind == "pcie":
        return f"PCIe link bandwidth unknown: assumed Gen{kw['gen']} x16 ({pcie_bw_GBps(kw['gen'], 16):g} GB/s)"
    if kind == "net-latency":
        return (f"EFA devices ({', '.join(kw['names'])}): NCCL's network latency assumed {kw['us']:g} us, what the "
                "aws-ofi-nccl plugin reports on p4d/p5 (35 us on p5en/p6 from plugin 1.15; an NCCL topology dump "
                "says which; NCCL's tuning adds it to every network step)")
    if kind == "ib-devs":
        return (f"{kw['count']} RDMA devices: NCCL's IB transport opens the first {NCCL_MAX_IB_DEVS} (MAX_IB_DEVS), "
                f"taken here in name order ({kw['first']} .. {kw['last']}); NCCL_IB_HCA chooses which")
    if kind == "no-nic":
        return ("no network device in the topology: NCCL's socket transport on one "
                f"{SOCKET_NIC_GBPS:g} Gb/s Ethernet port assumed (NCCL always has one)")
    if kind == "sm":
        return (f"GPU compute capability unknown: sm{kw['sm']} assumed ({kw['why']}; NCCL's per-link NVLink "
                f"bandwidth, PCIe generation and tuning of that class; --gpu MODEL names the GPU)")
    if kind == "gpu-model":
        return (f"GPU model {kw['model']} (sm{kw['sm']}) from --gpu for {kw['count']} GPU(s) the topology does not "
                "name")
    raise ValueError(kind)


# --------------------------------------------------------------------------------------------
# NCCL settings and the first NCCL release that reads them (the git history of NVIDIA/nccl: the first
# release tag whose src/ names the parameter; 2.3.5 is the first open-source release).  The settings
# gpucomm plan emits (planners/launch/env.py) and the doctor's nccl-version rule read this table.
NCCL_SETTING_SINCE = {
    "NCCL_IB_HCA": (2, 3, 5),
    "NCCL_SOCKET_IFNAME": (2, 3, 5),
    "NCCL_P2P_LEVEL": (2, 3, 5),
    "NCCL_NET_GDR_LEVEL": (2, 4, 2),
    "NCCL_CROSS_NIC": (2, 5, 6),
    "NCCL_TOPO_FILE": (2, 6, 4),
    "NCCL_GRAPH_FILE": (2, 6, 4),
    "NCCL_NVLS_ENABLE": (2, 17, 1),
    "NCCL_NET_GDR_C2C": (2, 26, 2),
}
NCCL_PLAN_SETTINGS = ("NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "NCCL_P2P_LEVEL", "NCCL_NET_GDR_LEVEL", "NCCL_CROSS_NIC",
                      "NCCL_TOPO_FILE", "NCCL_GRAPH_FILE")
"""The settings planners/launch/env.py emits on any machine (NCCL_NET_GDR_C2C only where GPUs reach
their NICs over C2C)."""
