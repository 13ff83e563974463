"""Per-item changes beside the document import (docs/reports.md, "Changes"): pause or resume
a campaign, change its dates or targeting, deactivate a screen, approve or reject a creative.

Each change reads the stored item, changes its fields and stores it through `import_document`,
so it is validated by the inventory document's own rules (400 with every problem otherwise)
and bumps the inventory version, which brings it to every worker within a reload.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import msgspec
from litestar import Request, Response, patch, post
from litestar.params import FromPath
from msgspec import UNSET, UnsetType

from bidder.admin._common import (
    audit,
    json_response,
    path_uuid,
    problems_response,
    read_body,
)
from bidder.errors import NotFound
from bidder.http.web import postgres
from matching.inventory import (
    Campaign,
    CampaignStatus,
    Creative,
    InventoryDocument,
    Screen,
    Targeting,
)
from store.inventory_repo import (
    InventoryRejected,
    fetch_campaign,
    fetch_screen,
    import_document,
    lock_item,
)
from store.postgres import Conn

AnyRequest = Request[Any, Any, Any]

__all__ = ["CampaignChange", "routes"]


class CampaignChange(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The campaign fields this route changes; absent fields stay, `null` clears a date."""

    status: CampaignStatus | UnsetType = UNSET
    start_at: datetime | UnsetType | None = UNSET
    end_at: datetime | UnsetType | None = UNSET
    targeting: Targeting | UnsetType = UNSET


_CREATIVE_SQL = """
SELECT id::text, campaign_id::text, url, kind, width, height, duration_seconds, approved
FROM creatives WHERE id = $1
"""


async def _store(conn: Conn, doc: InventoryDocument, what: str) -> Response[bytes] | None:
    try:
        async with conn.transaction():
            await import_document(conn, doc)
    except InventoryRejected as exc:
        return problems_response(f"The {what} cannot be stored so", exc.problems)
    return None


async def _campaign(conn: Conn, campaign_id: str) -> Campaign:
    found = await fetch_campaign(conn, campaign_id)
    if found is None:
        raise NotFound(f"Campaign {campaign_id} not found")
    return found


async def _change_campaign(
    request: AnyRequest, campaign_id: str, **changes: Any
) -> Response[bytes]:
    campaign_id = path_uuid(campaign_id, "campaign_id")
    async with postgres(request) as conn, conn.transaction():
        await lock_item(conn, "campaigns", campaign_id)
        campaign = msgspec.structs.replace(await _campaign(conn, campaign_id), **changes)
        refused = await _store(conn, InventoryDocument(campaigns=[campaign]), "campaign")
        if refused is not None:
            return refused
        audit.info(
            "campaign changed", extra={"campaign_id": campaign_id, "fields": sorted(changes)}
        )
        return json_response(await _campaign(conn, campaign_id))


@post("/campaigns/{campaign_id:str}/pause", status_code=200)
async def pause_campaign(request: AnyRequest, campaign_id: FromPath[str]) -> Response[bytes]:
    return await _change_campaign(request, campaign_id, status="paused")


@post("/campaigns/{campaign_id:str}/resume", status_code=200)
async def resume_campaign(request: AnyRequest, campaign_id: FromPath[str]) -> Response[bytes]:
    return await _change_campaign(request, campaign_id, status="active")


@patch("/campaigns/{campaign_id:str}")
async def change_campaign(request: AnyRequest, campaign_id: FromPath[str]) -> Response[bytes]:
    change = await read_body(request, CampaignChange, "campaign change")
    fields = {
        name: getattr(change, name)
        for name in change.__struct_fields__
        if getattr(change, name) is not UNSET
    }
    return await _change_campaign(request, campaign_id, **fields)


@post("/screens/{screen_id:str}/deactivate", status_code=200)
async def deactivate_screen(request: AnyRequest, screen_id: FromPath[str]) -> Response[bytes]:
    screen_id = path_uuid(screen_id, "screen_id")
    async with postgres(request) as conn, conn.transaction():
        await lock_item(conn, "screens", screen_id)
        screen: Screen | None = await fetch_screen(conn, screen_id)
        if screen is None:
            raise NotFound(f"Screen {screen_id} not found")
        screen = msgspec.structs.replace(screen, active=False)
        refused = await _store(conn, InventoryDocument(screens=[screen]), "screen")
        if refused is not None:
            return refused
        audit.info("screen deactivated", extra={"screen_id": screen_id})
        return json_response(screen)


async def _set_approval(request: AnyRequest, creative_id: str, approved: bool) -> Response[bytes]:
    creative_id = path_uuid(creative_id, "creative_id")
    async with postgres(request) as conn, conn.transaction():
        await lock_item(conn, "creatives", creative_id)
        row = await conn.fetchrow(_CREATIVE_SQL, uuid.UUID(creative_id))
        if row is None:
            raise NotFound(f"Creative {creative_id} not found")
        creative = Creative(**{**dict(row.items()), "approved": approved})
        refused = await _store(conn, InventoryDocument(creatives=[creative]), "creative")
        if refused is not None:
            return refused
        audit.info("creative reviewed", extra={"creative_id": creative_id, "approved": approved})
        return json_response(creative)


@post("/creatives/{creative_id:str}/approve", status_code=200)
async def approve_creative(request: AnyRequest, creative_id: FromPath[str]) -> Response[bytes]:
    return await _set_approval(request, creative_id, True)


@post("/creatives/{creative_id:str}/reject", status_code=200)
async def reject_creative(request: AnyRequest, creative_id: FromPath[str]) -> Response[bytes]:
    return await _set_approval(request, creative_id, False)


#: Served in the admin API's router (bidder/admin/routes.py), beside the campaign view whose
#: path `PATCH /campaigns/{id}` shares.
routes: list[Any] = [
    pause_campaign,
    resume_campaign,
    change_campaign,
    deactivate_screen,
    approve_creative,
    reject_creative,
]
