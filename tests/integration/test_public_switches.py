"""PUBLIC_ADMIN=0 and PUBLIC_METRICS=0: the public listener answers 404 for the admin API and
`/metrics` (docs/operations.md, "A safe perimeter"); by default it serves both."""

from __future__ import annotations

import pytest

from tests.support.admin import ADMIN
from tests.support.core import live_app
from tests.support.servers import ServerUrls, make_settings

ADMIN_API = ("/admin/v1/inventory", "/docs/openapi-admin.json")


@pytest.mark.parametrize(
    ("switches", "admin_status", "metrics_status"),
    [
        ({}, 200, 200),
        ({"PUBLIC_ADMIN": "0"}, 404, 200),
        ({"PUBLIC_METRICS": "0"}, 200, 404),
        ({"PUBLIC_ADMIN": "0", "PUBLIC_METRICS": "0"}, 404, 404),
    ],
)
async def test_public_switches(
    servers: ServerUrls,
    clean: None,
    switches: dict[str, str],
    admin_status: int,
    metrics_status: int,
) -> None:
    async with live_app(make_settings(servers, RECORD_WRITER="0", **switches)) as live:
        for path in ADMIN_API:
            answer = await live.client.get(path, headers=ADMIN)
            assert answer.status_code == admin_status, (path, answer.text)
        metrics = await live.client.get("/metrics")
        assert metrics.status_code == metrics_status
        if metrics_status == 404:
            assert set(metrics.json()) == {"error"}
        assert (await live.client.get("/docs/openapi-core.json")).status_code == 200
        assert (await live.client.get("/healthz")).status_code == 200
