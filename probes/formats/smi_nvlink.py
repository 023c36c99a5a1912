"""``nvidia-smi nvlink -s`` / ``nvidia-smi nvlink --status [-i N]`` captures.

The output is one block per GPU::

    GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5a10e6e5-95f7-2785-ed63-6f6147f304f7)
             Link 0: 26.562 GB/s
             Link 1: <inactive>
    GPU 2: NVIDIA B200 (UUID: GPU-...)
    NVML: Unable to retrieve NVLink information as all links are inActive

The indentation is a tab plus a space on most drivers, nine spaces on some, and whatever a
copy/paste left (blank lines between links, ``[snip]`` where an author cut GPUs out).  Old drivers
print the name without ``(UUID: ...)``.  The per-link figure is nvidia-smi's per-direction link
speed (25 GB/s NVLink3, 26.562 GB/s NVLink4, 53.125 GB/s NVLink5); it is kept as printed.

:func:`parse_nvlink_status` returns::

    {"gpus": {index: {"index": int, "name": str|None, "uuid": str|None,
                      "all_inactive": bool,       # NVML said every link is inactive
                      "links": [{"link": int, "state": "active"|"inactive", "bw_GBps": float|None}]}},
     "snipped": bool,                             # the capture was abridged ("[snip]", "...")
     "warnings": [str]}

GPU indices are ints (sorted); links are sorted by link number.  :func:`apply_nvlink_status` copies
the result into a topology document's ``gpus[].nvlink`` (filling only what is missing).
"""
from __future__ import annotations

import re
from typing import Optional

from gpucomm.probes.errors import InputError
from gpucomm.probes.model import gpu_record, warn

EXPECTED = "`nvidia-smi nvlink -s` output: 'GPU <n>: <name> (UUID: ...)' lines followed by 'Link <n>: ...' lines"

_GPU = re.compile(r"^\s*GPU\s+(\d+)\s*:\s*(.*?)\s*$")
_ECHO = re.compile(r"^\s*(?:[$#]\s*)?(?:sudo\s+)?nvidia-smi\s+nvlink\b")   # the command line pasted above its output
_UUID = re.compile(r"^(.*?)\s*\(\s*UUID\s*:\s*([^)\s]+)\s*\)\s*$", re.I)
_LINK = re.compile(r"^\s*Link\s+(\d+)\s*:\s*(.*?)\s*$", re.I)
_BW = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*GB/s$", re.I)
_ALL_INACTIVE = re.compile(r"all\s+links\s+are\s+inactive", re.I)
_SNIP = re.compile(r"^\s*(?:\[\s*snip(?:ped)?\s*\]|\.\.\.|…)\s*$", re.I)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b|\[[0-9;]*m")


def parse_nvlink_status(text: str, path: Optional[str] = None) -> dict:
    """Parse ``nvidia-smi nvlink -s`` output (structure in the module docstring).

    Raises :class:`gpucomm.probes.errors.InputError` for empty or binary input and for text without a
    single ``GPU <n>:`` line.  Unknown lines are skipped with a warning."""
    if not isinstance(text, str):
        raise InputError("not text", path, expected=EXPECTED)
    text = text.lstrip("\ufeff")
    if not text.strip():
        raise InputError("empty input", path, expected=EXPECTED)
    if "\x00" in text[:65536] or sum(1 for c in text[:65536] if ord(c) < 32 and c not in "\t\n\r\x1b") > 8:
        raise InputError("binary data", path, expected=EXPECTED)
    out: dict = {"gpus": {}, "snipped": False, "warnings": []}
    holder = {"warnings": out["warnings"]}  # model.warn() works on any dict with "warnings"
    cur: Optional[dict] = None
    seen_links: set = set()
    first_content: Optional[int] = None
    # LF, CRLF or CR-only line ends; non-breaking spaces (web copies) are plain spaces, so that
    # GPU names compare equal to other sources' names.
    for n, raw in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), start=1):
        line = _ANSI.sub("", raw).replace("\u00a0", " ").replace("\ufeff", "").replace("\u200b", "")
        if not line.strip():
            continue
        if first_content is None:
            first_content = n
        if _ECHO.match(line):
            continue
        m = _GPU.match(line)
        if m:
            idx = int(m.group(1))
            rest = m.group(2)
            um = _UUID.match(rest)
            name, uuid = (um.group(1), um.group(2)) if um else (rest, None)
            if idx in out["gpus"]:
                warn(holder, f"line {n}: GPU {idx} appears twice; its links are merged")
                cur = out["gpus"][idx]
                cur["name"] = cur["name"] or (name or None)
                cur["uuid"] = cur["uuid"] or uuid
            else:
                cur = {"index": idx, "name": name or None, "uuid": uuid, "all_inactive": False, "links": []}
                out["gpus"][idx] = cur
            continue
        if _SNIP.match(line):
            out["snipped"] = True
            if cur is not None and cur["links"]:
                cur["cut"] = True   # its later links were cut out: its link list is not complete
            cur = None  # links after a snip cannot belong to the GPU before it
            continue
        if _ALL_INACTIVE.search(line):
            if cur is None:
                warn(holder, f"line {n}: 'all links are inactive' without a GPU line before it; ignored")
            else:
                cur["all_inactive"] = True
            continue
        lm = _LINK.match(line)
        if lm:
            if cur is None:
                warn(holder, f"line {n}: link line without a GPU line before it; ignored")
                continue
            num, value = int(lm.group(1)), lm.group(2)
            if (cur["index"], num) in seen_links:
                warn(holder, f"line {n}: GPU {cur['index']} link {num} listed twice; the first is kept")
                continue
            bm = _BW.match(value)
            if bm:
                rec = {"link": num, "state": "active", "bw_GBps": float(bm.group(1))}
            elif "inactive" in value.lower() or "not active" in value.lower():
                rec = {"link": num, "state": "inactive", "bw_GBps": None}
            else:
                warn(holder, f"line {n}: GPU {cur['index']} link {num}: unrecognised status {value[:40]!r}; ignored")
                continue
            seen_links.add((cur["index"], num))
            cur["links"].append(rec)
            continue
        warn(holder, f"line {n}: unrecognised line {line.strip()[:40]!r}; ignored")
    if not out["gpus"]:
        raise InputError("no 'GPU <n>:' line", path, line=first_content, expected=EXPECTED)
    for g in out["gpus"].values():
        g["links"].sort(key=lambda l: l["link"])
    out["gpus"] = dict(sorted(out["gpus"].items()))
    if out["snipped"]:
        warn(holder, "capture is abridged ([snip]): GPUs cut from it are not listed")
    return out


def looks_like(text: str) -> bool:
    """True when ``text`` looks like ``nvidia-smi nvlink -s`` output."""
    if not isinstance(text, str):
        return False
    head = text[:20000]
    # [ \t], not \s, after ^: \s would run over blank lines from every line start (quadratic)
    return bool(re.search(r"(?m)^[ \t]*GPU[ \t]+\d+[ \t]*:", head)) and bool(
        re.search(r"(?mi)^[ \t]*Link[ \t]+\d+[ \t]*:|all\s+links\s+are\s+inactive", head))


def gpu_nvlink_records(status: dict) -> dict:
    """{gpu index: [topology ``nvlink`` records]} (remote/version unknown from this command)."""
    return {idx: [{"link": l["link"], "state": l["state"], "remote": None, "version": None,
                   "bw_GBps": l["bw_GBps"]} for l in g["links"]]
            for idx, g in status["gpus"].items()}


def apply_nvlink_status(doc: dict, status: dict) -> dict:
    """Fill ``gpus[].nvlink`` (and missing name/uuid) of a topology document from a parsed
    ``nvidia-smi nvlink -s``.  Existing values win (merge precedence: this source is below NVML).
    GPUs that the document lacks are added.  Returns ``doc``."""
    by_idx = {g["index"]: g for g in doc["gpus"]}
    recs = gpu_nvlink_records(status)
    for idx, g in status["gpus"].items():
        gpu = by_idx.get(idx)
        if gpu is None:
            gpu = gpu_record(idx)
            doc["gpus"].append(gpu)
            by_idx[idx] = gpu
        if not gpu.get("name") and g["name"]:
            gpu["name"] = g["name"]
        if not gpu.get("uuid") and g["uuid"]:
            gpu["uuid"] = g["uuid"]
        if not gpu.get("nvlink") and not g.get("cut"):
            gpu["nvlink"] = recs[idx]
        elif g.get("cut"):
            warn(doc, f"GPU{idx}: the capture cuts its link list short ({len(g['links'])} link(s) shown); its NVLinks "
                      "are left unknown")
        inactive = [l["link"] for l in g["links"] if l["state"] == "inactive"]
        if g["all_inactive"]:
            warn(doc, f"GPU{idx}: NVML reports every NVLink inactive")
        elif inactive:
            warn(doc, f"GPU{idx}: NVLink link(s) {', '.join(map(str, inactive))} inactive")
    for w in status.get("warnings", []):
        warn(doc, f"nvlink -s: {w}")
    doc["gpus"].sort(key=lambda g: g["index"])
    return doc


def nvlink_document(status: dict, path: Optional[str] = None) -> dict:
    """A parsed ``nvidia-smi nvlink -s`` as a topology document of its GPUs and their links (state and
    per-link speed; where each link goes is not in this output)."""
    from gpucomm.probes.model import finalize, new_document, source_record

    doc = apply_nvlink_status(new_document(provenance="nvidia-smi"), status)
    active = sum(1 for g in status["gpus"].values() for l in g["links"] if l["state"] == "active")
    total = sum(len(g["links"]) for g in status["gpus"].values())
    doc["sources"].append(source_record("nvidia-smi", "partial" if status.get("snipped") else "ok",
                                        f"nvidia-smi nvlink -s capture{' ' + path if path else ''}: "
                                        f"{len(status['gpus'])} GPU(s), {active} of {total} link(s) active"))
    warn(doc, "nvidia-smi nvlink -s: GPUs and their NVLink states only (no PCI tree, NICs, or where links go)")
    return finalize(doc)


__all__ = ["parse_nvlink_status", "apply_nvlink_status", "gpu_nvlink_records", "looks_like", "nvlink_document"]
