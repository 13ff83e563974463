"""bench.harness: which processes `measure` follows, and what it refuses before measuring."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from bench import harness


def test_a_worker_is_followed_by_its_port_and_other_processes_are_not() -> None:
    me = os.getpid()
    info = harness.Info("redis://127.0.0.1:1/0", "postgresql://x@127.0.0.1:2/db", ".", 1, {})
    assert me not in harness.followed_processes(info)  # pytest is no service process
    info.workers["8302"] = me
    assert harness.followed_processes(info)[me] == "worker :8302"


_BURN = """
import time
started = time.process_time()
while time.process_time() - started < 0.3:
    pass
time.sleep(30)
"""


def test_cpu_seconds_counts_a_followed_process() -> None:
    """A busy child shows the CPU time it used."""
    busy = subprocess.Popen([sys.executable, "-c", _BURN])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if harness.cpu_seconds([busy.pid]).get(busy.pid, 0.0) >= 0.25:
                break
            time.sleep(0.05)
        assert harness.cpu_seconds([busy.pid])[busy.pid] >= 0.25
    finally:
        busy.kill()
        busy.wait()


def test_an_unknown_endpoint_is_refused_before_anything_runs() -> None:
    with pytest.raises(SystemExit, match="unknown endpoint 'loss'"):
        harness.measure(["bid", "loss"], [8301], 1.0, 1)
