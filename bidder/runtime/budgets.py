"""The worker's view of every campaign's budget: refreshed from Redis a shard at a time, and
updated at once by each hot script's answer."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping

from bidder.runtime.clock import utcnow
from matching.engine import Budget
from matching.snapshot import SHARDS, campaign_shard
from store.errors import REDIS_DOWN
from store.hot import HotState, sum_parts

__all__ = ["Budgets"]

log = logging.getLogger("bidder.runtime")

#: How old a campaign's figures in the view get at most: every shard is read once per period.
_REFRESH_SECONDS = 1.0
#: With budget slices every shard holds a part of every campaign: each refresh reads the parts
#: of the campaigns whose home the shard is, and one refresh in this many the whole shard (the
#: other slices' parts, about 16 times as many fields), so the other slices' figures are up to
#: this many periods old.
_WHOLE_READ_EVERY = 8


class Budgets:
    """`figures` is what matching reads: each campaign's budget as last seen, summed over its
    budget slices (BUDGET_SLICES: each slice's part is refreshed with its shard and updated by
    the answers of the scripts run on it). A refresh read on another connection than the hot
    scripts' is taken with a `mark`, so an answer that came in while the read was on its way is
    not overwritten by the older read."""

    def __init__(self) -> None:
        self.figures: dict[str, Budget] = {}
        #: How long one pass over every shard takes (`refresh` reads one shard a tick).
        self.refresh_seconds = _REFRESH_SECONDS
        # Each campaign's parts: shard -> that slice's figures (the total on its home only).
        self._parts: dict[str, dict[int, Budget]] = {}
        # Answers noted so far, and the count at each campaign slice's last one.
        self._notes = 0
        self._noted: dict[tuple[str, int], int] = {}
        self._seen: list[set[str]] = [set() for _ in range(SHARDS)]  # campaign ids per shard
        # With budget slices: the campaigns whose home each shard is, and the refreshes of each
        # shard so far (one in _WHOLE_READ_EVERY reads the whole shard).
        self._homes: list[set[str]] = [set() for _ in range(SHARDS)]
        self._visits = [0] * SHARDS
        #: The inventory's campaigns whose home is a shard (the runtime sets it): a campaign
        #: just added is read with its home at once, not at the shard's next whole read.
        self.home_ids: Callable[[int], Collection[str]] | None = None
        self._redis_failing = False  # the log said Redis is unreachable, and not yet back

    def mark(self) -> int:
        """Taken before reading budgets on another connection than the hot scripts' (the
        refresh, an admin read): `fold` then keeps every answer noted since."""
        return self._notes

    def fold(self, fresh: Mapping[str, Budget], mark: int, shard: int | None = None) -> None:
        """Fold budgets read since `mark` into the view: each campaign's part on `shard`
        (None: its home, the whole budget without slices). A script's answer noted while the
        read was on its way (numbered after `mark`) may be newer than the read (another
        connection): that slice stays as the answer said."""
        noted = self._noted
        for cid, budget in fresh.items():
            where = campaign_shard(cid) if shard is None else shard
            if noted.get((cid, where), -1) <= mark:
                self._parts.setdefault(cid, {})[where] = budget
                self._sum(cid)

    def fold_campaign(self, campaign_id: str, parts: Mapping[int, Budget], mark: int) -> None:
        """Fold one campaign's every slice, read since `mark` (an admin read)."""
        for shard, part in parts.items():
            self.fold({campaign_id: part}, mark, shard)

    def note(self, campaign_id: str, budget: Budget | None, shard: int | None = None) -> None:
        """Fold a script's answer into the view: the part of the slice on `shard` (None: the
        campaign's home), today's figures kept as seen. The hot scripts' answers come back in
        the order Redis ran them (one pipelined connection), so the last answer noted is the
        newest."""
        if budget is None:
            return
        if shard is None:
            shard = campaign_shard(campaign_id)
        self._notes += 1
        self._noted[campaign_id, shard] = self._notes
        parts = self._parts.get(campaign_id)
        if parts is None:
            parts = self._parts[campaign_id] = {}
        seen = parts.get(shard)
        part = Budget(budget.total, budget.reserved, budget.spent, seen.daily_spent if seen else 0)
        parts[shard] = part
        figures = self.figures.get(campaign_id)
        if seen is None or figures is None:
            self._sum(campaign_id)
        elif len(parts) == 1:  # the campaign's one part, its home (it has figures)
            self.figures[campaign_id] = part
        else:  # the change of one slice: no sum over every slice on the hot path
            self.figures[campaign_id] = Budget(
                figures.total + part.total - seen.total,
                figures.reserved + part.reserved - seen.reserved,
                figures.spent + part.spent - seen.spent,
                figures.daily_spent,
            )

    def _sum(self, campaign_id: str) -> None:
        parts = self._parts.get(campaign_id, {})
        budget = sum_parts(campaign_shard(campaign_id), parts)
        if budget is None:
            self.figures.pop(campaign_id, None)
        else:
            self.figures[campaign_id] = budget

    async def refresh(self, hot: HotState, shard: int) -> None:
        """Read `shard`'s budgets from Redis into the view; a campaign slice no longer there
        is dropped (a campaign without its home's part is unknown). A Redis failure is logged
        when it starts and ends, not raised."""
        try:
            mark = self.mark()
            visit = self._visits[shard]
            self._visits[shard] = visit + 1
            if hot.slices > 1 and visit and (visit + shard) % _WHOLE_READ_EVERY:
                # Between whole reads, only the parts of the campaigns whose home this is.
                seen = self._homes[shard]
                ask = seen.union(self.home_ids(shard)) if self.home_ids else seen
                fresh = await hot.read_home_parts(utcnow(), shard, ask)
                self._homes[shard] = set(fresh)
                self._seen[shard] = self._seen[shard].difference(seen).union(fresh)
            else:
                seen = self._seen[shard]
                fresh = await hot.read_budgets(utcnow(), (shard,))  # the parts on `shard`
                self._homes[shard] = {c for c in fresh if campaign_shard(c) == shard}
                self._seen[shard] = set(fresh)
            for gone in seen.difference(fresh):
                self._parts.get(gone, {}).pop(shard, None)
                self._sum(gone)
            self.fold(fresh, mark, shard)
            self._note_redis_failure(None)
        except REDIS_DOWN as exc:
            self._note_redis_failure(exc)

    def _note_redis_failure(self, exc: BaseException | None) -> None:
        """Say in the log when Redis stops answering this worker's budget refresh (every
        second) and when it answers again, once each: an operator sees why requests fail."""
        if (exc is not None) == self._redis_failing:
            return
        self._redis_failing = exc is not None
        if exc is not None:
            log.error(
                "Redis unreachable: the Core API answers 503 and bids are no-bids until it answers",
                extra={"error": f"{type(exc).__name__}: {exc}"},
            )
        else:
            log.info("Redis reachable again")
