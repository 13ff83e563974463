"""Signed URLs (loss notices, tracking pixels): HMAC-SHA256 over the path and the fixed query
parameters, with rotatable secrets. The newest secret signs; every configured secret verifies.

Only the parameters the service sets are signed (`pub`, `scr`, `ts`, plus `offer_id` and
`event` for tracking). Macro parameters that the SSP substitutes (`reason`, `price`, ...) are
outside the signature by design; altering a signed one breaks it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping, Sequence

SIGNATURE_PARAM = "token"


def _message(path: str, params: Mapping[str, str], signed: Sequence[str]) -> bytes:
    parts = [path] + [f"{name}={params.get(name, '')}" for name in signed]
    return "\n".join(parts).encode()


def sign(secret: str, path: str, params: Mapping[str, str], signed: Sequence[str]) -> str:
    digest = hmac.new(secret.encode(), _message(path, params, signed), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def verify(
    secrets: Sequence[str], path: str, params: Mapping[str, str], signed: Sequence[str]
) -> bool:
    """Whether `params[token]` was made by any of `secrets` over exactly these values."""
    token = params.get(SIGNATURE_PARAM)
    if not token or any(name not in params for name in signed):
        return False
    # Compared as bytes: compare_digest refuses str with non-ASCII characters (a forged token).
    given = token.encode()
    return any(
        hmac.compare_digest(given, sign(secret, path, params, signed).encode())
        for secret in secrets
    )
