"""What the `bidder` commands share: the one-line failure, and a Postgres connection set up like
the service's."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg

from bidder.settings import Settings
from store.postgres import CONNECT_ERRORS, Conn, create_pool, describe_connect_error

T = TypeVar("T")


class CommandFailed(Exception):
    """A command could not do its job; the message says why (exit 1)."""


async def with_connection(settings: Settings, work: Callable[[Conn], Awaitable[T]]) -> T:
    """Run `work` on a connection set up like the service's (jsonb as Python objects);
    Postgres problems become CommandFailed."""
    try:
        pool = await create_pool(settings.database_url, min_size=1, max_size=1)
    except CONNECT_ERRORS as exc:
        said = describe_connect_error(exc)
        raise CommandFailed(f"cannot reach Postgres at DATABASE_URL: {said}") from None
    try:
        async with pool.acquire() as conn:
            return await work(conn)
    except asyncpg.PostgresError as exc:
        raise CommandFailed(f"Postgres refused the change: {exc}") from None
    finally:
        await pool.close()
