"""The `bidder` command: serve, migrate, inventory import/export, API keys, and `dev`.

Every command reads the same validated settings as the service; a settings problem prints every
problem and exits 2, a refused input exits 1, and neither prints a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import logging
import os
import shutil
import socket
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

import msgspec
from granian import Granian
from granian.constants import HTTPModes, Interfaces, Loops
from granian.http import HTTP1Settings
from granian.log import LogLevels

from bidder import cli_admin, cli_records, cli_reports
from bidder.admin import (
    KeyCreated,
    UnknownPublisher,
    check_expiry,
    import_inventory,
    issue_key,
    revoke_key_id,
)
from bidder.cli_common import (
    CommandFailed,
    command_settings,
    formatted_json,
    uuid_argument,
    with_connection,
)
from bidder.cli_records import port_number
from bidder.cpus import process_cpus
from bidder.errors import UNREADABLE_JSON, BadRequest
from bidder.field_problems import decode_document
from bidder.observability import MULTIPROCESS_DIR_ENV, multiprocess_dir
from bidder.runtime import utcnow
from bidder.settings import (
    IDLE_TIMEOUT_SECONDS,
    MAX_CONNECTIONS_PER_WORKER,
    Settings,
    SettingsError,
)
from matching.inventory import InventoryDocument, Problem
from store.errors import REDIS_DOWN
from store.inventory_repo import (
    InventoryRejected,
    export_document,
)
from store.postgres import Conn, migrate

log = logging.getLogger("bidder.cli")
#: Host names of this machine's loopback, where no proxy is assumed in front of the service.
_LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})

EXIT_REFUSED = 1
EXIT_SETTINGS = 2
#: What a shell reports for a process that SIGPIPE ended (128 + 13), as `cat` would exit.
EXIT_BROKEN_PIPE = 141

# -- serving ---------------------------------------------------------------------------------


def serve(
    host: str,
    port: int,
    workers: int,
    *,
    log_level: str = "INFO",
    idle_timeout_seconds: float = IDLE_TIMEOUT_SECONDS,
    max_connections: int = MAX_CONNECTIONS_PER_WORKER,
) -> None:
    """Run the service under granian: ASGI, uvloop, one event loop per worker process, the app
    built by `bidder.app:app_from_env` inside each worker. Callers check the port first
    (`ensure_port_free`), before they start anything of their own.

    HTTP/1.1 only: granian's HTTP/2 detection reads a connection's first bytes without a
    deadline, so a connection that sends nothing would be kept forever; over HTTP/1 a request
    head (the first, or the next on a kept-alive connection) must arrive within
    `idle_timeout_seconds`. `max_connections` bounds the connections a worker serves at once
    (granian's backpressure: a connection holds its permit until it closes); more wait in the
    listen backlog (docs/decisions.md, "Connections are bounded")."""
    Granian(
        "bidder.app:app_from_env",
        factory=True,
        address=host,
        port=port,
        interface=Interfaces.ASGI,
        loop=Loops.uvloop,
        http=HTTPModes.http1,
        http1_settings=HTTP1Settings(
            header_read_timeout=max(1, round(idle_timeout_seconds * 1000)),
            keep_alive=True,
        ),
        workers=workers,
        websockets=False,
        backlog=2048,
        backpressure=max_connections,
        log_access=False,  # the app writes its own JSON access log, with request ids
        log_level=LogLevels(log_level.lower()),
        respawn_failed_workers=True,
        workers_kill_timeout=30,
    ).serve()


def ensure_port_free(host: str, port: int) -> None:
    """CommandFailed when something listens on host:port already. granian binds with
    SO_REUSEPORT, so a second service on a taken port would start and silently take part of
    the traffic; a plain bind (no SO_REUSEPORT) fails on any listener, another bidder included."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no listener
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise CommandFailed(
                f"cannot listen on {host}:{port}: {exc.strerror} (another bidder running? "
                "choose another --port)"
            ) from None


def warn_public_port(settings: Settings, port: int) -> None:
    """One warning line at start when PUBLIC_BASE_URL names another port than the one served:
    the signed loss-notice URLs and the tracking URLs the service hands out are built on it,
    so they would reach another program (or nothing). A URL without a port on a host other
    than this one's loopback is taken to be a proxy's on 80 or 443, and is not warned about."""
    public = urlsplit(settings.public_base_url)
    try:
        named = public.port
    except ValueError:  # not a port number: the URLs are broken anyway, and say so themselves
        return
    if named is None:
        if public.hostname not in _LOOPBACK_NAMES:
            return
        named = 443 if public.scheme == "https" else 80
    if named != port:
        log.warning(
            "PUBLIC_BASE_URL %s names port %d but the service listens on port %d: signed "
            "loss-notice and tracking URLs point elsewhere (unless a proxy forwards port %d)",
            settings.public_base_url,
            named,
            port,
            named,
            extra={"public_base_url": settings.public_base_url, "public_port": named, "port": port},
        )


def _cmd_serve(args: argparse.Namespace) -> int:
    settings = command_settings(secrets=True)
    workers = args.workers or process_cpus()  # the cgroup quota and affinity, not the host's
    ensure_port_free(args.host, args.port)  # before touching anything a running one uses
    warn_public_port(settings, args.port)
    shared = _share_metrics() if workers > 1 or multiprocess_dir() else None
    try:
        serve(
            args.host,
            args.port,
            workers,
            log_level=settings.log_level,
            idle_timeout_seconds=settings.idle_timeout_seconds,
            max_connections=settings.max_connections_per_worker,
        )
    finally:
        if shared is not None:
            shutil.rmtree(shared, ignore_errors=True)
    return 0


def _share_metrics() -> str:
    """A Prometheus multiprocess folder of this run's own, for its workers: inside
    PROMETHEUS_MULTIPROC_DIR when that is set, else in the temporary folder. Figures of an
    earlier run, or of another service sharing the folder, never add up with this run's."""
    base = multiprocess_dir()
    if base is not None:
        Path(base).mkdir(parents=True, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="bidder-metrics-", dir=base)
    os.environ[MULTIPROCESS_DIR_ENV] = folder
    return folder


# -- Postgres commands ----------------------------------------------------------------------


def _cmd_migrate(_: argparse.Namespace) -> int:
    applied = asyncio.run(with_connection(command_settings(redis=False), migrate))
    print("applied: " + ", ".join(applied) if applied else "schema is up to date")
    return 0


class _ProgressLine:
    """Progress of an import on a terminal: one line per list, rewritten in place."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.live = out.isatty()

    def __call__(self, kind: str, done: int, total: int) -> None:
        if self.live:
            end = "\n" if done >= total else ""
            self.out.write(f"\r  {kind:<14} {done:>9,} / {total:,}{end}")
            self.out.flush()


def _describe(problem: Problem) -> str:
    where = f"{problem.list}[{problem.index}]"
    if problem.id:
        where += f" (id {problem.id})"
    return f"{where} {problem.field}: {problem.message}"


def read_document(path: Path) -> InventoryDocument:
    """An inventory document from a JSON file ("-" for stdin); InventoryRejected listing every
    item of the wrong shape, or CommandFailed when it is no inventory document at all."""
    try:
        raw = sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()
    except OSError as exc:
        raise CommandFailed(f"cannot read {path}: {exc.strerror}") from None
    try:
        return decode_document(raw)
    except msgspec.ValidationError as exc:
        raise CommandFailed(f"{path}: invalid inventory document: {exc}") from None
    except UNREADABLE_JSON as exc:
        raise CommandFailed(f"{path}: not valid JSON: {exc}") from None


def _cmd_import(args: argparse.Namespace) -> int:
    settings = command_settings(redis=False)
    started = time.monotonic()
    try:
        counts = _import(settings, Path(args.file))
    except InventoryRejected as exc:  # items of the wrong shape, or the inventory rules
        for problem in exc.problems:
            print(_describe(problem), file=sys.stderr)
        raise CommandFailed(
            f"{len(exc.problems)} problem(s) in {args.file}; nothing was imported"
        ) from None
    summary = ", ".join(f"{n:,} {kind}" for kind, n in counts.items() if n)
    print(f"imported {summary or 'nothing'} in {time.monotonic() - started:.1f}s")
    return 0


def _import(settings: Settings, path: Path) -> dict[str, int]:
    doc = read_document(path)
    progress = _ProgressLine(sys.stderr)
    if progress.live:
        items = sum(len(getattr(doc, f)) for f in doc.__struct_fields__)
        sys.stderr.write(f"checking {items:,} items...\n")

    async def work(conn: Conn) -> dict[str, int]:
        return await import_inventory(conn, doc, progress)

    return asyncio.run(with_connection(settings, work))


def _cmd_export(args: argparse.Namespace) -> int:
    settings = command_settings(redis=False)

    async def work(conn: Conn) -> InventoryDocument:
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            return await export_document(conn)

    doc = asyncio.run(with_connection(settings, work))
    data = formatted_json(doc)
    if args.file in (None, "-"):
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        Path(args.file).write_bytes(data)
        print(f"exported {len(doc.screens):,} screens to {args.file}", file=sys.stderr)
    return 0


def _cmd_keys_create(args: argparse.Namespace) -> int:
    settings = command_settings(redis=False)
    expires_at: datetime | None = args.expires_at
    try:  # the admin API's rules: in the future, and within the year 9999 once in UTC
        check_expiry(expires_at, utcnow())
    except BadRequest as exc:
        raise CommandFailed(f"--{exc.message.replace('_', '-')}") from None

    async def work(conn: Conn) -> KeyCreated:
        try:
            return await issue_key(conn, settings, args.publisher, expires_at)
        except UnknownPublisher:
            raise CommandFailed(f"no publisher with id {args.publisher}") from None

    created = asyncio.run(with_connection(settings, work))
    print(f"key_id:     {created.key_id}")
    print(f"api_key:    {created.api_key}")
    print(f"expires_at: {created.expires_at or 'never'}")
    print("The key is shown only this once; it is stored as a hash.", file=sys.stderr)
    return 0


def _cmd_keys_revoke(args: argparse.Namespace) -> int:
    settings = command_settings(redis=False)

    async def work(conn: Conn) -> bool:
        return await revoke_key_id(conn, args.key_id)

    if not asyncio.run(with_connection(settings, work)):
        raise CommandFailed(f"no API key with id {args.key_id}")
    print(f"revoked {args.key_id}; every worker refuses it within 2 seconds")
    return 0


def _cmd_dev(args: argparse.Namespace) -> int:
    from bidder.dev import run_dev  # noqa: PLC0415 - dev only

    return run_dev(port=args.port, reset_demo=args.reset_demo)


# -- argument parsing ------------------------------------------------------------------------


def _timestamp(value: str) -> datetime:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO 8601 time: {value!r} (e.g. 2027-01-01T00:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{value!r} needs a time zone (e.g. Z or +02:00)")
    return moment


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {value!r}")
    return int(value)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bidder",
        description="Real-time DOOH bidder: Core offer API and legacy OpenRTB 2.6 bridge.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve_cmd = commands.add_parser("serve", help="serve HTTP with granian (production)")
    serve_cmd.add_argument("--host", default="0.0.0.0")  # noqa: S104 - a server listens
    serve_cmd.add_argument("--port", type=port_number, default=8000)
    serve_cmd.add_argument(
        "--workers",
        type=_positive,
        default=None,
        help="worker processes (default: the CPUs this process may use: affinity, cgroup quota)",
    )
    serve_cmd.set_defaults(func=_cmd_serve)

    commands.add_parser("migrate", help="apply the pending SQL migrations").set_defaults(
        func=_cmd_migrate
    )

    inventory = commands.add_parser("inventory", help="import or export the inventory document")
    inventory_cmds = inventory.add_subparsers(dest="action", required=True, metavar="ACTION")
    import_cmd = inventory_cmds.add_parser("import", help="bulk, idempotent upsert from FILE")
    import_cmd.add_argument("file", metavar="FILE", help="JSON inventory document, - for stdin")
    import_cmd.set_defaults(func=_cmd_import)
    export_cmd = inventory_cmds.add_parser("export", help="write the document to FILE or stdout")
    export_cmd.add_argument("file", metavar="FILE", nargs="?", default=None)
    export_cmd.set_defaults(func=_cmd_export)

    keys = commands.add_parser("keys", help="publisher API keys")
    keys_cmds = keys.add_subparsers(dest="action", required=True, metavar="ACTION")
    create_cmd = keys_cmds.add_parser("create", help="make a key; it is printed once")
    create_cmd.add_argument("--publisher", type=uuid_argument, required=True, metavar="ID")
    create_cmd.add_argument("--expires-at", type=_timestamp, default=None, metavar="ISO")
    create_cmd.set_defaults(func=_cmd_keys_create)
    revoke_cmd = keys_cmds.add_parser("revoke", help="revoke a key by its key_id")
    revoke_cmd.add_argument("key_id", type=uuid_argument, metavar="KEY_ID")
    revoke_cmd.set_defaults(func=_cmd_keys_revoke)

    dev = commands.add_parser(
        "dev", help="local Redis + Postgres, demo inventory and key, serve on 127.0.0.1"
    )
    dev.add_argument("--port", type=port_number, default=8000)
    dev.add_argument(
        "--reset-demo",
        action="store_true",
        help="import the demo inventory again, undoing changes made to its items",
    )
    dev.set_defaults(func=_cmd_dev)

    cli_admin.register(commands)
    cli_records.register(commands)
    cli_reports.register(commands)
    _register_bench(commands)
    return parser


def _register_bench(commands: Any) -> None:
    """`bidder bench` lives in the repository's bench/ (it needs the dev tools and is not part of
    the wheel): offered when the checkout has it, absent from an installed wheel."""
    if importlib.util.find_spec("bench") is None:
        return
    bench_cli = importlib.import_module("bench.cli")
    bench_cli.register(commands)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except SettingsError as exc:
        print("bidder: the settings are not valid:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        return EXIT_SETTINGS
    except CommandFailed as exc:
        print(f"bidder: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except BrokenPipeError:  # the reader left (`bidder inventory export | head`): no message
        # Python flushes stdout again at exit, which would fail the same way: point it nowhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except REDIS_DOWN as exc:  # Redis unreachable, or a file that cannot be written (OSError)
        print(f"bidder: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
