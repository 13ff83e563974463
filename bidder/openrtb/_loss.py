"""Loss notices: the signed `lurl` a bid carries, and GET/POST /loss/{offer_id}.

The URL signs the path (so the offer id), `pub`, `scr` and `ts`; the auction macros the SSP
substitutes (`reason`, `price`, `cur`, `mtw`, `aid`) are outside the signature. Limits are checked
before anything else (414 query over 4 KB, 413 body over 16 KB), then the signature and the
24-hour window (403), then the notice is recorded in one Lua step (HotState.loss): the first call
releases an open bid's reservation, retries only count, a notice after billing changes nothing.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from litestar import Request

from bidder.asgi import Answer
from bidder.deprecation import OPENRTB_PREFIX
from bidder.errors import UNREADABLE_JSON, Forbidden, PayloadTooLarge, Unavailable, UriTooLong
from bidder.openrtb._response import no_content
from bidder.runtime import utcnow
from bidder.settings import Settings
from bidder.signing import SIGNATURE_PARAM, query_values, signer, url_value, verify
from bidder.vast import macro_value
from bidder.web import runtime_of
from matching.money import MoneyError, parse_cents
from store.hot import REDIS_DOWN, epoch_ms

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

_json = msgspec.json.Decoder()


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
    token = signer(settings.signing_secret).token(signed)
    return (
        f"{settings.public_base_url}{path}?{_MACRO_QUERY}&pub={url_value(publisher_id)}"
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
    payload = {
        "reason": _integer(params.get("reason")),
        "price": _decimal(params.get("price")),
        "cur": macro_value(params.get("cur")),
        "mtw": _decimal(params.get("mtw")),
        "aid": macro_value(params.get("aid")),
        "body": _diagnostic_body(raw_body) if request.method == "POST" else None,
    }
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
    if not verify(settings.signing_secrets, loss_path(offer_id), params, LOSS_SIGNED):
        return False
    ts = params["ts"]
    if not ts.isdigit():
        return False
    return now_ms - VALIDITY_MS <= int(ts) <= now_ms + CLOCK_SKEW_MS


# Numbers as a URL writes them: ASCII digits only (as `parse_cents` reads decimals). Python's
# own parsers also take `1_000` and other scripts' digits (`١٢٣`), which no SSP sends for one.
_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+", re.ASCII)


def _decimal(value: str | None) -> str | None:
    """A decimal number kept as its exact text; None when the value is not one (as
    `parse_cents` reads a number written as text)."""
    text = macro_value(value)
    if text is None:
        return None
    try:
        parse_cents(text)
    except MoneyError:
        return None
    return text


def _integer(value: str | None) -> int | None:
    text = macro_value(value)
    if text is None or not _INTEGER_TEXT.fullmatch(text) or len(text) > 20:
        return None  # a number no column holds is not one either
    return int(text)


#: A diagnostic body nested deeper than this is kept as text: every reader of the record (the
#: writer, Postgres' jsonb) then handles it without a recursion limit of its own.
MAX_BODY_NESTING = 64


def _diagnostic_body(raw: bytes) -> Any:
    """A POST body as stored for diagnostics: its JSON, or its text when it is not JSON (or is
    nested deeper than MAX_BODY_NESTING)."""
    if not raw.strip():
        return None
    try:
        decoded = _json.decode(raw)
    except UNREADABLE_JSON:  # kept as text, whatever it holds
        return raw.decode("utf-8", errors="replace")
    if _nested_deeper_than(decoded, MAX_BODY_NESTING):
        return raw.decode("utf-8", errors="replace")
    return decoded


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
