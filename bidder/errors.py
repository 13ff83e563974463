"""One error hierarchy with stable codes, rendered in each interface's documented shape.

Core API and admin: `{"error": message}` (plus `status` where the contract asks for it).
OpenRTB: `{error, message, details, deprecated, deprecation_message, documentation,
migration_guide}` and the deprecation headers. Nothing ever leaks a traceback.
"""

from __future__ import annotations

from typing import Any

import msgspec

#: What decoding a body the JSON decoder cannot read raises: malformed JSON (msgspec's
#: DecodeError, its ValidationError included), text that is not UTF-8 (JSON is UTF-8, RFC 8259
#: 8.1), or nesting deeper than the decoder's recursion limit (about 1,000 levels, less when
#: the call stack is already deep): RecursionError. Each is the client's bad input, never a 500.
UNREADABLE_JSON: tuple[type[Exception], ...] = (
    msgspec.DecodeError,
    UnicodeDecodeError,
    RecursionError,
)


#: How much of a client's value an error message repeats: enough to recognise it, never a
#: body's worth of it (a 60 KB query parameter is not answered with 60 KB).
ECHO_CHARS = 64


def echoed(value: object) -> str:
    """`value` quoted as an error message repeats it (`repr`), cut to ECHO_CHARS characters
    with "..." when longer."""
    if isinstance(value, str):
        return repr(value if len(value) <= ECHO_CHARS else value[:ECHO_CHARS] + "...")
    text = repr(value)
    return text if len(text) <= ECHO_CHARS else text[:ECHO_CHARS] + "..."


class ServiceError(Exception):
    """An answer other than success, with its HTTP status and a stable code."""

    status: int = 500
    code: str = "INTERNAL_ERROR"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        details: dict[str, Any] | None = None,
        include_status: bool = False,
        headers: dict[str, str] | None = None,
        openrtb: bool = False,
    ) -> None:
        """`openrtb`: an answer of the OpenRTB interface served outside its path prefix (an
        OpenRTB bid's tracking pixel): its shape and deprecation headers, as under the prefix."""
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.details = details or {}
        self.include_status = include_status
        self.headers = headers or {}
        self.openrtb = openrtb


class BadRequest(ServiceError):
    status = 400
    code = "INVALID_REQUEST"


class Unauthorized(ServiceError):
    status = 401
    code = "INVALID_API_KEY"


class Forbidden(ServiceError):
    status = 403
    code = "FORBIDDEN"


class NotFound(ServiceError):
    status = 404
    code = "NOT_FOUND"


class Unprocessable(ServiceError):
    status = 422
    code = "UNPROCESSABLE"


class PayloadTooLarge(ServiceError):
    status = 413
    code = "PAYLOAD_TOO_LARGE"


class RequestTimeout(ServiceError):
    """The request body did not arrive in time (the BODY_TIMEOUT_SECONDS setting)."""

    status = 408
    code = "REQUEST_TIMEOUT"


class UriTooLong(ServiceError):
    status = 414
    code = "URI_TOO_LONG"


class Unavailable(ServiceError):
    """A dependency of the hot path (Redis) cannot be reached; retry later."""

    status = 503
    code = "SERVICE_UNAVAILABLE"


class TooManyRequests(ServiceError):
    """An API key asked more than its rate limit allows; `Retry-After` says when to retry."""

    status = 429
    code = "RATE_LIMITED"
