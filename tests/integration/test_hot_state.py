"""The reservation scripts against real Redis: budgets are never over-reserved, one answer wins."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from redis.asyncio import Redis

from matching.snapshot import CampaignInfo, build_snapshot
from store.hot import Answered, HotState, NotAnswered, Refused, Reserved
from tests.factories import CAMPAIGN, PUB, PUB_OTHER, SCREEN_MOVING, basic_document, campaign


async def _hot(client: Redis, budget_cents: str) -> tuple[HotState, CampaignInfo]:
    doc = basic_document(campaigns=[campaign(budget_cents=Decimal(budget_cents))])
    snap = build_snapshot(doc)
    hot = HotState(client)
    await hot.sync_inventory(
        {c.id: (c.shard, c.budget_micros) for c in snap.campaigns.values()}, snap.billing_codes
    )
    return hot, snap.campaigns[CAMPAIGN]


async def test_concurrent_reservations_never_exceed_budget(redis_client: Redis) -> None:
    # 10 plays of 2.5 cents fit into 25 cents; 200 concurrent attempts must reserve exactly 10.
    hot, camp = await _hot(redis_client, "25")
    now = datetime.now(UTC)
    results = await asyncio.gather(
        *[
            hot.reserve(
                camp,
                2_500_000,
                SCREEN_MOVING,
                now,
                now + timedelta(minutes=5),
                {"channel": "core", "publisher": PUB, "creative": "c"},
            )
            for _ in range(200)
        ]
    )
    reserved = [r for r in results if isinstance(r, Reserved)]
    refused = [r for r in results if isinstance(r, Refused)]
    assert len(reserved) == 10
    assert {r.reason for r in refused} == {"budget"}
    budgets = await hot.read_budgets(now)
    assert budgets[CAMPAIGN].reserved == 25_000_000
    assert budgets[CAMPAIGN].spent == 0


async def test_exactly_one_answer_wins_and_settles(redis_client: Redis) -> None:
    hot, camp = await _hot(redis_client, "100")
    now = datetime.now(UTC)
    made = await hot.reserve(
        camp,
        2_500_000,
        SCREEN_MOVING,
        now,
        now + timedelta(minutes=5),
        {"channel": "core", "publisher": PUB, "creative": "c"},
    )
    assert isinstance(made, Reserved)
    answers = await asyncio.gather(
        *[
            hot.respond(made.offer_id, PUB, "accept", now, {}, accepted_micros=2_000_000)
            for _ in range(10)
        ],
        *[hot.respond(made.offer_id, PUB, "reject", now, {}) for _ in range(10)],
    )
    assert sum(isinstance(a, Answered) for a in answers) == 1
    other = await hot.respond(made.offer_id, PUB_OTHER, "reject", now, {})
    assert isinstance(other, NotAnswered)
    budget = (await hot.read_budgets(now))[CAMPAIGN]
    assert budget.reserved == 0
    assert budget.spent in (0, 2_000_000)
