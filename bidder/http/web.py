"""Request-level helpers shared by every interface: the runtime, and errors in each
interface's documented shape."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import asyncpg
import msgspec
from litestar import MediaType, Request, Response
from litestar.exceptions import HTTPException
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR

from bidder.deprecation import OPENRTB_PREFIX, deprecation_headers, openrtb_error_body
from bidder.errors import ServiceError, Unavailable
from bidder.http.asgi import Answer, ClientGone, HttpCall, encode_headers, json_answer
from bidder.observability import CLIENT_CLOSED, RequestObserver, request_id_var
from bidder.runtime import Runtime
from bidder.settings import Settings
from bidder.vast import names_openrtb_macros
from store.errors import POSTGRES_CLOSED, POSTGRES_UNREACHABLE, REDIS_DOWN
from store.postgres import Conn

log = logging.getLogger("bidder.web")
_encoder = msgspec.json.Encoder(decimal_format="number")

_HTTP_MESSAGES = {
    400: "Bad request",
    404: "Not found",
    405: "Method not allowed",
    413: "Request body too large",
    414: "Request URI too long",
    415: "Unsupported media type",
}
_HTTP_CODES = {
    400: "INVALID_REQUEST",
    401: "INVALID_API_KEY",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    413: "PAYLOAD_TOO_LARGE",
    414: "URI_TOO_LONG",
    415: "UNSUPPORTED_MEDIA_TYPE",
}


def runtime_of(request: Request[Any, Any, Any]) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


def call_of(request: Request[Any, Any, Any]) -> HttpCall:
    """The bare view of a Litestar request that the hot routes' functions take."""
    return HttpCall(
        request.scope, request.receive, runtime_of(request).settings.limits.body_timeout_seconds
    )


def iso_utc(moment: datetime) -> str:
    """ISO 8601 in UTC with millisecond precision: 2026-05-04T10:15:30.250Z (every timestamp
    the APIs answer)."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def postgres_unavailable() -> Unavailable:
    """The admin and screens endpoints' answer while Postgres cannot serve them."""
    return Unavailable("Postgres is unavailable, retry shortly", headers={"Retry-After": "1"})


async def answering_pool(rt: Runtime) -> asyncpg.Pool:
    """This worker's pool once Postgres answers the liveness probe; 503 at once when it does
    not, rather than a request held by a server that accepts connections and never answers."""
    if await rt.postgres.state() != "ok":
        raise postgres_unavailable()
    return await rt.postgres.connect()


@asynccontextmanager
async def postgres(request: Request[Any, Any, Any]) -> AsyncIterator[Conn]:
    """A pooled Postgres connection of this worker (admin API, screens endpoints: never the
    hot path); 503 `{error}` when Postgres cannot be reached or does not answer."""
    try:
        pool = await answering_pool(runtime_of(request))
        async with pool.acquire() as conn:
            yield conn
    except (*POSTGRES_UNREACHABLE, *POSTGRES_CLOSED) as exc:
        raise postgres_unavailable() from exc


def error_parts(
    path: str, settings: Settings, exc: ServiceError
) -> tuple[dict[str, Any], dict[str, str]]:
    """The body and headers of a ServiceError in the shape of the interface `path` belongs to
    (or OpenRTB's, for an error that says it is of that interface)."""
    headers = dict(exc.headers)
    if exc.openrtb or path.startswith(OPENRTB_PREFIX):
        body: dict[str, Any] = openrtb_error_body(settings, exc.code, exc.message, exc.details)
        headers.update(deprecation_headers(settings))
    else:
        body = {"error": exc.message}
        if exc.include_status:
            body["status"] = exc.status
        if exc.details:
            body["details"] = exc.details
    return body, headers


def error_response(request: Request[Any, Any, Any], exc: ServiceError) -> Response[Any]:
    """Render a ServiceError in the shape of the interface the request called."""
    body, headers = error_parts(request.url.path, runtime_of(request).settings, exc)
    return Response(
        _encoder.encode(body), status_code=exc.status, headers=headers, media_type=MediaType.JSON
    )


def error_answer(path: str, settings: Settings, exc: ServiceError) -> Answer:
    """The same as `error_response`, as a bare answer (bidder.http.front)."""
    body, headers = error_parts(path, settings, exc)
    return json_answer(_encoder.encode(body), exc.status, encode_headers(headers))


def service_error_handler(request: Request[Any, Any, Any], exc: ServiceError) -> Response[Any]:
    return error_response(request, exc)


def http_exception_handler(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    """Framework errors (unknown route, wrong method, body too large, ...) in our shapes."""
    status = exc.status_code
    request_id = None
    if request.scope.get("route_handler") is None:
        # Refused by the router (no such path, or not this method): no middleware ran, so the
        # request gets its id, is counted and is logged here, under the route label "unmatched".
        request_id = _observe_unmatched(request, status)
    if status >= 500:
        response = unexpected_handler(request, exc)
        if request_id is not None:
            response.headers["x-request-id"] = request_id
        return response
    message = _HTTP_MESSAGES.get(status, exc.detail or "Request failed")
    if status == 405:
        message = f"Method {request.method} not allowed on this path"
    headers = {k: v for k, v in (exc.headers or {}).items() if k.lower() == "allow"}
    if request_id is not None:
        headers["x-request-id"] = request_id
    return error_response(
        request,
        ServiceError(
            message,
            status=status,
            code=_HTTP_CODES.get(status, "INVALID_REQUEST"),
            headers=headers,
            openrtb=_openrtb_pixel(request),
        ),
    )


def _openrtb_pixel(request: Request[Any, Any, Any]) -> bool:
    """True for a call of an OpenRTB bid's tracking pixel (its URL carries the SSP's macros):
    the deprecated interface's answers, its framework errors included, say so (bidder.tracking
    tells its own answers the same way)."""
    path = runtime_of(request).settings.server.tracking_path
    return request.url.path == path and names_openrtb_macros(request.query_params)


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


#: The access log's logger (bidder.http.app gives the request observer the same one).
_access = logging.getLogger("bidder.access")


def _observe_unmatched(request: Request[Any, Any, Any], status: int) -> str | None:
    """Count and log a request the router refused; its request id (None without an
    observer), as every other answer has one (X-Request-ID in and out)."""
    # Any token is a method to the server: made-up ones share one label value, or a client
    # could create metric series without end.
    method = request.method if request.method in _METHODS else "OTHER"
    metrics = getattr(request.app.state, "metrics", None)
    if metrics is not None:
        metrics.requests.labels("unmatched", method, str(status)).inc()
    observer: RequestObserver | None = getattr(request.app.state, "observer", None)
    request_id, token = observer.begin(request.scope) if observer is not None else (None, None)
    try:
        # The access line every 4xx gets (decisions: 4xx/5xx and slow requests are logged).
        _access.info("request", extra={"method": method, "route": "unmatched", "status": status})
    finally:
        if token is not None:
            request_id_var.reset(token)
    return request_id


def unexpected_error(path: str, exc: Exception) -> ServiceError:
    """What an exception no handler expected becomes: Redis unreachable on the Core API is a
    503 (OpenRTB answers `nbr` 1 itself); anything else is logged with its traceback and
    answered 500 without one."""
    if isinstance(exc, REDIS_DOWN) and not path.startswith(OPENRTB_PREFIX):
        return ServiceError(
            "Service temporarily unavailable, retry shortly",
            status=503,
            code="SERVICE_UNAVAILABLE",
            headers={"Retry-After": "1"},
        )
    log.exception("unhandled error", extra={"path": path}, exc_info=exc)
    message = "Failed to process the offer" if "/offers/" in path else "Internal error"
    return ServiceError(message, status=HTTP_500_INTERNAL_SERVER_ERROR)


def client_gone_handler(request: Request[Any, Any, Any], exc: ClientGone) -> Response[Any]:
    """A client that left mid-body: an answer nobody reads, with the status the request is
    counted and logged under (CLIENT_CLOSED: `info`, no traceback, never a 500)."""
    return Response(b"", status_code=CLIENT_CLOSED)


def unexpected_handler(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    return error_response(request, unexpected_error(request.url.path, exc))
