"""``--from SRC`` / ``TOPO``: read any supported input into a topology document, detecting the
format by content, never by file name (the CLI contract, docs/ARCHITECTURE.md).

Supported: a saved topology (JSON/YAML), a snapshot (directory or .tar.gz), a
``nvidia-smi topo -m`` capture, an NCCL topology XML (a fused multi-host dump reads as several
hosts), a ``rocm-smi --showtopo`` capture, ``nvidia-smi -q`` (GPUs and their NVLink fabric),
``nvidia-imex-ctl -N`` (an IMEX domain), an NCCL debug log (its GPUs, hosts, fabric and NCCL_*
settings) and ``example:<name>`` for the bundled recorded hosts.
"""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Optional

from gpucomm.probes.errors import InputError, report
from gpucomm.probes.files import kind_of, read_limited
from gpucomm.probes.limits import MAX_INPUT_BYTES
from gpucomm.probes.model import SCHEMA, finalize
# the text and data of one input (probes/parse.py), named here too for load's callers
from gpucomm.probes.parse import check_depth, decode_text_input, parse_json, parse_yaml, read_text_input  # noqa: F401

# ANSI SGR escapes, with or without the ESC byte (same pattern as gpucomm.probes.formats.smi_topo).
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b|\[[0-9;]*m")


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
        from gpucomm.probes.examples import capture_path, example_path, load_example

        cap = capture_path(src)
        if cap is not None:        # a shipped capture (an nvidia-smi topo -m output)
            return load_topology_text(cap)
        name = src.split(":", 1)[1]
        if example_path(name).is_dir():      # an unpacked example: a snapshot directory
            from gpucomm.probes.sources.snapshot import load_snapshot

            return finalize(load_snapshot(example_path(name))), None
        return finalize(load_example(name)), None
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
    k8s = kind is None or (kind in ("json", "yaml") and "gpucomm." not in text[:4096])
    if k8s:      # describe output reads as YAML, a features.d file after a `[root@...]` prompt as JSON
        from gpucomm.probes.formats import k8s_labels

        if k8s_labels.looks_like(text):
            raise InputError("this is Kubernetes (node labels or another object), not a node's topology", src_path,
                             expected="gpucomm fabric FILE, or plan/select/predict --cluster FILE")
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
