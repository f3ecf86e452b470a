"""suggest() decides from the facts of a problem, and its choice meets the tolerance, on problems
it was not written for as well."""

import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import analysis, problems, reference
from jaxrot.studies.suggest import suggest


def test_choices_follow_the_facts_not_the_names():
    assert suggest(problems.get("free_body_mz"), 1e-8).method == "exact_free"
    assert suggest(problems.get("fast_top"), 1e-8).method == "exact_split_tj4(2)"  # axisymmetric
    assert suggest(problems.get("buss_torqued"), 1e-8).method == "lie_taylor5(4)"  # prescribed L(t)
    assert suggest(problems.get("asymmetric_top"), 1e-6).method == "buss4(3)"
    assert suggest(problems.get("asymmetric_top"), 1e-10).method == "lie_taylor5(4)"
    p = problems.get("fast_top")
    renamed = jaxrot.Problem(jaxrot.RigidBody(jnp.array([5.0, 4.0, 1.0])), p.torque, p.state0, p.t_end, name="fast_top")
    assert suggest(renamed, 1e-6).method == "buss4(3)"  # the body decides, not the name
    for bad in (0.0, -1e-6, float("nan")):
        with pytest.raises(ValueError, match="tol"):
            suggest(p, bad)


@pytest.mark.parametrize("name, tol", [("gravity_gradient", 1e-6), ("asymmetric_top", 1e-6), ("fast_top", 1e-8),
                                       ("t_handle", 1e-8)])
def test_the_suggested_run_meets_the_tolerance(name, tol):
    p = problems.get(name)
    T = min(p.t_end, 2.0)
    p = jaxrot.Problem(p.body, p.torque, p.state0, T, p.name)
    s = suggest(p, tol)
    got = s.run(p, saveat=jaxrot.SaveAt(t0=False)).final
    ref = reference.reference_solution(p, T).final
    err = float(analysis.attitude_error(got.R, ref.R))
    assert err <= 3 * tol, (s, err)


def test_an_unseen_body_and_torque():
    """A damped asymmetric body with a plain-function torque: not a problem the rules were written for."""
    body = jaxrot.RigidBody(jnp.array([1.0, 2.5, 3.2]))
    damping = lambda t, R, Pi: -0.3 * R @ (Pi / jnp.array([1.0, 2.5, 3.2]))  # noqa: E731
    p = jaxrot.Problem(body, damping, jaxrot.State(jnp.eye(3), jnp.array([0.3, 2.0, -0.5])), t_end=3.0)
    s = suggest(p, 1e-7)
    got = s.run(p, saveat=jaxrot.SaveAt(t0=False)).final
    fine = jaxrot.simulate("rk4", p, 3.0 / 6000, 6000, saveat=jaxrot.SaveAt(t0=False)).final
    assert float(analysis.attitude_error(got.R, fine.R)) <= 3e-7, s
