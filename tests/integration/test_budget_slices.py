"""Budget slices (BUDGET_SLICES, docs/architecture.md "Budget slices") against real Redis, one
server or a cluster (`--redis=cluster`): the sum of every slice's reserved and spent never
passes the campaign's total, however many screens reserve at once; the whole budget stays
spendable (down to less than one price); the frequency cap stays exact; a move cut between its
two steps overspends nothing and reconcile gives the stranded amount back."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import asyncpg
import pytest
from redis.asyncio import Redis

from bidder.runtime import Budgets
from matching.snapshot import SHARDS, CampaignInfo, build_snapshot
from store.hot import (
    Answered,
    HotState,
    OfferForm,
    Refused,
    Reserved,
    budget_key,
    day_key,
    day_of,
    script_source,
    slice_index,
    slice_shards,
    sum_parts,
)
from store.pipelined import HotConnection
from store.pipelined_cluster import open_pipelined
from store.reconcile import reconcile, summarize
from tests.support.factories import (
    CAMPAIGN,
    CREATIVE_VIDEO,
    PUB,
    basic_document,
    campaign,
    screen,
    seed,
    uid,
)
from tests.support.records import billing_payload, tracking_payload, write_queued
from tests.support.servers import ServerUrls, redis_mode

SCREENS = [uid(100 + n, 3) for n in range(40)]


def _document(budget_cents: str, **campaign_fields: Any) -> Any:
    extra = [screen(id=s, external_id=f"ext-{n}", name=f"S{n}") for n, s in enumerate(SCREENS)]
    doc = basic_document(
        campaigns=[campaign(budget_cents=Decimal(budget_cents), **campaign_fields)]
    )
    return basic_document(
        campaigns=doc.campaigns,
        screens=[*doc.screens, *extra],
    )


async def _hot(
    client: Redis,
    slices: int,
    budget_cents: str,
    fast: HotConnection | None = None,
    form: OfferForm = "fields",
    counted: bool = True,
    **campaign_fields: Any,
) -> tuple[HotState, CampaignInfo, Any]:
    doc = _document(budget_cents, **campaign_fields)
    snap = build_snapshot(doc)
    hot = HotState(
        client, fast=fast, slices=slices, offer_form=form, count_day_reservations=counted
    )
    await hot.sync_inventory(
        {c.id: (c.shard, c.budget_micros) for c in snap.campaigns.values()}, snap.billing_codes
    )
    return hot, snap.campaigns[CAMPAIGN], doc


def _fields() -> dict[str, str]:
    return {"channel": "core", "publisher": PUB, "creative": CREATIVE_VIDEO}


async def _reserve(
    hot: HotState, camp: CampaignInfo, price: int, screen_id: str, ttl: float = 300
) -> Reserved | Refused:
    now = datetime.now(UTC)
    return await hot.reserve(camp, price, screen_id, now, now + timedelta(seconds=ttl), _fields())


@dataclass
class Slices:
    """The campaign's budget fields on every shard, read straight from Redis."""

    total: int
    granted: int
    parts: dict[int, tuple[int, int, int | None]]  # shard -> (reserved, spent, allowance)

    @property
    def reserved(self) -> int:
        return sum(r for r, _, _ in self.parts.values())

    @property
    def spent(self) -> int:
        return sum(s for _, s, _ in self.parts.values())

    @property
    def allowances(self) -> int:
        return sum(a or 0 for _, _, a in self.parts.values())


async def _slices(redis: Redis, camp: CampaignInfo) -> Slices:
    names = [f"{camp.id}:{p}" for p in ("t", "g", "r", "s", "a")]
    total = granted = 0
    parts = {}
    for shard in range(SHARDS):
        t, g, r, s, a = await redis.hmget(budget_key(shard), names)
        if shard == camp.shard:
            total, granted = int(t or 0), int(g or 0)
        if r is not None or s is not None or a is not None or shard == camp.shard:
            parts[shard] = (int(r or 0), int(s or 0), None if a is None else int(a))
    return Slices(total, granted, parts)


def _assert_never_over(state: Slices, home: int) -> None:
    """Each slice within what it holds, the allowances within what the home granted, and so
    the campaign within its total."""
    for shard, (reserved, spent, allowance) in state.parts.items():
        assert reserved >= 0, state
        assert spent >= 0, state
        if shard == home:
            assert reserved + spent <= state.total - state.granted, state
        else:
            assert reserved + spent <= (allowance or 0), state
    assert state.allowances <= state.granted, state
    assert state.reserved + state.spent <= state.total, state


async def _drain_budget(hot: HotState, camp: CampaignInfo, price: int) -> int:
    """Reserve and accept at `price` from every screen at once until every screen is refused,
    then one screen after another (near the end, requests at once can each find the last cents
    in another slice, and are refused; the next request gathers them), until every screen is
    refused one by one: how many plays that bought."""
    bought = 0

    async def buy(screen_id: str) -> bool:
        made = await _reserve(hot, camp, price, screen_id)
        if isinstance(made, Refused):
            assert made.reason == "budget", made
            return False
        answered = await hot.respond(
            made.offer_id, PUB, "accept", datetime.now(UTC), billing_payload(price), price
        )
        assert isinstance(answered, Answered), answered
        return True

    while True:
        while made := sum(await asyncio.gather(*[buy(s) for s in SCREENS])):
            bought += made
        one_by_one = 0
        for screen_id in SCREENS:
            one_by_one += await buy(screen_id)
        if not one_by_one:
            return bought
        bought += one_by_one


async def _play_until_refused(
    hot: HotState, camp: CampaignInfo, screen_id: str, price: int, accepted: int
) -> tuple[int, Refused]:
    """Reserve at `price` on one screen and accept at `accepted`, again and again, until the
    reservation is refused: how many plays that bought, and the refusal."""
    plays = 0
    while isinstance(made := await _reserve(hot, camp, price, screen_id), Reserved):
        plays += 1
        await hot.respond(
            made.offer_id, PUB, "accept", datetime.now(UTC), billing_payload(accepted), accepted
        )
    return plays, made


@pytest.mark.parametrize("slices", [4, 16])
async def test_concurrent_reservations_on_many_screens_never_overspend_and_spend_down(
    redis_client: Redis, slices: int
) -> None:
    hot, camp, _ = await _hot(redis_client, slices, "1000")
    total = camp.budget_micros
    rng = random.Random(slices)
    open_offers: list[str] = []

    async def traffic(seed: int) -> None:
        local = random.Random(seed)
        for _ in range(12):
            price = local.randrange(1_000_000, 3_000_001)
            made = await _reserve(hot, camp, price, local.choice(SCREENS))
            if not isinstance(made, Reserved):
                assert made.reason == "budget", made
                continue
            roll = local.random()
            now = datetime.now(UTC)
            if roll < 0.4:
                accepted = local.randrange(price // 2, price + 1)
                answered = await hot.respond(
                    made.offer_id, PUB, "accept", now, billing_payload(accepted), accepted
                )
                assert isinstance(answered, Answered)
            elif roll < 0.7:
                await hot.respond(made.offer_id, PUB, "reject", now, {"rejection_reason": "x"})
            else:
                open_offers.append(made.offer_id)

    await asyncio.gather(*[traffic(rng.randrange(10**9)) for _ in range(60)])
    state = await _slices(redis_client, camp)
    _assert_never_over(state, camp.shard)
    assert len(state.parts) > 1  # the traffic did spread over slices
    assert all(shard in slice_shards(camp.shard, slices) for shard in state.parts)
    budgets = await hot.read_budgets(datetime.now(UTC))
    assert budgets[CAMPAIGN].reserved == state.reserved
    assert budgets[CAMPAIGN].spent == state.spent
    assert budgets[CAMPAIGN].total == total

    # Release what is still open, then spend the rest at 2 cents a play from every screen:
    # everything but less than one price gets spent.
    for offer_id in open_offers:
        await hot.respond(offer_id, PUB, "reject", datetime.now(UTC), {"rejection_reason": "x"})
    await _drain_budget(hot, camp, 2_000_000)
    state = await _slices(redis_client, camp)
    _assert_never_over(state, camp.shard)
    assert state.reserved == 0
    assert total - state.spent < 2_000_000, state


async def test_workers_that_disagree_on_the_slice_count_never_overspend(
    redis_client: Redis,
) -> None:
    # During a change of BUDGET_SLICES, workers with 1, 4 and 16 slices serve one campaign.
    base, camp, _ = await _hot(redis_client, 16, "300")
    workers = [base, HotState(redis_client, slices=4), HotState(redis_client, slices=1)]
    rng = random.Random(5)

    async def traffic(seed: int) -> None:
        local = random.Random(seed)
        for _ in range(10):
            hot = local.choice(workers)
            made = await _reserve(
                hot, camp, local.randrange(1_000_000, 3_000_001), local.choice(SCREENS)
            )
            if isinstance(made, Reserved) and local.random() < 0.6:  # accepted at 1 cent
                payload = billing_payload(1_000_000)
                await hot.respond(
                    made.offer_id, PUB, "accept", datetime.now(UTC), payload, 1_000_000
                )

    await asyncio.gather(*[traffic(rng.randrange(10**9)) for _ in range(40)])
    state = await _slices(redis_client, camp)
    _assert_never_over(state, camp.shard)
    for hot in workers:  # whichever worker drains it, the whole budget gets spent
        await _drain_budget(hot, camp, 1_000_000)
    state = await _slices(redis_client, camp)
    _assert_never_over(state, camp.shard)
    assert camp.budget_micros - state.spent - state.reserved < 1_000_000, state


async def test_lowering_budget_slices_to_one_strands_no_allowance(redis_client: Redis) -> None:
    # Slices hold allowance when the operator sets BUDGET_SLICES back to 1: a worker without
    # slices takes it home when the home runs short, so the whole budget is still spent.
    sliced, camp, _ = await _hot(redis_client, 4, "40")
    for screen_id in SCREENS[:12]:  # grants land on several slices; some of it is spent
        made = await _reserve(sliced, camp, 1_000_000, screen_id)
        assert isinstance(made, Reserved), made
        await sliced.respond(
            made.offer_id, PUB, "accept", datetime.now(UTC), billing_payload(1_000_000), 1_000_000
        )
    before = await _slices(redis_client, camp)
    assert before.granted > 0  # money out on the other slices
    unsliced = HotState(redis_client, slices=1)
    plays, refused = await _play_until_refused(unsliced, camp, SCREENS[0], 1_000_000, 1_000_000)
    assert refused.reason == "budget"
    state = await _slices(redis_client, camp)
    _assert_never_over(state, camp.shard)
    assert state.spent == 40_000_000, state  # 12 plays on the slices, the rest at the home
    assert plays == 28


async def test_a_lowered_total_never_takes_back_what_a_slice_spent(redis_client: Redis) -> None:
    # Every slice has spent its allowance when the total is lowered below what was spent;
    # workers shrink at once. What the slices spent stays counted against the total, so a
    # later top-up back to the first total buys nothing more than that total.
    hot, camp, _ = await _hot(redis_client, 4, "40")
    await _drain_budget(hot, camp, 1_000_000)
    spent = await _slices(redis_client, camp)
    assert spent.spent == 40_000_000
    await hot.sync_inventory({CAMPAIGN: (camp.shard, 30_000_000)}, {}, version=98)
    await asyncio.gather(*[hot.shrink(CAMPAIGN) for _ in range(4)])
    lowered = await _slices(redis_client, camp)
    for shard, (_, used, allowance) in lowered.parts.items():
        if shard != camp.shard:
            assert used <= (allowance or 0), lowered  # its spending still backed
    await hot.sync_inventory({CAMPAIGN: (camp.shard, 40_000_000)}, {}, version=99)
    assert await _drain_budget(hot, camp, 1_000_000) == 0
    assert (await _slices(redis_client, camp)).spent == 40_000_000


@pytest.fixture
async def fast(servers: ServerUrls) -> AsyncIterator[HotConnection]:
    """The hot path's pipelined connection (the scripts, the grants and the take-backs' reads
    run on it in the service)."""
    connection = open_pipelined(servers.redis_url, 2.0, redis_mode(servers))
    yield connection
    await connection.aclose()


@pytest.mark.parametrize("pipelined", [False, True])
async def test_the_last_cents_spread_over_idle_slices_are_still_spent(
    redis_client: Redis, fast: HotConnection, pipelined: bool
) -> None:
    # 10 cents: each of 16 slices gets a grant for the price of one play, then the budget's
    # remainder sits in slices no screen asks for any more; one screen then buys the rest.
    hot, camp, _ = await _hot(redis_client, 16, "10", fast if pipelined else None)
    bought = 0
    for screen_id in SCREENS:
        made = await _reserve(hot, camp, 300_000, screen_id)
        if isinstance(made, Reserved):
            await hot.respond(made.offer_id, PUB, "reject", datetime.now(UTC), {})
            bought += 1
    state = await _slices(redis_client, camp)
    assert sum(1 for _, _, a in state.parts.values() if a) > 1  # money sits in several slices
    plays, refused = await _play_until_refused(hot, camp, SCREENS[0], 1_000_000, 900_000)
    assert refused.reason == "budget"
    state = await _slices(redis_client, camp)
    _assert_never_over(state, camp.shard)
    assert camp.budget_micros - state.spent < 1_000_000, state
    assert plays == 11  # 10 cents at 0.9 cents a play, each reserving 1 cent


async def test_the_frequency_cap_stays_exact_per_screen(redis_client: Redis) -> None:
    hot, camp, _ = await _hot(redis_client, 16, "100000", max_plays_per_screen_per_hour=2)
    attempts = [s for s in SCREENS for _ in range(6)]
    random.Random(3).shuffle(attempts)
    calls = asyncio.Semaphore(48)  # within the client's connections

    async def reserve(screen_id: str) -> Reserved | Refused:
        async with calls:
            return await _reserve(hot, camp, 2_500_000, screen_id)

    results = await asyncio.gather(*[reserve(s) for s in attempts])
    per_screen: dict[str, list[Reserved]] = {}
    for screen_id, result in zip(attempts, results, strict=True):
        if isinstance(result, Reserved):
            per_screen.setdefault(screen_id, []).append(result)
        else:
            assert result.reason == "frequency_cap", result
    assert {s: len(made) for s, made in per_screen.items()} == {s: 2 for s in SCREENS}
    for screen_id, made in per_screen.items():  # one screen, one slice: its cap's one counter
        expected = slice_shards(camp.shard, 16)[slice_index(screen_id, 16)]
        assert {r.shard for r in made} == {expected}


async def _daily(redis: Redis, camp: CampaignInfo) -> tuple[int, int, int]:
    """Today's (open reservations + today's spending over every slice, granted by the home,
    daily allowances): what a daily limit covers (docs/decisions.md, "Daily budgets")."""
    today = day_of(datetime.now(UTC))
    used = granted = allowances = 0
    for shard in range(SHARDS):
        s, dg, da = await redis.hmget(
            day_key(shard, today), [f"{camp.id}:{p}" for p in ("s", "dg", "da")]
        )
        r = await redis.hget(budget_key(shard), f"{camp.id}:r")
        used += int(r or 0) + int(s or 0)
        granted += int(dg or 0)
        allowances += int(da or 0)
    return used, granted, allowances


@pytest.mark.parametrize(
    ("form", "counted", "pipelined"),
    [("fields", True, False), ("lean", False, False), ("lean", False, True)],
)
async def test_a_daily_limit_is_never_passed_over_the_slices_and_is_spent_down(
    redis_client: Redis, fast: HotConnection, form: OfferForm, counted: bool, pipelined: bool
) -> None:
    # 10 cents a day at 2.5 cents a play: 4 plays today, whichever screens ask, at once.
    hot, camp, _ = await _hot(
        redis_client,
        16,
        "1000",
        fast if pipelined else None,
        form=form,
        counted=counted,
        daily_budget_cents=Decimal(10),
    )
    # Two plays first, each on a slice other than the home, so that the plays are on several
    # slices whichever requests of the burst below reach Redis first (the home's own screens
    # need no grant and would otherwise win every race on an idle machine).
    shards = slice_shards(camp.shard, 16)
    elsewhere: dict[int, str] = {}
    for screen_id in SCREENS:
        shard = shards[slice_index(screen_id, 16)]
        if shard != camp.shard:
            elsewhere.setdefault(shard, screen_id)
    first = [await _reserve(hot, camp, 2_500_000, s) for s in list(elsewhere.values())[:2]]
    assert all(isinstance(r, Reserved) for r in first), first
    calls = asyncio.Semaphore(48)

    async def reserve(screen_id: str) -> Reserved | Refused:
        async with calls:
            return await _reserve(hot, camp, 2_500_000, screen_id)

    results = first + await asyncio.gather(*[reserve(s) for s in SCREENS * 3])
    made = [r for r in results if isinstance(r, Reserved)]
    assert len(made) == 4
    assert {r.reason for r in results if isinstance(r, Refused)} == {"daily_budget"}
    used, granted, allowances = await _daily(redis_client, camp)
    assert used == 10_000_000
    assert allowances <= granted
    assert len({r.shard for r in made}) > 1  # the plays were made on several slices
    # Two rejected: their 5 cents of today come back, wherever they now sit.
    for r in made[:2]:
        await hot.respond(r.offer_id, PUB, "reject", datetime.now(UTC), {})
    again = [await _reserve(hot, camp, 2_500_000, s) for s in SCREENS]
    assert sum(isinstance(r, Reserved) for r in again) == 2
    used, granted, allowances = await _daily(redis_client, camp)
    assert used == 10_000_000
    assert allowances <= granted


def _script(redis: Redis, name: str) -> Any:
    return redis.register_script(script_source(name))


async def test_a_grant_never_credited_overspends_nothing_and_reconcile_gives_it_back(
    redis_client: Redis, migrated: str, pool: asyncpg.Pool
) -> None:
    hot, camp, doc = await _hot(redis_client, 16, "20")
    await seed(migrated, doc)
    # A worker took a grant from the home (its first step) and died before crediting it.
    grant = _script(redis_client, "grant.lua")
    granted, *_ = await grant(
        keys=[budget_key(camp.shard)], args=[CAMPAIGN, 15_000_000, 16, 10_000, 1_000_000]
    )
    assert int(granted) == 15_000_000
    state = await _slices(redis_client, camp)
    assert (state.granted, state.allowances) == (15_000_000, 0)
    # Only the 5 cents left at the home can be spent: the stranded 15 are nobody's.
    await _drain_budget(hot, camp, 1_000_000)
    state = await _slices(redis_client, camp)
    _assert_never_over(state, camp.shard)
    assert state.spent == 5_000_000
    assert state.granted - state.allowances == 15_000_000  # the stranded chunk

    await write_queued(pool, redis_client)
    async with pool.acquire() as conn:
        found = await reconcile(redis_client, conn, settle_seconds=0)
        assert list(found.differing) == [CAMPAIGN]
        assert any("stranded" in d for d in found.differing[CAMPAIGN])
        # Moved within the quiet time: a credit could still be on its way, nothing changes.
        waiting = await reconcile(redis_client, conn, repair=True, settle_seconds=0)
        assert waiting.waiting == [CAMPAIGN]
        assert (await _slices(redis_client, camp)).granted == state.granted
        await asyncio.sleep(0.05)
        repaired = await reconcile(redis_client, conn, repair=True, settle_seconds=0, quiet_ms=20)
        assert repaired.repaired == [CAMPAIGN]
        again = await reconcile(redis_client, conn, settle_seconds=0)
        assert again.differing == {}
    state = await _slices(redis_client, camp)
    assert state.granted == state.allowances
    await _drain_budget(hot, camp, 1_000_000)  # the 15 cents are spendable again
    assert (await _slices(redis_client, camp)).spent == 20_000_000


@pytest.mark.parametrize("counted", [True, False])
async def test_a_slice_holding_yesterdays_open_offers_is_granted_enough_after_midnight(
    redis_client: Redis, counted: bool
) -> None:
    """Past midnight a slice's open offers of yesterday count against its allowance of today
    (docs/decisions.md, "Daily budgets"): the grant it asks the home for covers them and the
    price, so the play that fits today's limit is made."""
    hot, camp, _ = await _hot(
        redis_client, 16, "1000", counted=counted, daily_budget_cents=Decimal(10)
    )
    shards = slice_shards(camp.shard, 16)
    screen_id = next(s for s in SCREENS if shards[slice_index(s, 16)] != camp.shard)
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)

    async def offer(at: datetime) -> Reserved | Refused:
        return await hot.reserve(
            camp, 2_500_000, screen_id, at, at + timedelta(minutes=5), _fields()
        )

    late = midnight - timedelta(seconds=60)
    yesterdays = [await offer(late), await offer(late)]
    assert all(isinstance(r, Reserved) for r in yesterdays), yesterdays
    # Today: 5 cents of yesterday's offers open, 2.5 more fit the 10 cents.
    made = await offer(midnight + timedelta(seconds=30))
    assert isinstance(made, Reserved), made
    assert isinstance(await offer(midnight + timedelta(seconds=31)), Reserved)
    refused = await offer(midnight + timedelta(seconds=32))
    assert isinstance(refused, Refused)
    assert refused.reason in ("daily_budget", "slice_daily")


async def test_the_homes_open_reservations_count_against_the_day_it_grants(
    redis_client: Redis,
) -> None:
    """grant_daily.lua grants of today's limit only what the home's open reservations (its
    budget hash's, of any day) and today's spending leave: here reservations left out of the
    day hash (COUNT_DAY_RESERVATIONS off) hold 7.5 of the 10 cents."""
    _, camp, _ = await _hot(redis_client, 16, "1000", daily_budget_cents=Decimal(10))
    on_home = HotState(redis_client, count_day_reservations=False)  # one slice: the home's
    for screen_id in SCREENS[:3]:
        assert isinstance(await _reserve(on_home, camp, 2_500_000, screen_id), Reserved)
    today = day_of(datetime.now(UTC))
    grant_daily = _script(redis_client, "grant_daily.lua")
    keys = [day_key(camp.shard, today), budget_key(camp.shard)]

    async def grant(need: int) -> int:
        return int(await grant_daily(keys=keys, args=[CAMPAIGN, need, 16, 10_000_000, 2_500_000]))

    assert await grant(3_000_000) == 0  # 2.5 cents free today
    assert await grant(2_500_000) == 2_500_000
    assert await grant(2_500_000) == 0


async def test_a_slices_open_reservations_are_not_taken_back_with_its_daily_allowance(
    redis_client: Redis,
) -> None:
    """take.lua with `da` takes back what today's allowance has free: less the slice's open
    reservations (its budget hash's) and today's spending."""
    hot, camp, _ = await _hot(
        redis_client, 16, "1000", counted=False, daily_budget_cents=Decimal(100)
    )
    shards = slice_shards(camp.shard, 16)
    screen_id = next(s for s in SCREENS if shards[slice_index(s, 16)] != camp.shard)
    shard = shards[slice_index(screen_id, 16)]
    made = await _reserve(hot, camp, 2_500_000, screen_id)
    assert isinstance(made, Reserved)
    assert made.shard == shard
    today = day_of(datetime.now(UTC))
    allowance = int(await redis_client.hget(day_key(shard, today), f"{CAMPAIGN}:da") or 0)
    assert allowance >= 2_500_000  # granted for the play, maybe more
    take = _script(redis_client, "take.lua")
    taken, _ = await take(
        keys=[day_key(shard, today), budget_key(shard)],
        args=[CAMPAIGN, 100_000_000, "0", 10_000, "da"],
    )
    assert int(taken) == allowance - 2_500_000
    left = await redis_client.hget(day_key(shard, today), f"{CAMPAIGN}:da")
    assert int(left or 0) == 2_500_000  # what backs the open offer stays with the slice


async def test_a_credit_after_its_deadline_changes_nothing(redis_client: Redis) -> None:
    _, camp, _ = await _hot(redis_client, 16, "20")
    credit = _script(redis_client, "credit.lua")
    other = slice_shards(camp.shard, 16)[3]
    assert int(await credit(keys=[budget_key(other)], args=[CAMPAIGN, 5_000_000, 1, "a"])) == 0
    assert (await _slices(redis_client, camp)).allowances == 0


async def test_a_lowered_total_takes_allowances_back_and_accepts_stop_at_it(
    redis_client: Redis,
) -> None:
    hot, camp, _ = await _hot(redis_client, 4, "100")
    made = [await _reserve(hot, camp, 2_500_000, s) for s in SCREENS[:30]]
    offers = [r.offer_id for r in made if isinstance(r, Reserved)]
    assert len(offers) == 30  # 75 cents reserved over the slices
    # The operator lowers the total to 20 cents (an inventory reload of a newer version).
    await hot.sync_inventory({CAMPAIGN: (camp.shard, 20_000_000)}, {}, version=99)
    state = await _slices(redis_client, camp)
    assert state.granted == state.allowances
    assert state.total - state.granted >= 0
    accepted = 0
    for offer_id in offers:
        answered = await hot.respond(
            offer_id, PUB, "accept", datetime.now(UTC), billing_payload(2_500_000), 2_500_000
        )
        accepted += isinstance(answered, Answered)
    state = await _slices(redis_client, camp)
    assert state.spent <= 20_000_000
    assert state.spent == accepted * 2_500_000
    assert accepted >= 1


async def test_the_budget_view_sums_the_slices(redis_client: Redis) -> None:
    hot, camp, _ = await _hot(redis_client, 16, "1000")
    view = Budgets()
    for shard in range(SHARDS):
        await view.refresh(hot, shard)
    made = [await _reserve(hot, camp, 2_000_000, s) for s in SCREENS]
    for result in made:
        assert isinstance(result, Reserved)
        view.note(CAMPAIGN, result.budget, result.shard)
    truth = (await hot.read_budgets(datetime.now(UTC)))[CAMPAIGN]
    assert truth.reserved == 40 * 2_000_000
    seen = view.figures[CAMPAIGN]  # each answer updated its slice's part (today's: at refresh)
    assert (seen.total, seen.reserved, seen.spent) == (truth.total, truth.reserved, truth.spent)
    for shard in range(SHARDS):  # mostly the home parts only: the others stay as answered
        await view.refresh(hot, shard)
    seen = view.figures[CAMPAIGN]
    assert (seen.total, seen.reserved, seen.spent) == (truth.total, truth.reserved, truth.spent)
    for _ in range(8):  # within 8 passes every shard is read whole once
        for shard in range(SHARDS):
            await view.refresh(hot, shard)
    assert view.figures[CAMPAIGN] == truth
    parts = await hot.read_campaign_parts(CAMPAIGN, datetime.now(UTC))
    assert sum_parts(camp.shard, parts) == truth
    assert len(parts) > 1


async def test_reconcile_agrees_after_mixed_traffic_on_slices_and_repairs_one(
    redis_client: Redis, pool: asyncpg.Pool, migrated: str
) -> None:
    hot, camp, doc = await _hot(redis_client, 16, "1000")
    await seed(migrated, doc)
    rng = random.Random(11)
    for _ in range(80):
        channel = rng.choice(("core", "openrtb"))
        fields = _fields() | {"channel": channel}
        if channel == "openrtb":
            fields |= {"auction_id": uuid.uuid4().hex, "imp_id": "1", "audience": "10"}
        now = datetime.now(UTC)
        ttl = timedelta(milliseconds=1) if rng.random() < 0.15 else timedelta(minutes=5)
        made = await hot.reserve(camp, 2_500_000, rng.choice(SCREENS), now, now + ttl, fields)
        assert isinstance(made, Reserved)
        roll = rng.random()
        if channel == "core" and roll < 0.4:
            await hot.respond(
                made.offer_id, PUB, "accept", now, billing_payload(2_000_000), 2_000_000
            )
        elif channel == "core" and roll < 0.6:
            await hot.respond(made.offer_id, PUB, "reject", now, {"rejection_reason": "full"})
        elif channel == "openrtb" and roll < 0.5:
            await hot.track(
                made.offer_id,
                "impression",
                now,
                tracking_payload("impression"),
                billing_payload(2_500_000),
            )
        elif channel == "openrtb" and roll < 0.7:
            await hot.loss(
                made.offer_id, now, {"reason": "102", "price": None, "aid": "a", "body": None}
            )
    await asyncio.sleep(0.01)
    await hot.expire_due(datetime.now(UTC))

    await write_queued(pool, redis_client)
    async with pool.acquire() as conn:
        report = await reconcile(redis_client, conn, settle_seconds=0)
        assert report.differing == {}
        check = report.campaigns[CAMPAIGN]
        assert len(check.slices) > 1
        shown = summarize(report)["campaigns"][CAMPAIGN]
        assert sum(p["spent_cents"] for p in shown["slices"].values()) == shown["spent_cents"]
        assert shown["granted_cents"] == sum(
            p["allowance_cents"] or 0 for p in shown["slices"].values()
        )
        assert check.spent > 0
        assert check.reserved > 0
        # One slice's spent drifts: reconcile names the slice and repairs it.
        other = next(s for s in check.slices if s != camp.shard and check.slices[s].spent)
        await redis_client.hincrby(budget_key(other), f"{CAMPAIGN}:s", 1_000_000)
        found = await reconcile(redis_client, conn, settle_seconds=0)
        assert any(f"slice {{b{other}}}: spent" in d for d in found.differing[CAMPAIGN])
        repaired = await reconcile(redis_client, conn, repair=True, settle_seconds=0)
        assert repaired.repaired == [CAMPAIGN]
        again = await reconcile(redis_client, conn, settle_seconds=0)
        assert again.differing == {}
