"""Fixtures of the integration tests (the app in process on the session's real servers). The
servers and the clean slate come from `tests/conftest.py`, shared with the end-to-end tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from redis.asyncio import Redis

from bidder.http.app import create_app
from bidder.settings import Settings
from store.hot import connect
from store.postgres import create_pool
from tests.support.factories import basic_document, campaign, make_key, seed
from tests.support.servers import ServerUrls, make_settings, redis_mode, wait_for_inventory


@pytest.fixture(scope="session")
def settings(servers: ServerUrls) -> Settings:
    return make_settings(servers)


@pytest.fixture
async def redis_client(servers: ServerUrls, clean: None) -> AsyncIterator[Redis]:
    """An asyncio Redis client on the (flushed) test server, closed after the test."""
    client = connect(servers.redis_url, timeout=2.0, mode=redis_mode(servers))
    yield client
    await client.aclose()


@pytest.fixture
async def pool(migrated: str, clean: None) -> AsyncIterator[asyncpg.Pool]:
    """A pool on the session's migrated database, emptied for the test."""
    created = await create_pool(migrated, max_size=4)
    yield created
    await created.close()


@pytest.fixture
async def app_client(settings: Settings, clean: None) -> AsyncIterator[AsyncTestClient[Litestar]]:
    """The whole app on the real servers, started with its lifespan (background loops too).
    Seed inventory before the first request, then call `wait_for_inventory`."""
    app = create_app(settings)
    async with AsyncTestClient(app) as client:
        yield client


@pytest.fixture
async def key(app_client: AsyncTestClient[Litestar], migrated: str) -> str:
    """A publisher key on the basic inventory, its campaign flying through 2026's first 100
    days: what the report tests read their plays with."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    await seed(
        migrated,
        basic_document(campaigns=[campaign(start_at=start, end_at=start + timedelta(days=100))]),
    )
    made = await make_key(migrated)
    await wait_for_inventory(app_client)
    return made
