"""A report as an HTTP answer: JSON by default, CSV when the client asks for it."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response

from bidder.errors import BadRequest
from bidder.reports.build import Report, report_csv, report_json

__all__ = ["report_response", "wants_csv"]


def wants_csv(request: Request[Any, Any, Any]) -> bool:
    """`Accept: text/csv` (or `format=csv`, for a link in a browser); `format=json` or any
    other Accept: JSON."""
    chosen: str | None = request.query_params.get("format")
    if chosen is not None:
        name = chosen.strip().lower()
        if name not in ("csv", "json"):
            raise BadRequest(f"format must be csv or json, got {chosen[:20]!r}")
        return name == "csv"
    accept: str = request.headers.get("accept") or ""
    return "text/csv" in accept.lower()


def report_response(report: Report, csv: bool) -> Response[bytes]:
    if csv:
        name = f"{report.report}-{report.range.first}-{report.range.last}.csv"
        return Response(
            report_csv(report).encode(),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )
    return Response(report_json(report), media_type="application/json")
