"""Settings from the environment: defaults, every problem reported at once, derived values."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pytest

from bidder.settings import (
    PerSettings,
    RecordSettings,
    RedisSettings,
    Settings,
    SettingsError,
    environment_names,
    load_settings,
)

VALID = {
    "DATABASE_URL": "postgresql://user@db.internal:5432/bidder",
    "REDIS_URL": "redis://cache.internal:6379/0",
    "ADMIN_TOKEN": "a" * 32,
    "SIGNING_SECRETS": "new-secret-0123456789,old-secret-0123456789",
}


def test_defaults() -> None:
    settings = load_settings(VALID)
    assert settings.server.environment == "staging"
    assert settings.offers.ttl_seconds == 300  # the README's default
    assert settings.server.public_base_url == "http://127.0.0.1:8000"
    assert settings.server.tracking_base_url == "http://127.0.0.1:8000/functions/v1/track"
    assert settings.server.tracking_path == "/functions/v1/track"
    assert settings.offers.default_commission_rate == Decimal("0.15")
    assert settings.records.writer is True
    assert settings.redis.offer_hash == "fields"  # what earlier releases read
    assert settings.offers.retention_seconds == 90_000  # the loss-notice window and an hour
    assert settings.redis.count_day_reservations is True  # what earlier releases' checks read


def test_offer_hash_takes_each_form() -> None:
    assert load_settings({**VALID, "OFFER_HASH": "fields"}).redis.offer_hash == "fields"
    assert load_settings({**VALID, "OFFER_HASH": " Packed "}).redis.offer_hash == "packed"
    assert load_settings({**VALID, "OFFER_HASH": "LEAN"}).redis.offer_hash == "lean"


def test_count_day_reservations_is_a_switch() -> None:
    assert (
        load_settings({**VALID, "COUNT_DAY_RESERVATIONS": "false"}).redis.count_day_reservations
        is False
    )
    assert (
        load_settings({**VALID, "COUNT_DAY_RESERVATIONS": "1"}).redis.count_day_reservations is True
    )


def test_signing_secrets_newest_first() -> None:
    settings = load_settings(VALID)
    assert settings.secrets.signing_secrets == ("new-secret-0123456789", "old-secret-0123456789")
    assert settings.secrets.signing_secret == "new-secret-0123456789"


@pytest.mark.parametrize(
    ("environment", "prefix"), [("production", "dk_live_"), ("staging", "dk_stg_")]
)
def test_key_prefix_names_the_environment(environment: str, prefix: str) -> None:
    assert load_settings({**VALID, "BIDDER_ENV": environment}).server.key_prefix == prefix


def test_tracking_base_url_sets_the_tracking_path() -> None:
    settings = load_settings(
        {
            **VALID,
            "PUBLIC_BASE_URL": "https://api.example.com/",
            "TRACKING_BASE_URL": "https://t.example.com/px/",
        }
    )
    assert settings.server.public_base_url == "https://api.example.com"
    assert settings.server.tracking_base_url == "https://t.example.com/px"
    assert settings.server.tracking_path == "/px"


def test_a_tracking_host_without_a_path_keeps_the_usual_path() -> None:
    """The VAST's URLs and the route served must agree, or no impression is ever billed."""
    settings = load_settings({**VALID, "TRACKING_BASE_URL": "https://track.example.com/"})
    assert settings.server.tracking_base_url == "https://track.example.com/functions/v1/track"
    assert settings.server.tracking_path == "/functions/v1/track"


@pytest.mark.parametrize(
    "url", ["https://t.example.com/px?x=1", "https://t.example.com/px#top", "https:///px"]
)
def test_a_tracking_url_with_a_query_fragment_or_no_host_is_refused(url: str) -> None:
    with pytest.raises(SettingsError, match="TRACKING_BASE_URL"):
        load_settings({**VALID, "TRACKING_BASE_URL": url})


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0"])
def test_intervals_must_be_finite_and_positive(value: str) -> None:
    with pytest.raises(SettingsError, match="INVENTORY_POLL_SECONDS"):
        load_settings({**VALID, "INVENTORY_POLL_SECONDS": value})


def test_every_problem_is_reported_at_once() -> None:
    env = {
        "DATABASE_URL": "mysql://db/bidder",
        "REDIS_URL": "",
        "ADMIN_TOKEN": "short",
        "SIGNING_SECRETS": "tiny,also-tiny",
        "BIDDER_ENV": "prod",
        "PUBLIC_BASE_URL": "ftp://example.com",
        "TRACKING_BASE_URL": "example.com/track",
        "OFFER_TTL_SECONDS": "five",
        "DEFAULT_COMMISSION_RATE": "1.5",
        "INVENTORY_POLL_SECONDS": "0",
        "SWEEP_INTERVAL_SECONDS": "-1",
        "RECORD_WRITER": "maybe",
        "RECORD_BATCH_SIZE": "0",
        "REDIS_TIMEOUT_SECONDS": "soon",
        "LOG_LEVEL": "LOUD",
    }
    with pytest.raises(SettingsError) as caught:
        load_settings(env)
    problems = caught.value.problems
    for name in env:
        assert any(name in problem for problem in problems), name
    assert len(problems) == len(env)
    # The message names every problem too (what the CLI prints).
    for problem in problems:
        assert problem in str(caught.value)


def test_missing_required_settings_are_named() -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings({})
    text = " ".join(caught.value.problems)
    for name in ("DATABASE_URL", "REDIS_URL", "ADMIN_TOKEN", "SIGNING_SECRETS"):
        assert name in text


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("OFFER_TTL_SECONDS", "0"),
        ("OFFER_TTL_SECONDS", "1.5"),
        ("DEFAULT_COMMISSION_RATE", "-0.1"),
        ("DEFAULT_COMMISSION_RATE", "abc"),
        ("SIGNING_SECRETS", " , "),
        ("REDIS_URL", "http://cache:6379"),
        ("DATABASE_URL", "postgresql://"),
        ("IDLE_TIMEOUT_SECONDS", "0"),
        ("IDLE_TIMEOUT_SECONDS", "61"),  # granian's header read timeout is at most 60 s
        ("MAX_CONNECTIONS_PER_WORKER", "0"),
        ("MAX_CONNECTIONS_PER_WORKER", "many"),
        ("OFFER_HASH", "json"),
        ("OFFER_RETENTION_SECONDS", "0"),
        ("OFFER_RETENTION_SECONDS", "a day"),
        ("COUNT_DAY_RESERVATIONS", "no"),
    ],
)
def test_single_bad_values(name: str, value: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings({**VALID, name: value})
    assert len(caught.value.problems) == 1
    assert name in caught.value.problems[0]


def test_accepted_values() -> None:
    settings = load_settings(
        {
            **VALID,
            "BIDDER_ENV": "production",
            "OFFER_TTL_SECONDS": "60",
            "DEFAULT_COMMISSION_RATE": "0.2",
            "RECORD_WRITER": "0",
            "LOG_LEVEL": "debug",
            "REDIS_URL": "unix:///run/redis.sock",
        }
    )
    assert settings.offers.ttl_seconds == 60
    assert settings.offers.default_commission_rate == Decimal("0.2")
    assert settings.records.writer is False
    assert settings.server.log_level == "DEBUG"


def test_per_settings_builds_once_per_settings_object() -> None:
    built: list[str] = []

    def build(settings: Settings) -> str:
        built.append(settings.secrets.signing_secret)
        return f"derived from {settings.secrets.signing_secret}"

    derived = PerSettings(build)
    first = load_settings({**VALID, "SIGNING_SECRETS": "first-secret-0123456789"})
    second = load_settings({**VALID, "SIGNING_SECRETS": "second-secret-0123456789"})
    assert derived(first) == "derived from first-secret-0123456789"
    assert derived(first) == "derived from first-secret-0123456789"
    assert built == ["first-secret-0123456789"]
    assert derived(second) == "derived from second-secret-0123456789"
    # Matched by identity: equal but distinct Settings are built again, never served stale.
    assert derived(load_settings({**VALID, "SIGNING_SECRETS": "second-secret-0123456789"})) == (
        "derived from second-secret-0123456789"
    )
    assert built == [
        "first-secret-0123456789",
        "second-secret-0123456789",
        "second-secret-0123456789",
    ]


@pytest.mark.parametrize("name", ["DATABASE_URL", "REDIS_URL"])
def test_a_url_whose_password_breaks_its_parsing_is_refused_without_echoing_it(
    name: str,
) -> None:
    """An unescaped # in a password ends the host part there: the drivers would read part of
    the password as the port and print it in their error."""
    scheme = "postgresql" if name == "DATABASE_URL" else "redis"
    with pytest.raises(SettingsError) as refused:
        load_settings({**VALID, name: f"{scheme}://bidder:s3cr#tpass@db.internal:5432/x"})
    said = " ".join(refused.value.problems)
    assert name in said
    assert "s3cr" not in said


def test_an_operator_command_needs_only_what_it_uses() -> None:
    """`bidder inventory export` against the demo needs no SIGNING_SECRETS, which the demo
    banner does not print and which no such command uses."""
    database_only = {"DATABASE_URL": VALID["DATABASE_URL"]}
    settings = load_settings(database_only, redis=False, secrets=False)
    assert (settings.redis.url, settings.secrets.admin_token, settings.secrets.signing_secrets) == (
        "",
        "",
        (),
    )
    with_redis = {**database_only, "REDIS_URL": VALID["REDIS_URL"]}
    assert load_settings(with_redis, secrets=False).redis.url == VALID["REDIS_URL"]
    with pytest.raises(SettingsError) as caught:
        load_settings(database_only, secrets=False)
    assert caught.value.problems == ["REDIS_URL is required"]
    with pytest.raises(SettingsError) as caught:
        load_settings(database_only)  # the service needs everything
    assert len(caught.value.problems) == 3


def test_a_setting_given_to_a_command_that_does_not_need_it_is_still_checked() -> None:
    given = {"DATABASE_URL": VALID["DATABASE_URL"], "REDIS_URL": "http://x", "ADMIN_TOKEN": "short"}
    with pytest.raises(SettingsError) as caught:
        load_settings({**given, "SIGNING_SECRETS": "tiny"}, redis=False, secrets=False)
    assert len(caught.value.problems) == 3


def test_connection_bounds_are_generous_by_default_and_settable() -> None:
    default = load_settings(VALID)
    assert default.limits.idle_timeout_seconds == 30  # granian's own header read timeout
    assert default.limits.max_connections_per_worker >= 1024
    settings = load_settings(
        {**VALID, "IDLE_TIMEOUT_SECONDS": "2.5", "MAX_CONNECTIONS_PER_WORKER": "64"}
    )
    assert settings.limits.idle_timeout_seconds == 2.5
    assert settings.limits.max_connections_per_worker == 64


#: Variables in the README's table that no Settings field reads: prometheus_client reads it.
READ_ELSEWHERE = {"PROMETHEUS_MULTIPROC_DIR"}


def _readme_table_names() -> set[str]:
    root = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
    readme = (root / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([A-Z][A-Z0-9_]*)` \|", section, flags=re.MULTILINE))


def test_every_setting_is_in_the_readme_table_and_every_row_is_a_setting() -> None:
    declared = environment_names()
    assert len(declared) == len(set(declared))  # each environment name declared once
    documented = _readme_table_names()
    assert set(declared) - documented == set(), "settings missing from the README's table"
    assert documented - set(declared) == READ_ELSEWHERE, "README rows that are no setting"


def test_each_group_reads_its_own_settings() -> None:
    """A group loaded on its own reads and checks only what it declares."""
    problems: list[str] = []
    redis = RedisSettings.load(
        {"REDIS_URL": "redis://h:1/0", "REDIS_TIMEOUT_SECONDS": "x"}, problems
    )
    assert redis == RedisSettings(url="redis://h:1/0")  # the timeout keeps its default
    assert problems == ["REDIS_TIMEOUT_SECONDS must be a number, got 'x'"]
    problems.clear()
    assert RecordSettings.load({}, problems) == RecordSettings(writer=True, batch_size=500)
    assert problems == []


@pytest.mark.parametrize(
    ("mode", "url", "given", "slices"),
    [
        ("single", "redis://cache.internal:6379/0", None, 1),
        # An older worker would reserve the grants again: slices are the operator's choice.
        ("cluster", "redis://c1:7000,redis://c2:7000", None, 1),
        ("cluster", "redis://c1:7000,redis://c2:7000", "16", 16),
        ("single", "redis://cache.internal:6379/0", "4", 4),
    ],
)
def test_budget_slices_default_to_one_and_take_what_the_operator_sets(
    mode: str, url: str, given: str | None, slices: int
) -> None:
    env = {**VALID, "REDIS_MODE": mode, "REDIS_URL": url}
    if given is not None:
        env["BUDGET_SLICES"] = given
    assert load_settings(env).redis.budget_slices == slices


@pytest.mark.parametrize("value", ["0", "3", "32", "-1", "many"])
def test_budget_slices_must_divide_the_16_shards(value: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings({**VALID, "BUDGET_SLICES": value})
    assert len(caught.value.problems) == 1
    assert "BUDGET_SLICES" in caught.value.problems[0]
