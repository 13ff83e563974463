"""Operators' lists (`GET /admin/v1/{offers, ..., campaigns}`): keyset pages that neither
repeat nor skip, filters, API keys without their secret; and the per-item changes, validated
like an import and bumping the inventory version."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from store.history import write_history
from tests.support.factories import (
    CAMPAIGN,
    CREATIVE_IMAGE,
    PUB,
    PUB_OTHER,
    SCREEN_OTHER_PUB,
    SCREEN_STATIC,
)
from tests.support.reports import make_play
from tests.support.servers import ADMIN_TOKEN

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
DAY = datetime(2026, 3, 10, 12, tzinfo=UTC)


async def _version(database_url: str) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        version: int = await conn.fetchval("SELECT version FROM inventory_version")
        return version
    finally:
        await conn.close()


async def test_offers_page_by_page_and_filtered(
    app_client: AsyncTestClient[Litestar], migrated: str, key: str
) -> None:
    plays = [make_play(n, DAY + timedelta(minutes=n)) for n in range(4)]
    plays.append(make_play(4, DAY, outcome="rejected", rejection_reason="no"))
    plays.append(make_play(5, DAY, screen=SCREEN_OTHER_PUB))
    conn = await asyncpg.connect(migrated)
    try:
        await write_history(conn, plays)
    finally:
        await conn.close()

    seen: list[str] = []
    cursor = None
    for _ in range(10):
        params = {"limit": "2"} | ({"cursor": cursor} if cursor else {})
        answer = await app_client.get("/admin/v1/offers", params=params, headers=ADMIN)
        assert answer.status_code == 200, answer.text
        page = answer.json()
        seen += [item["offer_id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(p.offer_id for p in plays)  # each exactly once
    assert len(seen) == len(set(seen))

    rejected = await app_client.get(
        "/admin/v1/offers", params={"status": "rejected"}, headers=ADMIN
    )
    assert [i["rejection_reason"] for i in rejected.json()["items"]] == ["no"]
    other = await app_client.get(
        "/admin/v1/deals", params={"publisher_id": PUB_OTHER}, headers=ADMIN
    )
    assert [i["screen_id"] for i in other.json()["items"]] == [SCREEN_OTHER_PUB]
    later = await app_client.get(
        "/admin/v1/billing-records",
        params={"from": (DAY + timedelta(minutes=2)).isoformat(), "to": "2026-03-11"},
        headers=ADMIN,
    )
    assert len(later.json()["items"]) == 2  # minutes 2 and 3
    playouts = await app_client.get("/admin/v1/playouts", headers=ADMIN)
    assert playouts.status_code == 200
    assert playouts.json()["items"] == []

    for params in ({"cursor": "nope"}, {"limit": "0"}, {"from": "yesterday"}):
        bad = await app_client.get("/admin/v1/offers", params=params, headers=ADMIN)
        assert bad.status_code == 400, params
    bad = await app_client.get(
        "/admin/v1/api-keys", params={"campaign_id": CAMPAIGN}, headers=ADMIN
    )
    assert bad.status_code == 400
    assert (await app_client.get("/admin/v1/offers")).status_code == 401


def _cursor_of(moment: str | None, last_id: object) -> str:
    """A cursor as the lists encode theirs (base64 of `[time, id]`), holding what a client
    might forge."""
    raw = json.dumps([moment, last_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


_LISTS = ["offers", "deals", "billing-records", "playouts", "api-keys", "screens", "campaigns"]


@pytest.mark.parametrize("name", _LISTS)
async def test_every_bad_list_parameter_is_400_never_500(
    app_client: AsyncTestClient[Litestar], name: str
) -> None:
    # docs/reports.md: a bad `limit` or `cursor` is 400; README: bad values get 400, never 500.
    bad: list[dict[str, str]] = [
        {"limit": "\u00b2"},  # a superscript two: a digit to str.isdigit(), not to int()
        {"limit": "\u0663"},  # an Arabic-Indic three
        {"cursor": _cursor_of(None, 5)},
        {"cursor": _cursor_of(None, ["a"])},
        {"cursor": _cursor_of("0001-01-01T00:00:00+14:00", CAMPAIGN)},
        {"from": "0001-01-01T00:00:00+14:00"},
        {"to": "9999-12-31T23:59:59-12:00"},
    ]
    if name not in {"deals", "playouts"}:
        bad += [{"status": "\x00"}, {"status": "a\x00b"}]
    for params in bad:
        answer = await app_client.get(f"/admin/v1/{name}", params=params, headers=ADMIN)
        assert answer.status_code == 400, (params, answer.text)
        assert set(answer.json()) == {"error"}


async def test_api_keys_are_listed_without_their_secret(
    app_client: AsyncTestClient[Litestar], key: str
) -> None:
    answer = await app_client.get("/admin/v1/api-keys", params={"publisher_id": PUB}, headers=ADMIN)
    (item,) = answer.json()["items"]
    assert item["status"] == "active"
    assert key[:7] == item["key_prefix"]
    assert "key_hash" not in item
    assert key not in answer.text
    assert key[7:20] not in answer.text


async def test_screens_and_campaigns_lists(app_client: AsyncTestClient[Litestar], key: str) -> None:
    screens = await app_client.get(
        "/admin/v1/screens", params={"publisher_id": PUB, "limit": "2"}, headers=ADMIN
    )
    page = screens.json()
    assert len(page["items"]) == 2
    assert page["next_cursor"] is not None
    rest = await app_client.get(
        "/admin/v1/screens",
        params={"publisher_id": PUB, "cursor": page["next_cursor"]},
        headers=ADMIN,
    )
    assert len(rest.json()["items"]) == 1  # PUB has three screens
    campaigns = await app_client.get(
        "/admin/v1/campaigns", params={"status": "active"}, headers=ADMIN
    )
    assert [c["id"] for c in campaigns.json()["items"]] == [CAMPAIGN]


async def test_per_item_changes_are_validated_and_bump_the_version(
    app_client: AsyncTestClient[Litestar], migrated: str, key: str
) -> None:
    before = await _version(migrated)
    paused = await app_client.post(f"/admin/v1/campaigns/{CAMPAIGN}/pause", headers=ADMIN)
    assert paused.status_code == 200, paused.text
    assert paused.json()["status"] == "paused"
    assert await _version(migrated) > before

    resumed = await app_client.post(f"/admin/v1/campaigns/{CAMPAIGN}/resume", headers=ADMIN)
    assert resumed.json()["status"] == "active"
    dates = await app_client.patch(
        f"/admin/v1/campaigns/{CAMPAIGN}",
        json={"start_at": "2026-06-01T00:00:00Z", "end_at": "2026-05-01T00:00:00Z"},
        headers=ADMIN,
    )
    assert dates.status_code == 400, dates.text  # the import's rule: end after start
    assert dates.json()["problems"]
    targeting = await app_client.patch(
        f"/admin/v1/campaigns/{CAMPAIGN}",
        json={"targeting": {"screen_types": ["static"]}},
        headers=ADMIN,
    )
    assert targeting.status_code == 200, targeting.text
    assert targeting.json()["targeting"]["screen_types"] == ["static"]
    unknown = await app_client.patch(
        f"/admin/v1/campaigns/{CAMPAIGN}", json={"budget_cents": 1}, headers=ADMIN
    )
    assert unknown.status_code == 400

    screen = await app_client.post(f"/admin/v1/screens/{SCREEN_STATIC}/deactivate", headers=ADMIN)
    assert screen.status_code == 200
    assert screen.json()["active"] is False
    creative = await app_client.post(f"/admin/v1/creatives/{CREATIVE_IMAGE}/reject", headers=ADMIN)
    assert creative.status_code == 200
    assert creative.json()["approved"] is False
    approved = await app_client.post(f"/admin/v1/creatives/{CREATIVE_IMAGE}/approve", headers=ADMIN)
    assert approved.json()["approved"] is True
    missing = await app_client.post(f"/admin/v1/campaigns/{PUB}/pause", headers=ADMIN)
    assert missing.status_code == 404
    assert (await app_client.post(f"/admin/v1/campaigns/{CAMPAIGN}/pause")).status_code == 401


async def test_an_id_uuid_would_misread_is_no_id(app_client: AsyncTestClient[Litestar]) -> None:
    # docs/inventory.md: ids are UUIDs in their documented forms. `+` and a blank before 31
    # digits, or 32 Arabic-Indic zeros, are other ids to Python's uuid.UUID: refused, never
    # stored or looked up as those.
    plus = "+" + CAMPAIGN.replace("-", "")[1:]
    shown = await app_client.get(f"/admin/v1/campaigns/{plus}", headers=ADMIN)
    assert shown.status_code == 400, shown.text
    for written in (plus, " " + CAMPAIGN.replace("-", "")[1:], "\u0660" * 32):
        document = {"publishers": [{"id": written, "name": "Typo Media"}]}
        stored = await app_client.put("/admin/v1/inventory", json=document, headers=ADMIN)
        assert stored.status_code == 400, (written, stored.text)
    listed = await app_client.get("/admin/v1/inventory", headers=ADMIN)
    assert "Typo Media" not in listed.text
