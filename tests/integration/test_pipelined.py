"""The auto-pipelined connection against real Redis: replies in order, scripts, failures."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import cast

import hiredis
import pytest
import uvloop
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from store.local_servers import free_port
from store.pipelined import BATCH_COMMANDS, PipelinedRedis, PipelinedScript
from tests.support.servers import ServerUrls


@pytest.fixture
async def piped(servers: ServerUrls, redis_client: Redis) -> AsyncIterator[PipelinedRedis]:
    client = PipelinedRedis(servers.redis_url, timeout=2.0)
    yield client
    await client.aclose()


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def fake_redis(handler: Handler, redis_timeout: float) -> AsyncIterator[PipelinedRedis]:
    """A pipelined client of a made-up server answering as `handler` does."""
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = PipelinedRedis(f"redis://127.0.0.1:{port}/0", timeout=redis_timeout)
    try:
        yield client
    finally:
        await client.aclose()
        server.close()
        await server.wait_closed()


async def test_concurrent_calls_get_their_own_replies(piped: PipelinedRedis) -> None:
    replies = await asyncio.gather(*[piped.execute("INCRBY", f"k{i % 7}", i) for i in range(500)])
    # Each INCRBY answers the running total of its key: the last one per key is the sum.
    totals: dict[int, int] = {}
    for i, reply in enumerate(replies):
        totals[i % 7] = totals.get(i % 7, 0) + i
        assert reply == totals[i % 7]


async def test_a_busy_tick_writes_a_batch_as_soon_as_it_is_full(piped: PipelinedRedis) -> None:
    """Commands of one tick leave together, but no write waits for more than BATCH_COMMANDS:
    Redis starts on the first ones while the loop is still making the others."""
    await piped.connected()
    transport = piped._transport
    assert transport is not None
    writes: list[int] = []

    class Counting:
        def write(self, data: bytes) -> None:
            writes.append(data.count(b"ECHO"))
            assert transport is not None
            transport.write(data)

        def is_closing(self) -> bool:
            assert transport is not None
            return transport.is_closing()

        def abort(self) -> None:
            assert transport is not None
            transport.abort()

    piped._transport = cast(asyncio.Transport, Counting())
    count = 2 * BATCH_COMMANDS + 3
    calls = [asyncio.ensure_future(piped.execute("ECHO", f"v{i}")) for i in range(count)]
    replies = await asyncio.gather(*calls)  # all their first steps run in one tick
    assert replies == [f"v{i}".encode() for i in range(count)]
    assert writes == [BATCH_COMMANDS, BATCH_COMMANDS, 3]
    one = await piped.execute("ECHO", "alone")  # a quiet tick: one command, one write
    assert one == b"alone"
    assert writes[3:] == [1]


async def test_script_loads_itself_once_and_runs(
    piped: PipelinedRedis, redis_client: Redis
) -> None:
    await redis_client.script_flush()
    script = PipelinedScript(piped, "return {KEYS[1], ARGV[1] + 1}")
    assert await script(["a"], [41]) == [b"a", 42]
    assert await script(["b"], [1]) == [b"b", 2]


async def test_error_reply_raises_response_error(piped: PipelinedRedis) -> None:
    await piped.execute("SET", "text", "x")
    with pytest.raises(ResponseError):
        await piped.execute("INCR", "text")
    assert await piped.execute("GET", "text") == b"x"  # the connection stays usable


async def test_refused_connection_fails_fast() -> None:
    client = PipelinedRedis(f"redis://127.0.0.1:{free_port()}/0", timeout=0.25)
    started = time.monotonic()
    with pytest.raises(RedisConnectionError):
        await client.execute("PING")
    assert time.monotonic() - started < 1.0
    await client.aclose()


async def test_silent_server_times_out_and_next_call_reconnects() -> None:
    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1000)  # never answers
        await asyncio.sleep(5)
        writer.close()

    async with fake_redis(swallow, redis_timeout=0.2) as client:
        started = time.monotonic()
        with pytest.raises(RedisTimeoutError):
            await client.execute("PING")
        assert time.monotonic() - started < 1.0


async def test_a_call_resuming_after_its_connection_died_gets_no_other_callers_reply() -> None:
    """A connection that dies right after connecting (here: the server closes it after the
    clock's TIME reply): the calls that waited for the connect must fail, not sit in the queue
    without their command sent, which would make the next connection's replies go to the
    wrong callers (an ECHO would get the TIME reply, every later caller its predecessor's)."""
    connections = 0

    async def dies_after_first_time(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        nonlocal connections
        connections += 1
        first = connections == 1
        parser = hiredis.Reader()
        while data := await reader.read(65536):
            parser.feed(data)
            while (command := parser.gets()) is not False:
                name = command[0].upper()
                if name == b"TIME":
                    writer.write(b"*2\r\n$10\r\n1763900000\r\n$1\r\n0\r\n")
                    if first:
                        writer.close()
                        return
                elif name == b"ECHO":
                    writer.write(b"$%d\r\n%s\r\n" % (len(command[1]), command[1]))
            await writer.drain()
        writer.close()

    async with fake_redis(dies_after_first_time, redis_timeout=0.5) as client:
        waiting = [asyncio.ensure_future(client.execute("ECHO", f"a{i}")) for i in range(3)]
        await asyncio.sleep(0.05)  # the first connection has come and gone
        later = [asyncio.ensure_future(client.execute("ECHO", f"b{i}")) for i in range(4)]
        first = await asyncio.gather(*waiting, return_exceptions=True)
        second = await asyncio.gather(*later, return_exceptions=True)
    # Each caller gets its own reply or the lost connection's error, nothing else.
    for i, outcome in enumerate(first):
        assert outcome == f"a{i}".encode() or isinstance(outcome, RedisConnectionError), outcome
    assert second == [b"b0", b"b1", b"b2", b"b3"]


async def test_calls_racing_the_connection_run_on_the_selected_database(
    servers: ServerUrls, redis_client: Redis
) -> None:
    """Calls made while the connection is being set up must wait behind its SELECT: none may
    run on database 0."""
    base = servers.redis_url.rsplit("/", 1)[0]
    other = Redis.from_url(f"{base}/7")
    zero = Redis.from_url(f"{base}/0")
    await other.flushdb()
    await zero.delete("race")
    client = PipelinedRedis(f"{base}/7", timeout=2.0)
    try:
        await asyncio.gather(*[client.execute("INCR", "race") for _ in range(200)])
        assert int(await other.get("race") or 0) == 200
        assert await zero.get("race") is None
    finally:
        await client.aclose()
        await other.flushdb()
        await other.aclose()
        await zero.aclose()


async def test_a_call_sent_between_two_looks_times_out_within_the_timeout() -> None:
    """The watchdog looks again when the oldest call's time is up: a call that goes unanswered
    fails about `timeout` after it was sent, not up to twice that (decisions: 503 within the
    Redis timeout). The watchdog starts with the connect's TIME; the call follows 50 ms later."""
    gate, silent = asyncio.Event(), asyncio.Event()

    async def answer_time_only(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while not silent.is_set():  # one TIME command a read: answer it
            if not await reader.read(1000):
                return
            if not silent.is_set():
                writer.write(b"*2\r\n$10\r\n1763900000\r\n$1\r\n0\r\n")
                await writer.drain()
        await gate.wait()
        writer.close()

    async with fake_redis(answer_time_only, redis_timeout=0.3) as client:
        try:
            await client.execute("TIME")  # connected (its own TIME answered); watchdog armed
            silent.set()
            await asyncio.sleep(0.05)
            started = time.monotonic()
            with pytest.raises(RedisTimeoutError):
                await client.execute("PING")
            assert time.monotonic() - started < 0.45
        finally:
            gate.set()


async def test_a_server_refusing_time_is_still_served() -> None:
    """The connection measures Redis' clock with TIME at connect; a proxy that refuses the
    command must not make every call fail: the clocks are then taken as one."""

    async def no_time(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        replies = iter([b"-ERR unknown command 'TIME'\r\n"])
        while data := await reader.read(1000):
            writer.write(next(replies, b"+PONG\r\n") * data.count(b"*"))
            await writer.drain()
        writer.close()

    async with fake_redis(no_time, redis_timeout=0.5) as client:
        assert await client.execute("PING") == b"PONG"
        assert client.clock is None  # not measured: deadlines on this host's clock


async def test_a_slow_time_reply_does_not_measure_the_clock() -> None:
    """A TIME reply that waited on something (a stall, a backlog) says little about when Redis
    read its clock; guessing the middle of the round trip made deadlines late. Such a sample
    is not used: the clock stays unmeasured (this host's) or at its last good value."""

    async def slow_time(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1000):
            await asyncio.sleep(0.1)  # the reply held back, with Redis' reading of its clock late
            stamp = f"{time.time() + 0.1:.6f}".split(".")
            reply = f"*2\r\n${len(stamp[0])}\r\n{stamp[0]}\r\n${len(stamp[1])}\r\n{stamp[1]}\r\n"
            writer.write(reply.encode() * data.count(b"*"))
            await writer.drain()
        writer.close()

    async with fake_redis(slow_time, redis_timeout=0.5) as client:
        await client.connected()
        assert client.clock is None
        client.clock = 12.5
        await client.sync_clock()
        assert client.clock == 12.5  # the last good value stays


def test_a_reply_that_arrived_while_the_loop_was_stalled_is_taken(servers: ServerUrls) -> None:
    """On uvloop (granian's loop) due timers run before the sockets are read. When another
    callback stalls the loop past the timeout while Redis answers in time, the reply is
    waiting unread as the watchdog looks: the call must get it, not a timeout (a timeout
    says that nothing happened, HotState's deadlines rely on it)."""

    class Stalling(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            time.sleep(0.4)

    async def scenario() -> object:
        loop = asyncio.get_running_loop()
        client = PipelinedRedis(servers.redis_url, timeout=0.25)
        ours, theirs = socket.socketpair()
        try:
            await client.execute("PING")
            await asyncio.sleep(0.3)  # idle: the watchdog starts again with the next call
            await loop.connect_accepted_socket(Stalling, ours)
            call = asyncio.ensure_future(client.execute("ECHO", "in time"))
            await asyncio.sleep(0)
            loop.call_soon(theirs.send, b"x")  # the stall begins right after the send
            return await call
        finally:
            await client.aclose()
            theirs.close()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(scenario()) == b"in time"
