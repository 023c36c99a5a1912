"""Snapshots: record the raw inputs of a node (``gpucomm snapshot``) and replay them.

Layout: docs/SNAPSHOT_FORMAT.md.  :func:`write_snapshot` does not guess which files matter: it
runs the probe through a :class:`RecordingHost` that notes every path a source reads, lists or
resolves, every command it runs and the NVML record, and then copies exactly that subset --
files byte for byte, symlinks with their original relative targets, directories as directories.
Replaying the copy therefore reads the same bytes through the same code.

:func:`load_snapshot` accepts the directory or a ``.tar.gz`` of it (one top-level directory).
Archives are extracted by hand into a temporary directory: absolute names, ``..`` components,
hard links, device files and FIFOs are refused, symlinks must stay inside the archive (checked
again on the extracted tree), and member count and sizes are bounded.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import posixpath
import shutil
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from gpucomm.probes.errors import InputError
from gpucomm.probes.files import check_writable, kind_of, read_limited, write_atomic
from gpucomm.probes.limits import (MAX_ARCHIVE_FILE_BYTES, MAX_ARCHIVE_HEADER_BYTES, MAX_ARCHIVE_MEMBERS,
                                   MAX_ARCHIVE_TOTAL_BYTES, MAX_HOST_FILE_BYTES)
from gpucomm.probes.sources.host import (ENVIRON_FILE, CommandResult, CommandRunner, Host, RecordedRunner,
                                         environ_json, extract_bytes)

if TYPE_CHECKING:   # archives only: replaying a snapshot directory imports none of these
    import tarfile

SNAPSHOT_SCHEMA = "gpucomm.snapshot/v1"
MAX_MEMBERS = MAX_ARCHIVE_MEMBERS
MAX_FILE_BYTES = MAX_ARCHIVE_FILE_BYTES
MAX_TOTAL_BYTES = MAX_ARCHIVE_TOTAL_BYTES
MAX_READ = MAX_HOST_FILE_BYTES  # the largest file a probe reads is /proc/cpuinfo
TMP_PREFIX = "gpucomm-load-"
SOFTWARE_SOURCES = ("driver", "nccl", "netplugin", "gdr", "iommu", "hypervisor", "services")
META_HOST_KEYS = ("hostname", "os", "kernel", "cpu_vendor", "cpu_model", "cpu_arch", "sockets",
                  "cpus_logical", "cpus_physical", "memory_bytes")


# ------------------------------------------------------------------------------------------
# Recording
class RecordingRunner(CommandRunner):
    """Runs commands through another runner and keeps the results."""

    def __init__(self, base: CommandRunner):
        super().__init__(getattr(base, "timeout", 15.0))
        self.base = base
        self.results: dict = {}

    def run(self, argv) -> CommandResult:
        r = self.base.run(argv)
        self.results[tuple(argv)] = r
        return r


class RecordingHost(Host):
    """A :class:`Host` that remembers what the probes touched."""

    def __init__(self, base: Host):
        super().__init__(root=base.root, runner=RecordingRunner(base.runner), nvml=base.nvml,
                         provenance=base.provenance)
        self.files: set = set()
        self.dirs: set = set()
        self.resolved: set = set()
        self.matched: set = set()     # entries list_matching found (kept without their directory's others)
        self.ranges: dict = {}        # path -> {offset: bytes} of large files read by range (extracts)
        self.sizes: dict = {}         # path -> size of those files
        self.env_read = False

    def read_bytes(self, p: str, limit: int = MAX_READ) -> Optional[bytes]:
        data = super().read_bytes(p, limit)
        if data is not None:
            self.files.add(p)
        return data

    def listdir(self, p: str) -> list:
        r = super().listdir(p)
        if r:
            self.dirs.add(p)
        return r

    def realpath(self, p: str) -> Optional[str]:
        r = super().realpath(p)
        if r is not None:
            self.resolved.add(p)
        return r

    def list_matching(self, p: str, prefixes: tuple) -> list:
        r = super().list_matching(p, prefixes)
        self.matched.update(posixpath.join(p, e) for e in r)
        return r

    def read_range(self, p: str, offset: int, length: int, record: bool = True) -> Optional[bytes]:
        data = super().read_range(p, offset, length, record)
        if data and record:
            self.ranges.setdefault(p, {})[offset] = data
            if p not in self.sizes:
                self.sizes[p] = Host.file_size(self, p) or offset + len(data)
        return data

    def environ(self) -> dict:
        self.env_read = True
        return super().environ()


class _Copier:
    """Reproduce host paths under ``out``: symlinks as symlinks, read files by content."""

    def __init__(self, host: Host, out: Path):
        self.root = str(host.root).rstrip("/")
        self.out = str(out)
        self.files = 0
        self.bytes = 0
        self.made: set = set()
        self.kinds: dict = {}   # host path -> None (not a link) or the link's raw target

    def dst(self, p: str) -> str:
        return os.path.join(self.out, p.lstrip("/"))

    def mkdir(self, d: str) -> None:
        if d not in self.made:
            os.makedirs(d, exist_ok=True)
            self.made.add(d)

    def ensure(self, p: str, want: str, data: Optional[bytes] = None) -> None:
        """want: "file" (copy content), "extract" (write ``data``, the file's extract), "dir" (create),
        "any" (dirs/symlinks only).

        Walks ``p`` component by component like the kernel does, re-creating every symlink met on
        the way (with its relative target) and continuing from where the link points."""
        parts = [x for x in p.split("/") if x and x != "."]
        cur, i, hops = "/", 0, 0
        while i < len(parts):
            part = parts[i]
            if part == "..":
                cur = posixpath.dirname(cur) if cur != "/" else "/"
                i += 1
                continue
            nxt = (cur.rstrip("/") + "/" + part)
            src = self.root + nxt
            if nxt not in self.kinds:
                self.kinds[nxt] = os.readlink(src) if os.path.islink(src) else None
                if self.kinds[nxt] is not None:
                    target = self.kinds[nxt]
                    if os.path.isabs(target):  # keep the tree relocatable
                        target = os.path.relpath(target, posixpath.dirname(nxt))
                    d = self.dst(nxt)
                    self.mkdir(os.path.dirname(d))
                    if not os.path.lexists(d):
                        os.symlink(target, d)
            target = self.kinds[nxt]
            if target is not None:
                hops += 1
                if hops > 40:
                    return
                if os.path.isabs(target):
                    cur = "/"
                parts = [x for x in target.split("/") if x and x != "."] + parts[i + 1:]
                i = 0
                continue
            d = self.dst(nxt)
            if i < len(parts) - 1:
                self.mkdir(d)
            elif want == "file":
                self._copy_file(src, d)
            elif want == "extract" and data is not None and not os.path.lexists(d):
                self.mkdir(os.path.dirname(d))
                with open(d, "wb") as f:
                    f.write(data)
                self.files += 1
                self.bytes += len(data)
            elif os.path.isdir(src):
                self.mkdir(d)
            cur = nxt
            i += 1

    def _copy_file(self, src: str, d: str) -> None:
        try:
            data = read_limited(src, MAX_READ)
        except InputError:
            return
        if os.path.lexists(d):
            return
        self.mkdir(os.path.dirname(d))
        with open(d, "wb") as f:
            f.write(data)
        self.files += 1
        self.bytes += len(data)


def write_snapshot(host: Optional[Host] = None, out_path=None, collected_at: Optional[str] = None,
                   name: Optional[str] = None, description: str = "", force: bool = False) -> dict:
    """Record ``host`` (default: this machine) into ``out_path``: a directory, or a ``.tar.gz``
    / ``.tgz`` file (one top-level directory), byte-identical for identical inputs; ``"-"`` gives
    the .tar.gz bytes in ``result["data"]`` (the CLI writes them to stdout).

    An existing archive is replaced only with ``force`` (atomically); a directory must be new or
    empty; a final symbolic link is never followed.  ``collected_at`` (an ISO timestamp) is stored
    in meta.json only when given (deterministic output by default).  Returns ``{"path", "kind",
    "files", "bytes", "sources", "document"}``: ``document`` is the topology probed while recording."""
    import tempfile
    from gpucomm.probes.sources.probe import probe_host

    if out_path is None or str(out_path) == "":
        raise InputError("no output path given", expected="a directory or a .tar.gz file name")
    to_stdout = str(out_path) == "-"
    out = Path("snapshot.tar.gz" if to_stdout else out_path)
    label = "-" if to_stdout else str(out)
    is_tar = to_stdout or out.name.endswith((".tar.gz", ".tgz"))
    base_name = name or (out.name[:-7] if out.name.endswith(".tar.gz") else out.name[:-4] if is_tar else out.name) \
        or "snapshot"
    if not to_stdout:
        _check_target(out, is_tar, force)
    host = host if host is not None else Host()
    rec = RecordingHost(host)
    doc = probe_host(rec)
    # A directory is staged next to its final place and renamed (no copy); an archive is staged
    # in a temporary directory.
    parent = out.parent if not is_tar else None
    data = None
    try:
        if parent is not None:
            parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".gpucomm-snap-", dir=parent) as td:
            stage = Path(td) / base_name
            stage.mkdir()
            cp = _Copier(rec, stage)
            for p in sorted(rec.dirs):
                cp.ensure(p, "dir")
                for entry in Host.listdir(rec, p):  # unrecorded listing of what the probe listed
                    cp.ensure(posixpath.join(p, entry), "any")
            for p in sorted(rec.resolved):
                cp.ensure(p, "any")
            for p in sorted(rec.matched):
                cp.ensure(p, "any")
            for p in sorted(rec.files):
                cp.ensure(p, "file")
            for p in sorted(rec.ranges):
                if p not in rec.files:
                    cp.ensure(p, "extract", extract_bytes(rec.sizes[p], rec.ranges[p]))
            if rec.env_read:
                (stage / ENVIRON_FILE.lstrip("/")).write_text(environ_json(rec.environ()), encoding="utf-8")
            _write_commands(rec, stage)
            _write_nvml(rec, stage)
            meta = {"schema": SNAPSHOT_SCHEMA, "name": base_name, "description": description,
                    "collected_at": collected_at, "capture": None, "generated_by": "gpucomm snapshot",
                    "sources": [{"name": s["name"], "status": s["status"], "detail": s["detail"]} for s in doc["sources"]]}
            for k in META_HOST_KEYS:
                meta[k] = doc["host"].get(k)
            # the software-path sources ran: a file they did not find is absent on the host (sources/swpath.py)
            meta["software_recorded"] = any(s["name"] in SOFTWARE_SOURCES and s["status"] != "unavailable"
                                            for s in doc["sources"])
            (stage / "meta.json").write_text(json.dumps(meta, sort_keys=True, indent=2) + "\n", encoding="utf-8")
            files, size = _count(stage)
            if is_tar:
                data = _tar_bytes(stage)
                if not to_stdout:
                    write_atomic(out, data, force=force, label=label)
            else:
                _check_target(out, is_tar, force)  # still new or empty
                if out.is_dir():
                    out.rmdir()  # empty (checked above)
                os.rename(stage, out)
    except OSError as e:
        raise InputError(f"cannot write: {e.strerror or e}", label) from None
    res = {"path": label, "kind": "tar.gz" if is_tar else "directory", "files": files, "bytes": size,
           "sources": doc["sources"], "document": doc}
    if to_stdout:
        res["data"] = data
    return res


def _check_target(out: Path, is_tar: bool, force: bool) -> None:
    """Refuse an output path before anything is probed: an archive as :func:`check_writable`
    does; a directory that exists and is not empty, or is a symbolic link or a file."""
    if is_tar:
        check_writable(out, force)
        return
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        return
    except OSError as e:
        raise InputError(f"cannot write: {e.strerror or e}", str(out)) from None
    if stat.S_ISLNK(st.st_mode):
        raise InputError("is a symbolic link; not followed", str(out), expected="a new directory, or a file name ending in .tar.gz")
    if not stat.S_ISDIR(st.st_mode) or any(out.iterdir()):
        raise InputError("already exists and is not an empty directory", str(out),
                         expected="a new directory, or a file name ending in .tar.gz")


def _write_commands(rec: RecordingHost, stage: Path) -> None:
    for argv, r in sorted(rec.runner.results.items()):
        if r.returncode == 0:
            d = stage / "commands"
            d.mkdir(exist_ok=True)
            (d / RecordedRunner.file_name(argv)).write_text(r.stdout, encoding="utf-8")


def _write_nvml(rec: RecordingHost, stage: Path) -> None:
    h = rec.nvml
    if h is None:
        return
    try:
        if h.available() is not True:
            return
        record = h.record()
    except InputError:
        return
    (stage / "nvml.json").write_text(json.dumps(record, sort_keys=True, indent=1) + "\n", encoding="utf-8")


def _count(stage: Path) -> tuple:
    files = size = 0
    for dirpath, dirnames, filenames in os.walk(stage):
        for f in filenames:
            p = os.path.join(dirpath, f)
            if not os.path.islink(p):
                files += 1
                size += os.path.getsize(p)
    return files, size


def _write_tar(stage: Path, out: Path) -> None:
    """:func:`_tar_bytes` into ``out`` (fixtures/pack_examples.py packs the bundled examples so)."""
    write_atomic(out, _tar_bytes(stage), force=True)


def _tar_bytes(stage: Path) -> bytes:
    """Deterministic .tar.gz: sorted members, zero mtimes/owners, gzip header without a date."""
    import gzip
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        root = stage.parent
        paths = [stage]
        for dirpath, dirnames, filenames in os.walk(stage):
            dirnames.sort()
            for n in sorted(dirnames + filenames):
                paths.append(Path(dirpath) / n)
        for p in sorted(set(paths), key=lambda x: str(x.relative_to(root))):
            arc = str(p.relative_to(root))
            ti = tarfile.TarInfo(arc)
            ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname = 0, 0, 0, "", ""
            if p.is_symlink():
                ti.type, ti.linkname, ti.mode = tarfile.SYMTYPE, os.readlink(p), 0o777
                tf.addfile(ti)
            elif p.is_dir():
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(ti)
            else:
                data = p.read_bytes()
                ti.size, ti.mode = len(data), 0o644
                tf.addfile(ti, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(buf.getvalue())
    return out.getvalue()


# ------------------------------------------------------------------------------------------
# Loading
def load_snapshot(path) -> dict:
    """A snapshot directory or .tar.gz -> finalised topology document (provenance ``snapshot``,
    or ``fixture`` when meta.json says so).

    A directory is held to an archive's rules first (:func:`check_tree`); an archive is extracted
    into ``$TMPDIR/gpucomm-load-<pid>-*``, removed afterwards (and by a later run if this one was
    killed)."""
    import tempfile
    p = Path(path)
    if p.is_dir():
        check_tree(p, str(p))
        return _load_dir(p, str(p))
    if not p.exists():
        raise InputError("no such file or directory", str(p))
    st = p.stat()
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"is {kind_of(st.st_mode)}, not a regular file", str(p), expected="a snapshot .tar.gz")
    sweep_stale_extractions()
    with tempfile.TemporaryDirectory(prefix=f"{TMP_PREFIX}{os.getpid()}-") as td:
        root = safe_extract(p, Path(td))
        return _load_dir(root, str(p))


def sweep_stale_extractions(tmpdir: Optional[str] = None, limit: int = 10_000) -> int:
    """Remove ``gpucomm-load-<pid>-*`` directories of runs that were killed (their process is
    gone) and that belong to this user; returns how many were removed."""
    import tempfile
    tmpdir = tmpdir or tempfile.gettempdir()
    removed = 0
    try:
        entries = os.scandir(tmpdir)
    except OSError:
        return 0
    with entries:
        for n, e in enumerate(entries):
            if n >= limit:
                break
            if not e.name.startswith(TMP_PREFIX):
                continue
            pid_s = e.name[len(TMP_PREFIX):].split("-", 1)[0]
            if not pid_s.isdigit() or int(pid_s) == os.getpid():
                continue
            try:
                if e.is_symlink() or not e.is_dir() or e.stat(follow_symlinks=False).st_uid != os.getuid():
                    continue
                os.kill(int(pid_s), 0)
                continue  # still running
            except ProcessLookupError:
                pass
            except (PermissionError, OSError, OverflowError):
                continue
            shutil.rmtree(e.path, ignore_errors=True)
            removed += 1
    return removed


def check_tree(root: Path, label: str) -> None:
    """A snapshot directory under an archive's rules: at most MAX_MEMBERS entries, only regular
    files, directories and symlinks that resolve inside the directory."""
    droot = os.path.realpath(root)
    count = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            count += 1
            if count > MAX_MEMBERS:
                raise InputError(f"more than {MAX_MEMBERS} entries", label, expected="a snapshot directory")
            full = os.path.join(dirpath, n)
            rel = os.path.relpath(full, root)
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                real = os.path.realpath(full)
                if real != droot and not real.startswith(droot.rstrip(os.sep) + os.sep):
                    raise InputError(f"symlink {rel[:80]!r} resolves outside the snapshot", label)
            elif not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                raise InputError(f"{kind_of(st.st_mode)} {rel[:80]!r} is not allowed in a snapshot", label)


def _load_dir(root: Path, label: str) -> dict:
    from gpucomm.probes.model import PROVENANCES, warn
    from gpucomm.probes.sources.nvml import NoNvml, RecordedNvml
    from gpucomm.probes.sources.probe import probe_host

    if not (root / "meta.json").is_file() and not (root / "sys").is_dir():
        raise InputError("not a snapshot", label, expected="a directory with meta.json and sys/ (gpucomm snapshot layout)")
    meta, meta_problem = _read_meta(root)
    prov = meta.get("provenance") if meta.get("provenance") in ("snapshot", "fixture") else "snapshot"
    assert prov in PROVENANCES
    if (root / "nvml.json").is_file():
        nvml = RecordedNvml(root / "nvml.json")
    else:
        why = next((s.get("detail") for s in meta.get("sources") or []
                    if isinstance(s, dict) and s.get("name") == "nvml" and s.get("status") != "ok"
                    and isinstance(s.get("detail"), str)), None)
        nvml = NoNvml("no nvml.json in the snapshot" + (f" (when recorded: {why})" if why else ""))
    host = Host(root=root, runner=RecordedRunner(root / "commands"), nvml=nvml, provenance=prov)
    doc = probe_host(host)
    if meta_problem:
        warn(doc, f"{label}: meta.json {meta_problem}")
    return doc


def _read_meta(root: Path) -> tuple:
    f = root / "meta.json"
    if not f.is_file():
        return {}, None
    try:
        meta = json.loads(read_limited(f, MAX_READ).decode("utf-8"))
    except InputError as e:
        return {}, f"unreadable ({e.message}); host facts missing"
    except RecursionError:
        return {}, "unreadable (nested too deep); host facts missing"
    except ValueError as e:
        return {}, f"unreadable ({' '.join(str(getattr(e, 'msg', None) or e).split())[:80]}); host facts missing"
    if not isinstance(meta, dict):
        return {}, "is not a JSON object; host facts missing"
    return meta, None


def _bounded_tarinfo():
    """The TarInfo class safe_extract reads headers with (defined on first use: tarfile is imported
    only where an archive is read)."""
    global _BOUNDED_TARINFO
    if _BOUNDED_TARINFO is None:
        import tarfile

        class _BoundedTarInfo(tarfile.TarInfo):
            """A tar header whose GNU long name / PAX extended header is read only when it is small: the
            standard library reads such a header whole, whatever size the archive claims."""

            def _proc_member(self, tf):  # tarfile.TarInfo._proc_member (CPython 3.8-3.13)
                if self.type in (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE,
                                 tarfile.SOLARIS_XHDTYPE) and self.size > MAX_ARCHIVE_HEADER_BYTES:
                    raise InputError(f"an extended tar header of {self.size} bytes (limit {MAX_ARCHIVE_HEADER_BYTES})")
                if self.type == tarfile.GNUTYPE_SPARSE:
                    raise InputError("a sparse member is not allowed in a snapshot")
                return super()._proc_member(tf)

        _BOUNDED_TARINFO = _BoundedTarInfo
    return _BOUNDED_TARINFO


_BOUNDED_TARINFO = None


def safe_extract(archive: Path, dest: Path) -> Path:
    """Extract a snapshot archive into ``dest`` safely; returns the snapshot root inside it.

    Every header is checked before anything is written (names, types, sizes, member count,
    symlink targets); then the members are written."""
    import tarfile
    import zlib
    label = str(archive)
    try:
        tf = tarfile.open(archive, mode="r:*", tarinfo=_bounded_tarinfo())
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        raise InputError(f"not a readable tar archive ({e})", label, expected="a .tar.gz written by `gpucomm snapshot`") from None
    except InputError as e:
        raise InputError(e.message, label) from None
    symlinks = []
    try:
        with tf:
            plan = _check_members(tf, label)
            for name, parts, m in plan:
                target = dest.joinpath(*[x for x in parts if x])
                _check_parent(dest, target, label)
                if m.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                elif m.issym():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    if os.path.lexists(target):
                        raise InputError(f"duplicate member {name[:80]!r}", label)
                    os.symlink(m.linkname, target)
                    symlinks.append(target)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    if os.path.lexists(target):
                        raise InputError(f"duplicate member {name[:80]!r}", label)
                    src = tf.extractfile(m)
                    data = src.read(MAX_FILE_BYTES + 1) if src is not None else b""
                    with open(target, "xb") as f:
                        f.write(data)
    except (tarfile.TarError, EOFError, zlib.error, OSError) as e:
        raise InputError(f"damaged archive ({e})", label) from None
    # Symlink chains can only be judged on the finished tree: every link must resolve inside.
    droot = os.path.realpath(dest)
    for s in symlinks:
        real = os.path.realpath(s)
        if real != droot and not real.startswith(droot + os.sep):
            for t in symlinks:  # leave no link pointing outside behind
                with contextlib.suppress(OSError):
                    os.unlink(t)
            raise InputError(f"symlink {os.path.relpath(s, dest)!r} resolves outside the archive", label)
    if (dest / "meta.json").is_file() or (dest / "sys").is_dir():
        return dest
    entries = [e for e in dest.iterdir()]
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        return entries[0]
    raise InputError("archive is not a snapshot", label, expected="one top-level directory holding meta.json and sys/")


def _check_members(tf: tarfile.TarFile, label: str) -> list:
    """Read every header (nothing is written) and refuse the archive at its first unsafe member."""
    plan = []
    total = 0
    for n, m in enumerate(_members(tf, label)):
        if n >= MAX_MEMBERS:
            raise InputError(f"more than {MAX_MEMBERS} members", label)
        name = m.name
        while name.startswith("./"):
            name = name[2:]
        if not name or name == ".":
            continue
        parts = name.split("/")
        if name.startswith("/") or "\\" in name or ".." in parts or "\x00" in name:
            raise InputError(f"unsafe member name {m.name[:80]!r}", label, expected="relative paths inside the archive")
        if m.issym():
            ln = m.linkname
            # where the link lands: "sys/." is written as "sys" (pathlib drops "." parts)
            at = "/".join(x for x in parts if x not in ("", "."))
            resolved = posixpath.normpath(posixpath.join(posixpath.dirname(at), ln))
            if ln.startswith("/") or resolved == ".." or resolved.startswith("../") or "\x00" in ln:
                raise InputError(f"symlink {name[:80]!r} -> {ln[:80]!r} leaves the archive", label)
        elif m.isfile():
            if m.size > MAX_FILE_BYTES:
                raise InputError(f"member {name[:80]!r} is {m.size} bytes (limit {MAX_FILE_BYTES})", label)
            total += m.size
            if total > MAX_TOTAL_BYTES:
                raise InputError(f"archive expands to more than {MAX_TOTAL_BYTES} bytes", label)
        elif not m.isdir():
            kind = "hard link" if m.islnk() else "device file" if (m.ischr() or m.isblk()) else \
                "FIFO" if m.isfifo() else "special member"
            raise InputError(f"{kind} {name[:80]!r} is not allowed in a snapshot", label)
        plan.append((name, parts, m))
    return plan


def _members(tf: tarfile.TarFile, label: str):
    import tarfile
    import zlib
    while True:
        try:
            m = tf.next()
        except (tarfile.TarError, EOFError, zlib.error, OSError) as e:
            raise InputError(f"damaged archive ({e})", label) from None
        except InputError as e:
            raise InputError(e.message, label) from None
        if m is None:
            return
        yield m


def _check_parent(dest: Path, target: Path, label: str) -> None:
    droot = os.path.realpath(dest)
    parent = os.path.realpath(target.parent)
    if parent != droot and not parent.startswith(droot + os.sep):
        raise InputError(f"member {str(target.relative_to(dest))[:80]!r} would be written outside the archive "
                         f"(through a symlink)", label)


__all__ = ["write_snapshot", "load_snapshot", "safe_extract", "check_tree", "sweep_stale_extractions", "RecordingHost"]
