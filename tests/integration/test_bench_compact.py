"""The bench compacts Redis' append-only file before a measuring phase, so an automatic rewrite
(a fork and a busy child) does not land inside a latency run."""

from __future__ import annotations

import redis

from bench.server import compact_redis
from tests.support.servers import ServerUrls


def test_compact_rewrites_the_aof_and_waits_for_it(servers: ServerUrls) -> None:
    client = redis.Redis.from_url(servers.redis_url)
    try:
        before = client.info("persistence")
        if not before.get("aof_enabled"):
            assert compact_redis(servers.redis_url) is False
            return
        assert compact_redis(servers.redis_url) is True
        after = client.info("persistence")
        assert after["aof_rewrites"] == before["aof_rewrites"] + 1
        assert after["aof_rewrite_in_progress"] == 0
        assert after["aof_rewrite_scheduled"] == 0
    finally:
        client.close()
