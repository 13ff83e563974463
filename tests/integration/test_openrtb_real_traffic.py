"""What real SSP traffic sends beyond the contract's fields, and the bridge honours
(docs/api-openrtb.md, "Fields the bridge reads"): advertiser and category blocks (`badv`,
`bcat`, `cattax`; the Core API's `blocked_domains` and `blocked_categories`), currencies (`cur`,
`bidfloorcur`), test traffic (`test`) and the offer's lifetime (`imp.exp`)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest

from bidder.runtime import utcnow
from bidder.settings import Settings
from matching.inventory import Advertiser, ExchangeRate, Place, Targeting
from store.inventory_repo import export_document
from tests.support import factories as f
from tests.support.core import Live, live_app
from tests.support.openrtb import (
    bid_request,
    local,
    post_bid,
    query_of,
    queue_kept,
    queue_records,
    seeded,
    substitute,
    validate_bid_response,
)
from tests.support.servers import ServerUrls

NS = {"v": "http://www.iab.com/VAST"}
ADV_OTHER = f.uid(2, 2)
CAMPAIGN_OTHER = f.uid(2, 4)
CREATIVE_OTHER = f.uid(3, 5)
API = "/functions/v1/api"


@pytest.fixture
async def live(servers: ServerUrls, clean: None) -> AsyncIterator[Live]:
    async with live_app(queue_kept(servers)) as running:
        yield running


async def two_advertisers(live: Live, **campaign: Any) -> dict[str, str]:
    """Fizzy (fizzy.example, IAB8-5 Cocktails/Beer) at a CPM of 1000 cents, and a cheaper
    runner-up, Acme (shop.acme.example, IAB19 Technology) at 500: the best bid is Fizzy's."""
    return await seeded(
        live,
        advertisers=[
            f.advertiser(categories=["IAB8-5"]),
            Advertiser(id=ADV_OTHER, name="Acme", domain="shop.acme.example", categories=["IAB19"]),
        ],
        campaigns=[
            f.campaign(cpm_cents=Decimal(1000), **campaign),
            f.campaign(
                id=CAMPAIGN_OTHER, advertiser_id=ADV_OTHER, name="Gadgets", cpm_cents=Decimal(500)
            ),
        ],
        creatives=[f.creative(), f.creative(id=CREATIVE_OTHER, campaign_id=CAMPAIGN_OTHER)],
    )


async def winner(live: Live, headers: dict[str, str], **request: Any) -> dict[str, Any] | None:
    """The bid for `bid_request()` with `request`'s top-level fields; None for a 204."""
    response = await post_bid(live, headers, {**bid_request(), **request})
    if response.status_code == 204:
        return None
    assert response.status_code == 200, response.text
    body = response.json()
    validate_bid_response(body)
    bid: dict[str, Any] = body["seatbid"][0]["bid"][0]
    return bid


# -- blocks ----------------------------------------------------------------------------------


async def test_the_best_bid_carries_its_advertisers_categories(live: Live) -> None:
    headers = await two_advertisers(live)
    bid = await winner(live, headers)
    assert bid is not None
    assert bid["adomain"] == ["fizzy.example"]
    # The campaign has none of its own: its advertiser's, in taxonomy 1 (the default).
    assert (bid["cat"], bid["cattax"]) == (["IAB8-5"], 1)
    # 1000 cents CPM x 119.47 / 1000 = 119.47 cents = 1.1947 EUR a play.
    assert Decimal(str(bid["price"])) == Decimal("1.1947")


async def test_a_campaigns_own_categories_replace_its_advertisers(live: Live) -> None:
    headers = await two_advertisers(live, categories=["IAB1", "IAB1-6"], cattax=1)
    bid = await winner(live, headers)
    assert bid is not None
    assert bid["cat"] == ["IAB1", "IAB1-6"]
    # ...so the advertiser's category no longer blocks it, and its own does.
    assert (await winner(live, headers, bcat=["IAB8-5"]) or {}).get("adomain") == ["fizzy.example"]
    blocked = await winner(live, headers, bcat=["IAB1-6"])
    assert blocked is not None
    assert blocked["adomain"] == ["shop.acme.example"]


@pytest.mark.parametrize(
    "blocks",
    [
        {"badv": ["fizzy.example"]},
        {"badv": ["FIZZY.example"]},
        {"bcat": ["IAB8-5"]},
        {"bcat": ["IAB8"]},  # a tier-1 category blocks its subcategories (taxonomy 1)
        {"bcat": ["IAB8-5"], "cattax": 1},
    ],
)
async def test_a_blocked_advertiser_gives_way_to_the_next_best(
    live: Live, blocks: dict[str, Any]
) -> None:
    headers = await two_advertisers(live)
    bid = await winner(live, headers, **blocks)
    assert bid is not None
    assert bid["adomain"] == ["shop.acme.example"]
    assert bid["cat"] == ["IAB19"]
    # Acme's 500 cents CPM x 119.47 / 1000 = 59.735 cents.
    assert Decimal(str(bid["price"])) == Decimal("0.59735")


@pytest.mark.parametrize(
    "blocks",
    [
        {"bcat": ["IAB8-5"], "cattax": 2},  # another taxonomy's id of the same spelling
        {"bcat": ["IAB8-"]},
        {"badv": ["izzy.example"]},
        {"badv": ["fizzy.example.com"]},
    ],
)
async def test_blocks_that_name_no_advertiser_change_nothing(
    live: Live, blocks: dict[str, Any]
) -> None:
    headers = await two_advertisers(live)
    bid = await winner(live, headers, **blocks)
    assert bid is not None
    assert bid["adomain"] == ["fizzy.example"]


async def test_a_blocked_parent_domain_blocks_its_subdomains(live: Live) -> None:
    headers = await two_advertisers(live)
    assert await winner(live, headers, badv=["fizzy.example", "acme.example"]) is None


async def test_everything_blocked_is_a_204_counted(live: Live) -> None:
    headers = await two_advertisers(live)
    assert await winner(live, headers, bcat=["IAB8", "IAB19"]) is None
    assert await winner(live, headers, badv=["fizzy.example"], bcat=["IAB19-1", "IAB19"]) is None


@pytest.mark.parametrize(
    "blocks",
    [{"bcat": "IAB8"}, {"bcat": [8]}, {"badv": {"d": 1}}, {"badv": ["a.example", None]}],
)
async def test_a_block_list_that_cannot_be_read_is_no_bid(
    live: Live, blocks: dict[str, Any]
) -> None:
    headers = await two_advertisers(live)
    assert await winner(live, headers, **blocks) is None
    metrics = (await live.client.get("/metrics")).text
    assert 'openrtb_no_bids_total{reason="blocks_unreadable"} 1.0' in metrics


async def test_core_offer_request_takes_the_same_blocks(live: Live) -> None:
    headers = await two_advertisers(live)
    path = f"{API}/offers/request/{f.SCREEN_MOVING}"

    async def price(**params: str) -> tuple[int, Any]:
        response = await live.client.get(path, params=params, headers=headers)
        body = response.json()
        return response.status_code, body.get("bid_price_cents", body)

    # Audience 10: Fizzy pays 1000 x 10 / 1000 = 10 cents a play, Acme 5.
    assert await price() == (200, 10)
    assert await price(blocked_domains="fizzy.example") == (200, 5)
    assert await price(blocked_domains=" other.example , FIZZY.example,") == (200, 5)
    assert await price(blocked_categories="IAB8") == (200, 5)
    assert await price(blocked_categories="IAB8-5", blocked_cattax="2") == (200, 10)
    assert (await price(blocked_domains="fizzy.example,acme.example"))[0] == 404


@pytest.mark.parametrize(
    "params",
    [
        {"blocked_domains": "fizzy.example/x"},
        {"blocked_domains": "a b.example"},
        {"blocked_categories": "IAB8;IAB9"},
        {"blocked_categories": "x" * 65},
        {"blocked_categories": ",".join(f"IAB{n}" for n in range(101))},
        {"blocked_cattax": "0"},
        {"blocked_cattax": "one"},
        {"blocked_cattax": "99999999999"},
    ],
)
async def test_core_junk_blocks_are_400(live: Live, params: dict[str, str]) -> None:
    headers = await two_advertisers(live)
    response = await live.client.get(
        f"{API}/offers/request/{f.SCREEN_MOVING}", params=params, headers=headers
    )
    assert response.status_code == 400, response.text
    assert set(response.json()) == {"error"}


async def test_categories_survive_export_and_import(live: Live) -> None:
    await two_advertisers(live, categories=["IAB1-6"], cattax=7)
    pool = await live.rt.postgres.connect()
    async with pool.acquire() as conn:
        doc = await export_document(conn)
    adv = {a.id: a for a in doc.advertisers}
    assert (adv[f.ADV].categories, adv[f.ADV].cattax) == (["IAB8-5"], 1)
    cmp = {c.id: c for c in doc.campaigns}
    assert (cmp[f.CAMPAIGN].categories, cmp[f.CAMPAIGN].cattax) == (["IAB1-6"], 7)
    assert (cmp[CAMPAIGN_OTHER].categories, cmp[CAMPAIGN_OTHER].cattax) == (None, 1)


# -- currencies ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_fields", "deal_fields", "reason"),
    [
        ({"cur": ["USD"]}, {}, "currency_not_accepted"),
        ({"cur": []}, {}, "currency_not_accepted"),
        ({"cur": "EUR"}, {}, "currency_not_accepted"),  # not an array: no currency read
        ({}, {"bidfloorcur": "USD"}, "floor_currency"),
        ({"cur": ["EUR"]}, {"bidfloorcur": "GBP"}, "floor_currency"),
        ({}, {"bidfloorcur": 978}, "floor_currency"),
    ],
)
async def test_a_currency_other_than_eur_is_no_bid_counted(
    live: Live, request_fields: dict[str, Any], deal_fields: dict[str, Any], reason: str
) -> None:
    headers = await seeded(live)
    body = {**bid_request(), **request_fields}
    body["imp"][0]["pmp"]["deals"][0].update(deal_fields)
    response = await post_bid(live, headers, body)
    assert response.status_code == 204, response.text
    metrics = (await live.client.get("/metrics")).text
    assert f'openrtb_no_bids_total{{reason="{reason}"}} 1.0' in metrics


@pytest.mark.parametrize(
    ("request_fields", "deal_fields"),
    [
        ({"cur": ["USD", "EUR"]}, {}),
        ({"cur": ["eur"]}, {"bidfloorcur": "EUR"}),
        ({}, {"bidfloorcur": "eur"}),
    ],
)
async def test_eur_is_bid_on(
    live: Live, request_fields: dict[str, Any], deal_fields: dict[str, Any]
) -> None:
    headers = await seeded(live)
    body = {**bid_request(), **request_fields}
    body["imp"][0]["pmp"]["deals"][0].update(deal_fields)
    response = await post_bid(live, headers, body)
    assert response.status_code == 200, response.text
    assert response.json()["cur"] == "EUR"


# -- test traffic ----------------------------------------------------------------------------


def _urls(adm: str) -> dict[str, str]:
    root = ET.fromstring(adm)
    urls = {"impression": root.findtext(".//v:Impression", namespaces=NS) or ""}
    for tracking in root.findall(".//v:Tracking", NS):
        urls[tracking.get("event") or ""] = tracking.text or ""
    return urls


def _fired(url: str) -> str:
    return local(url.replace("${AUCTION_PRICE}", "0.30").replace("${TOTAL_IMP}", "119.47"))


async def test_test_traffic_bids_but_reserves_bills_and_stores_nothing(live: Live) -> None:
    headers = await seeded(live)
    response = await post_bid(live, headers, {**bid_request(), "test": 1})
    assert response.status_code == 200, response.text
    body = response.json()
    validate_bid_response(body)
    bid = body["seatbid"][0]["bid"][0]
    # Priced as a live bid: 250 cents CPM x 119.47 / 1000 = 29.8675 cents.
    assert Decimal(str(bid["price"])) == Decimal("0.298675")
    urls = _urls(bid["adm"])
    for url in urls.values():
        assert query_of(url)["offer_id"] == bid["adid"]

    for event in ("impression", "start", "complete"):
        answer = await live.client.get(_fired(urls[event]))
        assert answer.status_code == 204, answer.text
        assert answer.headers["Deprecation"] == "true"
    loss = await live.client.get(local(substitute(bid["lurl"], reason="102", price="0.5")))
    assert loss.status_code == 204

    budget = (await live.rt.hot.read_budgets(utcnow())).get(f.CAMPAIGN)
    assert budget is None or (budget.reserved, budget.spent) == (0, 0)
    assert await live.rt.hot.offer(bid["adid"]) is None
    assert await queue_records(live.rt.redis) == []


async def test_a_test_flag_cannot_be_forged_onto_a_live_bid(live: Live) -> None:
    headers = await seeded(live)
    response = await post_bid(live, headers, bid_request())
    bid = response.json()["seatbid"][0]["bid"][0]
    impression = _fired(_urls(bid["adm"])["impression"])
    forged = impression.replace(f"offer_id={bid['adid']}", f"offer_id=openrtb-test-{bid['adid']}")
    assert (await live.client.get(forged)).status_code == 403
    assert (await live.client.get(impression)).status_code == 200  # the live one bills


@pytest.mark.parametrize("flag", [0, None, "1"])
async def test_anything_but_test_1_is_live(live: Live, flag: Any) -> None:
    headers = await seeded(live)
    response = await post_bid(live, headers, {**bid_request(), "test": flag})
    assert response.status_code == 200
    offer_id = response.json()["seatbid"][0]["bid"][0]["adid"]
    assert await live.rt.hot.offer(offer_id) is not None


# -- offer lifetime --------------------------------------------------------------------------


@pytest.mark.parametrize(("exp", "expected"), [(30, 30), (45.9, 45), (0, None), ("30", None)])
async def test_imp_exp_shorter_than_the_ttl_bounds_the_offer(
    live: Live, settings: Settings, exp: Any, expected: int | None
) -> None:
    headers = await seeded(live)
    response = await post_bid(live, headers, bid_request(exp=exp))
    assert response.status_code == 200, response.text
    bid = response.json()["seatbid"][0]["bid"][0]
    seconds = expected if expected is not None else settings.offers.ttl_seconds
    vast = ET.fromstring(bid["adm"])
    assert vast.findtext(".//v:Expires", namespaces=NS) in {str(seconds), str(seconds - 1)}
    held = await live.rt.hot.offer(bid["adid"])
    assert held is not None
    left = (int(held["expires_ms"]) - int(utcnow().timestamp() * 1000)) / 1000
    assert seconds - 2 <= left <= seconds


async def test_imp_exp_longer_than_the_ttl_leaves_the_ttl(live: Live, settings: Settings) -> None:
    headers = await seeded(live)
    exp = settings.offers.ttl_seconds + 3600
    response = await post_bid(live, headers, bid_request(exp=exp))
    vast = ET.fromstring(response.json()["seatbid"][0]["bid"][0]["adm"])
    ttl = settings.offers.ttl_seconds
    assert vast.findtext(".//v:Expires", namespaces=NS) in {str(ttl), str(ttl - 1)}


# -- exchange rates --------------------------------------------------------------------------


def _in_usd(bidfloor: str) -> dict[str, Any]:
    body = bid_request()
    # 3.0, 3.125 and 1.0 are exact binary fractions: the JSON text is the number as written.
    body["imp"][0]["pmp"]["deals"][0].update({"bidfloor": float(bidfloor), "bidfloorcur": "USD"})
    return body


async def _seeded_with_rate(live: Live, age_days: int) -> dict[str, str]:
    as_of = utcnow().date() - timedelta(days=age_days)
    return await seeded(
        live,
        exchange_rates=[ExchangeRate(currency="USD", units_per_eur=Decimal("1.25"), as_of=as_of)],
    )


@pytest.mark.parametrize(
    ("bidfloor", "status"),
    [
        # 3.0 USD / 1.25 = 2.40 EUR: 2.40 x 119.47 / 10 = 28.6728, so 29 cents; the play's
        # 29.8675 meets it.
        ("3.0", 200),
        # 3.125 USD = 2.50 EUR exactly: 29.8675, so 30 cents, which 29.8675 does not meet.
        ("3.125", 204),
    ],
)
async def test_a_usd_floor_is_converted_exactly_and_rounded_up(
    live: Live, bidfloor: str, status: int
) -> None:
    headers = await _seeded_with_rate(live, 0)
    response = await post_bid(live, headers, _in_usd(bidfloor))
    assert response.status_code == status, response.text
    if status == 200:
        body = response.json()
        assert body["cur"] == "EUR"
        assert Decimal(str(body["seatbid"][0]["bid"][0]["price"])) == Decimal("0.298675")


@pytest.mark.parametrize(("age_days", "status"), [(7, 200), (8, 204)])
async def test_a_rate_older_than_the_max_age_is_not_used(
    live: Live, settings: Settings, age_days: int, status: int
) -> None:
    assert settings.offers.exchange_rate_max_age_days == 7
    headers = await _seeded_with_rate(live, age_days)
    response = await post_bid(live, headers, _in_usd("1.0"))
    assert response.status_code == status, response.text
    if status == 204:
        metrics = (await live.client.get("/metrics")).text
        assert 'openrtb_no_bids_total{reason="floor_currency"} 1.0' in metrics


async def test_rates_load_through_the_admin_api_and_reach_the_worker(
    live: Live, settings: Settings
) -> None:
    headers = await seeded(live)
    assert (await post_bid(live, headers, _in_usd("1.0"))).status_code == 204
    rates = {
        "exchange_rates": [
            {"currency": "USD", "units_per_eur": 1.0823, "as_of": str(utcnow().date())}
        ]
    }
    admin = {"Authorization": f"Bearer {settings.secrets.admin_token}"}
    put = await live.client.put("/admin/v1/inventory", json=rates, headers=admin)
    assert put.status_code == 200, put.text
    await live.rt.inventory.reload()
    assert (await post_bid(live, headers, _in_usd("1.0"))).status_code == 200
    exported = (await live.client.get("/admin/v1/inventory", headers=admin)).json()
    assert exported["exchange_rates"] == rates["exchange_rates"]
    bad = {"exchange_rates": [{"currency": "usd", "units_per_eur": 0, "as_of": "2026-01-01"}]}
    refused = await live.client.put("/admin/v1/inventory", json=bad, headers=admin)
    assert refused.status_code == 400
    assert {p["field"] for p in refused.json()["problems"]} == {"currency", "units_per_eur"}


# -- venues and places -----------------------------------------------------------------------

AIRPORTS = Targeting(venue_types=["transit.airports"])
# 2 km around the Brandenburg Gate; Berlin Hauptbahnhof is about 1.1 km away, Hamburg 253 km.
GATE = Targeting(places=[Place(lat=52.5163, lon=13.3777, radius_km=2)])
STATION = {"lat": 52.5251, "lon": 13.3694}
HAMBURG = {"lat": 53.5511, "lon": 9.9937}


@pytest.mark.parametrize(
    ("screen_fields", "request_fields", "bids"),
    [
        ({}, {}, False),  # no venue type anywhere: venue targeting never matches
        ({}, {"dooh": {"venuetype": ["transit.airports"], "venuetypetax": 1}}, True),
        ({}, {"dooh": {"venuetypeid": "transit.airports", "venuetax": 1}}, True),
        ({}, {"dooh": {"venuetype": ["transit.airports"], "venuetypetax": 3}}, False),
        # The screen's own venue type wins over the request's.
        ({"venue_type": "retail.malls"}, {"dooh": {"venuetype": ["transit.airports"]}}, False),
        ({"venue_type": "transit.airports"}, {"dooh": {"venuetype": ["retail.malls"]}}, True),
    ],
)
async def test_venue_targeting_reads_the_request_where_the_screen_has_none(
    live: Live, screen_fields: dict[str, Any], request_fields: dict[str, Any], bids: bool
) -> None:
    headers = await seeded(
        live, screens=[f.screen(**screen_fields)], campaigns=[f.campaign(targeting=AIRPORTS)]
    )
    assert (await winner(live, headers, **request_fields) is not None) is bids


@pytest.mark.parametrize(
    ("screen_fields", "geo", "bids"),
    [
        ({}, None, False),  # nowhere known: in no place
        ({}, STATION, True),
        ({}, HAMBURG, False),
        ({}, {"lat": STATION["lat"], "long": STATION["lon"]}, True),
        # The screen's own location wins over the request's.
        ({"lat": HAMBURG["lat"], "lon": HAMBURG["lon"]}, STATION, False),
        ({"lat": STATION["lat"], "lon": STATION["lon"]}, HAMBURG, True),
    ],
)
async def test_place_targeting_reads_device_geo_where_the_screen_has_no_location(
    live: Live, screen_fields: dict[str, Any], geo: dict[str, float] | None, bids: bool
) -> None:
    headers = await seeded(
        live, screens=[f.screen(**screen_fields)], campaigns=[f.campaign(targeting=GATE)]
    )
    request = {} if geo is None else {"device": {"devicetype": 8, "geo": geo}}
    assert (await winner(live, headers, **request) is not None) is bids
