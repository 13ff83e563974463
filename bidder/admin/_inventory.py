"""`PUT /admin/v1/inventory` (bulk idempotent upsert, all or nothing) and
`GET /admin/v1/inventory` (the stored document, which PUT takes back unchanged)."""

from __future__ import annotations

from typing import Any

import asyncpg
import msgspec
from litestar import Request, Response, get, put

from bidder.admin._common import audit, decode, json_response, problems_response
from bidder.errors import UNREADABLE_JSON, BadRequest
from bidder.field_problems import decode_document
from bidder.http.web import postgres
from matching.inventory import InventoryDocument
from store.inventory_repo import InventoryRejected, Progress, export_document, import_document
from store.postgres import Conn

#: A document of 100,000 screens is about 35 MB of JSON; the rest of the service takes 1 MB.
MAX_DOCUMENT_BYTES = 256 * 1024 * 1024


async def import_inventory(
    conn: Conn, doc: InventoryDocument, progress: Progress | None = None
) -> dict[str, int]:
    """`import_document` with the audit line of an operator's change (the admin API's and the
    CLI's way): the counts per list, upserted."""
    counts = await import_document(conn, doc, progress)
    audit.info("inventory imported", extra={"counts": counts})
    return counts


class Imported(msgspec.Struct, kw_only=True):
    """An imported document: how many items of each list were upserted."""

    counts: dict[str, int]


#: What decoding a body that is no inventory document at all raises.
_NOT_A_DOCUMENT: tuple[type[Exception], ...] = (msgspec.ValidationError, *UNREADABLE_JSON)


def _refused(exc: InventoryRejected) -> Response[bytes]:
    return problems_response(
        f"The inventory document has {len(exc.problems)} problem(s); nothing was applied",
        exc.problems,
    )


@put("/inventory", request_max_body_size=MAX_DOCUMENT_BYTES)
async def put_inventory(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Validate the whole document, then upsert it in one transaction; a refused document
    changes nothing and lists every problem."""
    raw = await request.body()
    try:
        doc = decode_document(raw)
    except InventoryRejected as exc:  # items of the wrong shape, every one listed
        return _refused(exc)
    except _NOT_A_DOCUMENT:
        doc = decode(raw, InventoryDocument, "inventory document")  # raises its 400
    async with postgres(request) as conn:
        try:
            counts = await import_inventory(conn, doc)
        except InventoryRejected as exc:
            return _refused(exc)
        except asyncpg.IntegrityConstraintViolationError as exc:
            # Validation catches every rule it knows; this is a concurrent change in between.
            raise BadRequest(
                f"The inventory document conflicts with stored data ({exc.constraint_name}); "
                "nothing was applied"
            ) from None
    return json_response(Imported(counts=counts))


@get("/inventory")
async def get_inventory(request: Request[Any, Any, Any]) -> Response[bytes]:
    async with postgres(request) as conn, conn.transaction(isolation="repeatable_read"):
        doc = await export_document(conn)
    return json_response(doc)


routes = [put_inventory, get_inventory]
