"""`bidder bench` is registered by bench.cli.register and maps its flags onto the run."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import Any

import pytest

from bench import run as bench_run
from bench.cli import register
from bench.run import BenchConfig
from bench.throughput import WrkResult


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bidder")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["bench", *argv])
    args.command_line = "bidder bench"
    return args


def test_quick_run_is_short_and_named_quick() -> None:
    args = parse("--quick", "--skip-locust")
    cfg = BenchConfig.from_args(args)
    assert callable(args.func)
    assert (cfg.scenario, cfg.quick, cfg.skip_locust, cfg.skip_wrk) == (
        "quick",
        True,
        True,
        False,
    )
    assert cfg.wrk_seconds <= 3
    assert cfg.locust_seconds <= 10


def test_full_run_defaults_and_overrides() -> None:
    cfg = BenchConfig.from_args(parse("--name", "nightly", "--wrk-seconds", "8", "--root", "x"))
    assert (cfg.scenario, cfg.wrk_seconds, cfg.locust_seconds, cfg.root) == (
        "nightly",
        8,
        30,
        Path("x"),
    )
    assert BenchConfig.from_args(parse()).scenario == "full"
    assert BenchConfig.from_args(parse("--scenario", "full-held")).scenario == "full-held"


def test_a_scenario_that_cannot_name_a_file_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("a/b", "Full", "two words"):
        with pytest.raises(SystemExit):
            parse("--scenario", bad)
        assert "words joined by dashes" in capsys.readouterr().err


def test_the_settings_say_rounds_writer_durations_and_rates() -> None:
    cfg = BenchConfig.from_args(parse("--rounds", "5", "--writer", "in-worker"))
    outcome = bench_run.Outcome()
    paced = WrkResult(
        name="bid_half",
        requests=36_650,
        duration_s=10.0,
        p50_ms=1.0,
        p90_ms=1.6,
        p99_ms=2.5,
        p999_ms=5.0,
        max_ms=9.7,
        mean_ms=1.1,
        statuses={200: 36_650},
        socket_errors={},
        target_rps=3_676.4,
    )
    outcome.paced["bid_half"] = paced
    settings = bench_run.run_settings(cfg, outcome)
    assert settings["rounds"] == "5"
    assert settings["writer"] == "in-worker"
    assert settings["wrk seconds per run"] == "10"
    assert settings["Locust"] == "40 users, 30 s"
    assert settings["paced rates"] == "bid_half 3,676 req/s"


def test_without_the_dev_tools_the_run_stops_at_once_saying_how_to_get_them(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    real = importlib.util.find_spec

    def without_locust(name: str, package: str | None = None) -> Any:
        return None if name == "locust" else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", without_locust)
    cfg = BenchConfig.from_args(parse("--root", str(tmp_path / "never-made")))
    assert bench_run.bench(cfg) == 2
    said = capsys.readouterr()
    assert "locust" in said.out + said.err
    assert "bootstrap.sh --group dev" in said.out + said.err
    assert not (tmp_path / "never-made").exists()  # nothing seeded, nothing started
