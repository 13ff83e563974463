"""The demo's week of history (bidder/demo_history.py): loaded with the demo inventory, so the
reports show something on a first run; written once however often it is loaded; and every
campaign still balances against Redis afterwards."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import asyncpg

from bidder.cli.dev import prepare_on
from bidder.demo import EXAMPLE_PUBLISHER, FIZZY_WINTER
from bidder.demo_history import HISTORY_DAYS, demo_history
from bidder.reports import earnings_report
from bidder.reports.params import ReportRange
from bidder.settings import Settings
from store.hot import connect
from store.reconcile import check_balances


def test_the_history_is_the_same_for_the_same_day_and_covers_the_week_before() -> None:
    today = date(2026, 5, 8)
    plays = demo_history(today)
    assert plays == demo_history(today)
    days = {play.at.date() for play in plays}
    assert days == {today - timedelta(days=n) for n in range(1, HISTORY_DAYS + 1)}
    assert FIZZY_WINTER not in {play.campaign_id for play in plays}  # paused: never played
    assert {play.outcome for play in plays} == {"accepted", "rejected", "expired", "billed", "lost"}


async def test_a_first_dev_run_has_a_week_of_earnings_that_balance(
    settings: Settings, migrated: str, clean: None
) -> None:
    conn = await asyncpg.connect(migrated)
    redis = connect(settings.redis.url, timeout=2.0)
    try:
        await prepare_on(conn, settings, {})
        billed = await conn.fetchval("SELECT count(*) FROM billing_records")
        today = datetime.now(UTC).date()
        week = ReportRange(today - timedelta(days=HISTORY_DAYS), today, "UTC")
        report = await earnings_report(conn, EXAMPLE_PUBLISHER, ["day"], week)
        assert len(report.rows) == HISTORY_DAYS
        assert all(row["plays"] > 0 for row in report.rows)
        assert not (await check_balances(redis, conn)).differing

        await prepare_on(conn, settings, {}, reset_demo=True)  # loaded again: nothing twice
        assert await conn.fetchval("SELECT count(*) FROM billing_records") == billed
    finally:
        await redis.aclose()
        await conn.close()
