"""The BidRequest as this interface reads it: the body decoded once into a plain JSON tree
(numbers that are not integers as `Decimal`, never as binary floats), checked for duplicate
keys on that same tree, and judged by the validation rules in the order of
docs/contract.md#6-openrtb-path.

A container of the wrong type counts against the rule that reads it (`"video": "x"` is
`NO_VIDEO_OBJECT`, `"imp": [{...}, "x"]` is `MULTI_IMP_NOT_SUPPORTED`, `"qty": 5` is
`NO_TOTAL_AUDIENCE`): the contract (docs/contract.md#6-openrtb-path) keeps `INVALID_REQUEST` for
malformed JSON. The leaves a rule looks at are judged by that rule, so `"w": "1920"` is
`NO_RESOLUTION` and `"at": "3"` is `NOT_FIXED_PRICE`, each in its place in the order.

The tree comes from the JSON decoder, so its types are exact (a `true` is a `bool`, never an
`int`; a number is an `int` or a `Decimal`; an object a `dict`, an array a `list`): the checks
compare `type(...)`, which costs less than `isinstance` on the bid path.
"""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any, TypeGuard

import msgspec

from bidder.errors import UNREADABLE_JSON, BadRequest
from bidder.json_keys import refuse_duplicate_keys
from matching.inventory import DEFAULT_CATTAX
from matching.json_numbers import JSON_INT_OUT_OF_RANGE, json_tree_with_big_integers
from matching.money import json_decimal

FIXED_PRICE = 3
#: Audiences at or above this are refused (NO_TOTAL_AUDIENCE), the bound of a screen's own
#: audience: it keeps the price arithmetic short (a `1e999999` multiplier would take the
#: worker tens of seconds to turn into an integer price).
MAX_AUDIENCE = Decimal(10) ** 10
#: Audiences are kept to 18 decimals, rounded half-even beyond (an SSP's double such as
#: 1.2345678901234567e-05 has 21): with the 10 integer digits that is 28 significant digits,
#: what Decimal's arithmetic keeps exactly, so the price uses every digit of the audience the
#: offer record stores (a Postgres numeric would refuse more than 16,383 decimals outright).
AUDIENCE_QUANTUM = Decimal(10) ** -18
#: The longest `id`, `imp[0].id`, `imp[0].tagid` and `pmp.deals[0].id` (characters): room for
#: any SSP's UUIDs and composite ids, while a bid's record and answer stay small (the ids are
#: echoed and kept with the bid until it is settled).
MAX_ID_CHARS = 256


class IdView(msgspec.Struct):
    """Just the request id, for answers given before the request is judged (nbr 1)."""

    id: Any = None


# Numbers that are not integers as Decimal, by the C type itself: `json_decimal` (a Python
# call per number) only for the rare body with an exponent Decimal cannot hold.
_decoder = msgspec.json.Decoder(float_hook=Decimal)
_exact_decoder = msgspec.json.Decoder(float_hook=json_decimal)
_id_decoder = msgspec.json.Decoder(IdView)
_encoder = msgspec.json.Encoder(decimal_format="number")
#: An impression that is no object reads as one without fields.
_NO_FIELDS: dict[str, Any] = {}


#: The one currency this interface bids in (`cur` of every answer).
EUR = "EUR"


class BidAsk(msgspec.Struct, frozen=True):
    """A BidRequest that passed every rule: what the bid path needs, typed."""

    request_id: str
    imp_id: str
    tagid: str
    width: int
    height: int
    mimes: frozenset[str] | None
    deal_id: str
    bidfloor: Decimal
    audience: Decimal
    #: The audience as sent, for the minimum bid: `audience` is rounded to 18 decimals for the
    #: price, and a floor computed from the rounded one could be undercut by a cent.
    floor_audience: Decimal
    #: `pmp.deals[0].bidfloorcur`, upper case; EUR when absent (the contract's floor is in EUR).
    floor_currency: str = EUR
    #: Whether `cur`, when sent, lists EUR (the only currency this interface bids in).
    takes_eur: bool = True
    #: `test: 1`: answered like a live bid, but nothing is reserved, billed or stored.
    test: bool = False
    #: `imp[0].exp` in whole seconds when it is a positive number, else None.
    exp_seconds: int | None = None
    #: `badv`, `bcat` and `cattax` as sent; None when a list is not an array of strings (no
    #: bid: a block the bridge cannot read is never ignored).
    blocked_domains: tuple[str, ...] | None = ()
    blocked_categories: tuple[str, ...] | None = ()
    cattax: int = DEFAULT_CATTAX
    #: The request's `dooh` and `device` as decoded (anything sent; None when absent);
    #: `venue_types_of` and `location_of` read them.
    dooh: Any = None
    device: Any = None


def _invalid(code: str, message: str, **details: Any) -> BadRequest:
    return BadRequest(message, code=code, details=details)


def _is_int(value: Any) -> bool:
    return type(value) is int  # a decoded `true` is a bool, not an int


def _number(value: Any) -> Decimal | None:
    """A finite JSON number as a Decimal; None for anything else (strings, booleans, null)."""
    kind = type(value)
    if kind is Decimal:
        return value if value.is_finite() else None
    if kind is int:
        return Decimal(value)
    return None


def _id_string(value: Any) -> TypeGuard[str]:
    """An id this interface takes: a string of 1 to MAX_ID_CHARS characters."""
    return type(value) is str and 0 < len(value) <= MAX_ID_CHARS


def request_id_of(body: bytes) -> str:
    """The BidRequest id if the body has one this interface takes (`_id_string`), else an
    empty string."""
    try:
        view = _id_decoder.decode(body)
    except UNREADABLE_JSON:
        return ""
    return view.id if _id_string(view.id) else ""


def _tree_with_big_integers(body: bytes) -> Any:
    try:
        return json_tree_with_big_integers(body)
    except ValueError:
        raise _invalid("INVALID_REQUEST", "The body is not valid JSON") from None


def _object(value: Any) -> dict[str, Any] | None:
    return value if type(value) is dict else None


def parse_bid_request(body: bytes) -> BidAsk:
    """Decode and validate a BidRequest; raise BadRequest with the first failing rule's code."""
    if not body.isascii():
        # msgspec checks the UTF-8 of the strings it reads, not of those it skips: invalid
        # UTF-8 anywhere is malformed JSON (RFC 8259 8.1).
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            raise _invalid("INVALID_REQUEST", "The body is not valid JSON") from None
    request = _tree(body)
    # Valid JSON: one reading of it only (`{"imp": [...], "imp": []}` is refused).
    refuse_duplicate_keys(body, request, code="INVALID_REQUEST")
    return _judge(request)


def _tree(body: bytes) -> Any:
    """The body as a plain JSON tree; malformed JSON is `INVALID_REQUEST`. A number such as
    `1e99999999999999999999`, whose exponent Decimal cannot hold, is read by `json_decimal` (as
    the furthest exponent Decimal holds)."""
    try:
        return _decode(_decoder, body)
    except InvalidOperation:
        return _decode(_exact_decoder, body)


def _decode(decoder: msgspec.json.Decoder[Any], body: bytes) -> Any:
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        if JSON_INT_OUT_OF_RANGE in str(exc):
            return _tree_with_big_integers(body)
        raise _invalid("INVALID_REQUEST", "The body is not valid JSON") from None
    except UNREADABLE_JSON:
        raise _invalid("INVALID_REQUEST", "The body is not valid JSON") from None


def _judge(request: Any) -> BidAsk:
    """The rules of docs/contract.md#6-openrtb-path, in their order, on a decoded request; then what
    the service also needs of a request that passes them all (its and its impression's `id`, a
    `video.mimes` it can read), `INVALID_REQUEST` like malformed JSON. The contract puts only
    malformed JSON before its codes, so a request with two impressions and no `id` is
    `MULTI_IMP_NOT_SUPPORTED`. A container of the wrong type reads as absent (a `qty` that is
    no object as one without a multiplier: it was sent, so there is no fallback to
    `ext.totalaud`), and `imp` that is no array as no impression."""
    if type(request) is not dict:
        raise _invalid("INVALID_REQUEST", "The body is not a BidRequest (a JSON object)")
    get = request.get
    imps = get("imp")
    if type(imps) is not list or len(imps) != 1:
        count = len(imps) if type(imps) is list else 0
        raise _invalid(
            "MULTI_IMP_NOT_SUPPORTED",
            f"Exactly one impression is supported, got {count}",
            imp_count=count,
        )
    imp = imps[0]
    if type(imp) is not dict:
        imp = _NO_FIELDS
    pmp = imp.get("pmp")
    deals = pmp.get("deals") if type(pmp) is dict else None
    _check_fixed_price(get("at"), deals)

    tagid = imp.get("tagid")
    if not _id_string(tagid):
        raise _invalid(
            "NO_EXTERNAL_SCREEN_ID",
            f"imp[0].tagid (the external screen id) is required: a string of 1 to {MAX_ID_CHARS} "
            "characters",
        )

    video, banner = imp.get("video"), imp.get("banner")
    if type(video) is not dict or banner is not None:
        raise _invalid(
            "NO_VIDEO_OBJECT",
            "imp[0].video is required and imp[0].banner is not supported",
            video=type(video) is dict,
            banner=banner is not None,
        )
    width, height = video.get("w"), video.get("h")
    if not (type(width) is int and type(height) is int and width > 0 and height > 0):
        raise _invalid(
            "NO_RESOLUTION", "imp[0].video.w and imp[0].video.h must be positive integers"
        )
    deal_id, bidfloor, floor_currency = _first_deal(deals)
    audience, floor_audience = _audience(imp)

    request_id = get("id")
    if not _id_string(request_id):
        raise _invalid(
            "INVALID_REQUEST",
            f"BidRequest.id is required: a string of 1 to {MAX_ID_CHARS} characters",
        )
    imp_id = imp.get("id")
    if not _id_string(imp_id):
        raise _invalid(
            "INVALID_REQUEST", f"imp[0].id is required: a string of 1 to {MAX_ID_CHARS} characters"
        )
    mimes = _mimes(video.get("mimes"))
    cur, test, cattax, badv, bcat, exp = (
        get("cur"),
        get("test"),
        get("cattax"),
        get("badv"),
        get("bcat"),
        imp.get("exp"),
    )
    # Positional, in BidAsk's field order: the bid path makes one per request.
    return BidAsk(
        request_id,
        imp_id,
        tagid,
        width,
        height,
        mimes,
        deal_id,
        bidfloor,
        audience,
        floor_audience,
        floor_currency,
        cur is None or (type(cur) is list and (EUR in cur or _lists_eur(cur))),
        test == 1 or test is True,
        None if exp is None else _exp_seconds(exp),
        () if badv is None else _strings(badv),
        () if bcat is None else _strings(bcat),
        cattax if type(cattax) is int and cattax > 0 else DEFAULT_CATTAX,
        get("dooh"),
        get("device"),
    )


#: The DOOH venue taxonomies (AdCOM "DOOH Venue Taxonomies") whose ids screens and targeting
#: use: OpenOOH 1.0 (1, the default) and 1.1 (5).
OPENOOH_TAXONOMIES = frozenset({1, 5})


def venue_types_of(ask: BidAsk) -> frozenset[str]:
    """The request's OpenOOH venue types: `dooh.venuetype` (an array, or one string) or else
    `dooh.venuetypeid` (a string or a whole number), when the taxonomy (`venuetypetax`, else
    `venuetax`, else 1) is OpenOOH's; nothing otherwise."""
    dooh = _object(ask.dooh)
    if dooh is None:
        return frozenset()
    taxonomy = dooh.get("venuetypetax")
    if taxonomy is None:
        taxonomy = dooh.get("venuetax")
    if taxonomy is not None and (not _is_int(taxonomy) or taxonomy not in OPENOOH_TAXONOMIES):
        return frozenset()
    raw = dooh.get("venuetype")
    if raw is None:
        raw = dooh.get("venuetypeid")
    values = raw if type(raw) is list else [raw]
    return frozenset(
        str(value).strip()
        for value in values[:MAX_VENUE_TYPES]
        if (type(value) is str and 0 < len(value.strip()) <= MAX_ID_CHARS) or _is_int(value)
    )


#: The most venue types of one request read.
MAX_VENUE_TYPES = 32


def location_of(ask: BidAsk) -> tuple[float, float] | None:
    """`device.geo` as (lat, lon) in degrees, when both are numbers in range; `long` is read
    where `lon` is absent (the IAB guide's DOOH examples spell it so)."""
    device = _object(ask.device)
    geo = _object(device.get("geo")) if device is not None else None
    if geo is None:
        return None
    lat = _number(geo.get("lat"))
    lon = _number(geo.get("lon") if "lon" in geo else geo.get("long"))
    if lat is None or lon is None or not (-90 <= lat <= 90 and -180 <= lon <= 180):
        return None
    return float(lat), float(lon)


def _lists_eur(cur: list[Any]) -> bool:
    return any(type(code) is str and code.strip().upper() == EUR for code in cur)


def _exp_seconds(value: Any) -> int | None:
    """`imp.exp` in whole seconds (a fraction rounds down: the offer never outlives the SSP's
    wait), or None when it is no positive number (then the configured TTL stands)."""
    if value is None:
        return None
    if type(value) is int:  # the usual spelling
        return value if value >= 1 else None
    seconds = _number(value)
    if seconds is None or seconds < 1:
        return None
    return int(min(seconds, Decimal(10**9)))


def _strings(value: Any) -> tuple[str, ...] | None:
    """A block list: () when absent or null, its strings when an array of strings, None when
    it is anything else (the caller answers no bid rather than ignore a block)."""
    if value is None:
        return ()
    if type(value) is not list:
        return None
    for item in value:
        if type(item) is not str:
            return None
    return tuple(value)


#: The longest text of a client's value an error's details repeat.
_ECHO_CHARS = 64


def _as_sent(value: Any) -> Any:
    """A client's value as an error's details repeat it: a number of about 20 digits, a
    boolean, null or a short string as sent; anything else (an object, an array, a long string,
    an integer of thousands of digits, which many JSON readers refuse) as the start of its JSON
    text, so an error is never larger than the request, nor unreadable."""
    if value is None or type(value) is bool:
        return value
    if type(value) is int and abs(value) < 10**20:
        return value
    if type(value) is Decimal and len(str(value)) <= 24:  # a JSON number as sent (2.5)
        return value
    if type(value) is str and len(value) <= _ECHO_CHARS:
        return value
    text = value if type(value) is str else _encoder.encode(value).decode()
    return text if len(text) <= _ECHO_CHARS else text[:_ECHO_CHARS] + "..."


def _check_fixed_price(at: Any, deals: Any) -> None:
    """`at` must be 3, and so must the first deal's: the contract's field table requires
    `imp[0].pmp.deals[0].at` ("yes", "Must be 3"), so a deal without one is refused here,
    where OpenRTB itself would let it inherit the request's."""
    if type(at) is not int or at != FIXED_PRICE:
        raise _invalid(
            "NOT_FIXED_PRICE",
            "Only fixed-price auctions are supported: at must be 3",
            at=_as_sent(at),
        )
    if type(deals) is list and deals and type(deals[0]) is dict:
        deal_at = deals[0].get("at")
        if type(deal_at) is not int or deal_at != FIXED_PRICE:
            raise _invalid(
                "NOT_FIXED_PRICE",
                "Only fixed-price deals are supported: imp[0].pmp.deals[0].at must be 3",
                deal_at=_as_sent(deal_at),
            )


#: `video.mimes` lists seen before, as read: an SSP sends the same few lists again and again.
#: At most 256 lists of at most 16 types and 1,024 characters are kept, so a client cannot
#: grow it past a few hundred kilobytes.
_MIMES: dict[tuple[str, ...], frozenset[str]] = {}
_MIMES_KEPT = 256
_MIMES_ITEMS = 16


def _mimes(value: Any) -> frozenset[str] | None:
    """The MIME types the SSP takes: None (no filter) when the request has no `mimes`; an
    empty list takes no type, so nothing matches (contract step 6: an asset whose type is not
    in `video.mimes` is a no-bid)."""
    if value is None:
        return None
    if type(value) is not list:
        raise _invalid("INVALID_REQUEST", "imp[0].video.mimes must be an array of strings")
    # A kept list holds strings only, and no string equals anything else: a hit is a list
    # of strings.
    key = tuple(value)
    try:
        known = _MIMES.get(key)
    except TypeError:  # an object or an array inside: no list of strings
        known = None
    if known is not None:
        return known
    for mime in value:
        if type(mime) is not str:
            raise _invalid("INVALID_REQUEST", "imp[0].video.mimes must be an array of strings")
    read = frozenset([mime.strip().lower() for mime in value])
    if len(_MIMES) < _MIMES_KEPT and len(key) <= _MIMES_ITEMS and sum(map(len, key)) <= 1024:
        _MIMES[key] = read
    return read


def _first_deal(deals: Any) -> tuple[str, Decimal, str]:
    """(deal id, bidfloor, bidfloorcur) of `imp.pmp.deals[0]`, the deal this interface bids on.
    The currency is upper case, EUR when absent; one that is no string reads as `?` (no known
    currency: no bid)."""
    if type(deals) is not list or not deals:
        raise _invalid("NO_PMP_DEALS", "imp[0].pmp.deals must hold at least one deal")
    first = deals[0]
    if type(first) is not dict:
        raise _invalid("NO_PMP_DEALS", "imp[0].pmp.deals[0] must be a deal object")
    deal_id = first.get("id")
    if not _id_string(deal_id):
        raise _invalid(
            "NO_PMP_DEALS",
            f"imp[0].pmp.deals[0].id is required: a string of 1 to {MAX_ID_CHARS} characters",
        )
    floor = _number(first.get("bidfloor"))
    if floor is None or floor < _ZERO:
        raise _invalid(
            "NO_PMP_DEALS", "imp[0].pmp.deals[0].bidfloor is required: a CPM in EUR, 0 or more"
        )
    currency = first.get("bidfloorcur")
    if currency is None:
        return deal_id, floor, EUR
    return deal_id, floor, currency.strip().upper() if type(currency) is str else "?"


_ZERO = Decimal(0)
_NO_AUDIENCE = (
    "An audience is required: imp[0].qty.multiplier (preferred) or imp[0].ext.totalaud, "
    "a number greater than 0 and below 10000000000; when imp[0].qty is sent its "
    "multiplier is used, with no fallback to ext.totalaud"
)


def _audience(imp: dict[str, Any]) -> tuple[Decimal, Decimal]:
    """qty.multiplier when qty is sent (no fallback), else the legacy ext.totalaud: (the
    audience that prices a play, to 18 decimals; the audience as sent)."""
    qty = imp.get("qty")
    if qty is not None:
        audience = _number(qty.get("multiplier")) if type(qty) is dict else None
        source = "imp[0].qty.multiplier"
    else:
        ext = imp.get("ext")
        audience = _number(ext.get("totalaud")) if type(ext) is dict else None
        source = "imp[0].ext.totalaud"
    if audience is None or audience <= _ZERO or audience >= MAX_AUDIENCE:
        raise _invalid("NO_TOTAL_AUDIENCE", _NO_AUDIENCE, field=source)
    # The usual audience has a few decimals: the rounding to 18 leaves it equal.
    try:
        rounded = audience.quantize(AUDIENCE_QUANTUM, rounding=ROUND_HALF_EVEN)
    except InvalidOperation:  # rounds up to 10000000000, more digits than Decimal keeps
        raise _invalid("NO_TOTAL_AUDIENCE", _NO_AUDIENCE, field=source) from None
    if rounded == audience:
        return audience, audience
    # A positive audience stays positive (5e-324 is the smallest kept, 1e-18): it then prices a
    # play at nothing, which is no bid (204), like any audience that small.
    return (rounded if rounded > 0 else AUDIENCE_QUANTUM), audience
