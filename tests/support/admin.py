"""Shared by the admin, screens and CLI tests: an app without the record writer (these tests
write no records), the operator's headers, and exact JSON parsing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import asyncpg
from litestar import Litestar
from litestar.testing import AsyncTestClient

from bidder.app import create_app
from tests.conftest import ADMIN_TOKEN, ServerUrls, make_settings

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

Client = AsyncTestClient[Litestar]


async def started_client(servers: ServerUrls) -> AsyncIterator[Client]:
    """The whole app on the real servers, with its background loops, minus the record writer."""
    app = create_app(make_settings(servers, RECORD_WRITER="0"))
    async with AsyncTestClient(app) as client:
        yield client


def parsed(body: bytes) -> Any:
    """JSON with exact decimals, so 0.000001 and 250.5 compare exactly."""
    return json.loads(body, parse_float=Decimal)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def fetchval(servers: ServerUrls, sql: str, *params: Any) -> Any:
    """One value from the session's Postgres, on a connection of its own."""
    conn = await asyncpg.connect(servers.database_url)
    try:
        return await conn.fetchval(sql, *params)
    finally:
        await conn.close()
