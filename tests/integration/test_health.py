"""/healthz, /readyz and /metrics as docs/contract.md#8-operations defines them: ready means Redis
reachable and the inventory snapshot loaded; Postgres being down does not make an instance
unready."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import redis
from litestar.testing import AsyncTestClient

from bidder.core import CORE_PREFIX
from bidder.http.app import create_app
from bidder.observability import request_id_var
from bidder.runtime import Runtime
from bidder.signing import signer
from store.hot import INVENTORY_COPY_FORMAT, INVENTORY_COPY_KEY, decode_inventory_copy
from store.local_servers import PostgresServer, free_port
from store.postgres import migrate
from tests.support.factories import (
    SCREEN_MOVING,
    SCREEN_STATIC,
    basic_document,
    make_key,
    seed,
)
from tests.support.servers import SIGNING_SECRETS, ServerUrls, make_settings, wait_for_inventory


async def test_not_ready_without_redis(servers: ServerUrls, clean: None) -> None:
    closed = f"redis://127.0.0.1:{free_port()}/0"
    app = create_app(make_settings(servers, REDIS_URL=closed, RECORD_WRITER="0"))
    async with AsyncTestClient(app) as client:
        alive = await client.get("/healthz")
        assert alive.status_code == 200
        ready = await client.get("/readyz")
        assert ready.status_code == 503
        body = ready.json()
        assert body["redis"] != "ok"
        assert body["postgres"] == "ok"
        assert body["status"] == "not ready"
        # HEAD, as load balancers probe: the same status, no body (RFC 9110 9.1).
        head_alive = await client.head("/healthz")
        assert (head_alive.status_code, head_alive.content) == (200, b"")
        assert head_alive.headers["content-length"] == str(len(alive.content))
        head_ready = await client.head("/readyz")
        assert (head_ready.status_code, head_ready.content) == (503, b"")
        assert head_ready.headers["content-length"] == str(len(ready.content))


async def _seeded_postgres(tmp_path: Path) -> PostgresServer:
    """A Postgres of the test's own (to stop and start), migrated and seeded with the basic
    document; the caller discards it."""
    postgres = PostgresServer(tmp_path / "pg", free_port())
    postgres.start()
    try:
        conn = await asyncpg.connect(postgres.url)
        try:
            await migrate(conn)
        finally:
            await conn.close()
        await seed(postgres.url, basic_document())
    except BaseException:
        postgres.discard()
        raise
    return postgres


async def test_postgres_down_keeps_a_loaded_instance_ready(
    servers: ServerUrls, clean: None, tmp_path: Path
) -> None:
    postgres = await _seeded_postgres(tmp_path)
    try:
        app = create_app(make_settings(servers, DATABASE_URL=postgres.url, RECORD_WRITER="0"))
        async with AsyncTestClient(app) as client:
            ready = await client.get("/readyz")
            assert ready.status_code == 200, ready.text
            body = ready.json()
            assert body["postgres"] == "ok"
            assert body["inventory"]["status"] == "ok"
            assert body["queue"] == {"depth": 0, "lag_seconds": 0.0}

            postgres.stop()
            still = await client.get("/readyz")
            assert still.status_code == 200, still.text
            down = still.json()
            assert down["redis"] == "ok"
            assert down["postgres"] != "ok"
            assert down["inventory"]["status"] == "ok"
    finally:
        postgres.discard()


async def test_a_worker_started_while_postgres_is_down_serves_the_inventory_copy(
    servers: ServerUrls, clean: None, tmp_path: Path
) -> None:
    """docs/contract.md#8-operations: Postgres being down must not turn into an outage. A worker
    that was running keeps its snapshot (above); one (re)started during the outage builds its
    snapshot from the copy the last loading worker left in Redis, serves, and says so in /readyz;
    when Postgres answers again the copy's version is Postgres' own."""
    postgres = await _seeded_postgres(tmp_path)
    try:
        key = await make_key(postgres.url)
        auth = {"Authorization": f"Bearer {key}"}
        settings = make_settings(servers, DATABASE_URL=postgres.url, RECORD_WRITER="0")
        async with AsyncTestClient(create_app(settings)) as client:
            first = (await client.get("/readyz")).json()["inventory"]
            assert first["source"] == "postgres"

        postgres.stop()
        async with AsyncTestClient(create_app(settings)) as client:
            ready = await client.get("/readyz")
            assert ready.status_code == 200, ready.text
            body = ready.json()
            assert body["postgres"] != "ok"
            assert body["inventory"] == {**first, "source": "redis copy"}
            offer = await client.get(f"{CORE_PREFIX}/offers/request/{SCREEN_MOVING}", headers=auth)
            assert offer.status_code == 200, offer.text
            # The campaign, creative and billing code of the inventory in Postgres.
            assert offer.json()["asset_url"] == "https://cdn.example/summer.mp4"
            assert offer.json()["billing_code"] == "BILL-FIZZY-METRO"
            wrong = await client.get(
                f"{CORE_PREFIX}/offers/request/{SCREEN_MOVING}",
                headers={"Authorization": "Bearer dk_stg_" + "x" * 40},
            )
            assert wrong.status_code == 401  # the keys came with the copy, and only they

            postgres.start()
            for _ in range(100):
                body = (await client.get("/readyz")).json()
                if body["postgres"] == "ok" and body["inventory"]["source"] == "postgres":
                    break
                await asyncio.sleep(0.1)
            assert body["inventory"] == first
    finally:
        postgres.discard()


async def test_without_postgres_or_a_copy_a_worker_is_not_ready(
    servers: ServerUrls, clean: None
) -> None:
    closed = f"postgresql://postgres@127.0.0.1:{free_port()}/none"
    app = create_app(make_settings(servers, DATABASE_URL=closed, RECORD_WRITER="0"))
    async with AsyncTestClient(app) as client:
        ready = await client.get("/readyz")
        assert ready.status_code == 503, ready.text
        assert ready.json()["inventory"] == {"status": "not loaded"}


@pytest.mark.parametrize(
    ("stamp", "secret", "copy", "mac"),
    [
        # Not msgpack of an inventory copy, though signed right.
        (f"{INVENTORY_COPY_FORMAT}:7", SIGNING_SECRETS.split(",")[0], b"\x93\x07\xa1x", None),
        # Another release's layout.
        ("999:7", SIGNING_SECRETS.split(",")[0], b"\x93\x07\x80\x90", None),
        # Written by something that does not hold a signing secret: keys it brings are refused.
        (f"{INVENTORY_COPY_FORMAT}:7", "not-a-configured-secret-0123", b"\x93\x07\x80\x90", None),
        # A signature that is no token at all (compare_digest refuses non-ASCII text).
        (
            f"{INVENTORY_COPY_FORMAT}:7",
            SIGNING_SECRETS.split(",")[0],
            b"\x93\x07\x80\x90",
            "forg\u00e9",
        ),
    ],
)
async def test_a_copy_that_is_unusable_is_not_served_and_the_log_says_so_once(
    servers: ServerUrls,
    clean: None,
    caplog: pytest.LogCaptureFixture,
    stamp: str,
    secret: str,
    copy: bytes,
    mac: str | None,
) -> None:
    client = redis.Redis.from_url(servers.redis_url)
    try:
        client.hset(
            INVENTORY_COPY_KEY,
            mapping={"stamp": stamp, "mac": mac or signer(secret).token(copy), "copy": copy},
        )
    finally:
        client.close()
    closed = f"postgresql://postgres@127.0.0.1:{free_port()}/none"
    app = create_app(make_settings(servers, DATABASE_URL=closed, RECORD_WRITER="0"))
    root = logging.getLogger()
    root.addHandler(caplog.handler)  # create_app set the root's handlers
    caplog.set_level(logging.WARNING, logger="bidder.runtime")
    try:
        async with AsyncTestClient(app) as test_client:
            ready = await test_client.get("/readyz")
            assert ready.status_code == 503, ready.text
            await asyncio.sleep(1.0)  # five more polls (INVENTORY_POLL_SECONDS 0.2)
            assert (await test_client.get("/readyz")).status_code == 503
    finally:
        root.removeHandler(caplog.handler)
    refusals = [r for r in caplog.records if r.getMessage() == "inventory copy unusable"]
    assert len(refusals) == 1, "refused once, not read again at every poll"


async def test_a_misconfigured_database_url_is_not_covered_by_the_copy(
    servers: ServerUrls, clean: None
) -> None:
    """A wrong database name (or password) is a deploy to stop, not an outage: the worker
    stays unready although a copy is there."""
    await seed(servers.database_url, basic_document())
    async with AsyncTestClient(create_app(make_settings(servers, RECORD_WRITER="0"))) as client:
        assert (await client.get("/readyz")).json()["inventory"]["source"] == "postgres"
    wrong = servers.database_url.rsplit("/", 1)[0] + "/no_such_database"
    app = create_app(make_settings(servers, DATABASE_URL=wrong, RECORD_WRITER="0"))
    async with AsyncTestClient(app) as client:
        ready = await client.get("/readyz")
        assert ready.status_code == 503, ready.text
        assert ready.json()["inventory"] == {"status": "not loaded"}


async def test_the_copy_follows_the_version_postgres_has(
    servers: ServerUrls, clean: None, redis_client: Any
) -> None:
    """The copy is written at each new version, mended within a poll when it was lost or
    made older (a late writer), and follows a restore of Postgres to an older version: it is
    what Postgres last gave, never a version Postgres no longer has."""
    await seed(servers.database_url, basic_document())
    app = create_app(make_settings(servers, RECORD_WRITER="0"))
    async with AsyncTestClient(app) as client:
        await wait_for_inventory(client)
        rt: Runtime = client.app.state.runtime
        copies = rt.inventory.copies

        def stored() -> int | None:
            """The inventory version the stored copy says it holds."""
            stamp = client.blocking_portal.call(copies.stored_copy_stamp)
            return None if stamp is None else int(stamp.split(":")[1])

        async def settles_at(version: int) -> None:
            for _ in range(50):
                if stored() == version:
                    return
                await asyncio.sleep(0.1)
            assert stored() == version

        assert rt.inventory.snapshot is not None
        assert stored() == rt.inventory.snapshot.version
        conn = await asyncpg.connect(servers.database_url)
        try:
            await conn.execute("UPDATE screens SET name = 'Renamed' WHERE id = $1", SCREEN_STATIC)
            await conn.execute("UPDATE inventory_version SET version = version + 1")
            await wait_for_inventory(client)
            newer = rt.inventory.snapshot.version
            await settles_at(newer)
            found = client.blocking_portal.call(copies.load_inventory_copy)
            assert found is not None
            kept = decode_inventory_copy(found[2])
            assert {s.id: s.name for s in kept.document.screens}[SCREEN_STATIC] == "Renamed"

            stamp = client.blocking_portal.call(copies.stored_copy_stamp)
            assert stamp is not None
            layout, _, signed_by = stamp.split(":")
            await redis_client.hset(
                INVENTORY_COPY_KEY, "stamp", f"{layout}:{newer - 1}:{signed_by}"
            )
            await settles_at(newer)  # a late writer's older copy, mended
            await redis_client.delete(INVENTORY_COPY_KEY)
            await settles_at(newer)  # lost (a Redis without its data), written
            await conn.execute("UPDATE inventory_version SET version = version - 5")
            await settles_at(newer - 5)  # Postgres restored to an older version
        finally:
            await conn.close()


async def test_a_rotated_signing_secret_signs_the_copy_again(
    servers: ServerUrls, clean: None, redis_client: Any
) -> None:
    """After a rotation (a new newest secret, the old one kept to verify), the copy is signed
    again by the new one, so it still serves once the old secret is retired."""
    await seed(servers.database_url, basic_document())
    old = SIGNING_SECRETS.split(",")[0]
    new = "rotated-signing-secret-0123456789"
    async with AsyncTestClient(create_app(make_settings(servers, RECORD_WRITER="0"))):
        before = await redis_client.hget(INVENTORY_COPY_KEY, "stamp")
    rotated = make_settings(servers, RECORD_WRITER="0", SIGNING_SECRETS=f"{new},{old}")
    async with AsyncTestClient(create_app(rotated)):
        after = await redis_client.hget(INVENTORY_COPY_KEY, "stamp")
    assert before is not None
    assert after is not None
    assert after != before
    closed = f"postgresql://postgres@127.0.0.1:{free_port()}/none"
    retired = make_settings(servers, RECORD_WRITER="0", SIGNING_SECRETS=new, DATABASE_URL=closed)
    async with AsyncTestClient(create_app(retired)) as client:
        ready = await client.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["inventory"]["source"] == "redis copy"


async def test_metrics_count_requests_by_route(
    servers: ServerUrls, clean: None, capsys: pytest.CaptureFixture[str]
) -> None:
    app = create_app(make_settings(servers, RECORD_WRITER="0", LOG_LEVEL="INFO"))
    async with AsyncTestClient(app) as client:
        for _ in range(3):
            await client.get("/healthz")
        metrics = await client.get("/metrics")
        assert metrics.status_code == 200
        # Prometheus' exposition format, its charset named once (it went out twice).
        assert metrics.headers["content-type"] == "text/plain; version=1.0.0; charset=utf-8"
        text = metrics.text
        assert 'http_requests_total{method="GET",route="/healthz",status="200"} 3.0' in text
        # Refused by the router (no route, or not its method): counted too, as "unmatched".
        assert (await client.get("/no/such/path")).status_code == 404
        assert (await client.delete("/healthz")).status_code == 405
        text = (await client.get("/metrics")).text
        assert 'http_requests_total{method="GET",route="unmatched",status="404"} 1.0' in text
        assert 'http_requests_total{method="DELETE",route="unmatched",status="405"} 1.0' in text
        # ... and logged as every 4xx is, with an access line. The app's JSON log handler
        # writes to stderr.
        capsys.readouterr()
        refused = await client.get("/no/such/path/2")
        assert refused.status_code == 404
        logged = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
        lines = [line for line in logged if line["logger"] == "bidder.access"]
        assert [(line["route"], line["status"], line["method"]) for line in lines] == [
            ("unmatched", 404, "GET")
        ]
        # With a request id, as every answer and log line (docs/contract.md#8-operations), the
        # caller's own when it sends one.
        assert lines[0]["request_id"] == refused.headers["x-request-id"] != "-"
        traced = await client.delete("/healthz", headers={"X-Request-ID": "trace-405"})
        assert (traced.status_code, traced.headers["x-request-id"]) == (405, "trace-405")
        # Made-up methods share one label value: a client cannot mint series without end.
        for made_up in ("FOO1", "FOO2", "FOO3"):
            await client.request(made_up, "/no/such/path")
        text = (await client.get("/metrics")).text
        assert "FOO" not in text
        assert 'method="OTHER",route="unmatched"' in text
        assert "http_request_duration_seconds_bucket" in text
        assert "record_queue_depth" in text


async def test_head_readyz_is_200_when_ready(servers: ServerUrls, clean: None) -> None:
    await seed(servers.database_url, basic_document())
    app = create_app(make_settings(servers, RECORD_WRITER="0"))
    async with AsyncTestClient(app) as client:
        await wait_for_inventory(client)
        assert (await client.get("/readyz")).status_code == 200
        head = await client.head("/readyz")
        assert (head.status_code, head.content) == (200, b"")


async def test_the_deprecation_notice_links_to_guides_that_exist(
    servers: ServerUrls, clean: None
) -> None:
    """Link, `documentation` and `migration_guide` point at /docs/...: they answer a guide."""
    settings = make_settings(servers, RECORD_WRITER="0")
    app = create_app(settings)
    async with AsyncTestClient(app, base_url=settings.server.public_base_url) as client:
        for url in (settings.server.migration_guide_url, settings.server.documentation_url):
            path = url.removeprefix(settings.server.public_base_url)
            assert path.startswith("/docs/"), url
            response = await client.get(path)
            assert response.status_code == 200, url
            assert response.headers["content-type"] == "text/markdown; charset=utf-8"
            assert "OpenRTB" in response.text
        migration = await client.get(
            settings.server.migration_guide_url.removeprefix(settings.server.public_base_url)
        )
        # The migration guide itself, step by step, not the whole OpenRTB reference.
        assert migration.text.startswith("# Migrating from the OpenRTB 2.6 bridge to the Core API")
        assert "accepted_price_cents" in migration.text
        assert "## Endpoints" not in migration.text
        reference = await client.get("/docs/api-openrtb")
        assert reference.text != migration.text
        assert "/docs/migration-openrtb-to-core" in reference.text
        # The guides' relative links to each other (`api-core.md`, `contract.md#6-openrtb-path`)
        # resolve where they are served: every one, in every guide served.
        served = [migration.text, reference.text]
        served += [(await client.get(f"/docs/{name}")).text for name in ("api-core", "contract")]
        links = set(re.findall(r"\]\(([^)#:/]+\.md)(?:#[^)]*)?\)", "\n".join(served)))
        assert {
            "api-core.md",
            "api-openrtb.md",
            "migration-openrtb-to-core.md",
            "contract.md",
        } <= links
        for link in sorted(links):
            linked = await client.get(f"/docs/{link}")
            assert linked.status_code == 200, link
            assert linked.text == (await client.get(f"/docs/{link[:-3]}")).text
        unknown = await client.get("/docs/../../etc/passwd")
        assert unknown.status_code == 404
        assert (await client.get("/docs/decisions")).status_code == 404


async def test_callers_racing_the_first_connect_share_one_pool(servers: ServerUrls) -> None:
    """Every caller of `postgres.connect` before the pool exists (readiness probes, admin
    calls) gets the same pool: one per worker, the one `stop` closes."""
    rt = Runtime(make_settings(servers, RECORD_WRITER="0"))
    try:
        pools = await asyncio.gather(*[rt.postgres.connect() for _ in range(5)])
        assert all(pool is pools[0] for pool in pools)
    finally:
        await rt.stop()
    assert rt.postgres.pool is not None
    assert rt.postgres.pool.is_closing()
    assert await rt.postgres.state() == "unresponsive"  # stopped: no new probe, no new pool


async def test_the_shared_postgres_probe_does_not_log_under_the_request_that_started_it(
    servers: ServerUrls, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe (and the pool's reconnect task it may start) outlives the request that asked
    first, so its logs (asyncpg's reconnect warnings) must not carry that request's id."""
    rt = Runtime(make_settings(servers, RECORD_WRITER="0"))
    seen: list[str] = []
    probe = rt.postgres.probe

    async def recording() -> str:
        seen.append(request_id_var.get())
        return await probe()

    monkeypatch.setattr(rt.postgres, "probe", recording)
    token = request_id_var.set("a-request")
    try:
        assert await rt.postgres.state(wait=5) == "ok"
    finally:
        request_id_var.reset(token)
        await rt.stop()
    assert seen == ["-"]
