"""Micro-benchmarks of the hot path's pure CPU work: matching, and the Python side of the
reservation and answer scripts (ids, keys, ARGV), with no Redis and no HTTP.

    .venv/bin/python -m bench.micro [--rounds 20000]

Runs on the bench inventory (10,000 screens, 2,000 campaigns) and on a 20-campaign inventory
over the same screens, so "flat in inventory size" can be read off the two select lines.
Prints microseconds per call (best of five repeats).
"""

from __future__ import annotations

import argparse
import random
import timeit
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from bench import seed
from matching.engine import VideoSlot, select
from matching.snapshot import ScreenInfo, Snapshot, build_snapshot
from store import hot


class _NoScript:
    """Stands in for a Lua script: returns a success reply without any I/O."""

    def __init__(self, reply: list[Any]) -> None:
        self.reply = reply

    async def __call__(self, keys: list[str], args: list[Any]) -> Any:
        return self.reply


def _per_call_us(fn: Callable[[], object], rounds: int) -> float:
    return min(timeit.repeat(fn, number=rounds, repeat=5)) / rounds * 1e6


def _screens(snap: Snapshot, rng: random.Random, kind: str | None = None) -> list[ScreenInfo]:
    screens = [s for s in snap.screens.values() if s.active and (kind is None or s.type == kind)]
    return [screens[rng.randrange(len(screens))] for _ in range(1000)]


def _select_case(
    snap: Snapshot, screens: list[ScreenInfo], now: datetime, bid: bool
) -> Callable[[], object]:
    cycle = iter(range(1 << 62))

    def call() -> object:
        screen = screens[next(cycle) % len(screens)]
        if bid:
            slot = VideoSlot(
                screen.width, screen.height, frozenset({"video/mp4", "video/quicktime"})
            )
            return select(snap, screen, now, {}, audience=screen.audience_per_play, slot=slot)
        return select(snap, screen, now, {})

    return call


def _drive(coro: Any) -> Any:
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise RuntimeError("the stand-in script awaited something")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.micro")
    parser.add_argument("--rounds", type=int, default=20_000)
    args = parser.parse_args()
    rounds = args.rounds
    now = datetime.now(UTC).replace(microsecond=0)
    doc = seed.full_document(now=now)
    small = msgspec.structs.replace(doc, campaigns=doc.campaigns[:20])
    full_snap, small_snap = build_snapshot(doc), build_snapshot(small)
    rng = random.Random(7)
    any_screens = _screens(full_snap, rng)
    moving = _screens(full_snap, rng, "moving")
    results = {
        "select, offer request, 2,000 campaigns": _select_case(full_snap, any_screens, now, False),
        "select, offer request, 20 campaigns": _select_case(small_snap, any_screens, now, False),
        "select, bid, 2,000 campaigns": _select_case(full_snap, moving, now, True),
        "select, bid, 20 campaigns": _select_case(small_snap, moving, now, True),
    }
    for name, fn in results.items():
        print(f"{name:45s} {_per_call_us(fn, rounds // 4):8.2f} us")

    state = hot.HotState.__new__(hot.HotState)
    state.retention_ms, state.deal_ttl_ms = 3_600_000, 86_400_000
    state._reserve = _NoScript([1, 10, 0, 0])
    answered = b'{"campaign":"c","deal_id":"d"}'
    state._respond = _NoScript([1, answered, b"CODE", 10, 0, 0])
    campaign = next(iter(full_snap.campaigns.values()))
    fields = {"channel": "core", "publisher": "p", "creative": "c"}
    expires = now + timedelta(seconds=1800)
    offer_id = hot.new_id(3)
    payload = {"billing_id": hot.new_id(0), "gross_micros": 1, "commission_rate": "0.2"}
    other: dict[str, Callable[[], object]] = {
        "new_id": lambda: hot.new_id(7),
        "shard_of": lambda: hot.shard_of(offer_id),
        "HotState.reserve without Redis": lambda: _drive(
            state.reserve(campaign, 1234, "screen", now, expires, fields)
        ),
        "HotState.respond (accept) without Redis": lambda: _drive(
            state.respond(offer_id, "p", "accept", now, payload, accepted_micros=1)
        ),
    }
    for name, fn in other.items():
        print(f"{name:45s} {_per_call_us(fn, rounds):8.2f} us")


if __name__ == "__main__":
    main()
