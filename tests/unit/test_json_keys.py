"""The duplicate-key check agrees with the standard library's parser told to keep every
member (`object_pairs_hook`), on generated JSON texts with and without repeated keys, escaped
colons, nesting and big numbers."""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from bidder.json_keys import duplicate_key

_keys = st.sampled_from(["a", "b", "id", "a:b", ":", "é", "\\", '"']) | st.text(max_size=4)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)


def _text(value: Any, rng: Callable[[st.SearchStrategy[bool]], bool], compact: bool = False) -> str:
    """JSON text of a generated tree, whose objects are lists of members (repeats kept), some
    strings written with `\\u` escapes; `compact`: without blanks, as most clients send it
    (then often the very text msgspec writes)."""
    colon, comma = (":", ",") if compact else (": ", ", ")
    if isinstance(value, tuple):  # an object: its members, repeats kept
        members = [f"{_string(k, rng)}{colon}{_text(v, rng, compact)}" for k, v in value]
        return "{" + comma.join(members) + "}"
    if isinstance(value, list):
        return "[" + comma.join(_text(v, rng, compact) for v in value) + "]"
    if isinstance(value, str):
        return _string(value, rng)
    return json.dumps(value)


def _string(value: str, rng: Callable[[st.SearchStrategy[bool]], bool]) -> str:
    text = json.dumps(value, ensure_ascii=rng(st.booleans()))
    return text.replace(":", "\\u003a") if rng(st.booleans()) else text  # an escaped colon


_trees = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4).map(list)
        | st.lists(st.tuples(_keys, inner), max_size=5).map(tuple)
    ),
    max_leaves=20,
)


def _expected(text: str) -> bool:
    found = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        names = [k for k, _ in items]
        if len(set(names)) != len(names):
            found.append(True)
        return dict(items)

    json.loads(text, object_pairs_hook=pairs)
    return bool(found)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_agrees_with_the_standard_library(data: st.DataObject) -> None:
    text = _text(data.draw(_trees), data.draw, data.draw(st.booleans()))
    found = duplicate_key(text.encode())
    assert (found is not None) == _expected(text), text


def test_a_compact_body_is_judged_on_its_tree_as_decoded() -> None:
    """The tree the route decoded (numbers as Decimal) is the one checked."""
    body = b'{"a":1.50,"b":{"a":2},"c":"x:y"}'
    tree = msgspec.json.Decoder(float_hook=Decimal).decode(body)
    assert duplicate_key(body, tree) is None
    twice = b'{"a":1.50,"b":{"a":2,"a":3},"c":"x:y"}'
    assert duplicate_key(twice, msgspec.json.Decoder(float_hook=Decimal).decode(twice)) == "a"


def test_names_the_key() -> None:
    assert duplicate_key(b'{"a": {"x": 1, "y": 2, "x": 3}}') == "x"
    assert duplicate_key(b'{"id": 1, "imp": [{"id": 2}], "x": {"id": 3}}') is None
    assert duplicate_key(b'{"a": "1:2", "a": 1}') == "a"
    assert duplicate_key(b"not json") is None
