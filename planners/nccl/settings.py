"""The NCCL_* parameters that change what NCCL's topology code decides, read as NCCL 2.30.7 reads
them (``ncclLoadParam``: an integer from the environment, base 0; NCCL_P2P_LEVEL /
NCCL_NET_GDR_LEVEL: a path type name or the old 0-5 numbering, ``ncclGetLevel``; NCCL_NETDEVS_POLICY:
AUTO, ALL or MAX:n; NCCL_NET_MERGE_LEVEL: a path type, prefix-matched).

:meth:`NcclSettings.from_env` takes them from ``os.environ`` (or a mapping), exactly the names NCCL
uses, so a job's environment gives the model the same settings NCCL gets; every field defaults to
NCCL's default.  ``p2p_blocked`` is not an environment variable: it is NVML's P2P status between
GPUs (pairs of NVML indices that report NOT_SUPPORTED), which NCCL reads from the driver.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from typing import Mapping, Optional

from gpucomm.planners.nccl.names import PATH_NAMES, PATH_SYS
from gpucomm.planners.nccl.ncclxml import merge_level, strtol

PATH_TYPE_NAMES = PATH_NAMES[:PATH_SYS + 1]     # the names ncclGetLevel accepts
_OLD_LEVELS = (0, 4, 5, 8, 9, 9)   # levelsOldToNew (paths.cc)

ENV_NAMES = ("NCCL_CROSS_NIC", "NCCL_NET_DISABLE_INTRA", "NCCL_P2P_LEVEL", "NCCL_P2P_DISABLE", "NCCL_NVLS_ENABLE",
             "NCCL_NET_MERGE_LEVEL", "NCCL_NET_FORCE_MERGE", "NCCL_NVB_DISABLE", "NCCL_PXN_DISABLE", "NCCL_PXN_C2C",
             "NCCL_NET_GDR_LEVEL", "NCCL_NET_GDR_READ", "NCCL_NET_GDR_C2C", "NCCL_SHM_DISABLE",
             "NCCL_IGNORE_DISABLED_P2P", "NCCL_NETDEVS_POLICY", "NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS",
             "NCCL_MAX_NCHANNELS", "NCCL_MIN_NRINGS", "NCCL_MAX_NRINGS", "NCCL_NTHREADS", "NCCL_LL128_NTHREADS",
             "NCCL_LL128_C2C", "NCCL_PAT_ENABLE", "NCCL_NET_OVERHEAD", "NCCL_GRAPH_FILE", "NCCL_TOPO_SPLIT_MLOPART",
             "NCCL_MNNVL_ENABLE", "NCCL_MNNVL_UUID", "NCCL_MNNVL_CLIQUE_ID", "NCCL_MNNVL_CROSS_CLIQUE",
             "NCCL_MNNVL_SCATTER_NETS_ENABLE", "NCCL_MNNVL_RAIL_PER_HOST", "NCCL_CUMEM_ENABLE")


def _level(value: Optional[str]) -> Optional[int]:
    """``ncclGetLevel``: a path type name, else the old numbering; None when unset or unreadable."""
    if value is None or value == "":
        return None
    if value in PATH_TYPE_NAMES:
        return PATH_TYPE_NAMES.index(value)
    if value[:1].isdigit():
        old = min(strtol(value), len(_OLD_LEVELS) - 1)
        return _OLD_LEVELS[old]
    return None


def _param(env: Mapping, name: str, default: int) -> int:
    v = env.get(name)
    if v is None or v == "":
        return default
    v = v.strip()
    try:
        return int(v, 0)
    except ValueError:
        return default


@dataclass(frozen=True)
class NcclSettings:
    """NCCL's defaults unless set (field -> environment variable in the module docstring)."""

    cross_nic: int = 2                    # NCCL_CROSS_NIC
    net_disable_intra: int = 0            # NCCL_NET_DISABLE_INTRA
    p2p_level: Optional[int] = None       # NCCL_P2P_LEVEL / NCCL_P2P_DISABLE=1 (LOC)
    nvls_enable: int = 2                  # NCCL_NVLS_ENABLE (2: when the hardware supports it)
    merge_level: int = 1                  # NCCL_NET_MERGE_LEVEL (PORT: fuse the ports of one NIC)
    force_merge: Optional[str] = None     # NCCL_NET_FORCE_MERGE
    nvb_disable: int = 0                  # NCCL_NVB_DISABLE
    pxn_disable: int = 0                  # NCCL_PXN_DISABLE
    pxn_c2c: int = 1                      # NCCL_PXN_C2C
    net_gdr_level: Optional[int] = None   # NCCL_NET_GDR_LEVEL
    net_gdr_read: int = -2                # NCCL_NET_GDR_READ
    net_gdr_c2c: int = 1                  # NCCL_NET_GDR_C2C
    net_gdr_mlopart: int = 0              # NCCL_NET_GDR_MLOPART
    shm_disable: int = 0                  # NCCL_SHM_DISABLE
    ignore_disabled_p2p: int = 0          # NCCL_IGNORE_DISABLED_P2P
    netdevs_policy: tuple = ("AUTO", 0)   # NCCL_NETDEVS_POLICY
    algo: Optional[str] = None            # NCCL_ALGO
    proto: Optional[str] = None           # NCCL_PROTO
    min_nchannels: int = -2               # NCCL_MIN_NCHANNELS (or NCCL_MIN_NRINGS)
    max_nchannels: int = -2               # NCCL_MAX_NCHANNELS (or NCCL_MAX_NRINGS)
    nthreads: int = -2                    # NCCL_NTHREADS
    ll128_nthreads: int = -2              # NCCL_LL128_NTHREADS
    ll128_c2c: int = 1                    # NCCL_LL128_C2C
    pat_enable: int = 2                   # NCCL_PAT_ENABLE
    net_overhead: int = -2                # NCCL_NET_OVERHEAD (ns)
    graph_file: Optional[str] = None      # NCCL_GRAPH_FILE
    mnnvl_enable: int = 2                 # NCCL_MNNVL_ENABLE (2: when the GPUs' fabric info says so)
    mnnvl_uuid: int = -1                  # NCCL_MNNVL_UUID (both halves of every GPU's cluster UUID)
    mnnvl_clique_id: int = -1             # NCCL_MNNVL_CLIQUE_ID (every GPU's clique id)
    mnnvl_cross_clique: int = 0           # NCCL_MNNVL_CROSS_CLIQUE
    mnnvl_scatter_nets: int = 1           # NCCL_MNNVL_SCATTER_NETS_ENABLE
    mnnvl_rail_per_host: int = 0          # NCCL_MNNVL_RAIL_PER_HOST
    cumem_enable: int = -2                # NCCL_CUMEM_ENABLE (MNNVL needs cuMem)
    p2p_blocked: frozenset = field(default_factory=frozenset)   # NVML P2P status not OK: {(dev, dev)}

    @classmethod
    def from_env(cls, env: Optional[Mapping] = None) -> "NcclSettings":
        """Read the NCCL_* variables of ``env`` (default ``os.environ``)."""
        env = os.environ if env is None else env
        p2p = _level(env.get("NCCL_P2P_LEVEL"))
        dis = env.get("NCCL_P2P_DISABLE")
        if dis is not None and strtol(dis) == 1:
            p2p = 0
        policy = ("AUTO", 0)
        pol = (env.get("NCCL_NETDEVS_POLICY") or "").strip()
        if pol.upper() == "ALL":
            policy = ("ALL", 0)
        elif pol.upper().startswith("MAX:") and strtol(pol[4:]) > 0:
            policy = ("MAX", strtol(pol[4:]))
        mn = _param(env, "NCCL_MIN_NRINGS", -2)
        mn = _param(env, "NCCL_MIN_NCHANNELS", mn)
        mx = _param(env, "NCCL_MAX_NRINGS", -2)
        mx = _param(env, "NCCL_MAX_NCHANNELS", mx)
        return cls(
            cross_nic=_param(env, "NCCL_CROSS_NIC", 2),
            net_disable_intra=_param(env, "NCCL_NET_DISABLE_INTRA", 0),
            p2p_level=p2p,
            nvls_enable=_param(env, "NCCL_NVLS_ENABLE", 2),
            merge_level=merge_level(env.get("NCCL_NET_MERGE_LEVEL")),
            force_merge=env.get("NCCL_NET_FORCE_MERGE") or None,
            nvb_disable=_param(env, "NCCL_NVB_DISABLE", 0),
            pxn_disable=_param(env, "NCCL_PXN_DISABLE", 0),
            pxn_c2c=_param(env, "NCCL_PXN_C2C", 1),
            net_gdr_level=_level(env.get("NCCL_NET_GDR_LEVEL")),
            net_gdr_read=_param(env, "NCCL_NET_GDR_READ", -2),
            net_gdr_c2c=_param(env, "NCCL_NET_GDR_C2C", 1),
            shm_disable=1 if _param(env, "NCCL_SHM_DISABLE", 0) == 1 else 0,
            ignore_disabled_p2p=_param(env, "NCCL_IGNORE_DISABLED_P2P", 0),
            netdevs_policy=policy,
            algo=env.get("NCCL_ALGO") or None,
            proto=env.get("NCCL_PROTO") or None,
            min_nchannels=mn,
            max_nchannels=mx,
            nthreads=_param(env, "NCCL_NTHREADS", -2),
            ll128_nthreads=_param(env, "NCCL_LL128_NTHREADS", -2),
            ll128_c2c=_param(env, "NCCL_LL128_C2C", 1),
            pat_enable=_param(env, "NCCL_PAT_ENABLE", 2),
            net_overhead=_param(env, "NCCL_NET_OVERHEAD", -2),
            graph_file=env.get("NCCL_GRAPH_FILE") or None,
            mnnvl_enable=_param(env, "NCCL_MNNVL_ENABLE", 2),
            mnnvl_uuid=_param(env, "NCCL_MNNVL_UUID", -1),
            mnnvl_clique_id=_param(env, "NCCL_MNNVL_CLIQUE_ID", -1),
            mnnvl_cross_clique=_param(env, "NCCL_MNNVL_CROSS_CLIQUE", 0),
            mnnvl_scatter_nets=_param(env, "NCCL_MNNVL_SCATTER_NETS_ENABLE", 1),
            mnnvl_rail_per_host=_param(env, "NCCL_MNNVL_RAIL_PER_HOST", 0),
            cumem_enable=_param(env, "NCCL_CUMEM_ENABLE", -2),
        )

    def replace(self, **kw) -> "NcclSettings":
        return replace(self, **kw)

    def key(self) -> tuple:
        """Hashable identity (cache key)."""
        return tuple(getattr(self, f.name) for f in fields(self))

    def changed(self) -> dict:
        """The settings that differ from NCCL's defaults, by environment variable name."""
        base = NcclSettings()
        names = {"cross_nic": "NCCL_CROSS_NIC", "net_disable_intra": "NCCL_NET_DISABLE_INTRA",
                 "p2p_level": "NCCL_P2P_LEVEL", "nvls_enable": "NCCL_NVLS_ENABLE",
                 "merge_level": "NCCL_NET_MERGE_LEVEL", "force_merge": "NCCL_NET_FORCE_MERGE",
                 "nvb_disable": "NCCL_NVB_DISABLE", "pxn_disable": "NCCL_PXN_DISABLE", "pxn_c2c": "NCCL_PXN_C2C",
                 "net_gdr_level": "NCCL_NET_GDR_LEVEL", "net_gdr_read": "NCCL_NET_GDR_READ",
                 "net_gdr_c2c": "NCCL_NET_GDR_C2C", "shm_disable": "NCCL_SHM_DISABLE",
                 "ignore_disabled_p2p": "NCCL_IGNORE_DISABLED_P2P", "netdevs_policy": "NCCL_NETDEVS_POLICY",
                 "algo": "NCCL_ALGO", "proto": "NCCL_PROTO", "min_nchannels": "NCCL_MIN_NCHANNELS",
                 "max_nchannels": "NCCL_MAX_NCHANNELS", "nthreads": "NCCL_NTHREADS",
                 "ll128_nthreads": "NCCL_LL128_NTHREADS", "ll128_c2c": "NCCL_LL128_C2C",
                 "pat_enable": "NCCL_PAT_ENABLE", "net_overhead": "NCCL_NET_OVERHEAD",
                 "graph_file": "NCCL_GRAPH_FILE", "mnnvl_enable": "NCCL_MNNVL_ENABLE",
                 "mnnvl_uuid": "NCCL_MNNVL_UUID", "mnnvl_clique_id": "NCCL_MNNVL_CLIQUE_ID",
                 "mnnvl_cross_clique": "NCCL_MNNVL_CROSS_CLIQUE",
                 "mnnvl_scatter_nets": "NCCL_MNNVL_SCATTER_NETS_ENABLE",
                 "mnnvl_rail_per_host": "NCCL_MNNVL_RAIL_PER_HOST", "cumem_enable": "NCCL_CUMEM_ENABLE"}
        out = {}
        for attr, env in names.items():
            v = getattr(self, attr)
            if v != getattr(base, attr):
                if attr in ("p2p_level", "net_gdr_level", "merge_level") and isinstance(v, int):
                    v = {1: "PORT"}.get(v, PATH_TYPE_NAMES[v]) if attr == "merge_level" else PATH_TYPE_NAMES[v]
                out[env] = v
        return out


__all__ = ["NcclSettings", "ENV_NAMES"]
