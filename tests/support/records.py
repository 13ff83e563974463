"""Shared by the record writer tests: records made through the real Lua scripts, draining, and
the checks every durability test ends with (exactly once, every campaign balances).

A reservation queues no record: an offer reaches Postgres only with its outcome's record (which
carries the whole offer), and an offer still open lives in Redis alone. So the records an
operation makes are its outcomes (docs/architecture.md, "Records"), counted in `Expected.records`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import asyncpg
from redis.asyncio import Redis

from matching.money import split_gross
from matching.snapshot import SHARDS, CampaignInfo, Snapshot, build_snapshot
from store.hot import (
    QUEUE_GROUP,
    Answered,
    HotState,
    NotAnswered,
    Reserved,
    expiry_key,
    offer_key,
    queue_keys,
)
from store.postgres import Conn
from store.records import RecordWriter, queue_stats
from tests.support.factories import (
    CAMPAIGN,
    CREATIVE_VIDEO,
    PUB,
    SCREEN_MOVING,
    basic_document,
    seed,
)

RATE = Decimal("0.15")
PRICE = 2_500_000  # cpm 250 cents x audience 10 / 1000 = 2.5 cents a play
ACCEPTED = 2_000_000
RECORD_TABLES = (
    "offers",
    "deals",
    "billing_records",
    "rejections",
    "playouts",
    "loss_notices",
    "tracking_events",
)


@dataclass
class Expected:
    """Rows the acknowledged operations must produce, counted from what was done: `offers`
    have a row (they have an outcome), `open_offers` have none yet (they live in Redis only),
    and `records` is how many queue entries the operations made."""

    rows: Counter[str] = field(default_factory=Counter)
    deals: list[str] = field(default_factory=list)
    offers: list[str] = field(default_factory=list)
    open_offers: list[str] = field(default_factory=list)
    records: int = 0

    def merge(self, other: Expected) -> None:
        self.rows.update(other.rows)
        self.deals += other.deals
        self.offers += other.offers
        self.open_offers += other.open_offers
        self.records += other.records


async def prepare(redis: Redis, database_url: str) -> tuple[HotState, CampaignInfo]:
    """Seed the basic inventory into Postgres and its budgets into Redis."""
    doc = basic_document()
    await seed(database_url, doc)
    snap: Snapshot = build_snapshot(doc)
    hot = HotState(redis)
    await hot.sync_inventory(
        {c.id: (c.shard, c.budget_micros) for c in snap.campaigns.values()}, snap.billing_codes
    )
    return hot, snap.campaigns[CAMPAIGN]


def _fields(channel: str) -> dict[str, str]:
    fields = {"channel": channel, "publisher": PUB, "creative": CREATIVE_VIDEO}
    if channel == "openrtb":
        fields |= {"auction_id": uuid.uuid4().hex, "imp_id": "1", "audience": "10"}
    return fields


async def reserve_offer(
    hot: HotState, camp: CampaignInfo, channel: str, ttl: timedelta = timedelta(minutes=5)
) -> str:
    now = datetime.now(UTC)
    made = await hot.reserve(camp, PRICE, SCREEN_MOVING, now, now + ttl, _fields(channel))
    assert isinstance(made, Reserved), made
    return made.offer_id


def billing_payload(gross: int) -> dict[str, Any]:
    net, commission = split_gross(gross, RATE)
    return {
        "billing_id": str(uuid.uuid4()),
        "gross_micros": gross,
        "commission_micros": commission,
        "net_micros": net,
        "commission_rate": str(RATE),
    }


def tracking_payload(event: str) -> dict[str, Any]:
    return {
        "event_id": str(uuid.uuid4()),
        "event": event,
        "ts": None,
        "price": "0.025",
        "aud": "10",
    }


async def accept_offer(hot: HotState, offer_id: str) -> Answered | NotAnswered:
    """The publisher's accept of `offer_id` at ACCEPTED, now."""
    return await hot.respond(
        offer_id,
        PUB,
        "accept",
        datetime.now(UTC),
        billing_payload(ACCEPTED),
        accepted_micros=ACCEPTED,
    )


async def core_accept_and_play(hot: HotState, camp: CampaignInfo) -> Expected:
    offer_id = await reserve_offer(hot, camp, "core")
    answered = await accept_offer(hot, offer_id)
    deal_id = answered.deal_id  # type: ignore[union-attr]
    played = await hot.confirm_playout(
        deal_id, PUB, datetime.now(UTC), {"played_at": None, "duration_seconds": 15}
    )
    assert played.status == "new"
    rows = Counter(offers=1, deals=1, billing_records=1, playouts=1)
    return Expected(rows, [deal_id], [offer_id], records=2)  # offer_accepted, playout_confirmed


async def core_reject(hot: HotState, camp: CampaignInfo) -> Expected:
    offer_id = await reserve_offer(hot, camp, "core")
    await hot.respond(offer_id, PUB, "reject", datetime.now(UTC), {"rejection_reason": "full"})
    return Expected(Counter(offers=1, rejections=1), [], [offer_id], records=1)  # offer_rejected


async def core_open(hot: HotState, camp: CampaignInfo) -> Expected:
    """Not answered yet: no record, no row; Redis holds the offer and its reservation."""
    offer_id = await reserve_offer(hot, camp, "core")
    return Expected(open_offers=[offer_id])


async def openrtb_billed_then_lost(hot: HotState, camp: CampaignInfo) -> Expected:
    offer_id = await reserve_offer(hot, camp, "openrtb")
    now = datetime.now(UTC)
    billed = await hot.track(
        offer_id, "impression", now, tracking_payload("impression"), billing_payload(PRICE)
    )
    assert billed.status == "billed"
    await hot.track(offer_id, "complete", now, tracking_payload("complete"), billing_payload(PRICE))
    await hot.loss(offer_id, now, {"reason": "102", "price": None, "aid": "a", "body": None})
    rows = Counter(offers=1, billing_records=1, tracking_events=2, loss_notices=1)
    # impression_billed + tracking_event (impression), tracking_event (complete), loss_notice
    return Expected(rows, [], [offer_id], records=4)


async def openrtb_lost(hot: HotState, camp: CampaignInfo) -> Expected:
    offer_id = await reserve_offer(hot, camp, "openrtb")
    await hot.loss(offer_id, datetime.now(UTC), {"reason": "3", "price": "1.2", "body": {"x": 1}})
    return Expected(Counter(offers=1, loss_notices=1), [], [offer_id], records=1)  # loss_notice


async def core_expired(hot: HotState, camp: CampaignInfo) -> Expected:
    offer_id = await reserve_offer(hot, camp, "core", ttl=timedelta(milliseconds=1))
    await asyncio.sleep(0.005)
    await hot.expire_due(datetime.now(UTC))
    return Expected(Counter(offers=1), [], [offer_id], records=1)  # offer_expired


MIX = (
    core_accept_and_play,
    core_reject,
    core_open,
    core_expired,
    openrtb_billed_then_lost,
    openrtb_lost,
)


async def make_records(hot: HotState, camp: CampaignInfo, rounds: int) -> Expected:
    """`rounds` of every kind of operation, a few at a time, as acknowledged requests would."""
    expected = Expected()
    for _ in range(rounds):
        for done in await asyncio.gather(*(op(hot, camp) for op in MIX)):
            expected.merge(done)
    return expected


async def write_queued(pool: asyncpg.Pool, redis: Redis) -> None:
    """Write every queued record into `pool`'s database: a writer on it, drained."""

    async def get_pool() -> asyncpg.Pool:
        return pool

    await drain(RecordWriter(redis, get_pool, consumer="test"), redis)


async def drain(writer: RecordWriter, redis: Redis, within: float = 20.0) -> None:
    """Step the writer until every queue is empty and nothing is pending."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        await writer.step()
        depth, _ = await queue_stats(redis)
        if depth == 0:
            return
    raise AssertionError(f"queue not drained in {within}s: depth {await queue_stats(redis)}")


async def pending_count(redis: Redis) -> int:
    total = 0
    for key in queue_keys():
        info = await redis.xpending(key, QUEUE_GROUP)
        total += int(info["pending"])
    return total


async def table_counts(conn: Conn) -> dict[str, int]:
    return {t: int(await conn.fetchval(f"SELECT count(*) FROM {t}")) for t in RECORD_TABLES}


async def assert_exactly_once(conn: Conn, expected: Expected) -> None:
    """Every acknowledged record is in Postgres once: row counts equal what was done."""
    counts = await table_counts(conn)
    assert counts == {t: expected.rows.get(t, 0) for t in RECORD_TABLES}
    stored = await conn.fetchval(
        "SELECT count(*) FROM offers WHERE offer_id = ANY($1::uuid[])", expected.offers
    )
    assert stored == len(expected.offers)
    still_open = await conn.fetchval(
        "SELECT count(*) FROM offers WHERE offer_id = ANY($1::uuid[])", expected.open_offers
    )
    assert still_open == 0


async def open_offers_in_redis(redis: Redis) -> dict[str, int]:
    """Per campaign, the prices (micro-cents) of the open offers Redis holds: the members of
    every shard's expiry set whose hash still says `open`."""
    prices: Counter[str] = Counter()
    for shard in range(SHARDS):
        for raw in await redis.zrange(expiry_key(shard), 0, -1):
            offer_id = raw.decode() if isinstance(raw, bytes) else str(raw)
            campaign, price, status = await redis.hmget(
                offer_key(shard, offer_id), ["campaign", "price", "status"]
            )
            if status == b"open" and isinstance(campaign, bytes) and price is not None:
                prices[campaign.decode()] += int(price)
    return dict(prices)


async def assert_balanced(redis: Redis, conn: Conn) -> None:
    """budget = remaining + reserved + spent, where spent is what the billing records in
    Postgres prove and reserved is the prices of the open offers, which only Redis holds."""
    budgets = await HotState(redis).read_budgets(datetime.now(UTC))
    open_prices = await open_offers_in_redis(redis)
    for cid, budget in budgets.items():
        billed = await conn.fetchval(
            "SELECT coalesce(sum(gross_price_cents), 0) FROM billing_records "
            "WHERE campaign_id = $1",
            cid,
        )
        open_sum = Decimal(open_prices.get(cid, 0)).scaleb(-6)
        total = await conn.fetchval("SELECT budget_cents FROM campaigns WHERE id = $1", cid)
        spent, reserved = Decimal(budget.spent).scaleb(-6), Decimal(budget.reserved).scaleb(-6)
        assert spent == billed, (cid, spent, billed)
        assert reserved == open_sum, (cid, reserved, open_sum)
        remaining = Decimal(budget.total - budget.reserved - budget.spent).scaleb(-6)
        assert remaining >= 0
        assert total == remaining + reserved + spent
