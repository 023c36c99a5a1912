"""Kubernetes node labels and a Node Feature Discovery (NFD) feature file for a node's GPU
fabric (``gpucomm probe --format k8s-labels|nfd``): what a scheduler needs to place a job on the
right nodes -- GPU model and count, NVLink domain and NVSwitch, RDMA NIC count and rate, NUMA
layout -- which NVIDIA's GPU Feature Discovery (``nvidia.com/gpu.*``) does not label.  On a tray of a
multi-node NVLink rack (GB200/GB300 NVL72) the NVLink domain is the rack's (its size from the IMEX
domain; left out, with a warning, when nothing gives it) and GFD's ``nvidia.com/gpu.clique`` is
written with GFD's value, so a cluster without GFD gets the same topology key.

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
from gpucomm.probes.formats.k8s_labels import CLIQUE_LABEL as GFD_CLIQUE
from gpucomm.probes.formats.k8s_labels import HOSTNAME_LABEL, check_label
from gpucomm.probes.topology import Topology, clique_label

PREFIX = "feature.node.kubernetes.io/gpucomm-"
NFD_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
def label_value(text) -> str:
    """Any text as a label value: runs of other characters become '-', cut to 63, alphanumeric ends.

    >>> label_value("NVIDIA H100 80GB HBM3")
    'NVIDIA-H100-80GB-HBM3'
    """
    v = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(text)).strip("-_.")[:63]
    return v.rstrip("-_.")


def node_labels(doc) -> Dict[str, str]:
    """{label: value} for one node (a Topology or document)."""
    from gpucomm.planners.placement.nics import compute_nics
    from gpucomm.planners.placement.nodeview import node_view

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
    domain = topo.nvlink_domain()
    if view is not None:
        doms = view.nvlink_domains
        largest = max((len(d) for d in doms), default=0)
        if domain.multi_node:   # a tray of a multi-node NVLink rack: the rack's domain, when known
            put("nvlink.domain-size", domain.size)
            put("nvlink.domain-nodes", domain.nodes)
        else:
            put("nvlink.domain-size", largest if any(len(d) > 1 for d in doms) else 0)
        put("nvlink.domains", sum(1 for d in doms if len(d) > 1))
        per_gpu = sorted({round(view.nvlink_bw_per_gpu(i), 1) for i in view.index})
        if per_gpu and per_gpu[0] > 0:
            # NCCL's model of the slowest GPU's NVLinks (what its search uses), one direction ...
            put("nvlink.gpu-nccl-GBps", f"{per_gpu[0]:g}")
            # ... and the data sheet's figure for as many links (450 on an H100 SXM), one direction
            sm = min((g.sm for g in gpus if g.sm), default=None)
            spec = facts.nvlink_spec_GBps_per_link(sm)
            links = round(per_gpu[0] / facts.nvlink_bw_per_link(sm))
            if spec and links:
                put("nvlink.gpu-spec-GBps", f"{spec * links:g}")
        put("nvswitch", "true" if fab.nvswitch else "false")
        nvs = [s for s in topo.switches.values() if s.kind == "nvswitch"]
        if nvs and fab.nvswitch:
            put("nvswitch.count", len(nvs))
        put("p2p-disabled-pairs", len(view.p2p_disabled))
    clique = gpu_clique_label(topo)
    if clique:
        out[GFD_CLIQUE] = clique
    nics = {n.name: n for n in topo.nics if n.up}
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
            from gpucomm.planners.placement.nics import NIC_LEVEL_RANK

            worst = max(view.gpu_nic_level.values(), key=lambda c: NIC_LEVEL_RANK.get(c, 9))
            put("rdma.gpu-nic-path", worst)
    return dict(sorted(out.items()))


def gpu_clique_label(topo: Topology) -> Optional[str]:
    """``nvidia.com/gpu.clique`` for this node (:func:`gpucomm.probes.topology.clique_label`)."""
    return clique_label(g.fabric for g in topo.gpus)


def labels_document(doc) -> dict:
    """``gpucomm.k8s-labels/v1``: the labels, the host they describe and a ready ``kubectl`` line."""
    topo = Topology.of(doc)
    labels = node_labels(topo)
    host = topo.host.get("hostname") or "NODE"
    problems = [p for p in (check_label(k, v) for k, v in labels.items()) if p]
    domain = topo.nvlink_domain()
    if domain.multi_node and domain.size is None:
        problems.append(f"{PREFIX}nvlink.domain-size left out: {domain.note}")
    attached = {g.fabric.clique for g in topo.gpus if g.fabric is not None and g.fabric.attached}
    if GFD_CLIQUE not in labels and len(attached) > 1:
        problems.append(f"{GFD_CLIQUE} left out: the GPUs are in {len(attached)} different cliques (GPU Feature "
                        "Discovery labels none either)")
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
    if GFD_CLIQUE in d["labels"]:
        lines.append(f"# {GFD_CLIQUE} is GPU Feature Discovery's own label (same value); nfd-master publishes it only "
                     "with nvidia.com in its -extra-label-ns")
    lines += [f"{k}={v}" for k, v in d["labels"].items()]
    return "\n".join(lines) + "\n"


# ============================================================================================
# Fabric locality: Kueue Topology levels and the node labels they name (gpucomm fabric --emit kueue)
KUEUE_API = "kueue.x-k8s.io/v1beta1"
NFD_API = "nfd.k8s-sigs.io/v1alpha1"
NFD_NAMESPACE = "node-feature-discovery"
_LOCALITY_ORDER = ("level6", "level5", "level4", "core", "spine", "leaf", "block", "nvlink-domain")


def locality_label(kind: str) -> str:
    """``leaf`` -> ``feature.node.kubernetes.io/gpucomm-fabric.leaf``; ``nvlink-domain`` ->
    ``...gpucomm-nvlink.domain`` (values: the switch, block or domain a node is under)."""
    return PREFIX + ("nvlink.domain" if kind == "nvlink-domain" else f"fabric.{kind}")


def kueue_levels(loc: Dict[str, Dict[str, str]]) -> List[str]:
    """Kueue Topology levels, top first (``kubernetes.io/hostname`` goes below them): each locality
    every host has, keeping a level only when each value of the level below sits under one value of
    it (Kueue's domains nest); a block that is exactly the NVLink domain is named once."""
    kinds = [k for k in _LOCALITY_ORDER if loc and all(k in v for v in loc.values())]
    if "block" in kinds and "nvlink-domain" in kinds and all(
            len({v["block"] for v in loc.values() if v["nvlink-domain"] == d}) == 1
            for d in {v["nvlink-domain"] for v in loc.values()}):
        kinds.remove("block")
    keep: List[str] = []
    for k in reversed(kinds):               # bottom up: drop an upper level that does not nest
        if keep:
            below = keep[-1]
            if not all(len({v[k] for v in loc.values() if v[below] == val}) == 1
                       for val in {v[below] for v in loc.values()}):
                continue
        keep.append(k)
    return list(reversed(keep))


def kueue_document(loc: Dict[str, Dict[str, str]], name: str = "gpucomm-fabric",
                   native: Optional[Dict[str, str]] = None) -> dict:
    """``gpucomm.kueue/v1``: the Kueue Topology over hosts' localities ({host: {kind: id}},
    planners.placement.fabric.host_locality) and each host's labels for its levels; a level in
    ``native`` ({kind: node label}, planners.placement.fabric.native_labels) names the label the
    nodes already carry, and gpucomm writes none for it."""
    from gpucomm.probes.model import natural_key

    native = native or {}
    kinds = kueue_levels(loc)
    labels = {h: dict({locality_label(k): label_value(v[k]) for k in kinds if k not in native}, **{HOSTNAME_LABEL: h})
              for h, v in loc.items()}
    topo = {"apiVersion": KUEUE_API, "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": native.get(k) or locality_label(k)} for k in kinds]
                     + [{"nodeLabel": HOSTNAME_LABEL}]}}
    problems = [p for ls in labels.values() for p in (check_label(k, v) for k, v in ls.items()) if p]
    return {"schema": "gpucomm.kueue/v1", "levels": kinds + ["hostname"], "topology": topo,
            "node_labels": {h: labels[h] for h in sorted(labels, key=natural_key)}, "warnings": sorted(set(problems))}


def node_feature(host: str, labels: Dict[str, str]) -> dict:
    """An NFD ``NodeFeature`` object that has nfd-master put ``labels`` on ``host`` (names in NFD's
    own namespace are written without it, as NFD expects)."""
    nfd_ns = "feature.node.kubernetes.io/"
    return {"apiVersion": NFD_API, "kind": "NodeFeature",
            "metadata": {"name": ("gpucomm-" + label_value(host).lower())[:253], "namespace": NFD_NAMESPACE,
                         "labels": {"nfd.node.kubernetes.io/node-name": host}},
            "spec": {"labels": {k[len(nfd_ns):] if k.startswith(nfd_ns) else k: v for k, v in labels.items()}}}


def kueue_yaml(loc: Dict[str, Dict[str, str]], name: str = "gpucomm-fabric",
               native: Optional[Dict[str, str]] = None) -> str:
    """A YAML stream: the Kueue Topology, then one NFD NodeFeature per host with the labels its levels
    name (``kubernetes.io/hostname`` is the kubelet's own, ``native`` ones the nodes carry already)."""
    import yaml

    kd = kueue_document(loc, name, native)
    docs = [kd["topology"]]
    for h, labels in kd["node_labels"].items():
        own = {k: v for k, v in labels.items() if k != HOSTNAME_LABEL}
        if own:
            docs.append(node_feature(h, own))
    head = (f"# gpucomm: Kueue Topology ({' > '.join(kd['levels'])}) and the node labels its levels name, as\n"
            "# Node Feature Discovery NodeFeature objects (kubectl apply -f; nfd-master labels the nodes)\n")
    if len(docs) == 1:
        head = (f"# gpucomm: Kueue Topology ({' > '.join(kd['levels'])}) over labels the nodes carry already "
                "(kubectl apply -f)\n")
    return head + yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False)


# ============================================================================================
# Fleet on Kubernetes: a DaemonSet that probes each GPU node and publishes labels through NFD
# (gpucomm fleet manifest / gpucomm fleet labels)
GFD_PREFIX = "nvidia.com/"
GPU_NODE_LABELS = (("nvidia.com/gpu.present", "true"), ("feature.node.kubernetes.io/pci-10de.present", "true"))
"""What marks a GPU node: GPU Feature Discovery's label, or NFD's PCI vendor label for NVIDIA (0x10de)."""


def gfd_labels(doc) -> Dict[str, str]:
    """The labels GPU Feature Discovery would give this node, under GFD's own names (``nvidia.com/gpu.count``,
    ``gpu.product``, ``gpu.memory`` in MiB, ``gpu.compute.major/minor``, ``gpu.family``, ``gpu.clique``
    = ``<cluster UUID>.<clique ID>``), for the attributes gpucomm knows."""
    topo = Topology.of(doc)
    gpus = [g for g in topo.gpus if g.vendor == "nvidia"]
    out: Dict[str, str] = {}
    if not gpus:
        return out
    out["nvidia.com/gpu.present"] = "true"
    out["nvidia.com/gpu.count"] = str(len(gpus))
    names = sorted({g.name or "" for g in gpus})
    if len(names) == 1 and names[0]:
        out["nvidia.com/gpu.product"] = label_value(names[0])
    mems = [g.memory_bytes for g in gpus]
    if all(m is not None and m > 0 for m in mems):
        out["nvidia.com/gpu.memory"] = str(min(mems) // 2**20)
    ccs = sorted({facts.format_compute_capability(g.sm) for g in gpus if g.sm_source == "record"})
    if len(ccs) == 1:
        major, minor = ccs[0].split(".")
        out["nvidia.com/gpu.compute.major"], out["nvidia.com/gpu.compute.minor"] = major, minor
    archs = sorted({g.reported_arch for g in gpus if g.reported_arch})
    if len(archs) == 1:
        out["nvidia.com/gpu.family"] = label_value(archs[0])
    clique = gpu_clique_label(topo)
    if clique:
        out[GFD_CLIQUE] = label_value(clique)
    return out


def fleet_labels(doc, locality: Optional[Dict[str, str]] = None, gfd: bool = True) -> Dict[str, str]:
    """This node's labels for NFD: gpucomm's (:func:`node_labels`), GFD's names where they overlap
    (:func:`gfd_labels`, unless ``gfd`` is False because GFD itself runs) and its locality
    ({kind: id}: leaf, spine, block, nvlink-domain) as the label values Kueue levels use."""
    out = dict(node_labels(doc))
    if gfd:
        out.update(gfd_labels(doc))
    else:   # GFD runs and owns its names (node_labels gives nvidia.com/gpu.clique, as GFD does)
        out = {k: v for k, v in out.items() if not k.startswith(GFD_PREFIX)}
    for kind, value in (locality or {}).items():
        out[locality_label(kind)] = label_value(value)
    return dict(sorted(out.items()))


def feature_file(labels: Dict[str, str], host: str) -> str:
    """An NFD features.d file (``name=value`` per line)."""
    lines = [f"# Node Feature Discovery feature file for {host}, written by gpucomm fleet labels"]
    return "\n".join(lines + [f"{k}={v}" for k, v in labels.items()]) + "\n"


def fleet_manifest(image: str, install: Optional[str], namespace: str = "gpucomm", interval_s: int = 3600,
                   locality: Optional[Dict[str, Dict[str, str]]] = None, gfd: bool = True,
                   runtime_class: Optional[str] = "nvidia") -> List[dict]:
    """Kubernetes objects: a Namespace, a ConfigMap of each node's locality (when a fabric is known)
    and a DaemonSet on GPU nodes only that runs ``gpucomm fleet labels`` every ``interval_s``: host
    /sys read-only (probed with --sysfs-root), NVML from the driver (the NVIDIA container runtime
    mounts it: NVIDIA_VISIBLE_DEVICES=all, utility capability, no GPU requested), the labels written
    atomically into NFD's features.d on the host."""
    import json

    labels = {"app.kubernetes.io/name": "gpucomm-fleet", "app.kubernetes.io/component": "node-labeller"}
    run = ["gpucomm", "fleet", "labels", "--sysfs-root", "/host", "--node", "$(NODE_NAME)",
           "-o", f"{NFD_DIR}/gpucomm", "--force"]
    if locality:
        run += ["--locality", "/etc/gpucomm/locality.json"]
    if not gfd:
        run.append("--no-gfd-names")
    script = ("set -e\n" + (f"pip install --no-cache-dir --quiet '{install}'\n" if install else "")
              + "while true; do\n  " + " ".join(a if a.startswith("$(") else f"'{a}'" if " " in a else a for a in run)
              .replace("$(NODE_NAME)", '"$NODE_NAME"') + f" || echo 'gpucomm fleet labels failed'\n  sleep {int(interval_s)}\ndone\n")
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": k, "operator": "In", "values": [v]}]} for k, v in GPU_NODE_LABELS]}}}
    volumes = [{"name": "host-sys", "hostPath": {"path": "/sys", "type": "Directory"}},
               {"name": "host-cpuinfo", "hostPath": {"path": "/proc/cpuinfo", "type": "File"}},
               {"name": "features-d", "hostPath": {"path": NFD_DIR, "type": "DirectoryOrCreate"}}]
    mounts = [{"name": "host-sys", "mountPath": "/host/sys", "readOnly": True},
              {"name": "host-cpuinfo", "mountPath": "/host/proc/cpuinfo", "readOnly": True},
              {"name": "features-d", "mountPath": NFD_DIR}]
    if locality:
        volumes.append({"name": "locality", "configMap": {"name": "gpucomm-locality"}})
        mounts.append({"name": "locality", "mountPath": "/etc/gpucomm", "readOnly": True})
    pod: dict = {
        "affinity": affinity,
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "priorityClassName": "system-node-critical",
        "containers": [{
            "name": "gpucomm",
            "image": image,
            "command": ["/bin/sh", "-c", script],
            "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                    {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"}],
            "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}},
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            "volumeMounts": mounts}],
        "volumes": volumes,
    }
    if runtime_class:
        pod["runtimeClassName"] = runtime_class
    objs: List[dict] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}]
    if locality:
        objs.append({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "gpucomm-locality", "namespace": namespace, "labels": labels},
                     "data": {"locality.json": "{\n" + ",\n".join(
                         f"{json.dumps(h)}: {json.dumps(locality[h], sort_keys=True)}" for h in sorted(locality)) + "\n}\n"}})
    objs.append({"apiVersion": "apps/v1", "kind": "DaemonSet",
                 "metadata": {"name": "gpucomm-fleet", "namespace": namespace, "labels": labels},
                 "spec": {"selector": {"matchLabels": labels},
                          "updateStrategy": {"type": "RollingUpdate"},
                          "template": {"metadata": {"labels": labels}, "spec": pod}}})
    return objs


def fleet_manifest_yaml(objs: List[dict]) -> str:
    """The objects as one YAML stream (multi-line strings -- the script, the locality -- as ``|`` blocks)."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper, data):
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|" if "\n" in data else None)

    Dumper.add_representer(str, text)
    Dumper.ignore_aliases = lambda self, data: True     # no &id001 anchors: plain YAML for people
    head = ("# gpucomm fleet manifest: label every GPU node with its GPUs, NVLink domain and fabric locality through\n"
            "# Node Feature Discovery's features.d (nfd-worker must run; kubectl apply -f this file)\n")
    return head + yaml.dump_all(objs, Dumper=Dumper, sort_keys=False, default_flow_style=False)
