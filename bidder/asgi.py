"""Bare ASGI plumbing for the hot routes: a request read straight from the ASGI scope, and a
finished answer sent as it is.

The offer request, the offer response and the OpenRTB bid are served by `bidder.front` without
Litestar's request and response objects (docs/performance.md). What those objects did for them
is done here, with the same results: the first value of a header, the first value of a query
parameter (`parse_qsl` over the latin-1 query string, blank values kept), and the body read
with a size limit (a declared Content-Length that is not an integer is a 400, one above the
limit a 413 before anything is read, a body that grows past the limit a 413).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import parse_qsl

from litestar.enums import ScopeType
from litestar.types import Receive, Scope, Send

from bidder.errors import BadRequest, PayloadTooLarge, RequestTimeout


def body_timeout(seconds: float) -> RequestTimeout:
    """The 408 of a body that stopped arriving. `Connection: close`: the rest of it may still
    come, and must not be read as the next request."""
    return RequestTimeout(
        f"The request body did not arrive within {seconds:g} seconds",
        headers={"Connection": "close"},
    )


#: The status a request is counted and logged under when its client went away before the
#: answer (nginx's 499): label `client_closed` on the request counter, an `info` log event,
#: never a 500 (bidder.observability).
CLIENT_CLOSED = 499


class ClientGone(Exception):
    """The client disconnected before its request body arrived. Nobody is left to answer: the
    request is counted under CLIENT_CLOSED, logged at `info`, without a traceback."""


class Answer:
    """A finished answer as a bare ASGI app: the status, headers and body are sent as they are.

    Headers go out as Litestar's `Response` sends them: lower-case names, latin-1,
    `content-type` and `content-length` when there is a body. A Litestar route returning one
    (annotated `ASGIApp`) passes it through untouched.
    """

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body, "more_body": False})


_JSON = (b"content-type", b"application/json")


def json_answer(
    body: bytes, status: int = 200, headers: Sequence[tuple[bytes, bytes]] = ()
) -> Answer:
    """`body` (JSON bytes) with `headers` first, then content type and length (a new list:
    whoever sends the answer may add to it)."""
    encoded = [*headers, _JSON, (b"content-length", b"%d" % len(body))]
    return Answer(status, encoded, body)


def is_json(content_type: str | None) -> bool:
    """Whether a Content-Type names JSON (`application/json`, any parameters, any case)."""
    if content_type is None:
        return False
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


#: The 400 of a request carrying more than one Authorization header (docs/decisions.md,
#: "Duplicate JSON keys and Authorization headers").
MANY_AUTHORIZATIONS = "Send one Authorization header, not several"


def repeated_authorization(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """Whether the request carries the Authorization header more than once: which one counts
    would be the server's guess (RFC 9110 5.3: it is no list), so such a request is refused."""
    seen = False
    for name, _ in headers:
        if len(name) == 13 and name.lower() == b"authorization":
            if seen:
                return True
            seen = True
    return False


def encode_headers(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


class HttpCall:
    """One HTTP request as the hot routes need it: the scope, a header lookup and the body."""

    __slots__ = ("_query", "body_timeout", "receive", "scope")

    def __init__(self, scope: Scope, receive: Receive, body_timeout: float) -> None:
        """`body_timeout`: how long the next part of the body may take (the setting
        BODY_TIMEOUT_SECONDS)."""
        self.scope, self.receive, self.body_timeout = scope, receive, body_timeout
        self._query: dict[str, str] | None = None

    @property
    def path(self) -> str:
        path: str = self.scope["path"]
        return path

    def header(self, name: bytes) -> str | None:
        """The first value of header `name` (lower-case), as `request.headers.get` gives it."""
        for raw_name, value in self.scope["headers"]:
            if raw_name.lower() == name:
                decoded: str = value.decode("latin-1")
                return decoded
        return None

    def query(self, name: str) -> str | None:
        """The first value of query parameter `name`, as `request.query_params.get` gives it."""
        if self._query is None:
            raw: bytes = self.scope.get("query_string", b"")
            found: dict[str, str] = {}
            if raw:
                for key, value in parse_qsl(raw.decode("latin-1"), keep_blank_values=True):
                    found.setdefault(key, value)
            self._query = found
        return self._query.get(name)

    async def body(self, limit: int, too_large: str = "Request body too large") -> bytes:
        """The whole body, at most `limit` bytes; `too_large` is the 413's message.

        Once the bytes a Content-Length announced have arrived, the body is complete: the
        closing `receive()` that would only say so (granian answers it with an empty last
        chunk) is not awaited, which saves a round trip to the server's I/O thread on every
        POST (docs/performance.md). A body of which nothing more arrives for `body_timeout`
        seconds is a 408 (`receive_within`): a client that stops sending must not hold the
        request, and with it the worker's graceful stop, forever."""
        announced = -1
        declared = self.header(b"content-length")
        if declared is not None:
            try:
                announced = int(declared)
            except ValueError:
                raise BadRequest("Bad request") from None
            if announced > limit:
                raise PayloadTooLarge(too_large)
            if announced == 0:
                return b""
        chunks: list[bytes] = []
        size = 0
        while True:
            event: Any = await receive_within(self.receive, self.body_timeout)
            if event["type"] == "http.request":
                chunk: bytes = event.get("body", b"")
                if chunk:
                    size += len(chunk)
                    if size > limit:
                        raise PayloadTooLarge(too_large)
                    chunks.append(chunk)
                if not event.get("more_body", False) or size == announced:
                    break
            elif event["type"] == "http.disconnect":
                raise ClientGone("client disconnected before the request body arrived")
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def receive_within(receive: Receive, seconds: float) -> Any:
    """`receive()`, or the 408 once `seconds` pass without its answer. A timer cancels the
    reading task (granian's default asyncio tasks): about 2 us a read, where
    `asyncio.timeout` costs 6 on every POST of the hot routes."""
    task = asyncio.current_task()
    if task is None:  # not run by a task (no ASGI server does that): nothing to cancel
        return await receive()
    cancelling = task.cancelling()
    expiry = _BodyExpiry(task)
    timer = asyncio.get_running_loop().call_later(seconds, expiry)
    try:
        return await receive()
    except asyncio.CancelledError:
        # Ours only if no other cancellation came with it (a shutdown's must go on).
        if expiry.fired and task.uncancel() <= cancelling:
            raise body_timeout(seconds) from None
        raise
    finally:
        timer.cancel()


class _BodyExpiry:
    """The body deadline's timer callback: cancels the reading task and says it did, so the
    reader tells its own deadline from any other cancellation."""

    __slots__ = ("fired", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task, self.fired = task, False

    def __call__(self) -> None:
        self.fired = True
        self.task.cancel()


#: Methods whose requests Litestar may read a body of.
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def bounded_receive(scope: Scope, receive: Receive, seconds: float) -> Receive:
    """`receive` for a request Litestar serves: until the body has arrived, each call must
    answer within `seconds`, else it raises the 408 (`receive_within`, as `HttpCall.body` on
    the hot routes; Litestar renders it in the interface's shape). A large body that keeps
    arriving, however slowly, is not cut off (a 256 MB inventory document on a slow link)."""
    if scope["type"] != ScopeType.HTTP or scope.get("method") not in _BODY_METHODS:
        return receive
    complete = False

    async def receiving() -> Any:
        nonlocal complete
        if complete:
            return await receive()
        event = await receive_within(receive, seconds)
        if event["type"] == "http.disconnect":
            # Litestar would make it a 500 ("client disconnected prematurely"): the client's
            # leaving is no error of the service's (CLIENT_CLOSED).
            raise ClientGone("client disconnected before the request body arrived")
        if event["type"] != "http.request" or not event.get("more_body", False):
            complete = True
        return event

    return receiving
