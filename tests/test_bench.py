"""gpucomm bench: nccl-tests formulas and table layout (no torch needed), and real gloo runs
between CPU processes when torch is installed (``pip install 'gpucomm[bench]'``)."""
from __future__ import annotations

import copy
import json
import socket
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support import FIXTURES, HOSTS, ROOT, run_cli

from gpucomm.planners.measure import bench as M
from gpucomm.planners.measure import results as R
from gpucomm.planners.measure import save, workers, world
from gpucomm.render import bench as render_bench
from gpucomm.probes import units
from gpucomm.probes.errors import InputError
from gpucomm.probes.load import load_topology

BENCH_SCHEMA = ROOT / "planners" / "schema" / "bench.schema.json"
BASE_TOPO = FIXTURES / "faults" / "pcie-4gpu-healthy.json"


def _validate(doc: dict) -> None:
    import jsonschema

    jsonschema.validate(doc, json.loads(BENCH_SCHEMA.read_text(encoding="utf-8")))


def _validate_topology(doc: dict) -> None:
    import jsonschema

    jsonschema.validate(doc, json.loads((ROOT / "probes" / "schema" / "topology.schema.json").read_text(encoding="utf-8")))


# --------------------------------------------------------------------------------------------
# sizes and flags
def test_parse_size_units_are_the_units_module():
    # one rule in every command (gpucomm.probes.units): K/M/G as nccl-tests, KiB as IEC, KB decimal
    assert M.parse_size("8") == 8 and M.parse_size("8B") == 8
    assert M.parse_size("1K") == M.parse_size("1KiB") == 1024
    assert M.parse_size("1KB") == 1000 and M.parse_size("1MB") == 10 ** 6
    assert M.parse_size("64MiB") == 64 << 20 and M.parse_size("1G") == 1 << 30
    assert M.parse_size("1.5KiB") == 1536


@pytest.mark.parametrize("bad", ["", "0", "-1", "1.5", "abc", "1XB", "2TiB", "1e3", "0.5B"])
def test_parse_size_rejects(bad):
    with pytest.raises(InputError):
        M.parse_size(bad)


def test_parse_size_sweep():
    assert M.parse_size_sweep("1KiB:8KiB") == [1024, 2048, 4096, 8192]
    assert M.parse_size_sweep("1K:64K:4") == [1024, 4096, 16384, 65536]
    assert M.parse_size_sweep("4K,1K,4K") == [1024, 4096]
    assert M.parse_size_sweep("1MiB") == [1 << 20]
    for bad in ("8K:1K", "1K:2K:1", "1K:2K:x", "1:2:3:4", "8:1G:1", ","):
        with pytest.raises(InputError):
            M.parse_size_sweep(bad)
    with pytest.raises(InputError):
        M.parse_size_sweep("1:2TiB")  # over the 1 TiB ceiling
    assert len(M.parse_size_sweep("1:1GiB")) == 31 and len(M.parse_size_sweep("1:1TiB")) == 41


@settings(max_examples=80, deadline=None)
@given(st.integers(min_value=1, max_value=1 << 40))
def test_format_size_round_trips(n):
    assert M.parse_size(units.format_size(n)) == n


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=12))
def test_parse_size_never_crashes(text):
    try:
        v = M.parse_size(text)
    except InputError:
        return
    assert 1 <= v <= M.MAX_SIZE


def test_parse_ops():
    assert M.parse_ops(None) == list(R.OPS) and M.parse_ops("all") == list(R.OPS)
    assert M.parse_ops("alltoall,all_reduce,bcast") == ["all_reduce", "broadcast", "all_to_all"]
    with pytest.raises(InputError):
        M.parse_ops("all_reduce,reduce_everything")


# --------------------------------------------------------------------------------------------
# nccl-tests formulas (nccl-tests doc/PERFORMANCE.md)
def test_busbw_factors():
    n = 8
    assert units.busbw_factor("all_reduce", n) == pytest.approx(2 * 7 / 8)
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert units.busbw_factor(op, n) == pytest.approx(7 / 8)
    assert units.busbw_factor("broadcast", n) == 1.0
    assert units.busbw_factor("all_reduce", 1) == 0.0
    with pytest.raises(ValueError):
        units.busbw_factor("gossip", 4)


def test_message_layout_rounds_like_nccl_tests():
    # all_gather of 1000 B float over 3 ranks: base = (250 // 12) * 4 = 80 elements per rank
    assert R.message_layout("all_gather", 1000, 3, 4) == (80 * 4 * 3, 80)
    assert R.message_layout("all_reduce", 1000, 3, 4) == (1000, 250)
    assert R.message_layout("reduce_scatter", 16, 8, 4) == (0, 0)  # too small: skipped like nccl-tests


def test_nccl_tests_capture_row_agrees_with_formula():
    """Row of captures/nccltests/09 (8x H100 all_reduce): 1073741824 B in 4000.82 us -> 268.38/469.67."""
    alg, bus = units.bandwidths("all_reduce", 1073741824, 4000.82e-6, 8)
    assert round(alg, 2) == 268.38 and round(bus, 2) == 469.67


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(R.OPS), st.integers(1, 1 << 30), st.floats(1e-6, 10.0), st.integers(1, 64))
def test_make_row_busbw_is_algbw_times_factor(op, size, t, n):
    row = R.make_row(op, size, size // 4 or 1, "float", t, n, 0)
    assert row["algbw_GBps"] == pytest.approx(size / t / 1e9, rel=1e-6)
    assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * units.busbw_factor(op, n), rel=1e-6, abs=1e-12)


def _fake_result(n=4):
    results = []
    for op in R.OPS:
        rows = []
        for size in (1024, 1 << 20):
            S, count = R.message_layout(op, size, n, 4)
            rows.append(R.make_row(op, S, count, "float", 1e-5 * (1 + size / 1024), n, 0))
        results.append(R.summarise_collective(op, rows))
    return {"schema": R.SCHEMA, "kind": "collective", "backend": "nccl", "device": "cuda", "world_size": n,
            "nodes": 1, "hosts": ["n1"], "launcher": "spawn", "dtype": "float", "warmup": 5, "iters": 20,
            "min_bytes": 1024, "max_bytes": 1 << 20, "torch_version": "2.13.0", "results": results, "notes": []}


def test_table_parses_as_nccl_tests_output():
    """The text table is nccl-tests' layout: gpucomm's own nccl-tests parser reads it back."""
    from gpucomm.probes.formats.nccltests import parse_nccltests

    res = _fake_result()
    text = render_bench.render_collective_table(res)
    assert "#       size         count      type   redop    root     time   algbw   busbw  #wrong" in text
    blocks = text.split("# Collective test starting: ")[1:]
    assert len(blocks) == len(R.OPS)
    for block, r in zip(blocks, res["results"]):
        parsed = parse_nccltests("# Collective test starting: " + block)
        assert [row["size_bytes"] for row in parsed["rows"]] == [x["size_bytes"] for x in r["rows"]]
        for prow, x in zip(parsed["rows"], r["rows"]):
            assert prow["out_of_place"]["busbw_GBps"] == pytest.approx(x["busbw_GBps"], abs=0.006)
        assert parsed["avg_busbw_GBps"] == pytest.approx(r["avg_busbw_GBps"], rel=1e-5)


def test_p2p_table_layout():
    res = {"label": "x", "size_bytes": 1024, "warmup": 1, "iters": 2, "notes": [],
           "endpoints": [{"key": "GPU0"}, {"key": "GPU1"}, {"key": "GPU2"}],
           "bw_GBps": {"GPU0": {"GPU1": 40.5, "GPU2": 20.0}, "GPU1": {"GPU0": 41.0, "GPU2": 19.0},
                       "GPU2": {"GPU0": 20.1}},
           "lat_us": {"GPU0": {"GPU1": 2.0}}, "peer_access": {"GPU0": {"GPU1": True}},
           "host_device": {"GPU0": {"h2d_GBps": 25.0, "d2h_GBps": 26.0}}}
    lines = render_bench.render_p2p_table(res).splitlines()
    i = lines.index("Unidirectional bandwidth matrix (GB/s), row = source, column = destination")
    header, rows = lines[i + 1].split(), [l.split() for l in lines[i + 2:i + 5]]
    assert header == ["D\\D", "GPU0", "GPU1", "GPU2"]
    assert rows[0] == ["GPU0", "-", "40.50", "20.00"] and rows[2] == ["GPU2", "20.10", "n/a", "-"]
    assert any("25.00" in l and "26.00" in l for l in lines)


# --------------------------------------------------------------------------------------------
# launcher environment
def test_launcher_env():
    assert world.launcher_env({}) is None
    e = world.launcher_env({"RANK": "3", "WORLD_SIZE": "16", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "8",
                        "MASTER_ADDR": "node0", "MASTER_PORT": "29400", "TORCHELASTIC_RUN_ID": "x"})
    assert e == {"launcher": "torchrun", "rank": 3, "world_size": 16, "local_rank": 3, "master_addr": "node0",
                 "master_port": 29400}
    e = world.launcher_env({"SLURM_PROCID": "9", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1", "MASTER_ADDR": "n0"})
    assert (e["launcher"], e["rank"], e["local_rank"], e["master_port"]) == ("srun", 9, 1, 29500)
    with pytest.raises(InputError, match="MASTER_ADDR"):
        world.launcher_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "2"})
    with pytest.raises(InputError):
        world.launcher_env({"RANK": "x", "WORLD_SIZE": "2"})
    with pytest.raises(InputError):
        world.launcher_env({"RANK": "2", "WORLD_SIZE": "2"})


# --------------------------------------------------------------------------------------------
# feeding results back into a topology
def _gpu_p2p_result(doc: dict, by: str = "pci_bus_id") -> dict:
    gpus = sorted(doc["gpus"], key=lambda g: g["index"])
    eps = []
    for i, g in enumerate(gpus):
        ep = {"key": f"GPU{i}", "cuda_index": i, "host": "n"}
        if by:
            ep[by] = g[by]
        eps.append(ep)
    keys = [e["key"] for e in eps]
    bw = {a: {b: (200.0 if int(a[3:]) // 2 == int(b[3:]) // 2 else 20.0) for b in keys if b != a} for a in keys}
    bw["GPU1"]["GPU0"] = 150.0
    lat = {a: {b: 3.0 for b in keys if b != a} for a in keys}
    return {"schema": R.SCHEMA, "kind": "p2p", "mode": "cuda-copy", "backend": None, "device": "cuda",
            "label": "copy", "endpoints": eps, "size_bytes": 1 << 26, "bw_GBps": bw, "lat_us": lat,
            "host_device": {k: {"h2d_GBps": 50.0, "d2h_GBps": 51.0} for k in keys}}


def test_apply_measurements_gpu_pairs():
    doc = load_topology(str(BASE_TOPO))
    out, notes = save.apply_measurements(copy.deepcopy(doc), _gpu_p2p_result(doc))
    assert out["measured"]["p2p"]["GPU0"]["GPU1"] == {"bw_GBps": 200.0, "lat_us": 3.0}
    assert out["measured"]["host_device"]["GPU3"]["d2h_GBps"] == 51.0
    nv = [l for l in out["links"] if l["kind"] == "nvlink"]
    g = {x["pci_bus_id"]: x["index"] for x in out["gpus"]}
    # direct NVLink links carry the slower direction of the pair
    assert {(g[l["a"]], g[l["b"]]): l["measured_bw_GBps"] for l in nv} == {(0, 1): 150.0, (2, 3): 200.0}
    assert "measured_bw_GBps" not in next(l for l in out["links"] if l["kind"] == "pcie")
    assert any("measured.p2p" in n for n in notes)
    _validate_topology(out)
    # the saved document is still a valid topology and the doctor reads it (150 of 247 GB/s: fine)
    from gpucomm.planners.health.doctor import run_doctor

    assert run_doctor(out)["findings"] == []


def test_apply_measurements_by_index_warns_and_unknown_device_fails():
    doc = load_topology(str(BASE_TOPO))
    _, notes = save.apply_measurements(copy.deepcopy(doc), _gpu_p2p_result(doc, by=None))
    assert any("CUDA_DEVICE_ORDER=PCI_BUS_ID" in n for n in notes)
    res = _gpu_p2p_result(doc)
    res["endpoints"][0]["pci_bus_id"] = "0000:ee:00.0"
    res["endpoints"][0]["cuda_index"] = 17
    with pytest.raises(InputError, match="not a GPU of this topology"):
        save.apply_measurements(copy.deepcopy(doc), res)


def test_apply_measurements_collectives_replace_same_key():
    doc = load_topology(str(BASE_TOPO))
    res = _fake_result()
    save.apply_measurements(doc, res)
    save.apply_measurements(doc, res)
    coll = doc["measured"]["collectives"]
    assert len(coll) == len(R.OPS)  # the second run replaced the first
    ar = next(c for c in coll if c["op"] == "all_reduce")
    assert ar["rows"][1]["busbw_GBps"] == res["results"][0]["rows"][1]["busbw_GBps"]


# --------------------------------------------------------------------------------------------
# torch missing
def test_bench_without_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    for cmd in (["bench", "collective"], ["bench", "p2p"]):
        r = run_cli(*cmd)
        assert r.code == 1
        assert r.stderr.strip() == "gpucomm bench needs torch: pip install 'gpucomm[bench]'"
        assert r.stdout == ""


def test_bench_bad_flags_before_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    r = run_cli("bench", "collective", "--sizes", "1GiB:1KiB")
    assert r.code == 2 and "--sizes" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("bench", "collective", "--backend", "mpi")
    assert r.code == 1 and "--backend" in r.stderr


def test_save_refuses_a_document_reading_had_to_repair(tmp_path):
    """--save rewrites its target: a document whose reading dropped or repaired fields would lose them,
    so it is refused (before the benchmark runs, file untouched) unless --force."""
    doc = json.loads(BASE_TOPO.read_text(encoding="utf-8"))
    doc["gpus"][0]["numa_node"] = True
    topo = tmp_path / "topo.json"
    topo.write_text(json.dumps(doc), encoding="utf-8")
    before = topo.read_bytes()
    r = run_cli("bench", "collective", "--backend", "gloo", "--save", topo)
    assert r.code == 1 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"gpucomm: error: {topo}: --save would rewrite it")
    assert "gpus[0].numa_node" in r.stderr and "--force" in r.stderr
    assert topo.read_bytes() == before


# --------------------------------------------------------------------------------------------
# real runs over gloo (torch installed)
def _need_torch():
    return pytest.importorskip("torch", reason="torch is an optional extra: pip install 'gpucomm[bench]'")


@pytest.fixture(scope="module")
def gloo_collective(tmp_path_factory):
    _need_torch()
    topo = tmp_path_factory.mktemp("bench") / "topo.json"
    topo.write_text(BASE_TOPO.read_text(encoding="utf-8"), encoding="utf-8")
    r = run_cli("bench", "collective", "--backend", "gloo", "--nproc", "2", "--sizes", "1KiB:16KiB", "--iters", "3",
                "--warmup", "1", "--save", topo, "--format", "json")
    assert r.code == 0, r.stderr
    return r.json(), topo


def test_gloo_collective_busbw_follows_nccl_tests(gloo_collective):
    res, _ = gloo_collective
    _validate(res)
    assert (res["backend"], res["device"], res["world_size"], res["launcher"]) == ("gloo", "cpu", 2, "spawn")
    assert [r["op"] for r in res["results"]] == list(R.OPS)
    for r in res["results"]:
        assert r["note"] is None and len(r["rows"]) == 5 and r["wrong_total"] == 0
        f = units.busbw_factor(r["op"], 2)
        for row in r["rows"]:
            assert row["time_us"] > 0 and row["wrong"] == 0
            assert row["algbw_GBps"] == pytest.approx(row["size_bytes"] / (row["time_us"] * 1e-6) / 1e9, rel=1e-3)
            assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * f, rel=1e-6)
        exp_counts = {"all_reduce": [256 << i for i in range(5)], "broadcast": [256 << i for i in range(5)]}
        exp = exp_counts.get(r["op"], [128 << i for i in range(5)])
        assert [row["count"] for row in r["rows"]] == exp
    # the text table of the same result renders every row
    text = render_bench.render_collective_table(res)
    assert text.count("# Avg bus bandwidth") == len(R.OPS)


def test_gloo_collective_save_round_trip(gloo_collective):
    res, topo = gloo_collective
    doc = load_topology(str(topo))  # still a valid topology document
    coll = {c["op"]: c for c in doc["measured"]["collectives"]}
    assert set(coll) == set(R.OPS)
    for r in res["results"]:
        saved = coll[r["op"]]
        assert (saved["backend"], saved["world_size"], saved["dtype"]) == ("gloo", 2, "float")
        assert [x["busbw_GBps"] for x in saved["rows"]] == [x["busbw_GBps"] for x in r["rows"]]
    assert len(doc["gpus"]) == 4  # nothing else lost
    _validate_topology(doc)


def test_gloo_p2p_matrix_and_save(tmp_path):
    _need_torch()
    topo = tmp_path / "topo.json"
    topo.write_text(BASE_TOPO.read_text(encoding="utf-8"), encoding="utf-8")
    r = run_cli("bench", "p2p", "--backend", "gloo", "--nproc", "2", "--size", "256KiB", "--iters", "3",
                "--warmup", "1", "--save", topo)
    assert r.code == 0, r.stderr
    assert "process-to-process send/recv over gloo" in r.stdout and "not GPU peer-to-peer" in r.stdout
    lines = r.stdout.splitlines()
    i = lines.index("Unidirectional bandwidth matrix (GB/s), row = source, column = destination")
    assert lines[i + 1].split() == ["D\\D", "rank0", "rank1"]
    row0, row1 = lines[i + 2].split(), lines[i + 3].split()
    assert row0[:2] == ["rank0", "-"] and float(row0[2]) > 0 and float(row1[1]) > 0 and row1[2] == "-"
    doc = load_topology(str(topo))
    pp = doc["measured"]["process_p2p"]
    assert pp["backend"] == "gloo" and pp["bw_GBps"]["rank0"]["rank1"] > 0 and pp["lat_us"]["rank1"]["rank0"] > 0
    assert "p2p" not in doc["measured"]  # processes are not GPUs


def test_torchrun_environment_runs_in_process(monkeypatch):
    """Under torchrun (RANK/WORLD_SIZE set) the benchmark joins the existing world instead of spawning."""
    _need_torch()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    res = M.run_collective_bench(backend="gloo", sizes="4KiB", iters=2, warmup=1, ops="all_reduce,all_gather")
    assert res["launcher"] == "torchrun" and res["world_size"] == 1
    assert [r["rows"][0]["busbw_GBps"] for r in res["results"]] == [0.0, 0.0]  # factors are 0 for n = 1
    r = run_cli("bench", "collective", "--nproc", "4", "--backend", "gloo")
    assert r.code == 1 and "WORLD_SIZE=1" in r.stderr


def test_backend_nccl_without_gpus_is_a_user_error():
    torch = _need_torch()
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA GPUs")
    r = run_cli("bench", "collective", "--backend", "nccl")
    assert r.code == 1 and "gloo" in r.stderr and "Traceback" not in r.stderr


def test_example_hosts_exist_for_save_mapping():
    """GPU endpoints map onto a recorded host by PCI bus id (hgx-h100: 8 GPUs, NVSwitch, no direct links)."""
    if not (HOSTS / "hgx-h100").is_dir():
        pytest.skip("fixture host hgx-h100 not generated")
    doc = load_topology(str(HOSTS / "hgx-h100"))
    out, notes = save.apply_measurements(doc, _gpu_p2p_result(doc))
    assert len(out["measured"]["p2p"]) == 8 and all(len(v) == 7 for v in out["measured"]["p2p"].values())
    assert not any("measured_bw_GBps" in l for l in out["links"])  # NVSwitch: no GPU-GPU link to annotate


# --------------------------------------------------------------------------------------------
# the CUDA copy path, driven by a stand-in for torch.cuda (no GPU on CI): result layout and the
# mapping of CUDA devices onto a topology's GPUs by PCI bus id
class _FakeTensor:
    def __init__(self, n, device):
        self.n, self.device = n, device
        self.copies = 0

    def copy_(self, other, non_blocking=False):
        assert other.n == self.n
        self.copies += 1
        return self


class _FakeCuda:
    BUSES = [0x1a, 0x1b, 0x9a, 0x9b]  # the bus numbers of fixtures/faults/pcie-4gpu-healthy.json

    def synchronize(self, device=None):
        pass

    def can_device_access_peer(self, a, b):
        return a // 2 == b // 2

    def get_device_properties(self, i):
        from types import SimpleNamespace

        return SimpleNamespace(name="NVIDIA H100 PCIe", pci_bus_id=self.BUSES[i], pci_device_id=0, pci_domain_id=0,
                               uuid=f"00000000-0000-4000-8000-00000000000{i}")


def _fake_torch():
    from types import SimpleNamespace

    def empty(n, dtype=None, device=None, pin_memory=False):
        return _FakeTensor(n, device)

    return SimpleNamespace(cuda=_FakeCuda(), uint8="uint8", int32="int32", empty=empty,
                           zeros=lambda n, dtype=None, device=None: _FakeTensor(n, device), __version__="2.13.0+cu")


def test_cuda_copy_matrix_layout_and_save():
    res = workers.p2p_cuda_copy(_fake_torch(), [0, 1, 2, 3], 1 << 20, warmup=1, iters=2)
    assert res["mode"] == "cuda-copy" and res["torch_version"] == "2.13.0"
    keys = [e["key"] for e in res["endpoints"]]
    assert keys == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert res["endpoints"][2]["pci_bus_id"] == "0000:9a:00.0"
    assert res["endpoints"][0]["uuid"] == "GPU-00000000-0000-4000-8000-000000000000"
    for a in keys:
        assert sorted(res["bw_GBps"][a]) == sorted(k for k in keys if k != a)
        assert all(v > 0 for v in res["bw_GBps"][a].values()) and all(v >= 0 for v in res["lat_us"][a].values())
        assert set(res["host_device"][a]) == {"h2d_GBps", "d2h_GBps"}
    assert res["peer_access"]["GPU0"] == {"GPU1": True, "GPU2": False, "GPU3": False}
    assert "P2P access" in render_bench.render_p2p_table(res)
    doc = load_topology(str(BASE_TOPO))
    out, notes = save.apply_measurements(doc, res)
    assert set(out["measured"]["p2p"]) == set(keys) and not any("CUDA_DEVICE_ORDER" in n for n in notes)
    assert sum(1 for l in out["links"] if "measured_bw_GBps" in l) == 2  # the two NVLink bridges


@pytest.mark.parametrize("measured", [None, {"collectives": None}, {"collectives": None, "p2p": None}])
def test_saving_into_null_measurement_sections(measured):
    """`measured: null` / `collectives: null` are valid documents: --save fills them (found by CI's hypothesis run)."""
    doc = {"measured": measured}
    res = {"kind": "collective", "backend": "gloo", "device": "cpu", "world_size": 2, "nodes": 1, "dtype": "float",
           "results": [{"op": "all_reduce", "peak_busbw_GBps": 1.0,
                        "rows": [{"size_bytes": 8, "time_us": 1.0, "algbw_GBps": 0.008, "busbw_GBps": 0.008}]}]}
    out, notes = save.apply_measurements(doc, res)
    assert [c["op"] for c in out["measured"]["collectives"]] == ["all_reduce"]
    assert notes == ["saved 1 collective sweep(s) under measured.collectives"]
