"""The typed view of a topology document: what every planner reads.

A document (``gpucomm.topology/v1``) is plain data from a probe, a capture or a user's file, where
any field can hold anything.  :func:`Topology.of` reads it once:

1. **cleaning** -- a copy in which every field a planner reads has the schema's type; a value of
   the wrong type becomes unknown (None) and a malformed list item is dropped, each with a warning
   naming the field (``topo.problems``).  Nothing downstream needs ``isinstance`` checks again.
2. **typed records** -- :class:`GPU`, :class:`NIC`, :class:`CPU`, :class:`Switch`, :class:`Link`,
   each with its facts taken from :mod:`gpucomm.probes.facts` (compute capability, architecture,
   PCIe bandwidth, NIC rate and RDMA-ness, the CPU's identity and inter-socket bandwidth) and the
   cleaned record (``.rec``) for the rarer fields a rule reads.
3. **the NVLink fabric** (:class:`NVLinkFabric`) by one rule: NVLink links of the document, else
   NVML's per-link records, else the matrix's NV# codes; a GPU whose bonds to several peers add up
   to more NVLinks than it can have is on an NVSwitch.
4. **named assumptions** -- when a planner asks for a number the document does not give (NIC rate,
   inter-socket bandwidth, PCIe generation, compute capability), the view answers with the one
   default of :mod:`gpucomm.probes.facts` and records the sentence in ``topo.assumptions``, which
   every command prints.

Graph ids are the document's: GPUs/NICs by PCI bus id when known, else ``GPU<i>`` / the NIC name,
NUMA nodes ``CPU<n>``, switches by id, every NVSwitch folded into ``NVS`` (as NCCL does).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable, NamedTuple, Optional, Union

from gpucomm.probes import facts
from gpucomm.probes.facts import integer, number
from gpucomm.probes.model import (PLATFORM_KEYS, cpu_id, fabric_record, gpu_id, host_of, is_sentinel_bus_id,
                                  natural_key, nic_id, parse_cpulist)

NVS_ID = "NVS"
LINK_KINDS = ("nvlink", "pcie", "smp", "c2c", "xgmi", "net")
_NV_RE = re.compile(r"^NV(\d{1,4})$")  # more digits: not a link count


def nv_count(code: Optional[str]) -> int:
    """Links in an nvidia-smi ``NV#`` cell (``NV18`` -> 18), 0 for any other code."""
    m = _NV_RE.match(code or "")
    return int(m.group(1)) if m else 0


# --------------------------------------------------------------------------------------------
# Cleaning
def _s(v: Any) -> Optional[str]:
    return v if isinstance(v, str) else None


def _b(v: Any) -> Optional[bool]:
    return v if isinstance(v, bool) else None


def _dicts(v: Any) -> list:
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def _pcie(v: Any) -> Optional[dict]:
    if not isinstance(v, dict):
        return None
    return {k: integer(v.get(k)) if (integer(v.get(k)) or 0) >= 0 else None
            for k in ("gen", "width", "max_gen", "max_width")}


def _num_signed(v: Any) -> Optional[float]:
    """A finite number (negative allowed), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def _cpulist(v: Any) -> Optional[str]:
    if not isinstance(v, str):
        return None
    try:
        parse_cpulist(v)
    except (ValueError, TypeError):
        return None
    return v


def json_scalar(v: Any) -> Any:
    """A JSON scalar as it is (None, a string, a bool, an int, a finite float), anything else None:
    a value compared or printed as the document gives it.

    >>> json_scalar("9.0"), json_scalar([9, 0]), json_scalar(float("nan"))
    ('9.0', None, None)
    """
    if v is None or isinstance(v, (str, bool, int)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    return None


class _Cleaner:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def note(self, msg: str) -> None:
        if len(self.problems) < 50 and msg not in self.problems:
            self.problems.append(msg)

    def gpu(self, i: int, g: dict) -> Optional[dict]:
        idx = integer(g.get("index"))
        if idx is None or idx < 0:
            self.note(f"gpus[{i}]: no usable index ({g.get('index')!r}); GPU ignored")
            return None
        p2p = g.get("p2p")
        nvl = []
        for j, l in enumerate(_dicts(g.get("nvlink"))):
            nvl.append(dict(l, link=integer(l.get("link")), state=_s(l.get("state")), remote=_s(l.get("remote")),
                            bw_GBps=number(l.get("bw_GBps"))))
        return dict(
            g, index=idx, uuid=_s(g.get("uuid")), name=_s(g.get("name")), pci_bus_id=_s(g.get("pci_bus_id")),
            arch=_s(g.get("arch")), memory_bytes=integer(g.get("memory_bytes")),
            numa_node=integer(g.get("numa_node")),
            numa_affinity=[x for x in g.get("numa_affinity") or [] if integer(x) is not None]
            if isinstance(g.get("numa_affinity"), list) else [],
            cpu_affinity=_cpulist(g.get("cpu_affinity")), pcie=_pcie(g.get("pcie")), mig=_b(g.get("mig")),
            vendor=_s(g.get("vendor")) or "nvidia", parent=_s(g.get("parent")),
            gpu_numa_id=integer(g.get("gpu_numa_id")),
            p2p={k: str(v) for k, v in p2p.items() if isinstance(k, str) and isinstance(v, str)}
            if isinstance(p2p, dict) else {},
            nvlink=nvl, host=host_of(g), local_index=integer(g.get("local_index")),
            fabric=fabric_record(g.get("fabric")),
            platform={k: v for k, v in g["platform"].items() if k in PLATFORM_KEYS and isinstance(v, (str, int))}
            if isinstance(g.get("platform"), dict) else {})

    def nic(self, i: int, n: dict) -> Optional[dict]:
        name = _s(n.get("name"))
        if not name:
            self.note(f"nics[{i}]: no name; NIC ignored")
            return None
        ports = [dict(p, port=integer(p.get("port")), state=_s(p.get("state")), phys_state=_s(p.get("phys_state")),
                      rate_gbps=number(p.get("rate_gbps")))
                 for p in _dicts(n.get("ports"))]
        return dict(n, name=name, netdev=_s(n.get("netdev")), pci_bus_id=_s(n.get("pci_bus_id")),
                    numa_node=integer(n.get("numa_node")), link_layer=_s(n.get("link_layer")),
                    guid=_s(n.get("guid")), rdma=_b(n.get("rdma")), parent=_s(n.get("parent")),
                    pcie=_pcie(n.get("pcie")), pci_ids=n["pci_ids"] if isinstance(n.get("pci_ids"), dict) else {},
                    fw_ver=_s(n.get("fw_ver")), ports=ports, host=host_of(n))

    def switch(self, i: int, s: dict) -> Optional[dict]:
        sid = _s(s.get("id"))
        if not sid:
            self.note(f"switches[{i}]: no id; switch ignored")
            return None
        acs = s.get("acs") if isinstance(s.get("acs"), dict) else None
        return dict(s, id=sid, kind=_s(s.get("kind")), pci_bus_id=_s(s.get("pci_bus_id")), parent=_s(s.get("parent")),
                    numa_node=integer(s.get("numa_node")), vendor=_s(s.get("vendor")), device=_s(s.get("device")),
                    pcie=_pcie(s.get("pcie")),
                    acs={k: [f for f in v if isinstance(f, str)] for k, v in acs.items()
                         if isinstance(k, str) and isinstance(v, list)} if acs is not None else None,
                    host=host_of(s))

    def link(self, i: int, l: dict) -> Optional[dict]:
        if not all(_s(l.get(k)) for k in ("a", "b", "kind")):
            self.note(f"links[{i}]: a, b and kind must be strings; link ignored")
            return None
        if l["kind"] not in LINK_KINDS:
            self.note(f"links[{i}]: unknown kind {l['kind']!r}; link ignored")
            return None
        if l["a"] == l["b"]:
            self.note(f"links[{i}]: {l['a']} linked to itself; link ignored")
            return None
        bw = l.get("bw_GBps")
        if bw is not None and number(bw) is None:
            self.note(f"links[{i}] ({l['a']}-{l['b']}): bw_GBps {bw!r} is not a usable bandwidth; unknown")
        count = integer(l.get("count"))
        if count is not None and count < 0:
            self.note(f"links[{i}] ({l['a']}-{l['b']}): negative count {count}; unknown")
            count = None
        return dict(l, count=count, bw_GBps=number(l.get("bw_GBps")), gen=integer(l.get("gen")),
                    width=integer(l.get("width")), measured_bw_GBps=number(l.get("measured_bw_GBps")))

    def numa(self, i: int, n: dict) -> Optional[dict]:
        nid = integer(n.get("id"))
        if nid is None:
            self.note(f"numa_nodes[{i}]: no integer id; NUMA node ignored")
            return None
        d = n.get("distances")
        return dict(n, id=nid, cpus=_cpulist(n.get("cpus")), memory_bytes=integer(n.get("memory_bytes")),
                    distances=[_num_signed(x) for x in d] if isinstance(d, list) else None, host=host_of(n))

    def document(self, doc: Any) -> dict:
        d = dict(doc) if isinstance(doc, dict) else {}
        host = d.get("host") if isinstance(d.get("host"), dict) else {}
        d["host"] = {k: (v if isinstance(v, (str, int, float, bool)) or v is None else None) for k, v in host.items()}
        for key in ("hostname", "cpu_vendor", "cpu_model", "cpu_arch", "iommu", "provenance"):
            d["host"][key] = _s(host.get(key))
        d["host"]["sockets"] = integer(host.get("sockets"))
        for key in ("cpu_family", "cpu_model_id"):
            if key in host:
                d["host"][key] = integer(host.get(key))

        def clean_list(name: str, fn) -> list:
            out = []
            for i, x in enumerate(d.get(name) or [] if isinstance(d.get(name), list) else []):
                if not isinstance(x, dict):
                    self.note(f"{name}[{i}] is not a mapping; ignored")
                    continue
                c = fn(i, x)
                if c is not None:
                    out.append(c)
            return out

        gpus = clean_list("gpus", self.gpu)
        seen: dict = {}
        d["gpus"] = []
        for g in sorted(gpus, key=lambda g: g["index"]):
            if g["index"] in seen:
                self.note(f"gpus: index {g['index']} appears twice; the second is ignored")
                continue
            seen[g["index"]] = g
            d["gpus"].append(g)
        bus: dict = {}
        for g in d["gpus"]:
            b = (g["host"], g.get("pci_bus_id"))
            if b[1] and b in bus:
                self.note(f"gpus: GPU{bus[b]} and GPU{g['index']} share bus id {b[1]}")
            elif b[1]:
                bus[b] = g["index"]
        nics = clean_list("nics", self.nic)
        names: set = set()
        d["nics"] = []
        for n in nics:
            if n["name"] in names:
                self.note(f"nics: {n['name']} appears twice; the second is ignored")
                continue
            names.add(n["name"])
            d["nics"].append(n)
        d["switches"] = clean_list("switches", self.switch)
        d["links"] = clean_list("links", self.link)
        d["numa_nodes"] = clean_list("numa_nodes", self.numa)
        m = d.get("matrix") if isinstance(d.get("matrix"), dict) else {}
        d["matrix"] = {k: {c: v for c, v in row.items() if isinstance(c, str) and isinstance(v, str)}
                       for k, row in m.items() if isinstance(k, str) and isinstance(row, dict)}
        d["pci_devices"] = [x for x in _dicts(d.get("pci_devices")) if isinstance(x.get("bdf"), str)]
        meas = d.get("measured") if isinstance(d.get("measured"), dict) else {}
        p2p = meas.get("p2p") if isinstance(meas.get("p2p"), dict) else {}
        d["measured"] = dict(meas, p2p={a: {b: {"bw_GBps": number(c.get("bw_GBps")), "lat_us": number(c.get("lat_us"))}
                                            for b, c in row.items() if isinstance(c, dict)}
                                        for a, row in p2p.items() if isinstance(row, dict)})
        d["hosts"] = [dict(h, id=integer(h.get("id")), hostname=_s(h.get("hostname")), host_hash=_s(h.get("host_hash")))
                      for h in _dicts(d.get("hosts")) if (integer(h.get("id")) or 0) >= 0 and integer(h.get("id")) is not None]
        d["imex"] = _imex(d.get("imex"))
        d["nccl"] = d["nccl"] if isinstance(d.get("nccl"), dict) else None
        d["warnings"] = [w for w in d.get("warnings") or [] if isinstance(w, str)] \
            if isinstance(d.get("warnings"), list) else []
        d["sources"] = _dicts(d.get("sources"))
        return d


def _imex(v: Any) -> Optional[dict]:
    """``imex`` (nvidia-imex-ctl -N) with the schema's types, None when absent or unusable."""
    if not isinstance(v, dict):
        return None
    nodes = [dict(n, index=integer(n.get("index")), address=_s(n.get("address")), state=_s(n.get("state")),
                  version=_s(n.get("version")))
             for n in _dicts(v.get("nodes")) if integer(n.get("index")) is not None]
    conn = v.get("connectivity")
    return dict(v, domain_state=_s(v.get("domain_state")), nodes=nodes, timestamp=_s(v.get("timestamp")),
                connectivity={k: c for k, c in conn.items() if isinstance(k, str) and integer(c) is not None}
                if isinstance(conn, dict) else None)


def check_document(doc: Any) -> None:
    """Refuse a mapping whose ``gpus`` is not a list (InputError): not a topology document at all, where
    a view of it would only be empty.  Anything else the view cleans."""
    if isinstance(doc, dict) and not isinstance(doc.get("gpus", []), list):
        from gpucomm.probes.errors import InputError

        raise InputError("not a topology document", expected="a gpucomm.topology/v1 mapping")


def clean_document(doc: Any) -> tuple[dict, list[str]]:
    """(a copy of ``doc`` holding only well-typed values, the problems found) -- the first step of
    :meth:`Topology.of`, for callers that want the document itself."""
    c = _Cleaner()
    return c.document(doc), c.problems


# --------------------------------------------------------------------------------------------
# Typed records
@dataclass(frozen=True)
class PCIe:
    gen: Optional[int]
    width: Optional[int]
    max_gen: Optional[int]
    max_width: Optional[int]

    @property
    def bw_GBps(self) -> Optional[float]:
        """NCCL's bandwidth of the link as trained now (current gen and width); None without a gen."""
        return facts.pcie_bw_GBps(self.gen, self.width) if self.gen else None

    @property
    def usable_bw_GBps(self) -> Optional[float]:
        """What the link delivers: the maximum speed (GPUs drop their speed while idle, a transient)
        at the trained width (a narrow width is a fault that stays).  None without a generation."""
        gen = self.max_gen or self.gen
        return facts.pcie_bw_GBps(gen, self.width or self.max_width) if gen else None

    @property
    def max_bw_GBps(self) -> Optional[float]:
        """NCCL's bandwidth at the device's maximum (what NCCL's XML reads: max speed/width)."""
        gen = self.max_gen or self.gen
        return facts.pcie_bw_GBps(gen, self.max_width or self.width) if gen else None


def _pcie_of(rec: Optional[dict]) -> Optional[PCIe]:
    if not rec:
        return None
    return PCIe(rec.get("gen"), rec.get("width"), rec.get("max_gen"), rec.get("max_width"))


@dataclass(frozen=True)
class Fabric:
    """A GPU's multi-node NVLink fabric as NVML reports it (``gpus[].fabric``): the NVLink domain
    (cluster UUID) and the clique (partition) inside it, the registration state, NVML's status, the
    health mask and summary.  NCCL puts GPUs with the same cluster UUID and clique id, all in state
    ``completed``, in one MNNVL clique (mnnvl.cc ncclMnnvlCheck)."""
    cluster_uuid: Optional[str]
    clique_id: Optional[int]
    state: Optional[str]            # facts.FABRIC_STATES
    status: Optional[str]           # "NVML_SUCCESS" or the NVML error name
    health_mask: Optional[int]
    health_summary: Optional[str]   # healthy, unhealthy, limited_capacity (nvidia-smi -q "Summary")

    @property
    def completed(self) -> bool:
        return self.state == "completed"

    @property
    def attached(self) -> bool:
        """GPU Feature Discovery's test (go-nvlib IsFabricAttached): registration completed, a cluster
        UUID, status success (or not reported)."""
        return self.completed and bool(self.cluster_uuid) and self.status_ok

    @property
    def status_ok(self) -> bool:
        """NVML's status of the registration is success (or was not reported)."""
        return self.status in (None, "NVML_SUCCESS", "Success")

    @property
    def clique(self) -> Optional[tuple]:
        """(cluster UUID, clique id): the MNNVL clique key, None unless attached with a clique id."""
        return (self.cluster_uuid, self.clique_id) if self.attached and self.clique_id is not None else None

    @property
    def health(self) -> dict:
        """The health mask decoded ({field: meaning}, :func:`facts.decode_fabric_health`)."""
        return facts.decode_fabric_health(self.health_mask)

    @property
    def health_problems(self) -> list:
        """Health fields that are not healthy (``degraded_bw=degraded`` ...), plus the summary when it
        says unhealthy or limited capacity."""
        out = facts.fabric_health_problems(self.health_mask)
        if self.health_summary and self.health_summary.lower().replace(" ", "_") in ("unhealthy", "limited_capacity"):
            out.append(f"summary={self.health_summary.lower().replace(' ', '_')}")
        return out


def _fabric_of(rec: Optional[dict]) -> Optional[Fabric]:
    if not rec or not isinstance(rec, dict):
        return None
    return Fabric(rec.get("cluster_uuid"), rec.get("clique_id"), rec.get("state"), rec.get("status"),
                  rec.get("health_mask"), rec.get("health_summary"))


def clique_label(fabric_records: Iterable) -> Optional[str]:
    """A node's NVLink clique as GPU Feature Discovery labels it (``nvidia.com/gpu.clique``):
    ``<cluster UUID>.<clique id>`` (clique id in decimal, captures/k8s/003:
    ``a2221497-dbce-4964-8826-684c3694fd45.2478``) when every GPU attached to the fabric (state
    completed, a cluster UUID, status success: go-nvlib IsFabricAttached) has the same cluster UUID and
    clique id; None otherwise (no fabric, an all-zero UUID, or GPUs in different cliques: GFD labels
    nothing).  Takes the GPUs' ``fabric`` records (or :class:`Fabric` views), so a fleet of raw documents
    is read without building each one's view.

    >>> clique_label([{"cluster_uuid": "6f3c2a51-9d0e", "clique_id": 32766, "state": "completed"}])
    '6f3c2a51-9d0e.32766'
    """
    keys = set()
    for f in fabric_records:
        f = f if isinstance(f, Fabric) else _fabric_of(f)
        key = f.clique if f is not None else None
        if key is not None and isinstance(key[0], str) and key[0].strip("0-"):
            keys.add(key)
    if len(keys) != 1:
        return None
    cluster, clique = keys.pop()
    return f"{cluster}.{clique}"


@dataclass(frozen=True)
class GPU:
    index: int
    id: str                      # graph id (bus id, else GPU<index>)
    key: str                     # GPU<index> (the matrix row)
    name: Optional[str]
    uuid: Optional[str]
    pci_bus_id: Optional[str]
    vendor: str
    sm: Optional[int]            # compute capability as NCCL's sm (major*10+minor)
    sm_source: Optional[str]     # "record", "name", "assumed" (see Topology.assumptions) or None (not NVIDIA)
    arch: Optional[str]
    memory_bytes: Optional[int]
    numa_node: Optional[int]
    cpu_affinity: Optional[str]
    pcie: Optional[PCIe]
    mig: Optional[bool]
    parent: Optional[str]
    gdr: bool
    p2p: dict
    rec: dict = field(repr=False, compare=False)
    host: int = 0                        # the host (tray) it is on: Topology.hosts[...].id
    local_index: Optional[int] = None    # its NVML/CUDA index on that host (several hosts), else None
    fabric: Optional[Fabric] = None      # multi-node NVLink fabric (NVML, nvidia-smi -q, NCCL log)
    label: str = ""                      # GPU<index>, or <host>/GPU<local index> in a document of several hosts

    # the rarer fields health checks, placement and diff read, as _Cleaner left them
    @cached_property
    def nvlink_states(self) -> tuple:
        """NVML's records of this GPU's NVLinks (``gpus[].nvlink``), as :class:`NVLinkState`, in the
        document's order; () when NVML gave none."""
        return tuple(NVLinkState(l.get("link"), l.get("state"), l.get("remote"), l.get("bw_GBps"))
                     for l in self.rec.get("nvlink") or ())

    @property
    def numa_affinity(self) -> tuple:
        """NVML's NUMA affinity (NUMA node ids), () when unknown."""
        return tuple(self.rec.get("numa_affinity") or ())

    @property
    def gpu_numa_id(self) -> Optional[int]:
        """The NUMA node of the GPU's own memory (Grace Hopper/Blackwell: HBM exposed as NUMA memory)."""
        return self.rec.get("gpu_numa_id")

    @property
    def compute_capability(self) -> Any:
        """The compute capability as the document spells it (``"9.0"``; :func:`json_scalar`), for
        comparing and printing; :attr:`sm` is the number."""
        return json_scalar(self.rec.get("compute_capability"))

    @property
    def c2c(self) -> Optional[dict]:
        """The GPU's chip-to-chip link to its CPU (Grace: ``{count, bw_MBps}``), None without one."""
        return self.rec.get("c2c")

    @property
    def reported_arch(self) -> Optional[str]:
        """The architecture the record names (``hopper``), None where :attr:`arch` is only guessed from
        the compute capability."""
        return self.rec.get("arch")


class NVLinkState(NamedTuple):
    """One NVLink of a GPU as NVML reports it: link number, state (active, inactive, ...), the
    remote end's PCI bus id (a peer GPU, an NVSwitch), its bandwidth when recorded.  A named tuple:
    a fleet builds 18 per GPU per node, and a frozen dataclass takes several times longer to make."""
    link: Optional[int]
    state: Optional[str]
    remote: Optional[str]
    bw_GBps: Optional[float]


@dataclass(frozen=True)
class Port:
    port: Optional[int]
    state: Optional[str]
    phys_state: Optional[str]
    rate_gbps: Optional[float]

    @property
    def active(self) -> bool:
        return facts.port_active(self.state)


@dataclass(frozen=True)
class NIC:
    name: str
    id: str                      # graph id (bus id, else the name)
    netdev: Optional[str]
    pci_bus_id: Optional[str]
    numa_node: Optional[int]
    link_layer: Optional[str]
    ports: tuple
    guid: Optional[str]
    parent: Optional[str]
    rdma: bool                   # facts.nic_is_rdma
    rate_gbps: Optional[float]   # facts.nic_rate_gbps (None: unknown; see Topology.nic_gbps)
    up: bool                     # facts.nic_is_up
    gdr: bool
    pcie: Optional[PCIe]
    rec: dict = field(repr=False, compare=False)
    host: int = 0

    @property
    def active_ports(self) -> list[int]:
        return facts.nic_active_ports(self.rec)

    @property
    def fw_ver(self) -> Optional[str]:
        return self.rec.get("fw_ver")

    @property
    def sys_image_guid(self) -> Optional[str]:
        """The card's GUID (ibverbs' ``sys_image_guid``: the ports of one card share it; NCCL's net guid)."""
        return self.rec.get("sys_image_guid")


@dataclass(frozen=True)
class CPU:
    """A NUMA node as NCCL sees it: a CPU node with its cores and its CPU's identity."""
    id: str                      # CPU<numa>
    numa: Optional[int]
    cpus: tuple                  # logical cpu ids
    arch: Optional[str]          # x86_64, arm64, ppc64
    vendor: Optional[str]        # intel, amd, zhaoxin
    family: Optional[int]
    model: Optional[int]
    name: Optional[str]
    sys_bw: Optional[float]      # facts.inter_cpu_bw (None: CPU not identified; see Topology.inter_cpu_bw)
    rec: dict = field(repr=False, compare=False)
    host: int = 0

    @property
    def cpulist(self) -> Optional[str]:
        """The NUMA node's cpulist as the document gives it (``0-55,112-167``), None when unknown."""
        return self.rec.get("cpus")

    @property
    def memory_bytes(self) -> Optional[int]:
        return self.rec.get("memory_bytes")


@dataclass(frozen=True)
class Host:
    """One host (tray) of a document: NCCL's system id, its name and host hash when known, and the
    indices of its GPUs.  A one-node document has exactly one, id 0."""
    id: int
    hostname: Optional[str]
    host_hash: Optional[str]
    gpus: tuple                  # GPU indices


@dataclass(frozen=True)
class Clique:
    """GPUs NCCL would put in one MNNVL clique: the same cluster UUID and clique id, fabric
    registration completed (mnnvl.cc).  ``hosts``: the hosts they are on."""
    cluster_uuid: str
    clique_id: int
    gpus: tuple                  # GPU indices
    hosts: tuple                 # host ids


@dataclass(frozen=True)
class NVLinkDomain:
    """The NVLink domain (rack) a document's GPUs are in, as far as the document says: ``size`` in
    GPUs and ``nodes`` in hosts (None: unknown), where it comes from (``source``: imex, hosts, a log's
    nvlDomainSize, or none) and ``note``, the sentence to print."""
    multi_node: bool             # the GPUs report a multi-node NVLink fabric (cluster UUID, completed)
    size: Optional[int]
    nodes: Optional[int]
    source: Optional[str]
    note: str


@dataclass(frozen=True)
class Switch:
    id: str
    kind: Optional[str]          # pcie, nvswitch, host_bridge
    pci_bus_id: Optional[str]
    parent: Optional[str]
    numa_node: Optional[int]
    pcie: Optional[PCIe]
    rec: dict = field(repr=False, compare=False)

    @property
    def vendor(self) -> Optional[str]:
        """PCI vendor id (``0x1000``)."""
        return self.rec.get("vendor")

    @property
    def device(self) -> Optional[str]:
        """PCI device id."""
        return self.rec.get("device")

    @property
    def acs(self) -> Optional[dict]:
        """ACS control flags of the switch's ports: {port BDF: [flag, ...]} (``RR``, ``CR``, ...), None
        when the probe could not read them."""
        return self.rec.get("acs")


@dataclass(frozen=True)
class ProbeSource:
    """How one probe source fared (``sources[]``): its name, ``ok``/``unavailable``/``partial``/``error``
    and what it said."""
    name: str
    status: Optional[str]
    detail: Optional[str]


@dataclass(frozen=True)
class Link:
    a: str
    b: str
    kind: str
    count: Optional[int]
    bw_GBps: Optional[float]
    measured_bw_GBps: Optional[float]
    gen: Optional[int]
    width: Optional[int]
    rec: dict = field(repr=False, compare=False)


@dataclass
class NVLinkFabric:
    """NVLink as NCCL's graph sees it (topo.cc folds every NVSwitch into one ``NVS`` node).

    ``nvs``: GPU id -> (links, GB/s, measured GB/s or None) to the NVSwitch fabric;
    ``pairs``: (GPU id, GPU id) sorted -> (links, GB/s, measured) of a direct bond (DGX-1, bridges);
    ``cpu``: (GPU id, CPU id) -> (links, GB/s, measured) (POWER9 NVLink to the CPU);
    ``folded``: bonds to every peer that add up to more links than a GPU has were read as an
    NVSwitch (how ``nvidia-smi topo -m`` prints one); ``source``: links, nvml, matrix or None."""
    nvs: dict = field(default_factory=dict)
    pairs: dict = field(default_factory=dict)
    cpu: dict = field(default_factory=dict)
    folded: bool = False
    source: Optional[str] = None

    @property
    def nvswitch(self) -> bool:
        return bool(self.nvs)

    def links_of(self, gid: str) -> int:
        """NVLinks of one GPU (to the switch, its peers and a CPU)."""
        n = self.nvs.get(gid, (0, 0.0, None))[0]
        n += sum(v[0] for k, v in self.pairs.items() if gid in k)
        n += sum(v[0] for k, v in self.cpu.items() if k[0] == gid)
        return n

    def pair_bw(self, a: str, b: str) -> float:
        """GB/s between two GPUs over NVLink: the direct bond, else the smaller switch uplink, else 0."""
        key = (a, b) if a < b else (b, a)
        if key in self.pairs:
            return self.pairs[key][1]
        if a in self.nvs and b in self.nvs:
            return min(self.nvs[a][1], self.nvs[b][1])
        return 0.0

    def domains(self, gids: Iterable[str]) -> list[list[str]]:
        """Connected groups of >1 GPU over NVLink (an NVSwitch joins all its GPUs)."""
        gids = list(gids)
        parent = {g: g for g in gids}

        def find(x: str) -> str:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        on_nvs = [g for g in gids if g in self.nvs]
        for g in on_nvs[1:]:
            parent[find(g)] = find(on_nvs[0])
        for a, b in self.pairs:
            if a in parent and b in parent:
                parent[find(a)] = find(b)
        groups: dict = {}
        for g in gids:
            groups.setdefault(find(g), []).append(g)
        return [v for v in groups.values() if len(v) > 1]


# --------------------------------------------------------------------------------------------
class Topology:
    """The typed view of one topology document (see the module docstring).  Build with
    :meth:`of`; planners take a Topology (or a document, which they pass to :meth:`of`)."""

    def __init__(self, doc: Any, source: Optional[str] = None) -> None:
        cleaner = _Cleaner()
        self.doc: dict = cleaner.document(doc)
        self.problems: list[str] = cleaner.problems
        self.source = source
        self.assumptions: list[str] = []
        d = self.doc
        self.host: dict = d["host"]
        self.matrix: dict = d["matrix"]
        self.warnings: list[str] = d["warnings"]
        # GPUs (sm from the record or the name; else guessed from NVLink counts below)
        gpus = []
        several = len({g["host"] for g in d["gpus"]} | {h["id"] for h in d["hosts"]}) > 1
        for g in d["gpus"]:
            sm, src = facts.gpu_sm(g)
            local = g.get("local_index")
            label = f"{g['host']}/GPU{local if local is not None else g['index']}" if several else f"GPU{g['index']}"
            gpus.append(GPU(index=g["index"], id=gpu_id(g), key=f"GPU{g['index']}", name=g.get("name"),
                            uuid=g.get("uuid"), pci_bus_id=g.get("pci_bus_id"), vendor=g.get("vendor") or "nvidia",
                            sm=sm, sm_source=src, arch=g.get("arch") or facts.arch_from_sm(sm),
                            memory_bytes=g.get("memory_bytes"), numa_node=g.get("numa_node"),
                            cpu_affinity=g.get("cpu_affinity"), pcie=_pcie_of(g.get("pcie")), mig=g.get("mig"),
                            parent=g.get("parent"), gdr=_truthy(g.get("gdr")), p2p=dict(g.get("p2p") or {}), rec=g,
                            host=g["host"], local_index=local, fabric=_fabric_of(g.get("fabric")), label=label))
        self.gpus: tuple = tuple(gpus)
        self._gpu_by_index = {g.index: g for g in self.gpus}
        self._gpu_by_id = {g.id: g for g in self.gpus}
        self._gpu_by_key = {g.key: g for g in self.gpus}
        nics = []
        for n in d["nics"]:
            nics.append(NIC(name=n["name"], id=nic_id(n), netdev=n.get("netdev"), pci_bus_id=n.get("pci_bus_id"),
                            numa_node=n.get("numa_node"), link_layer=n.get("link_layer"),
                            ports=tuple(Port(p.get("port"), p.get("state"), p.get("phys_state"), p.get("rate_gbps"))
                                        for p in n["ports"]),
                            guid=n.get("guid"), parent=n.get("parent"), rdma=facts.nic_is_rdma(n),
                            rate_gbps=facts.nic_rate_gbps(n), up=facts.nic_is_up(n), gdr=_truthy(n.get("gdr")),
                            pcie=_pcie_of(n.get("pcie")), rec=n, host=n["host"]))
        self.nics: tuple = tuple(nics)
        self._nic_by_name = {n.name: n for n in self.nics}
        self.switches: dict = {s["id"]: Switch(s["id"], s.get("kind"), s.get("pci_bus_id"), s.get("parent"),
                                               s.get("numa_node"), _pcie_of(s.get("pcie")), s)
                               for s in d["switches"]}
        self.links: tuple = tuple(Link(l["a"], l["b"], l["kind"], l.get("count"), l.get("bw_GBps"),
                                       l.get("measured_bw_GBps"), l.get("gen"), l.get("width"), l)
                                  for l in d["links"])
        self.cpus: dict = {}
        for n in d["numa_nodes"]:
            info = facts.cpu_identity(n, self.host)
            try:
                cl = tuple(parse_cpulist(n.get("cpus") or ""))
            except ValueError:
                cl = ()
            cid = cpu_id(n["id"], n["host"])
            self.cpus[cid] = CPU(cid, n["id"], cl, info["arch"], info["vendor"], info["family"], info["model"],
                                 info["name"], facts.inter_cpu_bw(info), n, host=n["host"])
        self.cpu_alias: dict = self._cpu_aliases()
        self.nvlink: NVLinkFabric = self._nvlink()
        self._fill_unknown_sm()

    # ---- construction -----------------------------------------------------------------------
    @classmethod
    def of(cls, doc: Union["Topology", dict], source: Optional[str] = None) -> "Topology":
        """The view of ``doc`` (a Topology is returned as it is)."""
        if isinstance(doc, Topology):
            return doc
        return cls(doc, source)

    def _cpu_aliases(self) -> dict:
        """{"CPU<n>": "CPU<m>"} folding memory-only NUMA nodes (no CPUs: GPU HBM exposed as NUMA memory
        on Grace, CXL memory) into the nearest NUMA node that has CPUs, by the distance matrix: NCCL's
        CPU nodes are where root complexes are, and a node without cores cannot be one."""
        out: dict = {}
        by_host: dict = {}
        for n in self.doc["numa_nodes"]:
            by_host.setdefault(n["host"], {})[n["id"]] = n
        for host, nodes in by_host.items():
            with_cpus = sorted(i for i, n in nodes.items() if n.get("cpus"))
            if not with_cpus:
                continue
            ids = sorted(nodes)
            for i, n in nodes.items():
                if n.get("cpus"):
                    continue
                dist = n.get("distances")
                best = None
                for j in with_cpus:
                    dd = dist[ids.index(j)] if dist and len(dist) == len(ids) else None
                    key = (dd if dd is not None else 10 ** 6, j)
                    if best is None or key < best:
                        best = key
                out[cpu_id(i, host)] = cpu_id(best[1], host)
        return out

    def _nvlink_records(self) -> tuple[list, Optional[str]]:
        """[(a, b, count, bw or None, measured or None)] and where they came from."""
        recs = [(l.a, l.b, l.count, l.bw_GBps, l.measured_bw_GBps) for l in self.links if l.kind in ("nvlink", "xgmi")]
        if recs:
            return recs, "links"
        agg: dict = {}
        for g in self.gpus:
            for nl in g.rec.get("nvlink") or []:
                state = str(nl.get("state") or "active").lower()
                if state not in ("active", "up", "ok", "true", "1") or not nl.get("remote"):
                    continue
                key = (g.id, nl["remote"])
                agg[key] = agg.get(key, 0) + 1
        if agg:
            return [(a, r, c, None, None) for (a, r), c in sorted(agg.items())], "nvml"
        out = []
        for g in self.gpus:
            for h in self.gpus:
                if h.index <= g.index:
                    continue
                n = max(nv_count(self.code(g.key, h.key)), nv_count(self.code(h.key, g.key)))
                if n:
                    out.append((g.id, h.id, n, None, None))
        return out, ("matrix" if out else None)

    def _nvlink(self) -> NVLinkFabric:
        """The one NVLink rule (see :class:`NVLinkFabric`)."""
        recs, source = self._nvlink_records()
        gpus = self._gpu_by_id
        nvs_ids = {sid for sid, s in self.switches.items() if s.kind == "nvswitch"}
        per_dir: dict = {}
        meas: dict = {}
        for a, b, count, bw, measured in recs:
            if a == b:
                continue
            if a not in gpus and b in gpus:
                a, b = b, a
            if a not in gpus:
                continue
            if b in gpus:
                peer = b
            elif b in nvs_ids or b == NVS_ID or is_sentinel_bus_id(b) or (b not in self.cpus and not b.startswith("CPU")):
                peer = NVS_ID
            else:
                peer = self.cpu_alias.get(b, b)  # NVLink to a CPU (POWER9 NPU)
            count = count if count and count >= 1 else 1
            cur = per_dir.setdefault((a, peer), [0, 0.0, None])
            cur[0] += count
            cur[1] += float(bw) if bw else count * facts.nvlink_bw_per_link(gpus[a].sm)
            if measured is not None:
                meas[(a, peer)] = meas.get((a, peer), 0.0) + measured
        # bonds to every peer that add up to more links than the GPU has: an NVSwitch port
        pair_counts: dict = {}
        for (a, peer), (count, _bw, _m) in per_dir.items():
            if peer in gpus:
                for x, y in ((a, peer), (peer, a)):
                    pair_counts.setdefault(x, {})[y] = max(pair_counts.get(x, {}).get(y, 0), count)
        on_nvs = {g: max(peers.values()) for g, peers in pair_counts.items()
                  if len(peers) > 1 and sum(peers.values()) > facts.max_nvlinks(gpus[g].sm)}
        fab = NVLinkFabric(source=source, folded=bool(on_nvs))
        if on_nvs:
            self.assume("NVLink bonds to every peer exceed the GPUs' link count: modelled as an NVSwitch")
            for key in [k for k in per_dir if k[1] in gpus and k[0] in on_nvs and k[1] in on_nvs]:
                del per_dir[key]
            for g, count in on_nvs.items():
                if (g, NVS_ID) not in per_dir:
                    per_dir[(g, NVS_ID)] = [count, count * facts.nvlink_bw_per_link(gpus[g].sm), None]
        for (a, peer), (count, bw, _m) in sorted(per_dir.items()):
            m = meas.get((a, peer))
            if peer in gpus:
                key = (a, peer) if a < peer else (peer, a)
                other = per_dir.get((peer, a), [0, 0.0, None])
                m = m if m is not None else meas.get((peer, a))
                prev = fab.pairs.get(key)
                val = (max(count, other[0]), max(bw, other[1]), m)
                if prev is None:
                    fab.pairs[key] = val
            elif peer == NVS_ID:
                fab.nvs[a] = (count, bw, m)
            else:
                fab.cpu[(a, peer)] = (count, bw, m)
        return fab

    def _fill_unknown_sm(self) -> None:
        """NVIDIA GPUs whose compute capability the document does not give (a bare ``nvidia-smi
        topo -m`` capture, an NCCL XML skeleton) get one, as a named assumption: the oldest known
        among the other GPUs; else Hopper when the NVLink counts say so (more than 12 links per GPU,
        which only sm90+ has); else NCCL's default (:data:`facts.DEFAULT_SM`).  Fewer links say
        nothing reliable (4 is a P100 or a bridged RTX A6000, 6 a V100 or a bridged H100 PCIe)."""
        unknown = [g for g in self.gpus if g.sm is None and g.vendor == "nvidia"]
        if not unknown:
            return
        known = [g.sm for g in self.gpus if g.sm is not None]
        if known:
            sm, why = min(known), "as the other GPUs"
        else:
            most = 0
            for g in self.gpus:
                row = self.matrix.get(g.key) or {}
                counts = [nv_count(v) for v in row.values() if nv_count(v)]
                if counts:
                    # on an NVSwitch every peer shows the GPU's full count; otherwise the counts add up
                    most = max(most, max(counts) if len(counts) > 2 and len(set(counts)) == 1 and max(counts) >= 8
                               else sum(counts))
            most = most or max((self.nvlink.links_of(g.id) for g in self.gpus), default=0)
            if most > 12:
                sm, why = 90, f"{most} NVLinks per GPU"
            else:
                sm, why = facts.DEFAULT_SM, "NCCL's default"
        self.gpus = tuple(_replace(g, sm=sm, sm_source="assumed", arch=g.arch or facts.arch_from_sm(sm))
                          if g in unknown else g for g in self.gpus)
        self._gpu_by_index = {g.index: g for g in self.gpus}
        self._gpu_by_id = {g.id: g for g in self.gpus}
        self._gpu_by_key = {g.key: g for g in self.gpus}
        self.assume(facts.assumption("sm", sm=sm, why=why))
        self.nvlink = self._nvlink()   # per-link bandwidth of the assumed generation

    # ---- hosts and the multi-node NVLink fabric ---------------------------------------------------
    @property
    def hosts(self) -> tuple:
        """The hosts (trays) of the document, by id: ``hosts[]`` and every device's ``host``; one host
        (id 0) for a document of one node.  Cached."""
        h = self.__dict__.get("_hosts")
        if h is None:
            named = {x["id"]: x for x in self.doc["hosts"]}
            ids = sorted(set(named) | {g.host for g in self.gpus} | {n.host for n in self.nics}) or [0]
            h = tuple(Host(i, (named.get(i) or {}).get("hostname") or (self.host.get("hostname") if i == 0 else None),
                           (named.get(i) or {}).get("host_hash"),
                           tuple(g.index for g in self.gpus if g.host == i)) for i in ids)
            self.__dict__["_hosts"] = h
        return h

    @property
    def multi_host(self) -> bool:
        """True when the document holds several hosts (NCCL's fused multi-host XML, a log of several)."""
        return len(self.hosts) > 1

    def gpus_on(self, host: int) -> list:
        """The GPUs of one host, in index order."""
        return [g for g in self.gpus if g.host == host]

    def cliques(self) -> list:
        """The MNNVL cliques NCCL would form over this document's GPUs (:class:`Clique`), largest first:
        GPUs whose fabric is attached (registration completed, a cluster UUID, status success), grouped by
        (cluster UUID, clique id), as mnnvl.cc ``ncclMnnvlCheck`` does for a communicator of them all."""
        groups: dict = {}
        for g in self.gpus:
            key = g.fabric.clique if g.fabric is not None else None
            if key is not None:
                groups.setdefault(key, []).append(g)
        out = [Clique(k[0], k[1], tuple(g.index for g in v), tuple(sorted({g.host for g in v})))
               for k, v in groups.items()]
        return sorted(out, key=lambda c: (-len(c.gpus), c.cluster_uuid, c.clique_id))

    @property
    def imex(self) -> Optional[dict]:
        """The IMEX domain (``nvidia-imex-ctl -N``): {domain_state, nodes: [{index, address, state,
        version}], connectivity, timestamp}, None when the document has none."""
        return self.doc.get("imex")

    @property
    def nccl(self) -> dict:
        """What an NCCL log said (``nccl``: version, env, mnnvl), {} when nothing."""
        return self.doc.get("nccl") or {}

    def nvlink_domain(self) -> NVLinkDomain:
        """The NVLink domain (rack) of this document's GPUs: multi-node when a GPU's fabric is attached
        (a GB200/GB300 tray).  Its size in GPUs, from the first that says it: the IMEX domain
        (``nvidia-imex-ctl -N``: its nodes x this tray's GPUs, every tray assumed alike), the hosts of a
        multi-host document in one clique, NCCL's ``nvlDomainSize`` in a log (GPUs of the communicator
        on that fabric: a lower bound); else unknown, and ``note`` says so.  Not multi-node: the largest
        group of GPUs joined by NVLink inside the node."""
        attached = [g for g in self.gpus if g.fabric is not None and g.fabric.attached]
        if not attached:
            doms = self.nvlink.domains(g.id for g in self.gpus)
            size = max((len(d) for d in doms), default=0)
            return NVLinkDomain(False, size, 1 if size else None, "nvlink" if size else None,
                                f"NVLink inside the node: {size} GPUs" if size else "no NVLink between GPUs")
        per_tray = max(len(self.gpus_on(h.id)) for h in self.hosts) or len(self.gpus)
        imex = self.imex
        if imex and imex.get("nodes"):
            n = len(imex["nodes"])
            return NVLinkDomain(True, n * per_tray, n, "imex",
                                f"NVLink domain of {n * per_tray} GPUs: the IMEX domain's {n} nodes x {per_tray} GPUs "
                                "per tray (nvidia-imex-ctl -N; every tray assumed like this one)")
        mn = self.nccl.get("mnnvl") if isinstance(self.nccl.get("mnnvl"), dict) else {}
        if isinstance(mn.get("nvl_domain_size"), int) and mn["nvl_domain_size"] > len(self.gpus_on(0)):
            n = mn["nvl_domain_size"]
            return NVLinkDomain(True, n, -(-n // per_tray), "nccl-log",
                                f"NVLink domain of at least {n} GPUs (NCCL's nvlDomainSize: the communicator's GPUs "
                                "on this fabric)")
        if self.multi_host:
            cl = self.cliques()
            n = len(cl[0].gpus) if cl else len(attached)
            hosts = len(cl[0].hosts) if cl else len(self.hosts)
            return NVLinkDomain(True, n, hosts, "hosts",
                                f"NVLink domain of at least {n} GPUs on {hosts} hosts (this document's)")
        return NVLinkDomain(True, None, None, None,
                            f"multi-node NVLink tray (cluster {attached[0].fabric.cluster_uuid}, clique "
                            f"{attached[0].fabric.clique_id}); the domain's size is unknown: the GPUs' fabric info "
                            "names the domain, not its size (an `nvidia-imex-ctl -N` capture gives it)")

    # ---- lookups ----------------------------------------------------------------------------
    def gpu(self, index: int) -> GPU:
        return self._gpu_by_index[index]

    def gpu_by_id(self, gid: str) -> Optional[GPU]:
        return self._gpu_by_id.get(gid)

    def gpu_by_key(self, key: str) -> Optional[GPU]:
        return self._gpu_by_key.get(key)

    def nic(self, name: str) -> Optional[NIC]:
        return self._nic_by_name.get(name)

    def select(self, indices: Optional[Iterable[int]]) -> list[GPU]:
        """The GPUs with these indices, in index order (all when None).  KeyError names a missing one."""
        if indices is None:
            return list(self.gpus)
        want = sorted(set(int(i) for i in indices))
        missing = [i for i in want if i not in self._gpu_by_index]
        if missing:
            raise KeyError(missing[0])
        return [self._gpu_by_index[i] for i in want]

    def code(self, a: str, b: str) -> Optional[str]:
        """The matrix cell a -> b (nvidia-smi semantics), else b -> a, else None."""
        v = (self.matrix.get(a) or {}).get(b)
        if v is None:
            v = (self.matrix.get(b) or {}).get(a)
        return v

    @property
    def sm_hint(self) -> Optional[int]:
        """The oldest known compute capability among the GPUs (NCCL tunes for the minimum)."""
        sms = [g.sm for g in self.gpus if g.sm]
        return min(sms) if sms else None

    @property
    def software(self) -> "SoftwarePath":
        """The software path the probe found (``software`` section; :mod:`gpucomm.probes.software`)."""
        sw = self.__dict__.get("_software")
        if sw is None:
            from gpucomm.probes.software import SoftwarePath

            sw = self.__dict__["_software"] = SoftwarePath.of(self.doc)
        return sw

    # ---- the rest of the document, as the health checks, diff and placement read it ----------------
    @cached_property
    def pci_models(self) -> dict:
        """PCI bus id -> (vendor id, device id) of every device the probe listed (``pci_devices``: lspci's
        view, with or without a record of its own)."""
        return {d["bdf"]: (_s(d.get("vendor")), _s(d.get("device"))) for d in self.doc["pci_devices"]}

    @cached_property
    def measured_p2p(self) -> dict:
        """Measured copies between GPUs (``measured.p2p``, ``gpucomm bench p2p --save``): {GPU key: {GPU key:
        GB/s or None}}, {} when nothing was measured."""
        return {a: {b: c["bw_GBps"] for b, c in row.items()} for a, row in self.doc["measured"]["p2p"].items()}

    @cached_property
    def probe_sources(self) -> dict:
        """{source name: :class:`ProbeSource`} of the probe that wrote the document (``sources``), {} for
        any other input."""
        out = {}
        for s in self.doc["sources"]:
            src = ProbeSource(_s(s.get("name")), _s(s.get("status")), _s(s.get("detail")))
            out[src.name] = src
        return out

    @property
    def is_nccl_graph(self) -> bool:
        """True when the document came from an NCCL graph file (``<graphs>``: NCCL_GRAPH_FILE /
        NCCL_GRAPH_DUMP_FILE, kept under ``nccl_graph``), which names channels, not the machine."""
        return bool(self.doc.get("nccl_graph"))

    def _copy_doc(self) -> dict:
        import copy

        return copy.deepcopy(self.doc)

    def with_p2p(self, pairs: Iterable, status: str) -> "Topology":
        """A view of the same machine in which NVML reports P2P ``status`` between the GPUs of each
        (index, index) pair in ``pairs`` (what an NCCL log shows where the document says P2P works)."""
        doc = self._copy_doc()
        bus = {g["index"]: g["pci_bus_id"].lower() for g in doc["gpus"] if g.get("pci_bus_id")}
        for g in doc["gpus"]:
            for a, b in pairs:
                other = b if g["index"] == a else a if g["index"] == b else None
                if other is not None and other in bus:
                    g["p2p"][bus[other]] = status
        return Topology(doc, self.source)

    def with_nic_rate(self, gbps: float) -> "Topology":
        """A view of the same machine in which every NIC whose rate nothing gives runs at ``gbps`` (its
        ports, ACTIVE where they have no state; one ACTIVE port where it lists none), taking over the
        defaults this view applied (:meth:`absorb`)."""
        doc = self._copy_doc()
        for nic in doc["nics"]:
            if facts.nic_rate_gbps(nic):
                continue
            ports = nic["ports"] or [{"port": 1, "state": "ACTIVE"}]
            nic["ports"] = [dict(p, rate_gbps=float(gbps), state=p.get("state") or "ACTIVE") for p in ports]
        view = Topology(doc, self.source)
        view.absorb(self)
        return view

    def pci_code(self, a: Union[GPU, NIC], b: Union[GPU, NIC]) -> Optional[str]:
        """nvidia-smi's code for the PCI path between two devices by the document's PCI tree (their
        parents and NUMA nodes; :mod:`gpucomm.probes.matrix`, the one definition of nvidia-smi's
        levels), None when the tree does not place them."""
        from gpucomm.probes.matrix import ancestors, pci_level

        switches = {sid: s.rec for sid, s in self.switches.items()}
        level = pci_level(ancestors(a.parent, switches, a.numa_node), ancestors(b.parent, switches, b.numa_node),
                          switches)
        return None if level == "N/A" else level

    @property
    def has_pci_tree(self) -> bool:
        """True when the document carries a PCI tree (parents or pcie links), not only a matrix."""
        return any(g.parent for g in self.gpus) or any(n.parent for n in self.nics) or \
            any(l.kind == "pcie" for l in self.links)

    def numa_cpus(self) -> dict:
        """NUMA id -> cpus, for NUMA nodes that have CPUs."""
        return {c.numa: list(c.cpus) for c in self.cpus.values() if c.cpus}

    def cpu_for(self, numa: Optional[int], host: int = 0) -> CPU:
        """The CPU node of a NUMA id on ``host`` (memory-only nodes folded into their nearest CPU node)."""
        cid = self.cpu_alias.get(cpu_id(numa, host), cpu_id(numa, host))
        if cid in self.cpus:
            return self.cpus[cid]
        m = re.match(r"^(?:\d+/)?CPU(-?\d+)$", cid)
        info = facts.cpu_identity(None, self.host)
        return CPU(cid, int(m.group(1)) if m else None, (), info["arch"], info["vendor"], info["family"],
                   info["model"], info["name"], facts.inter_cpu_bw(info), {}, host=host)

    def derived(self, key: str, make):
        """A value derived from this view alone (the NCCL XML pinned from it, ...), made once: a view
        does not change after :meth:`of` (the assumptions ``make`` records stay recorded)."""
        memo = self.__dict__.setdefault("_derived", {})
        if key not in memo:
            memo[key] = make()
        return memo[key]

    # ---- facts with their one default (recorded as assumptions) ---------------------------------
    def assume(self, text: str) -> None:
        if text not in self.assumptions:
            self.assumptions.append(text)

    def inter_cpu_bw(self, cpu: CPU) -> float:
        """NCCL's SMP bandwidth out of ``cpu``; :data:`facts.DEFAULT_INTER_CPU_BW` when unknown."""
        if cpu.sys_bw is not None:
            return cpu.sys_bw
        self.assume(facts.assumption("cpu"))
        return facts.DEFAULT_INTER_CPU_BW

    def nic_gbps(self, nic: NIC) -> float:
        """A NIC's rate in Gb/s; :func:`facts.default_nic_gbps` (of the GPU generation for an RDMA NIC,
        NCCL's socket default for a plain interface) when unknown."""
        if nic.rate_gbps:
            return nic.rate_gbps
        # NCCL's socket default only where a probe saw a plain interface (record ``rdma: false``); a NIC
        # of unknown kind (an NCCL XML's network-class PCI device, a topo -m legend) is the rail NIC
        return self.unknown_nic_gbps(nic.name, rdma=nic.rec.get("rdma") is not False)

    def unknown_nic_gbps(self, name: str, rdma: bool = True) -> float:
        """The rate assumed for the NIC ``name`` whose rate nothing gives (:func:`facts.default_nic_gbps`),
        remembered for :meth:`all_assumptions` (one line per default, naming every NIC it was applied to)."""
        guess = facts.default_nic_gbps(self.sm_hint, rdma=rdma)
        names = self._unknown_nics.setdefault((guess, rdma), [])
        if name not in names:
            names.append(name)
        return guess

    def default_pcie_bw(self) -> float:
        """NCCL bandwidth of a PCIe link whose generation is unknown: the GPUs' usual generation, x16."""
        gen = facts.default_pcie_gen(self.sm_hint)
        self.assume(facts.assumption("pcie", gen=gen))
        return facts.pcie_bw_GBps(gen, 16)

    def absorb(self, other: "Topology") -> None:
        """Take over the defaults another view of the same machine applied (a derived copy)."""
        for a in other.assumptions:
            self.assume(a)
        for guess, names in other._unknown_nics.items():
            mine = self._unknown_nics.setdefault(guess, [])
            mine.extend(n for n in names if n not in mine)

    @property
    def _unknown_nics(self) -> dict:
        d = self.__dict__.setdefault("_unknown_nics_d", {})
        return d

    def all_assumptions(self, nics: bool = True) -> list[str]:
        """Every default this view has applied so far, in one wording per fact (``nics=False``: without
        the NIC rates, for answers about one node, where no NIC carries traffic)."""
        out = list(self.assumptions)
        for (guess, rdma), names in sorted(self._unknown_nics.items()) if nics else ():
            text = facts.assumption("nic-rate", names=sorted(names, key=natural_key), gbps=guess, rdma=rdma)
            if text not in out:
                out.append(text)
        return out


def _truthy(v: Any, default: bool = True) -> bool:
    if v is None:
        return default
    if isinstance(v, str):
        return v.strip().lower() not in ("0", "false", "no", "off", "")
    return bool(v)


def _replace(obj, **kw):
    from dataclasses import replace

    return replace(obj, **kw)
