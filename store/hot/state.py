"""The hot state in Redis: offers, budget reservations, counters, and the record queue.

Every state change is one Lua script (store/lua/*.lua). Each outcome (answer, loss, tracking,
expiry, playout) appends its record to the shard's queue stream in the same step, so no crash can
fall between a change and its record; a reservation appends none, the open offer stays in Redis
until its outcome's record carries it to Postgres. All keys a script touches carry their
campaign's shard tag (store/hot/keys.py), so each script stays within one Redis Cluster slot.
"""

from __future__ import annotations

import asyncio
import importlib.resources
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
from matching.snapshot import SHARDS, CampaignInfo
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


def offer_from_hash(stored: Mapping[str, str]) -> dict[str, str]:
    """An offer's fields from its hash as stored: packed (`rest` holds every field but the
    status, the campaign, the price and what changes after the reservation) or with every
    field on its own (OFFER_HASH=fields, and every offer made before the packed form). A
    field of its own wins over a packed one of the same name."""
    offer = dict(stored)
    packed = offer.pop(PACKED_FIELD, None)
    if packed is not None:  # a field of its own wins over a packed one of the same name
        for name, value in msgspec.json.decode(packed).items():
            offer.setdefault(name, value if isinstance(value, str) else str(value))
    return offer


def _load(name: str) -> str:
    folder = importlib.resources.files("store") / "lua"
    return (folder / "_common.lua").read_text() + "\n" + (folder / name).read_text()


class Reserved(msgspec.Struct, frozen=True):
    offer_id: str
    budget: Budget


class Refused(msgspec.Struct, frozen=True):
    reason: str
    budget: Budget | None


class Answered(msgspec.Struct, frozen=True):
    campaign_id: str
    deal_id: str  # an accept's new deal ("" for a reject)
    billing_code: str | None
    budget: Budget


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
        packed_offers: bool = True,
    ) -> None:
        self.redis = redis
        self._fast = fast
        self.retention_ms = retention_ms
        self.deal_ttl_ms = deal_ttl_ms
        #: Write new offers packed (`rest`, see offer_from_hash), else every field on its own;
        #: both forms are read either way.
        self.packed_offers = packed_offers

        def script(name: str) -> _Script:
            source = _load(name)
            return PipelinedScript(fast, source) if fast else _ClientScript(redis, source)

        self._reserve = script("reserve.lua")
        self._respond = script("respond.lua")
        self._expire = script("expire.lua")
        self._loss = script("loss.lua")
        self._track = script("track.lua")
        self._playout = script("playout.lua")
        # Inventory syncs and top-ups are not the hot path: over the redis-py client.
        self._sync_totals = _ClientScript(redis, _load("sync_totals.lua"))
        self._top_up = _ClientScript(redis, _load("top_up.lua"))

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
        carries it to Postgres.
        """
        shard = campaign.shard
        offer_id = new_id(shard)
        utc = now.astimezone(UTC)
        hour = hour_of(utc)
        day = hour[:8]
        now_ms = epoch_ms(now)
        expires_ms = epoch_ms(expires_at)
        offer = {
            **fields,
            "offer_id": offer_id,
            "campaign": campaign.id,
            "advertiser": campaign.advertiser_id,
            "screen": screen_id,
            "price": str(price_micros),
            "created_ms": str(now_ms),
            "expires_ms": str(expires_ms),
            "day": day,
        }
        await self._connected(shard)
        argv: list[Arg] = [
            campaign.id,
            price_micros,
            -1 if campaign.daily_budget_micros is None else campaign.daily_budget_micros,
            -1
            if campaign.max_plays_per_screen_per_hour is None
            else campaign.max_plays_per_screen_per_hour,
            screen_id,
            now_ms,
            expires_ms,
            max(expires_ms - now_ms, 0) + self.retention_ms,
            offer_id,
            self._deadline(shard),
        ]
        if self.packed_offers:  # the fields the scripts change or sum, the rest in one value
            argv.extend(("campaign", campaign.id, "price", offer.pop("price")))
            del offer["campaign"]
            argv.extend((PACKED_FIELD, _json.encode(offer).decode()))
        else:  # the offer's fields as name, value pairs
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
            return Reserved(offer_id, Budget(int(result[1]), int(result[2]), int(result[3])))
        reason = _text(result[1])
        if reason == "late":
            raise _late()
        budget = (
            None
            if reason == "unknown_campaign"
            else Budget(int(result[2]), int(result[3]), int(result[4]))
        )
        return Refused(reason, budget)

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
        return Answered(_text(result[1]), deal_id, code, budget)

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
        for shard, pairs in by_shard.items():
            args: list[Arg] = [version, 1 if force else 0, *pairs]
            kept += int(await self._sync_totals([budget_key(shard)], args))
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
        """The live budget (total, reserved, spent, and today's reserved/spent) of every
        campaign of `shards` (default: all)."""
        today = day_of(now)
        async with self.redis.pipeline(transaction=False) as pipe:
            for shard in shards:
                pipe.hgetall(budget_key(shard))
                pipe.hgetall(day_key(shard, today))
            raw = await pipe.execute()
        fields: dict[str, dict[str, int]] = {}
        for index in range(0, len(raw), 2):
            for key, value in raw[index].items():
                campaign_id, _, part = _text(key).rpartition(":")
                fields.setdefault(campaign_id, {})[part] = int(value)
            for key, value in raw[index + 1].items():
                campaign_id, _, part = _text(key).rpartition(":")
                fields.setdefault(campaign_id, {})["d" + part] = int(value)
        return {
            cid: Budget(f.get("t", 0), f.get("r", 0), f.get("s", 0), f.get("dr", 0), f.get("ds", 0))
            for cid, f in fields.items()
            if "t" in f
        }
