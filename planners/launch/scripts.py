"""Launch configurations for a plan (``gpucomm plan --emit``): a torchrun script, a Slurm batch script, an
Open MPI rankfile, a per-local-rank wrapper script, and the JSON plan itself.

Every emitter applies the *same* per-local-rank GPU order and CPU/memory binding (from
``plan['binding']``), so a job binds identically under torchrun, srun and mpirun -- the launcher-
dependent masks of nccl-tests#57 and pytorch#115305 are the problem being avoided.

GPU visibility: every rank sees all of the node's plan GPUs, ordered so that ``cuda:LOCAL_RANK`` is
the GPU the plan chose (``CUDA_VISIBLE_DEVICES`` in local-rank order under
``CUDA_DEVICE_ORDER=PCI_BUS_ID``).  Per-task GPU binding (``--gpus-per-task=1``/``--gpu-bind=per_task``)
is avoided on purpose: with one visible GPU per rank NCCL loses CUDA IPC/P2P and NIC choice
(nccl#1066, nccl#1250), Open MPI's smcuda breaks (ompi#11949), and nccl-tests fails with
"invalid device ordinal" (nccl-tests#300).  Slurm gets ``--gpu-bind=none`` and the wrapper sets the order.

Syntax references: torchrun flags (torch/distributed/run.py), ``srun --cpu-bind=mask_cpu:``,
``--mem-bind=map_mem:``, ``--distribution=arbitrary`` + ``SLURM_HOSTFILE``, ``sbatch --switches``
(Slurm srun(1)/sbatch(1)), rankfile ``rank N=<host> slot=<cores>`` with logical core
indexes and ``+n<i>`` relative hosts (PRRTE "Rankfiles").
"""
from __future__ import annotations

import shlex
from typing import Dict, List, Optional

from gpucomm.probes.model import parse_cpulist


WRAPPER_NAME = "gpucomm-rank.sh"


def _header(plan: dict) -> List[str]:
    p = plan["parallelism"]
    lines = [
        f"# gpucomm plan: {plan['nodes']} node{'' if plan['nodes'] == 1 else 's'} x {plan['gpus_per_node']} GPUs = "
        f"{plan['world_size']} ranks;"
        f" tp={p['tp']} cp={p['cp']} ep={p['ep']} dp={p['dp']} pp={p['pp']} (Megatron order {p['order']})",
        f"# {plan['mesh']['device_mesh']['code']}",
    ]
    if plan.get("forced"):
        lines.append(f"# WARNING: planned with --force although it does not fit: {plan['forced']}")
    return lines


def shell_value(v: str) -> str:
    """Shell-quote an env value; values starting with '=' (NCCL_IB_HCA's exact-match form) are
    quoted too, for readers as much as for the shell."""
    if v.startswith("="):
        return "'" + v.replace("'", "'\"'\"'") + "'"
    return shlex.quote(v)


def _exports(plan: dict, skip: tuple = ()) -> List[str]:
    out = []
    for name, item in plan["env"].items():
        if name in skip:
            continue
        out.append(f"# {item['reason']}")
        out.append(f"export {name}={shell_value(item['value'])}")
    return out


def wrapper_script(plan: dict) -> str:
    """The per-local-rank wrapper: sets RANK/LOCAL_RANK/WORLD_SIZE from whichever launcher started
    it, the plan's env, OMP_NUM_THREADS, and binds CPUs/memory with numactl (or taskset) before
    ``exec "$@"``.  ``GPUCOMM_CPU_BIND=none`` skips the binding when the launcher already did it."""
    gpn = plan["gpus_per_node"]
    lines = ["#!/bin/bash"] + _header(plan) + [
        f"# Per-local-rank wrapper: {WRAPPER_NAME} COMMAND [ARGS...]",
        "# Works under torchrun (--no-python), srun and mpirun: it reads the launcher's rank variables.",
        "set -euo pipefail",
        'LR="${LOCAL_RANK:-${SLURM_LOCALID:-${OMPI_COMM_WORLD_LOCAL_RANK:-}}}"',
        'if [ -z "$LR" ]; then',
        f'  echo "{WRAPPER_NAME}: no LOCAL_RANK, SLURM_LOCALID or OMPI_COMM_WORLD_LOCAL_RANK in the environment" >&2',
        "  exit 2",
        "fi",
        'export LOCAL_RANK="$LR"',
        'export RANK="${RANK:-${SLURM_PROCID:-${OMPI_COMM_WORLD_RANK:-}}}"',
        'export WORLD_SIZE="${WORLD_SIZE:-${SLURM_NTASKS:-${OMPI_COMM_WORLD_SIZE:-}}}"',
        f"export LOCAL_WORLD_SIZE={gpn}",
    ]
    lines += _exports(plan)
    lines.append('case "$LR" in')
    for b in plan.get("binding", []):
        cpus = shlex.quote(b.get("cpus") or "")
        mems = shlex.quote("" if b.get("mems") is None else str(b["mems"]))
        omp = shlex.quote(str(b.get("omp_num_threads") or ""))
        lines.append(f"  {b['local_rank']}) GPUCOMM_CPUS={cpus}; GPUCOMM_MEMS={mems}; GPUCOMM_OMP={omp} ;;"
                     f"  # GPU {b['gpu']} (cuda:{b['local_rank']})")
    lines += [
        f'  *) echo "{WRAPPER_NAME}: local rank $LR is not in this plan ({gpn} per node)" >&2; exit 2 ;;',
        "esac",
        'if [ -n "$GPUCOMM_OMP" ]; then export OMP_NUM_THREADS="$GPUCOMM_OMP"; fi',
        'BIND="${GPUCOMM_CPU_BIND:-numactl}"',
        "# Each binding is tried with `true` first: on a node whose CPUs or NUMA nodes differ from the plan's",
        "# (another machine type, CPUs offlined, a container's cpuset) numactl/taskset would refuse and the",
        "# rank would not start; the wrapper then says so and runs unbound instead.",
        'if [ "$BIND" != none ] && [ -n "$GPUCOMM_CPUS" ]; then',
        '  if command -v numactl >/dev/null 2>&1; then',
        '    if [ -n "$GPUCOMM_MEMS" ] && numactl --physcpubind="$GPUCOMM_CPUS" --membind="$GPUCOMM_MEMS" true >/dev/null 2>&1; then',
        '      exec numactl --physcpubind="$GPUCOMM_CPUS" --membind="$GPUCOMM_MEMS" "$@"',
        "    fi",
        '    if numactl --physcpubind="$GPUCOMM_CPUS" true >/dev/null 2>&1; then',
        '      exec numactl --physcpubind="$GPUCOMM_CPUS" "$@"',
        "    fi",
        '  elif command -v taskset >/dev/null 2>&1 && taskset -c "$GPUCOMM_CPUS" true >/dev/null 2>&1; then',
        '    exec taskset -c "$GPUCOMM_CPUS" "$@"',
        "  fi",
        '  if command -v numactl >/dev/null 2>&1 || command -v taskset >/dev/null 2>&1; then',
        f'    echo "{WRAPPER_NAME}: local rank $LR: CPUs $GPUCOMM_CPUS (NUMA node ${{GPUCOMM_MEMS:-?}}) of the plan are not '
        f'usable on $(hostname 2>/dev/null || echo this node); running unbound" >&2',
        "  else",
        f'    echo "{WRAPPER_NAME}: neither numactl nor taskset found; running unbound" >&2',
        "  fi",
        "fi",
        'exec "$@"',
    ]
    return "\n".join(lines) + "\n"


def _torchrun_numa_ok(plan: dict) -> bool:
    """torchrun --numa-binding=exclusive gives the same CPU sets as the plan when every GPU's own
    NUMA node (what torch reads from sysfs) has the CPUs (cuda:i is local rank i's GPU by
    CUDA_VISIBLE_DEVICES); not on GB200, whose GPU NUMA nodes hold memory only."""
    return bool(plan.get("binding")) and all(b.get("cpus") and b.get("mems") is not None
                                             and b.get("numa_source") == "gpu" for b in plan["binding"])


# torchrun --numa-binding and torch.numa first ship in PyTorch 2.9 (docs.pytorch.org/docs/2.9/elastic/numa.html);
# the binding reads each CUDA device's NUMA node, so it needs a CUDA build of torch on the nodes.
TORCH_NUMA_BINDING = (2, 9)


def torch_has_numa_binding(version: Optional[str]) -> Optional[bool]:
    """Whether a torch version string (``2.13.0+cpu``) has ``torchrun --numa-binding``; None when unknown.

    >>> torch_has_numa_binding("2.13.0+cpu"), torch_has_numa_binding("2.5.1"), torch_has_numa_binding(None)
    (True, False, None)
    """
    import re

    m = re.match(r"(\d+)\.(\d+)", version or "")
    if not m:
        return None
    return (int(m.group(1)), int(m.group(2))) >= TORCH_NUMA_BINDING


def torchrun_script(plan: dict, command: str = "train.py", port: int = 29500,
                    torch_version: Optional[str] = None) -> str:
    """A script to run on every node: static rendezvous (``--node-rank``), because the plan fixes
    which host is which node rank (c10d rendezvous would assign node ranks in arrival order).
    ``torch_version``: the torch installed where the plan is made; ``--numa-binding`` is used only
    when it has the flag, else the per-rank wrapper binds (it works with every torchrun)."""
    nodes, gpn = plan["nodes"], plan["gpus_per_node"]
    hosts = plan.get("hosts")
    lines = ["#!/bin/bash"] + _header(plan) + [
        "# Run on every node. NODE_RANK: this node's rank; MASTER_ADDR: the address of node rank 0.",
        "set -euo pipefail",
    ]
    if hosts:
        lines.append('if [ -z "${NODE_RANK:-}" ]; then')
        lines.append('  case "$(hostname -s)" in')
        for i, h in enumerate(hosts):
            lines.append(f"    {shlex.quote(h)}) NODE_RANK={i} ;;")
        lines.append('    *) echo "this host is not in the plan; set NODE_RANK" >&2; exit 2 ;;')
        lines.append("  esac")
        lines.append("fi")
        lines.append(f'MASTER_ADDR="${{MASTER_ADDR:-{hosts[0]}}}"')
    elif nodes > 1:
        lines.append(f': "${{NODE_RANK:?set NODE_RANK to the rank of this node, 0..{nodes - 1}}}"')
        lines.append(': "${MASTER_ADDR:?set MASTER_ADDR to the address of node rank 0}"')
    else:
        lines.append("NODE_RANK=0")
        lines.append('MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"')
    lines.append(f'MASTER_PORT="${{MASTER_PORT:-{port}}}"')
    lines += _exports(plan)
    args = [f"--nnodes={nodes}", f"--nproc-per-node={gpn}", '--node-rank="$NODE_RANK"',
            '--master-addr="$MASTER_ADDR"', '--master-port="$MASTER_PORT"']
    cmd = shlex.split(command) if command else ["train.py"]
    quoted = " ".join(shlex.quote(c) for c in cmd)
    need = ".".join(map(str, TORCH_NUMA_BINDING))
    if _torchrun_numa_ok(plan) and torch_has_numa_binding(torch_version):
        lines.append("# --numa-binding=exclusive splits each GPU's NUMA node between its local ranks, the CPU sets of")
        lines.append(f"# this plan (torch/numa/binding.py; torch >= {need} with CUDA, and numactl; torch {torch_version} here).")
        lines.append("# A torchrun without the flag: replace it with")
        lines.append(f"#   --no-python ./{WRAPPER_NAME} python {quoted}   (gpucomm plan ... --emit wrapper)")
        lines.append("exec torchrun " + " ".join(args) + " --numa-binding=exclusive " + quoted + ' "$@"')
    elif _torchrun_numa_ok(plan):
        have = f"the torch here is {torch_version}" if torch_version else "no torch is installed where this plan was made"
        lines.append(f"# CPU binding by the per-rank wrapper (gpucomm plan ... --emit wrapper -o {WRAPPER_NAME}): it works with")
        lines.append(f"# every torchrun. torchrun --numa-binding=exclusive gives the same CPU sets but needs torch >= {need}")
        lines.append(f"# with CUDA ({have}).")
        lines.append("exec torchrun " + " ".join(args) + f" --no-python ./{WRAPPER_NAME} python " + quoted + ' "$@"')
    elif any(b.get("cpus") for b in plan.get("binding") or []):
        # torch would bind by the GPU's own NUMA node (memory-only on GB200/GH200, or unknown):
        # the wrapper applies the plan's CPU sets instead.
        lines.append(f"# CPU binding by the per-rank wrapper (gpucomm plan ... --emit wrapper -o {WRAPPER_NAME}),")
        lines.append("# because torchrun --numa-binding would read the GPU's own NUMA node, which has no CPUs here.")
        lines.append("exec torchrun " + " ".join(args) + f" --no-python ./{WRAPPER_NAME} python " + quoted + ' "$@"')
    else:
        lines.append("# NUMA placement unknown for every GPU: no CPU binding.")
        lines.append("exec torchrun " + " ".join(args) + " " + quoted + ' "$@"')
    return "\n".join(lines) + "\n"


def compress_hostlist_ordered(hosts: List[str]) -> str:
    """Order-preserving Slurm hostlist: consecutive numbered hosts become ``pfx[a-b]``."""
    from gpucomm.probes.formats.slurm_topology import compress_hostlist

    return compress_hostlist(hosts, keep_order=True)


def slurm_script(plan: dict, command: str = "train.py", job_name: str = "gpucomm", port: int = 29500,
                 node_gpus: Optional[int] = None, switches: Optional[int] = None, segment: Optional[int] = None) -> str:
    """An sbatch script to submit as is: whole nodes, every task sees the node's GPUs
    (``--gpu-bind=none``, the wrapper orders CUDA_VISIBLE_DEVICES), CPUs bound by srun's
    ``--cpu-bind=mask_cpu:`` and memory by ``--mem-bind=map_mem:`` (same sets as the wrapper).
    ``switches``: topology/tree's ``--switches``; ``segment``: topology/block's ``--segment`` (nodes
    per segment, each segment inside one block) -- the one replaces the other."""
    nodes, gpn = plan["nodes"], plan["gpus_per_node"]
    hosts = plan.get("hosts")
    binding = plan.get("binding") or []
    lines = ["#!/bin/bash",
             f"#SBATCH --job-name={job_name}",
             f"#SBATCH --nodes={nodes}",
             f"#SBATCH --ntasks-per-node={gpn}",
             f"#SBATCH --gpus-per-node={node_gpus or gpn}",
             "#SBATCH --exclusive"]
    if segment:
        lines.append(f"#SBATCH --segment={segment}")
        if hosts:   # topology/block (Slurm 24.11) refuses --nodelist beside --segment: the plan's hosts as a note
            lines.append(f"# gpucomm placed the job on {compress_hostlist_ordered(sorted(hosts))}; with --segment "
                         "Slurm picks the nodes (it refuses --nodelist beside it)")
            hosts = None
    elif hosts:
        lines.append(f"#SBATCH --nodelist={compress_hostlist_ordered(sorted(hosts))}")
    if switches and not segment:
        lines.append(f"#SBATCH --switches={switches}")
    lines += _header(plan)
    lines.append("set -euo pipefail")
    if hosts:
        lines.append(f"MASTER_ADDR={shlex.quote(hosts[0])}  # node rank 0 of the plan")
    else:
        lines.append('MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"')
    lines += ["export MASTER_ADDR",
              f'export MASTER_PORT="${{MASTER_PORT:-{port}}}"',
              'export WORLD_SIZE="$SLURM_NTASKS"']
    lines += _exports(plan, skip=("CUDA_VISIBLE_DEVICES",))
    srun = ["srun", "--kill-on-bad-exit=1", "--gpu-bind=none"]
    masks = [b.get("cpu_mask") for b in binding]
    if binding and all(masks):
        srun.append("--cpu-bind=verbose,mask_cpu:" + ",".join(masks))
    else:
        srun.append("--cpu-bind=none")
    mems = [b.get("mems") for b in binding]
    if binding and all(m is not None for m in mems):
        srun.append("--mem-bind=map_mem:" + ",".join(str(m) for m in mems))
    if hosts:
        # Rank order = the plan's host order (switch-aware): one line per task in SLURM_HOSTFILE.
        lines.append(f"GPUCOMM_HOSTS={shlex.quote(compress_hostlist_ordered(hosts))}")
        lines.append('export SLURM_HOSTFILE="${TMPDIR:-/tmp}/gpucomm-hosts.$SLURM_JOB_ID"')
        lines.append(f'scontrol show hostnames "$GPUCOMM_HOSTS" | awk \'{{for (i = 0; i < {gpn}; i++) print}}\' > "$SLURM_HOSTFILE"')
        srun.append("--distribution=arbitrary")
    lines.append("# The per-rank wrapper (gpucomm plan ... --emit wrapper), passed inline so no shared file is needed;")
    lines.append("# srun already binds CPUs and memory, so the wrapper only sets the environment.")
    lines.append("GPUCOMM_RANK_SCRIPT=$(cat <<'GPUCOMM_EOF'")
    lines.append(wrapper_script(plan).rstrip("\n"))
    lines.append("GPUCOMM_EOF")
    lines.append(")")
    lines.append("export GPUCOMM_RANK_SCRIPT GPUCOMM_CPU_BIND=none")
    cmd = shlex.split(command) if command else ["train.py"]
    lines.append(" ".join(srun) + ' bash -c "$GPUCOMM_RANK_SCRIPT" ' + WRAPPER_NAME + " python "
                 + " ".join(shlex.quote(c) for c in cmd))
    return "\n".join(lines) + "\n"


def rankfile(plan: dict, all_cpus: Optional[List[int]] = None, command: str = "train.py",
             n_cores: Optional[int] = None) -> str:
    """Open MPI rankfile: ``rank N=<host> slot=<logical cores>``; hosts are the plan's hosts or the
    relative ``+n<i>`` form (i-th node of the allocation).  A rank without known CPUs gets every
    logical core of the node (``n_cores`` of them; else one per cpu of ``all_cpus``)."""
    hosts = plan.get("hosts")
    binding = {b["local_rank"]: b for b in plan.get("binding", [])}
    cpus_all = all_cpus or sorted({c for b in binding.values() if b.get("cpus") for c in parse_cpulist(b["cpus"])})
    if n_cores:
        cpus_all = list(range(n_cores))
    slots: Dict[int, str] = {lr: b.get("logical_cores") or "" for lr, b in binding.items()}
    n = plan["world_size"]
    # The wrapper exports the plan's env itself; it only needs to skip its own CPU binding.
    env_flags = "-x GPUCOMM_CPU_BIND=none"
    cmd = " ".join(shlex.quote(c) for c in (shlex.split(command) if command else ["train.py"]))
    lines = _header(plan) + [
        "# Open MPI rankfile; slots are hwloc *logical* core indexes (check with --report-bindings)."
        + ("" if hosts else " Hosts +n<i> are relative: they need an allocation (Slurm/PBS/LSF); else plan with --hosts."),
        f"#   Open MPI 4: mpirun -np {n} --rankfile THIS_FILE --report-bindings {env_flags} ./{WRAPPER_NAME} python {cmd}",
        f"#   Open MPI 5: mpirun -np {n} --map-by rankfile:file=THIS_FILE --report-bindings {env_flags} ./{WRAPPER_NAME} python {cmd}",
        f"# ({WRAPPER_NAME}: gpucomm plan ... --emit wrapper -o {WRAPPER_NAME}, written executable; GPUCOMM_CPU_BIND=none "
        "because the rankfile binds.)",
    ]
    gpn = plan["gpus_per_node"]
    for r in range(n):
        node, lr = divmod(r, gpn)
        host = hosts[node] if hosts else f"+n{node}"
        # A rank without known CPUs may run on any core of its host.
        slot = slots.get(lr) or f"0-{max(0, len(cpus_all) - 1)}"
        lines.append(f"rank {r}={host} slot={slot}")
    return "\n".join(lines) + "\n"


def megatron_script(plan: dict) -> str:
    """The Megatron-LM arguments of the plan as a bash array to splice into a launch line."""
    meg = plan.get("megatron") or {}
    p = plan["parallelism"]
    lines = _header(plan) + [
        f"# Megatron-LM arguments (megatron/training/arguments.py): world {plan['world_size']} = tp {p['tp']} x cp {p['cp']}"
        f" x dp {p['dp']} x pp {p['pp']}; expert layers: etp {p['etp']} x ep {p['ep']} x edp {p['edp']} x pp {p['pp']}",
        "# (megatron/core/parallel_state.py derives dp and the expert dp itself from WORLD_SIZE).",
    ]
    lines += [f"# note: {n}" for n in meg.get("notes") or []]
    lines.append("MEGATRON_PARALLEL_ARGS=(")
    for flag, value in meg.get("args") or []:
        lines.append(f"    {flag}" + ("" if value is None else f" {shlex.quote(str(value))}"))
    lines.append(")")
    lines.append(f"# usage: torchrun --nnodes={plan['nodes']} --nproc-per-node={plan['gpus_per_node']} ... pretrain_gpt.py "
                 '"${MEGATRON_PARALLEL_ARGS[@]}" ...')
    return "\n".join(lines) + "\n"


def deepspeed_json(plan: dict) -> str:
    """The DeepSpeed config of the plan (``ds_config.json``; JSON only, so ``> ds_config.json`` works)."""
    import json

    return json.dumps(plan.get("deepspeed") or {}, indent=2, sort_keys=True) + "\n"


def _host_names(plan: dict) -> List[str]:
    return list(plan.get("hosts") or [f"node{i:0{max(2, len(str(plan['nodes'] - 1)))}d}" for i in range(plan["nodes"])])


def hostfile(plan: dict) -> str:
    """Open MPI / DeepSpeed hostfile, one ``host slots=N`` line per node in node-rank order (the
    same syntax both read: Open MPI's ``--hostfile``, DeepSpeed's ``-H``/``--hostfile``)."""
    hosts = _host_names(plan)
    lines = _header(plan) + [
        "# Open MPI (mpirun --hostfile THIS_FILE) and DeepSpeed (deepspeed --hostfile THIS_FILE) hostfile,"
        " node-rank order" + ("" if plan.get("hosts") else "; placeholder names: plan with --hosts to name the nodes"),
    ]
    lines += [f"{h} slots={plan['gpus_per_node']}" for h in hosts]
    return "\n".join(lines) + "\n"


def machinefile(plan: dict) -> str:
    """MPICH / Intel MPI (Hydra) machinefile: ``host:N`` per node, node-rank order."""
    hosts = _host_names(plan)
    lines = _header(plan) + ["# MPICH/Intel MPI machinefile (mpiexec -f THIS_FILE), node-rank order"]
    lines += [f"{h}:{plan['gpus_per_node']}" for h in hosts]
    return "\n".join(lines) + "\n"


def slurm_gres_type(name: Optional[str]) -> str:
    """Slurm's GPU type string for a device name, as its NVML autodetection forms it
    (``gpu_common_underscorify_tolower``: lower case, spaces to underscores).

    >>> slurm_gres_type("NVIDIA H100 80GB HBM3")
    'nvidia_h100_80gb_hbm3'
    """
    import re

    return re.sub(r"\s+", "_", (name or "gpu").strip()).lower() or "gpu"


def gres_conf(view, plan: Optional[dict] = None) -> str:
    """Slurm ``gres.conf`` for a node's GPUs, written from the topology because Slurm without NVML
    support (Debian's packages) cannot detect them: one line per GPU (``Links=`` requires a single
    ``File=`` per line, gres.conf(5)), ``Cores=`` the Slurm abstract (hwloc logical) indexes of the
    cores of the GPU's NUMA node, ``Links=`` the NVLink counts to GPU 0, 1, ... (-1 = itself), as
    the ``nvidia-smi topo -m`` matrix shows them.  ``File=/dev/nvidiaN`` takes the device minor
    number to be the NVML index (``nvidia-smi -q | grep Minor`` shows the real one)."""
    from gpucomm.planners.placement.binding import core_map, logical_core_index
    from gpucomm.probes.topology import nv_count

    core_of = core_map(view)
    logical = logical_core_index(view, core_of)
    hosts = (plan or {}).get("hosts")
    prefix = ""
    if hosts:
        from gpucomm.probes.formats.slurm_topology import compress_hostlist

        prefix = f"NodeName={compress_hostlist(sorted(hosts))} "
    gpus = [view.topo.gpu(i) for i in sorted(view.index)]
    types = {slurm_gres_type(g.name) for g in gpus}
    lines = ["# Slurm gres.conf written by gpucomm from the node's topology (gres.conf(5)).",
             "# File=/dev/nvidiaN assumes the device minor number is the NVML index (check: nvidia-smi -q | grep Minor).",
             "# Cores= are Slurm's abstract core indexes (hwloc logical, as slurmd -C counts); Links= NVLinks to GPU 0,1,...",
             "AutoDetect=off"]
    for g in gpus:
        i = g.index
        cpus = view.numa_cpus.get(g.numa_node) if g.numa_node is not None else None
        if not cpus:
            from gpucomm.probes.model import parse_cpulist

            try:
                cpus = parse_cpulist(g.cpu_affinity or "")
            except (ValueError, TypeError):
                cpus = []
        cores = format_cores({logical[core_of[c]] for c in cpus if c in core_of})
        links = []
        for o in sorted(view.index):
            links.append("-1" if o == i else str(nv_count(view.level.get((i, o)))))
        parts = [f"{prefix}Name=gpu", f"Type={slurm_gres_type(g.name)}", f"File=/dev/nvidia{i}"]
        if cores:
            parts.append(f"Cores={cores}")
        if any(x not in ("-1", "0") for x in links):
            parts.append("Links=" + ",".join(links))
        lines.append(" ".join(parts))
    count = len(gpus)
    gres = ",".join(f"gpu:{t}:{sum(1 for g in gpus if slurm_gres_type(g.name) == t)}" for t in sorted(types))
    lines.append(f"# slurm.conf: GresTypes=gpu, and on the NodeName= line of these nodes: Gres={gres}"
                 + (f"  ({count} GPUs)" if len(types) > 1 else ""))
    return "\n".join(lines) + "\n"


def format_cores(cores) -> str:
    from gpucomm.probes.model import format_cpulist

    return format_cpulist(sorted(cores)) if cores else ""


def build_launch(plan: dict, *, command: str = "train.py", all_cpus: Optional[List[int]] = None,
                 node_gpus: Optional[int] = None, switches: Optional[int] = None, port: int = 29500,
                 n_cores: Optional[int] = None, torch_version: Optional[str] = None, view=None,
                 segment: Optional[int] = None) -> dict:
    """Fill ``plan['launch']`` with every emitter's text.  ``n_cores``: physical cores of a node
    (the rankfile's logical core range; SMT siblings are not separate slots)."""
    plan["launch"] = {
        "torchrun": torchrun_script(plan, command, port, torch_version=torch_version),
        "slurm": slurm_script(plan, command, node_gpus=node_gpus, switches=switches, port=port, segment=segment),
        "rankfile": rankfile(plan, all_cpus, command, n_cores),
        "wrapper": wrapper_script(plan),
        "megatron": megatron_script(plan),
        "deepspeed": deepspeed_json(plan),
        "hostfile": hostfile(plan),
        "machinefile": machinefile(plan),
    }
    if view is not None:
        plan["launch"]["gres"] = gres_conf(view, plan)
    return plan
