"""The backup and restore drill of docs/operations.md ("Backup and restore"), run on real servers.

Traffic runs (offers, accepts, playouts) while pg_dump takes a backup; then Redis and Postgres
are lost entirely (Redis flushed, the database left behind for a brand-new Postgres server), the
backup is restored into the new server, `bidder reconcile --repair` rebuilds Redis' budget
counters from the records, and: every deal, billing record and playout the backup holds is back,
every campaign balances (`bidder reconcile` finds no difference), and the restored service shows
each campaign's spend as its billing records add up.

Which records the backup holds is known exactly, not guessed: the test reads the ids inside a
transaction whose snapshot it exports, and pg_dump takes that same snapshot (`--snapshot`).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import asyncpg
import redis

from store.local_servers import PostgresServer, free_port, postgres_bin_dir
from store.records import queue_stats
from tests.support.core import Core, count_rows, live_app, prepare
from tests.support.factories import CAMPAIGN, SCREEN_MOVING, basic_document
from tests.support.servers import ADMIN_TOKEN, SIGNING_SECRETS, ServerUrls, make_settings

RECORDS = ("deals", "billing_records", "playouts")
ID_OF = {"deals": "deal_id", "billing_records": "billing_id", "playouts": "playout_id"}
ROUNDS = 60


async def _traffic(core: Core, acknowledged: list[str], stop: asyncio.Event) -> None:
    """Offer, accept and confirm the playout, round after round; every third offer is
    rejected and every fifth left open. `acknowledged` gets each deal answered 200."""
    for n in range(ROUNDS):
        if stop.is_set():
            return
        offer = await core.offer(SCREEN_MOVING)
        assert offer.status_code == 200, offer.text
        body = offer.json()
        if n % 5 == 4:
            continue
        if n % 3 == 2:
            rejected = await core.respond(body["offer_id"], {"action": "reject"})
            assert rejected.status_code == 200, rejected.text
            continue
        accepted = await core.respond(
            body["offer_id"],
            {"action": "accept", "accepted_price_cents": float(body["bid_price_cents"])},
        )
        assert accepted.status_code == 200, accepted.text
        deal_id = accepted.json()["deal_id"]
        acknowledged.append(deal_id)
        played = await core.confirm(deal_id, {})
        assert played.status_code == 200, played.text
        await asyncio.sleep(0.01)


async def _backup(database_url: str, dump: Path) -> tuple[dict[str, set[str]], set[str]]:
    """pg_dump of `database_url` into `dump`, on a snapshot whose record ids it returns, with
    the deals whose playout it holds."""
    conn = await asyncpg.connect(database_url)
    try:
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            snapshot = await conn.fetchval("SELECT pg_export_snapshot()")
            held = {
                table: {str(r[0]) for r in await conn.fetch(f"SELECT {ID_OF[table]} FROM {table}")}
                for table in RECORDS
            }
            played = {str(r[0]) for r in await conn.fetch("SELECT deal_id FROM playouts")}
            dumping = await asyncio.create_subprocess_exec(
                str(postgres_bin_dir() / "pg_dump"),
                "--format=custom",
                f"--snapshot={snapshot}",
                f"--file={dump}",
                "--dbname",
                database_url,
                stderr=asyncio.subprocess.PIPE,
            )
            _, err = await dumping.communicate()
            assert dumping.returncode == 0, err.decode()
    finally:
        await conn.close()
    return held, played


async def _bidder(
    *args: str, database_url: str, redis_url: str
) -> subprocess.CompletedProcess[str]:
    """The `bidder` command, as an operator runs it, on the given servers."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "ADMIN_TOKEN": ADMIN_TOKEN,
        "SIGNING_SECRETS": SIGNING_SECRETS,
        "LOG_LEVEL": "WARNING",
    }
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "bidder.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def _record_ids(database_url: str) -> dict[str, set[str]]:
    conn = await asyncpg.connect(database_url)
    try:
        return {
            table: {str(r[0]) for r in await conn.fetch(f"SELECT {ID_OF[table]} FROM {table}")}
            for table in RECORDS
        }
    finally:
        await conn.close()


async def test_backup_during_traffic_restores_every_record_and_balances(
    servers: ServerUrls, clean: None, tmp_path: Path
) -> None:
    settings = make_settings(servers)
    dump = tmp_path / "bidder.dump"
    acknowledged: list[str] = []
    async with live_app(settings) as live:
        core = await prepare(live, basic_document())
        stop = asyncio.Event()
        traffic = asyncio.create_task(_traffic(core, acknowledged, stop))
        # The backup starts once the writer has put some deals in Postgres, traffic still on.
        while (await count_rows(settings.postgres.url, "deals"))["deals"] < 10:
            assert not traffic.done(), "traffic ended before any deal was written"
            await asyncio.sleep(0.05)
        started = time.monotonic()
        in_backup, played = await _backup(settings.postgres.url, dump)
        backup_seconds = time.monotonic() - started
        during = len(acknowledged)
        await traffic
        stop.set()
        # The procedure's way to lose nothing: stop traffic, let the writers drain the queue,
        # then back up. That backup holds every acknowledged deal.
        deadline = time.monotonic() + 30
        while (await queue_stats(live.rt.redis))[0]:
            assert time.monotonic() < deadline, "the record queue did not drain"
            await asyncio.sleep(0.05)
        drained, _ = await _backup(settings.postgres.url, tmp_path / "drained.dump")
        assert drained["deals"] == set(acknowledged)
    not_in_backup = len(acknowledged) - len(in_backup["deals"])

    # Everything is lost: Redis emptied, and the old database left behind for a new server.
    redis.Redis.from_url(servers.redis_url).flushall()
    started = time.monotonic()
    fresh = PostgresServer(tmp_path / "restored", free_port())
    fresh.start()
    try:
        admin = await asyncpg.connect(fresh.url)
        try:
            await admin.execute("CREATE DATABASE bidder")
        finally:
            await admin.close()
        restored_url = fresh.url.rsplit("/", 1)[0] + "/bidder"
        restoring = await asyncio.to_thread(
            subprocess.run,
            [
                str(postgres_bin_dir() / "pg_restore"),
                "--no-owner",
                "--exit-on-error",
                "--dbname",
                restored_url,
                str(dump),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert restoring.returncode == 0, restoring.stderr
        migrated = await _bidder("migrate", database_url=restored_url, redis_url=servers.redis_url)
        assert migrated.returncode == 0, migrated.stderr
        repair = await _bidder(
            "reconcile",
            "--repair",
            "--json",
            database_url=restored_url,
            redis_url=servers.redis_url,
        )
        restore_seconds = time.monotonic() - started

        # Every record the backup holds is back, and nothing else appeared.
        assert await _record_ids(restored_url) == in_backup
        assert in_backup["deals"] <= set(acknowledged)
        assert len(in_backup["billing_records"]) == len(in_backup["deals"])  # Core: one each
        # Redis had lost every counter: the repair set them to what the records prove ...
        repaired = json.loads(repair.stdout)
        assert repaired["repaired"] == [CAMPAIGN], repair.stdout + repair.stderr
        # ... and a second look finds every campaign balanced.
        check = await _bidder(
            "reconcile", "--json", database_url=restored_url, redis_url=servers.redis_url
        )
        assert check.returncode == 0, check.stdout + check.stderr
        balances = json.loads(check.stdout)
        assert balances["differing"] == 0
        campaign = balances["campaigns"][CAMPAIGN]
        billed = await _billed_cents(restored_url)
        assert Decimal(str(campaign["spent_cents"])) == billed
        assert Decimal(str(campaign["reserved_cents"])) == 0  # open offers died with Redis
        assert Decimal(str(campaign["total_cents"])) == basic_document().campaigns[0].budget_cents

        # The restored service serves on it: each restored deal is shown with its billing and
        # playout, and the campaign's live budget says what the records say.
        async with live_app(make_settings(servers, DATABASE_URL=restored_url)) as live:
            headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            for deal_id in sorted(in_backup["deals"]):
                shown = await live.client.get(f"/admin/v1/deals/{deal_id}", headers=headers)
                assert shown.status_code == 200, shown.text
                assert shown.json()["billing"] is not None
                # Every deal's playout was confirmed; the backup holds those written by then.
                assert len(shown.json()["playouts"]) == (deal_id in played), deal_id
            budget = (
                await live.client.get(f"/admin/v1/campaigns/{CAMPAIGN}", headers=headers)
            ).json()["budget"]
            assert Decimal(str(budget["spent_cents"])) == billed
    finally:
        fresh.stop()
    print(
        f"\ndrill: {len(acknowledged)} deals acknowledged ({during} when the backup began); "
        f"backup held {len(in_backup['deals'])} deals, {len(in_backup['billing_records'])} "
        f"billing records, {len(in_backup['playouts'])} playouts in {backup_seconds:.2f}s; "
        f"restored the same in {restore_seconds:.2f}s (new server, pg_restore, migrate, "
        f"reconcile --repair); not in the backup: {not_in_backup} deals (about "
        f"{during - len(in_backup['deals'])} still queued in Redis at its snapshot, the rest "
        f"acknowledged after it); a backup after draining the queue held all "
        f"{len(drained['deals'])}"
    )


async def _billed_cents(database_url: str) -> Decimal:
    conn = await asyncpg.connect(database_url)
    try:
        total: Decimal = await conn.fetchval(
            "SELECT coalesce(sum(gross_price_cents), 0) FROM billing_records"
        )
    finally:
        await conn.close()
    return total
