"""Reverse mode of fused error-controlled runs in the kernels (jaxrot.kernels.adaptive_backward): each
body's accepted steps replayed backwards through the step derivative generated from the pair's JAX
code, against the XLA loop's derivatives (the oracle)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import kernels

from .helpers import user_pair

pytestmark = pytest.mark.skipif(not kernels.have_warp(), reason="needs NVIDIA Warp (the fast extra)")

P = jaxrot.problems.get("fast_top")


def _batch(B, seed=0):
    rng = np.random.default_rng(seed)
    R = jax.vmap(jaxrot.so3.exp)(jnp.asarray(rng.normal(size=(B, 3)) * 0.6))
    Pi = jnp.asarray(np.asarray(P.state0.Pi) * rng.uniform(0.5, 2.0, (B, 1)))
    return jaxrot.State(R, Pi)


def _spy(monkeypatch):
    from jaxrot.kernels import adaptive_backward

    calls = []
    real = adaptive_backward.backward

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(adaptive_backward, "backward", spy)
    return calls


def _rel(a, b):
    return float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b)))


def _loss(pair, ts, executor, adjoint=None, tol=1e-9, max_steps=100_000, t1=1.0):
    def loss(J, R0, Pi0):
        q = jaxrot.Problem(jaxrot.RigidBody(J), P.torque, P.state0, 1.0)
        tr = jaxrot.simulate(pair, q, t1=t1, state0=jaxrot.State(R0, Pi0),
                             stepsize=jaxrot.Adaptive(tol, tol, max_steps=max_steps),
                             saveat=jaxrot.SaveAt(t0=False, ts=ts), executor=executor, adjoint=adjoint)
        return (jnp.sum(tr.states.R[..., 2, :] * jnp.array([1.0, 2.0, 3.0], tr.states.R.dtype))
                + 1e-2 * jnp.sum(tr.states.Pi ** 2 * jnp.arange(1, tr.states.Pi.shape[-2] + 1, dtype=tr.states.Pi.dtype)[:, None]))
    return loss


def test_gradient_in_the_kernels_equals_the_xla_loops(monkeypatch):
    """A batch of 70 (launched sorted, in slices), three save times: the derivatives with respect to the
    moments and both parts of the initial states equal the XLA executor's to 1e-9, computed in the
    kernels (jax.jit around jax.grad, as a fit calls it)."""
    calls = _spy(monkeypatch)
    S = _batch(70)
    ts = jnp.asarray([0.1, 0.25, 0.4])  # (a short span: the XLA loop's reverse pass of 70 bodies takes seconds)
    args = (P.body.J, S.R, S.Pi)
    g = jax.jit(jax.grad(_loss("rkmk8(5)", ts, jaxrot.Fused(), t1=0.4), argnums=(0, 1, 2)))(*args)
    assert calls, "the fused run's gradient did not come from the kernels"
    gx = jax.grad(_loss("rkmk8(5)", ts, jaxrot.XLA(), t1=0.4), argnums=(0, 1, 2))(*args)
    for a, b in zip(g, gx):
        assert _rel(a, b) <= 1e-9


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="on a GPU the automatic choice takes the fused adaptive "
                    "kernel from FUSED_ADAPTIVE_MIN_BODIES_GPU bodies, plain call or derivative alike")
def test_default_path_under_jit_and_grad_is_the_fused_kernels(monkeypatch):
    """The automatic choice, inside jax.jit around jax.value_and_grad, runs the kernels both ways
    (decided from shapes and options, not values), and agrees with the XLA executor."""
    calls = _spy(monkeypatch)
    S = _batch(8, seed=1)
    ts = jnp.asarray([1.0])
    f = jax.jit(jax.value_and_grad(_loss("rkmk8(5)", ts, None), argnums=(0, 2)))
    v, g = f(P.body.J, S.R, S.Pi)
    assert calls
    vx, gx = jax.value_and_grad(_loss("rkmk8(5)", ts, jaxrot.XLA()), argnums=(0, 2))(P.body.J, S.R, S.Pi)
    assert abs(float(v - vx)) <= 1e-10 * abs(float(vx))
    for a, b in zip(g, gx):
        assert _rel(a, b) <= 1e-9


def test_save_time_derivative_is_the_reference_loops():
    """The last step's length moves with a differentiated save time: that derivative (from the XLA loop,
    inside the same custom rule) equals the XLA executor's."""
    S = _batch(4, seed=2)
    pair = user_pair()  # (a cheap pair: what is tested is the rule's plumbing, not the pair)

    def loss(t1, ex):
        tr = jaxrot.simulate(pair, P, t1=t1, state0=S, stepsize=jaxrot.Adaptive(1e-9, 1e-9), executor=ex)
        return jnp.sum(tr.final.Pi * jnp.array([1.0, 2.0, 3.0]))

    g, gx = (jax.grad(loss)(1.0, ex) for ex in (jaxrot.Fused(), jaxrot.XLA()))
    assert abs(float(g - gx)) <= 1e-9 * abs(float(gx)) and abs(float(gx)) > 1e-3


def test_a_record_too_small_for_the_steps_taken_fails_with_the_remedy(monkeypatch):
    """A batch whose record (512 MiB by default) holds fewer steps than a body takes."""
    from jaxrot.kernels import adaptive_derivatives

    monkeypatch.setattr(adaptive_derivatives, "record_layout", lambda *a: 5)
    # (a batch of its own: a program traced by another test at these shapes keeps the record it chose)
    S = _batch(11, seed=3)
    loss = _loss("rkmk8(5)", jnp.asarray([1.0]), jaxrot.Fused())
    with pytest.raises(Exception, match="accepted more steps than the 5 its gradient's record holds: pass "
                                        r"adjoint=jaxrot.RecursiveCheckpointAdjoint\(checkpoints=N\)"):
        jax.block_until_ready(jax.grad(loss)(P.body.J, S.R, S.Pi))


def test_the_record_layout_of_checkpoints():
    """Without checkpoints every step's state; with C of them the times of T steps (max_steps, or what
    the budget holds at 2 numbers a step) and every ceil(T / C)-th state, C or fewer."""
    from jaxrot.kernels.adaptive_backward import RECORD_BYTES, record_layout

    assert record_layout(10, 600, 8) == 600
    assert record_layout(10, 600, 8, 7) == (600, 7)  # every 86th state: 7 of them
    assert record_layout(10, 600, 8, 599) == (600, 300)  # every 2nd
    assert record_layout(10, 600, 8, 1000) == (600, 600)  # every step's: nothing recomputed
    budget = RECORD_BYTES // (10**4 * 2 * 8)
    assert record_layout(10**4, 10**5, 8) == RECORD_BYTES // (10**4 * 13 * 8)
    T, C = record_layout(10**4, 10**5, 8, 100)
    assert T == budget and C <= 100 and C * -(-T // C) >= T


@pytest.mark.parametrize("pair, max_steps", [("rkmk8(5)", 600), ("buss4(3)", 2500)])
def test_checkpoints_recompute_the_states_between_them(monkeypatch, pair, max_steps):
    """With checkpoints=7 (of 175 to 2 200 accepted steps) the record keeps every ceil(max_steps / 7)-th
    state and the backward pass steps the states between them again (buss4(3): its memory too): the
    derivatives equal those taken from every step's state."""
    from jaxrot.kernels import adaptive_backward

    strides = []
    real = adaptive_backward.backward
    monkeypatch.setattr(adaptive_backward, "backward", lambda *a: strides.append(a[2].stride) or real(*a))
    S = _batch(5)
    ts = jnp.asarray([0.25, 0.6, 1.0])
    primals = (P.body.J, S.R, S.Pi)

    def derivative(adjoint):
        return jax.grad(_loss(pair, ts, jaxrot.Fused(), adjoint, max_steps=max_steps), argnums=(0, 1, 2))(*primals)

    whole = derivative(jaxrot.RecursiveCheckpointAdjoint())
    kept = derivative(jaxrot.RecursiveCheckpointAdjoint(checkpoints=7))
    assert strides == [1, -(-max_steps // 7)]
    for a, b in zip(kept, whole):
        assert _rel(a, b) <= 1e-12


def test_forward_mode_needs_no_record(monkeypatch):
    """Tangents carried in the run: a record budget too small for the steps taken (where a gradient
    fails, above) does not matter."""
    from jaxrot.kernels import adaptive_derivatives

    monkeypatch.setattr(adaptive_derivatives, "record_layout", lambda *a: 5)
    calls = _carried(monkeypatch)
    S = _batch(13, seed=3)  # (a batch of its own, as above)
    loss, loss_x = (_loss("rkmk8(5)", jnp.asarray([1.0]), ex) for ex in (jaxrot.Fused(), jaxrot.XLA()))
    d = jax.jvp(lambda J: loss(J, S.R, S.Pi), (P.body.J,), (jnp.ones(3),))[1]
    assert calls
    assert _rel(d, jax.jvp(lambda J: loss_x(J, S.R, S.Pi), (P.body.J,), (jnp.ones(3),))[1]) <= 1e-9


def test_float32_gradient_in_the_kernels(monkeypatch):
    S = _batch(6, seed=4)
    S32 = jax.tree_util.tree_map(lambda x: x.astype(jnp.float32), S)
    J32 = P.body.J.astype(jnp.float32)
    ts = jnp.asarray([1.0], jnp.float32)
    pair = user_pair()
    # (tolerances at float32's floor for this run, about 1e-4: below it the library warns. The two
    # executors round differently and may accept different steps, so their derivatives agree to the
    # solver's tolerance times the loss's sensitivity, not to a few roundings: 10 tol)
    g = jax.grad(_loss(pair, ts, jaxrot.Fused(), tol=1e-4), argnums=(0, 2))(J32, S32.R, S32.Pi)
    gx = jax.grad(_loss(pair, ts, jaxrot.XLA(), tol=1e-4), argnums=(0, 2))(J32, S32.R, S32.Pi)
    assert all(a.dtype == jnp.float32 for a in g)
    for a, b in zip(g, gx):
        assert _rel(a, b) <= 1e-3
    # forward mode too: the tangents carried in the float32 run
    calls = _carried(monkeypatch)
    dJ = jnp.ones(3, jnp.float32)
    d, dx = (jax.jvp(lambda J: _loss(pair, ts, ex, tol=1e-4)(J, S32.R, S32.Pi), (J32,), (dJ,))[1]
             for ex in (jaxrot.Fused(), jaxrot.XLA()))
    assert calls and d.dtype == jnp.float32 and _rel(d, dx) <= 1e-3




def test_a_users_pair_is_differentiated_in_the_kernels(monkeypatch):
    """A pair written in a user's file: its step derivative generated like its step, no line of Warp."""
    calls = _spy(monkeypatch)
    pair = user_pair()
    S = _batch(5, seed=5)
    ts = jnp.asarray([0.5, 1.0])
    g = jax.grad(_loss(pair, ts, jaxrot.Fused(), tol=1e-7), argnums=(0, 2))(P.body.J, S.R, S.Pi)
    assert calls
    gx = jax.grad(_loss(pair, ts, jaxrot.XLA(), tol=1e-7), argnums=(0, 2))(P.body.J, S.R, S.Pi)
    for a, b in zip(g, gx):
        assert _rel(a, b) <= 1e-9


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_a_pair_that_carries_memory_is_differentiated_in_the_kernels(monkeypatch, mode):
    """buss4(3) carries the world momentum from step to step: the kernels follow it along the recorded
    steps (its update and its start generated too), in both modes, equal to the XLA executor's."""
    calls = _spy(monkeypatch)
    carried = _carried(monkeypatch)
    S = _batch(66, seed=8)
    ts = jnp.asarray([0.5, 1.0])

    def derivative(executor):
        if mode == "reverse":
            return jax.grad(_loss("buss4(3)", ts, executor, tol=1e-7), argnums=(0, 1, 2))(P.body.J, S.R, S.Pi)
        # forward mode: one tangent of everything (jacfwd would take one run per number)
        loss = _loss("buss4(3)", ts, executor, jaxrot.ForwardMode(), tol=1e-7)
        rng = np.random.default_rng(9)
        tangent = tuple(jnp.asarray(rng.normal(size=np.shape(x))) for x in (P.body.J, S.R, S.Pi))
        return jax.jvp(loss, (P.body.J, S.R, S.Pi), tangent)

    g = derivative(jaxrot.Fused())
    assert calls if mode == "reverse" else carried
    for a, b in zip(g, derivative(jaxrot.XLA())):
        assert _rel(a, b) <= 1e-9


def test_forward_mode_keeps_the_tangents_of_accepted_attempts_only(monkeypatch):
    """A first trial step far too long: the run rejects attempts, whose tangents the carried memory
    drops with them; the tangents equal the XLA executor's, and the run's own values the plain run's."""
    carried = _carried(monkeypatch)
    S = _batch(5, seed=13)
    primals = (P.body.J, S.R, S.Pi)
    tangent = tuple(jnp.asarray(np.random.default_rng(14).normal(size=np.shape(x))) for x in primals)

    def run(J, R0, Pi0, executor):
        q = jaxrot.Problem(jaxrot.RigidBody(J), P.torque, P.state0, 1.0)
        return jaxrot.simulate("rkmk8(5)", q, 0.9, t1=1.0, state0=jaxrot.State(R0, Pi0), executor=executor,
                               stepsize=jaxrot.Adaptive(1e-9, 1e-9), adjoint=jaxrot.ForwardMode())

    plain = run(*primals, jaxrot.Fused())
    assert int(jnp.min(plain.controller.n_rejected)) >= 2
    out, d = jax.jvp(lambda *a: run(*a, jaxrot.Fused()).final, primals, tangent)
    assert carried
    _, dx = jax.jvp(lambda *a: run(*a, jaxrot.XLA()).final, primals, tangent)
    assert _rel(d.R, dx.R) <= 1e-9 and _rel(d.Pi, dx.Pi) <= 1e-9
    assert jnp.array_equal(out.R, plain.final.R) and jnp.array_equal(out.Pi, plain.final.Pi)


def test_pairs_whose_steps_write_out_alike_keep_their_own_controllers(monkeypatch):
    """Two pairs whose attempts with tangents write out alike but whose controllers differ (another
    error order): each run under jax.jvp accepts its own plain run's steps (its values equal them),
    and jax.jacfwd over no direction at all gives an empty Jacobian."""
    calls = _carried(monkeypatch)
    base = user_pair()

    class Other(type(base)):
        def error_order(self):
            return base.error_order() + 1

    S = _batch(3, seed=16)
    for pair in (base, Other()):
        def run(J, pair=pair):
            q = jaxrot.Problem(jaxrot.RigidBody(J), P.torque, P.state0, 1.0)
            return jaxrot.simulate(pair, q, t1=1.0, state0=S, stepsize=jaxrot.Adaptive(1e-7, 1e-7),
                                   executor=jaxrot.Fused(), adjoint=jaxrot.ForwardMode()).final.Pi

        out, _ = jax.jvp(run, (P.body.J,), (jnp.ones(3),))
        assert jnp.array_equal(out, run(P.body.J))
    assert len(calls) == 2
    assert jax.jacfwd(lambda x: run(P.body.J + jnp.sum(x)))(jnp.zeros((0,))).shape == (3, 3, 0)


def test_tangents_in_a_pairs_own_arrays_are_the_xla_loops(monkeypatch):
    """A pair holding an array of its own, differentiated in it: the kernels carry no tangent of a
    pair's arrays, so the automatic choice takes the XLA loop, whose tangents are right."""
    from jaxrot import StepStats
    from jaxrot.integrators import AbstractPair
    from jaxrot.physics.flow import pack_body

    class Scaled(AbstractPair):  # Lie-Heun with its gyroscopic term scaled by c
        c: jax.Array
        order = 2

        def error_order(self):
            return 1

        def step_with_error(self, system, t, state, aux, h):
            def rates(R, Pi, t):
                Om = Pi / system.body.J
                return Om, jnp.cross(Pi, Om) * self.c + R.T @ system.torque(t, R, Pi)
            K1, F1 = rates(state.R, state.Pi, t)
            R1, Pi1 = state.R @ jaxrot.so3.exp(h * K1), state.Pi + h * F1
            K2, F2 = rates(R1, Pi1, t + h)
            R2, Pi2 = state.R @ jaxrot.so3.exp(0.5 * h * (K1 + K2)), state.Pi + 0.5 * h * (F1 + F2)
            return jaxrot.State(R2, Pi2), aux, StepStats.explicit(), pack_body(R2, Pi2) - pack_body(R1, Pi1)

    calls = _carried(monkeypatch)
    S = _batch(3, seed=17)

    def final(c, executor):
        return jaxrot.simulate(Scaled(c), P, t1=0.2, state0=S, stepsize=jaxrot.Adaptive(1e-6, 1e-6),
                               executor=executor, adjoint=jaxrot.ForwardMode()).final.Pi

    d, dx = (jax.jvp(lambda c: final(c, ex), (jnp.asarray(1.0),), (jnp.asarray(1.0),))[1]
             for ex in (None, jaxrot.XLA()))
    assert not calls and _rel(d, dx) <= 1e-12 and float(jnp.max(jnp.abs(dx))) > 0


@pytest.mark.parametrize("pair", [True, False], ids=["attempt", "constant step"])
def test_the_tangents_an_attempt_carries_are_checked_against_jax(monkeypatch, pair):
    """The generated attempt (step) that carries tangents is compared with JAX on its memory too: given
    memories whose tangents differ from those JAX is given (by 1e-6), it is refused, naming the memory."""
    import numpy as np

    from jaxrot.kernels import adaptive_tangents, generate, generate_checks

    method = user_pair() if pair else jaxrot.integrators.get("rk4")
    assert adaptive_tangents.carried_reason(method, P.system, jnp.float64, pair) is None
    monkeypatch.setattr(generate, "_LOWERED", {})
    monkeypatch.setattr(generate_checks, "_CHECKED" if not pair else "_CHECKED_PAIRS", {})
    monkeypatch.setenv("JAXROT_KEEP_CHECKS", "off")
    real = adaptive_tangents.check_memory

    def moved(*a):
        A0, memory = real(*a)
        return A0 + np.where(np.arange(A0.shape[1]) < A0.shape[1] - 1, 1e-6, 0.0), memory

    monkeypatch.setattr(adaptive_tangents, "check_memory", moved)
    why = adaptive_tangents.carried_reason(method, P.system, jnp.float64, pair)
    assert why is not None and "differs from the JAX code" in why and "(memory:" in why, why


def test_generated_step_derivatives_equal_jax():
    """The restated derivatives (the step's, its memory's start and update) are checked against JAX
    before use (lower_vjp raises where they disagree)."""
    from jaxrot.kernels import generate_vjp

    pair = jaxrot.integrators.get("buss4(3)")
    low = generate_vjp.lower_vjp(pair, P.system, jnp.float64, True)
    assert (low.n_flat, low.n_mem) == (3, 3)


def _carried(monkeypatch):
    """The runs that carried their tangents (:mod:`jaxrot.kernels.adaptive_tangents`), counted."""
    from jaxrot.kernels import adaptive_tangents

    calls = []
    real = adaptive_tangents.tangent_outputs
    monkeypatch.setattr(adaptive_tangents, "tangent_outputs", lambda *a: calls.append(1) or real(*a))
    return calls


def test_forward_mode_in_the_kernels_equals_the_xla_loops(monkeypatch):
    """Forward mode: the tangents carried beside the states in one run, through the attempt's
    Jacobian-vector product generated from the pair's JAX code (a sorted batch of 70, two save times),
    equal the XLA executor's; jax.jacfwd (a run per direction) equals the tangents along each direction."""
    calls = _carried(monkeypatch)
    S = _batch(70, seed=6)
    ts = jnp.asarray([0.4, 1.0])
    fwd = jaxrot.ForwardMode()
    # one tangent of everything, against the XLA executor's
    rng = np.random.default_rng(10)
    primals = (P.body.J, S.R, S.Pi)
    tangent = tuple(jnp.asarray(rng.normal(size=np.shape(x))) for x in primals)
    d, dx = (jax.jvp(_loss("rkmk8(5)", ts, ex, fwd), primals, tangent)[1] for ex in (None, jaxrot.XLA()))
    assert calls, "the tangents did not come from the kernels"
    assert _rel(d, dx) <= 1e-9
    # jacfwd in the three moments (a run per direction) equals the tangents along each
    g = jax.jacfwd(_loss("rkmk8(5)", ts, None, fwd))(*primals)
    along = [jax.jvp(lambda J: _loss("rkmk8(5)", ts, None, fwd)(J, S.R, S.Pi), (P.body.J,), (e,))[1]
             for e in jnp.eye(3, dtype=P.body.J.dtype)]
    assert _rel(g, jnp.stack(along)) <= 1e-12
    # a save time's tangent (the reference's, inside the same rule; a cheap pair)
    pair = user_pair()

    def final(t1, ex):
        tr = jaxrot.simulate(pair, P, t1=t1, state0=_batch(3, seed=7), stepsize=jaxrot.Adaptive(1e-9, 1e-9),
                             executor=ex, adjoint=fwd)
        return tr.final.Pi
    d, dx = (jax.jvp(lambda t: final(t, ex), (1.0,), (1.0,))[1] for ex in (jaxrot.Fused(), jaxrot.XLA()))
    assert _rel(d, dx) <= 1e-9


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_where_the_kernels_cannot_differentiate_the_xla_loop_does(monkeypatch, mode):
    """The choice is made only when a derivative is taken (a plain run restates none); where the step's
    derivative cannot be generated, the same custom rule takes the XLA loop's derivatives."""
    from jaxrot.kernels import adaptive, adaptive_tangents

    asked = []
    monkeypatch.setattr(adaptive, "backward_reason", lambda *a, **k: asked.append(1) or "not restated (test)")
    monkeypatch.setattr(adaptive_tangents, "carried_reason", lambda *a, **k: asked.append(1) or "not carried (test)")
    calls = _spy(monkeypatch) if mode == "reverse" else _carried(monkeypatch)
    S = _batch(4, seed=11)
    ts = jnp.asarray([1.0])
    pair = user_pair()
    jaxrot.simulate(pair, P, t1=1.0, state0=S, stepsize=jaxrot.Adaptive(1e-8, 1e-8), executor=jaxrot.Fused())
    assert not asked
    adjoint = None if mode == "reverse" else jaxrot.ForwardMode()
    diff = jax.grad if mode == "reverse" else jax.jacfwd
    g, gx = (diff(_loss(pair, ts, ex, adjoint, tol=1e-8))(P.body.J, S.R, S.Pi)
             for ex in (jaxrot.Fused(), jaxrot.XLA()))
    assert asked and not calls
    assert _rel(g, gx) <= 1e-9


def test_a_failed_run_under_grad_raises_its_failure():
    """A fused run that uses up max_steps under jax.grad raises the run's own error, as the plain call
    does (its flags may come back concrete and its result codes traced)."""
    S = _batch(3, seed=3)
    loss = _loss("rkmk8(5)", jnp.asarray([1.0]), jaxrot.Fused(), max_steps=50)
    with pytest.raises(jaxrot.SimulationError, match="used up max_steps"):
        jax.block_until_ready(jax.grad(loss)(P.body.J, S.R, S.Pi))
