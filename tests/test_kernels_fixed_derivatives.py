"""Derivatives of fused constant-step runs taken in the kernels (reverse mode alone: the step's VJP walked
backwards over the recorded steps; forward mode: the tangents carried beside the states in the run),
against the XLA executor's."""

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
    """How often the kernels' backward pass ran (``vjp``) and a run carried its tangents (``jvp``)."""
    from jaxrot.kernels import adaptive_tangents

    seen = {"vjp": 0, "jvp": 0}
    backward, tangents = adaptive_backward.backward, adaptive_tangents.tangent_outputs

    def counted(kind, fn):
        def run(*a, **k):
            seen[kind] += 1
            return fn(*a, **k)
        return run

    monkeypatch.setattr(adaptive_backward, "backward", counted("vjp", backward))
    monkeypatch.setattr(adaptive_tangents, "tangent_outputs", counted("jvp", tangents))
    return seen


@pytest.fixture
def strides(calls, monkeypatch):
    """Every how many steps the record of each backward pass kept a state, in call order."""
    seen = []
    counted = adaptive_backward.backward
    monkeypatch.setattr(adaptive_backward, "backward", lambda *a: seen.append(a[2].stride) or counted(*a))
    return seen


def _driven(t, R, Pi, args):
    """A world torque that changes with time: the steps' times count in the derivative."""
    return args * jnp.stack([jnp.sin(7.0 * t), jnp.cos(5.0 * t), jnp.sin(3.0 * t) * R[0, 2]])


def _loss(method, n=N, torque=None, dtype=jnp.float64, every=EVERY, bodies=B):
    p = jaxrot.problems.get("fast_top")  # (a gravity torque: its parameters and J are differentiated)
    R0 = jnp.broadcast_to(p.state0.R, (bodies, 3, 3)).astype(dtype)
    Pi0 = (p.state0.Pi * jnp.linspace(0.5, 2.0, bodies)[:, None]).astype(dtype)

    def loss(J, Pi, dt, executor):
        prob = jaxrot.Problem(jaxrot.RigidBody(J), torque or p.torque, p.state0, 1.0)
        tr = jaxrot.simulate(method, prob, dt, n, state0=jaxrot.State(R0, Pi), saveat=jaxrot.SaveAt(steps=every),
                             executor=executor)
        return jnp.sum(tr.states.R[..., 2, :] * jnp.array([1.0, 2.0, 3.0], dtype)) + 1e-3 * jnp.sum(tr.states.Pi ** 2)

    return loss, (jnp.asarray(p.body.J, dtype), Pi0, jnp.asarray(2e-3, dtype))


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


@pytest.mark.parametrize("method", ["rk4", "buss2p"])  # (the frames as checkpoints; every step's state kept)
def test_float32_derivatives_in_the_kernels_equal_the_xla_loops(method, calls):
    loss, (J, Pi, dt) = _loss(method, dtype=jnp.float32)
    got, want = (jax.grad(loss, argnums=(0, 1))(J, Pi, dt, ex) for ex in (jaxrot.Fused(), jaxrot.XLA()))
    assert calls["vjp"] == 1
    for a, b in zip(got, want):  # (two programs rounding apart at float32: a few of its roundings)
        assert a.dtype == jnp.float32 and _rel(a, b) < 1e-5, (_rel(a, b), a, b)
    dJ = jnp.array([1.0, -0.5, 0.25], jnp.float32)
    got, want = (jax.jvp(lambda J: loss(J, Pi, dt, ex), (J,), (dJ,))[1] for ex in (jaxrot.Fused(), jaxrot.XLA()))
    assert calls["jvp"] == 1 and got.dtype == jnp.float32 and abs(got - want) <= 1e-5 * abs(want)


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
    # the step's length alone: its tangents are the reference loop's, no run carries tangents
    got, want = (jax.jvp(lambda dt: loss(J, Pi, dt, ex), (dt,), (jnp.ones_like(dt),))[1]
                 for ex in (jaxrot.Fused(), jaxrot.XLA()))
    assert calls["jvp"] == 2 and abs(got - want) <= 1e-10 * abs(want)


def test_a_derivative_of_forward_mode_is_the_xla_loops(calls):
    """``jax.jacfwd`` of ``jax.jvp`` (a Hessian-vector product) of a fused run: the kernels' tangents have no
    derivative of their own, so the inner tangents are the XLA loop's: equal to the XLA executor's."""
    loss, (J, Pi, dt) = _loss("rk4")
    v = jnp.array([1.0, -0.5, 0.25])

    def hvp(executor):
        return jax.jacfwd(lambda J: jax.jvp(lambda J: loss(J, Pi, dt, executor), (J,), (v,))[1])(J)

    np.testing.assert_allclose(hvp(jaxrot.Fused()), hvp(jaxrot.XLA()), rtol=1e-10)
    # a mixed one: the outer derivative in J, the inner in the initial momenta (each input once)
    mixed = [jax.jacfwd(lambda J: jax.jvp(lambda P: loss(J, P, dt, ex), (Pi,), (jnp.ones_like(Pi),))[1])(J)
             for ex in (jaxrot.Fused(), jaxrot.XLA())]
    np.testing.assert_allclose(*mixed, rtol=1e-10)
    assert calls["jvp"] == 0


@pytest.mark.slow  # two second-order derivatives of an eighth-order pair's while loop compile for 40 s
def test_a_derivative_of_forward_mode_with_error_control_is_the_xla_loops(calls):
    """:func:`test_a_derivative_of_forward_mode_is_the_xla_loops` with error control."""
    _, (J, Pi, _) = _loss("rk4")
    v = jnp.array([1.0, -0.5, 0.25])

    def adaptive(J, executor):
        p = jaxrot.problems.get("fast_top")
        prob = jaxrot.Problem(jaxrot.RigidBody(J), p.torque, p.state0, 1.0)
        tr = jaxrot.simulate("rkmk8(5)", prob, t1=0.2, state0=jaxrot.State(jnp.broadcast_to(p.state0.R, Pi.shape + (3,)),
                                                                            Pi),
                             stepsize=jaxrot.Adaptive(1e-8, 1e-8), executor=executor)
        return jnp.sum(tr.final.R[..., 2, :] * jnp.array([1.0, 2.0, 3.0]))

    got, want = (jax.jacfwd(lambda J: jax.jvp(lambda J: adaptive(J, ex), (J,), (v,))[1])(J)
                 for ex in (jaxrot.Fused(), jaxrot.XLA()))
    np.testing.assert_allclose(got, want, rtol=1e-10)
    assert calls["jvp"] == 0


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


@pytest.mark.parametrize("method, driven", [("rk4", False), ("buss2p", False), ("rk4", True)])
def test_frames_are_the_checkpoints_where_every_step_does_not_fit(method, driven, calls, strides, monkeypatch):
    """A record budget that holds the frames and one stretch of steps between two of them but not every
    step's start: the backward pass steps each stretch again from its frame (buss2p: its memory too; a
    torque that changes with time: each step at its own time), equal to the XLA executor's; forward
    mode, which carries its tangents, needs no record."""
    # (a step count of its own: programs traced by the other tests are kept with the record they chose)
    n = (4 if driven else 3) * N
    monkeypatch.setattr(adaptive_backward, "RECORD_BYTES", 26 * n * B * 8 - 1)
    loss, (J, Pi, dt) = _loss(method, n, jaxrot.Torque(_driven, args=jnp.asarray(0.5)) if driven else None)
    got = jax.grad(loss, argnums=(0, 1))(J, Pi, dt, jaxrot.Fused())
    want = jax.grad(loss, argnums=(0, 1))(J, Pi, dt, jaxrot.XLA())
    for a, b in zip(got, want):
        assert _rel(a, b) < 1e-10, (_rel(a, b), a, b)
    dJ = jnp.array([1.0, -0.5, 0.25])
    got = jax.jvp(lambda J: loss(J, Pi, dt, jaxrot.Fused()), (J,), (dJ,))[1]
    want = jax.jvp(lambda J: loss(J, Pi, dt, jaxrot.XLA()), (J,), (dJ,))[1]
    assert abs(got - want) <= 1e-10 * abs(want)
    assert strides == [EVERY] and calls == {"vjp": 1, "jvp": 1}


@pytest.mark.parametrize("method, stride", [("rk4", EVERY), ("buss2p", 1)])
def test_the_frames_are_the_checkpoints_but_for_a_memory(method, stride, strides):
    """Where both fit, the frames are the checkpoints (nothing written per step), but for a method that
    carries a memory, whose record keeps every step's start."""
    loss, (J, Pi, dt) = _loss(method, 5 * N)  # (a step count of its own: see above)
    jax.grad(loss)(J, Pi, dt, jaxrot.Fused())
    assert strides == [stride]


@pytest.mark.parametrize("method", ["rk4", "buss2p"])
def test_a_batch_cut_into_slices_walks_back_each_slices_bodies(method, monkeypatch):
    """A batch large enough to be cut into slices on a CPU's cores: each slice's backward pass reads its
    own bodies' records and initial states, equal to the XLA executor's."""
    from jaxrot.kernels import host_threads

    if jax.default_backend() != "cpu" or host_threads.cores() < 2:
        pytest.skip("slices are cut on a CPU of two cores or more")
    cuts = []
    real = host_threads.launch_in_slices
    monkeypatch.setattr(host_threads, "launch_in_slices", lambda k, n, *a: cuts.append((k.key, n)) or real(k, n, *a))
    loss, (J, Pi, dt) = _loss(method, 7 * N, bodies=64)  # (a step count of its own: see above)
    got, want = (jax.grad(loss, argnums=(0, 1))(J, Pi, dt, ex) for ex in (jaxrot.Fused(), jaxrot.XLA()))
    assert any(key.startswith("backward_") and n > 1 for key, n in cuts), cuts
    for a, b in zip(got, want):
        assert _rel(a, b) < 1e-10, (_rel(a, b), a, b)


def test_every_step_saved_is_every_steps_checkpoint(strides):
    """Every step saved: each frame is the next step's start (no step stepped again), the first the
    initial state."""
    loss, (J, Pi, dt) = _loss("rk4", 6 * N, every=1)  # (a step count of its own: see above)
    got, want = (jax.grad(loss, argnums=(0, 1))(J, Pi, dt, ex) for ex in (jaxrot.Fused(), jaxrot.XLA()))
    assert strides == [1]
    for a, b in zip(got, want):
        assert _rel(a, b) < 1e-10, (_rel(a, b), a, b)


def test_forward_mode_of_no_bodies():
    """A batch of no bodies differentiated in forward mode: empty tangents, no launch."""
    from jaxrot import kernels
    from jaxrot.driver.executors.fused import xla_frames

    p, m = jaxrot.problems.get("fast_top"), jaxrot.integrators.get("rk4")
    s0 = jaxrot.State(jnp.zeros((0, 3, 3)), jnp.zeros((0, 3)))

    def frames(Pi):
        return kernels.fused_frames(m, p.system, jaxrot.State(s0.R, Pi), jnp.asarray(1e-3), jnp.asarray(0.0), 2, 3,
                                    reference=xla_frames, derivative="jvp")[1]

    assert jax.jacfwd(frames)(s0.Pi).shape == (0, 2, 3, 0, 3)


@pytest.mark.parametrize("method", ["rk4", "buss2p"])
def test_reverse_mode_of_no_steps(method):
    """A run of no steps differentiated in reverse mode: nothing for the kernels to walk back (the
    reference's derivative: zeros)."""
    from jaxrot import kernels
    from jaxrot.driver.executors.fused import xla_frames

    p, m = jaxrot.problems.get("fast_top"), jaxrot.integrators.get(method)
    R0 = jnp.broadcast_to(p.state0.R, (3, 3, 3))

    def loss(Pi):
        out = kernels.fused_frames(m, p.system, jaxrot.State(R0, Pi), jnp.asarray(1e-3), jnp.asarray(0.0), 0, 3,
                                   reference=xla_frames, derivative="vjp")
        return jnp.sum(out[1] ** 2)

    g = jax.grad(loss)(jnp.ones((3, 3)))
    assert g.shape == (3, 3) and not np.any(np.asarray(g))


def test_a_memory_holding_an_integer_carries_tangents_for_its_numbers(calls):
    """abm keeps a count of the steps done (an int32) beside its past slopes: the count carries no
    tangent, the slopes do; forward mode runs in the kernels and equals the XLA executor's."""
    loss, (J, Pi, dt) = _loss("abm")
    dJ = jnp.array([1.0, -0.5, 0.25])
    got = jax.jvp(lambda J: loss(J, Pi, dt, jaxrot.Fused()), (J,), (dJ,))[1]
    want = jax.jvp(lambda J: loss(J, Pi, dt, jaxrot.XLA()), (J,), (dJ,))[1]
    assert calls["jvp"] == 1 and abs(got - want) <= 1e-10 * abs(want)
