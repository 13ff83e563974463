"""POST /playout/confirm/{deal_id} (docs/contract.md#5-playout-confirmation): every field optional,
idempotent per deal."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Context, Decimal
from typing import Any

import msgspec
from litestar import Request, Response, post
from litestar.params import FromPath

from bidder.core import _demo
from bidder.core._common import (
    CORE_PREFIX,
    MAX_BODY_BYTES,
    authorize,
    hot_state_errors,
    json_object,
    json_response,
    ms_to_datetime,
    optional_text,
)
from bidder.errors import BadRequest, NotFound, echoed
from bidder.http.web import iso_utc
from matching.inventory import canonical_uuid, in_utc

DEAL_NOT_FOUND = "Deal not found or access denied"
_MAX_TEXT_CHARS = 200
#: Postgres `integer`, the column's type.
MAX_DURATION_SECONDS = 2**31 - 1
#: How far back a play may be confirmed: a deal lives 30 days (HotState.deal_ttl_ms), so a
#: player that queued its confirmations while offline is within it; an older one has no deal.
PLAYED_AT_MAX_AGE = timedelta(days=30)
#: How far ahead of the service's clock: a player's clock may run a little fast, no more.
PLAYED_AT_MAX_AHEAD = timedelta(minutes=5)
#: `completion_rate` is stored in NUMERIC(6, 3): three decimals.
_RATE_QUANTUM = Decimal("0.001")
_RATE_CONTEXT = Context(prec=10)


class PlayoutConfirmation(msgspec.Struct, kw_only=True):
    """The body of a playout confirmation, every field optional, as `confirm_playout` reads it
    field by field; the OpenAPI document describes the body with it."""

    #: ISO 8601 with a time zone; default: when the call arrives.
    played_at: str | msgspec.UnsetType | None = msgspec.UNSET
    #: Whole seconds, 0 to 2147483647.
    duration_seconds: int | msgspec.UnsetType | None = msgspec.UNSET
    #: From 0 to 100, stored to 3 decimals (half up).
    completion_rate: Decimal | msgspec.UnsetType | None = msgspec.UNSET
    #: Up to 200 characters, without U+0000.
    player_version: str | msgspec.UnsetType | None = msgspec.UNSET
    #: Up to 200 characters, without U+0000.
    screen_resolution: str | msgspec.UnsetType | None = msgspec.UNSET


class Confirmed(msgspec.Struct, kw_only=True):
    """A confirmed playout; a repeat answers the first one's `playout_id` and `confirmed_at`."""

    success: bool
    deal_id: str
    playout_id: str
    confirmed_at: str
    message: str


def _played_at(body: dict[str, Any], received: datetime) -> datetime:
    raw = body.get("played_at")
    if raw is None:
        return received
    if not isinstance(raw, str):
        raise BadRequest("played_at must be an ISO 8601 timestamp string")
    try:
        # RFC 3339 (5.6) lets `T` and `Z` be written `t` and `z`, which fromisoformat refuses.
        moment = datetime.fromisoformat(raw.strip().replace("t", "T").replace("z", "Z"))
    except ValueError:
        raise BadRequest(
            f"played_at is not an ISO 8601 timestamp (e.g. 2026-05-04T10:15:30Z): {echoed(raw)}"
        ) from None
    if moment.tzinfo is None:
        raise BadRequest("played_at needs a time zone, e.g. 2026-05-04T10:15:30Z")
    in_range = in_utc(moment)
    if in_range is None or not (
        received - PLAYED_AT_MAX_AGE <= in_range <= received + PLAYED_AT_MAX_AHEAD
    ):
        raise BadRequest(
            f"played_at must be within {PLAYED_AT_MAX_AGE.days} days before now and "
            f"{int(PLAYED_AT_MAX_AHEAD.total_seconds() // 60)} minutes after it: {echoed(raw)}"
        )
    return in_range


def _duration(body: dict[str, Any]) -> int | None:
    raw = body.get("duration_seconds")
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise BadRequest("duration_seconds must be a whole number of seconds")
    if raw < 0:
        raise BadRequest("duration_seconds must not be negative")
    if raw > MAX_DURATION_SECONDS:  # the column's integer: a larger one would be stored as null
        raise BadRequest(f"duration_seconds must be at most {MAX_DURATION_SECONDS}")
    return raw


def _completion_rate(body: dict[str, Any]) -> Decimal | None:
    raw = body.get("completion_rate")
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | Decimal):
        raise BadRequest("completion_rate must be a number from 0 to 100")
    rate = Decimal(raw)
    if not rate.is_finite() or not Decimal(0) <= rate <= Decimal(100):
        raise BadRequest("completion_rate must be a number from 0 to 100")
    # The column's three decimals, rounded half up (1e-400 is 0.000, 99.9996 is 100.000).
    return rate.quantize(_RATE_QUANTUM, rounding=ROUND_HALF_UP, context=_RATE_CONTEXT)


def _confirmed(deal_id: str, playout_id: str, confirmed: datetime, repeat: bool) -> Confirmed:
    return Confirmed(
        success=True,
        deal_id=deal_id,
        playout_id=playout_id,
        confirmed_at=iso_utc(confirmed),
        message="Playout already confirmed" if repeat else "Playout confirmed",
    )


@post(
    f"{CORE_PREFIX}/playout/confirm/{{deal_id:str}}",
    status_code=200,
    request_max_body_size=MAX_BODY_BYTES,
)
async def confirm_playout(
    request: Request[Any, Any, Any], deal_id: FromPath[str]
) -> Response[bytes]:
    """Confirm that a deal was played; a repeat answers with the first playout's id."""
    caller = authorize(request)
    body = await json_object(request, optional=True)
    played_at = _played_at(body, caller.now)
    duration = _duration(body)
    rate = _completion_rate(body)
    player_version = optional_text(body, "player_version", _MAX_TEXT_CHARS)
    screen_resolution = optional_text(body, "screen_resolution", _MAX_TEXT_CHARS)
    if deal_id == _demo.DEMO_DEAL_ID:
        return json_response(_confirmed(deal_id, _demo.DEMO_PLAYOUT_ID, caller.now, False))
    deal_id = canonical_uuid(deal_id)  # another form of the UUID names the same deal
    payload = {
        "played_at": iso_utc(played_at),
        "duration_seconds": duration,
        "completion_rate": None if rate is None else str(rate),
        "player_version": player_version,
        "screen_resolution": screen_resolution,
    }
    with hot_state_errors():
        result = await caller.rt.hot.confirm_playout(
            deal_id, caller.publisher_id, caller.now, payload
        )
    if result.status == "not_found":
        raise NotFound(DEAL_NOT_FOUND)
    return json_response(
        _confirmed(
            deal_id,
            result.playout_id,
            ms_to_datetime(result.confirmed_ms),
            result.status == "repeat",
        )
    )


routes = [confirm_playout]
