"""Bounds against hostile input and runaway clients: no play costs a campaign more than its
cap, no audience exceeds its publisher's bound, every size is bounded, a publisher's screens
are counted, and a burst of screen changes rebuilds each worker's snapshot a bounded number
of times.

Expected figures come from the contract and the documented limits (docs/api-core.md and
docs/api-openrtb.md, "Limits"): one play costs cpm x audience / 1000 cents; a publisher's
audience bound is 50,000 unless the operator sets another, its quota 10,000 screens; names
hold 200 characters, external ids 128, OpenRTB ids 256.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import asyncpg
import httpx
import msgspec
import pytest

from matching.inventory import InventoryDocument
from store.postgres import migration_files
from tests.support import factories as f
from tests.support.core import API, Live, live_app
from tests.support.servers import ADMIN_TOKEN, ServerUrls, make_settings

SCREENS = f"{API}/screens"
BID = "/functions/v1/openrtb-2-6/bid"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
# A campaign of 250 cents CPM may cost at most 1 EUR a play.
CAP_CENTS = Decimal(100)


@pytest.fixture
async def live(servers: ServerUrls, clean: None) -> AsyncIterator[Live]:
    async with live_app(make_settings(servers, RECORD_WRITER="0")) as running:
        yield running


async def seeded(live: Live, doc: InventoryDocument | None = None) -> dict[str, str]:
    """Seed `doc` (the basic inventory by default); headers with a key of PUB."""
    await f.seed(live.database_url, doc or f.basic_document())
    key = await f.make_key(live.database_url)
    await live.rt.inventory.reload()
    return {"Authorization": f"Bearer {key}"}


def bid_request(multiplier: Any = 119.47, **ids: Any) -> dict[str, Any]:
    """A valid BidRequest for the basic document's moving screen (`ext-moving-1`)."""
    deal = {"id": ids.get("deal_id", "deal-7"), "bidfloor": 0, "at": 3}
    imp = {
        "id": ids.get("imp_id", "imp-1"),
        "tagid": ids.get("tagid", "ext-moving-1"),
        "video": {"w": 1920, "h": 1080},
        "pmp": {"deals": [deal]},
        "qty": {"multiplier": multiplier},
    }
    return {"id": ids.get("request_id", "auction-42"), "at": 3, "imp": [imp]}


_numbers = msgspec.json.Encoder(decimal_format="number")


async def post_bid(live: Live, headers: dict[str, str], body: dict[str, Any]) -> httpx.Response:
    """The request as JSON, its Decimals as bare numbers."""
    headers = {**headers, "Content-Type": "application/json"}
    return await live.client.post(BID, content=_numbers.encode(body), headers=headers)


def no_bids(live: Live, reason: str) -> float:
    value = live.rt.metrics.registry.get_sample_value("openrtb_no_bids_total", {"reason": reason})
    return value or 0.0


def new_screen(**fields: Any) -> dict[str, Any]:
    return {"name": "Stadium", "type": "moving", "width": 1920, "height": 1080, **fields}


def fields_of(response: httpx.Response) -> set[tuple[str, str]]:
    """(list, field) of every problem of an admin 400; ("", field) of a screens API 400."""
    assert response.status_code == 400, response.text
    body = response.json()
    assert isinstance(body["error"], str)
    return {(p.get("list", ""), p["field"]) for p in body["problems"]}


# -- no budget drain through audience ---------------------------------------------------------


async def test_a_play_never_costs_a_campaign_more_than_its_cap(live: Live) -> None:
    """The operator lets the publisher register audiences up to 1,000,000; a screen that large
    prices one play of the 250-cent-CPM campaign at 250,000 cents (2,500 EUR, a quarter of its
    10,000 EUR budget). With a cap of 100 cents a play, neither interface offers it; without
    the cap the same screen gets that offer."""
    budget = Decimal(1_000_000)  # cents
    publishers = [
        f.publisher(max_audience_per_play=Decimal(1_000_000)),
        f.publisher(id=f.PUB_OTHER, name="Mall Media"),
    ]
    capped = f.campaign(budget_cents=budget, max_price_per_play_cents=CAP_CENTS)
    headers = await seeded(live, f.basic_document(publishers=publishers, campaigns=[capped]))
    registered = await live.client.post(
        SCREENS,
        json=new_screen(audience_per_play=1_000_000, external_id="stadium-1"),
        headers=headers,
    )
    assert registered.status_code == 201, registered.text
    stadium = registered.json()["id"]
    await live.rt.inventory.reload()

    core = await live.client.get(f"{API}/offers/request/{stadium}", headers=headers)
    assert core.status_code == 404, core.text
    assert core.json()["error"] == "No matches available"
    # 100,000 viewers sent by an SSP: 25,000 cents a play, above the cap too.
    openrtb = await post_bid(live, headers, bid_request(multiplier=100_000))
    assert openrtb.status_code == 204, openrtb.text

    # Where a play costs no more than the cap, the campaign serves as before: 250 x 10 / 1000
    # = 2.5 cents (Core), 250 x 400 / 1000 = 100 cents, exactly the cap (OpenRTB).
    moving = await live.client.get(f"{API}/offers/request/{f.SCREEN_MOVING}", headers=headers)
    assert moving.status_code == 200, moving.text
    assert Decimal(str(moving.json()["bid_price_cents"])) == Decimal("2.5")
    at_cap = await post_bid(live, headers, bid_request(multiplier=400))
    assert at_cap.status_code == 200, at_cap.text
    price_eur = json.loads(at_cap.content, parse_float=Decimal)["seatbid"][0]["bid"][0]["price"]
    assert price_eur * 100 == CAP_CENTS

    # The same campaign without its cap: the stadium's one play would take 250,000 cents.
    await f.seed(live.database_url, InventoryDocument(campaigns=[f.campaign(budget_cents=budget)]))
    await live.rt.inventory.reload()
    uncapped = await live.client.get(f"{API}/offers/request/{stadium}", headers=headers)
    assert uncapped.status_code == 200, uncapped.text
    assert Decimal(str(uncapped.json()["bid_price_cents"])) == Decimal(250_000)


async def test_an_openrtb_audience_above_the_publishers_bound_is_no_bid_and_counted(
    live: Live,
) -> None:
    headers = await seeded(live)  # no bound set: 50,000 viewers
    before = no_bids(live, "audience_above_bound")
    above = await post_bid(live, headers, bid_request(multiplier=Decimal("50000.0001")))
    assert above.status_code == 204, above.text
    legacy = bid_request()
    del legacy["imp"][0]["qty"]
    legacy["imp"][0]["ext"] = {"totalaud": 50_001}
    assert (await post_bid(live, headers, legacy)).status_code == 204
    assert no_bids(live, "audience_above_bound") == before + 2
    at_bound = await post_bid(live, headers, bid_request(multiplier=50_000))
    assert at_bound.status_code == 200, at_bound.text


async def test_the_screens_api_keeps_audiences_within_the_publishers_bound(live: Live) -> None:
    headers = await seeded(live)
    above = await live.client.post(
        SCREENS, json=new_screen(audience_per_play=50_000.0001), headers=headers
    )
    assert fields_of(above) == {("", "audience_per_play")}
    assert "at most 50000" in above.json()["problems"][0]["message"]
    patched = await live.client.patch(
        f"{SCREENS}/{f.SCREEN_MOVING}", json={"audience_per_play": 250_000}, headers=headers
    )
    assert fields_of(patched) == {("", "audience_per_play")}
    at_bound = await live.client.post(
        SCREENS, json=new_screen(audience_per_play=50_000), headers=headers
    )
    assert at_bound.status_code == 201, at_bound.text


async def test_the_import_keeps_audiences_within_their_publishers_bound(live: Live) -> None:
    await seeded(live)  # PUB's three screens have 10 viewers a play
    doc = json.loads(msgspec.json.encode(f.basic_document()))
    doc["publishers"][0]["max_audience_per_play"] = 9  # below its stored screens' 10
    screens = doc.pop("screens")
    refused = await live.client.put("/admin/v1/inventory", json=doc, headers=ADMIN)
    assert fields_of(refused) == {("publishers", "max_audience_per_play")}
    # A screen of the document is judged by the bound its publisher brings; the stored
    # screens the document leaves as they are keep the new bound from passing.
    doc["screens"] = [{**screens[0], "audience_per_play": 9.5}]
    refused = await live.client.put("/admin/v1/inventory", json=doc, headers=ADMIN)
    assert fields_of(refused) == {
        ("screens", "audience_per_play"),  # 9.5 > 9
        ("publishers", "max_audience_per_play"),  # the static and slow screens keep 10
    }
    doc["screens"] = [{**screen, "audience_per_play": 9} for screen in screens]
    accepted = await live.client.put("/admin/v1/inventory", json=doc, headers=ADMIN)
    assert accepted.status_code == 200, accepted.text


BOUNDS_MIGRATION = "004_audience_and_screen_bounds.sql"


async def test_the_migration_gives_stored_publishers_bounds_their_screens_fit(
    servers: ServerUrls, migrated: str
) -> None:
    """A database holding a screen of 250,000.5 viewers before the bounds existed: its
    publisher's bound becomes 250,000.5, the other publisher's the default 50,000."""
    name = f"bounds_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(migrated)
    await admin.execute(f"CREATE DATABASE {name}")
    try:
        conn = await asyncpg.connect(migrated.rsplit("/", 1)[0] + f"/{name}")
        try:
            files = migration_files()
            position = [n for n, _ in files].index(BOUNDS_MIGRATION)
            for _, sql in files[:position]:
                await conn.execute(sql)
            await conn.execute(
                "INSERT INTO publishers (id, name) VALUES ($1, 'Metro'), ($2, 'Mall')",
                uuid.UUID(f.PUB),
                uuid.UUID(f.PUB_OTHER),
            )
            await conn.execute(
                """INSERT INTO screens (id, publisher_id, name, type, width, height,
                                        audience_per_play)
                   VALUES ($1, $2, 'Stadium', 'moving', 1920, 1080, 250000.5)""",
                uuid.UUID(f.SCREEN_MOVING),
                uuid.UUID(f.PUB),
            )
            await conn.execute(files[position][1])
            rows = await conn.fetch(
                "SELECT id, max_audience_per_play, max_screens FROM publishers ORDER BY id"
            )
        finally:
            await conn.close()
    finally:
        await admin.execute(f"DROP DATABASE {name}")
        await admin.close()
    assert [(str(r["id"]), r["max_audience_per_play"], r["max_screens"]) for r in rows] == [
        (f.PUB, Decimal("250000.5"), 10_000),
        (f.PUB_OTHER, Decimal(50_000), 10_000),
    ]


# -- every size is bounded ------------------------------------------------------------------


async def test_screen_names_and_external_ids_have_a_maximum_length(live: Live) -> None:
    headers = await seeded(live)
    too_long = await live.client.post(
        SCREENS, json=new_screen(name="n" * 201, external_id="e" * 129), headers=headers
    )
    assert fields_of(too_long) == {("", "name"), ("", "external_id")}
    at_limit = await live.client.post(
        SCREENS, json=new_screen(name="n" * 200, external_id="e" * 128), headers=headers
    )
    assert at_limit.status_code == 201, at_limit.text


@pytest.mark.parametrize(
    ("field", "code"),
    [
        ("request_id", "INVALID_REQUEST"),
        ("imp_id", "INVALID_REQUEST"),
        ("tagid", "NO_EXTERNAL_SCREEN_ID"),
        ("deal_id", "NO_PMP_DEALS"),
    ],
)
async def test_openrtb_ids_above_256_characters_are_refused(
    live: Live, field: str, code: str
) -> None:
    headers = await seeded(live)
    for length in (257, 300_000):
        response = await post_bid(live, headers, bid_request(**{field: "x" * length}))
        assert response.status_code == 400, response.text
        assert response.json()["error"] == code
        assert "x" * 257 not in response.text  # never echoed
    # 256 characters fit: a bid, or for a tag id no screen has, no bid.
    response = await post_bid(live, headers, bid_request(**{field: "x" * 256}))
    assert response.status_code == (204 if field == "tagid" else 200), response.text


async def test_a_publisher_holds_at_most_its_screen_quota(live: Live) -> None:
    """PUB holds 3 screens and may hold 5: of six registrations sent at once, two pass, the
    others are 409; a deactivated screen still counts."""
    doc = f.basic_document(
        publishers=[f.publisher(max_screens=5), f.publisher(id=f.PUB_OTHER, name="Mall Media")]
    )
    headers = await seeded(live, doc)
    answers = await asyncio.gather(
        *(
            live.client.post(SCREENS, json=new_screen(name=f"Screen {n}"), headers=headers)
            for n in range(6)
        )
    )
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [201, 201, 409, 409, 409, 409], [a.text for a in answers]
    refused = next(a for a in answers if a.status_code == 409)
    assert set(refused.json()) == {"error"}
    assert "quota" in refused.json()["error"]
    deactivated = await live.client.delete(f"{SCREENS}/{f.SCREEN_SLOW}", headers=headers)
    assert deactivated.status_code == 200
    again = await live.client.post(SCREENS, json=new_screen(), headers=headers)
    assert again.status_code == 409
    listed = await live.client.get(SCREENS, headers=headers)
    assert len(listed.json()["screens"]) == 5


async def test_a_burst_of_screen_changes_rebuilds_the_snapshot_a_bounded_number_of_times(
    servers: ServerUrls, clean: None
) -> None:
    """Each change bumps the inventory version, but a worker looks at it once per
    INVENTORY_POLL_SECONDS (0.5 by default) and builds one snapshot for all the changes it
    finds: at most 2 builds a second, however many changes arrive."""
    poll = 0.5
    settings = make_settings(servers, RECORD_WRITER="0", INVENTORY_POLL_SECONDS=str(poll))
    async with live_app(settings) as live:
        headers = await seeded(live)
        registry = live.rt.metrics.registry
        before = registry.get_sample_value("inventory_snapshot_builds_total") or 0.0
        changes = 60
        started = time.monotonic()
        for n in range(changes):
            response = await live.client.patch(
                f"{SCREENS}/{f.SCREEN_MOVING}", json={"name": f"Renamed {n}"}, headers=headers
            )
            assert response.status_code == 200, response.text
        burst = time.monotonic() - started
        await asyncio.sleep(2 * poll + 0.2)  # the last change reaches the snapshot
        elapsed = time.monotonic() - started
        snapshot = live.rt.inventory.snapshot
        assert snapshot is not None
        assert snapshot.screens[f.SCREEN_MOVING].name == f"Renamed {changes - 1}"
        builds = (registry.get_sample_value("inventory_snapshot_builds_total") or 0.0) - before
    assert 1 <= builds <= elapsed / poll + 1, (builds, burst, elapsed)
    assert builds < changes / 4, (builds, burst)
