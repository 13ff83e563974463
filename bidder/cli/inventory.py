"""`bidder inventory import FILE` and `bidder inventory export [FILE]`: the inventory document
in and out of Postgres, with the admin API's rules.

`register(subparsers)` adds the command; each action sets `func(args) -> int` (the exit code).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import msgspec

from bidder.admin import import_inventory
from bidder.cli.common import CommandFailed, command_settings, formatted_json, with_connection
from bidder.errors import UNREADABLE_JSON
from bidder.field_problems import decode_document
from bidder.settings import Settings
from matching.inventory import InventoryDocument, Problem
from store.inventory_repo import InventoryRejected, export_document
from store.postgres import Conn


class _ProgressLine:
    """Progress of an import on a terminal: one line per list, rewritten in place."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.live = out.isatty()

    def __call__(self, kind: str, done: int, total: int) -> None:
        if self.live:
            end = "\n" if done >= total else ""
            self.out.write(f"\r  {kind:<14} {done:>9,} / {total:,}{end}")
            self.out.flush()


def _describe(problem: Problem) -> str:
    where = f"{problem.list}[{problem.index}]"
    if problem.id:
        where += f" (id {problem.id})"
    return f"{where} {problem.field}: {problem.message}"


def read_document(path: Path) -> InventoryDocument:
    """An inventory document from a JSON file ("-" for stdin); InventoryRejected listing every
    item of the wrong shape, or CommandFailed when it is no inventory document at all."""
    try:
        raw = sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()
    except OSError as exc:
        raise CommandFailed(f"cannot read {path}: {exc.strerror}") from None
    try:
        return decode_document(raw)
    except msgspec.ValidationError as exc:
        raise CommandFailed(f"{path}: invalid inventory document: {exc}") from None
    except UNREADABLE_JSON as exc:
        raise CommandFailed(f"{path}: not valid JSON: {exc}") from None


def _cmd_import(args: argparse.Namespace) -> int:
    settings = command_settings(redis=False)
    started = time.monotonic()
    try:
        counts = _import(settings, Path(args.file))
    except InventoryRejected as exc:  # items of the wrong shape, or the inventory rules
        for problem in exc.problems:
            print(_describe(problem), file=sys.stderr)
        raise CommandFailed(
            f"{len(exc.problems)} problem(s) in {args.file}; nothing was imported"
        ) from None
    summary = ", ".join(f"{n:,} {kind}" for kind, n in counts.items() if n)
    print(f"imported {summary or 'nothing'} in {time.monotonic() - started:.1f}s")
    return 0


def _import(settings: Settings, path: Path) -> dict[str, int]:
    doc = read_document(path)
    progress = _ProgressLine(sys.stderr)
    if progress.live:
        items = sum(len(getattr(doc, f)) for f in doc.__struct_fields__)
        sys.stderr.write(f"checking {items:,} items...\n")

    async def work(conn: Conn) -> dict[str, int]:
        return await import_inventory(conn, doc, progress)

    return asyncio.run(with_connection(settings, work))


def _cmd_export(args: argparse.Namespace) -> int:
    settings = command_settings(redis=False)

    async def work(conn: Conn) -> InventoryDocument:
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            return await export_document(conn)

    doc = asyncio.run(with_connection(settings, work))
    data = formatted_json(doc)
    if args.file in (None, "-"):
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        Path(args.file).write_bytes(data)
        print(f"exported {len(doc.screens):,} screens to {args.file}", file=sys.stderr)
    return 0


def register(subparsers: Any) -> None:
    """Add `inventory import|export` to the `bidder` command's subparsers."""
    inventory = subparsers.add_parser("inventory", help="import or export the inventory document")
    inventory_cmds = inventory.add_subparsers(dest="action", required=True, metavar="ACTION")
    import_cmd = inventory_cmds.add_parser("import", help="bulk, idempotent upsert from FILE")
    import_cmd.add_argument("file", metavar="FILE", help="JSON inventory document, - for stdin")
    import_cmd.set_defaults(func=_cmd_import)
    export_cmd = inventory_cmds.add_parser("export", help="write the document to FILE or stdout")
    export_cmd.add_argument("file", metavar="FILE", nargs="?", default=None)
    export_cmd.set_defaults(func=_cmd_export)
