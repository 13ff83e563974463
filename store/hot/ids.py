"""Ids and clock texts of the hot state: offer and deal ids that carry their shard, random
UUIDs, and the day, hour and epoch-millisecond forms the scripts and records use.

Offer and deal ids carry their shard in their first hex digit, so the id alone finds its keys.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

from matching.inventory import CANONICAL_UUID
from matching.snapshot import SHARDS

# The digit after the version nibble: RFC 4122 variant bits (10xx) over two random bits.
_VARIANT_DIGIT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


class _RandomHex:
    """Random hex digits from the OS, fetched 4 KiB at a time: one getrandom() call per 256 ids
    instead of one per id (a system call is a fifth of an id's cost otherwise). Refilled after
    a fork, so worker processes never share digits."""

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


def hour_of(utc: datetime) -> str:
    """The clock hour of a UTC moment (`2026050410`): the frequency caps' key."""
    return f"{utc.year:04d}{utc.month:02d}{utc.day:02d}{utc.hour:02d}"


def epoch_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)
