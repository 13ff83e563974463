"""The `vast` field of a Core API offer (docs/contract.md#6a-vast-documents): the offer as a VAST
4.0 document whose tracking URLs are signed for this publisher and screen."""

from __future__ import annotations

from bidder.core import _demo
from bidder.core._common import Caller
from bidder.offers import MadeOffer
from bidder.vast import VastAd, match_vast, render_vast, tracking_urls
from matching.money import micros_to_cents
from matching.snapshot import ScreenInfo
from store.hot.ids import epoch_ms


def offer_vast(
    caller: Caller, screen: ScreenInfo, made: MadeOffer, billing_code: str | None, ttl: int
) -> str:
    return match_vast(
        caller.rt.settings,
        caller.snapshot,
        made.offer_id,
        made.match,
        screen,
        billing_code=billing_code,
        expires_in_seconds=ttl,
        now_ms=epoch_ms(caller.now),
        openrtb=False,
    )


def demo_vast(caller: Caller, screen_id: str) -> str:
    """The demo offer's VAST; its tracking URLs name an offer that does not exist, so a player
    calling them records nothing."""
    impression, tracking = tracking_urls(
        caller.rt.settings,
        _demo.DEMO_OFFER_ID,
        caller.publisher_id,
        screen_id,
        epoch_ms(caller.now),
        openrtb=False,
    )
    return render_vast(
        VastAd(
            offer_id=_demo.DEMO_OFFER_ID,
            ad_title=_demo.DEMO_AD_TITLE,
            advertiser=_demo.DEMO_ADVERTISER,
            advertiser_domain=_demo.DEMO_ADVERTISER_DOMAIN,
            asset_url=_demo.DEMO_ASSET_URL,
            mime_type=_demo.DEMO_ASSET_MIME,
            width=_demo.DEMO_ASSET_WIDTH,
            height=_demo.DEMO_ASSET_HEIGHT,
            duration_seconds=_demo.DEMO_ASSET_SECONDS,
            bid_price_cents=micros_to_cents(_demo.DEMO_PRICE_MICROS),
            billing_code=_demo.DEMO_BILLING_CODE,
            expires_in_seconds=_demo.DEMO_TTL_SECONDS,
            creative_id=f"{_demo.DEMO_OFFER_ID}_asset",
            impression_url=impression,
            tracking=tracking,
        )
    )
