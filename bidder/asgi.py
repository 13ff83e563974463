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

from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl

from litestar.types import Receive, Scope, Send

from bidder.errors import BadRequest, PayloadTooLarge


class ClientGone(Exception):
    """The client disconnected before its request body arrived."""


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


def encode_headers(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


class HttpCall:
    """One HTTP request as the hot routes need it: the scope, a header lookup and the body."""

    __slots__ = ("_query", "receive", "scope")

    def __init__(self, scope: Scope, receive: Receive) -> None:
        self.scope, self.receive = scope, receive
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
        """The whole body, at most `limit` bytes; `too_large` is the 413's message."""
        declared = self.header(b"content-length")
        if declared is not None:
            try:
                announced = int(declared)
            except ValueError:
                raise BadRequest("Bad request") from None
            if announced > limit:
                raise PayloadTooLarge(too_large)
        chunks: list[bytes] = []
        size = 0
        while True:
            event: Any = await self.receive()
            if event["type"] == "http.request":
                chunk: bytes = event.get("body", b"")
                if chunk:
                    size += len(chunk)
                    if size > limit:
                        raise PayloadTooLarge(too_large)
                    chunks.append(chunk)
                if not event.get("more_body", False):
                    break
            elif event["type"] == "http.disconnect":
                raise ClientGone("client disconnected before the request body arrived")
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
