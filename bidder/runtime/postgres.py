"""The worker's Postgres handle: one pool created on first use, a shared liveness probe, and a
bounded close."""

from __future__ import annotations

import asyncio
import contextvars
import logging

import asyncpg

from store.errors import POSTGRES_DOWN
from store.postgres import create_pool

__all__ = ["PostgresHandle"]

log = logging.getLogger("bidder.runtime")

#: How long a caller waits for the Postgres liveness probe before calling Postgres unresponsive.
_PROBE_WAIT_SECONDS = 0.5
#: The probe's own bound on each step (a free connection, the query, its release), so a lost
#: connection ends it well before the pool's 60 s `command_timeout` and a fresh probe can start.
_PROBE_TIMEOUT_SECONDS = 5.0
#: How long `close` waits for the pool's connections to be released before it closes them.
_POOL_CLOSE_SECONDS = 5.0


class PostgresHandle:
    """This worker's pool and what /readyz says of Postgres. `stopping` is the worker's: once
    set, no new probe (and no new pool) starts."""

    def __init__(self, database_url: str, stopping: asyncio.Event) -> None:
        self.database_url = database_url
        self.pool: asyncpg.Pool | None = None
        #: The type of the last failure to connect or reload, None while Postgres answers.
        self.last_error: str | None = None
        #: How long `close` waits for the pool's connections to be released.
        self.close_wait = _POOL_CLOSE_SECONDS
        self._stopping = stopping
        self._probe: asyncio.Task[str] | None = None
        self._lock = asyncio.Lock()

    async def connect(self) -> asyncpg.Pool:
        """This worker's pool, created on first use. Callers racing the creation share one
        pool: the one `close` closes."""
        if self.pool is not None:
            return self.pool
        async with self._lock:
            if self.pool is None:
                try:
                    self.pool = await create_pool(self.database_url)
                    self.last_error = None
                except POSTGRES_DOWN as exc:
                    self.last_error = type(exc).__name__
                    raise
            return self.pool

    async def state(self, wait: float = _PROBE_WAIT_SECONDS) -> str:
        """Postgres's state for /readyz and the endpoints that need it: "ok" when it answers
        `SELECT 1` within `wait` seconds, else "unresponsive" or "unreachable: <exception
        type>". One probe runs at a time in this process; callers share it and stop waiting
        after `wait` without cancelling it, because cancelling an asyncpg call to a server
        that does not answer waits on that server."""
        if self._stopping.is_set():  # no new probe (and no new pool) once stopping
            return "unresponsive"
        probe = self._probe
        if probe is None or probe.done():
            # A context of its own: started by whichever request asked first, it (and the
            # pool's reconnect task it may start) must not log under that request's id.
            probe = self._probe = asyncio.create_task(self.probe(), context=contextvars.Context())
        done, _ = await asyncio.wait({probe}, timeout=wait)
        if not done or probe.cancelled():  # cancelled: the runtime is stopping
            return "unresponsive"
        return probe.result()

    async def probe(self) -> str:
        """One liveness probe; never raises, so no probe's exception goes unretrieved when
        every caller has stopped waiting for it."""
        try:
            pool = await self.connect()
            async with pool.acquire(timeout=_PROBE_TIMEOUT_SECONDS) as conn:
                await conn.fetchval("SELECT 1", timeout=_PROBE_TIMEOUT_SECONDS)
        except TimeoutError:  # no answer in time: to the connection, or to the query
            return "unresponsive"
        except Exception as exc:
            return f"unreachable: {type(exc).__name__}"
        return "ok"

    async def close(self) -> None:
        """Close the pool, terminating its connections when one is not released in
        `close_wait` seconds; a running probe ends with it."""
        probe = self._probe
        if probe is not None:
            probe.cancel()  # not awaited here: on a frozen server its cancellation waits too
        await self._close_pool()
        if probe is not None:  # closing the pool ended its connection, so it ends now
            await asyncio.wait({probe}, timeout=1)

    async def _close_pool(self) -> None:
        if self.pool is None:
            return
        try:
            await asyncio.wait_for(self.pool.close(), self.close_wait)
        except TimeoutError:  # a connection never released: close them all at once
            log.warning("Postgres pool did not close in time; terminating its connections")
            self.pool.terminate()
        except Exception:  # noqa: S110 - shutting down: a failing close changes nothing
            pass
