"""What one worker process holds: connections, the current snapshot, the budget view, and the
background loops that keep them fresh (inventory reload, budget refresh, expiry sweep, record
writer)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime

import asyncpg
import msgspec
from redis.asyncio import Redis

from bidder.gauges import watch
from bidder.observability import Metrics
from bidder.settings import Settings
from bidder.signing import signer, token_verifies
from matching.engine import Budget
from matching.inventory import InventoryDocument
from matching.snapshot import SHARDS, ApiKeyInfo, Snapshot, build_snapshot
from store.errors import OUTAGE, POSTGRES_DOWN, REDIS_DOWN
from store.hot import (
    INVENTORY_COPY_FORMAT,
    HotState,
    connect,
    copy_stamp,
    decode_inventory_copy,
    encode_inventory_copy,
)
from store.inventory_repo import current_version, export_document, load_api_keys
from store.pipelined_cluster import open_pipelined
from store.postgres import create_pool
from store.records import run_writer

log = logging.getLogger("bidder.runtime")

_BUDGET_REFRESH_SECONDS = 1.0
# Reloads in a row whose sync left a newer top-up's total alone (HotState.sync_inventory)
# before the next one writes every total. Normally the next version's reload writes it; a stamp
# no version catches up with means Postgres was restored to an older version.
_MAX_KEEPING_RELOADS = 3
_BACKGROUND_REDIS_TIMEOUT = 2.0
#: How often Redis' clock is measured again against this host's (it is also at each connect).
_CLOCK_SYNC_SECONDS = 30.0
#: How long a caller waits for the Postgres liveness probe before calling Postgres unresponsive.
_POSTGRES_PROBE_WAIT_SECONDS = 0.5
#: The probe's own bound on each step (a free connection, the query, its release), so a lost
#: connection ends it well before the pool's 60 s `command_timeout` and a fresh probe can start.
_POSTGRES_PROBE_TIMEOUT_SECONDS = 5.0
#: How long `stop` waits for the cancelled background loops: a loop that does not end (a
#: cancellation swallowed somewhere below it) must not hold the worker's shutdown until
#: granian kills it, 30 s later, with the pool and the clients never closed.
_STOP_TASKS_SECONDS = 5.0
#: How long `stop` waits for the pool's connections to be released before it closes them.
_POOL_CLOSE_SECONDS = 5.0
#: Failures to read the inventory from Postgres that are a deploy's mistake, not an outage: a
#: worker does not serve the Redis copy on them (it stays unready, as a bad deploy should).
_MISCONFIGURED = (asyncpg.InvalidAuthorizationSpecificationError, asyncpg.InvalidCatalogNameError)


def _where(task: asyncio.Task[None]) -> tuple[str, str]:
    """The loop `task` runs and file:line where it is suspended (for the log)."""
    frames = task.get_stack()
    if not frames:
        return task.get_name(), "?"
    inner = frames[-1]
    return frames[0].f_code.co_qualname, f"{inner.f_code.co_filename}:{inner.f_lineno}"


def utcnow() -> datetime:
    return datetime.now(UTC)


class Runtime:
    """Per-process state. Handlers read `snapshot` and `budgets`; the inventory loop replaces
    the snapshot whole, the budget loop refreshes `budgets` a shard at a time."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # The hot path's scripts run on `fast` with the strict REDIS_TIMEOUT_SECONDS; this client
        # serves reads, syncs, the sweeper, the writer and the admin API, where a busy moment
        # should not turn into a 503.
        self.redis: Redis = connect(
            settings.redis_url,
            max(settings.redis_timeout_seconds, _BACKGROUND_REDIS_TIMEOUT),
            mode=settings.redis_mode,
        )
        self.fast = open_pipelined(
            settings.redis_url,
            settings.redis_timeout_seconds,
            settings.redis_mode,
            settings.redis_wait_replicas,
        )
        self.hot = HotState(self.redis, fast=self.fast)
        self.metrics = Metrics()
        self.pool: asyncpg.Pool | None = None
        self.snapshot: Snapshot | None = None
        # Where the snapshot came from: "postgres", or "redis copy" (load_inventory_copy).
        self.inventory_source = "postgres"
        self._copy_problem: str | None = None  # what keeping the copy last failed on
        self._refused_copy: str | None = None  # the stamp of a copy found unusable
        # Which secret signs this worker's copies: a token of its own, never the secret itself.
        self._copy_signed_by = signer(settings.signing_secret).token(b"copy")[:8]
        self.budgets: dict[str, Budget] = {}
        # Answers folded into `budgets` so far, and the count at each campaign's last one: a
        # refresh read leaves a campaign alone when an answer for it came in during the read.
        self._notes = 0
        self._noted: dict[str, int] = {}
        self.started_at = time.monotonic()
        self.last_postgres_error: str | None = None
        self._logged_failure: str | None = None  # the reload failure the log last reported
        self._redis_failing = False  # the log said Redis is unreachable, and not yet back
        self._keeping_reloads = 0  # reloads in a row whose sync left a top-up's total alone
        self._tasks: list[asyncio.Task[None]] = []
        self._postgres_probe: asyncio.Task[str] | None = None
        self._pool_lock = asyncio.Lock()
        self._stopping = asyncio.Event()
        self.extra_loops: list[Callable[[Runtime], Awaitable[None]]] = [watch]  # ops gauges
        if settings.record_writer:
            self.extra_loops.append(run_writer)

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, load the snapshot if Postgres answers, and start the background loops.
        Never fails on an unreachable dependency: /readyz reports it and the loops retry."""
        with contextlib.suppress(Exception):
            await self.connect_postgres()
        try:
            await self.reload_inventory()
        except OUTAGE as exc:
            await self._try_inventory_copy(exc)
        except Exception as exc:
            log.exception("inventory load failed")
            await self._try_inventory_copy(exc)
        self._spawn(self._inventory_loop())
        self._spawn(self._budget_loop())
        self._spawn(self._sweep_loop())
        for loop in self.extra_loops:
            self._spawn(loop(self))

    async def stop(self) -> None:
        """End the background loops, then close the pool and the clients; each step bounded,
        so a stuck one cannot hold the worker's shutdown until granian kills it."""
        self._stopping.set()
        await self._stop_tasks()
        probe = self._postgres_probe
        if probe is not None:
            probe.cancel()  # not awaited here: on a frozen server its cancellation waits too
        await self._close_pool()
        if probe is not None:  # closing the pool ended its connection, so it ends now
            await asyncio.wait({probe}, timeout=1)
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

    async def _stop_tasks(self) -> None:
        for task in self._tasks:
            task.cancel()
        if not self._tasks:
            return
        _, pending = await asyncio.wait(self._tasks, timeout=_STOP_TASKS_SECONDS)
        for task in self._tasks:
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: a loop's last error is not news at shutdown
        for task in pending:
            name, where = _where(task)
            log.warning(
                "background task did not stop; shutting down without it",
                extra={"task": name, "at": where},
            )

    async def _close_pool(self) -> None:
        if self.pool is None:
            return
        try:
            await asyncio.wait_for(self.pool.close(), _POOL_CLOSE_SECONDS)
        except TimeoutError:  # a connection never released: close them all at once
            log.warning("Postgres pool did not close in time; terminating its connections")
            self.pool.terminate()
        except Exception:  # noqa: S110 - shutting down: a failing close changes nothing
            pass

    def _spawn(self, coro: Awaitable[None]) -> None:
        self._tasks.append(asyncio.ensure_future(coro))

    async def sleep(self, seconds: float) -> bool:
        """Sleep unless stopping; False once the runtime is stopping."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)
        return not self._stopping.is_set()

    # -- Postgres and the snapshot -----------------------------------------------------------

    async def connect_postgres(self) -> asyncpg.Pool:
        """This worker's pool, created on first use. Callers racing the creation share one
        pool (each used to create its own, and all but the last were never closed)."""
        if self.pool is not None:
            return self.pool
        async with self._pool_lock:
            if self.pool is None:
                try:
                    self.pool = await create_pool(self.settings.database_url)
                    self.last_postgres_error = None
                except POSTGRES_DOWN as exc:
                    self.last_postgres_error = type(exc).__name__
                    raise
            return self.pool

    async def postgres_state(self, wait: float = _POSTGRES_PROBE_WAIT_SECONDS) -> str:
        """Postgres's state for /readyz and the endpoints that need it: "ok" when it answers
        `SELECT 1` within `wait` seconds, else "unresponsive" or "unreachable: <exception
        type>". One probe runs at a time in this process; callers share it and stop waiting
        after `wait` without cancelling it, because cancelling an asyncpg call to a server
        that does not answer waits on that server."""
        if self._stopping.is_set():  # no new probe (and no new pool) once stopping
            return "unresponsive"
        probe = self._postgres_probe
        if probe is None or probe.done():
            # A context of its own: started by whichever request asked first, it (and the
            # pool's reconnect task it may start) must not log under that request's id.
            probe = self._postgres_probe = asyncio.create_task(
                self._probe_postgres(), context=contextvars.Context()
            )
        done, _ = await asyncio.wait({probe}, timeout=wait)
        if not done or probe.cancelled():  # cancelled: the runtime is stopping
            return "unresponsive"
        return probe.result()

    async def _probe_postgres(self) -> str:
        """One liveness probe; never raises, so no probe's exception goes unretrieved when
        every caller has stopped waiting for it."""
        try:
            pool = await self.connect_postgres()
            async with pool.acquire(timeout=_POSTGRES_PROBE_TIMEOUT_SECONDS) as conn:
                await conn.fetchval("SELECT 1", timeout=_POSTGRES_PROBE_TIMEOUT_SECONDS)
        except TimeoutError:  # no answer in time: to the connection, or to the query
            return "unresponsive"
        except Exception as exc:
            return f"unreachable: {type(exc).__name__}"
        return "ok"

    async def reload_inventory(self) -> bool:
        """Build a new snapshot when the stored inventory version moved, or again after a sync
        that kept a newer top-up's total; True when it did."""
        pool = await self.connect_postgres()
        # One snapshot of Postgres: the version the totals are stamped with is the one the
        # document was read at.
        async with (
            pool.acquire() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            version = await current_version(conn)
            current = self.snapshot is not None and self.snapshot.version == version
            if current and not self._keeping_reloads:
                self.inventory_source = "postgres"  # a copy's version is Postgres' own again
                if await self._copy_wanted(version):  # lost, stale or of another layout
                    await self._keep_copy(
                        version, await export_document(conn), await load_api_keys(conn)
                    )
                return False
            doc = await export_document(conn)
            keys = await load_api_keys(conn)
        snapshot = await asyncio.to_thread(build_snapshot, doc, keys, version)
        kept = await self.hot.sync_inventory(
            {c.id: (c.shard, c.budget_micros) for c in snapshot.campaigns.values()},
            snapshot.billing_codes,
            version=version,
            force=self._keeping_reloads >= _MAX_KEEPING_RELOADS,
        )
        self._keeping_reloads = self._keeping_reloads + 1 if kept else 0
        if kept:
            log.info(
                "totals of newer top-ups kept; reloading again",
                extra={"kept": kept, "version": version},
            )
        self._install(snapshot, "postgres")
        if await self._copy_wanted(version):
            await self._keep_copy(version, doc, keys)
        return True

    def _install(self, snapshot: Snapshot, source: str) -> None:
        self.snapshot = snapshot
        self.inventory_source = source
        self.metrics.snapshot_builds.inc()
        # The snapshot lives until the next inventory change: exempt it (and the rest of the
        # heap as it stands) from the cyclic collector, so a full collection during traffic
        # walks only what requests allocate, not the inventory (~100 ms pauses otherwise).
        # Collect first, so no garbage cycle is frozen for good; a frozen old snapshot is
        # still freed by reference counting (it has no cycles).
        gc.collect()
        gc.freeze()
        log.info(
            "inventory loaded",
            extra={
                "version": snapshot.version,
                "source": source,
                "screens": len(snapshot.screens),
                "campaigns": len(snapshot.campaigns),
            },
        )

    # -- the inventory copy in Redis (docs/decisions.md, "A copy of the inventory in Redis") --

    async def _copy_wanted(self, version: int) -> bool:
        """Whether this worker should write the copy of `version`, which it holds and Postgres
        has: the copy in Redis is of another version or layout (or gone) and no other worker
        claimed the write. Checked at every poll (one HGET), so a copy that a late writer
        made older, that Redis lost, or that an older release wrote, is mended within a poll;
        the copy is the last one Postgres gave, never a newest-version-wins (after a restore
        of Postgres to an older version it follows Postgres)."""
        stamp = self._copy_stamp(version)
        try:
            if await self.hot.stored_copy_stamp() == stamp:
                return False
            return await self.hot.claim_copy_write(stamp)
        except REDIS_DOWN as exc:
            self._note_copy_problem(f"not checked: {type(exc).__name__}")
            return False

    async def _keep_copy(
        self, version: int, doc: InventoryDocument, keys: dict[bytes, ApiKeyInfo]
    ) -> None:
        """Write what this snapshot is built of to Redis, signed with the newest signing
        secret, for a worker that starts while Postgres is down (`load_inventory_copy`)."""
        secret = self.settings.signing_secret

        def encoded() -> tuple[bytes, str]:
            copy = encode_inventory_copy(version, doc, keys)
            return copy, signer(secret).token(copy)

        stamp = self._copy_stamp(version)
        try:
            copy, mac = await asyncio.to_thread(encoded)
            try:
                await self.hot.save_inventory_copy(stamp, mac, copy)
            finally:
                await self.hot.release_copy_claim(stamp)
        except REDIS_DOWN as exc:
            self._note_copy_problem(f"not written: {type(exc).__name__}")
            return
        self._note_copy_problem(None)
        log.info("inventory copy kept in Redis", extra={"version": version, "bytes": len(copy)})

    def _copy_stamp(self, version: int) -> str:
        return copy_stamp(version, self._copy_signed_by)

    def _note_copy_problem(self, problem: str | None) -> None:
        """Say in the log when keeping the copy starts and stops failing (not every poll)."""
        if problem != self._copy_problem:
            self._copy_problem = problem
            if problem is not None:
                log.warning("inventory copy in Redis %s", problem)

    async def load_inventory_copy(self) -> bool:
        """Serve the inventory copy Redis keeps (the version the last loading worker read)
        while Postgres cannot give the inventory: a worker (re)started during a Postgres
        outage serves, as the workers that were running keep serving their last snapshot. The
        next reload from Postgres replaces it. A copy of another layout, or signed by no
        configured secret (anything that can write to Redis could otherwise give a worker
        keys), is refused once and not read again until another copy is there. True when a
        copy was loaded."""
        found = await self.hot.load_inventory_copy()
        if found is None:
            return False
        stamp, mac, copy = found
        if stamp == self._refused_copy:
            return False
        layout, _, _ = stamp.partition(":")
        secrets = self.settings.signing_secrets

        def build() -> Snapshot | str:
            if layout != str(INVENTORY_COPY_FORMAT):
                return f"layout {layout}, this release reads {INVENTORY_COPY_FORMAT}"
            if not token_verifies(secrets, copy, mac):
                return "signed by no configured signing secret"
            try:
                kept = decode_inventory_copy(copy)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                return f"unreadable: {str(exc)[:200]}"
            return build_snapshot(kept.document, dict(kept.keys), kept.version)

        built = await asyncio.to_thread(build)
        if isinstance(built, str):
            self._refused_copy = stamp
            log.warning("inventory copy unusable", extra={"stamp": stamp, "reason": built})
            return False
        if self.snapshot is not None:  # Postgres answered meanwhile
            return False
        self._install(built, "redis copy")
        log.warning(
            "Postgres unreachable: serving the inventory copy kept in Redis",
            extra={"version": built.version},
        )
        return True

    async def _try_inventory_copy(self, failure: BaseException) -> None:
        """After a failed load from Postgres, the copy, if this worker has no snapshot yet and
        the failure is no misconfiguration: a wrong password or database name is a deploy to
        stop (unready), not an outage to ride out."""
        if self.snapshot is not None or isinstance(failure, _MISCONFIGURED):
            return
        try:
            await self.load_inventory_copy()
        except REDIS_DOWN as exc:
            self._note_copy_problem(f"not read: {type(exc).__name__}")
        except Exception:
            log.exception("inventory copy not loaded")

    async def _inventory_loop(self) -> None:
        while await self.sleep(self.settings.inventory_poll_seconds):
            try:
                await self.reload_inventory()
                self._note_reload_failure(None)
            except OUTAGE as exc:
                self._note_reload_failure(type(exc).__name__)
                await self._try_inventory_copy(exc)  # never loaded: Redis may have a copy now
            except Exception:
                log.exception("inventory reload failed")

    def _note_reload_failure(self, failure: str | None) -> None:
        """Keep the last reload failure for /readyz, and say in the log when it starts and
        ends (once each, not every poll): an operator sees why a worker is not ready."""
        if failure != self._logged_failure:
            self._logged_failure = failure
            if failure is not None:
                log.warning(
                    "inventory reload failing: Postgres or Redis unreachable",
                    extra={"error": failure, "ready": self.snapshot is not None},
                )
            else:
                log.info("inventory reload working again")
        self.last_postgres_error = failure

    # -- budgets and expiry ------------------------------------------------------------------

    async def _budget_loop(self) -> None:
        """Refresh the local budget view one shard a tick: every campaign's figures are at most
        about `_BUDGET_REFRESH_SECONDS` old, and no tick blocks the loop for long (reading all
        2,000 campaigns of the bench inventory at once takes ~6 ms of CPU, a stall every
        request arriving meanwhile would wait out). Every `_CLOCK_SYNC_SECONDS` it also
        measures Redis' clock again."""
        shard = 0
        seen: list[set[str]] = [set() for _ in range(SHARDS)]  # campaign ids per shard
        next_clock_sync = time.monotonic() + _CLOCK_SYNC_SECONDS
        while await self.sleep(_BUDGET_REFRESH_SECONDS / SHARDS):
            try:
                mark = self.budget_mark()
                fresh = await self.hot.read_budgets(utcnow(), (shard,))
                for gone in seen[shard].difference(fresh):  # no longer in Redis: unknown
                    self.budgets.pop(gone, None)
                self.fold_budgets(fresh, mark)
                seen[shard] = set(fresh)
                self._note_redis_failure(None)
            except REDIS_DOWN as exc:
                self._note_redis_failure(exc)
            shard = (shard + 1) % SHARDS
            if time.monotonic() >= next_clock_sync:  # the answer scripts' deadlines use it
                next_clock_sync = time.monotonic() + _CLOCK_SYNC_SECONDS
                with contextlib.suppress(*REDIS_DOWN):
                    await self.fast.sync_clock()

    def _note_redis_failure(self, exc: BaseException | None) -> None:
        """Say in the log when Redis stops answering this worker's budget refresh (every
        second) and when it answers again, once each: an operator sees why requests fail."""
        if (exc is not None) == self._redis_failing:
            return
        self._redis_failing = exc is not None
        if exc is not None:
            log.error(
                "Redis unreachable: the Core API answers 503 and bids are no-bids until it answers",
                extra={"error": f"{type(exc).__name__}: {exc}"},
            )
        else:
            log.info("Redis reachable again")

    def budget_mark(self) -> int:
        """Taken before reading budgets on another connection than the hot scripts' (the
        refresh, an admin read): `fold_budgets` then keeps every answer folded in since."""
        return self._notes

    def fold_budgets(self, fresh: Mapping[str, Budget], mark: int) -> None:
        """Fold budgets read since `mark` into the local view. A script's answer folded in
        while the read was on its way (numbered after `mark`) may be newer than the read
        (another connection): that campaign stays as the answer said."""
        noted = self._noted
        self.budgets.update(
            (cid, budget) for cid, budget in fresh.items() if noted.get(cid, -1) <= mark
        )

    def note_budget(self, campaign_id: str, budget: Budget | None) -> None:
        """Fold a script's answer into the local budget view (today's figures kept as seen).
        The hot scripts' answers come back in the order Redis ran them (one pipelined
        connection, `fast`), so the last answer folded in is the newest."""
        if budget is None:
            return
        self._notes += 1
        self._noted[campaign_id] = self._notes
        seen = self.budgets.get(campaign_id)
        daily_reserved = seen.daily_reserved if seen else 0
        daily_spent = seen.daily_spent if seen else 0
        self.budgets[campaign_id] = Budget(
            budget.total, budget.reserved, budget.spent, daily_reserved, daily_spent
        )

    async def _sweep_loop(self) -> None:
        while await self.sleep(self.settings.sweep_interval_seconds):
            try:
                expired = await self.hot.expire_due(utcnow())
                if expired:
                    log.info("offers expired", extra={"count": sum(expired.values())})
                    self.metrics.count_offer("expired", expired.get("core", 0))
                    self.metrics.count_bid_outcome("expired", expired.get("openrtb", 0))
            except REDIS_DOWN:
                continue
            except Exception:
                log.exception("expiry sweep failed")
