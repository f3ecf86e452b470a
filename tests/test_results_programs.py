"""A trajectory's per-frame quantities are each one compiled program (operation by operation, each of
their operations compiled a program of its own on a first call), with the values of their formulas."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import problems

P = problems.get("t_handle")


@pytest.fixture(scope="module")
def traj():
    return jaxrot.simulate("rk4", P, 1e-2, 20, saveat=jaxrot.SaveAt(steps=5))


@pytest.mark.parametrize("what", ["energy", "omega_world", "omega_body", "quaternion", "euler"])
def test_each_quantity_is_one_program(traj, what):
    def of(R, Pi):
        t = dataclasses.replace(traj, states=jaxrot.State(R, Pi))
        if what == "quaternion":
            return t.quaternion("xyzw")
        if what == "euler":
            return t.euler("ZYX", degrees=True)
        return getattr(t, what)

    eqns = jax.make_jaxpr(of)(traj.states.R, traj.states.Pi).jaxpr.eqns
    assert [e.primitive.name for e in eqns] in (["pjit"], ["jit"]), [e.primitive.name for e in eqns]


def test_the_values_are_the_formulas(traj):
    R, Pi, J = np.asarray(traj.states.R), np.asarray(traj.states.Pi), np.asarray(P.body.J)
    np.testing.assert_allclose(traj.energy, 0.5 * np.sum(Pi * Pi / J, axis=-1), rtol=1e-14)
    np.testing.assert_allclose(traj.omega_body, Pi / J, rtol=1e-15)
    np.testing.assert_allclose(traj.omega_world, np.einsum("nij,nj->ni", R, Pi / J), rtol=1e-14, atol=1e-15)
    q = np.asarray(traj.quaternion("wxyz"))
    np.testing.assert_allclose(np.asarray(jaxrot.so3.from_quaternion(jnp.asarray(q), "wxyz")), R, atol=1e-14)
    assert np.all(np.sum(q[1:] * q[:-1], axis=-1) >= 0)  # sign continuous
    np.testing.assert_allclose(traj.quaternion("xyzw"), np.roll(q, -1, axis=-1), rtol=0, atol=0)


def test_bad_orders_are_refused_as_before(traj):
    with pytest.raises(ValueError, match="order must be 'wxyz'"):
        traj.quaternion("abcd")
    with pytest.raises(ValueError, match="order must be 'wxyz'"):
        traj.quaternion(["w", "x", "y", "z"])  # (not hashable: computed operation by operation)
