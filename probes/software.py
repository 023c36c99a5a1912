"""The typed view of a document's ``software`` section (written by the probe sources of
:mod:`gpucomm.probes.sources.swpath`): what the planners read about the software path NCCL runs
over -- :attr:`gpucomm.probes.topology.Topology.software`.

Every field is optional: a document without the section (an NCCL XML, a topo -m capture, a
document saved before the section existed) gives a view whose ``known`` is False and whose
answers are all None, and the planners then say what they assumed.  Values of the wrong type
are unknown, never an exception.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from gpucomm.probes.formats.elf import version_tuple

ITEMS = ("driver", "nccl", "net_plugins", "gdr", "iommu", "hypervisor", "services")


def _d(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def _s(v: Any) -> Optional[str]:
    return v if isinstance(v, str) and v else None


def _b(v: Any) -> Optional[bool]:
    return v if isinstance(v, bool) else None


@dataclass(frozen=True)
class Library:
    path: str
    version: Optional[str]
    source: Optional[str]            # how it is on the loader path ("ld.so.cache", "python wheel ...", ...)

    @property
    def version_tuple(self) -> Optional[tuple]:
        return version_tuple(self.version)


@dataclass(frozen=True)
class Plugin:
    path: str
    name: str
    family: Optional[str]            # aws-ofi-nccl, gpudirect-tcpx, fastrak, gib, or None
    version: Optional[str]


@dataclass(frozen=True)
class SoftwarePath:
    known: bool = False
    statuses: dict = field(default_factory=dict)       # item -> found / absent / unreadable
    driver_version: Optional[str] = None
    driver_open: Optional[bool] = None
    kernel: Optional[str] = None
    cuda_toolkit: Optional[str] = None
    nccl: tuple = ()                                     # Library, in the loader's order
    env: dict = field(default_factory=dict)              # NCCL_* set in the environment
    env_known: bool = False
    plugins: tuple = ()                                  # Plugin
    plugin_loaded: Optional[Plugin] = None               # the one NCCL loads (NCCL_NET_PLUGIN / libnccl-net.so)
    gdr: Optional[bool] = None                           # GPUDirect RDMA possible (peer-memory module or dma-buf)
    gdr_why: Optional[str] = None                        # why not, as the probe said
    peermem: Optional[str] = None
    dmabuf: Optional[bool] = None
    iommu_mode: Optional[str] = None                     # off / passthrough / translated / unknown
    vm: Optional[bool] = None
    platform: Optional[str] = None
    services: dict = field(default_factory=dict)         # fabricmanager / nvlsm / imex -> {installed, enabled, running}

    @staticmethod
    def of(doc: Any) -> "SoftwarePath":
        sw = _d(_d(doc).get("software"))
        if not sw:
            return SoftwarePath()
        statuses = {k: _d(sw.get(k)).get("status") for k in ITEMS if isinstance(_d(sw.get(k)).get("status"), str)}
        drv, nc, npl, gdr = _d(sw.get("driver")), _d(sw.get("nccl")), _d(sw.get("net_plugins")), _d(sw.get("gdr"))
        iom, hyp, svc = _d(sw.get("iommu")), _d(sw.get("hypervisor")), _d(_d(sw.get("services")).get("services"))
        libs = tuple(Library(_s(l.get("path")) or "?", _s(l.get("version")), _s(l.get("from")))
                     for l in nc.get("libraries") or [] if isinstance(l, dict))
        plugins = tuple(Plugin(_s(p.get("path")) or "?", _s(p.get("name")) or "?", _s(p.get("family")), _s(p.get("version")))
                        for p in npl.get("plugins") or [] if isinstance(p, dict))
        loads = _s(npl.get("loads"))
        env = {k: v for k, v in _d(nc.get("env")).items() if isinstance(k, str) and isinstance(v, str)}
        for k in ("NCCL_NET", "NCCL_NET_PLUGIN"):
            if _s(npl.get(k)) and k not in env:
                env[k] = npl[k]
        gstat = statuses.get("gdr")
        return SoftwarePath(
            known=True, statuses=statuses,
            driver_version=_s(drv.get("version")), driver_open=_b(drv.get("open")), kernel=_s(drv.get("kernel")),
            cuda_toolkit=_s(drv.get("cuda_toolkit")), nccl=libs, env=env,
            env_known=bool(nc.get("env_known")) or bool(npl.get("env_known")),
            plugins=plugins, plugin_loaded=next((p for p in plugins if p.path == loads), None),
            gdr=True if gstat == "found" else False if gstat == "absent" else None,
            gdr_why=_s(gdr.get("why")), peermem=_s(gdr.get("peermem")), dmabuf=_b(gdr.get("dmabuf")),
            iommu_mode=_s(iom.get("mode")), vm=_b(hyp.get("vm")), platform=_s(hyp.get("platform")),
            services={k: {kk: _b(_d(v).get(kk)) for kk in ("installed", "enabled", "running")}
                      for k, v in svc.items() if isinstance(v, dict)})

    def nccl_in_use(self) -> Optional[Library]:
        """The NCCL a job started here loads, as far as the files say: a python wheel first (a
        PyTorch job loads the wheel its RPATH names), else the first on the loader path (ld.so's
        order: LD_LIBRARY_PATH, ld.so.cache, the default directories) with a readable version."""
        with_v = [l for l in self.nccl if l.version]
        wheel = [l for l in with_v if (l.source or "").startswith("python wheel")]
        return (wheel or with_v or [None])[0]

    def nccl_version(self) -> Optional[tuple]:
        lib = self.nccl_in_use()
        return lib.version_tuple if lib else None


# NCCL's names of its transports in "NET/<name>" and "Using network <name>" (net_ib.cc "IB",
# net_socket.cc "Socket"; nccl-rdma-sharp-plugins "IBext"); anything else is a plugin's name
_NET_KINDS = {"ib": "ib", "ibext": "ib", "socket": "socket"}
# a plugin's NET name -> its family (aws-ofi-nccl registers "AWS Libfabric", older builds "AWS OFI")
_PLUGIN_NAMES = {"aws libfabric": "aws-ofi-nccl", "aws ofi": "aws-ofi-nccl", "ofi": "aws-ofi-nccl",
                 "gpudirecttcpx": "gpudirect-tcpx", "fastrak": "fastrak", "gib": "gib"}


def net_kind(name: str) -> tuple:
    """(ib / socket / plugin, the plugin's family or None) of an NCCL network name."""
    low = name.strip().lower()
    base = low.split("_")[0]
    if base in _NET_KINDS:
        return _NET_KINDS[base], None
    return "plugin", _PLUGIN_NAMES.get(low, low.replace(" ", "-"))


def _gdr(sw: SoftwarePath) -> tuple:
    level = (sw.env.get("NCCL_NET_GDR_LEVEL") or "").strip().upper()
    if level in ("LOC", "0"):
        return False, "NCCL_NET_GDR_LEVEL=LOC disables GPUDirect RDMA"
    if sw.gdr is True:
        return True, f"GPUDirect RDMA: {sw.peermem or 'dma-buf'}"
    if sw.gdr is False:
        return False, "no GPUDirect RDMA (no nvidia_peermem, no dma-buf)"
    return True, "GPUDirect RDMA not probed: assumed"


def expected_transport(topo) -> dict:
    """The inter-node transport NCCL would choose on the node ``topo`` (a Topology) describes:
    ``{kind: ib/socket/plugin, plugin, gdr, source: probe/assumed, why}`` -- NCCL_NET, then the
    network plugin NCCL loads (NCCL_NET_PLUGIN / libnccl-net.so), NCCL_IB_DISABLE=1, no RDMA NIC
    (sockets), else IB verbs (plugin/net.cc tries the plugin, then IB, then sockets)."""
    sw = topo.software
    env = sw.env
    gdr, gwhy = _gdr(sw)
    net = (env.get("NCCL_NET") or "").strip()

    def out(kind, why, plugin=None, source="probe"):
        return {"kind": kind, "plugin": plugin, "gdr": None if kind == "socket" else gdr, "source": source, "why": why}

    if net:
        kind, plugin = net_kind(net)
        if kind == "plugin" and sw.plugin_loaded is not None:
            plugin = sw.plugin_loaded.family or plugin
        return out(kind, f"NCCL_NET={net}" + (f"; {gwhy}" if kind != "socket" else ""), plugin)
    if sw.plugin_loaded is not None:
        p = sw.plugin_loaded
        return out("plugin", f"NCCL loads {p.path}" + (f" ({p.family} {p.version})" if p.version else "") + f"; {gwhy}",
                   p.family or p.name)
    if (env.get("NCCL_IB_DISABLE") or "").strip() == "1":
        return out("socket", "NCCL_IB_DISABLE=1")
    if not topo.nics and not sw.known:   # e.g. a bare matrix: predict models NCCL's one Ethernet port
        return out("socket", "no NIC in the topology: NCCL crosses nodes on its socket transport over the "
                   "host's interface; --transport states otherwise", source="assumed")
    if topo.nics and not any(n.rdma for n in topo.nics):
        return out("socket", "no RDMA NIC in the topology and no network plugin: NCCL falls back to its socket "
                   "transport", source="probe" if sw.known else "assumed")
    if not sw.known:
        d = out("ib", "the topology does not record the software path (no plugin, GDR assumed); --transport "
                "states it", source="assumed")
        d["gdr"] = True
        return d
    return out("ib", f"RDMA NICs and no network plugin; {gwhy}")


__all__ = ["expected_transport", "net_kind", "SoftwarePath", "Library", "Plugin", "ITEMS"]
