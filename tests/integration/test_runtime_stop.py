"""A worker's shutdown ends in bounded time even when a background loop does not end when it is
cancelled (granian kills a worker whose shutdown takes 30 s, before its pool and clients are
closed), and the log names the loop and where it was stuck."""

from __future__ import annotations

import asyncio
import logging
import time

import asyncpg
import pytest

from bidder.runtime import Runtime
from bidder.settings import Settings
from matching.engine import Budget


async def test_a_loop_that_ignores_its_cancellation_does_not_hold_the_stop(
    settings: Settings,
    clean: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()

    async def stubborn_loop(_: Runtime) -> None:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if release.is_set():
                    raise
                # swallowed, as a client library that turns a cancellation into an error
                # a retrying loop catches would

    rt = Runtime(settings)
    rt.loops.stop_wait = 0.3
    rt.extra_loops.append(stubborn_loop)
    await rt.start()
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="bidder.runtime"):
        await asyncio.wait_for(rt.stop(), 10)
    assert time.monotonic() - started < 3
    warned = [r for r in caplog.records if r.getMessage().startswith("background task did not")]
    assert len(warned) == 1
    assert "stubborn_loop" in warned[0].__dict__["task"]
    assert "test_runtime_stop.py" in warned[0].__dict__["at"]
    release.set()  # let it end now, so the test's loop closes cleanly
    stuck = [t for t in rt.loops.tasks if not t.done()]
    for task in stuck:
        task.cancel()
    await asyncio.wait(stuck, timeout=5)
    assert all(t.done() for t in stuck)


async def test_loops_that_end_when_cancelled_stop_at_once(
    settings: Settings, clean: None, caplog: pytest.LogCaptureFixture
) -> None:
    rt = Runtime(settings)
    await rt.start()
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="bidder.runtime"):
        await rt.stop()
    assert time.monotonic() - started < 2
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "did not" in m]
    assert messages[-1] == "runtime stopped"  # the last word, for a shutdown's post-mortem
    assert all(t.done() for t in rt.loops.tasks)


async def test_a_connection_never_released_does_not_hold_the_stop(
    settings: Settings,
    clean: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    rt = Runtime(settings)
    rt.postgres.close_wait = 0.3
    await rt.start()
    pool = await rt.postgres.connect()
    held = await pool.acquire()  # as by a task that was cut off mid-transaction
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="bidder.runtime"):
        await asyncio.wait_for(rt.stop(), 10)
    assert time.monotonic() - started < 3
    assert any("terminating its connections" in r.getMessage() for r in caplog.records)
    assert pool.is_closing()
    with pytest.raises(asyncpg.InterfaceError):  # taken back from its holder
        held.is_closed()


async def test_a_budget_read_keeps_the_script_answers_folded_in_while_it_was_on_its_way(
    settings: Settings,
) -> None:
    """The budget view takes a read from another connection (the refresh, a top-up's answer)
    unless a script answered for that campaign after the read began: that answer may be newer.
    An answer folded in before the read began is older than the read, and the read wins."""
    rt = Runtime(settings)  # not started: only its budget view is used
    try:
        before = rt.budgets.mark()
        rt.budgets.note("c1", Budget(1_000, 100, 0))  # answered while the read was on its way
        rt.budgets.fold({"c1": Budget(1_000, 0, 0), "c2": Budget(500, 0, 0)}, before)
        assert rt.budgets.figures["c1"] == Budget(1_000, 100, 0)
        assert rt.budgets.figures["c2"] == Budget(500, 0, 0)
        # A read begun after that answer (a top-up, say) is newer than it.
        after = rt.budgets.mark()
        rt.budgets.fold({"c1": Budget(2_000, 100, 0)}, after)
        assert rt.budgets.figures["c1"] == Budget(2_000, 100, 0)
    finally:
        await rt.stop()
