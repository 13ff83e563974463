"""The inventory in Postgres: bulk idempotent import, export, and loading for the snapshot.

Import validates the whole document first (every problem listed by item and field), then
upserts everything in one transaction through COPY into temporary tables, so 100,000 screens
take seconds and a refused document changes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal, NamedTuple

import asyncpg
import msgspec

from matching.inventory import (
    Advertiser,
    BillingCode,
    Campaign,
    Creative,
    Daypart,
    ExchangeRate,
    InventoryDocument,
    Problem,
    Publisher,
    Screen,
    Targeting,
    canonicalize_ids,
    is_uuid,
    validate_document,
)
from matching.money import plain
from matching.snapshot import ApiKeyInfo
from store.postgres import Conn, aware

Progress = Callable[[str, int, int], None]


class InventoryRejected(Exception):
    """The document was refused; nothing was applied."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__(f"{len(problems)} problem(s) in the inventory document")
        self.problems = problems


_TABLES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    # list name: (table, columns, conflict key)
    "publishers": (
        "publishers",
        (
            "id",
            "name",
            "commission_rate",
            "external_ids_enabled",
            "max_audience_per_play",
            "max_screens",
            "rate_limit_per_second",
            "rate_limit_burst",
        ),
        ("id",),
    ),
    "advertisers": ("advertisers", ("id", "name", "domain", "categories", "cattax"), ("id",)),
    "screens": (
        "screens",
        (
            "id",
            "publisher_id",
            "external_id",
            "name",
            "type",
            "width",
            "height",
            "audience_per_play",
            "venue_type",
            "timezone",
            "lat",
            "lon",
            "active",
        ),
        ("id",),
    ),
    "campaigns": (
        "campaigns",
        (
            "id",
            "advertiser_id",
            "name",
            "status",
            "cpm_cents",
            "budget_cents",
            "daily_budget_cents",
            "start_at",
            "end_at",
            "max_plays_per_screen_per_hour",
            "max_price_per_play_cents",
            "targeting",
            "categories",
            "cattax",
        ),
        ("id",),
    ),
    "creatives": (
        "creatives",
        ("id", "campaign_id", "url", "kind", "width", "height", "duration_seconds", "approved"),
        ("id",),
    ),
    "billing_codes": (
        "billing_codes",
        ("advertiser_id", "publisher_id", "code"),
        ("advertiser_id", "publisher_id"),
    ),
    "exchange_rates": (
        "exchange_rates",
        ("currency", "units_per_eur", "as_of"),
        ("currency",),
    ),
}
_ORDER = (
    "publishers",
    "advertisers",
    "billing_codes",
    "screens",
    "campaigns",
    "creatives",
    "exchange_rates",
)
_CHUNK = 20_000


def _targeting_json(targeting: Targeting) -> str:
    return msgspec.json.encode(targeting).decode()


def _rows(kind: str, items: Sequence[Any]) -> list[tuple[Any, ...]]:
    columns = _TABLES[kind][1]
    rows = []
    for item in items:
        row = []
        for column in columns:
            value = getattr(item, column)
            if column == "targeting":
                value = _targeting_json(value)
            elif column.endswith("id") and isinstance(value, str) and column != "external_id":
                value = uuid.UUID(value)
            row.append(value)
        rows.append(tuple(row))
    return rows


async def _known_ids(conn: Conn, table: str) -> set[str]:
    return {str(r["id"]) for r in await conn.fetch(f"SELECT id FROM {table}")}  # noqa: S608


async def _external_id_conflicts(conn: Conn, doc: InventoryDocument) -> list[Problem]:
    """Screens whose (publisher, external_id) is held by a stored screen the document leaves as
    it is (a holder that the document moves to another publisher or external id is no
    conflict: the document's end state is what must be unique)."""
    wanted = [
        (i, s)
        for i, s in enumerate(doc.screens)
        # Only what can be looked up: other screens' problems are the rules' to report.
        if s.external_id is not None
        and "\x00" not in s.external_id
        and is_uuid(s.id)
        and is_uuid(s.publisher_id)
    ]
    if not wanted:
        return []
    rows = await conn.fetch(
        """
        SELECT t.idx, s.id AS holder FROM unnest($1::int[], $2::uuid[], $3::uuid[], $4::text[])
             AS t(idx, id, publisher_id, external_id)
        JOIN screens s ON s.publisher_id = t.publisher_id AND s.external_id = t.external_id
        WHERE s.id <> t.id
        """,
        [i for i, _ in wanted],
        [uuid.UUID(s.id) for _, s in wanted],
        [uuid.UUID(s.publisher_id) for _, s in wanted],
        [s.external_id for _, s in wanted],
    )
    in_document = {s.id: (s.publisher_id, s.external_id) for s in doc.screens}
    problems = []
    for row in rows:
        holder = str(row["holder"])
        screen = doc.screens[row["idx"]]
        held = in_document.get(holder)
        if held is not None and held != (screen.publisher_id, screen.external_id):
            continue  # the document moves the holder to another publisher or external id
        problems.append(
            Problem(
                list="screens",
                index=row["idx"],
                id=screen.id,
                field="external_id",
                message="is used by another screen of this publisher",
            )
        )
    return problems


async def _audience_bounds(conn: Conn) -> dict[str, Decimal]:
    """Every stored publisher's `max_audience_per_play`, by id."""
    rows = await conn.fetch("SELECT id, max_audience_per_play FROM publishers")
    return {str(r["id"]): r["max_audience_per_play"] for r in rows}


async def _bounds_below_stored(conn: Conn, doc: InventoryDocument) -> list[Problem]:
    """Publishers whose new `max_audience_per_play` is below the audience of a stored screen of
    theirs that the document leaves as it is (a screen the document names is judged as the
    document gives it)."""
    wanted = [
        (i, p)
        for i, p in enumerate(doc.publishers)
        if is_uuid(p.id) and p.max_audience_per_play.is_finite()
    ]
    if not wanted:
        return []
    # Only the screens above the new bound are looked up in the document's screen ids (a hash
    # anti-join): an import of 100,000 screens that are all stored costs one scan.
    rows = await conn.fetch(
        """
        SELECT t.idx, max(s.audience_per_play) AS largest
        FROM unnest($1::int[], $2::uuid[], $3::numeric[]) AS t(idx, publisher_id, bound)
        JOIN screens s ON s.publisher_id = t.publisher_id AND s.audience_per_play > t.bound
        LEFT JOIN unnest($4::uuid[]) AS d(id) ON d.id = s.id
        WHERE d.id IS NULL
        GROUP BY t.idx
        """,
        [i for i, _ in wanted],
        [uuid.UUID(p.id) for _, p in wanted],
        [p.max_audience_per_play for _, p in wanted],
        [uuid.UUID(s.id) for s in doc.screens if is_uuid(s.id)],
    )
    return [
        Problem(
            list="publishers",
            index=row["idx"],
            id=doc.publishers[row["idx"]].id,
            field="max_audience_per_play",
            message=(
                f"is below the audience_per_play of a stored screen of this publisher "
                f"({plain(row['largest'])}); lower those screens' audience first"
            ),
        )
        for row in rows
    ]


async def screen_count(conn: Conn, publisher_id: str) -> tuple[int, int]:
    """(how many screens a publisher has, inactive ones included; its `max_screens`)."""
    row = await conn.fetchrow(
        """SELECT p.max_screens, (SELECT count(*) FROM screens s WHERE s.publisher_id = p.id)
                  AS screens
           FROM publishers p WHERE p.id = $1""",
        uuid.UUID(publisher_id),
    )
    return (0, 0) if row is None else (row["screens"], row["max_screens"])


async def import_document(
    conn: Conn, doc: InventoryDocument, progress: Progress | None = None
) -> dict[str, int]:
    """Validate and upsert `doc` in one transaction; bump the inventory version when a row
    changed (a document that changes nothing, such as the export put back, makes no worker
    rebuild its snapshot). Its ids are first written in their canonical form, in place
    (`canonicalize_ids`).

    Raises InventoryRejected listing every problem, before anything is written.
    """
    canonicalize_ids(doc)
    bounds = await _audience_bounds(conn)
    problems = validate_document(
        doc,
        known_publishers=set(bounds),
        known_advertisers=await _known_ids(conn, "advertisers"),
        known_campaigns=await _known_ids(conn, "campaigns"),
        audience_bounds=bounds,
    )
    # With the rules' problems, not after them: every problem is listed at once.
    found = {(p.list, p.index, p.field) for p in problems}
    problems += [
        p
        for p in await _external_id_conflicts(conn, doc) + await _bounds_below_stored(conn, doc)
        if (p.list, p.index, p.field) not in found
    ]
    if problems:
        raise InventoryRejected(problems)

    counts: dict[str, int] = {}
    kind = ""
    try:
        async with conn.transaction():
            changed = 0
            for kind in _ORDER:
                items: Sequence[Any] = getattr(doc, kind)
                counts[kind] = len(items)
                if kind == "billing_codes":
                    items, removed = await _remove_billing_codes(conn, doc.billing_codes)
                    changed += removed
                if items:
                    changed += await _upsert(conn, kind, items, progress)
            if changed:
                await bump_version(conn)
    except (asyncpg.DataError, OverflowError) as exc:
        # A value the rules above let through but a column cannot hold: the transaction is
        # rolled back, and the document is refused like any other (never a 500).
        raise InventoryRejected(
            [
                Problem(
                    list=kind,
                    index=0,
                    id=None,
                    field="",
                    message=f"a value is outside what the database stores: {exc}",
                )
            ]
        ) from None
    return counts


async def _remove_billing_codes(
    conn: Conn, codes: list[BillingCode]
) -> tuple[list[BillingCode], int]:
    """Delete the pairs whose `code` is null: (the pairs to upsert, how many were deleted)."""
    removed = [c for c in codes if c.code is None]
    deleted = 0
    if removed:
        status = await conn.execute(
            """
            DELETE FROM billing_codes b USING unnest($1::uuid[], $2::uuid[]) AS r(adv, pub)
            WHERE b.advertiser_id = r.adv AND b.publisher_id = r.pub
            """,
            [uuid.UUID(c.advertiser_id) for c in removed],
            [uuid.UUID(c.publisher_id) for c in removed],
        )
        deleted = _row_count(status)
    return [c for c in codes if c.code is not None], deleted


def _row_count(status: str) -> int:
    """The rows a command changed, from its status tag (`INSERT 0 12`, `DELETE 3`)."""
    return int(status.rsplit(" ", 1)[-1])


async def _upsert(conn: Conn, kind: str, items: Sequence[Any], progress: Progress | None) -> int:
    """Insert or update `items`; how many rows were inserted or actually changed."""
    table, columns, key = _TABLES[kind]
    staging = f"import_{table}"
    await conn.execute(
        f"CREATE TEMP TABLE {staging} (LIKE {table} INCLUDING DEFAULTS) ON COMMIT DROP"
    )
    if "targeting" in columns:
        # JSON goes in as text: binary COPY has no jsonb encoder, and a pooled connection's
        # jsonb codec would encode the JSON text a second time.
        await conn.execute(f"ALTER TABLE {staging} ALTER COLUMN targeting TYPE text")
    rows = _rows(kind, items)
    for start in range(0, len(rows), _CHUNK):
        chunk = rows[start : start + _CHUNK]
        await conn.copy_records_to_table(staging, records=chunk, columns=list(columns))
        if progress:
            progress(kind, min(start + _CHUNK, len(rows)), len(rows))
    updates = [c for c in columns if c not in key]
    column_list = ", ".join(columns)
    select_list = ", ".join(f"{c}::jsonb" if c == "targeting" else c for c in columns)
    assignments = ", ".join(f"{c} = EXCLUDED.{c}" for c in updates)
    changed = " OR ".join(f"{table}.{c} IS DISTINCT FROM EXCLUDED.{c}" for c in updates)
    status = await conn.execute(
        f"""
        INSERT INTO {table} ({column_list}) SELECT {select_list} FROM {staging}
        ON CONFLICT ({", ".join(key)}) DO UPDATE SET {assignments}, updated_at = now()
        WHERE {changed}
        """  # noqa: S608 - identifiers come from the fixed table map above
    )
    return _row_count(status)


async def bump_version(conn: Conn) -> int:
    """Mark the inventory changed; every worker reloads its snapshot when it sees a new version."""
    version: int = await conn.fetchval(
        "UPDATE inventory_version SET version = version + 1 RETURNING version"
    )
    return version


async def current_version(conn: Conn) -> int:
    version: int = await conn.fetchval("SELECT version FROM inventory_version")
    return version


def _dec(value: Decimal | None) -> Decimal | None:
    return None if value is None else plain(value)


async def export_document(conn: Conn) -> InventoryDocument:
    """The whole stored inventory as a document that `import_document` takes back unchanged."""
    publishers = [
        Publisher(
            id=str(r["id"]),
            name=r["name"],
            commission_rate=plain(r["commission_rate"]),
            external_ids_enabled=r["external_ids_enabled"],
            max_audience_per_play=plain(r["max_audience_per_play"]),
            max_screens=r["max_screens"],
            rate_limit_per_second=r["rate_limit_per_second"],
            rate_limit_burst=r["rate_limit_burst"],
        )
        for r in await conn.fetch("SELECT * FROM publishers ORDER BY id")
    ]
    advertisers = [
        Advertiser(
            id=str(r["id"]),
            name=r["name"],
            domain=r["domain"],
            categories=r["categories"],
            cattax=r["cattax"],
        )
        for r in await conn.fetch("SELECT * FROM advertisers ORDER BY id")
    ]
    billing_codes = [
        BillingCode(
            advertiser_id=str(r["advertiser_id"]),
            publisher_id=str(r["publisher_id"]),
            code=r["code"],
        )
        for r in await conn.fetch(
            "SELECT * FROM billing_codes ORDER BY advertiser_id, publisher_id"
        )
    ]
    screens = [_screen(r) for r in await conn.fetch("SELECT * FROM screens ORDER BY id")]
    campaigns = [_campaign(r) for r in await conn.fetch("SELECT * FROM campaigns ORDER BY id")]
    creatives = [
        Creative(
            id=str(r["id"]),
            campaign_id=str(r["campaign_id"]),
            url=r["url"],
            kind=r["kind"],
            width=r["width"],
            height=r["height"],
            duration_seconds=r["duration_seconds"],
            approved=r["approved"],
        )
        for r in await conn.fetch("SELECT * FROM creatives ORDER BY id")
    ]
    exchange_rates = [
        ExchangeRate(
            currency=r["currency"], units_per_eur=plain(r["units_per_eur"]), as_of=r["as_of"]
        )
        for r in await conn.fetch("SELECT * FROM exchange_rates ORDER BY currency")
    ]
    return InventoryDocument(
        exchange_rates=exchange_rates,
        publishers=publishers,
        advertisers=advertisers,
        billing_codes=billing_codes,
        screens=screens,
        campaigns=campaigns,
        creatives=creatives,
    )


def _screen(r: asyncpg.Record) -> Screen:
    return Screen(
        id=str(r["id"]),
        publisher_id=str(r["publisher_id"]),
        external_id=r["external_id"],
        name=r["name"],
        type=r["type"],
        width=r["width"],
        height=r["height"],
        audience_per_play=plain(r["audience_per_play"]),
        venue_type=r["venue_type"],
        timezone=r["timezone"],
        lat=r["lat"],
        lon=r["lon"],
        active=r["active"],
    )


def _campaign(r: asyncpg.Record) -> Campaign:
    targeting = msgspec.convert(r["targeting"], Targeting)
    return Campaign(
        id=str(r["id"]),
        advertiser_id=str(r["advertiser_id"]),
        name=r["name"],
        status=r["status"],
        cpm_cents=plain(r["cpm_cents"]),
        budget_cents=plain(r["budget_cents"]),
        daily_budget_cents=_dec(r["daily_budget_cents"]),
        start_at=aware(r["start_at"]),
        end_at=aware(r["end_at"]),
        max_plays_per_screen_per_hour=r["max_plays_per_screen_per_hour"],
        max_price_per_play_cents=_dec(r["max_price_per_play_cents"]),
        targeting=targeting,
        categories=r["categories"],
        cattax=r["cattax"],
    )


async def load_api_keys(conn: Conn) -> dict[bytes, ApiKeyInfo]:
    """Every usable key (not revoked), by hash: the whole key cache of one worker."""
    rows = await conn.fetch(
        "SELECT key_id, publisher_id, key_hash, expires_at FROM api_keys WHERE revoked_at IS NULL"
    )
    return {
        bytes(r["key_hash"]): ApiKeyInfo(
            key_id=str(r["key_id"]),
            publisher_id=str(r["publisher_id"]),
            expires_at=aware(r["expires_at"]),
        )
        for r in rows
    }


async def create_api_key(
    conn: Conn,
    publisher_id: str,
    key_hash: bytes,
    key_prefix: str,
    environment: str,
    expires_at: datetime | None,
) -> str:
    """Store a key's hash; return its key_id. The plain key is never stored."""
    key_id = uuid.uuid4()
    async with conn.transaction():
        await conn.execute(
            """INSERT INTO api_keys (key_id, publisher_id, key_hash, key_prefix, environment,
                                     expires_at) VALUES ($1, $2, $3, $4, $5, $6)""",
            key_id,
            uuid.UUID(publisher_id),
            key_hash,
            key_prefix,
            environment,
            expires_at,
        )
        await bump_version(conn)
    return str(key_id)


async def revoke_api_key(conn: Conn, key_id: str) -> bool:
    """Revoke a key; False when there is no such key. Revoking twice is harmless."""
    async with conn.transaction():
        status = await conn.execute(
            "UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE key_id = $1",
            uuid.UUID(key_id),
        )
        await bump_version(conn)
    return bool(status.endswith(" 1"))


# -- single items: the admin API and the publisher screens endpoints ------------------------


async def fetch_screen(
    conn: Conn, screen_id: str, publisher_id: str | None = None
) -> Screen | None:
    """One stored screen (of `publisher_id` when given), or None."""
    row = await conn.fetchrow(
        "SELECT * FROM screens WHERE id = $1 AND ($2::uuid IS NULL OR publisher_id = $2)",
        uuid.UUID(screen_id),
        None if publisher_id is None else uuid.UUID(publisher_id),
    )
    return None if row is None else _screen(row)


async def list_screens(
    conn: Conn, publisher_id: str, *, after: str | None, limit: int
) -> list[Screen]:
    """A publisher's screens in id order, starting after the screen id `after` (keyset page)."""
    rows = await conn.fetch(
        """SELECT * FROM screens WHERE publisher_id = $1 AND ($2::uuid IS NULL OR id > $2)
           ORDER BY id LIMIT $3""",
        uuid.UUID(publisher_id),
        None if after is None else uuid.UUID(after),
        limit,
    )
    return [_screen(r) for r in rows]


#: Per-item changes (pause, dates, deactivation, review) lock the item's row: see lock_item.
_LOCK_ITEM = {
    "campaigns": "SELECT 1 FROM campaigns WHERE id = $1 FOR UPDATE",
    "screens": "SELECT 1 FROM screens WHERE id = $1 FOR UPDATE",
    "creatives": "SELECT 1 FROM creatives WHERE id = $1 FOR UPDATE",
}


async def lock_item(
    conn: Conn, table: Literal["campaigns", "screens", "creatives"], item_id: str
) -> None:
    """Hold an item's row until the caller's transaction ends. A per-item change reads the
    item and writes all of it back (`import_document`): a budget top-up or another change
    committed between the two would be overwritten. Locked first, the read waits for it and
    sees it, and a top-up waits for the change."""
    await conn.execute(_LOCK_ITEM[table], uuid.UUID(item_id))


async def fetch_campaign(conn: Conn, campaign_id: str) -> Campaign | None:
    row = await conn.fetchrow("SELECT * FROM campaigns WHERE id = $1", uuid.UUID(campaign_id))
    return None if row is None else _campaign(row)


class TotalTooHigh(Exception):
    """A top-up would take a campaign's total past the most it may be; nothing was changed."""


class KeyReused(Exception):
    """An idempotency key already named a top-up of another campaign or amount; nothing was
    changed."""

    def __init__(self, campaign_id: str, add_cents: Decimal) -> None:
        super().__init__(campaign_id, add_cents)
        self.campaign_id, self.add_cents = campaign_id, add_cents


class Added(NamedTuple):
    """A top-up's outcome: the campaign's total and the inventory version it was read at (the
    top-up's own version; on a replay, the version current when the total was read, in the
    same statement), and whether its idempotency key had already done it (then nothing was
    added this time)."""

    total: Decimal
    version: int
    replayed: bool = False


async def add_budget(
    conn: Conn,
    campaign_id: str,
    add_cents: Decimal,
    max_total: Decimal,
    idempotency_key: str | None = None,
) -> Added | None:
    """Raise a campaign's total budget by `add_cents` and bump the inventory version, in one
    transaction, or None when there is no such campaign.
    A total that would exceed `max_total` raises TotalTooHigh and changes nothing: the check
    reads the total the UPDATE wrote, under its row lock, so concurrent top-ups cannot pass it
    together.

    With `idempotency_key`, the key is stored in the same transaction: a key already stored
    for this campaign and amount adds nothing and answers the total as it is now
    (`replayed`); for another campaign or amount it raises KeyReused. A concurrent top-up
    with the same key waits on the first one's row and then sees it (or, if that one rolled
    back, adds for itself)."""
    campaign = uuid.UUID(campaign_id)
    async with conn.transaction():
        if idempotency_key is not None:
            stored = await conn.fetchval(
                """INSERT INTO budget_top_ups (idempotency_key, campaign_id, add_cents)
                   SELECT $1, id, $3 FROM campaigns WHERE id = $2
                   ON CONFLICT (idempotency_key) DO NOTHING RETURNING true""",
                idempotency_key,
                campaign,
                add_cents,
            )
            if stored is None:
                return await _replayed(conn, campaign, add_cents, idempotency_key)
        total: Decimal | None = await conn.fetchval(
            """UPDATE campaigns SET budget_cents = budget_cents + $2, updated_at = now()
               WHERE id = $1 RETURNING budget_cents""",
            campaign,
            add_cents,
        )
        if total is None:
            return None
        if total > max_total:
            raise TotalTooHigh(total)  # rolls the UPDATE (and the key) back
        version = await bump_version(conn)
    return Added(plain(total), version)


async def _replayed(
    conn: Conn, campaign: uuid.UUID, add_cents: Decimal, idempotency_key: str
) -> Added | None:
    """The answer to a top-up whose key was not stored: a replay of the key's top-up, None for
    an unknown campaign (nothing stored, no key either), or KeyReused."""
    row = await conn.fetchrow(
        "SELECT campaign_id, add_cents FROM budget_top_ups WHERE idempotency_key = $1",
        idempotency_key,
    )
    if row is None:  # the campaign does not exist: the INSERT found no row to copy
        return None
    if row["campaign_id"] != campaign or row["add_cents"] != add_cents:
        raise KeyReused(str(row["campaign_id"]), plain(row["add_cents"]))
    # One statement, one snapshot: the total with the version it belongs to (the caller's
    # Redis write is kept only if no newer version's total is there).
    now = await conn.fetchrow(
        """SELECT c.budget_cents, v.version FROM campaigns c, inventory_version v
           WHERE c.id = $1""",
        campaign,
    )
    if now is None:
        return None
    return Added(plain(now["budget_cents"]), now["version"], replayed=True)


__all__ = [
    "Added",
    "Daypart",
    "InventoryRejected",
    "KeyReused",
    "TotalTooHigh",
    "add_budget",
    "bump_version",
    "create_api_key",
    "current_version",
    "export_document",
    "fetch_campaign",
    "fetch_screen",
    "import_document",
    "list_screens",
    "load_api_keys",
    "lock_item",
    "revoke_api_key",
    "screen_count",
]
