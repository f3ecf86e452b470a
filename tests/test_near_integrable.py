"""Laskar-Robutel's SABA_n / SBAB_n: coefficients, exactness without torque, and the two regimes of
their error O(eps h^{2n} + eps^2 h^2) on a weakly torqued asymmetric body."""

import functools
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jaxrot
from jaxrot import problems, reference, so3
from jaxrot.physics.problems import from_body_rate
from jaxrot.integrators.near_integrable import LaskarRobutel, gauss_nodes, lobatto_nodes
from jaxrot.physics.torques import GravityTorque
from jaxrot.studies import analysis

GOLDEN = json.loads((pathlib.Path(__file__).parent / "data" / "golden_external.json").read_text())


def test_the_coefficients_are_laskar_and_robutels():
    """Table 1 of Laskar & Robutel (2001) in closed form, against the quadrature rules."""
    x, w = gauss_nodes(2)
    np.testing.assert_allclose([x[0], x[1] - x[0], w[0]], [0.5 - np.sqrt(3) / 6, np.sqrt(3) / 3, 0.5], atol=1e-15)
    x, w = gauss_nodes(3)
    np.testing.assert_allclose([x[0], x[1] - x[0], w[0], w[1]],
                               [0.5 - np.sqrt(15) / 10, np.sqrt(15) / 10, 5 / 18, 4 / 9], atol=1e-15)
    x, w = lobatto_nodes(3)
    np.testing.assert_allclose([x[1], w[0], w[1]], [0.5, 1 / 6, 2 / 3], atol=1e-15)
    x, w = lobatto_nodes(4)
    np.testing.assert_allclose([x[1], x[2] - x[1], w[0], w[1]],
                               [0.5 - np.sqrt(5) / 10, np.sqrt(5) / 5, 1 / 12, 5 / 12], atol=1e-15)
    for n in (1, 2, 3, 4):
        for xs, ws in (gauss_nodes(n), lobatto_nodes(n + 1)):
            # a rule with these nodes integrates polynomials of degree 2n - 1 exactly
            for k in range(2 * n):
                assert abs(np.sum(ws * xs ** k) - 1.0 / (k + 1)) < 1e-14


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="saba"):
        LaskarRobutel("abba", 2)
    with pytest.raises(ValueError, match="positive integer"):
        LaskarRobutel("saba", 0)


@pytest.mark.parametrize("name", ["saba2", "sbab3"])
def test_exact_without_torque(name):
    p = problems.get("free_body_hlw")
    g = GOLDEN["exact_caseA_t100"]
    fin = jaxrot.simulate(name, p, 100.0 / 7, 7).final
    assert np.abs(np.asarray(fin.R) - np.array(g["R"])).max() <= 1e-12


@functools.partial(jax.jit, static_argnums=0)
def _linear_term_of(method, n, spin=5.0, T=1.0):
    p0 = problems.get("asymmetric_top")
    state0 = from_body_rate(p0.body, so3.exp(jnp.array([0.3, 0.0, 0.0])), jnp.array([0.4, 0.2, spin]))
    dt = T / n

    def final(eps):
        system = jaxrot.Problem(p0.body, GravityTorque(mgl=eps), state0, t_end=T).system

        def step(i, carry):
            state, aux = carry
            state, aux, _ = method.step(system, i * dt, state, aux, dt)
            return state, aux

        fin, _ = lax.fori_loop(0, n, step, (state0, method.init(system, 0.0, state0, dt)))
        return jnp.concatenate([fin.R.ravel(), fin.Pi])

    return jax.jvp(final, (jnp.asarray(0.0),), (jnp.asarray(1.0),))[1]


def _linear_term(name, n):
    """d(final R, Pi)/d eps at eps = 0 for gravity eps * mgl on the asymmetric body (J = 5, 4, 1,
    T = 1, n steps; one compiled program per method, n traced): the error terms linear in eps, free
    of the eps^2 h^2 ones and of any reference's own error in eps."""
    return np.asarray(_linear_term_of(jaxrot.get(name), jnp.asarray(n)))


@pytest.fixture(scope="module")
def linear_reference():
    ref = _linear_term("rkmk8", 512)
    assert np.abs(ref - _linear_term("rkmk8", 256)).max() < 1e-13
    return ref


@pytest.mark.parametrize("name,order,ns", [("saba2", 4, [8, 16, 32]),
                                           ("sbab3", 6, [4, 8, 16]),
                                           ("saba4", 8, [2, 4, 8])])
def test_order_2n_in_the_terms_linear_in_the_torque(name, order, ns, linear_reference):
    """The derivative of the final state in the torque's strength at zero torque, against RKMK8's
    converged derivative: the methods' eps h^{2n} term alone (Laskar-Robutel's theorem)."""
    errs = [np.abs(_linear_term(name, n) - linear_reference).max() for n in ns]
    slope = analysis.observed_order([1.0 / n for n in ns], errs)
    assert abs(slope - order) <= 0.3, (errs, slope)


def test_order_2_when_the_torque_is_not_small():
    """The asymmetric heavy top itself (potential / kinetic energy ~ 0.016): the eps^2 h^2 term
    leads at these steps, as for Strang."""
    p = problems.get("asymmetric_top")
    ref = reference.reference_solution(p, 1.0).final
    r = analysis.convergence_study("saba2", p, 1.0, [32, 64, 128], ref)
    assert abs(r["order"] - 2) <= 0.3, r


@pytest.mark.parametrize("name", ["saba2", "sbab3"])
def test_symmetric_a_step_back_undoes_a_step(name):
    """Phi_{-h} Phi_h = id with a torque (the symmetry the docstring states; time-dependent kicks
    included: the back step starts at t + h)."""
    p = problems.get("buss_torqued")
    method, system, h = jaxrot.get(name), p.system, 0.1
    fwd, _, _ = method.step(system, 0.0, p.state0, method.init(system, 0.0, p.state0, h), h)
    back, _, _ = method.step(system, h, fwd, method.init(system, h, fwd, -h), -h)
    np.testing.assert_allclose(back.R, p.state0.R, atol=1e-13)
    np.testing.assert_allclose(back.Pi, p.state0.Pi, atol=1e-13)
