"""Admin record lookups and `reconcile`, on the session's servers."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import asyncpg
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from redis.asyncio import Redis

from matching.snapshot import build_snapshot
from store.hot import Answered, HotState, Reserved, budget_key, offer_key, shard_of
from store.local_servers import free_port
from store.reconcile import reconcile, summarize
from tests.support.admin import parsed
from tests.support.cli import audit_lines, bidder, cli_env
from tests.support.core import live_app
from tests.support.factories import (
    CAMPAIGN,
    CREATIVE_VIDEO,
    PUB,
    SCREEN_MOVING,
    basic_document,
    seed,
)
from tests.support.records import (
    ACCEPTED,
    accept_offer,
    billing_payload,
    core_reject,
    make_records,
    prepare,
    reserve_offer,
    write_queued,
)
from tests.support.servers import ADMIN_TOKEN, ServerUrls, make_settings, wait_for_inventory

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


async def _until(client: AsyncTestClient[Litestar], path: str, within: float = 10.0) -> Any:
    deadline = time.monotonic() + within
    while True:
        response = await client.get(path, headers=ADMIN)
        if response.status_code == 200 or time.monotonic() > deadline:
            return response
        await asyncio.sleep(0.05)


async def test_offer_and_deal_lookups_from_redis_then_postgres(
    app_client: AsyncTestClient[Litestar], redis_client: Redis, settings: Any
) -> None:
    """The app runs its own record writer (RECORD_WRITER defaults to on)."""
    await seed(settings.postgres.url, basic_document())
    await wait_for_inventory(app_client)
    hot = HotState(redis_client)  # the test's own client: the app's lives on the app's loop
    snap = build_snapshot(basic_document())
    now = datetime.now(UTC)
    made = await hot.reserve(
        snap.campaigns[CAMPAIGN],
        2_500_000,
        SCREEN_MOVING,
        now,
        now.replace(year=now.year + 1),
        {"channel": "core", "publisher": PUB, "creative": CREATIVE_VIDEO},
    )
    assert isinstance(made, Reserved)
    offer_id = made.offer_id
    live = await app_client.get(f"/admin/v1/offers/{offer_id}", headers=ADMIN)
    assert live.status_code == 200
    assert live.json() | {"expires_at": None} == {
        "offer_id": offer_id,
        "status": "open",
        "screen_id": SCREEN_MOVING,
        "campaign_id": CAMPAIGN,
        "bid_price_cents": 2.5,
        "expires_at": None,
        "rejection_reason": None,
        "deal_id": None,
    }
    assert live.json()["expires_at"].startswith(str(now.year + 1))

    answered = await hot.respond(
        offer_id, PUB, "accept", now, billing_payload(ACCEPTED), accepted_micros=ACCEPTED
    )
    assert isinstance(answered, Answered)
    deal_id = answered.deal_id
    deal = await _until(app_client, f"/admin/v1/deals/{deal_id}")
    assert deal.status_code == 200, deal.text
    body = deal.json()
    assert (body["gross_price_cents"], body["commission_cents"], body["net_price_cents"]) == (
        2,
        0.3,
        1.7,
    )
    assert body["offer_id"] == offer_id
    assert body["billing"]["billing_code"] == "BILL-FIZZY-METRO"
    assert body["playouts"] == []

    await hot.confirm_playout(deal_id, PUB, now, {"duration_seconds": 15})
    for _ in range(100):
        body = (await app_client.get(f"/admin/v1/deals/{deal_id}", headers=ADMIN)).json()
        if body["playouts"]:
            break
        await asyncio.sleep(0.05)
    assert [p["duration_seconds"] for p in body["playouts"]] == [15]

    # Once Redis no longer holds the offer, the record in Postgres answers.
    await redis_client.delete(offer_key(shard_of(offer_id), offer_id))  # type: ignore[arg-type]
    stored = await app_client.get(f"/admin/v1/offers/{offer_id}", headers=ADMIN)
    assert stored.status_code == 200
    assert stored.json()["status"] == "accepted"
    assert stored.json()["deal_id"] == deal_id
    assert stored.json()["bid_price_cents"] == 2.5


async def _row_status(database_url: str, offer_id: str, until: str | None = None) -> Any:
    """The offer's status in Postgres (None: no row); with `until`, wait (10 s at most) for it."""
    conn = await asyncpg.connect(database_url)
    try:
        deadline = time.monotonic() + 10
        while True:
            status = await conn.fetchval("SELECT status FROM offers WHERE offer_id = $1", offer_id)
            if until is None or status == until or time.monotonic() > deadline:
                return status
            await asyncio.sleep(0.05)
    finally:
        await conn.close()


async def test_an_open_offer_is_shown_from_redis_and_an_expired_one_from_postgres(
    app_client: AsyncTestClient[Litestar], redis_client: Redis, settings: Any
) -> None:
    """An open offer has no row in Postgres (a reservation queues no record), so its status
    comes from Redis; once the app's sweeper expires an offer, its record reaches Postgres and
    answers when Redis no longer holds the offer."""
    await seed(settings.postgres.url, basic_document())
    await wait_for_inventory(app_client)
    hot = HotState(redis_client)
    camp = build_snapshot(basic_document()).campaigns[CAMPAIGN]
    fields = {"channel": "core", "publisher": PUB, "creative": CREATIVE_VIDEO}
    now = datetime.now(UTC)
    kept = await hot.reserve(
        camp, 2_500_000, SCREEN_MOVING, now, now.replace(year=now.year + 1), fields
    )
    short = await hot.reserve(
        camp, 2_500_000, SCREEN_MOVING, now, now + timedelta(milliseconds=200), fields
    )
    assert isinstance(kept, Reserved)
    assert isinstance(short, Reserved)

    # The app's sweeper (every 0.5 s) expires the short one; its writer writes the record.
    assert await _row_status(settings.postgres.url, short.offer_id, until="expired") == "expired"
    assert await _row_status(settings.postgres.url, kept.offer_id) is None
    live = await app_client.get(f"/admin/v1/offers/{kept.offer_id}", headers=ADMIN)
    assert live.status_code == 200, live.text
    assert live.json()["status"] == "open"
    assert live.json()["bid_price_cents"] == 2.5

    await redis_client.delete(offer_key(camp.shard, short.offer_id))
    stored = await app_client.get(f"/admin/v1/offers/{short.offer_id}", headers=ADMIN)
    assert stored.status_code == 200, stored.text
    assert stored.json() | {"expires_at": None} == {
        "offer_id": short.offer_id,
        "status": "expired",
        "screen_id": SCREEN_MOVING,
        "campaign_id": CAMPAIGN,
        "bid_price_cents": 2.5,
        "expires_at": None,
        "rejection_reason": None,
        "deal_id": None,
    }
    expires_at = datetime.fromisoformat(stored.json()["expires_at"].replace("Z", "+00:00"))
    assert abs(expires_at - (now + timedelta(milliseconds=200))) < timedelta(milliseconds=2)


async def test_without_redis_an_offer_missing_from_postgres_is_503_not_404(
    servers: ServerUrls, clean: None
) -> None:
    """It may be open, and an open offer is in Redis only; a resolved one still answers from
    Postgres."""
    async with live_app(make_settings(servers)) as running:
        await seed(running.database_url, basic_document())
        await running.rt.inventory.reload()
        camp = build_snapshot(basic_document()).campaigns[CAMPAIGN]
        now = datetime.now(UTC)
        fields = {"channel": "core", "publisher": PUB, "creative": CREATIVE_VIDEO}
        made = [
            await running.rt.hot.reserve(
                camp, 2_500_000, SCREEN_MOVING, now, now + timedelta(minutes=5), fields
            )
            for _ in range(2)
        ]
        assert isinstance(made[0], Reserved)
        assert isinstance(made[1], Reserved)
        open_id, rejected_id = made[0].offer_id, made[1].offer_id
        await running.rt.hot.respond(rejected_id, PUB, "reject", now, {"rejection_reason": "x"})
        assert await _row_status(running.database_url, rejected_id, "rejected") == "rejected"

    broken = make_settings(servers, REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    async with live_app(broken) as down:
        unknown = await down.client.get(f"/admin/v1/offers/{open_id}", headers=ADMIN)
        assert unknown.status_code == 503, unknown.text
        assert "error" in unknown.json()
        resolved = await down.client.get(f"/admin/v1/offers/{rejected_id}", headers=ADMIN)
        assert resolved.status_code == 200, resolved.text
        assert resolved.json()["status"] == "rejected"
        assert resolved.json()["rejection_reason"] == "x"


async def test_lookups_need_the_admin_token_and_answer_404_for_unknown_ids(
    app_client: AsyncTestClient[Litestar],
) -> None:
    unknown = str(uuid.uuid4())
    for path in (f"/admin/v1/offers/{unknown}", f"/admin/v1/deals/{unknown}"):
        denied = await app_client.get(path)
        assert denied.status_code == 401
        assert "error" in denied.json()
        wrong = await app_client.get(path, headers={"Authorization": "Bearer dk_stg_x"})
        assert wrong.status_code == 401
        missing = await app_client.get(path, headers=ADMIN)
        assert missing.status_code == 404
        assert "error" in missing.json()
    bad = await app_client.get("/admin/v1/offers/not-a-uuid", headers=ADMIN)
    assert bad.status_code == 400
    assert "error" in bad.json()


async def test_reconcile_reports_and_repairs_counters_from_the_records(
    redis_client: Redis, pool: asyncpg.Pool, migrated: str
) -> None:
    hot, camp = await prepare(redis_client, migrated)
    await make_records(hot, camp, rounds=2)

    await write_queued(pool, redis_client)
    # One more record still in the queue: it counts as proven too.
    await core_reject(hot, camp)
    async with pool.acquire() as conn:
        report = await reconcile(redis_client, conn, settle_seconds=0)
        assert report.differing == {}
        spent_before = report.campaigns[CAMPAIGN].spent
        # Two core_open offers per round, 2.5 cents each, held by Redis alone: a reservation
        # queues no record, so Postgres has no open offer row (the mix fires no tracking event
        # on an open offer).
        figures = summarize(report)["campaigns"][CAMPAIGN]
        assert figures["open_offers_cents"] == Decimal(5)
        assert figures["reserved_cents"] == Decimal(5)
        assert figures["open_in_postgres_cents"] == 0
        assert spent_before == 2 * (ACCEPTED + 2_500_000)  # 2 accepts + 2 impressions

        key = budget_key(camp.shard)
        await redis_client.hincrby(key, f"{CAMPAIGN}:s", 1_000_000)
        await redis_client.hincrby(key, f"{CAMPAIGN}:r", -2_500_000)
        report = await reconcile(redis_client, conn, settle_seconds=0)
        assert set(report.differing) == {CAMPAIGN}
        assert len(report.differing[CAMPAIGN]) == 2

        repaired = await reconcile(redis_client, conn, repair=True, settle_seconds=0)
        assert repaired.repaired == [CAMPAIGN]
        again = await reconcile(redis_client, conn, settle_seconds=0)
        assert again.differing == {}
        assert again.campaigns[CAMPAIGN].spent == spent_before
        # two core_open offers per round... every open offer still reserves its price
        assert again.campaigns[CAMPAIGN].reserved == 2 * 2_500_000


async def test_an_openrtb_bids_outcome_shows_as_one_of_the_four_statuses(
    app_client: AsyncTestClient[Litestar], redis_client: Redis, settings: Any
) -> None:
    """docs/contract.md#2-inventory: the admin offer view's status is open | accepted | rejected |
    expired. A billed bid shows as accepted and a lost one as rejected, from Redis and from
    Postgres."""
    await seed(settings.postgres.url, basic_document())
    await wait_for_inventory(app_client)
    hot = HotState(redis_client)
    camp = build_snapshot(basic_document()).campaigns[CAMPAIGN]
    now = datetime.now(UTC)
    billed, lost = [await reserve_offer(hot, camp, "openrtb") for _ in range(2)]
    assert (
        await hot.track(
            billed,
            "impression",
            now,
            {"event_id": str(uuid.uuid4())},
            {
                "billing_id": str(uuid.uuid4()),
                "gross_micros": 2_500_000,
                "commission_micros": 375_000,
                "net_micros": 2_125_000,
                "commission_rate": "0.15",
            },
        )
    ).status == "billed"
    assert (await hot.loss(lost, now, {"reason": "102"}))[0] == "first"
    expected = {billed: "accepted", lost: "rejected"}
    for offer_id, status in expected.items():
        live = await app_client.get(f"/admin/v1/offers/{offer_id}", headers=ADMIN)
        assert live.status_code == 200, live.text
        assert live.json()["status"] == status
    for offer_id, status in expected.items():
        internal = "billed" if status == "accepted" else "lost"
        assert await _row_status(settings.postgres.url, offer_id, until=internal) == internal
        await redis_client.delete(offer_key(camp.shard, offer_id))
        stored = await app_client.get(f"/admin/v1/offers/{offer_id}", headers=ADMIN)
        assert stored.status_code == 200, stored.text
        assert stored.json()["status"] == status


@pytest.mark.parametrize(
    ("played_at", "stored"),
    [
        # The first instant the Core API accepts: asyncpg writes datetime.min as -infinity, and
        # a deal whose playout held -infinity would answer 500 on every read.
        ("0001-01-01T00:00:00.000Z", "0001-01-01 00:00:00+00"),
        ("9999-12-31T23:59:59.999Z", "9999-12-31 23:59:59.999+00"),
    ],
)
async def test_a_playout_at_either_end_of_the_accepted_years_is_stored_and_read_exactly(
    app_client: AsyncTestClient[Litestar],
    redis_client: Redis,
    settings: Any,
    played_at: str,
    stored: str,
) -> None:
    await seed(settings.postgres.url, basic_document())
    await wait_for_inventory(app_client)
    hot = HotState(redis_client)
    camp = build_snapshot(basic_document()).campaigns[CAMPAIGN]
    answered = await accept_offer(hot, await reserve_offer(hot, camp, "core"))
    assert isinstance(answered, Answered)
    # The payload the Core API queues (bidder.core._playout: played_at as iso_utc makes it).
    await hot.confirm_playout(answered.deal_id, PUB, datetime.now(UTC), {"played_at": played_at})
    conn = await asyncpg.connect(settings.postgres.url)
    try:
        deadline = time.monotonic() + 10
        while True:
            row = await conn.fetchval(
                "SELECT played_at::text FROM playouts WHERE deal_id = $1", answered.deal_id
            )
            if row is not None or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
    finally:
        await conn.close()
    assert row == stored
    deal = await app_client.get(f"/admin/v1/deals/{answered.deal_id}", headers=ADMIN)
    assert deal.status_code == 200, deal.text
    assert [p["played_at"] for p in deal.json()["playouts"]] == [played_at]


async def test_a_timestamp_stored_as_infinity_reads_as_the_first_or_last_instant(
    app_client: AsyncTestClient[Litestar], settings: Any
) -> None:
    """A row holding -infinity (as asyncpg writes datetime.min) still reads: its deal
    answers, it does not 500."""
    await seed(settings.postgres.url, basic_document())
    await wait_for_inventory(app_client)
    deal_id, offer_id, billing_id = (str(uuid.uuid4()) for _ in range(3))
    conn = await asyncpg.connect(settings.postgres.url)
    try:
        await conn.execute(
            "INSERT INTO offers (offer_id, channel, status, publisher_id, screen_id, campaign_id,"
            " creative_id, bid_price_cents, created_at, expires_at)"
            " VALUES ($1, 'core', 'accepted', $2, $3, $4, $5, 2.5, now(), now())",
            offer_id,
            PUB,
            SCREEN_MOVING,
            CAMPAIGN,
            CREATIVE_VIDEO,
        )
        await conn.execute(
            "INSERT INTO deals (deal_id, offer_id, publisher_id, campaign_id, gross_price_cents,"
            " commission_cents, net_price_cents, accepted_at)"
            " VALUES ($1, $2, $3, $4, 2, 0.3, 1.7, now())",
            deal_id,
            offer_id,
            PUB,
            CAMPAIGN,
        )
        await conn.execute(
            "INSERT INTO playouts (playout_id, deal_id, played_at, confirmed_at)"
            " VALUES ($1, $2, '-infinity', 'infinity')",
            billing_id,
            deal_id,
        )
    finally:
        await conn.close()
    deal = await app_client.get(f"/admin/v1/deals/{deal_id}", headers=ADMIN)
    assert deal.status_code == 200, deal.text
    (playout,) = deal.json()["playouts"]
    assert (playout["played_at"], playout["confirmed_at"]) == (
        "0001-01-01T00:00:00.000Z",
        "9999-12-31T23:59:59.999Z",
    )


async def test_the_cli_shows_and_tops_up_what_the_admin_api_does(
    app_client: AsyncTestClient[Litestar], redis_client: Redis, settings: Any
) -> None:
    """docs/contract.md#2-inventory: every admin operation from the command line too. `bidder
    campaigns show|top-up`, `offers show` and `deals show` print what the admin API answers, and a
    top-up logs its audit line there as well."""
    await seed(settings.postgres.url, basic_document())
    await wait_for_inventory(app_client)
    env = cli_env(ServerUrls(settings.redis.url, settings.postgres.url, None, settings.redis.mode))
    hot = HotState(redis_client)
    camp = build_snapshot(basic_document()).campaigns[CAMPAIGN]
    offer_id = await reserve_offer(hot, camp, "core")
    answered = await accept_offer(hot, offer_id)
    assert isinstance(answered, Answered)
    deal = await _until(app_client, f"/admin/v1/deals/{answered.deal_id}")
    assert deal.status_code == 200, deal.text

    shows: list[tuple[tuple[str, ...], str]] = [
        (("offers", "show", offer_id), f"/admin/v1/offers/{offer_id}"),
        (("deals", "show", answered.deal_id), f"/admin/v1/deals/{answered.deal_id}"),
        (("campaigns", "show", CAMPAIGN), f"/admin/v1/campaigns/{CAMPAIGN}"),
    ]
    for args, path in shows:
        shown = await bidder(env, *args)
        assert shown.returncode == 0, shown.stderr
        api = await app_client.get(path, headers=ADMIN)
        assert parsed(shown.stdout) == parsed(api.content), args

    topped = await bidder(env, "campaigns", "top-up", CAMPAIGN, "250.000001")
    assert topped.returncode == 0, topped.stderr
    body = parsed(topped.stdout)
    assert body["budget_cents"] == Decimal("100250.000001")
    assert body["budget"]["total_cents"] == Decimal("100250.000001")
    assert [(line["message"], line["campaign_id"]) for line in audit_lines(topped)] == [
        ("budget topped up", CAMPAIGN)
    ]
    api = parsed((await app_client.get(f"/admin/v1/campaigns/{CAMPAIGN}", headers=ADMIN)).content)
    assert api["budget"]["total_cents"] == Decimal("100250.000001")

    # An amount the admin API's parser refuses is a usage error (2); a refused action (a total
    # past the largest, an unknown id) is 1.
    refusals: list[tuple[tuple[str, ...], bytes, int]] = [
        (("campaigns", "top-up", CAMPAIGN, "-5"), b"positive", 2),
        (("campaigns", "top-up", CAMPAIGN, "9000000000"), b"exceed", 1),
        (("campaigns", "show", str(uuid.uuid4())), b"Unknown campaign", 1),
        (("offers", "show", str(uuid.uuid4())), b"not found", 1),
        (("deals", "show", str(uuid.uuid4())), b"not found", 1),
    ]
    for args, fragment, status in refusals:
        refused = await bidder(env, *args)
        assert refused.returncode == status, (args, refused.stderr)
        assert fragment in refused.stderr
        assert b"Traceback" not in refused.stderr
