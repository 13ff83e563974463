"""The Litestar application factory: routes of every interface, one error mapping, lifespan."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
from litestar import Litestar, MediaType, Request, Response, Router, get, head
from litestar.connection import ASGIConnection
from litestar.datastructures import State
from litestar.exceptions import HTTPException
from litestar.handlers.base import BaseRouteHandler
from prometheus_client import CONTENT_TYPE_LATEST

from bidder import tracking
from bidder.admin import lists_routes, records_routes, reports_routes
from bidder.admin import openapi as admin_openapi
from bidder.admin import routes as admin_routes
from bidder.core import openapi as core_openapi
from bidder.core import reports as core_reports
from bidder.core import routes as core_routes
from bidder.core import screens
from bidder.errors import BadRequest, ServiceError
from bidder.http import guides, health
from bidder.http.asgi import MANY_AUTHORIZATIONS, ClientGone, repeated_authorization
from bidder.http.front import Front, options_allow
from bidder.http.web import (
    client_gone_handler,
    http_exception_handler,
    service_error_handler,
    unexpected_handler,
)
from bidder.observability import (
    Metrics,
    RequestObserver,
    configure_logging,
    exposition,
    request_context_middleware,
    use_multiprocess_values,
)
from bidder.openrtb import routes as openrtb_routes
from bidder.runtime import Runtime, parent_loop
from bidder.settings import Settings, load_settings

log = logging.getLogger("bidder.app")


_ALIVE = {"status": "ok"}


@get("/healthz", media_type=MediaType.JSON, sync_to_thread=False)
def healthz() -> dict[str, str]:
    """Process alive."""
    return _ALIVE


@head("/healthz", sync_to_thread=False)
def healthz_head() -> Response[None]:
    """HEAD /healthz: the same 200 and headers without a body (load balancers and uptime
    checks often probe with HEAD; RFC 9110 9.1)."""
    return health.head_answer(_ALIVE, 200)


#: Prometheus' content type without its charset, which Litestar appends to any text/* type
#: (it went out twice: `...; charset=utf-8; charset=utf-8`).
_METRICS_TYPE = CONTENT_TYPE_LATEST.replace("; charset=utf-8", "")


@get("/metrics", sync_to_thread=False)
def metrics_endpoint(request: Request[Any, Any, Any]) -> Response[bytes]:
    metrics: Metrics = request.app.state.metrics
    return Response(exposition(metrics), media_type=_METRICS_TYPE)


def _route_handlers(settings: Settings, *, admin_listener: bool) -> list[Any]:
    """The routes one listener serves. The admin listener (`bidder serve --admin-port`):
    the admin API, `/metrics` and the health checks. Any other: every route, less the admin
    API and `/metrics` where PUBLIC_ADMIN or PUBLIC_METRICS switch them off (404 there).

    The routes that read an Authorization header (a publisher key, the operator token) refuse
    a request with several (`_one_authorization`); the others (health, metrics, guides, the
    OpenAPI documents, the signed tracking pixel) read none, and a guard there would cost the
    cheapest routes about half their throughput."""
    health_routes = [healthz, healthz_head, *health.routes]
    admin = [
        *admin_routes.routes,
        *records_routes.routes,
        *reports_routes.routes,
        *lists_routes.routes,
    ]
    if admin_listener:
        return [*health_routes, metrics_endpoint, *admin_openapi.routes, _keyed(admin)]
    perimeter = settings.perimeter
    keyed = [
        *core_routes.routes,
        *screens.routes,
        *core_reports.routes,
        *openrtb_routes.routes,
        *(admin if perimeter.public_admin else []),
    ]
    return [
        *health_routes,
        *([metrics_endpoint] if perimeter.public_metrics else []),
        *guides.routes,
        *core_openapi.routes,
        *(admin_openapi.routes if perimeter.public_admin else []),
        *tracking.routes(settings),
        _keyed(keyed),
    ]


def _keyed(route_handlers: list[Any]) -> Router:
    """`route_handlers` (absolute paths) behind the one-Authorization-header guard."""
    return Router(path="/", route_handlers=route_handlers, guards=[_one_authorization])


def create_app(
    settings: Settings, *, runtime: Runtime | None = None, admin_listener: bool = False
) -> Litestar:
    """The whole service for one environment. `runtime` lets tests share a prepared one;
    `admin_listener`: the app of `bidder serve --admin-port`'s admin listener."""
    configure_logging(settings.server.log_level)
    rt = runtime or Runtime(settings)
    metrics = rt.metrics

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        await rt.start()
        try:
            yield
        finally:
            await rt.stop()

    observer = RequestObserver(metrics, logging.getLogger("bidder.access"))
    app = Litestar(
        route_handlers=_route_handlers(settings, admin_listener=admin_listener),
        exception_handlers={
            ServiceError: service_error_handler,
            ClientGone: client_gone_handler,
            HTTPException: http_exception_handler,
            Exception: unexpected_handler,
        },
        middleware=[request_context_middleware(observer)],
        lifespan=[lifespan],
        state=_state(rt, metrics, observer),
        openapi_config=None,
        logging_config=None,
        debug=False,
        request_max_body_size=1_000_000,
        type_encoders={msgspec.Struct: msgspec.to_builtins},
    )
    # The hot routes are answered in front of Litestar's stack (bidder/http/front.py); Litestar
    # still sets up each request's scope and serves everything else.
    app.asgi_handler = Front(
        app.asgi_handler, rt, observer, options_allow(app.routes), hot=not admin_listener
    )
    return app


def _one_authorization(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Every route Litestar serves refuses a request with several Authorization headers, as
    the hot routes do (bidder.http.front); 400 in the interface's shape."""
    if repeated_authorization(connection.scope["headers"]):
        raise BadRequest(MANY_AUTHORIZATIONS)


def _state(rt: Runtime, metrics: Metrics, observer: RequestObserver) -> State:
    return State({"runtime": rt, "metrics": metrics, "observer": observer})


def app_from_env() -> Litestar:
    """The factory `bidder serve` hands to granian: each worker reads the environment itself."""
    use_multiprocess_values()
    settings = load_settings()
    return create_app(settings, runtime=_served_runtime(settings))


def admin_app_from_env() -> Litestar:
    """The factory of `bidder serve --admin-port`'s admin listener: the admin API, `/metrics`
    (every worker's figures: the listeners share the metrics folder) and the health checks."""
    use_multiprocess_values()
    settings = load_settings()
    return create_app(settings, runtime=_served_runtime(settings), admin_listener=True)


def _served_runtime(settings: Settings) -> Runtime:
    """A granian worker's runtime: it also stops the worker once the process that started it
    has ended (bidder.runtime.parent_loop)."""
    runtime = Runtime(settings)
    runtime.extra_loops.append(lambda rt: parent_loop(rt.loops))
    return runtime
