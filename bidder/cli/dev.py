"""`bidder dev`: the whole service on one machine, from nothing, in one command.

Starts real Redis and Postgres from the project's wheels in `.run/dev` (unless REDIS_URL and
DATABASE_URL are set), migrates, loads the demo inventory, makes (or reuses) a demo API key,
prints copy-paste curl examples, and serves on 127.0.0.1. Ports, dev secrets and the demo key
are kept in `.run/dev/dev.json`, so a second run reuses the data and the printed examples.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import secrets
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bidder.auth import hash_key, new_api_key
from bidder.cli.common import CommandFailed, port_number
from bidder.cli.serve import ensure_port_free, serve, warn_public_port
from bidder.demo import (
    EXAMPLE_AUDIENCE,
    EXAMPLE_EXTERNAL_ID,
    EXAMPLE_PUBLISHER,
    EXAMPLE_SCREEN,
    FIZZY_SUMMER,
    demo_document,
)
from bidder.demo_history import load_demo_history
from bidder.observability import configure_logging
from bidder.settings import Settings, load_settings
from store.inventory_repo import create_api_key, import_document
from store.local_servers import LocalServerError, LocalServers, ServersInUse
from store.postgres import CONNECT_ERRORS, Conn, create_pool, describe_connect_error, migrate

DEV_FOLDER = Path(".run/dev")
log = logging.getLogger("bidder.dev")


def _load_state(path: Path) -> dict[str, Any]:
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _save_state(path: Path, state: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state, indent=2) + "\n")
    path.chmod(0o600)  # holds the dev admin token and the demo key


def _start_servers(local: LocalServers, state: dict[str, Any]) -> None:
    """Local servers on the ports of the previous run; on fresh ports when those are taken.
    `local` is claimed already: no other process runs servers of the folder."""
    try:
        local.start(redis_port=state.get("redis_port"), postgres_port=state.get("postgres_port"))
    except LocalServerError:
        if not state.get("redis_port"):
            raise
        print("dev: the previous ports are taken; starting on new ones", file=sys.stderr)
        local.stop(release=False)
        local.start()
    assert local.redis is not None
    assert local.postgres is not None
    state["redis_port"], state["postgres_port"] = local.redis.port, local.postgres.port


def _claim(local: LocalServers) -> None:
    """The folder's servers for this run alone; a second `bidder dev` in the same checkout is
    refused in one line, before it touches anything of the first."""
    try:
        local.claim()
    except ServersInUse as exc:
        who = f"pid {exc.holder}" if exc.holder else "another process"
        raise CommandFailed(
            f"dev: another `bidder dev` ({who}) runs the Redis and Postgres of {DEV_FOLDER}/ "
            "in this checkout; use it (the URLs and key it printed) or stop it (Ctrl-C) first"
        ) from None


class ServerWatch:
    """Watches the servers `bidder dev` started, from a thread of its own: one that exits
    underneath the service (killed, crashed) is said at once in the log, naming the server,
    its pid and its exit code; the service's own requests then fail on it."""

    def __init__(self, local: LocalServers, interval: float = 0.5) -> None:
        self._procs = {
            name: server.proc
            for name, server in (("redis", local.redis), ("postgres", local.postgres))
            if server is not None and server.proc is not None
        }
        self._interval = interval
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dev-server-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Before the servers are stopped on purpose: their exit then is no news."""
        self._stopping.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stopping.wait(self._interval):
            for name, proc in list(self._procs.items()):
                code = proc.poll()
                if code is None or self._stopping.is_set():
                    continue
                del self._procs[name]
                how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
                log.error(
                    "%s (pid %d) exited underneath bidder dev (%s): the service cannot reach "
                    "it; stop bidder dev (Ctrl-C) and start it again",
                    name,
                    proc.pid,
                    how,
                    extra={"server": name, "pid": proc.pid, "returncode": code},
                )


def _dev_environment(state: dict[str, Any], port: int) -> None:
    """Dev defaults for what production must configure; kept across runs in the state file."""
    state.setdefault("admin_token", "dev-admin-" + secrets.token_urlsafe(24))
    state.setdefault("signing_secret", "dev-signing-" + secrets.token_urlsafe(24))
    os.environ.setdefault("ADMIN_TOKEN", state["admin_token"])
    os.environ.setdefault("SIGNING_SECRETS", state["signing_secret"])
    os.environ.setdefault("PUBLIC_BASE_URL", f"http://127.0.0.1:{port}")
    os.environ.setdefault("BIDDER_ENV", "staging")


async def _prepare(settings: Settings, state: dict[str, Any], *, reset_demo: bool) -> str:
    """Migrate, load the demo inventory, and return a working demo API key (the one of the
    previous run while it is still valid)."""
    pool = await create_pool(settings.postgres.url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            return await prepare_on(conn, settings, state, reset_demo=reset_demo)
    finally:
        await pool.close()


async def prepare_on(
    conn: Conn, settings: Settings, state: dict[str, Any], *, reset_demo: bool = False
) -> str:
    """`_prepare` on one connection. The demo inventory is imported when its publisher is not
    there yet (a first run, an emptied database) or with `reset_demo`: a later run keeps what
    the operator changed in it since (a paused campaign stays paused)."""
    await migrate(conn)
    present = await conn.fetchval("SELECT 1 FROM publishers WHERE id = $1", EXAMPLE_PUBLISHER)
    if reset_demo or not present:
        await import_document(conn, demo_document())
        await load_demo_history(conn, settings.redis.url, datetime.now(UTC).date())
    previous = state.get("api_key")
    if isinstance(previous, str) and previous.startswith(settings.server.key_prefix):
        alive = await conn.fetchval(
            """SELECT count(*) FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL
               AND (expires_at IS NULL OR expires_at > now())""",
            hash_key(previous),
        )
        if alive:
            return previous
    api_key, key_hash = new_api_key(settings.server.key_prefix)
    await create_api_key(
        conn,
        EXAMPLE_PUBLISHER,
        key_hash,
        settings.server.key_prefix,
        settings.server.environment,
        None,
    )
    return api_key


def examples(base: str, api_key: str, admin_token: str) -> str:
    """The copy-paste block printed at start (and mirrored in the README)."""
    bid = {
        "id": "auction-1",
        "at": 3,
        "imp": [
            {
                "id": "1",
                "tagid": EXAMPLE_EXTERNAL_ID,
                "video": {"w": 1920, "h": 1080, "mimes": ["video/mp4"]},
                "pmp": {"deals": [{"id": "pmp-deal-1", "bidfloor": 2.0, "at": 3}]},
                "qty": {"multiplier": float(EXAMPLE_AUDIENCE)},
            }
        ],
    }

    def field(name: str) -> str:
        return f"python3 -c 'import json,sys; print(json.load(sys.stdin)[\"{name}\"])'"

    auth = '-H "Authorization: Bearer $API_KEY"'
    post = f'-X POST {auth} -H "Content-Type: application/json"'
    return f"""
  export API_KEY={api_key}
  export ADMIN_TOKEN={admin_token}
  export BASE={base}

  # Core API: an offer for a screen, accept it, confirm the playout
  curl -s {auth} $BASE/functions/v1/api/offers/request/{EXAMPLE_SCREEN}
  OFFER_ID=$(curl -s {auth} $BASE/functions/v1/api/offers/request/{EXAMPLE_SCREEN} \\
      | {field("offer_id")})
  DEAL_ID=$(curl -s {post} -d '{{"action": "accept", "accepted_price_cents": 29.8675}}' \\
      $BASE/functions/v1/api/offers/response/$OFFER_ID | {field("deal_id")})
  curl -s {post} -d '{{"duration_seconds": 15, "completion_rate": 100}}' \\
      $BASE/functions/v1/api/playout/confirm/$DEAL_ID

  # Demo mode (stores nothing)
  curl -s {auth} $BASE/functions/v1/api/offers/request/test-display-test

  # Your screens (publisher key)
  curl -s {auth} "$BASE/functions/v1/api/screens?limit=2"

  # OpenRTB 2.6 (deprecated): a bid for screen {EXAMPLE_EXTERNAL_ID}
  curl -s {post} $BASE/functions/v1/openrtb-2-6/bid \\
      -d '{json.dumps(bid)}'

  # Admin API (operator token)
  curl -s -H "Authorization: Bearer $ADMIN_TOKEN" $BASE/admin/v1/inventory
  curl -s -H "Authorization: Bearer $ADMIN_TOKEN" $BASE/admin/v1/campaigns/{FIZZY_SUMMER}
"""


def _print_start(base: str, api_key: str, settings: Settings, local: LocalServers | None) -> None:
    print(f"\nbidder dev: serving {base} (Ctrl-C stops everything)")
    print(f"demo API key (publisher Metro Transit Media): {api_key}")
    print(f"admin token: {settings.secrets.admin_token}")
    if local is not None:  # what the `bidder` commands need to reach the servers dev started
        assert local.redis is not None
        assert local.postgres is not None
        started = [
            f"{name}={url}"
            for name, url, local_url in (
                ("REDIS_URL", settings.redis.url, local.redis.url),
                ("DATABASE_URL", settings.postgres.url, local.postgres.url),
            )
            if url == local_url  # never an operator's own URL, which may hold a password
        ]
        print("  ".join(started))
    print(examples(base, api_key, settings.secrets.admin_token), flush=True)


def run_dev(port: int, *, reset_demo: bool = False) -> int:
    """Prepare everything, serve until Ctrl-C, then stop the local servers cleanly."""
    local: LocalServers | None = None
    if not (os.environ.get("REDIS_URL") and os.environ.get("DATABASE_URL")):
        local = LocalServers(DEV_FOLDER)
        _claim(local)  # before anything else: a second run touches nothing of the first
    watch: ServerWatch | None = None
    try:
        ensure_port_free("127.0.0.1", port)  # before starting anything: say so at once
        DEV_FOLDER.mkdir(parents=True, exist_ok=True)
        state_file = DEV_FOLDER / "dev.json"
        state = _load_state(state_file)
        if local is not None:
            print(f"dev: starting Redis and Postgres in {DEV_FOLDER}/ ...", file=sys.stderr)
            _start_servers(local, state)
            assert local.redis is not None
            assert local.postgres is not None
            os.environ.setdefault("REDIS_URL", local.redis.url)
            os.environ.setdefault("DATABASE_URL", local.postgres.url)
        _dev_environment(state, port)
        settings = load_settings()
        configure_logging(settings.server.log_level)  # the service's JSON lines, for the watch's
        if local is not None:
            watch = ServerWatch(local)
            watch.start()
        warn_public_port(settings, port)
        try:
            api_key = asyncio.run(_prepare(settings, state, reset_demo=reset_demo))
        except CONNECT_ERRORS as exc:
            raise CommandFailed(
                f"dev: preparing Postgres failed: {describe_connect_error(exc)}"
            ) from None
        state["api_key"] = api_key
        _save_state(state_file, state)
        _print_start(f"http://127.0.0.1:{port}", api_key, settings, local)
        serve(
            "127.0.0.1",
            port,
            1,
            log_level=settings.server.log_level,
            idle_timeout_seconds=settings.limits.idle_timeout_seconds,
            max_connections=settings.limits.max_connections_per_worker,
        )
    finally:
        if watch is not None:
            watch.stop()
        if local is not None:
            if local.redis is not None:
                print("dev: stopping Redis and Postgres", file=sys.stderr)
            local.stop()  # the servers this run started, if any, and the folder's lock
    return 0


def _cmd_dev(args: argparse.Namespace) -> int:
    return run_dev(port=args.port, reset_demo=args.reset_demo)


def register(subparsers: Any) -> None:
    """Add `dev` to the `bidder` command's subparsers."""
    dev = subparsers.add_parser(
        "dev", help="local Redis + Postgres, demo inventory and key, serve on 127.0.0.1"
    )
    dev.add_argument("--port", type=port_number, default=8000)
    dev.add_argument(
        "--reset-demo",
        action="store_true",
        help="import the demo inventory again, undoing changes made to its items",
    )
    dev.set_defaults(func=_cmd_dev)
