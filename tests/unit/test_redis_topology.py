"""REDIS_MODE and the REDIS_URL forms of each mode (store/hot/topology.py, README's table)."""

from __future__ import annotations

import pytest

from bidder.settings import SettingsError, load_settings
from store.hot.topology import Topology, TopologyError, parse
from store.pipelined_cluster import SLOTS, routing_key

_BASE = {
    "DATABASE_URL": "postgresql://u@h/db",
    "ADMIN_TOKEN": "x" * 24,
    "SIGNING_SECRETS": "y" * 24,
}


def test_single_is_the_default_and_waits_for_no_replica() -> None:
    settings = load_settings({**_BASE, "REDIS_URL": "redis://h:6379/0"})
    assert settings.redis.mode == "single"
    assert settings.redis.wait_replicas == 0


def test_cluster_takes_seed_nodes_and_waits_for_one_replica() -> None:
    url = "redis://:secret@10.0.0.1:7000,redis://10.0.0.2:7001,10.0.0.3"
    settings = load_settings({**_BASE, "REDIS_MODE": "cluster", "REDIS_URL": url})
    assert settings.redis.mode == "cluster"
    assert settings.redis.wait_replicas == 1
    assert parse(url, "cluster") == Topology(
        "cluster",
        (("10.0.0.1", 7000), ("10.0.0.2", 7001), ("10.0.0.3", 6379)),
        None,
        "secret",
    )


def test_sentinel_takes_the_sentinels_and_the_primary_name() -> None:
    url = "redis+sentinel://app:pw@s1:26379,s2/mymaster/2"
    settings = load_settings(
        {**_BASE, "REDIS_MODE": "sentinel", "REDIS_URL": url, "REDIS_WAIT_REPLICAS": "0"}
    )
    assert settings.redis.wait_replicas == 0
    assert parse(url, "sentinel") == Topology(
        "sentinel", (("s1", 26379), ("s2", 26379)), "app", "pw", 2, "mymaster"
    )


@pytest.mark.parametrize(
    ("mode", "url", "problem"),
    [
        ("cluster", "redis://h:7000/3", "database 0 only"),
        ("cluster", "rediss://h:7000", "redis:// seed nodes"),
        ("sentinel", "redis://h:26379/mymaster", "redis+sentinel://"),
        ("sentinel", "redis+sentinel://s1:26379", "primary's name"),
        ("sentinel", "redis+sentinel://s1:26379/m/x", "[/db]"),
    ],
)
def test_a_url_that_does_not_fit_its_mode_is_refused(mode: str, url: str, problem: str) -> None:
    with pytest.raises(TopologyError, match=problem.replace("[", r"\[").replace("+", r"\+")):
        parse(url, mode)  # type: ignore[arg-type]
    with pytest.raises(SettingsError, match="REDIS_URL"):
        load_settings({**_BASE, "REDIS_MODE": mode, "REDIS_URL": url})


def test_an_unknown_mode_or_wait_count_is_refused() -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(
            {
                **_BASE,
                "REDIS_URL": "redis://h",
                "REDIS_MODE": "shard",
                "REDIS_WAIT_REPLICAS": "-1",
            }
        )
    assert any(
        "REDIS_MODE must be one of single, cluster, sentinel" in p for p in refused.value.problems
    )
    assert any("REDIS_WAIT_REPLICAS" in p for p in refused.value.problems)


def test_a_command_routes_by_its_first_key() -> None:
    assert routing_key(("EVALSHA", "abc", 2, "{b3}:budget", "{b3}:day", "x")) == "{b3}:budget"
    assert routing_key(("EVALSHA", "abc", 0, "x")) is None
    assert routing_key(("HGETALL", "{b1}:o:1")) == "{b1}:o:1"
    assert routing_key(("PING",)) is None
    assert routing_key(("SCRIPT", "LOAD", "return 1")) is None
    assert SLOTS == 16384
