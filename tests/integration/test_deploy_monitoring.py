"""deploy/prometheus and deploy/grafana against the running service: every PromQL expression of
the alert rules and the dashboard parses, and names only metrics a live app's /metrics exports;
the committed dashboard JSON is what its generator writes; the operations gauges read true."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import promql_parser
import yaml
from litestar.testing import AsyncTestClient
from prometheus_client.parser import text_string_to_metric_families

from bidder.http.app import create_app
from tests.support.factories import basic_document, seed
from tests.support.servers import ServerUrls, make_settings, wait_for_inventory

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "bidder.json"
GENERATOR = DEPLOY / "grafana" / "dashboard.py"
#: Series Prometheus makes itself for every target, not the service.
PROMETHEUS_OWN = {"up"}
#: Grafana's interval variable, replaced by a duration before parsing.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m"}
#: The sample names of a family of each type (prometheus_client's exposition).
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
ROTATED_AT = "2026-03-01T12:00:00+00:00"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("deploy_grafana_dashboard", GENERATOR)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def alert_expressions() -> list[str]:
    rules = yaml.safe_load(ALERTS.read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def dashboard_expressions() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    return [t["expr"] for panel in board["panels"] for t in panel.get("targets") or []]


def metric_names(node: Any) -> Iterator[str]:
    """Every metric a PromQL syntax tree selects, by name or by a __name__ matcher."""
    if isinstance(node, promql_parser.VectorSelector):
        if node.name:
            yield node.name
        for matcher in node.matchers.matchers:
            if matcher.name == "__name__":
                yield matcher.value
        return
    for attribute in ("lhs", "rhs", "expr", "param", "vector_selector"):
        child = getattr(node, attribute, None)
        if child is not None:
            yield from metric_names(child)
    for arg in getattr(node, "args", None) or []:
        yield from metric_names(arg)


def parse(expr: str) -> Any:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return promql_parser.parse(expr)


def test_the_committed_dashboard_is_what_the_generator_writes() -> None:
    assert DASHBOARD.read_text() == _generator().render(), (
        "deploy/grafana/dashboards/bidder.json is stale: run .venv/bin/python "
        "deploy/grafana/dashboard.py"
    )


def test_every_alert_and_panel_has_an_expression_that_parses() -> None:
    alerts, panels = alert_expressions(), dashboard_expressions()
    assert len(alerts) >= 10
    assert len(panels) == sum(len(p[2]) for p in _generator().all_panels())
    for expr in alerts + panels:
        tree = parse(expr)
        assert list(metric_names(tree)), f"names no metric: {expr}"


def test_the_alerts_cover_what_operations_needs() -> None:
    """The issue's list: Redis down, queue lag, Postgres down past N minutes, reconcile drift,
    error rate and p99 per route, inventory age, signing-secret rotation overdue."""
    rules = {
        rule["alert"]: rule
        for group in yaml.safe_load(ALERTS.read_text())["groups"]
        for rule in group["rules"]
    }
    wanted = {
        "RedisDown": "dependency_up",
        "RecordQueueLag": "record_queue_lag_seconds",
        "PostgresDown": "dependency_up",
        "BudgetReconcileDrift": "budget_reconcile_differing_campaigns",
        "RouteErrorRate": "http_requests_total",
        "RouteLatencyP99": "http_request_duration_seconds_bucket",
        "InventoryStale": "inventory_age_seconds",
        "SigningSecretRotationOverdue": "signing_secret_rotated_timestamp_seconds",
    }
    for name, metric in wanted.items():
        assert metric in set(metric_names(parse(rules[name]["expr"]))), name
    assert rules["PostgresDown"]["for"] == "10m"
    for per_route in ("RouteErrorRate", "RouteLatencyP99"):
        assert "by (route" in rules[per_route]["expr"]


async def _scrape(servers: ServerUrls) -> tuple[set[str], dict[tuple[str, str], float]]:
    """(every series name it may export, {(sample, label values): value}) of a live app's
    /metrics, after a request and a first round of the operations gauges."""
    await seed(servers.database_url, basic_document())
    app = create_app(make_settings(servers, SIGNING_SECRETS_ROTATED_AT=ROTATED_AT))
    async with AsyncTestClient(app) as client:
        await wait_for_inventory(client)
        await client.get("/healthz")
        await client.get("/functions/v1/api/offers/request/no-such-screen")  # a 401, counted
        text = ""
        # The gauges are set every 5 s; the budgets they count arrive within a second of start.
        for _ in range(300):
            text = (await client.get("/metrics")).text
            if "\nbudget_campaigns 1.0" in text:
                break
            await asyncio.sleep(0.05)
    names: set[str] = set()
    values: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        # A labelled metric shows its family (HELP, TYPE) before its first sample.
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
        for sample in family.samples:
            names.add(sample.name)
            values[(sample.name, ",".join(sample.labels.values()))] = sample.value
    return names, values


async def test_every_metric_the_files_name_is_exported(servers: ServerUrls, clean: None) -> None:
    exported, _ = await _scrape(servers)
    named = {
        name
        for expr in alert_expressions() + dashboard_expressions()
        for name in metric_names(parse(expr))
    }
    missing = sorted(named - exported - PROMETHEUS_OWN)
    assert not missing, f"named by deploy/ but not exported by the service: {missing}"


async def test_the_operations_gauges_read_the_live_state(servers: ServerUrls, clean: None) -> None:
    _, values = await _scrape(servers)
    assert values[("dependency_up", "redis")] == 1
    assert values[("dependency_up", "postgres")] == 1
    assert values[("budget_campaigns", "")] == len(basic_document().campaigns)
    assert values[("budget_campaigns_exhausted", "")] == 0
    assert values[("budget_reconcile_differing_campaigns", "")] == 0
    assert 0 <= values[("budget_reconcile_age_seconds", "")] < 60
    assert 0 <= values[("inventory_age_seconds", "")] < 60
    assert values[("record_queue_depth", "")] == 0
    rotated = datetime.fromisoformat(ROTATED_AT).timestamp()
    assert values[("signing_secret_rotated_timestamp_seconds", "")] == rotated
    assert values[("redis_call_duration_seconds_count", "hot")] >= 1
