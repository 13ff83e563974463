"""Advertiser delivery for operators (`GET /admin/v1/reports/delivery`, docs/reports.md):
offers and their outcomes, impressions, plays, audience, spend and eCPM by day, hour,
campaign, screen or publisher, with each campaign's budget remaining and pacing."""

from __future__ import annotations

from typing import Any

import asyncpg
from litestar import Request, Response, Router, get

from bidder.admin._common import ADMIN_PREFIX, path_uuid, require_admin
from bidder.errors import BadRequest
from bidder.http.web import postgres
from bidder.reports import delivery_report, read_group_by, read_range, report_response, wants_csv
from bidder.runtime import utcnow
from store.reports import DELIVERY_GROUPS, DeliveryFilter

__all__ = ["DELIVERY_PATH", "MAX_CAMPAIGNS", "routes"]

DELIVERY_PATH = "/reports/delivery"
#: The most campaigns one delivery report names in `campaign_id`.
MAX_CAMPAIGNS = 500


def read_filter(
    campaign_ids: list[str], advertiser_id: str | None, publisher_id: str | None
) -> DeliveryFilter:
    """`campaign_id` (repeated or comma-separated), `advertiser_id`, `publisher_id`: UUIDs."""
    ids = [part for value in campaign_ids for part in value.split(",") if part.strip()]
    if len(ids) > MAX_CAMPAIGNS:
        raise BadRequest(f"campaign_id names at most {MAX_CAMPAIGNS} campaigns")
    return DeliveryFilter(
        campaign_ids=tuple(dict.fromkeys(path_uuid(i.strip(), "campaign_id") for i in ids)) or None,
        advertiser_id=None if advertiser_id is None else path_uuid(advertiser_id, "advertiser_id"),
        publisher_id=None if publisher_id is None else path_uuid(publisher_id, "publisher_id"),
    )


@get(DELIVERY_PATH)
async def campaign_delivery(request: Request[Any, Any, Any]) -> Response[bytes]:
    query = request.query_params
    now = utcnow()
    group_by = read_group_by(query.getall("group_by", []), DELIVERY_GROUPS, "day")
    rng = read_range(query.get("from"), query.get("to"), query.get("tz"), now)
    what = read_filter(
        query.getall("campaign_id", []), query.get("advertiser_id"), query.get("publisher_id")
    )
    csv = wants_csv(request)
    async with postgres(request) as conn:
        try:
            report = await delivery_report(conn, group_by, rng, what, now)
        except asyncpg.InvalidParameterValueError:  # a zone Postgres' own database lacks
            raise BadRequest(f"tz {rng.tz!r} is not a time zone the database knows") from None
    return report_response(report, csv)


routes: list[Any] = [
    Router(path=ADMIN_PREFIX, route_handlers=[campaign_delivery], guards=[require_admin])
]
