"""Report latencies at volume, beside the hot routes: seeds N deals (offers, deals, billing
records, playouts) into the bench inventory's Postgres with server-side bulk INSERTs (not the
HTTP API), fills the report rollups with the statements migration 010 backfills them with, then
times a publisher's 30-day earnings by day and a campaign's 30-day delivery by day, 4 reports at
a time: alone, and while a worker serves offer requests and bids at half their peak (whose p99
is measured with and without the reports). Writes bench/results/<date>-reports-<commit>.md
headed by its commit, command and settings.

    .venv/bin/python -m bench.reports_bench                             # 10,000,000 deals
    .venv/bin/python -m bench.reports_bench --deals 200000 --seconds 5  # a quick look
    .venv/bin/python -m bench.reports_bench --keep .run/reports-bench   # keep the seeded data

With `--keep FOLDER` the servers and the seeded database stay in FOLDER, and a later run with
the same FOLDER and as many deals measures again without seeding.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from bench import seed, server, throughput, workload
from bench.report import machine, report_stem, scenario_argument, source_commit
from bench.throughput import WrkResult, WrkRun
from bidder.reports import delivery_report, earnings_report
from bidder.reports.params import ReportRange
from store.postgres import create_pool
from store.reports import DeliveryFilter, rebuild_rollups

#: The deals go to every publisher and to this many campaigns (the first by id), so that a
#: campaign has many (10,000,000 deals: about 17,000 a day).
CAMPAIGNS = 200
DAYS = 90
CONCURRENCY = 4
#: Deals per INSERT ... SELECT (one transaction each).
_CHUNK = 1_000_000
_RECORD_TABLES = ("offers", "deals", "billing_records", "playouts")
_ZONE = "Europe/Berlin"

_PREPARE = (
    """CREATE TEMP TABLE seed_screens AS
       SELECT (row_number() OVER (ORDER BY id) - 1)::int AS n, id, publisher_id,
              audience_per_play
         FROM screens""",
    """CREATE TEMP TABLE seed_campaigns AS
       SELECT (row_number() OVER (ORDER BY c.id) - 1)::int AS n, c.id, c.advertiser_id,
              (SELECT k.id FROM creatives k WHERE k.campaign_id = c.id ORDER BY k.id LIMIT 1)
                  AS creative_id
         FROM campaigns c
        ORDER BY c.id
        LIMIT {campaigns}""",
)
# One chunk: `size` deals from `start` over `days` days on `screens` screens and `campaigns`
# campaigns (numbers, formatted in). The offer's audience is the screen's, as the
# `offers_audience` trigger sets it; commission 15 %.
_CHUNK_SQL = (
    "DROP TABLE IF EXISTS seed_chunk",
    """CREATE TEMP TABLE seed_chunk AS
       SELECT gen_random_uuid() AS offer_id, gen_random_uuid() AS deal_id,
              gen_random_uuid() AS billing_id, gen_random_uuid() AS playout_id,
              floor(random() * {screens})::int AS s, floor(random() * {campaigns})::int AS c,
              '{start}'::timestamptz
                  + floor(random() * 86400 * {days})::int * interval '1 second' AS at,
              ((floor(random() * 50000000) + 1)::bigint::numeric / 1000000)::numeric(20, 6)
                  AS gross,
              random() < 0.9 AS played
         FROM generate_series(1, {size})""",
    """INSERT INTO offers (offer_id, channel, status, publisher_id, screen_id, campaign_id,
                           creative_id, bid_price_cents, created_at, expires_at, resolved_at,
                           audience)
       SELECT k.offer_id, 'core', 'accepted', s.publisher_id, s.id, c.id, c.creative_id, k.gross,
              k.at - interval '1 second', k.at + interval '5 minutes', k.at, s.audience_per_play
         FROM seed_chunk k JOIN seed_screens s ON s.n = k.s JOIN seed_campaigns c ON c.n = k.c""",
    """INSERT INTO deals (deal_id, offer_id, publisher_id, campaign_id, gross_price_cents,
                          commission_cents, net_price_cents, accepted_at)
       SELECT k.deal_id, k.offer_id, s.publisher_id, c.id, k.gross, round(k.gross * 0.15, 6),
              k.gross - round(k.gross * 0.15, 6), k.at
         FROM seed_chunk k JOIN seed_screens s ON s.n = k.s JOIN seed_campaigns c ON c.n = k.c""",
    """INSERT INTO billing_records (billing_id, offer_id, deal_id, source, publisher_id,
                                    advertiser_id, campaign_id, commission_rate,
                                    gross_price_cents, commission_cents, net_price_cents,
                                    billed_at)
       SELECT k.billing_id, k.offer_id, k.deal_id, 'core_accept', s.publisher_id,
              c.advertiser_id, c.id, 0.15, k.gross, round(k.gross * 0.15, 6),
              k.gross - round(k.gross * 0.15, 6), k.at
         FROM seed_chunk k JOIN seed_screens s ON s.n = k.s JOIN seed_campaigns c ON c.n = k.c""",
    """INSERT INTO playouts (playout_id, deal_id, played_at, confirmed_at)
       SELECT k.playout_id, k.deal_id, k.at + interval '30 seconds', k.at + interval '30 seconds'
         FROM seed_chunk k WHERE k.played""",
)


@dataclass
class Timings:
    name: str
    seconds: list[float] = field(default_factory=list)

    def p95_ms(self) -> float:
        ms = sorted(s * 1000 for s in self.seconds)
        return ms[max(0, int(len(ms) * 0.95) - 1)] if ms else float("nan")

    def line(self) -> str:
        ms = sorted(s * 1000 for s in self.seconds)
        if not ms:
            return f"| {self.name} | 0 | | | |"
        return (
            f"| {self.name} | {len(ms)} | {statistics.median(ms):.1f} | {self.p95_ms():.1f} "
            f"| {ms[-1]:.1f} |"
        )


@dataclass
class Outcome:
    deals: int
    seeding: float | None
    counts: dict[str, int]
    alone: list[Timings]
    loaded: list[Timings]
    hot: dict[str, WrkResult]
    notes: list[str]


async def _secondary_indexes(conn: asyncpg.Connection) -> list[tuple[str, str]]:
    """(name, definition) of the record tables' indexes that back no constraint."""
    rows = await conn.fetch(
        """SELECT i.indexname, i.indexdef FROM pg_indexes i
            WHERE i.schemaname = 'public' AND i.tablename = ANY($1::text[])
              AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conname = i.indexname)""",
        list(_RECORD_TABLES),
    )
    return [(r["indexname"], r["indexdef"]) for r in rows]


async def seed_deals(database_url: str, count: int, start: datetime) -> float:
    """Insert `count` accepted deals over DAYS days from `start`, with their offers, billing
    records and (90 %) playouts, without triggers or foreign-key checks (`replica`) and
    without the secondary indexes; then the indexes and the rollups (rebuild_rollups: the
    statements migration 010 backfills with), VACUUM and ANALYZE."""
    began = time.monotonic()
    conn = await asyncpg.connect(database_url, command_timeout=None)
    try:
        indexes = await _secondary_indexes(conn)
        for name, _ in indexes:
            await conn.execute(f'DROP INDEX "{name}"')
        await conn.execute("SET session_replication_role = replica")
        await conn.execute("SELECT setseed(0.2026)")
        await conn.execute(_PREPARE[0])
        await conn.execute(_PREPARE[1].format(campaigns=int(CAMPAIGNS)))
        screens = await conn.fetchval("SELECT count(*) FROM seed_screens")
        campaigns = await conn.fetchval("SELECT count(*) FROM seed_campaigns")
        done = 0
        while done < count:
            size = min(_CHUNK, count - done)
            async with conn.transaction():
                await conn.execute(_CHUNK_SQL[0])
                await conn.execute(
                    _CHUNK_SQL[1].format(
                        size=int(size),
                        start=start.isoformat(),
                        screens=int(screens),
                        campaigns=int(campaigns),
                        days=int(DAYS),
                    )
                )
                for statement in _CHUNK_SQL[2:]:
                    await conn.execute(statement)
            done += size
            print(f"seeded {done:,} deals ({time.monotonic() - began:.0f} s)", flush=True)
        await conn.execute("SET session_replication_role = origin")
        await conn.execute("SET maintenance_work_mem = '512MB'")
        for name, definition in indexes:
            await conn.execute(definition)
            print(f"index {name} ({time.monotonic() - began:.0f} s)", flush=True)
        await rebuild_rollups(conn)
        print(f"rollups rebuilt ({time.monotonic() - began:.0f} s)", flush=True)
        await conn.execute("VACUUM (ANALYZE)")
    finally:
        await conn.close()
    return time.monotonic() - began


@dataclass
class Targets:
    publishers: list[str]
    campaigns: list[str]
    month: ReportRange


async def report_clients(
    pool: asyncpg.Pool,
    targets: Targets,
    stop: Callable[[], bool],
    kinds: tuple[str, ...],
    pause: float = 0.0,
) -> list[Timings]:
    """CONCURRENCY clients, each running reports of `kinds` in turn until `stop()`, `pause`
    seconds apart (0: each starts the next as soon as one is answered)."""
    rng = random.Random(7)
    timings = {kind: Timings(kind) for kind in kinds}

    async def client(number: int) -> None:
        turn = number
        while not stop():
            kind = kinds[turn % len(kinds)]
            turn += 1
            began = time.monotonic()
            async with pool.acquire() as conn:
                if kind.startswith("earnings"):
                    publisher = rng.choice(targets.publishers)
                    await earnings_report(conn, publisher, ["day"], targets.month)
                else:
                    what = DeliveryFilter(campaign_ids=(rng.choice(targets.campaigns),))
                    await delivery_report(conn, ["day"], targets.month, what, datetime.now(UTC))
            timings[kind].seconds.append(time.monotonic() - began)
            if pause:
                await asyncio.sleep(pause)

    await asyncio.gather(*(client(n) for n in range(CONCURRENCY)))
    return list(timings.values())


_EARNINGS = "earnings 30 days by day"
_DELIVERY = "delivery 30 days by day"


async def reports_alone(pool: asyncpg.Pool, targets: Targets, seconds: float) -> list[Timings]:
    results = []
    for kind in (_EARNINGS, _DELIVERY):
        finished = asyncio.Event()
        asyncio.get_running_loop().call_later(seconds, finished.set)
        results += await report_clients(pool, targets, finished.is_set, (kind,))
    return results


def _paced(
    name: str, script: str, data: Path, target: float, seconds: float, logs: Path, base: str
) -> WrkResult:
    """A paced wrk run at about `target` req/s, calibrated as bench.run does it."""
    connections = throughput.PACED_CONNECTIONS
    first = throughput.paced_delay_ms(target, connections)
    calibration = throughput.run_wrk(
        WrkRun(f"{name}_calibration", script, data, 3, connections=connections, delay_ms=first,
               target_rps=target),
        base, logs,
    )  # fmt: skip
    service_ms = max(connections * 1000.0 / max(calibration.rps, 1.0) - first, 0.0)
    run = WrkRun(name, script, data, seconds, connections=connections,
                 delay_ms=max(first - service_ms, 0.1), target_rps=target)  # fmt: skip
    return throughput.run_wrk(run, base, logs)


async def hot_routes(
    pool: asyncpg.Pool, targets: Targets, files: dict[str, Path], base: str, seconds: float,
    logs: Path, pause: float,
) -> tuple[dict[str, WrkResult], list[Timings]]:  # fmt: skip
    """Each hot route's peak, then paced at half of it without and with the reports running
    (the reports' timings are those taken during the paced runs with them)."""
    results: dict[str, WrkResult] = {}
    loaded = [Timings(_EARNINGS), Timings(_DELIVERY)]
    for route, script in (("offer_request", "offer_request.lua"), ("bid", "bid.lua")):
        peak = await asyncio.to_thread(
            throughput.run_wrk, WrkRun(f"{route}_peak", script, files[route], 5), base, logs
        )
        results[f"{route} peak"] = peak
        half = peak.rps / 2
        results[f"{route} half peak"] = await asyncio.to_thread(
            _paced, f"{route}_half", script, files[route], half, seconds, logs, base
        )
        finished = asyncio.Event()
        clients = asyncio.create_task(
            report_clients(pool, targets, finished.is_set, (_EARNINGS, _DELIVERY), pause)
        )
        try:
            results[f"{route} half peak + reports"] = await asyncio.to_thread(
                _paced, f"{route}_half_reports", script, files[route], half, seconds, logs, base
            )
        finally:
            finished.set()
            for total, part in zip(loaded, await clients, strict=True):
                total.seconds += part.seconds
    return results, loaded


async def _prepare_database(
    backends: server.Backends, folder: Path, deals: int
) -> tuple[server.Seeded, float | None]:
    """The seeded database: reused when `folder` holds one with `deals` deals."""
    marker = folder / "reports-bench.json"
    if marker.exists():
        saved = json.loads(marker.read_text())
        if saved["deals"] == deals:  # the servers may listen on other ports than last time
            database = urlunsplit(urlsplit(backends.database_url)._replace(path="/reports"))
            redis_url = server.fresh_redis(backends.redis_url, 0)
            return server.Seeded(database, redis_url, saved["keys"], 0.0), None
    database = await server.fresh_database(backends.database_url, "reports")
    redis_url = server.fresh_redis(backends.redis_url, 0)
    seeded = await server.seed_database(database, redis_url, seed.full_document())
    last_day = datetime.now(UTC).date()
    start = datetime.combine(last_day, datetime.min.time(), UTC) - timedelta(days=DAYS - 1)
    seconds = await seed_deals(database, deals, start)
    marker.write_text(json.dumps({"deals": deals, "keys": seeded.keys}, indent=2))
    return seeded, seconds


def _pin_postgres(backends: server.Backends, cpu: int) -> None:
    """Postgres (every process, and the backends it starts later) and this process, which runs
    the reports, on `cpu`: as if the database had a host of its own beside the worker's."""
    postgres = backends.local.postgres if backends.local is not None else None
    if postgres is None or postgres.proc is None:
        raise SystemExit("--postgres-cpu needs the bench's own Postgres")
    for pid in [*server.process_tree(postgres.proc.pid), os.getpid()]:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(pid, {cpu})


async def main(args: argparse.Namespace, folder: Path) -> Outcome:
    backends = server.start_backends(folder / "servers")
    notes: list[str] = []
    try:
        seeded, seeding = await _prepare_database(backends, folder, args.deals)
        if args.postgres_cpu is not None:
            _pin_postgres(backends, args.postgres_cpu)
        pool = await create_pool(seeded.database_url, max_size=CONCURRENCY + 1)
        try:
            async with pool.acquire() as conn:
                counts = {
                    table: await conn.fetchval(f"SELECT count(*) FROM {table}")
                    for table in _RECORD_TABLES
                }
                publishers = [
                    r["id"]
                    for r in await conn.fetch(
                        "SELECT DISTINCT publisher_id::text AS id FROM earnings_rollup ORDER BY 1"
                    )
                ]
                campaigns = [
                    r["id"]
                    for r in await conn.fetch(
                        "SELECT id::text AS id FROM campaigns ORDER BY id LIMIT $1", CAMPAIGNS
                    )
                ]
            last_day = datetime.now(UTC).date()
            month = ReportRange(last_day - timedelta(days=29), last_day, _ZONE)
            targets = Targets(publishers, campaigns, month)
            alone = await reports_alone(pool, targets, args.seconds)
            for timings in alone:
                print(timings.line(), flush=True)
            hot: dict[str, WrkResult] = {}
            loaded: list[Timings] = []
            if not args.no_hot:
                hot, loaded = await _with_worker(
                    pool, targets, seeded, folder, args.seconds, args.report_pause
                )
                for timings in loaded:
                    print(timings.line(), flush=True)
        finally:
            await pool.close()
    finally:
        backends.stop()
    return Outcome(args.deals, seeding, counts, alone, loaded, hot, notes)


async def _with_worker(
    pool: asyncpg.Pool,
    targets: Targets,
    seeded: server.Seeded,
    folder: Path,
    seconds: float,
    pause: float,
) -> tuple[dict[str, WrkResult], list[Timings]]:
    doc = seed.full_document()
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    hot_targets = workload.targets(doc, seeded.keys)
    files = {"offer_request": data / "offer.tsv", "bid": data / "bid.tsv"}
    throughput.write_requests(
        files["offer_request"], workload.offer_request_lines(hot_targets, 5_000, seed=3)
    )
    bidding = workload.bidding_in_every(hot_targets, [doc], datetime.now(UTC))
    throughput.write_requests(files["bid"], workload.bid_lines(bidding, 5_000, seed=4))
    writer = server.Writer(seeded, folder / "writer.log")
    writer.start()
    worker = server.Worker(
        seeded, folder / "worker.log", env_overrides={"RECORD_WRITER": "0"}, writer=writer
    )
    worker.start()
    try:
        return await hot_routes(
            pool, targets, files, worker.base_url, seconds, folder / "logs", pause
        )
    finally:
        worker.stop()


def _hot_table(hot: dict[str, WrkResult]) -> list[str]:
    lines = ["| run | req/s | p50 ms | p99 ms | statuses |", "|---|---|---|---|---|"]
    for name, result in hot.items():
        statuses = ", ".join(f"{s}: {n:,}" for s, n in sorted(result.statuses.items()))
        lines.append(
            f"| {name} | {result.rps:,.0f} | {result.p50_ms:.2f} | {result.p99_ms:.2f} "
            f"| {statuses} |"
        )
    return lines


def report(
    commit: str,
    command: str,
    out: Outcome,
    seconds: float,
    postgres_cpu: int | None,
    pause: float,
) -> str:
    seeding = (
        "reused from an earlier run of the same command (`--keep`)"
        if out.seeding is None
        else f"{out.seeding / 60:.1f} minutes (inserts, indexes, rollups, VACUUM ANALYZE)"
    )
    deals = out.deals
    lines = [
        f"# Reports at {deals:,} deals on {commit}",
        "",
        f"- commit: `{commit}`",
        f"- command: `{command}`",
        "- scenario: reports",
        "",
        "## Settings",
        "",
        f"- deals: {deals:,} accepted Core deals over {DAYS} days, each with its offer and "
        "billing record, 90 % with a playout, inserted by Postgres itself (INSERT ... SELECT "
        "over generate_series, 1,000,000 a transaction, triggers and foreign-key checks off, "
        "secondary indexes dropped and built again after), then the rollups filled by "
        "`store.reports.rebuild_rollups` (the statements migration 010 backfills with); rows: "
        + ", ".join(f"{t} {n:,}" for t, n in out.counts.items()),
        f"- inventory: the bench's full inventory (bench/seed.py: 20 publishers, 10,000 "
        f"screens, 2,000 campaigns); the deals go to every screen and to the first "
        f"{CAMPAIGNS} campaigns: a publisher has about {deals // 20 // DAYS * 30:,} billed plays "
        f"in 30 days, a campaign about {deals // CAMPAIGNS // DAYS * 30:,}",
        f"- reports: earnings (a random publisher) and delivery (a random one of those "
        f"campaigns), 30 days by day in {_ZONE}, {CONCURRENCY} clients at a time, called in "
        "process (bidder.reports over an asyncpg pool, no HTTP); alone for "
        f"{seconds:g} s per kind, each client starting the next report as soon as one is "
        "answered; then alternating kinds during the paced runs with reports, "
        + (
            f"each client waiting {pause:g} s between reports"
            if pause
            else "each client starting the next at once"
        ),
        "- hot routes: one granian worker on CPU 0 (`RECORD_WRITER=0`) and a `bidder writer` "
        "on CPU 1 writing into the same Postgres (so its triggers keep the rollups meanwhile), "
        f"wrk on CPU 1; peak 5 s, then {throughput.PACED_CONNECTIONS} connections paced at "
        f"half the peak for {seconds:g} s without and {seconds:g} s with the reports running",
        f"- Postgres: its own cluster (store.local_servers defaults); seeding: {seeding}",
        "- placement while measuring: "
        + (
            f"Postgres and the report clients pinned to CPU {postgres_cpu} (with wrk and the "
            "writer), the worker alone on CPU 0: as if the database had a host of its own"
            if postgres_cpu is not None
            else "Postgres and the report clients unpinned (on either CPU, the worker's too)"
        ),
        "",
        "## Machine",
        "",
        *(f"- {k}: {v}" for k, v in machine().items()),
        "- the machine is shared: other sessions ran tests on its 2 CPUs meanwhile",
        "",
        "## Report latency (ms), reports alone",
        "",
        "| report | runs | p50 | p95 | max |",
        "|---|---|---|---|---|",
        *(t.line() for t in out.alone),
        "",
    ]
    if out.hot:
        lines += [
            "## Report latency (ms) while the hot routes take traffic at half their peak",
            "",
            "| report | runs | p50 | p95 | max |",
            "|---|---|---|---|---|",
            *(t.line() for t in out.loaded),
            "",
            "## Hot routes",
            "",
            *_hot_table(out.hot),
            "",
        ]
    lines += [*(f"- {note}" for note in out.notes)]
    return "\n".join(lines) + "\n"


def cli() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--deals", type=int, default=10_000_000)
    parser.add_argument("--seconds", type=float, default=20.0, help="per measurement")
    parser.add_argument("--keep", type=Path, help="servers and seeded data here, reused")
    parser.add_argument("--no-hot", action="store_true", help="reports alone only")
    parser.add_argument(
        "--report-pause",
        type=float,
        default=0.0,
        help="seconds each report client waits between reports beside the hot routes",
    )
    parser.add_argument(
        "--postgres-cpu", type=int, help="pin Postgres and the reports to this CPU when measuring"
    )
    parser.add_argument("--results", type=Path, default=Path("bench/results"))
    parser.add_argument("--scenario", type=scenario_argument, default="reports")
    args = parser.parse_args()
    commit = source_commit()
    stem = report_stem(datetime.now(UTC).date(), args.scenario, commit)
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        out = asyncio.run(main(args, args.keep))
    else:
        with tempfile.TemporaryDirectory(prefix="reports-bench-") as folder:
            out = asyncio.run(main(args, Path(folder)))
    command = (
        f".venv/bin/python -m bench.reports_bench --deals {args.deals} --seconds {args.seconds:g}"
        + (" --no-hot" if args.no_hot else "")
        + (f" --report-pause {args.report_pause:g}" if args.report_pause else "")
        + (f" --postgres-cpu {args.postgres_cpu}" if args.postgres_cpu is not None else "")
    )
    args.results.mkdir(parents=True, exist_ok=True)
    path = args.results / f"{stem}.md"
    path.write_text(
        report(commit, command, out, args.seconds, args.postgres_cpu, args.report_pause)
    )
    print(f"report: {path}")


if __name__ == "__main__":
    cli()
