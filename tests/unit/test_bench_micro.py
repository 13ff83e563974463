"""`python -m bench.micro` (docs/performance.md cites its figures) runs to the end and times
every case it names. It once broke silently: HotState grew an attribute the micro-benchmark's
stand-in state did not set, and the reservation case raised."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

_CASES = (
    "select, offer request, 2,000 campaigns",
    "select, bid, 20 campaigns",
    "new_id",
    "HotState.reserve without Redis",
    "HotState.respond (accept) without Redis",
    "parse_bid_request",
    "tracking_urls + render_vast",
    "match_vast (the same, templated)",
    "loss_url",
    "bid_response",
)


def test_every_case_runs_and_reports_a_time() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.micro", "--rounds", "20"],
        check=False,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    times = {}
    for line in done.stdout.splitlines():
        found = re.fullmatch(r"(.+?)\s+(\d+\.\d\d) us", line)
        assert found, f"not a timing line: {line!r}"
        times[found[1]] = float(found[2])
    for case in _CASES:
        assert times.get(case, 0) > 0, f"{case} missing from {sorted(times)}"
