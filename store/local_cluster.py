"""A local Redis Cluster from the same Valkey/Redis binary as `LocalServers`: three primaries
with a replica each (by default), `cluster-enabled yes`, on free loopback ports; and a local
Sentinel topology (`LocalSentinel`: a primary, a replica, sentinels).

The cluster is formed by hand (CLUSTER ADDSLOTSRANGE, MEET, REPLICATE), so no `redis-cli`
is needed. A node's cluster bus listens on a free port of its own (`cluster-port`), not on
the client port plus 10000, which may be out of range or taken. Used by the test session
(`pytest --redis=cluster`) and the bench (`--redis cluster`).
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from redis.crc import key_slot

from store.local_servers import (
    LocalServerError,
    RedisServer,
    free_port,
    redis_server_binary,
    stop_process,
)

SLOTS = 16384
#: How long a primary may be unreachable before its replica takes over (ms).
NODE_TIMEOUT_MS = 1000
_FORM_TIMEOUT_S = 60.0


def _client(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5, decode_responses=True)


def _cmd(port: int, *command: str | int) -> Any:
    """One command on the node at `port` (a fresh connection: nodes come and go)."""
    with _client(port) as client:
        return client.execute_command(*command)


def _text_info(reply: object) -> dict[str, str]:
    lines = str(reply).splitlines()
    return dict(line.split(":", 1) for line in lines if ":" in line)


@dataclass
class LocalRedisCluster:
    """`primaries` primaries and `replicas` replicas each, in `folder/node-<port>`."""

    folder: Path
    primaries: int = 3
    replicas: int = 1
    appendfsync: str = "everysec"
    nodes: list[RedisServer] = field(default_factory=list)
    #: Each node's cluster bus port, by client port.
    bus_ports: dict[int, int] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """REDIS_URL for REDIS_MODE=cluster: every node as a seed."""
        return ",".join(f"redis://127.0.0.1:{node.port}" for node in self.nodes)

    def start(self) -> None:
        count = self.primaries * (1 + self.replicas)
        try:
            for _ in range(count):
                port, bus = free_port(), free_port()
                node = RedisServer(
                    self.folder / f"node-{port}",
                    port,
                    self.appendfsync,
                    extra_args=(
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        str(NODE_TIMEOUT_MS),
                        "--cluster-port",
                        str(bus),
                        "--cluster-require-full-coverage",
                        "no",
                    ),
                )
                self.nodes.append(node)
                self.bus_ports[port] = bus
                node.start()
            self._form()
        except BaseException:
            self.stop()
            raise

    def _form(self) -> None:
        primaries = self.nodes[: self.primaries]
        share = SLOTS // self.primaries
        for index, node in enumerate(primaries):
            first = index * share
            last = SLOTS - 1 if index == self.primaries - 1 else first + share - 1
            _cmd(node.port, "CLUSTER", "ADDSLOTSRANGE", first, last)
        for node in self.nodes[1:]:
            _cmd(
                self.nodes[0].port,
                "CLUSTER",
                "MEET",
                "127.0.0.1",
                node.port,
                self.bus_ports[node.port],
            )
        self._wait(lambda: all(self._known(n) == len(self.nodes) for n in self.nodes), "meet")
        ids = [_cmd(n.port, "CLUSTER", "MYID") for n in primaries]
        replicas = self.nodes[self.primaries :]
        for index, node in enumerate(replicas):
            primary_id = ids[index % self.primaries]
            # The replica must have heard of its primary through the bus before it follows it.
            self._wait(lambda n=node, p=primary_id: self._knows(n, p), "replica sees primary")
            _cmd(node.port, "CLUSTER", "REPLICATE", primary_id)
        self.wait_ok()

    @staticmethod
    def _known(node: RedisServer) -> int:
        return len(str(_cmd(node.port, "CLUSTER", "NODES")).splitlines())

    @staticmethod
    def _knows(node: RedisServer, node_id: str) -> bool:
        return node_id in str(_cmd(node.port, "CLUSTER", "NODES"))

    def _state_ok(self, node: RedisServer) -> bool:
        info = _text_info(_cmd(node.port, "CLUSTER", "INFO"))
        return info.get("cluster_state") == "ok"

    def wait_ok(self, timeout: float = _FORM_TIMEOUT_S) -> None:
        """Until every running node reports cluster_state:ok, every slot served by a primary,
        and every running replica is in sync with its primary."""

        def ready() -> bool:
            for node in self.running():
                if not self._state_ok(node):
                    return False
                role = _cmd(node.port, "ROLE")
                if role[0] == "slave" and role[3] != "connected":
                    return False
            return True

        self._wait(ready, "cluster ok", timeout)

    @staticmethod
    def _wait(check: object, what: str, timeout: float = _FORM_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if check():  # type: ignore[operator]
                    return
            except redis.RedisError:
                pass
            time.sleep(0.05)
        raise LocalServerError(f"the local Redis Cluster did not reach '{what}' in time")

    def running(self) -> Iterator[RedisServer]:
        return (node for node in self.nodes if node.proc is not None)

    def primary_ports(self) -> list[int]:
        """The ports of the nodes that are primaries now."""
        return [node.port for node in self.running() if _cmd(node.port, "ROLE")[0] == "master"]

    @staticmethod
    def slot_of(key: str) -> int:
        return key_slot(key.encode())

    def primary_of_or_none(self, slot: int) -> int | None:
        """The port of the running primary that says it serves `slot`, if one does."""
        for node in self.running():
            try:
                lines = str(_cmd(node.port, "CLUSTER", "NODES")).splitlines()
            except redis.RedisError:
                continue
            mine = next((line.split() for line in lines if "myself" in line), None)
            if mine is None or "master" not in mine[2]:
                continue
            for part in mine[8:]:
                if part.startswith("["):
                    continue
                first, _, last = part.partition("-")
                if int(first) <= slot <= int(last or first):
                    return node.port
        return None

    def primary_of(self, slot: int) -> int:
        port = self.primary_of_or_none(slot)
        if port is None:
            raise LocalServerError(f"no primary serves slot {slot}")
        return port

    def wait_new_primary(self, slot: int, old: int, timeout: float = 30.0) -> int:
        """The port of the node that serves `slot` after `old` failed (its replica, promoted)."""
        found: list[int] = []

        def promoted() -> bool:
            port = self.primary_of_or_none(slot)
            if port is None or port == old:
                return False
            found.append(port)
            return True

        self._wait(promoted, "failover", timeout)
        return found[-1]

    def migrate_slot(self, slot: int, source: int, target: int, batch: int = 100) -> int:
        """Move `slot` from the primary at `source` to the one at `target` as an online reshard
        does (IMPORTING/MIGRATING, MIGRATE in batches of `batch` keys, then SETSLOT NODE on
        every primary); how many keys moved."""
        source_id = _cmd(source, "CLUSTER", "MYID")
        target_id = _cmd(target, "CLUSTER", "MYID")
        _cmd(target, "CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        _cmd(source, "CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        moved = 0
        while True:
            keys = _cmd(source, "CLUSTER", "GETKEYSINSLOT", slot, batch)
            if not keys:
                break
            _cmd(source, "MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", *keys)
            moved += len(keys)
            time.sleep(0.002)  # traffic runs between the batches
        for port in [
            target,
            source,
            *(p for p in self.primary_ports() if p not in (source, target)),
        ]:
            _cmd(port, "CLUSTER", "SETSLOT", slot, "NODE", target_id)
        return moved

    def node(self, port: int) -> RedisServer:
        return next(node for node in self.nodes if node.port == port)

    def flushall(self) -> None:
        """Empty every primary (the replicas follow)."""
        for port in self.primary_ports():
            _cmd(port, "FLUSHALL")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop(kill=True)


@dataclass
class LocalSentinel:
    """A primary, a replica and `sentinels` sentinels watching them as `service`, in `folder`:
    the Sentinel topology of REDIS_MODE=sentinel, from the same binary."""

    folder: Path
    service: str = "mymaster"
    sentinels: int = 1
    nodes: list[RedisServer] = field(default_factory=list)
    sentinel_ports: list[int] = field(default_factory=list)
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        """REDIS_URL for REDIS_MODE=sentinel."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{self.service}/0"

    def start(self) -> None:
        try:
            primary = RedisServer(self.folder / "primary", free_port())
            primary.start()
            self.nodes.append(primary)
            replica = RedisServer(
                self.folder / "replica",
                free_port(),
                extra_args=("--replicaof", "127.0.0.1", str(primary.port)),
            )
            replica.start()
            self.nodes.append(replica)
            for index in range(self.sentinels):
                self._start_sentinel(index, primary.port)
            LocalRedisCluster._wait(lambda: self.primary_port() == primary.port, "sentinel")
            LocalRedisCluster._wait(self._replica_in_step, "replica in step")
        except BaseException:
            self.stop()
            raise

    def _start_sentinel(self, index: int, primary_port: int) -> None:
        port = free_port()
        folder = self.folder / f"sentinel-{index}"
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / "sentinel.conf"
        config.write_text(
            f"port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {folder}\n"
            f"logfile {folder / 'sentinel.log'}\n"
            f"sentinel monitor {self.service} 127.0.0.1 {primary_port} 1\n"
            f"sentinel down-after-milliseconds {self.service} {NODE_TIMEOUT_MS}\n"
            f"sentinel failover-timeout {self.service} 5000\n"
        )
        proc = subprocess.Popen(  # noqa: S603 - our own binary, our own file
            [str(redis_server_binary()), str(config), "--sentinel"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._procs.append(proc)
        self.sentinel_ports.append(port)
        LocalRedisCluster._wait(lambda: _ping(port), "sentinel up")

    def primary_port(self) -> int | None:
        """The primary's port as the first sentinel names it."""
        reply = _cmd(self.sentinel_ports[0], "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
        return int(reply[1]) if reply else None

    def _replica_in_step(self) -> bool:
        role = _cmd(self.nodes[1].port, "ROLE")
        return bool(role[0] == "slave" and role[3] == "connected")

    def wait_new_primary(self, old: int, timeout: float = 30.0) -> int:
        """The port of the primary the sentinels promoted after `old` failed."""
        LocalRedisCluster._wait(
            lambda: self.primary_port() not in (None, old), "sentinel failover", timeout
        )
        port = self.primary_port()
        assert port is not None
        return port

    def node(self, port: int) -> RedisServer:
        return next(node for node in self.nodes if node.port == port)

    def stop(self) -> None:
        for proc in self._procs:
            stop_process(proc, signal.SIGKILL, 5)
        self._procs.clear()
        for node in self.nodes:
            node.stop(kill=True)


def _ping(port: int) -> bool:
    return bool(_cmd(port, "PING"))
