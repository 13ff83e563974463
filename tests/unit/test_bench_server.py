"""bench.server: the standalone record writer held for a run, and resumed after it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from bench import server


def _state(pid: int) -> str:
    """The process state letter from /proc (T: stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def test_a_held_writer_is_stopped_for_the_block_and_runs_again_after(tmp_path: Path) -> None:
    seeded = server.Seeded("postgresql://unused", "redis://unused", {}, 0.0)
    writer = server.Writer(seeded, tmp_path / "writer.log")
    writer.proc = subprocess.Popen(["sleep", "30"])
    try:
        with writer.held():
            time.sleep(0.05)
            assert _state(writer.proc.pid) == "T"
        time.sleep(0.05)
        assert _state(writer.proc.pid) in {"S", "R"}
        # Resumed also when the block fails.
        with pytest.raises(RuntimeError), writer.held():
            raise RuntimeError("wrk failed")
        time.sleep(0.05)
        assert _state(writer.proc.pid) in {"S", "R"}
    finally:
        writer.proc.kill()
        writer.proc.wait()
    writer.proc = None
    with writer.held():  # no process: nothing to hold
        pass


def test_a_writer_left_held_stops_at_once(tmp_path: Path) -> None:
    """A run interrupted inside `held` leaves the writer stopped; stopping it must not wait
    out the grace period of a process that cannot act on SIGTERM."""
    seeded = server.Seeded("postgresql://unused", "redis://unused", {}, 0.0)
    writer = server.Writer(seeded, tmp_path / "writer.log")
    writer.proc = subprocess.Popen(["sleep", "30"])
    proc = writer.proc
    os.kill(proc.pid, signal.SIGSTOP)
    time.sleep(0.05)
    started = time.monotonic()
    writer.stop()
    assert time.monotonic() - started < 5
    assert proc.poll() is not None
    assert writer.proc is None
