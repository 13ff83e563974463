"""Reports built from the rows `store.reports` sums: earnings and delivery as
`{rows, totals}`, rendered as JSON or CSV (docs/reports.md).

Money stays `Decimal` from the NUMERIC column to the JSON number: totals are added here in a
context wide enough that no sum is ever rounded, so they equal the sum of the rows exactly.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import ROUND_HALF_UP, Context, Decimal
from typing import Any
from zoneinfo import ZoneInfo

import asyncpg
import msgspec

from bidder.reports.params import ReportRange
from matching.money import CENT_PLACES, plain
from store.postgres import Conn
from store.reports import DeliveryFilter, campaign_spend, delivery_rows, earnings_rows

__all__ = [
    "EARNINGS_MONEY",
    "Report",
    "delivery_report",
    "earnings_report",
    "report_csv",
    "report_json",
]

# Sums of NUMERIC(20, 6) values over any number of rows stay far below 60 digits.
_EXACT = Context(prec=60)
_THOUSAND = Decimal(1000)
_json = msgspec.json.Encoder(decimal_format="number")

#: The money fields of an earnings row, named as in the accept result.
EARNINGS_MONEY = ("gross_price_cents", "commission_cents", "net_price_cents")
_EARNINGS_SUMS = ("plays", "audience", *EARNINGS_MONEY)
#: The delivery report's count columns, in their order (rows, CSV, the OpenAPI schema).
DELIVERY_COUNTS = (
    "offers",
    "accepted",
    "rejected",
    "expired",
    "lost",
    "impressions",
    "plays_billed",
    "plays_confirmed",
)


@dataclass
class Report:
    """A report's answer: what it covers, its rows (grouping columns first) and totals."""

    report: str
    range: ReportRange
    group_by: list[str]
    columns: list[str]
    rows: list[dict[str, Any]]
    totals: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        return {
            "report": self.report,
            "from": self.range.first.isoformat(),
            "to": self.range.last.isoformat(),
            "tz": self.range.tz,
            "group_by": self.group_by,
            "rows": self.rows,
            "totals": self.totals,
            **self.extra,
        }


def _key_value(value: Any, zone: ZoneInfo) -> Any:
    """A grouping column as answered: a day as YYYY-MM-DD, an hour as local ISO 8601 with its
    offset (the two 02:00 hours of a night the clocks go back stay apart)."""
    if isinstance(value, datetime):
        return value.astimezone(zone).isoformat()
    if isinstance(value, date):
        return value.isoformat()
    return value


def _money(value: Decimal) -> Decimal:
    return plain(value)


def _add(total: dict[str, Any], row: dict[str, Any], names: Iterable[str]) -> None:
    for name in names:
        value = row[name]
        total[name] = (
            _EXACT.add(total[name], value) if isinstance(value, Decimal) else total[name] + value
        )


async def earnings_report(
    conn: Conn, publisher_id: str, group_by: Sequence[str], rng: ReportRange, *, raw: bool = False
) -> Report:
    """A publisher's billed plays, audience, gross, commission and net in `rng` (from the
    rollups where they answer it; `raw`: from the records, the same answer)."""
    records = await earnings_rows(conn, publisher_id, group_by, rng.period, raw=raw)
    zone = ZoneInfo(rng.tz)
    keys = _key_columns(group_by)
    rows: list[dict[str, Any]] = []
    totals: dict[str, Any] = {"plays": 0, "audience": Decimal(0)} | dict.fromkeys(
        EARNINGS_MONEY, Decimal(0)
    )
    for record in records:
        row = {name: _key_value(record[name], zone) for name in keys}
        row |= {"plays": record["plays"], "audience": plain(record["audience"])}
        row |= {name: _money(record[name]) for name in EARNINGS_MONEY}
        _add(totals, row, _EARNINGS_SUMS)
        rows.append(row)
    totals = {name: plain(v) if isinstance(v, Decimal) else v for name, v in totals.items()}
    return Report("earnings", rng, list(group_by), [*keys, *_EARNINGS_SUMS], rows, totals)


def _key_columns(group_by: Sequence[str]) -> list[str]:
    names = {
        "day": ["day"],
        "hour": ["hour"],
        "screen": ["screen_id", "screen_name"],
        "campaign": ["campaign_id", "campaign_name"],
        "advertiser": ["advertiser_id", "advertiser_name"],
        "publisher": ["publisher_id", "publisher_name"],
    }
    return [column for group in group_by for column in names[group]]


def ecpm(spend_cents: Decimal, audience: Decimal) -> Decimal | None:
    """Cents per thousand audience, to the micro-cent (half up); None without audience."""
    if not audience:
        return None
    return plain(
        _EXACT.divide(_EXACT.multiply(spend_cents, _THOUSAND), audience).quantize(
            CENT_PLACES, rounding=ROUND_HALF_UP, context=_EXACT
        )
    )


def _empty_delivery() -> dict[str, Any]:
    return dict.fromkeys(DELIVERY_COUNTS, 0) | {
        "rejected_by_reason": {},
        "audience": Decimal(0),
        "spend_cents": Decimal(0),
    }


def _fold_part(
    rows: dict[tuple[Any, ...], dict[str, Any]],
    part: str,
    records: list[Any],
    keys: list[str],
) -> None:
    for record in records:
        key = tuple(record[name] for name in keys)
        row = rows.setdefault(key, _empty_delivery())
        if part == "reasons":
            reasons = row["rejected_by_reason"]
            reasons[record["reason"]] = reasons.get(record["reason"], 0) + record["rejected"]
        elif part == "billing":
            row["plays_billed"] = record["billed"]
            row["audience"] = record["audience"]
            row["spend_cents"] = record["spend_cents"]
        else:
            for name, value in record.items():
                if name in DELIVERY_COUNTS:
                    row[name] = value


def _finish_delivery(row: dict[str, Any]) -> dict[str, Any]:
    row["audience"] = plain(row["audience"])
    row["spend_cents"] = _money(row["spend_cents"])
    row["ecpm_cents"] = ecpm(row["spend_cents"], row["audience"])
    return row


async def delivery_report(
    conn: Conn,
    group_by: Sequence[str],
    rng: ReportRange,
    what: DeliveryFilter,
    now: datetime,
    *,
    raw: bool = False,
) -> Report:
    """Offers made and their outcomes, impressions, plays, audience, spend and eCPM in `rng`,
    and each campaign's budget remaining and pacing (`campaigns`); from the rollups where they
    answer it (`raw`: from the records, the same answer)."""
    parts = await delivery_rows(conn, group_by, rng.period, what, raw=raw)
    keys = _key_columns(group_by)
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for part, records in parts.items():
        _fold_part(merged, part, records, keys)
    zone = ZoneInfo(rng.tz)
    rows: list[dict[str, Any]] = []
    totals = _empty_delivery()
    for key in sorted(merged, key=_sort_key):
        row = merged[key]
        _add(totals, row, (*DELIVERY_COUNTS, "audience", "spend_cents"))
        for reason, count in row["rejected_by_reason"].items():
            by_reason = totals["rejected_by_reason"]
            by_reason[reason] = by_reason.get(reason, 0) + count
        values = {name: _key_value(value, zone) for name, value in zip(keys, key, strict=True)}
        rows.append(values | _finish_delivery(row))
    campaign_ids = what.campaign_ids or tuple(
        sorted({row["campaign_id"] for row in rows if "campaign_id" in row})
    )
    spend = await campaign_spend(conn, campaign_ids, now, raw=raw)
    pacing = [_pacing(record, now) for record in spend]
    columns = [*keys, *DELIVERY_COUNTS, "rejected_by_reason", "audience", "spend_cents"]
    return Report(
        "delivery",
        rng,
        list(group_by),
        [*columns, "ecpm_cents"],
        rows,
        _finish_delivery(totals),
        {"campaigns": pacing},
    )


def _sort_key(key: tuple[Any, ...]) -> tuple[tuple[bool, Any], ...]:
    return tuple((value is None, value) for value in key)


def _pacing(record: asyncpg.Record, now: datetime) -> dict[str, Any]:
    """A campaign's budget remaining (budget less billed spend) and its pacing: spend so far
    against an even spread of the budget over its flight (`start_at` to `end_at`)."""
    budget: Decimal = record["budget_cents"]
    spent: Decimal = record["spent_cents"]
    start, end = record["start_at"], record["end_at"]
    expected: Decimal | None = None
    if start is not None and end is not None:
        flight = (end - start).total_seconds()
        elapsed = min(max((now - start).total_seconds(), 0.0), flight)
        # Whole microseconds, so the share is exact.
        share = _EXACT.divide(Decimal(round(elapsed * 1e6)), Decimal(round(flight * 1e6)))
        expected = _EXACT.multiply(budget, share).quantize(
            CENT_PLACES, rounding=ROUND_HALF_UP, context=_EXACT
        )
    ratio = None
    if expected:
        ratio = _EXACT.divide(spent, expected).quantize(
            Decimal("0.0001"), rounding=ROUND_HALF_UP, context=_EXACT
        )
    return {
        "campaign_id": record["campaign_id"],
        "campaign_name": record["name"],
        "status": record["status"],
        "budget_cents": plain(budget),
        "spent_cents": plain(spent),
        "budget_remaining_cents": plain(_EXACT.subtract(budget, spent)),
        "expected_spend_cents": None if expected is None else plain(expected),
        "pacing": None if ratio is None else plain(ratio),
    }


def report_json(report: Report) -> bytes:
    return _json.encode(report.body())


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict):
        return _json.encode(value).decode()
    return str(value)


def report_csv(report: Report) -> str:
    """The rows as CSV with a header line (RFC 4180, CRLF line ends); the totals are not a
    row: a sheet sums the columns, and every line stays one group."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(report.columns)
    for row in report.rows:
        writer.writerow([_cell(row.get(name)) for name in report.columns])
    return out.getvalue()


def merge_reports(parts: Sequence[Report], rng: ReportRange) -> Report:
    """Reports of consecutive chunks of `rng` (rows by day or hour, so no row is in two) as
    one: their rows in order, their totals added exactly, the last one's campaigns."""
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    totals: dict[str, Any] = {}
    for part in parts:
        for name, value in part.totals.items():
            if name == "ecpm_cents":
                continue
            if isinstance(value, dict):
                merged = totals.setdefault(name, {})
                for reason, count in value.items():
                    merged[reason] = merged.get(reason, 0) + count
            elif isinstance(value, Decimal):
                totals[name] = plain(_EXACT.add(totals.get(name, Decimal(0)), value))
            else:
                totals[name] = totals.get(name, 0) + value
    if "ecpm_cents" in first.totals:
        totals["ecpm_cents"] = ecpm(totals["spend_cents"], totals["audience"])
    return Report(
        first.report,
        rng,
        first.group_by,
        first.columns,
        [row for part in parts for row in part.rows],
        totals,
        parts[-1].extra,
    )
