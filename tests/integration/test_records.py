"""The record writer against the session's real Redis and Postgres: every record type lands in
its table exactly once, with exact money; duplicates, poison entries, missing parents and a
failing Postgres are handled without losing or doubling anything."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import asyncpg
import pytest
from redis.asyncio import Redis

from bidder.observability import Metrics
from matching.money import split_gross
from store import record_rows, records
from store.hot import QUEUE_GROUP, Answered, Reserved, queue_key, queue_keys
from store.reconcile import check_balances
from store.records import RecordWriter, dead_letter_key, ensure_groups
from tests.support.factories import CAMPAIGN, CREATIVE_VIDEO, PUB, SCREEN_MOVING
from tests.support.records import (
    Expected,
    assert_balanced,
    assert_exactly_once,
    core_accept_and_play,
    core_open,
    drain,
    make_records,
    pending_count,
    prepare,
)


def _writer(redis: Redis, pool: asyncpg.Pool, metrics: Metrics, **kw: object) -> RecordWriter:
    async def get_pool() -> asyncpg.Pool:
        return pool

    return RecordWriter(redis, get_pool, consumer="test-writer", metrics=metrics, **kw)  # type: ignore[arg-type]


async def test_every_record_type_is_written_once_with_exact_money(
    redis_client: Redis, pool: asyncpg.Pool, migrated: str
) -> None:
    hot, camp = await prepare(redis_client, migrated)
    expected = await make_records(hot, camp, rounds=3)
    metrics = Metrics()
    writer = _writer(redis_client, pool, metrics)
    await drain(writer, redis_client)

    async with pool.acquire() as conn:
        await assert_exactly_once(conn, expected)
        await assert_balanced(redis_client, conn)
        deal: Any = await conn.fetchrow("SELECT * FROM deals LIMIT 1")
        # accepted at 2.0 cents, commission 15 %: 0.3, net 1.7 (docs/contract.md#1-money)
        assert deal["gross_price_cents"] == Decimal("2")
        assert deal["commission_cents"] == Decimal("0.3")
        assert deal["net_price_cents"] == Decimal("1.7")
        billing: Any = await conn.fetchrow(
            "SELECT * FROM billing_records WHERE source = 'core_accept' LIMIT 1"
        )
        assert billing["billing_code"] == "BILL-FIZZY-METRO"
        assert billing["deal_id"] is not None
        rows = await conn.fetch("SELECT status, count(*) AS n FROM offers GROUP BY status")
        statuses = {r["status"]: r["n"] for r in rows}
        # The 3 offers still open have no row: only Redis holds them until their outcome.
        assert statuses == {"accepted": 3, "rejected": 3, "expired": 3, "billed": 3, "lost": 3}
        assert await conn.fetchval("SELECT bool_and(bid_price_cents = 2.5) FROM offers")
        reasons = await conn.fetch("SELECT reason FROM rejections")
        assert {r["reason"] for r in reasons} == {"full"}
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM offers "
                "WHERE status = 'rejected' AND rejection_reason = 'full'"
            )
            == 3
        )
        losses = await conn.fetch("SELECT * FROM loss_notices ORDER BY after_billing")
        assert [(r["after_billing"], r["released_cents"]) for r in losses] == [
            (False, Decimal("2.5")),
            (False, Decimal("2.5")),
            (False, Decimal("2.5")),
            (True, Decimal("0")),
            (True, Decimal("0")),
            (True, Decimal("0")),
        ]
        assert await conn.fetchval("SELECT count(*) FROM tracking_events WHERE billed") == 3
        auction = await conn.fetchval(
            "SELECT count(*) FROM offers WHERE channel = 'openrtb' AND auction_id IS NOT NULL"
        )
        assert auction == 6
    # per round (see tests/support/records.py, MIX), outcome records only, none for a reservation:
    # accept + playout 2, reject 1, open 0, expiry 1, impression billed + 2 tracking + loss 4,
    # loss 1
    assert expected.records == 3 * 9
    assert metrics.records_written._value.get() == expected.records
    assert await pending_count(redis_client) == 0


async def test_the_same_entry_delivered_twice_makes_one_row(
    redis_client: Redis, pool: asyncpg.Pool, migrated: str
) -> None:
    hot, camp = await prepare(redis_client, migrated)
    expected = await make_records(hot, camp, rounds=2)
    copies: list[Any] = []
    for key in queue_keys():
        entries: Any = await redis_client.xrange(key)
        copies += [(key, fields) for _, fields in entries]
    writer = _writer(redis_client, pool, Metrics())
    batch = await writer.read_batch()
    await writer.process(batch)
    await writer.process(batch)  # a second delivery of the very same entries
    for key, fields in copies:  # and the same records enqueued again under new ids
        await redis_client.xadd(key, fields)
    await drain(writer, redis_client)
    async with pool.acquire() as conn:
        await assert_exactly_once(conn, expected)
        await assert_balanced(redis_client, conn)


async def test_poison_entries_go_to_the_dead_letter_stream_and_the_rest_is_written(
    redis_client: Redis, pool: asyncpg.Pool, migrated: str
) -> None:
    hot, camp = await prepare(redis_client, migrated)
    await ensure_groups(redis_client)
    expected = await make_records(hot, camp, rounds=1)
    shard = camp.shard
    await redis_client.xadd(queue_key(shard), {"t": "offer_created", "o": "{not json"})
    # Decodes, but Postgres refuses it for good: a rejection reason over 500 characters. Its
    # offer stays open in Redis (the script never ran), so it must not reach Postgres at all.
    still_open = await core_open(hot, camp)
    offer = await hot.offer(still_open.open_offers[0])
    assert offer is not None
    poisoned = json.dumps(offer | {"status": "rejected", "resolved_ms": "1"})
    await redis_client.xadd(
        queue_key(shard),
        {"t": "offer_rejected", "o": poisoned, "p": '{"rejection_reason": "' + "x" * 501 + '"}'},
    )
    expected.merge(still_open)
    expected.merge(await core_accept_and_play(hot, camp))
    metrics = Metrics()
    writer = _writer(redis_client, pool, metrics)
    await drain(writer, redis_client)

    dead: Any = await redis_client.xrange(dead_letter_key(shard))
    assert len(dead) == 2
    errors = sorted(entry[b"error"].decode() for _, entry in dead)
    assert errors[0].startswith("CheckViolationError")
    assert errors[1].startswith("RecordError")
    assert {entry[b"src_stream"] for _, entry in dead} == {queue_key(shard).encode()}
    reasons = sorted(entry[b"reason"].decode() for _, entry in dead)
    assert reasons == ["refused", "undecodable"]
    dead_counted = metrics.records_dead_lettered
    assert dead_counted.labels("offer_rejected", "refused")._value.get() == 1
    assert dead_counted.labels("offer_created", "undecodable")._value.get() == 1
    async with pool.acquire() as conn:
        await assert_exactly_once(conn, expected)
        await assert_balanced(redis_client, conn)
    assert await pending_count(redis_client) == 0


async def test_a_playout_whose_deal_is_not_written_yet_waits_instead_of_dying(
    redis_client: Redis, pool: asyncpg.Pool, migrated: str
) -> None:
    hot, camp = await prepare(redis_client, migrated)
    expected = await core_accept_and_play(hot, camp)
    writer = _writer(redis_client, pool, Metrics(), claim_idle_ms=50, reclaim_every_s=0.1)
    batch = await writer.read_batch()
    playout = [e for e in batch if e.kind == "playout_confirmed"]
    assert len(playout) == 1
    await writer.write_until_done(playout)  # its deal is held by "another writer"
    assert await pending_count(redis_client) == expected.records == 2
    assert await redis_client.xlen(dead_letter_key(camp.shard)) == 0
    await writer.write_until_done([e for e in batch if e.kind != "playout_confirmed"])
    await drain(writer, redis_client)
    async with pool.acquire() as conn:
        await assert_exactly_once(conn, expected)
    assert await redis_client.xlen(dead_letter_key(camp.shard)) == 0


async def test_a_playout_lands_within_a_second_of_its_deal_without_waiting_for_reclaim(
    redis_client: Redis, pool: asyncpg.Pool, migrated: str
) -> None:
    """A player confirms right after accepting, while another writer still holds the deal:
    the playout must not wait for the 30 s reclaim to show on the deal."""
    hot, camp = await prepare(redis_client, migrated)
    expected = await core_accept_and_play(hot, camp)
    writer = _writer(redis_client, pool, Metrics(), claim_idle_ms=600_000)
    batch = await writer.read_batch()
    await writer.write_until_done([e for e in batch if e.kind == "playout_confirmed"])
    assert await pending_count(redis_client) == 2
    await writer.write_until_done([e for e in batch if e.kind != "playout_confirmed"])
    written_at = time.monotonic()
    while await pending_count(redis_client) and time.monotonic() - written_at < 5:
        await writer.step()
    assert time.monotonic() - written_at < 1.0
    assert await pending_count(redis_client) == 0
    async with pool.acquire() as conn:
        await assert_exactly_once(conn, expected)
    assert await redis_client.xlen(dead_letter_key(camp.shard)) == 0


async def test_a_playout_whose_deal_never_comes_stays_pending_once_its_retries_are_used_up(
    redis_client: Redis, pool: asyncpg.Pool, migrated: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(records, "_PARENT_RETRY_S", (0.01, 0.02))
    hot, camp = await prepare(redis_client, migrated)
    await core_accept_and_play(hot, camp)
    writer = _writer(redis_client, pool, Metrics(), claim_idle_ms=600_000)
    batch = await writer.read_batch()
    playout = [e for e in batch if e.kind == "playout_confirmed"]
    await writer.write_until_done(playout)
    tried = 1
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        again = await writer.read_batch()
        assert [e.entry_id for e in again] in ([], [playout[0].entry_id])
        if again:
            tried += 1
            await writer.write_until_done(again)
    assert tried == 3  # the first write and one per pause, then left to the reclaim
    assert await pending_count(redis_client) == 2
    assert await redis_client.xlen(dead_letter_key(camp.shard)) == 0


async def test_postgres_failures_keep_the_batch_pending_until_it_is_written(
    redis_client: Redis, pool: asyncpg.Pool, migrated: str
) -> None:
    hot, camp = await prepare(redis_client, migrated)
    expected = await make_records(hot, camp, rounds=1)
    failures = 4

    async def flaky_pool() -> asyncpg.Pool:
        nonlocal failures
        if failures:
            failures -= 1
            # While it fails, nothing is acknowledged: every record is still in the queue.
            assert await pending_count(redis_client) == expected.records
            raise ConnectionRefusedError("postgres down")
        return pool

    metrics = Metrics()
    writer = RecordWriter(redis_client, flaky_pool, consumer="flaky", metrics=metrics)
    await drain(writer, redis_client)
    assert failures == 0
    assert metrics.record_write_failures.labels("postgres")._value.get() == 4
    async with pool.acquire() as conn:
        await assert_exactly_once(conn, expected)
        await assert_balanced(redis_client, conn)


async def test_offer_created_entries_of_an_older_version_still_drain(
    redis_client: Redis, pool: asyncpg.Pool, migrated: str
) -> None:
    """No reservation queues `offer_created` any more, but entries an older version queued
    before a rolling deploy are written: an open row, made final by the outcome, and a late one
    never turns a final row back to open."""
    hot, camp = await prepare(redis_client, migrated)
    writer = _writer(redis_client, pool, Metrics())
    early, late = [(await core_open(hot, camp)).open_offers[0] for _ in range(2)]

    async def legacy_created(offer_id: str) -> dict[str, str]:
        """The entry the older reservation script queued: the open offer, empty p and x."""
        offer = await hot.offer(offer_id)
        assert offer is not None
        assert offer["status"] == "open"
        return {"t": "offer_created", "o": json.dumps(offer), "p": "{}", "x": "{}"}

    async def status_of(offer_id: str) -> Any:
        async with pool.acquire() as conn:
            return await conn.fetchval("SELECT status FROM offers WHERE offer_id = $1", offer_id)

    entries = {offer_id: await legacy_created(offer_id) for offer_id in (early, late)}
    await redis_client.xadd(queue_key(camp.shard), entries[early])  # type: ignore[arg-type]
    await drain(writer, redis_client)
    assert await status_of(early) == "open"
    assert await status_of(late) is None
    for offer_id in (early, late):
        await hot.respond(offer_id, PUB, "reject", datetime.now(UTC), {"rejection_reason": "x"})
    await drain(writer, redis_client)
    await redis_client.xadd(queue_key(camp.shard), entries[late])  # type: ignore[arg-type]
    await drain(writer, redis_client)
    assert (await status_of(early), await status_of(late)) == ("rejected", "rejected")
    async with pool.acquire() as conn:
        await assert_balanced(redis_client, conn)
    assert await pending_count(redis_client) == 0


async def test_groups_are_created_on_every_shard(redis_client: Redis) -> None:
    await ensure_groups(redis_client)
    await ensure_groups(redis_client)  # BUSYGROUP is fine
    for key in queue_keys():
        groups = await redis_client.xinfo_groups(key)
        assert [g["name"] for g in groups] == [QUEUE_GROUP.encode()]


def test_fixture_ids_are_what_the_helpers_assume() -> None:
    assert (CAMPAIGN, PUB, SCREEN_MOVING) == (
        "00000004-0000-4000-8000-000000000001",
        "00000001-0000-4000-8000-000000000001",
        "00000003-0000-4000-8000-000000000001",
    )
    assert Expected().rows.total() == 0


async def test_client_text_postgres_cannot_hold_is_stored_not_dead_lettered(
    redis_client: Redis, pool: asyncpg.Pool, migrated: str
) -> None:
    """Acknowledged requests may carry what Postgres refuses: a NUL in a string (text rejects
    it) or a playout duration beyond an integer. Their records must still be written
    (docs/contract.md#7-durability), with the NUL as U+FFFD (in a loss notice's json body,
    its escape) and the duration as NULL."""
    hot, camp = await prepare(redis_client, migrated)
    await ensure_groups(redis_client)
    now = datetime.now(UTC)
    later = now + timedelta(minutes=5)
    core = {"channel": "core", "publisher": PUB, "creative": CREATIVE_VIDEO}
    rtb = core | {"channel": "openrtb", "auction_id": "a\x00b", "imp_id": "1"}
    rejected = await hot.reserve(camp, 2_500_000, SCREEN_MOVING, now, later, core)
    lost = await hot.reserve(camp, 2_500_000, SCREEN_MOVING, now, later, rtb)
    accepted = await hot.reserve(camp, 2_500_000, SCREEN_MOVING, now, later, core)
    assert isinstance(rejected, Reserved)
    assert isinstance(lost, Reserved)
    assert isinstance(accepted, Reserved)
    await hot.respond(rejected.offer_id, PUB, "reject", now, {"rejection_reason": "full\x00stop"})
    loss = {"reason": "102", "aid": "x\x00", "body": {"k\x00": ["v\x00"]}}
    await hot.loss(lost.offer_id, now, loss)
    net, commission = split_gross(2_500_000, Decimal("0.1"))
    billing = {
        "billing_id": str(uuid.uuid4()),
        "gross_micros": 2_500_000,
        "commission_micros": commission,
        "net_micros": net,
        "commission_rate": "0.1",
    }
    answered = await hot.respond(
        accepted.offer_id, PUB, "accept", now, billing, accepted_micros=2_500_000
    )
    assert isinstance(answered, Answered)
    playout = {"duration_seconds": 3_000_000_000, "player_version": "v\x001"}
    await hot.confirm_playout(answered.deal_id, PUB, now, playout)
    await drain(_writer(redis_client, pool, Metrics()), redis_client)

    assert await redis_client.xlen(dead_letter_key(camp.shard)) == 0
    async with pool.acquire() as conn:
        reason = await conn.fetchval(
            "SELECT reason FROM rejections WHERE offer_id = $1", rejected.offer_id
        )
        assert reason == "full\ufffdstop"
        row = await conn.fetchrow(
            "SELECT o.auction_id, l.auction_id AS aid, l.body::text AS body "
            "FROM offers o JOIN loss_notices l USING (offer_id) WHERE offer_id = $1",
            lost.offer_id,
        )
        assert row is not None
        assert (row["auction_id"], row["aid"]) == ("a\ufffdb", "x\ufffd")
        # The body's column is json: it keeps a NUL as its escape, exactly as sent.
        assert json.loads(row["body"]) == {"k\x00": ["v\x00"]}
        played = await conn.fetchrow(
            "SELECT duration_seconds, player_version FROM playouts WHERE deal_id = $1",
            answered.deal_id,
        )
        assert played is not None
        assert (played["duration_seconds"], played["player_version"]) == (None, "v\ufffd1")


@pytest.mark.parametrize(
    ("price", "stored"),
    [
        ("1E+2", Decimal(100)),
        ("-0.5", Decimal("-0.5")),
        ("0.0000004", Decimal(0)),
        ("0.0000005", Decimal("0.000001")),
        ("1e-16384", Decimal(0)),
        (None, None),
    ],
)
async def test_amounts_an_ssp_writes_any_way_are_stored_as_their_value(
    redis_client: Redis,
    pool: asyncpg.Pool,
    migrated: str,
    price: str | None,
    stored: Decimal | None,
) -> None:
    """A loss notice's price may come as an exponent, negative, finer than the column's six
    decimals (even beyond what Postgres' numeric input takes), or not at all; each is stored
    as the number it is (rounded to the column) or NULL, beside an exact billing amount in the
    same batch, never dead-lettered (decisions: records and operations)."""
    hot, camp = await prepare(redis_client, migrated)
    now = datetime.now(UTC)
    fields = {"channel": "openrtb", "publisher": PUB, "creative": CREATIVE_VIDEO}
    lost = await hot.reserve(
        camp, 2_500_000, SCREEN_MOVING, now, now + timedelta(minutes=5), fields
    )
    assert isinstance(lost, Reserved)
    await hot.loss(lost.offer_id, now, {"reason": "102"} | ({"price": price} if price else {}))
    accepted = await core_accept_and_play(hot, camp)
    await drain(_writer(redis_client, pool, Metrics()), redis_client)
    async with pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT l.price, o.bid_price_cents FROM loss_notices l JOIN offers o USING (offer_id) "
            "WHERE offer_id = $1",
            lost.offer_id,
        )
        gross = await conn.fetchval(
            "SELECT gross_price_cents FROM deals WHERE deal_id = $1", accepted.deals[0]
        )
    assert row is not None
    assert (row["price"], row["bid_price_cents"]) == (stored, Decimal("2.500000"))
    assert gross == Decimal("2.000000")


async def test_a_record_that_raises_anything_is_isolated_and_its_batch_commits(
    redis_client: Redis, pool: asyncpg.Pool, migrated: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever an entry makes the writer raise, in decoding or in writing, every other entry of
    its batch commits in the same step, and the bad one ends in the dead-letter stream with its
    error and reason, counted, never retried for ever (docs/architecture.md, "Records")."""
    monkeypatch.setattr(records, "_PARENT_RETRY_S", (0.01,))
    hot, camp = await prepare(redis_client, migrated)
    await ensure_groups(redis_client)
    expected = await make_records(hot, camp, rounds=3)
    shard = camp.shard
    queue = queue_key(shard)
    # A loss notice as an older version queued it, unbounded: every number past its column.
    legacy = (await core_open(hot, camp)).open_offers[0]
    await redis_client.hset(f"{{b{shard}}}:o:{legacy}", "channel", "openrtb")
    wild = {"reason": "9" * 40, "price": "1e1000000", "mtw": "-1e1000000", "body": [[1]]}
    assert (await hot.loss(legacy, datetime.now(UTC), wild))[0] == "first"
    expected.merge(Expected(Counter(offers=1, loss_notices=1), [], [legacy], records=1))
    offer = await hot.offer(expected.offers[0])
    assert offer is not None
    undecodable: list[dict[str, str]] = [
        {"t": "offer_accepted", "o": '{"offer_id": ["x"]}', "p": "[]", "x": "7"},
        {"t": "offer_rejected", "o": json.dumps(offer | {"status": ["rejected"]})},  # TypeError
        {"t": "impression_billed", "o": json.dumps(offer), "p": '{"gross_micros": {"a": 1}}'},
        {"zzz": "\udcff".encode("utf-8", "surrogateescape").decode("latin-1")},
        {"t": "no such type", "o": "{}"},
    ]
    for fields in undecodable:
        await redis_client.xadd(queue, fields)  # type: ignore[arg-type]
    # Decodes, but writing it raises what no Postgres error class names.
    marked = (await core_open(hot, camp)).open_offers[0]
    await redis_client.hset(f"{{b{shard}}}:o:{marked}", "channel", "openrtb")
    await hot.loss(marked, datetime.now(UTC), {"reason": "1"})
    real_write = record_rows.write_rows

    async def write_unless_marked(conn: Any, rows: Any) -> None:
        if marked in rows.offers:
            raise RuntimeError("an error of no known class")
        await real_write(conn, rows)

    monkeypatch.setattr(records, "write_rows", write_unless_marked)
    metrics = Metrics()
    writer = _writer(redis_client, pool, metrics, claim_idle_ms=10, reclaim_every_s=0.01)
    await writer.step()  # one batch: everything but the marked entry commits in this step
    async with pool.acquire() as conn:
        await assert_exactly_once(conn, expected)
        assert await conn.fetchval(
            "SELECT price IS NULL AND min_to_win IS NULL AND reason IS NULL AND body::text = "
            "'[[1]]' FROM loss_notices WHERE offer_id = $1",
            legacy,
        )
    await drain(writer, redis_client)

    dead: Any = await redis_client.xrange(dead_letter_key(shard))
    reasons = sorted((f[b"reason"].decode(), f.get(b"t", b"").decode()) for _, f in dead)
    assert reasons == [
        ("undecodable", ""),
        ("undecodable", "impression_billed"),
        ("undecodable", "no such type"),
        ("undecodable", "offer_accepted"),
        ("undecodable", "offer_rejected"),
        ("unexpected", "loss_notice"),
    ], [(f[b"reason"], f.get(b"t"), f[b"error"][:150]) for _, f in dead]
    assert all(f[b"error"] and f[b"src_stream"] == queue.encode() for _, f in dead)
    unexpected = next(f for _, f in dead if f[b"reason"] == b"unexpected")
    assert unexpected[b"error"].startswith(b"RuntimeError")
    counted = metrics.records_dead_lettered
    assert counted.labels("loss_notice", "unexpected")._value.get() == 1
    assert counted.labels("other", "undecodable")._value.get() == 2  # no `t`, an unknown `t`
    assert counted.labels("offer_accepted", "undecodable")._value.get() == 1
    assert await pending_count(redis_client) == 0
    async with pool.acquire() as conn:
        await assert_exactly_once(conn, expected)
        await assert_balanced(redis_client, conn)
        # Reconcile says so too, and reads past the two billing entries it cannot read.
        report = await check_balances(redis_client, conn)
    assert (report.dead_letters, report.unreadable, report.differing) == (6, 2, {})
    assert "DEAD LETTERS 6" in report.render()
