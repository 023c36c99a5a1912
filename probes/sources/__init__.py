"""Discovery of a live node (or a snapshot of one): the ``Host`` every read goes through, one module
per source (NVML, nvidia-smi, sysfs PCI, InfiniBand, network interfaces, NUMA), the probe driver
and snapshots."""
