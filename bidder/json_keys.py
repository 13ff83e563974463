"""Duplicate keys in a JSON body: `{"price": 1, "price": 900}` is refused, not read as its
last value (msgspec, like most decoders, keeps the last silently, so two readers of one body
could disagree on what it says).

The check is built to cost little on the hot routes, on the tree the route decodes anyway. It
re-encodes that tree (msgspec: no whitespace, numbers as decoded, no escaped characters but the
ones JSON requires): each object of the re-encoding holds a dict's keys, each once.
- When the re-encoding is the body itself, byte for byte (the compact JSON that exchanges
  and clients send), the body holds no key twice in one object: done, at the price of one
  comparison.
- Otherwise the colons are counted. Every object member in JSON text has exactly one `:`
  outside strings, so the body's colons are its members plus the colons inside its strings; the
  re-encoding has the same count when no member was dropped, and fewer when a duplicate was (a
  dropped member takes its own colon with it). A body that writes a colon as `\\u003a` (or
  holds `\\u003` at all) would spoil the count, so it, and anything msgspec cannot decode or
  re-encode, goes the exact way: the standard library's parser with `object_pairs_hook`, which
  also names the key.
Measured on the 730-byte bench bid (docs/decisions.md, "Duplicate JSON keys and Authorization
headers"): the re-encoding and the comparison cost about 20,000 instructions, under 2 us; the
colon count about 10,000 more; the exact way 10 to 28 us.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from bidder.errors import BadRequest, echoed

_decoder = msgspec.json.Decoder()
# Numbers as JSON numbers: a tree whose numbers are Decimals (exact money) re-encodes to the
# body's own text.
_encoder = msgspec.json.Encoder(decimal_format="number")
_NOT_DECODED: Any = object()


class _Duplicate(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Duplicate(key)
            seen.add(key)
    return found


def _exact(body: bytes) -> str | None:
    """The first key found twice in one object, by the standard library's parser; None when
    there is none, or when the body is no JSON (its reader says so)."""
    try:
        json.loads(body, object_pairs_hook=_pairs)
    except _Duplicate as dup:
        return dup.key
    except (ValueError, RecursionError):
        return None
    return None


def duplicate_key(body: bytes, tree: Any = _NOT_DECODED) -> str | None:
    """A key found twice in one object of the JSON `body`, or None. `tree`: the body as
    msgspec already decoded it, when the caller has it (saves decoding it again)."""
    try:
        if tree is _NOT_DECODED:
            tree = _decoder.decode(body)
        again = _encoder.encode(tree)
    except (msgspec.MsgspecError, TypeError, ValueError, OverflowError, RecursionError):
        return _exact(body)
    if again == body:
        return None  # the body is its tree's encoding: each object's keys are one dict's
    if b"\\u003" not in body and again.count(b":") == body.count(b":"):
        return None
    return _exact(body)


def refuse_duplicate_keys(
    body: bytes, tree: Any = _NOT_DECODED, *, code: str | None = None
) -> None:
    """BadRequest (400, `code` when given) naming the key when `body` has one twice in an
    object."""
    key = duplicate_key(body, tree)
    if key is not None:
        raise BadRequest(f"Duplicate key {echoed(key)} in the JSON body", code=code)
