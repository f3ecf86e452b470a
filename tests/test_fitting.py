"""Inertia fitting (optax through simulate), its gradient, uncertainty, bad input; sensitivities."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import fitting, problems

P = problems.t_handle(omega0=(0.3, 2.0, 0.2), t_end=6.0)
J_TRUE = np.asarray(P.body.J)
OMEGA0 = np.asarray(P.state0.Pi / P.body.J)


@pytest.fixture(scope="module")
def obs():
    return fitting.observe(P, 60, 0.1, 1e-3, jax.random.PRNGKey(0))


def test_parametrisation_is_physical_and_invertible():
    th = jnp.array([0.3, -2.0, 1.1])
    J = fitting.moments_from_params(th)
    assert bool(jnp.all(J > 0)) and bool(jnp.all(2 * J <= J.sum()))
    np.testing.assert_allclose(fitting.params_from_moments(J), th, atol=1e-14)


def test_loss_gradient_equals_finite_differences(obs):
    model = fitting.inertia_model(obs, np.eye(3), omega0=OMEGA0, trace=float(J_TRUE.sum()))

    def loss(theta):
        r = model.residuals({"theta": theta, "q": jnp.zeros(3)})
        return 0.5 * jnp.sum(r * r)

    th = fitting.params_from_moments(J_TRUE * np.array([0.9, 1.1, 1.0]))
    g = jax.grad(loss)(th)
    e = 1e-6
    fd = jnp.stack([(loss(th.at[i].add(e)) - loss(th.at[i].add(-e))) / (2 * e) for i in range(3)])
    np.testing.assert_allclose(g, fd, rtol=1e-5)


# liemid_i: the implicit path of the same fit (its trajectory gradients are checked in tests/test_newton.py)
@pytest.mark.parametrize("method", ["split4_231", pytest.param("liemid_i", marks=pytest.mark.slow)])
def test_fit_recovers_the_moments(obs, method):
    guess = J_TRUE * np.array([0.8, 1.2, 0.8])  # 20% wrong, still physical
    res = fitting.fit_inertia(obs, guess, np.eye(3), omega0=OMEGA0, trace=float(J_TRUE.sum()), method=method,
                              max_iters=100)
    assert np.all(np.abs(res.J / J_TRUE - 1) < 0.01), res.J
    # the reported uncertainty is honest: the error is within 4 standard deviations
    assert np.all(np.abs(res.J - J_TRUE) < 4 * res.J_std + 1e-12), (res.J - J_TRUE, res.J_std)
    assert 0.5 < res.reduced_chi2 < 2.0
    assert res.loss_history[-1] < res.loss_history[0]


BOUNDARY_GUESS = np.array([J_TRUE[1] + J_TRUE[2], J_TRUE[1], J_TRUE[2]])  # a flat body: J1 = J2 + J3


def test_a_guess_on_the_physical_boundary_starts_inside_it():
    theta0 = fitting._start(BOUNDARY_GUESS)  # (the parameters of the guess itself hold a log(0))
    assert np.all(np.isfinite(theta0))
    J0 = np.asarray(fitting.moments_from_params(theta0))
    assert np.all(2 * J0 < J0.sum()) and np.allclose(J0, BOUNDARY_GUESS, rtol=0.03)
    inside = J_TRUE * np.array([0.8, 1.2, 0.8])  # a guess well inside: its own parameters
    np.testing.assert_allclose(fitting._start(inside), fitting.params_from_moments(inside), rtol=1e-14)


@pytest.mark.slow  # a fit (the default run covers fit_inertia's start; test_invalid_inputs.py an L-BFGS fit)
def test_a_guess_on_the_physical_boundary_is_fitted(obs):
    """A flat body's moments as the guess: the fit starts just inside the physical region and reaches
    the moments (it raised inside the compiled update)."""
    res = fitting.fit_inertia(obs, BOUNDARY_GUESS, np.eye(3), omega0=OMEGA0, trace=float(J_TRUE.sum()), max_iters=60)
    assert np.all(np.abs(res.J / J_TRUE - 1) < 0.01), res.J


def test_a_guess_that_is_no_body_is_named_with_the_remedy(obs):
    for guess, why in (([5.0, 1.0, 1.0], "triangle inequality"), ([1.0, jnp.nan, 1.0], "must be finite"),
                       (np.diag([1.0, 2.0, 2.5]), "shape")):
        with pytest.raises(ValueError) as e:
            fitting.fit_inertia(obs, guess, np.eye(3), omega0=OMEGA0, trace=5.2)
        text = str(e.value)
        assert text.startswith("fit_inertia: the guess J_guess = ") and why in text, text
        assert "give three positive moments with J_i <= J_j + J_k" in text


@pytest.mark.slow  # a second fit with other unknowns
def test_fit_with_known_momentum_and_axes():
    Q = jaxrot.so3.exp(jnp.array([0.05, -0.03, 0.02]))  # principal axes tilted in the body frame
    tr = jaxrot.simulate("buss4", P, 0.0125, 480, saveat=jaxrot.SaveAt(steps=8))
    R = jax.vmap(lambda A: A @ Q.T)(tr.states.R[1:])
    obs = fitting.Observations(ts=0.1 * np.arange(1, 61), R=np.asarray(R), sigma=1e-3)
    res = fitting.fit_inertia(obs, J_TRUE * np.array([0.9, 1.1, 0.95]), np.asarray(P.state0.R @ Q.T),
                              Pi0=np.asarray(Q @ P.state0.Pi), fit_axes=True, max_iters=150)
    assert np.all(np.abs(res.J / J_TRUE - 1) < 0.01), res.J
    np.testing.assert_allclose(res.axes, [0.05, -0.03, 0.02], atol=2e-3)


def test_bad_input_raises(obs):
    bad = np.array(obs.R)
    bad[3, 0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        fitting.Observations(ts=obs.ts, R=bad, sigma=1e-3)
    with pytest.raises(ValueError, match="triangle|positive"):
        fitting.fit_inertia(obs, np.array([5.0, 1.0, 1.0]), np.eye(3), omega0=OMEGA0, trace=5.2)
    with pytest.raises(ValueError, match="ratios"):
        fitting.fit_inertia(obs, J_TRUE, np.eye(3), omega0=OMEGA0)
    with pytest.raises(ValueError, match="exactly one"):
        fitting.fit_inertia(obs, J_TRUE, np.eye(3))
    with pytest.raises(ValueError, match="ts = dt_obs"):
        fitting.Observations(ts=obs.ts ** 2, R=obs.R, sigma=1e-3)


def test_sensitivity_matches_finite_differences():
    p = problems.t_handle(omega0=(0.1, 4.0, 0.1), t_end=8.0)
    obs_fn = lambda tr: fitting.first_flip_time(tr)  # noqa: E731
    s = fitting.sensitivity("buss4", p, 0.01, 800, observable=obs_fn, save_every=1)
    t0 = float(obs_fn(jaxrot.simulate("buss4", p, 0.01, 800, saveat=jaxrot.SaveAt(steps=1)))[()])
    assert 0 < t0 < 8
    e = 1e-6

    def flip(J):
        q = jaxrot.Problem(jaxrot.RigidBody(J), p.torque, p.state0, p.t_end)
        return float(obs_fn(jaxrot.simulate("buss4", q, 0.01, 800, saveat=jaxrot.SaveAt(steps=1))))

    fd = [(flip(p.body.J.at[i].add(e)) - flip(p.body.J.at[i].add(-e))) / (2 * e) for i in range(3)]
    np.testing.assert_allclose(s["J"][0], fd, rtol=1e-4)
    full = fitting.sensitivity("buss4", p, 0.01, 50)
    assert full["J"].shape == (12, 3) and full["Pi0"].shape == (12, 3) and full["dt"].shape == (12,)
