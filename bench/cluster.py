"""Redis work per hot-path call on a local Redis Cluster, per primary, and what WAIT costs.

    .venv/bin/python -m bench.cluster [--calls 3000] [--callers 16] [--campaigns 64]
        [--screens 1000] [--slices 1,16] [--rounds 1] [--wait 0,1] [--daily MICROS]

Starts a local cluster (three primaries with a replica each, in .run/bench/cluster), gives
`campaigns` campaigns a budget (spread over the 16 shards as their ids fall), then runs
`calls` reservations (an offer request's Redis work) from `screens` screens, then an accept of
each, with `callers` concurrent tasks, for each `--wait` (REDIS_WAIT_REPLICAS) and each
`--slices` (BUDGET_SLICES), the slice counts alternated `rounds` times. For each step it
prints the calls a second, the median and 99th percentile latency of a call, and the Redis CPU
per call (INFO cpu, summed over the primaries) with each primary's share of it and the busiest
primary's share over the mean share. `--campaigns 1` is one dominant campaign: with
`--slices 1,16` it compares its budget on one shard with its budget split over all 16;
`--daily` gives the campaigns a daily limit (granted to the slices day by day too).
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
from dataclasses import dataclass, field, replace
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


def _campaign(template: CampaignInfo | None, number: int, daily: int | None = None) -> CampaignInfo:
    cid = str(uuid.UUID(int=number + 1))
    base = dict(
        id=cid,
        advertiser_id=str(uuid.UUID(int=10**6)),
        name=f"c{number}",
        active=True,
        cpm_cents=Decimal(250),
        budget_micros=10**15,
        daily_budget_micros=daily,
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
        cattax=1,
        category_keys=frozenset(),
        domain_keys=frozenset(),
    )
    return CampaignInfo(**base) if template is None else replace(template, **base)  # type: ignore[arg-type]


async def _step(
    name: str,
    calls: list[Callable[[], Awaitable[Any]]],
    callers: int,
    ports: list[int],
    busiest: list[float] | None = None,
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
    ratio = max(used.values()) * len(ports) / total if total else 0.0
    if busiest is not None:
        busiest.append(ratio)
    p50 = 1e3 * statistics.median(latencies)
    print(
        f"{name:28s} {len(calls) / wall:8,.0f} calls/s  p50 {p50:6.2f} ms"
        f"  p99 {1e3 * latencies[int(0.99 * (len(latencies) - 1))]:6.2f} ms"
        f"  Redis {1e6 * total / len(calls):6.1f} us/call  per primary {shares}"
        f"  busiest/mean {ratio:4.2f}",
        flush=True,
    )
    return results


@dataclass
class Load:
    """What each round runs: the campaigns, the screens the requests come from, the calls and
    callers, and the cluster's primaries."""

    camps: list[CampaignInfo]
    screens: list[str]
    calls: int
    callers: int
    ports: list[int]
    #: Busiest primary's share over the mean, per (step, slices), one figure a round.
    busiest: dict[tuple[str, int], list[float]] = field(default_factory=dict)


async def _round(client: Any, url: str, wait: int, slices: int, load: Load) -> None:
    fast = PipelinedCluster(parse(url, "cluster"), timeout=1.0, wait_replicas=wait)
    hot = HotState(client, fast=fast, slices=slices)
    now = datetime.now(UTC)
    fields = {"channel": "core", "publisher": str(uuid.UUID(int=7)), "creative": "c"}
    camps, screens, ports = load.camps, load.screens, load.ports

    def reserve(camp: CampaignInfo, screen: str) -> Callable[[], Awaitable[Any]]:
        return lambda: hot.reserve(camp, _PRICE, screen, now, now + timedelta(minutes=5), fields)

    label = f"(WAIT {wait}, slices {slices})"
    made = await _step(
        f"reserve {label}",
        [reserve(camps[i % len(camps)], screens[i % len(screens)]) for i in range(load.calls)],
        load.callers,
        ports,
        load.busiest.setdefault((f"reserve, WAIT {wait}", slices), []),
    )
    offers = [r.offer_id for r in made if isinstance(r, Reserved)]

    def accept(offer_id: str) -> Callable[[], Awaitable[Any]]:
        payload = {"billing_id": str(uuid.uuid4()), "gross_micros": _PRICE}
        return lambda: hot.respond(
            offer_id, fields["publisher"], "accept", datetime.now(UTC), payload, _PRICE
        )

    await _step(
        f"accept {label}",
        [accept(o) for o in offers],
        load.callers,
        ports,
        load.busiest.setdefault((f"accept, WAIT {wait}", slices), []),
    )
    await fast.aclose()


async def run(
    cluster: LocalRedisCluster, load: Load, slice_counts: list[int], waits: list[int], rounds: int
) -> None:
    url = cluster.url
    client = connect(url, timeout=5.0, mode="cluster")
    await HotState(client).sync_inventory(
        {c.id: (c.shard, c.budget_micros) for c in load.camps}, {}, force=True
    )
    for number in range(rounds):
        # Alternated: each slice count sees the machine's load of the same moments.
        for slices in slice_counts if number % 2 == 0 else slice_counts[::-1]:
            for wait in waits:
                await _round(client, url, wait, slices, load)
    await client.aclose()
    print("\nbusiest primary's share of Redis CPU over the mean share (median of the rounds):")
    for (step, slices), ratios in load.busiest.items():
        print(f"  {step:16s} slices {slices:2d}: {statistics.median(ratios):4.2f}x", flush=True)


def _counts(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--callers", type=int, default=16)
    parser.add_argument("--campaigns", type=int, default=64)
    parser.add_argument("--screens", type=int, default=1000)
    parser.add_argument("--slices", type=_counts, default=[1], help="BUDGET_SLICES, e.g. 1,16")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--wait", type=_counts, default=[0, 1], help="REDIS_WAIT_REPLICAS")
    parser.add_argument(
        "--daily", type=int, default=None, help="each campaign's daily limit, micro-cents"
    )
    args = parser.parse_args()
    shutil.rmtree(ROOT, ignore_errors=True)
    cluster = LocalRedisCluster(ROOT)
    cluster.start()
    load = Load(
        [_campaign(None, n, args.daily) for n in range(args.campaigns)],
        [str(uuid.UUID(int=10**7 + n)) for n in range(args.screens)],
        args.calls,
        args.callers,
        cluster.primary_ports(),
    )
    try:
        uvloop.run(run(cluster, load, args.slices, args.wait, args.rounds))
    finally:
        with contextlib.suppress(Exception):
            cluster.stop()


if __name__ == "__main__":
    main()
