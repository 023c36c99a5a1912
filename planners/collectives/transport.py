"""Which transport NCCL runs between nodes, and what it delivers (docs/SWPATH.md).

The same NIC delivers very different bandwidths depending on the software path: NCCL's IB verbs
transport with GPUDirect RDMA, the same without GDR (staged through host memory), a network plugin
(aws-ofi-nccl over EFA or Slingshot/CXI, Google's TCPX/FasTrak, gIB), or NCCL's TCP socket
transport.  :func:`choose` decides it, in this order:

1. ``--transport`` (:func:`parse`): ``ib``, ``ib-nogdr``, ``socket``, ``plugin:NAME``
   (``plugin:NAME:nogdr``);
2. what a run already says (:func:`from_log`): the NCCL INFO lines in or next to an nccl-tests
   output (``via NET/IB/0/GDRDMA``, ``NET/OFI Using aws-ofi-nccl``, ``Using network Socket``);
3. what the probe found (:func:`from_probe`): ``NCCL_NET`` / ``NCCL_IB_DISABLE`` in the
   environment, the network plugin NCCL would load, RDMA NICs, GPUDirect RDMA;
4. otherwise IB verbs with GDR where the topology has RDMA NICs, sockets where it has none -- an
   assumption, said so.

Its efficiency (:func:`efficiency`) becomes the achievable network bandwidth of the cost model
(:class:`gpucomm.planners.collectives.timing.Hardware`): the NIC line rate x the transport's
fraction, at most an absolute per-NIC rate (sockets), at most what GPUDirect RDMA moves through a
CPU root complex when the GPU reaches its NIC only through the host bridge (NCCL path PHB/SYS);
all_to_all at the transport's many-peer efficiency.  A calibration profile replaces all of it.

The constants are fitted on the published scaling tables (fixtures/captures/nccltests/scaling/)
by ``tools/crossval.py --fit-transports``, each on the tables named with it, and cross-validated
there leaving one system out (one table out where a transport was measured on one system only);
no error is quoted on the tables a constant was fitted on.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from gpucomm.planners.collectives import timing
from gpucomm.probes.errors import InputError

KINDS = ("ib", "ib-nogdr", "socket", "plugin")
HOST_BRIDGE_PATHS = ("PHB", "SYS")


@dataclass(frozen=True)
class Transport:
    """The inter-node transport of a job: ``kind`` ib / socket / plugin, ``plugin`` its name
    (aws-ofi-nccl, ...), ``gdr`` GPUDirect RDMA (None: unknown), ``source`` flag / nccl log / probe /
    assumed, ``why`` one sentence."""

    kind: str
    plugin: Optional[str] = None
    gdr: Optional[bool] = True
    source: str = "assumed"
    why: str = ""

    @property
    def name(self) -> str:
        if self.kind == "plugin":
            return f"plugin:{self.plugin or 'unknown'}" + (":nogdr" if self.gdr is False else "")
        if self.kind == "ib" and self.gdr is False:
            return "ib-nogdr"
        return self.kind

    def describe(self) -> str:
        what = {"ib": "NCCL's IB verbs transport", "socket": "NCCL's TCP socket transport",
                "plugin": f"the {self.plugin or 'unknown'} network plugin"}[self.kind]
        if self.kind != "socket":
            what += " with GPUDirect RDMA" if self.gdr else " without GPUDirect RDMA" if self.gdr is False else \
                " (GPUDirect RDMA unknown)"
        return f"{self.name}: {what} ({self.source}{': ' + self.why if self.why else ''})"

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "plugin": self.plugin, "gdr": self.gdr, "source": self.source,
                "why": self.why}


def parse(text: str, source: str = "--transport") -> Transport:
    """``ib``, ``ib-nogdr``, ``socket``, ``plugin:NAME`` or ``plugin:NAME:nogdr``; InputError otherwise."""
    t = (text or "").strip().lower()
    if t in ("ib", "ib-gdr"):
        return Transport("ib", gdr=True, source="flag", why=f"{source} {text}")
    if t == "ib-nogdr":
        return Transport("ib", gdr=False, source="flag", why=f"{source} {text}")
    if t in ("socket", "tcp"):
        return Transport("socket", gdr=None, source="flag", why=f"{source} {text}")
    if t.startswith("plugin:") and len(t) > 7:
        parts = t.split(":")
        if len(parts) in (2, 3) and parts[1] and (len(parts) == 2 or parts[2] in ("gdr", "nogdr")):
            return Transport("plugin", plugin=parts[1], gdr=not (len(parts) == 3 and parts[2] == "nogdr"),
                             source="flag", why=f"{source} {text}")
    raise InputError(f"{source} {text!r}: unknown transport",
                     expected="ib, ib-nogdr, socket, plugin:NAME or plugin:NAME:nogdr (e.g. plugin:aws-ofi-nccl)")


def _kind_of_net(name: str) -> tuple[str, Optional[str]]:
    from gpucomm.probes.software import net_kind

    return net_kind(name)


def from_log(log: Optional[dict], where: str = "the NCCL log") -> Optional[Transport]:
    """The transport an NCCL debug log shows (:func:`gpucomm.probes.formats.nccllog.parse_nccl_log`'s
    ``net`` summary), or None when it shows no inter-node transport."""
    net = (log or {}).get("net") if isinstance(log, dict) else None
    if not isinstance(net, dict) or not net.get("name"):
        return None
    kind, plugin = _kind_of_net(net["name"])
    if kind == "plugin" and net.get("plugin_family"):
        plugin = net["plugin_family"]
    gdr = net.get("gdr") if kind != "socket" else None
    bits = [f"NET/{net['name']}"]
    if net.get("plugin_version"):
        bits.append(f"{plugin} {net['plugin_version']}")
    if gdr is not None:
        bits.append("GDRDMA" if gdr else "no GDRDMA")
    if net.get("version"):
        bits.append(f"NCCL {net['version']}")
    return Transport(kind, plugin=plugin, gdr=gdr, source="nccl log", why=f"{where}: " + ", ".join(bits))


def from_probe(topo) -> Transport:
    """What NCCL would choose on a node the probe described (module docstring, steps 3 and 4;
    :func:`gpucomm.probes.software.expected_transport`, which the doctor reads too)."""
    from gpucomm.probes.software import expected_transport

    e = expected_transport(topo)
    return Transport(e["kind"], plugin=e["plugin"], gdr=e["gdr"], source=e["source"], why=e["why"])


def choose(topo, flag: Optional[str] = None, log_transport: Optional[Transport] = None) -> Transport:
    """Module docstring: the flag, then the run's own NCCL lines, then the probe."""
    if flag:
        return parse(flag)
    if log_transport is not None:
        return log_transport
    return from_probe(topo)


# --------------------------------------------------------------------------------------------
# What each transport delivers (fitted constants; docs/SWPATH.md has the tables and the errors)
@dataclass(frozen=True)
class Efficiency:
    """Per NIC: ``line rate x net`` at most ``cap_gbps``; all_to_all at ``alltoall`` x that."""

    net: float
    cap_gbps: Optional[float] = None
    alltoall: float = 1.0
    note: str = ""


# Each constant is fitted by tools/crossval.py (FIT_SETS names its tables; --transports refits and
# cross-validates them; tests/test_swpath.py checks these values are that fit).
SOCKET_GBPS = 20.23
"""Per-NIC Gb/s of NCCL's TCP socket transport (default threads: one socket per connection) in a
streaming collective: fitted on the Polaris env1 all_reduce/all_gather tables (200 Gb/s Slingshot-11,
NCCL 2.18 and 2.21, no plugin; leave one table out).  The two NCCL versions differ by 2.8x on the
same nodes and settings (2.18 ~38 Gb/s, 2.21 ~13 Gb/s per NIC), which one constant cannot describe:
every such table is 45-85% off; calibrate your own."""

SOCKET_ALLTOALL = 1.097
"""all_to_all through the socket transport relative to :data:`SOCKET_GBPS` (Polaris env1 alltoall
tables, leave one table out): many peers open many connections, each its own socket."""

PLUGIN_NET_EFFICIENCY = 0.9537
"""Fraction of the line rate aws-ofi-nccl delivers (Slingshot-11, CXI provider) where GPUDirect RDMA
does not cross a CPU root complex: fitted on the Alps GH200 all_reduce tables at 2-32 nodes (4 x 200
Gb/s per node, the NICs on Grace's PCIe, path P2C; leave one table out)."""

PLUGIN_ALLTOALL = 0.5589
"""all_to_all through aws-ofi-nccl on Slingshot (CXI) relative to its streaming rate: fitted on the
Polaris and Sirius alltoall tables with the plugin (leave one system out)."""

GDR_HOST_BRIDGE_EFFICIENCY = 0.7613
"""What GPUDirect RDMA moves per NIC when the GPU reaches its NIC only through the CPU's root
complex (NCCL path PHB or SYS, reached with NCCL_NET_GDR_LEVEL=PHB): this fraction of the GPU's
PCIe bandwidth (NCCL units).  Fitted on the Polaris and Sirius all_reduce/all_gather tables with the
plugin (AMD EPYC Milan; A100 and Slingshot NIC on separate root ports: 18.3 of 24 GB/s; leave one
system out)."""

EFFICIENCIES = {
    "ib": Efficiency(timing.NET_EFFICIENCY, note="timing.NET_EFFICIENCY, fitted on 083_h100ib-c01_2n_all_reduce_g1"),
    "ib-nogdr": Efficiency(timing.NET_EFFICIENCY, note="no visible table runs IB without GDR: the IB figure is "
                           "used; the cost of staging through host memory is not modelled (calibrate)"),
    "socket": Efficiency(1.0, cap_gbps=SOCKET_GBPS, alltoall=SOCKET_ALLTOALL, note="SOCKET_GBPS, SOCKET_ALLTOALL"),
    "plugin": Efficiency(PLUGIN_NET_EFFICIENCY, alltoall=PLUGIN_ALLTOALL,
                         note="PLUGIN_NET_EFFICIENCY, PLUGIN_ALLTOALL (aws-ofi-nccl on Slingshot; other plugins "
                              "have no visible table)"),
}


def efficiency(t: Transport) -> Efficiency:
    if t.kind == "plugin":
        return EFFICIENCIES["plugin"]
    if t.kind == "ib" and t.gdr is False:
        return EFFICIENCIES["ib-nogdr"]
    return EFFICIENCIES[t.kind]


def hardware(hw: timing.Hardware, t: Transport, type_inter: Optional[str], consts: Optional[dict] = None) -> timing.Hardware:
    """``hw`` with the per-NIC efficiency and caps of transport ``t`` (``consts``: other values of
    the fitted constants, for cross-validation)."""
    c = dict(constants())
    c.update(consts or {})
    eff = _eff(t, c)
    caps = []
    if eff.cap_gbps:
        caps.append(eff.cap_gbps / 8.0)
    if t.gdr and t.kind != "socket" and (type_inter or "").upper() in HOST_BRIDGE_PATHS:
        caps.append(c["GDR_HOST_BRIDGE_EFFICIENCY"] * hw.pcie_bw)
    return replace(hw, net_efficiency=eff.net, net_cap_GBps=min(caps) if caps else None)


def profile(t: Transport, base: Optional[timing.Profile] = None, consts: Optional[dict] = None) -> timing.Profile:
    """The default profile of transport ``t``: timing's defaults with its all_to_all efficiency."""
    c = dict(constants())
    c.update(consts or {})
    return replace(base or timing.DEFAULT, alltoall_efficiency=_eff(t, c).alltoall)


def constants() -> dict:
    """The fitted constants by name (what tools/crossval.py refits)."""
    return {"SOCKET_GBPS": SOCKET_GBPS, "SOCKET_ALLTOALL": SOCKET_ALLTOALL, "PLUGIN_NET_EFFICIENCY": PLUGIN_NET_EFFICIENCY,
            "PLUGIN_ALLTOALL": PLUGIN_ALLTOALL, "GDR_HOST_BRIDGE_EFFICIENCY": GDR_HOST_BRIDGE_EFFICIENCY}


def _eff(t: Transport, c: dict) -> Efficiency:
    base = efficiency(t)
    if t.kind == "socket":
        return replace(base, cap_gbps=c["SOCKET_GBPS"], alltoall=c["SOCKET_ALLTOALL"])
    if t.kind == "plugin":
        return replace(base, net=c["PLUGIN_NET_EFFICIENCY"], alltoall=c["PLUGIN_ALLTOALL"])
    return base


__all__ = ["Transport", "Efficiency", "EFFICIENCIES", "parse", "from_log", "from_probe", "choose", "efficiency",
           "hardware", "profile", "constants", "SOCKET_GBPS", "SOCKET_ALLTOALL", "PLUGIN_NET_EFFICIENCY",
           "PLUGIN_ALLTOALL", "GDR_HOST_BRIDGE_EFFICIENCY", "KINDS"]
