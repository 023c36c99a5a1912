"""NCCL's choice of a RoCE GID index (NCCL 2.30 ``src/transport/net_ib/connect.cc``,
``ncclIbGetGidIndex``), over the GID table the ``ib`` probe reads (``ports/N/gids/I`` and
``ports/N/gid_attrs/types/I`` in sysfs).

With NCCL_IB_GID_INDEX unset NCCL starts at index 0 and walks the table once; a candidate replaces
the current index when it is of the wanted address family (NCCL_IB_ADDR_FAMILY, default AF_INET:
an IPv4-mapped GID ``::ffff:a.b.c.d``) and the current one is not, or when both are, the candidate
is a valid GID (configured, not link-local ``fe80::``) and of the wanted RoCE version
(NCCL_IB_ROCE_VERSION_NUM, default 2) while the current one is of another version or invalid.
InfiniBand ports use index 0 (or the routable-FLID index), never this walk.

>>> t = [{"index": 0, "gid": "fe80:0000:0000:0000:ba59:9fff:fe12:3456", "type": "IB/RoCE v1"},
...      {"index": 1, "gid": "fe80:0000:0000:0000:ba59:9fff:fe12:3456", "type": "RoCE v2"},
...      {"index": 2, "gid": "0000:0000:0000:0000:0000:ffff:0a00:0001", "type": "IB/RoCE v1"},
...      {"index": 3, "gid": "0000:0000:0000:0000:0000:ffff:0a00:0001", "type": "RoCE v2"}]
>>> nccl_gid_index(t)
3
"""
from __future__ import annotations

import ipaddress
from typing import List, Optional

ROCE_VERSION_DEFAULT = 2          # NCCL_IB_ROCE_VERSION_NUM
ADDR_FAMILY_DEFAULT = "AF_INET"   # NCCL_IB_ADDR_FAMILY


def _addr(gid: Optional[str]) -> Optional[ipaddress.IPv6Address]:
    if not gid:
        return None
    try:
        return ipaddress.IPv6Address(gid.strip())
    except ValueError:
        return None


def gid_family(gid: Optional[str]) -> str:
    """``AF_INET`` for an IPv4-mapped GID (or the IPv4-mapped multicast ``ff0e::ffff:...``), else
    ``AF_INET6`` (getGidAddrFamily)."""
    a = _addr(gid)
    if a is None:
        return "AF_INET6"
    raw = a.packed
    mapped = raw[:10] == b"\0" * 10 and raw[10:12] == b"\xff\xff"
    mcast = raw[:4] == b"\xff\x0e\0\0" and raw[4:10] == b"\0" * 6 and raw[10:12] == b"\xff\xff"
    return "AF_INET" if mapped or mcast else "AF_INET6"


def gid_valid(gid: Optional[str]) -> bool:
    """Configured (not ``::``, not the bare ``fe80::``) and not link-local (validGid)."""
    a = _addr(gid)
    if a is None:
        return False
    raw = a.packed
    if raw == b"\0" * 16 or (raw[:4] == b"\xfe\x80\0\0" and raw[4:] == b"\0" * 12):
        return False
    return not (raw[:4] == b"\xfe\x80\0\0" and raw[4:8] == b"\0" * 4)


def roce_version(type_text: Optional[str]) -> Optional[int]:
    """``IB/RoCE v1``/``RoCE v1`` -> 1, ``RoCE v2`` -> 2 (ncclIbRoceGetVersionNum); else None."""
    t = (type_text or "").strip()
    if t.startswith(("IB/RoCE v1", "RoCE v1")):
        return 1
    if t.startswith("RoCE v2"):
        return 2
    return None


def nccl_gid_index(table: List[dict], family: str = ADDR_FAMILY_DEFAULT,
                   version: int = ROCE_VERSION_DEFAULT) -> int:
    """The GID index NCCL picks on a RoCE port whose table is ``table`` ([{index, gid, type}]; the
    entries not listed are zero GIDs, which NCCL never picks)."""
    by_index = {e["index"]: e for e in table if isinstance(e, dict) and isinstance(e.get("index"), int)}
    size = max(by_index, default=0) + 1
    cur = 0
    for cand in range(1, size):
        g = (by_index.get(cur) or {}).get("gid")
        c = by_index.get(cand) or {}
        cg = c.get("gid")
        cfam = gid_family(cg)
        if cfam != gid_family(g) and cfam == family:
            cur = cand
            continue
        if cfam != family or not gid_valid(cg):
            continue
        cver, gver = roce_version(c.get("type")), roce_version((by_index.get(cur) or {}).get("type"))
        if (gver != cver or not gid_valid(g)) and cver == version:
            cur = cand
    return cur


__all__ = ["nccl_gid_index", "gid_family", "gid_valid", "roce_version", "ROCE_VERSION_DEFAULT",
           "ADDR_FAMILY_DEFAULT"]
