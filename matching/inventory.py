"""The inventory document (docs/contract.md#2-inventory) as typed Structs, and its validation rules.

The same Structs are the wire format of `PUT /admin/v1/inventory`, the file format of
`bidder inventory import`, and the rows the snapshot is built from.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Mapping
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec

from matching.money import decimal_places

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

#: The images a static screen shows: "Static images (JPEG, PNG)" (contract). A GIF of kind
#: `image` may move, so it goes only where slow assets may.
STATIC_IMAGE_TYPES = frozenset({"image/jpeg", "image/png"})


def can_show(screen_type: str, kind: str, mime_type: str) -> bool:
    """Whether a screen of `screen_type` may show a creative of `kind` in `mime_type`."""
    if kind not in COMPATIBLE_KINDS[screen_type]:
        return False
    return screen_type != "static" or mime_type in STATIC_IMAGE_TYPES


#: MIME type by asset file extension (docs/contract.md#2-inventory). Anything else is refused
#: at import.
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
    try:
        path = urlsplit(url).path
    except ValueError:  # an unbalanced [ or ] in the host part
        return None
    _, dot, extension = path.rpartition(".")
    if not dot or "/" in extension:
        return None
    return MIME_BY_EXTENSION.get(extension.lower())


#: The audience per play a publisher's screens may have unless the operator sets another bound
#: (`max_audience_per_play`): far above any real screen's, far below a budget-draining one.
DEFAULT_MAX_AUDIENCE_PER_PLAY = Decimal(50_000)
#: How many screens a publisher may register through the screens API unless the operator sets
#: another quota (`max_screens`).
DEFAULT_MAX_SCREENS = 10_000


class Publisher(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    id: str
    name: str
    commission_rate: Decimal = Decimal("0.15")
    external_ids_enabled: bool = False
    #: The largest `audience_per_play` of the publisher's screens, and of an OpenRTB audience
    #: (`qty.multiplier`) the service bids on for them: one play's price is cpm x audience.
    max_audience_per_play: Decimal = DEFAULT_MAX_AUDIENCE_PER_PLAY
    #: How many screens (inactive ones included) the screens API lets the publisher hold.
    max_screens: int = DEFAULT_MAX_SCREENS
    #: Requests per second each of the publisher's API keys may make on the public routes
    #: (a token bucket); None: the fleet default (RATE_LIMIT_PER_SECOND, off unless set).
    rate_limit_per_second: float | None = None
    #: The bucket's size: how many requests may come at once above the rate; None: one
    #: second's worth (at least 1).
    rate_limit_burst: int | None = None


#: The category taxonomy of `categories` unless an item names another: AdCOM's list "Category
#: Taxonomies", where 1 is IAB Tech Lab Content Category Taxonomy 1.0 (`IAB1`, `IAB1-5`, ...).
DEFAULT_CATTAX = 1
#: The most categories one advertiser or campaign carries, and the longest category id.
MAX_CATEGORIES = 64
MAX_CATEGORY_CHARS = 64


class Advertiser(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    id: str
    name: str
    domain: str
    #: The advertiser's IAB content categories (ids of the `cattax` taxonomy); OpenRTB `bcat`
    #: blocks by them, and a bid carries them as `cat`. None: no categories.
    categories: list[str] | None = None
    cattax: int = DEFAULT_CATTAX


class BillingCode(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The billing code of an (advertiser, publisher) pair. `code: null` in an import removes
    the pair's code (answers then carry `billing_code: null`); an export lists only codes."""

    advertiser_id: str
    publisher_id: str
    code: str | None


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


class Place(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A circle on the map: a screen within `radius_km` of (`lat`, `lon`) is in the place."""

    lat: float
    lon: float
    radius_km: float


#: The most places one campaign targets, and the largest radius (half the Earth's circumference).
MAX_PLACES = 1000
MAX_RADIUS_KM = 20_038.0


class Targeting(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    publisher_ids: list[str] | None = None
    screen_ids: list[str] | None = None
    screen_types: list[ScreenType] | None = None
    venue_types: list[str] | None = None
    dayparts: list[Daypart] | None = None
    places: list[Place] | None = None


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
    #: The most one play may cost (cents); a screen or request whose price per play is higher
    #: is not served by the campaign. None: no cap.
    max_price_per_play_cents: Decimal | None = None
    targeting: Targeting = msgspec.field(default_factory=Targeting)
    #: The campaign's own IAB content categories; None: its advertiser's (with their cattax).
    categories: list[str] | None = None
    cattax: int = DEFAULT_CATTAX


class Creative(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    id: str
    campaign_id: str
    url: str
    kind: CreativeKind
    width: int
    height: int
    duration_seconds: int
    approved: bool = False


#: The most units of a currency one euro may be worth in an exchange rate, and its decimals.
MAX_UNITS_PER_EUR = Decimal(10) ** 9
EXCHANGE_RATE_PLACES = 10


class ExchangeRate(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """How many units of `currency` one euro buys on `as_of` (the ECB's way of quoting: USD
    1.0823 means 1 EUR = 1.0823 USD); an OpenRTB floor in that currency is divided by it."""

    currency: str
    units_per_eur: Decimal
    as_of: date


class InventoryDocument(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    publishers: list[Publisher] = msgspec.field(default_factory=list)
    advertisers: list[Advertiser] = msgspec.field(default_factory=list)
    billing_codes: list[BillingCode] = msgspec.field(default_factory=list)
    screens: list[Screen] = msgspec.field(default_factory=list)
    campaigns: list[Campaign] = msgspec.field(default_factory=list)
    creatives: list[Creative] = msgspec.field(default_factory=list)
    exchange_rates: list[ExchangeRate] = msgspec.field(default_factory=list)


#: The inventory document's lists and the type of their items.
ITEM_TYPES: dict[str, type[msgspec.Struct]] = {
    "publishers": Publisher,
    "advertisers": Advertiser,
    "billing_codes": BillingCode,
    "screens": Screen,
    "campaigns": Campaign,
    "creatives": Creative,
    "exchange_rates": ExchangeRate,
}


class Problem(msgspec.Struct, kw_only=True):
    """One reason an inventory document is refused: where (list, index, id, field) and why."""

    list: str
    index: int
    id: str | None
    field: str
    message: str


#: Postgres `integer` columns (pixels, caps) hold at most this.
_INT4_MAX = 2**31 - 1
#: Widths and heights in pixels: positive, and what an `integer` column holds.
MAX_PIXELS = _INT4_MAX
_PIXELS = f"must be positive pixels, at most {MAX_PIXELS}"
#: A screen's audience per play is stored as NUMERIC(14, 4): below 10 billion, 4 decimals.
MAX_AUDIENCE_PER_PLAY = Decimal(10) ** 10
#: The demo screen's id (decisions: demo mode): the external-id route answers it with the demo
#: offer, so no screen may take it as its external id (it could never be reached by it).
DEMO_EXTERNAL_ID = "test-display-test"
#: Names in the zone database that are no place's time zone: `localtime` is the host's own
#: zone (a screen's dayparts would then depend on where a worker runs), `posixrules` the host's
#: default rules, `Factory` a placeholder.
_NOT_A_PLACE = frozenset({"localtime", "posixrules", "Factory"})


def is_time_zone(name: str) -> bool:
    """Whether `name` is an IANA time zone of a place (`Europe/Berlin`, `UTC`) that the zone
    database holds, spelt as it spells it."""
    if name in _NOT_A_PLACE:
        return False
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


#: The longest creative a VAST `Duration` (an `xs:time`, HH:MM:SS under 24 hours) can carry.
MAX_DURATION_SECONDS = 86_399

# Characters XML 1.0 cannot carry (its `Char` production): C0 controls other than tab, line
# feed and carriage return, surrogates, U+FFFE and U+FFFF. Inventory text reaches VAST
# documents, so it may hold none of them.
_NOT_XML_CHAR = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


#: The longest name of a publisher, advertiser, screen or campaign (characters).
MAX_NAME_CHARS = 200
#: The longest external id of a screen (characters): what an SSP's tag id or a player's
#: configuration holds.
MAX_EXTERNAL_ID_CHARS = 128
#: The longest text of each field, by list (characters; ids are UUIDs, checked as such). A
#: longer value is refused, never cut: it reaches answers, VAST documents and every worker's
#: snapshot.
TEXT_LIMITS: dict[str, dict[str, int]] = {
    "publishers": {"name": MAX_NAME_CHARS},
    "advertisers": {"name": MAX_NAME_CHARS, "domain": 253},
    "billing_codes": {"code": 128},
    "screens": {
        "name": MAX_NAME_CHARS,
        "external_id": MAX_EXTERNAL_ID_CHARS,
        "venue_type": 128,
        "timezone": 64,
    },
    "campaigns": {"name": MAX_NAME_CHARS},
    "creatives": {"url": 2048},
}


def _check_text(check: _Checker, kind: str, items: list[msgspec.Struct]) -> None:
    """Every text field of every item, for its length and for characters no XML document can
    hold."""
    limits = TEXT_LIMITS.get(kind, {})
    for index, item in enumerate(items):
        for field in item.__struct_fields__:
            value = getattr(item, field)
            if not isinstance(value, str):
                continue
            limit = limits.get(field)
            if limit is not None and len(value) > limit:
                check.add(
                    kind,
                    index,
                    getattr(item, "id", None),
                    field,
                    f"must be at most {limit} characters (it has {len(value)})",
                )
            if _NOT_XML_CHAR.search(value):
                check.add(
                    kind,
                    index,
                    getattr(item, "id", None),
                    field,
                    "must not hold control characters (tab, line feed and carriage return "
                    "excepted), U+FFFE, U+FFFF or unpaired surrogates",
                )


#: A UUID in its canonical text form, in either case (what uuid.UUID prints, case aside).
CANONICAL_UUID = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)


#: The forms of a UUID an id may be written in: 32 hex digits, hyphenated 8-4-4-4-12 or not,
#: either case, in braces or after `urn:uuid:` (in lower case, as uuid.UUID reads it).
#: uuid.UUID itself takes more (a sign, blanks, underscores, digits of other scripts) and reads
#: them as some other id.
_UUID_DIGITS = rf"(?:[0-9a-f]{{32}}|{CANONICAL_UUID.pattern})"
_UUID_FORM = re.compile(rf"(?-i:urn:uuid:)?(?:{_UUID_DIGITS}|\{{{_UUID_DIGITS}\}})", re.IGNORECASE)


def parse_uuid(value: str) -> uuid.UUID:
    """`value` as a UUID when it is written in one of `_UUID_FORM`'s forms; ValueError
    otherwise."""
    if _UUID_FORM.fullmatch(value) is None:
        raise ValueError(f"not a UUID: {value[:64]!r}")
    return uuid.UUID(value)


def is_uuid(value: str) -> bool:
    try:
        parse_uuid(value)
    except ValueError:
        return False
    return True


def canonical_uuid(value: str) -> str:
    """`value` in the one form ids are kept under (lower case, hyphens) when it is a UUID in
    a form RFC 4122 readers take (upper case, `{...}`, no hyphens, `urn:uuid:`); anything
    else as it is, for the checks to name and for nothing to be found by."""
    if CANONICAL_UUID.fullmatch(value) is not None:
        return value.lower()
    try:
        return str(parse_uuid(value))
    except ValueError:
        return value


def _canonical_list(values: list[str] | None) -> list[str] | None:
    return None if values is None else [canonical_uuid(v) for v in values]


def canonicalize_ids(doc: InventoryDocument) -> None:
    """Write every id and reference of `doc` in the form Postgres reads it back in, in place.
    `DE00...` and `de00...` name the same row: as ids they must count as duplicates of each
    other, and as references (targeting included) match the item they name."""
    for pub in doc.publishers:
        pub.id = canonical_uuid(pub.id)
    for adv in doc.advertisers:
        adv.id = canonical_uuid(adv.id)
    for code in doc.billing_codes:
        code.advertiser_id = canonical_uuid(code.advertiser_id)
        code.publisher_id = canonical_uuid(code.publisher_id)
    for scr in doc.screens:
        scr.id, scr.publisher_id = canonical_uuid(scr.id), canonical_uuid(scr.publisher_id)
    for cmp in doc.campaigns:
        cmp.id, cmp.advertiser_id = canonical_uuid(cmp.id), canonical_uuid(cmp.advertiser_id)
        cmp.targeting.publisher_ids = _canonical_list(cmp.targeting.publisher_ids)
        cmp.targeting.screen_ids = _canonical_list(cmp.targeting.screen_ids)
    for cre in doc.creatives:
        cre.id, cre.campaign_id = canonical_uuid(cre.id), canonical_uuid(cre.campaign_id)


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
        if not is_uuid(item_id):
            check.add(kind, index, item_id, "id", "must be a UUID")
        elif item_id in seen:
            check.add(kind, index, item_id, "id", "appears more than once in the document")
        seen.add(item_id)


def in_utc(moment: datetime) -> datetime | None:
    """An aware datetime in UTC, or None when that falls outside datetime's years 1 to 9999
    (9999-12-31T23:59:59-12:00 does)."""
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        return None


def _host_part_ok(netloc: str) -> bool:
    """Whether a URL's `user:password@host:port` is one XML Schema validators (libxml2) take as
    part of an `xs:anyURI`; the path, query and fragment are made valid when a VAST is rendered."""
    userinfo, _, hostport = netloc.rpartition("@")
    if "%" in netloc or "[" in userinfo or "]" in userinfo:
        return False
    if ("[" in hostport or "]" in hostport) and not hostport.startswith("["):
        return False
    try:
        urlsplit(f"//{netloc}").port  # noqa: B018 - parsed for its ValueError
    except ValueError:
        return False
    return True


def _has_places(value: Decimal, places: int) -> bool:
    """Whether a finite `value` has at most `places` decimal places (no rounding involved)."""
    return value.is_finite() and decimal_places(value) <= places


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
    # Bounded before quantize, which refuses (InvalidOperation) a number past its precision.
    elif value > MAX_AMOUNT_CENTS:
        check.add(kind, index, item_id, field, f"must be at most {MAX_AMOUNT_CENTS} cents")
    elif not _has_places(value, 6):
        check.add(kind, index, item_id, field, "has more than 6 decimal places of a cent")


def validate_document(
    doc: InventoryDocument,
    known_publishers: set[str] | None = None,
    known_advertisers: set[str] | None = None,
    known_campaigns: set[str] | None = None,
    audience_bounds: Mapping[str, Decimal] | None = None,
) -> list[Problem]:
    """Every problem in `doc`, by list, item and field. References may point into the document
    or at items already stored (the `known_*` sets); `audience_bounds` holds the stored
    publishers' `max_audience_per_play` (a publisher of the document brings its own; a screen
    of a publisher in neither is not checked against a bound)."""
    check = _Checker()
    publishers = {p.id for p in doc.publishers} | (known_publishers or set())
    bounds = {**(audience_bounds or {}), **{p.id: p.max_audience_per_play for p in doc.publishers}}
    advertisers = {a.id for a in doc.advertisers} | (known_advertisers or set())
    campaigns = {c.id for c in doc.campaigns} | (known_campaigns or set())

    _check_ids(check, "publishers", [p.id for p in doc.publishers])
    for i, pub in enumerate(doc.publishers):
        if not pub.name.strip():
            check.add("publishers", i, pub.id, "name", "must not be empty")
        rate = pub.commission_rate
        if not (rate.is_finite() and Decimal(0) <= rate <= Decimal(1)):
            check.add("publishers", i, pub.id, "commission_rate", "must be between 0 and 1")
        elif not _has_places(pub.commission_rate, 6):
            # Stored as NUMERIC(7, 6): refused rather than rounded without a word.
            check.add("publishers", i, pub.id, "commission_rate", "has more than 6 decimal places")
        _check_audience(check, "publishers", i, pub.id, "max_audience_per_play", pub)
        if not 0 <= pub.max_screens <= _INT4_MAX:
            check.add("publishers", i, pub.id, "max_screens", f"must be from 0 to {_INT4_MAX}")
        per_second = pub.rate_limit_per_second
        if per_second is not None and not (math.isfinite(per_second) and per_second > 0):
            check.add("publishers", i, pub.id, "rate_limit_per_second", "must be a number above 0")
        burst = pub.rate_limit_burst
        if burst is not None and not 1 <= burst <= _INT4_MAX:
            check.add("publishers", i, pub.id, "rate_limit_burst", f"must be from 1 to {_INT4_MAX}")

    _check_ids(check, "advertisers", [a.id for a in doc.advertisers])
    for i, adv in enumerate(doc.advertisers):
        if not adv.name.strip():
            check.add("advertisers", i, adv.id, "name", "must not be empty")
        if not adv.domain.strip() or " " in adv.domain or "/" in adv.domain:
            check.add("advertisers", i, adv.id, "domain", "must be a domain such as brand.example")
        _check_categories(check, "advertisers", i, adv.id, adv.categories, adv.cattax)

    _validate_billing_codes(check, doc.billing_codes, advertisers, publishers)
    _validate_screens(check, doc.screens, publishers, bounds)
    _validate_campaigns(check, doc.campaigns, advertisers)
    _validate_creatives(check, doc.creatives, campaigns)
    _validate_exchange_rates(check, doc.exchange_rates)
    for kind in ("publishers", "advertisers", "billing_codes", "screens", "campaigns", "creatives"):
        _check_text(check, kind, getattr(doc, kind))
    return check.problems


def _validate_billing_codes(
    check: _Checker, codes: list[BillingCode], advertisers: set[str], publishers: set[str]
) -> None:
    pairs: set[tuple[str, str]] = set()
    for i, code in enumerate(codes):
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
        if code.code is not None and not code.code.strip():
            check.add("billing_codes", i, None, "code", "must not be empty")


def _check_pixels(
    check: _Checker, kind: str, index: int, item_id: str, width: int, height: int
) -> None:
    """Width and height, each its own problem under its own field."""
    for field, value in (("width", width), ("height", height)):
        if not 0 < value <= MAX_PIXELS:
            check.add(kind, index, item_id, field, _PIXELS)


def _check_audience(
    check: _Checker, kind: str, index: int, item_id: str, field: str, item: Publisher | Screen
) -> bool:
    """An audience per play (a screen's, or a publisher's bound of it): what NUMERIC(14, 4)
    holds, greater than 0. True when it is one."""
    audience: Decimal = getattr(item, field)
    if not audience.is_finite() or not 0 < audience < MAX_AUDIENCE_PER_PLAY:
        check.add(
            kind, index, item_id, field, f"must be greater than 0 and below {MAX_AUDIENCE_PER_PLAY}"
        )
        return False
    if not _has_places(audience, 4):
        # Stored as NUMERIC(14, 4), and it sets the price: refused rather than rounded.
        check.add(kind, index, item_id, field, "has more than 4 decimal places")
        return False
    return True


def _validate_screens(
    check: _Checker, screens: list[Screen], publishers: set[str], bounds: Mapping[str, Decimal]
) -> None:
    _check_ids(check, "screens", [s.id for s in screens])
    external: set[tuple[str, str]] = set()
    for i, scr in enumerate(screens):
        if not scr.name.strip():
            check.add("screens", i, scr.id, "name", "must not be empty")
        if scr.publisher_id not in publishers:
            check.add("screens", i, scr.id, "publisher_id", "names no known publisher")
        _check_pixels(check, "screens", i, scr.id, scr.width, scr.height)
        bound = bounds.get(scr.publisher_id)
        if bound is not None and not (bound.is_finite() and bound > 0):  # its own problem
            bound = None
        if (
            _check_audience(check, "screens", i, scr.id, "audience_per_play", scr)
            and bound is not None
            and scr.audience_per_play > bound
        ):
            check.add(
                "screens",
                i,
                scr.id,
                "audience_per_play",
                f"must be at most {bound:f}, the publisher's max_audience_per_play (the operator "
                "sets it)",
            )
        if scr.external_id is not None:
            _check_external_id(check, i, scr, external)
        if not is_time_zone(scr.timezone):
            check.add("screens", i, scr.id, "timezone", "is not an IANA time zone")
        if scr.venue_type is not None and not scr.venue_type.strip():
            check.add("screens", i, scr.id, "venue_type", "must not be empty when given")
        if scr.lat is not None and not -90 <= scr.lat <= 90:
            check.add("screens", i, scr.id, "lat", "must be between -90 and 90")
        if scr.lon is not None and not -180 <= scr.lon <= 180:
            check.add("screens", i, scr.id, "lon", "must be between -180 and 180")


def _check_external_id(
    check: _Checker, i: int, scr: Screen, external: set[tuple[str, str]]
) -> None:
    """A screen's external id: not blank, not the demo screen's, unique per publisher within
    the document (`external` holds the pairs seen so far)."""
    external_id = scr.external_id or ""
    if not external_id.strip():
        check.add("screens", i, scr.id, "external_id", "must not be empty when given")
    elif external_id == DEMO_EXTERNAL_ID:
        check.add(
            "screens", i, scr.id, "external_id", f"{DEMO_EXTERNAL_ID!r} is reserved for demo mode"
        )
    key = (scr.publisher_id, external_id)
    if key in external:
        check.add(
            "screens", i, scr.id, "external_id", "is used by another screen of this publisher"
        )
    external.add(key)


def _validate_campaigns(check: _Checker, campaigns: list[Campaign], advertisers: set[str]) -> None:
    _check_ids(check, "campaigns", [c.id for c in campaigns])
    for i, cmp in enumerate(campaigns):
        if not cmp.name.strip():  # the VAST's AdTitle
            check.add("campaigns", i, cmp.id, "name", "must not be empty")
        if cmp.advertiser_id not in advertisers:
            check.add("campaigns", i, cmp.id, "advertiser_id", "names no known advertiser")
        _check_money(check, "campaigns", i, cmp.id, "cpm_cents", cmp.cpm_cents, positive=True)
        _check_money(check, "campaigns", i, cmp.id, "budget_cents", cmp.budget_cents)
        _check_money(check, "campaigns", i, cmp.id, "daily_budget_cents", cmp.daily_budget_cents)
        _check_money(
            check,
            "campaigns",
            i,
            cmp.id,
            "max_price_per_play_cents",
            cmp.max_price_per_play_cents,
            positive=True,
        )
        for name, stamp in (("start_at", cmp.start_at), ("end_at", cmp.end_at)):
            if stamp is not None and stamp.tzinfo is None:
                check.add("campaigns", i, cmp.id, name, "must carry a time zone (e.g. Z)")
            elif stamp is not None and in_utc(stamp) is None:
                check.add("campaigns", i, cmp.id, name, "must fall in the years 1 to 9999 in UTC")
        if (
            cmp.start_at
            and cmp.end_at
            and cmp.start_at.tzinfo
            and cmp.end_at.tzinfo
            and cmp.end_at <= cmp.start_at
        ):
            check.add("campaigns", i, cmp.id, "end_at", "must be after start_at")
        cap = cmp.max_plays_per_screen_per_hour
        if cap is not None and not 0 < cap <= _INT4_MAX:
            check.add(
                "campaigns",
                i,
                cmp.id,
                "max_plays_per_screen_per_hour",
                f"must be from 1 to {_INT4_MAX}",
            )
        _check_targeting(check, i, cmp)
        _check_categories(check, "campaigns", i, cmp.id, cmp.categories, cmp.cattax)


_CURRENCY_CODE = re.compile(r"[A-Z]{3}")


def _validate_exchange_rates(check: _Checker, rates: list[ExchangeRate]) -> None:
    seen: set[str] = set()
    for i, rate in enumerate(rates):
        code = rate.currency
        if _CURRENCY_CODE.fullmatch(code) is None or code == "EUR":
            check.add(
                "exchange_rates",
                i,
                None,
                "currency",
                "must be an ISO 4217 code of three capital letters other than EUR, such as USD",
            )
        elif code in seen:
            check.add("exchange_rates", i, None, "currency", "appears more than once")
        seen.add(code)
        value = rate.units_per_eur
        if not (value.is_finite() and 0 < value < MAX_UNITS_PER_EUR):
            check.add(
                "exchange_rates",
                i,
                None,
                "units_per_eur",
                f"must be greater than 0 and below {MAX_UNITS_PER_EUR}",
            )
        elif not _has_places(value, EXCHANGE_RATE_PLACES):
            check.add(
                "exchange_rates",
                i,
                None,
                "units_per_eur",
                f"has more than {EXCHANGE_RATE_PLACES} decimal places",
            )


def _check_categories(
    check: _Checker,
    kind: str,
    index: int,
    item_id: str,
    categories: list[str] | None,
    cattax: int,
) -> None:
    """Category ids: at most MAX_CATEGORIES, each 1 to MAX_CATEGORY_CHARS characters without
    blanks or commas (the Core API's `blocked_categories` is a comma-separated list of them);
    `cattax` a taxonomy number as AdCOM counts them (1 and up)."""
    if not 0 < cattax <= _INT4_MAX:
        check.add(kind, index, item_id, "cattax", f"must be from 1 to {_INT4_MAX}")
    if categories is None:
        return
    if len(categories) > MAX_CATEGORIES:
        check.add(kind, index, item_id, "categories", f"must hold at most {MAX_CATEGORIES} ids")
    for category in categories:
        if (
            not 0 < len(category) <= MAX_CATEGORY_CHARS
            or category != category.strip()
            or " " in category
            or "," in category
        ):
            check.add(
                kind,
                index,
                item_id,
                "categories",
                f"must hold category ids of 1 to {MAX_CATEGORY_CHARS} characters, without "
                "blanks or commas (such as IAB1-5)",
            )
            break


def _check_targeting(check: _Checker, index: int, cmp: Campaign) -> None:
    for field, ids in (
        ("targeting.publisher_ids", cmp.targeting.publisher_ids),
        ("targeting.screen_ids", cmp.targeting.screen_ids),
    ):
        if any(not is_uuid(item) for item in ids or []):
            check.add("campaigns", index, cmp.id, field, "must hold only UUIDs")
    places = cmp.targeting.places or []
    if len(places) > MAX_PLACES:
        check.add("campaigns", index, cmp.id, "targeting.places", f"must hold at most {MAX_PLACES}")
    for n, place in enumerate(places):
        field = f"targeting.places[{n}]"
        if not (
            -90 <= place.lat <= 90
            and -180 <= place.lon <= 180
            and 0 < place.radius_km <= MAX_RADIUS_KM
        ):
            check.add(
                "campaigns",
                index,
                cmp.id,
                field,
                "needs -90 <= lat <= 90, -180 <= lon <= 180 and "
                f"0 < radius_km <= {MAX_RADIUS_KM:g}",
            )
    for d, part in enumerate(cmp.targeting.dayparts or []):
        field = f"targeting.dayparts[{d}]"
        if not part.days or any(day < 0 or day > 6 for day in part.days):
            check.add("campaigns", index, cmp.id, field, "days must be 0..6 (Monday=0)")
        if not 0 <= part.start_hour < part.end_hour <= 24:
            check.add("campaigns", index, cmp.id, field, "needs 0 <= start_hour < end_hour <= 24")


def _validate_creatives(check: _Checker, creatives: list[Creative], campaigns: set[str]) -> None:
    _check_ids(check, "creatives", [c.id for c in creatives])
    for i, cre in enumerate(creatives):
        if cre.campaign_id not in campaigns:
            check.add("creatives", i, cre.id, "campaign_id", "names no known campaign")
        try:
            parts = urlsplit(cre.url)
        except ValueError:  # an unbalanced [ or ] in the host part
            parts = urlsplit("")
        if parts.scheme not in ("http", "https") or not parts.netloc or cre.url != cre.url.strip():
            # Python's urlsplit drops leading blanks; a player would get them in `asset_url`.
            check.add(
                "creatives",
                i,
                cre.id,
                "url",
                "must be an http or https URL (without blanks around it)",
            )
        elif not _host_part_ok(parts.netloc):
            check.add(
                "creatives",
                i,
                cre.id,
                "url",
                "has a host part no URL validator takes: a port that is not a number from 0 "
                "to 65535, a %, or [ ] other than around an IPv6 host",
            )
        elif mime_type_for(cre.url) is None:
            check.add(
                "creatives",
                i,
                cre.id,
                "url",
                "has an unknown file extension; known: " + ", ".join(sorted(MIME_BY_EXTENSION)),
            )
        _check_pixels(check, "creatives", i, cre.id, cre.width, cre.height)
        if not 0 < cre.duration_seconds <= MAX_DURATION_SECONDS:
            check.add(
                "creatives",
                i,
                cre.id,
                "duration_seconds",
                f"must be from 1 to {MAX_DURATION_SECONDS} (under 24 hours)",
            )
        mime = mime_type_for(cre.url) or ""
        if cre.kind == "video" and not mime.startswith("video/"):
            check.add("creatives", i, cre.id, "kind", "a video needs a video file (mp4, webm, mov)")
        if cre.kind == "image" and not mime.startswith("image/"):
            check.add(
                "creatives", i, cre.id, "kind", "an image needs an image file (jpg, png, gif)"
            )
