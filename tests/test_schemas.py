"""Every JSON document a command prints validates against the JSON Schema the package ships for its
``schema`` id (``gpucomm.X/v1`` -> ``X.schema.json`` under ``gpucomm/probes/schema`` or
``gpucomm/planners/schema``), on every bundled example; and the strict schemas refuse what a
scheduler could not parse."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from support import CAPTURES, run_cli

jsonschema = pytest.importorskip("jsonschema")

EXAMPLES = ["hgx-h100", "dgx-a100", "dgx1-v100", "pcie-8x-consumer", "a100-pcie-4x-nvbridge", "gb200-tray",
            "cpu-only", "hgx-h100-degraded", "dgx-a100-numa-mismatch"]


def schema_dirs():
    from gpucomm import planners, probes

    return [Path(probes.__file__).parent / "schema", Path(planners.__file__).parent / "schema"]


def schema_for(doc_id: str) -> dict:
    assert doc_id.startswith("gpucomm.") and doc_id.endswith("/v1"), doc_id
    name = doc_id[len("gpucomm."):-len("/v1")]
    for d in schema_dirs():
        p = d / f"{name}.schema.json"
        if p.exists():
            return json.loads(p.read_text(encoding="utf-8"))
    raise AssertionError(f"no schema file for {doc_id}")


def validate(doc: dict) -> None:
    schema = schema_for(doc["schema"])
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)


COMMANDS = [
    ["show", "{t}"], ["paths", "{t}"], ["rings", "{t}"], ["plan", "{t}"], ["select", "{t}", "-k", "2"],
    ["doctor", "{t}"], ["probe", "{t}", "--format", "k8s-labels"],
]
# the slower ones (NCCL's search on 2 nodes, the cost model) on the examples that differ most
HEAVY = [["rings", "{t}", "--nodes", "2"], ["trees", "{t}", "--nodes", "2"],
         ["predict", "{t}", "--size", "1M:1G:x32"], ["plan", "{t}", "--nodes", "2", "--model", "llama-8b"]]
HEAVY_ON = ("hgx-h100", "dgx1-v100", "gb200-tray")


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_command_output_validates(name):
    _validate_outputs(name, COMMANDS)


@pytest.mark.slow   # NCCL's search on 2 nodes in Python: tens of seconds per example
@pytest.mark.parametrize("name", HEAVY_ON)
def test_heavy_command_outputs_validate(name):
    _validate_outputs(name, HEAVY)


def test_plan_with_a_model_validates():
    """--model writes Megatron arguments with float values (--norm-epsilon 1e-05): the schema takes them."""
    _validate_outputs("hgx-h100", [["plan", "{t}", "--model", "llama-8b"]])


def _validate_outputs(name: str, commands: list) -> None:
    seen = set()
    for cmd in commands:
        args = [a.replace("{t}", f"example:{name}") for a in cmd]
        if "--format" not in args:
            args += ["--format", "json"]
        r = run_cli(*args)
        if r.code in (3, 4) or (r.code == 1 and "no NIC" in r.stderr):
            continue   # nothing to do / infeasible here (no GPUs, no NICs for 2 nodes): no document
        assert r.code in (0, 5), (args, r.stderr)
        doc = r.json()
        validate(doc)
        seen.add(doc["schema"])
    if commands is COMMANDS:
        assert "gpucomm.topology/v1" in seen and "gpucomm.k8s-labels/v1" in seen


def test_other_documents_validate(tmp_path):
    docs = []
    for args in (["examples"], ["diff", "example:hgx-h100", "example:hgx-h100-degraded"],
                 ["synth", "example:hgx-h100", "-N", "8"],
                 ["synth", "example:hgx-h100", "-N", "8", "--out-dir", str(tmp_path / "c")],
                 ["predict", "example:hgx-h100", "--compare",
                  str(CAPTURES / "nccltests" / "09_h100-x8_1node_allreduce_cluster01.txt")],
                 ["rings", str(CAPTURES / "ncclxml" / "panlichen-rtx3090-8gpu-topo.xml"), "--compare",
                  str(CAPTURES / "nccllogs" / "panlichen-rtx3090-4node-log.log")],
                 ["plan", "example:hgx-h100", "--tp", "2", "--ep", "4", "--emit", "json"],
                 ["fabric", str(CAPTURES / "ib-fabric" / "topograph_example.out")],
                 ["fabric", str(CAPTURES / "ib-fabric" / "topograph_example.out"), "--emit", "kueue"],
                 ["select", "example:hgx-h100", "--nodes", "40", "--cluster",
                  str(CAPTURES / "ib-fabric" / "topograph_example.out")]):
        r = run_cli(*args, "--format", "json")
        assert r.code in (0, 5), (args, r.stderr)
        docs.append(r.json())
    for d in docs:
        validate(d)
    assert {d["schema"] for d in docs} >= {"gpucomm.examples/v1", "gpucomm.diff/v1", "gpucomm.cluster/v1",
                                          "gpucomm.synth/v1", "gpucomm.predict-compare/v1", "gpucomm.rings/v1",
                                          "gpucomm.plan/v1", "gpucomm.fabric/v1", "gpucomm.kueue/v1",
                                          "gpucomm.select-nodes/v1"}


def test_every_shipped_schema_is_a_valid_schema_and_used():
    ids = set()
    for d in schema_dirs():
        for p in sorted(d.glob("*.schema.json")):
            s = json.loads(p.read_text(encoding="utf-8"))
            jsonschema.Draft202012Validator.check_schema(s)
            ids.add(p.name[:-len(".schema.json")])
    assert {"topology", "paths", "rings", "trees", "predict", "predict-compare", "select", "plan", "doctor",
            "diff", "bench", "examples", "cluster", "synth", "k8s-labels", "fabric", "select-nodes", "fleet",
            "kueue"} <= ids


def test_strict_schemas_refuse_what_a_scheduler_could_not_parse():
    sel = run_cli("select", "example:hgx-h100", "-k", "2", "--format", "json").json()
    validate(sel)
    for mutate in (lambda d: d.pop("devices"), lambda d: d["devices"][0].update(pci_bus_id="18:00.0"),
                   lambda d: d.update(extra=1), lambda d: d["gpus"].append(d["gpus"][0]),
                   lambda d: d.update(policy="random")):
        bad = copy.deepcopy(sel)
        mutate(bad)
        with pytest.raises(jsonschema.ValidationError):
            validate(bad)
    lab = run_cli("probe", "example:hgx-h100", "--format", "k8s-labels").json()
    bad = copy.deepcopy(lab)
    bad["labels"]["feature.node.kubernetes.io/gpucomm-gpu.product"] = "NVIDIA H100"
    with pytest.raises(jsonschema.ValidationError):
        validate(bad)
    plan = run_cli("plan", "example:hgx-h100", "--tp", "2", "--ep", "4", "--format", "json").json()
    for mutate in (lambda d: d["groups"].pop("edp"), lambda d: d["parallelism"].pop("etp"),
                   lambda d: d["ranks"][0].pop("expert_coords")):
        bad = copy.deepcopy(plan)
        mutate(bad)
        with pytest.raises(jsonschema.ValidationError):
            validate(bad)
