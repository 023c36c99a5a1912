"""planners/nccl/graph.py and planners/nccl/paths.py: NCCL's graph model, bandwidth constants and path rules,
checked against a real NCCL log, real captures and generated PCI trees; ``gpucomm paths``."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import CAPTURES, run_cli
from gpucomm.probes.errors import InputError
from gpucomm.probes.load import load_topology
from gpucomm.probes.model import new_document

from gpucomm.planners.nccl.graph import build_graph, graph_from_matrix
from gpucomm.probes.topology import Topology
from gpucomm.planners.nccl.search import nvswitch_document
from gpucomm.planners.nccl.paths import RANK, compute_path_set, compute_paths, path_table
from support import p2p_disabled, pci_trees

PANLICHEN_XML = CAPTURES / "ncclxml" / "panlichen-rtx3090-8gpu-topo.xml"
PANLICHEN_LOG = CAPTURES / "nccllogs" / "panlichen-rtx3090-4node-log27.log"


# ----------------------------------------------------------------------------------------------
# Real NCCL log: every path line NCCL printed for this machine
def _nccl_id(G, token: str) -> str:
    kind, val = token.split("/")
    if kind == "GPU":   # NCCL prints a PCI id as (bus << 12 | dev << 4 | fn) in hex
        v = int(val, 16)
        return f"0000:{v >> 12 & 0xff:02x}:{v >> 4 & 0xff:02x}.{v & 0xf}"
    if kind == "CPU":
        return f"CPU{int(val)}"
    nets = sorted(n for n, a in G.nodes(data=True) if a.get("type") == "NET")
    return nets[int(val)]


def test_paths_reproduce_every_line_of_a_real_nccl_log():
    ps = compute_path_set(p2p_disabled(load_topology(str(PANLICHEN_XML))))
    checked = 0
    for line in PANLICHEN_LOG.read_text().splitlines():
        m = re.search(r"INFO ((?:GPU|NET)/[0-9A-F]+) :(.*)$", line)
        if not m:
            continue
        src = _nccl_id(ps.G, m.group(1))
        for tok, hops, bw, ty in re.findall(r"((?:GPU|NET|CPU)/[0-9A-F]+) \((\d+)/([\d.]+)/(\w+)\)", m.group(2)):
            dst = _nccl_id(ps.G, tok)
            if dst == src:
                continue
            p = ps.get(src, dst)
            assert p is not None, (src, dst)
            assert (p.hops, round(p.bw, 3), p.type) == (int(hops), float(bw), ty), (line[:60], tok, p)
            checked += 1
    assert checked == 720   # 8 ranks x 9 source lines x 10 targets


def test_p2p_disabled_routes_through_the_cpu_and_enabled_does_not():
    doc = load_topology(str(PANLICHEN_XML))
    on = compute_paths(doc)
    off = compute_paths(p2p_disabled(copy.deepcopy(doc)))
    a, b = "0000:0f:00.0", "0000:10:00.0"   # same Microsemi switch
    assert on[(a, b)].type == "PIX" and on[(a, b)].hops == 2
    assert off[(a, b)].type == "PHB" and off[(a, b)].hops == 4 and off[(a, b)].via == "CPU0"


# ----------------------------------------------------------------------------------------------
# Bandwidth constants
def test_nvswitch_and_pcie_bandwidths():
    for sm, links, bw in ((80, 12, 240.0), (90, 18, 370.8), (100, 18, 721.8)):
        G = build_graph(nvswitch_document(8, sm, links))
        g0 = min(n for n, a in G.nodes(data=True) if a.get("type") == "GPU")
        assert G.edges[g0, "NVS"]["bw"] == pytest.approx(bw) and G.edges["NVS", g0]["bw"] == pytest.approx(bw)
        pci = [a["bw"] for _, v, a in G.out_edges(g0, data=True) if a["type"] == "PCI"]
        assert pci == [48.0 if sm >= 90 else 24.0]


@pytest.mark.parametrize("host,numa,expected", [
    ({"cpu_vendor": "GenuineIntel", "cpu_model": "Intel(R) Xeon(R) Platinum 8480+"}, None, 22.0),   # SRP
    ({"cpu_vendor": "GenuineIntel", "cpu_model": "INTEL(R) XEON(R) PLATINUM 8562Y+"}, None, 40.0),  # ERP
    ({"cpu_vendor": "GenuineIntel", "cpu_model": "Intel(R) Xeon(R) Platinum 8380 CPU"}, None, 10.0),  # ICX: SKL class
    ({"cpu_vendor": "GenuineIntel", "cpu_model": "Intel(R) Xeon(R) CPU E5-2698 v4"}, None, 6.0),     # BDW
    ({"cpu_vendor": "AuthenticAMD", "cpu_model": "AMD EPYC 7742 64-Core Processor"}, None, 16.0),
    ({"cpu_vendor": "ARM", "cpu_model": "Neoverse-V2", "cpu_arch": "aarch64"}, None, 6.0),
    ({"cpu_vendor": None, "cpu_model": "POWER9", "cpu_arch": "ppc64le"}, None, 32.0),
    ({}, {"vendor": "GenuineIntel", "familyid": 6, "modelid": 106, "arch": "x86_64"}, 10.0),      # NCCL XML <cpu>
    ({}, {"vendor": "GenuineIntel", "familyid": 6, "modelid": 143, "arch": "x86_64"}, 22.0),
    ({}, {"vendor": "GenuineIntel", "familyid": 6, "modelid": 207, "arch": "x86_64"}, 40.0),
    ({}, {"vendor": "CentaurHauls", "familyid": 7, "modelid": 0x5B, "arch": "x86_64"}, 9.0),
])
def test_inter_cpu_bandwidth_by_cpu_model(host, numa, expected):
    doc = new_document()
    doc["host"].update(host)
    if numa:
        doc["numa_nodes"] = [dict(id=0, cpus="0-3", **numa), dict(id=1, cpus="4-7", **numa)]
    assert Topology.of(doc).cpu_for(0).sys_bw == expected


def test_sys_link_from_cpu_model_and_measured_override():
    doc = nvswitch_document(8, 90, 18)
    doc["links"] = [l for l in doc["links"] if l["kind"] != "smp"]
    G = build_graph(doc)
    assert G.edges["CPU0", "CPU1"]["bw"] == 22.0 and G.edges["CPU0", "CPU1"]["type"] == "SYS"
    for l in doc["links"]:
        if l["kind"] == "nvlink" and l["a"] == doc["gpus"][0]["pci_bus_id"]:
            l["measured_bw_GBps"] = 300.0
    G = build_graph(doc)
    e = G.edges[doc["gpus"][0]["pci_bus_id"], "NVS"]
    assert e["bw"] == 300.0 and e["nominal_bw"] == pytest.approx(370.8) and e["measured"] is True


def test_unknown_defaults_are_stated():
    doc = nvswitch_document(8, 90, 18, nics=1)
    doc["host"]["cpu_vendor"] = doc["host"]["cpu_model"] = None
    doc["links"] = [l for l in doc["links"] if l["kind"] != "smp"]
    doc["nics"][0]["ports"] = []
    G = build_graph(doc)
    text = " ".join(G.graph["assumptions"])
    assert "inter-socket (SYS) bandwidth assumed 16 GB/s" in text and "NIC speed unknown (mlx5_0): assumed 400 Gb/s" in text


# ----------------------------------------------------------------------------------------------
# Path types
def test_nvb_pxn_and_widest_versus_nccl_route():
    doc = load_topology("example:dgx1-v100")
    ids = {g["index"]: g["pci_bus_id"] for g in doc["gpus"]}
    nccl = compute_paths(doc, rule="nccl")
    widest = compute_paths(doc, rule="widest")
    # GPU0-GPU2: one NVLink directly, two through GPU3: NCCL keeps the direct link (better type),
    # the widest route is the NVB detour.
    assert nccl[(ids[0], ids[2])].type == "NVL" and nccl[(ids[0], ids[2])].bw == 20.0
    assert widest[(ids[0], ids[2])].type == "NVB" and widest[(ids[0], ids[2])].bw == 40.0
    # GPU0-GPU5 have no NVLink: NVB through an NVLink peer, never the PCIe/SYS route
    p = nccl[(ids[0], ids[5])]
    assert p.type == "NVB" and p.hops == 2 and p.via in (ids[1], ids[4])
    h = load_topology("example:hgx-h100")
    ps = compute_path_set(h)
    nets = sorted(n for n, a in ps.G.nodes(data=True) if a.get("type") == "NET")
    g0 = min(n for n, a in ps.G.nodes(data=True) if a.get("type") == "GPU" and a["index"] == 0)
    types = sorted({ps.get(g0, n).type for n in nets})
    assert "PIX" in types and "PXN" in types   # own rail NIC direct, the others through the rail's GPU
    far = next(n for n in nets if ps.get(g0, n).type == "PXN")
    assert ps.G.nodes[ps.get(g0, far).via]["type"] == "GPU"
    assert ps.get(far, g0).type != "PXN"        # PXN is only used to send (NCCL: GPU->NIC direction)


def test_c2c_and_p2c_on_grace():
    ps = compute_path_set(load_topology("example:gb200-tray"))
    gpus = sorted((n for n, a in ps.G.nodes(data=True) if a.get("type") == "GPU"), key=lambda n: ps.G.nodes[n]["index"])
    cpu = ps.local_cpu(gpus[0])
    assert ps.get(gpus[0], cpu).type == "C2C"
    nets = [n for n, a in ps.G.nodes(data=True) if a.get("type") == "NET"]
    assert any(ps.get(gpus[0], n).type == "P2C" for n in nets)
    assert all(RANK[ps.get(gpus[0], n).type] <= RANK["PXN"] for n in nets)   # GDR through C2C


def test_path_table_and_between_errors():
    doc = nvswitch_document(8, 90, 18, nics=2)
    rows = path_table(doc)
    assert len(rows) == 8 * 7 + 8 * 2 * 2
    assert {r["type"] for r in rows if r["src"].startswith("GPU") and r["dst"].startswith("GPU")} == {"NVL"}
    one = path_table(doc, between=("GPU0", "mlx5_0"))
    assert one == [r for r in rows if (r["src"], r["dst"]) == ("GPU0", "mlx5_0")]
    with pytest.raises(InputError, match=r"no GPU 9 in topology \(has 0-7\)"):
        path_table(doc, between=("GPU0", "GPU9"))
    with pytest.raises(InputError, match="no GPU or NIC named"):
        path_table(doc, between=("GPU0", "eth7"))
    with pytest.raises(InputError, match="same device"):
        path_table(doc, between=("3", "GPU3"))


# ----------------------------------------------------------------------------------------------
# Generated PCI trees: path types agree with nvidia-smi's matrix, with and without the tree
CODE_TO_TYPE = {"PIX": "PIX", "PXB": "PXB", "PHB": "PHB", "NODE": "PHB", "SYS": "SYS"}


def _check_types(doc: dict, graph) -> None:
    ps = compute_path_set(graph)
    G = ps.G
    key_of = {}
    for n, a in G.nodes(data=True):
        if a.get("type") == "GPU":
            key_of[f"GPU{a['index']}"] = n
        elif a.get("type") == "NET":
            key_of[a["name"]] = n
    for ka, row in doc["matrix"].items():
        for kb, code in row.items():
            if ka == kb or not ka.startswith("GPU"):
                continue
            p = ps.get(key_of[ka], key_of[kb])
            assert p is not None and p.bw > 0, (ka, kb)
            assert p.type == CODE_TO_TYPE[code], (ka, kb, code, p.type, p.nodes)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pci_trees())
def test_generated_trees_types_match_the_matrix(doc):
    _check_types(doc, build_graph(doc))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pci_trees())
def test_matrix_only_graph_rebuilds_an_equivalent_tree(doc):
    bare = copy.deepcopy(doc)
    bare["switches"] = []
    bare["links"] = []
    for rec in bare["gpus"] + bare["nics"]:
        rec["parent"] = None
    for rec in bare["nics"]:
        rec["numa_node"] = None        # nvidia-smi gives NUMA affinity for GPUs only
    _check_types(doc, graph_from_matrix(bare))


SMI_CAPTURES = sorted((CAPTURES / "topo").glob("*.txt"))


@pytest.mark.parametrize("path", SMI_CAPTURES, ids=lambda p: p.name[:24])
def test_nvidia_smi_captures_give_consistent_paths(path):
    doc = load_topology(str(path))
    G = build_graph(doc)
    ps = compute_path_set(G)   # NCCL's route: an NVLink (best type) wins over any PCIe route
    by_key = {f"GPU{a['index']}": n for n, a in G.nodes(data=True) if a.get("type") == "GPU"}
    m = doc["matrix"]
    for ka in by_key:
        for kb in by_key:
            if ka == kb:
                continue
            p = ps.get(by_key[ka], by_key[kb])
            assert p is not None and p.bw > 0, (ka, kb)
            code = (m.get(ka) or {}).get(kb)
            if code != (m.get(kb) or {}).get(ka) or code is None:
                continue   # MIG-asymmetric or missing cells: nothing to compare
            if code.startswith("NV"):
                assert p.type == "NVL"
            elif code in ("PIX", "PXB", "PHB", "NODE"):
                assert p.type in (CODE_TO_TYPE[code], "NVB"), (ka, kb, code, p.type)
            elif code in ("SYS", "SOC"):
                assert p.type in ("SYS", "NVB"), (ka, kb, code, p.type)


def test_h100_smi_capture_is_an_nvswitch_box():
    G = build_graph(load_topology(str(CAPTURES / "topo" / "17_h100-sxm-x8_12nic.txt")))
    assert "NVS" in G.nodes
    gpus = [n for n, a in G.nodes(data=True) if a.get("type") == "GPU"]
    assert all(G.edges[g, "NVS"]["type"] == "NVL" for g in gpus)
    assert any("matrix only (no PCI tree)" in a for a in G.graph["assumptions"])


# ----------------------------------------------------------------------------------------------
# CLI
def test_cli_paths_json_and_table():
    r = run_cli("paths", "example:hgx-h100", "--format", "json")
    assert r.code == 0, r.stderr
    out = r.json()
    assert out["schema"] == "gpucomm.paths/v1" and out["rule"] == "widest"
    assert {"src", "dst", "type", "hops", "bw_GBps", "via", "route"} <= set(out["rows"][0])
    r = run_cli("paths", "example:dgx1-v100", "--between", "GPU0", "GPU2", "--rule", "nccl")
    assert r.code == 0 and "NVL" in r.stdout and "bottleneck GB/s" in r.stdout
    r2 = run_cli("paths", "example:dgx1-v100", "--between", "GPU0", "GPU2")
    assert r2.code == 0 and "NVB" in r2.stdout


@pytest.mark.parametrize("args,code,text", [
    (("paths", "example:hgx-h100", "--between", "GPU0", "GPU9"), 1, "no GPU 9 in topology (has 0-7)"),
    (("paths", "example:hgx-h100", "--rule", "shortest"), 2, "--rule"),
    (("paths", "example:cpu-only"), 3, "no GPUs"),
])
def test_cli_paths_errors(args, code, text):
    r = run_cli(*args)
    assert r.code == code and text in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 if code != 2 else "Usage: gpucomm paths" in r.stderr


def test_paths_json_is_deterministic(tmp_path: Path):
    a = run_cli("paths", str(PANLICHEN_XML), "--format", "json").stdout
    b = run_cli("paths", str(PANLICHEN_XML), "--format", "json").stdout
    assert a == b and json.loads(a)["rows"]


_H100 = None


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.text(max_size=20), st.sampled_from(["GPU3", "7", "mlx5_1", "0000:18:00.0", "NET:mlx5_0", "GPU99"])))
def test_endpoint_names_resolve_or_fail_cleanly(name):
    from gpucomm.planners.nccl.paths import resolve_endpoint

    global _H100
    if _H100 is None:
        _H100 = build_graph(nvswitch_document(8, 90, 18, nics=2))
    try:
        n = resolve_endpoint(_H100, name)
    except InputError as e:
        assert str(e) and "\n" not in str(e)
        return
    assert _H100.nodes[n]["type"] in ("GPU", "NET")


def test_host_bridges_and_memory_only_numa_nodes_fold_into_cpus():
    G = build_graph(load_topology("example:dgx-a100"))
    assert not [n for n in G.nodes if n.startswith("pci")]           # root complexes are the CPU (NCCL)
    G = build_graph(load_topology("example:gb200-tray"))
    cpus = sorted(n for n, a in G.nodes(data=True) if a["type"] == "CPU")
    assert cpus == ["CPU0", "CPU1"]                                  # GPU-memory NUMA nodes 2..33 folded
    c2c = sorted(v for u, v, a in G.edges(data=True) if a["type"] == "C2C" and G.nodes[u]["type"] == "GPU")
    assert c2c == ["CPU0", "CPU0", "CPU1", "CPU1"]
