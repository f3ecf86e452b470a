"""What a first call compiles: ``jax.grad`` of a run in a few numbers (the moments, one body's
initial state) takes its derivative by forward tangents of the loop (one program; no checkpointed
while loop run backwards, no transpose of the loop), and gives the reverse pass's derivative."""

import jax
import jax.numpy as jnp
import pytest

import jaxrot
from jaxrot import problems
from jaxrot.driver import forward_vjp

P = problems.get("t_handle")


def _batch(n):
    return jaxrot.State(jnp.broadcast_to(P.state0.R, (n, 3, 3)), P.state0.Pi * jnp.linspace(0.9, 1.1, n)[:, None])


def _adaptive_loss(J, Pi=None, adjoint=None):
    s = _batch(4) if Pi is None else jaxrot.State(_batch(4).R, Pi)
    q = jaxrot.Problem(jaxrot.RigidBody(J), P.torque, P.state0, 2.0)
    tr = jaxrot.simulate("buss4(3)", q, t1=2.0, state0=s, stepsize=jaxrot.Adaptive(1e-9, 1e-9), executor=jaxrot.XLA(),
                         saveat=jaxrot.SaveAt(ts=[1.0, 2.0]), adjoint=adjoint)
    return jnp.sum(tr.states.Pi[:, 1:] ** 3)


def _constant_loss(J, bodies=None):
    q = jaxrot.Problem(jaxrot.RigidBody(J), P.torque, P.state0, 1.0)
    s = None if bodies is None else _batch(bodies)
    final = jaxrot.simulate("buss4", q, 1e-2, 100, state0=s).final
    return jnp.sum(final.R[..., 0, 0]) + jnp.sum(final.Pi[..., 1])


def _without_tangents(monkeypatch, f, *args):
    """``f(*args)`` with the derivative taken by JAX's reverse pass (no forward tangents)."""
    monkeypatch.setattr(forward_vjp, "MOST", 0)
    jax.clear_caches()
    try:
        return f(*args)
    finally:
        monkeypatch.undo()
        jax.clear_caches()


def _close(a, b, rtol):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        scale = float(jnp.max(jnp.abs(y)))
        assert float(jnp.max(jnp.abs(x - y))) <= rtol * scale, (x, y)


def test_an_error_controlled_gradient_is_forward_mode_s_in_one_loop(monkeypatch):
    J, Pi = P.body.J, _batch(4).Pi
    grad = jax.grad(_adaptive_loss, argnums=(0, 1))  # the moments and every body's momentum: 6 numbers a body
    forward = jax.jacfwd(lambda J, Pi: _adaptive_loss(J, Pi, adjoint=jaxrot.ForwardMode()), argnums=(0, 1))
    _close(grad(J, Pi), forward(J, Pi), 1e-12)
    # the program: one while loop (the run with its tangents), where the reverse pass has three (the run,
    # its replay and the checkpointed loop run backwards; the slow tier's test below counts them)
    assert str(jax.make_jaxpr(grad)(J, Pi)).count(" while[") == 1


@pytest.mark.parametrize("bodies", [None, pytest.param(8, marks=pytest.mark.slow)])
def test_a_constant_step_gradient_is_the_reverse_pass_s(monkeypatch, bodies):
    J = P.body.J
    grad = jax.grad(lambda J: _constant_loss(J, bodies))
    g = grad(J)
    _close(g, _without_tangents(monkeypatch, grad, J), 1e-12)
    h = 1e-6  # central differences
    fd = jnp.array([(_constant_loss(J + h * e, bodies) - _constant_loss(J - h * e, bodies)) / (2 * h)
                    for e in jnp.eye(3)])
    _close(g, fd, 1e-7)


@pytest.mark.slow  # (compiles the checkpointed reverse pass of an error-controlled loop: tens of seconds)
def test_the_tangents_give_the_reverse_pass_s_gradient_and_past_the_limit_it_runs(monkeypatch):
    """The checkpointed reverse pass gives the same gradient; past :data:`~jaxrot.driver.forward_vjp.MOST`
    numbers a body (here 2, against the moments' 3) it runs."""
    J = P.body.J
    grad = jax.grad(_adaptive_loss)
    g = grad(J)
    _close(g, _without_tangents(monkeypatch, grad, J), 1e-12)
    assert _without_tangents(monkeypatch, lambda: str(jax.make_jaxpr(grad)(J)).count(" while[")) > 1
    monkeypatch.setattr(forward_vjp, "MOST", 2)
    jax.clear_caches()
    try:
        assert str(jax.make_jaxpr(grad)(J)).count(" while[") > 1
        _close(grad(J), g, 1e-12)
    finally:
        jax.clear_caches()


def test_a_batch_gradient_in_the_step_and_every_body_s_momentum_together():
    """The step (shared by the bodies) perturbed with each body's momentum: the per-body tangents' cotangents
    of the step summed over the batch, equal to the step's gradient alone and to central differences."""
    R0 = jnp.broadcast_to(P.state0.R, (4, 3, 3))
    Pi0 = P.state0.Pi * jnp.linspace(0.5, 2.0, 4)[:, None]

    def loss(Pi, dt):
        tr = jaxrot.simulate("rk4", P, dt, 40, state0=jaxrot.State(R0, Pi), saveat=jaxrot.SaveAt(steps=8),
                             executor=jaxrot.XLA())
        return jnp.sum(tr.states.Pi * jnp.array([1.0, 2.0, 3.0])) + jnp.sum(tr.ts)

    dt = jnp.asarray(2e-3)
    g_Pi, g_dt = jax.grad(loss, argnums=(0, 1))(Pi0, dt)
    _close(g_dt, jax.grad(loss, argnums=1)(Pi0, dt), 1e-12)
    _close(g_Pi, jax.grad(loss)(Pi0, dt), 1e-12)
    h = 1e-7
    _close(g_dt, (loss(Pi0, dt + h) - loss(Pi0, dt - h)) / (2 * h), 1e-6)
