"""``gpucomm doctor``'s rules about the software path NCCL runs over (the ``software`` section the
probe sources of :mod:`gpucomm.probes.sources.swpath` write; docs/SWPATH.md).  Registered into
:data:`gpucomm.planners.health.doctor.RULES`; each finds nothing where the document does not record
the software path.  ACS redirect between a GPU and its NIC and the IOMMU in translated mode are
``p2p-blocked``'s (doctor.py), which reads the same switches and ``host.iommu``.

==================  ============================================================================
gdr-unavailable     RDMA NICs and NVIDIA GPUs, but no GPUDirect RDMA: no nvidia_peermem /
                    nv_peer_mem loaded and no dma-buf (kernel >= 5.12, open kernel modules R515+)
vm-p2p              a virtual machine whose GPUs lack peer-to-peer (NVML P2P status not OK) or
                    whose PCI tree the hypervisor flattened (no switch or host bridge above them)
socket-transport    RDMA NICs, but NCCL would use its TCP socket transport (NCCL_NET=Socket,
                    NCCL_IB_DISABLE=1)
nccl-version        the NCCL a job loads is older than an NCCL_* setting set in the environment,
                    or than the settings ``gpucomm plan`` emits (probes/facts.py NCCL_SETTING_SINCE)
nvlink-services     NVSwitch chips without a running fabric manager; multi-node NVLink (a fabric
                    cluster UUID) without a running IMEX service
==================  ============================================================================
"""
from __future__ import annotations

from gpucomm.probes.facts import NCCL_PLAN_SETTINGS, NCCL_SETTING_SINCE
from gpucomm.probes.software import expected_transport
from gpucomm.probes.topology import Topology


def _version(t) -> str:
    return ".".join(map(str, t))


def _rdma_names(topo: Topology) -> list:
    return [n.name for n in topo.nics if n.rdma]


def register(rule, finding) -> None:
    """Add the rules to the doctor (``rule`` and ``finding`` are doctor.py's)."""

    @rule("gdr-unavailable")
    def check_gdr(topo: Topology, env: dict) -> list:
        sw = topo.software
        rdma = _rdma_names(topo)
        gpus = [g for g in topo.gpus if g.vendor == "nvidia"]
        if sw.gdr is not False or not rdma or not gpus:
            return []
        why = sw.gdr_why or "no GPUDirect RDMA"
        return [finding(
            "gdr-unavailable", "warning", "host",
            f"GPUDirect RDMA is not available ({why}): NCCL stages every inter-node transfer through host memory "
            f"over {', '.join(rdma[:4])}{' ...' if len(rdma) > 4 else ''} (GDRDMA missing from its NET lines)",
            "Load the peer-memory module (`modprobe nvidia_peermem`, shipped with the driver since R470), or run "
            "the open kernel modules (R515+) on a kernel >= 5.12 for dma-buf; check with `NCCL_DEBUG=INFO` "
            "(`via NET/IB/0/GDRDMA`).")]

    @rule("vm-p2p")
    def check_vm(topo: Topology, env: dict) -> list:
        sw = topo.software
        gpus = topo.gpus
        if sw.vm is not True or len(gpus) < 2:
            return []
        by_bus = {g.pci_bus_id: g for g in gpus if g.pci_bus_id}
        bad = sorted({tuple(sorted((g.index, by_bus[o].index)))
                      for g in gpus for o, st in g.p2p.items()
                      if o in by_bus and st not in (None, "OK")})
        flat = not any(s.kind in ("pcie", "host_bridge") for s in topo.switches.values()) and \
            not any(g.parent for g in gpus)
        if not bad and not flat:
            return []
        where = sw.platform or "hypervisor"
        parts = []
        if bad:
            parts.append("NVML reports no peer-to-peer for " + ", ".join(f"GPU{a}-GPU{b}" for a, b in bad[:4])
                         + (" ..." if len(bad) > 4 else ""))
        if flat:
            parts.append("the PCI tree is flat (no switch or host bridge above the GPUs): NCCL cannot see which "
                         "GPUs and NICs share a switch")
        return [finding(
            "vm-p2p", "warning", "host",
            f"a virtual machine ({where}) hides what NCCL needs: {'; '.join(parts)}",
            "Ask for GPU peer-to-peer in the VM (PCIe ACS/ATS passed through, or NVLink visible), and give NCCL the "
            "host's real topology: NCCL_TOPO_FILE (your cloud's published XML, or `gpucomm show --format nccl-xml` "
            "of the host).")]

    @rule("socket-transport")
    def check_socket(topo: Topology, env: dict) -> list:
        if not topo.software.known:
            return []
        rdma = _rdma_names(topo)
        e = expected_transport(topo)
        if e["kind"] != "socket" or not rdma:
            return []
        return [finding(
            "socket-transport", "warning", "host",
            f"NCCL would use its TCP socket transport ({e['why']}) although the node has RDMA NICs "
            f"({', '.join(rdma[:4])}): a fraction of their bandwidth (docs/SWPATH.md: ~20 Gb/s per NIC)",
            "Unset NCCL_NET=Socket / NCCL_IB_DISABLE, or install the network plugin the fabric needs "
            "(aws-ofi-nccl for EFA/Slingshot); check with `NCCL_DEBUG=INFO` (`Using network IB`).")]

    @rule("nccl-version")
    def check_nccl_version(topo: Topology, env: dict) -> list:
        sw = topo.software
        lib = sw.nccl_in_use()
        v = lib.version_tuple if lib else None
        if v is None:
            return []
        out = []
        for name in sorted(NCCL_SETTING_SINCE):
            need = NCCL_SETTING_SINCE[name]
            if v >= need:
                continue
            if name in sw.env:
                out.append(finding(
                    "nccl-version", "warning", name,
                    f"{name}={sw.env[name]} is set, but the NCCL a job loads here ({lib.version}, {lib.path}) is older "
                    f"than {_version(need)}, which introduced it: NCCL ignores it",
                    f"Use NCCL >= {_version(need)} (pip install -U nvidia-nccl-cu12, or your distribution's "
                    f"libnccl2), or drop the setting."))
        plan = sorted(n for n in NCCL_PLAN_SETTINGS if v < NCCL_SETTING_SINCE[n] and n not in sw.env)
        if plan:
            out.append(finding(
                "nccl-version", "info", lib.path,
                f"NCCL {lib.version} predates settings `gpucomm plan` may emit: " +
                ", ".join(f"{n} ({_version(NCCL_SETTING_SINCE[n])})" for n in plan),
                "Upgrade NCCL before launching with gpucomm plan's environment, or leave those settings out."))
        return out

    @rule("nvlink-services")
    def check_services(topo: Topology, env: dict) -> list:
        sw = topo.software
        svc = sw.services
        if not svc:
            return []
        out = []
        nvswitch = [s for s in topo.switches.values() if s.kind == "nvswitch" and s.pci_bus_id]
        fm = svc.get("fabricmanager") or {}
        if nvswitch and fm.get("running") is False:
            out.append(finding(
                "nvlink-services", "error", "fabricmanager",
                f"{len(nvswitch)} NVSwitch chip(s) but the fabric manager is not running"
                + (" (installed, not started)" if fm.get("installed") else " (not installed)")
                + ": CUDA fails with 'system not yet initialized' and NVLink carries nothing",
                "`systemctl enable --now nvidia-fabricmanager` (the package matching the driver version); "
                "B200/GB200 systems also need the NVLink subnet manager (nvlsm) it starts."))
        mnnvl = [g for g in topo.gpus if g.fabric is not None and g.fabric.cluster_uuid]
        imex = svc.get("imex") or {}
        if mnnvl and imex.get("running") is False:
            out.append(finding(
                "nvlink-services", "warning", "imex",
                f"{len(mnnvl)} GPU(s) in a multi-node NVLink domain but the IMEX service is not running"
                + (" (installed, not started)" if imex.get("installed") else " (not installed)")
                + ": NCCL cannot share memory across the domain (MNNVL falls back to the network)",
                "`systemctl enable --now nvidia-imex` with /etc/nvidia-imex/nodes_config.cfg listing the domain's "
                "nodes; check `nvidia-imex-ctl -N`."))
        return out


__all__ = ["register"]
