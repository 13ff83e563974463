"""Test session plumbing: real Redis and Postgres, started once per session in a temporary
folder (the same mechanism as `bidder dev`), or taken from REDIS_URL / DATABASE_URL.

Point REDIS_URL / DATABASE_URL only at disposable servers: every test starts from a clean state
(Redis flushed, every table emptied).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest
import redis
from litestar import Litestar
from litestar.testing import AsyncTestClient
from redis.asyncio import Redis

from bidder.app import create_app
from bidder.settings import Settings, load_settings
from store.hot import connect
from store.hot.topology import RedisMode
from store.local_cluster import LocalRedisCluster
from store.local_servers import LocalServers
from store.postgres import migrate

ADMIN_TOKEN = "test-admin-token-0123456789"
SIGNING_SECRETS = "test-signing-secret-newest-0123,test-signing-secret-older-0123"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--redis",
        choices=("single", "cluster"),
        default="single",
        help="the Redis the session starts: one server, or a local Redis Cluster (three "
        "primaries with a replica each) the app speaks to with REDIS_MODE=cluster",
    )


@dataclass
class ServerUrls:
    redis_url: str
    database_url: str
    local: LocalServers | None
    redis_mode: str = "single"
    cluster: LocalRedisCluster | None = None


@pytest.fixture(scope="session")
def servers(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[ServerUrls]:
    redis_url, database_url = os.environ.get("REDIS_URL"), os.environ.get("DATABASE_URL")
    mode = os.environ.get("REDIS_MODE", "single")
    if redis_url and database_url:
        yield ServerUrls(redis_url, database_url, None, mode)
        return
    local = LocalServers(Path(tmp_path_factory.mktemp("servers")))
    local.start()
    assert local.redis is not None
    assert local.postgres is not None
    cluster = None
    try:
        if request.config.getoption("--redis") == "cluster":
            cluster = LocalRedisCluster(Path(tmp_path_factory.mktemp("cluster")))
            cluster.start()
            yield ServerUrls(cluster.url, local.postgres.url, local, "cluster", cluster)
        else:
            yield ServerUrls(local.redis.url, local.postgres.url, local)
    finally:
        if cluster is not None:
            cluster.stop()
        local.discard()


def redis_mode(servers: ServerUrls) -> RedisMode:
    """The session's REDIS_MODE."""
    return "cluster" if servers.redis_mode == "cluster" else "single"


def flush_redis(servers: ServerUrls) -> None:
    """Empty the session's Redis (every primary of a cluster)."""
    if servers.cluster is not None:
        servers.cluster.flushall()
    else:
        redis.Redis.from_url(servers.redis_url).flushall()


def make_settings(servers: ServerUrls, **overrides: str) -> Settings:
    env = {
        "DATABASE_URL": servers.database_url,
        "REDIS_URL": servers.redis_url,
        "REDIS_MODE": servers.redis_mode,
        "ADMIN_TOKEN": ADMIN_TOKEN,
        "SIGNING_SECRETS": SIGNING_SECRETS,
        "BIDDER_ENV": "staging",
        "PUBLIC_BASE_URL": "http://testserver.local",
        "INVENTORY_POLL_SECONDS": "0.2",
        "SWEEP_INTERVAL_SECONDS": "0.5",
        "LOG_LEVEL": "WARNING",
        **overrides,
    }
    return load_settings(env)


@pytest.fixture(scope="session")
def settings(servers: ServerUrls) -> Settings:
    return make_settings(servers)


@pytest.fixture(scope="session")
async def migrated(servers: ServerUrls) -> str:
    conn = await asyncpg.connect(servers.database_url)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    return servers.database_url


_RECORD_AND_INVENTORY_TABLES = (
    "tracking_events, loss_notices, playouts, rejections, billing_records, deals, offers, "
    "creatives, campaigns, screens, billing_codes, advertisers, api_keys, publishers"
)


@pytest.fixture
async def clean(servers: ServerUrls, migrated: str) -> None:
    """Empty Redis and every table, so the test starts from nothing."""
    flush_redis(servers)
    conn = await asyncpg.connect(migrated)
    try:
        await conn.execute(f"TRUNCATE {_RECORD_AND_INVENTORY_TABLES} CASCADE")
        await conn.execute("UPDATE inventory_version SET version = version + 1")
    finally:
        await conn.close()


@pytest.fixture
async def redis_client(servers: ServerUrls, clean: None) -> AsyncIterator[Redis]:
    """An asyncio Redis client on the (flushed) test server, closed after the test."""
    client = connect(servers.redis_url, timeout=2.0, mode=redis_mode(servers))
    yield client
    await client.aclose()


@pytest.fixture
async def app_client(settings: Settings, clean: None) -> AsyncIterator[AsyncTestClient[Litestar]]:
    """The whole app on the real servers, started with its lifespan (background loops too).
    Seed inventory before the first request, then call `wait_for_inventory`."""
    app = create_app(settings)
    async with AsyncTestClient(app) as client:
        yield client


async def wait_for_inventory(client: AsyncTestClient[Litestar]) -> None:
    """Bring the app's snapshot to the stored inventory version now (after a seed), instead of
    waiting for the background reload. The app (and its connection pools) runs on the test
    client's portal loop in another thread, so the reload runs there too."""
    client.blocking_portal.call(client.app.state.runtime.reload_inventory)
