"""The record writer: drains the per-shard record queues (`{bN}:q`) into Postgres.

A consumer group (`writers`) spans all 16 streams, so any number of writers share the work and
each entry is delivered to one of them. A writer reads a batch, writes it to Postgres in one
transaction (store/record_rows.py: idempotent inserts), and only after the commit acknowledges
and deletes the entries. So:

- Postgres down: the batch stays pending and is retried with exponential back-off (capped at
  2 s); the queue grows in Redis, nothing is dropped. The writer keeps its pending entries fresh
  (XCLAIM JUSTID) so no other writer steals them meanwhile.
- A writer dies mid-batch: its entries stay pending; after `claim_idle_ms` (30 s) any other
  writer takes them over with XAUTOCLAIM and writes them again (the inserts are idempotent).
- The same entry delivered twice: the second write changes nothing.
- A poison entry: any exception while decoding it, or while writing a batch that is not an
  outage of Postgres, isolates it. An entry that cannot be decoded is dead-lettered at once.
  A batch Postgres (or the driver) refuses is bisected, each half its own transaction, until
  the bad entry is alone, so every other entry of the batch commits and is acknowledged; the
  lone entry then moves to the dead-letter stream `{bN}:dead` of its shard (with its error and
  a `reason`), atomically with its acknowledgement, and is counted
  (`records_dead_lettered_total{type,reason}`) and logged. A refusal that may pass later (a
  missing deal: a playout whose `offer_accepted` is still with another writer; or an error of
  no known data class) is left pending and retried: by the same writer after a short pause
  (0.1 s, doubling, six times), then through reclaim; it is dead-lettered after
  `MAX_DELIVERIES`. Only an outage (no connection, a server shutting down, out of resources,
  a serialization failure) retries the whole batch, and it never dead-letters anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import asyncpg
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from store.errors import POSTGRES_CLOSED, POSTGRES_UNREACHABLE, REDIS_DOWN
from store.hot.client import connect, is_cluster
from store.hot.keys import QUEUE_GROUP, queue_keys, tag
from store.record_rows import RECORD_TYPES, Entry, RecordError, Rows, add_entry, write_rows

log = logging.getLogger("store.records")

CLAIM_IDLE_MS = 30_000
MAX_DELIVERIES = 5
_RECLAIM_EVERY_S = 5.0
_KEEPALIVE_EVERY_S = 10.0
_STATS_EVERY_S = 1.0
_BACKOFF_START_S = 0.05
_BACKOFF_CAP_S = 2.0
_IDLE_CONSUMER_MS = 3_600_000
#: On a Redis Cluster (no blocking read over every stream), the pause after an empty read.
_CLUSTER_POLL_MS = 20
# Pauses before this writer tries again an entry that waits for a parent row another writer
# holds (the deal of a playout confirmed right after its accept), or that an error of no known
# class refused; after them, the reclaim.
_PARENT_RETRY_S = (0.1, 0.2, 0.4, 0.8, 1.6, 3.2)
# Errors an entry's own content causes: retrying the same rows fails the same way, so a lone
# entry refused with one of them is dead-lettered at once.
_DATA_ERRORS: tuple[type[BaseException], ...] = (
    RecordError,
    asyncpg.DataError,
    asyncpg.IntegrityConstraintViolationError,  # a foreign key may still arrive: see _refused
    asyncpg.exceptions.ProgramLimitExceededError,
    asyncpg.exceptions.CardinalityViolationError,
    ValueError,  # asyncpg's client-side "invalid input for query argument" is a ValueError
    TypeError,
    ArithmeticError,  # decimal.Overflow and the like, on a value no column holds
)
# Failures outside every record's content: Postgres unreachable, shutting down, out of
# resources, or a transaction to run again. The whole batch is retried, nothing dead-lettered.
_OUTAGES: tuple[type[BaseException], ...] = (
    *POSTGRES_UNREACHABLE,
    *POSTGRES_CLOSED,
    # The driver's state confused by a server shutting down mid-release ("cannot switch to
    # state 15"): the batch is retried like any outage, not left pending for the 30 s reclaim
    # (the writes are idempotent).
    asyncpg.InternalClientError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError,
    asyncpg.exceptions.PostgresSystemError,
    asyncpg.exceptions.TransactionRollbackError,
)


def dead_letter_reason(exc: BaseException, *, decoding: bool = False) -> str:
    """The `reason` of a dead-lettered entry: `undecodable` (its fields are no record),
    `missing_parent` (its deal never came), `refused` (Postgres or the driver refused a value),
    `unexpected` (any other error, after its retries)."""
    if decoding:
        return "undecodable"
    if isinstance(exc, asyncpg.ForeignKeyViolationError):
        return "missing_parent"
    if isinstance(exc, _DATA_ERRORS):
        return "refused"
    return "unexpected"


def dead_letter_key(shard: int) -> str:
    return f"{tag(shard)}:dead"


def shard_of_stream(stream: str) -> int:
    """`{b7}:q` -> 7."""
    return int(stream[2 : stream.index("}")])


def consumer_name() -> str:
    """hostname-pid: unique per process, readable in XINFO CONSUMERS."""
    return f"{socket.gethostname()}-{os.getpid()}"


def _raise_if_cancelled() -> None:
    """redis-py can turn a cancellation that lands mid-command into a ConnectionError; a loop
    that retries on ConnectionError would then never stop. Honour the pending cancel."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class WriterMetrics(Protocol):
    """The collectors the writer feeds (bidder.observability.Metrics has them)."""

    queue_depth: Any
    queue_lag: Any
    batch_size: Any
    write_latency: Any
    records_written: Any
    records_dead_lettered: Any
    record_write_failures: Any


class PostgresUnavailable(Exception):
    """The batch could not be written for a reason outside its content: retry later."""


#: What leaves a batch to write again: Postgres unavailable, or Redis down around the write.
_BATCH_RETRIED: tuple[type[Exception], ...] = (PostgresUnavailable, *REDIS_DOWN)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _entries(stream: str, raw: Sequence[Any]) -> list[Entry]:
    out = []
    for entry_id, fields in raw:
        if fields is None:  # deleted while pending (Redis < 7 reports them so)
            continue
        out.append(Entry(stream, _text(entry_id), {_text(k): _text(v) for k, v in fields.items()}))
    return out


async def ensure_groups(redis: Redis) -> None:
    """Create the `writers` group on every shard's stream (and the stream), from id 0."""
    for key in queue_keys():
        try:
            await redis.xgroup_create(key, QUEUE_GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise


async def queue_stats(redis: Redis) -> tuple[int, float]:
    """(records not yet in Postgres, age in seconds of the oldest) over every shard's queue.
    Written entries are deleted, so the stream length is the backlog."""
    async with redis.pipeline(transaction=False) as pipe:
        for key in queue_keys():
            pipe.xlen(key)
            pipe.xrange(key, "-", "+", count=1)
        raw = await pipe.execute()
    depth = sum(int(n) for n in raw[0::2])
    oldest = [int(_text(entries[0][0]).split("-")[0]) for entries in raw[1::2] if entries]
    lag = max(0.0, time.time() - min(oldest) / 1000) if oldest else 0.0
    return depth, round(lag, 3)


class RecordWriter:
    """One consumer of the `writers` group. `get_pool` returns the asyncpg pool (connecting
    when needed); it may raise while Postgres is down."""

    def __init__(
        self,
        redis: Redis,
        get_pool: Callable[[], Awaitable[asyncpg.Pool]],
        *,
        consumer: str | None = None,
        batch_size: int = 500,
        block_ms: int = 200,
        claim_idle_ms: int = CLAIM_IDLE_MS,
        reclaim_every_s: float = _RECLAIM_EVERY_S,
        metrics: WriterMetrics | None = None,
    ) -> None:
        self.redis = redis
        self.get_pool = get_pool
        self.consumer = consumer or consumer_name()
        self.batch_size = batch_size
        self.block_ms = block_ms
        self.claim_idle_ms = claim_idle_ms
        self.reclaim_every_s = reclaim_every_s
        self.metrics = metrics
        self._next_reclaim = 0.0
        self._next_stats = 0.0
        self._groups_ready = False
        # (stream, id) of entries of the current batch already written, dead-lettered or
        # deliberately left pending: a retry after a failure skips them.
        self._handled: set[tuple[str, str]] = set()
        # Entries waiting for a parent row: when to try each again, and how often it was tried.
        self._waiting: dict[tuple[str, str], tuple[float, Entry]] = {}
        self._parent_tries: dict[tuple[str, str], int] = {}

    # -- reading ----------------------------------------------------------------------------

    async def read_batch(self) -> list[Entry]:
        """Entries to write next: ones reclaimed from dead writers when that is due, else new
        ones (blocking up to `block_ms`)."""
        if not self._groups_ready:
            await ensure_groups(self.redis)
            self._groups_ready = True
        if time.monotonic() >= self._next_reclaim:
            self._next_reclaim = time.monotonic() + self.reclaim_every_s
            claimed = await self.reclaim()
            if claimed:
                for entry in claimed:  # retried now
                    self._waiting.pop((entry.stream, entry.entry_id), None)
                return claimed
        due = self._due_waiting()
        if due:  # a batch of their own: one still refused must not split a batch of new ones
            return due
        try:
            if is_cluster(self.redis):
                raw: Any = await self._read_each_stream()
            else:
                streams: dict[Any, Any] = {key: ">" for key in queue_keys()}
                raw = await self.redis.xreadgroup(
                    QUEUE_GROUP,
                    self.consumer,
                    streams,
                    count=self.batch_size,
                    block=self._block_ms(),
                )
        except ResponseError as exc:
            if "NOGROUP" in str(exc):  # the streams were deleted (FLUSHALL): recreate
                self._groups_ready = False
                return []
            raise
        batch: list[Entry] = []
        for stream, entries in raw or []:
            batch += _entries(_text(stream), entries)
        return batch

    async def _read_each_stream(self) -> list[Any]:
        """New entries on a Redis Cluster, where the 16 queue streams live in 16 slots and one
        XREADGROUP may name only one: a read of each stream, in one pipeline (a round trip per
        node). When all are empty, a pause of up to `_CLUSTER_POLL_MS` before the next read
        stands for the blocking read's wait."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for key in queue_keys():
                pipe.xreadgroup(QUEUE_GROUP, self.consumer, {key: ">"}, count=self.batch_size)
            replies = await pipe.execute()
        raw = [stream for reply in replies for stream in reply or []]
        if not any(entries for _, entries in raw):
            await asyncio.sleep(min(self._block_ms(), _CLUSTER_POLL_MS) / 1000)
        return raw

    def _due_waiting(self) -> list[Entry]:
        """Entries waiting for a parent row whose pause is over (taken out of the wait)."""
        now = time.monotonic()
        due = [key for key, (at, _) in self._waiting.items() if at <= now]
        return [self._waiting.pop(key)[1] for key in due]

    def _block_ms(self) -> int:
        """How long a read may wait for new entries: not past the next waiting entry's turn."""
        if not self._waiting:
            return self.block_ms
        soonest = min(at for at, _ in self._waiting.values())
        return max(1, min(self.block_ms, int((soonest - time.monotonic()) * 1000) + 1))

    async def reclaim(self) -> list[Entry]:
        """Take over entries pending longer than `claim_idle_ms` (their writer died or gave
        up on them), and forget consumers that have held nothing for an hour."""
        claimed: list[Entry] = []
        for key in queue_keys():
            result = await self.redis.xautoclaim(
                key,
                QUEUE_GROUP,
                self.consumer,
                min_idle_time=self.claim_idle_ms,
                start_id="0-0",
                count=self.batch_size,
            )
            claimed += _entries(key, result[1])
        if claimed:
            log.warning("records reclaimed", extra={"count": len(claimed)})
        await self._forget_idle_consumers()
        return claimed

    async def _forget_idle_consumers(self) -> None:
        for key in queue_keys():
            with contextlib.suppress(ResponseError):
                for info in await self.redis.xinfo_consumers(key, QUEUE_GROUP):
                    name = _text(info["name"])
                    if (
                        name != self.consumer
                        and int(info["pending"]) == 0
                        and int(info["idle"]) > _IDLE_CONSUMER_MS
                    ):
                        await self.redis.xgroup_delconsumer(key, QUEUE_GROUP, name)

    # -- writing ----------------------------------------------------------------------------

    async def process(self, batch: list[Entry]) -> None:
        """Write `batch` and acknowledge what was written or dead-lettered. Raises
        PostgresUnavailable (with the unwritten entries still pending) when Postgres fails;
        RedisError when the acknowledgement fails (the entries are then written but pending:
        a later delivery is harmless). No entry's content makes it raise."""
        rows = Rows()
        decodable: list[Entry] = []
        batch = [e for e in batch if (e.stream, e.entry_id) not in self._handled]
        for entry in batch:
            try:
                add_entry(rows, entry)
            except Exception as exc:  # decoding is pure: the same entry fails the same way
                await self.dead_letter(entry, exc, dead_letter_reason(exc, decoding=True))
                continue
            decodable.append(entry)
        if decodable:
            await self._write_isolating(decodable, rows)

    async def _write_isolating(self, entries: list[Entry], rows: Rows | None = None) -> None:
        """Commit `entries`; when they are refused for anything but an outage, bisect until
        the entry at fault is alone, so every other one commits."""
        try:
            await self._commit(entries, rows)
        except PostgresUnavailable:
            raise
        except Exception as exc:
            if len(entries) == 1:
                await self._refused(entries[0], exc)
                return
            mid = len(entries) // 2
            await self._write_isolating(entries[:mid])
            await self._write_isolating(entries[mid:])

    async def _commit(self, entries: list[Entry], rows: Rows | None) -> None:
        if rows is None:
            rows = Rows()
            for entry in entries:
                add_entry(rows, entry)
        started = time.perf_counter()
        try:
            pool = await self.get_pool()
        except Exception as exc:  # reaching Postgres is never about the records
            self._count_failure("postgres")
            raise PostgresUnavailable(f"{type(exc).__name__}: {exc}") from exc
        try:
            async with pool.acquire() as conn:
                await write_rows(conn, rows)
        except _OUTAGES as exc:
            self._count_failure("postgres")
            raise PostgresUnavailable(f"{type(exc).__name__}: {exc}") from exc
        except Exception:
            self._count_failure("data")
            raise
        elapsed = time.perf_counter() - started
        await self.ack(entries)
        if self.metrics is not None:
            self.metrics.write_latency.observe(elapsed)
            self.metrics.batch_size.observe(len(entries))
            self.metrics.records_written.inc(len(entries))

    def _count_failure(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.record_write_failures.labels(reason).inc()

    async def _refused(self, entry: Entry, exc: Exception) -> None:
        """A lone entry that cannot be written. Refused for its data: dead-lettered now. A
        missing parent row may still arrive (another writer holds it), and an error of no
        known data class may pass: such an entry is left pending, up to MAX_DELIVERIES
        deliveries, then dead-lettered too."""
        doubtful = isinstance(exc, asyncpg.ForeignKeyViolationError) or not isinstance(
            exc, _DATA_ERRORS
        )
        if doubtful:
            info = await self.redis.xpending_range(
                entry.stream, QUEUE_GROUP, entry.entry_id, entry.entry_id, 1
            )
            deliveries = int(info[0]["times_delivered"]) if info else MAX_DELIVERIES
            if deliveries < MAX_DELIVERIES:
                log.warning(
                    "record waits for a missing parent row"
                    if isinstance(exc, asyncpg.ForeignKeyViolationError)
                    else "record write failed, retrying it alone",
                    extra={
                        "stream": entry.stream,
                        "entry_id": entry.entry_id,
                        "type": entry.kind,
                        "deliveries": deliveries,
                        "error": f"{type(exc).__name__}: {exc}"[:300],
                    },
                )
                self._handled.add((entry.stream, entry.entry_id))
                self._try_again_later(entry)
                return
        await self.dead_letter(entry, exc, dead_letter_reason(exc))

    def _try_again_later(self, entry: Entry) -> None:
        """Retry an entry waiting for its parent row (or refused by an error of no known class)
        after the next pause; once the pauses are used up it stays pending for the reclaim."""
        key = (entry.stream, entry.entry_id)
        tries = self._parent_tries.get(key, 0)
        if tries >= len(_PARENT_RETRY_S):
            self._parent_tries.pop(key, None)
            return
        self._parent_tries[key] = tries + 1
        self._waiting[key] = (time.monotonic() + _PARENT_RETRY_S[tries], entry)

    def _settled(self, entries: Sequence[Entry]) -> None:
        """Written or dead-lettered: no longer handled here again."""
        for entry in entries:
            key = (entry.stream, entry.entry_id)
            self._handled.add(key)
            self._parent_tries.pop(key, None)
            self._waiting.pop(key, None)

    async def ack(self, entries: Sequence[Entry]) -> None:
        """Acknowledge and delete written entries (one round trip)."""
        by_stream: dict[str, list[str]] = {}
        for entry in entries:
            by_stream.setdefault(entry.stream, []).append(entry.entry_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            for stream, ids in by_stream.items():
                pipe.xack(stream, QUEUE_GROUP, *ids)
                pipe.xdel(stream, *ids)
            await pipe.execute()
        self._settled(entries)

    async def dead_letter(self, entry: Entry, exc: Exception, reason: str) -> None:
        """Move a poison entry to its shard's dead-letter stream, atomically with its ack:
        its fields plus where it came from, the error and the reason (dead_letter_reason)."""
        shard = shard_of_stream(entry.stream)
        error = f"{type(exc).__name__}: {exc}"[:1000]
        fields: dict[Any, Any] = {
            **entry.fields,
            "src_stream": entry.stream,
            "src_id": entry.entry_id,
            "error": error,
            "reason": reason,
            "consumer": self.consumer,
        }
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xadd(dead_letter_key(shard), fields)
            pipe.xack(entry.stream, QUEUE_GROUP, entry.entry_id)
            pipe.xdel(entry.stream, entry.entry_id)
            await pipe.execute()
        self._settled([entry])
        # A hand-crafted entry's `t` must not mint label values.
        kind = entry.kind if entry.kind in RECORD_TYPES else "other"
        if self.metrics is not None:
            self.metrics.records_dead_lettered.labels(kind, reason).inc()
        log.error(
            "record dead-lettered",
            extra={
                "stream": entry.stream,
                "entry_id": entry.entry_id,
                "type": kind,
                "reason": reason,
                "dead_letter": dead_letter_key(shard),
                "error": error,
            },
        )

    async def keep_pending(self, entries: Sequence[Entry]) -> None:
        """Reset the idle time of entries this writer still holds (no delivery counted), so
        no other writer reclaims them while Postgres is down."""
        by_stream: dict[str, list[Any]] = {}
        for entry in entries:
            by_stream.setdefault(entry.stream, []).append(entry.entry_id)
        for stream, ids in by_stream.items():
            await self.redis.xclaim(stream, QUEUE_GROUP, self.consumer, 0, ids, justid=True)

    # -- the loop ---------------------------------------------------------------------------

    async def update_stats(self, *, force: bool = False) -> None:
        if self.metrics is None or (not force and time.monotonic() < self._next_stats):
            return
        self._next_stats = time.monotonic() + _STATS_EVERY_S
        depth, lag = await queue_stats(self.redis)
        self.metrics.queue_depth.set(depth)
        self.metrics.queue_lag.set(lag)

    async def write_until_done(self, batch: list[Entry]) -> None:
        """Write `batch`, retrying with capped exponential back-off while Postgres or Redis
        fails. Never gives up: the entries stay pending until they are written."""
        delay = _BACKOFF_START_S
        next_keepalive = time.monotonic() + _KEEPALIVE_EVERY_S
        failing_since: float | None = None
        self._handled.clear()
        while True:
            _raise_if_cancelled()
            try:
                await self.process(batch)
            except _BATCH_RETRIED as exc:
                _raise_if_cancelled()
                if failing_since is None:
                    failing_since = time.monotonic()
                    log.warning(
                        "record write failed, retrying",
                        extra={"error": str(exc)[:300], "batch": len(batch)},
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, _BACKOFF_CAP_S)
                if time.monotonic() >= next_keepalive:
                    next_keepalive = time.monotonic() + _KEEPALIVE_EVERY_S
                    with contextlib.suppress(*REDIS_DOWN):
                        await self.keep_pending(batch)
                        await self.update_stats(force=True)
                continue
            if failing_since is not None:
                log.warning(
                    "record writes recovered",
                    extra={"outage_seconds": round(time.monotonic() - failing_since, 3)},
                )
            self._handled.clear()
            return

    async def step(self) -> int:
        """Read one batch and write it (retrying until it is written); entries handled."""
        batch = await self.read_batch()
        if batch:
            await self.write_until_done(batch)
        await self.update_stats()
        return len(batch)

    async def run(self) -> None:
        """Forever (until cancelled): read, write, acknowledge. Cancelling at any point is safe:
        unacknowledged entries stay pending and are reclaimed."""
        delay = _BACKOFF_START_S
        while True:
            _raise_if_cancelled()
            try:
                await self.step()
                delay = _BACKOFF_START_S
            except REDIS_DOWN as exc:
                _raise_if_cancelled()
                log.warning("record queue unreachable", extra={"error": type(exc).__name__})
                await asyncio.sleep(delay)
                delay = min(delay * 2, _BACKOFF_CAP_S)
            except asyncio.CancelledError:
                raise
            except Exception:
                _raise_if_cancelled()
                log.exception("record writer failed, retrying")
                await asyncio.sleep(_BACKOFF_CAP_S)


class WriterPostgres(Protocol):
    """What `run_writer` needs of bidder.runtime.PostgresHandle."""

    async def connect(self) -> asyncpg.Pool: ...


class WriterRuntime(Protocol):
    """What `run_writer` needs of bidder.runtime.Runtime."""

    @property
    def settings(self) -> Any: ...

    @property
    def metrics(self) -> Any: ...

    @property
    def postgres(self) -> WriterPostgres: ...


async def run_writer(runtime: WriterRuntime) -> None:
    """The record writer as a Runtime background loop (Runtime.extra_loops). It has a Redis
    client of its own: a blocking read must not hold one of the hot path's connections, and
    needs a longer socket timeout than the hot path's fail-fast one."""
    settings = runtime.settings
    redis = connect(settings.redis.url, timeout=2.0, max_connections=4, mode=settings.redis.mode)
    writer = RecordWriter(
        redis,
        runtime.postgres.connect,
        batch_size=settings.records.batch_size,
        metrics=runtime.metrics,
    )
    log.info("record writer started", extra={"consumer": writer.consumer})
    try:
        await writer.run()
    finally:
        with contextlib.suppress(Exception):
            await redis.aclose()
