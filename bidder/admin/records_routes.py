"""Operators look up an offer (`GET /admin/v1/offers/{offer_id}`) and a deal with its billing
record and playouts (`GET /admin/v1/deals/{deal_id}`).

An offer is read from Redis while Redis holds it (its live status), else from the records in
Postgres. An open offer is in Redis only (its row is written with its outcome's record), so
when Redis cannot be asked and Postgres has no row the answer is 503, not a 404 that may be
wrong. A deal is shown from Postgres only, once the record writer has written it: 404 until
then.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any, Literal, Protocol, cast

import asyncpg
import msgspec
from litestar import Request, Response, Router, get
from litestar.params import FromPath

from bidder.admin._common import ADMIN_PREFIX, json_response, path_uuid, require_admin
from bidder.errors import NotFound, Unavailable
from bidder.runtime import Runtime
from bidder.web import answering_pool, iso_utc, postgres_unavailable, runtime_of
from matching.money import micros_to_cents, plain
from store.errors import POSTGRES_CLOSED, POSTGRES_DOWN, REDIS_DOWN
from store.hot import HotState
from store.postgres import aware
from store.record_rows import ms_to_time

_OFFER_SQL = """
SELECT o.offer_id::text, o.status, o.screen_id::text, o.campaign_id::text, o.bid_price_cents,
       o.expires_at, o.rejection_reason, d.deal_id::text AS deal_id
FROM offers o LEFT JOIN deals d ON d.offer_id = o.offer_id
WHERE o.offer_id = $1
"""
_REASON_SQL = "SELECT reason FROM rejections WHERE offer_id = $1"
_DEAL_SQL = """
SELECT deal_id::text, offer_id::text, publisher_id::text, campaign_id::text, gross_price_cents,
       commission_cents, net_price_cents, accepted_at
FROM deals WHERE deal_id = $1
"""
_BILLING_SQL = """
SELECT billing_id::text, billing_code, source, commission_rate, gross_price_cents,
       commission_cents, net_price_cents, billed_at
FROM billing_records WHERE deal_id = $1
"""
_PLAYOUTS_SQL = """
SELECT playout_id::text, played_at, confirmed_at, duration_seconds, completion_rate,
       player_version, screen_resolution
FROM playouts WHERE deal_id = $1 ORDER BY confirmed_at
"""


OfferStatus = Literal["open", "accepted", "rejected", "expired"]


class OfferView(msgspec.Struct, kw_only=True):
    """An offer's outcome: live from Redis while it holds the offer, else from the records."""

    offer_id: str
    status: OfferStatus | None
    screen_id: str | None
    campaign_id: str | None
    bid_price_cents: Decimal | None
    expires_at: str | None
    rejection_reason: str | None
    deal_id: str | None


class BillingView(msgspec.Struct, kw_only=True):
    billing_id: str
    billing_code: str | None
    #: What billed it: `core_accept` (an accept) or `openrtb_impression` (an impression).
    source: str
    commission_rate: Decimal | None
    gross_price_cents: Decimal | None
    commission_cents: Decimal | None
    net_price_cents: Decimal | None
    billed_at: str | None


class PlayoutView(msgspec.Struct, kw_only=True):
    playout_id: str
    played_at: str | None
    confirmed_at: str | None
    duration_seconds: int | None
    completion_rate: Decimal | None
    player_version: str | None
    screen_resolution: str | None


class DealView(msgspec.Struct, kw_only=True):
    """A deal with its billing record and playouts, once the record writer has written them."""

    deal_id: str
    offer_id: str
    publisher_id: str
    campaign_id: str
    gross_price_cents: Decimal | None
    commission_cents: Decimal | None
    net_price_cents: Decimal | None
    accepted_at: str | None
    billing: BillingView | None
    playouts: list[PlayoutView]


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return iso_utc(aware(moment))


def _cents(value: Decimal | None) -> Decimal | None:
    return None if value is None else plain(value)


class RecordSource(Protocol):
    """Where the views read: Redis (`hot`) and Postgres (`fetch`, which raises Unavailable when
    Postgres cannot answer). The admin API reads through its worker; the CLI on its own."""

    hot: HotState

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]: ...


class _WorkerSource:
    """The admin API's source: this worker's Redis clients and Postgres pool."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.hot = rt.hot

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        return await _fetch(self.rt, sql, *args)


async def _hot_offer(hot: HotState, offer_id: str) -> tuple[dict[str, str] | None, bool]:
    """The offer's hash while Redis holds it (else None), and whether Redis could be asked."""
    try:
        return await hot.offer(offer_id), True
    except REDIS_DOWN:
        return None, False


async def _fetch(rt: Runtime, sql: str, *args: Any) -> list[asyncpg.Record]:
    try:
        pool = await answering_pool(rt)
        return await pool.fetch(sql, *args)
    except (*POSTGRES_DOWN, *POSTGRES_CLOSED) as exc:
        raise postgres_unavailable() from exc


# The admin view's statuses are the four of the contract's decisions (open, accepted,
# rejected, expired). An OpenRTB bid's own outcomes, kept as they are in Redis and Postgres,
# map onto them: `billed` (its impression was paid) is accepted, `lost` (its loss notice) is
# rejected.
_ADMIN_STATUS = {"billed": "accepted", "lost": "rejected"}


def _admin_status(status: str | None) -> OfferStatus | None:
    return cast(OfferStatus, _ADMIN_STATUS.get(status, status)) if status is not None else None


async def _offer_from_redis(source: RecordSource, hot: dict[str, str]) -> OfferView:
    reason = None
    if hot.get("status") == "rejected":  # the reason travels in the record, not the hash
        try:
            rows = await source.fetch(_REASON_SQL, hot["offer_id"])
            reason = rows[0]["reason"] if rows else None
        except Unavailable:
            reason = None
    return OfferView(
        offer_id=hot["offer_id"],
        status=_admin_status(hot.get("status")),
        screen_id=hot.get("screen"),
        campaign_id=hot.get("campaign"),
        bid_price_cents=micros_to_cents(int(hot["price"])),
        expires_at=_iso(ms_to_time(hot["expires_ms"])),
        rejection_reason=reason,
        deal_id=hot.get("deal_id"),
    )


async def offer_view(source: RecordSource, offer_id: str) -> OfferView:
    """An offer's status and price (`GET /admin/v1/offers/{id}`, `bidder offers show`): live
    from Redis, else from the records."""
    hot, redis_answered = await _hot_offer(source.hot, offer_id)
    if hot is not None and "price" in hot:
        return await _offer_from_redis(source, hot)
    rows = await source.fetch(_OFFER_SQL, offer_id)
    if not rows:
        if not redis_answered:  # it may be open, and an open offer is in Redis only
            raise Unavailable("Redis is unavailable, retry shortly", headers={"Retry-After": "1"})
        raise NotFound(f"Offer {offer_id} not found")
    row = rows[0]
    return OfferView(
        offer_id=row["offer_id"],
        status=_admin_status(row["status"]),
        screen_id=row["screen_id"],
        campaign_id=row["campaign_id"],
        bid_price_cents=_cents(row["bid_price_cents"]),
        expires_at=_iso(row["expires_at"]),
        rejection_reason=row["rejection_reason"],
        deal_id=row["deal_id"],
    )


async def deal_view(source: RecordSource, deal_id: str) -> DealView:
    """A deal with its billing record and playouts, once the records are written
    (`GET /admin/v1/deals/{id}`, `bidder deals show`)."""
    deals = await source.fetch(_DEAL_SQL, deal_id)
    if not deals:
        raise NotFound(f"Deal {deal_id} not found (or its records are not written yet)")
    deal = deals[0]
    billing_rows = await source.fetch(_BILLING_SQL, deal_id)
    playouts = await source.fetch(_PLAYOUTS_SQL, deal_id)
    billing = billing_rows[0] if billing_rows else None
    return DealView(
        deal_id=deal["deal_id"],
        offer_id=deal["offer_id"],
        publisher_id=deal["publisher_id"],
        campaign_id=deal["campaign_id"],
        gross_price_cents=_cents(deal["gross_price_cents"]),
        commission_cents=_cents(deal["commission_cents"]),
        net_price_cents=_cents(deal["net_price_cents"]),
        accepted_at=_iso(deal["accepted_at"]),
        billing=None
        if billing is None
        else BillingView(
            billing_id=billing["billing_id"],
            billing_code=billing["billing_code"],
            source=billing["source"],
            commission_rate=_cents(billing["commission_rate"]),
            gross_price_cents=_cents(billing["gross_price_cents"]),
            commission_cents=_cents(billing["commission_cents"]),
            net_price_cents=_cents(billing["net_price_cents"]),
            billed_at=_iso(billing["billed_at"]),
        ),
        playouts=[
            PlayoutView(
                playout_id=p["playout_id"],
                played_at=_iso(p["played_at"]),
                confirmed_at=_iso(p["confirmed_at"]),
                duration_seconds=p["duration_seconds"],
                completion_rate=_cents(p["completion_rate"]),
                player_version=p["player_version"],
                screen_resolution=p["screen_resolution"],
            )
            for p in playouts
        ],
    )


@get("/offers/{offer_id:str}")
async def get_offer(request: Request[Any, Any, Any], offer_id: FromPath[str]) -> Response[bytes]:
    offer_id = path_uuid(offer_id, "offer_id")
    return json_response(await offer_view(_WorkerSource(runtime_of(request)), offer_id))


@get("/deals/{deal_id:str}")
async def get_deal(request: Request[Any, Any, Any], deal_id: FromPath[str]) -> Response[bytes]:
    deal_id = path_uuid(deal_id, "deal_id")
    return json_response(await deal_view(_WorkerSource(runtime_of(request)), deal_id))


routes: list[Any] = [
    Router(path=ADMIN_PREFIX, route_handlers=[get_offer, get_deal], guards=[require_admin])
]
