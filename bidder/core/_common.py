"""What every Core API handler shares: the key check, JSON in and out, and the "Redis is down"
answer.

Bodies are read and decoded here rather than by the framework, so every malformed input gets the
Core API's own `{error}` body with a message that says what to fix.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from litestar import MediaType, Request, Response

from bidder.auth import authenticate
from bidder.errors import UNREADABLE_JSON, BadRequest, Unavailable, echoed
from bidder.http.asgi import Answer, HttpCall, is_json, json_answer
from bidder.http.web import call_of, runtime_of
from bidder.json_keys import refuse_duplicate_keys
from bidder.runtime import Runtime, utcnow
from matching.json_numbers import JSON_INT_OUT_OF_RANGE, json_tree_with_big_integers
from matching.money import json_decimal
from matching.snapshot import ApiKeyInfo, Snapshot
from store.errors import REDIS_DOWN

#: Core API paths.
CORE_PREFIX = "/functions/v1/api"
#: Largest JSON body a Core API POST accepts (the same limit as a loss notice body).
MAX_BODY_BYTES = 16 * 1024

# Numbers decode as Decimal (never a binary float), and Decimals encode as plain JSON numbers.
_decoder = msgspec.json.Decoder(float_hook=json_decimal)
_encoder = msgspec.json.Encoder(decimal_format="number")

_TOO_LARGE = f"Request body too large: at most {MAX_BODY_BYTES // 1024} KB"
_BOOLEANS = {"true": True, "1": True, "false": False, "0": False}


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated request: the worker's runtime, the snapshot it was checked against, the
    key's publisher, and the moment the request is handled at."""

    rt: Runtime
    snapshot: Snapshot
    key: ApiKeyInfo
    now: datetime

    @property
    def publisher_id(self) -> str:
        return self.key.publisher_id


def authorize(request: Request[Any, Any, Any]) -> Caller:
    """The caller behind `Authorization: Bearer <key>`, or 401 `Invalid or expired API key`."""
    return authorize_key(runtime_of(request), header(request, b"authorization"))


def authorize_key(rt: Runtime, authorization: str | None, code: str | None = None) -> Caller:
    """`authorize` for the value of an Authorization header; `code` is the 401's error code
    (the OpenRTB interface's `INVALID_API_KEY`)."""
    snapshot = rt.inventory.snapshot
    if snapshot is None:  # keys live in the snapshot: none can be checked before it loads
        raise Unavailable("Service is starting, retry shortly", headers={"Retry-After": "1"})
    now = utcnow()
    key = authenticate(authorization, snapshot, rt.settings.server.key_prefix, now, code=code)
    rt.rate_limits.take(key.key_id, snapshot.publishers.get(key.publisher_id))
    return Caller(rt, snapshot, key, now)


def header(request: Request[Any, Any, Any], name: bytes) -> str | None:
    """The first value of header `name` (lowercase), read from the ASGI scope: what
    `request.headers.get` returns, without building the case-insensitive Headers mapping."""
    return call_of(request).header(name)


@contextmanager
def hot_state_errors() -> Iterator[None]:
    """Redis unreachable or too slow: 503 at once, so the player can fall back and retry."""
    try:
        yield
    except REDIS_DOWN as exc:
        raise Unavailable(
            "Service temporarily unavailable, retry shortly", headers={"Retry-After": "1"}
        ) from exc


#: Every Core API answer is one publisher's, made for one call (an offer request's GET
#: reserves budget): no cache, shared or the client's own, may keep or replay it.
_NO_STORE = {"Cache-Control": "no-store"}
_NO_STORE_ENCODED = ((b"cache-control", b"no-store"),)


def json_response(body: Any, status: int = 200) -> Response[bytes]:
    return Response(
        _encoder.encode(body), status_code=status, media_type=MediaType.JSON, headers=_NO_STORE
    )


def json_body_answer(body: Any, status: int = 200) -> Answer:
    """`json_response` as a bare answer (the hot routes)."""
    return json_answer(_encoder.encode(body), status, _NO_STORE_ENCODED)


def query_flag(call: HttpCall, name: str) -> bool:
    """A boolean query parameter: true/false/1/0 in any case; absent means false."""
    raw = call.query(name)
    if raw is None:
        return False
    value = _BOOLEANS.get(raw.strip().lower())
    if value is None:
        raise BadRequest(f"{name} must be true or false (or 1 or 0), got {echoed(raw)}")
    return value


async def json_object(request: Request[Any, Any, Any], *, optional: bool = False) -> dict[str, Any]:
    """`read_json_object` of a Litestar request."""
    return await read_json_object(call_of(request), optional=optional)


async def read_json_object(call: HttpCall, *, optional: bool = False) -> dict[str, Any]:
    """The request body as a JSON object. `optional`: an empty body reads as `{}`.

    Oversized: 413. Not `application/json`, not JSON, or not an object: 400.
    """
    body = await call.body(MAX_BODY_BYTES, _TOO_LARGE)
    if optional and not body.strip():
        return {}
    if not is_json(call.header(b"content-type")):
        raise BadRequest("Content-Type must be application/json")
    try:
        decoded = _decoder.decode(body)
    except msgspec.ValidationError as exc:  # well-formed: an integer past msgspec's range
        decoded = _with_big_integers(body, exc)
    except UNREADABLE_JSON:
        raise BadRequest("Request body is not valid JSON") from None
    if not isinstance(decoded, dict):
        raise BadRequest("Request body must be a JSON object")
    refuse_duplicate_keys(body, decoded)
    return decoded


def _with_big_integers(body: bytes, refused: msgspec.ValidationError) -> Any:
    """A body with a 5,000-digit integer is JSON, so its field's rule judges it (a price
    that large is out of range), not the "not valid JSON" of a malformed body."""
    if JSON_INT_OUT_OF_RANGE not in str(refused):
        raise BadRequest("Request body is not valid JSON") from None
    try:
        return json_tree_with_big_integers(body)
    except ValueError:
        raise BadRequest("Request body is not valid JSON") from None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def optional_text(body: dict[str, Any], name: str, max_chars: int) -> str | None:
    """A client's optional text field, as it will be stored: a string of at most `max_chars`
    characters without U+0000, which Postgres text cannot hold (the record would keep U+FFFD
    in its place after a 200). None when absent or null."""
    raw = body.get(name)
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise BadRequest(f"{name} must be a string")
    if len(raw) > max_chars:
        raise BadRequest(f"{name} must be at most {max_chars} characters, got {len(raw)}")
    if "\x00" in raw:
        raise BadRequest(f"{name} must not contain the character U+0000")
    return raw


def ms_to_datetime(epoch_ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=epoch_ms)
