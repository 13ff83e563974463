"""A campaign with its live budget (`GET /admin/v1/campaigns/{id}`) and budget top-ups
(`POST /admin/v1/campaigns/{id}/budget`).

The total lives in Postgres; reserved and spent live in Redis, where the Lua scripts keep them
exact. A top-up raises the Postgres total and sets the Redis total at once, and folds it into
this worker's budget view, so the next offer on this worker and the answer to this request
already see it (the inventory reload writes the same value on every worker). A top-up
Postgres committed is answered 200 even when Redis then fails: it has happened, and the reload
brings Redis the total.
"""

from __future__ import annotations

import logging
import re
from decimal import Decimal
from typing import Any, NamedTuple

import msgspec
from litestar import Request, Response, get, post
from litestar.params import FromPath

from bidder.admin._common import audit, decode, json_response, path_uuid
from bidder.errors import BadRequest, NotFound, ServiceError
from bidder.http.web import postgres, runtime_of
from bidder.runtime import Budgets, utcnow
from matching.engine import Budget
from matching.inventory import MAX_AMOUNT_CENTS, Campaign
from matching.money import CENT_PLACES, cents_to_micros, micros_to_cents
from matching.snapshot import campaign_shard
from store.errors import REDIS_DOWN
from store.hot import HotState, sum_parts
from store.inventory_repo import KeyReused, TotalTooHigh, add_budget, fetch_campaign
from store.postgres import Conn

log = logging.getLogger("bidder.admin")
#: Longest idempotency key of a top-up; keys are visible ASCII (a UUID, a ticket number).
MAX_KEY_CHARS = 255
_KEY_CHARS = re.compile(rf"[\x21-\x7e]{{1,{MAX_KEY_CHARS}}}")
#: What a refused top-up body is called in the 400's message.
TOP_UP = "budget top-up"


class TopUp(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    add_cents: Decimal


class BudgetView(msgspec.Struct, kw_only=True):
    total_cents: Decimal
    reserved_cents: Decimal
    spent_cents: Decimal
    remaining_cents: Decimal


class CampaignView(Campaign, kw_only=True):
    """A campaign as the admin API shows it: its inventory fields and its live `budget` (null
    when Redis cannot be read)."""

    budget: BudgetView | None


def budget_view(campaign: Campaign, live: Budget | None) -> BudgetView:
    """Live figures from Redis; a campaign not yet copied there shows its stored total."""
    if live is None:
        live = Budget(cents_to_micros(campaign.budget_cents, exact=False), 0, 0)
    return BudgetView(
        total_cents=micros_to_cents(live.total),
        reserved_cents=micros_to_cents(live.reserved),
        spent_cents=micros_to_cents(live.spent),
        remaining_cents=micros_to_cents(live.remaining),
    )


async def with_budget(
    hot: HotState,
    campaign: Campaign,
    *,
    redis_optional: bool = False,
    view: Budgets | None = None,
) -> CampaignView:
    """What the admin API shows of a campaign: its fields and its live `budget`.
    `redis_optional`: when Redis cannot be read, `budget` is null instead of the error (the
    answer to a top-up that committed must say it did). `view`: the worker's budget view, which
    takes the figures read, so its matching sees a top-up at once."""
    fields = msgspec.structs.asdict(campaign)
    mark = view.mark() if view is not None else 0
    try:
        # Every budget slice of the campaign (BUDGET_SLICES), summed: its true figures.
        parts = await hot.read_campaign_parts(campaign.id, utcnow())
    except REDIS_DOWN:
        if not redis_optional:
            raise
        return CampaignView(**fields, budget=None)
    if view is not None:
        view.fold_campaign(campaign.id, parts, mark)  # the campaign's slices, read now
    live = sum_parts(campaign_shard(campaign.id), parts)
    return CampaignView(**fields, budget=budget_view(campaign, live))


def check_add(add: Decimal) -> None:
    """A top-up amount: positive, at most the largest total, at most 6 decimals; else 400."""
    if not add.is_finite() or add <= 0:
        raise BadRequest("add_cents must be a positive amount of cents")
    # Bounded before quantize, which refuses (InvalidOperation) a number past its precision.
    if add > MAX_AMOUNT_CENTS:
        raise BadRequest(f"the total budget would exceed {MAX_AMOUNT_CENTS} cents")
    if add != add.quantize(CENT_PLACES):
        raise BadRequest("add_cents has more than 6 decimal places of a cent")


def read_top_up(body: bytes) -> Decimal:
    """The amount of a top-up body `{"add_cents": ...}`, as `POST .../budget` and `bidder
    campaigns top-up` both read it (the command passes its argument as the JSON string form):
    a JSON number, or a string holding one as JSON writes it, positive, within the largest
    total, at most 6 decimals; else 400 saying why."""
    amount = decode(body, TopUp, TOP_UP, optional=True).add_cents
    check_add(amount)
    return amount


async def load_campaign(conn: Conn, campaign_id: str) -> Campaign:
    campaign = await fetch_campaign(conn, campaign_id)
    if campaign is None:
        raise NotFound(f"Unknown campaign {campaign_id}")
    return campaign


class ToppedUp(NamedTuple):
    campaign: Campaign
    #: The idempotency key had already done this top-up: nothing was added this time.
    replayed: bool


def check_idempotency_key(key: str) -> str:
    """An idempotency key as sent, or 400 when it cannot be one."""
    if not _KEY_CHARS.fullmatch(key):
        raise BadRequest(
            f"Idempotency-Key must be 1 to {MAX_KEY_CHARS} visible ASCII characters "
            "(no spaces), such as a UUID"
        )
    return key


async def apply_top_up(
    conn: Conn,
    hot: HotState,
    campaign_id: str,
    add: Decimal,
    idempotency_key: str | None = None,
) -> ToppedUp:
    """Add `add` cents to the campaign's total (the admin API's and `bidder campaigns
    top-up`'s way); the campaign as it is now.

    Once Postgres has committed the new total the top-up has happened, whatever Redis does:
    this returns (a 503 would make an operator top it up twice). The Redis total is set at
    once when Redis answers, else by every worker's next inventory reload (the top-up bumped
    the inventory version).

    With `idempotency_key`, a retry of a committed top-up (same key, campaign and amount)
    adds nothing and answers the campaign as it is now, `replayed`; the same key with another
    campaign or amount is 409 and changes nothing."""
    check_add(add)
    # Read before the change: once it is committed, nothing may turn the answer into a failure.
    campaign = await load_campaign(conn, campaign_id)
    try:
        added = await add_budget(conn, campaign_id, add, MAX_AMOUNT_CENTS, idempotency_key)
    except TotalTooHigh:
        raise BadRequest(f"the total budget would exceed {MAX_AMOUNT_CENTS} cents") from None
    except KeyReused as exc:
        raise ServiceError(
            "Idempotency-Key was already used for another top-up "
            f"(campaign {exc.campaign_id}, add_cents {exc.add_cents}); nothing was added",
            status=409,
            code="CONFLICT",
        ) from None
    if added is None:
        raise NotFound(f"Unknown campaign {campaign_id}")
    total, version, replayed = added
    audit.info(
        "budget top-up replayed: its idempotency key had already added it"
        if replayed
        else "budget topped up",
        extra={"campaign_id": campaign_id, "add_cents": str(add), "total": str(total)},
    )
    # Also on a replay: the first attempt may have committed and then lost its Redis write
    # (its process died, Redis failed), and the retry is when the operator looks at the total.
    try:
        await hot.set_budget_total(
            campaign_id, campaign_shard(campaign_id), cents_to_micros(total), version
        )
    except REDIS_DOWN as exc:
        log.warning(
            "top-up committed; its Redis total follows with the next inventory reload",
            extra={"campaign_id": campaign_id, "error": type(exc).__name__},
        )
    return ToppedUp(msgspec.structs.replace(campaign, budget_cents=total), replayed)


@get("/campaigns/{campaign_id:str}")
async def get_campaign(
    request: Request[Any, Any, Any], campaign_id: FromPath[str]
) -> Response[bytes]:
    campaign_id = path_uuid(campaign_id, "campaign id")
    async with postgres(request) as conn:
        campaign = await load_campaign(conn, campaign_id)
    # `budget` null when Redis cannot be read, as a top-up answers: the stored fields still
    # answer the operator.
    return json_response(await with_budget(runtime_of(request).hot, campaign, redis_optional=True))


@post("/campaigns/{campaign_id:str}/budget", status_code=200)
async def top_up(request: Request[Any, Any, Any], campaign_id: FromPath[str]) -> Response[bytes]:
    """Add `add_cents` to the campaign's total budget; answers the campaign as GET does, with
    `budget` null when Redis cannot be read (the top-up is done all the same). An
    `Idempotency-Key` header makes a retry safe: the same key again adds nothing and answers
    with `Idempotent-Replayed: true`."""
    campaign_id = path_uuid(campaign_id, "campaign id")
    key = request.headers.get("idempotency-key")
    if key is not None:
        check_idempotency_key(key)
    add = read_top_up(await request.body())
    rt = runtime_of(request)
    async with postgres(request) as conn:
        done = await apply_top_up(conn, rt.hot, campaign_id, add, key)
    # This worker's matching sees the new total now, not at its next budget refresh.
    shown = await with_budget(rt.hot, done.campaign, redis_optional=True, view=rt.budgets)
    response = json_response(shown)
    if done.replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return response


routes = [get_campaign, top_up]
