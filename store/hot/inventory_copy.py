"""The signed copy of the inventory in Redis, from which a worker that starts while Postgres is
down builds its snapshot: its layout (`InventoryCopy`), its encoding, and where it is kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from redis.asyncio import Redis

from matching.inventory import InventoryDocument
from matching.snapshot import ApiKeyInfo

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


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class InventoryCopies:
    """Where the copy is kept: one Redis hash, written by one worker per stamp."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

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
