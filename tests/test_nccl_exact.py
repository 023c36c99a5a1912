"""Our model of NCCL against NCCL itself: the goldens of fixtures/ncclsim/goldens.json were written by
tools/ncclsim_goldens.py from ncclsim (NCCL 2.30.7's own topology, path, search and tuning sources run
on a CPU) over the generated corpus, the NCCL XMLs of fixtures/captures/ncclxml and the bundled
examples.  The fast test compares a fixed sample of cases field by field and prints the agreement
table (``pytest -s``); the slow tests compare every case and check the goldens are current by
rebuilding ncclsim (skipped without g++ or the NCCL sources)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from functools import lru_cache

import pytest

from gpucomm.planners.nccl import judge
from support import FIXTURES, ROOT

NCCLSIM = FIXTURES / "ncclsim"
NCCLSIM_SRC = ROOT.parent / "shared" / "tools" / "ncclsim"


@lru_cache(maxsize=1)
def goldens() -> list:
    return json.loads((NCCLSIM / "goldens.json").read_text())["cases"]


def _tool():
    from support import load_script

    return load_script(ROOT / "tools" / "ncclsim_goldens.py", "ncclsim_goldens")


def _run(cases: list) -> tuple[list, list]:
    results, diffs = [], []
    for c in cases:
        model = judge.model_case((NCCLSIM / c["xml"]).read_text(), c)
        case, sizes = judge.compare_case(c["golden"], model)
        results.append((case, sizes))
        bad = judge.differing(case, sizes)
        if bad:
            diffs.append((_tool().case_id(c), bad))
    return results, diffs


def _print(title: str, results: list, diffs: list) -> list:
    rows = judge.agreement(results)
    print()
    print(judge.format_table(rows, f"{title}: {len(results)} cases"))
    for cid, bad in diffs[:40]:
        print(f"  differs {cid}: {', '.join(bad)}")
    return rows


def _pct(rows: list, field: str) -> float:
    return next(p for k, _a, _n, p in rows if k == field)


# The fast sample: three NCCL XMLs of real machines (fixtures) at 1 and 2 nodes and every 90th corpus
# case -- small enough for the fast suite; the slow test compares all.
def _sample() -> list:
    cs = goldens()
    fixtures = [c for c in cs if c["group"] == "fixtures" and "error" not in c["golden"]
                and any(k in c["xml"] for k in ("p4d-24xl", "ndv4", "oci-H100-topology.xml"))]
    corpus = [c for c in cs if c["group"] == "corpus"][::90]
    return fixtures + corpus


def test_goldens_cover_the_corpus():
    """The goldens hold the corpus the generator writes (>= 300 machines, 1 and 2+ nodes) with every
    field compared, and the stored XMLs are the generator's."""
    cs = goldens()
    tool = _tool()
    machines = tool.corpus()
    assert len(machines) >= 300
    names = {f"corpus/{name}.xml" for name, _t, _c in machines}
    assert names == {c["xml"] for c in cs if c["group"] == "corpus"}
    for name, text, _cases in machines[:25]:
        assert (NCCLSIM / "corpus" / f"{name}.xml").read_text() == text
    assert {c["nodes"] for c in cs} >= {1, 2}
    ok = [c["golden"] for c in cs if "error" not in c["golden"]]
    assert len(ok) >= 0.9 * len(cs)
    g = ok[0]
    assert len(g["all_reduce"]) == len(judge.SIZES) == len(g["all_gather"]) == len(g["reduce_scatter"])


def test_model_equals_ncclsim_on_a_sample():
    """Field by field on the sample; the agreement table is printed (pytest -s)."""
    results, diffs = _run(_sample())
    rows = _print("model vs ncclsim (sample)", results, diffs)
    for field in ("paths GPU-GPU", "paths GPU-NIC", "ring channels", "ring total bw", "tree channels",
                  "NCCL nodes", "channels after setup"):
        assert _pct(rows, field) >= 90.0, field
    assert _pct(rows, "all_reduce algo/proto") >= 90.0


def test_compare_notices_a_difference():
    """The judge is not blind: a golden with one changed channel count, path bandwidth or algorithm differs."""
    c = next(c for c in goldens() if "error" not in c["golden"] and c["golden"]["ring"] and c["golden"]["gpu_gpu"])
    g = c["golden"]
    same_case, same_sizes = judge.compare(g, g)
    assert all(same_case.values()) and all(all(v) for v in same_sizes.values())
    bad = json.loads(json.dumps(g))
    bad["ring"]["n"] += 1
    bad["gpu_gpu"][0][3] = bad["gpu_gpu"][0][3] * 1.5 + 1
    bad["all_reduce"][5][1] = "PAT" if bad["all_reduce"][5][1] != "PAT" else "Ring"
    case, sizes = judge.compare(g, bad)
    assert not case["ring channels"] and not case["ring total bw"] and not case["paths GPU-GPU"]
    assert sizes["all_reduce algo/proto"].count(False) == 1
    err_case, _ = judge.compare_case(g, {"error": "x"})
    assert not any(err_case.values())


def _predicted_choices_differ(cases: list, monkeypatch) -> tuple[int, list]:
    """(choices compared, the differing ones) of ``gpucomm predict``'s algorithm/protocol -- the cost
    model on the topology loaded from the case's XML, as a user's command builds it -- against NCCL's
    own (the golden's) for every size of all_reduce, all_gather and reduce_scatter."""
    from gpucomm.planners.collectives import cost
    from gpucomm.probes.errors import GpucommError
    from gpucomm.probes.load import load_topology

    total, bad = 0, []
    for c in cases:
        if "error" in c["golden"]:
            continue
        # MNNVL cases: the tray XML's nodes in cliques of K trays, as --nvlink-domain K says (two cliques in one
        # domain or a fabric state other than completed are beyond what K can say)
        m = c.get("mnnvl") or {}
        if m and (m.get("state") != 3 or m.get("clique") != m.get("domain")):
            continue
        domain = m.get("clique") if m else None
        for k in [k for k in __import__("os").environ if k.startswith("NCCL_")]:
            monkeypatch.delenv(k)
        for k, v in (c.get("env") or {}).items():
            monkeypatch.setenv(k, v)
        try:
            g = cost.summarize(load_topology(str(NCCLSIM / c["xml"])), nodes=c["nodes"], gpus=c.get("gpus"),
                               nvlink_domain=domain)
        except GpucommError:
            continue
        for coll in ("all_reduce", "all_gather", "reduce_scatter"):
            rows = c["golden"].get(coll) or []
            if not rows or g.n_ranks < 2:
                continue
            for r, p in zip(rows, cost.predict(g, coll, [r[0] for r in rows])):
                total += 1
                nccl = (r[1].lower().replace("nvlstree", "nvls_tree"), r[2])
                if nccl != (p["algorithm"], p["protocol"]):
                    bad.append((c["xml"], c["nodes"], coll, r[0], nccl, (p["algorithm"], p["protocol"])))
    return total, bad


def test_predict_chooses_as_ncclsim_on_a_sample(monkeypatch):
    """``gpucomm predict`` picks NCCL's algorithm and protocol -- the exact tuning model on the
    communicator its graphs came from -- for every size of a sample of golden cases."""
    total, bad = _predicted_choices_differ(goldens()[::29], monkeypatch)
    assert total > 1000 and not bad, bad[:5]


def test_predict_chooses_as_ncclsim_on_mnnvl_cliques(monkeypatch):
    """The same on a sample of the MNNVL goldens whose cliques --nvlink-domain K describes: trays fused into
    one system, several cliques joined by their NICs, NCCL_MNNVL_ENABLE=0."""
    cases = [c for c in goldens() if c.get("mnnvl")][::4]     # every one: the slow test below
    total, bad = _predicted_choices_differ(cases, monkeypatch)
    assert total > 1000 and not bad, bad[:5]


@pytest.mark.slow
def test_predict_chooses_as_ncclsim_on_every_case(monkeypatch):
    total, bad = _predicted_choices_differ(goldens(), monkeypatch)
    print(f"predict vs ncclsim: {total - len(bad)} of {total} choices agree")
    assert total > 50000 and not bad, bad[:5]


@pytest.mark.slow
def test_model_equals_ncclsim_on_every_case():
    """Every golden case (corpus, fixtures, examples): the issue's bars -- ring total bandwidth and
    channel count on >= 99% of (topology, nodes) cases, all_reduce algorithm/protocol on >= 97% of
    (topology, size) cases.  The table and the differing cases are printed."""
    results, diffs = _run(goldens())
    rows = _print("model vs ncclsim (all cases)", results, diffs)
    assert _pct(rows, "ring channels") >= 99.0
    assert _pct(rows, "ring total bw") >= 99.0
    assert _pct(rows, "all_reduce algo/proto") >= 97.0


@pytest.mark.slow
def test_goldens_are_current(tmp_path):
    """Rebuild ncclsim (NCCL's sources + the harness) and recompute a spread of the stored cases."""
    if shutil.which("g++") is None or not (NCCLSIM_SRC / "nccl" / "src").is_dir():
        pytest.skip("needs g++ and the NCCL sources of ncclsim (../shared/tools/ncclsim)")
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "ncclsim_goldens.py"), "--check", "--stride", "25"],
                       capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "goldens current" in p.stdout


def test_ncclsim_is_given_a_native_builds_view_of_non_x86_cpus():
    """ncclsim is NCCL built for x86_64: it would fill this build host's CPUID vendor/family into the
    arm64/ppc64 CPUs of each rank's own GPU only, and fuse duplicated CPUs and NICs.  The goldens runner
    pre-fills those attributes on non-x86 CPUs that lack them (what a native build does), nothing else."""
    tool = _tool()
    grace = (NCCLSIM / "corpus" / "m094-b200x8-nvswitch-grace2s-flat-g4-1x100g.xml").read_text()
    native = tool.native_build_xml(grace)
    assert native.count('vendor="native" familyid="0" modelid="0"') == grace.count("<cpu ") == 2
    assert tool.native_build_xml(native) == native
    x86 = (NCCLSIM / "corpus" / "m033-l40sx8-none-spr2s-sw2-g4-8x25g.xml").read_text()
    assert tool.native_build_xml(x86) == x86
    # the stored goldens of that Grace machine: one NET per NIC, as NCCL on a Grace host finds
    case = next(c for c in goldens() if c["xml"].endswith("m094-b200x8-nvswitch-grace2s-flat-g4-1x100g.xml")
                and c["nodes"] == 1)
    assert [n[1] for n in case["golden"]["nets"]] == ["mlx5_0"]


def test_stored_inputs_are_what_we_pin_now():
    """The XMLs ncclsim answered for the fixtures and bundled examples are the ones our pinning writes
    today (a change to the pinning without regenerating the goldens fails here, not silently)."""
    tool = _tool()
    stored = {c["xml"] for c in goldens() if c["group"] in ("fixtures", "examples")}
    fresh = {f"inputs/{name}.xml": text for name, text, _p in tool.fixture_inputs()}
    assert stored == set(fresh)
    stale = sorted(x for x in stored if (NCCLSIM / x).read_text() != fresh[x])
    assert not stale, f"regenerate the goldens (python tools/ncclsim_goldens.py): {stale}"


def test_node_system_splits_nodes_as_ncclsim():
    """Where NCCL splits a node into NIC-joined domains (nNodes per node > 1), the system our rings and
    paths read (sysview.node_system: the communicator's GPUs, NIC ports fused as NCCL fuses them, the
    case's NCCL_* settings) finds as many domains, on every golden case."""
    from gpucomm.planners.nccl.settings import NcclSettings
    from gpucomm.planners.nccl.sysview import node_system
    from gpucomm.probes.load import load_topology

    docs: dict = {}
    differ, split = [], 0
    for c in goldens():
        if "error" in c["golden"] or c.get("mnnvl"):     # our ring search knows no MNNVL cliques
            continue
        if c["xml"] not in docs:
            docs[c["xml"]] = load_topology(str(NCCLSIM / c["xml"]))
        s = NcclSettings.from_env(c.get("env") or {})
        ours = len(node_system(docs[c["xml"]], gpus=c.get("gpus"), settings=s).domains())
        nccl = c["golden"]["comm"]["nNodes"] // c["nodes"]
        split += nccl > 1
        if ours != nccl:
            differ.append((_tool().case_id(c), ours, nccl))
    assert split >= 20      # the corpus has split nodes to check
    assert not differ, differ


def test_widened_passes_end_as_the_rule_says(monkeypatch):
    """search._Widening gives a pass the outcome of its narrower twin that ran out of time (no time left,
    nothing kept) without searching it; the last pass of the second phase, whose time left nothing reads,
    is not searched where it can keep nothing; a first-phase pass stops once its best graph reaches the
    system's bandwidth and nothing later in it can be kept; within one node a pass whose twin of another
    crossNic just ran out of time is not searched where ties cannot win.  Here every such pass of the sample is searched
    anyway (CHECK_WIDENING) and must end as its rule says; on a multi-node H100 node and an NVSwitch domain
    at least, passes are covered."""
    from gpucomm.planners.nccl import search
    from support import nvswitch_document

    from gpucomm.planners.nccl.comm import nccl_reference

    from gpucomm.planners.nccl import comm

    monkeypatch.setattr(search, "CHECK_WIDENING", True)
    monkeypatch.setattr(search, "CHECKED_WIDENINGS", [])
    monkeypatch.setattr(search, "CHECKED_FINALS", [])
    monkeypatch.setattr(search, "CHECKED_DONE", [])
    monkeypatch.setattr(search, "CHECKED_TWINS", [])
    comm._RANK_STATES.clear()           # searched here, not taken from an earlier test's cache
    comm._run_cached.cache_clear()
    results, diffs = _run(_sample())
    assert not diffs, diffs[:3]
    n_sample = len(search.CHECKED_WIDENINGS)
    n_finals = len(search.CHECKED_FINALS)
    nccl_reference(nvswitch_document(24, 100, 18), nodes=1)
    assert len(search.CHECKED_WIDENINGS) > n_sample          # ring passes at lower speeds
    assert len(search.CHECKED_FINALS) > n_finals             # the tree's second phase at a higher speed
    n = len(search.CHECKED_WIDENINGS)
    nccl_reference(nvswitch_document(8, 90, 18, nics=8), nodes=2, gpus=[0, 2, 4, 6])
    assert len(search.CHECKED_WIDENINGS) > n
    # first-phase passes stopped once their best graph is unbeatable: searched on, nothing more was kept
    tool = _tool()
    stops = [c for c in goldens() if tool.case_id(c) in ("corpus/m003-a100x8-nvswitch-bdw1s-bcm-g4-8x200g.xml:n1",
                                                         "corpus/m012-a100x4-mesh4-icx2s-bcm-g4-1x25g.xml:n1")]
    assert len(stops) == 2
    results, diffs = _run(stops)
    assert not diffs, diffs[:3]
    assert len(search.CHECKED_DONE) >= 2, "no pass stopped early"
    # a crossNic twin of a pass that ran out of time within one node (an MNNVL clique of 8 trays): searched
    # anyway, it kept nothing and ran out too
    results, diffs = _run([c for c in goldens() if tool.case_id(c) == "mnnvl/gb200.xml:n8:mnnvl8"])
    assert len(results) == 1 and not diffs, diffs
    assert search.CHECKED_TWINS, "no crossNic twin was checked"


def test_nvls_passes_taken_from_the_line_end_as_searched(monkeypatch):
    """One node's NVLS pass tries head GPUs 0, 1, ... while each fits (search.try_nvls); a pass with the same
    bandwidth and type threshold takes the heads already tried from what they came to (no reservations).
    Here every such pass of the one-node NVLS goldens reserves anyway (CHECK_NVLS_REPLAY: a head that comes
    to something else fails), and the answers are NCCL's."""
    from gpucomm.planners.nccl import comm, search

    monkeypatch.setattr(search, "CHECK_NVLS_REPLAY", True)
    monkeypatch.setattr(search, "CHECKED_NVLS_REPLAYS", [])
    comm._RANK_STATES.clear()
    comm._run_cached.cache_clear()
    cases = [c for c in goldens() if "error" not in c["golden"] and c["nodes"] == 1
             and (c["golden"].get("nvls") or {}).get("n")][::4]
    assert len(cases) >= 10
    results, diffs = _run(cases)
    assert not diffs, diffs[:3]
    assert len(search.CHECKED_NVLS_REPLAYS) >= len(cases) // 2, "too few NVLS passes were taken from the line"
    comm._RANK_STATES.clear()
    comm._run_cached.cache_clear()
