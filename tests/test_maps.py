"""Batched maps (acceptance numbers of an independent NumPy implementation) and Kantorovich sub-stepping."""

import math

import numpy as np
import pytest

import jaxrot
from jaxrot import maps, problems
from jaxrot.integrators import KANTOROVICH_X

J = np.array([2.5, 1.4, 1.3])


def _plane(half, n):
    x = np.linspace(-half, half, n)
    X, Y = np.meshgrid(x, x)
    return np.stack([X, Y, 0 * X], -1)


def test_convergence_map_article_settings():
    ells = _plane(15.0, 121)
    newton = maps.convergence_map("midpoint", J, ells, solver="newton", tol=1e-6, max_iters=10)
    fixed = maps.convergence_map("midpoint", J, ells, solver="fixed_point", tol=1e-6, max_iters=10)
    assert newton.shape == (121, 121)
    assert 0.83 < (newton >= 0).mean() < 0.87  # independent NumPy: 84.9%
    assert (fixed >= 0).mean() < 0.03  # independent NumPy: 1.8%
    # Newton converges inside the Kantorovich disc |L| <= 0.8284 J_min (dt = 1)
    r = np.linalg.norm(ells, axis=-1)
    assert np.all(newton[r <= KANTOROVICH_X * J.min()] >= 0)
    # the nearest Newton failure is far outside it (independent NumPy: |L| = 9.8)
    assert 9.0 < r[newton < 0].min() < 10.5


def test_energy_change_map_bounded_like_the_article():
    dE = maps.energy_change_map("midpoint_exp_adaptive", jaxrot.RigidBody(J), _plane(50.0, 21))
    assert not np.isnan(dE).any()
    assert 1e-4 < np.abs(dE).max() < 3e-3  # article: ~0.3% at most; independent NumPy: 0.23%
    # one step of dt = 1 fails for OSTR at some |L| <= 10 (its Newton region): NaN, not dropped
    ostr1 = maps.energy_change_map("trapezoid_object", jaxrot.RigidBody(J), _plane(10.0, 5))
    assert np.isnan(ostr1).any() and not np.isnan(ostr1).all()
    ostr = maps.energy_change_map("trapezoid_object", jaxrot.RigidBody(J), _plane(10.0, 5), n_steps=20)
    assert np.abs(ostr).max() < 1e-13  # energy exact (round-off over 20 steps)


def test_grid_map_chunks_and_shapes():
    a = np.arange(10.0).reshape(2, 5)
    out = maps.grid_map(lambda x, y: x * y + 1, a, a, chunk=3)
    np.testing.assert_array_equal(out, a * a + 1)


@pytest.mark.parametrize("bad", [np.zeros((0, 3)), np.array([[np.nan, 0.0, 0.0]])])
def test_bad_grids_raise(bad):
    with pytest.raises(ValueError, match="empty|NaN"):
        maps.convergence_map("midpoint", J, bad)


def test_bad_arguments_raise():
    ells = _plane(1.0, 3)
    with pytest.raises(ValueError, match="unknown rule"):
        maps.convergence_map("nope", J, ells)
    with pytest.raises(ValueError, match="positive"):
        maps.convergence_map("midpoint", np.array([1.0, -1.0, 1.0]), ells)
    with pytest.raises(ValueError, match="solver"):
        maps.convergence_map("midpoint", J, ells, solver="bisection")


def test_kantorovich_substeps_are_reported_and_safe():
    p = problems.get("t_handle")
    L = float(np.linalg.norm(p.state0.Pi))
    dt = 1.0
    tr = jaxrot.simulate("midpoint_exp_adaptive", p, dt, 3, saveat=jaxrot.SaveAt(steps=1))  # stats per step
    expected = math.ceil(dt * L / (KANTOROVICH_X * J.min()))
    assert np.all(np.asarray(tr.stats.substeps) == expected)
    # the first frame equals plain midpoint steps of the largest safe size, then the remainder
    h = KANTOROVICH_X * J.min() / L
    a = jaxrot.simulate("midpoint_exp", p, h, expected - 1).final
    b = jaxrot.simulate("midpoint_exp", p, dt - (expected - 1) * h, 1, state0=a).final
    np.testing.assert_allclose(tr.states.R[1], b.R, atol=1e-13)


def test_kantorovich_rescues_a_step_where_plain_newton_fails():
    ell = np.array([[10.0, 12.0, 0.0]])
    assert maps.convergence_map("midpoint", J, ell)[0] < 0
    p = jaxrot.Problem(jaxrot.RigidBody(J), jaxrot.torques.FreeTorque(),
                       jaxrot.State(np.eye(3), ell[0]), 1.0)
    tr = jaxrot.simulate("midpoint_exp_adaptive", p, 1.0, 1)
    assert bool(tr.stats.converged.all()) and int(tr.stats.substeps[0]) > 1


def test_kantorovich_forward_mode_gradient():
    p = problems.get("t_handle")

    def f(J):
        q = jaxrot.Problem(jaxrot.RigidBody(J), p.torque, p.state0, p.t_end)
        return jaxrot.simulate("midpoint_exp_adaptive", q, 0.5, 4, saveat=jaxrot.SaveAt(steps=4)).final.R[0, 1]

    import jax

    g = jax.jacfwd(f)(p.body.J)
    e = 1e-6
    fd = [(f(p.body.J.at[i].add(e)) - f(p.body.J.at[i].add(-e))) / (2 * e) for i in range(3)]
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-8)
