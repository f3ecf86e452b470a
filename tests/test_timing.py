"""The wall-clock helpers of the benchmarks (jaxrot.studies.timing)."""

import time

import numpy as np
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


def test_loosest_passing_tolerance_refines_between_fail_and_pass():
    from jaxrot.studies.analysis import loosest_passing_tolerance

    calls = []

    def passes(tol):  # passes at or below 2e-7
        calls.append(tol)
        return tol <= 2e-7

    tol, tried = loosest_passing_tolerance(passes, 1e-5, refine=0)
    assert np.isclose(tol, 1e-7) and len(calls) == 5
    tol, tried = loosest_passing_tolerance(passes, 1e-5, refine=1)
    assert np.isclose(tol, 10 ** -6.75)  # between 10^-6.5 (fails) and 10^-7 (passes): passes
    tol, tried = loosest_passing_tolerance(passes, 1e-5, refine=2)
    assert np.isclose(tol, 10 ** -6.75) and tol <= 2e-7 < 10 ** -6.625
    tol, tried = loosest_passing_tolerance(lambda t: True, 1e-5, refine=2)  # nothing failed: no bisection
    assert tol == 1e-5 and len(tried) == 1
    tol, tried = loosest_passing_tolerance(lambda t: False, 1e-5, tries=3, refine=2)
    assert tol is None and len(tried) == 3
