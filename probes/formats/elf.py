"""ELF shared libraries read as data, never loaded: the section table and the version strings a
library embeds in its read-only data.

What gpucomm asks of a library (:mod:`gpucomm.probes.sources.swpath`): NCCL's ``VERSION_STRING``
(init.cc: ``"NCCL version " MAJOR "." MINOR "." PATCH SUFFIX "+cuda" CUDA_MAJOR "." CUDA_MINOR``,
a literal in ``.rodata``), a network plugin's banner (aws-ofi-nccl's ``PACKAGE_STRING`` "aws-ofi-nccl
1.9.1-aws", Google's "GPUDirectTCPX ver. ..." ...).  A library is read through a callable
``read(offset, length, record) -> bytes | None`` (:meth:`gpucomm.probes.sources.host.Host.read_range`):
the ELF header and the section table first, then the named sections in chunks of
:data:`CHUNK` bytes (overlapping by :data:`OVERLAP`, so a string across two chunks is found), at
most :data:`gpucomm.probes.limits.MAX_ELF_SCAN_BYTES` per library.  The scan reads with
``record=False`` and re-reads only the windows that matter with ``record=True``: a snapshot keeps
the header, the section table, the section names and the matched strings (an *extract*), and a
replay of it finds the same strings at the same offsets.

Anything that is not a well-formed ELF file gives ``None`` / no match, never an exception.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from gpucomm.probes.limits import MAX_ELF_SCAN_BYTES

Reader = Callable[[int, int, bool], Optional[bytes]]

ELF_MAGIC = b"\x7fELF"
SHT_NOBITS = 8
MAX_SECTIONS = 4096
MAX_SHSTRTAB = 1 << 20
CHUNK = 1 << 20
OVERLAP = 512
WINDOW = 256          # bytes kept around a matched string


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    offset: int
    size: int


def sections(read: Reader) -> Optional[list]:
    """The section table of an ELF file (names resolved), or None when ``read`` does not give one."""
    hdr = read(0, 64, True)
    if not hdr or len(hdr) < 52 or hdr[:4] != ELF_MAGIC or hdr[4] not in (1, 2) or hdr[5] not in (1, 2):
        return None
    is64, end = hdr[4] == 2, "<" if hdr[5] == 1 else ">"
    try:
        if is64:
            shoff, = struct.unpack_from(end + "Q", hdr, 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", hdr, 0x3A)
        else:
            shoff, = struct.unpack_from(end + "I", hdr, 0x20)
            shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", hdr, 0x2E)
    except struct.error:
        return None
    want = 64 if is64 else 40
    if shoff <= 0 or shentsize != want or not 0 < shnum <= MAX_SECTIONS or shstrndx >= shnum:
        return None
    table = read(shoff, shnum * shentsize, True)
    if not table or len(table) < shnum * shentsize:
        return None
    raw = []
    for i in range(shnum):
        base = i * shentsize
        if is64:
            name, typ = struct.unpack_from(end + "II", table, base)
            off, size = struct.unpack_from(end + "QQ", table, base + 24)
        else:
            name, typ = struct.unpack_from(end + "II", table, base)
            off, size = struct.unpack_from(end + "II", table, base + 16)
        raw.append((name, typ, off, size))
    _, styp, soff, ssize = raw[shstrndx]
    if styp == SHT_NOBITS or ssize <= 0 or ssize > MAX_SHSTRTAB:
        return None
    names = read(soff, ssize, True)
    if not names:
        return None
    out = []
    for name, typ, off, size in raw:
        if name >= len(names):
            continue
        nm = names[name:names.find(b"\x00", name) if b"\x00" in names[name:] else len(names)]
        out.append(Section(nm.decode("ascii", "replace"), typ, off, size))
    return out


def find_strings(read: Reader, patterns: dict, section_names: Sequence[str] = (".rodata",),
                 limit: int = MAX_ELF_SCAN_BYTES) -> tuple[dict, Optional[str]]:
    """({key: first match's text} for ``patterns`` {key: compiled bytes regex with one group}, why
    nothing could be scanned or None).  Only the named sections are read (``.rodata``: where C string
    literals live); the matches' windows are re-read with ``record=True``."""
    secs = sections(read)
    if secs is None:
        return {}, "not an ELF file with a section table"
    targets = [s for s in secs if s.name in section_names and s.type != SHT_NOBITS and s.size > 0]
    if not targets:
        return {}, f"no {'/'.join(section_names)} section"
    found: dict = {}
    budget = limit
    for sec in targets:
        pos = 0
        while pos < sec.size and budget > 0 and len(found) < len(patterns):
            n = min(CHUNK + OVERLAP, sec.size - pos, budget)
            data = read(sec.offset + pos, n, False)
            if not data:
                break
            budget -= len(data)
            for key, rx in patterns.items():
                if key in found:
                    continue
                m = rx.search(data)
                if m:
                    at = sec.offset + pos + m.start()
                    window = read(at, min(WINDOW, max(len(m.group(0)), 1) + 64), True) or b""
                    m2 = rx.match(window)
                    found[key] = (m2 or m).group(1).decode("ascii", "replace")
            if len(data) < n:
                break
            pos += CHUNK
    return found, None


# What a library says about itself, in its .rodata
NCCL_VERSION = re.compile(rb"NCCL version (\d{1,3}\.\d{1,3}\.\d{1,3}[\w.-]{0,16}\+cuda\d{1,3}\.\d{1,3})")
NCCL_VERSION_BARE = re.compile(rb"NCCL version (\d{1,3}\.\d{1,3}\.\d{1,3}[\w.+-]{0,24})")
PLUGIN_BANNERS = {
    # aws-ofi-nccl (AWS EFA, HPE Slingshot/CXI builds): "NET/OFI Using %s" with PACKAGE_STRING
    "aws-ofi-nccl": re.compile(rb"aws-ofi-nccl (\d{1,3}\.\d{1,3}\.\d{1,3}[\w.-]{0,24})"),
    # Google's GPUDirect-TCPX / TCPXO (FasTrak) plugins print "NET/GPUDirectTCPX ver. x.y.z"
    "gpudirect-tcpx": re.compile(rb"GPUDirectTCPX ver\. ?(\d{1,3}\.\d{1,3}\.\d{1,3}[\w.-]{0,24})"),
    "fastrak": re.compile(rb"FasTrak[^\x00]{0,32}?(\d{1,3}\.\d{1,3}\.\d{1,3}[\w.-]{0,24})"),
    # Google's gIB: NCCL's IB transport built as a plugin, with its own version banner
    "gib": re.compile(rb"gIB[^\x00]{0,32}?(\d{1,3}\.\d{1,3}\.\d{1,3}[\w.-]{0,24})"),
}


def nccl_version(read: Reader) -> tuple[Optional[str], Optional[str]]:
    """(NCCL's version string, e.g. ``2.21.5+cuda12.4``, or None; why not, or None)."""
    found, why = find_strings(read, {"v": NCCL_VERSION})
    if found.get("v"):
        return found["v"], None
    if why:
        return None, why
    found, why = find_strings(read, {"v": NCCL_VERSION_BARE})
    return found.get("v"), why or (None if found.get("v") else "no 'NCCL version' string in .rodata")


def plugin_banner(read: Reader) -> tuple[Optional[str], Optional[str], Optional[str]]:
    """(plugin family, its version, why nothing was read) of a network plugin library."""
    found, why = find_strings(read, dict(PLUGIN_BANNERS))
    for fam in PLUGIN_BANNERS:
        if found.get(fam):
            return fam, found[fam], None
    return None, None, why


def version_tuple(text: Optional[str]) -> Optional[tuple]:
    """``2.21.5+cuda12.4`` -> (2, 21, 5); None when it does not start with three numbers."""
    m = re.match(r"^(\d{1,3})\.(\d{1,3})\.(\d{1,3})", text or "")
    return tuple(int(x) for x in m.groups()) if m else None


def minimal_elf(rodata: bytes) -> bytes:
    """A small but well-formed ELF64 shared object (no code) whose ``.rodata`` is ``rodata``: the
    libraries of the generated fixture hosts (fixtures/generate.py) and the tests' libraries."""
    shstr = b"\x00.rodata\x00.shstrtab\x00"
    ro_off = 64
    st_off = ro_off + len(rodata)
    sh_off = (st_off + len(shstr) + 7) // 8 * 8
    hdr = ELF_MAGIC + bytes([2, 1, 1, 0]) + bytes(8)
    hdr += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, sh_off, 0, 64, 0, 0, 64, 3, 2)

    def sh(name: int, typ: int, off: int, size: int) -> bytes:
        return struct.pack("<IIQQQQIIQQ", name, typ, 2 if typ == 1 else 0, 0, off, size, 0, 0, 1, 0)

    body = hdr + rodata + shstr
    body += bytes(sh_off - len(body))
    return body + sh(0, 0, 0, 0) + sh(1, 1, ro_off, len(rodata)) + sh(9, 3, st_off, len(shstr))


__all__ = ["minimal_elf", "Section", "sections", "find_strings", "nccl_version", "plugin_banner", "version_tuple",
           "NCCL_VERSION", "PLUGIN_BANNERS"]
