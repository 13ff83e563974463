"""The private Litestar API behind bidder.http.litestar_private is still there, still the one
Litestar's router refuses a Host header with, and still accepts what it did: the hot routes
served in front of Litestar (bidder.http.front) refuse exactly the Host headers Litestar does.

The expected answers follow RFC 3986's authority (RFC 9110 7.2: Host = uri-host [":" port]):
letters, digits, the unreserved and sub-delims characters, ":", "[", "]", "@" and "%" pass;
anything else (a space, "/", "?", "#", a quote, a control character, non-ASCII) is refused.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from litestar import Litestar, get

from bidder.http.litestar_private import is_valid_host

AUTHORITIES = [
    b"example.com",
    b"example.com:8080",
    b"EXAMPLE.com",
    b"127.0.0.1:8000",
    b"[::1]:8000",
    b"xn--bcher-kva.example",
    b"user@example.com",
    b"%65xample.com",
    b"a-b_c~d.e!$&'()*+,;=",
    b"",
]
NOT_AUTHORITIES = [
    b"exa mple.com",
    b"example.com/path",
    b"example.com?x=1",
    b"example.com#top",
    b'bad"host',
    b"host<script>",
    b"example.com\r\nX-Injected: 1",
    b"host\x00",
    b"caf\xc3\xa9.com",
]


def test_it_takes_the_header_value_as_bytes() -> None:
    assert list(inspect.signature(is_valid_host).parameters) == ["host"]


@pytest.mark.parametrize("host", AUTHORITIES)
def test_an_authority_passes(host: bytes) -> None:
    assert is_valid_host(host) is True


@pytest.mark.parametrize("host", NOT_AUTHORITIES)
def test_anything_else_is_refused(host: bytes) -> None:
    assert is_valid_host(host) is False


@get("/", sync_to_thread=False)
def _root() -> str:
    return "ok"


async def _litestar_status(host: bytes) -> int:
    """The status Litestar's own router gives a GET / with this Host header."""
    app = Litestar(route_handlers=[_root], logging_config=None)
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/",
        "raw_path": b"/",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", host)],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    await app(scope, receive, send)  # type: ignore[arg-type]
    status: int = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status


@pytest.mark.parametrize("host", AUTHORITIES + NOT_AUTHORITIES)
async def test_litestars_router_refuses_exactly_what_it_refuses(host: bytes) -> None:
    """Litestar's router still checks the Host header with this function (the same answers on
    every host above), so front and Litestar stay in step."""
    assert await _litestar_status(host) == (200 if is_valid_host(host) else 400)
