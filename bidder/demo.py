"""The demo inventory `bidder dev` loads: three publishers, screens of every type in several
resolutions, advertisers with domains and billing codes, campaigns with budgets and targeting,
and approved creatives of every kind (a 1920x1080 MP4 among them, so the OpenRTB example bids).

Ids are fixed, so loading it again is a no-op and the README's examples keep working.
"""

from __future__ import annotations

from decimal import Decimal

from matching.inventory import (
    Advertiser,
    BillingCode,
    Campaign,
    Creative,
    Daypart,
    InventoryDocument,
    Publisher,
    Screen,
    Targeting,
)


def demo_id(kind: int, n: int) -> str:
    """A readable fixed UUID: demo_id(3, 1) -> de000003-0000-4000-a000-000000000001."""
    return f"de{kind:06x}-0000-4000-a000-{n:012x}"


METRO = demo_id(1, 1)
MALL = demo_id(1, 2)
ROADSIDE = demo_id(1, 3)
FIZZY = demo_id(2, 1)
NORDIC = demo_id(2, 2)
CINEMA = demo_id(2, 3)
FIZZY_SUMMER = demo_id(4, 1)
NORDIC_TRAILS = demo_id(4, 2)
CINEMA_PREMIERES = demo_id(4, 3)
FIZZY_WINTER = demo_id(4, 4)

#: The screen of the curl examples: moving, 1920x1080, external id `metro-cs-001`.
EXAMPLE_SCREEN = demo_id(3, 1)
EXAMPLE_EXTERNAL_ID = "metro-cs-001"
EXAMPLE_AUDIENCE = Decimal("119.47")
#: The publisher the demo API key belongs to.
EXAMPLE_PUBLISHER = METRO

BERLIN = "Europe/Berlin"
_CDN = "https://cdn.example.com/demo"


def _publishers() -> list[Publisher]:
    return [
        Publisher(
            id=METRO,
            name="Metro Transit Media",
            commission_rate=Decimal("0.15"),
            external_ids_enabled=True,
        ),
        Publisher(
            id=MALL,
            name="City Mall Screens",
            commission_rate=Decimal("0.2"),
            external_ids_enabled=True,
        ),
        Publisher(id=ROADSIDE, name="Roadside Digital", commission_rate=Decimal("0.12")),
    ]


def _screens() -> list[Screen]:
    return [
        Screen(
            id=EXAMPLE_SCREEN,
            publisher_id=METRO,
            external_id=EXAMPLE_EXTERNAL_ID,
            name="Central Station, Hall A",
            type="moving",
            width=1920,
            height=1080,
            audience_per_play=EXAMPLE_AUDIENCE,
            venue_type="transit.train_stations",
            lat=52.5251,
            lon=13.3694,
            timezone=BERLIN,
        ),
        Screen(
            id=demo_id(3, 2),
            publisher_id=METRO,
            external_id="metro-cs-002",
            name="Central Station, Platform 3",
            type="moving",
            width=1080,
            height=1920,
            audience_per_play=Decimal("64.5"),
            venue_type="transit.train_stations",
            timezone=BERLIN,
        ),
        Screen(
            id=demo_id(3, 3),
            publisher_id=METRO,
            external_id="metro-ap-001",
            name="Airport Arrivals",
            type="slow",
            width=1920,
            height=1080,
            audience_per_play=Decimal("80"),
            venue_type="transit.airports",
            timezone=BERLIN,
        ),
        Screen(
            id=demo_id(3, 4),
            publisher_id=METRO,
            external_id="metro-th-001",
            name="Ticket Hall Kiosk",
            type="static",
            width=1080,
            height=1920,
            audience_per_play=Decimal("12.25"),
            timezone=BERLIN,
        ),
        Screen(
            id=demo_id(3, 5),
            publisher_id=MALL,
            external_id="mall-atrium-01",
            name="Atrium LED Wall",
            type="moving",
            width=3840,
            height=2160,
            audience_per_play=Decimal("150"),
            venue_type="retail.malls",
            timezone="Europe/Paris",
        ),
        Screen(
            id=demo_id(3, 6),
            publisher_id=MALL,
            external_id="mall-food-01",
            name="Food Court",
            type="moving",
            width=1920,
            height=1080,
            audience_per_play=Decimal("40"),
            venue_type="retail.malls",
            timezone="Europe/Paris",
        ),
        Screen(
            id=demo_id(3, 7),
            publisher_id=MALL,
            external_id="mall-entrance-01",
            name="Main Entrance",
            type="static",
            width=1920,
            height=1080,
            audience_per_play=Decimal("55"),
            venue_type="retail.malls",
            timezone="Europe/Paris",
        ),
        Screen(
            id=demo_id(3, 8),
            publisher_id=MALL,
            external_id="mall-escalator-01",
            name="Escalator Column",
            type="slow",
            width=1080,
            height=1920,
            audience_per_play=Decimal("22"),
            venue_type="retail.malls",
            timezone="Europe/Paris",
        ),
        Screen(
            id=demo_id(3, 9),
            publisher_id=ROADSIDE,
            name="A9 Billboard North",
            type="static",
            width=1920,
            height=1080,
            audience_per_play=Decimal("310"),
            venue_type="outdoor.billboards",
            lat=48.3521,
            lon=11.6012,
            timezone=BERLIN,
        ),
        Screen(
            id=demo_id(3, 10),
            publisher_id=ROADSIDE,
            external_id="ring-road-1",
            name="Ring Road Digital",
            type="slow",
            width=1920,
            height=1080,
            audience_per_play=Decimal("205.5"),
            venue_type="outdoor.billboards",
            timezone=BERLIN,
        ),
    ]


def _campaigns() -> list[Campaign]:
    return [
        Campaign(
            id=FIZZY_SUMMER,
            advertiser_id=FIZZY,
            name="Fizzy Summer Refresh",
            status="active",
            cpm_cents=Decimal("250"),
            budget_cents=Decimal("500000"),
            daily_budget_cents=Decimal("50000"),
        ),
        Campaign(
            id=NORDIC_TRAILS,
            advertiser_id=NORDIC,
            name="Nordic Trails",
            status="active",
            cpm_cents=Decimal("180.5"),
            budget_cents=Decimal("200000"),
            max_plays_per_screen_per_hour=12,
            targeting=Targeting(screen_types=["slow", "moving"]),
        ),
        Campaign(
            id=CINEMA_PREMIERES,
            advertiser_id=CINEMA,
            name="Friday Premieres",
            status="active",
            cpm_cents=Decimal("320"),
            budget_cents=Decimal("100000"),
            targeting=Targeting(
                publisher_ids=[MALL],
                dayparts=[Daypart(days=[0, 1, 2, 3, 4, 5, 6], start_hour=16, end_hour=24)],
            ),
        ),
        Campaign(
            id=FIZZY_WINTER,
            advertiser_id=FIZZY,
            name="Fizzy Winter Warmers",
            status="paused",
            cpm_cents=Decimal("200"),
            budget_cents=Decimal("50000"),
        ),
    ]


def _creative(
    n: int, campaign_id: str, name: str, kind: str, size: tuple[int, int], seconds: int
) -> Creative:
    width, height = size
    return Creative(
        id=demo_id(5, n),
        campaign_id=campaign_id,
        url=f"{_CDN}/{name}",
        kind=kind,  # type: ignore[arg-type]
        width=width,
        height=height,
        duration_seconds=seconds,
        approved=True,
    )


def _creatives() -> list[Creative]:
    landscape, portrait, uhd = (1920, 1080), (1080, 1920), (3840, 2160)
    return [
        _creative(1, FIZZY_SUMMER, "fizzy-summer-1920x1080.mp4", "video", landscape, 15),
        _creative(2, FIZZY_SUMMER, "fizzy-summer-1080x1920.mp4", "video", portrait, 15),
        _creative(3, FIZZY_SUMMER, "fizzy-summer-3840x2160.mp4", "video", uhd, 15),
        _creative(4, FIZZY_SUMMER, "fizzy-summer-1920x1080.jpg", "image", landscape, 10),
        _creative(5, FIZZY_SUMMER, "fizzy-summer-1080x1920.png", "image", portrait, 10),
        _creative(6, NORDIC_TRAILS, "nordic-trails-1920x1080.gif", "cinemagraph", landscape, 8),
        _creative(7, NORDIC_TRAILS, "nordic-trails-1080x1920.gif", "cinemagraph", portrait, 8),
        _creative(8, NORDIC_TRAILS, "nordic-trails-1920x1080.webm", "video", landscape, 20),
        _creative(9, CINEMA_PREMIERES, "premieres-3840x2160.mov", "video", uhd, 30),
        _creative(10, CINEMA_PREMIERES, "premieres-1920x1080.jpg", "image", landscape, 10),
        _creative(11, FIZZY_WINTER, "fizzy-winter-1920x1080.jpg", "image", landscape, 10),
    ]


def demo_document() -> InventoryDocument:
    """The whole demo inventory, ready for `import_document`."""
    return InventoryDocument(
        publishers=_publishers(),
        advertisers=[
            Advertiser(id=FIZZY, name="Fizzy Drinks", domain="fizzy.example"),
            Advertiser(id=NORDIC, name="Nordic Outdoor Gear", domain="nordic-gear.example"),
            Advertiser(id=CINEMA, name="City Cinema", domain="citycinema.example"),
        ],
        billing_codes=[
            BillingCode(advertiser_id=FIZZY, publisher_id=METRO, code="FIZZY-METRO-2026"),
            BillingCode(advertiser_id=FIZZY, publisher_id=MALL, code="FIZZY-MALL-2026"),
            BillingCode(advertiser_id=NORDIC, publisher_id=METRO, code="NORDIC-METRO-Q3"),
            BillingCode(advertiser_id=CINEMA, publisher_id=MALL, code="CINEMA-MALL-01"),
            # Nordic on Roadside and Fizzy on Roadside have none: offers carry null.
        ],
        screens=_screens(),
        campaigns=_campaigns(),
        creatives=_creatives(),
    )
