"""Reports are exact (docs/reports.md, "Exact to the micro-cent"): random traffic written
through the record writer's own row path into the real Postgres, then every earnings and
delivery report's totals equal the sum of its rows, and equal what the generated traffic
says, bucketed by local day with Python's own zone database; a DST day counts each record once.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import asyncpg
import hypothesis
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from bidder.reports import delivery_report, earnings_report
from bidder.reports.params import ReportRange
from store.history import Play, write_history
from store.reports import DeliveryFilter
from tests.support.factories import (
    ADV,
    CAMPAIGN,
    CREATIVE_VIDEO,
    PUB,
    PUB_OTHER,
    SCREEN_MOVING,
    SCREEN_OTHER_PUB,
    SCREEN_STATIC,
    basic_document,
    seed,
)
from tests.support.servers import RECORD_TABLES

_SCREENS = {SCREEN_MOVING: PUB, SCREEN_STATIC: PUB, SCREEN_OTHER_PUB: PUB_OTHER}
_RATES = {PUB: Decimal("0.15"), PUB_OTHER: Decimal("0.15")}
_AUDIENCE = Decimal(10)  # every basic screen's audience per play
# Around the night Europe/Berlin moves its clocks forward (2026-03-29, 02:00 -> 03:00) and,
# for America/New_York, 2026-03-08.
_WINDOW_START = datetime(2026, 3, 5, tzinfo=UTC)
_WINDOW_HOURS = 24 * 30
_ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata")


async def _fresh(database_url: str) -> asyncpg.Connection:
    conn = await asyncpg.connect(database_url)
    await conn.execute(f"TRUNCATE {RECORD_TABLES} CASCADE")
    return conn


def _play(
    n: int, screen: str, outcome: str, at: datetime, price: int, audience: Decimal | None
) -> Play:
    publisher = _SCREENS[screen]
    return Play(
        offer_id=str(uuid.UUID(int=n + 1)),
        channel="openrtb" if outcome in ("billed", "lost") else "core",
        outcome=outcome,  # type: ignore[arg-type]
        publisher_id=publisher,
        screen_id=screen,
        campaign_id=CAMPAIGN,
        creative_id=CREATIVE_VIDEO,
        advertiser_id=ADV,
        price_micros=price,
        at=at,
        commission_rate=_RATES[publisher],
        audience=audience if outcome in ("billed", "lost") else None,
        played_at=at + timedelta(seconds=30) if outcome == "accepted" else None,
        impression=outcome == "billed",
    )


# Seconds from the window's start: anywhere, or within the hours around a local midnight of
# one of the zones (UTC 00:00, Europe/Berlin 22:00 or 23:00, America/New_York 04:00 or 05:00,
# Asia/Kolkata 18:30), whole seconds, so some land exactly on a midnight.
_moments = st.one_of(
    st.integers(0, _WINDOW_HOURS * 3600 - 1),
    st.builds(
        lambda day, hour, second: (day * 24 + hour) * 3600 + second,
        st.integers(0, _WINDOW_HOURS // 24 - 1),
        st.sampled_from([0, 4, 5, 18, 22, 23]),
        st.integers(0, 3599),
    ),
)
_plays = st.lists(
    st.tuples(
        st.sampled_from(sorted(_SCREENS)),
        st.sampled_from(["accepted", "accepted", "billed", "rejected", "expired", "lost"]),
        _moments,
        st.integers(1, 10**10),  # up to 10,000 cents: every micro-cent digit in play
        st.decimals(Decimal("0.0001"), Decimal(5000), places=4),
    ),
    min_size=0,
    max_size=40,
)


def _local_day(moment: datetime, zone: str) -> date:
    return moment.astimezone(ZoneInfo(zone)).date()


def _cents(micros: int) -> Decimal:
    return Decimal(micros).scaleb(-6)


def _check_sums(report: Any, fields: tuple[str, ...]) -> None:
    for name in fields:
        assert report.totals[name] == sum((row[name] for row in report.rows), Decimal(0)), name


@hypothesis.settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    traffic=_plays,
    zone=st.sampled_from(_ZONES),
    first=st.integers(0, 29),
    days=st.integers(1, 10),
    group_by=st.lists(st.sampled_from(["day", "screen", "campaign", "advertiser"]), unique=True),
)
async def test_earnings_and_delivery_add_up_to_the_traffic(
    migrated: str,
    traffic: list[tuple[str, str, int, int, Decimal]],
    zone: str,
    first: int,
    days: int,
    group_by: list[str],
) -> None:
    await seed(migrated, basic_document())
    plays = [
        _play(n, screen, outcome, _WINDOW_START + timedelta(seconds=s), price, audience)
        for n, (screen, outcome, s, price, audience) in enumerate(traffic)
    ]
    conn = await _fresh(migrated)
    try:
        await write_history(conn, plays)
        rng = ReportRange(
            date(2026, 3, 5) + timedelta(days=first),
            date(2026, 3, 5) + timedelta(days=first + days - 1),
            zone,
        )
        report = await earnings_report(conn, PUB, group_by, rng)
        billed_sql = await conn.fetchrow(
            """SELECT count(*) AS n, COALESCE(sum(gross_price_cents), 0) AS gross,
                      COALESCE(sum(commission_cents), 0) AS commission,
                      COALESCE(sum(net_price_cents), 0) AS net
                 FROM billing_records
                WHERE publisher_id = $1 AND billed_at >= $2 AND billed_at < $3""",
            PUB,
            rng.period.start,
            rng.period.end,
        )
        delivery = await delivery_report(
            conn,
            ["day", "screen"],
            rng,
            DeliveryFilter(campaign_ids=(CAMPAIGN,)),
            datetime.now(UTC),
        )
    finally:
        await conn.close()

    assert billed_sql is not None
    in_range = [p for p in plays if rng.first <= _local_day(p.at, zone) <= rng.last]
    paid = [p for p in in_range if p.outcome in ("accepted", "billed")]
    own = [p for p in paid if p.publisher_id == PUB]
    gross = sum((_cents(p.price_micros) for p in own), Decimal(0))

    _check_sums(report, ("audience", "gross_price_cents", "commission_cents", "net_price_cents"))
    assert report.totals["plays"] == sum(row["plays"] for row in report.rows) == len(own)
    assert report.totals["gross_price_cents"] == gross == billed_sql["gross"]
    assert report.totals["commission_cents"] == billed_sql["commission"]
    assert report.totals["net_price_cents"] == billed_sql["net"]
    assert report.totals["net_price_cents"] + report.totals["commission_cents"] == gross
    assert report.totals["audience"] == sum((p.audience or _AUDIENCE for p in own), Decimal(0))
    if "day" in group_by:
        per_day: Counter[str] = Counter()
        for row in report.rows:
            per_day[row["day"]] += row["plays"]
        assert per_day == Counter(_local_day(p.at, zone).isoformat() for p in own)
    delivery_days: Counter[str] = Counter()
    for row in delivery.rows:
        delivery_days[row["day"]] += row["plays_billed"]
    assert +delivery_days == Counter(_local_day(p.at, zone).isoformat() for p in paid)

    # Delivery: both publishers' traffic of the campaign, spend = every billed gross.
    assert delivery.totals["spend_cents"] == sum((_cents(p.price_micros) for p in paid), Decimal(0))
    _check_sums(delivery, ("audience", "spend_cents"))
    # Offers count by creation time: a second before their outcome (store.history).
    made = [
        p for p in plays if rng.first <= _local_day(p.at - timedelta(seconds=1), zone) <= rng.last
    ]
    outcomes = Counter(p.outcome for p in made)
    assert delivery.totals["offers"] == len(made) == sum(r["offers"] for r in delivery.rows)
    assert delivery.totals["accepted"] == outcomes["accepted"] + outcomes["billed"]
    assert delivery.totals["rejected"] == outcomes["rejected"]
    assert delivery.totals["expired"] == outcomes["expired"]
    assert delivery.totals["lost"] == outcomes["lost"]
    assert delivery.totals["impressions"] == sum(p.outcome == "billed" for p in in_range)
