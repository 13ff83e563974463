"""Small inventories for tests, built from the inventory document types.

Ids are fixed UUIDs so failures are readable; every builder takes overrides.
"""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import asyncpg

from bidder.auth import new_api_key
from matching.inventory import (
    Advertiser,
    BillingCode,
    Campaign,
    Creative,
    InventoryDocument,
    Publisher,
    Screen,
    Targeting,
)
from store.inventory_repo import create_api_key, import_document


def uid(n: int, kind: int = 0) -> str:
    """A readable fixed UUID: uid(3, 2) -> 00000002-0000-4000-8000-000000000003."""
    return str(uuid.UUID(f"{kind:08x}-0000-4000-8000-{n:012x}"))


PUB = uid(1, 1)
PUB_OTHER = uid(2, 1)
ADV = uid(1, 2)
SCREEN_MOVING = uid(1, 3)
SCREEN_STATIC = uid(2, 3)
SCREEN_SLOW = uid(3, 3)
SCREEN_OTHER_PUB = uid(4, 3)
CAMPAIGN = uid(1, 4)
CREATIVE_VIDEO = uid(1, 5)
CREATIVE_IMAGE = uid(2, 5)


def publisher(**kw: Any) -> Publisher:
    return Publisher(
        **{
            "id": PUB,
            "name": "Metro Screens",
            "commission_rate": Decimal("0.15"),
            "external_ids_enabled": True,
            **kw,
        }
    )


def advertiser(**kw: Any) -> Advertiser:
    return Advertiser(**{"id": ADV, "name": "Fizzy Drinks", "domain": "fizzy.example", **kw})


def screen(**kw: Any) -> Screen:
    return Screen(
        **{
            "id": SCREEN_MOVING,
            "publisher_id": PUB,
            "name": "Central Station 1",
            "type": "moving",
            "width": 1920,
            "height": 1080,
            "external_id": "ext-moving-1",
            "audience_per_play": Decimal("10"),
            **kw,
        }
    )


def campaign(**kw: Any) -> Campaign:
    return Campaign(
        **{
            "id": CAMPAIGN,
            "advertiser_id": ADV,
            "name": "Summer",
            "status": "active",
            "cpm_cents": Decimal("250"),
            "budget_cents": Decimal("100000"),
            "targeting": Targeting(),
            **kw,
        }
    )


def creative(**kw: Any) -> Creative:
    return Creative(
        **{
            "id": CREATIVE_VIDEO,
            "campaign_id": CAMPAIGN,
            "url": "https://cdn.example/summer.mp4",
            "kind": "video",
            "width": 1920,
            "height": 1080,
            "duration_seconds": 15,
            "approved": True,
            **kw,
        }
    )


def basic_document(**lists: Any) -> InventoryDocument:
    """Two publishers, one advertiser with a billing code, screens of every type, one campaign
    with a video and an image creative. Pass lists to replace any of them."""
    doc: dict[str, Any] = {
        "publishers": [publisher(), publisher(id=PUB_OTHER, name="Mall Media")],
        "advertisers": [advertiser()],
        "billing_codes": [
            BillingCode(advertiser_id=ADV, publisher_id=PUB, code="BILL-FIZZY-METRO")
        ],
        "screens": [
            screen(),
            screen(id=SCREEN_STATIC, type="static", external_id="ext-static-1", name="Kiosk"),
            screen(id=SCREEN_SLOW, type="slow", external_id="ext-slow-1", name="Hall"),
            screen(
                id=SCREEN_OTHER_PUB,
                publisher_id=PUB_OTHER,
                external_id="ext-moving-1",
                name="Mall 1",
            ),
        ],
        "campaigns": [campaign()],
        "creatives": [
            creative(),
            creative(id=CREATIVE_IMAGE, url="https://cdn.example/summer.jpg", kind="image"),
        ],
    }
    doc.update(lists)
    return InventoryDocument(**doc)


async def seed(database_url: str, doc: InventoryDocument) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await import_document(conn, doc)
    finally:
        await conn.close()


async def make_key(database_url: str, publisher_id: str = PUB, prefix: str = "dk_stg_") -> str:
    """A publisher API key (staging prefix, like the test settings)."""
    key, key_hash = new_api_key(prefix)
    conn = await asyncpg.connect(database_url)
    try:
        await create_api_key(conn, publisher_id, key_hash, prefix, "staging", None)
    finally:
        await conn.close()
    return key
