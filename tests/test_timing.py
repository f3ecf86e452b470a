"""The wall-clock helpers of the benchmarks (jaxrot.studies.timing)."""

import time

import pytest

from jaxrot.studies.timing import median_seconds


def test_median_seconds_adds_calls_until_the_minimum_time_and_stops_at_the_cap():
    calls = []

    def f(pause):
        calls.append(pause)
        time.sleep(pause)
        return 0

    t = median_seconds(lambda: f(0.005), reps=3, min_seconds=0.05)
    assert 0.005 <= t < 0.05
    assert 1 + 5 <= len(calls) <= 1 + 10  # one warm-up, then timed calls of >= 5 ms until 50 ms
    calls.clear()
    median_seconds(lambda: f(0.005), reps=3)
    assert len(calls) == 1 + 3
    calls.clear()
    median_seconds(lambda: f(0.001), reps=3, min_seconds=10.0, max_reps=7)
    assert len(calls) == 1 + 7
    with pytest.raises(ValueError):
        median_seconds(lambda: 0, reps=5, max_reps=4)
