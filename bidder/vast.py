"""VAST 4.0 documents for both interfaces (Core `vast=true` and the OpenRTB `adm`), and the
signed tracking URLs they carry.

The document follows the contract's element list and decisions 6a: valid against the IAB VAST
4.0 schema except for `<Expires>`, which the contract demands and which is emitted the VAST 4.1
way (integer seconds until expiry) right after `Creatives`. Element order follows the 4.0 XSD,
whose `InLine` sequence puts `AdSystem`, `Extensions` and `Impression` before `AdTitle`.
"""

from __future__ import annotations

import re
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


def _url_value(value: str) -> str:
    return quote(value, safe="-_.~")


_QUOTED_EVENTS = {event: _url_value(event) for event in TRACKING_EVENTS}


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
    return _TrackingUrls(settings, offer_id, publisher_id, screen_id, now_ms, openrtb=openrtb)(
        event
    )


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
    url = _TrackingUrls(settings, offer_id, publisher_id, screen_id, now_ms, openrtb=openrtb)
    return url(IMPRESSION_EVENT), {event: url(event) for event in LINEAR_EVENTS}


class _TrackingUrls:
    """The tracking URLs of one offer: what the events share (base URL, quoted values, signed path,
    macros) is computed once, so each URL costs one signature and one string."""

    def __init__(
        self,
        settings: Settings,
        offer_id: str,
        publisher_id: str,
        screen_id: str,
        now_ms: int,
        *,
        openrtb: bool,
    ) -> None:
        self._secret = settings.signing_secret
        self._path = settings.tracking_path
        self._offer_id, self._publisher_id, self._screen_id = offer_id, publisher_id, screen_id
        self._ts = str(now_ms)
        self._start = f"{settings.tracking_base_url}?offer_id={_url_value(offer_id)}&event="
        # Query order: offer_id, event, ts, pub, scr, token, then the OpenRTB macros.
        self._middle = (
            f"&ts={_url_value(self._ts)}&pub={_url_value(publisher_id)}"
            f"&scr={_url_value(screen_id)}&{SIGNATURE_PARAM}="
        )
        self._end = "".join(f"&{name}={macro}" for name, macro in OPENRTB_MACROS) if openrtb else ""

    def __call__(self, event: str) -> str:
        values = {
            "offer_id": self._offer_id,
            "event": event,
            "pub": self._publisher_id,
            "scr": self._screen_id,
            "ts": self._ts,
        }
        # The token is URL-safe base64 already: nothing in it needs quoting.
        token = sign(self._secret, self._path, values, TRACKING_SIGNED)
        quoted_event = _QUOTED_EVENTS.get(event) or _url_value(event)
        return f"{self._start}{quoted_event}{self._middle}{token}{self._end}"


def duration_hms(seconds: int) -> str:
    """`HH:MM:SS`, as VAST's `Duration` wants it."""
    seconds = max(seconds, 0)
    hours, rest = divmod(seconds, 3600)
    return f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"


def _attr(value: str) -> str:
    """`quoteattr`, skipped for the usual value that holds nothing to escape (ids, MIME types)."""
    return quoteattr(value) if _ATTR_SPECIAL.search(value) else f'"{value}"'


_ATTR_SPECIAL = re.compile("[&<>\"'\n\r\t]")
_TRACKING_OPEN = {event: f"<Tracking event={_attr(event)}>" for event in LINEAR_EVENTS}


def _tracking_element(event: str, url: str) -> str:
    start = _TRACKING_OPEN.get(event) or f"<Tracking event={_attr(event)}>"
    return f"{start}{escape(url)}</Tracking>"


def render_vast(ad: VastAd) -> str:
    """The VAST 4.0 document for one ad; every text and attribute value XML-escaped."""
    offer_id = _attr(ad.offer_id)
    creative_id = _attr(f"{ad.offer_id}_creative")
    media_id = _attr(f"{ad.offer_id}_media")
    tracking = "".join(_tracking_element(event, url) for event, url in ad.tracking.items())
    billing_code = "" if ad.billing_code is None else escape(ad.billing_code)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<VAST version="4.0" xmlns="{VAST_NAMESPACE}">'
        f"<Ad id={offer_id}>"
        "<InLine>"
        f"<AdSystem>{AD_SYSTEM}</AdSystem>"
        f'<Extensions><Extension type="{EXTENSION_TYPE}">'
        f"<OfferId>{escape(ad.offer_id)}</OfferId>"
        f"<BidPriceCents>{plain(ad.bid_price_cents)}</BidPriceCents>"
        f"<BillingCode>{billing_code}</BillingCode>"
        f"<AdvertiserDomain>{escape(ad.advertiser_domain)}</AdvertiserDomain>"
        "</Extension></Extensions>"
        f"<Impression id={offer_id}>{escape(ad.impression_url)}</Impression>"
        f"<AdTitle>{escape(ad.ad_title)}</AdTitle>"
        f"<Advertiser>{escape(ad.advertiser)}</Advertiser>"
        "<Creatives>"
        f'<Creative id={creative_id} sequence="1">'
        f'<UniversalAdId idRegistry="unknown" idValue={_attr(ad.creative_id)}>'
        f"{escape(ad.creative_id)}</UniversalAdId>"
        "<Linear>"
        f"<TrackingEvents>{tracking}</TrackingEvents>"
        f"<Duration>{duration_hms(ad.duration_seconds)}</Duration>"
        "<MediaFiles>"
        f'<MediaFile id={media_id} delivery="progressive" '
        f'type={_attr(ad.mime_type)} width="{int(ad.width)}" height="{int(ad.height)}" '
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
