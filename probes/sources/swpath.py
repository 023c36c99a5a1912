"""The software path NCCL will really run over, as seven probe sources (each with its own line in
``probe``'s Sources table; docs/SWPATH.md):

=============  ===================================================================================
``driver``     the NVIDIA kernel driver (``/proc/driver/nvidia/version``: version, open or
               proprietary modules), the kernel release, the CUDA toolkit (``/usr/local/cuda``)
``nccl``       every NCCL a job may load: ``libnccl.so*`` in ``LD_LIBRARY_PATH``, ``/etc/ld.so.cache``
               and the standard directories, the ``nvidia-nccl-cu*`` wheel in site-packages, each
               with the version its ELF ``.rodata`` embeds; ``NCCL_*`` already set
``netplugin``  network plugins (``libnccl-net*.so``: aws-ofi-nccl incl. the Slingshot/CXI builds,
               Google's GPUDirect-TCPX/FasTrak and gIB) with the versions they embed, and
               ``NCCL_NET`` / ``NCCL_NET_PLUGIN``: which plugin NCCL would load
``gdr``        GPUDirect RDMA: ``nvidia_peermem`` / ``nv_peer_mem`` in ``/proc/modules`` (or sysfs),
               dma-buf (kernel >= 5.12 with the open kernel modules, R515+)
``iommu``      the IOMMU mode: ``/sys/class/iommu``, the kernel command line, the groups' types
``hypervisor`` a VM: the ``hypervisor`` CPU flag, DMI vendor/product, ``/sys/hypervisor``
``services``   fabric manager, NVLink subnet manager and IMEX: systemd unit files, enablement,
               invocation records (a running unit), pid files
=============  ===================================================================================

Each writes ``software.<item>`` of the document: ``{"status": "found" | "absent" | "unreadable",
"why": sentence, ...facts}``, and its source record says the same in one line.  Everything is read
through :class:`~gpucomm.probes.sources.host.Host` (bounded; libraries by byte range, never
loaded; nothing is run), so ``gpucomm snapshot`` records it and a replay reads the same bytes.
"""
from __future__ import annotations

import posixpath
import re
from typing import Optional

from gpucomm.probes.errors import InputError
from gpucomm.probes.formats import elf
from gpucomm.probes.formats.ldcache import parse_ldcache
from gpucomm.probes.limits import MAX_LIBRARY_CANDIDATES
from gpucomm.probes.model import new_document, source_record
from gpucomm.probes.sources.host import Host

FOUND, ABSENT, UNREADABLE = "found", "absent", "unreadable"

# Where a library is looked for besides LD_LIBRARY_PATH and ld.so.cache: the loader's default
# directories, and where the NCCL / plugin packages install (NVIDIA's debs and rpms, the tarball's
# /usr/local/nccl, the CUDA toolkit, AWS's /opt/amazon/ofi-nccl, GKE's /usr/local/nvidia, gIB).
STANDARD_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
                 "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib", "/usr/local/lib",
                 "/usr/local/nccl/lib", "/usr/local/cuda/lib64", "/opt/amazon/ofi-nccl/lib",
                 "/opt/amazon/ofi-nccl/lib64", "/opt/aws-ofi-nccl/lib", "/usr/local/nvidia/lib64",
                 "/usr/local/tcpx/lib64", "/usr/local/gib/lib64")
NCCL_PREFIX = ("libnccl.so",)
PLUGIN_PREFIX = ("libnccl-net",)
# What NCCL loads as a network plugin (src/plugin/net.cc): NCCL_NET_PLUGIN names "libnccl-net-<name>.so"
# (or a file name; "none" = no plugin), by default "libnccl-net.so".
DEFAULT_PLUGIN = "libnccl-net.so"


def _doc(host: Host, name: str, key: str, rec: dict, detail: str, status: Optional[str] = None) -> dict:
    d = new_document(host.provenance)
    d["software"] = {key: rec}
    if status is None:
        status = "partial" if rec.get("status") == UNREADABLE else "ok"
    d["sources"] = [source_record(name, status, detail)]
    return d


def _item(status: str, why: str, **facts) -> dict:
    out = {"status": status, "why": why}
    out.update(facts)
    return out


# ------------------------------------------------------------------------------------------
# driver
_NVRM = re.compile(r"NVRM version:\s*(?P<desc>.*?)\s+(?P<v>\d{2,4}\.\d{1,3}(?:\.\d{1,3})?)\b")


def driver_record(host: Host) -> dict:
    text = host.read_text("/proc/driver/nvidia/version")
    kernel = (host.read_text("/proc/sys/kernel/osrelease") or "").strip() or None
    cuda = _cuda_toolkit(host)
    if text is None:
        ver = (host.read_text("/sys/module/nvidia/version") or "").strip() or None
        if ver:
            return _item(FOUND, f"nvidia kernel module {ver} (/sys/module/nvidia/version)", version=ver, open=None,
                         kernel=kernel, **cuda)
        why = ("no NVIDIA kernel driver loaded (/proc/driver/nvidia/version absent)" if host.listdir("/proc")
               else "no /proc to read")
        return _item(ABSENT if host.listdir("/proc") else UNREADABLE, why, version=None, open=None, kernel=kernel, **cuda)
    m = _NVRM.search(text)
    if not m:
        return _item(UNREADABLE, "/proc/driver/nvidia/version holds no 'NVRM version' line", version=None, open=None,
                     kernel=kernel, **cuda)
    is_open = "open kernel module" in m.group("desc").lower()
    return _item(FOUND, f"driver {m.group('v')} ({'open' if is_open else 'proprietary'} kernel modules)",
                 version=m.group("v"), open=is_open, kernel=kernel, **cuda)


def _cuda_toolkit(host: Host) -> dict:
    """The CUDA toolkit at /usr/local/cuda (version.json, or version.txt before 11.1)."""
    text = host.read_text("/usr/local/cuda/version.json")
    if text:
        m = re.search(r'"cuda"\s*:\s*\{[^}]*?"version"\s*:\s*"(\d+\.\d+(?:\.\d+)?)"', text, re.S)
        if m:
            return {"cuda_toolkit": m.group(1)}
    text = host.read_text("/usr/local/cuda/version.txt")
    m = re.search(r"CUDA Version (\d+\.\d+(?:\.\d+)?)", text or "")
    return {"cuda_toolkit": m.group(1) if m else None}


# ------------------------------------------------------------------------------------------
# libraries on the loader path
def _env(host: Host) -> dict:
    return host.environ()


def _search_dirs(host: Host) -> list:
    """[(directory, how it is on the path)] in the loader's order: LD_LIBRARY_PATH, then the
    standard directories (ld.so.cache entries are added by path)."""
    env = _env(host)["variables"]
    out = []
    for d in (env.get("LD_LIBRARY_PATH") or "").split(":"):
        if d.startswith("/"):
            out.append((d.rstrip("/") or "/", "LD_LIBRARY_PATH"))
    for var in ("CONDA_PREFIX", "CUDA_HOME"):
        if (env.get(var) or "").startswith("/"):
            out.append((env[var].rstrip("/") + ("/lib" if var == "CONDA_PREFIX" else "/lib64"), var))
    out += [(d, "standard directory") for d in STANDARD_DIRS]
    seen, uniq = set(), []
    for d, how in out:
        if d not in seen:
            seen.add(d)
            uniq.append((d, how))
    return uniq


def _ldcache(host: Host) -> tuple[list, Optional[str]]:
    data = host.read_bytes("/etc/ld.so.cache")
    if data is None:
        return [], "no /etc/ld.so.cache"
    try:
        return parse_ldcache(data, "/etc/ld.so.cache"), None
    except InputError as e:
        return [], e.message


def _site_dirs(host: Host) -> list:
    env = _env(host)
    dirs = list(env["site_packages"])
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        root = env["variables"].get(var)
        if root and root.startswith("/"):
            for py in host.list_matching(root.rstrip("/") + "/lib", ("python3",)):
                dirs.append(f"{root.rstrip('/')}/lib/{py}/site-packages")
    return list(dict.fromkeys(dirs))


def _candidates(host: Host, prefixes: tuple, wheel_dirs: tuple = ()) -> tuple[list, list]:
    """([(path, how found)] of files named ``prefixes*`` on the loader path and in wheels, the
    notes on what could not be read).  Paths are deduplicated by what they resolve to."""
    notes = []
    found = []
    for d, how in _search_dirs(host):
        for e in host.list_matching(d, prefixes):
            found.append((f"{d}/{e}", how))
    entries, why = _ldcache(host)
    if why and why != "no /etc/ld.so.cache":
        notes.append(f"/etc/ld.so.cache: {why}")
    for e in entries:
        if e["name"].startswith(prefixes) and e["path"].startswith("/"):
            found.append((e["path"], "ld.so.cache"))
    for site in _site_dirs(host):
        for sub in wheel_dirs:
            d = f"{site}/{sub}"
            for e in host.list_matching(d, prefixes):
                found.append((f"{d}/{e}", "python wheel" + _wheel_version(host, site)))
    out, real_seen = [], {}
    for path, how in found:
        real = host.realpath(path) or path
        if real in real_seen:
            continue
        real_seen[real] = path
        out.append((path, how))
        if len(out) >= MAX_LIBRARY_CANDIDATES:
            notes.append(f"more than {MAX_LIBRARY_CANDIDATES} libraries; the rest not examined")
            break
    return out, notes


def _wheel_version(host: Host, site: str) -> str:
    dists = host.list_matching(site, ("nvidia_nccl_cu",))
    for d in dists:
        m = re.match(r"^(nvidia_nccl_cu\d+)-(\d[\w.]*)\.dist-info$", d)
        if m:
            return f" {m.group(1).replace('_', '-')} {m.group(2)}"
    return ""


def _reader(host: Host, path: str):
    return lambda off, n, record: host.read_range(path, off, n, record)


def _lib_entry(host: Host, path: str, how: str) -> dict:
    real = host.realpath(path) or path
    if host.file_size(real) is None:
        return {"path": path, "file": real, "from": how, "version": None, "status": UNREADABLE,
                "why": "cannot be read (permissions, or a dangling link)"}
    ver, why = elf.nccl_version(_reader(host, real))
    return {"path": path, "file": real, "from": how, "version": ver, "status": FOUND if ver else UNREADABLE,
            "why": None if ver else why}


def nccl_record(host: Host) -> dict:
    env = _env(host)
    nccl_env = {k: v for k, v in env["variables"].items() if k.startswith("NCCL_")}
    libs_found, notes = _candidates(host, NCCL_PREFIX, ("nvidia/nccl/lib",))
    libs = [_lib_entry(host, p, how) for p, how in libs_found]
    env_note = "" if env["known"] else "; the environment was not recorded"
    facts = {"libraries": libs, "env": nccl_env, "env_known": env["known"], "notes": notes}
    if not libs:
        return _item(ABSENT, "no libnccl.so* in LD_LIBRARY_PATH, /etc/ld.so.cache, the standard directories or a "
                     "python wheel (a static NCCL inside an application is not visible)" + env_note, **facts)
    readable = [l for l in libs if l["version"]]
    vers = ", ".join(f"{l['version']} ({l['path']}, {l['from']})" for l in readable)
    if not readable:
        return _item(UNREADABLE, f"{len(libs)} libnccl found, no version readable: {libs[0]['why']}" + env_note, **facts)
    return _item(FOUND, f"NCCL {vers}" + env_note, **facts)


# ------------------------------------------------------------------------------------------
# network plugins
def _plugin_entry(host: Host, path: str, how: str) -> dict:
    real = host.realpath(path) or path
    name = posixpath.basename(path)
    if host.file_size(real) is None:
        return {"path": path, "file": real, "name": name, "from": how, "family": None, "version": None,
                "status": UNREADABLE, "why": "cannot be read"}
    fam, ver, why = elf.plugin_banner(_reader(host, real))
    if fam is None:
        fam = _family_from_name(name)
    return {"path": path, "file": real, "name": name, "from": how, "family": fam, "version": ver,
            "status": FOUND, "why": None if ver else (why or "no version banner in .rodata")}


def _family_from_name(name: str) -> Optional[str]:
    low = name.lower()
    for key, fam in (("ofi", "aws-ofi-nccl"), ("aws", "aws-ofi-nccl"), ("tcpx", "gpudirect-tcpx"),
                     ("fastrak", "fastrak"), ("gib", "gib"), ("cxi", "aws-ofi-nccl")):
        if key in low:
            return fam
    return None


def wanted_plugin(env: dict) -> Optional[str]:
    """The file name NCCL tries first for its network plugin under ``env`` (None: "none")."""
    val = env.get("NCCL_NET_PLUGIN")
    if val is None:
        return DEFAULT_PLUGIN
    first = val.split(",")[0].strip()
    if first.lower() in ("none", ""):
        return None
    return first if first.endswith(".so") else f"libnccl-net-{first}.so"


def netplugin_record(host: Host) -> dict:
    env = _env(host)
    var = env["variables"]
    found, notes = _candidates(host, PLUGIN_PREFIX, ("nvidia/nccl/lib",))
    plugins = [_plugin_entry(host, p, how) for p, how in found]
    want = wanted_plugin(var)
    loaded = next((p for p in plugins if want and p["name"] == want), None)
    facts = {"plugins": plugins, "NCCL_NET": var.get("NCCL_NET"), "NCCL_NET_PLUGIN": var.get("NCCL_NET_PLUGIN"),
             "wants": want, "loads": loaded["path"] if loaded else None, "env_known": env["known"], "notes": notes}
    if not plugins:
        why = "no libnccl-net*.so on the loader path: NCCL uses its internal IB verbs or socket transport"
        if var.get("NCCL_NET_PLUGIN") and want:
            why += f" (NCCL_NET_PLUGIN={var['NCCL_NET_PLUGIN']} names {want}, which is not there)"
        return _item(ABSENT, why, **facts)
    desc = ", ".join(f"{p['family'] or p['name']}{' ' + p['version'] if p['version'] else ''} ({p['path']})"
                     for p in plugins)
    load = f"; NCCL loads {loaded['path']}" if loaded else \
        (f"; NCCL_NET_PLUGIN={var.get('NCCL_NET_PLUGIN')}: none loaded" if want is None
         else f"; none is named {want}: NCCL loads no plugin")
    return _item(FOUND, desc + load, **facts)


# ------------------------------------------------------------------------------------------
# GPUDirect RDMA
DMABUF_KERNEL = (5, 12)
DMABUF_DRIVER = 515
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")


def kernel_tuple(release: Optional[str]) -> Optional[tuple]:
    m = re.match(r"^(\d{1,3})\.(\d{1,3})", release or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def gdr_record(host: Host, driver: Optional[dict] = None) -> dict:
    driver = driver or driver_record(host)
    modules = host.read_text("/proc/modules")
    loaded = None
    if modules is not None:
        names = {ln.split(None, 1)[0] for ln in modules.splitlines() if ln.strip()}
        loaded = next((m for m in PEERMEM_MODULES if m in names), None)
    if loaded is None:
        for path, name in (("/sys/module/nvidia_peermem/version", "nvidia_peermem"),
                           ("/sys/kernel/mm/memory_peers/nv_mem/version", "nv_peer_mem")):
            if host.read_text(path) is not None:
                loaded = name
                break
    kern = kernel_tuple(driver.get("kernel"))
    drv = driver.get("version")
    major = int(drv.split(".")[0]) if drv and drv.split(".")[0].isdigit() else None
    if major is None:
        dmabuf, dwhy = None, "no NVIDIA driver version to judge it by"
    elif kern is None:
        dmabuf, dwhy = None, "kernel release unknown"
    else:
        ok_k, ok_d, ok_o = kern >= DMABUF_KERNEL, major >= DMABUF_DRIVER, driver.get("open") is not False
        dmabuf = ok_k and ok_d and driver.get("open") is True
        dwhy = (f"kernel {driver['kernel']} {'>=' if ok_k else '<'} 5.12, driver {drv} "
                f"{'>=' if ok_d else '<'} {DMABUF_DRIVER}, {'open' if driver.get('open') else 'proprietary' if not ok_o else 'unknown'}"
                f" kernel modules")
    facts = {"peermem": loaded, "dmabuf": dmabuf, "dmabuf_why": dwhy}
    if loaded:
        return _item(FOUND, f"{loaded} loaded; dma-buf: {dwhy}", **facts)
    if dmabuf:
        return _item(FOUND, f"no peer-memory module, but dma-buf is available ({dwhy})", **facts)
    if modules is None:
        return _item(UNREADABLE, "no /proc/modules to read (and no peer-memory module in sysfs)"
                     + (f"; dma-buf: {dwhy}" if dmabuf is not None else ""), **facts)
    return _item(ABSENT, f"no nvidia_peermem / nv_peer_mem in /proc/modules and no dma-buf ({dwhy})", **facts)


# ------------------------------------------------------------------------------------------
# IOMMU
_IOMMU_ARGS = re.compile(r"(?:^|\s)((?:intel_|amd_)?iommu(?:\.passthrough|\.strict)?=\S+)")


def iommu_record(host: Host) -> dict:
    units = host.listdir("/sys/class/iommu")
    cmdline = host.read_text("/proc/cmdline")
    args = _IOMMU_ARGS.findall(cmdline or "")
    groups = host.listdir("/sys/kernel/iommu_groups")
    types = sorted({(host.read_text(f"/sys/kernel/iommu_groups/{g}/type") or "").strip() for g in groups[:8]} - {""})
    translated = any(t.upper().startswith("DMA") for t in types)
    if types:
        mode = "translated" if translated else "passthrough" if "identity" in types else "unknown"
    elif groups or units:
        mode = "passthrough" if any(a in ("iommu=pt", "iommu.passthrough=1") for a in args) else "unknown"
    else:
        mode = "off"
    facts = {"mode": mode, "group_types": types, "units": units[:16], "cmdline": args, "groups": len(groups)}
    if cmdline is None and not units and not groups:
        return _item(UNREADABLE, "no /proc/cmdline, /sys/class/iommu or /sys/kernel/iommu_groups to read", **facts)
    if mode == "off":
        return _item(ABSENT, "no IOMMU units or groups: IOMMU off (or not exposed)"
                     + (f"; kernel command line {' '.join(args)}" if args else ""), **facts)
    return _item(FOUND, f"IOMMU {mode}" + (f" (group type {'/'.join(types)})" if types else "")
                 + (f"; kernel command line {' '.join(args)}" if args else "")
                 + (f"; units {', '.join(units[:4])}" if units else ""), **facts)


# ------------------------------------------------------------------------------------------
# hypervisor
# DMI sys_vendor / product_name -> the platform (what the cloud or hypervisor is)
_PLATFORMS = (("amazon ec2", "AWS (Nitro)"), ("google", "Google Compute Engine"), ("microsoft", "Microsoft Hyper-V / Azure"),
              ("qemu", "QEMU/KVM"), ("kvm", "KVM"), ("vmware", "VMware"), ("xen", "Xen"), ("oracle", "Oracle Cloud"),
              ("innotek", "VirtualBox"), ("openstack", "OpenStack (KVM)"), ("alibaba", "Alibaba Cloud"))


def hypervisor_record(host: Host) -> dict:
    cpuinfo = host.read_text("/proc/cpuinfo")
    flag = None
    if cpuinfo is not None:
        m = re.search(r"^(?:flags|Features)\s*:(.*)$", cpuinfo, re.M)
        flag = bool(m) and "hypervisor" in m.group(1).split()
    vendor = (host.read_text("/sys/class/dmi/id/sys_vendor") or "").strip() or None
    product = (host.read_text("/sys/class/dmi/id/product_name") or "").strip() or None
    xen = (host.read_text("/sys/hypervisor/type") or "").strip() or None
    text = f"{vendor or ''} {product or ''} {xen or ''}".lower()
    platform = next((name for key, name in _PLATFORMS if key in text), None)
    is_vm = bool(flag) or bool(xen) or (platform is not None and "virtual" in text)
    facts = {"vm": is_vm if (flag is not None or vendor or xen) else None, "cpu_flag": flag, "sys_vendor": vendor,
             "product": product, "xen": xen, "platform": platform}
    if cpuinfo is None and vendor is None and xen is None:
        return _item(UNREADABLE, "no /proc/cpuinfo or DMI to read", **facts)
    what = ", ".join(x for x in (vendor, product) if x) or "no DMI"
    if is_vm:
        return _item(FOUND, f"a virtual machine ({platform or 'hypervisor'}: {what}; "
                     f"{'hypervisor CPU flag' if flag else 'Xen' if xen else 'DMI'})", **facts)
    return _item(ABSENT, f"bare metal as far as the CPU flags say ({what})", **facts)


# ------------------------------------------------------------------------------------------
# fabric manager, NVLink subnet manager, IMEX
SERVICES = {
    "fabricmanager": {"unit": "nvidia-fabricmanager.service", "pidfile": "/var/run/nvidia-fabricmanager/nv-fabricmanager.pid",
                      "comm": "nv-fabricmanager", "what": "fabric manager (NVSwitch systems)"},
    "nvlsm": {"unit": "nvidia-nvlsm.service", "pidfile": None, "comm": "nvlsm",
              "what": "NVLink subnet manager (NVLink 5 switch trays)"},
    "imex": {"unit": "nvidia-imex.service", "pidfile": None, "comm": "nvidia-imex",
             "what": "IMEX (multi-node NVLink memory export)"},
}
UNIT_DIRS = ("/etc/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system")


def services_record(host: Host) -> dict:
    running_units = set(host.list_matching("/run/systemd/units", ("invocation:nvidia",)))
    systemd = bool(host.listdir("/run/systemd")) or bool(running_units)
    out = {}
    for key, s in SERVICES.items():
        unit = s["unit"]
        # the unit file is read (not only listed) so that a snapshot carries it
        installed = any(unit in host.list_matching(d, (unit,)) and host.read_text(f"{d}/{unit}") is not None
                        for d in UNIT_DIRS)
        wants = "/etc/systemd/system/multi-user.target.wants"
        enabled = unit in host.list_matching(wants, (unit,)) and host.realpath(f"{wants}/{unit}") is not None
        running: Optional[bool] = (f"invocation:{unit}" in running_units) if systemd else None
        evidence = "systemd invocation record" if running else None
        if s["pidfile"]:
            pid = (host.read_text(s["pidfile"]) or "").strip()
            if pid.isdigit():
                comm = (host.read_text(f"/proc/{pid}/comm") or "").strip()
                if comm:
                    running, evidence = comm.startswith(s["comm"][:15]), f"pid file {s['pidfile']} -> {comm}"
        out[key] = {"installed": installed, "enabled": enabled, "running": running, "evidence": evidence}
    config = host.read_text("/etc/nvidia-imex/nodes_config.cfg")
    out["imex"]["nodes"] = len([ln for ln in (config or "").splitlines() if ln.strip() and not ln.lstrip().startswith("#")]) \
        if config is not None else None
    seen = [k for k, v in out.items() if v["installed"] or v["running"]]
    facts = {"services": out, "systemd": systemd}
    if not seen:
        return _item(ABSENT, "no fabric manager, NVLink subnet manager or IMEX unit installed or running", **facts)
    parts = []
    for k in seen:
        v = out[k]
        state = "running" if v["running"] else "not running" if v["running"] is False else "state unknown"
        parts.append(f"{k} {state}" + (" (enabled)" if v["enabled"] else ""))
    return _item(FOUND, "; ".join(parts), **facts)


# ------------------------------------------------------------------------------------------
# The sources
class _Source:
    priority = 40

    def __init__(self, name: str, key: str, fn):
        self.name, self.key, self.fn = name, key, fn

    def available(self, host: Host):
        """A snapshot, fixture host or --sysfs-root tree whose meta.json does not say ``software_recorded``
        holds none of these files because nothing recorded them: not recorded, rather than absent."""
        if host.confined:
            from gpucomm.probes.sources.numa import read_meta

            meta = read_meta(host)
            if not (meta or {}).get("software_recorded"):
                return "not recorded: the snapshot or fixture was made without the software-path sources"
        return True

    def collect(self, host: Host) -> dict:
        rec = self.fn(host)
        return _doc(host, self.name, self.key, rec, f"{rec['status']}: {rec['why']}")


DRIVER = _Source("driver", "driver", driver_record)
NCCL = _Source("nccl", "nccl", nccl_record)
NETPLUGIN = _Source("netplugin", "net_plugins", netplugin_record)
GDR = _Source("gdr", "gdr", gdr_record)
IOMMU = _Source("iommu", "iommu", iommu_record)
HYPERVISOR = _Source("hypervisor", "hypervisor", hypervisor_record)
SERVICES_SOURCE = _Source("services", "services", services_record)
SOURCES = (DRIVER, NCCL, NETPLUGIN, GDR, IOMMU, HYPERVISOR, SERVICES_SOURCE)

__all__ = ["SOURCES", "driver_record", "nccl_record", "netplugin_record", "gdr_record", "iommu_record",
           "hypervisor_record", "services_record", "wanted_plugin", "kernel_tuple", "FOUND", "ABSENT", "UNREADABLE"]
