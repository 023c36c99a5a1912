"""Rendering of a topology document (rendering only; nothing here parses a capture).

* :func:`matrix_text` -- the ``nvidia-smi topo -m`` layout (NIC columns ``NIC0..`` with a NIC
  Legend, CPU Affinity / NUMA Affinity / GPU NUMA ID, legend), plain text that
  :func:`gpucomm.probes.formats.smi_topo.parse_topo_text` reads back to the same matrix.
* :func:`matrix_rich` -- the same matrix on a terminal, one colour per level.
* :func:`summary_table` -- host, sources, NUMA nodes, GPUs, NICs, warnings, then the matrix.
* :func:`tree` -- the PCIe hierarchy (CPU/NUMA -> host bridges -> switches -> GPUs/NICs) with
  link speeds, then the NVLink/NVSwitch and other links; a flat list when there is no tree.
* :func:`dot` -- Graphviz DOT of devices, switches and links (deterministic).

rich is imported inside the functions that need it (``gpucomm --help`` must not pay for it).
"""
from __future__ import annotations

import re
from typing import Optional

from gpucomm.probes.facts import gpu_sm, nic_rate_gbps, nvlink_spec_GBps_per_link, pcie_bw_GBps
from gpucomm.probes.model import cpu_id, format_cpulist, gpu_id, host_of, matrix_order, nic_id
from gpucomm.probes.model import natural_key as _natural

from gpucomm.render.tables import print_table

_GPU_KEY = re.compile(r"^GPU(\d+)$")

# nvidia-smi's own legend (driver >= 418 wording), printed under the matrix.
LEGEND = (
    ("X", "Self"),
    ("SYS", "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)"),
    ("NODE", "Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node"),
    ("PHB", "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)"),
    ("PXB", "Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)"),
    ("PIX", "Connection traversing at most a single PCIe bridge"),
    ("NV#", "Connection traversing a bonded set of # NVLinks"),
)
SHORT_LEGEND = (("X", "self"), ("NV#", "# bonded NVLinks"), ("PIX", "at most one PCIe bridge"),
                ("PXB", "several PCIe bridges"), ("PHB", "PCIe host bridge"),
                ("NODE", "host bridges within a NUMA node"), ("SYS", "across NUMA nodes (SMP link)"))
TRAILING = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


def level_style(cell: str) -> str:
    """rich style for one matrix cell: NVLink green, same switch cyan, host bridge/NUMA yellow,
    across sockets red."""
    if cell == "X":
        return "bold"
    if cell.startswith("NV") or cell.startswith("XGMI"):
        return "green"
    if cell in ("PIX", "PXB"):
        return "cyan"
    if cell in ("PHB", "NODE"):
        return "yellow"
    if cell in ("SYS", "SOC"):
        return "red"
    return "dim"


# --------------------------------------------------------------------------------------------
# Matrix
def _matrix_parts(doc: dict) -> dict:
    """Everything both matrix renderers need: ordered keys, display labels, cells, trailing values."""
    matrix = doc.get("matrix") or {}
    order = [k for k in matrix_order(doc) if k in matrix]
    # Columns seen only inside rows (a hand-edited document) still get a column.
    for row in matrix.values():
        for k in row:
            if k not in order:
                order.append(k)
    gpus = [k for k in order if _GPU_KEY.match(k)]
    nics = [k for k in order if not _GPU_KEY.match(k)]
    order = gpus + nics
    label = {k: k for k in gpus}
    label.update({k: f"NIC{j}" for j, k in enumerate(nics)})
    by_key = {f"GPU{g['index']}": g for g in doc.get("gpus", [])}
    trailing = {}
    for k in gpus:
        g = by_key.get(k, {})
        cpu = g.get("cpu_affinity") or "N/A"
        numa = format_cpulist(g.get("numa_affinity") or []) or "N/A"
        gnid = g.get("gpu_numa_id")
        trailing[k] = (cpu, numa, str(gnid) if isinstance(gnid, int) else "N/A")
    cells = {r: {c: ("X" if r == c else (matrix.get(r) or {}).get(c, "N/A")) for c in order} for r in order}
    return {"order": order, "gpus": gpus, "nics": nics, "label": label, "cells": cells, "trailing": trailing}


def matrix_text(doc: dict) -> str:
    """The matrix as ``nvidia-smi topo -m`` prints it (spaces instead of tabs, so that it lines up
    whatever the tab width)."""
    p = _matrix_parts(doc)
    order, label, cells = p["order"], p["label"], p["cells"]
    if not order:
        return "No GPUs or NICs in the topology matrix.\n"
    w0 = max(8, max(len(label[k]) for k in order) + 1)
    widths = {c: max(8, len(label[c]) + 1, max(len(cells[r][c]) + 2 for r in order)) for c in order}
    tw = [max(len(TRAILING[i]), max((len(v[i]) for v in p["trailing"].values()), default=0)) + 4
          for i in range(3)]

    def cell(v: str) -> str:
        return " X" if v == "X" else v

    lines = [(" " * w0 + "".join(label[c].ljust(widths[c]) for c in order)
              + "".join(TRAILING[i].ljust(tw[i]) for i in range(3))).rstrip()]
    for r in order:
        s = label[r].ljust(w0) + "".join(cell(cells[r][c]).ljust(widths[c]) for c in order)
        if r in p["trailing"]:
            s += "".join(p["trailing"][r][i].ljust(tw[i]) for i in range(3))
        lines.append(s.rstrip())
    lines += ["", "Legend:", ""]
    lines += [f"  {code:<4} = {text}" for code, text in LEGEND]
    if p["nics"]:
        lines += ["", "NIC Legend:", ""]
        lines += [f"  {label[k]}: {k}" for k in p["nics"]]
    return "\n".join(lines) + "\n"


def matrix_rich(doc: dict, console) -> None:
    """Print the matrix on a rich console, one colour per connection level."""
    from rich.table import Table
    from rich.text import Text

    p = _matrix_parts(doc)
    order, label, cells = p["order"], p["label"], p["cells"]
    if not order:
        console.print("No GPUs or NICs in the topology matrix.")
        return
    t = Table(box=None, pad_edge=False, show_edge=False, header_style="bold", title="Topology matrix (nvidia-smi topo -m)",
              title_justify="left")
    t.add_column("")
    for c in order:
        t.add_column(label[c], no_wrap=True)
    for title in TRAILING:
        t.add_column(title, no_wrap=True)
    for r in order:
        row = [Text(label[r], style="bold")]
        row += [Text(cells[r][c], style=level_style(cells[r][c])) for c in order]
        row += [Text(v) for v in p["trailing"].get(r, ("", "", ""))]
        t.add_row(*row)
    if console.measure(t).minimum > console.width:
        # Too wide for this terminal: nvidia-smi's own text layout, each row one unbroken line.
        console.print("Topology matrix (nvidia-smi topo -m)", soft_wrap=True)
        for line in matrix_text(doc).rstrip("\n").split("\n"):
            console.print(Text(line), soft_wrap=True)
        return
    print_table(console, t)
    legend = Text("Legend: ")
    for code, text in SHORT_LEGEND:
        legend.append(code, style=level_style("NV1" if code == "NV#" else code))
        legend.append(f" {text}" + ("  " if code != SHORT_LEGEND[-1][0] else ""))
    console.print(legend, soft_wrap=True)
    if p["nics"]:
        console.print("NIC Legend: " + ", ".join(f"{label[k]}={k}" for k in p["nics"]), soft_wrap=True)


# --------------------------------------------------------------------------------------------
# Summary
def _dash(v) -> str:
    return "-" if v is None or v == "" or v == [] else str(v)


def _pcie_text(pcie: Optional[dict]) -> str:
    if not pcie:
        return "-"

    def one(gen, width):
        if gen is None and width is None:
            return "?"
        return f"Gen{gen if gen is not None else '?'} x{width if width is not None else '?'}"

    return f"{one(pcie.get('gen'), pcie.get('width'))} / {one(pcie.get('max_gen'), pcie.get('max_width'))}"


def _gpu_nvlink_text(doc: dict, g: dict) -> str:
    """NVLink summary of one GPU: per-link records when the source had them, else from links."""
    recs = g.get("nvlink") or []
    if recs:
        active = [l for l in recs if str(l.get("state", "")).lower() in ("active", "up", "1", "true")]
        bw = sum(l.get("bw_GBps") or 0 for l in active)
        s = f"{len(active)}/{len(recs)} active"
        return s + nvlink_figures(bw, len(active), gpu_sm(g)[0])
    gid, gkey = gpu_id(g), f"GPU{g['index']}"
    nvs = {s["id"] for s in doc.get("switches", []) if s.get("kind") == "nvswitch"}
    total, peers = 0, set()
    for l in doc.get("links", []):
        if l.get("kind") != "nvlink":
            continue
        ends = {l["a"], l["b"]}
        if gid in ends or gkey in ends:
            total += int(l.get("count") or 1)
            peers |= ends - {gid, gkey}
    if not total:
        return "-"
    switches = peers & nvs
    parts = []
    if peers - switches:
        n = len(peers - switches)
        parts.append(f"{n} GPU peer{'' if n == 1 else 's'}")
    if switches:
        parts.append(f"{len(switches)} NVSwitch(es)")
    return f"{total} link{'' if total == 1 else 's'} to " + " + ".join(parts)


def nvlink_figures(nccl_bw: float, links: int, sm: Optional[int]) -> str:
    """``, NCCL model 370.8 GB/s, spec 450 GB/s/dir``: NCCL's figure for the GPU's active links (what
    its search and tuning use) beside the data sheet's per-direction bandwidth of as many links."""
    spec = nvlink_spec_GBps_per_link(sm)
    out = f", NCCL model {nccl_bw:g} GB/s" if nccl_bw else ""
    if spec and links:
        out += f", spec {spec * links:g} GB/s/dir"
    return out


def _ports_text(nic: dict) -> str:
    parts = []
    for p in nic.get("ports") or []:
        rate = p.get("rate_gbps")
        parts.append(f"{p.get('port')}: {_dash(p.get('state'))}" + (f" {rate:g} Gb/s" if rate else ""))
    return ", ".join(parts) or "-"


def summary_table(doc: dict, console) -> None:
    """Rich tables: host, sources, NUMA nodes, GPUs, NICs, warnings, then the matrix."""
    from rich.table import Table

    host = doc.get("host") or {}
    t = Table(title="Host", title_justify="left", show_header=False, box=None, pad_edge=False)
    t.add_column("field", style="bold")
    t.add_column("value")
    for k in ("hostname", "provenance", "os", "kernel", "driver_version", "cuda_version", "cpu_vendor", "cpu_model",
              "cpu_arch", "sockets", "collected_at"):
        if k in host:
            t.add_row(k, _dash(host.get(k)))
    print_table(console, t)

    if doc.get("sources"):
        t = Table(title="Sources", title_justify="left")
        for c in ("source", "status", "detail"):
            t.add_column(c)
        colour = {"ok": "green", "partial": "yellow", "unavailable": "dim", "error": "red"}
        for s in doc["sources"]:
            st = s.get("status", "")
            t.add_row(s.get("name", ""), f"[{colour.get(st, '')}]{st}[/]" if colour.get(st) else st,
                      _escape(s.get("detail", "")))
        print_table(console, t, prose=("detail",))

    multi = _hosts_text(doc)
    if multi:
        console.print(multi, soft_wrap=True)
    if doc.get("numa_nodes"):
        t = Table(title="NUMA nodes", title_justify="left")
        for c in ("node", "CPUs", "memory", "distances") if not multi else ("host", "node", "CPUs", "memory", "distances"):
            t.add_column(c)
        for n in doc["numa_nodes"]:
            mem = n.get("memory_bytes")
            row = [str(n.get("id")), _dash(n.get("cpus")), f"{mem / 2**30:.1f} GiB" if mem else "-",
                   " ".join(map(str, n.get("distances") or [])) or "-"]
            t.add_row(*([str(host_of(n))] if multi else []), *row)
        print_table(console, t)

    t = Table(title=f"GPUs ({len(doc.get('gpus', []))})", title_justify="left")
    for c in ("GPU", "host", "name", "bus id", "NUMA", "CPUs", "PCIe cur / max", "NVLink") if multi else \
            ("GPU", "name", "bus id", "NUMA", "CPUs", "PCIe cur / max", "NVLink"):
        t.add_column(c, no_wrap=c in ("bus id", "PCIe cur / max"))
    for g in doc.get("gpus", []):
        numa = g.get("numa_node")
        aff = g.get("numa_affinity") or []
        numa_s = str(numa) if numa is not None else (format_cpulist(aff) if aff else "-")
        where = [f"{host_of(g)}/GPU{g['local_index'] if isinstance(g.get('local_index'), int) else g['index']}"] \
            if multi else []
        t.add_row(str(g["index"]), *where, _escape(_dash(g.get("name"))), _dash(g.get("pci_bus_id")), numa_s,
                  _dash(g.get("cpu_affinity")), _pcie_text(g.get("pcie")), _gpu_nvlink_text(doc, g))
    print_table(console, t, prose=("name", "NVLink"))
    _fabric_table(doc, console)

    if doc.get("nics"):
        t = Table(title=f"NICs ({len(doc['nics'])})", title_justify="left")
        for c in ("NIC", "netdev", "bus id", "NUMA", "link layer", "ports"):
            t.add_column(c)
        for n in doc["nics"]:
            t.add_row(_escape(n["name"]), _dash(n.get("netdev")), _dash(n.get("pci_bus_id")), _dash(n.get("numa_node")),
                      _dash(n.get("link_layer")), _ports_text(n))
        print_table(console, t, prose=("ports",))

    # Other PCI functions (a GPU-less host still shows what it has).  Only when there are no GPUs,
    # or with --verbose, to keep the GPU-node view short.
    from gpucomm.settings import SETTINGS

    pci = doc.get("pci_devices") or []
    if pci and (not doc.get("gpus") or SETTINGS.verbose):
        t = Table(title=f"PCI devices ({len(pci)})", title_justify="left")
        for c in ("bus id", "class", "vendor:device", "role", "NUMA"):
            t.add_column(c)
        for p in pci:
            t.add_row(_dash(p.get("bdf")), _dash(p.get("class")), f"{p.get('vendor') or '-'}:{p.get('device') or '-'}",
                      _dash(p.get("role")), _dash(p.get("numa_node")))
        print_table(console, t)
    other_net = [n for n in doc.get("net_interfaces") or [] if n.get("kind") != "physical"]
    if other_net:
        console.print("Other network interfaces: " + ", ".join(
            f"{_escape(n.get('name', '?'))} ({n.get('kind', '?')}, {n.get('operstate') or '-'})" for n in other_net),
            soft_wrap=True)

    if doc.get("warnings"):
        console.print("[bold yellow]Warnings[/]")
        for w in doc["warnings"]:
            console.print(f"  [yellow]![/] {_escape(w)}", soft_wrap=True)
    matrix_rich(doc, console)


def _hosts_text(doc: dict) -> str:
    """'Hosts: 0 = name (host_hash), 1 = ...' for a document of several hosts, '' for one."""
    named = {h.get("id"): h for h in doc.get("hosts") or [] if isinstance(h, dict)}
    ids = sorted(set(named) | {host_of(g) for g in doc.get("gpus", [])})
    if len(ids) < 2:
        return ""
    parts = []
    for i in ids:
        h = named.get(i) or {}
        extra = ", ".join(x for x in (h.get("hostname"), f"host_hash {h['host_hash']}" if h.get("host_hash") else None)
                          if x)
        parts.append(f"{i}" + (f" ({_escape(extra)})" if extra else ""))
    return f"Hosts ({len(ids)}): " + "; ".join(parts) + " -- graph ids and NIC names of host h > 0 start with h/"


def _fabric_table(doc: dict, console) -> None:
    """The GPUs' multi-node NVLink fabric (NVML / nvidia-smi -q / NCCL log), the IMEX domain and what
    an NCCL log said about MNNVL, when the document has any of them."""
    from rich.table import Table

    from gpucomm.probes.facts import fabric_health_problems

    rows = [g for g in doc.get("gpus", []) if isinstance(g.get("fabric"), dict)]
    if rows:
        t = Table(title="NVLink fabric (multi-node NVLink)", title_justify="left")
        for c in ("GPU", "cluster UUID", "clique", "state", "health", "rack position"):
            t.add_column(c, no_wrap=c == "cluster UUID")
        for g in rows:
            f = g["fabric"]
            bad = fabric_health_problems(f.get("health_mask"))
            summary = f.get("health_summary")
            if summary and summary != "healthy":
                bad.append(f"summary={summary}")
            health = ", ".join(bad) if bad else ("healthy" if f.get("health_mask") or summary else "-")
            if f.get("status") not in (None, "NVML_SUCCESS"):
                health = f"status {f['status']}" + (f"; {health}" if health != "-" else "")
            p = g.get("platform") or {}
            where = ", ".join(f"{k.replace('_', ' ')} {p[k]}" for k in ("chassis_serial", "slot", "tray_index", "host_id",
                                                                       "module_id") if p.get(k) is not None)
            gpu = f"{host_of(g)}/GPU{g.get('local_index', g['index'])}" if doc.get("hosts") else str(g["index"])
            t.add_row(gpu, _dash(f.get("cluster_uuid")), _dash(f.get("clique_id")), _dash(f.get("state")),
                      _escape(health), _escape(where) or "-")
        print_table(console, t, prose=("health", "rack position"))
    imex = doc.get("imex")
    if isinstance(imex, dict):
        nodes = [n for n in imex.get("nodes") or [] if isinstance(n, dict)]
        ready = sum(1 for n in nodes if n.get("state") == "READY")
        conn = imex.get("connectivity") or {}
        console.print(f"IMEX domain {imex.get('domain_state') or 'state unknown'}: {len(nodes)} node(s), {ready} READY"
                      + (f"; connectivity {', '.join(f'{k} {v}' for k, v in sorted(conn.items()))}" if conn else ""),
                      soft_wrap=True)
    nccl = doc.get("nccl")
    if isinstance(nccl, dict):
        mn = nccl.get("mnnvl") if isinstance(nccl.get("mnnvl"), dict) else {}
        text = f"NCCL {nccl.get('version') or '(version not in the log)'}"
        if mn.get("enabled") is not None:
            text += f": MNNVL {'on' if mn['enabled'] else 'off'}"
        if mn.get("clique_size"):
            text += f", clique {mn.get('clique_id'):#x} of {mn['clique_size']} rank(s)"
        if mn.get("nvl_domain_size"):
            text += f", nvlDomainSize {mn['nvl_domain_size']}"
        env = {k: v for k, v in (nccl.get("env") or {}).items() if k.startswith("NCCL_MNNVL")}
        if env:
            text += "; " + ", ".join(f"{k}={v}" for k, v in sorted(env.items()))
        console.print(_escape(text), soft_wrap=True)


def _escape(s: str) -> str:
    from rich.markup import escape

    return escape(str(s))


# --------------------------------------------------------------------------------------------
# Tree


class _Graph:
    """The PCI tree as parent pointers, plus display labels; shared by :func:`tree` and :func:`dot`."""

    def __init__(self, doc: dict):
        self.doc = doc
        self.kind: dict = {}
        self.label: dict = {}
        self.parent: dict = {}
        self.rec: dict = {}
        switches = doc.get("switches", [])
        for s in switches:
            self.kind[s["id"]] = s.get("kind") or "pcie"
            self.rec[s["id"]] = s
        for g in doc.get("gpus", []):
            i = gpu_id(g)
            self.kind[i], self.rec[i] = "gpu", g
        for n in doc.get("nics", []):
            i = nic_id(n)
            self.kind[i], self.rec[i] = "nic", n
        cpus = {cpu_id(n["id"]) for n in doc.get("numa_nodes", []) if isinstance(n.get("id"), int)}
        for node, r in list(self.rec.items()):
            p = r.get("parent")
            if p is None and r.get("numa_node") is not None and self.kind[node] != "nvswitch":
                p = cpu_id(r["numa_node"])
            if p is not None:
                self.parent[node] = p
                if p.startswith("CPU") and p not in self.kind:
                    cpus.add(p)
        for l in doc.get("links", []):
            for e in (l["a"], l["b"]):
                if e.startswith("CPU") and re.match(r"^CPU\d+$", e):
                    cpus.add(e)
        for c in cpus:
            self.kind.setdefault(c, "cpu")
        self.has_tree = any(r.get("parent") for r in self.rec.values()) or bool(switches)

    def display(self, node: str) -> str:
        k = self.kind.get(node)
        r = self.rec.get(node, {})
        if k == "gpu":
            return f"GPU{r['index']}"
        if k == "nic":
            return r["name"]
        return node

    def children(self) -> dict:
        ch: dict = {}
        for node, p in self.parent.items():
            ch.setdefault(p, []).append(node)
        order = {"host_bridge": 0, "pcie": 1, "nvswitch": 2, "gpu": 3, "nic": 4}
        for p in ch:
            ch[p].sort(key=lambda n: (order.get(self.kind.get(n), 9), _natural(self.display(n))))
        return ch

    def pcie_link(self, a: str, b: str) -> Optional[dict]:
        for l in self.doc.get("links", []):
            if l.get("kind") == "pcie" and {l["a"], l["b"]} == {a, b}:
                return l
        return None


def _speed(gen, width, bw=None) -> str:
    if gen is None and width is None and bw is None:
        return ""
    s = f"Gen{gen if gen is not None else '?'} x{width if width is not None else '?'}"
    if bw is None and (gen is not None or width is not None):
        bw = pcie_bw_GBps(gen, width)
    return s + (f", {bw:g} GB/s" if bw is not None else "")


def _node_text(g: _Graph, node: str) -> str:
    from rich.markup import escape

    k, r = g.kind.get(node), g.rec.get(node, {})
    up = g.parent.get(node)
    link = g.pcie_link(node, up) if up else None
    speed = _speed(link.get("gen"), link.get("width"), link.get("bw_GBps")) if link else ""
    if k == "cpu":
        n = int(node[3:])
        numa = next((x for x in g.doc.get("numa_nodes", []) if x.get("id") == n), {})
        cpus = numa.get("cpus")
        return f"[bold]{node}[/] NUMA {n}" + (f"  cpus {cpus}" if cpus else "")
    if k == "host_bridge":
        return f"[bold]host bridge[/] {escape(node)}"
    if k == "pcie":
        bus = r.get("pci_bus_id") or node
        return f"PCIe switch {escape(bus)}" + (f"  [dim]({speed})[/]" if speed else "")
    if k == "nvswitch":
        return f"NVSwitch {escape(node)}"
    if k == "gpu":
        pcie = r.get("pcie") or {}
        if not speed and pcie:
            speed = _speed(pcie.get("gen"), pcie.get("width"))
            if (pcie.get("max_gen"), pcie.get("max_width")) not in ((None, None), (pcie.get("gen"), pcie.get("width"))):
                speed += f" (max Gen{pcie.get('max_gen')} x{pcie.get('max_width')})"
        parts = [f"[green bold]GPU{r['index']}[/]", escape(r.get("name") or ""), escape(r.get("pci_bus_id") or "")]
        s = " ".join(p for p in parts if p)
        return s + (f"  [dim]({speed})[/]" if speed else "")
    if k == "nic":
        rate = nic_rate_gbps(r)
        extra = ", ".join(x for x in (r.get("netdev"), r.get("link_layer"), f"{rate:g} Gb/s" if rate else None) if x)
        s = f"[cyan bold]{escape(r['name'])}[/]" + (f" {escape(r['pci_bus_id'])}" if r.get("pci_bus_id") else "")
        s += f" {escape(extra)}" if extra else ""
        return s + (f"  [dim]({speed})[/]" if speed else "")
    return escape(node)


def tree(doc: dict, console) -> None:
    """Print the PCIe hierarchy as a rich Tree, then NVLink/NVSwitch and other links."""
    from rich.tree import Tree

    g = _Graph(doc)
    ch = g.children()
    title = "Topology" + ("" if g.has_tree else " (no PCI tree in this topology: devices grouped by NUMA node)")
    root = Tree(f"[bold]{title}[/]")
    placed: set = set()

    def add(branch, node, depth=0):
        placed.add(node)
        b = branch.add(_node_text(g, node))
        for c in ch.get(node, []):
            if c not in placed and depth < 64:
                add(b, c, depth + 1)

    # Roots: CPUs first, then nodes whose parent is unknown to the document.
    cpu_nodes = sorted((n for n, k in g.kind.items() if k == "cpu"), key=_natural)
    for c in cpu_nodes:
        add(root, c)
    orphans = sorted((n for n in g.kind if n not in placed and g.parent.get(n) not in g.kind
                      and g.kind[n] != "nvswitch"), key=lambda n: _natural(g.display(n)))
    if orphans:
        un = root.add("[dim]no known parent[/]")
        for n in orphans:
            if n not in placed:
                add(un, n)

    nv = [l for l in doc.get("links", []) if l.get("kind") == "nvlink"]
    nvs = [s for s in doc.get("switches", []) if s.get("kind") == "nvswitch"]
    if nv or nvs:
        b = root.add("[green bold]NVLink[/]")
        for s in sorted(nvs, key=lambda s: _natural(s["id"])):
            ls = [l for l in nv if s["id"] in (l["a"], l["b"])]
            gpus = {l["a"] if l["b"] == s["id"] else l["b"] for l in ls}
            count = sum(int(l.get("count") or 1) for l in ls)
            b.add(f"NVSwitch {s['id']}: {len(gpus)} GPU{'' if len(gpus) == 1 else 's'}, "
                  f"{count} link{'' if count == 1 else 's'}")
        by_gpu: dict = {}
        for l in nv:
            a, z = l["a"], l["b"]
            if g.kind.get(a) == "nvswitch" or g.kind.get(z) == "nvswitch":
                gpu = z if g.kind.get(a) == "nvswitch" else a
                other = a if gpu == z else z
            else:
                gpu, other = (a, z) if _natural(g.display(a)) <= _natural(g.display(z)) else (z, a)
            by_gpu.setdefault(gpu, []).append((other, l))
        for gpu in sorted(by_gpu, key=lambda n: _natural(g.display(n))):
            peers = sorted(by_gpu[gpu], key=lambda x: _natural(g.display(x[0])))
            text = ", ".join(f"{g.display(o)} NV{l.get('count') or 1} ({_gbps(l.get('bw_GBps'))})" for o, l in peers)
            b.add(f"{g.display(gpu)} -> {text}")
    other = [l for l in doc.get("links", []) if l.get("kind") in ("smp", "c2c", "xgmi", "net")]
    if other:
        b = root.add("[bold]Other links[/]")
        for l in sorted(other, key=lambda l: (l["kind"], _natural(l["a"]), _natural(l["b"]))):
            b.add(f"{l['kind']}: {g.display(l['a'])} -- {g.display(l['b'])}, {l.get('bw_GBps'):g} GB/s")
    console.print(root, soft_wrap=False)   # long items continue on the next line, broken at spaces


# --------------------------------------------------------------------------------------------
# DOT
def _q(s: str) -> str:
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def _lbl(*parts) -> str:
    """A DOT label from lines (each escaped, joined with DOT's \\n)."""
    esc = [str(p).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") for p in parts if p not in (None, "")]
    return '"' + "\\n".join(esc) + '"'


_EDGE_STYLE = {
    "nvlink": 'color="forestgreen", penwidth=2',
    "pcie": 'color="black"',
    "smp": 'color="firebrick", style=dashed',
    "c2c": 'color="royalblue", penwidth=2',
    "xgmi": 'color="purple", penwidth=2',
    "net": 'color="gray40", style=dashed',
}


def _root_cpu(g: _Graph, node: str) -> Optional[str]:
    seen = set()
    cur = node
    while cur is not None and cur not in seen:
        if g.kind.get(cur) == "cpu":
            return cur
        seen.add(cur)
        cur = g.parent.get(cur)
    return None


def _pcie_label(l: dict) -> str:
    """``Gen5 x16, 48 GB/s`` for a real PCIe link; nothing for a bridge's placeholder bandwidth."""
    gen, width, bw = l.get("gen"), l.get("width"), l.get("bw_GBps")
    if gen is None and width is None:
        return ""
    text = f"Gen{gen or '?'} x{width or '?'}"
    return text + (f", {bw:g} GB/s" if isinstance(bw, (int, float)) and bw < 1000 else "")


def dot(doc: dict) -> str:
    """Graphviz DOT of the node, drawn the way people draw it: each CPU/NUMA node a cluster holding
    its PCIe tree drawn parent -> child (host bridges, switches, GPUs, NICs), PCIe links labelled
    with generation, width and bandwidth where they are real links; every NVSwitch of the node one
    hub below the GPUs (one edge per GPU, its NVLink count and bandwidth); direct NVLinks between
    GPUs, C2C links and the inter-socket link drawn without bending the tree (constraint=false; more
    than two CPUs meet at one interconnect hub instead of all pairs).  Sorted: the same document
    always gives the same text."""
    g = _Graph(doc)
    nodes: dict = {}
    cluster_of: dict = {}
    numa = {x.get("id"): x for x in doc.get("numa_nodes", []) if isinstance(x, dict)}
    for node, k in g.kind.items():
        r = g.rec.get(node, {})
        if k == "cpu":
            n = int(node[3:])
            nodes[node] = f'shape=box3d, style=filled, fillcolor="lightyellow", label={_lbl(node, "NUMA %d" % n)}'
        elif k == "gpu":
            nodes[node] = ('shape=box, style="filled,bold", fillcolor="palegreen", '
                           f'label={_lbl("GPU%d" % r["index"], r.get("name"), r.get("pci_bus_id"))}')
        elif k == "nic":
            rate = nic_rate_gbps(r)
            nodes[node] = ('shape=box, style=filled, fillcolor="lightcyan", '
                           f'label={_lbl(r["name"], r.get("netdev"), r.get("pci_bus_id"), "%g Gb/s" % rate if rate else None)}')
        elif k == "nvswitch":
            continue   # drawn as one hub below
        elif k == "host_bridge":
            nodes[node] = f'shape=trapezium, label={_lbl("host bridge", node)}'
        else:
            nodes[node] = f'shape=ellipse, label={_lbl("PCIe switch", r.get("pci_bus_id") or node)}'
        if k != "nvswitch":
            root = _root_cpu(g, node)
            if root is not None:
                cluster_of[node] = root
    edges: dict = {}   # (a, b) -> (attrs, label); a is the parent / upper end

    def add_edge(a: str, b: str, style: str, label: str, extra: str = "") -> None:
        key = (a, b)
        if key in edges:
            label = edges[key][1] + "; " + label
        edges[key] = (", ".join(x for x in (style, extra) if x), label)

    # PCIe tree, parent -> child
    for node, p in g.parent.items():
        if g.kind.get(node) == "nvswitch":
            continue
        if p not in nodes and p not in g.kind:
            nodes[p] = f"shape=plaintext, label={_lbl(p)}"
        link = g.pcie_link(node, p)
        if link is not None:
            add_edge(p, node, _EDGE_STYLE["pcie"], _pcie_label(link))
        else:
            add_edge(p, node, 'color="gray50", style=dotted', "")
    # NVLink: switches as one hub, direct links between GPUs
    nvs_ids = sorted((n for n, k in g.kind.items() if k == "nvswitch"), key=_natural)
    hub = "NVSwitch"
    per_gpu: dict = {}
    for l in doc.get("links", []):
        a, b, kind = l["a"], l["b"], l.get("kind", "")
        for e in (a, b):
            if e not in nodes and e not in nvs_ids:
                nodes[e] = f"shape=plaintext, label={_lbl(e)}"
        bw = l.get("bw_GBps")
        if kind == "nvlink":
            if a in nvs_ids or b in nvs_ids:
                gpu = b if a in nvs_ids else a
                c, w = per_gpu.get(gpu, (0, 0.0))
                per_gpu[gpu] = (c + int(l.get("count") or 1), w + (bw or 0.0))
            else:
                x, y = sorted((a, b), key=_natural)
                add_edge(x, y, _EDGE_STYLE["nvlink"], f"NV{l.get('count') or 1}" + (f" {bw:g} GB/s" if bw else ""),
                         "constraint=false")
        elif kind == "pcie":
            continue   # drawn with the tree
        elif kind == "smp":
            continue   # below
        elif kind == "c2c":
            x, y = (b, a) if g.kind.get(b) == "cpu" else (a, b)
            add_edge(x, y, _EDGE_STYLE["c2c"], "C2C" + (f" {bw:g} GB/s" if bw else ""), "constraint=false")
        else:
            x, y = sorted((a, b), key=_natural)
            add_edge(x, y, _EDGE_STYLE.get(kind, ""), kind + (f" {bw:g} GB/s" if bw else ""))
    if per_gpu:
        count = len(nvs_ids)
        nodes[hub] = ('shape=octagon, style=filled, fillcolor="honeydew", '
                      f'label={_lbl("NVSwitch" + (" x%d" % count if count > 1 else ""), ", ".join(nvs_ids) if count <= 4 else None)}')
        for gpu, (c, w) in per_gpu.items():
            add_edge(gpu, hub, _EDGE_STYLE["nvlink"], f"NV{c}" + (f" {w:g} GB/s" if w else ""))
    smp = [l for l in doc.get("links", []) if l.get("kind") == "smp"]
    if smp:
        cpus = sorted({e for l in smp for e in (l["a"], l["b"])}, key=_natural)
        bws = sorted({l.get("bw_GBps") for l in smp if l.get("bw_GBps")})
        bw_text = (f" {bws[0]:g} GB/s" if len(bws) == 1 else f" {bws[0]:g}-{bws[-1]:g} GB/s") if bws else ""
        if len(cpus) == 2:
            add_edge(cpus[0], cpus[1], _EDGE_STYLE["smp"], "SMP" + bw_text, "constraint=false")
        else:
            nodes["SMP"] = f'shape=ellipse, style=dashed, label={_lbl("CPU interconnect", bw_text.strip())}'
            for c in cpus:
                add_edge(c, "SMP", _EDGE_STYLE["smp"], "", "constraint=false")
    # Bandwidth where it matters: the most common PCIe and NVLink-hub labels go into the legend,
    # and only the links that differ from them (a down-trained slot, a slower NIC) keep their label.
    notes = []
    for kind, prefix in (("pcie", "PCIe links"), ("hub", "every GPU to the NVSwitches")):
        labels = [lbl for (a, b), (st, lbl) in edges.items() if lbl and
                  ((kind == "hub" and b == hub) or (kind == "pcie" and st == _EDGE_STYLE["pcie"] and b != hub))]
        if len(labels) >= 3:
            common = max(sorted(set(labels)), key=labels.count)
            if labels.count(common) * 2 > len(labels):
                notes.append(f"{prefix}: {common} unless labelled")
                for key, (st, lbl) in list(edges.items()):
                    if lbl == common and ((kind == "hub" and key[1] == hub) or
                                          (kind == "pcie" and st == _EDGE_STYLE["pcie"] and key[1] != hub)):
                        edges[key] = (st, "")
    # A NUMA node with no CPUs and nothing below it (GB200's GPU-memory NUMA nodes) is not drawn.
    used = {x for k in edges for x in k} | set(cluster_of.values())
    for node in [n for n in nodes if g.kind.get(n) == "cpu"]:
        n = int(node[3:])
        if not (numa.get(n) or {}).get("cpus") and not any(cluster_of.get(x) == node for x in nodes if x != node) \
                and not any(node in k and (st or "").find("firebrick") < 0 for k, (st, _) in edges.items()):
            nodes.pop(node)
            cluster_of.pop(node, None)
            for k in [k for k in edges if node in k]:
                edges.pop(k)
    del used
    if "SMP" in nodes and sum(1 for k in edges if k[1] == "SMP") < 2:
        nodes.pop("SMP")
        for k in [k for k in edges if k[1] == "SMP"]:
            edges.pop(k)
    out = ["digraph gpucomm {",
           '  graph [rankdir=TB, newrank=true, nodesep=0.3, ranksep=0.5, fontname="Helvetica", fontsize=11'
           + (f", labelloc=b, labeljust=l, label={_lbl(*notes)}" if notes else "") + "];",
           '  node [fontname="Helvetica", fontsize=10];', '  edge [fontname="Helvetica", fontsize=9, arrowhead=none];']
    kind_rank = {"cpu": 0, "host_bridge": 1, "pcie": 2, "gpu": 4, "nic": 5}
    order = sorted(nodes, key=lambda n: (kind_rank.get(g.kind.get(n), 9), _natural(n)))
    for cpu in sorted({c for c in cluster_of.values()}, key=_natural):
        n = int(cpu[3:])
        cpus = (numa.get(n) or {}).get("cpus")
        out.append(f"  subgraph {_q('cluster_' + cpu)} {{")
        out.append(f'    graph [label={_lbl("NUMA %d" % n + ("  cpus " + cpus if cpus else ""))}, style="rounded", '
                   'color="gray60", labeljust=l];')
        for node in order:
            if cluster_of.get(node) == cpu:
                out.append(f"    {_q(node)} [{nodes[node]}];")
        out.append("  }")
    for node in order:
        if node not in cluster_of:
            out.append(f"  {_q(node)} [{nodes[node]}];")
    for (a, b) in sorted(edges, key=lambda k: (_natural(k[0]), _natural(k[1]))):
        style, label = edges[(a, b)]
        attrs = ", ".join(x for x in (style, f"label={_q(label)}" if label else "") if x)
        out.append(f"  {_q(a)} -> {_q(b)}" + (f" [{attrs}]" if attrs else "") + ";")
    out.append("}")
    return "\n".join(out) + "\n"


__all__ = ["matrix_text", "matrix_rich", "summary_table", "tree", "dot", "level_style", "LEGEND"]


def _gbps(bw) -> str:
    """A link bandwidth for the tree, ``? GB/s`` when the document does not give one."""
    return f"{bw:g} GB/s" if isinstance(bw, (int, float)) and not isinstance(bw, bool) else "? GB/s"
