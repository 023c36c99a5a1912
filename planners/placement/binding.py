"""CPU binding of the local ranks: each rank's share of its GPU's NUMA-local cores (``torchrun
--numa-binding=exclusive`` semantics), SMT siblings, hwloc's logical core numbers (``gpucomm plan``)."""
from __future__ import annotations

from typing import Dict, List, Optional

from gpucomm.probes.model import canonical_cpulist, format_cpulist, parse_cpulist

from gpucomm.planners.placement.nodeview import NodeView


def smt_siblings(all_cpus: List[int]) -> Dict[int, int]:
    """{logical cpu: its physical core's id (lowest sibling)}.

    The topology document has no thread siblings, so this assumes the Linux enumeration of x86
    servers with SMT on: cpu ``c`` and ``c + N/2`` share a core when the machine's cpus are exactly
    ``0..N-1`` and N is even.  :func:`cpu_binding` only applies it when the NUMA cpulists come in two
    halves (``0-55,112-167``); otherwise every logical cpu is its own core."""
    n = len(all_cpus)
    if n >= 2 and n % 2 == 0 and all_cpus == list(range(n)):
        return {c: (c if c < n // 2 else c - n // 2) for c in all_cpus}
    return {c: c for c in all_cpus}


def _smt_layout_plausible(numa_cpus: Dict[int, List[int]], all_cpus: List[int]) -> bool:
    n = len(all_cpus)
    if n < 2 or n % 2 or all_cpus != list(range(n)) or len(numa_cpus) < 1:
        return False
    half = n // 2
    gap = False
    for cpus in numa_cpus.values():
        lo = [c for c in cpus if c < half]
        hi = [c - half for c in cpus if c >= half]
        if lo != hi:
            return False
        gap = gap or (cpus[-1] - cpus[0] + 1 != len(cpus))
    # One contiguous range per node ("0-9") fits both SMT and no SMT: only a split list
    # ("0-55,112-167") is evidence of siblings; without it each logical cpu counts as a core.
    return gap


def core_map(view: NodeView) -> Dict[int, int]:
    """{logical cpu: physical core id} with the SMT rule of :func:`smt_siblings` applied only
    when the NUMA cpulists show it."""
    if _smt_layout_plausible(view.numa_cpus, view.all_cpus):
        return smt_siblings(view.all_cpus)
    return {c: c for c in view.all_cpus}


def logical_core_index(view: NodeView, core_of: Optional[Dict[int, int]] = None) -> Dict[int, int]:
    """{physical core id: hwloc logical core index} -- what Open MPI rankfile slots and Slurm's
    ``Cores=`` count (hwloc's lstopo -l).  hwloc numbers cores depth-first through
    the tree: package by package, and inside a package by the first PU of each core.  The document
    has no package ids, so NUMA nodes (numbered socket by socket by Linux) stand in for them.  With
    contiguous numbering this is just the order of the cores' first cpu; with the interleaved
    numbering of many dual-socket BIOSes (NUMA 0 = ``0,2,4,...``) core ``c`` of socket 1 is *not*
    logical core ``c``: socket 0's cores come first."""
    core_of = core_of if core_of is not None else core_map(view)
    numa_of_cpu = {c: n for n, cs in view.numa_cpus.items() for c in cs}
    first_cpu: Dict[int, int] = {}
    for c, core in core_of.items():
        first_cpu[core] = min(first_cpu.get(core, c), c)
    big = 1 << 30
    order = sorted(first_cpu, key=lambda core: (numa_of_cpu.get(first_cpu[core], big), first_cpu[core]))
    return {core: i for i, core in enumerate(order)}


def cpu_binding(view: NodeView, local_gpus: List[int]) -> List[dict]:
    """Per local rank: the CPUs it is bound to -- the GPU's NUMA-local CPUs split evenly, by
    physical core, between the local ranks whose GPUs share that NUMA node; lower local ranks get
    the extra cores.  This is ``torchrun --numa-binding=exclusive`` (torch/numa/binding.py
    ``_exclusive_get_logical_cpus_to_bind_to``) when CUDA device i is local rank i's GPU.

    Returns [{local_rank, gpu, numa_node, cpus (cpulist str|None), cores (int), mems (int|None),
    numa_source ("gpu": the GPU's own NUMA node, "affinity": from its CPU affinity), logical_cores
    (hwloc-style logical core indexes, :func:`logical_core_index`: Open MPI rankfile slots)}]."""
    core_of = core_map(view)
    logical = logical_core_index(view, core_of)
    by_numa: Dict[Optional[int], List[int]] = {}
    numa_of: Dict[int, Optional[int]] = {}
    source: Dict[int, str] = {}
    for lr, gi in enumerate(local_gpus):
        g = view.gpu(gi)
        numa = g.numa_node
        source[lr] = "gpu"
        if not (isinstance(numa, int) and numa >= 0 and numa in view.numa_cpus):
            # GB200/GH200: the GPU's own NUMA node holds its memory, no CPUs; and captures may only
            # give NUMA/CPU affinity.  Use the one CPU NUMA node inside the GPU's CPU affinity.
            numa = None
            source[lr] = "affinity"
            cands = [a for a in g.numa_affinity if a in view.numa_cpus]
            try:
                cpus_aff = set(parse_cpulist(g.cpu_affinity or ""))
            except (ValueError, TypeError):
                cpus_aff = set()
            if cpus_aff:
                inside = [n for n, cs in view.numa_cpus.items() if set(cs) <= cpus_aff]
                if len(inside) == 1:
                    numa = inside[0]
            if numa is None and len(cands) == 1:
                numa = cands[0]
        numa_of[lr] = numa
        by_numa.setdefault(numa, []).append(lr)
    out = []
    for lr, gi in enumerate(local_gpus):
        numa = numa_of[lr]
        g = view.gpu(gi)
        if numa is None:
            # No NUMA node: bind to the GPU's cpu_affinity if NVML gave one (whole set, shared).
            aff = canonical_cpulist(g.cpu_affinity) if g.cpu_affinity else None
            try:
                cpus = parse_cpulist(aff) if aff else []
            except ValueError:
                cpus = []
            out.append({"local_rank": lr, "gpu": gi, "numa_node": None, "cpus": format_cpulist(cpus) or None,
                        "cores": len({core_of.get(c, c) for c in cpus}) if cpus else None, "mems": None,
                        "numa_source": None,
                        "logical_cores": format_cpulist({logical[core_of[c]] for c in cpus if c in core_of}) or None})
            continue
        cpus = view.numa_cpus[numa]
        cores: Dict[int, List[int]] = {}
        for c in cpus:
            cores.setdefault(core_of.get(c, c), []).append(c)
        core_ids = sorted(cores)
        sharers = by_numa[numa]
        pos = sharers.index(lr)
        per, extra = divmod(len(core_ids), len(sharers))
        if per < 1:
            # fewer cores than ranks: share the node's cpus (torchrun raises here; we warn in env).
            mine = cpus
            ncores = len(core_ids)
        else:
            start = pos * per + min(pos, extra)
            end = start + per + (1 if pos < extra else 0)
            mine = sorted(c for cid in core_ids[start:end] for c in cores[cid])
            ncores = end - start
        out.append({"local_rank": lr, "gpu": gi, "numa_node": numa, "cpus": format_cpulist(mine),
                    "cores": ncores, "mems": numa, "numa_source": source[lr],
                    "logical_cores": format_cpulist({logical[core_of[c]] for c in mine if c in core_of}) or None})
    return out
