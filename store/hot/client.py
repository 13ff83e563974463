"""The redis-py client of the hot state: fast failure when Redis is unreachable, on one server,
a Redis Cluster or a Sentinel-watched primary (store/hot/topology.py)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.sentinel import Sentinel
from redis.typing import EncodableT

from store.hot.topology import RedisMode, parse


class _SentinelPrimary(Redis):
    """A client on the primary the sentinels name; closing it closes its sentinel clients."""

    watchers: Sentinel | None = None

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        if self.watchers is not None:
            for client in self.watchers.sentinels:
                await client.aclose()


def connect(
    url: str, timeout: float = 0.25, max_connections: int = 64, mode: RedisMode = "single"
) -> Redis:
    """A client whose calls fail fast when Redis is unreachable (`timeout` seconds) and wait for
    a free connection under load instead of failing.

    With `cluster` it is redis-py's RedisCluster: each command goes to the node owning its
    key's slot, MOVED and ASK are followed and the slot map is read again after a failover.
    It offers the command methods of `Redis` that this project calls, each multi-key command
    and transaction within one slot (the `{bN}` hash tags), so it is typed as one. With
    `sentinel` the connections go to the primary the sentinels name, asked again at each
    connect."""
    if mode == "single":
        pool = BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=max(timeout * 4, 1.0),
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
        )
        return Redis.from_pool(pool)
    where = parse(url, mode)
    if mode == "cluster":
        cluster = _WaitingCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in where.nodes],
            username=where.username,
            password=where.password,
            max_connections=max_connections,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            require_full_coverage=False,
        )
        # KEYS and DBSIZE over the whole data set (every primary), as on one server.
        for command in ("KEYS", "DBSIZE"):
            cluster.command_flags[command] = RedisCluster.PRIMARIES
        return cast(Redis, cluster)
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        list(where.nodes), socket_timeout=timeout, socket_connect_timeout=timeout
    )
    primary: _SentinelPrimary = sentinel.master_for(
        where.service,
        redis_class=_SentinelPrimary,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        username=where.username,
        password=where.password,
        db=where.db,
        max_connections=max_connections,
    )
    primary.watchers = sentinel
    return primary


class _WaitingCluster(RedisCluster):
    """RedisCluster whose commands wait for a free connection under load, as the single-node
    pool's do: redis-py raises MaxConnectionsError once a node has `max_connections` calls in
    flight. At most that many commands of this client run at once, so no node's pool runs
    out (a pipeline takes one connection a node, outside this count)."""

    def __init__(self, *, max_connections: int, **kwargs: Any) -> None:
        super().__init__(max_connections=max_connections, **kwargs)
        self._in_flight = asyncio.Semaphore(max_connections)

    async def execute_command(self, *args: EncodableT, **kwargs: Any) -> Any:
        async with self._in_flight:
            return await super().execute_command(*args, **kwargs)


def is_cluster(redis: Redis) -> bool:
    """Whether `redis` speaks to a Redis Cluster (a multi-key command must stay in one slot)."""
    return isinstance(redis, RedisCluster)
