"""Reports over the records (docs/reports.md): publisher earnings and campaign delivery, summed
by Postgres from the stored NUMERIC values (asyncpg hands them over as `Decimal`), never
through a float.

Every query reads the record tables directly through the indexes of migration 006: a period
is a half-open interval of instants `[start, end)`, and a day or an hour is the one that holds
the record's instant in the report's time zone, so each record lands in exactly one bucket,
whatever the zone's daylight-saving changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from store.postgres import Conn

__all__ = [
    "DELIVERY_GROUPS",
    "DELIVERY_PARTS",
    "EARNINGS_GROUPS",
    "DeliveryFilter",
    "Period",
    "campaign_spend",
    "delivery_rows",
    "earnings_rows",
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
) -> str:
    """SELECT the grouping keys and `aggregates` FROM `source` (joins and WHERE included),
    grouped and ordered by the keys; `extra` are more (expression, name) keys."""
    keys = [pair for group in group_by for pair in _KEYS[group]] + list(extra)
    exprs = [f"{expr.format(t=time_column, z=zone)} AS {name}" for expr, name in keys]
    # By position: a key's name (`campaign_id`) may also be a column of the tables joined.
    positions = ", ".join(str(n) for n in range(1, len(keys) + 1))
    tail = f" GROUP BY {positions} ORDER BY {positions}" if keys else ""
    # Built from this module's constants and the caller's checked group names only.
    return f"SELECT {', '.join([*exprs, aggregates])} {source}{tail}"


# The audience of a billed play: the one its offer was priced with (kept on the offer), else
# the screen's audience per play.
_AUDIENCE = "COALESCE(o.audience, s.audience_per_play)"


async def earnings_rows(
    conn: Conn, publisher_id: str, group_by: Sequence[str], period: Period
) -> list[asyncpg.Record]:
    """One row per group of a publisher's billing records billed within `period`: the
    grouping columns, then `plays` (billing records), `audience`, `gross_price_cents`,
    `commission_cents`, `net_price_cents`."""
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
    conn: Conn, group_by: Sequence[str], period: Period, what: DeliveryFilter
) -> dict[str, list[asyncpg.Record]]:
    """The parts of a delivery report, each grouped by the same keys: `offers` (made,
    accepted, rejected, expired, lost; by creation time), `reasons` (rejections by reason),
    `billing` (billed plays, audience, spend; by billing time), `playouts` (plays confirmed;
    by confirmation time) and `impressions` (offers with an impression event; by receipt)."""
    filter_sql, filter_args = _filter_sql(what)
    args = (period.start, period.end, period.tz, *filter_args)
    parts: dict[str, list[asyncpg.Record]] = {}
    for name, (column, aggregates, source, where, extra) in _DELIVERY_PARTS.items():
        sql = _query(
            group_by,
            column,
            "$3::text",
            aggregates,
            f"{source} {_JOINS}\nWHERE {column} >= $1 AND {column} < $2{where}{filter_sql}",
            extra,
        )
        parts[name] = await conn.fetch(sql, *args)
    return parts


_SPEND_SQL = """
SELECT c.id::text AS campaign_id, c.name, c.status, c.budget_cents, c.start_at, c.end_at,
       COALESCE((SELECT sum(b.gross_price_cents) FROM billing_records b
                  WHERE b.campaign_id = c.id AND b.billed_at < $2), 0) AS spent_cents
FROM campaigns c
WHERE c.id = ANY($1::uuid[])
ORDER BY c.id
"""


async def campaign_spend(
    conn: Conn, campaign_ids: Sequence[str], until: datetime
) -> list[asyncpg.Record]:
    """Each campaign's budget, flight and what its billing records spent before `until`."""
    return await conn.fetch(_SPEND_SQL, list(campaign_ids), until)
