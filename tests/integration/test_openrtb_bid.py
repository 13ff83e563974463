"""POST /functions/v1/openrtb-2-6/bid: the BidResponse to the letter of the contract table, the
outcomes (bid, 204, nbr 0, nbr 1), the minimum bid and the deprecation headers.

Expected values come from the contract and decisions: price = cpm x audience / 1000 cents, sent
as EUR; the minimum bid is bidfloor x audience / 10 cents rounded up to a whole cent.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

import pytest
from openapi_schema_validator import OAS30Validator

from bidder.runtime import utcnow
from bidder.settings import Settings
from bidder.signing import verify
from store.hot import HotState, connect
from tests.support import factories as f
from tests.support.core import Live, live_app
from tests.support.openrtb import (
    BID,
    MIGRATION_GUIDE,
    NS,
    ROOT,
    assert_deprecated,
    assert_error,
    bid_request,
    post_bid,
    query_of,
    queue_kept,
    queue_records,
    seeded,
    validate_bid_response,
    validate_vast,
)
from tests.support.records import write_queued
from tests.support.servers import ServerUrls


@pytest.fixture
async def live(servers: ServerUrls, clean: None) -> AsyncIterator[Live]:
    """The app on the test's own loop (requests really interleave; the runtime is reachable)."""
    async with live_app(queue_kept(servers)) as running:
        yield running


# -- the bid ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [BID, ROOT])
async def test_bid_response_is_exactly_the_contract_table(
    live: Live, settings: Settings, path: str
) -> None:
    headers = await seeded(live)
    response = await post_bid(live, headers, bid_request(), path)

    assert response.status_code == 200, response.text
    assert_deprecated(response)
    body = response.json()
    validate_bid_response(body)
    assert set(body) == {"id", "seatbid", "bidid", "cur", "ext"}
    assert body["id"] == "auction-42"
    assert body["cur"] == "EUR"
    uuid.UUID(body["bidid"])
    assert body["ext"]["platform"]["deprecated"] is True
    assert body["ext"]["platform"]["migration_guide"] == MIGRATION_GUIDE
    assert body["ext"]["platform"]["deprecation_message"]
    assert len(body["seatbid"]) == 1
    assert len(body["seatbid"][0]["bid"]) == 1
    bid = body["seatbid"][0]["bid"][0]
    assert "nurl" not in bid
    assert "burl" not in bid
    uuid.UUID(bid["id"])
    assert bid["id"] != body["bidid"]
    assert bid["impid"] == "imp-1"
    # 250 cents CPM x 119.47 / 1000 = 29.8675 cents per play = 0.298675 EUR
    assert Decimal(str(bid["price"])) == Decimal("0.298675")
    offer_id = bid["adid"]
    uuid.UUID(offer_id)
    assert bid["cid"] == offer_id
    assert bid["crid"] == offer_id
    assert bid["adomain"] == ["fizzy.example"]
    assert bid["dealid"] == "deal-7"
    assert (bid["w"], bid["h"]) == (1920, 1080)

    lurl = bid["lurl"]
    assert lurl.startswith(f"http://testserver.local/functions/v1/openrtb-2-6/loss/{offer_id}?")
    for macro in (
        "reason=${AUCTION_LOSS}",
        "price=${AUCTION_PRICE}",
        "cur=${AUCTION_CURRENCY}",
        "mtw=${AUCTION_MIN_TO_WIN}",
        "aid=${AUCTION_ID}",
    ):
        assert macro in lurl
    assert "${TOTAL_IMP}" not in lurl
    params = query_of(lurl)
    assert params["pub"] == f.PUB
    assert params["scr"] == f.SCREEN_MOVING
    assert abs(int(params["ts"]) - time.time() * 1000) < 60_000
    assert verify(
        settings.secrets.signing_secrets, urlsplit(lurl).path, params, ("pub", "scr", "ts")
    )

    vast = validate_vast(bid["adm"])
    ad = vast.find("v:Ad", NS)
    assert ad is not None
    assert ad.get("id") == offer_id
    media = vast.find(".//v:MediaFile", NS)
    assert media is not None
    assert (media.get("width"), media.get("height")) == ("1920", "1080")
    assert media.get("type") == "video/mp4"
    assert media.text == "https://cdn.example/summer.mp4"
    assert vast.findtext(".//v:Duration", namespaces=NS) == "00:00:15"
    assert vast.findtext(".//v:Expires", namespaces=NS) in {
        str(settings.offers.ttl_seconds),
        str(settings.offers.ttl_seconds - 1),
    }
    assert vast.findtext(".//v:Extension/v:BillingCode", namespaces=NS) == "BILL-FIZZY-METRO"
    assert vast.findtext(".//v:Extension/v:BidPriceCents", namespaces=NS) == "29.8675"
    urls = [vast.findtext(".//v:Impression", namespaces=NS) or ""]
    urls += [t.text or "" for t in vast.findall(".//v:Tracking", NS)]
    assert [query_of(u)["event"] for u in urls] == [
        "impression",
        "start",
        "firstQuartile",
        "midpoint",
        "thirdQuartile",
        "complete",
    ]
    for url in urls:
        assert url.startswith("http://testserver.local/functions/v1/track?")
        assert "price=${AUCTION_PRICE}" in url
        assert "aud=${TOTAL_IMP}" in url
        assert query_of(url)["offer_id"] == offer_id

    # The bid reserved its price.
    budget = (await live.rt.hot.read_budgets(utcnow()))[f.CAMPAIGN]
    assert budget.reserved == 29_867_500
    # ...and queued no record: the open bid lives in Redis until its outcome's record carries it.
    assert await queue_records(live.rt.redis) == []
    held = await live.rt.hot.offer(offer_id)
    assert held is not None
    assert held["status"] == "open"


@pytest.mark.parametrize("outcome", ["loss_notice", "offer_expired"])
async def test_the_outcome_record_carries_the_bid_request_fields_to_postgres(
    live: Live, settings: Settings, outcome: str
) -> None:
    """A bid queues no record; its outcome's record (a loss notice, or the sweeper's expiry)
    carries the request's auction id, impression id, PMP deal id and audience in `o`, and the
    record writer puts them on the offer's row."""
    headers = await seeded(live)
    response = await post_bid(live, headers, bid_request())
    assert response.status_code == 200, response.text
    bid = response.json()["seatbid"][0]["bid"][0]
    offer_id = bid["adid"]
    assert await queue_records(live.rt.redis) == []

    if outcome == "loss_notice":
        lurl = bid["lurl"].replace("reason=${AUCTION_LOSS}", "reason=102")
        parts = urlsplit(lurl)
        notice = await live.client.get(f"{parts.path}?{parts.query}")
        assert notice.status_code == 204, notice.text
    else:
        past_expiry = utcnow() + timedelta(seconds=settings.offers.ttl_seconds + 1)
        assert await live.rt.hot.expire_due(past_expiry) == {"openrtb": 1}

    records = await queue_records(live.rt.redis)
    assert [r["t"] for r in records] == [outcome]
    carried = records[0]["o"]
    assert carried["offer_id"] == offer_id
    assert (carried["auction_id"], carried["imp_id"], carried["pmp_deal_id"]) == (
        "auction-42",
        "imp-1",
        "deal-7",
    )
    assert Decimal(carried["audience"]) == Decimal("119.47")

    pool = await live.rt.postgres.connect()
    await write_queued(pool, live.rt.redis)
    row = await pool.fetchrow(
        "SELECT status, channel, auction_id, imp_id, pmp_deal_id, audience, bid_price_cents "
        "FROM offers WHERE offer_id = $1",
        offer_id,
    )
    assert row is not None
    assert dict(row) == {
        "status": "lost" if outcome == "loss_notice" else "expired",
        "channel": "openrtb",
        "auction_id": "auction-42",
        "imp_id": "imp-1",
        "pmp_deal_id": "deal-7",
        "audience": Decimal("119.47"),
        "bid_price_cents": Decimal("29.8675"),  # 250 cents CPM x 119.47 / 1000
    }


async def test_legacy_totalaud_prices_like_qty(live: Live) -> None:
    headers = await seeded(live)
    request = bid_request(ext={"totalaud": 40})
    del request["imp"][0]["qty"]
    response = await post_bid(live, headers, request)
    assert response.status_code == 200, response.text
    # 250 x 40 / 1000 = 10 cents = 0.1 EUR
    assert Decimal(str(response.json()["seatbid"][0]["bid"][0]["price"])) == Decimal("0.1")


async def test_qty_multiplier_wins_over_totalaud(live: Live) -> None:
    headers = await seeded(live)
    response = await post_bid(
        live, headers, bid_request(qty={"multiplier": 20}, ext={"totalaud": 40})
    )
    assert response.status_code == 200, response.text
    assert Decimal(str(response.json()["seatbid"][0]["bid"][0]["price"])) == Decimal("0.05")


@pytest.mark.parametrize(
    ("cpm_cents", "status"),
    [("250", 204), ("251.1", 204), ("251.12", 200)],
)
async def test_floor_of_30_cents(live: Live, cpm_cents: str, status: int) -> None:
    """Floor 2.50 EUR CPM x 119.47 audience / 10 = 29.8675 cents, rounded up: 30 cents.
    250 CPM pays 29.8675 (204); 251.1 pays 29.9989 (204); 251.12 pays 30.0011 (bid)."""
    headers = await seeded(live, campaigns=[f.campaign(cpm_cents=Decimal(cpm_cents))])
    request = bid_request(pmp={"deals": [{"id": "deal-7", "bidfloor": 2.50, "at": 3}]})
    response = await post_bid(live, headers, request)
    assert response.status_code == status, response.text
    assert_deprecated(response)
    if status == 204:
        assert response.content == b""


# -- outcomes --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer dk_stg_not-a-key", "Basic abc", "Bearer ", "dk_stg_x"],
)
async def test_missing_or_invalid_key_is_401(live: Live, authorization: str | None) -> None:
    await seeded(live)
    headers = {} if authorization is None else {"Authorization": authorization}
    response = await post_bid(live, headers, bid_request())
    assert_error(response, 401, "INVALID_API_KEY")
    assert response.headers["WWW-Authenticate"] == "Bearer"


async def test_other_environment_key_is_401(live: Live) -> None:
    await seeded(live)
    key = await f.make_key(live.database_url, prefix="dk_live_")
    await live.rt.inventory.reload()
    response = await post_bid(live, {"Authorization": f"Bearer {key}"}, bid_request())
    assert_error(response, 401, "INVALID_API_KEY")


async def test_resolution_mismatch_is_200_nbr_0(live: Live) -> None:
    headers = await seeded(live)
    response = await post_bid(live, headers, bid_request(video={"w": 1280, "h": 720}))
    assert response.status_code == 200
    assert_deprecated(response)
    assert response.json() == {"id": "auction-42", "seatbid": [], "nbr": 0, "cur": "EUR"}
    validate_bid_response(response.json())


@pytest.mark.parametrize(
    ("imp", "reason"),
    [
        ({"tagid": "no-such-screen"}, "unknown tagid"),
        ({"video": {"w": 1920, "h": 1080, "mimes": ["video/webm"]}}, "MIME type not allowed"),
        ({"video": {"w": 1920, "h": 1080, "mimes": []}}, "an empty MIME list takes no type"),
        ({"tagid": "ext-static-1", "video": {"w": 1920, "h": 1080}}, "only video fits, static"),
    ],
)
async def test_no_bid_is_204_without_body(live: Live, imp: dict[str, Any], reason: str) -> None:
    # The static screen takes images only; drop the image creative so nothing fits its type.
    headers = await seeded(live, creatives=[f.creative()])
    response = await post_bid(live, headers, bid_request(**imp))
    assert response.status_code == 204, reason
    assert response.content == b""
    assert_deprecated(response)


async def test_another_publishers_tagid_is_204(live: Live) -> None:
    """A tagid the key's publisher does not have is unknown, even if another publisher has it."""
    headers = await seeded(
        live,
        screens=[f.screen(id=f.SCREEN_OTHER_PUB, publisher_id=f.PUB_OTHER, external_id="theirs")],
    )
    response = await post_bid(live, headers, bid_request(tagid="theirs"))
    assert response.status_code == 204


async def test_image_creative_on_a_static_screen(live: Live) -> None:
    headers = await seeded(live)
    response = await post_bid(
        live,
        headers,
        bid_request(tagid="ext-static-1", video={"w": 1920, "h": 1080, "mimes": ["image/jpeg"]}),
    )
    assert response.status_code == 200, response.text
    vast = validate_vast(response.json()["seatbid"][0]["bid"][0]["adm"])
    media = vast.find(".//v:MediaFile", NS)
    assert media is not None
    assert media.get("type") == "image/jpeg"


async def test_redis_down_is_200_nbr_1_at_once(live: Live) -> None:
    headers = await seeded(live)
    dead = connect("redis://127.0.0.1:1/0", timeout=0.2)
    real = live.rt.hot
    live.rt.hot = HotState(dead)
    try:
        started = time.monotonic()
        response = await post_bid(live, headers, bid_request())
        elapsed = time.monotonic() - started
    finally:
        live.rt.hot = real
        await dead.aclose()
    assert response.status_code == 200
    assert_deprecated(response)
    assert response.json() == {"id": "auction-42", "seatbid": [], "nbr": 1, "cur": "EUR"}
    assert elapsed < 1.5
    # And it recovers by itself.
    assert (await post_bid(live, headers, bid_request())).status_code == 200


async def test_metrics_count_bids_and_no_bids(live: Live) -> None:
    headers = await seeded(live)
    await post_bid(live, headers, bid_request())
    await post_bid(live, headers, bid_request(tagid="nope"))
    metrics = (await live.client.get("/metrics")).text
    assert "openrtb_bids_total 1.0" in metrics
    assert 'openrtb_no_bids_total{reason="unknown_screen"} 1.0' in metrics


async def test_malformed_json_is_invalid_request(live: Live) -> None:
    headers = await seeded(live)
    response = await post_bid(live, headers, b'{"id": "x", "imp": [')
    assert_error(response, 400, "INVALID_REQUEST")


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "application/jsonx"],
)
async def test_a_body_not_sent_as_json_is_invalid_request(
    live: Live, content_type: str | None
) -> None:
    # The contract's headers for the bid: `Content-Type: application/json` (as the Core API).
    headers = await seeded(live)
    sent = {**headers} if content_type is None else {**headers, "Content-Type": content_type}
    content = json.dumps(bid_request()).encode()
    response = await live.client.post(BID, content=content, headers=sent)
    body = assert_error(response, 400, "INVALID_REQUEST")
    assert "Content-Type" in body["message"]
    charset = {**headers, "Content-Type": "Application/JSON; charset=utf-8"}
    assert (await live.client.post(BID, content=content, headers=charset)).status_code == 200


async def test_invalid_utf8_in_a_field_the_service_does_not_read_is_invalid_request(
    live: Live,
) -> None:
    headers = await seeded(live)
    document = {**bid_request(), "site": {"name": "@@"}}
    body = json.dumps(document).encode().replace(b"@@", b"\xff")  # a lone byte: not UTF-8
    # A valid body with the same shape bids: only the byte makes it malformed.
    assert (await post_bid(live, headers, body.replace(b"\xff", b"ok"))).status_code == 200
    assert_error(await post_bid(live, headers, body), 400, "INVALID_REQUEST")


# -- numbers and nesting no decoder or price can be asked to handle ---------------------------


def _with_bare_numbers(document: dict[str, Any]) -> bytes:
    """The document as JSON, its Decimals written as JSON numbers of any size (1e999999)."""
    decimals: list[Decimal] = []

    def placeholder(value: Any) -> str:
        decimals.append(value)
        return f"@@{len(decimals) - 1}@@"

    text = json.dumps(document, default=placeholder)
    for index, value in enumerate(decimals):
        text = text.replace(f'"@@{index}@@"', str(value))
    assert "@@" not in text
    return text.encode()


@pytest.mark.parametrize(
    "qty",
    [
        {"multiplier": 1e10},  # the bound of a screen's own audience
        {"multiplier": Decimal("1e999999")},  # once a 30-second int() of a million digits
        {"multiplier": Decimal("1e999999999")},  # past Decimal's exponent range in arithmetic
    ],
)
async def test_an_audience_of_10_billion_or_more_is_no_total_audience(
    live: Live, qty: dict[str, Any]
) -> None:
    headers = await seeded(live)
    body = _with_bare_numbers(bid_request(qty=qty))
    started = time.monotonic()
    response = await post_bid(live, headers, body)
    assert time.monotonic() - started < 2.0
    assert_error(response, 400, "NO_TOTAL_AUDIENCE")


async def test_an_audience_beyond_18_decimals_is_rounded_there_and_priced(live: Live) -> None:
    """28 significant digits at most: the price uses every digit the record keeps, and a
    Postgres numeric (16,383 decimals at most) can always store it."""
    headers = await seeded(live)
    cases = [
        # (audience sent, price in EUR: 250 cents CPM x audience / 1000 / 100, half-even µ¢)
        ("1." + "0" * 17000 + "1", Decimal("0.0025")),  # 1.000000000000000000
        ("119.4700000000000000004", Decimal("0.298675")),  # 119.470000000000000000
        ("5e-324", None),  # kept positive (1e-18): a play priced at nothing, no bid
    ]
    no_floor = {"deals": [{"id": "deal-7", "bidfloor": 0, "at": 3}]}
    for audience, price in cases:
        request = bid_request(qty={"multiplier": Decimal(audience)}, pmp=no_floor)
        body = _with_bare_numbers(request)
        response = await post_bid(live, headers, body)
        if price is None:
            assert response.status_code == 204, response.text
            continue
        assert response.status_code == 200, response.text
        assert Decimal(str(response.json()["seatbid"][0]["bid"][0]["price"])) == price


async def test_a_price_below_a_millionth_of_a_euro_is_a_plain_number(live: Live) -> None:
    """docs/contract.md#1-money: JSON output is a plain number, so no exponent ("2E-8") however
    small."""
    headers = await seeded(live)
    no_floor = {"deals": [{"id": "deal-7", "bidfloor": 0, "at": 3}]}
    request = bid_request(qty={"multiplier": Decimal("0.00001")}, pmp=no_floor)
    response = await post_bid(live, headers, _with_bare_numbers(request))
    assert response.status_code == 200, response.text
    # 250 cents CPM x 0.00001 / 1000 = 2.5 micro-cents, half-even 2: 0.00000002 EUR.
    assert '"price":0.00000002,' in response.text


async def test_an_audience_just_below_10_billion_is_priced(live: Live) -> None:
    headers = await seeded(live)
    response = await post_bid(live, headers, bid_request(qty={"multiplier": 9_999_999_999}))
    # Priced, then refused by the budget (250 cents CPM x 1e10 / 1000 is far above it): 204.
    assert response.status_code == 204, response.text


@pytest.mark.parametrize("bidfloor", ["1e999999", "1e999999999", "1e15"])
async def test_a_floor_no_campaign_can_pay_is_a_quick_204(live: Live, bidfloor: str) -> None:
    headers = await seeded(live)
    deal = {"id": "deal-7", "bidfloor": Decimal(bidfloor), "at": 3}
    body = _with_bare_numbers(bid_request(pmp={"deals": [deal]}))
    started = time.monotonic()
    response = await post_bid(live, headers, body)
    assert time.monotonic() - started < 2.0
    assert response.status_code == 204, response.text


@pytest.mark.parametrize(
    "body",
    [
        b'{"id": "x", "ext": ' + b"[" * 1200 + b"]" * 1200 + b"}",
        b'{"id": "x", "ext": ' + b'{"a": ' * 1200 + b"1" + b"}" * 1200 + b"}",
    ],
)
async def test_json_nested_past_the_decoder_is_invalid_request(live: Live, body: bytes) -> None:
    headers = await seeded(live)
    assert_error(await post_bid(live, headers, body), 400, "INVALID_REQUEST")


async def test_options_carries_the_deprecation_headers(live: Live) -> None:
    response = await live.client.options(BID)
    assert response.status_code in (200, 204), response.text
    assert_deprecated(response)
    # Once, also where the error answer already carries them (no such path: 404).
    unknown = await live.client.options(f"{ROOT}nope")
    assert unknown.headers.get_list("deprecation") == ["true"]
    assert len(unknown.headers.get_list("link")) == 1


async def test_an_audience_finer_than_4_decimals_is_recorded_as_priced(live: Live) -> None:
    """The offer row keeps the audience the price was computed from, every decimal of it."""
    headers = await seeded(live)
    response = await post_bid(live, headers, bid_request(qty={"multiplier": 119.471234}))
    assert response.status_code == 200, response.text
    bid = response.json()["seatbid"][0]["bid"][0]
    # 250 cents CPM x 119.471234 / 1000 = 29.8678085 cents, half-even to the micro-cent:
    # 29.867808 cents (docs/contract.md#1-money and docs/contract.md#3-matching-and-price),
    # 0.29867808 EUR.
    assert Decimal(str(bid["price"])) == Decimal("0.29867808")
    parts = urlsplit(bid["lurl"].replace("reason=${AUCTION_LOSS}", "reason=102"))
    assert (await live.client.get(f"{parts.path}?{parts.query}")).status_code == 204
    pool = await live.rt.postgres.connect()
    await write_queued(pool, live.rt.redis)
    row = await pool.fetchrow(
        "SELECT audience, bid_price_cents FROM offers WHERE offer_id = $1", bid["adid"]
    )
    assert row is not None
    assert dict(row) == {
        "audience": Decimal("119.471234"),
        "bid_price_cents": Decimal("29.867808"),
    }


def _deal_without_at() -> dict[str, Any]:
    body = bid_request()
    del body["imp"][0]["pmp"]["deals"][0]["at"]
    return body


def _legacy(qty: Any) -> dict[str, Any]:
    body = bid_request(ext={"totalaud": 119.47})
    body["imp"][0]["qty"] = qty
    return body


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (bid_request(), 200),
        # null counts as absent (docs/decisions.md): bids, and the schema says so.
        (_legacy(None), 200),
        (bid_request(ext=None), 200),
        (bid_request(banner=None), 200),
        (bid_request(video={"w": 1920, "h": 1080, "mimes": None}), 200),
        # beside a qty, ext.totalaud is not read, whatever it holds; nor are these
        (bid_request(ext={"totalaud": "x"}), 200),
        (bid_request(qty={"multiplier": 119.47, "sourcetype": "x", "vendor": None}), 200),
        # the contract's table requires the deal's `at` (an absent one does not inherit)
        (_deal_without_at(), 400),
        (bid_request(banner={"w": 1, "h": 1}), 400),
        (_legacy({}), 400),
    ],
)
async def test_the_served_schema_takes_exactly_the_requests_the_endpoint_takes(
    live: Live, body: dict[str, Any], status: int
) -> None:
    """docs/contract.md#6-openrtb-path: openapi.json describes exactly what the endpoint does. Each
    body is checked against the served BidRequest schema and sent; both must agree."""
    headers = await seeded(live)
    served = await live.client.get(f"{ROOT}openapi.json", headers=headers)
    document = served.json()
    schema = {
        **document["components"]["schemas"]["BidRequest"],
        "components": document["components"],
    }
    valid = OAS30Validator(schema).is_valid(json.loads(json.dumps(body)))
    response = await post_bid(live, headers, body)
    assert response.status_code == status, response.text
    assert valid == (status == 200)


@pytest.mark.parametrize(
    ("bidfloor", "status"),
    [
        ("2.5", 200),  # 2.5 x 100 / 10 = 25 cents, the play's price: met exactly
        # Decimal's default context would round a 29-digit floor down to 25 cents: undercut.
        ("2.5000000000000000000000000001", 204),
        ("2.5" + "0" * 40 + "1", 204),
        # 19-digit exponents, which Decimal cannot hold: the rules judge them, never a 500.
        ("1e99999999999999999999", 204),
        ("1e-99999999999999999999", 200),  # a positive floor under a cent: 1 cent, met
    ],
)
async def test_a_floor_is_never_undercut_however_it_is_spelt(
    live: Live, bidfloor: str, status: int
) -> None:
    """docs/contract.md#1-money: the minimum bid rounds UP to a whole cent, a floor is never
    undercut. The seeded campaign's CPM is 250 cents: 0.25 cents per audience unit, 25 cents for
    100."""
    headers = await seeded(live)
    body = bid_request(
        qty={"multiplier": 100},
        pmp={"deals": [{"id": "deal-7", "bidfloor": "@@floor@@", "at": 3}]},
    )
    raw = json.dumps(body).replace('"@@floor@@"', bidfloor).encode()
    response = await post_bid(live, headers, raw)
    assert response.status_code == status, response.text
