"""Publisher screens endpoints: a publisher lists, registers, reads, updates and deactivates its
own screens with its API key, never sees another's, and every change reaches matching."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from tests.support.admin import ADMIN, NEW_SCREEN, Client, bearer, started_client
from tests.support.factories import (
    PUB,
    PUB_OTHER,
    SCREEN_MOVING,
    SCREEN_OTHER_PUB,
    SCREEN_SLOW,
    SCREEN_STATIC,
    basic_document,
    make_key,
    seed,
)
from tests.support.servers import ServerUrls, wait_for_inventory

SCREENS = "/functions/v1/api/screens"


class Publisher:
    def __init__(self, client: Client, key: str) -> None:
        self.client = client
        self.headers = bearer(key)

    async def call(self, method: str, path: str = "", body: Any = None) -> Any:
        kwargs: dict[str, Any] = {"headers": self.headers}
        if body is not None:
            kwargs["json"] = body
        return await self.client.request(method, SCREENS + path, **kwargs)


@pytest.fixture
async def app_client(servers: ServerUrls, clean: None) -> AsyncIterator[Client]:
    await seed(servers.database_url, basic_document())
    async for client in started_client(servers):
        yield client


@pytest.fixture
async def metro(app_client: Client, servers: ServerUrls) -> Publisher:
    key = await make_key(servers.database_url, PUB)
    await wait_for_inventory(app_client)
    return Publisher(app_client, key)


@pytest.fixture
async def mall(app_client: Client, servers: ServerUrls) -> Publisher:
    key = await make_key(servers.database_url, PUB_OTHER)
    await wait_for_inventory(app_client)
    return Publisher(app_client, key)


async def stored_screen(servers: ServerUrls, screen_id: str) -> asyncpg.Record | None:
    conn = await asyncpg.connect(servers.database_url)
    try:
        return await conn.fetchrow("SELECT * FROM screens WHERE id = $1", uuid.UUID(screen_id))
    finally:
        await conn.close()


async def reaches_matching(client: Client, check: Any, within: float = 2.0) -> None:
    """The worker's snapshot satisfies `check` within `within` seconds (background reload)."""
    started = time.monotonic()
    while time.monotonic() - started < within:
        snapshot = client.app.state.runtime.inventory.snapshot
        if snapshot is not None and check(snapshot):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the change did not reach the snapshot in time")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", ""),
        ("POST", ""),
        ("GET", f"/{SCREEN_MOVING}"),
        ("PATCH", f"/{SCREEN_MOVING}"),
        ("DELETE", f"/{SCREEN_MOVING}"),
    ],
)
@pytest.mark.parametrize("token", [None, "dk_stg_unknown", "admin"])
async def test_screens_need_a_publisher_key(
    app_client: Client, metro: Publisher, method: str, path: str, token: str | None
) -> None:
    headers = {} if token is None else (ADMIN if token == "admin" else bearer(token))
    response = await app_client.request(method, SCREENS + path, headers=headers, json={})
    assert response.status_code == 401
    assert response.json()["error"] == "Invalid or expired API key"


async def test_list_shows_only_the_keys_publisher_in_pages(metro: Publisher) -> None:
    first = await metro.call("GET", "?limit=" + "0" * 5000 + "2")  # zeros in front: still 2
    assert first.status_code == 200
    ids = sorted([SCREEN_MOVING, SCREEN_STATIC, SCREEN_SLOW])
    assert [s["id"] for s in first.json()["screens"]] == ids[:2]
    assert first.json()["next_cursor"] == ids[1]

    second = await metro.call("GET", f"?limit=2&cursor={first.json()['next_cursor']}")
    assert [s["id"] for s in second.json()["screens"]] == ids[2:]
    assert second.json()["next_cursor"] is None

    everything = (await metro.call("GET")).json()
    assert [s["id"] for s in everything["screens"]] == ids
    assert all(s["publisher_id"] == PUB for s in everything["screens"])
    assert everything["next_cursor"] is None


@pytest.mark.parametrize(
    "query",
    # Full-width and superscript digits: str.isdigit() takes both (a 500 for the second);
    # 5,000 digits: past int()'s 4,300-digit limit (a 500).
    [
        "?limit=0",
        "?limit=501",
        "?limit=ten",
        "?cursor=abc",
        "?limit=%EF%BC%92",
        "?limit=%C2%B2",
        "?limit=" + "1" * 5000,
        "?limit=" + "0" * 5000,
    ],
)
async def test_bad_paging_parameters_get_400(metro: Publisher, query: str) -> None:
    response = await metro.call("GET", query)
    assert response.status_code == 400
    assert isinstance(response.json()["error"], str)


async def test_register_a_screen_and_it_reaches_matching(
    app_client: Client, metro: Publisher, servers: ServerUrls
) -> None:
    response = await metro.call("POST", body=NEW_SCREEN)
    assert response.status_code == 201, response.text
    screen = response.json()
    new_id = screen["id"]
    uuid.UUID(new_id)
    assert screen == {**NEW_SCREEN, "id": new_id, "publisher_id": PUB, "active": True}

    row = await stored_screen(servers, new_id)
    assert row is not None
    assert str(row["publisher_id"]) == PUB
    assert (await metro.call("GET", f"/{new_id}")).json() == screen
    await reaches_matching(app_client, lambda snap: new_id in snap.screens)


async def test_register_with_defaults_and_a_chosen_id(metro: Publisher) -> None:
    chosen = str(uuid.uuid4())
    response = await metro.call(
        "POST",
        body={"id": chosen, "name": "Kiosk 2", "type": "static", "width": 800, "height": 600},
    )
    assert response.status_code == 201
    assert response.json() == {
        "id": chosen,
        "publisher_id": PUB,
        "name": "Kiosk 2",
        "type": "static",
        "width": 800,
        "height": 600,
        "external_id": None,
        "audience_per_play": 1.0,
        "venue_type": None,
        "timezone": "UTC",
        "lat": None,
        "lon": None,
        "active": True,
    }


async def test_registering_an_existing_id_is_a_conflict(
    metro: Publisher, servers: ServerUrls
) -> None:
    before = await stored_screen(servers, SCREEN_OTHER_PUB)
    response = await metro.call("POST", body={**NEW_SCREEN, "id": SCREEN_OTHER_PUB})
    assert response.status_code == 409
    assert await stored_screen(servers, SCREEN_OTHER_PUB) == before


async def test_an_invalid_screen_lists_every_problem_by_field(
    metro: Publisher, servers: ServerUrls
) -> None:
    response = await metro.call(
        "POST",
        body={
            **NEW_SCREEN,
            "name": "  ",
            "width": 0,
            "timezone": "Atlantis/Capital",
            "lat": 91,
            "audience_per_play": 0,
        },
    )
    assert response.status_code == 400
    body = response.json()
    assert isinstance(body["error"], str)
    assert {p["field"] for p in body["problems"]} == {
        "name",
        "width",
        "timezone",
        "lat",
        "audience_per_play",
    }
    listed = (await metro.call("GET")).json()["screens"]
    assert len(listed) == 3  # nothing was registered


async def test_an_external_id_taken_by_the_same_publisher_is_refused(metro: Publisher) -> None:
    response = await metro.call("POST", body={**NEW_SCREEN, "external_id": "ext-moving-1"})
    assert response.status_code == 400
    assert [p["field"] for p in response.json()["problems"]] == ["external_id"]


async def test_an_external_id_of_another_publisher_is_free(mall: Publisher) -> None:
    response = await mall.call("POST", body={**NEW_SCREEN, "external_id": "ext-static-1"})
    assert response.status_code == 201


@pytest.mark.parametrize(
    "body",
    [
        {**NEW_SCREEN, "publisher_id": PUB_OTHER},
        {**NEW_SCREEN, "type": "huge"},
        {**NEW_SCREEN, "width": "wide"},
        {**NEW_SCREEN, "colour": "blue"},
        {"type": "static", "width": 10, "height": 10},
        {**NEW_SCREEN, "id": "screen-1"},
    ],
)
async def test_malformed_registrations_get_400(metro: Publisher, body: dict[str, Any]) -> None:
    response = await metro.call("POST", body=body)
    assert response.status_code == 400
    assert isinstance(response.json()["error"], str)


async def test_wrong_types_missing_and_unknown_fields_are_all_listed(metro: Publisher) -> None:
    """The README's promise, "every problem", holds before the screen rules run too: msgspec
    stops at the first field of a wrong type, and the answer named only that one."""
    response = await metro.call(
        "POST", body={"name": 7, "type": "huge", "width": "wide", "colour": "blue", "lat": "n"}
    )
    assert response.status_code == 400
    problems = {p["field"]: p["message"] for p in response.json()["problems"]}
    assert set(problems) == {"name", "type", "width", "height", "colour", "lat"}
    assert problems["height"] == "is required"
    assert "str" in problems["name"]
    assert "huge" in problems["type"]
    updated = await metro.call(
        "PATCH", f"/{SCREEN_MOVING}", {"width": 1.5, "audience_per_play": "many"}
    )
    assert updated.status_code == 400
    assert {p["field"] for p in updated.json()["problems"]} == {"width", "audience_per_play"}
    assert len((await metro.call("GET")).json()["screens"]) == 3  # nothing was registered


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        # A type error beside values that break a rule: both kinds are listed.
        (
            {**NEW_SCREEN, "width": "wide", "height": -1, "timezone": "Atlantis/Capital"},
            {"width", "height", "timezone"},
        ),
        ({"type": "moving", "width": 10, "height": 10, "lat": 91}, {"name", "lat"}),
        ({**NEW_SCREEN, "colour": "blue", "audience_per_play": 0}, {"colour", "audience_per_play"}),
    ],
)
async def test_type_and_value_problems_are_listed_together(
    metro: Publisher, body: dict[str, Any], fields: set[str]
) -> None:
    response = await metro.call("POST", body=body)
    assert response.status_code == 400
    assert {p["field"] for p in response.json()["problems"]} == fields
    assert len((await metro.call("GET")).json()["screens"]) == 3  # nothing was registered


async def test_an_update_lists_type_and_value_problems_together(
    metro: Publisher, mall: Publisher
) -> None:
    before = (await metro.call("GET", f"/{SCREEN_MOVING}")).json()
    body = {"name": 5, "height": -2, "timezone": "Bad/Zone", "lat": 91}
    response = await metro.call("PATCH", f"/{SCREEN_MOVING}", body)
    assert response.status_code == 400
    assert {p["field"] for p in response.json()["problems"]} == {
        "name",
        "height",
        "timezone",
        "lat",
    }
    assert (await metro.call("GET", f"/{SCREEN_MOVING}")).json() == before  # nothing changed
    # Another publisher's screen: the body's own problems (400 first), none of the screen's.
    other = await mall.call("PATCH", f"/{SCREEN_MOVING}", body)
    assert other.status_code == 400
    assert {p["field"] for p in other.json()["problems"]} == {"name"}


@pytest.mark.parametrize(
    ("extra", "fields"),
    [
        # The id's or publisher's problem sits in `problems` beside the others, not alone.
        ({"id": "not-uuid", "width": 0}, {"id", "width"}),
        ({"publisher_id": PUB_OTHER, "width": 0}, {"publisher_id", "width"}),
        ({"publisher_id": PUB_OTHER, "height": "tall"}, {"publisher_id", "height"}),
    ],
)
async def test_an_id_or_publisher_problem_is_listed_with_the_others(
    metro: Publisher, extra: dict[str, Any], fields: set[str]
) -> None:
    response = await metro.call("POST", body={**NEW_SCREEN, **extra})
    assert response.status_code == 400
    body = response.json()
    assert isinstance(body["error"], str)
    assert {p["field"] for p in body["problems"]} == fields
    assert len((await metro.call("GET")).json()["screens"]) == 3  # nothing was registered


async def test_answers_show_the_screen_as_stored(metro: Publisher) -> None:
    """POST and PATCH answer what GET shows: numbers as stored, not as the client spelt them
    (an answer echoed 2.50 and 1E+1 where GET said 2.5 and 10)."""
    headers = {**metro.headers, "Content-Type": "application/json"}
    body = json.dumps({**NEW_SCREEN, "audience_per_play": "@@"}).replace('"@@"', "2.50")
    created = await metro.client.post(SCREENS, content=body.encode(), headers=headers)
    assert created.status_code == 201, created.text
    screen_id = created.json()["id"]
    assert created.content == (await metro.call("GET", f"/{screen_id}")).content
    assert b'"audience_per_play":2.5,' in created.content
    updated = await metro.client.patch(
        f"{SCREENS}/{screen_id}", content=b'{"audience_per_play": 1E+1}', headers=headers
    )
    assert updated.status_code == 200, updated.text
    assert updated.content == (await metro.call("GET", f"/{screen_id}")).content
    assert b'"audience_per_play":10,' in updated.content


async def test_malformed_json_gets_400(metro: Publisher) -> None:
    response = await metro.client.post(
        SCREENS, content=b"{nope", headers={**metro.headers, "Content-Type": "application/json"}
    )
    assert response.status_code == 400


async def test_another_publishers_screen_is_not_found(
    metro: Publisher, servers: ServerUrls
) -> None:
    before = await stored_screen(servers, SCREEN_OTHER_PUB)
    for method, body in (("GET", None), ("PATCH", {"name": "Mine now"}), ("DELETE", None)):
        response = await metro.call(method, f"/{SCREEN_OTHER_PUB}", body)
        assert response.status_code == 404, method
        assert isinstance(response.json()["error"], str)
    assert await stored_screen(servers, SCREEN_OTHER_PUB) == before


@pytest.mark.parametrize("screen_id", [str(uuid.uuid4()), "not-a-uuid"])
async def test_unknown_screens_are_not_found(metro: Publisher, screen_id: str) -> None:
    assert (await metro.call("GET", f"/{screen_id}")).status_code == 404


async def test_update_changes_only_the_given_fields(app_client: Client, metro: Publisher) -> None:
    before = (await metro.call("GET", f"/{SCREEN_SLOW}")).json()
    response = await metro.call(
        "PATCH",
        f"/{SCREEN_SLOW}",
        {"name": "Hall, renamed", "audience_per_play": 7.25, "external_id": None},
    )
    assert response.status_code == 200
    expected = {**before, "name": "Hall, renamed", "audience_per_play": 7.25, "external_id": None}
    assert response.json() == expected
    assert (await metro.call("GET", f"/{SCREEN_SLOW}")).json() == expected
    await reaches_matching(
        app_client, lambda snap: snap.screens[SCREEN_SLOW].name == "Hall, renamed"
    )


async def test_a_screen_sent_back_whole_as_get_gave_it_updates(metro: Publisher) -> None:
    """A client that reads a screen, edits it and sends it back whole carries the screen's
    own `id` and `publisher_id`: the same values change nothing, so they are no error."""
    screen = (await metro.call("GET", f"/{SCREEN_SLOW}")).json()
    response = await metro.call("PATCH", f"/{SCREEN_SLOW}", {**screen, "name": "Hall B"})
    assert response.status_code == 200, response.text
    assert response.json() == {**screen, "name": "Hall B"}
    upper = {"id": screen["id"].upper(), "publisher_id": screen["publisher_id"].upper()}
    assert (await metro.call("PATCH", f"/{SCREEN_SLOW}", upper)).status_code == 200
    own = await metro.call("POST", body={**NEW_SCREEN, "publisher_id": screen["publisher_id"]})
    assert own.status_code == 201, own.text


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"external_id": "test-display-test"}, "external_id"),  # the demo screen's: unreachable
        ({"timezone": "localtime"}, "timezone"),  # the host's zone, not a place's
        ({"timezone": "Factory"}, "timezone"),
        ({"venue_type": " "}, "venue_type"),
        ({"audience_per_play": "35.5"}, "audience_per_play"),  # numbers, as the Core API
    ],
)
async def test_values_a_screen_cannot_work_with_are_refused(
    metro: Publisher, extra: dict[str, Any], field: str
) -> None:
    response = await metro.call("POST", body={**NEW_SCREEN, **extra})
    assert response.status_code == 400, response.text
    assert [p["field"] for p in response.json()["problems"]] == [field]
    patched = await metro.call("PATCH", f"/{SCREEN_SLOW}", extra)
    assert patched.status_code == 400, patched.text
    assert [p["field"] for p in patched.json()["problems"]] == [field]


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"publisher_id": PUB_OTHER}, 400),
        ({"id": str(uuid.uuid4())}, 400),
        ({"width": -1}, 400),
        ({"type": "round"}, 400),
        ({"lon": 200}, 400),
    ],
)
async def test_refused_updates_change_nothing(
    metro: Publisher, body: dict[str, Any], status: int
) -> None:
    before = (await metro.call("GET", f"/{SCREEN_SLOW}")).json()
    response = await metro.call("PATCH", f"/{SCREEN_SLOW}", body)
    assert response.status_code == status
    assert (await metro.call("GET", f"/{SCREEN_SLOW}")).json() == before


async def test_deactivate_keeps_the_screen_inactive(
    app_client: Client, metro: Publisher, servers: ServerUrls
) -> None:
    response = await metro.call("DELETE", f"/{SCREEN_STATIC}")
    assert response.status_code == 200
    assert response.json()["active"] is False
    row = await stored_screen(servers, SCREEN_STATIC)
    assert row is not None
    assert row["active"] is False
    await reaches_matching(app_client, lambda snap: not snap.screens[SCREEN_STATIC].active)
    # Deactivating again is harmless; reactivating is an update.
    assert (await metro.call("DELETE", f"/{SCREEN_STATIC}")).status_code == 200
    back = await metro.call("PATCH", f"/{SCREEN_STATIC}", {"active": True})
    assert back.json()["active"] is True
