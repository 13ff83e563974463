"""The app starts on real servers and reports ready once the inventory is loaded."""

from __future__ import annotations

from litestar.testing import AsyncTestClient

from bidder.http.app import create_app
from bidder.settings import Settings


async def test_ready_with_real_servers(settings: Settings, clean: None) -> None:
    app = create_app(settings)
    async with AsyncTestClient(app) as client:
        health = await client.get("/healthz")
        assert health.status_code == 200
        ready = await client.get("/readyz")
        body = ready.json()
        assert ready.status_code == 200, body
        assert body["redis"] == "ok"
        assert body["postgres"] == "ok"
        assert body["queue"]["depth"] == 0
