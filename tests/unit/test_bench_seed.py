"""The bench inventory is as bench/README.md describes it, valid, and the same for the same seed."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal

import pytest

from bench.seed import full_document, small_variant
from matching.inventory import InventoryDocument, mime_type_for, validate_document

# Lua counts micro-cents exactly only up to 2**53, so the service refuses amounts above 9e9 cents.
MAX_CENTS = Decimal(9_000_000_000)


@pytest.fixture(scope="module")
def doc() -> InventoryDocument:
    return full_document()


def test_sizes_are_those_of_issue_6(doc: InventoryDocument) -> None:
    assert len(doc.screens) == 10_000
    assert len({s.publisher_id for s in doc.screens}) == len(doc.publishers) == 20
    assert len(doc.campaigns) == 2_000
    assert len(doc.creatives) == 6_000


def test_document_is_valid(doc: InventoryDocument) -> None:
    assert validate_document(doc) == []
    assert validate_document(small_variant(doc)) == []


def test_every_screen_type_and_the_common_resolutions(doc: InventoryDocument) -> None:
    types = Counter(s.type for s in doc.screens)
    assert set(types) == {"static", "slow", "moving"}
    sizes = {(s.width, s.height) for s in doc.screens}
    assert {(1920, 1080), (1080, 1920)} <= sizes
    assert len(sizes) >= 4


def test_screens_carry_external_ids_and_audiences(doc: InventoryDocument) -> None:
    pairs = [(s.publisher_id, s.external_id) for s in doc.screens]
    assert all(external for _, external in pairs)
    assert len(set(pairs)) == len(pairs)
    assert all(s.audience_per_play > 0 for s in doc.screens)
    assert len({s.audience_per_play for s in doc.screens}) > 100


def test_billing_codes_targeting_and_budgets(doc: InventoryDocument) -> None:
    assert doc.billing_codes
    assert any(c.targeting.publisher_ids for c in doc.campaigns)
    assert any(c.targeting.dayparts for c in doc.campaigns)
    assert sum(1 for c in doc.campaigns if c.targeting == type(c.targeting)()) > 1_000
    # Generous: a whole run reserves a few million cents; no campaign may run dry in it.
    assert min(c.budget_cents for c in doc.campaigns) >= 10_000_000
    assert max(c.budget_cents for c in doc.campaigns) <= MAX_CENTS


def test_every_moving_resolution_has_an_approved_mp4_to_bid_with(doc: InventoryDocument) -> None:
    videos = {
        (c.width, c.height)
        for c in doc.creatives
        if c.approved and c.kind == "video" and mime_type_for(c.url) == "video/mp4"
    }
    assert {(s.width, s.height) for s in doc.screens if s.type == "moving"} <= videos


def test_same_seed_same_document_other_seed_other_document(doc: InventoryDocument) -> None:
    again = full_document()
    assert [s.id for s in again.screens] == [s.id for s in doc.screens]
    assert [c.cpm_cents for c in again.campaigns] == [c.cpm_cents for c in doc.campaigns]
    assert full_document(seed=7).screens[0].id != doc.screens[0].id


def test_small_variant_changes_only_the_campaigns(doc: InventoryDocument) -> None:
    small = small_variant(doc)
    assert len(small.campaigns) == 20
    assert len(small.creatives) == 60
    assert small.screens == doc.screens
    assert {c.campaign_id for c in small.creatives} == {c.id for c in small.campaigns}
