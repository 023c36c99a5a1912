"""Calibration of gpucomm.planners.collectives.cost against the real nccl-tests captures in fixtures/captures/nccltests.

For each capture we build the topology of the machine it ran on, predict the same sweep, and report
per row predicted vs measured bus bandwidth (out-of-place columns).  ``calibration_table()`` returns
the printed table (run ``python tests/test_predict_calibration.py`` to paste it into the README);
``pytest -rA`` shows it in the captured output of ``test_calibration_report``.

The machines (see fixtures/captures/nccltests/SOURCES.md):

* 02 -- 8x RTX A6000 "(PCIe, 2 sockets), 1 node, no NIC involved" (vllm#17348).  SOURCES does not
  mention NVLink bridges, so this is *not* the NV4-bridged A6000 box of topo/31 (another issue,
  vllm#4209); it is modelled as a plain 2-socket PCIe Gen4 x16 box, GPUs on their socket's root
  complexes, split by bus number (< 0x80 socket 0), bus ids and names from the capture's
  "# Using devices" lines.
* 04 -- ALCF Polaris, 2 nodes x 4 A100-SXM4-40GB (HGX A100 4-GPU board: 4 NVLinks between every
  pair), 1 AMD EPYC socket, 2 Slingshot-11 200 Gb/s NICs per node, NCCL 2.18 with no network plugin,
  i.e. NCCL's TCP socket transport: the network is modelled with ``fabric_gbps =
  SOCKET_TRANSPORT_GBPS`` (the equivalent of ``--fabric-gbps 37.8``).
* 09 -- 1 node x 8 H100 80GB HBM3 (HGX H100: NV18 to every peer through NVSwitch); topology from
  fixtures/hosts/hgx-h100 when present, else the nvidia-smi capture topo/17 (8x H100 80GB HBM3,
  NV18) with the GPU names of the nccl-tests capture.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # allow `python tests/test_predict_calibration.py`
    sys.path.insert(0, str(ROOT))

from gpucomm.planners.collectives import compare  # noqa: E402
from gpucomm.planners.collectives import cost  # noqa: E402
from gpucomm.probes.formats.nccltests import load_nccltests  # noqa: E402
from gpucomm.probes.model import finalize, gpu_record, link_record, new_document, nic_record, normalize_bus_id  # noqa: E402

CAPTURES = ROOT / "fixtures" / "captures"
NT = CAPTURES / "nccltests"


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


CASES = [
    # (capture, builder, nodes, fabric_gbps)
    ("02_rtxa6000-x8_1node_allreduce.txt", build_a6000_pcie, 1, None),
    ("04_polaris-a100-40gb-x4_2nodes_allreduce_default-tcp.txt", build_polaris_node, 2, cost.SOCKET_TRANSPORT_GBPS),
    ("09_h100-x8_1node_allreduce_cluster01.txt", build_h100, 1, None),
]


def calibrate(name: str, builder, nodes: int, fabric) -> dict:
    """Predicted vs measured rows of one capture; the comparison itself is gpucomm.planners.collectives.compare's (the
    same code as ``gpucomm predict TOPO --compare FILE``)."""
    parsed = load_nccltests(str(NT / name))
    doc = builder(parsed)
    gpn = parsed["n_ranks"] // nodes
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


def calibration_table(detail: bool = True) -> str:
    """Markdown: one summary line per capture, then (detail) every row with its error."""
    results = [calibrate(*c) for c in CASES]
    lines = ["| capture | ranks | largest size | measured busbw | predicted busbw | error | median abs err (>= 1 MiB) |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        L = r["largest"]
        lines.append(f"| {r['capture']} | {r['n_ranks']} ({r['nodes']} node{'s' if r['nodes'] > 1 else ''}) | "
                     f"{_human(L['size'])} | {L['meas_busbw']:.2f} GB/s | {L['pred_busbw']:.2f} GB/s "
                     f"({L['algo']}) | {L['err_pct']:+.1f}% | {r['median_abs_err_ge_1MiB']:.1f}% |")
    if detail:
        for r in results:
            lines += ["", f"{r['capture']} ({r['collective']}, {r['n_ranks']} ranks)", "",
                      "| size | measured us | predicted us | measured busbw | predicted busbw | error | algo/proto |",
                      "|---|---|---|---|---|---|---|"]
            for x in r["rows"]:
                e = f"{x['err_pct']:+.1f}%" if x["err_pct"] is not None else "n/a"
                lines.append(f"| {_human(x['size'])} | {x['meas_us']:.1f} | {x['pred_us']:.1f} | "
                             f"{x['meas_busbw']:.2f} | {x['pred_busbw']:.2f} | {e} | {x['algo']} |")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def results():
    return {c[0]: calibrate(*c) for c in CASES}


def test_calibration_report(results, capsys):
    # Printed so that `pytest -rA` shows it (captured stdout of a passing test).
    print()
    print(calibration_table())
    assert len(results) == 3


@pytest.mark.parametrize("capture", [c[0] for c in CASES])
def test_largest_size_within_15_percent(results, capture):
    """The goal: within 15% of the measured bus bandwidth at the largest size of every capture."""
    r = results[capture]
    assert abs(r["largest"]["err_pct"]) <= 15.0, r["largest"]


# Median abs error over sizes >= 1 MiB actually achieved (asserted with a little headroom).  The
# Polaris bound is looser: NCCL's socket transport ramps up slowly (time - S/B grows to ~1.7 ms at
# 64 MiB-1 GiB and 50% of the time is overhead at 8 MiB), which NCCL's latency model (~150 us for a
# 2-node ring) does not describe; the error is < 6% from 128 MiB on and ~60-80% at 1-4 MiB.
MEDIAN_BOUND = {
    "02_rtxa6000-x8_1node_allreduce.txt": 6.0,
    "04_polaris-a100-40gb-x4_2nodes_allreduce_default-tcp.txt": 20.0,
    "09_h100-x8_1node_allreduce_cluster01.txt": 6.0,
}


@pytest.mark.parametrize("capture", [c[0] for c in CASES])
def test_median_error_ge_1MiB(results, capture):
    assert results[capture]["median_abs_err_ge_1MiB"] <= MEDIAN_BOUND[capture]


def test_h100_picks_nvls_and_pcie_box_picks_ring(results):
    """What NCCL runs at large sizes: NVLS on an NVSwitch H100 node (sm90), a ring on the PCIe box
    and on the 2-node socket run (trees lose there in NCCL's own model)."""
    assert results["09_h100-x8_1node_allreduce_cluster01.txt"]["largest"]["algo"] == "nvls/Simple"
    assert results["02_rtxa6000-x8_1node_allreduce.txt"]["largest"]["algo"] == "ring/Simple"
    assert results["04_polaris-a100-40gb-x4_2nodes_allreduce_default-tcp.txt"]["largest"]["algo"] == "ring/Simple"


def test_constants_reproduce_their_fit():
    """The calibrated constants are the measured figure of the capture they were fitted to, divided
    by the model's hardware figure (so a change in either shows up here)."""
    a6000 = load_nccltests(str(NT / "02_rtxa6000-x8_1node_allreduce.txt"))
    assert cost.PCIE_RING_EFFICIENCY == pytest.approx(a6000["rows"][-1]["out_of_place"]["busbw_GBps"] / 24.0, abs=0.002)
    polaris = load_nccltests(str(NT / "04_polaris-a100-40gb-x4_2nodes_allreduce_default-tcp.txt"))
    per_nic = polaris["rows"][-1]["out_of_place"]["busbw_GBps"] * 8 / 2
    assert cost.SOCKET_TRANSPORT_GBPS == pytest.approx(per_nic, rel=0.005)


if __name__ == "__main__":
    print(calibration_table())
