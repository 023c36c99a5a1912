"""gpucomm.probes.formats.nccltests: the nccl-tests / rccl-tests table parser, on the real captures and fuzzed."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucomm.probes.formats.nccltests import load_nccltests, measured_series, parse_nccltests
from gpucomm.probes.errors import InputError

from support import CAPTURES

NT = CAPTURES / "nccltests"


def test_a6000_capture():
    p = load_nccltests(str(NT / "02_rtxa6000-x8_1node_allreduce.txt"))
    assert p["collective"] == "all_reduce" and p["collective_source"] == "inferred"
    assert p["n_ranks"] == 8 and p["n_ranks_source"] == "devices"
    assert p["nodes"] == 1 and p["hosts"] == ["6000gpu"]
    assert p["devices"][0] == {"rank": 0, "group": 0, "pid": 20836, "host": "6000gpu", "device": 0,
                               "bus_id": "0000:4f:00", "name": "NVIDIA RTX A6000"}
    assert len(p["rows"]) == 25 and p["rows"][0]["size_bytes"] == 8 and p["rows"][-1]["size_bytes"] == 134217728
    last = p["rows"][-1]
    assert last["count"] == 33554432 and last["type"] == "float" and last["redop"] == "sum" and last["root"] == -1
    assert last["out_of_place"] == {"time_us": 14920.0, "algbw_GBps": 9.0, "busbw_GBps": 15.74, "wrong": 0}
    assert last["in_place"]["busbw_GBps"] == 15.79
    assert p["avg_busbw_GBps"] == pytest.approx(5.44125)
    assert p["out_of_bounds"] == 0
    assert p["params"] == {} and p["version"] is None
    assert p["warnings"] == []


def test_polaris_two_nodes():
    p = load_nccltests(str(NT / "04_polaris-a100-40gb-x4_2nodes_allreduce_default-tcp.txt"))
    assert p["nodes"] == 2 and p["hosts"] == ["x3006c0s1b1n0", "x3006c0s25b0n0"]
    assert p["n_ranks"] == 8
    assert p["devices"][4]["bus_id"] == "0x07" and p["devices"][4]["device"] == 0
    assert p["params"]["nThread"] == 1 and p["params"]["maxBytes"] == 1073741824
    assert p["params"]["step"] == 2 and p["params"]["step_unit"] == "factor" and p["params"]["warmup_iters"] == 5
    assert [r["size_bytes"] for r in p["rows"]] == [4 << i for i in range(29)]
    assert p["collective"] == "all_reduce"


def test_h100_header_names_the_collective():
    p = load_nccltests(str(NT / "09_h100-x8_1node_allreduce_cluster01.txt"))
    assert p["collective"] == "all_reduce" and p["collective_source"] == "header"
    assert p["version"] == "2.17.8" and p["nccl_library"] == "22902"
    assert p["rows"][-1]["type"] == "double" and p["rows"][-1]["size_bytes"] == 17179869184
    s = measured_series(p)
    assert s[-1] == {"size_bytes": 17179869184, "time_us": 62340.7, "algbw_GBps": 275.58, "busbw_GBps": 482.27}
    assert len(measured_series(p, "in_place")) == 10


def test_every_row_satisfies_algbw_is_size_over_time():
    """SOURCES.md: all rows were checked algbw == size/time; the parser must not shift columns."""
    for f in sorted(NT.glob("*.txt")):
        p = load_nccltests(str(f))
        for r in p["rows"]:
            for side in ("out_of_place", "in_place"):
                s = r[side]
                if s["algbw_GBps"] >= 0.1:
                    assert s["algbw_GBps"] == pytest.approx(r["size_bytes"] / s["time_us"] / 1e3, rel=0.02, abs=0.006)


def test_row_without_count_cell_is_recovered():
    """The paste in vllm#17348 lost a count cell ("8388608     float ..."); SOURCES.md says so."""
    text = (NT / "02_rtxa6000-x8_1node_allreduce.txt").read_text()
    broken = text.replace("     8388608       2097152     float", "     8388608     float")
    assert broken != text
    p = parse_nccltests(broken, "x.txt")
    row = next(r for r in p["rows"] if r["size_bytes"] == 8388608)
    assert row["count"] == 2097152 and row["type"] == "float"
    assert row["out_of_place"]["busbw_GBps"] == 15.20
    assert any("no count cell" in w and "x.txt:" in w for w in p["warnings"])


def test_old_layout_without_root_and_float_error():
    text = """# nThread 1 nGpus 4 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
#   Rank  0 Pid  12345 on     node1 device  0 [0x1a] Tesla V100-SXM2-32GB
#   Rank  1 Pid  12345 on     node1 device  1 [0x1b] Tesla V100-SXM2-32GB
#   Rank  2 Pid  12345 on     node1 device  2 [0x3d] Tesla V100-SXM2-32GB
#   Rank  3 Pid  12345 on     node1 device  3 [0x3e] Tesla V100-SXM2-32GB
#
#                                                     out-of-place                       in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
node1:123:456 [0] NCCL INFO Launch mode Parallel
           8             2   float     sum    16.45    0.00    0.00  0e+00    16.30    0.00    0.00  0e+00
   134217728      33554432   float     sum   1582.3   84.82  127.24  5e-07   1581.9   84.85  127.27  5e-07
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 63.6
"""
    p = parse_nccltests(text)
    assert p["n_ranks"] == 4 and p["devices"][0]["group"] is None
    assert p["collective"] == "all_reduce"
    r = p["rows"][-1]
    assert r["root"] is None and r["out_of_place"]["wrong"] == 5e-07 and r["in_place"]["time_us"] == 1581.9


def test_nccl_version_from_its_info_banner():
    """Without nccl-tests' version line, NCCL's own INFO banner (init.cc) gives the library version,
    as nccl-library= would (NCCL_VERSION_CODE)."""
    text = ("node1:123:123 [0] NCCL INFO NCCL version 2.23.4+cuda12.6\n"
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
            "   1073741824     268435456     float     sum      -1    12000   89.48  156.59      0    12000   89.48  156.59      0\n")
    p = parse_nccltests(text)
    assert p["nccl_library"] == "22304" and p["ignored"]["nccl_log_lines"] == 1
    assert parse_nccltests(text.replace("2.23.4", "2.8.4"))["nccl_library"] == "2804"
    assert parse_nccltests(text.replace("NCCL version 2.23.4+cuda12.6", "Bootstrap"))["nccl_library"] is None


def test_collective_inference_and_override():
    rows = "\n".join([
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "   1073741824      33554432     float    none      -1    12000   89.48   78.29      0    12000   89.48   78.29      0",
    ])
    p = parse_nccltests(rows)
    # (n-1)/n without a reduction: all_gather or alltoall -> ambiguous, and n = 8 from 78.29/89.48
    assert p["collective"] is None and p["collective_candidates"] == ["all_gather", "all_to_all"]
    p = parse_nccltests(rows, collective="all_gather_perf")
    assert p["collective"] == "all_gather" and p["n_ranks"] == 8 and p["n_ranks_source"].startswith("inferred")
    with pytest.raises(InputError):
        parse_nccltests(rows, collective="allgatherz")
    bcast = rows.replace("none      -1", "none       0").replace("78.29", "89.48")
    assert parse_nccltests(bcast)["collective"] == "broadcast"
    assert parse_nccltests(bcast.replace("none       0", " sum       0"))["collective"] == "reduce"


def test_headerless_table_assumes_modern_layout():
    p = parse_nccltests("        8             2     float     sum      -1    32.29    0.00    0.00      0    31.62    0.00    0.00      0\n")
    assert p["rows"][0]["size_bytes"] == 8
    assert any("no column header" in w for w in p["warnings"])


def test_na_cells_and_bad_rows_warn():
    text = (
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
        "        1024           256     float    none      -1    10.00    0.10    0.09    N/A      N/A     N/A     N/A    N/A\n"
        "        2048           512     float    none      -1    nan    0.10    0.09    0\n"
        "        4096          1024     float    none      -1    -5.0    0.10    0.09      0    1.0   1.0   1.0   0\n"
    )
    p = parse_nccltests(text, "t.txt")
    assert len(p["rows"]) == 1 and p["rows"][0]["in_place"]["time_us"] is None
    assert len(p["warnings"]) == 2 and all(w.startswith("t.txt:") for w in p["warnings"])


@pytest.mark.parametrize("text", ["", "hello\nworld\n", "# only comments\n#\n", "\x00\x01\x02"])
def test_no_rows_is_input_error(text):
    with pytest.raises(InputError, match="no nccl-tests result rows"):
        parse_nccltests(text, "f.txt")


def test_output_is_json_serialisable():
    for f in sorted(NT.glob("*.txt")):
        json.dumps(load_nccltests(str(f)), allow_nan=False, sort_keys=True)


_CAPTURE_TEXT = (NT / "04_polaris-a100-40gb-x4_2nodes_allreduce_default-tcp.txt").read_text()


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=600))
@settings(max_examples=80, deadline=None)
def test_fuzz_random_text_only_input_error(text):
    try:
        p = parse_nccltests(text, "fuzz.txt")
    except InputError:
        return
    json.dumps(p, allow_nan=False)


@given(st.integers(min_value=0, max_value=len(_CAPTURE_TEXT)), st.integers(min_value=0, max_value=400),
       st.text(max_size=40))
@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
def test_fuzz_mutated_capture_only_input_error(cut, span, junk):
    """Truncations and junk spliced into a real capture: rows, warnings or InputError, never a crash."""
    text = _CAPTURE_TEXT[:cut] + junk + _CAPTURE_TEXT[cut + span:]
    try:
        p = parse_nccltests(text, "mut.txt")
    except InputError:
        return
    json.dumps(p, allow_nan=False)
    for r in p["rows"]:
        assert r["size_bytes"] >= 0 and r["out_of_place"]["time_us"] >= 0


# --------------------------------------------------------------------------------------------
# However it was launched: launcher labels, interleaved NCCL log lines, what was ignored
SCALING = NT / "scaling"


def test_every_scaling_table_parses_with_its_collective_and_ranks():
    """The 66 published tables: every one has its rows, its rank count from the device lines, and a
    collective (from the header, the busbw factor, or -- all_gather vs alltoall -- the file name)."""
    files = sorted(SCALING.glob("*.txt"))
    assert len(files) == 66
    for f in files:
        p = load_nccltests(str(f))
        want = next(c for c in ("all_reduce", "all_gather", "alltoall", "reduce_scatter", "sendrecv") if c in f.name)
        assert p["collective"] == {"alltoall": "all_to_all", "sendrecv": "send_recv"}.get(want, want), f.name
        assert p["n_ranks"] == len(p["devices"]) and p["rows"], f.name
        assert not [w for w in p["warnings"] if "skipped" in w], (f.name, p["warnings"])


def test_srun_labels_are_stripped_and_counted():
    p = load_nccltests(str(SCALING / "062_alps-gh200_4n_all_reduce_cxituned_aws1130.txt"))
    assert p["n_ranks"] == 16 and p["nodes"] == 4 and len(p["rows"]) == 30
    assert p["ignored"]["labelled_lines"] > 40 and p["ignored"]["nccl_log_lines"] == 0


def _relabel(text: str, label: str) -> str:
    return "\n".join(label.format(i=i) + line for i, line in enumerate(text.splitlines()))


@pytest.mark.parametrize("label", ["0: ", "  3: ", "[1,0]<stdout>:", "[1,0]<stdout>: ", "[0] ", "x3006c0s1b1n0: "])
def test_launcher_labels(label):
    text = (NT / "04_polaris-a100-40gb-x4_2nodes_allreduce_default-tcp.txt").read_text()
    plain = load_nccltests(str(NT / "04_polaris-a100-40gb-x4_2nodes_allreduce_default-tcp.txt"))
    p = parse_nccltests(_relabel(text, label), "labelled.txt")
    assert [r["out_of_place"] for r in p["rows"]] == [r["out_of_place"] for r in plain["rows"]]
    assert p["n_ranks"] == 8 and p["hosts"] == plain["hosts"] and p["collective"] == "all_reduce"
    assert p["ignored"]["labelled_lines"] >= len(plain["rows"])


def test_interleaved_nccl_info_and_a_row_cut_in_two():
    """NCCL_DEBUG=INFO output of other threads lands between rows and even inside one (Snellius'
    2-node all_reduce log, SOURCES.md: "one split row re-joined"): the row is re-joined and said so."""
    text = (NT / "scaling" / "096_snellius-h100_1n_all_reduce.txt").read_text().splitlines()
    i = next(k for k, l in enumerate(text) if l.split()[:1] == ["2097152"])
    row = text[i].split()
    info = "gcn151:1904979:1905073 [0] NCCL INFO Channel 00/0 : 7[3] -> 0[0] [receive] via NET/IB/2/GDRDMA"
    cut = (f"{row[0]:>12}{row[1]:>14}{row[2]:>10}{row[3]:>8}{row[4]:>8}{info}", info.replace("Channel 00", "Channel 04"),
           "gcn151:1904979:1904979 [0] NCCL INFO comm 0x4cfb4b0 rank 0 nranks 8 cudaDev 0 busId 6000 - Init COMPLETE",
           "   " + "   ".join(row[5:]))
    mixed = text[:3] + [info] + text[3:i] + list(cut) + text[i + 1:]
    p = parse_nccltests("\n".join(mixed), "mixed.txt")
    plain = load_nccltests(str(NT / "scaling" / "096_snellius-h100_1n_all_reduce.txt"))
    assert [r["out_of_place"] for r in p["rows"]] == [r["out_of_place"] for r in plain["rows"]]
    assert any("re-joined" in w for w in p["warnings"])
    assert p["ignored"]["nccl_log_lines"] == 4
    from gpucomm.probes.formats.nccltests import ignored_summary
    assert "4 NCCL debug line(s)" in ignored_summary(p)


def test_chatter_is_reported_as_ignored():
    text = (NT / "09_h100-x8_1node_allreduce_cluster01.txt").read_text()
    p = parse_nccltests("srun: job 12345 queued and waiting for resources\n" + text + "\nreal\t0m12.3s\n", "c.txt")
    assert p["ignored"]["other_lines"] == 2 and "line 1: srun: job 12345" in p["ignored"]["other_examples"][0]


def test_sendrecv_prints_sum_and_is_still_sendrecv():
    p = load_nccltests(str(SCALING / "104_b200-use3a_2n_sendrecv.txt"))
    assert p["collective"] == "send_recv" and p["collective_source"] == "inferred" and p["n_ranks"] == 16


def test_collective_from_the_file_name_only_when_the_table_is_ambiguous(tmp_path):
    src = (SCALING / "001_polaris_2n_all_gather_nccl218_env1.txt").read_text()
    for name, want in (("all_gather_output.dat.1", "all_gather"), ("alltoall_output.dat.1", "all_to_all"),
                       ("output.dat.1", None), ("all_gather_and_alltoall.txt", None)):
        p = parse_nccltests(src, str(tmp_path / name))
        assert p["collective"] == want, name
        assert (p["collective_source"] == "file name") == (want is not None)
    # a folder name says nothing about the run
    assert parse_nccltests(src, str(tmp_path / "alltoall" / "output.txt"))["collective"] is None
