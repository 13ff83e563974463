"""Matching rules of docs/contract.md#3-matching-and-price, checked on the pure engine (nothing
running).

Price of one play = cpm x audience / 1000; the highest price wins; a tie goes to the campaign
with the larger share of its budget left; the screen type decides which creative kinds it takes
(contract: screen types and asset compatibility); dayparts are in the screen's local time;
flight dates, status and targeting allow-lists decide eligibility.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from matching.engine import Budget, Match, NoMatch, VideoSlot, select
from matching.inventory import Daypart, Targeting
from matching.snapshot import Snapshot, build_snapshot
from tests.support.factories import (
    CAMPAIGN,
    PUB,
    PUB_OTHER,
    SCREEN_MOVING,
    SCREEN_OTHER_PUB,
    SCREEN_SLOW,
    SCREEN_STATIC,
    basic_document,
    campaign,
    creative,
    publisher,
    screen,
    uid,
)

# Monday 5 January 2026, 12:00 UTC.
MONDAY_NOON = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
CAMPAIGN_B = uid(2, 4)


def _snapshot(**lists: Any) -> Snapshot:
    return build_snapshot(basic_document(**lists))


def _select(
    snap: Snapshot,
    screen_id: str = SCREEN_MOVING,
    now: datetime = MONDAY_NOON,
    budgets: dict[str, Budget] | None = None,
    **kw: Any,
) -> Match | NoMatch:
    return select(snap, snap.screens[screen_id], now, budgets or {}, **kw)


def _winner(outcome: Match | NoMatch) -> str:
    assert isinstance(outcome, Match), outcome
    return outcome.campaign.id


def _only(kind: str, url: str, campaign_id: str = CAMPAIGN) -> Any:
    return creative(id=uid(10, 5), campaign_id=campaign_id, kind=kind, url=url)


# -- price ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cpm", "audience", "price_micros"),
    [
        ("250", "10", 2_500_000),  # 2.5 cents
        ("250", "1", 250_000),
        ("1000", "0.5", 500_000),
        ("3", "7", 21_000),  # 0.021 cents
        ("1", "0.0015", 2),  # 0.0000015 cents: half-even to 2 micro-cents
    ],
)
def test_price_is_cpm_times_audience_over_1000(cpm: str, audience: str, price_micros: int) -> None:
    snap = _snapshot(
        campaigns=[campaign(cpm_cents=Decimal(cpm))],
        screens=[screen(audience_per_play=Decimal(audience))],
    )
    outcome = _select(snap)
    assert isinstance(outcome, Match)
    assert outcome.price_micros == price_micros


def test_openrtb_audience_replaces_the_screens() -> None:
    outcome = _select(_snapshot(), audience=Decimal("119.47"))
    assert isinstance(outcome, Match)
    assert outcome.price_micros == 29_867_500  # 250 x 119.47 / 1000 = 29.8675 cents


# -- best match -----------------------------------------------------------------------------


def _two_campaigns(cpm_a: str, cpm_b: str, **b: Any) -> Snapshot:
    return _snapshot(
        campaigns=[
            campaign(cpm_cents=Decimal(cpm_a)),
            campaign(id=CAMPAIGN_B, name="B", cpm_cents=Decimal(cpm_b), **b),
        ],
        creatives=[creative(), creative(id=uid(3, 5), campaign_id=CAMPAIGN_B)],
    )


@pytest.mark.parametrize(
    ("cpm_a", "cpm_b", "winner"), [("250", "300", CAMPAIGN_B), ("301", "300", CAMPAIGN)]
)
def test_highest_price_wins(cpm_a: str, cpm_b: str, winner: str) -> None:
    assert _winner(_select(_two_campaigns(cpm_a, cpm_b))) == winner


@pytest.mark.parametrize(
    ("left_a", "left_b", "winner"),
    [
        (50, 80, CAMPAIGN_B),  # B has 80% of its budget left
        (90, 80, CAMPAIGN),
    ],
)
def test_price_tie_goes_to_the_larger_share_of_budget_left(
    left_a: int, left_b: int, winner: str
) -> None:
    total = 100_000 * 1_000_000
    budgets = {
        CAMPAIGN: Budget(total, 0, total * (100 - left_a) // 100),
        CAMPAIGN_B: Budget(total, total * (100 - left_b) // 100, 0),
    }
    assert _winner(_select(_two_campaigns("250", "250"), budgets=budgets)) == winner


def test_share_is_relative_to_each_budget() -> None:
    # A has more cents left (40 of 100) but a smaller share than B (9 of 10).
    budgets = {
        CAMPAIGN: Budget(100_000_000, 60_000_000, 0),
        CAMPAIGN_B: Budget(10_000_000, 1_000_000, 0),
    }
    assert _winner(_select(_two_campaigns("250", "250"), budgets=budgets)) == CAMPAIGN_B


def test_a_cheaper_campaign_serves_when_the_better_one_is_out_of_budget() -> None:
    budgets = {CAMPAIGN_B: Budget(10_000_000, 9_000_000, 0)}  # 1 cent left, a play costs 3
    assert _winner(_select(_two_campaigns("250", "300"), budgets=budgets)) == CAMPAIGN


# -- screen type compatibility (contract table) ---------------------------------------------

_COMPATIBLE = {
    # creative kind -> screen types that may show it
    "image": {SCREEN_STATIC, SCREEN_SLOW, SCREEN_MOVING},
    "cinemagraph": {SCREEN_SLOW, SCREEN_MOVING},
    "video": {SCREEN_MOVING},
}
_URLS = {
    "image": "https://cdn.example/a.png",
    "cinemagraph": "https://cdn.example/a.gif",
    "video": "https://cdn.example/a.webm",
}


@pytest.mark.parametrize("kind", sorted(_COMPATIBLE))
@pytest.mark.parametrize("screen_id", [SCREEN_STATIC, SCREEN_SLOW, SCREEN_MOVING])
def test_screen_type_compatibility(kind: str, screen_id: str) -> None:
    snap = _snapshot(creatives=[_only(kind, _URLS[kind])])
    outcome = _select(snap, screen_id)
    if screen_id in _COMPATIBLE[kind]:
        assert isinstance(outcome, Match), (kind, screen_id)
        assert outcome.creative.kind == kind
    else:
        assert isinstance(outcome, NoMatch), (kind, screen_id)


def test_each_screen_gets_a_creative_it_can_show() -> None:
    snap = _snapshot(
        creatives=[
            creative(),
            creative(id=uid(2, 5), url="https://cdn.example/c.gif", kind="cinemagraph"),
            creative(id=uid(3, 5), url="https://cdn.example/i.jpg", kind="image"),
        ]
    )
    for screen_id, allowed in [
        (SCREEN_STATIC, {"image"}),
        (SCREEN_SLOW, {"image", "cinemagraph"}),
        (SCREEN_MOVING, {"image", "cinemagraph", "video"}),
    ]:
        outcome = _select(snap, screen_id)
        assert isinstance(outcome, Match)
        assert outcome.creative.kind in allowed


def test_unapproved_creatives_are_never_served() -> None:
    snap = _snapshot(creatives=[creative(approved=False)])
    assert isinstance(_select(snap), NoMatch)


# -- dayparts in the screen's local time ----------------------------------------------------


@pytest.mark.parametrize(
    ("now", "eligible"),
    [
        # Berlin is UTC+1 in January. Daypart: Monday 09:00-10:00 Berlin time.
        (datetime(2026, 1, 5, 8, 0, tzinfo=UTC), True),  # 09:00 Berlin
        (datetime(2026, 1, 5, 8, 59, tzinfo=UTC), True),  # 09:59 Berlin
        (datetime(2026, 1, 5, 9, 0, tzinfo=UTC), False),  # 10:00 Berlin: end is exclusive
        (datetime(2026, 1, 5, 7, 59, tzinfo=UTC), False),  # 08:59 Berlin
        (datetime(2026, 1, 5, 9, 30, tzinfo=UTC), False),  # 09:30 UTC, but 10:30 in Berlin
        (datetime(2026, 1, 12, 8, 30, tzinfo=UTC), True),  # next Monday
        (datetime(2026, 1, 6, 8, 30, tzinfo=UTC), False),  # Tuesday
    ],
)
def test_dayparts_use_the_screens_local_time(now: datetime, eligible: bool) -> None:
    targeting = Targeting(dayparts=[Daypart(days=[0], start_hour=9, end_hour=10)])
    snap = _snapshot(
        campaigns=[campaign(targeting=targeting)],
        screens=[screen(timezone="Europe/Berlin")],
    )
    assert isinstance(_select(snap, now=now), Match) is eligible


def test_daypart_weekday_is_the_local_one() -> None:
    # Sunday 23:30 UTC is Monday 08:30 in Tokyo (UTC+9): a Monday-morning daypart applies.
    targeting = Targeting(dayparts=[Daypart(days=[0], start_hour=8, end_hour=9)])
    snap = _snapshot(
        campaigns=[campaign(targeting=targeting)], screens=[screen(timezone="Asia/Tokyo")]
    )
    assert isinstance(_select(snap, now=datetime(2026, 1, 4, 23, 30, tzinfo=UTC)), Match)


# -- flight dates and status ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "end", "eligible"),
    [
        (None, None, True),
        (MONDAY_NOON - timedelta(days=1), MONDAY_NOON + timedelta(days=1), True),
        (MONDAY_NOON, None, True),  # starts now
        (MONDAY_NOON + timedelta(seconds=1), None, False),  # not yet started
        (None, MONDAY_NOON, False),  # ended (end is exclusive)
        (None, MONDAY_NOON - timedelta(days=1), False),
    ],
)
def test_flight_dates(start: datetime | None, end: datetime | None, eligible: bool) -> None:
    snap = _snapshot(campaigns=[campaign(start_at=start, end_at=end)])
    assert isinstance(_select(snap), Match) is eligible


def test_paused_campaigns_do_not_serve() -> None:
    assert isinstance(_select(_snapshot(campaigns=[campaign(status="paused")])), NoMatch)


def test_inactive_screens_get_nothing() -> None:
    assert isinstance(_select(_snapshot(screens=[screen(active=False)])), NoMatch)


# -- targeting allow-lists ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("targeting", "screen_id", "eligible"),
    [
        (Targeting(publisher_ids=[PUB]), SCREEN_MOVING, True),
        (Targeting(publisher_ids=[PUB]), SCREEN_OTHER_PUB, False),
        (Targeting(publisher_ids=[PUB_OTHER]), SCREEN_MOVING, False),
        (Targeting(screen_ids=[SCREEN_MOVING]), SCREEN_MOVING, True),
        (Targeting(screen_ids=[SCREEN_MOVING]), SCREEN_STATIC, False),
        (Targeting(screen_types=["static"]), SCREEN_STATIC, True),
        (Targeting(screen_types=["static"]), SCREEN_MOVING, False),
        (Targeting(venue_types=["1.1"]), SCREEN_MOVING, True),
        (Targeting(venue_types=["2.2"]), SCREEN_MOVING, False),
        (Targeting(venue_types=["1.1"]), SCREEN_STATIC, False),  # a screen with no venue type
        (Targeting(publisher_ids=[PUB], screen_types=["moving"]), SCREEN_MOVING, True),
        (Targeting(publisher_ids=[PUB], screen_types=["slow"]), SCREEN_MOVING, False),
    ],
)
def test_targeting_allow_lists(targeting: Targeting, screen_id: str, eligible: bool) -> None:
    doc = basic_document(campaigns=[campaign(targeting=targeting)])
    doc.screens[0] = screen(venue_type="1.1")
    doc.creatives.append(creative(id=uid(3, 5), url="https://cdn.example/x.png", kind="image"))
    snap = build_snapshot(doc)
    assert isinstance(_select(snap, screen_id), Match) is eligible


# -- budgets and the minimum bid ------------------------------------------------------------


@pytest.mark.parametrize(
    ("budget", "eligible"),
    [
        (Budget(100_000_000, 0, 0), True),
        (Budget(10_000_000, 5_000_000, 2_500_000), True),  # exactly one play left
        (Budget(10_000_000, 5_000_000, 2_500_001), False),
        (Budget(10_000_000, 10_000_000, 0), False),
    ],
)
def test_remaining_budget_must_cover_the_price(budget: Budget, eligible: bool) -> None:
    assert isinstance(_select(_snapshot(), budgets={CAMPAIGN: budget}), Match) is eligible


def test_daily_budget_must_cover_the_price() -> None:
    snap = _snapshot(campaigns=[campaign(daily_budget_cents=Decimal(5))])
    # 5 cents a day, 2.5 a play: today's spending and the open reservations leave the price.
    reserved = Budget(100_000_000, 2_500_000, 0, daily_spent=0)
    assert isinstance(_select(snap, budgets={CAMPAIGN: reserved}), Match)
    spent_today = Budget(100_000_000, 0, 2_500_000, daily_spent=2_500_000)
    assert isinstance(_select(snap, budgets={CAMPAIGN: spent_today}), Match)
    # One micro-cent more, of either, and it does not.
    assert isinstance(_select(snap, budgets={CAMPAIGN: Budget(100_000_000, 2_500_001, 0)}), NoMatch)
    both = Budget(100_000_000, 2_500_000, 1, daily_spent=1)
    assert isinstance(_select(snap, budgets={CAMPAIGN: both}), NoMatch)
    # Spending of earlier days does not count against today's limit.
    earlier = Budget(100_000_000, 0, 90_000_000, daily_spent=0)
    assert isinstance(_select(snap, budgets={CAMPAIGN: earlier}), Match)


@pytest.mark.parametrize(
    ("min_price", "outcome"),
    [
        (0, "match"),
        (2_500_000, "match"),  # equal to the price reaches it
        (2_500_001, "below_minimum"),
    ],
)
def test_minimum_bid(min_price: int, outcome: str) -> None:
    result = _select(_snapshot(), min_price_micros=min_price)
    if outcome == "match":
        assert isinstance(result, Match)
    else:
        assert result == NoMatch("below_minimum")


@pytest.mark.parametrize("min_price", [0, 1])
def test_a_play_priced_at_nothing_is_not_eligible(min_price: int) -> None:
    """0.000001 cents CPM x 10 / 1000 rounds to 0 micro-cents: never offered (an accept must
    pay more than 0), and a request with no minimum is not told it missed one (404, not 422)."""
    snap = _snapshot(campaigns=[campaign(cpm_cents=Decimal("0.000001"))])
    assert _select(snap, min_price_micros=min_price) == NoMatch("no_eligible")


def test_nothing_eligible_is_not_below_minimum() -> None:
    # Nothing can serve at all: "no matches", even when a minimum was given (the 404, not 422).
    snap = _snapshot(campaigns=[campaign(status="paused")])
    assert _select(snap, min_price_micros=10**12) == NoMatch("no_eligible")


def test_a_campaign_the_screen_cannot_show_does_not_hide_one_below_the_minimum() -> None:
    """docs/contract.md#3-matching-and-price: 422 when something is eligible but nothing
    reaches the minimum. A static screen with a better-paying video-only campaign and a
    showable one below the minimum gets the 422, not a 404: the campaign it cannot show never
    counts as reaching the minimum."""
    static_only = Targeting(screen_ids=[SCREEN_STATIC])
    snap = _snapshot(
        campaigns=[
            campaign(id=CAMPAIGN, cpm_cents=Decimal(1000), targeting=static_only),
            campaign(id=CAMPAIGN_B, cpm_cents=Decimal(300), targeting=static_only),
        ],
        creatives=[
            _only("video", "https://cdn.example/v.mp4", CAMPAIGN),
            creative(
                id=uid(10, 6),
                campaign_id=CAMPAIGN_B,
                kind="image",
                url="https://cdn.example/i.jpg",
            ),
        ],
    )
    served = _select(snap, SCREEN_STATIC)
    assert isinstance(served, Match)
    assert served.campaign.id == CAMPAIGN_B
    above = served.price_micros + 1
    assert _select(snap, SCREEN_STATIC, min_price_micros=above) == NoMatch("below_minimum")


def test_a_campaign_below_the_minimum_the_screen_cannot_show_is_not_eligible() -> None:
    """Nothing the static screen can show: no matches (404), not "below the minimum" (422),
    whether the campaign targets the screen or not."""
    for targeting in (Targeting(), Targeting(screen_ids=[SCREEN_STATIC])):
        snap = _snapshot(
            campaigns=[campaign(targeting=targeting)],
            creatives=[_only("video", "https://cdn.example/v.mp4")],
        )
        outcome = _select(snap, SCREEN_STATIC, min_price_micros=10**12)
        assert isinstance(outcome, NoMatch)
        assert outcome.reason in ("no_eligible", "no_compatible_asset")


def test_an_openrtb_slot_with_an_exact_fit_below_the_floor_is_no_bid_not_a_size_mismatch() -> None:
    """docs/contract.md#6-openrtb-path: nbr 0 is for "a compatible asset exists but none has exactly
    w x h"; a campaign that fits exactly but pays less than the floor makes it "minimum not met"
    (204), whatever a better-paying campaign of the wrong size says."""
    snap = _snapshot(
        campaigns=[
            campaign(id=CAMPAIGN, cpm_cents=Decimal(1000)),
            campaign(id=CAMPAIGN_B, cpm_cents=Decimal(300)),
        ],
        creatives=[
            creative(id=uid(10, 5), campaign_id=CAMPAIGN, width=1280, height=720),
            creative(id=uid(10, 6), campaign_id=CAMPAIGN_B),
        ],
    )
    slot = VideoSlot(1920, 1080, None)
    fits = _select(snap, slot=slot, audience=Decimal(10))
    assert isinstance(fits, Match)
    assert fits.campaign.id == CAMPAIGN_B
    above = fits.price_micros + 1
    outcome = _select(snap, slot=slot, audience=Decimal(10), min_price_micros=above)
    assert outcome == NoMatch("below_minimum")
    assert _select(snap, slot=VideoSlot(640, 360, None), audience=Decimal(10)) == NoMatch(
        "resolution_mismatch"
    )


# -- bounds: no play drains a budget ---------------------------------------------------------


def test_a_campaign_never_serves_a_play_that_costs_more_than_its_cap() -> None:
    # 250 cents CPM x 10 viewers / 1000 = 2.5 cents a play on the moving screen.
    capped = campaign(max_price_per_play_cents=Decimal("2.499999"))
    cheaper = campaign(id=CAMPAIGN_B, name="Cheaper", cpm_cents=Decimal(100))
    creatives = [creative(), creative(id=uid(9, 5), campaign_id=CAMPAIGN_B)]
    assert _select(_snapshot(campaigns=[capped], creatives=creatives[:1])) == NoMatch("no_eligible")
    # Skipped, not priced down: the next campaign wins at its own price (1 cent).
    outcome = _select(_snapshot(campaigns=[capped, cheaper], creatives=creatives))
    assert isinstance(outcome, Match)
    assert (outcome.campaign.id, outcome.price_micros) == (CAMPAIGN_B, 1_000_000)
    at_cap = _select(
        _snapshot(campaigns=[campaign(max_price_per_play_cents=Decimal("2.5"))]),
    )
    assert isinstance(at_cap, Match)
    assert at_cap.price_micros == 2_500_000


def test_the_cap_applies_to_an_openrtb_audience_too() -> None:
    snap = _snapshot(campaigns=[campaign(max_price_per_play_cents=Decimal(25))])
    # 250 x 100 / 1000 = 25 cents: at the cap; 100.0001 viewers: above it.
    assert isinstance(_select(snap, audience=Decimal(100)), Match)
    assert _select(snap, audience=Decimal("100.0001")) == NoMatch("no_eligible")


def test_an_openrtb_audience_above_the_publishers_bound_is_no_bid() -> None:
    bounded = _snapshot(
        publishers=[publisher(max_audience_per_play=Decimal(1000)), publisher(id=PUB_OTHER)]
    )
    assert isinstance(_select(bounded, audience=Decimal(1000)), Match)
    assert _select(bounded, audience=Decimal("1000.0001")) == NoMatch("audience_above_bound")
    # Without a bound of its own a publisher has the default: 50,000 viewers.
    default = _snapshot()
    assert isinstance(_select(default, audience=Decimal(50_000)), Match)
    assert _select(default, audience=Decimal(50_001)) == NoMatch("audience_above_bound")
    # The other publisher's bound is its own.
    assert isinstance(_select(bounded, SCREEN_OTHER_PUB, audience=Decimal(5000)), Match)
