"""`/readyz`: can this instance serve? Redis reachable and the inventory snapshot loaded.

Postgres being down does not make an instance unready (docs/contract.md#8-operations): the hot path
does not need it, records wait in the queue. The body names each dependency's state and the record
queue's depth and lag either way.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from litestar import MediaType, Request, Response, get, head

from bidder.web import runtime_of
from store.records import queue_stats

_CHECK_TIMEOUT = 0.5


@get("/readyz", media_type=MediaType.JSON)
async def readyz(request: Request[Any, Any, Any]) -> Response[dict[str, Any]]:
    body, ready = await _readiness(request)
    return Response(body, status_code=200 if ready else 503)


@head("/readyz")
async def readyz_head(request: Request[Any, Any, Any]) -> Response[None]:
    """HEAD /readyz: the same checks, status and headers, without a body."""
    body, ready = await _readiness(request)
    return head_answer(body, 200 if ready else 503)


def head_answer(body: Any, status: int) -> Response[None]:
    """The answer to HEAD for a GET that answers `body` as JSON: its status and headers,
    `Content-Length` included (RFC 9110 9.3.2), and no body."""
    length = len(msgspec.json.encode(body))
    return Response(
        None, status_code=status, media_type=MediaType.JSON, headers={"content-length": str(length)}
    )


async def _readiness(request: Request[Any, Any, Any]) -> tuple[dict[str, Any], bool]:
    rt = runtime_of(request)
    body: dict[str, Any] = {}
    try:
        await asyncio.wait_for(rt.redis.ping(), _CHECK_TIMEOUT)
        body["redis"] = "ok"
        depth, lag = await asyncio.wait_for(queue_stats(rt.redis), _CHECK_TIMEOUT)
        body["queue"] = {"depth": depth, "lag_seconds": lag}
        rt.metrics.queue_depth.set(depth)
        rt.metrics.queue_lag.set(lag)
    except Exception as exc:
        body["redis"] = f"unreachable: {type(exc).__name__}"
        body["queue"] = {"depth": None, "lag_seconds": None}
    # The shared probe, never a query of its own: a frozen Postgres must not hold the answer.
    body["postgres"] = await rt.postgres.state(_CHECK_TIMEOUT)
    snapshot = rt.inventory.snapshot
    body["inventory"] = (
        {
            "status": "ok",
            "source": rt.inventory.source,
            "version": snapshot.version,
            "screens": len(snapshot.screens),
            "campaigns": len(snapshot.campaigns),
        }
        if snapshot is not None
        else {"status": "not loaded"}
    )
    ready = body["redis"] == "ok" and snapshot is not None
    body["status"] = "ready" if ready else "not ready"
    return body, ready


routes = [readyz, readyz_head]
