"""The hot routes served in front of Litestar (bidder/front.py) behave as the rest of the service:
request ids, metrics, the 405/OPTIONS answers, body limits, error shapes, and no traceback for
an unexpected error. Expected answers come from the contract, the decisions and the behaviour
of the routes Litestar serves (the same shapes on every path)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest

from bidder.http.app import create_app
from bidder.observability import exposition
from tests.support.core import API, Core, Live, live_app, prepare
from tests.support.openrtb import BID, ROOT, assert_error, bid_request, queue_kept
from tests.support.servers import ADMIN_TOKEN

SCREEN = "00000000-0000-4000-8000-000000000011"  # unused id: shape of a screen UUID


@pytest.fixture
async def live(servers: Any, clean: None) -> AsyncIterator[Live]:
    async with live_app(queue_kept(servers)) as running:
        yield running


@pytest.fixture
async def core(live: Live) -> Core:
    return await prepare(live)


def _moving_screen(core: Core) -> str:
    snapshot = core.rt.inventory.snapshot
    assert snapshot is not None
    return next(s.id for s in snapshot.screens.values() if s.type == "moving")


async def _bid(core: Core, body: bytes, **headers: str) -> httpx.Response:
    return await core.client.post(
        BID, content=body, headers={**core.auth, "Content-Type": "application/json", **headers}
    )


async def test_hot_routes_carry_a_request_id(core: Core) -> None:
    screen_id = _moving_screen(core)
    offer = await core.offer(screen_id)
    assert offer.status_code == 200, offer.text
    generated = offer.headers["x-request-id"]
    assert len(generated) == 32
    assert set(generated) <= set("0123456789abcdef")
    again = await core.client.get(
        f"{API}/offers/request/{screen_id}", headers={**core.auth, "X-Request-ID": "trace-7"}
    )
    assert again.headers["x-request-id"] == "trace-7"
    accept = await core.respond(
        offer.json()["offer_id"],
        {"action": "accept", "accepted_price_cents": offer.json()["bid_price_cents"]},
    )
    assert accept.status_code == 200, accept.text
    assert accept.headers["x-request-id"] not in {generated, "trace-7"}
    bid = await _bid(core, json.dumps(bid_request()).encode())
    assert bid.status_code == 200, bid.text
    assert len(bid.headers["x-request-id"]) == 32


async def test_only_a_plain_token_of_a_request_id_is_repeated(core: Core) -> None:
    # docs/decisions.md: the caller's id of 1 to 128 visible ASCII characters; any other is
    # replaced by one of the service's (32 hex digits).
    screen_id = _moving_screen(core)
    path = f"{API}/offers/request/{screen_id}"
    kept = "t" * 128
    answer = await core.client.get(path, headers={**core.auth, "X-Request-ID": kept})
    assert answer.headers["x-request-id"] == kept
    refused: list[bytes] = [b"t" * 129, b"trace 7", "trac\xe9".encode("latin-1"), b"a\tb"]
    auth = [(name.encode(), text.encode()) for name, text in core.auth.items()]
    for value in refused:
        answer = await core.client.get(path, headers=[*auth, (b"X-Request-ID", value)])
        assert answer.status_code == 200, answer.text
        replaced = answer.headers["x-request-id"]
        assert len(replaced) == 32
        assert set(replaced) <= set("0123456789abcdef")


async def test_hot_routes_are_counted_under_their_route(core: Core) -> None:
    screen_id = _moving_screen(core)
    await core.offer(screen_id)
    await core.offer(SCREEN)  # 404: no such screen
    await _bid(core, json.dumps(bid_request()).encode())
    await _bid(core, json.dumps(bid_request()).encode(), Authorization="Bearer nope")
    await core.client.post(
        ROOT,
        content=json.dumps(bid_request()).encode(),
        headers={**core.auth, "Content-Type": "application/json"},
    )
    text = (await core.client.get("/metrics")).text
    offers = f"{API}/offers/request/{{screen_id}}"
    for line in (
        f'http_requests_total{{method="GET",route="{offers}",status="200"}} 1.0',
        f'http_requests_total{{method="GET",route="{offers}",status="404"}} 1.0',
        'http_requests_total{method="POST",route="/functions/v1/openrtb-2-6/bid",status="200"} 1.0',
        'http_requests_total{method="POST",route="/functions/v1/openrtb-2-6/bid",status="401"} 1.0',
        'http_requests_total{method="POST",route="/functions/v1/openrtb-2-6",status="200"} 1.0',
    ):
        assert line in text, line
    assert f'http_request_duration_seconds_count{{route="{offers}"}} 2.0' in text


async def test_errors_are_logged_like_every_other_route(
    core: Core, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="bidder.access"):
        await core.offer(SCREEN)
    lines = [r for r in caplog.records if r.name == "bidder.access"]
    assert [(r.__dict__["status"], r.__dict__["route"]) for r in lines] == [
        (404, f"{API}/offers/request/{{screen_id}}")
    ]


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("GET", BID, "POST"),
        ("PUT", ROOT, "POST"),
        ("POST", f"{API}/offers/request/{SCREEN}", "GET"),
        ("DELETE", f"{API}/offers/response/{SCREEN}", "POST"),
    ],
)
async def test_wrong_method_is_405_with_allow(
    core: Core, method: str, path: str, allowed: str
) -> None:
    response = await core.client.request(method, path, headers=core.auth)
    assert response.status_code == 405, response.text
    assert allowed in response.headers["allow"]
    if path.startswith(API):
        assert response.json() == {"error": f"Method {method} not allowed on this path"}
    else:
        assert_error(response, 405, "METHOD_NOT_ALLOWED")
    options = await core.client.options(path)
    assert options.status_code == 204
    assert allowed in options.headers["allow"]


@pytest.mark.parametrize(
    ("path", "methods"),
    [
        (f"{API}/screens", {"GET", "OPTIONS", "POST"}),
        (f"{API}/screens/{SCREEN}", {"DELETE", "GET", "OPTIONS", "PATCH"}),
    ],
)
async def test_options_names_every_method_of_a_path_as_the_405_does(
    core: Core, path: str, methods: set[str]
) -> None:
    """Litestar 2's automatic OPTIONS named only the methods of the path's first handler
    (litestar#4169): OPTIONS on the screens list said GET, OPTIONS, where POST works too."""
    options = await core.client.options(path)
    assert options.status_code == 204
    assert set(options.headers["allow"].split(", ")) == methods
    refused = await core.client.request("TRACE", path, headers=core.auth)
    assert refused.status_code == 405
    assert set(refused.headers["allow"].split(", ")) == methods


async def test_trailing_slash_gets_the_same_answer(core: Core) -> None:
    screen_id = _moving_screen(core)
    plain = await core.client.get(f"{API}/offers/request/{screen_id}", headers=core.auth)
    slashed = await core.client.get(f"{API}/offers/request/{screen_id}/", headers=core.auth)
    assert plain.status_code == slashed.status_code == 200
    assert set(plain.json()) == set(slashed.json())


async def test_bid_body_over_one_megabyte_is_413(core: Core) -> None:
    body = b'{"id": "x", "pad": "' + b"a" * 1_000_001 + b'"}'
    assert_error(await _bid(core, body), 413, "PAYLOAD_TOO_LARGE")


async def test_offer_response_body_over_16_kb_is_413(core: Core) -> None:
    body = json.dumps({"action": "reject", "rejection_reason": "x" * 20_000}).encode()
    response = await core.client.post(
        f"{API}/offers/response/{SCREEN}",
        content=body,
        headers={**core.auth, "Content-Type": "application/json"},
    )
    assert response.status_code == 413
    assert response.json()["error"].startswith("Request body too large")


class _RawCall:
    """Drives the ASGI app with a hand-made request: headers httpx would correct, a body in
    several chunks, or a client that goes away."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(
        self,
        method: str,
        path: str,
        headers: list[tuple[bytes, bytes]],
        events: list[Any],
        host: bytes = b"testserver.local",
        then: str = "disconnect",
        receive: Callable[[], Awaitable[Any]] | None = None,
    ) -> tuple[int, dict[bytes, bytes], bytes]:
        """`then`: what `receive` does once `events` are used up: "disconnect" (answer
        http.disconnect), "wait" (never answer: a client that stopped sending), or "fail"
        (the test fails: nothing more may be read). `receive` replaces all of that."""
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", host), *headers],
            "client": ("127.0.0.1", 40000),
            "server": ("testserver.local", 80),
            "state": {},
        }
        pending = list(events)
        status, sent_headers, chunks = 0, {}, []

        async def from_events() -> Any:
            if pending:
                return pending.pop(0)
            if then == "wait":
                await asyncio.Event().wait()
            assert then != "fail", "read past the end of the body"
            return {"type": "http.disconnect"}

        async def send(message: Any) -> None:
            nonlocal status, sent_headers
            if message["type"] == "http.response.start":
                status = message["status"]
                sent_headers = dict(message["headers"])
            else:
                chunks.append(message.get("body", b""))

        await self.app(scope, receive or from_events, send)
        return status, sent_headers, b"".join(chunks)


@pytest.fixture
async def raw(core: Core) -> _RawCall:
    return _RawCall(create_app(core.rt.settings, runtime=core.rt))


def _auth(core: Core) -> list[tuple[bytes, bytes]]:
    return [
        (b"authorization", f"Bearer {core.key}".encode()),
        (b"content-type", b"application/json"),
    ]


async def test_body_in_chunks_is_read_whole(core: Core, raw: _RawCall) -> None:
    body = json.dumps(bid_request()).encode()
    events = [
        {"type": "http.request", "body": body[:100], "more_body": True},
        {"type": "http.request", "body": b"", "more_body": True},
        {"type": "http.request", "body": body[100:], "more_body": False},
    ]
    status, _, answer = await raw("POST", BID, _auth(core), events)
    assert status == 200, answer
    assert json.loads(answer)["id"] == "auction-42"


async def test_body_complete_at_its_content_length_is_not_read_further(
    core: Core, raw: _RawCall
) -> None:
    # granian sends the last chunk with more_body=True and an empty closing event after it;
    # once the announced bytes are in, the body is whole and that event is not waited for.
    body = json.dumps(bid_request()).encode()
    events = [
        {"type": "http.request", "body": body[:100], "more_body": True},
        {"type": "http.request", "body": body[100:], "more_body": True},
    ]
    length = (b"content-length", str(len(body)).encode())
    status, _, answer = await raw("POST", BID, [*_auth(core), length], events, then="fail")
    assert status == 200, answer
    assert json.loads(answer)["id"] == "auction-42"


async def test_body_without_a_length_is_read_to_its_last_event(core: Core, raw: _RawCall) -> None:
    body = json.dumps(bid_request()).encode()
    events = [
        {"type": "http.request", "body": body, "more_body": True},
        {"type": "http.request", "body": b"", "more_body": False},
    ]
    status, _, answer = await raw("POST", BID, _auth(core), events, then="fail")
    assert status == 200, answer


@pytest.fixture
def short_body_timeout(core: Core, monkeypatch: pytest.MonkeyPatch) -> float:
    seconds = 0.3
    limits = dataclasses.replace(core.rt.settings.limits, body_timeout_seconds=seconds)
    settings = dataclasses.replace(core.rt.settings, limits=limits)
    monkeypatch.setattr(core.rt, "settings", settings)
    return seconds


@pytest.mark.parametrize("interface", ["openrtb", "core", "admin"])
async def test_a_body_that_stops_arriving_is_408_in_the_interface_shape(
    core: Core, raw: _RawCall, short_body_timeout: float, interface: str
) -> None:
    partial = [{"type": "http.request", "body": b'{"id": "a', "more_body": True}]
    method, path, headers = {
        "openrtb": ("POST", BID, _auth(core)),
        "core": ("POST", f"{API}/offers/response/{SCREEN}", _auth(core)),
        "admin": (
            "PUT",
            "/admin/v1/inventory",
            [(b"authorization", f"Bearer {ADMIN_TOKEN}".encode())],
        ),
    }[interface]
    started = time.monotonic()
    raw_app = _RawCall(create_app(core.rt.settings, runtime=core.rt))
    status, sent, answer = await asyncio.wait_for(
        raw_app(method, path, headers, partial, then="wait"), timeout=10
    )
    waited = time.monotonic() - started
    assert status == 408, answer
    assert short_body_timeout <= waited < short_body_timeout + 2
    assert sent[b"connection"] == b"close"  # the rest of the body must not be read as a request
    body = json.loads(answer)
    if interface == "openrtb":
        assert body["error"] == "REQUEST_TIMEOUT"
        assert sent[b"deprecation"] == b"true"
    else:
        assert body == {
            "error": f"The request body did not arrive within {short_body_timeout:g} seconds"
        }


async def test_a_bid_with_a_bad_key_is_401_without_waiting_for_its_body(
    core: Core, raw: _RawCall
) -> None:
    headers = [(b"authorization", b"Bearer nope"), (b"content-type", b"application/json")]
    status, sent, answer = await asyncio.wait_for(
        raw("POST", BID, headers, [], then="fail"), timeout=5
    )
    assert status == 401, answer
    assert json.loads(answer)["error"] == "INVALID_API_KEY"
    assert sent[b"deprecation"] == b"true"


async def test_a_body_that_arrives_in_time_is_not_cut_short(
    core: Core, short_body_timeout: float
) -> None:
    slow = _RawCall(create_app(core.rt.settings, runtime=core.rt))
    body = json.dumps(bid_request()).encode()

    async def events_over_time() -> Any:
        for part in (body[:10], body[10:]):
            await asyncio.sleep(short_body_timeout / 3)
            yield {"type": "http.request", "body": part, "more_body": True}
        yield {"type": "http.request", "body": b"", "more_body": False}

    parts = events_over_time()

    async def receive() -> Any:
        return await anext(parts)

    status, _, answer = await slow("POST", BID, _auth(core), [], receive=receive)
    assert status == 200, answer


async def test_content_length_not_a_number_is_400(core: Core, raw: _RawCall) -> None:
    events = [{"type": "http.request", "body": b"{}", "more_body": False}]
    status, headers, answer = await raw(
        "POST", BID, [*_auth(core), (b"content-length", b"two")], events
    )
    assert status == 400
    assert json.loads(answer)["error"] == "INVALID_REQUEST"
    assert headers[b"deprecation"] == b"true"


async def test_declared_length_over_the_limit_is_413_before_reading(
    core: Core, raw: _RawCall
) -> None:
    status, _, answer = await raw("POST", BID, [*_auth(core), (b"content-length", b"1000001")], [])
    assert status == 413
    assert json.loads(answer)["error"] == "PAYLOAD_TOO_LARGE"


@pytest.mark.parametrize(
    ("path", "label"),
    [
        (f"{API}/offers/response/{SCREEN}", f"{API}/offers/response/{{offer_id}}"),  # the front
        (f"{API}/screens", f"{API}/screens"),  # Litestar
    ],
)
async def test_client_gone_mid_body_is_counted_client_closed_at_info(
    core: Core, raw: _RawCall, caplog: pytest.LogCaptureFixture, path: str, label: str
) -> None:
    events = [{"type": "http.request", "body": b'{"action": ', "more_body": True}]
    with caplog.at_level(logging.INFO):
        status, _, _ = await raw("POST", path, _auth(core), events)
    assert status in (0, 499)  # nothing, or an answer nobody reads: never a 500
    counted = exposition(core.rt.metrics).decode()
    assert f'route="{label}",status="client_closed"}} 1.0' in counted, counted
    assert 'status="500"' not in counted
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    gone = [r for r in caplog.records if r.message == "client closed"]
    assert len(gone) == 1
    assert gone[0].levelno == logging.INFO


async def test_unexpected_error_is_500_in_the_interface_shape(
    core: Core, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise ValueError("bug in the reservation")

    monkeypatch.setattr(core.rt.hot, "reserve", broken)
    with caplog.at_level(logging.ERROR, logger="bidder.web"):
        offer = await core.offer(_moving_screen(core))
    assert offer.status_code == 500
    assert offer.json() == {"error": "Failed to process the offer"}
    assert "Traceback" not in offer.text
    assert any(r.message == "unhandled error" and r.exc_info for r in caplog.records)


async def test_invalid_host_header_is_400(core: Core, raw: _RawCall) -> None:
    events = [{"type": "http.request", "body": b"", "more_body": False}]
    path = f"{API}/offers/request/{SCREEN}"
    status, _, _ = await raw("GET", path, _auth(core), events, host=b"bad host/\\")
    assert status == 400


async def test_a_static_segment_is_not_a_screen_id(core: Core) -> None:
    """`.../offers/request/external-id` is the start of the external-id route, which Litestar
    answers with its own 404; the front must not take it for a screen id."""
    response = await core.client.get(f"{API}/offers/request/external-id", headers=core.auth)
    assert response.status_code == 404
    assert response.json() == {"error": "Not found"}


async def test_a_core_body_that_is_not_utf8_is_400(core: Core) -> None:
    response = await core.client.post(
        f"{API}/offers/response/{SCREEN}",
        content=b'{"action": "reject", "rejection_reason": "\xff"}',
        headers={**core.auth, "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json() == {"error": "Request body is not valid JSON"}
