"""VAST 4.0 documents for both interfaces (Core `vast=true` and the OpenRTB `adm`), and the
signed tracking URLs they carry.

The document follows the contract's element list and docs/contract.md#6a-vast-documents: valid
against the IAB VAST 4.0 schema except for `<Expires>`, which the contract demands and which is
emitted the VAST 4.1 way (integer seconds until expiry) right after `Creatives`. Element order
follows the 4.0 XSD, whose `InLine` sequence puts `AdSystem`, `Extensions` and `Impression` before
`AdTitle`.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Iterable
from decimal import Decimal
from functools import lru_cache
from xml.sax.saxutils import quoteattr

import msgspec

from bidder.settings import PerSettings, Settings
from bidder.signing import SIGNATURE_PARAM, signer, url_value
from matching.engine import Match
from matching.inventory import Advertiser
from matching.money import cents_text, plain
from matching.snapshot import CampaignInfo, CreativeInfo, ScreenInfo, Snapshot

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
_OPENRTB_MACRO_NAMES = frozenset(name for name, _ in OPENRTB_MACROS)


def names_openrtb_macros(query_names: Iterable[str]) -> bool:
    """Whether a tracking pixel's query names the SSP's macros: only an OpenRTB bid's URL
    carries them, so they tell its pixel from a Core VAST's."""
    return any(name in _OPENRTB_MACRO_NAMES for name in query_names)


def macro_value(value: str | None) -> str | None:
    """The value an SSP put in for a macro, or None for an absent, empty or unsubstituted one
    (contract: "Unsubstituted macros are tolerated. The notice is stored without the value")."""
    if value is None:
        return None
    value = value.strip()
    if not value or "${" in value:
        return None
    return value


class VastAd(msgspec.Struct, frozen=True):
    """Everything one VAST document says about one offer or bid. A frozen Struct: made on
    every bid and offer, it costs a fifth of a frozen dataclass to build."""

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


def _text(value: str) -> str:
    """`xml.sax.saxutils.escape` (`&` first, then `>` and `<`) without its function call."""
    return value.replace("&", "&amp;").replace(">", "&gt;").replace("<", "&lt;")


class _Signing:
    """What every tracking URL of a process shares: the base URL, the signed path, the signer."""

    __slots__ = ("base", "base_text", "path", "signer")

    def __init__(self, settings: Settings) -> None:
        self.base = settings.server.tracking_base_url
        self.base_text = _text(self.base)
        self.path = settings.server.tracking_path
        self.signer = signer(settings.secrets.signing_secret)


_signing = PerSettings(_Signing)


def _event_parts(event: str) -> tuple[str, bytes]:
    """(the event as a query value, the event as it ends its line of the signed message)."""
    return url_value(event), event.encode()


_EVENT_PARTS = {event: _event_parts(event) for event in TRACKING_EVENTS}
_OPENRTB_QUERY = "".join(f"&{name}={macro}" for name, macro in OPENRTB_MACROS)
_OPENRTB_QUERY_TEXT = _text(_OPENRTB_QUERY)
# The XML text (`_text(url)`) of the tracking URLs made last, for render_vast, which follows
# tracking_urls on both paths: composed from parts escaped once per offer or per process, it
# costs less than escaping each whole URL. A lookup by the URL itself, so never stale.
_url_texts: dict[str, str] = {}


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

    __slots__ = (
        "_end",
        "_end_text",
        "_middle",
        "_middle_text",
        "_rest",
        "_signer",
        "_start",
        "_start_text",
        "_started",
    )

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
        shared = _signing(settings)
        # The decimal text of an int: digits and "-", nothing to quote.
        ts = str(now_ms)
        self._signer = shared.signer
        self._started = shared.signer.started(
            f"{shared.path}\noffer_id={offer_id}\nevent=".encode()
        )
        self._rest = f"\npub={publisher_id}\nscr={screen_id}\nts={ts}".encode()
        # Quoted values hold none of `&<>`: only the separators need escaping in the XML text.
        offer, pub, scr = url_value(offer_id), url_value(publisher_id), url_value(screen_id)
        self._start = f"{shared.base}?offer_id={offer}&event="
        self._start_text = f"{shared.base_text}?offer_id={offer}&amp;event="
        self._middle = f"&ts={ts}&pub={pub}&scr={scr}&{SIGNATURE_PARAM}="
        self._middle_text = f"&amp;ts={ts}&amp;pub={pub}&amp;scr={scr}&amp;{SIGNATURE_PARAM}="
        self._end = _OPENRTB_QUERY if openrtb else ""
        self._end_text = _OPENRTB_QUERY_TEXT if openrtb else ""
        _url_texts.clear()

    def __call__(self, event: str) -> str:
        quoted, signed = _EVENT_PARTS.get(event) or _event_parts(event)
        token = self.token(signed)
        url = f"{self._start}{quoted}{self._middle}{token}{self._end}"
        _url_texts[url] = f"{self._start_text}{quoted}{self._middle_text}{token}{self._end_text}"
        return url

    def token(self, signed_event: bytes) -> str:
        """The signature of the URL of one event (given as `_event_parts` ends its message).
        URL-safe base64: nothing in it needs quoting or escaping."""
        return self._signer.finish(self._started, signed_event + self._rest)

    def text(self, quoted_event: str, token: str) -> str:
        """The XML text of the URL of one event, from its quoted name and its token."""
        return f"{self._start_text}{quoted_event}{self._middle_text}{token}{self._end_text}"


def match_vast(
    settings: Settings,
    snapshot: Snapshot,
    offer_id: str,
    match: Match,
    screen: ScreenInfo,
    *,
    billing_code: str | None,
    expires_in_seconds: int,
    now_ms: int,
    openrtb: bool,
) -> str:
    """The VAST document of an offer (Core `vast=true`) or a bid (OpenRTB `adm`): its campaign,
    creative and price, with tracking URLs signed for its screen at `now_ms`.

    The same document `render_vast` makes of the same `VastAd`, made faster: what comes from
    the campaign, its advertiser and the creative is escaped once per creative (`_Static`),
    and each offer adds its ids, price, billing code, signed URLs and expiry."""
    campaign, creative = match.campaign, match.creative
    urls = _TrackingUrls(
        settings, offer_id, screen.publisher_id, screen.id, now_ms, openrtb=openrtb
    )
    parts = _statics.of(snapshot, campaign, creative)
    ad_id, creative_id, media_id = _ids(offer_id)
    billing = "" if billing_code is None else _text(billing_code)
    tracking = "".join(
        [
            f"{opening}{urls.text(quoted, urls.token(signed))}</Tracking>"
            for opening, quoted, signed in _LINEAR_PARTS
        ]
    )
    impression = urls.text(_IMPRESSION_QUOTED, urls.token(_IMPRESSION_SIGNED))
    return (
        f"{_HEAD}{ad_id}{_AFTER_AD_ID}{_text(offer_id)}</OfferId>"
        f"<BidPriceCents>{cents_text(match.price_micros)}</BidPriceCents>"
        f"<BillingCode>{billing}{parts.after_billing}{ad_id}>{impression}"
        f"{parts.after_impression}{creative_id}{parts.after_creative_id}{tracking}"
        f"{parts.after_tracking}{media_id}{parts.after_media_id}{max(int(expires_in_seconds), 0)}"
        "</Expires></InLine></Ad></VAST>"
    )


def duration_hms(seconds: int) -> str:
    """`HH:MM:SS`, as VAST's `Duration` wants it."""
    seconds = max(seconds, 0)
    hours, rest = divmod(seconds, 3600)
    return f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"


# Creatives have a handful of distinct durations.
_duration = lru_cache(maxsize=1024)(duration_hms)


def _url_text(url: str) -> str:
    return _url_texts.get(url) or _text(url)


def _attr(value: str) -> str:
    """`quoteattr`, skipped for the usual value that holds nothing to escape (ids, MIME types)."""
    return quoteattr(value) if _ATTR_SPECIAL.search(value) else f'"{value}"'


_ATTR_SPECIAL = re.compile("[&<>\"'\n\r\t]")
_TRACKING_OPEN = {event: f"<Tracking event={_attr(event)}>" for event in LINEAR_EVENTS}


def _tracking_elements(tracking: dict[str, str]) -> str:
    return "".join(
        [
            f"{_TRACKING_OPEN.get(event) or f'<Tracking event={_attr(event)}>'}"
            f"{_url_text(url)}</Tracking>"
            for event, url in tracking.items()
        ]
    )


def _ids(offer_id: str) -> tuple[str, str, str]:
    """The quoted `id`s of the Ad, Creative and MediaFile, all made of the offer id."""
    if _ATTR_SPECIAL.search(offer_id):
        return _attr(offer_id), _attr(f"{offer_id}_creative"), _attr(f"{offer_id}_media")
    return f'"{offer_id}"', f'"{offer_id}_creative"', f'"{offer_id}_media"'


# What XML Schema validators built on libxml2 refuse in an `xs:anyURI` (tests/standards/README.md):
# `[` or `]` outside the host, a `%` that does not start an escape, a second `#`.
_NOT_ANY_URI = re.compile(r"[\[\]]|%(?![0-9A-Fa-f]{2})|#.*#")
_STRAY_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


@lru_cache(maxsize=8192)
def any_uri(url: str) -> str:
    """`url` as every validator takes an `xs:anyURI`: after the host, `[` and `]`, a `%` that
    starts no escape, and each `#` after the first are percent-encoded (the same resource for
    an HTTP client, which encodes them itself); an empty port is dropped. Other URLs unchanged."""
    scheme = url.find("://")
    host_start = scheme + 3 if scheme >= 0 else 0
    host_end = len(url)
    for separator in "/?#":
        found = url.find(separator, host_start)
        if found >= 0:
            host_end = min(host_end, found)
    head, rest = url[:host_end], url[host_end:]
    if head.endswith(":"):
        head = head[:-1]
    if not _NOT_ANY_URI.search(rest):
        return head + rest
    fragment = rest.find("#")
    if fragment >= 0:
        rest = rest[: fragment + 1] + rest[fragment + 1 :].replace("#", "%23")
    rest = _STRAY_PERCENT.sub("%25", rest).replace("[", "%5B").replace("]", "%5D")
    return head + rest


def render_vast(ad: VastAd) -> str:
    """The VAST 4.0 document for one ad; every text and attribute value XML-escaped."""
    offer_id, creative_id, media_id = _ids(ad.offer_id)
    billing_code = "" if ad.billing_code is None else _text(ad.billing_code)
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><VAST version="4.0" xmlns="{VAST_NAMESPACE}">'
        f"<Ad id={offer_id}><InLine><AdSystem>{AD_SYSTEM}</AdSystem>"
        f'<Extensions><Extension type="{EXTENSION_TYPE}">'
        f"<OfferId>{_text(ad.offer_id)}</OfferId>"
        f"<BidPriceCents>{plain(ad.bid_price_cents)}</BidPriceCents>"
        f"<BillingCode>{billing_code}</BillingCode>"
        f"<AdvertiserDomain>{_text(ad.advertiser_domain)}</AdvertiserDomain>"
        "</Extension></Extensions>"
        f"<Impression id={offer_id}>{_url_text(ad.impression_url)}</Impression>"
        f"<AdTitle>{_text(ad.ad_title)}</AdTitle>"
        f"<Advertiser>{_text(ad.advertiser)}</Advertiser>"
        f'<Creatives><Creative id={creative_id} sequence="1">'
        f'<UniversalAdId idRegistry="unknown" idValue={_attr(ad.creative_id)}>'
        f"{_text(ad.creative_id)}</UniversalAdId>"
        f"<Linear><TrackingEvents>{_tracking_elements(ad.tracking)}</TrackingEvents>"
        f"<Duration>{_duration(ad.duration_seconds)}</Duration>"
        f'<MediaFiles><MediaFile id={media_id} delivery="progressive" '
        f'type={_attr(ad.mime_type)} width="{int(ad.width)}" height="{int(ad.height)}" '
        f'scalable="true" maintainAspectRatio="true">{_text(any_uri(ad.asset_url))}</MediaFile>'
        "</MediaFiles></Linear></Creative></Creatives>"
        f"<Expires>{max(int(ad.expires_in_seconds), 0)}</Expires>"
        "</InLine></Ad></VAST>"
    )


# The templated document of match_vast: render_vast's text cut where an offer's own values go.
_HEAD = (
    f'<?xml version="1.0" encoding="UTF-8"?><VAST version="4.0" xmlns="{VAST_NAMESPACE}"><Ad id='
)
_AFTER_AD_ID = (
    f"><InLine><AdSystem>{AD_SYSTEM}</AdSystem>"
    f'<Extensions><Extension type="{EXTENSION_TYPE}"><OfferId>'
)
# (`<Tracking ...>`, the event as a query value, the event as it ends its signed message)
_LINEAR_PARTS = tuple((_TRACKING_OPEN[event], *_EVENT_PARTS[event]) for event in LINEAR_EVENTS)
_IMPRESSION_QUOTED, _IMPRESSION_SIGNED = _EVENT_PARTS[IMPRESSION_EVENT]


class _Static:
    """The text of an offer's VAST document that comes from its campaign, the campaign's
    advertiser and the creative alone, escaped once: each piece runs from after one of the
    offer's own values to the next."""

    __slots__ = (
        "after_billing",
        "after_creative_id",
        "after_impression",
        "after_media_id",
        "after_tracking",
    )

    def __init__(
        self, campaign: CampaignInfo, creative: CreativeInfo, advertiser: Advertiser | None
    ) -> None:
        name = advertiser.name if advertiser is not None else ""
        domain = advertiser.domain if advertiser is not None else ""
        self.after_billing = (
            f"</BillingCode><AdvertiserDomain>{_text(domain)}</AdvertiserDomain>"
            "</Extension></Extensions><Impression id="
        )
        self.after_impression = (
            f"</Impression><AdTitle>{_text(campaign.name)}</AdTitle>"
            f"<Advertiser>{_text(name)}</Advertiser><Creatives><Creative id="
        )
        self.after_creative_id = (
            ' sequence="1">'
            f'<UniversalAdId idRegistry="unknown" idValue={_attr(creative.id)}>'
            f"{_text(creative.id)}</UniversalAdId><Linear><TrackingEvents>"
        )
        self.after_tracking = (
            f"</TrackingEvents><Duration>{_duration(creative.duration_seconds)}</Duration>"
            "<MediaFiles><MediaFile id="
        )
        self.after_media_id = (
            f' delivery="progressive" type={_attr(creative.mime_type)} '
            f'width="{int(creative.width)}" height="{int(creative.height)}" '
            f'scalable="true" maintainAspectRatio="true">{_text(any_uri(creative.url))}'
            "</MediaFile></MediaFiles></Linear></Creative></Creatives><Expires>"
        )


class _Statics:
    """The `_Static` of each creative of one snapshot, by the creative's id(): the snapshot
    holds its creatives, so no id is reused while it lives. A request on another snapshot
    (the next one after a reload, or the one before for a request still in flight) starts
    the text afresh, so text is kept for one snapshot at a time and never outlives it (the
    snapshot is only weakly referenced)."""

    __slots__ = ("by_creative", "snapshot")

    def __init__(self) -> None:
        self.snapshot: weakref.ref[Snapshot] | None = None
        self.by_creative: dict[int, _Static] = {}

    def of(self, snapshot: Snapshot, campaign: CampaignInfo, creative: CreativeInfo) -> _Static:
        if self.snapshot is None or self.snapshot() is not snapshot:
            self.snapshot = weakref.ref(snapshot)
            self.by_creative = {}
        found = self.by_creative.get(id(creative))
        if found is None:
            advertiser = snapshot.advertisers.get(campaign.advertiser_id)
            found = self.by_creative[id(creative)] = _Static(campaign, creative, advertiser)
        return found


_statics = _Statics()
