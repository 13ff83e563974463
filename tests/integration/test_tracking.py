"""The tracking endpoint (shared by both interfaces) and the OpenRTB billing rules: the
impression bills exactly once, a loss notice after billing changes nothing, a bid never answered
is released at expiry."""

from __future__ import annotations

import asyncio
import time
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest

from bidder.runtime import utcnow
from bidder.tracking import PIXEL
from matching.money import split_gross
from store.hot import HotState, connect
from store.pipelined import PipelinedRedis
from tests.support import factories as f
from tests.support.core import Live, live_app
from tests.support.openrtb import (
    NS,
    assert_deprecated,
    assert_error,
    bid_request,
    local,
    post_bid,
    queue_kept,
    queue_records,
    seeded,
    substitute,
    tracking_of,
)
from tests.support.servers import ServerUrls

PRICE_MICROS = 29_867_500  # 250 cents CPM x 119.47 / 1000 = 29.8675 cents


@pytest.fixture
async def live(servers: ServerUrls, clean: None) -> AsyncIterator[Live]:
    async with live_app(queue_kept(servers)) as running:
        yield running


async def make_bid(live: Live) -> dict[str, Any]:
    headers = await seeded(live)
    response = await post_bid(live, headers, bid_request())
    assert response.status_code == 200, response.text
    bid: dict[str, Any] = response.json()["seatbid"][0]["bid"][0]
    return bid


def fired(url: str, price: str = "0.30", aud: str = "119.47") -> str:
    """The URL as the SSP fires it, macros substituted."""
    return local(url.replace("${AUCTION_PRICE}", price).replace("${TOTAL_IMP}", aud))


async def budget(live: Live) -> Any:
    return (await live.rt.hot.read_budgets(utcnow()))[f.CAMPAIGN]


async def test_impression_bills_exactly_once_when_fired_five_times(live: Live) -> None:
    bid = await make_bid(live)
    impression = fired(tracking_of(bid)["impression"])
    responses = await asyncio.gather(*(live.client.get(impression) for _ in range(5)))
    for response in responses:
        assert response.status_code == 200
        assert response.headers["content-type"] == "image/gif"
        assert response.content == PIXEL

    state = await budget(live)
    assert state.spent == PRICE_MICROS
    assert state.reserved == 0
    billed = await queue_records(live.rt.redis, "impression_billed")
    assert len(billed) == 1
    payload = billed[0]["p"]
    net, commission = split_gross(PRICE_MICROS, Decimal("0.15"))
    assert payload["gross_micros"] == PRICE_MICROS
    assert payload["commission_micros"] == commission
    assert payload["net_micros"] == net
    assert payload["net_micros"] + payload["commission_micros"] == PRICE_MICROS
    assert Decimal(payload["commission_rate"]) == Decimal("0.15")
    assert billed[0]["x"]["billing_code"] == "BILL-FIZZY-METRO"
    # One event per offer and event: the four replays are counted, not recorded.
    events = await queue_records(live.rt.redis, "tracking_event")
    assert len(events) == 1
    assert events[0]["x"]["billed"] is True
    assert (events[0]["p"]["price"], events[0]["p"]["aud"]) == ("0.30", "119.47")
    assert live.rt.metrics.tracking_replays.labels("impression")._value.get() == 4
    offer = await live.rt.hot.offer(bid["adid"])
    assert offer is not None
    assert offer["status"] == "billed"


async def test_an_openrtb_pixel_carries_the_deprecation_headers_and_a_core_one_does_not(
    live: Live,
) -> None:
    """The contract: every response of the deprecated interface says so; the same endpoint
    serves the Core API's VAST, which is not deprecated."""
    bid = await make_bid(live)
    for event in ("impression", "complete"):
        response = await live.client.get(fired(tracking_of(bid)[event]))
        assert response.status_code == 200
        assert_deprecated(response)
    forged = await live.client.get(fired(tracking_of(bid)["start"]).replace("token=", "token=x"))
    # Told by the URL's macros, before any offer is read: the interface's error shape and
    # headers (contract: OpenRTB errors), as its loss notice answers a forged URL.
    assert_error(forged, 403, "INVALID_SIGNATURE")
    headers = await seeded(live)
    offer = await live.client.get(
        f"/functions/v1/api/offers/request/{f.SCREEN_MOVING}?vast=true", headers=headers
    )
    assert offer.status_code == 200, offer.text
    core_pixel = local(
        ET.fromstring(offer.json()["vast"]).findtext(".//v:Impression", namespaces=NS) or ""
    )
    response = await live.client.get(core_pixel)
    assert response.status_code == 200
    assert response.content == PIXEL
    assert "Deprecation" not in response.headers
    assert "Link" not in response.headers
    forged = await live.client.get(core_pixel.replace("token=", "token=x"))
    assert forged.status_code == 403
    assert "Deprecation" not in forged.headers
    assert forged.json() == {"error": "Invalid tracking URL signature"}


async def test_a_wrong_method_on_a_pixel_is_answered_as_its_interface_answers(
    live: Live,
) -> None:
    """The contract (Versioning): every response of the deprecated interface carries its
    headers, so a POST on an OpenRTB bid's pixel gets the 405 in the OpenRTB shape; a Core
    VAST's pixel, on the same path, gets the Core API's."""
    bid = await make_bid(live)
    pixel = fired(tracking_of(bid)["impression"])
    for method in ("POST", "PUT"):
        refused = await live.client.request(method, pixel)
        assert_error(refused, 405, "METHOD_NOT_ALLOWED")
        assert "GET" in refused.headers["allow"]
    core_pixel = pixel.replace("&price=0.30", "").replace("&aud=119.47", "")
    assert "price=" not in core_pixel
    assert "aud=" not in core_pixel
    refused = await live.client.post(core_pixel)
    assert refused.status_code == 405
    assert "Deprecation" not in refused.headers
    assert set(refused.json()) == {"error"}
    # Nothing was billed by the refused calls.
    assert (await budget(live)).spent == 0


async def test_bid_outcomes_and_loss_notices_are_counted(live: Live) -> None:
    """An operator watches the impression-billing and loss-notice rates (shared decisions:
    metrics of offers by outcome), an OpenRTB bid's outcome included."""
    billed, lost = await make_bid(live), await make_bid(live)
    for _ in range(2):  # billed once, however often it fires
        assert (await live.client.get(fired(tracking_of(billed)["impression"]))).status_code == 200
    for _ in range(2):  # the first notice, then a retry
        response = await live.client.get(local(substitute(lost["lurl"])))
        assert response.status_code == 204
    metrics = (await live.client.get("/metrics")).text
    assert 'openrtb_bid_outcomes_total{outcome="billed"} 1.0' in metrics
    assert 'openrtb_loss_notices_total{kind="first"} 1.0' in metrics
    assert 'openrtb_loss_notices_total{kind="retry"} 1.0' in metrics


async def test_every_event_is_recorded_and_only_the_impression_bills(live: Live) -> None:
    bid = await make_bid(live)
    urls = tracking_of(bid)
    for event in ("start", "firstQuartile", "midpoint", "thirdQuartile", "complete"):
        assert (await live.client.get(fired(urls[event]))).status_code == 200
    assert (await budget(live)).spent == 0
    assert (await budget(live)).reserved == PRICE_MICROS
    events = await queue_records(live.rt.redis, "tracking_event")
    assert [e["p"]["event"] for e in events] == [
        "start",
        "firstQuartile",
        "midpoint",
        "thirdQuartile",
        "complete",
    ]


async def test_unsubstituted_macros_are_stored_without_a_value(live: Live) -> None:
    """As the contract says of loss notices: tolerated, and stored without the value; the
    values an SSP did substitute are stored as sent."""
    bid = await make_bid(live)
    urls = tracking_of(bid)
    assert (await live.client.get(local(urls["complete"]))).status_code == 200
    assert (await live.client.get(fired(urls["start"], "0.30", "119.47"))).status_code == 200
    events = [e["p"] for e in await queue_records(live.rt.redis, "tracking_event")]
    assert [(e["event"], e["price"], e["aud"]) for e in events] == [
        ("complete", None, None),
        ("start", "0.30", "119.47"),
    ]


@pytest.mark.parametrize(
    "tamper",
    [
        lambda url: url.replace("event=complete", "event=impression"),
        lambda url: url.replace("scr=", "scr=0"),
        lambda url: url.replace("ts=", "ts=1"),
        lambda url: url.replace("token=", "token=x"),
        lambda url: url.split("&token=")[0],
        # A second copy of a signed parameter: the first copy is signed, but the URL is altered
        lambda url: url + "&event=impression",
        lambda url: url + "&offer_id=00000000-0000-4000-8000-000000000000",
        lambda url: url + "&scr=x",
        lambda url: url + "&token=x",
    ],
)
async def test_forged_or_altered_url_is_403_and_changes_nothing(live: Live, tamper: Any) -> None:
    bid = await make_bid(live)
    url = tamper(fired(tracking_of(bid)["complete"]))
    response = await live.client.get(url)
    assert response.status_code == 403
    if "&price=" in url:  # an OpenRTB pixel's URL (its macros), however else it was altered
        assert_deprecated(response)
    assert await queue_records(live.rt.redis, "tracking_event") == []
    assert (await budget(live)).spent == 0


async def test_loss_after_billing_is_recorded_and_changes_nothing(live: Live) -> None:
    bid = await make_bid(live)
    assert (await live.client.get(fired(tracking_of(bid)["impression"]))).status_code == 200
    before = await budget(live)
    response = await live.client.get(local(substitute(bid["lurl"], reason="102")))
    assert response.status_code == 204
    after = await budget(live)
    assert (after.spent, after.reserved) == (before.spent, before.reserved) == (PRICE_MICROS, 0)
    notices = await queue_records(live.rt.redis, "loss_notice")
    assert len(notices) == 1
    assert notices[0]["x"]["after_billing"] is True
    assert notices[0]["x"]["released"] == 0


async def test_impression_after_a_loss_does_not_bill(live: Live) -> None:
    bid = await make_bid(live)
    assert (await live.client.get(local(bid["lurl"]))).status_code == 204
    assert (await live.client.get(fired(tracking_of(bid)["impression"]))).status_code == 200
    state = await budget(live)
    assert (state.spent, state.reserved) == (0, 0)
    assert await queue_records(live.rt.redis, "impression_billed") == []
    assert len(await queue_records(live.rt.redis, "tracking_event")) == 1


async def test_a_bid_never_answered_is_released_at_expiry(servers: ServerUrls, clean: None) -> None:
    settings = queue_kept(servers, OFFER_TTL_SECONDS="1", SWEEP_INTERVAL_SECONDS="0.2")
    async with live_app(settings) as live:
        bid = await make_bid(live)
        assert (await budget(live)).reserved == PRICE_MICROS
        for _ in range(50):
            await asyncio.sleep(0.1)
            if (await budget(live)).reserved == 0:
                break
        state = await budget(live)
        assert (state.reserved, state.spent) == (0, 0)
        offer = await live.rt.hot.offer(bid["adid"])
        assert offer is not None
        assert offer["status"] == "expired"
        # An impression after expiry does not bill.
        assert (await live.client.get(fired(tracking_of(bid)["impression"]))).status_code == 200
        assert (await budget(live)).spent == 0
        metrics = (await live.client.get("/metrics")).text
        assert 'openrtb_bid_outcomes_total{outcome="expired"} 1.0' in metrics
        assert 'outcome="billed"' not in metrics


async def test_a_stalled_redis_gets_the_pixel_a_503_at_once(live: Live) -> None:
    """docs/contract.md#7-durability: with Redis unreachable the service answers at once, no hang. A
    Redis that accepts connections and never answers (a stall) must get the impression pixel its 503
    within the hot path's timeout, not the background clients' 2 s."""
    impression = tracking_of(await make_bid(live))["impression"]

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100_000)  # never answers
        await asyncio.sleep(5)
        writer.close()

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    url = f"redis://127.0.0.1:{server.sockets[0].getsockname()[1]}/0"
    real = live.rt.hot
    fast = PipelinedRedis(url, timeout=0.25)
    background = connect(url, timeout=2.0)
    live.rt.hot = HotState(background, fast=fast)
    try:
        started = time.monotonic()
        response = await live.client.get(fired(impression))
        elapsed = time.monotonic() - started
    finally:
        live.rt.hot = real
        await fast.aclose()
        await background.aclose()
        server.close()
    assert_error(response, 503, "SERVICE_UNAVAILABLE")  # an OpenRTB pixel: that shape
    assert response.headers["retry-after"] == "1"
    assert elapsed < 1.0
