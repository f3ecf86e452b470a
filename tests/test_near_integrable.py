"""Laskar-Robutel's SABA_n / SBAB_n and Blanes et al.'s ABA(s, n, m): coefficients, exactness without
torque, and the regimes of their errors, O(eps h^{2n} + eps^2 h^2) and O(eps h^s + eps^2 h^n + eps^3 h^m),
on torqued asymmetric bodies."""

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
from jaxrot.integrators.near_integrable import BlanesABA, LaskarRobutel, _palindrome, gauss_nodes, lobatto_nodes
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
    with pytest.raises(ValueError, match="aba864"):
        BlanesABA("aba42")
    with pytest.raises(ValueError, match="palindrome"):
        _palindrome([0.5, 0.5], 5)


@pytest.mark.parametrize("name, drifts, kicks", [("aba864", 8, 7), ("aba1064", 9, 8)])
def test_blanes_coefficients_are_consistent_palindromes(name, drifts, kicks):
    """Drifts and kicks each sum to one step, read the same both ways, and the kicks fall inside
    the step although some drifts go backwards."""
    a, b = jaxrot.get(name).coefficients()
    assert (len(a), len(b)) == (drifts, kicks)
    np.testing.assert_allclose([a.sum(), b.sum()], [1.0, 1.0], atol=1e-15)
    np.testing.assert_array_equal(a, a[::-1])
    np.testing.assert_array_equal(b, b[::-1])
    x, _ = jaxrot.get(name).nodes()
    assert a.min() < 0 and np.all((0 < x) & (x < 1))


@pytest.mark.parametrize("name", ["saba2", "sbab3", "aba1064"])
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
                                           ("saba4", 8, [2, 4, 8]),
                                           ("aba864", 8, [2, 4, 8]),
                                           ("aba1064", 10, [1, 2, 4])])
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


@pytest.mark.parametrize("name", ["aba864", pytest.param("aba1064", marks=pytest.mark.slow)])
def test_blanes_order_4_when_the_torque_is_not_small(name):
    """The slow top (gravity and spin comparable): the eps^3 h^4 term leads, order 4 for any torque
    (SABA_n: 2)."""
    p = problems.get("slow_top")
    ref = reference.reference_solution(p, 5.0).final
    r = analysis.convergence_study(name, p, 5.0, [64, 128, 256], ref)
    assert abs(r["order"] - 4) <= 0.15, r


@pytest.mark.parametrize("name", ["saba2", "sbab3", "aba864"])
def test_symmetric_a_step_back_undoes_a_step(name):
    """Phi_{-h} Phi_h = id with a torque (the symmetry the docstring states; time-dependent kicks
    included: the back step starts at t + h)."""
    p = problems.get("buss_torqued")
    method, system, h = jaxrot.get(name), p.system, 0.1
    fwd, _, _ = method.step(system, 0.0, p.state0, method.init(system, 0.0, p.state0, h), h)
    back, _, _ = method.step(system, h, fwd, method.init(system, h, fwd, -h), -h)
    np.testing.assert_allclose(back.R, p.state0.R, atol=1e-13)
    np.testing.assert_allclose(back.Pi, p.state0.Pi, atol=1e-13)


def test_blanes_in_float32():
    """float32 follows float64 to float32 round-off amplified by the 8 stages (the fast top, 100 steps)."""
    p64 = problems.get("fast_top")
    p32 = jaxrot.cast(p64, jnp.float32)
    a = jaxrot.simulate("aba864", p32, 0.01, 100).final
    b = jaxrot.simulate("aba864", p64, 0.01, 100).final
    assert a.R.dtype == jnp.float32
    err = float(so3.rotation_angle(jnp.asarray(a.R, jnp.float64), b.R))
    assert err < 1e-5, err
