"""The hostile-input corpus (tests/hostile_corpus.py) through every input entry point: each case
exits 0 (with a warning where one is due) or 1 with one line naming the file, never 123, within
TIME_LIMIT seconds under ``ulimit -v`` (MEMORY_LIMIT), leaving no temporary file behind.

The representative subset (a few cases of every class) runs in every suite; the whole corpus
(over 1,000 cases) is marked slow.  The classes of the second round (issue 29, hc.ROUND2) run
within 30 s, 4 GiB of address space and 1 GiB of peak memory each; the unit tests at the end pin
each of their behaviours."""
from __future__ import annotations

import sys

import pytest

from support import ROOT

sys.path.insert(0, str(ROOT / "tests"))
import hostile_corpus as hc  # noqa: E402  (a generator script, not a test module)


def _check(outcomes) -> None:
    bad = [f"{o.case.id}: {'; '.join(o.problems)} (exit {o.code}, {o.seconds:.1f}s) {o.stderr.strip()[-300:]}"
           for o in outcomes if o.problems]
    assert not bad, "\n".join(bad)


def test_corpus_covers_every_class_and_entry_point(tmp_path):
    cases = hc.generate(tmp_path / "corpus")
    assert len(cases) >= 300
    classes = {c.cls for c in cases}
    assert classes == {"special-files", "json-structure", "yaml-structure", "wrong-types", "semantics", "captures",
                       "snapshots", "hostlists", "nvidia-smi", "measurements", "outputs"} | set(hc.ROUND2)
    entry = {c.id.rsplit("@", 1)[1] for c in cases if "@" in c.id}
    assert set(hc.TOPO_COMMANDS) <= entry
    assert {"plan-hosts", "plan-cluster", "predict-compare", "rings-compare", "trees-compare", "probe", "snapshot",
            "doctor", "calibrate", "select"} <= entry
    # the second round: bounded tighter, and every class through several entry points
    for cls in hc.ROUND2:
        mine = [c for c in cases if c.cls == cls]
        assert len(mine) >= 20, cls
        assert all(0 < c.time_limit <= 30 and c.rss_limit == 1024 ** 3 and c.mem_limit == 4 * 1024 ** 3 for c in mine), cls
        assert len({c.id.rsplit("@", 1)[1] for c in mine}) >= 3, cls
    assert all(c.fast is False for c in cases if c.cls == "wrong-types" and "show-json" not in c.id)
    for cls in classes:  # the subset is representative: every class has a case in it
        assert any(c.fast for c in cases if c.cls == cls), cls


def test_representative_subset(tmp_path):
    cases = [c for c in hc.generate(tmp_path / "corpus", full=False) if c.fast]
    assert 30 <= len(cases) <= 60
    scratch = tmp_path / "run"
    scratch.mkdir()
    _check(hc.run_all(cases, scratch, jobs=2))


@pytest.mark.slow
def test_whole_corpus(tmp_path):
    cases = hc.generate(tmp_path / "corpus")
    scratch = tmp_path / "run"
    scratch.mkdir()
    _check(hc.run_all(cases, scratch, jobs=2))


# ============================================================================================
# The second round (issue 29), one behaviour per test; the corpus above runs each class end to end.
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import tarfile  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from support import CAPTURES, run_cli  # noqa: E402

from gpucomm.probes import limits  # noqa: E402
from gpucomm.probes.errors import InputError  # noqa: E402
from gpucomm.probes.formats.scan import HostPrefixed  # noqa: E402
from gpucomm.probes.load import parse_json, parse_yaml  # noqa: E402
from gpucomm.probes.model import cpumask_to_list, parse_cpulist  # noqa: E402
from gpucomm.probes.validate import validate_document  # noqa: E402

TOPO = CAPTURES / "topo" / "17_h100-sxm-x8_12nic.txt"


def _write(tmp_path, name, doc) -> str:
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc, allow_nan=True))
    return str(p)


def _one_line(r, name) -> None:
    assert r.code == 1, (r.code, r.stderr)
    assert r.stderr.startswith("gpucomm: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert str(name) in r.stderr


class _Slow(Exception):
    pass


def _within(seconds: int, fn, *args):
    """``fn(*args)`` or _Slow after ``seconds`` (a quadratic reader of a 1 MiB line takes hours)."""
    def stop(*_):
        raise _Slow()

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        return fn(*args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ---- long lines ------------------------------------------------------------------------------
_NCCL_TAIL = r":\d+:\d+ \[\d+\] NCCL (?:INFO|WARN|TRACE|ABORT)\b"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["a", "Z", "1", ":", " ", ".", "-", "_", "é", "[0]", " NCCL INFO", ":1:2 [0] NCCL WARN",
                                 "x:3:4 [12] NCCL INFO"]), max_size=14))
def test_host_prefixed_finds_what_the_backtracking_regex_finds(parts):
    line = "".join(parts)
    want = re.compile(r"[A-Za-z][\w.-]*" + _NCCL_TAIL).search(line)
    got = HostPrefixed(r"[A-Za-z]", r"[\w.-]", _NCCL_TAIL).search(line)
    assert (want is None) == (got is None)
    if want is not None:
        assert (got.start(), got.end(), got.group(0)) == (want.start(), want.end(), want.group(0))


@pytest.mark.parametrize("body", ["a" * (1 << 20), "a:" * (1 << 19), "1" * (1 << 20), "[1,0]<stdout>:" + "a" * (1 << 20),
                                  "# nThread " + "a " * (1 << 19), "h:1:1 [0] NCCL INFO Channel 00/02 : " + "a" * (1 << 20)])
def test_every_reader_crosses_a_long_line_in_linear_time(body):
    from gpucomm.probes.formats import nccllog, nccltests
    from gpucomm.probes.load import _from_text

    for reader in (lambda t: nccltests.split_nccltests(t, "x"), lambda t: nccllog.parse_nccl_log(t, "x"),
                   lambda t: _from_text(t, "x")):
        try:
            _within(20, reader, body + "\n")
        except InputError:
            pass
        except _Slow:
            pytest.fail(f"a {len(body)}-character line took more than 20 s")


# ---- integers in other spellings ---------------------------------------------------------------
@pytest.mark.parametrize("spelled", ["0x" + "f" * 5000, "0" + "7" * 5000, "0b" + "1" * 20000, "1" + ":59" * 2000,
                                     "9_" * 3000 + "9", "-0x" + "f" * 5000, "+" + "9" * 5000, "0x" + "f" * 17])
def test_yaml_integers_past_the_digit_bound_are_refused_in_every_spelling(spelled):
    with pytest.raises(InputError, match=f"more than {limits.MAX_INT_DIGITS}"):
        _within(10, parse_yaml, f"a: {spelled}\n", "t.yaml")


def test_yaml_integers_within_the_bound_read_as_before():
    assert parse_yaml("a: [0x10, 017, 0b101, '1', 1:30, 1_000, 0x" + "0" * 5000 + "1, 18446744073709551615]", "t") == \
        {"a": [16, 15, 5, "1", 90, 1000, 1, 18446744073709551615]}


def test_a_hex_integer_in_a_topology_is_one_line_not_a_crash(tmp_path):
    import yaml

    doc = yaml.safe_dump(hc._base_doc()).replace("sockets: 1", "sockets: 0x" + "f" * 5000)
    p = _write(tmp_path, "t.yaml", doc)
    _one_line(run_cli("show", p), p)


@pytest.mark.parametrize("depth,ok", [(limits.MAX_DEPTH, True), (limits.MAX_DEPTH + 1, False)])
def test_json_and_yaml_count_nesting_alike(depth, ok):
    nested = "[" * (depth - 1) + "1" + "]" * (depth - 1)
    for parse, text in ((parse_json, '{"a": ' + nested + "}"), (parse_yaml, "a: " + nested + "\n")):
        if ok:
            assert parse(text, "t")
        else:
            with pytest.raises(InputError, match="nested deeper"):
                parse(text, "t")


# ---- expansions ----------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20000), st.integers(0, 3000)), max_size=40))
def test_cpu_lists_are_bounded_by_their_result_before_they_are_expanded(spans):
    text = ",".join(f"{lo}-{lo + w}" if w else str(lo) for lo, w in spans)
    want = sorted({c for lo, w in spans for c in range(lo, lo + w + 1)})
    if want and want[-1] >= limits.MAX_CPUS:
        with pytest.raises(ValueError):
            parse_cpulist(text)
    else:
        assert parse_cpulist(text) == want


def test_many_wide_cpu_ranges_and_huge_masks_cost_nothing():
    assert _within(5, parse_cpulist, ",".join(["0-16383"] * 20000)) == list(range(limits.MAX_CPUS))
    with pytest.raises(ValueError):
        _within(5, parse_cpulist, ",".join(f"{i * 2_000_000}-{i * 2_000_000 + 999_999}" for i in range(64)))
    with pytest.raises(ValueError):
        _within(5, cpumask_to_list, "f" * 100_000)
    assert cpumask_to_list("f" * (limits.MAX_CPUS // 4)) == list(range(limits.MAX_CPUS))


def test_select_free_ranges_are_bounded(tmp_path):
    r = run_cli("select", "example:hgx-h100", "--count", "2", "--free", "0-1000000,2000000-3000000")
    assert r.code in (1, 2) and "--free" in r.stderr and r.stderr.count("\n") <= 5


# ---- the PCI tree and other meanings -------------------------------------------------------------
def _validate(doc):
    notes = []
    validate_document(doc, "t.json", saved=True, report=notes.append)
    return notes


@pytest.mark.parametrize("change,needle", [
    (lambda d: (d["switches"][0].update(parent="pci0000:16"), d["switches"][1].update(parent="0000:17:00.0")), "cycle"),
    (lambda d: d["gpus"][0].update(parent=d["gpus"][0]["pci_bus_id"]), "is the GPU itself"),
    (lambda d: d["switches"][0].update(parent="0000:17:00.0"), "is the switch itself"),
    (lambda d: d["gpus"][1].update(uuid="GPU-0"), "gpus[1].uuid 'GPU-0' is also gpus[0]'s"),
    (lambda d: d["nics"].append(dict(d["nics"][0], pci_bus_id="0000:1d:00.0")), "nics[1].name 'mlx5_0' is also"),
    (lambda d: d["switches"].append(dict(d["switches"][0], numa_node=1)), "switches[2].id"),
    (lambda d: d["numa_nodes"].append(dict(d["numa_nodes"][0], cpus="16-31")), "numa_nodes[1].id"),
    (lambda d: d["switches"].append({"id": "0000:1a:00.0", "kind": "pcie", "parent": "pci0000:16"}), "gpus[2]'s id"),
])
def test_pci_trees_and_identities_that_mean_nothing_are_refused(change, needle):
    d = hc._base_doc()
    change(d)
    with pytest.raises(InputError, match=re.escape(needle)):
        _validate(d)


@pytest.mark.parametrize("depth,ok", [(limits.MAX_PCI_DEPTH - 2, True), (limits.MAX_PCI_DEPTH, False), (4000, False)])
def test_pci_depth_is_bounded_on_load(depth, ok):
    d = hc._deep_pci_doc(hc._base_doc(), depth)   # + the host bridge and the device: depth + 2 levels
    if ok:
        _validate(d)
    else:
        with pytest.raises(InputError, match=f"more than {limits.MAX_PCI_DEPTH}"):
            _validate(d)


def test_the_deepest_accepted_tree_runs_through_every_planner(tmp_path):
    p = _write(tmp_path, "deep.json", hc._deep_pci_doc(hc._base_doc(), limits.MAX_PCI_DEPTH - 2))
    for cmd in (["predict", p], ["rings", p], ["trees", p, "--nodes", "2"], ["show", p, "--format", "nccl-xml"],
                ["show", p, "--format", "tree"], ["paths", p]):
        r = run_cli(*cmd)
        assert r.code == 0, (cmd, r.stderr)


@pytest.mark.parametrize("change,field,after", [
    (lambda d: d["gpus"][0].update(numa_node=7), "gpus[0].numa_node", lambda d: d["gpus"][0]["numa_node"] is None),
    (lambda d: d["numa_nodes"][0].update(distances=[10, 21, 21]), "numa_nodes[0].distances",
     lambda d: d["numa_nodes"][0]["distances"] is None),
    (lambda d: d["links"].append({"a": "0000:18:00.0", "b": "0000:1c:00.0", "kind": "nvlink", "bw_GBps": 300.0,
                                  "count": 12}), "is a NIC", lambda d: len(d["links"]) == 8),
    (lambda d: d["links"][5].update(count=99999), "links[5]", lambda d: d["links"][5]["count"] is None),
    (lambda d: d["switches"].append(dict(d["switches"][0])), "a copy of switches[0]", lambda d: len(d["switches"]) == 2),
])
def test_meaning_errors_are_repaired_with_a_warning_naming_the_field(change, field, after):
    d = hc._base_doc()
    change(d)
    notes = _validate(d)
    assert any(field in n for n in notes), notes
    assert after(d)


def _xml(net="200000", width="16", numaid="0", count="18") -> str:
    gpu = ('<pci busid="0000:{b:02x}:00.0" class="0x030000" link_speed="16.0 GT/s PCIe" link_width="{w}">'
           '<gpu dev="{i}" sm="90" rank="{i}" gdr="1"><nvlink target="0000:{t:02x}:00.0" count="{c}" '
           'tclass="0x030000"/></gpu></pci>')
    gpus = "".join(gpu.format(b=0x18 + i, i=i, t=0x18 + (i ^ 1), w=width, c=count) for i in range(2))
    return (f'<system version="1"><cpu numaid="{numaid}" affinity="ffff" arch="x86_64" vendor="GenuineIntel">'
            f'<pci busid="0000:17:00.0" class="0x060400" link_speed="16.0 GT/s PCIe" link_width="16">{gpus}'
            f'<pci busid="0000:1c:00.0" class="0x020000" link_speed="16.0 GT/s PCIe" link_width="16"><nic>'
            f'<net name="mlx5_0" dev="0" speed="{net}" port="1" guid="0x1" gdr="1"/></nic></pci></pci></cpu></system>\n')


@pytest.mark.parametrize("kw,needle", [({"net": "-200000"}, "speed '-200000' is not a positive"),
                                       ({"net": "nan"}, "speed 'nan'"), ({"net": "inf"}, "speed 'inf'"),
                                       ({"width": "0"}, "link_width '0'"), ({"numaid": "-1"}, "numaid=-1"),
                                       ({"count": "99999999999999999999"}, "count 99999999999999999999")])
def test_nccl_xml_values_that_mean_nothing_are_warned_about(tmp_path, kw, needle):
    p = _write(tmp_path, "t.xml", _xml(**kw))
    r = run_cli("show", p)
    assert r.code == 0 and needle in r.stderr, r.stderr


def test_what_show_writes_from_an_absurd_nvlink_count_reads_back(tmp_path):
    p = _write(tmp_path, "t.xml", _xml(count="99999999999999999999"))
    out = tmp_path / "t.json"
    assert run_cli("show", p, "-o", out).code == 0
    r = run_cli("paths", out, "--format", "json")
    assert r.code == 0, r.stderr
    assert max(row["bw_GBps"] for row in r.json()["rows"]) < 1000


def test_rocm_rows_before_the_header_are_not_read_silently(tmp_path):
    p = _write(tmp_path, "r.txt", "GPU0 0 XGMI\nGPU1 XGMI 0\n=== ROCm System Management Interface ===\n"
                                  "=== Link Type between two GPUs ===\n       GPU0         GPU1\n")
    r = run_cli("show", p)
    assert "before any rocm-smi section header" in r.stderr and "header but no GPU rows" in r.stderr


def test_a_gpu_column_spelled_gpu_dash_1_is_a_gpu_not_a_nic(tmp_path):
    p = _write(tmp_path, "t.txt", TOPO.read_text().replace("GPU1 ", "GPU-1", 2))
    r = run_cli("predict", p)
    assert r.code == 0 and "8 ranks" in r.stdout, r.stdout
    assert "column 'GPU-1' is not spelled GPU<n>; read as GPU1" in run_cli("show", p).stderr


# ---- calibration profiles ------------------------------------------------------------------------
def test_profile_values_outside_their_physical_range_are_refused(tmp_path):
    from gpucomm.planners.collectives.calibrate import PROFILE_RANGES, profile_from_document

    for k, (lo, hi) in PROFILE_RANGES.items():
        for v in (lo, hi):
            profile_from_document({"schema": "gpucomm.calibration/v1", "parameters": {k: v}})
        for v in (lo * 0.5 if lo > 0 else -1e-9, hi * 2, 5e-324 if lo > 0 else float("nan"), float("inf")):
            with pytest.raises(InputError, match=k):
                profile_from_document({"schema": "gpucomm.calibration/v1", "parameters": {k: v}})
    p = _write(tmp_path, "p.json", {"schema": "gpucomm.calibration/v1", "parameters": {"alltoall_efficiency": 0}})
    _one_line(run_cli("predict", "example:hgx-h100", "--nodes", "8", "-c", "all_to_all", "--calibration", p), p)


# ---- output and terminal -------------------------------------------------------------------------
_ESC = "\x1b]0;pwned\x07\x1b[2J\x1b[31mRED\x9b1m\u202egnp.exe\r"
_RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escapes_doc(tmp_path) -> str:
    d = hc._base_doc()
    d["gpus"][0]["name"] += _ESC
    d["nics"][0]["name"] += _ESC
    d["host"]["hostname"] += _ESC
    d["links"] = [dict(l, a=d["nics"][0]["name"]) if l["a"] == "0000:1c:00.0" else l for l in d["links"]]
    d["warnings"] = ["w" + _ESC]
    return _write(tmp_path, "esc.json", d)


@settings(max_examples=100, deadline=None)
@given(st.text())
def test_printable_leaves_nothing_a_terminal_acts_on(text):
    from gpucomm.render.text import printable

    out = printable(text)
    assert not _RAW.search(out)
    assert out == text or len(out) > len(text)
    assert json.loads(json.dumps(out)) == out


@pytest.mark.parametrize("cmd", [["show"], ["show", "--format", "tree"], ["show", "--format", "matrix"], ["paths"],
                                 ["show", "--format", "dot"], ["doctor", "--from"]])
def test_names_with_escape_sequences_never_reach_a_pipe_raw(tmp_path, cmd):
    p = _escapes_doc(tmp_path)
    r = run_cli(*cmd, p)
    assert r.code in (0, 5), r.stderr
    assert not _RAW.search(r.stdout) and not _RAW.search(r.stderr)
    assert "\\u001b" in r.stdout + r.stderr or cmd[0] == "doctor"   # doctor names no device when all is well


@pytest.mark.parametrize("cmd", [["show"], ["paths"], ["show", "--format", "tree"]])
def test_names_with_escape_sequences_never_reach_a_terminal_raw(tmp_path, cmd):
    import pty

    p = _escapes_doc(tmp_path)
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "gpucomm", *cmd, p], stdin=slave, stdout=slave, stderr=slave,
                            env=dict(os.environ, COLUMNS="200", TERM="xterm-256color"))
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=60)
    os.close(master)
    text = out.decode("utf-8", "replace")
    assert proc.returncode == 0 and "\\u001b" in text, text[-500:]
    # rich's own colours are escape sequences too: only the name's are checked for
    assert not re.search("\x1b\\][^\x07]*\x07|\x1b\\[2J|\u202e|\x9b|\x1b\\[31mRED", text)


def test_warnings_of_a_document_are_capped_as_documented(tmp_path):
    p = _write(tmp_path, "w.json", dict(hc._base_doc(), warnings=[f"warning {i}" for i in range(300_000)]))
    r = _within(60, run_cli, "show", p)
    shown = [l for l in r.stderr.splitlines() if l.startswith("gpucomm: warning: ")]
    assert len(shown) == limits.MAX_WARNINGS + 1
    assert shown[-1].endswith(f"more than {limits.MAX_WARNINGS} warnings; 299800 more are left out")


def test_output_to_a_fifo_nobody_reads_is_refused_at_once(tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    r = _within(20, run_cli, "show", "example:hgx-h100", "-o", fifo)
    _one_line(r, fifo)
    assert "nobody is reading" in r.stderr
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    import time

    for _ in range(100):   # cat has the FIFO open once a non-blocking open for writing succeeds
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            break
        except OSError:
            time.sleep(0.05)
    reader.kill()
    reader.wait()


@pytest.mark.parametrize("argv", [["show", "{in}", "--format", "json", "-o", "{in}", "--force"],
                                  ["predict", "example:hgx-h100", "--compare", "{run}", "--format", "json", "-o", "{run}",
                                   "--force"]])
def test_an_output_that_is_one_of_the_inputs_is_refused_even_with_force(tmp_path, argv):
    src = _write(tmp_path, "in.json", hc._base_doc())
    run = _write(tmp_path, "run.txt", (CAPTURES / "nccltests" / "09_h100-x8_1node_allreduce_cluster01.txt").read_text())
    argv = [a.replace("{in}", src).replace("{run}", run) for a in argv]
    victim = src if src in argv else run
    before = open(victim, "rb").read()
    r = run_cli(*argv)
    _one_line(r, victim)
    assert "one of this run's inputs" in r.stderr
    assert open(victim, "rb").read() == before
    o = argv.index("-o") + 1
    assert run_cli(*argv[:o], str(tmp_path / "other.json"), *argv[o + 1:]).code == 0


@pytest.mark.parametrize("mode", ["w:gz", "w:xz", "w:bz2", "w"])
def test_snapshots_in_every_compression_load_from_a_path_and_from_stdin(tmp_path, mode):
    p = tmp_path / "snap.tar"
    with tarfile.open(p, mode) as tf:
        tf.add(hc.SMALL_HOST, arcname="snap")
    r = run_cli("show", p, "--format", "json")
    assert r.code == 0, r.stderr
    with open(p, "rb") as f:
        s = subprocess.run([sys.executable, "-m", "gpucomm", "show", "-", "--format", "json"], stdin=f,
                           capture_output=True, timeout=120)
    assert s.returncode == 0, s.stderr
    assert json.loads(s.stdout)["gpus"] == r.json()["gpus"]


@pytest.mark.parametrize("proto", ["^LL,LL128,Simple", "allreduce:^ll,ll128,simple"])
def test_nccl_proto_leaving_nothing_is_refused_as_nccl_refuses_it(monkeypatch, proto):
    monkeypatch.setenv("NCCL_PROTO", proto)
    r = run_cli("predict", "example:hgx-h100", "-c", "all_reduce")
    assert r.code == 4 and "No algorithm/protocol available" in r.stderr, (r.code, r.stderr)
    monkeypatch.setenv("NCCL_PROTO", "^LL128")
    assert run_cli("predict", "example:hgx-h100", "-c", "all_reduce").code == 0


@pytest.mark.parametrize("cmd", [["predict", "example:hgx-h100"], ["rings", "example:hgx-h100"],
                                 ["trees", "example:hgx-h100"], ["plan", "example:hgx-h100", "--emit", "env"],
                                 ["calibrate", "example:hgx-h100", "x.txt"], ["synth", "--node", "example:hgx-h100"]])
@pytest.mark.parametrize("past", [1, 10 ** 20])
def test_nodes_has_an_upper_bound(cmd, past):
    bound = limits.MAX_HOSTS if cmd[0] == "synth" else limits.MAX_NODES   # synth: hosts of a cluster
    r = run_cli(*cmd, "--nodes", str(bound + past))
    assert r.code == 2 and str(bound) in r.stderr, (r.code, r.stderr)


def test_limits_doc_states_every_bound():
    text = (ROOT / "docs" / "LIMITS.md").read_text()
    for value in (limits.MAX_HOST_GPUS, limits.MAX_GPUS, limits.MAX_HOST_NICS, limits.MAX_NICS, limits.MAX_SWITCHES, limits.MAX_PCI_DEPTH, limits.MAX_MATRIX_COLUMNS,
                  limits.MAX_CPUS, limits.MAX_NVLINKS, limits.MAX_HOSTS, limits.MAX_NODES, limits.MAX_DEPTH,
                  limits.MAX_WARNINGS, limits.MAX_INT_DIGITS):
        assert f"| {value:,}" in text or f"{value:,} " in text, value
