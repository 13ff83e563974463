"""The per-key token bucket (docs/operations.md, "Per-key rate limits"): each worker allows its
share of a rate and of a bucket, a bucket of at least one request; Retry-After is the whole
seconds until one request fits again; without a rate nothing is counted."""

from __future__ import annotations

from decimal import Decimal

import pytest

from bidder.errors import TooManyRequests
from bidder.runtime.rate_limit import RateLimiter
from bidder.settings import Settings, load_settings
from matching.snapshot import PublisherInfo


def _publisher(rate: float | None, burst: int | None) -> PublisherInfo:
    return PublisherInfo(
        id="p",
        name="P",
        commission_rate=Decimal("0.15"),
        external_ids_enabled=False,
        rate_limit_per_second=rate,
        rate_limit_burst=burst,
    )


def _allowed(limiter: RateLimiter, publisher: PublisherInfo | None, key: str = "k") -> int:
    """How many requests in a row pass before the first 429 (at most 1,000)."""
    for n in range(1000):
        try:
            limiter.take(key, publisher)
        except TooManyRequests:
            return n
    return 1000


@pytest.mark.parametrize(("workers", "burst", "each"), [(1, 4, 4), (2, 4, 2), (4, 2, 1)])
def test_each_worker_allows_its_share_of_the_bucket(workers: int, burst: int, each: int) -> None:
    limiter = RateLimiter(Settings(), workers)
    assert _allowed(limiter, _publisher(0.01, burst)) == each


def test_retry_after_is_the_whole_seconds_until_one_request_fits() -> None:
    # Two workers share a rate of 0.4/s: one worker refills 0.2 a second, a request in 5 s.
    limiter = RateLimiter(Settings(), 2)
    publisher = _publisher(0.4, 2)
    limiter.take("k", publisher)
    with pytest.raises(TooManyRequests) as refused:
        limiter.take("k", publisher)
    assert refused.value.status == 429
    assert refused.value.headers == {"Retry-After": "5"}


def test_keys_have_buckets_of_their_own() -> None:
    limiter = RateLimiter(Settings(), 1)
    publisher = _publisher(0.01, 3)
    assert _allowed(limiter, publisher, "a") == 3
    assert _allowed(limiter, publisher, "b") == 3


def test_without_a_rate_nothing_is_counted() -> None:
    limiter = RateLimiter(Settings(), 1)
    assert _allowed(limiter, _publisher(None, None)) == 1000
    assert _allowed(limiter, None) == 1000


def test_the_fleet_default_and_its_default_bucket_of_one_seconds_worth() -> None:
    settings = load_settings(
        {
            "DATABASE_URL": "postgresql://u@h/db",
            "RATE_LIMIT_PER_SECOND": "3",
        },
        redis=False,
        secrets=False,
    )
    limiter = RateLimiter(settings, 1)
    assert _allowed(limiter, _publisher(None, None)) == 3
    assert _allowed(limiter, _publisher(None, 7), "other") == 7  # its own bucket size wins


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("ADMIN_PORT", "70000"),
        ("ADMIN_PORT", "http"),
        ("PUBLIC_ADMIN", "maybe"),
        ("RATE_LIMIT_PER_SECOND", "-1"),
        ("RATE_LIMIT_PER_SECOND", "nan"),
        ("RATE_LIMIT_BURST", "1.5"),
    ],
)
def test_perimeter_settings_refuse_what_they_cannot_mean(name: str, raw: str) -> None:
    with pytest.raises(ValueError, match=name):
        load_settings(
            {"DATABASE_URL": "postgresql://u@h/db", name: raw}, redis=False, secrets=False
        )
