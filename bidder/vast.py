"""VAST 4.0 documents for both interfaces (Core `vast=true` and the OpenRTB `adm`), and the
signed tracking URLs they carry.

The document follows the contract's element list and decisions 6a: valid against the IAB VAST
4.0 schema except for `<Expires>`, which the contract demands and which is emitted the VAST 4.1
way (integer seconds until expiry) right after `Creatives`. Element order follows the 4.0 XSD,
whose `InLine` sequence puts `AdSystem`, `Extensions` and `Impression` before `AdTitle`.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from urllib.parse import quote
from xml.sax.saxutils import escape, quoteattr

from bidder.settings import Settings
from bidder.signing import SIGNATURE_PARAM, sign
from matching.money import plain

VAST_NAMESPACE = "http://www.iab.com/VAST"
AD_SYSTEM = "dooh-bidder"
EXTENSION_TYPE = "dooh-bidder"

IMPRESSION_EVENT = "impression"
# VAST 4.0 `Tracking@event` names, in play order.
LINEAR_EVENTS = ("start", "firstQuartile", "midpoint", "thirdQuartile", "complete")
TRACKING_EVENTS = (IMPRESSION_EVENT, *LINEAR_EVENTS)
# Parameters covered by the tracking signature; `price` and `aud` are SSP macros, left unsigned.
TRACKING_SIGNED = ("offer_id", "event", "pub", "scr", "ts")
OPENRTB_MACROS = (("price", "${AUCTION_PRICE}"), ("aud", "${TOTAL_IMP}"))


@dataclass(frozen=True)
class VastAd:
    """Everything one VAST document says about one offer or bid."""

    offer_id: str
    ad_title: str
    advertiser: str
    advertiser_domain: str
    asset_url: str
    mime_type: str
    width: int
    height: int
    duration_seconds: int
    bid_price_cents: Decimal
    billing_code: str | None
    expires_in_seconds: int
    creative_id: str
    impression_url: str
    tracking: dict[str, str]  # VAST 4.0 event name -> signed URL


def tracking_url(
    settings: Settings,
    offer_id: str,
    event: str,
    publisher_id: str,
    screen_id: str,
    now_ms: int,
    *,
    openrtb: bool,
) -> str:
    """One signed tracking URL. OpenRTB URLs also carry the `${AUCTION_PRICE}` and
    `${TOTAL_IMP}` macros, literally, for the SSP to substitute."""
    params = {
        "offer_id": offer_id,
        "event": event,
        "ts": str(now_ms),
        "pub": publisher_id,
        "scr": screen_id,
    }
    params[SIGNATURE_PARAM] = sign(
        settings.signing_secret, settings.tracking_path, params, TRACKING_SIGNED
    )
    query = [f"{name}={quote(value, safe='-_.~')}" for name, value in params.items()]
    if openrtb:
        query += [f"{name}={macro}" for name, macro in OPENRTB_MACROS]
    return f"{settings.tracking_base_url}?{'&'.join(query)}"


def tracking_urls(
    settings: Settings,
    offer_id: str,
    publisher_id: str,
    screen_id: str,
    now_ms: int,
    *,
    openrtb: bool,
) -> tuple[str, dict[str, str]]:
    """(impression URL, {VAST 4.0 linear event name: URL}) for one offer."""

    def url(event: str) -> str:
        return tracking_url(
            settings, offer_id, event, publisher_id, screen_id, now_ms, openrtb=openrtb
        )

    return url(IMPRESSION_EVENT), {event: url(event) for event in LINEAR_EVENTS}


def duration_hms(seconds: int) -> str:
    """`HH:MM:SS`, as VAST's `Duration` wants it."""
    seconds = max(seconds, 0)
    hours, rest = divmod(seconds, 3600)
    return f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"


def render_vast(ad: VastAd) -> str:
    """The VAST 4.0 document for one ad; every text and attribute value XML-escaped."""
    creative_id = f"{ad.offer_id}_creative"
    media_id = f"{ad.offer_id}_media"
    tracking = "".join(
        f"<Tracking event={quoteattr(event)}>{escape(url)}</Tracking>"
        for event, url in ad.tracking.items()
    )
    billing_code = "" if ad.billing_code is None else escape(ad.billing_code)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<VAST version="4.0" xmlns="{VAST_NAMESPACE}">'
        f"<Ad id={quoteattr(ad.offer_id)}>"
        "<InLine>"
        f"<AdSystem>{AD_SYSTEM}</AdSystem>"
        f"<Extensions><Extension type={quoteattr(EXTENSION_TYPE)}>"
        f"<OfferId>{escape(ad.offer_id)}</OfferId>"
        f"<BidPriceCents>{plain(ad.bid_price_cents)}</BidPriceCents>"
        f"<BillingCode>{billing_code}</BillingCode>"
        f"<AdvertiserDomain>{escape(ad.advertiser_domain)}</AdvertiserDomain>"
        "</Extension></Extensions>"
        f"<Impression id={quoteattr(ad.offer_id)}>{escape(ad.impression_url)}</Impression>"
        f"<AdTitle>{escape(ad.ad_title)}</AdTitle>"
        f"<Advertiser>{escape(ad.advertiser)}</Advertiser>"
        "<Creatives>"
        f'<Creative id={quoteattr(creative_id)} sequence="1">'
        f'<UniversalAdId idRegistry="unknown" idValue={quoteattr(ad.creative_id)}>'
        f"{escape(ad.creative_id)}</UniversalAdId>"
        "<Linear>"
        f"<TrackingEvents>{tracking}</TrackingEvents>"
        f"<Duration>{duration_hms(ad.duration_seconds)}</Duration>"
        "<MediaFiles>"
        f'<MediaFile id={quoteattr(media_id)} delivery="progressive" '
        f'type={quoteattr(ad.mime_type)} width="{int(ad.width)}" height="{int(ad.height)}" '
        f'scalable="true" maintainAspectRatio="true">{escape(ad.asset_url)}</MediaFile>'
        "</MediaFiles>"
        "</Linear>"
        "</Creative>"
        "</Creatives>"
        f"<Expires>{max(int(ad.expires_in_seconds), 0)}</Expires>"
        "</InLine>"
        "</Ad>"
        "</VAST>"
    )
