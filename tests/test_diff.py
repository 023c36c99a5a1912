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


# --------------------------------------------------------------------------------------------
# Fleets: classes of identical nodes, outliers, and the streamed form equal to the plain algorithm
def _reference_diff(named: list) -> dict:
    """The pairwise-over-every-input algorithm diff_stream replaced (kept here as the oracle)."""
    from collections import Counter

    from gpucomm.planners.health.diff import _attr_key, _presence, _unique

    names = _unique([n for n, _ in named])
    fps = [fingerprint(d) for _, d in named]
    attrs = sorted(set().union(*[fp.keys() for fp in fps]), key=_attr_key)
    diffs, counts = [], {n: 0 for n in names}
    for a in attrs:
        vals = [fp.get(a, False if a.endswith(".present") else None) for fp in fps]
        known = vals if _presence(a) else [v for v in vals if v is not None]
        if len(set(map(repr, known))) <= 1:
            continue
        majority = None
        if len(named) >= 3:
            (top, n_top), *rest = Counter(map(repr, known)).most_common()
            if not rest or rest[0][1] < n_top:
                majority = next(v for v in known if repr(v) == top)
        differs = [names[i] for i, v in enumerate(vals)
                   if (v is not None or _presence(a)) and majority is not None and repr(v) != repr(majority)]
        if len(named) == 2:
            differs = list(names)
        for n in differs:
            counts[n] += 1
        diffs.append({"attribute": a, "values": vals, "majority": majority, "differs": differs})
    outlier = None
    if len(named) >= 3 and diffs:
        top = max(counts.values())
        leaders = [n for n, c in counts.items() if c == top]
        if top > 0 and len(leaders) == 1:
            outlier = leaders[0]
    inputs = [{"name": n, "hostname": (d.get("host") or {}).get("hostname"),
               "provenance": (d.get("host") or {}).get("provenance"), "gpus": len(d.get("gpus", [])),
               "nics": len(d.get("nics", []))} for n, (_, d) in zip(names, named)]
    return {"schema": SCHEMA, "inputs": inputs, "identical": not diffs, "differences": diffs,
            "compared": len(attrs), "counts": counts if len(named) >= 3 else {}, "outlier": outlier}


_FLEET_FAULTS = ["pcie-4gpu-healthy", "ib-rate-low", "nvlink-down-nvml", "mig-enabled", "pcie-peer-narrow"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(_FLEET_FAULTS), min_size=2, max_size=12), st.lists(st.text(max_size=3), max_size=12))
def test_streamed_diff_equals_the_pairwise_algorithm(kinds, labels):
    named = []
    for i, k in enumerate(kinds):
        d = _load(k)
        d["host"]["hostname"] = f"node{i}"
        named.append(((labels[i] if i < len(labels) else "") or k, d))
    rep = diff_documents(named)
    _validate(rep)
    extra = {k: rep.pop(k) for k in ("classes", "outliers") if k in rep}
    assert rep == _reference_diff(named)
    if len(named) >= 3:
        classes = extra["classes"]
        assert sum(c["size"] for c in classes) == len(named)
        assert sorted(m for c in classes for m in c["members"]) == sorted(i["name"] for i in rep["inputs"])
        assert [c["size"] for c in classes] == sorted((c["size"] for c in classes), reverse=True)
        # members of one class are identical: every difference shows one value per class
        value = {i["name"]: idx for idx, i in enumerate(rep["inputs"])}
        for c in classes:
            for d in rep["differences"]:
                assert len({repr(d["values"][value[m]]) for m in c["members"]}) == 1
                assert (d["attribute"] in c["departs"]) == (c["members"][0] in d["differs"])
    else:
        assert not extra


def _fleet(tmp_path, count: int, odd: dict) -> list:
    """``count`` saved topologies of one machine (own hostnames and GPU UUIDs), ``odd`` = {i: fault}."""
    from gpucomm.probes.model import dumps_json

    paths = []
    for i in range(count):
        d = _load(odd.get(i, "pcie-4gpu-healthy"))
        d["host"]["hostname"] = f"node{i:03d}"
        for g in d["gpus"]:
            g["uuid"] = f"GPU-{i:08x}-{g['index']}"
        p = tmp_path / f"node{i:03d}.json"
        p.write_text(dumps_json(d), encoding="utf-8")
        paths.append(p)
    return paths


def test_fleet_classes_and_outliers(tmp_path):
    from gpucomm.planners.health.diff import diff_sources, diff_stream

    paths = _fleet(tmp_path, 20, {3: "ib-rate-low", 11: "nvlink-down-nvml", 17: "ib-rate-low"})
    named = [(p.stem, str(p)) for p in paths]
    rep = diff_sources(named)
    _validate(rep)
    assert rep["outliers"] == ["node003", "node011", "node017"]
    assert [(c["size"], c["members"][:1]) for c in rep["classes"]] == [(17, ["node000"]), (2, ["node003"]),
                                                                      (1, ["node011"])]
    assert rep["classes"][1]["departs"] == ["mlx5_1.port1.rate_gbps"]
    assert rep["classes"][2]["departs"] == ["GPU0.nvlinks_active"]
    assert rep["counts"]["node011"] == 1 and rep["outlier"] is None    # two outlier classes tie at 1
    # the content-key shortcut gives the same report as fingerprinting every node
    assert rep == diff_stream((n, load_topology(s)) for n, s in named)


def test_content_key_ignores_only_the_volatile_values():
    from gpucomm.planners.health.stream import content_key

    a = (FAULTS / "pcie-4gpu-healthy.json").read_text(encoding="utf-8")
    d = json.loads(a)
    assert isinstance(d["host"]["hostname"], str) and isinstance(d["gpus"][0]["uuid"], str)
    d["host"]["hostname"] = "other"
    d["gpus"][0]["uuid"] = "GPU-ffff"
    b = json.dumps(d, sort_keys=True, indent=2) + "\n"
    assert content_key(json.dumps(json.loads(a), sort_keys=True, indent=2) + "\n") == content_key(b)
    d["gpus"][0]["numa_node"] = 7
    assert content_key(json.dumps(d, sort_keys=True, indent=2) + "\n") != content_key(b)
    assert content_key('{"hostname": "a\\"b", "x": 1}') == content_key('{"hostname": "c\\u00e9", "x": 1}')
    assert content_key('{"hostname": "a", "x": 1}') != content_key('{"hostname": null, "x": 1}')  # types stay
    assert content_key('{"hostname": "a", "x": 1}') != content_key('{"hostname": "a", "x": 2}')
    assert content_key('{"hostname": "\\q", "x": 1}') != content_key('{"hostname": "a", "x": 1}')  # not JSON
    assert content_key("GPU0 X NV18\n") is None      # not JSON: no shortcut


def test_fleet_shortcut_is_exact(tmp_path):
    """Nodes read through the shortcut give what reading each in full gives: host names, errors in
    a text that only looks like a copy, and no shortcut when a volatile key sits elsewhere."""
    from gpucomm.planners.health.diff import diff_sources, diff_stream
    from gpucomm.planners.health.stream import stream_sources
    from gpucomm.probes.errors import InputError

    paths = _fleet(tmp_path, 6, {4: "ib-rate-low"})
    items = list(stream_sources([(p.stem, str(p)) for p in paths]))
    assert [doc is None for _, doc, _, _ in items] == [False, True, True, True, False, True]
    assert [info["hostname"] for *_, info in items] == [f"node{i:03d}" for i in range(6)]
    full = diff_stream((p.stem, load_topology(str(p))) for p in paths)
    assert diff_sources([(p.stem, str(p)) for p in paths]) == full
    # an invalid escape in the host name: not a JSON string token, so the node is parsed (and refused)
    bad = tmp_path / "bad.json"
    bad.write_text(paths[1].read_text(encoding="utf-8").replace('"node001"', '"node\\q"'), encoding="utf-8")
    with pytest.raises(InputError):
        diff_sources([(p.stem, str(p)) for p in paths[:2]] + [("bad", str(bad))])
    # a matrix column named "uuid" (a device with that name): its cells matter, so no shortcut
    d = _load("pcie-4gpu-healthy")
    odd = []
    for i, cell in enumerate(["PIX", "PIX", "SYS"]):
        d["matrix"]["GPU0"]["uuid"] = cell
        d["matrix"]["uuid"] = {"GPU0": cell}
        d["host"]["hostname"] = f"odd{i}"
        odd.append(tmp_path / f"odd{i}.json")
        odd[-1].write_text(json.dumps(d, sort_keys=True, indent=2), encoding="utf-8")
    items = list(stream_sources([(p.stem, str(p)) for p in odd]))
    assert all(doc is not None and key is None for _, doc, key, _ in items)
    rep = diff_sources([(p.stem, str(p)) for p in odd])
    assert rep["outliers"] == ["odd2"] and "matrix.GPU0.uuid" in _attrs(rep)


def test_cli_fleet_table_groups_classes(tmp_path):
    paths = _fleet(tmp_path, 12, {5: "ib-rate-low"})
    r = run_cli("diff", *paths)
    assert r.code == 5
    assert "12 inputs in 2 class(es)" in r.stdout and "outliers: node005" in r.stdout
    assert "class 1 (11)" in r.stdout and "mlx5_1.port1.rate_gbps" in r.stdout
    assert "node011" not in r.stdout.split("attributes by class")[1]   # no column per input
    same = run_cli("diff", *paths[:5], *paths[6:])
    assert same.code == 0 and "identical" in same.stdout
    r = run_cli("diff", *paths, "--all")
    assert r.code == 5 and "GPU0.numa_node" in r.stdout


def test_cli_fleet_doctor(tmp_path):
    import jsonschema

    schema = json.loads((ROOT / "planners" / "schema" / "doctor-fleet.schema.json").read_text(encoding="utf-8"))
    paths = _fleet(tmp_path, 9, {2: "pcie-peer-narrow", 7: "mig-enabled"})
    r = run_cli("doctor", *paths, "--format", "json")
    assert r.code == 5, r.stderr
    rep = r.json()
    jsonschema.validate(rep, schema)
    assert rep["nodes"] == 9 and rep["degraded_nodes"] == 1 and rep["outliers"] == ["node002", "node007"]
    assert [c["size"] for c in rep["classes"]] == [7, 1, 1]
    assert {f["rule"] for f in rep["classes"][1]["findings"]} == {"pcie-downtrained"}
    assert [i["class"] for i in rep["inputs"]][:3] == [1, 1, 2]
    from gpucomm.planners.health.doctor import doctor_fleet   # without the content-key shortcut

    assert doctor_fleet((p.stem, load_topology(str(p))) for p in paths) == rep
    r = run_cli("doctor", *paths)
    assert r.code == 5 and "outliers: node002, node007" in r.stdout and "pcie-downtrained" in r.stdout
    healthy = [p for i, p in enumerate(paths) if i not in (2, 7)]
    r = run_cli("doctor", "--from", healthy[0], *healthy[1:], "--format", "json")
    assert r.code == 0 and r.json()["classes"][0]["size"] == 7 and r.json()["outliers"] == []
    one = run_cli("doctor", healthy[0], "--format", "json")    # one node: the single-node report
    assert one.code == 0 and one.json()["schema"] == "gpucomm.doctor/v1"
