"""GET /docs/openapi-core.json and /docs/openapi-admin.json: valid OpenAPI 3.1 documents of
exactly the Core API's and the admin API's operations; real answers of every operation match
them; schemathesis finds no 5xx and no answer that contradicts them."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck, given
from litestar.testing import TestClient
from openapi_spec_validator import validate
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import ignored_auth, positive_data_acceptance

from bidder.demo import EXAMPLE_PUBLISHER, EXAMPLE_SCREEN, FIZZY_SUMMER, demo_document, demo_id
from bidder.http.app import create_app
from bidder.settings import Settings
from tests.support import factories as f
from tests.support.servers import ADMIN_TOKEN, ServerUrls, make_settings

CORE = "/docs/openapi-core.json"
ADMIN = "/docs/openapi-admin.json"
API = "/functions/v1/api"
#: Examples per operation, and the most the fuzzing of one document may take.
MAX_EXAMPLES = 25
BUDGET_SECONDS = 60
ADMIN_AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
#: ignored_auth would replay a case through its own transport, which cannot reach this
#: in-process app (the 401s are checked below and in each API's tests). positive_data_acceptance
#: expects every request of the schema's types to succeed, but the documented rules refuse
#: many of them with a documented 4xx: a minimum no campaign pays (422), a time zone the zone
#: database lacks or a blank name (400). Every other check runs, the status code, content type,
#: header and body conformance among them.
EXCLUDED = [ignored_auth, positive_data_acceptance]

CORE_OPERATIONS = {
    (f"{API}/offers/request/{{screen_id}}", "get"),
    (f"{API}/offers/request/external-id/{{external_id}}", "get"),
    (f"{API}/offers/response/{{offer_id}}", "post"),
    (f"{API}/playout/confirm/{{deal_id}}", "post"),
    (f"{API}/screens", "get"),
    (f"{API}/screens", "post"),
    (f"{API}/screens/{{screen_id}}", "get"),
    (f"{API}/screens/{{screen_id}}", "patch"),
    (f"{API}/screens/{{screen_id}}", "delete"),
    (f"{API}/reports/earnings", "get"),
}
ADMIN_OPERATIONS = {
    ("/admin/v1/inventory", "get"),
    ("/admin/v1/inventory", "put"),
    ("/admin/v1/publishers/{publisher_id}/api-keys", "post"),
    ("/admin/v1/api-keys/{key_id}", "delete"),
    ("/admin/v1/campaigns/{campaign_id}", "get"),
    ("/admin/v1/campaigns/{campaign_id}/budget", "post"),
    ("/admin/v1/offers/{offer_id}", "get"),
    ("/admin/v1/deals/{deal_id}", "get"),
    ("/admin/v1/reports/delivery", "get"),
    *(
        (f"/admin/v1/{name}", "get")
        for name in (
            "offers",
            "deals",
            "billing-records",
            "playouts",
            "api-keys",
            "screens",
            "campaigns",
        )
    ),
    ("/admin/v1/campaigns/{campaign_id}", "patch"),
    ("/admin/v1/campaigns/{campaign_id}/pause", "post"),
    ("/admin/v1/campaigns/{campaign_id}/resume", "post"),
    ("/admin/v1/screens/{screen_id}/deactivate", "post"),
    ("/admin/v1/creatives/{creative_id}/approve", "post"),
    ("/admin/v1/creatives/{creative_id}/reject", "post"),
}
_METHODS = {"get", "put", "post", "patch", "delete"}


def _prepare(servers: ServerUrls) -> tuple[Settings, str]:
    """The demo inventory and a key of its publisher."""
    settings = make_settings(servers)

    async def run() -> str:
        await f.seed(settings.postgres.url, demo_document())
        return await f.make_key(settings.postgres.url, EXAMPLE_PUBLISHER)

    return settings, asyncio.run(run())


def _operations(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (path, method)
        for path, item in document["paths"].items()
        for method in item
        if method in _METHODS
    }


def _ready(client: TestClient[Any], auth: dict[str, str]) -> None:
    deadline = time.monotonic() + 10
    while client.get(f"{API}/screens", headers=auth).status_code == 401:
        assert time.monotonic() < deadline, "the key never worked"
        time.sleep(0.1)


@pytest.mark.parametrize(("path", "expected"), [(CORE, CORE_OPERATIONS), (ADMIN, ADMIN_OPERATIONS)])
def test_documents_are_valid_openapi_31_of_exactly_the_interface(
    servers: ServerUrls, clean: None, path: str, expected: set[tuple[str, str]]
) -> None:
    settings, _ = _prepare(servers)
    with TestClient(create_app(settings)) as client:
        response = client.get(path)  # public, like the guides
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    document: dict[str, Any] = response.json()
    validate(document)
    assert document["openapi"].startswith("3.1")
    assert _operations(document) == expected
    for route, method in expected:
        operation = document["paths"][route][method]
        statuses = set(operation["responses"])
        # Every operation says how a bad key and an unreachable store answer, in `{error}`.
        assert {"401", "503"} <= statuses, (route, method)
        assert any(s.startswith("2") for s in statuses), (route, method)
        if "requestBody" in operation:
            assert "400" in statuses, (route, method)
    schemas = document["components"]["schemas"]
    assert schemas["Error"]["required"] == ["error"]
    # Money is a JSON number on the wire, never msgspec's decimal string.
    money = schemas["Offer" if path == CORE else "TopUp"]["properties"]
    assert money["bid_price_cents" if path == CORE else "add_cents"]["type"] == "number"


def _validate(schema: Any, path: str, method: str, response: Any) -> None:
    """`response` checked against the operation `path` `method`, with the path parameters of
    the URL it answered."""
    pattern = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(path))
    found = re.fullmatch(pattern, response.request.url.path)
    assert found is not None, (path, response.request.url)
    case = schema[path][method.upper()].Case(path_parameters=found.groupdict())
    case.validate_response(response, excluded_checks=EXCLUDED)


def test_real_answers_of_every_operation_match_the_documents(
    servers: ServerUrls, clean: None
) -> None:
    settings, key = _prepare(servers)
    auth = {"Authorization": f"Bearer {key}"}
    with TestClient(create_app(settings)) as client:
        core = schemathesis.openapi.from_dict(client.get(CORE).json())
        admin = schemathesis.openapi.from_dict(client.get(ADMIN).json())
        _ready(client, auth)
        seen: set[tuple[str, str]] = set()

        def check(schema: Any, route: str, method: str, response: Any) -> Any:
            assert response.status_code < 500, response.text
            _validate(schema, route, method, response)
            seen.add((route, method))
            return response.json() if response.content else None

        offer_route = f"{API}/offers/request/{{screen_id}}"
        url = f"{API}/offers/request/{EXAMPLE_SCREEN}"
        offer = check(core, offer_route, "get", client.get(url, headers=auth))
        check(core, offer_route, "get", client.get(f"{url}?min_bid_cents=500", headers=auth))
        external = f"{API}/offers/request/external-id/{{external_id}}"
        check(
            core,
            external,
            "get",
            client.get(f"{API}/offers/request/external-id/metro-xx-999", headers=auth),
        )
        check(
            core,
            external,
            "get",
            client.get(f"{API}/offers/request/external-id/metro-cs-001", headers=auth),
        )
        answer_route = f"{API}/offers/response/{{offer_id}}"
        accepted = check(
            core,
            answer_route,
            "post",
            client.post(
                f"{API}/offers/response/{offer['offer_id']}",
                headers=auth,
                json={"action": "accept", "accepted_price_cents": 2.5},
            ),
        )
        assert accepted["action"] == "accepted"
        confirm_route = f"{API}/playout/confirm/{{deal_id}}"
        confirm = f"{API}/playout/confirm/{accepted['deal_id']}"
        check(core, confirm_route, "post", client.post(confirm, headers=auth))
        check(core, confirm_route, "post", client.post(confirm, headers=auth, json={"x": 1}))
        check(
            core,
            confirm_route,
            "post",
            client.post(confirm, headers=auth, json={"completion_rate": 120}),
        )
        screens = f"{API}/screens"
        check(core, screens, "get", client.get(f"{screens}?limit=2", headers=auth))
        new = {"name": "Platform 9", "type": "moving", "width": 1920, "height": 1080}
        made = check(core, screens, "post", client.post(screens, headers=auth, json=new))
        check(core, screens, "post", client.post(screens, headers=auth, json={"width": -1}))
        one = f"{screens}/{{screen_id}}"
        mine = f"{screens}/{made['id']}"
        check(core, one, "get", client.get(mine, headers=auth))
        check(core, one, "patch", client.patch(mine, headers=auth, json={"audience_per_play": 4}))
        check(core, one, "patch", client.patch(mine, headers=auth, json={"width": "x"}))
        check(core, one, "delete", client.delete(mine, headers=auth))
        check(core, one, "get", client.get(f"{screens}/nope", headers=auth))
        check(core, screens, "get", client.get(screens))  # 401

        inventory = check(
            admin,
            "/admin/v1/inventory",
            "get",
            client.get("/admin/v1/inventory", headers=ADMIN_AUTH),
        )
        check(
            admin,
            "/admin/v1/inventory",
            "put",
            client.put("/admin/v1/inventory", headers=ADMIN_AUTH, json=inventory),
        )
        check(
            admin,
            "/admin/v1/inventory",
            "put",
            client.put("/admin/v1/inventory", headers=ADMIN_AUTH, json={"screens": [{"id": "x"}]}),
        )
        keys = "/admin/v1/publishers/{publisher_id}/api-keys"
        created = check(
            admin,
            keys,
            "post",
            client.post(f"/admin/v1/publishers/{EXAMPLE_PUBLISHER}/api-keys", headers=ADMIN_AUTH),
        )
        revoke = "/admin/v1/api-keys/{key_id}"
        check(
            admin,
            revoke,
            "delete",
            client.delete(f"/admin/v1/api-keys/{created['key_id']}", headers=ADMIN_AUTH),
        )
        campaign = f"/admin/v1/campaigns/{FIZZY_SUMMER}"
        check(
            admin,
            "/admin/v1/campaigns/{campaign_id}",
            "get",
            client.get(campaign, headers=ADMIN_AUTH),
        )
        budget = "/admin/v1/campaigns/{campaign_id}/budget"
        top_up = {**ADMIN_AUTH, "Idempotency-Key": "contract-test-1"}
        for amount in (10, 10, 11):  # done, replayed, 409
            check(
                admin,
                budget,
                "post",
                client.post(f"{campaign}/budget", headers=top_up, json={"add_cents": amount}),
            )
        check(
            admin,
            "/admin/v1/offers/{offer_id}",
            "get",
            client.get(f"/admin/v1/offers/{offer['offer_id']}", headers=ADMIN_AUTH),
        )
        deal = f"/admin/v1/deals/{accepted['deal_id']}"
        deadline = time.monotonic() + 10
        while client.get(deal, headers=ADMIN_AUTH).status_code == 404:  # the record writer
            assert time.monotonic() < deadline, "the deal was never written"
            time.sleep(0.1)
        shown = check(
            admin, "/admin/v1/deals/{deal_id}", "get", client.get(deal, headers=ADMIN_AUTH)
        )
        assert shown["billing"] is not None
        assert shown["playouts"]
        check(
            admin,
            "/admin/v1/deals/{deal_id}",
            "get",
            client.get("/admin/v1/deals/x", headers=ADMIN_AUTH),
        )
        earnings = f"{API}/reports/earnings"
        report = check(core, earnings, "get", client.get(earnings, headers=auth))
        assert report["totals"]["plays"] >= 1  # the deal above, billed today
        check(core, earnings, "get", client.get(f"{earnings}?group_by=x", headers=auth))
        as_csv = client.get(f"{earnings}?group_by=screen&format=csv", headers=auth)
        assert as_csv.status_code == 200
        _validate(core, earnings, "get", as_csv)
        delivery = "/admin/v1/reports/delivery"
        check(
            admin,
            delivery,
            "get",
            client.get(f"{delivery}?group_by=campaign,hour", headers=ADMIN_AUTH),
        )
        check(admin, delivery, "get", client.get(f"{delivery}?tz=Nowhere", headers=ADMIN_AUTH))
        lists = sorted(r for r, m in ADMIN_OPERATIONS if m == "get" and r.count("/") == 3)
        for route in lists:
            check(admin, route, "get", client.get(f"{route}?limit=1", headers=ADMIN_AUTH))
        check(
            admin,
            "/admin/v1/offers",
            "get",
            client.get("/admin/v1/offers?cursor=x", headers=ADMIN_AUTH),
        )
        one = "/admin/v1/campaigns/{campaign_id}"
        check(
            admin,
            one,
            "patch",
            client.patch(campaign, headers=ADMIN_AUTH, json={"status": "active"}),
        )
        check(admin, one, "patch", client.patch(campaign, headers=ADMIN_AUTH, json={"status": "x"}))
        nobody = "00000000-0000-4000-8000-000000000000"
        creative = demo_id(5, 1)
        for route, item in (
            ("/admin/v1/campaigns/{campaign_id}/resume", FIZZY_SUMMER),
            ("/admin/v1/campaigns/{campaign_id}/pause", nobody),
            ("/admin/v1/screens/{screen_id}/deactivate", nobody),
            ("/admin/v1/creatives/{creative_id}/approve", creative),
            ("/admin/v1/creatives/{creative_id}/reject", nobody),
        ):
            url = re.sub(r"\{\w+\}", item, route)
            check(admin, route, "post", client.post(url, headers=ADMIN_AUTH))
    assert seen == CORE_OPERATIONS | ADMIN_OPERATIONS


def _fuzz(client: TestClient[Any], path: str, auth: dict[str, str]) -> int:
    """Schemathesis over every operation of one document: every answer below 500 and as
    documented. The number of requests sent."""
    schema = schemathesis.openapi.from_dict(client.get(path).json())
    results = list(schema.get_all_operations())
    assert all(isinstance(result, Ok) for result in results), results
    sent = 0
    started = time.monotonic()
    for result in results:
        assert isinstance(result, Ok)
        operation = result.ok()

        @hypothesis.settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
        @given(case=operation.as_strategy())
        def check(case: Any) -> None:
            nonlocal sent
            kwargs = case.as_transport_kwargs(headers=auth)
            if not kwargs.get("cookies"):
                kwargs.pop("cookies", None)
            if isinstance(kwargs.get("data"), bytes | str):  # requests-style raw body
                kwargs["content"] = kwargs.pop("data")
            response = client.request(**kwargs)
            sent += 1
            assert response.status_code < 500, (kwargs, response.text)
            case.validate_response(response, excluded_checks=EXCLUDED)

        check()
    assert time.monotonic() - started < BUDGET_SECONDS
    return sent


def test_schemathesis_finds_no_5xx_and_no_contradiction(servers: ServerUrls, clean: None) -> None:
    settings, key = _prepare(servers)
    auth = {"Authorization": f"Bearer {key}"}
    with TestClient(create_app(settings), base_url="http://testserver.local") as client:
        _ready(client, auth)
        sent = _fuzz(client, CORE, auth) + _fuzz(client, ADMIN, ADMIN_AUTH)
    print(f"schemathesis: {sent} requests")
    assert sent >= len(CORE_OPERATIONS | ADMIN_OPERATIONS) * 5
