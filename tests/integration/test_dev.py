"""`bidder dev`'s preparation against the session's Postgres: the demo inventory is imported on
the first run only (or on request), so an operator's changes to it survive a restart, and the
demo key of the previous run is reused while it works."""

from __future__ import annotations

from typing import Any

import asyncpg

from bidder.demo import EXAMPLE_PUBLISHER
from bidder.dev import prepare_on
from bidder.settings import Settings


async def _campaign_status(conn: asyncpg.Connection[Any], campaign_id: str) -> str:
    status: str = await conn.fetchval("SELECT status FROM campaigns WHERE id = $1", campaign_id)
    return status


async def test_a_second_run_keeps_changes_to_the_demo_inventory_until_reset(
    settings: Settings, migrated: str, clean: None
) -> None:
    state: dict[str, Any] = {}
    conn = await asyncpg.connect(migrated)
    try:
        key = await prepare_on(conn, settings, state)
        assert await conn.fetchval(
            "SELECT count(*) FROM publishers WHERE id = $1", EXAMPLE_PUBLISHER
        )
        campaign = await conn.fetchval(
            "SELECT id::text FROM campaigns WHERE status = 'active' ORDER BY id LIMIT 1"
        )
        await conn.execute("UPDATE campaigns SET status = 'paused' WHERE id = $1", campaign)

        state["api_key"] = key
        assert await prepare_on(conn, settings, state) == key  # the same key, still valid
        assert await _campaign_status(conn, campaign) == "paused"  # the operator's change kept

        await prepare_on(conn, settings, state, reset_demo=True)
        assert await _campaign_status(conn, campaign) == "active"  # the demo document again
    finally:
        await conn.close()
