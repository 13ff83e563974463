"""The `bidder` command: serve, migrate, inventory import/export, API keys, `dev`, the admin
views, the record writer and reconcile; one module of this package per command group.

Every command reads the same validated settings as the service; a settings problem prints every
problem and exits 2, a refused input exits 1, and neither prints a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from typing import Any

from bidder.cli import admin, dev, inventory, keys, records, reports, serve
from bidder.cli.common import CommandFailed
from bidder.settings import SettingsError
from store.errors import REDIS_DOWN

EXIT_REFUSED = 1
EXIT_SETTINGS = 2
#: What a shell reports for a process that SIGPIPE ended (128 + 13), as `cat` would exit.
EXIT_BROKEN_PIPE = 141


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bidder",
        description="Real-time DOOH bidder: Core offer API and legacy OpenRTB 2.6 bridge.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve.register(commands)
    inventory.register(commands)
    keys.register(commands)
    dev.register(commands)
    admin.register(commands)
    records.register(commands)
    reports.register(commands)
    _register_bench(commands)
    return parser


def _register_bench(commands: Any) -> None:
    """`bidder bench` lives in the repository's bench/ (it needs the dev tools and is not part of
    the wheel): offered when the checkout has it, absent from an installed wheel."""
    if importlib.util.find_spec("bench") is None:
        return
    bench_cli = importlib.import_module("bench.cli")
    bench_cli.register(commands)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except SettingsError as exc:
        print("bidder: the settings are not valid:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        return EXIT_SETTINGS
    except CommandFailed as exc:
        print(f"bidder: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except BrokenPipeError:  # the reader left (`bidder inventory export | head`): no message
        # Python flushes stdout again at exit, which would fail the same way: point it nowhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except REDIS_DOWN as exc:  # Redis unreachable, or a file that cannot be written (OSError)
        print(f"bidder: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
