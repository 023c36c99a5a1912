"""The switch fabric: infiniband-diags readers on the real captures (ibnetdiscover plain and -p,
iblinkinfo, ibswitches/ibhosts), the fabric document (levels, hosts, rails, findings), Slurm's topology
(topology.conf block and tree, scontrol show topology), the emitters (topology.conf tree/block,
topology.yaml, Kueue, cluster file), select --nodes, --segment, the cluster join, the synthetic
ibnetdiscover writer, and property tests of the readers."""
from __future__ import annotations

import json
import re

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import CAPTURES, run_cli
from gpucomm.probes.errors import InputError
from gpucomm.probes.fabric import build_fabric, classify_ca, fabric_from_text, load_fabric, parse_topology_conf
from gpucomm.probes.formats import ibnet, slurm_topology

IB = CAPTURES / "ib-fabric"
NVL = CAPTURES / "nvl72"
EDR = next(IB.glob("006_*"))
HDR_LINKINFO = next(IB.glob("005_*"))
LISTS = next(IB.glob("004_*"))
QDR = next(IB.glob("007_*"))
PORTS = next(IB.glob("008_*"))
NO_SWITCH = next(IB.glob("002_*"))
RAILS = IB / "topograph_example.out"
AZURE_BLOCKS = next(NVL.glob("004_*"))


def _by_rule(doc: dict, rule: str) -> list:
    return [f for f in doc["findings"] if f["rule"] == rule]


# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", sorted(p for p in IB.iterdir() if p.name != "SOURCES.md"), ids=lambda p: p.name[:12])
def test_every_capture_reads(path):
    r = run_cli("fabric", str(path), "--format", "json")
    if path == NO_SWITCH:
        assert r.code == 3 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "no switch" in r.stderr and path.name in r.stderr
        return
    assert r.code == 0, r.stderr
    doc = r.json()
    assert doc["schema"] == "gpucomm.fabric/v1" and doc["hosts"]
    table = run_cli("fabric", str(path))
    assert table.code == 0 and "gpucomm fabric:" in table.stdout


def test_edr_cluster_two_spines_four_leaves_96_hosts_and_the_ddr_link():
    doc = load_fabric(str(EDR))
    roles = sorted((s["name"], s["role"]) for s in doc["switches"])
    assert [r for _, r in roles].count("spine") == 2 and [r for _, r in roles].count("leaf") == 4
    assert {n for n, r in roles if r == "spine"} == {"S-ec0d9a0300ec81e0", "S-ec0d9a0300ec8200"}
    assert len(doc["hosts"]) == 96 and not doc["others"]
    assert {h["name"] for h in doc["hosts"]} >= {"node001", "node047", "gpu001", "gpu045", "bee01", "login01", "controller"}
    # the one down-trained trunk: ec8480 port 11 <-> ec8200 port 11 at 4xDDR among 48 EDR trunks
    ddr = _by_rule(doc, "ib-link-downtrained")
    assert len(ddr) == 1 and "4xDDR (20 Gb/s)" in ddr[0]["message"] and "47 of its 48" in ddr[0]["message"]
    assert "S-ec0d9a0300ec8200[11]" in ddr[0]["subject"] and "S-ec0d9a0300ec8480[11]" in ddr[0]["subject"]
    # the leaf whose host ports the capture omits (f548c0) is still a leaf: its hosts' own port lines say so
    leaf = {s["name"]: s for s in doc["switches"]}["S-ec0d9a0300f548c0"]
    assert leaf["role"] == "leaf" and leaf["hosts"] == 24
    # 24 x EDR down, 12 x EDR up: 2:1; the leaf with the DDR trunk is worse
    over = {s["name"]: s["oversubscription"] for s in doc["switches"] if s["role"] == "leaf"}
    assert over["S-ec0d9a0300ec8240"] == 2.0 and over["S-ec0d9a0300ec8480"] == round(2400 / 1120, 2)
    # one tree switch stands for both spines; four leaves under it
    top = [t for t in doc["tree"] if t["level"] == 2]
    assert len(top) == 1 and len(top[0]["members"]) == 2 and len(top[0]["switches"]) == 4


def test_iblinkinfo_could_be_links_sharp_node_and_named_uplink():
    doc = load_fabric(str(HDR_LINKINFO))
    assert doc["source"]["formats"] == ["ibswitches", "iblinkinfo"]   # the prompts and both commands of the paste
    assert sorted(h["name"] for h in doc["hosts"]) == ["node1", "node2", "node3", "node4"]
    assert {h["hcas"][0]["name"] for h in doc["hosts"]} == {"HCA-2"}
    could = _by_rule(doc, "ib-link-could-be-faster")
    assert len(could) == 4 and all("4xEDR (100 Gb/s)" in f["message"] and "4xHDR (200 Gb/s)" in f["message"] for f in could)
    assert [o["kind"] for o in doc["others"]] == ["sharp-aggregation-node"]
    spine = [s for s in doc["switches"] if s["role"] == "spine"]
    assert [s["name"] for s in spine] == ["d32-03-1"]     # MF0;d32-03-1:MQM8700/U1, named as topograph names it


def test_ibswitches_ibhosts_list_dpus_and_sharp_nodes_not_hosts():
    doc = load_fabric(str(LISTS))
    kinds = sorted(o["kind"] for o in doc["others"])
    assert kinds.count("dpu") == 7 and kinds.count("sharp-aggregation-node") == 2
    names = {h["name"] for h in doc["hosts"]}
    assert len(names) == 19 and {"node1", "cpugl1", "CPUGL12", "mlu1000-2", "fpga2"} <= names
    assert not any(n.startswith("dpu") for n in names)
    assert _by_rule(doc, "no-links") and not doc["tree"]
    r = run_cli("fabric", str(LISTS), "--emit", "slurm")
    assert r.code == 3 and "no host is linked to a switch" in r.stderr


def test_iblinkinfo_qdr_dual_port_hca():
    doc = load_fabric(str(QDR))
    hosts = {h["name"]: h for h in doc["hosts"]}
    assert len(hosts) == 8 and len(doc["switches"]) == 1
    assert [c["port"] for c in hosts["teaker-9"]["hcas"]] == [1, 2]
    assert {c["rate_gbps"] for h in hosts.values() for c in h["hcas"]} == {40.0}
    assert "teaker-10" in doc["tree"][0]["nodes"]


def test_ibnetdiscover_ports_format():
    doc = load_fabric(str(PORTS))
    leaves = sorted(s["name"] for s in doc["switches"] if s["role"] == "leaf")
    assert leaves == ["ib-i1l1s01", "ib-i4l1s01"]
    assert {s["name"]: s["role"] for s in doc["switches"]}["ib-i7l2s01"] == "unreached"
    assert doc["down_ports"] == 2 and _by_rule(doc, "switch-unreached")


def test_rail_optimised_fabric_groups_rail_leaves_into_scalable_units():
    doc = load_fabric(str(RAILS))
    assert doc["rails"]["rail_optimised"]
    assert len(doc["hosts"]) == 121 and len(doc["switches"]) == 40
    kinds = {}
    for o in {o["id"]: o for o in doc["others"]}.values():
        kinds[o["kind"]] = kinds.get(o["kind"], 0) + 1
    assert kinds == {"sharp-aggregation-node": 40, "unnamed": 72}
    leaves = [t for t in doc["tree"] if t["level"] == 1]
    # one tree leaf per scalable unit: the rail leaves A09-P1-IBLEAF-0R-0U (R = rail) of unit U together
    name = {s["id"]: s["name"] for s in doc["switches"]}
    assert len(leaves) == 8 and all(len({name[m].split("-")[-1] for m in t["members"]}) == 1 for t in leaves)
    assert sum(len(t["nodes"]) for t in leaves) == 121
    conf = run_cli("fabric", str(RAILS), "--emit", "slurm")
    assert conf.code == 0
    tree = parse_topology_conf(conf.stdout)
    assert len(tree.node_leaf) == 121 and tree.roots() == ["A10-P1-IBSPINE-01"]


@pytest.mark.parametrize("desc,want", [
    ("node018 HCA-1", ("host", "node018", "HCA-1")), ("a09-p1-dgx-03-c05 HCA-5", ("host", "a09-p1-dgx-03-c05", "HCA-5")),
    ("controller mlx5_0", ("host", "controller", "mlx5_0")), ("Mellanox Technologies Aggregation Node", ("sharp-aggregation-node", None, None)),
    ("MT4129 ConnectX7   Mellanox Technologies", ("unnamed", None, None)), ("localhost HCA-1", ("unnamed", None, None)),
    ("dpu7 HCA-1", ("dpu", "dpu7", "HCA-1")), ("", ("unnamed", None, None)),
])
def test_classify_ca(desc, want):
    assert classify_ca(desc) == want


# --------------------------------------------------------------------------------------------
# Slurm's topology, in and out
def test_block_topology_conf_and_scontrol_output():
    rec = slurm_topology.read_topology_conf(AZURE_BLOCKS.read_text(), str(AZURE_BLOCKS))
    assert [len(b["nodes"]) for b in rec["blocks"]] == [18, 16, 8, 9] and rec["block_sizes"] == [5]
    sc = next(NVL.glob("021_*"))
    rec = slurm_topology.read_topology_conf(sc.read_text(), str(sc))
    assert rec["source"] == "scontrol" and [b["name"] for b in rec["blocks"]] == ["gb300_b0", "gb300_b1"]
    assert rec["block_sizes"] == [2, 4] and rec["blocks"][0]["nodes"] == ["10.140.71.103", "10.140.88.115"]
    tree_out = "SwitchName=s0 Level=0 LinkSpeed=1 Nodes=dev[0-5]\nSwitchName=s1 Level=0 LinkSpeed=1 Nodes=dev[6-11]\n" \
               "SwitchName=s2 Level=1 LinkSpeed=1 Nodes=dev[0-11] Switches=s[0-1]\n"
    tree = parse_topology_conf(tree_out, "scontrol")
    assert tree.roots() == ["s2"] and tree.node_leaf["dev7"] == "s1" and tree.level_between("dev0", "dev7") == 2


def test_block_input_emits_blocks_and_segment_never_switches():
    r = run_cli("fabric", str(AZURE_BLOCKS), "--emit", "slurm")
    assert r.code == 0 and "BlockSizes=5" in r.stdout and r.stdout.count("BlockName=") == 4
    assert parse_topology_conf(r.stdout).blocks == ["block1", "block2", "block3", "block4"]
    for dp, seg in ((8, None), (32, "4")):
        p = run_cli("plan", "example:gb200-tray", "--cluster", str(AZURE_BLOCKS), "--tp", "4", "--dp", str(dp), "--pp", "1",
                    "--emit", "slurm")
        assert p.code == 0, p.stderr
        assert "--switches" not in p.stdout
        got = re.findall(r"#SBATCH --segment=(\d+)", p.stdout)
        assert got == ([seg] if seg else []), p.stdout[:600]


def test_tree_input_keeps_switches():
    p = run_cli("plan", "example:hgx-h100", "--cluster", str(EDR), "--tp", "8", "--dp", "4", "--pp", "2", "--emit", "slurm")
    assert p.code == 0 and "#SBATCH --switches=1" in p.stdout and "--segment" not in p.stdout


def test_emit_slurm_tree_reads_back_as_the_fabric():
    r = run_cli("fabric", str(EDR), "--emit", "slurm")
    assert r.code == 0
    tree = parse_topology_conf(r.stdout)
    assert tree.roots() == ["S-ec0d9a0300ec81e0"] and len(tree.leaves()) == 4 and len(tree.node_leaf) == 96
    assert tree.level_between("gpu001", "node001") == 1 and tree.level_between("gpu001", "gpu021") == 2
    assert "# S-ec0d9a0300ec81e0: 2 spine switches: S-ec0d9a0300ec81e0, S-ec0d9a0300ec8200" in r.stdout


def test_nvlink_domains_give_blocks_yaml_and_kueue():
    y = run_cli("fabric", str(EDR), "--nvlink-domain", "8", "--emit", "slurm-yaml")
    assert y.code == 0
    topos = yaml.safe_load(y.stdout)
    assert [t["topology"] for t in topos] == ["fabric", "nvlink"]
    assert topos[1]["cluster_default"] is True and topos[0]["cluster_default"] is False
    assert topos[1]["block"]["block_sizes"] == [8] and len(topos[1]["block"]["blocks"]) == 12
    assert topos[0]["tree"]["switches"][0] == {"switch": "S-ec0d9a0300ec81e0", "children":
                                               "S-ec0d9a0300ec8240,S-ec0d9a0300ec8480,S-ec0d9a0300f548c0,S-ec0d9a0300f548e0"}
    bad = run_cli("fabric", str(EDR), "--nvlink-domain", "8", "--block-sizes", "8,24", "--emit", "slurm-block")
    assert bad.code == 1 and "power of two" in bad.stderr
    k = run_cli("fabric", str(EDR), "--nvlink-domain", "8", "--emit", "kueue", "--format", "json")
    assert k.code == 0
    kd = k.json()
    levels = [lvl["nodeLabel"] for lvl in kd["topology"]["spec"]["levels"]]
    # a domain of 8 consecutive hosts can straddle two leaves: the leaf level is dropped, the domain kept
    assert levels[-1] == "kubernetes.io/hostname" and "feature.node.kubernetes.io/gpucomm-nvlink.domain" in levels
    assert len(set(levels)) == len(levels) <= 16
    ky = run_cli("fabric", str(EDR), "--emit", "kueue")
    docs = list(yaml.safe_load_all(ky.stdout))
    assert docs[0]["kind"] == "Topology" and [d["kind"] for d in docs[1:]] == ["NodeFeature"] * 96
    assert [lvl["nodeLabel"] for lvl in docs[0]["spec"]["levels"]] == [
        "feature.node.kubernetes.io/gpucomm-fabric.spine", "feature.node.kubernetes.io/gpucomm-fabric.leaf",
        "kubernetes.io/hostname"]
    nf = {d["metadata"]["labels"]["nfd.node.kubernetes.io/node-name"]: d["spec"]["labels"] for d in docs[1:]}
    assert nf["gpu001"] == {"gpucomm-fabric.spine": "S-ec0d9a0300ec81e0", "gpucomm-fabric.leaf": "S-ec0d9a0300ec8240"}


def test_emit_cluster_feeds_plan_and_select(tmp_path):
    c = run_cli("fabric", str(EDR), "--emit", "cluster", "--node", "example:hgx-h100")
    assert c.code == 0
    f = tmp_path / "c.yaml"
    f.write_text(c.stdout)
    p = run_cli("plan", "--cluster", str(f), "--tp", "8", "--dp", "8", "--pp", "4", "--format", "json")
    assert p.code == 0, p.stderr
    plan = p.json()
    assert plan["traffic"]["leaf_uplinks"] and any("oversubscribed" in w for w in plan["warnings"])
    s = run_cli("select", "--nodes", "24", "--cluster", str(f), "--format", "json").json()
    assert s["span"]["within"] == "leaf" and not s["crosses_spine"] and s["cost"] is None
    s = run_cli("select", "--nodes", "30", "--cluster", str(f), "--format", "json").json()
    assert s["crosses_spine"] and len(s["span"]["leaves"]) == 2 and "2.14:1" in s["cost"]["text"]
    assert s["cost"]["uplink_share"] == pytest.approx(1120 / 2400, abs=1e-3)
    s = run_cli("select", "--nodes", "3", "--cluster", str(f), "--free", "gpu[021-023],node001", "--format", "list")
    assert s.stdout.strip() == "gpu[021-023]"
    none = run_cli("select", "--nodes", "5", "--cluster", str(f), "--free", "gpu[021-023]")
    assert none.code == 4 and "only 3" in none.stderr


def test_predict_on_the_cluster_sees_the_leaf_uplinks():
    one = run_cli("predict", "example:hgx-h100", "--cluster", str(EDR), "--nodes", "24", "--format", "json")
    two = run_cli("predict", "example:hgx-h100", "--cluster", str(EDR), "--nodes", "30", "--format", "json")
    assert one.code == 0 and two.code == 0, (one.stderr, two.stderr)
    a, b = one.json(), two.json()
    from test_schemas import validate

    validate(b)
    assert "within leaf" in a["cluster"] and "oversubscribed" in b["cluster"]
    assert a["fabric_gbps"] == 100.0 and b["fabric_gbps"] == pytest.approx(100 * 1120 / 2400, abs=0.1)
    assert b["rows"][0]["busbw_GBps"] < 0.6 * a["rows"][0]["busbw_GBps"]


def test_cluster_join_domains_health_and_plan(tmp_path):
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    tray = run_cli("probe", "example:gb200-tray", "--format", "json").json()
    bad = run_cli("probe", "example:hgx-h100-degraded", "--format", "json").json()
    for i in range(1, 9):   # two racks of four trays: cluster UUIDs tell them apart
        d = json.loads(json.dumps(tray))
        d["host"]["hostname"] = f"gpu{i:03d}"
        for g in d["gpus"]:
            g["fabric"]["cluster_uuid"] = "11111111-aaaa" if i <= 4 else "22222222-bbbb"
        (nodes / f"gpu{i:03d}.json").write_text(json.dumps(d))
    (nodes / "gpu009.json").write_text(json.dumps(bad))
    (nodes / "stray.json").write_text(json.dumps(tray))      # not in the fabric: left out, named
    out = tmp_path / "cluster.json"
    r = run_cli("cluster", str(nodes), "--fabric", str(EDR), "-o", str(out))
    assert r.code == 0, r.stderr
    assert "1 node(s) the fabric does not have" in r.stderr
    doc = json.loads(out.read_text())
    from test_schemas import validate

    validate(doc)
    validate(doc["fabric"]["document"])
    assert doc["summary"]["nodes"] == 9 and doc["summary"]["classes"] == 2 and doc["summary"]["unhealthy"] == 1
    assert doc["summary"]["nvlink_domains"] == 2
    blocks = doc["fabric"]["document"]["blocks"]
    assert [b["nodes"] for b in blocks] == [[f"gpu{i:03d}" for i in range(1, 5)], [f"gpu{i:03d}" for i in range(5, 9)]]
    s = run_cli("select", "--nodes", "4", "--cluster", str(out), "--format", "json").json()
    assert s["span"]["within"] == "nvlink-domain" and s["nodes"] == ["gpu001", "gpu002", "gpu003", "gpu004"]
    s = run_cli("select", "--nodes", "9", "--cluster", str(out))
    assert s.code == 4 and "1 unhealthy" in s.stderr
    p = run_cli("plan", "--cluster", str(out), "--tp", "4", "--dp", "8", "--pp", "1", "--emit", "slurm")
    assert p.code == 0, p.stderr
    assert "#SBATCH --segment=4" in p.stdout and "--switches" not in p.stdout and "gpu009" not in p.stdout
    assert run_cli("fabric", str(out), "--emit", "slurm").stdout.count("BlockName=") == 2


def test_synth_writes_ibnetdiscover_that_reads_back_as_its_topology_conf(tmp_path):
    r = run_cli("synth", "example:hgx-h100", "-N", "40", "--nodes-per-leaf", "8", "--leaves-per-spine", "2",
                "--out-dir", str(tmp_path))
    assert r.code == 0, r.stderr
    conf = parse_topology_conf((tmp_path / "topology.conf").read_text())
    doc = load_fabric(str(tmp_path / "ibnetdiscover.out"))
    assert not [f for f in doc["findings"] if f["severity"] != "info"]
    back = parse_topology_conf(run_cli("fabric", str(tmp_path / "ibnetdiscover.out"), "--emit", "slurm").stdout)
    assert back.roots() == conf.roots() == ["core"]
    assert back.node_leaf == conf.node_leaf
    assert {k: sorted(v.switches) for k, v in back.switches.items()} == {k: sorted(v.switches) for k, v in conf.switches.items()}


def test_synth_over_a_real_fabric(tmp_path):
    r = run_cli("synth", "example:hgx-h100", "--fabric", str(EDR), "--out-dir", str(tmp_path / "c"), "--format", "json")
    assert r.code == 0, r.stderr
    assert r.json()["nodes"] == 96 and not (tmp_path / "c" / "ibnetdiscover.out").exists()
    assert parse_topology_conf((tmp_path / "c" / "topology.conf").read_text()).roots() == ["S-ec0d9a0300ec81e0"]
    p = run_cli("plan", "--cluster", str(tmp_path / "c" / "cluster.yaml"), "--tp", "8", "--dp", "2", "--pp", "1",
                "--emit", "slurm")
    assert p.code == 0 and "#SBATCH --nodelist=gpu[001-002]" in p.stdout, p.stderr
    both = run_cli("synth", "example:hgx-h100", "--fabric", str(EDR), "-N", "4")
    assert both.code == 2


# --------------------------------------------------------------------------------------------
# Bad input, and properties of the readers
@pytest.mark.parametrize("text,words", [
    ("", "empty"), ("hello\nworld\n", "unrecognised content"),
    ("SwitchName=s1 Nodes=a[1-2]\nSwitchName=s1 Nodes=b1\n", "defined twice"),
    ('{"schema": "gpucomm.fabric/v1", "hosts": [{"name": "a b"}]}', "hosts[0].name"),
    ('{"schema": "gpucomm.fabric/v1", "tree": [{"name": "x", "switches": ["nope"], "nodes": []}]}', "unknown switch"),
])
def test_bad_fabric_files_exit_1_with_one_line(tmp_path, text, words):
    f = tmp_path / "f.txt"
    f.write_text(text)
    r = run_cli("fabric", str(f))
    assert r.code == 1 and len(r.stderr.strip().splitlines()) == 1 and words in r.stderr and str(f) in r.stderr, r.stderr


@st.composite
def fabrics(draw):
    """A random two-level fabric as plain records: leaves with hosts (1-2 HCAs, on distinct leaves),
    spines joined to every leaf, speeds from IBTA's list."""
    n_leaf = draw(st.integers(1, 5))
    n_spine = draw(st.integers(0, 3))
    speed = draw(st.sampled_from(["QDR", "FDR", "EDR", "HDR", "NDR"]))
    switches = [{"id": f"S-{i + 1:016x}", "description": f"MF0;leaf{i + 1}:MQM/U1", "lid": i + 1, "ports": 64}
                for i in range(n_leaf)]
    switches += [{"id": f"S-{0x100 + i:016x}", "description": f"MF0;spine{i + 1}:MQM/U1", "lid": 100 + i, "ports": 64}
                 for i in range(n_spine)]
    cas, links, port = [], [], {}

    def link(a, b, sp=speed):
        port[a], port[b] = port.get(a, 0) + 1, port.get(b, 0) + 1
        links.append({"a": a, "a_port": port[a], "b": b, "b_port": port[b], "width": "4x", "speed": sp})

    hosts = draw(st.integers(1, 12))
    for h in range(hosts):
        for k in range(draw(st.integers(1, min(2, n_leaf)))):
            cid = f"H-{0x10000 + h * 4 + k:016x}"
            cas.append({"id": cid, "description": f"host{h:02d} mlx5_{k}", "lid": 1000 + h * 4 + k, "ports": 1})
            link(cid, switches[(h + k) % n_leaf]["id"])
    for i in range(n_leaf):
        for j in range(n_spine):
            link(switches[i]["id"], switches[n_leaf + j]["id"])
    return switches, cas, links, hosts


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(fabrics())
def test_ibnetdiscover_writer_and_reader_round_trip(fab):
    switches, cas, links, hosts = fab
    text = ibnet.write_ibnetdiscover(switches, cas, links)
    raw = ibnet.parse_ib_text(text, "synthetic")
    assert len(raw["links"]) == len(links)
    assert {n["id"] for n in raw["nodes"]} == {n["id"] for n in switches + cas}
    doc = build_fabric(raw, "synthetic")
    assert len(doc["hosts"]) == hosts
    assert not [f for f in doc["findings"] if f["rule"] == "ib-link-downtrained"]
    assert {s["role"] for s in doc["switches"] if s["hosts"]} == {"leaf"}
    assert {s["role"] for s in doc["switches"] if "spine" in s["name"]} <= {"spine", "unreached"}
    # every host under exactly one tree leaf, whatever its rails
    tree = [t for t in doc["tree"] if t["level"] == 1]
    assert sorted(n for t in tree for n in t["nodes"]) == sorted(f"host{h:02d}" for h in range(hosts))


_IB_WORDS = st.sampled_from(['Switch\t36 "S-ec0d9a0300ec8240"\t\t# "SwitchIB" lid 48', 'Ca\t1 "H-506b4b03003fa9b6"\t\t# "n1 HCA-1"',
                             '[1]\t"H-506b4b03003fa9b6"[1](506b4b03003fa9b6)\t\t# "n1 HCA-1" lid 67 4xEDR',
                             '[1](506b4b03003fa9b6) \t"S-ec0d9a0300ec8240"[36]\t\t# lid 83 lmc 0 "x" lid 48 4xEDR',
                             "CA   134  1 0x7cfe9003003b4bde 4x EDR - SW  1719 10 0x7cfe9003009ce5b0 ( 'o0001 HCA-1' - 'sw' )",
                             "Switch: 0x08c0eb0300add04e Quantum:", "          10   21[  ] ==( 4X 25.78125 Gbps Active/  LinkUp)==>      40    1[  ] \"n3 HCA-2\" ( Could be 53.125 Gbps)",
                             'Switch  : 0x08c0eb0300add04e ports 41 "Q" base port 0 lid 10 lmc 0', "", "#", "junk ==( 4X )==>"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_IB_WORDS, st.text(max_size=60)), max_size=30))
def test_any_text_reads_or_fails_with_an_input_error(lines):
    text = "\n".join(lines)
    try:
        doc = fabric_from_text(text, "fuzz")
    except InputError as e:
        assert "\n" not in str(e)
        return
    json.dumps(doc)       # a plain, serialisable document


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["SwitchName", "BlockName", "BlockSizes", "Nodes", "Switches", "LinkSpeed", "Level",
                                           "BlockIndex", "AggregatedBlock"]),
                          st.text(alphabet="ab01[]-,=. ", max_size=12)), max_size=8))
def test_slurm_topology_reader_never_crashes(pairs):
    text = "\n".join(f"{k}={v}" for k, v in pairs)
    try:
        slurm_topology.read_topology_conf(text, "t.conf")
    except InputError as e:
        assert "\n" not in str(e)


def test_plan_model_estimate_uses_the_leaf_uplinks_share():
    """plan --cluster --model times the network at what each NIC gets on the fabric (as predict
    --cluster does): 40 nodes span the EDR cluster's 2.14:1 leaves and its 100 Gb/s host links, so the
    best step is slower than on the node's own 400 Gb/s NICs, and the plan says why."""
    edr = str(next((CAPTURES / "ib-fabric").glob("006_*.txt")))
    args = ["plan", "example:hgx-h100", "--nodes", "40", "--model", "llama-8b", "--format", "json"]
    own = run_cli(*args)
    fab = run_cli(*args, "--cluster", edr)
    assert own.code == 0 and fab.code == 0, fab.stderr
    assert fab.json()["estimate"]["step_time_s"] > own.json()["estimate"]["step_time_s"]
    assert any("oversubscribed: each NIC gets ~46.7 Gb/s" in w and "--model estimate" in w
               for w in fab.json()["warnings"])


def test_plan_model_orders_the_hosts_its_network_rate_came_from(tmp_path):
    """The hosts plan --cluster lays out are those select --nodes picks, whose leaves set the rate the
    --model estimate times the network at (one choice of nodes, not two): 6 nodes fit leaf2 whole, where
    the switch-tree order alone took 3 of leaf1 and 3 of leaf2."""
    from gpucomm.planners.placement.cluster import load_cluster
    from gpucomm.planners.placement.select import select_nodes

    conf = tmp_path / "topology.conf"
    conf.write_text("SwitchName=leaf1 Nodes=n[01-04]\nSwitchName=leaf2 Nodes=n[05-12]\n"
                    "SwitchName=leaf3 Nodes=n[13-20]\nSwitchName=spine Switches=leaf[1-3]\n")
    for n, model in ((4, ["--model", "llama-8b"]), (6, ["--model", "llama-8b"]), (8, []), (6, ["--tp", "8"])):
        r = run_cli("plan", "example:hgx-h100", "--nodes", str(n), *model, "--cluster", str(conf),
                    "--format", "json")
        assert r.code == 0, r.stderr
        picked = select_nodes(load_cluster(str(conf), default_topology="example:hgx-h100"), n)["nodes"]
        assert sorted(r.json()["hosts"]) == sorted(picked)
        assert r.json()["traffic"]["leaf_switches"] == 1
