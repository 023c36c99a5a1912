"""The host a probe looks at: a filesystem root, a command runner and an NVML handle, each
redirectable so that every probe runs the same on a live node, a snapshot and a fixture."""
from __future__ import annotations

import base64
import json
import os
import re
import selectors
import signal
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from gpucomm.probes.errors import InputError
from gpucomm.probes.files import Refused, kind_of, read_limited
from gpucomm.probes.limits import COMMAND_TIMEOUT_S, MAX_COMMAND_OUTPUT, MAX_EXTRACT_BYTES, MAX_HOST_FILE_BYTES

# A snapshot keeps of a large file (a shared library a probe scanned for its version) only the
# byte ranges that were read: an *extract*, this magic line then JSON {"schema", "size", "ranges":
# [[offset, base64], ...]}.  Read through :meth:`Host.read_range` it is a sparse copy of the file:
# the recorded ranges, zeros elsewhere (docs/SNAPSHOT_FORMAT.md).
EXTRACT_MAGIC = b"\x7fGPUCOMM-EXTRACT/1\n"
EXTRACT_SCHEMA = "gpucomm.extract/v1"

# The environment a probe records (Host.environ): what decides which NCCL and network plugin a job
# loads and how; nothing else of the environment is read or written into a snapshot.
ENV_NAMES = re.compile(r"^(?:NCCL_[A-Z0-9_]+|FI_[A-Z0-9_]+|LD_LIBRARY_PATH|LD_PRELOAD|CUDA_HOME|CUDA_PATH|"
                       r"CONDA_PREFIX|VIRTUAL_ENV)$")
ENVIRON_FILE = "/environ.json"
ENVIRON_SCHEMA = "gpucomm.environ/v1"


@dataclass
class CommandResult:
    argv: list
    returncode: Optional[int]  # None: not run (missing binary / timeout)
    stdout: str = ""
    stderr: str = ""
    error: Optional[str] = None  # why it did not run


class CommandRunner:
    """Runs a command for real, never through a shell, in its own process group: at most
    ``limit`` bytes of each stream are kept, and when the command runs past ``timeout`` seconds
    or prints more than ``limit`` bytes the whole group (its children too) is killed."""

    def __init__(self, timeout: float = COMMAND_TIMEOUT_S, limit: int = MAX_COMMAND_OUTPUT):
        self.timeout = timeout
        self.limit = limit

    def run(self, argv: Sequence[str]) -> CommandResult:
        argv = list(argv)
        try:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 start_new_session=True)
        except FileNotFoundError:
            return CommandResult(argv, None, error=f"{argv[0]} not found on PATH")
        except OSError as e:
            return CommandResult(argv, None, error=f"{argv[0]}: {e.strerror or e}")
        out, err, why = _drain(p, self.timeout, self.limit)
        _kill_group(p)
        if why == "timeout":
            return CommandResult(argv, None, error=f"{argv[0]} did not answer within {self.timeout:g}s")
        if why == "limit":
            return CommandResult(argv, None, error=f"{argv[0]} printed more than {self.limit} bytes; stopped")
        return CommandResult(argv, p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))


def _drain(p: "subprocess.Popen", timeout: float, limit: int) -> tuple:
    """Read both pipes until EOF, the deadline or the byte limit: (stdout, stderr, None|"timeout"|"limit")."""
    deadline = time.monotonic() + timeout
    bufs = {p.stdout.fileno(): bytearray(), p.stderr.fileno(): bytearray()}
    open_fds = set(bufs)
    why = None
    with selectors.DefaultSelector() as sel:
        for fd in open_fds:
            sel.register(fd, selectors.EVENT_READ)
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                why = "timeout"
                break
            for key, _ in sel.select(min(left, 1.0)):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fd)
                    open_fds.discard(key.fd)
                    continue
                bufs[key.fd] += chunk
                if len(bufs[key.fd]) > limit:
                    why = "limit"
            if why:
                break
    if why is None:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            why = "timeout"
    return bytes(bufs[p.stdout.fileno()]), bytes(bufs[p.stderr.fileno()]), why


def _kill_group(p: "subprocess.Popen") -> None:
    """Kill what is left of the command's process group (it may have started children) and reap it."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass
    for f in (p.stdout, p.stderr):
        try:
            f.close()
        except OSError:
            pass
    try:
        p.wait(5)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL was sent
        pass


class RecordedRunner(CommandRunner):
    """Answers from a directory of recorded outputs (``commands/<name>.txt``), as a snapshot holds.

    The file name is the argv joined with ``_`` and stripped of dashes, e.g. ``nvidia-smi topo -m``
    -> ``nvidia-smi_topo_m.txt``."""

    def __init__(self, directory: Path):
        super().__init__()
        self.directory = Path(directory)
        self.limit = MAX_COMMAND_OUTPUT

    @staticmethod
    def file_name(argv: Sequence[str]) -> str:
        return "_".join(a.strip("-") for a in argv) + ".txt"

    def run(self, argv: Sequence[str]) -> CommandResult:
        f = self.directory / self.file_name(argv)
        if not os.path.lexists(f):
            return CommandResult(list(argv), None, error=f"not recorded ({f.name})")
        try:
            data = _confined_read(f, self.directory.parent, self.limit)
        except InputError as e:
            return CommandResult(list(argv), None, error=f"recorded output unusable: {e}")
        return CommandResult(list(argv), 0, data.decode("utf-8", errors="replace"))


def _confined_read(path: Path, root: Optional[Path], limit: int) -> bytes:
    """read_limited, and with ``root`` the file must resolve inside it (a snapshot's or
    --sysfs-root's symlinks stay inside the tree, as a .tar.gz snapshot's must)."""
    if root is not None:
        inside(path, root)
    return read_limited(path, limit)


def inside(path: Path, root: Path) -> str:
    """The real path of ``path``; InputError when it resolves outside ``root``."""
    real = os.path.realpath(path)
    top = os.path.realpath(root)
    if real != top and not real.startswith(top.rstrip(os.sep) + os.sep):
        raise Refused(f"resolves outside {root}; not read", str(path))
    return real


@dataclass
class Host:
    """Where probes read from.  ``root`` prefixes every sysfs path (hwloc's HWLOC_FSROOT idea).

    Under a root other than ``/`` (a snapshot, ``--sysfs-root``, ``GPUCOMM_FSROOT``) every path
    must resolve inside the root; everywhere only regular files are read, each up to
    MAX_HOST_FILE_BYTES.  What is refused is left unread and listed in ``problems``."""

    root: Path = field(default_factory=lambda: Path(os.environ.get("GPUCOMM_FSROOT", "/")))
    runner: CommandRunner = field(default_factory=CommandRunner)
    nvml: Any = None  # gpucomm.probes.sources.nvml.NvmlSource-compatible handle; None = load the real library lazily
    provenance: str = "live"
    problems: list = field(default_factory=list, repr=False, compare=False)

    def path(self, p: str) -> Path:
        """Absolute host path -> path under the root."""
        return self.root / p.lstrip("/")

    @property
    def confined(self) -> bool:
        cached = self.__dict__.get("_confined")
        if cached is None or cached[0] != self.root:
            cached = (self.root, os.path.realpath(self.root) != os.sep)
            self.__dict__["_confined"] = cached
        return cached[1]

    def _problem(self, msg: str) -> None:
        if msg not in self.problems and len(self.problems) < 50:
            self.problems.append(msg)

    def read_bytes(self, p: str, limit: int = MAX_HOST_FILE_BYTES) -> Optional[bytes]:
        """Up to ``limit`` bytes of a regular file (more is refused), or None if it cannot be read."""
        full = self.path(p)
        try:
            if self.confined:
                inside(full, self.root)
            st = os.stat(full)
            if stat.S_ISREG(st.st_mode):
                return read_limited(full, MAX_HOST_FILE_BYTES)[:limit]
            if not stat.S_ISDIR(st.st_mode):
                self._problem(f"{full} is {kind_of(st.st_mode)}, not a regular file; not read")
        except Refused as e:
            self._problem(str(e))
        except (InputError, OSError, ValueError):
            pass
        return None

    def _regular(self, p: str) -> Optional[str]:
        """The full path of ``p`` when it is a regular file the rules allow reading, else None."""
        full = self.path(p)
        try:
            if self.confined:
                inside(full, self.root)
            st = os.stat(full)
        except Refused as e:
            self._problem(str(e))
            return None
        except (OSError, ValueError):
            return None
        if not stat.S_ISREG(st.st_mode):
            if not stat.S_ISDIR(st.st_mode):
                self._problem(f"{full} is {kind_of(st.st_mode)}, not a regular file; not read")
            return None
        return str(full)

    def read_range(self, p: str, offset: int, length: int, record: bool = True) -> Optional[bytes]:
        """Up to ``length`` bytes at ``offset`` of a regular file of any size (the ELF scans of
        :mod:`gpucomm.probes.formats.elf`), or None when it cannot be read.  A snapshot's extract of
        the file answers as the file would: the recorded ranges, zeros elsewhere.  ``record``: whether
        a recording host keeps these bytes (a scan keeps only the windows that matter)."""
        if offset < 0 or length <= 0:
            return b""
        full = self._regular(p)
        if full is None:
            return None
        try:
            with open(full, "rb") as f:
                if self.confined and f.read(len(EXTRACT_MAGIC)) == EXTRACT_MAGIC:
                    return _extract_range(full, offset, length)
                f.seek(offset)
                return f.read(length)
        except (OSError, ValueError):
            return None

    def file_size(self, p: str) -> Optional[int]:
        """Size of a regular file (an extract's recorded size), or None."""
        full = self._regular(p)
        if full is None:
            return None
        try:
            if self.confined:
                with open(full, "rb") as f:
                    if f.read(len(EXTRACT_MAGIC)) == EXTRACT_MAGIC:
                        return _read_extract(full)["size"]
            return os.path.getsize(full)
        except (OSError, ValueError, InputError):
            return None

    def list_matching(self, p: str, prefixes: tuple) -> list:
        """The entries of directory ``p`` whose names start with one of ``prefixes`` (a recording host
        keeps these entries only, not the whole directory: /usr/lib holds thousands)."""
        return [e for e in Host.listdir(self, p) if e.startswith(tuple(prefixes))]

    def environ(self) -> dict:
        """The environment a job started here would see, as far as it decides the software path:
        ``{"variables": {NAME: value} (ENV_NAMES only), "site_packages": [dirs], "known": bool}``.
        Live: this process's environment and its Python's site-packages directories; a snapshot or
        another root: its ``environ.json`` (``known`` False without one)."""
        cached = self.__dict__.get("_environ")
        if cached is not None:
            return cached
        if not self.confined:
            import sys

            env = {k: v for k, v in sorted(os.environ.items()) if ENV_NAMES.match(k)}
            site = [d for d in dict.fromkeys(sys.path) if d.endswith(("site-packages", "dist-packages"))]
            out = {"variables": env, "site_packages": site, "known": True}
        else:
            out = _environ_record(self.read_bytes(ENVIRON_FILE))
        self.__dict__["_environ"] = out
        return out

    def read_text(self, p: str) -> Optional[str]:
        """Contents of a sysfs file without its trailing newline, or None if it cannot be read."""
        data = self.read_bytes(p)
        return None if data is None else data.decode("utf-8", errors="replace").rstrip("\n")

    def listdir(self, p: str) -> list:
        full = self.path(p)
        try:
            if self.confined:
                inside(full, self.root)
            return sorted(os.listdir(full))
        except Refused as e:
            self._problem(str(e))
        except (OSError, ValueError):
            pass
        return []

    def realpath(self, p: str) -> Optional[str]:
        """Resolve symlinks *inside* the root and return the host-absolute path."""
        full = self.path(p)
        try:
            real = Path(os.path.realpath(full))
        except (OSError, ValueError):
            return None
        root = Path(os.path.realpath(self.root))
        try:
            rel = real.relative_to(root)
        except ValueError:
            return None
        if not real.exists():
            return None
        return "/" + str(rel)


def _read_extract(full: str) -> dict:
    """The JSON of an extract file (InputError when it is not one)."""
    data = read_limited(full, MAX_EXTRACT_BYTES * 2)
    try:
        rec = json.loads(data[len(EXTRACT_MAGIC):].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise InputError("an unreadable extract", full) from None
    if not isinstance(rec, dict) or rec.get("schema") != EXTRACT_SCHEMA or not isinstance(rec.get("size"), int) \
            or not isinstance(rec.get("ranges"), list):
        raise InputError("an unreadable extract", full, expected=EXTRACT_SCHEMA)
    return rec


def _extract_range(full: str, offset: int, length: int) -> Optional[bytes]:
    """``length`` bytes at ``offset`` of the file an extract stands for (zeros where not recorded)."""
    try:
        rec = _read_extract(full)
    except InputError:
        return None
    end = min(offset + length, rec["size"])
    if end <= offset:
        return b""
    out = bytearray(end - offset)
    for item in rec["ranges"]:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], int) and isinstance(item[1], str)):
            continue
        try:
            data = base64.b64decode(item[1], validate=True)
        except ValueError:
            continue
        lo, hi = max(offset, item[0]), min(end, item[0] + len(data))
        if lo < hi:
            out[lo - offset:hi - offset] = data[lo - item[0]:hi - item[0]]
    return bytes(out)


def extract_bytes(size: int, ranges: dict) -> bytes:
    """An extract file's bytes: ``ranges`` {offset: data} of a file of ``size`` bytes."""
    body = {"schema": EXTRACT_SCHEMA, "size": int(size),
            "ranges": [[off, base64.b64encode(data).decode("ascii")] for off, data in sorted(ranges.items())]}
    return EXTRACT_MAGIC + json.dumps(body, sort_keys=True).encode("utf-8") + b"\n"


def _environ_record(data: Optional[bytes]) -> dict:
    """A snapshot's ``environ.json`` -> Host.environ's answer (unknown when absent or broken)."""
    unknown = {"variables": {}, "site_packages": [], "known": False}
    if data is None:
        return unknown
    try:
        rec = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return unknown
    if not isinstance(rec, dict) or rec.get("schema") != ENVIRON_SCHEMA:
        return unknown
    var = rec.get("variables") if isinstance(rec.get("variables"), dict) else {}
    site = rec.get("site_packages") if isinstance(rec.get("site_packages"), list) else []
    return {"variables": {k: v for k, v in sorted(var.items()) if isinstance(v, str) and ENV_NAMES.match(str(k))},
            "site_packages": [d for d in site if isinstance(d, str)][:64], "known": True}


def environ_json(env: dict) -> str:
    """``environ.json`` of a snapshot (what :meth:`Host.environ` answered when it was recorded)."""
    return json.dumps({"schema": ENVIRON_SCHEMA, "variables": env.get("variables") or {},
                       "site_packages": env.get("site_packages") or []}, sort_keys=True, indent=1) + "\n"


def load_json_file(path: Path, limit: int = MAX_HOST_FILE_BYTES) -> Any:
    return json.loads(read_limited(path, limit).decode("utf-8"))
