"""Reconcile the Redis budget counters with the records (`bidder reconcile [--repair]`).

What is authoritative for what:

- **spent** (`<cid>:s`): the billing records. Every spend is made by the same Lua step that
  enqueues its billing record, so spent must equal the gross of the campaign's billing records
  in Postgres plus those still in the queue (or dead-lettered, which are real spends not yet in
  Postgres).
- **reserved** (`<cid>:r`): the open offers Redis holds (the shard's expiry set lists exactly
  the open offers; each hash carries its price). Only Redis holds them: a reservation queues no
  record, an offer's row reaches Postgres with its outcome's record, so Postgres is no measure
  of what is reserved.
- **total** (`<cid>:t`): `campaigns.budget_cents` in Postgres (the inventory loop copies it).

A campaign whose budget is split into slices (BUDGET_SLICES) is compared slice by slice: an
offer's id carries the shard it reserved on, so its open offer and its billing records belong
to that slice's reserved and spent. Its home's grants (`<cid>:g`) must equal the allowances of
its other slices (`<cid>:a`): a move interrupted between its two steps leaves `g` above them
(money stranded, never overspent), and `--repair` lowers `g` back once the campaign's budget
has not moved for MOVES_QUIET_MS (no credit of a move can still land then).

A read takes one atomic snapshot per shard (counters, open offers, queued records), then reads
Postgres; a billing record found in both is counted once. While traffic flows a record can still
slip between the two reads, so a difference is reported only when two passes agree, and
`--repair` writes with compare-and-set (a counter that moved meanwhile is left alone and
reported). Daily counters (`{bN}:day:*`) are not reconciled: they expire after three days.
"""

from __future__ import annotations

import asyncio
import importlib.resources
import time
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import msgspec
from redis.asyncio import Redis

from matching.money import cents_to_micros, micros_to_cents
from matching.snapshot import SHARDS, campaign_shard
from store.hot.keys import budget_key, expiry_key, offer_key, queue_key
from store.hot.slices import MOVES_QUIET_MS
from store.postgres import Conn
from store.records import dead_letter_key

_BILLING_TYPES = (b"offer_accepted", b"impression_billed")
#: The budget hash fields reconcile reads (store/lua/_common.lua): total, reserved, spent, a
#: slice's allowance and its last move, the home's grants and their last move.
_COUNTERS = frozenset(("t", "r", "s", "a", "am", "g", "gm"))
_json = msgspec.json.Decoder()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class SliceCheck:
    """One budget slice of a campaign (docs/architecture.md, "Budget slices"): its counters on
    its shard beside what the records of its offers (whose ids carry the shard) prove."""

    shard: int
    reserved: int = 0
    spent: int = 0
    #: The allowance granted to a slice other than the home (None on the home).
    allowance: int | None = None
    #: When a move last changed the allowance (the home: its grants), Redis' clock, epoch ms.
    moved_ms: int = 0
    open_offers_in_redis: int = 0
    open_offer_count: int = 0
    billed_in_postgres: int = 0
    billed_in_queue: int = 0
    billed_dead_lettered: int = 0

    @property
    def billed(self) -> int:
        return self.billed_in_postgres + self.billed_in_queue + self.billed_dead_lettered


@dataclass
class CampaignCheck:
    """One campaign's counters (Redis) beside what the records prove; micro-cents. Reserved,
    spent and the record figures are summed over the campaign's budget slices (`slices`)."""

    campaign_id: str
    shard: int
    total: int = 0
    reserved: int = 0
    spent: int = 0
    budget_in_postgres: int | None = None
    open_offers_in_redis: int = 0
    open_offer_count: int = 0
    billed_in_postgres: int = 0
    billed_in_queue: int = 0
    billed_dead_lettered: int = 0
    # Offer rows Postgres still shows as `open`: informative only, compared with nothing. New
    # offers get their row with their outcome; these are rows left by an older version's
    # `offer_created` entries or written by a tracking event fired while the offer was open,
    # and each becomes final when its outcome's record is written.
    open_in_postgres: int = 0
    #: What the home granted its other slices (`g`), and when it last moved (`gm`).
    granted: int = 0
    granted_ms: int = 0
    slices: dict[int, SliceCheck] = field(default_factory=dict)

    @property
    def billed(self) -> int:
        return self.billed_in_postgres + self.billed_in_queue + self.billed_dead_lettered

    @property
    def allowances(self) -> int:
        """What the slices other than the home hold as allowance."""
        return sum(part.allowance or 0 for part in self.slices.values())

    @property
    def sliced(self) -> bool:
        """Whether the campaign has budget slices besides its home."""
        return any(shard != self.shard for shard in self.slices) or self.granted != 0

    def slice(self, shard: int) -> SliceCheck:
        return self.slices.setdefault(shard, SliceCheck(shard))

    def differences(self) -> list[str]:
        out = []
        if self.spent != self.billed:
            out.append(
                f"spent {micros_to_cents(self.spent)} != billing records "
                f"{micros_to_cents(self.billed)} cents"
            )
        if self.reserved != self.open_offers_in_redis:
            out.append(
                f"reserved {micros_to_cents(self.reserved)} != open offers "
                f"{micros_to_cents(self.open_offers_in_redis)} cents "
                f"({self.open_offer_count} offers)"
            )
        if self.budget_in_postgres is not None and self.total != self.budget_in_postgres:
            out.append(
                f"total {micros_to_cents(self.total)} != campaign budget "
                f"{micros_to_cents(self.budget_in_postgres)} cents"
            )
        if self.total - self.reserved - self.spent < 0:
            out.append("remaining is negative")
        if self.sliced:
            for shard, part in sorted(self.slices.items()):
                if part.spent != part.billed:
                    out.append(
                        f"slice {{b{shard}}}: spent {micros_to_cents(part.spent)} != billing "
                        f"records {micros_to_cents(part.billed)} cents"
                    )
                if part.reserved != part.open_offers_in_redis:
                    out.append(
                        f"slice {{b{shard}}}: reserved {micros_to_cents(part.reserved)} != "
                        f"open offers {micros_to_cents(part.open_offers_in_redis)} cents"
                    )
            if self.granted > self.allowances:
                out.append(
                    f"granted {micros_to_cents(self.granted)} != allowances "
                    f"{micros_to_cents(self.allowances)} cents: "
                    f"{micros_to_cents(self.granted - self.allowances)} stranded"
                )
            elif self.granted < self.allowances:
                out.append(
                    f"allowances {micros_to_cents(self.allowances)} exceed granted "
                    f"{micros_to_cents(self.granted)} cents"
                )
        return out


@dataclass
class Report:
    campaigns: dict[str, CampaignCheck] = field(default_factory=dict)
    repaired: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    # Entries in the dead-letter streams (every type), and billing entries (queued or dead)
    # whose campaign or amount cannot be read, so no campaign's figures include them.
    dead_letters: int = 0
    unreadable: int = 0
    #: Stranded budget (granted by a campaign's home, credited to no slice) not given back
    #: because the campaign's budget moved within the last MOVES_QUIET_MS: rerun later.
    waiting: list[str] = field(default_factory=list)
    #: Each shard's Redis clock when it was read (epoch ms).
    clocks: dict[int, int] = field(default_factory=dict)
    #: Each shard's Redis clock less this host's when it was read (ms): how far apart the
    #: primaries' clocks are, whatever the time the reads took.
    skews: dict[int, int] = field(default_factory=dict)

    def campaign(self, campaign_id: str) -> CampaignCheck:
        return self.campaigns.setdefault(
            campaign_id, CampaignCheck(campaign_id, campaign_shard(campaign_id))
        )

    @property
    def differing(self) -> dict[str, list[str]]:
        return {cid: d for cid, c in sorted(self.campaigns.items()) if (d := c.differences())}

    def render(self) -> str:
        lines = [f"campaigns checked: {len(self.campaigns)}"]
        for cid, problems in self.differing.items():
            for problem in problems:
                lines.append(f"DIFF {cid}: {problem}")
        lines += [f"REPAIRED {cid}" for cid in self.repaired]
        lines += [f"MOVED {cid}: counters changed while reconciling, rerun" for cid in self.moved]
        lines += [
            f"WAITING {cid}: its budget slices moved money in the last "
            f"{MOVES_QUIET_MS // 1000} s; the stranded amount is given back by a later run"
            for cid in self.waiting
        ]
        if self.dead_letters:
            lines.append(
                f"DEAD LETTERS {self.dead_letters}: records the writer could not write "
                "(XRANGE {bN}:dead - +, docs/operations.md)"
            )
        if self.unreadable:
            lines.append(
                f"UNREADABLE {self.unreadable} billing entries (queued or dead-lettered): "
                "their amounts are in no campaign's figures"
            )
        if not self.differing:
            lines.append(
                "OK: Redis agrees with the records for every campaign (reserved = its open "
                "offers, spent = its billing records, total = Postgres' budget)"
            )
        return "\n".join(lines)


#: Open offers read per round trip: a check run inside a serving worker (the ops gauges' fleet
#: check) parses a bounded reply at a time, so requests are served between them instead of
#: waiting for one reply of every open offer (about a second for 100,000).
_OFFERS_PER_READ = 256


async def _open_offers(redis: Redis, shard: int, open_ids: list[Any]) -> list[Any]:
    """(campaign, price, status) of each offer in `open_ids`, `_OFFERS_PER_READ` a round trip."""
    offers: list[Any] = []
    for start in range(0, len(open_ids), _OFFERS_PER_READ):
        async with redis.pipeline(transaction=False) as pipe:
            for offer_id in open_ids[start : start + _OFFERS_PER_READ]:
                pipe.hmget(offer_key(shard, _text(offer_id)), "campaign", "price", "status")
            offers += await pipe.execute()
    return offers


def _counters(report: Report, shard: int, counters: dict[Any, Any]) -> None:
    """Fold one shard's budget hash into its campaigns' checks."""
    for raw_field, value in counters.items():
        cid, _, part = _text(raw_field).rpartition(":")
        if part not in _COUNTERS:
            continue
        check = report.campaign(cid)
        where = check.slice(shard)
        amount = int(value)
        if part == "t":
            check.total = amount
        elif part == "r":
            where.reserved = amount
            check.reserved += amount
        elif part == "s":
            where.spent = amount
            check.spent += amount
        elif part == "a":
            where.allowance = amount
        elif part == "g":
            check.granted = amount
        elif part == "gm":
            check.granted_ms = amount
        else:  # am
            where.moved_ms = amount


def _queued_billing(
    report: Report, shard: int, queued: list[Any], dead: list[Any], queued_ids: set[str]
) -> None:
    """Fold one shard's billing entries still in Redis (queue, dead letters) into its
    campaigns' checks, and note their billing ids."""
    for entries, dead_letter in ((queued, False), (dead, True)):
        for _, fields in entries:
            if fields.get(b"t") not in _BILLING_TYPES:
                continue
            try:  # a dead letter may be anything: its fields are what could not be read
                offer = _json.decode(fields[b"o"])
                payload = _json.decode(fields[b"p"])
                cid = str(offer["campaign"])
                gross = int(payload["gross_micros"])
                billing_id = str(payload["billing_id"])
            except (msgspec.DecodeError, KeyError, TypeError, ValueError):
                report.unreadable += 1
                continue
            check = report.campaign(cid)
            if dead_letter:
                check.billed_dead_lettered += gross
                check.slice(shard).billed_dead_lettered += gross
            else:
                check.billed_in_queue += gross
                check.slice(shard).billed_in_queue += gross
            queued_ids.add(billing_id)


_CLOCK = "return redis.call('TIME')"


async def _redis_snapshot(redis: Redis, report: Report) -> set[str]:
    """Counters, open offers and queued billing per shard, each shard read atomically (with
    the shard's clock). Returns the billing ids still in Redis (queue or dead letters)."""
    queued_ids: set[str] = set()
    for shard in range(SHARDS):
        async with redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(budget_key(shard))
            pipe.zrange(expiry_key(shard), 0, -1)
            pipe.xrange(queue_key(shard))
            pipe.xrange(dead_letter_key(shard))
            pipe.eval(_CLOCK, 1, budget_key(shard))
            counters, open_ids, queued, dead, clock = await pipe.execute()
        report.clocks[shard] = int(clock[0]) * 1000 + int(clock[1]) // 1000
        report.skews[shard] = report.clocks[shard] - int(time.time() * 1000)
        _counters(report, shard, counters)
        for campaign, price, status in await _open_offers(redis, shard, open_ids):
            if campaign is None or price is None or status != b"open":
                continue
            check = report.campaign(_text(campaign))
            check.open_offers_in_redis += int(price)
            check.open_offer_count += 1
            check.slice(shard).open_offers_in_redis += int(price)
            check.slice(shard).open_offer_count += 1
        report.dead_letters += len(dead)
        _queued_billing(report, shard, queued, dead, queued_ids)
    return queued_ids


# By campaign and the shard of the offer (its id's first hex digit): the budget slice it spent.
_BILLED_SQL = """
SELECT campaign_id::text AS cid, substr(offer_id::text, 1, 1) AS shard,
       sum(gross_price_cents) AS gross
FROM billing_records WHERE NOT (billing_id::text = ANY($1::text[])) GROUP BY 1, 2
"""
_OPEN_SQL = """
SELECT campaign_id::text AS cid, sum(bid_price_cents) AS price
FROM offers WHERE status = 'open' GROUP BY campaign_id
"""


async def check_balances(redis: Redis, conn: Conn) -> Report:
    """One pass: Redis snapshot first, then the records in Postgres."""
    report = Report()
    queued_ids = await _redis_snapshot(redis, report)
    for row in await conn.fetch("SELECT id::text AS cid, budget_cents FROM campaigns"):
        check = report.campaign(row["cid"])
        check.budget_in_postgres = cents_to_micros(row["budget_cents"], exact=False)
    for row in await conn.fetch(_BILLED_SQL, sorted(queued_ids)):
        check = report.campaign(row["cid"])
        gross = cents_to_micros(Decimal(row["gross"]))
        check.billed_in_postgres += gross
        # A campaign without slices spends on its home whatever its offer ids say.
        shard = int(row["shard"], 16) if check.sliced else check.shard
        check.slice(shard).billed_in_postgres += gross
    for row in await conn.fetch(_OPEN_SQL):
        check = report.campaign(row["cid"])
        check.open_in_postgres = cents_to_micros(Decimal(row["price"]))
    return report


async def reconcile(
    redis: Redis,
    conn: Conn,
    *,
    repair: bool = False,
    settle_seconds: float = 0.5,
    quiet_ms: int = MOVES_QUIET_MS,
) -> Report:
    """Compare twice (`settle_seconds` apart); keep only the differences both passes saw, and
    with `repair` set those counters to what the records prove. A budget stranded between a
    campaign's slices (`g` above the allowances) is given back only once no move of that
    campaign's budget happened for `quiet_ms` on any of its slices (docs/architecture.md,
    "Budget slices": then no credit still on its way can land after this read)."""
    first = await check_balances(redis, conn)
    if not first.differing:
        return first
    await asyncio.sleep(settle_seconds)
    second = await check_balances(redis, conn)
    stable = {
        cid: check
        for cid, check in second.campaigns.items()
        if check.differences() and cid in first.differing
    }
    report = Report(
        campaigns={
            cid: (check if cid in stable else _balanced(check))
            for cid, check in second.campaigns.items()
        },
        clocks=second.clocks,
        skews=second.skews,
    )
    if repair:
        await _repair(redis, report, stable, quiet_ms)
    return report


def _balanced(check: CampaignCheck) -> CampaignCheck:
    """A campaign whose difference did not persist: reported as fine."""
    slices = {
        shard: SliceCheck(
            shard,
            reserved=part.open_offers_in_redis,
            spent=part.billed,
            allowance=part.allowance,
            moved_ms=part.moved_ms,
            open_offers_in_redis=part.open_offers_in_redis,
            open_offer_count=part.open_offer_count,
            billed_in_postgres=part.billed,
        )
        for shard, part in check.slices.items()
    }
    return CampaignCheck(
        check.campaign_id,
        check.shard,
        total=check.total,
        reserved=check.open_offers_in_redis,
        spent=check.billed,
        budget_in_postgres=check.total,
        open_offers_in_redis=check.open_offers_in_redis,
        open_offer_count=check.open_offer_count,
        billed_in_postgres=check.billed,
        open_in_postgres=check.open_in_postgres,
        granted=sum(part.allowance or 0 for part in slices.values()),
        granted_ms=check.granted_ms,
        slices=slices,
    )


#: How far apart the primaries' clocks may be for reconcile to judge a move's deadline: a debit
#: stamps it on one primary's clock and its credit checks it on another's.
CLOCK_SPREAD_MS = 2_000


def _quiet(check: CampaignCheck, report: Report, quiet_ms: int) -> bool:
    """No move of the campaign's budget for `quiet_ms`, every stamp (made on whichever
    primary) against the earliest clock read: every credit of a move before the read has
    landed or can no longer land. Never while the primaries' clocks are further apart than
    CLOCK_SPREAD_MS: a credit checks its deadline on another primary than the one that set it,
    so a skewed clock could still let one land after the repair."""
    clocks, skews = report.clocks, report.skews
    if not clocks or max(skews.values()) - min(skews.values()) > CLOCK_SPREAD_MS:
        return False
    earliest = min(clocks.values())
    return earliest - check.granted_ms > quiet_ms and all(
        earliest - part.moved_ms > quiet_ms
        for part in check.slices.values()
        if part.allowance is not None
    )


async def _repair(
    redis: Redis, report: Report, stable: dict[str, CampaignCheck], quiet_ms: int
) -> None:
    folder = importlib.resources.files("store") / "lua"
    script = redis.register_script((folder / "reconcile_set.lua").read_text())
    for cid, check in sorted(stable.items()):
        total = check.total if check.budget_in_postgres is None else check.budget_in_postgres
        done = True
        check.slice(check.shard)  # the home's counters are written even when absent
        for shard, part in sorted(check.slices.items(), key=lambda item: item[0] != check.shard):
            args: list[Any] = [cid]
            if shard == check.shard:
                args += ["t", check.total, total]
            elif (part.reserved, part.spent) == (part.open_offers_in_redis, part.billed):
                continue
            args += ["r", part.reserved, part.open_offers_in_redis]
            args += ["s", part.spent, part.billed]
            if int(await script(keys=[budget_key(shard)], args=args)) != 1:
                done = False
                continue
            part.reserved, part.spent = part.open_offers_in_redis, part.billed
        waiting = False
        if check.sliced and check.granted != check.allowances:
            if _quiet(check, report, quiet_ms):
                # Back to what the slices hold: a stranded grant returns to the home.
                args = [cid, "g", check.granted, check.allowances]
                args += ["gm", check.granted_ms, check.granted_ms]
                if int(await script(keys=[budget_key(check.shard)], args=args)) == 1:
                    check.granted = check.allowances
                else:
                    done = False
            else:
                report.waiting.append(cid)
                waiting = True
        if done and not waiting:
            report.repaired.append(cid)
            check.total = total
            check.reserved = sum(part.reserved for part in check.slices.values())
            check.spent = sum(part.spent for part in check.slices.values())
        elif not done:
            report.moved.append(cid)


def summarize(report: Report) -> dict[str, Any]:
    """The report as JSON-ready data (cents as Decimal)."""
    campaigns: dict[str, Any] = defaultdict(dict)
    for cid, check in sorted(report.campaigns.items()):
        campaigns[cid] = {
            "total_cents": micros_to_cents(check.total),
            "reserved_cents": micros_to_cents(check.reserved),
            "spent_cents": micros_to_cents(check.spent),
            "remaining_cents": micros_to_cents(check.total - check.reserved - check.spent),
            "open_offers_cents": micros_to_cents(check.open_offers_in_redis),
            "billed_cents": micros_to_cents(check.billed),
            "billed_in_queue_cents": micros_to_cents(check.billed_in_queue),
            "billed_dead_lettered_cents": micros_to_cents(check.billed_dead_lettered),
            "open_in_postgres_cents": micros_to_cents(check.open_in_postgres),
            "differences": check.differences(),
        }
        if check.sliced:  # budget slices: what the home granted and each slice's figures
            campaigns[cid]["granted_cents"] = micros_to_cents(check.granted)
            campaigns[cid]["slices"] = {
                f"b{shard}": {
                    "allowance_cents": None
                    if part.allowance is None
                    else micros_to_cents(part.allowance),
                    "reserved_cents": micros_to_cents(part.reserved),
                    "spent_cents": micros_to_cents(part.spent),
                    "open_offers_cents": micros_to_cents(part.open_offers_in_redis),
                    "billed_cents": micros_to_cents(part.billed),
                }
                for shard, part in sorted(check.slices.items())
            }
    return {
        "campaigns": dict(campaigns),
        "differing": len(report.differing),
        "repaired": report.repaired,
        "moved": report.moved,
        "waiting": report.waiting,
        "dead_letters": report.dead_letters,
        "unreadable_billing_entries": report.unreadable,
    }
