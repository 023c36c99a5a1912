"""Kubernetes node labels, as users get them, -> the nodes and their labels (docs/FABRIC.md,
"Kubernetes node labels"):

* ``kubectl get nodes -o json`` / ``-o yaml``: a NodeList (or ``kind: List``) or one Node;
  ``metadata.name`` and ``metadata.labels``;
* ``kubectl describe node[s]`` text: each ``Name:`` and its ``Labels:`` block (continuation lines
  indented by spaces or tabs, up to the next ``Field:``); an elision (``...``, ``…``) is a warning;
* plain ``key=value`` lines (GPU Feature Discovery's features.d file, a curated list, a ``grep`` of
  describe's output) or ``key: value`` lines (an excerpt of ``metadata.labels``): one node, named by
  ``kubernetes.io/hostname`` when it is there (else a warning says the name is unknown); lines that
  are no label (a shell prompt, describe's other fields) are skipped, counted in a warning.

A DRA ResourceSlice, or any other Kubernetes object, is refused with one line saying what it is.
The record: ``{"format", "nodes": [{"name", "labels", "line"}], "warnings"}``; which labels make a
switch tree is :func:`gpucomm.probes.fabric.fabric_from_k8s`'s business (:data:`HIERARCHIES`).
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

from gpucomm.probes.errors import InputError
from gpucomm.probes.limits import MAX_HOSTS, MAX_WARNINGS

CLIQUE_LABEL = "nvidia.com/gpu.clique"          # GPU Feature Discovery: <clusterUUID>.<cliqueId>
HOSTNAME_LABEL = "kubernetes.io/hostname"       # the kubelet's own
# The network hierarchies clouds label nodes with: (provider, label keys from the most specific up).
HIERARCHIES: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("oci", ("oci.oraclecloud.com/rdma.local_block_id", "oci.oraclecloud.com/rdma.network_block_id",
             "oci.oraclecloud.com/rdma.hpc_island_id")),
    ("gke", ("cloud.google.com/gce-topology-host", "cloud.google.com/gce-topology-subblock",
             "cloud.google.com/gce-topology-block")),
    ("aws", ("topology.k8s.aws/network-node-layer-3", "topology.k8s.aws/network-node-layer-2",
             "topology.k8s.aws/network-node-layer-1")),
)
# Labels that name the physical machine a node runs on, not a switch: a level of the tree only where
# some machine holds several nodes (one node a machine says nothing kubernetes.io/hostname does not).
MACHINE_LABELS = ("cloud.google.com/gce-topology-host",)
OCI_CLUSTER_LABEL = "oci.oraclecloud.com/rdma.cluster_id"   # RDMA does not cross OCI compute clusters
EXPECTED = ("Kubernetes node labels: `kubectl get nodes -o json|yaml`, `kubectl describe nodes` output, "
            "or key=value label lines")
MAX_LABELS = 4096                                # labels a node (real nodes carry a few hundred)

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_EQ_LINE = re.compile(r"^[ \t]*([^\s=]+)=(\S*)[ \t]*$")
_COLON_LINE = re.compile(r"^[ \t]*([^\s:]+(?::[^\s:]+)?):[ \t]+[\"']?([^\s\"']*)[\"']?[ \t]*$")
_FIELD = re.compile(r"^[ \t]*[A-Z][A-Za-z ]*:(?:[ \t]|$)")
_DESCRIBE_NAME = re.compile(r"^[ \t]*Name:[ \t]+(\S+)[ \t]*$")
_DESCRIBE_LABELS = re.compile(r"^[ \t]*Labels:(?:[ \t]+(.*?))?[ \t]*$")
_ELISION = re.compile(r"^[ \t]*(?:\u2026+\.*|\.{3,}|\u2026?\.{2,}\u2026?)[ \t]*$")
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,62}$")      # a host name the fabric document takes
_OBJECT_HEAD = re.compile(r"^(apiVersion|kind|items|metadata):", re.M)


def check_label(key: str, value: str) -> Optional[str]:
    """None when ``key=value`` is a valid Kubernetes label, else why not.

    >>> check_label("nvidia.com/gpu.clique", "a2221497-dbce-4964-8826-684c3694fd45.2478") is None
    True
    >>> check_label("Taints:", "x")
    "label name 'Taints:' is not 1-63 characters of [A-Za-z0-9_.-] with alphanumeric ends"
    """
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _PREFIX.match(prefix)):
        return f"label prefix {prefix!r} is not a DNS subdomain"
    if not _NAME.match(name):
        return f"label name {name!r} is not 1-63 characters of [A-Za-z0-9_.-] with alphanumeric ends"
    if not _VALUE.match(value):
        return f"label value {value!r} is not 0-63 characters of [A-Za-z0-9_.-] with alphanumeric ends"
    return None


def is_label(key: str, value: str) -> bool:
    """A valid Kubernetes label (:func:`check_label`)."""
    return check_label(key, value) is None


def looks_like(text: str) -> Optional[str]:
    """``kubectl-describe``, ``kubectl-object`` (JSON/YAML of a Kubernetes object) or ``label-lines``
    when ``text`` is one of those, else None.  Label lines count only when most meaningful lines are
    labels and one of them has a prefix (``nvidia.com/``, ``cloud.google.com/``, ...)."""
    head = text.lstrip("\ufeff \t\r\n")[:65536]
    if head.startswith("{"):
        return "kubectl-object" if re.search(r'"kind"\s*:\s*"[A-Z]', head) and '"apiVersion"' in head else None
    if _OBJECT_HEAD.search(head) and re.search(r"^kind:\s*[A-Z]\w*\s*$", head, re.M) \
            or re.match(r"apiVersion:\s*\S+\s*\n(?:.*\n)*?items:", head):
        return "kubectl-object"
    lines = [l for l in head.splitlines()[:5000] if l.strip()]
    if any(_DESCRIBE_LABELS.match(l) for l in lines) and any(_label_of(l) for l in lines):
        return "kubectl-describe"
    labels = [p for p in map(_label_of, lines) if p]
    if labels and any("/" in k for k, _ in labels) and 2 * len(labels) >= len(lines):
        return "label-lines"
    return None


def _label_of(line: str, colon: bool = True) -> Optional[Tuple[str, str]]:
    m = _EQ_LINE.match(line) or (_COLON_LINE.match(line) if colon else None)
    if m and is_label(m.group(1), m.group(2)):
        return m.group(1), m.group(2)
    return None


class _Nodes:
    """The nodes read so far, bounded, with the warnings."""

    def __init__(self, path: str):
        self.path = path
        self.nodes: Dict[str, dict] = {}
        self.warnings: List[str] = []

    def warn(self, message: str) -> None:
        if len(self.warnings) < MAX_WARNINGS:
            self.warnings.append(message)

    def add(self, name: Optional[str], labels: Dict[str, str], line: Optional[int]) -> None:
        where = f" (line {line})" if line else ""
        if name is None:
            name = labels.get(HOSTNAME_LABEL)
            if name is None:
                name = "unnamed-node"
                self.warn(f"the node's name is not in this file (no Name:, metadata.name or {HOSTNAME_LABEL} "
                          f"label){where}: it is called {name!r}")
        if not _HOST.match(name):
            self.warn(f"node {name[:80]!r}{where} is skipped: not a host name a switch tree can hold "
                      "(letters, digits, '.', '_', '-'; at most 63 characters)")
            return
        if len(labels) > MAX_LABELS:
            raise InputError(f"node {name!r} has {len(labels)} labels, more than the limit of {MAX_LABELS}",
                             self.path, line)
        if name in self.nodes:
            self.warn(f"node {name!r} is listed twice{where}: the last one is kept")
        elif len(self.nodes) >= MAX_HOSTS:
            raise InputError(f"more than {MAX_HOSTS} nodes", self.path, line)
        self.nodes[name] = {"name": name, "labels": dict(labels), "line": line}

    def record(self, fmt: str) -> dict:
        if not self.nodes:
            raise InputError("no node labels found", self.path, expected=EXPECTED)
        return {"format": fmt, "nodes": list(self.nodes.values()), "warnings": self.warnings}


def read_node_labels(text: str, path: str) -> dict:
    """Any of the module docstring's forms -> ``{"format", "nodes", "warnings"}``; InputError (one
    line naming ``path``) for anything else."""
    reader = {"kubectl-object": _from_object, "kubectl-describe": _from_describe,
              "label-lines": _from_lines}.get(looks_like(text) or "")
    if reader is None:
        raise InputError("no Kubernetes node labels recognised", path, expected=EXPECTED)
    return reader(text, path)


def _from_object(text: str, path: str) -> dict:
    from gpucomm.probes.parse import parse_json, parse_yaml

    stripped = text.lstrip("\ufeff \t\r\n")
    obj = parse_json(text, path, EXPECTED) if stripped.startswith("{") else parse_yaml(text, path, EXPECTED)
    if not isinstance(obj, dict):
        raise InputError(f"the document is a {type(obj).__name__}, not a Kubernetes object", path, expected=EXPECTED)
    items = obj.get("items") if "items" in obj else [obj]
    if not isinstance(items, list):
        raise InputError("items is not a list", path, expected=EXPECTED)
    out = _Nodes(path)
    fmt = "kubectl-json" if stripped.startswith("{") else "kubectl-yaml"
    others: Dict[str, List[str]] = {}
    for i, it in enumerate(items):
        kind = it.get("kind") if isinstance(it, dict) else None
        meta = it.get("metadata") if isinstance(it, dict) else None
        if kind not in (None, "Node") or not isinstance(meta, dict):
            others.setdefault(_what(it), []).append(str(i))
            continue
        labels = meta.get("labels") or {}
        name = meta.get("name")
        if not isinstance(labels, dict) or not isinstance(name, (str, type(None))):
            others.setdefault("a Node whose metadata.name or metadata.labels is malformed", []).append(str(i))
            continue
        good = {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str) and is_label(k, v)}
        if len(good) < len(labels):
            out.warn(f"node {str(name)[:80]!r}: {len(labels) - len(good)} label(s) that are not valid Kubernetes "
                     "labels skipped")
        out.add(name, good, None)
    if not out.nodes:
        what = "; ".join(sorted(others)) or "an empty list"
        raise InputError(f"this is {what}, not node labels", path, expected=EXPECTED)
    for what, idx in sorted(others.items()):
        out.warn(f"item(s) {', '.join(idx[:10])}{' ...' if len(idx) > 10 else ''} skipped: {what}, not a Node")
    return out.record(fmt)


def _what(it) -> str:
    """What a Kubernetes object that is not a Node is, in words."""
    if not isinstance(it, dict):
        return f"a {type(it).__name__}"
    kind, api = it.get("kind"), it.get("apiVersion")
    spec = it.get("spec") if isinstance(it.get("spec"), dict) else {}
    if kind == "ResourceSlice":
        return (f"a DRA ResourceSlice ({api or 'resource.k8s.io'}, driver {spec.get('driver') or '?'}, node "
                f"{spec.get('nodeName') or '?'}): the devices a DRA driver publishes")
    return f"a Kubernetes {kind or 'object without kind'}" + (f" ({api})" if api else "")


def _from_describe(text: str, path: str) -> dict:
    out = _Nodes(path)
    name: Optional[str] = None
    name_line: Optional[int] = None
    labels: Dict[str, str] = {}
    in_labels, started = False, False
    skipped: List[int] = []

    def flush() -> None:
        if started:
            out.add(name, labels, name_line)

    for no, line in enumerate(text.splitlines(), 1):
        m = _DESCRIBE_NAME.match(line)
        if m:
            flush()
            name, name_line, labels, in_labels, started = m.group(1), no, {}, False, True
            continue
        m = _DESCRIBE_LABELS.match(line)
        if m:
            if labels and started:        # a second Labels: for one Name: -- a new node without a name
                flush()
                name, name_line, labels = None, no, {}
            in_labels, started = True, True
            first = (m.group(1) or "").strip()
            if first and first != "<none>":
                got = _label_of(first, colon=False)
                if got:
                    labels[got[0]] = got[1]
                else:
                    skipped.append(no)
            continue
        if not in_labels:
            continue
        if _FIELD.match(line):
            in_labels = False
            continue
        if not line.strip():
            continue
        got = _label_of(line, colon=False)
        if got:
            labels[got[0]] = got[1]
        elif _ELISION.match(line):
            out.warn(f"line {no}: the labels are elided ({line.strip()[:10]!r}): those not shown are unknown")
        else:
            skipped.append(no)
    flush()
    if skipped:
        out.warn(f"{len(skipped)} line(s) in a Labels: block that are not labels skipped (first: line {skipped[0]})")
    return out.record("kubectl-describe")


def _from_lines(text: str, path: str) -> dict:
    out = _Nodes(path)
    lines = text.splitlines()
    eq = [(no, p) for no, p in ((no, _label_of(l, colon=False)) for no, l in enumerate(lines, 1)) if p]
    # describe writes labels as key=value and annotations/capacity as key: value; an excerpt of
    # metadata.labels has key: value only
    pairs = eq or [(no, p) for no, p in ((no, _label_of(l)) for no, l in enumerate(lines, 1)) if p]
    labels: Dict[str, str] = {}
    for no, (k, v) in pairs:
        if k in labels and labels[k] != v:
            out.warn(f"line {no}: {k} is given twice ({labels[k]!r}, then {v!r}): the last is kept")
        labels[k] = v
    used = {no for no, _ in pairs}
    other = [no for no, l in enumerate(lines, 1) if l.strip() and no not in used]
    if other:
        out.warn(f"{len(other)} line(s) that are not labels skipped (first: line {other[0]})")
    out.add(None, labels, pairs[0][0] if pairs else None)
    return out.record("label-lines")


__all__ = ["CLIQUE_LABEL", "HOSTNAME_LABEL", "HIERARCHIES", "OCI_CLUSTER_LABEL", "MACHINE_LABELS", "MAX_LABELS", "check_label", "is_label",
           "looks_like", "read_node_labels"]
