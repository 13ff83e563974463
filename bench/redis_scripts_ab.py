"""Redis CPU per hot-path call, an earlier revision against this tree, runs alternated.

On a shared machine the CPU time of one `bench.redis_scripts` run moves by a quarter or more
between runs of the same code, with the neighbours' load. Runs of two versions alternated
(before, after, before, ...) meet the same drift in pairs, so the ratio within each pair says
more than either median. This checks the revision `--before` out into a git worktree under
.run/bench/, runs `python -m bench.redis_scripts` there and here `--runs` times each, in
turn, with the same options, and prints per step each side's median, first quartile and
minimum and the median of the paired ratios (after / before). The worktree is removed at
the end. Compare the scripts' work by `bench.redis_scripts --instructions` first: it does
not drift.

Options for one side only (one the other revision's bench does not know, as
`--count-day-reservations`) go in `--before-args` / `--after-args`.

Without `--before` it runs this tree alone `--runs` times and prints each step's median, first
quartile and minimum: the minimum is the nearest to the cost on a core of Redis' own, as
`timeit` reads its repeats (the neighbours' load only ever adds time), and the median is what
this machine gives.
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: A step's line as `bench.redis_scripts` prints it (Step.line).
_STEP = re.compile(r"^r\d+ (?P<name>.+?)\s+[\d,]+ calls/s\s+Redis\s+(?P<us>[\d.]+) us/call")


def step_figures(output: str) -> dict[str, float]:
    """Redis' us/call per step, from a `bench.redis_scripts` run's output."""
    found = {}
    for line in output.splitlines():
        match = _STEP.match(line)
        if match:
            found[match["name"]] = float(match["us"])
    return found


@dataclass
class Sides:
    """Each step's figures, before and after, in the order the runs were paired."""

    before: dict[str, list[float]] = field(default_factory=dict)
    after: dict[str, list[float]] = field(default_factory=dict)

    def add(self, before: dict[str, float], after: dict[str, float]) -> None:
        for name in (name for name in before if name in after):  # in the run's order
            self.before.setdefault(name, []).append(before[name])
            self.after.setdefault(name, []).append(after[name])

    def lines(self) -> list[str]:
        out = []
        for name, befores in self.before.items():
            afters = self.after[name]
            ratio = statistics.median(a / b for a, b in zip(afters, befores, strict=True))
            out.append(
                f"{name:24s} before {_summary(befores)}   after {_summary(afters)}   "
                f"after/before {ratio:.3f} (median of {len(befores)} pairs)"
            )
        return out


def summaries(runs: list[dict[str, float]]) -> list[str]:
    """Each step's median, first quartile and minimum over `runs` (runs of one tree)."""
    by_step: dict[str, list[float]] = {}
    for run in runs:
        for name, value in run.items():
            by_step.setdefault(name, []).append(value)
    return [
        f"{name:24s} {_summary(values)} over {len(values)} runs" for name, values in by_step.items()
    ]


def _summary(values: list[float]) -> str:
    ordered = sorted(values)
    first_quartile = ordered[(len(ordered) - 1) // 4]
    return f"{statistics.median(ordered):6.1f} us (q1 {first_quartile:5.1f}, min {ordered[0]:5.1f})"


def _run(tree: Path, args: list[str]) -> dict[str, float]:
    result = subprocess.run(
        [sys.executable, "-m", "bench.redis_scripts", *args],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    return step_figures(result.stdout)


def _alone(runs: int, args: list[str]) -> None:
    figures = []
    for number in range(1, runs + 1):
        figures.append(_run(ROOT, args))
        done = ", ".join(f"{name} {us:.1f} us" for name, us in figures[-1].items())
        print(f"run {number}: {done}", flush=True)
    print(f"this tree, {' '.join(args)}:")
    for line in summaries(figures):
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="the earlier revision (git); none: this tree alone")
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--calls", type=int, default=16_000)
    parser.add_argument("--allocator", choices=("glibc", "jemalloc"), default="jemalloc")
    parser.add_argument("--inventory", choices=("plain", "bench"), default="bench")
    parser.add_argument("--before-args", default="")
    parser.add_argument("--after-args", default="")
    args = parser.parse_args()
    common = [
        *("--calls", str(args.calls), "--rounds", "1"),
        *("--allocator", args.allocator, "--inventory", args.inventory),
    ]
    if args.before is None:
        _alone(args.runs, [*common, *shlex.split(args.after_args)])
        return
    worktree = ROOT / ".run" / "bench" / f"ab-{args.before}"
    shutil.rmtree(worktree, ignore_errors=True)
    subprocess.run(["git", "worktree", "prune"], cwd=ROOT, check=True)
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(worktree), args.before], cwd=ROOT, check=True
    )
    sides = Sides()
    try:
        for number in range(1, args.runs + 1):
            before = _run(worktree, [*common, *shlex.split(args.before_args)])
            after = _run(ROOT, [*common, *shlex.split(args.after_args)])
            sides.add(before, after)
            both = [name for name in after if name in before]
            pair = ", ".join(f"{name} {before[name]:.1f} / {after[name]:.1f} us" for name in both)
            print(f"pair {number}: {pair}", flush=True)
    finally:
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT, check=False
        )
    print(f"{args.before} against this tree, {args.allocator}, {args.calls} calls a step:")
    for line in sides.lines():
        print(line)


if __name__ == "__main__":
    main()
