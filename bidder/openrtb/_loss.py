"""Loss notices: the signed `lurl` a bid carries, and GET/POST /loss/{offer_id}.

The URL signs the path (so the offer id), `pub`, `scr` and `ts`; the auction macros the SSP
substitutes (`reason`, `price`, `cur`, `mtw`, `aid`) are outside the signature. Limits are checked
before anything else (414 query over 4 KB, 413 body over 16 KB), then the signature and the
24-hour window (403), then the notice is recorded in one Lua step (HotState.loss): the first call
releases an open bid's reservation, retries only count, a notice after billing changes nothing.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Context, Decimal
from typing import Any

import msgspec
from litestar import Request

from bidder.deprecation import OPENRTB_PREFIX
from bidder.errors import (
    UNREADABLE_JSON,
    BadRequest,
    Forbidden,
    PayloadTooLarge,
    Unavailable,
    UriTooLong,
)
from bidder.http.asgi import Answer
from bidder.http.web import runtime_of
from bidder.offers import is_test_offer
from bidder.openrtb._response import no_content
from bidder.runtime import utcnow
from bidder.settings import Settings
from bidder.signing import SIGNATURE_PARAM, query_values, signer, url_value, verify
from bidder.vast import macro_value
from matching.money import is_decimal_text, json_decimal
from store.errors import REDIS_DOWN
from store.hot.ids import epoch_ms

MAX_QUERY_BYTES = 4 * 1024
MAX_BODY_BYTES = 16 * 1024
VALIDITY_MS = 24 * 3_600_000
# Workers' clocks may differ a little: a `ts` this far in the future still counts as now.
CLOCK_SKEW_MS = 5 * 60_000
LOSS_SIGNED = ("pub", "scr", "ts")
# The auction macros, in the order they appear in `lurl`. `${TOTAL_IMP}` is deliberately absent.
LOSS_MACROS = (
    ("reason", "${AUCTION_LOSS}"),
    ("price", "${AUCTION_PRICE}"),
    ("cur", "${AUCTION_CURRENCY}"),
    ("mtw", "${AUCTION_MIN_TO_WIN}"),
    ("aid", "${AUCTION_ID}"),
)

_MACRO_QUERY = "&".join(f"{name}={macro}" for name, macro in LOSS_MACROS)


def loss_path(offer_id: str) -> str:
    return f"{OPENRTB_PREFIX}/loss/{offer_id}"


def loss_url(
    settings: Settings, offer_id: str, publisher_id: str, screen_id: str, now_ms: int
) -> str:
    """The signed `lurl` of a bid, with the auction macros for the SSP to substitute."""
    path = loss_path(offer_id)
    # The decimal text of an int: digits and "-", nothing to quote.
    ts = str(now_ms)
    # signing.message(path, [("pub", ...), ("scr", ...), ("ts", ...)]), as LOSS_SIGNED orders it.
    signed = f"{path}\npub={publisher_id}\nscr={screen_id}\nts={ts}".encode()
    # The token is URL-safe base64 already: nothing in it needs quoting.
    token = signer(settings.secrets.signing_secret).token(signed)
    return (
        f"{settings.server.public_base_url}{path}?{_MACRO_QUERY}&pub={url_value(publisher_id)}"
        f"&scr={url_value(screen_id)}&ts={ts}&{SIGNATURE_PARAM}={token}"
    )


async def handle_loss(request: Request[Any, Any, Any], offer_id: str) -> Answer:
    rt = runtime_of(request)
    settings = rt.settings
    if len(request.scope.get("query_string", b"")) > MAX_QUERY_BYTES:
        raise UriTooLong(f"The query string is above {MAX_QUERY_BYTES} bytes")
    raw_body = await _read_body(request)
    params = query_values(request.query_params.multi_items(), LOSS_SIGNED)
    now = utcnow()
    if params is None or not _signed_and_fresh(settings, offer_id, params, epoch_ms(now)):
        raise Forbidden(
            "The loss notice URL signature is invalid, or its ts is outside the 24-hour window",
            code="INVALID_SIGNATURE",
        )
    payload: dict[str, Any] = {
        "reason": _integer(params.get("reason"), "reason"),
        "price": _decimal(params.get("price"), "price"),
        "cur": macro_value(params.get("cur")),
        "mtw": _decimal(params.get("mtw"), "mtw"),
        "aid": macro_value(params.get("aid")),
        "body": None,
    }
    if request.method == "POST":
        payload |= diagnostic_body(raw_body)
    if is_test_offer(offer_id):  # a test bid's notice (its id is signed): nothing to change
        return no_content(settings)
    try:
        kind, _ = await rt.hot.loss(offer_id, now, payload)
    except REDIS_DOWN:
        raise Unavailable(
            "The loss notice could not be stored; retry with backoff, the URL stays valid",
            headers={"Retry-After": "5"},
        ) from None
    rt.metrics.count_loss_notice(kind)
    return no_content(settings)


async def _read_body(request: Request[Any, Any, Any]) -> bytes:
    """The body, refused with 413 above 16 KB (by Content-Length, then by what arrives)."""
    declared = request.headers.get("content-length", "")
    if declared.strip().isdigit() and int(declared) > MAX_BODY_BYTES:
        raise PayloadTooLarge(f"The body is above {MAX_BODY_BYTES} bytes")
    received = bytearray()
    async for chunk in request.stream():
        received += chunk
        if len(received) > MAX_BODY_BYTES:
            raise PayloadTooLarge(f"The body is above {MAX_BODY_BYTES} bytes")
    return bytes(received)


def _signed_and_fresh(
    settings: Settings, offer_id: str, params: dict[str, str], now_ms: int
) -> bool:
    if not verify(settings.secrets.signing_secrets, loss_path(offer_id), params, LOSS_SIGNED):
        return False
    ts = params["ts"]
    if not ts.isdigit():
        return False
    return now_ms - VALIDITY_MS <= int(ts) <= now_ms + CLOCK_SKEW_MS


# Numbers as a URL writes them: ASCII digits only (as `parse_cents` reads decimals). Python's
# own parsers also take `1_000` and other scripts' digits (`١٢٣`), which no SSP sends for one.
_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+", re.ASCII)
#: `price` and `mtw` are CPMs stored in NUMERIC(20, 6): below 10**14, six decimals.
MAX_CPM_DIGITS = 14
CPM_DECIMALS = 6
_CPM_QUANTUM = Decimal(1).scaleb(-CPM_DECIMALS)
_WIDE = Context(prec=MAX_CPM_DIGITS + CPM_DECIMALS + 2)
#: `reason` is stored in a Postgres `integer`.
MAX_REASON = 2**31 - 1


def _decimal(value: str | None, name: str) -> str | None:
    """A CPM macro as the text of the number stored: as written, or rounded half up to six
    decimals (the column's) when it has more; None when the value is no number (an
    unsubstituted macro; as `is_decimal_text` reads a number written as text). A number of 10**14
    or more in magnitude is refused: no auction clears there, and the column cannot hold it."""
    text = macro_value(value)
    if text is None:
        return None
    if not is_decimal_text(text):
        return None
    # An exponent beyond Decimal's (1e99999999999999999999) is read as the furthest it holds,
    # on its side: huge is refused below, tiny rounds to zero.
    amount = json_decimal(text)
    # Judged on the digits (adjusted()), never in a context that would overflow on 1e1000000;
    # rounded only once it is known to fit, and judged again (99999999999999.9999999 rounds up).
    if amount and amount.adjusted() >= MAX_CPM_DIGITS:
        raise _beyond_cpm(name)
    exponent = amount.as_tuple().exponent
    if not isinstance(exponent, int) or exponent >= -CPM_DECIMALS:
        return text  # the column holds it exactly: kept as the SSP wrote it
    amount = amount.quantize(_CPM_QUANTUM, rounding=ROUND_HALF_UP, context=_WIDE)
    if amount and amount.adjusted() >= MAX_CPM_DIGITS:
        raise _beyond_cpm(name)
    return str(amount)


def _beyond_cpm(name: str) -> BadRequest:
    return BadRequest(
        f"{name} must be a CPM below 10^{MAX_CPM_DIGITS} in magnitude", details={"field": name}
    )


def _integer(value: str | None, name: str) -> int | None:
    """An integer macro; None when it is not one (an unsubstituted macro); refused with 400
    when it is an integer beyond the column's range."""
    text = macro_value(value)
    if text is None or not _INTEGER_TEXT.fullmatch(text):
        return None
    digits = text.lstrip("+-").lstrip("0")
    if len(digits) > len(str(MAX_REASON)) or abs(int(text)) > MAX_REASON:
        raise BadRequest(
            f"{name} must be an integer of at most {MAX_REASON} in magnitude",
            details={"field": name},
        )
    return int(text)


#: A diagnostic body nested deeper than this is kept as text: every reader of the record (the
#: writer, Postgres' json input) then handles it without a recursion limit of its own.
MAX_BODY_NESTING = 64

# Numbers as Decimal: a JSON number beyond a float's range (1e1000000) is still JSON.
_body_json = msgspec.json.Decoder(float_hook=json_decimal)


def diagnostic_body(raw: bytes) -> dict[str, str | None]:
    """A POST body as it is stored for diagnostics (`loss_notices.body`, a `json` column):
    `body_json`, the body exactly as sent, when it is JSON (any value: object, array, scalar);
    else `body`, its text (invalid UTF-8 replaced), stored as a JSON string. JSON nested deeper
    than MAX_BODY_NESTING is kept as text too. An empty body is none."""
    if not raw.strip():
        return {"body": None}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return {"body": raw.decode("utf-8", errors="replace")}
    try:
        decoded = _body_json.decode(raw)
    except UNREADABLE_JSON:  # kept as text, whatever it holds
        return {"body": text}
    if _nested_deeper_than(decoded, MAX_BODY_NESTING):
        return {"body": text}
    return {"body": None, "body_json": text}


def _nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether arrays and objects in `value` nest more than `limit` levels (no recursion)."""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            if depth > limit:
                return True
            pending.extend((child, depth + 1) for child in item)
    return False
