"""Every bound gpucomm puts on what it reads and does, in one place (README "Limits").

A bound is far above any real machine or file, so that only a broken or hostile input meets it;
past a bound gpucomm stops with exit status 1 and one line naming the file and the limit (inputs),
or leaves the item out with a warning (what a probe reads or runs on a live node).

>>> MAX_HOST_GPUS, MAX_GPUS, MAX_HOST_NICS, MAX_HOSTS, MAX_NODES, MAX_DEPTH, MAX_PCI_DEPTH, MAX_CPUS
(16, 72, 256, 16384, 4096, 64, 32, 16384)
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
# What the planners answer in seconds, measured (docs/LIMITS.md): NCCL itself holds 640 devices of a
# kind (NCCL_TOPO_MAX_NODES), but reproducing its channel search and ours on a 32-GPU PCIe node with
# 16 NICs takes minutes, and a 640-GPU node never finishes.
MAX_HOST_GPUS = 16
"""GPUs on one host: the largest single-OS GPU nodes (DGX-2/HGX-2, a2-megagpu-16g) have 16."""

MAX_GPUS = 72
"""GPUs in one document: one host, or the hosts of one multi-node NVLink domain NCCL fuses (an
NVL72 rack: 18 trays of 4)."""

MAX_HOST_NICS = 256
"""NICs (RDMA devices and network interfaces) on one host: an SR-IOV node has a device per virtual
function (two ConnectX ports with 127 VFs each: 256; a capture shows 122 on one host); a DGX has ~12.
NCCL's IB transport opens at most 32 of them (facts.NCCL_MAX_IB_DEVS), so planners see at most those."""

MAX_NICS = 512
"""NICs in one document (the hosts of an NVL72 domain have ~10 each; two SR-IOV hosts)."""

MAX_SWITCHES = 4096
"""PCIe switches and host bridges in one node."""

MAX_MATRIX_COLUMNS = MAX_HOST_GPUS + MAX_HOST_NICS
"""Columns of an ``nvidia-smi topo -m`` matrix (GPUs and NICs of one host)."""

MAX_PCI_DEPTH = 32
"""Levels of a node's PCI tree below a CPU (host bridge, then nested switches); real machines have
at most ~6 (two levels of switches, each an upstream and a downstream port NCCL folds into one
node).  The planners walk the tree recursively; a deeper one is refused on load."""

MAX_CPUS = 16384
"""Logical CPUs in one node, and one past the largest CPU id a CPU list or cpumask may name: twice
Linux's largest NR_CPUS (8192, x86-64 MAXSMP).  A list is counted from its ranges before it is
expanded."""

MAX_NVLINKS = 64
"""NVLinks between two devices (a GPU and a peer GPU, NVSwitch or CPU): the most a GPU has is 18
(NVML_NVLINK_MAX_LINKS: Hopper, Blackwell); a larger count is a corrupt value."""

# Clusters -------------------------------------------------------------------------------------
MAX_HOSTS = 16_384
"""Hosts in one cluster file, topology.conf or --hosts expression (a cluster plan holds ~30 KB per
host: 16,384 hosts are ~500 MB); counted before a hostlist is expanded."""

MAX_NODES = 4096
"""``--nodes`` of the commands that model identical nodes (predict, rings, trees, plan, synth,
calibrate): NCCL's model of the job holds every rank (~180 KB per node of 8 GPUs: 4,096 nodes are
~750 MB); a larger value is a usage error (exit 2)."""

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
