"""GET /functions/v1/openrtb-2-6/openapi.json: a valid OpenAPI 3.0 document describing exactly
the bid and loss endpoints; schemathesis finds no 5xx and no answer that contradicts it."""

from __future__ import annotations

import asyncio
from typing import Any

import hypothesis
import schemathesis
from hypothesis import HealthCheck, given
from hypothesis import strategies as st
from litestar.testing import TestClient
from openapi_spec_validator import validate
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import ignored_auth

from bidder.http.app import create_app
from bidder.settings import Settings
from tests.support import factories as f
from tests.support.openrtb import MIGRATION_GUIDE, queue_kept
from tests.support.servers import ServerUrls

OPENAPI = "/functions/v1/openrtb-2-6/openapi.json"
PREFIX = "/functions/v1/openrtb-2-6"


def _seed(settings: Settings) -> str:
    async def run() -> str:
        await f.seed(settings.postgres.url, f.basic_document())
        return await f.make_key(settings.postgres.url)

    return asyncio.run(run())


def test_openapi_document_is_valid_and_describes_exactly_the_interface(
    servers: ServerUrls, clean: None
) -> None:
    settings = queue_kept(servers)
    key = _seed(settings)
    with TestClient(create_app(settings)) as client:
        response = client.get(OPENAPI, headers={"Authorization": f"Bearer {key}"})
        # "All endpoints need the Authorization header" (contract); only the loss notice is
        # exempt, by its signature.
        for headers in ({}, {"Authorization": "Bearer dk_stg_not-a-key"}):
            refused = client.get(OPENAPI, headers=headers)
            assert refused.status_code == 401, refused.text
            assert refused.json()["error"] == "INVALID_API_KEY"
            assert refused.headers["Deprecation"] == "true"
    assert response.status_code == 200
    assert response.headers["Deprecation"] == "true"
    assert response.headers["Link"] == f'<{MIGRATION_GUIDE}>; rel="deprecation"'
    document: dict[str, Any] = response.json()
    validate(document)
    assert document["openapi"].startswith("3.0")
    assert set(document["paths"]) == {
        f"{PREFIX}/bid",
        f"{PREFIX}/",
        f"{PREFIX}/loss/{{offer_id}}",
        OPENAPI,
    }
    assert set(document["paths"][OPENAPI]["get"]["responses"]) == {"200", "401", "503"}
    assert set(document["paths"][f"{PREFIX}/loss/{{offer_id}}"]) == {"get", "post"}
    # The loss notice's 503 says when to retry (Retry-After: 5), and a POST body may be text.
    loss = document["paths"][f"{PREFIX}/loss/{{offer_id}}"]
    for method in ("get", "post"):
        assert "Retry-After" in loss[method]["responses"]["503"]["headers"]
    assert "*/*" in loss["post"]["requestBody"]["content"]
    bid = document["paths"][f"{PREFIX}/bid"]["post"]
    assert set(bid["responses"]) >= {"200", "204", "400", "401"}
    assert "per-play price in EUR" in bid["description"]
    # Currencies as the bridge reads them (docs/api-openrtb.md: `cur` must list EUR, a deal's
    # `bidfloorcur` is converted with the operator's rate), as the request schema says too.
    assert "exchange rate" in bid["description"]
    assert "must list EUR" in bid["description"]
    assert "not read" not in bid["description"]
    order = [
        bid["description"].index(code)
        for code in (
            "INVALID_REQUEST",
            "MULTI_IMP_NOT_SUPPORTED",
            "NOT_FIXED_PRICE",
            "NO_EXTERNAL_SCREEN_ID",
            "NO_VIDEO_OBJECT",
            "NO_RESOLUTION",
            "NO_PMP_DEALS",
            "NO_TOTAL_AUDIENCE",
        )
    ]
    assert order == sorted(order)
    loss = document["paths"][f"{PREFIX}/loss/{{offer_id}}"]["get"]
    assert set(loss["responses"]) == {"204", "400", "403", "413", "414", "503"}


def test_schemathesis_finds_no_5xx_and_no_contradiction(servers: ServerUrls, clean: None) -> None:
    settings = queue_kept(servers)
    key = _seed(settings)
    with TestClient(create_app(settings), base_url="http://testserver.local") as client:
        auth = {"Authorization": f"Bearer {key}"}
        schema = schemathesis.openapi.from_dict(client.get(OPENAPI, headers=auth).json())
        operations = list(schema.get_all_operations())
        assert all(isinstance(result, Ok) for result in operations), operations
        strategies = [result.ok().as_strategy() for result in operations if isinstance(result, Ok)]

        @hypothesis.settings(
            max_examples=60,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
        @given(case=st.one_of(*strategies))
        def check(case: Any) -> None:
            kwargs = case.as_transport_kwargs(headers=auth)
            if not kwargs.get("cookies"):
                kwargs.pop("cookies", None)
            if isinstance(kwargs.get("data"), bytes | str):  # requests-style raw body
                kwargs["content"] = kwargs.pop("data")
            response = client.request(**kwargs)
            assert response.status_code < 500, response.text
            # ignored_auth takes the key passed here for one it generated, and would replay the
            # case through its own transport, which cannot reach this in-process app. The 401
            # for a missing or bad key is tested in test_openrtb_bid.
            case.validate_response(response, excluded_checks=[ignored_auth])

        check()
