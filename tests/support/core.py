"""Shared set-up for the Core API tests: the app on real Redis and Postgres, a seeded
inventory, keys, and small request helpers.

The app is driven through httpx's ASGI transport on the test's own event loop, with its Runtime
started there too. Unlike `app_client` (whose requests each run to completion through an anyio
portal in another thread), this lets requests really interleave, which the race tests need, and
lets a test read the runtime's Redis client directly.

Expected figures come from the contract and decisions, not from the code: the basic document's
moving screen has audience 10 and the campaign a CPM of 250 cents, so one play costs
250 x 10 / 1000 = 2.5 cents (docs/contract.md#3-matching-and-price).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx

from bidder.http.app import create_app
from bidder.runtime import Runtime
from bidder.settings import Settings
from matching.inventory import InventoryDocument
from tests.support.factories import PUB_OTHER, basic_document, make_key, seed

API = "/functions/v1/api"
PLAY_PRICE_MICROS = 2_500_000  # 250 cpm x 10 audience / 1000 = 2.5 cents
INVALID_KEY_BODY = {"error": "Invalid or expired API key"}
NOT_FOUND_OFFER = "Offer not found, expired, or access denied"


@dataclass
class Live:
    """A running app: its HTTP client and its runtime."""

    client: httpx.AsyncClient
    rt: Runtime
    database_url: str


@asynccontextmanager
async def live_app(settings: Settings) -> AsyncIterator[Live]:
    rt = Runtime(settings)
    await rt.start()
    app = create_app(settings, runtime=rt)
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    try:
        async with httpx.AsyncClient(
            transport=transport, base_url="http://testserver.local"
        ) as client:
            yield Live(client, rt, settings.postgres.url)
    finally:
        await rt.stop()


@dataclass
class Core:
    """The app under test with a seeded inventory and one key per publisher."""

    live: Live
    key: str
    other_key: str

    @property
    def client(self) -> httpx.AsyncClient:
        return self.live.client

    @property
    def rt(self) -> Runtime:
        return self.live.rt

    @property
    def database_url(self) -> str:
        return self.live.database_url

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    @property
    def other_auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.other_key}"}

    async def reload(self) -> None:
        await self.rt.inventory.reload()

    async def offer(self, screen_id: str, **params: str) -> httpx.Response:
        return await self.client.get(
            f"{API}/offers/request/{screen_id}", params=params, headers=self.auth
        )

    async def respond(
        self, offer_id: str, body: Any, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        return await self.client.post(
            f"{API}/offers/response/{offer_id}", json=body, headers=headers or self.auth
        )

    async def confirm(
        self, deal_id: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        return await self.client.post(
            f"{API}/playout/confirm/{deal_id}", json=body, headers=headers or self.auth
        )


async def prepare(live: Live, doc: InventoryDocument | None = None) -> Core:
    await seed(live.database_url, doc or basic_document())
    key = await make_key(live.database_url)
    other_key = await make_key(live.database_url, PUB_OTHER)
    await live.rt.inventory.reload()
    return Core(live, key, other_key)


async def count_rows(database_url: str, *tables: str) -> dict[str, int]:
    conn = await asyncpg.connect(database_url)
    try:
        return {t: int(await conn.fetchval(f"SELECT count(*) FROM {t}")) for t in tables}
    finally:
        await conn.close()
