"""Publisher API keys: create (the plain key is shown once) and revoke. Both bump the inventory
version, so every worker's key cache follows within one reload."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import asyncpg
import msgspec
from litestar import Request, Response, delete, post
from litestar.params import FromPath

from bidder.admin._common import audit, json_response, path_uuid, read_body
from bidder.auth import new_api_key
from bidder.errors import BadRequest, NotFound
from bidder.runtime import utcnow
from bidder.settings import Settings
from bidder.web import iso_utc, postgres, runtime_of
from matching.inventory import in_utc
from store.inventory_repo import create_api_key, revoke_api_key
from store.postgres import Conn


class KeyRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    expires_at: datetime | None = None


class KeyCreated(msgspec.Struct, kw_only=True):
    key_id: str
    api_key: str
    expires_at: str | None  # ISO 8601 UTC to the millisecond, as every timestamp answered


class UnknownPublisher(Exception):
    pass


def check_expiry(expires_at: datetime | None, now: datetime) -> None:
    """An expiry must name its time zone and lie in the future."""
    if expires_at is None:
        return
    if expires_at.tzinfo is None:
        raise BadRequest("expires_at must carry a time zone, e.g. 2027-01-01T00:00:00Z")
    if in_utc(expires_at) is None:
        raise BadRequest("expires_at must fall within the years 1 to 9999 in UTC")
    if expires_at <= now:
        raise BadRequest("expires_at must be in the future")


def stored_expiry(expires_at: datetime | None) -> datetime | None:
    """The expiry as stored and answered: in UTC, to the millisecond, truncated (a key never
    outlives what was asked). It also keeps `9999-12-31T23:59:59.999999Z`, which asyncpg
    writes as `infinity` and reads back naive (every call with that key would answer 500), a
    real moment."""
    if expires_at is None:
        return None
    utc = expires_at.astimezone(UTC)
    return utc.replace(microsecond=utc.microsecond // 1000 * 1000)


async def issue_key(
    conn: Conn, settings: Settings, publisher_id: str, expires_at: datetime | None
) -> KeyCreated:
    """Make a key of this environment for `publisher_id`; only its hash is stored.
    UnknownPublisher when there is no such publisher. Shared by the admin API and the CLI, and
    so is the audit line (never the key itself: its id and owner are the trail)."""
    api_key, key_hash = new_api_key(settings.server.key_prefix)
    expires_at = stored_expiry(expires_at)
    try:
        key_id = await create_api_key(
            conn,
            publisher_id,
            key_hash,
            settings.server.key_prefix,
            settings.server.environment,
            expires_at,
        )
    except asyncpg.ForeignKeyViolationError:
        raise UnknownPublisher(publisher_id) from None
    answered = None if expires_at is None else iso_utc(expires_at)
    audit.info("API key created", extra={"publisher_id": publisher_id, "key_id": key_id})
    return KeyCreated(key_id=key_id, api_key=api_key, expires_at=answered)


async def revoke_key_id(conn: Conn, key_id: str) -> bool:
    """Revoke a key (the admin API's and the CLI's way, with the audit line); False when
    there is no such key."""
    if not await revoke_api_key(conn, key_id):
        return False
    audit.info("API key revoked", extra={"key_id": key_id})
    return True


@post("/publishers/{publisher_id:str}/api-keys", status_code=201)
async def create_key(
    request: Request[Any, Any, Any], publisher_id: FromPath[str]
) -> Response[bytes]:
    publisher_id = path_uuid(publisher_id, "publisher id")
    body = await read_body(request, KeyRequest, "API key request")
    check_expiry(body.expires_at, utcnow())
    settings = runtime_of(request).settings
    async with postgres(request) as conn:
        try:
            created = await issue_key(conn, settings, publisher_id, body.expires_at)
        except UnknownPublisher:
            raise NotFound(f"Unknown publisher {publisher_id}") from None
    response = json_response(created, status=201)
    response.headers["Cache-Control"] = "no-store"
    return response


@delete("/api-keys/{key_id:str}", status_code=204)
async def revoke_key(request: Request[Any, Any, Any], key_id: FromPath[str]) -> None:
    key_id = path_uuid(key_id, "key id")
    async with postgres(request) as conn:
        if not await revoke_key_id(conn, key_id):
            raise NotFound(f"Unknown API key {key_id}")


routes = [create_key, revoke_key]
