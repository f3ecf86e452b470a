"""Error-controlled stepping (jaxrot.simulate_adaptive)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import exact, problems, reference


@pytest.fixture(scope="module")
def top_ref():
    return reference.reference_solution(problems.get("fast_top"), 1.0).final


@pytest.mark.parametrize("pair", ["buss4(3)", "lie_taylor5(4)", "exact_split_tj4(2)"])
@pytest.mark.parametrize("tol", [1e-6, 1e-9])
def test_fast_top_reaches_the_tolerance_within_a_factor_3(pair, tol, top_ref):
    sol = jaxrot.simulate_adaptive(pair, problems.get("fast_top"), 1.0, rtol=tol, atol=tol)
    assert bool(sol.success) and int(sol.n_accepted) > 10
    err = float(jnp.abs(sol.final.R - top_ref.R).max())
    assert err <= 3 * tol, err


def test_free_body_error_is_proportional_to_the_tolerance():
    """Over T = 100 (15 periods) the global error exceeds the local tolerance (13.6-31x, see the README),
    but it follows it: 1e4 x tighter tolerance, 1e4 x smaller error (within a factor 3)."""
    p = problems.get("free_body_mz")
    ref = exact.free_flow(p.body.J, p.state0, 100.0)
    errs = [float(jnp.abs(jaxrot.simulate_adaptive("lie_taylor5(4)", p, 100.0, rtol=t, atol=t).final.R - ref.R).max())
            for t in (1e-6, 1e-10)]
    assert 1e4 / 3 <= errs[0] / errs[1] <= 1e4 * 3, errs


def test_saveat_and_batch_per_body_steps():
    p = problems.get("free_body_mz")
    rng = np.random.default_rng(0)
    Pi = jnp.asarray(p.state0.Pi * (1 + 0.2 * rng.normal(size=(8, 3))))
    S = jaxrot.State(jnp.broadcast_to(p.state0.R, (8, 3, 3)), Pi)
    ts = jnp.array([1.0, 2.5, 7.0])
    sol = jaxrot.simulate_adaptive("buss4(3)", p, 7.0, rtol=1e-10, atol=1e-10, saveat=ts, state0=S)
    assert sol.states.R.shape == (8, 3, 3, 3)
    ex = jax.vmap(lambda s: jax.vmap(lambda t: exact.free_flow(p.body.J, s, t))(ts))(S)
    assert float(jnp.abs(sol.states.R - ex.R).max()) < 1e-8
    assert len(set(np.asarray(sol.n_accepted).tolist())) > 1  # each body its own steps
    one = jaxrot.simulate_adaptive("buss4(3)", p, 7.0, rtol=1e-10, atol=1e-10, saveat=ts,
                                   state0=jaxrot.State(S.R[3], S.Pi[3]))
    np.testing.assert_allclose(np.asarray(one.states.R), np.asarray(sol.states.R[3]), atol=1e-12)
    assert int(one.n_accepted) == int(sol.n_accepted[3])


def test_forward_mode_derivative_matches_the_exact_flow():
    p = problems.get("free_body_mz")

    def final_pi(J):
        q = jaxrot.Problem(jaxrot.RigidBody(J), p.torque, p.state0, 5.0)
        return jaxrot.simulate_adaptive("buss4(3)", q, 5.0, rtol=1e-11, atol=1e-11).final.Pi

    jac = jax.jacfwd(final_pi)(p.body.J)
    ex = jax.jacfwd(lambda J: exact.free_flow(J, p.state0, 5.0).Pi)(p.body.J)
    assert float(jnp.abs(jac - ex).max()) < 1e-7 * float(jnp.abs(ex).max())


def test_step_budget_and_bad_input():
    p = problems.get("fast_top")
    sol = jaxrot.simulate_adaptive("buss4(3)", p, 1.0, rtol=1e-10, atol=1e-10, max_steps=20)
    assert not bool(sol.success) and int(sol.n_accepted + sol.n_rejected) == 20
    with pytest.raises(KeyError, match="unknown adaptive pair"):
        jaxrot.simulate_adaptive("nope", p, 1.0)
    with pytest.raises(ValueError, match="higher-order first"):
        jaxrot.simulate_adaptive(("buss3", "buss4"), p, 1.0)
    with pytest.raises(ValueError, match="rtol"):
        jaxrot.simulate_adaptive("buss4(3)", p, 1.0, rtol=-1.0)
    with pytest.raises(ValueError, match="saveat"):
        jaxrot.simulate_adaptive("buss4(3)", p, 1.0, saveat=[0.5, 0.2])
    with pytest.raises(ValueError, match="free"):
        jaxrot.simulate_adaptive(("dmv4", "dmv"), p, 1.0)


def _scaled_global_error(sol, ref, tol):
    """max over the 12 numbers of |y - y_exact| / (tol + tol |y_exact|), per body."""
    from jaxrot.physics.flow import pack_body

    y, ye = pack_body(sol.final.R, sol.final.Pi), pack_body(ref.R, ref.Pi)
    return np.asarray(jnp.max(jnp.abs(y - ye) / (tol + tol * jnp.abs(ye)), axis=-1))


def test_to_tolerance_brings_the_free_body_global_error_within_the_tolerance():
    """Over T = 100 the local control misses the requested tolerance by more than 3x; the calibrated
    run meets it (estimate and truth), on a small batch with per-body tolerances."""
    p = problems.get("free_body_mz")
    rng = np.random.default_rng(3)
    S = jaxrot.State(jnp.broadcast_to(p.state0.R, (3, 3, 3)), jnp.asarray(p.state0.Pi * (1 + 0.05 * rng.normal(size=(3, 3)))))
    ref = jax.vmap(lambda s: exact.free_flow(p.body.J, s, 100.0))(S)
    tol = 1e-8
    local = jaxrot.simulate_adaptive("lie_taylor5(4)", p, 100.0, rtol=tol, atol=tol, state0=S)
    assert _scaled_global_error(local, ref, tol).max() > 3, "the local control alone would already pass"
    sol = jaxrot.simulate_to_tolerance("lie_taylor5(4)", p, 100.0, rtol=tol, atol=tol, state0=S)
    err = _scaled_global_error(sol, ref, tol)
    assert err.max() <= 3, err
    assert err.max() >= 0.05, err  # not bought by a needlessly tight run
    assert np.all(np.asarray(sol.global_error) <= 1) and np.all(np.asarray(sol.tolerance) < tol)
    assert np.all(np.asarray(sol.n_calibration) > np.asarray(local.n_accepted))
    assert bool(jnp.all(sol.success))


def test_to_tolerance_on_the_fast_top_and_under_jit():
    p = problems.get("fast_top")
    ref = reference.reference_solution(p, 1.0).final
    tol = 1e-7
    sol = jaxrot.simulate_to_tolerance("buss4(3)", p, 1.0, rtol=tol, atol=tol)
    assert _scaled_global_error(sol, ref, tol) <= 3
    traced = jax.jit(lambda s: jaxrot.simulate_to_tolerance("buss4(3)", p, 1.0, rtol=tol, atol=tol, state0=s).final)(
        p.state0)  # traced: always three runs; a body already within the tolerance reruns the second one
    np.testing.assert_allclose(np.asarray(traced.R), np.asarray(sol.final.R), atol=1e-14)


@pytest.mark.parametrize("kw", [dict(ratio=1.0), dict(ratio=np.inf), dict(safety=0.0), dict(safety=2.0)])
def test_to_tolerance_rejects_bad_calibration_settings(kw):
    with pytest.raises(ValueError):
        jaxrot.simulate_to_tolerance("buss4(3)", problems.get("fast_top"), 1.0, **kw)
