"""The request body's deadline (bidder.http.asgi): a 408 when nothing more arrives in time, never
when the parts keep coming, and never in place of a cancellation from outside."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from bidder.errors import RequestTimeout
from bidder.http.asgi import HttpCall, bounded_receive

TIMEOUT = 0.2


def _scope(method: str = "POST", length: int | None = None) -> Any:
    headers = [] if length is None else [(b"content-length", str(length).encode())]
    return {"type": "http", "method": method, "path": "/x", "headers": headers}


def _trickle(parts: list[bytes], gap: float) -> Any:
    """A receive that answers each part after `gap` seconds, the last one closing the body."""
    pending = list(parts)

    async def receive() -> Any:
        await asyncio.sleep(gap)
        part = pending.pop(0)
        return {"type": "http.request", "body": part, "more_body": bool(pending)}

    return receive


async def _never() -> Any:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def test_a_body_whose_parts_keep_coming_is_read_whatever_it_takes_in_all() -> None:
    parts = [b'{"a": ', b"1", b"}"]
    call = HttpCall(_scope(), _trickle(parts, TIMEOUT * 0.6), body_timeout=TIMEOUT)
    assert await call.body(1000) == b'{"a": 1}'  # 1.8 x the deadline in all
    receive = bounded_receive(_scope(), _trickle(parts, TIMEOUT * 0.6), TIMEOUT)
    events: list[Any] = [await receive() for _ in parts]
    assert b"".join(e["body"] for e in events) == b'{"a": 1}'


async def test_a_body_that_stops_arriving_is_408_on_both_paths() -> None:
    started = time.monotonic()
    with pytest.raises(RequestTimeout) as hot:
        await HttpCall(_scope(), _never, body_timeout=TIMEOUT).body(1000)
    assert TIMEOUT <= time.monotonic() - started < TIMEOUT + 1
    assert hot.value.headers == {"Connection": "close"}
    with pytest.raises(RequestTimeout):
        await bounded_receive(_scope(), _never, TIMEOUT)()
    # no body to wait for: a GET's receive is the server's own
    assert bounded_receive(_scope("GET"), _never, TIMEOUT) is _never


async def test_a_cancellation_from_outside_at_the_deadline_is_not_turned_into_a_408() -> None:
    loop = asyncio.get_running_loop()

    async def blocking_then_never() -> Any:
        time.sleep(TIMEOUT * 1.5)  # noqa: ASYNC251 - both timers below fall due meanwhile
        return await _never()

    async def reader() -> bytes:
        task = asyncio.current_task()
        assert task is not None
        loop.call_later(TIMEOUT * 0.99, task.cancel)  # a shutdown, just before the deadline
        return await HttpCall(_scope(), blocking_then_never, body_timeout=TIMEOUT).body(1000)

    task = asyncio.ensure_future(reader())
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()


async def test_an_outside_cancellation_before_the_deadline_stays_a_cancellation() -> None:
    task = asyncio.ensure_future(HttpCall(_scope(), _never, body_timeout=TIMEOUT).body(1000))
    await asyncio.sleep(TIMEOUT / 4)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
