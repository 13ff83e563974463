"""Typed settings, read from the environment once and validated with every problem reported.

Each setting is declared once, in its group: its environment name, its default and the reader
of its value (`setting(...)`), with what it means in the docstring under it. A group reads its
own settings and checks them together (`Group.load`); `load_settings` gathers every group's
problems and raises them at once. The README's configuration table lists every setting."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Generic, Self, TypeVar, get_type_hints
from urllib.parse import urlsplit

from store.hot import OFFER_FORMS, SLICE_COUNTS, OfferForm
from store.hot.topology import REDIS_MODES, RedisMode, TopologyError
from store.hot.topology import parse as parse_topology

__all__ = [
    "DEFAULT_TRACKING_PATH",
    "ENVIRONMENTS",
    "LOG_LEVELS",
    "Group",
    "IntervalSettings",
    "LimitSettings",
    "OfferSettings",
    "PerSettings",
    "PerimeterSettings",
    "PostgresSettings",
    "RecordSettings",
    "RedisSettings",
    "SecretSettings",
    "ServerSettings",
    "Settings",
    "SettingsError",
    "environment_names",
    "load_settings",
    "setting",
]


ENVIRONMENTS = ("production", "staging")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
#: Where the tracking endpoint is served when TRACKING_BASE_URL names no path of its own.
DEFAULT_TRACKING_PATH = "/functions/v1/track"
_MIN_SECRET_LEN = 16

_T = TypeVar("_T")

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


#: A reader's answer for a value that counts as unset: the setting keeps its default.
_UNSET: Any = object()


def setting(env: str, default: _T, read: Callable[[str, str], _T]) -> _T:
    """A setting read from the environment variable `env`: `read(env, raw)` gives its value,
    `_UNSET` for a value that counts as absent (an empty number), or raises ValueError saying
    what is wrong; absent, the setting is `default`."""
    return field(default=default, metadata={"env": env, "read": read})


class Group:
    """A group of settings: `load` reads each of its fields, then `checked` checks them
    together (what one value alone cannot say)."""

    @classmethod
    def load(cls, env: Mapping[str, str], problems: list[str], *, required: bool = True) -> Self:
        """The group as `env` sets it; every problem found is added to `problems`. A group
        that is not `required` (an operator's command that does not use it) may be unset."""
        values: dict[str, Any] = {}
        for declared in dataclasses.fields(cls):  # type: ignore[arg-type]
            name = declared.metadata["env"]
            raw = env.get(name)
            if raw is None:
                continue
            try:
                value = declared.metadata["read"](name, raw)
            except ValueError as exc:
                problems.append(str(exc))
                continue
            if value is not _UNSET:
                values[declared.name] = value
        return cls(**values).checked(problems, required=required)

    def checked(self, problems: list[str], *, required: bool) -> Self:
        """The group with the values derived from others filled in; what is wrong with the
        values together is added to `problems`."""
        return self


# -- readers -----------------------------------------------------------------------------------


def _text(_: str, raw: str) -> str:
    return raw


def _trimmed(_: str, raw: str) -> str:
    return raw.strip()


def _without_trailing_slash(_: str, raw: str) -> str:
    return raw.rstrip("/")


def _positive_int(name: str, raw: str) -> int:
    if raw == "":
        return _UNSET  # type: ignore[no-any-return]
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"{name} must be greater than 0, got {value}")
    return value


def _positive_float(name: str, raw: str) -> float:
    if raw == "":
        return _UNSET  # type: ignore[no-any-return]
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None
    if not math.isfinite(value) or value <= 0:
        # nan would compare false everywhere: a loop sleeping "nan" seconds would spin.
        raise ValueError(f"{name} must be a finite number greater than 0, got {raw!r}")
    return value


def _idle_timeout(name: str, raw: str) -> float:
    """granian counts the idle timeout in whole milliseconds, at most 60 s."""
    value = _positive_float(name, raw)
    if value is not _UNSET and not 0.001 <= value <= MAX_IDLE_TIMEOUT_SECONDS:
        raise ValueError(
            f"{name} must be between 0.001 and {MAX_IDLE_TIMEOUT_SECONDS:g}, got {value:g}"
        )
    return value


def _moment(name: str, raw: str) -> datetime:
    raw = raw.strip()
    if not raw:
        return _UNSET  # type: ignore[no-any-return]
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise ValueError(f"{name} must be an ISO 8601 time, got {raw!r}") from None
    if moment.tzinfo is None:
        raise ValueError(f"{name} needs a time zone (e.g. Z or +02:00), got {raw!r}")
    return moment


def _redis_mode(name: str, raw: str) -> RedisMode:
    value = raw.strip().lower() or "single"
    for mode in REDIS_MODES:
        if value == mode:
            return mode
    raise ValueError(f"{name} must be one of {', '.join(REDIS_MODES)}, got {raw!r}")


def _offer_hash(name: str, raw: str) -> OfferForm:
    value = raw.strip().lower() or "fields"
    for form in OFFER_FORMS:
        if value == form:
            return form
    raise ValueError(f"{name} must be one of {', '.join(OFFER_FORMS)}, got {raw!r}")


def _budget_slices(name: str, raw: str) -> int:
    raw = raw.strip()
    if not raw:
        return _UNSET  # type: ignore[no-any-return]
    if not raw.isdigit() or int(raw) not in SLICE_COUNTS:
        counts = ", ".join(str(k) for k in SLICE_COUNTS)
        raise ValueError(f"{name} must be one of {counts}, got {raw!r}")
    return int(raw)


def _whole_number(name: str, raw: str) -> int:
    raw = raw.strip()
    if not raw:
        return _UNSET  # type: ignore[no-any-return]
    if not raw.isdigit():
        raise ValueError(f"{name} must be a whole number >= 0, got {raw!r}")
    return int(raw)


def _rate(name: str, raw: str) -> Decimal:
    try:
        value = Decimal(raw)
    except InvalidOperation:
        raise ValueError(f"{name} must be a decimal number, got {raw!r}") from None
    if not Decimal(0) <= value <= Decimal(1):
        raise ValueError(f"{name} must be between 0 and 1")
    return value


def _switch(name: str, raw: str) -> bool:
    if raw.lower() not in ("0", "1", "true", "false"):
        raise ValueError(f"{name} must be 1 or 0")
    return raw.lower() in ("1", "true")


def _one_of(choices: tuple[str, ...], *, upper: bool = False) -> Callable[[str, str], str]:
    def read(name: str, raw: str) -> str:
        value = raw.upper() if upper else raw
        if value not in choices:
            raise ValueError(f"{name} must be one of {', '.join(choices)}, got {raw!r}")
        return value

    return read


def _secret_list(_: str, raw: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in raw.split(",") if s.strip())


def _url_problem(name: str, url: str, schemes: tuple[str, ...]) -> str | None:
    """What is wrong with a service URL, never repeating its value (it may hold a password)."""
    parts = urlsplit(url)
    if parts.scheme not in schemes or not (parts.netloc or parts.scheme == "unix"):
        return f"{name} must be a {' or '.join(schemes)} URL"
    try:
        parts.port  # noqa: B018 - parsed for its ValueError
    except ValueError:
        # A `#`, `/` or `?` in a password cuts it there, and the drivers would then print
        # part of the password as the "port".
        return (
            f"{name} has an unreadable host or port; percent-encode #, /, ?, @ and : "
            "in the user name and password"
        )
    return None


# -- the groups --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerSettings(Group):
    """How the service presents itself: its environment, its public URLs, its log."""

    environment: str = setting("BIDDER_ENV", "staging", _one_of(ENVIRONMENTS))
    """`production` or `staging`; API keys carry the environment's prefix (`key_prefix`)."""
    public_base_url: str = setting(
        "PUBLIC_BASE_URL", "http://127.0.0.1:8000", _without_trailing_slash
    )
    """The environment's `{base_url}`."""
    tracking_base_url: str = setting("TRACKING_BASE_URL", "", _without_trailing_slash)
    """`{tracking_url}` of VAST tracking events; empty: `{PUBLIC_BASE_URL}` and the usual path."""
    log_level: str = setting("LOG_LEVEL", "INFO", _one_of(LOG_LEVELS, upper=True))
    """The lowest level logged."""
    migration_guide_url: str = setting("MIGRATION_GUIDE_URL", "", _text)
    """The OpenRTB deprecation notice's migration guide; empty: the one this service serves."""
    documentation_url: str = setting("DOCUMENTATION_URL", "", _text)
    """The OpenRTB deprecation notice's documentation; empty: the one this service serves."""

    @property
    def tracking_path(self) -> str:
        """The path part of TRACKING_BASE_URL: the tracking endpoint is served there."""
        return urlsplit(self.tracking_base_url).path.rstrip("/") or DEFAULT_TRACKING_PATH

    @property
    def key_prefix(self) -> str:
        """API keys carry their environment, so a staging key never works in production."""
        return "dk_live_" if self.environment == "production" else "dk_stg_"

    def checked(self, problems: list[str], *, required: bool) -> Self:
        public = self.public_base_url
        if urlsplit(public).scheme not in ("http", "https"):
            problems.append("PUBLIC_BASE_URL must be an http or https URL")
        tracking = self.tracking_base_url
        if not tracking:
            tracking = f"{public}{DEFAULT_TRACKING_PATH}"
        else:
            parts = urlsplit(tracking)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                problems.append("TRACKING_BASE_URL must be an http or https URL")
            elif parts.query or parts.fragment:
                problems.append("TRACKING_BASE_URL must not carry a query or a fragment")
            elif not parts.path:
                # A tracking host of its own (https://track.example.com): the endpoint keeps
                # its usual path there, in the URLs the VAST carries and in the route served.
                tracking = f"{tracking}{DEFAULT_TRACKING_PATH}"
        return dataclasses.replace(
            self,
            tracking_base_url=tracking,
            migration_guide_url=self.migration_guide_url
            or f"{public}/docs/migration-openrtb-to-core",
            documentation_url=self.documentation_url or f"{public}/docs/api-openrtb",
        )


@dataclass(frozen=True)
class SecretSettings(Group):
    """The operator's token and the secrets that sign URLs and the inventory copy."""

    admin_token: str = setting("ADMIN_TOKEN", "", _text)
    """The admin API's operator token, at least 16 characters."""
    signing_secrets: tuple[str, ...] = setting("SIGNING_SECRETS", (), _secret_list)
    """Comma-separated, newest first: the newest signs, all verify."""
    signing_secrets_rotated_at: datetime | None = setting(  # noqa: RUF009 - the declaration
        "SIGNING_SECRETS_ROTATED_AT", None, _moment
    )
    """When SIGNING_SECRETS last changed (ISO 8601 with a zone), for the rotation alert."""

    @property
    def signing_secret(self) -> str:
        """The newest secret signs; all of `signing_secrets` verify."""
        return self.signing_secrets[0]

    def checked(self, problems: list[str], *, required: bool) -> Self:
        token = self.admin_token
        if len(token) < _MIN_SECRET_LEN and (required or token):
            problems.append(f"ADMIN_TOKEN is required, at least {_MIN_SECRET_LEN} characters")
        if not self.signing_secrets:
            if required:
                problems.append("SIGNING_SECRETS is required (comma-separated, newest first)")
        elif any(len(s) < _MIN_SECRET_LEN for s in self.signing_secrets):
            problems.append(
                f"every SIGNING_SECRETS entry needs at least {_MIN_SECRET_LEN} characters"
            )
        return self


@dataclass(frozen=True)
class PostgresSettings(Group):
    """Where the inventory, the keys and the records are kept."""

    url: str = setting("DATABASE_URL", "", _trimmed)
    """Postgres, `postgresql://user:password@host:5432/db`; always required."""

    def checked(self, problems: list[str], *, required: bool) -> Self:
        if not self.url:
            problems.append("DATABASE_URL is required")
        elif problem := _url_problem("DATABASE_URL", self.url, ("postgres", "postgresql")):
            problems.append(problem)
        return self


@dataclass(frozen=True)
class RedisSettings(Group):
    """The hot state: budgets, offers, the record queue."""

    url: str = setting("REDIS_URL", "", _trimmed)
    """Redis, `redis://host:6379/0`, `rediss://...` (TLS) or `unix:///path.sock`; in cluster
    mode seed nodes separated by commas, in sentinel mode `redis+sentinel://...`
    (store/hot/topology.py: the forms of each)."""
    mode: RedisMode = setting("REDIS_MODE", "single", _redis_mode)  # noqa: RUF009 - declaration
    """`single`, `cluster` or `sentinel`."""
    replicas: int | None = setting("REDIS_WAIT_REPLICAS", None, _whole_number)
    """Replicas an accept, a billed impression or a playout waits for before its 2xx; unset:
    1 with replicas to fail over to (cluster, sentinel), else 0 (`wait_replicas`)."""
    timeout_seconds: float = setting("REDIS_TIMEOUT_SECONDS", 0.25, _positive_float)
    """The hot path's socket timeout: past it the Core API answers 503, OpenRTB `nbr` 1."""
    offer_hash: OfferForm = setting("OFFER_HASH", "fields", _offer_hash)  # noqa: RUF009
    """How a new offer's hash is written: `fields` (each on its own, the form every version
    reads), `packed` (its fixed fields in one JSON value) or `lean` (packed, its expiry set at
    its outcome, its deal one string); every form is read."""
    count_day_reservations: bool = setting("COUNT_DAY_RESERVATIONS", True, _switch)
    """Whether a reservation also adds its price to its day's reserved counter, which earlier
    releases check daily limits against (this one checks every open reservation). `false`
    saves a write per reservation and per outcome, once no older worker is left."""
    budget_slices: int = setting("BUDGET_SLICES", 1, _budget_slices)
    """How many shards each campaign's budget is split over (1, 2, 4, 8 or 16). 1 by default,
    what every earlier release reads; a cluster sets 16 once no older worker is left."""

    @property
    def wait_replicas(self) -> int:
        """REDIS_WAIT_REPLICAS, or its default for the mode."""
        if self.replicas is not None:
            return self.replicas
        return 0 if self.mode == "single" else 1

    def checked(self, problems: list[str], *, required: bool) -> Self:
        if not self.url:
            if required:
                problems.append("REDIS_URL is required")
        elif self.mode != "single":
            try:
                parse_topology(self.url, self.mode)
            except TopologyError as exc:
                problems.append(f"REDIS_URL: {exc}")
        elif problem := _url_problem("REDIS_URL", self.url, ("redis", "rediss", "unix")):
            problems.append(problem)
        return self


@dataclass(frozen=True)
class OfferSettings(Group):
    """What an offer is made of when the inventory says nothing."""

    ttl_seconds: int = setting("OFFER_TTL_SECONDS", 300, _positive_int)
    """The lifetime of an offer or bid."""
    retention_seconds: int = setting("OFFER_RETENTION_SECONDS", 90_000, _positive_int)
    """How long Redis keeps an offer or bid after its outcome: its loss notices and tracking
    pixels are recorded that long (the 24-hour loss-notice window and a margin by default)."""
    default_commission_rate: Decimal = setting(  # noqa: RUF009 - the field's declaration
        "DEFAULT_COMMISSION_RATE", Decimal("0.15"), _rate
    )
    """The commission rate (0..1) of a publisher that names none."""
    exchange_rate_max_age_days: int = setting("EXCHANGE_RATE_MAX_AGE_DAYS", 7, _positive_int)
    """How old (days since its `as_of`) an exchange rate may be and still convert a floor."""


@dataclass(frozen=True)
class IntervalSettings(Group):
    """How often each worker's background loops run."""

    inventory_poll_seconds: float = setting("INVENTORY_POLL_SECONDS", 0.5, _positive_float)
    """How often each worker checks the inventory version."""
    sweep_interval_seconds: float = setting("SWEEP_INTERVAL_SECONDS", 5.0, _positive_float)
    """How often expired offers are swept and their reservations released."""
    reconcile_check_seconds: float = setting("RECONCILE_CHECK_SECONDS", 300.0, _positive_float)
    """How often the fleet compares Redis budget counters with the records (one process)."""


@dataclass(frozen=True)
class RecordSettings(Group):
    """The record writer, which drains the record queue into Postgres."""

    writer: bool = setting("RECORD_WRITER", True, _switch)
    """Each web worker also runs the record writer (else `bidder writer` processes do)."""
    batch_size: int = setting("RECORD_BATCH_SIZE", 500, _positive_int)
    """Records read per queue and batch by the record writer."""


@dataclass(frozen=True)
class LimitSettings(Group):
    """What a client may take of a worker."""

    body_timeout_seconds: float = setting("BODY_TIMEOUT_SECONDS", 10.0, _positive_float)
    """How long the next part of a request body may take to arrive before the request gets
    408 (docs/decisions.md, "A body that stops arriving")."""
    idle_timeout_seconds: float = setting(
        "IDLE_TIMEOUT_SECONDS", IDLE_TIMEOUT_SECONDS, _idle_timeout
    )
    """How long a connection may stay open without a whole request head arriving."""
    max_connections_per_worker: int = setting(
        "MAX_CONNECTIONS_PER_WORKER", MAX_CONNECTIONS_PER_WORKER, _positive_int
    )
    """Open connections one worker serves at once; more wait in the listen backlog."""


def _port_or_off(name: str, raw: str) -> int:
    if raw.strip() in ("", "0"):
        return 0
    value = _positive_int(name, raw.strip())
    if value > 65535:
        raise ValueError(f"{name} must be a port from 1 to 65535 (0: none), got {value}")
    return value


def _rate_or_off(name: str, raw: str) -> float:
    if raw.strip() in ("", "0"):
        return 0.0
    return _positive_float(name, raw.strip())


def _count_or_off(name: str, raw: str) -> int:
    if raw.strip() in ("", "0"):
        return 0
    return _positive_int(name, raw.strip())


@dataclass(frozen=True)
class PerimeterSettings(Group):
    """What the public listener exposes, and how much one API key may ask of it
    (docs/operations.md, "A safe perimeter")."""

    admin_port: int = setting("ADMIN_PORT", 0, _port_or_off)
    """`bidder serve`'s admin listener (`--admin-port`): the admin API and `/metrics` there
    only, off the public one; 0: none, both on the public listener."""
    public_admin: bool = setting("PUBLIC_ADMIN", True, _switch)
    """The public listener serves the admin API (`/admin/v1/...`); 0: it answers 404."""
    public_metrics: bool = setting("PUBLIC_METRICS", True, _switch)
    """The public listener serves `/metrics`; 0: it answers 404."""
    rate_limit_per_second: float = setting("RATE_LIMIT_PER_SECOND", 0.0, _rate_or_off)
    """Requests per second one API key may make on the public routes, for a publisher whose
    inventory entry sets no `rate_limit_per_second`; 0: unlimited."""
    rate_limit_burst: int = setting("RATE_LIMIT_BURST", 0, _count_or_off)
    """The burst above that rate (the token bucket's size); 0: one second's worth, at least 1."""


@dataclass(frozen=True)
class Settings:
    """Everything the service reads from its environment, by group."""

    server: ServerSettings = field(default_factory=ServerSettings)
    secrets: SecretSettings = field(default_factory=SecretSettings)
    postgres: PostgresSettings = field(default_factory=PostgresSettings)
    redis: RedisSettings = field(default_factory=RedisSettings)
    offers: OfferSettings = field(default_factory=OfferSettings)
    intervals: IntervalSettings = field(default_factory=IntervalSettings)
    records: RecordSettings = field(default_factory=RecordSettings)
    limits: LimitSettings = field(default_factory=LimitSettings)
    perimeter: PerimeterSettings = field(default_factory=PerimeterSettings)


def _groups() -> list[tuple[str, type[Group]]]:
    """Each group's attribute on Settings and its class."""
    hints = get_type_hints(Settings)
    return [(group.name, hints[group.name]) for group in dataclasses.fields(Settings)]


def environment_names() -> list[str]:
    """Every setting's environment variable, in declaration order."""
    return [
        declared.metadata["env"]
        for _, group in _groups()
        for declared in dataclasses.fields(group)  # type: ignore[arg-type]
    ]


def load_settings(
    env: Mapping[str, str] | None = None, *, redis: bool = True, secrets: bool = True
) -> Settings:
    """Read and validate the settings; raise SettingsError naming every problem at once.

    The service needs them all. An operator's command that does not touch Redis passes
    `redis=False`, and one that neither serves nor signs `secrets=False`: REDIS_URL, or
    ADMIN_TOKEN and SIGNING_SECRETS, may then be absent (a value given is still checked)."""
    env = os.environ if env is None else env
    problems: list[str] = []
    required = {"redis": redis, "secrets": secrets}
    groups: dict[str, Any] = {
        name: group.load(env, problems, required=required.get(name, True))
        for name, group in _groups()
    }
    settings = Settings(**groups)
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
