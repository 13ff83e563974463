"""POST /offers/response/{offer_id}: the publisher accepts or rejects an offer.

Validation happens here; `HotState.respond` decides atomically (exactly one answer wins, only
the screen's publisher may answer, an expired offer is not found) and settles the budget.
"""

from __future__ import annotations

import logging
from decimal import Decimal
from typing import Any, Literal

import msgspec
from litestar import Request, post
from litestar.params import FromPath
from litestar.types import ASGIApp

from bidder.core import _demo
from bidder.core._common import (
    CORE_PREFIX,
    MAX_BODY_BYTES,
    Caller,
    authorize_key,
    hot_state_errors,
    json_body_answer,
    optional_text,
    read_json_object,
)
from bidder.errors import BadRequest, NotFound, echoed
from bidder.http.asgi import Answer, HttpCall
from bidder.http.web import call_of, runtime_of
from bidder.runtime import Runtime
from matching.inventory import MAX_AMOUNT_CENTS, canonical_uuid
from matching.money import (
    MoneyError,
    cents_to_micros,
    micros_to_cents,
    parse_cents,
    split_gross,
)
from store.hot import NotAnswered
from store.hot.ids import random_uuid

log = logging.getLogger("bidder.core")

OFFER_RESPONSE = f"{CORE_PREFIX}/offers/response/{{offer_id:str}}"
OFFER_NOT_FOUND = "Offer not found, expired, or access denied"
MAX_REASON_CHARS = 500

Action = Literal["accept", "reject"]


class OfferResponse(msgspec.Struct, kw_only=True):
    """The body of an answer to an offer, as `answer_offer` reads it field by field (so that each
    problem gets its own message); the OpenAPI document describes the body with it."""

    action: Action
    #: Required to accept: above 0, up to the bid, at most 6 decimal places; a JSON number.
    accepted_price_cents: Decimal | msgspec.UnsetType = msgspec.UNSET
    #: A reject's reason: up to 500 characters, without U+0000.
    rejection_reason: str | msgspec.UnsetType | None = msgspec.UNSET


class Accepted(msgspec.Struct, kw_only=True):
    """An accepted offer: the deal, its billing record's id and the price split."""

    success: bool
    action: Literal["accepted"]
    deal_id: str
    billing_id: str
    net_price_cents: Decimal
    commission_cents: Decimal
    gross_price_cents: Decimal
    message: str
    billing_code: str | None


class Rejected(msgspec.Struct, kw_only=True):
    """A rejected offer; `rejection_reason` echoes the reason given ("" for none)."""

    success: bool
    action: Literal["rejected"]
    message: str
    rejection_reason: str
    billing_code: str | None


def _action(body: dict[str, Any]) -> Action:
    action = body.get("action")
    if action == "accept":
        return "accept"
    if action == "reject":
        return "reject"
    if action is None:
        raise BadRequest("action is required: 'accept' or 'reject'")
    raise BadRequest(f"Invalid action {echoed(action)}: must be 'accept' or 'reject'")


def _accepted_micros(body: dict[str, Any]) -> int:
    """accepted_price_cents: a positive JSON number with at most 6 decimal places."""
    raw = body.get("accepted_price_cents")
    if raw is None:
        raise BadRequest("accepted_price_cents is required when action is 'accept'")
    if isinstance(raw, str):
        raise BadRequest("accepted_price_cents must be a JSON number, not a string")
    try:
        cents = parse_cents(raw)
    except MoneyError as exc:
        raise BadRequest(f"accepted_price_cents {exc}") from None
    if cents <= 0:
        raise BadRequest("accepted_price_cents must be greater than 0")
    if cents > MAX_AMOUNT_CENTS:
        raise BadRequest("accepted_price_cents exceeds the offer's bid_price_cents")
    try:
        return cents_to_micros(cents)
    except MoneyError as exc:
        raise BadRequest(f"accepted_price_cents {exc}") from None


def _accepted_body(
    deal_id: str, billing_id: str, gross: int, net: int, commission: int, billing_code: str | None
) -> Accepted:
    return Accepted(
        success=True,
        action="accepted",
        deal_id=deal_id,
        billing_id=billing_id,
        net_price_cents=micros_to_cents(net),
        commission_cents=micros_to_cents(commission),
        gross_price_cents=micros_to_cents(gross),
        message="Offer accepted: deal created and billed. Confirm playout with this deal_id.",
        billing_code=billing_code,
    )


def _rejected_body(reason: str | None, billing_code: str | None) -> Rejected:
    return Rejected(
        success=True,
        action="rejected",
        message="Offer rejected and removed",
        # The contract types the echo as a string: "" when no reason was given.
        rejection_reason=reason if reason is not None else "",
        billing_code=billing_code,
    )


def _above_bid(bid_micros: int) -> BadRequest:
    return BadRequest(
        "accepted_price_cents must not exceed the offer's bid_price_cents "
        f"({micros_to_cents(bid_micros)})"
    )


def _demo_answer(action: Action, accepted: int, reason: str | None) -> Answer:
    """Demo offer: same validation, fixed ids, nothing stored."""
    if action == "reject":
        return json_body_answer(_rejected_body(reason, _demo.DEMO_BILLING_CODE))
    if accepted > _demo.DEMO_PRICE_MICROS:
        raise _above_bid(_demo.DEMO_PRICE_MICROS)
    net, commission = split_gross(accepted, _demo.DEMO_COMMISSION_RATE)
    return json_body_answer(
        _accepted_body(
            _demo.DEMO_DEAL_ID,
            _demo.DEMO_BILLING_ID,
            accepted,
            net,
            commission,
            _demo.DEMO_BILLING_CODE,
        )
    )


async def _answer(
    caller: Caller, offer_id: str, action: Action, accepted: int, reason: str | None
) -> Answer:
    rt = caller.rt
    publisher = caller.snapshot.publishers.get(caller.publisher_id)
    rate = publisher.commission_rate if publisher else rt.settings.offers.default_commission_rate
    billing_id = random_uuid()
    net, commission = split_gross(accepted, rate) if action == "accept" else (0, 0)
    if action == "accept":
        payload: dict[str, Any] = {
            "billing_id": billing_id,
            "gross_micros": accepted,
            "commission_micros": commission,
            "net_micros": net,
            "commission_rate": str(rate),
        }
    else:
        payload = {"rejection_reason": reason}
    with hot_state_errors():
        answered = await rt.hot.respond(
            offer_id, caller.publisher_id, action, caller.now, payload, accepted_micros=accepted
        )
    if isinstance(answered, NotAnswered):
        if answered.reason == "above_bid":
            raise _above_bid(int(answered.detail))
        if answered.detail == "over_total":  # an operator lowered the budget since the offer
            log.warning(
                "accept refused: the campaign's lowered budget cannot pay it; offer withdrawn",
                extra={"offer_id": offer_id},
            )
        raise NotFound(OFFER_NOT_FOUND)
    rt.budgets.note(answered.campaign_id, answered.budget, answered.shard)
    if action == "reject":
        rt.metrics.count_offer("rejected")
        return json_body_answer(_rejected_body(reason, answered.billing_code))
    rt.metrics.count_offer("accepted")
    deal_id = answered.deal_id
    body = _accepted_body(deal_id, billing_id, accepted, net, commission, answered.billing_code)
    return json_body_answer(body)


async def answer_offer(rt: Runtime, call: HttpCall, offer_id: str) -> Answer:
    """Accept (`accepted_price_cents` required) or reject (optional `rejection_reason`)."""
    caller = authorize_key(rt, call.header(b"authorization"))
    body = await read_json_object(call)
    action = _action(body)
    accepted = _accepted_micros(body) if action == "accept" else 0
    reason = None
    if action == "reject":
        reason = optional_text(body, "rejection_reason", MAX_REASON_CHARS)
    if offer_id == _demo.DEMO_OFFER_ID:
        return _demo_answer(action, accepted, reason)
    # A UUID in another form (upper case, braces, no hyphens) names the same offer.
    return await _answer(caller, canonical_uuid(offer_id), action, accepted, reason)


# Serves only what bidder.http.front passes on to Litestar; the same function either way.
@post(OFFER_RESPONSE, status_code=200, request_max_body_size=MAX_BODY_BYTES)
async def respond_to_offer(request: Request[Any, Any, Any], offer_id: FromPath[str]) -> ASGIApp:
    """Accept (`accepted_price_cents` required) or reject (optional `rejection_reason`)."""
    return await answer_offer(runtime_of(request), call_of(request), offer_id)


routes = [respond_to_offer]
