"""What every admin handler shares: the operator-token guard, typed JSON bodies, path ids."""

from __future__ import annotations

import logging
from typing import Any, TypeVar

import msgspec
from litestar import MediaType, Request, Response
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from bidder.auth import admin_token_ok, shown_as_id
from bidder.errors import UNREADABLE_JSON, BadRequest, Unauthorized
from bidder.field_problems import check_decimal_text
from bidder.json_keys import refuse_duplicate_keys
from matching.inventory import Problem, parse_uuid

ADMIN_PREFIX = "/admin/v1"

T = TypeVar("T")

# Decimals go out as plain JSON numbers (2.5, not "2.5"), as everywhere in the service.
encoder = msgspec.json.Encoder(decimal_format="number")

#: Operators' changes (inventory, budgets, keys): one INFO line each, never a key or a secret.
audit = logging.getLogger("bidder.audit")


def require_admin(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Guard of every admin route: `Authorization: Bearer <ADMIN_TOKEN>`, compared in constant
    time. Publisher keys never pass."""
    expected = connection.app.state.runtime.settings.secrets.admin_token
    if not admin_token_ok(connection.headers.get("authorization"), expected):
        raise Unauthorized(
            "Missing or invalid admin token",
            code="INVALID_ADMIN_TOKEN",
            headers={"WWW-Authenticate": "Bearer"},
        )


def json_response(body: Any, status: int = 200) -> Response[bytes]:
    return Response(encoder.encode(body), status_code=status, media_type=MediaType.JSON)


def problems_response(message: str, problems: list[Problem]) -> Response[bytes]:
    """400 listing every problem by list, index, id and field."""
    return json_response({"error": message, "problems": problems}, status=400)


def decode(body: bytes, into: type[T], what: str, *, optional: bool = False) -> T:
    """`body` as `into`; malformed JSON, unknown fields or wrong types give 400 naming the path.
    `optional`: an empty body decodes as `{}`."""
    if optional and not body.strip():
        body = b"{}"
    try:
        decoded = msgspec.json.decode(body, type=into)
    except msgspec.ValidationError as exc:
        raise BadRequest(f"Invalid {what}: {exc}") from None
    except UNREADABLE_JSON:
        raise BadRequest(f"Invalid {what}: the body is not valid JSON") from None
    refuse_duplicate_keys(body)
    check_decimal_text(body, into, what)
    return decoded


async def read_body(request: Request[Any, Any, Any], into: type[T], what: str) -> T:
    return decode(await request.body(), into, what, optional=True)


def path_uuid(value: str, name: str) -> str:
    """A UUID from the path in its canonical form, or 400."""
    try:
        return str(parse_uuid(value))
    except ValueError:
        raise BadRequest(f"{name} must be a UUID, got {shown_as_id(value)}") from None
