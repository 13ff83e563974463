"""A client that stops sending its request body, against the real server (`bidder serve`):
it gets a 408 once BODY_TIMEOUT_SECONDS have passed, and it does not hold the worker's
graceful stop (granian kills a worker that has not stopped after 30 s, lifespan shutdown and
all, so a request waiting for a body forever must not keep it up). A body whose
Content-Length has arrived is answered without waiting for more, and its connection serves
the next request."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

from tests.support.factories import basic_document, make_key, seed
from tests.support.processes import (
    BODY_TIMEOUT_SECONDS,
    free_port,
    read_response,
    start_serve,
    tail,
    until_ready,
)
from tests.support.servers import ServerUrls

BID = "/functions/v1/openrtb-2-6/bid"


def _request(body: bytes, key: str, length: int | None = None) -> bytes:
    announced = len(body) if length is None else length
    return (
        f"POST {BID} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {announced}\r\n\r\n"
    ).encode() + body


async def test_slow_body_is_408_and_does_not_hold_the_stop(
    servers: ServerUrls, clean: None, tmp_path: Path
) -> None:
    await seed(servers.database_url, basic_document())
    key = await make_key(servers.database_url)
    port, log = free_port(), tmp_path / "serve.log"
    server = start_serve(servers, port, log)
    try:
        await until_ready(port, log)
        bid = json.dumps({"id": "slow-1", "imp": [{"id": "1"}]}).encode()

        # Two whole requests on one connection: each answered, the connection kept.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(2):
            writer.write(_request(bid, key))
            status, headers, _ = await read_response(reader)
            assert status == 400, tail(log)  # no such bid: answered, and the connection kept
            assert headers.get("connection", "").lower() != "close"
        writer.close()

        # Headers and a part of the body, then nothing: 408 after the deadline, in the
        # OpenRTB error shape, and the connection is closed.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        started = time.monotonic()
        writer.write(_request(b'{"id": "slow', key, length=1000))
        status, headers, body = await read_response(reader)
        waited = time.monotonic() - started
        assert status == 408, body
        assert json.loads(body)["error"] == "REQUEST_TIMEOUT"
        assert BODY_TIMEOUT_SECONDS <= waited < BODY_TIMEOUT_SECONDS + 5
        assert await asyncio.wait_for(reader.read(), timeout=5) == b""  # closed by the server
        writer.close()

        # A client stuck mid-body while the server is asked to stop: the stop takes about the
        # body deadline, not granian's 30 s kill.
        _, stuck = await asyncio.open_connection("127.0.0.1", port)
        stuck.write(_request(b'{"id": "stuck', key, length=1000))
        await stuck.drain()
        await asyncio.sleep(0.2)
        asked = time.monotonic()
        server.send_signal(signal.SIGINT)
        await asyncio.to_thread(server.wait, 25)
        took = time.monotonic() - asked
        stuck.close()
        assert took < BODY_TIMEOUT_SECONDS + 8, tail(log)
        assert "refused to gracefully stop" not in log.read_text(errors="replace")
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)  # the session this test started, workers too
            server.wait(5)
