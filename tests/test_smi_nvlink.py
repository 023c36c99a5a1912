"""``nvidia-smi nvlink -s`` parser over the real captures in fixtures/captures/extra/, plus fuzzing."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucomm.probes.errors import InputError
from gpucomm.probes.model import schema_path
from gpucomm.probes.formats.smi_nvlink import apply_nvlink_status, looks_like, parse_nvlink_status
from gpucomm.probes.formats.smi_topo import parse_topo_text

ROOT = Path(__file__).resolve().parent.parent
EXTRA = ROOT / "fixtures" / "captures" / "extra"
TOPO = ROOT / "fixtures" / "captures" / "topo"
FILES = sorted(EXTRA.glob("*nvlink-status*.txt"))
FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
VALIDATOR = jsonschema.Draft202012Validator(json.loads(Path(schema_path()).read_text()))

# prefix -> ({gpu index: (name, uuid given?, number of links, bw per link)}, snipped)
EXPECT = {
    "01": ({i: ("NVIDIA A100-SXM4-80GB", True, 12, 25.0) for i in range(4)}, False),
    "04": ({0: ("NVIDIA H100 80GB HBM3", True, 18, 26.562)}, False),
    "89": ({0: ("Tesla V100-SXM2-32GB", False, 6, 25.781), 7: ("Tesla V100-SXM2-32GB", False, 6, 25.781)}, True),
    "90": ({0: ("Tesla V100-SXM2-32GB", True, 6, 25.781)}, False),
    "91": ({0: ("Quadro RTX 8000", False, 2, 25.781), 1: ("Quadro RTX 8000", False, 2, 25.781)}, False),
    "92": ({i: ("Tesla V100-SXM2-16GB", True, 6, 25.781) for i in range(4)}, False),
}


def test_every_capture_has_expectations():
    assert sorted(p.name.split("_")[0] for p in FILES) == sorted(EXPECT)


@pytest.mark.parametrize("path", FILES, ids=[p.name[:40] for p in FILES])
def test_capture(path: Path):
    text = path.read_text(encoding="utf-8")
    assert looks_like(text)
    s = parse_nvlink_status(text, path.name)
    gpus, snipped = EXPECT[path.name.split("_")[0]]
    assert sorted(s["gpus"]) == sorted(gpus)
    assert s["snipped"] is snipped
    assert bool(s["warnings"]) is snipped   # the only warning any real capture deserves
    for idx, (name, has_uuid, nlinks, bw) in gpus.items():
        g = s["gpus"][idx]
        assert g["index"] == idx and g["name"] == name
        assert (g["uuid"] is not None) is has_uuid
        if has_uuid:
            assert g["uuid"].startswith("GPU-") and len(g["uuid"]) == 40
        assert [l["link"] for l in g["links"]] == list(range(nlinks))
        assert all(l == {"link": l["link"], "state": "active", "bw_GBps": bw} for l in g["links"])
        assert g["all_inactive"] is False


def test_uuid_value():
    s = parse_nvlink_status((EXTRA / "04_h100-sxm-x8_nvlink-status-gpu0.txt").read_text())
    assert s["gpus"][0]["uuid"] == "GPU-5a10e6e5-95f7-2785-ed63-6f6147f304f7"


def test_inactive_and_all_inactive():
    # Shapes from azhpc-diagnostics#73 (some links <inactive>) and gpud#1085 (NVML message).
    text = ("GPU 3: Tesla V100-SXM2-32GB (UUID: GPU-aaaa)\n"
            "         Link 0: 25.781 GB/s\n"
            "         Link 3: <inactive>\n"
            "         Link 5: <inactive>\n"
            "GPU 2: NVIDIA B200 (UUID: GPU-bbbb)\n"
            "NVML: Unable to retrieve NVLink information as all links are inActive\n")
    s = parse_nvlink_status(text)
    assert list(s["gpus"]) == [2, 3]
    assert s["gpus"][3]["links"] == [{"link": 0, "state": "active", "bw_GBps": 25.781},
                                     {"link": 3, "state": "inactive", "bw_GBps": None},
                                     {"link": 5, "state": "inactive", "bw_GBps": None}]
    assert s["gpus"][2]["all_inactive"] is True and s["gpus"][2]["links"] == []
    doc = parse_topo_text("GPU0\tGPU1\tGPU2\tGPU3\n" + "".join(
        f"GPU{i}\t" + "\t".join(" X " if i == j else "SYS" for j in range(4)) + "\n" for i in range(4)))
    apply_nvlink_status(doc, s)
    VALIDATOR.validate(doc)
    assert doc["gpus"][3]["uuid"] == "GPU-aaaa" and doc["gpus"][3]["nvlink"][1]["state"] == "inactive"
    assert any("GPU3" in w and "3, 5" in w for w in doc["warnings"])
    assert any("GPU2" in w and "every NVLink inactive" in w for w in doc["warnings"])


def test_apply_keeps_existing_values():
    topo = parse_topo_text((TOPO / "01_a100-sxm4-80gb-x4_rocep.txt").read_text())
    topo["gpus"][0]["name"] = "already known"
    s = parse_nvlink_status((EXTRA / "01_a100-sxm4-80gb-x4_nvlink-status.txt").read_text())
    apply_nvlink_status(topo, s)
    VALIDATOR.validate(topo)
    assert topo["gpus"][0]["name"] == "already known"
    assert topo["gpus"][1]["name"] == "NVIDIA A100-SXM4-80GB"
    assert sum(l["bw_GBps"] for l in topo["gpus"][2]["nvlink"]) == 300.0


@pytest.mark.parametrize("text, what", [
    ("", "empty"), ("\n  \n", "empty"), ("\x00\x01GPU 0: x\x00", "binary"),
    ("Link 0: 25 GB/s\n", "no 'GPU <n>:' line"), ("hello", "no 'GPU <n>:' line"),
])
def test_unrecoverable(text, what):
    with pytest.raises(InputError) as e:
        parse_nvlink_status(text, "nv.txt")
    assert str(e.value).startswith("nv.txt") and what in str(e.value)


def test_unknown_lines_warn():
    s = parse_nvlink_status("GPU 0: X\n\t Link 0: 25 GB/s\n\t Link 1: flapping\n\t Link 0: 25 GB/s\nrandom\n")
    assert [l["link"] for l in s["gpus"][0]["links"]] == [0]
    assert len(s["warnings"]) == 3


@st.composite
def statuses(draw):
    gpus = draw(st.lists(st.integers(0, 15), min_size=1, max_size=6, unique=True))
    indent = draw(st.sampled_from(["\t ", " " * 9, "   "]))
    blank = draw(st.booleans())
    crlf = draw(st.booleans())
    lines, want = [], {}
    for idx in gpus:
        name = draw(st.sampled_from(["NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-32GB", "NVIDIA GB200"]))
        uuid = draw(st.one_of(st.none(), st.uuids().map(lambda u: f"GPU-{u}")))
        lines.append(f"GPU {idx}: {name}" + (f" (UUID: {uuid})" if uuid else ""))
        links = []
        if draw(st.integers(0, 9)) == 0:
            lines.append("NVML: Unable to retrieve NVLink information as all links are inActive")
        else:
            for n in range(draw(st.integers(0, 18))):
                bw = draw(st.sampled_from([None, 20.0, 25.0, 25.781, 26.562, 53.125]))
                lines.append(f"{indent}Link {n}: " + ("<inactive>" if bw is None else f"{bw:g} GB/s"))
                if blank:
                    lines.append(" " * 3)
                links.append({"link": n, "state": "inactive" if bw is None else "active", "bw_GBps": bw})
        want[idx] = (name, uuid, links)
    return ("\r\n" if crlf else "\n").join(lines) + "\n", want


@FUZZ
@given(statuses())
def test_generated_status_parses_exactly(case):
    text, want = case
    s = parse_nvlink_status(text)
    assert s["warnings"] == []
    assert sorted(s["gpus"]) == sorted(want)
    for idx, (name, uuid, links) in want.items():
        g = s["gpus"][idx]
        assert (g["name"], g["uuid"], g["links"]) == (name, uuid, links)


@FUZZ
@given(st.sampled_from(FILES), st.floats(0, 1), st.text(max_size=10),
       st.sampled_from(["truncate", "insert", "dup", "double"]))
def test_fuzz_mutations_only_input_error(path, pos, junk, op):
    text = path.read_text(encoding="utf-8")
    k = int(pos * len(text))
    text = {"truncate": text[:k], "insert": text[:k] + junk + text[k:], "dup": text + text,
            "double": text.replace("\n", "\n\n")}[op]
    try:
        s = parse_nvlink_status(text)
    except InputError:
        return
    for g in s["gpus"].values():
        assert all(l["state"] in ("active", "inactive") for l in g["links"])
        assert [l["link"] for l in g["links"]] == sorted({l["link"] for l in g["links"]})


@FUZZ
@given(st.one_of(st.text(max_size=200), st.binary(max_size=200).map(lambda b: b.decode("latin-1"))))
def test_fuzz_junk(text):
    try:
        parse_nvlink_status(text)
    except InputError:
        pass
