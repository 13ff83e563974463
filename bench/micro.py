"""Micro-benchmarks of the hot path's pure CPU work: matching, and the Python side of the
reservation and answer scripts (ids, keys, ARGV), with no Redis and no HTTP.

    .venv/bin/python -m bench.micro [--rounds 20000]

Runs on the bench inventory (10,000 screens, 2,000 campaigns) and on a 20-campaign inventory
over the same screens, so "flat in inventory size" can be read off the two select lines.
Prints microseconds per call (best of five repeats). A last section times the OpenRTB bid
path's pure pieces: request parsing, the signed URLs, the VAST document and the answer.
"""

from __future__ import annotations

import argparse
import json
import random
import timeit
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import msgspec
from msgspec.structs import replace

from bench import seed, workload
from bidder.openrtb import Bid, bid_response, loss_url, new_uuid, parse_bid_request
from bidder.settings import load_settings
from bidder.vast import VastAd, match_vast, render_vast, tracking_urls
from matching.engine import Match, VideoSlot, select
from matching.snapshot import ScreenInfo, Snapshot, build_snapshot
from store import hot


class _NoScript:
    """Stands in for a Lua script: returns a success reply without any I/O."""

    def __init__(self, reply: list[Any]) -> None:
        self.reply = reply

    async def __call__(self, keys: list[str], args: list[Any], *, durable: bool = False) -> Any:
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


def _bid_path_cases(now: datetime, snap: Snapshot) -> dict[str, Callable[[], object]]:
    """The bid path's CPU outside matching and Redis, on a bench-shaped BidRequest."""
    settings = load_settings(
        {
            "DATABASE_URL": "postgresql://u@localhost/db",
            "REDIS_URL": "redis://localhost:6379/0",
            "ADMIN_TOKEN": "a" * 32,
            "SIGNING_SECRETS": "bench-secret-0123456789",
        }
    )
    screen = workload.Target(
        screen_id=hot.random_uuid(),
        external_id="EXT-MOVING-000123",
        publisher_id=hot.random_uuid(),
        api_key="",
        width=1920,
        height=1080,
        audience=119.47,
        type="moving",
    )
    body = json.dumps(workload.bid_request(screen, random.Random(7))).encode()
    offer_id, pub, scr = hot.new_id(3), screen.publisher_id, screen.screen_id
    now_ms = hot.epoch_ms(now)
    impression, tracking = tracking_urls(settings, offer_id, pub, scr, now_ms, openrtb=True)
    ad = VastAd(
        offer_id=offer_id,
        ad_title="Campaign 42",
        advertiser="Advertiser 7",
        advertiser_domain="advertiser7.example",
        asset_url="https://cdn.example/creatives/42.mp4",
        mime_type="video/mp4",
        width=1920,
        height=1080,
        duration_seconds=15,
        bid_price_cents=Decimal("119.47"),
        billing_code="BILL-7-3",
        expires_in_seconds=300,
        creative_id=hot.random_uuid(),
        impression_url=impression,
        tracking=tracking,
    )

    def urls_and_vast() -> object:
        impression, tracking = tracking_urls(settings, offer_id, pub, scr, now_ms, openrtb=True)
        return render_vast(replace(ad, impression_url=impression, tracking=tracking))

    campaign = next(c for c in snap.campaigns.values() if c.creatives)
    match = Match(campaign, campaign.creatives[0], 119_470_000)
    on_screen = next(iter(snap.screens.values()))

    def templated() -> object:
        return match_vast(
            settings,
            snap,
            offer_id,
            match,
            on_screen,
            billing_code="BILL-7-3",
            expires_in_seconds=300,
            now_ms=now_ms,
            openrtb=True,
        )

    lurl = loss_url(settings, offer_id, pub, scr, now_ms)
    adm = render_vast(ad)
    bid = Bid(
        new_uuid(),
        "1",
        msgspec.Raw(b"1.1947"),
        offer_id,
        offer_id,
        offer_id,
        adm,
        lurl,
        [],
        "D",
        1920,
        1080,
    )
    return {
        "parse_bid_request": lambda: parse_bid_request(body),
        "tracking_urls (6 signed URLs)": lambda: tracking_urls(
            settings, offer_id, pub, scr, now_ms, openrtb=True
        ),
        "tracking_urls + render_vast": urls_and_vast,
        "match_vast (the same, templated)": templated,
        "msgspec.structs.replace (in the line above)": lambda: replace(ad, impression_url=""),
        "loss_url": lambda: loss_url(settings, offer_id, pub, scr, now_ms),
        "new_uuid": new_uuid,
        "bid_response": lambda: bid_response(settings, "auction-1", bid),
    }


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
    state.retention_ms, state.deal_ttl_ms, state.slices = 3_600_000, 86_400_000, 1
    state.offer_form, state.count_day_reservations = "packed", True
    state._fast = None  # no pipelined connection: no deadline, nothing to connect
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

    for name, fn in _bid_path_cases(now, full_snap).items():
        print(f"{name:45s} {_per_call_us(fn, rounds // 4):8.2f} us")


if __name__ == "__main__":
    main()
