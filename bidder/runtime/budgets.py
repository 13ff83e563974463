"""The worker's view of every campaign's budget: refreshed from Redis a shard at a time, and
updated at once by each hot script's answer."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from bidder.runtime.clock import utcnow
from matching.engine import Budget
from matching.snapshot import SHARDS
from store.errors import REDIS_DOWN
from store.hot import HotState

__all__ = ["Budgets"]

log = logging.getLogger("bidder.runtime")

#: How old a campaign's figures in the view get at most: every shard is read once per period.
_REFRESH_SECONDS = 1.0


class Budgets:
    """`figures` is what matching reads: each campaign's budget as last seen. A refresh read
    on another connection than the hot scripts' is taken with a `mark`, so an answer that
    came in while the read was on its way is not overwritten by the older read."""

    def __init__(self) -> None:
        self.figures: dict[str, Budget] = {}
        #: How long one pass over every shard takes (`refresh` reads one shard a tick).
        self.refresh_seconds = _REFRESH_SECONDS
        # Answers noted so far, and the count at each campaign's last one.
        self._notes = 0
        self._noted: dict[str, int] = {}
        self._seen: list[set[str]] = [set() for _ in range(SHARDS)]  # campaign ids per shard
        self._redis_failing = False  # the log said Redis is unreachable, and not yet back

    def mark(self) -> int:
        """Taken before reading budgets on another connection than the hot scripts' (the
        refresh, an admin read): `fold` then keeps every answer noted since."""
        return self._notes

    def fold(self, fresh: Mapping[str, Budget], mark: int) -> None:
        """Fold budgets read since `mark` into the view. A script's answer noted while the
        read was on its way (numbered after `mark`) may be newer than the read (another
        connection): that campaign stays as the answer said."""
        noted = self._noted
        self.figures.update(
            (cid, budget) for cid, budget in fresh.items() if noted.get(cid, -1) <= mark
        )

    def note(self, campaign_id: str, budget: Budget | None) -> None:
        """Fold a script's answer into the view (today's figures kept as seen). The hot
        scripts' answers come back in the order Redis ran them (one pipelined connection), so
        the last answer noted is the newest."""
        if budget is None:
            return
        self._notes += 1
        self._noted[campaign_id] = self._notes
        seen = self.figures.get(campaign_id)
        daily_reserved = seen.daily_reserved if seen else 0
        daily_spent = seen.daily_spent if seen else 0
        self.figures[campaign_id] = Budget(
            budget.total, budget.reserved, budget.spent, daily_reserved, daily_spent
        )

    async def refresh(self, hot: HotState, shard: int) -> None:
        """Read `shard`'s budgets from Redis into the view; a campaign no longer there is
        dropped (unknown). A Redis failure is logged when it starts and ends, not raised."""
        try:
            mark = self.mark()
            fresh = await hot.read_budgets(utcnow(), (shard,))
            for gone in self._seen[shard].difference(fresh):
                self.figures.pop(gone, None)
            self.fold(fresh, mark)
            self._seen[shard] = set(fresh)
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
