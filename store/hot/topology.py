"""Where Redis is: one server (`single`), a Redis Cluster (`cluster`) or a primary watched by
Sentinel (`sentinel`), read from `REDIS_MODE` and `REDIS_URL`.

- `single`: `redis://[user:password@]host:port/db`, `rediss://...` or `unix:///path.sock`.
- `cluster`: one or more seed nodes, `redis://host:port` separated by commas (the first one's
  user and password serve every node; a cluster has database 0 only). The client learns the
  rest of the cluster from any seed that answers.
- `sentinel`: `redis+sentinel://[user:password@]h1:26379,h2:26379/<primary name>[/db]`; the
  user and password are the data nodes'. The client asks the sentinels for the primary at
  each connect, so after a failover it reconnects to the new one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import unquote, urlsplit

RedisMode = Literal["single", "cluster", "sentinel"]
REDIS_MODES: Final = ("single", "cluster", "sentinel")
SENTINEL_SCHEME: Final = "redis+sentinel"


class TopologyError(ValueError):
    """A REDIS_URL that does not fit its REDIS_MODE."""


@dataclass(frozen=True, slots=True)
class Topology:
    """The servers a REDIS_URL names: `nodes` are (host, port) pairs (the seeds of a cluster,
    the sentinels, or the one server), `service` the primary's name under Sentinel."""

    mode: RedisMode
    nodes: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = None
    db: int = 0
    service: str = ""


def _host_port(text: str, default_port: int) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host:
        return text, default_port
    if not port.isdigit():
        raise TopologyError(f"unreadable port in {text!r}")
    return host.strip("[]"), int(port)


def parse(url: str, mode: RedisMode) -> Topology:
    """The servers `url` names in `mode` (TopologyError when it does not fit)."""
    if mode == "single":
        parts = urlsplit(url)
        return Topology(
            "single",
            ((parts.hostname or "127.0.0.1", parts.port or 6379),),
            parts.username,
            parts.password,
            int(parts.path.lstrip("/") or 0) if parts.scheme != "unix" else 0,
        )
    if mode == "cluster":
        return _cluster(url)
    return _sentinel(url)


def _sentinel(url: str) -> Topology:
    parts = urlsplit(url)
    if parts.scheme != SENTINEL_SCHEME:
        raise TopologyError(
            f"REDIS_MODE=sentinel takes {SENTINEL_SCHEME}://h1:26379,h2:26379/<primary name>[/db]"
        )
    userinfo, _, hosts = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":") if userinfo else ("", "", "")
    sentinels = tuple(_host_port(h, 26379) for h in hosts.split(",") if h)
    path = [p for p in parts.path.split("/") if p]
    if not sentinels or not path:
        raise TopologyError("REDIS_MODE=sentinel needs the sentinels and the primary's name")
    if len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise TopologyError("the sentinel URL's path is /<primary name>[/db]")
    return Topology(
        "sentinel",
        sentinels,
        unquote(username) or None,
        unquote(password) or None,
        int(path[1]) if len(path) == 2 else 0,
        unquote(path[0]),
    )


def _cluster(url: str) -> Topology:
    nodes: list[tuple[str, int]] = []
    username = password = None
    for index, text in enumerate(part.strip() for part in url.split(",")):
        if not text:
            continue
        parts = urlsplit(text if "://" in text else f"redis://{text}")
        if parts.scheme != "redis":
            raise TopologyError("REDIS_MODE=cluster takes redis:// seed nodes")
        if parts.path.strip("/") not in ("", "0"):
            raise TopologyError("a Redis Cluster has database 0 only")
        if index == 0:
            username, password = parts.username, parts.password
        nodes.append(_host_port(parts.netloc.rpartition("@")[2], 6379))
    if not nodes:
        raise TopologyError("REDIS_MODE=cluster needs at least one seed node")
    return Topology(
        "cluster",
        tuple(nodes),
        unquote(username) if username else None,
        unquote(password) if password else None,
    )
