"""GET /offers/request/{screen_id} and /offers/request/external-id/{external_id}.

Thin handlers: check the key and the query, find the screen, let `bidder.offers.make_offer`
select and reserve in one atomic step, and render the Offer object.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from typing import Any

import msgspec
from litestar import Request, get
from litestar.params import FromPath
from litestar.types import ASGIApp

from bidder.core import _demo
from bidder.core._common import (
    CORE_PREFIX,
    Caller,
    authorize_key,
    hot_state_errors,
    json_body_answer,
    query_flag,
)
from bidder.core._vast import demo_vast, offer_vast
from bidder.errors import BadRequest, Forbidden, NotFound, Unprocessable, echoed
from bidder.http.asgi import Answer, HttpCall
from bidder.http.web import call_of, iso_utc, runtime_of
from bidder.offers import MadeOffer, make_offer
from bidder.runtime import Runtime
from matching.engine import Blocks, blocks_of
from matching.inventory import DEFAULT_CATTAX, MAX_CATEGORY_CHARS, canonical_uuid
from matching.money import MoneyError, cents_to_micros, micros_to_cents, parse_cents
from matching.snapshot import ScreenInfo

NO_MATCHES = "No matches available"
BELOW_MINIMUM = "No matches meet the minimum bid requirement"
NOT_ACTIVATED = (
    "This account is not activated for external IDs; identify screens by their UUID, "
    "or ask the onboarding team to activate external IDs"
)
OFFER_BY_SCREEN_ID = f"{CORE_PREFIX}/offers/request/{{screen_id:str}}"
OFFER_BY_EXTERNAL_ID = f"{CORE_PREFIX}/offers/request/external-id/{{external_id:str}}"
# Above any price a campaign can pay (10 billion EUR); keeps Decimal arithmetic bounded.
_MAX_CENTS = Decimal(10) ** 12


class Offer(msgspec.Struct):
    """The contract's Offer object; `vast` only when the request asked for it."""

    offer_id: str
    bid_price_cents: Decimal
    asset_url: str
    expires_at: str
    billing_code: str | None
    vast: str | msgspec.UnsetType = msgspec.UNSET


class _Query(msgspec.Struct, frozen=True):
    demo: bool
    vast: bool
    min_price_micros: int
    blocks: Blocks | None = None


#: The most items of `blocked_domains` and of `blocked_categories`.
MAX_BLOCKED_ITEMS = 100
#: What one item may be: a domain (letters, digits, `-`, `.`; at most 253 characters) and a
#: category id (letters, digits, `-`, `_`, `.`; at most 64 characters).
_DOMAIN = re.compile(r"[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.?")
_CATEGORY = re.compile(r"[A-Za-z0-9_.-]+")
_ITEM_CHARS = {"blocked_domains": 253, "blocked_categories": MAX_CATEGORY_CHARS}


def _blocked(call: HttpCall, name: str, pattern: re.Pattern[str]) -> list[str]:
    """A comma-separated block list (blanks around items ignored, empty items skipped)."""
    raw = call.query(name)
    if raw is None:
        return []
    items = [item.strip() for item in raw.split(",") if item.strip()]
    if len(items) > MAX_BLOCKED_ITEMS:
        raise BadRequest(f"{name} holds at most {MAX_BLOCKED_ITEMS} items, got {len(items)}")
    limit = _ITEM_CHARS[name]
    for item in items:
        if len(item) > limit or pattern.fullmatch(item) is None:
            raise BadRequest(
                f"{name} must be a comma-separated list of "
                f"{'domains' if name == 'blocked_domains' else 'category ids'} "
                f"(each at most {limit} characters), got {echoed(item)}"
            )
    return items


def _blocks(call: HttpCall) -> Blocks | None:
    """`blocked_domains` and `blocked_categories` (in `blocked_cattax`, default 1)."""
    raw_cattax = call.query("blocked_cattax")
    cattax = DEFAULT_CATTAX
    if raw_cattax is not None:
        if not raw_cattax.isdigit() or not 0 < int(raw_cattax[:10]) <= 2**31 - 1:
            raise BadRequest(
                f"blocked_cattax must be a taxonomy number such as 1, got {echoed(raw_cattax)}"
            )
        cattax = int(raw_cattax)
    return blocks_of(
        _blocked(call, "blocked_domains", _DOMAIN),
        _blocked(call, "blocked_categories", _CATEGORY),
        cattax,
    )


def _min_bid_micros(call: HttpCall) -> int:
    """`min_bid_cents` in micro-cents; finer than a micro-cent rounds up (a floor is a floor)."""
    raw = call.query("min_bid_cents")
    if raw is None:
        return 0
    try:
        cents = parse_cents(raw)
    except MoneyError:
        raise BadRequest(
            f"min_bid_cents must be a number of cents such as 2.5, got {echoed(raw)}"
        ) from None
    if cents < 0:
        raise BadRequest(f"min_bid_cents must not be negative, got {echoed(raw)}")
    return cents_to_micros(min(cents, _MAX_CENTS), exact=False)


_NO_QUERY = _Query(demo=False, vast=False, min_price_micros=0)


def _query(call: HttpCall) -> _Query:
    if not call.scope.get("query_string"):
        return _NO_QUERY
    return _Query(
        demo=query_flag(call, "demo"),
        vast=query_flag(call, "vast"),
        min_price_micros=_min_bid_micros(call),
        blocks=_blocks(call),
    )


def _no_match(message: str, status: int) -> NotFound | Unprocessable:
    if status == 422:
        return Unprocessable(message, include_status=True)
    return NotFound(message, include_status=True)


def _demo_offer(caller: Caller, query: _Query) -> Answer:
    """The fixed demo offer; it honours min_bid_cents so a player can rehearse a 422 too."""
    if query.min_price_micros > _demo.DEMO_PRICE_MICROS:
        raise _no_match(BELOW_MINIMUM, 422)
    offer = Offer(
        offer_id=_demo.DEMO_OFFER_ID,
        bid_price_cents=micros_to_cents(_demo.DEMO_PRICE_MICROS),
        asset_url=_demo.DEMO_ASSET_URL,
        expires_at=iso_utc(caller.now + timedelta(seconds=_demo.DEMO_TTL_SECONDS)),
        billing_code=_demo.DEMO_BILLING_CODE,
    )
    if query.vast:
        # The demo screen's id, whichever screen asked with demo=true: the contract wants the
        # two ways into demo mode to answer identically.
        offer.vast = demo_vast(caller, _demo.DEMO_SCREEN_ID)
    return json_body_answer(offer)


async def _offer_for(caller: Caller, screen: ScreenInfo | None, query: _Query) -> Answer:
    rt = caller.rt
    if screen is None or screen.publisher_id != caller.publisher_id:
        rt.metrics.count_offer("no_match")
        raise _no_match(NO_MATCHES, 404)
    ttl = rt.settings.offers.ttl_seconds
    with hot_state_errors():
        made = await make_offer(
            rt,
            caller.snapshot,
            screen,
            caller.now,
            channel="core",
            ttl_seconds=ttl,
            min_price_micros=query.min_price_micros,
            blocks=query.blocks,
        )
    if not isinstance(made, MadeOffer):
        if made.reason == "below_minimum":
            rt.metrics.count_offer("below_min")
            raise _no_match(BELOW_MINIMUM, 422)
        rt.metrics.count_offer("no_match")
        raise _no_match(NO_MATCHES, 404)
    rt.metrics.count_offer("made")
    match = made.match
    offer = Offer(
        offer_id=made.offer_id,
        bid_price_cents=micros_to_cents(match.price_micros),
        asset_url=match.creative.url,
        expires_at=iso_utc(made.expires_at),
        billing_code=caller.snapshot.billing_code(
            match.campaign.advertiser_id, screen.publisher_id
        ),
    )
    if query.vast:
        offer.vast = offer_vast(caller, screen, made, offer.billing_code, ttl)
    return json_body_answer(offer)


async def offer_by_screen_id(rt: Runtime, call: HttpCall, screen_id: str) -> Answer:
    """An offer for a screen identified by its UUID (the recommended way)."""
    caller = authorize_key(rt, call.header(b"authorization"))
    query = _query(call)
    if query.demo or screen_id == _demo.DEMO_SCREEN_ID:
        return _demo_offer(caller, query)
    screens = caller.snapshot.screens
    # A UUID in another form (upper case, braces, no hyphens) names the same screen.
    screen = screens.get(screen_id) or screens.get(canonical_uuid(screen_id))
    return await _offer_for(caller, screen, query)


async def offer_by_external_id(rt: Runtime, call: HttpCall, external_id: str) -> Answer:
    """An offer for a screen identified by the publisher's own id (an in-memory index)."""
    caller = authorize_key(rt, call.header(b"authorization"))
    query = _query(call)
    if query.demo or external_id == _demo.DEMO_SCREEN_ID:
        return _demo_offer(caller, query)
    publisher = caller.snapshot.publishers.get(caller.publisher_id)
    if publisher is None or not publisher.external_ids_enabled:
        raise Forbidden(NOT_ACTIVATED, include_status=True)
    screen = caller.snapshot.screens_by_external_id.get((caller.publisher_id, external_id))
    if screen is None:
        caller.rt.metrics.count_offer("no_match")
        # `status` too: the contract's errors section gives every 404 of an offer request one
        # (its endpoint line shows only `{error}`; a field more satisfies both readings).
        raise NotFound(
            f"Screen not found for external id {echoed(external_id)}", include_status=True
        )
    return await _offer_for(caller, screen, query)


# The routes below serve only what bidder.http.front passes on to Litestar (paths it does not
# recognise as its own, such as one with a trailing slash); both call the same functions.


@get(OFFER_BY_SCREEN_ID)
async def request_offer(request: Request[Any, Any, Any], screen_id: FromPath[str]) -> ASGIApp:
    """An offer for a screen identified by its UUID (the recommended way)."""
    return await offer_by_screen_id(runtime_of(request), call_of(request), screen_id)


@get(OFFER_BY_EXTERNAL_ID)
async def request_offer_by_external_id(
    request: Request[Any, Any, Any], external_id: FromPath[str]
) -> ASGIApp:
    """An offer for a screen identified by the publisher's own id (an in-memory index)."""
    return await offer_by_external_id(runtime_of(request), call_of(request), external_id)


routes = [request_offer, request_offer_by_external_id]
