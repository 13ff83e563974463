"""`bidder writer` (a standalone record writer) and `bidder reconcile [--repair]`.

`register(subparsers)` adds both commands; each sets `func(args) -> int` (the exit code).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from typing import Any

import asyncpg
import msgspec
import uvloop
from prometheus_client import start_http_server

from bidder.cli.common import port_number
from bidder.gauges import record_check
from bidder.observability import Metrics, configure_logging
from bidder.settings import Settings, SettingsError, load_settings
from store.errors import REDIS_DOWN
from store.hot import connect
from store.postgres import CONNECT_ERRORS, create_pool, describe_connect_error
from store.reconcile import reconcile, summarize
from store.records import RecordWriter, consumer_name

log = logging.getLogger("bidder.writer")
_encoder = msgspec.json.Encoder(decimal_format="number")


def register(subparsers: Any) -> None:
    """Add `writer` and `reconcile` to the `bidder` command's subparsers."""
    writer = subparsers.add_parser(
        "writer",
        help="drain the record queue into Postgres (a standalone record writer process)",
        description=(
            "Consume the record queues ({bN}:q) with the 'writers' group and write every record "
            "to Postgres. Run any number of them; web workers run one too unless RECORD_WRITER=0."
        ),
    )
    writer.add_argument(
        "--batch-size", type=int, default=None, help="entries read per stream (RECORD_BATCH_SIZE)"
    )
    writer.add_argument(
        "--metrics-port",
        type=port_number,
        default=None,
        help="serve Prometheus metrics of this process on this port",
    )
    writer.set_defaults(func=run_writer_command)

    rec = subparsers.add_parser(
        "reconcile",
        help="compare Redis budget counters with the records; --repair fixes Redis",
        description=(
            "spent is proven by the billing records (Postgres + queue), reserved by the open "
            "offers Redis holds, total by the campaign budget in Postgres. Exit status 1 when a "
            "difference remains."
        ),
    )
    rec.add_argument("--repair", action="store_true", help="set Redis to what the records prove")
    rec.add_argument("--json", action="store_true", help="print the report as JSON")
    rec.set_defaults(func=run_reconcile_command)


def _settings() -> Settings | None:
    try:
        return load_settings(secrets=False)
    except SettingsError as exc:
        print("bidder: the settings are not valid:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        return None


def run_writer_command(args: argparse.Namespace) -> int:
    settings = _settings()
    if settings is None:
        return 2
    configure_logging(settings.server.log_level)
    batch = settings.records.batch_size if args.batch_size is None else args.batch_size
    if batch <= 0:
        print("bidder: --batch-size must be greater than 0", file=sys.stderr)
        return 2
    try:
        # uvloop, as the web workers run: asyncpg and the Redis client cost less on it
        # (docs/performance.md: the writer's CPU per accept).
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(_writer_main(settings, batch, args.metrics_port))
    except OSError as exc:  # the metrics port taken, most likely
        print(f"bidder: the writer could not start: {exc}", file=sys.stderr)
        return 1
    return 0


async def _writer_main(settings: Settings, batch_size: int, metrics_port: int | None) -> None:
    metrics = Metrics()
    if metrics_port:
        start_http_server(metrics_port, registry=metrics.registry)
    redis = connect(settings.redis.url, timeout=2.0, max_connections=4, mode=settings.redis.mode)
    pool: list[asyncpg.Pool] = []

    async def get_pool() -> asyncpg.Pool:
        if not pool:
            pool.append(await create_pool(settings.postgres.url, max_size=2))
        return pool[0]

    writer = RecordWriter(
        redis, get_pool, consumer=consumer_name(), batch_size=batch_size, metrics=metrics
    )
    task = asyncio.ensure_future(writer.run())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    log.info("record writer running", extra={"consumer": writer.consumer})
    with contextlib.suppress(asyncio.CancelledError):
        await task
    log.info("record writer stopped", extra={"consumer": writer.consumer})
    if pool:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(pool[0].close(), 5)
    await redis.aclose()


def run_reconcile_command(args: argparse.Namespace) -> int:
    settings = _settings()
    if settings is None:
        return 2
    configure_logging(settings.server.log_level)
    return asyncio.run(_reconcile_main(settings, repair=args.repair, as_json=args.json))


async def _reconcile_main(settings: Settings, *, repair: bool, as_json: bool) -> int:
    redis = connect(settings.redis.url, timeout=5.0, max_connections=4, mode=settings.redis.mode)
    try:
        conn = await asyncpg.connect(settings.postgres.url, timeout=5)
    except CONNECT_ERRORS as exc:
        await redis.aclose()
        print(
            f"bidder: cannot reach Postgres at DATABASE_URL: {describe_connect_error(exc)}",
            file=sys.stderr,
        )
        return 1
    try:
        report = await reconcile(redis, conn, repair=repair)
        if not repair:  # what the fleet's budget-drift gauge exports (bidder.gauges)
            await record_check(redis, len(report.differing))
    except REDIS_DOWN as exc:
        print(f"bidder: cannot reach Redis at REDIS_URL: {exc}", file=sys.stderr)
        return 1
    finally:
        await conn.close()
        await redis.aclose()
    if as_json:
        print(msgspec.json.format(_encoder.encode(summarize(report))).decode())
    else:
        print(report.render())
    return 1 if report.differing else 0
