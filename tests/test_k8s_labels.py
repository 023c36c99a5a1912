"""Kubernetes node labels as a fabric input (probes/formats/k8s_labels.py, probes/fabric.fabric_from_k8s):
the real captures in fixtures/captures/k8s (kubectl describe node, a grep of it, GFD's features.d file,
curated label lists, DRA ResourceSlices refused), NodeLists built from those real label sets (GB300 trays
of OKE in two cliques under two local blocks, GKE nodes in two subblocks), every command that takes a
fabric (fabric --emit, cluster --fabric, select --nodes --cluster, plan --cluster), and property tests of
the reader."""
from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import CAPTURES, run_cli
from gpucomm.probes.errors import InputError
from gpucomm.probes.fabric import detect_fabric, fabric_from_text, fabric_tree
from gpucomm.probes.formats import k8s_labels
from gpucomm.probes.formats.k8s_labels import CLIQUE_LABEL, HOSTNAME_LABEL, read_node_labels

K8S = CAPTURES / "k8s"
EKS_DESCRIBE = next(K8S.glob("001_*"))
OKE_GREP = next(K8S.glob("002_*"))
OKE_GB300 = next(K8S.glob("003_*"))
GKE = next(K8S.glob("004_*"))
SLICE_GPU = next(K8S.glob("005_*"))
SLICE_NET = next(K8S.glob("006_*"))
EKSA_DESCRIBE = next(K8S.glob("007_*"))
GFD_FILE = next(K8S.glob("008_*"))
OCI = "oci.oraclecloud.com/rdma."
GCE = "cloud.google.com/gce-topology-"


def _labels(path) -> dict:
    return read_node_labels(path.read_text(), str(path))["nodes"][0]["labels"]


def _node_list(nodes: dict) -> dict:
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
            "items": [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": lab}}
                      for n, lab in nodes.items()]}


def oke_gb300(n: int = 8) -> dict:
    """``n`` GB300 trays with capture 003's labels: the first half in the real clique and local block,
    the second half in a second clique under a second local block (same network block and island)."""
    real = _labels(OKE_GB300)
    out = {}
    for i in range(1, n + 1):
        lab = dict(real)
        if i > n // 2:
            lab[OCI + "local_block_id"] = "3bf4jpavrbb"
            lab[CLIQUE_LABEL] = real[CLIQUE_LABEL].rsplit(".", 1)[0] + ".2479"
        name = f"10.0.64.{10 + i}"
        out[name] = dict(lab, **{HOSTNAME_LABEL: name})
    return out


def gke_nodes() -> dict:
    """Four GKE nodes with capture 004's labels, each on its own host, two subblocks of one block."""
    real = _labels(GKE)
    out = {}
    for i in range(1, 5):
        name = f"gke-a3-mega-pool-{i:02d}"
        out[name] = dict(real, **{HOSTNAME_LABEL: name, GCE + "host": f"{real[GCE + 'host'][:-2]}{i:02d}"})
        if i > 2:
            out[name][GCE + "subblock"] = real[GCE + "subblock"][:-2] + "ff"
    return out


# --------------------------------------------------------------------------------------------
# The real captures, one by one
def test_eks_describe_node_reads_the_aws_network_layers():
    rec = read_node_labels(EKS_DESCRIBE.read_text(), str(EKS_DESCRIBE))
    assert rec["format"] == "kubectl-describe" and rec["warnings"] == []
    (node,) = rec["nodes"]
    assert node["name"] == "ip-10-0-5-152.ap-northeast-2.compute.internal" and len(node["labels"]) == 87
    assert "alpha.kubernetes.io/provided-node-ip" not in node["labels"]        # an annotation, not a label
    r = run_cli("fabric", str(EKS_DESCRIBE), "--format", "json")
    assert r.code == 0, r.stderr
    doc = r.json()
    from test_schemas import validate

    validate(doc)
    assert [(t["name"], t["level"], t["switches"] or t["nodes"]) for t in doc["tree"]] == [
        ("nn-dcbcca51aebf4c95b", 1, [node["name"]]), ("nn-6ff5053c3a4d86db7", 2, ["nn-dcbcca51aebf4c95b"]),
        ("nn-c79422f4e61deb9ca", 3, ["nn-6ff5053c3a4d86db7"])]
    assert doc["source"]["labels"] == {"core": "topology.k8s.aws/network-node-layer-1", "spine":
                                       "topology.k8s.aws/network-node-layer-2", "leaf": "topology.k8s.aws/network-node-layer-3"}
    assert doc["hosts"][0]["nvlink_domain"] is None and doc["blocks"] == []


def test_gfd_labels_without_topology_say_what_they_are():
    eksa = read_node_labels(EKSA_DESCRIBE.read_text(), str(EKSA_DESCRIBE))
    assert [n["name"] for n in eksa["nodes"]] == ["eksworker3"]
    assert eksa["nodes"][0]["labels"]["nvidia.com/gpu.count"] == "2" and len(eksa["nodes"][0]["labels"]) == 27
    assert any("elided" in w and "line 5" in w for w in eksa["warnings"])      # the author's "…."
    grep = read_node_labels(OKE_GREP.read_text(), str(OKE_GREP))
    lab = grep["nodes"][0]["labels"]
    assert grep["format"] == "label-lines" and lab["nvidia.com/gpu.product"] == "NVIDIA-A10" and len(lab) == 22
    assert "nvidia.com/gpu-driver-upgrade-enabled" not in lab                 # "key: value" is an annotation there
    assert any("name is not in this file" in w for w in grep["warnings"])
    gfd = read_node_labels(GFD_FILE.read_text(), str(GFD_FILE))
    assert gfd["nodes"][0]["labels"]["nvidia.com/gpu.count"] == "16" and len(gfd["nodes"][0]["labels"]) == 13
    assert any("3 line(s) that are not labels" in w for w in gfd["warnings"])  # the shell prompts and pwd
    for path, name in ((OKE_GREP, "unnamed-node"), (EKSA_DESCRIBE, "eksworker3"), (GFD_FILE, "unnamed-node")):
        r = run_cli("fabric", str(path))
        assert r.code == 3 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert f"({name})" in r.stderr and "name no switch and no NVLink clique" in r.stderr


def test_oke_gb300_labels_give_the_rdma_tree_and_the_clique():
    r = run_cli("fabric", str(OKE_GB300), "--format", "json")
    assert r.code == 0, r.stderr
    doc = r.json()
    assert [(t["name"], t["level"]) for t in doc["tree"]] == [("3bf4jpavrba", 1), ("e4c5ds4yava", 2), ("5xxb22p6ucq", 3)]
    assert doc["hosts"] == [{"name": "unnamed-node", "hcas": [], "leaves": ["3bf4jpavrba"], "block": "nvl01",
                             "nvlink_domain": "a2221497-dbce-4964-8826-684c3694fd45.2478"}]
    assert doc["blocks"][0]["nvlink_domain"] == "a2221497-dbce-4964-8826-684c3694fd45.2478"
    assert "name is not in this file" in r.stderr


def test_gke_excerpt_gives_block_subblock_host():
    doc = fabric_from_text(GKE.read_text(), str(GKE))
    # one node on its machine: gce-topology-host is no switch, the subblock is the leaf
    assert [s["description"].split("=")[0] for s in doc["switches"]] == [GCE + "subblock", GCE + "block"]
    assert [lv["role"] for lv in doc["levels"]] == ["leaf", "spine"]
    nodes = {f"vm{i}": dict(_labels(GKE), **{HOSTNAME_LABEL: f"vm{i}"}) for i in (1, 2)}   # two VMs on one machine
    doc = fabric_from_text(json.dumps(_node_list(nodes)), "vms.json")
    assert [s["description"].split("=")[0] for s in doc["switches"]] == [GCE + "host", GCE + "subblock", GCE + "block"]


@pytest.mark.parametrize("path,driver", [(SLICE_GPU, "gpu.nvidia.com"), (SLICE_NET, "dra.net")], ids=["nvidia-dra-driver", "dranet"])
def test_dra_resource_slices_are_refused_saying_what_they_are(path, driver):
    assert detect_fabric(path.read_text()) == "k8s"
    for args in (("fabric", str(path)), ("plan", "example:gb300-nvl72", "--cluster", str(path), "--tp", "4"),
                 ("probe", str(path))):
        r = run_cli(*args)
        assert r.code == 1 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, (args, r.stderr)
    r = run_cli("fabric", str(path))
    assert f"DRA ResourceSlice (resource.k8s.io/v1, driver {driver}, node aks-gpu-45139532-vmss000081)" in r.stderr
    assert "not node labels" in r.stderr


# --------------------------------------------------------------------------------------------
# NodeLists built from the real label sets, through every command that takes a fabric
@pytest.fixture
def oke(tmp_path):
    p = tmp_path / "oke-nodes.json"
    p.write_text(json.dumps(_node_list(oke_gb300()), indent=2))
    return p


def test_nodelist_json_and_yaml_read_alike(oke, tmp_path):
    y = tmp_path / "oke-nodes.yaml"
    y.write_text(yaml.safe_dump(json.loads(oke.read_text()), sort_keys=False))
    a, b = read_node_labels(oke.read_text(), str(oke)), read_node_labels(y.read_text(), str(y))
    assert (a["format"], b["format"]) == ("kubectl-json", "kubectl-yaml") and a["nodes"] == b["nodes"]
    assert len(a["nodes"]) == 8 and a["warnings"] == []


def test_oke_nodelist_fabric_and_its_emits(oke):
    doc = run_cli("fabric", str(oke), "--format", "json").json()
    assert [(t["name"], t["level"], t["nodes"] or t["switches"]) for t in doc["tree"]] == [
        ("3bf4jpavrba", 1, [f"10.0.64.{i}" for i in range(11, 15)]),
        ("3bf4jpavrbb", 1, [f"10.0.64.{i}" for i in range(15, 19)]),
        ("e4c5ds4yava", 2, ["3bf4jpavrba", "3bf4jpavrbb"]), ("5xxb22p6ucq", 3, ["e4c5ds4yava"])]
    assert [(b["name"], len(b["nodes"]), b["nvlink_domain"][-4:]) for b in doc["blocks"]] == [("nvl01", 4, "2478"),
                                                                                             ("nvl02", 4, "2479")]
    tree = fabric_tree(doc)
    assert tree.level_between("10.0.64.11", "10.0.64.14") == 1 and tree.level_between("10.0.64.11", "10.0.64.15") == 2
    ky = run_cli("fabric", str(oke), "--emit", "kueue", "--format", "json")
    assert ky.code == 0, ky.stderr
    k = ky.json()
    from test_schemas import validate

    validate(k)
    assert k["levels"] == ["core", "spine", "leaf", "nvlink-domain", "hostname"]
    assert [lv["nodeLabel"] for lv in k["topology"]["spec"]["levels"]] == [       # the labels the nodes carry
        OCI + "hpc_island_id", OCI + "network_block_id", OCI + "local_block_id", CLIQUE_LABEL, HOSTNAME_LABEL]
    assert k["node_labels"]["10.0.64.11"] == {HOSTNAME_LABEL: "10.0.64.11"}      # nothing for gpucomm to write
    stream = list(yaml.safe_load_all(run_cli("fabric", str(oke), "--emit", "kueue").stdout))
    assert [d["kind"] for d in stream] == ["Topology"]
    # NVLink domains replaced (--nvlink-domain 2): that level is gpucomm's own label again, the rest stay native
    k2 = run_cli("fabric", str(oke), "--emit", "kueue", "--nvlink-domain", "2", "--format", "json").json()
    assert [lv["nodeLabel"] for lv in k2["topology"]["spec"]["levels"]][-2:] == [
        "feature.node.kubernetes.io/gpucomm-nvlink.domain", HOSTNAME_LABEL]
    assert k2["node_labels"]["10.0.64.11"]["feature.node.kubernetes.io/gpucomm-nvlink.domain"] == "domain1"
    sb = run_cli("fabric", str(oke), "--emit", "slurm-block")
    assert sb.code == 0 and "BlockName=nvl01 Nodes=10.0.64.[11-14]" in sb.stdout and "BlockSizes=4" in sb.stdout
    assert "BlockName=" in run_cli("fabric", str(oke), "--emit", "slurm").stdout     # blocks where cliques are known
    st_ = run_cli("fabric", str(oke), "--emit", "slurm-tree").stdout
    assert "SwitchName=e4c5ds4yava Switches=3bf4jpavrba,3bf4jpavrbb" in st_


def test_select_keeps_a_job_in_one_clique_then_one_network_block(oke):
    s = run_cli("select", "example:gb300-nvl72", "--nodes", "4", "--cluster", str(oke), "--format", "json")
    assert s.code == 0, s.stderr
    got = s.json()
    assert got["span"]["within"] == "nvlink-domain" and got["nodes"] == [f"10.0.64.{i}" for i in range(11, 15)]
    s6 = run_cli("select", "example:gb300-nvl72", "--nodes", "6", "--cluster", str(oke), "--format", "json").json()
    assert s6["crosses_spine"] and s6["span"]["name"] == "e4c5ds4yava" and len(s6["span"]["nvlink_domains"]) == 2
    free = run_cli("select", "example:gb300-nvl72", "--nodes", "2", "--cluster", str(oke), "--free", "10.0.64.[14-16]",
                   "--format", "json").json()
    assert free["nodes"] == ["10.0.64.15", "10.0.64.16"] and free["span"]["within"] == "nvlink-domain"


def test_plan_on_labels_segments_by_clique(oke):
    p = run_cli("plan", "example:gb300-nvl72", "--cluster", str(oke), "--tp", "4", "--dp", "8", "--pp", "1",
                "--emit", "slurm")
    assert p.code == 0, p.stderr
    assert "#SBATCH --segment=4" in p.stdout and "--switches" not in p.stdout and "10.0.64.[11-18]" in p.stdout


def test_cluster_join_takes_the_cliques_from_the_labels(oke, tmp_path):
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    tray = run_cli("probe", "example:gb200-tray", "--format", "json").json()
    for g in tray["gpus"]:
        g.pop("fabric", None)            # the GPUs say nothing: the labels' cliques count
    for i in range(11, 19):
        (nodes / f"10.0.64.{i}.json").write_text(json.dumps(tray))
    out = tmp_path / "cluster.json"
    r = run_cli("cluster", str(nodes), "--fabric", str(oke), "-o", str(out))
    assert r.code == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["summary"]["nodes"] == 8 and doc["summary"]["nvlink_domains"] == 2
    assert [n["nvlink_domain"][-4:] for n in doc["nodes"]] == ["2478", "2479"]
    s = run_cli("select", "--nodes", "4", "--cluster", str(out), "--format", "json").json()
    assert s["span"]["within"] == "nvlink-domain" and s["nodes"] == [f"10.0.64.{i}" for i in range(11, 15)]


def test_gke_nodelist_two_subblocks(tmp_path):
    p = tmp_path / "gke.yaml"
    p.write_text(yaml.safe_dump(_node_list(gke_nodes())))
    doc = run_cli("fabric", str(p), "--format", "json").json()
    assert [lv["switches"] for lv in doc["levels"]] == [2, 1]      # subblocks (leaves), the block
    ky = run_cli("fabric", str(p), "--emit", "kueue", "--format", "json").json()
    assert ky["levels"] == ["spine", "leaf", "hostname"]
    assert [lv["nodeLabel"] for lv in ky["topology"]["spec"]["levels"]] == [GCE + "block", GCE + "subblock",
                                                                           HOSTNAME_LABEL]
    s = run_cli("select", "example:hgx-h100", "--nodes", "2", "--cluster", str(p), "--format", "json").json()
    subblock = {n: lab[GCE + "subblock"] for n, lab in gke_nodes().items()}
    assert len(s["nodes"]) == 2 and len({subblock[n] for n in s["nodes"]}) == 1 and not s["crosses_spine"]
    assert s["span"]["name"] == subblock[s["nodes"][0]]


def test_nodes_without_the_labels_are_named_and_outside_the_tree(tmp_path):
    nodes = oke_gb300(4)
    nodes["cpu-node-1"] = {HOSTNAME_LABEL: "cpu-node-1", "kubernetes.io/arch": "amd64"}
    p = tmp_path / "mixed.json"
    p.write_text(json.dumps(_node_list(nodes)))
    r = run_cli("fabric", str(p), "--format", "json")
    assert r.code == 0
    doc = r.json()
    assert any("1 node(s) lack the label(s)" in w and "cpu-node-1" in w for w in doc["warnings"])
    assert any("1 node(s) have no nvidia.com/gpu.clique" in w for w in doc["warnings"])
    assert next(h for h in doc["hosts"] if h["name"] == "cpu-node-1")["leaves"] == []


def test_a_value_under_two_parents_is_two_switches(tmp_path):
    nodes = oke_gb300(4)
    for n in ("10.0.64.13", "10.0.64.14"):      # the first local block's value again, under another network block
        nodes[n].update({OCI + "network_block_id": "otherblock", OCI + "local_block_id": "3bf4jpavrba"})
    doc = fabric_from_text(json.dumps(_node_list(nodes)), "x.json")
    leaves = [t for t in doc["tree"] if t["level"] == 1]
    assert len(leaves) == 2 and len({t["name"] for t in doc["tree"]}) == len(doc["tree"])
    assert any("names 2 different switches" in w for w in doc["warnings"])
    fabric_tree(doc)          # holds together


def test_describe_of_several_nodes(tmp_path):
    one = EKS_DESCRIBE.read_text()
    two = one.replace("ip-10-0-5-152", "ip-10-0-5-153").replace("nn-dcbcca51aebf4c95b", "nn-dcbcca51aebf4c95c")
    rec = read_node_labels(one + "\n\n" + two, "describe.txt")
    assert [n["name"].split(".")[0] for n in rec["nodes"]] == ["ip-10-0-5-152", "ip-10-0-5-153"]
    doc = fabric_from_text(one + "\n\n" + two, "describe.txt")
    assert [lv["switches"] for lv in doc["levels"]] == [2, 1, 1]


# --------------------------------------------------------------------------------------------
# Property tests: anything reads or is refused in one line
_KEYS = st.sampled_from([CLIQUE_LABEL, HOSTNAME_LABEL, OCI + "local_block_id", OCI + "network_block_id",
                         OCI + "hpc_island_id", GCE + "block", GCE + "subblock", GCE + "host",
                         "topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-3",
                         "nvidia.com/gpu.count", "bad key", "", "a/b/c", "x" * 70])
_VALUES = st.one_of(st.sampled_from(["", "a", "3bf4jpavrba", "e4c5ds4yava", "nn-1", "-x", "x" * 64, "a.b", "ü"]),
                    st.text(max_size=8))


def _refused_in_one_line(fn):
    try:
        return fn()
    except InputError as e:
        assert "\n" not in str(e)
        return None


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.dictionaries(st.sampled_from([f"n{i}" for i in range(6)] + ["", "bad name", "x" * 70]),
                       st.dictionaries(_KEYS, _VALUES, max_size=8), max_size=6), st.booleans())
def test_any_nodelist_reads_or_is_refused(nodes, as_yaml):
    text = yaml.safe_dump(_node_list(nodes)) if as_yaml else json.dumps(_node_list(nodes))
    doc = _refused_in_one_line(lambda: fabric_from_text(text, "nodes"))
    if doc is not None:
        names = {h["name"] for h in doc["hosts"]}
        assert names <= set(nodes)
        if doc["tree"] or doc["blocks"]:
            tree = fabric_tree(doc)
            assert set(tree.node_leaf) <= names


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.one_of(st.tuples(_KEYS, _VALUES).map(lambda kv: f"{kv[0]}={kv[1]}"),
                          st.tuples(_KEYS, _VALUES).map(lambda kv: f"  {kv[0]}: {kv[1]}"),
                          st.sampled_from(["Name:  node-a", "Labels:   kubernetes.io/os=linux", "Annotations:  x: y",
                                           "\t\t….", "", "Taints: <none>", "{", "kind: Node", "apiVersion: v1",
                                           "items:", "- kind: ResourceSlice"]),
                          st.text(max_size=20)), max_size=25))
def test_any_text_reads_or_is_refused(lines):
    text = "\n".join(lines)
    rec = _refused_in_one_line(lambda: read_node_labels(text, "labels.txt"))
    if rec is not None:
        assert rec["nodes"] and all(k8s_labels.is_label(k, v) for n in rec["nodes"] for k, v in n["labels"].items())
    if detect_fabric(text) == "k8s":
        _refused_in_one_line(lambda: fabric_from_text(text, "labels.txt"))


@pytest.mark.parametrize("path", sorted(p for p in K8S.iterdir() if p.name != "SOURCES.md"), ids=lambda p: p.name[:3])
def test_every_capture_is_read_or_refused_in_one_line(path):
    """As a fabric: read (exit 0), no switch (exit 3) or not node labels (exit 1), never a traceback; as
    a node's topology: refused, saying it is Kubernetes."""
    r = run_cli("fabric", str(path), "--format", "json")
    assert r.code in (0, 1, 3) and "Traceback" not in r.stderr and "internal error" not in r.stderr
    if r.code:
        assert len(r.stderr.strip().splitlines()) == 1
    p = run_cli("probe", str(path))
    assert p.code == 1 and "this is Kubernetes" in p.stderr and len(p.stderr.strip().splitlines()) == 1
