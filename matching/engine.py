"""Eligibility, pricing and selection: which campaign and creative a screen gets, at what price.

Pure: no I/O, no clock reads. `now` and the budget view are passed in. A no-match is a normal
return value (`NoMatch` with a reason), never an exception.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Literal

import msgspec

from matching.money import (
    AUDIENCE_UNITS_PER_VIEWER,
    play_price_from_units,
    play_price_micros,
    scaled_exactly,
)
from matching.snapshot import CampaignInfo, CreativeInfo, ScreenInfo, Snapshot

NoMatchReason = Literal[
    "no_eligible",  # nothing can serve this screen now
    "below_minimum",  # something is eligible, but nothing reaches the minimum bid
    "no_compatible_asset",  # OpenRTB: no asset of a kind the screen type takes
    "resolution_mismatch",  # OpenRTB: compatible assets, none exactly w x h
    "mime_not_allowed",  # OpenRTB: exact-size assets, none of an accepted MIME type
    "audience_above_bound",  # OpenRTB: an audience above the publisher's max_audience_per_play
]


class Budget(msgspec.Struct, frozen=True):
    """A campaign's live budget state in micro-cents, as last seen by this worker. The answer
    types here are frozen Structs: built on every request (thousands a second for budgets), a
    Struct costs a tenth of a frozen dataclass to make."""

    total: int
    reserved: int
    spent: int
    #: Today's spending of the offers made today. A daily limit covers it and every open
    #: reservation (`reserved`), yesterday's last ones too for an offer's lifetime past
    #: midnight: never looser than today's reservations alone.
    daily_spent: int = 0

    @property
    def remaining(self) -> int:
        return self.total - self.reserved - self.spent

    def share_left(self) -> Decimal:
        return Decimal(self.remaining) / Decimal(self.total) if self.total > 0 else Decimal(0)


class Match(msgspec.Struct, frozen=True):
    campaign: CampaignInfo
    creative: CreativeInfo
    price_micros: int


class NoMatch(msgspec.Struct, frozen=True):
    reason: NoMatchReason


class VideoSlot(msgspec.Struct, frozen=True):
    """OpenRTB: the exact creative size and the MIME types the SSP takes."""

    width: int
    height: int
    mimes: frozenset[str] | None


class Blocks(msgspec.Struct, frozen=True):
    """What a request will not take: advertisers by domain (OpenRTB `badv`, the Core API's
    `blocked_domains`) and categories as (cattax, id) pairs (`bcat` with the request's `cattax`,
    `blocked_categories`). A blocked domain also blocks its subdomains; in taxonomy 1 a blocked
    tier-1 category (`IAB7`) also blocks its subcategories (`IAB7-1`): the campaign's side of
    both is precomputed in the snapshot (`CampaignInfo.domain_keys`, `category_keys`)."""

    domains: frozenset[str] = frozenset()
    categories: frozenset[tuple[int, str]] = frozenset()

    def excludes(self, campaign: CampaignInfo) -> bool:
        return not (
            self.domains.isdisjoint(campaign.domain_keys)
            and self.categories.isdisjoint(campaign.category_keys)
        )


def blocks_of(domains: Iterable[str], categories: Iterable[str], cattax: int) -> Blocks | None:
    """The Blocks of a request's lists (domains compared in lower case), or None when both are
    empty: the engine then checks nothing."""
    blocked_domains = frozenset(d.strip().lower().rstrip(".") for d in domains) - {""}
    blocked_categories = frozenset((cattax, c.strip()) for c in categories if c.strip())
    if not blocked_domains and not blocked_categories:
        return None
    return Blocks(blocked_domains, blocked_categories)


def covers(campaign: CampaignInfo, budget: Budget | None, price_micros: int) -> bool:
    """Whether the remaining total and daily budget cover one more play at `price_micros`."""
    if budget is None:  # not yet seen by this worker: the reservation script decides
        return campaign.budget_micros >= price_micros
    if budget.remaining < price_micros:
        return False
    daily = campaign.daily_budget_micros
    return daily is None or daily - budget.reserved - budget.daily_spent >= price_micros


def candidates(snapshot: Snapshot, screen: ScreenInfo) -> Iterator[CampaignInfo]:
    """Campaigns that may serve `screen`, highest CPM first (publisher/type list merged with
    the campaigns that target this screen by id)."""
    general = snapshot.candidates.get((screen.type, screen.publisher_id), ())
    targeted = snapshot.candidates_by_screen.get(screen.id)
    if not targeted:
        return iter(general)
    return heapq.merge(general, targeted, key=lambda c: (-c.cpm_cents, c.id))


def pick_creative(
    campaign: CampaignInfo, screen: ScreenInfo, slot: VideoSlot | None = None
) -> CreativeInfo | NoMatchReason:
    """The campaign's best creative for the screen (and the OpenRTB slot), or why none fits.

    Core: the preferred kind among the creatives of the screen's exact size, else the preferred
    kind of any size. OpenRTB: the preferred kind among those of the slot's exact size and an
    accepted MIME type.
    """
    ranked = campaign.creatives_for(screen.type)  # the preferred first
    if not ranked:
        return "no_compatible_asset"
    if slot is None:
        for creative in ranked:
            if creative.width == screen.width and creative.height == screen.height:
                return creative
        return ranked[0]
    sized = False
    for creative in ranked:
        if creative.width == slot.width and creative.height == slot.height:
            if slot.mimes is None or creative.mime_type in slot.mimes:
                return creative
            sized = True
    return "mime_not_allowed" if sized else "resolution_mismatch"


def play_price(campaign: CampaignInfo, audience: Decimal, audience_units: int | None) -> int:
    """cpm x audience / 1000 in micro-cents: integer arithmetic where both are exact integers
    in their units (always, for inventory and 4-decimal audiences), Decimal otherwise."""
    if audience_units is not None and campaign.cpm_micros is not None:
        price = play_price_from_units(campaign.cpm_micros, audience_units)
        if price is not None:
            return price
    return play_price_micros(campaign.cpm_cents, audience)


# How far a request got, to tell "no asset" from "wrong size" from "wrong MIME" (OpenRTB). A
# campaign below the minimum is eligible in every other way, creative included, so it
# outranks them all: something is eligible, only the minimum is not met (Core 422).
_REASON_RANK: dict[NoMatchReason, int] = {
    "no_eligible": 0,
    "no_compatible_asset": 1,
    "resolution_mismatch": 2,
    "mime_not_allowed": 3,
    "below_minimum": 4,
}


def select(
    snapshot: Snapshot,
    screen: ScreenInfo,
    now: datetime,
    budgets: Mapping[str, Budget],
    *,
    audience: Decimal | None = None,
    min_price_micros: int = 0,
    slot: VideoSlot | None = None,
    exclude: Iterable[str] = (),
    blocks: Blocks | None = None,
) -> Match | NoMatch:
    """The best-paying eligible campaign for `screen` (docs/contract.md#3-matching-and-price).

    Price is cpm x audience / 1000; the audience is the screen's unless the OpenRTB request
    gives one, which may not exceed the screen's bound (`max_audience`, its publisher's): no
    bid above it. A campaign whose price per play would exceed its own cap
    (`max_price_micros`) is not eligible. Ties on price go to the larger share of budget left.
    `exclude` names campaigns a reservation already refused this request (budget or frequency
    cap reached); `blocks` the advertisers and categories the request refuses: a blocked
    campaign is not eligible, and the next best one is chosen.
    """
    if not screen.active:
        return NoMatch("no_eligible")
    if audience is None:
        audience, audience_units = screen.audience_per_play, screen.audience_units
    elif audience > screen.max_audience:
        return NoMatch("audience_above_bound")
    else:
        audience_units = scaled_exactly(audience, AUDIENCE_UNITS_PER_VIEWER)
    local = now.astimezone(screen.zone)
    scan = Scan(
        now, local.weekday(), local.hour, budgets, frozenset(exclude), min_price_micros, blocks
    )
    if slot is not None:
        # Only campaigns with a creative of the slot's exact size can match: scan those first.
        # They keep their order, so the match is the one the whole list would give; only when
        # there is none does the whole list run, to tell why (docs/contract.md#6-openrtb-path: 204
        # or nbr 0).
        found = scan.best(
            sized_candidates(snapshot, screen, slot), screen, audience, audience_units, slot
        )
        if isinstance(found, Match) or found.reason == "below_minimum":
            return found  # below the minimum outranks every reason the whole list could give
    return scan.best(candidates(snapshot, screen), screen, audience, audience_units, slot)


def sized_candidates(
    snapshot: Snapshot, screen: ScreenInfo, slot: VideoSlot
) -> Iterator[CampaignInfo]:
    """`candidates` with at least one creative of the slot's exact size for the screen type."""
    size = (slot.width, slot.height)
    general = snapshot.candidates_sized.get(
        (screen.type, screen.publisher_id, slot.width, slot.height), ()
    )
    targeted = snapshot.candidates_by_screen.get(screen.id)
    if not targeted:
        return iter(general)
    sized = [c for c in targeted if size in c.sizes_for(screen.type)]
    return heapq.merge(general, sized, key=lambda c: (-c.cpm_cents, c.id))


class Scan:
    """One request's eligibility rules, applied to a list of candidates. A plain class: made
    on every request, a frozen dataclass costs several times as much to build. `select` runs it
    over the sized candidates first; over the whole list it gives the answer that path must
    agree with."""

    __slots__ = ("blocks", "budgets", "hour", "min_price_micros", "now", "skipped", "weekday")

    def __init__(
        self,
        now: datetime,
        weekday: int,
        hour: int,
        budgets: Mapping[str, Budget],
        skipped: frozenset[str],
        min_price_micros: int,
        blocks: Blocks | None = None,
    ) -> None:
        self.now, self.weekday, self.hour = now, weekday, hour
        self.blocks = blocks
        self.budgets, self.skipped, self.min_price_micros = budgets, skipped, min_price_micros

    def best(
        self,
        campaigns: Iterable[CampaignInfo],
        screen: ScreenInfo,
        audience: Decimal,
        audience_units: int | None,
        slot: VideoSlot | None,
    ) -> Match | NoMatch:
        now, budgets, blocks = self.now, self.budgets, self.blocks
        best: list[tuple[CampaignInfo, CreativeInfo]] = []
        best_price = -1
        furthest: NoMatchReason = "no_eligible"
        for campaign in campaigns:
            price = play_price(campaign, audience, audience_units)
            if best and price < best_price:
                break  # sorted by CPM: nothing further can tie
            if (
                campaign.id in self.skipped
                or not campaign.in_flight(now)
                or not campaign.in_daypart(self.weekday, self.hour)
                or not campaign.admits(screen)
                or (blocks is not None and blocks.excludes(campaign))
                or (campaign.max_price_micros is not None and price > campaign.max_price_micros)
                or not covers(campaign, budgets.get(campaign.id), price)
            ):
                continue
            if price <= 0:
                # A play whose price rounds to nothing is never offered (an accept must pay
                # more than 0): not eligible, whatever the minimum; nothing after pays more.
                break
            creative = pick_creative(campaign, screen, slot)
            if isinstance(creative, str):  # no creative it may show here: not eligible
                if _REASON_RANK[creative] > _REASON_RANK[furthest]:
                    furthest = creative
                continue
            if price < self.min_price_micros:
                # Eligible, but below the minimum; sorted by price, every campaign after this
                # one pays even less. (Checked after the creative: a campaign the screen cannot
                # show is not eligible, and must not turn a 422 into a 404, or a 404 into 422.)
                furthest = "below_minimum"
                break
            best.append((campaign, creative))
            best_price = price
        if not best:
            return NoMatch(furthest)
        if len(best) == 1:
            campaign, creative = best[0]
        else:
            campaign, creative = max(
                best, key=lambda pair: _share_left(pair[0], budgets.get(pair[0].id))
            )
        return Match(campaign=campaign, creative=creative, price_micros=best_price)


def _share_left(campaign: CampaignInfo, budget: Budget | None) -> Decimal:
    if budget is None:
        return Decimal(1)
    total = budget.total or campaign.budget_micros
    return Decimal(total - budget.reserved - budget.spent) / Decimal(total) if total else Decimal(0)
