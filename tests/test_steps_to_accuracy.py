"""analysis.steps_to_accuracy: the doubling + bisection search of Buss's table."""

import numpy as np
import pytest

from jaxrot import analysis, problems, reference
from jaxrot.simulate import final_state


def test_finds_the_threshold_and_it_is_consistent_with_the_order():
    p = problems.get("free_body_mz")
    T = 2.0
    ref = reference.reference_solution(p, T).final
    r = analysis.steps_to_accuracy("buss2", p, 1e-5, t_end=T, reference=ref)
    N = r["N"]
    e = lambda n: float(analysis.final_error(final_state("buss2", p, T / n, n), ref))  # noqa: E731
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
