"""The JSON tree of a body msgspec stopped at (an integer of more than 4,300 digits): every
number exact, huge integers as Decimals, and anything that is not JSON refused."""

from __future__ import annotations

from decimal import Decimal

import pytest

from matching.json_numbers import json_tree_with_big_integers


def test_numbers_are_exact_and_huge_integers_are_decimals() -> None:
    huge = "1" + "0" * 5000
    tree = json_tree_with_big_integers(f'{{"a": {huge}, "b": 0.1, "c": 3, "d": 1e400}}'.encode())
    assert tree["a"] == Decimal(huge)
    assert type(tree["a"]) is Decimal
    assert (tree["b"], type(tree["b"])) == (Decimal("0.1"), Decimal)
    assert (tree["c"], type(tree["c"])) == (3, int)
    assert tree["d"] == Decimal("1e400")


@pytest.mark.parametrize(
    "body",
    [
        b'{"a": 1, "s": "\xed\xa0\x80"}',  # an encoded surrogate: invalid UTF-8
        b'{"a": 1, "s": "\xff"}',
        b'{"a": NaN}',
        b'{"a": Infinity}',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a": 1,}',
    ],
)
def test_what_is_not_json_is_refused(body: bytes) -> None:
    with pytest.raises(ValueError, match=r"."):
        json_tree_with_big_integers(body)
