"""planners/nccl/sysview.py: NCCL's system graph and paths of a node as the planners read them (NCCL
2.30.7's system and ncclTopoComputePaths), checked against a real NCCL log, real captures and generated
PCI trees; the widest-route view; ``gpucomm paths``."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import CAPTURES, ROOT, nvswitch_document, p2p_disabled, pci_trees, run_cli
from gpucomm.probes.errors import InputError
from gpucomm.probes.load import load_topology
from gpucomm.probes.model import new_document
from gpucomm.probes.topology import Topology

from gpucomm.planners.nccl.names import path_rank
from gpucomm.planners.nccl.settings import NcclSettings
from gpucomm.planners.nccl.sysview import node_system, path_table, resolve_endpoint

PANLICHEN_XML = CAPTURES / "ncclxml" / "panlichen-rtx3090-8gpu-topo.xml"
PANLICHEN_LOG = CAPTURES / "nccllogs" / "panlichen-rtx3090-4node-log27.log"
NO_NET_SPLIT = NcclSettings(net_disable_intra=1)    # GPU pairs keep their P2P path type (no PATH_NET)


# ----------------------------------------------------------------------------------------------
# Real NCCL log: every path line NCCL printed for this machine
def _nccl_id(ns, token: str) -> str:
    kind, val = token.split("/")
    if kind == "GPU":   # NCCL prints a PCI id as (bus << 12 | dev << 4 | fn) in hex
        v = int(val, 16)
        bus = f"0000:{v >> 12 & 0xff:02x}:{v >> 4 & 0xff:02x}.{v & 0xf}"
        return next(g for g in ns.gpus if ns.nodes[g]["bus"] == bus)
    if kind == "CPU":
        return f"CPU{int(val)}"
    return ns.nets[int(val)]


def test_paths_reproduce_every_line_of_a_real_nccl_log():
    """Types and bandwidths as NCCL printed them; hop counts one more per GPU end, since NCCL 2.30 (the
    model) hangs each GPU off its device with a LOC link that the NCCL of this log did not have."""
    ns = node_system(p2p_disabled(load_topology(str(PANLICHEN_XML))))
    checked = 0
    for line in PANLICHEN_LOG.read_text().splitlines():
        m = re.search(r"INFO ((?:GPU|NET)/[0-9A-F]+) :(.*)$", line)
        if not m:
            continue
        src = _nccl_id(ns, m.group(1))
        for tok, hops, bw, ty in re.findall(r"((?:GPU|NET|CPU)/[0-9A-F]+) \((\d+)/([\d.]+)/(\w+)\)", m.group(2)):
            dst = _nccl_id(ns, tok)
            if dst == src:
                continue
            p = ns.path(src, dst)
            assert p is not None, (src, dst)
            devs = sum(ns.nodes[x]["type"] == "GPU" for x in (src, dst))
            assert (p.hops - devs, round(p.bw, 3), p.type) == (int(hops), float(bw), ty), (line[:60], tok, p)
            checked += 1
    assert checked == 720   # 8 ranks x 9 source lines x 10 targets


def test_p2p_disabled_routes_through_the_cpu_and_enabled_does_not():
    doc = load_topology(str(PANLICHEN_XML))
    on = node_system(doc)
    off = node_system(p2p_disabled(copy.deepcopy(doc)))
    a, b = (next(g for g in ns.gpus if ns.nodes[g]["bus"] == bus) for ns in (on,) for bus in ("0000:0f:00.0",
                                                                                               "0000:10:00.0"))
    assert on.path(a, b).type == "PIX" and on.path(a, b).hops == 4 and on.path(a, b).via is None
    p = off.path(a, b)   # same Microsemi switch, P2P refused by NVML: through the CPU
    assert p.type == "PHB" and p.hops == 6 and p.via == "CPU0" and "CPU0" in p.nodes


# ----------------------------------------------------------------------------------------------
# Bandwidth constants
def test_nvswitch_and_pcie_bandwidths():
    for sm, links, bw in ((80, 12, 240.0), (90, 18, 370.8), (100, 18, 721.8)):
        ns = node_system(nvswitch_document(8, sm, links))
        assert ns.links[("DEV0", "NVS", "NVL")] == pytest.approx(bw) and ns.links[("NVS", "DEV0", "NVL")] \
            == pytest.approx(bw)
        pci = [v for k, v in ns.links.items() if k[0] == "DEV0" and k[2] == "PCI"]
        assert pci == [48.0 if sm >= 90 else 24.0]
        assert ns.links[("GPU0", "DEV0", "LOC")] == 5000.0    # NCCL 2.30: a GPU hangs off its device


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
    ns = node_system(doc)
    assert ns.links[("CPU0", "CPU1", "SYS")] == 22.0 and not ns.measured
    for l in doc["links"]:
        if l["kind"] == "nvlink" and l["a"] == doc["gpus"][0]["pci_bus_id"]:
            l["measured_bw_GBps"] = 300.0
    ns = node_system(doc)
    # NCCL's own bandwidth stays (it decides NCCL's routes); what planners read is the measured value
    assert ns.links[("DEV0", "NVS", "NVL")] == pytest.approx(370.8)
    assert ns.capacity[("DEV0", "NVS", "NVL")] == ns.capacity[("NVS", "DEV0", "NVL")] == 300.0
    assert ns.path("GPU0", "GPU1").bw == 300.0 and ns.path("GPU2", "GPU1").bw == pytest.approx(370.8)
    assert node_system(nvswitch_document(8, 90, 18)).path("GPU0", "GPU1").bw == pytest.approx(370.8)   # not cached


def test_unknown_defaults_are_stated():
    doc = nvswitch_document(8, 90, 18, nics=1)
    doc["host"]["cpu_vendor"] = doc["host"]["cpu_model"] = None
    doc["links"] = [l for l in doc["links"] if l["kind"] != "smp"]
    doc["nics"][0]["ports"] = []
    topo = Topology.of(doc)
    node_system(topo)
    text = " ".join(topo.all_assumptions())
    assert "inter-socket (SYS) bandwidth assumed 16 GB/s" in text and "NIC speed unknown (mlx5_0): assumed 400 Gb/s" in text


# ----------------------------------------------------------------------------------------------
# Path types
def test_nvb_pxn_and_widest_versus_nccl_route():
    ns = node_system(load_topology("example:dgx1-v100"))
    # GPU0-GPU2: one NVLink directly, two through GPU3: NCCL keeps the direct link (better type),
    # the widest route is the NVB detour.
    p, w = ns.path("GPU0", "GPU2"), ns.widest("GPU0", "GPU2")
    assert p.type == "NVL" and p.bw == 20.0 and p.hops == 3
    assert w.type == "NVB" and w.bw == 40.0 and w.via == "GPU3" and w.nodes == ("GPU0", "DEV0", "DEV3", "DEV2", "GPU2")
    # GPU0-GPU5 have no NVLink: NVB through an NVLink peer, never the PCIe/SYS route
    p = ns.path("GPU0", "GPU5")
    assert p.type == "NVB" and p.hops == 4 and p.via in ("GPU1", "GPU4")
    assert ns.widest("GPU0", "GPU1") == ns.path("GPU0", "GPU1")     # nothing wider: NCCL's own
    h = node_system(load_topology("example:hgx-h100"))
    g0 = h.gpus[0]
    types = sorted({h.path(g0, n).type for n in h.nets})
    assert "PIX" in types and "PXN" in types   # own rail NIC direct, the others through the rail's GPU
    far = next(n for n in h.nets if h.path(g0, n).type == "PXN")
    assert h.nodes[h.path(g0, far).via]["type"] == "GPU"
    assert h.path(far, g0).type != "PXN"        # PXN is only used to send (NCCL: GPU->NIC direction)


def test_c2c_and_p2c_on_grace():
    ns = node_system(load_topology("example:alps-gh200"))
    g0 = ns.gpus[0]
    assert ns.path(g0, ns.local_cpu(g0)).type == "C2C"
    assert any(ns.path(g0, n).type == "P2C" for n in ns.nets)
    assert all(path_rank(ns.path(g0, n).type) <= path_rank("PXN") for n in ns.local_nets(g0))   # GDR through C2C


def test_net_domains_mark_pairs_nccl_connects_through_the_network():
    """4 H100 PCIe on two sockets, 8 NICs (a generated corpus machine NCCL itself splits in two,
    fixtures/ncclsim): the pairs across the sockets are PATH_NET, NCCL joins them through the NICs."""
    src = str(ROOT / "fixtures" / "ncclsim" / "corpus" / "m017-h100x4-none-skl2s-twolevel-g4-8x200g.xml")
    ns = node_system(load_topology(src))
    doms = ns.domains()
    assert len(doms) == 2
    side = {g: i for i, d in enumerate(doms) for g in d}
    for a in ns.gpus:
        for b in ns.gpus:
            if a != b:
                assert (ns.path(a, b).type == "NET") == (side[a] != side[b]), (a, b, ns.path(a, b))
    assert len(node_system(load_topology(src), settings=NO_NET_SPLIT).domains()) == 1


def test_path_table_and_between_errors():
    doc = nvswitch_document(8, 90, 18, nics=2)
    rows = path_table(doc)
    assert len(rows) == 8 * 7 + 8 * 2 * 2
    assert {r["type"] for r in rows if r["src"].startswith("GPU") and r["dst"].startswith("GPU")} == {"NVL"}
    one = path_table(doc, between=("GPU0", "mlx5_0"))
    assert one == [r for r in rows if (r["src"], r["dst"]) == ("GPU0", "mlx5_0")]
    assert path_table(doc, between=("GPU0", "mlx5_0"), rule="nccl") == one    # NVSwitch + PCIe: the same
    with pytest.raises(InputError, match=r"no GPU 9 in topology \(has 0-7\)"):
        path_table(doc, between=("GPU0", "GPU9"))
    with pytest.raises(InputError, match="no GPU or NIC named"):
        path_table(doc, between=("GPU0", "eth7"))
    with pytest.raises(InputError, match="same device"):
        path_table(doc, between=("3", "GPU3"))
    with pytest.raises(InputError, match="unknown path rule"):
        path_table(doc, rule="shortest")


# ----------------------------------------------------------------------------------------------
# Generated PCI trees: path types agree with nvidia-smi's matrix, with and without the tree
CODE_TO_TYPE = {"PIX": "PIX", "PXB": "PXB", "PHB": "PHB", "NODE": "PHB", "SYS": "SYS"}


def _check_types(doc: dict, source: dict) -> None:
    ns = node_system(source, settings=NO_NET_SPLIT)
    key_of = {f"GPU{ns.nodes[g]['index']}": g for g in ns.gpus}
    key_of.update({ns.nodes[n]["name"]: n for n in ns.nets})
    for ka, row in doc["matrix"].items():
        for kb, code in row.items():
            if ka == kb or not ka.startswith("GPU"):
                continue
            p = ns.path(key_of[ka], key_of[kb])
            assert p is not None and p.bw > 0, (ka, kb)
            assert p.type == CODE_TO_TYPE[code], (ka, kb, code, p.type, p.nodes)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(pci_trees())
def test_generated_trees_types_match_the_matrix(doc):
    _check_types(doc, doc)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(pci_trees())
def test_matrix_only_document_rebuilds_an_equivalent_tree(doc):
    """A bare ``nvidia-smi topo -m`` document: NCCL's XML is written from the tree the matrix implies
    (planners/nccl/pinning.py) and gives NCCL the same path types."""
    bare = copy.deepcopy(doc)
    bare["switches"] = []
    bare["links"] = []
    for rec in bare["gpus"] + bare["nics"]:
        rec["parent"] = None
    for rec in bare["nics"]:
        rec["numa_node"] = None        # nvidia-smi gives NUMA affinity for GPUs only
    _check_types(doc, bare)


SMI_CAPTURES = sorted((CAPTURES / "topo").glob("*.txt"))


@pytest.mark.parametrize("path", SMI_CAPTURES, ids=lambda p: p.name[:24])
def test_nvidia_smi_captures_give_consistent_paths(path):
    doc = load_topology(str(path))
    ns = node_system(doc, settings=NO_NET_SPLIT)   # NCCL's route: an NVLink (best type) wins over any PCIe route
    by_key = {f"GPU{ns.nodes[g]['index']}": g for g in ns.gpus}
    m = doc["matrix"]
    for ka in by_key:
        for kb in by_key:
            if ka == kb:
                continue
            p = ns.path(by_key[ka], by_key[kb])
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
    topo = Topology.of(load_topology(str(CAPTURES / "topo" / "17_h100-sxm-x8_12nic.txt")))
    ns = node_system(topo)
    assert "NVS" in ns.nodes
    assert all(("DEV" + g[3:], "NVS", "NVL") in ns.links for g in ns.gpus)
    assert any("matrix only (no PCI tree)" in a for a in topo.all_assumptions())


# ----------------------------------------------------------------------------------------------
# CLI
def test_cli_paths_json_and_table():
    r = run_cli("paths", "example:hgx-h100", "--format", "json")
    assert r.code == 0, r.stderr
    out = r.json()
    assert out["schema"] == "gpucomm.paths/v1" and out["rule"] == "widest"
    assert {"src", "dst", "type", "hops", "bw_GBps", "via", "route"} <= set(out["rows"][0])
    assert out["rows"][0]["route"] == ["GPU0", "DEV0", "NVS", "DEV1", "GPU1"]
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
@given(st.one_of(st.text(max_size=20), st.sampled_from(["GPU3", "7", "mlx5_1", "0000:18:00.0", "NET:mlx5_0", "GPU99",
                                                        "9" * 40])))
def test_endpoint_names_resolve_or_fail_cleanly(name):
    global _H100
    if _H100 is None:
        _H100 = node_system(nvswitch_document(8, 90, 18, nics=2))
    try:
        n = resolve_endpoint(_H100, name)
    except InputError as e:
        assert str(e) and "\n" not in str(e)
        return
    assert _H100.nodes[n]["type"] in ("GPU", "NET")


def test_host_bridges_fold_into_cpus_and_gpus_hang_off_their_device():
    ns = node_system(load_topology("example:dgx-a100"))
    assert not [n for n in ns.nodes if n.startswith("pci")]           # root complexes are the CPU (NCCL)
    assert {ns.nodes[n]["type"] for n in ns.nodes} >= {"GPU", "DEV", "PCI", "NVS", "CPU", "NIC", "NET"}
    ns = node_system(load_topology("example:alps-gh200"))
    c2c = sorted(k[1] for k in ns.links if k[2] == "C2C" and ns.nodes[k[0]]["type"] == "DEV")
    assert len(c2c) == 4 and all(ns.nodes[c]["type"] == "CPU" for c in c2c)
