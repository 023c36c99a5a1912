"""Source ``numa``: NUMA nodes, CPUs and host facts.

* ``/sys/devices/system/node/node<N>/{cpulist,distance,meminfo}`` -> ``numa_nodes`` (a kernel
  without NUMA gives one node 0 from ``/sys/devices/system/cpu/online``);
* ``/proc/cpuinfo`` (through the host, so snapshots replay it) -> cpu vendor/model/sockets and the
  family/model NCCL uses for the inter-socket bandwidth of the ``smp`` links
  (``ncclTopoGetInterCpuBw``, topo.cc:60-83);
* live only (root ``/``): hostname, OS, kernel, architecture from :mod:`platform` and CPU counts /
  memory from psutil; for a snapshot or fixture these come from its ``meta.json``.
"""
from __future__ import annotations

import json
import os
import re
from typing import Optional

from gpucomm.probes import facts
from gpucomm.probes.sources.host import Host
from gpucomm.probes.model import canonical_cpulist, cpu_id, link_record, new_document, source_record, warn

NODE_DIR = "/sys/devices/system/node"
# host facts a snapshot's meta.json may carry (the live probe gets them from platform/psutil)
META_KEYS = ("hostname", "os", "kernel", "cpu_vendor", "cpu_model", "cpu_arch", "sockets", "collected_at",
             "cpus_logical", "cpus_physical", "memory_bytes")
META_INT_KEYS = ("sockets", "cpus_logical", "cpus_physical", "memory_bytes")

# /proc/cpuinfo "CPU implementer" on arm64 (lscpu's table, the few that matter here)
_ARM_IMPLEMENTERS = {0x41: "ARM", 0x42: "Broadcom", 0x43: "Cavium", 0x48: "HiSilicon", 0x4E: "NVIDIA",
                     0x50: "APM", 0x51: "Qualcomm", 0x61: "Apple", 0xC0: "Ampere"}
_ARM_PARTS = {0xD0C: "Neoverse-N1", 0xD40: "Neoverse-V1", 0xD49: "Neoverse-N2", 0xD4F: "Neoverse-V2",
              0xD8E: "Neoverse-N3", 0xD84: "Neoverse-V3"}


def parse_distance(text: Optional[str]) -> Optional[list]:
    """``"10 21"`` -> [10, 21]; junk -> None."""
    if not text or not text.strip():
        return None
    try:
        vals = [int(t) for t in text.split()]
    except ValueError:
        return None
    return vals if all(0 <= v <= 255 for v in vals) else None


def parse_meminfo_total(text: Optional[str]) -> Optional[int]:
    """``Node 0 MemTotal:  263856140 kB`` (node meminfo) or ``MemTotal: ... kB`` -> bytes."""
    if not text:
        return None
    m = re.search(r"MemTotal:\s*(\d+)\s*kB", text)
    if not m:
        return None
    v = int(m.group(1)) * 1024
    return v if v < 1 << 60 else None


def parse_cpuinfo(text: Optional[str]) -> dict:
    """vendor, model name, sockets (distinct ``physical id``), family/model numbers, arch hints."""
    out: dict = {"cpu_vendor": None, "cpu_model": None, "sockets": None, "family": None, "model": None,
                 "arch_hint": None}
    if not text:
        return out
    phys: set = set()
    for line in text.splitlines():
        if ":" not in line:
            continue
        k, v = (s.strip() for s in line.split(":", 1))
        k = k.lower()
        if k == "vendor_id" and out["cpu_vendor"] is None:
            out["cpu_vendor"] = v or None
        elif k == "model name" and out["cpu_model"] is None:
            out["cpu_model"] = v or None
        elif k == "physical id":
            phys.add(v)
        elif k == "cpu family" and out["family"] is None:
            out["family"] = _num(v)
        elif k == "model" and out["model"] is None:
            out["model"] = _num(v)
        elif k == "cpu implementer" and out["cpu_vendor"] is None:
            impl = _num(v)
            out["cpu_vendor"] = _ARM_IMPLEMENTERS.get(impl, v) if impl is not None else None
            out["arch_hint"] = "aarch64"
        elif k == "cpu part" and out["cpu_model"] is None:
            part = _num(v)
            out["cpu_model"] = _ARM_PARTS.get(part) if part is not None else None
        elif k == "cpu" and v.upper().startswith("POWER") and out["cpu_model"] is None:
            out["cpu_model"], out["cpu_vendor"], out["arch_hint"] = v, "IBM", "ppc64le"
    out["sockets"] = len(phys) or None
    if out["arch_hint"] is None and out["cpu_vendor"] in ("GenuineIntel", "AuthenticAMD", "HygonGenuine",
                                                          "CentaurHauls", "  Shanghai  "):
        out["arch_hint"] = "x86_64"
    return out


def _num(v: str) -> Optional[int]:
    try:
        return int(v, 0)
    except ValueError:
        return None


def is_live_root(host: Host) -> bool:
    try:
        return os.path.realpath(host.root) == "/"
    except OSError:  # pragma: no cover
        return False


def read_meta(host: Host) -> Optional[dict]:
    """``meta.json`` of a snapshot/fixture root (never read on the live root)."""
    if is_live_root(host):
        return None
    text = host.read_text("/meta.json")
    if text is None:
        return None
    try:
        meta = json.loads(text)
    except (ValueError, RecursionError):  # the snapshot loader reports an unreadable meta.json
        return None
    return meta if isinstance(meta, dict) else None


def live_facts() -> dict:
    import platform

    facts: dict = {"hostname": platform.node() or None, "kernel": platform.release() or None,
                   "cpu_arch": platform.machine() or None, "os": None}
    try:
        rel = platform.freedesktop_os_release()
        facts["os"] = rel.get("PRETTY_NAME") or rel.get("NAME")
    except (OSError, AttributeError):
        facts["os"] = platform.system() or None
    try:
        import psutil

        facts["cpus_logical"] = psutil.cpu_count(logical=True)
        facts["cpus_physical"] = psutil.cpu_count(logical=False)
        facts["memory_bytes"] = int(psutil.virtual_memory().total)
    except (OSError, RuntimeError, ValueError, AttributeError):  # a broken /proc must not stop the probe
        pass
    return facts


def collect(host: Host) -> dict:
    doc = new_document(host.provenance)
    nodes = []
    ids = sorted(int(m.group(1)) for m in (re.match(r"^node(\d+)$", n) for n in host.listdir(NODE_DIR)) if m)
    for nid in ids:
        base = f"{NODE_DIR}/node{nid}"
        raw = host.read_text(f"{base}/cpulist")
        try:
            cpus = canonical_cpulist(raw)
        except ValueError:
            cpus = None
            warn(doc, f"numa: node{nid}: cpulist {raw.strip()[:40]!r} is not a cpu list")
        if raw is None:
            warn(doc, f"numa: node{nid}: {base}/cpulist unreadable")
        raw_d = host.read_text(f"{base}/distance")
        dist = parse_distance(raw_d)
        if raw_d is not None and dist is None:
            warn(doc, f"numa: node{nid}: distance {raw_d.strip()[:40]!r} is not a list of integers")
        mem = parse_meminfo_total(host.read_text(f"{base}/meminfo"))
        nodes.append({"id": nid, "cpus": cpus, "memory_bytes": mem, "distances": dist})
    live = is_live_root(host)
    if not nodes:
        # Kernel built without NUMA (or a container hiding it): one node with every online CPU.
        raw = host.read_text("/sys/devices/system/cpu/online")
        try:
            cpus = canonical_cpulist(raw)
        except ValueError:
            cpus = None
        if cpus is not None:
            nodes.append({"id": 0, "cpus": cpus, "distances": None,
                          "memory_bytes": parse_meminfo_total(host.read_text("/proc/meminfo"))})
    doc["numa_nodes"] = nodes

    info = parse_cpuinfo(host.read_text("/proc/cpuinfo"))
    h = doc["host"]
    for k in ("cpu_vendor", "cpu_model", "sockets"):
        h[k] = info[k]
    # CPUID's family and model, as NCCL reads them (a VM's model name often hides the generation)
    for k, v in (("cpu_family", info["family"]), ("cpu_model_id", info["model"])):
        if v is not None and v >= 0:
            h[k] = v
    if live:
        for k, v in live_facts().items():
            if h.get(k) is None:
                h[k] = v
    else:
        meta = read_meta(host) or {}
        for k in META_KEYS:
            v = meta.get(k)
            ok = isinstance(v, str) if k not in META_INT_KEYS else \
                (isinstance(v, int) and not isinstance(v, bool) and v >= 0)
            if h.get(k) is None and ok:
                h[k] = v
    if h.get("cpu_arch") is None and info["arch_hint"]:
        h["cpu_arch"] = info["arch_hint"]
    if h.get("sockets") is None:
        h["sockets"] = _sockets_from_topology(host)

    # SMP links between every pair of NUMA nodes (NCCL connects every pair of CPU nodes), with NCCL's
    # bandwidth for this CPU; none when it cannot be identified (the typed view's default applies).
    bw = facts.inter_cpu_bw(facts.cpu_identity({"vendor": h.get("cpu_vendor"), "familyid": info["family"],
                                                "modelid": info["model"], "arch": h.get("cpu_arch")}, None))
    links = []
    for i, a in enumerate(ids):
        for b in ids[i + 1:]:
            if bw is not None:
                links.append(link_record(cpu_id(a), cpu_id(b), "smp", bw))
    doc["links"] = links
    if nodes:
        doc["sources"] = [source_record("numa", "ok", f"{len(nodes)} NUMA node(s)" +
                                        ("" if ids else " (no NUMA in sysfs: one node from cpu/online)"))]
    else:
        doc["sources"] = [source_record("numa", "partial", f"no {NODE_DIR}/node* and no /sys/devices/system/cpu/online")]
    return doc


def _sockets_from_topology(host: Host) -> Optional[int]:
    pkgs = set()
    for c in host.listdir("/sys/devices/system/cpu"):
        if re.match(r"^cpu\d+$", c):
            v = host.read_text(f"/sys/devices/system/cpu/{c}/topology/physical_package_id")
            if v is not None and v.strip().lstrip("-").isdigit():
                pkgs.add(v.strip())
    return len(pkgs) or None


class _NumaSource:
    name = "numa"
    priority = 35

    def available(self, host: Host):
        if host.listdir(NODE_DIR) or host.read_text("/sys/devices/system/cpu/online") is not None:
            return True
        return f"neither {host.path(NODE_DIR)} nor /sys/devices/system/cpu/online is readable"

    def collect(self, host: Host) -> dict:
        return collect(host)


SOURCE = _NumaSource()
