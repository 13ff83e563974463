"""Make an offer (Core) or a bid (OpenRTB): select the best match, then reserve its price.

One implementation for both interfaces. The engine picks from the worker's budget view; the
reservation script decides atomically. When it refuses (budget, daily budget or frequency cap
reached since the view was read), the campaign is excluded and the next best is tried.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import msgspec

from bidder.runtime import Runtime
from matching.engine import Blocks, Match, NoMatch, VideoSlot, select
from matching.snapshot import ScreenInfo, Snapshot
from store.hot import Refused, random_uuid

_MAX_ATTEMPTS = 4
#: How the id of a test offer (OpenRTB `test: 1`) begins. No stored offer's id does (they are
#: UUIDs), and the id is part of every signed URL of the offer (its tracking pixels, its loss
#: notice), so a URL cannot be made test, or live, without breaking its signature.
TEST_OFFER_PREFIX = "openrtb-test-"


def test_offer_id() -> str:
    """A new id for a test offer, which is never reserved nor stored."""
    return TEST_OFFER_PREFIX + random_uuid()


def is_test_offer(offer_id: str) -> bool:
    return offer_id.startswith(TEST_OFFER_PREFIX)


class MadeOffer(msgspec.Struct, frozen=True):
    offer_id: str
    match: Match
    expires_at: datetime


async def make_offer(
    rt: Runtime,
    snapshot: Snapshot,
    screen: ScreenInfo,
    now: datetime,
    *,
    channel: str,
    ttl_seconds: int,
    audience: Decimal | None = None,
    min_price_micros: int = 0,
    slot: VideoSlot | None = None,
    extra_fields: dict[str, str] | None = None,
    blocks: Blocks | None = None,
) -> MadeOffer | NoMatch:
    """The best eligible offer for `screen`, reserved and stored, or why there is none.

    Redis errors propagate: the caller turns them into its interface's "unavailable" answer.
    """
    excluded: set[str] = set()
    outcome: Match | NoMatch = NoMatch("no_eligible")
    expires_at = now + timedelta(seconds=ttl_seconds)
    for _ in range(_MAX_ATTEMPTS):
        outcome = select(
            snapshot,
            screen,
            now,
            rt.budgets.figures,
            audience=audience,
            min_price_micros=min_price_micros,
            slot=slot,
            exclude=excluded,
            blocks=blocks,
        )
        if isinstance(outcome, NoMatch):
            return outcome
        fields = {
            "channel": channel,
            "publisher": screen.publisher_id,
            "creative": outcome.creative.id,
            **(extra_fields or {}),
        }
        result = await rt.hot.reserve(
            outcome.campaign, outcome.price_micros, screen.id, now, expires_at, fields
        )
        if not isinstance(result, Refused):
            # The next request's tie-break ("the larger share of its budget left") sees this
            # reservation at once, not after the next refresh (up to a second later).
            rt.budgets.note(outcome.campaign.id, result.budget, result.shard)
            if result.home_budget is not None:  # a budget slice was granted more by the home
                rt.budgets.note(outcome.campaign.id, result.home_budget, outcome.campaign.shard)
            return MadeOffer(result.offer_id, outcome, expires_at)
        # A refusal says "does not fit now", which stays true until the next refresh.
        rt.budgets.note(outcome.campaign.id, result.budget, result.shard)
        excluded.add(outcome.campaign.id)
    # Several campaigns ran dry between two budget refreshes: answer as if none were eligible.
    return NoMatch("no_eligible")
