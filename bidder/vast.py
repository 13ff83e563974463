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
from typing import ClassVar
from xml.sax.saxutils import escape, quoteattr

from bidder.settings import Settings
from bidder.signing import SIGNATURE_PARAM, signer, url_value
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


class _Signing:
    """What every tracking URL of a process shares: the base URL, the signed path, the signer."""

    __slots__ = ("base", "path", "signer")
    # Settings are frozen and a worker has one: its _Signing is kept beside it.
    _last: ClassVar[tuple[Settings, _Signing] | None] = None

    def __init__(self, settings: Settings) -> None:
        self.base = settings.tracking_base_url
        self.path = settings.tracking_path
        self.signer = signer(settings.signing_secret)

    @classmethod
    def of(cls, settings: Settings) -> _Signing:
        last = cls._last
        if last is None or last[0] is not settings:
            last = cls._last = (settings, cls(settings))
        return last[1]


def _event_parts(event: str) -> tuple[str, bytes]:
    """(the event as a query value, the event as it ends its line of the signed message)."""
    return url_value(event), event.encode()


_EVENT_PARTS = {event: _event_parts(event) for event in TRACKING_EVENTS}
_OPENRTB_QUERY = "".join(f"&{name}={macro}" for name, macro in OPENRTB_MACROS)


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
    """The tracking URLs of one offer. The URLs differ only in `event`, so the rest is built
    once: the query around it, and the signed message before and after it (the HMAC of what
    comes before is computed once and continued per event). Each URL then costs the end of
    one HMAC and one string.

    Signed message (signing.message): path, offer_id, event, pub, scr, ts, one per line.
    Query order: offer_id, event, ts, pub, scr, token, then the OpenRTB macros."""

    __slots__ = ("_end", "_middle", "_rest", "_signer", "_start", "_started")

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
        shared = _Signing.of(settings)
        # The decimal text of an int: digits and "-", nothing to quote.
        ts = str(now_ms)
        self._signer = shared.signer
        self._started = shared.signer.started(
            f"{shared.path}\noffer_id={offer_id}\nevent=".encode()
        )
        self._rest = f"\npub={publisher_id}\nscr={screen_id}\nts={ts}".encode()
        self._start = f"{shared.base}?offer_id={url_value(offer_id)}&event="
        self._middle = (
            f"&ts={ts}&pub={url_value(publisher_id)}&scr={url_value(screen_id)}&{SIGNATURE_PARAM}="
        )
        self._end = _OPENRTB_QUERY if openrtb else ""

    def __call__(self, event: str) -> str:
        quoted, signed = _EVENT_PARTS.get(event) or _event_parts(event)
        # The token is URL-safe base64 already: nothing in it needs quoting.
        token = self._signer.finish(self._started, signed + self._rest)
        return f"{self._start}{quoted}{self._middle}{token}{self._end}"


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
