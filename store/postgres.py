"""Postgres: the connection pool and the plain-SQL migrations (each applied once, recorded)."""

from __future__ import annotations

import importlib.resources
import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import overload

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from store.errors import POSTGRES_CLOSED, POSTGRES_DOWN

#: A connection of its own or one borrowed from a pool: the queries take either.
Conn = asyncpg.Connection | PoolConnectionProxy

_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    name       text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""
# One migrator at a time, across processes.
_MIGRATION_LOCK = 0x_D00_B1D


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def create_pool(dsn: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    """A pool whose connections speak jsonb as Python objects; fails fast when unreachable."""
    pool = await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        init=_init_connection,
        timeout=5,
        command_timeout=60,
    )
    assert pool is not None
    return pool


@overload
def aware(moment: datetime) -> datetime: ...
@overload
def aware(moment: None) -> None: ...
def aware(moment: datetime | None) -> datetime | None:
    """A `timestamptz` as read, as an aware datetime. asyncpg writes datetime.max / datetime.min
    (in UTC) as `infinity` / `-infinity` and reads those back naive; without its time zone
    such a moment breaks every comparison with an aware now (a campaign flying until
    9999-12-31T23:59:59.999999Z would make every offer request it could match answer 500). As
    aware UTC they are exactly the moments that were written."""
    return moment.replace(tzinfo=UTC) if moment is not None and moment.tzinfo is None else moment


def migration_files() -> list[tuple[str, str]]:
    """(name, SQL) of every migration shipped in store/migrations, in name order."""
    folder = importlib.resources.files("store") / "migrations"
    return sorted(
        (entry.name, entry.read_text()) for entry in folder.iterdir() if entry.name.endswith(".sql")
    )


#: What connecting to Postgres raises when it cannot: refused, timed out or refused by the
#: server (`POSTGRES_DOWN`), a pool or connection closed under it (`POSTGRES_CLOSED`), or a
#: DATABASE_URL asyncpg cannot use (ValueError: a port that is not a number, a bad sslmode).
CONNECT_ERRORS: tuple[type[Exception], ...] = (*POSTGRES_DOWN, *POSTGRES_CLOSED, ValueError)


def describe_connect_error(exc: Exception) -> str:
    """What to say of a connection failure: its message, except for a ValueError (a URL the
    driver could not parse), whose message may quote part of the URL's password."""
    return type(exc).__name__ if isinstance(exc, ValueError) else str(exc)


async def migrate(conn: Conn) -> list[str]:
    """Apply the migrations not yet recorded, each in its own transaction; return their names."""
    await conn.execute(_MIGRATIONS_TABLE)
    applied: list[str] = []
    await conn.execute("SELECT pg_advisory_lock($1)", _MIGRATION_LOCK)
    try:
        done = {r["name"] for r in await conn.fetch("SELECT name FROM schema_migrations")}
        for name, sql in migration_files():
            if name in done:
                continue
            async with conn.transaction():
                await conn.execute(sql)
                await conn.execute("INSERT INTO schema_migrations (name) VALUES ($1)", name)
            applied.append(name)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _MIGRATION_LOCK)
    return applied


def decimal_or_none(value: object) -> Decimal | None:
    """NUMERIC columns arrive as Decimal; keep None as None."""
    return value if isinstance(value, Decimal) or value is None else Decimal(str(value))
