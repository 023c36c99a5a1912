"""A corpus of hostile inputs through every input entry point of gpucomm, and its runner.

    python tests/hostile_corpus.py DIR [--run] [--only CLASS] [-j N]

writes the corpus under DIR (and with --run runs it, printing one line per case); the suite runs
it from tests/test_hostile.py.  Each case runs ``python -m gpucomm ...`` in a subprocess under
``ulimit -v`` (RLIMIT_AS) with its own TMPDIR and a wall-clock limit, and passes when it

* exits 0 (with a warning when the case expects one), or exits 1 with exactly one line on stderr,
  ``gpucomm: error: ...``, naming the file (never 123, never a traceback);
* stays inside the time and memory bounds;
* leaves nothing in its TMPDIR and no temporary file next to its outputs, and did not change an
  input it was told not to change.

The classes follow the issue "never quietly wrong, never unbounded, nothing lost": special files
and byte bombs, JSON/YAML structure (depth, digits, aliases, tags), wrong types and meanings in
topology documents, tool captures past the device limits, snapshot archives and directories,
Slurm hostlists and topology.conf, a misbehaving nvidia-smi, nccl-tests output and NCCL logs, and
output paths (symlinks, existing files, directories).

The second round (issue 29, :data:`ROUND2`) adds long lines through every reader, integers in
YAML's other spellings, deep PCI trees, CPU lists and --free ranges of many wide ranges, sizes at
the documented bounds, planted meaning errors, calibration profiles, and what reaches a terminal
(escape sequences in names, floods of warnings, FIFOs, NCCL_PROTO, nesting, snapshots on standard
input, outputs that are inputs); each of its cases runs within ROUND2_TIME seconds, ROUND2_AS bytes
of address space and ROUND2_RSS bytes of peak resident memory (read with wait4), docs/LIMITS.md.
"""
from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

from gpucomm.planners.measure.world import NEEDS_TORCH

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "fixtures" / "captures"
SMALL_HOST = ROOT / "fixtures" / "hosts" / "a100-pcie-4x-nvbridge"
MEMORY_LIMIT = 2 * 1024 ** 3      # bytes of address space per case (ulimit -v)
TIME_LIMIT = 60.0                 # seconds per case (a hung nvidia-smi is killed after 15)
# The second round (issue 29): every case of its classes within these bounds.
ROUND2_TIME = 30.0                # seconds
ROUND2_AS = 4 * 1024 ** 3         # bytes of address space (ulimit -v)
ROUND2_RSS = 1024 ** 3            # bytes of peak resident memory
ROUND2 = ("long-lines", "int-spellings", "deep-pci", "expansions", "big-sizes", "meanings", "calibration", "terminal")

# The commands that read a topology (TOPO / --from / --node / --save); {t} is the input.
TOPO_COMMANDS: Dict[str, List[str]] = {
    "show": ["show", "{t}"],
    "show-json": ["show", "{t}", "--format", "json"],
    "probe-from": ["probe", "--from", "{t}", "--format", "yaml"],
    "paths": ["paths", "{t}"],
    "rings": ["rings", "{t}"],
    "trees": ["trees", "{t}", "--nodes", "2"],
    "predict": ["predict", "{t}"],
    "plan": ["plan", "{t}", "--nodes", "2", "--emit", "env"],
    "select": ["select", "{t}", "--count", "1"],
    "doctor": ["doctor", "--from", "{t}"],
    "diff": ["diff", "{t}", "example:hgx-h100"],
    "synth": ["synth", "--nodes", "4", "--node", "{t}"],
    "bench-save": ["bench", "collective", "--save", "{t}"],
}


@dataclass
class Case:
    id: str                         # CLASS/name@entry
    cls: str
    argv: List[str]
    names: List[str]                # one of these must appear in a one-line error
    env: Dict[str, str] = field(default_factory=dict)
    ok: tuple = (0, 1)              # exit codes that pass (doctor: 5 = problems found)
    warn: bool = False              # exit 0 must print a warning
    keep: List[str] = field(default_factory=list)    # files that must be unchanged afterwards
    grow: List[str] = field(default_factory=list)    # bench --save targets: unchanged if refused, else kept + added to
    no_tmp: List[str] = field(default_factory=list)  # directories that must hold no temporary file
    must_fail: bool = False         # exit 1 expected (a refusal)
    fast: bool = False              # part of the representative subset
    stdin: Optional[str] = None     # a file fed to standard input
    time_limit: float = 0.0         # seconds (0: TIME_LIMIT)
    mem_limit: int = 0              # bytes of address space (0: MEMORY_LIMIT)
    rss_limit: int = 0              # bytes of peak resident memory (0: unchecked)
    clean_out: bool = False         # no terminal control character on stdout or stderr
    max_err_lines: int = 0          # at most this many lines on stderr (0: unchecked)


# ============================================================================================
# Inputs
def _w(p: Path, data) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    p.write_bytes(data)
    return p


def _base_doc() -> dict:
    """A small valid topology: 4 GPUs in NVLink pairs on one PCIe switch, one NIC, 1 NUMA node."""
    bus = ["0000:18:00.0", "0000:19:00.0", "0000:1a:00.0", "0000:1b:00.0"]
    gpus = [{"index": i, "uuid": f"GPU-{i}", "name": "NVIDIA A100-SXM4-80GB", "pci_bus_id": b, "arch": "ampere",
             "compute_capability": "8.0", "memory_bytes": 85899345920, "numa_node": 0, "numa_affinity": [0],
             "cpu_affinity": "0-15", "pcie": {"gen": 4, "width": 16, "max_gen": 4, "max_width": 16},
             "nvlink": [{"link": 0, "state": "active", "remote": bus[i ^ 1], "version": 3, "bw_GBps": 25.0}],
             "mig": False, "vendor": "nvidia", "parent": "0000:17:00.0"} for i, b in enumerate(bus)]
    nics = [{"name": "mlx5_0", "netdev": "ib0", "pci_bus_id": "0000:1c:00.0", "numa_node": 0, "link_layer": "InfiniBand",
             "ports": [{"port": 1, "state": "ACTIVE", "rate_gbps": 200.0}], "guid": "0x1", "parent": "0000:17:00.0"}]
    links = [{"a": b, "b": "0000:17:00.0", "kind": "pcie", "bw_GBps": 24.0, "count": None, "gen": 4, "width": 16}
             for b in bus + ["0000:1c:00.0"]]
    links += [{"a": bus[i], "b": bus[i ^ 1], "kind": "nvlink", "bw_GBps": 300.0, "count": 12, "gen": None,
               "width": None} for i in (0, 2)]
    links.append({"a": "0000:17:00.0", "b": "pci0000:16", "kind": "pcie", "bw_GBps": 24.0, "count": None, "gen": 4,
                  "width": 16})
    return {"schema": "gpucomm.topology/v1",
            "host": {"hostname": "h", "os": None, "kernel": None, "driver_version": None, "cuda_version": None,
                     "cpu_vendor": "GenuineIntel", "cpu_model": "Intel(R) Xeon(R)", "cpu_arch": "x86_64",
                     "sockets": 1, "collected_at": None, "provenance": "json"},
            "sources": [{"name": "json", "status": "ok", "detail": ""}],
            "numa_nodes": [{"id": 0, "cpus": "0-15", "memory_bytes": 1 << 36, "distances": [10]}],
            "gpus": gpus, "nics": nics,
            "switches": [{"id": "0000:17:00.0", "kind": "pcie", "pci_bus_id": "0000:17:00.0", "parent": "pci0000:16",
                          "numa_node": 0},
                         {"id": "pci0000:16", "kind": "host_bridge", "pci_bus_id": None, "parent": "CPU0", "numa_node": 0}],
            "links": links, "matrix": {}, "warnings": []}


def _mutate(doc: dict, path: tuple, value) -> dict:
    d = json.loads(json.dumps(doc))
    cur = d
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value
    return d


# Wrong values for fields of every kind (sampled per field in the full corpus).
WRONG = ["x", -3, 1e308, None, True, [1], {"k": 1}]

FIELDS = [("host",), ("host", "sockets"), ("host", "cpu_model"), ("host", "provenance"), ("sources",), ("sources", 0),
          ("numa_nodes", 0), ("numa_nodes", 0, "id"), ("numa_nodes", 0, "cpus"), ("numa_nodes", 0, "distances"),
          ("numa_nodes", 0, "memory_bytes"), ("gpus", 0, "index"), ("gpus", 0, "pci_bus_id"), ("gpus", 0, "name"),
          ("gpus", 0, "compute_capability"), ("gpus", 0, "memory_bytes"), ("gpus", 0, "numa_node"),
          ("gpus", 0, "numa_affinity"), ("gpus", 0, "cpu_affinity"), ("gpus", 0, "pcie"), ("gpus", 0, "pcie", "gen"),
          ("gpus", 0, "nvlink"), ("gpus", 0, "nvlink", 0), ("gpus", 0, "nvlink", 0, "link"),
          ("gpus", 0, "nvlink", 0, "bw_GBps"), ("gpus", 0, "mig"), ("gpus", 0, "vendor"), ("gpus", 0, "parent"),
          ("nics", 0, "name"), ("nics", 0, "netdev"), ("nics", 0, "link_layer"), ("nics", 0, "ports"),
          ("nics", 0, "ports", 0, "rate_gbps"), ("nics", 0, "ports", 0, "port"), ("nics", 0, "pci_bus_id"),
          ("switches", 0, "id"), ("switches", 0, "kind"), ("switches", 0, "parent"), ("links", 0, "kind"),
          ("links", 0, "bw_GBps"), ("links", 5, "count"), ("links", 0, "gen"), ("matrix",), ("warnings",),
          ("net_interfaces",), ("pci_devices",), ("measured",)]


def _deep(n: int, open_: str, close: str, leaf: str = "1") -> str:
    return open_ * n + leaf + close * n


class _Corpus:
    def __init__(self, out: Path, full: bool) -> None:
        self.out = out
        self.full = full  # False: only the representative subset (cheap to write, quick to run)
        self.cases: List[Case] = []
        self.base = _base_doc()
        self.turn: Dict[str, int] = {}

    # ---- helpers --------------------------------------------------------------------------
    def path(self, *parts: str) -> Path:
        return self.out.joinpath(*parts)

    def topo(self, cls: str, name: str, target: str, entries: Optional[List[str]] = None, *, warn: bool = False,
             must_fail: bool = False, names: Optional[List[str]] = None, fast_entry: Optional[str] = "show") -> None:
        """A hostile topology input through the TOPO entry points (all of them in the full corpus)."""
        if entries is None:  # show, and three more entry points in turn (each class covers all of them)
            others = [e for e in TOPO_COMMANDS if e != "show"]
            k = self.turn.get(cls, 0)
            self.turn[cls] = k + 3
            entries = ["show"] + ([others[(k + j) % len(others)] for j in range(3)] if self.full else [])
        for e in entries:
            argv = [a.replace("{t}", target) for a in TOPO_COMMANDS[e]]
            ok = (0, 1, 5) if e in ("doctor", "diff") else (0, 1, 3, 4) if e in ("plan", "select", "rings", "trees", "predict") else (0, 1)
            grow = [target] if Path(target).is_file() and e == "bench-save" else []
            named = (names or [os.path.basename(target), target]) + [a for a in argv if a.startswith("--")]
            self.cases.append(Case(f"{cls}/{name}@{e}", cls, argv, named, ok=ok,
                                   warn=warn and e in ("show", "show-json", "probe-from"), must_fail=must_fail,
                                   grow=grow, fast=e == fast_entry))

    def case(self, cls: str, name: str, argv: List[str], names: List[str], **kw) -> None:
        self.cases.append(Case(f"{cls}/{name}", cls, argv, names, **kw))

    def doc_file(self, cls: str, name: str, doc, fmt: str = "json") -> str:
        p = self.path(cls, name + "." + fmt)
        if fmt == "json":
            _w(p, json.dumps(doc, allow_nan=True))
        else:
            import yaml

            _w(p, yaml.safe_dump(doc))
        return str(p)

    # ---- classes ----------------------------------------------------------------------------
    def special_files(self) -> None:
        cls = "special-files"
        d = self.path(cls)
        d.mkdir(parents=True, exist_ok=True)
        fifo = d / "fifo.json"
        os.mkfifo(fifo)
        (d / "zero-link.json").symlink_to("/dev/zero")
        (d / "dir.json").mkdir()
        big = d / "sparse-100MB.json"
        with open(big, "wb") as f:
            f.truncate(100 * 1024 * 1024)
        _w(d / "empty.json", b"")
        _w(d / "binary.txt", os.urandom(4096))
        _w(d / "latin1.txt", "GPU0 \xe9\xe8 X\n".encode("latin-1") * 50 + bytes(range(128, 256)) * 20)
        _w(d / "utf16.txt", (CAPTURES / "topo" / "17_h100-sxm-x8_12nic.txt").read_text().encode("utf-16"))
        for name in ("/dev/zero", "/dev/urandom", str(fifo), str(d / "zero-link.json"), str(d / "dir.json"),
                     str(big), str(d / "empty.json"), str(d / "binary.txt"), str(d / "latin1.txt"), str(d / "utf16.txt"),
                     str(d / "missing.json")):
            short = os.path.basename(name)
            self.topo(cls, short, name, must_fail=short not in ("utf16.txt",))

    def json_structure(self) -> None:
        cls = "json-structure"
        d = self.path(cls)
        docs = {
            "deep-list-100k": _deep(100_000, "[", "]"),
            "deep-dict-100k": '{"a":' * 100_000 + "1" + "}" * 100_000,
            "deep-in-doc": json.dumps(self.base)[:-1] + ', "extra": ' + _deep(200, "[", "]") + "}",
            "int-5000-digits": json.dumps(self.base).replace('"sockets": 1', '"sockets": ' + "9" * 5000),
            "int-30-digits": json.dumps(self.base).replace('"sockets": 1', '"sockets": ' + "9" * 30),
            "nan-everywhere": json.dumps(self.base).replace("24.0", "NaN").replace("300.0", "Infinity"),
            "top-level-list": "[1, 2, 3]",
            "schema-missing": "{}",
            "truncated": json.dumps(self.base)[:500],
            "float-1e400": json.dumps(self.base).replace("300.0", "1e400"),
        }
        for name, text in docs.items():
            p = _w(d / f"{name}.json", text)
            self.topo(cls, name, str(p), warn=name in ("nan-everywhere", "float-1e400"),
                      must_fail=name in ("deep-list-100k", "deep-dict-100k", "deep-in-doc", "int-5000-digits",
                                         "int-30-digits", "top-level-list", "schema-missing", "truncated"))

    def yaml_structure(self) -> None:
        cls = "yaml-structure"
        d = self.path(cls)
        bomb = ["schema: gpucomm.topology/v1", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
        for i in range(1, 10):
            bomb.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
        import yaml

        base_yaml = yaml.safe_dump(self.base)
        docs = {
            "alias-bomb": "\n".join(bomb) + "\n",
            "deep-flow-100k": "schema: gpucomm.topology/v1\nx: " + _deep(100_000, "[", "]") + "\n",
            "deep-block": "schema: gpucomm.topology/v1\n" + "".join("  " * i + f"k{i}:\n" for i in range(300)) + "  " * 300 + "v\n",
            "int-5000-digits": base_yaml.replace("sockets: 1", "sockets: " + "9" * 5000),
            "recursive-alias": "schema: gpucomm.topology/v1\ngpus: &g [*g]\n",
            "python-tag": "schema: gpucomm.topology/v1\ngpus: !!python/object/apply:os.system ['echo pwned']\n",
            "binary-timestamp-set": base_yaml.replace("hostname: h", "hostname: !!binary aGVsbG8=")
                                             .replace("collected_at: null", "collected_at: 2024-01-01 10:00:00")
                                             + "extra: !!set {a, b}\n",
            "nan-link-bw": base_yaml.replace("bw_GBps: 300.0", "bw_GBps: .nan"),
            "int-keys": base_yaml + "1: one\n? null\n: none\n",
        }
        for name, text in docs.items():
            p = _w(d / f"{name}.yaml", text)
            self.topo(cls, name, str(p), warn=name in ("binary-timestamp-set", "nan-link-bw", "int-keys"),
                      must_fail=name in ("alias-bomb", "deep-flow-100k", "deep-block", "int-5000-digits",
                                         "recursive-alias", "python-tag"))

    def wrong_types(self) -> None:
        cls = "wrong-types"
        values = WRONG if self.full else ["x", None]
        entries = list(TOPO_COMMANDS)
        k = 0
        for f in FIELDS:
            for v in values:  # every field with every wrong value, through the entry points in turn
                name = ".".join(map(str, f)) + "=" + json.dumps(v)[:12]
                target = self.doc_file(cls, name.replace("/", "_"), _mutate(self.base, f, v))
                e = entries[k % len(entries)] if self.full else "show-json"
                k += 1
                self.topo(cls, name, target, [e], fast_entry="show-json" if v == "x" and e == "show-json" else None)

    def semantics(self) -> None:
        cls = "semantics"
        b = self.base
        bad = {
            "all-bw-nan": _mutate_all(b, "links", "bw_GBps", float("nan")),
            "negative-count": _mutate(b, ("links", 5, "count"), -12),
            "negative-bw": _mutate(b, ("links", 5, "bw_GBps"), -300.0),
            "negative-nvlink-bw": _mutate(b, ("gpus", 0, "nvlink", 0, "bw_GBps"), -25.0),
            "colliding-bus-ids": _mutate(b, ("gpus", 1, "pci_bus_id"), "0000:18:00.0"),
            "duplicate-index": _mutate(b, ("gpus", 1, "index"), 0),
            "link-to-missing-gpu": _append(b, "links", {"a": "0000:18:00.0", "b": "0000:99:00.0", "kind": "nvlink",
                                                         "bw_GBps": 300.0, "count": 12}),
            "self-link": _append(b, "links", {"a": "0000:18:00.0", "b": "0000:18:00.0", "kind": "nvlink",
                                              "bw_GBps": 300.0, "count": 12}),
            "unknown-link-kind": _append(b, "links", {"a": "0000:18:00.0", "b": "0000:1a:00.0", "kind": "warp-drive",
                                                      "bw_GBps": 9000.0}),
            "nv-5000-digits-matrix": _mutate(b, ("matrix",), {"GPU0": {"GPU1": "NV" + "9" * 5000}}),
            "absurd-rate": _mutate(b, ("nics", 0, "ports", 0, "rate_gbps"), 1e300),
            "gpus-700": _mutate(b, ("gpus",), [dict(b["gpus"][0], index=i, pci_bus_id=None) for i in range(700)]),
        }
        for name, doc in bad.items():
            target = self.doc_file(cls, name, doc)
            self.topo(cls, name, target, warn=name not in ("negative-bw", "colliding-bus-ids", "duplicate-index",
                                                          "gpus-700"),
                      must_fail=name in ("negative-bw", "colliding-bus-ids", "duplicate-index", "gpus-700"))

    def captures(self) -> None:
        cls = "captures"
        d = self.path(cls)
        n = 10_000
        header = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity\tNUMA Affinity\n"
        rows = "".join(f"GPU{i}\t" + "\t".join("X" if j == i else "SYS" for j in range(40)) + "\n" for i in range(40))
        wide = _w(d / "topo-10000-columns.txt", header + rows)
        nv = _w(d / "topo-nv5000.txt", "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV" + "9" * 5000 +
                "\t0-7\t0\nGPU1\tNV" + "9" * 5000 + "\t X \t0-7\t0\n")
        src = (CAPTURES / "topo" / "17_h100-sxm-x8_12nic.txt").read_text()
        junk = _w(d / "topo-8MB-junk.txt", src + ("GPU9 garbage line with X and SYS " * 3 + "\n") * 80_000)
        gpus = "".join(f'<pci busid="0000:{i // 256:02x}:{i % 256:02x}.0" class="0x030000" link_speed="16.0 GT/s PCIe" '
                       f'link_width="16"><gpu dev="{i}" sm="90" rank="{i}" gdr="1"/></pci>' for i in range(n))
        xml = _w(d / "xml-10000-gpus.xml", f'<system version="1"><cpu numaid="0" affinity="ff" arch="x86_64" '
                 f'vendor="GenuineIntel">{gpus}</cpu></system>\n')
        ent = _w(d / "xml-entities.xml", '<?xml version="1.0"?><!DOCTYPE s [<!ENTITY a "aaaaaaaaaa">'
                 '<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;"><!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">]>'
                 '<system version="1"><cpu numaid="&c;"/></system>\n')
        ext = _w(d / "xml-external.xml", '<?xml version="1.0"?><!DOCTYPE s [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
                 '<system version="1"><cpu numaid="&x;"/></system>\n')
        deep = _w(d / "xml-deep.xml", '<system version="1">' + "<pci>" * 100_000 + "</pci>" * 100_000 + "</system>\n")
        rocm = _w(d / "rocm-2000-gpus.txt", "============ ROCm System Management Interface ============\n"
                  "=============== Link Type between two GPUs ===============\n       "
                  + " ".join(f"GPU{i}" for i in range(2000)) + "\n"
                  + "".join(f"GPU{i} " + " ".join("0" if j == i else "XGMI" for j in range(20)) + "\n" for i in range(20)))
        cases = [(wide, True), (nv, False), (junk, False), (xml, True), (ent, True), (ext, True), (deep, True),
                 (rocm, True)]
        for p, fail in cases:
            self.topo(cls, p.name, str(p), must_fail=fail)
        # gpucomm's own pictures read back (table, tree, dot): refused
        for fmt in ("table", "tree", "dot"):
            pic = d / f"picture-{fmt}.json"
            self.case(cls, f"render-{fmt}", ["show", "example:hgx-h100", "--format", fmt, "-o", str(pic)], [str(pic)],
                      ok=(0,))
        for fmt in ("table", "tree", "dot"):
            pic = d / f"picture-{fmt}.json"
            self.case(cls, f"picture-{fmt}-as-input", ["show", str(pic)], [str(pic)], must_fail=True, fast=fmt == "table")

    def snapshots(self) -> None:
        cls = "snapshots"
        d = self.path(cls)
        d.mkdir(parents=True, exist_ok=True)

        def tar(name: str, members: Callable[[tarfile.TarFile], None], fmt=tarfile.GNU_FORMAT) -> Path:
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
                members(tf)
            return _w(d / name, gzip.compress(buf.getvalue(), mtime=0))

        def add(tf, name, data=b"x", **kw):
            ti = tarfile.TarInfo(name)
            for k, v in kw.items():
                setattr(ti, k, v)
            if ti.type in (tarfile.REGTYPE, tarfile.AREGTYPE):
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
            else:
                tf.addfile(ti)

        archives = {
            "traversal.tar.gz": lambda tf: add(tf, "../../etc/evil"),
            "absolute.tar.gz": lambda tf: add(tf, "/tmp/evil"),
            "symlink-out.tar.gz": lambda tf: (add(tf, "s/meta.json", b"{}"), add(tf, "s/sys", type=tarfile.SYMTYPE,
                                                                                linkname="/")),
            "hardlink.tar.gz": lambda tf: add(tf, "s/x", type=tarfile.LNKTYPE, linkname="/etc/passwd"),
            "device.tar.gz": lambda tf: add(tf, "s/zero", type=tarfile.CHRTYPE, devmajor=1, devminor=5),
            "fifo.tar.gz": lambda tf: add(tf, "s/fifo", type=tarfile.FIFOTYPE),
            "many-members.tar.gz": lambda tf: [add(tf, f"s/f{i}") for i in range(20_500)],
            "not-a-snapshot.tar.gz": lambda tf: add(tf, "a/b/c.txt"),
        }
        for name, fn in archives.items():
            if self.full or name == "traversal.tar.gz":
                self.topo(cls, name, str(tar(name, fn)), must_fail=True)
        # a GNU long-name header claiming 3 GB (the body is not there: refused from the header)
        hdr = tarfile.TarInfo("././@LongLink")
        hdr.type = tarfile.GNUTYPE_LONGNAME
        hdr.size = 3 * 1024 ** 3
        raw = hdr.tobuf(format=tarfile.USTAR_FORMAT) + b"a" * 4096
        self.topo(cls, "longname-3GB.tar.gz", str(_w(d / "longname-3GB.tar.gz", gzip.compress(raw, mtime=0))),
                  must_fail=True)
        pax = tarfile.TarInfo("s/meta.json")
        pax.pax_headers = {"comment": "c" * 200_000}
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
            tf.addfile(pax, io.BytesIO(b""))
        self.topo(cls, "pax-200KB.tar.gz", str(_w(d / "pax-200KB.tar.gz", gzip.compress(buf.getvalue(), mtime=0))),
                  must_fail=True)
        if not self.full:
            return self._dirs(cls, d)
        _w(d / "gzip-bomb.tar.gz", gzip.compress(b"\0" * (600 * 1024 * 1024), compresslevel=1, mtime=0))
        self.topo(cls, "gzip-bomb.tar.gz", str(d / "gzip-bomb.tar.gz"), must_fail=True)
        self._dirs(cls, d)

    def _dirs(self, cls: str, d: Path) -> None:
        """Snapshot directories held to the archive's rules; --sysfs-root and GPUCOMM_FSROOT trees."""
        base = SMALL_HOST
        for name, fn in {
            "dir-link-to-dev-zero": lambda r: _replace_with_link(r / "sys" / "class" / "net" / "eth0" / "speed", "/dev/zero"),
            "dir-link-to-etc-passwd": lambda r: _replace_with_link(r / "proc" / "cpuinfo", "/etc/passwd"),
            "dir-fifo": lambda r: (os.unlink(r / "meta.json"), os.mkfifo(r / "meta.json")),
            "dir-nvml-deep": lambda r: _w(r / "nvml.json", _deep(100_000, "[", "]")),
            "dir-nvml-bigint": lambda r: _w(r / "nvml.json", '{"schema": "gpucomm.nvml/v1", "devices": [' + "9" * 5000 + "]}"),
            "dir-nvml-10000-devices": lambda r: _w(r / "nvml.json", json.dumps(
                {"schema": "gpucomm.nvml/v1", "devices": [{"index": i} for i in range(10_000)]})),
            "dir-nvml-wrong-types": lambda r: _w(r / "nvml.json", json.dumps(
                {"schema": "gpucomm.nvml/v1", "driver_version": 5, "devices": ["x", {"index": "y", "nvlink": 3}]})),
            "dir-meta-deep": lambda r: _w(r / "meta.json", _deep(100_000, "{\"a\":", "}", "1")),
            "dir-commands-link": lambda r: _replace_with_link(r / "commands" / "nvidia-smi_nvlink_s.txt", "/dev/urandom"),
        }.items():
            if not self.full and name != "dir-link-to-dev-zero":
                continue
            root = d / name
            shutil.copytree(base, root, symlinks=True)
            fn(root)
            fail = name in ("dir-link-to-dev-zero", "dir-link-to-etc-passwd", "dir-fifo", "dir-commands-link")
            self.topo(cls, name, str(root), must_fail=fail, warn=not fail)

        # --sysfs-root and GPUCOMM_FSROOT with links leaving the tree (read rules, not a refusal)
        root = d / "fsroot"
        shutil.copytree(base, root, symlinks=True)
        _replace_with_link(root / "proc" / "cpuinfo", "/etc/passwd")
        _replace_with_link(root / "sys" / "class" / "net" / "eth0" / "speed", "/dev/zero")
        os.mkfifo(root / "sys" / "fifo")
        _replace_with_link(root / "sys" / "devices" / "system" / "node" / "node0" / "cpulist", "../../../../fifo")
        self.case(cls, "sysfs-root@probe", ["probe", "--sysfs-root", str(root), "--format", "json"], [str(root)],
                  warn=True, fast=True)
        self.case(cls, "sysfs-root@snapshot", ["snapshot", "--sysfs-root", str(root), "-o", str(d / "out.tar.gz")],
                  [str(root)], no_tmp=[str(d)])
        self.case(cls, "fsroot-env@probe", ["probe", "--format", "json"], [str(root)], env={"GPUCOMM_FSROOT": str(root)},
                  warn=True)

    def hostlists(self) -> None:
        cls = "hostlists"
        d = self.path(cls)
        for name, expr in {"cartesian-1e9": "n[0-999]x[0-999]y[0-999]", "range-1e6": "node[0-999999]",
                           "range-huge": "node[0-999999999999999]",
                           "nested": "n[1-[2-3]]", "bad-chars": "n[1-3];rm"}.items():
            self.case(cls, f"{name}@plan-hosts", ["plan", "example:hgx-h100", "--hosts", expr, "--emit", "env"],
                      ["--hosts"], must_fail=True, fast=name == "cartesian-1e9")
        topo = str(self_topology())
        cluster_docs = {
            "names-1e6": {"nodes": [{"names": "node[0-999999]", "topology": topo}]},
            "names-cartesian": {"nodes": [{"names": "n[0-999]x[0-999]y[0-999]", "topology": topo}]},
            "names-many-elements": {"nodes": [{"names": ",".join(f"a{i}" for i in range(200_000)), "topology": topo}]},
            "link-gbps-nan": {"nodes": [{"names": "n[1-2]", "topology": topo}],
                              "fabric": {"switches": [{"name": "s", "nodes": "n[1-2]", "link_gbps": float("nan")}]}},
            "conf-nodes-1e9": {"nodes": [{"names": "n[1-2]", "topology": topo}],
                               "fabric": {"topology_conf_text": "SwitchName=s Nodes=n[0-999]x[0-999]y[0-999]\n"}},
            "conf-chain-20000": {"nodes": [{"names": "n[1-2]", "topology": topo}],
                                 "fabric": {"topology_conf_text": "SwitchName=s0 Nodes=n[1-2]\n" + "".join(
                                     f"SwitchName=s{i} Switches=s{i - 1}\n" for i in range(1, 20_000))}},
            "conf-many-lines": {"nodes": [{"names": "n[1-2]", "topology": topo}],
                                "fabric": {"topology_conf_text": "SwitchName=s Nodes=n[1-2]\n" + "".join(
                                    f"SwitchName=x{i} Nodes=m{i}[0-99999]\n" for i in range(50))}},
            "deep-nesting": None,  # written by hand below (json.dumps would recurse)
            "not-a-mapping": [1, 2, 3],
        }
        for name, doc in cluster_docs.items():
            p = self.path(cls, f"{name}.json") if name == "deep-nesting" else None
            if p is not None:
                _w(p, '{"nodes":' + _deep(100_000, "[", "]") + "}")
            else:
                p = _w(self.path(cls, f"{name}.yaml"), json.dumps(doc, allow_nan=True))
            self.case(cls, f"{name}@plan-cluster", ["plan", "--cluster", str(p), "--emit", "env"], [str(p)],
                      must_fail=True, ok=(0, 1, 3, 4), fast=name in ("names-cartesian", "conf-chain-20000"))
        conf = _w(d / "topology.conf", "SwitchName=s Nodes=n[0-999]x[0-999]y[0-999]\n")
        cl = _w(d / "cluster-conf-file.yaml", f"nodes: [{{names: 'n[1-2]', topology: {topo}}}]\n"
                f"fabric: {{topology_conf: {conf}}}\n")
        self.case(cls, "topology-conf-file@plan-cluster", ["plan", "--cluster", str(cl), "--emit", "env"], [str(conf)],
                  must_fail=True)
        conf_fifo = d / "fifo.conf"
        os.mkfifo(conf_fifo)
        cl = _w(d / "cluster-conf-fifo.yaml", f"nodes: [{{names: 'n[1-2]', topology: {topo}}}]\n"
                f"fabric: {{topology_conf: {conf_fifo}}}\n")
        self.case(cls, "topology-conf-fifo@plan-cluster", ["plan", "--cluster", str(cl), "--emit", "env"],
                  [str(conf_fifo)], must_fail=True)
        self.case(cls, "synth-nodes-1e9@synth", ["synth", "--nodes", "1000000000", "--node", "example:hgx-h100"],
                  ["--nodes"], ok=(2,))   # a flag out of range: a usage error

    def nvidia_smi(self) -> None:
        cls = "nvidia-smi"
        bins = {
            "flood-stdout": "import sys\nb = b'GPU0 X ' * 100000\nwhile True: sys.stdout.buffer.write(b)\n",
            "flood-stderr": "import sys\nb = b'error ' * 100000\nwhile True: sys.stderr.buffer.write(b)\n",
            "hang-with-child": "import subprocess, time\nsubprocess.Popen(['sleep', '300'])\ntime.sleep(300)\n",
            "junk-300MB-capped": "import sys\nsys.stdout.write('\\tGPU0\\tGPU1\\n' + 'GPU0 X NV4 junk\\n' * 40_000_000)\n",
            "binary": "import os, sys\nsys.stdout.buffer.write(os.urandom(1 << 20))\n",
            "exit-3": "import sys\nprint('NVIDIA-SMI has failed'); sys.exit(3)\n",
        }
        for name, body in bins.items():
            b = self.path(cls, name, "bin")
            script = _w(b / "nvidia-smi", f"#!{sys.executable}\n{body}")
            script.chmod(0o755)
            env = {"PATH": f"{b}:{os.environ.get('PATH', '')}"}
            for cmd in (["probe", "--format", "json", "--sources", "smi"], ["doctor"], ["snapshot", "-o", "-"]):
                label = cmd[0]
                out = self.path(cls, name, f"{label}.out")
                argv = cmd if cmd[0] != "snapshot" else ["snapshot", "-o", str(self.path(cls, name, "snap.tar.gz"))]
                self.case(cls, f"{name}@{label}", argv, ["nvidia-smi", str(out)], env=env, ok=(0, 1, 5),
                          fast=name == "flood-stdout" and label == "probe",
                          no_tmp=[str(self.path(cls, name))])

    def measurements(self) -> None:
        cls = "measurements"
        d = self.path(cls)
        src = (CAPTURES / "nccltests" / "09_h100-x8_1node_allreduce_cluster01.txt").read_text()
        lines = src.splitlines()
        row = next(i for i, l in enumerate(lines) if l.strip()[:1].isdigit() and " sum " in l)
        zero = list(lines)
        parts = zero[row].split()
        parts[5] = "0.00"
        zero[row] = "  ".join(parts)
        files = {
            "zero-time.txt": "\n".join(zero) + "\n",
            "unknown-test.txt": src.replace("all_reduce_perf", "warp_drive_perf"),
            "unknown-redop.txt": src.replace(lines[row], lines[row].replace(" sum ", " frobnicate ")),
            "nan-values.txt": "\n".join(l.replace(parts[6], "nan") if i == row else l for i, l in enumerate(lines)) + "\n",
            "huge-rows.txt": src.replace(lines[row], "    33554432       4194304    double     sum      -1   "
                                         + "9" * 5000 + "  1  1  0  1  1  1  0"),
            "junk-8MB.txt": src + ("# junk line " * 8 + "\n") * 80_000,
        }
        for name, text in files.items():
            p = _w(d / name, text)
            self.case(cls, f"{name}@predict-compare", ["predict", "example:hgx-h100", "--compare", str(p)], [str(p)],
                      ok=(0, 1), fast=name == "zero-time.txt", warn=name != "junk-8MB.txt")
        logs = {
            "junk.log": "NCCL INFO " * 50_000 + "\n",
            "deep-ring.log": "h:1:1 [0] NCCL INFO Channel 00/02 : " + " ".join(str(i % 8) for i in range(200_000)) + "\n",
            "binary.log": os.urandom(100_000),
        }
        for name, text in logs.items():
            p = _w(d / name, text)
            for cmd in ("rings", "trees"):
                self.case(cls, f"{name}@{cmd}-compare", [cmd, "example:hgx-h100", "--compare", str(p)], [str(p)],
                          ok=(0, 1), fast=name == "junk.log" and cmd == "rings")

    def outputs(self) -> None:
        cls = "outputs"
        d = self.path(cls)
        d.mkdir(parents=True, exist_ok=True)
        victim = _w(d / "victim.txt", "precious\n")
        (d / "link.json").symlink_to(victim)
        existing = _w(d / "existing.json", "{}\n")
        (d / "a-dir").mkdir()
        _w(d / "a-file", "x")
        ro = d / "read-only"
        ro.mkdir()
        same = _w(d / "same.json", json.dumps(self.base))
        cases = {
            "symlink": (["show", "example:hgx-h100", "-o", str(d / "link.json")], True),
            "existing": (["show", "example:hgx-h100", "-o", str(existing)], True),
            "directory": (["show", "example:hgx-h100", "-o", str(d / "a-dir")], True),
            "under-a-file": (["show", "example:hgx-h100", "-o", str(d / "a-file" / "x.json")], True),
            "missing-dir": (["show", "example:hgx-h100", "-o", str(d / "nope" / "x.json")], True),
            "same-file": (["show", str(same), "--format", "json", "-o", str(same)], True),
            "snapshot-existing": (["snapshot", "--sysfs-root", str(SMALL_HOST), "-o",
                                   str(existing)], True),
            "snapshot-symlink": (["snapshot", "--sysfs-root", str(SMALL_HOST), "-o",
                                  str(d / "link.json")], True),
            "snapshot-under-file": (["snapshot", "--sysfs-root", str(SMALL_HOST), "-o",
                                     str(d / "a-file" / "s.tar.gz")], True),
            "snapshot-read-only": (["snapshot", "--sysfs-root", str(SMALL_HOST), "-o",
                                    str(ro / "s.tar.gz")], os.geteuid() != 0),
            "synth-out-dir-symlink": (["synth", "--nodes", "4", "--node", "example:hgx-h100", "--out-dir",
                                       str(d / "link.json")], True),
            "bench-save-symlink": (["bench", "collective", "--save", str(d / "link.json")], True),
            "bench-save-same": (["bench", "collective", "--save", str(same)], False),
            "format-ext-mismatch": (["rings", "example:hgx-h100", "-o", str(d / "rings.xml")], True),
        }
        for name, (argv, fail) in cases.items():
            # bench --save updates a clean document it was given (that is what it is for)
            keep = [str(victim), str(existing)] + ([] if name == "bench-save-same" else [str(same)])
            self.case(cls, name, argv, [a for a in argv if a.startswith(str(d))] or [str(d)], must_fail=fail,
                      keep=keep, no_tmp=[str(d), str(ro)],
                      fast=name in ("symlink", "same-file"))
        ro.chmod(0o555)

    # ============================================================================================
    # Second round (issue 29): each case runs under ROUND2_TIME seconds, ROUND2_AS bytes of address
    # space and ROUND2_RSS bytes of peak resident memory.
    def r2(self, cls: str, name: str, argv: List[str], names: List[str], **kw) -> None:
        kw.setdefault("time_limit", ROUND2_TIME)
        kw.setdefault("mem_limit", ROUND2_AS)
        kw.setdefault("rss_limit", ROUND2_RSS)
        self.case(cls, name, argv, names, **kw)

    def r2_topo(self, cls: str, name: str, target: str, entries: List[str], fast: Optional[str] = None,
                **kw) -> None:
        """``target`` through the TOPO entry points ``entries`` (commands of TOPO_COMMANDS, or argv
        lists with {t}); ``fast``: the entry in the representative subset."""
        for e in entries:
            argv = [a.replace("{t}", target) for a in (TOPO_COMMANDS[e] if isinstance(e, str) else e)]
            label = e if isinstance(e, str) else "-".join(a for a in e[:3] if not a.startswith("{"))
            # a warning is due where the document is shown (the planners print topology warnings
            # with --verbose only); a refusal is due everywhere
            self.r2(cls, f"{name}@{label}", argv, [os.path.basename(target), target] +
                    [a for a in argv if a.startswith("--")], fast=label == fast,
                    ok=kw.get("ok") or ((0, 1, 5) if label in ("doctor", "diff") else (0, 1, 3, 4)),
                    warn=kw.get("warn", False) and label in ("show", "show-json", "probe-from"),
                    **{k: v for k, v in kw.items() if k not in ("ok", "warn")})

    def long_lines(self) -> None:
        """Quadratic reading of long lines: one line of 256 KiB (and, in the full corpus, of 60 MB,
        under the 64 MiB input cap) through every text reader."""
        cls = "long-lines"
        d = self.path(cls)
        n = 256 * 1024
        bodies = {   # what a hostile line is made of: runs each reader's patterns must cross in one pass
            "letters": "a" * n,
            "host-colons": "a" * (n // 2) + ":1:1 [0] NCC" + "a" * (n // 2),
            "digits": "1" * n,
            "digit-colons": "1:" * (n // 2),
            "spaces": "x" + " " * n + "y",
            "tabs-gpu": "GPU0\t" * (n // 5),
            "label": "[1,0]<stdout>:" + "a" * n,
            "hashes": "#" + " a" * (n // 2),
            "nccl-info": "h:1:1 [0] NCCL INFO " + "Channel 00/02 : " + "a" * n,
            "brackets": "[" * n,
            "ansi": "\x1b[" + "1;" * (n // 2),
            "xml-attr": '<system version="1"><cpu numaid="0" affinity="' + "f" * n + '"/></system>',
            "lt": "<" + "a" * n,
            "cpu-affinity": "\tGPU0\tCPU Affinity\nGPU0\t X \t" + "0," * (n // 2) + "\n",
        }
        readers = {
            "predict-compare": ["predict", "example:hgx-h100", "--compare", "{t}"],
            "rings-compare": ["rings", "example:hgx-h100", "--compare", "{t}"],
            "trees-compare": ["trees", "example:hgx-h100", "--compare", "{t}"],
            "show": ["show", "{t}"],
            "calibrate": ["calibrate", "example:hgx-h100", "{t}"],
        }
        for body_name, body in bodies.items():
            if not self.full and body_name not in ("letters", "host-colons"):
                continue
            p = _w(d / f"{body_name}.txt", body + "\n")
            for r, argv in readers.items():
                if not self.full and r not in ("predict-compare", "show"):
                    continue
                argv = [a.replace("{t}", str(p)) for a in argv]
                self.r2(cls, f"{body_name}@{r}", argv, [str(p)], ok=(0, 1),
                        fast=(body_name, r) in (("letters", "predict-compare"), ("host-colons", "show")))
        # the same lines inside a real capture of each reader, where every later stage reads them too
        inside = {"predict-compare": CAPTURES / "nccltests" / "09_h100-x8_1node_allreduce_cluster01.txt",
                  "rings-compare": CAPTURES / "nccllogs" / "panlichen-rtx3090-4node-log.log",
                  "show": self_topology(), "calibrate": CAPTURES / "nccltests" / "09_h100-x8_1node_allreduce_cluster01.txt"}
        for body_name in ("letters", "host-colons", "digits", "label", "nccl-info", "tabs-gpu", "hashes"):
            if not self.full and body_name != "host-colons":
                continue
            for r, src in inside.items():
                lines = src.read_text().splitlines(keepends=True)
                at = min(len(lines) // 2, 12)
                p = _w(d / f"{body_name}-in-{src.name}", "".join(lines[:at]) + bodies[body_name] + "\n" + "".join(lines[at:]))
                argv = [a.replace("{t}", str(p)) for a in readers[r]]
                self.r2(cls, f"{body_name}-inside@{r}", argv, [str(p)], ok=(0, 1),
                        fast=(body_name, r) == ("host-colons", "rings-compare"))
        # documents and data formats in one line
        one_line = {
            "json-one-line.json": json.dumps(_mutate(self.base, ("host", "cpu_model"), "x" * n)),
            "yaml-one-line.yaml": "schema: gpucomm.topology/v1\nhost: {cpu_model: " + "x" * n + "}\n",
            "xml-long-attr.xml": '<system version="1"><cpu numaid="0" affinity="ff" arch="x86_64" vendor="'
                                 + "V" * n + '"/></system>\n',
            "rocm-long-row.txt": "=== ROCm System Management Interface ===\n=== Link Type between two GPUs ===\n"
                                 "       GPU0\nGPU0   " + "0 " * (n // 2) + "\n",
        }
        for name, text in one_line.items():
            if not self.full and name != "json-one-line.json":
                continue
            p = _w(d / name, text)
            self.r2_topo(cls, name, str(p), ["show", "predict"], fast="show", ok=(0, 1, 3, 4))
        if self.full:  # 60 MB in one line: linear reading finishes; a quadratic one never would
            big = d / "line-60MB.txt"
            with open(big, "wb") as f:
                f.write(b"a" * (60 * 1000 * 1000) + b"\n")
            for r in ("predict-compare", "rings-compare", "show"):
                argv = [a.replace("{t}", str(big)) for a in readers[r]]
                self.r2(cls, f"line-60MB@{r}", argv, [str(big)], ok=(0, 1))

    def int_spellings(self) -> None:
        """Integers past the digit bound in YAML's other spellings (hex, octal, binary, base 60,
        underscores, signs) and in XML attributes."""
        cls = "int-spellings"
        d = self.path(cls)
        import yaml

        base_yaml = yaml.safe_dump(self.base)
        spellings = {
            "hex": "0x" + "f" * 5000, "octal": "0o" + "7" * 5000, "octal-old": "0" + "7" * 5000,
            "binary": "0b" + "1" * 20000, "base60": "1" + ":59" * 2000, "underscores": "9_" * 3000 + "9",
            "signed-hex": "-0x" + "f" * 5000, "plus": "+" + "9" * 5000, "hex-21-digits": "0x" + "f" * 21,
        }
        for name, spelled in spellings.items():
            for field_, old in (("sockets", "sockets: 1"), ("index", "index: 0")):
                if not self.full and (name, field_) not in (("hex", "sockets"),):
                    continue
                p = _w(d / f"{name}-{field_}.yaml", base_yaml.replace(old, f"{field_}: {spelled}", 1))
                entries = ["show", "show-json"] + (["predict", "plan"] if self.full else [])
                self.r2_topo(cls, f"{name}-{field_}", str(p), entries, fast="show", ok=(0, 1))
        topo = str(self_topology())
        cl = _w(d / "cluster-hex.yaml", f"nodes: [{{names: 'n[1-2]', topology: {topo}, gpus: 0x{'f' * 5000}}}]\n")
        self.r2(cls, "cluster-hex@plan-cluster", ["plan", "--cluster", str(cl), "--emit", "env"], [str(cl)], ok=(0, 1))
        xml = _w(d / "xml-5000-digits.xml", f'<system version="1"><cpu numaid="{"9" * 5000}" affinity="ff" '
                 f'arch="x86_64" vendor="GenuineIntel"><pci busid="0000:18:00.0" class="0x030000" '
                 f'link_speed="16.0 GT/s PCIe" link_width="{"9" * 5000}"><gpu dev="{"9" * 5000}" sm="90" rank="0" '
                 f'gdr="1"/></pci></cpu></system>\n')
        self.r2_topo(cls, "xml-5000-digits", str(xml), ["show", "show-json"], ok=(0, 1))

    def deep_pci(self) -> None:
        """Recursion on deep inputs: chains of nested PCIe switches (documents and NCCL XML)."""
        cls = "deep-pci"
        d = self.path(cls)
        entries = ["show", "show-json", "paths", "rings", "trees", "predict", "plan", "select", "doctor",
                   ["show", "{t}", "--format", "nccl-xml"], ["show", "{t}", "--format", "tree"],
                   ["show", "{t}", "--format", "dot"]]
        for depth in (40, 490, 4000):
            doc = _deep_pci_doc(self.base, depth)
            p = self.doc_file(cls, f"chain-{depth}", doc)
            if self.full or depth == 490:
                self.r2_topo(cls, f"chain-{depth}", p, entries if self.full else ["predict"], fast="predict",
                             must_fail=depth > 64)
        for depth in (120, 250):   # NCCL XML is read up to 256 elements deep
            xml = ('<system version="1"><cpu numaid="0" affinity="ff" arch="x86_64" vendor="GenuineIntel">'
                   + "".join(f'<pci busid="0001:{i // 256:02x}:{i % 256:02x}.0" class="0x060400" '
                             f'link_speed="16.0 GT/s PCIe" link_width="16">' for i in range(depth))
                   + '<pci busid="0000:18:00.0" class="0x030000" link_speed="16.0 GT/s PCIe" link_width="16">'
                     '<gpu dev="0" sm="90" rank="0" gdr="1"/></pci>'
                   + "</pci>" * depth + "</cpu></system>\n")
            p = _w(d / f"xml-chain-{depth}.xml", xml)
            if self.full or depth == 250:
                self.r2_topo(cls, f"xml-chain-{depth}", str(p), entries if self.full else ["rings"], fast="rings",
                             must_fail=True)

    def expansions(self) -> None:
        """Expansions without a total bound: CPU lists and --free ranges with many wide ranges."""
        cls = "expansions"
        d = self.path(cls)
        many = ",".join(f"{i * 2_000_000}-{i * 2_000_000 + 999_999}" for i in range(64))
        docs = {
            "numa-cpus": _mutate(self.base, ("numa_nodes", 0, "cpus"), many),
            "gpu-cpu-affinity": _mutate_all(self.base, "gpus", "cpu_affinity", many),
            "nic-cpu-affinity": _mutate_all(self.base, "nics", "cpu_affinity", many),
            "one-huge-id": _mutate(self.base, ("numa_nodes", 0, "cpus"), "99999999999999"),
        }
        for name, doc in docs.items():
            p = self.doc_file(cls, name, doc)
            self.r2_topo(cls, name, p, ["show", "predict", "plan", "select"] if self.full else ["show"],
                         fast="show" if name == "numa-cpus" else None, ok=(0, 1, 3, 4))
        topo = ("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
                f"GPU0\t X \tNV4\t{many}\t0\nGPU1\tNV4\t X \t{many}\t{many}\n")
        p = _w(d / "topo-affinity.txt", topo)
        self.r2_topo(cls, "topo-affinity", str(p), ["show", "predict"] if self.full else ["show"], fast="show")
        xml = (f'<system version="1"><cpu numaid="0" affinity="{"f" * 100_000}" arch="x86_64" '
               'vendor="GenuineIntel"><pci busid="0000:18:00.0" class="0x030000" link_speed="16.0 GT/s PCIe" '
               'link_width="16"><gpu dev="0" sm="90" rank="0" gdr="1"/></pci></cpu></system>\n')
        p = _w(d / "xml-affinity-mask.xml", xml)
        self.r2_topo(cls, "xml-affinity-mask", str(p), ["show", "predict"] if self.full else ["show"])
        root = d / "snapshot-cpulist"
        shutil.copytree(SMALL_HOST, root, symlinks=True)
        for f in root.glob("sys/devices/system/node/node*/cpulist"):
            _w(f, many + "\n")
        for f in root.glob("sys/bus/pci/devices/*/local_cpulist"):
            _w(f, many + "\n")
        self.r2_topo(cls, "snapshot-cpulist", str(root), ["show", "predict"] if self.full else ["show"], fast="show")
        for name, free in {"ranges": ",".join(f"{i * 2_000_000}-{i * 2_000_000 + 999_999}" for i in range(64)),
                           "one-range": "0-1000000", "huge-id": "99999999999999999999"}.items():
            self.r2(cls, f"free-{name}@select", ["select", "example:hgx-h100", "--count", "2", "--free", free],
                    ["--free"], ok=(0, 1, 2, 4), fast=name == "ranges")

    def big_sizes(self) -> None:
        """Sizes at the documented bounds (probes/limits.py): the largest host (GPUs; NICs; PCIe
        switches), the largest NVLink domain of several hosts, the largest cluster file, the largest
        --nodes; past them, refusals."""
        cls = "big-sizes"
        d = self.path(cls)
        from gpucomm.probes.limits import MAX_GPUS, MAX_HOST_GPUS, MAX_HOST_NICS, MAX_HOSTS, MAX_NODES, MAX_SWITCHES

        entries = ["show", "paths", "rings", "trees", "predict", "plan", "select", "doctor",
                   ["rings", "{t}", "--nodes", "2"], ["select", "{t}", "--count", str(MAX_HOST_GPUS // 2)]]
        g = MAX_HOST_GPUS
        nodes = {f"node-{g}-pcie": _big_node_doc(self.base, g, False),
                 f"node-{g}-nvswitch": _big_node_doc(self.base, g, True),
                 f"node-{g}-nic-per-gpu": _more_nics(_big_node_doc(self.base, g, False), g),
                 f"node-8-{MAX_HOST_NICS}-nics": _more_nics(_big_node_doc(self.base, 8, True), MAX_HOST_NICS),
                 f"node-{MAX_SWITCHES}-switches": _more_switches(_big_node_doc(self.base, 8, False), MAX_SWITCHES)}
        for name, doc in nodes.items():
            p = self.doc_file(cls, name, doc)
            self.r2_topo(cls, name, p, entries if self.full else ["predict"], ok=(0, 3, 4, 5),
                         fast="predict" if name == f"node-{g}-nvswitch" else None)
        fused = _w(d / f"nvlink-domain-{MAX_GPUS}-gpus.xml", _fused_xml(MAX_GPUS // 4))
        # predict and trees are left out: on a fused dump of several hosts (the 2-tray capture c01 too)
        # NCCL's model looks GPUs up by their local dev and stops with "no GPU 4 in topology (has 0, 0,
        # 1, 1, ...)" -- a bug of the multi-host model, reported, not of a bound
        self.r2_topo(cls, fused.name, str(fused), [e for e in entries if e not in ("predict", "trees")]
                     if self.full else ["show"], ok=(0, 1, 3, 4, 5))
        past = {f"node-{g + 1}": self.doc_file(cls, f"node-{g + 1}", _big_node_doc(self.base, g + 1, False)),
                f"node-{MAX_HOST_NICS + 1}-nics": self.doc_file(cls, f"node-{MAX_HOST_NICS + 1}-nics", _more_nics(
                    _big_node_doc(self.base, 8, True), MAX_HOST_NICS + 1)),
                f"nvlink-domain-{MAX_GPUS + 4}-gpus": str(_w(d / f"nvlink-domain-{MAX_GPUS + 4}-gpus.xml",
                                                             _fused_xml(MAX_GPUS // 4 + 1)))}
        for name, p in past.items():
            self.r2_topo(cls, name, p, ["show", "predict"] if self.full else ["show"], must_fail=True)
        topo = str(self_topology())
        cl = _w(d / "cluster-max-hosts.yaml", f"nodes: [{{names: 'n[0-{MAX_HOSTS - 1}]', topology: {topo}}}]\n")
        self.r2(cls, "cluster-max-hosts@plan", ["plan", "--cluster", str(cl), "--emit", "env"], [str(cl)],
                ok=(0, 3, 4))
        cl = _w(d / "cluster-past-max-hosts.yaml", f"nodes: [{{names: 'n[0-{MAX_HOSTS}]', topology: {topo}}}]\n")
        self.r2(cls, "cluster-past-max-hosts@plan", ["plan", "--cluster", str(cl), "--emit", "env"], [str(cl)],
                must_fail=True)
        for cmd in (["predict", "example:hgx-h100"], ["rings", "example:hgx-h100"], ["trees", "example:hgx-h100"],
                    ["plan", "example:hgx-h100", "--emit", "env"], ["synth", "--node", "example:hgx-h100"]):
            bound = MAX_HOSTS if cmd[0] == "synth" else MAX_NODES   # synth writes a cluster: bound by its hosts
            if self.full:
                self.r2(cls, f"nodes-{bound}@{cmd[0]}", cmd + ["--nodes", str(bound)], ["--nodes"], ok=(0,),
                        no_tmp=[str(d)])
            for nodes_ in ("99999999999999999999", str(bound * 16), str(bound + 1)):
                if not self.full and (nodes_, cmd[0]) != (str(bound * 16), "trees"):
                    continue
                self.r2(cls, f"nodes-{nodes_}@{cmd[0]}", cmd + ["--nodes", nodes_], ["--nodes"], ok=(2,),
                        fast=cmd[0] == "trees")

    def meanings(self) -> None:
        """Meaning errors: every planted one is refused (exit 1, one line) or warned about."""
        cls = "meanings"
        d = self.path(cls)
        b = self.base
        gb = [g["pci_bus_id"] for g in b["gpus"]]
        docs = {
            "pci-parent-cycle": _mutate(_mutate(b, ("switches", 0, "parent"), "pci0000:16"),
                                        ("switches", 1, "parent"), "0000:17:00.0"),
            "gpu-own-parent": _mutate(b, ("gpus", 0, "parent"), gb[0]),
            "switch-own-parent": _mutate(b, ("switches", 0, "parent"), "0000:17:00.0"),
            "duplicate-nic-names": _append(b, "nics", dict(b["nics"][0], pci_bus_id="0000:1d:00.0")),
            "duplicate-switch-ids": _append(b, "switches", dict(b["switches"][0])),
            "duplicate-numa-ids": _append(b, "numa_nodes", dict(b["numa_nodes"][0], cpus="16-31")),
            "duplicate-uuids": _mutate(b, ("gpus", 1, "uuid"), "GPU-0"),
            "switch-id-is-gpu": _append(b, "switches", {"id": gb[2], "kind": "pcie", "pci_bus_id": gb[2],
                                                        "parent": "pci0000:16", "numa_node": 0}),
            "gpu-on-missing-numa": _mutate(b, ("gpus", 0, "numa_node"), 7),
            "distances-wrong-size": _mutate(b, ("numa_nodes", 0, "distances"), [10, 21, 21]),
            "nvlink-gpu-to-nic": _append(b, "links", {"a": gb[0], "b": "0000:1c:00.0", "kind": "nvlink",
                                                      "bw_GBps": 300.0, "count": 12}),
            "nvlink-count-absurd": _mutate(b, ("links", 5, "count"), 99999),
        }
        for name, doc in docs.items():
            p = self.doc_file(cls, name, doc)
            self.r2_topo(cls, name, p, ["show", "show-json", "predict"] if self.full else ["show"], fast="show",
                         warn=True, ok=(0, 1, 3, 4))
        x = ('<system version="1"><cpu numaid="0" affinity="ffff" arch="x86_64" vendor="GenuineIntel">'
             '<pci busid="0000:17:00.0" class="0x060400" link_speed="16.0 GT/s PCIe" link_width="16">{gpus}'
             '</pci>{nic}</cpu></system>\n')
        gpu = ('<pci busid="0000:{b:02x}:00.0" class="0x030000" link_speed="{speed}" link_width="{width}">'
               '<gpu dev="{i}" sm="90" rank="{i}" gdr="1">{nv}</gpu></pci>')
        nvl = '<nvlink target="0000:{t:02x}:00.0" count="{c}" tclass="0x030000"/>'

        nic = ('<pci busid="0000:1c:00.0" class="0x020000" link_speed="16.0 GT/s PCIe" link_width="16"><nic>'
               '<net name="mlx5_0" dev="0" speed="{net}" port="1" guid="0x1" maxconn="131072" gdr="1"/></nic></pci>')

        def xml(speed="16.0 GT/s PCIe", width="16", count="18", numaid="0", net="200000"):
            gpus = "".join(gpu.format(b=0x18 + i, i=i, speed=speed if i == 0 else "16.0 GT/s PCIe",
                                      width=width if i == 0 else "16", nv=nvl.format(t=0x18 + (i ^ 1), c=count))
                           for i in range(2)) + nic.format(net=net)
            return x.format(gpus=gpus, nic="").replace('numaid="0"', f'numaid="{numaid}"')

        xmls = {
            "xml-nvlink-count-20-digits": xml(count="99999999999999999999"),
            "xml-nvlink-count-absurd": xml(count="99999"),
            "xml-link-speed-negative": xml(speed="-16.0 GT/s PCIe"),
            "xml-net-speed-negative": xml(net="-200000"),
            "xml-net-speed-nan": xml(net="nan"),
            "xml-net-speed-inf": xml(net="inf"),
            "xml-width-0": xml(width="0"),
            "xml-numaid-minus-1": xml(numaid="-1"),
        }
        for name, text in xmls.items():
            p = _w(d / f"{name}.xml", text)
            self.r2_topo(cls, name, str(p), ["show", "show-json", "predict"] if self.full else ["show"], fast="show",
                         warn=True, ok=(0, 1, 3, 4))
            if name == "xml-nvlink-count-20-digits":   # what gpucomm writes, gpucomm reads back (in this order)
                out = d / f"{name}.out.json"
                self.r2(cls, f"{name}@show-o", ["show", str(p), "-o", str(out)], [str(p)], ok=(0,), keep=[str(p)])
                self.r2(cls, f"{name}@read-back", ["show", str(out)], [str(out)], ok=(0,), keep=[str(out)])
        rocm = ("GPU0 0 XGMI\nGPU1 XGMI 0\n"
                "============ ROCm System Management Interface ============\n"
                "=============== Link Type between two GPUs ===============\n"
                "       GPU0         GPU1\n")
        p = _w(d / "rocm-rows-before-header.txt", rocm)
        self.r2_topo(cls, "rocm-rows-before-header", str(p), ["show", "predict"] if self.full else ["show"], warn=True)
        src = self_topology().read_text()
        for name, text in {"topo-GPU-1-row": src.replace("\nGPU1 ", "\nGPU-1", 1),
                           "topo-GPU-1-header-and-row": src.replace("GPU1 ", "GPU-1", 2)}.items():
            p = _w(d / f"{name}.txt", text)
            self.r2_topo(cls, name, str(p), ["show", "predict"] if self.full else ["show"], fast="show", warn=True)

    def calibration(self) -> None:
        """Calibration profiles: values that pass ``> 0`` but mean nothing physically."""
        cls = "calibration"
        d = self.path(cls)
        values = {
            "net-denormal": ("net_gbps_per_nic", 5e-324), "alltoall-0": ("alltoall_efficiency", 0),
            "p2p-0": ("p2p_efficiency", 0), "intra-denormal": ("intra_efficiency", 5e-324),
            "nvls-0": ("nvls_efficiency", 0.0), "intra-p2p-huge": ("intra_p2p_efficiency", 1e6),
            "ll-0": ("net_ll_efficiency", 0), "latency-denormal": ("latency_scale", 5e-324),
            "net-1e6": ("net_gbps_per_nic", 1e6), "fill-bytes-0": ("net_fill_bytes", 0),
        }
        for name, (k, v) in values.items():
            p = _w(d / f"{name}.json", json.dumps({"schema": "gpucomm.calibration/v1", "parameters": {k: v}}))
            cmds = {"predict": ["predict", "example:hgx-h100", "--nodes", "8", "--collective", "all_to_all"],
                    "predict-p2p": ["predict", "example:hgx-h100", "--nodes", "2", "--collective", "send_recv"],
                    "predict-1": ["predict", "example:hgx-h100", "--format", "json"],
                    "plan": ["plan", "example:hgx-h100", "--nodes", "2", "--emit", "env"]}
            for c, argv in cmds.items():
                if not self.full and (name, c) not in (("net-denormal", "predict"), ("intra-denormal", "predict-1")):
                    continue
                self.r2(cls, f"{name}@{c}", argv + ["--calibration", str(p)], [str(p)], must_fail=True,
                        fast=True)

    def terminal(self) -> None:
        """Output and terminal: control characters in names, floods of warnings, FIFOs, NCCL_PROTO,
        nesting limits, snapshots on stdin, outputs that are inputs."""
        cls = "terminal"
        d = self.path(cls)
        d.mkdir(parents=True, exist_ok=True)
        esc = "\x1b]0;pwned\x07\x1b[2J\x1b[31mRED\x9b1m\u202egnp.exe\r"
        doc = _mutate(_mutate(_mutate(self.base, ("gpus", 0, "name"), "NVIDIA A100" + esc),
                              ("nics", 0, "name"), "mlx5_0" + esc), ("host", "hostname"), "h" + esc)
        doc["links"] = [dict(l, a="mlx5_0" + esc) if l["a"] == "0000:1c:00.0" else l for l in doc["links"]]
        doc["warnings"] = ["w" + esc]
        p = self.doc_file(cls, "escapes", doc)
        for e in (["show", "{t}"], ["show", "{t}", "--format", "tree"], ["show", "{t}", "--format", "matrix"],
                  ["paths", "{t}"], ["rings", "{t}"], ["trees", "{t}", "--nodes", "2"], ["predict", "{t}"],
                  ["doctor", "--from", "{t}"], ["select", "{t}", "--count", "2"], ["plan", "{t}", "--emit", "env"],
                  ["show", "{t}", "--format", "dot"]):
            argv = [a.replace("{t}", p) for a in e]
            if not self.full and e[0] not in ("show", "paths"):
                continue
            self.r2(cls, f"escapes@{'-'.join(x for x in e if not x.startswith('{'))}", argv, [p], clean_out=True,
                    ok=(0, 1, 3, 4, 5), fast=e == ["show", "{t}"])
        markup = self.doc_file(cls, "markup", _mutate(self.base, ("gpus", 0, "name"), "[/] [bold]x[/bold] [red"))
        self.r2(cls, "markup@show", ["show", markup], [markup], ok=(0,))
        flood = self.doc_file(cls, "warnings-300000", _mutate(self.base, ("warnings",),
                                                             [f"warning {i}" for i in range(300_000)]))
        for e in ("show", "predict"):
            self.r2(cls, f"warnings-300000@{e}", [e, flood], [flood], ok=(0, 1), max_err_lines=210,
                    fast=e == "show")
        fifo = d / "out.fifo"
        os.mkfifo(fifo)
        self.r2(cls, "fifo-without-reader@show", ["show", "example:hgx-h100", "-o", str(fifo)], [str(fifo)],
                ok=(0, 1), time_limit=15.0, fast=True)
        for proto in ("^LL,LL128,Simple", "allreduce:^LL,LL128,Simple", "^ll,ll128,simple"):
            self.r2(cls, f"proto-{proto}@predict", ["predict", "example:hgx-h100", "--collective", "all_reduce"],
                    ["NCCL_PROTO"], env={"NCCL_PROTO": proto}, ok=(0, 1, 4), warn=True,
                    fast=proto == "^LL,LL128,Simple")
        from gpucomm.probes.limits import MAX_DEPTH

        for depth in (MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1):
            nested = json.loads(json.dumps(self.base))
            # ``depth`` mappings and lists: the document, then depth - 1 lists
            j = _w(d / f"nested-{depth}.json", json.dumps(nested)[:-1] + ', "extra": ' + _deep(depth - 1, "[", "]") + "}")
            import yaml

            y = _w(d / f"nested-{depth}.yaml", yaml.safe_dump(nested) + "extra: " + _deep(depth - 1, "[", "]") + "\n")
            for f in (j, y):
                self.r2(cls, f"{f.name}@show", ["show", str(f)], [str(f)], must_fail=depth > MAX_DEPTH,
                        ok=(1,) if depth > MAX_DEPTH else (0,), fast=depth == MAX_DEPTH)
        snaps = _snapshot_archives(d)
        for name, path in snaps.items():
            self.r2(cls, f"stdin-{name}@show", ["show", "-"], ["<stdin>"], stdin=str(path), ok=(0,),
                    fast=name == "tar.xz")
            self.r2(cls, f"path-{name}@show", ["show", str(path)], [str(path)], ok=(0,))
        own = self.doc_file(cls, "own-input", self.base)
        run = _w(d / "own-run.txt", (CAPTURES / "nccltests" / "09_h100-x8_1node_allreduce_cluster01.txt").read_text())
        for name, argv, victim in (
                ("show", ["show", own, "--format", "json", "-o", own, "--force"], own),
                ("predict-compare", ["predict", "example:hgx-h100", "--compare", str(run), "--format", "json",
                                     "-o", str(run), "--force"], str(run))):
            self.r2(cls, f"own-input@{name}", argv, [victim], must_fail=True, keep=[victim], fast=name == "show")


def _deep_pci_doc(base: dict, depth: int) -> dict:
    """``base`` with its GPUs and NIC under a chain of ``depth`` nested PCIe switches."""
    d = json.loads(json.dumps(base))
    ids = [f"0001:{i // 256:02x}:{i % 256:02x}.0" for i in range(depth)]
    chain = [{"id": s, "kind": "pcie", "pci_bus_id": s, "parent": ids[i - 1] if i else "pci0000:16", "numa_node": 0}
             for i, s in enumerate(ids)]
    d["switches"] = [sw for sw in d["switches"] if sw["id"] != "0000:17:00.0"] + chain
    for x in d["gpus"] + d["nics"]:
        x["parent"] = ids[-1]
    d["links"] = [l for l in d["links"] if l["kind"] != "pcie"]
    d["links"] += [{"a": c["id"], "b": c["parent"], "kind": "pcie", "bw_GBps": 24.0, "count": None, "gen": 4,
                    "width": 16} for c in chain]
    d["links"] += [{"a": x["pci_bus_id"], "b": ids[-1], "kind": "pcie", "bw_GBps": 24.0, "count": None, "gen": 4,
                    "width": 16} for x in d["gpus"] + d["nics"]]
    return d


def _big_node_doc(base: dict, n: int, nvswitch: bool) -> dict:
    """A node of ``n`` GPUs, 8 per PCIe switch with a NIC each, on two NUMA nodes (with NVSwitch
    groups of 8 when ``nvswitch``)."""
    d = json.loads(json.dumps(base))
    g0, n0 = d["gpus"][0], d["nics"][0]
    d["gpus"], d["nics"], d["links"] = [], [], []
    d["switches"] = [{"id": f"pci{k:04x}:00", "kind": "host_bridge", "pci_bus_id": None, "parent": f"CPU{k}",
                      "numa_node": k} for k in (0, 1)]
    d["numa_nodes"] = [{"id": 0, "cpus": "0-63", "memory_bytes": 1 << 36, "distances": [10, 21]},
                       {"id": 1, "cpus": "64-127", "memory_bytes": 1 << 36, "distances": [21, 10]}]
    d["links"].append({"a": "CPU0", "b": "CPU1", "kind": "smp", "bw_GBps": 40.0})
    for s in range((n + 7) // 8):
        numa = s % 2
        dom = 2 + s // 200
        sw = f"{dom:04x}:{s % 200:02x}:00.0"
        d["switches"].append({"id": sw, "kind": "pcie", "pci_bus_id": sw, "parent": f"pci{numa:04x}:00",
                              "numa_node": numa})
        d["links"].append({"a": sw, "b": f"pci{numa:04x}:00", "kind": "pcie", "bw_GBps": 24.0, "gen": 4, "width": 16})
        nvs = f"{dom:04x}:{s % 200:02x}:1f.0"
        if nvswitch:
            d["switches"].append({"id": nvs, "kind": "nvswitch", "pci_bus_id": nvs, "parent": sw, "numa_node": numa})
        bus = [f"{dom:04x}:{s % 200:02x}:{j + 1:02x}.0" for j in range(min(8, n - 8 * s))]
        for j, b_ in enumerate(bus):
            i = 8 * s + j
            g = dict(g0, index=i, uuid=f"GPU-{i}", pci_bus_id=b_, parent=sw, numa_node=numa, numa_affinity=[numa],
                     cpu_affinity="0-63" if numa == 0 else "64-127", nvlink=[])
            d["gpus"].append(g)
            d["links"].append({"a": b_, "b": sw, "kind": "pcie", "bw_GBps": 24.0, "gen": 4, "width": 16})
            if nvswitch:
                d["links"].append({"a": b_, "b": nvs, "kind": "nvlink", "bw_GBps": 450.0, "count": 18})
        nb = f"{dom:04x}:{s % 200:02x}:10.0"
        d["nics"].append(dict(n0, name=f"mlx5_{s}", netdev=f"ib{s}", pci_bus_id=nb, numa_node=numa, parent=sw,
                              guid=f"0x{s + 1:x}"))
        d["links"].append({"a": nb, "b": sw, "kind": "pcie", "bw_GBps": 24.0, "gen": 4, "width": 16})
    return d


def _more_nics(doc: dict, n: int) -> dict:
    """``doc`` with NICs added, one per GPU in turn, under the GPU's switch, up to ``n``."""
    d = json.loads(json.dumps(doc))
    n0 = d["nics"][0]
    for i in range(len(d["nics"]), n):
        g = d["gpus"][i % len(d["gpus"])]
        b = f"{0x10 + i // 200:04x}:{i % 200:02x}:00.0"
        d["nics"].append(dict(n0, name=f"mlx5_{i}", netdev=f"ib{i}", pci_bus_id=b, parent=g["parent"],
                              numa_node=g["numa_node"], guid=f"0x{i + 1:x}"))
        d["links"].append({"a": b, "b": g["parent"], "kind": "pcie", "bw_GBps": 24.0, "gen": 4, "width": 16})
    return d


def _more_switches(doc: dict, n: int) -> dict:
    """``doc`` with empty PCIe switches added under its first host bridge, up to ``n`` switches."""
    d = json.loads(json.dumps(doc))
    top = d["switches"][0]["id"]
    for i in range(n - len(d["switches"])):
        s = f"0100:{i // 256:02x}:{i % 256:02x}.0"
        d["switches"].append({"id": s, "kind": "pcie", "pci_bus_id": s, "parent": top, "numa_node": 0})
        d["links"].append({"a": s, "b": top, "kind": "pcie", "bw_GBps": 24.0, "gen": 4, "width": 16})
    return d


def _fused_xml(trays: int) -> str:
    """NCCL's fused topology dump of ``trays`` GB300 trays of one NVLink domain (4 GPUs each): the
    first host of the constructed 2-tray dump (fixtures/captures/nvl72/c01), once per tray."""
    src = (CAPTURES / "nvl72" / "c01_gb300-nvl72_2trays-8gpu_fused-topo-dump_CONSTRUCTED.xml").read_text().splitlines()
    first = [i for i, line in enumerate(src) if "<cpu " in line][2]   # the second host's first <cpu>
    host = "\n".join(src[1:first])
    key = host.split('host_hash="', 1)[1].split('"', 1)[0]
    return "\n".join([src[0]] + [host.replace(key, f"0x{0x1000 + t:016x}") for t in range(trays)] + ["</system>"]) + "\n"


def _snapshot_archives(d: Path) -> Dict[str, Path]:
    """The small recorded host as a snapshot archive in every compression tarfile writes."""
    out = {}
    for name, mode in (("tar.gz", "w:gz"), ("tar.xz", "w:xz"), ("tar.bz2", "w:bz2"), ("tar", "w")):
        p = d / f"snap.{name}"
        with tarfile.open(p, mode) as tf:
            tf.add(SMALL_HOST, arcname="snap")
        out[name] = p
    return out


def _mutate_all(doc: dict, key: str, field_: str, value) -> dict:
    d = json.loads(json.dumps(doc))
    for it in d[key]:
        it[field_] = value
    return d


def _append(doc: dict, key: str, item: dict) -> dict:
    d = json.loads(json.dumps(doc))
    d[key].append(item)
    return d


def _replace_with_link(p: Path, target: str) -> None:
    if p.exists() or p.is_symlink():
        p.unlink()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.symlink_to(target)


def self_topology() -> Path:
    return CAPTURES / "topo" / "17_h100-sxm-x8_12nic.txt"


def generate(out: Path, full: bool = True) -> List[Case]:
    """Write the corpus under ``out`` and return its cases; ``full=False`` writes fewer variants
    (enough for the representative subset, the cases flagged ``fast``)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    c = _Corpus(out, full)
    for gen in (c.special_files, c.json_structure, c.yaml_structure, c.wrong_types, c.semantics, c.captures,
                c.snapshots, c.hostlists, c.nvidia_smi, c.measurements, c.outputs,
                c.long_lines, c.int_spellings, c.deep_pci, c.expansions, c.big_sizes, c.meanings, c.calibration,
                c.terminal):
        gen()
    # the representative subset: at most 3 flagged cases per class
    per: Dict[str, int] = {}
    for case in c.cases:
        if case.fast:
            per[case.cls] = per.get(case.cls, 0) + 1
            case.fast = per[case.cls] <= 3
    return c.cases


# ============================================================================================
# Running
@dataclass
class Outcome:
    case: Case
    code: Optional[int]
    stderr: str
    seconds: float
    problems: List[str]
    rss: int = 0          # peak resident memory of the run, bytes


def _limit_memory(limit: int = MEMORY_LIMIT) -> Callable[[], None]:
    def apply() -> None:  # pragma: no cover - runs in the child
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        os.setsid()   # its own process group: a case that runs past its limit is killed whole

    return apply


# Control characters a terminal acts on (C0 but tab and newline, DEL, C1) and the bidirectional
# overrides that reorder what is shown: none may reach stdout or stderr from a name in an input.
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _spawn(argv: List[str], env: dict, cwd: Path, stdin, stdout, stderr, limit: float, mem: int):
    """Run ``argv``; (exit status or None when killed at ``limit`` seconds, peak RSS in bytes)."""
    p = subprocess.Popen(argv, env=env, cwd=str(cwd), stdin=stdin, stdout=stdout, stderr=stderr,
                         preexec_fn=_limit_memory(mem))
    deadline = time.monotonic() + limit
    code = None
    rss = 0
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            code = os.waitstatus_to_exitcode(status)
            rss = ru.ru_maxrss * 1024
            break
        if time.monotonic() > deadline:
            try:
                os.killpg(p.pid, 9)
            except OSError:
                pass
            _, _, ru = os.wait4(p.pid, 0)
            rss = ru.ru_maxrss * 1024
            break
        time.sleep(0.02)
    p.returncode = code if code is not None else -9
    return code, rss


def _snap(paths: List[str]) -> dict:
    out = {}
    for p in paths:
        try:
            out[p] = Path(p).read_bytes() if Path(p).is_file() and not Path(p).is_symlink() else None
        except OSError:
            out[p] = None
    return out


def _parse(data: Optional[bytes]):
    if data is None:
        return None
    import yaml

    try:
        return json.loads(data)
    except ValueError:
        try:
            return yaml.safe_load(data)
        except yaml.YAMLError:
            return None


def _kept_and_added(old: Optional[bytes], new: Optional[bytes]) -> bool:
    """Every top-level entry of the old document is in the new one, unchanged, and measurements were added."""
    a, b = _parse(old), _parse(new)
    if not isinstance(a, dict) or not isinstance(b, dict) or not isinstance(b.get("measured"), dict):
        return False

    def canon(v):  # the writer sorts lists (links by endpoints): compare them as multisets
        if isinstance(v, list):
            return sorted(json.dumps(x, sort_keys=True) for x in v)
        return json.dumps(v, sort_keys=True)

    return all(canon(b.get(k)) == canon(v) for k, v in a.items()
               if k not in ("measured", "warnings", "generated_at", "sources"))


def _leftovers(d: str) -> List[str]:
    try:
        return [n for n in os.listdir(d) if n.endswith(".gpucomm-tmp") or n.startswith((".gpucomm-snap-", "gpucomm-load-"))]
    except OSError:
        return []


def run_case(case: Case, scratch: Path) -> Outcome:
    tmp = Path(tempfile.mkdtemp(prefix="tmp-", dir=scratch))
    env = dict(os.environ, TMPDIR=str(tmp), COLUMNS="120", NO_COLOR="1", PYTHONDONTWRITEBYTECODE="1")
    env.pop("GPUCOMM_FSROOT", None)
    env.update(case.env)
    before = _snap(case.keep + case.grow)
    limit = case.time_limit or TIME_LIMIT
    io_dir = Path(tempfile.mkdtemp(prefix="io-", dir=scratch))
    t0 = time.monotonic()
    with open(io_dir / "err", "w+b") as err_f, open(io_dir / "out", "w+b") as out_f, \
            open(case.stdin or os.devnull, "rb") as in_f:
        code, rss = _spawn([sys.executable, "-m", "gpucomm", *case.argv], env, scratch, in_f,
                           out_f if case.clean_out else subprocess.DEVNULL, err_f, limit,
                           case.mem_limit or MEMORY_LIMIT)
        err_f.seek(0)
        raw_err = err_f.read(4 << 20)
        out_f.seek(0)
        raw_out = out_f.read(16 << 20)
    shutil.rmtree(io_dir, ignore_errors=True)
    err = raw_err.decode("utf-8", "replace")
    secs = time.monotonic() - t0
    problems = []
    if code is None:
        problems.append(f"ran past {limit:g}s")
    if case.rss_limit and rss > case.rss_limit:
        problems.append(f"used {rss / 2 ** 20:.0f} MiB, over {case.rss_limit / 2 ** 20:.0f} MiB")
    if case.clean_out:
        bad = CONTROL.search(raw_out.decode("utf-8", "replace")) or CONTROL.search(err)
        if bad:
            problems.append(f"control character {bad.group()!r} printed")
    if case.max_err_lines and err.count("\n") > case.max_err_lines:
        problems.append(f"{err.count(chr(10))} lines on stderr, more than {case.max_err_lines}")
    elif code not in case.ok:
        problems.append(f"exit {code}")
    if "Traceback" in err or "internal error" in err or "MemoryError" in err:
        problems.append("internal error / traceback")
    if code == 1 and err.strip("\n").split("\n")[-1] == NEEDS_TORCH:
        pass  # bench accepted its --save input (warnings above it are due), then found no torch here
    elif code == 1:
        lines = err.strip("\n").split("\n")
        if len(lines) != 1 or not lines[0].startswith("gpucomm: error: "):
            problems.append(f"error is not one line ({len(lines)} lines)")
        elif not any(n in lines[0] for n in case.names):
            problems.append("error does not name the file")
    if case.must_fail and code != 1:
        problems.append("was not refused")
    if case.warn and code == 0 and "warning" not in err:
        problems.append("no warning")
    left = os.listdir(tmp)
    if left:
        problems.append(f"left {left[:3]} in TMPDIR")
    for d in case.no_tmp:
        if _leftovers(d):
            problems.append(f"left {_leftovers(d)[:3]} in {d}")
    after = _snap(case.keep + case.grow)
    changed = [p for p in case.keep if before.get(p) != after.get(p)]
    if changed:
        problems.append(f"changed {changed}")
    for p in case.grow:
        if code != 0 and before.get(p) != after.get(p):
            problems.append(f"changed {p} though refused")
        elif code == 0 and not _kept_and_added(before.get(p), after.get(p)):
            problems.append(f"--save lost what {p} held")
    shutil.rmtree(tmp, ignore_errors=True)
    return Outcome(case, code, err, secs, problems, rss)


def run_all(cases: List[Case], scratch: Path, jobs: int = 2, progress: Optional[Callable] = None) -> List[Outcome]:
    from concurrent.futures import ThreadPoolExecutor

    # cases that share an output directory or a mutable input run in order; the rest in parallel
    serial = [c for c in cases if c.cls in ("outputs",) or c.keep or c.grow]
    parallel = [c for c in cases if c not in serial]
    outcomes = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        for o in ex.map(lambda c: run_case(c, scratch), parallel):
            outcomes.append(o)
            if progress:
                progress(o)
    for c in serial:
        o = run_case(c, scratch)
        outcomes.append(o)
        if progress:
            progress(o)
    return outcomes


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--run", action="store_true")
    ap.add_argument("--fast", action="store_true", help="only the representative subset")
    ap.add_argument("--only", help="only this class")
    ap.add_argument("-j", type=int, default=2)
    a = ap.parse_args(argv)
    cases = generate(Path(a.out), full=not a.fast)
    if a.fast:
        cases = [c for c in cases if c.fast]
    if a.only:
        cases = [c for c in cases if c.cls == a.only]
    print(f"{len(cases)} cases in {a.out}")
    if not a.run:
        return 0
    bad = 0

    def show(o: Outcome) -> None:
        nonlocal bad
        bad += bool(o.problems)
        mark = "FAIL" if o.problems else "ok  "
        first = o.stderr.strip().splitlines()[-1][:150] if o.stderr.strip() else ""
        print(f"{mark} {o.seconds:6.2f}s {o.rss / 2 ** 20:5.0f}MiB exit {o.code} {o.case.id}  {'; '.join(o.problems)}  "
              f"| {first}", flush=True)

    scratch = Path(a.out) / "_run"
    scratch.mkdir(exist_ok=True)
    run_all(cases, scratch, a.j, show)
    print(f"{bad} failing of {len(cases)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
