"""The real Redis and Postgres a test session runs on: their URLs, the settings an app gets on
them, and the clean slate every server test starts from.

Point REDIS_URL / DATABASE_URL only at disposable servers: every test starts from a clean state
(Redis flushed, every table emptied).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import redis
from litestar import Litestar
from litestar.testing import AsyncTestClient

from bidder.settings import Settings, load_settings
from store.hot.topology import RedisMode
from store.local_cluster import LocalRedisCluster
from store.local_servers import LocalServers
from store.postgres import migrate
from store.reports import ROLLUP_TABLES

ADMIN_TOKEN = "test-admin-token-0123456789"
SIGNING_SECRETS = "test-signing-secret-newest-0123,test-signing-secret-older-0123"


@dataclass
class ServerUrls:
    redis_url: str
    database_url: str
    local: LocalServers | None
    redis_mode: str = "single"
    cluster: LocalRedisCluster | None = None


@contextmanager
def session_servers(folder: Path, *, cluster: bool = False) -> Iterator[ServerUrls]:
    """REDIS_URL / DATABASE_URL (and REDIS_MODE) when both are set, else a Redis and a
    Postgres started in `folder` (the same mechanism as `bidder dev`) and stopped on exit;
    with `cluster`, a local Redis Cluster (three primaries with a replica each) instead of the
    single Redis."""
    redis_url, database_url = os.environ.get("REDIS_URL"), os.environ.get("DATABASE_URL")
    if redis_url and database_url:
        yield ServerUrls(redis_url, database_url, None, os.environ.get("REDIS_MODE", "single"))
        return
    local = LocalServers(folder)
    local.start()
    assert local.redis is not None
    assert local.postgres is not None
    started = None
    try:
        if cluster:
            started = LocalRedisCluster(folder / "cluster")
            started.start()
            yield ServerUrls(started.url, local.postgres.url, local, "cluster", started)
        else:
            yield ServerUrls(local.redis.url, local.postgres.url, local)
    finally:
        if started is not None:
            started.stop()
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


async def migrate_database(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await migrate(conn)
    finally:
        await conn.close()


#: Every record table and the report rollups the records keep (migration 010).
RECORD_TABLES = (
    "tracking_events, loss_notices, playouts, rejections, billing_records, deals, offers, "
    + ", ".join(ROLLUP_TABLES)
)
RECORD_AND_INVENTORY_TABLES = (
    RECORD_TABLES + ", creatives, campaigns, screens, billing_codes, advertisers, api_keys, "
    "publishers, exchange_rates"
)


async def empty_servers(servers: ServerUrls) -> None:
    """Empty Redis and every table (the schema stays), so a test starts from nothing."""
    flush_redis(servers)
    conn = await asyncpg.connect(servers.database_url)
    try:
        await conn.execute(f"TRUNCATE {RECORD_AND_INVENTORY_TABLES} CASCADE")
        await conn.execute("UPDATE inventory_version SET version = version + 1")
    finally:
        await conn.close()


async def wait_for_inventory(client: AsyncTestClient[Litestar]) -> None:
    """Bring the app's snapshot to the stored inventory version now (after a seed), instead of
    waiting for the background reload. The app (and its connection pools) runs on the test
    client's portal loop in another thread, so the reload runs there too."""
    client.blocking_portal.call(client.app.state.runtime.inventory.reload)
