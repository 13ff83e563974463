"""Shared by the end-to-end tests: a free loopback port, a server process run in a session of its
own and the end of its log."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@contextlib.contextmanager
def running(command: list[str], env: dict[str, str], log: Path) -> Iterator[None]:
    """`command` running in a session of its own, its output in `log`; stopped with SIGTERM,
    its whole session killed if it has not ended 15 s later."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the session this test started
            proc.wait(timeout=5)


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]
