"""Admin API: the operator token, and the inventory document (PUT all or nothing, GET round
trip)."""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import AsyncIterator
from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest

from tests.support.admin import ADMIN, Client, fetchval, full_document, parsed, started_client
from tests.support.factories import CAMPAIGN, PUB, PUB_OTHER, SCREEN_MOVING, make_key, uid
from tests.support.servers import ADMIN_TOKEN, ServerUrls


@pytest.fixture
async def app_client(servers: ServerUrls, clean: None) -> AsyncIterator[Client]:
    async for client in started_client(servers):
        yield client


def as_sent(doc: dict[str, Any]) -> Any:
    return parsed(json.dumps(doc).encode())


async def put_doc(client: Client, doc: Any) -> Any:
    body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return await client.put(
        "/admin/v1/inventory",
        content=body,
        headers={**ADMIN, "Content-Type": "application/json"},
    )


ADMIN_ENDPOINTS = [
    ("GET", "/admin/v1/inventory"),
    ("PUT", "/admin/v1/inventory"),
    ("POST", f"/admin/v1/publishers/{PUB}/api-keys"),
    ("DELETE", f"/admin/v1/api-keys/{uid(9, 9)}"),
    ("GET", f"/admin/v1/campaigns/{CAMPAIGN}"),
    ("POST", f"/admin/v1/campaigns/{CAMPAIGN}/budget"),
]


@pytest.mark.parametrize(("method", "path"), ADMIN_ENDPOINTS)
@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong-token-0123456789", f"Basic {ADMIN_TOKEN}", f"Bearer {ADMIN_TOKEN}x"],
)
async def test_every_admin_endpoint_refuses_a_missing_or_wrong_token(
    app_client: Client, method: str, path: str, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    response = await app_client.request(method, path, headers=headers, content=b"{}")
    assert response.status_code == 401
    assert set(response.json()) == {"error"}


async def test_a_publisher_key_is_not_an_admin_token(app_client: Client, settings: Any) -> None:
    await put_doc(app_client, full_document())
    key = await make_key(settings.postgres.url)
    response = await app_client.get(
        "/admin/v1/inventory", headers={"Authorization": f"Bearer {key}"}
    )
    assert response.status_code == 401


async def test_put_then_get_returns_the_document_unchanged(app_client: Client) -> None:
    doc = full_document()
    response = await put_doc(app_client, doc)
    assert response.status_code == 200, response.text
    assert response.json() == {
        "counts": {
            "publishers": 2,
            "advertisers": 1,
            "billing_codes": 1,
            "screens": 2,
            "campaigns": 2,
            "creatives": 2,
            "exchange_rates": 2,
        }
    }
    exported = await app_client.get("/admin/v1/inventory", headers=ADMIN)
    assert exported.status_code == 200
    assert parsed(exported.content) == as_sent(doc)


async def test_put_is_idempotent_and_upserts(app_client: Client) -> None:
    doc = full_document()
    assert (await put_doc(app_client, doc)).status_code == 200
    assert (await put_doc(app_client, doc)).status_code == 200
    changed = copy.deepcopy(doc)
    changed["publishers"][0]["name"] = "Metro Screens Renamed"
    changed["billing_codes"][0]["code"] = "BILL-FIZZY-2"
    # A partial document touches only what it names.
    partial = {"publishers": changed["publishers"], "billing_codes": changed["billing_codes"]}
    assert (await put_doc(app_client, partial)).status_code == 200
    exported = await app_client.get("/admin/v1/inventory", headers=ADMIN)
    assert parsed(exported.content) == as_sent(changed)


async def _stored_version(servers: ServerUrls) -> int:
    version: int = await fetchval(servers, "SELECT version FROM inventory_version")
    return version


async def test_a_document_that_changes_nothing_leaves_the_version_so_no_worker_reloads(
    app_client: Client, servers: ServerUrls
) -> None:
    """Every version bump makes every worker rebuild its whole snapshot, so the export put
    back (a no-op) leaves the version as it is."""
    doc = full_document()
    assert (await put_doc(app_client, doc)).status_code == 200
    first = await _stored_version(servers)
    assert (await put_doc(app_client, doc)).status_code == 200
    exported = (await app_client.get("/admin/v1/inventory", headers=ADMIN)).content
    assert (await put_doc(app_client, exported)).status_code == 200
    assert await _stored_version(servers) == first
    renamed = copy.deepcopy(doc["screens"][:1])
    renamed[0]["name"] = "Central Station 1, renamed"
    assert (await put_doc(app_client, {"screens": renamed})).status_code == 200
    assert await _stored_version(servers) == first + 1
    pair = {k: doc["billing_codes"][0][k] for k in ("advertiser_id", "publisher_id")}
    assert (
        await put_doc(app_client, {"billing_codes": [{**pair, "code": None}]})
    ).status_code == 200
    assert await _stored_version(servers) == first + 2  # a removal is a change too
    assert (
        await put_doc(app_client, {"billing_codes": [{**pair, "code": None}]})
    ).status_code == 200
    assert await _stored_version(servers) == first + 2


async def test_a_billing_code_of_null_removes_the_pairs_code(app_client: Client) -> None:
    doc = full_document()
    assert (await put_doc(app_client, doc)).status_code == 200
    pair = {k: doc["billing_codes"][0][k] for k in ("advertiser_id", "publisher_id")}
    removed = await put_doc(app_client, {"billing_codes": [{**pair, "code": None}]})
    assert removed.status_code == 200, removed.text
    exported = parsed((await app_client.get("/admin/v1/inventory", headers=ADMIN)).content)
    assert exported["billing_codes"] == []
    assert exported == as_sent({**doc, "billing_codes": []})
    # Removing it again is no error (the import is idempotent); setting it again works.
    assert (
        await put_doc(app_client, {"billing_codes": [{**pair, "code": None}]})
    ).status_code == 200
    again = await put_doc(app_client, {"billing_codes": [{**pair, "code": "BILL-AGAIN"}]})
    assert again.status_code == 200, again.text
    exported = parsed((await app_client.get("/admin/v1/inventory", headers=ADMIN)).content)
    assert exported["billing_codes"] == [{**pair, "code": "BILL-AGAIN"}]
    empty = await put_doc(app_client, {"billing_codes": [{**pair, "code": " "}]})
    assert empty.status_code == 400  # an empty code is still refused: null removes


async def test_an_invalid_document_lists_every_problem_and_applies_nothing(
    app_client: Client,
) -> None:
    assert (await put_doc(app_client, full_document())).status_code == 200
    before = (await app_client.get("/admin/v1/inventory", headers=ADMIN)).content

    bad = full_document()
    bad["publishers"][0]["name"] = "Renamed, but must not be applied"
    bad["publishers"][1]["commission_rate"] = 1.5  # docs/contract.md#2-inventory: 0..1
    bad["screens"][0]["width"] = 0  # pixels must be positive
    bad["screens"][1]["timezone"] = "Mars/Olympus_Mons"  # not IANA
    bad["campaigns"][1]["advertiser_id"] = uid(99, 2)  # no such advertiser
    bad["creatives"][1]["url"] = "https://cdn.example/winter.bmp"  # unknown extension
    response = await put_doc(app_client, bad)

    assert response.status_code == 400
    body = response.json()
    assert isinstance(body["error"], str)
    found = {(p["list"], p["index"], p["id"], p["field"]) for p in body["problems"]}
    assert found == {
        ("publishers", 1, PUB_OTHER, "commission_rate"),
        ("screens", 0, SCREEN_MOVING, "width"),
        ("screens", 1, uid(2, 3), "timezone"),
        ("campaigns", 1, uid(2, 4), "advertiser_id"),
        ("creatives", 1, uid(2, 5), "url"),
    }
    assert all(p["message"] for p in body["problems"])
    after = (await app_client.get("/admin/v1/inventory", headers=ADMIN)).content
    assert parsed(after) == parsed(before)


async def test_numbers_written_as_no_client_means_them_are_refused(app_client: Client) -> None:
    """Decimal() reads "2_50" as 250 and " 0.1 " as 0.1, and msgspec decodes a string into a
    Decimal field with it; the Core API's parser refuses both, and so does the admin API:
    every such field is listed, nothing is applied. Decimal strings as JSON writes numbers
    ("250", "0.1") are taken."""
    assert (await put_doc(app_client, full_document())).status_code == 200
    before = (await app_client.get("/admin/v1/inventory", headers=ADMIN)).content

    bad = full_document()
    bad["campaigns"][0]["cpm_cents"] = "2_50"
    bad["campaigns"][1]["daily_budget_cents"] = "\u0663"  # Arabic-Indic three
    bad["publishers"][1]["commission_rate"] = " 0.1 "
    bad["screens"][0]["audience_per_play"] = "1e1\n"
    response = await put_doc(app_client, bad)

    assert response.status_code == 400, response.text
    found = {(p["list"], p["index"], p["field"]) for p in response.json()["problems"]}
    assert found == {
        ("campaigns", 0, "cpm_cents"),
        ("campaigns", 1, "daily_budget_cents"),
        ("publishers", 1, "commission_rate"),
        ("screens", 0, "audience_per_play"),
    }
    after = (await app_client.get("/admin/v1/inventory", headers=ADMIN)).content
    assert parsed(after) == parsed(before)

    fine = full_document()
    fine["campaigns"][0]["cpm_cents"] = "250"
    fine["publishers"][1]["commission_rate"] = "0.1"
    assert (await put_doc(app_client, fine)).status_code == 200, "strings JSON-like are numbers"
    shown = parsed((await app_client.get("/admin/v1/inventory", headers=ADMIN)).content)
    assert shown["campaigns"][0]["cpm_cents"] == Decimal("250")
    assert shown["publishers"][1]["commission_rate"] == Decimal("0.1")


async def test_a_stored_screens_external_id_is_listed_with_the_other_problems(
    app_client: Client,
) -> None:
    """A new screen taking the external id of a stored screen the document does not name is
    reported with the document's other problems, not only once they are fixed."""
    assert (await put_doc(app_client, full_document())).status_code == 200
    stored = full_document()["screens"][0]
    twin = {**stored, "id": uid(77, 3), "name": "Twin"}  # the stored screen's external id
    wide = {**stored, "id": uid(78, 3), "external_id": "ext-78", "width": -10}
    response = await put_doc(app_client, {"screens": [twin, wide]})
    assert response.status_code == 400
    found = {(p["list"], p["index"], p["field"]) for p in response.json()["problems"]}
    assert found == {("screens", 0, "external_id"), ("screens", 1, "width")}


async def test_a_document_may_hand_an_external_id_on_within_itself(
    app_client: Client,
) -> None:
    """docs/inventory.md: `external_id` is unique among the publisher's screens. A document
    that moves a stored screen to another publisher and gives its external id to a new screen
    of the first leaves each publisher with it once: taken, as the same two steps are."""
    assert (await put_doc(app_client, full_document())).status_code == 200
    stored = full_document()["screens"][0]
    assert stored["publisher_id"] == PUB
    assert stored["external_id"] is not None
    moved = {**stored, "publisher_id": PUB_OTHER}
    newcomer = {**stored, "id": uid(79, 3), "name": "Newcomer"}
    response = await put_doc(app_client, {"screens": [moved, newcomer]})
    assert response.status_code == 200, response.text
    exported = {
        s["id"]: s
        for s in parsed((await app_client.get("/admin/v1/inventory", headers=ADMIN)).content)[
            "screens"
        ]
    }
    assert exported[stored["id"]]["publisher_id"] == PUB_OTHER
    assert exported[uid(79, 3)]["external_id"] == stored["external_id"]
    assert exported[uid(79, 3)]["publisher_id"] == PUB
    # Kept where the stored holder stays: the new screen's twin is still refused.
    twin = {**stored, "id": uid(80, 3), "name": "Twin"}
    refused = await put_doc(app_client, {"screens": [twin]})
    assert refused.status_code == 400, refused.text


@pytest.mark.parametrize(
    ("body", "fragment"),
    [(b"{not json", "not valid JSON"), (b"[]", "Expected `object`"), (b"", "not valid JSON")],
)
async def test_a_body_that_is_no_document_gets_400_saying_why(
    app_client: Client, body: bytes, fragment: str
) -> None:
    response = await put_doc(app_client, body)
    assert response.status_code == 400
    assert fragment in response.json()["error"]


def _screen(**changes: Any) -> dict[str, Any]:
    return {**full_document()["screens"][0], **changes}


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        ({"screenz": []}, {("screenz", 0, "")}),
        (
            {"publishers": [{"id": PUB, "name": "X", "colour": "red"}]},
            {("publishers", 0, "colour")},
        ),
        ({"screens": [_screen(width="wide")]}, {("screens", 0, "width")}),
        ({"screens": [_screen(type="huge")]}, {("screens", 0, "type")}),
        ({"publishers": [{"id": PUB}]}, {("publishers", 0, "name")}),
        ({"publishers": "all"}, {("publishers", 0, "")}),
        ({"publishers": [7]}, {("publishers", 0, "")}),
        # Every problem of shape at once (msgspec stopped at the first; the README promises
        # every problem): two in one screen, one in another list.
        (
            {
                "publishers": [{"id": PUB, "name": 1}],
                "screens": [_screen(), _screen(width="wide", colour="red")],
            },
            {("publishers", 0, "name"), ("screens", 1, "width"), ("screens", 1, "colour")},
        ),
        # A number the typed decode takes but a plain one refuses (out of range) does not
        # hide the other problems (a value problem of its own once the shapes are right).
        (
            {
                "publishers": [{"id": PUB, "name": 1}],
                "screens": [_screen(audience_per_play="@@1e400@@")],
            },
            {("publishers", 0, "name")},
        ),
    ],
)
async def test_items_of_the_wrong_shape_are_all_listed(
    app_client: Client, doc: dict[str, Any], where: set[tuple[str, int, str]]
) -> None:
    raw = json.dumps(doc).replace('"@@1e400@@"', "1e400").encode()
    response = await put_doc(app_client, raw)
    assert response.status_code == 400, response.text
    body = response.json()
    assert isinstance(body["error"], str)
    assert {(p["list"], p["index"], p["field"]) for p in body["problems"]} == where
    assert all(p["message"] for p in body["problems"])


async def test_a_large_document_is_accepted(app_client: Client) -> None:
    """Over the 1 MB limit of the rest of the service: the inventory route takes more."""
    doc = full_document()
    template = doc["screens"][1]
    doc["screens"] = [
        {**template, "id": uid(1000 + n, 3), "name": f"Screen {n:05d} " + "x" * 40}
        for n in range(12_000)
    ]
    body = json.dumps(doc).encode()
    assert len(body) > 1_000_000
    response = await put_doc(app_client, body)
    assert response.status_code == 200, response.text
    assert response.json()["counts"]["screens"] == 12_000


@pytest.mark.parametrize(
    ("kind", "field", "raw"),
    [
        # Each would overflow Decimal, asyncpg or datetime: a 400, never a 500 mid-check.
        ("campaigns", "cpm_cents", "1e400"),
        ("campaigns", "daily_budget_cents", "1e400"),
        ("screens", "audience_per_play", "1e400"),
        ("screens", "width", str(2**70)),
        ("campaigns", "max_plays_per_screen_per_hour", str(2**70)),
        ("campaigns", "start_at", '"9999-12-31T23:59:59-12:00"'),
        ("campaigns", "end_at", '"0001-01-01T00:00:00+14:00"'),
        # Would be stored rounded: refused instead (the audience sets the price).
        ("screens", "audience_per_play", "3.33333"),
        ("publishers", "commission_rate", "0.1234567"),
        # Decimal refuses to compare a NaN: a problem, not a 500.
        ("publishers", "commission_rate", '"NaN"'),
        ("publishers", "commission_rate", '"sNaN"'),
        # A campaign targeted at ids that name nothing it could ever match.
        ("campaigns", "targeting.publisher_ids", '["metro"]'),
        ("campaigns", "targeting.screen_ids", '["x"]'),
        # No XML can carry it, and it would reach the VAST.
        ("campaigns", "name", '"Summer \\u0001 sale"'),
        ("creatives", "url", '"https://cdn.example/a\\u0002.mp4"'),
    ],
)
async def test_values_no_column_or_document_can_hold_are_problems_not_500(
    app_client: Client, kind: str, field: str, raw: str
) -> None:
    doc = full_document()
    if field.startswith("targeting."):
        doc[kind][0]["targeting"][field.removeprefix("targeting.")] = "@@raw@@"
    else:
        doc[kind][0][field] = "@@raw@@"
    body = json.dumps(doc).replace('"@@raw@@"', raw).encode()
    response = await put_doc(app_client, body)
    assert response.status_code == 400, response.text
    problems = response.json()["problems"]
    assert {(p["list"], p["index"], p["field"]) for p in problems} >= {(kind, 0, field)}


@pytest.mark.parametrize("kind", ["publishers", "advertisers", "screens", "campaigns", "creatives"])
async def test_an_id_given_twice_in_other_letter_cases_is_a_duplicate(
    app_client: Client, kind: str
) -> None:
    """`DE00...` and `de00...` are one UUID, one row: the second is a duplicate (400), not an
    upsert hitting its own row twice (500) or two items counted for one row."""
    doc = full_document()
    lettered = "abcdef01-0000-4000-8000-00000000ffff"  # the factory ids are digits only
    for n, item_id in enumerate((lettered, lettered.upper())):
        twin = copy.deepcopy(doc[kind][0])
        twin["id"] = item_id
        if kind == "screens":
            twin["external_id"] = f"ext-twin-{n}"
        doc[kind].append(twin)
    response = await put_doc(app_client, json.dumps(doc).encode())
    assert response.status_code == 400, response.text
    problems = response.json()["problems"]
    assert {(p["list"], p["index"], p["field"]) for p in problems} == {
        (kind, len(doc[kind]) - 1, "id")
    }


async def test_ids_in_upper_case_name_the_same_items(app_client: Client) -> None:
    """References and targeting written in upper case find their items, and every id is
    stored and exported in the one canonical form."""
    # The factory ids are digits only: give the publisher, a screen and the campaigns letters.
    renamed = {PUB: "abcdef01-0000-4000-8000-0000000000aa"}
    renamed[SCREEN_MOVING] = "abcdef03-0000-4000-8000-0000000000bb"
    renamed[CAMPAIGN] = "abcdef04-0000-4000-8000-0000000000cc"
    text = json.dumps(full_document())
    for old_id, new_id in renamed.items():
        text = text.replace(old_id, new_id)
    doc = json.loads(text)
    doc["campaigns"][0]["targeting"]["screen_ids"] = [renamed[SCREEN_MOVING]]
    shouting = copy.deepcopy(doc)
    for screen in shouting["screens"]:
        screen["id"] = screen["id"].upper()
        screen["publisher_id"] = screen["publisher_id"].upper()
    for cmp in shouting["campaigns"]:
        cmp["id"] = cmp["id"].upper()
    targeting = shouting["campaigns"][0]["targeting"]
    targeting["publisher_ids"] = [renamed[PUB].upper()]
    targeting["screen_ids"] = [renamed[SCREEN_MOVING].upper()]
    for creative in shouting["creatives"]:
        creative["campaign_id"] = creative["campaign_id"].upper()
    response = await put_doc(app_client, json.dumps(shouting).encode())
    assert response.status_code == 200, response.text
    exported = parsed((await app_client.get("/admin/v1/inventory", headers=ADMIN)).content)
    expected = parsed(json.dumps(doc).encode())
    for kind in ("publishers", "screens", "campaigns", "creatives"):
        expected[kind].sort(key=lambda item: item["id"])  # export lists in id order
    assert exported == expected


@pytest.mark.parametrize(
    ("start_at", "end_at"),
    [
        ("0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z"),
        ("2020-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z"),
    ],
)
async def test_a_flight_at_the_ends_of_the_calendar_loads_and_round_trips(
    app_client: Client, settings: Any, start_at: str, end_at: str
) -> None:
    """asyncpg writes datetime.min / datetime.max as -infinity / infinity and reads them back
    naive: a campaign flying from the first to the last instant the document accepts must
    come back with its time zone, else every offer request it could match answers 500
    (matching compares the flight with an aware now)."""
    doc = full_document()
    doc["campaigns"][0]["start_at"], doc["campaigns"][0]["end_at"] = start_at, end_at
    doc["campaigns"][0]["targeting"] = {}  # any hour: the offer request below must match it
    response = await put_doc(app_client, doc)
    assert response.status_code == 200, response.text
    exported = await app_client.get("/admin/v1/inventory", headers=ADMIN)
    assert exported.status_code == 200, exported.text
    campaign = next(c for c in exported.json()["campaigns"] if c["id"] == CAMPAIGN)
    assert datetime.fromisoformat(campaign["start_at"]) == datetime.fromisoformat(start_at)
    assert datetime.fromisoformat(campaign["end_at"]) == datetime.fromisoformat(end_at)
    key = await make_key(settings.postgres.url)
    deadline = time.monotonic() + 5
    while True:  # the import and the key reach the worker's snapshot within a reload
        offer = await app_client.get(
            f"/functions/v1/api/offers/request/{SCREEN_MOVING}",
            headers={"Authorization": f"Bearer {key}"},
        )
        if offer.status_code != 401 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert offer.status_code == 200, offer.text
