"""gpucomm doctor: every rule fires on a planted fault, and no rule fires falsely on healthy
fixture hosts and real captures (their real issues are asserted precisely)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import CAPTURES, FIXTURES, HOSTS, ROOT, run_cli

from gpucomm.planners.health.doctor import RULES, SCHEMA, expected_pair_bw, nvlink_totals, run_doctor
from gpucomm.probes.topology import Topology
from gpucomm.probes.load import load_topology

FAULTS = FIXTURES / "faults"
SCHEMA_FILE = ROOT / "planners" / "schema" / "doctor.schema.json"


def _validate(report: dict) -> None:
    import jsonschema

    jsonschema.validate(report, json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))


def _keys(report: dict) -> set:
    return {(f["rule"], f["severity"], f["subject"]) for f in report["findings"]}


# --------------------------------------------------------------------------------------------
# planted faults: exactly the planted finding(s), nothing else
PLANTED = {
    "pcie-4gpu-healthy": set(),
    "gpu-driver": {("gpu-driver", "error", "node")},
    "ib-rate-low": {("ib-rate-low", "warning", "mlx5_1/1")},
    "p2p-acs": {("p2p-blocked", "error", "switch 0000:18:00.0")},
    "p2p-iommu": {("p2p-blocked", "warning", "host")},
    "p2p-nvml-status": {("p2p-blocked", "warning", "GPU2-GPU3")},
    "cpu-affinity-mismatch": {("cpu-affinity-mismatch", "warning", "GPU3")},
    "nic-numa-mismatch": {("nic-numa-mismatch", "warning", "GPU0/mlx5_0"),
                          ("nic-numa-mismatch", "warning", "GPU1/mlx5_0")},
    "measured-bw-low": {("measured-bw-low", "warning", "GPU2->GPU3")},
    "measured-link-low": {("measured-bw-low", "warning", "GPU0-GPU1")},
    "mig-enabled": {("mig-enabled", "info", "GPU1")},
    "matrix-asymmetric": {("matrix-asymmetric", "warning", "GPU0-GPU1")},
    "pcie-peer-narrow": {("pcie-downtrained", "warning", "GPU2")},
    "nic-pcie-gen": {("pcie-downtrained", "warning", "mlx5_0")},
    "nvlink-down-nvml": {("nvlink-inactive", "error", "GPU0")},
    # multi-node NVLink: two GB300 trays of one rack (fused NCCL dump + NVML fabric info + IMEX)
    "mnnvl-2tray-healthy": set(),
    "fabric-in-progress": {("fabric-state", "error", "GPU6")},
    "fabric-health-degraded": {("fabric-health", "warning", "GPU1")},
    # one GPU in another clique: the tray is split, and the domain then holds two cliques
    "fabric-clique-split": {("fabric-clique", "error", "GPU3"), ("mnnvl-settings", "info", "NCCL_MNNVL_CROSS_CLIQUE")},
    # host 1's links all down: its GPUs have none of the 18 the other host's GPUs have, too
    "nvlink-tray-down": {("nvlink-tray-down", "error", "host 1")} |
                        {("nvlink-inactive", "error", f"GPU{i}") for i in range(4, 8)},
    "imex-domain-down": {("imex-domain", "error", "imex")},
    "mnnvl-disabled": {("mnnvl-settings", "warning", "NCCL_MNNVL_ENABLE")},
    # the software path (planners/health/path_rules.py): faults and clean twins
    "path-clean": set(),
    "path-gdr-unavailable": {("gdr-unavailable", "warning", "host")},
    "path-socket-transport": {("socket-transport", "warning", "host")},
    "path-nccl-version": {("nccl-version", "warning", "NCCL_CROSS_NIC"),
                          ("nccl-version", "info", "/usr/lib/x86_64-linux-gnu/libnccl.so.2")},
    "path-vm-clean": set(),
    "path-vm-p2p": {("vm-p2p", "warning", "host")},
    "path-nvswitch-clean": set(),
    "path-fabricmanager-down": {("nvlink-services", "error", "fabricmanager")},
}


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_fault_documents(name):
    report = run_doctor(load_topology(str(FAULTS / f"{name}.json")))
    _validate(report)
    assert _keys(report) == PLANTED[name]
    assert report["degraded"] == any(s in ("error", "warning") for _, s, _ in PLANTED[name])


def test_fault_documents_are_up_to_date():
    """The JSON files are what fixtures/faults/generate.py writes (no hand edits drift)."""
    out = subprocess.run([sys.executable, str(FAULTS / "generate.py"), "--check"], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert set(PLANTED) == {p.stem for p in FAULTS.glob("*.json")}


def test_every_rule_is_proven_by_a_planted_fault():
    fired = set()
    for name in PLANTED:
        fired |= {r for r, _, _ in PLANTED[name]}
    for name, keys in HOST_EXPECTED.items():
        fired |= {r for r, _, _ in keys}
    assert fired == set(RULES)


# --------------------------------------------------------------------------------------------
# the recorded hosts; faulty ones list their planted faults
HOST_EXPECTED = {
    "hgx-h100": set(),
    "dgx-a100": set(),
    "dgx1-v100": set(),
    "gb200-tray": set(),  # GPU->NIC is SYS in nvidia-smi terms but goes over C2C: not reported
    "gb200-nvl72": set(),  # fabric completed and healthy, IMEX domain UP
    "gb300-nvl72": set(),
    "cpu-only": set(),
    # one mlx5 NIC on socket 0: GPUs 1-3 reach it through SYS (a layout fact, info only)
    "a100-pcie-4x-nvbridge": {("nic-numa-mismatch", "info", "GPU1"), ("nic-numa-mismatch", "info", "GPU2"),
                              ("nic-numa-mismatch", "info", "GPU3")},
    # GeForce boards: NVML says P2P NOT_SUPPORTED even under one switch -- true, not repairable
    "pcie-8x-consumer": {("p2p-blocked", "info", "12 GPU pairs")},
    "hgx-h100-degraded": {("pcie-downtrained", "warning", "GPU3"), ("ib-port-down", "error", "mlx5_5/1"),
                          ("nvlink-inactive", "error", "GPU6")},
    "dgx-a100-numa-mismatch": {("nic-numa-mismatch", "warning", "GPU0/mlx5_0"),
                               ("nic-numa-mismatch", "warning", "GPU1/mlx5_0")},
}
HOST_NAMES = sorted(p.name for p in HOSTS.iterdir() if (p / "meta.json").is_file()) if HOSTS.is_dir() else []


@pytest.mark.parametrize("name", HOST_NAMES)
def test_fixture_hosts(name):
    report = run_doctor(load_topology(str(HOSTS / name)))
    _validate(report)
    if name in HOST_EXPECTED:
        assert _keys(report) == HOST_EXPECTED[name]
    else:  # a host added later: a healthy one must not raise errors or warnings
        meta = json.loads((HOSTS / name / "meta.json").read_text(encoding="utf-8"))
        if not meta.get("faults"):
            assert not report["degraded"], report["findings"]


def test_degraded_host_findings_name_the_faults():
    if not (HOSTS / "hgx-h100-degraded").is_dir():
        pytest.skip("fixture host hgx-h100-degraded not generated")
    r = run_cli("doctor", "--from", HOSTS / "hgx-h100-degraded", "--format", "json")
    assert r.code == 5, r.stderr
    rep = r.json()
    by_rule = {f["rule"]: f for f in rep["findings"]}
    assert "x8" in by_rule["pcie-downtrained"]["message"] and "x16" in by_rule["pcie-downtrained"]["message"]
    assert "DOWN" in by_rule["ib-port-down"]["message"] and "Polling" in by_rule["ib-port-down"]["message"]
    assert "17 of 18" in by_rule["nvlink-inactive"]["message"]
    # every rule ran, or says why it could not (the software-path rules need a probe's software section)
    assert sorted(rep["checked"] + [n["rule"] for n in rep["not_checked"]]) == sorted(RULES)


# --------------------------------------------------------------------------------------------
# real captures: what they really show, and nothing else
def _capture_expected() -> dict:
    """fixtures/captures/doctor-expected.yaml: per capture, the findings it must give and why."""
    data = yaml.safe_load((CAPTURES / "doctor-expected.yaml").read_text(encoding="utf-8"))
    return {rel: {tuple(f) for f in entry["findings"]} for rel, entry in data.items()}


CAPTURE_EXPECTED = _capture_expected()
CAPTURE_FILES = sorted(str(p.relative_to(CAPTURES)) for p in
                       list((CAPTURES / "topo").glob("*.txt")) + list((CAPTURES / "ncclxml").glob("*.xml")))


@pytest.mark.parametrize("rel", CAPTURE_FILES)
def test_real_captures(rel):
    report = run_doctor(load_topology(str(CAPTURES / rel)))
    _validate(report)
    assert _keys(report) == CAPTURE_EXPECTED.get(rel, set())


def test_capture_47_message_names_the_pair():
    rep = run_doctor(load_topology(str(CAPTURES / "topo" / "47_h100-x8_nv17-nv18-mixed_node.txt")))
    msgs = {f["subject"]: f["message"] for f in rep["findings"]}
    assert "NV17 to GPU3" in msgs["GPU2"] and "18" in msgs["GPU2"]


# --------------------------------------------------------------------------------------------
# CLI
def test_cli_exit_codes_and_json():
    r = run_cli("doctor", "--from", FAULTS / "pcie-4gpu-healthy.json")
    assert r.code == 0 and "no problems found" in r.stdout
    r = run_cli("doctor", "--from", FAULTS / "mig-enabled.json", "--format", "json")
    assert r.code == 0  # info only
    assert r.json()["schema"] == SCHEMA and r.json()["findings"][0]["rule"] == "mig-enabled"
    r = run_cli("doctor", "--from", FAULTS / "p2p-acs.json")
    assert r.code == 5 and "ACS" in r.stdout and "fix:" in r.stdout


def test_cli_rules_filter():
    r = run_cli("doctor", "--from", FAULTS / "p2p-acs.json", "--rules", "mig-enabled,pcie-downtrained", "-f", "json")
    assert r.code == 0
    assert r.json()["checked"] == ["pcie-downtrained", "mig-enabled"] and r.json()["findings"] == []
    r = run_cli("doctor", "--from", FAULTS / "p2p-acs.json", "--rules", "no-such-rule")
    assert r.code == 1 and "no-such-rule" in r.stderr and "Traceback" not in r.stderr


def test_cli_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "gpucomm.topology/v1", "gpus": [', encoding="utf-8")
    r = run_cli("doctor", "--from", bad)
    assert r.code == 1 and len(r.stderr.strip().splitlines()) == 1 and "bad.json" in r.stderr


def test_live_doctor_runs_here():
    """No --from: probe this machine (no GPUs in CI) and check it."""
    r = run_cli("doctor", "--format", "json")
    assert r.code in (0, 5), r.stderr
    _validate(r.json())


# --------------------------------------------------------------------------------------------
# helpers
def test_nvlink_totals_sources():
    deg = load_topology(str(FAULTS / "nvlink-down-nvml.json"))
    t = nvlink_totals(Topology.of(deg))
    assert t["GPU0"][:2] == (11, "nvml") and t["GPU1"][:2] == (12, "nvml")
    cap = load_topology(str(CAPTURES / "topo" / "47_h100-x8_nv17-nv18-mixed_node.txt"))
    t = nvlink_totals(Topology.of(cap))
    assert t["GPU2"][0] == 17 and t["GPU0"][0] == 18


def test_expected_pair_bw():
    topo = Topology.of(load_topology(str(FAULTS / "pcie-4gpu-healthy.json")))
    g = topo.gpu
    assert expected_pair_bw(topo, g(0), g(1)) == pytest.approx(12 * 20.6)   # NV12 bridge, NCCL SM90 constant
    assert expected_pair_bw(topo, g(0), g(2)) is None                      # SYS: not judged


# --------------------------------------------------------------------------------------------
# robustness: a user's saved document can hold anything in any field
_JUNK = st.one_of(st.none(), st.booleans(), st.integers(-5, 10 ** 6), st.floats(allow_nan=True),
                  st.text(max_size=6), st.lists(st.integers(), max_size=3),
                  st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))


def _paths(obj, prefix=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:3]):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


_BASE = json.loads((FAULTS / "measured-bw-low.json").read_text(encoding="utf-8")) if FAULTS.is_dir() else {}
_BASE_PATHS = [p for p in _paths(_BASE) if p and p[0] != "schema"]


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.sampled_from(_BASE_PATHS), _JUNK), min_size=1, max_size=6))
def test_doctor_never_crashes_on_mutated_documents(edits):
    import copy

    doc = copy.deepcopy(_BASE)
    for path, value in edits:
        cur = doc
        try:
            for k in path[:-1]:
                cur = cur[k]
            cur[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue
    report = run_doctor(doc)
    assert report["schema"] == SCHEMA
    for f in report["findings"]:
        assert f["rule"] in RULES and f["message"] and f["fix"]


def test_rule_registry_matches_schema():
    enum = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))["properties"]["findings"]["items"]["properties"]["rule"]["enum"]
    assert enum == list(RULES)

