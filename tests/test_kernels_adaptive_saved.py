"""``SaveAt(steps=k)`` and ``SaveAt(dense=True)`` of a fused error-controlled run (read from the
record of its accepted steps, :mod:`jaxrot.kernels.adaptive_saved`) against the XLA loop's."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot.kernels import adaptive_backward

pytest.importorskip("warp")

T, TOL = 0.5, 1e-6


@pytest.fixture(scope="module")
def case():
    p = jaxrot.problems.get("fast_top")
    S = jaxrot.State(jnp.broadcast_to(p.state0.R, (3, 3, 3)), p.state0.Pi * jnp.array([0.5, 1.2, 2.0])[:, None])
    return p, S


def _run(case, saveat, executor, max_steps=400):
    p, S = case
    # (a first step of its own: the controller's first steps then do not hang on error estimates at the
    # round-off level, where the two loops' sums may differ)
    return jaxrot.simulate("buss4(3)", p, 0.01, t1=T, state0=S, saveat=saveat, executor=executor,
                           stepsize=jaxrot.Adaptive(TOL, TOL, max_steps=max_steps))


def test_every_kth_accepted_step_as_the_xla_loop(case):
    got, want = (_run(case, jaxrot.SaveAt(steps=2), ex) for ex in (jaxrot.Fused(), jaxrot.XLA()))
    np.testing.assert_array_equal(got.controller.n_accepted, want.controller.n_accepted)
    assert got.ts.shape == want.ts.shape == (3, 1 + 400 // 2)
    reached = np.isfinite(np.asarray(want.ts))
    np.testing.assert_array_equal(np.isfinite(np.asarray(got.ts)), reached)
    assert reached.sum(axis=1).tolist() == (1 + np.asarray(want.controller.n_accepted) // 2).tolist()
    # the same steps to the round-off of the error estimates (a frame off by one step would be a step
    # of ~1e-3 away)
    np.testing.assert_allclose(np.where(reached, got.ts, 0), np.where(reached, want.ts, 0), rtol=0, atol=1e-9)
    np.testing.assert_allclose(got.states.R, want.states.R, rtol=0, atol=1e-7)
    np.testing.assert_allclose(got.states.Pi, want.states.Pi, rtol=1e-7, atol=1e-7)


def test_dense_output_as_the_xla_loop(case):
    got, want = (_run(case, jaxrot.SaveAt(dense=True), ex) for ex in (jaxrot.Fused(), jaxrot.XLA()))
    tq = jnp.linspace(0.0, T, 9)
    a, b = got.evaluate(tq), want.evaluate(tq)
    np.testing.assert_allclose(a.R, b.R, rtol=0, atol=1e-7)
    np.testing.assert_allclose(a.Pi, b.Pi, rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(got.states.R[:, -1], want.states.R[:, -1], rtol=0, atol=1e-7)


def test_a_record_too_small_fails_with_the_remedy(case, monkeypatch):
    monkeypatch.setattr(adaptive_backward, "RECORD_BYTES", 1)  # 64 steps a body, fewer than they take
    with pytest.raises(Exception, match="lower max_steps"):
        jax.block_until_ready(_run(case, jaxrot.SaveAt(steps=1), jaxrot.Fused(), max_steps=300).states.R)


def _saved_loss(case):
    p, S = case

    def loss(scale, executor):
        traj = jaxrot.simulate("buss4(3)", p, t1=T, state0=jaxrot.State(S.R, S.Pi * scale), executor=executor,
                               saveat=jaxrot.SaveAt(steps=5), stepsize=jaxrot.Adaptive(TOL, TOL, max_steps=400))
        return jnp.sum(jnp.where(jnp.isfinite(traj.ts), traj.states.Pi[..., 0], 0.0))

    return loss


def test_derivatives_are_refused_with_the_remedy(case):
    with pytest.raises(ValueError, match="XLA"):
        jax.grad(_saved_loss(case))(1.0, jaxrot.Fused())


def test_the_automatic_choice_differentiates_saved_steps_on_xla(case):
    assert np.isfinite(jax.grad(_saved_loss(case))(1.0, None))
