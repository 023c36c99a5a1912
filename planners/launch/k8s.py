"""Kubernetes node labels and a Node Feature Discovery (NFD) feature file for a node's GPU
fabric (``gpucomm probe --format k8s-labels|nfd``): what a scheduler needs to place a job on the
right nodes -- GPU model and count, NVLink domain and NVSwitch, RDMA NIC count and rate, NUMA
layout -- which NVIDIA's GPU Feature Discovery (``nvidia.com/gpu.*``) does not label.

Names live under NFD's own namespace ``feature.node.kubernetes.io/``, the one nfd-master always
accepts (NFD "Feature labels" / "local" feature source: a file in
``/etc/kubernetes/node-feature-discovery/features.d/`` with one ``name=value`` per line), with a
``gpucomm-`` prefix.  Values follow the Kubernetes label syntax (at most 63 characters of
``[A-Za-z0-9_.-]``, alphanumeric at both ends); :func:`check_label` enforces it.
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional

from gpucomm.probes import facts
from gpucomm.probes.errors import NothingToDo
from gpucomm.probes.topology import Topology

PREFIX = "feature.node.kubernetes.io/gpucomm-"
NFD_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def check_label(key: str, value: str) -> Optional[str]:
    """None when ``key=value`` is a valid Kubernetes label, else why not."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _PREFIX.match(prefix)):
        return f"label prefix {prefix!r} is not a DNS subdomain"
    if not _NAME.match(name):
        return f"label name {name!r} is not 1-63 characters of [A-Za-z0-9_.-] with alphanumeric ends"
    if not _VALUE.match(value):
        return f"label value {value!r} is not 0-63 characters of [A-Za-z0-9_.-] with alphanumeric ends"
    return None


def label_value(text) -> str:
    """Any text as a label value: runs of other characters become '-', cut to 63, alphanumeric ends.

    >>> label_value("NVIDIA H100 80GB HBM3")
    'NVIDIA-H100-80GB-HBM3'
    """
    v = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(text)).strip("-_.")[:63]
    return v.rstrip("-_.")


def node_labels(doc) -> Dict[str, str]:
    """{label: value} for one node (a Topology or document)."""
    from gpucomm.planners.placement.layout import compute_nics, node_view

    topo = Topology.of(doc)
    out: Dict[str, str] = {}

    def put(name: str, value) -> None:
        if value is None or value == "":
            return
        out[PREFIX + name] = label_value(value)

    gpus = topo.gpus
    put("gpu.count", len(gpus))
    numa = topo.numa_cpus()
    put("numa.nodes", len(numa))
    put("cpu.sockets", topo.host.get("sockets"))
    if gpus:
        names = sorted({g.name or "unknown" for g in gpus})
        put("gpu.product", names[0] if len(names) == 1 else "mixed")
        mems = [g.memory_bytes for g in gpus]
        if all(m is not None and m > 0 for m in mems):
            put("gpu.memory-mib", min(mems) // 2**20)
        # the compute capability a GPU record gives (not one the view assumed or read off a name)
        ccs = sorted({facts.format_compute_capability(g.sm) for g in gpus if g.sm_source == "record"})
        if len(ccs) == 1:
            put("gpu.compute-capability", ccs[0])
        by_numa: Dict[str, int] = {}
        for g in gpus:
            n = g.numa_node
            key = str(n) if n is not None and n >= 0 else "unknown"
            by_numa[key] = by_numa.get(key, 0) + 1
        put("numa.gpus", "_".join(f"{k}x{v}" if k != "unknown" else f"unknownx{v}"
                                  for k, v in sorted(by_numa.items())))
        gens = {g.pcie.gen for g in gpus if g.pcie is not None and g.pcie.gen}
        if len(gens) == 1:
            put("gpu.pcie-gen", gens.pop())
    fab = topo.nvlink
    try:
        view = node_view(topo)
    except NothingToDo:
        view = None
    if view is not None:
        doms = view.nvlink_domains
        largest = max((len(d) for d in doms), default=0)
        put("nvlink.domain-size", largest if any(len(d) > 1 for d in doms) else 0)
        put("nvlink.domains", sum(1 for d in doms if len(d) > 1))
        per_gpu = sorted({round(view.nvlink_bw_per_gpu(i), 1) for i in view.index})
        if per_gpu and per_gpu[0] > 0:
            put("nvlink.gpu-GBps", f"{per_gpu[0]:g}")   # NCCL's NVLink bandwidth of the slowest GPU, one direction
        put("nvswitch", "true" if fab.nvswitch else "false")
        nvs = [s for s in topo.switches.values() if s.kind == "nvswitch"]
        if nvs and fab.nvswitch:
            put("nvswitch.count", len(nvs))
        put("p2p-disabled-pairs", len(view.p2p_disabled))
    nics = {n.name: n.rec for n in topo.nics if n.up}
    compute = compute_nics(nics) if nics else {}
    rdma = [topo.nic(name) for name in compute if topo.nic(name).rdma]
    put("rdma.nic-count", len(rdma))
    if rdma:
        rates = sorted({n.rate_gbps for n in rdma if n.rate_gbps})
        if rates:
            put("rdma.nic-rate-gbps", int(rates[0]))
            put("rdma.total-gbps", int(sum(n.rate_gbps or 0 for n in rdma)))
        layers = sorted({(n.link_layer or "unknown").lower() for n in rdma})
        put("rdma.link-layer", layers[0] if len(layers) == 1 else "mixed")
        if view is not None and view.gpu_nic_level:
            from gpucomm.planners.placement.layout import NIC_LEVEL_RANK

            worst = max(view.gpu_nic_level.values(), key=lambda c: NIC_LEVEL_RANK.get(c, 9))
            put("rdma.gpu-nic-path", worst)
    return dict(sorted(out.items()))


def labels_document(doc) -> dict:
    """``gpucomm.k8s-labels/v1``: the labels, the host they describe and a ready ``kubectl`` line."""
    topo = Topology.of(doc)
    labels = node_labels(topo)
    host = topo.host.get("hostname") or "NODE"
    problems = [p for p in (check_label(k, v) for k, v in labels.items()) if p]
    return {
        "schema": "gpucomm.k8s-labels/v1",
        "node": host,
        "labels": labels,
        "kubectl": "kubectl label node --overwrite " + host + " " + " ".join(f"{k}={v}" for k, v in labels.items()),
        "nfd_file": f"{NFD_DIR}/gpucomm",
        "warnings": problems,
    }


def labels_json(doc) -> str:
    from gpucomm.probes.model import dumps_json

    return dumps_json(labels_document(doc))


def nfd_feature_file(doc) -> str:
    """An NFD local feature file: ``name=value`` per line, ``#`` comments."""
    d = labels_document(doc)
    lines: List[str] = [f"# Node Feature Discovery feature file for {d['node']}, written by gpucomm",
                        f"# install as {d['nfd_file']} (nfd-worker's local source reads that directory)"]
    lines += [f"{k}={v}" for k, v in d["labels"].items()]
    return "\n".join(lines) + "\n"
