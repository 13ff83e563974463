"""`python -m bench --redis cluster`: the sizing table, measured on a local Redis Cluster.

The service runs as in the default bench (one granian worker on CPU 0 with `RECORD_WRITER=0`, a
`bidder writer` on CPU 1, Postgres from `.run/bench/servers` or DATABASE_URL, the full bench
inventory), but on a local Redis Cluster of three primaries with a replica each
(store/local_cluster.py, `REDIS_MODE=cluster`). `rounds` interleaved rounds of the three hot
routes (offer request, bid, accept on a fresh offer pool) each read, around the wrk run, the CPU
time of the worker (all its processes), the record writer and Postgres (from /proc) and of each
primary (`INFO cpu`), and give the CPU each spent per request. The offer request and the bid
queue no record: the writer is held during their runs (on a cluster it polls the empty queues
every 20 ms, a cost of its own, not theirs). Each route's figures are its
median round (by req/s). The report's sizing table turns them into what one worker core, one
Redis primary and one Postgres core serve a second (docs/operations.md, "Sizing"), and gives
each primary's share of the Redis work; the invariants are checked at the end as in the
default bench. No Locust, paced runs or 20-campaign comparison: the default bench has them.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import redis

from bench import invariants, report, seed, server, throughput, workload
from bench.harness import cpu_seconds
from bench.run import PROJECT, BenchConfig, Outcome, Throughput, log
from bench.throughput import WrkResult, WrkRun
from matching.inventory import InventoryDocument
from store.hot import connect
from store.local_cluster import LocalRedisCluster

#: The hot routes, in the order of a round, and the name the table gives each.
ROUTES = {
    "offer": "Core offer request",
    "bid": "OpenRTB bid",
    "accept": "Core accept (record written)",
}
#: A process is shown in a route's row when it used at least this share of a core.
SHOWN_SHARE = 0.03
WORKER, WRITER, POSTGRES = "worker", "record writer", "postgres"
PRIMARY_PREFIX = "redis primary :"
REPLICA_PREFIX = "redis replica :"


@dataclass(frozen=True)
class RouteRun:
    """One wrk run of a route and the CPU seconds each followed process spent during it
    (`worker`, `record writer`, `postgres`, and `redis primary :<port>` per primary)."""

    route: str
    rps: float
    requests: int
    wall_s: float
    cpu_s: dict[str, float]
    errors: int = 0

    def us_per_request(self, name: str) -> float | None:
        """CPU microseconds per request of `name`; None when it used less than SHOWN_SHARE of a
        core (it took no real part in the route)."""
        used = self.cpu_s.get(name, 0.0)
        if self.requests <= 0 or self.wall_s <= 0 or used / self.wall_s < SHOWN_SHARE:
            return None
        return 1e6 * used / self.requests

    @property
    def primaries(self) -> dict[str, float]:
        return {k: v for k, v in self.cpu_s.items() if k.startswith(PRIMARY_PREFIX)}

    @property
    def redis_us(self) -> float | None:
        """The Redis CPU per request, summed over the primaries (each request's scripts run on
        the one primary of its shard, so this is what a primary spends on a request)."""
        used = sum(self.primaries.values())
        if self.requests <= 0:
            return None
        return 1e6 * used / self.requests

    @property
    def replicas_us(self) -> float | None:
        """The replicas' CPU per request, summed (what applying the primaries' writes costs);
        None when no replica was followed."""
        used = [v for k, v in self.cpu_s.items() if k.startswith(REPLICA_PREFIX)]
        if not used or self.requests <= 0:
            return None
        return 1e6 * sum(used) / self.requests

    @property
    def busiest_share(self) -> float | None:
        """The busiest primary's share of the Redis work (1/3 is an even spread on three)."""
        used = self.primaries
        total = sum(used.values())
        return max(used.values()) / total if total > 0 else None


@dataclass(frozen=True)
class SizingRow:
    route: str
    rps: float
    worker_us: float | None
    redis_us: float | None
    writer_us: float | None
    postgres_us: float | None
    busiest_share: float | None

    @staticmethod
    def _per_core(us: float | None) -> float | None:
        return 1e6 / us if us else None

    @property
    def per_worker_core(self) -> float | None:
        return self._per_core(self.worker_us)

    @property
    def per_redis_primary(self) -> float | None:
        return self._per_core(self.redis_us)

    @property
    def per_postgres_core(self) -> float | None:
        return self._per_core(self.postgres_us)


def median_round(runs: list[RouteRun]) -> RouteRun:
    """The round with the median req/s (the lower middle for an even count), as the default
    bench picks its peaks."""
    ordered = sorted(runs, key=lambda r: r.rps)
    return ordered[(len(ordered) - 1) // 2]


def sizing_row(runs: list[RouteRun]) -> SizingRow:
    chosen = median_round(runs)
    return SizingRow(
        route=chosen.route,
        rps=chosen.rps,
        worker_us=chosen.us_per_request(WORKER),
        redis_us=chosen.redis_us,
        writer_us=chosen.us_per_request(WRITER),
        postgres_us=chosen.us_per_request(POSTGRES),
        busiest_share=chosen.busiest_share,
    )


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} us"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} /s"


def sizing_table(rows: list[SizingRow]) -> str:
    """The table docs/operations.md ("Sizing") has, from these runs."""
    lines = [
        "| Route | req/s | Worker | Redis (primaries) | Busiest primary | Record writer "
        "| Postgres | Per worker core | Per Redis primary | Per Postgres core |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        share = "-" if row.busiest_share is None else f"{100 * row.busiest_share:.0f} %"
        lines.append(
            f"| {ROUTES.get(row.route, row.route)} | {row.rps:,.0f} | {_us(row.worker_us)} "
            f"| {_us(row.redis_us)} | {share} | {_us(row.writer_us)} | {_us(row.postgres_us)} "
            f"| {_rate(row.per_worker_core)} | {_rate(row.per_redis_primary)} "
            f"| {_rate(row.per_postgres_core)} |"
        )
    return "\n".join(lines)


def rounds_table(runs: dict[str, list[RouteRun]]) -> str:
    """Every round of every route: req/s, CPU per request, each primary's share."""
    lines = [
        "| Route | Round | req/s | Worker | Redis (primaries) | Primaries' shares "
        "| Redis (replicas) | Record writer | Postgres |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for route, route_runs in runs.items():
        for number, run in enumerate(route_runs, 1):
            total = sum(run.primaries.values())
            shares = (
                " / ".join(f"{100 * v / total:.0f} %" for _, v in sorted(run.primaries.items()))
                if total > 0
                else "-"
            )
            lines.append(
                f"| {ROUTES.get(route, route)} | {number} | {run.rps:,.0f} "
                f"| {_us(run.us_per_request(WORKER))} | {_us(run.redis_us)} | {shares} "
                f"| {_us(run.replicas_us)} | {_us(run.us_per_request(WRITER))} "
                f"| {_us(run.us_per_request(POSTGRES))} |"
            )
    return "\n".join(lines)


@dataclass
class SizingReport:
    day: str
    commit: str
    command: str
    settings: dict[str, str]
    machine: dict[str, str]
    versions: dict[str, str]
    runs: dict[str, list[RouteRun]]
    checks: list[invariants.Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        rows = [sizing_row(r) for r in self.runs.values() if r]
        parts = [
            f"# Bench sizing on a local Redis Cluster, {self.day}, commit {self.commit}",
            "",
            f"Command: `{self.command}`",
            "",
            *report.context_lines(self.settings, self.machine, self.versions),
            "## Sizing",
            "",
            "CPU per request of each process (the median round of each route, by req/s) and "
            "what one core of each serves a second at that cost. Redis is the three primaries' "
            "CPU summed: each request's scripts run on the primary of its shard, so a primary "
            "spends that much on each request it serves. A `-` is a process that used less "
            f"than {100 * SHOWN_SHARE:.0f} % of a core during the run.",
            "",
            sizing_table(rows),
            "",
            "## Rounds",
            "",
            rounds_table(self.runs),
            "",
            "## Invariants",
            "",
            *[f"- {'ok' if c.ok else 'FAILED'}: {c.name} ({c.detail})" for c in self.checks],
        ]
        if self.notes:
            parts += ["", "## Notes", "", *[f"- {note}" for note in self.notes]]
        return "\n".join(parts) + "\n"


# -- the run ------------------------------------------------------------------------------------


def _postgres_pids(database_url: str) -> list[int]:
    """Every process of the local Postgres server that serves `database_url` (none when it
    runs elsewhere)."""
    port = str(urlsplit(database_url).port or 5432)
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().split()
        except OSError:
            continue
        if words and Path(words[0]).name == "postgres" and port in words:
            found += server.process_tree(int(entry.name))
    return found


class CpuSampler:
    """The CPU seconds so far of the worker, the writer, Postgres and each primary."""

    def __init__(self, worker: server.Worker, cluster: LocalRedisCluster, database_url: str):
        self.worker = worker
        self.cluster = cluster
        self.database_url = database_url
        self.primaries = cluster.primary_ports()
        self.replicas = [n.port for n in cluster.running() if n.port not in self.primaries]

    def sample(self) -> dict[str, float]:
        spent: dict[str, float] = {}
        groups = {WORKER: self.worker.worker_pids(), POSTGRES: _postgres_pids(self.database_url)}
        writer = self.worker.writer
        if writer is not None and writer.proc is not None:
            groups[WRITER] = server.process_tree(writer.proc.pid)
        for name, pids in groups.items():
            spent[name] = sum(cpu_seconds(pids).values())
        for prefix, ports in ((PRIMARY_PREFIX, self.primaries), (REPLICA_PREFIX, self.replicas)):
            for port in ports:
                client = redis.Redis(port=port)
                try:
                    info = client.info("cpu")
                finally:
                    client.close()
                spent[f"{prefix}{port}"] = float(info["used_cpu_sys"]) + float(
                    info["used_cpu_user"]
                )
        return spent


def _drain(cluster_url: str) -> None:
    async def wait() -> None:
        client = connect(cluster_url, timeout=5.0, mode="cluster")
        try:
            await invariants.wait_drained(client, 120.0)
        finally:
            await client.aclose()

    asyncio.run(wait())


async def _checks(
    cluster_url: str, database_url: str, seen: invariants.Acknowledged
) -> list[invariants.Check]:
    client = connect(cluster_url, timeout=5.0, mode="cluster")
    try:
        return await invariants.check_all(client, database_url, seen)
    finally:
        await client.aclose()


def run_cluster(cfg: BenchConfig) -> int:
    """The cluster sizing run (see the module's docstring); 0 when every invariant held."""
    commit = report.source_commit(PROJECT)
    try:
        throughput.wrk_binary()
    except throughput.WrkMissing as exc:
        log(f"the cluster sizing run needs wrk: {exc}")
        return 2
    cfg.root.mkdir(parents=True, exist_ok=True)
    doc = seed.full_document()
    outcome = Outcome()
    backends = server.start_backends(cfg.root / "servers")
    folder = (cfg.root / "cluster").resolve()
    shutil.rmtree(folder, ignore_errors=True)
    cluster = LocalRedisCluster(folder)
    try:
        log("starting a local Redis Cluster (3 primaries, a replica each)")
        cluster.start()
        runs, checks = _measure(cfg, cluster, backends.database_url, doc, outcome)
    finally:
        cluster.stop()
        backends.stop()
    sized = SizingReport(
        day=f"{datetime.now(UTC).date()}",
        commit=commit,
        command=cfg.command,
        settings={
            "redis": "a local Redis Cluster: 3 primaries with a replica each "
            "(store/local_cluster.py), REDIS_MODE=cluster, REDIS_WAIT_REPLICAS unset (1), "
            "BUDGET_SLICES=16",
            "rounds": str(cfg.rounds),
            "wrk seconds per run": f"{cfg.wrk_seconds:g}",
            "inventory": f"{len(doc.publishers)} publishers, {len(doc.screens):,} screens, "
            f"{len(doc.campaigns):,} campaigns (bench/seed.py, seed {seed.FULL_SEED})",
            "worker": "one granian worker (asgi, uvloop), taskset -c 0; LOG_LEVEL=WARNING, "
            "RECORD_WRITER=0, one `bidder writer` on CPU 1, OFFER_TTL_SECONDS=1800, "
            "OFFER_HASH=lean, COUNT_DAY_RESERVATIONS=0",
            "load": f"wrk -t1 on CPU 1, {throughput.PEAK_CONNECTIONS} connections; offer "
            "request, bid and accept (a fresh offer pool each round) in interleaved rounds; "
            "the record writer held (SIGSTOP) during the offer request and bid runs, which "
            "queue no record (on a cluster it polls the empty queues every 20 ms)",
            **outcome.settings,
        },
        machine=report.machine(),
        versions={**report.package_versions(), **outcome.versions},
        runs=runs,
        checks=checks,
        notes=outcome.notes,
    )
    path = cfg.results / f"{sized.day}-{cfg.scenario}-{commit}.md"
    cfg.results.mkdir(parents=True, exist_ok=True)
    path.write_text(sized.markdown())
    for check in checks:
        log(f"{'ok    ' if check.ok else 'FAILED'} {check.name}: {check.detail}")
    log(f"report: {path}")
    return 0 if checks and all(c.ok for c in checks) else 1


def _measure(
    cfg: BenchConfig,
    cluster: LocalRedisCluster,
    admin_url: str,
    doc: InventoryDocument,
    outcome: Outcome,
) -> tuple[dict[str, list[RouteRun]], list[invariants.Check]]:
    """Seed, serve on the cluster, run the rounds, check the invariants."""
    database = asyncio.run(server.fresh_database(admin_url, "bench_cluster"))
    seeded = server.seed(database, cluster.url, doc)
    seeded.redis_mode = "cluster"
    outcome.versions = {"redis server": _server_version(cluster.primary_ports()[0])}
    data = cfg.root / "data-cluster"
    data.mkdir(parents=True, exist_ok=True)
    targets = workload.targets(doc, seeded.keys)
    throughput.write_requests(
        data / "offer.tsv", workload.offer_request_lines(targets, 20_000, seed=1)
    )
    throughput.write_requests(data / "bid.tsv", workload.bid_lines(targets, 5_000, seed=2))
    writer = server.Writer(seeded, cfg.root / "logs" / "writer-cluster.log")
    writer.start()
    worker = server.Worker(
        seeded,
        cfg.root / "logs" / "worker-cluster.log",
        env_overrides={"RECORD_WRITER": "0", "BUDGET_SLICES": "16"},
        writer=writer,
    )
    runs: dict[str, list[RouteRun]] = {route: [] for route in ROUTES}
    try:
        log(f"starting the worker on :{worker.port} (REDIS_MODE=cluster)")
        worker.start()
        runner = _Sampled(
            cfg, worker.base_url, data, outcome, CpuSampler(worker, cluster, database)
        )
        for number in range(1, cfg.rounds + 1):
            log(f"round {number} of {cfg.rounds}")
            for route, script in (("offer", "offer_request.lua"), ("bid", "bid.lua")):
                _drain(cluster.url)
                name = f"{route}-r{number}"
                # An offer request and a bid queue no record; the writer, which on a cluster
                # polls the 16 queues every 20 ms when they are empty, is held meanwhile so
                # its polling is not counted as theirs.
                with writer.held():
                    spec = WrkRun(name, script, data / f"{route}.tsv", cfg.wrk_seconds)
                    result = runner.run(spec)
                runs[route].append(runner.route_run(route, name, result))
            _drain(cluster.url)
            offer_rps = runs["offer"][-1].rps
            accepted = runner.accept(targets, f"r{number}", offer_rps, seed=2 + number)
            runs["accept"].append(runner.route_run("accept", f"accept-r{number}", accepted))
        log("checking the invariants (waiting for the record queue to drain)")
        checks = asyncio.run(_checks(cluster.url, database, outcome.seen))
    finally:
        worker.stop()  # and the writer
    return runs, checks


def _server_version(port: int) -> str:
    client = redis.Redis(port=port)
    try:
        info = client.info("server")
    finally:
        client.close()
    return str(info.get("valkey_version") or info.get("redis_version") or "unknown")


class _Sampled(Throughput):
    """The default bench's wrk runs (bench.run.Throughput: the accept's offer pool, the deal
    ids harvested for the invariants), each run's CPU per process kept by its name."""

    def __init__(
        self, cfg: BenchConfig, base_url: str, data: Path, outcome: Outcome, sampler: CpuSampler
    ) -> None:
        super().__init__(cfg, base_url, data, outcome)
        self.sampler = sampler
        self.cpu: dict[str, tuple[dict[str, float], float]] = {}

    def run(self, spec: WrkRun) -> WrkResult:
        before = self.sampler.sample()
        started = time.monotonic()
        result = super().run(spec)
        wall = time.monotonic() - started
        after = self.sampler.sample()
        self.cpu[spec.name] = ({k: after[k] - before.get(k, 0.0) for k in after}, wall)
        return result

    def route_run(self, route: str, name: str, result: WrkResult) -> RouteRun:
        used, wall = self.cpu.get(name, ({}, 0.0))
        return RouteRun(route, result.rps, result.requests, wall, used, result.server_errors)
