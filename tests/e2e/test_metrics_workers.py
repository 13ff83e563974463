"""`bidder serve --workers 2`: /metrics shows the host's figures, every worker's requests
summed, whichever worker answers the scrape (Prometheus would read a figure that jumps between
workers as counter resets)."""

from __future__ import annotations

import asyncio
import re
import sys
import time
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest

from tests.support.cli import cli_env
from tests.support.processes import free_port, running, tail
from tests.support.servers import ServerUrls

HEALTHZ_COUNT = re.compile(
    r'^http_requests_total\{method="GET",route="/healthz",status="200"\} ([0-9.e+]+)$', re.M
)


async def test_metrics_sum_every_workers_requests(
    servers: ServerUrls, clean: None, tmp_path: Path
) -> None:
    port = free_port()
    env = cli_env(
        servers,
        PUBLIC_BASE_URL=f"http://127.0.0.1:{port}",
        RECORD_WRITER="0",
        LOG_LEVEL="WARNING",
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "metrics"),
    )
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "counter_999999.db").write_bytes(b"stale")  # an earlier run's
    log = tmp_path / "serve.log"
    with _bidder_serve(env, port, log):
        sent = 0
        limits = httpx.Limits(max_keepalive_connections=0)  # a new connection, any worker
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", timeout=5, limits=limits
        ) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    sent += 1
                    if (await client.get("/healthz")).status_code == 200:
                        break
                except httpx.HTTPError:
                    sent -= 1  # never reached a worker
                if time.monotonic() > deadline:
                    pytest.fail("the server did not start:\n" + tail(log))
                await asyncio.sleep(0.2)
            for _ in range(60):
                assert (await client.get("/healthz")).status_code == 200
                sent += 1
            await asyncio.sleep(0.5)
            seen = set()
            for _ in range(8):
                scrape = await client.get("/metrics")
                assert scrape.status_code == 200
                counts = HEALTHZ_COUNT.findall(scrape.text)
                assert len(counts) == 1, scrape.text[:2000]
                seen.add(float(counts[0]))
        assert seen == {float(sent)}


def _bidder_serve(env: dict[str, str], port: int, log: Path) -> AbstractContextManager[None]:
    command = [sys.executable, "-m", "bidder.cli", "serve", "--workers", "2"]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    return running(command, env, log)
