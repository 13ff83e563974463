"""A standing bench setup for experiments: where a request's CPU goes, process by process.

    .venv/bin/python -m bench.harness up [--port 8301]         # seed, serve; Ctrl-C stops all
    .venv/bin/python -m bench.harness worker 8302 [NAME=VALUE ...]   # another worker beside it
    .venv/bin/python -m bench.harness measure healthz,offer,bid,accept [--seconds 4]
        [--rounds 3] [--port 8302]

`up` does what `python -m bench` does before it measures (local Redis and Postgres in
`.run/harness/servers` unless REDIS_URL and DATABASE_URL are set, the full bench inventory, one
API key per publisher, one granian worker on CPU 0 with `RECORD_WRITER=0` and a `bidder writer`
on CPU 1) and then waits. `worker` starts one more worker on the same servers and data, for
instance with other settings, or after a code change, since a worker imports the code as it
is when it starts: alternating `measure --port` between two workers compares them on the same
machine minutes apart, which the full bench cannot. `measure` runs wrk on CPU 1 against one
worker (the bench's Lua scripts and request files; accept gets a fresh offer pool before each
run) and reads every process's CPU time from `/proc` around the run, so it prints, per
endpoint, the rate and the CPU each busy process spent per request: the worker, Redis,
Postgres, the record writer and wrk itself. docs/performance.md quotes its figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import resource
import signal
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import redis

from bench import seed, server, throughput, workload
from bench.throughput import WrkResult, WrkRun

ROOT = Path(".run/harness")
INFO = ROOT / "info.json"
#: The endpoints `measure` knows, by the name it takes: (wrk script, request file).
ENDPOINTS = {
    "healthz": ("healthz.lua", "healthz.tsv"),
    "offer": ("offer_request.lua", "offer.tsv"),
    "bid": ("bid.lua", "bid.tsv"),
    "accept": ("accept.lua", "accept.tsv"),
}
#: A process shown by `measure` when it used at least this share of one core.
_SHOWN_SHARE = 0.03


@dataclass
class Info:
    """What `up` leaves for `worker` and `measure`."""

    redis_url: str
    database_url: str
    data: str
    publishers: int
    workers: dict[str, int]  # port -> the pid of the granian process tree's root

    def save(self) -> None:
        INFO.write_text(json.dumps(self.__dict__, indent=2))

    @classmethod
    def load(cls) -> Info:
        if not INFO.exists():
            raise SystemExit("no harness is up: run `python -m bench.harness up` first")
        return cls(**json.loads(INFO.read_text()))


def _wait_for_signal() -> None:
    stopping = False

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while not stopping:
        time.sleep(0.5)


def up(port: int) -> int:
    ROOT.mkdir(parents=True, exist_ok=True)
    backends = server.start_backends(ROOT / "servers")
    workers: list[server.Worker] = []
    try:
        doc = seed.full_document()
        database = asyncio.run(server.fresh_database(backends.database_url, "harness"))
        seeded = server.seed(database, server.fresh_redis(backends.redis_url, 0), doc)
        targets = workload.targets(doc, seeded.keys)
        data = ROOT / "data"
        data.mkdir(exist_ok=True)
        bidding = workload.bidding_in_every(targets, [doc], datetime.now(UTC))
        throughput.write_requests(data / "bid.tsv", workload.bid_lines(bidding, 5_000, seed=4))
        throughput.write_requests(data / "healthz.tsv", workload.healthz_lines())
        throughput.write_requests(
            data / "offer.tsv", workload.offer_request_lines(targets, 5_000, seed=3)
        )
        _, publishers = workload.pool_prep_files(data, targets, per_publisher=5_000, seed=2)
        writer = server.Writer(seeded, ROOT / "writer.log")
        writer.start()
        worker = server.Worker(
            seeded,
            ROOT / f"worker-{port}.log",
            port=port,
            env_overrides={"RECORD_WRITER": "0"},
            writer=writer,
        )
        workers.append(worker)
        worker.start()
        assert worker.proc is not None
        Info(
            seeded.redis_url,
            seeded.database_url,
            str(data),
            publishers,
            {str(port): worker.proc.pid},
        ).save()
        print(f"harness up: worker on :{port}, data in {data}; Ctrl-C stops it", flush=True)
        _wait_for_signal()
    finally:
        for started in workers:
            started.stop()
        backends.stop()
        INFO.unlink(missing_ok=True)
    return 0


def extra_worker(port: int, overrides: list[str]) -> int:
    info = Info.load()
    env = {"RECORD_WRITER": "0"}
    for item in overrides:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"not NAME=VALUE: {item!r}")
        env[name] = value
    seeded = server.Seeded(info.database_url, info.redis_url, {}, 0.0)
    worker = server.Worker(seeded, ROOT / f"worker-{port}.log", port=port, env_overrides=env)
    try:  # the worker runs in a session of its own: Ctrl-C while it starts must stop it too
        worker.start()
        assert worker.proc is not None
        info = Info.load()
        info.workers[str(port)] = worker.proc.pid
        info.save()
        print(f"worker on :{port} ({' '.join(overrides) or 'default settings'}); Ctrl-C stops it")
        _wait_for_signal()
    finally:
        worker.stop()
        if INFO.exists():
            info = Info.load()
            info.workers.pop(str(port), None)
            info.save()
    return 0


def _tokens(pid: int) -> list[str]:
    """A process' command line as words ([] when it is gone). Redis rewrites its title into
    one string with blanks, so the words are split on blanks as well as on NULs."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.replace(b"\0", b" ").decode(errors="replace").split()


def followed_processes(info: Info) -> dict[int, str]:
    """The harness' own processes by pid, named as `measure` shows them: each worker's tree
    (granian's I/O thread included), the Redis server and the Postgres server (all its
    processes) at the harness' ports, and the record writer."""
    named: dict[int, str] = {}
    for port, root in info.workers.items():
        for pid in server.process_tree(root):
            named[pid] = f"worker :{port}"
    redis_port = str(urlsplit(info.redis_url).port)
    postgres_port = str(urlsplit(info.database_url).port)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in named:
            continue
        pid = int(entry.name)
        words = _tokens(pid)
        if not words:
            continue
        program = Path(words[0]).name
        if program in ("redis-server", "valkey-server") and any(
            w.rsplit(":", 1)[-1] == redis_port for w in words[1:]
        ):
            named[pid] = "redis"
        elif program == "postgres" and postgres_port in words:  # the postmaster (-p PORT)
            for child in server.process_tree(pid):
                named[child] = "postgres (all processes)"
        elif "bidder.cli" in words and "writer" in words:
            named[pid] = "record writer"
    return named


def cpu_seconds(pids: Iterable[int]) -> dict[int, float]:
    """User + system CPU seconds so far of each of `pids` still running (every thread)."""
    tick = os.sysconf("SC_CLK_TCK")
    spent: dict[int, float] = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        spent[pid] = (int(fields[11]) + int(fields[12])) / tick
    return spent


def _accept_pool(info: Info, base_url: str, wanted: int) -> Path:
    """A file of accepts of fresh offers (made by wrk, one thread per publisher)."""
    data = Path(info.data)
    pool = data / "pool.txt"
    threads = info.publishers
    throughput.run_wrk(
        WrkRun(
            "offer_pool",
            "offer_request.lua",
            data / "prep-%d.tsv",
            max(3, math.ceil(wanted / 6_000)),
            connections=threads,
            threads=threads,
            harvest="offer",
            quota=math.ceil(wanted / threads),
            out=pool,
        ),
        base_url,
        ROOT / "logs",
    )
    requests = data / "accept.tsv"
    throughput.write_requests(requests, workload.accept_lines(pool))
    return requests


def _reset_commandstats(info: Info) -> None:
    client = redis.Redis.from_url(info.redis_url)
    try:
        client.config_resetstat()
    finally:
        client.close()


def commandstats_lines(stats: dict[str, dict[str, float]], requests: int) -> list[str]:
    """The Redis commands of a run, most time first (those of at least 1 % of it): calls per
    request and microseconds per call (`INFO commandstats`; a script's EVALSHA includes the
    commands it calls, which are listed too)."""
    total = sum(s["usec"] for name, s in stats.items() if name != "cmdstat_evalsha") or 1.0
    lines = []
    for name, stat in sorted(stats.items(), key=lambda kv: -kv[1]["usec"]):
        if name != "cmdstat_evalsha" and stat["usec"] / total < 0.01:
            continue
        lines.append(
            f"    redis {name.removeprefix('cmdstat_'):18s} {stat['calls'] / requests:6.2f} "
            f"calls/request  {stat['usec_per_call']:7.2f} us/call"
        )
    return lines


def _commandstats(info: Info, requests: int) -> list[str]:
    client = redis.Redis.from_url(info.redis_url)
    try:
        stats = client.info("commandstats")
        loop = client.info("stats")
    finally:
        client.close()
    lines = commandstats_lines(stats, requests)
    cycles = int(loop.get("eventloop_cycles", 0))
    if cycles:
        lines.append(f"    redis event loop: {requests / cycles:.1f} requests per cycle")
    return lines


def measure_one(
    info: Info, endpoint: str, port: int, seconds: float, commandstats: bool = False
) -> str:
    script, file = ENDPOINTS[endpoint]
    base_url = f"http://127.0.0.1:{port}"
    data = Path(info.data) / file
    if endpoint == "accept":
        data = _accept_pool(info, base_url, wanted=int(throughput.ACCEPT_POOL_RATE * seconds))
    if commandstats:
        _reset_commandstats(info)
    followed = followed_processes(info)
    before = cpu_seconds(followed)
    wrk_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    run = WrkRun(endpoint, script, data, seconds, once=endpoint == "accept")
    result: WrkResult = throughput.run_wrk(run, base_url, ROOT / "logs")
    wall = time.monotonic() - started
    wrk_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    followed |= followed_processes(info)  # and what started meanwhile (Postgres backends)
    after = cpu_seconds(followed)
    spent: dict[str, float] = {}
    for pid, name in followed.items():
        # A process that ended during the run is left out rather than counted negative.
        used = after.get(pid, before.get(pid, 0.0)) - before.get(pid, 0.0)
        spent[name] = spent.get(name, 0.0) + used
    spent["wrk"] = (wrk_after.ru_utime - wrk_before.ru_utime) + (
        wrk_after.ru_stime - wrk_before.ru_stime
    )
    statuses = ", ".join(f"{s}: {n:,}" for s, n in sorted(result.statuses.items()))
    lines = [f"{endpoint:8s} :{port}  {result.rps:9,.0f} req/s  ({statuses})"]
    requests = max(result.requests, 1)
    for name, seconds_used in sorted(spent.items(), key=lambda kv: -kv[1]):
        if seconds_used / wall >= _SHOWN_SHARE:
            lines.append(
                f"    {100 * seconds_used / wall:5.1f} % of a core  "
                f"{1e6 * seconds_used / requests:7.1f} us/request  {name}"
            )
    if commandstats:
        lines += _commandstats(info, requests)
    return "\n".join(lines)


def measure(
    endpoints: list[str],
    ports: list[int],
    seconds: float,
    rounds: int,
    commandstats: bool = False,
) -> int:
    unknown = [e for e in endpoints if e not in ENDPOINTS]
    if unknown:
        raise SystemExit(f"unknown endpoint {unknown[0]!r}: one of {', '.join(ENDPOINTS)}")
    info = Info.load()
    for number in range(1, rounds + 1):
        for port in ports:
            if str(port) not in info.workers:
                raise SystemExit(f"no harness worker on :{port}")
            for endpoint in endpoints:
                run = measure_one(info, endpoint, port, seconds, commandstats)
                print(f"r{number} " + run, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.harness",
        description="A standing bench setup: where a request's CPU goes.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("up", help="seed, start a worker and a record writer, wait")
    start.add_argument("--port", type=int, default=8301)
    more = commands.add_parser("worker", help="one more worker on the harness' servers")
    more.add_argument("port", type=int)
    more.add_argument("env", nargs="*", metavar="NAME=VALUE")
    runs = commands.add_parser("measure", help="wrk and per-process CPU per request")
    runs.add_argument("endpoints", help="comma-separated: " + ", ".join(ENDPOINTS))
    runs.add_argument("--port", default="", help="comma-separated worker ports (default: all)")
    runs.add_argument("--seconds", type=float, default=4.0)
    runs.add_argument("--rounds", type=int, default=1)
    runs.add_argument(
        "--commandstats",
        action="store_true",
        help="reset Redis' statistics before each run (CONFIG RESETSTAT) and print its "
        "INFO commandstats after it: calls per request and us per call of each command",
    )
    args = parser.parse_args(argv)
    if args.command == "up":
        return up(args.port)
    if args.command == "worker":
        return extra_worker(args.port, args.env)
    ports = [int(p) for p in args.port.split(",") if p] or sorted(
        int(p) for p in Info.load().workers
    )
    return measure(args.endpoints.split(","), ports, args.seconds, args.rounds, args.commandstats)


if __name__ == "__main__":
    sys.exit(main())
