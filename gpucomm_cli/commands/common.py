"""What every command shares: one way to give the topology and one kind of usage error.

* TOPO is positional everywhere, ``--from`` is an alias of it, ``-`` reads standard input, and no
  TOPO means *this node* (a live probe) for the commands where that makes sense (probe, show,
  paths, rings, trees, predict, select, doctor); ``plan`` needs a TOPO or ``--cluster``.
* Usage errors -- a flag value out of range, a missing input, a format the command does not
  have -- exit 2 (the CLI contract, README "Exit codes"); errors in the inputs themselves exit 1.

Only typer/click are imported here (``gpucomm --help`` start-up time)."""
from __future__ import annotations

from typing import NoReturn, Optional, Tuple

import typer

TOPO_HELP = ("Topology: a saved topology (JSON/YAML), a snapshot (dir or .tar.gz), `nvidia-smi topo -m` output, "
             "an NCCL topology XML, `rocm-smi --showtopo` output, example:<name>, or - for standard input "
             "(also `nvidia-smi -q` / `nvlink -s`, `nvidia-imex-ctl -N` output and NCCL debug logs: GPUs and their "
             "NVLink fabric).")
LIVE_HELP = " Without one: this node (a live probe)."
FROM_HELP = "The same as TOPO (kept for scripts written against earlier versions)."


def usage_error(message: str, param: Optional[str] = None) -> NoReturn:
    """Raise click's usage error (exit 2), with the command's usage line when there is a context."""
    try:   # typer >= 0.2x vendors click as typer._click; older typer depends on click itself
        from typer._click.exceptions import BadParameter, UsageError
        from typer._click.globals import get_current_context
    except ImportError:
        from click import BadParameter, UsageError, get_current_context  # type: ignore[no-redef]

    ctx = get_current_context(silent=True)
    if param:
        raise BadParameter(message, ctx=ctx, param_hint=f"'{param}'")
    raise UsageError(message, ctx=ctx)


def topo_argument(live: bool = True):
    return typer.Argument(None, metavar="[TOPO]", show_default=False, help=TOPO_HELP + (LIVE_HELP if live else ""))


def from_option():
    return typer.Option(None, "--from", metavar="TOPO", help=FROM_HELP)


def pick_source(topo: Optional[str], src: Optional[str]) -> Optional[str]:
    """TOPO or --from (the same input given twice is fine, two different ones are a usage error)."""
    if topo is not None and src is not None and topo != src:
        usage_error(f"TOPO {topo!r} and --from {src!r} name two inputs; give one", "--from")
    return topo if topo is not None else src


def probe_this_node(sysfs_root=None) -> dict:
    from gpucomm.probes.sources.host import Host
    from gpucomm.probes.sources.probe import probe_host

    return probe_host(Host(root=sysfs_root) if sysfs_root else Host())


def load_topo(topo: Optional[str], src: Optional[str] = None, live: bool = True,
              missing: str = "give a topology (TOPO, or - for standard input)") -> Tuple[dict, Optional[str]]:
    """(document, the input's name or None for this node)."""
    chosen = pick_source(topo, src)
    if chosen is None:
        if not live:
            usage_error(missing)
        return probe_this_node(), None
    from gpucomm.probes.load import load_topology

    return load_topology(chosen), chosen


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
