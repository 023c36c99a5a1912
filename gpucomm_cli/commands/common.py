"""What every command shares: one way to give the topology and one kind of usage error.

* TOPO is positional everywhere, ``--from`` is an alias of it, ``-`` reads standard input, and no
  TOPO means *this node* (a live probe) for the commands where that makes sense (probe, show,
  paths, rings, trees, predict, select, doctor); ``plan`` needs a TOPO or ``--cluster``.
* Usage errors -- a flag value out of range, a missing input, a format the command does not
  have -- exit 2 (the CLI contract, README "Exit codes"); errors in the inputs themselves exit 1
  (:func:`gpucomm.usage.usage_error`).

Only typer is imported here (``gpucomm --help`` start-up time)."""
from __future__ import annotations

import math
from typing import Callable, Optional, Tuple, TypeVar

import typer

from gpucomm.probes.limits import MAX_HOSTS, MAX_NODES  # noqa: F401  (the --nodes bounds of flag_value)
from gpucomm.usage import usage_error  # noqa: F401 - the commands' usage error (exit 2), named here for them

TOPO_HELP = ("Topology: a saved topology (JSON/YAML), a snapshot (dir or .tar.gz), `nvidia-smi topo -m` output, "
             "an NCCL topology XML, `rocm-smi --showtopo` output, example:<name>, or - for standard input "
             "(also `nvidia-smi -q` / `nvlink -s`, `nvidia-imex-ctl -N` output and NCCL debug logs: GPUs and their "
             "NVLink fabric).")
LIVE_HELP = " Without one: this node (a live probe)."
FROM_HELP = "The same as TOPO (kept for scripts written against earlier versions)."


T = TypeVar("T")


def flag_value(flag: str, value: T, *, lo: Optional[float] = None, hi: Optional[float] = None,
               above: Optional[float] = None, parse: Optional[Callable] = None, choices=None):
    """The one check of a flag's value, for every command: one of ``choices`` (case-insensitive),
    ``parse(value)`` when given (its InputError/ValueError becomes a usage error), then the range --
    ``lo <= x <= hi`` and ``x > above``, finite.  Anything else exits 2 naming the flag, as click's own ``min=`` does (README "Exit codes":
    a flag value out of range is a usage error, an input file that is wrong is exit 1).  None passes
    (a flag not given).

    >>> flag_value("--nodes", 4, lo=1)
    4
    """
    if value is None:
        return None
    if choices is not None and str(value).strip().lower() not in choices:
        usage_error(f"{value!r} is not one of {', '.join(sorted(choices))}", flag)
    if parse is not None:
        from gpucomm.probes.errors import InputError

        try:
            value = parse(value)
        except (InputError, ValueError) as e:
            text = str(e)
            usage_error(text[len(flag) + 1:] if text.startswith(flag + " ") else text, flag)
    nums = value if isinstance(value, (list, tuple)) else [value]
    for x in nums:
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            continue
        if not math.isfinite(x):
            usage_error(f"{x} is not a finite number", flag)
        if (lo is not None and x < lo) or (hi is not None and x > hi) or (above is not None and x <= above):
            rng = ([f">= {lo:g}"] if lo is not None else []) + ([f"> {above:g}"] if above is not None else []) \
                + ([f"<= {hi:g}"] if hi is not None else [])
            usage_error(f"{x if isinstance(x, int) else format(x, 'g')} is out of range (must be {' and '.join(rng)})", flag)
    return value


def max_nodes() -> int:
    """The most nodes a planning command's --nodes may name (probes/limits.py MAX_NODES; `select
    --nodes` and `synth`, which pick from or write a cluster, take up to MAX_HOSTS)."""
    return MAX_NODES


NVLINK_DOMAIN_HELP = ("Nodes (trays) per NVLink domain: the --nodes come in consecutive groups of K that share "
                      "one NVLink domain (a GB200/GB300 NVL72 rack, K <= 18), which NCCL runs as one system (MNNVL); "
                      "between domains traffic goes over the NICs. K must divide the nodes (a document of several "
                      "hosts counts each). Default: from the topology's fabric info (an IMEX domain's nodes, the "
                      "hosts of NCCL's fused dump), else 1.")


def nvlink_domain_option():
    return typer.Option(None, "--nvlink-domain", metavar="K", help=NVLINK_DOMAIN_HELP)


def nvlink_domain_value(k: Optional[int], nodes: Optional[int], doc: Optional[dict] = None) -> Optional[int]:
    """``--nvlink-domain K`` checked (exit 2 naming the flag): K >= 1 and, with the topology ``doc`` loaded,
    a divisor of the trays -- ``--nodes`` x the document's hosts (one for a tray).  None when not given."""
    flag_value("--nvlink-domain", k, lo=1, hi=MAX_HOSTS)
    if k is None or doc is None:
        return k
    hosts = doc.get("hosts") if isinstance(doc, dict) else None
    per = len(hosts) if isinstance(hosts, list) and hosts else 1
    trays = (nodes or 1) * per
    if trays % k:
        what = f"--nodes {nodes or 1}" + (f" x {per} hosts of the document" if per > 1 else "")
        usage_error(f"{k} does not divide the {trays} nodes ({what}) into NVLink domains of equal size",
                    "--nvlink-domain")
    return k


def topo_argument(live: bool = True):
    return typer.Argument(None, metavar="[TOPO]", show_default=False, help=TOPO_HELP + (LIVE_HELP if live else ""))


def from_option():
    return typer.Option(None, "--from", metavar="TOPO", help=FROM_HELP)


def pick_source(topo: Optional[str], src: Optional[str]) -> Optional[str]:
    """TOPO or --from (the same input given twice is fine, two different ones are a usage error)."""
    if topo is not None and src is not None and topo != src:
        usage_error(f"TOPO {topo!r} and --from {src!r} name two inputs; give one", "--from")
    return topo if topo is not None else src


GPU_HELP = ("The GPU model where the topology does not name it (an nvidia-smi topo -m capture, an NCCL XML "
            "skeleton), e.g. B200, H100, A100, or sm90: it sets NVLink bandwidth and NCCL's tuning. Without it such "
            "GPUs are assumed (the first line of the result says which).")


def gpu_option():
    return typer.Option(None, "--gpu", metavar="MODEL", help=GPU_HELP)


def with_gpu_model(doc: dict, gpu: Optional[str]) -> dict:
    """The document with ``--gpu MODEL`` applied (a model gpucomm does not know is a usage error)."""
    if gpu is None:
        return doc
    from gpucomm.probes.load import apply_gpu_model, gpu_model_sm

    flag_value("--gpu", gpu, parse=gpu_model_sm)
    return apply_gpu_model(doc, gpu)


def gpu_note_line(doc: dict, prefix: str = "") -> Optional[str]:
    """The first line of a result whose GPU model the topology does not give: given with --gpu, or
    assumed (``prefix``: ``# `` for outputs whose lines are comments)."""
    from gpucomm.probes.load import gpu_model_note

    note = gpu_model_note(doc)
    return f"{prefix}{note}" if note else None


def probe_this_node(sysfs_root=None) -> dict:
    from gpucomm.probes.sources.host import Host
    from gpucomm.probes.sources.probe import probe_host

    return probe_host(Host(root=sysfs_root) if sysfs_root else Host())


def load_topo(topo: Optional[str], src: Optional[str] = None, live: bool = True,
              missing: str = "give a topology (TOPO, or - for standard input)",
              gpu: Optional[str] = None) -> Tuple[dict, Optional[str]]:
    """(document, the input's name or None for this node); ``gpu``: --gpu MODEL (:func:`with_gpu_model`)."""
    chosen = pick_source(topo, src)
    if chosen is None:
        if not live:
            usage_error(missing)
        return with_gpu_model(probe_this_node(), gpu), None
    from gpucomm.probes.load import load_topology

    return with_gpu_model(load_topology(chosen), gpu), chosen


def out_directory(path) -> None:
    """Create ``--out-dir DIR`` (parents too), refusing a symbolic link; InputError in one line."""
    from gpucomm.probes.errors import InputError

    if path.is_symlink():
        raise InputError("is a symbolic link; not followed", str(path), expected="a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot write: {e.strerror}", str(path)) from None


def hostlist_option(text: str, flag: str) -> list:
    """A Slurm hostlist flag value (``node[01-04]``) -> host names; InputError naming the flag."""
    from gpucomm.probes.errors import InputError
    from gpucomm.probes.formats.slurm_topology import expand_hostlist

    try:
        return expand_hostlist(text)
    except ValueError as e:
        raise InputError(f"{flag} {text!r}: {e}", expected="a Slurm hostlist like node[01-04]") from None
