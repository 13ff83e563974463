"""REDIS_MODE=sentinel against real sentinels (store/local_cluster.py: a primary, a replica and
a sentinel of their own): the hot path and the redis-py client reach the primary the sentinels
name, and after the primary is killed they reach the promoted replica, which holds every
accept acknowledged before (they waited for it: REDIS_WAIT_REPLICAS)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from matching.snapshot import CampaignInfo
from store.errors import REDIS_DOWN
from store.hot import Answered, HotState, connect, deal_key
from store.hot.topology import parse
from store.local_cluster import LocalSentinel
from store.pipelined_cluster import PipelinedSentinel
from tests.support.records import (
    ACCEPTED,
    accept_offer,
    prepare,
    reserve_offer,
)
from tests.support.servers import ServerUrls

pytestmark = [pytest.mark.fault]


@pytest.fixture(scope="module")
def sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSentinel]:
    topology = LocalSentinel(Path(tmp_path_factory.mktemp("sentinel")))
    topology.start()
    try:
        yield topology
    finally:
        topology.stop()


@pytest.fixture
async def hot(sentinel: LocalSentinel, servers: ServerUrls, clean: None) -> AsyncIterator[HotState]:
    redis = connect(sentinel.url, timeout=2.0, mode="sentinel")
    fast = PipelinedSentinel(parse(sentinel.url, "sentinel"), timeout=0.5, wait_replicas=1)
    yield HotState(redis, fast=fast)
    await fast.aclose()
    await redis.aclose()


async def _accept(hot: HotState, camp: CampaignInfo) -> str:
    offer_id = await reserve_offer(hot, camp, "core")
    answered = await accept_offer(hot, offer_id)
    assert isinstance(answered, Answered), answered
    return answered.deal_id


async def test_the_promoted_replica_serves_and_holds_every_acknowledged_accept(
    sentinel: LocalSentinel, servers: ServerUrls, hot: HotState
) -> None:
    _, camp = await prepare(hot.redis, servers.database_url)
    deals = [await _accept(hot, camp) for _ in range(50)]
    old = sentinel.primary_port()
    assert old is not None
    await asyncio.to_thread(sentinel.node(old).stop, kill=True)
    new = await asyncio.to_thread(sentinel.wait_new_primary, old)
    assert new != old
    after: list[str] = []
    for _ in range(200):  # the calls reach the new primary once the clients reconnect
        with contextlib.suppress(*REDIS_DOWN):
            after.append(await _accept(hot, camp))
        if len(after) >= 5:
            break
        await asyncio.sleep(0.05)
    assert len(after) >= 5
    for deal_id in deals + after:
        assert await hot.redis.exists(deal_key(camp.shard, deal_id)) == 1
    budget = (await hot.read_budgets(datetime.now(UTC)))[camp.id]
    assert budget.spent == (len(deals) + len(after)) * ACCEPTED
