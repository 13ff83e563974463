"""Where a request's time goes: pyinstrument over the app in-process, on the bench inventory.

    .venv/bin/python -m bench.profile [--requests 2000]

Sends offer requests and bids one after another through httpx's ASGI transport (no sockets, no
granian), so the profile shows the framework, the handler, matching, Redis and encoding, plus
the transport's own cost, which a server does not pay. Writes the text profiles to
.run/bench/profile-<endpoint>.txt and prints their heads. Uses its own Redis and Postgres (or
REDIS_URL / DATABASE_URL), like `python -m bench`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
from pyinstrument import Profiler

from bench import seed, server, workload
from bidder.app import create_app

ROOT = Path(".run/bench")


async def profile(seeded: server.Seeded, doc_targets: list[workload.Target], count: int) -> None:
    settings = server.in_process_settings(seeded)
    app = create_app(settings)
    rng = random.Random(5)
    moving = workload.moving(doc_targets)
    async with app.lifespan():
        transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://bench.local") as client:
            await app.state.runtime.inventory.reload()
            senders: list[tuple[str, Callable[[], Awaitable[httpx.Response]]]] = [
                ("healthz", lambda: client.get("/healthz")),
                ("offer_request", lambda: _offer(client, rng.choice(doc_targets))),
                ("bid", lambda: _bid(client, rng.choice(moving), rng)),
            ]
            for name, send in senders:
                for _ in range(200):  # warm up: caches, script loading, connections
                    await send()
                profiler = Profiler(async_mode="enabled", interval=0.0002)
                started = time.perf_counter()
                with profiler:
                    for _ in range(count):
                        await send()
                elapsed = time.perf_counter() - started
                text = profiler.output_text(unicode=False, color=False, show_all=False)
                path = ROOT / f"profile-{name}.txt"
                path.write_text(text)
                print(f"== {name}: {count / elapsed:,.0f} req/s in-process -> {path}")
                print("\n".join(text.splitlines()[:45]))


async def _offer(client: httpx.AsyncClient, target: workload.Target) -> httpx.Response:
    return await client.get(
        f"/functions/v1/api/offers/request/{target.screen_id}",
        headers={"Authorization": f"Bearer {target.api_key}"},
    )


async def _bid(
    client: httpx.AsyncClient, target: workload.Target, rng: random.Random
) -> httpx.Response:
    return await client.post(
        "/functions/v1/openrtb-2-6/bid",
        content=json.dumps(workload.bid_request(target, rng)),
        headers={"Authorization": f"Bearer {target.api_key}", "Content-Type": "application/json"},
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile")
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    backends = server.start_backends(ROOT / "servers")
    try:
        doc = seed.full_document()
        database = asyncio.run(server.fresh_database(backends.database_url, "bench_profile"))
        seeded = server.seed(database, server.fresh_redis(backends.redis_url, 2), doc)
        asyncio.run(profile(seeded, workload.targets(doc, seeded.keys), args.requests))
    finally:
        backends.stop()


if __name__ == "__main__":
    main()
