"""The `bidder` command, run as a real process against the test servers: migrate, inventory
import/export (round trip unchanged, refusals, 100,000 screens in seconds), keys, settings."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import pytest

from bidder.demo import demo_document
from tests.conftest import ADMIN_TOKEN, SIGNING_SECRETS, ServerUrls
from tests.factories import CAMPAIGN, PUB, basic_document, seed, uid
from tests.integration._admin_helpers import fetchval, parsed
from tests.integration.test_admin_inventory import full_document


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


async def test_commands_on_postgres_alone_need_only_database_url(
    servers: ServerUrls, clean: None
) -> None:
    """What the README says: the operator's commands read DATABASE_URL, and REDIS_URL only
    where they touch budgets or offers; nothing else is required of them."""
    only = {
        k: v
        for k, v in cli_env(servers).items()
        if k not in ("REDIS_URL", "ADMIN_TOKEN", "SIGNING_SECRETS")
    }
    for args in (("migrate",), ("inventory", "export")):
        done = await bidder(only, *args)
        assert done.returncode == 0, done.stderr
    refused = await bidder(only, "campaigns", "show", CAMPAIGN)
    assert refused.returncode == 2
    assert b"REDIS_URL is required" in refused.stderr
    assert b"SIGNING_SECRETS" not in refused.stderr


async def test_migrate_is_applied_once(servers: ServerUrls, clean: None) -> None:
    done = await bidder(cli_env(servers), "migrate")
    assert done.returncode == 0, done.stderr
    assert b"up to date" in done.stdout  # the session already migrated
    assert await fetchval(servers, "SELECT count(*) FROM schema_migrations") >= 1


async def test_import_then_export_round_trips_unchanged(
    servers: ServerUrls, clean: None, tmp_path: Path
) -> None:
    source = tmp_path / "inventory.json"
    source.write_text(json.dumps(full_document()))
    imported = await bidder(cli_env(servers), "inventory", "import", str(source))
    assert imported.returncode == 0, imported.stderr
    assert b"2 screens" in imported.stdout

    exported = await bidder(cli_env(servers), "inventory", "export")
    assert exported.returncode == 0, exported.stderr
    assert parsed(exported.stdout) == parsed(source.read_bytes())

    # To a file, and back in: a second import changes nothing.
    target = tmp_path / "exported.json"
    to_file = await bidder(cli_env(servers), "inventory", "export", str(target))
    assert to_file.returncode == 0
    assert parsed(target.read_bytes()) == parsed(source.read_bytes())
    again = await bidder(cli_env(servers), "inventory", "import", str(target))
    assert again.returncode == 0
    final = await bidder(cli_env(servers), "inventory", "export")
    assert parsed(final.stdout) == parsed(source.read_bytes())


async def test_the_demo_inventory_round_trips(
    servers: ServerUrls, clean: None, tmp_path: Path
) -> None:
    source = tmp_path / "demo.json"
    source.write_bytes(msgspec.json.encode(demo_document()))
    assert (await bidder(cli_env(servers), "inventory", "import", str(source))).returncode == 0
    exported = await bidder(cli_env(servers), "inventory", "export")
    got = msgspec.json.decode(exported.stdout, type=type(demo_document()))
    want = demo_document()
    for name in want.__struct_fields__:
        assert sorted(getattr(got, name), key=repr) == sorted(getattr(want, name), key=repr)


async def test_a_refused_import_lists_every_problem_and_applies_nothing(
    servers: ServerUrls, clean: None, tmp_path: Path
) -> None:
    doc = full_document()
    doc["screens"][0]["width"] = -3
    doc["creatives"][0]["duration_seconds"] = 0
    source = tmp_path / "bad.json"
    source.write_text(json.dumps(doc))
    done = await bidder(cli_env(servers), "inventory", "import", str(source))
    assert done.returncode == 1
    err = done.stderr.decode()
    assert "screens[0]" in err
    assert "width" in err
    assert "creatives[0]" in err
    assert "duration_seconds" in err
    assert "Traceback" not in err
    assert await fetchval(servers, "SELECT count(*) FROM publishers") == 0


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"{not json", "not valid JSON"),
        # Every problem of the item, by list, index and field, as the API lists them.
        (b'{"screens": [{"id": 1}]}', "screens[0] id: Expected `str`, got `int`"),
        (b'{"screens": [{"id": 1}]}', "screens[0] publisher_id: is required"),
    ],
)
async def test_an_unreadable_file_is_refused_clearly(
    servers: ServerUrls, clean: None, tmp_path: Path, content: bytes, fragment: str
) -> None:
    source = tmp_path / "broken.json"
    source.write_bytes(content)
    done = await bidder(cli_env(servers), "inventory", "import", str(source))
    assert done.returncode == 1
    assert fragment in done.stderr.decode()
    assert "Traceback" not in done.stderr.decode()
    missing = await bidder(cli_env(servers), "inventory", "import", str(tmp_path / "nope.json"))
    assert missing.returncode == 1
    assert "cannot read" in missing.stderr.decode()


async def test_keys_create_and_revoke(servers: ServerUrls, clean: None, tmp_path: Path) -> None:
    source = tmp_path / "inventory.json"
    source.write_text(json.dumps(full_document()))
    imported = await bidder(cli_env(servers), "inventory", "import", str(source))
    assert imported.returncode == 0
    assert [line["message"] for line in audit_lines(imported)] == ["inventory imported"]

    created = await bidder(
        cli_env(servers), "keys", "create", "--publisher", PUB, "--expires-at", "2099-01-01T00:00Z"
    )
    assert created.returncode == 0, created.stderr
    lines = dict(line.split(":", 1) for line in created.stdout.decode().splitlines() if ":" in line)
    key_id, api_key = lines["key_id"].strip(), lines["api_key"].strip()
    assert api_key.startswith("dk_stg_")
    stored = await fetchval(
        servers, "SELECT key_hash FROM api_keys WHERE key_id = $1", uuid.UUID(key_id)
    )
    assert bytes(stored) == hashlib.sha256(api_key.encode()).digest()

    revoked = await bidder(cli_env(servers), "keys", "revoke", key_id)
    assert revoked.returncode == 0
    # The admin API's audit trail, for changes made here too; never the key itself.
    trail = audit_lines(created) + audit_lines(revoked)
    assert [(line["message"], line["key_id"]) for line in trail] == [
        ("API key created", key_id),
        ("API key revoked", key_id),
    ]
    assert api_key.encode() not in created.stderr
    assert await fetchval(
        servers, "SELECT revoked_at IS NOT NULL FROM api_keys WHERE key_id = $1", uuid.UUID(key_id)
    )


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("keys", "create", "--publisher", uid(404, 1)), 1),
        (("keys", "create", "--publisher", "metro"), 2),
        (("keys", "create", "--publisher", PUB, "--expires-at", "2099-01-01"), 2),
        (("keys", "create", "--publisher", PUB, "--expires-at", "2001-01-01T00:00Z"), 1),
        # Past the year 9999 once in UTC: a clear error, not an OverflowError's traceback.
        (("keys", "create", "--publisher", PUB, "--expires-at", "9999-12-31T23:59:59-12:00"), 1),
        (("keys", "revoke", uid(404, 9)), 1),
        (("keys", "revoke", "key-1"), 2),
    ],
)
async def test_key_commands_refuse_clearly(
    servers: ServerUrls, clean: None, args: tuple[str, ...], code: int
) -> None:
    done = await bidder(cli_env(servers), *args)
    assert done.returncode == code, done.stderr
    assert done.stderr.strip()
    assert b"Traceback" not in done.stderr


async def test_settings_problems_are_all_listed_with_exit_2(servers: ServerUrls) -> None:
    env = cli_env(
        servers,
        DATABASE_URL="mysql://nope",
        ADMIN_TOKEN="short",
        BIDDER_ENV="prod",
        OFFER_TTL_SECONDS="-1",
    )
    done = await bidder(env, "migrate")
    assert done.returncode == 2
    err = done.stderr.decode()
    for name in ("DATABASE_URL", "ADMIN_TOKEN", "BIDDER_ENV", "OFFER_TTL_SECONDS"):
        assert name in err
    assert "Traceback" not in err


def screens_document(count: int) -> dict[str, Any]:
    """Ten publishers and `count` screens."""
    publishers = [
        {"id": uid(n, 1), "name": f"Publisher {n}", "external_ids_enabled": True}
        for n in range(1, 11)
    ]
    kinds = ("static", "slow", "moving")
    sizes = ((1920, 1080), (1080, 1920), (3840, 2160))
    screens = [
        {
            "id": uid(n, 3),
            "publisher_id": uid(n % 10 + 1, 1),
            "external_id": f"scr-{n:06d}",
            "name": f"Screen {n}",
            "type": kinds[n % 3],
            "width": sizes[n % 3][0],
            "height": sizes[n % 3][1],
            "audience_per_play": round(1 + (n % 500) / 7, 4),
            "venue_type": "transit.train_stations",
            "timezone": ("UTC", "Europe/Berlin", "America/New_York")[n % 3],
            "lat": 48 + (n % 1000) / 1000,
            "lon": 11 + (n % 997) / 1000,
            "active": True,
        }
        for n in range(1, count + 1)
    ]
    return {"publishers": publishers, "screens": screens}


async def test_importing_100000_screens_takes_seconds(
    servers: ServerUrls, clean: None, tmp_path: Path
) -> None:
    source = tmp_path / "big.json"
    source.write_text(json.dumps(screens_document(100_000)))
    started = time.monotonic()
    done = await bidder(cli_env(servers), "inventory", "import", str(source))
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert await fetchval(servers, "SELECT count(*) FROM screens") == 100_000
    print(f"\n100,000 screens imported by the CLI in {elapsed:.1f} s")
    assert elapsed < 20
    # A second import of the same document is a no-op upsert, just as quick.
    again = await bidder(cli_env(servers), "inventory", "import", str(source))
    assert again.returncode == 0


@pytest.mark.parametrize(
    ("overrides", "args", "fragment"),
    [
        (
            {"DATABASE_URL": "postgresql://postgres@127.0.0.1:1/db?sslmode=bogus"},
            ("migrate",),
            "Postgres",
        ),
        ({}, ("inventory", "export", "/nonexistent-dir/inventory.json"), "nonexistent-dir"),
        ({"REDIS_URL": "redis://127.0.0.1:1/0"}, ("reconcile",), "Redis"),
        ({"DATABASE_URL": "postgresql://postgres@127.0.0.1:1/db"}, ("reconcile",), "Postgres"),
    ],
)
async def test_an_unreachable_store_or_path_is_one_line_and_exit_1(
    servers: ServerUrls,
    clean: None,
    overrides: dict[str, str],
    args: tuple[str, ...],
    fragment: str,
) -> None:
    done = await bidder(cli_env(servers, **overrides), *args)
    err = done.stderr.decode()
    assert done.returncode == 1, err
    assert fragment in err
    assert "Traceback" not in err


async def test_a_database_url_with_an_unescaped_password_is_refused_without_echoing_it(
    servers: ServerUrls,
) -> None:
    env = cli_env(servers, DATABASE_URL="postgresql://bidder:s3cr#tpass@127.0.0.1:5432/db")
    done = await bidder(env, "migrate")
    err = done.stderr.decode()
    assert done.returncode == 2, err  # a setting that cannot be used
    assert "DATABASE_URL" in err
    assert "s3cr" not in err
    assert "Traceback" not in err


async def test_serve_on_a_port_something_listens_on_is_one_line_and_exit_1(
    servers: ServerUrls,
) -> None:
    """granian binds with SO_REUSEPORT: without the check a second service would start there
    and quietly take part of the traffic."""
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # as granian binds
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = await bidder(
            cli_env(servers), "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"
        )
    err = done.stderr.decode()
    assert done.returncode == 1, err
    assert f"127.0.0.1:{port}" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "args",
    [
        ("serve", "--port", "99999"),
        ("serve", "--port", "0"),
        ("dev", "--port", "70000"),
        ("writer", "--metrics-port", "99999"),
        ("writer", "--metrics-port", "-1"),
    ],
)
async def test_a_port_out_of_range_is_a_usage_error_without_traceback(
    servers: ServerUrls, args: tuple[str, ...]
) -> None:
    """Ports above 65535 passed argparse and ended in bind()'s OverflowError traceback."""
    done = await bidder(cli_env(servers), *args)
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert "port" in err
    assert "Traceback" not in err


async def test_a_reader_that_leaves_early_gets_no_error_line(servers: ServerUrls) -> None:
    """`bidder inventory export | head -c 100`: once the reader is gone, writing raises
    BrokenPipeError, which printed "bidder: [Errno 32] Broken pipe" and exited 1. Now it ends
    quietly with 141, what a shell reports for a writer SIGPIPE ended. (Whether a real pipe
    gets there depends on the kernel's timing, so the export here raises it itself.)"""
    script = (
        "import bidder.cli as cli\n"
        "def export(args):\n"
        "    raise BrokenPipeError(32, 'Broken pipe')\n"
        "cli._cmd_export = export\n"
        "raise SystemExit(cli.main(['inventory', 'export']))\n"
    )
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", script],
        env=cli_env(servers),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 141, done.stderr
    assert done.stderr == b""


async def test_a_top_up_retried_with_its_idempotency_key_adds_once(
    servers: ServerUrls, clean: None
) -> None:
    """`bidder campaigns top-up --idempotency-key`: an operator who lost the first answer runs
    the same command again, and the budget grows once."""
    await seed(servers.database_url, basic_document())
    sql = "SELECT budget_cents FROM campaigns WHERE id = $1"
    before = await fetchval(servers, sql, uuid.UUID(CAMPAIGN))
    command = ("campaigns", "top-up", CAMPAIGN, "120.5", "--idempotency-key", "ops-2026-11-24-1")
    first = await bidder(cli_env(servers), *command)
    assert first.returncode == 0, first.stderr
    assert parsed(first.stdout)["budget_cents"] == before + Decimal("120.5")
    again = await bidder(cli_env(servers), *command)
    assert again.returncode == 0, again.stderr
    assert b"already done: nothing added" in again.stderr
    assert parsed(again.stdout)["budget_cents"] == before + Decimal("120.5")
    assert await fetchval(servers, sql, uuid.UUID(CAMPAIGN)) == before + Decimal("120.5")

    other_amount = await bidder(
        cli_env(servers), "campaigns", "top-up", CAMPAIGN, "1", "--idempotency-key", command[-1]
    )
    assert other_amount.returncode == 1
    assert b"already used for another top-up" in other_amount.stderr
    bad = await bidder(
        cli_env(servers), "campaigns", "top-up", CAMPAIGN, "1", "--idempotency-key", "a b"
    )
    assert bad.returncode == 2
    assert b"Idempotency-Key must be" in bad.stderr
    assert await fetchval(servers, sql, uuid.UUID(CAMPAIGN)) == before + Decimal("120.5")
