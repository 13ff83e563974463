"""The bench's ratios in-process: the app's own CPU per request for GET /healthz, an offer request
and an accept, on the bench inventory, calling the ASGI app directly (no server, no HTTP client).

    .venv/bin/python -m bench.inprocess [--requests 3000] [--cprofile]

Requests go one at a time, so each Redis round trip is waited for; the figures that matter are
this process's user and system CPU time per request, which the other load on the machine
changes far less than wall-clock rates. System time is mostly the one socket write to Redis a
lone request pays (concurrent requests share it through auto-pipelining); user time is the
Python work. "share" is healthz's CPU per request over the endpoint's: the in-process analogue
of "share of the trivial GET" (a served request adds granian's own cost to both).
`--cprofile` also writes .run/bench/cprofile-<endpoint>.txt
(top functions by own time), which shows short functions that pyinstrument's sampling hides.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import redis

from bench import seed, server, workload
from bench.profile import ROOT
from bidder.app import create_app

_ACCEPT_BODY = b'{"action": "accept", "accepted_price_cents": 0.01}'
Send = Callable[[], Awaitable[tuple[int, bytes]]]


class _Asgi:
    """Calls an ASGI app with a minimal HTTP scope and collects the status and body."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(
        self, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes = b""
    ) -> tuple[int, bytes]:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"bench.local"), *headers],
            "client": ("127.0.0.1", 40000),
            "server": ("bench.local", 80),
            "state": {},
        }
        sent = False
        status, chunks = 0, []

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, send)
        return status, b"".join(chunks)


def _auth(key: str) -> tuple[bytes, bytes]:
    return (b"authorization", f"Bearer {key}".encode())


async def measure(
    seeded: server.Seeded, targets: list[workload.Target], count: int, prof: bool
) -> dict[str, str]:
    settings = server.in_process_settings(seeded)
    app = create_app(settings)
    call = _Asgi(app)
    rng = random.Random(5)
    offers: list[tuple[str, str]] = []

    def offer_request() -> Awaitable[tuple[int, bytes]]:
        target = rng.choice(targets)
        path = f"/functions/v1/api/offers/request/{target.screen_id}"
        return call("GET", path, [_auth(target.api_key)])

    async def make_offers(n: int) -> None:
        while len(offers) < n:
            target = rng.choice(targets)
            path = f"/functions/v1/api/offers/request/{target.screen_id}"
            status, body = await call("GET", path, [_auth(target.api_key)])
            if status == 200:
                offers.append((msgspec.json.decode(body)["offer_id"], target.api_key))

    def accept() -> Awaitable[tuple[int, bytes]]:
        offer_id, key = offers.pop()
        path = f"/functions/v1/api/offers/response/{offer_id}"
        headers = [_auth(key), (b"content-type", b"application/json")]
        return call("POST", path, headers, _ACCEPT_BODY)

    senders: list[tuple[str, Send]] = [
        ("healthz", lambda: call("GET", "/healthz", [])),
        ("offer_request", offer_request),
        ("accept", accept),
    ]
    rates: dict[str, float] = {}
    user: dict[str, float] = {}
    system: dict[str, float] = {}
    profiles: dict[str, str] = {}
    async with app.lifespan():
        await app.state.runtime.inventory.reload()
        for name, send in senders:
            if name == "accept":
                await make_offers(count + 200)
            for _ in range(200):  # warm up: caches, script loading, connections
                await send()
            rates[name], user[name], system[name], profiles[name] = await _rate(
                name, send, count, prof
            )
    for name, rate in rates.items():
        cpu = user[name] + system[name]
        print(
            f"{name:15s} {rate:8,.0f} req/s  CPU/request {cpu:4.0f} us"
            f" (user {user[name]:4.0f}, system {system[name]:4.0f})"
            f"  share {(user['healthz'] + system['healthz']) / cpu:.2f}"
            f", user share {user['healthz'] / user[name]:.2f}"
        )
    return profiles


async def _rate(name: str, send: Send, count: int, prof: bool) -> tuple[float, float, float, str]:
    """Requests/s of `count` sends, this process's user and system CPU microseconds per send
    (system: mostly the socket write to Redis), and with `prof` a cProfile of them."""
    profiler = cProfile.Profile() if prof else None
    started, started_cpu = time.perf_counter(), os.times()
    if profiler:
        profiler.enable()
    for _ in range(count):
        status, body = await send()
        if status != 200:
            raise RuntimeError(f"{name}: {status} {body!r}")
    if profiler:
        profiler.disable()
    rate = count / (time.perf_counter() - started)
    ended_cpu = os.times()
    user_us = (ended_cpu.user - started_cpu.user) / count * 1e6
    system_us = (ended_cpu.system - started_cpu.system) / count * 1e6
    out = io.StringIO()
    if profiler:
        profiler.dump_stats(ROOT / f"cprofile-{name}.prof")
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(40)
    return rate, user_us, system_us, out.getvalue()


def _wait_until_loaded(redis_url: str, timeout_s: float = 60.0) -> None:
    """A restarted Redis answers LOADING while it reads its dump back; wait that out."""
    client = redis.Redis.from_url(redis_url)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                client.ping()
                return
            except redis.exceptions.BusyLoadingError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.inprocess")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--cprofile", action="store_true")
    args = parser.parse_args()
    backends = server.start_backends(ROOT / "servers")
    try:
        _wait_until_loaded(backends.redis_url)
        doc = seed.full_document()
        database = asyncio.run(server.fresh_database(backends.database_url, "bench_inprocess"))
        seeded = server.seed(database, server.fresh_redis(backends.redis_url, 3), doc)
        targets = workload.targets(doc, seeded.keys)
        profiles = asyncio.run(measure(seeded, targets, args.requests, args.cprofile))
        for name, text in profiles.items():
            if text:
                (ROOT / f"cprofile-{name}.txt").write_text(text)
    finally:
        backends.stop()


if __name__ == "__main__":
    main()
