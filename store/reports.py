"""Reports over the records (docs/reports.md): publisher earnings and campaign delivery, summed
by Postgres from the stored NUMERIC values (asyncpg hands them over as `Decimal`), never
through a float.

A period is a half-open interval of instants `[start, end)`, and a day or an hour is the one
that holds the record's instant in the report's time zone, so each record lands in exactly one
bucket, whatever the zone's daylight-saving changes.

Two ways to the same answer. The rollups of migration 010 hold each publisher's and each
campaign's sums per 15-minute UTC bucket, kept by triggers in the records' own transactions;
a report reads them when every record of a bucket belongs to the same row of the report: its
groupings are time and campaign only (no screen, advertiser or publisher), its period starts
and ends on bucket boundaries, and, grouped by day or hour, the zone changes its offset only
on bucket boundaries within the period (`rollups_fit`). Otherwise it reads the record tables
through the indexes of migration 008 (the raw path), which `raw=True` forces.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

import asyncpg

from store.postgres import Conn

__all__ = [
    "DELIVERY_GROUPS",
    "DELIVERY_PARTS",
    "EARNINGS_GROUPS",
    "ROLLUP_TABLES",
    "DeliveryFilter",
    "Period",
    "campaign_spend",
    "delivery_rows",
    "earnings_rows",
    "rebuild_rollups",
    "rollups_fit",
]


@dataclass(frozen=True, slots=True)
class Period:
    """Instants `start <= t < end`, and the IANA zone the day and hour buckets are read in."""

    start: datetime
    end: datetime
    tz: str


@dataclass(frozen=True, slots=True)
class DeliveryFilter:
    """Which offers a delivery report covers; None: any."""

    campaign_ids: tuple[str, ...] | None = None
    advertiser_id: str | None = None
    publisher_id: str | None = None


# A grouping: (the SQL of its key, the column name it is answered as). `{t}` is the record's
# instant and `{z}` the zone's parameter; `o`, `s`, `c`, `a`, `p` the offer, screen, campaign,
# advertiser and publisher.
_KEYS: dict[str, tuple[tuple[str, str], ...]] = {
    "day": (("(({t}) AT TIME ZONE {z})::date", "day"),),
    # The instant the local hour began: the record's instant less its local minutes and
    # seconds, so the two 02:00 hours of a night the clocks go back stay two hours.
    "hour": (
        ("{t} - (({t} AT TIME ZONE {z}) - date_trunc('hour', {t} AT TIME ZONE {z}))", "hour"),
    ),
    "screen": (("o.screen_id::text", "screen_id"), ("s.name", "screen_name")),
    "campaign": (("o.campaign_id::text", "campaign_id"), ("c.name", "campaign_name")),
    "advertiser": (("c.advertiser_id::text", "advertiser_id"), ("a.name", "advertiser_name")),
    "publisher": (("o.publisher_id::text", "publisher_id"), ("p.name", "publisher_name")),
}
#: The groupings each report offers.
EARNINGS_GROUPS = ("day", "screen", "campaign", "advertiser")
DELIVERY_GROUPS = ("day", "hour", "campaign", "screen", "publisher")

_JOINS = """
JOIN screens s ON s.id = o.screen_id
JOIN campaigns c ON c.id = o.campaign_id
JOIN advertisers a ON a.id = c.advertiser_id
JOIN publishers p ON p.id = o.publisher_id"""


def _query(
    group_by: Sequence[str],
    time_column: str,
    zone: str,
    aggregates: str,
    source: str,
    extra: Sequence[tuple[str, str]] = (),
    *,
    key_sql: dict[str, tuple[tuple[str, str], ...]] = _KEYS,
    having: str = "",
) -> str:
    """SELECT the grouping keys and `aggregates` FROM `source` (joins and WHERE included),
    grouped and ordered by the keys; `extra` are more (expression, name) keys. `having`
    applies to grouped rows only (without keys the one row of totals is always answered)."""
    keys = [pair for group in group_by for pair in key_sql[group]] + list(extra)
    exprs = [f"{expr.format(t=time_column, z=zone)} AS {name}" for expr, name in keys]
    # By position: a key's name (`campaign_id`) may also be a column of the tables joined.
    positions = ", ".join(str(n) for n in range(1, len(keys) + 1))
    grouped = f" GROUP BY {positions}" + (f" HAVING {having}" if having else "")
    tail = f"{grouped} ORDER BY {positions}" if keys else ""
    # Built from this module's constants and the caller's checked group names only.
    return f"SELECT {', '.join([*exprs, aggregates])} {source}{tail}"


# The audience of a billed play: the one its offer was priced with (kept on the offer), else
# the screen's audience per play.
_AUDIENCE = "COALESCE(o.audience, s.audience_per_play)"


async def earnings_rows(
    conn: Conn, publisher_id: str, group_by: Sequence[str], period: Period, *, raw: bool = False
) -> list[asyncpg.Record]:
    """One row per group of a publisher's billing records billed within `period`: the
    grouping columns, then `plays` (billing records), `audience`, `gross_price_cents`,
    `commission_cents`, `net_price_cents`. From the rollups when they fit, else (or with
    `raw`) from the billing records."""
    if not raw and set(group_by) <= _EARNINGS_ROLLUP_GROUPS and rollups_fit(period, group_by):
        sql = _query(
            group_by,
            "r.bucket",
            "$4::text",
            """COALESCE(sum(r.plays), 0)::bigint AS plays,
COALESCE(sum(r.audience), 0) AS audience,
COALESCE(sum(r.gross_price_cents), 0) AS gross_price_cents,
COALESCE(sum(r.commission_cents), 0) AS commission_cents,
COALESCE(sum(r.net_price_cents), 0) AS net_price_cents""",
            """FROM earnings_rollup r
WHERE r.publisher_id = $1 AND r.bucket >= $2 AND r.bucket < $3 AND $4::text IS NOT NULL""",
            key_sql=_ROLLUP_KEYS,
            having="sum(r.plays) <> 0",
        )
        return await conn.fetch(sql, publisher_id, period.start, period.end, period.tz)
    sql = _query(
        group_by,
        "b.billed_at",
        "$4::text",
        f"""count(*) AS plays, COALESCE(sum({_AUDIENCE}), 0) AS audience,
COALESCE(sum(b.gross_price_cents), 0) AS gross_price_cents,
COALESCE(sum(b.commission_cents), 0) AS commission_cents,
COALESCE(sum(b.net_price_cents), 0) AS net_price_cents""",
        f"""FROM billing_records b JOIN offers o ON o.offer_id = b.offer_id {_JOINS}
WHERE b.publisher_id = $1 AND b.billed_at >= $2 AND b.billed_at < $3
  AND $4::text IS NOT NULL""",
    )
    return await conn.fetch(sql, publisher_id, period.start, period.end, period.tz)


# Delivery parts take $1 start, $2 end, $3 zone, then one parameter per filter given: a
# condition only for a filter set (an `$n IS NULL OR ...` would keep Postgres from the
# campaign index).
_FILTERS = (
    ("campaign_ids", "o.campaign_id = ANY(${n}::uuid[])"),
    ("advertiser_id", "c.advertiser_id = ${n}::uuid"),
    ("publisher_id", "o.publisher_id = ${n}::uuid"),
)


def _filter_sql(what: DeliveryFilter) -> tuple[str, list[object]]:
    conditions = ["$3::text IS NOT NULL"]
    args: list[object] = []
    for name, condition in _FILTERS:
        value = getattr(what, name)
        if value is not None:
            args.append(list(value) if isinstance(value, tuple) else value)
            conditions.append(condition.format(n=3 + len(args)))
    return "".join(f"\n  AND {c}" for c in conditions), args


# Each part: (its time column, its aggregates, FROM and joins, more conditions, extra keys).
_DELIVERY_PARTS: dict[str, tuple[str, str, str, str, tuple[tuple[str, str], ...]]] = {
    "offers": (
        "o.created_at",
        """count(*) AS offers,
count(*) FILTER (WHERE o.status IN ('accepted', 'billed')) AS accepted,
count(*) FILTER (WHERE o.status = 'rejected') AS rejected,
count(*) FILTER (WHERE o.status = 'expired') AS expired,
count(*) FILTER (WHERE o.status = 'lost') AS lost""",
        "FROM offers o",
        "",
        (),
    ),
    "reasons": (
        "o.created_at",
        "count(*) AS rejected",
        "FROM offers o",
        " AND o.status = 'rejected'",
        (("COALESCE(o.rejection_reason, '')", "reason"),),
    ),
    "billing": (
        "b.billed_at",
        f"""count(*) AS billed, COALESCE(sum({_AUDIENCE}), 0) AS audience,
COALESCE(sum(b.gross_price_cents), 0) AS spend_cents""",
        "FROM billing_records b JOIN offers o ON o.offer_id = b.offer_id",
        "",
        (),
    ),
    "playouts": (
        "pl.confirmed_at",
        "count(*) AS plays_confirmed",
        "FROM playouts pl JOIN deals d ON d.deal_id = pl.deal_id "
        "JOIN offers o ON o.offer_id = d.offer_id",
        "",
        (),
    ),
    "impressions": (
        "te.received_at",
        "count(DISTINCT te.offer_id) AS impressions",
        "FROM tracking_events te JOIN offers o ON o.offer_id = te.offer_id",
        " AND te.event = 'impression'",
        (),
    ),
}
#: The parts of a delivery report, in order.
DELIVERY_PARTS = tuple(_DELIVERY_PARTS)


async def delivery_rows(
    conn: Conn,
    group_by: Sequence[str],
    period: Period,
    what: DeliveryFilter,
    *,
    raw: bool = False,
) -> dict[str, list[Any]]:
    """The parts of a delivery report, each grouped by the same keys: `offers` (made,
    accepted, rejected, expired, lost; by creation time), `reasons` (rejections by reason),
    `billing` (billed plays, audience, spend; by billing time), `playouts` (plays confirmed;
    by confirmation time) and `impressions` (offers with an impression event; by receipt).
    From the rollups when they fit, else (or with `raw`) from the records."""
    if (
        not raw
        and what.publisher_id is None
        and set(group_by) <= _DELIVERY_ROLLUP_GROUPS
        and rollups_fit(period, group_by)
    ):
        return await _delivery_from_rollups(conn, group_by, period, what)
    filter_sql, filter_args = _filter_sql(what)
    args = (period.start, period.end, period.tz, *filter_args)
    parts: dict[str, list[Any]] = {}
    for name in _DELIVERY_PARTS:
        parts[name] = await _raw_part(conn, name, group_by, filter_sql, args)
    return parts


async def _raw_part(
    conn: Conn, name: str, group_by: Sequence[str], filter_sql: str, args: Sequence[object]
) -> list[asyncpg.Record]:
    column, aggregates, source, where, extra = _DELIVERY_PARTS[name]
    sql = _query(
        group_by,
        column,
        "$3::text",
        aggregates,
        f"{source} {_JOINS}\nWHERE {column} >= $1 AND {column} < $2{where}{filter_sql}",
        extra,
    )
    return await conn.fetch(sql, *args)


# -- the rollups (migration 010) -------------------------------------------------------------

#: The rollups' bucket: 15 minutes of UTC, counted from 2000-01-01T00:00Z (`report_bucket`).
BUCKET_SECONDS = 900
_EARNINGS_ROLLUP_GROUPS = frozenset({"day"})
_DELIVERY_ROLLUP_GROUPS = frozenset({"day", "hour", "campaign"})
# The keys a rollup row answers: `{t}` is its bucket, `r` the rollup, `c` the campaign.
_ROLLUP_KEYS: dict[str, tuple[tuple[str, str], ...]] = {
    "day": _KEYS["day"],
    "hour": _KEYS["hour"],
    "campaign": (("r.campaign_id::text", "campaign_id"), ("c.name", "campaign_name")),
}
# Delivery filters over a campaign rollup (`r`) joined to its campaign (`c`).
_ROLLUP_FILTERS = (
    ("campaign_ids", "r.campaign_id = ANY(${n}::uuid[])"),
    ("advertiser_id", "c.advertiser_id = ${n}::uuid"),
)
# Each part from its rollup: (table, aggregates, HAVING, extra keys). Its rows are the groups
# the part's records fall into: the HAVING leaves out groups the records never reached.
_ROLLUP_PARTS: dict[str, tuple[str, str, str, tuple[tuple[str, str], ...]]] = {
    "offers": (
        "campaign_offers_rollup",
        """COALESCE(sum(r.offers), 0)::bigint AS offers,
COALESCE(sum(r.accepted), 0)::bigint AS accepted,
COALESCE(sum(r.rejected), 0)::bigint AS rejected,
COALESCE(sum(r.expired), 0)::bigint AS expired,
COALESCE(sum(r.lost), 0)::bigint AS lost""",
        "sum(r.offers) <> 0",
        (),
    ),
    "reasons": (
        "campaign_reasons_rollup",
        "COALESCE(sum(r.rejected), 0)::bigint AS rejected",
        "sum(r.rejected) <> 0",
        (("r.reason", "reason"),),
    ),
    "billing": (
        "campaign_billing_rollup",
        """COALESCE(sum(r.billed), 0)::bigint AS billed,
COALESCE(sum(r.audience), 0) AS audience,
COALESCE(sum(r.spend_cents), 0) AS spend_cents""",
        "sum(r.billed) <> 0",
        (),
    ),
    "playouts": (
        "campaign_playouts_rollup",
        "COALESCE(sum(r.plays_confirmed), 0)::bigint AS plays_confirmed",
        "sum(r.plays_confirmed) <> 0",
        (),
    ),
    "impressions": (
        "campaign_impressions_rollup",
        """COALESCE(sum(r.impressions), 0)::bigint AS impressions,
COALESCE(sum(r.repeats), 0)::bigint AS repeats""",
        "sum(r.impressions) + sum(r.repeats) <> 0",
        (),
    ),
}


async def _delivery_from_rollups(
    conn: Conn, group_by: Sequence[str], period: Period, what: DeliveryFilter
) -> dict[str, list[Any]]:
    conditions = ["$3::text IS NOT NULL"]
    args: list[object] = [period.start, period.end, period.tz]
    for name, condition in _ROLLUP_FILTERS:
        value = getattr(what, name)
        if value is not None:
            args.append(list(value) if isinstance(value, tuple) else value)
            conditions.append(condition.format(n=len(args)))
    where = "".join(f"\n  AND {c}" for c in conditions)
    parts: dict[str, list[Any]] = {}
    for name, (table, aggregates, having, extra) in _ROLLUP_PARTS.items():
        sql = _query(
            group_by,
            "r.bucket",
            "$3::text",
            aggregates,
            f"FROM {table} r JOIN campaigns c ON c.id = r.campaign_id\n"
            f"WHERE r.bucket >= $1 AND r.bucket < $2{where}",
            extra,
            key_sql=_ROLLUP_KEYS,
            having=having,
        )
        parts[name] = [dict(record) for record in await conn.fetch(sql, *args)]
    if any(row["repeats"] for row in parts["impressions"]):
        # An offer with more than one impression event in the period: counted once, which
        # the events alone tell.
        filter_sql, filter_args = _filter_sql(what)
        raw_args = (period.start, period.end, period.tz, *filter_args)
        parts["impressions"] = await _raw_part(conn, "impressions", group_by, filter_sql, raw_args)
    else:
        for row in parts["impressions"]:
            del row["repeats"]
    return parts


def rollups_fit(period: Period, group_by: Sequence[str]) -> bool:
    """Whether every record of a rollup bucket in `period` belongs to one row of a report
    grouped by `group_by` (day, hour, campaign): the period starts and ends on bucket
    boundaries and, grouped by day or hour, the zone's offset is a whole number of buckets and
    changes only on bucket boundaries within it. Every zone in use passes, bar the few that
    changed their clocks at one minute past midnight (America/St_Johns before 2011)."""
    start, end = period.start.timestamp(), period.end.timestamp()
    if start % BUCKET_SECONDS or end % BUCKET_SECONDS:
        return False
    if "day" not in group_by and "hour" not in group_by:
        return True
    return _zone_fits(period.tz, int(start), int(end))


# Offsets are read this far apart, then each change is narrowed down to its second: no zone
# changes its offset twice within 6 hours.
_SCAN_SECONDS = 6 * 3600


@lru_cache(maxsize=4096)
def _zone_fits(tz: str, start: int, end: int) -> bool:
    """Every UTC offset of `tz` from a day before `start` to a day after `end` is a multiple
    of the bucket, and every change of it falls on a bucket boundary."""
    zone = ZoneInfo(tz)

    def offset(second: int) -> float:
        moment = datetime.fromtimestamp(second, UTC).astimezone(zone)
        delta = moment.utcoffset()
        return 0.0 if delta is None else delta.total_seconds()

    at, stop = start - 86_400, end + 86_400
    before = offset(at)
    if before % BUCKET_SECONDS:
        return False
    while at < stop:
        step = min(at + _SCAN_SECONDS, stop)
        after = offset(step)
        if after != before:
            low, high = at, step  # offset(low) == before, offset(high) == after
            while high - low > 1:
                middle = (low + high) // 2
                low, high = (middle, high) if offset(middle) == before else (low, middle)
            if high % BUCKET_SECONDS or after % BUCKET_SECONDS:
                return False
            before = after
        at = step
    return True


#: The tables migration 010's triggers keep, in the order they are rebuilt.
ROLLUP_TABLES = (
    "earnings_rollup",
    "campaign_billing_rollup",
    "campaign_offers_rollup",
    "campaign_reasons_rollup",
    "campaign_playouts_rollup",
    "impression_offers",
    "campaign_impressions_rollup",
)
_REBUILD = (
    f"TRUNCATE {', '.join(ROLLUP_TABLES)}",
    "INSERT INTO earnings_rollup SELECT * FROM earnings_rollup_rows()",
    "INSERT INTO campaign_billing_rollup SELECT * FROM campaign_billing_rollup_rows()",
    "INSERT INTO campaign_offers_rollup SELECT * FROM campaign_offers_rollup_rows()",
    "INSERT INTO campaign_reasons_rollup SELECT * FROM campaign_reasons_rollup_rows()",
    "INSERT INTO campaign_playouts_rollup SELECT * FROM campaign_playouts_rollup_rows()",
    "INSERT INTO impression_offers SELECT * FROM impression_offers_rows()",
    "INSERT INTO campaign_impressions_rollup SELECT * FROM campaign_impressions_rollup_rows()",
)


async def rebuild_rollups(conn: Conn) -> None:
    """Compute the rollups afresh from the records, as migration 010 fills them: after a bulk
    load that bypassed the triggers (`session_replication_role = replica`). The record tables
    are locked against writers meanwhile, so nothing is counted twice or missed."""
    async with conn.transaction():
        await conn.execute(
            "LOCK TABLE offers, billing_records, playouts, tracking_events "
            "IN SHARE ROW EXCLUSIVE MODE"
        )
        for statement in _REBUILD:
            await conn.execute(statement)


_SPEND_SQL = """
SELECT c.id::text AS campaign_id, c.name, c.status, c.budget_cents, c.start_at, c.end_at,
       COALESCE((SELECT sum(b.gross_price_cents) FROM billing_records b
                  WHERE b.campaign_id = c.id AND b.billed_at < $2), 0) AS spent_cents
FROM campaigns c
WHERE c.id = ANY($1::uuid[])
ORDER BY c.id
"""
# The same from the rollup: whole buckets before `until`'s bucket ($3), and the billing
# records of that bucket up to `until`.
_SPEND_ROLLUP_SQL = """
SELECT c.id::text AS campaign_id, c.name, c.status, c.budget_cents, c.start_at, c.end_at,
       COALESCE((SELECT sum(r.spend_cents) FROM campaign_billing_rollup r
                  WHERE r.campaign_id = c.id AND r.bucket < $3), 0)
     + COALESCE((SELECT sum(b.gross_price_cents) FROM billing_records b
                  WHERE b.campaign_id = c.id AND b.billed_at >= $3 AND b.billed_at < $2), 0)
       AS spent_cents
FROM campaigns c
WHERE c.id = ANY($1::uuid[])
ORDER BY c.id
"""


async def campaign_spend(
    conn: Conn, campaign_ids: Sequence[str], until: datetime, *, raw: bool = False
) -> list[asyncpg.Record]:
    """Each campaign's budget, flight and what its billing records spent before `until`."""
    if raw:
        return await conn.fetch(_SPEND_SQL, list(campaign_ids), until)
    second = until.timestamp()
    bucket = datetime.fromtimestamp(second - second % BUCKET_SECONDS, UTC)
    return await conn.fetch(_SPEND_ROLLUP_SQL, list(campaign_ids), until, bucket)
