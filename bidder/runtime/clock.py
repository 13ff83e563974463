"""The wall clock the edge reads (`matching/` is given `now`, never reads it)."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["utcnow"]


def utcnow() -> datetime:
    return datetime.now(UTC)
