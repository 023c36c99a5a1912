"""Fleets: the framed wire format of ``fleet probe`` (round trip, damage, timeouts through a fake srun),
the DaemonSet of ``fleet manifest`` validated against Kubernetes' own OpenAPI schema (v1.34, strict,
fixtures/k8s-schema), the labels a node publishes (GFD names, locality), and the Kueue Topology rules."""
from __future__ import annotations

import json
import os
import stat
import sys

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from support import CAPTURES, FIXTURES, run_cli
from gpucomm.probes import fleet as pf

jsonschema = pytest.importorskip("jsonschema")
K8S = json.loads((FIXTURES / "k8s-schema" / "k8s-v1.34-daemonset-configmap-namespace.strict.json").read_text())
EDR = next((CAPTURES / "ib-fabric").glob("006_*"))


def k8s_validate(obj: dict) -> None:
    kind = obj["kind"].lower()
    schema = dict(K8S, **{"$ref": f"#/$defs/{K8S['kinds'][kind]['$ref'].split('/')[-1]}"})
    schema.pop("kinds")
    jsonschema.validate(obj, schema, cls=jsonschema.Draft202012Validator)


def test_manifest_validates_against_kubernetes_openapi():
    r = run_cli("fleet", "manifest", "--fabric", str(EDR))
    assert r.code == 0, r.stderr
    objs = list(yaml.safe_load_all(r.stdout))
    assert [o["kind"] for o in objs] == ["Namespace", "ConfigMap", "DaemonSet"]
    for o in objs:
        k8s_validate(o)
    ds = objs[2]["spec"]["template"]["spec"]
    terms = ds["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {t["matchExpressions"][0]["key"] for t in terms} == {"nvidia.com/gpu.present",
                                                               "feature.node.kubernetes.io/pci-10de.present"}
    c = ds["containers"][0]
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/host/sys"]["readOnly"] is True and "readOnly" not in mounts["/etc/kubernetes/node-feature-discovery/features.d"]
    assert {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility"}.items() <= \
        {e["name"]: e.get("value") for e in c["env"]}.items()
    assert "resources" in c and "nvidia.com/gpu" not in json.dumps(c["resources"])   # NVML without taking a GPU
    loc = json.loads(objs[1]["data"]["locality.json"])
    assert loc["gpu001"] == {"leaf": "S-ec0d9a0300ec8240", "spine": "S-ec0d9a0300ec81e0"} and len(loc) == 96
    # and the validator can fail: a field Kubernetes does not have, a string where a number goes
    bad = json.loads(json.dumps(objs[2]))
    bad["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(jsonschema.ValidationError):
        k8s_validate(bad)
    bad = json.loads(json.dumps(objs[2]))
    bad["spec"]["revisionHistoryLimit"] = "ten"
    with pytest.raises(jsonschema.ValidationError):
        k8s_validate(bad)


def test_manifest_without_fabric_and_json_list():
    r = run_cli("fleet", "manifest", "--no-gfd-names", "--install", "-", "--image", "registry.local/gpucomm:1",
                "--format", "json")
    assert r.code == 0
    items = r.json()["items"]
    assert [o["kind"] for o in items] == ["Namespace", "DaemonSet"]
    for o in items:
        k8s_validate(o)
    script = items[1]["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert "pip install" not in script and "--no-gfd-names" in script and "--locality" not in script


def test_node_labels_gfd_names_and_locality(tmp_path):
    loc = tmp_path / "loc.json"
    loc.write_text(json.dumps({"tray07": {"leaf": "leaf03", "nvlink-domain": "6f3c.32766"}}))
    r = run_cli("fleet", "labels", "--from", "example:gb200-tray", "--node", "tray07", "--locality", str(loc))
    assert r.code == 0, r.stderr
    lines = dict(l.split("=", 1) for l in r.stdout.splitlines() if not l.startswith("#"))
    # GPU Feature Discovery's names and values (captures/k8s: gpu.product=NVIDIA-A10, gpu.count=1, gpu.memory in MiB,
    # gpu.clique=<clusterUUID>.<cliqueId>)
    assert lines["nvidia.com/gpu.count"] == "4" and lines["nvidia.com/gpu.product"] == "NVIDIA-GB200"
    assert lines["nvidia.com/gpu.clique"] == "6f3c2a51-9d0e-4b7a-8c1f-2e5d7a9b0c4d.32766"
    assert lines["nvidia.com/gpu.compute.major"] == "10" and lines["nvidia.com/gpu.family"] == "blackwell"
    assert lines["feature.node.kubernetes.io/gpucomm-fabric.leaf"] == "leaf03"
    assert lines["feature.node.kubernetes.io/gpucomm-nvlink.domain"] == "6f3c.32766"
    from gpucomm.planners.launch.k8s import check_label

    assert not [p for k, v in lines.items() for p in [check_label(k, v)] if p]
    no = run_cli("fleet", "labels", "--from", "example:gb200-tray", "--no-gfd-names")
    assert "nvidia.com/" not in no.stdout


def test_kueue_levels_nest_and_hostname_is_last():
    from gpucomm.planners.launch.k8s import kueue_document

    loc = {f"n{i}": {"spine": "s1", "leaf": f"l{i // 4}", "nvlink-domain": f"d{i // 2}"} for i in range(8)}
    kd = kueue_document(loc)
    assert kd["levels"] == ["spine", "leaf", "nvlink-domain", "hostname"]
    loc["n3"]["nvlink-domain"] = "d2"       # a domain across two leaves: the leaf level cannot sit above it
    assert kueue_document(loc)["levels"] == ["spine", "nvlink-domain", "hostname"]


# --------------------------------------------------------------------------------------------
# The wire format
@settings(max_examples=50, deadline=None)
@given(st.text(max_size=5000), st.sampled_from(["gpu001", "a09-p1-dgx-03-c05", "10.140.71.103"]))
def test_frames_round_trip(text, node):
    col = pf.Collector()
    got = [col.feed(l) for l in pf.frame_document(node, text)]
    assert got[-1] == (node, text) and all(g is None for g in got[:-1])
    assert all(len(l) < 1024 for l in pf.frame_document(node, text))


def test_frames_damaged_and_interleaved():
    import random

    rnd = random.Random(7)
    big = "".join(rnd.choice("0123456789abcdef") for _ in range(6000))   # several pieces
    a, b = pf.frame_document("a", big), pf.frame_document("b", '{"y": 1}')
    assert len(a) > 3
    col = pf.Collector()
    out = [col.feed(l) for pair in zip(a, b + [""] * len(a)) for l in pair]
    assert ("a", big) in out and ("b", '{"y": 1}') in out
    col = pf.Collector()
    dropped = a[:1] + a[2:]          # a piece lost on the way
    for l in dropped:
        r = col.feed(l)
    assert r == ("a", None) and "damaged" in col.errors["a"]
    col = pf.Collector()
    r = col.feed(pf.frame_error("c", "NVML: driver not loaded"))
    assert r == ("c", None) and col.errors["c"] == "NVML: driver not loaded"
    assert col.feed("0: srun: error: something") is None and col.noise


def _fake_srun(tmp_path, body: str):
    p = tmp_path / "srun"
    p.write_text(f"#!{sys.executable}\n" + body)
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return str(p)


def test_run_fleet_gathers_reports_failures_and_timeouts(tmp_path):
    doc = run_cli("probe", "example:hgx-h100", "--format", "json").stdout
    (tmp_path / "doc.json").write_text(doc)
    srun = _fake_srun(tmp_path, f"""
import sys, time
sys.path[:0] = {sys.path!r}
from gpucomm.probes.fleet import frame_document, frame_error
text = open({str(tmp_path / 'doc.json')!r}).read()
for l in frame_document("gpu001", text): print("0: " + l, flush=True)
print(frame_error("gpu002", "nvidia-smi hung"), flush=True)
print("srun: error: gpu003: task 2: Exited with exit code 1", flush=True)
for l in frame_document("gpu004", text)[:2]: print(l, flush=True)
time.sleep(30)
""")
    out = tmp_path / "out"
    out.mkdir()
    res = pf.run_fleet([srun], ["gpu001", "gpu002", "gpu003", "gpu004"], str(out), timeout=4, force=True)
    assert res["gathered"] == ["gpu001"] and res["timed_out"]
    assert json.loads((out / "gpu001.json").read_text()) == json.loads(doc)
    assert res["failed"] == {"gpu002": "nvidia-smi hung", "gpu003": "timed out after 4s",
                             "gpu004": "timed out while sending its document"}
    assert any("Exited with exit code 1" in n for n in res["noise"])
    assert sorted(os.listdir(out)) == ["gpu001.json"]           # atomic: no partial files left


def test_fleet_probe_needs_a_target():
    r = run_cli("fleet", "probe", "--out-dir", "/tmp/never")
    if os.environ.get("SLURM_JOB_NODELIST"):
        pytest.skip("inside a Slurm allocation")
    assert r.code == 2 and "--partition" in r.stderr


def test_srun_argv_is_one_task_per_node():
    argv = pf.srun_argv(["gpucomm", "fleet", "node"], ["n01", "n02", "n03"], "gpu", 3, 11, ["--account=ops"])
    assert argv[:4] == ["srun", "--ntasks-per-node=1", "--kill-on-bad-exit=0", "--job-name=gpucomm-fleet"]
    assert "--nodelist=n[01-03]" in argv and "--nodes=3" in argv and "--partition=gpu" in argv and "--time=11" in argv
    assert argv[-4:] == ["--account=ops", "gpucomm", "fleet", "node"]
