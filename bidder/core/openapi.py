"""GET /docs/openapi-core.json: the OpenAPI 3.1 document of the Core API (offer request, offer
response, playout confirmation, the publisher's screens), from the Structs its handlers use."""

from __future__ import annotations

from functools import cache
from typing import Any

from litestar import Request, Response, get

from bidder.core._answers import MAX_REASON_CHARS, Accepted, OfferResponse, Rejected
from bidder.core._common import CORE_PREFIX, MAX_BODY_BYTES
from bidder.core._offers import Offer
from bidder.core._playout import Confirmed, PlayoutConfirmation
from bidder.core.reports import EARNINGS_PATH
from bidder.core.screens import (
    DEFAULT_PAGE,
    MAX_PAGE,
    SCREENS_PATH,
    ScreenPage,
    ScreenProblems,
    ScreenRegistration,
    ScreenUpdate,
)
from bidder.http.web import runtime_of
from bidder.openapi import (
    Error,
    any_error,
    components,
    document,
    document_response,
    error_response,
    json_content,
    path_parameter,
    ref,
)
from bidder.reports.openapi import earnings_operation, report_schemas
from matching.inventory import Screen

DOCUMENT_PATH = "/docs/openapi-core.json"
_SCREEN = "de000003-0000-4000-a000-000000000001"
_OFFER = "3b1f6c2e-8d4a-4f7b-9c1e-2a5d7e9f0b3c"
_DEAL = "3c7a9e1d-5b2f-4d8c-a6e0-1f4b9d2c7e5a"
_OFFER_EXAMPLE = {
    "offer_id": _OFFER,
    "bid_price_cents": 29.8675,
    "asset_url": "https://cdn.example.com/demo/fizzy-summer-1920x1080.mp4",
    "expires_at": "2026-05-04T10:20:30.250Z",
    "billing_code": "FIZZY-METRO-2026",
}
_ACCEPTED_EXAMPLE = {
    "success": True,
    "action": "accepted",
    "deal_id": _DEAL,
    "billing_id": "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d",
    "net_price_cents": 2.125,
    "commission_cents": 0.375,
    "gross_price_cents": 2.5,
    "message": "Offer accepted: deal created and billed. Confirm playout with this deal_id.",
    "billing_code": "FIZZY-METRO-2026",
}
_SCREEN_EXAMPLE = {
    "id": _SCREEN,
    "publisher_id": "de000001-0000-4000-a000-000000000001",
    "name": "Central Station, Hall A",
    "type": "moving",
    "width": 1920,
    "height": 1080,
    "external_id": "metro-cs-001",
    "audience_per_play": 119.47,
    "venue_type": "transit.train_stations",
    "timezone": "Europe/Berlin",
    "lat": 52.5251,
    "lon": 13.3694,
    "active": True,
}
_KB = MAX_BODY_BYTES // 1024


def _unauthorized() -> dict[str, Any]:
    return error_response("Key missing, unknown, expired or revoked: `Invalid or expired API key`.")


def _rate_limited() -> dict[str, Any]:
    return error_response(
        "The key asked more than its publisher's rate limit allows (off unless the operator "
        "sets one): retry after `Retry-After` seconds.",
        retry=True,
    )


def _unavailable() -> dict[str, Any]:
    return error_response(
        "The service cannot reach its hot state (or Postgres, for the screens): nothing "
        "happened, retry with backoff.",
        retry=True,
    )


def _body_errors() -> dict[str, Any]:
    return {
        "408": error_response("The body stopped arriving; the connection is closed."),
        "413": error_response(f"Body above {_KB} KB ({MAX_BODY_BYTES} bytes)."),
    }


def _offer_request(operation_id: str, by: dict[str, Any], external: bool) -> dict[str, Any]:
    responses: dict[str, Any] = {
        "200": {
            "description": "The offer: the best-paying eligible campaign's asset at its price "
            "for one play (CPM x audience / 1000 cents), reserved until `expires_at`.",
            "content": json_content(ref("Offer"), _OFFER_EXAMPLE),
        },
        "400": error_response(
            "`min_bid_cents`, a boolean parameter or a `blocked_*` parameter is not valid."
        ),
        "401": _unauthorized(),
        "429": _rate_limited(),
        "404": error_response(
            "Nothing can play on this screen now, or no screen of yours has this id "
            "(`No matches available`, with `status`)."
        ),
        "422": error_response(
            "Something could play, but nothing pays `min_bid_cents` (with `status`)."
        ),
        "503": _unavailable(),
    }
    if external:
        responses["403"] = error_response(
            "The account is not activated for external ids (with `status`)."
        )
    return {
        "operationId": operation_id,
        "summary": "Request an offer for one screen",
        "description": "The screen id `test-display-test`, or `demo=true`, answers the fixed "
        "demo offer (`test-offer-test`, 2.5 cents) and stores nothing.",
        "parameters": [
            by,
            {
                "name": "min_bid_cents",
                "in": "query",
                "description": "Only offers paying at least this many cents (a number, 0 or more).",
                "schema": {"type": "number", "minimum": 0},
                "example": 24,
            },
            *(
                {
                    "name": name,
                    "in": "query",
                    "description": text + " (`true`/`false` or `1`/`0`, any case).",
                    "schema": {"type": "boolean"},
                }
                for name, text in (
                    ("vast", "Add the offer as a VAST 4.0 document in `vast`"),
                    ("demo", "Answer the demo offer"),
                )
            ),
            {
                "name": "blocked_domains",
                "in": "query",
                "description": "Advertiser domains to exclude (and their subdomains), "
                "comma-separated: at most 100, each at most 253 characters.",
                "schema": {"type": "string"},
                "example": "fizzy.example,acme.example",
            },
            {
                "name": "blocked_categories",
                "in": "query",
                "description": "IAB categories to exclude, comma-separated (in taxonomy 1 a "
                "tier-1 id such as IAB8 excludes its IAB8-* too): at most 100, each at most "
                "64 characters.",
                "schema": {"type": "string"},
                "example": "IAB8,IAB25-3",
            },
            {
                "name": "blocked_cattax",
                "in": "query",
                "description": "The taxonomy of `blocked_categories` (OpenRTB's `cattax`).",
                "schema": {"type": "integer", "minimum": 1, "default": 1},
            },
        ],
        "responses": responses,
    }


def _offer_response() -> dict[str, Any]:
    return {
        "operationId": "respondToOffer",
        "summary": "Accept or reject an offer",
        "description": "Accept at a price above 0 up to `bid_price_cents` (at most 6 decimal "
        "places), which makes the deal and bills it; or reject, optionally with a reason (up "
        f"to {MAX_REASON_CHARS} characters). An offer takes exactly one answer: a second one, "
        "an expired offer or another publisher's offer is 404.",
        "parameters": [path_parameter("offer_id", "The offer's id.", _OFFER)],
        "requestBody": {
            "required": True,
            "content": json_content(
                ref("OfferResponse"), {"action": "accept", "accepted_price_cents": 29.8675}
            ),
        },
        "responses": {
            "200": {
                "description": "The answer was taken.",
                "content": json_content(
                    {"oneOf": [ref("Accepted"), ref("Rejected")]}, _ACCEPTED_EXAMPLE
                ),
            },
            "400": error_response(
                "Not a JSON object, not `application/json`, `action` not `accept` or `reject`, "
                "a price missing, not a number, not above 0, too fine or above the bid, a "
                "reason too long."
            ),
            "401": _unauthorized(),
            "429": _rate_limited(),
            "404": error_response(
                "Unknown, expired, already answered, or another publisher's offer."
            ),
            **_body_errors(),
            "503": _unavailable(),
        },
    }


def _playout() -> dict[str, Any]:
    return {
        "operationId": "confirmPlayout",
        "summary": "Confirm the playout of a deal",
        "description": "Every field is optional; an empty body is fine. Idempotent: a repeat "
        "answers the first playout (`Playout already confirmed`).",
        "parameters": [path_parameter("deal_id", "The deal's id.", _DEAL)],
        "requestBody": {
            "required": False,
            "content": json_content(
                ref("PlayoutConfirmation"),
                {"played_at": "2026-05-04T10:16:02Z", "duration_seconds": 15},
            ),
        },
        "responses": {
            "200": {
                "description": "The playout is confirmed.",
                "content": json_content(ref("Confirmed")),
            },
            "400": error_response("A field outside its rule, or a body that is not JSON."),
            "401": _unauthorized(),
            "429": _rate_limited(),
            "404": error_response("Unknown deal, or another publisher's."),
            **_body_errors(),
            "503": _unavailable(),
        },
    }


def _screen_problems() -> dict[str, Any]:
    return any_error(
        "Every problem of the screen by field (`problems`), nothing changed; or a body that is "
        "not a JSON object.",
        "ScreenProblems",
        "Error",
    )


def _screens() -> dict[str, Any]:
    return {
        "get": {
            "operationId": "listScreens",
            "summary": "The key's publisher's screens, in id order",
            "parameters": [
                {
                    "name": "limit",
                    "in": "query",
                    "schema": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_PAGE,
                        "default": DEFAULT_PAGE,
                    },
                },
                {
                    "name": "cursor",
                    "in": "query",
                    "description": "The previous page's `next_cursor`.",
                    "schema": {"type": "string"},
                },
            ],
            "responses": {
                "200": {
                    "description": "A page; `next_cursor` is null on the last one.",
                    "content": json_content(ref("ScreenPage")),
                },
                "400": error_response("`limit` or `cursor` is not valid."),
                "401": _unauthorized(),
                "429": _rate_limited(),
                "503": _unavailable(),
            },
        },
        "post": {
            "operationId": "registerScreen",
            "summary": "Register a screen",
            "description": "The screen fields without `publisher_id` (the key's); `id` is "
            "optional (generated).",
            "requestBody": {
                "required": True,
                "content": json_content(
                    ref("ScreenRegistration"),
                    {"name": "Platform 9", "type": "moving", "width": 1920, "height": 1080},
                ),
            },
            "responses": {
                "201": {
                    "description": "The screen as stored.",
                    "content": json_content(ref("Screen"), _SCREEN_EXAMPLE),
                },
                "400": _screen_problems(),
                "401": _unauthorized(),
                "429": _rate_limited(),
                "409": error_response("A screen with this id exists."),
                **_body_errors(),
                "503": _unavailable(),
            },
        },
    }


def _screen() -> dict[str, Any]:
    screen_id = path_parameter("screen_id", "A screen of the key's publisher.", _SCREEN)
    found = {"description": "The screen.", "content": json_content(ref("Screen"))}
    not_found = error_response("No screen of yours has this id.")
    return {
        "parameters": [screen_id],
        "get": {
            "operationId": "getScreen",
            "summary": "One screen",
            "responses": {
                "200": found,
                "401": _unauthorized(),
                "429": _rate_limited(),
                "404": not_found,
                "503": _unavailable(),
            },
        },
        "patch": {
            "operationId": "updateScreen",
            "summary": "Change a screen's fields",
            "description": "Absent fields stay; `null` clears an optional one.",
            "requestBody": {
                "required": True,
                "content": json_content(ref("ScreenUpdate"), {"audience_per_play": 40}),
            },
            "responses": {
                "200": found,
                "400": _screen_problems(),
                "401": _unauthorized(),
                "429": _rate_limited(),
                "404": not_found,
                **_body_errors(),
                "503": _unavailable(),
            },
        },
        "delete": {
            "operationId": "deactivateScreen",
            "summary": "Deactivate a screen (screens are never deleted)",
            "responses": {
                "200": found,
                "400": error_response("The screen cannot be stored as it is."),
                "401": _unauthorized(),
                "429": _rate_limited(),
                "404": not_found,
                "503": _unavailable(),
            },
        },
    }


@cache
def core_document(public_base_url: str) -> dict[str, Any]:
    screen_id = path_parameter("screen_id", "The screen's UUID.", _SCREEN)
    external_id = path_parameter(
        "external_id", "Your own id of the screen (account activated for it).", "metro-cs-001"
    )
    schemas = components(
        (
            Offer,
            OfferResponse,
            Accepted,
            Rejected,
            PlayoutConfirmation,
            Confirmed,
            Screen,
            ScreenPage,
            ScreenRegistration,
            ScreenUpdate,
            ScreenProblems,
            Error,
        )
    )
    info = {
        "title": "DOOH bidder: Core API",
        "description": "Offers for one screen at a time: request, accept or reject, confirm the "
        "playout; and the publisher's own screens. Money is decimal cents as JSON numbers; times "
        "are ISO 8601 in UTC with milliseconds. The guide: /docs/api-core.",
    }
    paths = {
        f"{CORE_PREFIX}/offers/request/{{screen_id}}": {
            "get": _offer_request("requestOffer", screen_id, external=False)
        },
        f"{CORE_PREFIX}/offers/request/external-id/{{external_id}}": {
            "get": _offer_request("requestOfferByExternalId", external_id, external=True)
        },
        f"{CORE_PREFIX}/offers/response/{{offer_id}}": {"post": _offer_response()},
        f"{CORE_PREFIX}/playout/confirm/{{deal_id}}": {"post": _playout()},
        SCREENS_PATH: _screens(),
        f"{SCREENS_PATH}/{{screen_id}}": _screen(),
        EARNINGS_PATH: {"get": earnings_operation(_unauthorized(), _unavailable())},
    }
    schemas |= report_schemas()
    return document(info, public_base_url, ("apiKey", "The publisher's API key."), paths, schemas)


@get(DOCUMENT_PATH, sync_to_thread=False)
def openapi_core(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The Core API's OpenAPI 3.1 document (public, like the guides)."""
    return document_response(core_document(runtime_of(request).settings.server.public_base_url))


routes = [openapi_core]
