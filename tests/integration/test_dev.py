"""`bidder dev`'s preparation against the session's Postgres: the demo inventory is imported on
the first run only (or on request), so an operator's changes to it survive a restart, and the
demo key of the previous run is reused while it works. And `bidder dev` itself, twice in one
checkout: the second is refused and touches nothing of the first."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import asyncpg
import httpx
import pytest
import redis

from bidder.cli.dev import prepare_on
from bidder.demo import EXAMPLE_PUBLISHER
from bidder.settings import Settings
from store.local_servers import free_port


async def _campaign_status(conn: asyncpg.Connection[Any], campaign_id: str) -> str:
    status: str = await conn.fetchval("SELECT status FROM campaigns WHERE id = $1", campaign_id)
    return status


async def test_a_second_run_keeps_changes_to_the_demo_inventory_until_reset(
    settings: Settings, migrated: str, clean: None
) -> None:
    state: dict[str, Any] = {}
    conn = await asyncpg.connect(migrated)
    try:
        key = await prepare_on(conn, settings, state)
        assert await conn.fetchval(
            "SELECT count(*) FROM publishers WHERE id = $1", EXAMPLE_PUBLISHER
        )
        campaign = await conn.fetchval(
            "SELECT id::text FROM campaigns WHERE status = 'active' ORDER BY id LIMIT 1"
        )
        await conn.execute("UPDATE campaigns SET status = 'paused' WHERE id = $1", campaign)

        state["api_key"] = key
        assert await prepare_on(conn, settings, state) == key  # the same key, still valid
        assert await _campaign_status(conn, campaign) == "paused"  # the operator's change kept

        await prepare_on(conn, settings, state, reset_demo=True)
        assert await _campaign_status(conn, campaign) == "active"  # the demo document again
    finally:
        await conn.close()


# -- a second `bidder dev` in the same checkout ----------------------------------------------

#: What `bidder dev` must not inherit from the test session: it starts servers of its own.
_SESSION_SETTINGS = ("REDIS_URL", "DATABASE_URL", "ADMIN_TOKEN", "SIGNING_SECRETS")


def _dev_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SESSION_SETTINGS}
    env.pop("PUBLIC_BASE_URL", None)
    env["LOG_LEVEL"] = "INFO"
    return env


def _dev(checkout: Path, port: int, out: IO[bytes] | int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "bidder.cli", "dev", "--port", str(port)],
        cwd=checkout,
        env=_dev_env(),
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT if out != subprocess.PIPE else subprocess.PIPE,
        start_new_session=True,
    )


def _ready(port: int) -> dict[str, Any] | None:
    try:
        answer = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2)
    except httpx.HTTPError:
        return None
    body: dict[str, Any] = answer.json()
    return body if answer.status_code == 200 else None


def _until(check: Callable[[], Any], what: str, log: Path, within: float = 120) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    pytest.fail(f"{what} within {within}s:\n{log.read_text(errors='replace')[-4000:]}")


def _server_pids(folder: Path) -> tuple[int, int]:
    """The pids of the Redis and the Postgres that `bidder dev` runs in `folder`."""
    state = json.loads((folder / "dev.json").read_text())
    redis_pid = int(redis.Redis(port=state["redis_port"]).info("server")["process_id"])
    postmaster = (folder / "postgres" / "data" / "postmaster.pid").read_text().split()
    return redis_pid, int(postmaster[0])


def _log_lines(log: Path) -> list[dict[str, Any]]:
    lines = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                lines.append(json.loads(line))
    return lines


def _stop_all(devs: list[subprocess.Popen[bytes]], folder: Path) -> None:
    """Stop every `bidder dev` started (Ctrl-C), and whatever of their servers outlives them."""
    for dev in devs:
        if dev.poll() is None:
            os.killpg(dev.pid, signal.SIGINT)
            try:
                dev.wait(90)
            except subprocess.TimeoutExpired:
                os.killpg(dev.pid, signal.SIGKILL)
                dev.wait()
    with contextlib.suppress(OSError, ValueError, KeyError, redis.RedisError):
        redis_pid, postgres_pid = _server_pids(folder)
        os.kill(postgres_pid, signal.SIGINT)
        os.kill(redis_pid, signal.SIGTERM)


def test_a_second_dev_in_the_same_checkout_is_refused_and_touches_nothing_of_the_first(
    tmp_path: Path,
) -> None:
    """Two `bidder dev` in one checkout: the second says why in one line and exits 1, before
    it touches anything; the first keeps serving on the same Redis and Postgres processes, also
    after a Ctrl-C to the second. When the first's Redis then dies, its log says so."""
    checkout = tmp_path / "checkout with spaces"
    checkout.mkdir()
    folder = checkout / ".run" / "dev"
    log = tmp_path / "first.log"
    first_port, second_port = free_port(), free_port()
    with log.open("wb") as out:
        first = _dev(checkout, first_port, out)
    devs = [first]
    try:
        ready = _until(lambda: _ready(first_port), "the first bidder dev was not ready", log)
        assert ready["redis"] == "ok"
        pids = _server_pids(folder)

        second = _dev(checkout, second_port, subprocess.PIPE)
        devs.append(second)
        _, err = second.communicate(timeout=60)
        assert second.returncode == 1, err
        lines = err.decode().strip().splitlines()
        assert len(lines) == 1, err
        assert f"pid {first.pid}" in lines[0]
        assert "bidder dev" in lines[0]

        interrupted = _dev(checkout, second_port, subprocess.DEVNULL)
        devs.append(interrupted)
        time.sleep(0.5)  # starting up: Ctrl-C lands wherever it is
        os.killpg(interrupted.pid, signal.SIGINT)
        interrupted.wait(60)

        assert _ready(first_port) is not None
        assert _server_pids(folder) == pids  # the same processes, neither stopped nor replaced
        assert _ready(second_port) is None  # the second serves nothing

        os.kill(pids[0], signal.SIGKILL)  # the first's Redis dies underneath it

        def said() -> list[dict[str, Any]]:
            lines = _log_lines(log)
            watched = [x for x in lines if x.get("logger") == "bidder.dev"]
            noticed = [x for x in lines if x.get("message", "").startswith("Redis unreachable")]
            return watched + noticed if watched and noticed else []

        lines = _until(said, "the log did not say Redis died", log, within=30)
        watched = lines[0]
        assert watched["level"] == "ERROR"
        assert watched["server"] == "redis"
        assert watched["pid"] == pids[0]
        assert watched["returncode"] == -signal.SIGKILL
        assert "redis" in watched["message"]
        assert "signal 9" in watched["message"]
        assert lines[-1]["level"] == "ERROR"
        assert lines[-1]["logger"] == "bidder.runtime"
    finally:
        _stop_all(devs, folder)
    assert first.returncode == 0, log.read_text(errors="replace")[-4000:]
