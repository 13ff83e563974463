"""POST /bid: authenticate, validate, find the screen, make a reserved bid, answer.

Outcomes (contract, "Response outcomes"): a bid is 200 with a BidResponse; no match, minimum not
met or MIME type not allowed is 204; a resolution mismatch is 200 `nbr` 0; Redis failing is 200
`nbr` 1 at once.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal

import msgspec

from bidder.auth import authenticate
from bidder.errors import BadRequest
from bidder.http.asgi import Answer, HttpCall, is_json
from bidder.offers import MadeOffer, make_offer, test_offer_id
from bidder.openrtb._loss import loss_url
from bidder.openrtb._request import (
    EUR,
    BidAsk,
    location_of,
    parse_bid_request,
    request_id_of,
    venue_types_of,
)
from bidder.openrtb._response import (
    NBR_TECHNICAL,
    NBR_UNKNOWN,
    Bid,
    bid_response,
    new_uuid,
    no_bid,
    no_content,
)
from bidder.runtime import Runtime, utcnow
from bidder.settings import Settings
from bidder.vast import match_vast
from matching.engine import Blocks, NoMatch, VideoSlot, blocks_of, select
from matching.money import eur_text, openrtb_min_bid_micros
from matching.snapshot import ScreenInfo, Snapshot
from store.errors import REDIS_DOWN
from store.hot.ids import epoch_ms

#: Largest BidRequest body accepted (413 above it).
MAX_BID_BYTES = 1_000_000
# Engine no-match reasons answered 200 `nbr` 0; every other reason is a 204.
_NBR_REASONS = frozenset({"resolution_mismatch"})


async def handle_bid(rt: Runtime, call: HttpCall, _path_param: str = "") -> Answer:
    settings = rt.settings
    snapshot = rt.inventory.snapshot
    if snapshot is None:  # starting up: keys and screens are not known yet
        body = await call.body(MAX_BID_BYTES)
        rt.metrics.count_no_bid("technical")
        return no_bid(settings, request_id_of(body), NBR_TECHNICAL)
    now = utcnow()
    # The key before the body: a bad key is a 401 at once, also while its body is still on
    # its way (or never comes: it waited for the 408).
    key = authenticate(
        call.header(b"authorization"),
        snapshot,
        settings.server.key_prefix,
        now,
        code="INVALID_API_KEY",
    )
    rt.rate_limits.take(key.key_id, snapshot.publishers.get(key.publisher_id))
    body = await call.body(MAX_BID_BYTES)
    if not is_json(call.header(b"content-type")):
        raise BadRequest("Content-Type must be application/json")
    ask = parse_bid_request(body)
    screen = snapshot.screens_by_external_id.get((key.publisher_id, ask.tagid))
    refusal = "unknown_screen" if screen is None else _refusal(ask, snapshot, settings, now)
    if refusal is not None or screen is None:
        rt.metrics.count_no_bid(refusal or "unknown_screen")
        return no_content(settings)
    screen = placed(screen, ask, snapshot)
    try:
        made = await _make_bid(rt, snapshot, screen, ask, now)
    except REDIS_DOWN:
        rt.metrics.count_no_bid("technical")
        return no_bid(settings, ask.request_id, NBR_TECHNICAL)
    if isinstance(made, NoMatch):
        rt.metrics.count_no_bid(made.reason)
        if made.reason in _NBR_REASONS:
            return no_bid(settings, ask.request_id, NBR_UNKNOWN)
        return no_content(settings)
    rt.metrics.bids.inc()
    return bid_response(settings, ask.request_id, _bid(rt, snapshot, screen, ask, made, now))


def _refusal(ask: BidAsk, snapshot: Snapshot, settings: Settings, now: datetime) -> str | None:
    """Why a valid request gets no bid before any campaign is looked at (the no-bid metric's
    reason), or None: a `cur` without EUR, a floor in a currency without a fresh exchange rate,
    or a block list the bridge cannot read (ignoring it could put a blocked advertiser on the
    screen)."""
    if not ask.takes_eur:
        return "currency_not_accepted"
    if ask.floor_currency != EUR and _rate(ask, snapshot, settings, now) is None:
        return "floor_currency"
    if ask.blocked_domains is None or ask.blocked_categories is None:
        return "blocks_unreadable"
    return None


def _rate(ask: BidAsk, snapshot: Snapshot, settings: Settings, now: datetime) -> Decimal | None:
    """Units of the floor's currency one euro buys, from the operator's rates: None for EUR,
    for a currency without a rate, and for a rate older than EXCHANGE_RATE_MAX_AGE_DAYS."""
    rate = snapshot.exchange_rates.get(ask.floor_currency)
    if rate is None or (now.date() - rate.as_of).days > settings.offers.exchange_rate_max_age_days:
        return None
    return rate.units_per_eur


def placed(screen: ScreenInfo, ask: BidAsk, snapshot: Snapshot) -> ScreenInfo:
    """The screen as targeting sees it for this request: its own venue type and location win;
    where it has none, the request's `dooh` venue types and `device.geo` stand in. They are
    read only when a campaign targets venues or places (`Snapshot.targets_venues`,
    `targets_places`): otherwise nothing reads them."""
    venues = location = None
    if snapshot.targets_venues and not screen.venues:
        venues = venue_types_of(ask) or None
    if snapshot.targets_places and screen.location is None:
        location = location_of(ask)
    if venues is None and location is None:
        return screen
    return replace(
        screen,
        venues=venues if venues is not None else screen.venues,
        location=location if location is not None else screen.location,
    )


def _blocks(ask: BidAsk) -> Blocks | None:
    if not ask.blocked_domains and not ask.blocked_categories:
        return None
    return blocks_of(ask.blocked_domains or (), ask.blocked_categories or (), ask.cattax)


def _ttl_seconds(rt: Runtime, ask: BidAsk) -> int:
    """The offer's lifetime: `imp.exp` when the SSP waits less than OFFER_TTL_SECONDS, else
    the configured TTL."""
    ttl = rt.settings.offers.ttl_seconds
    return ttl if ask.exp_seconds is None else min(ttl, ask.exp_seconds)


async def _make_bid(
    rt: Runtime, snapshot: Snapshot, screen: ScreenInfo, ask: BidAsk, now: datetime
) -> MadeOffer | NoMatch:
    rate = None if ask.floor_currency == EUR else _rate(ask, snapshot, rt.settings, now)
    min_price_micros = openrtb_min_bid_micros(ask.bidfloor, ask.floor_audience, rate)
    slot = VideoSlot(ask.width, ask.height, ask.mimes)
    ttl_seconds = _ttl_seconds(rt, ask)
    if ask.test:
        # Test traffic: the match a live request would get, under an offer id that marks it
        # as test inside every signed URL; nothing is reserved or stored.
        found = select(
            snapshot,
            screen,
            now,
            rt.budgets.figures,
            audience=ask.audience,
            min_price_micros=min_price_micros,
            slot=slot,
            blocks=_blocks(ask),
        )
        if isinstance(found, NoMatch):
            return found
        return MadeOffer(test_offer_id(), found, now + timedelta(seconds=ttl_seconds))
    fields = {
        "auction_id": ask.request_id,
        "imp_id": ask.imp_id,
        "pmp_deal_id": ask.deal_id,
        "audience": str(ask.audience),
    }
    return await make_offer(
        rt,
        snapshot,
        screen,
        now,
        channel="openrtb",
        ttl_seconds=ttl_seconds,
        audience=ask.audience,
        min_price_micros=min_price_micros,
        slot=slot,
        extra_fields=fields,
        blocks=_blocks(ask),
    )


def _bid(
    rt: Runtime,
    snapshot: Snapshot,
    screen: ScreenInfo,
    ask: BidAsk,
    made: MadeOffer,
    now: datetime,
) -> Bid:
    settings = rt.settings
    offer_id = made.offer_id
    campaign, creative = made.match.campaign, made.match.creative
    advertiser = snapshot.advertisers.get(campaign.advertiser_id)
    domain = advertiser.domain if advertiser is not None else ""
    now_ms = epoch_ms(now)
    adm = match_vast(
        settings,
        snapshot,
        offer_id,
        made.match,
        screen,
        billing_code=snapshot.billing_code(campaign.advertiser_id, screen.publisher_id),
        expires_in_seconds=max(int((made.expires_at - now).total_seconds()), 0),
        now_ms=now_ms,
        openrtb=True,
    )
    return Bid(
        id=new_uuid(),
        impid=ask.imp_id,
        price=msgspec.Raw(eur_text(made.match.price_micros).encode()),
        adid=offer_id,
        cid=offer_id,
        crid=offer_id,
        adm=adm,
        lurl=loss_url(settings, offer_id, screen.publisher_id, screen.id, now_ms),
        adomain=[domain] if domain else [],
        dealid=ask.deal_id,
        w=creative.width,
        h=creative.height,
        cat=list(campaign.categories) if campaign.categories else None,
        cattax=campaign.cattax if campaign.categories else None,
    )
