"""NCCL / CUDA / CPU-binding environment for a plan, each setting with a one-line reason
(``gpucomm plan``).  Pure functions: the NCCL topology file, when one is needed, is returned as text
in ``files`` for the caller to write.

Pain points users report (GitHub issues cited) that this module addresses (each has a test):
  * NCCL_IB_HCA prefix matching -- without ``=`` ``mlx5_1`` also selects ``mlx5_10..19``
    (NCCL env.rst; net_ib/init.cc), so the list is always exact (``=mlx5_0:1,...``);
  * VMs that flatten the PCIe tree (nccl#1843, nccl-tests#256, nccl#1464, nccl#1674): a skeleton
    NCCL_TOPO_FILE with each GPU and its NIC under a fake bridge ``ffff:ff:0N.0`` (the Azure/AWS
    static topology files in captures/ncclxml);
  * CUDA's FASTEST_FIRST device order vs the PCI order of nvidia-smi/NVML/Slurm (gpustack#1633,
    flux-core#1598, DIGITS#1358): CUDA_DEVICE_ORDER=PCI_BUS_ID;
  * MIG slices cannot use P2P/NVLS (nccl#1716) -- refused/warned by placement, noted here;
  * NUMA binding that differs between torchrun, srun and mpirun (pytorch#115305, nccl-tests#57):
    one explicit per-local-rank CPU list that every launcher emitter applies the same way;
  * P2P disabled by NVML / consumer GPUs (nccl#2079, nccl-tests#117): NCCL_P2P_LEVEL / _DISABLE.
"""
from __future__ import annotations

import os
import re
from typing import Dict, List, Optional, Tuple

from gpucomm.probes.model import format_cpulist, gpu_id, nic_id, parse_cpulist
from gpucomm.probes.model import natural_key as _natural

from gpucomm.planners.nccl.names import PATH_NAMES
from gpucomm.planners.placement.nics import SMI_TO_NCCL_LEVEL, nic_has_device_name
from gpucomm.planners.placement.nodeview import NodeView

DEFAULT_TOPO_FILE = "/etc/gpucomm/nccl-topo.xml"
# Megatron-LM asks for CUDA_DEVICE_MAX_CONNECTIONS=1 with TP or CP on GPUs before Blackwell (sm 100)
MEGATRON_ANY_CONNECTIONS_SM = 100
_CONSUMER_RE = re.compile(r"GeForce|\bRTX\s*[2-5]0[5-9]0|\bGTX\b|TITAN", re.I)
_PATH_ORDER = PATH_NAMES


def _set(env: dict, name: str, value: str, reason: str) -> None:
    env[name] = {"value": str(value), "reason": " ".join(reason.split())}


def cuda_indices(view: NodeView) -> Dict[int, int]:
    """NVML index -> CUDA index under CUDA_DEVICE_ORDER=PCI_BUS_ID (position in PCI bus order).
    Falls back to the NVML index when a bus id is unknown."""
    gpus = view.topo.gpus
    if any(not g.pci_bus_id for g in gpus):
        return {g.index: g.index for g in gpus}
    ordered = sorted(gpus, key=lambda g: g.pci_bus_id)
    return {g.index: pos for pos, g in enumerate(ordered)}


def flat_pcie(view: NodeView) -> bool:
    """True when the visible PCIe tree hides the GPU/NIC pairing, as in VMs: no PCIe switch is
    visible, no GPU is PIX/PXB to any NIC, and either there are several GPUs and NICs (real HGX-class
    boards always have switches) or sysfs reports NUMA node -1.  Never for GPUs on C2C (Grace
    Hopper/Blackwell): each hangs off its own CPU, which is the real tree, not a VM's flattening."""
    topo = view.topo
    if not view.nics or view.gpu_count < 2:
        return False
    if any(topo.gpu(i).c2c for i in view.index):
        return False
    if any(s.kind == "pcie" for s in topo.switches.values()):
        return False
    rdma = [topo.nic(n) for n in view.nics if topo.nic(n).rdma] or [topo.nic(n) for n in view.nics]
    gpus = [topo.gpu(i) for i in view.index]
    for g in gpus:
        for n in rdma:
            code = (topo.matrix.get(g.key) or {}).get(n.name)
            if code in ("PIX", "PXB"):
                return False
    numa_unknown = any(d.numa_node == -1 for d in gpus + rdma)
    return (view.gpu_count >= 4 and len(rdma) >= 2) or numa_unknown


def topo_skeleton(view: NodeView) -> dict:
    """A topology document that puts each GPU and the NIC(s) placement paired with it under one fake
    PCIe bridge ``ffff:ff:0N.0`` (class 0x060400) below the GPU's CPU -- the shape of Azure's and
    AWS's static NCCL topology files -- for ``gpucomm.probes.formats.nccl_xml.export_nccl_xml``.  A NIC shared by
    several GPUs brings them under the same bridge."""
    from gpucomm.probes.facts import pcie_bw_GBps
    from gpucomm.probes.model import link_record, new_document, switch_record

    topo = view.topo
    out = new_document("json")
    out["host"].update({k: v for k, v in topo.host.items() if k in out["host"]})
    out["host"]["provenance"] = "json"
    out["numa_nodes"] = [dict(c.rec) for c in topo.cpus.values()]
    # Union GPUs that share a NIC into one bridge.
    groups: List[Tuple[List[int], List[str]]] = []
    for i in view.index:
        nics = view.gpu_nics.get(i, [])
        shared = [k for k, (gs, ns) in enumerate(groups) if set(ns) & set(nics)]
        if shared:
            gs, ns = groups[shared[0]]
            gs.append(i)
            for n in nics:
                if n not in ns:
                    ns.append(n)
        else:
            groups.append(([i], list(nics)))
    for k, (gs, ns) in enumerate(groups, start=1):
        bridge = f"ffff:ff:{k:02x}.0" if k < 32 else f"ffff:fe:{k - 31:02x}.0"
        numa = topo.gpu(gs[0]).numa_node
        numa = numa if numa is not None and numa >= 0 else 0
        out["switches"].append(switch_record(bridge, "pcie", pci_bus_id=bridge, parent=f"CPU{numa}", numa_node=numa))
        out["links"].append(link_record(bridge, f"CPU{numa}", "pcie", pcie_bw_GBps(None, 16), width=16))
        for gi in gs:
            gpu = topo.gpu(gi)
            g = dict(gpu.rec, parent=bridge, numa_node=numa)    # the GPU's record, under its bridge
            out["gpus"].append(g)
            gen, width = (gpu.pcie.gen, gpu.pcie.width) if gpu.pcie else (None, None)
            out["links"].append(link_record(gpu.id, bridge, "pcie", pcie_bw_GBps(gen, width), gen=gen, width=width))
        for name in ns:
            n = dict(topo.nic(name).rec)
            n["parent"] = bridge
            n["numa_node"] = numa
            out["nics"].append(n)
            out["links"].append(link_record(nic_id(n), bridge, "pcie", pcie_bw_GBps(None, 16), width=16))
    # NVLink topology is not part of the PCIe problem: keep it as the host has it.
    keep = {gpu_id(g) for g in out["gpus"]}
    nvs = [s for s in topo.switches.values() if s.kind == "nvswitch"]
    out["switches"].extend(dict(s.rec) for s in nvs)
    nvs_ids = {s.id for s in nvs}
    for l in topo.links:
        if l.kind == "nvlink" and (l.a in keep or l.a in nvs_ids) and (l.b in keep or l.b in nvs_ids):
            out["links"].append(dict(l.rec))
    return out


def topo_file_text(view: NodeView) -> Optional[str]:
    """The skeleton as NCCL topology XML (:func:`gpucomm.probes.formats.nccl_xml.export_nccl_xml`),
    with a comment saying why NCCL needs it."""
    from gpucomm.probes.formats.nccl_xml import export_nccl_xml

    return xml_comment(
        "gpucomm: the topology NCCL should load on this host (NCCL_TOPO_FILE). NCCL would NOT find it on its "
        "own: the visible PCIe tree is flat (a VM), so NCCL could not tell which NIC is next to which GPU; here "
        "each GPU and its NIC share a bridge, so NCCL uses GPUDirect RDMA and the right NIC per GPU.") \
        + export_nccl_xml(topo_skeleton(view))


def xml_comment(text: str) -> str:
    """An XML comment line NCCL's parser skips (xml.cc xmlSkipComment) and XML allows: no ``--``
    inside, no tabs (NCCL skips only spaces and newlines before a tag)."""
    body = " ".join(text.replace("--", "- -").split())
    return f"<!-- {body} -->\n"


def pinned_topo_xml(view: NodeView) -> str:
    """The topology XML NCCL itself detects on the host of ``view`` (:func:`gpucomm.planners.nccl.pinning.pin`:
    every value NCCL reads from the host written in), with a comment saying that NCCL finds the same
    on its own and which values were assumed.  InputError when the GPUs' PCI bus ids are unknown
    (an ``nvidia-smi topo -m`` capture): NCCL matches a topology file's GPUs by bus id."""
    from gpucomm.planners.nccl.pinning import pin
    from gpucomm.probes.errors import InputError

    topo = view.topo
    if any(not g.pci_bus_id for g in topo.gpus):
        raise InputError("the input has no PCI bus ids for its GPUs (an nvidia-smi topo -m capture prints none), "
                         "and NCCL matches the GPUs of a topology file by bus id: no NCCL_TOPO_FILE can be written",
                         expected="a snapshot (gpucomm snapshot), a live probe on the node, or an NCCL topology dump")
    from gpucomm.probes.formats.nccl_xml import STATIC_SKELETON

    text = pin(topo)
    assumed = list(topo.assumptions)
    source = topo.probe_sources.get("nccl-xml")
    if source is not None and STATIC_SKELETON in str(source.detail):
        note = ("gpucomm: the topology NCCL should load on this host, from a static topology file (NCCL_TOPO_FILE) "
                "as cloud providers ship for VMs, values NCCL reads from the host written in. NCCL would NOT find "
                "this on its own: such a VM shows NCCL a flat PCIe tree; keep NCCL_TOPO_FILE pointing at a file "
                "like this one.")
    else:
        note = ("gpucomm: the topology NCCL detects by itself on this host (its PCIe tree, GPUs and NICs, values "
                "NCCL reads from the host written in). NCCL would find the same on its own: NCCL_TOPO_FILE is not "
                "needed here; the file pins what NCCL sees (for ncclsim, or to keep it when the host changes).")
    if assumed:
        note += " Assumed where the input did not say: " + "; ".join(assumed) + "."
    return xml_comment(note) + text


def build_env(plan: dict, view: NodeView, *, topo_file_path: str = DEFAULT_TOPO_FILE, nccl_graph: bool = False) -> dict:
    """Fill ``plan['env']``, ``plan['binding']`` and ``plan['files']``; returns the plan.  ``nccl_graph``:
    also search our rings and set NCCL_GRAPH_FILE where they beat NCCL's own search (one node; costs
    a ring search and NCCL's, about 0.5 s on an 8-GPU node)."""
    env: Dict[str, dict] = {}
    warnings: List[str] = plan.setdefault("warnings", [])
    files: Dict[str, str] = {}
    nodes = plan["nodes"]
    local = plan["local_ranks"]
    local_gpus = [lr["gpu"] for lr in local]
    cidx = cuda_indices(view)

    _set(env, "CUDA_DEVICE_ORDER", "PCI_BUS_ID",
         "CUDA numbers GPUs fastest-first by default; nvidia-smi, NVML, Slurm and this plan use PCI bus order")
    cvd = ",".join(str(cidx.get(g, g)) for g in local_gpus)
    if any(cidx.get(g, g) != g for g in local_gpus):
        warnings.append("NVML index order differs from PCI bus order on this host; CUDA_VISIBLE_DEVICES uses PCI order")
    _set(env, "CUDA_VISIBLE_DEVICES", cvd,
         "every rank sees all of the node's plan GPUs (keeps CUDA IPC/P2P, nccl#1066) in local-rank order, "
         "so cuda:LOCAL_RANK is the GPU the plan chose")

    # ---- Megatron-LM: TP/CP overlap relies on one CUDA work queue before Blackwell
    par = plan.get("parallelism") or {}
    if par.get("tp", 1) > 1 or par.get("cp", 1) > 1:
        sms = [view.topo.gpu(g).sm for g in local_gpus]
        if not sms or any(sm is None or sm < MEGATRON_ANY_CONNECTIONS_SM for sm in sms):
            _set(env, "CUDA_DEVICE_MAX_CONNECTIONS", "1",
                 "tensor/context parallelism: one hardware work queue keeps communication kernels in issue order "
                 "so they overlap with compute; Megatron-LM refuses TP or CP without it before Blackwell "
                 "(validate_args)")

    # ---- network
    used = []
    for lr in local:
        for n in lr["nics"]:
            if n not in used:
                used.append(n)
    rdma_used = [n for n in used if n in view.nics and view.topo.nic(n).rdma]
    if nodes > 1 and rdma_used:
        names = sorted((n for n in rdma_used if nic_has_device_name(n)), key=_natural)
        unnamed = sorted(n for n in rdma_used if not nic_has_device_name(n))
        if unnamed:
            warnings.append("the RDMA NIC(s) at " + ", ".join(unnamed[:4]) + (" ..." if len(unnamed) > 4 else "")
                            + " have no device name in this topology (an NCCL XML skeleton?): "
                            "NCCL_IB_HCA cannot name them")
        if names:
            entries = [f"{n}:{p}" for n in names for p in view.topo.nic(n).active_ports]
            all_names = list(view.nics) + [n.name for n in view.topo.nics]
            clash = sorted({o for n in names for o in all_names if o and o != n and o.startswith(n)}, key=_natural)
            reason = f"exactly the {len(names)} NIC(s) next to the plan's GPUs, with ports"
            if clash:
                reason += f"; '=' stops prefix matching (without it {names[0]} would also select {', '.join(clash[:3])})"
            else:
                reason += "; '=' makes NCCL match names exactly instead of by prefix"
            _set(env, "NCCL_IB_HCA", "=" + ",".join(entries), reason)
        c2c = [g for g in local_gpus if view.topo.gpu(g).c2c]
        levels = [view.gpu_nic_level.get(g) for g in local_gpus if view.gpu_nics.get(g) and g not in c2c]
        ncl = [SMI_TO_NCCL_LEVEL.get(c, "SYS") for c in levels if c]
        if c2c:
            # Grace Hopper/Blackwell: GPU -> C2C -> CPU -> PCIe -> NIC is NCCL's P2C path, which
            # nvidia-smi prints as SYS.  GDR over it needs the P2C level (NCCL_NET_GDR_C2C, default 1
            # since 2.27); a PXB limit would switch GPUDirect RDMA off.
            _set(env, "NCCL_NET_GDR_C2C", "1",
                 "GPUs reach their NICs over C2C through the CPU (NCCL path P2C, shown as SYS by nvidia-smi): "
                 "keep GPUDirect RDMA on that path (default since NCCL 2.27)")
        if ncl:
            worst = max(ncl, key=_PATH_ORDER.index)
            if _PATH_ORDER.index(worst) <= _PATH_ORDER.index("PXB"):
                _set(env, "NCCL_NET_GDR_LEVEL", worst,
                     f"every rank's NIC is at most {worst} from its GPU: GPUDirect RDMA for all of them")
            else:
                _set(env, "NCCL_NET_GDR_LEVEL", "PXB",
                     f"some GPU/NIC pairs meet only at the CPU ({worst}): GPUDirect through the root complex is "
                     "usually slower than staging in host memory, so keep NCCL's PXB limit")
                bad = [f"GPU{g}-{view.gpu_nics[g][0]}" for g in local_gpus
                       if view.gpu_nics.get(g) and SMI_TO_NCCL_LEVEL.get(view.gpu_nic_level.get(g), "SYS") in ("PHB", "SYS")]
                warnings.append("no GPUDirect RDMA for " + ", ".join(bad[:8]) + (" ..." if len(bad) > 8 else "")
                                + ": the GPU and its nearest NIC are not under a common PCIe switch")
        if all(lr["nics"] for lr in local):
            _set(env, "NCCL_CROSS_NIC", "0",
                 "rail-aligned plan: local rank i uses the same-rail NIC on every node, so rings and trees "
                 "can stay on one rail (nccl#1591)")
            dual = dual_port_cards(view, rdma_used)
            if dual:
                warnings.append(
                    "NCCL_CROSS_NIC=0 does not hold on dual-port cards (" + ", ".join(dual[:4])
                    + (" ..." if len(dual) > 4 else "") + "; ConnectX-7/BlueField-3 with both ports cabled): NCCL "
                    "fuses the ports of one card into one virtual NIC (NCCL_IB_MERGE_NICS, default on) and spreads "
                    "channels over both, so traffic crosses rails whenever the two ports sit on different rails; "
                    "cable both ports of a card to the same rail, or set NCCL_IB_MERGE_NICS=0")
        roce_gid_index(env, warnings, view, rdma_used)
        front = _front_end_netdev(view, set(used), warnings)
        if front:
            _set(env, "NCCL_SOCKET_IFNAME", "=" + front,
                 "bootstrap and socket traffic on the host network interface, not a container/loopback one (nccl#1447)")
        else:
            netdevs = [view.topo.nic(n).netdev for n in names if _valid_ifname(view.topo.nic(n).netdev)]
            if netdevs:
                _set(env, "NCCL_SOCKET_IFNAME", "=" + ",".join(netdevs),
                     "no separate host Ethernet interface is known: bootstrap over the IPoIB/RoCE netdevs of the plan's NICs")
    elif nodes > 1:
        front = _front_end_netdev(view, set(), warnings)
        if front:
            _set(env, "NCCL_SOCKET_IFNAME", "=" + front, "no RDMA NIC: NCCL's socket transport on this interface")
        warnings.append("multi-node plan without RDMA NICs: NCCL falls back to TCP sockets")

    # ---- P2P
    plan_pairs = {(a, b) for a in local_gpus for b in local_gpus if a < b}
    disabled = [p for p in view.p2p_disabled if p in plan_pairs]
    nv_pairs = [p for p in plan_pairs if view.level.get(p, "").startswith("NV")]
    if disabled:
        if nv_pairs and not any(p in nv_pairs for p in disabled):
            _set(env, "NCCL_P2P_LEVEL", "NVL",
                 f"NVML reports P2P disabled between GPUs {disabled[0][0]} and {disabled[0][1]} over PCIe: "
                 "use P2P only over NVLink, host memory elsewhere (nccl#2079 hangs)")
        else:
            _set(env, "NCCL_P2P_DISABLE", "1",
                 f"NVML reports P2P disabled between GPUs {disabled[0][0]} and {disabled[0][1]} "
                 "(ACS/IOMMU or consumer GPUs): NCCL would hang or fail on P2P (nccl#2079, nccl-tests#117)")
    elif len(local_gpus) > 1 and not nv_pairs and any(_CONSUMER_RE.search(view.topo.gpu(g).name or "") for g in local_gpus):
        warnings.append("consumer GPUs without NVLink: the driver may refuse PCIe P2P; if NCCL hangs, "
                        "set NCCL_P2P_DISABLE=1 (nccl-tests#117) or check ACS/IOMMU (nccl#2079)")

    # ---- CPU binding
    binding = []
    cores = []
    for lr in local:
        cpus = lr.get("cpus")
        n = lr.get("cores")
        if n:
            cores.append(n)
        numactl = None
        if cpus:
            numactl = f"numactl --physcpubind={cpus}" + (f" --membind={lr['mems']}" if lr.get("mems") is not None else "")
        binding.append({"local_rank": lr["local_rank"], "gpu": lr["gpu"], "cuda_index": cidx.get(lr["gpu"], lr["gpu"]),
                        "cpus": cpus, "mems": lr.get("mems"), "omp_num_threads": n,
                        "numa_source": lr.get("numa_source"), "logical_cores": lr.get("logical_cores"),
                        "numactl": numactl, "taskset": f"taskset -c {cpus}" if cpus else None,
                        "cpu_mask": _hexmask(cpus) if cpus else None})
    if cores:
        _set(env, "OMP_NUM_THREADS", str(min(cores)),
             "one thread per physical core of a rank's exclusive CPU share (the wrapper sets each rank's own count)")
    if any(lr.get("cpus") is None for lr in local):
        warnings.append("NUMA/CPU affinity unknown for some GPUs: no CPU binding for them")
    shared = [b for b in binding if b["cpus"] and sum(1 for c in binding if c["cpus"] == b["cpus"]) > 1]
    if shared:
        warnings.append("fewer physical cores than ranks on a NUMA node: ranks share CPUs")

    # ---- our rings as an NCCL graph file, where NCCL's own search finds less (one node)
    if nccl_graph and nodes == 1 and len(local_gpus) > 1:
        found = graph_file_gain(view, local_gpus)
        if found is not None:
            text, info = found
            files["nccl-graph.xml"] = text
            _set(env, "NCCL_GRAPH_FILE", os.path.join(os.path.dirname(topo_file_path) or ".", "nccl-graph.xml"),
                 f"our rings on these GPUs: {info['channels']} channel(s) x {info['bw_GBps']:g} GB/s = "
                 f"{info['total_bw_GBps']:g} GB/s where NCCL's own search finds {info['nccl_total_bw_GBps']:g} "
                 "GB/s; NCCL loads this ring graph instead of searching (NCCL's own code loads our files, "
                 "tests/test_nccl_graphfile.py); write it with `gpucomm plan ... --emit nccl-graph`")

    # ---- VM / flat PCIe tree
    if flat_pcie(view):
        from gpucomm.probes.errors import InputError

        try:
            text = topo_file_text(view)
        except InputError as e:  # e.g. an nvidia-smi capture: no PCI bus ids to write
            text = None
            warnings.append(f"the PCIe tree looks flat (VM?) but no NCCL_TOPO_FILE can be written: {e}; "
                            "plan from a live probe or a snapshot of the node to get one")
        if text is not None:
            files["nccl-topo.xml"] = text
            _set(env, "NCCL_TOPO_FILE", topo_file_path,
                 "the visible PCIe tree is flat (VM): this file pairs each GPU with its NIC under a fake bridge "
                 "so NCCL uses GPUDirect and the right NIC per GPU (nccl#1843, nccl-tests#256); write it with "
                 "`gpucomm plan ... --emit nccl-xml`")
        elif not any("no NCCL_TOPO_FILE can be written" in w for w in warnings):
            warnings.append("the PCIe tree is flat (VM) but the NCCL XML exporter is not available: no NCCL_TOPO_FILE")
    plan["env"] = {k: env[k] for k in sorted(env)}
    plan["binding"] = binding
    plan["files"] = files
    plan["warnings"] = list(dict.fromkeys(warnings))
    return plan


def dual_port_cards(view: NodeView, names: List[str]) -> List[str]:
    """The plan's RDMA NICs that are one port of a card with two or more active ports: a device with
    several active ports, or devices sharing a ``sys_image_guid`` (one ASIC, one device per port, as
    ConnectX-7 and BlueField-3 show them) -- what NCCL fuses into one virtual NIC."""
    by_card: Dict[str, List[str]] = {}
    out = []
    for name in view.nics:
        n = view.topo.nic(name)
        if not n.rdma:
            continue
        if len(n.active_ports) > 1 and name in names:
            out.append(name)
        card = n.sys_image_guid
        if card:
            by_card.setdefault(card, []).append(name)
    for members in by_card.values():
        if len(members) > 1:
            out += [m for m in members if m in names and m not in out]
    return sorted(out, key=_natural)


def roce_gid_index(env: dict, warnings: List[str], view: NodeView, names: List[str]) -> None:
    """NCCL_IB_GID_INDEX for the plan's RoCE NICs: the index NCCL's own choice gives on each active
    port (:func:`gpucomm.planners.nccl.gid.nccl_gid_index`: RoCE v2, IPv4-mapped), set when every
    port agrees so that all ranks use the same one; a warning when they differ or the GID tables are
    unknown."""
    picks: Dict[str, int] = {}
    unknown = []
    for name in names:
        n = view.nics[name].rec if name in view.nics else {}
        for p in n.get("ports") or []:
            if not isinstance(p, dict) or p.get("link_layer") != "Ethernet" or str(p.get("state")).upper() != "ACTIVE":
                continue
            if p.get("gids"):
                from gpucomm.planners.nccl.gid import nccl_gid_index   # RoCE ports only

                picks[f"{name}:{p.get('port')}"] = nccl_gid_index(p["gids"])
            else:
                unknown.append(name)
    if picks and len(set(picks.values())) == 1:
        idx = next(iter(picks.values()))
        _set(env, "NCCL_IB_GID_INDEX", str(idx),
             f"RoCE: GID {idx} is the RoCE v2 IPv4-mapped entry of every plan NIC's GID table, the one NCCL's own "
             "choice finds (net_ib ncclIbGetGidIndex); pinned so every rank uses it, also where a container does "
             "not map the whole table")
    elif picks:
        first = ", ".join(f"{k}: {v}" for k, v in sorted(picks.items())[:4])
        warnings.append(f"RoCE GID tables differ between the plan's NICs ({first}): NCCL_IB_GID_INDEX is one number "
                        "for every NIC, so it is not set; give each port its RoCE v2 IPv4 address at the same index")
    if unknown:
        warnings.append("RoCE NIC(s) " + ", ".join(sorted(set(unknown), key=_natural)[:4]) + " without a GID table in "
                        "this topology: NCCL_IB_GID_INDEX not set (NCCL picks RoCE v2 IPv4 itself); probe or snapshot "
                        "the node to read ports/N/gids, or check with show_gids")


GRAPH_GAIN = 1.05   # NCCL_GRAPH_FILE only for at least 5% more ring bandwidth than NCCL's own search


def graph_file_gain(view: NodeView, gpus: List[int]) -> Optional[tuple]:
    """(graph file text, info) when our rings on ``gpus`` (one node) give NCCL at least GRAPH_GAIN
    times the ring bandwidth its own search finds; None otherwise or where no file can be written."""
    from gpucomm.planners.collectives.rings import rings_report
    from gpucomm.planners.nccl.graphfile import ring_graph_from_report
    from gpucomm.probes.errors import GpucommError

    try:
        text, info = ring_graph_from_report(rings_report(view.topo, gpus=list(gpus), nodes=1))
    except GpucommError:
        return None
    ref = info["nccl_total_bw_GBps"]
    if not ref or info["total_bw_GBps"] < GRAPH_GAIN * ref:
        return None
    return text, info


def _front_end_netdev(view: NodeView, used: set, warnings: Optional[list] = None) -> Optional[str]:
    """A host Ethernet interface that is not one of the plan's RDMA NICs (management/front-end).
    A NIC known only by a placeholder (nvidia-smi's NIC<i>, a bus id) is never named; when that
    leaves no interface, ``warnings`` says why NCCL_SOCKET_IFNAME is left out."""
    cands = []
    placeholders = []
    for n in view.topo.nics:
        if n.name in used:
            continue
        rdma = n.rdma
        if not n.netdev and not rdma and not nic_has_device_name(n.name):
            placeholders.append(n.name)
            continue
        nd = n.netdev or (n.name if not rdma else None)
        ll = (n.link_layer or "").lower()
        # an RDMA device qualifies only through an Ethernet netdev (RoCE); IPoIB is not the host network
        if nd and _valid_ifname(nd) and (not rdma or ll == "ethernet") and \
                not nd.startswith(("lo", "docker", "virbr", "veth", "ib")):
            cands.append((-(n.rate_gbps or 0), _natural(nd), nd))
    if not cands and placeholders and warnings is not None:
        warnings.append("NCCL_SOCKET_IFNAME left out: the host interface(s) " + ", ".join(placeholders[:4])
                        + (" ..." if len(placeholders) > 4 else "") + " have no device name in this topology "
                        "(a placeholder: nvidia-smi's NIC<i> without a NIC Legend, or a PCI bus id); "
                        "set it to your host interface")
    return sorted(cands)[0][2] if cands else None


def _valid_ifname(name: Optional[str]) -> bool:
    """A Linux network interface name (``dev_valid_name``: at most 15 bytes, no '/', ':' or
    whitespace) -- not the PCI bus id an NCCL XML skeleton's NIC is known by."""
    return bool(name) and len(name) <= 15 and not re.search(r"[/:\s]", name) and name not in (".", "..")


def _hexmask(cpus: str) -> str:
    value = 0
    for c in parse_cpulist(cpus):
        value |= 1 << c
    return hex(value)


def env_shell(plan: dict) -> str:
    """``export NAME=value`` lines with the reasons as comments (``--emit env``)."""
    from gpucomm.planners.launch.scripts import shell_value

    lines = ["# gpucomm plan: environment for every rank (per-rank CPU binding: --emit wrapper)"]
    for name, item in plan["env"].items():
        lines.append(f"# {item['reason']}")
        lines.append(f"export {name}={shell_value(item['value'])}")
    for b in plan.get("binding", []):
        if b.get("numactl"):
            lines.append(f"# local rank {b['local_rank']}: GPU {b['gpu']} -> {b['numactl']}")
    return "\n".join(lines) + "\n"


__all__ = ["build_env", "env_shell", "flat_pcie", "topo_skeleton", "topo_file_text", "cuda_indices",
           "format_cpulist"]
