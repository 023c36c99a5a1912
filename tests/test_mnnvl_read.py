"""Multi-node NVLink (GB200/GB300 NVL72) read into the topology document: the fabric of each GPU
(NVML, nvidia-smi -q, NCCL logs), the IMEX domain, several hosts of one NVLink domain (NCCL's fused
dumps, graph dumps), the typed view, the doctor's fabric rules and the Kubernetes clique label --
on the real captures of fixtures/captures/nvl72 (SOURCES.md) and generated inputs."""
from __future__ import annotations

import copy
import ctypes
import json
import re
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import CAPTURES, FIXTURES, run_cli

from gpucomm.planners.health.doctor import doctor_fleet, run_doctor
from gpucomm.planners.launch import k8s
from gpucomm.probes import facts
from gpucomm.probes.errors import InputError
from gpucomm.probes.formats import imex as imex_fmt
from gpucomm.probes.formats import nccllog, smi_query
from gpucomm.probes.formats.nccl_xml import export_nccl_xml, graph_gpu_label, parse_nccl_xml, split_topo_id
from gpucomm.probes.load import detect_kind, load_topology
from gpucomm.probes.model import fabric_record, host_document, host_qualified, split_host_id
from gpucomm.probes.topology import Topology
from gpucomm.probes.validate import validate_document

NVL = CAPTURES / "nvl72"
FAULTS = FIXTURES / "faults"


def cap(prefix: str):
    found = sorted(NVL.glob(prefix + "*"))
    if not found:
        pytest.skip(f"capture {prefix} not copied")
    return found[0]


FUSED, GRAPH = "c01", "c02"


# --------------------------------------------------------------------------------------------
# facts: NVML's health mask and the spellings of a cluster UUID
def test_health_mask_layout_is_nvmls():
    # capture 016 (GB200, driver 570): 0xaa; capture 014 (GB300, 580): 0x1aa adds "configuration correct"
    assert facts.fabric_health_problems(0xaa) == [] and facts.fabric_health_problems(0x1aa) == []
    assert facts.decode_fabric_health(0x1aa)["incorrect_configuration"] == "none"
    assert facts.fabric_health_problems(0xa9) == ["degraded_bw=degraded"]
    assert facts.fabric_health_problems(0x9a) == ["route_unhealthy=unhealthy"]
    assert facts.fabric_health_problems(0x4aa) == ["incorrect_configuration=no_partition"]
    assert facts.decode_fabric_health(None) == {} and facts.decode_fabric_health(-1) == {}


@given(st.dictionaries(st.sampled_from([f[0] for f in facts.FABRIC_HEALTH_FIELDS]), st.integers(1, 8)))
def test_health_mask_round_trip(fields):
    meanings = {name: m for name, _s, _w, m in facts.FABRIC_HEALTH_FIELDS}
    want = {k: meanings[k][v] for k, v in fields.items() if v in meanings[k]}
    assert facts.decode_fabric_health(facts.encode_fabric_health(want)) == want


def test_cluster_uuid_spellings_agree():
    raw = bytes(range(16))
    text = facts.cluster_uuid_from_bytes(raw)
    assert text == str(uuid.UUID(bytes=raw))
    # NCCL prints the 16 bytes as two little-endian 64-bit words (init.cc "fabric UUID %lx.%lx")
    u0, u1 = int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little")
    assert facts.cluster_uuid_from_nccl(f"{u0:x}.{u1:x}") == text
    assert facts.normalize_cluster_uuid(text.upper()) == text
    assert facts.cluster_uuid_from_bytes(bytes(16)) is None and facts.normalize_cluster_uuid("REDACTED") is None
    assert facts.normalize_cluster_uuid("00000000-0000-0000-0000-000000000000") is None


def test_fabric_record_keeps_only_usable_values():
    assert fabric_record({"state": 3, "clique_id": True, "health_mask": -1, "cluster_uuid": 5}) == {"state": "completed"}
    assert fabric_record({"state": "In Progress"}) == {"state": "in_progress"}
    assert fabric_record({"foo": 1}) is None and fabric_record("x") is None


# --------------------------------------------------------------------------------------------
# NVML: fabric info v3 (health mask, summary) and platform info
class _FabricV3(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("clusterUuid", ctypes.c_uint8 * 16), ("status", ctypes.c_uint),
                ("cliqueId", ctypes.c_uint32), ("state", ctypes.c_uint8), ("healthMask", ctypes.c_uint32),
                ("healthSummary", ctypes.c_uint8)]


class _Platform(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("ibGuid", ctypes.c_char * 16), ("chassisSerialNumber", ctypes.c_char * 16),
                ("slotNumber", ctypes.c_char), ("trayIndex", ctypes.c_char), ("hostId", ctypes.c_char),
                ("peerType", ctypes.c_char), ("moduleId", ctypes.c_char)]


def test_nvml_records_health_and_platform(monkeypatch):
    import test_nvml as tn

    from gpucomm.probes.sources import nvml

    devs = [tn.gpu("0008:01:00.0", name="NVIDIA GB200", cc=(10, 0), fabric=0x7ffe)]
    nv = tn.fake_nvml(devs)
    nv.c_nvmlGpuFabricInfo_v3_t = _FabricV3
    nv.c_nvmlPlatformInfo_v2_t = _Platform
    old = nv.nvmlDeviceGetGpuFabricInfoV

    def fabric_v(h, ref):
        old(h, ref)
        ref._obj.healthMask, ref._obj.healthSummary = 0xa9, 3
        return 0

    def platform(h, ref):
        ref._obj.chassisSerialNumber, ref._obj.trayIndex, ref._obj.moduleId = b"1821325190042", b"\x05", b"\x02"
        return 0

    nv.nvmlDeviceGetGpuFabricInfoV, nv.nvmlDeviceGetPlatformInfo = fabric_v, platform
    rec = nvml.record_nvml(nv)
    d = rec["devices"][0]
    assert d["fabric"]["health_mask"] == 0xa9 and d["fabric"]["health_summary"] == "limited_capacity"
    assert d["fabric"]["cluster_uuid"] == str(uuid.UUID(bytes=bytes(range(16))))
    assert d["platform"]["chassis_serial"] == "1821325190042" and d["platform"]["tray_index"] == 5
    g = nvml.nvml_to_partial(rec)["gpus"][0]
    assert g["fabric"]["clique_id"] == 0x7ffe and g["platform"]["module_id"] == 2
    t = Topology.of({"schema": "gpucomm.topology/v1", "gpus": [g]})
    assert t.gpus[0].fabric.health_problems == ["degraded_bw=degraded", "summary=limited_capacity"]


# --------------------------------------------------------------------------------------------
# nvidia-smi -q
def test_smi_query_capture_018_unhealthy():
    text = cap("018").read_text()
    assert detect_kind(text) == "nvidia-smi-q"
    doc = load_topology(str(cap("018")))
    f = doc["gpus"][0]["fabric"]
    assert f == {"cluster_uuid": "dc6e40c4-d722-4357-9ba6-5291dd461278", "clique_id": 2, "state": "completed",
                 "status": "NVML_SUCCESS", "health_summary": "unhealthy",
                 "health_mask": facts.encode_fabric_health({"degraded_bw": "full"})}
    assert any("without their 'GPU <bus id>' line" in w for w in doc["warnings"])
    rep = run_doctor(doc)
    assert [(x["rule"], x["severity"]) for x in rep["findings"]] == [("fabric-health", "error")]


_ROWS = {"degraded_bw": ("Bandwidth", {"full": "Full", "degraded": "Degraded"}),
         "route_recovery": ("Route Recovery in progress", {"none": "False", "in_progress": "True"}),
         "route_unhealthy": ("Route Unhealthy", {"healthy": "False", "unhealthy": "True"}),
         "access_timeout_recovery": ("Access Timeout Recovery", {"none": "False", "in_progress": "True"})}


def _smi_q(gpus: list) -> str:
    """``nvidia-smi -q`` text for [(bus, clique, state, health {field: meaning}, summary, tray)]."""
    lines = ["==============NVSMI LOG==============", "", "Driver Version                            : 580.105.08",
             "CUDA Version                              : 13.0", "", f"Attached GPUs                             : {len(gpus)}"]
    for bus, clique, state, health, summary, tray in gpus:
        lines += [f"GPU {bus}", "    Product Name                          : NVIDIA GB200",
                  "    Platform Info", "        Chassis Serial Number             : 1821325190042",
                  f"        Tray Index                        : {tray}",
                  "    PCI", f"        Bus Id                            : {bus}",
                  "    Fabric", f"        State                             : {state}",
                  "        Status                            : Success",
                  f"        CliqueId                          : {clique}",
                  "        ClusterUUID                       : dc6e40c4-d722-4357-9ba6-5291dd461278",
                  "        Health", f"            Summary                       : {summary}"]
        for k, (row, vals) in _ROWS.items():
            lines.append(f"            {row:<30}: {vals[health[k]]}")
        lines.append("    Processes                             : None")
    return "\n".join(lines) + "\n"


_GPU_Q = st.tuples(st.sampled_from(["00000008:01:00.0", "00000009:01:00.0", "00000018:01:00.0", "00000019:01:00.0"]),
                   st.integers(0, 2 ** 32 - 1), st.sampled_from(["Completed", "In Progress", "Not Started"]),
                   st.fixed_dictionaries({k: st.sampled_from(sorted(v[1])) for k, v in _ROWS.items()}),
                   st.sampled_from(["Healthy", "Unhealthy", "Limited Capacity"]), st.integers(0, 17))


@settings(max_examples=60, deadline=None)
@given(st.lists(_GPU_Q, min_size=1, max_size=4, unique_by=lambda g: g[0]))
def test_smi_query_round_trip(gpus):
    text = _smi_q(gpus)
    assert smi_query.looks_like(text)
    doc = smi_query.parse_smi_query(text, "q.txt")
    assert doc["host"]["driver_version"] == "580.105.08" and len(doc["gpus"]) == len(gpus)
    for g, (bus, clique, state, health, summary, tray) in zip(doc["gpus"], gpus):
        assert g["pci_bus_id"] == bus[4:].lower() and g["name"] == "NVIDIA GB200"
        f = g["fabric"]
        assert f["clique_id"] == clique and f["state"] == state.lower().replace(" ", "_")
        assert facts.decode_fabric_health(f["health_mask"]) == health
        assert f["health_summary"] == summary.lower().replace(" ", "_")
        assert g["platform"] == {"chassis_serial": "1821325190042", "tray_index": tray}


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text(max_size=400))
def test_smi_query_junk_is_refused_in_one_line(text):
    try:
        doc = smi_query.parse_smi_query("    Fabric\n" + text, "junk.txt")
    except InputError as e:
        assert "\n" not in str(e)
        return
    assert doc["gpus"]


# --------------------------------------------------------------------------------------------
# nvidia-imex-ctl -N
def test_imex_capture_015():
    doc = load_topology(str(cap("015")))
    im = doc["imex"]
    assert im["domain_state"] == "UP" and len(im["nodes"]) == 18 and im["connectivity"] == {"C": 324}
    assert im["nodes"][17] == {"index": 17, "address": "172.31.56.47", "state": "READY", "version": "570.172"}
    assert run_doctor(doc)["findings"] == []


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 24), st.sampled_from(["UP", "DOWN", "DEGRADED"]), st.data())
def test_imex_generated(n, state, data):
    down = data.draw(st.sets(st.integers(0, n - 1), max_size=n))
    lost = data.draw(st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=5))
    lines = ["Nodes:"]
    for i in range(n):
        lines.append(f"Node #{i:<3} - 10.0.0.{i:<9} - {'UNAVAILABLE' if i in down else 'READY':<20} - Version: 580.1")
    lines.append(" Nodes From\\To  " + "   ".join(str(j) for j in range(n)))
    for i in range(n):
        lines.append(f"       {i}        " + "   ".join("N" if (i, j) in lost else "C" for j in range(n)))
    lines += ["", f"Domain State: {state}"]
    st_ = imex_fmt.parse_imex_status("\n".join(lines))
    assert st_["domain_state"] == state and [x["state"] == "UNAVAILABLE" for x in st_["nodes"]] == \
        [i in down for i in range(n)]
    assert st_["connectivity"].get("N", 0) == len(lost) and sorted(map(tuple, st_["not_connected"])) == \
        sorted((a, b, "N") for a, b in lost)
    rep = run_doctor(imex_fmt.imex_document(st_))
    keys = {(f["rule"], f["severity"], f["subject"]) for f in rep["findings"]}
    assert (("imex-domain", "error", "imex") in keys) == (state != "UP")
    assert (("imex-domain", "warning", "imex nodes") in keys) == bool(down)
    assert (("imex-domain", "warning", "imex connectivity") in keys) == bool(lost)


@settings(max_examples=50, deadline=None)
@given(st.text(max_size=300))
def test_imex_junk(text):
    try:
        imex_fmt.parse_imex_status(text)
    except InputError as e:
        assert "\n" not in str(e)


# --------------------------------------------------------------------------------------------
# NCCL logs: the MNNVL lines
def test_log_014_two_trays():
    doc = load_topology(str(cap("014")))
    t = Topology.of(doc)
    assert [h.hostname for h in t.hosts] == ["pod4-gb300-3-tray04-f3", "pod4-gb300-3-tray05-f3"]
    assert [(g.index, g.host, g.local_index, g.pci_bus_id) for g in t.gpus][3:5] == \
        [(3, 0, 3, "0019:06:00.0"), (4, 1, 0, "0008:06:00.0")]
    assert all(g.fabric.clique_id == 0xd26 and g.fabric.health_mask == 0x1aa for g in t.gpus)
    assert all(g.fabric.cluster_uuid is None for g in t.gpus)      # the log's UUIDs are redacted
    assert t.nccl["mnnvl"]["clique_size"] == 8 and t.nccl["mnnvl"]["enabled"] is True
    assert [g.label for g in t.gpus][4] == "1/GPU0"
    assert run_doctor(doc)["findings"] == []


def test_log_016_and_023():
    parsed = nccllog.parse_nccl_log(cap("016").read_text(), "016")
    g0 = next(g for g in parsed["mnnvl"]["gpus"] if g["bus_id"] == "0008:01:00.0")
    assert g0["cluster_uuid"] == facts.cluster_uuid_from_nccl("3143b15bc2cd192b.28cc9b5473fb5b93")
    assert g0["clique_id"] == 0x7ffe and g0["state"] == "completed" and g0["health_mask"] == 0xaa
    p23 = nccllog.parse_nccl_log(cap("023").read_text(), "023")
    mn = p23["mnnvl"]
    assert (mn["clique_id"], mn["clique_size"], mn["nvl_domain_size"]) == (0x2786, 4, 4)
    assert mn["settings"] == {"NCCL_MNNVL_ENABLE": ["1", "0"]} and mn["connections"]["P2P/MNNVL"] == 1
    rep = run_doctor(load_topology(str(cap("023"))))
    assert [(f["rule"], f["severity"], f["subject"]) for f in rep["findings"]] == \
        [("mnnvl-settings", "warning", "NCCL_MNNVL_ENABLE")]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["0x801000", "0x901000", "0x1801000", "0x1901000"]),
                          st.binary(min_size=16, max_size=16), st.integers(0, 2 ** 32 - 1), st.integers(0, 3),
                          st.integers(0, 0xFFFF)), min_size=1, max_size=4, unique_by=lambda g: g[0]),
       st.integers(1, 72), st.integers(1, 72))
def test_log_mnnvl_lines_round_trip(gpus, size, dom):
    lines = []
    for dev, (bus, raw, clique, state, health) in enumerate(gpus):
        u0, u1 = int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little")
        lines.append(f"host1:10:10 [{dev}] NCCL INFO MNNVL busId {bus} fabric UUID {u0:x}.{u1:x} cliqueId {clique:#x} "
                     f"state {state} healthMask {health:#x}")
    lines.append(f"host1:10:10 [0] NCCL INFO MNNVL 1 cliqueId {gpus[0][2]:x} cliqueSize {size} cliqueRank 0 "
                 f"nvlDomainSize {dom}")
    mn = nccllog.parse_nccl_log("\n".join(lines), "log")["mnnvl"]
    assert mn["clique_size"] == size and mn["nvl_domain_size"] == dom and mn["clique_id"] == gpus[0][2]
    for (bus, raw, clique, state, health), g in zip(sorted(gpus, key=lambda g: nccllog.nccl_bus_id(g[0])),
                                                    mn["gpus"]):
        assert g["cluster_uuid"] == facts.cluster_uuid_from_bytes(raw)
        assert (g["clique_id"], g["state"], g["health_mask"]) == (clique, facts.FABRIC_STATES[state], health)


# --------------------------------------------------------------------------------------------
# nvidia-smi nvlink -s of a tray
def test_nvlink_status_019():
    doc = load_topology(str(cap("019")))
    g0, g1 = doc["gpus"]
    assert [l["bw_GBps"] for l in g0["nvlink"]] == [53.125] * 18 and all(l["state"] == "active" for l in g0["nvlink"])
    assert g1["nvlink"] == []      # the author's "..." cut GPU1's links: unknown, not "2 links"
    assert not any("unrecognised line" in w for w in doc["warnings"])   # the pasted command line
    assert run_doctor(doc)["findings"] == []


# --------------------------------------------------------------------------------------------
# NCCL's fused multi-host dump and graph dump
def test_fused_dump_reads_as_two_hosts_of_one_domain():
    doc = load_topology(str(cap(FUSED)))
    t = Topology.of(doc)
    assert len(t.gpus) == 8 and [h.id for h in t.hosts] == [0, 1] and t.multi_host
    assert [h.gpus for h in t.hosts] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert [g.id for g in t.gpus][3:5] == ["0019:06:00.0", "1/0008:06:00.0"]
    assert {n.name for n in t.nics} == {"mlx5_bond_0", "1/mlx5_bond_0"}
    assert set(t.nvlink.nvs) == {g.id for g in t.gpus}               # one NVSwitch fabric for both trays
    assert t.nvlink.pair_bw("0008:06:00.0", "1/0008:06:00.0") == pytest.approx(18 * 40.1)
    assert doc["matrix"]["GPU0"]["GPU4"] == "NV18" and doc["matrix"]["GPU0"]["1/mlx5_bond_0"] == "N/A"
    assert [g.label for g in t.gpus] == [f"{h}/GPU{d}" for h in (0, 1) for d in range(4)]
    assert {c.id for c in t.cpus.values()} == {"CPU0", "CPU1", "1/CPU0", "1/CPU1"}
    assert not any("appears more than once" in w for w in doc["warnings"])


def test_fused_dump_export_round_trip(tmp_path):
    doc = load_topology(str(cap(FUSED)))
    text = export_nccl_xml(doc)
    assert text.count("host_hash=") == 4
    again = parse_nccl_xml(text, "rt.xml")
    assert json.dumps(again["gpus"], sort_keys=True) == json.dumps(doc["gpus"], sort_keys=True)
    one = host_document(doc, 1)
    assert [g["index"] for g in one["gpus"]] == [0, 1, 2, 3] and {n["name"] for n in one["nics"]} == {"mlx5_bond_0"}
    assert "host_hash" not in export_nccl_xml(one)


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 4), st.integers(1, 4))
def test_fused_dumps_of_any_size(hosts, per_host):
    buses = ["0008:06:00.0", "0009:06:00.0", "0018:06:00.0", "0019:06:00.0"][:per_host]
    cpus = []
    for h in range(hosts):
        gpus = "".join(f'<pci busid="{b}" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16">'
                       f'<gpu dev="{d}" sm="100" rank="{h * per_host + d}" gdr="1">'
                       '<nvlink target="fffffff:ffff:ff" count="18" tclass="0x068000"/></gpu></pci>'
                       for d, b in enumerate(buses))
        cpus.append(f'<cpu host_hash="{0x1000 + h:#x}" numaid="0" arch="arm64">{gpus}</cpu>')
    doc = validate_document(parse_nccl_xml('<system version="1">' + "".join(cpus) + "</system>", "f.xml"), "f.xml")
    t = Topology.of(doc)
    assert len(t.gpus) == hosts * per_host and len(t.hosts) == hosts
    assert all(g.index == g.host * per_host + g.local_index for g in t.gpus)
    assert len({g.id for g in t.gpus}) == hosts * per_host
    assert t.nvlink.domains(g.id for g in t.gpus) == [[g.id for g in t.gpus]]   # one NVLink domain


def test_graph_dump_ids_print_as_host_and_gpu():
    assert split_topo_id(72057594037927936) == (1, 0) and graph_gpu_label(72057594037927936 + 3) == "1/GPU3"
    doc = load_topology(str(cap(GRAPH)))
    assert [(g["index"], g.get("host"), g.get("local_index")) for g in doc["gpus"]][4] == (4, 1, 0)
    ch = doc["nccl_graph"]["graphs"][0]["channels"][0]
    assert ch["labels"][4:] == ["1/GPU0", "1/GPU1", "1/GPU2", "1/GPU3"] and ch["ranks"] == list(range(8))


def test_rings_on_the_fused_dump_match_nccls_graph():
    r = run_cli("rings", cap(FUSED), "--compare", cap(GRAPH), "--format", "json")
    assert r.code == 0, r.stderr
    out = r.json()
    assert out["total_bw_GBps"] >= 720 and sorted(out["gpus"]) == list(range(8))
    ng = out["nccl_graph"]
    assert ng["nchannels"] == 16 and ng["total_bw_GBps"] == 720 and ng["covers_gpus"] is True
    assert all(c == list(range(8)) for c in ng["channels"])
    text = run_cli("rings", cap(FUSED), "--compare", cap(GRAPH)).stdout
    assert "72057594037927936" not in text and "graph channel 15: GPU0 > GPU1" in text


def test_graph_without_ranks_names_other_hosts():
    text = cap(GRAPH).read_text()
    bare = re.sub(r' rank="\d+"', "", text)
    from gpucomm.planners.nccl.graphfile import compare_ring_graph

    res = compare_ring_graph(bare, "g.xml", {"gpus": [0, 1, 2, 3], "total_bw_GBps": 720.0})
    assert res["channels"][0] == [0, 1, 2, 3, "1/GPU0", "1/GPU1", "1/GPU2", "1/GPU3"] and res["covers_gpus"] is False


# --------------------------------------------------------------------------------------------
# the document: several hosts validate, ids
def test_host_ids_and_validation():
    assert host_qualified("CPU0", 2) == "2/CPU0" and split_host_id("12/mlx5_0") == (12, "mlx5_0")
    doc = load_topology(str(cap(FUSED)))
    d = copy.deepcopy(doc)
    d["gpus"][5]["host"] = 0           # two GPUs of one host with one bus id: refused
    with pytest.raises(InputError, match="share PCI bus id 0009:06:00.0"):
        validate_document(d, "x.json", saved=True)


def test_nvlink_domain_sources():
    d = Topology.of(load_topology("example:gb200-nvl72")).nvlink_domain()
    assert (d.multi_node, d.size, d.nodes, d.source) == (True, 72, 18, "imex")
    tray = Topology.of(load_topology("example:gb200-tray")).nvlink_domain()
    assert tray.multi_node and tray.size is None and "unknown" in tray.note
    fused = Topology.of(load_topology(str(FAULTS / "mnnvl-2tray-healthy.json"))).nvlink_domain()
    assert fused.source == "imex" and fused.size == 8
    hgx = Topology.of(load_topology("example:hgx-h100")).nvlink_domain()
    assert not hgx.multi_node and hgx.size == 8


def test_cliques():
    t = Topology.of(load_topology(str(FAULTS / "fabric-clique-split.json")))
    assert [(c.clique_id, c.gpus, c.hosts) for c in t.cliques()] == [(0xd26, (0, 1, 2, 4, 5, 6, 7), (0, 1)),
                                                                     (0xd27, (3,), (0,))]
    t = Topology.of(load_topology(str(FAULTS / "fabric-in-progress.json")))
    assert t.cliques()[0].gpus == (0, 1, 2, 3, 4, 5, 7)


# --------------------------------------------------------------------------------------------
# the doctor over a fleet: a tray in another clique than its rack mates; the job's environment
def _tray(clique: int) -> dict:
    doc = load_topology("example:gb200-nvl72")
    for g in doc["gpus"]:
        g["fabric"]["clique_id"] = clique
    return doc


def test_fleet_tray_in_another_clique():
    rep = doctor_fleet([(f"tray{i}", _tray(0x7ffe if i != 2 else 0x7ffd)) for i in range(4)])
    f = rep["fleet_findings"]
    assert [(x["rule"], x["severity"], x["subject"]) for x in f] == [("fabric-clique", "warning", "tray2")]
    assert "3 of the 4 trays" in f[0]["message"] and rep["degraded"]
    clean = doctor_fleet([(f"tray{i}", _tray(0x7ffe)) for i in range(3)])
    assert clean["fleet_findings"] == [] and not clean["degraded"]
    even = doctor_fleet([("a", _tray(1)), ("b", _tray(2))])
    assert [x["severity"] for x in even["fleet_findings"]] == ["info"]


def test_fleet_cli_renders_across_findings(tmp_path):
    paths = []
    for i in range(3):
        p = tmp_path / f"tray{i}.json"
        p.write_text(json.dumps(_tray(0x7ffe if i else 0x7ffd)))
        paths.append(p)
    r = run_cli("doctor", *paths)
    assert r.code == 5 and "tray0 (across nodes)" in r.stdout


def test_job_environment(monkeypatch):
    doc = load_topology("example:gb200-nvl72")
    rep = run_doctor(doc, env={"NCCL_MNNVL_ENABLE": "0", "NCCL_MNNVL_CLIQUE_ID": "-2", "HOME": "/x"})
    keys = {(f["rule"], f["severity"], f["subject"]) for f in rep["findings"]}
    assert keys == {("mnnvl-settings", "warning", "NCCL_MNNVL_ENABLE"), ("mnnvl-settings", "info", "NCCL_MNNVL_CLIQUE_ID")}
    monkeypatch.setenv("NCCL_CUMEM_ENABLE", "0")
    r = run_cli("doctor", "example:gb200-nvl72", "--format", "json")
    assert r.code == 5 and r.json()["findings"][0]["subject"] == "NCCL_CUMEM_ENABLE"


def test_fabric_health_severity_and_missing_fabric():
    doc = load_topology("example:gb300-nvl72")
    doc["gpus"][0]["fabric"]["health_mask"] = 0x19a      # route unhealthy
    doc["gpus"][1]["fabric"]["status"] = "NVML_ERROR_UNKNOWN"
    del doc["gpus"][2]["fabric"]
    keys = {(f["rule"], f["severity"], f["subject"]) for f in run_doctor(doc)["findings"]}
    assert keys == {("fabric-health", "error", "GPU0"), ("fabric-state", "error", "GPU1"),
                    ("fabric-state", "warning", "GPU2")}


# --------------------------------------------------------------------------------------------
# Kubernetes: GPU Feature Discovery's clique label and the rack's domain size
def test_gfd_clique_label_format():
    real = (CAPTURES / "k8s" / "003_gb300-oke_4-worker-common-labels_gpu-clique_oci-rdma-topology_EXCERPT.txt")
    line = next(l for l in real.read_text().splitlines() if l.startswith(k8s.GFD_CLIQUE))
    pattern = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.\d+$")
    assert pattern.match(line.split("=", 1)[1])
    labels = k8s.node_labels(load_topology("example:gb200-nvl72"))
    assert labels[k8s.GFD_CLIQUE] == "6f3c2a51-9d0e-4b7a-8c1f-2e5d7a9b0c4d.32766"
    assert pattern.match(labels[k8s.GFD_CLIQUE]) and k8s.check_label(k8s.GFD_CLIQUE, labels[k8s.GFD_CLIQUE]) is None
    assert labels[k8s.PREFIX + "nvlink.domain-size"] == "72" and labels[k8s.PREFIX + "nvlink.domain-nodes"] == "18"


def test_labels_say_when_the_domain_is_unknown_and_cliques_differ():
    d = k8s.labels_document(load_topology("example:gb200-tray"))
    assert k8s.PREFIX + "nvlink.domain-size" not in d["labels"] and "domain-size left out" in d["warnings"][0]
    split = load_topology(str(FAULTS / "fabric-clique-split.json"))
    d = k8s.labels_document(split)
    assert k8s.GFD_CLIQUE not in d["labels"] and any("2 different cliques" in w for w in d["warnings"])


_FUSED_VALUES = st.sampled_from(["", "0", "-1", "0x10", "0x78973abf567f863e", "0xc26640af09ddd935", "zz", "1", "0008:06:00.0",
                                 "0009:06:00.0", "fffffff:ffff:ff", "0x030200", "0x068000", "arm64", "103", "18", "mlx5_bond_0"])


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_mutated_fused_dumps_read_or_refuse_in_one_line(data):
    """Attribute values of the fused dump replaced (host hashes among them): an InputError of one line,
    or a document that passes the schema and is written back as a fused XML that reads the same GPUs."""
    import jsonschema

    from gpucomm.probes.errors import GpucommError
    from gpucomm.probes.model import schema_path

    text = cap(FUSED).read_text()
    for _ in range(data.draw(st.integers(1, 5))):
        spans = [m.span(1) for m in re.finditer(r'="([^"]*)"', text)]
        a, b = data.draw(st.sampled_from(spans))
        text = text[:a] + data.draw(_FUSED_VALUES) + text[b:]
    try:
        doc = validate_document(parse_nccl_xml(text, "fuzz.xml"), "fuzz.xml")
    except InputError as e:
        assert "\n" not in str(e)
        return
    schema = json.loads(open(schema_path()).read())
    assert not list(jsonschema.Draft202012Validator(schema).iter_errors(doc))
    t = Topology.of(doc)
    assert len({g.id for g in t.gpus}) == len(t.gpus)
    try:
        out = export_nccl_xml(doc)
    except GpucommError:
        return
    again = parse_nccl_xml(out, "again.xml")
    assert sorted((g.get("host", 0), g["pci_bus_id"]) for g in again["gpus"]) == \
        sorted((g.get("host", 0), g["pci_bus_id"]) for g in doc["gpus"])
