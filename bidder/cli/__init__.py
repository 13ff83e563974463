"""The `bidder` command line: `main` (the console script, also `python -m bidder.cli`) builds
the parser from one module per command group (`serve`, `inventory`, `keys`, `dev`, `admin`,
`records`) and maps their failures to exit codes without a traceback."""

from bidder.cli.common import CommandFailed
from bidder.cli.main import EXIT_BROKEN_PIPE, EXIT_REFUSED, EXIT_SETTINGS, build_parser, main

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_REFUSED",
    "EXIT_SETTINGS",
    "CommandFailed",
    "build_parser",
    "main",
]
