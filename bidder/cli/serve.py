"""`bidder serve` (the service under granian) and `bidder migrate` (the schema it serves from).

`register(subparsers)` adds both commands; each sets `func(args) -> int` (the exit code).
`serve`, `ensure_port_free` and `warn_public_port` are `bidder dev`'s too.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from granian import Granian
from granian.constants import HTTPModes, Interfaces, Loops
from granian.http import HTTP1Settings
from granian.log import LogLevels

from bidder.cli.common import CommandFailed, command_settings, port_number, with_connection
from bidder.cpus import process_cpus
from bidder.observability import MULTIPROCESS_DIR_ENV, multiprocess_dir
from bidder.runtime.rate_limit import WORKERS_ENV
from bidder.settings import IDLE_TIMEOUT_SECONDS, MAX_CONNECTIONS_PER_WORKER, Settings
from store.postgres import migrate

log = logging.getLogger("bidder.cli")
#: Host names of this machine's loopback, where no proxy is assumed in front of the service.
_LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
#: The factories granian runs in each worker: every route (or the public ones), and the admin
#: listener's (`--admin-port`).
MAIN_APP = "bidder.http.app:app_from_env"
ADMIN_APP = "bidder.http.app:admin_app_from_env"
#: How long the admin listener may take to stop after the public one did (granian's own
#: workers_kill_timeout, and a little more).
_ADMIN_STOP_SECONDS = 35.0


def serve(
    host: str,
    port: int,
    workers: int,
    *,
    log_level: str = "INFO",
    idle_timeout_seconds: float = IDLE_TIMEOUT_SECONDS,
    max_connections: int = MAX_CONNECTIONS_PER_WORKER,
    target: str = MAIN_APP,
) -> None:
    """Run the service under granian: ASGI, uvloop, one event loop per worker process, the app
    built by `bidder.http.app:app_from_env` inside each worker. Callers check the port first
    (`ensure_port_free`), before they start anything of their own.

    HTTP/1.1 only: granian's HTTP/2 detection reads a connection's first bytes without a
    deadline, so a connection that sends nothing would be kept forever; over HTTP/1 a request
    head (the first, or the next on a kept-alive connection) must arrive within
    `idle_timeout_seconds`. `max_connections` bounds the connections a worker serves at once
    (granian's backpressure: a connection holds its permit until it closes); more wait in the
    listen backlog (docs/decisions.md, "Connections are bounded")."""
    Granian(
        target,
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
    public = urlsplit(settings.server.public_base_url)
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
            settings.server.public_base_url,
            named,
            port,
            named,
            extra={
                "public_base_url": settings.server.public_base_url,
                "public_port": named,
                "port": port,
            },
        )


def _cmd_serve(args: argparse.Namespace) -> int:
    settings = command_settings(secrets=True)
    if args.admin_listener:  # the admin listener `--admin-port` started (below)
        _end_with_parent(args.admin_parent)
        _serve_with(settings, args.host, args.port, 1, ADMIN_APP)
        return 0
    workers = args.workers or process_cpus()  # the cgroup quota and affinity, not the host's
    admin_port: int = args.admin_port or settings.perimeter.admin_port
    admin_host: str = args.admin_host or args.host
    ensure_port_free(args.host, args.port)  # before touching anything a running one uses
    if admin_port:
        if admin_port == args.port:
            raise CommandFailed("--admin-port must differ from --port")
        ensure_port_free(admin_host, admin_port)
    warn_public_port(settings, args.port)
    # Each worker takes its share of a per-key rate limit (bidder.runtime.rate_limit).
    os.environ[WORKERS_ENV] = str(workers)
    shared = _share_metrics() if workers > 1 or multiprocess_dir() or admin_port else None
    admin: subprocess.Popen[bytes] | None = None
    try:
        if admin_port:
            # The admin API and /metrics move to their own listener: off the public one.
            os.environ["PUBLIC_ADMIN"] = "0"
            os.environ["PUBLIC_METRICS"] = "0"
            admin = _start_admin_listener(admin_host, admin_port)
        _serve_with(settings, args.host, args.port, workers, MAIN_APP)
    finally:
        if admin is not None:
            _stop(admin)
        if shared is not None:
            shutil.rmtree(shared, ignore_errors=True)
    return 0


def _serve_with(settings: Settings, host: str, port: int, workers: int, target: str) -> None:
    serve(
        host,
        port,
        workers,
        log_level=settings.server.log_level,
        idle_timeout_seconds=settings.limits.idle_timeout_seconds,
        max_connections=settings.limits.max_connections_per_worker,
        target=target,
    )


def _start_admin_listener(host: str, port: int) -> subprocess.Popen[bytes]:
    """The admin listener: a granian server of its own (granian serves one address per
    server), one worker, in a child process that inherits this one's environment, the
    metrics folder included, so its `/metrics` shows every worker's figures. It stays in this
    process group: a terminal's Ctrl-C reaches both, and `_stop` stops it after the public
    listener (docs/decisions.md, "The admin listener")."""
    command = [sys.executable, "-m", "bidder.cli", "serve", "--admin-listener"]
    command += ["--admin-parent", str(os.getpid()), "--host", host, "--port", str(port)]
    log.info("admin listener on %s:%d", host, port, extra={"admin_port": port})
    child = subprocess.Popen(command)  # noqa: S603 - our own interpreter and module
    threading.Thread(target=_watch, args=(child, port), daemon=True).start()
    return child


#: prctl(2) option: the signal the kernel sends this process when its parent ends.
_PR_SET_PDEATHSIG = 1


def _end_with_parent(parent_pid: int) -> None:
    """The admin listener stops when `bidder serve` ends however it ends (SIGKILL included,
    which runs no `finally`): on Linux the kernel sends it SIGTERM, granian's graceful stop.
    A parent gone before the request took effect is caught by comparing the parent pid."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if parent_pid and os.getppid() != parent_pid:
        raise CommandFailed("bidder serve ended before its admin listener started")


def _watch(child: subprocess.Popen[bytes], port: int) -> None:
    """One ERROR line when the admin listener ends while `bidder serve` runs (a crash, a
    signal of its own): the public listener goes on, and the operator learns why the admin
    port stopped answering."""
    status = child.wait()
    if not _stopping.is_set():
        log.error(
            "the admin listener on port %d exited with status %d",
            port,
            status,
            extra={"admin_port": port, "status": status},
        )


#: Set once `bidder serve` stops the admin listener itself.
_stopping = threading.Event()


def _stop(child: subprocess.Popen[bytes]) -> None:
    """Stop the admin listener as granian stops: SIGTERM, its graceful stop, then SIGKILL."""
    _stopping.set()
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
    try:
        child.wait(_ADMIN_STOP_SECONDS)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


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


def _cmd_migrate(_: argparse.Namespace) -> int:
    applied = asyncio.run(with_connection(command_settings(redis=False), migrate))
    print("applied: " + ", ".join(applied) if applied else "schema is up to date")
    return 0


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {value!r}")
    return int(value)


def register(subparsers: Any) -> None:
    """Add `serve` and `migrate` to the `bidder` command's subparsers."""
    serve_cmd = subparsers.add_parser("serve", help="serve HTTP with granian (production)")
    serve_cmd.add_argument("--host", default="0.0.0.0")  # noqa: S104 - a server listens
    serve_cmd.add_argument("--port", type=port_number, default=8000)
    serve_cmd.add_argument(
        "--workers",
        type=_positive,
        default=None,
        help="worker processes (default: the CPUs this process may use: affinity, cgroup quota)",
    )
    serve_cmd.add_argument(
        "--admin-port",
        type=port_number,
        default=None,
        help="serve the admin API and /metrics on this port only, off the public one "
        "(default: ADMIN_PORT; unset, both on --port)",
    )
    serve_cmd.add_argument(
        "--admin-host", default=None, help="the admin listener's address (default: --host)"
    )
    # The admin listener `--admin-port` starts: one process of its own.
    serve_cmd.add_argument("--admin-listener", action="store_true", help=argparse.SUPPRESS)
    # The pid of the `bidder serve` that started the admin listener: it ends with it.
    serve_cmd.add_argument("--admin-parent", type=int, default=0, help=argparse.SUPPRESS)
    serve_cmd.set_defaults(func=_cmd_serve)

    subparsers.add_parser("migrate", help="apply the pending SQL migrations").set_defaults(
        func=_cmd_migrate
    )
