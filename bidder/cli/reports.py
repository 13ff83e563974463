"""`bidder reports earnings|delivery`: the reports of docs/reports.md from the command line,
read from Postgres (DATABASE_URL), as CSV or JSON on stdout or into a file.

A range longer than one chunk (31 days) grouped by day or hour is read chunk by chunk, with a
progress bar on stderr; its days never cross a chunk, so the rows are the API's exactly.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from bidder.cli.common import CommandFailed, command_settings, uuid_argument, with_connection
from bidder.errors import BadRequest
from bidder.reports import (
    Report,
    ReportRange,
    delivery_report,
    earnings_report,
    merge_reports,
    read_group_by,
    read_range,
    report_csv,
    report_json,
)
from store.postgres import Conn
from store.reports import DELIVERY_GROUPS, EARNINGS_GROUPS, DeliveryFilter

__all__ = ["CHUNK_DAYS", "register"]

#: Days read per query when a long range is split for the progress bar.
CHUNK_DAYS = 31
_BAR = 30


def register(subparsers: Any) -> None:
    """Add `reports earnings` and `reports delivery` to the `bidder` command's subparsers."""
    reports = subparsers.add_parser("reports", help="earnings and delivery reports (CSV, JSON)")
    actions = reports.add_subparsers(dest="action", required=True, metavar="REPORT")
    earnings = actions.add_parser("earnings", help="a publisher's earnings")
    earnings.add_argument("--publisher", required=True, type=uuid_argument, help="publisher id")
    _common(earnings, EARNINGS_GROUPS)
    earnings.set_defaults(func=run_earnings)
    delivery = actions.add_parser("delivery", help="campaign delivery and pacing")
    delivery.add_argument(
        "--campaign", action="append", type=uuid_argument, help="campaign id (repeatable)"
    )
    delivery.add_argument("--advertiser", type=uuid_argument, help="only this advertiser")
    delivery.add_argument("--publisher", type=uuid_argument, help="only this publisher's screens")
    _common(delivery, DELIVERY_GROUPS)
    delivery.set_defaults(func=run_delivery)


def _common(parser: argparse.ArgumentParser, groups: tuple[str, ...]) -> None:
    parser.add_argument("--from", dest="first", help="first local day, YYYY-MM-DD (included)")
    parser.add_argument("--to", dest="last", help="last local day, YYYY-MM-DD (included)")
    parser.add_argument("--tz", help="IANA time zone of the days (default UTC)")
    parser.add_argument(
        "--group-by", action="append", default=[], help=f"one or more of {', '.join(groups)}"
    )
    parser.add_argument("--format", choices=("csv", "json"), default="csv")
    parser.add_argument("--output", "-o", type=Path, help="write to this file (default stdout)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _chunks(rng: ReportRange, group_by: list[str]) -> list[ReportRange]:
    """The range in chunks of CHUNK_DAYS days when its rows are days or hours (no row spans
    two chunks); else the range whole."""
    if not {"day", "hour"} & set(group_by):
        return [rng]
    chunks: list[ReportRange] = []
    first = rng.first
    while first <= rng.last:
        last = min(first + timedelta(days=CHUNK_DAYS - 1), rng.last)
        chunks.append(ReportRange(first, last, rng.tz))
        first = last + timedelta(days=1)
    return chunks


def _progress(done: int, total: int, out: TextIO) -> None:
    filled = _BAR * done // total
    out.write(f"\r[{'#' * filled}{' ' * (_BAR - filled)}] {done}/{total} chunks")
    out.write("\n" if done == total else "")
    out.flush()


async def _in_chunks(
    conn: Conn, rng: ReportRange, group_by: list[str], build: Any, progress: bool
) -> Report:
    chunks = _chunks(rng, group_by)
    show = progress and len(chunks) > 1
    parts: list[Report] = []
    for n, chunk in enumerate(chunks, start=1):
        parts.append(await build(conn, chunk))
        if show:
            _progress(n, len(chunks), sys.stderr)
    return merge_reports(parts, rng)


def _parameters(args: argparse.Namespace, groups: tuple[str, ...]) -> tuple[list[str], ReportRange]:
    try:
        group_by = read_group_by(args.group_by, groups, "day")
        rng = read_range(args.first, args.last, args.tz, datetime.now(UTC))
    except BadRequest as exc:
        raise CommandFailed(exc.message) from None
    return group_by, rng


def _write(report: Report, args: argparse.Namespace) -> int:
    text = report_csv(report) if args.format == "csv" else report_json(report).decode() + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text, encoding="utf-8", newline="")
    return 0


def run_earnings(args: argparse.Namespace) -> int:
    group_by, rng = _parameters(args, EARNINGS_GROUPS)
    settings = command_settings(redis=False)

    async def build(conn: Conn, chunk: ReportRange) -> Report:
        return await earnings_report(conn, args.publisher, group_by, chunk)

    async def work(conn: Conn) -> Report:
        return await _in_chunks(conn, rng, group_by, build, not args.no_progress)

    return _write(asyncio.run(with_connection(settings, work)), args)


def run_delivery(args: argparse.Namespace) -> int:
    group_by, rng = _parameters(args, DELIVERY_GROUPS)
    settings = command_settings(redis=False)
    what = DeliveryFilter(
        campaign_ids=tuple(dict.fromkeys(args.campaign)) if args.campaign else None,
        advertiser_id=args.advertiser,
        publisher_id=args.publisher,
    )
    now = datetime.now(UTC)

    async def build(conn: Conn, chunk: ReportRange) -> Report:
        return await delivery_report(conn, group_by, chunk, what, now)

    async def work(conn: Conn) -> Report:
        return await _in_chunks(conn, rng, group_by, build, not args.no_progress)

    return _write(asyncio.run(with_connection(settings, work)), args)
