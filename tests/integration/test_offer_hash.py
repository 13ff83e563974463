"""The forms of an offer's hash in Redis (store/hot/state.py, `offer_from_hash`): packed, as
`OFFER_HASH=packed` writes new offers; lean, as `OFFER_HASH=lean` does (packed under another
name, no expiry until its outcome, its deal one string); and every field on its own, as the
default `OFFER_HASH=fields` and every version before the packed form write it. Each is
answered, expired, lost and tracked by the same scripts and carries the same record to
Postgres, so a worker finds and answers the offers an earlier version left open, and
reconcile counts them all."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from redis.asyncio import Redis

from matching.snapshot import CampaignInfo
from store.hot import (
    Answered,
    HotState,
    NotAnswered,
    OfferForm,
    Reserved,
    budget_key,
    day_key,
    deal_key,
    offer_key,
    queue_key,
    shard_of,
    tracked_key,
)
from store.reconcile import check_balances
from tests.support.core import Core, Live, live_app
from tests.support.core import prepare as prepare_core
from tests.support.factories import PUB, SCREEN_MOVING
from tests.support.records import (
    ACCEPTED,
    PRICE,
    Expected,
    assert_balanced,
    assert_exactly_once,
    billing_payload,
    make_records,
    prepare,
    tracking_payload,
    write_queued,
)
from tests.support.servers import ServerUrls, make_settings

#: The fields an OpenRTB bid is made with (bidder/openrtb/_bid.py), the same for both forms.
_BID_FIELDS = {
    "channel": "openrtb",
    "publisher": PUB,
    "creative": "creative-1",
    "auction_id": "auction-1",
    "imp_id": "1",
    "pmp_deal_id": "",
    "audience": "12.5",
}
_CORE_FIELDS = {"channel": "core", "publisher": PUB, "creative": "creative-1"}


def _both(redis: Redis) -> tuple[HotState, HotState]:
    """(packed, fields): the default form, and the form every earlier version writes."""
    return HotState(redis), HotState(redis, offer_form="fields")


def _lean(redis: Redis, **kwargs: Any) -> HotState:
    return HotState(redis, offer_form="lean", **kwargs)


async def _reserve(
    hot: HotState, camp: CampaignInfo, now: datetime, fields: dict[str, str], ttl_s: float = 300
) -> str:
    made = await hot.reserve(
        camp, PRICE, SCREEN_MOVING, now, now + timedelta(seconds=ttl_s), fields
    )
    assert isinstance(made, Reserved), made
    return made.offer_id


async def _last_record(redis: Redis, camp: CampaignInfo) -> dict[str, Any]:
    """The newest queue entry of the campaign's shard, its JSON fields decoded."""
    entries: Any = await redis.xrevrange(queue_key(camp.shard), count=1)
    fields = {k.decode(): v.decode() for k, v in entries[0][1].items()}
    return {k: v if k == "t" else json.loads(v) for k, v in fields.items()}


def _without_ids(record: dict[str, Any]) -> dict[str, Any]:
    """A record with the ids each offer and deal has of its own taken out."""
    out = dict(record)
    out["o"] = {k: v for k, v in record["o"].items() if k not in ("offer_id", "deal_id")}
    if isinstance(out.get("p"), dict):
        own_ids = ("deal_id", "billing_id", "event_id", "playout_id")
        out["p"] = {k: v for k, v in out["p"].items() if k not in own_ids}
    return out


async def test_a_packed_offer_has_four_fields_and_reads_as_every_field(
    redis_client: Redis, migrated: str
) -> None:
    _, camp = await prepare(redis_client, migrated)
    packed, fields = _both(redis_client)
    now = datetime.now(UTC)
    new_id = await _reserve(packed, camp, now, _BID_FIELDS)
    old_id = await _reserve(fields, camp, now, _BID_FIELDS)

    stored_new = await redis_client.hgetall(offer_key(camp.shard, new_id))
    assert set(stored_new) == {b"status", b"campaign", b"price", b"rest"}
    stored_old = await redis_client.hgetall(offer_key(camp.shard, old_id))
    assert b"rest" not in stored_old
    assert {b"channel", b"publisher", b"screen", b"expires_ms", b"audience"} <= set(stored_old)

    lean_id = await _reserve(_lean(redis_client), camp, now, _BID_FIELDS)
    stored_lean = await redis_client.hgetall(offer_key(camp.shard, lean_id))
    assert set(stored_lean) == {b"status", b"campaign", b"price", b"body"}
    read_lean = await packed.offer(lean_id)
    assert read_lean is not None
    assert read_lean.pop("offer_id") == lean_id

    read_new, read_old = await packed.offer(new_id), await packed.offer(old_id)
    assert read_new is not None
    assert read_old is not None
    assert read_new.pop("offer_id") == new_id
    assert read_old.pop("offer_id") == old_id
    assert read_new == read_old == read_lean
    assert read_new["status"] == "open"
    assert read_new["price"] == str(PRICE)
    assert read_new["audience"] == "12.5"
    # The hot path's read (the pipelined connection's HGETALL) gives the same.
    assert await fields.offer(new_id) == {**read_new, "offer_id": new_id}


async def test_every_outcome_records_the_same_offer_from_either_form(
    redis_client: Redis, migrated: str
) -> None:
    """Accept, reject, expiry, loss notice, billed impression: the record an offer of either
    form queues is the same, field for field, but for its own ids."""
    _, camp = await prepare(redis_client, migrated)
    packed, fields = _both(redis_client)
    now = datetime.now(UTC)
    later = now + timedelta(seconds=1)
    records: dict[str, list[dict[str, Any]]] = {"packed": [], "fields": [], "lean": []}
    for name, hot in (("packed", packed), ("fields", fields), ("lean", _lean(redis_client))):
        out = records[name]
        accepted = await _reserve(hot, camp, now, _CORE_FIELDS)
        answer = await packed.respond(
            accepted, PUB, "accept", later, billing_payload(ACCEPTED), accepted_micros=ACCEPTED
        )
        assert isinstance(answer, Answered)
        out.append(await _last_record(redis_client, camp))
        assert (await packed.offer(accepted) or {}).get("deal_id") == answer.deal_id
        played = await packed.confirm_playout(answer.deal_id, PUB, later, {"played_at": None})
        assert played.status == "new"
        out.append(await _last_record(redis_client, camp))
        again = await packed.confirm_playout(answer.deal_id, PUB, later, {"played_at": None})
        assert (again.status, again.playout_id) == ("repeat", played.playout_id)

        rejected = await _reserve(hot, camp, now, _CORE_FIELDS)
        assert isinstance(
            await packed.respond(rejected, PUB, "reject", later, {"rejection_reason": "full"}),
            Answered,
        )
        out.append(await _last_record(redis_client, camp))

        await _reserve(hot, camp, now, _CORE_FIELDS, ttl_s=0.5)
        assert await packed.expire_due(later) == {"core": 1}
        out.append(await _last_record(redis_client, camp))

        lost = await _reserve(hot, camp, now, _BID_FIELDS)
        assert (await packed.loss(lost, later, {"reason": "102"}))[0] == "first"
        out.append(await _last_record(redis_client, camp))
        assert (await packed.loss(lost, later, {"reason": "102"}))[0] == "retry"

        billed = await _reserve(hot, camp, now, _BID_FIELDS)
        tracked = await packed.track(
            billed, "impression", later, tracking_payload("impression"), billing_payload(PRICE)
        )
        assert tracked.status == "billed"
        entries: Any = await redis_client.xrevrange(queue_key(camp.shard), count=2)
        assert [e[1][b"t"] for e in entries] == [b"tracking_event", b"impression_billed"]
        out.append(await _last_record(redis_client, camp))

    kinds = [r["t"] for r in records["packed"]]
    assert kinds == [
        "offer_accepted",
        "playout_confirmed",
        "offer_rejected",
        "offer_expired",
        "loss_notice",
        "tracking_event",
    ]
    for new, old, lean in zip(records["packed"], records["fields"], records["lean"], strict=True):
        assert _without_ids(new) == _without_ids(old) == _without_ids(lean)
    accept = records["packed"][0]["o"]
    assert accept["status"] == "accepted"
    assert accept["accepted_price"] == str(ACCEPTED)
    assert accept["channel"] == "core"


def _object_without_repeats(text: str) -> dict[str, Any]:
    """A JSON object decoded, failing when a name appears twice in it (json.loads would keep
    the last one silently)."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        names = [name for name, _ in items]
        assert len(names) == len(set(names)), f"a name repeated in {text}"
        return dict(items)

    decoded: dict[str, Any] = json.loads(text, object_pairs_hook=pairs)
    return decoded


async def test_a_record_names_each_field_of_a_packed_offer_once(
    redis_client: Redis, migrated: str
) -> None:
    """A packed offer's record splices the packed JSON and the fields of its own: every name
    once, the packed ones and the ones its answer wrote alike."""
    _, camp = await prepare(redis_client, migrated)
    packed, _ = _both(redis_client)
    now = datetime.now(UTC)
    offer_id = await _reserve(packed, camp, now, _CORE_FIELDS)
    later = now + timedelta(seconds=1)
    await packed.respond(offer_id, PUB, "accept", later, billing_payload(PRICE), PRICE)
    entries: Any = await redis_client.xrevrange(queue_key(camp.shard), count=1)
    offer = _object_without_repeats(entries[0][1][b"o"].decode())
    assert offer["status"] == "accepted"
    assert offer["channel"] == "core"
    assert offer["offer_id"] == offer_id
    assert offer["resolved_ms"] == str(int(later.timestamp() * 1000))


@pytest.mark.parametrize("form", ["packed", "lean"])
async def test_a_field_of_its_own_wins_over_the_same_field_packed(
    redis_client: Redis, migrated: str, form: OfferForm
) -> None:
    """A hash with a field both on its own and packed (no version writes one, but a hash
    edited by hand can be one): the scripts read the field of its own, the record names it
    once, with that value, and a lean offer still gets the retention at its answer."""
    _, camp = await prepare(redis_client, migrated)
    packed = HotState(redis_client, offer_form=form, retention_ms=3_600_000)
    now = datetime.now(UTC)
    offer_id = await _reserve(packed, camp, now, _CORE_FIELDS)
    key = offer_key(camp.shard, offer_id)
    await redis_client.hset(key, mapping={"creative": "creative-own", "publisher": "someone"})
    later = now + timedelta(seconds=1)
    # The publisher of its own is not PUB: the answer finds no offer of PUB's.
    refused = await packed.respond(offer_id, PUB, "reject", later, {})
    assert not isinstance(refused, Answered)
    await redis_client.hset(key, "publisher", PUB)
    assert isinstance(await packed.respond(offer_id, PUB, "reject", later, {}), Answered)
    entries: Any = await redis_client.xrevrange(queue_key(camp.shard), count=1)
    offer = _object_without_repeats(entries[0][1][b"o"].decode())
    assert offer["creative"] == "creative-own"
    assert offer["status"] == "rejected"
    assert offer["channel"] == "core"
    # Packed, the reservation's ttl: the 300 s to expiry and the retention; lean, the retention.
    kept_ms = await redis_client.pttl(key)
    assert 3_600_000 - 5_000 <= kept_ms <= 3_600_000 + (300_000 if form == "packed" else 0)


async def test_offers_of_both_forms_are_written_once_and_reconcile_balances(
    redis_client: Redis, migrated: str, pool: asyncpg.Pool
) -> None:
    """Offers left by an earlier version (every field on its own) and new packed ones, mixed
    and answered by the current scripts: every record lands once, the money balances, and
    reconcile counts the open offers of both forms in `reserved`."""
    _, camp = await prepare(redis_client, migrated)
    packed, fields = _both(redis_client)
    expected = Expected()
    expected.merge(await make_records(fields, camp, rounds=2))
    expected.merge(await make_records(packed, camp, rounds=2))
    expected.merge(await make_records(_lean(redis_client), camp, rounds=2))
    assert len(expected.open_offers) == 6
    await write_queued(pool, redis_client)
    async with pool.acquire() as conn:
        await assert_exactly_once(conn, expected)
        await assert_balanced(redis_client, conn)
        report = await check_balances(redis_client, conn)
        assert report.differing == {}
        assert report.campaigns[camp.id].open_offer_count == 6
        assert report.campaigns[camp.id].open_offers_in_redis == 6 * PRICE


async def _served_offer(live: Live) -> tuple[Core, Any, str, int]:
    """An offer request answered by the live service: the publisher's client, the response,
    the offer's id and its shard."""
    core = await prepare_core(live)
    offer = await core.offer(SCREEN_MOVING)
    assert offer.status_code == 200, offer.text
    offer_id = offer.json()["offer_id"]
    shard = shard_of(offer_id)
    assert shard is not None
    return core, offer, offer_id, shard


@pytest.mark.parametrize(("form", "fields_kept"), [("packed", 4), ("lean", 4), ("fields", 12)])
async def test_offer_hash_names_the_form_a_served_offer_is_written_in(
    servers: ServerUrls, clean: None, form: str, fields_kept: int
) -> None:
    """OFFER_HASH reaches the service: an offer request's hash has the form it names, and an
    accept of it answers 200 either way."""
    async with live_app(make_settings(servers, OFFER_HASH=form)) as live:
        core, offer, offer_id, shard = await _served_offer(live)
        stored = await live.rt.redis.hgetall(offer_key(shard, offer_id))
        assert len(stored) == fields_kept
        assert (b"rest" in stored) == (form == "packed")
        assert (b"body" in stored) == (form == "lean")
        price = offer.json()["bid_price_cents"]
        answer = await core.respond(offer_id, {"action": "accept", "accepted_price_cents": price})
        assert answer.status_code == 200, answer.text


@pytest.mark.parametrize("count", ["1", "0"])
async def test_count_day_reservations_reaches_the_service(
    servers: ServerUrls, clean: None, count: str
) -> None:
    """COUNT_DAY_RESERVATIONS reaches Redis: a served offer's price is in its day's reserved
    counter when it is on; off, it is left out there and the offer says so."""
    settings = make_settings(servers, OFFER_HASH="lean", COUNT_DAY_RESERVATIONS=count)
    async with live_app(settings) as live:
        _, _, offer_id, shard = await _served_offer(live)
        stored = await live.rt.hot.offer(offer_id)
        assert stored is not None
        key = day_key(shard, stored["day"])
        counted = await live.rt.redis.hget(key, f"{stored['campaign']}:r")
    if count == "1":
        assert counted == stored["price"].encode()
        assert "day_counted" not in stored
    else:
        assert counted is None
        assert stored["day_counted"] == "0"


@pytest.mark.parametrize("form", ["fields", "lean"])
async def test_offer_retention_seconds_sets_how_long_an_answered_offer_is_kept(
    servers: ServerUrls, clean: None, form: OfferForm
) -> None:
    """OFFER_RETENTION_SECONDS reaches Redis: an answered offer is kept that long after its
    expiry (the reservation's ttl: fields, packed) or after its answer (lean), not 25 hours."""
    settings = make_settings(servers, OFFER_HASH=form, OFFER_RETENTION_SECONDS="120")
    async with live_app(settings) as live:
        core, offer, offer_id, shard = await _served_offer(live)
        expires_at = datetime.fromisoformat(offer.json()["expires_at"])
        price = offer.json()["bid_price_cents"]
        answer = await core.respond(offer_id, {"action": "accept", "accepted_price_cents": price})
        assert answer.status_code == 200, answer.text
        kept_ms = await live.rt.redis.pttl(offer_key(shard, offer_id))
    until_expiry_ms = (expires_at - datetime.now(UTC)).total_seconds() * 1000
    longest_ms = 120_000 + (until_expiry_ms if form == "fields" else 0)
    assert longest_ms - 10_000 <= kept_ms <= longest_ms + 1_000


@pytest.mark.parametrize("form", ["packed", "lean"])
async def test_an_answered_or_lost_offer_is_kept_for_the_retention(
    redis_client: Redis, migrated: str, form: OfferForm
) -> None:
    """Tracking and loss notices may come up to the retention after an offer's outcome
    (HotState.retention_ms): its hash lasts at least that long, renewed or not."""
    _, camp = await prepare(redis_client, migrated)
    hot = HotState(redis_client, retention_ms=3_600_000, offer_form=form)
    now = datetime.now(UTC)
    accepted = await _reserve(hot, camp, now, _CORE_FIELDS)
    rejected = await _reserve(hot, camp, now, _CORE_FIELDS)
    lost = await _reserve(hot, camp, now, _BID_FIELDS)
    later = now + timedelta(seconds=1)
    await hot.respond(accepted, PUB, "accept", later, billing_payload(PRICE), PRICE)
    await hot.respond(rejected, PUB, "reject", later, {})
    assert (await hot.loss(lost, later, {"reason": "102"}))[0] == "first"
    for offer_id in (accepted, rejected, lost):
        status = (await hot.offer(offer_id) or {}).get("status")
        assert status in ("accepted", "rejected", "lost")
        kept_ms = await redis_client.pttl(offer_key(camp.shard, offer_id))
        assert kept_ms >= 3_600_000 - 5_000, (status, kept_ms)


async def test_a_lean_offer_has_no_expiry_until_its_outcome_and_its_deal_is_one_string(
    redis_client: Redis, migrated: str
) -> None:
    """OFFER_HASH=lean: the reservation gives the hash no expiry; every outcome (accept,
    reject, expiry at an answer, loss notice, billed impression, the sweeper's expiry) gives
    it the retention; a tracking event on the open offer keeps its event set past the offer's
    expiry plus the retention; an accept writes the deal as one JSON string with the deal's
    lifetime."""
    _, camp = await prepare(redis_client, migrated)
    retention, deal_ttl = 3_600_000, 7_200_000
    lean = _lean(redis_client, retention_ms=retention, deal_ttl_ms=deal_ttl)
    now = datetime.now(UTC)
    later = now + timedelta(seconds=1)
    made = {
        "accepted": await _reserve(lean, camp, now, _CORE_FIELDS),
        "rejected": await _reserve(lean, camp, now, _CORE_FIELDS),
        "late answer": await _reserve(lean, camp, now, _CORE_FIELDS, ttl_s=0.5),
        "swept": await _reserve(lean, camp, now, _CORE_FIELDS, ttl_s=0.5),
        "lost": await _reserve(lean, camp, now, _BID_FIELDS),
        "billed": await _reserve(lean, camp, now, _BID_FIELDS),
        "tracked": await _reserve(lean, camp, now, _BID_FIELDS),
        "over total": await _reserve(lean, camp, now, _CORE_FIELDS),
    }
    for offer_id in made.values():
        assert await redis_client.pttl(offer_key(camp.shard, offer_id)) == -1

    answer = await lean.respond(
        made["accepted"], PUB, "accept", later, billing_payload(PRICE), PRICE
    )
    assert isinstance(answer, Answered)
    assert isinstance(await lean.respond(made["rejected"], PUB, "reject", later, {}), Answered)
    late = await lean.respond(made["late answer"], PUB, "reject", later, {})
    assert not isinstance(late, Answered)
    assert await lean.expire_due(later) == {"core": 1}
    assert (await lean.loss(made["lost"], later, {"reason": "102"}))[0] == "first"
    billed = await lean.track(
        made["billed"], "impression", later, tracking_payload("impression"), billing_payload(PRICE)
    )
    assert billed.status == "billed"
    tracked = await lean.track(
        made["tracked"], "start", later, tracking_payload("start"), billing_payload(PRICE)
    )
    assert tracked.status == "recorded"
    # The operator lowers the total to what is spent: the accept can no longer be paid.
    spent = await redis_client.hget(budget_key(camp.shard), f"{camp.id}:s")
    await redis_client.hset(budget_key(camp.shard), f"{camp.id}:t", spent or 0)
    refused = await lean.respond(
        made["over total"], PUB, "accept", later, billing_payload(PRICE), PRICE
    )
    assert refused == NotAnswered("not_found", "over_total")

    statuses = {}
    for name, offer_id in made.items():
        statuses[name] = (await lean.offer(offer_id) or {}).get("status")
        kept_ms = await redis_client.pttl(offer_key(camp.shard, offer_id))
        if name == "tracked":
            assert kept_ms == -1  # still open: the sweeper's expiry gives it the retention
        else:
            assert retention - 5_000 <= kept_ms <= retention, (name, kept_ms)
    assert statuses == {
        "accepted": "accepted",
        "rejected": "rejected",
        "late answer": "expired",
        "swept": "expired",
        "lost": "lost",
        "billed": "billed",
        "tracked": "open",
        "over total": "expired",
    }
    # The open offer's 300 s to expiry, the retention, and an hour for the sweeper's lag.
    events_ms = await redis_client.pttl(tracked_key(camp.shard, made["tracked"]))
    assert 300_000 + retention + 3_600_000 - 5_000 <= events_ms <= 300_000 + retention + 3_600_000

    key = deal_key(camp.shard, answer.deal_id)
    assert await redis_client.type(key) == b"string"
    assert deal_ttl - 5_000 <= await redis_client.pttl(key) <= deal_ttl
    stored: Any = await redis_client.get(key)
    deal = json.loads(stored)
    assert deal == {
        "deal_id": answer.deal_id,
        "offer_id": made["accepted"],
        "publisher": PUB,
        "campaign": camp.id,
        "screen": SCREEN_MOVING,
    }
    played = await lean.confirm_playout(answer.deal_id, "someone else", later, {})
    assert played.status == "not_found"
    played = await lean.confirm_playout(answer.deal_id, PUB, later, {"played_at": None})
    assert played.status == "new"
    assert deal_ttl - 5_000 <= await redis_client.pttl(key) <= deal_ttl  # kept, not reset
    again = await lean.confirm_playout(answer.deal_id, PUB, later, {"played_at": None})
    assert (again.status, again.playout_id) == ("repeat", played.playout_id)
