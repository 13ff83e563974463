"""A publisher's earnings report (`GET /functions/v1/api/reports/earnings`, docs/reports.md):
its own billed plays by day, screen, campaign or advertiser, as JSON or CSV."""

from __future__ import annotations

from typing import Any

import asyncpg
from litestar import Request, Response, get

from bidder.core._common import CORE_PREFIX, authorize
from bidder.errors import BadRequest
from bidder.http.web import postgres
from bidder.reports import earnings_report, read_group_by, read_range, report_response, wants_csv
from store.reports import EARNINGS_GROUPS

__all__ = ["EARNINGS_PATH", "routes"]

EARNINGS_PATH = f"{CORE_PREFIX}/reports/earnings"


@get(EARNINGS_PATH)
async def publisher_earnings(request: Request[Any, Any, Any]) -> Response[bytes]:
    caller = authorize(request)
    query = request.query_params
    group_by = read_group_by(query.getall("group_by", []), EARNINGS_GROUPS, "day")
    rng = read_range(query.get("from"), query.get("to"), query.get("tz"), caller.now)
    csv = wants_csv(request)
    async with postgres(request) as conn:
        try:
            report = await earnings_report(conn, caller.publisher_id, group_by, rng)
        except asyncpg.InvalidParameterValueError:  # a zone Postgres' own database lacks
            raise BadRequest(f"tz {rng.tz!r} is not a time zone the database knows") from None
    return report_response(report, csv)


routes: list[Any] = [publisher_earnings]
