"""The operations gauges: Redis and Postgres up, Redis round trips, the record queue, the
inventory's age, exhausted campaigns, the fleet's budget check and the signing secret's age.

One background loop per worker (Runtime.extra_loops) sets them every `WATCH_SECONDS`; the alert
rules and the dashboard of deploy/ read them. The budget check (`store.reconcile`, without
repair) reads every open offer, which costs a serving worker seconds of CPU on a large
inventory: it runs only in workers that also run the record writer (RECORD_WRITER=1, one at a
time under a Redis lock, every RECONCILE_CHECK_SECONDS), and `bidder reconcile` records its
result the same way, so a fleet whose writers run apart schedules that command instead. The
result is kept in Redis, so that every worker exports the same figure.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from redis.asyncio import Redis

from store.errors import OUTAGE, REDIS_DOWN
from store.reconcile import check_balances
from store.records import queue_stats

if TYPE_CHECKING:
    from bidder.runtime import Runtime

log = logging.getLogger("bidder.gauges")

WATCH_SECONDS = 5.0
_CHECK_TIMEOUT = 2.0
_BUDGET_CHECK_TIMEOUT = 30.0
#: The fleet's last budget check: {differing, checked_at}. Its lock: held for one interval.
RECONCILE_RESULT_KEY = "ops:reconcile:last"
RECONCILE_LOCK_KEY = "ops:reconcile:lock"


async def watch(rt: Runtime) -> None:
    """Set the gauges now, then every `WATCH_SECONDS` until the runtime stops."""
    m = rt.metrics
    rotated = rt.settings.secrets.signing_secrets_rotated_at
    m.secret_rotated.set(rotated.timestamp() if rotated is not None else 0)
    confirmed_at = time.monotonic()  # the age counts from the start until a first load
    while True:
        now = time.monotonic()
        # The last reload loaded the snapshot from Postgres or found it current there.
        fresh = rt.inventory.snapshot is not None and rt.inventory.source == "postgres"
        if fresh and rt.postgres.last_error is None:
            confirmed_at = now
        m.inventory_age.set(round(now - confirmed_at, 3))
        exhausted = sum(1 for b in rt.budgets.figures.values() if b.reserved + b.spent >= b.total)
        m.campaigns_known.set(len(rt.budgets.figures))
        m.campaigns_exhausted.set(exhausted)
        await _check_redis(rt)
        m.dependency_up.labels("postgres").set(1 if await rt.postgres.state() == "ok" else 0)
        try:  # bounded: a frozen Postgres must not hold this loop (or a pool connection)
            if rt.settings.records.writer:
                await asyncio.wait_for(_budget_check(rt), _BUDGET_CHECK_TIMEOUT)
            await _export_last_check(rt)
        except OUTAGE:
            pass  # dependency_up says so
        except Exception:
            log.exception("budget check failed")
        if not await rt.loops.sleep(WATCH_SECONDS):
            return


async def _check_redis(rt: Runtime) -> None:
    m = rt.metrics
    try:
        started = time.perf_counter()
        await asyncio.wait_for(rt.fast.execute("PING"), _CHECK_TIMEOUT)
        m.redis_latency.labels("hot").observe(time.perf_counter() - started)
        started = time.perf_counter()
        depth, lag = await asyncio.wait_for(queue_stats(rt.redis), _CHECK_TIMEOUT)
        m.redis_latency.labels("queue_stats").observe(time.perf_counter() - started)
    except REDIS_DOWN:
        m.dependency_up.labels("redis").set(0)
        return
    m.dependency_up.labels("redis").set(1)
    m.queue_depth.set(depth)
    m.queue_lag.set(lag)


async def _budget_check(rt: Runtime) -> None:
    """Run the fleet's budget check when its interval is up and no other process holds it."""
    interval = rt.settings.intervals.reconcile_check_seconds
    if await rt.redis.set(RECONCILE_LOCK_KEY, "1", nx=True, ex=max(1, round(interval))):
        try:
            pool = await rt.postgres.connect()
            async with pool.acquire() as conn:
                report = await check_balances(rt.redis, conn)
        except Exception:
            await rt.redis.delete(RECONCILE_LOCK_KEY)  # let another process try soon
            raise
        # One pass, no settling: a campaign mid-offer may differ for a moment, so the alert
        # asks for the difference to last (deploy/prometheus/alerts.yml).
        await record_check(rt.redis, len(report.differing))


async def record_check(redis: Redis, differing: int) -> None:
    """Keep a budget check's result where every worker's gauges read it."""
    await redis.hset(
        RECONCILE_RESULT_KEY, mapping={"differing": differing, "checked_at": time.time()}
    )


async def _export_last_check(rt: Runtime) -> None:
    """The fleet's last budget check, whoever made it, as this worker's gauges."""
    last = await rt.redis.hgetall(RECONCILE_RESULT_KEY)
    if last:
        rt.metrics.reconcile_differing.set(int(last[b"differing"]))
        rt.metrics.reconcile_age.set(round(time.time() - float(last[b"checked_at"]), 3))
