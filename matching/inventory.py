"""The inventory document (decisions section 2) as typed Structs, and its validation rules.

The same Structs are the wire format of `PUT /admin/v1/inventory`, the file format of
`bidder inventory import`, and the rows the snapshot is built from.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec

ScreenType = Literal["static", "slow", "moving"]
CreativeKind = Literal["image", "cinemagraph", "video"]
CampaignStatus = Literal["active", "paused"]

#: Redis counts micro-cents exactly up to 2**53 (Lua numbers are doubles): 9e9 cents (EUR 90M).
MAX_AMOUNT_CENTS = Decimal(9_000_000_000)

SCREEN_TYPES: tuple[ScreenType, ...] = ("static", "slow", "moving")

#: Which creative kinds each screen type can show (contract: screen types and assets).
COMPATIBLE_KINDS: dict[str, frozenset[str]] = {
    "static": frozenset({"image"}),
    "slow": frozenset({"image", "cinemagraph"}),
    "moving": frozenset({"image", "cinemagraph", "video"}),
}

#: MIME type by asset file extension (decisions section 2). Anything else is refused at import.
MIME_BY_EXTENSION: dict[str, str] = {
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "png": "image/png",
    "gif": "image/gif",
    "mp4": "video/mp4",
    "webm": "video/webm",
    "mov": "video/quicktime",
}


def mime_type_for(url: str) -> str | None:
    """The asset MIME type from the URL path's extension, or None when it is not known."""
    path = urlsplit(url).path
    _, dot, extension = path.rpartition(".")
    if not dot or "/" in extension:
        return None
    return MIME_BY_EXTENSION.get(extension.lower())


class Publisher(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    id: str
    name: str
    commission_rate: Decimal = Decimal("0.15")
    external_ids_enabled: bool = False


class Advertiser(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    id: str
    name: str
    domain: str


class BillingCode(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    advertiser_id: str
    publisher_id: str
    code: str


class Screen(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    id: str
    publisher_id: str
    name: str
    type: ScreenType
    width: int
    height: int
    external_id: str | None = None
    audience_per_play: Decimal = Decimal("1.0")
    venue_type: str | None = None
    timezone: str = "UTC"
    lat: float | None = None
    lon: float | None = None
    active: bool = True


class Daypart(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Hours [start_hour, end_hour) on the weekdays listed (Monday=0), screen-local time."""

    days: list[int]
    start_hour: int
    end_hour: int


class Targeting(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    publisher_ids: list[str] | None = None
    screen_ids: list[str] | None = None
    screen_types: list[ScreenType] | None = None
    venue_types: list[str] | None = None
    dayparts: list[Daypart] | None = None


class Campaign(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    id: str
    advertiser_id: str
    name: str
    status: CampaignStatus
    cpm_cents: Decimal
    budget_cents: Decimal
    daily_budget_cents: Decimal | None = None
    start_at: datetime | None = None
    end_at: datetime | None = None
    max_plays_per_screen_per_hour: int | None = None
    targeting: Targeting = msgspec.field(default_factory=Targeting)


class Creative(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    id: str
    campaign_id: str
    url: str
    kind: CreativeKind
    width: int
    height: int
    duration_seconds: int
    approved: bool = False


class InventoryDocument(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    publishers: list[Publisher] = msgspec.field(default_factory=list)
    advertisers: list[Advertiser] = msgspec.field(default_factory=list)
    billing_codes: list[BillingCode] = msgspec.field(default_factory=list)
    screens: list[Screen] = msgspec.field(default_factory=list)
    campaigns: list[Campaign] = msgspec.field(default_factory=list)
    creatives: list[Creative] = msgspec.field(default_factory=list)


class Problem(msgspec.Struct, kw_only=True):
    """One reason an inventory document is refused: where (list, index, id, field) and why."""

    list: str
    index: int
    id: str | None
    field: str
    message: str


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


class _Checker:
    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def add(self, kind: str, index: int, item_id: str | None, field: str, message: str) -> None:
        self.problems.append(
            Problem(list=kind, index=index, id=item_id, field=field, message=message)
        )


def _check_ids(check: _Checker, kind: str, ids: list[str]) -> None:
    seen: set[str] = set()
    for index, item_id in enumerate(ids):
        if not _is_uuid(item_id):
            check.add(kind, index, item_id, "id", "must be a UUID")
        elif item_id in seen:
            check.add(kind, index, item_id, "id", "appears more than once in the document")
        seen.add(item_id)


def _check_money(
    check: _Checker,
    kind: str,
    index: int,
    item_id: str,
    field: str,
    value: Decimal | None,
    *,
    positive: bool = False,
) -> None:
    if value is None:
        return
    if not value.is_finite() or value < 0 or (positive and value == 0):
        check.add(
            kind,
            index,
            item_id,
            field,
            "must be a positive amount" if positive else "must be zero or more",
        )
    elif value != value.quantize(Decimal("0.000001")):
        check.add(kind, index, item_id, field, "has more than 6 decimal places of a cent")
    elif value > MAX_AMOUNT_CENTS:
        check.add(kind, index, item_id, field, f"must be at most {MAX_AMOUNT_CENTS} cents")


def validate_document(
    doc: InventoryDocument,
    known_publishers: set[str] | None = None,
    known_advertisers: set[str] | None = None,
    known_campaigns: set[str] | None = None,
) -> list[Problem]:
    """Every problem in `doc`, by list, item and field. References may point into the document
    or at items already stored (the `known_*` sets)."""
    check = _Checker()
    publishers = {p.id for p in doc.publishers} | (known_publishers or set())
    advertisers = {a.id for a in doc.advertisers} | (known_advertisers or set())
    campaigns = {c.id for c in doc.campaigns} | (known_campaigns or set())

    _check_ids(check, "publishers", [p.id for p in doc.publishers])
    for i, pub in enumerate(doc.publishers):
        if not pub.name.strip():
            check.add("publishers", i, pub.id, "name", "must not be empty")
        if not (Decimal(0) <= pub.commission_rate <= Decimal(1)):
            check.add("publishers", i, pub.id, "commission_rate", "must be between 0 and 1")

    _check_ids(check, "advertisers", [a.id for a in doc.advertisers])
    for i, adv in enumerate(doc.advertisers):
        if not adv.name.strip():
            check.add("advertisers", i, adv.id, "name", "must not be empty")
        if not adv.domain.strip() or " " in adv.domain or "/" in adv.domain:
            check.add("advertisers", i, adv.id, "domain", "must be a domain such as brand.example")

    pairs: set[tuple[str, str]] = set()
    for i, code in enumerate(doc.billing_codes):
        if code.advertiser_id not in advertisers:
            check.add("billing_codes", i, None, "advertiser_id", "names no known advertiser")
        if code.publisher_id not in publishers:
            check.add("billing_codes", i, None, "publisher_id", "names no known publisher")
        if (code.advertiser_id, code.publisher_id) in pairs:
            check.add(
                "billing_codes",
                i,
                None,
                "publisher_id",
                "a billing code for this advertiser and publisher appears twice",
            )
        pairs.add((code.advertiser_id, code.publisher_id))
        if not code.code.strip():
            check.add("billing_codes", i, None, "code", "must not be empty")

    _validate_screens(check, doc.screens, publishers)
    _validate_campaigns(check, doc.campaigns, advertisers)
    _validate_creatives(check, doc.creatives, campaigns)
    return check.problems


def _validate_screens(check: _Checker, screens: list[Screen], publishers: set[str]) -> None:
    _check_ids(check, "screens", [s.id for s in screens])
    external: set[tuple[str, str]] = set()
    for i, scr in enumerate(screens):
        if scr.publisher_id not in publishers:
            check.add("screens", i, scr.id, "publisher_id", "names no known publisher")
        if scr.width <= 0 or scr.height <= 0:
            check.add("screens", i, scr.id, "width", "width and height must be positive pixels")
        if not scr.audience_per_play.is_finite() or scr.audience_per_play <= 0:
            check.add("screens", i, scr.id, "audience_per_play", "must be greater than 0")
        if scr.external_id is not None:
            if not scr.external_id.strip():
                check.add("screens", i, scr.id, "external_id", "must not be empty when given")
            key = (scr.publisher_id, scr.external_id)
            if key in external:
                check.add(
                    "screens",
                    i,
                    scr.id,
                    "external_id",
                    "is used by another screen of this publisher",
                )
            external.add(key)
        try:
            ZoneInfo(scr.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            check.add("screens", i, scr.id, "timezone", "is not an IANA time zone")
        if scr.lat is not None and not -90 <= scr.lat <= 90:
            check.add("screens", i, scr.id, "lat", "must be between -90 and 90")
        if scr.lon is not None and not -180 <= scr.lon <= 180:
            check.add("screens", i, scr.id, "lon", "must be between -180 and 180")


def _validate_campaigns(check: _Checker, campaigns: list[Campaign], advertisers: set[str]) -> None:
    _check_ids(check, "campaigns", [c.id for c in campaigns])
    for i, cmp in enumerate(campaigns):
        if cmp.advertiser_id not in advertisers:
            check.add("campaigns", i, cmp.id, "advertiser_id", "names no known advertiser")
        _check_money(check, "campaigns", i, cmp.id, "cpm_cents", cmp.cpm_cents, positive=True)
        _check_money(check, "campaigns", i, cmp.id, "budget_cents", cmp.budget_cents)
        _check_money(check, "campaigns", i, cmp.id, "daily_budget_cents", cmp.daily_budget_cents)
        for name, stamp in (("start_at", cmp.start_at), ("end_at", cmp.end_at)):
            if stamp is not None and stamp.tzinfo is None:
                check.add("campaigns", i, cmp.id, name, "must carry a time zone (e.g. Z)")
        if (
            cmp.start_at
            and cmp.end_at
            and cmp.start_at.tzinfo
            and cmp.end_at.tzinfo
            and cmp.end_at <= cmp.start_at
        ):
            check.add("campaigns", i, cmp.id, "end_at", "must be after start_at")
        cap = cmp.max_plays_per_screen_per_hour
        if cap is not None and cap <= 0:
            check.add("campaigns", i, cmp.id, "max_plays_per_screen_per_hour", "must be positive")
        for d, part in enumerate(cmp.targeting.dayparts or []):
            field = f"targeting.dayparts[{d}]"
            if not part.days or any(day < 0 or day > 6 for day in part.days):
                check.add("campaigns", i, cmp.id, field, "days must be 0..6 (Monday=0)")
            if not 0 <= part.start_hour < part.end_hour <= 24:
                check.add("campaigns", i, cmp.id, field, "needs 0 <= start_hour < end_hour <= 24")


def _validate_creatives(check: _Checker, creatives: list[Creative], campaigns: set[str]) -> None:
    _check_ids(check, "creatives", [c.id for c in creatives])
    for i, cre in enumerate(creatives):
        if cre.campaign_id not in campaigns:
            check.add("creatives", i, cre.id, "campaign_id", "names no known campaign")
        parts = urlsplit(cre.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            check.add("creatives", i, cre.id, "url", "must be an http or https URL")
        elif mime_type_for(cre.url) is None:
            check.add(
                "creatives",
                i,
                cre.id,
                "url",
                "has an unknown file extension; known: " + ", ".join(sorted(MIME_BY_EXTENSION)),
            )
        if cre.width <= 0 or cre.height <= 0:
            check.add("creatives", i, cre.id, "width", "width and height must be positive pixels")
        if cre.duration_seconds <= 0:
            check.add("creatives", i, cre.id, "duration_seconds", "must be positive")
        mime = mime_type_for(cre.url) or ""
        if cre.kind == "video" and not mime.startswith("video/"):
            check.add("creatives", i, cre.id, "kind", "a video needs a video file (mp4, webm, mov)")
        if cre.kind == "image" and not mime.startswith("image/"):
            check.add(
                "creatives", i, cre.id, "kind", "an image needs an image file (jpg, png, gif)"
            )
