"""Fault tests (docs/contract.md#7-durability): real servers of this module's own, stopped, killed
and restarted under load. After each, every acknowledged record is in Postgres exactly once and
every campaign balances: budget = remaining + reserved + spent.

"Acknowledged" = the Lua script returned success: the point where the HTTP handler answers 2xx.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from redis.asyncio import Redis
from redis.exceptions import TimeoutError as RedisTimeoutError

from bidder.observability import Metrics
from store.hot import QUEUE_GROUP, Answered, HotState, connect, queue_keys
from store.local_servers import PostgresServer, RedisServer, free_port
from store.pipelined import PipelinedRedis
from store.postgres import create_pool, migrate
from store.records import RecordWriter, ensure_groups, queue_stats
from tests.support.factories import CREATIVE_VIDEO, PUB, SCREEN_MOVING
from tests.support.records import (
    PRICE,
    Expected,
    accept_offer,
    assert_balanced,
    assert_exactly_once,
    billing_payload,
    drain,
    make_records,
    pending_count,
    prepare,
    reserve_offer,
    tracking_payload,
)
from tests.support.servers import RECORD_AND_INVENTORY_TABLES

pytestmark = pytest.mark.fault

_CORE = {"channel": "core", "publisher": PUB, "creative": CREATIVE_VIDEO}


@dataclass
class Servers:
    redis: RedisServer
    postgres: PostgresServer


@pytest.fixture(scope="module")
def own_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """Servers for this module only: the session's servers stay untouched by the faults."""
    root = Path(tmp_path_factory.mktemp("fault-servers"))
    redis = RedisServer(root / "redis", free_port(), appendfsync="always")
    postgres = PostgresServer(root / "postgres", free_port())
    redis.start()
    postgres.start()
    try:
        yield Servers(redis, postgres)
    finally:
        postgres.discard()
        redis.stop()


@pytest.fixture
async def fresh(own_servers: Servers) -> AsyncIterator[tuple[Servers, Redis, asyncpg.Pool]]:
    """Both servers running and empty; a Redis client and a Postgres pool on them."""
    if own_servers.redis.proc is None:
        own_servers.redis.start()
    if own_servers.postgres.proc is None:
        own_servers.postgres.start()
    conn = await asyncpg.connect(own_servers.postgres.url)
    try:
        await migrate(conn)
        await conn.execute(f"TRUNCATE {RECORD_AND_INVENTORY_TABLES} CASCADE")
    finally:
        await conn.close()
    redis = connect(own_servers.redis.url, timeout=2.0)
    await redis.flushall()
    pool = await create_pool(own_servers.postgres.url, max_size=4)
    yield own_servers, redis, pool
    await pool.close()
    await redis.aclose()


def _writer(redis: Redis, pool: asyncpg.Pool, name: str, **kw: Any) -> RecordWriter:
    async def get_pool() -> asyncpg.Pool:
        return pool

    return RecordWriter(redis, get_pool, consumer=name, batch_size=100, **kw)


async def _stop_task(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _until_drained(redis: Redis, within: float = 20.0) -> None:
    """Wait for a running writer to empty every queue."""
    deadline = time.monotonic() + within
    depth = -1
    while depth != 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        with contextlib.suppress(Exception):
            depth = (await queue_stats(redis))[0]


async def test_postgres_stopped_under_load_then_everything_drains_exactly_once(
    fresh: tuple[Servers, Redis, asyncpg.Pool],
) -> None:
    servers, redis, pool = fresh
    hot, camp = await prepare(redis, servers.postgres.url)
    metrics = Metrics()
    writer = _writer(redis, pool, "w1", metrics=metrics)
    running = asyncio.ensure_future(writer.run())
    expected = await make_records(hot, camp, rounds=5)

    await asyncio.to_thread(servers.postgres.stop)
    # Postgres down: the hot path keeps acknowledging, the queue grows, nothing is dropped.
    during_outage = await make_records(hot, camp, rounds=20)
    expected.merge(during_outage)
    # The writer notices the outage on its next write attempt; on a busy machine that can take
    # longer than a fixed pause, so wait for it (bounded) rather than sleep a fixed second.
    failures = metrics.record_write_failures.labels("postgres")
    for _ in range(150):  # up to 15 s
        if failures._value.get() > 0:
            break
        await asyncio.sleep(0.1)
    assert failures._value.get() > 0
    depth, lag = await queue_stats(redis)
    assert depth >= during_outage.records > 0
    assert lag > 0

    await asyncio.to_thread(servers.postgres.start)
    expected.merge(await make_records(hot, camp, rounds=5))
    await _until_drained(redis)
    await _stop_task(running)
    assert (await queue_stats(redis))[0] == 0
    async with pool.acquire() as conn:
        await assert_exactly_once(conn, expected)
        await assert_balanced(redis, conn)
    assert await pending_count(redis) == 0


async def test_a_writer_cancelled_mid_batch_is_taken_over(
    fresh: tuple[Servers, Redis, asyncpg.Pool],
) -> None:
    """One writer dies after the commit and before the ack, another before the commit; a third
    reclaims both batches once they are idle long enough."""
    servers, redis, pool = fresh
    hot, camp = await prepare(redis, servers.postgres.url)
    expected = await make_records(hot, camp, rounds=2)
    hang = asyncio.Event()

    async def never_ack(entries: Any) -> None:
        await hang.wait()

    committed_then_dead = _writer(redis, pool, "dies-after-commit", block_ms=50)
    committed_then_dead.batch_size = 10
    committed_then_dead.ack = never_ack  # type: ignore[method-assign]
    task = asyncio.ensure_future(committed_then_dead.step())
    await asyncio.sleep(0.5)
    await _stop_task(task)

    async def never_connect() -> asyncpg.Pool:
        await hang.wait()
        raise AssertionError("unreachable")

    dead_before_commit = RecordWriter(redis, never_connect, consumer="dies-before-commit")
    task = asyncio.ensure_future(dead_before_commit.step())
    await asyncio.sleep(0.5)
    await _stop_task(task)
    assert await pending_count(redis) == expected.records  # all delivered, none acknowledged

    survivor = _writer(redis, pool, "survivor", claim_idle_ms=300, reclaim_every_s=0.1)
    await asyncio.sleep(0.3)
    await drain(survivor, redis)
    async with pool.acquire() as conn:
        await assert_exactly_once(conn, expected)
        await assert_balanced(redis, conn)
    assert await pending_count(redis) == 0


_ROOT = Path(__file__).resolve().parents[2]
_KILLED_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from store.hot import connect
    from store.postgres import create_pool
    from store.records import RecordWriter

    async def main() -> None:
        redis = connect(sys.argv[1], timeout=2.0)
        pool = await create_pool(sys.argv[2], max_size=2)

        async def get_pool():
            return pool

        async def hang(entries):
            print("committed", flush=True)
            await asyncio.sleep(3600)

        writer = RecordWriter(redis, get_pool, consumer="killed", batch_size=1000)
        writer.ack = hang
        await writer.step()

    asyncio.run(main())
    """
)


async def test_a_writer_process_killed_with_sigkill_is_taken_over(
    fresh: tuple[Servers, Redis, asyncpg.Pool],
) -> None:
    servers, redis, pool = fresh
    hot, camp = await prepare(redis, servers.postgres.url)
    await ensure_groups(redis)
    expected = await make_records(hot, camp, rounds=3)
    proc = subprocess.Popen(  # noqa: ASYNC220 - started once, waited for below
        [sys.executable, "-c", _KILLED_WRITER, servers.redis.url, servers.postgres.url],
        stdout=subprocess.PIPE,
        cwd=_ROOT,
        env={**os.environ, "PYTHONPATH": str(_ROOT)},
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 20)
        assert line.strip() == b"committed"
    finally:
        proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(proc.wait)
        if proc.stdout is not None:
            proc.stdout.close()
    assert await pending_count(redis) == expected.records
    expected.merge(await make_records(hot, camp, rounds=1))

    survivor = _writer(redis, pool, "survivor", claim_idle_ms=200, reclaim_every_s=0.1)
    await asyncio.sleep(0.3)
    await drain(survivor, redis)
    async with pool.acquire() as conn:
        await assert_exactly_once(conn, expected)
        await assert_balanced(redis, conn)


async def test_the_same_entries_written_by_two_writers_at_once_make_one_row_each(
    fresh: tuple[Servers, Redis, asyncpg.Pool],
) -> None:
    servers, redis, pool = fresh
    hot, camp = await prepare(redis, servers.postgres.url)
    expected = await make_records(hot, camp, rounds=4)
    first = _writer(redis, pool, "first")
    second = _writer(redis, pool, "second")
    batch = await first.read_batch()
    assert len(batch) == expected.records
    # The second writer takes the same entries over while the first still works on them.
    for key in queue_keys():
        ids = [e.entry_id for e in batch if e.stream == key]
        if ids:
            await redis.xclaim(key, QUEUE_GROUP, "second", 0, ids, justid=True)  # type: ignore[arg-type]
    await asyncio.gather(first.process(batch), second.process(batch))
    async with pool.acquire() as conn:
        await assert_exactly_once(conn, expected)
        await assert_balanced(redis, conn)
    assert await pending_count(redis) == 0


async def test_redis_killed_and_restarted_loses_nothing_acknowledged(
    fresh: tuple[Servers, Redis, asyncpg.Pool],
) -> None:
    servers, redis, pool = fresh
    hot, camp = await prepare(redis, servers.postgres.url)
    writer = _writer(redis, pool, "w1")
    running = asyncio.ensure_future(writer.run())
    expected = Expected()
    for _ in range(6):
        expected.merge(await make_records(hot, camp, rounds=2))
        await asyncio.sleep(0.05)  # the writer drains part of it meanwhile

    await asyncio.to_thread(servers.redis.stop, kill=True)  # SIGKILL: no shutdown save
    await asyncio.sleep(0.3)
    await asyncio.to_thread(servers.redis.start)
    # The pooled connections died with the server (requests on them got 503, never a 2xx):
    # drop them rather than spend the next acknowledged operations on discovering that.
    await redis.connection_pool.disconnect()
    expected.merge(await make_records(HotState(redis), camp, rounds=2))

    await _until_drained(redis)
    await _stop_task(running)
    async with pool.acquire() as conn:
        await assert_exactly_once(conn, expected)
        await assert_balanced(redis, conn)
    assert await pending_count(redis) == 0


async def test_an_answer_redis_runs_after_the_caller_gave_up_changes_nothing(
    fresh: tuple[Servers, Redis, asyncpg.Pool],
) -> None:
    """Redis stalls (here: SIGSTOP) with accepts and a reservation in flight. The caller times
    out and answers 503 "retry"; when Redis resumes, the scripts must not settle the deals or
    reserve the price that answer said did not happen, so the publisher's retry finds the
    offer still open and gets its deal. The second accept and the reservation are sent just
    before the first call times out and Redis resumes at once: every call in flight fails
    with the oldest, so their deadline is the oldest's, not theirs."""
    servers, redis, _ = fresh
    _, camp = await prepare(redis, servers.postgres.url)
    fast = PipelinedRedis(servers.redis.url, timeout=0.25)
    hot = HotState(redis, fast=fast)
    first, second = [await reserve_offer(hot, camp, "core") for _ in range(2)]
    loaded = await reserve_offer(hot, camp, "core")  # both scripts loaded before the stall
    await hot.respond(loaded, PUB, "reject", datetime.now(UTC), {"rejection_reason": None})
    before = (await hot.read_budgets(datetime.now(UTC)))[camp.id]
    queued = sum([await redis.xlen(key) for key in queue_keys()])
    proc = servers.redis.proc
    assert proc is not None
    await asyncio.sleep(0.3)  # the connection idle: its timeout clock starts with the next call

    def accept(offer_id: str) -> asyncio.Future[Any]:
        return asyncio.ensure_future(accept_offer(hot, offer_id))

    os.kill(proc.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        calls = [accept(first)]
        await asyncio.sleep(0.2)
        now = datetime.now(UTC)
        calls.append(accept(second))
        calls.append(
            asyncio.ensure_future(
                hot.reserve(camp, PRICE, SCREEN_MOVING, now, now + timedelta(minutes=5), _CORE)
            )
        )
        await asyncio.sleep(0)  # both queued
        # Sent while the first was still waiting (else this tests less than it says).
        assert time.monotonic() - started < 0.25
        for call in calls:
            with pytest.raises(RedisTimeoutError):
                await call
    finally:
        os.kill(proc.pid, signal.SIGCONT)  # at once: the later calls' own 125 ms not yet up
    await asyncio.sleep(0.2)  # Redis runs what it had received
    for offer_id in (first, second):
        held = await hot.offer(offer_id)
        assert held is not None
        assert held["status"] == "open"
    assert (await hot.read_budgets(datetime.now(UTC)))[camp.id] == before
    assert sum([await redis.xlen(key) for key in queue_keys()]) == queued  # no record queued

    for offer_id in (first, second):
        assert isinstance(await accept_offer(hot, offer_id), Answered)
    await fast.aclose()


async def test_the_answer_deadline_is_on_redis_clock(
    fresh: tuple[Servers, Redis, asyncpg.Pool],
) -> None:
    """The deadline is compared with Redis' `TIME`: the connection measures Redis' clock
    against this host's monotonic clock at connect (here the same host, so it reads as this
    host's wall clock), and a stale measurement is replaced by `sync_clock`."""
    servers, redis, _ = fresh
    _, camp = await prepare(redis, servers.postgres.url)
    fast = PipelinedRedis(servers.redis.url, timeout=0.25)
    hot = HotState(redis, fast=fast)
    offer_id = await reserve_offer(hot, camp, "core")
    local = time.time() - time.monotonic()
    assert fast.clock is not None
    assert local - 0.05 < fast.clock <= local + 0.005  # measured, erring early, not late
    fast.clock = local - 1.0  # as if Redis' clock ran a second behind: every deadline past
    with pytest.raises(RedisTimeoutError):
        await accept_offer(hot, offer_id)
    await fast.sync_clock()
    assert fast.clock is not None
    assert abs(fast.clock - local) < 0.05  # measured again
    assert isinstance(await accept_offer(hot, offer_id), Answered)
    await fast.aclose()


async def test_a_loss_a_pixel_or_a_playout_redis_runs_too_late_changes_nothing(
    fresh: tuple[Servers, Redis, asyncpg.Pool],
) -> None:
    """A loss notice, a tracking pixel and a playout confirmation answered 503 must not happen
    later: the SSP's or the player's retry would then count as a repeat (a loss notice's
    first call applied after its 503, once Redis resumes). Each carries the deadline the
    answer script does; here every deadline is past (Redis' clock read a second behind)."""
    servers, redis, _ = fresh
    _, camp = await prepare(redis, servers.postgres.url)
    fast = PipelinedRedis(servers.redis.url, timeout=0.25)
    hot = HotState(redis, fast=fast)
    lost, billed = [await reserve_offer(hot, camp, "openrtb") for _ in range(2)]
    answered = await accept_offer(hot, await reserve_offer(hot, camp, "core"))
    assert isinstance(answered, Answered)
    before = (await hot.read_budgets(datetime.now(UTC)))[camp.id]
    queued = sum([await redis.xlen(key) for key in queue_keys()])
    assert fast.clock is not None
    local = fast.clock
    fast.clock = local - 1.0

    now = datetime.now(UTC)
    with pytest.raises(RedisTimeoutError):
        await hot.loss(lost, now, {"reason": "3", "price": None, "body": None})
    with pytest.raises(RedisTimeoutError):
        await hot.track(
            billed, "impression", now, tracking_payload("impression"), billing_payload(PRICE)
        )
    with pytest.raises(RedisTimeoutError):
        await hot.confirm_playout(answered.deal_id, PUB, now, {"played_at": None})

    for offer_id in (lost, billed):
        held = await hot.offer(offer_id)
        assert held is not None
        assert held["status"] == "open"
        assert "loss_count" not in held
    assert (await hot.read_budgets(datetime.now(UTC)))[camp.id] == before
    assert sum([await redis.xlen(key) for key in queue_keys()]) == queued  # no record queued

    await fast.sync_clock()  # the retries, in time, are the first calls
    assert await hot.loss(lost, now, {"reason": "3", "price": None, "body": None}) == ("first", 1)
    tracked = await hot.track(
        billed, "impression", now, tracking_payload("impression"), billing_payload(PRICE)
    )
    assert tracked.status == "billed"
    played = await hot.confirm_playout(answered.deal_id, PUB, now, {"played_at": None})
    assert played.status == "new"
    await fast.aclose()
