"""The hot state in Redis: offers, budget reservations, counters, and the record queue.

Every state change is one Lua script (store/lua/*.lua). Each outcome (answer, loss, tracking,
expiry, playout) appends its record to the shard's queue stream in the same step, so no crash can
fall between a change and its record; a reservation appends none, the open offer stays in Redis
until its outcome's record carries it to Postgres. All keys a script touches carry the same hash
tag `{bN}`, N being the campaign's shard, so each script stays within one Redis Cluster slot.
Offer and deal ids carry their shard in their first hex digit.
"""

from __future__ import annotations

import asyncio
import importlib.resources
import os
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import chain
from typing import Any, Literal, Protocol

import msgspec
from redis.asyncio import BlockingConnectionPool, Redis
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from matching.engine import Budget
from matching.inventory import CANONICAL_UUID, InventoryDocument
from matching.snapshot import SHARDS, ApiKeyInfo, CampaignInfo
from store.pipelined import Arg, PipelinedRedis, PipelinedScript

#: What a Redis that cannot be reached or answers too late raises.
REDIS_DOWN = (RedisError, OSError, TimeoutError)
QUEUE_GROUP = "writers"
DAY_TTL_MS = 3 * 86_400_000
_json = msgspec.json.Encoder()


def connect(url: str, timeout: float = 0.25, max_connections: int = 64) -> Redis:
    """A client whose calls fail fast when Redis is unreachable (`timeout` seconds) and wait for
    a free connection under load instead of failing."""
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=max(timeout * 4, 1.0),
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
    )
    return Redis.from_pool(pool)


_TAGS = tuple(f"{{b{shard}}}" for shard in range(SHARDS))


def tag(shard: int) -> str:
    return _TAGS[shard] if 0 <= shard < SHARDS else f"{{b{shard}}}"


def budget_key(shard: int) -> str:
    return f"{tag(shard)}:budget"


def day_key(shard: int, day: str) -> str:
    return f"{tag(shard)}:day:{day}"


def freq_key(shard: int, hour: str) -> str:
    return f"{tag(shard)}:freq:{hour}"


def offer_key(shard: int, offer_id: str) -> str:
    return f"{tag(shard)}:o:{offer_id}"


def tracked_key(shard: int, offer_id: str) -> str:
    """The set of tracking events already recorded for an offer (track.lua)."""
    return f"{tag(shard)}:ev:{offer_id}"


def deal_key(shard: int, deal_id: str) -> str:
    return f"{tag(shard)}:d:{deal_id}"


def expiry_key(shard: int) -> str:
    return f"{tag(shard)}:exp"


def queue_key(shard: int) -> str:
    return f"{tag(shard)}:q"


def billing_codes_key(shard: int) -> str:
    return f"{tag(shard)}:bc"


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
        freq_key(shard, _hour_of(now.astimezone(UTC))),
    ]


def queue_keys() -> list[str]:
    return [queue_key(s) for s in range(SHARDS)]


# The digit after the version nibble: RFC 4122 variant bits (10xx) over two random bits.
_VARIANT_DIGIT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


class _RandomHex:
    """Random hex digits from the OS, fetched 4 KiB at a time: one getrandom() call per 256 ids
    instead of one per id (a system call was a fifth of an id's cost). Refilled after a fork,
    so worker processes never share digits."""

    _BATCH = 4096

    def __init__(self) -> None:
        self._digits = ""
        self._next = 0
        os.register_at_fork(after_in_child=self.discard)

    def discard(self) -> None:
        self._digits, self._next = "", 0

    def take32(self) -> str:
        start = self._next
        if start + 32 > len(self._digits):
            self._digits, start = os.urandom(self._BATCH).hex(), 0
        self._next = start + 32
        return self._digits[start : start + 32]


_random_hex = _RandomHex()


def _uuid4_text(first: str) -> str:
    """A random version-4 UUID in canonical text, formatted straight from 16 random bytes (no
    UUID object to parse and print), its first hex digits replaced by `first`."""
    digits = _random_hex.take32()
    return (
        f"{first}{digits[len(first) : 8]}-{digits[8:12]}-4{digits[13:16]}-"
        f"{_VARIANT_DIGIT[digits[16]]}{digits[17:20]}-{digits[20:]}"
    )


def random_uuid() -> str:
    """What `str(uuid.uuid4())` returns, at half the cost."""
    return _uuid4_text("")


def new_id(shard: int) -> str:
    """A random UUID whose first hex digit is the shard, so the id alone finds its keys."""
    return _uuid4_text(f"{shard:x}")


def shard_of(an_id: str) -> int | None:
    """The shard an offer or deal id was made in; None for anything that is not such an id
    (only the canonical 8-4-4-4-12 form, in either case, counts as an id)."""
    if CANONICAL_UUID.fullmatch(an_id) is None:
        return None
    shard = int(an_id[0], 16)
    return shard if shard < SHARDS else None


def day_of(moment: datetime) -> str:
    utc = moment.astimezone(UTC)
    return f"{utc.year:04d}{utc.month:02d}{utc.day:02d}"


def _hour_of(utc: datetime) -> str:
    return f"{utc.year:04d}{utc.month:02d}{utc.day:02d}{utc.hour:02d}"


def epoch_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _day_pair(now: datetime) -> tuple[str, str]:
    return day_of(now), day_of(now - timedelta(days=1))


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


#: The hash holding the inventory a worker last loaded: `stamp`, `mac` and `copy`.
INVENTORY_COPY_KEY = "inventory:copy"
#: The layout of `InventoryCopy` and what it holds. A release that changes either bumps it: its
#: workers then write the copy again, and never read one of another layout.
INVENTORY_COPY_FORMAT = 2
#: How long a worker's claim to write the copy of one stamp keeps the others from writing it.
COPY_CLAIM_MS = 30_000


class InventoryCopy(msgspec.Struct, array_like=True):
    """What a snapshot is built of: the inventory document, the usable API keys (by hash; the
    plain keys are never stored) and the inventory version they were read at."""

    version: int
    document: InventoryDocument
    keys: list[tuple[bytes, ApiKeyInfo]]


_copy_decoder = msgspec.msgpack.Decoder(InventoryCopy)


def copy_stamp(version: int, signed_by: str) -> str:
    """What a copy says it is: the layout, the inventory version and which secret signed it
    (`1:42:Kx3...`), so a rotation of the signing secret has the copy written again too."""
    return f"{INVENTORY_COPY_FORMAT}:{version}:{signed_by}"


def encode_inventory_copy(
    version: int, document: InventoryDocument, keys: Mapping[bytes, ApiKeyInfo]
) -> bytes:
    return msgspec.msgpack.encode(InventoryCopy(version, document, list(keys.items())))


def decode_inventory_copy(copy: bytes) -> InventoryCopy:
    return _copy_decoder.decode(copy)


class _Script(Protocol):
    async def __call__(self, keys: list[str], args: list[Arg]) -> Any: ...


class _ClientScript:
    """A script over the redis-py client (tests and tools that have no pipelined connection)."""

    def __init__(self, redis: Redis, source: str) -> None:
        self._script: AsyncScript = redis.register_script(source)

    async def __call__(self, keys: list[str], args: list[Arg]) -> Any:
        return await self._script(keys=keys, args=args)


class HotState:
    """Typed calls onto the Lua scripts; one Redis round trip each.

    With `fast` (a PipelinedRedis) the scripts run auto-pipelined on it, the hot path's way;
    everything else (reads, syncs) goes through the redis-py client.

    Every script a request waits on (the reservation, the answer to an offer, a loss notice, a
    tracking pixel, a playout confirmation) carries a deadline (with `fast` only): a script
    that Redis runs after it changes nothing and answers "late", raised here as a Redis
    timeout, so the caller's "unavailable, retry" is true (an answer script run after a Redis
    stall used to settle the deal that the 503 said had not happened). `fast` fails every call
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
        fast: PipelinedRedis | None = None,
        retention_ms: int = 25 * 3_600_000,
        deal_ttl_ms: int = 30 * 86_400_000,
    ) -> None:
        self.redis = redis
        self._fast = fast
        self.retention_ms = retention_ms
        self.deal_ttl_ms = deal_ttl_ms

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

    async def _connected(self) -> None:
        """Connect `fast` before a deadline is set: the connect measures Redis' clock."""
        if self._fast is not None and not self._fast.is_connected:
            await self._fast.connected()

    def _deadline(self) -> int:
        """The epoch ms (Redis' clock) after which a script sent now must change nothing; 0
        (none) without a pipelined connection, whose caller waits for the reply however long."""
        fast = self._fast
        if fast is None:
            return 0
        return fast.deadline_ms(min(_REPLY_MARGIN_S, fast.timeout / 2))

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
        hour = _hour_of(utc)
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
        await self._connected()
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
            self._deadline(),
        ]
        argv.extend(chain.from_iterable(offer.items()))  # the offer's fields as name, value pairs
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
        await self._connected()
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
            self._deadline(),
        ]
        result = await self._respond(keys, args)
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
        await self._connected()
        args: list[Arg] = [
            epoch_ms(now),
            today,
            yesterday,
            _json.encode(payload).decode(),
            self.retention_ms,
            self._deadline(),
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
        await self._connected()
        args: list[Arg] = [
            epoch_ms(now),
            today,
            yesterday,
            event,
            _json.encode(payload).decode(),
            _json.encode(billing).decode(),
            self.retention_ms,
            self._deadline(),
        ]
        result = await self._track(keys, args)
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
        await self._connected()
        args: list[Arg] = [
            publisher_id,
            playout_id,
            epoch_ms(now),
            _json.encode(
                {**payload, "playout_id": playout_id, "confirmed_ms": epoch_ms(now)}
            ).decode(),
            self._deadline(),
        ]
        result = await self._playout(keys, args)
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
            flat = await self._fast.execute("HGETALL", key)
            pairs: Iterable[tuple[Any, Any]] = zip(flat[::2], flat[1::2], strict=True)
        else:
            pairs = (await self.redis.hgetall(key)).items()
        return {_text(k): _text(v) for k, v in pairs} or None

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
        newer version wrote is left alone: the read predates it (a sync used to write the old
        total back, until the next reload). `force` writes every total. Returns how many
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
                    pipe.rename(f"{billing_codes_key(shard)}:next", billing_codes_key(shard))
                else:
                    pipe.delete(billing_codes_key(shard))
            await pipe.execute()
        return kept

    async def stored_copy_stamp(self) -> str | None:
        """The stamp of the inventory copy in Redis (`copy_stamp`); None when there is none."""
        stamp = await self.redis.hget(INVENTORY_COPY_KEY, "stamp")
        return None if stamp is None else _text(stamp)

    async def claim_copy_write(self, stamp: str) -> bool:
        """Whether this caller is the one to write the copy of `stamp` (for `COPY_CLAIM_MS`):
        every worker sees a new version within a poll, one writes its megabytes."""
        claimed = await self.redis.set(
            f"{INVENTORY_COPY_KEY}:claim:{stamp}", 1, nx=True, px=COPY_CLAIM_MS
        )
        return bool(claimed)

    async def release_copy_claim(self, stamp: str) -> None:
        """End `claim_copy_write`'s claim: the copy of `stamp` is written (or failed), so a
        later check that finds it wrong (lost, overwritten) may write it again at once."""
        await self.redis.delete(f"{INVENTORY_COPY_KEY}:claim:{stamp}")

    async def save_inventory_copy(self, stamp: str, mac: str, copy: bytes) -> None:
        """Keep `copy` (an `encode_inventory_copy`), its stamp and its signature, in one write."""
        await self.redis.hset(
            INVENTORY_COPY_KEY, mapping={"stamp": stamp, "mac": mac, "copy": copy}
        )

    async def load_inventory_copy(self) -> tuple[str, str, bytes] | None:
        """(stamp, signature, copy) as `save_inventory_copy` kept them; None without a copy."""
        stamp, mac, copy = await self.redis.hmget(INVENTORY_COPY_KEY, ["stamp", "mac", "copy"])
        if stamp is None or mac is None or not isinstance(copy, bytes):
            return None
        return _text(stamp), _text(mac), copy

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
