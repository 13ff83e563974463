"""Shared by the command-line tests: the environment a `bidder` command runs with, running one,
and the audit lines it writes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any

from tests.support.servers import ADMIN_TOKEN, SIGNING_SECRETS, ServerUrls


def cli_env(servers: ServerUrls, **overrides: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "REDIS_URL", "REDIS_MODE", "ADMIN_TOKEN")
    }
    env.update(
        DATABASE_URL=servers.database_url,
        REDIS_URL=servers.redis_url,
        REDIS_MODE=servers.redis_mode,
        ADMIN_TOKEN=ADMIN_TOKEN,
        SIGNING_SECRETS=SIGNING_SECRETS,
        BIDDER_ENV="staging",
    )
    env.update(overrides)
    return env


async def bidder(
    env: dict[str, str], *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run `bidder ARGS` (this interpreter, `python -m bidder.cli`) and wait for it."""
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "bidder.cli", *args],
        env=env,
        input=stdin,
        capture_output=True,
        timeout=120,
        check=False,
    )


def audit_lines(done: subprocess.CompletedProcess[bytes]) -> list[dict[str, Any]]:
    """The `bidder.audit` JSON lines a command wrote on stderr."""
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith(b"{")]
    return [line for line in lines if line.get("logger") == "bidder.audit"]
