"""The OpenRTB answers as sent (contract: BidResponse table, Versioning): ids are random
version-4 UUIDs, every answer carries the deprecation headers, a bid the notice in ext.platform."""

from __future__ import annotations

import json
import uuid

import msgspec

from bidder.deprecation import DEPRECATION_MESSAGE
from bidder.openrtb._response import Bid, bid_response, new_uuid, no_bid, no_content
from bidder.settings import (
    PostgresSettings,
    RedisSettings,
    SecretSettings,
    ServerSettings,
    Settings,
)

SETTINGS = Settings(
    server=ServerSettings(
        migration_guide_url="https://docs.example/migrate",
        documentation_url="https://docs.example/openrtb",
    ),
    secrets=SecretSettings(admin_token="a" * 32, signing_secrets=("s",)),
    postgres=PostgresSettings(url="postgresql://u@h/d"),
    redis=RedisSettings(url="redis://h"),
)
HEADERS = [
    (b"deprecation", b"true"),
    (b"link", b'<https://docs.example/migrate>; rel="deprecation"'),
    (b"x-openrtb-version", b"2.6"),
]


def test_new_uuid_is_a_random_version_4_uuid() -> None:
    ids = {new_uuid() for _ in range(2000)}
    assert len(ids) == 2000
    for text in ids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122


def test_a_bid_answer() -> None:
    bid = Bid(
        id="b-1",
        impid="imp-1",
        price=msgspec.Raw(b"1.1947"),
        adid="o",
        cid="o",
        crid="o",
        adm="<VAST/>",
        lurl="https://x/loss",
        adomain=["acme.example"],
        dealid="deal-7",
        w=1920,
        h=1080,
    )
    first = bid_response(SETTINGS, "auction-1", bid)
    second = bid_response(SETTINGS, "auction-1", bid)
    assert first.status == 200
    assert first.headers == [
        *HEADERS,
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(first.body)),
    ]
    assert first.headers is not second.headers
    body = json.loads(first.body)
    assert uuid.UUID(body.pop("bidid")).version == 4
    assert body == {
        "id": "auction-1",
        "seatbid": [
            {
                "bid": [
                    {
                        "id": "b-1",
                        "impid": "imp-1",
                        "price": 1.1947,
                        "adid": "o",
                        "cid": "o",
                        "crid": "o",
                        "adm": "<VAST/>",
                        "lurl": "https://x/loss",
                        "adomain": ["acme.example"],
                        "dealid": "deal-7",
                        "w": 1920,
                        "h": 1080,
                    }
                ]
            }
        ],
        "cur": "EUR",
        "ext": {
            "platform": {
                "deprecated": True,
                "deprecation_message": DEPRECATION_MESSAGE,
                "documentation": "https://docs.example/openrtb",
                "migration_guide": "https://docs.example/migrate",
            }
        },
    }
    assert json.loads(second.body)["bidid"] != json.loads(first.body)["bidid"]


def test_no_bid_and_no_content() -> None:
    answer = no_bid(SETTINGS, "auction-1", 1)
    assert json.loads(answer.body) == {"id": "auction-1", "seatbid": [], "nbr": 1, "cur": "EUR"}
    assert answer.headers[:3] == HEADERS
    empty = no_content(SETTINGS)
    assert (empty.status, empty.headers, empty.body) == (204, HEADERS, b"")
    empty.headers.append((b"x-request-id", b"1"))
    assert no_content(SETTINGS).headers == HEADERS
