"""The reservation scripts against real Redis: budgets are never over-reserved, one answer wins."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from redis.asyncio import Redis

from bidder.runtime import Runtime
from bidder.settings import Settings
from matching.snapshot import CampaignInfo, build_snapshot
from store.hot import (
    HASH_MAX_LISTPACK_ENTRIES,
    Answered,
    HotState,
    NotAnswered,
    OfferForm,
    Refused,
    Reserved,
    Tracked,
    budget_key,
    day_key,
    epoch_ms,
    expiry_key,
    freq_key,
    listpack_warning,
    offer_key,
    queue_key,
    queue_keys,
)
from tests.support.factories import (
    CAMPAIGN,
    PUB,
    PUB_OTHER,
    SCREEN_MOVING,
    basic_document,
    campaign,
)


async def _hot(
    client: Redis,
    budget_cents: str = "100000",
    form: OfferForm = "fields",
    counted: bool = True,
    **campaign_fields: Any,
) -> tuple[HotState, CampaignInfo]:
    """HotState with the basic inventory's campaign (of `budget_cents` and `campaign_fields`)
    synced, and that campaign."""
    doc = basic_document(
        campaigns=[campaign(budget_cents=Decimal(budget_cents), **campaign_fields)]
    )
    snap = build_snapshot(doc)
    hot = HotState(client, offer_form=form, count_day_reservations=counted)
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


async def test_a_reservation_queues_no_record_and_its_expiry_carries_the_offer(
    redis_client: Redis,
) -> None:
    """The open offer lives in Redis only (its hash and the expiry set); the sweeper's expiry
    is its first record, and that record carries the whole offer."""
    hot, camp = await _hot(redis_client, "100")
    now = datetime.now(UTC)
    fields = {"channel": "openrtb", "publisher": PUB, "creative": "c", "auction_id": "a-1"}
    made = await hot.reserve(
        camp, 2_500_000, SCREEN_MOVING, now, now + timedelta(seconds=1), fields
    )
    assert isinstance(made, Reserved)
    assert [await redis_client.xlen(key) for key in queue_keys()] == [0] * len(queue_keys())
    assert await redis_client.zscore(expiry_key(camp.shard), made.offer_id) is not None
    held = await hot.offer(made.offer_id)
    assert held is not None
    assert held["status"] == "open"

    assert await hot.expire_due(now + timedelta(seconds=2)) == {"openrtb": 1}
    entries: Any = await redis_client.xrange(queue_key(camp.shard))
    assert [entry[b"t"] for _, entry in entries] == [b"offer_expired"]
    carried = json.loads(entries[0][1][b"o"])
    assert carried | {"resolved_ms": None} == {
        **fields,
        "offer_id": made.offer_id,
        "campaign": CAMPAIGN,
        "advertiser": camp.advertiser_id,
        "screen": SCREEN_MOVING,
        "price": "2500000",
        "created_ms": str(epoch_ms(now)),
        "expires_ms": str(epoch_ms(now + timedelta(seconds=1))),
        "day": now.strftime("%Y%m%d"),
        "status": "expired",
        "resolved_ms": None,
    }
    assert (await hot.read_budgets(now))[CAMPAIGN].reserved == 0


async def test_every_key_a_reservation_writes_expires(redis_client: Redis) -> None:
    """The day, hour and offer keys all carry an expiry, whichever reservation created them and
    however many followed (the script sets it when a field is created, not on every call)."""
    hot, camp = await _hot(
        redis_client, "100", daily_budget_cents=Decimal(50), max_plays_per_screen_per_hour=5
    )
    now = datetime.now(UTC)
    made = []
    for _ in range(3):
        result = await hot.reserve(
            camp, 2_500_000, SCREEN_MOVING, now, now + timedelta(minutes=5), {"channel": "core"}
        )
        assert isinstance(result, Reserved)
        made.append(result.offer_id)
    keys = [
        day_key(camp.shard, now.strftime("%Y%m%d")),
        freq_key(camp.shard, now.strftime("%Y%m%d%H")),
        *(offer_key(camp.shard, offer_id) for offer_id in made),
    ]
    for key in keys:
        assert await redis_client.exists(key), key
        assert await redis_client.pttl(key) > 0, key
    assert int(await redis_client.hget(keys[1], f"{CAMPAIGN}:{SCREEN_MOVING}") or 0) == 3


_CORE = {"channel": "core", "publisher": PUB, "creative": "c"}


async def _core_offer(hot: HotState, camp: CampaignInfo, at: datetime) -> Reserved | Refused:
    """A Core offer of 2.5 cents on the moving screen, made at `at` for five minutes."""
    return await hot.reserve(camp, 2_500_000, SCREEN_MOVING, at, at + timedelta(minutes=5), _CORE)


@pytest.mark.parametrize(("form", "counted"), [("fields", True), ("lean", False)])
async def test_the_last_open_offers_of_yesterday_count_against_todays_daily_limit(
    redis_client: Redis, form: OfferForm, counted: bool
) -> None:
    """docs/decisions.md, "Daily budgets": a daily limit covers the day's spending and every
    open reservation, so past midnight the offers still open from yesterday count against
    today's limit until they end; an accepted one spends on the day it was made."""
    hot, camp = await _hot(redis_client, "100", form, counted, daily_budget_cents=Decimal(5))
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    late = midnight - timedelta(seconds=60)

    async def offer(at: datetime) -> Reserved | Refused:
        return await _core_offer(hot, camp, at)

    yesterdays = [await offer(late), await offer(late)]  # yesterday's 5 cents
    assert all(isinstance(r, Reserved) for r in yesterdays), yesterdays
    refused = await offer(midnight + timedelta(seconds=30))
    assert isinstance(refused, Refused)
    assert refused.reason == "daily_budget"
    first, second = (r.offer_id for r in yesterdays if isinstance(r, Reserved))
    rejected = await hot.respond(first, PUB, "reject", midnight + timedelta(seconds=31), {})
    assert isinstance(rejected, Answered)
    assert isinstance(await offer(midnight + timedelta(seconds=32)), Reserved)
    assert isinstance(await offer(midnight + timedelta(seconds=33)), Refused)
    # Accepted after midnight, yesterday's offer spends on yesterday: today has room again.
    accepted = await hot.respond(
        second, PUB, "accept", midnight + timedelta(seconds=34), {}, 2_500_000
    )
    assert isinstance(accepted, Answered)
    yesterday_key = day_key(camp.shard, late.strftime("%Y%m%d"))
    today_key = day_key(camp.shard, midnight.strftime("%Y%m%d"))
    assert await redis_client.hget(yesterday_key, f"{CAMPAIGN}:s") == b"2500000"
    assert await redis_client.hget(today_key, f"{CAMPAIGN}:s") is None
    assert 0 < await redis_client.pttl(yesterday_key) <= 3 * 86_400_000  # whoever created it
    assert isinstance(await offer(midnight + timedelta(seconds=35)), Reserved)
    assert isinstance(await offer(midnight + timedelta(seconds=36)), Refused)


@pytest.mark.parametrize(
    ("form", "counted"),
    [
        ("fields", True),
        ("packed", True),
        ("lean", True),
        ("fields", False),
        ("packed", False),
        ("lean", False),
    ],
)
async def test_count_day_reservations_decides_whether_the_day_hash_counts_a_reservation(
    redis_client: Redis, form: OfferForm, counted: bool
) -> None:
    """README, COUNT_DAY_RESERVATIONS: on, a reservation adds its price to its day's reserved
    counter (which the daily check of earlier releases reads) and its outcome takes it back;
    off, the day hash is left alone until the offer spends, which creates it with the day
    hash's expiry. Today's spending is counted either way."""
    hot, camp = await _hot(redis_client, "100", form, counted, daily_budget_cents=Decimal(50))
    now = datetime.now(UTC)
    made = await _core_offer(hot, camp, now)
    assert isinstance(made, Reserved)
    key = day_key(camp.shard, now.strftime("%Y%m%d"))
    counted_now = await redis_client.hget(key, f"{CAMPAIGN}:r")
    assert counted_now == (b"2500000" if counted else None)
    assert await redis_client.exists(key) == (1 if counted else 0)
    answer = await hot.respond(made.offer_id, PUB, "accept", now, {}, 2_000_000)
    assert isinstance(answer, Answered)
    day = await redis_client.hgetall(key)
    assert day[f"{CAMPAIGN}:s".encode()] == b"2000000"
    assert day.get(f"{CAMPAIGN}:r".encode()) == (b"0" if counted else None)
    assert 0 < await redis_client.pttl(key) <= 3 * 86_400_000
    assert (await hot.read_budgets(now))[CAMPAIGN].daily_spent == 2_000_000


async def test_offers_counted_and_not_end_with_todays_reserved_counter_back_at_zero(
    redis_client: Redis,
) -> None:
    """COUNT_DAY_RESERVATIONS switched while offers are open: each outcome gives back to the
    day's reserved counter exactly what its own reservation added there, whichever setting the
    worker answering it runs with, so the counter earlier releases read stays true."""
    on, camp = await _hot(redis_client, "100", "fields", True, daily_budget_cents=Decimal(50))
    off = HotState(redis_client, offer_form="lean", count_day_reservations=False)
    now = datetime.now(UTC)

    async def offer(hot: HotState) -> str:
        made = await _core_offer(hot, camp, now)
        assert isinstance(made, Reserved)
        return made.offer_id

    counted = [await offer(on), await offer(on)]
    left_out = [await offer(off), await offer(off)]
    key = day_key(camp.shard, now.strftime("%Y%m%d"))
    assert await redis_client.hget(key, f"{CAMPAIGN}:r") == b"5000000"
    # Answered by the worker of the other setting, one accepted and one rejected of each.
    for hot, (accepted, rejected) in ((off, counted), (on, left_out)):
        assert isinstance(await hot.respond(accepted, PUB, "accept", now, {}, 2_500_000), Answered)
        assert isinstance(await hot.respond(rejected, PUB, "reject", now, {}), Answered)
    day = await redis_client.hgetall(key)
    assert day[f"{CAMPAIGN}:r".encode()] == b"0"
    assert day[f"{CAMPAIGN}:s".encode()] == b"5000000"
    budget = (await on.read_budgets(now))[CAMPAIGN]
    assert (budget.reserved, budget.spent, budget.daily_spent) == (0, 5_000_000, 5_000_000)


async def test_an_accept_near_the_largest_budget_counts_to_the_micro_cent(
    redis_client: Redis,
) -> None:
    """docs/decisions.md, "Money": budgets go up to 9e9 cents, counted exactly in micro-cents:
    an accept's reserved and spent, and the figures it answers with, digit for digit even
    near 2^53."""
    hot, camp = await _hot(redis_client, "9000000000")
    spent_before = 8_999_999_990_000_001
    await redis_client.hset(budget_key(camp.shard), f"{CAMPAIGN}:s", str(spent_before))
    now = datetime.now(UTC)
    made = await _core_offer(hot, camp, now)
    assert isinstance(made, Reserved)
    answer = await hot.respond(made.offer_id, PUB, "accept", now, {}, 2_499_999)
    assert isinstance(answer, Answered)
    reserved, spent = await redis_client.hmget(
        budget_key(camp.shard), [f"{CAMPAIGN}:r", f"{CAMPAIGN}:s"]
    )
    assert (reserved, spent) == (b"0", str(spent_before + 2_499_999).encode())
    assert answer.budget.spent == spent_before + 2_499_999


async def test_a_total_lowered_below_the_reservations_is_never_overspent(
    redis_client: Redis,
) -> None:
    """docs/contract.md#4-offers-reservations-and-outcomes: a campaign never spends more than its
    budget. Offers reserved under a total of 10 cents, then the operator lowers it to 6 (an import
    syncs the new total): the accepts and impressions that fit still settle, the rest are refused
    (the Core offer is withdrawn, 404; the impression is recorded but not billed), and spent stays
    within 6."""
    hot, camp = await _hot(redis_client, "10")
    now = datetime.now(UTC)

    async def offer(channel: str) -> str:
        fields = {"channel": channel, "publisher": PUB, "creative": "c"}
        made = await hot.reserve(
            camp, 2_500_000, SCREEN_MOVING, now, now + timedelta(minutes=5), fields
        )
        assert isinstance(made, Reserved)
        return made.offer_id

    core = [await offer("core") for _ in range(2)]
    rtb = [await offer("openrtb") for _ in range(2)]
    lowered = await _hot(redis_client, "6")  # the import's sync of the new total
    assert lowered[1].budget_micros == 6 * 1_000_000
    results = [
        await hot.respond(core[0], PUB, "accept", now, {}, accepted_micros=2_500_000),
        await hot.track(rtb[0], "impression", now, {}, {}),
        await hot.respond(core[1], PUB, "accept", now, {}, accepted_micros=2_500_000),
        await hot.track(rtb[1], "impression", now, {}, {}),
    ]
    assert isinstance(results[0], Answered)
    assert results[1] == Tracked("billed", "openrtb")
    assert results[2] == NotAnswered("not_found", "over_total")
    assert results[3] == Tracked("recorded", "openrtb")
    budget = (await hot.read_budgets(now))[CAMPAIGN]
    assert budget.spent == 5_000_000
    assert budget.spent <= budget.total == 6_000_000
    assert budget.reserved == 2_500_000  # the unbilled bid, until its loss notice or expiry
    withdrawn = await hot.offer(core[1])
    assert withdrawn is not None
    assert withdrawn["status"] == "expired"


async def test_a_loss_notice_after_the_bids_expiry_expires_it(redis_client: Redis) -> None:
    """A bid whose expiry passed is expired, not lost, whether the notice or the sweeper
    comes first (as a Core answer past expiry expires its offer); its price is released once."""
    hot, camp = await _hot(redis_client, "10")
    now = datetime.now(UTC)
    fields = {"channel": "openrtb", "publisher": PUB, "creative": "c"}
    made = [
        await hot.reserve(camp, 2_500_000, SCREEN_MOVING, now, now + timedelta(seconds=1), fields)
        for _ in range(3)
    ]
    assert all(isinstance(m, Reserved) for m in made)
    early, late, swept = (m.offer_id for m in made if isinstance(m, Reserved))
    assert await hot.loss(early, now, {"reason": "102"}) == ("first", 1)
    assert await hot.loss(late, now + timedelta(seconds=2), {"reason": "102"}) == ("first", 1)
    # the sweeper: `swept` only
    assert await hot.expire_due(now + timedelta(seconds=2)) == {"openrtb": 1}
    assert await hot.loss(swept, now + timedelta(seconds=3), {"reason": "102"}) == ("first", 1)
    statuses = [
        (await hot.offer(offer_id) or {}).get("status") for offer_id in (early, late, swept)
    ]
    assert statuses == ["lost", "expired", "expired"]
    budget = (await hot.read_budgets(now))[CAMPAIGN]
    assert (budget.reserved, budget.spent) == (0, 0)  # each price released exactly once


async def test_totals_follow_the_inventory_version_whatever_order_they_reach_redis(
    redis_client: Redis,
) -> None:
    """Budget totals reach Redis from top-ups (at once) and from every worker's inventory sync,
    in any order; the total of the newest inventory version stays. A sync that read before a
    top-up does not write the old total back, and a top-up's write that arrives late (after a
    newer top-up, or an import that lowered the budget) does not stay."""
    hot, camp = await _hot(redis_client, "25")  # synced at version 0

    async def total() -> int:
        return (await hot.read_budgets(datetime.now(UTC)))[CAMPAIGN].total

    # Two top-ups commit at versions 11 (40) and 12 (55); their writes arrive the other way.
    assert await hot.set_budget_total(CAMPAIGN, camp.shard, 55_000_000, 12) is True
    assert await hot.set_budget_total(CAMPAIGN, camp.shard, 40_000_000, 11) is False
    assert await total() == 55_000_000
    # A worker's sync of what it read at version 10 leaves the newer top-up alone.
    assert await hot.sync_inventory({CAMPAIGN: (camp.shard, 25_000_000)}, {}, version=10) == 1
    assert await total() == 55_000_000
    # An import at version 13 lowers it; a top-up of version 12 arriving after is dropped.
    assert await hot.sync_inventory({CAMPAIGN: (camp.shard, 30_000_000)}, {}, version=13) == 0
    assert await hot.set_budget_total(CAMPAIGN, camp.shard, 55_000_000, 12) is False
    assert await total() == 30_000_000
    # force: every total written, whatever the stamps (Postgres restored to an older version).
    await hot.set_budget_total(CAMPAIGN, camp.shard, 70_000_000, 99)
    assert await hot.sync_inventory({CAMPAIGN: (camp.shard, 30_000_000)}, {}, version=14) == 1
    assert (
        await hot.sync_inventory({CAMPAIGN: (camp.shard, 30_000_000)}, {}, version=14, force=True)
        == 0
    )
    assert await total() == 30_000_000


async def test_an_offer_that_ends_without_a_play_gives_its_frequency_count_back(
    redis_client: Redis,
) -> None:
    """The cap limits plays per screen and clock hour: an open or accepted (or billed) offer
    counts, one rejected, expired or lost gives its count back within the hour, so the cap is
    never exceeded and a rejection does not use a play up."""
    hot, camp = await _hot(redis_client, max_plays_per_screen_per_hour=1)
    # the middle of a clock hour, so that expiring a minute later stays within it
    now = datetime.now(UTC).replace(minute=30, second=0, microsecond=0)

    async def offer(channel: str) -> Reserved | Refused:
        fields = {"channel": channel, "publisher": PUB, "creative": "c"}
        return await hot.reserve(
            camp, 2_500_000, SCREEN_MOVING, now, now + timedelta(seconds=30), fields
        )

    async def count() -> int:
        hour = freq_key(camp.shard, now.strftime("%Y%m%d%H"))
        return int(await redis_client.hget(hour, f"{CAMPAIGN}:{SCREEN_MOVING}") or 0)

    first = await offer("core")
    assert isinstance(first, Reserved)
    assert isinstance(await offer("core"), Refused)  # the one play of the hour is taken
    assert isinstance(await hot.respond(first.offer_id, PUB, "reject", now, {}), Answered)
    assert await count() == 0

    second = await offer("core")  # expired unanswered: given back
    assert isinstance(second, Reserved)
    assert await hot.expire_due(now + timedelta(minutes=1)) == {"core": 1}
    assert await count() == 0

    bid = await offer("openrtb")  # lost: given back
    assert isinstance(bid, Reserved)
    assert (await hot.loss(bid.offer_id, now, {}))[0] == "first"
    assert await count() == 0

    billed = await offer("openrtb")  # played: kept, and a loss after billing changes nothing
    assert isinstance(billed, Reserved)
    assert (await hot.track(billed.offer_id, "impression", now, {}, {})).status == "billed"
    assert (await hot.loss(billed.offer_id, now, {}))[0] == "first"
    assert await count() == 1
    assert isinstance(await offer("core"), Refused)


async def test_an_accepted_offer_keeps_its_play_and_a_past_hour_is_left_alone(
    redis_client: Redis,
) -> None:
    hot, camp = await _hot(redis_client, max_plays_per_screen_per_hour=2)
    now = datetime.now(UTC).replace(minute=59, second=50, microsecond=0)
    fields = {"channel": "core", "publisher": PUB, "creative": "c"}
    made = [
        await hot.reserve(camp, 2_500_000, SCREEN_MOVING, now, now + timedelta(minutes=5), fields)
        for _ in range(2)
    ]
    assert all(isinstance(m, Reserved) for m in made)
    accepted, late = (m.offer_id for m in made if isinstance(m, Reserved))
    hour = freq_key(camp.shard, now.strftime("%Y%m%d%H"))
    field = f"{CAMPAIGN}:{SCREEN_MOVING}"
    assert isinstance(
        await hot.respond(accepted, PUB, "accept", now, {}, accepted_micros=2_500_000), Answered
    )
    # Rejected in the next clock hour: the past hour's count is not touched (its cap is over)
    # and the new hour's is not lowered below what it counted.
    next_hour = now + timedelta(seconds=20)
    assert isinstance(await hot.respond(late, PUB, "reject", next_hour, {}), Answered)
    assert int(await redis_client.hget(hour, field) or 0) == 2
    following = freq_key(camp.shard, next_hour.strftime("%Y%m%d%H"))
    assert await redis_client.hget(following, field) is None


async def test_an_answer_returns_the_budget_as_it_stands_after_it(redis_client: Redis) -> None:
    """The figures an answer hands the worker's budget view (total, reserved, spent) are the
    campaign's after the answer: an accept below the price moves the price out of `reserved`
    and the accepted amount into `spent`, a reject only releases."""
    hot, camp = await _hot(redis_client, "100")
    now = datetime.now(UTC)
    fields = {"channel": "core", "publisher": PUB, "creative": "c"}
    made = []
    for _ in range(3):
        result = await hot.reserve(
            camp, 2_500_000, SCREEN_MOVING, now, now + timedelta(minutes=5), fields
        )
        assert isinstance(result, Reserved)
        made.append(result.offer_id)
    accepted = await hot.respond(made[0], PUB, "accept", now, {}, accepted_micros=2_000_000)
    assert isinstance(accepted, Answered)
    assert (accepted.budget.total, accepted.budget.reserved, accepted.budget.spent) == (
        100_000_000,
        5_000_000,
        2_000_000,
    )
    rejected = await hot.respond(made[1], PUB, "reject", now, {})
    assert isinstance(rejected, Answered)
    assert (rejected.budget.reserved, rejected.budget.spent) == (2_500_000, 2_000_000)
    stored = (await hot.read_budgets(now))[CAMPAIGN]
    assert (stored.total, stored.reserved, stored.spent) == (
        rejected.budget.total,
        rejected.budget.reserved,
        rejected.budget.spent,
    )


async def test_redis_keeps_the_hot_hashes_as_hash_tables_or_the_worker_says_so(
    redis_client: Redis,
) -> None:
    """deploy/README.md, "Redis": a shard's budget hash past HASH_MAX_LISTPACK_ENTRIES fields is
    a hash table on the project's own servers, and a Redis keeping larger listpacks (Valkey's
    default of 512) is named in a warning with the setting to use."""
    setting = "hash-max-listpack-entries"
    before = str((await redis_client.config_get(setting))[setting])
    try:
        await redis_client.config_set(setting, HASH_MAX_LISTPACK_ENTRIES)
        assert await listpack_warning(redis_client) is None
        shard_hash = budget_key(0)
        fields: dict[Any, Any] = {
            f"campaign-{n}:t": str(n) for n in range(HASH_MAX_LISTPACK_ENTRIES + 1)
        }
        await redis_client.hset(shard_hash, mapping=fields)
        assert await redis_client.object("encoding", shard_hash) == b"hashtable"

        await redis_client.config_set(setting, 512)
        warning = await listpack_warning(redis_client)
        assert warning is not None
        assert "512" in warning
        assert str(HASH_MAX_LISTPACK_ENTRIES) in warning
    finally:
        await redis_client.config_set(setting, before)


async def test_a_worker_names_listpacked_hot_hashes_in_its_log_when_it_starts(
    redis_client: Redis, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """The warning reaches the operator: a worker started on a Redis with Valkey's default
    listpack limit logs it once, beside its start; on the project's setting it logs nothing."""
    setting = "hash-max-listpack-entries"
    before = str((await redis_client.config_get(setting))[setting])

    async def warnings_of_a_start() -> list[str]:
        rt = Runtime(settings)
        with caplog.at_level(logging.WARNING, logger="bidder.runtime"):
            caplog.clear()
            await rt.start()
            try:
                checks = [t for t in rt.loops.tasks if "_check_redis_settings" in repr(t)]
                assert len(checks) == 1
                await asyncio.wait_for(checks[0], 5)
            finally:
                await rt.stop()
        return [r.getMessage() for r in caplog.records if setting in r.getMessage()]

    try:
        await redis_client.config_set(setting, 512)
        assert len(await warnings_of_a_start()) == 1
        await redis_client.config_set(setting, HASH_MAX_LISTPACK_ENTRIES)
        assert await warnings_of_a_start() == []
    finally:
        await redis_client.config_set(setting, before)
