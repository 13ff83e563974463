"""JSON bodies holding integers msgspec does not decode (more digits than Python's `int()`
converts, 4,300): well-formed JSON all the same, so each field's own rule judges them."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from matching.money import json_decimal

#: msgspec's message for a JSON integer past what it decodes (more digits than `int()` takes).
JSON_INT_OUT_OF_RANGE = "Integer value out of range"
#: On this path, integers of more digits are read as the Decimal they are: linear, where
#: `int()` is quadratic in the digits (a 1 MB bid of 4,000-digit integers would cost seconds).
#: No count, width or duration has that many digits, and their rules refuse a Decimal.
_INT_DIGITS = 300


def _big_int(text: str) -> int | Decimal:
    return int(text) if len(text) <= _INT_DIGITS else Decimal(text)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def json_tree_with_big_integers(body: bytes) -> Any:
    """The JSON tree of a body holding an integer msgspec refuses (`JSON_INT_OUT_OF_RANGE`):
    decoded by the standard library, numbers as `json_decimal` reads them, integers of more
    than 300 digits as Decimals (never `int`: a 5,000-digit one is no count and no width).
    Only this rare path pays for it. ValueError when the body is not JSON after all, invalid
    UTF-8 included (msgspec stops at the integer, before the rest of the body's bytes; the
    standard library would let an encoded surrogate through)."""
    try:
        return json.loads(
            body.decode("utf-8"),
            parse_float=json_decimal,
            parse_int=_big_int,
            parse_constant=_no_constant,
        )
    except RecursionError:
        raise ValueError("nested too deeply") from None
