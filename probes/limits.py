"""Every bound gpucomm puts on what it reads and does, in one place (README "Limits").

A bound is far above any real machine or file, so that only a broken or hostile input meets it;
past a bound gpucomm stops with exit status 1 and one line naming the file and the limit (inputs),
or leaves the item out with a warning (what a probe reads or runs on a live node).

>>> MAX_GPUS, MAX_HOSTS, MAX_DEPTH
(640, 100000, 64)
"""
from __future__ import annotations

# Bytes ----------------------------------------------------------------------------------------
MAX_INPUT_BYTES = 64 * 1024 * 1024
"""An input file (topology, capture, NCCL XML, log, cluster file, nccl-tests output)."""

MAX_HOST_FILE_BYTES = 8 * 1024 * 1024
"""One file read from /sys, /proc, a snapshot or a --sysfs-root tree (the largest a probe reads
is /proc/cpuinfo: ~1.5 KiB per logical CPU).  Also meta.json and a recorded command's output."""

MAX_NVML_RECORD_BYTES = 64 * 1024 * 1024
"""A snapshot's nvml.json."""

MAX_COMMAND_OUTPUT = 8 * 1024 * 1024
"""What is kept of one stream (stdout or stderr) of a command a probe runs (nvidia-smi);
``nvidia-smi topo -m`` of 8 GPUs and 20 NICs prints ~10 KiB.  Past it the command is stopped."""

COMMAND_TIMEOUT_S = 15.0
"""Seconds a command a probe runs may take; then its whole process group is killed."""

MAX_ELF_SCAN_BYTES = 128 * 1024 * 1024
"""Bytes of one shared library's read-only data a probe scans for its version string (NCCL's
``.rodata`` is a few MiB; its device code sits in other sections and is never read)."""

MAX_LIBRARY_CANDIDATES = 64
"""NCCL libraries and network plugins one probe examines (each found on the loader path)."""

MAX_EXTRACT_BYTES = 1024 * 1024
"""A snapshot's extract of one large file (the byte ranges a probe read of it)."""

# Snapshot archives ------------------------------------------------------------------------------
MAX_ARCHIVE_MEMBERS = 20_000
"""Members of a snapshot .tar.gz (a recorded 8-GPU node has ~1,500)."""

MAX_ARCHIVE_FILE_BYTES = 64 * 1024 * 1024
MAX_ARCHIVE_TOTAL_BYTES = 512 * 1024 * 1024
MAX_ARCHIVE_HEADER_BYTES = 64 * 1024
"""A GNU long-name/long-link or PAX extended header (PATH_MAX is 4 KiB)."""

# Devices --------------------------------------------------------------------------------------
MAX_GPUS = 640
"""GPUs in one node: NCCL_TOPO_MAX_NODES (nccl include/graph.h), the most devices of one kind
NCCL's own topology holds; the largest single-OS machines have 16-32 GPUs."""

MAX_NICS = 640
"""NICs (RDMA devices and network interfaces) in one node, the same NCCL bound."""

MAX_SWITCHES = 4096
"""PCIe switches and host bridges in one node."""

MAX_MATRIX_COLUMNS = MAX_GPUS + MAX_NICS
"""Columns of an ``nvidia-smi topo -m`` matrix (GPUs and NICs)."""

# Clusters -------------------------------------------------------------------------------------
MAX_HOSTS = 100_000
"""Hosts in one cluster file, topology.conf or --hosts expression (the largest GPU clusters
have ~25,000 nodes of 8 GPUs); counted before a hostlist is expanded."""

# Structure ------------------------------------------------------------------------------------
MAX_DEPTH = 64
"""Nesting of a JSON/YAML document (a topology document is 5 levels deep)."""

MAX_YAML_NODES = 4_000_000
"""Values a YAML document may expand to, aliases counted each time they are used (a billion-laughs
document is refused before anything walks it)."""

MAX_INT_DIGITS = 20
"""Digits of an integer in a document or capture (2**64 has 20); a longer one is not a count."""

MAX_WARNINGS = 200
"""Distinct warnings one document keeps; the rest are counted in one last line."""

__all__ = [n for n in dir() if n.startswith(("MAX_", "COMMAND_"))]
