"""gpucomm diff: what differs between nodes, and the odd node out of three or more."""
from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support import CAPTURES, FIXTURES, HOSTS, ROOT, run_cli

from gpucomm.planners.health.diff import SCHEMA, diff_documents, fingerprint
from gpucomm.probes.load import load_topology

FAULTS = FIXTURES / "faults"
SCHEMA_FILE = ROOT / "planners" / "schema" / "diff.schema.json"


def _validate(report: dict) -> None:
    import jsonschema

    jsonschema.validate(report, json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))


def _load(name: str) -> dict:
    return load_topology(str(FAULTS / f"{name}.json"))


def _attrs(report: dict) -> dict:
    return {d["attribute"]: d["values"] for d in report["differences"]}


def test_identical_inputs():
    a = _load("pcie-4gpu-healthy")
    rep = diff_documents([("a", a), ("b", copy.deepcopy(a))])
    _validate(rep)
    assert rep["identical"] and rep["differences"] == [] and rep["outlier"] is None and rep["compared"] > 50


def test_hostnames_and_ids_are_not_differences():
    a = _load("pcie-4gpu-healthy")
    b = copy.deepcopy(a)
    b["host"]["hostname"] = "other-node"
    b["host"]["collected_at"] = "2025-01-01T00:00:00Z"
    for g in b["gpus"]:
        g["uuid"] = g["uuid"][:-1] + "f"
    assert diff_documents([("a", a), ("b", b)])["identical"]


def test_two_nodes_one_fault_each():
    rep = diff_documents([("healthy", _load("pcie-4gpu-healthy")), ("slow", _load("ib-rate-low"))])
    assert _attrs(rep) == {"mlx5_1.port1.rate_gbps": [400.0, 200.0]}
    assert rep["differences"][0]["differs"] == ["healthy", "slow"] and rep["counts"] == {}


def test_three_nodes_name_the_outlier():
    h = _load("pcie-4gpu-healthy")
    rep = diff_documents([("n1", h), ("n2", copy.deepcopy(h)), ("n3", _load("nvlink-down-nvml"))])
    _validate(rep)
    assert rep["outlier"] == "n3" and rep["counts"] == {"n1": 0, "n2": 0, "n3": 1}
    (d,) = rep["differences"]
    assert d["attribute"] == "GPU0.nvlinks_active" and d["values"] == [12, 12, 11] and d["majority"] == 12


def test_three_different_nodes_have_no_outlier():
    rep = diff_documents([("a", _load("pcie-4gpu-healthy")), ("b", _load("ib-rate-low")), ("c", _load("mig-enabled"))])
    assert rep["outlier"] is None  # b and c each differ from the majority in one attribute


def test_missing_gpu_is_a_difference_unknown_value_is_not():
    a = _load("pcie-4gpu-healthy")
    b = copy.deepcopy(a)
    b["gpus"] = [g for g in b["gpus"] if g["index"] != 3]
    for row in b["matrix"].values():
        row.pop("GPU3", None)
    b["matrix"].pop("GPU3")
    c = copy.deepcopy(a)
    c["host"]["driver_version"] = None  # e.g. a topo -m capture: unknown, not different
    rep = diff_documents([("a", a), ("b", b), ("c", c)])
    attrs = _attrs(rep)
    assert attrs["gpus.count"] == [4, 3, 4] and attrs["GPU3.present"] == [True, False, True]
    assert "host.driver_version" not in attrs
    assert rep["outlier"] == "b"


def test_degraded_host_against_healthy_one():
    if not (HOSTS / "hgx-h100-degraded").is_dir():
        pytest.skip("fixture hosts not generated")
    r = run_cli("diff", HOSTS / "hgx-h100", HOSTS / "hgx-h100-degraded", "--format", "json")
    assert r.code == 5, r.stderr
    rep = r.json()
    _validate(rep)
    attrs = _attrs(rep)
    assert attrs["GPU3.pcie"] == ["x16 (max Gen5 x16)", "x8 (max Gen5 x16)"]
    assert attrs["mlx5_5.port1.state"] == ["ACTIVE", "DOWN"]
    assert attrs["GPU6.nvlinks_active"] == [18, 17]
    assert attrs["matrix.GPU0.GPU6"] == ["NV18", "NV17"]
    assert [i["name"] for i in rep["inputs"]] == ["hgx-h100", "hgx-h100-degraded"]


def test_cluster_of_captures_names_the_odd_node():
    """Three H100 8-GPU nodes: capture 17 (12 NICs, 8 NUMA nodes) against two 9-NIC, 2-socket ones."""
    t = CAPTURES / "topo"
    r = run_cli("diff", t / "17_h100-sxm-x8_12nic.txt", t / "18_h100-sxm-x8_9nic_tabs.txt",
                t / "86_h100-x8_9nic_azure-nd-h100-v5.txt", "--format", "json")
    assert r.code == 5
    rep = r.json()
    assert rep["outlier"] == "17_h100-sxm-x8_12nic"
    attrs = _attrs(rep)
    assert attrs["nics.count"] == [12, 9, 9] and attrs["numa.count"] == [8, 2, 2]
    assert rep["counts"]["17_h100-sxm-x8_12nic"] > max(rep["counts"]["18_h100-sxm-x8_9nic_tabs"],
                                                          rep["counts"]["86_h100-x8_9nic_azure-nd-h100-v5"])


def test_cli_table_and_exit_codes():
    a, b = FAULTS / "pcie-4gpu-healthy.json", FAULTS / "ib-rate-low.json"
    r = run_cli("diff", a, a)
    assert r.code == 0 and "identical" in r.stdout
    r = run_cli("diff", a, b, FAULTS / "pcie-4gpu-healthy.json")
    assert r.code == 5  # same file twice gets distinct labels
    assert "mlx5_1.port1.rate_gbps" in r.stdout and "outlier" in r.stdout
    r = run_cli("diff", a, b, "--all")
    assert r.code == 5 and "GPU0.numa_node" in r.stdout


def test_cli_bad_inputs():
    r = run_cli("diff", FAULTS / "pcie-4gpu-healthy.json")
    assert r.code == 2 and "at least two" in r.stderr   # a usage error
    r = run_cli("diff", FAULTS / "pcie-4gpu-healthy.json", FAULTS / "no-such.json")
    assert r.code == 1 and "no-such.json" in r.stderr and "Traceback" not in r.stderr


# --------------------------------------------------------------------------------------------
_BASE = json.loads((FAULTS / "pcie-4gpu-healthy.json").read_text(encoding="utf-8"))
_TOP = [k for k in _BASE if k != "schema"]
_JUNK = st.one_of(st.none(), st.booleans(), st.integers(-3, 99), st.text(max_size=5),
                  st.lists(st.one_of(st.integers(), st.text(max_size=3), st.dictionaries(st.text(max_size=3),
                                                                                         st.integers())), max_size=3))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["gpus", "nics", "links", "matrix", "host", "numa_nodes", "switches"]),
                          st.integers(0, 7), st.sampled_from(["index", "name", "pcie", "ports", "numa_node", "a",
                                                               "width", "cpus", "GPU1", "driver_version"]),
                          _JUNK), max_size=6))
def test_fingerprint_never_crashes_and_self_diff_is_empty(edits):
    doc = copy.deepcopy(_BASE)
    for top, i, key, value in edits:
        cont = doc.get(top)
        if isinstance(cont, list) and cont:
            item = cont[i % len(cont)]
            if isinstance(item, dict):
                item[key] = value
        elif isinstance(cont, dict):
            cont[key] = value
    fp = fingerprint(doc)
    assert all(isinstance(k, str) for k in fp)
    rep = diff_documents([("x", doc), ("y", copy.deepcopy(doc))])
    assert rep["schema"] == SCHEMA and rep["identical"]
