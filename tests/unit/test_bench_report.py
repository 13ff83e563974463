"""The bench report: targets judged against the bench's thresholds, the table, the chart; and the
shape checks the Locust scenarios apply."""

from __future__ import annotations

import subprocess
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest

from bench import records_throughput
from bench.invariants import CampaignBudget, Check, budget_checks
from bench.report import (
    RunReport,
    render_markdown,
    report_stem,
    source_commit,
    targets,
    write_report,
)
from bench.shapes import accept_problem, bid_problem, impression_url, offer_problem
from bench.throughput import WrkResult


def wrk(name: str, rps: float, p50: float = 1.0, p99: float = 3.0) -> WrkResult:
    return WrkResult(
        name=name,
        requests=int(rps * 10),
        duration_s=10.0,
        p50_ms=p50,
        p90_ms=p50 * 2,
        p99_ms=p99,
        p999_ms=p99 * 2,
        max_ms=p99 * 3,
        mean_ms=p50,
        statuses={200: int(rps * 10)},
        socket_errors={},
    )


def sample() -> RunReport:
    return RunReport(
        scenario="unit",
        day=date(2025, 1, 2),
        commit="abc1234",
        command="python -m bench --quick",
        mode="quick smoke run",
        peak={
            "healthz": wrk("healthz", 10_000),
            "offer_request": wrk("offer_request", 5_000),  # 0.50: met
            "bid": wrk("bid", 4_900),  # 0.49: not met
            "accept": wrk("accept", 4_000),  # 0.40: met
        },
        paced={
            "offer_request_half": wrk("o", 2_500, p99=5.0),  # met (<= 5 ms)
            "bid_half": wrk("b", 2_450, p50=1.25, p99=5.1),  # not met
            "bid_full_paced": wrk("b", 2_450, p50=1.25, p99=5.1),
            "bid_small_paced": wrk("s", 2_450, p50=1.0),  # 1.25x: met
        },
        rss_mb=250.0,  # not met: must stay under 250 MB
        rss_peak_mb=260.0,
        checks=[Check("no 5xx anywhere", True, "0 answers 5xx")],
    )


def test_targets_follow_issue_6_thresholds() -> None:
    verdicts = {t.name: t.met for t in targets(sample())}
    assert verdicts == {
        "bid throughput": False,
        "offer request throughput": True,
        "accept throughput": True,
        "offer request p99 at half peak": True,
        "bid p99 at half peak": False,
        "bid p50, 2,000 vs 20 campaigns (same paced rate)": True,
        "worker RSS with the full inventory": False,
    }


def test_unmeasured_targets_say_so() -> None:
    empty = RunReport(scenario="x", day=date(2025, 1, 2), commit="abc1234", command="c", mode="m")
    assert all(t.met is None for t in targets(empty))
    assert "Not measured." in render_markdown(empty)


def test_markdown_has_the_table_ratios_and_verdicts() -> None:
    text = render_markdown(sample(), "chart.png")
    assert text.startswith("# Bench run 2025-01-02 unit on abc1234")
    assert "| POST OpenRTB bid | 4,900 | 0.49 |" in text
    assert "| GET /healthz (ceiling) | 10,000 | 1.00 |" in text
    assert "| bid throughput | >= 0.50 of the ceiling | 0.490 | NOT met |" in text
    assert "![latency and throughput per endpoint](chart.png)" in text
    assert "| no 5xx anywhere | ok | 0 answers 5xx |" in text


def test_a_ratio_just_under_its_target_does_not_read_as_met() -> None:
    report = sample()
    report.peak["accept"] = wrk("accept", 3_967)  # 0.3967 of the 10,000 ceiling
    text = render_markdown(report)
    assert "| accept throughput | >= 0.40 of the ceiling | 0.397 | NOT met |" in text


def test_write_report_makes_markdown_and_png(tmp_path: Path) -> None:
    path = write_report(sample(), tmp_path)
    assert path.name == "2025-01-02-unit-abc1234.md"
    png = tmp_path / "2025-01-02-unit-abc1234.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_header_names_the_commit_the_command_and_the_settings() -> None:
    report = sample()
    report.settings = {"rounds": "3", "writer": "separate", "wrk seconds per run": "10"}
    head = render_markdown(report).split("## Peak throughput")[0]
    assert "- commit: `abc1234`" in head
    assert "- command: `python -m bench --quick` (quick smoke run)" in head
    assert "- scenario: unit" in head
    for line in ("- rounds: 3", "- writer: separate", "- wrk seconds per run: 10"):
        assert line in head


def test_a_report_is_named_date_scenario_commit() -> None:
    assert report_stem(date(2026, 11, 27), "full", "dcde867") == "2026-11-27-full-dcde867"
    assert report_stem(date(2026, 1, 5), "full-held", "1a2b3c4-dirty") == (
        "2026-01-05-full-held-1a2b3c4-dirty"
    )
    for bad in ("", "Full", "a b", "../x", "full-", "a/b"):
        with pytest.raises(ValueError, match="words joined by dashes"):
            report_stem(date(2026, 1, 5), bad, "1a2b3c4")


def git(folder: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_the_commit_is_the_short_head_and_dirty_when_a_tracked_file_differs(
    tmp_path: Path,
) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "a.txt").write_text("one\n")
    git(tmp_path, "add", "a.txt")
    git(tmp_path, "commit", "-q", "-m", "one")
    head = git(tmp_path, "rev-parse", "--short", "HEAD")
    assert source_commit(tmp_path) == head
    (tmp_path / "new-report.md").write_text("untracked\n")
    assert source_commit(tmp_path) == head  # an untracked file is not a change to the code
    (tmp_path / "a.txt").write_text("two\n")
    assert source_commit(tmp_path) == f"{head}-dirty"


def test_outside_a_checkout_the_commit_is_unknown(tmp_path: Path) -> None:
    assert source_commit(tmp_path) == "unknown"


def test_budget_checks_find_each_kind_of_imbalance() -> None:
    fine = CampaignBudget(total=100, reserved=30, spent=20, open_offers=30)
    over = CampaignBudget(total=100, reserved=60, spent=50, open_offers=60)
    leak = CampaignBudget(total=100, reserved=30, spent=20, open_offers=10)
    budgets = {"a": fine, "b": over, "c": leak}
    checks = {
        c.name: c.ok
        for c in budget_checks(budgets, {"a": 100, "b": 100, "c": 99}, {"a": 20, "b": 50, "c": 21})
    }
    assert checks == {
        "every campaign: reserved >= 0, spent >= 0, reserved + spent <= total": False,
        "every campaign: Redis total == Postgres budget_cents": False,
        "every campaign: reserved == sum of open offers' prices": False,
        "every campaign: spent == sum of billing records' gross": False,
    }
    assert all(c.ok for c in budget_checks({"a": fine}, {"a": 100}, {"a": 20}))


def test_budget_checks_find_a_budget_slice_over_what_it_holds() -> None:
    # The campaign's sums fit its total, but one slice holds more than its allowance, or the
    # slices hold more allowance than the home granted.
    slice_over = CampaignBudget(total=100, reserved=30, spent=20, open_offers=30, over_slices=[4])
    granted_under = CampaignBudget(
        total=100, reserved=30, spent=20, open_offers=30, granted=10, allowances=40
    )
    for budget in (slice_over, granted_under):
        checks = {c.name: c.ok for c in budget_checks({"a": budget}, {"a": 100}, {"a": 20})}
        assert (
            checks["every campaign: reserved >= 0, spent >= 0, reserved + spent <= total"] is False
        )
        assert sum(not ok for ok in checks.values()) == 1


def test_shape_checks() -> None:
    offer = {
        "offer_id": "o",
        "bid_price_cents": Decimal("31.25"),
        "asset_url": "https://cdn.example/a.mp4",
        "expires_at": "2025-01-02T10:00:00Z",
        "billing_code": None,
    }
    assert offer_problem(offer) is None
    assert offer_problem({**offer, "bid_price_cents": 0}) is not None
    assert offer_problem({k: v for k, v in offer.items() if k != "billing_code"}) is not None
    accept = {
        "success": True,
        "action": "accepted",
        "deal_id": "d",
        "billing_id": "b",
        "message": "ok",
        "billing_code": "X",
        "net_price_cents": Decimal("26.5625"),
        "commission_cents": Decimal("4.6875"),
        "gross_price_cents": Decimal("31.25"),
    }
    assert accept_problem(accept) is None
    assert "net + commission" in str(
        accept_problem({**accept, "net_price_cents": Decimal("26.56")})
    )
    request = {"id": "auction-1"}
    assert bid_problem({"id": "auction-1", "cur": "EUR", "seatbid": [], "nbr": 0}, request) is None
    assert bid_problem({"id": "other", "cur": "EUR", "seatbid": [], "nbr": 0}, request) is not None


def test_impression_url_is_unescaped_and_substituted() -> None:
    adm = (
        '<VAST xmlns="http://www.iab.com/VAST" version="4.0"><Ad id="o"><InLine>'
        "<Impression><![CDATA[http://h/functions/v1/track?offer_id=o&event=impression"
        "&price=${AUCTION_PRICE}&aud=${TOTAL_IMP}&token=t]]></Impression></InLine></Ad></VAST>"
    )
    assert impression_url(adm, Decimal("0.3125"), 12.5) == (
        "/functions/v1/track?offer_id=o&event=impression&price=0.3125&aud=12.5&token=t"
    )
    escaped = adm.replace("<![CDATA[", "").replace("]]>", "").replace("&", "&amp;")
    assert impression_url(escaped, 1, 2) == (
        "/functions/v1/track?offer_id=o&event=impression&price=1&aud=2&token=t"
    )
    assert impression_url("<not xml", 1, 2) is None


def test_the_records_report_is_headed_by_its_commit_command_and_settings() -> None:
    figures = records_throughput.Figures(
        records=30_000,
        seconds=3.71,
        batch_size=500,
        outage_seconds=60.0,
        rate=500.0,
        depth_at_restart=28_176,
        lag_at_restart=60.4,
        drain_seconds=7.95,
        written_during_drain=30_512,
    )
    command = ".venv/bin/python -m bench.records_throughput --records 30000"
    head = records_throughput.report(figures, command, "abc1234").split("| measure |")[0]
    assert head.startswith("# Record writer: throughput and outage drain (")
    assert "- commit: `abc1234`" in head
    assert f"- command: `{command}`" in head
    assert "backlog 30000 records, Postgres outage 60 s, load 500 records/s" in head
    assert "`RECORD_BATCH_SIZE` 500" in head
