"""Gradients of adaptive runs (the default adjoint, RecursiveCheckpointAdjoint) against the exact flow's."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import exact, problems

P = problems.get("free_body_mz")
W = jnp.array([1.0, -2.0, 0.5])


def _loss(J, adjoint=None, t1=3.0, state0=None, max_steps=4000, pair="lie_taylor5(4)", executor=None):
    # max_steps = 4000: fewer checkpoints (89) than steps, so the backward pass recomputes
    q = jaxrot.Problem(jaxrot.RigidBody(J), P.torque, P.state0, t1)
    tr = jaxrot.simulate(pair, q, t1=t1, state0=state0, adjoint=adjoint, executor=executor,
                         stepsize=jaxrot.Adaptive(1e-10, 1e-10, max_steps=max_steps),
                         saveat=jaxrot.SaveAt(ts=[1.0, t1]))
    return jnp.sum(tr.states.Pi[..., -1, :] * W) + jnp.sum(tr.states.Pi[..., 1, :])


def _exact_loss(J, t1=3.0, state0=P.state0):
    a, b = exact.free_flow(J, state0, t1), exact.free_flow(J, state0, 1.0)
    return jnp.sum(a.Pi * W) + jnp.sum(b.Pi)


def test_grad_matches_the_exact_flow():
    """The default adjoint at 1e-12 over about 600 steps, far more than the checkpoints it keeps: the
    backward pass recomputes the loop, and still differentiates the steps the run took (a
    recomputation that chose its own steps was up to 1e4 times the derivative off here)."""
    def loss(J):
        q = jaxrot.Problem(jaxrot.RigidBody(J), P.torque, P.state0, 3.0)
        tr = jaxrot.simulate("buss4(3)", q, t1=3.0, stepsize=jaxrot.Adaptive(1e-12, 1e-12, max_steps=4000),
                             saveat=jaxrot.SaveAt(ts=[1.0, 3.0]))
        return jnp.sum(tr.states.Pi[-1] * W) + jnp.sum(tr.states.Pi[1]), tr.controller.n_accepted

    g, steps = jax.grad(loss, has_aux=True)(P.body.J)
    ge = jax.grad(_exact_loss)(P.body.J)
    assert int(steps) > 500
    assert float(jnp.abs(g - ge).max()) <= 1e-9 * float(jnp.abs(ge).max())


@pytest.mark.parametrize("adjoint", [jaxrot.DirectAdjoint(), jaxrot.RecursiveCheckpointAdjoint(checkpoints=4)])
def test_every_reverse_adjoint_equals_forward_mode_also_through_jit(adjoint):
    """The run traced by jit, then differentiated; its save times traced too, the last two equal (the
    frame written after the last step, without one, still has its derivative). The XLA loop's adjoints
    (under jit the automatic choice would take the fused kernel, whose tangents are these loops')."""
    def loss(J, ts, adjoint):
        q = jaxrot.Problem(jaxrot.RigidBody(J), P.torque, P.state0, 1.5)
        tr = jaxrot.simulate("buss4(3)", q, adjoint=adjoint, stepsize=jaxrot.Adaptive(1e-10, 1e-10, max_steps=300),
                             saveat=jaxrot.SaveAt(t0=False, ts=ts), executor=jaxrot.XLA())
        return jnp.sum(tr.states.Pi[-1] * W) + jnp.sum(tr.states.Pi[0])

    ts = jnp.asarray([0.5, 1.5, 1.5])
    g = jax.grad(jax.jit(lambda J, ts: loss(J, ts, adjoint)))(P.body.J, ts)
    gf = jax.jacfwd(jax.jit(lambda J, ts: loss(J, ts, jaxrot.ForwardMode())))(P.body.J, ts)
    np.testing.assert_allclose(np.asarray(g), np.asarray(gf), rtol=1e-9, atol=1e-13)
    if isinstance(adjoint, jaxrot.DirectAdjoint):  # both modes
        gd = jax.jacfwd(jax.jit(lambda J, ts: loss(J, ts, adjoint)))(P.body.J, ts)
        np.testing.assert_allclose(np.asarray(gd), np.asarray(gf), rtol=1e-12, atol=1e-15)


def test_jax_linearize_of_an_adaptive_run_works_with_the_direct_adjoint():
    """jax.linearize traces a run as jax.grad does; with DirectAdjoint its linear function evaluates,
    and equals jax.jacfwd's product."""
    def f(Pi):
        return jaxrot.simulate("buss4(3)", P, t1=0.2, state0=jaxrot.State(P.state0.R, Pi), adjoint=jaxrot.DirectAdjoint(),
                               stepsize=jaxrot.Adaptive(1e-6, 1e-6, max_steps=24)).final.Pi

    v = jnp.array([1.0, -0.5, 0.25])
    _, lin = jax.linearize(f, P.state0.Pi)
    np.testing.assert_allclose(np.asarray(lin(v)), np.asarray(jax.jacfwd(f)(P.state0.Pi) @ v), rtol=1e-10, atol=1e-13)


@pytest.mark.slow  # a second-order derivative through the bounded loop
def test_direct_adjoint_differentiates_reverse_over_forward():
    v = jnp.array([1.0, -0.5, 0.25])

    def f(J, adjoint):
        return _loss(J, adjoint, t1=1.5, max_steps=300, pair="buss4(3)")

    def hvp(J):
        return jax.jvp(lambda J: f(J, jaxrot.DirectAdjoint()), (J,), (v,))[1]

    got = jax.grad(hvp)(P.body.J)
    want = jax.jacfwd(lambda J: jax.jvp(lambda J: f(J, jaxrot.ForwardMode()), (J,), (v,))[1])(P.body.J)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-8, atol=1e-12)


@pytest.mark.slow  # the attitude's path of the momentum check
def test_grad_of_the_attitude_matches_differences_of_the_exact_flow():
    def final_r(J):
        q = jaxrot.Problem(jaxrot.RigidBody(J), P.torque, P.state0, 3.0)
        tr = jaxrot.simulate("lie_taylor5(4)", q, t1=3.0, stepsize=jaxrot.Adaptive(1e-10, 1e-10, max_steps=4000),
                             saveat=jaxrot.SaveAt(t0=False), )
        return jnp.sum(tr.final.R * jnp.arange(1.0, 10.0).reshape(3, 3))

    g = jax.grad(final_r)(P.body.J)
    h = 1e-5

    def ex(J):
        return float(jnp.sum(exact.free_flow(J, P.state0, 3.0).R * jnp.arange(1.0, 10.0).reshape(3, 3)))

    fd = np.array([(ex(P.body.J.at[k].add(h)) - ex(P.body.J.at[k].add(-h))) / (2 * h) for k in range(3)])
    assert np.abs(np.asarray(g) - fd).max() <= 1e-6 * np.abs(fd).max()


@pytest.mark.slow  # four more compilations of the checked gradient
def test_grad_agrees_with_forward_mode_and_jit():
    g = jax.jit(jax.grad(_loss))(P.body.J)
    gf = jax.jacfwd(lambda J: _loss(J, jaxrot.ForwardMode()))(P.body.J)
    np.testing.assert_allclose(np.asarray(g), np.asarray(gf), rtol=1e-9, atol=1e-12)
    # the two loops take the same steps: the same values
    assert float(_loss(P.body.J, jaxrot.ForwardMode())) == float(_loss(P.body.J))


@pytest.mark.slow  # the batched path of the exact-flow check above
def test_grad_of_a_batch_with_respect_to_the_initial_states():
    key = jax.random.PRNGKey(0)
    Pi = P.state0.Pi + 0.05 * jax.random.normal(key, (3, 3))
    R = jnp.broadcast_to(P.state0.R, (3, 3, 3))

    def f(Pi):
        return jnp.sum(_loss(P.body.J, state0=jaxrot.State(R, Pi)))

    g = jax.grad(f)(Pi)
    ge = jax.vmap(jax.grad(lambda pi: _exact_loss(P.body.J, state0=jaxrot.State(P.state0.R, pi))))(Pi)
    assert float(jnp.abs(g - ge).max()) <= 1e-6 * float(jnp.abs(ge).max())


@pytest.mark.slow  # a 1e5-step adaptive gradient
def test_checkpointed_memory_grows_slowly_with_max_steps():
    # the XLA loop's checkpoints (a fused run's record of accepted steps holds max_steps numbers a body)
    def temp(max_steps):
        f = jax.jit(jax.grad(lambda J: _loss(J, max_steps=max_steps, executor=jaxrot.XLA())))
        return f.lower(P.body.J).compile().memory_analysis().temp_size_in_bytes

    small, large = temp(1000), temp(100_000)
    assert large <= 20 * small


@pytest.mark.slow  # a second pair through the same loop
def test_buss_pair_grad_without_recomputation_matches_forward_mode():
    # max_steps large enough that every step has its checkpoint: exact agreement
    g = jax.grad(lambda J: _loss(J, pair="buss4(3)", max_steps=100_000))(P.body.J)
    gf = jax.jacfwd(lambda J: _loss(J, jaxrot.ForwardMode(), pair="buss4(3)", max_steps=100_000))(P.body.J)
    np.testing.assert_allclose(np.asarray(g), np.asarray(gf), rtol=1e-9, atol=1e-13)


@pytest.mark.slow  # a reverse-mode program compiled with XLA's default flags in a subprocess
@pytest.mark.default_xla  # the NaN appeared with XLA's default flags, not the suite's fast-compile ones
def test_grad_of_a_batch_whose_bodies_finish_apart_is_finite():
    """In a vmapped loop a body that is done keeps taking steps of length 0 until the slowest is;
    their error estimate is 0, whose square root has an infinite derivative: reverse mode gave NaN
    (over T = 100 here) until that derivative was taken as 0. Against the exact flow's
    gradient: at rtol = 1e-6 over T = 100 the run's own error is about 1e-5 of it."""
    Pi = P.state0.Pi * (1 + 0.01 * np.random.default_rng(5).normal(size=(3, 3)))
    S = jaxrot.State(jnp.broadcast_to(P.state0.R, (3, 3, 3)), jnp.asarray(Pi))

    def f(J):
        q = jaxrot.Problem(jaxrot.RigidBody(J), P.torque, P.state0, 100.0)
        tr = jaxrot.simulate("lie_taylor5(4)", q, t1=100.0, state0=S, throw=False,
                             stepsize=jaxrot.Adaptive(1e-6, 1e-6, max_steps=4000), saveat=jaxrot.SaveAt(t0=False))
        return jnp.sum(tr.final.Pi[:, 0])

    def exact_f(J):
        return jnp.sum(jax.vmap(lambda s: exact.free_flow(J, s, 100.0))(S).Pi[:, 0])

    g, ge = jax.grad(f)(P.body.J), jax.grad(exact_f)(P.body.J)
    assert np.all(np.isfinite(np.asarray(g))), g
    assert float(jnp.abs(g - ge).max()) <= 1e-4 * float(jnp.abs(ge).max())  # measured 9.5e-6


def test_bad_adjoint_and_forward_mode_refused():
    with pytest.raises(ValueError, match="adjoint"):
        _loss(P.body.J, adjoint="backsolve")
    with pytest.raises(TypeError, match="adjoint"):
        _loss(P.body.J, adjoint=3)
    # asked for explicitly, an adjoint that cannot differentiate the way the run is differentiated
    # is refused with the one that can
    with pytest.raises(ValueError, match="ForwardMode"):
        jax.jacfwd(lambda J: _loss(J, jaxrot.RecursiveCheckpointAdjoint()))(P.body.J)
    with pytest.raises(ValueError, match="RecursiveCheckpointAdjoint"):
        jax.grad(lambda J: _loss(J, jaxrot.ForwardMode()))(P.body.J)


def test_forward_mode_is_taken_by_itself_without_an_adjoint():
    """Without an adjoint, jax.jacfwd runs the forward-mode loop: the same derivative as asked for."""
    a = jax.jacfwd(_loss)(P.body.J)
    b = jax.jacfwd(lambda J: _loss(J, jaxrot.ForwardMode()))(P.body.J)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))