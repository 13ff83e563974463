"""Interleaved peak rounds: the median pick, the Rounds section of the report, `--rounds`, and
the order in which the runner takes the rounds (wrk replaced by a stub)."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from dataclasses import replace
from datetime import date
from pathlib import Path

import pytest

from bench import throughput, workload
from bench.cli import register
from bench.report import RunReport, median_by, median_run, render_markdown, write_report
from bench.run import BenchConfig, Outcome, Throughput
from bench.throughput import WrkResult, WrkRun


def wrk(
    name: str, rps: float, p50: float = 1.0, statuses: dict[int, int] | None = None
) -> WrkResult:
    return WrkResult(
        name=name,
        requests=int(rps * 10),
        duration_s=10.0,
        p50_ms=p50,
        p90_ms=p50 * 2,
        p99_ms=p50 * 3,
        p999_ms=p50 * 4,
        max_ms=p50 * 5,
        mean_ms=p50,
        statuses=statuses if statuses is not None else {200: int(rps * 10)},
        socket_errors={},
    )


# -- the median pick ---------------------------------------------------------------------------


def test_median_of_an_odd_count_is_the_middle_rate() -> None:
    runs = [wrk("r1", 300), wrk("r2", 100), wrk("r3", 200)]
    assert median_run(runs) is runs[2]


def test_median_of_an_even_count_is_the_lower_middle() -> None:
    runs = [wrk("r1", 400), wrk("r2", 100), wrk("r3", 300), wrk("r4", 200)]
    assert median_run(runs) is runs[3]  # 100, 200 | 300, 400
    pair = [wrk("r1", 500), wrk("r2", 400)]
    assert median_run(pair) is pair[1]


def test_median_among_equal_rates_is_the_earlier_round() -> None:
    runs = [wrk("r1", 200, p50=1.0), wrk("r2", 100), wrk("r3", 200, p50=9.0)]
    assert median_run(runs) is runs[0]


def test_paced_runs_stand_for_their_median_latency_not_their_rate() -> None:
    # p99 is 3 x p50 in these runs: 6, 30, 12 ms; the median is the 12 ms run, whatever the rate.
    runs = [wrk("r1", 900, p50=2.0), wrk("r2", 880, p50=10.0), wrk("r3", 910, p50=4.0)]
    assert median_by(runs, "p99_ms") is runs[2]
    assert median_by(runs, "p50_ms") is runs[2]
    assert median_by(runs[:2], "p99_ms") is runs[0]  # the lower middle of two
    with pytest.raises(ValueError, match="no runs"):
        median_by([], "p99_ms")


def test_median_of_one_run_is_that_run_and_of_none_an_error() -> None:
    only = wrk("r1", 123)
    assert median_run([only]) is only
    with pytest.raises(ValueError, match="no runs"):
        median_run([])


# -- the Rounds section ------------------------------------------------------------------------


def three_rounds() -> RunReport:
    rounds = {
        "healthz": [wrk("h1", 10_000), wrk("h2", 8_000), wrk("h3", 12_000)],
        "offer_request": [wrk("o1", 5_000), wrk("o2", 4_800), wrk("o3", 5_400)],
        "bid": [wrk("b1", 4_000, p50=1.5), wrk("b2", 4_400, p50=2.5), wrk("b3", 6_000, p50=3.5)],
    }
    return RunReport(
        scenario="unit",
        day=date(2025, 1, 2),
        commit="abc1234",
        command="python -m bench",
        mode="full run",
        peak={
            "healthz": rounds["healthz"][0],  # median 10,000
            "offer_request": rounds["offer_request"][0],  # median 5,000
            "bid": rounds["bid"][1],  # median 4,400
            "loss": wrk("loss", 4_000),  # one run
        },
        rounds=rounds,
    )


def test_rounds_rows_divide_by_the_same_rounds_ceiling() -> None:
    text = render_markdown(three_rounds())
    # offer: 5,000/10,000, 4,800/8,000, 5,400/12,000; bid: 4,000/10,000, 4,400/8,000, 6,000/12,000
    assert "| 1 | 10,000 | 5,000 | 0.50 | 4,000 | 0.40 |" in text
    assert "| 2 | 8,000 | 4,800 | 0.60 | 4,400 | 0.55 |" in text
    assert "| 3 | 12,000 | 5,400 | 0.45 | 6,000 | 0.50 |" in text


def test_peak_table_ratios_are_median_over_median_with_the_median_rounds_latencies() -> None:
    text = render_markdown(three_rounds())
    # bid median 4,400 (round 2, p50 2.5 ms) over healthz median 10,000 (round 1)
    assert "| POST OpenRTB bid | 4,400 | 0.44 | 2.50 |" in text
    assert "| GET offer request | 5,000 | 0.50 |" in text
    assert "| GET loss notice | 4,000 | 0.40 |" in text  # over the median ceiling


def test_rounds_section_sits_after_the_peak_table_and_states_the_method() -> None:
    text = render_markdown(three_rounds())
    peak, rounds, paced = (
        text.index("## Peak throughput"),
        text.index("## Rounds"),
        text.index("## Paced runs"),
    )
    assert peak < rounds < paced
    section = text[rounds:paced]
    assert "median of 3 interleaved rounds" in section
    assert "median/median" in section
    assert "GET loss notice: one run each, after the rounds, compared to the " in section
    assert "median ceiling" in section
    assert section.count("\n| ") == 4  # header and three rounds (the separator starts "|---")
    assert "offer pool of its own" not in section  # no accept among these rounds


def test_rounds_with_accept_say_how_its_offers_were_made() -> None:
    report = three_rounds()
    report.rounds["accept"] = [wrk("a1", 3_000), wrk("a2", 2_000), wrk("a3", 4_000)]
    text = render_markdown(report)
    section = text[text.index("## Rounds") : text.index("## Paced runs")]
    assert "accept runs on an offer pool of its own, made just before it" in section
    assert "| 2 | 8,000 | 4,800 | 0.60 | 4,400 | 0.55 | 2,000 | 0.25 |" in section


def test_one_round_says_there_is_no_median() -> None:
    report = three_rounds()
    report.rounds = {key: runs[:1] for key, runs in report.rounds.items()}
    text = render_markdown(report)
    section = text[text.index("## Rounds") : text.index("## Paced runs")]
    assert "one round, so no median" in section
    assert "compared to the round's ceiling" in section
    assert "median" not in section.replace("no median", "")
    assert "| 1 | 10,000 | 5,000 | 0.50 | 4,000 | 0.40 |" in section


def test_no_rounds_no_section() -> None:
    report = three_rounds()
    report.rounds = {}
    assert "## Rounds" not in render_markdown(report)


def test_chart_draws_with_rounds(tmp_path: Path) -> None:
    path = write_report(three_rounds(), tmp_path)
    assert (tmp_path / "2025-01-02-unit-abc1234.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![latency and throughput per endpoint](2025-01-02-unit-abc1234.png)" in path.read_text()


# -- --rounds ----------------------------------------------------------------------------------


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bidder")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["bench", *argv])
    args.command_line = "bidder bench"
    return args


def test_rounds_default_three_and_one_when_quick() -> None:
    assert BenchConfig.from_args(parse()).rounds == 3
    assert BenchConfig.from_args(parse("--quick")).rounds == 1


def test_rounds_flag_overrides_both_defaults() -> None:
    assert BenchConfig.from_args(parse("--rounds", "5")).rounds == 5
    assert BenchConfig.from_args(parse("--quick", "--rounds", "2")).rounds == 2


@pytest.mark.parametrize("bad", ["0", "-1", "two", "1.5"])
def test_rounds_must_be_a_whole_number_of_at_least_one(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse("--rounds", bad)
    assert "--rounds" in capsys.readouterr().err


# -- the runner's order ------------------------------------------------------------------------


def target(publisher: int, screen: int) -> workload.Target:
    return workload.Target(
        screen_id=f"screen-{publisher}-{screen}",
        external_id=f"ext-{publisher}-{screen}",
        publisher_id=f"publisher-{publisher}",
        api_key=f"key-{publisher}",
        width=1920,
        height=1080,
        audience=2.5,
        type="billboard",
    )


def test_rounds_interleave_keep_every_run_and_harvest_every_bid_and_deal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rates = {  # per round: healthz, offer request, bid, accept
        "healthz": [9_000.0, 6_000.0, 7_000.0],
        "offer_request": [3_000.0, 3_300.0, 2_700.0],
        "bid": [2_000.0, 2_600.0, 2_300.0],
        "accept": [2_500.0, 1_500.0, 2_000.0],
    }
    started: list[str] = []
    pools: dict[int, set[str]] = {}

    def fake_wrk(spec: WrkRun, base_url: str, log_dir: Path) -> WrkResult:
        started.append(spec.name)
        key, number = spec.name.rsplit("-r", 1)
        if key == "offer_pool":  # harvests "key, offer id, price" lines
            assert spec.harvest == "offer"
            assert spec.out is not None
            offers = {f"offer-{number}-{n}" for n in range(3)}
            pools[int(number)] = offers
            spec.out.write_text("".join(f"key-1\t{o}\t12.5\n" for o in sorted(offers)))
            return wrk(spec.name, 3_000.0)
        if key == "accept":  # each of this round's pooled offers accepted once
            assert spec.once
            accepted = {
                line.split("\t")[1].rsplit("/", 1)[1] for line in spec.data.read_text().splitlines()
            }
            assert accepted == pools[int(number)]
            assert spec.out is not None
            spec.out.write_text(f"deal-{number}\n")
        rps = rates[key][int(number) - 1]
        if spec.harvest == "lurl":
            assert spec.out is not None
            spec.out.write_text(f"lurl-{number}-a\nlurl-{number}-b\n")
        statuses = {200: int(rps * 10), 503: 1} if key == "bid" else {200: int(rps * 10)}
        return wrk(spec.name, rps, statuses=statuses)

    settled: list[int] = []
    monkeypatch.setattr(throughput, "run_wrk", fake_wrk)
    outcome = Outcome()
    cfg = BenchConfig(rounds=3, wrk_seconds=1.0)
    lurls = tmp_path / "lurls.txt"
    runner = Throughput(
        cfg, "http://unused", tmp_path, outcome, between_rounds=lambda: settled.append(len(started))
    )
    runner.rounds(lurls, [target(1, 1), target(1, 2), target(2, 1)])

    order = ("healthz", "offer_request", "bid", "offer_pool", "accept")
    assert started == [f"{key}-r{n}" for n in (1, 2, 3) for key in order]
    assert settled == [5, 10]  # between rounds: after each round's accept, not before the first
    assert {key: [r.rps for r in runs] for key, runs in outcome.rounds.items()} == rates
    assert {key: r.rps for key, r in outcome.peak.items()} == {
        "healthz": 7_000.0,
        "offer_request": 3_000.0,
        "bid": 2_300.0,
        "accept": 2_000.0,
    }
    assert outcome.peak["bid"] is outcome.rounds["bid"][2]
    assert outcome.peak["accept"] is outcome.rounds["accept"][2]
    assert lurls.read_text().split() == [
        "lurl-1-a",
        "lurl-1-b",
        "lurl-2-a",
        "lurl-2-b",
        "lurl-3-a",
        "lurl-3-b",
    ]
    assert outcome.seen.server_errors == 3  # one 503 in each round's bid run
    # the invariants know every round's deals and pooled offers, and a cut-off per accept run
    assert outcome.seen.deal_ids == {"deal-1", "deal-2", "deal-3"}
    assert outcome.seen.pool_offer_ids == pools[1] | pools[2] | pools[3]
    assert outcome.seen.cutoff_allowance == 3 * throughput.PEAK_CONNECTIONS


def test_a_round_whose_pool_came_back_empty_counts_as_no_accepts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake_wrk(spec: WrkRun, base_url: str, log_dir: Path) -> WrkResult:
        key, number = spec.name.rsplit("-r", 1)
        assert key != "accept" or number != "2", "round 2 had no offers to accept"
        if spec.out is not None:
            pooled = "key-1\toffer-x\t1\n" if key == "offer_pool" and number != "2" else ""
            spec.out.write_text(pooled)
        return wrk(spec.name, {"accept": 1_000.0}.get(key, 5_000.0))

    monkeypatch.setattr(throughput, "run_wrk", fake_wrk)
    outcome = Outcome()
    Throughput(BenchConfig(rounds=3, wrk_seconds=1.0), "http://unused", tmp_path, outcome).rounds(
        tmp_path / "lurls.txt", [target(1, 1)]
    )
    assert [run.rps for run in outcome.rounds["accept"]] == [1_000.0, 0.0, 1_000.0]
    assert outcome.peak["accept"].rps == 1_000.0
    assert any("round 2" in note and "pool is empty" in note for note in outcome.notes)


class _RecordingWriter:
    """Stands in for server.Writer: says when it is held."""

    def __init__(self) -> None:
        self.holding = False
        self.holds = 0

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self.holding, self.holds = True, self.holds + 1
        try:
            yield
        finally:
            self.holding = False


def test_one_more_accept_runs_with_the_writer_held_and_is_not_a_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the rounds, with a separate writer: the queue is drained, one accept run on a pool
    of its own runs while the writer is held, and the queue is drained again; the rounds' accept
    (the writer draining alongside) stays the peak the target is judged on."""
    writer = _RecordingWriter()
    started: list[tuple[str, bool]] = []

    def fake_wrk(spec: WrkRun, base_url: str, log_dir: Path) -> WrkResult:
        started.append((spec.name, writer.holding))
        if spec.out is not None:
            label = spec.name.rsplit("-", 1)[1]
            text = {"offer_pool": f"key-1\toffer-{label}\t1\n", "accept": f"deal-{label}\n"}
            spec.out.write_text(text.get(spec.name.rsplit("-", 1)[0], "lurl-x\n"))
        return wrk(spec.name, 9_000.0 if spec.name == "accept-held" else 4_000.0)

    monkeypatch.setattr(throughput, "run_wrk", fake_wrk)
    outcome = Outcome()
    drained: list[int] = []
    runner = Throughput(
        BenchConfig(rounds=2, wrk_seconds=1.0),
        "http://unused",
        tmp_path,
        outcome,
        between_rounds=lambda: drained.append(len(started)),
        writer=writer,  # type: ignore[arg-type]
    )
    runner.peaks([replace(target(1, 1), type="moving")])
    held = [name for name, holding in started if holding]
    assert held == ["offer_pool-held", "accept-held"]
    assert writer.holds == 1
    names = [name for name, _ in started]
    # drained after round 1, before the held run, and after it (before the loss notices)
    assert drained == [5, 10, 12]
    assert names[10:] == ["offer_pool-held", "accept-held", "loss"]
    assert outcome.peak["accept_held"].rps == 9_000.0
    assert [run.rps for run in outcome.rounds["accept"]] == [4_000.0, 4_000.0]
    assert outcome.peak["accept"].rps == 4_000.0
    assert outcome.seen.deal_ids == {"deal-r1", "deal-r2", "deal-held"}
    assert "offer-held" in outcome.seen.pool_offer_ids
    assert "accept, writer held" in outcome.settings


def test_without_a_separate_writer_no_run_is_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake_wrk(spec: WrkRun, base_url: str, log_dir: Path) -> WrkResult:
        if spec.out is not None:
            spec.out.write_text("key-1\toffer-x\t1\n" if "pool" in spec.name else "x\n")
        return wrk(spec.name, 1_000.0)

    monkeypatch.setattr(throughput, "run_wrk", fake_wrk)
    outcome = Outcome()
    Throughput(BenchConfig(rounds=1, wrk_seconds=1.0), "http://unused", tmp_path, outcome).peaks(
        [replace(target(1, 1), type="moving")]
    )
    assert "accept_held" not in outcome.peak
