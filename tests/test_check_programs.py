"""The checks of traced input values (under ``grad`` or ``vmap`` without ``jit`` they run outside any
program) are one compiled program, not one per operation, with the same verdicts."""

import jax
import jax.numpy as jnp
import pytest

import jaxrot
from jaxrot import problems
from jaxrot.driver import checks

P = problems.get("t_handle")


def _checked(J):
    return checks.traced_checks(jaxrot.Problem(jaxrot.RigidBody(J), P.torque, P.state0, 1.0), P.state0, 0.1, 0.0)


def test_the_traced_checks_are_one_program():
    eqns = jax.make_jaxpr(lambda J: _checked(J)[0].body.J)(P.body.J).jaxpr.eqns
    names = [e.primitive.name for e in eqns]
    # the verdict: one compiled program (then the check's cond on it), no operation of its own outside
    assert names.count("pjit") + names.count("jit") == 1, names
    assert not {"is_finite", "gt", "and", "or", "reduce_and", "reduce_or"} & set(names), names


def test_a_bad_value_under_grad_is_still_refused_naming_it():
    f = jax.grad(lambda J: jaxrot.simulate("buss4", jaxrot.Problem(jaxrot.RigidBody(J), P.torque, P.state0, 0.1),
                                           0.01, 10).final.Pi[0])
    f(P.body.J)
    with pytest.raises(ValueError, match="principal moments"):
        f(jnp.array([-1.0, 2.0, 3.0]))
