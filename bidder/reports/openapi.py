"""The reports' part of the OpenAPI documents: the earnings operation of the Core API's,
the delivery operation of the admin API's, and their schemas."""

from __future__ import annotations

from typing import Any

from bidder.openapi import error_response, json_content, ref
from bidder.reports.build import DELIVERY_COUNTS
from bidder.reports.params import DEFAULT_DAYS, MAX_DAYS
from store.reports import DELIVERY_GROUPS, EARNINGS_GROUPS

__all__ = ["delivery_operation", "earnings_operation", "report_schemas"]

_UUID = {"type": "string", "format": "uuid"}
_NAME = {"type": "string"}
_COUNT = {"type": "integer", "minimum": 0}
_AMOUNT = {"type": "number", "minimum": 0}
_KEYS: dict[str, Any] = {
    "day": {"type": "string", "format": "date", "description": "Local day, YYYY-MM-DD."},
    "hour": {
        "type": "string",
        "format": "date-time",
        "description": "The local hour's start with its UTC offset.",
    },
    "screen_id": _UUID,
    "screen_name": _NAME,
    "campaign_id": _UUID,
    "campaign_name": _NAME,
    "advertiser_id": _UUID,
    "advertiser_name": _NAME,
    "publisher_id": _UUID,
    "publisher_name": _NAME,
}
_EARNINGS = {
    "plays": _COUNT,
    "audience": _AMOUNT,
    "gross_price_cents": _AMOUNT,
    "commission_cents": _AMOUNT,
    "net_price_cents": _AMOUNT,
}
_DELIVERY = {
    **dict.fromkeys(DELIVERY_COUNTS, _COUNT),
    "rejected_by_reason": {"type": "object", "additionalProperties": _COUNT},
    "audience": _AMOUNT,
    "spend_cents": _AMOUNT,
    "ecpm_cents": {"type": ["number", "null"], "minimum": 0},
}
_PACING = {
    "type": "object",
    "required": ["campaign_id", "budget_cents", "spent_cents", "budget_remaining_cents"],
    "properties": {
        "campaign_id": _UUID,
        "campaign_name": _NAME,
        "status": _NAME,
        "budget_cents": _AMOUNT,
        "spent_cents": _AMOUNT,
        "budget_remaining_cents": {"type": "number"},
        "expected_spend_cents": {"type": ["number", "null"]},
        "pacing": {"type": ["number", "null"]},
    },
}


def _report(name: str, measures: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    row = {"type": "object", "properties": {**_KEYS, **measures}, "required": list(measures)}
    totals = {"type": "object", "properties": measures, "required": list(measures)}
    return {
        "type": "object",
        "required": ["report", "from", "to", "tz", "group_by", "rows", "totals", *extra],
        "properties": {
            "report": {"const": name},
            "from": {"type": "string", "format": "date"},
            "to": {"type": "string", "format": "date"},
            "tz": {"type": "string"},
            "group_by": {"type": "array", "items": {"type": "string"}},
            "rows": {"type": "array", "items": row},
            "totals": totals,
            **extra,
        },
    }


def report_schemas() -> dict[str, Any]:
    return {
        "EarningsReport": _report("earnings", _EARNINGS, {}),
        "DeliveryReport": _report(
            "delivery", _DELIVERY, {"campaigns": {"type": "array", "items": _PACING}}
        ),
    }


def _parameters(groups: tuple[str, ...]) -> list[dict[str, Any]]:
    query = "query"
    return [
        {
            "name": "group_by",
            "in": query,
            "description": f"One or more of {', '.join(groups)}, comma-separated (or the "
            "parameter repeated); `none`: one row. Default `day`.",
            "schema": {"type": "string"},
            "example": "day",
        },
        {
            "name": "from",
            "in": query,
            "description": f"First local day, included (default: {DEFAULT_DAYS} days up to "
            f"`to`). At most {MAX_DAYS} days from `from` to `to`.",
            "schema": {"type": "string", "format": "date"},
            "example": "2026-05-01",
        },
        {
            "name": "to",
            "in": query,
            "description": "Last local day, included (default: today in `tz`).",
            "schema": {"type": "string", "format": "date"},
            "example": "2026-05-07",
        },
        {
            "name": "tz",
            "in": query,
            "description": "IANA time zone the days (and hours) are read in; default UTC.",
            "schema": {"type": "string"},
            "example": "Europe/Berlin",
        },
        {
            "name": "format",
            "in": query,
            "description": "`csv` or `json`; without it, `Accept: text/csv` asks for CSV.",
            "schema": {"type": "string", "enum": ["csv", "json"]},
        },
    ]


def _answers(schema: str, example: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "description": "The report: `rows` (grouping columns first) and `totals`, which "
        "equal the sum of the rows exactly. As CSV: a header line and one line per row.",
        "content": {
            **json_content(ref(schema), example),
            "text/csv": {"schema": {"type": "string"}},
        },
    }


_EARNINGS_EXAMPLE = {
    "report": "earnings",
    "from": "2026-05-01",
    "to": "2026-05-01",
    "tz": "UTC",
    "group_by": ["day"],
    "rows": [
        {
            "day": "2026-05-01",
            "plays": 2,
            "audience": 20,
            "gross_price_cents": 5,
            "commission_cents": 0.75,
            "net_price_cents": 4.25,
        }
    ],
    "totals": {
        "plays": 2,
        "audience": 20,
        "gross_price_cents": 5,
        "commission_cents": 0.75,
        "net_price_cents": 4.25,
    },
}


def earnings_operation(unauthorized: dict[str, Any], unavailable: dict[str, Any]) -> dict[str, Any]:
    return {
        "operationId": "earningsReport",
        "summary": "The key's publisher's earnings",
        "description": "Billed plays, audience, gross, commission and net of the key's "
        "publisher, summed from its billing records by their billing time. Guide: "
        "/docs/reports.",
        "parameters": _parameters(EARNINGS_GROUPS),
        "responses": {
            "200": _answers("EarningsReport", _EARNINGS_EXAMPLE),
            "400": error_response("A parameter is not valid (the message names it)."),
            "401": unauthorized,
            "503": unavailable,
        },
    }


def delivery_operation(common: dict[str, Any]) -> dict[str, Any]:
    uuid_list = {"type": "string", "description": "A UUID (campaign_id: several, comma-separated)."}
    filters = [
        {"name": name, "in": "query", "description": text, "schema": uuid_list}
        for name, text in (
            ("campaign_id", "Only these campaigns (repeat or comma-separate; up to 500)."),
            ("advertiser_id", "Only this advertiser's campaigns."),
            ("publisher_id", "Only offers on this publisher's screens."),
        )
    ]
    return {
        "operationId": "deliveryReport",
        "summary": "Campaign delivery and pacing",
        "description": "Offers made and their outcomes (by creation time), impressions, plays "
        "billed and confirmed, audience, spend and eCPM, and each campaign's budget remaining "
        "and pacing (`campaigns`). Guide: /docs/reports.",
        "parameters": [*_parameters(DELIVERY_GROUPS), *filters],
        "responses": {
            "200": _answers("DeliveryReport", None),
            **common,
            "400": error_response("A parameter is not valid (the message names it)."),
        },
    }
