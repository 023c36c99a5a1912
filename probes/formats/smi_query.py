"""``nvidia-smi -q`` (``--query``) captures: each GPU's identity and its multi-node NVLink fabric.

nvidia-smi prints one block per GPU, keys padded to a column and nested by four spaces::

    Driver Version                            : 570.133.20
    Attached GPUs                             : 4
    GPU 00000008:01:00.0
        Product Name                          : NVIDIA GB200
        GPU UUID                              : GPU-...
        Platform Info
            Chassis Serial Number             : 1821324190001
            Slot Number                       : 10
            Tray Index                        : 5
            Host ID                           : 1
            Module Id                         : 2
        PCI
            Bus Id                            : 00000008:01:00.0
        Fabric
            State                             : Completed
            Status                            : Success
            CliqueId                          : 2
            ClusterUUID                       : dc6e40c4-d722-4357-9ba6-5291dd461278
            Health
                Summary                       : Unhealthy
                Bandwidth                     : Full
                Route Recovery in progress    : False
                Route Unhealthy               : False
                Access Timeout Recovery       : False
                Incorrect Configuration       : None

What is read: Driver/CUDA version; per GPU the product name, UUID, bus id, ``Platform Info`` and
``Fabric`` (state, status, clique id, cluster UUID, the ``Health`` rows encoded back into NVML's health
mask with :func:`gpucomm.probes.facts.encode_fabric_health`, and the summary).  Everything else is
skipped.  GPUs are numbered in the order printed (NVML's order).  Excerpts work too: a ``grep -C3
Fabric`` cut (capture 018) has no ``GPU <bus id>`` header, so its blocks (between grep's ``--``)
are read as GPU0, GPU1, ... with a warning; ``N/A`` is unknown.  One pass over the lines (linear).

:func:`parse_smi_query` returns a topology document (provenance ``nvidia-smi``) holding those GPUs;
:func:`looks_like` is the content test :mod:`gpucomm.probes.load` uses.
"""
from __future__ import annotations

import re
from typing import Optional

from gpucomm.probes import facts
from gpucomm.probes.errors import InputError
from gpucomm.probes.limits import MAX_HOST_GPUS
from gpucomm.probes.model import fabric_record, finalize, gpu_record, new_document, normalize_bus_id, source_record, warn

EXPECTED = "`nvidia-smi -q` output: 'GPU <bus id>' blocks of 'Key : value' lines (a Fabric section for the NVLink fabric)"

_KV = re.compile(r"^(?P<ind>[ \t]*)(?P<key>[^:\s][^:]{0,80}?)\s*:\s?(?P<val>.{0,400})$")
_HEAD = re.compile(r"^(?P<ind>[ \t]*)(?P<key>[A-Za-z][\w ()/.\-]{0,80}?)\s*$")
_GPU = re.compile(r"^GPU\s+(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_NA = {"n/a", "", "not available", "unknown"}

# "Health" rows -> (facts.FABRIC_HEALTH_FIELDS name, {printed value: meaning})
_HEALTH_ROWS = {
    "bandwidth": ("degraded_bw", {"full": "full", "degraded": "degraded"}),
    "route recovery in progress": ("route_recovery", {"false": "none", "true": "in_progress"}),
    "route unhealthy": ("route_unhealthy", {"false": "healthy", "true": "unhealthy"}),
    "access timeout recovery": ("access_timeout_recovery", {"false": "none", "true": "in_progress"}),
    "incorrect configuration": ("incorrect_configuration", None),   # printed as the meaning itself
    "partition assigned": ("partition_assigned", {"true": "assigned", "false": "not_assigned"}),
}
_PLATFORM_ROWS = {"chassis serial number": "chassis_serial", "slot number": "slot", "tray index": "tray_index",
                  "host id": "host_id", "module id": "module_id"}


def _indent(s: str) -> int:
    """Columns of leading white space (a tab counts 4, as nvidia-smi's levels are 4 spaces)."""
    e = s.expandtabs(4)
    return len(e) - len(e.lstrip(" "))


def _value(v: str) -> Optional[str]:
    v = v.strip()
    return None if v.lower() in _NA else v


class _Gpu:
    def __init__(self, bus: Optional[str], line: int) -> None:
        self.bus, self.line = bus, line
        self.name = self.uuid = None
        self.fabric: dict = {}
        self.health: dict = {}
        self.platform: dict = {}


def parse_smi_query(text: str, path: Optional[str] = None) -> dict:
    """An ``nvidia-smi -q`` capture (whole or cut) -> topology document of its GPUs and their fabric.

    Raises :class:`InputError` for text that is not such output (no ``GPU <bus id>`` block and no
    ``Fabric`` section)."""
    if not isinstance(text, str):
        raise InputError("not text", path, expected=EXPECTED)
    doc = new_document(provenance="nvidia-smi")
    gpus: list = []
    cur: Optional[_Gpu] = None
    stack: list = []          # [(indent, section name)] above the current line, inside a GPU block
    headerless = 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = _ANSI.sub("", raw).replace("\u00a0", " ").rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.strip() == "--":       # grep's group separator: the next block is another GPU
            cur, stack = None, []
            continue
        gm = _GPU.match(line.strip()) if _indent(line) == 0 else None
        if gm:
            if len(gpus) >= MAX_HOST_GPUS:
                raise InputError(f"more than {MAX_HOST_GPUS} GPU blocks", path, n, expected="at most one block per GPU")
            cur = _Gpu(normalize_bus_id(gm.group("bus")), n)
            gpus.append(cur)
            stack = []
            continue
        ind = _indent(line)
        kv = _KV.match(line)
        if kv and kv.group("key").strip():
            key, val = kv.group("key").strip().lower(), _value(kv.group("val"))
            while stack and stack[-1][0] >= ind:
                stack.pop()
            if ind == 0 and cur is None:
                if key == "driver version":
                    doc["host"]["driver_version"] = val
                elif key == "cuda version":
                    doc["host"]["cuda_version"] = val
                continue
            if cur is None:
                if not any(s == "fabric" for _, s in stack):
                    continue
                cur = _Gpu(None, n)   # a cut without its GPU header (grep -C)
                gpus.append(cur)
                headerless += 1
            _row(cur, [s for _, s in stack], key, val)
            continue
        hm = _HEAD.match(line)
        if hm:
            while stack and stack[-1][0] >= ind:
                stack.pop()
            stack.append((ind, hm.group("key").strip().lower()))
            if cur is None and stack[-1][1] == "fabric" and ind > 0:
                cur = _Gpu(None, n)
                gpus.append(cur)
                headerless += 1
            continue
        if cur is not None:
            warn(doc, f"{path or 'nvidia-smi -q'}:{n}: unrecognised line {line.strip()[:40]!r}; ignored")
    if not gpus:
        raise InputError("no 'GPU <bus id>' block and no Fabric section", path, expected=EXPECTED)
    if headerless:
        first, last = len(gpus) - headerless, len(gpus) - 1
        warn(doc, f"{headerless} block(s) without their 'GPU <bus id>' line (a cut such as `grep -C`): read as "
                  f"GPU{first}{f'..GPU{last}' if last > first else ''} in the order printed; bus ids unknown")
    with_fabric = 0
    for i, g in enumerate(gpus):
        rec = gpu_record(i, name=g.name, uuid=g.uuid, pci_bus_id=g.bus)
        arch, sm = facts.arch_from_name(g.name)
        if arch:
            rec["arch"] = arch
        fab = _fabric(g, doc, path)
        if fab is not None:
            rec["fabric"] = fab
            with_fabric += 1
        if g.platform:
            rec["platform"] = g.platform
        doc["gpus"].append(rec)
    detail = f"nvidia-smi -q capture: {len(gpus)} GPU(s), fabric info for {with_fabric}"
    doc["sources"].append(source_record("nvidia-smi", "partial" if headerless else "ok", detail))
    warn(doc, "nvidia-smi -q: GPUs and their NVLink fabric only (no PCI tree, NICs or matrix)")
    return finalize(doc)


def _row(g: _Gpu, path: list, key: str, val: Optional[str]) -> None:
    """One ``key : value`` row of a GPU block; ``path``: the sections above it (lower case)."""
    where = path[-1] if path else ""
    if not path:
        if key == "product name":
            g.name = val
        elif key == "gpu uuid":
            g.uuid = val
    elif where == "pci" and key == "bus id":
        g.bus = g.bus or normalize_bus_id(val or "")
    elif where == "platform info" and key in _PLATFORM_ROWS:
        name = _PLATFORM_ROWS[key]
        if name == "chassis_serial":
            if val:
                g.platform[name] = val[:64]
        elif val is not None and re.fullmatch(r"\d{1,3}", val) and int(val) <= 255:
            g.platform[name] = int(val)
    elif where == "fabric":
        g.fabric[key] = val
    elif where == "health" and "fabric" in path:
        g.health[key] = val


def _fabric(g: _Gpu, doc: dict, path: Optional[str]) -> Optional[dict]:
    f = g.fabric
    if not f and not g.health:
        return None
    raw: dict = {}
    state = (f.get("state") or "").lower()
    if state:
        raw["state"] = state.replace(" ", "_")
        if raw["state"] not in facts.FABRIC_STATES:
            warn(doc, f"{path or 'nvidia-smi -q'}: fabric state {f.get('state')!r} is not one NVML defines; unknown")
    status = f.get("status")
    if status:
        raw["status"] = "NVML_SUCCESS" if status.lower() == "success" else status
    clique = f.get("cliqueid") or f.get("clique id")
    if clique is not None:
        if re.fullmatch(r"\d{1,10}", clique) and int(clique) <= 0xFFFFFFFF:
            raw["clique_id"] = int(clique)
        else:
            warn(doc, f"{path or 'nvidia-smi -q'}: CliqueId {clique[:20]!r} is not a number; unknown")
    cu = f.get("clusteruuid") or f.get("cluster uuid")
    if cu:
        raw["cluster_uuid"] = cu
        if facts.normalize_cluster_uuid(cu) is None and cu.strip("0-") != "":
            warn(doc, f"{path or 'nvidia-smi -q'}: ClusterUUID {cu[:40]!r} is not a UUID; unknown")
    fields: dict = {}
    for key, val in g.health.items():
        if key == "summary":
            if val:
                raw["health_summary"] = val.lower().replace(" ", "_")
            continue
        row = _HEALTH_ROWS.get(key)
        if row is None or val is None:
            continue
        name, meanings = row
        meaning = (meanings or {}).get(val.lower()) if meanings is not None else val.lower().replace(" ", "_")
        if meaning is None:
            warn(doc, f"{path or 'nvidia-smi -q'}: fabric health {key!r} = {val[:30]!r} not understood; unknown")
            continue
        fields[name] = meaning
    if fields:
        raw["health_mask"] = facts.encode_fabric_health(fields)
    return fabric_record(raw)


def looks_like(text: str) -> bool:
    """True when ``text`` looks like ``nvidia-smi -q`` output (or a cut of its Fabric section)."""
    if not isinstance(text, str):
        return False
    head = text[:65536]
    if re.search(r"(?m)^=+NVSMI LOG=+[ \t]*$", head):
        return True
    # [ \t], not \s, after ^: \s would run over blank lines from every line start (quadratic)
    return bool(re.search(r"(?m)^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7][ \t]*$", head)
                and re.search(r"(?m)^[ \t]+Product Name[ \t]+:", head)) or \
        bool(re.search(r"(?m)^[ \t]+Fabric[ \t]*$", head) and re.search(r"(?m)^[ \t]+(?:ClusterUUID|CliqueId)[ \t]+:", head))


__all__ = ["parse_smi_query", "looks_like", "EXPECTED"]
