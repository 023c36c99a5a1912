"""probe_host on THIS machine (no GPU, no NVML, no nvidia-smi, no InfiniBand here) and through the
CLI.  Only invariants are asserted: the machine's exact devices are not known in advance."""
from __future__ import annotations

import os

import pytest

from support import CAPTURES, run_cli
from gpucomm.probes.sources import smi
from gpucomm.probes.errors import InputError
from gpucomm.probes.sources.host import CommandResult, CommandRunner, Host, RecordedRunner
from gpucomm.probes.model import dumps_json
from gpucomm.probes.sources.probe import DEFAULT_SOURCES, parse_sources, probe_host
from support import two_socket_switch_tree, validate



@pytest.fixture(scope="module")
def live():
    return probe_host(Host())


def test_live_document_is_valid_and_deterministic(live):
    validate(live)
    assert dumps_json(live) == dumps_json(probe_host(Host()))


def test_live_reports_cpus_numa_pci_and_why_sources_are_missing(live):
    assert live["numa_nodes"] and all(n["cpus"] for n in live["numa_nodes"])
    src = {s["name"]: s for s in live["sources"]}
    assert list(src) == list(DEFAULT_SOURCES)
    for name in ("nvml", "smi", "ib"):
        s = src[name]
        assert s["status"] in ("ok", "partial", "unavailable", "error") and s["detail"], s
        if s["status"] == "unavailable":
            assert len(s["detail"]) > 15   # a reason, not a bare "unavailable"
    if os.path.isdir("/sys/bus/pci/devices") and os.listdir("/sys/bus/pci/devices"):
        assert src["sysfs"]["status"] in ("ok", "partial")
        assert {d["bdf"] for d in live["pci_devices"]} == set(os.listdir("/sys/bus/pci/devices"))
    if not os.path.exists("/dev/nvidiactl"):
        assert src["nvml"]["status"] == "unavailable" and live["gpus"] == []
    assert live["host"]["provenance"] == "live" and live["host"]["kernel"] and live["host"]["hostname"]
    # every physical PCI NIC without an RDMA device is a NIC; virtual interfaces are not
    ifs = {i["name"]: i for i in live.get("net_interfaces", [])}
    for n in live["nics"]:
        assert n["name"] in ifs or n.get("rdma")
    for name, i in ifs.items():
        if i["kind"] == "virtual":
            assert name not in {n["name"] for n in live["nics"]}


def test_live_graph_ids_are_consistent(live):
    ids = {g["id"] for g in live["gpus"]} | {n["id"] for n in live["nics"]} | {s["id"] for s in live["switches"]}
    ids |= {f"CPU{n['id']}" for n in live["numa_nodes"]}
    for l in live["links"]:
        assert l["a"] in ids and l["b"] in ids, l
    for rec in live["gpus"] + live["nics"] + live["switches"]:
        assert rec.get("parent") is None or rec["parent"] in ids


def test_source_selection():
    doc = probe_host(Host(), ["numa"])
    assert [s["name"] for s in doc["sources"]] == ["numa"]
    assert "pci_devices" not in doc and doc["gpus"] == [] and doc["numa_nodes"]
    assert parse_sources("sysfs, numa,sysfs") == ["sysfs", "numa"]
    with pytest.raises(InputError, match="unknown source 'gpu'"):
        parse_sources("gpu")


def test_a_crashing_source_is_contained(monkeypatch):
    from gpucomm.probes.sources import ib

    def boom(host):
        raise ZeroDivisionError("synthetic")
    monkeypatch.setattr(ib.SOURCE, "available", boom)
    doc = probe_host(Host(), ["ib", "numa"])
    s = doc["sources"][0]
    assert s["status"] == "error" and "ZeroDivisionError" in s["detail"] and "please report" in s["detail"]
    assert doc["numa_nodes"]


# --------------------------------------------------------------------------------------------
# through the CLI
def test_cli_probe_json():
    r = run_cli("probe", "--format", "json")
    assert r.code == 0, r.stderr
    doc = r.json()
    validate(doc)
    assert "Traceback" not in r.stderr


def test_cli_probe_sysfs_root_and_snapshot(tmp_path):
    two_socket_switch_tree(tmp_path / "root")
    r = run_cli("probe", "--sysfs-root", tmp_path / "root", "--format", "json")
    assert r.code == 0, r.stderr
    doc = r.json()
    assert doc["matrix"]["GPU0"]["mlx5_0"] == "PIX" and len(doc["gpus"]) == 4
    r = run_cli("snapshot", "--sysfs-root", tmp_path / "root", "-o", tmp_path / "n.tar.gz")
    assert r.code == 0, r.stderr
    r2 = run_cli("probe", "--from", tmp_path / "n.tar.gz", "--format", "json")
    assert r2.code == 0, r2.stderr
    again = r2.json()
    assert again["matrix"] == doc["matrix"] and again["links"] == doc["links"]


# --------------------------------------------------------------------------------------------
# the smi source: real subprocesses through a fake nvidia-smi on PATH, and recorded outputs
FAKE_SMI = """#!/bin/sh
case "$*" in
  "topo -m") cat "{topo}" ;;
  "nvlink -s") {nvlink} ;;
  *) exit 2 ;;
esac
"""


def fake_smi(tmp_path, monkeypatch, topo=None, nvlink="exit 3", body=None):
    d = tmp_path / "bin"
    d.mkdir()
    f = d / "nvidia-smi"
    f.write_text(body or FAKE_SMI.format(topo=topo, nvlink=nvlink))
    f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{d}{os.pathsep}{os.environ.get('PATH', '')}")


def test_smi_live_with_fake_binary(tmp_path, monkeypatch):
    cap = CAPTURES / "topo/17_h100-sxm-x8_12nic.txt"
    fake_smi(tmp_path, monkeypatch, topo=cap)
    host = Host()
    assert smi.SOURCE.available(host) is True
    doc = probe_host(host, ["smi", "numa"])
    validate(doc)
    s = doc["sources"][0]
    assert s["name"] == "smi" and s["status"] in ("ok", "partial") and "nvlink -s: exit status 3" in s["detail"]
    assert len(doc["gpus"]) == 8 and doc["matrix"]["GPU0"]["GPU1"] == "NV18"
    assert "mlx5_0" in doc["matrix"]["GPU0"]


def test_smi_failing_driver_is_an_error_with_its_message(tmp_path, monkeypatch):
    fake_smi(tmp_path, monkeypatch, body="#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate "
                                         "with the NVIDIA driver.\"\nexit 9\n")
    doc = probe_host(Host(), ["smi"])
    s = doc["sources"][0]
    assert s["status"] == "error" and "exit status 9" in s["detail"] and "NVIDIA-SMI has failed" in s["detail"]


def test_smi_hanging_binary_times_out(tmp_path, monkeypatch):
    fake_smi(tmp_path, monkeypatch, body="#!/bin/sh\nexec sleep 30\n")
    doc = probe_host(Host(runner=CommandRunner(timeout=0.5)), ["smi"])
    s = doc["sources"][0]
    assert s["status"] == "unavailable" and "did not answer within 0.5s" in s["detail"]


def test_smi_garbage_output_is_an_error(tmp_path):
    (tmp_path / "nvidia-smi_topo_m.txt").write_text("Segmentation fault\n")
    doc = probe_host(Host(root=tmp_path, runner=RecordedRunner(tmp_path), provenance="snapshot"), ["smi"])
    s = doc["sources"][0]
    assert s["status"] == "error" and "no header line starting with GPU0" in s["detail"]


def test_smi_runs_each_command_once():
    class Counting(CommandRunner):
        def __init__(self):
            super().__init__()
            self.calls = []

        def run(self, argv):
            self.calls.append(tuple(argv))
            return CommandResult(list(argv), None, error="nvidia-smi not found on PATH")
    r = Counting()
    doc = probe_host(Host(runner=r), ["smi"])
    assert r.calls == [("nvidia-smi", "topo", "-m")]
    assert doc["sources"][0]["detail"] == "nvidia-smi topo -m: nvidia-smi not found on PATH"


def test_sysfs_root_never_runs_live_nvidia_smi(tmp_path):
    assert "not the tree under" in smi.SOURCE.available(Host(root=tmp_path))
