"""NCCL topology XML import/export (probes/formats/nccl_xml.py) on the real files of fixtures/captures/ncclxml.

Exact values below were read off the capture files by hand (see the comments next to each)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import CAPTURES, run_cli
from gpucomm.probes import facts
from gpucomm.probes.errors import GpucommError, InputError, TopologyError
from gpucomm.probes.model import gpu_id, nic_id, schema_path
from gpucomm.probes.formats.nccl_xml import (
    bcm_device_id,
    bcm_gen,
    export_nccl_xml,
    flatten_bcm,
    parse_link_speed,
    parse_nccl_graph,
    parse_nccl_xml,
    pci_class_type,
    write_nccl_xml,
)

XML_DIR = CAPTURES / "ncclxml"
ALL_XML = sorted(p.name for p in XML_DIR.glob("*.xml"))
GRAPH_XML = ["azure-ncv4-graph.xml", "panlichen-rtx3090-graph.xml"]
TOPO_XML = [n for n in ALL_XML if n not in GRAPH_XML]


def _text(name: str) -> str:
    return (XML_DIR / name).read_text(encoding="utf-8")


_DOCS: dict = {}


def _doc(name: str, flatten: bool = True) -> dict:
    """Parsed once per session (parsing is pure); callers must not mutate."""
    key = (name, flatten)
    if key not in _DOCS:
        _DOCS[key] = parse_nccl_xml(_text(name), str(XML_DIR / name), flatten=flatten)
    return _DOCS[key]


@pytest.fixture(scope="module")
def validator():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(Path(schema_path()).read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


def _gpu(doc: dict, index: int) -> dict:
    return next(g for g in doc["gpus"] if g["index"] == index)


def _sw(doc: dict, sid: str) -> dict:
    return next(s for s in doc["switches"] if s["id"] == sid)


# --------------------------------------------------------------------------------------------
# A strict reader that follows NCCL's own parser (xml.cc:29-247 xmlGetChar/xmlGetValue/xmlGetToken/
# xmlGetNode/xmlLoadSub) plus NCCL's writer style (ncclTopoDumpXmlRec: 2-space indent, one element
# per line, <x/> when childless).  It is used to check every export.
class NcclXmlError(Exception):
    pass


def nccl_strict_parse(text: str) -> dict:
    """Parse like NCCL and return {tag, attrs, children}; raise NcclXmlError where NCCL fails or
    where the text departs from NCCL's writer style."""
    pos = 0
    n = len(text)

    def getc() -> str:
        nonlocal pos
        if pos >= n:
            raise NcclXmlError("Unexpected EOF")
        c = text[pos]
        pos += 1
        return c

    def get_value() -> tuple[str, str]:
        c = getc()
        if c not in "\"'":
            raise NcclXmlError("Expected (double) quote")  # INT_OK is not defined in NCCL builds
        quote, out = c, []
        while True:
            c = getc()
            if c == quote:
                break
            out.append(c)
            if len(out) >= 254:  # MAX_STR_LEN-1 reached, counting the closing quote
                raise NcclXmlError("value too long")
        return "".join(out), getc()

    def get_token(want_value: bool) -> tuple[str, str | None, str]:
        out = []
        while True:
            c = getc()
            if c == "=":
                if not want_value:
                    raise NcclXmlError(f"Unexpected value with name {''.join(out)}")
                value, last = get_value()
                return "".join(out), value, last
            if c in " >/\n\r":
                return "".join(out), None, c
            out.append(c)
            if len(out) >= 255:
                raise NcclXmlError("name too long")

    def get_node() -> dict | None:
        nonlocal pos
        c = " "
        while c in " \n\r":
            if pos >= n:
                return None
            c = getc()
        if c != "<":
            raise NcclXmlError(f"expecting '<', got {c!r}")
        name, _, c = get_token(False)
        if name.startswith("!--"):
            end = text.find("-->", pos - len(name) + 3 - 1)
            if end < 0:
                raise NcclXmlError("unterminated comment")
            pos = end + 3
            return get_node()
        if name == "" and c == "/":
            name, _, c = get_token(False)
            if c != ">":
                raise NcclXmlError(f"unexpected trailing {c!r} in closing tag {name}")
            return {"type": "close", "tag": name}
        attrs: dict = {}
        while c == " ":
            key, value, c = get_token(True)
            if key == "" or value is None:
                # NCCL would store an empty attribute here: not its writer's style.
                raise NcclXmlError(f"empty attribute in <{name}> (extra space?)")
            if key in attrs:
                raise NcclXmlError(f"duplicate attribute {key}")
            attrs[key] = value
        if len(attrs) > 16:
            raise NcclXmlError("more than 16 attributes (NCCL ignores the rest)")
        kind = "open"
        if c == "/":
            kind = "single"
            _, _, c = get_token(False)
        if c != ">":
            raise NcclXmlError(f"expected >, got {c!r}")
        return {"type": kind, "tag": name, "attrs": attrs}

    def load_sub(head: dict | None) -> list:
        kids = []
        while True:
            node = get_node()
            if node is None:
                if head is not None:
                    raise NcclXmlError(f"unterminated {head['tag']}")
                return kids
            if node["type"] == "close":
                if head is None or node["tag"] != head["tag"]:
                    raise NcclXmlError(f"XML Mismatch : {head and head['tag']} / {node['tag']}")
                return kids
            el = {"tag": node["tag"], "attrs": node["attrs"], "children": []}
            if node["type"] == "open":
                el["children"] = load_sub(el)
                if not el["children"]:
                    raise NcclXmlError(f"<{el['tag']}></{el['tag']}> instead of <{el['tag']}/>")
            kids.append(el)

    if "\t" in text:
        raise NcclXmlError("tab character")
    if "<?" in text:
        raise NcclXmlError("'<?' (NCCL fails with: expected >, got '?')")
    tops = load_sub(None)
    systems = [t for t in tops if t["tag"] == "system"]
    if len(systems) != 1:
        raise NcclXmlError("expected exactly one <system>")
    # Writer style: every line is one element at 2*depth spaces.
    depth = 0
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        indent = len(line) - len(stripped)
        if stripped.startswith("</"):
            depth -= 1
        if indent != 2 * depth:
            raise NcclXmlError(f"indentation {indent} at depth {depth}: {line.strip()[:40]}")
        if not stripped.startswith("</") and not stripped.endswith("/>"):
            depth += 1
        if stripped.count("<") != 1:
            raise NcclXmlError(f"more than one element on a line: {line.strip()[:40]}")
    _check_required(systems[0])
    return systems[0]


_BDF = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def _check_required(system: dict) -> None:
    """Attributes NCCL requires when it loads the file (xml.cc/topo.cc xmlGetAttr* without default)."""
    if system["attrs"].get("version") != "1":
        raise NcclXmlError("system version must be 1")

    def walk(el: dict, parent: str) -> None:
        a, tag = el["attrs"], el["tag"]
        need = {"cpu": ["numaid"], "pci": ["busid"], "gpu": ["dev", "rank"], "nvlink": ["target", "count", "tclass"],
                "net": ["name", "dev"], "c2c": ["bw", "count"], "pcilink": ["target"]}.get(tag, [])
        for k in need:
            if k not in a:
                raise NcclXmlError(f"<{tag}> lacks {k}")
        allowed = {"system": {"cpu"}, "cpu": {"pci", "nic"}, "pci": {"pci", "gpu", "nic", "pcilink"},
                   "gpu": {"nvlink", "c2c"}, "nic": {"net"}}
        if tag not in allowed.get(parent, set()):
            raise NcclXmlError(f"<{tag}> under <{parent}>")
        if tag == "pci":
            if not _BDF.match(a["busid"]):
                raise NcclXmlError(f"busid {a['busid']!r} is not a lower-case BDF")
            if el["children"] and "class" not in a:
                raise NcclXmlError(f"<pci busid={a['busid']}> with children lacks class")
            if any(c["tag"] in ("gpu", "nic") for c in el["children"]):
                for k in ("class", "link_speed", "link_width"):
                    if k not in a:
                        raise NcclXmlError(f"device <pci busid={a['busid']}> lacks {k}")
            if a.get("link_speed") and not parse_link_speed(a["link_speed"])[1]:
                raise NcclXmlError(f"link_speed {a['link_speed']!r} not in NCCL's table")
        for k in ("dev", "rank", "sm", "count", "numaid", "gdr", "speed", "port"):
            if k in a and not re.fullmatch(r"-?\d+", a[k]):
                raise NcclXmlError(f"<{tag} {k}={a[k]!r}> is not an integer")
        for c in el["children"]:
            walk(c, tag)

    for c in system["children"]:
        walk(c, "system")


def test_strict_validator_rejects_what_nccl_rejects():
    good = '<system version="1">\n  <cpu numaid="0" arch="x86_64"/>\n</system>\n'
    assert nccl_strict_parse(good)["children"][0]["attrs"]["numaid"] == "0"
    bad = [
        '<?xml version="1.0"?>\n' + good,                                     # header
        good.replace("  <cpu", "\t<cpu"),                                      # tab between elements
        good.replace('numaid="0" arch', 'numaid="0"\n arch'),                  # attribute on the next line
        good.replace('numaid="0"', "numaid=0"),                                # unquoted value
        good.replace('numaid="0" ', 'numaid="0"  '),                           # double space
        good.replace("<cpu numaid=\"0\" arch=\"x86_64\"/>", "<cpu numaid=\"0\"></cpu>"),  # empty open/close
        good.replace("</system>", "</sys>"),                                   # mismatch
        good.replace('arch="x86_64"', 'arch="' + "x" * 260 + '"'),             # value too long
        good.replace("  <cpu", "   <cpu"),                                     # indentation
        good.replace('<cpu numaid="0"', '<cpu'),                               # missing numaid
    ]
    for text in bad:
        with pytest.raises(NcclXmlError):
            nccl_strict_parse(text)


def test_strict_validator_accepts_nccl_own_dumps():
    """NCCL's dumps (written by ncclTopoDumpXmlRec) pass; only the blank first line of the OCI
    file, which NCCL skips too, has to go -- and 'latency', 'maxconn' etc. are fine extras."""
    for name in ("oci-oke-BM.GPU4.8.xml", "panlichen-rtx3090-8gpu-topo.xml", "azure-ncv4-topo.xml"):
        nccl_strict_parse(_text(name).lstrip("\n"))


# --------------------------------------------------------------------------------------------
# Every capture imports and validates
@pytest.mark.parametrize("name", ALL_XML)
def test_every_file_imports_schema_valid(name, validator):
    doc = _doc(name)
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, f"{name}: {errors[0].message} at {list(errors[0].path)}"
    assert doc["host"]["provenance"] == "nccl-xml"
    assert json.loads(json.dumps(doc, sort_keys=True)) == doc


@pytest.mark.parametrize("name", TOPO_XML)
def test_links_and_parents_reference_known_nodes(name):
    doc = _doc(name)
    ids = {gpu_id(g) for g in doc["gpus"]} | {nic_id(n) for n in doc["nics"]} | {s["id"] for s in doc["switches"]}
    cpus = {f"CPU{n['id']}" for n in doc["numa_nodes"]} | {"CPU-1"}
    for link in doc["links"]:
        assert link["a"] in ids | cpus and link["b"] in ids | cpus, link
        assert link["bw_GBps"] > 0
    for rec in [*doc["gpus"], *doc["nics"], *doc["switches"], *doc.get("pci_devices", [])]:
        if rec.get("kind") == "nvswitch" and rec.get("parent") is None:
            continue
        assert rec["parent"] in ids | cpus, rec
    # the matrix is square over GPUs + NICs and symmetric (a tree has no MIG asymmetry)
    keys = [f"GPU{g['index']}" for g in doc["gpus"]] + [n["name"] for n in doc["nics"]]
    assert sorted(doc["matrix"]) == sorted(keys)
    for a in keys:
        assert doc["matrix"][a][a] == "X"
        for b in keys:
            assert doc["matrix"][a][b] == doc["matrix"][b][a]
            assert doc["matrix"][a][b] != "NODE"  # NCCL has no host bridges


# --------------------------------------------------------------------------------------------
# Exact checks per file
def test_oci_h100_dump():
    doc = _doc("oci-H100-topology.xml")
    assert [g["index"] for g in doc["gpus"]] == list(range(8))
    assert {g["compute_capability"] for g in doc["gpus"]} == {"9.0"}
    assert {g["arch"] for g in doc["gpus"]} == {"hopper"}
    assert _gpu(doc, 0)["pci_bus_id"] == "0000:0f:00.0" and _gpu(doc, 7)["pci_bus_id"] == "0000:d8:00.0"
    assert _gpu(doc, 0)["numa_node"] == 0 and _gpu(doc, 4)["numa_node"] == 1
    # affinity="00000000,000000ff,ffffffff,ffff0000,00000000,00ffffff,ffffffff" -> 0-55,112-167
    assert _gpu(doc, 0)["cpu_affinity"] == "0-55,112-167"
    assert len(doc["nics"]) == 16 and doc["nics"][0]["name"] == "mlx5_0"
    mlx0 = next(n for n in doc["nics"] if n["name"] == "mlx5_0")
    assert mlx0["pci_bus_id"] == "0000:0c:00.0" and mlx0["ports"] == [{"port": 1, "state": "ACTIVE", "rate_gbps": 180.0}]
    # NCCL lists both ports of the card under 0c:00.0 (multi-port merge); each NIC keeps its own id
    mlx1 = next(n for n in doc["nics"] if n["name"] == "mlx5_1")
    assert (mlx1["pci_bus_id"], mlx1["nccl_busid"], mlx1["ports"][0]["port"]) == ("0000:0c:00.1", "0000:0c:00.0", 2)
    assert len({nic_id(n) for n in doc["nics"]}) == 16
    # guid="0x9a70500003ae6d94" is ibverbs' big-endian GUID printed little-endian: 94:6d:ae is Mellanox's OUI
    assert mlx0["guid"] == mlx0["sys_image_guid"] == "946d:ae03:0050:709a"
    assert mlx0["nccl_dev"] == 0 and mlx0["gdr"] == 1
    m = doc["matrix"]
    assert m["GPU0"]["mlx5_0"] == "PIX" and m["GPU0"]["mlx5_1"] == "PIX"   # after BCM Gen5 flattening
    assert m["GPU0"]["mlx5_3"] == "PHB" and m["GPU0"]["mlx5_9"] == "SYS"
    assert all(m["GPU0"][f"GPU{i}"] == "NV18" for i in range(1, 8))         # 5+5+4+4 links to 4 NVSwitches
    nvs = sorted(s["id"] for s in doc["switches"] if s["kind"] == "nvswitch")
    assert nvs == ["0000:1a:00.0", "0000:1b:00.0", "0000:1c:00.0", "0000:1d:00.0"]
    l = next(l for l in doc["links"] if l["a"] == "0000:0f:00.0" and l["b"] == "0000:1c:00.0")
    assert l["kind"] == "nvlink" and l["count"] == 5 and l["bw_GBps"] == pytest.approx(5 * 20.6)
    up = next(l for l in doc["links"] if l["kind"] == "pcie" and l["a"] == "0000:0f:00.0")
    assert up["b"] == "0000:08:00.0" and (up["gen"], up["width"], up["bw_GBps"]) == (5, 16, 48.0)
    assert _gpu(doc, 0)["parent"] == "0000:08:00.0"
    assert _gpu(doc, 0)["raw_parent"] == "0000:0d:00.0"
    # Sapphire Rapids (family 6, model 143 = 0x8F): NCCL's SRP_QPI_BW = 22
    smp = [l for l in doc["links"] if l["kind"] == "smp"]
    assert [(l["a"], l["b"], l["bw_GBps"]) for l in smp] == [("CPU0", "CPU1", 22.0)]
    assert sum(1 for s in doc["switches"] if s["kind"] == "pcie") == 8       # 24 before flattening
    assert any("Broadcom PEX Gen5" in w for w in doc["warnings"])


def test_oci_h100_without_flattening_is_pxb():
    doc = _doc("oci-H100-topology.xml", flatten=False)
    assert doc["matrix"]["GPU0"]["mlx5_0"] == "PXB"
    assert sum(1 for s in doc["switches"] if s["kind"] == "pcie") == 24
    assert _gpu(doc, 0)["parent"] == "0000:0d:00.0"


def test_flatten_bcm_is_a_pure_function_equal_to_import_flattening():
    import copy

    from gpucomm.probes.matrix import compute_matrix

    for name in ("oci-H100-topology.xml", "oci-oke-BM.GPU4.8.xml", "azure-ndv4-topo.xml"):
        doc = copy.deepcopy(_doc(name, flatten=False))
        doc["warnings"] = []
        flatten_bcm(doc)
        compute_matrix(doc)
        ref = _doc(name)
        assert doc["matrix"] == ref["matrix"], name
        assert sorted(s["id"] for s in doc["switches"]) == sorted(s["id"] for s in ref["switches"]), name
        assert {gpu_id(g): g["parent"] for g in doc["gpus"]} == {gpu_id(g): g["parent"] for g in ref["gpus"]}
    # idempotent: a second pass changes nothing (flattened switches are marked, as NCCL's device |= 0xffff)
    doc = copy.deepcopy(_doc("oci-oke-BM.GPU4.8.xml"))
    before = json.dumps(doc, sort_keys=True)
    flatten_bcm(doc)
    assert json.dumps(doc, sort_keys=True) == before


def test_oci_oke_a100_bcm_gen4_flattening():
    """BM.GPU4.8 (DGX-A100-like): 0xc010 switches with subsystem 1000:a032 / 1000:a096 are Gen4 BCM
    and flatten level by level; the 10de:13b8 switches above each GPU are not BCM (subsystem vendor
    0x10de) and stay."""
    flat, raw = _doc("oci-oke-BM.GPU4.8.xml"), _doc("oci-oke-BM.GPU4.8.xml", flatten=False)
    ids = {s["id"] for s in flat["switches"] if s["kind"] == "pcie"}
    # 30 bridges in the file, 22 of them 1000:c010 with subsystem 1000:axxx; per NUMA node the
    # merges are 03,0a,11 | 42,46,49,4d | 81,88,8e | bd,c1,c4,d2 = 14
    assert len([s for s in raw["switches"] if s["kind"] == "pcie"]) == 30
    assert len(ids) == 16
    # 01 absorbs 03; then 05 (now under 01) is scanned and absorbs 0a and 11 (0d, 13 are 10de:13b8)
    assert "0000:03:00.0" not in ids and "0000:0a:00.0" not in ids and "0000:11:00.0" not in ids
    assert _sw(flat, "0000:05:00.0")["parent"] == "0000:01:00.0"
    assert _sw(flat, "0000:0d:00.0")["parent"] == "0000:05:00.0"
    assert _sw(flat, "0000:01:00.0")["bcm_gen"] == 4
    assert [m["id"] for m in _sw(flat, "0000:05:00.0")["bcm_merged"]] == ["0000:0a:00.0", "0000:11:00.0"]
    nic18 = next(n for n in flat["nics"] if n["name"] == "mlx5_18")
    assert nic18["parent"] == "0000:05:00.0"
    # NIC mlx5_18 (0c, under 0a) and mlx5_26 (16, under 11) end up under the same NCCL PCI node
    assert raw["matrix"]["mlx5_18"]["mlx5_26"] == "PXB" and flat["matrix"]["mlx5_18"]["mlx5_26"] == "PIX"
    # each GPU sits under its own 10de:13b8 switch, so GPU<->NIC stays PXB either way (DGX A100 shows PXB too)
    assert flat["matrix"]["GPU0"]["mlx5_18"] == "PXB" and flat["matrix"]["GPU0"]["GPU1"] == "NV12"
    assert flat["matrix"]["GPU0"]["mlx5_28"] == "SYS"
    l = next(l for l in flat["links"] if l["a"] == "0000:0f:00.0" and l["b"] == "0000:ca:00.0")
    assert l["count"] == 2 and l["bw_GBps"] == pytest.approx(40.0)    # sm80: 20 GB/s per link
    assert {n["id"] for n in flat["numa_nodes"]} == {1, 3, 5, 7}
    assert next(l for l in flat["links"] if l["kind"] == "smp")["bw_GBps"] == 16.0   # AMD_BW


def test_bcm_gen_rules():
    ids = lambda v, d, sv, sd: bcm_device_id({"vendor": v, "device": d, "subsystem_vendor": sv, "subsystem_device": sd})
    assert ids("0x1000", "0xc030", "0x1000", "0x0072") == 0x1000C03010000072
    assert bcm_gen(ids("0x1000", "0xc030", "0x1000", "0x0072"), 0) == 5
    assert bcm_gen(ids("0x1000", "0xc030", "0x1000", "0x1003"), 1) == 5
    assert bcm_gen(ids("0x1000", "0xc030", "0x1000", "0x1003"), 0) == 0   # a sub-switch is never a root
    assert bcm_gen(ids("0x1000", "0xc010", "0x1000", "0xa032"), 0) == 4
    assert bcm_gen(ids("0x1000", "0xc010", "0x1000", "0xa096"), 1) == 4
    assert bcm_gen(ids("0x1000", "0xc010", "0x10de", "0x13b8"), 1) == 0
    assert bcm_gen(ids("0x1000", "0xc030", "0x15d9", "0x1d2a"), 0) == 0   # Supermicro subsystem (nccl-tests#256)
    assert bcm_gen(ids("0x1000", "0xc010", "0x1000", "0xa032") | 0xFFFF, 0) == 0  # NCCL's "already merged" mark
    assert bcm_device_id({}) == 0


def test_flatten_bcm_parent_sub_switch_like_nccl():
    """NCCL scans all links of a Gen5 level-0 switch, including its uplink: a level-1 parent is
    absorbed too and the switch takes its place."""
    from gpucomm.probes.model import link_record, new_document, switch_record

    def sw(i, sub, parent):
        # flat id fields, as the sysfs probe writes them
        return switch_record(i, "pcie", pci_bus_id=i, parent=parent, numa_node=0, gen=5, width=16,
                             vendor="0x1000", device="0xc030", subsystem_vendor="0x1000", subsystem_device=sub)

    doc = new_document("nccl-xml")
    doc["switches"] = [sw("0000:01:00.0", "0x1001", "CPU0"), sw("0000:02:00.0", "0x0072", "0000:01:00.0"),
                       sw("0000:03:00.0", "0x1002", "0000:02:00.0")]
    doc["links"] = [link_record("0000:01:00.0", "CPU0", "pcie", 48, gen=5, width=16),
                    link_record("0000:02:00.0", "0000:01:00.0", "pcie", 48, gen=5, width=16),
                    link_record("0000:03:00.0", "0000:02:00.0", "pcie", 48, gen=5, width=16)]
    flatten_bcm(doc)
    assert [s["id"] for s in doc["switches"]] == ["0000:02:00.0"]
    assert doc["switches"][0]["parent"] == "CPU0"
    assert sorted((l["a"], l["b"]) for l in doc["links"]) == [("0000:02:00.0", "CPU0")]


def test_azure_ndv4_fake_bridges_pair_gpus_with_nics():
    doc = _doc("azure-ndv4-topo.xml")
    m = doc["matrix"]
    assert _gpu(doc, 0)["pci_bus_id"] == "0001:00:00.0" and _gpu(doc, 1)["pci_bus_id"] == "0002:00:00.0"
    assert m["GPU0"]["GPU1"] == "PIX" and m["GPU0"]["0101:00:00.0"] == "PIX" and m["GPU0"]["0102:00:00.0"] == "PIX"
    assert m["GPU0"]["GPU2"] == "SYS" and m["GPU0"]["0103:00:00.0"] == "SYS"
    assert m["GPU2"]["0103:00:00.0"] == "PIX" and m["GPU6"]["0107:00:00.0"] == "PIX"
    assert _gpu(doc, 0)["parent"] == "ffff:ff:02.0" and _sw(doc, "ffff:ff:02.0")["parent"] == "CPU1"
    assert all(g["compute_capability"] is None for g in doc["gpus"])
    assert any("indices inferred from PCI bus order" in w for w in doc["warnings"])
    pcie = next(l for l in doc["links"] if l["a"] == "0001:00:00.0")
    assert (pcie["gen"], pcie["width"], pcie["bw_GBps"]) == (4, 16, 24.0)   # "16 GT/s" x16


def test_azure_ndv4_gpu_indices_match_real_nvidia_smi():
    """The skeleton lists 0003/0004 under NUMA 0 first.  Real nvidia-smi on ND A100 v4
    (captures/topo/85) shows GPU0/1 on NUMA 1, GPU2/3 on 0, GPU4/5 on 3, GPU6/7 on 2 -- PCI
    bus order, which is what the importer infers."""
    smi = (CAPTURES / "topo" / "85_a100-sxm4-80gb-x8_9nic_azure-nd-a100-v4_esc.txt").read_text(encoding="utf-8")
    smi_numa = {}
    for line in smi.splitlines():
        toks = line.split()
        if toks and re.fullmatch(r"GPU\d+", toks[0]):
            smi_numa[int(toks[0][3:])] = int(toks[-2])
    doc = _doc("azure-ndv4-topo.xml")
    assert {g["index"]: g["numa_node"] for g in doc["gpus"]} == smi_numa == {0: 1, 1: 1, 2: 0, 3: 0, 4: 3, 5: 3, 6: 2, 7: 2}


def test_azure_ndv5_one_gpu_one_nic_per_bridge():
    doc = _doc("azure-ndv5-topo.xml")
    m = doc["matrix"]
    assert m["GPU0"]["0101:00:00.0"] == "PIX" and m["GPU0"]["GPU1"] == "PHB" and m["GPU3"]["0104:00:00.0"] == "PIX"
    assert _gpu(doc, 3)["pci_bus_id"] == "0008:00:00.0" and _gpu(doc, 4)["numa_node"] == 1
    assert next(l for l in doc["links"] if l["a"] == "0001:00:00.0")["gen"] == 5


def test_aws_p5_prefix_matched_link_speed_is_gen5():
    doc = _doc("aws-p5.48xl-topo.xml")
    assert parse_link_speed("32 GT/s PCIe/s") == (5, True)
    devs = [d for d in doc["pci_devices"] if d["role"] == "other"]
    assert len(devs) == 32 and {(d["gen"], d["width"]) for d in devs} == {(5, 16)}
    assert {d["class"] for d in devs} == {None}
    assert len(doc["switches"]) == 8 and doc["gpus"] == [] and doc["nics"] == []
    assert {d["role"] for d in doc["pci_devices"]} == {"other", "switch_up"} and len(doc["pci_devices"]) == 40
    assert next(d for d in devs if d["bdf"] == "0000:4f:00.0")["parent"] == "0000:45:00.0"
    assert any("no class" in w for w in doc["warnings"])
    assert doc["host"]["cpu_vendor"] == "AuthenticAMD"


def test_aws_p4d_bare_gpus_and_efa_nics():
    doc = _doc("aws-p4d-24xl-topo.xml")
    assert [g["pci_bus_id"] for g in doc["gpus"]][:2] == ["0000:10:1c.0", "0000:10:1d.0"]
    assert [n["name"] for n in doc["nics"]] == ["0000:10:1b.0", "0000:20:1b.0", "0000:90:1b.0", "0000:a0:1b.0"]
    m = doc["matrix"]
    assert m["GPU0"]["GPU1"] == "PIX" and m["GPU0"]["0000:10:1b.0"] == "PIX" and m["GPU0"]["GPU2"] == "PHB"
    assert m["GPU0"]["GPU4"] == "SYS"
    assert _gpu(doc, 0)["pcie"]["gen"] == 3                            # "8 GT/s"
    assert next(l for l in doc["links"] if l["kind"] == "smp")["bw_GBps"] == 10.0   # Skylake (model 85 = 0x55)
    assert _gpu(doc, 4)["cpu_affinity"] == "24-47,72-95"               # "ffffff00,0000ffff,ff000000"


def test_aws_g5_bare_busids_are_untyped():
    doc = _doc("aws-g5.48xl-topo.xml")
    assert doc["gpus"] == [] and len(doc["pci_devices"]) == 9 and len(doc["numa_nodes"]) == 2
    assert {d["parent"] for d in doc["pci_devices"]} == {"CPU0", "CPU1"}


def test_azure_ncv4_self_nvlinks_and_socket_nic():
    doc = _doc("azure-ncv4-topo.xml")
    assert sum("points at the GPU itself" in w for w in doc["warnings"]) == 4
    assert not [l for l in doc["links"] if l["kind"] == "nvlink"]
    eth0 = doc["nics"][0]
    assert eth0["name"] == "eth0" and eth0["pci_bus_id"] is None and eth0["parent"] == "CPU0" and eth0["netdev"] == "eth0"
    assert eth0["ports"][0]["rate_gbps"] == 100.0
    link = next(l for l in doc["links"] if l["a"] == "eth0")
    assert (link["b"], link["bw_GBps"]) == ("CPU0", 5000.0)              # NCCL: LOC_BW
    assert doc["matrix"]["GPU0"]["eth0"] == "PHB" and doc["matrix"]["GPU1"]["eth0"] == "SYS"
    assert _gpu(doc, 0)["pcie"] == {"gen": None, "width": None, "max_gen": None, "max_width": None}
    assert next(l for l in doc["links"] if l["a"] == "0001:00:00.0")["bw_GBps"] == 12.0   # NCCL defaults: 8 GT/s x16


def test_panlichen_rtx3090_dump():
    doc = _doc("panlichen-rtx3090-8gpu-topo.xml")
    assert {g["compute_capability"] for g in doc["gpus"]} == {"8.6"} and {g["gdr"] for g in doc["gpus"]} == {0}
    assert doc["matrix"]["GPU0"]["GPU3"] == "PIX" and doc["matrix"]["GPU4"]["mlx5_0"] == "PIX"
    assert doc["matrix"]["GPU0"]["mlx5_0"] == "SYS"
    assert doc["nics"][0]["ports"][0]["rate_gbps"] == 56.0
    assert next(l for l in doc["links"] if l["kind"] == "smp")["bw_GBps"] == 10.0   # Ice Lake-SP (model 106): SKL class


def _nccl_system_print(log: str) -> tuple[list, dict]:
    """Edges ``(parent, child, link type, bw)`` and PCI device ids from the first
    ``=== System : ... ===`` tree that NCCL prints (ncclTopoPrintRec, topo.cc)."""
    lines = log.splitlines()
    start = next(i for i, l in enumerate(lines) if "=== System :" in l)
    edges, devids, at_col = [], {}, {}
    for raw in lines[start + 1:]:
        body = raw.split("NCCL INFO ", 1)[1]
        if body.startswith("====="):
            break
        m = re.match(r"^(\s*)\+ (\w+)\[([\d.]+)\] - (\w+/[0-9A-Fa-f]+)(?: \((\w+)\))?", body)
        if m is None:
            node = body.split()[0]
            at_col[0] = node
            continue
        col, kind, bw, child, extra = len(m.group(1)), m.group(2), float(m.group(3)), m.group(4), m.group(5)
        edges.append((at_col[col], child, kind, bw))
        at_col[m.end(3) + 4] = child  # children of `child` are printed at the column where its name starts
        if child.startswith("PCI/") and extra:
            devids[child] = int(extra, 16)
    return edges, devids


def _nccl_node_id(name: str) -> str:
    kind, hexid = name.split("/")
    if kind == "CPU":
        return f"CPU{int(hexid, 16)}"
    v = int(hexid, 16)  # busIdToInt64: the hex digits of dddd:bb:dd.f
    return f"{v >> 20:04x}:{(v >> 12) & 0xff:02x}:{(v >> 4) & 0xff:02x}.{v & 0xf}"


@pytest.mark.parametrize("log", ["panlichen-rtx3090-4node-log.log", "panlichen-rtx3090-4node-log27.log"])
def test_import_matches_the_tree_nccl_printed_for_this_xml(log):
    """NCCL 2.12.12 loaded this very machine and printed its graph (NCCL_DEBUG_SUBSYS=GRAPH):
    every PCI edge, its bandwidth, the PCI switch id, the SYS link and the NET speed must agree."""
    edges, devids = _nccl_system_print((CAPTURES / "nccllogs" / log).read_text(encoding="utf-8"))
    doc = _doc("panlichen-rtx3090-8gpu-topo.xml")
    pcie = {(l["a"], l["b"]): l["bw_GBps"] for l in doc["links"] if l["kind"] == "pcie"}
    smp = {tuple(sorted((l["a"], l["b"]))): l["bw_GBps"] for l in doc["links"] if l["kind"] == "smp"}
    checked = 0
    for parent, child, kind, bw in edges:
        if kind == "PCI":
            assert pcie[(_nccl_node_id(child), _nccl_node_id(parent))] == bw
            checked += 1
        elif kind == "SYS":
            assert smp[tuple(sorted((_nccl_node_id(parent), _nccl_node_id(child))))] == bw
        elif kind == "NET":
            nic = next(n for n in doc["nics"] if n["pci_bus_id"] == _nccl_node_id(parent))
            assert nic["ports"][0]["rate_gbps"] * 1000 / 8000 == bw
    assert checked == 11   # 2 switches + 8 GPUs + 1 NIC
    for name, devid in devids.items():
        sw = _sw(doc, _nccl_node_id(name))
        from gpucomm.probes.formats.nccl_xml import switch_ids

        assert bcm_device_id(switch_ids(sw)) == devid == 0x11F8400011F8BEEF
    log_text = (CAPTURES / "nccllogs" / log).read_text(encoding="utf-8")
    ring = parse_nccl_graph(_text("panlichen-rtx3090-graph.xml"))["graphs"][0]
    assert f"Pattern {ring['pattern']}, crossNic {ring['crossnic']}, nChannels {ring['nchannels']}, " \
           f"bw {ring['speedintra']:f}/{ring['speedinter']:f}, type {ring['typeintra']}/{ring['typeinter']}" in log_text
    assert " 0 : NET/0 " + " ".join(f"GPU/{g}" for g in ring["channels"][0]["gpus"]) + " NET/0" in log_text


def test_oci_flattened_skeleton_numa_order():
    doc = _doc("oci-topo-flattened.xml")
    assert [n["id"] for n in doc["numa_nodes"]] == [1, 3, 5, 7]
    # cpu numaid=3 affinity "00000000,ff000000,00000000,ff000000" -> 24-31,88-95
    assert next(n for n in doc["numa_nodes"] if n["id"] == 3)["cpus"] == "24-31,88-95"
    assert doc["matrix"]["GPU0"]["0000:0c:00.0"] == "PIX"


def test_kubernetes_variant_matches_bare_metal_matrix_up_to_nic_names():
    a, b = _doc("oci-H100-topology.xml"), _doc("oci-oke-BM.GPU.H100.8.xml")
    ga = {k: v for k, v in a["matrix"].items() if k.startswith("GPU")}
    gb = {k: v for k, v in b["matrix"].items() if k.startswith("GPU")}
    assert {k: {c: x for c, x in v.items() if c.startswith("GPU")} for k, v in ga.items()} == \
           {k: {c: x for c, x in v.items() if c.startswith("GPU")} for k, v in gb.items()}


# --------------------------------------------------------------------------------------------
# Graph files
def test_graph_file_azure_ncv4():
    g = parse_nccl_graph(_text("azure-ncv4-graph.xml"), "azure-ncv4-graph.xml")
    assert [x["id"] for x in g["graphs"]] == [0, 1, 2]
    ring = g["graphs"][0]
    assert (ring["pattern"], ring["pattern_name"], ring["name"], ring["nchannels"]) == (4, "RING", "ring", 2)
    assert [c["gpus"] for c in ring["channels"]] == [[0, 1, 2, 3], [0, 3, 2, 1]]
    assert (ring["speedintra"], ring["speedinter"], ring["typeintra"], ring["typeinter"]) == (12.0, 12.0, "SYS", "PIX")
    assert g["graphs"][1]["pattern_name"] == "BALANCED_TREE" and len(g["graphs"][1]["channels"]) == 4


def test_graph_file_panlichen_with_nets():
    g = parse_nccl_graph(_text("panlichen-rtx3090-graph.xml"))
    ring = g["graphs"][0]
    assert ring["channels"] == [{"gpus": list(range(8)), "nets": [0, 0]}]
    assert [x["nchannels"] for x in g["graphs"]] == [1, 1, 0, 0] and g["graphs"][3]["pattern_name"] == "NVLS"


@pytest.mark.parametrize("name", GRAPH_XML)
def test_graph_file_as_document(name):
    doc = _doc(name)
    assert doc["gpus"] and all(g["pci_bus_id"] is None for g in doc["gpus"])
    assert any("graph file" in w for w in doc["warnings"]) and doc["nccl_graph"]["graphs"]
    assert doc["links"] == [] and doc["switches"] == []


def test_graph_parser_rejects_topology_file():
    with pytest.raises(InputError, match="graphs"):
        parse_nccl_graph(_text("oci-H100-topology.xml"), "x.xml")


# --------------------------------------------------------------------------------------------
# Export and round trip
@pytest.mark.parametrize("name", TOPO_XML)
def test_export_is_strict_nccl_format(name):
    text = export_nccl_xml(_doc(name))
    system = nccl_strict_parse(text)
    assert text.startswith('<system version="1">\n') and text.endswith("</system>\n")
    assert len(system["children"]) == len({n["id"] for n in _doc(name)["numa_nodes"]} | {
        -1 for g in _doc(name)["gpus"] if g["numa_node"] is None and g["parent"] == "CPU-1"})


def _summary(doc: dict) -> dict:
    nv = {}
    for l in doc["links"]:
        if l["kind"] == "nvlink":
            nv[tuple(sorted((l["a"], l["b"])))] = l["count"]
    parents = {}
    for rec in [*doc["gpus"], *doc["nics"], *doc["switches"]]:
        parents[rec.get("id") or rec.get("pci_bus_id") or rec.get("name")] = rec.get("parent")
    for rec in doc.get("pci_devices", []):
        parents["dev:" + rec["bdf"]] = (rec["parent"], rec["role"], rec["gen"], rec["width"])
    return {
        "gpus": [(g["index"], g["pci_bus_id"], g.get("sm"), g["numa_node"], g["cpu_affinity"]) for g in doc["gpus"]],
        "nics": [(n["name"], n["pci_bus_id"], n["parent"], [(p["port"], p["rate_gbps"]) for p in n["ports"]], n["guid"])
                 for n in doc["nics"]],
        "nvlinks": nv,
        "parents": parents,
        "pcie": sorted((l["a"], l["b"], l["gen"], l["width"], l["bw_GBps"]) for l in doc["links"] if l["kind"] == "pcie"),
        "smp": sorted((l["a"], l["b"], l["bw_GBps"]) for l in doc["links"] if l["kind"] == "smp"),
        "numa": [(n["id"], n["cpus"]) for n in doc["numa_nodes"]],
        "matrix": doc["matrix"],
    }


@pytest.mark.parametrize("name", TOPO_XML)
def test_round_trip_import_export_import(name, tmp_path):
    doc = _doc(name)
    path = tmp_path / "topo.xml"
    text = write_nccl_xml(doc, str(path))
    assert path.read_text(encoding="utf-8") == text
    again = parse_nccl_xml(text, str(path))
    assert _summary(again) == _summary(doc)
    assert export_nccl_xml(again) == text   # a fixed point


@pytest.mark.parametrize("name", ["oci-oke-BM.GPU4.8.xml", "azure-ndv4-topo.xml", "aws-p5.48xl-topo.xml"])
def test_export_survives_a_saved_json_document_and_is_deterministic(name):
    from gpucomm.probes.model import dumps_json

    doc = _doc(name)
    again = parse_nccl_xml(_text(name), name)
    assert dumps_json(again) == dumps_json(doc)
    assert export_nccl_xml(json.loads(dumps_json(doc))) == export_nccl_xml(doc)


def test_round_trip_keeps_unflattened_bcm_hierarchy():
    """Flattened switches are written back as the real hierarchy, so NCCL flattens them again."""
    text = export_nccl_xml(_doc("oci-H100-topology.xml"))
    assert 'busid="0000:0d:00.0"' in text and 'subsystem_device="0x1003"' in text
    assert text.count("<pci ") == _text("oci-H100-topology.xml").count("<pci ")


def test_export_from_a_synthetic_document_without_ids():
    """Switches without bus ids get fake ffff:ff:NN.0 bridges; host bridges are folded into the CPU."""
    from gpucomm.probes.model import gpu_record, link_record, new_document, nic_record, switch_record

    doc = new_document("live")
    doc["host"].update(cpu_vendor="Intel(R) Corporation", cpu_arch="aarch64")
    doc["numa_nodes"] = [{"id": 0, "cpus": "0-7", "memory_bytes": None, "distances": None}]
    doc["switches"] = [switch_record("pci0000:00", "host_bridge", numa_node=0, parent="CPU0"),
                       switch_record("sw-a", "pcie", parent="pci0000:00", numa_node=0),
                       switch_record("NVS", "nvswitch")]
    doc["gpus"] = [gpu_record(0, pci_bus_id="0000:05:00.0", parent="sw-a", numa_node=0, compute_capability="10.0",
                              pcie={"gen": 6, "width": 16, "max_gen": 6, "max_width": 16}),
                   gpu_record(1, pci_bus_id="0000:06:00.0", parent="sw-a", numa_node=0)]
    doc["nics"] = [nic_record("mlx5_0", pci_bus_id="0000:07:00.0", parent="sw-a", numa_node=0,
                              ports=[{"port": 1, "state": "ACTIVE", "rate_gbps": 400.0},
                                     {"port": 2, "state": "ACTIVE", "rate_gbps": 400.0}])]
    doc["links"] = [link_record("0000:05:00.0", "NVS", "nvlink", 18 * 40.1, count=18),
                    link_record("0000:06:00.0", "NVS", "nvlink", 18 * 40.1, count=18),
                    link_record("0000:05:00.0", "CPU0", "c2c", 360.0, count=10)]
    text = export_nccl_xml(doc)
    system = nccl_strict_parse(text)
    cpu = system["children"][0]
    assert cpu["attrs"] == {"numaid": "0", "affinity": "000000ff", "arch": "arm64"}   # no x86 vendor on arm64
    sw = cpu["children"][0]
    assert sw["attrs"]["busid"] == "ffff:ff:01.0" and sw["attrs"]["class"] == "0x060400"
    gpu0 = sw["children"][0]["children"][0]
    assert gpu0["attrs"] == {"dev": "0", "sm": "100", "rank": "0"}
    assert [c["attrs"] for c in gpu0["children"]] == [
        {"target": "fffffff:ffff:ff", "count": "18", "tclass": "0x068000"}, {"bw": "36000", "count": "10"}]
    assert sw["children"][0]["attrs"]["link_speed"] == "64.0 GT/s PCIe"
    nets = sw["children"][2]["children"][0]["children"]
    assert [(n["attrs"]["name"], n["attrs"]["port"], n["attrs"]["speed"]) for n in nets] == \
        [("mlx5_0", "1", "400000"), ("mlx5_0", "2", "400000")]
    back = parse_nccl_xml(text)
    assert back["matrix"]["GPU0"]["GPU1"] == "NV18" and back["matrix"]["GPU0"]["mlx5_0"] == "PIX"
    assert back["nics"][0]["ports"] == doc["nics"][0]["ports"]
    assert next(l for l in back["links"] if l["kind"] == "c2c")["bw_GBps"] == pytest.approx(360.0)


HOSTS = sorted(p.name for p in (CAPTURES.parent / "hosts").iterdir() if p.is_dir()) \
    if (CAPTURES.parent / "hosts").is_dir() else []


@pytest.mark.parametrize("host", HOSTS)
def test_export_of_recorded_hosts_is_strict_and_keeps_gpus_and_nvlinks(host):
    """Documents from the live probes (sysfs/NVML/ib via snapshots) export too: GPUs, NIC names and
    NVLink counts survive the trip through NCCL's format (the PCIe view becomes NCCL's: no NODE,
    Broadcom switches flattened)."""
    from gpucomm.probes.load import load_topology

    doc = load_topology(str(CAPTURES.parent / "hosts" / host))
    text = export_nccl_xml(doc)
    nccl_strict_parse(text)
    back = parse_nccl_xml(text, host)
    assert [(g["index"], g["pci_bus_id"]) for g in back["gpus"]] == [(g["index"], g["pci_bus_id"]) for g in doc["gpus"]]
    assert sorted(n["name"] for n in back["nics"]) == sorted(n["name"] for n in doc["nics"])
    for g in doc["gpus"]:
        k = f"GPU{g['index']}"
        for other, code in doc["matrix"].get(k, {}).items():
            if code.startswith("NV"):
                assert back["matrix"][k][other] == code, (k, other)
            elif code == "NODE":
                assert back["matrix"][k][other] == "PHB"


def test_export_refuses_gpus_without_bus_id():
    doc = _doc("azure-ncv4-graph.xml")
    with pytest.raises(TopologyError, match="no PCI bus id"):
        export_nccl_xml(doc)


def test_write_to_unwritable_path_is_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot write"):
        write_nccl_xml(_doc("azure-ndv2-topo.xml"), str(tmp_path / "missing-dir" / "x.xml"))


# --------------------------------------------------------------------------------------------
# Small pieces
def test_class_types_and_link_speeds_follow_nccl_tables():
    assert [pci_class_type(c) for c in ("0x060400", "0x068000", "0x068001", "0x030200", "0x030000", "0x020700",
                                        "0x080100", "0x010802")] == ["PCI", "NVS", "CPU", "GPU", "GPU", "NIC", "PCI", "PCI"]
    assert parse_link_speed("16.0 GT/s PCIe") == (4, True) and parse_link_speed("8 GT/s") == (3, True)
    assert parse_link_speed("2.5 GT/s PCIe") == (1, True) and parse_link_speed("64.0 GT/s PCIe") == (6, True)
    assert parse_link_speed("") == (None, True)
    assert parse_link_speed("16.0 GT/s") == (4, False)      # NCCL would fall back to 8 GT/s lanes
    assert parse_link_speed("Unknown") == (None, False)


def test_inter_cpu_bandwidth_table():
    # an XML <cpu>'s attributes through the one rule (gpucomm.probes.facts)
    def inter_cpu_bw(attrs):
        return facts.inter_cpu_bw(facts.cpu_identity(attrs, None))

    intel = lambda m: {"arch": "x86_64", "vendor": "GenuineIntel", "familyid": 6, "modelid": m}
    assert [inter_cpu_bw(intel(m)) for m in (0xCF, 0x8F, 0x55, 0x4F)] == [40.0, 22.0, 10.0, 6.0]
    assert inter_cpu_bw({"arch": "x86_64", "vendor": "AuthenticAMD"}) == 16.0
    assert inter_cpu_bw({"arch": "arm64"}) == 6.0 and inter_cpu_bw({"arch": "ppc64"}) == 32.0
    assert inter_cpu_bw({"arch": "x86_64", "vendor": "CentaurHauls", "familyid": 7, "modelid": 0x5B}) == 9.0
    assert inter_cpu_bw({}) is None   # not identified: no SMP link is written; the view's default applies


def test_guid_conversion():
    from gpucomm.probes.formats.nccl_xml import guid_from_nccl, guid_to_nccl

    assert guid_from_nccl("0x30c7170003fd7010") == "1070:fd03:0017:c730"   # panlichen: OUI 10:70:fd
    assert guid_from_nccl("0x8011e0003ae6d94") == "946d:ae03:001e:0108"    # 15 digits (leading zero dropped)
    assert guid_from_nccl("0x0") is None and guid_from_nccl("junk") is None
    assert guid_to_nccl("1070:fd03:0017:c730") == "0x30c7170003fd7010"
    assert guid_to_nccl("0x08011E0003AE6D94") == "0x8011e0003ae6d94" and guid_to_nccl("zz") is None
    assert 'guid="0x9a70500003ae6d94"' in export_nccl_xml(_doc("oci-H100-topology.xml"))


def test_flatten_bcm_on_a_recorded_sysfs_host():
    """flatten_bcm reads the sysfs probe's switch fields too: the recorded DGX A100 (whose
    PCIe tree the sysfs source builds) flattens like NCCL would import its exported XML."""
    import copy

    from gpucomm.probes.load import load_topology

    host = CAPTURES.parent / "hosts" / "dgx-a100"
    if not host.is_dir():
        pytest.skip("recorded host fixtures/hosts/dgx-a100 not present")
    doc = load_topology(str(host))
    flat = flatten_bcm(copy.deepcopy(doc))
    merged = sorted(m["id"] for s in flat["switches"] for m in s.get("bcm_merged") or [])
    assert merged, "the DGX A100 fixture has Broadcom PEX Gen4 switches"
    via_xml = parse_nccl_xml(export_nccl_xml(doc), "dgx-a100.xml")
    assert merged == sorted(m["id"] for s in via_xml["switches"] for m in s.get("bcm_merged") or [])
    # NCCL has no host bridges: in the XML a root switch hangs off its CPU
    hb = {s["id"]: s["parent"] for s in flat["switches"] if s["kind"] == "host_bridge"}
    assert {s["id"]: hb.get(s["parent"], s["parent"]) for s in flat["switches"] if s["kind"] == "pcie"} == \
        {s["id"]: s["parent"] for s in via_xml["switches"] if s["kind"] == "pcie"}


def test_nccl_accepts_more_than_nccl():
    """A <?xml?> header, tabs, attributes across lines, comments with '--' and single quotes all read."""
    text = ("<?xml version='1.0' encoding='UTF-8'?>\n<!-- a comment -- with dashes -->\n<system version='1'>\n"
            "\t<cpu numaid='0'\n\t     arch='x86_64' vendor='GenuineIntel' familyid='6' modelid='207'>\n"
            "\t\t<pci busid='0000:1B:00.0' class='0x030200' link_speed='32.0 GT/s PCIe' link_width='16'>"
            "<gpu dev='0' sm='90' rank='0' gdr='1'><nvlink target='fffffff:ff:ff.0' count='18' tclass='0x068000'/></gpu>"
            "</pci>\n\t</cpu>\n</system>\n")
    doc = parse_nccl_xml(text, "x.xml")
    assert doc["gpus"][0]["pci_bus_id"] == "0000:1b:00.0"
    assert [s["id"] for s in doc["switches"]] == ["NVS"]
    assert next(l for l in doc["links"] if l["kind"] == "nvlink")["count"] == 18
    assert doc["gpus"][0]["nvlink"][0]["remote"] == "fffffff:ff:ff.0"


def test_gpu_gpu_nvlinks_deduplicated_across_sides():
    text = ('<system version="1"><cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="85">'
            '<pci busid="0000:01:00.0" class="0x030200" link_speed="" link_width="16"><gpu dev="0" sm="70" rank="0" gdr="1">'
            '<nvlink target="0000:02:00.0" count="2" tclass="0x030200"/></gpu></pci>'
            '<pci busid="0000:02:00.0" class="0x030200" link_speed="" link_width="16"><gpu dev="1" sm="70" rank="1" gdr="1">'
            '<nvlink target="0000:01:00.0" count="1" tclass="0x030200"/><nvlink target="0000:09:00.0" count="1" tclass="0x030200"/>'
            '</gpu></pci></cpu></system>')
    doc = parse_nccl_xml(text, "dgx1.xml")
    nv = [l for l in doc["links"] if l["kind"] == "nvlink"]
    assert [(l["a"], l["b"], l["count"], l["bw_GBps"]) for l in nv] == [("0000:01:00.0", "0000:02:00.0", 1, 20.0)]
    assert doc["matrix"]["GPU0"]["GPU1"] == "NV1"
    assert any("list 2 and 1 NVLinks" in w for w in doc["warnings"])
    assert any("not a GPU in this file" in w for w in doc["warnings"])


def test_power9_cpu_nvlink_and_pcilinks():
    text = ('<system version="1"><cpu numaid="0" arch="ppc64">'
            '<pci busid="0000:04:00.0" class="0x060400" vendor="0x1000" device="0xc030" link_speed="" link_width="">'
            '<pcilink target="0000:05:00.0"/>'
            '<pci busid="0004:04:00.0" class="0x030200" link_speed="" link_width=""><gpu dev="0" sm="70" rank="0" gdr="1">'
            '<nvlink target="0004:00:00.0" count="3" tclass="0x068001"/></gpu></pci></pci>'
            '<pci busid="0000:05:00.0" class="0x060400" link_speed="" link_width=""><pcilink target="0000:04:00.0"/>'
            '<pcilink target="0000:77:00.0"/></pci></cpu>'
            '<cpu numaid="8" arch="ppc64"/></system>')
    doc = parse_nccl_xml(text, "p9.xml")
    kinds = sorted((l["kind"], l["a"], l["b"], l["bw_GBps"]) for l in doc["links"] if l["kind"] != "pcie" or l.get("pcilink"))
    assert kinds == [("nvlink", "0004:04:00.0", "CPU0", 60.0), ("pcie", "0000:04:00.0", "0000:05:00.0", 5000.0),
                     ("smp", "CPU0", "CPU8", 32.0)]
    assert any("0000:77:00.0" in w for w in doc["warnings"])
    text2 = export_nccl_xml(doc)
    nccl_strict_parse(text2)
    assert text2.count("<pcilink") == 2 and 'tclass="0x068001"' in text2
    assert _summary(parse_nccl_xml(text2)) == _summary(doc)


# --------------------------------------------------------------------------------------------
# Hostile and broken input
BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
]>
<system version="1"><cpu numaid="&lol3;"/></system>
"""
EXTERNAL = """<?xml version="1.0"?>
<!DOCTYPE system [ <!ENTITY xxe SYSTEM "file:///etc/passwd"> ]>
<system version="1"><cpu numaid="0" arch="&xxe;"/></system>
"""


@pytest.mark.parametrize("text,line", [
    (BILLION_LAUGHS, 2), (EXTERNAL, 2),
    ('<system version="1">\n<cpu numaid="0" arch="&xxe;"/></system>', 2),        # undefined entity, no DTD
    ('<!-- x -->\n<!doctype system SYSTEM "http://example.invalid/x.dtd">\n<system version="1"/>', 2),
])
def test_entities_and_dtds_are_rejected_without_expansion(text, line):
    with pytest.raises(InputError) as e:
        parse_nccl_xml(text, "evil.xml")
    msg = str(e.value)
    assert "\n" not in msg and "evil.xml" in msg and "lol" not in msg and "root:" not in msg
    assert e.value.line == line


def test_truncated_file_names_the_line():
    text = _text("oci-H100-topology.xml")
    cut = text[: text.index("<gpu dev=\"3\"")]
    with pytest.raises(InputError) as e:
        parse_nccl_xml(cut, "cut.xml")
    assert e.value.path == "cut.xml" and e.value.line == cut.count("\n") + 1
    assert "malformed XML" in str(e.value)


@pytest.mark.parametrize("text,match", [
    ("", "no XML element"),
    ("<topology/>", "root element is <topology>"),
    ("<system version='1'><cpu numaid='0'>", "malformed"),
    ("<!-- never closed", "unterminated comment"),
    ("just text", "no XML element"),
])
def test_broken_input_is_one_line_input_error(text, match):
    with pytest.raises(InputError, match=match):
        parse_nccl_xml(text, "bad.xml")


def test_text_between_elements_is_accepted_with_a_warning():
    doc = parse_nccl_xml("<system version='1'>text<cpu numaid='0'/></system> trailing", "t.xml")
    assert any("text between elements (line 1)" in w for w in doc["warnings"])


def test_deep_nesting_is_bounded():
    text = '<system version="1"><cpu numaid="0">' + '<pci busid="0000:01:00.0" class="0x060400">' * 300
    with pytest.raises(InputError, match="nested more than"):
        parse_nccl_xml(text, "deep.xml")


def test_odd_but_valid_values_become_warnings():
    text = ('<system version="2"><cpu affinity="zz" arch="x86_64"><pci busid="junk" class="0x060400">'
            '<pci busid="0000:01:00.0" class="0x030200" link_speed="fast" link_width="x">'
            '<gpu dev="a" sm="9000"/></pci><pci busid="0000:01:00.0" class="0x030200"/></pci>'
            '<pci busid="0000:02:00.0" class="0x020000"><nic><net name="mlx5_0" speed="-1"/>'
            '<net name="mlx5_0" port="2" dev="3"/></nic></pci>'
            '<pci busid="0000:03:00.0" class="0x020000"><nic><net name="mlx5_0" dev="4"/></nic></pci>'
            '<bogus/></cpu></system>')
    doc = parse_nccl_xml(text, "odd.xml")
    w = " | ".join(doc["warnings"])
    for needle in ("version='2'", "no integer numaid", "not a hex cpumask", "no valid busid", "not a PCIe speed",
                   "not an integer", "not a compute capability", "appears more than once", "<bogus>",
                   "used twice", "has no dev"):
        assert needle in w, needle
    assert doc["gpus"][0]["index"] == 0 and doc["gpus"][0]["parent"] == "CPU0"   # numaid -1: the CPU0 of every document
    names = [n["name"] for n in doc["nics"]]
    assert names == ["mlx5_0", "mlx5_0@0000:03:00.0"]
    assert [p["port"] for p in doc["nics"][0]["ports"]] == [1, 2] and doc["nics"][0]["ports"][0]["rate_gbps"] is None


# --------------------------------------------------------------------------------------------
# Property-based: mutations of real files never raise anything but InputError
_SEEDS = [_text(n) for n in ("oci-oke-BM.GPU4.8.xml", "azure-ncv4-topo.xml", "aws-p4d-24xl-topo.xml",
                              "panlichen-rtx3090-graph.xml", "azure-ndv4-topo.xml")]
_JUNK = st.lists(st.sampled_from(list("<>/=\"' \n\t!-?&;#xabcdef0123:.") + ["<pci ", "</pci>", "<nvlink ",
                                                                                    'busid="', "&lol;", "<!--"]),
                 max_size=12).map("".join)


@st.composite
def mutated(draw):
    text = draw(st.sampled_from(_SEEDS))
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 200)))
        op = draw(st.sampled_from(["cut", "delete", "insert", "replace"]))
        if op == "cut":
            text = text[:i]
        elif op == "delete":
            text = text[:i] + text[j:]
        elif op == "insert":
            text = text[:i] + draw(_JUNK) + text[i:]
        else:
            text = text[:i] + draw(_JUNK) + text[j:]
    return text


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(mutated())
def test_fuzz_mutated_files_give_input_error_or_valid_document(text):
    try:
        doc = parse_nccl_xml(text, "fuzz.xml")
    except InputError as e:
        assert "\n" not in str(e)
        return
    assert doc["schema"] == "gpucomm.topology/v1"
    json.dumps(doc, allow_nan=False)
    if doc.get("nccl_graph") is None:
        try:
            out = export_nccl_xml(doc)
        except GpucommError:
            return
        nccl_strict_parse(out)


_VALUES = st.sampled_from(["", "0", "-1", "1", "0x10", "99999999999999999999", "ffff:ff:01.0", "0000:0f:00.0",
                           "fffffff:ff:ff.0", "abc", "32 GT/s", "nan", "0x068000", "0x030200", "0x068001", "0x060400",
                           "0x02", "GenuineIntel", "ppc64", "arm64", " ", "0000:0c:00.0", "mlx5_0", "1000000"])
_ALL_SEEDS = [_text(n) for n in ALL_XML]


@st.composite
def value_mutated(draw):
    """Well-formed XML whose attribute values are replaced: exercises the semantic layer."""
    text = draw(st.sampled_from(_ALL_SEEDS))
    for _ in range(draw(st.integers(1, 6))):
        spans = [m.span(1) for m in re.finditer(r'="([^"]*)"', text)]
        a, b = draw(st.sampled_from(spans))
        text = text[:a] + draw(_VALUES) + text[b:]
    return text


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=value_mutated())
def test_fuzz_attribute_values_give_valid_document_and_strict_export(text, validator):
    try:
        doc = parse_nccl_xml(text, "fuzz.xml")
    except InputError as e:
        assert "\n" not in str(e)
        return
    assert not list(validator.iter_errors(doc))
    if doc.get("nccl_graph") is None:
        try:
            out = export_nccl_xml(doc)
        except GpucommError:
            return
        nccl_strict_parse(out)
        again = parse_nccl_xml(out, "again.xml")
        assert [g["pci_bus_id"] for g in again["gpus"]] == [g["pci_bus_id"] for g in doc["gpus"]] or \
            sorted(g["pci_bus_id"] for g in again["gpus"]) == sorted(g["pci_bus_id"] for g in doc["gpus"])


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300))
def test_fuzz_random_text(text):
    try:
        parse_nccl_xml(text, "r.xml")
    except InputError:
        pass
    try:
        parse_nccl_graph(text, "r.xml")
    except InputError:
        pass


# --------------------------------------------------------------------------------------------
# Through the loader and the CLI
@pytest.mark.parametrize("name", ALL_XML)
def test_loader_detects_nccl_xml(name):
    from gpucomm.probes.load import detect_kind, load_topology

    assert detect_kind(_text(name)) == "nccl-xml"
    assert load_topology(str(XML_DIR / name))["matrix"] == _doc(name)["matrix"]


@pytest.mark.parametrize("name", ["oci-H100-topology.xml", "azure-ncv4-graph.xml", "aws-p5.48xl-topo.xml"])
def test_cli_show_json(name):
    res = run_cli("show", str(XML_DIR / name), "--format", "json")
    assert res.code == 0, res.stderr
    doc = res.json()
    assert doc["host"]["provenance"] == "nccl-xml" and doc["matrix"] == _doc(name)["matrix"]
    assert "Traceback" not in res.stderr


def test_cli_show_nccl_xml_output_is_strict():
    res = run_cli("show", str(XML_DIR / "oci-oke-BM.GPU4.8.xml"), "--format", "nccl-xml")
    assert res.code == 0, res.stderr
    nccl_strict_parse(res.stdout)
    assert res.stdout == export_nccl_xml(_doc("oci-oke-BM.GPU4.8.xml"))


def test_cli_bad_xml_exits_1_with_one_line(tmp_path):
    p = tmp_path / "evil.xml"
    p.write_text(BILLION_LAUGHS, encoding="utf-8")
    res = run_cli("show", str(p), "--format", "json")
    assert res.code == 1 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and "evil.xml:2" in res.stderr and "Traceback" not in res.stderr


# ----------------------------------------------------------------------------------------------
# One fact, one rule: a GPU's PCIe link bandwidth is the same in our path graph and in the XML given to
# NCCL's model (pinned), for every NCCL XML capture and bundled example -- including links whose
# capture gives no generation (an NCCL dump's link_speed="": NCCL read that on the host too).
_LANE = {"2.5 GT/s PCIe": 15, "5.0 GT/s PCIe": 30, "8.0 GT/s PCIe": 60, "16.0 GT/s PCIe": 120,
         "32.0 GT/s PCIe": 240, "64.0 GT/s PCIe": 480}


def _pcie_sources() -> list:
    from gpucomm.probes.examples import list_examples

    xmls = sorted(p for p in (CAPTURES / "ncclxml").glob("*.xml") if "<graphs" not in p.read_text()[:200])
    return [str(p) for p in xmls] + [f"example:{n}" for n in list_examples()]


@pytest.mark.parametrize("src", _pcie_sources(), ids=lambda s: Path(s).name)
def test_gpu_pcie_bandwidth_is_one_fact(src):
    """A GPU's PCIe bandwidth in NCCL's system (its device's uplink, what paths, rings and predict read)
    is the document's: its pcie link record, else its PCIe generation and width, else the view's default."""
    from gpucomm.planners.nccl.sysview import node_system
    from gpucomm.probes.load import load_topology
    from gpucomm.probes.model import normalize_bus_id
    from gpucomm.probes.topology import Topology

    topo = Topology.of(load_topology(src))
    if not topo.gpus or not topo.has_pci_tree:
        pytest.skip("no PCI tree")
    ns = node_system(topo)
    recs = {normalize_bus_id(l.a): l.bw_GBps for l in topo.links if l.kind == "pcie" and l.bw_GBps}
    compared = 0
    for g in topo.gpus:
        gid = ns.gpu_of_index(g.index)
        dev = next(k[1] for k in ns.out[gid] if k[2] == "LOC")
        up = [v for k, v in ns.links.items() if k[0] == dev and k[2] == "PCI"]
        if not up:
            continue      # a GPU that reaches its CPU over C2C only (Grace)
        bus = normalize_bus_id(g.pci_bus_id or "")
        want = recs.get(bus)
        if want is None:
            want = g.pcie.max_bw_GBps if g.pcie is not None and g.pcie.max_bw_GBps else topo.default_pcie_bw()
        assert up[0] == pytest.approx(want, rel=1e-6), (g.key, up, want)
        compared += 1
    if not compared:
        pytest.skip("the GPUs reach their CPU over C2C only (Grace): no PCIe hop to compare")


def test_pcie_speed_without_generation_is_pinned_as_read():
    """link_speed="" (the host told NCCL nothing): NCCL's fallback lane speed, 12 GB/s at x16, in our
    paths and in the XML for NCCL's model alike; a document with no PCIe link gets the one default."""
    from gpucomm.planners.nccl.comm import pinned_xml
    from gpucomm.probes.load import load_topology

    text = pinned_xml(load_topology(str(CAPTURES / "ncclxml" / "azure-ncv4-topo.xml")))
    speeds = re.findall(r'class="0x030200"[^>]*link_speed="([^"]*)"', text)
    assert speeds == ["8.0 GT/s PCIe"] * 4


def test_nccl_system_flattens_broadcom_switches_on_a_copy():
    """NCCL's system of a document kept unflattened (as nvidia-smi and sysfs show it) has NCCL's
    flattened Broadcom tree; the document it was given stays as it was."""
    import copy

    from gpucomm.planners.nccl.sysview import node_system

    doc = _doc("oci-H100-topology.xml", flatten=False)
    before = copy.deepcopy(doc)
    ns = node_system(doc)
    assert doc == before
    flat = _doc("oci-H100-topology.xml")
    pci = [n for n, a in ns.nodes.items() if a["type"] == "PCI"]
    assert len(pci) == sum(1 for s in flat["switches"] if s["kind"] == "pcie") < 24




def _grace_tray_xml(nonuma_nics: bool) -> str:
    """A GB200-style tray as NCCL dumps it: GPUs under the Graces (numaid 0/1, C2C), NICs whose sysfs
    numa_node is -1 under a ``<cpu numaid="-1">`` of their own (or under the Graces)."""
    def nic(bus, dev):
        return (f'<pci busid="{bus}" class="0x020700" vendor="0x15b3" device="0x1021" link_speed="32.0 GT/s PCIe" '
                f'link_width="16"><nic><net name="mlx5_{dev}" dev="{dev}" speed="400000" port="1" latency="0" '
                f'guid="0x{dev + 1:x}" maxconn="131072" gdr="1"/></nic></pci>')

    def gpu(bus, dev):
        return (f'<pci busid="{bus}" class="0x030200" vendor="0x10de" device="0x2941" link_speed="32.0 GT/s PCIe" '
                f'link_width="16"><gpu dev="{dev}" sm="100" rank="{dev}" gdr="1"><c2c bw="45000" count="10"/>'
                f'</gpu></pci>')
    head = '<system version="1">'
    g0 = ('<cpu numaid="0" affinity="000000ff,ffffffff,ffffffff" arch="arm64">' + gpu("0008:01:00.0", 0)
          + ("" if nonuma_nics else nic("0000:01:00.0", 0)) + '</cpu>')
    g1 = ('<cpu numaid="1" affinity="0000ffff,ffffffff,ffffff00,00000000,00000000" arch="arm64">'
          + gpu("0018:01:00.0", 1) + ("" if nonuma_nics else nic("0010:01:00.0", 1)) + '</cpu>')
    nn = ('<cpu numaid="-1" affinity="0000ffff,ffffffff,ffffffff,ffffffff,ffffffff" arch="arm64">'
          + nic("0000:01:00.0", 0) + nic("0010:01:00.0", 1) + '</cpu>') if nonuma_nics else ""
    return head + nn + g0 + g1 + "</system>"


@pytest.mark.parametrize("nonuma", [True, False])
def test_a_cpu_without_numa_node_beside_graces_stays_its_own(tmp_path, nonuma):
    """NCCL keeps devices whose numa_node is -1 under a CPU of their own (xml.cc), so a Grace tray's NICs are
    SYS to its GPUs, not P2C through the GPU's Grace; reading the dump and writing it back keeps that."""
    from gpucomm.planners.nccl.comm import nccl_comm, pinned_xml
    from gpucomm.probes.load import load_topology

    f = tmp_path / "tray.xml"
    f.write_text(_grace_tray_xml(nonuma))
    doc = load_topology(str(f))
    assert not [w for w in doc["warnings"] if "link dropped" in w], doc["warnings"]
    want = "SYS" if nonuma else "P2C"
    assert ('numaid="-1"' in pinned_xml(doc)) == nonuma
    paths = nccl_comm(doc).paths_dict()["gpu_net"]
    assert {t["type"] for row in paths for t in row["to"]} >= {want}
    assert all(t["type"] == want for row in paths for t in row["to"] if t["net"].endswith(str(row["from"])))


def test_a_vm_dump_with_one_cpu_without_numa_node_is_cpu0(tmp_path):
    xml = ('<system version="1"><cpu numaid="-1" affinity="ff" arch="x86_64" vendor="GenuineIntel" familyid="6" '
           'modelid="143"><pci busid="0000:01:00.0" class="0x030200" vendor="0x10de" device="0x2330" '
           'link_speed="32.0 GT/s PCIe" link_width="16"><gpu dev="0" sm="90" rank="0" gdr="1"/></pci></cpu></system>')
    doc = parse_nccl_xml(xml, "vm.xml")
    assert "CPU-1" not in json.dumps(doc)            # a VM's one CPU is the document's CPU0, as everywhere
    assert doc["gpus"][0]["parent"] == "CPU0"
