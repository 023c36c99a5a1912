"""The per-rank XML copies without GPU-only subtrees (planners/nccl/ncclxml.py ``RankCopies``) give the
fused XML that whole copies give -- the XML ncclTopoGetSystem builds on every rank and fuses -- on every
XML of the golden corpus, the examples' pinned XMLs and the captures, for all GPUs and for a subset,
with and without NIC fusion."""
from __future__ import annotations

import pytest

from support import CAPTURES, FIXTURES
from gpucomm.planners.nccl import ncclxml as X
from support import nvswitch_document
from gpucomm.planners.nccl.comm import pinned_xml

XMLS = sorted((FIXTURES / "ncclsim" / "corpus").glob("*.xml")) + sorted((FIXTURES / "ncclsim" / "inputs").glob("*.xml")) \
    + sorted(p for p in (CAPTURES / "ncclxml").glob("*.xml") if "graph" not in p.name)


def _fused(text: str, pruned: bool, subset: bool, merge: bool, level: int = X.PATH_PORT) -> str:
    """comm.run's rank loop: copy, fill the rank's GPU, process the NICs, trim; then fuse."""
    xml = X.parse(text)
    machine = X.Machine(xml, merge=merge)
    local = machine.gpus[::2] if subset else machine.gpus
    copies = X.RankCopies(xml, machine)
    out = []
    for rank, g in enumerate(local):
        bus = X.int_to_bus(X.bus_to_int(g.bus))
        x = copies.copy_for(bus) if pruned else xml.copy()
        rx = X.RankXml(x, machine, {"affinity": "", "arch": "x86_64"}, level)
        rx.fill_gpu(bus, rank)
        rx.process_net()
        rx.trim()
        out.append(x)
    return X.dumps(X.fuse(out))


@pytest.mark.parametrize("path", XMLS, ids=lambda p: p.name)
def test_pruned_copies_fuse_to_the_same_xml(path):
    text = path.read_text(encoding="utf-8")
    if not X.Machine(X.parse(text)).gpus:
        pytest.skip("no GPU")
    for subset in (False, True):
        for merge in (True, False):
            try:
                want = _fused(text, False, subset, merge)
            except X.NcclFailure as e:
                with pytest.raises(X.NcclFailure, match=str(e)[:40]):
                    _fused(text, True, subset, merge)
                continue
            assert _fused(text, True, subset, merge) == want


def test_an_nvswitch_domain_copies_a_few_nodes_per_rank():
    """72 GPUs behind NVSwitches: each rank's copy holds its own GPU's branch, not the machine."""
    xml = X.parse(pinned_xml(nvswitch_document(72, 100, 18)))
    machine = X.Machine(xml)
    copies = X.RankCopies(xml, machine)
    assert copies.ok
    sizes = [len(copies.copy_for(X.int_to_bus(X.bus_to_int(g.bus))).nodes) for g in machine.gpus]
    assert max(sizes) < len(xml.nodes) // 10


def test_unsafe_inputs_get_whole_copies():
    """A ``keep`` already in the XML or two PCI nodes with one bus id: nothing is left out."""
    base = pinned_xml(nvswitch_document(4, 90, 18))
    kept = base.replace('<gpu dev="1"', '<gpu keep="1" dev="1"', 1)
    assert kept != base
    xml = X.parse(kept)
    assert not X.RankCopies(xml, X.Machine(xml)).ok
    first = base.index('busid="', base.index("<pci"))
    bus = base[first + 7:base.index('"', first + 7)]
    dup = base.replace("</cpu>", f'<pci busid="{bus}" class="0x030200"><gpu dev="9"/></pci></cpu>', 1)
    xml = X.parse(dup)
    assert not X.RankCopies(xml, X.Machine(xml)).ok


FUSED_UNDER_A_SWITCH = """<system version="1"><cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
 <pci busid="0000:0f:00.0" class="0x060400" link_speed="" link_width="16">
  <pci busid="0000:10:00.0" class="0x020000" link_speed="" link_width="16"><nic>
   <net name="mlx5_0" dev="0" speed="200000" port="1" guid="0x1" gdr="1"/></nic></pci>
  <pci busid="0000:10:00.1" class="0x020000" link_speed="" link_width="16"><nic>
   <net name="mlx5_1" dev="1" speed="200000" port="1" guid="0x2" gdr="1"/></nic></pci>
 </pci>
 <pci busid="0000:20:00.0" class="0x060400"><pci busid="0000:10:00.2" class="0x030200"><gpu dev="0" sm="90"/></pci></pci>
 <pci busid="0000:30:00.0" class="0x060400"><pci busid="0000:30:01.0" class="0x030200"><gpu dev="1" sm="90"/></pci></pci>
</cpu></system>"""


def test_a_gpu_on_a_bus_id_nic_fusion_would_make_is_copied():
    """Two NICs fused under a switch (NCCL_NET_MERGE_LEVEL=PIX) get a made-up PCI parent on the first free
    bus id above the first NIC's: 0000:10:00.2 is a GPU's, so the parent must be 0000:10:00.3 in every
    rank's copy -- that GPU's branch is never left out."""
    want = _fused(FUSED_UNDER_A_SWITCH, False, False, True, X.PATH_PIX)
    assert 'busid="0000:10:00.3"' in want
    assert _fused(FUSED_UNDER_A_SWITCH, True, False, True, X.PATH_PIX) == want
