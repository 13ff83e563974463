"""Typed settings, read from the environment once and validated with every problem reported."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Generic, TypeVar
from urllib.parse import urlsplit

from store.hot.topology import REDIS_MODES, RedisMode, TopologyError
from store.hot.topology import parse as parse_topology

ENVIRONMENTS = ("production", "staging")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_MIN_SECRET_LEN = 16


#: Where the tracking endpoint is served when TRACKING_BASE_URL names no path of its own.
DEFAULT_TRACKING_PATH = "/functions/v1/track"


#: How long the next part of a request body may take to arrive before the request gets 408
#: (docs/decisions.md, "A body that stops arriving").
BODY_TIMEOUT_SECONDS = 10.0

#: How long a connection may stay open without a whole request head arriving (the first one, or
#: the next on a kept-alive connection) before the server closes it (docs/decisions.md,
#: "Connections are bounded"). granian takes at most 60 s.
IDLE_TIMEOUT_SECONDS = 30.0
MAX_IDLE_TIMEOUT_SECONDS = 60.0

#: Open connections one worker serves at once; more wait in the listen backlog.
MAX_CONNECTIONS_PER_WORKER = 2048


class SettingsError(ValueError):
    """The environment does not describe a runnable service; `problems` lists every reason."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid settings:\n  - " + "\n  - ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Settings:
    """Everything the service reads from its environment. See the README's configuration table."""

    database_url: str
    redis_url: str
    admin_token: str
    signing_secrets: tuple[str, ...]
    environment: str = "staging"
    public_base_url: str = "http://127.0.0.1:8000"
    tracking_base_url: str = ""
    offer_ttl_seconds: int = 300
    default_commission_rate: Decimal = Decimal("0.15")
    inventory_poll_seconds: float = 0.5
    sweep_interval_seconds: float = 5.0
    record_writer: bool = True
    record_batch_size: int = 500
    redis_timeout_seconds: float = 0.25
    body_timeout_seconds: float = BODY_TIMEOUT_SECONDS
    idle_timeout_seconds: float = IDLE_TIMEOUT_SECONDS
    max_connections_per_worker: int = MAX_CONNECTIONS_PER_WORKER
    log_level: str = "INFO"
    migration_guide_url: str = ""
    documentation_url: str = ""
    signing_secrets_rotated_at: datetime | None = None
    reconcile_check_seconds: float = 300.0
    redis_mode: RedisMode = "single"
    redis_wait_replicas: int = 0
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def tracking_path(self) -> str:
        """The path part of TRACKING_BASE_URL: the tracking endpoint is served there."""
        return urlsplit(self.tracking_base_url).path.rstrip("/") or DEFAULT_TRACKING_PATH

    @property
    def key_prefix(self) -> str:
        """API keys carry their environment, so a staging key never works in production."""
        return "dk_live_" if self.environment == "production" else "dk_stg_"

    @property
    def signing_secret(self) -> str:
        """The newest secret signs; all of `signing_secrets` verify."""
        return self.signing_secrets[0]


def _positive_int(env: Mapping[str, str], name: str, default: int, problems: list[str]) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        problems.append(f"{name} must be a whole number, got {raw!r}")
        return default
    if value <= 0:
        problems.append(f"{name} must be greater than 0, got {value}")
    return value


def _positive_float(
    env: Mapping[str, str], name: str, default: float, problems: list[str]
) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        problems.append(f"{name} must be a number, got {raw!r}")
        return default
    if not math.isfinite(value) or value <= 0:
        # nan would compare false everywhere: a loop sleeping "nan" seconds would spin.
        problems.append(f"{name} must be a finite number greater than 0, got {raw!r}")
        return default
    return value


def _idle_timeout(env: Mapping[str, str], problems: list[str]) -> float:
    """IDLE_TIMEOUT_SECONDS: granian counts it in whole milliseconds, at most 60 s."""
    value = _positive_float(env, "IDLE_TIMEOUT_SECONDS", IDLE_TIMEOUT_SECONDS, problems)
    if not 0.001 <= value <= MAX_IDLE_TIMEOUT_SECONDS:
        problems.append(
            f"IDLE_TIMEOUT_SECONDS must be between 0.001 and {MAX_IDLE_TIMEOUT_SECONDS:g}, "
            f"got {value:g}"
        )
    return value


def _url(env: Mapping[str, str], name: str, schemes: tuple[str, ...], problems: list[str]) -> str:
    raw = env.get(name, "").strip()
    if not raw:
        problems.append(f"{name} is required")
        return ""
    parts = urlsplit(raw)
    if parts.scheme not in schemes or not (parts.netloc or parts.scheme == "unix"):
        problems.append(f"{name} must be a {' or '.join(schemes)} URL")
        return raw
    try:
        parts.port  # noqa: B018 - parsed for its ValueError
    except ValueError:
        # Never repeat the value: a `#`, `/` or `?` in a password cuts it there, and the
        # drivers would then print part of the password as the "port".
        problems.append(
            f"{name} has an unreadable host or port; percent-encode #, /, ?, @ and : "
            "in the user name and password"
        )
    return raw


def _moment(env: Mapping[str, str], name: str, problems: list[str]) -> datetime | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        problems.append(f"{name} must be an ISO 8601 time, got {raw!r}")
        return None
    if moment.tzinfo is None:
        problems.append(f"{name} needs a time zone (e.g. Z or +02:00), got {raw!r}")
        return None
    return moment


def _public_urls(env: Mapping[str, str], problems: list[str]) -> tuple[str, str]:
    public_base_url = env.get("PUBLIC_BASE_URL", "http://127.0.0.1:8000").rstrip("/")
    if urlsplit(public_base_url).scheme not in ("http", "https"):
        problems.append("PUBLIC_BASE_URL must be an http or https URL")
    tracking_base_url = env.get("TRACKING_BASE_URL", "").rstrip("/")
    if not tracking_base_url:
        tracking_base_url = f"{public_base_url}{DEFAULT_TRACKING_PATH}"
    else:
        parts = urlsplit(tracking_base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            problems.append("TRACKING_BASE_URL must be an http or https URL")
        elif parts.query or parts.fragment:
            problems.append("TRACKING_BASE_URL must not carry a query or a fragment")
        elif not parts.path:
            # A tracking host of its own (https://track.example.com): the endpoint keeps its
            # usual path there, in the URLs the VAST carries and in the route served.
            tracking_base_url = f"{tracking_base_url}{DEFAULT_TRACKING_PATH}"
    return public_base_url, tracking_base_url


def _redis_mode(env: Mapping[str, str], problems: list[str]) -> RedisMode:
    raw = env.get("REDIS_MODE", "single").strip().lower() or "single"
    for mode in REDIS_MODES:
        if raw == mode:
            return mode
    problems.append(f"REDIS_MODE must be one of {', '.join(REDIS_MODES)}, got {raw!r}")
    return "single"


def _wait_replicas(env: Mapping[str, str], mode: RedisMode, problems: list[str]) -> int:
    """REDIS_WAIT_REPLICAS: 1 by default with replicas to fail over to (cluster, sentinel)."""
    default = 0 if mode == "single" else 1
    raw = env.get("REDIS_WAIT_REPLICAS", "").strip()
    if not raw:
        return default
    if not raw.isdigit():
        problems.append(f"REDIS_WAIT_REPLICAS must be a whole number >= 0, got {raw!r}")
        return default
    return int(raw)


def _redis_url(env: Mapping[str, str], mode: RedisMode, problems: list[str]) -> str:
    """REDIS_URL, checked against REDIS_MODE (store/hot/topology.py: the forms of each)."""
    if mode != "single":  # several hosts separated by commas: checked by parse_topology
        url = env.get("REDIS_URL", "").strip()
        if not url:
            problems.append("REDIS_URL is required")
    else:
        url = _url(env, "REDIS_URL", ("redis", "rediss", "unix"), problems)
    if url and mode != "single":
        try:
            parse_topology(url, mode)
        except TopologyError as exc:
            problems.append(f"REDIS_URL: {exc}")
    return url


def load_settings(
    env: Mapping[str, str] | None = None, *, redis: bool = True, secrets: bool = True
) -> Settings:
    """Read and validate the settings; raise SettingsError naming every problem at once.

    The service needs them all. An operator's command that does not touch Redis passes
    `redis=False`, and one that neither serves nor signs `secrets=False`: REDIS_URL, or
    ADMIN_TOKEN and SIGNING_SECRETS, may then be absent (a value given is still checked)."""
    env = os.environ if env is None else env
    problems: list[str] = []

    database_url = _url(env, "DATABASE_URL", ("postgres", "postgresql"), problems)
    redis_mode = _redis_mode(env, problems)
    redis_url = _redis_url(env, redis_mode, problems) if redis or env.get("REDIS_URL") else ""

    admin_token = env.get("ADMIN_TOKEN", "")
    if len(admin_token) < _MIN_SECRET_LEN and (secrets or admin_token):
        problems.append(f"ADMIN_TOKEN is required, at least {_MIN_SECRET_LEN} characters")

    signing = tuple(s.strip() for s in env.get("SIGNING_SECRETS", "").split(",") if s.strip())
    if not signing:
        if secrets:
            problems.append("SIGNING_SECRETS is required (comma-separated, newest first)")
    elif any(len(s) < _MIN_SECRET_LEN for s in signing):
        problems.append(f"every SIGNING_SECRETS entry needs at least {_MIN_SECRET_LEN} characters")

    environment = env.get("BIDDER_ENV", "staging")
    if environment not in ENVIRONMENTS:
        problems.append(f"BIDDER_ENV must be one of {', '.join(ENVIRONMENTS)}, got {environment!r}")

    public_base_url, tracking_base_url = _public_urls(env, problems)

    commission_raw = env.get("DEFAULT_COMMISSION_RATE", "0.15")
    try:
        commission = Decimal(commission_raw)
        if not Decimal(0) <= commission <= Decimal(1):
            problems.append("DEFAULT_COMMISSION_RATE must be between 0 and 1")
    except InvalidOperation:
        problems.append(f"DEFAULT_COMMISSION_RATE must be a decimal number, got {commission_raw!r}")
        commission = Decimal("0.15")

    log_level = env.get("LOG_LEVEL", "INFO").upper()
    if log_level not in LOG_LEVELS:
        problems.append(f"LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}")

    writer_raw = env.get("RECORD_WRITER", "1").lower()
    if writer_raw not in ("0", "1", "true", "false"):
        problems.append("RECORD_WRITER must be 1 or 0")

    settings = Settings(
        database_url=database_url,
        redis_url=redis_url,
        admin_token=admin_token,
        signing_secrets=signing,
        environment=environment,
        public_base_url=public_base_url,
        tracking_base_url=tracking_base_url,
        offer_ttl_seconds=_positive_int(env, "OFFER_TTL_SECONDS", 300, problems),
        default_commission_rate=commission,
        inventory_poll_seconds=_positive_float(env, "INVENTORY_POLL_SECONDS", 0.5, problems),
        sweep_interval_seconds=_positive_float(env, "SWEEP_INTERVAL_SECONDS", 5.0, problems),
        record_writer=writer_raw in ("1", "true"),
        record_batch_size=_positive_int(env, "RECORD_BATCH_SIZE", 500, problems),
        redis_timeout_seconds=_positive_float(env, "REDIS_TIMEOUT_SECONDS", 0.25, problems),
        redis_mode=redis_mode,
        redis_wait_replicas=_wait_replicas(env, redis_mode, problems),
        body_timeout_seconds=_positive_float(
            env, "BODY_TIMEOUT_SECONDS", BODY_TIMEOUT_SECONDS, problems
        ),
        idle_timeout_seconds=_idle_timeout(env, problems),
        max_connections_per_worker=_positive_int(
            env, "MAX_CONNECTIONS_PER_WORKER", MAX_CONNECTIONS_PER_WORKER, problems
        ),
        log_level=log_level,
        migration_guide_url=env.get(
            "MIGRATION_GUIDE_URL", f"{public_base_url}/docs/migration-openrtb-to-core"
        ),
        documentation_url=env.get("DOCUMENTATION_URL", f"{public_base_url}/docs/api-openrtb"),
        signing_secrets_rotated_at=_moment(env, "SIGNING_SECRETS_ROTATED_AT", problems),
        reconcile_check_seconds=_positive_float(env, "RECONCILE_CHECK_SECONDS", 300.0, problems),
    )
    if problems:
        raise SettingsError(problems)
    return settings


_Derived = TypeVar("_Derived")


class PerSettings(Generic[_Derived]):
    """`build(settings)`, made once and kept beside the Settings it was made from. Settings are
    frozen and a worker has one, so the last one made is the one asked for again (a test that
    makes other Settings gets a fresh value, never a stale one: the match is by identity)."""

    __slots__ = ("_build", "_last")

    def __init__(self, build: Callable[[Settings], _Derived]) -> None:
        self._build = build
        self._last: tuple[Settings, _Derived] | None = None

    def __call__(self, settings: Settings) -> _Derived:
        last = self._last
        if last is None or last[0] is not settings:
            last = self._last = (settings, self._build(settings))
        return last[1]
