"""What the `bidder` commands share: their settings and logging, the one-line failure, a
Postgres connection set up like the service's, UUID and port arguments and JSON output."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncpg
import msgspec

from bidder.auth import shown_as_id
from bidder.observability import configure_logging
from bidder.settings import Settings, load_settings
from matching.inventory import parse_uuid
from store.postgres import CONNECT_ERRORS, Conn, create_pool, describe_connect_error

T = TypeVar("T")

# Decimals as plain JSON numbers, as the service answers them.
_encoder = msgspec.json.Encoder(decimal_format="number")


def command_settings(*, redis: bool = True, secrets: bool = False) -> Settings:
    """The settings, and the service's JSON logging on stderr at LOG_LEVEL (an operator's
    change made from the command line logs its `bidder.audit` line as the admin API's does).
    `redis`: the command uses Redis (REDIS_URL required); `secrets`: it serves (ADMIN_TOKEN and
    SIGNING_SECRETS required)."""
    settings = load_settings(redis=redis, secrets=secrets)
    configure_logging(settings.server.log_level)
    return settings


def uuid_argument(value: str) -> str:
    """An argparse type: a UUID, in its canonical form."""
    try:
        return str(parse_uuid(value))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a UUID: {shown_as_id(value)}") from None


def port_number(value: str) -> int:
    """An argparse type: a TCP port, 1 to 65535 (what a socket can bind)."""
    if not value.isdigit() or not 1 <= int(value) <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number from 1 to 65535, got {value!r}")
    return int(value)


def formatted_json(value: Any) -> bytes:
    """`value` as indented JSON with a final newline, for a person or a file."""
    return msgspec.json.format(_encoder.encode(value), indent=2) + b"\n"


class CommandFailed(Exception):
    """A command could not do its job; the message says why (exit 1)."""


async def with_connection(settings: Settings, work: Callable[[Conn], Awaitable[T]]) -> T:
    """Run `work` on a connection set up like the service's (jsonb as Python objects);
    Postgres problems become CommandFailed."""
    try:
        pool = await create_pool(settings.postgres.url, min_size=1, max_size=1)
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
