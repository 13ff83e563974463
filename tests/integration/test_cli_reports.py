"""`bidder reports earnings|delivery` (docs/reports.md, "From the command line"): the same
rows as the report built in one piece, a progress bar on stderr for a long range, and a bad
parameter refused with exit 1 and its reason."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, date, datetime, time

import asyncpg

from bidder.reports import earnings_report
from bidder.reports.params import ReportRange
from store.history import write_history
from tests.support.cli import bidder, cli_env
from tests.support.factories import CAMPAIGN, PUB, SCREEN_STATIC, basic_document, seed
from tests.support.reports import make_play
from tests.support.servers import ServerUrls

_DAYS = (date(2026, 1, 10), date(2026, 2, 15), date(2026, 3, 20), date(2026, 3, 31))


async def _history(database_url: str) -> None:
    await seed(database_url, basic_document())
    plays = [make_play(n, datetime.combine(day, time(23, 30), UTC)) for n, day in enumerate(_DAYS)]
    plays.append(make_play(9, datetime(2026, 2, 1, 12, tzinfo=UTC), screen=SCREEN_STATIC))
    conn = await asyncpg.connect(database_url)
    try:
        await write_history(conn, plays)
    finally:
        await conn.close()


async def test_earnings_as_csv_over_a_quarter_in_chunks(servers: ServerUrls, clean: None) -> None:
    await _history(servers.database_url)
    done = await bidder(
        cli_env(servers),
        "reports", "earnings", "--publisher", PUB, "--from", "2026-01-01", "--to", "2026-03-31",
        "--tz", "Europe/Berlin", "--format", "csv",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    assert "3/3 chunks" in done.stderr.decode()  # 90 days in chunks of 31
    rows = list(csv.DictReader(io.StringIO(done.stdout.decode())))
    # 23:30 UTC is half past midnight in Berlin: each play is on the next local day; the
    # 2026-03-31 one falls on April 1st, outside the range.
    assert [(row["day"], row["plays"]) for row in rows] == [
        ("2026-01-11", "1"),
        ("2026-02-01", "1"),
        ("2026-02-16", "1"),
        ("2026-03-21", "1"),
    ]
    conn = await asyncpg.connect(servers.database_url)
    try:
        whole = await earnings_report(
            conn, PUB, ["day"], ReportRange(date(2026, 1, 1), date(2026, 3, 31), "Europe/Berlin")
        )
    finally:
        await conn.close()
    assert [row["gross_price_cents"] for row in rows] == [
        str(row["gross_price_cents"]) for row in whole.rows
    ]


async def test_delivery_as_json_and_a_bad_date(servers: ServerUrls, clean: None) -> None:
    await _history(servers.database_url)
    done = await bidder(
        cli_env(servers),
        "reports", "delivery", "--campaign", CAMPAIGN, "--group-by", "screen",
        "--from", "2026-01-01", "--to", "2026-03-31", "--format", "json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    body = json.loads(done.stdout)
    assert body["totals"]["plays_billed"] == 5
    assert body["totals"]["spend_cents"] == 12.5
    assert [c["campaign_id"] for c in body["campaigns"]] == [CAMPAIGN]
    assert "chunks" not in done.stderr.decode()  # by screen: one query, no bar

    refused = await bidder(
        cli_env(servers), "reports", "earnings", "--publisher", PUB, "--from", "May 1"
    )
    assert refused.returncode == 1
    assert "from must be a date as YYYY-MM-DD" in refused.stderr.decode()
