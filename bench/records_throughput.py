"""Record writer measurements: sustained records/second one writer commits, and the
drain time after a Postgres outage under load. Writes bench/results/<date>-<scenario>-<commit>.md
(scenario `records` unless `--scenario` says otherwise), headed by its commit, command and settings.

    .venv/bin/python -m bench.records_throughput                  # about 2.5 minutes
    .venv/bin/python -m bench.records_throughput --records 6000 --outage 10 --rate 300  # ~40 s

Servers of its own (Valkey with appendonly + appendfsync always, Postgres) in a temporary
folder; records are made through the real Lua scripts (store.hot.HotState), the same mix the
fault tests use.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import platform
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import asyncpg
from redis.asyncio import Redis

from bench.report import report_stem, scenario_argument, source_commit
from bidder.observability import Metrics
from matching.snapshot import CampaignInfo, build_snapshot
from store.hot import HotState, connect
from store.local_servers import PostgresServer, RedisServer, free_port
from store.postgres import create_pool, migrate
from store.records import RecordWriter, ensure_groups, queue_stats
from tests.support.factories import basic_document, campaign, seed
from tests.support.records import MIX, make_records

_RECORDS_PER_ROUND = 15  # records one round of MIX makes


@dataclass
class Figures:
    records: int
    seconds: float
    batch_size: int
    outage_seconds: float
    rate: float
    depth_at_restart: int
    lag_at_restart: float
    drain_seconds: float
    written_during_drain: int


async def _prepare(redis: Redis, database_url: str) -> tuple[HotState, CampaignInfo]:
    doc = basic_document(campaigns=[campaign(budget_cents=Decimal("9000000000"))])
    conn = await asyncpg.connect(database_url)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    await seed(database_url, doc)
    snap = build_snapshot(doc)
    hot = HotState(redis)
    await hot.sync_inventory(
        {c.id: (c.shard, c.budget_micros) for c in snap.campaigns.values()}, snap.billing_codes
    )
    return hot, next(iter(snap.campaigns.values()))


async def _fill(hot: HotState, camp: CampaignInfo, records: int) -> int:
    rounds = max(1, records // _RECORDS_PER_ROUND)
    for start in range(0, rounds, 20):
        await make_records(hot, camp, rounds=min(20, rounds - start))
    return rounds * _RECORDS_PER_ROUND


async def _load(hot: HotState, camp: CampaignInfo, rate: float, stop: asyncio.Event) -> None:
    """Make records at about `rate` records/second until `stop`."""
    interval = _RECORDS_PER_ROUND / rate
    next_at = time.monotonic()
    while not stop.is_set():
        await asyncio.gather(*(op(hot, camp) for op in MIX))
        next_at += interval
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))


async def measure_throughput(
    redis: Redis, pool: asyncpg.Pool, hot: HotState, camp: CampaignInfo, records: int, batch: int
) -> tuple[int, float]:
    await ensure_groups(redis)
    made = await _fill(hot, camp, records)

    async def get_pool() -> asyncpg.Pool:
        return pool

    writer = RecordWriter(redis, get_pool, consumer="bench", batch_size=batch, metrics=Metrics())
    started = time.perf_counter()
    while (await queue_stats(redis))[0]:
        await writer.step()
    return made, time.perf_counter() - started


async def _until_depth_at_most(redis: Redis, limit: float) -> None:
    while (await queue_stats(redis))[0] > limit:  # noqa: ASYNC110 - polling another server
        await asyncio.sleep(0.05)


async def measure_outage(
    redis: Redis,
    pool: asyncpg.Pool,
    postgres: PostgresServer,
    hot: HotState,
    camp: CampaignInfo,
    outage: float,
    rate: float,
    batch: int,
) -> tuple[int, float, float, int]:
    metrics = Metrics()

    async def get_pool() -> asyncpg.Pool:
        return pool

    writer = RecordWriter(redis, get_pool, consumer="bench-o", batch_size=batch, metrics=metrics)
    running = asyncio.ensure_future(writer.run())
    stop = asyncio.Event()
    load = asyncio.ensure_future(_load(hot, camp, rate, stop))
    await asyncio.sleep(3)
    await asyncio.to_thread(postgres.stop)
    await asyncio.sleep(outage)
    await asyncio.to_thread(postgres.start)
    depth, lag = await queue_stats(redis)
    written_before = metrics.records_written._value.get()
    restarted = time.perf_counter()
    # Drained: the backlog is gone while the load goes on (what remains is under a second of it).
    await _until_depth_at_most(redis, max(rate, 50))
    drain = time.perf_counter() - restarted
    written = int(metrics.records_written._value.get() - written_before)
    stop.set()
    await load
    await _until_depth_at_most(redis, 0)
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await running
    return depth, lag, drain, written


def report(figures: Figures, command: str, commit: str) -> str:
    rps = figures.records / figures.seconds
    return f"""# Record writer: throughput and outage drain ({datetime.now(UTC):%Y-%m-%d}, {commit})

- commit: `{commit}`
- command: `{command}`
- settings: backlog {figures.records} records, Postgres outage {figures.outage_seconds:g} s, \
load {figures.rate:g} records/s during it, `RECORD_BATCH_SIZE` {figures.batch_size}

Machine: {platform.machine()}, {platform.system()} {platform.release()}, Python
{platform.python_version()}; the generator, the writer, Valkey and Postgres share the machine
(2 cores). One writer, `RECORD_BATCH_SIZE` (entries per stream per read) = {figures.batch_size}.
Valkey: appendonly yes, appendfsync always. Postgres: defaults (fsync on).

| measure | value |
|---|---|
| sustained write rate ({figures.records} records backlog) | **{rps:,.0f} records/s** \
({figures.seconds:.2f} s) |
| Postgres outage | {figures.outage_seconds:.0f} s, load {figures.rate:.0f} records/s throughout |
| backlog when Postgres returned | {figures.depth_at_restart} records, \
oldest {figures.lag_at_restart:.1f} s |
| drain time after Postgres returned (load still on) | **{figures.drain_seconds:.2f} s** |
| records written while draining | {figures.written_during_drain} |

The backlog is drained when the queue holds less than one second of load. Records are the mix
of the fault tests (accept + playout, reject, open, expiry, OpenRTB impression + events + loss,
OpenRTB loss), made through the real Lua scripts.
"""


async def main(args: argparse.Namespace) -> Figures:
    with tempfile.TemporaryDirectory(prefix="records-bench-") as folder:
        root = Path(folder)
        redis_server = RedisServer(root / "redis", free_port(), appendfsync="always")
        postgres = PostgresServer(root / "postgres", free_port())
        redis_server.start()
        postgres.start()
        redis = connect(redis_server.url, timeout=5.0)
        pool = await create_pool(postgres.url, max_size=4)
        try:
            hot, camp = await _prepare(redis, postgres.url)
            made, seconds = await measure_throughput(
                redis, pool, hot, camp, args.records, args.batch
            )
            print(f"throughput: {made} records in {seconds:.2f}s = {made / seconds:,.0f}/s")
            depth, lag, drain, written = await measure_outage(
                redis, pool, postgres, hot, camp, args.outage, args.rate, args.batch
            )
            print(f"outage {args.outage}s: backlog {depth} (lag {lag}s) drained in {drain:.2f}s")
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(pool.close(), 5)
            await redis.aclose()
            postgres.stop()
            redis_server.stop()
    return Figures(made, seconds, args.batch, args.outage, args.rate, depth, lag, drain, written)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=30_000, help="backlog for the rate")
    parser.add_argument("--outage", type=float, default=60.0, help="Postgres outage, seconds")
    parser.add_argument("--rate", type=float, default=500.0, help="records/s during the outage")
    parser.add_argument("--batch", type=int, default=500, help="entries per stream per read")
    parser.add_argument("--results", type=Path, default=Path("bench/results"))
    parser.add_argument(
        "--scenario",
        "--name",
        dest="scenario",
        type=scenario_argument,
        default="records",
        help="the scenario, in the report's name <date>-<scenario>-<commit> (default: records)",
    )
    args = parser.parse_args()
    commit = source_commit()
    stem = report_stem(datetime.now(UTC).date(), args.scenario, commit)
    figures = asyncio.run(main(args))
    args.results.mkdir(parents=True, exist_ok=True)
    out = args.results / f"{stem}.md"
    command = (
        f".venv/bin/python -m bench.records_throughput --records {args.records} "
        f"--outage {args.outage:g} --rate {args.rate:g} --batch {args.batch}"
        + ("" if args.scenario == "records" else f" --scenario {args.scenario}")
    )
    out.write_text(report(figures, command, commit))
    print(f"report: {out}")


if __name__ == "__main__":
    cli()
