"""Reports over the records (docs/reports.md): their parameters, as the API and the command
line read them, and the reports built and rendered as JSON or CSV."""

from bidder.reports.answer import report_response, wants_csv
from bidder.reports.build import (
    Report,
    delivery_report,
    earnings_report,
    merge_reports,
    report_csv,
    report_json,
)
from bidder.reports.params import MAX_DAYS, ReportRange, read_group_by, read_range

__all__ = [
    "MAX_DAYS",
    "Report",
    "ReportRange",
    "delivery_report",
    "earnings_report",
    "merge_reports",
    "read_group_by",
    "read_range",
    "report_csv",
    "report_json",
    "report_response",
    "wants_csv",
]
