"""Tracking pixel endpoint (being built)."""

from typing import Any

from bidder.settings import Settings


def routes(settings: Settings) -> list[Any]:
    return []
