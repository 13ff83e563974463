"""`bidder serve` on a port other than PUBLIC_BASE_URL's says so at start: the signed
loss-notice URLs and the tracking URLs are built on PUBLIC_BASE_URL, so a service reached on
another port hands out URLs that point elsewhere. One JSON warning line names both."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from store.local_servers import free_port
from tests.support.cli import cli_env
from tests.support.servers import ServerUrls

WARNING = "PUBLIC_BASE_URL"


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), 0.2):
            return True
    except OSError:
        return False


def _serve_until_listening(servers: ServerUrls, port: int, public: str, log: Path) -> str:
    """Start `bidder serve` on `port` with PUBLIC_BASE_URL `public`, wait until it listens (the
    check runs before granian binds), stop it, and return what it wrote."""
    env = cli_env(servers, PUBLIC_BASE_URL=public, LOG_LEVEL="INFO")
    command = [sys.executable, "-m", "bidder.cli", "serve", "--workers", "1"]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 60
        while not _listening(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("bidder serve did not start:\n" + log.read_text(errors="replace"))
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return log.read_text(errors="replace")


def _json_lines(text: str) -> list[dict[str, Any]]:
    lines = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                lines.append(json.loads(line))
            except ValueError:
                continue
    return lines


def test_serving_on_another_port_than_public_base_url_warns_naming_both(
    servers: ServerUrls, tmp_path: Path
) -> None:
    port, public_port = free_port(), free_port()
    public = f"http://127.0.0.1:{public_port}"
    text = _serve_until_listening(servers, port, public, tmp_path / "serve.log")
    warnings = [
        line
        for line in _json_lines(text)
        if line["level"] == "WARNING" and WARNING in line["message"]
    ]
    assert len(warnings) == 1, text
    message = warnings[0]["message"]
    assert public in message
    assert str(port) in message
    assert "signed" in message
    assert warnings[0]["public_port"] == public_port
    assert warnings[0]["port"] == port


@pytest.mark.parametrize(
    "public",
    [
        "http://127.0.0.1:{port}",  # the port served
        "https://bidder.example.com",  # a proxy's, on 443
    ],
)
def test_serving_on_the_public_port_or_behind_a_proxy_does_not_warn(
    servers: ServerUrls, tmp_path: Path, public: str
) -> None:
    port = free_port()
    url = public.format(port=port)
    text = _serve_until_listening(servers, port, url, tmp_path / "serve.log")
    assert not [line for line in _json_lines(text) if WARNING in line.get("message", "")], text
