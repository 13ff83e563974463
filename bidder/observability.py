"""Structured JSON logs with a request id, and the Prometheus metrics of the service.

No log line carries an API key, the admin token or a signing secret: the request middleware logs
method, path template, status and timing only, and `SecretFilter` masks anything shaped like a
key that reaches a message anyway.
"""

from __future__ import annotations

import contextvars
import itertools
import json
import logging
import os
import re
import sys
import time
import uuid
from collections.abc import Iterable
from typing import Any

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client import values as prometheus_values

from store.errors import POSTGRES_UNREACHABLE

#: The status a request is counted and logged under when its client went away before the
#: answer (nginx's 499): label `client_closed` on the request counter, an `info` log event,
#: never a 500.
CLIENT_CLOSED = 499

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")

_KEY_PATTERN = re.compile(r"(dk_(?:live|stg)_)[A-Za-z0-9_\-]+|(Bearer\s+)\S+", re.IGNORECASE)
_RESERVED = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message"}


def mask_secrets(text: str) -> str:
    return _KEY_PATTERN.sub(lambda m: (m.group(1) or m.group(2)) + "***", text)


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, request_id, and any `extra`."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": mask_secrets(record.getMessage()),
            "request_id": request_id_var.get(),
        }
        for key, value in record.__dict__.items():
            if key not in _RESERVED and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = mask_secrets(self.formatException(record.exc_info))
        return json.dumps(entry, default=str)


class WithoutOutageTracebacks(logging.Filter):
    """asyncpg's pool logs a warning with a whole traceback each time it fails to reconnect
    while Postgres is down (dozens in a short outage). The failure is expected and its type
    and text say all of it: the record keeps them as `error` and drops the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if record.levelno <= logging.WARNING and isinstance(exc, POSTGRES_UNREACHABLE):
            record.error = f"{type(exc).__name__}: {exc}"
            record.exc_info = None
            record.exc_text = None
        return True


def configure_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(WithoutOutageTracebacks())
    handler.formatter.converter = time.gmtime  # type: ignore[union-attr]
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("granian.access", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


#: Set by `bidder serve` for more than one worker: each worker keeps its figures in files there,
#: and /metrics sums them, so a scrape sees the host, not whichever worker answered it.
MULTIPROCESS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROCESS_DIR_ENV) or None


def use_multiprocess_values() -> None:
    """In a worker process (after the fork), keep metric values in the shared directory when
    one is set. prometheus_client chose its value class when the parent imported it, before
    `bidder serve` set the directory, so it is chosen again here, before any Metrics exist."""
    if multiprocess_dir() is not None:
        prometheus_values.ValueClass = prometheus_values.get_value_class()  # type: ignore[no-untyped-call]


def exposition(metrics: Metrics) -> bytes:
    """The /metrics text: this process's figures, or every worker's summed (gauges: the most
    recent value any worker set) when the workers share a multiprocess directory."""
    if multiprocess_dir() is None:
        return generate_latest(metrics.registry)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return generate_latest(registry)


class Metrics:
    """The service's Prometheus collectors, on a registry of their own (one per app)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "http_requests",
            "HTTP requests by route and status",
            ["route", "method", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "http_request_duration_seconds",
            "Request latency by route",
            ["route"],
            registry=r,
            buckets=(
                0.0005,
                0.001,
                0.002,
                0.003,
                0.005,
                0.0075,
                0.01,
                0.025,
                0.05,
                0.1,
                0.25,
                0.5,
                1.0,
                2.5,
            ),
        )
        self.bids = Counter("openrtb_bids", "OpenRTB bids made", registry=r)
        self.no_bids = Counter(
            "openrtb_no_bids", "OpenRTB no-bids by reason", ["reason"], registry=r
        )
        self.offers = Counter("offers", "Core offers by outcome", ["outcome"], registry=r)
        self.bid_outcomes = Counter(
            "openrtb_bid_outcomes",
            "OpenRTB bids by outcome: billed (impression paid), expired (released at expiry)",
            ["outcome"],
            registry=r,
        )
        self.loss_notices = Counter(
            "openrtb_loss_notices",
            "OpenRTB loss notices: first (per bid), retry, unknown (bid no longer known)",
            ["kind"],
            registry=r,
        )
        self.snapshot_builds = Counter(
            "inventory_snapshot_builds",
            "Inventory snapshots a worker built and installed: at most one per "
            "INVENTORY_POLL_SECONDS, however many inventory changes arrived in between",
            registry=r,
        )
        # Labelled children by label value, resolved once: `labels()` costs more than `inc()`.
        self._children: dict[tuple[str, str], Any] = {}
        # Every worker reads the same queue: across workers, the latest reading is the figure.
        self.queue_depth = Gauge(
            "record_queue_depth",
            "Records waiting to reach Postgres",
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.queue_lag = Gauge(
            "record_queue_lag_seconds",
            "Age of the oldest waiting record",
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.batch_size = Histogram(
            "record_batch_size",
            "Records per Postgres write batch",
            registry=r,
            buckets=(1, 10, 50, 100, 250, 500, 1000, 2000),
        )
        self.write_latency = Histogram(
            "record_write_duration_seconds",
            "Time to write one batch to Postgres",
            registry=r,
        )
        self.tracking_replays = Counter(
            "tracking_event_replays",
            "Tracking pixels fired again for an event of an offer already recorded (not stored)",
            ["event"],
            registry=r,
        )
        self.records_written = Counter(
            "records_written", "Records committed to Postgres", registry=r
        )
        self.records_dead_lettered = Counter(
            "records_dead_lettered",
            "Records moved to a dead-letter stream ({bN}:dead), by record type and reason "
            "(undecodable, refused, missing_parent, unexpected)",
            ["type", "reason"],
            registry=r,
        )
        self.record_write_failures = Counter(
            "record_write_failures",
            "Failed record batch writes (postgres: unavailable, retried; data: bisected)",
            ["reason"],
            registry=r,
        )

        # The operations gauges (bidder.gauges sets them every few seconds; deploy/prometheus
        # alerts on them). Workers of a host read the same Redis and Postgres: the latest
        # reading is the figure, except the inventory's age, where the oldest worker counts.
        self.redis_latency = Histogram(
            "redis_call_duration_seconds",
            "Round trip of timed Redis calls: hot (a PING on the hot path's pipelined "
            "connection, queued behind its scripts), queue_stats (the record queue's figures)",
            ["call"],
            registry=r,
            buckets=(0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
        )
        self.dependency_up = Gauge(
            "dependency_up",
            "1 when the dependency (redis, postgres) answered the last check, else 0",
            ["dependency"],
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.inventory_age = Gauge(
            "inventory_age_seconds",
            "Seconds since the snapshot was last loaded from, or confirmed current against, "
            "Postgres (grows while reloads fail or a Redis copy stands in)",
            registry=r,
            multiprocess_mode="max",
        )
        self.campaigns_known = Gauge(
            "budget_campaigns",
            "Campaigns with a budget in Redis",
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.campaigns_exhausted = Gauge(
            "budget_campaigns_exhausted",
            "Campaigns whose total budget is fully reserved or spent (nothing left to offer)",
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.reconcile_differing = Gauge(
            "budget_reconcile_differing_campaigns",
            "Campaigns whose Redis counters differ from the records, at the fleet's last check",
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.reconcile_age = Gauge(
            "budget_reconcile_age_seconds",
            "Seconds since the fleet's last budget check (bidder reconcile, without --repair)",
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.secret_rotated = Gauge(
            "signing_secret_rotated_timestamp_seconds",
            "When the newest signing secret was put in place (SIGNING_SECRETS_ROTATED_AT, "
            "Unix time); 0 when not stated",
            registry=r,
            multiprocess_mode="mostrecent",
        )

    def count_offer(self, outcome: str, count: int = 1) -> None:
        """`count` more Core offers with this outcome (made, no_match, below_min, accepted,
        rejected, expired)."""
        if count:
            self._child(self.offers, "offers", outcome).inc(count)

    def count_bid_outcome(self, outcome: str, count: int = 1) -> None:
        """`count` more OpenRTB bids with this outcome (billed, expired)."""
        if count:
            self._child(self.bid_outcomes, "bid_outcomes", outcome).inc(count)

    def count_loss_notice(self, kind: str) -> None:
        """One more OpenRTB loss notice (first, retry, unknown)."""
        self._child(self.loss_notices, "loss_notices", kind).inc()

    def count_tracking_replay(self, event: str) -> None:
        """One more tracking pixel for an event already recorded for its offer. `event` comes
        from a signed URL, so it is one of the service's own event names."""
        self._child(self.tracking_replays, "tracking_replays", event).inc()

    def count_no_bid(self, reason: str) -> None:
        """One more OpenRTB no-bid for this reason."""
        self._child(self.no_bids, "no_bids", reason).inc()

    def _child(self, counter: Counter, name: str, value: str) -> Any:
        child = self._children.get((name, value))
        if child is None:
            child = self._children[(name, value)] = counter.labels(value)
        return child


def _route_of(scope: Scope) -> str:
    handler = scope.get("route_handler")
    template = scope.get("path_template")
    if isinstance(template, str):
        return template
    if handler is not None and getattr(handler, "paths", None):
        return sorted(handler.paths)[0]
    return "unmatched"


class _RequestIds:
    """Request ids in the shape of `uuid4().hex` (32 hex digits), cheaper: a random per-process
    prefix and a counter, so ids stay unique across workers without a uuid4 per request."""

    def __init__(self) -> None:
        self._prefix = uuid.uuid4().hex[:16]
        self._next = itertools.count()

    def new(self) -> str:
        return f"{self._prefix}{next(self._next):016x}"


#: A caller's request id the service repeats: 1 to 128 visible ASCII characters. Anything else
#: (spaces, control or non-ASCII bytes) is replaced by one of the service's, so the id goes
#: back in the answer's header and into the log as a plain token.
_REQUEST_ID = re.compile(rb"[!-~]{1,128}")


def _incoming_request_id(headers: Iterable[tuple[bytes, bytes]]) -> str:
    """The caller's X-Request-ID when `_REQUEST_ID` takes it, else an empty string."""
    incoming = b""
    for name, value in headers:  # the last one wins, as with dict(headers)
        if name == b"x-request-id":
            incoming = value
    return incoming.decode("ascii") if _REQUEST_ID.fullmatch(incoming) else ""


class RequestObserver:
    """What every HTTP request gets, whichever stack serves it (Litestar's middleware below, or
    `bidder.http.front` for the hot routes): a request id (X-Request-ID in and out), the request
    counter and latency histogram per route, and a log line for every 4xx/5xx and for slow
    requests."""

    def __init__(self, metrics: Metrics, log: logging.Logger) -> None:
        self.metrics, self.log = metrics, log
        self._ids = _RequestIds()
        # The labelled metric children, resolved once per (route, method, status): `labels()`
        # costs more than the increment itself.
        self._counted: dict[tuple[str, str, int], Any] = {}
        self._timed: dict[str, Any] = {}

    def begin(self, scope: Scope) -> tuple[str, contextvars.Token[str]]:
        """The request's id, set as the logging context until `end`."""
        request_id = _incoming_request_id(scope["headers"]) or self._ids.new()
        return request_id, request_id_var.set(request_id)

    def end(
        self,
        token: contextvars.Token[str],
        route: str,
        method: str,
        status: int,
        elapsed: float,
    ) -> None:
        key = (route, method, status)
        counter = self._counted.get(key)
        if counter is None:
            label = "client_closed" if status == CLIENT_CLOSED else str(status)
            counter = self._counted[key] = self.metrics.requests.labels(route, method, label)
        counter.inc()
        timer = self._timed.get(route)
        if timer is None:
            timer = self._timed[route] = self.metrics.latency.labels(route)
        timer.observe(elapsed)
        if status == CLIENT_CLOSED:
            # The client left before its answer: its doing, not the service's (no 500).
            self.log.info(
                "client closed",
                extra={"method": method, "route": route, "duration_ms": round(elapsed * 1000, 3)},
            )
        elif status >= 400 or elapsed > 0.5:
            self.log.log(
                logging.ERROR if status >= 500 else logging.INFO,
                "request",
                extra={
                    "method": method,
                    "route": route,
                    "status": status,
                    "duration_ms": round(elapsed * 1000, 3),
                },
            )
        request_id_var.reset(token)


def request_context_middleware(observer: RequestObserver) -> Any:
    """Litestar middleware giving every request it serves what `RequestObserver` gives."""

    def factory(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != ScopeType.HTTP:
                await app(scope, receive, send)
                return
            request_id, token = observer.begin(scope)
            status_holder = [500]
            start = time.perf_counter()

            async def send_wrapper(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status_holder[0] = message["status"]
                    headers = list(message.get("headers", []))
                    headers.append((b"x-request-id", request_id.encode("latin-1")))
                    message["headers"] = headers
                await send(message)

            try:
                await app(scope, receive, send_wrapper)
            finally:
                elapsed = time.perf_counter() - start
                observer.end(token, _route_of(scope), scope["method"], status_holder[0], elapsed)

        return middleware

    return factory
