"""What must hold after a bench run, checked against Redis and Postgres directly:

- the record queue drains (every shard's stream read and acknowledged by the writer);
- every campaign balances: in Redis reserved >= 0, spent >= 0, reserved + spent <= total
  (remaining never negative; with budget slices, summed over the slices, and each slice within
  what it holds: the home within total - granted, another slice within its allowance, the
  allowances within what the home granted), total == the campaign's budget in Postgres,
  reserved == the sum of its open offers' prices (read from Redis: an open offer has no row in
  Postgres until its outcome's record), and spent == the sum of its billing records' gross in
  Postgres;
- every deal has its billing record, every acknowledged accept has its deal in Postgres, and a
  deal nobody saw acknowledged can only be a request cut off when wrk stopped;
- every acknowledged OpenRTB impression has its billing record;
- no 5xx anywhere.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from decimal import Decimal

import asyncpg
from redis.asyncio import Redis

from matching.money import MICROS_PER_CENT
from matching.snapshot import SHARDS
from store.hot import QUEUE_GROUP, budget_key, expiry_key, queue_key, tag

# Read-only, atomic per shard: the budget hash, plus the sum of the open offers' prices per
# campaign (offers of a shard share its hash tag, so this stays inside one cluster slot).
_SHARD_STATE = """
local open = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  local o = redis.call('HMGET', ARGV[1] .. id, 'status', 'campaign', 'price')
  if o[1] == 'open' then open[o[2]] = (open[o[2]] or 0) + tonumber(o[3]) end
end
local out = redis.call('HGETALL', KEYS[1])
for cid, sum in pairs(open) do
  table.insert(out, cid .. ':open')
  table.insert(out, string.format('%.0f', sum))
end
return out
"""


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Acknowledged:
    """What clients saw the server acknowledge during the run."""

    deal_ids: set[str] = field(default_factory=set)
    impressions: int = 0
    playouts: int = 0
    rejections: int = 0
    server_errors: int = 0
    # deals the server may have made for accepts whose answer wrk never read (it stops with
    # requests in flight): at most the accept run's connections, all from the offer pool
    cutoff_allowance: int = 0
    pool_offer_ids: set[str] = field(default_factory=set)


@dataclass
class CampaignBudget:
    """A campaign's budget in Redis, summed over its budget slices."""

    total: int = 0
    reserved: int = 0
    spent: int = 0
    open_offers: int = 0
    #: Budget slices: what the home granted, what the other slices hold as allowance, and
    #: each slice that holds more reserved and spent than it may (its shard).
    granted: int = 0
    allowances: int = 0
    over_slices: list[int] = field(default_factory=list)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def queue_depth(redis: Redis) -> int:
    """Records not yet written: the stream length, or the unacknowledged and unread entries
    when the writer keeps acknowledged entries in the stream."""
    waiting = 0
    for shard in range(SHARDS):
        key = queue_key(shard)
        length = int(await redis.xlen(key))
        if length == 0:
            continue
        groups = await redis.xinfo_groups(key)
        group = next((g for g in groups if _text(g["name"]) == QUEUE_GROUP), None)
        if group is None:
            waiting += length
            continue
        lag = group.get("lag")
        waiting += int(group.get("pending", 0)) + (int(lag) if lag is not None else length)
    return waiting


async def wait_drained(redis: Redis, timeout_s: float) -> tuple[bool, int, float]:
    """Wait until the record queue is empty: (drained, depth left, seconds waited)."""
    started = time.monotonic()
    depth = await queue_depth(redis)
    while depth > 0 and time.monotonic() - started < timeout_s:
        await asyncio.sleep(0.5)
        depth = await queue_depth(redis)
    return depth == 0, depth, time.monotonic() - started


async def redis_budgets(redis: Redis) -> dict[str, CampaignBudget]:
    script = redis.register_script(_SHARD_STATE)
    budgets: dict[str, CampaignBudget] = {}
    for shard in range(SHARDS):
        flat = await script(keys=[budget_key(shard), expiry_key(shard)], args=[f"{tag(shard)}:o:"])
        parts: dict[str, dict[str, int]] = {}
        for index in range(0, len(flat), 2):
            name, value = _text(flat[index]), int(flat[index + 1])
            campaign_id, _, part = name.rpartition(":")
            parts.setdefault(campaign_id, {})[part] = value
        for campaign_id, fields in parts.items():
            budget = budgets.setdefault(campaign_id, CampaignBudget())
            budget.total += fields.get("t", 0)
            budget.granted += fields.get("g", 0)
            budget.allowances += fields.get("a", 0)
            budget.reserved += fields.get("r", 0)
            budget.spent += fields.get("s", 0)
            budget.open_offers += fields.get("open", 0)
            holds = fields["t"] - fields.get("g", 0) if "t" in fields else fields.get("a", 0)
            if fields.get("r", 0) + fields.get("s", 0) > holds:
                budget.over_slices.append(shard)
    return budgets


def _micros(cents: Decimal) -> int:
    return int(cents * MICROS_PER_CENT)


def budget_checks(
    budgets: dict[str, CampaignBudget], totals: dict[str, int], billed: dict[str, int]
) -> list[Check]:
    """The per-campaign balance, all campaigns in one check each (naming the first offenders)."""
    problems: dict[str, list[str]] = {"balance": [], "total": [], "reserved": [], "spent": []}
    for campaign_id, budget in budgets.items():
        if budget.reserved < 0 or budget.spent < 0 or budget.reserved + budget.spent > budget.total:
            problems["balance"].append(f"{campaign_id} {budget}")
        elif budget.over_slices or budget.allowances > budget.granted:
            problems["balance"].append(f"{campaign_id} a budget slice over what it holds {budget}")
        if campaign_id in totals and totals[campaign_id] != budget.total:
            problems["total"].append(f"{campaign_id} redis {budget.total} pg {totals[campaign_id]}")
        if budget.reserved != budget.open_offers:
            problems["reserved"].append(
                f"{campaign_id} reserved {budget.reserved} open offers {budget.open_offers}"
            )
        if budget.spent != billed.get(campaign_id, 0):
            problems["spent"].append(
                f"{campaign_id} spent {budget.spent} billed {billed.get(campaign_id, 0)}"
            )
    for campaign_id, amount in billed.items():
        if campaign_id not in budgets and amount:
            problems["spent"].append(f"{campaign_id} billed {amount} but has no budget in Redis")
    labels = {
        "balance": "reserved >= 0, spent >= 0, reserved + spent <= total",
        "total": "Redis total == Postgres budget_cents",
        "reserved": "reserved == sum of open offers' prices",
        "spent": "spent == sum of billing records' gross",
    }
    return [
        Check(
            f"every campaign: {labels[kind]}",
            not found,
            f"{len(budgets)} campaigns checked"
            if not found
            else f"{len(found)} campaigns off, e.g. " + "; ".join(found[:3]),
        )
        for kind, found in problems.items()
    ]


async def record_checks(conn: asyncpg.Connection, seen: Acknowledged) -> list[Check]:
    deals = {
        str(r["deal_id"]): str(r["offer_id"])
        for r in await conn.fetch("SELECT deal_id, offer_id FROM deals")
    }
    billing = await conn.fetch("SELECT source, deal_id FROM billing_records")
    core_billing = {str(r["deal_id"]) for r in billing if r["source"] == "core_accept"}
    impressions = sum(1 for r in billing if r["source"] == "openrtb_impression")
    playouts = int(await conn.fetchval("SELECT count(*) FROM playouts"))
    rejections = int(await conn.fetchval("SELECT count(*) FROM rejections"))
    lost = seen.deal_ids - set(deals)
    extra = set(deals) - seen.deal_ids
    extra_outside_pool = [d for d in extra if deals[d] not in seen.pool_offer_ids]
    return [
        Check(
            "every acknowledged accept has its deal in Postgres",
            not lost,
            f"{len(seen.deal_ids)} acknowledged, {len(deals)} deals in Postgres"
            + (f"; missing e.g. {sorted(lost)[:3]}" if lost else ""),
        ),
        Check(
            "deals not acknowledged are only accepts cut off when wrk stopped",
            len(extra) <= seen.cutoff_allowance and not extra_outside_pool,
            f"{len(extra)} unacknowledged (allowed: {seen.cutoff_allowance} in flight at the "
            f"end of the accept run), {len(extra_outside_pool)} outside the accept pool",
        ),
        Check(
            "every deal has exactly its billing record (and no billing without a deal)",
            core_billing == set(deals),
            f"{len(deals)} deals, {len(core_billing)} core billing records",
        ),
        Check(
            "every acknowledged OpenRTB impression is billed once",
            impressions == seen.impressions,
            f"{seen.impressions} acknowledged, {impressions} impression billing records",
        ),
        Check(
            "playouts and rejections in Postgres == those acknowledged",
            (playouts, rejections) == (seen.playouts, seen.rejections),
            f"playouts {seen.playouts} acknowledged, {playouts} stored; "
            f"rejections {seen.rejections} acknowledged, {rejections} stored",
        ),
    ]


async def check_all(
    redis: Redis, database_url: str, seen: Acknowledged, drain_timeout_s: float = 120.0
) -> list[Check]:
    drained, depth, waited = await wait_drained(redis, drain_timeout_s)
    checks = [
        Check(
            "record queue drained into Postgres",
            drained,
            f"depth {depth} after {waited:.1f} s",
        ),
        Check("no 5xx anywhere", seen.server_errors == 0, f"{seen.server_errors} answers 5xx"),
    ]
    budgets = await redis_budgets(redis)
    conn = await asyncpg.connect(database_url)
    try:
        totals = {
            str(r["id"]): _micros(r["budget_cents"])
            for r in await conn.fetch("SELECT id, budget_cents FROM campaigns")
        }
        billed = {
            str(r["campaign_id"]): _micros(r["gross"])
            for r in await conn.fetch(
                "SELECT campaign_id, sum(gross_price_cents) AS gross "
                "FROM billing_records GROUP BY campaign_id"
            )
        }
        checks += budget_checks(budgets, totals, billed)
        checks += await record_checks(conn, seen)
    finally:
        await conn.close()
    return checks
