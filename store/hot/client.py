"""The redis-py client of the hot state: fast failure when Redis is unreachable."""

from __future__ import annotations

from redis.asyncio import BlockingConnectionPool, Redis


def connect(url: str, timeout: float = 0.25, max_connections: int = 64) -> Redis:
    """A client whose calls fail fast when Redis is unreachable (`timeout` seconds) and wait for
    a free connection under load instead of failing."""
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=max(timeout * 4, 1.0),
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
    )
    return Redis.from_pool(pool)
