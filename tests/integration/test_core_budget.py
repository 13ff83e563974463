"""Budgets through the Core API on real Redis and Postgres: never over-reserved under concurrent
requests, released on expiry, and a fast 503 when Redis cannot be reached
(docs/contract.md#4-offers-reservations-and-outcomes and docs/contract.md#7-durability).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import asyncpg
import pytest

from bidder.settings import Settings
from matching.engine import Budget
from matching.snapshot import build_snapshot
from store.hot import budget_key
from store.inventory_repo import bump_version, export_document, load_api_keys
from tests.support.core import (
    API,
    NOT_FOUND_OFFER,
    PLAY_PRICE_MICROS,
    Core,
    Live,
    live_app,
    prepare,
)
from tests.support.factories import CAMPAIGN, SCREEN_MOVING, basic_document, campaign, creative, uid
from tests.support.servers import ServerUrls, make_settings


@pytest.fixture
async def live(settings: Settings, clean: None) -> AsyncIterator[Live]:
    async with live_app(settings) as running:
        yield running


async def _budget(core: Core) -> tuple[int, int]:
    budget = (await core.rt.hot.read_budgets(datetime.now(UTC)))[CAMPAIGN]
    return budget.reserved, budget.spent


@pytest.mark.parametrize("refresh_seconds", [1.0, 0.0])
async def test_ties_go_to_the_larger_share_left_from_the_very_next_request(
    live: Live, monkeypatch: pytest.MonkeyPatch, refresh_seconds: float
) -> None:
    # Two campaigns at the same price and budget: each offer reserves from one, so the next
    # request must go to the other (docs/contract.md#3-matching-and-price), without waiting for a
    # budget refresh; and a refresh read in flight meanwhile (all the time, at 0 s) must not bring
    # the older figures back (the same campaign would then win again).
    monkeypatch.setattr(live.rt.budgets, "refresh_seconds", refresh_seconds)
    twin = uid(9, 4)
    doc = basic_document(
        campaigns=[campaign(), campaign(id=twin, name="Twin")],
        creatives=[creative(), creative(id=uid(9, 5), campaign_id=twin)],
    )
    core = await prepare(live, doc)
    winners = []
    for _ in range(12):
        offer = await core.offer(SCREEN_MOVING)
        assert offer.status_code == 200, offer.text
        record = await core.rt.hot.offer(offer.json()["offer_id"])
        assert record is not None
        winners.append(record["campaign"])
    assert winners[0::2] == [winners[0]] * 6
    assert winners[1::2] == [winners[1]] * 6
    assert {winners[0], winners[1]} == {CAMPAIGN, twin}


async def test_a_refresh_read_in_flight_does_not_undo_a_newer_answer(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = await prepare(live)
    stale = (await core.rt.hot.read_budgets(datetime.now(UTC)))[CAMPAIGN]  # before any offer
    started, land = asyncio.Event(), asyncio.Event()
    real_read = core.rt.hot.read_budgets
    reads = 0

    async def slow_read(now: datetime, shards: Any = ()) -> dict[str, Budget]:
        nonlocal reads
        reads += 1
        started.set()
        if reads > 1:  # begun after the offer's answer: Redis has its reservation
            return await real_read(now, shards)
        await land.wait()
        return {CAMPAIGN: stale}  # read before the offer below, arriving after its answer

    monkeypatch.setattr(core.rt.hot, "read_budgets", slow_read)
    await asyncio.wait_for(started.wait(), 5)  # the refresh loop's read is on its way
    offer = await core.offer(SCREEN_MOVING)
    assert offer.status_code == 200, offer.text
    assert core.rt.budgets.figures[CAMPAIGN].reserved == stale.reserved + PLAY_PRICE_MICROS
    land.set()
    started.clear()
    await asyncio.wait_for(started.wait(), 5)  # the stale read has been applied by now
    assert core.rt.budgets.figures[CAMPAIGN].reserved == stale.reserved + PLAY_PRICE_MICROS


async def test_a_rejected_offer_does_not_use_up_a_play_of_the_cap(live: Live) -> None:
    # max_plays_per_screen_per_hour 1 (docs/contract.md#2-inventory): a rejection is no play, an
    # accept is.
    core = await prepare(
        live, basic_document(campaigns=[campaign(max_plays_per_screen_per_hour=1)])
    )
    first = await core.offer(SCREEN_MOVING)
    assert first.status_code == 200, first.text
    assert (await core.offer(SCREEN_MOVING)).status_code == 404  # the play is held by the offer
    rejected = await core.respond(first.json()["offer_id"], {"action": "reject"})
    assert rejected.status_code == 200, rejected.text
    again = await core.offer(SCREEN_MOVING)
    assert again.status_code == 200, again.text
    accept = {"action": "accept", "accepted_price_cents": 2.5}
    assert (await core.respond(again.json()["offer_id"], accept)).status_code == 200
    assert (await core.offer(SCREEN_MOVING)).status_code == 404  # played: the hour's cap is met


async def test_concurrent_offer_requests_never_over_reserve(live: Live) -> None:
    # 25 cents buy exactly 10 plays of 2.5 cents; 120 concurrent requests may reserve only those.
    core = await prepare(live, basic_document(campaigns=[campaign(budget_cents=Decimal(25))]))
    responses = await asyncio.gather(*[core.offer(SCREEN_MOVING) for _ in range(120)])
    statuses = [r.status_code for r in responses]
    assert statuses.count(200) == 10
    assert statuses.count(404) == 110
    assert await _budget(core) == (25_000_000, 0)

    # Accept some at a lower price, reject others: reserved + spent never exceeds the budget,
    # and what a lower accept or a reject frees can be offered again.
    offer_ids = [r.json()["offer_id"] for r in responses if r.status_code == 200]
    answers = await asyncio.gather(
        *[core.respond(o, {"action": "accept", "accepted_price_cents": 2}) for o in offer_ids[:4]],
        *[core.respond(o, {"action": "reject"}) for o in offer_ids[4:6]],
    )
    assert [a.status_code for a in answers] == [200] * 6
    reserved, spent = await _budget(core)
    assert (reserved, spent) == (4 * PLAY_PRICE_MICROS, 4 * 2_000_000)
    # 25 - 10 reserved - 8 spent = 7 cents left: two more plays, then nothing. (Answers that
    # finish out of order can leave this worker's budget view pessimistic until its next
    # refresh, at most a second; refresh it now as the budget loop would.)
    core.rt.budgets.figures = await core.rt.hot.read_budgets(datetime.now(UTC))
    more = await asyncio.gather(*[core.offer(SCREEN_MOVING) for _ in range(30)])
    assert [r.status_code for r in more].count(200) == 2
    reserved, spent = await _budget(core)
    assert reserved + spent <= 25_000_000
    assert (reserved, spent) == (6 * PLAY_PRICE_MICROS, 8_000_000)


async def test_daily_budget_caps_offers(live: Live) -> None:
    core = await prepare(
        live, basic_document(campaigns=[campaign(daily_budget_cents=Decimal("5.5"))])
    )
    responses = await asyncio.gather(*[core.offer(SCREEN_MOVING) for _ in range(20)])
    assert [r.status_code for r in responses].count(200) == 2  # 2 x 2.5 <= 5.5 < 3 x 2.5


async def test_expired_offer_is_404_and_its_reservation_released(
    servers: ServerUrls, clean: None
) -> None:
    settings = make_settings(servers, OFFER_TTL_SECONDS="1", SWEEP_INTERVAL_SECONDS="0.2")
    async with live_app(settings) as running:
        core = await prepare(running)
        answered_late = (await core.offer(SCREEN_MOVING)).json()["offer_id"]
        swept = (await core.offer(SCREEN_MOVING)).json()["offer_id"]
        assert await _budget(core) == (2 * PLAY_PRICE_MICROS, 0)
        await asyncio.sleep(1.2)
        for body in ({"action": "accept", "accepted_price_cents": 1}, {"action": "reject"}):
            late = await core.respond(answered_late, body)
            assert late.status_code == 404
            assert late.json() == {"error": NOT_FOUND_OFFER}
        # The sweeper releases the other one without any call (well within "about a minute").
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and (await _budget(core))[0] != 0:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        assert await _budget(core) == (0, 0)
        for offer_id in (answered_late, swept):
            stored = await core.rt.hot.offer(offer_id)
            assert stored is not None
            assert stored["status"] == "expired"
        late = await core.respond(swept, {"action": "reject"})
        assert late.status_code == 404


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_redis_unreachable_is_a_fast_503(servers: ServerUrls, clean: None) -> None:
    healthy = make_settings(servers)
    async with live_app(healthy) as running:
        core = await prepare(running)
        offer_id = (await core.offer(SCREEN_MOVING)).json()["offer_id"]
        deal = await core.respond(offer_id, {"action": "accept", "accepted_price_cents": 2.5})
        deal_id = deal.json()["deal_id"]
        keys = (core.key,)

    broken = make_settings(servers, REDIS_URL=f"redis://127.0.0.1:{_closed_port()}/0")
    async with live_app(broken) as down:
        # Without Redis the runtime cannot sync budgets, so it never installs a snapshot by
        # itself; install one from Postgres so the request really reaches the Redis call.
        pool = await down.rt.postgres.connect()
        async with pool.acquire() as conn:
            doc, api_keys = await export_document(conn), await load_api_keys(conn)
        down.rt.inventory.snapshot = build_snapshot(doc, api_keys, 1)
        auth = {"Authorization": f"Bearer {keys[0]}"}
        calls = [
            ("GET", f"{API}/offers/request/{SCREEN_MOVING}", None),
            ("GET", f"{API}/offers/request/external-id/ext-moving-1", None),
            ("POST", f"{API}/offers/response/{offer_id}", {"action": "reject"}),
            ("POST", f"{API}/playout/confirm/{deal_id}", {}),
        ]
        for method, path, body in calls:
            start = time.monotonic()
            response = await down.client.request(method, path, json=body, headers=auth)
            elapsed = time.monotonic() - start
            assert response.status_code == 503, (path, response.text)
            assert set(response.json()) == {"error"}
            assert elapsed < 1.0, f"{path} took {elapsed:.2f}s"
        # Demo mode needs no Redis at all.
        demo = await down.client.get(f"{API}/offers/request/test-display-test", headers=auth)
        assert demo.status_code == 200

    # Before any snapshot exists no key can be checked: 503, not 401.
    async with live_app(broken) as starting:
        starting.rt.inventory.snapshot = None
        response = await starting.client.get(
            f"{API}/offers/request/{SCREEN_MOVING}", headers={"Authorization": "Bearer dk_stg_x"}
        )
        assert response.status_code == 503


async def test_the_local_budget_view_follows_redis_within_a_second(live: Live) -> None:
    """The budget loop refreshes every campaign's figures within about a second, one shard per
    tick; a campaign whose figures left Redis leaves the view too (its stale figures would
    otherwise keep it out of matching)."""
    core = await prepare(live)
    assert core.rt.inventory.snapshot is not None
    shard = core.rt.inventory.snapshot.campaigns[CAMPAIGN].shard
    await _until(lambda: CAMPAIGN in core.rt.budgets.figures)
    figures = core.rt.budgets.figures
    assert figures[CAMPAIGN].total == 100_000 * 1_000_000  # the factory's 100,000 cents
    await core.rt.redis.delete(budget_key(shard))
    await _until(lambda: CAMPAIGN not in core.rt.budgets.figures)


async def _until(condition: Callable[[], bool], within: float = 3.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "not within the time allowed"
        await asyncio.sleep(0.05)


async def test_a_total_stamped_past_every_version_is_overwritten_after_a_few_reloads(
    live: Live,
) -> None:
    """A sync leaves a total that a top-up of a newer inventory version wrote; the next
    version's reload writes Postgres' total. A stamp no version catches up with (Postgres
    restored to an older version) must not keep Redis' total from Postgres for good: after a
    few reloads that kept it, a reload writes every total."""
    core = await prepare(live, basic_document(campaigns=[campaign(budget_cents=Decimal(25))]))
    assert core.rt.inventory.snapshot is not None
    shard = core.rt.inventory.snapshot.campaigns[CAMPAIGN].shard
    await core.rt.redis.hset(
        budget_key(shard), mapping={f"{CAMPAIGN}:t": 99_000_000, f"{CAMPAIGN}:tv": 10**9}
    )

    async def total() -> int:
        return (await core.rt.hot.read_budgets(datetime.now(UTC)))[CAMPAIGN].total

    conn = await asyncpg.connect(core.database_url)
    try:
        await bump_version(conn)  # an unrelated change: every worker reloads
    finally:
        await conn.close()
    kept_for = 0
    while await total() == 99_000_000:
        await core.reload()
        kept_for += 1
        assert kept_for <= 5, "the stale total was never overwritten"
    assert await total() == 25_000_000
    assert kept_for > 1  # kept at first: it may be a top-up newer than the read
