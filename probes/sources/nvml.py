"""Source ``nvml``: the only module that imports NVML (``pynvml`` from nvidia-ml-py), lazily.

Two halves, joined by the ``nvml.json`` format (docs/SNAPSHOT_FORMAT.md, ``gpucomm.nvml/v1``):

* :func:`record_nvml` asks the library everything gpucomm needs and writes it down.  Every call
  goes through :meth:`Query.__call__`, which turns any ``NVMLError`` (or any other exception the
  binding raises: missing symbol, ctypes trouble) into an entry of an ``errors`` map and a default
  value.  Nothing NVML does can crash a probe.
* :func:`nvml_to_partial` turns such a record (live, or replayed from a snapshot's ``nvml.json``)
  into a partial topology document: GPU records, NVLink links (GPU<->GPU, GPU->NVSwitch, GPU->CPU
  for POWER NPUs), C2C links, per-GPU P2P status, driver/CUDA versions.  Each recorded error
  becomes a missing value plus a warning (except "not supported" answers for optional features,
  which simply mean the feature is absent, e.g. NVLink state on a PCIe card).

What is asked mirrors NCCL's own NVML use (xml.cc:894-1063, xml.cc ncclTopoGetXmlFromGpu): link count by
compute capability, per link state / remote PCI info / version, C2C field values for sm >= 90,
the P2P status matrix and the fabric (MNNVL clique) info.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Optional

from gpucomm.probes.errors import InputError
from gpucomm.probes.limits import MAX_GPUS, MAX_NVML_RECORD_BYTES
from gpucomm.probes import facts
from gpucomm.probes.sources.host import Host
from gpucomm.probes.facts import arch_from_name, nvlink_bw_per_link
from gpucomm.probes.model import (PLATFORM_KEYS, canonical_cpulist, parse_cpulist, cpu_id, fabric_record, format_cpulist,
                                  gpu_id, gpu_record,
                                  is_sentinel_bus_id, link_record, new_document, normalize_bus_id,
                                  source_record, switch_record, warn)

NVML_SCHEMA = "gpucomm.nvml/v1"
NVS_ID = "NVS"  # one NVSwitch node standing for switches we cannot see (VMs, containers)

_FAIL = object()

# NVML field ids (nvml.h) used for C2C, NCCL xml.cc:1006-1031
FI_C2C_LINK_COUNT, FI_C2C_LINK_GET_STATUS, FI_C2C_LINK_GET_MAX_BW = 170, 171, 172
NVLINK_CAP_P2P_SUPPORTED = 0
P2P_CAPS_INDEX_READ, P2P_CAPS_INDEX_WRITE = 0, 1
P2P_STATUS = {0: "OK", 1: "CHIPSET_NOT_SUPPORTED", 2: "GPU_NOT_SUPPORTED", 3: "IOH_TOPOLOGY_NOT_SUPPORTED",
              4: "DISABLED_BY_REGKEY", 5: "NOT_SUPPORTED", 6: "UNKNOWN"}
REMOTE_TYPE = {0: "gpu", 1: "ibmnpu", 2: "switch", 0xFF: "unknown"}

# Calls for optional features: "not supported"/"no such function" just means "absent".
OPTIONAL_CALLS = {
    "nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkVersion", "nvmlDeviceGetNvLinkCapability",
    "nvmlDeviceGetNvLinkRemotePciInfo_v2", "nvmlDeviceGetNvLinkRemotePciInfo", "nvmlDeviceGetNvLinkRemoteDeviceType",
    "nvmlDeviceGetMigMode", "nvmlDeviceGetNumaNodeId", "nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetGpuFabricInfo",
    "nvmlDeviceGetPlatformInfo",
    "nvmlDeviceGetFieldValues", "nvmlDeviceGetFieldValues(C2C_LINK_COUNT)", "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetCpuAffinity", "nvmlDeviceGetP2PStatus",
    "nvmlDeviceGetPersistenceMode", "nvmlDeviceGetEccMode", "nvmlDeviceGetRetiredPages",
    "nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetRemappedRows", "nvmlDeviceGetTotalEccErrors",
}
# nvml.h: nvmlPageRetirementCause_t (multiple single-bit, double-bit), nvmlMemoryErrorType_t, nvmlEccCounterType_t
RETIRED_CAUSES = {"sbe": 0, "dbe": 1}
MEMORY_ERROR_UNCORRECTED, VOLATILE_ECC = 1, 0
BENIGN_ERRORS = {"NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_INVALID_ARGUMENT",
                 "NOT_IN_BINDING"}

_INIT_REASONS = {
    "NVML_ERROR_LIBRARY_NOT_FOUND": "NVML library not found (libnvidia-ml.so.1): no NVIDIA driver installed",
    "NVML_ERROR_DRIVER_NOT_LOADED": "NVIDIA kernel driver not loaded",
    "NVML_ERROR_NO_PERMISSION": "no permission to open the NVIDIA device files (/dev/nvidia*)",
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": "NVML/driver version mismatch (reload the nvidia module or reboot)",
    "NVML_ERROR_GPU_IS_LOST": "a GPU fell off the bus (NVML_ERROR_GPU_IS_LOST)",
}

# ------------------------------------------------------------------------------------------
# Recording
def error_name(nv: Any, exc: BaseException) -> str:
    """``NVMLError_NotSupported(3)`` -> ``"NVML_ERROR_NOT_SUPPORTED"``; other exceptions by type."""
    value = getattr(exc, "value", None)
    if isinstance(value, int) and not isinstance(value, bool):
        return code_name(nv, value)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:200] if text else type(exc).__name__


def code_name(nv: Any, value: int) -> str:
    for name in sorted(dir(nv)):
        if name.startswith("NVML_ERROR_") and getattr(nv, name, None) == value:
            return name
    return f"NVML_ERROR_{value}"


class Query:
    """Calls NVML functions by name; failures go to ``errors[name]`` and give ``default``."""

    def __init__(self, nv: Any, errors: dict):
        self.nv = nv
        self.errors = errors

    def __call__(self, fn_name: str, *args: Any, default: Any = None) -> Any:
        fn = getattr(self.nv, fn_name, None)
        if fn is None:
            self.errors[fn_name] = "NOT_IN_BINDING"
            return default
        return self.run(fn_name, fn, *args, default=default)

    def run(self, label: str, fn: Callable, *args: Any, default: Any = None) -> Any:
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 - the point: NVML must never crash a probe
            self.errors[label] = error_name(self.nv, e)
            return default


def _text(v: Any) -> Optional[str]:
    if v is None:
        return None
    if isinstance(v, (bytes, bytearray)):
        v = bytes(v).split(b"\x00", 1)[0].decode("utf-8", "replace")
    v = str(v).strip()
    return v or None


def _int_or_none(v: Any) -> Optional[int]:
    try:
        if v is None or isinstance(v, bool):
            return None
        return int(v)
    except (TypeError, ValueError):
        return None


def _affinity_words_to_cpulist(words: Any) -> Optional[str]:
    cpus = []
    try:
        for w, val in enumerate(list(words)):
            val = int(val)
            cpus.extend(w * 64 + b for b in range(64) if val >> b & 1)
    except (TypeError, ValueError):
        return None
    return format_cpulist(cpus) or None


def _field_values(q: Query, h: Any, label: str, fields: list) -> Optional[list]:
    """nvmlDeviceGetFieldValues; per-field return codes checked; list of values or None."""
    vals = q.run(label, q.nv.nvmlDeviceGetFieldValues, h, fields, default=None) \
        if hasattr(q.nv, "nvmlDeviceGetFieldValues") else None
    if vals is None:
        return None
    out = []
    for v in list(vals):
        ret = getattr(v, "nvmlReturn", 0)
        if ret:
            q.errors[label] = code_name(q.nv, int(ret))
            return None
        out.append(int(getattr(getattr(v, "value", None), "uiVal", 0)))
    return out


def _fabric(q: Query, h: Any) -> Optional[dict]:
    """nvmlDeviceGetGpuFabricInfoV (v3: health mask and summary; v2: health mask), else the older
    nvmlDeviceGetGpuFabricInfo: the NVLink fabric NCCL reads (init.cc fillInfo).  None when the GPU has
    no fabric (state not_supported)."""
    nv = q.nv
    for fn_name, struct_name in (("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfo_v3_t"),
                                 ("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t"),
                                 ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t")):
        fn, struct = getattr(nv, fn_name, None), getattr(nv, struct_name, None)
        if fn is None or struct is None:
            continue

        def call(fn=fn, struct=struct):
            import ctypes

            info = struct()
            fn(h, ctypes.byref(info))
            return info

        info = q.run(fn_name, call)
        if info is None:
            continue
        q.errors.pop(fn_name, None)   # an older struct version answered
        state = _int_or_none(getattr(info, "state", None))
        if state in (None, 0):
            return None
        status = _int_or_none(getattr(info, "status", 0)) or 0
        out = {"cluster_uuid": facts.cluster_uuid_from_bytes(getattr(info, "clusterUuid", b"")),
               "clique_id": _int_or_none(getattr(info, "cliqueId", None)),
               "state": facts.FABRIC_STATES[state] if 0 <= state < len(facts.FABRIC_STATES) else str(state),
               "status": "NVML_SUCCESS" if status == 0 else code_name(nv, status)}
        mask = _int_or_none(getattr(info, "healthMask", None))
        if mask is not None:
            out["health_mask"] = mask
        summary = _int_or_none(getattr(info, "healthSummary", None))
        if summary:
            out["health_summary"] = facts.FABRIC_HEALTH_SUMMARIES.get(summary, str(summary))
        return out
    return None


def _platform(q: Query, h: Any) -> Optional[dict]:
    """nvmlDeviceGetPlatformInfo (v2): where the GPU sits in its rack -- chassis serial number, slot,
    tray index, host id, module id (nvidia-smi -q "Platform Info"; NCCL_MNNVL_CLIQUE_ID=-2 makes one
    clique per chassis serial).  None where the platform does not report it."""
    nv = q.nv
    fn, struct = getattr(nv, "nvmlDeviceGetPlatformInfo", None), getattr(nv, "c_nvmlPlatformInfo_v2_t", None)
    if fn is None or struct is None:
        return None

    def call():
        import ctypes

        info = struct()
        fn(h, ctypes.byref(info))
        return info

    info = q.run("nvmlDeviceGetPlatformInfo", call)
    if info is None:
        return None

    def small(v: Any) -> Optional[int]:
        if isinstance(v, (bytes, bytearray)):
            return v[0] if len(v) else 0
        return _int_or_none(v)

    out = {"chassis_serial": _text(getattr(info, "chassisSerialNumber", None)),
           "slot": small(getattr(info, "slotNumber", None)), "tray_index": small(getattr(info, "trayIndex", None)),
           "host_id": small(getattr(info, "hostId", None)), "module_id": small(getattr(info, "moduleId", None))}
    return out if any(v not in (None, 0, "") for v in out.values()) else None


def _record_device(q_global: Query, nv: Any, i: int, h: Any) -> dict:
    d: dict = {"index": i, "uuid": None, "name": None, "pci_bus_id": None, "memory_bytes": None,
               "compute_capability": None, "numa_node": None, "cpu_affinity": None, "pcie": None,
               "mig_mode": None, "nvlinks": [], "c2c": None, "p2p": {}, "fabric": None, "errors": {}}
    q = Query(nv, d["errors"])
    idx = _int_or_none(q("nvmlDeviceGetIndex", h))
    d["index"] = idx if idx is not None else i
    d["uuid"] = _text(q("nvmlDeviceGetUUID", h))
    d["name"] = _text(q("nvmlDeviceGetName", h))
    pci = q("nvmlDeviceGetPciInfo_v3", h) if hasattr(nv, "nvmlDeviceGetPciInfo_v3") else None
    if pci is None:
        pci = q("nvmlDeviceGetPciInfo", h)
    if pci is not None:
        d["pci_bus_id"] = _text(getattr(pci, "busId", None)) or _text(getattr(pci, "busIdLegacy", None))
    mem = q("nvmlDeviceGetMemoryInfo", h)
    d["memory_bytes"] = _int_or_none(getattr(mem, "total", None)) if mem is not None else None
    cc = q("nvmlDeviceGetCudaComputeCapability", h)
    sm = None
    if isinstance(cc, (tuple, list)) and len(cc) == 2:
        maj, mnr = _int_or_none(cc[0]), _int_or_none(cc[1])
        if maj is not None and mnr is not None:
            d["compute_capability"] = [maj, mnr]
            sm = facts.compute_capability([maj, mnr])
    numa = _int_or_none(q("nvmlDeviceGetNumaNodeId", h))
    d["numa_node"] = numa if numa is not None and numa >= 0 else None
    nwords = max(1, ((os.cpu_count() or 64) + 63) // 64)
    aff = q("nvmlDeviceGetCpuAffinity", h, nwords)
    d["cpu_affinity"] = _affinity_words_to_cpulist(aff) if aff is not None else None
    # nvidia-smi's "NUMA Affinity" column: the NUMA nodes whose memory is closest to the GPU
    # (several on Grace/GB200, e.g. 0,3-9,11-17).  Scope 0 = NVML_AFFINITY_SCOPE_NODE.
    if hasattr(nv, "nvmlDeviceGetMemoryAffinity"):
        maff = q("nvmlDeviceGetMemoryAffinity", h, 1, 0)
        d["memory_affinity"] = _affinity_words_to_cpulist(maff) if maff is not None else None
    pcie = {"gen": _int_or_none(q("nvmlDeviceGetCurrPcieLinkGeneration", h)),
            "width": _int_or_none(q("nvmlDeviceGetCurrPcieLinkWidth", h)),
            "max_gen": _int_or_none(q("nvmlDeviceGetMaxPcieLinkGeneration", h)),
            "max_width": _int_or_none(q("nvmlDeviceGetMaxPcieLinkWidth", h))}
    d["pcie"] = pcie if any(v is not None for v in pcie.values()) else None
    mig = q("nvmlDeviceGetMigMode", h)
    if isinstance(mig, (tuple, list)) and mig:
        d["mig_mode"] = bool(_int_or_none(mig[0]))
    cap = min(18, _int_or_none(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)) or 18)
    for link in range(min(facts.max_nvlinks(sm), cap)):
        st = q("nvmlDeviceGetNvLinkState", h, link, default=_FAIL)
        if st is _FAIL:
            continue
        active = bool(_int_or_none(st))
        rec = {"link": link, "active": active, "remote_bus_id": None, "remote_device_type": None, "version": None}
        rec["version"] = _int_or_none(q("nvmlDeviceGetNvLinkVersion", h, link))
        p2p_cap = q("nvmlDeviceGetNvLinkCapability", h, link, NVLINK_CAP_P2P_SUPPORTED, default=_FAIL)
        if p2p_cap is not _FAIL:
            rec["p2p_supported"] = bool(_int_or_none(p2p_cap))
        if active:
            rp = q("nvmlDeviceGetNvLinkRemotePciInfo_v2", h, link) if hasattr(nv, "nvmlDeviceGetNvLinkRemotePciInfo_v2") \
                else q("nvmlDeviceGetNvLinkRemotePciInfo", h, link)
            if rp is not None:
                rec["remote_bus_id"] = _text(getattr(rp, "busId", None))
            rt = _int_or_none(q("nvmlDeviceGetNvLinkRemoteDeviceType", h, link))
            rec["remote_device_type"] = REMOTE_TYPE.get(rt, "unknown") if rt is not None else None
        d["nvlinks"].append(rec)
    if sm is None or sm >= 90:
        cnt = _field_values(q, h, "nvmlDeviceGetFieldValues(C2C_LINK_COUNT)", [FI_C2C_LINK_COUNT])
        if cnt and cnt[0] > 0:
            up, bw = 0, None
            for k in range(min(cnt[0], 64)):
                vals = _field_values(q, h, "nvmlDeviceGetFieldValues(C2C_LINK)",
                                     [(FI_C2C_LINK_GET_STATUS, k), (FI_C2C_LINK_GET_MAX_BW, k)])
                if vals and vals[0] == 1:
                    up += 1
                    bw = vals[1]  # NCCL keeps the last link's max bw (MB/s)
            d["c2c"] = {"count": up, "bw_MBps": bw} if up else None
    d["fabric"] = _fabric(q, h)
    if d["fabric"] is not None:
        d["platform"] = _platform(q, h)
    d.update(_memory_health(q, h))
    return d


def _memory_health(q: Query, h: Any) -> dict:
    """Persistence mode, ECC (current/pending), retired pages and remapped rows: what makes a GPU
    slow to start (persistence off), lose memory (retired pages) or need a reset (pending)."""
    out: dict = {}
    pm = q("nvmlDeviceGetPersistenceMode", h)
    out["persistence_mode"] = bool(_int_or_none(pm)) if _int_or_none(pm) is not None else None
    ecc = q("nvmlDeviceGetEccMode", h)
    if isinstance(ecc, (tuple, list)) and len(ecc) == 2 and all(_int_or_none(x) is not None for x in ecc):
        out["ecc"] = {"current": bool(int(ecc[0])), "pending": bool(int(ecc[1]))}
        unc = _int_or_none(q("nvmlDeviceGetTotalEccErrors", h, MEMORY_ERROR_UNCORRECTED, VOLATILE_ECC))
        out["ecc"]["volatile_uncorrected"] = unc
    pages = {}
    for name, cause in RETIRED_CAUSES.items():
        got = q("nvmlDeviceGetRetiredPages", h, cause)
        if isinstance(got, (list, tuple)):
            pages[name] = len(got)
    if pages:
        pend = _int_or_none(q("nvmlDeviceGetRetiredPagesPendingStatus", h))
        pages["pending"] = bool(pend) if pend is not None else None
        out["retired_pages"] = pages
    rows = q("nvmlDeviceGetRemappedRows", h)
    if isinstance(rows, (tuple, list)) and len(rows) == 4 and all(_int_or_none(x) is not None for x in rows):
        out["remapped_rows"] = {"correctable": int(rows[0]), "uncorrectable": int(rows[1]),
                                "pending": bool(int(rows[2])), "failure": bool(int(rows[3]))}
    return out


def record_nvml(nv: Any = None) -> dict:
    """Ask NVML everything gpucomm uses; returns the ``gpucomm.nvml/v1`` record.  Never raises."""
    rec: dict = {"schema": NVML_SCHEMA, "driver_version": None, "cuda_version": None, "nvml_version": None,
                 "errors": {}, "devices": []}
    if nv is None:
        try:
            import pynvml as nv  # the one NVML import in gpucomm
        except Exception as e:  # noqa: BLE001 - ImportError, or the binding failing at import
            rec["errors"]["import pynvml"] = f"{type(e).__name__}: {e}"[:200]
            return rec
    q = Query(nv, rec["errors"])
    if q("nvmlInit", default=_FAIL) is _FAIL:
        return rec
    try:
        rec["driver_version"] = _text(q("nvmlSystemGetDriverVersion"))
        cv = _int_or_none(q("nvmlSystemGetCudaDriverVersion_v2"))
        if cv is None:
            cv = _int_or_none(q("nvmlSystemGetCudaDriverVersion"))
        rec["cuda_version"] = f"{cv // 1000}.{(cv % 1000) // 10}" if cv else None
        rec["nvml_version"] = _text(q("nvmlSystemGetNVMLVersion"))
        n = _int_or_none(q("nvmlDeviceGetCount")) or 0
        handles = []
        for i in range(min(n, 1024)):
            h = q("nvmlDeviceGetHandleByIndex", i)
            if h is None:
                rec["devices"].append({"index": i, "errors": {"nvmlDeviceGetHandleByIndex":
                                                              rec["errors"].pop("nvmlDeviceGetHandleByIndex", "?")},
                                       "nvlinks": [], "p2p": {}})
                continue
            handles.append((h, _record_device(q, nv, i, h)))
        rec["devices"].extend(d for _, d in handles)
        for ha, da in handles:
            qa = Query(nv, da["errors"])
            for hb, db in handles:
                if da is db or not db.get("pci_bus_id"):
                    continue
                r = _int_or_none(qa("nvmlDeviceGetP2PStatus", ha, hb, P2P_CAPS_INDEX_READ))
                w = _int_or_none(qa("nvmlDeviceGetP2PStatus", ha, hb, P2P_CAPS_INDEX_WRITE))
                if r is None and w is None:
                    continue
                da["p2p"][db["pci_bus_id"]] = {"read": P2P_STATUS.get(r, "UNKNOWN") if r is not None else None,
                                               "write": P2P_STATUS.get(w, "UNKNOWN") if w is not None else None}
        rec["devices"].sort(key=lambda d: d["index"])
    finally:
        q("nvmlShutdown")
        rec["errors"].pop("nvmlShutdown", None)
    return rec


# ------------------------------------------------------------------------------------------
# Handles: live library, a recorded nvml.json, or none
class LiveNvml:
    """The real library; the record is taken once and cached."""

    def __init__(self, nv: Any = None):
        self._nv = nv
        self._rec: Optional[dict] = None

    def record(self) -> dict:
        if self._rec is None:
            self._rec = record_nvml(self._nv)
        return self._rec

    def available(self):
        return init_failure(self.record()) or True


class RecordedNvml:
    """A snapshot's ``nvml.json``."""

    def __init__(self, path):
        self.path = Path(path)
        self._rec: Optional[dict] = None

    def record(self) -> dict:
        if self._rec is None:
            from gpucomm.probes.parse import parse_json
            from gpucomm.probes.sources.host import _confined_read

            try:
                text = _confined_read(self.path, self.path.parent, MAX_NVML_RECORD_BYTES).decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"cannot read: {e}", str(self.path)) from None
            rec = parse_json(text, str(self.path), expected=f"a {NVML_SCHEMA} record")
            if not isinstance(rec, dict) or rec.get("schema") != NVML_SCHEMA:
                got = rec.get("schema") if isinstance(rec, dict) else type(rec).__name__
                raise InputError(f"schema is {str(got)[:40]!r}", str(self.path), expected=repr(NVML_SCHEMA))
            devs = rec.get("devices")
            if isinstance(devs, list) and len(devs) > MAX_GPUS:
                raise InputError(f"{len(devs)} devices, more than the limit of {MAX_GPUS} per node", str(self.path),
                                 expected="NCCL's own bound, NCCL_TOPO_MAX_NODES (README: Limits)")
            self._rec = rec
        return self._rec

    def available(self):
        f = init_failure(self.record())
        return f"{f} (recorded)" if f else True


class NoNvml:
    """No NVML for this host (a snapshot taken without it, a --sysfs-root tree)."""

    def __init__(self, reason: str):
        self.reason = reason

    def record(self) -> dict:
        return {"schema": NVML_SCHEMA, "driver_version": None, "cuda_version": None, "nvml_version": None,
                "errors": {}, "devices": []}

    def available(self):
        return self.reason


def init_failure(rec: dict) -> Optional[str]:
    """Why a record holds nothing (library missing, nvmlInit failed), or None."""
    errs = rec.get("errors") if isinstance(rec.get("errors"), dict) else {}
    if "import pynvml" in errs:
        return f"the NVML binding (nvidia-ml-py) cannot be imported: {errs['import pynvml']}"
    e = errs.get("nvmlInit")
    if e:
        return _INIT_REASONS.get(str(e), f"nvmlInit failed: {e}")
    return None


def nvml_handle(host: Host):
    """The host's NVML handle; the live library only when the host is this machine's root."""
    if host.nvml is None:
        from gpucomm.probes.sources.numa import is_live_root

        host.nvml = LiveNvml() if is_live_root(host) else \
            NoNvml(f"NVML describes this machine, not the tree under {host.root}")
    return host.nvml


# ------------------------------------------------------------------------------------------
# Record -> partial document
def _s(v: Any) -> Optional[str]:
    return v.strip() or None if isinstance(v, str) else None


def _i(v: Any, lo: int = 0, hi: int = 1 << 62) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi else None


def _b(v: Any) -> Optional[bool]:
    return v if isinstance(v, bool) else None


def nvml_to_partial(rec: dict, host: Optional[Host] = None, provenance: str = "live") -> dict:
    """Turn an ``nvml.json`` record into a partial topology document (never raises on bad data)."""
    doc = new_document(provenance)
    if not isinstance(rec, dict):
        warn(doc, "nvml: record is not a mapping; ignored")
        doc["sources"] = [source_record("nvml", "error", "record is not a mapping")]
        return doc
    doc["host"]["driver_version"] = _s(rec.get("driver_version"))
    doc["host"]["cuda_version"] = _s(rec.get("cuda_version"))
    errors = rec.get("errors") if isinstance(rec.get("errors"), dict) else {}
    for call, err in sorted(errors.items()):
        if not (str(err) in BENIGN_ERRORS and call in OPTIONAL_CALLS):
            warn(doc, f"nvml: {call} failed: {err}")
    devices = rec.get("devices") if isinstance(rec.get("devices"), list) else []
    if not isinstance(rec.get("devices"), list) and "devices" in rec:
        warn(doc, "nvml: 'devices' is not a list; ignored")

    gpus: list = []
    sms: dict = {}
    used_idx: set = set()
    for pos, d in enumerate(devices):
        if not isinstance(d, dict):
            warn(doc, f"nvml: devices[{pos}] is not a mapping; ignored")
            continue
        idx = _i(d.get("index"), 0, 4095)
        if idx is None or idx in used_idx:
            idx = pos if pos not in used_idx else max(used_idx) + 1
        used_idx.add(idx)
        g, sm = _gpu_from_device(doc, d, idx)
        gpus.append(g)
        sms[idx] = sm
    doc["gpus"] = gpus
    _links_from_gpus(doc, gpus, sms, host)
    n_warn = len(doc["warnings"])
    detail = f"{len(gpus)} GPU(s)"
    if doc["host"]["driver_version"]:
        detail += f", driver {doc['host']['driver_version']}"
    if doc["host"]["cuda_version"]:
        detail += f", CUDA {doc['host']['cuda_version']}"
    if n_warn:
        detail += f"; {n_warn} NVML error(s)"
    doc["sources"] = [source_record("nvml", "partial" if n_warn else "ok", detail)]
    return doc


def _gpu_from_device(doc: dict, d: dict, idx: int) -> tuple[dict, Optional[int]]:
    """(GPU record, sm) of one recorded NVML device; bad values become unknown with a warning."""
    label = f"GPU{idx}"
    for call, err in sorted((d.get("errors") or {}).items()) if isinstance(d.get("errors"), dict) else []:
        if not (str(err) in BENIGN_ERRORS and call in OPTIONAL_CALLS):
            warn(doc, f"nvml: {label}: {call} failed: {err}")
    name = _s(d.get("name"))
    sm = facts.compute_capability(d.get("compute_capability"))   # NVML's (major, minor)
    cc_s = facts.format_compute_capability(sm)
    arch, sm_name = arch_from_name(name)
    if sm is None:
        sm = sm_name
    arch = arch or facts.arch_from_sm(sm)
    bus = normalize_bus_id(d.get("pci_bus_id"))
    if d.get("pci_bus_id") is not None and bus is None:
        warn(doc, f"nvml: {label}: pci_bus_id {str(d.get('pci_bus_id'))[:40]!r} is not a PCI bus id")
    numa = _i(d.get("numa_node"), 0, 4095)
    try:
        aff = canonical_cpulist(d.get("cpu_affinity")) if isinstance(d.get("cpu_affinity"), str) else None
    except ValueError:
        aff = None
        warn(doc, f"nvml: {label}: cpu_affinity {str(d.get('cpu_affinity'))[:40]!r} is not a cpu list")
    numa_aff = [numa] if numa is not None else []
    if isinstance(d.get("memory_affinity"), str):
        try:
            numa_aff = parse_cpulist(d["memory_affinity"]) or numa_aff
        except ValueError:
            warn(doc, f"nvml: {label}: memory_affinity {d['memory_affinity'][:40]!r} is not a node list")
    pcie = None
    if isinstance(d.get("pcie"), dict):
        pc = d["pcie"]
        pcie = {k: _i(pc.get(k), 1, 64) for k in ("gen", "width", "max_gen", "max_width")}
        if all(v is None for v in pcie.values()):
            pcie = None
    g = gpu_record(idx, uuid=_s(d.get("uuid")), name=name, pci_bus_id=bus, arch=arch, compute_capability=cc_s,
                   memory_bytes=_i(d.get("memory_bytes")), numa_node=numa,
                   numa_affinity=numa_aff, cpu_affinity=aff, pcie=pcie,
                   nvlink=_nvlinks_of_device(d, nvlink_bw_per_link(sm)), mig=_b(d.get("mig_mode")), vendor="nvidia")
    if numa is not None:
        # nvmlDeviceGetNumaNodeId answers only for GPUs whose memory is a NUMA node (Grace
        # superchips): it is what nvidia-smi topo -m prints as "GPU NUMA ID"
        g["gpu_numa_id"] = numa
    g["p2p"] = _p2p_of_device(d)
    if isinstance(d.get("c2c"), dict):
        c = d["c2c"]
        g["c2c"] = {"count": _i(c.get("count"), 0, 64), "bw_MBps": _i(c.get("bw_MBps"))}
    for key in ("persistence_mode",):
        if _b(d.get(key)) is not None:
            g[key] = d[key]
    for key in ("ecc", "retired_pages", "remapped_rows"):
        if isinstance(d.get(key), dict):
            g[key] = {k: v for k, v in d[key].items() if isinstance(v, (bool, int)) and (isinstance(v, bool) or v >= 0)}
    if isinstance(d.get("fabric"), dict):
        fab = fabric_record(d["fabric"])
        if fab is None:
            warn(doc, f"nvml: {label}: fabric {str(d['fabric'])[:60]} holds no usable field; ignored")
        else:
            g["fabric"] = fab
    if isinstance(d.get("platform"), dict):
        plat = {k: v for k, v in d["platform"].items()
                if k in PLATFORM_KEYS and (isinstance(v, str) and v.strip() or _i(v, 0, 255) is not None)}
        if plat:
            g["platform"] = plat
    return g, sm


def _nvlinks_of_device(d: dict, per_link: float) -> list:
    """Per-link NVLink records (state, remote bus id, version; NCCL xml.cc:954-1060 asks the same)."""
    nvl = []
    for l in d["nvlinks"] if isinstance(d.get("nvlinks"), list) else []:
        if not isinstance(l, dict):
            continue
        active = _b(l.get("active"))
        remote_raw = l.get("remote_bus_id")
        remote = normalize_bus_id(remote_raw) if isinstance(remote_raw, str) else None
        if remote is None and isinstance(remote_raw, str) and remote_raw.strip().lower().startswith("fffffff"):
            remote = "fffffff:ff:ff.0"  # NCCL 2.30's sentinel spelling, normalised
        entry = {"link": _i(l.get("link"), 0, 63),
                 "state": "active" if active else ("inactive" if active is False else None),
                 "remote": remote, "version": _i(l.get("version"), 0, 99),
                 "bw_GBps": per_link if active else 0.0,
                 "remote_type": l.get("remote_device_type") if isinstance(l.get("remote_device_type"), str) else None}
        if _b(l.get("p2p_supported")) is not None:
            entry["p2p_supported"] = l["p2p_supported"]
        nvl.append(entry)
    return nvl


def _p2p_of_device(d: dict) -> dict:
    """{peer bus id: "OK" or the first non-OK read/write status} (nvmlDeviceGetP2PStatus)."""
    out: dict = {}
    if isinstance(d.get("p2p"), dict):
        for other, st in sorted(d["p2p"].items()):
            ob = normalize_bus_id(other)
            if ob is None or not isinstance(st, dict):
                continue
            r, w = st.get("read"), st.get("write")
            vals = [v for v in (r, w) if isinstance(v, str)]
            out[ob] = "OK" if vals and all(v == "OK" for v in vals) else \
                next((v for v in vals if v != "OK"), "UNKNOWN")
    return out


def _remote_class(host: Optional[Host], bdf: str) -> Optional[int]:
    """sysfs class of an NVLink peer (NCCL's ``tclass``, xml.cc:1034-1060)."""
    if host is None:
        return None
    t = host.read_text(f"/sys/bus/pci/devices/{bdf}/class")
    try:
        return int(t.strip(), 16) if t else None
    except ValueError:
        return None


def _links_from_gpus(doc: dict, gpus: list, sms: dict, host: Optional[Host]) -> None:
    by_bus = {g["pci_bus_id"]: g for g in gpus if g["pci_bus_id"]}
    pair_counts: dict = {}   # (id_a, id_b) directed -> count
    switches: dict = {}
    links: list = []
    for g in gpus:
        gid = gpu_id(g)
        sm = sms.get(g["index"])
        per = nvlink_bw_per_link(sm)
        targets: dict = {}  # (kind, id) -> count
        for l in g["nvlink"]:
            if l["state"] != "active" or l.get("p2p_supported") is False:
                continue  # NCCL only counts links that are up and P2P-capable
            rb, rt = l["remote"], l.get("remote_type")
            if rb and rb in by_bus and rb != g["pci_bus_id"]:
                key = ("gpu", rb)
            elif rt == "ibmnpu":
                key = ("cpu", cpu_id(g["numa_node"]))
            elif rt == "gpu" and rb:
                warn(doc, f"nvml: GPU{g['index']} NVLink {l['link']} goes to GPU {rb}, which NVML did not list")
                continue
            elif rt == "switch" or not rb or is_sentinel_bus_id(rb):
                key = ("nvswitch", rb if rb and not is_sentinel_bus_id(rb) else NVS_ID)
            else:
                cls = _remote_class(host, rb)
                if cls is not None and (cls >> 16) == 0x03:
                    warn(doc, f"nvml: GPU{g['index']} NVLink {l['link']} goes to GPU {rb}, which NVML did not list")
                    continue
                if cls == 0x068001:
                    key = ("cpu", cpu_id(g["numa_node"]))
                else:  # 0x068000, unreadable or unknown: NCCL assumes an NVSwitch
                    key = ("nvswitch", rb)
            targets[key] = targets.get(key, 0) + 1
        for (kind, tid), count in sorted(targets.items()):
            if kind == "gpu":
                pair_counts[(gid, tid)] = count
            elif kind == "nvswitch":
                if tid not in switches:
                    switches[tid] = switch_record(tid, "nvswitch", pci_bus_id=None if tid == NVS_ID else tid)
                links.append(link_record(gid, tid, "nvlink", count * per, count=count))
            else:
                links.append(link_record(gid, tid, "nvlink", count * per, count=count))
        c2c = g.get("c2c")
        if c2c and c2c.get("count"):
            bw = (c2c.get("bw_MBps") or 0) * c2c["count"] / 1000.0  # NCCL topo.cc:920-944
            links.append(link_record(gid, cpu_id(g["numa_node"]), "c2c", bw, count=c2c["count"]))
    sm_by_id = {gpu_id(g): sms.get(g["index"]) for g in gpus}
    done = set()
    for (a, b), count in sorted(pair_counts.items()):
        key = tuple(sorted((a, b)))
        if key in done:
            continue
        done.add(key)
        back = pair_counts.get((b, a))
        if back is not None and back != count:
            warn(doc, f"nvml: NVLink count between {a} and {b} differs by side ({count} vs {back}); using {min(count, back)}")
            count = min(count, back)
        sm = min((s for s in (sm_by_id.get(a), sm_by_id.get(b)) if s is not None), default=None)
        links.append(link_record(key[0], key[1], "nvlink", count * nvlink_bw_per_link(sm), count=count))
    doc["switches"] = list(switches.values())
    doc["links"] = links


class _NvmlSource:
    name = "nvml"
    priority = 10

    def available(self, host: Host):
        # A broken nvml.json raises InputError: probe_host records the source as "error".
        return nvml_handle(host).available()

    def collect(self, host: Host) -> dict:
        rec = nvml_handle(host).record()
        return nvml_to_partial(rec, host, host.provenance)


SOURCE = _NvmlSource()
