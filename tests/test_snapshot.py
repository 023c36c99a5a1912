"""Snapshots: write exactly what the probes read, replay it to the same document, refuse unsafe
archives; every recorded fixture host loads."""
from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support import CAPTURES, HOSTS
from gpucomm.probes.sources import nvml
from gpucomm.probes.sources import snapshot
from gpucomm.probes.errors import InputError
from gpucomm.probes.sources.host import Host, RecordedRunner
from gpucomm.probes.model import dumps_json
from gpucomm.probes.sources.probe import probe_host
from gpucomm.probes.formats.smi_topo import parse_topo_text
from support import two_socket_switch_tree, validate
from test_nvml import fake_nvml, gpu



def same_document(live: dict, loaded: dict) -> None:
    """Equal except provenance and the wording of why nvml/smi gave nothing."""
    a, b = json.loads(dumps_json(live)), json.loads(dumps_json(loaded))
    assert b["host"]["provenance"] in ("snapshot", "fixture")
    a["host"]["provenance"] = b["host"]["provenance"]
    for x, y in zip(a["sources"], b["sources"]):
        assert (x["name"], x["status"]) == (y["name"], y["status"])
        if x["status"] == "unavailable":
            y["detail"] = x["detail"]
    assert len(a["sources"]) == len(b["sources"])
    assert a == b


def synthetic_host(root: Path) -> Host:
    two_socket_switch_tree(root)
    devs = [gpu("0000:1a:00.0", links=[(True, "0000:1b:00.0", 0)] * 4),
            gpu("0000:1b:00.0", links=[(True, "0000:1a:00.0", 0)] * 4),
            gpu("0000:20:00.0"), gpu("0000:98:00.0", numa=1, aff=(0xC,))]
    return Host(root=root, nvml=nvml.LiveNvml(fake_nvml(devs)))


def test_round_trip_directory_and_targz(tmp_path):
    host = synthetic_host(tmp_path / "node")
    (tmp_path / "node/sys/devices/pci0000:17/0000:17:01.0/resource").write_text("not read by any probe\n")
    live = probe_host(host)
    validate(live)
    assert live["matrix"]["GPU0"]["GPU1"] == "NV4"
    res = snapshot.write_snapshot(host, tmp_path / "snap")
    assert res["kind"] == "directory" and res["files"] > 20 and res["document"] == live
    out = tmp_path / "snap"
    assert (out / "nvml.json").is_file() and (out / "meta.json").is_file() and not (out / "commands").exists()
    assert not (out / "sys/devices/pci0000:17/0000:17:01.0/resource").exists()      # only what probes read
    link = out / "sys/bus/pci/devices/0000:1a:00.0"
    assert link.is_symlink() and not os.path.isabs(os.readlink(link))
    assert os.readlink(out / "sys/class/infiniband/mlx5_0").startswith("../../devices/pci0000:17/")
    meta = json.loads((out / "meta.json").read_text())
    assert meta["schema"] == "gpucomm.snapshot/v1" and meta["generated_by"] == "gpucomm snapshot"
    assert meta["sockets"] == 2 and meta["collected_at"] is None
    same_document(live, snapshot.load_snapshot(out))

    t1, t2 = tmp_path / "a.tar.gz", tmp_path / "b.tgz"
    snapshot.write_snapshot(host, t1)
    snapshot.write_snapshot(host, t2, name="a")
    assert t1.read_bytes() == t2.read_bytes()   # deterministic archive
    with tarfile.open(t1) as tf:
        names = tf.getnames()
    assert all(n == "a" or n.startswith("a/") for n in names)
    same_document(live, snapshot.load_snapshot(t1))


def test_round_trip_live_machine(tmp_path):
    live = probe_host(Host())
    snapshot.write_snapshot(Host(), tmp_path / "me.tar.gz")
    loaded = snapshot.load_snapshot(tmp_path / "me.tar.gz")
    validate(loaded)
    same_document(live, loaded)
    nv = next(s for s in loaded["sources"] if s["name"] == "nvml")
    if nv["status"] == "unavailable":
        assert "no nvml.json in the snapshot" in nv["detail"]


RESNAPSHOT = {"hgx-h100", "gb200-tray", "dgx1-v100", "cpu-only"}  # re-recording every host is slow I/O


@pytest.mark.parametrize("name", sorted(p.name for p in HOSTS.iterdir() if (p / "meta.json").is_file())
                         if HOSTS.is_dir() else [])
def test_fixture_hosts_load_and_re_snapshot(name, tmp_path):
    root = HOSTS / name
    doc = snapshot.load_snapshot(root)
    validate(doc)
    assert not any(s["status"] == "error" for s in doc["sources"]), doc["sources"]
    meta = json.loads((root / "meta.json").read_text())
    if meta.get("capture") and "degraded" not in name and "mismatch" not in name:
        ref = parse_topo_text((CAPTURES / meta["capture"]).read_text())["matrix"]
        subset = (meta.get("capture_compare") or {}).get("devices")   # only these are comparable
        for r, row in ref.items():
            for c, v in row.items():
                if subset and (r not in subset or c not in subset):
                    continue
                assert doc["matrix"][r][c] == v, (r, c)
    if name not in RESNAPSHOT:
        return
    # a snapshot of a recorded host replays to the same document
    host = Host(root=root, runner=RecordedRunner(root / "commands"),
                nvml=nvml.RecordedNvml(root / "nvml.json") if (root / "nvml.json").is_file() else
                nvml.NoNvml("no nvml.json in the snapshot"), provenance="snapshot")
    snapshot.write_snapshot(host, tmp_path / "again")
    same_document(doc, snapshot.load_snapshot(tmp_path / "again"))


def test_recorded_nvidia_smi_without_tree(tmp_path):
    cap = CAPTURES / "topo/17_h100-sxm-x8_12nic.txt"
    (tmp_path / "commands").mkdir()
    (tmp_path / "commands/nvidia-smi_topo_m.txt").write_text(cap.read_text())
    (tmp_path / "commands/nvidia-smi_nvlink_s.txt").write_text((CAPTURES / "extra/04_h100-sxm-x8_nvlink-status-gpu0.txt").read_text())
    (tmp_path / "sys/devices/system/node/node0").mkdir(parents=True)
    (tmp_path / "sys/devices/system/node/node0/cpulist").write_text("0-55\n")
    (tmp_path / "meta.json").write_text(json.dumps({"schema": "gpucomm.snapshot/v1", "provenance": "fixture",
                                                    "hostname": "h100-box"}))
    doc = snapshot.load_snapshot(tmp_path)
    validate(doc)
    assert doc["host"]["provenance"] == "fixture" and doc["host"]["hostname"] == "h100-box"
    assert doc["matrix"] == parse_topo_text(cap.read_text())["matrix"]
    smi = next(s for s in doc["sources"] if s["name"] == "smi")
    assert smi["status"] in ("ok", "partial") and "nvlink -s read" in smi["detail"]
    g0 = next(g for g in doc["gpus"] if g["index"] == 0)
    assert len(g0["nvlink"]) == 18 and g0["nvlink"][0]["bw_GBps"] == pytest.approx(26.562)


def test_broken_meta_is_a_warning(tmp_path):
    (tmp_path / "sys/devices/system/node/node0").mkdir(parents=True)
    (tmp_path / "sys/devices/system/node/node0/cpulist").write_text("0-3\n")
    (tmp_path / "meta.json").write_text("{not json")
    doc = snapshot.load_snapshot(tmp_path)
    assert any("meta.json unreadable" in w for w in doc["warnings"])


def test_not_a_snapshot(tmp_path):
    with pytest.raises(InputError, match="not a snapshot"):
        snapshot.load_snapshot(tmp_path)
    (tmp_path / "junk.tar.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(InputError, match="archive"):
        snapshot.load_snapshot(tmp_path / "junk.tar.gz")
    with pytest.raises(InputError, match="no such file"):
        snapshot.load_snapshot(tmp_path / "missing.tar.gz")


def test_truncated_archive(tmp_path):
    host = synthetic_host(tmp_path / "node")
    snapshot.write_snapshot(host, tmp_path / "s.tar.gz")
    data = (tmp_path / "s.tar.gz").read_bytes()
    (tmp_path / "t.tar.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="damaged archive|not a readable"):
        snapshot.load_snapshot(tmp_path / "t.tar.gz")


def test_write_refuses_non_empty_directory(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x/keep").write_text("mine")
    with pytest.raises(InputError, match="not an empty directory"):
        snapshot.write_snapshot(synthetic_host(tmp_path / "node"), tmp_path / "x")
    assert (tmp_path / "x/keep").read_text() == "mine"


# --------------------------------------------------------------------------------------------
# unsafe archives
def make_tar(path: Path, members: list) -> Path:
    """members: (name, kind, payload) with kind file|dir|sym|hard|chr|fifo."""
    with tarfile.open(path, "w:gz") as tf:
        for name, kind, payload in members:
            ti = tarfile.TarInfo(name)
            if kind == "file":
                data = payload.encode() if isinstance(payload, str) else payload
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
                continue
            ti.type = {"dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE,
                       "chr": tarfile.CHRTYPE, "fifo": tarfile.FIFOTYPE}[kind]
            if kind in ("sym", "hard"):
                ti.linkname = payload
            tf.addfile(ti)
    return path


META = ("snap/meta.json", "file", '{"schema": "gpucomm.snapshot/v1"}')


@pytest.mark.parametrize("members,msg", [
    ([META, ("/etc/passwd", "file", "x")], "unsafe member name"),
    ([META, ("snap/../../evil", "file", "x")], "unsafe member name"),
    ([META, ("snap/sys", "sym", "/sys")], "leaves the archive"),
    ([META, ("snap/sys", "sym", "../../..")], "leaves the archive"),
    ([META, ("snap/a", "dir", None), ("snap/a/s", "sym", ".."), ("snap/a/s/t", "sym", "../..")], "outside the archive"),
    ([META, ("snap/h", "hard", "snap/meta.json")], "hard link"),
    ([META, ("snap/null", "chr", None)], "device file"),
    ([META, ("snap/p", "fifo", None)], "FIFO"),
    ([META, META], "duplicate member"),
    ([("a/meta.json", "file", "{}"), ("b/meta.json", "file", "{}")], "not a snapshot"),
])
def test_unsafe_archives_rejected(tmp_path, members, msg):
    arc = make_tar(tmp_path / "bad.tar.gz", members)
    with pytest.raises(InputError, match=msg):
        snapshot.load_snapshot(arc)
    assert not (tmp_path.parent / "evil").exists()


def test_size_limits(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshot, "MAX_FILE_BYTES", 100)
    arc = make_tar(tmp_path / "big.tar.gz", [META, ("snap/sys/x", "file", "y" * 200)])
    with pytest.raises(InputError, match="limit 100"):
        snapshot.load_snapshot(arc)
    monkeypatch.setattr(snapshot, "MAX_FILE_BYTES", 1000)
    monkeypatch.setattr(snapshot, "MAX_TOTAL_BYTES", 300)
    arc = make_tar(tmp_path / "many.tar.gz", [META] + [(f"snap/sys/f{i}", "file", "z" * 90) for i in range(5)])
    with pytest.raises(InputError, match="expands to more than"):
        snapshot.load_snapshot(arc)


_seg = st.sampled_from(["snap", "sys", "..", ".", "a", "b", "", "x y", "devices"])


@given(st.lists(st.tuples(st.lists(_seg, min_size=1, max_size=4).map("/".join),
                          st.sampled_from(["file", "dir", "sym"]),
                          st.lists(_seg, min_size=1, max_size=4).map("/".join)), max_size=8),
       st.booleans())
@settings(max_examples=60, deadline=None)
def test_fuzz_safe_extract_stays_inside(tmp_path_factory, members, absolute):
    d = tmp_path_factory.mktemp("ex")
    mem = [(n, k, ("/" + p if absolute else p) if k == "sym" else (p if k == "file" else None)) for n, k, p in members]
    arc = make_tar(d / "f.tar.gz", [META] + mem)
    dest = d / "out"
    dest.mkdir()
    try:
        snapshot.safe_extract(arc, dest)
    except InputError:
        pass
    root = os.path.realpath(dest)
    for dirpath, dirnames, filenames in os.walk(dest):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            real = os.path.realpath(p)
            assert real == root or real.startswith(root + os.sep), (p, real)
    assert sorted(os.listdir(d)) == ["f.tar.gz", "out"]
