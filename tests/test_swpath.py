"""The software path (docs/SWPATH.md): the probe sources of probes/sources/swpath.py live, on the
recorded hosts of fixtures/captures/swpath/ and through a snapshot; the ELF and ld.so.cache readers;
the transport NCCL runs (planners/collectives/transport.py) from a flag, an NCCL log and the probe;
predict naming it; the fitted transport constants."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from gpucomm.planners.collectives import transport as tr
from gpucomm.planners.collectives.predict import build_comparison, build_prediction
from gpucomm.planners.health.doctor import run_doctor
from gpucomm.probes.errors import InputError
from gpucomm.probes.formats import elf
from gpucomm.probes.formats.ldcache import parse_ldcache, write_ldcache
from gpucomm.probes.formats.nccllog import parse_nccl_log
from gpucomm.probes.formats.nccltests import parse_nccltests
from gpucomm.probes.load import load_topology
from gpucomm.probes.sources.host import Host, environ_json, extract_bytes
from gpucomm.probes.sources.probe import probe_host
from gpucomm.probes.sources.snapshot import load_snapshot, write_snapshot
from gpucomm.probes.topology import Topology

ROOT = Path(__file__).resolve().parent.parent
SWPATH = ROOT / "fixtures" / "captures" / "swpath"
SCALING = ROOT / "fixtures" / "captures" / "nccltests" / "scaling"
EVIDENCE = SCALING / "evidence"
ITEMS = ("driver", "nccl", "netplugin", "gdr", "iommu", "hypervisor", "services")


# --------------------------------------------------------------------------------------------
# readers
def test_elf_version_string_from_rodata_only():
    lib = elf.minimal_elf(b"\x00" * 3000 + b"NCCL version 2.21.5+cuda12.4\x00tail")
    rd = lambda o, n, r: lib[o:o + n]  # noqa: E731
    assert [s.name for s in elf.sections(rd)] == ["", ".rodata", ".shstrtab"]
    assert elf.nccl_version(rd) == ("2.21.5+cuda12.4", None)
    assert elf.version_tuple("2.21.5+cuda12.4") == (2, 21, 5)
    plugin = elf.minimal_elf(b"x\x00aws-ofi-nccl 1.9.1-aws\x00")
    assert elf.plugin_banner(lambda o, n, r: plugin[o:o + n])[:2] == ("aws-ofi-nccl", "1.9.1-aws")


def test_elf_scan_keeps_only_the_windows_that_matter():
    lib = elf.minimal_elf(b"\x00" * 200000 + b"NCCL version 2.18.3+cuda12.2\x00")
    kept = {}

    def rd(o, n, record):
        if record:
            kept[o] = lib[o:o + n]
        return lib[o:o + n]

    assert elf.nccl_version(rd)[0] == "2.18.3+cuda12.2"
    assert sum(len(v) for v in kept.values()) < 2000          # header, section table, names, the string
    sparse = bytearray(len(lib))                                # what a snapshot's extract gives back
    for o, d in kept.items():
        sparse[o:o + len(d)] = d
    assert elf.nccl_version(lambda o, n, r: bytes(sparse[o:o + n]))[0] == "2.18.3+cuda12.2"


def test_elf_reader_on_a_real_library():
    libc = next((p for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib64/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6")
                 if os.path.exists(p)), None)
    if libc is None:
        pytest.skip("no libc.so.6 to read")
    data = Path(libc).read_bytes()
    secs = elf.sections(lambda o, n, r: data[o:o + n])
    assert ".rodata" in {s.name for s in secs} and ".dynsym" in {s.name for s in secs}


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_elf_reader_never_raises(data):
    blob = b"\x7fELF" + data if data[:1] == b"\x02" else data
    rd = lambda o, n, r: blob[o:o + n]  # noqa: E731
    elf.sections(rd)
    elf.nccl_version(rd)
    elf.plugin_banner(rd)


def test_ldcache_round_trip_and_the_real_cache():
    entries = [{"name": "libnccl.so.2", "path": "/usr/lib/x86_64-linux-gnu/libnccl.so.2", "flags": 0x303},
               {"name": "libnccl-net.so", "path": "/opt/amazon/ofi-nccl/lib/libnccl-net.so", "flags": 0x303}]
    assert parse_ldcache(write_ldcache(entries)) == entries
    real = Path("/etc/ld.so.cache")
    if real.is_file():
        got = parse_ldcache(real.read_bytes())
        assert got and all(e["path"].startswith("/") for e in got)
        lp = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=30)
        if lp.returncode == 0 and "libs found" in lp.stdout:
            assert len(got) == int(lp.stdout.split()[0])


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.sampled_from([b"", b"glibc-ld.so.cache1.1", b"ld.so-1.7.0"]))
def test_ldcache_parser_raises_only_input_error(data, magic):
    try:
        parse_ldcache(magic + data)
    except InputError:
        pass


def test_ldcache_with_a_bad_offset_is_one_input_error():
    blob = bytearray(write_ldcache([{"name": "a", "path": "/a"}]))
    struct.pack_into("<I", blob, 48 + 4, 10 ** 6)
    with pytest.raises(InputError):
        parse_ldcache(bytes(blob))


# --------------------------------------------------------------------------------------------
# the sources: live, recorded, snapshot round trip
def test_live_probe_reports_every_item_found_absent_or_unreadable_with_why():
    doc = probe_host(Host(), sources=",".join(ITEMS))
    assert [s["name"] for s in doc["sources"]] == list(ITEMS)
    for s in doc["sources"]:
        assert s["status"] in ("ok", "partial")
        state, _, why = s["detail"].partition(": ")
        assert state in ("found", "absent", "unreadable") and len(why) > 10, s
    for item in ("driver", "nccl", "net_plugins", "gdr", "iommu", "hypervisor", "services"):
        assert doc["software"][item]["status"] in ("found", "absent", "unreadable")


EXPECTED = {
    "plugin-slingshot": {"nccl": "2.21.5+cuda12.4", "plugin": ("aws-ofi-nccl", "1.9.1-aws"), "gdr": True, "vm": False,
                         "transport": "plugin:aws-ofi-nccl"},
    "socket-ethernet": {"nccl": "2.20.5+cuda12.4", "plugin": None, "gdr": True, "vm": False, "transport": "ib"},
    "vm-kvm": {"nccl": "2.23.4+cuda12.6", "plugin": None, "gdr": False, "vm": True, "transport": "ib-nogdr"},
    "nogdr-ib": {"nccl": "2.18.3+cuda12.2", "plugin": None, "gdr": False, "vm": False, "transport": "ib-nogdr"},
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_hosts_replay(name):
    doc = load_snapshot(SWPATH / name)
    sw = Topology.of(doc).software
    want = EXPECTED[name]
    assert sw.known and sw.nccl_in_use().version == want["nccl"]
    assert (sw.plugin_loaded.family, sw.plugin_loaded.version) == want["plugin"] if want["plugin"] else \
        sw.plugin_loaded is None
    assert sw.gdr is want["gdr"] and sw.vm is want["vm"]
    # these hosts record no NICs: the transport from their software path alone
    assert tr.from_probe(Topology.of(doc)).name == want["transport"]


def test_recorded_hosts_are_what_the_script_writes():
    out = subprocess.run([sys.executable, str(ROOT / "fixtures" / "swpath_hosts.py"), "--check"], capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr


def test_vm_host_iommu_and_services():
    vm = load_snapshot(SWPATH / "vm-kvm")["software"]
    assert vm["iommu"]["mode"] == "translated" and vm["hypervisor"]["platform"] == "QEMU/KVM"
    fm = load_snapshot(SWPATH / "nogdr-ib")["software"]["services"]["services"]["fabricmanager"]
    assert fm == {"installed": True, "enabled": True, "running": True, "evidence": "systemd invocation record"}


def test_snapshot_records_and_replays_the_software_path(tmp_path):
    root = tmp_path / "root"
    lib = root / "opt/nccl/lib/libnccl.so.2.19.3"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(elf.minimal_elf(b"\x00" * 70000 + b"NCCL version 2.19.3+cuda12.3\x00"))
    os.symlink("libnccl.so.2.19.3", root / "opt/nccl/lib/libnccl.so.2")
    (root / "usr/lib").mkdir(parents=True)
    for i in range(30):   # a loader directory's other files stay out of the snapshot
        (root / f"usr/lib/libother{i}.so").write_bytes(b"x")
    (root / "etc").mkdir()
    (root / "etc/ld.so.cache").write_bytes(write_ldcache([{"name": "libnccl.so.2", "path": "/opt/nccl/lib/libnccl.so.2"}]))
    (root / "environ.json").write_text(environ_json({"variables": {"NCCL_IB_DISABLE": "1", "HOME": "/root"}}))
    (root / "meta.json").write_text(json.dumps({"schema": "gpucomm.snapshot/v1", "software_recorded": True}))
    live = probe_host(Host(root=root))
    res = write_snapshot(Host(root=root), tmp_path / "snap.tar.gz")
    back = load_snapshot(tmp_path / "snap.tar.gz")
    assert back["software"] == live["software"]
    assert live["software"]["nccl"]["libraries"][0]["version"] == "2.19.3+cuda12.3"
    assert live["software"]["nccl"]["env"] == {"NCCL_IB_DISABLE": "1"}   # only the variables that matter
    assert res["bytes"] < 20000


def test_extract_reads_as_a_sparse_file(tmp_path):
    f = tmp_path / "lib.so"
    f.write_bytes(extract_bytes(100, {10: b"abc", 50: b"xyz"}))
    h = Host(root=tmp_path)
    assert h.read_range("/lib.so", 8, 7) == b"\x00\x00abc\x00\x00"
    assert h.file_size("/lib.so") == 100
    assert h.read_range("/lib.so", 95, 20) == b"\x00" * 5


def test_old_snapshots_say_not_recorded():
    doc = load_topology(str(ROOT / "fixtures" / "hosts" / "polaris"))
    st_ = {s["name"]: s for s in doc["sources"]}
    assert all(st_[i]["status"] == "unavailable" and "not recorded" in st_[i]["detail"] for i in ITEMS)
    assert "software" not in doc


# --------------------------------------------------------------------------------------------
# the transport
def test_transport_flag_values():
    assert [tr.parse(x).name for x in ("ib", "ib-nogdr", "socket", "plugin:aws-ofi-nccl", "plugin:gib:nogdr")] == \
        ["ib", "ib-nogdr", "socket", "plugin:aws-ofi-nccl", "plugin:gib:nogdr"]
    for bad in ("", "ethernet", "plugin:", "plugin:x:y"):
        with pytest.raises(InputError):
            tr.parse(bad)


@pytest.mark.parametrize("log, name, gdr", [
    ("polaris_nccl-info_cxi.txt", "plugin:aws-ofi-nccl", True),      # the Polaris plugin setups' own evidence
    ("snellius-h100_ibstat_nccl-info.txt", "ib", True),
    ("aws-p5_nccl-info_efa.txt", "plugin:aws-ofi-nccl", True),
])
def test_transport_from_the_runs_nccl_lines(log, name, gdr):
    p = parse_nccl_log((EVIDENCE / log).read_text(encoding="utf-8"), log)
    t = tr.from_log(p)
    assert (t.name, t.gdr, t.source) == (name, gdr, "nccl log")


def test_socket_log_of_the_live_vm():
    log = ROOT / "fixtures" / "captures" / "live" / "h200-vm" / "nccl-init.log"
    t = tr.from_log(parse_nccl_log(log.read_text(encoding="utf-8"), str(log)))
    assert t.name == "socket" and "NCCL 2.28.9" in t.why


def test_crossval_transport_map_agrees_with_polaris_evidence():
    sys.path.insert(0, str(ROOT / "tools"))
    import crossval

    p = parse_nccl_log((EVIDENCE / "polaris_nccl-info_cxi.txt").read_text(encoding="utf-8"), "polaris")
    assert tr.parse(crossval.transport_for("polaris", "nccl221_env4")[0]).name == tr.from_log(p).name


def test_predict_names_and_applies_the_transport():
    doc = load_topology("example:polaris")
    plug = build_prediction(doc, "all_reduce", "1G", nodes=2, transport="plugin:aws-ofi-nccl")
    sock = build_prediction(doc, "all_reduce", "1G", nodes=2, transport="socket")
    assert plug["transport"]["name"] == "plugin:aws-ofi-nccl" and sock["transport"]["name"] == "socket"
    # Polaris' GPUs reach their NICs through the root complex: GDR capped at GDR_HOST_BRIDGE_EFFICIENCY
    assert plug["graph"]["node_net_bw"] == pytest.approx(2 * tr.GDR_HOST_BRIDGE_EFFICIENCY * 24.0, rel=1e-3)
    assert sock["graph"]["node_net_bw"] == pytest.approx(2 * tr.SOCKET_GBPS / 8, rel=1e-3)
    one = build_prediction(doc, "all_reduce", "1G", nodes=1)
    assert one["transport"]["applies"].startswith("no: one node")


def test_predict_compare_reads_the_runs_interleaved_nccl_lines():
    table = (SCALING / "096_snellius-h100_1n_all_reduce.txt").read_text(encoding="utf-8")
    info = (EVIDENCE / "polaris_nccl-info_cxi.txt").read_text(encoding="utf-8").split("Lines below")[1]
    info = "\n".join(ln for ln in info.splitlines() if " NCCL INFO " in ln)
    lines = table.splitlines()
    text = "\n".join(lines[:12] + info.splitlines() + lines[12:]) + "\n"
    run = parse_nccltests(text, "t.txt")
    assert run["nccl_net"]["name"] == "AWS Libfabric" and run["nccl_net"]["gdr"] is True
    rep = build_comparison(load_topology("example:hgx-h100-4gpu"), text, "t.txt", transport="socket")
    c = rep["comparisons"][0]
    assert c["transport"]["name"] == "plugin:aws-ofi-nccl" and c["transport"]["source"] == "nccl log"
    assert any("--transport socket is not what the run's NCCL lines show" in n for n in c["notes"])


def test_doctor_on_recorded_hosts_merged_into_their_machines():
    """The no-GDR host's software path on a DGX A100 (RDMA NICs): gdr-unavailable; the plugin host's
    on Polaris (Slingshot, no RDMA verbs device): nothing."""
    dgx = load_topology("example:dgx-a100")
    dgx["software"] = load_snapshot(SWPATH / "nogdr-ib")["software"]
    rules = {f["rule"] for f in run_doctor(dgx)["findings"]}
    assert "gdr-unavailable" in rules and "nvlink-services" not in rules
    pol = load_topology("example:polaris")
    pol["software"] = load_snapshot(SWPATH / "plugin-slingshot")["software"]
    assert not {"gdr-unavailable", "socket-transport"} & {f["rule"] for f in run_doctor(pol)["findings"]}
    assert tr.from_probe(Topology.of(pol)).name == "plugin:aws-ofi-nccl"


@pytest.mark.slow
def test_shipped_transport_constants_are_the_fit_and_most_tables_pass():
    """The constants in transport.py are tools/crossval.py's fit on their tables, and uncalibrated
    predictions with each table's transport, cross-validated, are within 15% at the largest size on
    most of the tables (49 of 65 when written)."""
    sys.path.insert(0, str(ROOT / "tools"))
    import crossval

    rep = crossval.transport_report(crossval.transport_tables())
    for k, v in rep["constants"].items():
        assert tr.constants()[k] == pytest.approx(v, rel=0.005), k
    counted = [r for r in rep["rows"] if not r["fitted_default"]]
    ok = [r for r in counted if r["largest_error_pct"] is not None and abs(r["largest_error_pct"]) <= 15]
    assert len(ok) >= 0.7 * len(counted)


def test_rings_compare_says_when_the_logs_transport_is_not_the_probes():
    from gpucomm.planners.collectives.logcompare import transport_vs_probe

    log = parse_nccl_log((EVIDENCE / "polaris_nccl-info_cxi.txt").read_text(encoding="utf-8"), "polaris.log")
    rec, note = transport_vs_probe(log, load_topology("example:polaris"))   # no plugin recorded: sockets expected
    assert rec["differs"] and rec["log"]["name"] == "plugin:aws-ofi-nccl" and rec["probe"]["name"] == "socket"
    assert "the log's inter-node transport is plugin:aws-ofi-nccl" in note
    pol = load_topology("example:polaris")
    pol["software"] = load_snapshot(SWPATH / "plugin-slingshot")["software"]
    rec, note = transport_vs_probe(log, pol)
    assert not rec["differs"] and note is None


def test_a_topology_without_nics_crosses_nodes_on_sockets():
    """A bare matrix without NIC columns: predict models NCCL's one Ethernet port, and the transport
    line says socket (it said 'ib, assumed' beside the socket note)."""
    doc = load_topology(str(ROOT / "fixtures" / "captures" / "topo" / "21_h100-nvl-x4_nv12_tabs.txt"))
    t = tr.from_probe(Topology.of(doc))
    assert t.name == "socket" and t.source == "assumed" and "no NIC" in t.why
    with_nics = load_topology("example:hgx-h100")
    assert tr.from_probe(Topology.of(with_nics)).name == "ib"
