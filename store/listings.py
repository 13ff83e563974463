"""Lists of records and inventory for operators (docs/reports.md, "Lists"): one page at a time
in a stable order, filtered by time, status, publisher, campaign and screen.

Pages are keyset-paginated: each list is ordered by its time column then its id (or its id
alone), and the cursor is the last item's key, so a page never repeats or skips an item that
was already there, however many are added meanwhile.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from store.postgres import Conn

__all__ = ["LISTS", "ListFilter", "Listing", "fetch_page"]


@dataclass(frozen=True, slots=True)
class Listing:
    """One list: its FROM clause, its columns, its order and which filters it takes."""

    source: str
    columns: str
    id_column: str
    #: The time column pages are ordered by (None: by id alone) and `from`/`to` filter on.
    time_column: str | None
    #: Filter name -> the SQL expression it compares (`status`, `publisher_id`, ...).
    filters: dict[str, str]
    #: The time column `from`/`to` filter on when pages are not ordered by time.
    filter_time: str | None = None


@dataclass(frozen=True, slots=True)
class ListFilter:
    start: datetime | None = None
    end: datetime | None = None
    values: tuple[tuple[str, str], ...] = ()


_OFFER_COLUMNS = """o.offer_id::text, o.channel, o.status, o.publisher_id::text,
o.screen_id::text, o.campaign_id::text, o.creative_id::text, o.bid_price_cents, o.created_at,
o.expires_at, o.resolved_at, o.rejection_reason"""
_SCOPE = {
    "publisher_id": "o.publisher_id",
    "campaign_id": "o.campaign_id",
    "screen_id": "o.screen_id",
}

#: Every list by its path name.
LISTS: dict[str, Listing] = {
    "offers": Listing(
        "offers o",
        _OFFER_COLUMNS,
        "o.offer_id",
        "o.created_at",
        {**_SCOPE, "status": "o.status"},
    ),
    "deals": Listing(
        "deals d JOIN offers o ON o.offer_id = d.offer_id",
        """d.deal_id::text, d.offer_id::text, d.publisher_id::text, d.campaign_id::text,
o.screen_id::text, d.gross_price_cents, d.commission_cents, d.net_price_cents,
d.accepted_at""",
        "d.deal_id",
        "d.accepted_at",
        dict(_SCOPE),
    ),
    "billing-records": Listing(
        "billing_records b JOIN offers o ON o.offer_id = b.offer_id",
        """b.billing_id::text, b.offer_id::text, b.deal_id::text, b.source,
b.publisher_id::text, b.advertiser_id::text, b.campaign_id::text, o.screen_id::text,
b.billing_code, b.commission_rate, b.gross_price_cents, b.commission_cents,
b.net_price_cents, b.billed_at""",
        "b.billing_id",
        "b.billed_at",
        {**_SCOPE, "status": "b.source"},
    ),
    "playouts": Listing(
        "playouts p JOIN deals d ON d.deal_id = p.deal_id JOIN offers o ON o.offer_id = d.offer_id",
        """p.playout_id::text, p.deal_id::text, o.publisher_id::text, o.campaign_id::text,
o.screen_id::text, p.played_at, p.confirmed_at, p.duration_seconds, p.completion_rate,
p.player_version, p.screen_resolution""",
        "p.playout_id",
        "p.confirmed_at",
        dict(_SCOPE),
    ),
    # Never the key's hash: its id, prefix and state only.
    "api-keys": Listing(
        "api_keys k",
        """k.key_id::text, k.publisher_id::text, k.key_prefix, k.environment, k.created_at,
k.expires_at, k.revoked_at,
CASE WHEN k.revoked_at IS NOT NULL THEN 'revoked'
     WHEN k.expires_at IS NOT NULL AND k.expires_at <= now() THEN 'expired'
     ELSE 'active' END AS status""",
        "k.key_id",
        "k.created_at",
        {
            "publisher_id": "k.publisher_id",
            "status": """CASE WHEN k.revoked_at IS NOT NULL THEN 'revoked'
     WHEN k.expires_at IS NOT NULL AND k.expires_at <= now() THEN 'expired'
     ELSE 'active' END""",
        },
    ),
    "screens": Listing(
        "screens s",
        """s.id::text, s.publisher_id::text, s.external_id, s.name, s.type, s.width, s.height,
s.audience_per_play, s.venue_type, s.timezone, s.lat, s.lon, s.active, s.updated_at,
CASE WHEN s.active THEN 'active' ELSE 'inactive' END AS status""",
        "s.id",
        None,
        {
            "publisher_id": "s.publisher_id",
            "screen_id": "s.id",
            "status": "CASE WHEN s.active THEN 'active' ELSE 'inactive' END",
        },
        filter_time="s.updated_at",
    ),
    "campaigns": Listing(
        "campaigns c",
        """c.id::text, c.advertiser_id::text, c.name, c.status, c.cpm_cents, c.budget_cents,
c.daily_budget_cents, c.start_at, c.end_at, c.max_plays_per_screen_per_hour,
c.max_price_per_play_cents, c.targeting, c.updated_at""",
        "c.id",
        None,
        {"campaign_id": "c.id", "status": "c.status", "advertiser_id": "c.advertiser_id"},
        filter_time="c.updated_at",
    ),
}


def _conditions(
    listing: Listing, what: ListFilter, after: tuple[datetime | None, str] | None
) -> tuple[list[str], list[Any]]:
    conditions: list[str] = []
    args: list[Any] = []

    def arg(value: Any) -> str:
        args.append(value)
        return f"${len(args)}"

    time_column = listing.time_column or listing.filter_time
    if what.start is not None and time_column is not None:
        conditions.append(f"{time_column} >= {arg(what.start)}")
    if what.end is not None and time_column is not None:
        conditions.append(f"{time_column} < {arg(what.end)}")
    for name, value in what.values:
        expression = listing.filters[name]
        cast = "::uuid" if name.endswith("_id") else "::text"
        conditions.append(f"{expression} = {arg(value)}{cast}")
    if after is not None:
        moment, last_id = after
        if listing.time_column is not None and moment is not None:
            conditions.append(
                f"({listing.time_column}, {listing.id_column}) > "
                f"({arg(moment)}::timestamptz, {arg(last_id)}::uuid)"
            )
        else:
            conditions.append(f"{listing.id_column} > {arg(last_id)}::uuid")
    return conditions, args


async def fetch_page(
    conn: Conn,
    name: str,
    what: ListFilter,
    after: tuple[datetime | None, str] | None,
    limit: int,
) -> list[asyncpg.Record]:
    """Up to `limit` items of list `name` after the key `after` (None: from the start)."""
    listing = LISTS[name]
    conditions, args = _conditions(listing, what, after)
    where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
    order: Sequence[str] = (
        (listing.time_column, listing.id_column) if listing.time_column else (listing.id_column,)
    )
    args.append(limit)
    # Built from this module's constants and checked filter names only.
    sql = (
        f"SELECT {listing.columns} FROM {listing.source} {where} "  # noqa: S608
        f"ORDER BY {', '.join(order)} LIMIT ${len(args)}"
    )
    return await conn.fetch(sql, *args)
