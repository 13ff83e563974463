"""The Core API over HTTP against real Redis and Postgres: the contract's Core API error table,
the Offer object, min_bid_cents, demo mode, external ids, answers and playouts.

Each table row is one request and the answer the contract or decisions prescribe for it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import asyncpg
import pytest
from redis.asyncio import Redis

from bidder.auth import new_api_key
from bidder.settings import Settings
from store.hot import expiry_key, offer_key, shard_of
from store.inventory_repo import create_api_key, revoke_api_key
from tests.support.core import (
    API,
    INVALID_KEY_BODY,
    NOT_FOUND_OFFER,
    PLAY_PRICE_MICROS,
    Core,
    Live,
    count_rows,
    live_app,
    prepare,
)
from tests.support.factories import (
    ADV,
    PUB,
    PUB_OTHER,
    SCREEN_MOVING,
    SCREEN_OTHER_PUB,
    SCREEN_SLOW,
    SCREEN_STATIC,
    basic_document,
    campaign,
    publisher,
    screen,
    seed,
    uid,
)
from tests.support.vast_check import assert_valid_vast

NO_MATCHES = {"error": "No matches available", "status": 404}
UNKNOWN_SCREEN = uid(99, 3)
INACTIVE_SCREEN = uid(98, 3)
MALL_ONLY_SCREEN = uid(97, 3)
RECORD_TABLES = ("offers", "deals", "billing_records", "rejections", "playouts")


@pytest.fixture
async def live(settings: Settings, clean: None) -> AsyncIterator[Live]:
    async with live_app(settings) as running:
        yield running


@pytest.fixture
async def core(live: Live) -> Core:
    doc = basic_document()
    doc.screens += [
        screen(id=INACTIVE_SCREEN, external_id="ext-inactive", name="Off", active=False),
        screen(id=MALL_ONLY_SCREEN, publisher_id=PUB_OTHER, external_id="ext-mall-only", name="M2"),
    ]
    return await prepare(live, doc)


def _parse_utc(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    assert moment.utcoffset() == timedelta(0), text
    return moment


# -- the Offer object ----------------------------------------------------------------------


async def test_offer_object_has_exactly_the_contract_fields(core: Core) -> None:
    before = datetime.now(UTC)
    response = await core.offer(SCREEN_MOVING)
    assert response.status_code == 200, response.text
    offer = response.json()
    assert set(offer) == {"offer_id", "bid_price_cents", "asset_url", "expires_at", "billing_code"}
    assert offer["bid_price_cents"] == 2.5
    assert re.search(r'"bid_price_cents":\s*2\.5[,}]', response.text), "a JSON number, not a string"
    assert offer["asset_url"] == "https://cdn.example/summer.mp4"
    assert offer["billing_code"] == "BILL-FIZZY-METRO"
    assert offer["expires_at"].endswith("Z")
    expires = _parse_utc(offer["expires_at"])
    # Default offer lifetime: 300 s (docs/contract.md#4-offers-reservations-and-outcomes).
    assert before + timedelta(seconds=299) <= expires <= datetime.now(UTC) + timedelta(seconds=300)


async def test_no_cache_keeps_an_offer_a_deal_or_a_playout(core: Core) -> None:
    # An offer request's GET reserves budget for this one call: a cache that replayed its
    # answer would hand out an offer the service did not make (docs/api-core.md, "No caching").
    offer = await core.offer(SCREEN_MOVING)
    assert offer.status_code == 200, offer.text
    assert offer.headers["cache-control"] == "no-store"
    body = {"action": "accept", "accepted_price_cents": offer.json()["bid_price_cents"]}
    accepted = await core.respond(offer.json()["offer_id"], body)
    assert accepted.status_code == 200, accepted.text
    assert accepted.headers["cache-control"] == "no-store"
    confirmed = await core.confirm(accepted.json()["deal_id"], {"duration_seconds": 15})
    assert confirmed.status_code == 200, confirmed.text
    assert confirmed.headers["cache-control"] == "no-store"
    listed = await core.client.get(f"{API}/screens", headers=core.auth)
    assert listed.status_code == 200, listed.text
    assert listed.headers["cache-control"] == "no-store"


@pytest.mark.parametrize(
    ("screen_id", "asset"),
    [
        (SCREEN_MOVING, "https://cdn.example/summer.mp4"),
        (SCREEN_SLOW, "https://cdn.example/summer.jpg"),  # slow screens take no video
        (SCREEN_STATIC, "https://cdn.example/summer.jpg"),
    ],
)
async def test_asset_is_compatible_with_the_screen_type(
    core: Core, screen_id: str, asset: str
) -> None:
    response = await core.offer(screen_id)
    assert response.status_code == 200, response.text
    assert response.json()["asset_url"] == asset


async def test_billing_code_is_the_current_one_or_null(core: Core) -> None:
    first = await core.offer(SCREEN_MOVING)
    assert first.json()["billing_code"] == "BILL-FIZZY-METRO"
    doc = basic_document()
    doc.billing_codes[0].code = "BILL-NEW"
    await seed(core.database_url, doc)
    await core.reload()
    changed = await core.offer(SCREEN_MOVING)
    assert changed.json()["billing_code"] == "BILL-NEW"
    accepted = await core.respond(
        first.json()["offer_id"], {"action": "accept", "accepted_price_cents": 2.5}
    )
    assert accepted.json()["billing_code"] == "BILL-NEW"  # as configured at the answer
    # The other publisher has no billing code with this advertiser: null.
    mall = await core.client.get(
        f"{API}/offers/request/{SCREEN_OTHER_PUB}", headers=core.other_auth
    )
    assert mall.status_code == 200, mall.text
    assert mall.json()["billing_code"] is None
    # Removed (`code: null` in an import): answers carry null from then on.
    doc.billing_codes[0].code = None
    await seed(core.database_url, doc)
    await core.reload()
    removed = await core.offer(SCREEN_MOVING)
    assert removed.json()["billing_code"] is None
    answered = await core.respond(
        changed.json()["offer_id"], {"action": "accept", "accepted_price_cents": 2.5}
    )
    assert answered.status_code == 200, answered.text
    assert answered.json()["billing_code"] is None


# -- the error table: authentication --------------------------------------------------------

_ENDPOINTS = [
    ("GET", f"{API}/offers/request/{SCREEN_MOVING}", None),
    ("GET", f"{API}/offers/request/test-display-test", None),
    ("GET", f"{API}/offers/request/external-id/ext-moving-1", None),
    ("POST", f"{API}/offers/response/test-offer-test", {"action": "reject"}),
    ("POST", f"{API}/offers/response/{uid(5, 6)}", {"action": "reject"}),
    ("POST", f"{API}/playout/confirm/test-deal-test", {}),
]


async def _bad_headers(core: Core) -> list[dict[str, str]]:
    expired_key, expired_hash = new_api_key("dk_stg_")
    revoked_key, revoked_hash = new_api_key("dk_stg_")
    conn = await asyncpg.connect(core.database_url)
    try:
        await create_api_key(
            conn, PUB, expired_hash, "dk_stg_", "staging", datetime.now(UTC) - timedelta(hours=1)
        )
        revoked_id = await create_api_key(conn, PUB, revoked_hash, "dk_stg_", "staging", None)
        await revoke_api_key(conn, revoked_id)
    finally:
        await conn.close()
    await core.reload()
    production_key = "dk_live_" + core.key.removeprefix("dk_stg_")
    return [
        {},
        {"Authorization": ""},
        {"Authorization": core.key},  # no scheme
        {"Authorization": f"Basic {core.key}"},
        {"Authorization": "Bearer "},
        {"Authorization": "Bearer dk_stg_not-a-real-key"},
        {"Authorization": f"Bearer {production_key}"},  # other environment
        {"Authorization": f"Bearer {expired_key}"},
        {"Authorization": f"Bearer {revoked_key}"},
    ]


async def test_every_endpoint_answers_401_for_a_missing_or_bad_key(core: Core) -> None:
    for headers in await _bad_headers(core):
        for method, path, body in _ENDPOINTS:
            response = await core.client.request(method, path, json=body, headers=headers)
            assert response.status_code == 401, (method, path, headers, response.text)
            assert response.json() == INVALID_KEY_BODY
            # RFC 9110 15.5.2: a 401 carries the challenge of the scheme it wants.
            assert response.headers["WWW-Authenticate"] == "Bearer"


# -- the error table: offer requests --------------------------------------------------------


@pytest.mark.parametrize(
    "screen_id",
    [
        UNKNOWN_SCREEN,
        SCREEN_OTHER_PUB,  # exists, but belongs to another publisher
        INACTIVE_SCREEN,
        "not-a-uuid",
    ],
)
async def test_no_match_is_404_with_status(core: Core, screen_id: str) -> None:
    response = await core.offer(screen_id)
    assert response.status_code == 404
    assert response.json() == NO_MATCHES


async def test_nothing_eligible_is_404_even_with_a_min_bid(live: Live) -> None:
    core = await prepare(live, basic_document(campaigns=[], creatives=[]))
    response = await core.offer(SCREEN_MOVING, min_bid_cents="1")
    assert response.status_code == 404
    assert response.json() == NO_MATCHES


@pytest.mark.parametrize(
    ("min_bid", "status"),
    [
        ("0", 200),
        ("2", 200),
        ("2.5", 200),  # equal to the price: reached
        ("2.50", 200),
        ("2.500000", 200),
        ("0.25", 200),
        ("3", 422),
        ("2.51", 422),
        ("2.500001", 422),
        ("2.5000001", 422),  # finer than a micro-cent rounds up: the floor is never undercut
        # Past Decimal's 28 digits, which its context would round down to 2.5: undercut.
        ("2.5000000000000000000000000001", 422),
        ("2.500000000000000000000000000000000000001", 422),
        # No floor, however spelt (0 * 10**999999999 took the worker hours).
        ("0e999999999", 200),
        ("2.5" + "0" * 5000, 200),  # a 500 (int()'s 4,300-digit limit)
        ("1e9", 422),
        ("1e999999999", 422),
    ],
)
async def test_min_bid_cents(core: Core, min_bid: str, status: int) -> None:
    response = await core.offer(SCREEN_MOVING, min_bid_cents=min_bid)
    assert response.status_code == status, response.text
    if status == 422:
        body = response.json()
        assert set(body) == {"error", "status"}
        assert body["status"] == 422
        assert "minimum bid" in body["error"]


@pytest.mark.parametrize(
    "min_bid",
    # The last four Decimal() reads as numbers; no client means them so (decisions: 400).
    [
        "abc",
        "",
        "-1",
        "-0.5",
        "NaN",
        "nan",
        "Infinity",
        "1,5",
        "3_0",
        "\uff13\uff10",
        "\u0969\u0966",
        " 1",
    ],
)
async def test_bad_min_bid_cents_is_400(core: Core, min_bid: str) -> None:
    response = await core.offer(SCREEN_MOVING, min_bid_cents=min_bid)
    assert response.status_code == 400, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert "min_bid_cents" in body["error"]


async def test_an_error_repeats_at_most_64_characters_of_a_value(core: Core) -> None:
    # docs/decisions.md: an error message names a client's value by its first 64 characters
    # and "...", never the whole of a long one.
    value = "7x" + "9" * 60_000
    response = await core.offer(SCREEN_MOVING, min_bid_cents=value)
    assert response.status_code == 400, response.text[:200]
    error = response.json()["error"]
    assert repr(value[:64] + "...") in error
    assert len(error) < 200
    external_id = "ext-" + "q" * 5_000
    missing = await core.client.get(
        f"{API}/offers/request/external-id/{external_id}", headers=core.auth
    )
    assert missing.status_code == 404
    assert repr(external_id[:64] + "...") in missing.json()["error"]
    assert len(missing.json()["error"]) < 200
    offer = (await core.offer(SCREEN_MOVING)).json()
    answer = await core.respond(offer["offer_id"], {"action": "a" * 16_000})
    assert answer.status_code == 400
    assert repr("a" * 64 + "...") in answer.json()["error"]
    assert len(answer.json()["error"]) < 200
    listed = await core.respond(offer["offer_id"], {"action": ["accept"] * 500})
    assert listed.status_code == 400
    assert len(listed.json()["error"]) < 200


@pytest.mark.parametrize(
    ("params", "status"),
    [
        ({"vast": "yes"}, 400),
        ({"vast": ""}, 400),
        ({"demo": "2"}, 400),
        ({"demo": "on"}, 400),
        ({"demo": "false"}, 200),
        ({"demo": "0"}, 200),
        ({"vast": "FALSE"}, 200),
    ],
)
async def test_boolean_query_parameters(core: Core, params: dict[str, str], status: int) -> None:
    response = await core.offer(SCREEN_MOVING, **params)
    assert response.status_code == status, response.text
    if status == 200:
        assert response.json()["offer_id"] != "test-offer-test"
        assert "vast" not in response.json()
    else:
        assert set(response.json()) == {"error"}


# -- external ids ---------------------------------------------------------------------------


async def test_external_id_finds_the_publishers_own_screen(core: Core) -> None:
    # Both publishers use "ext-moving-1"; each key reaches its own screen.
    mine = await core.client.get(
        f"{API}/offers/request/external-id/ext-moving-1", headers=core.auth
    )
    assert mine.status_code == 200, mine.text
    assert mine.json()["asset_url"] == "https://cdn.example/summer.mp4"
    assert mine.json()["billing_code"] == "BILL-FIZZY-METRO"
    theirs = await core.client.get(
        f"{API}/offers/request/external-id/ext-moving-1", headers=core.other_auth
    )
    assert theirs.status_code == 200, theirs.text
    assert theirs.json()["billing_code"] is None  # Mall Media has no billing code: its screen


@pytest.mark.parametrize("external_id", ["ext-unknown-7", "ext-mall-only"])
async def test_unknown_external_id_is_404_naming_it(core: Core, external_id: str) -> None:
    response = await core.client.get(
        f"{API}/offers/request/external-id/{external_id}", headers=core.auth
    )
    assert response.status_code == 404
    body = response.json()
    # Contract, errors: "For 404 and 422 on offer requests they also carry `status`".
    assert body == {"error": body["error"], "status": 404}
    assert external_id in body["error"]


@pytest.mark.parametrize("external_id", ["line/7", "gate 3/é", "a%2Fb"])
async def test_an_external_id_holding_a_slash_is_reached_escaped(
    live: Live, external_id: str
) -> None:
    """An external id may hold any character (the OpenRTB tagid does); escaped in the path,
    `/` included, it finds its screen (the decoded path would have one segment too many, and
    a screen accepted at registration would be unreachable)."""
    doc = basic_document()
    doc.screens[0].external_id = external_id
    core = await prepare(live, doc)
    path = f"{API}/offers/request/external-id/{quote(external_id, safe='')}"
    found = await core.client.get(path, headers=core.auth)
    assert found.status_code == 200, found.text
    unknown = await core.client.get(f"{path}{quote('/x', safe='')}", headers=core.auth)
    assert unknown.status_code == 404
    assert f"{external_id}/x" in unknown.json()["error"]


@pytest.mark.parametrize(
    "spell",
    [
        str.upper,
        lambda u: "{" + u + "}",
        lambda u: u.replace("-", ""),
        lambda u: "urn:uuid:" + u.upper(),
    ],
    ids=["upper", "braces", "no-hyphens", "urn"],
)
async def test_a_uuid_in_any_form_names_the_same_screen_offer_and_deal(
    live: Live, spell: Callable[[str], str]
) -> None:
    """UUIDs are one value in any RFC 4122 form: the screen, offer and deal ids the service
    keeps in lower case are found written otherwise, on the Core API as on the admin and
    screens APIs."""
    doc = basic_document()
    lettered = "abcdef03-0000-4000-8000-0000000000ab"  # the factory ids are digits only
    doc.screens[0].id = lettered
    core = await prepare(live, doc)
    offer = await core.offer(quote(spell(lettered), safe=""))
    assert offer.status_code == 200, offer.text
    offer_id = offer.json()["offer_id"]
    accepted = await core.respond(
        quote(spell(offer_id), safe=""), {"action": "accept", "accepted_price_cents": 1}
    )
    assert accepted.status_code == 200, accepted.text
    deal_id = accepted.json()["deal_id"]
    played = await core.confirm(quote(spell(deal_id), safe=""), {})
    assert played.status_code == 200, played.text
    assert played.json()["deal_id"] == deal_id


async def test_external_id_known_but_nothing_eligible_is_404_with_status(core: Core) -> None:
    response = await core.client.get(
        f"{API}/offers/request/external-id/ext-inactive", headers=core.auth
    )
    assert response.status_code == 404
    assert response.json() == NO_MATCHES


async def test_external_id_min_bid_and_422(core: Core) -> None:
    path = f"{API}/offers/request/external-id/ext-moving-1"
    response = await core.client.get(path, params={"min_bid_cents": "9"}, headers=core.auth)
    assert response.status_code == 422
    assert response.json()["status"] == 422
    bad = await core.client.get(path, params={"min_bid_cents": "x"}, headers=core.auth)
    assert bad.status_code == 400


async def test_external_ids_not_activated_is_403(live: Live) -> None:
    doc = basic_document(
        publishers=[publisher(external_ids_enabled=False), publisher(id=PUB_OTHER, name="M")]
    )
    core = await prepare(live, doc)
    for external_id in ("ext-moving-1", "ext-unknown"):
        response = await core.client.get(
            f"{API}/offers/request/external-id/{external_id}", headers=core.auth
        )
        assert response.status_code == 403
        body = response.json()
        assert set(body) == {"error", "status"}
        assert body["status"] == 403
        assert "not activated for external IDs" in body["error"]
    # The UUID route still works for that publisher.
    assert (await core.offer(SCREEN_MOVING)).status_code == 200


# -- demo mode ------------------------------------------------------------------------------

DEMO_FIELDS = {
    "offer_id": "test-offer-test",
    "bid_price_cents": 2.5,
    "billing_code": "DEMO-BILL-001",
}


async def _hot_state(redis_client: Redis) -> dict[bytes | str, Any]:
    """Every Redis key with its type and size, to prove that nothing was written."""
    state: dict[bytes | str, Any] = {}
    for key in await redis_client.keys("*"):
        kind = await redis_client.type(key)
        if kind == b"hash":
            state[key] = await redis_client.hgetall(key)
        elif kind == b"stream":
            state[key] = await redis_client.xlen(key)
        elif kind == b"zset":
            state[key] = await redis_client.zrange(key, 0, -1, withscores=True)
        else:
            state[key] = kind
    return state


async def test_demo_offer_is_identical_both_ways_and_writes_nothing(
    core: Core, redis_client: Redis
) -> None:
    before_redis = await _hot_state(redis_client)
    before_size = await redis_client.dbsize()
    requests = [
        (f"{API}/offers/request/test-display-test", {}),
        (f"{API}/offers/request/{SCREEN_MOVING}", {"demo": "true"}),
        (f"{API}/offers/request/{UNKNOWN_SCREEN}", {"demo": "TRUE"}),
        (f"{API}/offers/request/anything-at-all", {"demo": "1"}),
        (f"{API}/offers/request/test-display-test", {"demo": "false"}),
        (f"{API}/offers/request/external-id/ext-moving-1", {"demo": "true"}),
        (f"{API}/offers/request/external-id/ext-unknown", {"demo": "true"}),
    ]
    bodies = []
    for path, params in requests:
        start = datetime.now(UTC)
        response = await core.client.get(path, params=params, headers=core.auth)
        assert response.status_code == 200, (path, response.text)
        body = response.json()
        assert set(body) == {*DEMO_FIELDS, "asset_url", "expires_at"}
        for name, value in DEMO_FIELDS.items():
            assert body[name] == value
        expires = _parse_utc(body["expires_at"])
        assert start + timedelta(seconds=599) <= expires <= start + timedelta(seconds=601)
        bodies.append({k: v for k, v in body.items() if k != "expires_at"})
    assert all(b == bodies[0] for b in bodies)
    assert bodies[0]["asset_url"].startswith("https://")

    # Demo answers, accept and reject, and a demo playout: also nothing stored.
    accept = await core.respond(
        "test-offer-test", {"action": "accept", "accepted_price_cents": 2.5}
    )
    assert accept.status_code == 200, accept.text
    assert accept.json()["deal_id"] == "test-deal-test"
    assert accept.json()["billing_id"]
    assert accept.json()["billing_code"] == "DEMO-BILL-001"
    reject = await core.respond("test-offer-test", {"action": "reject", "rejection_reason": "x"})
    assert reject.status_code == 200, reject.text
    assert reject.json()["action"] == "rejected"
    assert reject.json()["rejection_reason"] == "x"
    played = await core.confirm("test-deal-test", {"duration_seconds": 10})
    assert played.status_code == 200, played.text
    assert played.json()["deal_id"] == "test-deal-test"
    assert played.json()["playout_id"]
    again = await core.confirm("test-deal-test")
    assert again.status_code == 200

    assert await redis_client.dbsize() == before_size
    assert await _hot_state(redis_client) == before_redis
    assert await count_rows(core.database_url, *RECORD_TABLES) == dict.fromkeys(RECORD_TABLES, 0)


async def test_demo_validates_like_a_real_offer(core: Core) -> None:
    cases: list[tuple[Any, int]] = [
        ({"action": "decline", "decline_reason": "no"}, 400),
        ({"action": "accept"}, 400),
        ({"action": "accept", "accepted_price_cents": 0}, 400),
        ({"action": "accept", "accepted_price_cents": 2.51}, 400),  # above the demo bid
        ({"action": "accept", "accepted_price_cents": 1}, 200),
        ({"action": "reject", "rejection_reason": "r" * 501}, 400),
    ]
    for body, status in cases:
        response = await core.respond("test-offer-test", body)
        assert response.status_code == status, (body, response.text)
    demo_422 = await core.offer("test-display-test", min_bid_cents="3")
    assert demo_422.status_code == 422
    assert (await core.offer("test-display-test", min_bid_cents="abc")).status_code == 400


async def test_demo_accept_splits_the_price(core: Core) -> None:
    response = await core.respond(
        "test-offer-test", {"action": "accept", "accepted_price_cents": 2}
    )
    body = response.json()
    assert body["gross_price_cents"] == 2
    assert Decimal(str(body["net_price_cents"])) + Decimal(str(body["commission_cents"])) == 2


# -- offer responses: the 400 table ---------------------------------------------------------

_BAD_BODIES: list[tuple[str, Any, str]] = [
    ("no action", {}, "action"),
    ("decline is not supported", {"action": "decline", "decline_reason": "no_slot"}, "action"),
    ("action in capitals", {"action": "ACCEPT", "accepted_price_cents": 1}, "action"),
    ("action empty", {"action": "", "accepted_price_cents": 1}, "action"),
    ("action not a string", {"action": 1}, "action"),
    ("action null", {"action": None}, "action"),
    ("accept without price", {"action": "accept"}, "accepted_price_cents"),
    ("price null", {"action": "accept", "accepted_price_cents": None}, "accepted_price_cents"),
    ("price zero", {"action": "accept", "accepted_price_cents": 0}, "accepted_price_cents"),
    (
        "price zero decimal",
        {"action": "accept", "accepted_price_cents": 0.0},
        "accepted_price_cents",
    ),
    ("price negative", {"action": "accept", "accepted_price_cents": -1}, "accepted_price_cents"),
    ("price a string", {"action": "accept", "accepted_price_cents": "2.5"}, "accepted_price_cents"),
    ("price text", {"action": "accept", "accepted_price_cents": "abc"}, "accepted_price_cents"),
    ("price boolean", {"action": "accept", "accepted_price_cents": True}, "accepted_price_cents"),
    ("price a list", {"action": "accept", "accepted_price_cents": [1]}, "accepted_price_cents"),
    (
        "price finer than a micro-cent",
        {"action": "accept", "accepted_price_cents": 1.0000001},
        "accepted_price_cents",
    ),
    ("price above bid", {"action": "accept", "accepted_price_cents": 2.51}, "bid_price_cents"),
    ("price huge", {"action": "accept", "accepted_price_cents": 1e300}, "accepted_price_cents"),
    ("reason too long", {"action": "reject", "rejection_reason": "r" * 501}, "500"),
    ("reason a number", {"action": "reject", "rejection_reason": 7}, "rejection_reason"),
    # Postgres text cannot hold U+0000: it would be stored altered (as U+FFFD) after a 200.
    ("reason with NUL", {"action": "reject", "rejection_reason": "a\x00b"}, "U+0000"),
    ("body a list", [{"action": "reject"}], "object"),
    ("body a string", "reject", "object"),
]


@pytest.mark.parametrize(
    ("body", "needle"), [(b, n) for _, b, n in _BAD_BODIES], ids=[c for c, _, _ in _BAD_BODIES]
)
async def test_bad_offer_response_is_400(core: Core, body: Any, needle: str) -> None:
    offer = (await core.offer(SCREEN_MOVING)).json()
    response = await core.respond(offer["offer_id"], body)
    assert response.status_code == 400, response.text
    error = response.json()
    assert set(error) == {"error"}
    assert needle in error["error"]
    # The offer is still open: a valid answer afterwards wins.
    ok = await core.respond(offer["offer_id"], {"action": "reject"})
    assert ok.status_code == 200, ok.text


@pytest.mark.parametrize("digits", [4301, 5000])
async def test_a_price_of_thousands_of_digits_is_judged_by_its_rule(
    core: Core, digits: int
) -> None:
    """Well-formed JSON whose integer msgspec cannot decode (more digits than `int()` takes,
    4,300) is no malformed body: its field's rule answers, not "not valid JSON"."""
    offer = (await core.offer(SCREEN_MOVING)).json()
    content = b'{"action": "accept", "accepted_price_cents": 1' + b"0" * digits + b"}"
    response = await core.client.post(
        f"{API}/offers/response/{offer['offer_id']}",
        content=content,
        headers={**core.auth, "Content-Type": "application/json"},
    )
    assert response.status_code == 400, response.text
    assert "accepted_price_cents" in response.json()["error"]
    malformed = await core.client.post(
        f"{API}/offers/response/{offer['offer_id']}",
        content=content[:-1] + b",}",
        headers={**core.auth, "Content-Type": "application/json"},
    )
    assert malformed.json() == {"error": "Request body is not valid JSON"}


async def test_invalid_utf8_after_a_huge_integer_is_still_malformed_json(core: Core) -> None:
    """msgspec stops at the integer it cannot decode, before the rest of the bytes; the
    standard library's decoder, which reads the body then, lets an encoded surrogate through,
    which Postgres cannot store. Invalid UTF-8 anywhere is malformed JSON (RFC 8259 8.1)."""
    offer = (await core.offer(SCREEN_MOVING)).json()
    response = await core.client.post(
        f"{API}/offers/response/{offer['offer_id']}",
        content=b'{"x": 1'
        + b"0" * 5000
        + b', "action": "reject", "rejection_reason": "\xed\xa0\x80"}',
        headers={**core.auth, "Content-Type": "application/json"},
    )
    assert response.status_code == 400, response.text
    assert response.json() == {"error": "Request body is not valid JSON"}


@pytest.mark.parametrize(
    ("content", "content_type", "status"),
    [
        (b'{"action": "accept", ', "application/json", 400),  # malformed JSON
        (b'{"action": "accept", "accepted_price_cents": NaN}', "application/json", 400),
        # Positive, but flushed to 0 micro-cents by Decimal's context: a free deal whose records
        # Postgres would refuse after the 200.
        (b'{"action": "accept", "accepted_price_cents": 1e-9999999}', "application/json", 400),
        (b'{"action": "accept", "accepted_price_cents": 1e-1000100}', "application/json", 400),
        # An exponent Decimal cannot hold (19 digits): InvalidOperation in the decoder, a 500.
        (
            b'{"action": "accept", "accepted_price_cents": 1e99999999999999999999}',
            "application/json",
            400,
        ),
        (b'{"action": "reject", "x": -1e-99999999999999999999}', "application/json", 200),
        # 1 cent, spelt with 5,000 zeros: past int()'s 4,300-digit limit, still no 500.
        (
            b'{"action": "accept", "accepted_price_cents": 1.' + b"0" * 5000 + b"}",
            "application/json",
            200,
        ),
        (b"", "application/json", 400),
        (b"null", "application/json", 400),
        (b"42", "application/json", 400),
        (b'{"action": "reject"}', "text/plain", 400),
        (b'{"action": "reject"}', "application/x-www-form-urlencoded", 400),
        (b'{"action": "reject"}', "", 400),
        (b'{"action": "reject"}', "application/json; charset=utf-8", 200),
        (b'{"action": "reject"}', "Application/JSON", 200),
        (b'{"action": "reject", "pad": "' + b"x" * 17_000 + b'"}', "application/json", 413),
    ],
)
async def test_offer_response_body_format(
    core: Core, content: bytes, content_type: str, status: int
) -> None:
    offer = (await core.offer(SCREEN_MOVING)).json()
    headers = {**core.auth}
    if content_type:
        headers["Content-Type"] = content_type
    response = await core.client.post(
        f"{API}/offers/response/{offer['offer_id']}", content=content, headers=headers
    )
    assert response.status_code == status, response.text
    if status != 200:
        assert set(response.json()) == {"error"}


# -- offer responses: accept, reject, 404 ---------------------------------------------------


async def test_accept_creates_a_deal_and_settles_at_the_accepted_price(core: Core) -> None:
    hot = core.rt.hot
    offer = (await core.offer(SCREEN_MOVING)).json()
    budget = (await hot.read_budgets(datetime.now(UTC)))[campaign().id]
    assert (budget.reserved, budget.spent) == (PLAY_PRICE_MICROS, 0)

    response = await core.respond(
        offer["offer_id"], {"action": "accept", "accepted_price_cents": 2.125}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {
        "success",
        "action",
        "deal_id",
        "billing_id",
        "net_price_cents",
        "commission_cents",
        "gross_price_cents",
        "message",
        "billing_code",
    }
    assert body["success"] is True
    assert body["action"] == "accepted"
    assert body["deal_id"]
    assert body["billing_id"]
    assert body["deal_id"] != body["billing_id"]
    assert body["billing_code"] == "BILL-FIZZY-METRO"
    # Gross is the accepted price; commission 15% of it, half-even to the micro-cent
    # (2.125 x 0.15 = 0.31875), net the rest.
    assert body["gross_price_cents"] == 2.125
    assert body["commission_cents"] == 0.31875
    assert body["net_price_cents"] == 1.80625
    net, commission = (Decimal(str(body[k])) for k in ("net_price_cents", "commission_cents"))
    assert net + commission == Decimal("2.125")

    budget = (await hot.read_budgets(datetime.now(UTC)))[campaign().id]
    assert (budget.reserved, budget.spent) == (0, 2_125_000)  # the rest is released


@pytest.mark.parametrize(
    ("price", "rate", "commission", "net"),
    [
        ("0.000001", "0.15", "0", "0.000001"),  # 0.15 micro-cents rounds half-even to 0
        ("0.00001", "0.15", "0.000002", "0.000008"),  # 1.5 micro-cents -> 2 (half-even)
        ("0.000025", "0.1", "0.000002", "0.000023"),  # 2.5 -> 2 (half-even)
        ("1", "0.3333", "0.3333", "0.6667"),
        ("2.5", "0", "0", "2.5"),
        ("2.5", "1", "2.5", "0"),
    ],
)
async def test_net_plus_commission_is_gross(
    live: Live,
    price: str,
    rate: str,
    commission: str,
    net: str,
) -> None:
    doc = basic_document(
        publishers=[publisher(commission_rate=Decimal(rate)), publisher(id=PUB_OTHER, name="M")]
    )
    core = await prepare(live, doc)
    offer = (await core.offer(SCREEN_MOVING)).json()
    response = await core.client.post(
        f"{API}/offers/response/{offer['offer_id']}",
        content=f'{{"action": "accept", "accepted_price_cents": {price}}}',
        headers={**core.auth, "Content-Type": "application/json"},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert Decimal(str(body["gross_price_cents"])) == Decimal(price)
    assert Decimal(str(body["commission_cents"])) == Decimal(commission)
    assert Decimal(str(body["net_price_cents"])) == Decimal(net)


@pytest.mark.parametrize("reason", [None, "no_slot", "", "r" * 500, "ünïcødé ✓"])
async def test_reject_releases_the_reservation_and_echoes_the_reason(
    core: Core, reason: str | None
) -> None:
    hot = core.rt.hot
    offer = (await core.offer(SCREEN_MOVING)).json()
    body: dict[str, Any] = {"action": "reject"}
    if reason is not None:
        body["rejection_reason"] = reason
    response = await core.respond(offer["offer_id"], body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert set(answer) == {"success", "action", "message", "rejection_reason", "billing_code"}
    assert answer["success"] is True
    assert answer["action"] == "rejected"
    # The contract types the echo as a string: no reason given echoes "".
    assert answer["rejection_reason"] == (reason if reason is not None else "")
    assert answer["billing_code"] == "BILL-FIZZY-METRO"
    budget = (await hot.read_budgets(datetime.now(UTC)))[campaign().id]
    assert (budget.reserved, budget.spent) == (0, 0)


async def test_offer_response_404_is_identical_for_every_reason(core: Core) -> None:
    answered = (await core.offer(SCREEN_MOVING)).json()["offer_id"]
    assert (await core.respond(answered, {"action": "reject"})).status_code == 200
    accepted = (await core.offer(SCREEN_MOVING)).json()["offer_id"]
    ok = await core.respond(accepted, {"action": "accept", "accepted_price_cents": 1})
    assert ok.status_code == 200
    foreign = (await core.offer(SCREEN_MOVING)).json()["offer_id"]
    cases = [
        (uid(77, 6), core.auth),  # well-formed, unknown
        ("not-an-offer", core.auth),
        (answered, core.auth),  # already rejected
        (accepted, core.auth),  # already accepted
        (foreign, core.other_auth),  # another publisher's offer
    ]
    for offer_id, headers in cases:
        for body in ({"action": "reject"}, {"action": "accept", "accepted_price_cents": 1}):
            response = await core.respond(offer_id, body, headers=headers)
            assert response.status_code == 404, (offer_id, response.text)
            assert response.json() == {"error": NOT_FOUND_OFFER}
    # The other publisher's attempt changed nothing: the owner can still answer.
    assert (await core.respond(foreign, {"action": "reject"})).status_code == 200


async def test_exactly_one_of_many_concurrent_answers_wins(core: Core) -> None:
    hot = core.rt.hot
    offer_id = (await core.offer(SCREEN_MOVING)).json()["offer_id"]
    bodies: list[dict[str, Any]] = [
        {"action": "accept", "accepted_price_cents": 2.5},
        {"action": "accept", "accepted_price_cents": 1},
        {"action": "reject", "rejection_reason": "no_slot"},
    ] * 15
    responses = await asyncio.gather(*[core.respond(offer_id, b) for b in bodies])
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] + [404] * (len(bodies) - 1)
    winner = next(r.json() for r in responses if r.status_code == 200)
    budget = (await hot.read_budgets(datetime.now(UTC)))[campaign().id]
    assert budget.reserved == 0
    expected_spent = (
        0
        if winner["action"] == "rejected"
        else int(Decimal(str(winner["gross_price_cents"])) * 10**6)
    )
    assert budget.spent == expected_spent


# -- playout confirmation -------------------------------------------------------------------


async def _deal(core: Core) -> str:
    offer_id = (await core.offer(SCREEN_MOVING)).json()["offer_id"]
    response = await core.respond(offer_id, {"action": "accept", "accepted_price_cents": 2.5})
    assert response.status_code == 200, response.text
    deal_id: str = response.json()["deal_id"]
    return deal_id


async def _playout_records(redis_client: Redis) -> int:
    count = 0
    for key in await redis_client.keys("{b*}:q"):
        entries: list[Any] = await redis_client.xrange(key) or []
        count += sum(fields[b"t"] == b"playout_confirmed" for _, fields in entries)
    return count


def _ago(delta: timedelta, offset: str = "Z") -> str:
    """A played_at `delta` before now (negative: after), ISO 8601 with `offset`'s zone."""
    moment = datetime.now(UTC) - delta
    if offset == "Z":
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    sign = -1 if offset.startswith("-") else 1
    hours, minutes = (int(part) for part in offset[1:].split(":"))
    zone = timedelta(hours=hours, minutes=minutes) * sign
    return (moment + zone).strftime("%Y-%m-%dT%H:%M:%S") + offset


def _later_ago(delta: timedelta, offset: str = "Z") -> Callable[[], str]:
    """`_ago`, worked out when the test runs: a moment near the window's edge, taken when the
    tests are collected, would fall out of the window in a long session."""
    return lambda: _ago(delta, offset)


def _when_run(body: Any) -> Any:
    """`body` with its time-relative values worked out now."""
    if not isinstance(body, dict):
        return body
    return {key: value() if callable(value) else value for key, value in body.items()}


async def test_playout_confirmation_is_idempotent(core: Core, redis_client: Redis) -> None:
    deal_id = await _deal(core)
    first = await core.confirm(
        deal_id,
        {
            "played_at": _ago(timedelta(minutes=3)),
            "duration_seconds": 15,
            "completion_rate": 100,
            "player_version": "4.2.1",
            "screen_resolution": "1920x1080",
        },
    )
    assert first.status_code == 200, first.text
    body = first.json()
    assert set(body) == {"success", "deal_id", "playout_id", "confirmed_at", "message"}
    assert body["success"] is True
    assert body["deal_id"] == deal_id
    _parse_utc(body["confirmed_at"])
    again = await core.confirm(deal_id, {"duration_seconds": 3})
    assert again.status_code == 200, again.text
    assert again.json()["playout_id"] == body["playout_id"]
    assert again.json()["confirmed_at"] == body["confirmed_at"]
    assert await _playout_records(redis_client) == 1


@pytest.mark.parametrize(
    "body",
    [
        None,  # an empty body
        {},
        {"played_at": _later_ago(timedelta(hours=1), "+02:00")},
        {"played_at": _later_ago(timedelta(hours=1), "-09:30")},
        {"played_at": _later_ago(timedelta(seconds=5))},
        {
            "played_at": lambda: _ago(timedelta(hours=2)).replace("T", "t").replace("Z", "z")
        },  # RFC 3339
        # The window: 30 days back (a deal's lifetime; a player's queue), 5 minutes ahead.
        {"played_at": _later_ago(timedelta(days=29, hours=23))},
        {"played_at": _later_ago(-timedelta(minutes=4))},
        {"duration_seconds": 0},
        {"duration_seconds": 2**31 - 1},  # the largest the record's integer column holds
        {"completion_rate": 0},
        {"completion_rate": 100},
        {"completion_rate": 87.5},
        {"player_version": None, "unknown_field": 1},
    ],
)
async def test_playout_accepts_optional_fields(core: Core, body: Any) -> None:
    body = _when_run(body)
    deal_id = await _deal(core)
    if body is None:
        response = await core.client.post(f"{API}/playout/confirm/{deal_id}", headers=core.auth)
    else:
        response = await core.confirm(deal_id, body)
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"completion_rate": 100.01}, "completion_rate"),
        ({"completion_rate": -1}, "completion_rate"),
        ({"completion_rate": "50"}, "completion_rate"),
        ({"duration_seconds": -1}, "duration_seconds"),
        ({"duration_seconds": 1.5}, "duration_seconds"),
        ({"duration_seconds": "15"}, "duration_seconds"),
        ({"duration_seconds": True}, "duration_seconds"),
        # Past the record's integer column: acknowledged, it would be stored as null.
        ({"duration_seconds": 2**31}, "2147483647"),
        ({"duration_seconds": 2**70}, "2147483647"),
        ({"player_version": "4.2\x00"}, "U+0000"),
        ({"screen_resolution": "\x00"}, "U+0000"),
        ({"played_at": "yesterday"}, "played_at"),
        ({"played_at": "2026-13-40T00:00:00Z"}, "played_at"),
        ({"played_at": 1714817730}, "played_at"),
        ({"played_at": "2026-05-04T10:15:30"}, "played_at"),  # no time zone
        # Valid ISO 8601, but past the years 1 to 9999 once in UTC.
        ({"played_at": "9999-12-31T23:59:59-12:00"}, "played_at"),
        ({"played_at": "0001-01-01T00:00:00+14:00"}, "played_at"),
        # Outside the window around now: 30 days back, 5 minutes ahead.
        ({"played_at": "2999-01-01T00:00:00Z"}, "30 days"),
        ({"played_at": _later_ago(timedelta(days=30, minutes=10))}, "30 days"),
        ({"played_at": _later_ago(-timedelta(minutes=6), "+01:00")}, "5 minutes"),
        ({"played_at": "2000-01-01T00:00:00Z"}, "played_at"),
        ({"player_version": 4}, "player_version"),
        ({"screen_resolution": ["1920", "1080"]}, "screen_resolution"),
        ([], "object"),
    ],
)
async def test_bad_playout_is_400(core: Core, body: Any, needle: str) -> None:
    body = _when_run(body)
    deal_id = await _deal(core)
    response = await core.confirm(deal_id, body)
    assert response.status_code == 400, response.text
    assert set(response.json()) == {"error"}
    assert needle in response.json()["error"]
    assert (await core.confirm("test-deal-test", body)).status_code == 400  # demo validates too


async def test_playout_of_unknown_or_foreign_deal_is_404(core: Core) -> None:
    deal_id = await _deal(core)
    offer_id = (await core.offer(SCREEN_MOVING)).json()["offer_id"]
    for target, headers in [
        (deal_id, core.other_auth),
        (uid(66, 7), core.auth),
        ("not-a-deal", core.auth),
        (offer_id, core.auth),  # an offer id is no deal id
    ]:
        response = await core.confirm(target, {}, headers=headers)
        assert response.status_code == 404, response.text
        assert set(response.json()) == {"error"}
    assert (await core.confirm(deal_id, {})).status_code == 200


async def test_playout_body_format(core: Core) -> None:
    deal_id = await _deal(core)
    path = f"{API}/playout/confirm/{deal_id}"
    cases = [
        (b"{not json", "application/json", 400),
        (b'{"duration_seconds": 1}', "text/plain", 400),
        (b"x" * 20_000, "application/json", 413),
    ]
    for content, content_type, status in cases:
        response = await core.client.post(
            path, content=content, headers={**core.auth, "Content-Type": content_type}
        )
        assert response.status_code == status, response.text
        assert set(response.json()) == {"error"}


# -- metrics --------------------------------------------------------------------------------


async def test_offer_outcomes_are_counted(core: Core) -> None:
    registry = core.rt.metrics.registry

    def count(outcome: str) -> float:
        return registry.get_sample_value("offers_total", {"outcome": outcome}) or 0.0

    made = (await core.offer(SCREEN_MOVING)).json()["offer_id"]
    other = (await core.offer(SCREEN_MOVING)).json()["offer_id"]
    await core.offer(UNKNOWN_SCREEN)
    await core.offer(SCREEN_MOVING, min_bid_cents="100")
    await core.respond(made, {"action": "accept", "accepted_price_cents": 2.5})
    await core.respond(other, {"action": "reject"})
    await core.offer("test-display-test")  # demo: not an offer outcome
    # A third offer runs out: moved into the past in Redis, the runtime's sweeper expires it.
    late = (await core.offer(SCREEN_MOVING)).json()["offer_id"]
    shard = shard_of(late)
    assert shard is not None
    await core.rt.redis.hset(offer_key(shard, late), "expires_ms", "1")
    await core.rt.redis.zadd(expiry_key(shard), {late: 1})
    for _ in range(100):  # the sweeper runs every 0.5 s in tests
        if count("expired"):
            break
        await asyncio.sleep(0.05)
    outcomes = ("made", "no_match", "below_min", "accepted", "rejected", "expired")
    assert {o: count(o) for o in outcomes} == {
        "made": 3,
        "no_match": 1,
        "below_min": 1,
        "accepted": 1,
        "rejected": 1,
        "expired": 1,
    }


async def test_advertiser_of_billing_code(core: Core) -> None:
    """Sanity of the fixture the billing-code tests rely on."""
    snapshot = core.rt.inventory.snapshot
    assert snapshot is not None
    assert snapshot.billing_code(ADV, PUB) == "BILL-FIZZY-METRO"


# -- vast=true ------------------------------------------------------------------------------

NS = {"v": "http://www.iab.com/VAST"}


@pytest.mark.parametrize(
    ("screen_id", "mime", "asset"),
    [
        (SCREEN_MOVING, "video/mp4", "https://cdn.example/summer.mp4"),
        (SCREEN_STATIC, "image/jpeg", "https://cdn.example/summer.jpg"),
    ],
)
async def test_vast_document_is_valid_vast_4(
    core: Core, screen_id: str, mime: str, asset: str
) -> None:
    response = await core.offer(screen_id, vast="true")
    assert response.status_code == 200, response.text
    offer = response.json()
    assert set(offer) == {
        "offer_id",
        "bid_price_cents",
        "asset_url",
        "expires_at",
        "billing_code",
        "vast",
    }
    root = assert_valid_vast(offer["vast"])
    assert root.get("version") == "4.0"
    ad = root.find("v:Ad", NS)
    assert ad is not None
    assert ad.get("id") == offer["offer_id"]
    assert root.findtext("v:Ad/v:InLine/v:Expires", namespaces=NS) == "300"
    creative = root.find("v:Ad/v:InLine/v:Creatives/v:Creative", NS)
    assert creative is not None
    assert creative.get("id") == f"{offer['offer_id']}_creative"
    assert creative.get("sequence") == "1"
    media = root.find(".//v:MediaFile", NS)
    assert media is not None
    assert media.get("id") == f"{offer['offer_id']}_media"
    assert media.get("type") == mime
    assert media.get("delivery") == "progressive"
    assert (media.text or "").strip() == asset
    extension = root.find(".//v:Extensions/v:Extension", NS)
    assert extension is not None
    assert extension.findtext("v:OfferId", namespaces=NS) == offer["offer_id"]
    assert Decimal(extension.findtext("v:BidPriceCents", namespaces=NS) or "") == Decimal("2.5")
    assert extension.findtext("v:BillingCode", namespaces=NS) == "BILL-FIZZY-METRO"
    events = {t.get("event") for t in root.iter(f"{{{NS['v']}}}Tracking")}
    assert "complete" in events
    for url in [t.text or "" for t in root.iter(f"{{{NS['v']}}}Tracking")]:
        assert f"offer_id={offer['offer_id']}" in url
        assert f"pub={PUB}" in url
        assert f"scr={screen_id}" in url


async def test_demo_vast_is_valid_and_identical_both_ways(core: Core, redis_client: Redis) -> None:
    before = await redis_client.dbsize()
    by_id = await core.offer("test-display-test", vast="true")
    by_flag = await core.offer("test-display-test", vast="1", demo="true")
    assert by_id.status_code == by_flag.status_code == 200
    root = assert_valid_vast(by_id.json()["vast"])
    ad = root.find("v:Ad", NS)
    assert ad is not None
    assert ad.get("id") == "test-offer-test"
    assert root.findtext("v:Ad/v:InLine/v:Expires", namespaces=NS) == "600"
    assert await redis_client.dbsize() == before


async def test_demo_vast_on_a_real_screen_names_the_demo_screen(core: Core) -> None:
    """demo=true on any screen answers what test-display-test answers (contract, Demo mode):
    the tracking URLs name the demo screen, not the one asked about."""
    by_flag = await core.offer(SCREEN_MOVING, vast="true", demo="true")
    by_id = await core.offer("test-display-test", vast="true")
    screens = set()
    for response in (by_flag, by_id):
        assert response.status_code == 200, response.text
        root = assert_valid_vast(response.json()["vast"])
        for element in root.iter():
            if element.tag.endswith(("}Impression", "}Tracking")) and element.text:
                screens.update(parse_qs(urlsplit(element.text.strip()).query)["scr"])
    assert screens == {"test-display-test"}


@pytest.mark.parametrize(
    "nested",
    [
        "[" * 1200 + "]" * 1200,
        '{"a":' * 1200 + "1" + "}" * 1200,
    ],
)
async def test_json_nested_past_the_decoder_is_400(core: Core, nested: str) -> None:
    """A body of a few KB nested deeper than any decoder recurses: 400, the offer untouched."""
    offer_id = (await core.offer(SCREEN_MOVING)).json()["offer_id"]
    body = ('{"action": "reject", "x": ' + nested + "}").encode()
    headers = {**core.auth, "Content-Type": "application/json"}
    for path in (f"{API}/offers/response/{offer_id}", f"{API}/offers/response/test-offer-test"):
        response = await core.client.post(path, content=body, headers=headers)
        assert response.status_code == 400, response.text
        assert set(response.json()) == {"error"}
    deal_id = await _deal(core)
    response = await core.client.post(
        f"{API}/playout/confirm/{deal_id}", content=body, headers=headers
    )
    assert response.status_code == 400, response.text
    assert (await core.respond(offer_id, {"action": "reject"})).status_code == 200
