"""bench.redis_scripts_ab reads the steps of `bench.redis_scripts` runs as they print them
and pairs the runs of two versions."""

from __future__ import annotations

from bench.redis_scripts import Step
from bench.redis_scripts_ab import Sides, step_figures, summaries


def _printed(*steps: Step) -> str:
    """A run's output as bench.redis_scripts prints it (its `r<round> ` prefix)."""
    return "\n".join(["Redis allocator: jemalloc", *(f"r1 {step.line()}" for step in steps)])


def test_each_steps_redis_time_per_call_is_read() -> None:
    bid = Step("bid reservation", 16_000, 0.5, 0.4, 18.0, 1_000, 14_000_000)
    accept = Step("accept + record read", 16_000, 1.2, 0.96, 40.0, 1_300, 7_000_000, 10**9)
    # Redis' CPU over the step's calls: 0.4 s / 16,000 and 0.96 s / 16,000.
    assert step_figures(_printed(bid, accept)) == {
        "bid reservation": 25.0,
        "accept + record read": 60.0,
    }
    assert step_figures("median over the rounds (Redis us/call):\n  bid reservation 25.0") == {}


def test_the_ratio_is_the_median_of_the_pairs_not_of_the_medians() -> None:
    sides = Sides()
    # The machine slows down between the pairs; within each the after side is 10 % faster.
    for before in (20.0, 30.0, 40.0):
        sides.add({"bid": before, "gone": 1.0}, {"bid": before * 0.9})
    (line,) = sides.lines()
    assert line.startswith("bid ")
    assert "after/before 0.900 (median of 3 pairs)" in line
    assert "before   30.0 us (q1  20.0, min  20.0)" in line


def test_one_trees_runs_give_each_steps_median_quartile_and_minimum() -> None:
    # Five runs; the machine's load adds time to some. The offer step is missing from one run.
    runs = [
        {"bid": 19.0, "offer": 18.0},
        {"bid": 25.0, "offer": 24.0},
        {"bid": 17.5},
        {"bid": 30.0, "offer": 16.0},
        {"bid": 21.0, "offer": 22.0},
    ]
    bid, offer = summaries(runs)
    # sorted bid: 17.5 19 21 25 30 -> median 21, q1 the 2nd of 5 (index (5-1)//4 = 1) 19.
    assert " ".join(bid.split()) == "bid 21.0 us (q1 19.0, min 17.5) over 5 runs"
    # sorted offer: 16 18 22 24 -> median 20, q1 index (4-1)//4 = 0: 16.
    assert " ".join(offer.split()) == "offer 20.0 us (q1 16.0, min 16.0) over 4 runs"
