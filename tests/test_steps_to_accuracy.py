"""analysis.steps_to_accuracy: the doubling + bisection search of Buss's table."""

import numpy as np
import pytest

from jaxrot import analysis, problems, reference
from jaxrot.driver.simulate import simulate


def test_finds_the_threshold_and_it_is_consistent_with_the_order():
    p = problems.get("free_body_mz")
    T = 2.0
    ref = reference.reference_solution(p, T).final
    r = analysis.steps_to_accuracy("buss2", p, 1e-5, t_end=T, reference=ref)
    N = r["N"]
    e = lambda n: float(analysis.final_error(simulate("buss2", p, T / n, n).final, ref))  # noqa: E731
    assert e(N) <= 1e-5 < e(N - 1)
    # order 2: a 4x tighter tolerance needs about 2x the steps
    N4 = analysis.steps_to_accuracy("buss2", p, 2.5e-6, t_end=T, reference=ref)["N"]
    assert 1.8 < N4 / N < 2.2
    # theta-bar is the mean rotation per step
    assert r["theta_deg"] == pytest.approx(np.degrees(analysis.total_rotation_angle(p, T)) / N)


def test_gives_up_above_the_cap():
    p = problems.get("free_body_mz")
    r = analysis.steps_to_accuracy("buss1", p, 1e-12, t_end=1.0, n_max=160)
    assert r["N"] is None and max(n for n, _ in r["evaluations"]) == 160


@pytest.mark.parametrize("kw", [dict(eps=0.0), dict(eps=1e-6, n_min=0), dict(eps=1e-6, n_min=50, n_max=10)])
def test_bad_input(kw):
    with pytest.raises(ValueError):
        analysis.steps_to_accuracy("buss2", problems.get("free_body_mz"), t_end=1.0, **kw)


def test_a_dip_in_the_error_is_not_taken_for_the_threshold(monkeypatch):
    """Errors that pass by accident below a failing larger N (a non-monotone dip) are rejected."""
    import sys

    sim = sys.modules["jaxrot.driver.simulate"]

    class Run:  # stands for a final-state run; the patched final_error reads the step count
        def __init__(self, n):
            self.final = n

    monkeypatch.setattr(sim, "simulate", lambda method, problem, dt, n, **kw: Run(n))
    # monotone (10/N)^2 passes 1e-4 from N = 1000 on, but N = 960 passes by accident
    monkeypatch.setattr(analysis, "final_error", lambda n, ref, metric: 0.0 if n == 960 else (10.0 / n) ** 2)
    monkeypatch.setattr(analysis, "total_rotation_angle", lambda problem, T: 1.0)
    r = analysis.steps_to_accuracy("buss2", problems.get("free_body_mz"), 1e-4, t_end=1.0, reference=object())
    assert r["N"] == 1000
    assert 960 in dict(r["evaluations"]) and r["dips"] == [960]


def test_time_for_rotation_reaches_the_angle():
    p = problems.get("free_body_mz")
    T = analysis.time_for_rotation(p, 20.0)
    assert analysis.total_rotation_angle(p, T, n_frames=4000) == pytest.approx(20.0, rel=1e-6)
    with pytest.raises(ValueError):
        analysis.time_for_rotation(p, -1.0)
