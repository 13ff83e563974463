"""`bidder campaigns show|top-up`, `bidder offers show` and `bidder deals show`: the admin API's
campaign view, budget top-up and record views from the command line (docs/contract.md#2-inventory:
operators manage everything through the admin API "and the same operations from the command
line"). Each prints what the admin API answers, as JSON, through the same functions.

`register(subparsers)` adds the commands; each sets `func(args) -> int` (the exit code).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any

import asyncpg
import msgspec

from bidder.admin import (
    CampaignView,
    apply_top_up,
    check_idempotency_key,
    deal_view,
    load_campaign,
    offer_view,
    read_top_up,
    with_budget,
)
from bidder.cli.common import (
    CommandFailed,
    command_settings,
    formatted_json,
    uuid_argument,
    with_connection,
)
from bidder.errors import ServiceError
from matching.inventory import Campaign
from store.errors import REDIS_DOWN
from store.hot import HotState, connect
from store.postgres import Conn

View = Callable[[Conn, HotState], Awaitable[Any]]


class _CliSource:
    """The record views' source for a command: its own connection and Redis client."""

    def __init__(self, conn: Conn, hot: HotState) -> None:
        self.conn, self.hot = conn, hot

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        rows: list[asyncpg.Record] = await self.conn.fetch(sql, *args)
        return rows


def _run(view: View) -> int:
    """Run `view` on Postgres and Redis as the settings name them and print its JSON; the
    admin API's refusals (404, 400, 503) become one-line failures (exit 1)."""
    settings = command_settings()

    async def work(conn: Conn) -> Any:
        redis = connect(
            settings.redis.url, timeout=5.0, max_connections=2, mode=settings.redis.mode
        )
        try:
            return await view(conn, HotState(redis))
        except ServiceError as exc:
            raise CommandFailed(exc.message) from None
        finally:
            await redis.aclose()

    answer = asyncio.run(with_connection(settings, work))
    sys.stdout.buffer.write(formatted_json(answer))
    sys.stdout.buffer.flush()
    return 0


def _redis_down(exc: BaseException) -> str:
    return f"cannot reach Redis at REDIS_URL ({type(exc).__name__}: {exc})"


async def _live(hot: HotState, campaign: Campaign) -> CampaignView:
    """The campaign with its live budget. Unlike the admin API, which answers `budget` null
    when Redis cannot be read, a command fails (exit 1): a script reading `budget` must not
    take a null for an answer."""
    try:
        return await with_budget(hot, campaign)
    except REDIS_DOWN as exc:
        raise CommandFailed(
            f"{_redis_down(exc)}: the campaign's live budget is kept there"
        ) from None


def _campaign_show(args: argparse.Namespace) -> int:
    async def view(conn: Conn, hot: HotState) -> Any:
        return await _live(hot, await load_campaign(conn, args.campaign_id))

    return _run(view)


def _campaign_top_up(args: argparse.Namespace) -> int:
    async def view(conn: Conn, hot: HotState) -> Any:
        try:  # before the change: a Redis known to be down adds nothing and says so
            await hot.redis.ping()
        except REDIS_DOWN as exc:
            raise CommandFailed(f"{_redis_down(exc)}; nothing was added") from None
        done = await apply_top_up(conn, hot, args.campaign_id, args.add_cents, args.key)
        if done.replayed:
            print("this idempotency key's top-up was already done: nothing added", file=sys.stderr)
        try:
            return await with_budget(hot, done.campaign)
        except REDIS_DOWN as exc:  # failed after the commit: the money is added, say so
            raise CommandFailed(
                f"the top-up is committed (total budget now {done.campaign.budget_cents} "
                f"cents; do not run it again), but {_redis_down(exc)}: its live budget "
                "follows when Redis answers"
            ) from None

    return _run(view)


def _offer_show(args: argparse.Namespace) -> int:
    async def view(conn: Conn, hot: HotState) -> Any:
        return await offer_view(_CliSource(conn, hot), args.offer_id)

    return _run(view)


def _deal_show(args: argparse.Namespace) -> int:
    async def view(conn: Conn, hot: HotState) -> Any:
        return await deal_view(_CliSource(conn, hot), args.deal_id)

    return _run(view)


def _idempotency_key(value: str) -> str:
    try:
        return check_idempotency_key(value)
    except ServiceError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _cents(value: str) -> Decimal:
    """The amount as the admin API reads `{"add_cents": "VALUE"}`: the same function, so the
    same values are refused with the same words."""
    try:
        return read_top_up(msgspec.json.encode({"add_cents": value}))
    except ServiceError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def register(subparsers: Any) -> None:
    """Add `campaigns`, `offers` and `deals` to the `bidder` command's subparsers."""
    campaigns = subparsers.add_parser("campaigns", help="a campaign's live budget; top-ups")
    campaign_cmds = campaigns.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = campaign_cmds.add_parser("show", help="the campaign with its live budget (JSON)")
    show.add_argument("campaign_id", type=uuid_argument, metavar="CAMPAIGN_ID")
    show.set_defaults(func=_campaign_show)
    top_up = campaign_cmds.add_parser(
        "top-up", help="add ADD_CENTS to the campaign's total budget; prints the campaign"
    )
    top_up.add_argument("campaign_id", type=uuid_argument, metavar="CAMPAIGN_ID")
    top_up.add_argument("add_cents", type=_cents, metavar="ADD_CENTS")
    top_up.add_argument(
        "--idempotency-key",
        dest="key",
        type=_idempotency_key,
        metavar="KEY",
        help="makes a retry safe: the same KEY again adds nothing (say, a UUID per top-up)",
    )
    top_up.set_defaults(func=_campaign_top_up)

    offers = subparsers.add_parser("offers", help="an offer's status and price")
    offer_cmds = offers.add_subparsers(dest="action", required=True, metavar="ACTION")
    offer = offer_cmds.add_parser("show", help="the offer as the admin API shows it (JSON)")
    offer.add_argument("offer_id", type=uuid_argument, metavar="OFFER_ID")
    offer.set_defaults(func=_offer_show)

    deals = subparsers.add_parser("deals", help="a deal with its billing record and playouts")
    deal_cmds = deals.add_subparsers(dest="action", required=True, metavar="ACTION")
    deal = deal_cmds.add_parser("show", help="the deal as the admin API shows it (JSON)")
    deal.add_argument("deal_id", type=uuid_argument, metavar="DEAL_ID")
    deal.set_defaults(func=_deal_show)
