"""Plays written straight into the records, and a publisher key on a seeded inventory: what
the report tests share."""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any

import asyncpg

from store.history import Play, write_history
from tests.support.factories import (
    ADV,
    CAMPAIGN,
    CREATIVE_VIDEO,
    PUB,
    PUB_OTHER,
    SCREEN_MOVING,
    SCREEN_OTHER_PUB,
)

#: The commission rate of the plays `make_play` writes.
RATE = Decimal("0.15")


def make_play(n: int, at: datetime, *, screen: str = SCREEN_MOVING, **kw: Any) -> Play:
    """Offer number `n`, accepted at `at` on `screen` for 2.5 cents unless `kw` says else."""
    publisher = PUB_OTHER if screen == SCREEN_OTHER_PUB else PUB
    fields: dict[str, Any] = {
        "offer_id": str(uuid.UUID(int=n + 1)),
        "channel": "core",
        "outcome": "accepted",
        "publisher_id": publisher,
        "screen_id": screen,
        "campaign_id": CAMPAIGN,
        "creative_id": CREATIVE_VIDEO,
        "advertiser_id": ADV,
        "price_micros": 2_500_000,
        "at": at,
        "commission_rate": RATE,
        **kw,
    }
    return Play(**fields)


async def write_plays(database_url: str, plays: list[Play]) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await write_history(conn, plays)
    finally:
        await conn.close()
