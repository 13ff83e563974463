"""OpenRTB matching scans the campaigns with a creative of the slot's exact size first
(`sized_candidates`); the answer must be the one the scan of every candidate gives: the same
campaign, creative and price, or the same no-match reason (docs/contract.md#3-matching-and-price and
docs/contract.md#6-openrtb-path: 204 vs nbr 0)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from matching.engine import (
    Budget,
    Match,
    NoMatch,
    Scan,
    VideoSlot,
    candidates,
    select,
)
from matching.inventory import Targeting
from matching.snapshot import build_snapshot
from tests.support.factories import SCREEN_MOVING, basic_document, campaign, creative, uid

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
SIZES = [(1920, 1080), (1080, 1920), (1280, 720)]
URLS = {"video": "https://cdn.example/a.mp4", "image": "https://cdn.example/a.jpg"}

_creative = st.tuples(st.sampled_from(sorted(URLS)), st.sampled_from(SIZES))
_campaign = st.fixed_dictionaries(
    {
        "cpm": st.sampled_from(["100", "200", "250", "300"]),  # few values: ties happen
        "creatives": st.lists(_creative, min_size=1, max_size=3),
        "targets_screen": st.booleans(),
        "remaining": st.sampled_from([None, 0, 10_000_000, 10**12]),
    }
)


def _document(specs: list[dict[str, Any]]) -> tuple[Any, dict[str, Budget]]:
    campaigns, creatives, budgets = [], [], {}
    for n, spec in enumerate(specs, start=1):
        cid = uid(100 + n, 4)
        targeting = Targeting(screen_ids=[SCREEN_MOVING]) if spec["targets_screen"] else Targeting()
        campaigns.append(campaign(id=cid, cpm_cents=Decimal(spec["cpm"]), targeting=targeting))
        for m, (kind, (width, height)) in enumerate(spec["creatives"], start=1):
            creatives.append(
                creative(
                    id=uid(1000 + 10 * n + m, 5),
                    campaign_id=cid,
                    kind=kind,
                    url=URLS[kind],
                    width=width,
                    height=height,
                )
            )
        if spec["remaining"] is not None:
            total = 10**12
            budgets[cid] = Budget(total, total - spec["remaining"], 0)
    return basic_document(campaigns=campaigns, creatives=creatives), budgets


@settings(max_examples=300, deadline=None)
@given(
    specs=st.lists(_campaign, min_size=1, max_size=8),
    size=st.sampled_from(SIZES),
    mimes=st.sampled_from([None, frozenset({"video/mp4"}), frozenset({"image/jpeg"})]),
    min_price=st.sampled_from([0, 2_000_000, 2_600_000]),
    excluded=st.sets(st.integers(1, 8), max_size=2),
)
def test_sized_scan_answers_as_the_whole_list(
    specs: list[dict[str, Any]],
    size: tuple[int, int],
    mimes: frozenset[str] | None,
    min_price: int,
    excluded: set[int],
) -> None:
    doc, budgets = _document(specs)
    snap = build_snapshot(doc)
    screen = snap.screens[SCREEN_MOVING]
    slot = VideoSlot(size[0], size[1], mimes)
    exclude = {uid(100 + n, 4) for n in excluded}
    got = select(
        snap,
        screen,
        NOW,
        budgets,
        audience=Decimal(10),
        min_price_micros=min_price,
        slot=slot,
        exclude=exclude,
    )
    local = NOW.astimezone(screen.zone)
    whole = Scan(NOW, local.weekday(), local.hour, budgets, frozenset(exclude), min_price).best(
        candidates(snap, screen), screen, Decimal(10), 100_000, slot
    )
    assert type(got) is type(whole)
    if isinstance(got, Match):
        assert isinstance(whole, Match)
        assert (got.campaign.id, got.creative.id, got.price_micros) == (
            whole.campaign.id,
            whole.creative.id,
            whole.price_micros,
        )
    else:
        assert isinstance(whole, NoMatch)
        assert got.reason == whole.reason


def test_a_cheaper_campaign_with_the_size_wins_over_richer_ones_without() -> None:
    doc, _ = _document(
        [
            {
                "cpm": "300",
                "creatives": [("video", (1080, 1920))],
                "targets_screen": False,
                "remaining": None,
            },
            {
                "cpm": "200",
                "creatives": [("video", (1920, 1080))],
                "targets_screen": True,
                "remaining": None,
            },
        ]
    )
    snap = build_snapshot(doc)
    got = select(
        snap,
        snap.screens[SCREEN_MOVING],
        NOW,
        {},
        audience=Decimal(10),
        slot=VideoSlot(1920, 1080, frozenset({"video/mp4"})),
    )
    assert isinstance(got, Match)
    assert got.campaign.id == uid(102, 4)
    assert got.price_micros == 2_000_000  # 200 cents CPM x 10 / 1000 = 2 cents


def test_no_campaign_of_the_size_is_a_resolution_mismatch() -> None:
    doc, _ = _document(
        [
            {
                "cpm": "300",
                "creatives": [("video", (1080, 1920))],
                "targets_screen": False,
                "remaining": None,
            }
        ]
    )
    snap = build_snapshot(doc)
    got = select(
        snap,
        snap.screens[SCREEN_MOVING],
        NOW,
        {},
        audience=Decimal(10),
        slot=VideoSlot(1920, 1080, frozenset({"video/mp4"})),
    )
    assert isinstance(got, NoMatch)
    assert got.reason == "resolution_mismatch"
