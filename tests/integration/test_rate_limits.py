"""Per-key rate limits on the public routes (docs/operations.md, "Per-key rate limits"): a key
past its publisher's token bucket gets 429 with `Retry-After` in its interface's error shape,
other keys are unaffected, and without a limit configured nothing is ever refused."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator

import pytest

from tests.support import factories as f
from tests.support.core import API, Live, live_app
from tests.support.openrtb import BID, assert_error, bid_request
from tests.support.servers import ServerUrls, make_settings

#: PUB's limit in these tests: a bucket of 2, refilled at one request every 2 seconds.
RATE, BURST = 0.5, 2
#: A request refused on an empty bucket waits for one whole token: 1 / RATE seconds.
RETRY_AFTER = str(math.ceil(1 / RATE))


async def _keys(live: Live, **publisher_fields: object) -> tuple[dict[str, str], ...]:
    """Seed the basic inventory with PUB's `publisher_fields`; headers of two keys of PUB's
    and one of PUB_OTHER's (which sets no limit)."""
    doc = f.basic_document(
        publishers=[f.publisher(**publisher_fields), f.publisher(id=f.PUB_OTHER, name="Mall")]
    )
    await f.seed(live.database_url, doc)
    keys = [
        await f.make_key(live.database_url),
        await f.make_key(live.database_url),
        await f.make_key(live.database_url, f.PUB_OTHER),
    ]
    await live.rt.inventory.reload()
    return tuple({"Authorization": f"Bearer {key}"} for key in keys)


@pytest.fixture
async def live(servers: ServerUrls, clean: None) -> AsyncIterator[Live]:
    async with live_app(make_settings(servers, RECORD_WRITER="0")) as running:
        yield running


def _offer_path(screen: str = f.SCREEN_MOVING) -> str:
    return f"{API}/offers/request/{screen}"


async def test_core_key_over_its_limit_gets_429_with_retry_after(live: Live) -> None:
    limited, sibling, other = await _keys(live, rate_limit_per_second=RATE, rate_limit_burst=BURST)
    for _ in range(BURST):
        assert (await live.client.get(_offer_path(), headers=limited)).status_code == 200
    refused = await live.client.get(_offer_path(), headers=limited)
    assert refused.status_code == 429, refused.text
    assert refused.headers["Retry-After"] == RETRY_AFTER
    assert set(refused.json()) == {"error"}  # the Core API's shape
    # Another key, of the same publisher or of another, has a bucket of its own.
    assert (await live.client.get(_offer_path(), headers=sibling)).status_code == 200
    other_screen = _offer_path(f.SCREEN_OTHER_PUB)
    for _ in range(10):
        assert (await live.client.get(other_screen, headers=other)).status_code != 429


async def test_openrtb_key_over_its_limit_gets_429_in_the_openrtb_shape(live: Live) -> None:
    limited, _, other = await _keys(live, rate_limit_per_second=RATE, rate_limit_burst=BURST)
    for _ in range(BURST):
        assert (await live.client.post(BID, json=bid_request(), headers=limited)).status_code in (
            200,
            204,
        )
    refused = await live.client.post(BID, json=bid_request(), headers=limited)
    assert_error(refused, 429, "RATE_LIMITED")
    assert refused.headers["Retry-After"] == RETRY_AFTER
    for _ in range(10):
        answer = await live.client.post(BID, json=bid_request(), headers=other)
        assert answer.status_code in (200, 204), answer.text


async def test_without_a_limit_nothing_is_refused(live: Live) -> None:
    limited, _, _ = await _keys(live)
    for _ in range(60):
        assert (await live.client.get(_offer_path(), headers=limited)).status_code == 200
        bid = await live.client.post(BID, json=bid_request(), headers=limited)
        assert bid.status_code in (200, 204), bid.text


async def test_fleet_default_applies_where_the_publisher_sets_none(
    servers: ServerUrls, clean: None
) -> None:
    settings = make_settings(servers, RECORD_WRITER="0", RATE_LIMIT_PER_SECOND="0.5")
    async with live_app(settings) as live:
        # PUB names no limit: the default's, with its default bucket of one second's worth
        # (at least one request). PUB_OTHER's own, more generous limit wins over the default.
        doc = f.basic_document(
            publishers=[
                f.publisher(),
                f.publisher(id=f.PUB_OTHER, name="Mall", rate_limit_per_second=1000.0),
            ]
        )
        await f.seed(live.database_url, doc)
        key = {"Authorization": f"Bearer {await f.make_key(live.database_url)}"}
        other = {"Authorization": f"Bearer {await f.make_key(live.database_url, f.PUB_OTHER)}"}
        await live.rt.inventory.reload()
        assert (await live.client.get(_offer_path(), headers=key)).status_code == 200
        refused = await live.client.get(_offer_path(), headers=key)
        assert refused.status_code == 429
        assert refused.headers["Retry-After"] == RETRY_AFTER
        for _ in range(10):
            answer = await live.client.get(_offer_path(f.SCREEN_OTHER_PUB), headers=other)
            assert answer.status_code == 200, answer.text
