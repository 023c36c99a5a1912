"""NCCL topology XML: import (``NCCL_TOPO_FILE`` skeletons, ``NCCL_TOPO_DUMP_FILE`` dumps, and
``NCCL_GRAPH_FILE`` graph files) and export in NCCL's own strict format.

Reference: NVIDIA/nccl 2.30 (``src/graph/xml.cc``, ``topo.cc``, ``search.cc``).

Import builds a topology document the way NCCL builds its graph from the XML
(``ncclTopoGetSystemFromXml``, topo.cc):

* ``<cpu numaid affinity arch vendor familyid modelid>`` -> a NUMA node (cpus from the hex
  ``affinity`` mask; memory unknown) and the graph node ``CPU<numaid>``.
* ``<pci>`` typed like NCCL's ``kvDictPciClass`` (prefix match on ``class``): a ``<gpu>`` child
  makes it a GPU, a ``<nic>`` child a NIC; ``0x0604*`` bridges (and any node with ``<pci>``
  children) become ``pcie`` switch records (id = busid, parent = parent busid or ``CPU<n>``).
  Bare ``<pci>`` GPUs/NICs of static skeletons (class ``0x03*``/``0x02*``, no children) become
  GPUs whose index is inferred (PCI bus order, which is NVML's order; see :func:`_assign_indices`)
  and NICs named by their busid.  Leaves NCCL cannot type (no class, e.g. AWS skeletons) are kept
  in ``pci_devices`` (role ``other``) so that export reproduces the skeleton.
* ``<nvlink target count tclass>``: GPU targets (``0x03*``) -> one GPU-GPU link per pair (NCCL
  writes one element per side); CPU targets (``0x068001``, Power9) -> GPU-CPU link; anything else
  (``0x068000`` NVSwitch, unreadable targets, the ``fffffff:ff:ff.0`` / ``fffffff:ffff:ff``
  sentinels) -> a GPU-NVSwitch link to one ``nvswitch`` record per distinct target (``NVS`` for
  the sentinel).  bw = count * ``nvlink_bw_per_link(sm)``.
* ``<nic><net name dev speed port guid .../></nic>`` -> one NIC record per net name (ports
  ``ACTIVE`` at ``speed``/1000 Gb/s; ``guid`` converted to the sysfs spelling, see
  :func:`guid_from_nccl`); several NICs under one ``<pci>`` (NCCL's multi-port merge) get their own
  PCI functions (:func:`_split_nic_functions`).  A ``<nic>`` straight under ``<cpu>`` is a socket
  NIC (``eth0``) whose parent is ``CPU<n>``.
* ``<c2c bw count>`` -> ``c2c`` link GPU->CPU, bw = bw*count/1000 GB/s (topo.cc ncclTopoAddC2c).
* ``pcie`` links child->parent for GPUs, NICs and switches with NCCL's bw (``width*lane/80``,
  :func:`gpucomm.probes.facts.pcie_bw_GBps`; untyped ``pci_devices`` keep gen/width but get no link, as they
  are not graph nodes),
  ``smp`` links between every pair of CPUs with ``ncclTopoGetInterCpuBw``; ``<pcilink>`` (Broadcom
  virtual switch links) -> a ``pcie`` link between the two switches with NCCL's LOC bandwidth 5000
  (marked ``pcilink: true``; it is not a tree edge).
* Broadcom PEX switch flattening exactly as NCCL (:func:`flatten_bcm`), then the matrix from the
  tree (:func:`gpucomm.probes.matrix.compute_matrix`).  NCCL has no host bridges, so NODE never appears: a
  common CPU is PHB.

Extra fields written (all optional in the schema), named like the sysfs probe's where they overlap:
switches carry ``class``, ``vendor``, ``device``, ``subsystem_vendor``, ``subsystem_device`` (hex
strings) and ``gen``/``width`` of their upstream link; GPUs and NICs carry the same ids in a nested
``pci_ids`` (a GPU's ``vendor`` is already "nvidia"/"amd"), GPUs ``sm``/``gdr``/``nccl_rank``
(``index_inferred`` when the file had no ``dev``), NICs ``nccl_dev``/``gdr``/``nccl_attrs``/``pcie``;
NUMA nodes ``arch``/``vendor``/``familyid``/``modelid``; flattened switches ``bcm_gen``/``bcm_merged``,
devices that flattening moved ``raw_parent``.  The top-level ``pci_devices`` list has one entry per
``<pci>`` element ({bdf, class, vendor, device, subsystem_vendor, subsystem_device, numa_node, role,
parent, gen, width}), as the sysfs probe lists every PCI function.

Parsing uses defusedxml (no DTDs, no entities, no external references).  We accept everything
NCCL's own minimal parser accepts (comments anywhere, single-quoted values, unknown elements) and
more (an ``<?xml?>`` header, tabs, attributes over several lines, several top-level elements).
"""
from __future__ import annotations

import re
from typing import Any, Optional

from gpucomm.probes import facts
from gpucomm.probes.errors import InputError, TopologyError
from gpucomm.probes.facts import PCI_GT_TO_GEN, nvlink_bw_per_link, pcie_bw_GBps
from gpucomm.probes.limits import MAX_GPUS, MAX_NICS, MAX_NVLINKS
from gpucomm.probes.model import (NCCL_PCI_CLASSES, GraphPattern, cpu_id, cpulist_to_mask, cpumask_to_list, finalize,
                                  format_cpulist, gpu_record, host_of, is_sentinel_bus_id, link_record, nccl_kv,
                                  new_document, nic_record, normalize_bus_id, parse_cpulist, source_record,
                                  switch_record, warn)

# --------------------------------------------------------------------------------------------
# NCCL constants (topo.h / topo.cc)
LOC_BW = facts.LOC_BW    # LINK_LOC: pcilink, NIC directly under a CPU

# kvDictPciClass (topo.cc): prefix match, first hit wins, anything else is a PCI node.
_PCI_CLASS_TYPES = NCCL_PCI_CLASSES

# Sentinel NCCL >= 2.30 writes for an NVLink peer it cannot see (older dumps: fffffff:ff:ff.0).
NVS_SENTINEL = "fffffff:ffff:ff"

# Graph files (graph.h): pattern numbers and graph ids.
GRAPH_PATTERNS = {int(p): p.name for p in GraphPattern}
GRAPH_IDS = {0: "ring", 1: "tree", 2: "collnet_chain", 3: "nvls", 4: "collnet_direct"}

# NCCL's parser: names <= 254 chars, values <= 253 chars (MAX_STR_LEN 255 incl. terminator and quote,
# xml.cc xmlGetToken/xmlGetValue).
MAX_NAME_LEN = 254
MAX_VALUE_LEN = 253

_MAX_DEPTH = 256          # NCCL_TOPO_XML_DEPTH_MAX; real files are < 10 deep
_MAX_ELEMENTS = 200_000   # NCCL stops at 256 nodes per host; we are generous but bounded
_ROOT = "gpucomm-xml-root"


# --------------------------------------------------------------------------------------------
# XML reading (defusedxml, with element line numbers)
class _Node:
    __slots__ = ("tag", "attrs", "children", "line")

    def __init__(self, tag: str, attrs: dict, line: int):
        self.tag = tag
        self.attrs = attrs
        self.children: list[_Node] = []
        self.line = line

    def sub(self, tag: str) -> list["_Node"]:
        return [c for c in self.children if c.tag == tag]

    def first(self, tag: str) -> Optional["_Node"]:
        for c in self.children:
            if c.tag == tag:
                return c
        return None


class _Builder:
    """Target for defusedxml's parser: builds :class:`_Node` trees with line numbers."""

    def __init__(self, path: Optional[str]):
        self.path = path
        self.parser: Any = None
        self.stack = [_Node(_ROOT, {}, 1)]
        self.count = 0
        self.devices: dict = {}
        self.text_line: Optional[int] = None

    def _line(self) -> int:
        try:
            return int(self.parser.parser.CurrentLineNumber)
        except (AttributeError, TypeError, ValueError):  # pragma: no cover - defusedxml internals
            return 0

    def start(self, tag: str, attrs: dict) -> None:
        if self.count == 0 and tag == _ROOT:
            self.count = 1  # the synthetic wrapper is the stack's root
            return
        self.count += 1
        if len(self.stack) > _MAX_DEPTH:
            raise InputError(f"elements nested more than {_MAX_DEPTH} deep", self.path, self._line())
        if self.count > _MAX_ELEMENTS:
            raise InputError(f"more than {_MAX_ELEMENTS} elements", self.path, self._line())
        if tag in ("gpu", "net") and self.stack[-1].tag != "channel":  # devices of a <system>, not a graph's
            self.devices[tag] = self.devices.get(tag, 0) + 1
            limit = MAX_GPUS if tag == "gpu" else MAX_NICS
            if self.devices[tag] > limit:
                raise InputError(f"more than {limit} <{tag}> devices, the limit per node", self.path, self._line(),
                                 expected=f"at most {limit} per node (docs/LIMITS.md)")
        node = _Node(tag, {str(k): str(v) for k, v in dict(attrs).items()}, self._line())
        self.stack[-1].children.append(node)
        self.stack.append(node)

    def end(self, tag: str) -> None:
        if len(self.stack) > 1:
            self.stack.pop()

    def data(self, text: str) -> None:
        if self.text_line is None and text.strip():
            self.text_line = self._line()

    def close(self) -> _Node:
        return self.stack[0]


# the source detail of an XML NCCL did not write itself (a provider's NCCL_TOPO_FILE for its VMs)
STATIC_SKELETON = "static skeleton (NCCL_TOPO_FILE)"

def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _blank(segment: str) -> str:
    """Replace a segment by spaces, keeping newlines so line numbers stay right."""
    return re.sub(r"[^\n]", " ", segment)


def _blank_comments(text: str, path: Optional[str]) -> str:
    """Remove ``<!-- ... -->`` the way NCCL does (xmlSkipComment: up to the first ``-->``), which is
    more lenient than XML (``--`` inside a comment is fine)."""
    out: list[str] = []
    i = 0
    while True:
        j = text.find("<!--", i)
        if j < 0:
            out.append(text[i:])
            break
        k = text.find("-->", j + 4)
        if k < 0:
            raise InputError("unterminated comment", path, _line_of(text, j), expected="-->")
        out.append(text[i:j])
        out.append(_blank(text[j:k + 3]))
        i = k + 3
    return "".join(out)


def _read_xml(text: str, path: Optional[str]) -> _Node:
    """Parse XML text into a :class:`_Node` tree under a synthetic root.  Raises InputError."""
    from xml.etree.ElementTree import ParseError

    from defusedxml import DefusedXmlException
    from defusedxml.ElementTree import DefusedXMLParser

    if not isinstance(text, str):
        raise InputError("not text", path, expected="an NCCL topology XML")
    text = text.lstrip("\ufeff")
    text = _blank_comments(text, path)
    m = re.match(r"\s*<\?xml\b.*?\?>", text, re.S)
    if m:
        text = _blank(text[:m.end()]) + text[m.end():]
    m = re.search(r"<!\s*(DOCTYPE|ENTITY)", text, re.I)
    if m:
        raise InputError(f"XML with a <!{m.group(1).upper()}> declaration is not accepted", path, _line_of(text, m.start()),
                         expected="a plain NCCL topology XML without DTD or entities")
    builder = _Builder(path)
    parser = DefusedXMLParser(target=builder, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    builder.parser = parser
    try:
        # The synthetic root lets several top-level elements through (NCCL reads any number and
        # ignores all but <system>); it sits on line 1 so reported line numbers are unchanged.
        parser.feed(f"<{_ROOT}>")
        parser.feed(text)
        parser.feed(f"</{_ROOT}>")
        root = parser.close()
    except ParseError as e:
        line = (getattr(e, "position", None) or (None, None))[0]
        msg = re.sub(r":\s*line \d+, column \d+\s*$", "", str(e)) or "malformed XML"
        raise InputError(f"malformed XML: {msg}", path, line, expected="well-formed NCCL topology XML") from None
    except DefusedXmlException:
        raise InputError("XML declares a DTD, entities or external references, which are not accepted", path,
                         expected="a plain NCCL topology XML") from None
    except (ValueError, UnicodeError) as e:
        raise InputError(f"malformed XML: {' '.join(str(e).split())[:120]}", path) from None
    if builder.text_line is not None:
        root.attrs["_text_line"] = str(builder.text_line)
    return root


# --------------------------------------------------------------------------------------------
# Small value parsers
def _int(value: Optional[str]) -> Optional[int]:
    """NCCL-style integer: decimal or 0x-hex; None when absent or junk."""
    if value is None:
        return None
    s = str(value).strip()
    if not s:
        return None
    try:
        if re.fullmatch(r"[-+]?0[xX][0-9a-fA-F]+", s):
            return int(s, 16)
        if re.fullmatch(r"[-+]?\d+", s):
            return int(s, 10)
    except ValueError:  # pragma: no cover - regex guarantees digits
        return None
    return None


def _float(value: Optional[str]) -> Optional[float]:
    if value is None:
        return None
    try:
        f = float(str(value).strip())
    except ValueError:
        return None
    return f if f == f and f not in (float("inf"), float("-inf")) else None


def pci_class_type(cls: Optional[str]) -> Optional[str]:
    """NCCL's node type for a PCI class string (kvDictPciClass, prefix match): PCI, NVS, CPU, GPU, NIC."""
    if cls is None:
        return None
    return nccl_kv(cls.strip().lower(), _PCI_CLASS_TYPES, "PCI")


def parse_link_speed(value: Optional[str]) -> tuple[Optional[int], bool]:
    """``link_speed`` -> (PCIe generation or None, whether NCCL's own table matched).

    NCCL prefix-matches its table (so ``"32 GT/s PCIe/s"`` is Gen5); strings it does not know
    (e.g. ``"16.0 GT/s"`` without "PCIe") make NCCL assume 8 GT/s lanes -- we read the number
    anyway and report the mismatch."""
    if value is None or not str(value).strip():
        return None, True
    s = str(value)
    lane = nccl_kv(s, facts.NCCL_PCI_GEN_SPEEDS, None)
    if lane is not None:
        return facts.pcie_gen_of_lane(lane), True
    m = re.match(r"\s*(\d+(?:\.\d+)?)\s*GT/s", s, re.I)
    if m:
        return PCI_GT_TO_GEN.get(float(m.group(1))), False
    return None, False


_ID_KEYS = ("class", "vendor", "device", "subsystem_vendor", "subsystem_device")


def _flat_ids(ids: dict) -> dict:
    return {k: ids.get(k) for k in _ID_KEYS}


def switch_ids(rec: dict) -> dict:
    """PCI ids of a switch / pci_devices record: flat fields (sysfs probe and this module) or a
    nested ``pci_ids`` dict."""
    nested = rec.get("pci_ids") if isinstance(rec.get("pci_ids"), dict) else {}
    out = {}
    for k in _ID_KEYS:
        v = nested.get(k) if nested.get(k) is not None else rec.get(k)
        if isinstance(v, str) and v.strip():
            out[k] = v.strip().lower()
    return out


def guid_from_nccl(value: Optional[str]) -> Optional[str]:
    """NCCL's net ``guid`` -> sysfs spelling.  NCCL prints ibverbs' big-endian ``sys_image_guid`` as a
    host (little-endian) integer (net_ib/init.cc, xml ``0x%lx``), so the bytes come out reversed:
    ``0x9a70500003ae6d94`` is ``946d:ae03:0050:709a`` (Mellanox OUI 94:6d:ae).  0 (socket NICs) -> None."""
    v = _int(value)
    if v is None or v <= 0 or v >= 1 << 64:
        return None
    b = v.to_bytes(8, "little").hex()
    return ":".join(b[i:i + 4] for i in range(0, 16, 4))


def guid_to_nccl(value: Optional[str]) -> Optional[str]:
    """Inverse of :func:`guid_from_nccl`; an already hex (``0x...``) value is kept."""
    if not value:
        return None
    s = str(value).strip().lower()
    if re.fullmatch(r"0x[0-9a-f]{1,16}", s):
        return f"0x{int(s, 16):x}"
    if re.fullmatch(r"[0-9a-f]{4}(:[0-9a-f]{4}){3}", s):
        return f"0x{int.from_bytes(bytes.fromhex(s.replace(':', '')), 'little'):x}"
    return None


def _pci_ids(attrs: dict) -> dict:
    out = {}
    for k in _ID_KEYS:
        v = attrs.get(k)
        if v is not None and str(v).strip():
            out[k] = str(v).strip().lower()
    return out


# --------------------------------------------------------------------------------------------
# Import
class _Ctx:
    def __init__(self, path: Optional[str]):
        self.path = path
        self.doc = new_document(provenance="nccl-xml")
        self.cpus: dict[int, dict] = {}          # numaid -> cpu info (attrs)
        self.seen_pci: set[str] = set()
        self.gpus: list[dict] = []               # pending GPUs (index assigned later)
        self.nic_by_bus: dict[str, list[dict]] = {}
        self.nic_names: set[str] = set()
        self.pcilinks: list[tuple[str, str, int]] = []
        self.bare_gpus = 0
        self.unclassified = 0
        self.speed_warned: set[str] = set()
        self.ignored: dict[str, int] = {}
        self.host_hashes: set[str] = set()
        self.dump = False
        self.mlopart: list[tuple[str, list]] = []  # (busid, CUDA devs) of GPUs split by MLOPart
        self.nonuma_apart = False                # a <cpu numaid=-1> beside real NUMA nodes stays its own CPU

    def cpu_key(self, numaid: int) -> str:
        """The graph node of the XML's ``<cpu numaid>``: ``CPU<n>``; numaid -1 is the document's CPU0 (a VM's
        one CPU, as everywhere) unless the XML also has CPUs with NUMA nodes -- then it is ``CPU-1``, a CPU
        of its own, as NCCL keeps it (xml.cc: devices whose sysfs numa_node is -1, e.g. a Grace tray's NICs)."""
        if numaid < 0 and self.nonuma_apart:
            return "CPU-1"
        return cpu_id(numaid)

    def where(self, line: Optional[int]) -> str:
        return f"line {line}" if line else "?"

    def ignore(self, node: _Node, under: str) -> None:
        self.ignored.setdefault(f"<{node.tag}> under <{under}>", node.line)

    def speed(self, attrs: dict, line: int) -> tuple[Optional[int], Optional[int]]:
        raw = attrs.get("link_speed")
        gen, matched = parse_link_speed(raw)
        if not matched and raw not in self.speed_warned:
            self.speed_warned.add(raw)
            if gen:
                warn(self.doc, f"link_speed {raw!r} ({self.where(line)}) is not in NCCL's table, so NCCL would assume "
                               f"8 GT/s lanes; read as PCIe Gen{gen}")
            else:
                warn(self.doc, f"link_speed {raw!r} ({self.where(line)}) is not a PCIe speed; treated as unknown")
        width = _int(attrs.get("link_width"))
        if width is not None and width <= 0:
            if "width" not in self.speed_warned:
                self.speed_warned.add("width")
                warn(self.doc, f"link_width {attrs.get('link_width')!r} ({self.where(line)}) is not a PCIe width "
                               "(VMs report 0): NCCL counts it as x16; the width is unknown")
            width = None  # NCCL: width 0 (unknown) counts as x16
        return gen, width


def parse_nccl_xml(text: str, path: Optional[str] = None, flatten: bool = True) -> dict:
    """An NCCL topology XML (or graph XML) -> topology document (provenance ``nccl-xml``).

    ``flatten`` applies NCCL's Broadcom switch flattening (default, as NCCL does).  Graph files
    (``<graphs>``) give a document with the graph's GPUs (by dev) and the parsed graph in
    ``doc["nccl_graph"]``.  Bad input raises :class:`InputError` (one line, with the line number)."""
    root = _read_xml(text, path)
    top = next((c for c in root.children if c.tag in ("system", "graphs")), None)
    if top is None:
        first = root.children[0] if root.children else None
        raise InputError(f"root element is <{first.tag}>" if first else "no XML element found", path,
                         first.line if first else None, expected="<system version=\"1\"> or <graphs version=\"1\">")
    if top.tag == "graphs":
        return _graph_document(_graph_from_node(top, path), path)
    return _system_document(root, top, path, flatten)


def _top_level_notes(root: _Node, system: _Node, ctx: _Ctx) -> None:
    doc = ctx.doc
    version = system.attrs.get("version")
    if _int(version) != 1:
        warn(doc, f"<system version={version!r}> ({ctx.where(system.line)}): NCCL only loads version 1; read anyway")
    if "_text_line" in root.attrs:
        warn(doc, f"text between elements (line {root.attrs['_text_line']}) ignored; NCCL's parser rejects it")
    others = [c.tag for c in root.children if c is not system]
    if others:
        warn(doc, f"top-level element(s) {sorted(set(others))} ignored (only the first <system> is read)")


def _host_groups(system: _Node) -> list:
    """The ``<cpu>`` elements by host, in the order NCCL numbers hosts (ncclGetSystemId: first
    ``host_hash`` seen = system 0); a ``<cpu>`` without ``host_hash`` is NCCL's hash 0."""
    groups: dict = {}
    for el in system.children:
        if el.tag == "cpu":
            h = (el.attrs.get("host_hash") or "").strip().lower()
            try:
                key = int(h, 16) if h else 0
            except ValueError:
                key = h
            groups.setdefault(key, []).append(el)
    return list(groups.items())


def _system_document(root: _Node, system: _Node, path: Optional[str], flatten: bool) -> dict:
    groups = _host_groups(system)
    if len(groups) > 1:
        return _fused_document(root, system, groups, path, flatten)
    return _one_host(root, system, path, flatten, matrix=True)


def _one_host(root: _Node, system: _Node, path: Optional[str], flatten: bool, matrix: bool) -> dict:
    ctx = _Ctx(path)
    doc = ctx.doc
    if matrix:   # the whole file (a host of a fused file is checked by the file's own read)
        _top_level_notes(root, system, ctx)
    ids = [_int(el.attrs.get("numaid")) for el in system.children if el.tag == "cpu"]
    ctx.nonuma_apart = any(i is None or i < 0 for i in ids) and any(i is not None and i >= 0 for i in ids)
    for el in system.children:
        if el.tag == "cpu":
            _add_cpu(ctx, el)
        else:
            ctx.ignore(el, "system")
    _assign_indices(ctx)
    _split_nic_functions(ctx)
    _add_nvlinks_and_c2c(ctx)
    _add_pcilinks(ctx)
    _add_smp_links(ctx)
    for key, line in sorted(ctx.ignored.items(), key=lambda kv: kv[1]):
        warn(doc, f"ignored {key} (first at line {line})")
    if ctx.mlopart:
        shown = "; ".join(f"{bus}: dev {', '.join('?' if d is None else str(d) for d in devs)}"
                          for bus, devs in ctx.mlopart[:4])
        warn(doc, f"{len(ctx.mlopart)} GPU(s) are split into MLOPart logical GPUs ({shown}"
                  f"{' ...' if len(ctx.mlopart) > 4 else ''}): each is recorded as one physical GPU from its first "
                  "partition (the others are in gpus[].mlopart_devs; their NVLinks are not added)")
    if ctx.bare_gpus:
        warn(doc, f"{ctx.bare_gpus} GPU(s) are bare <pci> entries without <gpu dev>: indices inferred from PCI bus "
                  "order (the order NVML and CUDA_DEVICE_ORDER=PCI_BUS_ID use)")
    if ctx.unclassified:
        warn(doc, f"{ctx.unclassified} PCI device(s) have no class and no children: kept as untyped pci_devices "
                  "(NCCL fills the class from sysfs on the real host)")
    kind = "dump (NCCL_TOPO_DUMP_FILE)" if ctx.dump else STATIC_SKELETON
    doc["sources"].append(source_record("nccl-xml", "ok", f"NCCL topology XML, {kind}"))
    if flatten:
        flatten_bcm(doc)
    if not matrix:
        return doc
    from gpucomm.probes.matrix import compute_matrix

    compute_matrix(doc)
    return _finalize(doc)


def _fused_document(root: _Node, system: _Node, groups: list, path: Optional[str], flatten: bool) -> dict:
    """NCCL's fused XML of several hosts (``NCCL_TOPO_DUMP_FILE`` of a multi-node NVLink clique: each
    rank's XML fused with ncclTopoFuseXml, xml.cc; every ``<cpu>`` keeps its host's ``host_hash``, the
    trays' bus ids repeat) -> one document of several hosts.  Each host is read like a one-host XML;
    host ``h`` > 0 then gets ``host: h`` on its devices and ``h/`` before its graph ids and NIC names
    (:func:`gpucomm.probes.model.host_qualified`), the NVLink targets NCCL cannot see stay one shared
    ``NVS`` (topo.cc: one NVS node for the whole fused system), and the GPUs are numbered by their
    NCCL ``rank`` when every GPU has a distinct one, else host by host (``local_index`` keeps each
    GPU's ``dev``)."""
    from gpucomm.probes.limits import MAX_GPUS
    from gpucomm.probes.model import host_qualified

    if len(groups) > MAX_GPUS:
        raise InputError(f"{len(groups)} hosts in one XML, more than the limit of {MAX_GPUS}", path,
                         expected="one <cpu host_hash> group per host of an NVLink domain")
    outer = _Ctx(path)
    _top_level_notes(root, system, outer)
    doc = outer.doc
    doc["hosts"] = []
    parts = []
    for h, (key, cpus) in enumerate(groups):
        sub = _Node("system", dict(system.attrs), system.line)
        sub.children = cpus
        part = _one_host(root, sub, path, flatten, matrix=False)
        parts.append((h, key, part))
        doc["hosts"].append({"id": h, "hostname": None,
                             "host_hash": f"{key:#x}" if isinstance(key, int) else str(key)})
    gpus = [(h, g) for h, _k, part in parts for g in part["gpus"]]
    ranks = [g.get("nccl_rank") for _h, g in gpus]
    by_rank = all(isinstance(r, int) for r in ranks) and sorted(ranks) == list(range(len(gpus)))
    if len(gpus) > MAX_GPUS:
        raise InputError(f"{len(gpus)} GPUs, more than the limit of {MAX_GPUS}", path,
                         expected=f"at most {MAX_GPUS} GPUs in one NVLink domain (README: Limits)")

    def q(x: Optional[str], h: int) -> Optional[str]:
        return x if x is None or x == "NVS" else host_qualified(x, h)

    nxt = 0
    for h, _key, part in parts:
        for g in sorted(part["gpus"], key=lambda g: g["index"]):
            g["local_index"] = g["index"]
            g["index"] = g["nccl_rank"] if by_rank else nxt
            nxt += 1
            g["host"] = h
            for k in ("parent", "raw_parent"):
                if g.get(k):
                    g[k] = q(g[k], h)
            for nl in g.get("nvlink") or []:
                if nl.get("remote") and nl.get("remote_type") in ("gpu",):
                    nl["remote"] = q(nl["remote"], h)
            doc["gpus"].append(g)
        for n in part["nics"]:
            n["host"] = h
            n["name"] = q(n["name"], h)
            for k in ("parent", "raw_parent"):
                if n.get(k):
                    n[k] = q(n[k], h)
            doc["nics"].append(n)
        for sw in part["switches"]:
            if sw["id"] == "NVS":
                if not any(x["id"] == "NVS" for x in doc["switches"]):
                    doc["switches"].append(sw)
                continue
            sw["host"] = h
            for k in ("id", "parent", "raw_parent"):
                if sw.get(k):
                    sw[k] = q(sw[k], h)
            doc["switches"].append(sw)
        for n in part["numa_nodes"]:
            n["host"] = h
            doc["numa_nodes"].append(n)
        for l in part["links"]:
            doc["links"].append(dict(l, a=q(l["a"], h), b=q(l["b"], h)))
        for d in part.get("pci_devices") or []:
            d["host"] = h
            if d.get("parent"):
                d["parent"] = q(d["parent"], h)
            doc.setdefault("pci_devices", []).append(d)
        for k, v in part["host"].items():
            if k != "provenance" and doc["host"].get(k) is None and v is not None:
                doc["host"][k] = v
        for w in part["warnings"]:
            warn(doc, w if h == 0 else f"host {h}: {w}")
    warn(doc, f"XML fuses {len(groups)} hosts (host_hash values, NCCL's multi-node NVLink clique): read as "
              f"{len(groups)} hosts of one NVLink domain; graph ids and NIC names of host h > 0 start with 'h/'")
    kind = "fused dump of a multi-node NVLink clique (NCCL_TOPO_DUMP_FILE)"
    doc["sources"].append(source_record("nccl-xml", "ok", f"NCCL topology XML, {kind}: {len(groups)} hosts, "
                                                          f"{len(doc['gpus'])} GPUs"))
    from gpucomm.probes.matrix import compute_matrix

    compute_matrix(doc)
    return _finalize(doc)


def _finalize(doc: dict) -> dict:
    finalize(doc)
    if "pci_devices" in doc:
        doc["pci_devices"].sort(key=lambda d: d["bdf"])
    return doc


def _add_cpu(ctx: _Ctx, el: _Node) -> None:
    doc = ctx.doc
    a = el.attrs
    numaid = _int(a.get("numaid"))
    if numaid is None:
        warn(doc, f"<cpu> ({ctx.where(el.line)}) has no integer numaid; read as numaid -1")
        numaid = -1
    elif numaid < 0:
        warn(doc, f"<cpu numaid={numaid}> ({ctx.where(el.line)}): no NUMA node (NCCL writes -1 in VMs); the NUMA "
                  "node of its GPUs and NICs is unknown")
    if a.get("host_hash"):
        ctx.host_hashes.add(a["host_hash"].strip().lower())
    cpus: Optional[list[int]] = None
    if a.get("affinity") is not None:
        # Linux allows 8192 CPUs: 2048 hex digits plus commas.  Longer masks are junk.
        try:
            if len(a["affinity"]) > 4096:
                raise ValueError("too long")
            cpus = cpumask_to_list(a["affinity"])
        except ValueError:
            warn(doc, f"<cpu numaid={numaid}> affinity {a['affinity'][:40]!r} is not a hex cpumask; ignored")
    info = {"arch": a.get("arch"), "vendor": a.get("vendor"), "familyid": _int(a.get("familyid")),
            "modelid": _int(a.get("modelid"))}
    if numaid in ctx.cpus:
        warn(doc, f"<cpu numaid={numaid}> appears more than once ({ctx.where(el.line)}); merged")
        old = ctx.cpus[numaid]
        for k, v in info.items():
            if old.get(k) is None:
                old[k] = v
        if old.get("cpus") is None:
            old["cpus"] = cpus
    else:
        ctx.cpus[numaid] = dict(info, cpus=cpus, numaid=numaid)
    cpu = ctx.cpus[numaid]
    cpulist = format_cpulist(cpu["cpus"]) if cpu.get("cpus") else None
    cpu["cpulist"] = cpulist
    if numaid >= 0:
        rec = next((n for n in doc["numa_nodes"] if n["id"] == numaid), None)
        if rec is None:
            rec = {"id": numaid, "cpus": cpulist, "memory_bytes": None, "distances": None, "xml_line": el.line}
            doc["numa_nodes"].append(rec)
        rec["cpus"] = rec["cpus"] or cpulist
        for k, v in info.items():
            if v is not None and rec.get(k) is None:
                rec[k] = v
    host = doc["host"]
    for field, key in (("cpu_vendor", "vendor"), ("cpu_arch", "arch")):
        v = info[key]
        if v:
            if host.get(field) is None:
                host[field] = v
            elif host[field] != v:
                warn(doc, f"CPUs disagree on {key}: {host[field]!r} and {v!r}")
    key = ctx.cpu_key(numaid)
    for child in el.children:
        if child.tag == "pci":
            _add_pci(ctx, child, key, cpu)
        elif child.tag == "nic":
            _add_nic_group(ctx, child, None, key, cpu, {}, (None, None))
        else:
            ctx.ignore(child, "cpu")


def _numa(cpu: dict) -> Optional[int]:
    n = cpu.get("numaid")
    return n if n is not None and n >= 0 else None


def _add_pci(ctx: _Ctx, el: _Node, parent: str, cpu: dict) -> None:
    doc = ctx.doc
    a = el.attrs
    raw_bus = a.get("busid")
    bus = normalize_bus_id(raw_bus.strip().lower()) if raw_bus else None
    if bus is None:
        warn(doc, f"<pci> ({ctx.where(el.line)}) has no valid busid ({raw_bus!r}); its children are attached to "
                  f"{parent}")
        for child in el.children:
            if child.tag == "pci":
                _add_pci(ctx, child, parent, cpu)
        return
    ids = _pci_ids(a)
    cls = ids.get("class")
    ctype = pci_class_type(cls)
    gen, width = ctx.speed(a, el.line)
    gpu_el, nic_el = el.first("gpu"), el.first("nic")
    pci_children = el.sub("pci")
    if bus in ctx.seen_pci:
        if nic_el is not None and bus in ctx.nic_by_bus:
            # NCCL merges the ports of one multi-port NIC that appear under one busid.
            _add_nic_group(ctx, nic_el, bus, parent, cpu, ids, (gen, width), merge=True)
        else:
            warn(doc, f"busid {bus} appears more than once ({ctx.where(el.line)}); the repeat is ignored")
        return
    ctx.seen_pci.add(bus)
    numa = _numa(cpu)
    entry = {"bdf": bus, "class": ids.get("class"), "vendor": ids.get("vendor"), "device": ids.get("device"),
             "subsystem_vendor": ids.get("subsystem_vendor"), "subsystem_device": ids.get("subsystem_device"),
             "numa_node": numa, "role": "other", "parent": parent, "gen": gen, "width": width, "xml_line": el.line}
    doc.setdefault("pci_devices", []).append(entry)

    if gpu_el is not None or (ctype == "GPU" and not pci_children):
        if nic_el is not None:
            warn(doc, f"<pci busid={bus}> has both <gpu> and <nic>; the <nic> is ignored")
        entry["role"] = "gpu"
        _add_gpu(ctx, el, gpu_el, bus, parent, cpu, ids, gen, width)
        return
    if nic_el is not None or (ctype == "NIC" and not pci_children):
        entry["role"] = "nic"
        _add_nic_group(ctx, nic_el, bus, parent, cpu, ids, (gen, width), line=el.line)
        return
    if ctype == "NVS" and not pci_children:
        entry["role"] = "nvswitch"
        doc["switches"].append(switch_record(bus, "nvswitch", pci_bus_id=bus, parent=parent, numa_node=numa,
                                             **_flat_ids(ids)))
        return
    if pci_children or el.sub("pcilink") or (cls or "").startswith("0x0604"):
        if ctype in ("GPU", "NIC", "NVS", "CPU"):
            warn(doc, f"<pci busid={bus} class={cls}> has <pci> children; read as a PCIe switch")
        entry["role"] = "switch_up"  # NCCL's PCI node for a switch is its upstream port
        doc["switches"].append(switch_record(bus, "pcie", pci_bus_id=bus, parent=parent, numa_node=numa,
                                             gen=gen, width=width, **_flat_ids(ids)))
        doc["switches"][-1]["xml_line"] = el.line
        doc["links"].append(link_record(bus, parent, "pcie", pcie_bw_GBps(gen, width), gen=gen, width=width))
        for child in el.children:
            if child.tag == "pci":
                _add_pci(ctx, child, bus, cpu)
            elif child.tag == "pcilink":
                target = child.attrs.get("target")
                ctx.pcilinks.append((bus, target or "", child.line))
            else:
                ctx.ignore(child, "pci")
        return
    # A leaf NCCL cannot turn into a GPU/NIC/switch: untyped (no class: AWS skeletons), an NVMe
    # drive, a Power NVLink bridge (0x068001)...  Kept so that export reproduces the file.
    if cls is None:
        ctx.unclassified += 1


def _add_gpu(ctx: _Ctx, el: _Node, gpu_el: Optional[_Node], bus: str, parent: str, cpu: dict, ids: dict,
             gen: Optional[int], width: Optional[int]) -> None:
    ga = gpu_el.attrs if gpu_el is not None else {}
    if gpu_el is None:
        ctx.bare_gpus += 1
    else:
        ctx.dump = True
    sm = _int(ga.get("sm"))
    if sm is not None and not 10 <= sm <= 999:
        warn(ctx.doc, f"GPU {bus}: sm={ga.get('sm')!r} is not a compute capability; ignored")
        sm = None
    pending = {
        "bus": bus, "dev": _int(ga.get("dev")), "sm": sm, "rank": _int(ga.get("rank")), "gdr": _int(ga.get("gdr")),
        "parent": parent, "cpu": cpu, "ids": ids, "gen": gen, "width": width, "line": el.line,
        "nvlinks": [], "c2c": [],
    }
    if gpu_el is not None:
        if ga.get("dev") is not None and pending["dev"] is None:
            warn(ctx.doc, f"GPU {bus}: dev={ga.get('dev')!r} is not an integer; index inferred")
        if ga.get("mlopart") is not None:
            pending["mlopart"] = _int(ga.get("mlopart"))
        _mlopart_siblings(ctx, el, gpu_el, bus, pending)
        for child in gpu_el.children:
            if child.tag == "nvlink":
                pending["nvlinks"].append(child)
            elif child.tag == "c2c":
                pending["c2c"].append(child)
            else:
                ctx.ignore(child, "gpu")
    ctx.gpus.append(pending)


def _mlopart_siblings(ctx: _Ctx, el: _Node, gpu_el: _Node, bus: str, pending: dict) -> None:
    """Several ``<gpu>`` under one ``<pci>``: MLOPart (CUDA 13.1+, Blackwell) splits one physical GPU
    into logical CUDA devices, and NCCL >= 2.28 writes one ``<gpu dev mlopart>`` per partition under
    the GPU's ``<pci>`` (topo.cc ncclTopoAddGpuSub).  The document has one record per physical GPU
    (graph ids are bus ids), so the first partition gives the record and the others are listed in
    ``mlopart_devs``; a warning says so rather than dropping them silently."""
    others = [g for g in el.sub("gpu") if g is not gpu_el]
    if not others:
        return
    devs = [_int(g.attrs.get("dev")) for g in [gpu_el, *others]]
    pending["mlopart_devs"] = [{"dev": d, "mlopart": _int(g.attrs.get("mlopart")), "rank": _int(g.attrs.get("rank"))}
                               for d, g in zip(devs, [gpu_el, *others])]
    ctx.mlopart.append((bus, devs))


def _assign_indices(ctx: _Ctx) -> None:
    """Give every GPU an index: its ``dev`` when present and unique, else the lowest free index in
    PCI bus-id order.  Bus order is what NVML (and CUDA with CUDA_DEVICE_ORDER=PCI_BUS_ID) use;
    e.g. Azure's ndv4 skeleton lists 0003/0004 first, yet nvidia-smi on ND A100 v4 shows GPU0/1
    = 0001/0002 on NUMA 1 (captures/topo/85_*)."""
    doc = ctx.doc
    used: set[int] = set()
    infer: list[dict] = []
    for p in ctx.gpus:
        d = p["dev"]
        if d is None or d < 0 or d in used:
            if d is not None and d in used:
                warn(doc, f"GPU {p['bus']}: dev {d} is used twice; index inferred")
            infer.append(p)
        else:
            used.add(d)
            p["index"] = d
    nxt = 0
    for p in sorted(infer, key=lambda p: p["bus"]):
        while nxt in used:
            nxt += 1
        p["index"] = nxt
        used.add(nxt)
    for p in ctx.gpus:
        cpu = p["cpu"]
        numa = _numa(cpu)
        vendor = "amd" if p["ids"].get("vendor") == "0x1002" else "nvidia"
        sm = p["sm"]
        rec = gpu_record(
            p["index"], pci_bus_id=p["bus"], vendor=vendor, parent=p["parent"], numa_node=numa,
            numa_affinity=[numa] if numa is not None else [], cpu_affinity=cpu.get("cpulist"),
            compute_capability=f"{sm // 10}.{sm % 10}" if sm is not None else None,
            arch=facts.arch_from_sm(sm) if vendor == "nvidia" else None,
            pcie={"gen": p["gen"], "width": p["width"], "max_gen": None, "max_width": None},
            pci_ids=p["ids"],
        )
        for k, v in (("sm", sm), ("gdr", p["gdr"]), ("nccl_rank", p["rank"]), ("mlopart", p.get("mlopart")),
                     ("mlopart_devs", p.get("mlopart_devs"))):
            if v is not None:
                rec[k] = v
        if p in infer:
            rec["index_inferred"] = True
        if p.get("line") is not None:
            rec["xml_line"] = p["line"]
        p["rec"] = rec
        doc["gpus"].append(rec)
        doc["links"].append(link_record(p["bus"], p["parent"], "pcie", pcie_bw_GBps(p["gen"], p["width"]),
                                        gen=p["gen"], width=p["width"]))


def _add_nic_group(ctx: _Ctx, nic_el: Optional[_Node], bus: Optional[str], parent: str, cpu: dict, ids: dict,
                   speed: tuple, line: Optional[int] = None, merge: bool = False) -> None:
    """One ``<pci>`` NIC (or a ``<nic>`` directly under ``<cpu>`` when bus is None): one NIC record per
    distinct ``<net name>``; several ``<net>`` with the same name are ports of one device."""
    doc = ctx.doc
    numa = _numa(cpu)
    nets = nic_el.sub("net") if nic_el is not None else []
    if nic_el is not None:
        ctx.dump = True
        for child in nic_el.children:
            if child.tag not in ("net", "gin", "rma"):
                ctx.ignore(child, "nic")
    group = ctx.nic_by_bus.setdefault(bus, []) if bus else []
    gen, width = speed
    if bus and not merge:
        doc["links"].append(link_record(bus, parent, "pcie", pcie_bw_GBps(gen, width), gen=gen, width=width))
    if not nets:
        # Bare NIC in a static skeleton: NCCL would match it by busid to a plugin device.
        name = bus or f"nic{len(doc['nics'])}"
        _new_nic(ctx, name, bus, parent, numa, ids, speed, {}, group, line)
        return
    unnamed = [n for n in nets if not n.attrs.get("name")]
    for i, net in enumerate(nets):
        na = net.attrs
        name = na.get("name")
        if not name:
            dev = na.get("dev")
            base = bus or f"net{dev if dev is not None else i}"
            name = base if len(unnamed) == 1 else f"{base}/{dev if dev is not None else i}"
        existing = next((r for r in group if r["name"] == name), None) if bus else \
            next((r for r in doc["nics"] if r["name"] == name and r["parent"] == parent and r["pci_bus_id"] is None), None)
        port = _net_port(na)
        if na.get("speed") is not None and port["rate_gbps"] is None:
            warn(doc, f"<net name={name!r}> ({ctx.where(net.line)}) speed {na['speed'][:40]!r} is not a positive "
                      "number of Mb/s; its rate is unknown")
        if existing is not None:
            existing["ports"].append(port)
            continue
        rec = _new_nic(ctx, name, bus, parent, numa, ids, speed, na, group, net.line)
        rec["ports"] = [port]
    # NCCL >= 2.28 lists the same device again as <gin> (GPU-initiated networking) and <rma>
    # (topo.cc ncclTopoAddNic): not new NICs, roles of the <net> with the same name.
    for child in nic_el.children if nic_el is not None else []:
        if child.tag not in ("gin", "rma"):
            continue
        rec = next((r for r in (group if bus else doc["nics"]) if r["name"] == child.attrs.get("name")), None)
        if rec is None:
            ctx.ignore(child, "nic")
        elif child.tag not in rec.setdefault("nccl_roles", ["net"]):
            rec["nccl_roles"].append(child.tag)


def _net_port(na: dict) -> dict:
    speed = _int(na.get("speed"))
    port = _int(na.get("port"))
    # The IB/socket plugins only report ACTIVE ports (net_ib/init.cc), hence the state.
    return {"port": port if port is not None else 1, "state": "ACTIVE",
            "rate_gbps": facts.gbps_of_mbps(speed)}


def _new_nic(ctx: _Ctx, name: str, bus: Optional[str], parent: str, numa: Optional[int], ids: dict, speed: tuple,
             na: dict, group: list, line: Optional[int]) -> dict:
    doc = ctx.doc
    if name in ctx.nic_names:
        new = f"{name}@{bus or parent}"
        k = 2
        while new in ctx.nic_names:
            new = f"{name}@{bus or parent}#{k}"
            k += 1
        warn(doc, f"NIC name {name!r} is used twice ({ctx.where(line)}); the second is called {new!r}")
        name = new
    ctx.nic_names.add(name)
    gen, width = speed
    guid = guid_from_nccl(na.get("guid"))
    rec = nic_record(name, pci_bus_id=bus, numa_node=numa, parent=parent, guid=guid,
                     netdev=name if bus is None else None)
    if guid:
        rec["sys_image_guid"] = guid  # NCCL's guid is the card's sys_image_guid (ports share it)
    if bus is None:
        # A <nic> straight under <cpu>: NCCL's socket/virtual NIC, joined to the CPU at LOC bandwidth.
        rec["link_layer"] = "Ethernet"
        doc["links"].append(link_record(name, parent, "pcie", LOC_BW))
    else:
        rec["pcie"] = {"gen": gen, "width": width, "max_gen": None, "max_width": None}
    if ids:
        rec["pci_ids"] = ids
    if line is not None:
        rec["xml_line"] = line
    dev, gdr = _int(na.get("dev")), _int(na.get("gdr"))
    if dev is not None:
        rec["nccl_dev"] = dev
    elif na:
        warn(doc, f"<net name={name!r}> has no dev: NCCL would leave it out of its graph")
    if gdr is not None:
        rec["gdr"] = gdr
    extra = {k: v for k, v in na.items() if k not in ("name", "dev", "speed", "port", "guid", "gdr", "keep")}
    if extra:
        rec["nccl_attrs"] = extra
    rec["ports"] = []
    doc["nics"].append(rec)
    group.append(rec)
    return rec


def _split_nic_functions(ctx: _Ctx) -> None:
    """Give the NICs that NCCL lists under one ``<pci>`` their own PCI functions.

    NCCL's IB plugin merges the ports of one card into one PCI node by setting the function digit
    of the path to 0 (net_ib/init.cc), so ``mlx5_0`` and ``mlx5_1`` of a dual-port ConnectX both
    appear under ``0000:0c:00.0``; they are separate RDMA devices and PCI functions (.0, .1) on the
    host.  Graph ids are bus ids, so each gets function = its position (by port, then dev) unless
    that id is taken; ``nccl_busid`` keeps NCCL's id for export."""
    doc = ctx.doc
    split: list[str] = []
    for bus, group in ctx.nic_by_bus.items():
        names = [r for r in group if r["pci_bus_id"] == bus]
        if len(names) < 2 or not bus.endswith(".0") or len(names) > 8:
            continue
        names.sort(key=lambda r: (min((p["port"] for p in r["ports"]), default=0), r.get("nccl_dev", 0), r["name"]))
        new = [bus[:-1] + str(i) for i in range(len(names))]
        if any(b in ctx.seen_pci for b in new[1:]):
            continue
        link = next((l for l in doc["links"] if l["kind"] == "pcie" and l["a"] == bus), None)
        for rec, b in zip(names, new):
            rec["pci_bus_id"] = b
            rec["nccl_busid"] = bus
            if link is not None and b != bus:
                doc["links"].append(dict(link, a=b))
        split.append(f"{'/'.join(r['name'] for r in names)} under {bus}")
    if split:
        warn(doc, f"{len(split)} NCCL PCI node(s) hold several NICs (NCCL merges the functions of one card, e.g. "
                  f"{split[0]}): each NIC got its own PCI function (.0, .1, ...)")


def _add_nvlinks_and_c2c(ctx: _Ctx) -> None:
    doc = ctx.doc
    by_bus = {p["bus"]: p for p in ctx.gpus}
    pairs: dict[tuple[str, str], dict[str, int]] = {}
    to_switch: dict[tuple[str, str], int] = {}
    to_cpu: dict[tuple[str, str], int] = {}
    switches = {s["id"]: s for s in doc["switches"]}
    for p in ctx.gpus:
        rec, gid = p["rec"], p["bus"]
        per_link = nvlink_bw_per_link(p["sm"])
        for el in p["nvlinks"]:
            a = el.attrs
            count = _int(a.get("count"))
            target_raw = (a.get("target") or "").strip().lower()
            if count is None or count <= 0:
                warn(doc, f"GPU{rec['index']}: <nvlink> at line {el.line} has no positive count; ignored")
                continue
            if count > MAX_NVLINKS:
                warn(doc, f"GPU{rec['index']}: <nvlink> at line {el.line} has count {count}, more than the "
                          f"{MAX_NVLINKS} links a GPU can have; ignored")
                continue
            sentinel = is_sentinel_bus_id(target_raw)
            tbus = None if sentinel else normalize_bus_id(target_raw)
            ttype = pci_class_type(a.get("tclass")) if a.get("tclass") else ("GPU" if tbus in by_bus else "NVS")
            if tbus == gid:
                warn(doc, f"GPU{rec['index']}: <nvlink target={target_raw}> points at the GPU itself (line {el.line}); "
                          "ignored")
                continue
            if ttype == "GPU":
                if tbus not in by_bus:
                    warn(doc, f"GPU{rec['index']}: NVLink peer {target_raw or '?'} is not a GPU in this file; ignored "
                              "(NCCL ignores it too)")
                    continue
                key = tuple(sorted((gid, tbus)))
                side = pairs.setdefault(key, {})
                side[gid] = side.get(gid, 0) + count
                remote_type, remote = "gpu", tbus
            elif ttype == "CPU":
                k2 = (gid, ctx.cpu_key(p['cpu']['numaid']))
                to_cpu[k2] = to_cpu.get(k2, 0) + count
                remote_type, remote = "cpu", target_raw or None
            else:
                if tbus is None and not sentinel:
                    warn(doc, f"GPU{rec['index']}: NVLink target {target_raw!r} is not a bus id; counted as an NVSwitch")
                sw = "NVS" if tbus is None else tbus
                if sw not in switches:
                    switches[sw] = switch_record(sw, "nvswitch", pci_bus_id=tbus)
                    doc["switches"].append(switches[sw])
                elif switches[sw]["kind"] != "nvswitch":
                    warn(doc, f"NVLink target {sw} is also a PCI switch in this file; linked anyway")
                to_switch[(gid, sw)] = to_switch.get((gid, sw), 0) + count
                remote_type, remote = "nvswitch", (target_raw if sentinel else tbus) or None
            for _ in range(min(count, 64)):
                rec["nvlink"].append({"link": None, "state": "active", "remote": remote, "version": None,
                                      "bw_GBps": per_link, "remote_type": remote_type})
        for el in p["c2c"]:
            bw, count = _int(el.attrs.get("bw")), _int(el.attrs.get("count"))
            if not bw or not count or bw < 0 or count < 0:
                warn(doc, f"GPU{rec['index']}: <c2c> at line {el.line} lacks a positive bw/count; ignored")
                continue
            rec["c2c"] = {"count": count, "bw_MBps": bw}
            doc["links"].append(link_record(gid, ctx.cpu_key(p['cpu']['numaid']), "c2c", bw * count / 1000.0, count=count))
    sm_of = {p["bus"]: p["sm"] for p in ctx.gpus}
    idx_of = {p["bus"]: p["rec"]["index"] for p in ctx.gpus}
    for (a, b), side in sorted(pairs.items()):
        counts = list(side.values())
        count = min(counts) if len(counts) == 2 else counts[0]
        if len(counts) == 2 and counts[0] != counts[1]:
            warn(doc, f"GPU{idx_of[a]}-GPU{idx_of[b]}: the two sides list {counts[0]} and {counts[1]} NVLinks; using {count}")
        sms = [s for s in (sm_of[a], sm_of[b]) if s is not None]
        bw = count * nvlink_bw_per_link(min(sms) if sms else None)
        doc["links"].append(link_record(a, b, "nvlink", bw, count=count))
    for (g, sw), count in sorted(to_switch.items()):
        doc["links"].append(link_record(g, sw, "nvlink", count * nvlink_bw_per_link(sm_of[g]), count=count))
    for (g, cpu), count in sorted(to_cpu.items()):
        doc["links"].append(link_record(g, cpu, "nvlink", count * nvlink_bw_per_link(sm_of[g]), count=count))


def _add_pcilinks(ctx: _Ctx) -> None:
    doc = ctx.doc
    pcie = {s["id"] for s in doc["switches"] if s["kind"] == "pcie"}
    done: set[tuple[str, str]] = set()
    for src, target, line in ctx.pcilinks:
        tb = normalize_bus_id(target.strip().lower()) if target else None
        if tb not in pcie or tb == src:
            warn(doc, f"<pcilink target={target!r}> (line {line}) is not another PCI switch of this file; ignored "
                      "(NCCL ignores it too)")
            continue
        key = tuple(sorted((src, tb)))
        if key in done:
            continue
        done.add(key)
        # Broadcom virtual switch link: NCCL joins the two switches with a LINK_LOC (topo.cc
        # ncclTopoAddPciLinks); not a tree edge, so the matrix ignores it.
        doc["links"].append(link_record(key[0], key[1], "pcie", LOC_BW, pcilink=True))


def _add_smp_links(ctx: _Ctx) -> None:
    """SMP links between every pair of CPUs with NCCL's bandwidth for the XML's ``<cpu>`` (topo.cc
    ncclTopoConnectCpus); none when the CPU is not identified (the typed view then applies its one
    default and says so)."""
    ids = sorted(ctx.cpus)
    bws = {i: facts.inter_cpu_bw(facts.cpu_identity(ctx.cpus[i], None)) for i in ids}
    for i, a in enumerate(ids):
        for b in ids[i + 1:]:
            if bws[a] is not None and bws[b] is not None:
                ctx.doc["links"].append(link_record(ctx.cpu_key(a), ctx.cpu_key(b), "smp", min(bws[a], bws[b])))


# --------------------------------------------------------------------------------------------
# Broadcom switch flattening
def bcm_device_id(pci_ids: Optional[dict]) -> int:
    """NCCL's 64-bit ``pci.device``: vendor<<48 | device<<32 | subsystem_vendor<<16 |
    subsystem_device (topo.cc ncclTopoAddPci; a missing attribute contributes 0)."""
    ids = pci_ids or {}
    value = 0
    for key, shift in (("vendor", 48), ("device", 32), ("subsystem_vendor", 16), ("subsystem_device", 0)):
        v = _int(ids.get(key))
        if v is not None and v >= 0:
            value += v << shift
    return value & 0xFFFFFFFFFFFFFFFF


def bcm_gen(device_id: int, level: int) -> int:
    """``getBcmGen`` (topo.cc): 4 for a Broadcom PEX Gen4 switch (0x1000:0xc010, subsystem
    0x1000:0xaxxx, any level), 5 for Gen5 (0x1000:0xc030, subsystem 0x1000:0x0xxx at level 0 (the
    parent), 0x1000:0x1xxx at level 1 (a sub-switch)), else 0."""
    if (device_id & 0xFFFFFFFFFFFFF000) == 0x1000C0101000A000:
        return 4
    if (device_id & 0xFFFFFFFFFFFFF000) == (0x1000C03010000000 | level * 0x1000):
        return 5
    return 0


def has_bcm_switch(doc: dict) -> bool:
    """Whether :func:`flatten_bcm` has anything to do: a ``pcie`` switch with Broadcom PEX ids."""
    return any(bcm_gen(bcm_device_id(switch_ids(s)), 0) or bcm_gen(bcm_device_id(switch_ids(s)), 1)
               for s in doc.get("switches", []) if s.get("kind") == "pcie")


def flatten_bcm(doc: dict) -> dict:
    """Flatten Broadcom PEX switches exactly as NCCL does (``ncclTopoFlattenBcmSwitches``,
    topo.cc:195-268 in NCCL 2.30.7; xml.cc ncclTopoGetXmlFromSys).

    A BCM PEX switch presents itself as a two-level hierarchy although it sustains full bandwidth
    between all ports; NCCL merges the inner level so that e.g. a GPU and a NIC under the same
    physical switch are PIX.  For every ``pcie`` switch in NCCL's node order (pre-order of the PCI
    tree), with ``id = bcm_device_id(switch_ids(switch))``:

    * ``gen = bcm_gen(id, 0)``; if non-zero, every PCI neighbour (children and, as in NCCL, the
      parent) whose ``bcm_gen(id, 1) == gen`` is a sub-switch: it is removed and all its other
      neighbours are re-attached to the switch (tree pointers and links alike, links keep their
      bandwidth);
    * the switch is then marked as NCCL does (``device |= 0xffff``, here ``bcm_gen``/``bcm_merged``
      fields, the ids stay untouched) so it is not merged again, and the scan restarts.

    Switch records are read from ``doc["switches"]`` (kind ``pcie``) with ``vendor``, ``device``,
    ``subsystem_vendor``, ``subsystem_device`` as hex strings (the sysfs probe's fields; a nested
    ``pci_ids`` dict works too).  Removed
    switches are kept in the parent's ``bcm_merged`` list and moved devices get ``raw_parent`` so
    :func:`export_nccl_xml` can write the real hierarchy back.  Pure: mutates and returns ``doc``,
    no I/O.  Returns ``doc`` unchanged when no Broadcom switch is present."""
    if not has_bcm_switch(doc):
        return doc
    switches: list[dict] = doc.get("switches", [])
    pcie = {s["id"]: s for s in switches if s.get("kind") == "pcie"}
    devices = [*doc.get("gpus", []), *doc.get("nics", []), *doc.get("pci_devices", []), *switches]

    events: dict[int, list[str]] = {}
    changed = True
    guard = 0
    while changed and guard < 100_000:
        changed = False
        guard += 1
        for sw in _bcm_order(switches, pcie):
            gen = bcm_gen(_bcm_marked_id(sw), 0)
            if not gen:
                continue
            neighbours = [s for s in pcie.values() if s.get("parent") == sw["id"]]
            if sw.get("parent") in pcie:
                neighbours.insert(0, pcie[sw["parent"]])
            subs = [s for s in neighbours if bcm_gen(_bcm_marked_id(s), 1) == gen]
            for sub in subs:
                _absorb(doc, sw, sub, devices)
                del pcie[sub["id"]]
                switches.remove(sub)
                devices = [d for d in devices if d is not sub]
            sw["bcm_gen"] = gen
            sw.setdefault("bcm_merged", [])
            if subs:
                events.setdefault(gen, []).append(f"{sw['id']} <- {', '.join(s['id'] for s in subs)}")
            changed = True
            break
    _bcm_report(doc, events)
    return doc


def _bcm_marked_id(sw: dict) -> int:
    """:func:`bcm_device_id` of a switch, with NCCL's ``device |= 0xffff`` mark once it has been flattened."""
    d = bcm_device_id(switch_ids(sw))
    return d | 0xFFFF if sw.get("bcm_gen") else d


def _bcm_order(switches: list[dict], pcie: dict) -> list[dict]:
    """NCCL's PCI node order: creation order = pre-order walk of the tree (list order among siblings)."""
    kids: dict[Optional[str], list[dict]] = {}
    for s in switches:
        if s.get("kind") == "pcie":
            p = s.get("parent")
            kids.setdefault(p if p in pcie else None, []).append(s)
    out: list[dict] = []
    stack = list(reversed(kids.get(None, [])))
    seen: set[str] = set()
    while stack:
        s = stack.pop()
        if s["id"] in seen:
            continue
        seen.add(s["id"])
        out.append(s)
        stack.extend(reversed(kids.get(s["id"], [])))
    return out


def _bcm_report(doc: dict, events: dict[int, list[str]]) -> None:
    """One warning per Broadcom generation that :func:`flatten_bcm` merged, with an example."""
    for gen, ev in sorted(events.items()):
        n_subs = sum(e.count(",") + 1 for e in ev)
        warn(doc, f"Broadcom PEX Gen{gen} switches flattened as NCCL does (ncclTopoFlattenBcmSwitches): {len(ev)} "
                  f"switch(es) absorbed {n_subs} sub-switch(es), e.g. {ev[0]}; nvidia-smi on the host shows one "
                  "more PCIe level")


def _absorb(doc: dict, sw: dict, sub: dict, devices: list[dict]) -> None:
    """Re-attach everything adjacent to ``sub`` to ``sw`` (NCCL moves all of sub's links)."""
    sid, wid = sub["id"], sw["id"]
    merged = {k: sub.get(k) for k in ("id", "pci_bus_id", "gen", "width", "numa_node")}
    merged.update(_flat_ids(switch_ids(sub)))
    merged["parent"] = sub.get("raw_parent") or sub.get("parent")
    for m in sub.get("bcm_merged") or []:
        sw.setdefault("bcm_merged", []).append(m)
    if sw.get("parent") == sid:
        # The parent was the sub-switch: sw takes its place (and its upstream link).
        sw.setdefault("raw_parent", sid)
        sw["parent"] = sub.get("parent")
        sw["gen"], sw["width"] = sub.get("gen"), sub.get("width")
    for d in devices:
        if d is sw or d is sub:
            continue
        if d.get("parent") == sid:
            d.setdefault("raw_parent", sid)
            d["parent"] = wid
    sw.setdefault("bcm_merged", []).append(merged)
    links = []
    for l in doc.get("links", []):
        a = wid if l["a"] == sid else l["a"]
        b = wid if l["b"] == sid else l["b"]
        if a == b:
            continue  # the sw<->sub link itself
        if (a, b) != (l["a"], l["b"]):
            l = dict(l, a=a, b=b)
            if l.get("pcilink") and any(x.get("pcilink") and {x["a"], x["b"]} == {a, b} for x in links):
                continue
        links.append(l)
    doc["links"] = links


# --------------------------------------------------------------------------------------------
# Graph files (NCCL_GRAPH_FILE / NCCL_GRAPH_DUMP_FILE)
def parse_nccl_graph(text: str, path: Optional[str] = None) -> dict:
    """An NCCL graph XML (``<graphs version="1">``) -> ``{"schema": "gpucomm.nccl-graph/v1", "version",
    "graphs": [{id, name, pattern, pattern_name, crossnic, nchannels, speedintra, speedinter,
    latencyinter, typeintra, typeinter, samechannels, channels: [{gpus: [dev], nets: [dev]}]}],
    "warnings"}`` for planners to compare their rings/trees against.

    ``dev`` is read as hex like current NCCL (search.cc ncclTopoGetChannelFromXml: strtol(.., 16));
    NCCL <= 2.18 wrote and read decimal, which only differs from dev 10 on (warned)."""
    root = _read_xml(text, path)
    top = next((c for c in root.children if c.tag == "graphs"), None)
    if top is None:
        first = root.children[0] if root.children else None
        raise InputError(f"root element is <{first.tag}>" if first else "no XML element found", path,
                         first.line if first else None, expected="<graphs version=\"1\"> (an NCCL graph file)")
    return _graph_from_node(top, path)


def _hex_dev(value: Optional[str], warnings: list[str], line: int) -> Optional[int]:
    if value is None:
        return None
    s = value.strip().lower()
    try:
        dev = int(s[2:] if s.startswith("0x") else s, 16)
    except ValueError:
        msg = f"dev {value!r} (line {line}) is not a hex number; ignored"
        if msg not in warnings:
            warnings.append(msg)
        return None
    if not s.startswith("0x") and re.fullmatch(r"\d+", s) and int(s) >= 10:
        msg = f"dev {value!r} (line {line}) read as hex 0x{s} = {dev} like NCCL >= 2.19 (older NCCL wrote decimal)"
        if msg not in warnings:
            warnings.append(msg)
    return dev


def _graph_from_node(top: _Node, path: Optional[str]) -> dict:
    warnings: list[str] = []
    if _int(top.attrs.get("version")) != 1:
        warnings.append(f"<graphs version={top.attrs.get('version')!r}>: NCCL only loads version 1")
    graphs = []
    for g in top.children:
        if g.tag != "graph":
            warnings.append(f"ignored <{g.tag}> under <graphs> (line {g.line})")
            continue
        a = g.attrs
        gid, pattern = _int(a.get("id")), _int(a.get("pattern"))
        channels = []
        for ch in g.children:
            if ch.tag != "channel":
                warnings.append(f"ignored <{ch.tag}> under <graph> (line {ch.line})")
                continue
            gpus, nets, ranks, systems = [], [], [], []
            for el in ch.children:
                if el.tag not in ("gpu", "net"):
                    warnings.append(f"ignored <{el.tag}> under <channel> (line {el.line})")
                    continue
                dev = _hex_dev(el.attrs.get("dev"), warnings, el.line)
                if dev is None:
                    if el.attrs.get("dev") is None:
                        warnings.append(f"<{el.tag}> without dev (line {el.line}); ignored")
                    continue
                if el.tag == "gpu" and not 0 <= dev < 1 << 64:
                    msg = f"<gpu dev={el.attrs.get('dev')!r}> (line {el.line}) is not a GPU id; ignored"
                    if msg not in warnings:
                        warnings.append(msg)
                    continue
                if el.tag == "gpu":
                    # NCCL keeps the system id (the host of a multi-node NVLink clique) in bits 56+
                    # (topo.h NCCL_TOPO_ID, search.cc ncclTopoGetXmlFromChannel); the CUDA device below.
                    system, local = split_topo_id(dev)
                    gpus.append(local)
                    systems.append(system)
                    rank = _int(el.attrs.get("rank"))
                    if rank is not None:
                        ranks.append(rank)
                else:
                    nets.append(dev)
            chan = {"gpus": gpus, "nets": nets}
            if ranks:
                chan["ranks"] = ranks
            if any(systems):
                chan["hosts"] = systems
                chan["labels"] = [graph_gpu_label(h << 56 | d) for h, d in zip(systems, gpus)]
            channels.append(chan)
        nch = _int(a.get("nchannels"))
        if nch is not None and channels and nch != len(channels):
            warnings.append(f"graph {gid}: nchannels={nch} but {len(channels)} <channel> elements")
        graphs.append({
            "id": gid, "name": GRAPH_IDS.get(gid) if gid is not None else None,
            "pattern": pattern, "pattern_name": GRAPH_PATTERNS.get(pattern) if pattern is not None else None,
            "crossnic": _int(a.get("crossnic")), "nchannels": nch,
            "speedintra": _float(a.get("speedintra")), "speedinter": _float(a.get("speedinter")),
            "latencyinter": _float(a.get("latencyinter")),
            "typeintra": a.get("typeintra"), "typeinter": a.get("typeinter"),
            "samechannels": _int(a.get("samechannels")), "channels": channels,
        })
    return {"schema": "gpucomm.nccl-graph/v1", "version": _int(top.attrs.get("version")), "graphs": graphs,
            "warnings": warnings}


def split_topo_id(dev: int) -> tuple:
    """NCCL's 64-bit node id -> (system id, local id): topo.h ``NCCL_TOPO_ID(systemId, localId)`` keeps
    the system (host) in bits 56+.

    >>> split_topo_id(72057594037927936), split_topo_id(3)
    ((1, 0), (0, 3))
    """
    return dev >> 56, dev & ((1 << 56) - 1)


def graph_gpu_label(dev: int) -> str:
    """How a graph file's ``<gpu dev>`` prints: ``GPU<d>`` on the first host, ``<host>/GPU<d>`` beyond
    (``0x100000000000000`` = host 1, GPU 0 -> ``1/GPU0``), never the raw 64-bit id."""
    system, local = split_topo_id(dev)
    return f"{system}/GPU{local}" if system else f"GPU{local}"


def _graph_document(graph: dict, path: Optional[str]) -> dict:
    doc = new_document(provenance="nccl-xml")
    seen: dict = {}   # (host, dev) -> rank or None
    for g in graph["graphs"]:
        for ch in g["channels"]:
            hosts = ch.get("hosts") or [0] * len(ch["gpus"])
            ranks = ch.get("ranks") if len(ch.get("ranks") or []) == len(ch["gpus"]) else [None] * len(ch["gpus"])
            for h, d, r in zip(hosts, ch["gpus"], ranks):
                if seen.get((h, d)) is None:
                    seen[(h, d)] = r
    keys = sorted(seen)
    multi = any(h for h, _d in keys)
    ranks = [seen[k] for k in keys]
    by_rank = multi and all(isinstance(r, int) for r in ranks) and sorted(ranks) == list(range(len(keys)))
    for i, (h, d) in enumerate(keys):
        if d > 4096 or h > 65535:
            warn(doc, f"graph GPU dev {graph_gpu_label(h << 56 | d)} is out of range; skipped")
            continue
        if not multi:
            doc["gpus"].append(gpu_record(d))
            continue
        rec = gpu_record(seen[(h, d)] if by_rank else i, host=h, local_index=d)
        if seen[(h, d)] is not None:
            rec["nccl_rank"] = seen[(h, d)]
        doc["gpus"].append(rec)
    if multi:
        doc["hosts"] = [{"id": h, "hostname": None, "host_hash": None} for h in sorted({h for h, _d in keys})]
    warn(doc, "NCCL graph file (NCCL_GRAPH_FILE format): channels only, no PCI tree -- GPU bus ids, NICs and the "
              "matrix are unknown; the graph is in nccl_graph")
    for w in graph["warnings"]:
        warn(doc, w)
    doc["nccl_graph"] = graph
    doc["sources"].append(source_record("nccl-xml", "partial", "NCCL graph file: no PCI tree"))
    from gpucomm.probes.matrix import compute_matrix

    compute_matrix(doc)
    return _finalize(doc)


# --------------------------------------------------------------------------------------------
# Export
_ARCH_NAMES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64", "ppc64le": "ppc64",
               "ppc64": "ppc64"}


def _nccl_vendor(v: Optional[str]) -> Optional[str]:
    if not v:
        return None
    low = v.strip().lower()
    if "intel" in low:
        return "GenuineIntel"
    if "amd" in low:
        return "AuthenticAMD"
    if "centaur" in low or "zhaoxin" in low or "shanghai" in low:
        return "CentaurHauls"
    return None


def _check_value(name: str, value: str) -> str:
    if len(name) > MAX_NAME_LEN or len(value) > MAX_VALUE_LEN or any(c in value for c in "\"<>&\n\r\t"):
        raise TopologyError(f"value {value[:40]!r} of attribute {name!r} cannot be written in NCCL's XML format",
                            expected=f"at most {MAX_VALUE_LEN} characters without quotes, <, >, & or control characters")
    return value


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def open(self, depth: int, tag: str, attrs: list[tuple[str, Any]], leaf: bool) -> None:
        parts = [tag]
        for k, v in attrs:
            if v is None:
                continue
            parts.append(f'{k}="{_check_value(k, str(v))}"')
        self.lines.append("  " * depth + "<" + " ".join(parts) + ("/>" if leaf else ">"))

    def close(self, depth: int, tag: str) -> None:
        self.lines.append("  " * depth + f"</{tag}>")


def _pcie_of(rec: dict, uplinks: Optional[dict] = None, rid: Optional[str] = None) -> tuple[Optional[int], Optional[int]]:
    """(gen, width) of a device's upstream link: its ``pcie`` dict (current, else max), its own
    ``gen``/``width``, else the ``pcie`` link record that starts at it (the sysfs probe keeps link
    speeds of switches and NICs there)."""
    p = rec.get("pcie")
    gen = width = None
    if isinstance(p, dict):
        gen, width = p.get("gen") or p.get("max_gen"), p.get("width") or p.get("max_width")
    gen, width = gen or rec.get("gen"), width or rec.get("width")
    if uplinks is not None and rid in uplinks:
        lg, lw = uplinks[rid]
        gen, width = gen or lg, width or lw
    gen = gen if isinstance(gen, int) and not isinstance(gen, bool) else None
    width = width if isinstance(width, int) and not isinstance(width, bool) and width > 0 else None
    return gen, width


def export_nccl_xml(doc: dict) -> str:
    """The document as an NCCL topology XML that NCCL's strict parser (xml.cc) loads as
    ``NCCL_TOPO_FILE``: no ``<?xml?>`` header, 2-space indent, one line per element with its
    attributes separated by single spaces in NCCL's order, double quotes, ``<x/>`` when childless.

    Unknown values are omitted where NCCL fills them in itself when it loads the file (``gdr``, CPU
    ``arch``/``vendor``/``familyid``/``modelid``, ``affinity``, net ``speed``/``port``/``guid``:
    xml.cc only sets missing attributes); ``rank`` is the GPU's position (NCCL overwrites it with
    the real rank); ``link_speed``/``link_width`` are ``""`` when unknown (NCCL then assumes
    8 GT/s x16).  Switches without a PCI bus id get fake bridge ids ``ffff:ff:NN.0`` as in the
    Azure/AWS skeletons; host bridges are folded into their CPU (NCCL has none); Broadcom switches
    flattened on import are written unflattened (NCCL flattens them again).  Raises
    :class:`TopologyError` when a GPU has no PCI bus id (NCCL matches GPUs by bus id)."""
    hosts = sorted({host_of(x) for key in ("gpus", "nics", "numa_nodes") for x in doc.get(key) or []
                    if isinstance(x, dict)})
    if len(hosts) > 1:
        return _export_fused(doc, hosts)
    gpus = sorted(doc.get("gpus", []), key=lambda g: g["index"])
    for g in gpus:
        if not g.get("pci_bus_id"):
            raise TopologyError(f"GPU{g['index']} has no PCI bus id; an NCCL topology XML needs one for every GPU",
                                expected="a topology from a live probe, a snapshot or an NCCL XML")
    return _Export(doc, gpus).write()


_GPU_LINE = re.compile(r'^(\s*<gpu dev="(\d+)"[^>]*? rank=")\d+(".*)$')


def _export_fused(doc: dict, hosts: list) -> str:
    """A document of several hosts as NCCL's fused XML: each host's ``<cpu>`` elements (written as for
    one host, :func:`gpucomm.probes.model.host_document`) with its ``host_hash`` first, hosts in order.
    This is what NCCL dumps for a multi-node NVLink clique; as ``NCCL_TOPO_FILE`` NCCL would replace
    every host_hash by its own (topo.cc ncclTopoGetSystem), so give NCCL one host's file instead
    (``gpucomm show --format nccl-xml`` of that host's document)."""
    from gpucomm.probes.model import host_document

    named = {h.get("id"): h for h in doc.get("hosts") or [] if isinstance(h, dict)}
    lines = ['<system version="1">']
    for h in hosts:
        part = host_document(doc, h)
        hh = (named.get(h) or {}).get("host_hash") or f"{h:#x}"
        body = export_nccl_xml(part).splitlines()[1:-1]
        rank = {g.get("local_index"): g["index"] for g in doc.get("gpus", []) if host_of(g) == h}
        for line in body:
            if line.startswith("  <cpu "):
                line = f'  <cpu host_hash="{_check_value("host_hash", hh)}" ' + line[len("  <cpu "):]
            m = _GPU_LINE.match(line)
            if m and rank.get(int(m.group(2))) is not None:   # the rank is the GPU's index in the whole document
                line = f"{m.group(1)}{rank[int(m.group(2))]}{m.group(3)}"
            lines.append(line)
    lines.append("</system>")
    return "\n".join(lines) + "\n"


def _switch_bus_ids(doc: dict, gpus: list, tree_nodes: dict) -> dict[str, str]:
    """PCI bus ids for switches: their own, their id when it is a BDF, else a fake bridge id ``ffff:ff:NN.0``."""
    used = {x.get("pci_bus_id") for x in [*gpus, *doc.get("nics", []), *tree_nodes.values()] if x.get("pci_bus_id")}
    bus_of: dict[str, str] = {}
    fake = 1
    for sid in sorted(tree_nodes):
        s = tree_nodes[sid]
        b = normalize_bus_id(s.get("pci_bus_id") or "") or normalize_bus_id(sid)
        if not b:
            while f"ffff:ff:{fake:02x}.0" in used:
                fake += 1
            b = f"ffff:ff:{fake:02x}.0"
            used.add(b)
        bus_of[sid] = b
    return bus_of


def _cpu_num(key: str) -> Optional[int]:
    """``CPU<n>`` -> n; None for anything else."""
    m = re.fullmatch(r"CPU(-?\d+)", key or "")
    return int(m.group(1)) if m else None


def _pci_attrs(bus: str, ids: dict, gen: Optional[int], width: Optional[int], default_class: Optional[str],
               default_vendor: Optional[str] = None, speed: bool = True) -> list[tuple[str, Any]]:
    """Attributes of a ``<pci>`` element in NCCL's order (xml.cc): busid, class, vendor, ids, link speed/width."""
    out: list[tuple[str, Any]] = [("busid", bus), ("class", ids.get("class") or default_class),
                                  ("vendor", ids.get("vendor") or default_vendor)]
    for k in ("device", "subsystem_vendor", "subsystem_device"):
        out.append((k, ids.get(k)))
    if speed:
        out.append(("link_speed", facts.PCI_GEN_SPEED.get(gen or 0, "")))
        out.append(("link_width", str(width) if width else ""))
    return out


class _Export:
    """One :func:`export_nccl_xml` run: NCCL's PCI tree under each CPU, the links each element carries, the writer."""

    def __init__(self, doc: dict, gpus: list) -> None:
        """Collect the tree (switches, GPUs, NICs and devices by where they hang) and the per-element links."""
        self.doc = doc
        self.gpus = gpus
        switches = [s for s in doc.get("switches", []) if isinstance(s, dict)]
        pcie = {s["id"]: s for s in switches if s.get("kind") == "pcie"}
        merged: dict[str, dict] = {}
        for s in pcie.values():
            for m in s.get("bcm_merged") or []:
                if isinstance(m, dict) and m.get("id") and m["id"] not in pcie:
                    merged[m["id"]] = dict(m, kind="pcie")
        self.host_bridges = {s["id"]: s for s in switches if s.get("kind") == "host_bridge"}
        self.nvswitch = {s["id"]: s for s in switches if s.get("kind") == "nvswitch"}
        self.tree_nodes = {**pcie, **merged}
        self.bus_of = _switch_bus_ids(doc, gpus, self.tree_nodes)
        self.children: dict[tuple[str, Optional[str]], list[tuple[str, str, Any]]] = {}
        self._collect_tree()

        self.numa_recs = {n["id"]: n for n in doc.get("numa_nodes", [])
                          if isinstance(n, dict) and isinstance(n.get("id"), int)}
        self.cpu_ids = set(self.numa_recs) | {int(k[1]) for k in self.children if k[0] == "cpu"}
        self.host = doc.get("host") or {}

        self.gpu_by_id = {(g.get("pci_bus_id") or f"GPU{g['index']}"): g for g in gpus}
        self.rank_of = {g["index"]: r for r, g in enumerate(gpus)}
        self.nvl: dict[str, list[tuple[str, int, str]]] = {}
        self.c2c: dict[str, tuple[int, int]] = {}
        self.pcilinks: dict[str, list[str]] = {}
        self.uplinks: dict[str, tuple] = {}
        self._collect_links()
        self.w = _Writer()

    def _resolve(self, rec: dict, raw: bool = True) -> tuple[str, Optional[str]]:
        """-> ("cpu", numaid str) or ("pci", switch id) for where ``rec`` hangs in NCCL's tree."""
        p = (rec.get("raw_parent") if raw and rec.get("raw_parent") in self.tree_nodes else None) or rec.get("parent")
        seen: set = set()
        while p in self.host_bridges and p not in seen:
            seen.add(p)
            hb = self.host_bridges[p]
            p = hb.get("parent") or (f"CPU{hb['numa_node']}" if hb.get("numa_node") is not None else None)
        if p in self.tree_nodes:
            return "pci", p
        n = _cpu_num(p) if p else None
        if n is None:
            n = rec.get("numa_node")
        return "cpu", str(n if n is not None else -1)

    def _add(self, where: tuple, sort_key: str, kind: str, item: Any) -> None:
        """Hang ``item`` under ``where``; siblings are written in the order of the XML the document was
        read from (``xml_line``: NCCL's GPU and NIC order, and so its search order, follow it), then
        in ``sort_key`` (bus id) order."""
        recs = item if isinstance(item, list) else [item]
        lines = [r.get("xml_line") for r in recs if isinstance(r, dict) and isinstance(r.get("xml_line"), int)]
        self.children.setdefault(where, []).append(((min(lines) if lines else 1 << 30, sort_key), kind, item))

    def _collect_tree(self) -> None:
        """Place every switch, GPU, NIC (grouped by PCI function) and untyped PCI device under its parent."""
        doc, tree_nodes, bus_of = self.doc, self.tree_nodes, self.bus_of
        for sid, s in tree_nodes.items():
            where = self._resolve(s)
            if where == ("pci", sid):
                where = ("cpu", str(s.get("numa_node") if s.get("numa_node") is not None else -1))
            self._add(where, bus_of[sid], "switch", s)
        for g in self.gpus:
            self._add(self._resolve(g), g["pci_bus_id"], "gpu", g)
        nic_groups: dict[str, list[dict]] = {}
        for n in doc.get("nics", []):
            if n.get("pci_bus_id"):
                nic_groups.setdefault(normalize_bus_id(n.get("nccl_busid") or "") or n["pci_bus_id"], []).append(n)
            else:
                self._add(self._resolve(n), "~" + n["name"], "socketnic", n)
        for bus, group in nic_groups.items():
            self._add(self._resolve(group[0]), bus, "nic", group)
        represented = {g["pci_bus_id"] for g in self.gpus} | set(nic_groups) | {bus_of[i] for i in tree_nodes} | \
            {normalize_bus_id(i) for i in tree_nodes}
        for d in doc.get("pci_devices", []) or []:
            # Only devices placed in a tree (an NCCL XML's untyped leaves, NVMe drives...): the sysfs
            # probe lists every function (root ports, downstream ports) without a parent.
            bdf = normalize_bus_id(d.get("bdf") or "") if isinstance(d, dict) else None
            if bdf and bdf not in represented and d.get("parent") and d.get("role") not in ("switch_up", "switch_down",
                                                                                            "root_port", "bridge"):
                self._add(self._resolve(d), bdf, "dev", d)
                represented.add(bdf)
        for s in self.nvswitch.values():
            # NVSwitches seen as PCI devices (rare in dumps) stay where they were.
            b = normalize_bus_id(s.get("pci_bus_id") or "")
            if b and b not in represented and (s.get("parent") in tree_nodes
                                               or _cpu_num(s.get("parent") or "") is not None):
                self._add(self._resolve(s, raw=False), b, "dev", dict(switch_ids(s), **{"class": "0x068000", "bdf": b}))

    def _collect_links(self) -> None:
        """Upstream PCIe speeds, each GPU's ``<nvlink>``/``<c2c>`` children and each switch's ``<pcilink>`` targets."""
        gpu_by_id, nvswitch, tree_nodes = self.gpu_by_id, self.nvswitch, self.tree_nodes
        nvl, c2c, pcilinks, uplinks = self.nvl, self.c2c, self.pcilinks, self.uplinks
        for l in self.doc.get("links", []):
            if l.get("kind") == "pcie" and not l.get("pcilink") and l.get("a") not in uplinks:
                uplinks[l.get("a")] = (l.get("gen"), l.get("width"))
        for l in self.doc.get("links", []):
            kind, a, b = l.get("kind"), l.get("a"), l.get("b")
            if kind == "nvlink":
                count = l.get("count") or 1
                for me, other in ((a, b), (b, a)):
                    if me not in gpu_by_id:
                        continue
                    if other in gpu_by_id:
                        og = gpu_by_id[other]
                        nvl.setdefault(me, []).append((og["pci_bus_id"], count, (og.get("pci_ids") or {}).get("class")
                                                       or "0x030200"))
                    elif other in nvswitch:
                        sw = nvswitch[other]
                        target = normalize_bus_id(sw.get("pci_bus_id") or "") or NVS_SENTINEL
                        nvl.setdefault(me, []).append((target, count, "0x068000"))
                    elif _cpu_num(other) is not None:
                        # Power9 NVLink to the CPU: NCCL resolves the CPU itself; target is informative.
                        nvl.setdefault(me, []).append((NVS_SENTINEL, count, "0x068001"))
            elif kind == "c2c":
                for me in (a, b):
                    if me in gpu_by_id:
                        count = l.get("count") or 1
                        c2c[me] = (int(round(float(l.get("bw_GBps") or 0) * 1000 / count)), count)
            elif kind == "pcie" and l.get("pcilink") and a in tree_nodes and b in tree_nodes:
                pcilinks.setdefault(a, []).append(self.bus_of[b])
                pcilinks.setdefault(b, []).append(self.bus_of[a])

    def write(self) -> str:
        """The whole ``<system>`` element: one ``<cpu>`` per NUMA node with its PCI tree."""
        w = self.w
        w.open(0, "system", [("version", "1")], leaf=False)
        line = {n: (r.get("xml_line") if isinstance(r.get("xml_line"), int) else 1 << 30)
                for n, r in self.numa_recs.items()}
        for n in sorted(self.cpu_ids, key=lambda n: (line.get(n, 1 << 30), n)):
            self._write_cpu(n)
        w.close(0, "system")
        return "\n".join(w.lines) + "\n"

    def _write_cpu(self, n: int) -> None:
        """``<cpu numaid affinity arch vendor familyid modelid>`` (only attributes NCCL would not fill itself)."""
        rec = self.numa_recs.get(n, {})
        host = self.host
        arch = _ARCH_NAMES.get(str(rec.get("arch") or host.get("cpu_arch") or "").lower())
        vendor = rec.get("vendor") if rec.get("vendor") in ("GenuineIntel", "AuthenticAMD", "CentaurHauls") else \
            _nccl_vendor(rec.get("vendor") or host.get("cpu_vendor"))
        affinity = None
        if rec.get("cpus"):
            try:
                affinity = cpulist_to_mask(parse_cpulist(rec["cpus"]))
            except ValueError:
                affinity = None
            if affinity and len(affinity) > MAX_VALUE_LEN:
                affinity = None  # too long for NCCL's parser; NCCL reads the node's cpumap itself
        # CPUID family/model: NCCL reads them for every x86 <cpu> it loads (topo.cc ncclTopoAddCpu), so
        # a file that names the vendor must carry them; an Intel model name gives them (facts.cpu_identity).
        ident = facts.cpu_identity(rec, host) if arch in (None, "x86_64") and vendor else {}
        family = rec.get("familyid") if rec.get("familyid") is not None else ident.get("family")
        model = rec.get("modelid") if rec.get("modelid") is not None else ident.get("model")
        attrs = [("numaid", n), ("affinity", affinity), ("arch", arch),
                 ("vendor", vendor if arch in (None, "x86_64") else None),
                 ("familyid", family if model is not None else None), ("modelid", model if family is not None else None)]
        kids = self.children.get(("cpu", str(n)), [])
        self.w.open(1, "cpu", attrs, leaf=not kids)
        if kids:
            self._emit(("cpu", str(n)), 2)
            self.w.close(1, "cpu")

    def _emit(self, where: tuple, depth: int) -> None:
        """Write the children of ``where`` (socket NICs last), each by its kind's writer."""
        for (_line, key), kind, item in sorted(self.children.get(where, []), key=lambda t: (t[1] == "socketnic", t[0])):
            if kind == "switch":
                self._write_switch(item, depth)
            elif kind == "gpu":
                self._write_gpu(item, depth)
            elif kind == "nic":
                self._write_nic(key, item, depth)
            elif kind == "socketnic":
                self.w.open(depth, "nic", [], False)
                _emit_nets(self.w, depth + 1, self.doc, item)
                self.w.close(depth, "nic")
            elif kind == "dev":
                self._write_dev(item, depth)

    def _write_switch(self, item: dict, depth: int) -> None:
        """A PCI switch: ``<pci>`` with its children and ``<pcilink>`` elements (Broadcom virtual links)."""
        w = self.w
        sid = item["id"]
        kids = self.children.get(("pci", sid), [])
        links = sorted(set(self.pcilinks.get(sid, [])))
        leaf = not kids and not links
        gen, width = _pcie_of(item, self.uplinks, sid)
        w.open(depth, "pci", _pci_attrs(self.bus_of[sid], switch_ids(item), gen, width, "0x060400"), leaf)
        if not leaf:
            self._emit(("pci", sid), depth + 1)
            for t in links:
                w.open(depth + 1, "pcilink", [("target", t)], leaf=True)
            w.close(depth, "pci")

    def _write_gpu(self, g: dict, depth: int) -> None:
        """A GPU: ``<pci>`` holding ``<gpu dev sm rank gdr>`` with its ``<nvlink>`` and ``<c2c>`` elements."""
        w = self.w
        gid = g["pci_bus_id"]
        gen, width = _pcie_of(g, self.uplinks, gid)
        if isinstance(g.get("pci_ids"), dict):  # read from an XML: write back what it said
            ids, vendor = g["pci_ids"], None
        else:  # a probe: the vendor is known, the device id maybe (sysfs pci_device_id)
            ids = {"device": g.get("pci_device_id")} if isinstance(g.get("pci_device_id"), str) else {}
            vendor = "0x1002" if g.get("vendor") == "amd" else "0x10de"
        attrs = _pci_attrs(gid, ids, gen, width, "0x030200", vendor)
        sm = facts.gpu_sm(g)[0] if g.get("sm") is not None or g.get("compute_capability") is not None else None
        links = sorted(self.nvl.get(gid, []))
        has_sub = bool(links) or gid in self.c2c
        if g.get("index_inferred") and not has_sub and sm is None:
            # A skeleton's bare GPU: writing <gpu dev=...> would make NCCL trust our guessed
            # index (xml.cc only fills dev when it is missing), so keep it bare.
            w.open(depth, "pci", attrs, True)
            return
        w.open(depth, "pci", attrs, False)
        w.open(depth + 1, "gpu", [("dev", g["index"]), ("sm", sm), ("rank", self.rank_of[g["index"]]),
                                  ("gdr", g.get("gdr"))], leaf=not has_sub)
        if has_sub:
            for target, count, tclass in links:
                w.open(depth + 2, "nvlink", [("target", target), ("count", count), ("tclass", tclass)], True)
            if gid in self.c2c:
                bw, count = self.c2c[gid]
                w.open(depth + 2, "c2c", [("bw", bw), ("count", count)], True)
            w.close(depth + 1, "gpu")
        w.close(depth, "pci")

    def _write_nic(self, bus: str, group: list, depth: int) -> None:
        """A NIC PCI function: ``<pci>`` holding ``<nic>`` with one ``<net>`` per port of each NIC in ``group``."""
        w = self.w
        first = group[0]
        gen, width = _pcie_of(first, self.uplinks, first["pci_bus_id"])
        ll = (first.get("link_layer") or "").lower()
        attrs = _pci_attrs(bus, first.get("pci_ids") or {}, gen, width,
                           "0x020700" if ll == "infiniband" else "0x020000")
        if len(group) == 1 and first["name"] == first["pci_bus_id"] and not first.get("ports") \
                and first.get("nccl_dev") is None:
            # A skeleton's bare NIC (NCCL matches it by busid and fills the rest).
            w.open(depth, "pci", attrs, True)
            return
        w.open(depth, "pci", attrs, False)
        w.open(depth + 1, "nic", [], False)
        for n in sorted(group, key=lambda n: _nic_dev(self.doc, n)):
            _emit_nets(w, depth + 2, self.doc, n)
        w.close(depth + 1, "nic")
        w.close(depth, "pci")

    def _write_dev(self, d: dict, depth: int) -> None:
        """An untyped PCI device (a skeleton's leaf, an NVSwitch seen on PCI): a bare ``<pci>``."""
        ids = switch_ids(d)
        gen, width = d.get("gen"), d.get("width")
        attrs = [("busid", normalize_bus_id(d["bdf"]))] + [(k, ids.get(k)) for k in _ID_KEYS]
        if gen or width:
            attrs += [("link_speed", facts.PCI_GEN_SPEED.get(gen or 0, "")), ("link_width", str(width) if width else "")]
        self.w.open(depth, "pci", attrs, True)


def _nic_dev(doc: dict, nic: dict) -> int:
    if isinstance(nic.get("nccl_dev"), int):
        return nic["nccl_dev"]
    names = sorted((n["name"] for n in doc.get("nics", [])), key=lambda s: [int(t) if t.isdigit() else t
                                                                          for t in re.split(r"(\d+)", s)])
    return 1_000_000 + names.index(nic["name"])


def _emit_nets(w: _Writer, depth: int, doc: dict, nic: dict) -> None:
    dev = _nic_dev(doc, nic)
    if dev >= 1_000_000:
        dev -= 1_000_000  # no NCCL dev known: enumeration order (NCCL overwrites dev anyway)
    ports = [p for p in nic.get("ports") or [] if isinstance(p, dict)] or [{}]
    extra = nic.get("nccl_attrs") or {}
    for i, p in enumerate(ports):
        rate = p.get("rate_gbps")
        speed = facts.nic_speed_mbps(rate) if isinstance(rate, (int, float)) and rate > 0 else None
        attrs = [("name", nic["name"]), ("dev", dev + i), ("speed", speed), ("port", p.get("port")),
                 ("latency", extra.get("latency")),
                 ("guid", guid_to_nccl(nic.get("sys_image_guid") or nic.get("guid"))
                  or (None if facts.nic_is_rdma(nic) else f"0x{dev + i:x}")),  # socket: dev (net_socket.cc)
                 ("maxconn", extra.get("maxconn")),
                 ("gdr", nic.get("gdr"))]
        attrs += [(k, v) for k, v in extra.items() if k not in ("latency", "maxconn")]
        w.open(depth, "net", attrs, True)


def write_nccl_xml(doc: dict, path: str) -> str:
    """Write :func:`export_nccl_xml` to ``path``; returns the text.  OSError -> InputError."""
    text = export_nccl_xml(doc)
    try:
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
    except OSError as e:
        raise InputError(f"cannot write: {e.strerror}", path) from None
    return text


__all__ = ["parse_nccl_xml", "parse_nccl_graph", "flatten_bcm", "has_bcm_switch", "export_nccl_xml", "write_nccl_xml", "switch_ids",
           "guid_from_nccl", "guid_to_nccl",
           "bcm_gen", "bcm_device_id", "parse_link_speed", "pci_class_type"]
