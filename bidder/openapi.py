"""What the OpenAPI 3.1 documents of the Core API (bidder.core.openapi) and the admin API
(bidder.admin.openapi) share: JSON Schemas made from the msgspec types the handlers decode and
answer with, the error bodies, and the building blocks of an operation.

The handlers read and write bytes themselves (their bodies get the interface's own error
messages), so Litestar has nothing to generate these documents from: they are written here,
from the same Structs. Decimals are JSON numbers on the wire (`decimal_format="number"`), so
their schema is a number, not msgspec's default decimal string.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Any

import msgspec
from litestar import MediaType, Response
from msgspec import UNSET, UnsetType

from matching.inventory import Problem

REF = "#/components/schemas/{name}"
OPENAPI_VERSION = "3.1.0"
_encoder = msgspec.json.Encoder(decimal_format="number")


class Error(msgspec.Struct, kw_only=True):
    """Every error of the Core and admin APIs: a message for a person (match on the HTTP status,
    not the text). The Core API's offer request adds `status` to its 403, 404 and 422."""

    error: str
    status: int | UnsetType = UNSET
    details: dict[str, Any] | UnsetType = UNSET


class InventoryProblems(msgspec.Struct, kw_only=True):
    """A refused inventory document: every problem by list, index, id and field."""

    error: str
    problems: list[Problem]


def components(types: Iterable[Any]) -> dict[str, Any]:
    """The JSON Schemas of `types` (and of the types they hold) by name, decimals as numbers."""
    _, schemas = msgspec.json.schema_components(tuple(types), ref_template=REF)
    converted: dict[str, Any] = _decimals_as_numbers(schemas)
    return converted


def _decimals_as_numbers(node: Any) -> Any:
    if isinstance(node, list):
        return [_decimals_as_numbers(item) for item in node]
    if not isinstance(node, dict):
        return node
    if node.get("type") == "string" and node.get("format") == "decimal":
        number: dict[str, Any] = {k: v for k, v in node.items() if k not in ("type", "format")}
        number["type"] = "number"
        if isinstance(number.get("default"), str):
            number["default"] = Decimal(number["default"])
        return number
    return {key: _decimals_as_numbers(value) for key, value in node.items()}


def ref(name: str) -> dict[str, str]:
    return {"$ref": REF.format(name=name)}


def json_content(schema: dict[str, Any], example: Any = None) -> dict[str, Any]:
    media: dict[str, Any] = {"schema": schema}
    if example is not None:
        media["example"] = example
    return {"application/json": media}


RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before retrying.",
        "schema": {"type": "string"},
    }
}


def error_response(
    description: str, *, retry: bool = False, schema: str = "Error"
) -> dict[str, Any]:
    response: dict[str, Any] = {"description": description, "content": json_content(ref(schema))}
    if retry:
        response["headers"] = RETRY_AFTER
    return response


def any_error(description: str, *schemas: str) -> dict[str, Any]:
    """A response whose body is one of several error shapes."""
    return {
        "description": description,
        "content": json_content({"anyOf": [ref(name) for name in schemas]}),
    }


def path_parameter(name: str, description: str, example: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string", "minLength": 1},
        "example": example,
    }


def document(
    info: dict[str, str],
    base_url: str,
    security: tuple[str, str],
    paths: dict[str, Any],
    schemas: dict[str, Any],
) -> dict[str, Any]:
    """An OpenAPI 3.1 document whose every operation needs the bearer token
    `security` = (scheme name, what the token is)."""
    name, what = security
    return {
        "openapi": OPENAPI_VERSION,
        "info": {"version": "1.0.0", **info},
        "servers": [{"url": base_url}],
        "security": [{name: []}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {name: {"type": "http", "scheme": "bearer", "description": what}},
        },
    }


def document_response(document: dict[str, Any]) -> Response[bytes]:
    return Response(_encoder.encode(document), media_type=MediaType.JSON)
