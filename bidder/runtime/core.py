"""`Runtime`: what one worker process holds, composed of its parts (the Postgres handle, the
inventory, the budget view, the background loops) and the Redis clients they share."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from redis.asyncio import Redis

from bidder.gauges import watch
from bidder.observability import Metrics
from bidder.runtime.budgets import Budgets
from bidder.runtime.inventory import InventoryLoader
from bidder.runtime.loops import Loops, budget_loop, inventory_loop, sweep_loop
from bidder.runtime.postgres import PostgresHandle
from bidder.runtime.rate_limit import RateLimiter, serve_workers
from bidder.settings import Settings
from matching.snapshot import SHARDS, Snapshot
from store.hot import HotState, connect, listpack_warning
from store.pipelined_cluster import open_pipelined
from store.records import run_writer

__all__ = ["Runtime"]

log = logging.getLogger("bidder.runtime")

#: The socket timeout of the Redis client that serves everything but the hot path's scripts.
_BACKGROUND_REDIS_TIMEOUT = 2.0


class Runtime:
    """Per-process state. Handlers read `inventory.snapshot` and `budgets.figures`; the
    inventory loop replaces the snapshot whole, the budget loop refreshes the figures a shard
    at a time."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # The hot path's scripts run on `fast` with the strict REDIS_TIMEOUT_SECONDS; this client
        # serves reads, syncs, the sweeper, the writer and the admin API, where a busy moment
        # should not turn into a 503.
        self.redis: Redis = connect(
            settings.redis.url,
            max(settings.redis.timeout_seconds, _BACKGROUND_REDIS_TIMEOUT),
            mode=settings.redis.mode,
        )
        self.fast = open_pipelined(
            settings.redis.url,
            settings.redis.timeout_seconds,
            settings.redis.mode,
            settings.redis.wait_replicas,
        )
        self.hot = HotState(
            self.redis,
            fast=self.fast,
            offer_form=settings.redis.offer_hash,
            count_day_reservations=settings.redis.count_day_reservations,
            slices=settings.redis.budget_slices,
            retention_ms=settings.offers.retention_seconds * 1000,
        )
        self.metrics = Metrics()
        stopping = asyncio.Event()
        self.postgres = PostgresHandle(settings.postgres.url, stopping)
        self.inventory = InventoryLoader(settings, self.postgres, self.hot, self.metrics)
        self.budgets = Budgets()
        self.budgets.home_ids = self._home_ids
        self._homes: tuple[Snapshot | None, list[frozenset[str]]] = (None, [])
        self.rate_limits = RateLimiter(settings, serve_workers())
        self.loops = Loops(stopping)
        #: Loops started beside the built-in ones, each given this runtime.
        self.extra_loops: list[Callable[[Runtime], Awaitable[None]]] = [watch]  # ops gauges
        if settings.records.writer:
            self.extra_loops.append(run_writer)

    def _home_ids(self, shard: int) -> frozenset[str]:
        """The ids of the current inventory's campaigns whose home is `shard`."""
        snapshot = self.inventory.snapshot
        if snapshot is None:
            return frozenset()
        of, homes = self._homes
        if of is not snapshot:
            by_shard: list[set[str]] = [set() for _ in range(SHARDS)]
            for campaign in snapshot.campaigns.values():
                by_shard[campaign.shard].add(campaign.id)
            homes = [frozenset(ids) for ids in by_shard]
            self._homes = (snapshot, homes)
        return homes[shard]

    async def start(self) -> None:
        """Connect, load the snapshot if Postgres answers, and start the background loops.
        Never fails on an unreachable dependency: /readyz reports it and the loops retry."""
        with contextlib.suppress(Exception):  # reported by /readyz, retried by the reload
            await self.postgres.connect()
        await self.inventory.load()
        settings, loops = self.settings, self.loops
        loops.spawn(
            inventory_loop(loops, self.inventory, settings.intervals.inventory_poll_seconds)
        )
        loops.spawn(budget_loop(loops, self.budgets, self.hot, self.fast))
        loops.spawn(
            sweep_loop(loops, self.hot, self.metrics, settings.intervals.sweep_interval_seconds)
        )
        loops.spawn(self._check_redis_settings())
        for loop in self.extra_loops:
            loops.spawn(loop(self))

    async def _check_redis_settings(self) -> None:
        """Warn once when Redis keeps the hot hashes as listpacks (store/hot/client.py); a look
        only, beside the start: Redis' own trouble is /readyz's."""
        with contextlib.suppress(Exception):
            warning = await listpack_warning(self.redis)
            if warning:
                log.warning(warning)

    async def stop(self) -> None:
        """End the background loops, then close the pool and the clients; each step bounded,
        so a stuck one cannot hold the worker's shutdown until granian kills it."""
        await self.loops.stop()
        await self.postgres.close()
        for name, closing in (("hot-path Redis", self.fast.aclose), ("Redis", self.redis.aclose)):
            try:
                await asyncio.wait_for(closing(), 2)
            except TimeoutError:
                log.warning("client did not close in 2 s; leaving it", extra={"client": name})
            except Exception:  # noqa: S110 - shutting down: a failing close changes nothing
                pass
        # Said last: when a worker is killed at shutdown, this line tells whether the wait
        # was in here (it is missing) or elsewhere (granian's own stop).
        log.info("runtime stopped")
