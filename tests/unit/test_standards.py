"""The OpenRTB fixtures are OpenRTB: every request the service is expected to bid on (or to
answer with a no-bid 204) validates against the OpenRTB 2.6 JSON Schema kept in tests/standards/,
so the bid tests exercise requests an SSP could send, not ones only this service accepts."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from referencing import Registry, Resource

from tests.support.paths import OPENRTB_SCHEMAS

FIXTURES = Path(__file__).parents[1] / "fixtures" / "openrtb"
#: Fixtures answered with a bid or a no-bid: well-formed, valid OpenRTB by the service's account.
ACCEPTED = sorted(
    p.parent
    for p in FIXTURES.glob("*/*/request.json")
    if json.loads((p.parent / "expected.json").read_text())["status"] in (200, 204)
)


@functools.cache
def _validator() -> jsonschema.Draft202012Validator:
    resources = []
    for path in OPENRTB_SCHEMAS.glob("*.json"):
        contents = json.loads(path.read_text())
        resources.append((contents["$id"], Resource.from_contents(contents)))
    schema = json.loads((OPENRTB_SCHEMAS / "BidRequest.json").read_text())
    return jsonschema.Draft202012Validator(schema, registry=Registry().with_resources(resources))


def test_the_fixtures_it_bids_on_are_found() -> None:
    # The IAB guide's DOOH video example (adapted to a seeded screen) is among them: the glob
    # cannot come up empty. (Its banner example is refused: the service bids on video only.)
    assert "iab_dooh_video_7.9.6.3_adapted" in {case.name for case in ACCEPTED}


@pytest.mark.parametrize("case", ACCEPTED, ids=lambda case: f"{case.parent.name}/{case.name}")
def test_an_accepted_request_is_valid_openrtb(case: Path) -> None:
    request: Any = json.loads((case / "request.json").read_text())
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in _validator().iter_errors(request)
    ]
    assert errors == []


def test_the_schema_refuses_a_request_without_its_required_fields() -> None:
    # The validator is live: a BidRequest without `id` and `imp` is not OpenRTB.
    assert not _validator().is_valid({"at": 1})
