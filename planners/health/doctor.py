"""``gpucomm doctor``: find degraded or misconfigured links in a topology document.

Each rule is a small pure function ``rule(topo, env) -> [finding]`` over the typed view of the
document (:class:`~gpucomm.probes.topology.Topology`; no I/O), where a finding is ``{rule, severity,
subject, message, fix}`` and severity is ``error`` (something is broken: a link or port down, P2P
redirected), ``warning`` (running slower than the hardware can, or misreported) or ``info`` (worth
knowing, nothing to repair).  ``gpucomm doctor`` exits 5 when any
error or warning is found (exit code DEGRADED), 0 otherwise.

Rules and what they read (everything optional: a rule that finds nothing to check finds nothing):

==================  ============================================================================
pcie-downtrained    ``pcie`` {gen,width,max_gen,max_width} of GPUs/NICs/switches; pcie link widths
                    of same-model peers when the maximum is unknown (NCCL XML, topo captures)
nvlink-inactive     per-link NVML state; per-GPU NVLink totals against same-model peers (links,
                    or the ``NV#`` cells of the matrix: NV17 next to NV18, capture 47)
ib-port-down        RDMA NIC ports not ACTIVE while the same port of a peer NIC is, or no port up
ib-rate-low         active RDMA port slower than the other rail NICs of the same link layer
nic-numa-mismatch   a GPU and its nearest RDMA NIC reporting different NUMA nodes (firmware), or
                    the nearest NIC only reachable through SYS (info)
p2p-blocked         ACS P2P redirect (RR/CR) on a PCIe switch above GPUs/NICs; IOMMU in translated
                    (DMA) mode; NVML P2P status not OK for pairs on NVLink or one PCIe switch
cpu-affinity-...    GPU CPU affinity outside its own NUMA node's CPUs
measured-bw-low     ``measured_bw_GBps`` / ``measured.p2p`` below 60% of the expected bandwidth
mig-enabled         MIG mode on (info: no P2P, NVLS or MNNVL for MIG instances, nccl#1716)
matrix-asymmetric   matrix[a][b] != matrix[b][a] (seen with MIG, capture 20)
gpu-driver          NVIDIA GPUs on the PCI bus while neither NVML nor nvidia-smi answered (the
                    probe's ``sources``): no driver loaded, or a broken one
==================  ============================================================================

A rule whose input is absent could not run: it is reported in ``not_checked`` with the reason
(:data:`NEEDS`), never counted as checked -- a driverless node's NVLinks are unknown, not healthy.

Sources for the "why" in each message are the GitHub issues cited in each message and NCCL's
troubleshooting guide (ACS, IOMMU).
"""
from __future__ import annotations

from collections import Counter
from typing import Callable, Optional

from gpucomm.probes.facts import pcie_bw_GBps
from gpucomm.probes.model import parse_cpulist, smi_rank
from gpucomm.probes.model import natural_key as _natural
from gpucomm.probes.topology import GPU, NVS_ID, Topology, nv_count

SCHEMA = "gpucomm.doctor/v1"
SEVERITIES = ("error", "warning", "info")
# Measured bandwidth below this share of the expected (NCCL constant) bandwidth is reported.
# NCCL's per-link constants are already "effective" numbers (e.g. 20.6 GB/s per NVLink4 link,
# 24 GB/s for PCIe Gen4 x16) that copy-engine tests usually meet or beat, so 0.6 leaves room for
# measurement noise and small messages while catching a halved link (x8, a link down, P2P off).
MEASURED_MARGIN = 0.6

RULES: dict = {}


def rule(name: str):
    """Register a rule under ``name`` (the order of registration is the order of ``checked``)."""

    def deco(fn: Callable) -> Callable:
        RULES[name] = fn
        fn.rule_name = name
        return fn

    return deco


def finding(rule_name: str, severity: str, subject: str, message: str, fix: str) -> dict:
    assert severity in SEVERITIES, severity
    return {"rule": rule_name, "severity": severity, "subject": subject, "message": message, "fix": fix}


# --------------------------------------------------------------------------------------------
# helpers
def _bdf(rec) -> str:
    return rec.pci_bus_id or "<bus id>"


def _model(g: GPU) -> str:
    return g.name or "GPU"


def _others(model: str) -> str:
    """'other NVIDIA H100 80GB HBM3 GPUs' or, when the model is unknown, 'other GPUs'."""
    return "other GPUs" if model == "GPU" else f"other {model} GPUs"


def _cell(topo: Topology, a: str, b: str) -> Optional[str]:
    """The matrix cell from ``a`` to ``b`` (that direction only)."""
    return (topo.matrix.get(a) or {}).get(b)


def _ids(topo: Topology) -> dict:
    """graph id -> display key (GPU<i> or the NIC name)."""
    out = {g.id: g.key for g in topo.gpus}
    out.update({n.id: n.name for n in topo.nics})
    return out


def _nvswitch_ids(topo: Topology) -> set:
    return {s.id for s in topo.switches.values() if s.kind == "nvswitch"}


def _rdma(topo: Topology) -> list:
    return [n for n in topo.nics if n.rdma]


def nvlink_totals(topo: Topology) -> dict:
    """GPU key -> (active NVLinks, where the number comes from, detail).

    NVML per-link state when the GPU has it; else the document's nvlink links (GPU<->GPU and
    GPU->NVSwitch counts); else the NV# cells of the matrix summed over the row.  On NVSwitch
    systems a matrix row shows the pair minimum (NV17 to every peer of a GPU with a link down),
    so the per-row sum still singles out that GPU."""
    gid = {g.id: g for g in topo.gpus}
    nvs = _nvswitch_ids(topo)
    by_links: dict = {}
    pair_detail: dict = {}
    for l in topo.links:
        if l.kind != "nvlink":
            continue
        a, b, c = l.a, l.b, l.count or 0
        for x, y in ((a, b), (b, a)):
            if x in gid:
                by_links[x] = by_links.get(x, 0) + c
                if y in gid:
                    pair_detail.setdefault(x, []).append(f"NV{c} to {gid[y].key}")
                elif y in nvs or y == NVS_ID:
                    pair_detail.setdefault(x, []).append(f"{c} to NVSwitch")
    out = {}
    for g in topo.gpus:
        k = g.key
        recs = [l for l in g.nvlink_states if l.state in ("active", "inactive")]
        if recs:
            n_act = sum(1 for l in recs if l.state == "active")
            out[k] = (n_act, "nvml", f"{n_act} of {len(recs)} links active")
        elif by_links:
            n = by_links.get(g.id, 0)
            out[k] = (n, "links", ", ".join(sorted(pair_detail.get(g.id, []))))
        else:
            if k not in topo.matrix:
                continue   # nothing says how many NVLinks it has (a capture that cut its links out)
            row = topo.matrix.get(k) or {}
            cells = {o: nv_count(v) for o, v in row.items() if o != k and nv_count(v)}
            out[k] = (sum(cells.values()), "matrix", ", ".join(f"NV{v} to {o}" for o, v in sorted(cells.items())))
    return out


def _endpoints_below(topo: Topology, switch_id: str) -> list:
    """GPU/NIC keys whose PCI parent chain passes through ``switch_id``."""
    switches = topo.switches

    def below(parent: Optional[str]) -> bool:
        seen = set()
        while parent and parent not in seen:
            if parent == switch_id:
                return True
            seen.add(parent)
            s = switches.get(parent)
            parent = s.parent if s is not None else None
        return False

    return [g.key for g in topo.gpus if below(g.parent)] + [n.name for n in topo.nics if below(n.parent)]


# --------------------------------------------------------------------------------------------
# rules: each ``rule(topo, env) -> [finding]`` over the typed view (``env``: the NCCL_MNNVL_* and
# NCCL_CUMEM_ENABLE settings of the environment doctor was given)
@rule("pcie-downtrained")
def check_pcie(topo: Topology, env: dict) -> list:
    out = []
    flagged = set()
    records = [(g.key, g.id, "gpu", g) for g in topo.gpus] + \
              [(n.name, n.id, "nic", n) for n in topo.nics] + \
              [(f"switch {s.id}", s.id, "switch", s) for s in topo.switches.values() if s.kind == "pcie"]
    for key, ident, kind, rec in records:
        p = rec.pcie
        if p is None:
            continue
        w, mw, gen, mg = p.width, p.max_width, p.gen, p.max_gen
        if w and mw and w < mw:
            flagged.add(ident)
            bw, mbw = pcie_bw_GBps(mg or gen, w), pcie_bw_GBps(mg or gen, mw)
            out.append(finding(
                "pcie-downtrained", "warning", key,
                f"{key} PCIe link trained at x{w}, the device supports x{mw} "
                f"({bw:g} instead of {mbw:g} GB/s by NCCL's PCIe model)",
                "Reseat the card and check the riser/slot (an x8 electrical slot or a damaged lane); compare "
                f"`lspci -vv -s {_bdf(rec)}` LnkSta with LnkCap, and the slot's wiring in the board manual."))
        if gen and mg and gen < mg:
            if kind == "gpu":
                # GPUs drop their PCIe speed when idle (power management); width never changes that way.
                out.append(finding(
                    "pcie-downtrained", "info", key,
                    f"{key} PCIe link at Gen{gen}, the device supports Gen{mg} (normal while the GPU is idle)",
                    "Re-check under load (`nvidia-smi -q -d PCIE` while a job runs); if it stays low, check the "
                    "BIOS PCIe speed setting and the riser."))
            else:
                flagged.add(ident)
                out.append(finding(
                    "pcie-downtrained", "warning", key,
                    f"{key} PCIe link at Gen{gen}, the device supports Gen{mg}",
                    f"Check the BIOS PCIe speed setting, retimers and cabling; `lspci -vv -s {_bdf(rec)}` LnkSta "
                    "vs LnkCap."))
    # Peers without a recorded maximum (NCCL XML, generated documents): a device whose uplink is
    # narrower than every other device of the same model on this node.
    dev_model = topo.pci_models
    groups: dict = {}
    gmap = {g.id: g for g in topo.gpus}
    nmap = {n.id: n for n in topo.nics}
    smap = {s.id: s for s in topo.switches.values() if s.kind == "pcie"}
    for l in topo.links:
        if l.kind != "pcie" or not l.width or l.a in flagged:
            continue
        a = l.a
        if a in gmap:
            g = gmap[a]
            grp = ("gpu", _model(g))
            label = g.key
        elif a in nmap:
            n = nmap[a]
            grp = ("nic", dev_model.get(n.pci_bus_id) or n.link_layer)
            label = n.name
        elif a in smap:
            s = smap[a]
            grp = ("switch", (s.vendor, s.device))
            label = f"switch {a}"
        else:
            continue
        groups.setdefault(grp, []).append((label, a, l))
    for grp, members in sorted(groups.items(), key=lambda kv: str(kv[0])):
        if len(members) < 3:  # need a clear majority to call one of them narrow
            continue
        widths = Counter(l.width for _, _, l in members)
        common, n_common = widths.most_common(1)[0]
        if n_common * 2 <= len(members):
            continue
        for label, a, l in members:
            if l.width < common:
                # a GPU whose own pcie record already says the same thing is reported above
                rec = gmap.get(a) or nmap.get(a) or smap.get(a)
                p = rec.pcie
                if p is not None and p.width and p.max_width:
                    continue
                out.append(finding(
                    "pcie-downtrained", "warning", label,
                    f"{label} PCIe link is x{l.width} while {n_common} of the {len(members)} devices of the same "
                    f"model here are x{common}",
                    "Reseat the card and check the slot/riser; compare `lspci -vv` LnkSta with LnkCap."))
    return out


@rule("nvlink-inactive")
def check_nvlink(topo: Topology, env: dict) -> list:
    out = []
    totals = nvlink_totals(topo)
    by_model: dict = {}
    for g in topo.gpus:
        by_model.setdefault(_model(g), []).append(g)
    # GPUs whose matrix row and column disagree (MIG) say nothing reliable about their links.
    asym = {a for a, b in _asymmetric_pairs(topo)} | {b for a, b in _asymmetric_pairs(topo)}
    bridges = _bridge_pairs(topo)
    for model, members in sorted(by_model.items()):
        counts = {g.key: totals.get(g.key, (0, "", ""))[0] for g in members}
        best = max(counts.values(), default=0)
        for g in members:
            k = g.key
            n, src, detail = totals.get(k, (0, "", ""))
            down = [l for l in g.nvlink_states if l.state == "inactive"]
            if down and (n > 0 or best > 0):
                links = ", ".join(str(l.link) for l in down[:18])
                out.append(finding(
                    "nvlink-inactive", "error", k,
                    f"{k}: NVLink {links} inactive ({n} of {n + len(down)} "
                    f"active; up to {best} on {_others(model)})",
                    "Check `nvidia-smi nvlink -s` and `nvidia-smi nvlink -e` (error counters); a link that stays "
                    "down needs a GPU/board reset (`nvidia-smi -r`) or an RMA. On NVSwitch systems also check "
                    "that nvidia-fabricmanager is running."))
            elif n < best and k not in asym and k in totals:
                src_txt = {"nvml": "NVML", "links": "the topology's NVLink links",
                           "matrix": "the nvidia-smi matrix"}.get(src, src)
                if n == 0 and bridges:
                    # PCIe cards joined in pairs by NVLink bridges: a card without one is a build choice
                    out.append(finding(
                        "nvlink-inactive", "info", k,
                        f"{k} has no NVLink while {_others(model)} here are paired by NVLink bridges "
                        f"({best} links)", "Fit an NVLink bridge if this GPU should pair with a neighbour; "
                        "otherwise keep tensor-parallel groups on the bridged pairs."))
                    continue
                out.append(finding(
                    "nvlink-inactive", "warning" if n else "error", k,
                    f"{k} has {n} active NVLink(s) ({detail or 'none'}) while {_others(model)} here have "
                    f"{best} (from {src_txt})",
                    "Look for a link down with `nvidia-smi nvlink -s -i <gpu>` and its error counters "
                    "(`nvidia-smi nvlink -e`); reset or reseat the GPU / NVLink bridge, check fabric manager "
                    "on NVSwitch systems."))
    return out


def _bridge_pairs(topo: Topology) -> bool:
    """True when NVLink only joins GPUs in pairs (PCIe cards with NVLink bridges): no NVSwitch and
    no GPU with more than one NVLink peer."""
    nvs = _nvswitch_ids(topo) | {NVS_ID}
    gids = {g.id: g.key for g in topo.gpus}
    peers: dict = {}
    any_nv = False
    for l in topo.links:
        if l.kind != "nvlink":
            continue
        a, b = l.a, l.b
        if a in nvs or b in nvs:
            return False
        if a in gids and b in gids:
            any_nv = True
            peers.setdefault(a, set()).add(b)
            peers.setdefault(b, set()).add(a)
    if not any_nv:
        for k in gids.values():
            row = topo.matrix.get(k) or {}
            nvp = {o for o, v in row.items() if o in gids.values() and nv_count(v)}
            if nvp:
                any_nv = True
                peers[k] = nvp
    return any_nv and max(len(v) for v in peers.values()) <= 1


def _rail_nics(topo: Topology, rdma: list) -> list:
    """RDMA NICs at PIX/PXB from at least one GPU (the GPU rails NCCL uses), else all of them."""
    gkeys = [g.key for g in topo.gpus]
    near = []
    for n in rdma:
        codes = [_cell(topo, gk, n.name) or _cell(topo, n.name, gk) for gk in gkeys]
        if any(c in ("PIX", "PXB") for c in codes):
            near.append(n)
    return near or rdma


@rule("ib-port-down")
def check_ib_ports(topo: Topology, env: dict) -> list:
    out = []
    rdma = _rdma(topo)
    active_ports: dict = {}
    for n in rdma:
        for p in n.ports:
            if p.active:
                active_ports.setdefault((n.link_layer, p.port), set()).add(n.name)
    for n in rdma:
        any_up = any(p.active for p in n.ports)
        for p in n.ports:
            st = p.state
            if st is None or p.active:
                continue
            peers = active_ports.get((n.link_layer, p.port), set()) - {n.name}
            if not peers and any_up:
                continue  # e.g. the unused second port of a dual-port card
            phys = f", physical state {p.phys_state}" if p.phys_state else ""
            why = (f"port {p.port} of {len(peers)} other {n.link_layer or 'RDMA'} NIC(s) is ACTIVE"
                   if peers else "no port of this NIC is up")
            hint = ("INIT means the link is up but no subnet manager has configured it (start opensm / check "
                    "the fabric's SM). " if str(st).upper() == "INIT" else "")
            out.append(finding(
                "ib-port-down", "error", f"{n.name}/{p.port}",
                f"{n.name} port {p.port} is {st}{phys}; {why}",
                hint + f"Check the cable and switch port (`ibstat {n.name}`, `ibstatus`); NCCL skips ports that "
                       "are not ACTIVE, so this node has fewer rails than its peers."))
    return out


@rule("ib-rate-low")
def check_ib_rate(topo: Topology, env: dict) -> list:
    out = []
    by_layer: dict = {}
    for n in _rail_nics(topo, _rdma(topo)):
        by_layer.setdefault(n.link_layer, []).append(n)
    for layer, members in sorted(by_layer.items(), key=lambda kv: str(kv[0])):
        rates = [(n, p) for n in members for p in n.ports if p.active and p.rate_gbps]
        if len(rates) < 2:
            continue
        best = max(p.rate_gbps for _, p in rates)
        n_best = sum(1 for _, p in rates if p.rate_gbps == best)
        for n, p in rates:
            if p.rate_gbps < best:
                out.append(finding(
                    "ib-rate-low", "warning", f"{n.name}/{p.port}",
                    f"{n.name} port {p.port} runs at {p.rate_gbps:g} Gb/s while {n_best} other "
                    f"{layer or 'RDMA'} port(s) of this node's GPU rails run at {best:g} Gb/s",
                    "A link that negotiated a lower speed or width: check the cable/transceiver and the switch "
                    f"port (`ibstat {n.name}` shows Rate and width; `mlxlink -d <dev>` the lanes)."))
    return out


@rule("nic-numa-mismatch")
def check_nic_numa(topo: Topology, env: dict) -> list:
    out = []
    rdma = _rdma(topo)
    if not rdma:
        return out
    nvl = nvlink_totals(topo)
    c2c = {l.a for l in topo.links if l.kind == "c2c"} | {l.b for l in topo.links if l.kind == "c2c"}
    for g in topo.gpus:
        k = g.key
        ranked = []
        for n in rdma:
            c = _cell(topo, k, n.name)
            if c and c not in ("X", "N/A"):
                ranked.append((smi_rank(c), c, n))
        if not ranked:
            continue
        best = min(r for r, _, _ in ranked)
        nearest = [(c, n) for r, c, n in ranked if r == best]
        code = nearest[0][0]
        names = _name_list([n.name for _, n in nearest])
        if code == "SYS":
            if g.id in c2c or g.gpu_numa_id is not None:
                # Grace Hopper/Blackwell: the GPU reaches the CPU over C2C and NICs hang off the CPU;
                # nvidia-smi calls that SYS, NCCL calls it P2C and uses GPUDirect RDMA through it.
                continue
            pxn = (" NCCL's PXN (default on) can send through an NVLink peer that sits next to a NIC."
                   if nvl.get(k, (0,))[0] else "")
            out.append(finding(
                "nic-numa-mismatch", "info", k,
                f"{k}'s nearest RDMA NIC ({names}) is SYS: GPUDirect RDMA traffic crosses the CPU interconnect",
                "Place inter-node ranks on GPUs with a local NIC, or add a NIC on this GPU's socket." + pxn))
            continue
        gn = g.numa_node
        for c, n in nearest:
            nn = n.numa_node
            if gn is not None and nn is not None and gn >= 0 and nn >= 0 and gn != nn:
                out.append(finding(
                    "nic-numa-mismatch", "warning", f"{k}/{n.name}",
                    f"{k} (NUMA {gn}) and its nearest NIC {n.name} ({c}) report NUMA {nn}: devices on one PCIe "
                    "path cannot be on different NUMA nodes, so the firmware's proximity information is wrong",
                    "Check the BIOS NUMA settings (SNC/NPS, ACPI SRAT/_PXM); NCCL and the launcher bind CPUs by "
                    "these values, so pin CPUs explicitly (`numactl --cpunodebind`) until it is fixed."))
    return out


def _name_list(names: list, limit: int = 4) -> str:
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f" and {len(names) - limit} more"


def _asymmetric_pairs(topo: Topology) -> list:
    keys = sorted(topo.matrix)
    out = []
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            x, y = _cell(topo, a, b), _cell(topo, b, a)
            if x is not None and y is not None and x != y:
                out.append((a, b))
    return out


_P2P_UNFIXABLE = {"GPU_NOT_SUPPORTED"}


@rule("p2p-blocked")
def check_p2p(topo: Topology, env: dict) -> list:
    out = []
    gpus = topo.gpus
    # ACS P2P redirect on PCIe switches that have GPUs/NICs below them
    for s in topo.switches.values():
        acs = s.acs
        if s.kind != "pcie" or acs is None:
            continue
        bad = sorted(b for b, flags in acs.items() if {"RR", "CR"} & set(flags))
        if not bad:
            continue
        below = _endpoints_below(topo, s.id)
        if len(below) < 2:
            continue
        out.append(finding(
            "p2p-blocked", "error", f"switch {s.id}",
            f"ACS P2P redirect (RR/CR) is enabled on {', '.join(bad)} of PCIe switch {s.id}, above "
            f"{', '.join(below)}: peer-to-peer traffic is forced up to the root complex (hangs or slow P2P, "
            "nccl#606, nccl#2079)",
            "Disable ACS on the switch ports (`setpci -s <bdf> ECAP_ACS+6.w=0000` at boot, or the BIOS option), "
            "or boot with IOMMU off/passthrough; NCCL's troubleshooting guide describes both."))
    # IOMMU
    iommu = topo.host.get("iommu")
    if iommu is not None and gpus and (len(gpus) >= 2 or _rdma(topo)):
        if "DMA" in iommu.upper():
            out.append(finding(
                "p2p-blocked", "warning", "host",
                f"IOMMU is in translated mode ({iommu}): PCIe peer-to-peer and GPUDirect RDMA go through address "
                "translation and can hang or slow down (nccl#257, nccl#667)",
                "Boot with `iommu=pt` (passthrough; keeps the IOMMU for VMs) or `intel_iommu=off` / `amd_iommu=off`."))
        elif iommu.lower() == "on":
            out.append(finding(
                "p2p-blocked", "info", "host",
                "IOMMU groups exist but their type is unknown; PCIe P2P needs the IOMMU off or in passthrough",
                "Check `cat /sys/kernel/iommu_groups/*/type` (identity = passthrough) and the kernel command line."))
    # NVML P2P status for pairs that should talk directly (NVLink, or one PCIe switch)
    by_bus = {g.pci_bus_id: g for g in gpus if g.pci_bus_id}
    bad_pairs: dict = {}
    seen = set()
    for g in gpus:
        for other, st in sorted(g.p2p.items()):
            h = by_bus.get(other)
            if h is None or h is g or st in (None, "OK"):
                continue
            pair = tuple(sorted((g.index, h.index)))
            if pair in seen:
                continue
            code = _cell(topo, g.key, h.key)
            if not code or not (nv_count(code) or code in ("PIX", "PXB")):
                continue
            seen.add(pair)
            bad_pairs.setdefault(str(st), []).append((f"GPU{pair[0]}-GPU{pair[1]}", code))
    for st, pairs in sorted(bad_pairs.items()):
        names = ", ".join(f"{p} ({c})" for p, c in pairs)
        consumer = all("geforce" in _model(g).lower() for g in gpus)
        if st in _P2P_UNFIXABLE or consumer:
            out.append(finding(
                "p2p-blocked", "info", names.split(" ")[0] if len(pairs) == 1 else f"{len(pairs)} GPU pairs",
                f"NVML reports P2P {st} for {names}: this GPU model does not support peer-to-peer "
                "(GeForce drivers disable it); NCCL goes through host memory",
                "Nothing to repair; expect SHM transport speeds (nccl-tests#117)."))
        else:
            out.append(finding(
                "p2p-blocked", "error" if st.startswith("DISABLED") else "warning",
                pairs[0][0] if len(pairs) == 1 else f"{len(pairs)} GPU pairs",
                f"NVML reports P2P {st} for {names}, although they share NVLink or a PCIe switch",
                "Usually ACS or the IOMMU (see the other p2p-blocked findings); DISABLED_BY_REGKEY means a driver "
                "registry key (NVreg_RegistryDwords) turned P2P off. Verify with `nvidia-smi topo -p2p r`."))
    return out


@rule("cpu-affinity-mismatch")
def check_cpu_affinity(topo: Topology, env: dict) -> list:
    out = []
    nodes = {c.numa: set(c.cpus) for c in topo.cpus.values()}
    for g in topo.gpus:
        k, numa, aff = g.key, g.numa_node, g.cpu_affinity
        if numa is None or numa < 0:
            continue
        if g.gpu_numa_id is not None and g.gpu_numa_id == numa:
            continue  # Grace/GB200: the GPU's own memory NUMA node, not a CPU node
        na = g.numa_affinity
        if na and numa not in na:
            out.append(finding(
                "cpu-affinity-mismatch", "warning", k,
                f"{k} is on NUMA node {numa} but its NUMA affinity is {','.join(map(str, na))}",
                "Bind this GPU's rank to NUMA node "
                f"{numa} explicitly (`numactl --cpunodebind={numa} --membind={numa}`) and check the BIOS NUMA mode."))
            continue
        if not aff or not nodes.get(numa):
            continue
        try:
            cpus = set(parse_cpulist(aff))
        except ValueError:
            continue
        if cpus and not cpus & nodes[numa]:
            owners = sorted(i for i, c in nodes.items() if c & cpus)
            out.append(finding(
                "cpu-affinity-mismatch", "warning", k,
                f"{k} is on NUMA node {numa}, but its CPU affinity {aff} lies on NUMA node(s) "
                f"{','.join(map(str, owners)) or 'unknown'}",
                f"Bind the rank to NUMA node {numa}'s CPUs ({_numa_cpulist(topo, numa)}); the driver's affinity or "
                "the firmware's NUMA table is inconsistent."))
    return out


def _numa_cpulist(topo: Topology, numa: int) -> str:
    for c in topo.cpus.values():
        if c.numa == numa:
            return c.cpulist or "?"
    return "?"


def expected_pair_bw(topo: Topology, a: GPU, b: GPU) -> Optional[float]:
    """What a copy between two GPUs should reach by NCCL's constants: the direct NVLink bandwidth,
    the smaller NVSwitch uplink of the two, or the smaller PCIe link when they share a switch or
    a host bridge (SYS pairs depend on the CPU interconnect and are not judged)."""
    ia, ib = a.id, b.id
    nvs = _nvswitch_ids(topo) | {NVS_ID}
    direct, sw = 0.0, {ia: 0.0, ib: 0.0}
    for l in topo.links:
        if l.kind != "nvlink":
            continue
        ends = {l.a, l.b}
        if ends == {ia, ib}:
            direct += l.bw_GBps or 0.0
        for x in (ia, ib):
            if x in ends and (ends - {x}) & nvs:
                sw[x] += l.bw_GBps or 0.0
    if direct:
        return direct
    if sw[ia] and sw[ib]:
        return min(sw.values())
    code = _cell(topo, a.key, b.key)
    if code in ("PIX", "PXB", "PHB", "NODE"):
        bws = [g.pcie.max_bw_GBps if g.pcie is not None else None for g in (a, b)]
        return None if None in bws else min(bws)
    return None


_KIND = {"nvlink": "NVLink", "pcie": "PCIe", "smp": "CPU interconnect", "c2c": "C2C", "xgmi": "xGMI", "net": "network"}


@rule("measured-bw-low")
def check_measured(topo: Topology, env: dict) -> list:
    out = []
    names = _ids(topo)
    for l in topo.links:
        m, e = l.measured_bw_GBps, l.bw_GBps
        if m is not None and e is not None and e > 0 and m < MEASURED_MARGIN * e:
            a, b = names.get(l.a, l.a), names.get(l.b, l.b)
            out.append(finding(
                "measured-bw-low", "warning", f"{a}-{b}",
                f"{_KIND.get(l.kind, l.kind)} link {a}-{b} measured {m:g} GB/s, {100 * m / e:.0f}% of the "
                f"{e:g} GB/s expected",
                "Re-run `gpucomm bench p2p` on an idle node; if it stays low, look at the other doctor findings "
                "for this pair (down-trained PCIe, NVLink down, P2P blocked) and at `nvidia-smi nvlink -e`."))
    gmap = {g.key: g for g in topo.gpus}
    done = {(x, y) for x, y in [f["subject"].split("-", 1) for f in out if "-" in f["subject"]]}
    for a, row in sorted(topo.measured_p2p.items()):
        if a not in gmap:
            continue
        for b, m in sorted(row.items()):
            if b not in gmap or (a, b) in done or (b, a) in done:
                continue
            e = expected_pair_bw(topo, gmap[a], gmap[b])
            if m is not None and e and m < MEASURED_MARGIN * e:
                out.append(finding(
                    "measured-bw-low", "warning", f"{a}->{b}",
                    f"copy {a}->{b} measured {m:g} GB/s, {100 * m / e:.0f}% of the {e:g} GB/s expected "
                    f"({_cell(topo, a, b) or 'path unknown'})",
                    "Re-run `gpucomm bench p2p` on an idle node; if it stays low, look for P2P disabled "
                    "(`nvidia-smi topo -p2p r`), ACS/IOMMU, a down-trained PCIe link or an NVLink down."))
    return out


@rule("mig-enabled")
def check_mig(topo: Topology, env: dict) -> list:
    out = []
    for g in topo.gpus:
        if g.mig is True:
            out.append(finding(
                "mig-enabled", "info", g.key,
                f"{g.key} has MIG mode enabled: MIG instances have no P2P, NVLS or multi-node NVLink, and one "
                "process sees one instance (nccl#1716, pytorch#130181)",
                f"For multi-GPU training disable MIG (`nvidia-smi -i {g.index} -mig 0`, then reset the GPU)."))
    return out


@rule("matrix-asymmetric")
def check_asymmetric(topo: Topology, env: dict) -> list:
    out = []
    mig = {g.key for g in topo.gpus if g.mig}
    for a, b in _asymmetric_pairs(topo):
        x, y = _cell(topo, a, b), _cell(topo, b, a)
        hint = " (MIG)" if {a, b} & mig else ""
        out.append(finding(
            "matrix-asymmetric", "warning", f"{a}-{b}",
            f"the topology matrix shows {x} from {a} to {b} but {y} from {b} to {a}{hint}",
            "nvidia-smi shows this when MIG is enabled on one GPU (its row loses NVLink): disable MIG for "
            "multi-GPU jobs, or re-capture `nvidia-smi topo -m` after a GPU reset."))
    return out


_DRIVER_SOURCES = ("nvml", "smi")   # the probe sources that only answer through the NVIDIA driver


def _nvidia_gpus(topo: Topology) -> list:
    return [g for g in topo.gpus if g.vendor.lower() == "nvidia"]


def driver_silent(topo: Topology) -> bool:
    """True when the document was probed (it lists its sources), has NVIDIA GPUs, and neither NVML
    nor nvidia-smi answered for them."""
    status = {name: s.status for name, s in topo.probe_sources.items()}
    if not _nvidia_gpus(topo) or not any(n in status for n in _DRIVER_SOURCES):
        return False
    return all(status.get(n) != "ok" for n in _DRIVER_SOURCES)


@rule("gpu-driver")
def check_driver(topo: Topology, env: dict) -> list:
    if not driver_silent(topo):
        return []
    gpus = _nvidia_gpus(topo)
    status = topo.probe_sources
    why = "; ".join(f"{n}: {status[n].detail or status[n].status}" for n in _DRIVER_SOURCES if n in status)
    return [finding(
        "gpu-driver", "error", "node",
        f"{len(gpus)} NVIDIA GPU(s) on the PCI bus, but neither NVML nor nvidia-smi answered ({why}): no working "
        "driver, so CUDA and NCCL cannot use them; NVLink, MIG and P2P state are unknown",
        "Check `nvidia-smi`, `lsmod | grep nvidia` and `dmesg | grep -i -e NVRM -e Xid`; load or reinstall the driver "
        "(matching the kernel), and on NVSwitch systems start nvidia-fabricmanager. Re-probe afterwards.")]


def _no_driver(topo: Topology) -> Optional[str]:
    return "neither NVML nor nvidia-smi answered (no driver)" if driver_silent(topo) else None


def _has_gpus(topo: Topology) -> Optional[str]:
    return None if topo.gpus else "no GPUs in the input"


def _needs_nvlink_state(topo: Topology) -> Optional[str]:
    if not _nvidia_gpus(topo):
        return "no NVIDIA GPUs in the input"
    return _no_driver(topo)


def _needs_rdma_ports(topo: Topology) -> Optional[str]:
    if any(n.rdma and n.ports for n in topo.nics):
        return None
    return "no RDMA NIC ports in the input"


def _needs_measurements(topo: Topology) -> Optional[str]:
    if topo.measured_p2p or topo.links:
        # any link: every cleaned link record carries measured_bw_GBps (None when unmeasured), which
        # this test has always counted as a measurement
        return None
    return "no measured bandwidth in the input (gpucomm bench p2p --save TOPO records it)"


def _needs_matrix(topo: Topology) -> Optional[str]:
    return None if topo.matrix else "no topology matrix in the input"


# What each rule needs to run; None = it can.  A rule with a reason is reported as not checked.
NEEDS: dict = {
    "pcie-downtrained": _has_gpus,
    "nvlink-inactive": _needs_nvlink_state,
    "ib-port-down": _needs_rdma_ports,
    "ib-rate-low": _needs_rdma_ports,
    "nic-numa-mismatch": lambda topo: _has_gpus(topo) or (None if topo.nics else "no NICs in the input"),
    "p2p-blocked": _has_gpus,
    "cpu-affinity-mismatch": _has_gpus,
    "measured-bw-low": _needs_measurements,
    "mig-enabled": _needs_nvlink_state,
    "matrix-asymmetric": _needs_matrix,
}


# the software path's rules: planners/health/path_rules.py; they read the probe's ``software`` section,
# which inputs other than a live probe or a recent snapshot do not have
from gpucomm.planners.health import path_rules as _path_rules  # noqa: E402

_BEFORE_PATH_RULES = set(RULES)
_path_rules.register(rule, finding)


def _needs_software(topo: Topology) -> Optional[str]:
    return None if topo.software.known else ("no software path in the input (NCCL library, driver, plugins, GDR: "
                                             "a live probe or a snapshot records it)")


for _name in set(RULES) - _BEFORE_PATH_RULES:
    NEEDS.setdefault(_name, _needs_software)


# --------------------------------------------------------------------------------------------
# Multi-node NVLink (GB200/GB300 NVL72 trays): the fabric, IMEX, NCCL's MNNVL settings
_FIX_FABRIC = ("Check the GPU's fabric with `nvidia-smi -q | grep -A12 Fabric`: registration is done by the NVLink "
               "switch trays' fabric manager and subnet manager (NMX-C / NVLSM); restart nvidia-imex on the tray and "
               "check the rack's NMX controller, or drain the tray.")
# health fields whose bad meaning stops traffic (error) rather than slowing it (warning)
_HEALTH_ERRORS = ("route_unhealthy", "incorrect_configuration", "gfm_state", "summary")


def _fabric_gpus(topo: Topology) -> list:
    """(GPU key, GPU, its :class:`Fabric`) for the GPUs that report a multi-node NVLink fabric."""
    return [(g.key, g, g.fabric) for g in topo.gpus if g.fabric is not None]


@rule("fabric-state")
def check_fabric_state(topo: Topology, env: dict) -> list:
    """A GPU whose NVLink fabric registration is not completed (or whose NVML status is an error): NCCL
    keeps MNNVL off for every communicator it is in (mnnvl.cc needs every rank completed)."""
    out = []
    fab = _fabric_gpus(topo)
    for k, g, f in fab:
        if f.state is not None and not f.completed:
            out.append(finding(
                "fabric-state", "error", k,
                f"{k}: NVLink fabric registration is {f.state.replace('_', ' ')}, not completed: NCCL keeps "
                "multi-node NVLink off for every communicator this GPU joins (mnnvl.cc) and reaches other trays "
                "over the network", _FIX_FABRIC))
        elif not f.status_ok:
            out.append(finding(
                "fabric-state", "error", k,
                f"{k}: NVLink fabric registration completed with status {f.status}: the GPU is not attached to the "
                "fabric (GPU Feature Discovery gives the node no nvidia.com/gpu.clique label)", _FIX_FABRIC))
    if fab:
        with_fabric = {_model(g) for _, g, _ in fab}
        for g in topo.gpus:
            if g.fabric is None and _model(g) in with_fabric and g.vendor == "nvidia":
                out.append(finding(
                    "fabric-state", "warning", g.key,
                    f"{g.key} reports no NVLink fabric while the {_others(_model(g))} here do: the driver did not "
                    "register it (NCCL gives it no MNNVL peers)", _FIX_FABRIC))
    return out


@rule("fabric-health")
def check_fabric_health(topo: Topology, env: dict) -> list:
    """NVML's fabric health mask (and summary) of each GPU: degraded bandwidth, route recovery or
    an unhealthy route, access-timeout recovery, an incorrect configuration, the fabric manager
    disconnected (nvml.h NVML_GPU_FABRIC_HEALTH_MASK_*; nvidia-smi -q "Health")."""
    out = []
    for k, _g, f in _fabric_gpus(topo):
        bad = f.health_problems
        if not bad:
            continue
        severe = any(b.split("=")[0] in _HEALTH_ERRORS and b != "summary=limited_capacity" for b in bad)
        mask = f.health_mask
        out.append(finding(
            "fabric-health", "error" if severe else "warning", k,
            f"{k}: NVLink fabric health {', '.join(bad)}" + (f" (health mask {mask:#x})" if mask is not None else "")
            + ("; traffic over this GPU's NVLinks fails or is rerouted" if severe else
               "; its NVLink bandwidth is reduced"),
            "Look at `nvidia-smi -q | grep -A12 Fabric` and the rack's NMX / fabric manager logs (link or switch "
            "tray faults); the tray may need its NVLink cables or a switch tray serviced. Until then keep the "
            "tray out of multi-node NVLink jobs."))
    return out


@rule("fabric-clique")
def check_fabric_clique(topo: Topology, env: dict) -> list:
    """GPUs of one tray in different NVLink domains or cliques (NCCL then makes separate MNNVL cliques
    and connects them over the network), and, in a document of several hosts, a host in another
    clique than the other hosts of its NVLink domain."""
    out = []
    by_host: dict = {}
    for k, g, f in _fabric_gpus(topo):
        if f.clique is not None:
            by_host.setdefault(g.host, []).append((k, f.clique))
    majority: dict = {}
    for h, members in sorted(by_host.items()):
        keys = Counter(c for _, c in members)
        top, n_top = keys.most_common(1)[0]
        majority[h] = top
        if len(keys) > 1:
            odd = [k for k, c in members if c != top]
            groups = "; ".join(f"{_name_list([k for k, c in members if c == key])} in clique {key[1]} of {key[0]}"
                               for key, _n in keys.most_common())
            what = "NVLink domains (cluster UUIDs)" if len({c[0] for _, c in members}) > 1 else "cliques"
            where = f"host {h}" if len(by_host) > 1 else "this tray"
            out.append(finding(
                "fabric-clique", "error", ", ".join(odd) if len(odd) <= 4 else f"{len(odd)} GPUs",
                f"the GPUs of {where} span several {what} ({groups}): NCCL splits them into separate MNNVL cliques "
                "joined over the network",
                "A tray's GPUs belong to one NVLink partition: check the partition the NMX controller assigned "
                "(`nvidia-smi -q | grep -A5 Fabric` on each GPU) and reconfigure or drain the tray."))
    if len(majority) > 1:
        per_domain: dict = {}
        for h, key in majority.items():
            per_domain.setdefault(key[0], []).append((h, key[1]))
        for cluster, hosts in sorted(per_domain.items()):
            cliques = Counter(c for _, c in hosts)
            top, n_top = cliques.most_common(1)[0]
            if len(cliques) < 2 or n_top * 2 <= len(hosts):
                continue
            for h, c in hosts:
                if c != top:
                    out.append(finding(
                        "fabric-clique", "warning", f"host {h}",
                        f"host {h} is in clique {c} while {n_top} of the {len(hosts)} hosts of NVLink domain {cluster} "
                        f"are in clique {top}: NCCL reaches it over the network, not over NVLink",
                        "If the rack is not meant to be partitioned, have the NMX controller put the tray back into the "
                        "rack's partition; otherwise schedule it with the hosts of its own clique "
                        "(the nvidia.com/gpu.clique label)."))
    return out


@rule("nvlink-tray-down")
def check_nvlink_tray_down(topo: Topology, env: dict) -> list:
    """Every NVLink of a multi-node NVLink tray (or an NVSwitch node) down: NVML reports each link of
    each GPU inactive, so no GPU has a peer over NVLink (nvlink-inactive compares GPUs with their
    peers and cannot see a tray whose GPUs are all down alike)."""
    out = []
    by_host: dict = {}
    for g in topo.gpus:
        recs = [l for l in g.nvlink_states if l.state in ("active", "inactive")]
        if recs:
            by_host.setdefault(g.host, []).append((g, recs))
    multi = len(by_host) > 1
    for h, members in sorted(by_host.items()):
        if any(l.state == "active" for _, recs in members for l in recs):
            continue
        fabric = any(g.fabric is not None for g, _ in members)
        n_links = sum(len(r) for _, r in members)
        where = f"host {h}" if multi else "this tray" if fabric else "this node"
        out.append(finding(
            "nvlink-tray-down", "error", f"host {h}" if multi else "all GPUs",
            f"every NVLink of {where} is down ({n_links} links of {len(members)} GPU(s) inactive)"
            + (": the GPUs have no path to the NVLink switch trays, so NCCL reaches every other GPU, on this tray "
               "too, over the network" if fabric else ": NCCL goes through PCIe and the network"),
            "Check `nvidia-smi nvlink -s`, the tray's NVLink cable cartridges and the switch trays (power, NMX "
            "controller); on NVSwitch systems check nvidia-fabricmanager. A reboot after a switch tray came back "
            "often retrains the links."))
    return out


@rule("imex-domain")
def check_imex(topo: Topology, env: dict) -> list:
    """The IMEX domain (``nvidia-imex-ctl -N``): NCCL's MNNVL transport exports memory through IMEX;
    a domain not UP, nodes not READY or not connected make NCCL stop ("MNNVL ... is available but not
    working ... Check the IMEX configuration", mnnvl.cc)."""
    out = []
    imex = topo.imex
    if imex is None:
        return out
    state = imex["domain_state"]
    nodes = imex["nodes"]
    fix = ("Check `systemctl status nvidia-imex` and /etc/nvidia-imex/nodes_config.cfg on every tray (same node list, "
           "same IMEX version, port 50000 reachable); `nvidia-imex-ctl -N` should show every node READY and C.")
    if state is not None and state != "UP":
        out.append(finding(
            "imex-domain", "error", "imex",
            f"IMEX domain state {state} ({len(nodes)} node(s)): multi-node NVLink memory cannot be shared, so NCCL "
            "fails at init on these trays unless NCCL_MNNVL_ENABLE=0 (then it uses the network)", fix))
    down = [n for n in nodes if n["state"] not in (None, "READY")]
    if down:
        names = [f"#{n['index']} {n['address'] or '?'} ({n['state']})" for n in down]
        out.append(finding(
            "imex-domain", "warning", "imex nodes",
            f"{len(down)} of {len(nodes)} IMEX node(s) not READY: {_name_list(names)}", fix))
    bad = [c for c in imex.get("not_connected") or [] if isinstance(c, list) and len(c) == 3]
    if bad:
        from gpucomm.probes.formats.imex import CODES

        pairs = [f"{a}->{b} {CODES.get(c, c)}" for a, b, c in bad[:6]]
        total = sum(v for k, v in (imex["connectivity"] or {}).items() if k != "C")
        out.append(finding(
            "imex-domain", "warning", "imex connectivity",
            f"{total or len(bad)} IMEX node pair(s) not connected: {', '.join(pairs)}" + (" ..." if len(bad) > 6 else ""),
            fix))
    return out


def _nccl_settings(topo: Topology, env: dict) -> dict:
    """NCCL_MNNVL_* / NCCL_CUMEM_ENABLE settings: {name: [(value, where)]} from the environment doctor
    was given (``env``) and an NCCL log (``nccl.env``, every value its runs show)."""
    nccl = topo.nccl
    out: dict = {}
    for k, v in env.items():
        out.setdefault(k, []).append((str(v), "the environment"))
    mn = nccl.get("mnnvl") if isinstance(nccl.get("mnnvl"), dict) else {}
    seen = dict(mn.get("settings") or {}) if isinstance(mn.get("settings"), dict) else {}
    for k, v in (nccl.get("env") or {}).items():
        if isinstance(v, str):
            seen.setdefault(k, [v])
    for k, vals in seen.items():
        if k.startswith("NCCL_MNNVL_") or k == "NCCL_CUMEM_ENABLE":
            for v in vals if isinstance(vals, list) else [vals]:
                out.setdefault(k, []).append((str(v), "the NCCL log"))
    return out


@rule("mnnvl-settings")
def check_mnnvl_settings(topo: Topology, env: dict) -> list:
    """NCCL settings that throw a multi-node NVLink domain away (from the environment or an NCCL log):
    NCCL_MNNVL_ENABLE=0, NCCL_CUMEM_ENABLE=0 (MNNVL needs cuMem), a clique split without
    NCCL_MNNVL_CROSS_CLIQUE, NCCL_MNNVL_CLIQUE_ID / NCCL_MNNVL_UUID overriding the fabric; and a log
    whose communicator spans trays of one domain with MNNVL off (init.cc, mnnvl.cc)."""
    out = []
    settings = _nccl_settings(topo, env)
    fab = [f for _, _, f in _fabric_gpus(topo)]
    nccl = topo.nccl
    mn = nccl.get("mnnvl") if isinstance(nccl.get("mnnvl"), dict) else {}
    domain = any(f.attached for f in fab) or bool(mn.get("clique_size")) or any(f.completed for f in fab)
    hosts = {g.host for g in topo.gpus}

    def first(name: str, value: str) -> Optional[str]:
        return next((w for v, w in settings.get(name, []) if v.strip() == value), None)

    where = first("NCCL_MNNVL_ENABLE", "0")
    if where:
        out.append(finding(
            "mnnvl-settings", "warning" if domain else "info", "NCCL_MNNVL_ENABLE",
            f"NCCL_MNNVL_ENABLE=0 ({where}) " + ("throws this NVLink domain away: GPUs on other trays are reached "
                                                 "over the network instead of NVLink (P2P/CUMEM only inside a tray)"
                                                 if domain else "turns multi-node NVLink off (no fabric known here)"),
            "Unset it (NCCL's default 2 enables MNNVL when the fabric and IMEX work); if it was set to get past "
            "\"MNNVL ... is available but not working\", fix IMEX instead (see imex-domain)."))
    where = first("NCCL_CUMEM_ENABLE", "0")
    if where and domain:
        out.append(finding(
            "mnnvl-settings", "warning", "NCCL_CUMEM_ENABLE",
            f"NCCL_CUMEM_ENABLE=0 ({where}): multi-node NVLink needs cuMem (mnnvl.cc), so NCCL uses the network "
            "between trays", "Unset NCCL_CUMEM_ENABLE (cuMem is NCCL's default since 2.19)."))
    for name, what in (("NCCL_MNNVL_CLIQUE_ID", "replaces the fabric's clique id (-2: one clique per rack chassis serial)"),
                       ("NCCL_MNNVL_UUID", "replaces the fabric's cluster UUID")):
        vals = [(v, w) for v, w in settings.get(name, []) if v.strip() not in ("", "-1")]
        if vals:
            out.append(finding(
                "mnnvl-settings", "info", name, f"{name}={vals[0][0]} ({vals[0][1]}) {what}: NCCL groups GPUs into MNNVL "
                "cliques by this value, not by the NVLink partition", "Leave it unset unless the rack's partitions "
                "must be overridden; every rank of a job needs the same value."))
    # cliques of one domain that NCCL joins over the network
    cliques = {f.clique for f in fab if f.clique is not None}
    clusters = {c for c, _ in cliques}
    split = (mn.get("nvl_domain_size") or 0) > (mn.get("clique_size") or 0) > 0 or \
        (len(cliques) > len(clusters) and len(hosts) > 1)
    cross = first("NCCL_MNNVL_CROSS_CLIQUE", "1") is not None or bool(mn.get("cross_clique"))
    if split and not cross:
        out.append(finding(
            "mnnvl-settings", "info", "NCCL_MNNVL_CROSS_CLIQUE",
            "the NVLink domain holds several cliques (" + (f"nvlDomainSize {mn['nvl_domain_size']} > cliqueSize "
                                                          f"{mn['clique_size']}" if mn.get("clique_size") else
                                                          f"{len(cliques)} cliques") +
            ") and NCCL_MNNVL_CROSS_CLIQUE is not 1: NCCL connects the cliques over the network",
            "Where the partitions allow it (same NVLink domain), NCCL_MNNVL_CROSS_CLIQUE=1 lets P2P cross cliques; "
            "otherwise schedule the job inside one clique."))
    if mn.get("enabled") is False and domain and not first("NCCL_MNNVL_ENABLE", "0"):
        out.append(finding(
            "mnnvl-settings", "warning", "MNNVL",
            "the NCCL log shows MNNVL 0 although its GPUs report a completed NVLink fabric: NCCL found MNNVL "
            "unusable (cuMem or fabric handles not supported, IMEX channels missing) and used the network",
            "Check /dev/nvidia-caps-imex-channels in the job's container, NCCL_CUMEM_ENABLE and the IMEX domain; "
            "run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT to see why."))
    return out


# --------------------------------------------------------------------------------------------
def run_doctor(doc, rules: Optional[list] = None, env: Optional[dict] = None) -> dict:
    """Run the rules (all by default) over a topology (a :class:`Topology` or a document); returns the
    ``gpucomm.doctor/v1`` report with findings sorted by severity, rule and subject; ``checked`` names
    the rules that ran, ``not_checked`` those whose input was absent, with the reason.  ``env``: the
    environment a job would run with (the command's own): its NCCL_MNNVL_* and NCCL_CUMEM_ENABLE
    settings are judged with the document (``mnnvl-settings``)."""
    names = list(RULES) if not rules else list(rules)
    topo = Topology.of(doc)
    run_env = {k: str(v) for k, v in (env or {}).items()
               if isinstance(k, str) and (k.startswith("NCCL_MNNVL_") or k == "NCCL_CUMEM_ENABLE")}
    findings, checked, not_checked = [], [], []
    for name in names:
        why = NEEDS[name](topo) if name in NEEDS else None
        if why:
            not_checked.append({"rule": name, "reason": why})
            continue
        checked.append(name)
        findings.extend(RULES[name](topo, run_env))
    order = {s: i for i, s in enumerate(SEVERITIES)}
    findings.sort(key=lambda f: (order[f["severity"]], f["rule"], _natural(f["subject"]), f["message"]))
    counts = {s: sum(1 for f in findings if f["severity"] == s) for s in SEVERITIES}
    return {"schema": SCHEMA, "findings": findings, "checked": checked, "not_checked": not_checked,
            "counts": counts, "degraded": bool(counts["error"] or counts["warning"])}




# --------------------------------------------------------------------------------------------
# Many nodes: ``gpucomm doctor A B C ...`` (saved topologies of a fleet)
FLEET_SCHEMA = "gpucomm.doctor-fleet/v1"
# Values no rule reads (every rule names its fields above): two input texts equal once these are
# blanked get the same findings.  NIC GUIDs are not among them: a zero GUID marks a NIC as not
# RDMA-capable (facts.nic_is_rdma).
DOCTOR_VOLATILE_KEYS = ("hostname", "collected_at", "uuid")


def _findings_key(report: dict) -> str:
    return repr([(f["severity"], f["rule"], f["subject"], f["message"], f["fix"]) for f in report["findings"]]
                + [(n["rule"], n["reason"]) for n in report.get("not_checked") or []])


def doctor_fleet(items, rules: Optional[list] = None, env: Optional[dict] = None) -> dict:
    """The doctor over many nodes, read one at a time: ``items`` yields (name, topology[, content
    key, summary]), a topology being a :class:`Topology` or a document; nodes with the same findings
    form a **class** (largest first); the **outliers** are the nodes outside the largest class when
    one class is larger than every other.  Memory per node:
    its name, a few counts and its class; an item whose content key was seen before takes that
    node's findings without running the rules again (``gpucomm.doctor-fleet/v1``)."""
    names: list = []
    seen: Counter = Counter()
    inputs: list = []
    fabric_of: dict = {}     # node position -> its (cluster UUID, clique id), for the rack check
    fabric_by_text: dict = {}
    from gpucomm.planners.health.stream import NodeClasses

    grouped = NodeClasses(lambda topo: run_doctor(topo, rules, env), _findings_key)   # classes: doctor reports
    member, classes, first_member = grouped.member, grouped.classes, grouped.first_member
    for item in items:
        name, topo = item[0], item[1]
        text_key = item[2] if len(item) > 2 else None
        seen[name] += 1
        names.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
        if topo is None:     # stream_sources: same text as an earlier node, whose findings stand
            info = item[3]
            inputs.append({"name": names[-1], "hostname": info["hostname"], "gpus": info["gpus"],
                           "nics": info["nics"]})
        else:
            topo = Topology.of(topo)
            inputs.append({"name": names[-1], "hostname": topo.host.get("hostname"), "gpus": len(topo.gpus),
                           "nics": len(topo.nics)})
        c = grouped.add(topo, text_key)
        inputs[-1]["class"] = c
        fab = node_clique(topo) if topo is not None else fabric_by_text.get(text_key)
        if topo is not None and text_key is not None:
            fabric_by_text[text_key] = fab
        if fab is not None:
            fabric_of[len(names) - 1] = fab
    size = Counter(member)
    order = sorted(range(len(classes)), key=lambda c: (-size[c], first_member[c]))
    number = {c: i + 1 for i, c in enumerate(order)}
    out_classes = []
    for c in order:
        rep = classes[c]
        out_classes.append({"class": number[c], "size": size[c],
                            "members": [nm for nm, m in zip(names, member) if m == c],
                            "findings": rep["findings"], "counts": rep["counts"], "degraded": rep["degraded"]})
    for i in inputs:
        i["class"] = number[i["class"]]
    unique = len(order) == 1 or (len(order) > 1 and size[order[1]] < size[order[0]])
    outliers = [nm for nm, m in zip(names, member) if m != order[0]] if order and unique else []
    degraded_nodes = sum(size[c] for c in range(len(classes)) if classes[c]["degraded"])
    across = rack_clique_findings({names[i]: v for i, v in fabric_of.items()}) \
        if not rules or "fabric-clique" in rules else []
    return {"schema": FLEET_SCHEMA, "nodes": len(names), "checked": list(RULES) if not rules else list(rules),
            "inputs": inputs, "classes": out_classes, "outliers": outliers,
            "degraded_nodes": degraded_nodes, "fleet_findings": across,
            "degraded": bool(degraded_nodes) or any(f["severity"] != "info" for f in across)}


def node_clique(topo: Topology) -> Optional[tuple]:
    """(cluster UUID, clique id) most of a node's GPUs are attached to, None without a fabric."""
    keys = Counter(g.fabric.clique for g in topo.gpus if g.fabric is not None and g.fabric.clique is not None)
    return keys.most_common(1)[0][0] if keys else None


def rack_clique_findings(cliques: dict) -> list:
    """Across a fleet ({node: (cluster UUID, clique id)}): a tray in another clique than most trays of
    its NVLink domain (rack), which NCCL then reaches over the network (rule ``fabric-clique``)."""
    out = []
    domains: dict = {}
    for node, (cluster, clique) in cliques.items():
        domains.setdefault(cluster, []).append((node, clique))
    for cluster, members in sorted(domains.items()):
        counts = Counter(c for _, c in members)
        if len(counts) < 2:
            continue
        top, n_top = counts.most_common(1)[0]
        if n_top * 2 > len(members):
            for node, c in sorted(members, key=lambda m: _natural(m[0])):
                if c != top:
                    out.append(finding(
                        "fabric-clique", "warning", node,
                        f"{node} is in clique {c} while {n_top} of the {len(members)} trays of NVLink domain {cluster} "
                        f"are in clique {top}: NCCL reaches it over the network, not over NVLink",
                        "If the rack is not meant to be partitioned, have the NMX controller put the tray back into the "
                        "rack's partition; otherwise schedule it with the trays of its own clique (the "
                        "nvidia.com/gpu.clique label)."))
        else:
            split = "; ".join(f"clique {c}: {_name_list(sorted((n for n, x in members if x == c), key=_natural))}"
                              for c, _n in counts.most_common())
            out.append(finding(
                "fabric-clique", "info", f"domain {cluster}",
                f"the {len(members)} trays of NVLink domain {cluster} are in {len(counts)} cliques ({split}): NCCL joins "
                "the cliques over the network", "Schedule multi-node NVLink jobs inside one clique (the "
                "nvidia.com/gpu.clique label), or have the partitions merged."))
    return out


def doctor_sources(named_sources, rules: Optional[list] = None, env: Optional[dict] = None) -> dict:
    """:func:`doctor_fleet` over (name, source) pairs, each loaded when its turn comes (nodes whose
    texts differ only in host names, collection times and GPU UUIDs are read once)."""
    from gpucomm.planners.health.stream import stream_sources

    return doctor_fleet(stream_sources(named_sources, DOCTOR_VOLATILE_KEYS), rules, env)


def parse_rules(spec: Optional[str]) -> Optional[list]:
    """``--rules a,b`` -> names, in RULES order; raises InputError on an unknown name."""
    from gpucomm.probes.errors import InputError

    if not spec:
        return None
    want = [s.strip() for s in spec.split(",") if s.strip()]
    bad = [w for w in want if w not in RULES]
    if bad:
        raise InputError(f"--rules: unknown rule {bad[0]!r}", expected=", ".join(RULES))
    return [r for r in RULES if r in want]


__all__ = ["SCHEMA", "FLEET_SCHEMA", "RULES", "run_doctor", "doctor_fleet", "doctor_sources", "parse_rules", "nvlink_totals", "expected_pair_bw", "MEASURED_MARGIN"]
