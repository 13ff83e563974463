"""The bidder's Grafana dashboard, built as code with grafana-foundation-sdk.

    .venv/bin/python deploy/grafana/dashboard.py     # writes dashboards/bidder.json

The JSON is committed (Grafana provisions it from deploy/grafana/provisioning/), and
tests/integration/test_deploy_monitoring.py regenerates it and compares, parses every PromQL
expression and checks each metric against what the running service exports.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard, prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef

OUTPUT = Path(__file__).parent / "dashboards" / "bidder.json"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="prometheus")

# (title, unit, [(expr, legend)], description)
Panel = tuple[str, str, list[tuple[str, str]], str]

TRAFFIC: list[Panel] = [
    (
        "Requests per second by route",
        "reqps",
        [("sum by (route) (rate(http_requests_total[$__rate_interval]))", "{{route}}")],
        "Every route, the hot ones (offer request, bid, accept) first in volume.",
    ),
    (
        "5xx share by route (SLO 0.5 %)",
        "percentunit",
        [
            (
                'sum by (route) (rate(http_requests_total{status=~"5.."}[$__rate_interval]))'
                " / sum by (route) (rate(http_requests_total[$__rate_interval]))",
                "{{route}}",
            )
        ],
        "Requests answered 5xx over all requests, per route.",
    ),
    (
        "p99 latency by route (SLO 25 ms)",
        "s",
        [
            (
                "histogram_quantile(0.99, sum by (route, le) "
                "(rate(http_request_duration_seconds_bucket[$__rate_interval])))",
                "{{route}}",
            )
        ],
        "Measured inside the service, from the first byte read to the last byte sent.",
    ),
    (
        "Offers and bids by outcome",
        "ops",
        [
            ("sum by (outcome) (rate(offers_total[$__rate_interval]))", "offer {{outcome}}"),
            ("sum(rate(openrtb_bids_total[$__rate_interval]))", "bid"),
            (
                "sum by (reason) (rate(openrtb_no_bids_total[$__rate_interval]))",
                "no bid {{reason}}",
            ),
        ],
        "Core offers (made, accepted, rejected, expired...) and OpenRTB bids and no-bids.",
    ),
]

DEPENDENCIES: list[Panel] = [
    (
        "Dependencies up",
        "none",
        [("min by (dependency) (dependency_up)", "{{dependency}}")],
        "1 when every instance reached the dependency at its last check (every 5 s).",
    ),
    (
        "Redis round trip p50 / p99",
        "s",
        [
            (
                "histogram_quantile(0.5, sum by (call, le) "
                "(rate(redis_call_duration_seconds_bucket[$__rate_interval])))",
                "p50 {{call}}",
            ),
            (
                "histogram_quantile(0.99, sum by (call, le) "
                "(rate(redis_call_duration_seconds_bucket[$__rate_interval])))",
                "p99 {{call}}",
            ),
        ],
        "hot: a PING on the hot path's pipelined connection, queued behind its scripts.",
    ),
    (
        "Inventory age",
        "s",
        [("max by (instance) (inventory_age_seconds)", "{{instance}}")],
        "Since the snapshot was last loaded from or confirmed against Postgres.",
    ),
]

RECORDS: list[Panel] = [
    (
        "Record queue depth",
        "short",
        [("max(record_queue_depth)", "waiting")],
        "Records accepted and not yet in Postgres.",
    ),
    (
        "Record queue lag",
        "s",
        [("max(record_queue_lag_seconds)", "oldest")],
        "Age of the oldest waiting record.",
    ),
    (
        "Records written, failures, dead letters",
        "ops",
        [
            ("sum(rate(records_written_total[$__rate_interval]))", "written"),
            (
                "sum by (reason) (rate(record_write_failures_total[$__rate_interval]))",
                "failed {{reason}}",
            ),
            ("sum(rate(records_dead_lettered_total[$__rate_interval]))", "dead-lettered"),
        ],
        "Batches written by the record writers (web workers or bidder writer).",
    ),
]

BUDGETS: list[Panel] = [
    (
        "Campaigns exhausted",
        "short",
        [
            ("max(budget_campaigns_exhausted)", "exhausted"),
            ("max(budget_campaigns)", "with a budget"),
        ],
        "Campaigns whose total budget is fully reserved or spent.",
    ),
    (
        "Budget check: differing campaigns",
        "short",
        [("max(budget_reconcile_differing_campaigns)", "differing")],
        "Campaigns whose Redis counters differ from the records at the fleet's last check.",
    ),
    (
        "Signing secret age",
        "s",
        [
            (
                "time() - max(signing_secret_rotated_timestamp_seconds) "
                "and max(signing_secret_rotated_timestamp_seconds) > 0",
                "newest secret",
            )
        ],
        "From SIGNING_SECRETS_ROTATED_AT; empty when it is not set.",
    ),
]

STATS: list[Panel] = [
    (
        "Requests / s",
        "reqps",
        [("sum(rate(http_requests_total[$__rate_interval]))", "all")],
        "All routes, all instances.",
    ),
    (
        "Instances",
        "short",
        [('count(up{job="bidder-web"} == 1)', "up")],
        "Web instances Prometheus scrapes successfully.",
    ),
]


def _query(expr: str, legend: str, ref: int) -> prometheus.Dataquery:
    return prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(chr(ord("A") + ref))


def _panel(
    built: timeseries.Panel | stat.Panel, panel: Panel, height: int, width: int
) -> timeseries.Panel | stat.Panel:
    title, unit, queries, description = panel
    built = built.title(title).description(description).unit(unit).datasource(DATASOURCE)
    built = built.height(height).span(width)
    for i, (expr, legend) in enumerate(queries):
        built = built.with_target(_query(expr, legend, i))
    return built


def build() -> dashboard.Dashboard:
    board = (
        dashboard.Dashboard("DOOH bidder")
        .uid("dooh-bidder")
        .tags(["bidder"])
        .refresh("30s")
        .time("now-3h", "now")
        .timezone("utc")
    )
    for panel in STATS:
        board = board.with_panel(_panel(stat.Panel(), panel, 4, 6))
    for title, panels in (
        ("Traffic and SLO", TRAFFIC),
        ("Dependencies", DEPENDENCIES),
        ("Records", RECORDS),
        ("Budgets and secrets", BUDGETS),
    ):
        board = board.with_row(dashboard.Row(title))
        for panel in panels:
            board = board.with_panel(_panel(timeseries.Panel(), panel, 8, 8))
    return board


def render() -> str:
    """The dashboard JSON as committed: sorted keys, two-space indent, a final newline."""
    model = build().build()
    return json.dumps(json.loads(JSONEncoder().encode(model)), indent=2, sort_keys=True) + "\n"


def all_panels() -> list[Panel]:
    return STATS + TRAFFIC + DEPENDENCIES + RECORDS + BUDGETS


if __name__ == "__main__":
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(render())
    print(f"wrote {OUTPUT}", file=sys.stderr)
