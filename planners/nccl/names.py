"""The names and constants NCCL's model owns, each defined once (tests/test_nccl_names.py checks that
no other module spells them): path types, graph patterns, link types, the key tables NCCL matches
by prefix (``kvConvertToInt``), the most devices one virtual NIC fuses.

NCCL's path types, graph patterns and prefix matching are also needed by the readers of what NCCL
writes (logs, topology and graph files, read in ``gpucomm.probes``, which cannot import planners), so
their one definition is :class:`gpucomm.probes.model.PathType`, :class:`~gpucomm.probes.model.GraphPattern`
and :func:`~gpucomm.probes.model.nccl_kv`; this module gives them NCCL's C names.
"""
from __future__ import annotations

from gpucomm.probes.model import GraphPattern, PathType, nccl_kv

# path types (graph.h), best first; topoPathTypeStr
PATH_LOC, PATH_NVL, PATH_NVB, PATH_C2C, PATH_PIX, PATH_PXB, PATH_P2C, PATH_PXN, PATH_PHB, PATH_SYS, PATH_NET, \
    PATH_DIS = (int(t) for t in PathType)
PATH_NAMES = tuple(t.name for t in PathType)
PATH_PORT = PATH_NVL      # xml.h: two functions of one PCI device (NIC fusion's default merge level)

# graph patterns (graph.h)
BALANCED_TREE, SPLIT_TREE, TREE, RING, NVLS, COLLNET_DIRECT = (int(p) for p in GraphPattern)
PATTERN_NAMES = {int(p): p.name for p in GraphPattern}

# link types (topo.h) and their names (topoLinkTypeStr)
LINK_LOC, LINK_NVL, LINK_C2C, LINK_PCI, LINK_SYS, LINK_NET = 0, 1, 3, 4, 9, 10
LINK_NAMES = {LINK_LOC: "LOC", LINK_NVL: "NVL", LINK_C2C: "C2C", LINK_PCI: "PCI", LINK_SYS: "SYS", LINK_NET: "NET"}

# kvDictLinkType (search.cc, graph files' typeintra/typeinter): C2C, NET and DIS are not in it
GRAPH_LINK_TYPES = tuple((n, i) for i, n in enumerate(PATH_NAMES) if n not in ("C2C", "NET", "DIS"))
# nicPathKvList (topo.cc, NCCL_NET_MERGE_LEVEL)
NIC_PATH_LEVELS = (("LOC", PATH_LOC), ("PORT", PATH_PORT), ("PIX", PATH_PIX), ("PXB", PATH_PXB), ("P2C", PATH_P2C),
                   ("PXN", PATH_PXN), ("PHB", PATH_PHB), ("SYS", PATH_SYS))

NCCL_NET_MAX_DEVS_PER_NIC = 8  # net_v12.h: the most physical devices one virtual NIC fuses
MAXCHANNELS = 64               # device.h: channels of a communicator


def kv(s: str, table, default: int) -> int:
    """``kvConvertToInt`` (:func:`gpucomm.probes.model.nccl_kv`, whose readers need it too).

    >>> kv("PXB_extra", NIC_PATH_LEVELS, -1), kv("PORT", NIC_PATH_LEVELS, -1), kv("nope", NIC_PATH_LEVELS, -1)
    (5, 1, -1)
    """
    return nccl_kv(s, table, default)


def path_name(t: int) -> str:
    """The name of path type ``t`` (``PATH_NAMES[t]``)."""
    return PATH_NAMES[t]


def path_rank(name: str) -> int:
    """The order of a path type name (LOC 0 ... DIS 11); ValueError for an unknown name."""
    return PATH_NAMES.index(name)


__all__ = ["PATH_NAMES", "PATTERN_NAMES", "LINK_NAMES", "NIC_PATH_LEVELS", "GRAPH_LINK_TYPES",
           "NCCL_NET_MAX_DEVS_PER_NIC", "MAXCHANNELS", "kv", "path_name", "path_rank"]
