"""An operator reads in the log why a worker is not ready: a failing inventory reload is said
once when it starts and once when it ends, not every poll."""

from __future__ import annotations

import logging

import pytest

from bidder.runtime import Runtime
from bidder.settings import load_settings


def test_reload_failures_are_logged_when_they_start_and_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = load_settings(
        {
            "DATABASE_URL": "postgresql://bidder@db.internal:5432/bidder",
            "REDIS_URL": "redis://cache.internal:6379/0",
            "ADMIN_TOKEN": "a" * 32,
            "SIGNING_SECRETS": "new-secret-0123456789",
        }
    )
    rt = Runtime(settings)
    caplog.set_level(logging.INFO, logger="bidder.runtime")
    for _ in range(3):
        rt.inventory.note_reload_failure("ConnectionRefusedError")
    assert rt.postgres.last_error == "ConnectionRefusedError"
    rt.inventory.note_reload_failure(None)
    rt.inventory.note_reload_failure(None)
    records = [r for r in caplog.records if r.name == "bidder.runtime"]
    assert [r.levelno for r in records] == [logging.WARNING, logging.INFO]
    assert getattr(records[0], "error", None) == "ConnectionRefusedError"
    assert rt.postgres.last_error is None
