"""Unambiguous input: a JSON body with a key twice in one object, and a request with two
Authorization headers, are refused with 400 in the interface's shape on every route that reads
them (docs/decisions.md, "Duplicate JSON keys and Authorization headers"). The same key in two
different objects is no duplicate."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from bidder.settings import Settings
from tests.support.admin import NEW_SCREEN
from tests.support.core import API, Core, live_app, prepare
from tests.support.factories import CAMPAIGN, SCREEN_MOVING
from tests.support.openrtb import BID, assert_error, bid_request
from tests.support.servers import ADMIN_TOKEN

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
JSON = {"Content-Type": "application/json"}


@pytest.fixture
async def core(settings: Settings, clean: None) -> AsyncIterator[Core]:
    async with live_app(settings) as running:
        yield await prepare(running)


def _plus(body: dict[str, Any], extra: str) -> bytes:
    """`body` as JSON with `extra` (`"key": value`) added as its last member."""
    text = json.dumps(body)
    return (text[:-1] + (", " if body else "") + extra + "}").encode()


def _assert_core_400(response: httpx.Response, key: str) -> None:
    assert response.status_code == 400, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert "Duplicate key" in body["error"]
    assert repr(key) in body["error"]


async def _offer_id(core: Core) -> str:
    response = await core.offer(SCREEN_MOVING)
    assert response.status_code == 200, response.text
    offer_id: str = response.json()["offer_id"]
    return offer_id


async def test_offer_response_with_a_key_twice_is_400_and_changes_nothing(core: Core) -> None:
    offer_id = await _offer_id(core)
    body = _plus({"action": "reject"}, '"action": "accept", "accepted_price_cents": 9999')
    response = await core.client.post(
        f"{API}/offers/response/{offer_id}", content=body, headers={**core.auth, **JSON}
    )
    _assert_core_400(response, "action")
    # The offer is still open: one unambiguous answer is taken.
    assert (await core.respond(offer_id, {"action": "reject"})).status_code == 200


async def test_playout_confirm_with_a_key_twice_is_400(core: Core) -> None:
    body = _plus({"played_at": "2026-01-01T00:00:00Z"}, '"played_at": "2026-01-02T00:00:00Z"')
    response = await core.client.post(
        f"{API}/playout/confirm/some-deal", content=body, headers={**core.auth, **JSON}
    )
    _assert_core_400(response, "played_at")


async def test_screen_create_and_update_with_a_key_twice_are_400(core: Core) -> None:
    body = _plus(NEW_SCREEN, '"name": "Platform 10"')
    headers = {**core.auth, **JSON}
    response = await core.client.post(f"{API}/screens", content=body, headers=headers)
    _assert_core_400(response, "name")
    listed = await core.client.get(f"{API}/screens", headers=core.auth)
    assert all(s["external_id"] != NEW_SCREEN["external_id"] for s in listed.json()["screens"])

    response = await core.client.patch(
        f"{API}/screens/{SCREEN_MOVING}",
        content=b'{"name": "A", "name": "B"}',
        headers=headers,
    )
    _assert_core_400(response, "name")


async def test_openrtb_bid_with_a_key_twice_is_400_invalid_request(core: Core) -> None:
    headers = {**core.auth, **JSON}
    top = _plus(bid_request(), '"imp": []')
    nested = json.dumps(bid_request()).replace('"tagid": ', '"tagid": "ext-other", "tagid": ')
    deal = json.dumps(bid_request()).replace('"bidfloor": 1.0', '"bidfloor": 1.0, "bidfloor": 0')
    assert nested.count('"tagid"') == 2
    assert deal.count('"bidfloor"') == 2
    for body in (top, nested.encode(), deal.encode()):
        response = await core.client.post(BID, content=body, headers=headers)
        details = assert_error(response, 400, "INVALID_REQUEST")
        assert "Duplicate key" in details["message"]
    # The same names in different objects (`id`, `at`): an ordinary bid, answered.
    ordinary = await core.client.post(BID, json=bid_request(), headers=core.auth)
    assert ordinary.status_code in (200, 204), ordinary.text


async def test_a_body_escaping_its_colons_is_checked_too(core: Core) -> None:
    # `\u003a` is a colon the fast count cannot see; the exact check still finds the key.
    body = b'{"action": "reject", "rejection_reason": "a\\u003ab", "action": "accept"}'
    offer_id = await _offer_id(core)
    response = await core.client.post(
        f"{API}/offers/response/{offer_id}", content=body, headers={**core.auth, **JSON}
    )
    _assert_core_400(response, "action")


async def test_admin_top_up_with_a_key_twice_is_400(core: Core) -> None:
    response = await core.client.post(
        f"/admin/v1/campaigns/{CAMPAIGN}/budget",
        content=b'{"add_cents": 1, "add_cents": 100000000}',
        headers={**ADMIN, **JSON},
    )
    _assert_core_400(response, "add_cents")


# -- two Authorization headers ---------------------------------------------------------------


async def test_two_authorization_headers_are_400_on_every_interface(core: Core) -> None:
    key = core.auth["Authorization"]
    same = [("Authorization", key), ("Authorization", key)]
    other = [("Authorization", key), ("Authorization", f"Bearer {ADMIN_TOKEN}")]
    for headers in (same, other):
        # A hot route (served in front of Litestar) and a Litestar one, Core API.
        for path in (f"{API}/offers/request/{SCREEN_MOVING}", f"{API}/screens"):
            response = await core.client.get(path, headers=headers)
            assert response.status_code == 400, (path, response.text)
            assert response.json() == {"error": "Send one Authorization header, not several"}
        # OpenRTB: its error shape.
        response = await core.client.post(BID, json=bid_request(), headers=headers)
        details = assert_error(response, 400, "INVALID_REQUEST")
        assert "Authorization" in details["message"]
        # Admin API.
        response = await core.client.get(
            f"/admin/v1/campaigns/{CAMPAIGN}", headers=[*headers, ("Authorization", key)]
        )
        assert response.status_code == 400
        assert response.json() == {"error": "Send one Authorization header, not several"}
    # One header: served as before.
    assert (await core.client.get(f"{API}/screens", headers=core.auth)).status_code == 200
