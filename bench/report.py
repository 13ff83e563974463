"""The bench report: bench/results/<YYYY-MM-DD>-<scenario>-<commit>.md plus a PNG chart beside it.

A report identifies itself: its name and its header carry the day, the scenario and the commit
it measured (`git rev-parse --short HEAD`, with "-dirty" when tracked files differ from it), and
its header the exact command line and the settings of the run.

`render_markdown` is pure (a RunReport in, text out) so a unit test keeps it honest; the
machine, version and commit probes and the chart are the only parts that look at the outside
world.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from bench.invariants import Check
from bench.throughput import WrkResult, ratio

RESULTS_DIR = Path(__file__).resolve().parent / "results"
PROJECT = RESULTS_DIR.parent.parent

#: A scenario names a report file: lowercase words of letters and digits joined by dashes.
SCENARIO = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
UNKNOWN_COMMIT = "unknown"

#: (endpoint key, label, minimum share of the ceiling's req/s): the bench's throughput targets.
THROUGHPUT_TARGETS: tuple[tuple[str, str, float], ...] = (
    ("bid", "bid", 0.5),
    ("offer_request", "offer request", 0.5),
    ("accept", "accept", 0.4),
)
P99_AT_HALF_PEAK_MS = 5.0
FLAT_MATCHING_FACTOR = 1.25
RSS_LIMIT_MB = 250.0

LABELS = {
    "healthz": "GET /healthz (ceiling)",
    "offer_request": "GET offer request",
    "accept": "POST offer response (accept)",
    "accept_held": "accept, record writer held (records queued, written after)",
    "bid": "POST OpenRTB bid",
    "loss": "GET loss notice",
    "offer_request_half": "offer request at half peak",
    "bid_half": "bid at half peak",
    "bid_small": "bid, 20 campaigns (screens bidding in both)",
    "bid_full_paced": "bid, 2,000 campaigns, paced (screens bidding in both)",
    "bid_small_paced": "bid, 20 campaigns, paced (same requests and rate)",
}


@dataclass
class LocustRow:
    name: str
    requests: int
    failures: int
    p50_ms: float
    p99_ms: float
    rps: float


@dataclass
class RunReport:
    scenario: str
    day: date
    #: the short commit the run measured, "-dirty" appended when tracked files differed from it
    commit: str
    command: str
    mode: str
    machine: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    settings: dict[str, str] = field(default_factory=dict)
    peak: dict[str, WrkResult] = field(default_factory=dict)
    paced: dict[str, WrkResult] = field(default_factory=dict)
    #: every round of the interleaved peak runs, in order; `peak` holds each one's median
    rounds: dict[str, list[WrkResult]] = field(default_factory=dict)
    rss_mb: float | None = None
    rss_peak_mb: float | None = None
    locust: list[LocustRow] = field(default_factory=list)
    locust_summary: str = ""
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ceiling(self) -> float:
        found = self.peak.get("healthz")
        return found.rps if found else 0.0


def median_run(runs: list[WrkResult]) -> WrkResult:
    """The run whose req/s is the median (the lower middle for an even count; among equal
    rates the earlier run), so the peak table's latencies are those of a real run."""
    if not runs:
        raise ValueError("no runs to take the median of")
    return sorted(runs, key=lambda run: run.rps)[(len(runs) - 1) // 2]


def median_by(runs: list[WrkResult], measure: str) -> WrkResult:
    """The run whose `measure` (an attribute such as "p99_ms") is the median, the lower middle
    for an even count: paced runs repeat, and one run's tail swings 2x on this machine."""
    if not runs:
        raise ValueError("no runs to take the median of")
    return sorted(runs, key=lambda run: float(getattr(run, measure)))[(len(runs) - 1) // 2]


@dataclass
class Target:
    name: str
    wanted: str
    measured: str
    met: bool | None  # None: not measured in this run


def targets(report: RunReport) -> list[Target]:
    """The bench's targets (bench/README.md, "Targets") against this run's figures."""
    found: list[Target] = []
    ceiling = report.ceiling
    for key, label, share in THROUGHPUT_TARGETS:
        result = report.peak.get(key)
        value = ratio(result.rps, ceiling) if result and ceiling else None
        found.append(
            Target(
                f"{label} throughput",
                f">= {share:.2f} of the ceiling",
                # Three decimals: 0.3967 shown as "0.40" beside "NOT met" read as a contradiction.
                "not measured" if value is None else f"{value:.3f}",
                None if value is None else value >= share,
            )
        )
    for key, label in (("offer_request_half", "offer request"), ("bid_half", "bid")):
        result = report.paced.get(key)
        found.append(
            Target(
                f"{label} p99 at half peak",
                f"<= {P99_AT_HALF_PEAK_MS:g} ms",
                "not measured"
                if result is None
                else f"{result.p99_ms:.2f} ms at {result.rps:,.0f} req/s",
                None if result is None else result.p99_ms <= P99_AT_HALF_PEAK_MS,
            )
        )
    full, small = report.paced.get("bid_full_paced"), report.paced.get("bid_small_paced")
    found.append(
        Target(
            "bid p50, 2,000 vs 20 campaigns (same paced rate)",
            f"<= {FLAT_MATCHING_FACTOR}x",
            "not measured"
            if not (full and small)
            else f"{full.p50_ms:.3f} / {small.p50_ms:.3f} ms = "
            f"{full.p50_ms / small.p50_ms if small.p50_ms else 0:.2f}x",
            None if not (full and small) else full.p50_ms <= FLAT_MATCHING_FACTOR * small.p50_ms,
        )
    )
    found.append(
        Target(
            "worker RSS with the full inventory",
            f"< {RSS_LIMIT_MB:g} MB",
            "not measured" if report.rss_mb is None else f"{report.rss_mb:.0f} MB",
            None if report.rss_mb is None else report.rss_mb < RSS_LIMIT_MB,
        )
    )
    return found


def _status_summary(result: WrkResult) -> str:
    return ", ".join(f"{status}: {n:,}" for status, n in sorted(result.statuses.items()))


def _wrk_table(results: dict[str, WrkResult], ceiling: float) -> list[str]:
    lines = [
        "| endpoint | req/s | share of ceiling | p50 ms | p90 ms | p99 ms | max ms | "
        "connections | answers |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for key, result in results.items():
        share = f"{ratio(result.rps, ceiling):.2f}" if ceiling else "-"
        target = f" (target {result.target_rps:,.0f})" if result.target_rps else ""
        lines.append(
            f"| {LABELS.get(key, key)} | {result.rps:,.0f}{target} | {share} | "
            f"{result.p50_ms:.2f} | {result.p90_ms:.2f} | {result.p99_ms:.2f} | "
            f"{result.max_ms:.1f} | {result.connections} | {_status_summary(result)} |"
        )
    return lines


def _rounds_section(report: RunReport) -> list[str]:
    """How the peaks were taken, then one row per round: each endpoint's req/s and its ratio
    to the same round's ceiling."""
    count = max(len(runs) for runs in report.rounds.values())
    order = ", ".join(LABELS.get(key, key).replace(" (ceiling)", "") for key in report.rounds)
    if count == 1:
        method = f"Peak figures of {order}: one round, so no median."
    else:
        method = (
            f"Peak figures of {order}: median of {count} interleaved rounds (each round runs "
            "them once, in this order); the peak table shows the round with the median req/s "
            "(the lower middle for an even count), so each ratio in the peak table is "
            "median/median. A round's ratio divides by that same round's /healthz."
        )
    if "accept" in report.rounds:
        method += (
            " Each round's accept runs on an offer pool of its own, made just before it, and "
            "the record queue is drained before the next round."
        )
    singles = [LABELS.get(key, key) for key in report.peak if key not in report.rounds]
    if singles:
        method += f" {', '.join(singles)}: one run each, after the rounds, compared to the " + (
            "median ceiling." if count > 1 else "round's ceiling."
        )
    ceilings = report.rounds.get("healthz", [])
    columns = [
        f"{LABELS.get(key, key)} req/s" + ("" if key == "healthz" else " | ratio")
        for key in report.rounds
    ]
    ratio_columns = sum(1 for key in report.rounds if key != "healthz")
    lines = [method, "", "| round | " + " | ".join(columns) + " |"]
    lines.append("|---:|" + "---:|" * (len(report.rounds) + ratio_columns))
    for index in range(count):
        ceiling = ceilings[index].rps if index < len(ceilings) else 0.0
        cells = [str(index + 1)]
        for key, runs in report.rounds.items():
            run = runs[index] if index < len(runs) else None
            cells.append("-" if run is None else f"{run.rps:,.0f}")
            if key != "healthz":
                known = run is not None and ceiling > 0
                cells.append(f"{ratio(run.rps, ceiling):.2f}" if run and known else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _mark(met: bool | None) -> str:
    return {True: "met", False: "NOT met", None: "not measured"}[met]


def context_lines(
    settings: Mapping[str, str], machine: Mapping[str, str], versions: Mapping[str, str]
) -> list[str]:
    """A report's "Settings" and "Machine and versions" sections, as markdown lines."""
    return [
        "## Settings",
        "",
        *[f"- {k}: {v}" for k, v in settings.items()],
        "",
        "## Machine and versions",
        "",
        *[f"- {k}: {v}" for k, v in {**machine, **versions}.items()],
        "",
    ]


def render_markdown(report: RunReport, chart_name: str | None = None) -> str:
    out = [
        f"# Bench run {report.day.isoformat()} {report.scenario} on {report.commit}",
        "",
        f"- commit: `{report.commit}`",
        f"- command: `{report.command}` ({report.mode})",
        f"- scenario: {report.scenario}",
        "",
        *context_lines(report.settings, report.machine, report.versions),
    ]
    if report.notes:
        out += ["## Notes", "", *[f"- {n}" for n in report.notes], ""]
    out += ["## Peak throughput (wrk, closed loop)", ""]
    out += _wrk_table(report.peak, report.ceiling) if report.peak else ["Not measured."]
    if report.rounds:
        out += ["", "## Rounds", "", *_rounds_section(report)]
    out += ["", "## Paced runs", ""]
    out += _wrk_table(report.paced, report.ceiling) if report.paced else ["Not measured."]
    if chart_name:
        out += ["", f"![latency and throughput per endpoint]({chart_name})"]
    out += ["", "## Targets", "", "| target | wanted | measured | verdict |"]
    out += ["|---|---|---|---|"]
    out += [f"| {t.name} | {t.wanted} | {t.measured} | {_mark(t.met)} |" for t in targets(report)]
    if report.rss_mb is not None:
        out += [
            "",
            f"Worker RSS after the run: {report.rss_mb:.0f} MB (peak {report.rss_peak_mb:.0f} MB).",
        ]
    out += ["", "## Locust scenarios", ""]
    if report.locust:
        out += [report.locust_summary, ""] if report.locust_summary else []
        out += ["| request | count | failures | p50 ms | p99 ms | req/s |"]
        out += ["|---|---:|---:|---:|---:|---:|"]
        out += [
            f"| {r.name} | {r.requests:,} | {r.failures:,} | {r.p50_ms:g} | {r.p99_ms:g} | "
            f"{r.rps:,.1f} |"
            for r in report.locust
        ]
    else:
        out.append(report.locust_summary or "Not run.")
    out += ["", "## Invariants after the run", ""]
    if report.checks:
        out += ["| check | result | detail |", "|---|---|---|"]
        out += [f"| {c.name} | {'ok' if c.ok else 'FAILED'} | {c.detail} |" for c in report.checks]
    else:
        out.append("Not checked.")
    return "\n".join(out) + "\n"


def write_chart(report: RunReport, path: Path) -> bool:
    """Latency percentiles and throughput per endpoint; False when there is nothing to draw."""
    runs = {**report.peak, **{k: v for k, v in report.paced.items()}}
    if not runs:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [LABELS.get(k, k).replace(" (ceiling)", "") for k in runs]
    fig, (lat_ax, rps_ax) = plt.subplots(1, 2, figsize=(15, 6))
    width = 0.27
    positions = list(range(len(runs)))
    for offset, (label, attr) in enumerate(
        (("p50", "p50_ms"), ("p90", "p90_ms"), ("p99", "p99_ms"))
    ):
        lat_ax.bar(
            [p + (offset - 1) * width for p in positions],
            [getattr(r, attr) for r in runs.values()],
            width,
            label=label,
        )
    lat_ax.axhline(P99_AT_HALF_PEAK_MS, color="red", linestyle="--", linewidth=1, label="5 ms")
    lat_ax.set_xticks(positions, names, rotation=35, ha="right", fontsize=8)
    lat_ax.set_ylabel("latency (ms)")
    lat_ax.set_title("Latency percentiles")
    lat_ax.legend()
    peak_names = [LABELS.get(k, k).replace(" (ceiling)", "") for k in report.peak]
    spread = [  # the lowest and highest round around each median, 0 for a single run
        [r.rps - min(x.rps for x in report.rounds.get(k, [r])) for k, r in report.peak.items()],
        [max(x.rps for x in report.rounds.get(k, [r])) - r.rps for k, r in report.peak.items()],
    ]
    rps_ax.bar(
        range(len(report.peak)),
        [r.rps for r in report.peak.values()],
        yerr=spread,
        capsize=4,
        color="tab:green",
    )
    if report.ceiling:
        for share in (0.5, 0.4):
            rps_ax.axhline(report.ceiling * share, linestyle=":", linewidth=1, color="gray")
    rps_ax.set_xticks(range(len(report.peak)), peak_names, rotation=35, ha="right", fontsize=8)
    rps_ax.set_ylabel("requests per second (peak, one worker)")
    rps_ax.set_title("Throughput (bars: lowest-highest round; dotted: 0.5 and 0.4 of the ceiling)")
    fig.suptitle(f"Bench {report.day.isoformat()} {report.scenario} on {report.commit}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def scenario_argument(text: str) -> str:
    """The `--scenario` option's type: a name that can stand in a report's file name."""
    if not SCENARIO.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: lowercase letters and digits, words joined by dashes (e.g. full-held)"
        )
    return text


def report_stem(day: date, scenario: str, commit: str) -> str:
    """`<YYYY-MM-DD>-<scenario>-<short commit>`: a report's file name without its extension."""
    if not SCENARIO.fullmatch(scenario):
        raise ValueError(
            f"scenario {scenario!r}: lowercase letters and digits, words joined by dashes"
        )
    return f"{day.isoformat()}-{scenario}-{commit}"


def write_report(report: RunReport, folder: Path = RESULTS_DIR) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    stem = report_stem(report.day, report.scenario, report.commit)
    chart = folder / f"{stem}.png"
    drawn = write_chart(report, chart)
    path = folder / f"{stem}.md"
    path.write_text(render_markdown(report, chart.name if drawn else None))
    return path


# -- probes ------------------------------------------------------------------------------------


def _git(folder: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def source_commit(folder: Path = PROJECT) -> str:
    """The short commit of the checkout at `folder`, "-dirty" appended when a tracked file
    differs from it (untracked files, such as new reports, do not count); "unknown" outside a
    git checkout or without git."""
    try:
        head = _git(folder, "rev-parse", "--short", "HEAD")
        changed = _git(folder, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return UNKNOWN_COMMIT
    if not head:
        return UNKNOWN_COMMIT
    return f"{head}-dirty" if changed else head


def machine() -> dict[str, str]:
    model = "unknown"
    memory = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    except OSError:
        pass
    try:
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        load = "unknown"
    return {
        "load average before the run (1, 5, 15 min)": load,
        "nproc": str(os.cpu_count()),
        "CPU": model,
        "memory": memory,
        "kernel": platform.release(),
    }


def package_versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in ("litestar", "granian", "msgspec", "redis", "asyncpg", "uvloop", "locust"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    try:
        wrk = subprocess.run(["wrk", "--version"], capture_output=True, text=True, check=False)
        found["wrk"] = (wrk.stdout or wrk.stderr).split("Copyright")[0].strip()
    except OSError:
        found["wrk"] = "not installed"
    return found
