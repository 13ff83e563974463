"""The hot state's Redis key names.

Every key a script touches carries the hash tag `{bN}`, N being the campaign's shard, so each
script stays within one Redis Cluster slot.
"""

from __future__ import annotations

from matching.snapshot import SHARDS

#: The consumer group of the record writers on every shard's queue stream.
QUEUE_GROUP = "writers"

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


def queue_keys() -> list[str]:
    return [queue_key(s) for s in range(SHARDS)]
