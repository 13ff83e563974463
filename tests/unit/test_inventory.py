"""Inventory document validation (docs/contract.md#2-inventory): one case per rule, every problem
found at once with its list, index, id and field, and references to stored items."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import msgspec
import pytest

from matching.inventory import (
    BillingCode,
    Daypart,
    InventoryDocument,
    Targeting,
    canonical_uuid,
    is_uuid,
    mime_type_for,
    parse_uuid,
    validate_document,
)
from tests.support.factories import (
    ADV,
    CAMPAIGN,
    PUB,
    PUB_OTHER,
    advertiser,
    basic_document,
    campaign,
    creative,
    publisher,
    screen,
    uid,
)

Where = tuple[str, int, str]


def problems_of(doc: InventoryDocument) -> set[Where]:
    return {(p.list, p.index, p.field) for p in validate_document(doc)}


def test_the_basic_document_is_valid() -> None:
    assert validate_document(basic_document()) == []


CASES: list[tuple[str, Callable[[], InventoryDocument], set[Where]]] = [
    # publishers
    (
        "publisher id not a uuid",
        lambda: basic_document(publishers=[publisher(id="metro")]),
        {
            ("publishers", 0, "id"),
            # its screens and billing code now point at an unknown publisher
            ("billing_codes", 0, "publisher_id"),
            ("screens", 0, "publisher_id"),
            ("screens", 1, "publisher_id"),
            ("screens", 2, "publisher_id"),
            ("screens", 3, "publisher_id"),
        },
    ),
    (
        "publisher id twice",
        lambda: basic_document(publishers=[publisher(), publisher()]),
        {
            ("publishers", 1, "id"),
            ("screens", 3, "publisher_id"),
        },
    ),
    (
        "publisher name blank",
        lambda: basic_document(
            publishers=[publisher(name="  "), publisher(id=uid(2, 1), name="Mall")]
        ),
        {("publishers", 0, "name")},
    ),
    (
        "commission above 1",
        lambda: basic_document(
            publishers=[publisher(commission_rate=Decimal("1.01")), publisher(id=uid(2, 1))]
        ),
        {("publishers", 0, "commission_rate")},
    ),
    (
        "commission below 0",
        lambda: basic_document(
            publishers=[publisher(commission_rate=Decimal("-0.1")), publisher(id=uid(2, 1))]
        ),
        {("publishers", 0, "commission_rate")},
    ),
    (
        "screen name blank",
        lambda: basic_document(screens=[screen(name=" ")]),
        {("screens", 0, "name")},
    ),
    (
        "campaign name empty",
        lambda: basic_document(campaigns=[campaign(name="")]),
        {("campaigns", 0, "name")},
    ),
    # advertisers
    (
        "advertiser name blank",
        lambda: basic_document(advertisers=[advertiser(name="")]),
        {("advertisers", 0, "name")},
    ),
    (
        "advertiser domain is a URL",
        lambda: basic_document(advertisers=[advertiser(domain="https://fizzy.example/")]),
        {("advertisers", 0, "domain")},
    ),
    (
        "advertiser domain with a space",
        lambda: basic_document(advertisers=[advertiser(domain="fizzy example")]),
        {("advertisers", 0, "domain")},
    ),
    # billing codes
    (
        "billing code for unknown advertiser",
        lambda: basic_document(
            billing_codes=[BillingCode(advertiser_id=uid(9, 2), publisher_id=PUB, code="X")]
        ),
        {("billing_codes", 0, "advertiser_id")},
    ),
    (
        "billing code for unknown publisher",
        lambda: basic_document(
            billing_codes=[BillingCode(advertiser_id=ADV, publisher_id=uid(9, 1), code="X")]
        ),
        {("billing_codes", 0, "publisher_id")},
    ),
    (
        "billing code pair twice",
        lambda: basic_document(
            billing_codes=[
                BillingCode(advertiser_id=ADV, publisher_id=PUB, code="A"),
                BillingCode(advertiser_id=ADV, publisher_id=PUB, code="B"),
            ]
        ),
        {("billing_codes", 1, "publisher_id")},
    ),
    (
        "billing code blank",
        lambda: basic_document(
            billing_codes=[BillingCode(advertiser_id=ADV, publisher_id=PUB, code=" ")]
        ),
        {("billing_codes", 0, "code")},
    ),
    # screens
    (
        "screen of unknown publisher",
        lambda: basic_document(screens=[screen(publisher_id=uid(9, 1))]),
        {("screens", 0, "publisher_id")},
    ),
    (
        "screen width zero",
        lambda: basic_document(screens=[screen(width=0)]),
        {("screens", 0, "width")},
    ),
    (
        "screen height negative",
        lambda: basic_document(screens=[screen(height=-1)]),
        {("screens", 0, "height")},  # under its own field, not `width`
    ),
    (
        "audience zero",
        lambda: basic_document(screens=[screen(audience_per_play=Decimal(0))]),
        {("screens", 0, "audience_per_play")},
    ),
    (
        "external id blank",
        lambda: basic_document(screens=[screen(external_id=" ")]),
        {("screens", 0, "external_id")},
    ),
    (
        "external id twice for one publisher",
        lambda: basic_document(screens=[screen(), screen(id=uid(8, 3))]),
        {("screens", 1, "external_id")},
    ),
    (
        "timezone not IANA",
        lambda: basic_document(screens=[screen(timezone="CEST+2")]),
        {("screens", 0, "timezone")},
    ),
    (
        "latitude out of range",
        lambda: basic_document(screens=[screen(lat=-90.5)]),
        {("screens", 0, "lat")},
    ),
    (
        "longitude out of range",
        lambda: basic_document(screens=[screen(lon=180.1)]),
        {("screens", 0, "lon")},
    ),
    (
        "screen id twice",
        lambda: basic_document(screens=[screen(), screen(external_id="other")]),
        {("screens", 1, "id")},
    ),
    # campaigns
    (
        "campaign of unknown advertiser",
        lambda: basic_document(campaigns=[campaign(advertiser_id=uid(9, 2))]),
        {("campaigns", 0, "advertiser_id")},
    ),
    (
        "cpm zero",
        lambda: basic_document(campaigns=[campaign(cpm_cents=Decimal(0))]),
        {("campaigns", 0, "cpm_cents")},
    ),
    (
        "budget negative",
        lambda: basic_document(campaigns=[campaign(budget_cents=Decimal(-1))]),
        {("campaigns", 0, "budget_cents")},
    ),
    (
        "budget finer than a micro-cent",
        lambda: basic_document(campaigns=[campaign(budget_cents=Decimal("1.0000001"))]),
        {("campaigns", 0, "budget_cents")},
    ),
    (
        "budget above what Redis counts exactly",
        lambda: basic_document(campaigns=[campaign(budget_cents=Decimal("9000000000.000001"))]),
        {("campaigns", 0, "budget_cents")},
    ),
    (
        "daily budget negative",
        lambda: basic_document(campaigns=[campaign(daily_budget_cents=Decimal("-0.5"))]),
        {("campaigns", 0, "daily_budget_cents")},
    ),
    (
        "start without time zone",
        lambda: basic_document(campaigns=[campaign(start_at=datetime(2026, 1, 1))]),
        {("campaigns", 0, "start_at")},
    ),
    (
        "end before start",
        lambda: basic_document(
            campaigns=[
                campaign(
                    start_at=datetime(2026, 2, 1, tzinfo=UTC),
                    end_at=datetime(2026, 1, 1, tzinfo=UTC),
                )
            ]
        ),
        {("campaigns", 0, "end_at")},
    ),
    (
        "frequency cap zero",
        lambda: basic_document(campaigns=[campaign(max_plays_per_screen_per_hour=0)]),
        {("campaigns", 0, "max_plays_per_screen_per_hour")},
    ),
    (
        "daypart day 7",
        lambda: basic_document(
            campaigns=[
                campaign(
                    targeting=Targeting(dayparts=[Daypart(days=[7], start_hour=0, end_hour=1)])
                )
            ]
        ),
        {("campaigns", 0, "targeting.dayparts[0]")},
    ),
    (
        "daypart without days",
        lambda: basic_document(
            campaigns=[
                campaign(targeting=Targeting(dayparts=[Daypart(days=[], start_hour=0, end_hour=1)]))
            ]
        ),
        {("campaigns", 0, "targeting.dayparts[0]")},
    ),
    (
        "daypart hours reversed",
        lambda: basic_document(
            campaigns=[
                campaign(
                    targeting=Targeting(
                        dayparts=[
                            Daypart(days=[0], start_hour=8, end_hour=9),
                            Daypart(days=[1], start_hour=10, end_hour=10),
                        ]
                    )
                )
            ]
        ),
        {("campaigns", 0, "targeting.dayparts[1]")},
    ),
    (
        "daypart past midnight",
        lambda: basic_document(
            campaigns=[
                campaign(
                    targeting=Targeting(dayparts=[Daypart(days=[0], start_hour=20, end_hour=25)])
                )
            ]
        ),
        {("campaigns", 0, "targeting.dayparts[0]")},
    ),
    # creatives
    (
        "creative of unknown campaign",
        lambda: basic_document(creatives=[creative(campaign_id=uid(9, 4))]),
        {("creatives", 0, "campaign_id")},
    ),
    (
        "creative url not http",
        lambda: basic_document(creatives=[creative(url="ftp://cdn.example/a.mp4")]),
        {("creatives", 0, "url")},
    ),
    (
        "creative unknown extension",
        lambda: basic_document(creatives=[creative(url="https://cdn.example/a.avi")]),
        {("creatives", 0, "url"), ("creatives", 0, "kind")},
    ),
    (
        "creative width zero",
        lambda: basic_document(creatives=[creative(width=0)]),
        {("creatives", 0, "width")},
    ),
    (
        "creative duration zero",
        lambda: basic_document(creatives=[creative(duration_seconds=0)]),
        {("creatives", 0, "duration_seconds")},
    ),
    (
        "video with an image file",
        lambda: basic_document(creatives=[creative(url="https://cdn.example/a.png")]),
        {("creatives", 0, "kind")},
    ),
    (
        "image with a video file",
        lambda: basic_document(
            creatives=[creative(kind="image", url="https://cdn.example/a.webm")]
        ),
        {("creatives", 0, "kind")},
    ),
    (
        "creative a day long: no VAST Duration (HH:MM:SS, an xs:time) can say it",
        lambda: basic_document(creatives=[creative(duration_seconds=86_400)]),
        {("creatives", 0, "duration_seconds")},
    ),
    # values the columns cannot hold, or would round without a word (never a 500, never a
    # silently different price)
    (
        "campaign CPM of 1e400 cents",
        lambda: basic_document(campaigns=[campaign(cpm_cents=Decimal("1e400"))]),
        {("campaigns", 0, "cpm_cents")},
    ),
    (
        "daily budget of 1e400 cents",
        lambda: basic_document(campaigns=[campaign(daily_budget_cents=Decimal("1e400"))]),
        {("campaigns", 0, "daily_budget_cents")},
    ),
    (
        "audience of 1e400",
        lambda: basic_document(screens=[screen(audience_per_play=Decimal("1e400"))]),
        {("screens", 0, "audience_per_play")},
    ),
    (
        "audience of 10 billion (NUMERIC(14, 4) holds less)",
        lambda: basic_document(screens=[screen(audience_per_play=Decimal("1e10"))]),
        {("screens", 0, "audience_per_play")},
    ),
    (
        "audience with 5 decimals (it sets the price: refused, not rounded)",
        lambda: basic_document(screens=[screen(audience_per_play=Decimal("3.33333"))]),
        {("screens", 0, "audience_per_play")},
    ),
    (
        "commission rate with 7 decimals",
        lambda: basic_document(
            publishers=[
                publisher(commission_rate=Decimal("0.1234567")),
                publisher(id=PUB_OTHER, name="Other Screens"),
            ]
        ),
        {("publishers", 0, "commission_rate")},
    ),
    (
        "screen width of 2**70 pixels",
        lambda: basic_document(screens=[screen(width=2**70)]),
        {("screens", 0, "width")},
    ),
    (
        "creative height of 2**31 pixels",
        lambda: basic_document(creatives=[creative(height=2**31)]),
        {("creatives", 0, "height")},
    ),
    (
        "plays cap of 2**70",
        lambda: basic_document(campaigns=[campaign(max_plays_per_screen_per_hour=2**70)]),
        {("campaigns", 0, "max_plays_per_screen_per_hour")},
    ),
    (
        "start past the year 9999 once in UTC",
        lambda: basic_document(
            campaigns=[campaign(start_at=datetime.fromisoformat("9999-12-31T23:59:59-12:00"))]
        ),
        {("campaigns", 0, "start_at")},
    ),
    (
        "end before the year 1 once in UTC",
        lambda: basic_document(
            campaigns=[campaign(end_at=datetime.fromisoformat("0001-01-01T00:00:00+14:00"))]
        ),
        {("campaigns", 0, "end_at")},
    ),
    (
        "CPM one part in 10^31 finer than a micro-cent (28-digit rounding must not hide it)",
        lambda: basic_document(
            campaigns=[campaign(cpm_cents=Decimal("1.0000000000000000000000000000001"))]
        ),
        {("campaigns", 0, "cpm_cents")},
    ),
    (
        "asset URL with a port that is not a number",
        lambda: basic_document(creatives=[creative(url="https://cdn.example:80a/a.mp4")]),
        {("creatives", 0, "url")},
    ),
    (
        "asset URL with a blank before it (urlsplit drops it; the player would get it)",
        lambda: basic_document(creatives=[creative(url=" https://cdn.example/a.mp4")]),
        {("creatives", 0, "url")},
    ),
    (
        "asset URL with a blank after it",
        lambda: basic_document(creatives=[creative(url="https://cdn.example/a.mp4 ")]),
        {("creatives", 0, "url"), ("creatives", 0, "kind")},
    ),
    (
        "asset URL with a % in its host part",
        lambda: basic_document(creatives=[creative(url="https://us:pa%ss@cdn.example/a.mp4")]),
        {("creatives", 0, "url")},
    ),
    (
        "asset URL with [ in its user name",
        lambda: basic_document(creatives=[creative(url="https://us[er@cdn.example/a.mp4")]),
        # Python's own URL parser refuses it too, so no file type can be read from it either.
        {("creatives", 0, "url"), ("creatives", 0, "kind")},
    ),
    # text that no XML document can carry (it reaches the VAST): XML 1.0's Char production
    (
        "control character in a campaign name",
        lambda: basic_document(campaigns=[campaign(name="Summer \x01 sale")]),
        {("campaigns", 0, "name")},
    ),
    (
        "U+FFFE in an advertiser name, NUL in its domain",
        lambda: basic_document(
            advertisers=[advertiser(name="Fizzy\ufffe", domain="a\x00.example")]
        ),
        {("advertisers", 0, "name"), ("advertisers", 0, "domain")},
    ),
    (
        "control character in a billing code",
        lambda: basic_document(
            billing_codes=[BillingCode(advertiser_id=ADV, publisher_id=PUB, code="BC\x03")]
        ),
        {("billing_codes", 0, "code")},
    ),
    (
        "control character in an asset URL",
        lambda: basic_document(creatives=[creative(url="https://cdn.example/a\x1fb.mp4")]),
        {("creatives", 0, "url")},
    ),
    (
        "control character in a screen name",
        lambda: basic_document(screens=[screen(name="Lobby\x0b")]),
        {("screens", 0, "name")},
    ),
    # bounds of an audience and of a price per play (no single play drains a budget)
    (
        "screen audience above its publisher's default bound of 50,000",
        lambda: basic_document(screens=[screen(audience_per_play=Decimal("50000.0001"))]),
        {("screens", 0, "audience_per_play")},
    ),
    (
        "screen audience above the bound its publisher sets",
        lambda: basic_document(
            publishers=[publisher(max_audience_per_play=Decimal(50)), publisher(id=PUB_OTHER)],
            screens=[screen(audience_per_play=Decimal("50.0001"))],
        ),
        {("screens", 0, "audience_per_play")},
    ),
    (
        "publisher bound of 0, of 10 billion, with 5 decimals",
        lambda: basic_document(
            publishers=[
                publisher(max_audience_per_play=Decimal(0)),
                publisher(id=uid(7, 1), max_audience_per_play=Decimal("1e10")),
                publisher(id=uid(8, 1), max_audience_per_play=Decimal("1.00001")),
                publisher(id=PUB_OTHER),
            ]
        ),
        {
            ("publishers", 0, "max_audience_per_play"),
            ("publishers", 1, "max_audience_per_play"),
            ("publishers", 2, "max_audience_per_play"),
        },
    ),
    (
        "negative screen quota",
        lambda: basic_document(publishers=[publisher(max_screens=-1), publisher(id=PUB_OTHER)]),
        {("publishers", 0, "max_screens")},
    ),
    (
        "rate limit of 0, of nan and a bucket of 0",
        lambda: basic_document(
            publishers=[
                publisher(rate_limit_per_second=0.0),
                publisher(id=PUB_OTHER, rate_limit_per_second=float("nan")),
                publisher(id=uid(7, 1), rate_limit_per_second=5.0, rate_limit_burst=0),
            ]
        ),
        {
            ("publishers", 0, "rate_limit_per_second"),
            ("publishers", 1, "rate_limit_per_second"),
            ("publishers", 2, "rate_limit_burst"),
        },
    ),
    (
        "price cap of 0 and of 1e400 cents",
        lambda: basic_document(
            campaigns=[
                campaign(max_price_per_play_cents=Decimal(0)),
                campaign(id=uid(9, 4), max_price_per_play_cents=Decimal("1e400")),
            ]
        ),
        {
            ("campaigns", 0, "max_price_per_play_cents"),
            ("campaigns", 1, "max_price_per_play_cents"),
        },
    ),
    # sizes: names 200, external ids 128 characters (docs/api-core.md, "Limits")
    (
        "names one character too long",
        lambda: basic_document(
            publishers=[publisher(name="p" * 201), publisher(id=PUB_OTHER)],
            advertisers=[advertiser(name="a" * 201)],
            screens=[screen(name="s" * 201)],
            campaigns=[campaign(name="c" * 201)],
        ),
        {
            ("publishers", 0, "name"),
            ("advertisers", 0, "name"),
            ("screens", 0, "name"),
            ("campaigns", 0, "name"),
        },
    ),
    (
        "external id of 129 characters, venue type of 129, asset URL of 2,049",
        lambda: basic_document(
            screens=[screen(external_id="e" * 129, venue_type="v" * 129)],
            creatives=[creative(url="https://cdn.example/" + "a" * 2025 + ".mp4")],
        ),
        {("screens", 0, "external_id"), ("screens", 0, "venue_type"), ("creatives", 0, "url")},
    ),
]


def test_text_at_its_limit_and_audience_at_its_bound_are_valid() -> None:
    doc = basic_document(
        publishers=[
            publisher(name="p" * 200, max_audience_per_play=Decimal("12.5")),
            publisher(id=PUB_OTHER),
        ],
        screens=[screen(name="s" * 200, external_id="e" * 128, audience_per_play=Decimal("12.5"))],
        campaigns=[campaign(name="c" * 200, max_price_per_play_cents=Decimal("0.000001"))],
    )
    assert validate_document(doc) == []


def test_a_stored_publishers_bound_applies_to_a_screen_of_the_document() -> None:
    doc = InventoryDocument(screens=[screen(audience_per_play=Decimal(51))])
    found = validate_document(doc, known_publishers={PUB}, audience_bounds={PUB: Decimal(50)})
    assert [(p.list, p.field) for p in found] == [("screens", "audience_per_play")]
    assert "at most 50" in found[0].message
    assert validate_document(doc, known_publishers={PUB}, audience_bounds={PUB: Decimal(51)}) == []


def test_tab_line_feed_and_carriage_return_are_text_xml_carries() -> None:
    doc = basic_document(campaigns=[campaign(name="Summer\tsale\r\nsecond line")])
    assert validate_document(doc) == []


def test_the_largest_values_the_columns_hold_are_valid() -> None:
    doc = basic_document(
        screens=[screen(audience_per_play=Decimal("9999999999.9999"), width=2**31 - 1)],
        publishers=[
            publisher(
                commission_rate=Decimal("0.123456"),
                max_audience_per_play=Decimal("9999999999.9999"),
                max_screens=2**31 - 1,
            ),
            publisher(id=PUB_OTHER, name="Other Screens"),
        ],
        campaigns=[
            campaign(
                max_plays_per_screen_per_hour=2**31 - 1,
                max_price_per_play_cents=Decimal("9000000000"),
            )
        ],
    )
    assert validate_document(doc) == []


def test_an_ipv6_host_and_a_port_are_valid_in_an_asset_url() -> None:
    doc = basic_document(creatives=[creative(url="https://[2001:db8::1]:8443/a.mp4")])
    assert validate_document(doc) == []


def test_a_creative_just_under_a_day_is_valid() -> None:
    assert validate_document(basic_document(creatives=[creative(duration_seconds=86_399)])) == []


@pytest.mark.parametrize(("rule", "make", "expected"), CASES, ids=[c[0] for c in CASES])
def test_each_rule(rule: str, make: Callable[[], InventoryDocument], expected: set[Where]) -> None:
    problems = validate_document(make())
    assert {(p.list, p.index, p.field) for p in problems} == expected
    assert all(p.message for p in problems)


def test_every_problem_of_a_document_is_reported_at_once() -> None:
    doc = basic_document(
        publishers=[publisher(commission_rate=Decimal(2)), publisher(id=uid(2, 1))],
        screens=[screen(width=0, timezone="Nowhere/Else", lat=100.0)],
        campaigns=[campaign(cpm_cents=Decimal(-1), max_plays_per_screen_per_hour=-2)],
        creatives=[creative(duration_seconds=-1)],
    )
    assert problems_of(doc) == {
        ("publishers", 0, "commission_rate"),
        ("screens", 0, "width"),
        ("screens", 0, "timezone"),
        ("screens", 0, "lat"),
        ("campaigns", 0, "cpm_cents"),
        ("campaigns", 0, "max_plays_per_screen_per_hour"),
        ("creatives", 0, "duration_seconds"),
    }


def test_problems_carry_the_item_id() -> None:
    [problem] = validate_document(basic_document(screens=[screen(width=0)]))
    assert problem.id == screen().id


def test_references_may_point_at_stored_items() -> None:
    doc = InventoryDocument(
        screens=[screen()], creatives=[creative()], campaigns=[campaign(id=uid(5, 4))]
    )
    assert problems_of(doc) == {
        ("screens", 0, "publisher_id"),
        ("creatives", 0, "campaign_id"),
        ("campaigns", 0, "advertiser_id"),
    }
    assert (
        validate_document(
            doc,
            known_publishers={PUB},
            known_advertisers={ADV},
            known_campaigns={CAMPAIGN},
        )
        == []
    )


@pytest.mark.parametrize(
    ("url", "mime"),
    [
        ("https://cdn.example/a.jpg", "image/jpeg"),
        ("https://cdn.example/a.JPEG", "image/jpeg"),
        ("https://cdn.example/a.png?v=1", "image/png"),
        ("https://cdn.example/a.gif#x", "image/gif"),
        ("https://cdn.example/a.mp4", "video/mp4"),
        ("https://cdn.example/a.webm", "video/webm"),
        ("https://cdn.example/a.mov", "video/quicktime"),
        ("https://cdn.example/a.bmp", None),
        ("https://cdn.example/video", None),
        ("https://cdn.example.mp4/video", None),
    ],
)
def test_mime_type_from_the_extension(url: str, mime: str | None) -> None:
    assert mime_type_for(url) == mime


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (b'{"screens": [{"id": "x"}]}', "$.screens[0]"),
        (b'{"publishers": [], "extra": []}', "extra"),
        (b'{"campaigns": [{"status": "running"}]}', "$.campaigns[0]"),
    ],
)
def test_the_document_decodes_strictly(raw: bytes, fragment: str) -> None:
    with pytest.raises(msgspec.ValidationError, match=None) as caught:
        msgspec.json.decode(raw, type=InventoryDocument)
    assert fragment in str(caught.value)


def test_money_decodes_exactly() -> None:
    doc: Any = msgspec.json.decode(
        b'{"campaigns": [{"id": "c", "advertiser_id": "a", "name": "n", "status": "active",'
        b' "cpm_cents": 0.1, "budget_cents": 12345678.123456}]}',
        type=InventoryDocument,
    )
    assert doc.campaigns[0].cpm_cents == Decimal("0.1")
    assert doc.campaigns[0].budget_cents == Decimal("12345678.123456")


_ONE = "d5f843ab-1b54-4f8a-abb5-d955466a030a"


@pytest.mark.parametrize(
    "written",
    [
        _ONE,
        _ONE.upper(),
        _ONE.replace("-", ""),
        "{" + _ONE + "}",
        "{" + _ONE.replace("-", "") + "}",
        "urn:uuid:" + _ONE,
        "urn:uuid:" + _ONE.upper(),
    ],
)
def test_an_id_in_a_documented_form_is_the_same_id(written: str) -> None:
    # docs/inventory.md: UUIDs in any letter case, hyphenated or 32 hex digits, in braces or
    # after urn:uuid:.
    assert canonical_uuid(written) == _ONE
    assert str(parse_uuid(written)) == _ONE


@pytest.mark.parametrize(
    "written",
    [
        "+" + _ONE.replace("-", "")[1:],  # uuid.UUID reads this as 0d5f...
        " " + _ONE.replace("-", "")[1:],
        _ONE.replace("-", "")[:8] + "_" + _ONE.replace("-", "")[9:],
        "\u0660" * 32,  # Arabic-Indic zeros: the nil UUID to uuid.UUID
        _ONE[:-1],
        "{" + _ONE,
        _ONE[:8] + _ONE[9:],  # hyphens in some places only
        " " + _ONE,
        _ONE + "\n",
        "URN:UUID:" + _ONE,
    ],
)
def test_anything_else_is_no_id(written: str) -> None:
    assert not is_uuid(written)
    assert canonical_uuid(written) == written  # kept as given, for the checks to name
    with pytest.raises(ValueError, match="not a UUID"):
        parse_uuid(written)
