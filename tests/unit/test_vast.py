"""The VAST document (docs/contract.md#6a-vast-documents) and its signed tracking URLs."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from decimal import Decimal
from urllib.parse import parse_qs, urlsplit

import pytest

from bidder.settings import Settings, load_settings
from bidder.signing import verify
from bidder.vast import VastAd, duration_hms, render_vast, tracking_urls
from tests.support.vast_check import assert_valid_vast

NS = {"v": "http://www.iab.com/VAST"}
OFFER = "3f2b8c1e-0000-4000-8000-000000000001"
PUB = "11111111-1111-4111-8111-111111111111"
SCR = "22222222-2222-4222-8222-222222222222"
NOW_MS = 1_700_000_000_000
EVENTS = ["start", "firstQuartile", "midpoint", "thirdQuartile", "complete"]


@pytest.fixture(scope="module")
def settings() -> Settings:
    return load_settings(
        {
            "DATABASE_URL": "postgresql://u@localhost/db",
            "REDIS_URL": "redis://localhost:6379/0",
            "ADMIN_TOKEN": "a" * 32,
            "SIGNING_SECRETS": "new-secret-0123456789,old-secret-0123456789",
            "PUBLIC_BASE_URL": "https://bid.example.com",
            "TRACKING_BASE_URL": "https://track.example.com/functions/v1/track",
        }
    )


def make_ad(settings: Settings, *, openrtb: bool, **overrides: object) -> VastAd:
    impression, tracking = tracking_urls(settings, OFFER, PUB, SCR, NOW_MS, openrtb=openrtb)
    fields: dict[str, object] = {
        "offer_id": OFFER,
        "ad_title": "Summer <Sale> & more",
        "advertiser": "Acme & Sons",
        "advertiser_domain": "acme.example",
        "asset_url": "https://cdn.example.com/a.mp4?x=1&y=2",
        "mime_type": "video/mp4",
        "width": 1920,
        "height": 1080,
        "duration_seconds": 3725,
        "bid_price_cents": Decimal("31.25"),
        "billing_code": "BILL-<1>&",
        "expires_in_seconds": 300,
        "creative_id": "cr-1",
        "impression_url": impression,
        "tracking": tracking,
    }
    fields.update(overrides)
    return VastAd(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("openrtb", [True, False])
def test_valid_against_vast_4_0_once_expires_is_removed(settings: Settings, openrtb: bool) -> None:
    assert_valid_vast(render_vast(make_ad(settings, openrtb=openrtb)))


def test_null_billing_code_still_valid(settings: Settings) -> None:
    document = render_vast(make_ad(settings, openrtb=False, billing_code=None))
    assert_valid_vast(document)
    code = ET.fromstring(document).find(".//v:Extension/v:BillingCode", NS)
    assert code is not None
    assert not code.text


def test_every_contract_element_and_attribute(settings: Settings) -> None:
    ad = make_ad(settings, openrtb=True)
    root = ET.fromstring(render_vast(ad))
    assert root.tag == "{http://www.iab.com/VAST}VAST"
    assert root.get("version") == "4.0"
    ad_el = root.find("v:Ad", NS)
    assert ad_el is not None
    assert ad_el.get("id") == OFFER
    inline = root.find("v:Ad/v:InLine", NS)
    assert inline is not None
    assert inline.findtext("v:AdSystem", namespaces=NS)
    assert inline.findtext("v:AdTitle", namespaces=NS) == "Summer <Sale> & more"
    assert inline.findtext("v:Advertiser", namespaces=NS) == "Acme & Sons"
    assert inline.findtext("v:Expires", namespaces=NS) == "300"
    children = [child.tag.split("}")[1] for child in inline]
    assert children.index("Expires") == children.index("Creatives") + 1

    creative = inline.find("v:Creatives/v:Creative", NS)
    assert creative is not None
    assert creative.get("id") == f"{OFFER}_creative"
    assert creative.get("sequence") == "1"
    universal = creative.find("v:UniversalAdId", NS)
    assert universal is not None
    assert universal.get("idValue") == "cr-1"
    assert creative.findtext("v:Linear/v:Duration", namespaces=NS) == "01:02:05"

    media = creative.find("v:Linear/v:MediaFiles/v:MediaFile", NS)
    assert media is not None
    assert media.attrib == {
        "id": f"{OFFER}_media",
        "delivery": "progressive",
        "type": "video/mp4",
        "width": "1920",
        "height": "1080",
        "scalable": "true",
        "maintainAspectRatio": "true",
    }
    assert media.text == "https://cdn.example.com/a.mp4?x=1&y=2"

    events = [t.get("event") for t in creative.findall("v:Linear/v:TrackingEvents/v:Tracking", NS)]
    assert events == EVENTS

    extension = inline.find("v:Extensions/v:Extension", NS)
    assert extension is not None
    assert extension.get("type")
    assert extension.findtext("v:OfferId", namespaces=NS) == OFFER
    assert extension.findtext("v:BidPriceCents", namespaces=NS) == "31.25"
    assert extension.findtext("v:BillingCode", namespaces=NS) == "BILL-<1>&"

    impression = inline.findtext("v:Impression", namespaces=NS)
    assert impression == ad.impression_url


def test_ampersands_are_escaped_in_the_raw_document(settings: Settings) -> None:
    document = render_vast(make_ad(settings, openrtb=True))
    assert "a.mp4?x=1&amp;y=2" in document
    assert "&y=2" not in document


@pytest.mark.parametrize("openrtb", [True, False])
def test_tracking_urls_are_signed_and_carry_the_contract_parameters(
    settings: Settings, openrtb: bool
) -> None:
    impression, tracking = tracking_urls(settings, OFFER, PUB, SCR, NOW_MS, openrtb=openrtb)
    assert list(tracking) == EVENTS
    for event, url in [("impression", impression), *tracking.items()]:
        parts = urlsplit(url)
        assert f"{parts.scheme}://{parts.netloc}{parts.path}" == settings.server.tracking_base_url
        params = {k: v[0] for k, v in parse_qs(parts.query).items()}
        assert params["offer_id"] == OFFER
        assert params["event"] == event
        assert params["ts"] == str(NOW_MS)
        assert params["pub"] == PUB
        assert params["scr"] == SCR
        signed = ["offer_id", "event", "pub", "scr", "ts"]
        assert verify(settings.secrets.signing_secrets, "/functions/v1/track", params, signed)
        # Any altered signed value breaks the signature.
        assert not verify(
            settings.secrets.signing_secrets, "/functions/v1/track", {**params, "scr": PUB}, signed
        )
        if openrtb:
            assert "price=${AUCTION_PRICE}" in url
            assert "aud=${TOTAL_IMP}" in url
        else:
            assert "price" not in params
            assert "aud" not in params


def test_old_secret_still_verifies_a_url_it_signed(settings: Settings) -> None:
    rotated = load_settings(
        {
            "DATABASE_URL": settings.postgres.url,
            "REDIS_URL": settings.redis.url,
            "ADMIN_TOKEN": settings.secrets.admin_token,
            "SIGNING_SECRETS": "old-secret-0123456789",
            "TRACKING_BASE_URL": settings.server.tracking_base_url,
        }
    )
    impression, _ = tracking_urls(rotated, OFFER, PUB, SCR, NOW_MS, openrtb=False)
    params = {k: v[0] for k, v in parse_qs(urlsplit(impression).query).items()}
    signed = ["offer_id", "event", "pub", "scr", "ts"]
    assert verify(settings.secrets.signing_secrets, "/functions/v1/track", params, signed)
    assert not verify(("unrelated-secret-0123",), "/functions/v1/track", params, signed)


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [(0, "00:00:00"), (15, "00:00:15"), (60, "00:01:00"), (3599, "00:59:59"), (3600, "01:00:00")],
)
def test_duration_is_hh_mm_ss(seconds: int, expected: str) -> None:
    assert duration_hms(seconds) == expected


def test_a_non_ascii_token_is_refused_not_an_error(settings: Settings) -> None:
    impression, _ = tracking_urls(settings, OFFER, PUB, SCR, NOW_MS, openrtb=False)
    params = {k: v[0] for k, v in parse_qs(urlsplit(impression).query).items()}
    signed = ["offer_id", "event", "pub", "scr", "ts"]
    assert not verify(
        settings.secrets.signing_secrets, "/functions/v1/track", {**params, "token": "é"}, signed
    )


@pytest.mark.parametrize(
    ("asset_url", "media_file"),
    [
        # `[` and `]` after the host, a `%` that starts no escape, a second `#`: libxml2 refuses
        # each in an xs:anyURI (tests/standards/README.md); percent-encoded, the resource is the
        # same.
        ("https://cdn.example/x[1].mp4", "https://cdn.example/x%5B1%5D.mp4"),
        ("https://cdn.example/x%%41.mp4", "https://cdn.example/x%25%41.mp4"),
        ("https://cdn.example/x.mp4?q=50%", "https://cdn.example/x.mp4?q=50%25"),
        ("https://cdn.example/x.mp4?a=[1]&b=2", "https://cdn.example/x.mp4?a=%5B1%5D&b=2"),
        ("https://cdn.example/x.mp4#t=1#2", "https://cdn.example/x.mp4#t=1%232"),
        ("https://cdn.example:/x.mp4", "https://cdn.example/x.mp4"),
        # Already valid: left exactly as imported (an IPv6 host keeps its brackets).
        ("https://[2001:db8::1]/x.mp4", "https://[2001:db8::1]/x.mp4"),
        ("https://cdn.example/x%20y.mp4?a=1&b=%7E", "https://cdn.example/x%20y.mp4?a=1&b=%7E"),
        ("https://cdn.example/été 1.mp4", "https://cdn.example/été 1.mp4"),
    ],
)
def test_the_media_file_is_an_any_uri_every_validator_takes(
    settings: Settings, asset_url: str, media_file: str
) -> None:
    root = assert_valid_vast(render_vast(make_ad(settings, openrtb=True, asset_url=asset_url)))
    element = root.find(".//v:MediaFile", NS)
    assert element is not None
    assert (element.text or "").strip() == media_file
