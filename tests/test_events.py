"""Events on the dense output: location against the exact flow, implicit-function gradients, batches."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize as so

import jaxrot
from jaxrot import exact, problems

P = problems.get("t_handle")
FLIP = jaxrot.Event(lambda t, s, args: s.R[1, 1], direction=-1)  # the long axis' world-y component
DT, N = 1e-3, 8000


def _problem(J):
    return jaxrot.Problem(jaxrot.RigidBody(J), P.torque, jaxrot.State(P.state0.R, J * (P.state0.Pi / P.body.J)), 8.0)


def _flip_time(J):
    return jaxrot.simulate("buss4", _problem(J), DT, N, event=FLIP, saveat=jaxrot.SaveAt(t0=False)).event_time


def test_flip_time_matches_the_exact_solution():
    # both runs on XLA's loop: on a GPU the automatic choice runs the free run fused, equal only to round-off
    tr = jaxrot.simulate("buss4", P, DT, N, event=FLIP, saveat=jaxrot.SaveAt(steps=1000), executor=jaxrot.XLA())
    t = float(tr.event_time)
    te = so.brentq(lambda s: float(exact.free_flow(P.body.J, P.state0, s).R[1, 1]), t - 0.01, t + 0.01,
                   xtol=1e-15, rtol=1e-15)
    assert abs(t - te) <= 1e-8
    assert abs(float(tr.event_state.R[1, 1])) < 1e-12
    # terminal: the frames after the event repeat the event state; those before are untouched
    after = np.asarray(tr.ts) > t
    np.testing.assert_array_equal(np.asarray(tr.states.R[after]), np.broadcast_to(tr.event_state.R, (after.sum(), 3, 3)))
    free = jaxrot.simulate("buss4", P, DT, N, saveat=jaxrot.SaveAt(steps=1000), executor=jaxrot.XLA())
    np.testing.assert_array_equal(np.asarray(tr.states.R[~after]), np.asarray(free.states.R[~after]))


@pytest.mark.parametrize("executor", ["XLA", "Fused"])
def test_an_eighth_order_method_locates_at_its_own_accuracy(executor):
    """Long steps of rkmk8 (dt = 0.05): the dense output's root alone was 2.7e-9 relative off the exact
    flip time (its O(h^4) error); polished with the method's own steps, the time is the method's to
    round-off, in the XLA loop and the fused kernel alike, and the event state is the method's."""
    tr = jaxrot.simulate("rkmk8", P, 0.05, 200, event=FLIP, executor=getattr(jaxrot, executor)())
    assert tr.info["executor"] == executor
    t = float(tr.event_time)
    te = so.brentq(lambda s: float(exact.free_flow(P.body.J, P.state0, s).R[1, 1]), t - 0.01, t + 0.01,
                   xtol=1e-15, rtol=1e-15)
    assert abs(t - te) <= 1e-13 * te, (t, te)
    assert abs(float(tr.event_state.R[1, 1])) < 1e-14
    np.testing.assert_allclose(np.asarray(tr.event_state.R), np.asarray(exact.free_flow(P.body.J, P.state0, te).R),
                               rtol=0, atol=1e-12)


class _Weighted(jaxrot.integrators.AbstractIntegrator):
    """A user's method holding an array: body-frame Euler with the angular velocity weighted by ``w``."""

    order = 5  # (declared above the dense output's order, so that its events are polished: the subject here)
    torque = False
    w: jax.Array

    def step(self, system, t, state, aux, dt):
        E = jaxrot.so3.exp(dt * self.w * state.Pi / system.body.J)
        return jaxrot.State(state.R @ E, E.T @ state.Pi), aux, jaxrot.StepStats.explicit()


def test_a_method_holding_arrays_polishes_its_events_and_differentiates_through_them():
    """The polish steps the user's method, arrays and all (traced ones too): the event time under
    ``jax.jit(jax.grad)`` with respect to the method's own array, against central differences."""
    def flip_time(w):
        return jaxrot.simulate(_Weighted(w), P, 2e-3, 4500, event=FLIP, saveat=jaxrot.SaveAt(t0=False)).event_time

    w = jnp.ones(3)
    t = float(flip_time(w))
    assert abs(t - 7.6768) < 0.05  # (first order in truth) at dt = 2e-3: near the exact 7.6768
    g = jax.jit(jax.grad(flip_time))(w)
    h = 1e-6
    fd = np.array([(float(flip_time(w.at[i].add(h))) - float(flip_time(w.at[i].add(-h)))) / (2 * h) for i in range(3)])
    np.testing.assert_allclose(np.asarray(g), fd, rtol=1e-5, atol=1e-6 * np.abs(fd).max())


@pytest.mark.parametrize("steps", [50, pytest.param(False, marks=pytest.mark.slow)])  # frames; the final state
def test_a_terminal_event_never_reached_leaves_the_run_and_its_derivatives_as_without_it(steps):
    """Constant steps with a terminal event run in the loop of attempts, those without one in a scan:
    an event that never fires leaves the frames, the step count, and the derivatives in J and dt
    (forward tangents: few numbers perturbed) and in J, dt, the initial state and t0 (17 numbers: the
    adjoint's checkpointed loop taking the same steps again) as the scan's."""
    never = jaxrot.Event(lambda t, s, a: t - 100.0, direction=1)
    saveat = jaxrot.SaveAt(steps=steps) if steps else jaxrot.SaveAt(t0=False)

    def run(J, dt, Pi, R0, t0, event):
        return jaxrot.simulate("buss4", _problem(J), dt, 200, t0=t0, state0=jaxrot.State(R0, Pi), event=event,
                               saveat=saveat, executor=jaxrot.XLA())

    def loss(*args):
        tr = run(*args)
        return jnp.sum(tr.states.R[..., 0, :] * jnp.arange(1.0, 4.0)) + jnp.sum(tr.states.Pi ** 2)

    args = (P.body.J, jnp.asarray(2e-2), P.state0.Pi, P.state0.R, jnp.asarray(0.0))
    a, b = run(*args, never), run(*args, None)
    np.testing.assert_array_equal(np.asarray(a.ts), np.asarray(b.ts))
    np.testing.assert_array_equal(np.asarray(a.states.R), np.asarray(b.states.R))
    np.testing.assert_array_equal(np.asarray(a.controller.n_accepted), np.asarray(b.controller.n_accepted))
    for wrt in ((0, 1), (0, 1, 2, 3, 4)):
        ga = jax.grad(loss, wrt)(*args, never)
        gb = jax.grad(loss, wrt)(*args, None)
        for x, y in zip(ga, gb):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-10, atol=1e-12)
        assert all(np.abs(np.asarray(x)).max() > 0 for x in ga[:4])  # (a free body's run is the same from any t0)


def test_high_order_methods_are_polished():
    from jaxrot.driver import events
    from jaxrot.integrators import get

    for name in ("buss4", "rk4", "buss4(3)", "rkmk8", "rkmk8(5,3)", "lie_taylor5(4)"):  # polished above order 4
        assert (events.method_step(get(name)) is not None) == events.polishes(get(name).order) \
            == (get(name).order > 4), name


def test_flip_time_gradient_matches_differences():
    J = P.body.J
    g = jax.grad(_flip_time)(J)
    h = 1e-6
    fd = np.array([(_flip_time(J.at[i].add(h)) - _flip_time(J.at[i].add(-h))) / (2 * h) for i in range(3)])
    assert np.abs(np.asarray(g) - fd).max() <= 1e-6 * np.abs(fd).max()


@pytest.mark.slow  # its gradient compiles for about a minute on two cores
def test_a_polished_event_time_of_rkmk8_differentiates_as_differences():
    """The flip time located by Newton steps on rkmk8's own steps (order 8 > the interpolant's 4):
    its gradient with respect to J is the implicit function theorem's, checked against central
    differences of the located times (h = 1e-5; agreement seen: 8.5e-9 relative)."""
    def flip_time(J):
        return jaxrot.simulate("rkmk8", _problem(J), 0.05, 160, event=FLIP, saveat=jaxrot.SaveAt(t0=False),
                               executor=jaxrot.XLA()).event_time

    J, h = P.body.J, 1e-5
    g = jax.grad(flip_time)(J)
    fd = np.array([(flip_time(J.at[i].add(h)) - flip_time(J.at[i].add(-h))) / (2 * h) for i in range(3)])
    assert np.abs(np.asarray(g) - fd).max() <= 1e-7 * np.abs(fd).max()


def test_batch_each_body_stops_at_its_own_event():
    B = 6
    Pi = P.state0.Pi * (1.0 + 0.2 * jnp.linspace(0.0, 1.0, B))[:, None]
    S = jaxrot.State(jnp.broadcast_to(P.state0.R, (B, 3, 3)), Pi)
    tr = jaxrot.simulate("buss4", P, 1e-2, 800, state0=S, event=FLIP, saveat=jaxrot.SaveAt(steps=10))
    assert tr.event_time.shape == (B,) and np.all(np.isfinite(np.asarray(tr.event_time)))
    assert len(set(np.round(np.asarray(tr.event_time), 6))) == B
    for b in (0, B - 1):
        one = jaxrot.simulate("buss4", P, 1e-2, 800, state0=jaxrot.State(S.R[b], S.Pi[b]), event=FLIP, saveat=jaxrot.SaveAt(steps=10))
        assert float(one.event_time) == pytest.approx(float(tr.event_time[b]), abs=1e-12)
        np.testing.assert_allclose(np.asarray(tr.states.R[b]), np.asarray(one.states.R), atol=1e-12)


def test_direction_none_found_and_not_terminal():
    up = jaxrot.Event(lambda t, s, args: s.R[1, 1], direction=+1)
    tr = jaxrot.simulate("buss4", P, 1e-2, 500, event=up, saveat=jaxrot.SaveAt(steps=50))
    assert np.isnan(float(tr.event_time)) and np.all(np.isnan(np.asarray(tr.event_state.R)))
    both = jaxrot.Event(lambda t, s, args: t - 1.2345, terminal=False)
    tr = jaxrot.simulate("rk4", P, 1e-2, 500, event=both, saveat=jaxrot.SaveAt(steps=50), executor=jaxrot.XLA())
    assert float(tr.event_time) == pytest.approx(1.2345, abs=1e-13)
    free = jaxrot.simulate("rk4", P, 1e-2, 500, saveat=jaxrot.SaveAt(steps=50), executor=jaxrot.XLA())  # the same loop as the event run
    np.testing.assert_array_equal(np.asarray(tr.states.R), np.asarray(free.states.R))


def test_bad_events():
    with pytest.raises(ValueError, match="direction"):
        jaxrot.Event(lambda t, s, a: t, direction=2)
    with pytest.raises(TypeError, match="cond_fn"):
        jaxrot.Event(3.0)
    with pytest.raises(TypeError, match=r"take \(t, state, args\); <lambda> has the signature \(t, s\)"):
        jaxrot.Event(lambda t, s: s.R[2, 2])  # refused where it is made
    with pytest.raises(TypeError, match="event"):
        jaxrot.simulate("buss4", P, 1e-2, 10, event=lambda t, s, a: t)
    # a condition that is not one number, or that takes other arguments: refused before anything runs
    for stepsize, kw in ((jaxrot.Fixed(), dict(dt=1e-2, n_steps=10)), (jaxrot.Adaptive(), dict(t1=0.1))):
        with pytest.raises(ValueError, match="one real number"):
            jaxrot.simulate("buss4(3)", P, stepsize=stepsize, event=jaxrot.Event(lambda t, s, a: s.Pi), **kw)
        with pytest.raises(TypeError, match=r"take \(t, state, args\)"):
            jaxrot.simulate("buss4(3)", P, stepsize=stepsize, event=jaxrot.Event(lambda t, s: s.R[1, 1]), **kw)
        with pytest.raises(ValueError, match="failed on one body's state.*KeyError"):
            jaxrot.simulate("buss4(3)", P, stepsize=stepsize, event=jaxrot.Event(lambda t, s, a: {}["x"]), **kw)


@pytest.mark.slow  # the adaptive run's gradient compiles for over a minute on two cores
def test_a_polished_event_time_has_the_exact_flows_derivative():
    """The flip time of rkmk8(5) at 1e-12 (polished on the pair's own steps) and its gradient in J, against
    the exact flow's root and its implicit-function derivative -(dg/dJ) / (dg/dt). The last Newton
    step's slope is the condition's along the pair's own step: with the interpolant's, whose error is
    O(h^4) on the pair's long steps, the gradient was 1.3e-7 off while the time was right to 1e-15."""
    def s0(J):
        return jaxrot.State(P.state0.R, J * P.state0.Pi / P.body.J)  # the same spin for every J

    def g(J, t):
        return exact.free_flow(J, s0(J), t).R[1, 1]

    J, t = P.body.J, 7.6768
    for _ in range(8):
        t = t - g(J, t) / jax.grad(g, 1)(J, t)
    want = -jax.grad(g, 0)(J, t) / jax.grad(g, 1)(J, t)

    def flip_time(J):
        q = jaxrot.Problem(jaxrot.RigidBody(J), P.torque, s0(J), 8.0)
        return jaxrot.simulate("rkmk8(5)", q, t1=8.0, stepsize=jaxrot.Adaptive(1e-12, 1e-12), event=FLIP,
                               executor=jaxrot.XLA()).event_time

    assert abs(float(flip_time(J)) - float(t)) <= 1e-12 * float(t)
    got = jax.grad(flip_time)(J)
    assert np.abs(np.asarray(got) - np.asarray(want)).max() <= 1e-10 * np.abs(np.asarray(want)).max(), (got, want)
