"""`/readyz`: can this instance serve? Redis reachable and the inventory snapshot loaded.

Postgres being down does not make an instance unready (decisions section 8): the hot path does
not need it, records wait in the queue. The body names each dependency's state and the record
queue's depth and lag either way.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from litestar import MediaType, Request, Response, get

from bidder.web import runtime_of
from store.hot import queue_keys

_CHECK_TIMEOUT = 0.5


async def queue_stats(rt: Any) -> tuple[int, float]:
    """(records waiting, age in seconds of the oldest) over every shard's queue."""
    async with rt.redis.pipeline(transaction=False) as pipe:
        for key in queue_keys():
            pipe.xlen(key)
            pipe.xrange(key, "-", "+", count=1)
        raw = await pipe.execute()
    depth = sum(int(n) for n in raw[0::2])
    oldest_ms = [int(entries[0][0].split(b"-")[0]) for entries in raw[1::2] if entries]
    lag = max(0.0, time.time() - min(oldest_ms) / 1000) if oldest_ms else 0.0
    return depth, round(lag, 3)


@get("/readyz", media_type=MediaType.JSON)
async def readyz(request: Request[Any, Any, Any]) -> Response[dict[str, Any]]:
    rt = runtime_of(request)
    body: dict[str, Any] = {}
    try:
        await asyncio.wait_for(rt.redis.ping(), _CHECK_TIMEOUT)
        body["redis"] = "ok"
        depth, lag = await asyncio.wait_for(queue_stats(rt), _CHECK_TIMEOUT)
        body["queue"] = {"depth": depth, "lag_seconds": lag}
        rt.metrics.queue_depth.set(depth)
        rt.metrics.queue_lag.set(lag)
    except Exception as exc:
        body["redis"] = f"unreachable: {type(exc).__name__}"
        body["queue"] = {"depth": None, "lag_seconds": None}
    try:
        if rt.pool is None:
            await asyncio.wait_for(rt.connect_postgres(), _CHECK_TIMEOUT * 4)
        assert rt.pool is not None
        await asyncio.wait_for(rt.pool.fetchval("SELECT 1"), _CHECK_TIMEOUT)
        body["postgres"] = "ok"
    except Exception as exc:
        body["postgres"] = f"unreachable: {type(exc).__name__}"
    snapshot = rt.snapshot
    body["inventory"] = (
        {
            "status": "ok",
            "version": snapshot.version,
            "screens": len(snapshot.screens),
            "campaigns": len(snapshot.campaigns),
        }
        if snapshot is not None
        else {"status": "not loaded"}
    )
    ready = body["redis"] == "ok" and snapshot is not None
    body["status"] = "ready" if ready else "not ready"
    return Response(body, status_code=200 if ready else 503)


routes = [readyz]
