"""The one support module of the test suite: paths, the in-process CLI runner, and the builders of
topology documents, synthetic sysfs trees and nccl-tests machines that several test modules use.
Test modules import from here (never from each other); ``conftest.py`` only holds pytest hooks."""
from __future__ import annotations

import io
import json
import os
import struct
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from hypothesis import strategies as st

from gpucomm.planners.collectives import compare
from gpucomm.probes.facts import pcie_bw_GBps
from gpucomm.probes.formats.nccltests import load_nccltests
from gpucomm.probes.matrix import compute_matrix
from gpucomm.probes.model import (finalize, gpu_record, link_record, new_document, nic_record, normalize_bus_id,
                                  switch_record)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
HOSTS = FIXTURES / "hosts"
CAPTURES = FIXTURES / "captures"          # copies of ../shared/captures used by tests (with SOURCES.md)
SHARED_CAPTURES = ROOT.parent / "shared" / "captures"
NT = CAPTURES / "nccltests"


# ============================================================================================
# The CLI, in-process
@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    def json(self):
        return json.loads(self.stdout)


def load_script(path: Path, name: str):
    """A script of the repository (``tools/``, ``fixtures/``) imported as module ``name``, once: it is
    registered in ``sys.modules`` before it runs (its dataclasses look their module up there)."""
    import importlib.util
    import sys

    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def run_cli(*args: str) -> Result:
    """Run ``gpucomm ARGS`` in-process; returns exit code, stdout, stderr."""
    from gpucomm.app import run

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = run([str(a) for a in args])
    return Result(code, out.getvalue(), err.getvalue())


# Commands whose default output is a table, over the bundled examples and a capture with an NCCL log
# (test_columns: values kept whole at any width; test_plain_render: the same bytes without rich)
TABLE_CASES = [
    ["rings", "example:hgx-h100", "--nodes", "2"],
    ["rings", "example:dgx-a100"],
    ["rings", "example:hgx-h100", "--gpus", "0,1"],
    ["plan", "example:hgx-h100", "--nodes", "2", "--tp", "8", "--pp", "2"],
    ["plan", "example:dgx-a100", "--tp", "2", "--ep", "4"],
    ["plan", "example:hgx-h100", "--nodes", "4", "--model", "llama-70b"],
    ["plan", "example:gb200-tray"],
    ["select", "example:hgx-h100", "-k", "2"],
    ["paths", "example:dgx1-v100"],
    ["show", "example:dgx-a100"],
    ["show", "example:hgx-h100"],
    ["doctor", "example:hgx-h100-degraded"],
    ["trees", "example:dgx-a100", "--nodes", "2"],
    ["predict", "example:hgx-h100", "--size", "1K:1G:x32"],
    ["diff", "example:hgx-h100", "example:hgx-h100-degraded"],
    ["examples"],
    ["rings", str(CAPTURES / "ncclxml" / "panlichen-rtx3090-8gpu-topo.xml"), "--compare",
     str(CAPTURES / "nccllogs" / "panlichen-rtx3090-4node-log.log")],
]


# ============================================================================================
# Topology documents (placement, env, select, cluster tests)
GPU_BUS = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]


NIC_BUS = ["19", "2b", "3b", "5e", "9b", "ac", "bb", "dc"]


def _numa(doc, numa_nodes, cpus_per_numa, smt):
    total = cpus_per_numa * numa_nodes
    for n in range(numa_nodes):
        lo = n * cpus_per_numa
        cpus = f"{lo}-{lo + cpus_per_numa - 1}"
        if smt:
            cpus += f",{lo + total}-{lo + total + cpus_per_numa - 1}"
        doc["numa_nodes"].append({"id": n, "cpus": cpus, "memory_bytes": None, "distances": None})


def hgx_doc(n_gpus=8, nvswitch=True, nics=True, numa_nodes=2, cpus_per_numa=56, smt=True, mig=False,
            name="NVIDIA H100 80GB HBM3", mem=80 * 2**30, cc="9.0", nic_rate=400.0, nic_names=None):
    """HGX-like node: GPUs on NVSwitch, 2 NUMA nodes, each GPU with one NIC under its own PCIe
    switch (PIX), the switch under a host bridge of the GPU's NUMA node."""
    doc = new_document("json")
    doc["host"]["hostname"] = "hgx"
    doc["host"]["cpu_vendor"] = "GenuineIntel"
    _numa(doc, numa_nodes, cpus_per_numa, smt)
    per_numa = max(1, n_gpus // numa_nodes)
    for i in range(n_gpus):
        numa = min(i // per_numa, numa_nodes - 1)
        hb = f"pci0000:{GPU_BUS[i]}"
        sw = f"0000:{int(GPU_BUS[i], 16) - 2:02x}:00.0"
        doc["switches"].append(switch_record(hb, "host_bridge", numa_node=numa, parent=f"CPU{numa}"))
        doc["switches"].append(switch_record(sw, "pcie", pci_bus_id=sw, parent=hb, numa_node=numa))
        g = gpu_record(i, uuid=f"GPU-{i:08d}-aaaa-bbbb-cccc-000000000000", name=name,
                       pci_bus_id=f"0000:{GPU_BUS[i]}:00.0", arch="hopper", compute_capability=cc, memory_bytes=mem,
                       numa_node=numa, numa_affinity=[numa], pcie={"gen": 5, "width": 16, "max_gen": 5, "max_width": 16},
                       mig=mig, parent=sw)
        doc["gpus"].append(g)
        doc["links"].append(link_record(g["pci_bus_id"], sw, "pcie", pcie_bw_GBps(5, 16), gen=5, width=16))
        if nics:
            nm = nic_names[i] if nic_names else f"mlx5_{i}"
            doc["nics"].append(nic_record(nm, netdev=f"ibp{i}s0", pci_bus_id=f"0000:{NIC_BUS[i]}:00.0", numa_node=numa,
                                          link_layer="InfiniBand", parent=sw,
                                          ports=[{"port": 1, "state": "ACTIVE", "rate_gbps": nic_rate}]))
    if nvswitch:
        for s in range(4):
            doc["switches"].append(switch_record(f"NVS{s}", "nvswitch"))
            for g in doc["gpus"]:
                c = 5 if s < 2 else 4
                doc["links"].append(link_record(g["pci_bus_id"], f"NVS{s}", "nvlink", 20.6 * c, count=c))
    compute_matrix(doc)
    return finalize(doc)


def pcie_pairs_doc(n_gpus=4, pairs=((0, 2), (1, 3)), nvlinks=12, nic_switch=None, numa_nodes=1,
                   p2p_disabled=False, name="NVIDIA A100 80GB PCIe", cc="8.0"):
    """PCIe box: GPUs two per PCIe switch (0,1 | 2,3 ...) and NVLink bridges on ``pairs``;
    an optional NIC under switch ``nic_switch``."""
    doc = new_document("json")
    _numa(doc, numa_nodes, 32, True)
    nsw = (n_gpus + 1) // 2
    for s in range(nsw):
        numa = min(s * numa_nodes // nsw, numa_nodes - 1)
        doc["switches"].append(switch_record(f"pci0000:{s:02x}", "host_bridge", numa_node=numa, parent=f"CPU{numa}"))
        doc["switches"].append(switch_record(f"0000:{0x10 + s * 0x10:02x}:00.0", "pcie", parent=f"pci0000:{s:02x}",
                                             pci_bus_id=f"0000:{0x10 + s * 0x10:02x}:00.0", numa_node=numa))
    for i in range(n_gpus):
        s = i // 2
        numa = min(s * numa_nodes // nsw, numa_nodes - 1)
        sw = f"0000:{0x10 + s * 0x10:02x}:00.0"
        g = gpu_record(i, uuid=f"GPU-p{i}", name=name, pci_bus_id=f"0000:{0x11 + s * 0x10 + (i % 2):02x}:00.0",
                       compute_capability=cc, memory_bytes=80 * 2**30, numa_node=numa, numa_affinity=[numa],
                       pcie={"gen": 4, "width": 16, "max_gen": 4, "max_width": 16}, mig=False, parent=sw)
        doc["gpus"].append(g)
    for a, b in pairs:
        ga, gb = doc["gpus"][a], doc["gpus"][b]
        doc["links"].append(link_record(ga["pci_bus_id"], gb["pci_bus_id"], "nvlink", 25.0 * nvlinks, count=nvlinks))
        ga["nvlink"] = [{"link": k, "state": "up", "remote": gb["pci_bus_id"], "version": 3, "bw_GBps": 25.0}
                        for k in range(nvlinks)]
        gb["nvlink"] = [{"link": k, "state": "up", "remote": ga["pci_bus_id"], "version": 3, "bw_GBps": 25.0}
                        for k in range(nvlinks)]
    if nic_switch is not None:
        sw = f"0000:{0x10 + nic_switch * 0x10:02x}:00.0"
        doc["nics"].append(nic_record("mlx5_0", netdev="ibp0", pci_bus_id=f"0000:{0x1f + nic_switch * 0x10:02x}:00.0",
                                      numa_node=0, link_layer="InfiniBand", parent=sw,
                                      ports=[{"port": 1, "state": "ACTIVE", "rate_gbps": 200.0}]))
    if p2p_disabled:
        for g in doc["gpus"]:
            g["p2p"] = {o["pci_bus_id"]: "NOT_SUPPORTED" for o in doc["gpus"] if o is not g}
    compute_matrix(doc)
    return finalize(doc)


def vm_flat_doc(n_gpus=8, n_nics=8, numa_minus_one=False):
    """A VM: GPUs and NICs hang straight off the CPU (no PCIe switch visible)."""
    doc = new_document("json")
    doc["host"].update({"cpu_vendor": "AuthenticAMD", "cpu_arch": "x86_64"})
    _numa(doc, 2, 48, False)
    for i in range(n_gpus):
        numa = -1 if numa_minus_one else i * 2 // n_gpus
        doc["gpus"].append(gpu_record(i, uuid=f"GPU-v{i}", name="NVIDIA H100 80GB HBM3",
                                      pci_bus_id=f"{0x0001 + i:04x}:00:00.0", compute_capability="9.0",
                                      memory_bytes=80 * 2**30, numa_node=numa, numa_affinity=[] if numa < 0 else [numa],
                                      pcie={"gen": 5, "width": 16, "max_gen": 5, "max_width": 16}, mig=False,
                                      parent=f"CPU{max(numa, 0)}"))
    for j in range(n_nics):
        numa = -1 if numa_minus_one else j * 2 // n_nics
        doc["nics"].append(nic_record(f"mlx5_{j}", netdev=f"ib{j}", pci_bus_id=f"{0x0101 + j:04x}:00:00.0",
                                      numa_node=numa, link_layer="InfiniBand", parent=f"CPU{max(numa, 0)}",
                                      ports=[{"port": 1, "state": "ACTIVE", "rate_gbps": 400.0}]))
    for s in range(4):
        doc["switches"].append(switch_record(f"NVS{s}", "nvswitch"))
        for g in doc["gpus"]:
            doc["links"].append(link_record(g["pci_bus_id"], f"NVS{s}", "nvlink", 20.6 * 4, count=4))
    compute_matrix(doc)
    return finalize(doc)


def nvswitch_document(ngpus: int = 8, sm: int = 90, nvlinks: int = 18, name: Optional[str] = None, nics: int = 0,
                      nic_gbps: float = 400.0, pcie_gen: Optional[int] = None, cpu_vendor: str = "GenuineIntel",
                      cpu_model: str = "Intel(R) Xeon(R) Platinum 8480+", numa_nodes: int = 2) -> dict:
    """A topology document for an NVSwitch machine -- the channel counts of connect.cc ncclTopoPostset (HGX A100
    ``sm=80, nvlinks=12``, HGX H100 ``sm=90, nvlinks=18``, DGX B200 ``sm=100, nvlinks=18``, NVL72 domain
    ``ngpus=72, sm=100``): ``ngpus`` GPUs each under its own PCIe switch (with ``nics`` NICs spread
    over the switches, one per switch first), half of the switches on each NUMA node, every GPU with
    ``nvlinks`` links to one NVSwitch.  Built with gpucomm.probes.model builders, so it is a real document."""
    from gpucomm.probes.facts import default_pcie_gen, nvlink_bw_per_link

    gen = pcie_gen or default_pcie_gen(sm)
    doc = new_document("json")
    doc["host"]["cpu_vendor"] = cpu_vendor
    doc["host"]["cpu_model"] = cpu_model
    doc["host"]["cpu_arch"] = "x86_64"
    gname = name or {80: "NVIDIA A100-SXM4-80GB", 90: "NVIDIA H100 80GB HBM3", 100: "NVIDIA B200"}.get(sm, "GPU")
    nps = max(1, numa_nodes)
    per_numa = -(-ngpus // nps)
    doc["numa_nodes"] = [{"id": i, "cpus": None, "memory_bytes": None, "distances": None} for i in range(nps)]
    doc["switches"].append(switch_record("NVS", kind="nvswitch"))
    pbw = pcie_bw_GBps(gen, 16)
    for i in range(ngpus):
        numa = min(i // per_numa, nps - 1)
        bus = 0x18 + i * 0x10 if ngpus <= 14 else 0x10 + i
        sw = f"0000:{bus - 2:02x}:00.0" if ngpus <= 14 else f"{0x1000 + i:04x}:00:00.0"
        gid = f"0000:{bus:02x}:00.0" if ngpus <= 14 else f"{0x2000 + i:04x}:01:00.0"
        doc["switches"].append(switch_record(sw, kind="pcie", pci_bus_id=sw, parent=f"CPU{numa}", numa_node=numa))
        doc["links"].append(link_record(sw, f"CPU{numa}", "pcie", pbw, gen=gen, width=16))
        doc["gpus"].append(gpu_record(i, name=gname, pci_bus_id=gid, compute_capability=f"{sm // 10}.{sm % 10}",
                                      numa_node=numa, parent=sw,
                                      pcie={"gen": gen, "width": 16, "max_gen": gen, "max_width": 16}))
        doc["links"].append(link_record(gid, sw, "pcie", pbw, gen=gen, width=16))
        doc["links"].append(link_record(gid, "NVS", "nvlink", nvlinks * nvlink_bw_per_link(sm), count=nvlinks))
    for k in range(nics):
        i = k % ngpus
        sw = doc["gpus"][i]["parent"]
        numa = doc["gpus"][i]["numa_node"]
        bus = f"{0x3000 + k:04x}:00:00.0"
        doc["nics"].append(nic_record(f"mlx5_{k}", pci_bus_id=bus, numa_node=numa, parent=sw, link_layer="InfiniBand",
                                      ports=[{"port": 1, "state": "ACTIVE", "rate_gbps": nic_gbps}],
                                      guid=f"0x{k + 1:016x}"))
        doc["links"].append(link_record(bus, sw, "pcie", pbw, gen=gen, width=16))
    # no smp links: the graph takes NCCL's inter-socket bandwidth for the host's CPU (facts.inter_cpu_bw)
    return finalize(doc)


# ============================================================================================
# Random PCI trees and GeForce P2P (paths, rings)
def p2p_disabled(doc: dict) -> dict:
    """GeForce cards: NVML reports P2P NOT_SUPPORTED between every pair (the capture's SOURCES.md;
    an NCCL topology XML does not carry NVML's P2P status, NCCL asks NVML at run time)."""
    ids = [g["pci_bus_id"] for g in doc["gpus"]]
    for g in doc["gpus"]:
        g["p2p"] = {o: "NOT_SUPPORTED" for o in ids if o != g["pci_bus_id"]}
    return doc


@st.composite
def pci_trees(draw):
    """A random machine: 1-3 CPUs, devices directly on a CPU or under 1-2 levels of switches."""
    ncpu = draw(st.integers(1, 3))
    doc = new_document("json")
    doc["host"].update(cpu_vendor="AuthenticAMD", cpu_model="AMD EPYC 9654")
    counter = {"sw": 0, "gpu": 0, "nic": 0}

    def device(parent: str, numa: int) -> None:
        is_gpu = draw(st.booleans()) or counter["gpu"] < 2
        if is_gpu:
            i = counter["gpu"]
            counter["gpu"] += 1
            bid = f"0000:{0x10 + i:02x}:00.0"
            doc["gpus"].append(gpu_record(i, pci_bus_id=bid, name="NVIDIA A100-PCIE-40GB",
                                          compute_capability="8.0", numa_node=numa, parent=parent))
        else:
            k = counter["nic"]
            counter["nic"] += 1
            bid = f"0000:{0x80 + k:02x}:00.0"
            doc["nics"].append(nic_record(f"mlx5_{k}", pci_bus_id=bid, numa_node=numa, parent=parent,
                                          ports=[{"port": 1, "state": "ACTIVE", "rate_gbps": 200.0}]))
        doc["links"].append(link_record(bid, parent, "pcie", 24.0, gen=4, width=16))

    def switch(parent: str, numa: int, depth: int) -> None:
        counter["sw"] += 1
        sid = f"0000:{0xc0 + counter['sw']:02x}:00.0"
        doc["switches"].append(switch_record(sid, kind="pcie", pci_bus_id=sid, parent=parent, numa_node=numa))
        doc["links"].append(link_record(sid, parent, "pcie", 24.0, gen=4, width=16))
        for _ in range(draw(st.integers(1, 3))):
            if depth < 2 and draw(st.integers(0, 3)) == 0:
                switch(sid, numa, depth + 1)
            else:
                device(sid, numa)

    for c in range(ncpu):
        doc["numa_nodes"].append({"id": c, "cpus": f"{c * 8}-{c * 8 + 7}", "memory_bytes": None, "distances": None})
        for _ in range(draw(st.integers(1, 3))):
            if draw(st.booleans()):
                switch(f"CPU{c}", c, 1)
            else:
                device(f"CPU{c}", c)
    if counter["gpu"] < 2:
        device("CPU0", 0)
        device("CPU0", 0)
    finalize(doc)
    compute_matrix(doc)
    return doc


# ============================================================================================
# The machines of the nccl-tests captures (calibration, predict --compare)
def _bus(raw: str) -> str:
    """nccl-tests prints ``[0000:4f:00]`` (new) or ``[0x07]`` (old: the bus number only)."""
    raw = raw.strip()
    if raw.lower().startswith("0x"):
        return f"0000:{int(raw, 16):02x}:00.0"
    return normalize_bus_id(raw + ".0") or normalize_bus_id(raw) or raw


def _node_devices(parsed: dict) -> list[dict]:
    """The devices of the first host in a capture (all nodes are identical)."""
    host = parsed["hosts"][0]
    return [d for d in parsed["devices"] if d["host"] == host]


def build_a6000_pcie(parsed: dict) -> dict:
    doc = new_document("fixture")
    doc["host"].update(hostname=parsed["hosts"][0], sockets=2, cpu_arch="x86_64")
    for d in _node_devices(parsed):
        bus = _bus(d["bus_id"])
        socket = 0 if int(bus.split(":")[1], 16) < 0x80 else 1
        doc["gpus"].append(gpu_record(d["device"], name=d["name"], pci_bus_id=bus, compute_capability="8.6",
                                      numa_node=socket, numa_affinity=[socket], parent=f"CPU{socket}",
                                      pcie={"gen": 4, "width": 16, "max_gen": 4, "max_width": 16}))
        doc["links"].append(link_record(bus, f"CPU{socket}", "pcie", 24.0, gen=4, width=16))
    doc["numa_nodes"] = [{"id": 0, "cpus": None}, {"id": 1, "cpus": None}]
    doc["links"].append(link_record("CPU0", "CPU1", "smp", 10.0))
    return finalize(doc)


def build_polaris_node(parsed: dict) -> dict:
    doc = new_document("fixture")
    doc["host"].update(hostname=parsed["hosts"][0], sockets=1, cpu_vendor="AuthenticAMD",
                       cpu_model="AMD EPYC 7543P 32-Core Processor", cpu_arch="x86_64")
    devs = _node_devices(parsed)
    ids = []
    for d in devs:
        bus = _bus(d["bus_id"])
        ids.append(bus)
        doc["gpus"].append(gpu_record(d["device"], name=d["name"], pci_bus_id=bus, compute_capability="8.0",
                                      numa_node=0, numa_affinity=[0], parent="CPU0",
                                      pcie={"gen": 4, "width": 16, "max_gen": 4, "max_width": 16}))
        doc["links"].append(link_record(bus, "CPU0", "pcie", 24.0, gen=4, width=16))
    for i, a in enumerate(ids):       # HGX A100 4-GPU: 12 NVLinks per GPU, 4 to each peer
        for b in ids[i + 1:]:
            doc["links"].append(link_record(a, b, "nvlink", 4 * 20.0, count=4))
    for k, bus in enumerate(("0000:41:00.0", "0000:c1:00.0")):   # hsn0, hsn1 (Cassini), 200 Gb/s
        doc["nics"].append(nic_record(f"hsn{k}", netdev=f"hsn{k}", pci_bus_id=bus, numa_node=0,
                                      link_layer="Ethernet", parent="CPU0",
                                      ports=[{"port": 1, "state": "ACTIVE", "rate_gbps": 200.0}]))
    doc["numa_nodes"] = [{"id": 0, "cpus": None}]
    return finalize(doc)


def build_h100(parsed: dict) -> dict:
    host = ROOT / "fixtures" / "hosts" / "hgx-h100"
    from gpucomm.probes.load import load_topology

    if host.is_dir():
        return load_topology(str(host))
    doc = load_topology(str(CAPTURES / "topo" / "17_h100-sxm-x8_12nic.txt"))
    names = {d["device"]: d["name"] for d in _node_devices(parsed)}
    for g in doc["gpus"]:
        g["name"] = g["name"] or names.get(g["index"])
    return doc


def socket_rate_of_table(parsed: dict) -> float:
    """Per-NIC Gb/s of NCCL's TCP socket transport in one nccl-tests table of 2 Polaris nodes (2 NICs
    each, NCCL spreading its rings over both): the busbw of the largest size x 8 / 2 -- what ``gpucomm
    calibrate`` fits from a user's own table.  The product's one socket figure is
    ``transport.SOCKET_GBPS`` (``--transport socket``), fitted on all the Polaris env1 tables at once
    (NCCL 2.18 and 2.21 differ 2.8x on them; docs/SWPATH.md); this NCCL 2.18 table alone says ~37.8."""
    return parsed["rows"][-1]["out_of_place"]["busbw_GBps"] * 8 / 2


CASES = [
    # (capture, builder, nodes, fabric_gbps: a number, or a function of the parsed table)
    ("02_rtxa6000-x8_1node_allreduce.txt", build_a6000_pcie, 1, None),
    ("04_polaris-a100-40gb-x4_2nodes_allreduce_default-tcp.txt", build_polaris_node, 2, socket_rate_of_table),
    ("09_h100-x8_1node_allreduce_cluster01.txt", build_h100, 1, None),
]


def case_fabric(name: str) -> Optional[float]:
    """The ``--fabric-gbps`` a capture of :data:`CASES` runs with (None: the topology's NICs)."""
    fabric = dict((c[0], c[3]) for c in CASES)[name]
    return fabric(load_nccltests(str(NT / name))) if callable(fabric) else fabric


def calibrate(name: str, builder, nodes: int, fabric) -> dict:
    """Predicted vs measured rows of one capture; the comparison itself is gpucomm.planners.collectives.compare's (the
    same code as ``gpucomm predict TOPO --compare FILE``)."""
    parsed = load_nccltests(str(NT / name))
    doc = builder(parsed)
    gpn = parsed["n_ranks"] // nodes
    if callable(fabric):
        fabric = fabric(parsed)
    c = compare.compare_run(doc, parsed, nodes=nodes, gpus_per_node=gpn, fabric_gbps=fabric)
    rows = [{"size": x["size_bytes"], "meas_us": x["measured_time_us"], "pred_us": x["predicted_time_us"],
             "meas_busbw": x["measured_busbw_GBps"], "pred_busbw": x["predicted_busbw_GBps"],
             "err_pct": x["error_pct"], "algo": f"{x['algorithm']}/{x['protocol']}"} for x in c["rows"]]
    return {"capture": name, "collective": parsed["collective"], "n_ranks": parsed["n_ranks"], "nodes": nodes,
            "rows": rows, "largest": rows[-1], "median_abs_err_ge_1MiB": c["summary"]["median_abs_error_pct_ge_1MiB"],
            "summary": c["graph"]}


def _human(n: int) -> str:
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k}{unit}"
    return f"{n}B"


MEDIAN_BOUND = {
    "02_rtxa6000-x8_1node_allreduce.txt": 6.0,
    "04_polaris-a100-40gb-x4_2nodes_allreduce_default-tcp.txt": 20.0,
    "09_h100-x8_1node_allreduce_cluster01.txt": 6.0,
}


# ============================================================================================
# Synthetic sysfs trees (real Linux layout, relative symlinks) for probe tests; paths and link
# targets follow docs/SNAPSHOT_FORMAT.md
BRIDGE = "0x060400"
GPU_3D = "0x030200"
NIC_ETH = "0x020000"
NIC_IB = "0x020700"
NVSWITCH = "0x068000"


def _w(path: Path, text) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(str(text) + "\n")


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(target, link.parent), link)


def acs_config(ctrl: int, cap: int = 0x5F) -> bytes:
    """A 4 KiB config space whose extended list holds AER (0x0001) then ACS (0x000D)."""
    blob = bytearray(4096)
    struct.pack_into("<HH", blob, 0, 0x10B5, 0x8796)
    struct.pack_into("<I", blob, 0x100, 0x0001 | (1 << 16) | (0x148 << 20))   # AER -> next 0x148
    struct.pack_into("<I", blob, 0x148, 0x000D | (1 << 16) | (0 << 20))       # ACS, end of list
    struct.pack_into("<HH", blob, 0x14C, cap, ctrl)
    return bytes(blob)


class SysfsTree:
    """A fake root: ``root/sys/...``, ``root/proc/cpuinfo``."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.sys = self.root / "sys"
        (self.sys / "bus/pci/devices").mkdir(parents=True, exist_ok=True)

    # -- NUMA / CPU --------------------------------------------------------------------------
    def numa(self, nid: int, cpus: str, mem_kb: int = 1024 * 1024, distances: str = "10") -> None:
        d = self.sys / f"devices/system/node/node{nid}"
        _w(d / "cpulist", cpus)
        _w(d / "distance", distances)
        _w(d / "meminfo", f"Node {nid} MemTotal:       {mem_kb} kB\nNode {nid} MemFree:        1 kB")

    def cpu_online(self, cpus: str) -> None:
        _w(self.sys / "devices/system/cpu/online", cpus)

    def cpuinfo(self, vendor: str = "GenuineIntel", model_name: str = "Intel(R) Xeon(R) Platinum 8480+",
                sockets: int = 2, cpus_per_socket: int = 2, family: int = 6, model: int = 0x8F) -> None:
        blocks = []
        n = 0
        for s in range(sockets):
            for _ in range(cpus_per_socket):
                blocks.append(f"processor\t: {n}\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n"
                              f"model name\t: {model_name}\nphysical id\t: {s}\n")
                n += 1
        _w(self.root / "proc/cpuinfo", "\n".join(blocks))

    def meta(self, **kw) -> None:
        import json

        meta = {"schema": "gpucomm.snapshot/v1", "name": "synthetic", "description": "", "hostname": "synthetic",
                "collected_at": None, "os": None, "kernel": None, "cpu_vendor": None, "cpu_model": None,
                "cpu_arch": "x86_64", "sockets": None, "capture": None, "generated_by": "tests"}
        meta.update(kw)
        _w(self.root / "meta.json", json.dumps(meta))

    # -- PCI ---------------------------------------------------------------------------------
    def host_bridge(self, name: str = "pci0000:17", under: Optional[Path] = None) -> Path:
        d = (under if under is not None else self.sys / "devices") / name
        d.mkdir(parents=True, exist_ok=True)
        return d

    def device(self, parent: Path, bdf: str, cls: str, vendor: str = "0x10de", device: str = "0x2330",
               speed: Optional[str] = "32.0 GT/s PCIe", width: Optional[int] = 16,
               max_speed: Optional[str] = None, max_width: Optional[int] = None, numa: Optional[int] = 0,
               cpulist: Optional[str] = "0-1", config: Optional[bytes] = None, **extra) -> Path:
        d = parent / bdf
        d.mkdir(parents=True, exist_ok=True)
        attrs = {"class": cls, "vendor": vendor, "device": device, "subsystem_vendor": vendor,
                 "subsystem_device": "0x16c1", "current_link_speed": speed, "current_link_width": width,
                 "max_link_speed": max_speed if max_speed is not None else speed,
                 "max_link_width": max_width if max_width is not None else width,
                 "numa_node": numa, "local_cpulist": cpulist}
        attrs.update(extra)
        for k, v in attrs.items():
            if v is not None:
                _w(d / k, v)
        if config is not None:
            _w(d / "config", config)
        _link(self.sys / "bus/pci/devices" / bdf, d)
        return d

    def bridge(self, parent: Path, bdf: str, **kw) -> Path:
        kw.setdefault("vendor", "0x10b5")
        kw.setdefault("device", "0xc010")
        return self.device(parent, bdf, BRIDGE, **kw)

    def switch(self, parent: Path, up_bdf: str, down_bdfs: list, **kw) -> tuple:
        """A PCIe switch: upstream port ``up_bdf`` and its downstream ports; returns (up, [downs])."""
        up = self.bridge(parent, up_bdf, **kw)
        return up, [self.bridge(up, b, **kw) for b in down_bdfs]

    # -- RDMA / net --------------------------------------------------------------------------
    def ib(self, dev: Path, name: str, ports: Optional[dict] = None, node_guid: str = "b859:9f03:00d5:2a0c",
           sys_image_guid: Optional[str] = None, netdev: Optional[str] = None, fw_ver: str = "28.39.1002") -> Path:
        ports = ports if ports is not None else {1: {}}
        d = dev / "infiniband" / name
        _w(d / "node_guid", node_guid)
        _w(d / "sys_image_guid", sys_image_guid or node_guid)
        _w(d / "fw_ver", fw_ver)
        for p, attrs in ports.items():
            a = {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "400 Gb/sec (4X NDR)",
                 "link_layer": "InfiniBand"}
            a.update(attrs)
            for k, v in a.items():
                if v is not None:
                    _w(d / "ports" / str(p) / k, v)
        _link(d / "device", dev)
        _link(self.sys / "class/infiniband" / name, d)
        if netdev:
            self.net(dev, netdev, speed=400000 if "Ethernet" in str(ports) else None)
        return d

    def net(self, dev: Optional[Path], ifname: str, operstate: str = "up", speed: Optional[int] = 100000,
            typ: int = 1, dev_port: int = 0) -> Path:
        if dev is None:
            d = self.sys / "devices/virtual/net" / ifname
        else:
            d = dev / "net" / ifname
            _link(d / "device", dev)
            _w(d / "dev_port", dev_port)
        _w(d / "operstate", operstate)
        if speed is not None:
            _w(d / "speed", speed)
        _w(d / "type", typ)
        _link(self.sys / "class/net" / ifname, d)
        return d


def two_socket_switch_tree(root: Path) -> SysfsTree:
    """Two sockets; socket 0: a PCIe switch holding GPU0, GPU1 and mlx5_0 (IB), a second root
    port with GPU2; socket 1: host bridge with GPU3 and a RoCE NIC (mlx5_1, netdev ens2np0)."""
    t = SysfsTree(root)
    t.numa(0, "0-1", distances="10 21")
    t.numa(1, "2-3", distances="21 10")
    t.cpu_online("0-3")
    t.cpuinfo()
    hb0 = t.host_bridge("pci0000:17")
    rp0 = t.bridge(hb0, "0000:17:01.0", numa=0)
    up, (d0, d1, d2) = t.switch(rp0, "0000:18:00.0", ["0000:19:00.0", "0000:19:01.0", "0000:19:02.0"], numa=0)
    t.device(d0, "0000:1a:00.0", GPU_3D, numa=0)
    t.device(d1, "0000:1b:00.0", GPU_3D, numa=0)
    nic0 = t.device(d2, "0000:1c:00.0", NIC_IB, vendor="0x15b3", device="0x1021", numa=0)
    t.ib(nic0, "mlx5_0", netdev=None)
    rp1 = t.bridge(hb0, "0000:17:02.0", numa=0)
    t.device(rp1, "0000:20:00.0", GPU_3D, numa=0)
    hb1 = t.host_bridge("pci0000:97")
    rp2 = t.bridge(hb1, "0000:97:01.0", numa=1, cpulist="2-3")
    t.device(rp2, "0000:98:00.0", GPU_3D, numa=1, cpulist="2-3")
    rp3 = t.bridge(hb1, "0000:97:02.0", numa=1, cpulist="2-3")
    nic1 = t.device(rp3, "0000:99:00.0", NIC_ETH, vendor="0x15b3", device="0x1021", numa=1, cpulist="2-3")
    t.ib(nic1, "mlx5_1", ports={1: {"link_layer": "Ethernet", "rate": "200 Gb/sec (4X HDR)"}}, netdev="ens2np0",
         node_guid="b859:9f03:00d5:2a0d")
    t.net(None, "lo", operstate="unknown", speed=None, typ=772)
    return t


_VALIDATOR = None


def validate(doc: dict) -> None:
    """Validate a topology document against the shipped JSON Schema (validator built once)."""
    global _VALIDATOR
    if _VALIDATOR is None:
        import json

        import jsonschema

        from gpucomm.probes.model import schema_path

        with open(schema_path()) as f:
            schema = json.load(f)
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        _VALIDATOR = cls(schema)
    _VALIDATOR.validate(doc)
