"""Clusters: Slurm hostlists and topology.conf, cluster files, switch-aware node order, cross-switch
traffic, synthetic fat trees, and bad files (exit 1 with file and line)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from support import run_cli
from gpucomm.planners.placement.cluster import load_cluster
from gpucomm.planners.plan import build_full_plan
from gpucomm.planners.placement import cluster as cl
from gpucomm.probes.errors import InputError
from support import hgx_doc

# slurm-config-examples.md (topology.conf(5) EXAMPLE, verbatim)
SLURM_EXAMPLE = """# topology/tree
SwitchName=s0 Nodes=dev[0-5]
SwitchName=s1 Nodes=dev[6-11]
SwitchName=s2 Nodes=dev[12-17]
SwitchName=s3 Switches=s[0-2]
"""
# the man page's two-level LinkSpeed excerpt, with the leaves it elides (s1-s3) written out
SLURM_LINKSPEED = """SwitchName=s0 Nodes=tux[0-3]   LinkSpeed=900
SwitchName=s1 Nodes=tux[4-7]   LinkSpeed=900
SwitchName=s2 Nodes=tux[8-11]  LinkSpeed=900
SwitchName=s3 Nodes=tux[12-15] LinkSpeed=900
SwitchName=s4 Switches=s[0-3]  LinkSpeed=1800
"""


# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("expr,hosts", [
    ("node[01-03]", ["node01", "node02", "node03"]),
    ("gpu[1,3,5-6]", ["gpu1", "gpu3", "gpu5", "gpu6"]),
    ("a[1-2]b[08-09]", ["a1b08", "a1b09", "a2b08", "a2b09"]),
    ("x[8-10],login", ["x8", "x9", "x10", "login"]),
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
])
def test_expand_hostlist(expr, hosts):
    assert cl.expand_hostlist(expr) == hosts
    assert cl.expand_hostlist(cl.compress_hostlist(hosts, keep_order=True)) == hosts


@pytest.mark.parametrize("bad", ["", "node[", "node]", "node[3-1]", "node[a-b]", "node[]", "a,,b", "n[[1]]", "a b"])
def test_expand_hostlist_errors(bad):
    with pytest.raises(ValueError):
        cl.expand_hostlist(bad)


def test_compress_sorted_and_ordered():
    assert cl.compress_hostlist(["n3", "n1", "n2", "m5"]) == "m5,n[1-3]"
    assert cl.compress_hostlist(["n3", "n1", "n2"], keep_order=True) == "n[3,1-2]"  # scontrol: n3 n1 n2
    assert cl.compress_hostlist(["n9", "n10", "n010"], keep_order=True) == "n[9-10,010]"


names = st.lists(st.builds(lambda p, n, w: f"{p}{str(n).zfill(w)}", st.sampled_from(["node", "gpu", "r1n"]),
                           st.integers(0, 120), st.integers(1, 4)), min_size=1, max_size=30, unique=True)


@settings(max_examples=80, deadline=None)
@given(names, st.booleans())
def test_hostlist_roundtrip(hosts, keep):
    expr = cl.compress_hostlist(hosts, keep_order=keep)
    out = cl.expand_hostlist(expr)
    assert (out == hosts) if keep else (sorted(out) == sorted(hosts))


@settings(max_examples=80, deadline=None)
@given(st.text(alphabet="ab01[]-,x9 ", max_size=24))
def test_hostlist_parser_only_raises_valueerror(text):
    try:
        cl.expand_hostlist(text)
    except ValueError:
        pass


@pytest.mark.skipif(not shutil.which("scontrol"), reason="Slurm client not installed")
@settings(max_examples=25, deadline=None)
@given(names)
def test_hostlist_matches_scontrol(tmp_path_factory, hosts):
    conf = tmp_path_factory.getbasetemp() / "slurm.conf"
    if not conf.exists():
        conf.write_text("ClusterName=t\nSlurmctldHost=localhost\nNodeName=n1\nPartitionName=p Nodes=n1\n")
    expr = cl.compress_hostlist(hosts, keep_order=True)
    r = subprocess.run(["scontrol", "show", "hostnames", expr], capture_output=True, text=True,
                       env=dict(os.environ, SLURM_CONF=str(conf)), timeout=30)
    assert r.stdout.split() == hosts


# --------------------------------------------------------------------------------------------
def test_parse_slurm_man_page_examples():
    f = cl.parse_topology_conf(SLURM_EXAMPLE)
    assert f.roots() == ["s3"] and f.node_leaf["dev7"] == "s1"
    assert f.level_between("dev0", "dev5") == 1 and f.level_between("dev0", "dev6") == 2
    assert f.level_between("dev3", "dev3") == 0
    f2 = cl.parse_topology_conf(SLURM_LINKSPEED)
    assert f2.switches["s0"].link_speed == 900 and f2.switches["s4"].link_speed == 1800


def test_parse_block_and_continuation():
    text = "BlockName=block1 Nodes=node[1-4]\nBlockName=block2 \\\n  Nodes=node[5-8]  # second block\nBlockSizes=4,8\n"
    f = cl.parse_topology_conf(text)
    assert f.level_between("node1", "node4") == 1 and f.level_between("node1", "node5") == 2
    assert cl.parse_topology_conf("switchname=a nodes=x[1-2]").node_leaf == {"x1": "a", "x2": "a"}


@pytest.mark.parametrize("text,line,what", [
    ("SwitchName=s0 Nodes=n[1-2]\nSwitchName=s1 Nodez=n3\n", 2, "unknown key"),
    ("SwitchName=s0 Nodes=n[2-1]\n", 1, "goes backwards"),
    ("SwitchName=s0 Nodes=n1\nSwitchName=s1 Switches=s[0,7]\n", 2, "unknown switch"),
    ("SwitchName=s0 Nodes=n1\nSwitchName=s1 Switches=s[0-1]\n", 2, "lists itself"),
    ("SwitchName=s0 Nodes=n1\n\nSwitchName=s0 Nodes=n2\n", 3, "defined twice"),
    ("SwitchName=s0 Nodes=n1\nSwitchName=s1 Nodes=n1\n", 2, "under two switches"),
    ("SwitchName=a Switches=b\nSwitchName=b Switches=a\n", None, "cycle"),
    ("SwitchName=s0\n", 1, "neither Nodes= nor Switches="),
    ("Nodes=n1 SwitchName=s0\n", 1, "must start with SwitchName="),
    ("SwitchName=s0 Nodes=n1 LinkSpeed=fast\n", 1, "not a number"),
    ("# only a comment\n", None, "no SwitchName"),
    ("SwitchName=s0 junk\n", 1, "not Key=Value"),
])
def test_topology_conf_errors_name_the_line(text, line, what):
    with pytest.raises(InputError) as e:
        cl.parse_topology_conf(text, "t.conf")
    assert what in str(e.value)
    if line is not None:
        assert f"t.conf:{line}:" in str(e.value)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(["SwitchName=s0", "SwitchName=s1", "Nodes=n[1-3]", "Nodes=n[2-x]", "Switches=s0",
                                 "Switches=s[0-1]", "LinkSpeed=9", "#c", "\\", "\n", " ", "x=y", "=", "Nodes="]),
                max_size=12))
def test_topology_conf_fuzz(parts):
    try:
        cl.parse_topology_conf(" ".join(parts), "f.conf")
    except InputError:
        pass


# --------------------------------------------------------------------------------------------
def _write_cluster(tmp_path, conf_text, nodes_expr="node[01-08]", topo=None, extra=None):
    topo_path = tmp_path / "hgx.json"
    topo_path.write_text(json.dumps(topo or hgx_doc()))
    (tmp_path / "topology.conf").write_text(conf_text)
    doc = {"nodes": [{"names": nodes_expr, "topology": "hgx.json"}], "fabric": {"topology_conf": "topology.conf"}}
    doc.update(extra or {})
    p = tmp_path / "cluster.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


# File order interleaves the leaves: node01 on leaf1, node02 on leaf2, ...
INTERLEAVED = ("SwitchName=leaf1 Nodes=node[01,03,05,07]\nSwitchName=leaf2 Nodes=node[02,04,06,08]\n"
               "SwitchName=spine Switches=leaf[1-2]\n")


def _leaves_per_group(plan, fab, axis):
    by = {r["rank"]: r for r in plan["ranks"]}
    return max(len({fab.node_leaf[by[r]["host"]] for r in g}) for g in plan["groups"][axis])


@pytest.mark.parametrize("model,local_axis", [
    (None, "dp"),                    # no estimate: DP gradients are the usual heavy hitter
    ("llama-8b,gbs=8", "dp"),        # 2 micro-batches: little PP traffic, DP dominates
    ("llama-8b,gbs=4096", "pp"),     # 1024 micro-batches of activations: PP dominates
])
def test_cluster_plan_keeps_the_heavy_axis_under_a_leaf(tmp_path, model, local_axis):
    c = load_cluster(str(_write_cluster(tmp_path, INTERLEAVED)))
    plan = build_full_plan(None, cluster=c, tp=8, dp=4, pp=2, model=model)
    assert plan["nodes"] == 8 and sorted(plan["hosts"]) == sorted(c.nodes)
    fab = c.fabric
    assert _leaves_per_group(plan, fab, local_axis) == 1
    ours = plan["traffic"]
    assert ours["by_axis"][local_axis]["levels"].keys() == {"level1"}
    # The Megatron rank order is untouched.  Hosts in file order (node01 leaf1, node02 leaf2, ...)
    # keep PP pairs (n, n+4) on a leaf but send every DP ring through the spine.
    naive = cl.traffic_report(dict(plan, hosts=c.nodes), fab)
    assert naive["by_axis"]["dp"]["levels"].keys() == {"level2"}
    if local_axis == "dp":
        assert cl.traffic_cost(ours) < cl.traffic_cost(naive)
    else:
        assert cl.traffic_cost(ours) <= cl.traffic_cost(naive)
    if model:
        assert all(isinstance(v["bytes_per_step"], int) for v in ours["by_level"].values())
    assert "#SBATCH --switches=2" in plan["launch"]["slurm"]


def test_order_hosts_prefers_whole_blocks_per_leaf(tmp_path):
    conf = "SwitchName=l1 Nodes=n[1-6]\nSwitchName=l2 Nodes=n[7-12]\nSwitchName=top Switches=l[1-2]\n"
    c = cl.Cluster(nodes=[f"n{i}" for i in range(1, 13)], topology_of={}, docs={},
                   fabric=cl.parse_topology_conf(conf), path="x")
    order = cl.order_hosts(c, c.nodes, 8, [4])
    assert order == ["n1", "n2", "n3", "n4", "n7", "n8", "n9", "n10"]
    with pytest.raises(Exception):
        cl.order_hosts(c, c.nodes, 13, [4])


def test_node_blocks():
    from gpucomm.planners.placement.ranks import RankGenerator

    assert cl.node_blocks(RankGenerator(tp=8, ep=1, dp=4, pp=2, cp=1), 8) == [4, 8]
    assert cl.node_blocks(RankGenerator(tp=2, ep=1, dp=4, pp=2, cp=1), 8) == [2]


def test_cluster_yaml_switches_and_cli(tmp_path):
    (tmp_path / "hgx.json").write_text(json.dumps(hgx_doc()))
    doc = {"topology": "hgx.json", "nodes": ["node[1-4]"],
           "fabric": {"switches": [{"name": "leafA", "nodes": "node[1-2]", "link_gbps": 3200},
                                   {"name": "leafB", "nodes": "node[3-4]", "link_gbps": 3200},
                                   {"name": "core", "switches": ["leafA", "leafB"]}]}}
    p = tmp_path / "c.json"
    p.write_text(json.dumps(doc))
    r = run_cli("plan", "--cluster", str(p), "--tp", "8", "--pp", "2", "--format", "json")
    assert r.code == 0, r.stderr
    plan = r.json()
    assert plan["hosts"] == ["node1", "node2", "node3", "node4"]
    assert plan["traffic"]["fabric"] == str(p)
    r = run_cli("plan", "--cluster", str(p), "--tp", "8", "--emit", "torchrun")
    assert r.code == 0 and "node1) NODE_RANK=0 ;;" in r.stdout


@pytest.mark.parametrize("mutate,code,what", [
    (lambda d, t: d["nodes"][0].update(topology="missing.json"), 1, "no such file"),
    (lambda d, t: d.update(fabric={"topology_conf": "topology.conf"}) or
     (t / "topology.conf").write_text("SwitchName=s0 Nodes=node[01-07]\n"), 1, "node08"),
    (lambda d, t: (t / "topology.conf").write_text("SwitchName=s0 Nodes=node[01-08]\nSwitchName=s1 Nodez=x\n"), 1,
     "topology.conf:2:"),
    (lambda d, t: d.update(extra_key=1), 1, "unknown key"),
    (lambda d, t: d["nodes"][0].update(names="node[01-"), 1, "nodes[0].names"),
    (lambda d, t: d.update(fabric={"switches": [{"name": "x"}]}), 1, "neither nodes nor switches"),
])
def test_bad_cluster_files_exit_1(tmp_path, mutate, code, what):
    p = _write_cluster(tmp_path, "SwitchName=s0 Nodes=node[01-08]\n")
    d = yaml.safe_load(p.read_text())
    mutate(d, tmp_path)
    p.write_text(yaml.safe_dump(d))
    r = run_cli("plan", "--cluster", str(p), "--tp", "8")
    assert r.code == code and what in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_cluster_infeasible_exit_4(tmp_path):
    p = _write_cluster(tmp_path, "SwitchName=s0 Nodes=node[01-08]\n")
    r = run_cli("plan", "--cluster", str(p), "--tp", "8", "--nodes", "9")
    assert r.code == 4 and "9 nodes" in r.stderr
    r = run_cli("plan", "--cluster", str(p), "--tp", "3")
    assert r.code == 4 and "tp=3 does not divide 8 GPUs per node" in r.stderr
    (tmp_path / "bad.yaml").write_text("nodes: [\n")
    r = run_cli("plan", "--cluster", str(tmp_path / "bad.yaml"), "--tp", "8")
    assert r.code == 1 and "bad.yaml:" in r.stderr


# --------------------------------------------------------------------------------------------
def test_synth_fat_tree_and_plan_at_scale(tmp_path):
    out = tmp_path / "synth"
    src = tmp_path / "hgx.json"
    src.write_text(json.dumps(hgx_doc()))
    r = run_cli("synth", "--nodes", "256", "--node", str(src), "--fat-tree", "3", "--nodes-per-leaf", "16",
                "--leaves-per-spine", "4", "--out-dir", str(out))
    assert r.code == 0, r.stderr
    conf = (out / "topology.conf").read_text()
    fab = cl.parse_topology_conf(conf)
    assert len(fab.leaves()) == 16 and fab.roots() == ["core"] and len(fab.node_leaf) == 256
    assert fab.level_between("node001", "node016") == 1 and fab.level_between("node001", "node017") == 2
    assert fab.level_between("node001", "node065") == 3
    c = load_cluster(str(out / "cluster.yaml"))
    assert len(c.nodes) == 256 and len(c.docs) == 1
    plan = build_full_plan(None, cluster=c, tp=8, pp=4, model="llama-70b")
    assert plan["world_size"] == 2048 and plan["ranks"][0]["gpu_uuid"] is None  # shared document: no UUIDs
    lv = plan["traffic"]["by_axis"]["dp"]["levels"]
    assert set(lv) <= {"level1", "level2"}        # DP blocks of 16 nodes fill leaves


def test_synth_prints_yaml_without_out_dir():
    r = run_cli("synth", "--nodes", "4", "--node", "example:hgx-h100", "--fat-tree", "1")
    if r.code == 1 and "no bundled example" in r.stderr:
        pytest.skip("hgx-h100 example not installed")
    assert r.code == 0, r.stderr
    d = yaml.safe_load(r.stdout)
    assert d["nodes"][0]["names"] == "node[01-04]"
    assert cl.parse_topology_conf(d["fabric"]["topology_conf_text"]).roots() == ["core"]
    assert run_cli("synth", "--nodes", "4", "--node", "example:hgx-h100", "--fat-tree", "5").code == 2   # usage
    assert run_cli("synth", "--nodes", "0", "--node", "example:hgx-h100").code == 2
    assert run_cli("synth", "--nodes", "4").code == 2


json_values = st.recursive(st.none() | st.booleans() | st.integers(-5, 5) | st.text("node[1-3],x:", max_size=8),
                           lambda c: st.lists(c, max_size=3) | st.dictionaries(
                               st.sampled_from(["nodes", "names", "name", "topology", "fabric", "switches",
                                                "topology_conf_text", "link_gbps", "schema", "x"]), c, max_size=4),
                           max_leaves=12)


@settings(max_examples=80, deadline=None)
@given(st.dictionaries(st.sampled_from(["nodes", "fabric", "topology", "schema", "name", "extra"]), json_values,
                       max_size=4))
def test_cluster_file_fuzz(obj):
    """parse_cluster on arbitrary YAML-shaped data: a Cluster or a one-line InputError."""
    from gpucomm.probes.model import new_document

    def load(src):
        if "node" not in src:
            raise InputError("no such file", src)
        return new_document("json")

    try:
        c = cl.parse_cluster(obj, "c.yaml", "/tmp", load, lambda p: "SwitchName=s Nodes=node[1-3]\n")
    except InputError as e:
        assert "\n" not in str(e)
        return
    assert c.nodes and all(h in c.topology_of for h in c.nodes)
