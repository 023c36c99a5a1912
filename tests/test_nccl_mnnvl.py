"""NCCL's multi-node NVLink (MNNVL) in our model of NCCL: the clique formation of init.cc/mnnvl.cc
(planners/nccl/mnnvl.py), the fused system of a clique's hosts, the consumers' API
(``nccl_comm(..., nvlink_domain=K)``), and the answers against ncclsim's MNNVL goldens
(fixtures/ncclsim/goldens.json, group ``mnnvl``: trays of fixtures/ncclsim/trays in cliques of 1-18 hosts,
racks joined by NICs, NVL36x2, NCCL_MNNVL_* settings), written by tools/ncclsim_goldens.py with the harness
of tools/ncclsim."""
from __future__ import annotations

import json
import shutil
import subprocess
from functools import lru_cache

import pytest
from hypothesis import given, settings, strategies as st

from gpucomm.planners.nccl import judge, mnnvl
from gpucomm.planners.nccl import ncclxml as X
from gpucomm.planners.nccl.comm import nccl_comm
from gpucomm.planners.nccl.settings import NcclSettings
from gpucomm.probes.errors import InputError
from support import FIXTURES, ROOT

NCCLSIM = FIXTURES / "ncclsim"
TRAYS = NCCLSIM / "trays"
NCCL_SRC = ROOT.parent / "shared" / "tools" / "ncclsim" / "nccl"


@lru_cache(maxsize=1)
def mnnvl_goldens() -> list:
    return [c for c in json.loads((NCCLSIM / "goldens.json").read_text())["cases"] if c["group"] == "mnnvl"]


def _tool():
    from support import load_script

    return load_script(ROOT / "tools" / "ncclsim_goldens.py", "ncclsim_goldens")


# ---------------------------------------------------------------------------------------------------
# clique formation
def test_a_clique_of_hosts_forms_as_ncclmnnvlcheck_says():
    s = NcclSettings()
    two = mnnvl.grouped(2, 4, 2)
    c = mnnvl.check(two, 4, 8, 0, s)
    assert (c.mnnvl, c.ranks, c.domain_size) == (1, tuple(range(8)), 8)
    assert mnnvl.check(two, 4, 8, 5, s).rank_in_clique == 5
    # racks: every group of 2 hosts its own domain and clique
    racks = mnnvl.grouped(4, 4, 2)
    assert mnnvl.check(racks, 4, 16, 8, s).ranks == tuple(range(8, 16))
    # NVL36x2: two cliques of 9 trays in one domain of 18
    nvl36 = mnnvl.grouped(18, 4, 9, 18)
    c = mnnvl.check(nvl36, 4, 72, 0, s)
    assert (len(c.ranks), c.domain_size) == (36, 72)
    # one host: only with NCCL_MNNVL_ENABLE=1 (the gate wants several hosts otherwise)
    one = mnnvl.grouped(1, 4, 1)
    assert mnnvl.check(one, 4, 4, 0, s).mnnvl == 0
    assert mnnvl.check(one, 4, 4, 0, s.replace(mnnvl_enable=1)).ranks == (0, 1, 2, 3)


def test_what_turns_mnnvl_off():
    s = NcclSettings()
    two = mnnvl.grouped(2, 4, 2)
    for off in (s.replace(mnnvl_enable=0), s.replace(p2p_level=0), s.replace(cumem_enable=0)):
        assert mnnvl.check(two, 4, 8, 0, off).mnnvl == 0
    assert mnnvl.check(mnnvl.grouped(2, 4, 2, state=mnnvl.STATE_NAMES["in_progress"]), 4, 8, 0, s).mnnvl == 0
    assert mnnvl.check(mnnvl.none(2, 4), 4, 8, 0, s).mnnvl == 0
    # one GPU of the second host still registering: nobody runs MNNVL
    hosts = list(two.hosts)
    hosts[1] = hosts[1][:3] + (mnnvl.GpuFabric(hosts[1][3].uuid, hosts[1][3].clique, 2),)
    assert mnnvl.check(mnnvl.Fabric(tuple(hosts)), 4, 8, 0, s).mnnvl == 0


def test_the_uuid_and_clique_overrides():
    s = NcclSettings()
    racks = mnnvl.grouped(4, 4, 2)
    # NCCL_MNNVL_UUID gives every GPU one cluster UUID: the racks' cliques (same id) become one
    assert len(mnnvl.check(racks, 4, 16, 0, s.replace(mnnvl_uuid=7)).ranks) == 16
    nvl36 = mnnvl.grouped(18, 4, 9, 18)
    # NCCL_MNNVL_CLIQUE_ID gives every GPU one clique id: the domain's two cliques become one
    assert len(mnnvl.check(nvl36, 4, 72, 0, s.replace(mnnvl_clique_id=5)).ranks) == 72


def test_fabric_records_of_a_document():
    rec = {"cluster_uuid": "6f3c2a51-9d0e-4b7a-8c1f-2e5d7a9b0c4d", "clique_id": 32766, "state": "completed"}
    f = mnnvl.gpu_fabric(rec)
    assert f is not None and f.clique == 32766 and f.state == mnnvl.COMPLETED and f.uuid != 0
    assert mnnvl.gpu_fabric({"state": "in_progress"}).state == 2
    for bad in (None, [], {"state": None}, {"state": "done"}, {"state": 3, "cluster_uuid": "not-a-uuid"}):
        assert mnnvl.gpu_fabric(bad) is None


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["cluster_uuid", "clique_id", "state", "status", "x"]),
                       st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40), st.text(max_size=40),
                                 st.uuids().map(str), st.sampled_from(sorted(mnnvl.STATE_NAMES)))))
def test_fabric_records_never_raise(rec):
    f = mnnvl.gpu_fabric(rec)
    if f is not None:
        assert 0 <= f.clique < 2**32 and 0 <= f.state <= 255 and f.uuid >= 0


# ---------------------------------------------------------------------------------------------------
# the fused XML of a clique
@pytest.mark.parametrize("tray", ["gb200-tray.xml", "gb300-tray.xml", "gh200-node.xml"])
def test_hosts_fuse_as_their_ranks_xmls_do(tray):
    """replicate_hosts gives the fusion of every rank's XML of a clique of 3 hosts (what NCCL fuses),
    from the first host's alone."""
    text = (TRAYS / tray).read_text()
    s = NcclSettings()

    def fused(ranks: int, per_host: int) -> X.Xml:
        xml = X.parse(text)
        m = X.Machine(xml)
        copies = X.RankCopies(xml, m)
        out = []
        for r in range(ranks):
            bus = X.int_to_bus(X.bus_to_int(m.gpus[r % per_host].bus))
            x = copies.copy_for(bus)
            rx = X.RankXml(x, m, {"affinity": "", "arch": "x86_64"}, s.merge_level, s.force_merge, host=r // per_host)
            rx.fill_gpu(bus, r)
            rx.process_net()
            rx.trim()
            out.append(x)
        return X.fuse(out)

    g = len(X.Machine(X.parse(text)).gpus)
    assert X.dumps(fused(3 * g, g)) == X.dumps(X.replicate_hosts(fused(g, g), 3, g))
    assert X.dumps(fused(3 * g, g)).count("<cpu ") == 3 * text.count("<cpu ")


# ---------------------------------------------------------------------------------------------------
# the API
def test_nvlink_domain_of_the_consumers():
    tray = (TRAYS / "gb200-tray.xml").read_text()
    two = nccl_comm(tray, nodes=2, nvlink_domain=2)
    assert (two.mnnvl, two.clique_size, two.n_nodes, two.n_ranks) == (1, 8, 1, 8)
    ring = two.graphs["ring"]
    assert (ring.n_channels, ring.bw_intra) == (16, 45.0)        # 720 GB/s over NVLink, as NCCL's dump shows
    apart = nccl_comm(tray, nodes=2)                            # an XML records no fabric: one system per node
    assert (apart.mnnvl, apart.n_nodes) == (0, 2)
    racks = nccl_comm(tray, nodes=4, nvlink_domain=2)
    assert (racks.clique_size, racks.n_nodes) == (8, 2)
    with pytest.raises(InputError):
        nccl_comm(tray, nodes=3, nvlink_domain=2)


def test_a_documents_fabric_info_is_the_default(tmp_path):
    """Every node is a copy of the document's, fabric info included: its GPUs' recorded clique is every
    node's, unless --nvlink-domain says otherwise."""
    from gpucomm.probes.load import load_topology

    doc = load_topology("example:gb200-tray")
    assert all(g.get("fabric") for g in doc["gpus"])
    same = nccl_comm(doc, nodes=2)
    assert (same.mnnvl, same.clique_size, same.n_nodes) == (1, 8, 1)
    split = nccl_comm(doc, nodes=2, nvlink_domain=1)
    assert split.n_nodes == 2
    off = nccl_comm(doc, nodes=2, settings=NcclSettings(mnnvl_enable=0))
    assert (off.mnnvl, off.n_nodes) == (0, 2)
    # a tray whose IMEX capture names an NVLink domain of 18 nodes: no clique larger than that
    rack = load_topology("example:gb200-nvl72")
    assert rack["gpus"][0].get("fabric")
    two = nccl_comm(rack, nodes=36)
    assert (two.clique_size, two.n_nodes) == (72, 2)
    assert nccl_comm(rack, nodes=20).clique_size == 40          # 2 domains of 10 trays: the largest equal split


def test_nccls_fused_dump_is_one_clique():
    """NCCL's fused topology dump of 2 GB300 trays (captures/nvl72/c01, constructed from the real log 014):
    a document of 2 hosts; NCCL fused them, so they were one clique -- 8 ranks, 16 x 45 GB/s over NVLink
    (the issue's 720 GB/s), one NCCL node, rings over the 8 GPUs."""
    from gpucomm.probes.load import load_topology

    doc = load_topology(str(FIXTURES / "captures" / "nvl72" /
                            "c01_gb300-nvl72_2trays-8gpu_fused-topo-dump_CONSTRUCTED.xml"))
    res = nccl_comm(doc)
    ring = res.graphs["ring"]
    assert (res.mnnvl, res.clique_size, res.n_nodes, res.n_ranks) == (1, 8, 1, 8)
    assert (ring.n_channels, ring.bw_intra, res.n_channels) == (16, 45.0, 32)
    assert res.rings[0] == list(range(8))
    two = nccl_comm(doc, nodes=2)          # two copies of the dump's pair of trays: two cliques
    assert (two.n_ranks, two.n_nodes, two.clique_size) == (16, 2, 8)


def test_to_ncclsim_names_the_hosts():
    tray = (TRAYS / "gb300-tray.xml").read_text()
    res = nccl_comm(tray, nodes=2, nvlink_domain=2)
    js = res.to_ncclsim()
    assert js["mnnvl"] == {"MNNVL": 1, "cliqueId": res.clique_id, "cliqueSize": 8, "nvlDomainSize": 8, "hosts": 2}
    assert [g["host"] for g in js["gpus"]] == [0] * 4 + [1] * 4
    assert {n["name"] for n in js["nets"]} >= {"mlx5_0@0", "mlx5_0@1"}


# ---------------------------------------------------------------------------------------------------
# against NCCL itself
def test_the_mnnvl_goldens_cover_the_brief():
    cs = mnnvl_goldens()
    assert len(cs) >= 100
    tool = _tool()
    assert [tool.case_id(c) for c in cs] == [tool.case_id(c) for c in tool.mnnvl_cases()]
    for name, text in tool.mnnvl_machines():
        assert (NCCLSIM / "mnnvl" / f"{name}.xml").read_text() == text
    one = {c["golden"]["mnnvl"][3] for c in cs if "error" not in c["golden"] and c["golden"].get("mnnvl")
           and c["golden"]["comm"]["nNodes"] == 1}
    assert one >= {1, 2, 4, 8, 18}                  # trays in one clique
    racks = [c for c in cs if c["golden"].get("mnnvl") and c["golden"]["comm"]["nNodes"] > 1]
    assert len(racks) >= 20                         # cliques joined by NICs
    assert any(c["golden"]["mnnvl"][1] * 2 == c["golden"]["mnnvl"][2] for c in racks)       # NVL36x2
    assert any((c.get("env") or {}).get("NCCL_MNNVL_ENABLE") == "0" for c in cs)


def _agree(cases: list) -> list:
    diffs = []
    for c in cases:
        model = judge.model_case((NCCLSIM / c["xml"]).read_text(), c)
        case, sizes = judge.compare_case(c["golden"], model)
        bad = judge.differing(case, sizes)
        if bad:
            diffs.append((_tool().case_id(c), bad))
    return diffs


def test_model_equals_ncclsim_on_mnnvl_cliques():
    """Every field, on the cases within one clique of up to 8 trays and a few across cliques (fast)."""
    cs = [c for c in mnnvl_goldens() if c["nodes"] <= 8 and (c["golden"].get("comm") or {}).get("nNodes", 1) == 1]
    cs += [c for c in mnnvl_goldens() if c["xml"].endswith("gh200.xml") and c["nodes"] == 4][:2]
    assert len(cs) >= 30
    assert not _agree(cs)


@pytest.mark.slow
def test_model_equals_ncclsim_on_every_mnnvl_case():
    assert not _agree(mnnvl_goldens())


@pytest.mark.slow
def test_the_harness_shares_rank_0s_system_only_where_every_rank_would_build_it(tmp_path):
    """tools/ncclsim's ranks of a clique take over rank 0's paths and graphs where their fresh system is
    rank 0's; --mnnvl-full has every rank build and search its own: the same answers."""
    if shutil.which("g++") is None or not (NCCL_SRC / "src").is_dir():
        pytest.skip("needs g++ and NCCL's sources (../shared/tools/ncclsim/nccl)")
    binary = tmp_path / "ncclsim"
    subprocess.run(["bash", str(ROOT / "tools" / "ncclsim" / "build.sh"), str(NCCL_SRC), str(binary)], check=True,
                   capture_output=True, timeout=1200)
    xml = tmp_path / "tray.xml"
    xml.write_text(_tool().native_build_xml((TRAYS / "gb200-tray.xml").read_text()))
    outs = []
    for full in ([], ["--mnnvl-full"]):
        p = subprocess.run([str(binary), "--json", "--nodes", "4", "--mnnvl-clique", "2", *full, str(xml)],
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-500:]
        outs.append(json.loads(p.stdout))
    assert outs[0] == outs[1]
    assert outs[0]["mnnvl"]["cliqueSize"] == 8 and outs[0]["comm"]["nNodes"] == 2
