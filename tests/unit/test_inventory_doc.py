"""docs/inventory.md documents exactly the fields of the inventory document's types, with their
defaults, and its example is a document the import takes.

The types are found by walking `InventoryDocument` with msgspec's introspection, so a field or a
nested type added to matching/inventory.py fails here until the page has its row or section."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from matching.inventory import TEXT_LIMITS, InventoryDocument, validate_document

PAGE = Path(__file__).resolve().parents[2] / "docs" / "inventory.md"
#: The section of the document itself; every other section names its path in backticks.
ROOT_HEADING = "The document"
_HEADING = re.compile(r"^#{2,4} (?P<title>.+)$")
_PATH = re.compile(r"`(?P<path>[a-z_\[\].]+)`\)?$")
_ROW = re.compile(r"^\| `(?P<field>[a-z_]+)` \| (?P<type>[^|]+) \| (?P<default>[^|]+) \|")
_encoder = msgspec.json.Encoder(decimal_format="number")


def _struct_of(info: msgspec.inspect.Type) -> msgspec.inspect.StructType | None:
    """The Struct type inside a field's type (through lists and unions with None), if any."""
    if isinstance(info, msgspec.inspect.StructType):
        return info
    if isinstance(info, msgspec.inspect.ListType):
        return _struct_of(info.item_type)
    if isinstance(info, msgspec.inspect.UnionType):
        found = [s for s in (_struct_of(t) for t in info.types) if s is not None]
        return found[0] if found else None
    return None


def _is_list(info: msgspec.inspect.Type) -> bool:
    if isinstance(info, msgspec.inspect.UnionType):
        return any(_is_list(t) for t in info.types)
    return isinstance(info, msgspec.inspect.ListType)


def _structs() -> dict[str, type[msgspec.Struct]]:
    """Every Struct of the document by its path in the page's notation: `""` for the document,
    `publishers[]`, `campaigns[].targeting`, `campaigns[].targeting.dayparts[]`."""
    found: dict[str, type[msgspec.Struct]] = {}

    def walk(path: str, struct: msgspec.inspect.StructType) -> None:
        found[path] = struct.cls
        for field in struct.fields:
            inner = _struct_of(field.type)
            if inner is not None:
                name = field.encode_name + ("[]" if _is_list(field.type) else "")
                walk(f"{path}.{name}" if path else name, inner)

    root = msgspec.inspect.type_info(InventoryDocument)
    assert isinstance(root, msgspec.inspect.StructType)
    walk("", root)
    return found


def _sections() -> dict[str, dict[str, str]]:
    """The page's field tables: by section path, each field's documented default cell."""
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    in_code = False
    for line in PAGE.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        heading = None if in_code else _HEADING.match(line)
        if heading is not None:
            title = heading["title"].strip()
            path = _PATH.search(title)
            key = "" if title == ROOT_HEADING else path["path"] if path else None
            current = None if key is None else sections.setdefault(key, {})
            continue
        row = _ROW.match(line)
        if row is not None and current is not None:
            assert row["field"] not in current, f"{row['field']} documented twice"
            current[row["field"]] = row["default"].strip()
    return sections


def _rows(list_name: str) -> dict[str, str]:
    """The whole table rows of one list's section (`screens` for `screens[]`), by field."""
    rows: dict[str, str] = {}
    inside = False
    for line in PAGE.read_text().splitlines():
        heading = _HEADING.match(line)
        if heading is not None:
            inside = heading["title"].rstrip().endswith(f"(`{list_name}[]`)")
            continue
        row = _ROW.match(line)
        if inside and row is not None:
            rows[row["field"]] = line
    return rows


def test_every_type_of_the_document_has_a_section_and_no_section_names_another() -> None:
    assert set(_sections()) == set(_structs())


@pytest.mark.parametrize("path", sorted(_structs()))
def test_every_field_is_documented_and_every_documented_field_exists(path: str) -> None:
    struct = _structs()[path]
    fields = {f.encode_name for f in msgspec.structs.fields(struct)}
    documented = set(_sections().get(path, {}))
    assert documented - fields == set(), f"{path or 'document'}: documented, not a field"
    assert fields - documented == set(), f"{path or 'document'}: fields without a row"


def _default_of(field: msgspec.structs.FieldInfo) -> Any:
    """The field's default as JSON would carry it, or `required`."""
    if field.required:
        return "required"
    value = field.default_factory() if field.default is msgspec.NODEFAULT else field.default
    return msgspec.json.decode(_encoder.encode(value))


def _documented_default(cell: str) -> Any:
    if cell == "required":
        return cell
    literal = re.fullmatch(r"`(?P<json>[^`]+)`", cell)
    assert literal is not None, f"a default is `json` or required, got {cell!r}"
    return msgspec.json.decode(literal["json"])


@pytest.mark.parametrize("path", sorted(_structs()))
def test_documented_defaults_are_the_types_defaults(path: str) -> None:
    rows = _sections().get(path, {})
    for field in msgspec.structs.fields(_structs()[path]):
        cell = rows.get(field.encode_name)
        if cell is None:
            continue  # reported by the test above
        assert _documented_default(cell) == _default_of(field), f"{path}.{field.encode_name}"


def test_the_pages_example_is_a_document_without_problems() -> None:
    text = PAGE.read_text()
    example = re.search(r"## Example\n\n```json\n(?P<json>.*?)\n```", text, re.DOTALL)
    assert example is not None
    doc = msgspec.json.decode(example["json"], type=InventoryDocument)
    assert validate_document(doc) == []
    assert all(getattr(doc, name) for name in _structs()[""].__struct_fields__)


@pytest.mark.parametrize("list_name", sorted(TEXT_LIMITS))
def test_every_text_limit_is_documented_on_its_row(list_name: str) -> None:
    rows = _rows(list_name)
    for field, limit in TEXT_LIMITS[list_name].items():
        assert f"at most {limit:,} characters" in rows[field], f"{list_name}[].{field}"
