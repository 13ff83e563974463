"""GET /docs/openapi-admin.json: the OpenAPI 3.1 document of the admin API (inventory, API keys,
campaign budgets, offer and deal records), from the Structs its handlers use."""

from __future__ import annotations

from functools import cache
from typing import Any

from litestar import Request, Response, get

from bidder.admin._campaigns import MAX_KEY_CHARS, CampaignView, TopUp
from bidder.admin._common import ADMIN_PREFIX
from bidder.admin._inventory import MAX_DOCUMENT_BYTES, Imported
from bidder.admin._keys import KeyCreated, KeyRequest
from bidder.admin.changes_routes import CampaignChange
from bidder.admin.lists_openapi import campaign_patch, change_paths, list_paths
from bidder.admin.records_routes import DealView, OfferView
from bidder.admin.reports_routes import DELIVERY_PATH
from bidder.http.web import runtime_of
from bidder.openapi import (
    Error,
    InventoryProblems,
    any_error,
    components,
    document,
    document_response,
    error_response,
    json_content,
    path_parameter,
    ref,
)
from bidder.reports.openapi import delivery_operation, report_schemas
from matching.inventory import Campaign, Creative, InventoryDocument, Screen

DOCUMENT_PATH = "/docs/openapi-admin.json"
_PUBLISHER = "de000001-0000-4000-a000-000000000001"
_CAMPAIGN = "de000004-0000-4000-a000-000000000001"


def _common(*, not_found: str | None = None, bad_id: str | None = None) -> dict[str, Any]:
    """The answers every admin operation may give, and its own 400 and 404."""
    responses: dict[str, Any] = {
        "401": error_response("The admin token is missing or wrong."),
        "503": error_response("Postgres (or Redis) cannot be reached: retry.", retry=True),
    }
    if bad_id is not None:
        responses["400"] = error_response(bad_id)
    if not_found is not None:
        responses["404"] = error_response(not_found)
    return responses


def _uuid(name: str, what: str, example: str) -> dict[str, Any]:
    return path_parameter(name, f"The {what}'s id (a UUID; anything else is 400).", example)


def _inventory() -> dict[str, Any]:
    return {
        "get": {
            "operationId": "exportInventory",
            "summary": "The whole inventory document (PUT of it changes nothing)",
            "responses": {
                "200": {
                    "description": "The stored inventory.",
                    "content": json_content(ref("InventoryDocument")),
                },
                **_common(),
            },
        },
        "put": {
            "operationId": "importInventory",
            "summary": "Bulk, idempotent upsert of an inventory document (all or nothing)",
            "description": "Each item named is replaced whole; lists left out are untouched; "
            "nothing is deleted. Every field: docs/inventory.md. Money may also be a string "
            "holding a decimal number as JSON writes one.",
            "requestBody": {"required": True, "content": json_content(ref("InventoryDocument"))},
            "responses": {
                "200": {
                    "description": "Upserted: the items per list.",
                    "content": json_content(
                        ref("Imported"),
                        {"counts": {"publishers": 3, "screens": 10, "campaigns": 4}},
                    ),
                },
                "400": any_error(
                    "Every problem of the document (nothing applied), or a body that is not "
                    "a document.",
                    "InventoryProblems",
                    "Error",
                ),
                "413": error_response(f"Body above {MAX_DOCUMENT_BYTES} bytes."),
                **_common(),
            },
        },
    }


def _keys() -> dict[str, Any]:
    return {
        "operationId": "createApiKey",
        "summary": "A publisher API key, shown once (only its hash is stored)",
        "parameters": [_uuid("publisher_id", "publisher", _PUBLISHER)],
        "requestBody": {
            "required": False,
            "content": json_content(ref("KeyRequest"), {"expires_at": "2027-01-01T00:00:00Z"}),
        },
        "responses": {
            "201": {
                "description": "The key; it works on every worker within 2 seconds.",
                "content": json_content(ref("KeyCreated")),
            },
            **_common(
                not_found="Unknown publisher.",
                bad_id="Not a UUID, a body of the wrong shape, or `expires_at` without a time "
                "zone or not in the future.",
            ),
        },
    }


def _revoke() -> dict[str, Any]:
    return {
        "operationId": "revokeApiKey",
        "summary": "Revoke a key (also when already revoked)",
        "parameters": [_uuid("key_id", "key", "6b0f2c3e-1d4a-4b5c-9e8f-7a6b5c4d3e2f")],
        "responses": {
            "204": {"description": "Revoked; every worker refuses it within 2 seconds."},
            **_common(not_found="Unknown key.", bad_id="The key id is not a UUID."),
        },
    }


def _campaign() -> dict[str, Any]:
    return {
        "operationId": "getCampaign",
        "summary": "A campaign with its live budget",
        "parameters": [_uuid("campaign_id", "campaign", _CAMPAIGN)],
        "responses": {
            "200": {
                "description": "The campaign; `budget` is null when Redis cannot be read.",
                "content": json_content(ref("CampaignView")),
            },
            **_common(not_found="Unknown campaign.", bad_id="The campaign id is not a UUID."),
        },
    }


def _top_up() -> dict[str, Any]:
    return {
        "operationId": "topUpCampaign",
        "summary": "Raise a campaign's total budget",
        "parameters": [
            _uuid("campaign_id", "campaign", _CAMPAIGN),
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": False,
                "description": "Makes a retry safe: the same key again adds nothing. 1 to "
                f"{MAX_KEY_CHARS} visible ASCII characters, such as a UUID.",
                "schema": {
                    "type": "string",
                    "pattern": f"^[\\x21-\\x7e]{{1,{MAX_KEY_CHARS}}}$",
                },
            },
        ],
        "requestBody": {
            "required": True,
            "content": json_content(ref("TopUp"), {"add_cents": 10000.5}),
        },
        "responses": {
            "200": {
                "description": "The campaign as GET shows it (`budget` null when Redis cannot "
                "be read: the top-up is committed all the same).",
                "headers": {
                    "Idempotent-Replayed": {
                        "description": "`true` when the key had already done this top-up.",
                        "schema": {"type": "string", "enum": ["true"]},
                    }
                },
                "content": json_content(ref("CampaignView")),
            },
            "409": error_response("The Idempotency-Key was used for another top-up."),
            **_common(
                not_found="Unknown campaign.",
                bad_id="Not a UUID, `add_cents` not a positive amount (at most 6 decimal "
                "places), a total past the largest, or a bad Idempotency-Key.",
            ),
        },
    }


def _record(operation_id: str, name: str, schema: str, summary: str) -> dict[str, Any]:
    return {
        "operationId": operation_id,
        "summary": summary,
        "parameters": [_uuid(f"{name}_id", name, "3b1f6c2e-8d4a-4f7b-9c1e-2a5d7e9f0b3c")],
        "responses": {
            "200": {"description": summary, "content": json_content(ref(schema))},
            **_common(
                not_found=f"Unknown {name} (a deal: not written yet).",
                bad_id=f"The {name} id is not a UUID.",
            ),
        },
    }


@cache
def admin_document(public_base_url: str) -> dict[str, Any]:
    schemas = components(
        (
            InventoryDocument,
            Imported,
            InventoryProblems,
            KeyRequest,
            KeyCreated,
            CampaignView,
            TopUp,
            OfferView,
            DealView,
            Campaign,
            CampaignChange,
            Screen,
            Creative,
            Error,
        )
    )
    info = {
        "title": "DOOH bidder: admin API",
        "description": "For operators, with `Authorization: Bearer <ADMIN_TOKEN>`: the inventory "
        "document, publisher API keys, campaign budgets, offer and deal records. Money is "
        "decimal cents as JSON numbers.",
    }
    paths = {
        f"{ADMIN_PREFIX}/inventory": _inventory(),
        f"{ADMIN_PREFIX}/publishers/{{publisher_id}}/api-keys": {"post": _keys()},
        f"{ADMIN_PREFIX}/api-keys/{{key_id}}": {"delete": _revoke()},
        f"{ADMIN_PREFIX}/campaigns/{{campaign_id}}": {
            "get": _campaign(),
            "patch": campaign_patch(_common()),
        },
        f"{ADMIN_PREFIX}/campaigns/{{campaign_id}}/budget": {"post": _top_up()},
        f"{ADMIN_PREFIX}/offers/{{offer_id}}": {
            "get": _record("getOffer", "offer", "OfferView", "An offer's outcome")
        },
        f"{ADMIN_PREFIX}/deals/{{deal_id}}": {
            "get": _record(
                "getDeal", "deal", "DealView", "A deal with its billing record and playouts"
            )
        },
        f"{ADMIN_PREFIX}{DELIVERY_PATH}": {"get": delivery_operation(_common())},
        **list_paths(ADMIN_PREFIX, _common()),
        **change_paths(ADMIN_PREFIX, _common()),
    }
    schemas |= report_schemas()
    return document(
        info, public_base_url, ("adminToken", "The operator's ADMIN_TOKEN."), paths, schemas
    )


@get(DOCUMENT_PATH, sync_to_thread=False)
def openapi_admin(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The admin API's OpenAPI 3.1 document (public, like the guides: it holds no secret)."""
    return document_response(admin_document(runtime_of(request).settings.server.public_base_url))


routes = [openapi_admin]
