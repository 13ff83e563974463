"""The project's own Redis and Postgres (store/local_servers.py): a run that was killed leaves
them running in sessions of their own; the next run must stop those and start its own, keeping
the data, so that what it stops at exit is what it started (else a restart would silently
reach the old servers, fail its own start unseen, and stop nothing at exit)."""

from __future__ import annotations

import socket
from pathlib import Path

import asyncpg
import pytest
import redis

from store.local_servers import LocalServerError, PostgresServer, RedisServer, free_port


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.5).close()
    except OSError:
        return False
    return True


def test_a_redis_left_running_by_a_killed_run_is_replaced_with_its_data(tmp_path: Path) -> None:
    port = free_port()
    left = RedisServer(tmp_path / "redis", port)
    left.start()
    orphan = left.proc
    assert orphan is not None
    redis.Redis(port=port).set("kept", "1")
    left.proc = None  # the run was killed: nobody will stop it
    again = RedisServer(tmp_path / "redis", port)
    try:
        again.start()
        assert orphan.wait(timeout=10) == 0  # shut down cleanly
        assert again.proc is not None
        assert again.proc.poll() is None
        assert redis.Redis(port=port).get("kept") == b"1"
    finally:
        again.stop()
    assert not _listening(port)


def test_a_program_of_another_folder_on_the_port_is_an_error_not_used(tmp_path: Path) -> None:
    port = free_port()
    other = RedisServer(tmp_path / "other", port)
    other.start()
    try:
        with pytest.raises(LocalServerError, match="taken by another program"):
            RedisServer(tmp_path / "ours", port).start()
    finally:
        other.stop()


async def test_a_postgres_left_running_by_a_killed_run_is_replaced_with_its_data(
    tmp_path: Path,
) -> None:
    port = free_port()
    left = PostgresServer(tmp_path / "pg", port)
    left.start()
    orphan = left.proc
    assert orphan is not None
    conn = await asyncpg.connect(left.url)
    await conn.execute("CREATE TABLE kept (x int); INSERT INTO kept VALUES (7)")
    await conn.close()
    left.proc = None  # the run was killed: nobody will stop it
    again = PostgresServer(tmp_path / "pg", port)
    try:
        again.start()
        assert orphan.wait(timeout=30) == 0  # a fast shutdown, not a crash
        assert again.proc is not None
        assert again.proc.poll() is None
        conn = await asyncpg.connect(again.url)
        assert await conn.fetchval("SELECT x FROM kept") == 7
        await conn.close()
    finally:
        again.stop()
    assert not _listening(port)
