"""Exit codes (the CLI contract, docs/ARCHITECTURE.md) in one enum."""
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    ERROR = 1          # a source the user can fix: bad file, bad flag value
    USAGE = 2          # typer/click usage error
    NOTHING = 3        # nothing to work on (e.g. plan with no GPUs)
    INFEASIBLE = 4     # plan infeasible
    DEGRADED = 5       # doctor found problems
    INTERNAL = 123     # a bug
