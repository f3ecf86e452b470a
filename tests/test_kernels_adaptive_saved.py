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


def _run(case, saveat, executor, max_steps=400, event=None):
    p, S = case
    # (a first step of its own: the controller's first steps then do not hang on error estimates at the
    # round-off level, where the two loops' sums may differ)
    return jaxrot.simulate("buss4(3)", p, 0.01, t1=T, state0=S, saveat=saveat, executor=executor, event=event,
                           stepsize=jaxrot.Adaptive(TOL, TOL, max_steps=max_steps))


def _same_frames(ta, sa, tb, sb):
    """Frames ``(times, states)`` ``a`` and ``b`` reached alike (finite times), at the same times to
    round-off (the same steps to the round-off of the error estimates: a frame off by one step would be
    a step of ~1e-3 away) and states to 1e-7; which are reached."""
    reached = np.isfinite(np.asarray(tb))
    np.testing.assert_array_equal(np.isfinite(np.asarray(ta)), reached)
    np.testing.assert_allclose(np.where(reached, ta, 0), np.where(reached, tb, 0), rtol=0, atol=1e-9)
    np.testing.assert_allclose(sa.R, sb.R, rtol=0, atol=1e-7)
    np.testing.assert_allclose(sa.Pi, sb.Pi, rtol=1e-7, atol=1e-7)
    return reached


def test_every_kth_accepted_step_as_the_xla_loop(case):
    got, want = (_run(case, jaxrot.SaveAt(steps=2), ex) for ex in (jaxrot.Fused(), jaxrot.XLA()))
    np.testing.assert_array_equal(got.controller.n_accepted, want.controller.n_accepted)
    assert got.ts.shape == want.ts.shape == (3, 1 + 400 // 2)
    reached = _same_frames(got.ts, got.states, want.ts, want.states)
    assert reached.sum(axis=1).tolist() == (1 + np.asarray(want.controller.n_accepted) // 2).tolist()


def test_dense_output_as_the_xla_loop(case):
    got, want = (_run(case, jaxrot.SaveAt(dense=True), ex) for ex in (jaxrot.Fused(), jaxrot.XLA()))
    tq = jnp.linspace(0.0, T, 9)
    a, b = got.evaluate(tq), want.evaluate(tq)
    np.testing.assert_allclose(a.R, b.R, rtol=0, atol=1e-7)
    np.testing.assert_allclose(a.Pi, b.Pi, rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(got.states.R[:, -1], want.states.R[:, -1], rtol=0, atol=1e-7)


def _dense_steps(traj):
    """The dense output's step ends and states (a terminal event's wraps the run's own)."""
    d = getattr(traj.dense, "inner", traj.dense)
    return d.times, d.states


@pytest.mark.parametrize("terminal", [True, False])
def test_every_kth_step_and_dense_output_with_an_event_as_the_xla_loop(case, terminal):
    """With an event the frames follow the XLA loop's: a terminal event's crossing step is accepted,
    counted and kept (its frame then the event state), the dense output ends with the state after it;
    a body that finds no event runs on to t1 (bodies 0 and 1 stop at 0.30 and 0.23, body 2 not)."""
    ev = jaxrot.Event(lambda t, s, a: s.R[2, 0] - 0.305, direction=1, terminal=terminal)
    got, want = (_run(case, jaxrot.SaveAt(steps=2, dense=True), ex, event=ev) for ex in (jaxrot.Fused(), jaxrot.XLA()))
    assert got.info["executor"] == "Fused"
    found = np.isfinite(np.asarray(want.event_time))
    assert found.tolist() == [True, True, False]
    np.testing.assert_array_equal(np.isfinite(np.asarray(got.event_time)), found)
    np.testing.assert_allclose(got.event_time[found], want.event_time[found], rtol=0, atol=1e-9)
    np.testing.assert_allclose(got.event_state.R[found], want.event_state.R[found], rtol=0, atol=1e-7)
    np.testing.assert_array_equal(got.controller.n_accepted, want.controller.n_accepted)
    # every other accepted step: the same frames, times and states (after a terminal event its state)
    reached = _same_frames(got.ts, got.states, want.ts, want.states)
    assert reached.sum(axis=1).tolist() == (1 + np.asarray(want.controller.n_accepted) // 2).tolist()
    # the dense output: every accepted step's end, the crossing step's too, then +inf
    _same_frames(*_dense_steps(got), *_dense_steps(want))
    tq = jnp.linspace(0.0, T, 41)
    a, b = got.evaluate(tq), want.evaluate(tq)
    np.testing.assert_allclose(a.R, b.R, rtol=0, atol=1e-7)
    np.testing.assert_allclose(a.Pi, b.Pi, rtol=1e-7, atol=1e-7)


def test_a_record_too_small_fails_with_the_remedy(case, monkeypatch):
    monkeypatch.setattr(adaptive_backward, "RECORD_BYTES", 1)  # 64 steps a body, fewer than they take
    with pytest.raises(Exception, match="lower max_steps"):
        jax.block_until_ready(_run(case, jaxrot.SaveAt(steps=1), jaxrot.Fused(), max_steps=300).states.R)


def test_a_record_without_room_for_the_crossing_steps_end_fails(case, monkeypatch):
    """A terminal event's body needs one column more than its accepted steps (the state after its
    crossing step): a record of exactly its steps fails instead of ending the dense output on an
    unwritten column; one more column is enough."""
    from jaxrot.driver.executors import fused

    p, S = case
    one = (p, jaxrot.State(S.R[:1], S.Pi[:1]))
    ev = jaxrot.Event(lambda t, s, a: s.R[2, 0] - 0.305, direction=1)
    full = _run(one, jaxrot.SaveAt(dense=True), jaxrot.Fused(), event=ev)
    n = int(full.controller.n_accepted[0])
    assert np.isfinite(float(full.event_time[0])) and n < 400
    # (another max_steps each: a run of the same configuration would reuse the compiled program)
    monkeypatch.setattr(fused, "_record_steps", lambda spec: n)
    with pytest.raises(Exception, match="lower max_steps"):
        jax.block_until_ready(_run(one, jaxrot.SaveAt(dense=True), jaxrot.Fused(), 401, ev).states.R)
    monkeypatch.setattr(fused, "_record_steps", lambda spec: n + 1)
    tight = _run(one, jaxrot.SaveAt(dense=True), jaxrot.Fused(), 402, ev)
    (ta, sa), (tb, sb) = _dense_steps(tight), _dense_steps(full)
    np.testing.assert_array_equal(ta[:, :n + 1], tb[:, :n + 1])
    np.testing.assert_array_equal(sa.R[:, :n + 1], sb.R[:, :n + 1])


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


def test_derivatives_in_an_events_level_are_refused_with_the_remedy(case):
    def loss(level):
        ev = jaxrot.Event(lambda t, s, a: s.R[2, 0] - level, direction=1)
        return jnp.nansum(_run(case, jaxrot.SaveAt(dense=True), jaxrot.Fused(), event=ev).event_time)

    with pytest.raises(ValueError, match="XLA"):
        jax.grad(loss)(0.305)


def test_the_automatic_choice_differentiates_saved_steps_on_xla(case):
    assert np.isfinite(jax.grad(_saved_loss(case))(1.0, None))
