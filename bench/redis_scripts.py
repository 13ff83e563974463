"""Redis CPU per hot-path call, Redis alone: no worker, no HTTP, no Postgres.

    .venv/bin/python -m bench.redis_scripts [--calls 20000] [--callers 32] [--rounds 3]
        [--allocator jemalloc] [--inventory bench]

Starts a Valkey/Redis of its own (as the bench does: `appendonly yes`, `appendfsync everysec`,
in .run/bench/redis-scripts), gives 64 campaigns a budget (over the 16 shards as their ids fall;
with `--inventory bench`, every active campaign of the bench inventory, a fifth of them with a
daily budget and a tenth with a frequency cap, and its billing codes), and runs through
`HotState` on the hot path's pipelined connection, with `callers` concurrent
tasks: `calls` Core offer reservations, as many OpenRTB bid reservations (their four extra
fields), then an accept of each Core offer while a stand-in record writer does the writer's
Redis side of each record (`XREADGROUP`, then `XACK` and `XDEL` of the batch: what
`RecordWriter` does around its Postgres write). For each step it prints the Redis CPU per call
(`INFO cpu` around the step, so everything Redis did: the scripts, reading and answering the
calls, the AOF), the EVALSHA's own time per call (`INFO commandstats`) and the calls per event
loop cycle (the fewer, the more each pays of Redis' fixed cost per cycle: the socket reads and
writes, the AOF write). The worker's load does not move these figures, so two versions of the
scripts compare here within a few per cent, where the harness' figures swing with the machine's
load (docs/performance.md, "Redis per request").

The pip-installed Valkey is built with glibc's malloc; production's Redis and Valkey builds use
jemalloc. `--allocator jemalloc` runs the server with the system's libjemalloc preloaded
(`apt-get install libjemalloc2` on Debian), so every allocation goes to jemalloc as in
production; the server's memory map is checked for it.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes.util
import shutil
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import redis
import uvloop

from bench import seed
from bench.cluster import _campaign
from bench.server import compact_redis
from matching.snapshot import CampaignInfo, build_snapshot
from store.hot import HotState, Reserved, connect
from store.local_servers import RedisServer, free_port
from store.pipelined import PipelinedRedis
from store.records import RecordWriter

ROOT = Path(".run/bench/redis-scripts").resolve()
_PRICE = 2_500_000
_PUBLISHER = str(uuid.UUID(int=7))


@dataclass(frozen=True)
class Step:
    name: str
    calls: int
    wall_s: float
    cpu_s: float
    evalsha_us: float
    cycles: int

    def line(self) -> str:
        return (
            f"{self.name:22s} {self.calls / self.wall_s:8,.0f} calls/s  Redis "
            f"{1e6 * self.cpu_s / self.calls:6.1f} us/call  EVALSHA {self.evalsha_us:5.1f} us  "
            f"{self.calls / max(self.cycles, 1):5.1f} calls/cycle"
        )


def _redis_figures(port: int) -> tuple[float, float, int]:
    """(CPU seconds so far, EVALSHA us per call since the last reset, event loop cycles)."""
    client = redis.Redis(port=port)
    try:
        cpu = client.info("cpu")
        stats = client.info("commandstats").get("cmdstat_evalsha", {})
        cycles = int(client.info("stats").get("eventloop_cycles", 0))
    finally:
        client.close()
    used = float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])
    return used, float(stats.get("usec_per_call", 0.0)), cycles


async def _step(
    name: str,
    port: int,
    calls: list[Callable[[], Awaitable[Any]]],
    callers: int,
    alongside: Callable[[], Awaitable[None]] | None = None,
) -> tuple[Step, list[Any]]:
    """Run `calls` with `callers` tasks (and `alongside` until it returns), measured."""
    redis.Redis(port=port).config_resetstat()
    results: list[Any] = []
    queue = list(reversed(calls))

    async def caller() -> None:
        while queue:
            results.append(await queue.pop()())

    cpu_before, _, _ = _redis_figures(port)
    started = time.perf_counter()
    await asyncio.gather(*[caller() for _ in range(callers)], *([alongside()] if alongside else []))
    wall = time.perf_counter() - started
    cpu_after, evalsha_us, cycles = _redis_figures(port)
    return Step(name, len(calls), wall, cpu_after - cpu_before, evalsha_us, cycles), results


async def _drain_records(client: Any, expected: int) -> None:
    """The record writer's Redis side for `expected` records: read a batch, acknowledge and
    delete it, until every record was read."""
    writer = RecordWriter(client, _no_postgres, consumer="scripts-bench", block_ms=50)
    seen = 0
    deadline = time.monotonic() + 120
    while seen < expected and time.monotonic() < deadline:
        batch = await writer.read_batch()
        if batch:
            await writer.ack(batch)
            seen += len(batch)


async def _no_postgres() -> Any:
    raise RuntimeError("the scripts bench writes nothing to Postgres")


#: Screens the reservations go round: with a frequency cap of 60 an hour, no campaign and
#: screen pair reaches it in a run.
_SCREENS = [f"screen-{n}" for n in range(1000)]


async def _round(port: int, camps: list[CampaignInfo], calls: int, callers: int) -> list[Step]:
    url = f"redis://127.0.0.1:{port}/0"
    client = connect(url, timeout=5.0)
    fast = PipelinedRedis(url, timeout=2.0)
    hot = HotState(client, fast=fast)
    core = {"channel": "core", "publisher": _PUBLISHER, "creative": "creative-1"}
    bid = {
        "channel": "openrtb",
        "publisher": _PUBLISHER,
        "creative": "creative-1",
        "auction_id": "auction-1",
        "imp_id": "1",
        "pmp_deal_id": "",
        "audience": "12.5",
    }

    def reserve(
        camp: CampaignInfo, fields: dict[str, str], number: int
    ) -> Callable[[], Awaitable[Any]]:
        now = datetime.now(UTC)
        screen = _SCREENS[number % len(_SCREENS)]
        return lambda: hot.reserve(camp, _PRICE, screen, now, now + timedelta(minutes=30), fields)

    def reservations(fields: dict[str, str]) -> list[Callable[[], Awaitable[Any]]]:
        return [reserve(camps[i % len(camps)], fields, i) for i in range(calls)]

    steps = []
    offer_step, made = await _step("offer reservation", port, reservations(core), callers)
    steps.append(offer_step)
    bid_step, _ = await _step("bid reservation", port, reservations(bid), callers)
    steps.append(bid_step)
    offers = [r.offer_id for r in made if isinstance(r, Reserved)]

    def accept(offer_id: str) -> Callable[[], Awaitable[Any]]:
        payload = {"billing_id": str(uuid.uuid4()), "gross_micros": _PRICE}
        return lambda: hot.respond(
            offer_id, _PUBLISHER, "accept", datetime.now(UTC), payload, _PRICE
        )

    accept_step, _ = await _step(
        "accept + record read",
        port,
        [accept(o) for o in offers],
        callers,
        alongside=lambda: _drain_records(client, len(offers)),
    )
    steps.append(accept_step)
    await fast.aclose()
    await client.aclose()
    return steps


def _inventory(name: str, campaigns: int) -> tuple[list[CampaignInfo], dict[tuple[str, str], str]]:
    """The campaigns the reservations go round, and the billing codes."""
    if name == "plain":
        return [_campaign(None, n) for n in range(campaigns)], {}
    snapshot = build_snapshot(seed.full_document())
    return list(snapshot.campaigns.values()), snapshot.billing_codes


async def run(
    port: int, calls: int, callers: int, rounds: int, campaigns: int, inventory: str
) -> None:
    client = connect(f"redis://127.0.0.1:{port}/0", timeout=5.0)
    camps, codes = _inventory(inventory, campaigns)
    await HotState(client).sync_inventory(
        {c.id: (c.shard, c.budget_micros) for c in camps}, codes, force=True
    )
    print(f"{len(camps)} campaigns, {len(codes)} billing codes", flush=True)
    await client.aclose()
    by_step: dict[str, list[Step]] = {}
    for number in range(1, rounds + 1):
        for step in await _round(port, camps, calls, callers):
            print(f"r{number} {step.line()}", flush=True)
            by_step.setdefault(step.name, []).append(step)
        # As the bench compacts between phases (waiting for one Redis started itself).
        await asyncio.to_thread(compact_redis, f"redis://127.0.0.1:{port}/0")
    print("median over the rounds (Redis us/call):")
    for name, steps in by_step.items():
        figures = [1e6 * s.cpu_s / s.calls for s in steps]
        print(f"  {name:22s} {statistics.median(figures):6.1f}")


#: Where Debian and others put the shared jemalloc.
_JEMALLOC_PATHS = (
    "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
    "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",
    "/usr/lib64/libjemalloc.so.2",
    "/usr/lib/libjemalloc.so.2",
)


def _jemalloc() -> str:
    for path in _JEMALLOC_PATHS:
        if Path(path).exists():
            return path
    found = ctypes.util.find_library("jemalloc")
    if found is None:
        raise SystemExit("--allocator jemalloc: no libjemalloc (apt-get install libjemalloc2)")
    return found


def _allocator_in_use(server: RedisServer) -> str:
    maps = Path(f"/proc/{server.proc.pid}/maps").read_text() if server.proc else ""
    return "jemalloc" if "libjemalloc" in maps else "glibc malloc"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--callers", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--campaigns", type=int, default=64)
    parser.add_argument("--allocator", choices=("glibc", "jemalloc"), default="glibc")
    parser.add_argument("--inventory", choices=("plain", "bench"), default="plain")
    args = parser.parse_args()
    shutil.rmtree(ROOT, ignore_errors=True)
    preload = _jemalloc() if args.allocator == "jemalloc" else ""
    server = RedisServer(ROOT, free_port(), preload=preload)
    server.start()
    print(f"Redis allocator: {_allocator_in_use(server)}", flush=True)
    try:
        uvloop.run(
            run(server.port, args.calls, args.callers, args.rounds, args.campaigns, args.inventory)
        )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
