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

#: The most fields a hash may have for Redis to keep it as a listpack, which it scans field by
#: field on every read and write (`hash-max-listpack-entries`). A shard's budget hash holds
#: three fields or more per campaign and its day and frequency hashes one or two, each read and
#: written by every request: at Valkey's default of 512, the bench inventory's budget hashes
#: (about 500 fields) cost a reservation 8.8 us of Redis CPU for its HMGET and 2.9 us for each
#: HINCRBY, against 0.8 and 0.4 as hash tables. Offers (4 to 18 fields) and deals stay
#: listpacks. The local servers run with it; deploy/README.md, "Redis", asks it of production.
HASH_MAX_LISTPACK_ENTRIES = 64
_LISTPACK_SETTING = "hash-max-listpack-entries"


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


async def listpack_warning(redis: Redis) -> str | None:
    """What to tell the operator when Redis keeps hashes of more than HASH_MAX_LISTPACK_ENTRIES
    fields as listpacks (a cluster answers for one of its nodes); None when it does not, or when
    it refuses CONFIG GET (a managed service may)."""
    try:
        answer = await redis.config_get(_LISTPACK_SETTING)
        limit = int(str(answer[_LISTPACK_SETTING]))
    except Exception:
        return None
    if limit <= HASH_MAX_LISTPACK_ENTRIES:
        return None
    return (
        f"Redis has {_LISTPACK_SETTING} {limit}: a shard's budget, day and frequency hashes of "
        f"up to that many fields are scanned field by field on every request; set it to "
        f"{HASH_MAX_LISTPACK_ENTRIES} (deploy/README.md, Redis)"
    )
