"""Publisher API keys and the operator token.

A key looks like `dk_live_<43 url-safe characters>` (production) or `dk_stg_...` (staging): the
prefix names the environment, so a key never works in the other one. Only its SHA-256 is stored
(keys are 256-bit random, so a slow hash would add nothing). Checking a key is a dict lookup in
the worker's snapshot: no Postgres round trip.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime

from bidder.errors import Unauthorized, echoed
from matching.snapshot import ApiKeyInfo, Snapshot

INVALID_KEY_MESSAGE = "Invalid or expired API key"


def new_api_key(prefix: str) -> tuple[str, bytes]:
    """A fresh key and its hash. The key is shown once and never stored."""
    key = prefix + secrets.token_urlsafe(32)
    return key, hash_key(key)


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def shown_as_id(value: str) -> str:
    """`value` quoted for a message saying it is no id, unless it is an API key (an operator
    who pasted the key where its key id belongs): a key is never repeated anywhere."""
    if value.startswith(("dk_live_", "dk_stg_")):
        return "an API key (not repeated here; give its key id)"
    return echoed(value)


def bearer_token(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, or None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def authenticate(
    header: str | None, snapshot: Snapshot, prefix: str, now: datetime, code: str | None = None
) -> ApiKeyInfo:
    """The key's publisher, or Unauthorized for a missing, unknown, revoked, expired or
    other-environment key (all answered alike, so a caller learns nothing from the difference)."""
    token = bearer_token(header)
    info = None
    if token is not None and token.startswith(prefix):
        info = snapshot.api_keys.get(hash_key(token))
    if info is None or (info.expires_at is not None and info.expires_at <= now):
        # RFC 9110 15.5.2: a 401 names the scheme it wants (the admin API's does too).
        raise Unauthorized(INVALID_KEY_MESSAGE, code=code, headers={"WWW-Authenticate": "Bearer"})
    return info


def admin_token_ok(header: str | None, expected: str) -> bool:
    """Constant-time comparison of the operator token."""
    token = bearer_token(header)
    return token is not None and hmac.compare_digest(token.encode(), expected.encode())
