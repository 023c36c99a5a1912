"""``probe_host``: run the sources on a host, record why each gave what it gave, merge.

The same function probes the live node (``Host()``), a ``--sysfs-root`` tree, a snapshot and a
generated fixture; only the :class:`gpucomm.probes.sources.host.Host` differs.
"""
from __future__ import annotations

import importlib
from typing import Optional

from gpucomm.probes.errors import GpucommError, InputError
from gpucomm.probes.sources.host import Host
from gpucomm.probes.merge import merge
from gpucomm.probes.model import finalize, source_record, warn

SOURCE_MODULES = {
    "nvml": "gpucomm.probes.sources.nvml",
    "smi": "gpucomm.probes.sources.smi",
    "sysfs": "gpucomm.probes.sources.sysfs",
    "ib": "gpucomm.probes.sources.ib",
    "net": "gpucomm.probes.sources.net",
    "numa": "gpucomm.probes.sources.numa",
    # the software path (docs/SWPATH.md): one module, one source each
    "driver": "gpucomm.probes.sources.swpath:DRIVER",
    "nccl": "gpucomm.probes.sources.swpath:NCCL",
    "netplugin": "gpucomm.probes.sources.swpath:NETPLUGIN",
    "gdr": "gpucomm.probes.sources.swpath:GDR",
    "iommu": "gpucomm.probes.sources.swpath:IOMMU",
    "hypervisor": "gpucomm.probes.sources.swpath:HYPERVISOR",
    "services": "gpucomm.probes.sources.swpath:SERVICES_SOURCE",
}
DEFAULT_SOURCES = ("nvml", "smi", "sysfs", "ib", "net", "numa", "driver", "nccl", "netplugin", "gdr", "iommu",
                   "hypervisor", "services")


def parse_sources(spec) -> Optional[list]:
    """``"nvml,sysfs"`` / list -> validated list (None = all)."""
    if spec is None:
        return None
    names = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s and s.strip()]
    bad = [n for n in names if n not in SOURCE_MODULES]
    if bad:
        raise InputError(f"unknown source {bad[0]!r}", "--sources", expected="a comma list of " + ",".join(DEFAULT_SOURCES))
    if not names:
        raise InputError("no source named", "--sources", expected="a comma list of " + ",".join(DEFAULT_SOURCES))
    return list(dict.fromkeys(names))


def load_source(name: str):
    module, _, attr = SOURCE_MODULES[name].partition(":")
    return getattr(importlib.import_module(module), attr or "SOURCE")


def probe_host(host: Optional[Host] = None, sources=None) -> dict:
    """Probe ``host`` (default: this machine) with ``sources`` (default: all) -> finalised document.

    Every requested source appears in ``sources`` with status ``ok`` / ``partial`` (gave something,
    with warnings) / ``unavailable`` (gave nothing, ``detail`` says why: no driver, no binary, not
    recorded) / ``error`` (its input was broken)."""
    host = host if host is not None else Host()
    names = parse_sources(sources) or list(DEFAULT_SOURCES)
    partials = []
    for name in names:
        src = load_source(name)
        try:
            avail = src.available(host)
            if avail is not True:
                reason = avail if isinstance(avail, str) and avail else "not available"
                partials.append(_status_only(name, "unavailable", reason, host))
                continue
            part = src.collect(host)
        except GpucommError as e:
            part = _status_only(name, "error", str(e), host)
            warn(part, f"{name}: {e}")
        except Exception as e:  # noqa: BLE001 - one broken source must not lose the others
            msg = f"internal error in source {name} ({type(e).__name__}: {e}); please report it with `gpucomm snapshot`"
            part = _status_only(name, "error", msg, host)
            warn(part, msg)
        if not part.get("sources"):
            part["sources"] = [source_record(name, "ok", "")]
        partials.append(part)
    doc = merge(partials, provenance=host.provenance)
    for problem in getattr(host, "problems", None) or []:  # files refused by the host's read rules
        warn(doc, problem)
    return finalize(doc)


def _status_only(name: str, status: str, detail: str, host: Host) -> dict:
    from gpucomm.probes.model import new_document

    d = new_document(host.provenance)
    d["sources"] = [source_record(name, status, detail)]
    return d
