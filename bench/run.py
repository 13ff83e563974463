"""`python -m bench` / `bidder bench`: seed, serve, load, check, report.

Phases, one at a time (the machine has two cores: the worker on CPU 0, the load on CPU 1):

1. Redis + Postgres (.run/bench, or REDIS_URL / DATABASE_URL), the full inventory seeded,
   one API key per publisher, one granian worker pinned to CPU 0.
2. wrk peak runs: `rounds` interleaved rounds of /healthz (the ceiling), offer request, bid
   (harvesting the `lurl`s) and accept (an offer pool made by offer requests just before it, one
   wrk thread per publisher so each offer's key is known; each pooled offer accepted once),
   the record queue drained between rounds; each endpoint's peak the round with the median
   req/s (back-to-back runs of the same code vary by about ±30 % on this shared machine); then
   the loss notice (the harvested `lurl`s of every round).
3. wrk paced runs at half of the offer request's and the bid's (median) peak, `rounds` runs
   each; the run with the median p99 (p50 for the inventory-size comparison) stands for them.
4. Locust: publisher flow, SSP flow, demo traffic and bad input, every answer checked.
5. Worker RSS; invariants once the record queue has drained.
6. The small variant (20 campaigns, same screens) in its own database: bid peak and bid paced
   at the same rate as the full inventory's paced bid, to compare p50.
7. bench/results/<date>-<scenario>-<commit>.md and .png: the commit measured (taken when the
   run starts), the command line and the settings head the report.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import importlib.util
import json
import math
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
from redis.asyncio import Redis

from bench import invariants, report, seed, server, throughput, workload
from bench.throughput import WrkResult, WrkRun
from matching.inventory import InventoryDocument
from store.hot import connect

ROOT = Path(".run/bench")
PROJECT = Path(__file__).resolve().parent.parent


@dataclass
class BenchConfig:
    scenario: str = "full"
    quick: bool = False
    skip_wrk: bool = False
    skip_locust: bool = False
    skip_small: bool = False
    wrk_seconds: float = 10.0
    rounds: int = 3
    locust_seconds: int = 30
    locust_users: int = 40
    root: Path = ROOT
    results: Path = report.RESULTS_DIR
    command: str = "python -m bench"
    # The record writer as its own process on CPU 1 (production's layout: RECORD_WRITER=0 in
    # the web workers, `bidder writer` processes beside them); `--writer in-worker` for the
    # worker's own writer. docs/performance.md, "What was tried".
    separate_writer: bool = True
    # `cluster`: the sizing run on a local Redis Cluster (bench/sizing.py) instead of this one.
    redis: str = "single"

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> BenchConfig:
        cfg = cls(
            scenario=args.scenario or ("quick" if args.quick else "full"),
            quick=args.quick,
            skip_wrk=args.skip_wrk,
            skip_locust=args.skip_locust,
            skip_small=args.skip_small,
            root=Path(args.root),
            results=Path(args.results),
            command=args.command_line,
            separate_writer=args.writer == "separate",
            redis=args.redis,
        )
        if args.redis == "cluster" and not args.scenario:
            cfg.scenario = "cluster-quick" if args.quick else "cluster"
        if args.quick:
            cfg.wrk_seconds, cfg.locust_seconds, cfg.locust_users = 3.0, 8, 20
            cfg.rounds = 1
        if args.rounds is not None:
            cfg.rounds = args.rounds
        if args.wrk_seconds:
            cfg.wrk_seconds = args.wrk_seconds
        if args.locust_seconds:
            cfg.locust_seconds = args.locust_seconds
        return cfg


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="a smoke run (about 75 s)")
    parser.add_argument("--skip-wrk", action="store_true", help="no throughput runs")
    parser.add_argument("--skip-locust", action="store_true", help="no Locust scenarios")
    parser.add_argument("--skip-small", action="store_true", help="no 20-campaign comparison")
    parser.add_argument(
        "--scenario",
        "--name",
        dest="scenario",
        type=report.scenario_argument,
        default=None,
        help="the scenario, in the report's name <date>-<scenario>-<commit> (default: full, "
        "or quick with --quick); lowercase letters and digits, words joined by dashes",
    )
    parser.add_argument("--wrk-seconds", type=float, default=0.0, help="seconds per wrk run")
    parser.add_argument(
        "--rounds",
        type=_at_least_one,
        default=None,
        metavar="N",
        help="interleaved rounds of the /healthz, offer request, bid and accept peaks; each "
        "peak is the median round (default 3, 1 with --quick)",
    )
    parser.add_argument("--locust-seconds", type=int, default=0, help="Locust run time")
    parser.add_argument(
        "--writer",
        choices=("separate", "in-worker"),
        default="separate",
        help="who drains the record queue: a `bidder writer` process on the load generator's "
        "core, the web worker running with RECORD_WRITER=0 (default), or the web worker itself",
    )
    parser.add_argument(
        "--redis",
        choices=("single", "cluster"),
        default="single",
        help="single: the full bench on one Redis (default); cluster: the sizing run on a "
        "local Redis Cluster of 3 primaries with a replica each (offer request, bid and "
        "accept in rounds, CPU per request of the worker, each primary, the writer and "
        "Postgres, and what a core of each serves a second)",
    )
    parser.add_argument("--root", default=str(ROOT), help="working folder (servers, data)")
    parser.add_argument("--results", default=str(report.RESULTS_DIR), help="report folder")


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


@dataclass
class Outcome:
    """Everything measured, gathered for the report and the invariants."""

    peak: dict[str, WrkResult] = field(default_factory=dict)
    paced: dict[str, WrkResult] = field(default_factory=dict)
    #: every round of the interleaved peaks (healthz, offer_request, bid, accept), in run order
    rounds: dict[str, list[WrkResult]] = field(default_factory=dict)
    seen: invariants.Acknowledged = field(default_factory=invariants.Acknowledged)
    locust_rows: list[report.LocustRow] = field(default_factory=list)
    locust_summary: str = ""
    notes: list[str] = field(default_factory=list)
    settings: dict[str, str] = field(default_factory=dict)
    rss_kib: tuple[int, int] | None = None
    versions: dict[str, str] = field(default_factory=dict)


def log(message: str) -> None:
    print(f"[bench {datetime.now(UTC):%H:%M:%S}] {message}", flush=True)


class Throughput:
    """The wrk phases against one worker."""

    def __init__(
        self,
        cfg: BenchConfig,
        base_url: str,
        data: Path,
        outcome: Outcome,
        between_rounds: Callable[[], None] = lambda: None,
        writer: server.Writer | None = None,
    ) -> None:
        self.cfg = cfg
        self.base_url = base_url
        self.data = data
        self.outcome = outcome
        # Called between rounds: a round's accepts leave records for the writer, which would
        # otherwise be written during the next round's /healthz (`quiesce` in the bench).
        self.between_rounds = between_rounds
        # The separate record writer, held for one more accept run (`accept_held`).
        self.writer = writer

    def run(self, spec: WrkRun) -> WrkResult:
        log(f"wrk {spec.name}: {spec.seconds:g} s, {spec.connections} connections")
        result = throughput.run_wrk(spec, self.base_url, self.data / "logs")
        log(
            f"  {result.rps:,.0f} req/s, p50 {result.p50_ms:.2f} ms, p99 {result.p99_ms:.2f} ms, "
            f"answers {result.statuses}"
        )
        self.outcome.seen.server_errors += result.server_errors
        return result

    def peaks(self, targets: list[workload.Target]) -> None:
        seconds, out = self.cfg.wrk_seconds, self.outcome
        files = self.data
        throughput.write_requests(files / "healthz.tsv", workload.healthz_lines())
        throughput.write_requests(
            files / "offer.tsv", workload.offer_request_lines(targets, 20_000, seed=1)
        )
        throughput.write_requests(files / "bid.tsv", workload.bid_lines(targets, 5_000, seed=2))
        lurls = files / "lurls.txt"
        self.rounds(lurls, targets)
        if self.writer is not None:
            self.between_rounds()
            self.accept_held(targets)
            self.between_rounds()
        loss = workload.loss_lines(lurls)
        if loss:
            throughput.write_requests(files / "loss.tsv", loss)
            result = self.run(WrkRun("loss", "loss.lua", files / "loss.tsv", seconds))
            out.peak["loss"] = result
            if result.requests > len(loss):
                out.notes.append(
                    f"Loss notices: {len(loss):,} distinct lurls from the bid runs, "
                    f"{result.requests:,} notices sent: {result.requests - len(loss):,} were "
                    "retries of a notice already counted (the cheaper retry path)."
                )
        else:
            out.notes.append("Loss notice not measured: the bid runs returned no lurl.")

    def rounds(self, lurls: Path, targets: list[workload.Target]) -> None:
        """`cfg.rounds` rounds of healthz, offer request, bid and accept: back-to-back runs of
        the same code vary by about ±30 % here, so each peak is the median round, and the
        ratios compare medians. Every round's bid run keeps its `lurl`s (`lurls` gets them
        all); every round's accept takes an offer pool of its own, made just before it."""
        seconds, out, files = self.cfg.wrk_seconds, self.outcome, self.data
        harvested = []
        for number in range(1, self.cfg.rounds + 1):
            if number > 1:
                self.between_rounds()
            log(f"round {number} of {self.cfg.rounds}")
            round_lurls = files / f"lurls-r{number}.txt"
            for key, script, data, harvest in (
                ("healthz", "healthz.lua", files / "healthz.tsv", ""),
                ("offer_request", "offer_request.lua", files / "offer.tsv", ""),
                ("bid", "bid.lua", files / "bid.tsv", "lurl"),
            ):
                kept = round_lurls if harvest else None
                spec = WrkRun(f"{key}-r{number}", script, data, seconds, harvest=harvest, out=kept)
                out.rounds.setdefault(key, []).append(self.run(spec))
            harvested.append(round_lurls.read_text())
            offer_rps = out.rounds["offer_request"][-1].rps
            accepted = self.accept(targets, f"r{number}", offer_rps, seed=2 + number)
            out.rounds.setdefault("accept", []).append(accepted)
        lurls.write_text("".join(harvested))
        for key, runs in out.rounds.items():
            out.peak[key] = report.median_run(runs)

    def accept_held(self, targets: list[workload.Target]) -> None:
        """One more accept run, after the rounds, with the record writer held: its records wait
        in the durable queue and are written once it resumes (the next `between_rounds`). On
        this machine the writer and Postgres share the two cores with the worker, Redis and the
        load generator; production runs Postgres elsewhere. This run shows what the accept path
        itself sustains; the rounds' accept, with the writer draining alongside, stays the
        figure the target is judged on (docs/decisions.md, "Benchmarks")."""
        assert self.writer is not None
        offer_rps = report.median_run(self.outcome.rounds["offer_request"]).rps
        with self.writer.held():
            self.outcome.peak["accept_held"] = self.accept(
                targets, "held", offer_rps, seed=3 + self.cfg.rounds
            )
        self.outcome.settings["accept, writer held"] = (
            "one more accept run after the rounds with the `bidder writer` stopped (SIGSTOP): "
            "its records wait in the durable queue and are written once it resumes, before "
            "the next phase; the accept target is judged on the rounds' accept"
        )

    def accept(
        self, targets: list[workload.Target], label: str, offer_rps: float, *, seed: int
    ) -> WrkResult:
        """An accept run (`label`: "r<round>", or "held"): a pool of fresh offers (one wrk
        thread per publisher, so each offer's key is known; `seed` picks its screens), then one
        accept per pooled offer. A pool that came back empty is a run of no accepts (0 req/s,
        said in the notes), not a run left out."""
        seconds, out, files = self.cfg.wrk_seconds, self.outcome, self.data
        which = "the held-writer run" if label == "held" else f"round {label[1:]}"
        offer_rps = max(offer_rps, 200.0)
        wanted = int(min(offer_rps * 2, throughput.ACCEPT_POOL_RATE) * seconds)
        publishers = len({t.publisher_id for t in targets})
        pattern, threads = workload.pool_prep_files(
            files / f"prep-{label}",
            targets,
            per_publisher=max(200, wanted // publishers + 50),
            seed=seed,
        )
        pool = files / f"pool-{label}.txt"
        prep_seconds = math.ceil(wanted / offer_rps * 1.3) + 2
        log(f"offer pool for accept: {wanted:,} offers, up to {prep_seconds} s")
        self.run(
            WrkRun(
                f"offer_pool-{label}",
                "offer_request.lua",
                Path(pattern),
                prep_seconds,
                connections=threads,
                threads=threads,
                harvest="offer",
                quota=math.ceil(wanted / threads),
                out=pool,
            )
        )
        accepts = workload.accept_lines(pool)
        out.seen.pool_offer_ids |= {line.path.rsplit("/", 1)[1] for line in accepts}
        if not accepts:
            out.notes.append(f"Accept not measured in {which}: the offer pool is empty.")
            return WrkResult(f"accept-{label}", 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, {}, {})
        requests = files / f"accept-{label}.tsv"
        throughput.write_requests(requests, accepts)
        deals = files / f"deals-{label}.txt"
        result = self.run(
            WrkRun(
                f"accept-{label}",
                "accept.lua",
                requests,
                seconds,
                harvest="deal",
                once=True,
                out=deals,
            )
        )
        out.seen.deal_ids |= set(deals.read_text().split())
        out.seen.cutoff_allowance += result.connections
        if label != "held":
            out.settings["accept pool"] = (
                f"{len(accepts):,} fresh offers in {which}, each accepted once"
                if self.cfg.rounds == 1
                else f"a pool of fresh offers per round ({len(accepts):,} in the last), "
                "each accepted once"
            )
        if result.exhausted:
            out.notes.append(
                f"The accept pool of {which} ({len(accepts):,} offers) ran out before "
                "the run ended: that run's accept req/s is a lower bound."
            )
        return result

    def paced_runs(
        self, key: str, script: str, data: Path, target: float, measure: str
    ) -> WrkResult:
        """`cfg.rounds` paced runs at about `target` req/s (each calibrated); the run with the
        median `measure` (p99 for the latency targets, p50 for the inventory-size comparison)
        stands for them, and a note lists every run's figure."""
        runs = [
            self.paced_run(f"{key}-r{number}" if number > 1 else key, script, data, target)
            for number in range(1, self.cfg.rounds + 1)
        ]
        chosen = report.median_by(runs, measure)
        if len(runs) > 1:
            figures = " / ".join(f"{getattr(run, measure):.2f}" for run in runs)
            self.outcome.notes.append(
                f"Paced `{key}`: {len(runs)} runs, {measure.replace('_ms', '')} {figures} ms; "
                f"the tables show the median run ({getattr(chosen, measure):.2f} ms)."
            )
        return chosen

    def paced_run(self, key: str, script: str, data: Path, target: float) -> WrkResult:
        """A paced run at about `target` req/s: a short calibration run measures how long a
        request cycle takes at that load, and the think time is corrected by it."""
        connections = throughput.PACED_CONNECTIONS
        first = throughput.paced_delay_ms(target, connections)
        calibration = self.run(
            WrkRun(
                f"{key}_calibration",
                script,
                data,
                min(3.0, self.cfg.wrk_seconds),
                connections=connections,
                delay_ms=first,
                target_rps=target,
            )
        )
        service_ms = max(connections * 1000.0 / max(calibration.rps, 1.0) - first, 0.0)
        return self.run(
            WrkRun(
                key,
                script,
                data,
                self.cfg.wrk_seconds,
                connections=connections,
                delay_ms=max(first - service_ms, 0.1),
                target_rps=target,
            )
        )

    def paced(self, comparable: Path) -> None:
        """Offer request and bid at half their peak; the bid also on the screens that bid in
        both inventories, at the same rate, for the 2,000 vs 20 campaigns comparison."""
        out, files = self.outcome, self.data
        offers = files / "offer.tsv"
        for key, peak_key, script, data, measure in (
            ("offer_request_half", "offer_request", "offer_request.lua", offers, "p99_ms"),
            ("bid_half", "bid", "bid.lua", files / "bid.tsv", "p99_ms"),
            ("bid_full_paced", "bid", "bid.lua", comparable, "p50_ms"),
        ):
            peak = out.peak.get(peak_key)
            if peak is not None and peak.rps > 0:
                out.paced[key] = self.paced_runs(key, script, data, peak.rps / 2, measure)


def run_locust(
    cfg: BenchConfig,
    base_url: str,
    data: Path,
    keys: dict[str, str],
    targets: list[workload.Target],
    outcome: Outcome,
) -> None:
    """Locust headless on CPU 1 with fixed users and time; its CSV and outcome file are read
    back into the report and the invariants."""
    data_file = data / "locust-data.json"
    data_file.write_text(
        json.dumps(
            {"targets": [t.__dict__ for t in targets], "demo_key": next(iter(keys.values()))}
        )
    )
    prefix = data / "locust"
    out_file = data / "locust-outcome.json"
    out_file.unlink(missing_ok=True)
    command = [
        *server.taskset(server.LOADGEN_CPU),
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(Path(__file__).resolve().parent / "locustfile.py"),
        "--headless",
        "-u",
        str(cfg.locust_users),
        "-r",
        str(cfg.locust_users),
        "-t",
        f"{cfg.locust_seconds}s",
        "--stop-timeout",
        "10",
        "--host",
        base_url,
        "--csv",
        str(prefix),
        "--only-summary",
        "--loglevel",
        "WARNING",
    ]
    log(f"locust: {cfg.locust_users} users for {cfg.locust_seconds} s")
    env = {
        **os.environ,
        "BENCH_LOCUST_DATA": str(data_file),
        "BENCH_LOCUST_OUT": str(out_file),
        "PYTHONPATH": str(PROJECT),
    }
    done = subprocess.run(
        command,
        env=env,
        capture_output=True,
        text=True,
        timeout=cfg.locust_seconds + 120,
        check=False,
        cwd=PROJECT,
    )
    (data / "logs").mkdir(parents=True, exist_ok=True)
    (data / "logs" / "locust.txt").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    outcome.locust_rows = read_locust_stats(Path(f"{prefix}_stats.csv"))
    total = next((r for r in outcome.locust_rows if r.name == "Aggregated"), None)
    failures = read_locust_failures(Path(f"{prefix}_failures.csv"))
    outcome.locust_summary = (
        f"{cfg.locust_users} users, {cfg.locust_seconds} s, exit code {done.returncode}"
        + (f"; {total.requests:,} requests, {total.failures:,} failed" if total else "")
        + ("" if not failures else "; failures: " + "; ".join(failures[:8]))
    )
    log(f"  {outcome.locust_summary}")
    if not out_file.exists():
        outcome.notes.append("Locust wrote no outcome file: its acknowledgements are unknown.")
        return
    acked = json.loads(out_file.read_text())
    outcome.seen.deal_ids |= set(acked["accepted_deals"])
    outcome.seen.impressions += int(acked["impressions_billed"])
    outcome.seen.playouts += int(acked["playouts"])
    outcome.seen.rejections += int(acked["rejections"])
    outcome.seen.server_errors += int(acked["counts"].get("5xx", 0))


def read_locust_stats(path: Path) -> list[report.LocustRow]:
    if not path.exists():
        return []
    rows = []
    with path.open() as source:
        for row in csv.DictReader(source):
            rows.append(
                report.LocustRow(
                    name=row["Name"],
                    requests=int(row["Request Count"]),
                    failures=int(row["Failure Count"]),
                    p50_ms=float(row["50%"] or 0),
                    p99_ms=float(row["99%"] or 0),
                    rps=float(row["Requests/s"] or 0),
                )
            )
    return rows


def read_locust_failures(path: Path) -> list[str]:
    if not path.exists():
        return []
    with path.open() as source:
        return [
            f"{row['Name']}: {row['Error']} (x{row['Occurrences']})"
            for row in csv.DictReader(source)
        ]


async def _check(seeded: server.Seeded, seen: invariants.Acknowledged) -> list[invariants.Check]:
    client: Redis = connect(seeded.redis_url, timeout=5.0)
    try:
        return await invariants.check_all(client, seeded.database_url, seen)
    finally:
        await client.aclose()


def quiesce(redis_url: str) -> None:
    """Before a measuring phase: let the record writer drain what the previous phase queued
    (accepts and loss notices leave a backlog that would otherwise be written during the next
    runs), then compact Redis' append-only file (server.compact_redis)."""
    started = time.monotonic()

    async def drain() -> tuple[bool, int, float]:
        client: Redis = connect(redis_url, timeout=5.0)
        try:
            return await invariants.wait_drained(client, 120.0)
        finally:
            await client.aclose()

    drained, depth, waited = asyncio.run(drain())
    if waited >= 0.5 or not drained:
        log(
            f"record queue {'drained' if drained else f'NOT drained ({depth:,} left)'} "
            f"in {waited:.1f} s"
        )
    if server.compact_redis(redis_url):
        log(f"Redis AOF rewritten before measuring ({time.monotonic() - started:.1f} s)")


def start_worker(cfg: BenchConfig, seeded: server.Seeded, label: str) -> server.Worker:
    """The web worker, and with `separate_writer` a `bidder writer` process beside the load
    generator (production's layout for more than one worker: RECORD_WRITER=0 + writers)."""
    writer = None
    if cfg.separate_writer:
        writer = server.Writer(seeded, cfg.root / "logs" / f"writer-{label}.log")
        writer.start()
    worker = server.Worker(
        seeded,
        cfg.root / "logs" / f"worker-{label}.log",
        env_overrides={"RECORD_WRITER": "0" if cfg.separate_writer else "1"},
        writer=writer,
    )
    log(f"starting the {label} worker on :{worker.port}")
    try:
        worker.start()
    except BaseException:
        worker.stop()  # stops the writer too
        raise
    return worker


def small_variant(
    cfg: BenchConfig,
    backends: server.Backends,
    small: InventoryDocument,
    keys: dict[str, str],
    comparable: Path,
    outcome: Outcome,
) -> None:
    """Bid with 20 campaigns (same screens, same keys, same requests): peak, and paced at the
    full inventory's paced rate."""
    database = asyncio.run(server.fresh_database(backends.database_url, "bench_small"))
    seeded = server.seed(database, server.fresh_redis(backends.redis_url, 1), small, keys)
    worker = start_worker(cfg, seeded, "small")
    try:
        data = cfg.root / "data-small"
        data.mkdir(parents=True, exist_ok=True)
        runner = Throughput(cfg, worker.base_url, data, outcome)
        quiesce(seeded.redis_url)
        outcome.peak["bid_small"] = runner.run(
            WrkRun("bid_small", "bid.lua", comparable, cfg.wrk_seconds)
        )
        full = outcome.paced.get("bid_full_paced")
        if full is not None and full.target_rps:
            quiesce(seeded.redis_url)
            outcome.paced["bid_small_paced"] = runner.paced_runs(
                "bid_small_paced", "bid.lua", comparable, full.target_rps, "p50_ms"
            )
    finally:
        worker.stop()


def full_inventory(
    cfg: BenchConfig,
    backends: server.Backends,
    doc: InventoryDocument,
    small: InventoryDocument,
    outcome: Outcome,
) -> tuple[list[invariants.Check], server.Seeded, Path]:
    """Phases 1-5 on the full inventory: (invariant checks, the seeded variant, the file of
    bids that bid in both inventories)."""
    log("seeding the full inventory")
    database = asyncio.run(server.fresh_database(backends.database_url, "bench_full"))
    seeded = server.seed(database, server.fresh_redis(backends.redis_url, 0), doc)
    log(f"  seeded in {seeded.seconds:.1f} s")
    outcome.versions = measure_backend_versions(seeded.redis_url, seeded.database_url)
    data = cfg.root / "data"
    data.mkdir(parents=True, exist_ok=True)
    targets = workload.targets(doc, seeded.keys)
    comparable = data / "bid-comparable.tsv"
    both = workload.bidding_in_every(targets, [doc, small], datetime.now(UTC))
    throughput.write_requests(comparable, workload.bid_lines(both, 5_000, seed=4))
    worker = start_worker(cfg, seeded, "full")
    try:
        if not cfg.skip_wrk:
            runner = Throughput(
                cfg,
                worker.base_url,
                data,
                outcome,
                between_rounds=lambda: quiesce(seeded.redis_url),
                writer=worker.writer,
            )
            quiesce(seeded.redis_url)
            runner.peaks(targets)
            quiesce(seeded.redis_url)
            runner.paced(comparable)
        if not cfg.skip_locust:
            # The offer pools grow the AOF: an automatic rewrite ending inside the Locust run
            # stalls Redis ~230 ms on this VM's disk, and the calls in flight get 503.
            quiesce(seeded.redis_url)
            run_locust(cfg, worker.base_url, data, seeded.keys, targets, outcome)
        sizes = worker.rss_kib()
        outcome.rss_kib = max(sizes.values()) if sizes else None
        log("checking the invariants (waiting for the record queue to drain)")
        checks = asyncio.run(_check(seeded, outcome.seen))
    finally:
        worker.stop()
    return checks, seeded, comparable


#: What the benchmark needs besides the service: the dev group's Locust and matplotlib.
DEV_TOOLS = ("locust", "matplotlib")


def missing_dev_tools() -> list[str]:
    return [name for name in DEV_TOOLS if importlib.util.find_spec(name) is None]


def bench(cfg: BenchConfig) -> int:
    if cfg.redis == "cluster":
        from bench import sizing  # it builds on this module

        return sizing.run_cluster(cfg)
    started = time.monotonic()
    # The tree the worker imports when it starts is the one measured; a commit made during the
    # run does not change what the report describes.
    commit = report.source_commit(PROJECT)
    missing = missing_dev_tools()
    if missing:
        # Said before minutes of seeding and load, not as an ImportError at the end.
        log(
            f"the benchmark needs the dev tools ({', '.join(missing)} missing): "
            "run `sh deploy/bootstrap.sh --group dev` first"
        )
        return 2
    outcome = Outcome()
    if not cfg.skip_wrk:
        try:
            throughput.wrk_binary()
        except throughput.WrkMissing as exc:
            log(f"WARNING: {exc}")
            outcome.notes.append(f"wrk missing: {exc}")
            cfg.skip_wrk = True
    if not server.taskset("0"):
        outcome.notes.append("taskset missing: the worker and the load generators are NOT pinned.")
    cfg.root.mkdir(parents=True, exist_ok=True)
    doc = seed.full_document()
    small = seed.small_variant(doc)
    backends = server.start_backends(cfg.root / "servers")
    try:
        checks, seeded, comparable = full_inventory(cfg, backends, doc, small, outcome)
        if not cfg.skip_wrk and not cfg.skip_small:
            log("small variant: 20 campaigns")
            small_variant(cfg, backends, small, seeded.keys, comparable, outcome)
    finally:
        backends.stop()
    path = write(cfg, doc, outcome, checks, commit)
    for check in checks:
        log(f"{'ok    ' if check.ok else 'FAILED'} {check.name}: {check.detail}")
    log(f"report: {path} ({time.monotonic() - started:.0f} s)")
    return 0 if all(c.ok for c in checks) else 1


def write(
    cfg: BenchConfig,
    doc: InventoryDocument,
    outcome: Outcome,
    checks: list[invariants.Check],
    commit: str,
) -> Path:
    rss = outcome.rss_kib
    run = report.RunReport(
        scenario=cfg.scenario,
        day=datetime.now(UTC).date(),
        commit=commit,
        command=cfg.command,
        mode="quick smoke run" if cfg.quick else "full run",
        machine=report.machine(),
        versions={**report.package_versions(), **outcome.versions},
        settings={
            **run_settings(cfg, outcome),
            "inventory": f"{len(doc.publishers)} publishers, {len(doc.screens):,} screens, "
            f"{len(doc.campaigns):,} campaigns, {len(doc.creatives):,} creatives "
            f"(bench/seed.py, seed {seed.FULL_SEED})",
            "worker": "one granian worker (asgi, uvloop), taskset -c 0; LOG_LEVEL=WARNING, "
            + (
                "RECORD_WRITER=0, one `bidder writer` process on CPU 1 drains the record queue"
                if cfg.separate_writer
                else "RECORD_WRITER=1 (the worker drains the record queue)"
            )
            + ", OFFER_TTL_SECONDS=1800, OFFER_HASH=lean, COUNT_DAY_RESERVATIONS=0",
            "load": f"wrk -t1 on CPU 1, {throughput.PEAK_CONNECTIONS} connections for peaks, "
            f"{throughput.PACED_CONNECTIONS} with exponential think time for paced runs, "
            f"{cfg.wrk_seconds:g} s each; "
            + (
                f"/healthz, offer request and bid in {cfg.rounds} interleaved rounds, each peak "
                "the median round"
                if cfg.rounds > 1
                else "/healthz, offer request and bid in one round"
            ),
            **outcome.settings,
        },
        peak=outcome.peak,
        paced=outcome.paced,
        rounds=outcome.rounds,
        rss_mb=None if rss is None else rss[0] / 1024,
        rss_peak_mb=None if rss is None else rss[1] / 1024,
        locust=outcome.locust_rows,
        locust_summary=outcome.locust_summary,
        checks=checks,
        notes=outcome.notes,
    )
    return report.write_report(run, cfg.results)


def run_settings(cfg: BenchConfig, outcome: Outcome) -> dict[str, str]:
    """What a rerun needs besides the command: rounds, writer, durations, users and the paced
    rates the run chose (half the measured peaks)."""
    found = {
        "rounds": str(cfg.rounds),
        "writer": "separate" if cfg.separate_writer else "in-worker",
        "wrk seconds per run": f"{cfg.wrk_seconds:g}",
        "Locust": f"{cfg.locust_users} users, {cfg.locust_seconds} s"
        if not cfg.skip_locust
        else "skipped",
        "20-campaign comparison": "skipped" if cfg.skip_small or cfg.skip_wrk else "run",
    }
    rates = [
        f"{key} {result.target_rps:,.0f} req/s"
        for key, result in outcome.paced.items()
        if result.target_rps
    ]
    found["paced rates"] = ", ".join(rates) if rates else "none"
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    args.command_line = " ".join(
        ["python -m bench", shlex.join(argv if argv is not None else sys.argv[1:])]
    ).strip()
    return bench(BenchConfig.from_args(args))


def measure_backend_versions(redis_url: str, database_url: str) -> dict[str, str]:
    async def probe() -> dict[str, str]:
        found: dict[str, str] = {}
        client: Redis = connect(redis_url, timeout=2.0)
        try:
            info = await client.info("server")
            found["redis server"] = str(
                info.get("valkey_version") or info.get("redis_version") or "unknown"
            )
        finally:
            await client.aclose()
        conn = await asyncpg.connect(database_url)
        try:
            found["postgres"] = str(await conn.fetchval("SHOW server_version"))
        finally:
            await conn.close()
        return found

    return asyncio.run(probe())
