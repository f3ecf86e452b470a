"""The gravity-gradient satellite: the torque is its potential's, the orbit frame's relative
equilibrium is kept, and methods reach their orders on it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import analysis, problems, reference
from jaxrot.physics.orbit import GravityGradientTorque
from jaxrot.physics.torques import PotentialTorque


def test_torque_is_minus_the_gradient_of_its_potential():
    tq = GravityGradientTorque(jnp.array([3.0, 4.0, 5.0]), 1.3, 0.2)
    by_grad = PotentialTorque(lambda t, R: tq.potential(t, R))
    rng = np.random.default_rng(0)
    for _ in range(5):
        R = jaxrot.so3.exp(jnp.asarray(rng.normal(size=3)))
        t = float(rng.uniform(0, 10))
        np.testing.assert_allclose(tq(t, R, None), by_grad(t, R, None), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("method", ["buss4", "lie_taylor5", "rkmk4"])
def test_orbit_frame_equilibrium_is_kept(method):
    """Principal axes on the orbit frame, turning at n about the normal: no torque, R(t) = Rz(n t)."""
    J, n = jnp.array([3.0, 4.0, 5.0]), 0.7
    p = jaxrot.Problem(jaxrot.RigidBody(J), GravityGradientTorque(J, n), jaxrot.State(jnp.eye(3), J * jnp.array([0, 0, n])),
                       t_end=10.0)
    tr = jaxrot.simulate(method, p, 0.05, 200, saveat=jaxrot.SaveAt(steps=200))
    a = n * 10.0
    Rz = jnp.array([[jnp.cos(a), -jnp.sin(a), 0.0], [jnp.sin(a), jnp.cos(a), 0.0], [0.0, 0.0, 1.0]])
    assert float(jnp.abs(tr.final.R - Rz).max()) < 1e-12


def test_order_on_the_librating_satellite():
    p = problems.get("gravity_gradient")
    T = 2.0
    ref = reference.reference_solution(p, T).final
    r = analysis.convergence_study("buss4", p, T, [20, 40, 80, 160], ref)
    assert abs(r["order"] - 4) <= 0.15, r
    tr = jaxrot.simulate("buss4", p, T / 160, 160, saveat=jaxrot.SaveAt(steps=160))
    assert float(analysis.orthogonality_error(tr.states.R).max()) < 1e-13
