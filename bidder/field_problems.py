"""Every field of a JSON object that is unknown, missing or of the wrong type for a Struct.

msgspec stops at the first problem; the README promises every problem of a refused body (the
screens API's registration and update, the inventory document's items). This checks each field
on its own against a one-field Struct of the same type, on the error path only.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import msgspec
import msgspec.inspect

from bidder.errors import UNREADABLE_JSON, BadRequest
from matching.inventory import ITEM_TYPES, InventoryDocument, Problem
from matching.money import is_decimal_text, json_decimal
from store.inventory_repo import InventoryRejected

UNKNOWN_FIELD = "is not a field of this item"
#: msgspec's words for a string it cannot read as a decimal, said of the strings it can read
#: but no client means as a number (`"1_0"`, `" 1 "`, other scripts' digits): see
#: `matching.money.is_decimal_text`.
BAD_DECIMAL_TEXT = "Invalid decimal string"
# Numbers as the typed decode reads them (a plain decode refuses `1e400` as out of range).
_tree = msgspec.json.Decoder(float_hook=json_decimal)


def type_problems(body: dict[str, Any], into: type[msgspec.Struct]) -> list[tuple[str, str]]:
    """(field, message) for every field of `body` that `into` does not know, that `into`
    requires and `body` lacks, or whose value is not of the field's type."""
    fields = msgspec.structs.fields(into)
    known = {field.encode_name for field in fields}
    problems = [(name, UNKNOWN_FIELD) for name in body if name not in known]
    for field in fields:
        if field.encode_name not in body:
            if field.required:
                problems.append((field.encode_name, "is required"))
            continue
        value = body[field.encode_name]
        try:
            one = _one_field(into, field.name, field.type)
            msgspec.convert({field.name: value}, one)
        except msgspec.ValidationError as exc:
            message, _, where = str(exc).partition(" - at ")
            # The path says more only inside a nested value (`$.targeting.dayparts[0]`).
            if where and where.strip("`") != f"$.{field.name}":
                message = f"{message} - at {where}"
            problems.append((field.encode_name, message))
            continue
        if _bad_decimal_text(into, field.encode_name, value):
            problems.append((field.encode_name, BAD_DECIMAL_TEXT))
    return problems


def decimal_text_problems(body: dict[str, Any], into: type[msgspec.Struct]) -> list[str]:
    """The fields of `body` that `into` decodes into a Decimal and that hold a string msgspec
    reads (as `Decimal()` does) but that is no number as JSON writes one."""
    return sorted(
        name for name in decimal_fields(into) if _bad_decimal_text(into, name, body.get(name))
    )


def _bad_decimal_text(into: type[msgspec.Struct], name: str, value: Any) -> bool:
    return isinstance(value, str) and name in decimal_fields(into) and not is_decimal_text(value)


@lru_cache(maxsize=64)
def decimal_fields(into: type[msgspec.Struct]) -> frozenset[str]:
    """The JSON names of `into`'s fields that take a Decimal (alone or in a union)."""
    info = msgspec.inspect.type_info(into)
    assert isinstance(info, msgspec.inspect.StructType)
    return frozenset(
        field.encode_name
        for field in info.fields
        if any(
            isinstance(kind, msgspec.inspect.DecimalType)
            for kind in (
                field.type.types
                if isinstance(field.type, msgspec.inspect.UnionType)
                else (field.type,)
            )
        )
    )


@lru_cache(maxsize=64)
def _decimal_as_text(types: tuple[type[msgspec.Struct], ...]) -> re.Pattern[bytes]:
    """Matches where a body may give one of these types' Decimal fields as a string: the
    field's name followed by a string, or any `\\u` escape (which can spell a name)."""
    names = sorted({name for into in types for name in decimal_fields(into)})
    alternatives = b"|".join(re.escape(name.encode()) for name in names)
    return re.compile(rb'"(?:' + alternatives + rb')"\s*:\s*"|\\u')


_INVENTORY_DECIMAL_AS_TEXT = _decimal_as_text(tuple(ITEM_TYPES.values()))


def check_decimal_text(raw: bytes, into: type[Any], what: str) -> None:
    """Raise BadRequest when `raw`, which msgspec decoded as `into`, gave one of the Struct's
    own Decimal fields as a string that is no number as JSON writes one (`{"add_cents":
    "1_0"}`): in the words msgspec uses for any other string that is not a number."""
    if not (isinstance(into, type) and issubclass(into, msgspec.Struct)):
        return
    if not decimal_fields(into) or not _decimal_as_text((into,)).search(raw):
        return
    tree = _tree.decode(raw)
    bad = decimal_text_problems(tree, into) if isinstance(tree, dict) else []
    if bad:
        raise BadRequest(f"Invalid {what}: {BAD_DECIMAL_TEXT} - at `$.{bad[0]}`")


@lru_cache(maxsize=64)
def _one_field(into: type[msgspec.Struct], name: str, annotation: Any) -> type[Any]:
    """A Struct of `into`'s one field `name`, to check that field's value on its own."""
    return msgspec.defstruct(f"{into.__name__}_{name}", [(name, annotation)])


def _converts(item: dict[str, Any], into: type[msgspec.Struct]) -> bool:
    try:
        msgspec.convert(item, into)
    except msgspec.ValidationError:
        return False
    return True


def document_problems(raw: bytes) -> list[Problem]:
    """Every item of an inventory document msgspec refused that is not an object, has an
    unknown field, lacks a required one or has one of the wrong type, by list, index, id and
    field; [] when the body is not a JSON object of lists (the caller then says that)."""
    try:
        tree = _tree.decode(raw)
    except UNREADABLE_JSON:
        return []
    if not isinstance(tree, dict):
        return []
    problems = [
        Problem(list=name, index=0, id=None, field="", message="is not an inventory list")
        for name in tree
        if name not in ITEM_TYPES
    ]
    for kind, item_type in ITEM_TYPES.items():
        items = tree.get(kind, [])
        if not isinstance(items, list):
            problems.append(
                Problem(list=kind, index=0, id=None, field="", message="must be a list")
            )
            continue
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                problems.append(
                    Problem(list=kind, index=index, id=None, field="", message="must be an object")
                )
                continue
            # Only an item that fails is checked field by field.
            if _converts(item, item_type) and not decimal_text_problems(item, item_type):
                continue
            item_id = item.get("id")
            problems += [
                Problem(
                    list=kind,
                    index=index,
                    id=item_id if isinstance(item_id, str) else None,
                    field=field,
                    message=message,
                )
                for field, message in type_problems(item, item_type)
            ]
    return problems


def decode_document(raw: bytes) -> InventoryDocument:
    """An inventory document from JSON. Items of the wrong shape raise InventoryRejected
    listing every one (as the inventory rules' problems are listed); anything else msgspec
    refuses raises its own error (malformed JSON, a document that is not an object)."""
    try:
        doc = msgspec.json.decode(raw, type=InventoryDocument)
    except msgspec.ValidationError:
        problems = document_problems(raw)
        if problems:
            raise InventoryRejected(problems) from None
        raise
    if _INVENTORY_DECIMAL_AS_TEXT.search(raw):  # decoded, but maybe from "1_0": look closer
        problems = document_problems(raw)
        if problems:
            raise InventoryRejected(problems)
    return doc
