"""The worker's background loops (inventory reload, budget refresh, expiry sweep, and any
extra loop such as the record writer) and their bounded shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Awaitable

from bidder.observability import Metrics
from bidder.runtime.budgets import Budgets
from bidder.runtime.clock import utcnow
from bidder.runtime.inventory import InventoryLoader
from matching.snapshot import SHARDS
from store.errors import REDIS_DOWN
from store.hot import HotState
from store.pipelined import HotConnection

__all__ = ["Loops", "budget_loop", "inventory_loop", "parent_loop", "sweep_loop"]

log = logging.getLogger("bidder.runtime")

#: How often Redis' clock is measured again against this host's (it is also at each connect).
_CLOCK_SYNC_SECONDS = 30.0
#: How long `stop` waits for the cancelled loops: a loop that does not end (a cancellation
#: swallowed somewhere below it) must not hold the worker's shutdown until granian kills it,
#: 30 s later, with the pool and the clients never closed.
_STOP_TASKS_SECONDS = 5.0


class Loops:
    """The running loops. `stopping` is the worker's: set, every loop's `sleep` ends."""

    def __init__(self, stopping: asyncio.Event) -> None:
        self.stopping = stopping
        self.tasks: list[asyncio.Task[None]] = []
        #: How long `stop` waits for the cancelled loops.
        self.stop_wait = _STOP_TASKS_SECONDS

    def spawn(self, coro: Awaitable[None]) -> None:
        self.tasks.append(asyncio.ensure_future(coro))

    async def sleep(self, seconds: float) -> bool:
        """Sleep unless stopping; False once the worker is stopping."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)
        return not self.stopping.is_set()

    async def stop(self) -> None:
        """Cancel every loop and wait `stop_wait` seconds at most; a loop still running then
        is named in the log with where it is suspended."""
        self.stopping.set()
        for task in self.tasks:
            task.cancel()
        if not self.tasks:
            return
        _, pending = await asyncio.wait(self.tasks, timeout=self.stop_wait)
        for task in self.tasks:
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: a loop's last error is not news at shutdown
        for task in pending:
            name, where = _where(task)
            log.warning(
                "background task did not stop; shutting down without it",
                extra={"task": name, "at": where},
            )


async def inventory_loop(loops: Loops, inventory: InventoryLoader, every: float) -> None:
    while await loops.sleep(every):
        await inventory.poll()


async def budget_loop(loops: Loops, budgets: Budgets, hot: HotState, fast: HotConnection) -> None:
    """Refresh the budget view one shard a tick: every campaign's figures are at most about
    `budgets.refresh_seconds` old, and no tick blocks the event loop for long (reading all
    2,000 campaigns of the bench inventory at once takes ~6 ms of CPU, a stall every request
    arriving meanwhile would wait out). Every `_CLOCK_SYNC_SECONDS` it also measures Redis'
    clock again."""
    shard = 0
    next_clock_sync = time.monotonic() + _CLOCK_SYNC_SECONDS
    while await loops.sleep(budgets.refresh_seconds / SHARDS):
        await budgets.refresh(hot, shard)
        shard = (shard + 1) % SHARDS
        if time.monotonic() >= next_clock_sync:  # the answer scripts' deadlines use it
            next_clock_sync = time.monotonic() + _CLOCK_SYNC_SECONDS
            with contextlib.suppress(*REDIS_DOWN):
                await fast.sync_clock()


async def sweep_loop(loops: Loops, hot: HotState, metrics: Metrics, every: float) -> None:
    """Expire the offers and bids past their deadline, releasing what they reserved."""
    while await loops.sleep(every):
        try:
            expired = await hot.expire_due(utcnow())
            if expired:
                log.info("offers expired", extra={"count": sum(expired.values())})
                metrics.count_offer("expired", expired.get("core", 0))
                metrics.count_bid_outcome("expired", expired.get("openrtb", 0))
        except REDIS_DOWN:
            continue
        except Exception:
            log.exception("expiry sweep failed")


#: How often a worker checks that the process that started it is still there.
_PARENT_CHECK_SECONDS = 1.0


async def parent_loop(loops: Loops) -> None:
    """Stop this worker (SIGTERM to itself: granian's graceful stop) once the process that
    started it has ended: a `bidder serve` or granian killed with SIGKILL runs no clean-up,
    and its orphaned workers would go on answering on the port with nobody to stop them."""
    parent = os.getppid()
    while await loops.sleep(_PARENT_CHECK_SECONDS):
        if os.getppid() != parent:
            log.error(
                "the process that started this worker ended; stopping", extra={"parent": parent}
            )
            os.kill(os.getpid(), signal.SIGTERM)
            return


def _where(task: asyncio.Task[None]) -> tuple[str, str]:
    """The loop `task` runs and file:line where it is suspended (for the log)."""
    frames = task.get_stack()
    if not frames:
        return task.get_name(), "?"
    inner = frames[-1]
    return frames[0].f_code.co_qualname, f"{inner.f_code.co_filename}:{inner.f_lineno}"
