"""Redis work per hot-path call on a local Redis Cluster, per primary, and what WAIT costs.

    .venv/bin/python -m bench.cluster [--calls 3000] [--callers 16] [--campaigns 64]

Starts a local cluster (three primaries with a replica each, in .run/bench/cluster), gives
`campaigns` campaigns a budget (spread over the 16 shards as their ids fall), then runs
`calls` reservations (an offer request's Redis work), then an accept of each (its record
included: a `RecordWriter` drains the queues) with `callers` concurrent tasks, once with
`REDIS_WAIT_REPLICAS=0` and once with 1. For each step it prints the calls a second, the
median and 99th percentile latency of a call, and the Redis CPU per call (INFO cpu, summed over
the primaries) with each primary's share of it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import redis
import uvloop

from matching.snapshot import CampaignInfo, campaign_shard
from store.hot import HotState, Reserved, connect
from store.hot.topology import parse
from store.local_cluster import LocalRedisCluster
from store.pipelined_cluster import PipelinedCluster

ROOT = Path(".run/bench/cluster").resolve()
_PRICE = 2_500_000


def _cpu(ports: list[int]) -> dict[int, float]:
    spent = {}
    for port in ports:
        info = redis.Redis(port=port).info("cpu")
        spent[port] = float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
    return spent


def _campaign(template: CampaignInfo | None, number: int) -> CampaignInfo:
    cid = str(uuid.UUID(int=number + 1))
    base = dict(
        id=cid,
        advertiser_id=str(uuid.UUID(int=10**6)),
        name=f"c{number}",
        active=True,
        cpm_cents=Decimal(250),
        budget_micros=10**15,
        daily_budget_micros=None,
        start_at=None,
        end_at=None,
        max_plays_per_screen_per_hour=None,
        publisher_ids=None,
        screen_ids=None,
        screen_types=None,
        venue_types=None,
        dayparts=None,
        creatives=(),
        shard=campaign_shard(cid),
        cpm_micros=None,
        max_price_micros=None,
        ranked_creatives={},
        places=None,
        categories=(),
        cattax=0,
        category_keys=frozenset(),
        domain_keys=frozenset(),
    )
    return CampaignInfo(**base) if template is None else replace(template, **base)  # type: ignore[arg-type]


async def _step(
    name: str,
    calls: list[Callable[[], Awaitable[Any]]],
    callers: int,
    ports: list[int],
) -> list[Any]:
    latencies: list[float] = []
    results: list[Any] = []
    queue = list(calls)

    async def caller() -> None:
        while queue:
            call = queue.pop()
            started = time.perf_counter()
            results.append(await call())
            latencies.append(time.perf_counter() - started)

    before = _cpu(ports)
    started = time.perf_counter()
    await asyncio.gather(*[caller() for _ in range(callers)])
    wall = time.perf_counter() - started
    after = _cpu(ports)
    used = {port: after[port] - before[port] for port in ports}
    total = sum(used.values())
    latencies.sort()
    shares = " ".join(f"{100 * used[p] / total:4.1f}%" for p in ports) if total else "-"
    p50 = 1e3 * statistics.median(latencies)
    print(
        f"{name:20s} {len(calls) / wall:8,.0f} calls/s  p50 {p50:6.2f} ms"
        f"  p99 {1e3 * latencies[int(0.99 * (len(latencies) - 1))]:6.2f} ms"
        f"  Redis {1e6 * total / len(calls):6.1f} us/call  per primary {shares}",
        flush=True,
    )
    return results


async def _round(
    client: Any,
    url: str,
    wait: int,
    camps: list[CampaignInfo],
    calls: int,
    callers: int,
    ports: list[int],
) -> None:
    fast = PipelinedCluster(parse(url, "cluster"), timeout=1.0, wait_replicas=wait)
    hot = HotState(client, fast=fast)
    now = datetime.now(UTC)
    fields = {"channel": "core", "publisher": str(uuid.UUID(int=7)), "creative": "c"}

    def reserve(camp: CampaignInfo) -> Callable[[], Awaitable[Any]]:
        return lambda: hot.reserve(
            camp, _PRICE, "screen-1", now, now + timedelta(minutes=5), fields
        )

    made = await _step(
        f"reserve (WAIT {wait})",
        [reserve(camps[i % len(camps)]) for i in range(calls)],
        callers,
        ports,
    )
    offers = [r.offer_id for r in made if isinstance(r, Reserved)]

    def accept(offer_id: str) -> Callable[[], Awaitable[Any]]:
        payload = {"billing_id": str(uuid.uuid4()), "gross_micros": _PRICE}
        return lambda: hot.respond(
            offer_id, fields["publisher"], "accept", datetime.now(UTC), payload, _PRICE
        )

    await _step(f"accept (WAIT {wait})", [accept(o) for o in offers], callers, ports)
    await fast.aclose()


async def run(cluster: LocalRedisCluster, calls: int, callers: int, campaigns: int) -> None:
    url = cluster.url
    client = connect(url, timeout=5.0, mode="cluster")
    ports = cluster.primary_ports()
    camps = [_campaign(None, n) for n in range(campaigns)]
    await HotState(client).sync_inventory(
        {c.id: (c.shard, c.budget_micros) for c in camps}, {}, force=True
    )
    for wait in (0, 1):
        await _round(client, url, wait, camps, calls, callers, ports)
    await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--callers", type=int, default=16)
    parser.add_argument("--campaigns", type=int, default=64)
    args = parser.parse_args()
    shutil.rmtree(ROOT, ignore_errors=True)
    cluster = LocalRedisCluster(ROOT)
    cluster.start()
    try:
        uvloop.run(run(cluster, args.calls, args.callers, args.campaigns))
    finally:
        with contextlib.suppress(Exception):
            cluster.stop()


if __name__ == "__main__":
    main()
