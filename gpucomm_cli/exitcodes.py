"""Exit codes (the CLI contract, docs/ARCHITECTURE.md) in one enum."""
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    ERROR = 1          # an input the user can fix: a bad file, a value that does not parse
    USAGE = 2          # usage: a flag value out of range, an unknown --format/--emit, a missing input
    NOTHING = 3        # nothing to work on (e.g. plan with no GPUs)
    INFEASIBLE = 4     # plan infeasible
    DEGRADED = 5       # doctor found problems
    INTERNAL = 123     # a bug
