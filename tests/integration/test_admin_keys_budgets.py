"""Admin API: publisher API keys (create, revoke, effective on every worker within 2 s) and
campaign budgets (live figures from Redis, top-ups)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import asyncpg
import httpx
import pytest

from bidder.auth import authenticate
from bidder.errors import Unauthorized
from matching.snapshot import build_snapshot
from store.hot import HotState, connect
from store.inventory_repo import add_budget, load_api_keys
from store.local_servers import free_port
from tests.support.admin import (
    ADMIN,
    Client,
    bearer,
    fetchval,
    parsed,
    started_client,
)
from tests.support.core import live_app
from tests.support.factories import (
    CAMPAIGN,
    PUB,
    SCREEN_MOVING,
    basic_document,
    campaign,
    make_key,
    seed,
    uid,
)
from tests.support.servers import ServerUrls, make_settings, redis_mode, wait_for_inventory


@pytest.fixture
async def app_client(servers: ServerUrls, clean: None) -> AsyncIterator[Client]:
    await seed(servers.database_url, basic_document())
    async for client in started_client(servers):
        await wait_for_inventory(client)
        yield client


@pytest.fixture
async def second_worker(servers: ServerUrls, app_client: Client) -> AsyncIterator[Client]:
    """Another worker on the same servers: its own runtime, snapshot and reload loop."""
    async for client in started_client(servers):
        yield client


async def screens_status(client: Client, key: str) -> int:
    response = await client.get("/functions/v1/api/screens", headers=bearer(key))
    return response.status_code


async def wait_for_status(client: Client, key: str, status: int, within: float = 2.0) -> float:
    """Seconds until the screens endpoint answers `status` for `key`; fails after `within`."""
    started = time.monotonic()
    while time.monotonic() - started < within:
        if await screens_status(client, key) == status:
            return time.monotonic() - started
        await asyncio.sleep(0.05)
    raise AssertionError(f"still not {status} after {within} s")


# -- API keys ---------------------------------------------------------------------------------


async def test_create_a_key_and_it_works_on_every_worker(
    app_client: Client, second_worker: Client, servers: ServerUrls
) -> None:
    response = await app_client.post(f"/admin/v1/publishers/{PUB}/api-keys", headers=ADMIN)
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"key_id", "api_key", "expires_at"}
    uuid.UUID(body["key_id"])
    assert body["api_key"].startswith("dk_stg_")  # the staging environment's prefix
    assert body["expires_at"] is None
    assert response.headers["cache-control"] == "no-store"

    await wait_for_status(app_client, body["api_key"], 200)
    await wait_for_status(second_worker, body["api_key"], 200)

    # Stored as a hash only.
    conn = await asyncpg.connect(servers.database_url)
    try:
        row = await conn.fetchrow(
            "SELECT * FROM api_keys WHERE key_id = $1", uuid.UUID(body["key_id"])
        )
    finally:
        await conn.close()
    assert row is not None
    assert bytes(row["key_hash"]) == hashlib.sha256(body["api_key"].encode()).digest()
    assert body["api_key"] not in {str(v) for v in dict(row).values()}


async def test_a_revoked_key_stops_working_on_every_worker_within_2_seconds(
    app_client: Client, second_worker: Client
) -> None:
    created = (await app_client.post(f"/admin/v1/publishers/{PUB}/api-keys", headers=ADMIN)).json()
    key = created["api_key"]
    await wait_for_status(app_client, key, 200)
    await wait_for_status(second_worker, key, 200)

    revoked = await app_client.delete(f"/admin/v1/api-keys/{created['key_id']}", headers=ADMIN)
    assert revoked.status_code == 204
    assert revoked.content == b""

    await wait_for_status(second_worker, key, 401, within=2.0)
    await wait_for_status(app_client, key, 401, within=2.0)
    snapshot = second_worker.app.state.runtime.inventory.snapshot
    with pytest.raises(Unauthorized):
        authenticate(f"Bearer {key}", snapshot, "dk_stg_", datetime.now(UTC))
    # Revoking again finds the key (it exists) and changes nothing.
    again = await app_client.delete(f"/admin/v1/api-keys/{created['key_id']}", headers=ADMIN)
    assert again.status_code == 204


async def test_a_key_with_an_expiry(app_client: Client) -> None:
    expires = (datetime.now(UTC) + timedelta(days=30)).replace(microsecond=0)
    response = await app_client.post(
        f"/admin/v1/publishers/{PUB}/api-keys",
        headers=ADMIN,
        json={"expires_at": expires.isoformat().replace("+00:00", "Z")},
    )
    assert response.status_code == 201
    assert datetime.fromisoformat(response.json()["expires_at"]) == expires
    await wait_for_status(app_client, response.json()["api_key"], 200)


async def test_an_expired_key_does_not_work(app_client: Client) -> None:
    expires = datetime.now(UTC) + timedelta(seconds=1.5)
    response = await app_client.post(
        f"/admin/v1/publishers/{PUB}/api-keys",
        headers=ADMIN,
        json={"expires_at": expires.isoformat()},
    )
    key = response.json()["api_key"]
    await asyncio.sleep(max(0.0, (expires - datetime.now(UTC)).total_seconds()))
    assert await screens_status(app_client, key) == 401


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        (f"/admin/v1/publishers/{uid(77, 1)}/api-keys", None, 404),
        ("/admin/v1/publishers/not-a-uuid/api-keys", None, 400),
        (f"/admin/v1/publishers/{PUB}/api-keys", b"{oops", 400),
        (f"/admin/v1/publishers/{PUB}/api-keys", b'{"expires_at": "next week"}', 400),
        (f"/admin/v1/publishers/{PUB}/api-keys", b'{"expires_at": "2020-01-01T00:00:00Z"}', 400),
        (f"/admin/v1/publishers/{PUB}/api-keys", b'{"expires_at": "2099-01-01T00:00:00"}', 400),
        (f"/admin/v1/publishers/{PUB}/api-keys", b'{"expires": "2099-01-01T00:00:00Z"}', 400),
        (f"/admin/v1/publishers/{PUB}/api-keys", b'"2099-01-01T00:00:00Z"', 400),
        # ISO 8601, but past the year 9999 once in UTC (Postgres would refuse it: a 500)
        (
            f"/admin/v1/publishers/{PUB}/api-keys",
            b'{"expires_at": "9999-12-31T23:59:59-12:00"}',
            400,
        ),
        (
            f"/admin/v1/publishers/{PUB}/api-keys",
            b'{"expires_at": "0001-01-01T00:00:00+14:00"}',
            400,
        ),
        (f"/admin/v1/publishers/{PUB}/api-keys", b'{"x": ' + b"[" * 1200 + b"]" * 1200 + b"}", 400),
    ],
)
async def test_key_creation_refusals(
    app_client: Client, path: str, body: bytes | None, status: int
) -> None:
    response = await app_client.post(path, headers=ADMIN, content=body)
    assert response.status_code == status
    assert isinstance(response.json()["error"], str)


@pytest.mark.parametrize(("key_id", "status"), [(uid(5, 9), 404), ("nope", 400), ("1234", 400)])
async def test_revoking_an_unknown_or_malformed_key_id(
    app_client: Client, key_id: str, status: int
) -> None:
    response = await app_client.delete(f"/admin/v1/api-keys/{key_id}", headers=ADMIN)
    assert response.status_code == status
    assert isinstance(response.json()["error"], str)


async def test_a_key_pasted_where_its_key_id_belongs_is_not_repeated(app_client: Client) -> None:
    """Secrets never reach a log or an answer: the 400 does not say "got 'dk_stg_...'", as
    answers can end up in logs and tickets."""
    created = (await app_client.post(f"/admin/v1/publishers/{PUB}/api-keys", headers=ADMIN)).json()
    response = await app_client.delete(f"/admin/v1/api-keys/{created['api_key']}", headers=ADMIN)
    assert response.status_code == 400
    assert created["api_key"] not in response.text
    assert created["api_key"][len("dk_stg_") :] not in response.text
    assert "key id" in response.json()["error"]


# -- campaigns and budgets --------------------------------------------------------------------


async def test_a_campaign_with_its_live_budget(app_client: Client, servers: ServerUrls) -> None:
    # One offer through the Core API: cpm 250 cents x audience 10 / 1000 = 2.5 cents reserved
    # (docs/contract.md#3-matching-and-price), so the live figures differ from the stored total.
    key = await make_key(servers.database_url)
    await wait_for_inventory(app_client)
    offer = await app_client.get(
        f"/functions/v1/api/offers/request/{SCREEN_MOVING}", headers=bearer(key)
    )
    assert offer.status_code == 200, offer.text
    assert parsed(offer.content)["bid_price_cents"] == Decimal("2.5")

    response = await app_client.get(f"/admin/v1/campaigns/{CAMPAIGN}", headers=ADMIN)
    assert response.status_code == 200
    body = parsed(response.content)
    assert body["id"] == CAMPAIGN
    assert body["status"] == "active"
    assert body["cpm_cents"] == Decimal("250")
    assert body["budget_cents"] == Decimal("100000")
    assert body["targeting"] == {}
    assert body["budget"] == {
        "total_cents": Decimal("100000"),
        "reserved_cents": Decimal("2.5"),
        "spent_cents": Decimal("0"),
        "remaining_cents": Decimal("99997.5"),
    }


async def test_a_top_up_raises_the_total_at_once_and_in_postgres(
    app_client: Client, servers: ServerUrls
) -> None:
    response = await app_client.post(
        f"/admin/v1/campaigns/{CAMPAIGN}/budget", headers=ADMIN, json={"add_cents": 250.000001}
    )
    assert response.status_code == 200
    body = parsed(response.content)
    assert body["budget_cents"] == Decimal("100250.000001")
    assert body["budget"]["total_cents"] == Decimal("100250.000001")
    assert body["budget"]["remaining_cents"] == Decimal("100250.000001")

    again = await app_client.post(
        f"/admin/v1/campaigns/{CAMPAIGN}/budget", headers=ADMIN, content=b'{"add_cents": "0.5"}'
    )
    assert again.status_code == 200
    shown = parsed((await app_client.get(f"/admin/v1/campaigns/{CAMPAIGN}", headers=ADMIN)).content)
    assert shown["budget"]["total_cents"] == Decimal("100250.500001")

    conn = await asyncpg.connect(servers.database_url)
    try:
        stored = await conn.fetchval(
            "SELECT budget_cents FROM campaigns WHERE id = $1", uuid.UUID(CAMPAIGN)
        )
    finally:
        await conn.close()
    assert stored == Decimal("100250.500001")
    # After the reload every worker's budget view carries the new total (micro-cents).
    redis = connect(servers.redis_url, timeout=2.0, mode=redis_mode(servers))
    try:
        budgets = await HotState(redis).read_budgets(datetime.now(UTC))
    finally:
        await redis.aclose()
    assert budgets[CAMPAIGN].total == 100_250_500_001


async def test_a_top_up_reaches_this_workers_matching_at_once(
    servers: ServerUrls, clean: None
) -> None:
    """A campaign whose budget cannot pay a play is not offered; the offer request right after
    a top-up that covers it is (not a second later, at the worker's next budget refresh)."""
    await seed(servers.database_url, basic_document(campaigns=[campaign(budget_cents=Decimal(1))]))
    key = await make_key(servers.database_url)
    async for client in started_client(servers):
        await wait_for_inventory(client)
        url = f"/functions/v1/api/offers/request/{SCREEN_MOVING}"
        for _ in range(5):  # 2.5 cents a play, 1 cent left: nothing eligible
            assert (await client.get(url, headers=bearer(key))).status_code == 404
            topped = await client.post(
                f"/admin/v1/campaigns/{CAMPAIGN}/budget", headers=ADMIN, json={"add_cents": 2.5}
            )
            assert topped.status_code == 200, topped.text
            offer = await client.get(url, headers=bearer(key))
            assert offer.status_code == 200, offer.text  # 3.5 cents left now: one play
            assert parsed(offer.content)["bid_price_cents"] == Decimal("2.5")
            # The play spends 2.5: 1 cent is left, again below a play.
            accepted = await client.post(
                f"/functions/v1/api/offers/response/{parsed(offer.content)['offer_id']}",
                headers=bearer(key),
                json={"action": "accept", "accepted_price_cents": 2.5},
            )
            assert accepted.status_code == 200, accepted.text


async def _stored_total(servers: ServerUrls) -> Decimal:
    sql = "SELECT budget_cents FROM campaigns WHERE id = $1"
    total: Decimal = await fetchval(servers, sql, uuid.UUID(CAMPAIGN))
    return total


async def test_concurrent_top_ups_never_pass_the_largest_total(
    app_client: Client, servers: ServerUrls
) -> None:
    """Decisions: a new total is at most 9e9 cents. Ten top-ups of 4e9 at once onto 100,000:
    exactly two fit. Checked on a total read before the UPDATE, all ten passed together.
    (httpx's ASGI transport runs the ten at once; the test client would run them in turn.)"""
    async with live_app(make_settings(servers, RECORD_WRITER="0")) as live:
        responses = await asyncio.gather(
            *(
                live.client.post(
                    f"/admin/v1/campaigns/{CAMPAIGN}/budget",
                    headers=ADMIN,
                    json={"add_cents": 4_000_000_000},
                )
                for _ in range(10)
            )
        )
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * 2 + [400] * 8, [r.text for r in responses]
    assert await _stored_total(servers) == Decimal("8000100000")


async def test_top_ups_beside_pauses_and_changes_all_count(
    app_client: Client, servers: ServerUrls
) -> None:
    """docs/decisions.md: once Postgres has committed a top-up it has happened. A pause, a
    resume or a PATCH writes the campaign back as it read it; one that read before a top-up
    committed must not undo it."""
    before = await _stored_total(servers)
    campaign_path = f"/admin/v1/campaigns/{CAMPAIGN}"
    async with live_app(make_settings(servers, RECORD_WRITER="0")) as live:

        async def top_ups() -> list[httpx.Response]:
            return [await _top_up(live.client, 1, None) for _ in range(30)]

        async def changes() -> list[httpx.Response]:
            answers = []
            for _ in range(10):
                answers.append(await live.client.post(f"{campaign_path}/pause", headers=ADMIN))
                answers.append(await live.client.post(f"{campaign_path}/resume", headers=ADMIN))
                answers.append(
                    await live.client.patch(campaign_path, headers=ADMIN, json={"end_at": None})
                )
            return answers

        groups = await asyncio.gather(top_ups(), top_ups(), changes(), changes())
    for answers in groups:
        for answer in answers:
            assert answer.status_code == 200, answer.text
    assert await _stored_total(servers) == before + 60


async def _top_up(
    client: Client | httpx.AsyncClient, cents: float, key: str | None, campaign: str = CAMPAIGN
) -> Any:
    headers = {**ADMIN, "Idempotency-Key": key} if key is not None else ADMIN
    return await client.post(
        f"/admin/v1/campaigns/{campaign}/budget", headers=headers, json={"add_cents": cents}
    )


async def _assert_replayed(
    client: Client, servers: ServerUrls, cents: float, key: str, total: Decimal
) -> None:
    """A top-up its key replays: 200 with `Idempotent-Replayed`, nothing added, and the
    answer's stored and live totals both `total`, as Postgres has it."""
    retry = await _top_up(client, cents, key)
    assert retry.status_code == 200
    assert retry.headers["idempotent-replayed"] == "true"
    body = parsed(retry.content)
    assert body["budget_cents"] == total
    assert body["budget"]["total_cents"] == total
    assert await _stored_total(servers) == total


async def test_a_retried_top_up_with_its_idempotency_key_adds_once(
    app_client: Client, servers: ServerUrls
) -> None:
    """An operator whose top-up timed out cannot know whether it committed: retrying it with
    the same Idempotency-Key adds nothing the second time, and says so."""
    first = await _top_up(app_client, 250, "ticket-4711")
    assert first.status_code == 200
    assert "idempotent-replayed" not in first.headers
    assert parsed(first.content)["budget"]["total_cents"] == Decimal("100250")

    await _assert_replayed(app_client, servers, 250, "ticket-4711", Decimal("100250"))

    # Another key is another top-up; no key at all is one every time.
    assert (await _top_up(app_client, 250, "ticket-4712")).status_code == 200
    assert (await _top_up(app_client, 1, None)).status_code == 200
    assert (await _top_up(app_client, 1, None)).status_code == 200
    assert await _stored_total(servers) == Decimal("100502")


async def test_an_idempotency_key_names_one_top_up_only(
    app_client: Client, servers: ServerUrls
) -> None:
    """The same key with another amount is a mistake, not a retry: 409, nothing added. Only
    a committed top-up takes its key: one refused (unknown campaign, total too high) leaves it
    free."""
    assert (await _top_up(app_client, 10, "k-1")).status_code == 200
    reused = await _top_up(app_client, 11, "k-1")
    assert reused.status_code == 409
    assert "Idempotency-Key" in parsed(reused.content)["error"]
    assert await _stored_total(servers) == Decimal("100010")

    unknown = await _top_up(app_client, 5, "k-2", campaign=uid(42, 4))
    assert unknown.status_code == 404
    too_high = await _top_up(app_client, 9_000_000_000, "k-2")
    assert too_high.status_code == 400
    assert await _stored_total(servers) == Decimal("100010")
    free = await _top_up(app_client, 5, "k-2")
    assert free.status_code == 200
    assert "idempotent-replayed" not in free.headers
    assert await _stored_total(servers) == Decimal("100015")
    # An unknown campaign is 404 whatever the key says.
    elsewhere = await _top_up(app_client, 5, "k-2", campaign=uid(42, 4))
    assert elsewhere.status_code == 404


async def test_a_key_replays_the_same_amount_however_written_and_only_on_its_campaign(
    servers: ServerUrls, clean: None
) -> None:
    """120.5 and 120.50 are one amount (a client may re-serialise its retry); a key is one
    top-up of one campaign: on another campaign it is 409, nothing added there."""
    other = uid(77, 4)
    await seed(
        servers.database_url,
        basic_document(campaigns=[campaign(), campaign(id=other, name="Winter")]),
    )
    async for client in started_client(servers):
        await wait_for_inventory(client)
        path = f"/admin/v1/campaigns/{CAMPAIGN}/budget"
        headers = {**ADMIN, "Idempotency-Key": "k-120"}
        first = await client.post(path, headers=headers, content=b'{"add_cents": 120.5}')
        assert first.status_code == 200
        again = await client.post(path, headers=headers, content=b'{"add_cents": "120.50"}')
        assert again.status_code == 200
        assert again.headers["idempotent-replayed"] == "true"
        elsewhere = await _top_up(client, 120.5, "k-120", campaign=other)
        assert elsewhere.status_code == 409
    sql = "SELECT budget_cents FROM campaigns WHERE id = $1"
    assert await fetchval(servers, sql, uuid.UUID(CAMPAIGN)) == Decimal("100120.5")
    assert await fetchval(servers, sql, uuid.UUID(other)) == Decimal("100000")


async def test_a_replay_brings_redis_the_total_its_first_attempt_did_not(
    app_client: Client, servers: ServerUrls
) -> None:
    """The case a key is for: the first attempt committed in Postgres and its process died
    before it set the Redis total. The retry adds nothing, and its answer shows the committed
    total live, not the old one (and every worker may reserve against it at once)."""
    conn = await asyncpg.connect(servers.database_url)
    try:
        added = await add_budget(conn, CAMPAIGN, Decimal("777"), Decimal("9e9"), "lost-answer")
    finally:
        await conn.close()
    assert added is not None
    assert not added.replayed
    await _assert_replayed(app_client, servers, 777, "lost-answer", Decimal("100777"))


async def test_a_retry_waiting_on_a_first_attempt_that_rolls_back_adds_for_itself(
    servers: ServerUrls, clean: None
) -> None:
    """Only a committed top-up takes its key: a retry that waited on an attempt which then
    rolled back (a lost connection, a refused total) does the top-up itself, once."""
    await seed(servers.database_url, basic_document())
    first = await asyncpg.connect(servers.database_url)
    second = await asyncpg.connect(servers.database_url)
    try:
        attempt = first.transaction()
        await attempt.start()
        await first.execute(
            """INSERT INTO budget_top_ups (idempotency_key, campaign_id, add_cents)
               VALUES ('race', $1, 5)""",
            uuid.UUID(CAMPAIGN),
        )
        retry = asyncio.ensure_future(
            add_budget(second, CAMPAIGN, Decimal("5"), Decimal("9e9"), "race")
        )
        await asyncio.sleep(0.3)
        assert not retry.done()  # waiting on the first attempt's key
        await attempt.rollback()
        added = await asyncio.wait_for(retry, 10)
    finally:
        await first.close()
        await second.close()
    assert added is not None
    assert not added.replayed
    assert added.total == Decimal("100005")


@pytest.mark.parametrize("key", ["", "has space", "x" * 256, "caf\u00e9"])
async def test_a_key_that_cannot_be_one_is_400_and_adds_nothing(
    app_client: Client, servers: ServerUrls, key: str
) -> None:
    response = await app_client.post(
        f"/admin/v1/campaigns/{CAMPAIGN}/budget",
        headers=[(k.encode(), v.encode()) for k, v in ADMIN.items()]
        + [(b"idempotency-key", key.encode("utf-8"))],
        json={"add_cents": 5},
    )
    assert response.status_code == 400
    assert "Idempotency-Key" in parsed(response.content)["error"]
    assert await _stored_total(servers) == Decimal("100000")


async def test_concurrent_retries_with_one_key_add_once(
    app_client: Client, servers: ServerUrls
) -> None:
    """Retries that race (a client's timeout shorter than the first attempt) wait for the
    first one's key and then replay it: exactly one adds."""
    async with live_app(make_settings(servers, RECORD_WRITER="0")) as live:
        responses = await asyncio.gather(
            *(_top_up(live.client, 1000, "same-key") for _ in range(8))
        )
    assert [r.status_code for r in responses] == [200] * 8, [r.text for r in responses]
    fresh = [r for r in responses if "idempotent-replayed" not in r.headers]
    assert len(fresh) == 1
    assert await _stored_total(servers) == Decimal("101000")


async def test_a_top_up_postgres_committed_is_a_success_while_redis_is_down(
    app_client: Client, servers: ServerUrls
) -> None:
    """A 503 says nothing happened, and an operator obeying it would top up twice: once
    Postgres has the new total the answer is 200, `budget` null, and Redis gets the total from
    the next inventory reload once it answers."""
    closed = f"redis://127.0.0.1:{free_port()}/0"
    async with live_app(make_settings(servers, REDIS_URL=closed, RECORD_WRITER="0")) as down:
        response = await down.client.post(
            f"/admin/v1/campaigns/{CAMPAIGN}/budget", headers=ADMIN, json={"add_cents": 7}
        )
        shown = await down.client.get(f"/admin/v1/campaigns/{CAMPAIGN}", headers=ADMIN)
    assert response.status_code == 200, response.text
    body = parsed(response.content)
    assert body["budget_cents"] == Decimal("100007")
    assert body["budget"] is None
    assert await _stored_total(servers) == Decimal("100007")
    # GET answers the same way: the stored fields, `budget` null.
    assert shown.status_code == 200, shown.text
    assert parsed(shown.content) == body
    # The worker with a working Redis (app_client) copies the new total at its next reload.
    redis = connect(servers.redis_url, timeout=2.0, mode=redis_mode(servers))
    try:
        deadline = time.monotonic() + 3
        total = None
        while time.monotonic() < deadline:
            budgets = await HotState(redis).read_budgets(datetime.now(UTC))
            total = budgets[CAMPAIGN].total
            if total == 100_007_000_000:
                break
            await asyncio.sleep(0.05)
    finally:
        await redis.aclose()
    assert total == 100_007_000_000


@pytest.mark.parametrize(
    "body",
    [
        b'{"add_cents": 0}',
        b'{"add_cents": -5}',
        b'{"add_cents": "abc"}',
        # Strings Decimal() reads but no client means as a number (they added 10 and 1).
        b'{"add_cents": "1_0"}',
        b'{"add_cents": " 1 "}',
        b'{"add\\u005fcents": "1_0"}',  # the name spelled with an escape
        '{"add_cents": "\u0663"}'.encode(),  # Arabic-Indic three
        b'{"add_cents": true}',
        b'{"add_cents": 0.0000001}',
        b'{"add_cents": 9000000001}',
        b'{"add_cents": 1e400}',  # past Decimal's precision: a 400, not a 500
        b'{"add_cents": ' + b"[" * 1200 + b"]" * 1200 + b"}",
        b'{"add": 5}',
        b"{}",
        b"",
        b"{broken",
        b"[1]",
    ],
)
async def test_refused_top_ups_change_nothing(app_client: Client, body: bytes) -> None:
    response = await app_client.post(
        f"/admin/v1/campaigns/{CAMPAIGN}/budget", headers=ADMIN, content=body
    )
    assert response.status_code == 400
    assert isinstance(response.json()["error"], str)
    shown: Any = parsed(
        (await app_client.get(f"/admin/v1/campaigns/{CAMPAIGN}", headers=ADMIN)).content
    )
    assert shown["budget_cents"] == Decimal("100000")


async def test_a_refused_amount_string_is_named_as_msgspec_names_any_other(
    app_client: Client,
) -> None:
    for body in (b'{"add_cents": "1_0"}', b'{"add_cents": "abc"}'):
        response = await app_client.post(
            f"/admin/v1/campaigns/{CAMPAIGN}/budget", headers=ADMIN, content=body
        )
        assert response.status_code == 400
        assert response.json()["error"] == (
            "Invalid budget top-up: Invalid decimal string - at `$.add_cents`"
        )


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", f"/admin/v1/campaigns/{uid(42, 4)}", 404),
        ("POST", f"/admin/v1/campaigns/{uid(42, 4)}/budget", 404),
        ("GET", "/admin/v1/campaigns/summer", 400),
        ("POST", "/admin/v1/campaigns/summer/budget", 400),
    ],
)
async def test_unknown_or_malformed_campaign_ids(
    app_client: Client, method: str, path: str, status: int
) -> None:
    response = await app_client.request(
        method, path, headers=ADMIN, content=b'{"add_cents": 1}' if method == "POST" else None
    )
    assert response.status_code == status
    assert isinstance(response.json()["error"], str)


async def test_a_body_that_is_not_utf8_is_400(app_client: Client) -> None:
    """JSON is UTF-8 (RFC 8259, 8.1): a string holding other bytes is malformed JSON, a 400 in
    the admin API's shape, not a 500."""
    response = await app_client.post(
        f"/admin/v1/campaigns/{CAMPAIGN}/budget",
        headers={**ADMIN, "Content-Type": "application/json"},
        content=b'{"add_cents": "\xff\xfe"}',
    )
    assert response.status_code == 400
    assert "not valid JSON" in parsed(response.content)["error"]


async def test_operator_changes_leave_an_audit_line_without_the_key(
    app_client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bidder.audit")
    created = await app_client.post(f"/admin/v1/publishers/{PUB}/api-keys", headers=ADMIN)
    assert created.status_code == 201
    key = created.json()
    topped = await app_client.post(
        f"/admin/v1/campaigns/{CAMPAIGN}/budget", headers=ADMIN, json={"add_cents": 5}
    )
    assert topped.status_code == 200
    revoked = await app_client.delete(f"/admin/v1/api-keys/{key['key_id']}", headers=ADMIN)
    assert revoked.status_code == 204
    lines = [(r.getMessage(), r.__dict__) for r in caplog.records if r.name == "bidder.audit"]
    assert [message for message, _ in lines] == [
        "API key created",
        "budget topped up",
        "API key revoked",
    ]
    assert lines[0][1]["key_id"] == lines[2][1]["key_id"] == key["key_id"]
    assert lines[1][1]["campaign_id"] == CAMPAIGN
    assert all(key["api_key"] not in repr(extra) for _, extra in lines)


@pytest.mark.parametrize(
    ("sent", "echoed"),
    [
        ("2099-06-30T14:15:16.123456+02:00", "2099-06-30T12:15:16.123Z"),
        # asyncpg writes datetime.max as `infinity` and reads it back naive, which the key check
        # cannot compare with an aware now: every call with this key would answer 500.
        ("9999-12-31T23:59:59.999999Z", "9999-12-31T23:59:59.999Z"),
    ],
)
async def test_a_key_expiry_is_kept_in_utc_to_the_millisecond(
    app_client: Client, sent: str, echoed: str
) -> None:
    response = await app_client.post(
        f"/admin/v1/publishers/{PUB}/api-keys", headers=ADMIN, json={"expires_at": sent}
    )
    assert response.status_code == 201, response.text
    assert response.json()["expires_at"] == echoed
    await wait_for_status(app_client, response.json()["api_key"], 200)


async def test_a_key_stored_with_an_infinite_expiry_still_authenticates(
    app_client: Client, servers: ServerUrls
) -> None:
    """A stored key may hold `infinity` as its expiry, which asyncpg reads back naive
    (authenticating with such a key would raise TypeError: a 500). The key cache reads it as
    the last instant, in UTC."""
    key = await make_key(servers.database_url)
    conn = await asyncpg.connect(servers.database_url)
    try:
        await conn.execute("UPDATE api_keys SET expires_at = 'infinity'")
        keys = await load_api_keys(conn)
    finally:
        await conn.close()
    snapshot = build_snapshot(basic_document(), keys, 1)
    info = authenticate(f"Bearer {key}", snapshot, "dk_stg_", datetime.now(UTC))
    assert info.publisher_id == PUB
    assert info.expires_at == datetime.max.replace(tzinfo=UTC)
