"""A client that stops sending its request body, against the real server (`bidder serve`):
it gets a 408 once BODY_TIMEOUT_SECONDS have passed, and it does not hold the worker's
graceful stop (granian killed a worker that had not stopped after 30 s, lifespan shutdown
and all, when a request waited for a body forever). A body whose Content-Length has arrived
is answered without waiting for more, and its connection serves the next request."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.cli import cli_env
from tests.support.factories import basic_document, make_key, seed
from tests.support.processes import free_port, tail
from tests.support.servers import ServerUrls

BID = "/functions/v1/openrtb-2-6/bid"
BODY_TIMEOUT_SECONDS = 1.0


def _start(servers: ServerUrls, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = cli_env(
        servers,
        PUBLIC_BASE_URL=f"http://127.0.0.1:{port}",
        LOG_LEVEL="WARNING",
        BODY_TIMEOUT_SECONDS=str(BODY_TIMEOUT_SECONDS),
    )
    command = [sys.executable, "-m", "bidder.cli", "serve", "--workers", "1"]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        return subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


async def _until_ready(port: int, log: Path) -> None:
    deadline = time.monotonic() + 60
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=2) as client:
        while True:
            try:
                if (await client.get("/readyz")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("the server did not start:\n" + tail(log))
            await asyncio.sleep(0.2)


def _request(body: bytes, key: str, length: int | None = None) -> bytes:
    announced = len(body) if length is None else length
    return (
        f"POST {BID} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {announced}\r\n\r\n"
    ).encode() + body


async def _response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response: status, headers (lower-case names), body."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    body = await asyncio.wait_for(reader.readexactly(length), timeout=10)
    return status, headers, body


async def test_slow_body_is_408_and_does_not_hold_the_stop(
    servers: ServerUrls, clean: None, tmp_path: Path
) -> None:
    await seed(servers.database_url, basic_document())
    key = await make_key(servers.database_url)
    port, log = free_port(), tmp_path / "serve.log"
    server = _start(servers, port, log)
    try:
        await _until_ready(port, log)
        bid = json.dumps({"id": "slow-1", "imp": [{"id": "1"}]}).encode()

        # Two whole requests on one connection: each answered, the connection kept.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(2):
            writer.write(_request(bid, key))
            status, headers, _ = await _response(reader)
            assert status == 400, tail(log)  # no such bid: answered, and the connection kept
            assert headers.get("connection", "").lower() != "close"
        writer.close()

        # Headers and a part of the body, then nothing: 408 after the deadline, in the
        # OpenRTB error shape, and the connection is closed.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        started = time.monotonic()
        writer.write(_request(b'{"id": "slow', key, length=1000))
        status, headers, body = await _response(reader)
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
