"""Report latencies at volume: seeds N deals (offers, deals, billing records, playouts) into a
Postgres of its own with COPY (not the HTTP API), then times a publisher's 30-day earnings by
day and a campaign's 30-day delivery by day, 4 reports at a time. Writes
bench/results/<date>-reports-<commit>.md headed by its commit, command and settings.

    .venv/bin/python -m bench.reports_bench                       # 1,000,000 deals
    .venv/bin/python -m bench.reports_bench --deals 100000 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import asyncpg

from bench.report import machine, report_stem, scenario_argument, source_commit
from bidder.reports import delivery_report, earnings_report
from bidder.reports.params import ReportRange
from matching.inventory import (
    Advertiser,
    Campaign,
    Creative,
    InventoryDocument,
    Publisher,
    Screen,
    Targeting,
)
from store.inventory_repo import import_document
from store.local_servers import PostgresServer, free_port
from store.postgres import create_pool, migrate
from store.reports import DeliveryFilter

PUBLISHERS = 20
SCREENS = 2_000
CAMPAIGNS = 200
DAYS = 90
CONCURRENCY = 4
_CHUNK = 100_000
_RATE = Decimal("0.15")


@dataclass
class Inventory:
    screens: list[tuple[str, str]]  # (screen id, publisher id)
    campaigns: list[tuple[str, str, str]]  # (campaign id, advertiser id, creative id)


@dataclass
class Timings:
    name: str
    seconds: list[float] = field(default_factory=list)

    def line(self) -> str:
        ms = sorted(s * 1000 for s in self.seconds)
        p95 = ms[max(0, int(len(ms) * 0.95) - 1)]
        return (
            f"| {self.name} | {len(ms)} | {statistics.median(ms):.1f} | {p95:.1f} | {ms[-1]:.1f} |"
        )


def _uuid(rng: random.Random) -> uuid.UUID:
    return uuid.UUID(int=rng.getrandbits(128), version=4)


def inventory(rng: random.Random) -> tuple[InventoryDocument, Inventory]:
    publishers = [
        Publisher(id=str(_uuid(rng)), name=f"Publisher {n}", commission_rate=_RATE)
        for n in range(PUBLISHERS)
    ]
    advertisers = [
        Advertiser(id=str(_uuid(rng)), name=f"Advertiser {n}", domain=f"a{n}.example")
        for n in range(20)
    ]
    screens = [
        Screen(
            id=str(_uuid(rng)),
            publisher_id=publishers[n % PUBLISHERS].id,
            name=f"Screen {n}",
            type="moving",
            width=1920,
            height=1080,
            audience_per_play=Decimal(rng.randint(10, 400)),
        )
        for n in range(SCREENS)
    ]
    campaigns = [
        Campaign(
            id=str(_uuid(rng)),
            advertiser_id=advertisers[n % 20].id,
            name=f"Campaign {n}",
            status="active",
            cpm_cents=Decimal(rng.randint(100, 900)),
            budget_cents=Decimal(10**9),
            targeting=Targeting(),
        )
        for n in range(CAMPAIGNS)
    ]
    creatives = [
        Creative(
            id=str(_uuid(rng)),
            campaign_id=c.id,
            url="https://cdn.example/a.mp4",
            kind="video",
            width=1920,
            height=1080,
            duration_seconds=15,
            approved=True,
        )
        for c in campaigns
    ]
    doc = InventoryDocument(
        publishers=publishers,
        advertisers=advertisers,
        screens=screens,
        campaigns=campaigns,
        creatives=creatives,
    )
    return doc, Inventory(
        [(s.id, s.publisher_id) for s in screens],
        [(c.id, c.advertiser_id, k.id) for c, k in zip(campaigns, creatives, strict=True)],
    )


def _chunk_rows(
    rng: random.Random, inv: Inventory, count: int, start: datetime
) -> Iterator[tuple[list[tuple[Any, ...]], ...]]:
    span = DAYS * 86400
    done = 0
    while done < count:
        size = min(_CHUNK, count - done)
        offers, deals, billing, playouts = [], [], [], []
        for _ in range(size):
            screen, publisher = inv.screens[rng.randrange(len(inv.screens))]
            campaign, advertiser, creative = inv.campaigns[rng.randrange(len(inv.campaigns))]
            offer_id, deal_id = _uuid(rng), _uuid(rng)
            at = start + timedelta(seconds=rng.randrange(span))
            gross = Decimal(rng.randint(1, 50_000_000)).scaleb(-6)
            commission = (gross * _RATE).quantize(Decimal("0.000001"))
            net = gross - commission
            offers.append(
                (offer_id, "core", "accepted", uuid.UUID(publisher), uuid.UUID(screen),
                 uuid.UUID(campaign), uuid.UUID(creative), gross, at, at + timedelta(minutes=5),
                 at)
            )  # fmt: skip
            deals.append(
                (deal_id, offer_id, uuid.UUID(publisher), uuid.UUID(campaign), gross,
                 commission, net, at)
            )  # fmt: skip
            billing.append(
                (_uuid(rng), offer_id, deal_id, "core_accept", uuid.UUID(publisher),
                 uuid.UUID(advertiser), uuid.UUID(campaign), _RATE, gross, commission, net, at)
            )  # fmt: skip
            if rng.random() < 0.9:
                played = at + timedelta(seconds=30)
                playouts.append((_uuid(rng), deal_id, played, played))
        done += size
        yield offers, deals, billing, playouts


_TABLES = (
    (
        "offers",
        ["offer_id", "channel", "status", "publisher_id", "screen_id", "campaign_id",
         "creative_id", "bid_price_cents", "created_at", "expires_at", "resolved_at"],
    ),
    (
        "deals",
        ["deal_id", "offer_id", "publisher_id", "campaign_id", "gross_price_cents",
         "commission_cents", "net_price_cents", "accepted_at"],
    ),
    (
        "billing_records",
        ["billing_id", "offer_id", "deal_id", "source", "publisher_id", "advertiser_id",
         "campaign_id", "commission_rate", "gross_price_cents", "commission_cents",
         "net_price_cents", "billed_at"],
    ),
    ("playouts", ["playout_id", "deal_id", "played_at", "confirmed_at"]),
)  # fmt: skip


async def seed_deals(pool: asyncpg.Pool, inv: Inventory, count: int, start: datetime) -> float:
    """COPY `count` accepted deals with their offers, billing records and playouts."""
    rng = random.Random(20260501)
    began = time.monotonic()
    async with pool.acquire() as conn:
        for n, chunk in enumerate(_chunk_rows(rng, inv, count, start), start=1):
            async with conn.transaction():
                for (table, columns), rows in zip(_TABLES, chunk, strict=True):
                    await conn.copy_records_to_table(table, records=rows, columns=columns)
            print(f"seeded {min(n * _CHUNK, count):,} deals ({time.monotonic() - began:.0f} s)")
        await conn.execute("ANALYZE")
    return time.monotonic() - began


async def _timed(seconds: float, timings: Timings, run: Callable[[], Awaitable[Any]]) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        began = time.monotonic()
        await run()
        timings.seconds.append(time.monotonic() - began)


async def measure(
    pool: asyncpg.Pool, inv: Inventory, last_day: date, seconds: float
) -> list[Timings]:
    rng = random.Random(7)
    month = ReportRange(last_day - timedelta(days=29), last_day, "Europe/Berlin")
    publishers = sorted({p for _, p in inv.screens})
    results = []
    for name in ("earnings 30 days by day", "delivery 30 days by day"):
        timings = Timings(name)

        async def one(name: str = name) -> None:
            async with pool.acquire() as conn:
                if name.startswith("earnings"):
                    await earnings_report(conn, rng.choice(publishers), ["day"], month)
                else:
                    campaign = rng.choice(inv.campaigns)[0]
                    what = DeliveryFilter(campaign_ids=(campaign,))
                    await delivery_report(conn, ["day"], month, what, datetime.now(UTC))

        await asyncio.gather(*(_timed(seconds, timings, one) for _ in range(CONCURRENCY)))
        print(timings.line())
        results.append(timings)
    return results


async def main(args: argparse.Namespace) -> tuple[float, list[Timings], dict[str, int]]:
    with tempfile.TemporaryDirectory(prefix="reports-bench-") as folder:
        postgres = PostgresServer(Path(folder) / "postgres", free_port())
        postgres.start()
        try:
            pool = await create_pool(postgres.url, max_size=CONCURRENCY + 1)
            async with pool.acquire() as conn:
                await migrate(conn)
                doc, inv = inventory(random.Random(1))
                await import_document(conn, doc)
            last_day = datetime.now(UTC).date()
            start = datetime.combine(last_day, datetime.min.time(), UTC) - timedelta(days=DAYS - 1)
            seeding = await seed_deals(pool, inv, args.deals, start)
            async with pool.acquire() as conn:
                counts = {
                    table: await conn.fetchval(f"SELECT count(*) FROM {table}")
                    for table, _ in _TABLES
                }
            timings = await measure(pool, inv, last_day, args.seconds)
            await pool.close()
        finally:
            postgres.stop()
    return seeding, timings, counts


def report(
    commit: str, command: str, deals: int, seeding: float, timings: list[Timings],
    counts: dict[str, int], seconds: float,
) -> str:  # fmt: skip
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
        "billing record, 90 % with a playout, seeded with COPY in chunks of "
        f"{_CHUNK:,} (bench/reports_bench.py, not the HTTP API); rows: "
        + ", ".join(f"{t} {n:,}" for t, n in counts.items()),
        f"- inventory: {PUBLISHERS} publishers, {SCREENS:,} screens, {CAMPAIGNS} campaigns: "
        f"a publisher has about {deals // PUBLISHERS // DAYS * 30:,} billed plays in 30 days, "
        f"a campaign about {deals // CAMPAIGNS // DAYS * 30:,}",
        f"- reports: earnings (a random publisher) and delivery (a random campaign), 30 days by "
        f"day in Europe/Berlin, {CONCURRENCY} at a time for {seconds:g} s each, called in "
        "process (bidder.reports over an asyncpg pool, no HTTP)",
        "- Postgres: its own cluster in a temporary folder (store.local_servers defaults), "
        "plain indexed queries (migration 006), no rollup tables",
        f"- seeding took {seeding:.0f} s",
        "",
        "## Machine",
        "",
        *(f"- {k}: {v}" for k, v in machine().items()),
        "",
        "## Latency (ms)",
        "",
        "| report | runs | p50 | p95 | max |",
        "|---|---|---|---|---|",
        *(t.line() for t in timings),
        "",
    ]
    return "\n".join(lines)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deals", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=20.0, help="per report kind")
    parser.add_argument("--results", type=Path, default=Path("bench/results"))
    parser.add_argument("--scenario", type=scenario_argument, default="reports")
    args = parser.parse_args()
    commit = source_commit()
    stem = report_stem(datetime.now(UTC).date(), args.scenario, commit)
    seeding, timings, counts = asyncio.run(main(args))
    command = (
        f".venv/bin/python -m bench.reports_bench --deals {args.deals} --seconds {args.seconds:g}"
    )
    args.results.mkdir(parents=True, exist_ok=True)
    out = args.results / f"{stem}.md"
    out.write_text(report(commit, command, args.deals, seeding, timings, counts, args.seconds))
    print(f"report: {out}")


if __name__ == "__main__":
    cli()
