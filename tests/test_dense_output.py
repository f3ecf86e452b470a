"""Dense output on SO(3) (fixed steps): SaveAt(ts=...), SaveAt(dense=True) and Trajectory.evaluate."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import exact, problems
from jaxrot.driver.dense import checkpoint_interval, interpolate

P = problems.get("free_body_mz")


def _exact(ts, state0=P.state0, J=P.body.J):
    return jax.vmap(lambda t: exact.free_flow(J, state0, t))(jnp.asarray(ts))


def _err(a, b):
    return np.asarray(jnp.maximum(jnp.abs(a.R - b.R).max(axis=(-2, -1)), jnp.abs(a.Pi - b.Pi).max(axis=-1)))


# the Lie-Taylor methods' compiled runs are the largest: in the slow tier
@pytest.mark.parametrize("method", ["buss4", "rk4", pytest.param("lie_taylor4", marks=pytest.mark.slow),
                                    pytest.param("lie_taylor5", marks=pytest.mark.slow)])
def test_evaluate_converges_at_order_four(method):
    errs, dts = [], [0.04, 0.02, 0.01]
    tq = jnp.asarray(np.linspace(0.0, 2.0, 23)[:-1] + 0.0137)
    for dt in dts:
        tr = jaxrot.simulate(method, P, dt, int(round(2.0 / dt)), saveat=jaxrot.SaveAt(dense=True))
        errs.append(float(_err(tr.evaluate(tq), _exact(tq)).max()))
    slope = np.polyfit(np.log(dts), np.log(errs), 1)[0]
    assert slope >= 3.7, (errs, slope)


def test_ts_interior_error_within_twice_the_step_error():
    dt, n = 0.02, 150
    steps = jaxrot.simulate("buss4", P, dt, n, saveat=jaxrot.SaveAt(steps=True))
    step_err = _err(steps.states, _exact(steps.ts))
    ts = np.array([0.0133, 0.5, 0.777, 1.2345, 2.99])
    tr = jaxrot.simulate("buss4", P, dt, n, saveat=jaxrot.SaveAt(ts=ts, t0=False, t1=False))
    np.testing.assert_allclose(np.asarray(tr.ts), ts)
    err = _err(tr.states, _exact(ts))
    k = np.floor(ts / dt).astype(int)
    bracket = np.maximum(step_err[k], step_err[k + 1])
    # the interpolant's own error is O(h^4) from the first step on, the steps' error grows from 0:
    # within twice the run's step error everywhere, and twice the bracketing steps' once that has grown
    assert np.all(err <= 2.0 * step_err.max()), (err, step_err.max())
    assert np.all((err <= 2.0 * bracket)[ts >= 0.5]), (err, bracket)
    # at step points the dense output returns the steps themselves
    on = jaxrot.simulate("buss4", P, dt, n, saveat=jaxrot.SaveAt(ts=[0.4, 1.0]))
    assert on.ts.shape == (4,) and float(on.ts[0]) == 0.0 and float(on.ts[-1]) == pytest.approx(3.0)
    np.testing.assert_allclose(np.asarray(on.states.R[1]), np.asarray(steps.states.R[20]), atol=1e-13)


@pytest.mark.slow  # batch, float32 and reverse mode of dense output in one long test
def test_batch_float32_and_gradients():
    key = jax.random.PRNGKey(1)
    Pi = P.state0.Pi + 0.05 * jax.random.normal(key, (4, 3))
    S = jaxrot.State(jnp.broadcast_to(P.state0.R, (4, 3, 3)), Pi)
    tr = jaxrot.simulate("buss4", P, 0.01, 100, state0=S, saveat=jaxrot.SaveAt(ts=[0.123, 0.5], dense=True))
    assert tr.states.R.shape == (4, 4, 3, 3)
    one = jaxrot.simulate("buss4", P, 0.01, 100, state0=jaxrot.State(S.R[2], S.Pi[2]),
                          saveat=jaxrot.SaveAt(ts=[0.123, 0.5]))
    np.testing.assert_allclose(np.asarray(tr.states.R[2]), np.asarray(one.states.R), atol=1e-13)
    assert tr.evaluate(jnp.array([[0.2, 0.3]])).R.shape == (4, 1, 2, 3, 3)
    f32 = jaxrot.simulate("buss4", jaxrot.cast(P, jnp.float32), 0.01, 100, saveat=jaxrot.SaveAt(dense=True))
    s = f32.evaluate(0.555)
    assert s.R.dtype == jnp.float32
    assert float(np.abs(np.asarray(s.R, np.float64) - np.asarray(_exact([0.555]).R[0])).max()) < 1e-5

    # gradients w.r.t. the time and the inertia, against central differences
    def f(J, t):
        q = jaxrot.Problem(jaxrot.RigidBody(J), P.torque, P.state0, 1.0)
        tr = jaxrot.simulate("buss4", q, 0.01, 100, saveat=jaxrot.SaveAt(dense=True))
        s = tr.evaluate(t)
        return jnp.sum(s.R[0]) + jnp.sum(s.Pi)

    gJ, gt = jax.grad(f, argnums=(0, 1))(P.body.J, 0.4567)
    h = 1e-6
    fdJ = np.array([(f(P.body.J.at[i].add(h), 0.4567) - f(P.body.J.at[i].add(-h), 0.4567)) / (2 * h) for i in range(3)])
    fdt = (f(P.body.J, 0.4567 + h) - f(P.body.J, 0.4567 - h)) / (2 * h)
    np.testing.assert_allclose(np.asarray(gJ), fdJ, rtol=1e-6, atol=1e-8)
    assert float(gt) == pytest.approx(float(fdt), rel=1e-6)


def test_interpolant_at_zero_angle_and_checkpoints():
    sysm = P.system
    s0 = jaxrot.State(jnp.eye(3), jnp.zeros(3))
    g = jax.grad(lambda s: jnp.sum(interpolate(sysm, 0.0, 0.1, s0, s0, s).R))(0.05)
    assert np.isfinite(float(g))
    gs = jax.grad(lambda pi: jnp.sum(interpolate(sysm, 0.0, 0.1, jaxrot.State(jnp.eye(3), pi), s0, 0.03).R))(
        jnp.zeros(3))
    assert np.all(np.isfinite(gs))
    assert checkpoint_interval(10_000) == 100 and checkpoint_interval(12) in (3, 4)
    assert checkpoint_interval(1) == 1


def test_bad_times():
    with pytest.raises(ValueError, match="ts"):
        jaxrot.simulate("buss4", P, 0.01, 100, saveat=jaxrot.SaveAt(ts=[0.5, 0.2]))
    with pytest.raises(ValueError, match="span"):
        jaxrot.simulate("buss4", P, 0.01, 100, saveat=jaxrot.SaveAt(ts=[0.5, 1.5]))
    tr = jaxrot.simulate("buss4", P, 0.01, 100, saveat=jaxrot.SaveAt(dense=True))
    with pytest.raises(ValueError, match="span"):
        tr.evaluate(2.0)
    with pytest.raises(ValueError, match="dense"):
        jaxrot.simulate("buss4", P, 0.01, 100).evaluate(0.5)
    with pytest.raises(ValueError, match="save_every"):
        jaxrot.simulate("buss4", P, 0.01, 100, saveat=jaxrot.SaveAt(dense=True), save_every=2)


@pytest.mark.parametrize("adaptive", [False, True], ids=["constant", "adaptive"])
def test_after_a_terminal_event_the_dense_output_holds_the_event_state(adaptive):
    # as the saved frames do; before the event it is the run's own, each body of a batch up to its own event
    ev = jaxrot.Event(lambda t, s, a: t - jnp.linalg.norm(s.Pi), terminal=True)  # at t = |Pi|: about 1 and 2
    Pi = P.state0.Pi * jnp.array([1.0, 2.0])[:, None]
    batch = jaxrot.State(jnp.broadcast_to(P.state0.R, (2, 3, 3)), Pi)
    kw = (dict(stepsize=jaxrot.Adaptive(1e-10, 1e-10)) if adaptive else dict(dt=0.01))
    tr = jaxrot.simulate("rkmk8(5)" if adaptive else "rk4", P, t1=3.0, state0=batch, event=ev,
                         saveat=jaxrot.SaveAt(dense=True), **kw)
    t_ev = np.asarray(tr.event_time)
    assert np.all(np.isfinite(t_ev)) and 0.5 < t_ev[0] < t_ev[1] - 0.5 < 2.0, t_ev
    ts = jnp.array([0.25, float(t_ev[0]) + 0.05, float(t_ev[1]) + 0.05, 3.0])
    got = tr.evaluate(ts)
    for b in range(2):
        for k, t in enumerate(np.asarray(ts)):
            if t < t_ev[b]:
                want = exact.free_flow(P.body.J, jaxrot.State(P.state0.R, Pi[b]), t).Pi
                np.testing.assert_allclose(np.asarray(got.Pi[b, k]), np.asarray(want), atol=1e-6)
            else:
                np.testing.assert_array_equal(np.asarray(got.Pi[b, k]), np.asarray(tr.event_state.Pi[b]))
                np.testing.assert_array_equal(np.asarray(got.R[b, k]), np.asarray(tr.event_state.R[b]))
    with pytest.raises(ValueError, match="within the run's span"):
        tr.evaluate(3.5)


def test_a_high_order_method_keeps_its_accuracy_between_the_steps():
    # its dense output is one step of its own to the query time: the cubic interpolant alone was 1e-8 off
    # on rkmk8(5)'s long steps at 1e-12
    ts = jnp.linspace(0.1, 1.9, 19)
    exact_R = jnp.stack([exact.free_flow(P.body.J, P.state0, t).R for t in ts])
    adaptive = jaxrot.simulate("rkmk8(5)", P, t1=2.0, stepsize=jaxrot.Adaptive(1e-12, 1e-12),
                               saveat=jaxrot.SaveAt(dense=True))
    assert float(jnp.abs(adaptive.evaluate(ts).R - exact_R).max()) <= 1e-12
    constant = jaxrot.simulate("rkmk8", P, 0.1, 20, saveat=jaxrot.SaveAt(dense=True, steps=True))
    at_steps = float(jnp.abs(constant.states.R[-1] - exact.free_flow(P.body.J, P.state0, 2.0).R).max())
    between = float(jnp.abs(constant.evaluate(ts + 0.05).R - jnp.stack(
        [exact.free_flow(P.body.J, P.state0, t).R for t in ts + 0.05])).max())
    assert between <= 10 * at_steps + 1e-14, (between, at_steps)


@pytest.mark.parametrize("first", [True, False])
def test_dense_alone_keeps_the_frames_of_saveat_with_either_controller(first):
    # SaveAt(dense=True) adds the dense output; the frames stay SaveAt's (the constant-step run's
    # checkpoints are not returned as frames)
    saveat = jaxrot.SaveAt(dense=True, t0=first)
    const = jaxrot.simulate("rk4", P, 0.01, t1=2.0, saveat=saveat)
    adapt = jaxrot.simulate("rkmk8(5)", P, t1=2.0, saveat=saveat, stepsize=jaxrot.Adaptive(1e-10, 1e-10))
    want = [0.0, 2.0] if first else [2.0]
    for tr in (const, adapt):
        np.testing.assert_array_equal(np.asarray(tr.ts), want)
        assert tr.states.R.shape == (len(want), 3, 3)
    np.testing.assert_allclose(np.asarray(const.final.R), np.asarray(adapt.final.R), atol=1e-8)
    np.testing.assert_allclose(np.asarray(const.evaluate(1.0).R), np.asarray(adapt.evaluate(1.0).R), atol=1e-8)


def test_a_run_that_failed_before_its_event_has_no_dense_output_past_its_last_step():
    h = problems.get("t_handle")
    never = jaxrot.Event(lambda t, s, a: s.Pi[0] - 100.0)  # terminal, never crosses
    for ev in (None, never):
        tr = jaxrot.simulate("rkmk8(5)", h, t1=10.0, event=ev, throw=False, saveat=jaxrot.SaveAt(dense=True),
                             stepsize=jaxrot.Adaptive(1e-10, 1e-10, max_steps=20))
        assert tr.result == jaxrot.RESULTS.max_steps_reached
        with pytest.raises(ValueError, match="within the run's span"):
            tr.evaluate(10.0)
