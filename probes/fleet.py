"""Gathering every node's topology through Slurm: ``gpucomm fleet probe`` runs ``gpucomm fleet node``
once per node (``srun --ntasks-per-node=1``), reads the documents back from srun's standard output as
they come, and writes each node's into ``DIR/<node>.json`` atomically.

On the wire each node prints its document as framed lines shorter than srun's I/O buffer (so that
no line of one node is ever cut by another's)::

    GPUCOMM-FLEET/1 <node> <seq> <base64 of a zlib piece>
    GPUCOMM-FLEET/1 <node> END <pieces> <sha256 of the JSON>
    GPUCOMM-FLEET/1 <node> ERROR <base64 of a one-line message>

Lines that are not frames (srun's own messages, a node's stderr) are kept as diagnostics.  A node
whose END never arrives failed (its task's error, if it said one) or timed out.  Nothing runs
through a shell; srun is killed with its process group at the deadline.
"""
from __future__ import annotations

import base64
import hashlib
import os
import re
import selectors
import signal
import subprocess
import time
import zlib
from typing import Callable, Dict, List, Optional, Sequence

from gpucomm.probes.errors import InputError
from gpucomm.probes.limits import MAX_HOSTS, MAX_INPUT_BYTES

MAGIC = "GPUCOMM-FLEET/1"
PIECE = 600                      # base64 characters per line: far under srun's 1 KiB I/O messages
_FRAME = re.compile(r"^(?:\d+: )?" + re.escape(MAGIC) + r" (\S+) (\S+)(?: (\S+))?(?: (\S+))?\s*$")
_NODE_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,252}$")


def frame_document(node: str, text: str) -> List[str]:
    """A node's document (JSON text) as frame lines."""
    data = zlib.compress(text.encode("utf-8"), 6)
    b64 = base64.b64encode(data).decode("ascii")
    pieces = [b64[i:i + PIECE] for i in range(0, len(b64), PIECE)] or [""]
    lines = [f"{MAGIC} {node} {i} {p}" for i, p in enumerate(pieces)]
    lines.append(f"{MAGIC} {node} END {len(pieces)} {hashlib.sha256(text.encode('utf-8')).hexdigest()}")
    return lines


def frame_error(node: str, message: str) -> str:
    return f"{MAGIC} {node} ERROR {base64.b64encode(' '.join(message.split())[:500].encode()).decode()}"


class Collector:
    """Frames in, documents out: ``feed(line)`` returns (node, JSON text) when a node's END checks out,
    or (node, None) for an ERROR; errors and damaged frames are kept per node."""

    def __init__(self) -> None:
        self.parts: Dict[str, Dict[int, str]] = {}
        self.errors: Dict[str, str] = {}
        self.done: Dict[str, bool] = {}
        self.noise: List[str] = []
        self.size: Dict[str, int] = {}

    def feed(self, line: str):
        m = _FRAME.match(line.rstrip("\r\n"))
        if not m:
            if line.strip() and len(self.noise) < 200:
                self.noise.append(" ".join(line.split())[:300])
            return None
        node, what, a, b = m.groups()
        if not _NODE_OK.match(node):
            return None
        if what == "ERROR":
            try:
                self.errors[node] = base64.b64decode(a or "", validate=True).decode("utf-8", "replace")
            except ValueError:
                self.errors[node] = "the node reported an error that could not be read"
            return node, None
        if what == "END":
            parts = self.parts.pop(node, {})
            try:
                n = int(a or "")
                data = base64.b64decode("".join(parts[i] for i in range(n)), validate=True)
                text = zlib.decompressobj().decompress(data, MAX_INPUT_BYTES + 1).decode("utf-8")
            except (KeyError, ValueError, zlib.error, UnicodeDecodeError):
                self.errors[node] = "its document arrived damaged (missing or bad pieces)"
                return node, None
            if len(text) > MAX_INPUT_BYTES or hashlib.sha256(text.encode("utf-8")).hexdigest() != b:
                self.errors[node] = "its document arrived damaged (checksum mismatch)"
                return node, None
            self.done[node] = True
            return node, text
        if what.isdigit() and a is not None:
            got = self.parts.setdefault(node, {})
            self.size[node] = self.size.get(node, 0) + len(a)
            if self.size[node] > 2 * MAX_INPUT_BYTES:
                self.errors[node] = "its document is larger than the input limit"
                self.parts.pop(node, None)
                return None
            got[int(what)] = a
        return None


def srun_argv(command: Sequence[str], nodes: Optional[List[str]], partition: Optional[str], count: Optional[int],
              time_limit_min: Optional[int], extra: Sequence[str] = ()) -> List[str]:
    """The srun command line: one task per node, every node of ``nodes`` (or of the allocation)."""
    argv = ["srun", "--ntasks-per-node=1", "--kill-on-bad-exit=0", "--job-name=gpucomm-fleet"]
    if count:
        argv += [f"--nodes={count}", f"--ntasks={count}"]
    if nodes:
        from gpucomm.probes.formats.slurm_topology import compress_hostlist

        argv.append(f"--nodelist={compress_hostlist(nodes)}")
    if partition:
        argv.append(f"--partition={partition}")
    if time_limit_min:
        argv.append(f"--time={time_limit_min}")
    return argv + list(extra) + list(command)


def run_fleet(argv: List[str], expected: Optional[List[str]], out_dir: str, timeout: float, force: bool,
              on_node: Optional[Callable[[str, Optional[str]], None]] = None) -> dict:
    """Run ``argv`` (srun ...), write each node's document to ``out_dir/<node>.json`` as it arrives,
    stop at ``timeout`` seconds.  -> {"gathered": [...], "failed": {node: why}, "noise": [...],
    "returncode"}; nodes in ``expected`` that sent nothing are failed ("timed out" when the
    deadline stopped srun)."""
    from gpucomm.probes.files import write_atomic

    col = Collector()
    gathered: List[str] = []
    try:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
    except FileNotFoundError:
        raise InputError(f"{argv[0]} not found on PATH", expected="Slurm's srun (run where Slurm's clients are)") from None
    except OSError as e:
        raise InputError(f"{argv[0]}: {e.strerror or e}") from None
    deadline = time.monotonic() + timeout
    timed_out = False
    buf = b""
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(p.stdout, selectors.EVENT_READ)
            eof = False
            while not eof:
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                for _key, _ in sel.select(min(left, 1.0)):
                    chunk = os.read(p.stdout.fileno(), 65536)
                    if not chunk:
                        eof = True
                        break
                    buf += chunk
                    if len(buf) > 4 * MAX_INPUT_BYTES and b"\n" not in buf:
                        buf = b""     # a line longer than any frame: noise, dropped
                    *lines, buf = buf.split(b"\n")
                    for raw in lines:
                        got = col.feed(raw.decode("utf-8", "replace"))
                        if got is None:
                            continue
                        node, text = got
                        if text is not None:
                            write_atomic(os.path.join(out_dir, f"{node}.json"), text, force=True)
                            gathered.append(node)
                        if on_node is not None:
                            on_node(node, text)
                if len(gathered) > MAX_HOSTS:
                    break
    finally:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except OSError:
                pass
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
                p.wait(timeout=5)
        p.stdout.close()
    failed: Dict[str, str] = dict(col.errors)
    for node in col.parts:
        failed.setdefault(node, "timed out while sending its document" if timed_out else "its document was cut short")
    for node in expected or []:
        if node not in gathered and node not in failed:
            failed[node] = f"timed out after {timeout:g}s" if timed_out else "sent no document (its task failed or never ran)"
    return {"gathered": gathered, "failed": {n: w for n, w in failed.items() if n not in gathered},
            "noise": col.noise, "returncode": p.returncode, "timed_out": timed_out}


def expected_nodes(nodelist: Optional[str], partition: Optional[str], runner=None) -> Optional[List[str]]:
    """The nodes a fleet run should hear from: ``--nodelist``, else the allocation's
    (SLURM_JOB_NODELIST), else the partition's responding nodes (``sinfo``); None when unknown."""
    from gpucomm.probes.formats.slurm_topology import expand_hostlist

    expr = nodelist or (None if partition else os.environ.get("SLURM_JOB_NODELIST"))
    if expr:
        try:
            return expand_hostlist(expr)
        except ValueError as e:
            raise InputError(f"--nodelist {expr[:80]!r}: {e}", expected="a Slurm hostlist like node[01-16]") from None
    if partition:
        if runner is None:
            from gpucomm.probes.sources.host import CommandRunner

            runner = CommandRunner(timeout=30)
        res = runner.run(["sinfo", "-h", "-N", "-p", partition, "-t", "idle,mixed,allocated,completing", "-o", "%N"])
        if res.returncode != 0:
            raise InputError(f"sinfo -p {partition}: {(res.error or res.stderr or '').strip()[:200] or 'failed'}",
                             expected="a partition Slurm knows")
        nodes = sorted({l.strip() for l in res.stdout.splitlines() if l.strip()})
        if not nodes:
            raise InputError(f"partition {partition!r} has no responding node", expected="idle, mixed or allocated nodes")
        return nodes
    return None
