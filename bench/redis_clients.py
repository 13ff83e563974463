"""Per-call cost of one EVALSHA: redis-py's asyncio client against the auto-pipelined connection.

    .venv/bin/python -m bench.redis_clients [--callers 32] [--calls 1000]

Starts its own Valkey (in .run/bench/redis-clients) and runs the same small script through both
clients with `callers` concurrent tasks on uvloop; prints calls/s and microseconds per call.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import uvloop

from store.hot import connect
from store.local_servers import RedisServer, free_port
from store.pipelined import PipelinedRedis, PipelinedScript

SCRIPT = "redis.call('HINCRBY', KEYS[1], ARGV[1], 1) return {1, 2, 3}"


async def _measure(call: Callable[[], Awaitable[Any]], callers: int, calls: int) -> float:
    await call()

    async def caller() -> None:
        for _ in range(calls):
            await call()

    started = time.perf_counter()
    await asyncio.gather(*[caller() for _ in range(callers)])
    return time.perf_counter() - started


async def compare(url: str, callers: int, calls: int) -> None:
    client = connect(url, timeout=2.0)
    script = client.register_script(SCRIPT)
    piped = PipelinedRedis(url, timeout=2.0)
    piped_script = PipelinedScript(piped, SCRIPT)
    try:
        runs: dict[str, Callable[[], Awaitable[Any]]] = {
            "redis-py asyncio": lambda: script(keys=["h"], args=["f"]),
            "pipelined": lambda: piped_script(["h"], ["f"]),
        }
        total = callers * calls
        for name, call in runs.items():
            elapsed = await _measure(call, callers, calls)
            rate, cost = total / elapsed, elapsed / total * 1e6
            print(f"{name:>18}: {rate:>9,.0f} calls/s, {cost:6.1f} us/call")
    finally:
        await client.aclose()
        await piped.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--callers", type=int, default=32)
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args()
    server = RedisServer(Path(".run/bench/redis-clients").resolve(), free_port())
    server.start()
    try:
        uvloop.run(compare(server.url, args.callers, args.calls))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
