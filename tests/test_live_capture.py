"""A capture from a live GPU node (fixtures/captures/live/h200-vm, SOURCES.md: one H200 in a
Firecracker VM, NCCL 2.28.9): what gpucomm reads from it agrees with what the driver and NCCL itself
printed on that machine."""
from __future__ import annotations

import pytest

from support import CAPTURES, run_cli

from gpucomm.planners.nccl.comm import nccl_comm, reference_dict
from gpucomm.probes import facts
from gpucomm.probes.formats.nccllog import NCCL_LINE_MAX, parse_nccl_log
from gpucomm.probes.formats.nccltests import split_nccltests
from gpucomm.probes.formats.smi_topo import parse_topo_text
from gpucomm.probes.load import load_topology
from gpucomm.probes.topology import Topology

LIVE = CAPTURES / "live" / "h200-vm"
INPUTS = ["probe.json", "nccl-topo.xml"]


def _nccl_log() -> dict:
    return parse_nccl_log((LIVE / "nccl-init.log").read_text(), str(LIVE / "nccl-init.log"))


def test_nccl_dump_with_numaid_minus_one_reads_whole():
    """NCCL writes numaid="-1" where the VM has no NUMA information: that CPU is the document's CPU0,
    and the GPU's and the NIC's links to it are kept (they were dropped as links to 'CPU-1')."""
    doc = load_topology(str(LIVE / "nccl-topo.xml"))
    # what a VM's dump cannot say is said (the NUMA node, the PCIe width), nothing else
    assert len(doc["warnings"]) == 2 and all("VMs" in w for w in doc["warnings"]), doc["warnings"]
    ends = sorted(tuple(sorted((l["a"], l["b"]))) for l in doc["links"] if l["kind"] == "pcie")
    assert len(ends) == 2 and all("CPU0" in e for e in ends)


@pytest.mark.parametrize("src", INPUTS)
def test_nccl_model_matches_nccls_own_log_on_the_live_node(src):
    """Our model of NCCL, from our own probe and from NCCL's dump, finds what NCCL 2.28.9 printed:
    the GPU->NET path (type, bandwidth at NCCL's print precision) and the ring and tree graphs."""
    log = _nccl_log()
    res = nccl_comm(load_topology(str(LIVE / src)))
    theirs = [(p["type"], f"{p['bw']:.1f}") for p in log["paths"]
              if p["from"].startswith("GPU/") and p["to"].startswith("NET/")]
    ours = [(p["type"], f"{p['bw']:.1f}") for p in res.paths_dict()["gpu_net"][0]["to"]]
    assert ours == theirs == [("PHB", "1.2")]
    ref = reference_dict(res)
    ring = next(g for g in log["graphs"] if g["pattern_name"] == "ring")
    tree = next(g for g in log["graphs"] if g["pattern_name"] == "tree")
    assert (int(ref["search_channels"]), float(ref["bw_intra"]), ref["type_intra"]) == \
        (ring["n_channels"], ring["bw_intra"], ring["type_intra"])
    assert (ref["tree"]["search_channels"], ref["tree"]["bw_intra"], ref["tree"]["type_intra"]) == \
        (tree["n_channels"], tree["bw_intra"], tree["type_intra"])
    assert int(ref["channels"]) == log["channels"]


def test_probe_and_nccl_dump_of_one_node_do_not_differ():
    """What a source does not say (an NCCL dump names no GPU model; link_width="0") is not a difference."""
    r = run_cli("diff", LIVE / "probe.json", LIVE / "nccl-topo.xml", "--format", "json")
    assert r.code == 0, r.stdout + r.stderr
    out = r.json()
    assert (out["identical"], out["differences"], out["compared"] > 30) == (True, [], True)


def test_plain_interface_of_unknown_speed_gets_nccls_socket_default():
    """eth0 (virtio, no /sys/class/net/eth0/speed): NCCL assumed 10 Gb/s and so do we, saying so; a NIC
    of unknown kind keeps the generation's rail default."""
    r = run_cli("paths", LIVE / "probe.json", "--format", "json")
    assert r.code == 0, r.stderr
    out = r.json()
    assert {row["bw_GBps"] for row in out["rows"]} == {facts.SOCKET_NIC_GBPS / 8}
    assert any("NCCL's socket-transport default" in a for a in out["assumptions"])
    doc = load_topology(str(LIVE / "probe.json"))
    for flag, want in ((False, facts.SOCKET_NIC_GBPS), (None, 400.0), (True, 400.0)):
        doc["nics"][0]["rdma"] = flag
        topo = Topology.of(doc)
        assert topo.nic_gbps(topo.nics[0]) == want, flag


def test_smi_topo_with_ansi_header_reads_like_the_probe():
    theirs = parse_topo_text((LIVE / "nvidia-smi-topo-m.txt").read_text(), path="nvidia-smi-topo-m.txt")
    ours = load_topology(str(LIVE / "probe.json"))
    assert theirs["warnings"] == []
    assert [(g["index"], g["cpu_affinity"], g["numa_node"]) for g in theirs["gpus"]] == \
        [(g["index"], g["cpu_affinity"], g["numa_node"]) for g in ours["gpus"]] == [(0, "0-15", 0)]


def test_nccl_trees_line_cut_at_its_message_buffer_is_named():
    log = _nccl_log()
    cut = [w for w in log["warnings"] if "message limit" in w]
    assert len(cut) == 1 and "channels from 47 on" in cut[0], log["warnings"]
    assert log["warnings"] == cut
    lineno = int(cut[0].split(": ")[0].rsplit(":", 1)[1])
    line = (LIVE / "nccl-init.log").read_text().splitlines()[lineno - 1]
    assert len(line) == NCCL_LINE_MAX
    # NCCL's per-channel "Tree N : ..." lines give all 64 channels the cut line lost
    assert sorted({t["channel"] for t in log["trees"]}) == list(range(64))


def test_own_bench_table_reads_back_with_its_ranks_and_nodes():
    runs = split_nccltests((LIVE / "bench-collective.txt").read_text(), "bench-collective.txt")
    assert [(r["collective"], r["n_ranks"], r["n_ranks_source"], r["nodes"]) for r in runs] == [
        ("all_reduce", 1, "gpucomm bench header", 1), ("all_gather", 1, "gpucomm bench header", 1),
        ("broadcast", 1, "gpucomm bench header", 1)]
    assert all(r["warnings"] == [] for r in runs)
    # one rank moves nothing between GPUs: nccl-tests' bus bandwidth of all_reduce and all_gather is 0
    # (factors 2(n-1)/n and (n-1)/n), broadcast's is its algorithm bandwidth (factor 1)
    rows = {r["collective"]: [row["out_of_place"] for row in r["rows"]] for r in runs}
    assert {x["busbw_GBps"] for c in ("all_reduce", "all_gather") for x in rows[c]} == {0.0}
    assert all(x["busbw_GBps"] == x["algbw_GBps"] for x in rows["broadcast"])


def test_cpuid_family_and_model_are_recorded_where_the_name_hides_them(tmp_path):
    """The VM names its CPU 'Intel(R) Xeon(R) Processor'; /proc/cpuinfo still gives CPUID's family 6,
    model 207 (Emerald Rapids), which NCCL wrote into its dump.  The probe records them, and NCCL's
    model is given them instead of a generation's guess."""
    from pathlib import Path

    from gpucomm.planners.nccl.comm import pinned_xml
    from gpucomm.probes.sources import numa
    from gpucomm.probes.sources.host import Host

    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_text((LIVE / "proc-cpuinfo-head.txt").read_text())
    host = numa.collect(Host(root=Path(tmp_path)))["host"]
    assert (host["cpu_model"], host["cpu_family"], host["cpu_model_id"]) == ("Intel(R) Xeon(R) Processor", 6, 207)
    doc = load_topology(str(LIVE / "probe.json"))   # captured before the probe recorded them
    before = Topology.of(doc)
    assert 'familyid="6" modelid="143"' in pinned_xml(before)   # the generation's guess
    assert any("CPU model unknown" in a for a in before.all_assumptions())
    doc["host"].update(cpu_family=6, cpu_model_id=207)
    after = Topology.of(doc)
    xml = pinned_xml(after)
    theirs = (LIVE / "nccl-topo.xml").read_text()
    assert 'familyid="6" modelid="207"' in xml and 'familyid="6" modelid="207"' in theirs
    assert not any("CPU model unknown" in a for a in after.all_assumptions())
