"""K(m) and the free-body period; the Dzhanibekov flip interval of simulations against it."""

import jax
import numpy as np
import pytest

import jaxrot
from jaxrot import analysis, exact, problems, reference


@pytest.mark.parametrize("m", [0.0, 0.3, 0.9, 1 - 1e-6, 1 - 1e-12])
def test_ellipk_against_scipy(m):
    from scipy.special import ellipk

    assert float(exact.ellipk(m)) == pytest.approx(ellipk(m), rel=1e-13)


def test_ellipk_gradient():
    from scipy.special import ellipe, ellipk

    m = 0.4  # dK/dm = (E - (1 - m) K) / (2 m (1 - m))
    assert float(jax.grad(exact.ellipk)(m)) == pytest.approx((ellipe(m) - (1 - m) * ellipk(m)) / (2 * m * (1 - m)),
                                                             rel=1e-10)


@pytest.mark.parametrize("name", ["free_body_mz", "t_handle"])
def test_period_matches_the_reference_sign_changes(name):
    p = problems.get(name)
    T, _ = exact.free_body_period(p.body.J, p.state0.Pi)
    span = float(T) * 1.3
    tr = reference.reference_solution(p, span, n_frames=int(span * 200))
    mid = int(np.argsort(np.asarray(p.body.J))[1])
    flips = analysis.sign_change_times(tr.ts, tr.states.Pi[:, mid])
    assert len(flips) >= 2
    assert float(np.diff(flips).mean()) == pytest.approx(float(T) / 2, rel=1e-6)


def test_dzhanibekov_flip_interval_of_a_good_method_within_one_percent():
    p = problems.get("t_handle")
    T, _ = exact.free_body_period(p.body.J, p.state0.Pi)
    n = int(2.2 * float(T) / 0.01)
    tr = jaxrot.simulate("buss4", p, 0.01, n, save_every=1)
    flips = analysis.sign_change_times(tr.ts, tr.states.Pi[:, 1])
    assert len(flips) >= 4
    assert abs(float(np.diff(flips).mean()) / (float(T) / 2) - 1) <= 0.01
    # an energy-gaining method leaves the polhode and its "flips" do not keep the period
    tr1 = jaxrot.simulate("euler_svd", p, 0.01, n, save_every=1)
    f1 = analysis.sign_change_times(tr1.ts, tr1.states.Pi[:, 1])
    assert abs(float(np.diff(f1).mean()) / (float(T) / 2) - 1) > 0.1


def test_dancing_pole_precession_kept_by_midpoint_lost_by_euler():
    p = problems.get("dancing_pole")
    a = {}
    for m in ("euler_svd", "midpoint_exp"):
        tr = jaxrot.simulate(m, p, 1 / 60, 600, save_every=600)
        a[m] = np.degrees(np.asarray(analysis.body_axis_momentum_angle(tr.states, 2)))
    assert a["midpoint_exp"][0] > 80  # L nearly perpendicular to the rod: a wide precession cone
    assert abs(a["midpoint_exp"][-1] - a["midpoint_exp"][0]) < 1e-6  # kept (pi_z and |Pi| exact)
    assert a["euler_svd"][-1] < 0.5 * a["euler_svd"][0]  # Euler collapses it (measured 85.7 -> 29 deg)
