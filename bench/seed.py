"""A realistic, reproducible benchmark inventory: 10,000 screens of 20 publishers,
2,000 campaigns with 6,000 creatives, and a small variant with the first 20 campaigns only.

Everything comes from one seeded `random.Random`, so the same seed gives the same document
(ids, prices, targeting) on every machine. Only campaign flight dates are relative to `now`,
so the campaigns are in flight whenever the bench runs. Budgets are generous: a whole bench run
reserves a few million cents at most, far below any campaign's budget.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TypeVar

from matching.inventory import (
    Advertiser,
    BillingCode,
    Campaign,
    Creative,
    CreativeKind,
    Daypart,
    InventoryDocument,
    Publisher,
    Screen,
    ScreenType,
    Targeting,
)

FULL_SEED = 20_240_601
T = TypeVar("T")

#: (width, height) and weight: landscape and portrait Full HD dominate DOOH.
RESOLUTIONS: tuple[tuple[tuple[int, int], int], ...] = (
    ((1920, 1080), 45),
    ((1080, 1920), 30),
    ((3840, 2160), 10),
    ((1280, 720), 10),
    ((1024, 768), 5),
)
SCREEN_TYPE_WEIGHTS: tuple[tuple[ScreenType, int], ...] = (
    ("moving", 50),
    ("slow", 25),
    ("static", 25),
)
VENUE_TYPES = (
    "transit.train_stations",
    "transit.airports",
    "retail.malls",
    "retail.grocery",
    "outdoor.billboards",
    "outdoor.urban_panels",
    "office_buildings.lobby",
    "point_of_care.pharmacies",
)
TIMEZONES = ("Europe/Berlin", "Europe/London", "Europe/Paris", "Europe/Madrid", "UTC")


@dataclass(frozen=True)
class Size:
    """How many of each thing a bench inventory holds."""

    publishers: int = 20
    screens: int = 10_000
    advertisers: int = 200
    campaigns: int = 2_000
    creatives_per_campaign: int = 3
    billing_codes_per_advertiser: int = 5


FULL = Size()


def bench_uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _weighted(rng: random.Random, choices: tuple[tuple[T, int], ...]) -> T:
    values = [value for value, _ in choices]
    weights = [weight for _, weight in choices]
    return rng.choices(values, weights=weights, k=1)[0]


def _cents(rng: random.Random, low: int, high: int) -> Decimal:
    """A price in cents with two decimals (sub-cent precision is allowed, as on the wire)."""
    return Decimal(rng.randint(low * 100, high * 100)) / 100


def _publishers(rng: random.Random, size: Size) -> list[Publisher]:
    return [
        Publisher(
            id=bench_uuid(rng),
            name=f"Bench Publisher {n:02d}",
            commission_rate=Decimal(rng.choice(("0.10", "0.15", "0.15", "0.2", "0.125"))),
            # Two publishers are not activated for external ids, as in real onboarding.
            external_ids_enabled=n % 10 != 9,
        )
        for n in range(size.publishers)
    ]


def _screens(rng: random.Random, size: Size, publishers: list[Publisher]) -> list[Screen]:
    screens = []
    for n in range(size.screens):
        pub_index = n % len(publishers)
        width, height = _weighted(rng, RESOLUTIONS)
        screens.append(
            Screen(
                id=bench_uuid(rng),
                publisher_id=publishers[pub_index].id,
                name=f"Screen {n:05d}",
                type=_weighted(rng, SCREEN_TYPE_WEIGHTS),
                width=width,
                height=height,
                external_id=f"P{pub_index:02d}-S{n:05d}",
                audience_per_play=Decimal(rng.randint(100, 20_000)) / 100,
                venue_type=rng.choice(VENUE_TYPES),
                timezone=rng.choice(TIMEZONES),
                lat=round(rng.uniform(36.0, 60.0), 5),
                lon=round(rng.uniform(-9.0, 24.0), 5),
            )
        )
    return screens


def _targeting(rng: random.Random, publishers: list[Publisher]) -> Targeting:
    """Most campaigns run everywhere; the rest narrow by publisher, type, venue or daypart."""
    roll = rng.random()
    if roll < 0.60:
        return Targeting()
    if roll < 0.75:
        return Targeting(publisher_ids=[p.id for p in rng.sample(publishers, 5)])
    if roll < 0.85:
        types: list[ScreenType] = ["moving"] if rng.random() < 0.5 else ["slow", "moving"]
        return Targeting(screen_types=types)
    if roll < 0.95:
        return Targeting(venue_types=rng.sample(VENUE_TYPES, 3))
    return Targeting(dayparts=[Daypart(days=[0, 1, 2, 3, 4], start_hour=6, end_hour=22)])


def _campaigns(
    rng: random.Random,
    size: Size,
    advertisers: list[Advertiser],
    publishers: list[Publisher],
    now: datetime,
) -> list[Campaign]:
    campaigns = []
    for n in range(size.campaigns):
        flight = rng.random() < 0.5
        campaigns.append(
            Campaign(
                id=bench_uuid(rng),
                advertiser_id=advertisers[n % len(advertisers)].id,
                name=f"Campaign {n:04d}",
                status="paused" if rng.random() < 0.05 else "active",
                cpm_cents=_cents(rng, 200, 3_000),
                budget_cents=Decimal(rng.choice((50_000_000, 80_000_000, 100_000_000))),
                daily_budget_cents=Decimal(20_000_000) if rng.random() < 0.2 else None,
                start_at=(now - timedelta(days=30)) if flight else None,
                end_at=(now + timedelta(days=60)) if flight else None,
                max_plays_per_screen_per_hour=60 if rng.random() < 0.1 else None,
                targeting=_targeting(rng, publishers),
            )
        )
    return campaigns


def _creative(
    rng: random.Random,
    campaign: Campaign,
    n: int,
    kind: CreativeKind,
    extension: str,
    resolution: tuple[int, int],
) -> Creative:
    return Creative(
        id=bench_uuid(rng),
        campaign_id=campaign.id,
        url=f"https://cdn.bench.example/c{n:04d}/{kind}-{resolution[0]}x{resolution[1]}.{extension}",
        kind=kind,
        width=resolution[0],
        height=resolution[1],
        duration_seconds=rng.choice((10, 15, 20, 30)) if kind != "image" else 10,
        approved=rng.random() < 0.95,
    )


def _creatives(rng: random.Random, size: Size, campaigns: list[Campaign]) -> list[Creative]:
    """Three per campaign: a video and a still at its main resolution for 70% of campaigns,
    stills and a cinemagraph only for the rest, and one asset at a second resolution."""
    creatives = []
    for n, campaign in enumerate(campaigns):
        main = _weighted(rng, RESOLUTIONS)
        other = _weighted(rng, RESOLUTIONS)
        plan: list[tuple[CreativeKind, str, tuple[int, int]]]
        if rng.random() < 0.7:
            plan = [
                ("video", "mp4", main),
                ("image", "jpg", main),
                rng.choice((("image", "png", other), ("cinemagraph", "mp4", main))),
            ]
            if rng.random() < 0.2:
                plan[2] = ("video", "webm", other)
        else:
            plan = [("image", "jpg", main), ("image", "png", other), ("cinemagraph", "gif", main)]
        for kind, extension, resolution in plan[: size.creatives_per_campaign]:
            creatives.append(_creative(rng, campaign, n, kind, extension, resolution))
    return creatives


def full_document(
    seed: int = FULL_SEED, size: Size = FULL, now: datetime | None = None
) -> InventoryDocument:
    """The bench inventory: the same document for the same seed and size."""
    rng = random.Random(seed)
    now = now or datetime.now(UTC).replace(microsecond=0)
    publishers = _publishers(rng, size)
    advertisers = [
        Advertiser(id=bench_uuid(rng), name=f"Brand {n:03d}", domain=f"brand{n:03d}.example")
        for n in range(size.advertisers)
    ]
    billing_codes = []
    for a_index, advertiser in enumerate(advertisers):
        for publisher in rng.sample(publishers, size.billing_codes_per_advertiser):
            billing_codes.append(
                BillingCode(
                    advertiser_id=advertiser.id,
                    publisher_id=publisher.id,
                    code=f"BILL-{a_index:03d}-{publisher.name[-2:]}",
                )
            )
    screens = _screens(rng, size, publishers)
    campaigns = _campaigns(rng, size, advertisers, publishers, now)
    creatives = _creatives(rng, size, campaigns)
    return InventoryDocument(
        publishers=publishers,
        advertisers=advertisers,
        billing_codes=billing_codes,
        screens=screens,
        campaigns=campaigns,
        creatives=creatives,
    )


def small_variant(doc: InventoryDocument, campaigns: int = 20) -> InventoryDocument:
    """The same publishers, screens and advertisers with only the first `campaigns` campaigns:
    the inventory-size comparison changes one thing, the number of campaigns."""
    kept = doc.campaigns[:campaigns]
    kept_ids = {c.id for c in kept}
    return InventoryDocument(
        publishers=doc.publishers,
        advertisers=doc.advertisers,
        billing_codes=doc.billing_codes,
        screens=doc.screens,
        campaigns=kept,
        creatives=[c for c in doc.creatives if c.campaign_id in kept_ids],
    )
