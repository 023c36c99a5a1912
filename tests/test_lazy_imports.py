"""`gpucomm --help` and probing must not import torch or networkx (quality bars, docs/ARCHITECTURE.md speed bar)."""
from __future__ import annotations

import subprocess
import sys

from support import ROOT

CHECK = """
import sys, io, contextlib
from gpucomm.app import run
with contextlib.redirect_stdout(io.StringIO()):
    code = run({args!r})
heavy = sorted(m for m in ("torch", "networkx", "numpy") if m in sys.modules)
print(code, ",".join(heavy))
"""


def _run(args):
    out = subprocess.run([sys.executable, "-c", CHECK.format(args=args)], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    return out.stdout.strip().split(" ", 1) + [""]


def test_help_is_light():
    code, heavy, *_ = _run(["--help"])
    assert code == "0" and heavy == ""


def test_show_capture_json_is_light():
    cap = str(ROOT / "fixtures" / "captures" / "topo" / "17_h100-sxm-x8_12nic.txt")
    code, heavy, *_ = _run(["show", cap, "--format", "json"])
    assert code == "0" and heavy == "", (code, heavy)
