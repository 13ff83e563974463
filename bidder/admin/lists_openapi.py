"""The admin OpenAPI document's part for the lists and the per-item changes."""

from __future__ import annotations

from typing import Any

from bidder.admin.lists_routes import DEFAULT_LIMIT, MAX_LIMIT
from bidder.openapi import error_response, json_content, path_parameter, ref
from store.listings import LISTS

__all__ = ["campaign_patch", "change_paths", "list_paths"]

_QUERY = "query"
# An id no demo item has: an example a fuzzer replays changes nothing.
_EXAMPLE_ID = "00000000-0000-4000-8000-000000000000"


def _parameters(name: str) -> list[dict[str, Any]]:
    filters = LISTS[name].filters
    params: list[dict[str, Any]] = [
        {
            "name": "limit",
            "in": _QUERY,
            "schema": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_LIMIT,
                "default": DEFAULT_LIMIT,
            },
        },
        {
            "name": "cursor",
            "in": _QUERY,
            "description": "The previous page's `next_cursor`.",
            "schema": {"type": "string"},
        },
        {
            "name": "from",
            "in": _QUERY,
            "description": "Only items at or after this ISO 8601 time (with zone) or date.",
            "schema": {"type": "string"},
        },
        {
            "name": "to",
            "in": _QUERY,
            "description": "Only items before this ISO 8601 time (with zone) or date.",
            "schema": {"type": "string"},
        },
    ]
    for key in filters:
        params.append(
            {
                "name": key,
                "in": _QUERY,
                "description": "A UUID." if key.endswith("_id") else "The item's status.",
                "schema": {"type": "string"},
            }
        )
    return params


def list_paths(prefix: str, common: dict[str, Any]) -> dict[str, Any]:
    page = {
        "type": "object",
        "required": ["items", "next_cursor"],
        "properties": {
            "items": {"type": "array", "items": {"type": "object"}},
            "next_cursor": {"type": ["string", "null"]},
        },
    }
    return {
        f"{prefix}/{name}": {
            "get": {
                "operationId": "list" + "".join(p.title() for p in name.split("-")),
                "summary": f"The {name.replace('-', ' ')}, a page at a time",
                "parameters": _parameters(name),
                "responses": {
                    "200": {
                        "description": "A page in a stable order; `next_cursor` null on the last.",
                        "content": json_content(page),
                    },
                    **common,
                    "400": error_response("A filter, `limit` or `cursor` is not valid."),
                },
            }
        }
        for name in LISTS
    }


def _change(
    operation_id: str, summary: str, name: str, common: dict[str, Any], schema: str
) -> dict[str, Any]:
    return {
        "operationId": operation_id,
        "summary": summary,
        "parameters": [path_parameter(name, "The item's id (a UUID).", _EXAMPLE_ID)],
        "responses": {
            "200": {"description": "The item as stored.", "content": json_content(ref(schema))},
            **common,
            "400": error_response("Not a UUID, or the change breaks an inventory rule."),
            "404": error_response("No such item."),
        },
    }


def change_paths(prefix: str, common: dict[str, Any]) -> dict[str, Any]:
    """`common` answers (401, 503) of every admin operation."""
    campaign = "campaign_id"
    return {
        f"{prefix}/campaigns/{{campaign_id}}/pause": {
            "post": _change("pauseCampaign", "Pause a campaign", campaign, common, "Campaign")
        },
        f"{prefix}/campaigns/{{campaign_id}}/resume": {
            "post": _change("resumeCampaign", "Resume a campaign", campaign, common, "Campaign")
        },
        f"{prefix}/screens/{{screen_id}}/deactivate": {
            "post": _change(
                "deactivateScreenAdmin", "Deactivate a screen", "screen_id", common, "Screen"
            )
        },
        f"{prefix}/creatives/{{creative_id}}/approve": {
            "post": _change(
                "approveCreative", "Approve a creative", "creative_id", common, "Creative"
            )
        },
        f"{prefix}/creatives/{{creative_id}}/reject": {
            "post": _change(
                "rejectCreative", "Reject a creative", "creative_id", common, "Creative"
            )
        },
    }


def campaign_patch(common: dict[str, Any]) -> dict[str, Any]:
    operation = _change(
        "changeCampaign",
        "Change a campaign's status, dates or targeting",
        "campaign_id",
        common,
        "Campaign",
    )
    operation["requestBody"] = {
        "required": True,
        "content": json_content(ref("CampaignChange"), {"status": "paused"}),
    }
    return operation
