"""A report's parameters as the API and the command line both read them: `group_by`, `from`,
`to` and `tz` (docs/reports.md). Bad values raise BadRequest with a message naming the field."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from bidder.errors import BadRequest
from store.reports import Period

__all__ = [
    "DEFAULT_DAYS",
    "MAX_DAYS",
    "ReportRange",
    "read_group_by",
    "read_range",
    "read_zone",
]

#: The longest period one report covers, in days (a year, a leap year's included).
MAX_DAYS = 366
#: The period a report covers when `from` is not given: the 30 days up to `to`.
DEFAULT_DAYS = 30


@dataclass(frozen=True, slots=True)
class ReportRange:
    """Local dates `first` to `last`, both included, in the IANA zone `tz`."""

    first: date
    last: date
    tz: str

    @property
    def period(self) -> Period:
        """The instants the dates cover: from the first day's local midnight up to (not
        including) the local midnight after the last day. A day of a daylight-saving change
        is 23 or 25 hours long."""
        zone = ZoneInfo(self.tz)
        start = datetime.combine(self.first, time(0), tzinfo=zone)
        end = datetime.combine(self.last + timedelta(days=1), time(0), tzinfo=zone)
        return Period(start, end, self.tz)


def read_group_by(values: Sequence[str], allowed: Sequence[str], default: str) -> list[str]:
    """`group_by` given once or repeated, each a comma-separated list of `allowed` names, in
    the order given (a repeated name counts once); `[default]` when absent. `none` alone:
    no grouping (one row of totals)."""
    names: list[str] = []
    for value in values:
        for raw in value.split(","):
            name = raw.strip().lower()
            if name == "none" and len(values) == 1 and value.strip().lower() == "none":
                return []
            if name not in allowed:
                raise BadRequest(
                    f"group_by must be one or more of {', '.join(allowed)} "
                    f"(comma-separated), got {raw.strip()[:40]!r}"
                )
            if name not in names:
                names.append(name)
    return names or [default]


def _date(value: str, name: str) -> date:
    text = value.strip()
    try:
        if len(text) != len("YYYY-MM-DD"):
            raise ValueError(text)
        return date.fromisoformat(text)
    except ValueError:
        raise BadRequest(f"{name} must be a date as YYYY-MM-DD, got {text[:40]!r}") from None


def read_zone(value: str | None) -> str:
    """An IANA time zone name (`Europe/Berlin`), default UTC."""
    if value is None or not value.strip():
        return "UTC"
    name = value.strip()
    try:
        if len(name) > 64 or name.startswith(("/", ".")) or ".." in name:
            raise ValueError(name)
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise BadRequest(
            f"tz must be an IANA time zone name such as Europe/Berlin, got {name[:40]!r}"
        ) from None
    return name


def read_range(first: str | None, last: str | None, tz: str | None, now: datetime) -> ReportRange:
    """`from` and `to` (dates, both included; `to` defaults to today in `tz`, `from` to
    `DEFAULT_DAYS` days up to `to`), at most `MAX_DAYS` days apart."""
    zone = read_zone(tz)
    last_day = now.astimezone(ZoneInfo(zone)).date() if last is None else _date(last, "to")
    first_day = (
        last_day - timedelta(days=DEFAULT_DAYS - 1) if first is None else _date(first, "from")
    )
    if first_day > last_day:
        raise BadRequest(f"from ({first_day}) must not be after to ({last_day})")
    if (last_day - first_day).days + 1 > MAX_DAYS:
        raise BadRequest(f"a report covers at most {MAX_DAYS} days: from and to are further apart")
    if first_day.year < 2000 or last_day.year > 9000:
        raise BadRequest("from and to must be dates between the years 2000 and 9000")
    return ReportRange(first_day, last_day, zone)
