"""The report rollups (migration 010, docs/reports.md "How reports are computed") answer exactly
what the records answer: random traffic written the way the record writer writes it (batches
in concurrent transactions, replays, open offers whose outcome arrives later, repeated
impression events), then every report read from the rollups equals the same report read from
the records, over periods around daylight-saving changes and in zones half and three quarters
of an hour off UTC; the earnings totals equal the billing records' sums; and the rollups the
triggers kept equal the ones computed afresh from the records.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import asyncpg
import hypothesis
import msgspec
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from bidder.reports import delivery_report, earnings_report
from bidder.reports.params import ReportRange
from store.history import Play, play_entries
from store.record_rows import Entry, Rows, add_entry, write_rows
from store.reports import (
    ROLLUP_TABLES,
    DeliveryFilter,
    Period,
    rebuild_rollups,
    rollups_fit,
)
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
    campaign,
    creative,
    seed,
    uid,
)
from tests.support.servers import RECORD_TABLES

CAMPAIGN_2 = uid(2, 4)
CREATIVE_2 = uid(3, 5)
_SCREENS = {SCREEN_MOVING: PUB, SCREEN_STATIC: PUB, SCREEN_OTHER_PUB: PUB_OTHER}
# 2026-10-20 to 2026-11-05: Europe/Berlin goes back from +02:00 to +01:00 on 2026-10-25,
# America/New_York from -04:00 to -05:00 on 2026-11-01.
_WINDOW_START = datetime(2026, 10, 20, tzinfo=UTC)
_WINDOW_DAYS = 16
_ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Asia/Kathmandu")
_REASONS = (None, "", "wrong creative", "screen off")


def _document() -> Any:
    return basic_document(
        campaigns=[campaign(), campaign(id=CAMPAIGN_2, name="Winter")],
        creatives=[creative(), creative(id=CREATIVE_2, campaign_id=CAMPAIGN_2)],
    )


def _moments(edges: list[int]) -> st.SearchStrategy[int]:
    """Seconds into the window: anywhere, or within 20 minutes of one of `edges` (the local
    midnights of the report's period), whole seconds, so some land exactly on one."""
    return st.one_of(
        st.integers(0, _WINDOW_DAYS * 86400 - 1),
        st.builds(
            lambda edge, delta: min(max(edge + delta, 0), _WINDOW_DAYS * 86400 - 1),
            st.sampled_from(edges),
            st.integers(-1200, 1200),
        ),
    )


def _traffic(edges: list[int]) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    return st.lists(
        st.tuples(
            st.sampled_from(sorted(_SCREENS)),
            st.sampled_from([CAMPAIGN, CAMPAIGN_2]),
            st.sampled_from(["accepted", "accepted", "billed", "rejected", "expired", "lost"]),
            _moments(edges),
            st.integers(1, 10**10),  # up to 10,000 cents: every micro-cent digit in play
            st.decimals(Decimal("0.0001"), Decimal(5000), places=4),
            st.sampled_from(_REASONS),
            st.integers(0, 2),  # impression events of a billed play
            st.booleans(),  # recorded open first, its outcome later
            st.booleans(),  # played (an accepted Core deal)
        ),
        max_size=60,
    )


def _play(n: int, item: tuple[Any, ...]) -> Play:
    screen, campaign_id, outcome, second, price, audience, reason, _, _, played = item
    at = _WINDOW_START + timedelta(seconds=second)
    paid_openrtb = outcome in ("billed", "lost")
    return Play(
        offer_id=str(uuid.UUID(int=n + 1)),
        channel="openrtb" if paid_openrtb else "core",
        outcome=outcome,
        publisher_id=_SCREENS[screen],
        screen_id=screen,
        campaign_id=campaign_id,
        creative_id=CREATIVE_VIDEO if campaign_id == CAMPAIGN else CREATIVE_2,
        advertiser_id=ADV,
        price_micros=price,
        at=at,
        commission_rate=Decimal("0.15"),
        audience=audience if paid_openrtb else None,
        rejection_reason=reason,
        played_at=at + timedelta(seconds=40) if outcome == "accepted" and played else None,
        impression=False,
    )


def _json(value: object) -> str:
    return msgspec.json.encode(value).decode()


def _open_entry(entry: Entry) -> Entry:
    """The `offer_created` record of an offer whose outcome `entry` records: the same offer,
    open (as a queue written by an older version may still hold)."""
    offer = msgspec.json.decode(entry.fields["o"])
    offer["status"] = "open"
    offer.pop("resolved_ms", None)
    fields = {"t": "offer_created", "o": _json(offer), "p": "{}", "x": "{}"}
    return Entry("history", entry.entry_id, fields)


def _impressions(play: Play, count: int, rng: random.Random) -> list[Entry]:
    """`count` impression events of `play`, minutes apart (repeats beyond the first)."""
    offer = msgspec.json.decode(play_entries(play)[0].fields["o"])
    entries = []
    for n in range(count):
        at = play.at + timedelta(minutes=rng.choice([0, 7, 20, 60 * 9]) * (n + 1))
        ms = (at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
        event = {"event_id": play.derived_id(f"impression-{n}"), "event": "impression"}
        fields = {"t": "tracking_event", "o": _json(offer), "p": _json(event), "x": "{}"}
        entries.append(Entry("history", f"{ms}-{n + 3}", fields))
    return entries


async def _write(conns: list[asyncpg.Connection], batches: list[list[Entry]]) -> None:
    """Each batch in a transaction of its own, the batches spread over `conns` at once."""

    async def one(conn: asyncpg.Connection, mine: list[list[Entry]]) -> None:
        for batch in mine:
            rows = Rows()
            for entry in batch:
                add_entry(rows, entry)
            await write_rows(conn, rows)

    await asyncio.gather(*(one(conn, batches[n :: len(conns)]) for n, conn in enumerate(conns)))


async def write_traffic(
    database_url: str, traffic: list[tuple[Any, ...]], rng: random.Random
) -> list[Play]:
    plays = [_play(n, item) for n, item in enumerate(traffic)]
    opened: list[Entry] = []
    groups: list[list[Entry]] = []
    for play, item in zip(plays, traffic, strict=True):
        entries = play_entries(play)
        if item[8]:
            opened.append(_open_entry(entries[0]))
        if play.outcome == "billed":
            entries += _impressions(play, item[7], rng)
        groups.append(entries)  # a playout goes with its deal: one transaction
    rng.shuffle(groups)
    batches: list[list[Entry]] = []
    while groups:
        size = rng.randint(1, 8)
        batches.append([entry for group in groups[:size] for entry in group])
        groups = groups[size:]
    conns = [await asyncpg.connect(database_url) for _ in range(3)]
    try:
        await conns[0].execute(f"TRUNCATE {RECORD_TABLES} CASCADE")
        await _write(conns, [opened[n : n + 5] for n in range(0, len(opened), 5)])
        await _write(conns, batches)
        await _write(conns, batches[::2])  # replayed: changes nothing
    finally:
        for conn in conns:
            await conn.close()
    return plays


async def rollup_contents(conn: asyncpg.Connection) -> dict[str, set[tuple[Any, ...]]]:
    """Every rollup table's rows, those whose sums are all zero left out."""
    contents = {}
    for table in ROLLUP_TABLES:
        rows = await conn.fetch(f"SELECT * FROM {table}")
        contents[table] = {
            tuple(row.values())
            for row in rows
            if any(isinstance(v, int | Decimal) and v != 0 for v in row.values())
            or table == "impression_offers"
        }
    return contents


def _assert_same(rollup: Any, raw: Any) -> None:
    assert rollup.body() == raw.body()
    assert rollup.columns == raw.columns


@hypothesis.settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    zone=st.sampled_from(_ZONES),
    first=st.integers(0, _WINDOW_DAYS - 1),
    days=st.integers(1, 8),
    shuffle=st.randoms(use_true_random=False),
    data=st.data(),
)
async def test_rollups_answer_what_the_records_answer(
    migrated: str, zone: str, first: int, days: int, shuffle: random.Random, data: st.DataObject
) -> None:
    rng = ReportRange(
        date(2026, 10, 20) + timedelta(days=first),
        date(2026, 10, 20) + timedelta(days=first + days - 1),
        zone,
    )
    local = ZoneInfo(zone)
    edges = [
        int(
            (
                datetime.combine(rng.first + timedelta(days=n), time(0), local) - _WINDOW_START
            ).total_seconds()
        )
        for n in range(days + 1)
    ]
    traffic = data.draw(_traffic(edges), label="traffic")
    await seed(migrated, _document())
    await write_traffic(migrated, traffic, shuffle)
    now = datetime(2026, 10, 28, 13, 7, 21, 123456, tzinfo=UTC)  # mid-bucket, mid-window
    conn = await asyncpg.connect(migrated)
    try:
        for group_by in (["day"], []):
            assert rollups_fit(rng.period, group_by)
            for publisher in (PUB, PUB_OTHER):
                rollup = await earnings_report(conn, publisher, group_by, rng)
                _assert_same(
                    rollup, await earnings_report(conn, publisher, group_by, rng, raw=True)
                )
                billed = await conn.fetchrow(
                    """SELECT count(*) AS plays, COALESCE(sum(gross_price_cents), 0) AS gross,
                              COALESCE(sum(commission_cents), 0) AS commission,
                              COALESCE(sum(net_price_cents), 0) AS net
                         FROM billing_records
                        WHERE publisher_id = $1 AND billed_at >= $2 AND billed_at < $3""",
                    publisher,
                    rng.period.start,
                    rng.period.end,
                )
                assert billed is not None
                assert rollup.totals["plays"] == billed["plays"]
                assert rollup.totals["gross_price_cents"] == billed["gross"]
                assert rollup.totals["commission_cents"] == billed["commission"]
                assert rollup.totals["net_price_cents"] == billed["net"]
        for group_by in (["day"], ["hour"], ["campaign", "day"], ["campaign"], []):
            assert rollups_fit(rng.period, group_by)
            for what in (
                DeliveryFilter(campaign_ids=(CAMPAIGN,)),
                DeliveryFilter(campaign_ids=(CAMPAIGN, CAMPAIGN_2)),
                DeliveryFilter(advertiser_id=ADV),
                DeliveryFilter(),
            ):
                rollup = await delivery_report(conn, group_by, rng, what, now)
                raw = await delivery_report(conn, group_by, rng, what, now, raw=True)
                _assert_same(rollup, raw)
        kept = await rollup_contents(conn)
        await rebuild_rollups(conn)
        assert await rollup_contents(conn) == kept
    finally:
        await conn.close()


async def test_the_rollups_hold_every_sum_of_the_records(migrated: str) -> None:
    """A fixed day of traffic: the rollup rows themselves, against the plays."""
    await seed(migrated, _document())
    day = datetime(2026, 10, 25, tzinfo=UTC)
    traffic = [
        (SCREEN_MOVING, CAMPAIGN, "accepted", 60, 2_500_000, Decimal(1), None, 0, False, True),
        (SCREEN_MOVING, CAMPAIGN, "accepted", 899, 1_000_001, Decimal(1), None, 0, True, False),
        (SCREEN_STATIC, CAMPAIGN, "rejected", 900, 3_000_000, Decimal(1), "off", 0, True, False),
        (SCREEN_OTHER_PUB, CAMPAIGN, "billed", 950, 7, Decimal("2.5"), None, 2, False, False),
    ]
    shifted = [(*t[:3], t[3] + 5 * 86400, *t[4:]) for t in traffic]  # 2026-10-25
    await write_traffic(migrated, shifted, random.Random(1))
    conn = await asyncpg.connect(migrated)
    try:
        earnings = await conn.fetch(
            "SELECT publisher_id::text, bucket, plays, audience, gross_price_cents, "
            "commission_cents, net_price_cents FROM earnings_rollup ORDER BY 1, 2"
        )
        offers = await conn.fetch(
            "SELECT bucket, offers, accepted, rejected FROM campaign_offers_rollup "
            "WHERE offers <> 0 ORDER BY bucket"
        )
        reasons = await conn.fetch("SELECT reason, rejected FROM campaign_reasons_rollup")
        impressions = await conn.fetch(
            "SELECT impressions, repeats FROM campaign_impressions_rollup ORDER BY bucket"
        )
        plays = await conn.fetchval("SELECT sum(plays_confirmed) FROM campaign_playouts_rollup")
    finally:
        await conn.close()
    quarter = timedelta(minutes=15)
    # The two Core plays of PUB at 00:01:00 and 00:14:59 share the first bucket; gross
    # 2.5 + 1.000001 cents, commission 15 % of each rounded half up, audience the screen's 10.
    assert [tuple(r.values()) for r in earnings] == [
        (PUB, day, 2, Decimal(20), Decimal("3.500001"), Decimal("0.525000"), Decimal("2.975001")),
        (
            PUB_OTHER,
            day + quarter,
            1,
            Decimal("2.5"),
            Decimal("0.000007"),
            Decimal("0.000001"),
            Decimal("0.000006"),
        ),
    ]
    # Offers count by creation, a second before their outcome: 00:00:59, 00:14:58, 00:14:59
    # and 00:15:49 (the rejection recorded open first, then rejected: counted once).
    assert [tuple(r.values()) for r in offers] == [(day, 3, 2, 1), (day + quarter, 1, 1, 0)]
    assert [tuple(r.values()) for r in reasons] == [("off", 1)]
    assert sum(r["impressions"] for r in impressions) == 1
    assert sum(r["repeats"] for r in impressions) == 1
    assert plays == 1


def test_a_period_fits_the_rollups_when_the_zone_keeps_to_quarter_hours() -> None:
    def period(tz: str, first: date, last: date) -> Period:
        return ReportRange(first, last, tz).period

    # Berlin across both changes of 2026, Kolkata (+05:30), Kathmandu (+05:45), Chatham
    # (+12:45/+13:45), Lord Howe (a half-hour change).
    for tz in (
        "Europe/Berlin",
        "Asia/Kolkata",
        "Asia/Kathmandu",
        "Pacific/Chatham",
        "Australia/Lord_Howe",
    ):
        assert rollups_fit(period(tz, date(2026, 1, 1), date(2026, 12, 31)), ["day"]), tz
        assert rollups_fit(period(tz, date(2026, 1, 1), date(2026, 12, 31)), ["hour"]), tz
    # St. John's changed its clocks at 00:01 local time until 2011: a local day of 2010 then
    # ends one minute into a bucket, so its days and hours are read from the records.
    st_johns = period("America/St_Johns", date(2010, 3, 1), date(2010, 3, 31))
    assert not rollups_fit(st_johns, ["day"])
    assert rollups_fit(st_johns, [])  # whole-period totals: the bounds are still aligned
    assert rollups_fit(period("America/St_Johns", date(2026, 3, 1), date(2026, 3, 31)), ["day"])
    # Bounds off a bucket boundary (a period of instants no local midnight makes).
    odd = Period(datetime(2026, 1, 1, 0, 7, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC), "UTC")
    assert not rollups_fit(odd, [])


async def test_a_screens_audience_change_moves_no_past_play(migrated: str) -> None:
    """The audience of a Core play is its screen's when the offer is recorded: a later
    change of the screen moves neither path's answer, so the rollups stay exact."""
    await seed(migrated, _document())
    traffic = [
        (SCREEN_MOVING, CAMPAIGN, "accepted", 3600, 1_000_000, Decimal(1), None, 0, False, False)
    ]
    await write_traffic(migrated, traffic, random.Random(2))
    rng = ReportRange(date(2026, 10, 20), date(2026, 10, 20), "UTC")
    conn = await asyncpg.connect(migrated)
    try:
        await conn.execute("UPDATE screens SET audience_per_play = 99 WHERE id = $1", SCREEN_MOVING)
        rollup = await earnings_report(conn, PUB, ["day"], rng)
        raw = await earnings_report(conn, PUB, ["day"], rng, raw=True)
    finally:
        await conn.close()
    _assert_same(rollup, raw)
    assert rollup.totals["audience"] == 10
