"""The `bidder bench` subcommand: bidder/cli/main.py calls `register(subparsers)`.

The bench package is not part of the wheel (it needs the dev tools: wrk, Locust, matplotlib), so
bidder/cli/main.py should import this module lazily and skip the command when it is missing.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any


def register(subparsers: Any) -> None:
    """Add `bidder bench [--quick] [--skip-locust] [--skip-wrk] ...` to the bidder CLI."""
    from bench.run import add_arguments

    parser: argparse.ArgumentParser = subparsers.add_parser(
        "bench",
        help="seed a realistic inventory, serve it on one pinned worker, load it, write a report",
    )
    add_arguments(parser)
    parser.set_defaults(func=_cmd_bench)


def _cmd_bench(args: argparse.Namespace) -> int:
    from bench.run import BenchConfig, bench

    args.command_line = "bidder " + shlex.join(sys.argv[1:])
    return bench(BenchConfig.from_args(args))
