"""A node with more RDMA devices than NCCL opens: SR-IOV virtual functions (each VF is an RDMA device of its
own).  Such a node is probed, read and planned like any other; NCCL's IB transport opens at most 32 ports
(MAX_IB_DEVS), so NCCL's model -- and every planner reading it -- sees the first 32, and says so.  The host
is fixtures/machines/hgx-h100.yaml with 7 virtual functions on each of its 8 ConnectX-7 (65 NICs with the
Ethernet port: past the old per-host bound of 64), rendered to a sysfs tree by fixtures/generate.py."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from support import load_script, run_cli

ROOT = Path(__file__).resolve().parent.parent
VFS_PER_PF = 7


def _generator():
    return load_script(ROOT / "fixtures" / "generate.py", "fixtures_generate")


@pytest.fixture(scope="module")
def sriov_host(tmp_path_factory) -> Path:
    g = _generator()
    m = copy.deepcopy(g.load_machine("hgx-h100"))
    m["parts"]["cx7_vf"] = dict(m["parts"]["cx7_ib"], device=0x101E)      # ConnectX family VF
    k = len(m["nics"])
    vfs = {}
    for pf in [n for n in m["nics"] if n["part"] == "cx7_ib"]:
        names = []
        for fn in range(1, VFS_PER_PF + 1):
            names.append(f"mlx5_{k}")
            m["nics"].append({"name": f"mlx5_{k}", "bdf": pf["bdf"][:-1] + str(fn), "part": "cx7_vf",
                              "netdev": f"ibvf{k}", "rate": 400})
            k += 1
        vfs[pf["name"]] = names

    def walk(devices):
        for d in devices:
            for p in d.get("ports") or []:
                if p.get("nic") in vfs:
                    p["nic"] = [p["nic"]] + vfs[p["nic"]]
                walk([p] if "switch" in p else [])

    for hb in m["topology"]:
        walk(hb.get("devices") or [])
    dest = tmp_path_factory.mktemp("sriov") / "hgx-h100-sriov"
    g.write_host(g.render(m), dest)
    return dest


def test_the_node_reads_with_every_rdma_device(sriov_host):
    r = run_cli("show", str(sriov_host), "--format", "json")
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    rdma = [n for n in doc["nics"] if n["name"].startswith("mlx5_")]
    assert len(doc["nics"]) > 64 and len(rdma) == 9 + 8 * VFS_PER_PF      # mlx5_0-8 and the VFs


def test_nccl_opens_the_first_32_and_the_plan_says_so(sriov_host):
    from gpucomm.planners.nccl.comm import nccl_comm
    from gpucomm.planners.nccl.system import NET
    from gpucomm.probes.load import load_topology

    doc = load_topology(str(sriov_host))
    comm = nccl_comm(doc, nodes=2)
    # NCCL fuses a PF's VFs into one virtual NIC (the same port); count the devices it opened
    opened = {d for n in comm.rank0.topo.sys.nodes[NET] for d in comm.net_name(n.id).split("+")
              if d.startswith("mlx5_")}
    assert len(opened) == 32 and {f"mlx5_{i}" for i in range(9)} <= opened     # the first 32 by name
    r = run_cli("rings", str(sriov_host), "--nodes", "2", "--format", "json")
    assert r.code == 0, r.stderr
    out = json.loads(r.stdout)
    assert any("opens the first 32" in w for w in out.get("assumptions", []) + out.get("warnings", []))
    assert out["total_bw_GBps"] > 0
    for cmd in (["trees", "--nodes", "2"], ["predict", "--nodes", "2"], ["plan", "--nodes", "2", "--tp", "8"],
                ["doctor"], ["paths"]):
        r = run_cli(cmd[0], str(sriov_host), *cmd[1:])
        assert r.code in (0, 5), (cmd, r.stderr)


def test_a_plain_ethernet_port_beside_rdma_nics_is_not_an_nccl_net():
    """NCCL's IB transport lists RDMA ports only: hgx-h100's management port eno1 is no NET of NCCL's there,
    while a node whose NICs are all plain network ports (Alps' Slingshot, reached through a net plugin)
    keeps them as its NETs."""
    from gpucomm.planners.nccl.comm import nccl_comm
    from gpucomm.planners.nccl.system import NET
    from gpucomm.probes.load import load_topology

    def nets(name):
        comm = nccl_comm(load_topology(f"example:{name}"), nodes=2)
        return {comm.net_name(n.id) for n in comm.rank0.topo.sys.nodes[NET]}

    h100 = nets("hgx-h100")
    assert "eno1" not in h100 and {f"mlx5_{i}" for i in range(8)} <= h100
    assert nets("alps-gh200") == {"hsn0", "hsn1", "hsn2", "hsn3"}
