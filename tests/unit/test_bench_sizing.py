"""`python -m bench --redis cluster` (bench/sizing.py): the option, and the sizing table made
from the CPU each process spent during a route's runs."""

from __future__ import annotations

import argparse

import pytest

from bench import run as bench_run
from bench import sizing
from bench.cli import register
from bench.invariants import Check
from bench.run import BenchConfig
from bench.sizing import RouteRun, SizingReport, sizing_row, sizing_table


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bidder")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["bench", *argv])
    args.command_line = "bidder bench " + " ".join(argv)
    return args


def test_the_default_stays_one_redis_and_the_full_run() -> None:
    cfg = BenchConfig.from_args(parse())
    assert (cfg.redis, cfg.scenario, cfg.rounds) == ("single", "full", 3)


def test_redis_cluster_names_its_report_and_keeps_the_other_options() -> None:
    cfg = BenchConfig.from_args(parse("--redis", "cluster"))
    assert (cfg.redis, cfg.scenario, cfg.rounds) == ("cluster", "cluster", 3)
    quick = BenchConfig.from_args(parse("--redis", "cluster", "--quick"))
    assert (quick.scenario, quick.rounds, quick.wrk_seconds) == ("cluster-quick", 1, 3.0)
    named = BenchConfig.from_args(parse("--redis", "cluster", "--name", "sizing", "--rounds", "5"))
    assert (named.scenario, named.rounds) == ("sizing", 5)


def test_an_unknown_redis_mode_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("--redis", "sentinel")
    assert "invalid choice" in capsys.readouterr().err


def test_redis_cluster_runs_the_sizing_run_instead_of_the_full_bench(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    called: list[BenchConfig] = []

    def sized(cfg: BenchConfig) -> int:
        called.append(cfg)
        return 7

    monkeypatch.setattr(sizing, "run_cluster", sized)
    cfg = BenchConfig.from_args(parse("--redis", "cluster"))
    assert bench_run.bench(cfg) == 7
    assert called == [cfg]


def _run(route: str, rps: float, seconds: float, cpu: dict[str, float]) -> RouteRun:
    return RouteRun(route, rps, int(rps * seconds), seconds, cpu)


def test_a_route_run_gives_cpu_per_request_and_each_primary_share() -> None:
    # 4,000 requests in 2 s: 0.4 s of worker CPU is 100 us a request; the primaries spent
    # 0.06 + 0.02 + 0.02 s, 25 us a request, the busiest 60 % of it.
    run = _run(
        "offer",
        2_000,
        2.0,
        {
            "worker": 0.4,
            "record writer": 0.001,  # under 3 % of a core: no part in the route
            "redis primary :7001": 0.06,
            "redis primary :7002": 0.02,
            "redis primary :7003": 0.02,
        },
    )
    assert run.us_per_request("worker") == pytest.approx(100.0)
    assert run.us_per_request("record writer") is None
    assert run.us_per_request("postgres") is None
    assert run.redis_us == pytest.approx(25.0)
    assert run.busiest_share == pytest.approx(0.6)
    assert run.replicas_us is None  # none followed
    with_replica = _run("offer", 2_000, 2.0, {**run.cpu_s, "redis replica :7004": 0.04})
    assert with_replica.replicas_us == pytest.approx(10.0)
    assert with_replica.redis_us == pytest.approx(25.0)  # a replica is no primary


def test_the_row_is_the_median_round_and_says_what_one_core_serves() -> None:
    rounds = [
        _run("accept", rps, 1.0, {"worker": 0.25, "postgres": 0.1, "redis primary :1": 0.05})
        for rps in (1_000, 3_000, 2_000, 4_000)
    ]
    row = sizing_row(rounds)
    assert row.rps == 2_000  # the lower middle of four
    assert row.worker_us == pytest.approx(125.0)
    assert row.per_worker_core == pytest.approx(8_000)
    assert row.redis_us == pytest.approx(25.0)
    assert row.per_redis_primary == pytest.approx(40_000)
    assert row.per_postgres_core == pytest.approx(20_000)
    assert row.writer_us is None
    assert row.per_postgres_core is not None

    table = sizing_table([row])
    assert "| Core accept (record written) | 2,000 | 125 us | 25 us | 100 % | - | 50 us |" in table
    assert "| 8,000 /s | 40,000 /s | 20,000 /s |" in table


def test_the_report_has_the_sizing_table_every_round_and_the_invariants() -> None:
    runs = {
        "offer": [_run("offer", 5_000, 1.0, {"worker": 0.5, "redis primary :1": 0.1})],
        "bid": [],
    }
    text = SizingReport(
        day="2026-11-27",
        commit="abc1234",
        command="python -m bench --redis cluster",
        settings={"rounds": "1"},
        machine={"cpu": "test"},
        versions={"redis server": "8.1"},
        runs=runs,
        checks=[Check("no 5xx anywhere", True, "0 answers 5xx")],
    ).markdown()
    assert text.startswith("# Bench sizing on a local Redis Cluster, 2026-11-27, commit abc1234")
    assert "Command: `python -m bench --redis cluster`" in text
    assert "| Core offer request | 5,000 | 100 us | 20 us | 100 % | - | - | 10,000 /s |" in text
    assert "| Core offer request | 1 | 5,000 |" in text
    assert "- ok: no 5xx anywhere (0 answers 5xx)" in text
    assert "OpenRTB bid" not in text.split("## Rounds")[0]  # a route without runs has no row
