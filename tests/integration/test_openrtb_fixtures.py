"""Table-driven bid fixtures: every folder under tests/fixtures/openrtb is one request and its
expected answer (see the README there)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.support import factories as f
from tests.support.core import Live, live_app
from tests.support.openrtb import (
    assert_deprecated,
    assert_error,
    post_bid,
    queue_kept,
    seeded,
    validate_bid_response,
)
from tests.support.servers import ServerUrls

FIXTURES = Path(__file__).parents[1] / "fixtures" / "openrtb"
CASES = sorted(p.parent for p in FIXTURES.glob("*/*/request.json"))


@pytest.fixture
async def live(servers: ServerUrls, clean: None) -> AsyncIterator[Live]:
    async with live_app(queue_kept(servers)) as running:
        yield running


def contains(actual: Any, expected: Any, where: str = "$") -> None:
    """`expected` is a subset of `actual`: objects by key, arrays item by item, numbers exactly."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: expected an object, got {actual!r}"
        for key, value in expected.items():
            assert key in actual, f"{where}.{key} missing"
            contains(actual[key], value, f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list), f"{where}: expected an array, got {actual!r}"
        assert len(actual) == len(expected), f"{where}: {len(actual)} items, not {len(expected)}"
        for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
            contains(a, e, f"{where}[{index}]")
    elif isinstance(expected, float | int) and not isinstance(expected, bool):
        assert Decimal(str(actual)) == Decimal(str(expected)), f"{where}: {actual} != {expected}"
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


@pytest.mark.parametrize("case", CASES, ids=[f"{p.parent.name}/{p.name}" for p in CASES])
async def test_fixture(live: Live, case: Path) -> None:
    headers = await seeded(
        live,
        campaigns=[f.campaign(cpm_cents=Decimal("1000"))],
        creatives=[
            f.creative(),
            f.creative(id=f.CREATIVE_IMAGE, url="https://cdn.example/summer.jpg", kind="image"),
            f.creative(id=f.uid(3, 5), url="https://cdn.example/small.mp4", width=960, height=480),
        ],
    )
    expected = json.loads((case / "expected.json").read_text())
    response = await post_bid(live, headers, (case / "request.json").read_bytes())

    assert response.status_code == expected["status"], response.text
    assert_deprecated(response)
    if "error" in expected:
        body = assert_error(response, expected["status"], expected["error"])
        contains(body["details"], expected.get("details", {}))
    elif expected["status"] == 204:
        assert response.content == b""
    else:
        body = response.json()
        validate_bid_response(body)
        contains(body, expected["body"])


def test_there_are_fixtures() -> None:
    assert len(CASES) > 40
    assert {p.parent.name for p in CASES} == {"exemplary", "real", "supplemental"}
