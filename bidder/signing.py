"""Signed URLs (loss notices, tracking pixels): HMAC-SHA256 over the path and the fixed query
parameters, with rotatable secrets. The newest secret signs; every configured secret verifies.

Only the parameters the service sets are signed (`pub`, `scr`, `ts`, plus `offer_id` and
`event` for tracking). Macro parameters that the SSP substitutes (`reason`, `price`, ...) are
outside the signature by design; altering a signed one breaks it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from binascii import b2a_base64
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any
from urllib.parse import quote

SIGNATURE_PARAM = "token"

_BLOCK = 64  # SHA-256's block size, the HMAC key's padded length (RFC 2104)
_INNER_PAD = bytes(byte ^ 0x36 for byte in range(256))
_OUTER_PAD = bytes(byte ^ 0x5C for byte in range(256))
_URL_SAFE = bytes.maketrans(b"+/", b"-_")
# What `quote(value, safe="-_.~")` leaves alone: nothing to quote in such a value.
_UNRESERVED = re.compile(r"[A-Za-z0-9_.~-]*")


def message(path: str, values: Sequence[tuple[str, str]]) -> bytes:
    """What is signed: the path, then one `name=value` line per signed parameter, in order."""
    return "\n".join([path, *[f"{name}={value}" for name, value in values]]).encode()


def url_value(value: str) -> str:
    """A query parameter value percent-encoded (RFC 3986 unreserved characters kept); ids and
    timestamps, which hold nothing to encode, skip `quote`."""
    return value if _UNRESERVED.fullmatch(value) else quote(value, safe="-_.~")


class Signer:
    """Makes tokens with one secret: HMAC-SHA256 (RFC 2104) on hashlib states keyed once, each
    message costing two state copies instead of a fresh HMAC object (a bid signs seven URLs).
    Messages that share a beginning can share its hashing: `started` then `finish`."""

    def __init__(self, secret: str) -> None:
        key = secret.encode()
        if len(key) > _BLOCK:
            key = hashlib.sha256(key).digest()
        key = key.ljust(_BLOCK, b"\0")
        self._inner = hashlib.sha256(key.translate(_INNER_PAD))
        self._outer = hashlib.sha256(key.translate(_OUTER_PAD))

    def token(self, signed_message: bytes) -> str:
        """Unpadded URL-safe base64 of the message's HMAC-SHA256."""
        return self.finish(self._inner, signed_message)

    def started(self, prefix: bytes) -> Any:
        """The HMAC's inner hash after the first bytes of a message, for `finish`."""
        inner = self._inner.copy()
        inner.update(prefix)
        return inner

    def finish(self, started: Any, rest: bytes) -> str:
        """The token of the message `started` began, ending with `rest`; `started` is kept."""
        inner = started.copy()
        inner.update(rest)
        outer = self._outer.copy()
        outer.update(inner.digest())
        # A 32-byte digest is 43 base64 characters and one "=" of padding.
        return b2a_base64(outer.digest(), newline=False)[:43].translate(_URL_SAFE).decode()


@lru_cache(maxsize=16)
def signer(secret: str) -> Signer:
    """The Signer of a secret, built once (a worker has a handful of secrets)."""
    return Signer(secret)


def _message(path: str, params: Mapping[str, str], signed: Sequence[str]) -> bytes:
    return message(path, [(name, params.get(name, "")) for name in signed])


def sign(secret: str, path: str, params: Mapping[str, str], signed: Sequence[str]) -> str:
    return signer(secret).token(_message(path, params, signed))


def verify(
    secrets: Sequence[str], path: str, params: Mapping[str, str], signed: Sequence[str]
) -> bool:
    """Whether `params[token]` was made by any of `secrets` over exactly these values."""
    given = params.get(SIGNATURE_PARAM)
    if not given or any(name not in params for name in signed):
        return False
    return token_verifies(secrets, _message(path, params, signed), given)


def token_verifies(secrets: Sequence[str], signed_message: bytes, given: str) -> bool:
    """Whether `given` is the token of `signed_message` under any of `secrets`."""
    # Compared as bytes: compare_digest refuses str with non-ASCII characters (a forged token).
    given_bytes = given.encode()
    return any(
        hmac.compare_digest(given_bytes, signer(secret).token(signed_message).encode())
        for secret in secrets
    )


def query_values(pairs: Iterable[tuple[str, str]], signed: Sequence[str]) -> dict[str, str] | None:
    """Each query parameter's first value; None when the token or a signed parameter comes more
    than once: the signature covers one value, so a URL with a second copy was altered (it
    gets the 403 of any altered URL, not the first copy's effect)."""
    params: dict[str, str] = {}
    for name, value in pairs:
        if name in params:
            if name == SIGNATURE_PARAM or name in signed:
                return None
            continue
        params[name] = value
    return params
