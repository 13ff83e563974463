"""The OpenAPI 3.0 document of the OpenRTB interface: exactly the bid (both paths) and the loss
notice endpoints, with their status codes, bodies and headers. Served at /openapi.json."""

from __future__ import annotations

from functools import cache
from typing import Any

from bidder.deprecation import DEPRECATION_MESSAGE, OPENRTB_PREFIX
from bidder.openrtb._request import MAX_ID_CHARS
from bidder.settings import Settings

VALIDATION_ORDER = (
    "INVALID_REQUEST",
    "MULTI_IMP_NOT_SUPPORTED",
    "NOT_FIXED_PRICE",
    "NO_EXTERNAL_SCREEN_ID",
    "NO_VIDEO_OBJECT",
    "NO_RESOLUTION",
    "NO_PMP_DEALS",
    "NO_TOTAL_AUDIENCE",
)

_BID_DESCRIPTION = f"""\
**Deprecated.** {DEPRECATION_MESSAGE}

Exactly one impression, fixed price (`at` = 3), a video object (no banner), an exact resolution
(`video.w` x `video.h`, no scaling), at least one PMP deal and an audience quantity.

Validation runs in this order and the first failing rule answers 400 with its code:
1. `INVALID_REQUEST`: the Content-Type is not `application/json`, the body is not JSON (invalid
   UTF-8 anywhere included) or not a JSON object (a container of the wrong JSON type is judged
   by the rule that reads it, below);
2. `MULTI_IMP_NOT_SUPPORTED`: not exactly one impression (zero included), `details.imp_count`;
3. `NOT_FIXED_PRICE`: `at` is not 3, or `imp[0].pmp.deals[0].at` is absent or not 3;
4. `NO_EXTERNAL_SCREEN_ID`: `imp[0].tagid` missing, empty or above 256 characters;
5. `NO_VIDEO_OBJECT`: `imp[0].video` missing, or `imp[0].banner` present;
6. `NO_RESOLUTION`: `video.w` or `video.h` missing or not a positive integer;
7. `NO_PMP_DEALS`: `imp[0].pmp.deals` missing or empty, or `deals[0]` without `id` (1 to 256
   characters) or a `bidfloor` of 0 or more;
8. `NO_TOTAL_AUDIENCE`: no `imp[0].qty.multiplier` > 0 and, when `qty` is absent, no
   `imp[0].ext.totalaud` > 0. When `qty` is sent its multiplier is used, with no fallback;
9. `INVALID_REQUEST`: a request that meets every rule above but lacks `id` or `imp[0].id` (a
   string of 1 to 256 characters each), or whose `video.mimes` is not an array of strings.

A container of the wrong JSON type counts as absent for the rule that reads it: `"video": "x"`
is `NO_VIDEO_OBJECT`, an `imp` that is not an array holds no impression
(`MULTI_IMP_NOT_SUPPORTED`, `imp_count` 0), and a `qty` that is not an object (nor null) was
still sent, so it is `NO_TOTAL_AUDIENCE` with no fallback.

The screen is `imp[0].tagid` among the external ids of the key's publisher (unknown: 204). An
audience above the publisher's `max_audience_per_play` (50,000 unless the operator sets
another) is not bid on (204). An
asset whose MIME type is not in `video.mimes` is not offered (no `mimes`: any type; an empty
list: none, so 204). The
minimum bid is `bidfloor` x audience / 10 cents, rounded up to a whole cent. `price` is the
offer's **per-play price in EUR** (`bid_price_cents` / 100), not a CPM. Every answer is in
EUR: `cur`, when sent, must list EUR (else 204). A deal's `bidfloor` is a CPM in its
`bidfloorcur` (absent: EUR); another currency is converted with the operator's exchange rate
for it, and without a fresh one there is no bid (204). Billing happens only on the VAST
`impression` tracking event; the loss notice in `lurl` releases the reservation.
"""

_LOSS_DESCRIPTION = """\
**Deprecated.** The signed loss notice URL returned in `lurl`; call it exactly as returned,
with the macros substituted. No Authorization header: the URL is authenticated by its signature
(`pub`, `scr`, `ts`, `token`) and is valid for 24 hours after the bid. Checked in this order:
query string above 4 KB (414), body above 16 KB (413), signature or `ts` window (403), a macro
that is a number no column holds (400), storage (503, retry with backoff). Unsubstituted
macros are stored as absent values. The first notice
counts (it releases the reservation of a bid that is not billed yet); retries only increment a
counter. A notice after billing is recorded and changes nothing. A validly signed notice for a
bid the service no longer knows is accepted (204). A POST body (JSON, or any text) is stored
for diagnostics exactly as sent.
"""


def _headers() -> dict[str, Any]:
    return {
        "Deprecation": {
            "description": "Always `true`: this interface is deprecated.",
            "schema": {"type": "string", "enum": ["true"]},
        },
        "Link": {
            "description": 'The migration guide, `<url>; rel="deprecation"`.',
            "schema": {"type": "string"},
        },
    }


def _error(description: str, retry_after: str = "") -> dict[str, Any]:
    """An error answer; `retry_after` describes its `Retry-After` header, when it has one."""
    headers = _headers()
    if retry_after:
        headers["Retry-After"] = {"description": retry_after, "schema": {"type": "integer"}}
    return {
        "description": description,
        "headers": headers,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


#: The legacy `ext.totalaud` where it is read (no `qty`): an audience like `qty.multiplier`.
_AUDIENCE: dict[str, Any] = {
    "type": "number",
    "exclusiveMinimum": True,
    "minimum": 0,
    "exclusiveMaximum": True,
    "maximum": 10_000_000_000,
}


def _schemas() -> dict[str, Any]:
    number = {"type": "number"}
    return {
        "BidRequest": {
            "type": "object",
            "description": "OpenRTB 2.6 BidRequest; only the fields below are read, others are "
            "tolerated.",
            "required": ["id", "at", "imp"],
            "properties": {
                "id": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_ID_CHARS,
                    "description": "Auction id.",
                },
                "at": {"type": "integer", "enum": [3], "description": "Fixed price only."},
                "test": {
                    "description": "1 (or true): test traffic, answered like a live bid but "
                    "nothing is reserved, billed or stored; its pixels and loss notice are 204s."
                },
                "cur": {
                    "description": "Currencies the SSP takes: without EUR (or not an array), "
                    "no bid (204)."
                },
                "badv": {
                    "description": "Blocked advertiser domains (and their subdomains): a "
                    "campaign of such an advertiser does not bid, the next best does. Not an "
                    "array of strings: no bid (204)."
                },
                "bcat": {
                    "description": "Blocked IAB categories in the `cattax` taxonomy (in "
                    "taxonomy 1 a tier-1 id such as IAB8 blocks its IAB8-* too). Not an array "
                    "of strings: no bid (204)."
                },
                "cattax": {"description": "The taxonomy of `bcat`; 1 unless a positive integer."},
                "dooh": {
                    "description": "`venuetype` with `venuetypetax` (or `venuetypeid` with "
                    "`venuetax`) in an OpenOOH taxonomy (1 or 5): the venue types targeting "
                    "compares when the screen has none of its own."
                },
                "device": {
                    "description": "`geo.lat` with `geo.lon` (or `long`): where the screen is, "
                    "for place targeting, when the screen has no lat/lon of its own."
                },
                "imp": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 1,
                    "items": {"$ref": "#/components/schemas/Imp"},
                },
            },
        },
        "Imp": {
            "type": "object",
            "required": ["id", "tagid", "video", "pmp"],
            "anyOf": [
                {"required": ["qty"], "properties": {"qty": {"type": "object"}}},
                {
                    "required": ["ext"],
                    "properties": {
                        "ext": {
                            "type": "object",
                            "required": ["totalaud"],
                            "properties": {"totalaud": _AUDIENCE},
                        }
                    },
                },
            ],
            "properties": {
                "id": {"type": "string", "minLength": 1, "maxLength": MAX_ID_CHARS},
                "exp": {
                    "description": "Seconds the SSP waits for the impression: when a number "
                    "of 1 or more below OFFER_TTL_SECONDS, the bid (and the VAST `Expires`) "
                    "lives that long (fractions dropped); otherwise the configured TTL."
                },
                "tagid": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_ID_CHARS,
                    "description": "The publisher's external screen id.",
                },
                "banner": {
                    "nullable": True,
                    "enum": [None],
                    "description": "Not supported: must be absent (or null).",
                },
                "video": {
                    "type": "object",
                    "required": ["w", "h"],
                    "properties": {
                        "w": {"type": "integer", "minimum": 1},
                        "h": {"type": "integer", "minimum": 1},
                        "mimes": {
                            "type": "array",
                            "items": {"type": "string"},
                            "nullable": True,
                            "description": "Absent or null: any type; empty: none (204).",
                        },
                    },
                },
                "pmp": {
                    "type": "object",
                    "required": ["deals"],
                    "properties": {
                        "deals": {
                            "type": "array",
                            "minItems": 1,
                            "description": "Only the first deal is read and checked (`id`, a "
                            "`bidfloor` of 0 or more, `at` 3); later deals are not "
                            "read, so one that breaks this schema is tolerated.",
                            "items": {
                                "type": "object",
                                "required": ["id", "bidfloor", "at"],
                                "properties": {
                                    "id": {
                                        "type": "string",
                                        "minLength": 1,
                                        "maxLength": MAX_ID_CHARS,
                                    },
                                    "bidfloor": {
                                        "type": "number",
                                        "minimum": 0,
                                        "description": "Minimum CPM in EUR.",
                                    },
                                    "bidfloorcur": {
                                        "description": "EUR when absent; another "
                                        "currency is converted with the operator's exchange "
                                        "rate, and without a fresh one is no bid (204).",
                                    },
                                    "at": {"type": "integer", "enum": [3]},
                                },
                            },
                        }
                    },
                },
                "qty": {
                    "type": "object",
                    "nullable": True,
                    "description": "Null counts as absent (then `ext.totalaud` applies).",
                    "required": ["multiplier"],
                    "properties": {
                        "multiplier": {
                            "type": "number",
                            "exclusiveMinimum": True,
                            "minimum": 0,
                            "exclusiveMaximum": True,
                            "maximum": 10_000_000_000,
                            "description": "Audience reached by one play (preferred); below "
                            "10 billion.",
                        },
                        "sourcetype": {"description": "Not read."},
                        "vendor": {"description": "Not read."},
                    },
                },
                "ext": {
                    "type": "object",
                    "nullable": True,
                    "properties": {
                        "totalaud": {
                            "description": "Legacy audience, read only when `qty` is absent "
                            "or null: then a number above 0 and below 10 billion (see the "
                            "`anyOf` above); beside a `qty` it is not read.",
                        }
                    },
                },
            },
        },
        "Bid": {
            "type": "object",
            "required": [
                "id",
                "impid",
                "price",
                "adid",
                "cid",
                "crid",
                "adm",
                "lurl",
                "adomain",
                "dealid",
                "w",
                "h",
            ],
            "properties": {
                "id": {"type": "string", "format": "uuid"},
                "impid": {"type": "string", "description": "Mirrors imp[0].id."},
                "price": {
                    **number,
                    "description": "The offer's per-play price in EUR (bid_price_cents / 100), "
                    "not a CPM.",
                },
                "adid": {"type": "string", "description": "The offer id."},
                "cid": {"type": "string", "description": "The offer id."},
                "crid": {"type": "string", "description": "The offer id."},
                "adm": {
                    "type": "string",
                    "description": "VAST 4.0 XML; tracking URLs carry price=${AUCTION_PRICE} "
                    "and aud=${TOTAL_IMP}; the impression event bills the bid.",
                },
                "lurl": {"type": "string", "description": "Signed loss notice URL."},
                "adomain": {"type": "array", "items": {"type": "string"}},
                "dealid": {"type": "string", "description": "imp[0].pmp.deals[0].id."},
                "w": {"type": "integer"},
                "h": {"type": "integer"},
                "cat": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "The campaign's IAB categories; absent when it has none.",
                },
                "cattax": {
                    "type": "integer",
                    "description": "The taxonomy of `cat`; present with it.",
                },
            },
        },
        "BidResponse": {
            "type": "object",
            "required": ["id", "seatbid", "bidid", "cur", "ext"],
            "properties": {
                "id": {"type": "string", "description": "Mirrors the BidRequest id."},
                "seatbid": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["bid"],
                        "properties": {
                            "bid": {
                                "type": "array",
                                "minItems": 1,
                                "maxItems": 1,
                                "items": {"$ref": "#/components/schemas/Bid"},
                            }
                        },
                    },
                },
                "bidid": {"type": "string", "format": "uuid"},
                "cur": {"type": "string", "enum": ["EUR"]},
                "ext": {
                    "type": "object",
                    "required": ["platform"],
                    "properties": {"platform": {"$ref": "#/components/schemas/Deprecation"}},
                },
            },
        },
        "NoBid": {
            "type": "object",
            "required": ["id", "seatbid", "nbr", "cur"],
            "properties": {
                "id": {"type": "string", "description": "Mirrors the BidRequest id."},
                "seatbid": {"type": "array", "maxItems": 0, "items": {"type": "object"}},
                "nbr": {
                    "type": "integer",
                    "enum": [0, 1],
                    "description": "0 resolution mismatch, 1 technical failure.",
                },
                "cur": {"type": "string", "enum": ["EUR"]},
            },
        },
        "Deprecation": {
            "type": "object",
            "required": ["deprecated", "deprecation_message", "documentation", "migration_guide"],
            "properties": {
                "deprecated": {"type": "boolean", "enum": [True]},
                "deprecation_message": {"type": "string"},
                "documentation": {"type": "string"},
                "migration_guide": {"type": "string"},
            },
        },
        "Error": {
            "type": "object",
            "required": [
                "error",
                "message",
                "details",
                "deprecated",
                "deprecation_message",
                "documentation",
                "migration_guide",
            ],
            "properties": {
                "error": {"type": "string", "description": "The code to match on."},
                "message": {"type": "string"},
                "details": {"type": "object"},
                "deprecated": {"type": "boolean", "enum": [True]},
                "deprecation_message": {"type": "string"},
                "documentation": {"type": "string"},
                "migration_guide": {"type": "string"},
            },
        },
    }


def _bid_operation(operation_id: str) -> dict[str, Any]:
    return {
        "operationId": operation_id,
        "summary": "Bid on one DOOH impression (deprecated)",
        "description": _BID_DESCRIPTION,
        "deprecated": True,
        "security": [{"bearer": []}],
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/BidRequest"}}
            },
        },
        "responses": {
            "200": {
                "description": "A bid, or a no-bid with `nbr` (0 resolution mismatch, "
                "1 technical failure).",
                "headers": _headers(),
                "content": {
                    "application/json": {
                        "schema": {
                            "oneOf": [
                                {"$ref": "#/components/schemas/BidResponse"},
                                {"$ref": "#/components/schemas/NoBid"},
                            ]
                        }
                    }
                },
            },
            "204": {
                "description": "No bid: unknown screen, no matching offer, minimum not met, "
                "or no asset of an accepted MIME type.",
                "headers": _headers(),
            },
            "400": _error("Validation error; `error` is the first failing rule's code."),
            "401": _error("`INVALID_API_KEY`: Authorization missing or invalid."),
            "429": _error(
                "`RATE_LIMITED`: the key asked more than its rate limit allows (off unless the "
                "operator sets one).",
                retry_after="Seconds to wait before retrying.",
            ),
            "408": _error(
                "`REQUEST_TIMEOUT`: nothing more of the body arrived for BODY_TIMEOUT_SECONDS "
                "(default 10); the connection is closed."
            ),
            "413": _error(
                "`PAYLOAD_TOO_LARGE`: a body (or a declared Content-Length) above 1,000,000 bytes."
            ),
            "500": _error("`INTERNAL_ERROR`: an unexpected failure; nothing was reserved."),
        },
    }


def _loss_operation(operation_id: str, method: str) -> dict[str, Any]:
    signed: list[dict[str, Any]] = [
        {
            "name": name,
            "in": "query",
            "required": True,
            "schema": {"type": "string"},
            "description": "Part of the signed URL; do not alter.",
        }
        for name in ("pub", "scr", "ts", "token")
    ]
    parameters: list[dict[str, Any]] = [
        {"name": "offer_id", "in": "path", "required": True, "schema": {"type": "string"}},
        {
            "name": "reason",
            "in": "query",
            "schema": {"type": "string"},
            "description": "${AUCTION_LOSS}: 0 won, 1-10 technical, 100-104 auction, "
            "200-213 creative filtered, 1000+ exchange specific.",
        },
        {
            "name": "price",
            "in": "query",
            "schema": {"type": "string"},
            "description": "${AUCTION_PRICE}: the winner's clearing CPM; stored, never billed.",
        },
        {"name": "cur", "in": "query", "schema": {"type": "string"}},
        {
            "name": "mtw",
            "in": "query",
            "schema": {"type": "string"},
            "description": "${AUCTION_MIN_TO_WIN}. Like `reason` and `price`, typed string: a "
            "value that is not a number (an unsubstituted macro) is accepted and stored as "
            "absent.",
        },
        {"name": "aid", "in": "query", "schema": {"type": "string"}},
    ]
    parameters += signed
    operation: dict[str, Any] = {
        "operationId": operation_id,
        "summary": f"Loss notice ({method}, deprecated)",
        "description": _LOSS_DESCRIPTION,
        "deprecated": True,
        "security": [],
        "parameters": parameters,
        "responses": {
            "204": {"description": "Notice accepted.", "headers": _headers()},
            "400": _error(
                "`INVALID_REQUEST`: `price` or `mtw` a number of 10^14 or more in magnitude, or "
                "`reason` a whole number beyond 2147483647 in magnitude; nothing is recorded."
            ),
            "403": _error("`INVALID_SIGNATURE`: signature invalid, or ts outside 24 hours."),
            "413": _error("`PAYLOAD_TOO_LARGE`: body above 16 KB."),
            "414": _error("`URI_TOO_LONG`: query string above 4 KB."),
            "503": _error(
                "`SERVICE_UNAVAILABLE`: temporary ingestion problem, nothing was applied; retry "
                "with backoff, the URL stays valid.",
                retry_after="Seconds to wait before retrying (5).",
            ),
        },
    }
    if method == "POST":
        operation["responses"]["408"] = _error(
            "`REQUEST_TIMEOUT`: nothing more of the body arrived for BODY_TIMEOUT_SECONDS "
            "(default 10)."
        )
        operation["requestBody"] = {
            "required": False,
            "description": "Optional, stored for diagnostics (at most 16 KB): JSON as JSON, "
            "any other body (whatever its Content-Type) as text.",
            "content": {
                "application/json": {"schema": {}},
                "*/*": {"schema": {"type": "string"}},
            },
        }
    return operation


def _openapi_operation() -> dict[str, Any]:
    return {
        "operationId": "openapi",
        "summary": "This document (deprecated interface)",
        "deprecated": True,
        "security": [{"bearer": []}],
        "responses": {
            "200": {
                "description": "The OpenAPI 3.0 description of this interface.",
                "headers": _headers(),
                "content": {"application/json": {"schema": {"type": "object"}}},
            },
            "401": _error("`INVALID_API_KEY`: Authorization missing or invalid."),
            "503": _error(
                "`SERVICE_UNAVAILABLE`: the worker is starting and has not loaded the keys yet.",
                retry_after="Seconds to wait before retrying (1).",
            ),
        },
    }


@cache
def _document(public_base_url: str, migration_guide: str) -> dict[str, Any]:
    loss_path = f"{OPENRTB_PREFIX}/loss/{{offer_id}}"
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "OpenRTB 2.6 bidding interface (deprecated)",
            "version": "2.6",
            "description": f"{DEPRECATION_MESSAGE} Migration guide: {migration_guide}",
        },
        "servers": [{"url": public_base_url}],
        "paths": {
            f"{OPENRTB_PREFIX}/bid": {"post": _bid_operation("bid")},
            f"{OPENRTB_PREFIX}/": {"post": _bid_operation("bidAtRoot")},
            loss_path: {
                "get": _loss_operation("lossNotice", "GET"),
                "post": _loss_operation("lossNoticePost", "POST"),
            },
            f"{OPENRTB_PREFIX}/openapi.json": {"get": _openapi_operation()},
        },
        "components": {
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The publisher API key.",
                }
            },
            "schemas": _schemas(),
        },
    }


def openapi_document(settings: Settings) -> dict[str, Any]:
    return _document(settings.server.public_base_url, settings.server.migration_guide_url)
