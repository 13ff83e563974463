"""Shared by the end-to-end tests: a free loopback port, a server process run in a session of its
own and the end of its log, `bidder serve` with one worker, its readiness and one raw HTTP/1.1
response read off a socket."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.cli import cli_env
from tests.support.core import API
from tests.support.servers import ServerUrls


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@contextlib.contextmanager
def running(command: list[str], env: dict[str, str], log: Path) -> Iterator[None]:
    """`command` running in a session of its own, its output in `log`; stopped with SIGTERM,
    its whole session killed if it has not ended 15 s later."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the session this test started
            proc.wait(timeout=5)


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


BODY_TIMEOUT_SECONDS = 1.0


def start_serve(
    servers: ServerUrls, port: int, log: Path, **settings: str
) -> subprocess.Popen[bytes]:
    """`bidder serve` with one worker on `port`, its output in `log`; `settings` add to or
    replace the environment's."""
    env = cli_env(
        servers,
        **{
            "PUBLIC_BASE_URL": f"http://127.0.0.1:{port}",
            "LOG_LEVEL": "WARNING",
            "BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT_SECONDS),
            **settings,
        },
    )
    command = [sys.executable, "-m", "bidder.cli", "serve", "--workers", "1"]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        return subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


async def until_ready(port: int, log: Path) -> None:
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


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
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


def stop_serve(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGKILL)  # the session this test started, workers too
        server.wait(5)


async def until_workers_ready(client: httpx.AsyncClient, auth: dict[str, str], log: Path) -> None:
    """Every worker behind `client` answers: many fresh connections in a row each get a ready
    /readyz and a demo offer."""
    deadline = time.monotonic() + 60
    streak = 0
    while streak < 20:
        if time.monotonic() > deadline:
            pytest.fail("server did not become ready:\n" + tail(log))
        try:
            async with httpx.AsyncClient(base_url=str(client.base_url), timeout=2) as fresh:
                ready = await fresh.get("/readyz")
                demo = await fresh.get(f"{API}/offers/request/test-display-test", headers=auth)
            ok = ready.status_code == 200 and demo.status_code == 200
        except httpx.HTTPError:
            ok = False
        streak = streak + 1 if ok else 0
        if not ok:
            await asyncio.sleep(0.2)
