"""Two `bidder serve` instances (as two hosts would be: different ports, two workers each), one
`bidder writer`, one Redis (a cluster with `pytest --redis=cluster`) and one Postgres: mixed
traffic at both, each offer answered at both instances at once. Nothing is overspent, no offer
is answered twice, and every acknowledged accept has its deal and its billing record."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import asyncpg
import httpx
import pytest

from store.hot import HotState, connect
from store.records import queue_stats as record_queue_stats
from tests.support.factories import (
    CAMPAIGN,
    SCREEN_MOVING,
    basic_document,
    campaign,
    make_key,
    seed,
)
from tests.support.processes import free_port, running, until_workers_ready
from tests.support.servers import ADMIN_TOKEN, SIGNING_SECRETS, ServerUrls, redis_mode

API = "/functions/v1/api"
PLAY_MICROS = 2_500_000  # 250 cpm x audience 10 / 1000 = 2.5 cents
BUDGET_CENTS = 50  # exactly 20 plays
REQUESTS = 200  # offer requests at each instance


def _env(servers: ServerUrls, port: int) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": servers.database_url,
        "REDIS_URL": servers.redis_url,
        "REDIS_MODE": servers.redis_mode,
        "ADMIN_TOKEN": ADMIN_TOKEN,
        "SIGNING_SECRETS": SIGNING_SECRETS,
        "BIDDER_ENV": "staging",
        "PUBLIC_BASE_URL": f"http://127.0.0.1:{port}",
        "INVENTORY_POLL_SECONDS": "0.2",
        "LOG_LEVEL": "WARNING",
        "RECORD_WRITER": "0",  # the `bidder writer` process writes the records
        # Exact money, not latency: a saturated 2-core machine must not turn replies into 503s.
        "REDIS_TIMEOUT_SECONDS": "5",
    }


@contextlib.contextmanager
def _fleet(servers: ServerUrls, logs: Path) -> Iterator[list[str]]:
    ports = [free_port(), free_port()]
    with contextlib.ExitStack() as stack:
        for port in ports:
            command = [
                *(sys.executable, "-m", "bidder.cli", "serve"),
                *("--host", "127.0.0.1", "--port", str(port), "--workers", "2"),
            ]
            stack.enter_context(running(command, _env(servers, port), logs / f"serve-{port}.log"))
        writer = [sys.executable, "-m", "bidder.cli", "writer"]
        stack.enter_context(running(writer, _env(servers, ports[0]), logs / "writer.log"))
        yield [f"http://127.0.0.1:{port}" for port in ports]


@pytest.fixture
async def fleet(servers: ServerUrls, clean: None, tmp_path: Path) -> AsyncIterator[list[str]]:
    await seed(
        servers.database_url,
        basic_document(campaigns=[campaign(budget_cents=Decimal(BUDGET_CENTS))]),
    )
    with _fleet(servers, tmp_path) as urls:
        yield urls


async def test_two_instances_share_one_budget_and_answer_each_offer_once(
    fleet: list[str], servers: ServerUrls, tmp_path: Path
) -> None:
    key = await make_key(servers.database_url)
    auth = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=0)
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(
                httpx.AsyncClient(base_url=url, timeout=30, limits=limits)
            )
            for url in fleet
        ]
        for client in clients:
            port = str(client.base_url).rstrip("/").rpartition(":")[2]
            await until_workers_ready(client, auth, tmp_path / f"serve-{port}.log")
        asked = await asyncio.gather(
            *[
                client.get(f"{API}/offers/request/{SCREEN_MOVING}", headers=auth)
                for client in clients
                for _ in range(REQUESTS)
            ]
        )
        statuses = [r.status_code for r in asked]
        assert set(statuses) <= {200, 404}, {r.status_code: r.text for r in asked}
        plays = BUDGET_CENTS * 1_000_000 // PLAY_MICROS
        assert statuses.count(200) == plays  # both instances together: never more than the budget
        offer_ids = [r.json()["offer_id"] for r in asked if r.status_code == 200]

        # Each offer answered at both instances at once: accept (2 cents) at one, reject or
        # accept at the other. Exactly one answer wins.
        def answer(index: int, offer_id: str, which: int) -> dict[str, object]:
            if which == 0 or index % 3 == 0:
                return {"action": "accept", "accepted_price_cents": 2}
            return {"action": "reject"}

        answers = await asyncio.gather(
            *[
                clients[which].post(
                    f"{API}/offers/response/{offer_id}",
                    json=answer(index, offer_id, which),
                    headers=auth,
                )
                for index, offer_id in enumerate(offer_ids)
                for which in (0, 1)
            ]
        )
    accepted: list[str] = []
    for index in range(len(offer_ids)):
        pair = answers[2 * index : 2 * index + 2]
        codes = sorted(a.status_code for a in pair)
        assert codes == [200, 404], [a.text for a in pair]  # answered once, never twice
        winner = next(a for a in pair if a.status_code == 200).json()
        if winner.get("deal_id"):
            accepted.append(winner["deal_id"])

    redis = connect(servers.redis_url, timeout=2.0, mode=redis_mode(servers))
    try:
        budget = (await HotState(redis).read_budgets(datetime.now(UTC)))[CAMPAIGN]
        assert budget.reserved == 0
        assert budget.spent == len(accepted) * 2_000_000
        assert budget.reserved + budget.spent <= budget.total
        for _ in range(300):  # the writer drains the queues (up to a minute)
            if not (await record_queue_stats(redis))[0]:
                break
            await asyncio.sleep(0.2)
    finally:
        await redis.aclose()
    conn = await asyncpg.connect(servers.database_url)
    try:
        deals = {r["d"] for r in await conn.fetch("SELECT deal_id::text AS d FROM deals")}
        billed = {
            r["d"] for r in await conn.fetch("SELECT deal_id::text AS d FROM billing_records")
        }
        offers = await conn.fetchval("SELECT count(*) FROM offers")
    finally:
        await conn.close()
    assert set(accepted) == deals
    assert set(accepted) == billed
    assert offers == plays  # every answered offer reached Postgres with its outcome, once
