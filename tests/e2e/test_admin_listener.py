"""`bidder serve --admin-port`: the admin API and `/metrics` are served on their own listener
and nowhere else. The public listener answers them 404 in the Core API's `{error}` shape, the
admin listener serves them (its `/metrics` counts the public listener's requests too) and
nothing of the public interfaces; SIGTERM to `bidder serve` stops both listeners."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.admin import ADMIN
from tests.support.cli import bidder, cli_env
from tests.support.processes import free_port, running, start_serve, tail, until_ready
from tests.support.servers import ServerUrls

HEALTHZ_COUNT = re.compile(
    r'^http_requests_total\{method="GET",route="/healthz",status="200"\} ([0-9.e+]+)$', re.M
)
#: Paths of the admin side (docs/operations.md, "Which paths each side exposes").
ADMIN_PATHS = ("/admin/v1/inventory", "/metrics", "/docs/openapi-admin.json")


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), 0.2):
            return True
    except OSError:
        return False


async def _until_closed(ports: list[int], log: Path) -> None:
    """Every one of `ports` stops listening within 10 s, or the test fails."""
    deadline = time.monotonic() + 10
    while any(_listening(port) for port in ports):
        if time.monotonic() > deadline:
            pytest.fail(f"a listener on {ports} outlived bidder serve:\n" + tail(log))
        await asyncio.sleep(0.1)


async def test_admin_port_moves_admin_api_and_metrics_off_the_public_listener(
    servers: ServerUrls, clean: None, tmp_path: Path
) -> None:
    port, admin_port = free_port(), free_port()
    env = cli_env(
        servers, PUBLIC_BASE_URL=f"http://127.0.0.1:{port}", LOG_LEVEL="WARNING", RECORD_WRITER="0"
    )
    command = [sys.executable, "-m", "bidder.cli", "serve", "--workers", "1"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--admin-port", str(admin_port)]
    log = tmp_path / "serve.log"
    with running(command, env, log):  # SIGTERM to `bidder serve` at the end
        await until_ready(port, log)
        await until_ready(admin_port, log)
        async with (
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as public,
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{admin_port}", timeout=5) as admin,
        ):
            for path in ADMIN_PATHS:
                refused = await public.get(path, headers=ADMIN)
                assert refused.status_code == 404, (path, refused.text)
                assert set(refused.json()) == {"error"}  # the Core API's shape
                served = await admin.get(path, headers=ADMIN)
                assert served.status_code == 200, (path, served.text)
            # The public interfaces stay on the public listener only.
            assert (await public.get("/docs/openapi-core.json")).status_code == 200
            assert (await admin.get("/docs/openapi-core.json")).status_code == 404
            offer = "/functions/v1/api/offers/request/00000000-0000-0000-0000-000000000001"
            assert (await public.get(offer)).status_code == 401  # served: the key is missing
            assert (await admin.get(offer)).status_code == 404
            for _ in range(5):
                assert (await public.get("/healthz")).status_code == 200
            scrape = await admin.get("/metrics")
            counts = HEALTHZ_COUNT.findall(scrape.text)
            assert counts, scrape.text[:2000]
            assert float(counts[0]) >= 5
    # `running` waited for `bidder serve` to end: the admin listener went with it.
    await _until_closed([admin_port], log)


async def test_an_admin_port_taken_or_equal_to_the_port_is_one_line_and_exit_1(
    servers: ServerUrls,
) -> None:
    """Both ports are checked before either listener starts: nothing is left running."""
    port = free_port()
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # as granian binds
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        admin_port = taken.getsockname()[1]
        for admin in (str(admin_port), str(port)):
            done = await bidder(
                cli_env(servers),
                *("serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"),
                *("--admin-port", admin),
            )
            err = done.stderr.decode()
            assert done.returncode == 1, err
            assert "--admin-port" in err or f"127.0.0.1:{admin_port}" in err
            assert "Traceback" not in err
    assert not _listening(port)


async def test_the_admin_listener_ends_when_bidder_serve_is_killed(
    servers: ServerUrls, clean: None, tmp_path: Path
) -> None:
    """SIGKILL runs no clean-up in `bidder serve`: neither its workers nor the admin listener
    may outlive it (an orphan keeps its port and answers with nobody left to stop it)."""
    port, admin_port = free_port(), free_port()
    log = tmp_path / "serve.log"
    proc = start_serve(servers, port, log, ADMIN_PORT=str(admin_port), RECORD_WRITER="0")
    try:
        await until_ready(port, log)
        await until_ready(admin_port, log)
        proc.kill()
        proc.wait(timeout=5)
        await _until_closed([admin_port, port], log)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever of this test's session is left
