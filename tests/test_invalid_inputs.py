"""Bad inputs: messages that name the argument the user gave, and (``on_invalid=``) runs that return
non-finite results with a per-body ``RESULTS.invalid_input`` instead of raising."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import problems

jax.config.update("jax_enable_x64", True)
P = problems.get("t_handle")


# --- messages that name the argument ---------------------------------------------------------------------------
@pytest.mark.parametrize("dt", [-1e-3, 0.0, float("nan")])
def test_a_step_that_is_not_positive_is_named_with_t1_as_with_n_steps(dt):
    with pytest.raises(ValueError, match=r"^dt must be finite and > 0, got (-0.001|0.0|nan)$"):
        jaxrot.simulate("buss4", P, dt, t1=1.0)
    with pytest.raises(ValueError, match=r"^dt must be finite and > 0"):
        jaxrot.simulate("buss4", P, dt, 10)


def test_an_inertia_tensor_given_as_moments_names_from_tensor():
    J = jnp.array([2.5, 3.0, 4.0])
    for build in (lambda: jaxrot.RigidBody(jnp.diag(J)), lambda: jaxrot.RigidBody(np.diag(J))):
        with pytest.raises(ValueError) as e:
            build()
        text = str(e.value)
        assert text.startswith("three principal moments J = (J1, J2, J3) were expected, got a 3x3 matrix")
        assert "jaxrot.RigidBody.from_tensor(I)" in text and "diagonalises" in text
    body, Q = jaxrot.RigidBody.from_tensor(np.diag(J))  # the remedy works on what was given
    np.testing.assert_allclose(np.sort(body.J), J)
    # three bodies' moments, all good, stay a batch of three; a bad non-symmetric batch is not a tensor
    assert jaxrot.RigidBody(jnp.array([[1.0, 2.0, 2.5], [2.0, 2.0, 2.0], [2.5, 2.0, 4.0]])).J.shape == (3, 3)
    with pytest.raises(ValueError, match=r"^principal moments J of body 1 must be positive"):
        jaxrot.RigidBody(jnp.array([[1.0, 2.0, 2.5], [2.0, -2.0, 2.0], [1.0, 2.0, 2.5]]))


def test_an_inertia_tensor_put_into_a_traced_problem_is_named_from_its_shape():
    J = jnp.array([2.5, 3.0, 4.0])

    def energy(J):
        p = eqx.tree_at(lambda p: p.body.J, P, J)  # as a fit puts a trial point in
        return jaxrot.simulate("buss4", p, 0.01, 2, state0=P.state0).final.Pi.sum()

    with pytest.raises(ValueError, match=r"^three principal moments .* got a 3x3 matrix: .*from_tensor"):
        jax.block_until_ready(jax.jit(energy)(jnp.diag(J)))
