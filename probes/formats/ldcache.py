"""``/etc/ld.so.cache``: the dynamic loader's list of libraries (what ``ldconfig -p`` prints), read
as data -- the libraries a job finds by name (``libnccl.so.2``) without ``LD_LIBRARY_PATH``.

Two layouts (glibc elf/cache.c, sysdeps/generic/dl-cache.h), in the file's own byte order:

* new (glibc 2.32+ writes only this): ``"glibc-ld.so.cache" "1.1"``, ``nlibs``, ``len_strings``,
  ``flags`` (+3 pad), ``extension_offset``, 3 unused words -- 48 bytes -- then ``nlibs`` entries of
  24 bytes ``(int32 flags, uint32 key, uint32 value, uint32 osversion, uint64 hwcap)``; ``key``
  (the soname) and ``value`` (the path) are offsets from the start of this header;
* old (``"ld.so-1.7.0"``, nlibs, 12-byte entries ``(int flags, uint32 key, uint32 value)``, string
  offsets from the end of the entries), possibly followed by a new-layout block (glibc 2.x "compat").

:func:`parse_ldcache` returns ``[{"name", "path", "flags"}]`` (the new block when there is one) or
raises :class:`gpucomm.probes.errors.InputError`; :func:`write_ldcache` writes the new layout (the
generated fixture hosts' caches).
"""
from __future__ import annotations

import struct
from typing import Optional

from gpucomm.probes.errors import InputError

NEW_MAGIC = b"glibc-ld.so.cache1.1"
OLD_MAGIC = b"ld.so-1.7.0"
NEW_HEADER = 48
NEW_ENTRY = 24
OLD_ENTRY = 12
MAX_ENTRIES = 1 << 20


def _cstr(data: bytes, off: int) -> Optional[str]:
    if not 0 <= off < len(data):
        return None
    end = data.find(b"\x00", off)
    if end < 0:
        return None
    return data[off:end].decode("utf-8", "replace")


def _parse_new(data: bytes, base: int, path: str) -> list:
    for end in ("<", ">"):
        nlibs, len_strings = struct.unpack_from(end + "II", data, base + 20)
        if nlibs <= MAX_ENTRIES and base + NEW_HEADER + nlibs * NEW_ENTRY <= len(data):
            break
    else:
        raise InputError("ld.so.cache entry count does not fit the file", path)
    out = []
    for i in range(nlibs):
        flags, key, value = struct.unpack_from(end + "iII", data, base + NEW_HEADER + i * NEW_ENTRY)
        name, target = _cstr(data, base + key), _cstr(data, base + value)
        if name is None or target is None:
            raise InputError(f"ld.so.cache entry {i} points outside the file", path)
        out.append({"name": name, "path": target, "flags": flags})
    return out


def parse_ldcache(data: bytes, path: str = "/etc/ld.so.cache") -> list:
    """The entries of an ld.so.cache (module docstring); InputError for anything else."""
    if not isinstance(data, (bytes, bytearray)):
        raise InputError("not binary data", path, expected="an ld.so.cache")
    data = bytes(data)
    try:
        if data.startswith(NEW_MAGIC) and len(data) >= NEW_HEADER:
            return _parse_new(data, 0, path)
        if data.startswith(OLD_MAGIC) and len(data) >= 16:
            nlibs, = struct.unpack_from("<I", data, 12)
            if nlibs > MAX_ENTRIES:
                nlibs, = struct.unpack_from(">I", data, 12)
            strings = 16 + nlibs * OLD_ENTRY
            if nlibs > MAX_ENTRIES or strings > len(data):
                raise InputError("ld.so.cache entry count does not fit the file", path)
            new = data.find(NEW_MAGIC, strings)
            if new >= 0 and len(data) >= new + NEW_HEADER:
                return _parse_new(data, new, path)
            out = []
            for i in range(nlibs):
                flags, key, value = struct.unpack_from("<iII", data, 16 + i * OLD_ENTRY)
                name, target = _cstr(data, strings + key), _cstr(data, strings + value)
                if name is None or target is None:
                    raise InputError(f"ld.so.cache entry {i} points outside the file", path)
                out.append({"name": name, "path": target, "flags": flags})
            return out
    except struct.error:
        raise InputError("truncated ld.so.cache", path) from None
    raise InputError("not an ld.so.cache", path, expected=f"a file starting with {NEW_MAGIC.decode()!r} "
                     f"or {OLD_MAGIC.decode()!r}")


def write_ldcache(entries: list) -> bytes:
    """A new-layout ld.so.cache (little endian) listing ``entries`` [{"name", "path"[, "flags"]}]."""
    strings = bytearray()
    offs = []
    base = NEW_HEADER + len(entries) * NEW_ENTRY
    for e in entries:
        k = base + len(strings)
        strings += e["name"].encode() + b"\x00"
        v = base + len(strings)
        strings += e["path"].encode() + b"\x00"
        offs.append((int(e.get("flags", 0x0303)), k, v))
    out = bytearray(NEW_MAGIC + struct.pack("<IIB3xI12x", len(entries), len(strings), 2, 0))
    for flags, k, v in offs:
        out += struct.pack("<iIIIQ", flags, k, v, 0, 0)
    return bytes(out + strings)


__all__ = ["parse_ldcache", "write_ldcache"]
