"""Lie-Taylor (Magnus / dexpinv) methods."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.linalg import expm

import jaxrot
from jaxrot import analysis, problems, reference
from jaxrot.integrators import magnus_y, magnus_z

from .golden import golden


def test_golden_z():
    W = [jnp.asarray(w) for w in golden()["lie_taylor_inputs_W0..W5"]]
    np.testing.assert_allclose(magnus_z(W, 0.3), golden()["lie_taylor_Z_h0.3"], atol=1e-12)


def _gl4_slopes(K):
    rng = np.random.default_rng(K)
    Ws = [rng.normal(size=(4, 4)) for _ in range(6)]
    bracket = lambda a, b: a @ b - b @ a  # noqa: E731
    errs, hs = [], [0.2, 0.1, 0.05]
    for h in hs:
        def f(t, y):
            W = sum(t**k / math.factorial(k) * Ws[k] for k in range(6))
            return (W @ y.reshape(4, 4)).reshape(16)

        y = solve_ivp(f, (0, h), np.eye(4).reshape(16), method="DOP853", rtol=1e-14, atol=1e-16).y[:, -1]
        Z = np.asarray(magnus_z([jnp.asarray(w) for w in Ws[:K]], h, bracket))
        errs.append(np.abs(expm(h * Z) - y.reshape(4, 4)).max())
    return np.polyfit(np.log(hs), np.log(errs), 1)[0]


@pytest.mark.parametrize("K", [1, 2, 3, 4, 5])
def test_magnus_local_order_in_gl4(K):
    # a general Lie algebra (no so(3) shortcuts): local error h^(K+1)
    assert abs(_gl4_slopes(K) - (K + 1)) < 0.3


def test_y_coefficients_by_hand():
    rng = np.random.default_rng(3)
    W = [jnp.asarray(rng.normal(size=3)) for _ in range(3)]
    Y = magnus_y(W, jnp.cross)
    np.testing.assert_allclose(Y[2], W[2] + 0.5 * jnp.cross(W[1], W[0]), atol=1e-15)


@pytest.mark.parametrize("K,buss", [(3, "buss3"), (4, "buss4")])
def test_coincides_with_buss(K, buss):
    p = problems.get("buss_torqued")
    a = jaxrot.simulate(f"lie_taylor{K}", p, 0.05, 20).final
    b = jaxrot.simulate(buss, p, 0.05, 20).final
    np.testing.assert_allclose(a.R, b.R, atol=1e-13)
    np.testing.assert_allclose(a.Pi, b.Pi, atol=1e-13)


def test_order_validated():
    with pytest.raises(ValueError, match="1...5"):
        jaxrot.integrators.LieTaylor(6)


def test_lie_taylor5_attitude_dependent_torque():
    # order 5 through the heavy top (torque depends on R): Taylor-mode AD of the flow
    from jaxrot import analysis, reference
    p = problems.get("fast_top")
    ref = reference.reference_solution(p, 0.5).final
    r = analysis.convergence_study("lie_taylor5", p, 0.5, [20, 40, 80], ref)
    assert abs(r["order"] - 5) < 0.3, r
    jax.clear_caches()


@pytest.mark.parametrize("method", ["buss4", "lie_taylor5"])
def test_prescribed_momentum_from_a_state_off_the_prescription(method):
    """A body whose momentum is not L(0) (a perturbed body of a batch) follows L' = L'(t) like any
    other method: its momentum moves by L(t) - L(0), not onto L(t)."""
    p = problems.get("buss_torqued")
    s = jaxrot.State(p.state0.R, p.state0.Pi * 1.01)
    got = jaxrot.simulate(method, p, 0.005, 400, state0=s, saveat=jaxrot.SaveAt(t0=False)).final
    ref = reference.reference_solution(p, 2.0, state0=s).final
    assert float(analysis.attitude_error(got.R, ref.R)) < 1e-9
