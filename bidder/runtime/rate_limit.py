"""Per-key rate limits on the public routes: a token bucket per API key, in each worker.

A publisher's inventory entry sets the rate (`rate_limit_per_second`) and the bucket's size
(`rate_limit_burst`) each of its keys gets; RATE_LIMIT_PER_SECOND and RATE_LIMIT_BURST are the
fleet default for publishers that set none (off unless set). The bucket lives in the worker's
memory: no Redis round trip is added to the hot path. `bidder serve` tells each worker how many
workers share the port (WORKERS_ENV), and each takes its share of the rate and of the bucket,
so the instance as a whole allows about the configured rate: approximate, since the kernel
spreads connections over the workers unevenly (docs/decisions.md, "Per-key rate limits").
"""

from __future__ import annotations

import math
import os
import time

from bidder.errors import TooManyRequests
from bidder.settings import Settings
from matching.snapshot import PublisherInfo

#: How many workers `bidder serve` runs on the port; each worker takes its share of a rate.
WORKERS_ENV = "BIDDER_SERVE_WORKERS"


def serve_workers() -> int:
    """The workers sharing this port, as `bidder serve` announced them (1 when run otherwise)."""
    raw = os.environ.get(WORKERS_ENV, "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else 1


class RateLimiter:
    """Each API key's bucket in this worker: `[tokens, when last filled]` by key id."""

    __slots__ = ("_buckets", "default_burst", "default_rate", "workers")

    def __init__(self, settings: Settings, workers: int = 1) -> None:
        self.default_rate = settings.perimeter.rate_limit_per_second
        self.default_burst = settings.perimeter.rate_limit_burst
        self.workers = workers
        self._buckets: dict[str, list[float]] = {}

    def take(self, key_id: str, publisher: PublisherInfo | None) -> None:
        """One request of `key_id`'s; TooManyRequests (429, `Retry-After` in whole seconds)
        when its bucket is empty. Without a rate for the publisher, nothing is counted."""
        rate = publisher.rate_limit_per_second if publisher is not None else None
        burst = publisher.rate_limit_burst if publisher is not None else None
        if rate is None:
            rate = self.default_rate
            if not rate:
                return
        if burst is None:
            burst = self.default_burst or max(1, math.ceil(rate))
        workers = self.workers
        rate /= workers
        size = max(1.0, burst / workers)
        now = time.monotonic()
        bucket = self._buckets.get(key_id)
        if bucket is None:
            self._buckets[key_id] = [size - 1.0, now]
            return
        tokens = min(size, bucket[0] + (now - bucket[1]) * rate)
        bucket[1] = now
        if tokens >= 1.0:
            bucket[0] = tokens - 1.0
            return
        bucket[0] = tokens
        wait = math.ceil((1.0 - tokens) / rate)
        raise TooManyRequests(
            "Rate limit exceeded for this API key, retry later",
            headers={"Retry-After": str(max(1, wait))},
        )
