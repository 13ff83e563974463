"""The reports over HTTP (docs/reports.md): publisher earnings with the publisher's key (its own
data only), campaign delivery with the admin token, JSON and CSV, bad parameters refused with
400 `{error}`, and days of a daylight-saving change counting each record exactly once."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from tests.support.factories import (
    CAMPAIGN,
    SCREEN_MOVING,
    SCREEN_OTHER_PUB,
    SCREEN_STATIC,
)
from tests.support.reports import make_play, write_plays
from tests.support.servers import ADMIN_TOKEN

EARNINGS = "/functions/v1/api/reports/earnings"
DELIVERY = "/admin/v1/reports/delivery"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_earnings_by_day_only_the_publishers_own(
    app_client: AsyncTestClient[Litestar], migrated: str, key: str
) -> None:
    day = datetime(2026, 3, 10, 12, tzinfo=UTC)
    await write_plays(
        migrated,
        [
            make_play(0, day),
            make_play(1, day + timedelta(days=1), screen=SCREEN_STATIC, price_micros=1_000_001),
            make_play(2, day, screen=SCREEN_OTHER_PUB, price_micros=9_000_000),  # another publisher
            make_play(3, day, outcome="rejected", rejection_reason="wrong creative"),
            make_play(4, day - timedelta(days=5)),  # before the range
        ],
    )
    answer = await app_client.get(
        EARNINGS, params={"from": "2026-03-10", "to": "2026-03-11"}, headers=_bearer(key)
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    # 2.5 cents at 15 %: 0.375 commission, 2.125 net (the accept result's split).
    assert body["rows"] == [
        {
            "day": "2026-03-10",
            "plays": 1,
            "audience": 10,
            "gross_price_cents": 2.5,
            "commission_cents": 0.375,
            "net_price_cents": 2.125,
        },
        {
            "day": "2026-03-11",
            "plays": 1,
            "audience": 10,
            "gross_price_cents": 1.000001,
            "commission_cents": 0.15,
            "net_price_cents": 0.850001,
        },
    ]
    assert body["totals"] == {
        "plays": 2,
        "audience": 20,
        "gross_price_cents": 3.500001,
        "commission_cents": 0.525,
        "net_price_cents": 2.975001,
    }
    assert (body["from"], body["to"], body["tz"], body["group_by"]) == (
        "2026-03-10",
        "2026-03-11",
        "UTC",
        ["day"],
    )


async def test_earnings_by_screen_and_campaign_as_csv(
    app_client: AsyncTestClient[Litestar], migrated: str, key: str
) -> None:
    day = datetime(2026, 3, 10, 12, tzinfo=UTC)
    await write_plays(
        migrated, [make_play(0, day), make_play(1, day, screen=SCREEN_STATIC), make_play(2, day)]
    )
    answer = await app_client.get(
        EARNINGS,
        params={"from": "2026-03-10", "to": "2026-03-10", "group_by": "screen,campaign"},
        headers={**_bearer(key), "Accept": "text/csv"},
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(answer.text)))
    by_screen = {row["screen_id"]: row for row in rows}
    assert set(by_screen) == {SCREEN_MOVING, SCREEN_STATIC}
    assert by_screen[SCREEN_MOVING]["plays"] == "2"
    assert by_screen[SCREEN_MOVING]["gross_price_cents"] == "5"
    assert by_screen[SCREEN_MOVING]["campaign_id"] == CAMPAIGN
    assert by_screen[SCREEN_STATIC]["screen_name"] == "Kiosk"


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"group_by": "weekday"}, "group_by"),
        ({"group_by": "day,hour"}, "group_by"),  # hour is a delivery grouping
        ({"from": "2026-3-1"}, "from"),
        ({"to": "yesterday"}, "to"),
        ({"from": "2026-03-10", "to": "2026-03-09"}, "must not be after"),
        ({"from": "2024-01-01", "to": "2026-01-01"}, "366 days"),
        ({"tz": "Mars/Olympus"}, "tz"),
        ({"tz": "../../etc/passwd"}, "tz"),
        ({"format": "xml"}, "format"),
    ],
)
async def test_bad_parameters_are_400_in_the_core_shape(
    app_client: AsyncTestClient[Litestar], key: str, params: dict[str, str], says: str
) -> None:
    answer = await app_client.get(EARNINGS, params=params, headers=_bearer(key))
    assert answer.status_code == 400, answer.text
    assert says in answer.json()["error"]


async def test_earnings_need_a_publisher_key(
    app_client: AsyncTestClient[Litestar], key: str
) -> None:
    assert (await app_client.get(EARNINGS)).status_code == 401
    assert (await app_client.get(EARNINGS, headers=ADMIN)).status_code == 401
    assert (await app_client.get(DELIVERY, headers=_bearer(key))).status_code == 401


async def test_a_berlin_day_of_each_dst_change_counts_every_record_once(
    app_client: AsyncTestClient[Litestar], migrated: str, key: str
) -> None:
    # 2026-03-29: 23 hours in Berlin (02:00 CET -> 03:00 CEST); 2026-10-25: 25 hours.
    moments = [
        "2026-03-28T22:59:59Z",  # 23:59:59 on the 28th (CET)
        "2026-03-28T23:00:00Z",  # midnight: the 29th's first instant
        "2026-03-29T01:00:00Z",  # 03:00 CEST, right after the change
        "2026-03-29T21:59:59Z",  # 23:59:59 CEST, the 29th's last second
        "2026-03-29T22:00:00Z",  # midnight: the 30th
        "2026-10-24T22:00:00Z",  # midnight CEST: the 25th
        "2026-10-25T00:30:00Z",  # 02:30 CEST
        "2026-10-25T01:30:00Z",  # 02:30 CET, the second 02:30 of the night
        "2026-10-25T22:59:59Z",  # 23:59:59 CET, the 25th's last second
        "2026-10-25T23:00:00Z",  # midnight: the 26th
    ]
    plays = [make_play(n, datetime.fromisoformat(m)) for n, m in enumerate(moments)]
    await write_plays(migrated, plays)

    async def days(first: str, last: str) -> dict[str, int]:
        answer = await app_client.get(
            EARNINGS,
            params={"from": first, "to": last, "tz": "Europe/Berlin"},
            headers=_bearer(key),
        )
        assert answer.status_code == 200, answer.text
        return {row["day"]: row["plays"] for row in answer.json()["rows"]}

    assert await days("2026-03-28", "2026-03-30") == {
        "2026-03-28": 1,
        "2026-03-29": 3,
        "2026-03-30": 1,
    }
    assert await days("2026-03-29", "2026-03-29") == {"2026-03-29": 3}
    assert await days("2026-10-25", "2026-10-26") == {"2026-10-25": 4, "2026-10-26": 1}

    answer = await app_client.get(
        DELIVERY,
        params={
            "from": "2026-10-25",
            "to": "2026-10-25",
            "tz": "Europe/Berlin",
            "group_by": "hour",
        },
        headers=ADMIN,
    )
    assert answer.status_code == 200, answer.text
    hours = {row["hour"]: row["plays_billed"] for row in answer.json()["rows"]}
    assert hours == {
        "2026-10-25T00:00:00+02:00": 1,
        "2026-10-25T02:00:00+02:00": 1,
        "2026-10-25T02:00:00+01:00": 1,
        "2026-10-25T23:00:00+01:00": 1,
    }


async def test_delivery_by_campaign_with_pacing(
    app_client: AsyncTestClient[Litestar], migrated: str, key: str
) -> None:
    day = datetime(2026, 3, 10, 12, tzinfo=UTC)
    await write_plays(
        migrated,
        [
            make_play(0, day, played_at=day + timedelta(seconds=20)),
            make_play(1, day, outcome="rejected", rejection_reason="wrong creative"),
            make_play(2, day, outcome="rejected", rejection_reason="wrong creative"),
            make_play(3, day, outcome="expired"),
            make_play(
                4,
                day,
                channel="openrtb",
                outcome="billed",
                audience=Decimal("30"),
                impression=True,
                price_micros=7_500_000,
            ),
            make_play(5, day, channel="openrtb", outcome="lost", audience=Decimal("30")),
        ],
    )
    answer = await app_client.get(
        DELIVERY,
        params={
            "campaign_id": CAMPAIGN,
            "group_by": "campaign",
            "from": "2026-03-10",
            "to": "2026-03-10",
        },
        headers=ADMIN,
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    (row,) = body["rows"]
    assert row["campaign_id"] == CAMPAIGN
    assert (row["offers"], row["accepted"], row["rejected"], row["expired"], row["lost"]) == (
        6,
        2,
        2,
        1,
        1,
    )
    assert row["rejected_by_reason"] == {"wrong creative": 2}
    assert (row["impressions"], row["plays_billed"], row["plays_confirmed"]) == (1, 2, 1)
    assert row["audience"] == 40  # 10 (the screen's) + 30 (the OpenRTB bid's)
    assert row["spend_cents"] == 10  # 2.5 + 7.5
    assert row["ecpm_cents"] == 250  # 10 cents for 40 viewers: 250 per thousand
    assert body["totals"]["spend_cents"] == 10
    (pacing,) = body["campaigns"]
    # Budget 100,000 cents over 100 days from 2026-01-01: by now the flight is over (the test
    # runs after 2026-04-11), so all of it is expected; 10 cents spent.
    assert pacing["budget_cents"] == 100000
    assert pacing["spent_cents"] == 10
    assert pacing["budget_remaining_cents"] == 99990
    assert pacing["expected_spend_cents"] == 100000
    assert pacing["pacing"] == 0.0001


async def test_delivery_refuses_bad_ids_and_needs_the_admin_token(
    app_client: AsyncTestClient[Litestar], key: str
) -> None:
    answer = await app_client.get(DELIVERY, params={"campaign_id": "nope"}, headers=ADMIN)
    assert answer.status_code == 400
    assert "campaign_id" in answer.json()["error"]
    assert (await app_client.get(DELIVERY)).status_code == 401
