"""Hostile extras never hold a record back: no record can block another.

Every client-supplied field of loss notices, tracking pixels and playout confirmations is sent
with extreme numbers, odd types and odd JSON, each request between two accepts of the Core API,
on the whole app with its in-process record writer. What must hold (docs/architecture.md,
"Records"; docs/decisions.md, "Hostile extras"):

- every accept (its deal and its billing record) reaches Postgres within seconds;
- a value no column can hold is refused at the edge with 400 in the interface's error shape;
- whatever was answered 2xx is stored (a loss notice's body exactly as sent), nothing is
  dead-lettered, and the queue drains to zero;
- a signed tracking pixel fired 50 times is one row.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import asyncpg
import httpx
import pytest

from store.hot import queue_keys
from store.records import dead_letter_key, queue_stats
from tests.support.core import Core, live_app, prepare
from tests.support.factories import SCREEN_MOVING
from tests.support.openrtb import bid_request, local, post_bid, substitute, tracking_of
from tests.support.servers import ServerUrls, make_settings

#: Within this many seconds of the last request, every accept is in Postgres.
ACCEPTS_LAND_WITHIN_S = 5.0

# Numbers at and past every limit, and things that only look like numbers.
EXTREMES = [
    "1e1000000",
    "-1e1000000",
    "-0",
    "NaN",
    "Infinity",
    "1" * 40,
    "1e-400",
    "1e99999999999999999999",
    "1e-99999999999999999999",
    "99999999999999.9999995",  # rounds up past NUMERIC(20, 6)
    "99999999999999.999999",  # the largest it holds
    "2147483648",  # past a Postgres integer
    "0x1F",
    "1_000",
    "\u0661\u0662",
    "",
    "[1,2]",
    '{"a": 1}',
    "caf\u00e9 \x00 end",
]
# The CPM macros: 400 for a number whose magnitude reaches 10^14 (after rounding to six
# decimals); the rest is stored (NULL when it is no number).
CPM_REFUSED = {
    "1e1000000",
    "-1e1000000",
    "1" * 40,
    "1e99999999999999999999",
    "99999999999999.9999995",
}
# `reason`: 400 for a whole number past a Postgres integer.
REASON_REFUSED = {"1" * 40, "2147483648"}

# (body, JSON or not): a JSON body is stored as its very text; any other as a JSON string.
ODD_BODIES: list[tuple[bytes, bool]] = [
    (b"[1,2]", True),
    (b"[[1]]", True),
    (b"[]", True),
    (b"1e1000000", True),
    (b"-0", True),
    (b"1" * 40, True),
    (b"1e-400", True),
    (b'"just a string"', True),
    (b"null", True),
    (b"true", True),
    (b'{"a": 1, "a": 2}', True),
    (b'{"k": 1.50, "z": [1e2, -0.0]}', True),
    (b'{"nul": "\\u0000"}', True),
    (b" [1 , 2]\n", True),
    (b"[" * 64 + b"]" * 64, True),
    (b"[" * 65 + b"]" * 65, False),
    (b"NaN", False),
    (b"{'single': 'quotes'}", False),
    (b"\xff\xfe not utf-8", False),
    (b"plain \x00 text", False),
]

# (playout body, expected status): every field with odd values and types.
PLAYOUTS: list[tuple[Any, int]] = [
    ({"completion_rate": Decimal("1e1000000")}, 400),
    ({"completion_rate": Decimal("1e-400")}, 200),
    ({"completion_rate": Decimal("-0")}, 200),
    ({"completion_rate": "NaN"}, 400),
    ({"completion_rate": 10**40}, 400),
    ({"completion_rate": [50]}, 400),
    ({"duration_seconds": 10**40}, 400),
    ({"duration_seconds": Decimal("1e-400")}, 400),
    ({"duration_seconds": Decimal("-0")}, 200),
    ({"duration_seconds": "15"}, 400),
    ({"played_at": "2999-01-01T00:00:00Z"}, 400),
    ({"played_at": "NaN"}, 400),
    ({"played_at": Decimal("1e1000000")}, 400),
    ({"played_at": None}, 200),
    ({"player_version": "v" * 201}, 400),
    ({"player_version": {"a": 1}}, 400),
    ({"screen_resolution": "caf\u00e9"}, 200),
    ({"screen_resolution": 1920}, 400),
    (b"[1,2]", 400),
    (b"1e1000000", 400),
    (b"{", 400),
]


@dataclass
class Ledger:
    """What the run was answered, to check against Postgres."""

    deals: list[str] = field(default_factory=list)
    losses: dict[str, tuple[str, str, int]] = field(default_factory=dict)  # offer: field, value
    bodies: dict[str, tuple[bytes, bool]] = field(default_factory=dict)
    pixels: dict[str, str] = field(default_factory=dict)  # offer id: the value sent
    playouts: dict[str, int] = field(default_factory=dict)  # deal id: status
    last_request: float = 0.0


@pytest.fixture
async def core(servers: ServerUrls, clean: None) -> AsyncIterator[Core]:
    """The whole app with its record writer running, on a seeded inventory."""
    async with live_app(make_settings(servers)) as running:
        yield await prepare(running)


def _encode(value: Any) -> bytes:
    """A JSON body with Decimals written as JSON numbers, as a client would send them."""
    if isinstance(value, bytes):
        return value
    return json.dumps(value, default=_number).replace('"__n:', "").replace(':n__"', "").encode()


def _number(value: Any) -> str:
    if isinstance(value, Decimal):
        return f"__n:{value}:n__"
    raise TypeError(value)


async def _accept(core: Core, ledger: Ledger) -> None:
    offer = await core.offer(SCREEN_MOVING)
    assert offer.status_code == 200, offer.text
    answer = await core.respond(
        offer.json()["offer_id"], {"action": "accept", "accepted_price_cents": 2.5}
    )
    assert answer.status_code == 200, answer.text
    ledger.deals.append(answer.json()["deal_id"])


async def _bid(core: Core, n: int) -> dict[str, Any]:
    request = bid_request() | {"id": f"auction-{n}"}
    response = await post_bid(core.live, core.auth, request)
    assert response.status_code == 200, response.text
    bid: dict[str, Any] = response.json()["seatbid"][0]["bid"][0]
    return bid


def _openrtb_error(response: httpx.Response) -> None:
    assert response.status_code == 400, response.text
    assert set(response.json()) >= {"error", "message"}
    assert response.json()["error"] == "INVALID_REQUEST"


async def _drive(core: Core) -> Ledger:
    ledger = Ledger()
    n = 0
    for name in ("reason", "price", "cur", "mtw", "aid"):
        for value in EXTREMES:
            await _accept(core, ledger)
            n += 1
            bid = await _bid(core, n)
            url = local(substitute(bid["lurl"], **{name: quote(value, safe="")}))
            response = await core.client.get(url)
            refused = (name in ("price", "mtw") and value in CPM_REFUSED) or (
                name == "reason" and value in REASON_REFUSED
            )
            if refused:
                _openrtb_error(response)
            else:
                assert response.status_code == 204, (name, value, response.text)
            ledger.losses[bid["adid"]] = (name, value, response.status_code)
    for body, is_json in ODD_BODIES:
        await _accept(core, ledger)
        n += 1
        bid = await _bid(core, n)
        response = await core.client.post(
            local(bid["lurl"]), content=body, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 204, (body, response.text)
        ledger.bodies[bid["adid"]] = (body, is_json)
    for value in EXTREMES:
        await _accept(core, ledger)
        n += 1
        bid = await _bid(core, n)
        complete = tracking_of(bid)["complete"]
        url = complete.replace("${AUCTION_PRICE}", quote(value, safe="")).replace(
            "${TOTAL_IMP}", quote(value, safe="")
        )
        response = await core.client.get(local(url))
        assert response.status_code == 200, (value, response.text)
        ledger.pixels[bid["adid"]] = value
    for body, status in PLAYOUTS:
        await _accept(core, ledger)
        deal_id = ledger.deals[-1]
        response = await core.client.post(
            f"/functions/v1/api/playout/confirm/{deal_id}",
            content=_encode(body),
            headers={**core.auth, "Content-Type": "application/json"},
        )
        assert response.status_code == status, (body, response.text)
        if status == 400:
            assert set(response.json()) == {"error"}
        ledger.playouts[deal_id] = status
    await _accept(core, ledger)
    ledger.last_request = time.monotonic()
    return ledger


async def _wait_for_accepts(conn: asyncpg.Connection, deals: list[str]) -> float:
    """Seconds until every deal and its billing record are in Postgres."""
    started = time.monotonic()
    while time.monotonic() - started < 30:
        landed = await conn.fetchval(
            "SELECT count(*) FROM deals d JOIN billing_records b USING (deal_id) "
            "WHERE d.deal_id = ANY($1::uuid[])",
            deals,
        )
        if landed == len(deals):
            return time.monotonic() - started
        await asyncio.sleep(0.05)
    raise AssertionError(f"{len(deals) - landed} accepts not in Postgres after 30 s")


async def _drained(redis: Any, within: float) -> None:
    """Wait until the record queues are empty (every record written or dead-lettered)."""
    for _ in range(int(within / 0.05)):
        if (await queue_stats(redis))[0] == 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"record queues not drained in {within} s: {await queue_stats(redis)}")


def _storable(text: str) -> str:
    """Client text as the writer stores it: a NUL (which Postgres text refuses) as U+FFFD."""
    return text.replace("\x00", "\ufffd")


_DECIMAL_TEXT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", re.ASCII)


def _cpm(value: str) -> Decimal | None:
    """What a CPM macro's column holds: the number rounded to six decimals (a far tinier one is
    zero), NULL for anything that is not a decimal number written in ASCII."""
    if not _DECIMAL_TEXT.fullmatch(value):
        return None
    _, _, exponent = value.lower().partition("e")
    if exponent and int(exponent) < -30:
        return Decimal(0)
    return Decimal(value).quantize(Decimal("0.000001"))


async def test_hostile_extras_between_accepts_hold_no_accept_back(
    core: Core, servers: ServerUrls
) -> None:
    ledger = await _drive(core)
    conn = await asyncpg.connect(servers.database_url)
    try:
        waited = await _wait_for_accepts(conn, ledger.deals)
        since_last = time.monotonic() - ledger.last_request
        assert since_last < ACCEPTS_LAND_WITHIN_S, (waited, since_last)
        redis = core.rt.redis
        await _drained(redis, within=15)
        assert [await redis.xlen(dead_letter_key(s)) for s in range(len(queue_keys()))] == [
            0
        ] * len(queue_keys())

        losses = {
            str(r["offer_id"]): r
            for r in await conn.fetch(
                "SELECT offer_id, reason, price, currency, min_to_win, auction_id, "
                "body::text AS body FROM loss_notices"
            )
        }
        for offer_id, (name, value, status) in ledger.losses.items():
            if status == 400:
                assert offer_id not in losses, (name, value)
                continue
            row = losses[offer_id]
            if name == "cur":
                assert row["currency"] == (_storable(value) or None)
            elif name == "aid":
                assert row["auction_id"] == (_storable(value) or None)
            elif name in ("price", "mtw"):
                column = "price" if name == "price" else "min_to_win"
                assert row[column] == _cpm(value), (name, value)
            else:
                digits = value.lstrip("-")
                whole = digits.isascii() and digits.isdigit()
                assert row["reason"] == (int(value) if whole else None), value
        for offer_id, (body, is_json) in ledger.bodies.items():
            stored = losses[offer_id]["body"]
            if is_json:
                assert stored == body.decode(), body  # the very text sent
            else:
                assert json.loads(stored) == body.decode("utf-8", errors="replace"), body
        pixels = {
            str(r["offer_id"]): r
            for r in await conn.fetch(
                "SELECT offer_id, price, audience FROM tracking_events WHERE event = 'complete'"
            )
        }
        for offer_id, value in ledger.pixels.items():
            expected = _storable(value) or None
            assert (pixels[offer_id]["price"], pixels[offer_id]["audience"]) == (
                expected,
                expected,
            )
        played = {
            str(r["deal_id"])
            for r in await conn.fetch(
                "SELECT deal_id FROM playouts WHERE deal_id = ANY($1::uuid[])",
                list(ledger.playouts),
            )
        }
        assert played == {d for d, status in ledger.playouts.items() if status == 200}
    finally:
        await conn.close()


async def test_a_signed_pixel_replayed_50_times_is_one_row(core: Core, servers: ServerUrls) -> None:
    """Each event of an offer is stored once; the replays are counted in
    tracking_event_replays_total{event}, and an impression still bills once."""
    bid = await _bid(core, 1)
    urls = tracking_of(bid)
    for event in ("impression", "complete"):
        url = local(urls[event].replace("${AUCTION_PRICE}", "0.30").replace("${TOTAL_IMP}", "9"))
        responses = await asyncio.gather(*(core.client.get(url) for _ in range(50)))
        assert {r.status_code for r in responses} == {200}
    await _drained(core.rt.redis, within=10)
    conn = await asyncpg.connect(servers.database_url)
    try:
        rows = await conn.fetch(
            "SELECT event, count(*) AS n FROM tracking_events WHERE offer_id = $1 GROUP BY event",
            bid["adid"],
        )
        billed = await conn.fetchval(
            "SELECT count(*) FROM billing_records WHERE offer_id = $1", bid["adid"]
        )
    finally:
        await conn.close()
    assert {r["event"]: r["n"] for r in rows} == {"impression": 1, "complete": 1}
    assert billed == 1
    replays = core.rt.metrics.tracking_replays
    assert replays.labels("impression")._value.get() == 49
    assert replays.labels("complete")._value.get() == 49
