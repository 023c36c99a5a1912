"""``gpucomm doctor``: find degraded or misconfigured links in a topology document.

Each rule is a small pure function ``rule(doc) -> [finding]`` over the document (no I/O), where a
finding is ``{rule, severity, subject, message, fix}`` and severity is ``error`` (something is
broken: a link or port down, P2P redirected), ``warning`` (running slower than the hardware can, or
misreported) or ``info`` (worth knowing, nothing to repair).  ``gpucomm doctor`` exits 5 when any
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
==================  ============================================================================

Sources for the "why" in each message are the GitHub issues cited in each message and NCCL's
troubleshooting guide (ACS, IOMMU).
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Callable, Optional

from gpucomm.probes.facts import nic_is_rdma, pcie_bw_GBps, port_active
from gpucomm.probes.model import gpu_id, nic_id, parse_cpulist, smi_rank
from gpucomm.probes.model import natural_key as _natural
from gpucomm.probes.topology import Topology

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
def _gkey(g: dict) -> str:
    return f"GPU{g['index']}"


def _bdf(rec: dict) -> str:
    return rec.get("pci_bus_id") or "<bus id>"


def _model(g: dict) -> str:
    return g.get("name") or "GPU"


def _others(model: str) -> str:
    """'other NVIDIA H100 80GB HBM3 GPUs' or, when the model is unknown, 'other GPUs'."""
    return "other GPUs" if model == "GPU" else f"other {model} GPUs"


def _matrix(doc: dict) -> dict:
    m = doc.get("matrix")
    return m if isinstance(m, dict) else {}


def _cell(doc: dict, a: str, b: str) -> Optional[str]:
    row = _matrix(doc).get(a)
    if not isinstance(row, dict):
        return None
    v = row.get(b)
    return v if isinstance(v, str) else None


_NV = re.compile(r"^NV(\d+)$")


def _nv(code: Optional[str]) -> int:
    m = _NV.match(code or "")
    return int(m.group(1)) if m else 0


def _ids(doc: dict) -> dict:
    """graph id -> display key (GPU<i> or the NIC name)."""
    out = {}
    for g in doc.get("gpus", []):
        out[gpu_id(g)] = _gkey(g)
    for n in doc.get("nics", []):
        out[nic_id(n)] = n["name"]
    return out


def _nvswitch_ids(doc: dict) -> set:
    return {s["id"] for s in doc.get("switches", []) if s.get("kind") == "nvswitch"}


def nvlink_totals(doc: dict) -> dict:
    """GPU key -> (active NVLinks, where the number comes from, detail).

    NVML per-link state when the GPU has it; else the document's nvlink links (GPU<->GPU and
    GPU->NVSwitch counts); else the NV# cells of the matrix summed over the row.  On NVSwitch
    systems a matrix row shows the pair minimum (NV17 to every peer of a GPU with a link down),
    so the per-row sum still singles out that GPU."""
    gid = {gpu_id(g): g for g in doc.get("gpus", [])}
    nvs = _nvswitch_ids(doc)
    by_links: dict = {}
    pair_detail: dict = {}
    for l in doc.get("links", []):
        if l.get("kind") != "nvlink":
            continue
        a, b, c = l.get("a"), l.get("b"), int(l.get("count") or 0)
        for x, y in ((a, b), (b, a)):
            if x in gid:
                by_links[x] = by_links.get(x, 0) + c
                if y in gid:
                    pair_detail.setdefault(x, []).append(f"NV{c} to {_gkey(gid[y])}")
                elif y in nvs or y == "NVS":
                    pair_detail.setdefault(x, []).append(f"{c} to NVSwitch")
    out = {}
    for g in doc.get("gpus", []):
        k = _gkey(g)
        recs = [l for l in g.get("nvlink") or [] if l.get("state") in ("active", "inactive")]
        if recs:
            n_act = sum(1 for l in recs if l["state"] == "active")
            out[k] = (n_act, "nvml", f"{n_act} of {len(recs)} links active")
        elif by_links:
            n = by_links.get(gpu_id(g), 0)
            out[k] = (n, "links", ", ".join(sorted(pair_detail.get(gpu_id(g), []))))
        else:
            row = _matrix(doc).get(k) or {}
            cells = {o: _nv(v) for o, v in row.items() if o != k and _nv(v)}
            out[k] = (sum(cells.values()), "matrix", ", ".join(f"NV{v} to {o}" for o, v in sorted(cells.items())))
    return out


def _endpoints_below(doc: dict, switch_id: str) -> list:
    """GPU/NIC keys whose PCI parent chain passes through ``switch_id``."""
    switches = {s["id"]: s for s in doc.get("switches", [])}

    def below(parent: Optional[str]) -> bool:
        seen = set()
        while parent and parent not in seen:
            if parent == switch_id:
                return True
            seen.add(parent)
            parent = (switches.get(parent) or {}).get("parent")
        return False

    return [_gkey(g) for g in doc.get("gpus", []) if below(g.get("parent"))] + \
           [n["name"] for n in doc.get("nics", []) if below(n.get("parent"))]


# --------------------------------------------------------------------------------------------
# rules
@rule("pcie-downtrained")
def check_pcie(doc: dict) -> list:
    out = []
    flagged = set()
    records = [(_gkey(g), gpu_id(g), "gpu", g) for g in doc.get("gpus", [])] + \
              [(n["name"], nic_id(n), "nic", n) for n in doc.get("nics", [])] + \
              [(f"switch {s['id']}", s["id"], "switch", s) for s in doc.get("switches", []) if s.get("kind") == "pcie"]
    for key, ident, kind, rec in records:
        p = rec.get("pcie")
        if not isinstance(p, dict):
            continue
        w, mw, gen, mg = p.get("width"), p.get("max_width"), p.get("gen"), p.get("max_gen")
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
    dev_model = {d.get("bdf"): (d.get("vendor"), d.get("device")) for d in doc.get("pci_devices") or []
                 if isinstance(d, dict)}
    groups: dict = {}
    gmap = {gpu_id(g): g for g in doc.get("gpus", [])}
    nmap = {nic_id(n): n for n in doc.get("nics", [])}
    smap = {s["id"]: s for s in doc.get("switches", []) if s.get("kind") == "pcie"}
    for l in doc.get("links", []):
        if l.get("kind") != "pcie" or not l.get("width") or l.get("a") in flagged:
            continue
        a = l["a"]
        if a in gmap:
            g = gmap[a]
            grp = ("gpu", _model(g))
            label = _gkey(g)
        elif a in nmap:
            n = nmap[a]
            grp = ("nic", dev_model.get(n.get("pci_bus_id")) or n.get("link_layer"))
            label = n["name"]
        elif a in smap:
            s = smap[a]
            grp = ("switch", (s.get("vendor"), s.get("device")))
            label = f"switch {a}"
        else:
            continue
        groups.setdefault(grp, []).append((label, a, l))
    for grp, members in sorted(groups.items(), key=lambda kv: str(kv[0])):
        if len(members) < 3:  # need a clear majority to call one of them narrow
            continue
        widths = Counter(l["width"] for _, _, l in members)
        common, n_common = widths.most_common(1)[0]
        if n_common * 2 <= len(members):
            continue
        for label, a, l in members:
            if l["width"] < common:
                # a GPU whose own pcie record already says the same thing is reported above
                rec = gmap.get(a) or nmap.get(a) or smap.get(a) or {}
                p = rec.get("pcie") if isinstance(rec.get("pcie"), dict) else {}
                if p.get("width") and p.get("max_width"):
                    continue
                out.append(finding(
                    "pcie-downtrained", "warning", label,
                    f"{label} PCIe link is x{l['width']} while {n_common} of the {len(members)} devices of the same "
                    f"model here are x{common}",
                    "Reseat the card and check the slot/riser; compare `lspci -vv` LnkSta with LnkCap."))
    return out


@rule("nvlink-inactive")
def check_nvlink(doc: dict) -> list:
    out = []
    totals = nvlink_totals(doc)
    gpus = doc.get("gpus", [])
    by_model: dict = {}
    for g in gpus:
        by_model.setdefault(_model(g), []).append(g)
    # GPUs whose matrix row and column disagree (MIG) say nothing reliable about their links.
    asym = {a for a, b in _asymmetric_pairs(doc)} | {b for a, b in _asymmetric_pairs(doc)}
    bridges = _bridge_pairs(doc)
    for model, members in sorted(by_model.items()):
        counts = {_gkey(g): totals.get(_gkey(g), (0, "", ""))[0] for g in members}
        best = max(counts.values(), default=0)
        for g in members:
            k = _gkey(g)
            n, src, detail = totals.get(k, (0, "", ""))
            down = [l for l in g.get("nvlink") or [] if l.get("state") == "inactive"]
            if down and (n > 0 or best > 0):
                links = ", ".join(str(l.get("link")) for l in down[:18])
                out.append(finding(
                    "nvlink-inactive", "error", k,
                    f"{k}: NVLink {links} inactive ({n} of {n + len(down)} "
                    f"active; up to {best} on {_others(model)})",
                    "Check `nvidia-smi nvlink -s` and `nvidia-smi nvlink -e` (error counters); a link that stays "
                    "down needs a GPU/board reset (`nvidia-smi -r`) or an RMA. On NVSwitch systems also check "
                    "that nvidia-fabricmanager is running."))
            elif n < best and k not in asym:
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


def _bridge_pairs(doc: dict) -> bool:
    """True when NVLink only joins GPUs in pairs (PCIe cards with NVLink bridges): no NVSwitch and
    no GPU with more than one NVLink peer."""
    nvs = _nvswitch_ids(doc) | {"NVS"}
    gids = {gpu_id(g): _gkey(g) for g in doc.get("gpus", [])}
    peers: dict = {}
    any_nv = False
    for l in doc.get("links", []):
        if l.get("kind") != "nvlink":
            continue
        a, b = l.get("a"), l.get("b")
        if a in nvs or b in nvs:
            return False
        if a in gids and b in gids:
            any_nv = True
            peers.setdefault(a, set()).add(b)
            peers.setdefault(b, set()).add(a)
    if not any_nv:
        m = _matrix(doc)
        for k in gids.values():
            row = m.get(k) or {}
            nvp = {o for o, v in row.items() if o in gids.values() and _nv(v)}
            if nvp:
                any_nv = True
                peers[k] = nvp
    return any_nv and max(len(v) for v in peers.values()) <= 1


def _rail_nics(doc: dict, rdma: list) -> list:
    """RDMA NICs at PIX/PXB from at least one GPU (the GPU rails NCCL uses), else all of them."""
    gkeys = [_gkey(g) for g in doc.get("gpus", [])]
    near = []
    for n in rdma:
        codes = [_cell(doc, gk, n["name"]) or _cell(doc, n["name"], gk) for gk in gkeys]
        if any(c in ("PIX", "PXB") for c in codes):
            near.append(n)
    return near or rdma


@rule("ib-port-down")
def check_ib_ports(doc: dict) -> list:
    out = []
    rdma = [n for n in doc.get("nics", []) if nic_is_rdma(n)]
    active_ports: dict = {}
    for n in rdma:
        for p in n.get("ports") or []:
            if port_active(p.get("state")):
                active_ports.setdefault((n.get("link_layer"), p.get("port")), set()).add(n["name"])
    for n in rdma:
        ports = n.get("ports") or []
        any_up = any(port_active(p.get("state")) for p in ports)
        for p in ports:
            st = p.get("state")
            if st is None or port_active(st):
                continue
            peers = active_ports.get((n.get("link_layer"), p.get("port")), set()) - {n["name"]}
            if not peers and any_up:
                continue  # e.g. the unused second port of a dual-port card
            phys = f", physical state {p['phys_state']}" if p.get("phys_state") else ""
            why = (f"port {p.get('port')} of {len(peers)} other {n.get('link_layer') or 'RDMA'} NIC(s) is ACTIVE"
                   if peers else "no port of this NIC is up")
            hint = ("INIT means the link is up but no subnet manager has configured it (start opensm / check "
                    "the fabric's SM). " if str(st).upper() == "INIT" else "")
            out.append(finding(
                "ib-port-down", "error", f"{n['name']}/{p.get('port')}",
                f"{n['name']} port {p.get('port')} is {st}{phys}; {why}",
                hint + f"Check the cable and switch port (`ibstat {n['name']}`, `ibstatus`); NCCL skips ports that "
                       "are not ACTIVE, so this node has fewer rails than its peers."))
    return out


@rule("ib-rate-low")
def check_ib_rate(doc: dict) -> list:
    out = []
    rdma = [n for n in doc.get("nics", []) if nic_is_rdma(n)]
    by_layer: dict = {}
    for n in _rail_nics(doc, rdma):
        by_layer.setdefault(n.get("link_layer"), []).append(n)
    for layer, members in sorted(by_layer.items(), key=lambda kv: str(kv[0])):
        rates = [(n, p) for n in members for p in n.get("ports") or [] if port_active(p.get("state")) and p.get("rate_gbps")]
        if len(rates) < 2:
            continue
        best = max(p["rate_gbps"] for _, p in rates)
        n_best = sum(1 for _, p in rates if p["rate_gbps"] == best)
        for n, p in rates:
            if p["rate_gbps"] < best:
                out.append(finding(
                    "ib-rate-low", "warning", f"{n['name']}/{p.get('port')}",
                    f"{n['name']} port {p.get('port')} runs at {p['rate_gbps']:g} Gb/s while {n_best} other "
                    f"{layer or 'RDMA'} port(s) of this node's GPU rails run at {best:g} Gb/s",
                    "A link that negotiated a lower speed or width: check the cable/transceiver and the switch "
                    f"port (`ibstat {n['name']}` shows Rate and width; `mlxlink -d <dev>` the lanes)."))
    return out


@rule("nic-numa-mismatch")
def check_nic_numa(doc: dict) -> list:
    out = []
    rdma = [n for n in doc.get("nics", []) if nic_is_rdma(n)]
    if not rdma:
        return out
    nvl = nvlink_totals(doc)
    c2c = {l["a"] for l in doc.get("links", []) if l.get("kind") == "c2c"} | \
          {l["b"] for l in doc.get("links", []) if l.get("kind") == "c2c"}
    for g in doc.get("gpus", []):
        k = _gkey(g)
        ranked = []
        for n in rdma:
            c = _cell(doc, k, n["name"])
            if c and c not in ("X", "N/A"):
                ranked.append((smi_rank(c), c, n))
        if not ranked:
            continue
        best = min(r for r, _, _ in ranked)
        nearest = [(c, n) for r, c, n in ranked if r == best]
        code = nearest[0][0]
        names = _name_list([n["name"] for _, n in nearest])
        if code == "SYS":
            if gpu_id(g) in c2c or g.get("gpu_numa_id") is not None:
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
        gn = g.get("numa_node")
        for c, n in nearest:
            nn = n.get("numa_node")
            if gn is not None and nn is not None and gn >= 0 and nn >= 0 and gn != nn:
                out.append(finding(
                    "nic-numa-mismatch", "warning", f"{k}/{n['name']}",
                    f"{k} (NUMA {gn}) and its nearest NIC {n['name']} ({c}) report NUMA {nn}: devices on one PCIe "
                    "path cannot be on different NUMA nodes, so the firmware's proximity information is wrong",
                    "Check the BIOS NUMA settings (SNC/NPS, ACPI SRAT/_PXM); NCCL and the launcher bind CPUs by "
                    "these values, so pin CPUs explicitly (`numactl --cpunodebind`) until it is fixed."))
    return out


def _name_list(names: list, limit: int = 4) -> str:
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f" and {len(names) - limit} more"


def _asymmetric_pairs(doc: dict) -> list:
    m = _matrix(doc)
    keys = sorted(m)
    out = []
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            x, y = _cell(doc, a, b), _cell(doc, b, a)
            if x is not None and y is not None and x != y:
                out.append((a, b))
    return out


_P2P_UNFIXABLE = {"GPU_NOT_SUPPORTED"}


@rule("p2p-blocked")
def check_p2p(doc: dict) -> list:
    out = []
    gpus = doc.get("gpus", [])
    # ACS P2P redirect on PCIe switches that have GPUs/NICs below them
    for s in doc.get("switches", []):
        acs = s.get("acs")
        if s.get("kind") != "pcie" or not isinstance(acs, dict):
            continue
        bad = sorted(b for b, flags in acs.items() if isinstance(flags, list) and {"RR", "CR"} & set(flags))
        if not bad:
            continue
        below = _endpoints_below(doc, s["id"])
        if len(below) < 2:
            continue
        out.append(finding(
            "p2p-blocked", "error", f"switch {s['id']}",
            f"ACS P2P redirect (RR/CR) is enabled on {', '.join(bad)} of PCIe switch {s['id']}, above "
            f"{', '.join(below)}: peer-to-peer traffic is forced up to the root complex (hangs or slow P2P, "
            "nccl#606, nccl#2079)",
            "Disable ACS on the switch ports (`setpci -s <bdf> ECAP_ACS+6.w=0000` at boot, or the BIOS option), "
            "or boot with IOMMU off/passthrough; NCCL's troubleshooting guide describes both."))
    # IOMMU
    iommu = (doc.get("host") or {}).get("iommu")
    rdma = [n for n in doc.get("nics", []) if nic_is_rdma(n)]
    if isinstance(iommu, str) and gpus and (len(gpus) >= 2 or rdma):
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
    by_bus = {g.get("pci_bus_id"): g for g in gpus if g.get("pci_bus_id")}
    bad_pairs: dict = {}
    seen = set()
    for g in gpus:
        p2p = g.get("p2p")
        if not isinstance(p2p, dict):
            continue
        for other, st in sorted(p2p.items()):
            h = by_bus.get(other)
            if h is None or h is g or st in (None, "OK"):
                continue
            pair = tuple(sorted((g["index"], h["index"])))
            if pair in seen:
                continue
            code = _cell(doc, _gkey(g), _gkey(h))
            if not code or not (_nv(code) or code in ("PIX", "PXB")):
                continue
            seen.add(pair)
            bad_pairs.setdefault(str(st), []).append((f"GPU{pair[0]}-GPU{pair[1]}", code))
    for st, pairs in sorted(bad_pairs.items()):
        names = ", ".join(f"{p} ({c})" for p, c in pairs)
        consumer = all("geforce" in (_model(g) or "").lower() for g in gpus)
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
def check_cpu_affinity(doc: dict) -> list:
    out = []
    nodes = {}
    for n in doc.get("numa_nodes", []):
        try:
            nodes[n["id"]] = set(parse_cpulist(n.get("cpus") or ""))
        except ValueError:
            continue
    for g in doc.get("gpus", []):
        k, numa, aff = _gkey(g), g.get("numa_node"), g.get("cpu_affinity")
        if numa is None or numa < 0:
            continue
        if g.get("gpu_numa_id") is not None and g.get("gpu_numa_id") == numa:
            continue  # Grace/GB200: the GPU's own memory NUMA node, not a CPU node
        na = g.get("numa_affinity") or []
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
                f"Bind the rank to NUMA node {numa}'s CPUs ({doc_cpus(doc, numa)}); the driver's affinity or the "
                "firmware's NUMA table is inconsistent."))
    return out


def doc_cpus(doc: dict, numa: int) -> str:
    for n in doc.get("numa_nodes", []):
        if n.get("id") == numa:
            return n.get("cpus") or "?"
    return "?"


def expected_pair_bw(doc: dict, a: dict, b: dict) -> Optional[float]:
    """What a copy between two GPUs should reach by NCCL's constants: the direct NVLink bandwidth,
    the smaller NVSwitch uplink of the two, or the smaller PCIe link when they share a switch or
    a host bridge (SYS pairs depend on the CPU interconnect and are not judged)."""
    ia, ib = gpu_id(a), gpu_id(b)
    nvs = _nvswitch_ids(doc) | {"NVS"}
    direct, sw = 0.0, {ia: 0.0, ib: 0.0}
    for l in doc.get("links", []):
        if l.get("kind") != "nvlink":
            continue
        ends = {l.get("a"), l.get("b")}
        if ends == {ia, ib}:
            direct += float(l.get("bw_GBps") or 0)
        for x in (ia, ib):
            if x in ends and (ends - {x}) & nvs:
                sw[x] += float(l.get("bw_GBps") or 0)
    if direct:
        return direct
    if sw[ia] and sw[ib]:
        return min(sw.values())
    code = _cell(doc, _gkey(a), _gkey(b))
    if code in ("PIX", "PXB", "PHB", "NODE"):
        bws = []
        for g in (a, b):
            p = g.get("pcie") if isinstance(g.get("pcie"), dict) else None
            if not p:
                return None
            gen = p.get("max_gen") or p.get("gen")
            width = p.get("max_width") or p.get("width")
            if not gen:
                return None
            bws.append(pcie_bw_GBps(gen, width))
        return min(bws)
    return None


_KIND = {"nvlink": "NVLink", "pcie": "PCIe", "smp": "CPU interconnect", "c2c": "C2C", "xgmi": "xGMI", "net": "network"}


@rule("measured-bw-low")
def check_measured(doc: dict) -> list:
    out = []
    names = _ids(doc)
    for l in doc.get("links", []):
        m, e = l.get("measured_bw_GBps"), l.get("bw_GBps")
        if isinstance(m, (int, float)) and isinstance(e, (int, float)) and e > 0 and m < MEASURED_MARGIN * e:
            a, b = names.get(l["a"], l["a"]), names.get(l["b"], l["b"])
            out.append(finding(
                "measured-bw-low", "warning", f"{a}-{b}",
                f"{_KIND.get(l['kind'], l['kind'])} link {a}-{b} measured {m:g} GB/s, {100 * m / e:.0f}% of the "
                f"{e:g} GB/s expected",
                "Re-run `gpucomm bench p2p` on an idle node; if it stays low, look at the other doctor findings "
                "for this pair (down-trained PCIe, NVLink down, P2P blocked) and at `nvidia-smi nvlink -e`."))
    p2p = ((doc.get("measured") or {}).get("p2p")) or {}
    gmap = {_gkey(g): g for g in doc.get("gpus", [])}
    done = {(x, y) for x, y in [(f.get("subject") or "").split("-", 1) for f in out if "-" in (f.get("subject") or "")]}
    for a, row in sorted(p2p.items()):
        if a not in gmap or not isinstance(row, dict):
            continue
        for b, cell in sorted(row.items()):
            if b not in gmap or not isinstance(cell, dict) or (a, b) in done or (b, a) in done:
                continue
            m = cell.get("bw_GBps")
            e = expected_pair_bw(doc, gmap[a], gmap[b])
            if isinstance(m, (int, float)) and e and m < MEASURED_MARGIN * e:
                out.append(finding(
                    "measured-bw-low", "warning", f"{a}->{b}",
                    f"copy {a}->{b} measured {m:g} GB/s, {100 * m / e:.0f}% of the {e:g} GB/s expected "
                    f"({_cell(doc, a, b) or 'path unknown'})",
                    "Re-run `gpucomm bench p2p` on an idle node; if it stays low, look for P2P disabled "
                    "(`nvidia-smi topo -p2p r`), ACS/IOMMU, a down-trained PCIe link or an NVLink down."))
    return out


@rule("mig-enabled")
def check_mig(doc: dict) -> list:
    out = []
    for g in doc.get("gpus", []):
        if g.get("mig") is True:
            k = _gkey(g)
            out.append(finding(
                "mig-enabled", "info", k,
                f"{k} has MIG mode enabled: MIG instances have no P2P, NVLS or multi-node NVLink, and one process "
                "sees one instance (nccl#1716, pytorch#130181)",
                f"For multi-GPU training disable MIG (`nvidia-smi -i {g['index']} -mig 0`, then reset the GPU)."))
    return out


@rule("matrix-asymmetric")
def check_asymmetric(doc: dict) -> list:
    out = []
    mig = {_gkey(g) for g in doc.get("gpus", []) if g.get("mig")}
    for a, b in _asymmetric_pairs(doc):
        x, y = _cell(doc, a, b), _cell(doc, b, a)
        hint = " (MIG)" if {a, b} & mig else ""
        out.append(finding(
            "matrix-asymmetric", "warning", f"{a}-{b}",
            f"the topology matrix shows {x} from {a} to {b} but {y} from {b} to {a}{hint}",
            "nvidia-smi shows this when MIG is enabled on one GPU (its row loses NVLink): disable MIG for "
            "multi-GPU jobs, or re-capture `nvidia-smi topo -m` after a GPU reset."))
    return out


# the software path's rules: planners/health/path_rules.py
from gpucomm.planners.health import path_rules as _path_rules  # noqa: E402

_path_rules.register(rule, finding)


# --------------------------------------------------------------------------------------------
def run_doctor(doc: dict, rules: Optional[list] = None) -> dict:
    """Run the rules (all by default) over a document; returns the ``gpucomm.doctor/v1`` report
    with findings sorted by severity, rule and subject."""
    names = list(RULES) if not rules else list(rules)
    doc = Topology.of(doc).doc   # the cleaned document: every field has the schema's type
    findings = []
    for name in names:
        findings.extend(RULES[name](doc))
    order = {s: i for i, s in enumerate(SEVERITIES)}
    findings.sort(key=lambda f: (order[f["severity"]], f["rule"], _natural(f["subject"]), f["message"]))
    counts = {s: sum(1 for f in findings if f["severity"] == s) for s in SEVERITIES}
    return {"schema": SCHEMA, "findings": findings, "checked": names, "counts": counts,
            "degraded": bool(counts["error"] or counts["warning"])}




# --------------------------------------------------------------------------------------------
# Many nodes: ``gpucomm doctor A B C ...`` (saved topologies of a fleet)
FLEET_SCHEMA = "gpucomm.doctor-fleet/v1"
# Values no rule reads (every rule names its fields above): two input texts equal once these are
# blanked get the same findings.  NIC GUIDs are not among them: a zero GUID marks a NIC as not
# RDMA-capable (facts.nic_is_rdma).
DOCTOR_VOLATILE_KEYS = ("hostname", "collected_at", "uuid")


def _findings_key(report: dict) -> str:
    return repr([(f["severity"], f["rule"], f["subject"], f["message"], f["fix"]) for f in report["findings"]])


def doctor_fleet(items, rules: Optional[list] = None) -> dict:
    """The doctor over many nodes, read one at a time: ``items`` yields (name, document[, content
    key, summary]); nodes with the same findings form a **class** (largest first); the **outliers** are the
    nodes outside the largest class when one class is larger than every other.  Memory per node:
    its name, a few counts and its class; an item whose content key was seen before takes that
    node's findings without running the rules again (``gpucomm.doctor-fleet/v1``)."""
    names: list = []
    seen: Counter = Counter()
    inputs: list = []
    from gpucomm.planners.health.stream import NodeClasses

    grouped = NodeClasses(lambda doc: run_doctor(doc, rules), _findings_key)   # classes: doctor reports
    member, classes, first_member = grouped.member, grouped.classes, grouped.first_member
    for item in items:
        name, doc = item[0], item[1]
        text_key = item[2] if len(item) > 2 else None
        seen[name] += 1
        names.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
        if doc is None:      # stream_sources: same text as an earlier node, whose findings stand
            info = item[3]
            inputs.append({"name": names[-1], "hostname": info["hostname"], "gpus": info["gpus"],
                           "nics": info["nics"]})
        else:
            h = doc.get("host") or {}
            inputs.append({"name": names[-1], "hostname": h.get("hostname"), "gpus": len(doc.get("gpus", [])),
                           "nics": len(doc.get("nics", []))})
        c = grouped.add(doc, text_key)
        inputs[-1]["class"] = c
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
    return {"schema": FLEET_SCHEMA, "nodes": len(names), "checked": list(RULES) if not rules else list(rules),
            "inputs": inputs, "classes": out_classes, "outliers": outliers,
            "degraded_nodes": degraded_nodes, "degraded": bool(degraded_nodes)}


def doctor_sources(named_sources, rules: Optional[list] = None) -> dict:
    """:func:`doctor_fleet` over (name, source) pairs, each loaded when its turn comes (nodes whose
    texts differ only in host names, collection times and GPU UUIDs are read once)."""
    from gpucomm.planners.health.stream import stream_sources

    return doctor_fleet(stream_sources(named_sources, DOCTOR_VOLATILE_KEYS), rules)


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
