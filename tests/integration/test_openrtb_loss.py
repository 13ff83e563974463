"""GET/POST /functions/v1/openrtb-2-6/loss/{offer_id} and the budget rules of the OpenRTB path:
a bid reserves, a loss notice releases, retries only count, limits, signature and window."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bidder.openrtb import loss_url
from bidder.runtime import utcnow
from bidder.settings import Settings
from store.hot import HotState, connect, epoch_ms
from store.record_rows import loss_body_json
from tests.support import factories as f
from tests.support.core import Live, live_app
from tests.support.openrtb import (
    assert_deprecated,
    assert_error,
    bid_request,
    local,
    post_bid,
    queue_kept,
    queue_records,
    seeded,
    substitute,
)
from tests.support.servers import ServerUrls

PRICE_MICROS = 29_867_500  # 250 cents CPM x 119.47 / 1000 = 29.8675 cents


@pytest.fixture
async def live(servers: ServerUrls, clean: None) -> AsyncIterator[Live]:
    async with live_app(queue_kept(servers)) as running:
        yield running


async def make_bid(live: Live) -> tuple[str, str]:
    """(offer id, lurl) of a fresh bid on the seeded moving screen."""
    headers = await seeded(live)
    response = await post_bid(live, headers, bid_request())
    assert response.status_code == 200, response.text
    bid = response.json()["seatbid"][0]["bid"][0]
    return bid["adid"], bid["lurl"]


async def reserved(live: Live) -> int:
    return (await live.rt.hot.read_budgets(utcnow()))[f.CAMPAIGN].reserved


async def test_loss_notice_releases_the_reservation(live: Live) -> None:
    offer_id, lurl = await make_bid(live)
    assert await reserved(live) == PRICE_MICROS

    url = substitute(lurl, reason="102", price="3.10", cur="EUR", mtw="3.2", aid="auction-42")
    response = await live.client.get(local(url))
    assert response.status_code == 204, response.text
    assert response.content == b""
    assert_deprecated(response)
    budget = (await live.rt.hot.read_budgets(utcnow()))[f.CAMPAIGN]
    assert budget.reserved == 0
    assert budget.spent == 0

    notices = await queue_records(live.rt.redis, "loss_notice")
    assert len(notices) == 1
    assert notices[0]["o"]["offer_id"] == offer_id
    payload = notices[0]["p"]
    assert payload["reason"] == 102
    assert payload["price"] == "3.10"
    assert payload["cur"] == "EUR"
    assert payload["mtw"] == "3.2"
    assert payload["aid"] == "auction-42"
    assert payload["body"] is None
    assert notices[0]["x"]["after_billing"] is False
    assert notices[0]["x"]["released"] == PRICE_MICROS
    offer = await live.rt.hot.offer(offer_id)
    assert offer is not None
    assert offer["status"] == "lost"


async def test_retries_only_increment_the_counter(live: Live) -> None:
    offer_id, lurl = await make_bid(live)
    url = local(substitute(lurl, reason="102"))
    for _ in range(3):
        assert (await live.client.get(url)).status_code == 204
    offer = await live.rt.hot.offer(offer_id)
    assert offer is not None
    assert offer["loss_count"] == "3"
    assert len(await queue_records(live.rt.redis, "loss_notice")) == 1
    assert await reserved(live) == 0


async def test_unsubstituted_macros_are_stored_as_absent(live: Live) -> None:
    _, lurl = await make_bid(live)
    assert (await live.client.get(local(lurl))).status_code == 204
    payload = (await queue_records(live.rt.redis, "loss_notice"))[0]["p"]
    assert payload == {
        "reason": None,
        "price": None,
        "cur": None,
        "mtw": None,
        "aid": None,
        "body": None,
    }


@pytest.mark.parametrize(
    ("sent", "reason", "price"),
    [
        (("102", "3.10"), 102, "3.10"),
        (("-1", "-.5"), -1, "-.5"),
        (("1e2", "1E-3"), None, "1E-3"),  # a reason code is a whole number
        # Python's parsers take these; no URL means them as numbers (decisions: null).
        (("1_000", "1_0.5"), None, None),
        (("\u0661\u0662\u0663", "\uff11\uff12"), None, None),
        (("12 3", "NaN"), None, None),
        (("0x10", "Infinity"), None, None),
        (("1.0", "1e5x"), None, None),
        # Finer than the column's six decimals: rounded half up; far finer is zero.
        (("1", "0.0000005"), 1, "0.000001"),
        (("1", "1e-400"), 1, "0.000000"),
        (("2147483647", "-0"), 2147483647, "-0"),
    ],
)
async def test_only_ascii_numbers_are_numbers(
    live: Live, sent: tuple[str, str], reason: int | None, price: str | None
) -> None:
    _, lurl = await make_bid(live)
    url = local(substitute(lurl, reason=sent[0], price=sent[1]))
    assert (await live.client.get(url)).status_code == 204
    payload = (await queue_records(live.rt.redis, "loss_notice"))[0]["p"]
    assert (payload["reason"], payload["price"]) == (reason, price)


@pytest.mark.parametrize(
    "macros",
    [
        {"price": "1e1000000"},
        {"price": "100000000000000"},  # 10^14: past NUMERIC(20, 6)
        {"price": "-1e14"},
        {"price": "99999999999999.9999995"},  # rounds up to 10^14
        {"price": "1" + "0" * 39},
        {"mtw": "1e1000000"},
        {"mtw": "9" * 40},
        {"reason": "2147483648"},  # past the integer column
        {"reason": "-" + "9" * 40},
    ],
)
async def test_numbers_no_column_holds_are_refused(live: Live, macros: dict[str, str]) -> None:
    """A macro that is a number beyond its column (CPMs below 10^14 at six decimals, `reason` a
    Postgres integer) is 400 in the OpenRTB error shape: nothing recorded, the bid still
    reserved until a valid notice or its expiry."""
    _, lurl = await make_bid(live)
    response = await live.client.get(local(substitute(lurl, **macros)))
    body = assert_error(response, 400, "INVALID_REQUEST")
    (name,) = macros
    assert name in body["message"]
    assert await queue_records(live.rt.redis, "loss_notice") == []
    assert await reserved(live) == PRICE_MICROS
    # The largest values the columns hold are fine.
    edge = {"reason": "2147483647", "price": "99999999999999.999999", "mtw": "-1e13"}
    response = await live.client.get(local(substitute(lurl, **edge)))
    assert response.status_code == 204, response.text
    assert await reserved(live) == 0


@pytest.mark.parametrize(
    ("body", "stored"),
    [
        (b'{"seat": "s1", "reason": 102}', {"seat": "s1", "reason": 102}),
        (b"plain text diagnostics", "plain text diagnostics"),
        (b"", None),
        # JSON nested past what a decoder recurses into (a few KB, far under 16 KB): text.
        (b"[" * 1200 + b"]" * 1200, "[" * 1200 + "]" * 1200),
        (b'{"a":' * 1000 + b"1" + b"}" * 1000, '{"a":' * 1000 + "1" + "}" * 1000),
        # Deeper than the 64 levels kept as JSON: text too, so no later reader trips on it.
        (b"[" * 65 + b"]" * 65, "[" * 65 + "]" * 65),
        (b"[" * 64 + b"]" * 64, json.loads("[" * 64 + "]" * 64)),
    ],
)
async def test_post_body_is_stored_for_diagnostics(live: Live, body: bytes, stored: Any) -> None:
    _, lurl = await make_bid(live)
    response = await live.client.post(
        local(substitute(lurl, reason="0")),
        content=body,
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 204, response.text
    payload = (await queue_records(live.rt.redis, "loss_notice"))[0]["p"]
    # What the `json` column receives: a JSON body exactly as sent, anything else as a string.
    assert loss_body_json(payload) == (None if stored is None else stored_text(body, stored))
    assert payload["reason"] == 0


def stored_text(body: bytes, stored: Any) -> str:
    """A JSON body's own text; a text body as a JSON string."""
    return body.decode() if not isinstance(stored, str) else json.dumps(stored)


async def test_body_above_16_kb_is_413(live: Live) -> None:
    offer_id, lurl = await make_bid(live)
    big = json.dumps({"pad": "x" * 16_400}).encode()
    response = await live.client.post(local(lurl), content=big)
    assert_error(response, 413, "PAYLOAD_TOO_LARGE")

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it arrives
        for _ in range(20):
            yield b"x" * 1024

    response = await live.client.post(local(lurl), content=chunks())
    assert_error(response, 413, "PAYLOAD_TOO_LARGE")
    # Exactly 16 KB is fine.
    response = await live.client.post(local(lurl), content=b"x" * 16_384)
    assert response.status_code == 204
    assert await reserved(live) == 0
    assert offer_id


async def test_query_above_4_kb_is_414(live: Live) -> None:
    _, lurl = await make_bid(live)
    url = local(substitute(lurl, aid="a" * 4_200))
    response = await live.client.get(url)
    assert_error(response, 414, "URI_TOO_LONG")
    assert await reserved(live) == PRICE_MICROS


@pytest.mark.parametrize(
    "tamper",
    [
        lambda url: url.replace("scr=", "scr=0"),
        lambda url: url.replace("pub=", "pub=0"),
        lambda url: url.replace("token=", "token=A"),
        lambda url: url.split("&token=")[0],
        lambda url: url.replace("/loss/", "/loss/0"),
        # A second copy of a signed parameter: the first copy is signed, but the URL is altered
        lambda url: url + "&scr=de000003-0000-4000-a000-000000000002",
        lambda url: url + "&pub=x",
        lambda url: url + "&ts=1",
        lambda url: url + "&token=A",
    ],
)
async def test_altered_or_forged_url_is_403_and_changes_nothing(live: Live, tamper: Any) -> None:
    _, lurl = await make_bid(live)
    response = await live.client.get(local(tamper(lurl)))
    assert_error(response, 403, "INVALID_SIGNATURE")
    assert await reserved(live) == PRICE_MICROS
    assert await queue_records(live.rt.redis, "loss_notice") == []


@pytest.mark.parametrize(("age_ms", "status"), [(23 * 3_600_000, 204), (25 * 3_600_000, 403)])
async def test_valid_for_24_hours(live: Live, settings: Settings, age_ms: int, status: int) -> None:
    offer_id, _ = await make_bid(live)
    old = loss_url(settings, offer_id, f.PUB, f.SCREEN_MOVING, epoch_ms(utcnow()) - age_ms)
    response = await live.client.get(local(old))
    assert response.status_code == status
    assert_deprecated(response)


async def test_signed_with_an_older_secret_still_verifies(live: Live, settings: Settings) -> None:
    from tests.support.servers import SIGNING_SECRETS, ServerUrls, make_settings

    offer_id, _ = await make_bid(live)
    older = make_settings(
        ServerUrls(settings.redis.url, settings.postgres.url, None, settings.redis.mode),
        SIGNING_SECRETS=SIGNING_SECRETS.split(",")[1],
    )
    url = loss_url(older, offer_id, f.PUB, f.SCREEN_MOVING, epoch_ms(utcnow()))
    assert (await live.client.get(local(url))).status_code == 204
    assert await reserved(live) == 0


async def test_unknown_offer_with_a_valid_signature_is_204(live: Live, settings: Settings) -> None:
    await seeded(live)
    unknown = "00000000-0000-4000-8000-00000000dead"
    url = loss_url(settings, unknown, f.PUB, f.SCREEN_MOVING, epoch_ms(utcnow()))
    assert (await live.client.get(local(url))).status_code == 204


async def test_redis_down_is_503_and_the_url_stays_valid(live: Live) -> None:
    _, lurl = await make_bid(live)
    dead = connect("redis://127.0.0.1:1/0", timeout=0.2)
    real = live.rt.hot
    live.rt.hot = HotState(dead)
    try:
        response = await live.client.get(local(lurl))
    finally:
        live.rt.hot = real
        await dead.aclose()
    assert_error(response, 503, "SERVICE_UNAVAILABLE")
    assert (await live.client.get(local(lurl))).status_code == 204
    assert await reserved(live) == 0


async def test_no_authorization_needed_and_a_key_changes_nothing(live: Live) -> None:
    _, lurl = await make_bid(live)
    response = await live.client.get(local(lurl), headers={"Authorization": "Bearer junk"})
    assert response.status_code == 204
