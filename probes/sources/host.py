"""The host a probe looks at: a filesystem root, a command runner and an NVML handle, each
redirectable so that every probe runs the same on a live node, a snapshot and a fixture."""
from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence


@dataclass
class CommandResult:
    argv: list
    returncode: Optional[int]  # None: not run (missing binary / timeout)
    stdout: str = ""
    stderr: str = ""
    error: Optional[str] = None  # why it did not run


class CommandRunner:
    """Runs a command for real, with a timeout, never through a shell."""

    def __init__(self, timeout: float = 15.0):
        self.timeout = timeout

    def run(self, argv: Sequence[str]) -> CommandResult:
        argv = list(argv)
        try:
            p = subprocess.run(argv, capture_output=True, timeout=self.timeout, check=False)
        except FileNotFoundError:
            return CommandResult(argv, None, error=f"{argv[0]} not found on PATH")
        except subprocess.TimeoutExpired:
            return CommandResult(argv, None, error=f"{argv[0]} did not answer within {self.timeout:g}s")
        except OSError as e:
            return CommandResult(argv, None, error=f"{argv[0]}: {e.strerror or e}")
        return CommandResult(argv, p.returncode, p.stdout.decode("utf-8", "replace"),
                             p.stderr.decode("utf-8", "replace"))


class RecordedRunner(CommandRunner):
    """Answers from a directory of recorded outputs (``commands/<name>.txt``), as a snapshot holds.

    The file name is the argv joined with ``_`` and stripped of dashes, e.g. ``nvidia-smi topo -m``
    -> ``nvidia-smi_topo_m.txt``."""

    def __init__(self, directory: Path):
        super().__init__()
        self.directory = Path(directory)

    @staticmethod
    def file_name(argv: Sequence[str]) -> str:
        return "_".join(a.strip("-") for a in argv) + ".txt"

    def run(self, argv: Sequence[str]) -> CommandResult:
        f = self.directory / self.file_name(argv)
        if not f.is_file():
            return CommandResult(list(argv), None, error=f"not recorded ({f.name})")
        return CommandResult(list(argv), 0, f.read_text(encoding="utf-8", errors="replace"))


@dataclass
class Host:
    """Where probes read from.  ``root`` prefixes every sysfs path (hwloc's HWLOC_FSROOT idea)."""

    root: Path = field(default_factory=lambda: Path(os.environ.get("GPUCOMM_FSROOT", "/")))
    runner: CommandRunner = field(default_factory=CommandRunner)
    nvml: Any = None  # gpucomm.probes.sources.nvml.NvmlSource-compatible handle; None = load the real library lazily
    provenance: str = "live"

    def path(self, p: str) -> Path:
        """Absolute host path -> path under the root."""
        return self.root / p.lstrip("/")

    def read_text(self, p: str) -> Optional[str]:
        """Contents of a sysfs file without its trailing newline, or None if it cannot be read."""
        try:
            return self.path(p).read_text(encoding="utf-8", errors="replace").rstrip("\n")
        except (OSError, ValueError):
            return None

    def listdir(self, p: str) -> list:
        try:
            return sorted(os.listdir(self.path(p)))
        except OSError:
            return []

    def realpath(self, p: str) -> Optional[str]:
        """Resolve symlinks *inside* the root and return the host-absolute path."""
        full = self.path(p)
        try:
            real = Path(os.path.realpath(full))
        except OSError:
            return None
        root = Path(os.path.realpath(self.root))
        try:
            rel = real.relative_to(root)
        except ValueError:
            return None
        if not real.exists():
            return None
        return "/" + str(rel)


def load_json_file(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)
