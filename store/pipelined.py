"""An auto-pipelined Redis connection for the hot path's script calls.

redis-py's asyncio client spends more CPU per call than Redis spends running the script
(performance-notes.md: the client is the largest single cost on the hot path). This connection
keeps what is expensive out of the per-call path:

- commands issued during one event-loop tick leave together (auto-pipelining, as ioredis
  does), so concurrent requests share syscalls and round trips; a write leaves as soon as it
  holds `BATCH_COMMANDS`, so Redis runs the first scripts of a busy tick while the loop is
  still making the rest, instead of the loop idling while Redis runs them all
  (docs/performance.md: at 32 concurrent offer requests, one write a tick left the worker
  20 % idle);
- replies are parsed by hiredis and resolve the waiting futures in order;
- no connection-pool checkout per call: one connection per worker, reopened on failure.

Errors are redis-py's exception types, so callers handle one family: a refused or broken
connection is `ConnectionError`, a reply slower than `timeout` is `TimeoutError` (both fail every
call in flight, and the next call reconnects), a script error is `ResponseError`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import deque
from collections.abc import Coroutine
from typing import Any, Protocol
from urllib.parse import urlsplit

import hiredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

Arg = str | int | bytes
# After a look finds a call out of time, how long the loop gets to read a waiting reply.
_CONFIRM_S = 0.001
# A TIME round trip slower than this does not measure Redis' clock (it waited on something).
_CLOCK_ROUND_TRIP_S = 0.02
#: The most commands one write waits for: a tick that queues more sends them in writes of this
#: many (and the rest at the end of the tick).
BATCH_COMMANDS = 8
#: Of the timeout, how long a WAIT for the replicas may take (the rest is the reply's way).
_WAIT_SHARE = 0.5
#: After a WAIT no replica answered in time, how long durable calls do not wait.
_WAIT_OFF_S = 5.0

_log = logging.getLogger("bidder.redis")


def _copy_outcome(source: asyncio.Future[Any], target: asyncio.Future[Any]) -> None:
    if target.done():
        return
    if source.cancelled():
        target.cancel()
    elif source.exception() is not None:
        target.set_exception(source.exception())  # type: ignore[arg-type]
    else:
        target.set_result(source.result())


class HotConnection(Protocol):
    """What the hot state needs of its pipelined connection: one server (`PipelinedRedis`),
    or a cluster's primaries (store/pipelined_cluster.py)."""

    timeout: float

    @property
    def is_connected(self) -> bool: ...

    async def connected(self, key: str = "") -> None: ...

    def deadline_ms(self, margin: float, key: str = "") -> int: ...

    async def execute(self, *command: Arg) -> Any: ...

    def execute_keyed(
        self, key: str, *command: Arg, durable: bool = False
    ) -> Coroutine[Any, Any, Any]: ...

    async def sync_clock(self) -> None: ...

    async def aclose(self) -> None: ...


class _Protocol(asyncio.Protocol):
    def __init__(self, owner: PipelinedRedis) -> None:
        self.owner = owner
        self.reader = hiredis.Reader()

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        pending = self.owner._pending
        while True:
            reply = self.reader.gets()
            if reply is False:
                return
            if not pending:  # a reply nobody waits for: the stream is out of step
                self.owner._fail(RedisConnectionError("unexpected reply from Redis"))
                return
            future, _ = pending.popleft()
            if future.done():
                continue
            if isinstance(reply, hiredis.ReplyError):
                message = str(reply)
                if message.startswith("READONLY"):
                    # A primary turned replica under us (a failover): connect again, to the
                    # server that is primary now (a Sentinel-watched connection asks again).
                    self.owner.drop_soon()
                error: Exception = (
                    NoScriptError(message)
                    if message.startswith("NOSCRIPT")
                    else ResponseError(message)
                )
                future.set_exception(error)
            else:
                future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner._fail(RedisConnectionError(f"connection to Redis lost: {exc or 'closed'}"))


class PipelinedRedis:
    """One auto-pipelined connection to one Redis server (host/port/db from a redis:// URL)."""

    def __init__(self, url: str, timeout: float = 0.25, wait_replicas: int = 0) -> None:
        self.url = url
        #: How many replicas a durable call waits for (WAIT) before its reply is returned.
        self.wait_replicas = wait_replicas
        self._waiter: asyncio.Future[int] | None = None  # the WAIT the tick's durable calls share
        self._wait_off_until = 0.0  # WAIT skipped until then (no replica acknowledged in time)
        parts = urlsplit(url)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 6379
        self._db = int(parts.path.lstrip("/") or 0)
        self._password = parts.password
        self._username = parts.username
        self.timeout = timeout
        self._transport: asyncio.Transport | None = None
        self._connecting: asyncio.Future[None] | None = None
        self._pending: deque[tuple[asyncio.Future[Any], float]] = deque()
        self._outbox: list[bytes] = []
        self._flush_scheduled = False
        self._watchdog: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Redis' clock (epoch seconds) minus this host's monotonic clock, measured at each
        #: connect and by `sync_clock`; None until a measurement was good enough.
        self.clock: float | None = None
        self._expiring: asyncio.Future[Any] | None = None  # the call a look found out of time

    # -- connection --------------------------------------------------------------------------

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        try:
            host, port = await self._address()
            transport, _ = await asyncio.wait_for(
                loop.create_connection(lambda: _Protocol(self), host, port),
                self.timeout,
            )
        except (OSError, TimeoutError) as exc:
            raise RedisConnectionError(f"cannot connect to Redis: {exc}") from exc
        self._transport = transport  # uvloop's transport is duck-typed, not a subclass
        setup: list[tuple[Arg, ...]] = []
        if self._password:
            setup.append(("AUTH", self._username or "default", self._password))
        if self._db:
            setup.append(("SELECT", self._db))
        # Queued at once, before anything else can run: a call arriving meanwhile sees the
        # transport and is queued behind them, so it never runs unauthenticated or on db 0.
        replies = [self._enqueue(loop, command) for command in setup]
        for reply in replies:
            await reply
        await self._measure_clock(self._enqueue(loop, ("TIME",)))

    async def _address(self) -> tuple[str, int]:
        """The server to connect to (a Sentinel-watched connection asks the sentinels)."""
        return self._host, self._port

    async def sync_clock(self) -> None:
        """Measure Redis' clock against this host's again (`clock`)."""
        await self._measure_clock(self.execute("TIME"))

    async def _measure_clock(self, time_reply: Any) -> None:
        """Redis' clock minus this host's monotonic clock, erring low: Redis read its clock
        at some moment of the round trip, at the latest when the reply arrived, so its time
        minus that arrival can only be early, and so are the deadlines built on it (a later
        one would let a script run after its caller gave up). Round trips slower than
        `_CLOCK_ROUND_TRIP_S` (a stall, a backlog) are not used: the last good value stays."""
        before = time.monotonic()
        try:
            reply = await time_reply
            redis_now = int(reply[0]) + int(reply[1]) / 1e6
        except (ResponseError, ValueError, TypeError, IndexError):
            return  # a proxy that refuses TIME, or an odd reply: serve on the local clock
        after = time.monotonic()
        if after - before <= _CLOCK_ROUND_TRIP_S:
            self.clock = redis_now - after

    def deadline_ms(self, margin: float, key: str = "") -> int:
        """The epoch ms, on Redis' clock, after which a call sent now has been given up on,
        less `margin`: every call in flight fails once the oldest is `timeout` old."""
        started = self._pending[0][1] if self._pending else time.monotonic()
        clock = self.clock if self.clock is not None else time.time() - time.monotonic()
        return int((started + self.timeout - margin + clock) * 1000)

    @property
    def is_connected(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    async def connected(self, key: str = "") -> None:
        """Connect now if not connected (the clock is measured as part of connecting). `key`
        names the data the next call is about (one server holds all of it here)."""
        if self._loop is not None and self._loop is not asyncio.get_running_loop():
            return  # `execute` starts over on this loop
        await self._ensure_connected()

    async def _ensure_connected(self) -> None:
        if self.is_connected:
            return
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._connect())
        connecting = self._connecting
        try:
            await asyncio.shield(connecting)
        finally:
            if self._connecting is connecting and connecting.done():
                self._connecting = None

    def _fail(self, error: Exception) -> None:
        """Fail every call in flight and drop the connection; the next call reconnects."""
        transport, self._transport = self._transport, None
        self._outbox.clear()
        pending, self._pending = self._pending, deque()
        for future, _ in pending:
            if not future.done():
                future.set_exception(error)
        if transport is not None and not transport.is_closing():
            transport.abort()

    def drop_soon(self) -> None:
        """Drop the connection once this reply's turn is over; the next call reconnects."""
        if self._loop is not None:
            self._loop.call_soon(self._fail, RedisConnectionError("Redis turned read-only"))

    async def aclose(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        self._fail(RedisConnectionError("client closed"))

    # -- sending -----------------------------------------------------------------------------

    def _flush(self) -> None:
        """The end of a tick's write (scheduled by the tick's first command); one WAIT behind
        the tick's commands when a durable call asked for it."""
        self._flush_scheduled = False
        waiter, self._waiter = self._waiter, None
        if waiter is not None and self._loop is not None:
            wait_ms = max(1, int(self.timeout * 1000 * _WAIT_SHARE))
            try:
                reply = self._enqueue(self._loop, ("WAIT", self.wait_replicas, wait_ms))
            except RedisConnectionError as exc:
                waiter.set_exception(exc)
            else:
                reply.add_done_callback(lambda done: _copy_outcome(done, waiter))
        self._write_outbox()

    def _write_outbox(self) -> None:
        if self._outbox and self._transport is not None:
            self._transport.write(b"".join(self._outbox))
        self._outbox.clear()

    def _arm_watchdog(self, delay: float | None = None) -> None:
        if self._watchdog is None and self._loop is not None:
            wait = self.timeout if delay is None else delay
            self._watchdog = self._loop.call_later(wait, self._check_timeouts)

    def _check_timeouts(self) -> None:
        self._watchdog = None
        if not self._pending:
            return
        oldest, sent_at = self._pending[0]
        age = time.monotonic() - sent_at
        if age >= self.timeout:
            if self._expiring is not oldest and self._loop is not None:
                # Let the loop read its sockets once before failing: after a stall of this
                # loop (uvloop runs due timers before polling), the reply may be waiting
                # unread, and a call Redis answered in time must not be reported as a timeout.
                self._expiring = oldest
                self._watchdog = self._loop.call_later(_CONFIRM_S, self._check_timeouts)
                return
            self._fail(RedisTimeoutError(f"no reply from Redis within {self.timeout}s"))
            return
        # Look again when the oldest call's time is up, not a whole timeout later: a call sent
        # just after a look would otherwise wait almost twice the timeout for its 503.
        self._arm_watchdog(self.timeout - age)

    def _enqueue(self, loop: asyncio.AbstractEventLoop, command: tuple[Arg, ...]) -> Any:
        """Queue `command` for this tick's write (written at once when that makes
        `BATCH_COMMANDS`); the future of its reply. Refused at once when the connection is
        gone: a caller that resumes after its connect while the connection already died must
        not leave a future in `_pending` without its command on the wire, or the next
        connection's first reply (and every one after it) would go to the wrong caller."""
        transport = self._transport
        if transport is None or transport.is_closing():
            raise RedisConnectionError("connection to Redis lost")
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.append((future, time.monotonic()))
        outbox = self._outbox
        outbox.append(hiredis.pack_command(command))  # type: ignore[arg-type]
        if len(outbox) >= BATCH_COMMANDS:
            self._write_outbox()  # the tick's flush, already scheduled, takes what follows
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        if self._watchdog is None:
            self._arm_watchdog()
        return future

    async def _send(self, command: tuple[Arg, ...]) -> Any:
        return await self._enqueue(asyncio.get_running_loop(), command)

    async def execute(self, *command: Arg) -> Any:
        """Send one command (pipelined with the others of this tick) and return its reply."""
        transport = self._transport
        if transport is not None and self._loop is not None and not transport.is_closing():
            loop = asyncio.get_running_loop()
            if loop is self._loop:  # connected on this loop: the common case, no extra await
                return await self._enqueue(loop, command)
        if self._loop is not None and self._loop is not asyncio.get_running_loop():
            # Used from another event loop than the one it connected on (a test harness, a
            # forked worker): start over on this loop.
            self._fail(RedisConnectionError("event loop changed"))
            if self._watchdog is not None:  # the old loop's timer: it would never fire here
                self._watchdog.cancel()
                self._watchdog = None
            self._loop = None
            self._connecting = None
        await self._ensure_connected()
        return await self._send(command)

    def execute_keyed(
        self, key: str, *command: Arg, durable: bool = False
    ) -> Coroutine[Any, Any, Any]:
        """`execute` (`execute_durable` with `durable`), for a command about `key` (a cluster
        routes it by the key's slot). The call itself, not a coroutine around it: no frame
        more per hot-path script."""
        return self.execute_durable(*command) if durable else self.execute(*command)

    async def execute_durable(self, *command: Arg) -> Any:
        """`execute`, the reply returned once `wait_replicas` replicas hold the change too
        (one WAIT behind this tick's commands, shared by its durable calls), so a failover
        that promotes one of them keeps it. A WAIT that no replica answers in time (a half of
        `timeout`) still returns the reply (the change is made: a 503 would be untrue), logs
        it, and WAIT is skipped for `_WAIT_OFF_S` (no replica in step: waiting on each call
        would stall this connection's every call)."""
        if self.wait_replicas <= 0 or time.monotonic() < self._wait_off_until:
            return await self.execute(*command)
        reply = self.execute(*command)
        loop = asyncio.get_running_loop()
        if self._waiter is None:
            self._waiter = loop.create_future()
            if not self._flush_scheduled:
                self._flush_scheduled = True
                loop.call_soon(self._flush)
        waiter = self._waiter
        result = await reply
        acknowledged = await waiter
        if int(acknowledged) < self.wait_replicas and time.monotonic() >= self._wait_off_until:
            self._wait_off_until = time.monotonic() + _WAIT_OFF_S
            _log.warning(
                "no replica acknowledged a durable write in time: WAIT off for a while",
                extra={"server": self.url.rpartition("@")[2], "replicas": int(acknowledged)},
            )
        return result

    async def execute_asking(self, *command: Arg) -> Any:
        """`command` right behind ASKING on this connection (a cluster's slot in migration)."""
        await self.execute("PING")  # connected, on this loop
        loop = asyncio.get_running_loop()
        asking = self._enqueue(loop, ("ASKING",))
        reply = self._enqueue(loop, command)
        await asking
        return await reply


class PipelinedScript:
    """A Lua script run with EVALSHA on a PipelinedRedis, loaded on first NOSCRIPT."""

    def __init__(self, client: HotConnection, source: str) -> None:
        self.client = client
        self.source = source
        self.sha = hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()

    async def __call__(self, keys: list[str], args: list[Arg], *, durable: bool = False) -> Any:
        """Run the script; with `durable`, its reply waits for the replicas (execute_durable)."""
        command: tuple[Arg, ...] = ("EVALSHA", self.sha, len(keys), *keys, *args)
        key = keys[0] if keys else ""
        try:
            return await self.client.execute_keyed(key, *command, durable=durable)
        except NoScriptError:
            # Loaded on every primary of a cluster: a call redirected to another one (a slot
            # migrating, a failover) finds it there too.
            await self.client.execute("SCRIPT", "LOAD", self.source)
            return await self.client.execute_keyed(key, *command, durable=durable)
