"""POST /bid: authenticate, validate, find the screen, make a reserved bid, answer.

Outcomes (contract, "Response outcomes"): a bid is 200 with a BidResponse; no match, minimum not
met or MIME type not allowed is 204; a resolution mismatch is 200 `nbr` 0; Redis failing is 200
`nbr` 1 at once.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from bidder.auth import authenticate
from bidder.errors import BadRequest
from bidder.http.asgi import Answer, HttpCall, is_json
from bidder.offers import MadeOffer, make_offer
from bidder.openrtb._loss import loss_url
from bidder.openrtb._request import BidAsk, parse_bid_request, request_id_of
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
from bidder.vast import match_vast
from matching.engine import NoMatch, VideoSlot
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
    if screen is None:
        rt.metrics.count_no_bid("unknown_screen")
        return no_content(settings)
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


async def _make_bid(
    rt: Runtime, snapshot: Snapshot, screen: ScreenInfo, ask: BidAsk, now: datetime
) -> MadeOffer | NoMatch:
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
        ttl_seconds=rt.settings.offers.ttl_seconds,
        audience=ask.audience,
        min_price_micros=openrtb_min_bid_micros(ask.bidfloor, ask.floor_audience),
        slot=VideoSlot(ask.width, ask.height, ask.mimes),
        extra_fields=fields,
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
    )
