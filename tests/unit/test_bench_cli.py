"""`bidder bench` is registered by bench.cli.register and maps its flags onto the run."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.cli import register
from bench.run import BenchConfig


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
    assert (cfg.name, cfg.quick, cfg.skip_locust, cfg.skip_wrk) == ("quick", True, True, False)
    assert cfg.wrk_seconds <= 3
    assert cfg.locust_seconds <= 10


def test_full_run_defaults_and_overrides() -> None:
    cfg = BenchConfig.from_args(parse("--name", "nightly", "--wrk-seconds", "8", "--root", "x"))
    assert (cfg.name, cfg.wrk_seconds, cfg.locust_seconds, cfg.root) == (
        "nightly",
        8,
        30,
        Path("x"),
    )
    assert BenchConfig.from_args(parse()).name == "full"
