"""Decisions over a topology: pure functions of the typed ``Topology`` (``gpucomm.probes.topology``)."""
