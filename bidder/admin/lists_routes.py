"""Lists for operators (docs/reports.md, "Lists"): `GET /admin/v1/{offers, deals,
billing-records, playouts, api-keys, screens, campaigns}`, a page at a time
(`{items, next_cursor}`), filtered by time (`from`, `to`), `status`, `publisher_id`,
`campaign_id`, `screen_id` where the list has them. API keys show their id, prefix and state,
never their secret or its hash."""

from __future__ import annotations

import base64
import binascii
import re
from datetime import UTC, datetime, time
from decimal import Decimal
from typing import Any

import asyncpg
import msgspec
from litestar import Request, Response, Router, get

from bidder.admin._common import ADMIN_PREFIX, json_response, path_uuid, require_admin
from bidder.errors import BadRequest, echoed
from bidder.http.web import iso_utc, postgres
from matching.inventory import in_utc
from matching.money import plain
from store.listings import LISTS, ListFilter, fetch_page
from store.postgres import aware

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "routes"]

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
_FILTERS = ("status", "publisher_id", "campaign_id", "screen_id", "advertiser_id")


def _moment(value: str, name: str) -> datetime:
    """An ISO 8601 instant with its zone, or a date (its UTC midnight)."""
    text = value.strip()
    try:
        if len(text) == len("YYYY-MM-DD"):
            return datetime.combine(datetime.fromisoformat(text).date(), time(0), UTC)
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        utc = in_utc(moment) if moment.tzinfo is not None else None
        if utc is not None:  # None too when its UTC time falls outside years 1-9999
            return utc
    except ValueError:
        pass
    raise BadRequest(
        f"{name} must be an ISO 8601 time with its zone (2026-05-04T10:00:00Z) or a date, "
        f"got {echoed(text)}"
    )


_LIMIT = re.compile(r"[0-9]{1,4}")


def _limit(value: str | None) -> int:
    if value is None:
        return DEFAULT_LIMIT
    text = value.strip()
    if _LIMIT.fullmatch(text) is None or not 1 <= int(text) <= MAX_LIMIT:
        raise BadRequest(f"limit must be a whole number from 1 to {MAX_LIMIT}")
    return int(text)


def _cursor(value: str | None) -> tuple[datetime | None, str] | None:
    if value is None:
        return None
    try:
        moment, last_id = msgspec.json.decode(base64.urlsafe_b64decode(value.encode() + b"=="))
        if not isinstance(last_id, str) or not isinstance(moment, str | None):
            raise ValueError("not a cursor's types")
        at = None if moment is None else in_utc(datetime.fromisoformat(moment))
        if at is None and moment is not None:
            raise ValueError("a time outside years 1-9999 in UTC")
        return at, path_uuid(last_id, "id")
    except (ValueError, TypeError, binascii.Error, msgspec.DecodeError, BadRequest):
        raise BadRequest("cursor is not one this list gave (use next_cursor as given)") from None


def _next_cursor(name: str, rows: list[asyncpg.Record], limit: int) -> str | None:
    if len(rows) < limit:
        return None
    listing = LISTS[name]
    last = rows[-1]
    moment = last[listing.time_column.split(".")[-1]] if listing.time_column else None
    key = [
        None if moment is None else aware(moment).isoformat(),
        last[listing.id_column.split(".")[-1]],
    ]
    return base64.urlsafe_b64encode(msgspec.json.encode(key)).decode().rstrip("=")


def _value(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso_utc(aware(value))
    if isinstance(value, Decimal):
        return plain(value)
    return value


def _filter(request: Request[Any, Any, Any], name: str) -> ListFilter:
    query = request.query_params
    allowed = LISTS[name].filters
    values: list[tuple[str, str]] = []
    for key in _FILTERS:
        raw: str | None = query.get(key)
        if raw is None:
            continue
        if key not in allowed:
            raise BadRequest(f"the {name} list cannot be filtered by {key}")
        if key.endswith("_id"):
            values.append((key, path_uuid(raw, key)))
        elif len(raw) > 40:
            raise BadRequest(f"{key} is at most 40 characters")
        elif any(char < " " for char in raw):
            raise BadRequest(f"{key} must not hold control characters")
        else:
            values.append((key, raw.strip()))
    start = query.get("from")
    end = query.get("to")
    return ListFilter(
        start=None if start is None else _moment(start, "from"),
        end=None if end is None else _moment(end, "to"),
        values=tuple(values),
    )


def _handler(name: str) -> Any:
    async def list_items(request: Request[Any, Any, Any]) -> Response[bytes]:
        what = _filter(request, name)
        limit = _limit(request.query_params.get("limit"))
        after = _cursor(request.query_params.get("cursor"))
        async with postgres(request) as conn:
            rows = await fetch_page(conn, name, what, after, limit)
        items = [{key: _value(value) for key, value in row.items()} for row in rows]
        return json_response({"items": items, "next_cursor": _next_cursor(name, rows, limit)})

    list_items.__name__ = f"list_{name.replace('-', '_')}"
    return get(f"/{name}", name=f"admin-list-{name}")(list_items)


routes: list[Any] = [
    Router(
        path=ADMIN_PREFIX,
        route_handlers=[_handler(name) for name in LISTS],
        guards=[require_admin],
    )
]
