#!/usr/bin/env python3
"""Golden answers of NCCL itself for the model of NCCL: runs ncclsim (NCCL 2.30.7's own topology,
path, search and tuning sources, built with g++ and run on a CPU; ../shared/tools/ncclsim) over

* a generated corpus of machines (``fixtures/ncclsim/corpus/*.xml``, written by this script from a
  fixed seed): GPU generations sm70-sm100, NVSwitch / NVLink pairs / hybrid cube-mesh / bridges /
  none, 1-2 sockets of Intel, AMD (NPS1-4), Zhaoxin, POWER and Grace CPUs, flat PCIe or switches
  (one or two levels, Broadcom PEX that NCCL flattens), Gen3-Gen5, 1-8 NICs at 25-400 Gb/s, single
  and dual port (one PCI function with two ports, or two functions), GDR on/off, socket-only
  Ethernet; every value NCCL would read from the host is written in the XML (``<gpu sm>``,
  ``<net speed port guid gdr>``, CPU identity and affinity, link speeds), so ncclsim's defaults
  never apply;
* the NCCL XMLs in fixtures/captures/ncclxml and the XML export of every bundled example, each as
  the pinned XML our model runs on (:func:`gpucomm.planners.nccl.comm.pinned_xml`: the document's
  export with the model's named assumptions written in), plus the original files where they are
  complete enough for NCCL to load;

at 1 node and 2+ nodes, with GPU subsets and some NCCL_* settings (NCCL_CROSS_NIC,
NCCL_NET_DISABLE_INTRA, NCCL_P2P_LEVEL, NCCL_NVLS_ENABLE, NCCL_NET_MERGE_LEVEL), and writes
``fixtures/ncclsim/goldens.json``: per case NCCL's paths, graphs, channels after setup, ring 0,
trees, and the algorithm/protocol and predicted time of its tuning model for all_reduce,
all_gather and reduce_scatter at 8 B .. 8 GiB (``gpucomm.planners.nccl.judge.compact``).

The harness is the project's copy in tools/ncclsim (README there): ../shared/tools/ncclsim's harness
plus the same ``ncclGetAlgoInfo`` call for AllGather and ReduceScatter (count = bytes / 4 / nRanks as
nccl-tests' size is the total) and multi-node NVLink: the ranks of an MNNVL clique of several hosts run
together (``--mnnvl-clique``), so NCCL's own code fuses the hosts.  NCCL's sources are used unmodified.

    python tools/ncclsim_goldens.py            # build ncclsim (~2 min), write corpus and goldens
    python tools/ncclsim_goldens.py --check    # rebuild, recompute, compare with the stored goldens
    python tools/ncclsim_goldens.py --agree    # our model against the stored goldens: the agreement table
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "fixtures" / "ncclsim"
NCCLSIM_SRC = Path(os.environ.get("NCCLSIM_SRC", REPO.parent / "shared" / "tools" / "ncclsim"))
HARNESS = REPO / "tools" / "ncclsim"
SEED = 20250909
N_MACHINES = 320

# --------------------------------------------------------------------------------------------
def build_ncclsim(out: Path, src: Path = NCCLSIM_SRC) -> Path:
    """Build ncclsim -- the project's harness (tools/ncclsim: ../shared/tools/ncclsim's harness with the
    AllGather/ReduceScatter rows and multi-node NVLink cliques, see its README) on NCCL's unmodified
    sources in ``src``/nccl -- into ``out``; ~2 minutes on 2 cores."""
    if not (src / "nccl" / "src").is_dir():
        raise SystemExit(f"NCCL sources not found at {src}/nccl (set NCCLSIM_SRC)")
    if shutil.which("g++") is None:
        raise SystemExit("g++ not found (apt-get install g++)")
    subprocess.run(["bash", str(HARNESS / "build.sh"), str(src / "nccl"), str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    return out


# --------------------------------------------------------------------------------------------
# The corpus
_GPUS = {  # name: (sm, PCI device id, PCIe gen, NVLink options)
    "V100": (70, "0x1db1", 3, ("cubemesh", "none", "nvswitch", "pairs")),
    "A100": (80, "0x20b0", 4, ("nvswitch", "pairs", "none", "mesh4")),
    "A10": (86, "0x2236", 4, ("none",)),
    "A40": (86, "0x2235", 4, ("pairs", "none")),
    "L40S": (89, "0x26b9", 4, ("none",)),
    "H100": (90, "0x2330", 5, ("nvswitch", "pairs", "none")),
    "B200": (100, "0x2901", 5, ("nvswitch", "none")),
}
_NVL_PER_GPU = {70: 6, 80: 12, 86: 4, 89: 0, 90: 18, 100: 18}
_CPUS = {  # name: (arch, vendor, family, model)
    "bdw": ("x86_64", "GenuineIntel", 6, 0x4F), "skl": ("x86_64", "GenuineIntel", 6, 0x55),
    "icx": ("x86_64", "GenuineIntel", 6, 0x6A), "spr": ("x86_64", "GenuineIntel", 6, 0x8F),
    "emr": ("x86_64", "GenuineIntel", 6, 0xCF), "rome": ("x86_64", "AuthenticAMD", 23, 49),
    "milan": ("x86_64", "AuthenticAMD", 25, 1), "genoa": ("x86_64", "AuthenticAMD", 25, 17),
    "zhaoxin": ("x86_64", "CentaurHauls", 7, 0x5B), "power9": ("ppc64", None, None, None),
    "grace": ("arm64", None, None, None),
}
_SPEED = {3: "8.0 GT/s PCIe", 4: "16.0 GT/s PCIe", 5: "32.0 GT/s PCIe"}


class _Bus:
    def __init__(self) -> None:
        self.next = 0x10

    def take(self, domain: int = 0) -> str:
        b = f"{domain:04x}:{self.next:02x}:00.0"
        self.next += 1
        return b


def _machine(rng: random.Random, i: int) -> tuple:
    """One machine: (name, XML text, [cases]); a case = {nodes, gpus, env}."""
    gname = rng.choice(list(_GPUS))
    sm, devid, gen_default, nvl_opts = _GPUS[gname]
    nvl = rng.choice(nvl_opts)
    ngpus = rng.choice([1, 2, 4, 8, 8, 8]) if nvl != "cubemesh" else 8
    if nvl == "mesh4":
        ngpus = 4
    if nvl == "pairs" and ngpus < 2:
        ngpus = 2
    if nvl == "nvswitch" and rng.random() < 0.05 and sm == 70:
        ngpus = 16
    cpu_kind = rng.choice(["skl", "icx", "spr", "emr", "rome", "milan", "genoa", "bdw"] * 3 + ["zhaoxin", "power9", "grace"])
    if cpu_kind == "grace":
        if sm < 90:
            cpu_kind = "spr"
    if cpu_kind == "power9" and sm != 70:
        cpu_kind = "skl"
    arch, vendor, fam, model = _CPUS[cpu_kind]
    sockets = rng.choice([1, 2, 2]) if ngpus > 1 else 1
    nps = rng.choice([1, 1, 2, 4]) if vendor == "AuthenticAMD" else 1
    numas = sockets * nps
    gen = rng.choice([gen_default, gen_default, max(3, gen_default - 1)])
    layout = rng.choice(["flat", "sw1", "sw2", "sw2", "twolevel", "bcm"])
    if layout == "bcm" and gen < 4:
        layout = "sw2"
    n_nics = rng.choice([1, 1, 2, 4, 8, 8]) if ngpus >= 4 else rng.choice([1, 1, 2])
    nic_gbps = rng.choice([25, 100, 100, 200, 200, 400, 400]) if cpu_kind != "power9" else 100
    dual = rng.random() < 0.25
    dual_style = rng.choice(["oneaddr", "twofunc"])
    socket_only = rng.random() < 0.06
    gdr = 0 if rng.random() < 0.08 else 1
    nic_width = rng.choice([16, 16, 16, 8])
    bus = _Bus()
    guid_base = 0x0c42a10300000000 + (i << 20)
    lines = ['<system version="1">']
    gpu_bus = []
    cpus_per_numa = 16

    def cpu_open(n: int) -> str:
        mask_bits = ((1 << cpus_per_numa) - 1) << (n * cpus_per_numa)
        words = []
        v = mask_bits
        while v or not words:
            words.append(f"{v & 0xFFFFFFFF:08x}")
            v >>= 32
        aff = ",".join(reversed(words))
        attrs = f'numaid="{n}" affinity="{aff}" arch="{arch}"'
        if arch == "x86_64":
            attrs += f' vendor="{vendor}" familyid="{fam}" modelid="{model}"'
        return f'  <cpu {attrs}>'

    def gpu_lines(b: str, dev: int, ind: str, links: list, c2c: Optional[tuple]) -> list:
        out = [f'{ind}<pci busid="{b}" class="0x030200" vendor="0x10de" device="{devid}" subsystem_vendor="0x10de" '
               f'subsystem_device="0x1{dev:03x}" link_speed="{_SPEED[gen]}" link_width="16">']
        out.append(f'{ind}  <gpu dev="{dev}" sm="{sm}" rank="{dev}" gdr="{gdr}">')
        for tgt, cnt, tcls in links:
            out.append(f'{ind}    <nvlink target="{tgt}" count="{cnt}" tclass="{tcls}"/>')
        if c2c:
            out.append(f'{ind}    <c2c bw="{c2c[0]}" count="{c2c[1]}"/>')
        out.append(f"{ind}  </gpu>")
        out.append(f"{ind}</pci>")
        return out

    nic_dev = [0]

    def nic_lines(ind: str, k: int) -> list:
        speed = nic_gbps * 1000
        guid = guid_base + k * 0x100
        b = bus.take()
        cls = "0x020700" if nic_gbps >= 100 else "0x020000"
        hdr = (f'{ind}<pci busid="{b}" class="{cls}" vendor="0x15b3" device="0x101d" subsystem_vendor="0x15b3" '
               f'subsystem_device="0x0040" link_speed="{_SPEED[min(gen, 5)]}" link_width="{nic_width}">')
        out = []
        if not dual:
            out += [hdr, f"{ind}  <nic>", _net(ind + "    ", f"mlx5_{nic_dev[0]}", nic_dev[0], speed, 1, guid, gdr),
                    f"{ind}  </nic>", f"{ind}</pci>"]
            nic_dev[0] += 1
        elif dual_style == "oneaddr":
            out += [hdr, f"{ind}  <nic>",
                    _net(ind + "    ", f"mlx5_{nic_dev[0]}", nic_dev[0], speed, 1, guid, gdr),
                    _net(ind + "    ", f"mlx5_{nic_dev[0] + 1}", nic_dev[0] + 1, speed, 2, guid, gdr),
                    f"{ind}  </nic>", f"{ind}</pci>"]
            nic_dev[0] += 2
        else:
            b2 = b[:-1] + "1"
            out += [hdr, f"{ind}  <nic>", _net(ind + "    ", f"mlx5_{nic_dev[0]}", nic_dev[0], speed, 1, guid, gdr),
                    f"{ind}  </nic>", f"{ind}</pci>"]
            out += [hdr.replace(b, b2), f"{ind}  <nic>",
                    _net(ind + "    ", f"mlx5_{nic_dev[0] + 1}", nic_dev[0] + 1, speed, 2, guid, gdr),
                    f"{ind}  </nic>", f"{ind}</pci>"]
            nic_dev[0] += 2
        return out

    # GPUs and NICs spread over NUMA nodes; switches per layout
    per_numa = [[] for _ in range(numas)]
    for g in range(ngpus):
        per_numa[min(numas - 1, g * numas // ngpus)].append(g)
    nic_numa = [[] for _ in range(numas)]
    if not socket_only:
        for k in range(n_nics):
            nic_numa[min(numas - 1, k * numas // n_nics)].append(k)
    for g in range(ngpus):
        gpu_bus.append(None)
    # assign bus ids in GPU order first so NVLink targets are known
    blocks = []
    for n in range(numas):
        gs, ks = per_numa[n], nic_numa[n]
        if layout == "flat" or not gs:
            blocks.append((n, "flat", [gs], [ks]))
        elif layout == "sw1":
            groups = [[g] for g in gs]
            kk = [[] for _ in groups]
            for j, k in enumerate(ks):
                kk[j % len(groups)].append(k)
            blocks.append((n, "sw", groups, kk))
        elif layout in ("sw2", "bcm"):
            groups = [gs[j:j + 2] for j in range(0, len(gs), 2)]
            kk = [[] for _ in groups]
            for j, k in enumerate(ks):
                kk[j % len(groups)].append(k)
            blocks.append((n, layout, groups, kk))
        else:
            groups = [gs[j:j + 4] for j in range(0, len(gs), 4)]
            kk = [[] for _ in groups]
            for j, k in enumerate(ks):
                kk[j % len(groups)].append(k)
            blocks.append((n, "twolevel", groups, kk))
    sw_bus = {}
    for n, kind, groups, kk in blocks:
        for gi, grp in enumerate(groups):
            if kind != "flat":
                sw_bus[(n, gi)] = bus.take()
            for g in grp:
                gpu_bus[g] = bus.take()
    nvs_target = "fffffff:ffff:ff" if rng.random() < 0.5 else "0000:ff:00.0"
    links_of = {g: [] for g in range(ngpus)}
    per = _NVL_PER_GPU[sm]
    if nvl == "nvswitch":
        for g in range(ngpus):
            links_of[g].append((nvs_target, per, "0x068000"))
    elif nvl == "pairs":
        cnt = {70: 2, 80: 12, 86: 4, 90: 6, 100: 18}.get(sm, 4)
        for g in range(0, ngpus - 1, 2):
            links_of[g].append((gpu_bus[g + 1], cnt, "0x030200"))
            links_of[g + 1].append((gpu_bus[g], cnt, "0x030200"))
    elif nvl == "mesh4":
        for g in range(ngpus):
            for h in range(ngpus):
                if g != h:
                    links_of[g].append((gpu_bus[h], 4, "0x030200"))
    elif nvl == "cubemesh":
        # DGX-1 hybrid cube-mesh: each GPU 6 links to 4 peers (two of them doubled)
        pairs = {(0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2, (1, 2): 2, (1, 3): 1, (1, 5): 2, (2, 3): 1, (2, 6): 2,
                 (3, 7): 2, (4, 5): 1, (4, 6): 1, (4, 7): 2, (5, 6): 2, (5, 7): 1, (6, 7): 1}
        for (a, b), c in pairs.items():
            links_of[a].append((gpu_bus[b], c, "0x030200"))
            links_of[b].append((gpu_bus[a], c, "0x030200"))
    if cpu_kind == "power9" and nvl != "none":
        for g in range(ngpus):
            links_of[g].append(("0000:00:00.0", 2, "0x068001"))
    c2c = (450000 // 10, 10) if cpu_kind == "grace" else None
    for n, kind, groups, kk in blocks:
        lines.append(cpu_open(n))
        for gi, grp in enumerate(groups):
            if kind == "flat":
                for g in grp:
                    lines += gpu_lines(gpu_bus[g], g, "    ", links_of[g], c2c)
                for k in kk[gi]:
                    lines += nic_lines("    ", k)
                continue
            sb = sw_bus[(n, gi)]
            ids = 'vendor="0x1000" device="0xc030" subsystem_vendor="0x1000" subsystem_device="0x00a5"' \
                if kind == "bcm" else 'vendor="0x10b5" device="0x9797" subsystem_vendor="0x10b5" subsystem_device="0x9797"'
            lines.append(f'    <pci busid="{sb}" class="0x060400" {ids} link_speed="{_SPEED[gen]}" link_width="16">')
            if kind == "twolevel" or kind == "bcm":
                for j, g in enumerate(grp):
                    sub = bus.take()
                    sids = ('vendor="0x1000" device="0xc030" subsystem_vendor="0x1000" subsystem_device="0x10a5"'
                            if kind == "bcm" else ids)
                    lines.append(f'      <pci busid="{sub}" class="0x060400" {sids} link_speed="{_SPEED[gen]}" '
                                 f'link_width="16">')
                    lines += gpu_lines(gpu_bus[g], g, "        ", links_of[g], c2c)
                    if j < len(kk[gi]):
                        lines += nic_lines("        ", kk[gi][j])
                    lines.append("      </pci>")
                for k in kk[gi][len(grp):]:
                    lines += nic_lines("      ", k)
            else:
                for g in grp:
                    lines += gpu_lines(gpu_bus[g], g, "      ", links_of[g], c2c)
                for k in kk[gi]:
                    lines += nic_lines("      ", k)
            lines.append("    </pci>")
        if socket_only and n == 0:
            lines += ["    <nic>", _net("      ", "eth0", 0, nic_gbps * 1000, 0, 0, 0), "    </nic>"]
        lines.append("  </cpu>")
    lines.append("</system>")
    name = f"m{i:03d}-{gname.lower()}x{ngpus}-{nvl}-{cpu_kind}{sockets}s{'-nps%d' % nps if nps > 1 else ''}-" \
           f"{layout}-g{gen}-{'eth' if socket_only else '%dx%dg%s' % (n_nics, nic_gbps, 'd' if dual else '')}"
    cases = [{"nodes": 1}, {"nodes": 2}]
    if rng.random() < 0.15:
        cases.append({"nodes": 4})
    if ngpus >= 4 and rng.random() < 0.25:
        sub = rng.choice([[0, 1], [0, 1, 2, 3], [0, 2, 4, 6][:ngpus // 2 + 1], [1, 3], list(range(ngpus))[::-1]])
        sub = [x for x in sub if x < ngpus]
        if len(set(sub)) == len(sub) and sub:
            cases.append({"nodes": rng.choice([1, 2]), "gpus": sub})
    if rng.random() < 0.14:
        env = rng.choice([{"NCCL_CROSS_NIC": "0"}, {"NCCL_CROSS_NIC": "1"}, {"NCCL_NET_DISABLE_INTRA": "1"},
                          {"NCCL_P2P_LEVEL": "SYS"}, {"NCCL_P2P_LEVEL": "PIX"}, {"NCCL_NVLS_ENABLE": "0"},
                          {"NCCL_NET_MERGE_LEVEL": "LOC"}, {"NCCL_P2P_DISABLE": "1"}])
        cases.append({"nodes": rng.choice([1, 2]), "env": env})
    return name, "\n".join(lines) + "\n", cases


def _net(ind: str, name: str, dev: int, speed: int, port: int, guid: int, gdr: int) -> str:
    return (f'{ind}<net name="{name}" dev="{dev}" speed="{speed}" port="{port}" latency="0.000000" '
            f'guid="{guid:#x}" maxconn="131072" gdr="{gdr}"/>')


def corpus(seed: int = SEED, n: int = N_MACHINES) -> list:
    rng = random.Random(seed)
    return [_machine(rng, i) for i in range(n)]


# --------------------------------------------------------------------------------------------
def fixture_inputs() -> list:
    """(name, pinned XML, original path or None) for the fixture XMLs and the bundled examples."""
    sys.path.insert(0, str(REPO))
    from gpucomm.planners.nccl.comm import pinned_xml
    from gpucomm.probes.errors import GpucommError
    from gpucomm.probes.examples import list_examples
    from gpucomm.probes.load import load_topology

    out = []
    for p in sorted((REPO / "fixtures" / "captures" / "ncclxml").glob("*.xml")):
        if p.read_text().lstrip().startswith("<graphs"):
            continue
        try:
            doc = load_topology(str(p))
            if not doc.get("gpus"):
                continue
            out.append((f"ncclxml-{p.stem}", pinned_xml(doc), p))
        except GpucommError:
            continue
    for name in list_examples():
        doc = load_topology(f"example:{name}")
        if not doc.get("gpus"):
            continue
        out.append((f"example-{name}", pinned_xml(doc), None))
    return out


_NON_X86_CPU = re.compile(r'(<cpu\b[^>]*\barch="(?:arm64|ppc64)")(?![^>]*\bvendor=)')


def native_build_xml(text: str) -> str:
    """The XML as an x86 build of NCCL must see it to act as NCCL built for the machine's own CPU.

    ncclsim is NCCL compiled for x86_64, and ncclTopoGetXmlFromCpu (xml.cc) fills a CPU node's
    missing vendor/familyid/modelid from the *build host's* CPUID inside ``#if defined(__x86_64__)``.
    On an arm64 or ppc64 topology it does that only for the CPUs of each rank's own GPU, so the ranks'
    XMLs differ and ncclTopoFuseXml duplicates those CPUs with their NICs (a second NET per NIC, every
    path to it PATH_DIS).  NCCL built for aarch64/ppc64 has no such block; pre-filling the three
    attributes makes the x86 build skip it too.  Our model is given the original XML."""
    return _NON_X86_CPU.sub(r'\1 vendor="native" familyid="0" modelid="0"', text)


def harness_env(settings: dict) -> dict:
    """The environment that makes ncclsim read NCCL_* settings as NCCL does.

    NCCL's ``NCCL_PARAM(name, env, default)`` (param.h) calls ``ncclLoadParam("NCCL_" env, ...)``, and
    NCCL's own ncclLoadParam looks that name up as it is; the harness's replacement
    (harness/stubs.cc) prefixes "NCCL_" once more, so every NCCL_PARAM setting (NCCL_CROSS_NIC,
    NCCL_NVLS_ENABLE, NCCL_NET_DISABLE_INTRA, NCCL_P2P_DISABLE, ...) would be read from
    ``NCCL_NCCL_<name>`` and silently left at its default; settings NCCL reads with ncclGetEnv
    (NCCL_P2P_LEVEL, NCCL_TOPO_FILE, ...) are read correctly.  Each setting is given under both names."""
    env = dict(settings)
    for k, v in settings.items():
        if k.startswith("NCCL_"):
            env["NCCL_" + k] = v
    return env


def run_ncclsim(binary: Path, xml: Path, case: dict) -> dict:
    from gpucomm.planners.nccl.judge import SIZES, compact

    text = xml.read_text()
    native = native_build_xml(text)
    if native != text:
        with tempfile.NamedTemporaryFile("w", suffix=".xml", delete=False) as f:
            f.write(native)
        try:
            return run_ncclsim(binary, Path(f.name), case)
        finally:
            os.unlink(f.name)
    cmd = [str(binary), "--json", "--nodes", str(case.get("nodes", 1)), "--size", ",".join(map(str, SIZES))]
    if case.get("gpus"):
        cmd += ["--gpus", ",".join(map(str, case["gpus"]))]
    cmd += case.get("flags", [])
    m = case.get("mnnvl")
    if m:
        cmd += ["--mnnvl-clique", str(m["clique"]), "--mnnvl-domain", str(m.get("domain") or m["clique"]),
                "--fabric-state", str(m.get("state", 3))]
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    env.update(harness_env(case.get("env") or {}))
    timeout = int(os.environ.get("NCCLSIM_TIMEOUT", "7200"))     # 144 GPUs on a busy machine: many minutes
    p = subprocess.run(cmd + [str(xml)], capture_output=True, text=True, env=env, timeout=timeout)
    if p.returncode != 0:
        msg = [ln for ln in p.stderr.splitlines() if ln.strip()]
        return {"error": (msg[-1] if msg else f"exit {p.returncode}")[:300]}
    return compact(json.loads(p.stdout))


def all_cases(binary: Optional[Path] = None) -> tuple:
    """Write the corpus and pinned inputs; return the case list."""
    cases = []
    (OUT / "corpus").mkdir(parents=True, exist_ok=True)
    (OUT / "inputs").mkdir(parents=True, exist_ok=True)
    for name, text, cs in corpus():
        path = OUT / "corpus" / f"{name}.xml"
        path.write_text(text)
        for c in cs:
            cases.append(dict(c, xml=f"corpus/{name}.xml", group="corpus"))
    for name, text, orig in fixture_inputs():
        path = OUT / "inputs" / f"{name}.xml"
        path.write_text(text)
        # a network plugin's latency (EFA: aws-ofi-nccl's 75 us) moves NCCL's choices most on many nodes
        plugin_latency = any(float(v) > 0 for v in re.findall(r'<net [^>]*\blatency="([0-9.]+)"', text))
        for nodes in (1, 2) + ((4, 16) if plugin_latency else ()):
            cases.append({"nodes": nodes, "xml": f"inputs/{name}.xml", "group": "examples" if name.startswith("example")
                          else "fixtures"})
    write_mnnvl_machines()
    return cases + mnnvl_cases()


# --------------------------------------------------------------------------------------------
# Multi-node NVLink: trays of fixtures/ncclsim/trays (and variants of them) in NVLink cliques
TRAYS = OUT / "trays"


def _xml_variant(text: str, drop: tuple = (), numa_minus1: bool = False) -> str:
    """A tray XML without the NICs named in ``drop`` (their PCI functions, and switches left empty), or
    with every NIC hung on a CPU of NUMA id -1 (firmware that reports no proximity for the NIC slots)."""
    sys.path.insert(0, str(REPO))
    from gpucomm.planners.nccl import ncclxml as X

    xml = X.parse(text)

    def prune(n) -> None:
        for c in list(n.subs):
            prune(c)
            nets = [x.get("name") for x in _walk(c) if x.name == "net"]
            gpus = [x for x in _walk(c) if x.name == "gpu"]
            if c.name == "pci" and not gpus and (not nets or all(x in drop for x in nets)):
                n.subs.remove(c)

    prune(xml.top())
    if numa_minus1:
        top = xml.top()
        cpus = [c for c in top.subs if c.name == "cpu"]
        other = X.XNode("cpu", top, X.NODE_OPEN)
        other.attrs = [[k, v] for k, v in cpus[0].attrs]
        other.set("numaid", "-1")
        other.set("affinity", "0000ffff,ffffffff,ffffffff,ffffffff,ffffffff")
        for c in cpus:
            for p in list(c.subs):
                if any(x.name == "nic" for x in _walk(p)):
                    c.subs.remove(p)
                    other.subs.append(p)
                    p.parent = other
        top.subs.insert(0, other)
    return X.dumps(xml)


def _walk(n):
    yield n
    for c in n.subs:
        yield from _walk(c)


def mnnvl_machines() -> list:
    """(name, XML text): the trays and the variants the MNNVL goldens run on."""
    gb200 = (TRAYS / "gb200-tray.xml").read_text()
    gb300 = (TRAYS / "gb300-tray.xml").read_text()
    return [("gb200", gb200), ("gb300", gb300), ("gh200", (TRAYS / "gh200-node.xml").read_text()),
            ("gb200-numa-1", _xml_variant(gb200, numa_minus1=True)),
            ("gb200-cx7", _xml_variant(gb200, drop=("mlx5_2", "mlx5_3", "mlx5_6", "mlx5_7"))),
            ("gb200-2nic", _xml_variant(gb200, drop=("mlx5_1", "mlx5_2", "mlx5_3", "mlx5_5", "mlx5_6", "mlx5_7"))),
            ("gb300-bond", _xml_variant(gb300, drop=("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")))]


def _mn(nodes: int, clique: int, domain: Optional[int] = None, state: int = 3, env: Optional[dict] = None,
        gpus: Optional[list] = None) -> dict:
    c = {"nodes": nodes, "mnnvl": {"clique": clique, "domain": domain or clique, "state": state}}
    if env:
        c["env"] = env
    if gpus:
        c["gpus"] = gpus
    return c


def mnnvl_cases() -> list:
    """The MNNVL cases: 1, 2, 3, 4, 8 and 18 trays in one clique, racks (cliques) joined by NICs,
    NVL36x2 (two cliques of 9 trays in one NVLink domain), NCCL_MNNVL_* settings, fabric states, GPU
    subsets, and tuning settings."""
    full = [_mn(1, 1, env={"NCCL_MNNVL_ENABLE": "1"}), {"nodes": 1}] + [_mn(k, k) for k in (2, 3, 4, 8, 18)]
    racks = [_mn(2, 1), _mn(4, 2), _mn(6, 3), _mn(8, 4), _mn(16, 8), _mn(36, 18)]
    nvl36 = [_mn(18, 9, 18), _mn(18, 9, 18, env={"NCCL_MNNVL_CROSS_CLIQUE": "1"}),
             _mn(18, 9, 18, env={"NCCL_MNNVL_CLIQUE_ID": "5"})]
    off = [_mn(2, 2, env={"NCCL_MNNVL_ENABLE": "0"}), _mn(8, 8, env={"NCCL_MNNVL_ENABLE": "0"}),
           _mn(4, 4, state=2), _mn(4, 2, env={"NCCL_MNNVL_UUID": "7"}), _mn(2, 2, env={"NCCL_CUMEM_ENABLE": "0"}),
           _mn(2, 2, env={"NCCL_P2P_LEVEL": "LOC"})]
    settings = [_mn(4, 2, env=e) for e in ({"NCCL_MNNVL_SCATTER_NETS_ENABLE": "0"}, {"NCCL_MNNVL_RAIL_PER_HOST": "1"},
                                           {"NCCL_CROSS_NIC": "0"}, {"NCCL_CROSS_NIC": "1"}, {"NCCL_PXN_DISABLE": "1"},
                                           {"NCCL_NVLS_ENABLE": "0"}, {"NCCL_NET_GDR_C2C": "0"})]
    subsets = [_mn(2, 2, gpus=[0, 1]), _mn(4, 2, gpus=[0, 2]), _mn(8, 8, gpus=[1, 3]), _mn(4, 4, gpus=[0])]
    tuning = [_mn(4, 4, env={"NCCL_ALGO": "Ring"}), _mn(8, 4, env={"NCCL_PROTO": "Simple"})]
    out = []
    for name, _text in mnnvl_machines():
        if name in ("gb200", "gb300"):
            cs = full + racks + nvl36 + off + settings + subsets + tuning
        elif name == "gh200":
            cs = [_mn(k, k) for k in (2, 4, 8, 16, 32)] + [_mn(4, 2), _mn(8, 4), _mn(16, 4),
                                                           _mn(4, 4, env={"NCCL_MNNVL_ENABLE": "0"})]
        else:
            cs = [{"nodes": 1}, _mn(2, 2), _mn(4, 2), _mn(8, 4), _mn(8, 2), _mn(4, 2, env={"NCCL_CROSS_NIC": "0"}),
                  _mn(4, 2, env={"NCCL_MNNVL_SCATTER_NETS_ENABLE": "0"})]
        for c in cs:
            out.append(dict(c, xml=f"mnnvl/{name}.xml", group="mnnvl"))
    return out


def write_mnnvl_machines() -> None:
    (OUT / "mnnvl").mkdir(parents=True, exist_ok=True)
    for name, text in mnnvl_machines():
        (OUT / "mnnvl" / f"{name}.xml").write_text(text)


def case_id(c: dict) -> str:
    parts = [c["xml"], f"n{c['nodes']}"]
    if c.get("gpus"):
        parts.append("g" + "-".join(map(str, c["gpus"])))
    m = c.get("mnnvl")
    if m:
        parts.append(f"mnnvl{m['clique']}" + (f"/{m['domain']}" if m.get("domain", m["clique"]) != m["clique"] else "")
                     + (f"/state{m['state']}" if m.get("state", 3) != 3 else ""))
    for k, v in sorted((c.get("env") or {}).items()):
        parts.append(f"{k}={v}")
    return ":".join(parts)


def _agree_one(c: dict) -> tuple:
    sys.path.insert(0, str(REPO))
    from gpucomm.planners.nccl import judge

    model = judge.model_case((OUT / c["xml"]).read_text(), c)
    case, sizes = judge.compare_case(c["golden"], model)
    return case_id(c), c["group"], case, sizes, model.get("error"), c["golden"].get("error")


def agree(args) -> int:
    """The agreement table of our model against the stored goldens, and the differing cases."""
    sys.path.insert(0, str(REPO))
    from gpucomm.planners.nccl import judge

    stored = json.loads((OUT / "goldens.json").read_text())
    cases = [c for c in stored["cases"] if not args.group or c["group"] == args.group]
    cases = cases[:: max(1, args.stride)][: args.limit or None]
    if args.jobs > 1:
        import multiprocessing

        with multiprocessing.Pool(args.jobs) as pool:
            out = pool.map(_agree_one, cases, chunksize=1)
    else:
        out = [_agree_one(c) for c in cases]
    print(judge.format_table(judge.agreement([(o[2], o[3]) for o in out]), f"{len(out)} cases"))
    for group in sorted({o[1] for o in out}):
        sub = [(o[2], o[3]) for o in out if o[1] == group]
        print()
        print(judge.format_table(judge.agreement(sub), f"{group}: {len(sub)} cases"))
    for o in out:
        bad = judge.differing(o[2], o[3])
        if bad:
            print(f"differs {o[0]}: {', '.join(bad)}" + (f" (model: {o[4]})" if o[4] else "")
                  + (f" (NCCL: {o[5]})" if o[5] else ""))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(out))
    return 0


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="recompute and compare with fixtures/ncclsim/goldens.json")
    ap.add_argument("--ncclsim", help="use this ncclsim binary (built with the addition) instead of building one")
    ap.add_argument("--limit", type=int, default=0, help="only the first N cases (for a quick check)")
    ap.add_argument("--stride", type=int, default=1, help="with --check: every Nth stored case")
    ap.add_argument("--agree", action="store_true", help="no build: our model against the stored goldens")
    ap.add_argument("--jobs", type=int, default=1, help="with --agree: worker processes")
    ap.add_argument("--json", dest="json_out", help="with --agree: write the per-case results here")
    ap.add_argument("--group", help="compute only this group's goldens (corpus, examples, fixtures, mnnvl), keeping "
                    "the others and this group's stored ones (resumable); with --agree: only this group")
    ap.add_argument("--force", action="store_true", help="with --group: recompute the group's stored goldens too")
    args = ap.parse_args(argv)
    if args.agree:
        return agree(args)
    with tempfile.TemporaryDirectory() as tmp:
        binary = Path(args.ncclsim) if args.ncclsim else build_ncclsim(Path(tmp) / "ncclsim")
        if args.check:
            stored = json.loads((OUT / "goldens.json").read_text())
            cases = stored["cases"][:: max(1, args.stride)][: args.limit or None]
            bad = []
            for c in cases:
                got = run_ncclsim(binary, OUT / c["xml"], c)
                if got != c["golden"]:
                    bad.append(case_id(c))
            print(f"{len(cases) - len(bad)}/{len(cases)} goldens current")
            for b in bad[:20]:
                print("  stale:", b)
            return 1 if bad else 0
        if args.group:
            # only this group's cases; the stored goldens of other groups (and of this group's cases
            # computed before, unless --force) are kept: a long run can be resumed
            stored = json.loads((OUT / "goldens.json").read_text())["cases"]
            if args.group == "mnnvl":
                write_mnnvl_machines()
                mine = mnnvl_cases()
            else:
                mine = [c for c in all_cases() if c["group"] == args.group]
            old = {case_id(c): c["golden"] for c in stored if c["group"] == args.group}
            cases = [c for c in stored if c["group"] != args.group] + mine
            todo = [c for c in mine if args.force or case_id(c) not in old]
            for c in mine:
                if case_id(c) in old and not args.force:
                    c["golden"] = old[case_id(c)]
        else:
            cases = all_cases()
            todo = cases
        if args.limit:
            todo = todo[: args.limit]
        for k, c in enumerate(todo):
            c["golden"] = run_ncclsim(binary, OUT / c["xml"], c)
            print(f"{k + 1}/{len(todo)} {case_id(c)}", file=sys.stderr)
            if args.group and (k + 1) % 5 == 0:
                _save([c for c in cases if "golden" in c])
        cases = [c for c in cases if "golden" in c]
        _save(cases)
        errors = sum(1 for c in cases if "error" in c["golden"])
        print(f"{len(cases)} cases ({errors} where NCCL fails to initialise) -> {OUT / 'goldens.json'}")
    return 0


def _save(cases: list) -> None:
    doc = {"nccl": "2.30.7", "ncclsim": "tools/ncclsim (the harness of ../shared/tools/ncclsim + AllGather/"
           "ReduceScatter rows + MNNVL cliques)", "sizes": "8 B .. 8 GiB, powers of two", "seed": SEED, "cases": cases}
    text = json.dumps(doc, separators=(",", ":"), sort_keys=True)
    tmpf = OUT / "goldens.json.tmp"
    tmpf.write_text(text + "\n")
    tmpf.replace(OUT / "goldens.json")


if __name__ == "__main__":
    sys.exit(main())
