"""`match_vast` (the bid's and the Core offer's VAST, from text escaped once per creative) makes
exactly the document `render_vast` makes of the same offer, field by field, whatever the names,
URLs, codes and ids hold (docs/contract.md#6a-vast-documents: every text and attribute value
escaped), and it follows a new inventory snapshot."""

from __future__ import annotations

import gc
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bidder.settings import (
    PostgresSettings,
    RedisSettings,
    SecretSettings,
    ServerSettings,
    Settings,
)
from bidder.vast import LINEAR_EVENTS, VastAd, match_vast, render_vast, tracking_urls
from matching.engine import Match
from matching.money import cents_text, micros_to_cents
from matching.snapshot import CampaignInfo, Snapshot, build_snapshot
from tests.support.factories import (
    CAMPAIGN,
    SCREEN_MOVING,
    advertiser,
    basic_document,
    campaign,
    creative,
)
from tests.support.vast_check import assert_valid_vast

NOW_MS = 1_700_000_000_000
OFFER = "3f2b8c1e-0000-4000-8000-000000000001"
# Text an operator may type: XML's specials, quotes, whitespace, non-ASCII.
text = st.text(alphabet=st.sampled_from(list("ab <>&\"'\t\n\r%#[]:/é€ ")), max_size=12)


def config(base: str = "https://track.example/t") -> Settings:
    return Settings(
        server=ServerSettings(tracking_base_url=base),
        secrets=SecretSettings(admin_token="a" * 32, signing_secrets=("secret-0123456789",)),
        postgres=PostgresSettings(url="postgresql://u@h/d"),
        redis=RedisSettings(url="redis://h"),
    )


def snapshot_of(**fields: Any) -> Snapshot:
    """The factories' inventory with the campaign, advertiser and video creative changed."""
    doc = basic_document(
        advertisers=[advertiser(**fields.get("advertiser", {}))],
        campaigns=[campaign(**fields.get("campaign", {}))],
        creatives=[creative(**fields.get("creative", {}))],
    )
    return build_snapshot(doc)


def reference(
    cfg: Settings,
    snapshot: Snapshot,
    match: Match,
    offer_id: str,
    *,
    billing_code: str | None,
    expires_in_seconds: int,
    openrtb: bool,
) -> str:
    """The document as `render_vast` makes it from the plain fields."""
    screen = snapshot.screens[SCREEN_MOVING]
    found = snapshot.advertisers.get(match.campaign.advertiser_id)
    impression, tracking = tracking_urls(
        cfg, offer_id, screen.publisher_id, screen.id, NOW_MS, openrtb=openrtb
    )
    return render_vast(
        VastAd(
            offer_id=offer_id,
            ad_title=match.campaign.name,
            advertiser=found.name if found is not None else "",
            advertiser_domain=found.domain if found is not None else "",
            asset_url=match.creative.url,
            mime_type=match.creative.mime_type,
            width=match.creative.width,
            height=match.creative.height,
            duration_seconds=match.creative.duration_seconds,
            bid_price_cents=micros_to_cents(match.price_micros),
            billing_code=billing_code,
            expires_in_seconds=expires_in_seconds,
            creative_id=match.creative.id,
            impression_url=impression,
            tracking=tracking,
        )
    )


def templated(
    cfg: Settings,
    snapshot: Snapshot,
    match: Match,
    offer_id: str,
    *,
    billing_code: str | None,
    expires_in_seconds: int,
    openrtb: bool,
) -> str:
    return match_vast(
        cfg,
        snapshot,
        offer_id,
        match,
        snapshot.screens[SCREEN_MOVING],
        billing_code=billing_code,
        expires_in_seconds=expires_in_seconds,
        now_ms=NOW_MS,
        openrtb=openrtb,
    )


def match_in(snapshot: Snapshot, price_micros: int) -> Match:
    info = snapshot.campaigns[CAMPAIGN]
    video = next(c for c in info.creatives if c.kind == "video")
    return Match(campaign=info, creative=video, price_micros=price_micros)


@settings(max_examples=300, deadline=None)
@given(
    name=text,
    advertiser_name=text,
    domain=text,
    creative_id=text.filter(bool),
    url_tail=text,
    billing_code=st.one_of(st.none(), text),
    offer_id=st.one_of(st.just(OFFER), text),
    price_micros=st.integers(min_value=0, max_value=10**12),
    expires=st.integers(min_value=-5, max_value=10**6),
    duration=st.integers(min_value=1, max_value=7200),
    base=st.sampled_from(["https://track.example/t", "https://t.example/a&b<c>?q='x'\"", ""]),
    openrtb=st.booleans(),
)
def test_the_templated_document_is_the_rendered_one(
    name: str,
    advertiser_name: str,
    domain: str,
    creative_id: str,
    url_tail: str,
    billing_code: str | None,
    offer_id: str,
    price_micros: int,
    expires: int,
    duration: int,
    base: str,
    openrtb: bool,
) -> None:
    snapshot = snapshot_of(
        campaign={"name": name},
        advertiser={"name": advertiser_name, "domain": domain},
        creative={
            "id": creative_id,
            "url": f"https://cdn.example:/{url_tail}.mp4",
            "duration_seconds": duration,
        },
    )
    cfg = config(base)
    match = match_in(snapshot, price_micros)
    kwargs: dict[str, Any] = {
        "billing_code": billing_code,
        "expires_in_seconds": expires,
        "openrtb": openrtb,
    }
    expected = reference(cfg, snapshot, match, offer_id, **kwargs)
    # Twice: the second time from the text kept for the creative.
    assert templated(cfg, snapshot, match, offer_id, **kwargs) == expected
    assert templated(cfg, snapshot, match, offer_id, **kwargs) == expected


def test_the_templated_document_is_valid_vast_with_signed_urls_for_its_offer() -> None:
    snapshot = snapshot_of()
    cfg = config()
    match = match_in(snapshot, 2_500_000)
    document = templated(
        cfg, snapshot, match, OFFER, billing_code="B&1", expires_in_seconds=300, openrtb=True
    )
    assert_valid_vast(document)
    impression, tracking = tracking_urls(
        cfg,
        OFFER,
        snapshot.screens[SCREEN_MOVING].publisher_id,
        SCREEN_MOVING,
        NOW_MS,
        openrtb=True,
    )
    assert list(tracking) == list(LINEAR_EVENTS)
    for url in [impression, *tracking.values()]:
        assert url.replace("&", "&amp;") in document
    assert "<BidPriceCents>2.5</BidPriceCents>" in document
    assert "<BillingCode>B&amp;1</BillingCode>" in document


def test_a_new_snapshot_changes_the_document() -> None:
    """Text kept for a creative belongs to the snapshot's objects: a reload that renames the
    campaign or the advertiser, or moves the asset, is in the next document."""
    cfg = config()
    before = snapshot_of()
    after = snapshot_of(
        campaign={"name": "Winter"},
        advertiser={"name": "Snowy", "domain": "snowy.example"},
        creative={"url": "https://cdn.example/winter.mp4"},
    )
    kwargs: dict[str, Any] = {"billing_code": None, "expires_in_seconds": 60, "openrtb": False}
    first = templated(cfg, before, match_in(before, 1), OFFER, **kwargs)
    second = templated(cfg, after, match_in(after, 1), OFFER, **kwargs)
    assert "Summer" in first
    assert "Summer" not in second
    for value in ("Winter", "Snowy", "snowy.example", "winter.mp4"):
        assert value in second
    assert second == reference(cfg, after, match_in(after, 1), OFFER, **kwargs)
    # And the old snapshot, still serving a request in flight, still gets its own.
    assert templated(cfg, before, match_in(before, 1), OFFER, **kwargs) == first


def test_the_kept_text_does_not_outlive_its_snapshot() -> None:
    """Text is kept for the snapshot requests use now: once a reload's snapshot serves, the
    old one, when nothing else holds it, is freed with every campaign in it (text kept by
    creative across snapshots would hold their campaigns until the cache filled)."""
    cfg = config()
    kwargs: dict[str, Any] = {"billing_code": None, "expires_in_seconds": 60, "openrtb": True}

    def alive(name: str) -> list[CampaignInfo]:
        return [o for o in gc.get_objects() if isinstance(o, CampaignInfo) and o.name == name]

    old = snapshot_of(campaign={"name": "old"})
    assert "<AdTitle>old</AdTitle>" in templated(cfg, old, match_in(old, 1), OFFER, **kwargs)
    new = snapshot_of(campaign={"name": "new"})
    assert "<AdTitle>new</AdTitle>" in templated(cfg, new, match_in(new, 1), OFFER, **kwargs)
    assert alive("old")
    del old
    gc.collect()
    assert alive("old") == []
    assert alive("new")


@given(micros=st.integers(min_value=-(10**15), max_value=10**15))
def test_cents_text_is_the_decimal_text(micros: int) -> None:
    assert cents_text(micros) == str(micros_to_cents(micros))


def test_cents_text_examples() -> None:
    assert [cents_text(m) for m in (0, 2_500_000, 100_000_000, 1, 1_000_001)] == [
        "0",
        "2.5",
        "100",
        "0.000001",
        "1.000001",
    ]
    assert Decimal(cents_text(123_456_789)) == Decimal("123.456789")
