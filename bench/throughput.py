"""The throughput runner: `wrk` pinned to CPU 1 against the worker on CPU 0.

Every run drives bench/wrk/common.lua with a file of fully formed requests (one per line:
method, path, API key, body), so the generator does no work per request beyond picking the
next line. wrk's own `done()` hook prints one `BENCH_JSON {...}` line (requests, duration,
latency percentiles in microseconds, status counts); `parse_wrk_output` reads it.

Peak runs are closed-loop (`-c` connections, no think time). Paced runs give each connection
an exponential think time of mean `c / rate` seconds (wrk's `delay()` hook): an open-ish
Poisson load at about the target rate. wrk times a request from its write to the end of its
response, so the think time never counts as latency; like every closed-loop tool it does not
correct for coordinated omission (wrk2 would; it is not packaged for Debian).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from bench.server import LOADGEN_CPU, taskset

WRK_DIR = Path(__file__).resolve().parent / "wrk"
PEAK_CONNECTIONS = 32
PACED_CONNECTIONS = 16
#: Fresh offers an accept run may take, for each of its seconds: above any accept rate measured
#: here (7,000 a second caps a writer-less harness run at 6,990; the bench's accept with the
#: record writer held runs at about 9,300).
ACCEPT_POOL_RATE = 12_000

CORE = "/functions/v1/api"
OPENRTB = "/functions/v1/openrtb-2-6"


class WrkMissing(RuntimeError):
    """wrk is not installed: the throughput runner cannot measure anything."""


def wrk_binary() -> str:
    found = shutil.which("wrk")
    if not found:
        raise WrkMissing(
            "wrk is not installed, so no throughput figures can be taken. "
            "Install it with `apt-get install -y wrk` (or run with --skip-wrk)."
        )
    return found


@dataclass
class WrkResult:
    """One wrk run: throughput, latency percentiles (ms) and what the server answered."""

    name: str
    requests: int
    duration_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    mean_ms: float
    statuses: dict[int, int]
    socket_errors: dict[str, int]
    harvested: int = 0
    exhausted: bool = False
    connections: int = PEAK_CONNECTIONS
    target_rps: float | None = None
    command: str = ""

    @property
    def rps(self) -> float:
        return self.requests / self.duration_s if self.duration_s > 0 else 0.0

    def count(self, low: int, high: int) -> int:
        return sum(n for status, n in self.statuses.items() if low <= status <= high)

    @property
    def server_errors(self) -> int:
        return self.count(500, 599)


class _WrkJson(msgspec.Struct):
    duration_us: int
    requests: int
    errors: dict[str, int]
    latency_us: dict[str, float]
    statuses: dict[str, int]
    harvested: int = 0
    exhausted_threads: int = 0


_REQUESTS_PER_SEC = re.compile(r"^Requests/sec:\s+([\d.]+)", re.MULTILINE)


def parse_wrk_output(name: str, text: str) -> WrkResult:
    """The figures of one wrk run from its stdout (the BENCH_JSON line of common.lua)."""
    line = next((ln for ln in text.splitlines() if ln.startswith("BENCH_JSON ")), None)
    if line is None:
        raise ValueError(f"wrk output of {name!r} has no BENCH_JSON line:\n{text[-1500:]}")
    raw = msgspec.json.decode(line.removeprefix("BENCH_JSON "), type=_WrkJson)
    lat = raw.latency_us
    return WrkResult(
        name=name,
        requests=raw.requests,
        duration_s=raw.duration_us / 1e6,
        p50_ms=lat["p50"] / 1000,
        p90_ms=lat["p90"] / 1000,
        p99_ms=lat["p99"] / 1000,
        p999_ms=lat["p999"] / 1000,
        max_ms=lat["max"] / 1000,
        mean_ms=lat["mean"] / 1000,
        statuses={int(k): v for k, v in raw.statuses.items()},
        socket_errors=dict(raw.errors),
        harvested=raw.harvested,
        exhausted=raw.exhausted_threads > 0,
    )


def wrk_reported_rps(text: str) -> float | None:
    """wrk's own `Requests/sec:` figure, kept as a cross-check of the parsed one."""
    found = _REQUESTS_PER_SEC.search(text)
    return float(found.group(1)) if found else None


@dataclass
class RequestLine:
    method: str
    path: str
    api_key: str = ""
    body: str = ""

    def render(self) -> str:
        for part in (self.method, self.path, self.api_key, self.body):
            if "\t" in part or "\n" in part:
                raise ValueError("request parts must not contain tabs or newlines")
        return f"{self.method}\t{self.path}\t{self.api_key}\t{self.body}"


def write_requests(path: Path, lines: Iterable[RequestLine]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w") as out:
        for line in lines:
            out.write(line.render() + "\n")
            count += 1
    return count


@dataclass
class WrkRun:
    """How to run wrk once."""

    name: str
    script: str
    data: Path
    seconds: float
    connections: int = PEAK_CONNECTIONS
    threads: int = 1
    harvest: str = ""
    quota: int = 0
    once: bool = False
    delay_ms: float = 0.0
    out: Path | None = None
    target_rps: float | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    def command(self, base_url: str) -> list[str]:
        return [
            *taskset(LOADGEN_CPU),
            wrk_binary(),
            f"-t{self.threads}",
            f"-c{self.connections}",
            f"-d{max(1, round(self.seconds))}s",
            "--latency",
            "--timeout",
            "5s",
            "-s",
            str(WRK_DIR / self.script),
            base_url,
        ]

    def environment(self) -> dict[str, str]:
        return {
            **os.environ,
            "BENCH_WRK_DIR": str(WRK_DIR),
            "BENCH_DATA": str(self.data),
            "BENCH_THREADS": str(self.threads),
            "BENCH_HARVEST": self.harvest,
            "BENCH_QUOTA": str(self.quota),
            "BENCH_ONCE": "1" if self.once else "0",
            "BENCH_DELAY_MS": f"{self.delay_ms:.3f}",
            "BENCH_OUT": str(self.out or ""),
            **self.extra_env,
        }


def run_wrk(run: WrkRun, base_url: str, log_dir: Path) -> WrkResult:
    command = run.command(base_url)
    done = subprocess.run(
        command,
        env=run.environment(),
        capture_output=True,
        text=True,
        timeout=run.seconds + 60,
        check=False,
    )
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / f"wrk-{run.name}.txt").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"wrk {run.name} failed ({done.returncode}): {done.stderr[-1500:]}")
    result = parse_wrk_output(run.name, done.stdout)
    result.connections = run.connections
    result.target_rps = run.target_rps
    result.command = " ".join(command[command.index(wrk_binary()) :])
    return result


def paced_delay_ms(target_rps: float, connections: int = PACED_CONNECTIONS) -> float:
    """Mean think time per connection that offers about `target_rps` in total."""
    if target_rps <= 0:
        raise ValueError("the target rate must be positive")
    return connections * 1000.0 / target_rps


def ratio(value: float, ceiling: float) -> float:
    return value / ceiling if ceiling > 0 else 0.0


def results_json(results: Sequence[WrkResult]) -> str:
    return json.dumps([{**r.__dict__, "rps": r.rps} for r in results], indent=2, default=str)
