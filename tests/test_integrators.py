"""Generic tests every registered integrator takes (the registry is in tests/helpers.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import analysis, problems, reference

from .helpers import NAMES, STEP_SCALE, TORQUE_NAMES, case, params, skipped

_REFS = {}


def _ref(name, T):
    if (name, T) not in _REFS:
        _REFS[(name, T)] = reference.reference_solution(problems.get(name), T).final
    return _REFS[(name, T)]


def _steps(order):
    # step counts in the asymptotic range and above round-off for each order
    return {1: [80, 160, 320, 640], 2: [40, 80, 160, 320], 3: [40, 80, 160, 320], 6: [5, 10, 20, 40],
            8: [3, 4, 6, 8], 10: [7, 9, 12, 16]}.get(order, [20, 40, 80, 160])


def _tol(order):
    # orders 6-10 reach round-off within a factor 8 in step size: a short, pre-asymptotic sweep
    return 0.15 if order <= 4 else 0.3


@pytest.mark.parametrize("name", TORQUE_NAMES)
def test_order_torqued(name):
    c = case(name)
    ns = [n * STEP_SCALE.get(name, 1) for n in _steps(c.order)]
    r = analysis.convergence_study(name, problems.get("buss_torqued"), 2.0, ns, _ref("buss_torqued", 2.0))
    assert abs(r["order"] - c.order) <= _tol(c.order), r


@pytest.mark.parametrize("name", NAMES)
def test_order_free_body(name):
    if skipped(name, "order_free"):
        pytest.skip("no free-body order: see tests/helpers.py SKIP")
    c = case(name)
    ns = [n * 2 * STEP_SCALE.get(name, 1) for n in _steps(c.order_free)]
    r = analysis.convergence_study(name, problems.get("free_body_mz"), 10.0, ns,
                                   _ref("free_body_mz", 10.0))
    assert abs(r["order"] - c.order_free) <= _tol(c.order_free), r


# The one-body runs of the invariant, batch and float32 tests share the T-handle and save_every, so the
# float64 program compiled by one is reused by the others (step size and counts are traced)
_EVERY = 20


@pytest.mark.parametrize("name", params(NAMES, "invariants"))
def test_invariants_torque_free(name):
    p = problems.get("t_handle")
    tr = jaxrot.simulate(name, p, 0.05, 400, saveat=jaxrot.SaveAt(steps=_EVERY))
    c = case(name)
    if c.on_so3:
        assert float(analysis.orthogonality_error(tr.states.R).max()) < 1e-12
    assert np.all(np.linalg.det(np.asarray(tr.states.R)) > 0)
    L = tr.states.L
    if "L" in c.conserves:  # exact in exact arithmetic: round-off over 400 steps only
        assert float(jnp.abs(L - L[0]).max() / jnp.linalg.norm(L[0])) < 1e-11
    if "|Pi|" in c.conserves or "L" in c.conserves:
        n = jnp.linalg.norm(tr.states.Pi, axis=-1)
        assert float(jnp.abs(n - n[0]).max() / n[0]) < 1e-11
    if "E" in c.conserves:  # EP methods: exact after unclamped steps only
        E = analysis.energy(p, tr.states)
        ok = jnp.concatenate([jnp.array([True]), tr.stats.clamped == 0])
        assert int(ok.sum()) >= 5  # not vacuous (buss1_ep clamps most frames on the T-handle)
        # exact in exact arithmetic; the round-off of implicit solves adds up linearly (trapezoid_object:
        # ~10 ulp a step on a CPU, ~27 on an H100), so 100 ulp a step over the 400 steps
        assert float(jnp.abs(jnp.where(ok, E - E[0], 0.0)).max() / E[0]) < 400 * 100 * np.finfo(np.float64).eps


@pytest.mark.parametrize("name", params(NAMES, "jit_vmap"))
def test_jit_vmap_agree(name):
    p = problems.get("t_handle")
    rng = np.random.default_rng(1)
    B = 64
    Om = jnp.asarray(rng.normal(size=(B, 3)) * 2)
    R0 = jax.vmap(jaxrot.so3.exp)(jnp.asarray(rng.normal(size=(B, 3))))
    states = jaxrot.State(R0, Om * p.body.J)
    batch = jaxrot.simulate(name, p, 0.02, 2 * _EVERY, state0=states, saveat=jaxrot.SaveAt(steps=_EVERY))
    for i in [0, 17, 63]:
        one = jaxrot.simulate(name, p, 0.02, 2 * _EVERY, saveat=jaxrot.SaveAt(steps=_EVERY), state0=jaxrot.State(R0[i], states.Pi[i]))
        np.testing.assert_allclose(batch.states.R[i], one.states.R, atol=1e-13)
        np.testing.assert_allclose(batch.states.Pi[i], one.states.Pi, atol=1e-13)


@pytest.mark.parametrize("name", params(NAMES, "gradients"))
def test_gradients_finite(name):
    if skipped(name, "gradients"):
        pytest.skip("see tests/helpers.py SKIP")
    p = problems.get("fast_top") if case(name).torque else problems.get("free_body_mz")

    def loss(J, Pi0):
        q = jaxrot.Problem(jaxrot.RigidBody(J), p.torque, jaxrot.State(p.state0.R, Pi0), p.t_end)
        fin = jaxrot.simulate(name, q, 0.005, 20, saveat=jaxrot.SaveAt(steps=20)).final
        return jnp.sum(fin.R[:, 0]) + jnp.sum(fin.Pi)

    g = jax.jit(jax.grad(loss, argnums=(0, 1)))(p.body.J, p.state0.Pi)  # one program: eager grad compiles each piece
    assert all(np.all(np.isfinite(x)) for x in g)


@pytest.mark.parametrize("name", params(NAMES, "float32"))
def test_float32(name):
    if skipped(name, "float32"):
        pytest.skip("see tests/helpers.py SKIP")
    p64 = problems.get("t_handle")
    to32 = lambda x: x.astype(jnp.float32) if isinstance(x, jax.Array) and x.dtype == jnp.float64 else x  # noqa: E731
    p32 = jax.tree_util.tree_map(to32, p64)
    a = jaxrot.simulate(name, p32, 0.01, 100, saveat=jaxrot.SaveAt(steps=_EVERY)).final
    b = jaxrot.simulate(name, p64, 0.01, 100, saveat=jaxrot.SaveAt(steps=_EVERY)).final
    assert a.R.dtype == jnp.float32
    np.testing.assert_allclose(a.R, b.R, atol=2e-4)
