"""The hot path's pipelined connection on a Redis Cluster or a Sentinel-watched primary.

`PipelinedCluster` keeps one `PipelinedRedis` per primary and sends each command to the
primary owning its key's slot, from the slot map CLUSTER SLOTS gives. A `MOVED` reply (the
slot lives elsewhere now: a reshard, a failover) updates the map and sends the command again
there; an `ASK` reply (the slot is being migrated) sends it once behind `ASKING` to the node
named; `TRYAGAIN` (a multi-key call while its keys are split by a migration) waits a moment and
tries again. A redirected command was not run, so sending it again changes nothing twice. A
lost connection fails the calls in flight (the caller's 503) and has the map read again before
the next call, so after a failover the calls reach the promoted replica.

Each hot-path key carries a `{bN}` hash tag, so the slot of a call is that of its tag: computed
once per tag and cached. Per call this adds a dict lookup and one await to `PipelinedRedis`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from redis.asyncio.sentinel import Sentinel
from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError

from store.hot.topology import RedisMode, Topology, parse
from store.pipelined import Arg, HotConnection, PipelinedRedis

SLOTS = 16384
#: How many redirects one call follows before it fails (a map that keeps moving).
_MAX_REDIRECTS = 5
#: The wait before a TRYAGAIN or CLUSTERDOWN call is sent again.
_RETRY_PAUSE_S = 0.01
#: The least time between two readings of the slot map (a dead primary fails every call until
#: its replica takes over: the map is not read again for each of them).
_REFRESH_EVERY_S = 0.1
#: Commands without a key: sent to every primary, the first reply returned.
_KEYLESS = frozenset({"PING", "TIME", "INFO", "SCRIPT", "DBSIZE", "FLUSHALL", "WAIT"})


def _slot_of(key: str | bytes, cache: dict[str | bytes, int]) -> int:
    slot = cache.get(key)
    if slot is None:
        raw = key.encode() if isinstance(key, str) else key
        slot = key_slot(raw)
        start = raw.find(b"{")
        if start > -1 and raw.find(b"}", start + 1) > start + 1 and len(cache) < 4096:
            cache[key] = slot  # a tagged key: its slot is its tag's, worth keeping
    return slot


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def routing_key(command: tuple[Arg, ...]) -> str | bytes | None:
    """The key a command is routed by: EVAL/EVALSHA's first key, else the first argument."""
    name = _text(command[0]).upper()
    if name in ("EVALSHA", "EVAL", "FCALL"):
        if len(command) > 3 and int(command[2]) > 0:
            first = command[3]
            return first if isinstance(first, str | bytes) else str(first)
        return None
    if name in _KEYLESS or len(command) < 2:
        return None
    first = command[1]
    return first if isinstance(first, str | bytes) else str(first)


class PipelinedCluster:
    """Auto-pipelined connections to a Redis Cluster's primaries, routed by slot."""

    def __init__(self, topology: Topology, timeout: float = 0.25, wait_replicas: int = 0) -> None:
        self.timeout = timeout
        self.wait_replicas = wait_replicas
        self._seeds = list(topology.nodes)
        self._username, self._password = topology.username, topology.password
        self._slots: list[str | None] = [None] * SLOTS
        self._nodes: dict[str, PipelinedRedis] = {}
        self._primaries: list[str] = []
        self._stale = True
        self._refreshing: asyncio.Future[None] | None = None
        self._refreshed_at = 0.0
        self._slot_cache: dict[str | bytes, int] = {}

    # -- the slot map -----------------------------------------------------------------------

    def _node(self, address: str) -> PipelinedRedis:
        node = self._nodes.get(address)
        if node is None:
            auth = ""
            if self._password:
                user = quote(self._username or "default", safe="")
                auth = f"{user}:{quote(self._password, safe='')}@"
            node = self._nodes[address] = PipelinedRedis(
                f"redis://{auth}{address}/0", self.timeout, self.wait_replicas
            )
        return node

    async def refresh(self) -> None:
        """Read the slot map again (one reading at a time; the callers share it)."""
        if self._refreshing is None:
            self._refreshing = asyncio.ensure_future(self._read_slots())
        refreshing = self._refreshing
        try:
            await asyncio.shield(refreshing)
        finally:
            if self._refreshing is refreshing and refreshing.done():
                self._refreshing = None

    async def _read_slots(self) -> None:
        known = [*self._primaries, *(a for a in self._nodes if a not in self._primaries)]
        seeds = [f"{host}:{port}" for host, port in self._seeds]
        last: Exception | None = None
        for address in dict.fromkeys([*known, *seeds]):
            try:
                reply = await self._node(address).execute("CLUSTER", "SLOTS")
            except RedisError as exc:
                last = exc
                continue
            slots: list[str | None] = [None] * SLOTS
            primaries: list[str] = []
            for start, end, primary, *_ in reply:
                host = _text(primary[0]) or address.rpartition(":")[0]
                where = f"{host}:{int(primary[1])}"
                if where not in primaries:
                    primaries.append(where)
                slots[int(start) : int(end) + 1] = [where] * (int(end) - int(start) + 1)
            self._slots, self._primaries = slots, primaries
            self._stale = False
            # A node that is no primary any more keeps its connection: calls in flight on it
            # get their replies (MOVED, or the outcome of a script it ran before it stepped
            # down), not a 503 that could be untrue.
            self._refreshed_at = time.monotonic()
            return
        raise RedisConnectionError(f"no node of the Redis Cluster answered: {last}")

    def _mark_stale(self) -> None:
        self._stale = True

    async def _fresh(self) -> None:
        due = time.monotonic() - self._refreshed_at >= _REFRESH_EVERY_S
        if (self._stale and due) or not self._primaries:
            await self.refresh()

    # -- calls ------------------------------------------------------------------------------

    def _owner(self, key: str | bytes) -> PipelinedRedis | None:
        address = self._slots[_slot_of(key, self._slot_cache)]
        return None if address is None else self._node(address)

    async def execute_keyed(self, key: str | bytes, *command: Arg, durable: bool = False) -> Any:
        """Send `command` to the primary owning `key`'s slot; follow MOVED, ASK, TRYAGAIN.
        `durable`: the reply waits for the primary's replicas (PipelinedRedis.execute_durable)."""
        if self._stale:
            await self._fresh()
        node = self._owner(key)
        asking = False
        redirects, migrating = 0, False
        # TRYAGAIN (a migration under way) is tried again until the call's time is up.
        give_up = time.monotonic() + self.timeout
        while redirects < _MAX_REDIRECTS and time.monotonic() < give_up:
            if node is None:
                self._mark_stale()
                await self._fresh()
                node = self._owner(key)
                if node is None:
                    raise RedisConnectionError("no Redis Cluster node serves this key's slot")
            try:
                if asking:
                    reply = await node.execute_asking(*command)
                    if durable:  # the WAIT behind it covers it: same connection, later
                        await node.execute_durable("PING")
                    return reply
                if durable:
                    return await node.execute_durable(*command)
                return await node.execute(*command)
            except ResponseError as exc:
                if str(exc).startswith("TRYAGAIN"):
                    # The slot's keys are split by a migration: the same node (behind ASKING
                    # again when it was) in a moment, once the keys moved.
                    await asyncio.sleep(_RETRY_PAUSE_S)
                    migrating = True
                    continue
                node, asking = await self._redirected(exc, key)
                redirects += 0 if str(exc).startswith("CLUSTERDOWN") else 1
            except RedisConnectionError:
                self._mark_stale()  # a failover may be under way: read the map before next call
                raise
        if migrating:
            raise RedisConnectionError("the key's slot stayed split by a migration (TRYAGAIN)")
        raise RedisConnectionError("the Redis Cluster kept redirecting the call")

    async def _redirected(
        self, exc: ResponseError, key: str | bytes
    ) -> tuple[PipelinedRedis | None, bool]:
        """Where a call refused with `exc` goes next, and whether behind ASKING; `exc` raised
        again when it is no redirect."""
        message = str(exc)
        kind = message.split(" ", 1)[0]
        if kind == "MOVED":
            slot, address = message.split()[1:3]
            self._slots[int(slot)] = address
            self._mark_stale()  # more slots may have moved with it
            return self._node(address), False
        if kind == "ASK":
            return self._node(message.split()[2]), True
        if kind == "CLUSTERDOWN":
            await asyncio.sleep(_RETRY_PAUSE_S)
            self._mark_stale()
            await self._fresh()
            return self._owner(key), False
        raise exc

    async def execute(self, *command: Arg) -> Any:
        """A keyed command goes to its slot's primary; a keyless one to every primary (the
        first reply returned: PING answers only when all of them do)."""
        key = routing_key(command)
        if key is not None:
            return await self.execute_keyed(key, *command)
        await self._fresh()
        replies = await asyncio.gather(
            *(self._node(a).execute(*command) for a in self._primaries), return_exceptions=True
        )
        answered = [r for r in replies if not isinstance(r, BaseException)]
        failed = [r for r in replies if isinstance(r, BaseException)]
        # SCRIPT LOAD is done where it can be (a primary down loads it when it is back, at its
        # first NOSCRIPT); anything else fails when one primary fails it.
        if failed and (not answered or _text(command[0]).upper() != "SCRIPT"):
            raise failed[0]
        return answered[0] if answered else None

    @property
    def primaries(self) -> list[str]:
        """The primaries' addresses (host:port) as the slot map last read names them."""
        return list(self._primaries)

    # -- what the hot state asks ------------------------------------------------------------

    @property
    def is_connected(self) -> bool:
        nodes = self._nodes
        return not self._stale and all(
            a in nodes and nodes[a].is_connected for a in self._primaries
        )

    async def connected(self, key: str = "") -> None:
        """Read the slot map when due and connect the primary of `key` (every primary without
        one); a primary that cannot be reached fails the call about it, not this one."""
        with contextlib.suppress(RedisError):
            await self._fresh()
        owners: Iterable[PipelinedRedis | None] = (
            [self._owner(key)] if key else [self._node(a) for a in self._primaries]
        )
        for node in owners:
            if node is not None and not node.is_connected:
                with contextlib.suppress(RedisError):
                    await node.connected()

    def deadline_ms(self, margin: float, key: str = "") -> int:
        node = self._owner(key) if key else None
        if node is not None:
            return node.deadline_ms(margin)
        # No node known: the deadline of a call sent now on a fresh connection.
        return int((time.time() + self.timeout - margin) * 1000)

    async def sync_clock(self) -> None:
        for address in list(self._primaries):
            node = self._nodes.get(address)
            if node is not None and node.is_connected:
                with contextlib.suppress(RedisError):
                    await node.sync_clock()

    async def aclose(self) -> None:
        for node in list(self._nodes.values()):
            await node.aclose()


class PipelinedSentinel(PipelinedRedis):
    """A `PipelinedRedis` on the primary the sentinels name, asked again at each connect."""

    def __init__(self, topology: Topology, timeout: float = 0.25, wait_replicas: int = 0) -> None:
        auth = ""
        if topology.password:
            user = quote(topology.username or "default", safe="")
            auth = f"{user}:{quote(topology.password, safe='')}@"
        super().__init__(f"redis://{auth}127.0.0.1:6379/{topology.db}", timeout, wait_replicas)
        self.service = topology.service
        self._sentinel = Sentinel(  # type: ignore[no-untyped-call]
            list(topology.nodes), socket_timeout=timeout, socket_connect_timeout=timeout
        )

    async def _address(self) -> tuple[str, int]:
        host, port = await self._sentinel.discover_master(self.service)
        return str(host), int(port)

    async def aclose(self) -> None:
        await super().aclose()
        for client in self._sentinel.sentinels:
            await client.aclose()


def open_pipelined(
    url: str, timeout: float, mode: RedisMode = "single", wait_replicas: int = 0
) -> HotConnection:
    """The hot path's pipelined connection for REDIS_URL in REDIS_MODE (not connected yet);
    its durable calls wait for `wait_replicas` replicas."""
    if mode == "single":
        return PipelinedRedis(url, timeout, wait_replicas)
    if mode == "cluster":
        return PipelinedCluster(parse(url, mode), timeout, wait_replicas)
    return PipelinedSentinel(parse(url, mode), timeout, wait_replicas)
