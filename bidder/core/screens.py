"""Publishers manage their own screens with their API key (docs/contract.md#2-inventory): list
(paginated), register, read, update, deactivate, under /functions/v1/api/screens.

Postgres is read directly (the list must show a change at once); every change goes through
`import_document`, so it is validated by the same rules as the inventory document and bumps the
inventory version, which brings it to matching on every worker within a reload. Another
publisher's screen answers 404, exactly like a screen that does not exist.
"""

from __future__ import annotations

import contextlib
import uuid
from decimal import Decimal
from typing import Any, TypeVar

import asyncpg
import msgspec
from litestar import Request, Response, delete, get, patch, post
from litestar.params import FromPath
from msgspec import UNSET, UnsetType

from bidder.core._common import CORE_PREFIX, Caller, authorize, json_object, json_response
from bidder.errors import BadRequest, NotFound, ServiceError, Unavailable
from bidder.field_problems import UNKNOWN_FIELD, type_problems
from bidder.http.web import postgres
from matching.inventory import (
    InventoryDocument,
    Problem,
    Screen,
    ScreenType,
    canonical_uuid,
    parse_uuid,
    validate_document,
)
from store.inventory_repo import (
    InventoryRejected,
    fetch_screen,
    import_document,
    list_screens,
    screen_count,
)
from store.postgres import Conn

SCREENS_PATH = f"{CORE_PREFIX}/screens"
DEFAULT_PAGE = 50
MAX_PAGE = 500


class ScreenRegistration(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A new screen: the screen fields without `publisher_id` (the key's); `id` optional."""

    name: str
    type: ScreenType
    width: int
    height: int
    id: str | None = None
    external_id: str | None = None
    audience_per_play: Decimal = Decimal("1.0")
    venue_type: str | None = None
    timezone: str = "UTC"
    lat: float | None = None
    lon: float | None = None
    active: bool = True


class ScreenUpdate(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The fields to change; absent fields stay, `null` clears an optional one."""

    name: str | UnsetType = UNSET
    type: ScreenType | UnsetType = UNSET
    width: int | UnsetType = UNSET
    height: int | UnsetType = UNSET
    external_id: str | UnsetType | None = UNSET
    audience_per_play: Decimal | UnsetType = UNSET
    venue_type: str | UnsetType | None = UNSET
    timezone: str | UnsetType = UNSET
    lat: float | UnsetType | None = UNSET
    lon: float | UnsetType | None = UNSET
    active: bool | UnsetType = UNSET


class ScreenPage(msgspec.Struct, kw_only=True):
    screens: list[Screen]
    next_cursor: str | None


class FieldProblem(msgspec.Struct, kw_only=True):
    field: str
    message: str


class ScreenProblems(msgspec.Struct, kw_only=True):
    """A refused screen: every problem, by field."""

    error: str
    problems: list[FieldProblem]


def _rejected(problems: list[FieldProblem]) -> Response[bytes]:
    """400 with every problem of the screen, by field."""
    body = ScreenProblems(error="The screen has problems; nothing was changed", problems=problems)
    return json_response(body, status=400)


def _field_problems(problems: list[Problem]) -> list[FieldProblem]:
    return [FieldProblem(field=p.field, message=p.message) for p in problems]


S = TypeVar("S", bound=msgspec.Struct)


def _without_unchanged(
    body: dict[str, Any], publisher_id: str, screen_id: str | None = None
) -> dict[str, Any]:
    """`body` without an `id` equal to the screen's own (an update) or a `publisher_id` equal
    to the key's: a client that sends a screen back whole, as GET gave it, changes neither."""
    kept = dict(body)
    if _same_uuid(kept.get("publisher_id"), publisher_id):
        del kept["publisher_id"]
    if screen_id is not None and _same_uuid(kept.get("id"), screen_id):
        del kept["id"]
    return kept


def _same_uuid(value: Any, expected: str) -> bool:
    return isinstance(value, str) and canonical_uuid(value) == expected


def _not_settable(body: dict[str, Any], into: type[msgspec.Struct]) -> list[FieldProblem]:
    """The fields of `body` the caller may not set (or not so), each with a message of its
    own."""
    problems = []
    if isinstance(body.get("audience_per_play"), str):  # as the Core API takes numbers
        problems.append(
            FieldProblem(field="audience_per_play", message="must be a JSON number, not a string")
        )
    if "publisher_id" in body:
        problems.append(
            FieldProblem(
                field="publisher_id",
                message="cannot be given: a screen belongs to the key's publisher",
            )
        )
    if "id" in body and "id" not in into.__struct_fields__:
        problems.append(FieldProblem(field="id", message="cannot be changed"))
    return problems


def _convert(body: dict[str, Any], into: type[S]) -> S | list[FieldProblem]:
    """`body` as `into`, or every field of the wrong type, missing or unknown (msgspec stops at
    the first; the README promises every problem). Fields the caller may not set get a message
    of their own. A registration's other fields are judged by the value rules too; an update's
    are judged against the stored screen by the caller (`_update_value_problems`)."""
    refused = _not_settable(body, into)
    settable = {k: v for k, v in body.items() if k not in {p.field for p in refused}}
    try:
        converted = msgspec.convert(settable, into)
    except msgspec.ValidationError as exc:
        problems = refused + _type_problems(settable, into)
        if not problems:  # msgspec's own word, when no field alone is at fault
            problems = [FieldProblem(field="", message=str(exc))]
        if into is ScreenRegistration:
            problems += _values_beside_type_problems(settable, {p.field for p in problems})
        return problems
    if not refused:
        return converted
    if isinstance(converted, ScreenRegistration):  # its values can be judged on their own
        refused += _value_problems(converted, "")
    return refused


def _type_problems(body: dict[str, Any], into: type[msgspec.Struct]) -> list[FieldProblem]:
    """Every field of `body` that is unknown, missing or of the wrong type for `into`."""
    return [
        FieldProblem(
            field=field, message="is not a screen field" if message == UNKNOWN_FIELD else message
        )
        for field, message in type_problems(body, into)
    ]


#: Stand-ins for the fields of a registration that are missing or of the wrong type, so that
#: the fields given right can be judged by the value rules too (none of these breaks a rule).
_STAND_INS: dict[str, Any] = {"name": "-", "type": "moving", "width": 1, "height": 1}


def _values_beside_type_problems(body: dict[str, Any], bad: set[str]) -> list[FieldProblem]:
    """The value rules' problems of the fields of `body` that are not in `bad` (unknown,
    missing or of the wrong type), so one answer lists both kinds (`width: -1` beside a type
    error is reported with it, not after the type error is fixed)."""
    given = {k: v for k, v in body.items() if k not in bad}
    stand_ins = {k: v for k, v in _STAND_INS.items() if k not in given}
    try:
        registration = msgspec.convert({**given, **stand_ins}, ScreenRegistration)
    except msgspec.ValidationError:  # not expected: every field left is of its type
        return []
    return [p for p in _value_problems(registration, "") if p.field in given]


def _update_value_problems(
    stored: Screen, body: dict[str, Any], bad: set[str]
) -> list[FieldProblem]:
    """The value rules' problems of the fields of an update `body` not in `bad`, applied to the
    stored screen: listed beside the type problems, as a registration's are."""
    given = {k: v for k, v in body.items() if k not in bad}
    try:
        update = msgspec.convert(given, ScreenUpdate)
    except msgspec.ValidationError:  # not expected: every field left is of its type
        return []
    changes = {k: v for k, v in msgspec.structs.asdict(update).items() if v is not UNSET}
    screen = msgspec.structs.replace(stored, **changes)
    return [p for p in _screen_problems(screen) if p.field in given]


def _value_problems(registration: ScreenRegistration, publisher_id: str) -> list[FieldProblem]:
    """What the inventory rules find in a new screen (its id included), before any lookup."""
    fields = msgspec.structs.asdict(registration)
    given = fields["id"]
    screen_id = str(uuid.uuid4()) if given is None else given  # none given: one is made
    screen = Screen(**{**fields, "id": screen_id}, publisher_id=publisher_id)
    return [p for p in _screen_problems(screen) if p.field != "publisher_id"]


def _screen_problems(screen: Screen) -> list[FieldProblem]:
    """What the inventory rules find in one screen, by field, before any lookup."""
    found = validate_document(
        InventoryDocument(screens=[screen]), known_publishers={screen.publisher_id}
    )
    return _field_problems(found)


def _screen_id(value: str) -> str:
    """A screen id from the path; anything that is not a UUID cannot name a screen: 404."""
    try:
        return str(parse_uuid(value))
    except ValueError:
        raise NotFound("Screen not found") from None


def _page_params(request: Request[Any, Any, Any]) -> tuple[int, str | None]:
    raw_limit = request.query_params.get("limit")
    limit = DEFAULT_PAGE
    if raw_limit is not None:
        # ASCII digits only: str.isdigit() also takes full-width and superscript digits
        # and int() refuses more than 4,300 digits: past 3 significant ones no limit fits
        significant = raw_limit.lstrip("0")
        digits = raw_limit.isascii() and raw_limit.isdigit() and len(significant) <= 3
        if not digits or not 1 <= int(significant or "0") <= MAX_PAGE:
            raise BadRequest(f"limit must be a whole number from 1 to {MAX_PAGE}")
        limit = int(significant)
    cursor = request.query_params.get("cursor") or None
    if cursor is not None:
        try:
            cursor = str(parse_uuid(cursor))
        except ValueError:
            raise BadRequest("cursor must be the next_cursor of a previous page") from None
    return limit, cursor


async def _save(conn: Conn, screen: Screen) -> Response[bytes] | None:
    """Validate and store one screen (bumps the inventory version); the 400 answer when it is
    refused."""
    try:
        async with conn.transaction():
            await import_document(conn, InventoryDocument(screens=[screen]))
            # The external id's uniqueness is checked at commit; check it here instead.
            await conn.execute("SET CONSTRAINTS ALL IMMEDIATE")
    except InventoryRejected as exc:
        return _rejected(_field_problems(exc.problems))
    except asyncpg.UniqueViolationError:
        # Another request took this external id between validation and write.
        taken = Problem(
            list="screens",
            index=0,
            id=screen.id,
            field="external_id",
            message="is used by another screen of this publisher",
        )
        return _rejected(_field_problems([taken]))
    return None


async def _lock(conn: Conn, name: str) -> None:
    """Serialise writes to one screen id (or what else `name` names) until the transaction
    ends."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", name)


async def _within_quota(conn: Conn, publisher_id: str) -> None:
    """409 when the publisher holds its `max_screens` already (inactive screens count: they
    stay stored and can be activated again). Registrations of one publisher take turns here
    until their transaction ends, so two cannot pass the last free place together."""
    await _lock(conn, f"screen quota of {publisher_id}")
    held, quota = await screen_count(conn, publisher_id)
    if held >= quota:
        raise ServiceError(
            f"Screen quota reached: this publisher holds {held} screens (inactive ones "
            f"included) and may hold {quota}; ask the operator to raise its max_screens",
            status=409,
            code="SCREEN_QUOTA_REACHED",
        )


async def _owned(conn: Conn, caller: Caller, screen_id: str) -> Screen:
    screen = await fetch_screen(conn, screen_id, caller.publisher_id)
    if screen is None:
        raise NotFound("Screen not found")
    return screen


@get(SCREENS_PATH)
async def list_own_screens(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The key's publisher's screens in id order; `limit` (1..500, default 50) and `cursor`
    (the previous page's `next_cursor`, null on the last page)."""
    caller = authorize(request)
    limit, cursor = _page_params(request)
    async with postgres(request) as conn:
        screens = await list_screens(conn, caller.publisher_id, after=cursor, limit=limit + 1)
    more = len(screens) > limit
    page = screens[:limit]
    return json_response(ScreenPage(screens=page, next_cursor=page[-1].id if more else None))


@post(SCREENS_PATH)
async def register_screen(request: Request[Any, Any, Any]) -> Response[bytes]:
    caller = authorize(request)
    given = _without_unchanged(await json_object(request), caller.publisher_id)
    body = _convert(given, ScreenRegistration)
    if isinstance(body, list):
        return _rejected(body)
    fields = msgspec.structs.asdict(body)
    screen_id = fields.pop("id") or str(uuid.uuid4())
    try:
        screen_id = str(parse_uuid(screen_id))
    except ValueError:  # every problem of the screen, this one among them
        return _rejected(_value_problems(body, caller.publisher_id))
    screen = Screen(**fields, id=screen_id, publisher_id=caller.publisher_id)
    async with postgres(request) as conn, conn.transaction():
        await _lock(conn, screen_id)
        if await fetch_screen(conn, screen_id) is not None:
            raise ServiceError(
                f"A screen with id {screen_id} already exists", status=409, code="CONFLICT"
            )
        await _within_quota(conn, caller.publisher_id)
        rejected = await _save(conn, screen)
        if rejected:
            return rejected
        # As stored (and as GET shows it): numbers without the sender's spelling (2.50, 1E+1).
        stored = await fetch_screen(conn, screen_id)
    return json_response(stored or screen, status=201)


@get(f"{SCREENS_PATH}/{{screen_id:str}}")
async def get_screen(request: Request[Any, Any, Any], screen_id: FromPath[str]) -> Response[bytes]:
    caller = authorize(request)
    async with postgres(request) as conn:
        screen = await _owned(conn, caller, _screen_id(screen_id))
    return json_response(screen)


@patch(f"{SCREENS_PATH}/{{screen_id:str}}")
async def update_screen(
    request: Request[Any, Any, Any], screen_id: FromPath[str]
) -> Response[bytes]:
    caller = authorize(request)
    screen_id = _screen_id(screen_id)
    body = _without_unchanged(await json_object(request), caller.publisher_id, screen_id)
    update = _convert(body, ScreenUpdate)
    if isinstance(update, list):
        # 400 before 404, as everywhere: what to fix is said first. The other fields are
        # judged with the stored screen, the key's own only, when Postgres can tell.
        with contextlib.suppress(Unavailable):
            async with postgres(request) as conn:
                stored = await fetch_screen(conn, screen_id, caller.publisher_id)
            if stored is not None:
                update += _update_value_problems(stored, body, {p.field for p in update})
        return _rejected(update)
    async with postgres(request) as conn, conn.transaction():
        await _lock(conn, screen_id)
        changes = {k: v for k, v in msgspec.structs.asdict(update).items() if v is not UNSET}
        screen = msgspec.structs.replace(await _owned(conn, caller, screen_id), **changes)
        rejected = await _save(conn, screen)
        if rejected:
            return rejected
        stored = await fetch_screen(conn, screen_id)  # as stored, as GET shows it
    return json_response(stored or screen)


@delete(f"{SCREENS_PATH}/{{screen_id:str}}", status_code=200)
async def deactivate_screen(
    request: Request[Any, Any, Any], screen_id: FromPath[str]
) -> Response[bytes]:
    """Deactivate (never delete: offers and records refer to the screen); answers the screen."""
    caller = authorize(request)
    screen_id = _screen_id(screen_id)
    async with postgres(request) as conn, conn.transaction():
        await _lock(conn, screen_id)
        screen = await _owned(conn, caller, screen_id)
        if screen.active:
            screen = msgspec.structs.replace(screen, active=False)
            rejected = await _save(conn, screen)
            if rejected:
                return rejected
    return json_response(screen)


routes = [list_own_screens, register_screen, get_screen, update_screen, deactivate_screen]
