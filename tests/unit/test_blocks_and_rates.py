"""Blocks (the engine skips a blocked campaign and takes the next best), the keys the snapshot
precomputes for them, the request fields the bridge reads beyond the contract's, and the floor
converted by an exchange rate."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from msgspec.structs import replace

from bidder.openrtb import location_of, parse_bid_request, venue_types_of
from matching.engine import Match, NoMatch, blocks_of, select
from matching.inventory import (
    Advertiser,
    ExchangeRate,
    InventoryDocument,
    Place,
    Targeting,
    validate_document,
)
from matching.money import openrtb_min_bid_micros
from matching.snapshot import build_snapshot, category_keys, distance_km, domain_keys
from tests.support.factories import (
    ADV,
    CAMPAIGN,
    SCREEN_MOVING,
    advertiser,
    basic_document,
    campaign,
    creative,
    screen,
    uid,
)

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
ADV_2, CAMPAIGN_2 = uid(2, 2), uid(2, 4)


def _snapshot(**campaign_fields: Any) -> Any:
    doc = basic_document(
        advertisers=[
            advertiser(categories=["IAB8-5"]),
            Advertiser(id=ADV_2, name="Acme", domain="acme.example", categories=["IAB19"]),
        ],
        campaigns=[
            campaign(cpm_cents=Decimal(1000), **campaign_fields),
            campaign(id=CAMPAIGN_2, advertiser_id=ADV_2, cpm_cents=Decimal(500)),
        ],
        creatives=[creative(), creative(id=uid(3, 5), campaign_id=CAMPAIGN_2)],
    )
    return build_snapshot(doc)


def _winner(snapshot: Any, **blocks: Any) -> str | None:
    found = select(
        snapshot,
        snapshot.screens[SCREEN_MOVING],
        NOW,
        {},
        blocks=blocks_of(blocks.get("d", ()), blocks.get("c", ()), blocks.get("tax", 1)),
    )
    return found.campaign.id if isinstance(found, Match) else None


def test_the_keys_a_block_matches() -> None:
    assert domain_keys("Shop.Acme.Example.") == {"shop.acme.example", "acme.example", "example"}
    assert category_keys(1, ["IAB8-5", "IAB19"]) == {(1, "IAB8-5"), (1, "IAB8"), (1, "IAB19")}
    # Other taxonomies' ids are numbers with no parent in their spelling: exact only.
    assert category_keys(7, ["483-12"]) == {(7, "483-12")}


def test_a_blocked_campaign_gives_way_to_the_next_best() -> None:
    snapshot = _snapshot()
    assert _winner(snapshot) == CAMPAIGN
    assert _winner(snapshot, d=["fizzy.example"]) == CAMPAIGN_2
    assert _winner(snapshot, c=["IAB8"]) == CAMPAIGN_2
    assert _winner(snapshot, c=["IAB8-5"], tax=2) == CAMPAIGN
    assert _winner(snapshot, d=["example"]) is None


def test_a_campaign_without_categories_takes_its_advertisers() -> None:
    inherited = _snapshot().campaigns[CAMPAIGN]
    assert (inherited.categories, inherited.cattax) == (("IAB8-5",), 1)
    own = _snapshot(categories=["1001"], cattax=7).campaigns[CAMPAIGN]
    assert (own.categories, own.cattax) == (("1001",), 7)
    # Its own list, even empty, replaces the advertiser's.
    assert _snapshot(categories=[]).campaigns[CAMPAIGN].categories == ()


def test_no_blocks_is_no_check() -> None:
    assert blocks_of([], [" "], 1) is None
    assert isinstance(
        select(_snapshot(), _snapshot().screens[SCREEN_MOVING], NOW, {}, blocks=None), Match
    )
    everything = blocks_of(["fizzy.example", "acme.example"], [], 1)
    snapshot = _snapshot()
    assert isinstance(
        select(snapshot, snapshot.screens[SCREEN_MOVING], NOW, {}, blocks=everything), NoMatch
    )


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"categories": ["IAB 1"]}, "categories"),
        ({"categories": ["IAB1,IAB2"]}, "categories"),
        ({"categories": [""]}, "categories"),
        ({"categories": ["x" * 65]}, "categories"),
        ({"categories": [f"IAB{n}" for n in range(65)]}, "categories"),
        ({"cattax": 0}, "cattax"),
    ],
)
def test_category_rules(fields: dict[str, Any], problem: str) -> None:
    doc = basic_document(campaigns=[campaign(**fields)])
    assert [p.field for p in validate_document(doc)] == [problem]
    doc = basic_document(advertisers=[advertiser(**fields)])
    assert [(p.list, p.id, p.field) for p in validate_document(doc)] == [
        ("advertisers", ADV, problem)
    ]


@pytest.mark.parametrize(
    ("rate", "fields"),
    [
        ({"currency": "EUR"}, ["currency"]),
        ({"currency": "usd"}, ["currency"]),
        ({"units_per_eur": Decimal(0)}, ["units_per_eur"]),
        ({"units_per_eur": Decimal("1.00000000001")}, ["units_per_eur"]),
        ({"units_per_eur": Decimal("1e9")}, ["units_per_eur"]),
    ],
)
def test_exchange_rate_rules(rate: dict[str, Any], fields: list[str]) -> None:
    item = {"currency": "USD", "units_per_eur": Decimal("1.0823"), "as_of": NOW.date(), **rate}
    doc = InventoryDocument(exchange_rates=[ExchangeRate(**item)])
    assert [p.field for p in validate_document(doc)] == fields


def test_a_currency_appears_once() -> None:
    rate = ExchangeRate(currency="USD", units_per_eur=Decimal(1), as_of=NOW.date())
    problems = validate_document(InventoryDocument(exchange_rates=[rate, rate]))
    assert [(p.index, p.message) for p in problems] == [(1, "appears more than once")]


@pytest.mark.parametrize(
    ("floor", "audience", "rate", "cents"),
    [
        # 1 USD x 30 / 10 = 3 USD cents, at 3 USD a euro: exactly 1 cent (not 2: the division
        # is not rounded before the final rounding up).
        ("1", "30", "3", 1),
        ("2.5", "119.47", "1.25", 24),  # 2.00 EUR: 23.894 cents, rounded up
        ("3.125", "119.47", "1.25", 30),  # 2.50 EUR: 29.8675 cents, rounded up
        ("1", "10", "3", 1),  # 0.333... cents: up to one
        ("1", "100", "0.3", 34),  # 33.33... cents
    ],
)
def test_a_converted_floor_is_exact_and_rounded_up_once(
    floor: str, audience: str, rate: str, cents: int
) -> None:
    micros = openrtb_min_bid_micros(Decimal(floor), Decimal(audience), Decimal(rate))
    assert micros == cents * 1_000_000


DEAL = {"id": "d", "bidfloor": 1, "at": 3}


def _request(**top: Any) -> bytes:
    imp = {
        "id": "1",
        "tagid": "t",
        "video": {"w": 1, "h": 1},
        "pmp": {"deals": [DEAL]},
        "qty": {"multiplier": 1},
    }
    imp.update(top.pop("imp", {}))
    return json.dumps({"id": "r", "at": 3, "imp": [imp], **top}).encode()


def test_the_request_fields_read_beyond_the_contracts() -> None:
    ask = parse_bid_request(
        _request(
            test=1,
            cur=["USD", "eur"],
            badv=["a.example"],
            bcat=["IAB1"],
            cattax=2,
            imp={
                "exp": 30.7,
                "pmp": {"deals": [{"id": "d", "bidfloor": 1, "at": 3, "bidfloorcur": "usd"}]},
            },
        )
    )
    assert ask.test
    assert ask.takes_eur
    assert (ask.blocked_domains, ask.blocked_categories, ask.cattax) == (
        ("a.example",),
        ("IAB1",),
        2,
    )
    assert ask.exp_seconds == 30
    assert ask.floor_currency == "USD"
    plain = parse_bid_request(_request())
    assert (plain.test, plain.takes_eur, plain.floor_currency, plain.exp_seconds) == (
        False,
        True,
        "EUR",
        None,
    )
    odd = parse_bid_request(_request(cur="EUR", bcat="IAB1", cattax="2", test="1", imp={"exp": -1}))
    assert (odd.takes_eur, odd.blocked_categories, odd.cattax, odd.test, odd.exp_seconds) == (
        False,
        None,
        1,
        False,
        None,
    )


def test_unknown_fields_and_ext_blocks_are_ignored_anywhere() -> None:
    body = json.loads(_request())
    body["ext"] = {"vendor.example": {"x": [1, {"y": None}]}}
    body["dooh"] = {"id": "d", "name": "Hall", "publisher": {"cat": [1]}, "ext": "anything"}
    body["device"] = {"ua": "x", "ext": {"dooh": {"audience": 1.56}}, "geo": {"type": 1}}
    body["imp"][0]["video"]["ext"] = 5
    body["imp"][0]["pmp"]["deals"][0]["ext"] = {"wseat": []}
    body["source"] = {"schain": {"nodes": []}}
    # The same ask, but for the containers kept as sent (read only when targeting needs them).
    odd, plain = parse_bid_request(json.dumps(body).encode()), parse_bid_request(_request())
    assert replace(odd, dooh=plain.dooh, device=plain.device) == plain
    assert venue_types_of(odd) == frozenset()
    assert location_of(odd) is None


@pytest.mark.parametrize(
    ("dooh", "venues"),
    [
        ({"venuetype": ["transit.airports", 7], "venuetypetax": 1}, {"transit.airports", "7"}),
        ({"venuetype": "transit.airports"}, {"transit.airports"}),
        ({"venuetypeid": 10602, "venuetax": 1}, {"10602"}),
        ({"venuetypeid": "10602", "venuetypetax": 5}, {"10602"}),
        ({"venuetype": ["x"], "venuetypeid": 1}, {"x"}),  # venuetype first
        ({"venuetype": ["transit.airports"], "venuetypetax": 3}, set()),  # DMI: not compared
        ({"venuetype": ["transit.airports"], "venuetax": "1"}, set()),
        ({"venuetype": [" ", True, None, {}]}, set()),
    ],
)
def test_the_request_venue_types_read(dooh: dict[str, Any], venues: set[str]) -> None:
    assert venue_types_of(parse_bid_request(_request(dooh=dooh))) == venues
    # Read the same from a body the typed decode refuses (`imp[0].ext` a string, not read
    # beside `qty`): the body is read again as a tree.
    lenient = parse_bid_request(_request(dooh=dooh, imp={"ext": "x"}))
    assert venue_types_of(lenient) == venues


@pytest.mark.parametrize(
    ("geo", "location"),
    [
        ({"lat": 51.51112, "lon": -0.09043}, (51.51112, -0.09043)),
        ({"lat": 51.51112, "long": -0.09043}, (51.51112, -0.09043)),  # the IAB examples' spelling
        ({"lat": 91, "lon": 0}, None),
        ({"lat": "51", "lon": 0}, None),
        ({"lat": 51}, None),
        ("somewhere", None),
    ],
)
def test_the_request_location_read(geo: Any, location: tuple[float, float] | None) -> None:
    assert location_of(parse_bid_request(_request(device={"geo": geo}))) == location
    lenient = parse_bid_request(_request(device={"geo": geo}, imp={"ext": "x"}))
    assert location_of(lenient) == location


def test_a_campaign_targets_places_by_radius() -> None:
    # A degree along a meridian is pi x 6371.0088 / 180 = 111.195 km. Berlin Hauptbahnhof
    # (52.5251, 13.3694) is about 1.1 km from the Brandenburg Gate (52.5163, 13.3777): 0.0088
    # degrees north (0.98 km), 0.0083 east (0.56 km at cos 52.5 deg), and about 253 km from
    # Hamburg's centre (53.5511, 9.9937).
    assert abs(distance_km((0, 0), (1, 0)) - 111.195) < 0.001
    assert 1.0 < distance_km((52.5251, 13.3694), (52.5163, 13.3777)) < 1.2
    assert 250 < distance_km((52.5251, 13.3694), (53.5511, 9.9937)) < 256
    near = Targeting(places=[Place(lat=52.5163, lon=13.3777, radius_km=1.5)])
    far = Targeting(places=[Place(lat=53.5511, lon=9.9937, radius_km=100)])
    for targeting, admitted in ((near, True), (far, False)):
        doc = basic_document(
            screens=[screen(lat=52.5251, lon=13.3694)], campaigns=[campaign(targeting=targeting)]
        )
        snap = build_snapshot(doc)
        assert snap.campaigns[CAMPAIGN].admits(snap.screens[SCREEN_MOVING]) is admitted
    # A screen with no location is in no place.
    snap = build_snapshot(basic_document(campaigns=[campaign(targeting=near)]))
    assert not snap.campaigns[CAMPAIGN].admits(snap.screens[SCREEN_MOVING])


@pytest.mark.parametrize(
    "place",
    [
        Place(lat=91, lon=0, radius_km=1),
        Place(lat=0, lon=-181, radius_km=1),
        Place(lat=0, lon=0, radius_km=0),
        Place(lat=0, lon=0, radius_km=30_000),
        Place(lat=float("nan"), lon=0, radius_km=1),
    ],
)
def test_place_rules(place: Place) -> None:
    doc = basic_document(campaigns=[campaign(targeting=Targeting(places=[place]))])
    assert [p.field for p in validate_document(doc)] == ["targeting.places[0]"]
