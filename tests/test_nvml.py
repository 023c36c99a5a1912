"""NVML choke point: recording through a fake ``pynvml`` (errors on chosen calls), turning records
into topology, the live library being absent on this machine, and fuzzed records."""
from __future__ import annotations

import ctypes
import json
import sys
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucomm.probes.sources import nvml
from gpucomm.probes.errors import InputError
from gpucomm.probes.sources.host import Host
from gpucomm.probes.merge import merge
from gpucomm.probes.sources.probe import probe_host
from support import GPU_3D, NVSWITCH, SysfsTree, validate



# --------------------------------------------------------------------------------------------
# A fake pynvml: the same function names, handles are dicts, NVMLError carries .value
class FakeNVMLError(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value


class _Pci:
    def __init__(self, bus):
        self.busId = bus.encode()


class _Mem:
    def __init__(self, total):
        self.total = total


class _FV:
    def __init__(self, ret, val):
        self.nvmlReturn = ret
        self.value = types.SimpleNamespace(uiVal=val)


class FabricInfo(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("clusterUuid", ctypes.c_uint8 * 16), ("status", ctypes.c_uint),
                ("cliqueId", ctypes.c_uint32), ("state", ctypes.c_uint8)]


def gpu(bus, name="NVIDIA H100 80GB HBM3", cc=(9, 0), links=(), numa=0, aff=(0xF,), c2c=None, fabric=None, p2p=None):
    """links: [(active, remote_bus, remote_type_code)]"""
    return {"bus": bus, "name": name, "cc": cc, "links": list(links), "numa": numa, "aff": list(aff), "c2c": c2c,
            "fabric": fabric, "p2p": p2p or {}}


def fake_nvml(devices, fail=None, init_error=None):
    fail = fail or {}
    nv = types.ModuleType("pynvml")
    nv.NVMLError = FakeNVMLError
    for name, code in (("NOT_SUPPORTED", 3), ("INVALID_ARGUMENT", 2), ("LIBRARY_NOT_FOUND", 12),
                       ("DRIVER_NOT_LOADED", 9), ("GPU_IS_LOST", 15), ("NO_PERMISSION", 4), ("UNKNOWN", 999)):
        setattr(nv, f"NVML_ERROR_{name}", code)
    nv.NVML_NVLINK_MAX_LINKS = 18
    nv.c_nvmlGpuFabricInfoV_t = FabricInfo
    calls = []

    def api(fn):
        def wrapper(*args):
            calls.append(fn.__name__)
            f = fail.get(fn.__name__)
            if f is not None:
                raise FakeNVMLError(f) if isinstance(f, int) else f
            return fn(*args)
        wrapper.__name__ = fn.__name__
        setattr(nv, fn.__name__, wrapper)
        return wrapper

    @api
    def nvmlInit():
        if init_error is not None:
            raise FakeNVMLError(init_error)

    @api
    def nvmlShutdown():
        return None

    @api
    def nvmlSystemGetDriverVersion():
        return "550.90.07"

    @api
    def nvmlSystemGetCudaDriverVersion_v2():
        return 12040

    @api
    def nvmlSystemGetNVMLVersion():
        return "12.550.90.07"

    @api
    def nvmlDeviceGetCount():
        return len(devices)

    @api
    def nvmlDeviceGetHandleByIndex(i):
        return devices[i]

    @api
    def nvmlDeviceGetIndex(h):
        return devices.index(h)

    @api
    def nvmlDeviceGetUUID(h):
        return f"GPU-{devices.index(h):08d}"

    @api
    def nvmlDeviceGetName(h):
        return h["name"].encode()

    @api
    def nvmlDeviceGetPciInfo_v3(h):
        return _Pci(h["bus"])

    @api
    def nvmlDeviceGetMemoryInfo(h):
        return _Mem(85520809984)

    @api
    def nvmlDeviceGetCudaComputeCapability(h):
        return h["cc"]

    @api
    def nvmlDeviceGetNumaNodeId(h):
        return h["numa"]

    @api
    def nvmlDeviceGetCpuAffinity(h, n):
        return (ctypes.c_ulonglong * n)(*h["aff"][:n])

    @api
    def nvmlDeviceGetCurrPcieLinkGeneration(h):
        return 5

    @api
    def nvmlDeviceGetCurrPcieLinkWidth(h):
        return 16

    @api
    def nvmlDeviceGetMaxPcieLinkGeneration(h):
        return 5

    @api
    def nvmlDeviceGetMaxPcieLinkWidth(h):
        return 16

    @api
    def nvmlDeviceGetMigMode(h):
        return [0, 0]

    @api
    def nvmlDeviceGetNvLinkState(h, link):
        if link >= len(h["links"]):
            raise FakeNVMLError(2 if h["links"] else 3)
        return 1 if h["links"][link][0] else 0

    @api
    def nvmlDeviceGetNvLinkVersion(h, link):
        return 4

    @api
    def nvmlDeviceGetNvLinkCapability(h, link, cap):
        return 1

    @api
    def nvmlDeviceGetNvLinkRemotePciInfo_v2(h, link):
        return _Pci(h["links"][link][1])

    @api
    def nvmlDeviceGetNvLinkRemoteDeviceType(h, link):
        return h["links"][link][2]

    @api
    def nvmlDeviceGetFieldValues(h, fields):
        c2c = h["c2c"]
        if c2c is None:
            raise FakeNVMLError(3)
        out = []
        for f in fields:
            fid = f[0] if isinstance(f, tuple) else f
            out.append(_FV(0, {170: c2c[0], 171: 1, 172: c2c[1]}[fid]))
        return out

    @api
    def nvmlDeviceGetP2PStatus(a, b, idx):
        return a["p2p"].get(b["bus"], 0)

    @api
    def nvmlDeviceGetGpuFabricInfoV(h, ref):
        info = ref._obj
        fab = h["fabric"]
        if fab is None:
            info.state = 0
            return 0
        info.state, info.cliqueId = 3, fab
        for i in range(16):
            info.clusterUuid[i] = i
        return 0

    nv.calls = calls
    return nv


def hgx_h100(down=None):
    """8 H100s, each with 18 NVLinks to 4 NVSwitches (5/5/4/4 links); ``down`` = (gpu, link) inactive."""
    switches = ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]
    plan = [0] * 5 + [1] * 5 + [2] * 4 + [3] * 4
    buses = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0", "0000:9a:00.0", "0000:ab:00.0",
             "0000:ba:00.0", "0000:db:00.0"]
    devs = []
    for gi, b in enumerate(buses):
        links = [(not (down and down == (gi, l)), switches[s], 2) for l, s in enumerate(plan)]
        devs.append(gpu(b, links=links, numa=0 if gi < 4 else 1, aff=(0xF,) if gi < 4 else (0xF0,)))
    return devs


# --------------------------------------------------------------------------------------------
def test_record_hgx_and_topology():
    rec = nvml.record_nvml(fake_nvml(hgx_h100()))
    json.dumps(rec)  # JSON-serialisable as recorded
    assert rec["schema"] == "gpucomm.nvml/v1" and rec["driver_version"] == "550.90.07" and rec["cuda_version"] == "12.4"
    d0 = rec["devices"][0]
    assert d0["pci_bus_id"] == "0000:18:00.0" and d0["compute_capability"] == [9, 0] and len(d0["nvlinks"]) == 18
    assert d0["cpu_affinity"] == "0-3" and d0["pcie"] == {"gen": 5, "width": 16, "max_gen": 5, "max_width": 16}
    assert d0["p2p"]["0000:2a:00.0"] == {"read": "OK", "write": "OK"}
    part = nvml.nvml_to_partial(rec)
    assert len(part["gpus"]) == 8 and part["warnings"] == []
    g = part["gpus"][0]
    assert (g["arch"], g["compute_capability"], g["name"]) == ("hopper", "9.0", "NVIDIA H100 80GB HBM3")
    assert g["nvlink"][0]["state"] == "active" and g["nvlink"][0]["bw_GBps"] == 20.6
    assert g["p2p"]["0000:ab:00.0"] == "OK"
    sw = sorted(s["id"] for s in part["switches"])
    assert sw == ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]
    counts = sorted(l["count"] for l in part["links"] if l["a"] == "0000:18:00.0")
    assert counts == [4, 4, 5, 5]
    doc = merge([part], "live")
    validate(doc)
    # NVML alone has no PCI tree and no nvidia-smi matrix: no matrix, and the document says why
    assert doc["matrix"] == {} and any("matrix not computed" in w for w in doc["warnings"])


def test_nvlink_down_gives_nv17_in_matrix(tmp_path):
    t = SysfsTree(tmp_path)
    t.numa(0, "0-3")
    t.numa(1, "4-7")
    for i, b in enumerate(["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                           "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]):
        hb = t.host_bridge(f"pci0000:{b[5:7]}")
        t.device(t.bridge(hb, f"0000:{b[5:7]}:01.0", numa=i // 4), b, GPU_3D, numa=i // 4)
    for sw in ("0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"):
        t.device(t.host_bridge(f"pci0000:{sw[5:7]}"), sw, NVSWITCH, numa=0)
    host = Host(root=tmp_path, nvml=nvml.LiveNvml(fake_nvml(hgx_h100(down=(3, 0)))))
    doc = probe_host(host)
    validate(doc)
    m = doc["matrix"]
    assert m["GPU0"]["GPU1"] == "NV18" and m["GPU0"]["GPU3"] == "NV17" and m["GPU3"]["GPU7"] == "NV17"
    nvs = [s for s in doc["switches"] if s["kind"] == "nvswitch"]
    assert len(nvs) == 4 and all(s["parent"] for s in nvs)  # NVML's ids unify with sysfs's PCI NVSwitches
    assert next(s for s in doc["sources"] if s["name"] == "nvml")["status"] == "ok"
    assert doc["host"]["driver_version"] == "550.90.07"


def test_direct_gpu_links_counted_once():
    a, b = "0000:01:00.0", "0000:02:00.0"
    devs = [gpu(a, name="Tesla V100-SXM2-32GB", cc=(7, 0), links=[(True, b, 0)] * 2),
            gpu(b, name="Tesla V100-SXM2-32GB", cc=(7, 0), links=[(True, a, 0)] * 2)]
    part = nvml.nvml_to_partial(nvml.record_nvml(fake_nvml(devs)))
    nvl = [l for l in part["links"] if l["kind"] == "nvlink"]
    assert len(nvl) == 1 and nvl[0]["count"] == 2 and nvl[0]["bw_GBps"] == 40.0
    assert (nvl[0]["a"], nvl[0]["b"]) == (a, b) and part["gpus"][0]["arch"] == "volta"


def test_sentinel_and_unknown_remote(tmp_path):
    t = SysfsTree(tmp_path)
    t.numa(0, "0-1")
    t.device(t.host_bridge("pci0000:c0"), "0000:c0:00.0", NVSWITCH)
    devs = [gpu("0000:18:00.0", links=[(True, "fffffff:ff:ff.0", 0xFF)] * 3 + [(True, "0000:c0:00.0", 0xFF)] * 2)]
    part = nvml.nvml_to_partial(nvml.record_nvml(fake_nvml(devs)), Host(root=tmp_path))
    links = {l["b"]: l["count"] for l in part["links"]}
    assert links == {"NVS": 3, "0000:c0:00.0": 2}
    assert {s["id"]: s["pci_bus_id"] for s in part["switches"]} == {"NVS": None, "0000:c0:00.0": "0000:c0:00.0"}


def test_c2c_fabric_and_p2p_status():
    devs = [gpu("0009:01:00.0", name="NVIDIA GH200 480GB", numa=1, c2c=(10, 45000), fabric=7,
                p2p={"0019:01:00.0": 4}),
            gpu("0019:01:00.0", name="NVIDIA GH200 480GB", numa=3, c2c=(10, 45000))]
    rec = nvml.record_nvml(fake_nvml(devs))
    assert rec["devices"][0]["c2c"] == {"count": 10, "bw_MBps": 45000}
    assert rec["devices"][0]["fabric"]["clique_id"] == 7 and rec["devices"][0]["fabric"]["state"] == "completed"
    assert rec["devices"][1]["fabric"] is None
    part = nvml.nvml_to_partial(rec)
    c2c = [l for l in part["links"] if l["kind"] == "c2c"]
    assert {(l["a"], l["b"], l["bw_GBps"]) for l in c2c} == {("0009:01:00.0", "CPU1", 450.0), ("0019:01:00.0", "CPU3", 450.0)}
    assert part["gpus"][0]["p2p"] == {"0019:01:00.0": "DISABLED_BY_REGKEY"}
    assert part["gpus"][0]["fabric"]["clique_id"] == 7


def test_errors_become_missing_values_and_warnings():
    devs = [gpu("0000:18:00.0", name="NVIDIA L40S", cc=(8, 9), links=[])]
    nv = fake_nvml(devs, fail={"nvmlDeviceGetUUID": 15, "nvmlDeviceGetMemoryInfo": RuntimeError("ctypes exploded"),
                               "nvmlDeviceGetCurrPcieLinkWidth": 999, "nvmlSystemGetDriverVersion": 4})
    rec = nvml.record_nvml(nv)
    d = rec["devices"][0]
    assert d["uuid"] is None and d["memory_bytes"] is None and d["pcie"]["width"] is None
    assert d["errors"]["nvmlDeviceGetUUID"] == "NVML_ERROR_GPU_IS_LOST"
    assert d["errors"]["nvmlDeviceGetMemoryInfo"] == "RuntimeError: ctypes exploded"
    assert d["errors"]["nvmlDeviceGetNvLinkState"] == "NVML_ERROR_NOT_SUPPORTED"  # PCIe card: recorded...
    assert "nvmlShutdown" in nv.calls
    part = nvml.nvml_to_partial(rec)
    w = "\n".join(part["warnings"])
    assert "GPU0: nvmlDeviceGetUUID failed: NVML_ERROR_GPU_IS_LOST" in w
    assert "nvmlSystemGetDriverVersion failed: NVML_ERROR_NO_PERMISSION" in w
    assert "NvLinkState" not in w  # ...but "not supported" on an optional feature is no warning
    assert part["sources"][0]["status"] == "partial" and part["gpus"][0]["arch"] == "ada"


def test_handle_failure_keeps_other_devices():
    devs = [gpu("0000:18:00.0"), gpu("0000:2a:00.0")]
    nv = fake_nvml(devs)
    orig = nv.nvmlDeviceGetHandleByIndex

    def flaky(i):
        if i == 1:
            raise FakeNVMLError(15)
        return orig(i)
    nv.nvmlDeviceGetHandleByIndex = flaky
    rec = nvml.record_nvml(nv)
    assert [d["index"] for d in rec["devices"]] == [0, 1]
    assert rec["devices"][1]["errors"] == {"nvmlDeviceGetHandleByIndex": "NVML_ERROR_GPU_IS_LOST"}
    part = nvml.nvml_to_partial(rec)
    assert len(part["gpus"]) == 2 and part["gpus"][1]["pci_bus_id"] is None
    validate(merge([part]))


@pytest.mark.parametrize("code,needle", [(12, "libnvidia-ml.so.1"), (9, "driver not loaded"), (4, "permission"),
                                         (999, "nvmlInit failed: NVML_ERROR_UNKNOWN")])
def test_init_failure_reasons(code, needle):
    h = nvml.LiveNvml(fake_nvml([], init_error=code))
    reason = h.available()
    assert isinstance(reason, str) and needle in reason


def test_binding_import_failure(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    reason = nvml.LiveNvml().available()
    assert isinstance(reason, str) and "cannot be imported" in reason


def test_live_machine_without_driver_says_why():
    """This CI machine has the binding but no libnvidia-ml: the source must say so, not crash."""
    h = Host()
    src = nvml.SOURCE.available(h)
    if src is True:  # pragma: no cover - only on a machine with a driver
        pytest.skip("NVML works here")
    assert "NVML" in src or "nvidia-ml-py" in src


def test_sysfs_root_never_uses_live_nvml(tmp_path):
    assert "not the tree under" in nvml.SOURCE.available(Host(root=tmp_path))


def test_recorded_nvml_broken_json_is_an_error_source(tmp_path):
    t = SysfsTree(tmp_path)
    t.numa(0, "0-1")
    bad = tmp_path / "nvml.json"
    bad.write_text('{"schema": "gpucomm.nvml/v1", "devices": [\n  {"index": 0,,}]}')
    with pytest.raises(InputError) as e:
        nvml.RecordedNvml(bad).record()
    assert "nvml.json:2" in str(e.value)
    doc = probe_host(Host(root=tmp_path, nvml=nvml.RecordedNvml(bad)))
    st_ = next(s for s in doc["sources"] if s["name"] == "nvml")
    assert st_["status"] == "error" and "invalid JSON" in st_["detail"]
    (tmp_path / "other.json").write_text('{"schema": "something/else"}')
    assert "expected 'gpucomm.nvml/v1'" in str(pytest.raises(InputError, nvml.RecordedNvml(tmp_path / "other.json").record).value)


def test_recorded_init_failure_is_unavailable(tmp_path):
    f = tmp_path / "nvml.json"
    f.write_text(json.dumps({"schema": "gpucomm.nvml/v1", "errors": {"nvmlInit": "NVML_ERROR_DRIVER_NOT_LOADED"},
                             "devices": []}))
    assert nvml.RecordedNvml(f).available() == "NVIDIA kernel driver not loaded (recorded)"


def test_nvml_index_overrides_bus_order_and_missing_gpu_warns(tmp_path):
    t = SysfsTree(tmp_path)
    t.numa(0, "0-3")
    hb = t.host_bridge()
    for b in ("0000:18:00.0", "0000:19:00.0", "0000:1a:00.0"):
        t.device(t.bridge(hb, "0000:17:0" + b[6] + ".0"), b, GPU_3D)
    # NVML numbers 0000:19 first and does not list 0000:1a at all
    devs = [gpu("0000:19:00.0"), gpu("0000:18:00.0")]
    doc = probe_host(Host(root=tmp_path, nvml=nvml.LiveNvml(fake_nvml(devs))))
    validate(doc)
    by_bus = {g["pci_bus_id"]: g["index"] for g in doc["gpus"]}
    assert by_bus == {"0000:19:00.0": 0, "0000:18:00.0": 1, "0000:1a:00.0": 2}
    assert any("0000:1a:00.0 is on the PCI bus but NVML does not list it" in w for w in doc["warnings"])
    g0 = next(g for g in doc["gpus"] if g["index"] == 0)
    assert g0["uuid"] == "GPU-00000000" and g0["parent"] == "pci0000:17"  # NVML facts + sysfs placement


# --------------------------------------------------------------------------------------------
# fuzz: nvml_to_partial on garbage never raises; the merged document always validates
_json = st.recursive(st.none() | st.booleans() | st.integers(-5, 1 << 40) | st.text(max_size=12),
                     lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                     max_leaves=12)
_link = st.fixed_dictionaries({"link": _json | st.integers(0, 20), "active": _json | st.booleans(),
                               "remote_bus_id": _json | st.sampled_from(["0000:18:00.0", "fffffff:ff:ff.0", "junk"]),
                               "remote_device_type": _json | st.sampled_from(["gpu", "switch", "ibmnpu", "unknown"]),
                               "version": _json})
_dev = st.fixed_dictionaries({
    "index": _json | st.integers(0, 9), "uuid": _json, "name": _json | st.sampled_from(["NVIDIA H100", "Tesla V100"]),
    "pci_bus_id": _json | st.sampled_from(["00000000:18:00.0", "0000:2A:00.0", "x"]), "memory_bytes": _json,
    "compute_capability": _json | st.just([9, 0]), "numa_node": _json, "cpu_affinity": _json | st.just("0-3,1-9"),
    "pcie": _json, "mig_mode": _json, "nvlinks": st.lists(_link, max_size=4) | _json, "c2c": _json,
    "p2p": _json | st.just({"0000:18:00.0": {"read": "OK", "write": "DISABLED_BY_REGKEY"}}), "fabric": _json,
    "errors": _json | st.just({"nvmlDeviceGetUUID": "NVML_ERROR_UNKNOWN"})})


@given(rec=st.fixed_dictionaries({"schema": st.just("gpucomm.nvml/v1"), "driver_version": _json,
                                  "cuda_version": _json, "errors": _json,
                                  "devices": st.lists(_dev | _json, max_size=4) | _json}))
@settings(max_examples=100, deadline=None)
def test_fuzz_nvml_record(rec):
    part = nvml.nvml_to_partial(rec)
    validate(merge([part]))
