"""Connections are bounded, against the real server (`bidder serve`): a connection that sends
nothing, or nothing more after its answer, is closed once IDLE_TIMEOUT_SECONDS pass; a worker
serves at most MAX_CONNECTIONS_PER_WORKER connections at once (the next waits until one
closes); a client that goes away in the middle of its request body is an `info` event counted
under the status label `client_closed`, never a 500 and never a traceback."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
from pathlib import Path

from tests.support.factories import SCREEN_MOVING, basic_document, make_key, seed
from tests.support.processes import (
    free_port,
    read_response,
    start_serve,
    stop_serve,
    tail,
    until_ready,
)
from tests.support.servers import ADMIN_TOKEN, ServerUrls

IDLE_TIMEOUT_SECONDS = 1.0
MAX_CONNECTIONS = 3
CAMPAIGN = "00000000-0000-4000-8000-000000000001"  # a campaign id in its valid shape


def _serve(servers: ServerUrls, port: int, log: Path) -> subprocess.Popen[bytes]:
    return start_serve(
        servers,
        port,
        log,
        LOG_LEVEL="INFO",
        IDLE_TIMEOUT_SECONDS=str(IDLE_TIMEOUT_SECONDS),
        MAX_CONNECTIONS_PER_WORKER=str(MAX_CONNECTIONS),
    )


async def _closed_after(reader: asyncio.StreamReader) -> float:
    """Seconds until the server closes the connection (it sends nothing before)."""
    started = time.monotonic()
    assert await asyncio.wait_for(reader.read(), timeout=IDLE_TIMEOUT_SECONDS + 10) == b""
    return time.monotonic() - started


def _get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()


async def test_idle_connections_are_closed_and_their_number_bounded(
    servers: ServerUrls, clean: None, tmp_path: Path
) -> None:
    port, log = free_port(), tmp_path / "serve.log"
    server = _serve(servers, port, log)
    try:
        await until_ready(port, log)
        await asyncio.sleep(IDLE_TIMEOUT_SECONDS + 0.5)  # the readiness probe's connection gone

        # Not a byte sent: closed after the idle timeout, not kept.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        waited = await _closed_after(reader)
        assert IDLE_TIMEOUT_SECONDS - 0.2 <= waited < IDLE_TIMEOUT_SECONDS + 3, tail(log)
        writer.close()

        # Half a request head, then nothing: closed too (a slow-loris).
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        waited = await _closed_after(reader)
        assert waited < IDLE_TIMEOUT_SECONDS + 3
        writer.close()

        # A kept-alive connection after its answer, then silence: closed after the timeout.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_get("/healthz"))
        status, headers, _ = await read_response(reader)
        assert status == 200
        assert headers.get("connection", "").lower() != "close"
        waited = await _closed_after(reader)
        assert IDLE_TIMEOUT_SECONDS - 0.2 <= waited < IDLE_TIMEOUT_SECONDS + 3
        writer.close()
        await asyncio.sleep(0.3)

        # MAX_CONNECTIONS open connections (answered, kept alive): one more is served only
        # once one of them closes, at their idle timeout.
        held = []
        for _ in range(MAX_CONNECTIONS):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_get("/healthz"))
            assert (await read_response(reader))[0] == 200
            held.append(writer)
        opened = time.monotonic()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)  # the kernel's backlog
        writer.write(_get("/healthz"))
        status, _, _ = await read_response(reader)
        waited = time.monotonic() - opened
        assert status == 200
        assert waited >= IDLE_TIMEOUT_SECONDS * 0.5, "served past the connection bound"
        for w in [*held, writer]:
            w.close()
    finally:
        stop_serve(server)


def _post(path: str, body: bytes, announced: int, auth: str) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {auth}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {announced}\r\n\r\n"
    ).encode() + body


async def test_a_client_gone_mid_body_is_an_info_event_not_a_500(
    servers: ServerUrls, clean: None, tmp_path: Path
) -> None:
    await seed(servers.database_url, basic_document())
    key = await make_key(servers.database_url)
    port, log = free_port(), tmp_path / "serve.log"
    server = _serve(servers, port, log)
    try:
        await until_ready(port, log)
        gone = [
            # the hot routes, served in front of Litestar
            ("/functions/v1/openrtb-2-6/bid", f"Bearer {key}"),
            ("/functions/v1/api/offers/response/some-offer", f"Bearer {key}"),
            # routes Litestar serves
            ("/functions/v1/api/screens", f"Bearer {key}"),
            ("/functions/v1/api/playout/confirm/some-deal", f"Bearer {key}"),
            (f"/admin/v1/campaigns/{CAMPAIGN}/budget", f"Bearer {ADMIN_TOKEN}"),
        ]
        for path, auth in gone:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_post(path, b'{"id": "half', 1000, auth))
            await writer.drain()
            await asyncio.sleep(0.2)  # the request is being read
            writer.close()
            await writer.wait_closed()
        # Whole requests whose clients leave before the answer: answered into a closed
        # connection, with no error either.
        bid = b'{"id": "a", "at": 3, "imp": [{"id": "1", "tagid": "ext-moving-1"}]}'
        for request in (
            _get(f"/functions/v1/api/offers/request/{SCREEN_MOVING}").replace(
                b"\r\n\r\n", f"\r\nAuthorization: Bearer {key}\r\n\r\n".encode()
            ),
            _post("/functions/v1/openrtb-2-6/bid", bid, len(bid), f"Bearer {key}"),
            _get("/functions/v1/api/screens"),
        ):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            await writer.drain()
            writer.close()
            await writer.wait_closed()
        await asyncio.sleep(0.5)

        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_get("/metrics"))
        status, _, body = await read_response(reader)
        writer.close()
        assert status == 200
        metrics = body.decode()
        assert not re.search(r'^http_requests_total\{[^}]*status="5\d\d"', metrics, re.M), metrics
        counted = {
            route: float(n)
            for route, n in re.findall(
                r'^http_requests_total\{[^}]*route="([^"]*)",status="client_closed"\} (\S+)$',
                metrics,
                re.M,
            )
        }
        assert sum(counted.values()) == len(gone), metrics
        assert "/functions/v1/openrtb-2-6/bid" in counted

        lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
        text = log.read_text(errors="replace")
        assert "Traceback" not in text
        assert not [line for line in lines if line.get("level") in ("ERROR", "CRITICAL")], text
        events = [line for line in lines if line.get("message") == "client closed"]
        assert len(events) == len(gone), text
        assert all(event["level"] == "INFO" for event in events)
    finally:
        stop_serve(server)
