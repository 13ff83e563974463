"""The hot state in Redis: offers, budget reservations, counters, and the record queue.

Every state change is one Lua script (store/lua/*.lua). Each outcome (answer, loss, tracking,
expiry, playout) appends its record to the shard's queue stream in the same step, so no crash can
fall between a change and its record; a reservation appends none, the open offer stays in Redis
until its outcome's record carries it to Postgres. All keys a script touches carry their
campaign's shard tag (store/hot/keys.py), so each script stays within one Redis Cluster slot.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import chain
from typing import Any, Literal, Protocol

import msgspec
from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import TimeoutError as RedisTimeoutError

from matching.engine import Budget
from matching.snapshot import SHARDS, CampaignInfo, campaign_shard
from store.hot.ids import day_of, epoch_ms, hour_of, new_id, shard_of
from store.hot.keys import (
    billing_codes_key,
    budget_key,
    day_key,
    deal_key,
    expiry_key,
    freq_key,
    offer_key,
    queue_key,
    tag,
    tracked_key,
)
from store.hot.scripts import script_source
from store.hot.slices import (
    MOVE_WINDOW_MS,
    SLICE_COUNTS,
    add_parts,
    slice_index,
    slice_shards,
    sum_parts,
)
from store.pipelined import Arg, HotConnection, PipelinedScript

_json = msgspec.json.Encoder()


def _offer_keys(shard: int, offer_id: str, now: datetime, today: str, yesterday: str) -> list[str]:
    """KEYS 1-7 of every script that settles an offer (respond, expire, loss, track); the 7th
    is the frequency hash of `now`'s clock hour, where an offer ending without a play gives
    its count back (release_play in _common.lua)."""
    return [
        offer_key(shard, offer_id),
        budget_key(shard),
        day_key(shard, today),
        day_key(shard, yesterday),
        queue_key(shard),
        expiry_key(shard),
        freq_key(shard, hour_of(now.astimezone(UTC))),
    ]


def _day_pair(now: datetime) -> tuple[str, str]:
    return day_of(now), day_of(now - timedelta(days=1))


#: The hash field of a packed offer that holds, as one JSON object, every field but `status`,
#: `campaign` and `price` (kept on their own: reconcile and the bench's checks sum open prices
#: per campaign with HMGET) and those written after the reservation (store/lua/_common.lua,
#: read_offer). One field to write instead of a dozen or more, and the record's `o` spliced
#: from it without decoding and encoding it again.
PACKED_FIELD = "rest"
#: The same for a lean offer: its reservation gives the hash no expiry and its outcome gives it
#: the retention's, and an accept of it writes the deal as one JSON string. The field's name
#: tells the scripts which an offer is.
LEAN_FIELD = "body"

#: The field an offer carries, as "0", when its reservation was not added to its day's reserved
#: counter (COUNT_DAY_RESERVATIONS off): its outcome then gives nothing back there. An offer
#: without it was counted, as is every offer of a release without the switch.
DAY_COUNTED_FIELD = "day_counted"

#: How a new offer is written (OFFER_HASH): every field on its own, packed, or lean.
OfferForm = Literal["fields", "packed", "lean"]
OFFER_FORMS: tuple[OfferForm, ...] = ("fields", "packed", "lean")


def offer_from_hash(stored: Mapping[str, str]) -> dict[str, str]:
    """An offer's fields from its hash as stored: packed (`rest` holds every field but the
    status, the campaign, the price and what changes after the reservation) or with every
    field on its own (OFFER_HASH=fields, and every offer made before the packed form). A
    field of its own wins over a packed one of the same name."""
    offer = dict(stored)
    packed = offer.pop(PACKED_FIELD, None)
    if packed is None:
        packed = offer.pop(LEAN_FIELD, None)
    if packed is not None:  # a field of its own wins over a packed one of the same name
        for name, value in msgspec.json.decode(packed).items():
            offer.setdefault(name, value if isinstance(value, str) else str(value))
    return offer


class Reserved(msgspec.Struct, frozen=True):
    offer_id: str
    budget: Budget
    #: The shard of the budget slice the offer reserved on (its id's): `budget` is its part.
    shard: int = -1
    #: The home's part, when the reservation needed a grant from it (budget slices): a budget
    #: view that has not read the home yet learns the campaign's total from it.
    home_budget: Budget | None = None


class Refused(msgspec.Struct, frozen=True):
    reason: str
    budget: Budget | None
    #: The shard of the budget slice that refused (the campaign's home without slices): the
    #: part of the campaign's budget `budget` is.
    shard: int = -1
    #: What the slice had free, for a refusal for want of budget ('budget', 'slice_budget').
    free: int = 0


class Answered(msgspec.Struct, frozen=True):
    campaign_id: str
    deal_id: str  # an accept's new deal ("" for a reject)
    billing_code: str | None
    budget: Budget
    #: The offer's shard: `budget` is the part of the budget slice there.
    shard: int = -1


class NotAnswered(msgspec.Struct, frozen=True):
    reason: Literal["not_found", "above_bid"]
    detail: str


@dataclass(frozen=True, slots=True)
class Tracked:
    """A tracking event's outcome: `billed`, `recorded`, `replay` (this event of this offer was
    recorded before: nothing is stored again) or `unknown`, and the channel of its offer
    (`core` or `openrtb`; "" when the offer is unknown)."""

    status: Literal["billed", "recorded", "replay", "unknown"]
    channel: str = ""


@dataclass(frozen=True, slots=True)
class PlayoutResult:
    status: Literal["new", "repeat", "not_found"]
    playout_id: str = ""
    confirmed_ms: int = 0


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


#: Of the pipelined timeout, what a deadline leaves for a reply to come back in.
_REPLY_MARGIN_S = 0.05


def _late() -> RedisTimeoutError:
    return RedisTimeoutError("Redis ran the script after its deadline: nothing was changed")


class _Script(Protocol):
    async def __call__(self, keys: list[str], args: list[Arg], *, durable: bool = False) -> Any: ...


class _ClientScript:
    """A script over the redis-py client (tests and tools that have no pipelined connection)."""

    def __init__(self, redis: Redis, source: str) -> None:
        self._script: AsyncScript = redis.register_script(source)

    async def __call__(self, keys: list[str], args: list[Arg], *, durable: bool = False) -> Any:
        return await self._script(keys=keys, args=args)


def _short_with_grants_out(result: Reserved | Refused) -> bool:
    """A home refusing for want of budget while it has granted some to other slices (`g`:
    BUDGET_SLICES was larger before): a worker without slices then funds it as any home is
    funded (`HotState._fund`: the unused allowance taken back), so lowering BUDGET_SLICES
    strands nothing. A campaign never sliced has granted nothing and is answered as is."""
    if not isinstance(result, Refused) or result.reason != "budget" or result.budget is None:
        return False
    budget = result.budget
    return budget.total - budget.reserved - budget.spent - result.free > 0


class HotState:
    """Typed calls onto the Lua scripts; one Redis round trip each.

    With `fast` (a PipelinedRedis) the scripts run auto-pipelined on it, the hot path's way;
    everything else (reads, syncs) goes through the redis-py client.

    Every script a request waits on (the reservation, the answer to an offer, a loss notice, a
    tracking pixel, a playout confirmation) carries a deadline (with `fast` only): a script
    that Redis runs after it changes nothing and answers "late", raised here as a Redis
    timeout, so the caller's "unavailable, retry" is true (without it, an answer script run after
    a Redis stall would settle the deal that the 503 says has not happened). `fast` fails every call
    in flight once its oldest is `timeout` old, so the deadline is that oldest call's send
    time plus the timeout, less a margin for the reply's way back (`_REPLY_MARGIN_S`), on
    Redis' clock (`fast.clock`, measured at each connect and refreshed by the runtime, so the
    calls wait for the connection before their deadline is set).
    What the margin cannot cover: a script run in time whose reply is held past the timeout
    (an fsync stall under `appendfsync always`) is still answered 503.
    """

    def __init__(
        self,
        redis: Redis,
        *,
        fast: HotConnection | None = None,
        retention_ms: int = 25 * 3_600_000,
        deal_ttl_ms: int = 30 * 86_400_000,
        offer_form: OfferForm = "packed",
        count_day_reservations: bool = True,
        slices: int = 1,
    ) -> None:
        if slices not in SLICE_COUNTS:
            raise ValueError(f"budget slices must be one of {SLICE_COUNTS}, got {slices}")
        self.redis = redis
        self._fast = fast
        self.retention_ms = retention_ms
        self.deal_ttl_ms = deal_ttl_ms
        if offer_form not in OFFER_FORMS:
            raise ValueError(f"offer form must be one of {OFFER_FORMS}, got {offer_form!r}")
        #: How new offers are written (see offer_from_hash); every form is read either way.
        self.offer_form = offer_form
        #: Whether a reservation also counts in its day's reserved counter, for earlier
        #: releases' daily checks (COUNT_DAY_RESERVATIONS); an offer that does not carries
        #: DAY_COUNTED_FIELD "0", so its outcome gives nothing back there.
        self.count_day_reservations = count_day_reservations
        #: How many shards each campaign's budget is split over (BUDGET_SLICES).
        self.slices = slices

        def script(name: str) -> _Script:
            source = script_source(name)
            return PipelinedScript(fast, source) if fast else _ClientScript(redis, source)

        self._reserve = script("reserve.lua")
        self._respond = script("respond.lua")
        self._expire = script("expire.lua")
        self._loss = script("loss.lua")
        self._track = script("track.lua")
        self._playout = script("playout.lua")
        # Budget slices: moves between a campaign's slices (grant, take back, credit).
        self._grant = script("grant.lua")
        self._grant_daily = script("grant_daily.lua")
        self._take = script("take.lua")
        self._credit = script("credit.lua")
        # Inventory syncs and top-ups are not the hot path: over the redis-py client.
        self._sync_totals = _ClientScript(redis, script_source("sync_totals.lua"))
        self._top_up = _ClientScript(redis, script_source("top_up.lua"))

    async def _connected(self, shard: int) -> None:
        """Connect `fast` (to the server of `shard`'s keys) before a deadline is set: the
        connect measures Redis' clock."""
        if self._fast is not None and not self._fast.is_connected:
            await self._fast.connected(tag(shard))

    def _deadline(self, shard: int) -> int:
        """The epoch ms (Redis' clock) after which a script on `shard`'s keys sent now must
        change nothing; 0 (none) without a pipelined connection, whose caller waits for the
        reply however long."""
        fast = self._fast
        if fast is None:
            return 0
        return fast.deadline_ms(min(_REPLY_MARGIN_S, fast.timeout / 2), tag(shard))

    async def reserve(
        self,
        campaign: CampaignInfo,
        price_micros: int,
        screen_id: str,
        now: datetime,
        expires_at: datetime,
        fields: Mapping[str, str],
    ) -> Reserved | Refused:
        """Create an offer and reserve its price; refuse when a budget or the cap is reached.

        No record is queued: the open offer lives in Redis only, and its outcome's record
        carries it to Postgres. With budget slices the reservation is made on the screen's
        slice (the offer id carries its shard); a slice short of allowance (of the total, or
        of today's daily limit) gets a grant from the home (taken back from the other slices
        when the home is short) and tries again, at most twice.
        """
        daily = campaign.daily_budget_micros
        slices = self.slices
        home = campaign.shard
        shard = home if slices == 1 else slice_shards(home, slices)[slice_index(screen_id, slices)]
        result = await self._reserve_on(
            shard, daily, campaign, price_micros, screen_id, now, expires_at, fields
        )
        if slices == 1 and not _short_with_grants_out(result):
            return result
        home_seen: Budget | None = None
        funded: bool | None = True
        # At most two grants: the total's, then today's (a campaign with a daily limit).
        for _ in range(2):
            if not isinstance(result, Refused):
                break
            reason = result.reason
            short_by = price_micros - max(result.free, 0)
            daily_short = "daily_budget" if shard == home else "slice_daily"
            if reason in (("budget",) if shard == home else ("slice_budget", "unknown_campaign")):
                funded, seen = await self._fund(campaign.id, home, shard, short_by, price_micros)
                home_seen = seen or home_seen
            elif daily is not None and reason == daily_short:
                # Open reservations of yesterday count against today's allowance, which can
                # leave a slice short by more than the price just after midnight.
                funded = await self._fund_daily(
                    campaign.id,
                    home,
                    shard,
                    price_micros - result.free,
                    price_micros,
                    daily,
                    day_of(now),
                )
            else:
                break
            if not funded:
                break
            result = await self._reserve_on(
                shard, daily, campaign, price_micros, screen_id, now, expires_at, fields
            )
        if isinstance(result, Reserved) and home_seen is not None and shard != home:
            result = msgspec.structs.replace(result, home_budget=home_seen)
        if isinstance(result, Refused) and result.reason in ("slice_budget", "unknown_campaign"):
            # Every slice together has less free than the price, or the home does not know
            # the campaign (then neither does any slice).
            if funded is None:
                return Refused("unknown_campaign", None, shard)
            return Refused("budget", result.budget, shard)
        if isinstance(result, Refused) and result.reason == "slice_daily":
            return Refused("daily_budget", result.budget, shard)
        return result

    async def _reserve_on(
        self,
        shard: int,
        daily: int | None,
        campaign: CampaignInfo,
        price_micros: int,
        screen_id: str,
        now: datetime,
        expires_at: datetime,
        fields: Mapping[str, str],
    ) -> Reserved | Refused:
        offer_id = new_id(shard)
        utc = now.astimezone(UTC)
        hour = hour_of(utc)
        day = hour[:8]
        now_ms = epoch_ms(now)
        expires_ms = epoch_ms(expires_at)
        offer = {
            **fields,
            "offer_id": offer_id,
            "advertiser": campaign.advertiser_id,
            "screen": screen_id,
            "created_ms": str(now_ms),
            "expires_ms": str(expires_ms),
            "day": day,
        }
        if not self.count_day_reservations:
            offer[DAY_COUNTED_FIELD] = "0"
        await self._connected(shard)
        argv: list[Arg] = [
            campaign.id,
            price_micros,
            -1 if daily is None else daily,
            -1
            if campaign.max_plays_per_screen_per_hour is None
            else campaign.max_plays_per_screen_per_hour,
            screen_id,
            now_ms,
            expires_ms,
            # A lean offer gets no expiry until its outcome sets the retention's.
            0 if self.offer_form == "lean" else max(expires_ms - now_ms, 0) + self.retention_ms,
            offer_id,
            self._deadline(shard),
            1 if self.count_day_reservations else 0,
        ]
        # The script writes `status`, `campaign` and `price` (the fields the scripts change or
        # sum) itself; packed, every other field is one value.
        if self.offer_form != "fields":
            packed_field = LEAN_FIELD if self.offer_form == "lean" else PACKED_FIELD
            argv.extend((packed_field, _json.encode(offer).decode()))
        else:  # the offer's other fields as name, value pairs
            argv.extend(chain.from_iterable(offer.items()))
        keys = [
            budget_key(shard),
            day_key(shard, day),
            freq_key(shard, hour),
            offer_key(shard, offer_id),
            expiry_key(shard),
        ]
        result = await self._reserve(keys, argv)
        if int(result[0]) == 1:
            made = Budget(int(result[1]), int(result[2]), int(result[3]))
            return Reserved(offer_id, made, shard)
        reason = _text(result[1])
        if reason == "late":
            raise _late()
        budget = (
            None
            if reason == "unknown_campaign"
            else Budget(int(result[2]), int(result[3]), int(result[4]))
        )
        return Refused(reason, budget, shard, int(result[5]) if len(result) > 5 else 0)

    async def _fund(
        self, campaign_id: str, home: int, shard: int, need: int, price: int
    ) -> tuple[bool | None, Budget | None]:
        """Give the slice on `shard` at least `need` more free budget (what its reservation
        lacks): a grant from the home, after taking unused allowance back from the other
        slices when the home is short (for the home's own slice, only that). False when the
        slices together lack it; None when the home does not know the campaign. Also the
        home's budget part, when a grant was asked for."""
        if shard != home:
            granted, seen = await self._grant_to(campaign_id, home, shard, need, price)
            if granted != 0:
                return (None if granted < 0 else True), seen
        back = await self.reclaim(campaign_id, home, need, exclude=shard)
        if shard == home:
            return back > 0, None  # the reservation tries again on the home
        granted, seen = await self._grant_to(campaign_id, home, shard, need, price)
        return (None if granted < 0 else granted > 0), seen

    async def _fund_daily(
        self,
        campaign_id: str,
        home: int,
        shard: int,
        need: int,
        price: int,
        limit: int,
        day: str,
    ) -> bool:
        """`_fund` for today's part of a daily limit: a grant of it from the home's day hash
        to the slice's (`dg`, then `da`), after taking unused daily allowance back from the
        other slices when the home is short. False when the slices together lack it."""
        if shard != home and await self._grant_daily_to(
            campaign_id, home, shard, need, price, limit, day
        ):
            return True
        back = await self.reclaim(campaign_id, home, need, exclude=shard, day=day)
        if shard == home:
            return back > 0
        return await self._grant_daily_to(campaign_id, home, shard, need, price, limit, day)

    async def _grant_daily_to(
        self,
        campaign_id: str,
        home: int,
        shard: int,
        need: int,
        price: int,
        limit: int,
        day: str,
    ) -> bool:
        await self._connected(home)
        granted = int(
            await self._grant_daily(
                [day_key(home, day), budget_key(home)],
                [campaign_id, need, self.slices, limit, price],
                durable=True,
            )
        )
        if granted > 0:
            await self._connected(shard)
            await self._credit([day_key(shard, day)], [campaign_id, granted, 0, "da"])
        return granted > 0

    async def _grant_to(
        self, campaign_id: str, home: int, shard: int, need: int, price: int
    ) -> tuple[int, Budget | None]:
        """Grant a chunk of the home's free budget to the slice on `shard` (money leaves the
        home first, then the slice is credited): the amount (0 when the home has less free
        than `need`, -1 when it does not know the campaign) and the home's budget part."""
        await self._connected(home)
        # A debit waits for the replicas (REDIS_WAIT_REPLICAS) before its credit is sent: a
        # failover that lost the debit but kept the credit would make money. A lost credit
        # only strands it (reconcile gives it back).
        granted, deadline, total, reserved, spent = await self._grant(
            [budget_key(home)],
            [campaign_id, need, self.slices, MOVE_WINDOW_MS, price],
            durable=True,
        )
        if int(granted) > 0:
            await self._connected(shard)
            await self._credit([budget_key(shard)], [campaign_id, int(granted), deadline, "a"])
        seen = None if int(granted) < 0 else Budget(int(total), int(reserved), int(spent))
        return int(granted), seen

    async def _allowances(
        self, campaign_id: str, home: int, day: str | None = None
    ) -> dict[int, tuple[int, int]]:
        """(allowance, free) of the campaign on every shard but its home that holds one: of
        its total, or with `day` of that day's limit."""
        others = [shard for shard in range(SHARDS) if shard != home]
        # The allowance and what it spent from its hash, the open reservations (which count
        # against a day's allowance too) from the budget hash: one read, or two with `day`.
        reads: list[tuple[str, list[str]]] = []
        for shard in others:
            if day is None:
                reads.append((budget_key(shard), [f"{campaign_id}:{p}" for p in ("a", "s", "r")]))
            else:
                reads.append((day_key(shard, day), [f"{campaign_id}:da", f"{campaign_id}:s"]))
                reads.append((budget_key(shard), [f"{campaign_id}:r"]))
        raw: list[Any]
        if self._fast is not None:  # the hot path's connection, and its strict timeout
            fast = self._fast
            await self._connected(home)
            raw = await asyncio.gather(
                *[fast.execute_keyed(key, "HMGET", key, *names) for key, names in reads]
            )
        else:
            async with self.redis.pipeline(transaction=False) as pipe:
                for key, names in reads:
                    pipe.hmget(key, names)
                raw = await pipe.execute()
        if day is not None:  # each shard's two reads as one
            raw = [raw[i] + raw[i + 1] for i in range(0, len(raw), 2)]
        found = {}
        for shard, (allowance, spent, reserved) in zip(others, raw, strict=True):
            if allowance is not None:
                a = int(allowance)
                found[shard] = (a, a - int(reserved or 0) - int(spent or 0))
        return found

    async def reclaim(
        self,
        campaign_id: str,
        home: int,
        want: int,
        *,
        exclude: int = -1,
        force: bool = False,
        day: str | None = None,
    ) -> int:
        """Take up to `want` of the campaign's allowances back to its home, most free first
        (each amount leaves its slice first, then the home's `g` drops); with `day`, of that
        day's daily allowances (`da` back to `dg`). `force` also takes what backs open
        reservations (a lowered total, `shrink`). Returns what came back."""
        found = await self._allowances(campaign_id, home, day)
        field = "a" if day is None else "da"
        order = sorted(found.items(), key=lambda item: -item[1][0 if force else 1])
        back = 0
        for shard, (allowance, free) in order:
            if back >= want:
                break
            if shard == exclude or (allowance if force else free) <= 0:
                continue
            await self._connected(shard)
            source = budget_key(shard) if day is None else day_key(shard, day)
            taken, deadline = await self._take(  # durable: see _grant_to
                [source, budget_key(shard)],
                [campaign_id, want - back, "1" if force else "0", MOVE_WINDOW_MS, field],
                durable=True,
            )
            if int(taken) > 0:
                await self._connected(home)
                target = budget_key(home) if day is None else day_key(home, day)
                back_to = "g" if day is None else "dg"
                await self._credit([target], [campaign_id, int(taken), deadline, back_to])
                back += int(taken)
        return back

    async def shrink(self, campaign_id: str) -> int:
        """After the total was lowered below what the campaign's slices hold (granted,
        reserved, spent), take allowances back until it is not: unused allowance first, then
        what backs open reservations (those slices then refuse accepts past what they keep).
        Returns what came back."""
        home = campaign_shard(campaign_id)
        names = [f"{campaign_id}:{part}" for part in ("t", "g", "r", "s")]
        total, granted, reserved, spent = (
            int(v or 0) for v in await self.redis.hmget(budget_key(home), names)
        )
        over = granted + reserved + spent - total
        if over <= 0 or granted <= 0:
            return 0
        back = await self.reclaim(campaign_id, home, min(over, granted))
        if back < min(over, granted):
            back += await self.reclaim(campaign_id, home, min(over, granted) - back, force=True)
        return back

    async def respond(
        self,
        offer_id: str,
        publisher_id: str,
        action: Literal["accept", "reject"],
        now: datetime,
        payload: Mapping[str, Any],
        accepted_micros: int = 0,
    ) -> Answered | NotAnswered:
        """Accept or reject an open offer of this publisher's; exactly one answer wins.

        An accept makes the deal id (in the offer's shard) and adds it to the record payload;
        the answer carries it as `deal_id`.
        """
        shard = shard_of(offer_id)
        if shard is None:
            return NotAnswered("not_found", "")
        deal_id = new_id(shard) if action == "accept" else ""
        if deal_id:
            payload = {**payload, "deal_id": deal_id}
        today, yesterday = _day_pair(now)
        keys = [
            *_offer_keys(shard, offer_id, now, today, yesterday),
            billing_codes_key(shard),
            deal_key(shard, deal_id or offer_id),
        ]
        await self._connected(shard)
        args: list[Arg] = [
            action,
            publisher_id,
            epoch_ms(now),
            today,
            yesterday,
            str(accepted_micros) if action == "accept" else "",
            _json.encode(payload).decode(),
            deal_id,
            self.deal_ttl_ms,
            self.retention_ms,
            self._deadline(shard),
        ]
        # An accept is money: its reply waits for the replicas (REDIS_WAIT_REPLICAS).
        result = await self._respond(keys, args, durable=action == "accept")
        if int(result[0]) == 0:
            reason = _text(result[1])
            if reason == "late":
                raise _late()
            return NotAnswered(
                "above_bid" if reason == "above_bid" else "not_found", _text(result[2])
            )
        code = None if result[2] is None else _text(result[2])
        budget = Budget(int(result[3]), int(result[4]), int(result[5]))
        return Answered(_text(result[1]), deal_id, code, budget, shard)

    async def expire_due(self, now: datetime, limit: int = 500) -> dict[str, int]:
        """Expire the offers past their time (`limit` a shard); how many this call expired, by
        channel (`core`, `openrtb`)."""
        now_ms = epoch_ms(now)
        today, yesterday = _day_pair(now)
        expired: dict[str, int] = {}
        for shard in range(SHARDS):
            due = await self.redis.zrangebyscore(expiry_key(shard), "-inf", now_ms, 0, limit)
            if not due:
                continue
            calls = []
            for raw in due:
                offer_id = _text(raw)
                keys = _offer_keys(shard, offer_id, now, today, yesterday)
                args: list[Arg] = [offer_id, now_ms, today, yesterday, self.retention_ms]
                calls.append(self._expire(keys, args))
            for result in await asyncio.gather(*calls):
                channel = _text(result)
                if channel:
                    expired[channel] = expired.get(channel, 0) + 1
        return expired

    async def loss(
        self, offer_id: str, now: datetime, payload: Mapping[str, Any]
    ) -> tuple[str, int]:
        """Record a loss notice: ('first' | 'retry' | 'unknown', count)."""
        shard = shard_of(offer_id)
        if shard is None:
            return "unknown", 0
        today, yesterday = _day_pair(now)
        keys = _offer_keys(shard, offer_id, now, today, yesterday)
        await self._connected(shard)
        args: list[Arg] = [
            epoch_ms(now),
            today,
            yesterday,
            _json.encode(payload).decode(),
            self.retention_ms,
            self._deadline(shard),
        ]
        result = await self._loss(keys, args)
        status = _text(result[0])
        if status == "late":
            raise _late()
        return status, int(result[1])

    async def track(
        self,
        offer_id: str,
        event: str,
        now: datetime,
        payload: Mapping[str, Any],
        billing: Mapping[str, Any],
    ) -> Tracked:
        """Record a tracking event, once per offer and event; an OpenRTB impression bills
        once."""
        shard = shard_of(offer_id)
        if shard is None:
            return Tracked("unknown")
        today, yesterday = _day_pair(now)
        keys = [
            *_offer_keys(shard, offer_id, now, today, yesterday),
            billing_codes_key(shard),
            tracked_key(shard, offer_id),
        ]
        await self._connected(shard)
        args: list[Arg] = [
            epoch_ms(now),
            today,
            yesterday,
            event,
            _json.encode(payload).decode(),
            _json.encode(billing).decode(),
            self.retention_ms,
            self._deadline(shard),
        ]
        # An impression may bill: its reply waits for the replicas (REDIS_WAIT_REPLICAS).
        result = await self._track(keys, args, durable=bool(billing))
        status = _text(result[0])
        if status == "late":
            raise _late()
        if status == "unknown":
            return Tracked("unknown")
        if status == "replay":
            return Tracked("replay", _text(result[1]))
        return Tracked("billed" if status == "billed" else "recorded", _text(result[1]))

    async def confirm_playout(
        self, deal_id: str, publisher_id: str, now: datetime, payload: Mapping[str, Any]
    ) -> PlayoutResult:
        """Record a deal's first playout confirmation; repeats return the first one."""
        shard = shard_of(deal_id)
        if shard is None:
            return PlayoutResult("not_found")
        playout_id = str(uuid.uuid4())
        keys = [deal_key(shard, deal_id), queue_key(shard)]
        await self._connected(shard)
        args: list[Arg] = [
            publisher_id,
            playout_id,
            epoch_ms(now),
            _json.encode(
                {**payload, "playout_id": playout_id, "confirmed_ms": epoch_ms(now)}
            ).decode(),
            self._deadline(shard),
        ]
        result = await self._playout(keys, args, durable=True)
        status = _text(result[0])
        if status == "late":
            raise _late()
        if status == "not_found":
            return PlayoutResult("not_found")
        return PlayoutResult(
            "new" if status == "new" else "repeat", _text(result[1]), int(result[2])
        )

    async def offer(self, offer_id: str, *, hot_path: bool = False) -> dict[str, str] | None:
        """An offer's hot record, while Redis still holds it. `hot_path`: read it on the
        pipelined connection, with the hot path's strict timeout (a request waiting on it must
        answer "unavailable" at once when Redis stalls, not after the background timeout)."""
        shard = shard_of(offer_id)
        if shard is None:
            return None
        key = offer_key(shard, offer_id)
        if hot_path and self._fast is not None:
            flat = await self._fast.execute_keyed(key, "HGETALL", key)
            pairs: Iterable[tuple[Any, Any]] = zip(flat[::2], flat[1::2], strict=True)
        else:
            pairs = (await self.redis.hgetall(key)).items()
        stored = {_text(k): _text(v) for k, v in pairs}
        return offer_from_hash(stored) if stored else None

    async def sync_inventory(
        self,
        totals: Mapping[str, tuple[int, int]],
        codes: Mapping[tuple[str, str], str],
        *,
        version: int = 0,
        force: bool = False,
    ) -> int:
        """Set every campaign's total budget (campaign id -> (shard, total micro-cents)) and copy
        the billing codes into every shard, where the scripts read them.

        `version` is the inventory version the totals were read at. A total that a top-up of a
        newer version wrote is left alone: the read predates it, and writing it would put the old
        total back until the next reload. `force` writes every total. Returns how many
        totals were left."""
        by_shard: dict[int, list[Arg]] = {}
        for campaign_id, (shard, total) in totals.items():
            by_shard.setdefault(shard, []).extend((campaign_id, total))
        kept = 0
        short: list[str] = []
        for shard, pairs in by_shard.items():
            args: list[Arg] = [version, 1 if force else 0, *pairs]
            answer = await self._sync_totals([budget_key(shard)], args)
            kept += int(answer[0])
            short += [_text(cid) for cid in answer[1:]]
        for campaign_id in short:  # totals lowered below what the slices hold
            await self.shrink(campaign_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            code_map = {f"{adv}:{pub}": code for (adv, pub), code in codes.items()}
            for shard in range(SHARDS):
                pipe.delete(f"{billing_codes_key(shard)}:next")
                if code_map:
                    pipe.hset(f"{billing_codes_key(shard)}:next", mapping=code_map)  # type: ignore[arg-type]
                    # RENAME by name: a cluster pipeline refuses its method (its two keys
                    # share the shard's hash tag, so one slot, here).
                    pipe.execute_command(
                        "RENAME", f"{billing_codes_key(shard)}:next", billing_codes_key(shard)
                    )
                else:
                    pipe.delete(billing_codes_key(shard))
            await pipe.execute()
        return kept

    async def set_budget_total(
        self, campaign_id: str, shard: int, total_micros: int, version: int
    ) -> bool:
        """Set one campaign's total budget at once (a top-up that committed at inventory
        `version`), ahead of the next inventory sync. False when a total of a newer version is
        there already (this write arrived late)."""
        return bool(await self._top_up([budget_key(shard)], [campaign_id, total_micros, version]))

    async def read_budgets(
        self, now: datetime, shards: Iterable[int] = range(SHARDS)
    ) -> dict[str, Budget]:
        """The live budget (total, reserved, spent, and today's spending) of every
        campaign of `shards` (default: all), summed over its budget slices among `shards`: a
        campaign whose home is among them counts when its total is set there; one whose home
        is not (a read of its other slices only) counts with what its slices there hold and a
        total of 0. Read shard by shard, each shard's figures are the parts the budget view
        sums (BUDGET_SLICES)."""
        shards = list(shards)
        by_campaign: dict[str, dict[int, Budget]] = {}
        for shard, found in (await self.read_budget_parts(now, shards)).items():
            for campaign_id, part in found.items():
                by_campaign.setdefault(campaign_id, {})[shard] = part
        budgets = {}
        for campaign_id, slices in by_campaign.items():
            home = campaign_shard(campaign_id)
            budget = sum_parts(home, slices) if home in shards else add_parts(slices.values())
            if budget is not None:
                budgets[campaign_id] = budget
        return budgets

    async def read_budget_parts(
        self, now: datetime, shards: Iterable[int] = range(SHARDS)
    ) -> dict[int, dict[str, Budget]]:
        """Each shard's part of its campaigns' budgets: shard -> campaign id -> that budget
        slice's figures, the total on the campaign's home (only where a total is set), 0 on
        its other slices."""
        today = day_of(now)
        shards = list(shards)
        async with self.redis.pipeline(transaction=False) as pipe:
            for shard in shards:
                pipe.hgetall(budget_key(shard))
                pipe.hgetall(day_key(shard, today))
            raw = await pipe.execute()
        out: dict[int, dict[str, Budget]] = {}
        for number, shard in enumerate(shards):
            fields: dict[str, dict[str, int]] = {}
            for key, value in raw[2 * number].items():
                campaign_id, _, part = _text(key).rpartition(":")
                fields.setdefault(campaign_id, {})[part] = int(value)
            for key, value in raw[2 * number + 1].items():
                campaign_id, _, part = _text(key).rpartition(":")
                fields.setdefault(campaign_id, {})["d" + part] = int(value)
            out[shard] = {
                cid: Budget(f.get("t", 0), f.get("r", 0), f.get("s", 0), f.get("ds", 0))
                for cid, f in fields.items()
                if ("t" in f if campaign_shard(cid) == shard else ("a" in f or "r" in f))
            }
        return out

    async def read_home_parts(
        self, now: datetime, shard: int, campaign_ids: Iterable[str]
    ) -> dict[str, Budget]:
        """The home parts on `shard` of the campaigns named (those whose home it is), read by
        name: with budget slices each shard's hash holds a part of every campaign, and reading
        only the home parts between whole reads keeps the budget refresh's cost that of one
        slice."""
        ids = list(campaign_ids)
        if not ids:
            return {}
        today = day_of(now)
        names = [f"{cid}:{part}" for cid in ids for part in ("t", "r", "s")]
        daily = [f"{cid}:s" for cid in ids]
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hmget(budget_key(shard), names)
            pipe.hmget(day_key(shard, today), daily)
            counters, days = await pipe.execute()
        found = {}
        for number, cid in enumerate(ids):
            total, reserved, spent = counters[3 * number : 3 * number + 3]
            if total is None:
                continue
            found[cid] = Budget(
                int(total), int(reserved or 0), int(spent or 0), int(days[number] or 0)
            )
        return found

    async def read_campaign_parts(self, campaign_id: str, now: datetime) -> dict[int, Budget]:
        """One campaign's budget slices, read on every shard (whatever BUDGET_SLICES is):
        shard -> part, as `read_budget_parts` gives them."""
        home = campaign_shard(campaign_id)
        today = day_of(now)
        names = [f"{campaign_id}:{part}" for part in ("t", "r", "s", "a")]
        async with self.redis.pipeline(transaction=False) as pipe:
            for shard in range(SHARDS):
                pipe.hmget(budget_key(shard), names)
                pipe.hget(day_key(shard, today), f"{campaign_id}:s")
            raw = await pipe.execute()
        parts = {}
        for shard in range(SHARDS):
            (total, reserved, spent, allowance), daily_spent = raw[2 * shard], raw[2 * shard + 1]
            if (total is not None) if shard == home else (allowance or reserved) is not None:
                parts[shard] = Budget(
                    int(total or 0), int(reserved or 0), int(spent or 0), int(daily_spent or 0)
                )
        return parts
