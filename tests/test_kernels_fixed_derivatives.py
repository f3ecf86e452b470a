"""Derivatives of fused constant-step runs taken in the kernels (reverse mode alone: the step's VJP walked
backwards over the recorded steps; forward mode: its JVP walked forwards), against the XLA executor's."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot.kernels import adaptive_backward

pytest.importorskip("warp")

B, N, EVERY = 4, 40, 8


@pytest.fixture
def calls(monkeypatch):
    """How often the kernels' backward and tangent passes ran."""
    seen = {"vjp": 0, "jvp": 0}
    backward, tangents = adaptive_backward.backward, adaptive_backward.tangents

    def counted(kind, fn):
        def run(*a, **k):
            seen[kind] += 1
            return fn(*a, **k)
        return run

    monkeypatch.setattr(adaptive_backward, "backward", counted("vjp", backward))
    monkeypatch.setattr(adaptive_backward, "tangents", counted("jvp", tangents))
    return seen


def _loss(method, n=N):
    p = jaxrot.problems.get("fast_top")  # (a gravity torque: its parameters and J are differentiated)
    R0 = jnp.broadcast_to(p.state0.R, (B, 3, 3))
    Pi0 = p.state0.Pi * jnp.linspace(0.5, 2.0, B)[:, None]

    def loss(J, Pi, dt, executor):
        prob = jaxrot.Problem(jaxrot.RigidBody(J), p.torque, p.state0, 1.0)
        tr = jaxrot.simulate(method, prob, dt, n, state0=jaxrot.State(R0, Pi), saveat=jaxrot.SaveAt(steps=EVERY),
                             executor=executor)
        return jnp.sum(tr.states.R[..., 2, :] * jnp.array([1.0, 2.0, 3.0])) + 1e-3 * jnp.sum(tr.states.Pi ** 2)

    return loss, (jnp.asarray(p.body.J), Pi0, jnp.asarray(2e-3))


def _rel(a, b):
    return float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b)))


@pytest.mark.parametrize("method", ["rk4", "buss2p"])  # (buss2p carries a memory from step to step)
def test_reverse_mode_in_the_kernels_equals_the_xla_loop(method, calls):
    loss, (J, Pi, dt) = _loss(method)
    got = jax.grad(loss, argnums=(0, 1))(J, Pi, dt, jaxrot.Fused())
    assert calls["vjp"] == 1
    want = jax.grad(loss, argnums=(0, 1))(J, Pi, dt, jaxrot.XLA())
    for a, b in zip(got, want):
        assert _rel(a, b) < 1e-10, (_rel(a, b), a, b)
    got_jit = jax.jit(jax.grad(loss), static_argnums=3)(J, Pi, dt, jaxrot.Fused())
    assert calls["vjp"] == 2 and _rel(got_jit, want[0]) < 1e-10
    # the step's own derivative comes from the reference loop
    got_dt, want_dt = (jax.grad(loss, argnums=2)(J, Pi, dt, ex) for ex in (jaxrot.Fused(), jaxrot.XLA()))
    assert calls["vjp"] == 3 and abs(got_dt - want_dt) <= 1e-10 * abs(want_dt)


@pytest.mark.parametrize("method", ["rk4", "buss2p"])
def test_forward_mode_in_the_kernels_equals_the_xla_loop(method, calls):
    loss, (J, Pi, dt) = _loss(method)
    dJ = jnp.array([1.0, -0.5, 0.25])
    got = jax.jvp(lambda J: loss(J, Pi, dt, jaxrot.Fused()), (J,), (dJ,))[1]
    want = jax.jvp(lambda J: loss(J, Pi, dt, jaxrot.XLA()), (J,), (dJ,))[1]
    assert calls["jvp"] == 1 and abs(got - want) <= 1e-10 * abs(want)
    jac = jax.jacfwd(lambda Pi: loss(J, Pi, dt, jaxrot.Fused()))(Pi)
    assert calls["jvp"] == 2
    np.testing.assert_allclose(jac, jax.jacfwd(lambda Pi: loss(J, Pi, dt, jaxrot.XLA()))(Pi), rtol=1e-10, atol=1e-13)


def test_the_automatic_choice_takes_the_kernels_derivatives(calls, monkeypatch):
    """Where the fused run is chosen for a plain call, a differentiated one is fused too, its derivative
    in the kernels (decided from the transform and the shapes, as the plain call)."""
    from jaxrot.driver import executors

    monkeypatch.setattr(executors, "FUSED_MIN_BODY_STEPS_CPU", B * N)
    # (a step count of its own: the derivative passes are counted when a program is traced)
    loss, (J, Pi, dt) = _loss("rk4", 2 * N)
    got = jax.grad(loss)(J, Pi, dt, None)
    assert calls["vjp"] == 1
    assert _rel(got, jax.grad(loss)(J, Pi, dt, jaxrot.XLA())) < 1e-10
    got = jax.jvp(lambda J: loss(J, Pi, dt, None), (J,), (jnp.ones(3),))[1]
    assert calls["jvp"] == 1
    monkeypatch.setattr(adaptive_backward, "RECORD_BYTES", 1)  # every step's start no longer fits: XLA's loop
    jax.grad(loss)(J, Pi, dt, None)
    assert calls["vjp"] == 1
