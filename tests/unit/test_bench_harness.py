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


def test_commandstats_lines_give_calls_per_request_and_time_per_call() -> None:
    stats = {
        "cmdstat_evalsha": {"calls": 2000, "usec": 60000, "usec_per_call": 30.0},
        "cmdstat_hincrby": {"calls": 4000, "usec": 10000, "usec_per_call": 2.5},
        "cmdstat_hset": {"calls": 2000, "usec": 3000, "usec_per_call": 1.5},
        "cmdstat_ping": {"calls": 3, "usec": 1, "usec_per_call": 0.33},  # under 1 %: left out
    }
    lines = harness.commandstats_lines(stats, requests=2000)
    assert [line.split()[1] for line in lines] == ["evalsha", "hincrby", "hset"]
    assert lines[1].split()[2:] == ["2.00", "calls/request", "2.50", "us/call"]
