"""The hot routes, served in front of Litestar.

An SSP or a player calls three routes far more often than any other: the offer request, the
offer response and the OpenRTB bid. Litestar's per-request work (routing, the request object,
kwargs, the exception middleware) cost more than the handlers themselves (docs/performance.md),
so this ASGI app answers those three itself and hands every other request to Litestar.

It takes a request only when it is sure to route it exactly as Litestar would: an HTTP request
with the route's method, an exact path (one non-empty path segment for a path parameter), no
`root_path`, and a valid Host header (Litestar answers an invalid one 400). Anything else, such
as a wrong method (405 with `Allow`), OPTIONS, HEAD or a path with a trailing slash, goes to
Litestar, whose routes for the same paths call the same functions. A request served here gets
what Litestar's stack gives: a request id (X-Request-ID in and out), the request metrics under
the same route label, the log line of a 4xx/5xx or slow request, errors in the shape of the
interface (bidder.http.web), and a 500 without a traceback for anything unexpected.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import unquote

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from bidder.core import (
    OFFER_BY_EXTERNAL_ID,
    OFFER_BY_SCREEN_ID,
    OFFER_RESPONSE,
    answer_offer,
    offer_by_external_id,
    offer_by_screen_id,
)
from bidder.deprecation import OPENRTB_PREFIX, deprecation_headers
from bidder.errors import BadRequest, ServiceError
from bidder.http.asgi import (
    MANY_AUTHORIZATIONS,
    Answer,
    ClientGone,
    HttpCall,
    bounded_receive,
    encode_headers,
    repeated_authorization,
)
from bidder.http.litestar_private import is_valid_host
from bidder.http.web import error_answer, unexpected_error
from bidder.observability import CLIENT_CLOSED, RequestObserver
from bidder.openrtb import handle_bid
from bidder.runtime import Runtime

#: A hot route's function: the runtime, the request, and the path parameter ("" for none).
Handler = Callable[[Runtime, HttpCall, str], Awaitable[Answer]]


def _label(template: str) -> str:
    """The metric label Litestar gives a route: its path with `{name:type}` as `{name}`."""
    return template.replace(":str}", "}")


class _Route:
    __slots__ = ("handler", "label", "method", "static_siblings")

    def __init__(
        self,
        method: str,
        label: str,
        handler: Handler,
        static_siblings: frozenset[str] = frozenset(),
    ) -> None:
        self.method, self.label, self.handler = method, label, handler
        # Values of the path parameter that are a static segment of a longer route at the same
        # place: Litestar routes to that segment (and finds no handler: 404), not to this route.
        self.static_siblings = static_siblings


def _prefix(template: str) -> str:
    return template[: template.index("{")]


class Front:
    """ASGI app: the hot routes here, everything else (and lifespan) to `inner`."""

    def __init__(
        self,
        inner: ASGIApp,
        rt: Runtime,
        observer: RequestObserver,
        options_allow: dict[int, bytes] | None = None,
        *,
        hot: bool = True,
    ) -> None:
        """`options_allow`: the `Allow` value of each path's automatic OPTIONS handler, by the
        handler's id (`options_allow` below). `hot`: serve the hot routes (the admin listener
        serves none: everything goes to Litestar, which answers them 404)."""
        self.inner, self.rt, self.observer = inner, rt, observer
        self.options_allow = options_allow or {}
        self.deprecation_headers = tuple(encode_headers(deprecation_headers(rt.settings)))
        self.body_timeout = rt.settings.limits.body_timeout_seconds
        bid = _Route("POST", f"{OPENRTB_PREFIX}/bid", handle_bid)
        # Litestar normalises the alias `.../openrtb-2-6/` to the prefix without the slash.
        alias = _Route("POST", OPENRTB_PREFIX, handle_bid)
        self.exact: dict[str, _Route] = {
            f"{OPENRTB_PREFIX}/bid": bid,
            f"{OPENRTB_PREFIX}/": alias,
            OPENRTB_PREFIX: alias,
        }
        # Longest prefix first: `.../request/external-id/x` is not a screen id `external-id`.
        self.prefixed: list[tuple[str, _Route]] = [
            (
                _prefix(OFFER_BY_EXTERNAL_ID),
                _Route("GET", _label(OFFER_BY_EXTERNAL_ID), offer_by_external_id),
            ),
            (
                _prefix(OFFER_BY_SCREEN_ID),
                _Route(
                    "GET",
                    _label(OFFER_BY_SCREEN_ID),
                    offer_by_screen_id,
                    frozenset({"external-id"}),
                ),
            ),
            (_prefix(OFFER_RESPONSE), _Route("POST", _label(OFFER_RESPONSE), answer_offer)),
        ]
        if not hot:
            self.exact, self.prefixed = {}, []

    def route(self, scope: Scope) -> tuple[_Route, str] | None:
        """The hot route of this request and its path parameter, or None for Litestar."""
        if scope["type"] != ScopeType.HTTP or scope.get("root_path"):
            return None
        path: str = scope["path"]
        method: str = scope["method"]
        found = self.exact.get(path)
        if found is not None:
            return (found, "") if found.method == method else None
        for prefix, candidate in self.prefixed:
            if path.startswith(prefix):
                param = path[len(prefix) :]
                if "/" in param:
                    param = _escaped_segment(scope, prefix)
                if candidate.method != method or not param:
                    return None
                if param in candidate.static_siblings:  # `.../request/external-id`
                    return None
                return candidate, param
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = self.route(scope)
        if found is None or not _host_ok(scope):
            if scope.get("method") == "OPTIONS":
                send = self._options(scope, send)
            receive = bounded_receive(scope, receive, self.body_timeout)
            await self.inner(scope, receive, send)
            return
        route, param = found
        observer = self.observer
        request_id, token = observer.begin(scope)
        start = time.perf_counter()
        status = 500
        try:
            call = HttpCall(scope, receive, self.body_timeout)
            try:
                answer = await self._answer(route, call, param)
            except ClientGone:
                status = CLIENT_CLOSED  # nobody to answer
                return
            status = answer.status
            headers = [*answer.headers, (b"x-request-id", request_id.encode("latin-1"))]
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": answer.body, "more_body": False})
        finally:
            elapsed = time.perf_counter() - start
            observer.end(token, route.label, route.method, status, elapsed)

    def _options(self, scope: Scope, send: Send) -> Send:
        """`send` mending Litestar's automatic OPTIONS answer: its `Allow` names every method
        of the path (Litestar 2 names only those of the path's first handler, litestar#4169,
        so OPTIONS on the screens list said `GET, OPTIONS` where POST works too), and on the
        OpenRTB paths it carries the deprecation headers, as every answer of that interface."""
        table = self.options_allow
        extra = self.deprecation_headers if scope["path"].startswith(OPENRTB_PREFIX) else ()

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                allow = table.get(id(scope.get("route_handler")))
                if allow is not None:
                    headers = [(k, v) for k, v in headers if k.lower() != b"allow"]
                    headers.append((b"allow", allow))
                if extra and not any(name.lower() == b"deprecation" for name, _ in headers):
                    headers += extra
                message = {**message, "headers": headers}
            await send(message)

        return sending

    async def _answer(self, route: _Route, call: HttpCall, param: str) -> Answer:
        try:
            if repeated_authorization(call.scope["headers"]):
                raise BadRequest(MANY_AUTHORIZATIONS)
            return await route.handler(self.rt, call, param)
        except ServiceError as exc:
            return error_answer(call.path, self.rt.settings, exc)
        except ClientGone:
            raise
        except Exception as exc:  # as Litestar's handler of the last resort
            return error_answer(call.path, self.rt.settings, unexpected_error(call.path, exc))


def _escaped_segment(scope: Scope, prefix: str) -> str:
    """The path parameter when the client escaped a `/` in it (`external-id/a%2Fb`): the ASGI
    `path` is decoded, so the parameter is read from `raw_path`, where it is one segment. ""
    when it is not one segment there either (the request goes to Litestar, 404)."""
    raw: bytes | None = scope.get("raw_path")
    if raw is None:
        return ""
    text = raw.decode("latin-1").partition("?")[0]  # some servers leave the query on it
    if not text.startswith(prefix):
        return ""
    segment = text[len(prefix) :]
    if "/" in segment:
        return ""
    try:
        return unquote(segment, errors="strict")
    except UnicodeDecodeError:  # not UTF-8: no id is that
        return ""


def _host_ok(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"host":
            return bool(is_valid_host(value))
    return True


def options_allow(routes: Iterable[Any]) -> dict[int, bytes]:
    """By the id of each HTTP route's OPTIONS handler, the `Allow` value naming every method
    of the route's path (what a 405 there says too)."""
    allow: dict[int, bytes] = {}
    for route in routes:
        methods = getattr(route, "methods", None)
        if not methods:
            continue
        value = ", ".join(sorted(methods)).encode("latin-1")
        for handler in getattr(route, "route_handlers", ()):
            if "OPTIONS" in getattr(handler, "http_methods", ()):
                allow[id(handler)] = value
    return allow
