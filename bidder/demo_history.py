"""A week of generated history for the demo inventory, so that the reports (docs/reports.md)
show something on a first `bidder dev`: offers on every demo screen its campaigns may play
on, accepted (most of them, with their playouts), rejected, expired, and OpenRTB bids billed
or lost, over the seven days before the day it is loaded.

Deterministic: the plays of a day depend only on that day (ids included), so loading the
history again, on the same day or a later one, writes nothing twice.
"""

from __future__ import annotations

import logging
import random
import uuid
from datetime import UTC, date, datetime, time, timedelta
from decimal import ROUND_HALF_UP, Decimal

from bidder.demo import CINEMA_PREMIERES, FIZZY_SUMMER, NORDIC_TRAILS, demo_document
from matching.inventory import Campaign, InventoryDocument, Screen
from store.errors import REDIS_DOWN
from store.history import Outcome, Play, write_history
from store.hot import connect
from store.postgres import Conn
from store.reconcile import reconcile

__all__ = ["HISTORY_DAYS", "demo_history", "load_demo_history"]

log = logging.getLogger("bidder.dev")

#: How many days before today the history covers.
HISTORY_DAYS = 7
_NAMESPACE = uuid.UUID("de000000-0000-4000-a000-00000000f00d")
_REASONS = ("creative does not fit the venue", "brand conflict", "content policy")
_OUTCOMES: tuple[tuple[Outcome, int], ...] = (
    ("accepted", 70),
    ("rejected", 8),
    ("expired", 8),
    ("billed", 10),
    ("lost", 4),
)


def _eligible(campaign: Campaign, screen: Screen) -> bool:
    targeting = campaign.targeting
    if targeting.publisher_ids and screen.publisher_id not in targeting.publisher_ids:
        return False
    return not (targeting.screen_types and screen.type not in targeting.screen_types)


def _price_micros(campaign: Campaign, audience: Decimal) -> int:
    """cpm x audience / 1000 cents, in micro-cents (half up)."""
    return int((campaign.cpm_cents * audience * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def _day_plays(doc: InventoryDocument, day: date) -> list[Play]:
    rng = random.Random(day.toordinal())
    advertisers = {c.id: c.advertiser_id for c in doc.campaigns}
    creatives = {c.campaign_id: c.id for c in reversed(doc.creatives)}
    rates = {p.id: p.commission_rate for p in doc.publishers}
    codes = {(b.advertiser_id, b.publisher_id): b.code for b in doc.billing_codes}
    outcomes = [name for name, _ in _OUTCOMES]
    weights = [weight for _, weight in _OUTCOMES]
    plays: list[Play] = []
    campaigns = [
        c for c in doc.campaigns if c.id in (FIZZY_SUMMER, NORDIC_TRAILS, CINEMA_PREMIERES)
    ]
    for campaign in campaigns:
        for screen in doc.screens:
            if not _eligible(campaign, screen):
                continue
            for _ in range(rng.randint(3, 9)):
                n = len(plays)
                outcome = rng.choices(outcomes, weights)[0]
                openrtb = outcome in ("billed", "lost")
                audience = (
                    Decimal(rng.randint(50, 400)) / 2 if openrtb else screen.audience_per_play
                )
                start = datetime.combine(day, time(6), tzinfo=UTC)
                at = start + timedelta(seconds=rng.randint(0, 17 * 3600))
                plays.append(
                    Play(
                        offer_id=str(uuid.uuid5(_NAMESPACE, f"{day.isoformat()}/{n}")),
                        channel="openrtb" if openrtb else "core",
                        outcome=outcome,
                        publisher_id=screen.publisher_id,
                        screen_id=screen.id,
                        campaign_id=campaign.id,
                        creative_id=creatives[campaign.id],
                        advertiser_id=advertisers[campaign.id],
                        price_micros=_price_micros(campaign, audience),
                        at=at,
                        commission_rate=rates[screen.publisher_id],
                        audience=audience if openrtb else None,
                        billing_code=codes.get((advertisers[campaign.id], screen.publisher_id)),
                        rejection_reason=rng.choice(_REASONS) if outcome == "rejected" else None,
                        played_at=at + timedelta(seconds=rng.randint(5, 90))
                        if outcome == "accepted" and rng.random() < 0.9
                        else None,
                        impression=outcome == "billed",
                    )
                )
    return plays


def demo_history(today: date) -> list[Play]:
    """The plays of the `HISTORY_DAYS` days before `today` (UTC days)."""
    doc = demo_document()
    return [
        play
        for n in range(HISTORY_DAYS, 0, -1)
        for play in _day_plays(doc, today - timedelta(days=n))
    ]


async def load_demo_history(conn: Conn, redis_url: str, today: date) -> int:
    """Write the demo's history, then bring the Redis budget counters to the billing records
    it added (as `bidder reconcile --repair` does), so every campaign still balances. Without
    Redis the history stays written and `bidder reconcile --repair` balances it later."""
    written = await write_history(conn, demo_history(today))
    redis = connect(redis_url, timeout=2.0)
    try:
        await reconcile(redis, conn, repair=True, settle_seconds=0.05)
    except REDIS_DOWN as exc:
        log.warning("demo history: Redis budgets not reconciled (%s)", exc)
    finally:
        await redis.aclose()
    return written
