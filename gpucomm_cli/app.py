"""The ``gpucomm`` entry point: global options, command registration, and the one place where
exceptions become exit codes (the CLI contract, docs/ARCHITECTURE.md).  Heavy modules (torch, rich tables) are only
imported inside the commands that need them, so ``gpucomm --help`` stays fast."""
# (no `from __future__ import annotations`: typer would compile every string annotation at start-up)

import importlib
import sys
from typing import List, Optional

import typer

from gpucomm import __version__
from gpucomm.exitcodes import ExitCode
from gpucomm.settings import SETTINGS, reset

app = typer.Typer(
    name="gpucomm",
    help="How the GPUs of a node (and a cluster) are wired, and what to do about it: "
         "probe -> topology -> rings/trees/predict -> plan/select -> launch.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# Command modules, each with ``register(app)``.  Order = order in --help.
COMMAND_MODULES = [
    "gpucomm.commands.probe",      # probe, show, snapshot, examples
    "gpucomm.commands.paths",      # paths
    "gpucomm.commands.collective", # rings, trees
    "gpucomm.commands.predict",    # predict
    "gpucomm.commands.calibrate",  # calibrate
    "gpucomm.commands.plan",       # plan, select, synth
    "gpucomm.commands.doctor",     # doctor, diff
    "gpucomm.commands.bench",      # bench p2p|collective
    "gpucomm.commands.fabric",     # fabric
    "gpucomm.commands.cluster",    # cluster
    "gpucomm.commands.fleet",      # fleet probe|manifest
]


def _version(value: bool) -> None:
    if value:
        print(f"gpucomm {__version__}")
        raise typer.Exit(0)


@app.callback()
def _globals(
    ctx: typer.Context,
    format: Optional[str] = typer.Option(None, "--format", "-f", help="Output format: table (default), json, yaml, "
                                         "or a command-specific one (matrix, tree, dot, nccl-xml, ...)."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Write data to FILE instead of stdout (- is "
                                         "stdout); the format follows FILE's extension (.json, .yaml, .xml, .dot) "
                                         "unless --format says otherwise. An existing FILE is kept unless --force."),
    force: bool = typer.Option(False, "--force", help="Let -o, snapshot and synth --out-dir replace existing files "
                               "(never through a symbolic link); let plan write a layout that does not fit."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No diagnostics on stderr."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="More diagnostics on stderr."),
    traceback: bool = typer.Option(False, "--traceback", help="Re-raise errors with a Python traceback."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    SETTINGS.format = format
    SETTINGS.output = output
    SETTINGS.force = force
    if output and output != "-" and ctx.invoked_subcommand not in (None, "snapshot"):
        from gpucomm.probes.files import check_writable

        check_writable(output, force)  # before the work, not after it
    SETTINGS.quiet = quiet
    SETTINGS.verbose = verbose
    SETTINGS.traceback = traceback


# The module that registers each command: a run imports only the module of the command it runs
# (every module for --help, no command or a name it does not know).  tests/test_cli_contract.py
# checks this table against what each module registers.
COMMAND_OWNERS = {
    "probe": "gpucomm.commands.probe", "show": "gpucomm.commands.probe", "snapshot": "gpucomm.commands.probe",
    "examples": "gpucomm.commands.probe", "paths": "gpucomm.commands.paths", "rings": "gpucomm.commands.collective",
    "trees": "gpucomm.commands.collective", "predict": "gpucomm.commands.predict",
    "calibrate": "gpucomm.commands.calibrate", "plan": "gpucomm.commands.plan", "select": "gpucomm.commands.plan",
    "synth": "gpucomm.commands.plan", "doctor": "gpucomm.commands.doctor", "diff": "gpucomm.commands.doctor",
    "bench": "gpucomm.commands.bench", "fabric": "gpucomm.commands.fabric",
    "cluster": "gpucomm.commands.cluster", "fleet": "gpucomm.commands.fleet",
}
_REGISTERED: dict = {}   # module -> (the commands, the groups) it added to ``app``


def register_commands(command: Optional[str] = None) -> None:
    """Register the module of ``command`` (every module when None or unknown), keeping --help's order
    (the order of COMMAND_MODULES) whichever was registered first."""
    owner = COMMAND_OWNERS.get(command) if command else None
    for mod in [owner] if owner else COMMAND_MODULES:
        if mod in _REGISTERED:
            continue
        n_cmd, n_grp = len(app.registered_commands), len(app.registered_groups)
        try:
            m = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name == mod:
                _REGISTERED[mod] = ([], [])
                continue
            raise
        m.register(app)
        _REGISTERED[mod] = (app.registered_commands[n_cmd:], app.registered_groups[n_grp:])
    app.registered_commands = [c for mod in COMMAND_MODULES for c in _REGISTERED.get(mod, ([], []))[0]]
    app.registered_groups = [g for mod in COMMAND_MODULES for g in _REGISTERED.get(mod, ([], []))[1]]


def command_name(args: List[str]) -> Optional[str]:
    """The command a hoisted argv runs: its first word that is not a global option or its value."""
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            return args[i + 1] if i + 1 < len(args) else None
        if a in _GLOBAL_VALUE:
            i += 2
            continue
        if a.startswith("-"):
            i += 1
            continue
        return a
    return None

# Global flags may appear anywhere (``gpucomm probe --format json``); they are hoisted in front of
# the command name before click parses argv.
_GLOBAL_VALUE = {"--format", "-f", "--output", "-o"}
_GLOBAL_FLAG = {"--quiet", "-q", "--verbose", "-v", "--traceback", "--force"}


def hoist_globals(argv: List[str]) -> List[str]:
    front: List[str] = []
    rest: List[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            rest.extend(argv[i:])
            break
        name = a.split("=", 1)[0]
        if name in _GLOBAL_VALUE and name.startswith("--") and "=" in a:
            front.append(a)
        elif a in _GLOBAL_VALUE and i + 1 < len(argv):
            front.extend([a, argv[i + 1]])
            i += 1
        elif a in _GLOBAL_FLAG:
            front.append(a)
        else:
            rest.append(a)
        i += 1
    return front + rest


def share_global_options(group) -> None:
    """Show the global options (``--format``, ``-o``, ``-q``, ``-v``, ... every option of the app
    callback but ``--version``) in each subcommand's ``--help`` too.  They are parsed before the
    command name (:func:`hoist_globals`), so the copies only document them: ``expose_value=False``."""
    import copy

    shared = [p for p in group.params if p.name != "version" and getattr(p, "opts", None)]

    def walk(cmd) -> None:
        for sub in (getattr(cmd, "commands", None) or {}).values():
            taken = {o for p in sub.params for o in getattr(p, "opts", [])}
            for p in shared:
                if p.name in {q.name for q in sub.params} or any(o in taken for o in p.opts):
                    continue
                clone = copy.copy(p)
                clone.expose_value = False
                clone.callback = None
                sub.params.append(clone)
            walk(sub)

    walk(group)


def run(argv: Optional[List[str]] = None) -> int:
    """Run the CLI and return an exit code (used by main() and by tests)."""
    from gpucomm.probes.errors import GpucommError, set_reporter
    from gpucomm.settings import diag
    from gpucomm.usage import ClickException, UsageError

    reset()
    files = sys.modules.get("gpucomm.probes.files")   # a run in the same process as an earlier one (tests)
    if files is not None:
        files.forget_inputs()
    set_reporter(lambda message: diag(f"gpucomm: warning: {message}"))
    args = hoist_globals(list(sys.argv[1:] if argv is None else argv))
    register_commands(command_name(args))
    command = typer.main.get_command(app)
    share_global_options(command)
    try:
        rv = command.main(args=args, prog_name="gpucomm", standalone_mode=False)
        return int(rv) if isinstance(rv, int) else 0
    except GpucommError as e:
        if SETTINGS.traceback:
            raise
        from gpucomm.render.text import printable

        print(printable(f"gpucomm: error: {e}"), file=sys.stderr)
        return int(e.exit_code)
    except typer.Exit as e:
        return int(getattr(e, "exit_code", 0) or 0)
    except typer.Abort:
        print("gpucomm: aborted", file=sys.stderr)
        return int(ExitCode.ERROR)
    except ClickException as e:
        e.show(file=sys.stderr)
        return int(ExitCode.USAGE) if isinstance(e, UsageError) else int(ExitCode.ERROR)
    except KeyboardInterrupt:
        print("gpucomm: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:  # a bug: one line, and how to report it
        if SETTINGS.traceback:
            raise
        print(f"gpucomm: internal error: {type(e).__name__}: {' '.join(str(e).split())[:300]} -- this is a bug; "
              "rerun with --traceback and report it with the output of `gpucomm snapshot`", file=sys.stderr)
        return int(ExitCode.INTERNAL)


def _terminate(signum, frame) -> None:
    """SIGTERM ends the run like Ctrl-C: temporary files and directories are removed on the way out."""
    raise KeyboardInterrupt


def main() -> None:
    import gc
    import signal

    # One command is one short process that builds large linked structures (NCCL's systems link every
    # node both ways): collecting cycles every 700 allocations, Python's default, took a sixth of `rings`
    # on 72 GPUs; every 20,000 still collects them, without that cost.
    gc.set_threshold(20000, 20, 10)
    try:
        signal.signal(signal.SIGTERM, _terminate)
    except (ValueError, OSError):  # pragma: no cover - not the main thread
        pass
    code = run()
    # The process ends here: the collection Python runs at shut-down would walk every object the command
    # built only to find what the OS frees anyway (a seventh of `rings` on 72 GPUs).  Frozen, they are
    # skipped; exit handlers and output flushing run as usual.
    gc.freeze()
    sys.exit(code)
