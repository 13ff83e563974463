"""Routes (being built)."""

from typing import Any

routes: list[Any] = []
