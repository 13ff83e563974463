"""Budget slices: a campaign's budget split over several shards, so one campaign that wins
most requests spreads its Redis work over the cluster's primaries (docs/architecture.md,
"Budget slices").

With K slices, slice j of a campaign lives on shard (home + j * 16 / K) % 16, slice 0 being
the campaign's home shard (`campaign_shard`). A request takes the slice of its screen
(crc32(screen id) % K), so one screen always uses one slice and the per-screen frequency cap
stays exact. The home keeps the campaign's total `t` and what it granted the other slices
`g`; each other slice keeps its allowance `a`. Every slice keeps its own reserved and spent.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping

from matching.engine import Budget
from matching.snapshot import SHARDS

#: The slice counts BUDGET_SLICES accepts: the divisors of the shard count.
SLICE_COUNTS = tuple(k for k in range(1, SHARDS + 1) if SHARDS % k == 0)

#: How long after a debit (grant.lua, take.lua) its credit (credit.lua) may still land: later,
#: the credit changes nothing and the amount stays stranded (an under-spend reconcile repairs).
MOVE_WINDOW_MS = 10_000

#: What reconcile waits for before it gives a stranded amount back: no move of the campaign's
#: budget on any slice for this long (the window, plus room for the primaries' clocks to
#: differ), so no credit of a move it did not see can land after it read the slices.
MOVES_QUIET_MS = 30_000


def slice_shards(home: int, slices: int) -> list[int]:
    """The shards of a campaign's `slices` slices, the home (slice 0) first."""
    step = SHARDS // slices
    return [(home + j * step) % SHARDS for j in range(slices)]


def slice_index(screen_id: str, slices: int) -> int:
    """The slice a screen's requests use."""
    return 0 if slices == 1 else zlib.crc32(screen_id.encode()) % slices


def sum_parts(home: int, parts: Mapping[int, Budget]) -> Budget | None:
    """A campaign's budget from its slices' parts (shard -> part; the home's part carries the
    total, the others 0): None without the home's part (the campaign is unknown)."""
    if home not in parts:
        return None
    if len(parts) == 1:
        return parts[home]
    return add_parts(parts.values())


def add_parts(parts: Iterable[Budget]) -> Budget:
    """The sum of budget parts, field by field."""
    total = reserved = spent = daily_spent = 0
    for part in parts:
        total += part.total
        reserved += part.reserved
        spent += part.spent
        daily_spent += part.daily_spent
    return Budget(total, reserved, spent, daily_spent)
