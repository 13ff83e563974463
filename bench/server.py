"""The system under test: real Redis and Postgres, a seeded inventory, publisher API keys, and
ONE granian worker pinned to CPU 0 (the load generators run on CPU 1).

Redis and Postgres are started in `.run/bench` through store.local_servers unless REDIS_URL and
DATABASE_URL are set. Each inventory variant gets its own Postgres database and Redis logical
database, so the full run's records stay put for the invariants while the small variant runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx
import redis

from bidder.auth import hash_key, new_api_key
from bidder.settings import Settings, load_settings
from matching.inventory import InventoryDocument
from store.inventory_repo import create_api_key, import_document
from store.local_servers import LocalServers, free_port, stop_process
from store.postgres import migrate

ADMIN_TOKEN = "bench-admin-token-0123456789abcdef"
SIGNING_SECRETS = "bench-signing-secret-0123456789abcdef"
KEY_PREFIX = "dk_stg_"
SERVER_CPU = "0"
LOADGEN_CPU = "1"
READY_TIMEOUT_S = 120.0


def in_process_settings(seeded: Seeded) -> Settings:
    """Settings for the app run inside a measuring process (bench.profile, bench.inprocess):
    no record writer, offers that outlive the run."""
    return load_settings(
        {
            "DATABASE_URL": seeded.database_url,
            "REDIS_URL": seeded.redis_url,
            "ADMIN_TOKEN": ADMIN_TOKEN,
            "SIGNING_SECRETS": SIGNING_SECRETS,
            "PUBLIC_BASE_URL": "http://bench.local",
            "OFFER_TTL_SECONDS": "1800",
            "OFFER_HASH": "lean",
            "COUNT_DAY_RESERVATIONS": "0",
            "LOG_LEVEL": "WARNING",
            "RECORD_WRITER": "0",
        }
    )


def taskset(cpu: str) -> list[str]:
    """`taskset -c <cpu>` when taskset exists, else nothing (the run then says it is unpinned)."""
    return ["taskset", "-c", cpu] if shutil.which("taskset") else []


@dataclass
class Backends:
    """Where Redis and Postgres are; `local` when this run started them."""

    redis_url: str
    database_url: str
    local: LocalServers | None = None

    def stop(self) -> None:
        if self.local is not None:
            self.local.stop()


def start_backends(root: Path) -> Backends:
    redis_url, database_url = os.environ.get("REDIS_URL"), os.environ.get("DATABASE_URL")
    if redis_url and database_url:
        return Backends(redis_url, database_url)
    local = LocalServers(root)
    local.start()
    assert local.redis is not None
    assert local.postgres is not None
    return Backends(local.redis.url, local.postgres.url, local)


def _with_path(url: str, path: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))


async def fresh_database(admin_url: str, name: str) -> str:
    """Drop and create database `name` on the server of `admin_url`; return its URL."""
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return _with_path(admin_url, f"/{name}")


def fresh_redis(base_url: str, db: int) -> str:
    url = _with_path(base_url, f"/{db}")
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    finally:
        client.close()
    return url


def compact_redis(redis_url: str, timeout_s: float = 120.0) -> bool:
    """Rewrite Redis' append-only file now and wait until it is done; False when AOF is off.

    Redis rewrites its AOF by itself when the file has doubled: a fork, and a child busy on a
    core for a second or more. On this 2-core machine that child takes the worker's or the load
    generator's core, and one rewrite inside a 10-second latency run is its p99 (50 ms measured
    against 6-7 ms without). The bench compacts before the peak rounds and before the paced
    runs, so no automatic rewrite is due during them."""
    client = redis.Redis.from_url(redis_url)
    try:
        if not client.info("persistence").get("aof_enabled"):
            return False
        _wait_for_rewrite(client, timeout_s)  # one may be running already
        client.bgrewriteaof()
        _wait_for_rewrite(client, timeout_s)
        return True
    finally:
        client.close()


def _wait_for_rewrite(client: redis.Redis, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        info = client.info("persistence")
        if not info.get("aof_rewrite_in_progress") and not info.get("aof_rewrite_scheduled"):
            return
        if time.monotonic() > deadline:
            raise RuntimeError("Redis did not finish rewriting its append-only file in time")
        time.sleep(0.1)


@dataclass
class Seeded:
    """A migrated, seeded database and the plain API key of every publisher (by publisher id)."""

    database_url: str
    redis_url: str
    keys: dict[str, str]
    seconds: float
    #: REDIS_MODE of the worker and the writer: `cluster` when redis_url names a cluster's nodes.
    redis_mode: str = "single"


async def seed_database(
    database_url: str,
    redis_url: str,
    doc: InventoryDocument,
    reuse_keys: dict[str, str] | None = None,
) -> Seeded:
    """Migrate, import `doc`, and give every publisher a key (`reuse_keys`: the same plain keys
    as another variant, so one request file serves both)."""
    started = time.monotonic()
    conn = await asyncpg.connect(database_url)
    try:
        await migrate(conn)
        await import_document(conn, doc)
        keys = {}
        for publisher in doc.publishers:
            if reuse_keys and publisher.id in reuse_keys:
                key = reuse_keys[publisher.id]
                key_hash = hash_key(key)
            else:
                key, key_hash = new_api_key(KEY_PREFIX)
            await create_api_key(conn, publisher.id, key_hash, KEY_PREFIX, "staging", None)
            keys[publisher.id] = key
    finally:
        await conn.close()
    return Seeded(database_url, redis_url, keys, time.monotonic() - started)


@dataclass
class Writer:
    """A standalone `bidder writer` process on the load generator's core."""

    seeded: Seeded
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = Worker(self.seeded, self.log_path).environment()
        command = [*taskset(LOADGEN_CPU), sys.executable, "-m", "bidder.cli", "writer"]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                command,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def stop(self) -> None:
        if self.proc is None:
            return
        # Resumed first: a writer left held (a run interrupted inside `held`) would not act on
        # SIGTERM and would be killed only after the whole grace period.
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGCONT)
        stop_process(self.proc, signal.SIGTERM, 30)
        self.proc = None

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """The writer stopped (SIGSTOP) for the block, then resumed: records wait in their
        durable queue meanwhile, and it writes them afterwards."""
        proc = self.proc
        if proc is None:
            yield
            return
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(proc.pid, signal.SIGCONT)


def process_tree(root_pid: int) -> list[int]:
    """`root_pid` and every process below it (from /proc; those gone meanwhile left out)."""
    found: list[int] = []
    pending = [root_pid]
    while pending:
        pid = pending.pop()
        found.append(pid)
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                children = (task / "children").read_text().split()
                pending.extend(int(c) for c in children)
    return found


@dataclass
class Worker:
    """One granian worker serving bidder.http.app:app_from_env."""

    seeded: Seeded
    log_path: Path
    port: int = field(default_factory=free_port)
    env_overrides: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    pinned: bool = False
    writer: Writer | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        return {
            **os.environ,
            "DATABASE_URL": self.seeded.database_url,
            "REDIS_URL": self.seeded.redis_url,
            "REDIS_MODE": self.seeded.redis_mode,
            "ADMIN_TOKEN": ADMIN_TOKEN,
            "SIGNING_SECRETS": SIGNING_SECRETS,
            "BIDDER_ENV": "staging",
            "PUBLIC_BASE_URL": self.base_url,
            # Offers outlive the run, so the expiry sweeper does not compete with the load.
            "OFFER_TTL_SECONDS": "1800",
            # The lower Redis CPU per request: no worker of an earlier release shares this Redis.
            "OFFER_HASH": "lean",
            "COUNT_DAY_RESERVATIONS": "0",
            "RECORD_WRITER": "1",
            "LOG_LEVEL": "WARNING",
            **self.env_overrides,
        }

    def command(self) -> list[str]:
        prefix = taskset(SERVER_CPU)
        self.pinned = bool(prefix)
        return [
            *prefix,
            sys.executable,
            "-m",
            "granian",
            "--interface",
            "asgi",
            "--loop",
            "uvloop",
            "--workers",
            "1",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--factory",
            "bidder.http.app:app_from_env",
        ]

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                env=self.environment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.wait_ready()

    def wait_ready(self) -> dict[str, object]:
        """Wait for /readyz 200 with the inventory loaded; raise with the log tail if not."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        last = "no answer"
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.proc is not None and self.proc.poll() is not None:
                    break
                with contextlib.suppress(httpx.HTTPError):
                    answer = client.get(self.base_url + "/readyz")
                    last = f"{answer.status_code} {answer.text[:300]}"
                    if answer.status_code == 200:
                        body: dict[str, object] = answer.json()
                        return body
                time.sleep(0.2)
        tail = self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""
        self.stop()
        raise RuntimeError(f"the bench worker did not become ready ({last}):\n{tail}")

    def worker_pids(self) -> list[int]:
        """Processes of the granian tree below the launcher (the worker holds the inventory)."""
        return [] if self.proc is None else process_tree(self.proc.pid)

    def rss_kib(self) -> dict[int, tuple[int, int]]:
        """VmRSS and VmHWM (peak) in KiB of every process of the tree, by pid."""
        sizes = {}
        for pid in self.worker_pids():
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            fields = dict(
                line.split(":", 1) for line in status.splitlines() if line.startswith("Vm")
            )
            rss = int(fields.get("VmRSS", "0 kB").split()[0])
            hwm = int(fields.get("VmHWM", "0 kB").split()[0])
            sizes[pid] = (rss, hwm)
        return sizes

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None
        if self.writer is not None:
            self.writer.stop()


def seed(
    database_url: str,
    redis_url: str,
    doc: InventoryDocument,
    reuse_keys: dict[str, str] | None = None,
) -> Seeded:
    return asyncio.run(seed_database(database_url, redis_url, doc, reuse_keys))
