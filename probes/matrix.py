"""The ``nvidia-smi topo -m`` matrix computed from a topology document's PCI tree and links.

One function for every source that has a tree (sysfs, snapshot, NCCL XML, generated fixtures),
so the matrix means the same whatever the input.  Sources that *are* a matrix
(a topo -m capture) copy it instead.

Rules (NVML's ``nvmlDeviceGetTopologyCommonAncestor`` levels, as nvidia-smi prints them):
  NV#   GPU pair joined by # NVLinks: direct GPU-GPU links, or both on NVSwitches (then the
        smaller of the two GPUs' NVSwitch link totals, e.g. NV18 on HGX H100, NV17 if one link is down)
  PIX   lowest common ancestor is a PCIe switch and neither endpoint is below another switch
        under it ("at most a single PCIe bridge")
  PXB   common ancestor is a PCIe switch, through more than one switch
  PHB   common ancestor is a host bridge (root complex); also when the tree stops at the CPU
        without host-bridge detail (NCCL XML: NCCL folds a NUMA node's root complexes into one CPU)
  NODE  different host bridges of the same NUMA node
  SYS   different NUMA nodes (SMP interconnect), or different host bridges whose NUMA node is
        unknown (numa_node -1 on a multi-node host: nvidia-smi cannot show they share one)
  PIX   also two functions of one PCI device (the ports of a dual-port card), whatever is above
  N/A   devices of two hosts (a fused multi-node NVLink XML) with no NVLink between them
Pairs whose placement is unknown get ``N/A`` and a warning rather than a guess.
"""
from __future__ import annotations

from typing import Optional

from gpucomm.probes.model import cpu_id, gpu_id, host_of, nic_id, normalize_bus_id, split_host_id, warn


def _chains(doc: dict) -> tuple[dict, dict]:
    switches = {s["id"]: s for s in doc.get("switches", [])}
    return switches, {}


def ancestors(dev_parent: Optional[str], switches: dict, numa: Optional[int], host: int = 0) -> list[str]:
    """Chain of upstream node ids, nearest first, ending with ``CPU<n>`` (``h/CPU<n>`` on host h) when known."""
    chain: list[str] = []
    cur = dev_parent
    seen = set()
    while cur and cur not in seen:
        seen.add(cur)
        chain.append(cur)
        sw = switches.get(cur)
        if sw is None:
            break
        nxt = sw.get("parent")
        if nxt is None and sw.get("numa_node") is not None:
            nxt = cpu_id(sw["numa_node"], host_of(sw))
        cur = nxt
    if (not chain or not _is_cpu(chain[-1])) and numa is not None and numa >= 0:
        chain.append(cpu_id(numa, host))
    return chain


def _is_cpu(node_id: str) -> bool:
    return split_host_id(node_id)[1].startswith("CPU")


def _under_host_bridge(chain: list, switches: dict) -> bool:
    return any(switches.get(c, {}).get("kind") == "host_bridge" for c in chain)


def pci_level(chain_a: list[str], chain_b: list[str], switches: dict) -> str:
    """nvidia-smi code for two endpoints given their ancestor chains."""
    if not chain_a or not chain_b:
        return "N/A"
    set_b = set(chain_b)
    common = next((c for c in chain_a if c in set_b), None)
    if common is None:
        cpu_a = chain_a[-1] if _is_cpu(chain_a[-1]) else None
        cpu_b = chain_b[-1] if _is_cpu(chain_b[-1]) else None
        if cpu_a and cpu_b and cpu_a != cpu_b:
            return "SYS"
        # Both are placed in the PCI tree (each below a host bridge) but nothing shows that they
        # share a NUMA node (numa_node -1 on a multi-node host, as for the NICs of a GB200 tray):
        # nvidia-smi then answers SYSTEM, NVML's "all devices in the system" level (capture 80:
        # every NIC cell SYS, even between two NICs of one Grace).  Only a device with no known
        # place at all stays N/A.
        if _under_host_bridge(chain_a, switches) and _under_host_bridge(chain_b, switches):
            return "SYS"
        return "N/A"
    kind = switches.get(common, {}).get("kind") if common in switches else ("cpu" if _is_cpu(common) else None)
    if kind == "cpu":
        hb_a = any(switches.get(c, {}).get("kind") == "host_bridge" for c in chain_a)
        hb_b = any(switches.get(c, {}).get("kind") == "host_bridge" for c in chain_b)
        return "NODE" if hb_a and hb_b else "PHB"
    if kind == "host_bridge":
        return "PHB"
    # a PCIe switch (or anything else NCCL calls PCI): count switches crossed
    ia, ib = chain_a.index(common), chain_b.index(common)
    below = [c for c in chain_a[:ia] + chain_b[:ib] if switches.get(c, {}).get("kind") == "pcie"]
    return "PIX" if not below else "PXB"


def same_pci_device(a: Optional[str], b: Optional[str]) -> bool:
    """Two functions of one PCI device (``0000:61:00.0`` / ``0000:61:00.1``, the ports of a
    dual-port NIC).  Their common ancestor is the one port both sit behind -- "at most a single
    PCIe bridge" -- so nvidia-smi prints PIX even when that port is a root port, which is not a
    node of our tree (capture 11: the DGX A100 storage NIC mlx5_8/mlx5_9)."""
    (ha, a), (hb, b) = split_host_id(a or ""), split_host_id(b or "")
    if ha != hb:
        return False
    na, nb = normalize_bus_id(a), normalize_bus_id(b)
    return bool(na and nb and na != nb and na.rsplit(".", 1)[0] == nb.rsplit(".", 1)[0])


def nvlink_counts(doc: dict) -> dict:
    """{(gpu_id_a, gpu_id_b): NVLink count} from ``links`` (kind nvlink)."""
    gpu_ids = {gpu_id(g) for g in doc.get("gpus", [])}
    nvs = {s["id"] for s in doc.get("switches", []) if s.get("kind") == "nvswitch"}
    direct: dict = {}
    to_switch: dict = {}
    for l in doc.get("links", []):
        if l.get("kind") != "nvlink":
            continue
        a, b, c = l["a"], l["b"], int(l.get("count") or 1)
        if a in gpu_ids and b in gpu_ids:
            key = tuple(sorted((a, b)))
            direct[key] = direct.get(key, 0) + c
        elif a in gpu_ids and b in nvs:
            to_switch[a] = to_switch.get(a, 0) + c
        elif b in gpu_ids and a in nvs:
            to_switch[b] = to_switch.get(b, 0) + c
    out = dict(direct)
    sw_gpus = sorted(to_switch)
    for i, a in enumerate(sw_gpus):
        for b in sw_gpus[i + 1:]:
            key = tuple(sorted((a, b)))
            out[key] = out.get(key, 0) + min(to_switch[a], to_switch[b])
    return out


def compute_matrix(doc: dict) -> dict:
    """Fill ``doc['matrix']`` from the tree and links; returns the matrix."""
    switches = {s["id"]: s for s in doc.get("switches", [])}
    devs: list[tuple[str, str, list[str], int]] = []  # (matrix key, graph id, chain, host)
    for g in sorted(doc.get("gpus", []), key=lambda g: g["index"]):
        h = host_of(g)
        devs.append((f"GPU{g['index']}", gpu_id(g), ancestors(g.get("parent"), switches, g.get("numa_node"), h), h))
    for n in doc.get("nics", []):
        # nvidia-smi's NIC columns are RDMA (ibverbs) devices only -- mlx5_*, rocep*, bnxt_re* --
        # a plain Ethernet netdev (the net source's rdma=False records) never gets a column.
        if n.get("rdma") is False:
            continue
        h = host_of(n)
        devs.append((n["name"], nic_id(n), ancestors(n.get("parent"), switches, n.get("numa_node"), h), h))
    nv = nvlink_counts(doc)
    matrix: dict = {}
    unknown = 0
    for ka, ida, ca, ha in devs:
        row = {}
        for kb, idb, cb, hb in devs:
            if ka == kb:
                row[kb] = "X"
                continue
            count = nv.get(tuple(sorted((ida, idb))))
            if count:
                row[kb] = f"NV{count}"
                continue
            if ha != hb:
                # devices of two hosts (NCCL's fused multi-node NVLink XML): no PCI path between them
                row[kb] = "N/A"
                continue
            level = "PIX" if same_pci_device(ida, idb) else pci_level(ca, cb, switches)
            if level == "N/A":
                unknown += 1
            row[kb] = level
        matrix[ka] = row
    if unknown:
        warn(doc, f"matrix: {unknown // 2 or unknown} device pair(s) have no known PCI placement (N/A)")
    doc["matrix"] = matrix
    return matrix
