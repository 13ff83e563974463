"""Redis CPU per hot-path call, Redis alone: no worker, no HTTP, no Postgres.

    .venv/bin/python -m bench.redis_scripts [--calls 20000] [--callers 32] [--rounds 3]
        [--allocator jemalloc] [--inventory bench] [--offer-hash packed] [--instructions]

Starts a Valkey/Redis of its own (as the bench does: `appendonly yes`, `appendfsync everysec`,
in .run/bench/redis-scripts), gives 64 campaigns a budget (over the 16 shards as their ids fall;
with `--inventory bench`, every active campaign of the bench inventory, a fifth of them with a
daily budget and a tenth with a frequency cap, and its billing codes), and runs through
`HotState` on the hot path's pipelined connection (offers written in the form `--offer-hash`
names, as OFFER_HASH does; lean by default, as the bench runs; and reservations left out of
the day's reserved counter unless `--count-day-reservations`, as COUNT_DAY_RESERVATIONS=0 and
the bench run them), with `callers` concurrent
tasks: `calls` Core offer reservations, as many OpenRTB bid reservations (their four extra
fields), then an accept of each Core offer while a stand-in record writer does the writer's
Redis side of each record (`XREADGROUP`, then `XACK` and `XDEL` of the batch: what
`RecordWriter` does around its Postgres write). For each step it prints the Redis CPU per call
(`INFO cpu` around the step, so everything Redis did: the scripts, reading and answering the
calls, the AOF), the EVALSHA's own time per call (`INFO commandstats`) and the calls per event
loop cycle (the fewer, the more each pays of Redis' fixed cost per cycle: the socket reads and
writes, the AOF write), and how much Redis' memory grew per call (`used_memory`: what an open
offer or bid, and a deal with its answered offer, keep in Redis). No worker shares the
machine's cores with Redis here, so these figures swing less than the harness' (docs/
performance.md, "Redis per request"), but on a shared machine they still move by a quarter
between runs: compare two versions of the scripts by `--instructions`.

`--instructions` runs the server under valgrind's callgrind (`apt-get install valgrind`) and
adds the instructions Redis ran per call (user space: its system calls, the socket and AOF
writes, are not counted). Unlike the CPU time they do not move with the machine's load, so
two versions of the scripts compare to a per cent in one run each; the server runs about 50
times slower, so a few thousand calls are enough.

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
import subprocess
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
from store.hot import OFFER_FORMS, HotState, OfferForm, Reserved, connect
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
    #: How much Redis' memory in use grew during the step (`used_memory`).
    memory_bytes: int
    #: The instructions Redis ran during the step (--instructions), else 0.
    instructions: int = 0

    def line(self) -> str:
        counted = (
            f"  {self.instructions / self.calls:9,.0f} instr/call" if self.instructions else ""
        )
        return (
            f"{self.name:22s} {self.calls / self.wall_s:8,.0f} calls/s  Redis "
            f"{1e6 * self.cpu_s / self.calls:6.1f} us/call  EVALSHA {self.evalsha_us:5.1f} us  "
            f"{self.calls / max(self.cycles, 1):5.1f} calls/cycle  "
            f"{self.memory_bytes / self.calls:+6.0f} B/call{counted}"
        )


@dataclass(frozen=True)
class Instructions:
    """Counts a server's instructions between `start` and `stop`: the server runs under
    callgrind with counting off (`--instr-atstart=no`); callgrind_control turns it on, off,
    and dumps the count to a file of `folder`."""

    pid: int
    folder: Path

    @staticmethod
    def wrapper(folder: Path) -> tuple[str, ...]:
        out = folder / "callgrind.%p.out"
        return ("valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}")

    def _control(self, *args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(self.pid)], check=True, capture_output=True)

    def start(self) -> None:
        self._control("-z")
        self._control("-i", "on")

    def stop(self) -> int:
        self._control("-i", "off")
        before = set(self.folder.glob("callgrind.*.out.*"))
        self._control("-d")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for dump in set(self.folder.glob("callgrind.*.out.*")) - before:
                for line in dump.read_text().splitlines():
                    if line.startswith("totals:"):
                        return int(line.split()[1])
            time.sleep(0.2)
        raise RuntimeError("callgrind wrote no dump")


def _redis_figures(port: int) -> tuple[float, float, int, int]:
    """(CPU seconds so far, EVALSHA us per call since the last reset, event loop cycles, bytes
    of memory in use)."""
    client = redis.Redis(port=port)
    try:
        cpu = client.info("cpu")
        stats = client.info("commandstats").get("cmdstat_evalsha", {})
        cycles = int(client.info("stats").get("eventloop_cycles", 0))
        memory = int(client.info("memory")["used_memory"])
    finally:
        client.close()
    used = float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])
    return used, float(stats.get("usec_per_call", 0.0)), cycles, memory


async def _step(
    name: str,
    port: int,
    calls: list[Callable[[], Awaitable[Any]]],
    callers: int,
    alongside: Callable[[], Awaitable[None]] | None = None,
    instructions: Instructions | None = None,
) -> tuple[Step, list[Any]]:
    """Run `calls` with `callers` tasks (and `alongside` until it returns), measured."""
    redis.Redis(port=port).config_resetstat()
    results: list[Any] = []
    queue = list(reversed(calls))

    async def caller() -> None:
        while queue:
            results.append(await queue.pop()())

    cpu_before, _, _, memory_before = _redis_figures(port)
    if instructions:
        instructions.start()
    started = time.perf_counter()
    await asyncio.gather(*[caller() for _ in range(callers)], *([alongside()] if alongside else []))
    wall = time.perf_counter() - started
    counted = instructions.stop() if instructions else 0
    cpu_after, evalsha_us, cycles, memory_after = _redis_figures(port)
    grown = memory_after - memory_before
    step = Step(name, len(calls), wall, cpu_after - cpu_before, evalsha_us, cycles, grown, counted)
    return step, results


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


async def _round(
    port: int,
    camps: list[CampaignInfo],
    calls: int,
    callers: int,
    form: OfferForm,
    counted: bool,
    instructions: Instructions | None,
) -> list[Step]:
    url = f"redis://127.0.0.1:{port}/0"
    client = connect(url, timeout=5.0)
    fast = PipelinedRedis(url, timeout=2.0)
    hot = HotState(client, fast=fast, offer_form=form, count_day_reservations=counted)
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
    offer_step, made = await _step(
        "offer reservation", port, reservations(core), callers, instructions=instructions
    )
    steps.append(offer_step)
    bid_step, _ = await _step(
        "bid reservation", port, reservations(bid), callers, instructions=instructions
    )
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
        instructions=instructions,
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
    port: int,
    calls: int,
    callers: int,
    rounds: int,
    campaigns: int,
    inventory: str,
    form: OfferForm,
    counted: bool,
    instructions: Instructions | None,
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
        for step in await _round(port, camps, calls, callers, form, counted, instructions):
            print(f"r{number} {step.line()}", flush=True)
            by_step.setdefault(step.name, []).append(step)
        # As the bench compacts between phases (waiting for one Redis started itself).
        await asyncio.to_thread(compact_redis, f"redis://127.0.0.1:{port}/0")
    print("median over the rounds (Redis us/call):")
    for name, steps in by_step.items():
        figures = [1e6 * s.cpu_s / s.calls for s in steps]
        per_call = [s.instructions / s.calls for s in steps if s.instructions]
        also = f"  {statistics.median(per_call):9,.0f} instr/call" if per_call else ""
        print(f"  {name:22s} {statistics.median(figures):6.1f}{also}")


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
    parser.add_argument("--offer-hash", choices=OFFER_FORMS, default="lean")
    parser.add_argument("--count-day-reservations", action="store_true")
    parser.add_argument("--instructions", action="store_true")
    args = parser.parse_args()
    shutil.rmtree(ROOT, ignore_errors=True)
    preload = _jemalloc() if args.allocator == "jemalloc" else ""
    if args.instructions and not shutil.which("valgrind"):
        raise SystemExit("--instructions: no valgrind (apt-get install valgrind)")
    wrapper = Instructions.wrapper(ROOT) if args.instructions else ()
    server = RedisServer(ROOT, free_port(), preload=preload, wrapper=wrapper)
    server.start()
    instructions = (
        Instructions(server.proc.pid, ROOT) if args.instructions and server.proc else None
    )
    print(f"Redis allocator: {_allocator_in_use(server)}", flush=True)
    try:
        uvloop.run(
            run(
                server.port,
                args.calls,
                args.callers,
                args.rounds,
                args.campaigns,
                args.inventory,
                args.offer_hash,
                args.count_day_reservations,
                instructions,
            )
        )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
