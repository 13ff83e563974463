"""The tracking URLs inside a VAST document are exactly the URLs `tracking_urls` returns,
XML-escaped (docs/contract.md#6a-vast-documents: all URLs and text escaped), whatever was built
before or since."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from decimal import Decimal
from xml.sax.saxutils import escape

import pytest
from msgspec.structs import replace

from bidder.settings import (
    PostgresSettings,
    RedisSettings,
    SecretSettings,
    ServerSettings,
    Settings,
)
from bidder.vast import VastAd, render_vast, tracking_urls

NS = {"v": "http://www.iab.com/VAST"}
PUB = "11111111-1111-4111-8111-111111111111"
SCR = "22222222-2222-4222-8222-222222222222"


def settings(base: str) -> Settings:
    return Settings(
        server=ServerSettings(tracking_base_url=base),
        secrets=SecretSettings(admin_token="a" * 32, signing_secrets=("secret-0123456789",)),
        postgres=PostgresSettings(url="postgresql://u@h/d"),
        redis=RedisSettings(url="redis://h"),
    )


def ad(config: Settings, offer_id: str, *, openrtb: bool = True) -> VastAd:
    impression, tracking = tracking_urls(
        config, offer_id, PUB, SCR, 1_700_000_000_000, openrtb=openrtb
    )
    return VastAd(
        offer_id=offer_id,
        ad_title="t",
        advertiser="a",
        advertiser_domain="a.example",
        asset_url="https://cdn.example/a.mp4",
        mime_type="video/mp4",
        width=1920,
        height=1080,
        duration_seconds=15,
        bid_price_cents=Decimal("12.5"),
        billing_code=None,
        expires_in_seconds=300,
        creative_id="cr-1",
        impression_url=impression,
        tracking=tracking,
    )


def urls_in(document: str) -> list[str]:
    root = ET.fromstring(document)
    impression = root.findall(".//v:Impression", NS)
    tracking = root.findall(".//v:Tracking", NS)
    return [element.text or "" for element in [*impression, *tracking]]


@pytest.mark.parametrize(
    "base", ["https://track.example/t", "https://track.example/a&b<c>?q=1&r='x'\"", ""]
)
@pytest.mark.parametrize("offer_id", ["3f2b8c1e-0000-4000-8000-000000000001", "o&<>\"' \u00e9"])
def test_the_document_carries_the_urls_escaped(base: str, offer_id: str) -> None:
    config = settings(base)
    first = ad(config, offer_id)
    document = render_vast(first)
    expected = [first.impression_url, *first.tracking.values()]
    assert urls_in(document) == expected
    for url in expected:
        assert f">{escape(url)}</" in document


def test_a_document_rendered_after_other_urls_were_built_is_the_same() -> None:
    config = settings("https://track.example/a&b")
    first = ad(config, "3f2b8c1e-0000-4000-8000-000000000001")
    rendered_at_once = render_vast(first)
    second = ad(config, "3f2b8c1e-0000-4000-8000-000000000002", openrtb=False)
    assert render_vast(first) == rendered_at_once
    assert urls_in(render_vast(second)) == [second.impression_url, *second.tracking.values()]
    # URLs handed in from elsewhere (not built by tracking_urls) are escaped just the same.
    foreign = replace(first, impression_url="https://x/?a=1&b=<2>", tracking={"start": "&"})
    assert urls_in(render_vast(foreign)) == ["https://x/?a=1&b=<2>", "&"]
