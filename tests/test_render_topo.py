"""Topology renderers: matrix text (round trip through the parser), rich matrix/summary/tree, DOT."""
from __future__ import annotations

import copy
import io
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucomm.render.topology import dot, matrix_rich, matrix_text, summary_table, tree
from gpucomm.probes.matrix import compute_matrix
from gpucomm.probes.facts import pcie_bw_GBps
from gpucomm.probes.model import (finalize, gpu_record, link_record, new_document, nic_record, source_record,
                                  switch_record)
from gpucomm.probes.formats.smi_topo import parse_topo_text

ROOT = Path(__file__).resolve().parent.parent
TOPO = ROOT / "fixtures" / "captures" / "topo"
FILES = sorted(TOPO.glob("*.txt"))
FUZZ = settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))


def parse(p: Path) -> dict:
    return finalize(parse_topo_text(p.read_bytes().decode("utf-8"), p.name))


def console(color: bool = False):
    from rich.console import Console

    if color:
        return Console(file=io.StringIO(), width=200, force_terminal=True, color_system="standard")
    return Console(file=io.StringIO(), width=200, force_terminal=False, no_color=True)


def _affinities(doc):
    return [(g["index"], g["cpu_affinity"], g["numa_affinity"], g.get("gpu_numa_id")) for g in doc["gpus"]]


@pytest.mark.parametrize("path", FILES, ids=[p.name[:40] for p in FILES])
def test_matrix_text_round_trips_every_capture(path):
    doc = parse(path)
    text = matrix_text(doc)
    back = parse_topo_text(text, "rendered")
    assert back["matrix"] == doc["matrix"]
    assert _affinities(finalize(back)) == _affinities(doc)
    # nvidia-smi's layout: header row, NIC placeholders + NIC Legend, legend
    lines = text.splitlines()
    assert lines[0].split()[:1] == ["GPU0"] and lines[0].rstrip().endswith("GPU NUMA ID")
    assert "Legend:" in lines
    if doc["nics"]:
        assert "NIC0" in lines[0].split() and "NIC Legend:" in lines
        assert f"  NIC0: {doc['nics'][0]['name']}" in lines


@pytest.mark.parametrize("path", FILES, ids=[p.name[:40] for p in FILES])
def test_rich_renderers_on_every_capture(path):
    doc = parse(path)
    c = console()
    summary_table(doc, c)
    tree(doc, c)
    out = c.file.getvalue()
    assert f"GPUs ({len(doc['gpus'])})" in out and "Topology matrix" in out
    for n in doc["nics"]:
        assert n["name"] in out
    assert "no PCI tree" in out   # captures carry no PCI tree
    if any(l["kind"] == "nvlink" for l in doc["links"]):
        assert "NVLink" in out
    for w in doc["warnings"]:
        assert w[:30] in out.replace("\n", " ") or w[:15] in out


def test_matrix_rich_colours():
    doc = parse(TOPO / "15_a800-pcie-x8_nv4-nv6-nv8-bridges_2nic.txt")
    c = console(color=True)
    matrix_rich(doc, c)
    out = c.file.getvalue()
    assert "\x1b[32mNV8" in out          # NVLink green
    assert "\x1b[36mPIX" in out          # same switch cyan
    assert "\x1b[33mNODE" in out         # NUMA-local yellow
    assert "\x1b[31mSYS" in out          # across sockets red
    plain = console()
    matrix_rich(doc, plain)
    assert "\x1b[" not in plain.file.getvalue()


# --------------------------------------------------------------------------------------------
def hand_built() -> dict:
    """Two sockets; CPU0: host bridge -> PCIe switch -> GPU0 + mlx5_0; CPU1: host bridge -> GPU1;
    both GPUs on one NVSwitch with 18 links each; an SMP link between the sockets."""
    d = new_document("fixture")
    d["host"]["hostname"] = "hand-built"
    d["sources"].append(source_record("fixture", "ok", "built in test_render_topo"))
    d["numa_nodes"] = [{"id": 0, "cpus": "0-15", "memory_bytes": 2**36, "distances": [10, 21]},
                       {"id": 1, "cpus": "16-31", "memory_bytes": 2**36, "distances": [21, 10]}]
    d["switches"] = [
        switch_record("pci0000:00", "host_bridge", parent="CPU0", numa_node=0),
        switch_record("0000:01:00.0", "pcie", pci_bus_id="0000:01:00.0", parent="pci0000:00", numa_node=0),
        switch_record("pci0000:80", "host_bridge", parent="CPU1", numa_node=1),
        switch_record("NVS0", "nvswitch"),
    ]
    d["gpus"] = [
        gpu_record(0, name="NVIDIA H100 80GB HBM3", pci_bus_id="0000:03:00.0", parent="0000:01:00.0", numa_node=0,
                   numa_affinity=[0], cpu_affinity="0-15", pcie={"gen": 5, "width": 16, "max_gen": 5, "max_width": 16}),
        gpu_record(1, name="NVIDIA H100 80GB HBM3", pci_bus_id="0000:81:00.0", parent="pci0000:80", numa_node=1,
                   numa_affinity=[1], cpu_affinity="16-31", pcie={"gen": 4, "width": 8, "max_gen": 5, "max_width": 16}),
    ]
    d["nics"] = [nic_record("mlx5_0", netdev="ib0", pci_bus_id="0000:04:00.0", parent="0000:01:00.0", numa_node=0,
                            link_layer="InfiniBand", ports=[{"port": 1, "state": "ACTIVE", "rate_gbps": 400.0}])]
    d["links"] = [
        link_record("0000:03:00.0", "0000:01:00.0", "pcie", pcie_bw_GBps(5, 16), gen=5, width=16),
        link_record("0000:04:00.0", "0000:01:00.0", "pcie", pcie_bw_GBps(5, 16), gen=5, width=16),
        link_record("0000:01:00.0", "pci0000:00", "pcie", pcie_bw_GBps(5, 16), gen=5, width=16),
        link_record("0000:81:00.0", "pci0000:80", "pcie", pcie_bw_GBps(4, 8), gen=4, width=8),
        link_record("0000:03:00.0", "NVS0", "nvlink", 18 * 20.6, count=18),
        link_record("0000:81:00.0", "NVS0", "nvlink", 18 * 20.6, count=18),
        link_record("CPU0", "CPU1", "smp", 20.0),
    ]
    compute_matrix(d)
    return finalize(d)


def test_hand_built_matrix_round_trips():
    d = hand_built()
    assert d["matrix"]["GPU0"]["GPU1"] == "NV18" and d["matrix"]["GPU0"]["mlx5_0"] == "PIX"
    assert parse_topo_text(matrix_text(d))["matrix"] == d["matrix"]


def test_tree_hierarchy_and_speeds():
    c = console()
    tree(hand_built(), c)
    lines = c.file.getvalue().splitlines()

    def at(text):
        (i,) = [k for k, l in enumerate(lines) if text in l]
        return i, len(lines[i]) - len(lines[i].lstrip("│├└─ "))

    cpu0, hb0, sw, gpu0, nic = (at(t) for t in ("CPU0 NUMA 0", "host bridge pci0000:00", "PCIe switch 0000:01:00.0",
                                                "GPU0 NVIDIA H100", "mlx5_0 0000:04:00.0"))
    # each level is below and indented under its parent
    assert cpu0[0] < hb0[0] < sw[0] < gpu0[0] < nic[0]
    assert cpu0[1] < hb0[1] < sw[1] < gpu0[1] == nic[1]
    assert "Gen5 x16, 48 GB/s" in lines[gpu0[0]] and "Gen5 x16, 48 GB/s" in lines[sw[0]]
    assert "ib0" in lines[nic[0]] and "400 Gb/s" in lines[nic[0]]
    gpu1 = at("GPU1 NVIDIA H100")
    assert "Gen4 x8, 12 GB/s" in lines[gpu1[0]] and at("CPU1 NUMA 1")[0] < at("host bridge pci0000:80")[0] < gpu1[0]
    assert any("NVSwitch NVS0: 2 GPUs, 36 links" in l for l in lines)
    assert any("GPU0 -> NVS0 NV18" in l for l in lines)
    assert any("smp: CPU0 -- CPU1, 20 GB/s" in l for l in lines)
    assert "no PCI tree" not in lines[0]


def test_tree_without_parents_is_flat_and_handles_orphans():
    d = new_document("json")
    d["gpus"] = [gpu_record(0, numa_node=0), gpu_record(1)]
    d["nics"] = [nic_record("mlx5_0", parent="0000:ff:00.0")]   # parent the document does not describe
    c = console()
    tree(d, c)
    out = c.file.getvalue()
    assert "CPU0" in out and "GPU0" in out and "no known parent" in out and "GPU1" in out and "mlx5_0" in out


_STMT = re.compile(r'^ +(?:"(?:[^"\\]|\\.)*"(?: -> "(?:[^"\\]|\\.)*")?|graph|node|edge) ?(?:\[(.*)\])?;$')
_SUB = re.compile(r'^  subgraph "cluster_CPU\d+" \{$')


def _dot_structure(text: str):
    lines = text.splitlines()
    assert lines[0] == "digraph gpucomm {" and lines[-1] == "}"
    nodes, edges, clusters, current = set(), [], {}, None
    for l in lines[1:-1]:
        if _SUB.match(l):
            current = l.split('"')[1][len("cluster_"):]
            continue
        if l == "  }":
            current = None
            continue
        assert _STMT.match(l), l
        ids = re.findall(r'^ +"((?:[^"\\]|\\.)*)"(?: -> "((?:[^"\\]|\\.)*)")?', l)
        if ids:
            a, b = ids[0]
            if b:
                edges.append((a, b, l))
            else:
                nodes.add(a)
                if current:
                    clusters[a] = current
    for a, b, _ in edges:
        assert a in nodes and b in nodes, (a, b)
    return nodes, edges, clusters


def test_dot_hand_built():
    d = hand_built()
    text = dot(d)
    nodes, edges, clusters = _dot_structure(text)
    assert {"CPU0", "CPU1", "pci0000:00", "0000:01:00.0", "0000:03:00.0", "0000:81:00.0", "0000:04:00.0",
            "NVSwitch"} <= nodes
    labels = {(a, b): l for a, b, l in edges}
    # NVSwitches are one hub below the GPUs; the PCIe tree is drawn parent -> child
    assert 'label="NV18 370.8 GB/s"' in labels[("0000:03:00.0", "NVSwitch")] or "NV18 370.8 GB/s" in text
    assert ("0000:01:00.0", "0000:03:00.0") in labels and ("0000:03:00.0", "0000:01:00.0") not in labels
    for child, parent in (("0000:03:00.0", "0000:01:00.0"), ("pci0000:00", "CPU0")):
        assert (parent, child) in labels
    assert "SMP 20 GB/s" in labels[("CPU0", "CPU1")] and "constraint=false" in labels[("CPU0", "CPU1")]
    # CPU -> host bridge has no link record: dotted, and never a placeholder bandwidth
    assert "style=dotted" in labels[("CPU0", "pci0000:00")]
    assert not re.search(r"\b\d{4,} GB/s", text)
    assert clusters["0000:03:00.0"] == "CPU0"
    # deterministic whatever the order of the input lists
    shuffled = copy.deepcopy(d)
    rnd = random.Random(7)
    for k in ("gpus", "nics", "switches", "links", "numa_nodes"):
        rnd.shuffle(shuffled[k])
    assert dot(shuffled) == text == dot(d)


@pytest.mark.parametrize("path", FILES[::4], ids=[p.name[:40] for p in FILES[::4]])
def test_dot_on_captures(path):
    d = parse(path)
    nodes, edges, _ = _dot_structure(dot(d))
    assert {f"GPU{g['index']}" for g in d["gpus"]} <= nodes
    nv = [l for l in d["links"] if l["kind"] == "nvlink"]
    nvs = {s["id"] for s in d.get("switches") or [] if s.get("kind") == "nvswitch"}
    direct = [l for l in nv if l["a"] not in nvs and l["b"] not in nvs]
    via_hub = {l["a"] if l["b"] in nvs else l["b"] for l in nv if l["a"] in nvs or l["b"] in nvs}
    assert len([e for e in edges if "forestgreen" in e[2]]) == len(direct) + len(via_hub)


EXAMPLES = ["hgx-h100", "dgx-a100", "dgx1-v100", "pcie-8x-consumer", "a100-pcie-4x-nvbridge", "gb200-tray",
            "cpu-only", "hgx-h100-degraded", "dgx-a100-numa-mismatch"]


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz dot not installed")
def test_dot_accepted_by_graphviz():
    for d in (hand_built(), parse(FILES[0])):
        r = subprocess.run(["dot", "-Tsvg"], input=dot(d), capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz dot not installed")
@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_draws_a_tree_graphviz_accepts(name, tmp_path):
    """dot -Tpng takes every bundled example; the tree hangs from the CPUs (every PCIe edge goes
    parent -> child, so no CPU is below anything), the NVSwitches are one hub, and the picture is
    not a strip (the 11:1 HGX picture of earlier versions)."""
    from gpucomm.probes.load import load_topology

    doc = load_topology(f"example:{name}")
    text = dot(doc)
    nodes, edges, clusters = _dot_structure(text)
    assert not any(b.startswith("CPU") and "SMP" not in l and "firebrick" not in l for a, b, l in edges)
    assert sum(1 for n in nodes if n == "NVSwitch") <= 1
    png = tmp_path / f"{name}.png"
    r = subprocess.run(["dot", "-Tpng", "-o", str(png)], input=text, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and png.stat().st_size > 1000, r.stderr
    import struct

    w, h = struct.unpack(">II", png.read_bytes()[16:24])
    if doc["gpus"] and name in ("hgx-h100", "dgx-a100", "a100-pcie-4x-nvbridge", "pcie-8x-consumer"):
        assert w / h < 6, (w, h)


# --------------------------------------------------------------------------------------------
_CELLS = ["PIX", "PXB", "PHB", "NODE", "SYS", "NV1", "NV4", "NV12", "NV18", "N/A"]


@st.composite
def documents(draw):
    n = draw(st.integers(1, 8))
    names = draw(st.lists(st.sampled_from([f"mlx5_{i}" for i in range(20)] + ["rocep49s0", "mlx5_bond_0"]),
                          max_size=5, unique=True))
    d = new_document("json")
    for i in range(n):
        cpus = draw(st.sets(st.integers(0, 127), max_size=8))
        numa = sorted(draw(st.sets(st.integers(0, 7), max_size=3)))
        d["gpus"].append(gpu_record(i, cpu_affinity=(",".join(map(str, sorted(cpus))) or None) if cpus else None,
                                    numa_affinity=numa, gpu_numa_id=draw(st.one_of(st.none(), st.integers(0, 40)))))
    for nm in names:
        d["nics"].append(nic_record(nm))
    keys = [f"GPU{i}" for i in range(n)] + names
    d["matrix"] = {r: {c: "X" if r == c else draw(st.sampled_from(_CELLS)) for c in keys} for r in keys}
    return d


@FUZZ
@given(documents())
def test_generated_documents_round_trip(doc):
    from gpucomm.probes.model import canonical_cpulist

    for g in doc["gpus"]:
        g["cpu_affinity"] = canonical_cpulist(g["cpu_affinity"])
    back = finalize(parse_topo_text(matrix_text(doc)))
    assert back["matrix"] == doc["matrix"]
    assert back["sources"][0]["status"] == "ok", back["warnings"]
    assert _affinities(back) == _affinities(finalize(doc))
    assert [n["name"] for n in back["nics"]] == [n["name"] for n in finalize(doc)["nics"]]
