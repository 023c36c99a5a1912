"""``--from SRC`` / ``TOPO``: read any supported input into a topology document, detecting the
format by content, never by file name (the CLI contract, docs/ARCHITECTURE.md).

Supported: a saved topology (JSON/YAML), a snapshot (directory or .tar.gz), a
``nvidia-smi topo -m`` capture, an NCCL topology XML (a fused multi-host dump reads as several
hosts), a ``rocm-smi --showtopo`` capture, ``nvidia-smi -q`` (GPUs and their NVLink fabric),
``nvidia-imex-ctl -N`` (an IMEX domain), an NCCL debug log (its GPUs, hosts, fabric and NCCL_*
settings) and ``example:<name>`` for the bundled recorded hosts.
"""
from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any, Optional

from gpucomm.probes.errors import InputError, report
from gpucomm.probes.files import kind_of, read_limited
from gpucomm.probes.limits import MAX_DEPTH, MAX_INPUT_BYTES, MAX_INT_DIGITS, MAX_YAML_NODES
from gpucomm.probes.model import SCHEMA, finalize

# ANSI SGR escapes, with or without the ESC byte (same pattern as gpucomm.probes.formats.smi_topo).
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b|\[[0-9;]*m")


def read_text_input(path: str) -> str:
    """Read a text input (a regular file of at most MAX_INPUT_BYTES, or a shipped capture named
    ``example:<file name>``), rejecting binary junk and wrong encodings with a one-line error."""
    if path.startswith("example:"):
        from gpucomm.probes.examples import capture_path, example_path

        found = capture_path(path)
        if found is None:
            example_path(path.split(":", 1)[1])   # names what exists
            raise InputError("is a bundled machine, not a text file", path,
                             expected="a file, or example:<capture file name> (gpucomm examples)")
        path = found
    try:
        if stat.S_ISDIR(os.stat(path).st_mode):
            raise InputError("is a directory but not a snapshot", path, expected="a snapshot with meta.json or sys/")
    except OSError:
        pass  # read_limited names the problem
    data = read_limited(path, MAX_INPUT_BYTES)
    return decode_text_input(data, path)


def decode_text_input(data: bytes, path: str) -> str:
    """The text of an input's bytes (read_text_input's checks: empty, binary, encoding)."""
    if not data.strip():
        raise InputError("file is empty", path, expected="a topology, snapshot, nvidia-smi topo -m, NCCL XML or rocm-smi capture")
    # UTF-16 with BOM (PowerShell's `>` on Windows/WSL writes it) is common enough for smi captures.
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        try:
            text16 = data.decode("utf-16")
            if "\x00" not in text16:
                return text16
        except UnicodeDecodeError:
            pass
    if b"\x00" in data[:65536]:
        raise InputError("file is binary", path, expected="a text capture or topology document")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    try:
        text = data.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes everything
        raise InputError("not valid UTF-8 text", path) from None
    if sum(1 for ch in text if ord(ch) > 127) > len(text) // 20:
        raise InputError("not valid UTF-8 text", path, expected="a UTF-8 text file")
    return text


# Box-drawing characters of rich's tables and trees (gpucomm's table and tree formats); no tool
# capture gpucomm reads draws with them (nvidia-smi and rocm-smi frame with ASCII + - | =).
_BOX_LINE = re.compile(r"^\s*[\u2500-\u257f]", re.M)


def rendered_by_gpucomm(text: str) -> Optional[str]:
    """The name of the gpucomm picture ``text`` is (table, tree, dot), else None: pictures are
    for people and are refused as inputs (reading one back gives a wrong topology)."""
    head = text[:65536]
    if re.match(r"\s*(?:strict\s+)?(?:di)?graph\s+gpucomm\s*\{", head):
        return "Graphviz DOT picture"
    if len(_BOX_LINE.findall(head, 0, 65536)) >= 2 or re.match(r"\s*Topology\s*\n[\u2500-\u257f]", head):
        return "table or tree"
    return None


def detect_kind(text: str) -> Optional[str]:
    """Guess the format of a text input from its content."""
    # ANSI colour/underline codes go first: nvidia-smi underlines the topo -m header, and pasted
    # copies often keep "[4m" without its ESC byte, which would otherwise read as a JSON list.
    head = _ANSI_RE.sub("", text.lstrip("\ufeff \t\r\n")[:4096]).lstrip("\ufeff \t\r\n")
    if head.startswith("{") or head.startswith("["):
        return "json"
    if "schema:" in head and "gpucomm.topology" in head:
        return "yaml"  # first: a saved topology's warnings may quote "<system ...>"
    if head.startswith("<?xml") or re.search(r"<(?:system|graphs)[\s>/]", text[:65536]):
        return "nccl-xml"
    if re.search(r"ROCm\s+System\s+Management\s+Interface", text[:8192]) or \
            re.search(r"(?:Link\s+Type|Weight)\s+between\s+two\s+GPUs", text):
        return "rocm-smi"
    from gpucomm.probes.formats import imex, smi_query

    if smi_query.looks_like(text):
        return "nvidia-smi-q"
    if imex.looks_like(text):
        return "imex"
    from gpucomm.probes.formats import nccllog, smi_nvlink

    if nccllog.looks_like(text):
        return "nccl-log"
    if smi_nvlink.looks_like(text) and not re.search(r"(^|\s)GPU0\s+GPU1\b", text[:20000]):
        return "nvidia-smi-nvlink"
    from gpucomm.probes.formats.smi_topo import looks_like

    bare = _ANSI_RE.sub("", text[:20000])
    if looks_like(text) or (re.search(r"(^|\s)GPU0(\s|$)", bare) and re.search(r"\bX\b", bare)):
        return "nvidia-smi"
    if re.match(r"^[A-Za-z_]+:\s", head) or head.startswith("---"):
        return "yaml"
    # Any other markup is tried as XML last: GitHub issue pastes wrap topo -m / rocm-smi output
    # in <details><summary>, which the checks above have already recognised.
    if head.startswith("<"):
        return "nccl-xml"
    return None


def load_document(text: str, path: str, kind: str) -> dict:
    if kind in ("json", "yaml"):
        return load_saved(text, path, kind)
    if kind == "nvidia-smi":
        from gpucomm.probes.formats.smi_topo import parse_topo_text

        return parse_topo_text(text, path=path)
    if kind == "nccl-xml":
        from gpucomm.probes.formats.nccl_xml import parse_nccl_xml

        return parse_nccl_xml(text, path=path)
    if kind == "rocm-smi":
        from gpucomm.probes.formats.rocm_smi import parse_rocm_text

        return parse_rocm_text(text, path=path)
    if kind == "nvidia-smi-q":
        from gpucomm.probes.formats.smi_query import parse_smi_query

        return parse_smi_query(text, path=path)
    if kind == "imex":
        from gpucomm.probes.formats.imex import imex_document, parse_imex_status

        return imex_document(parse_imex_status(text, path=path), path)
    if kind == "nccl-log":
        from gpucomm.probes.formats.nccllog import log_document, parse_nccl_log

        return log_document(parse_nccl_log(text, path), path)
    if kind == "nvidia-smi-nvlink":
        from gpucomm.probes.formats.smi_nvlink import nvlink_document, parse_nvlink_status

        return nvlink_document(parse_nvlink_status(text, path), path)
    raise InputError(f"unknown input kind {kind}", path)  # pragma: no cover


def _parse_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise _TooLong(len(digits.lstrip("-")))
    return int(digits)


class _TooLong(ValueError):
    pass


def parse_json(text: str, path: str, expected: str = "a gpucomm topology document") -> Any:
    """JSON text -> data, with one-line errors: syntax, integers of more than MAX_INT_DIGITS
    digits, nesting deeper than MAX_DEPTH.  NaN and Infinity are read (Python's json accepts
    them) and judged by the document's validation."""
    try:
        data = json.loads(text, parse_int=_parse_int)
    except json.JSONDecodeError as e:
        raise InputError(f"invalid JSON: {e.msg}", path, line=e.lineno, expected=expected) from None
    except _TooLong as e:
        raise InputError(f"an integer of {e.args[0]} digits (more than {MAX_INT_DIGITS})", path, expected=expected) from None
    except RecursionError:
        raise InputError(f"nested deeper than {MAX_DEPTH} levels", path, expected=expected) from None
    except ValueError as e:
        raise InputError(f"invalid JSON: {' '.join(str(e).split())[:120]}", path, expected=expected) from None
    check_depth(data, path, expected)
    return data


def check_depth(data: Any, path: str, expected: str = "a gpucomm topology document") -> None:
    """Refuse data nested deeper than MAX_DEPTH (iteratively: no recursion on hostile input)."""
    stack = [(data, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, dict):
            children = o.values()
        elif isinstance(o, list):
            children = o
        else:
            continue
        if d > MAX_DEPTH:
            raise InputError(f"nested deeper than {MAX_DEPTH} levels", path, expected=expected)
        stack.extend((c, d + 1) for c in children if isinstance(c, (dict, list)))


def _yaml_loader():
    import yaml
    from yaml.events import AliasEvent, ScalarEvent

    class BoundedLoader(yaml.SafeLoader):
        """yaml.SafeLoader that refuses nesting deeper than MAX_DEPTH while composing (the
        composer recurses once per level)."""

        depth = 0

        def compose_node(self, parent, index):
            if self.check_event(ScalarEvent, AliasEvent):   # depth counts mappings and lists, as in JSON
                return super().compose_node(parent, index)
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise _TooDeep()
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_yaml_int(self, node):
            """YAML 1.1 integers in every spelling (``0x``, ``0o``/``0``, ``0b``, base 60 ``1:30``,
            ``_`` separators, signs) held to MAX_INT_DIGITS decimal digits, counted before the
            conversion (a base-60 integer of thousands of parts is never multiplied out)."""
            v = self.construct_scalar(node).replace("_", "").lstrip("+-")
            if ":" in v:
                digits = len(v.split(":")) * 2
            else:
                body = v[2:] if v[:2] in ("0x", "0b", "0o") else v
                per = {"0x": 1.21, "0b": 0.31}.get(v[:2], 0.91 if v[:1] == "0" else 1.0)  # decimal digits per digit
                digits = int(len(body.lstrip("0")) * per)
            if digits > MAX_INT_DIGITS + 2:
                raise _TooLong(digits)
            value = super().construct_yaml_int(node)
            if abs(value) >= 10 ** MAX_INT_DIGITS:
                raise _TooLong(len(str(abs(value))))
            return value

    BoundedLoader.add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_yaml_int)
    return BoundedLoader


class _TooDeep(Exception):
    pass


def _expanded_size(node) -> int:
    """Values a composed YAML node stands for, an alias counted each time it is used; memoised
    per node, so linear in the document; -1 for a recursive alias."""
    import yaml

    size: dict = {}
    stack = [(node, False)]
    visiting: set = set()
    while stack:
        n, done = stack.pop()
        k = id(n)
        if done:
            visiting.discard(k)
            if isinstance(n, yaml.MappingNode):
                kids = [c for pair in n.value for c in pair]
            elif isinstance(n, yaml.SequenceNode):
                kids = n.value
            else:
                kids = []
            size[k] = min(1 + sum(size[id(c)] for c in kids), MAX_YAML_NODES + 1)
            continue
        if k in size:
            continue
        if k in visiting:
            return -1
        visiting.add(k)
        stack.append((n, True))
        if isinstance(n, yaml.MappingNode):
            stack.extend((c, False) for pair in n.value for c in pair if id(c) not in size)
        elif isinstance(n, yaml.SequenceNode):
            stack.extend((c, False) for c in n.value if id(c) not in size)
    return size[id(node)]


def parse_yaml(text: str, path: str, expected: str = "a gpucomm topology document") -> Any:
    """YAML text -> data through a bounded safe loader: one-line errors for syntax, nesting deeper
    than MAX_DEPTH, aliases that expand past MAX_YAML_NODES values or refer to themselves, and
    integers too long for Python."""
    import yaml

    loader = _yaml_loader()(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        n = _expanded_size(node)
        if n < 0:
            raise InputError("a YAML alias refers to itself (a recursive document)", path, expected=expected)
        if n > MAX_YAML_NODES:
            raise InputError(f"YAML aliases expand the document past {MAX_YAML_NODES} values", path, expected=expected)
        data = loader.construct_document(node)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        msg = str(getattr(e, "problem", None) or "invalid YAML")
        raise InputError(f"invalid YAML: {msg}", path, line=(mark.line + 1) if mark is not None else None,
                         expected=expected) from None
    except (_TooDeep, RecursionError):
        raise InputError(f"nested deeper than {MAX_DEPTH} levels", path, expected=expected) from None
    except _TooLong as e:
        raise InputError(f"an integer of about {e.args[0]} digits (more than {MAX_INT_DIGITS})", path,
                         expected=expected) from None
    except ValueError as e:  # a malformed integer or float
        raise InputError(f"invalid YAML: {' '.join(str(e).split())[:120]}", path, expected=expected) from None
    finally:
        loader.dispose()
    return data


def load_saved(text: str, path: str, kind: str) -> dict:
    """A saved topology document (JSON or YAML, the latter with a bounded safe loader), checked
    and repaired by :func:`gpucomm.probes.validate.validate_document`."""
    doc = parse_json(text, path) if kind == "json" else parse_yaml(text, path)
    from gpucomm.probes.validate import check_document

    check_document(doc, path)
    return doc


def resolve_example(name: str) -> Path:
    from gpucomm.probes.examples import example_path

    return example_path(name)


STDIN = "-"


def _load_stdin() -> dict:
    """``-``: a topology, capture or XML on standard input (a snapshot archive too), read bounded."""
    import sys
    import tempfile

    stream = getattr(sys.stdin, "buffer", None)
    data = stream.read(MAX_INPUT_BYTES + 1) if stream is not None else (sys.stdin.read(MAX_INPUT_BYTES + 1) or "").encode()
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(f"standard input is larger than the {MAX_INPUT_BYTES} byte limit", "<stdin>")
    if is_archive(data[:512]):
        from gpucomm.probes.sources.snapshot import load_snapshot

        with tempfile.TemporaryDirectory(prefix="gpucomm-stdin-") as tmp:
            path = Path(tmp) / "stdin.tar"
            path.write_bytes(data)
            from gpucomm.probes.validate import validate_document

            return finalize(validate_document(load_snapshot(path), "<stdin>", report=report))
    text = decode_text_input(data, "<stdin>")
    return _from_text(text, "<stdin>")


def load_topology(src: str) -> dict:
    """Any supported input -> topology document (finalised); ``-`` reads standard input."""
    return load_topology_text(src)[0]


def read_topology_text(src: str) -> Optional[str]:
    """The text of a text input (as :func:`load_topology` reads it), None for standard input, an
    example, a snapshot directory or an archive."""
    if src == STDIN or src.startswith("example:") or src.endswith(ARCHIVE_SUFFIXES):
        return None
    try:
        data = read_limited(src, MAX_INPUT_BYTES)   # regular files only, bounded (probes/files.py)
    except InputError:
        return None   # a snapshot directory, or an error load_topology reports in its own words
    if is_archive(data[:512]):
        return None   # an archive
    return decode_text_input(data, src)


def load_topology_text(src: str, text: Optional[str] = None) -> tuple:
    """(document, the text it was read from) -- the text is None for standard input, a snapshot or
    an example; ``text``: the input's text when the caller read it already
    (:func:`read_topology_text`).  Fleet commands key their per-node work on the text
    (planners/health/diff.py)."""
    if text is not None:
        return _from_text(text, src), text
    if src == STDIN:
        return _load_stdin(), None
    if src.startswith("example:"):
        from gpucomm.probes.examples import capture_path, load_example

        cap = capture_path(src)
        if cap is not None:        # a shipped capture (an nvidia-smi topo -m output)
            return load_topology_text(cap)
        return finalize(load_example(src.split(":", 1)[1])), None
    src_path = src
    from gpucomm.probes.validate import validate_document

    p = Path(src_path)
    if p.is_dir():
        from gpucomm.probes.sources.snapshot import load_snapshot

        return finalize(validate_document(load_snapshot(p), src_path, report=report)), None
    if src_path.endswith(ARCHIVE_SUFFIXES) or _is_archive(p):
        from gpucomm.probes.sources.snapshot import load_snapshot

        return finalize(validate_document(load_snapshot(p), src_path, report=report)), None
    text = read_text_input(src_path)
    return _from_text(text, src_path), text


def _from_text(text: str, src_path: str) -> dict:
    """A text input -> validated, finalised document (pictures drawn by gpucomm refused)."""
    from gpucomm.probes.validate import validate_document

    picture = rendered_by_gpucomm(text)
    if picture:
        raise InputError(f"this is a {picture} drawn by gpucomm for people, not an input", src_path,
                         expected="data: save a topology with `--format json -o FILE.json` (or .yaml, .xml)")
    kind = detect_kind(text)
    if kind is None:
        from gpucomm.probes.fabric import detect_fabric

        if detect_fabric(text) in ("ib", "slurm"):
            raise InputError("this is a switch fabric (ibnetdiscover/iblinkinfo output or a Slurm topology), not a "
                             "node's topology", src_path, expected="gpucomm fabric FILE, or plan/select/predict --cluster FILE")
        raise InputError("unrecognised content", src_path,
                         expected="a gpucomm topology (JSON/YAML), a snapshot, `nvidia-smi topo -m` output, "
                                  "an NCCL topology XML or `rocm-smi --showtopo` output (or `nvidia-smi -q`, "
                                  "`nvidia-smi nvlink -s`, `nvidia-imex-ctl -N` output, an NCCL debug log)")
    doc = load_document(text, src_path, kind)
    return finalize(validate_document(doc, src_path, saved=kind in ("json", "yaml"), report=report))


def gpu_model_sm(spec: str) -> int:
    """``--gpu MODEL`` -> its compute capability as NCCL's sm (``B200`` -> 100, ``H100`` -> 90,
    ``A10G`` -> 86, or ``sm90`` / ``9.0``); InputError for a model gpucomm does not know."""
    from gpucomm.probes.facts import arch_from_name, compute_capability

    text = str(spec).strip()
    m = re.fullmatch(r"(?i)sm_?(\d{2,3})", text)
    sm = int(m.group(1)) if m else compute_capability(text) if re.fullmatch(r"\d{1,2}\.\d", text) else \
        arch_from_name(text)[1]
    if sm is None or not 30 <= sm <= 200:
        raise InputError(f"{text!r} is not an NVIDIA GPU model gpucomm knows",
                         expected="e.g. B200, GB200, H100, H200, A100, A10G, L40S, V100, or sm90 / 9.0")
    return sm


def apply_gpu_model(doc: dict, spec: Optional[str]) -> dict:
    """``--gpu MODEL``: NVIDIA GPUs the document does not name (no name, no compute capability: an
    ``nvidia-smi topo -m`` capture, an NCCL XML skeleton) get that model, with a warning that says
    so; GPUs the document names keep their own (a warning when ``MODEL`` differs)."""
    if not spec:
        return doc
    from gpucomm.probes.facts import arch_from_sm, assumption, format_compute_capability, gpu_sm
    from gpucomm.probes.model import warn

    sm = gpu_model_sm(spec)
    named, filled = [], 0
    for g in doc.get("gpus") or []:
        if not isinstance(g, dict) or str(g.get("vendor") or "nvidia").lower() != "nvidia":
            continue
        own = gpu_sm(g)[0]
        if own is not None:
            if own != sm:
                named.append(f"GPU{g.get('index')} {g.get('name') or 'sm' + str(own)}")
            continue
        g["compute_capability"] = format_compute_capability(sm)
        g["arch"] = g.get("arch") or arch_from_sm(sm)
        g["name"] = g.get("name") or str(spec).strip()
        filled += 1
    if filled:
        warn(doc, assumption("gpu-model", model=str(spec).strip(), sm=sm, count=filled))
    if named:
        warn(doc, f"--gpu {str(spec).strip()} ignored for " + ", ".join(named[:4]) + (" ..." if len(named) > 4 else "")
             + ": the topology names their model")
    return doc


def gpu_model_note(doc: dict) -> Optional[str]:
    """The sentence that says where the GPU model came from when the topology does not name it
    (given with --gpu, or assumed), for the first line of a command's result; None otherwise."""
    from gpucomm.probes.topology import Topology

    for w in doc.get("warnings") or []:
        if isinstance(w, str) and " from --gpu for " in w:
            return w
    topo = Topology.of(doc)
    return next((a for a in topo.assumptions if a.startswith("GPU compute capability unknown")), None)


# A snapshot archive, by name and by content: tar, compressed with gzip (what `gpucomm snapshot` writes),
# xz, bzip2 or not at all -- from a path as from standard input.
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tbz2", ".tar")


def is_archive(head: bytes) -> bool:
    """Whether the first bytes of an input (512 are enough) start a snapshot archive.

    >>> is_archive(b"\\x1f\\x8b\\x08"), is_archive(b"\\xfd7zXZ\\x00"), is_archive(b"BZh9"), is_archive(b"{}")
    (True, True, True, False)
    """
    return head[:2] == b"\x1f\x8b" or head[:6] == b"\xfd7zXZ\x00" or (head[:3] == b"BZh" and head[3:4].isdigit()) \
        or head[257:262] == b"ustar"


def _is_archive(p: Path) -> bool:
    try:
        if not stat.S_ISREG(os.stat(p).st_mode):
            return False  # a FIFO or device is refused by read_text_input, never opened here
        with open(p, "rb") as f:
            return is_archive(f.read(512))
    except OSError:
        return False


__all__ = ["load_topology", "load_topology_text", "read_topology_text", "detect_kind", "read_text_input",
           "apply_gpu_model", "gpu_model_note", "gpu_model_sm",
           "parse_json", "parse_yaml", "check_depth", "rendered_by_gpucomm", "SCHEMA", "MAX_INPUT_BYTES", "kind_of"]
