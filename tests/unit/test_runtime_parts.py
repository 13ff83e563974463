"""The runtime's parts, each on its own: the budget view folds reads and answers in memory, the
loops stop in bounded time, and the Postgres handle reports an unreachable server."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from bidder.runtime import Budgets, Loops, PostgresHandle
from matching.engine import Budget


def test_a_read_keeps_the_answers_noted_while_it_was_on_its_way() -> None:
    """A read from another connection loses to an answer noted after its mark (that answer may
    be newer), and wins over one noted before it (the read is newer)."""
    budgets = Budgets()
    budgets.note("c1", Budget(1_000, 50, 0))  # before the read began
    before = budgets.mark()
    budgets.note("c2", Budget(900, 100, 0))  # while the read was on its way
    budgets.fold({"c1": Budget(1_000, 0, 0), "c2": Budget(900, 0, 0)}, before)
    assert budgets.figures == {"c1": Budget(1_000, 0, 0), "c2": Budget(900, 100, 0)}
    budgets.fold({"c2": Budget(2_000, 100, 0)}, budgets.mark())  # begun after every answer
    assert budgets.figures["c2"] == Budget(2_000, 100, 0)


def test_an_answer_keeps_the_days_figures_as_last_read() -> None:
    """A script answers with the lifetime figures; today's spending stays as the last read
    gave it."""
    budgets = Budgets()
    budgets.fold({"c1": Budget(1_000, 0, 0, 20)}, budgets.mark())
    budgets.note("c1", Budget(1_000, 70, 10))
    assert budgets.figures["c1"] == Budget(1_000, 70, 10, 20)
    budgets.note("c1", None)  # no budget in the answer: nothing changes
    budgets.note("c9", Budget(500, 5, 0))  # a campaign never read: no figures for today
    assert budgets.figures == {"c1": Budget(1_000, 70, 10, 20), "c9": Budget(500, 5, 0, 0)}


async def test_sleep_ends_when_the_loops_stop() -> None:
    loops = Loops(asyncio.Event())
    ticks: list[float] = []

    async def ticking() -> None:
        while await loops.sleep(3600):
            ticks.append(time.monotonic())

    loops.spawn(ticking())
    started = time.monotonic()
    await loops.stop()
    assert time.monotonic() - started < 1
    assert ticks == []
    assert all(task.done() for task in loops.tasks)
    assert not await loops.sleep(3600)  # stopped: no loop sleeps again


async def test_a_loop_that_swallows_its_cancellation_is_named_and_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loops = Loops(asyncio.Event())
    loops.stop_wait = 0.2
    release = asyncio.Event()

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if release.is_set():
                    raise

    loops.spawn(stubborn())
    await asyncio.sleep(0)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="bidder.runtime"):
        await loops.stop()
    assert time.monotonic() - started < 1
    warned = [r for r in caplog.records if r.getMessage().startswith("background task did not")]
    assert [r.__dict__["task"] for r in warned] == [
        "test_a_loop_that_swallows_its_cancellation_is_named_and_left.<locals>.stubborn"
    ]
    release.set()
    loops.tasks[0].cancel()
    await asyncio.wait(loops.tasks, timeout=5)


async def test_an_unreachable_postgres_is_reported_with_its_error() -> None:
    """Nothing listens on port 1: the probe says why, and the handle keeps the error type."""
    postgres = PostgresHandle("postgresql://bidder@127.0.0.1:1/bidder", asyncio.Event())
    assert await postgres.state(wait=5) == "unreachable: ConnectionRefusedError"
    assert postgres.last_error == "ConnectionRefusedError"
    assert postgres.pool is None
    await postgres.close()


async def test_a_stopping_postgres_handle_starts_no_probe() -> None:
    stopping = asyncio.Event()
    stopping.set()
    postgres = PostgresHandle("postgresql://bidder@127.0.0.1:1/bidder", stopping)
    assert await postgres.state(wait=5) == "unresponsive"
    assert postgres.last_error is None  # no connection was tried
