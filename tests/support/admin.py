"""Shared by the admin, screens and CLI tests: an app without the record writer (these tests
write no records), the operator's headers, and exact JSON parsing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import asyncpg
from litestar import Litestar
from litestar.testing import AsyncTestClient

from bidder.http.app import create_app
from tests.support.factories import ADV, CAMPAIGN, PUB, PUB_OTHER, SCREEN_MOVING, uid
from tests.support.servers import ADMIN_TOKEN, ServerUrls, make_settings

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

Client = AsyncTestClient[Litestar]


async def started_client(servers: ServerUrls) -> AsyncIterator[Client]:
    """The whole app on the real servers, with its background loops, minus the record writer."""
    app = create_app(make_settings(servers, RECORD_WRITER="0"))
    async with AsyncTestClient(app) as client:
        yield client


def parsed(body: bytes) -> Any:
    """JSON with exact decimals, so 0.000001 and 250.5 compare exactly."""
    return json.loads(body, parse_float=Decimal)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def fetchval(servers: ServerUrls, sql: str, *params: Any) -> Any:
    """One value from the session's Postgres, on a connection of its own."""
    conn = await asyncpg.connect(servers.database_url)
    try:
        return await conn.fetchval(sql, *params)
    finally:
        await conn.close()


def full_document() -> dict[str, Any]:
    """Every list, every field given explicitly (optional ones too), lists in id order: what GET
    must give back unchanged."""
    return {
        "publishers": [
            {
                "id": PUB,
                "name": "Metro Screens",
                "commission_rate": 0.15,
                "external_ids_enabled": True,
                "max_audience_per_play": 500.25,
                "max_screens": 20000,
                "rate_limit_per_second": 12.5,
                "rate_limit_burst": 40,
            },
            {
                "id": PUB_OTHER,
                "name": "Mall Media",
                "commission_rate": 0.2,
                "external_ids_enabled": False,
                "max_audience_per_play": 100000,
                "max_screens": 0,
                "rate_limit_per_second": None,
                "rate_limit_burst": None,
            },
        ],
        "advertisers": [
            {
                "id": ADV,
                "name": "Fizzy Drinks",
                "domain": "fizzy.example",
                "categories": ["IAB8-5", "IAB8"],
                "cattax": 1,
            }
        ],
        "billing_codes": [{"advertiser_id": ADV, "publisher_id": PUB, "code": "BILL-FIZZY-1"}],
        "screens": [
            {
                "id": SCREEN_MOVING,
                "publisher_id": PUB,
                "name": "Central Station 1",
                "type": "moving",
                "width": 1920,
                "height": 1080,
                "external_id": "ext-1",
                "audience_per_play": 119.47,
                "venue_type": "transit.train_station",
                "timezone": "Europe/Berlin",
                "lat": 52.525,
                "lon": 13.369,
                "active": True,
            },
            {
                "id": uid(2, 3),
                "publisher_id": PUB_OTHER,
                "name": "Kiosk",
                "type": "static",
                "width": 1080,
                "height": 1920,
                "external_id": None,
                "audience_per_play": 1,
                "venue_type": None,
                "timezone": "UTC",
                "lat": None,
                "lon": None,
                "active": False,
            },
        ],
        "campaigns": [
            {
                "id": CAMPAIGN,
                "advertiser_id": ADV,
                "name": "Summer",
                "status": "active",
                "cpm_cents": 250.5,
                "budget_cents": 100000,
                "daily_budget_cents": 5000.25,
                "start_at": "2026-01-01T00:00:00Z",
                "end_at": "2027-01-01T00:00:00Z",
                "max_plays_per_screen_per_hour": 4,
                "max_price_per_play_cents": 75.125,
                "targeting": {
                    "publisher_ids": [PUB],
                    "screen_types": ["moving", "slow"],
                    "venue_types": ["transit.train_station"],
                    "dayparts": [{"days": [0, 1, 2, 3, 4], "start_hour": 7, "end_hour": 10}],
                },
                "categories": ["1001", "1002"],
                "cattax": 7,
            },
            {
                "id": uid(2, 4),
                "advertiser_id": ADV,
                "name": "Winter",
                "status": "paused",
                "cpm_cents": 100,
                "budget_cents": 0.000001,
                "daily_budget_cents": None,
                "start_at": None,
                "end_at": None,
                "max_plays_per_screen_per_hour": None,
                "max_price_per_play_cents": None,
                "targeting": {},
                "categories": None,
                "cattax": 1,
            },
        ],
        "creatives": [
            {
                "id": uid(1, 5),
                "campaign_id": CAMPAIGN,
                "url": "https://cdn.example/summer.mp4",
                "kind": "video",
                "width": 1920,
                "height": 1080,
                "duration_seconds": 15,
                "approved": True,
            },
            {
                "id": uid(2, 5),
                "campaign_id": uid(2, 4),
                "url": "https://cdn.example/winter.gif?v=2",
                "kind": "cinemagraph",
                "width": 1080,
                "height": 1920,
                "duration_seconds": 6,
                "approved": False,
            },
        ],
        "exchange_rates": [
            {"currency": "GBP", "units_per_eur": 0.8512, "as_of": "2026-06-01"},
            {"currency": "USD", "units_per_eur": 1.0823, "as_of": "2026-06-02"},
        ],
    }


NEW_SCREEN = {
    "name": "Platform 9",
    "type": "slow",
    "width": 1080,
    "height": 1920,
    "external_id": "ext-new-9",
    "audience_per_play": 42.5,
    "venue_type": "transit.train_stations",
    "timezone": "Europe/Berlin",
    "lat": 52.5,
    "lon": 13.4,
}
