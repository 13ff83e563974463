"""A campaign with its live budget (`GET /admin/v1/campaigns/{id}`) and budget top-ups
(`POST /admin/v1/campaigns/{id}/budget`).

The total lives in Postgres; reserved and spent live in Redis, where the Lua scripts keep them
exact. A top-up raises the Postgres total and sets the Redis total at once, so the next offer on
this worker and the answer to this request already see it (the inventory reload writes the same
value on every worker).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import msgspec
from litestar import Request, Response, get, post
from litestar.params import FromPath

from bidder.admin._common import audit, json_response, path_uuid, read_body
from bidder.errors import BadRequest, NotFound
from bidder.runtime import utcnow
from bidder.web import postgres, runtime_of
from matching.engine import Budget
from matching.inventory import MAX_AMOUNT_CENTS, Campaign
from matching.money import CENT_PLACES, cents_to_micros, micros_to_cents
from matching.snapshot import campaign_shard
from store.inventory_repo import add_budget, fetch_campaign


class TopUp(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    add_cents: Decimal


class BudgetView(msgspec.Struct, kw_only=True):
    total_cents: Decimal
    reserved_cents: Decimal
    spent_cents: Decimal
    remaining_cents: Decimal


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


async def _campaign_with_budget(request: Request[Any, Any, Any], campaign: Campaign) -> Any:
    budgets = await runtime_of(request).hot.read_budgets(utcnow())
    body = msgspec.to_builtins(campaign, builtin_types=(Decimal,))
    body["budget"] = budget_view(campaign, budgets.get(campaign.id))
    return body


def _check_add(add: Decimal, current: Decimal) -> None:
    if not add.is_finite() or add <= 0:
        raise BadRequest("add_cents must be a positive amount of cents")
    # Bounded before quantize, which refuses (InvalidOperation) a number past its precision.
    if current + add > MAX_AMOUNT_CENTS:
        raise BadRequest(f"the total budget would exceed {MAX_AMOUNT_CENTS} cents")
    if add != add.quantize(CENT_PLACES):
        raise BadRequest("add_cents has more than 6 decimal places of a cent")


@get("/campaigns/{campaign_id:str}")
async def get_campaign(
    request: Request[Any, Any, Any], campaign_id: FromPath[str]
) -> Response[bytes]:
    campaign_id = path_uuid(campaign_id, "campaign id")
    async with postgres(request) as conn:
        campaign = await fetch_campaign(conn, campaign_id)
    if campaign is None:
        raise NotFound(f"Unknown campaign {campaign_id}")
    return json_response(await _campaign_with_budget(request, campaign))


@post("/campaigns/{campaign_id:str}/budget", status_code=200)
async def top_up(request: Request[Any, Any, Any], campaign_id: FromPath[str]) -> Response[bytes]:
    """Add `add_cents` to the campaign's total budget; answers the campaign as GET does."""
    campaign_id = path_uuid(campaign_id, "campaign id")
    body = await read_body(request, TopUp, "budget top-up")
    async with postgres(request) as conn:
        campaign = await fetch_campaign(conn, campaign_id)
        if campaign is None:
            raise NotFound(f"Unknown campaign {campaign_id}")
        _check_add(body.add_cents, campaign.budget_cents)
        added = await add_budget(conn, campaign_id, body.add_cents)
    if added is None:
        raise NotFound(f"Unknown campaign {campaign_id}")
    total, version = added
    rt = runtime_of(request)
    await rt.hot.set_budget_total(
        campaign_id, campaign_shard(campaign_id), cents_to_micros(total), version
    )
    campaign = msgspec.structs.replace(campaign, budget_cents=total)
    audit.info(
        "budget topped up",
        extra={"campaign_id": campaign_id, "add_cents": str(body.add_cents), "total": str(total)},
    )
    return json_response(await _campaign_with_budget(request, campaign))


routes = [get_campaign, top_up]
