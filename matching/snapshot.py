"""The immutable in-memory inventory a worker matches against, indexed for the hot path.

Built from an InventoryDocument (plus API keys) by `build_snapshot`; never mutated afterwards, so
a request reads one consistent view while a newer snapshot is being built beside it.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

from matching.inventory import (
    DEFAULT_CATTAX,
    DEFAULT_MAX_AUDIENCE_PER_PLAY,
    SCREEN_TYPES,
    Advertiser,
    Campaign,
    Creative,
    ExchangeRate,
    InventoryDocument,
    Publisher,
    Screen,
    can_show,
    mime_type_for,
)
from matching.money import (
    AUDIENCE_UNITS_PER_VIEWER,
    MICROS_PER_CENT,
    cents_to_micros,
    scaled_exactly,
)

# Richer kinds first: a moving screen shows a video before a still image of the same campaign.
KIND_PREFERENCE = {"video": 0, "cinemagraph": 1, "image": 2}

#: Hot-state shards. Every Redis key of a campaign, and of the offers and deals made from it,
#: carries the hash tag of its shard, so each Lua script touches one Redis Cluster slot.
SHARDS = 16


def campaign_shard(campaign_id: str) -> int:
    """The hot-state shard of a campaign: stable across processes and releases."""
    return zlib.crc32(campaign_id.encode()) % SHARDS


@dataclass(frozen=True, slots=True)
class CreativeInfo:
    id: str
    url: str
    kind: str
    width: int
    height: int
    duration_seconds: int
    mime_type: str


@dataclass(frozen=True, slots=True)
class CampaignInfo:
    """A campaign as matching needs it: prices in micro-cents, targeting as sets.

    `cpm_micros` is the CPM as an exact integer (None if finer than a micro-cent), so a play's
    price is integer arithmetic; `ranked_creatives` holds, per screen type, the creatives that
    type can show in order of preference (richer kind first, then id), computed once here
    rather than on every request.
    """

    id: str
    advertiser_id: str
    name: str
    active: bool
    cpm_cents: Decimal
    budget_micros: int
    daily_budget_micros: int | None
    start_at: datetime | None
    end_at: datetime | None
    max_plays_per_screen_per_hour: int | None
    publisher_ids: frozenset[str] | None
    screen_ids: frozenset[str] | None
    screen_types: frozenset[str] | None
    venue_types: frozenset[str] | None
    dayparts: tuple[tuple[frozenset[int], int, int], ...] | None
    #: Targeted places as (lat, lon, radius km), None: anywhere.
    places: tuple[tuple[float, float, float], ...] | None
    creatives: tuple[CreativeInfo, ...]
    shard: int
    cpm_micros: int | None
    #: The most one play may cost (micro-cents); None: no cap.
    max_price_micros: int | None
    #: The IAB categories a bid carries as `cat` (the campaign's own, else its advertiser's) and
    #: their taxonomy (`cattax`).
    categories: tuple[str, ...]
    cattax: int
    #: What a block names the campaign by, computed once: (cattax, category) for each category
    #: and, in taxonomy 1, its tier-1 parent (`IAB1` blocks `IAB1-5`); the advertiser's domain
    #: in lower case and each parent domain (`ford.com` blocks `shop.ford.com`).
    category_keys: frozenset[tuple[int, str]]
    domain_keys: frozenset[str]
    ranked_creatives: dict[str, tuple[CreativeInfo, ...]] = field(compare=False)

    def in_flight(self, now: datetime) -> bool:
        if self.start_at is not None and now < self.start_at:
            return False
        return self.end_at is None or now < self.end_at

    def in_daypart(self, weekday: int, hour: int) -> bool:
        if self.dayparts is None:
            return True
        return any(weekday in days and start <= hour < end for days, start, end in self.dayparts)

    def admits(self, screen: ScreenInfo) -> bool:
        """Static targeting: publisher, screen, type and venue allow-lists."""
        if self.publisher_ids is not None and screen.publisher_id not in self.publisher_ids:
            return False
        if self.screen_ids is not None and screen.id not in self.screen_ids:
            return False
        if self.screen_types is not None and screen.type not in self.screen_types:
            return False
        if self.venue_types is not None and self.venue_types.isdisjoint(screen.venues):
            return False
        return self.places is None or _in_places(screen.location, self.places)

    def creatives_for(self, screen_type: str) -> tuple[CreativeInfo, ...]:
        """The creatives a screen type can show, the preferred first."""
        return self.ranked_creatives[screen_type]

    def sizes_for(self, screen_type: str) -> frozenset[tuple[int, int]]:
        """The (width, height) of every creative a screen type can show."""
        return frozenset((c.width, c.height) for c in self.ranked_creatives[screen_type])


#: The Earth's mean radius (IUGG), for the great-circle distance of a screen to a place.
EARTH_RADIUS_KM = 6371.0088


def distance_km(a: tuple[float, float], b: tuple[float, float]) -> float:
    """The great-circle (haversine) distance between two (lat, lon) points in degrees."""
    lat1, lon1, lat2, lon2 = map(math.radians, (a[0], a[1], b[0], b[1]))
    h = (
        math.sin((lat2 - lat1) / 2) ** 2
        + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    )
    return 2 * EARTH_RADIUS_KM * math.asin(min(1.0, math.sqrt(h)))


def _in_places(
    location: tuple[float, float] | None, places: tuple[tuple[float, float, float], ...]
) -> bool:
    """Whether a known location lies within one of the places (an unknown one is in none)."""
    if location is None:
        return False
    return any(distance_km(location, (lat, lon)) <= radius for lat, lon, radius in places)


@dataclass(frozen=True, slots=True)
class ScreenInfo:
    id: str
    publisher_id: str
    external_id: str | None
    name: str
    type: str
    width: int
    height: int
    audience_per_play: Decimal
    venue_type: str | None
    zone: ZoneInfo
    active: bool
    # audience_per_play in AUDIENCE_UNITS_PER_VIEWER, for integer pricing (None if finer).
    audience_units: int | None
    #: The largest audience a play here is priced for: the publisher's max_audience_per_play.
    max_audience: Decimal
    #: The venue types venue targeting compares (the screen's `venue_type`, or an OpenRTB
    #: request's venue types when the screen has none) and where the screen is (its lat/lon,
    #: or the request's `device.geo` when it has none).
    venues: frozenset[str] = frozenset()
    location: tuple[float, float] | None = None


@dataclass(frozen=True, slots=True)
class PublisherInfo:
    id: str
    name: str
    commission_rate: Decimal
    external_ids_enabled: bool
    #: Each key's token bucket (None: the fleet default): requests per second, bucket size.
    rate_limit_per_second: float | None = None
    rate_limit_burst: int | None = None


@dataclass(frozen=True, slots=True)
class ApiKeyInfo:
    key_id: str
    publisher_id: str
    expires_at: datetime | None


@dataclass(frozen=True)
class Snapshot:
    """One consistent, indexed view of the inventory and the API keys."""

    version: int
    publishers: dict[str, PublisherInfo]
    advertisers: dict[str, Advertiser]
    screens: dict[str, ScreenInfo]
    screens_by_external_id: dict[tuple[str, str], ScreenInfo]
    campaigns: dict[str, CampaignInfo]
    billing_codes: dict[tuple[str, str], str]
    api_keys: dict[bytes, ApiKeyInfo]
    # (screen type, publisher id) -> campaigns that may serve there, highest CPM first.
    candidates: dict[tuple[str, str], tuple[CampaignInfo, ...]] = field(default_factory=dict)
    # screen id -> campaigns that target that screen by id, highest CPM first.
    candidates_by_screen: dict[str, tuple[CampaignInfo, ...]] = field(default_factory=dict)
    # (screen type, publisher id, width, height) -> `candidates` of that type and publisher
    # with a creative of exactly that size for the type, same order (OpenRTB's exact size).
    candidates_sized: dict[tuple[str, str, int, int], tuple[CampaignInfo, ...]] = field(
        default_factory=dict
    )
    #: The operator's exchange rates by currency code (an OpenRTB floor in another currency).
    exchange_rates: dict[str, ExchangeRate] = field(default_factory=dict)
    #: Whether any campaign targets venue types, or places: only then does an OpenRTB
    #: request's venue or location stand in for a screen's missing one.
    targets_venues: bool = False
    targets_places: bool = False

    def billing_code(self, advertiser_id: str, publisher_id: str) -> str | None:
        return self.billing_codes.get((advertiser_id, publisher_id))


def category_keys(cattax: int, categories: Iterable[str]) -> frozenset[tuple[int, str]]:
    """The (cattax, id) pairs a block of these categories matches: each id, and in taxonomy 1
    (ids `IAB<n>-<m>` under tier 1 `IAB<n>`) its tier-1 parent too, so that blocking `IAB7`
    blocks every `IAB7-*`."""
    keys = set()
    for category in categories:
        keys.add((cattax, category))
        if cattax == DEFAULT_CATTAX and "-" in category:
            keys.add((cattax, category.split("-", 1)[0]))
    return frozenset(keys)


def domain_keys(domain: str) -> frozenset[str]:
    """A domain in lower case and every parent domain it belongs to (`shop.ford.com`:
    `shop.ford.com`, `ford.com`, `com`): a blocked domain blocks its subdomains."""
    labels = domain.strip().lower().rstrip(".").split(".")
    return frozenset(".".join(labels[i:]) for i in range(len(labels)) if labels[i])


def _campaign_info(
    campaign: Campaign, creatives: list[Creative], advertiser: Advertiser | None = None
) -> CampaignInfo:
    t = campaign.targeting
    if campaign.categories is not None or advertiser is None:
        categories, cattax = tuple(campaign.categories or ()), campaign.cattax
    else:
        categories, cattax = tuple(advertiser.categories or ()), advertiser.cattax
    approved = tuple(
        CreativeInfo(
            id=c.id,
            url=c.url,
            kind=c.kind,
            width=c.width,
            height=c.height,
            duration_seconds=c.duration_seconds,
            mime_type=mime_type_for(c.url) or "",
        )
        for c in sorted(creatives, key=lambda c: c.id)
        if c.approved
    )
    return CampaignInfo(
        id=campaign.id,
        advertiser_id=campaign.advertiser_id,
        name=campaign.name,
        active=campaign.status == "active",
        cpm_cents=campaign.cpm_cents,
        budget_micros=cents_to_micros(campaign.budget_cents, exact=False),
        daily_budget_micros=(
            None
            if campaign.daily_budget_cents is None
            else cents_to_micros(campaign.daily_budget_cents, exact=False)
        ),
        start_at=campaign.start_at,
        end_at=campaign.end_at,
        max_plays_per_screen_per_hour=campaign.max_plays_per_screen_per_hour,
        publisher_ids=frozenset(t.publisher_ids) if t.publisher_ids is not None else None,
        screen_ids=frozenset(t.screen_ids) if t.screen_ids is not None else None,
        screen_types=frozenset(t.screen_types) if t.screen_types is not None else None,
        venue_types=frozenset(t.venue_types) if t.venue_types is not None else None,
        dayparts=(
            None
            if t.dayparts is None
            else tuple((frozenset(p.days), p.start_hour, p.end_hour) for p in t.dayparts)
        ),
        places=(None if t.places is None else tuple((p.lat, p.lon, p.radius_km) for p in t.places)),
        creatives=approved,
        shard=campaign_shard(campaign.id),
        cpm_micros=scaled_exactly(campaign.cpm_cents, MICROS_PER_CENT),
        max_price_micros=(
            None
            if campaign.max_price_per_play_cents is None
            else cents_to_micros(campaign.max_price_per_play_cents, exact=False)
        ),
        categories=categories,
        cattax=cattax,
        category_keys=category_keys(cattax, categories),
        domain_keys=domain_keys(advertiser.domain) if advertiser is not None else frozenset(),
        ranked_creatives=_ranked_creatives(approved),
    )


def _ranked_creatives(creatives: tuple[CreativeInfo, ...]) -> dict[str, tuple[CreativeInfo, ...]]:
    ranked = sorted(creatives, key=lambda c: (KIND_PREFERENCE[c.kind], c.id))
    return {
        screen_type: tuple(c for c in ranked if can_show(screen_type, c.kind, c.mime_type))
        for screen_type in SCREEN_TYPES
    }


def _screen_info(
    screen: Screen, zones: dict[str, ZoneInfo], bounds: dict[str, Decimal]
) -> ScreenInfo:
    zone = zones.get(screen.timezone)
    if zone is None:
        zone = zones[screen.timezone] = ZoneInfo(screen.timezone)
    return ScreenInfo(
        id=screen.id,
        publisher_id=screen.publisher_id,
        external_id=screen.external_id,
        name=screen.name,
        type=screen.type,
        width=screen.width,
        height=screen.height,
        audience_per_play=screen.audience_per_play,
        venue_type=screen.venue_type,
        zone=zone,
        active=screen.active,
        audience_units=scaled_exactly(screen.audience_per_play, AUDIENCE_UNITS_PER_VIEWER),
        max_audience=bounds.get(screen.publisher_id, DEFAULT_MAX_AUDIENCE_PER_PLAY),
        venues=frozenset() if screen.venue_type is None else frozenset([screen.venue_type]),
        location=(None if screen.lat is None or screen.lon is None else (screen.lat, screen.lon)),
    )


def _publisher_info(publisher: Publisher) -> PublisherInfo:
    return PublisherInfo(
        id=publisher.id,
        name=publisher.name,
        commission_rate=publisher.commission_rate,
        external_ids_enabled=publisher.external_ids_enabled,
        rate_limit_per_second=publisher.rate_limit_per_second,
        rate_limit_burst=publisher.rate_limit_burst,
    )


def build_snapshot(
    doc: InventoryDocument, api_keys: dict[bytes, ApiKeyInfo] | None = None, version: int = 0
) -> Snapshot:
    """Index a document for matching. Only active campaigns with approved creatives are kept."""
    zones: dict[str, ZoneInfo] = {}
    bounds = {p.id: p.max_audience_per_play for p in doc.publishers}
    screens = {s.id: _screen_info(s, zones, bounds) for s in doc.screens}
    by_external = {
        (s.publisher_id, s.external_id): s for s in screens.values() if s.external_id is not None
    }
    creatives_by_campaign: dict[str, list[Creative]] = {}
    for creative in doc.creatives:
        creatives_by_campaign.setdefault(creative.campaign_id, []).append(creative)
    advertisers = {a.id: a for a in doc.advertisers}
    campaigns = {
        c.id: _campaign_info(
            c, creatives_by_campaign.get(c.id, []), advertisers.get(c.advertiser_id)
        )
        for c in doc.campaigns
    }
    servable = sorted(
        (c for c in campaigns.values() if c.active and c.creatives),
        key=lambda c: (-c.cpm_cents, c.id),
    )

    candidates: dict[tuple[str, str], tuple[CampaignInfo, ...]] = {}
    by_screen: dict[str, list[CampaignInfo]] = {}
    publisher_ids = {p.id for p in doc.publishers} | {s.publisher_id for s in doc.screens}
    for screen_type in SCREEN_TYPES:
        typed = [
            c
            for c in servable
            if c.creatives_for(screen_type)
            and (c.screen_types is None or screen_type in c.screen_types)
        ]
        for publisher_id in publisher_ids:
            candidates[(screen_type, publisher_id)] = tuple(
                c
                for c in typed
                if c.screen_ids is None
                and (c.publisher_ids is None or publisher_id in c.publisher_ids)
            )
    sized: dict[tuple[str, str, int, int], list[CampaignInfo]] = {}
    for (kind, publisher), listed in candidates.items():
        for campaign in listed:
            for width, height in sorted(campaign.sizes_for(kind)):
                sized.setdefault((kind, publisher, width, height), []).append(campaign)
    for campaign in servable:
        for screen_id in campaign.screen_ids or ():
            by_screen.setdefault(screen_id, []).append(campaign)

    return Snapshot(
        version=version,
        publishers={p.id: _publisher_info(p) for p in doc.publishers},
        advertisers=advertisers,
        screens=screens,
        screens_by_external_id=by_external,
        campaigns=campaigns,
        billing_codes={
            (b.advertiser_id, b.publisher_id): b.code
            for b in doc.billing_codes
            if b.code is not None
        },
        api_keys=api_keys or {},
        candidates=candidates,
        candidates_by_screen={k: tuple(v) for k, v in by_screen.items()},
        candidates_sized={k: tuple(v) for k, v in sized.items()},
        exchange_rates={r.currency: r for r in doc.exchange_rates},
        targets_venues=any(c.venue_types is not None for c in servable),
        targets_places=any(c.places is not None for c in servable),
    )
