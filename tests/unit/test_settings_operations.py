"""The operations settings: SIGNING_SECRETS_ROTATED_AT and RECONCILE_CHECK_SECONDS (README,
"Configuration"), optional, and refused with a clear problem when malformed."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bidder.settings import SettingsError, load_settings

VALID = {
    "DATABASE_URL": "postgresql://user@db.internal:5432/bidder",
    "REDIS_URL": "redis://cache.internal:6379/0",
    "ADMIN_TOKEN": "a" * 32,
    "SIGNING_SECRETS": "new-secret-0123456789",
}


def test_both_are_optional() -> None:
    settings = load_settings(VALID)
    assert settings.secrets.signing_secrets_rotated_at is None
    assert settings.intervals.reconcile_check_seconds == 300  # every five minutes, README's default
    assert (
        load_settings(
            {**VALID, "SIGNING_SECRETS_ROTATED_AT": ""}
        ).secrets.signing_secrets_rotated_at
        is None
    )


def test_the_rotation_date_is_read_with_its_time_zone() -> None:
    settings = load_settings(
        {
            **VALID,
            "SIGNING_SECRETS_ROTATED_AT": "2026-03-01T12:00:00+02:00",
            "RECONCILE_CHECK_SECONDS": "60",
        }
    )
    assert settings.secrets.signing_secrets_rotated_at == datetime(2026, 3, 1, 10, tzinfo=UTC)
    assert settings.intervals.reconcile_check_seconds == 60


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("SIGNING_SECRETS_ROTATED_AT", "last tuesday", "must be an ISO 8601 time"),
        ("SIGNING_SECRETS_ROTATED_AT", "2026-03-01T12:00:00", "needs a time zone"),
        ("RECONCILE_CHECK_SECONDS", "0", "greater than 0"),
        ("RECONCILE_CHECK_SECONDS", "often", "must be a number"),
    ],
)
def test_a_malformed_value_is_a_clear_problem(name: str, value: str, problem: str) -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings({**VALID, name: value})
    assert any(p.startswith(name) and problem in p for p in refused.value.problems)
