"""The fused kernels (jaxrot.kernels), generated from the JAX methods' own code, against those methods.

Every (method, torque) pair of the kernel registry (the enrolled methods) is compared with a plain ``vmap`` of a ``lax.scan``
over ``method.step``, in float64 (1e-13 relative after 1000 steps, a few roundings after one; euler_quat
5e-12, see its registry line) and float32 (1000 steps at about one
float32 rounding, 1.2e-7, each: 1000 * eps32 = 1.2e-4 relative; measured: 1e-7 to 7e-6, up to 5.2e-5 for
the _ep kernels; float64: at most 7e-15, 3.4e-14 for the DMV and _ep kernels).
Warp compiles each kernel once per (method, torque, dtype) and caches the machine code on disk
(about 0.2-1.5 s per kernel the first time; 62 (method, torque) pairs in the table, each in both precisions).
"""

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jaxrot
from jaxrot import integrators, problems
from jaxrot import kernels
from jaxrot.kernels import generate
from jaxrot.driver import replay

from .helpers import subprocess_env

pytestmark = pytest.mark.skipif(not kernels.have_warp(), reason="needs warp-lang (the fast extra)")



def _plain_function_problem():
    """A torque written as a plain function with parameters (kind "user": restated from its jaxpr):
    damping of the world rate, periodic forcing and a pull of the body's third axis towards +z."""
    J = jnp.array([4.6, 4.3, 1.8])

    def fn(t, R, Pi, a):
        up = jnp.array([0.0, 0.0, 1.0], R.dtype)
        return -a["c"] * (R @ (Pi / J.astype(Pi.dtype))) + jnp.sin(2.0 * t) * a["e"] - 5.0 * jnp.cross(R[:, 2], up)

    torque = jaxrot.Torque(fn, args={"c": jnp.asarray(0.1), "e": jnp.array([0.0, 0.6, 0.8])})
    body = jaxrot.RigidBody(J)
    return jaxrot.Problem(body, torque, jaxrot.State(jnp.eye(3), jnp.array([0.5, -3.0, 2.0])), t_end=1.0)


PROBLEM_OF = {"free": "free_body_mz", "gravity": "fast_top", "poly": "buss_torqued",
              "gravity_gradient": "gravity_gradient", "user": _plain_function_problem}
CASES = [(name, torque) for name, entry in kernels.KERNELS.items() for torque in entry.torques]
# The splittings' six axis orderings are one kernel generator with the axes permuted: the default run
# compares the 2-3-1 family and split2_123_ep (as the generic tests, tests/helpers.py), the slow tier
# every ordering (each is its own Warp compilation, 1-3 s on an empty kernel cache).
_SPLIT_SIBLING = {n for n, _ in CASES if n.startswith("split") and "_231" not in n and n != "split2_123_ep"}
CASE_PARAMS = [pytest.param(n, t, id=f"{n}-{t}", marks=[pytest.mark.slow] if n in _SPLIT_SIBLING else [])
               for n, t in CASES]
# float32 is the same generator at the other scalar type: the default run compares it with each
# method's first torque (the torque code's float32 instances with rkmk8's at large steps below), the
# slow tier with every torque
DTYPE_CASES = [pytest.param(*p.values, dt, id=f"{p.id}-{dt_id}",
                            marks=[*p.marks, *([pytest.mark.slow] if dt_id == "f32" and p.values[1] !=
                                               kernels.KERNELS[p.values[0]].torques[0] else [])])
               for p in CASE_PARAMS for dt, dt_id in ((jnp.float64, "f64"), (jnp.float32, "f32"))]
F32_RTOL = 1000 * float(np.finfo(np.float32).eps)


def reference(method, system, states0, dt, t0, n_frames, save_every, *, first_step=False):
    """The JAX run the kernels restate, with fused_frames' outputs (and, with ``first_step``, the
    state after the first step, ``(R, Pi)``, from the same run)."""

    def one(s):
        def body(c, j):
            state, aux, failed = c
            state, aux, _ = method.step(system, t0 + j.astype(dt.dtype) * dt, state, aux, dt)
            bad = (failed < 0) & ~jnp.isfinite(jnp.sum(state.Pi))
            return (state, aux, jnp.where(bad, j + 1, failed)), state

        c0 = (s, method.init(system, t0, s, dt), jnp.asarray(-1, jnp.int32))
        (_, _, failed), states = lax.scan(body, c0, jnp.arange(n_frames * save_every, dtype=jnp.int32))
        keep = slice(save_every - 1, None, save_every)
        out = states.R[keep], states.Pi[keep], failed, jnp.where(failed < 0, 0, 2).astype(jnp.int32)
        return out + ((states.R[0], states.Pi[0]),) if first_step else out

    return jax.vmap(one)(states0)


def _cast(tree, dtype):
    return jax.tree_util.tree_map(lambda x: x.astype(dtype) if eqx_float(x) else x, tree)


def eqx_float(x):
    return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.floating)


def _setup(torque, dtype=jnp.float64, n=3, seed=0):
    p = PROBLEM_OF[torque]() if callable(PROBLEM_OF[torque]) else problems.get(PROBLEM_OF[torque])
    rng = np.random.default_rng(seed)
    R = jax.vmap(jaxrot.so3.exp)(jnp.asarray(0.5 * rng.normal(size=(n, 3))))
    Pi = p.state0.Pi * (1 + 0.1 * jnp.asarray(rng.normal(size=(n, 3))))
    states = jaxrot.State(R @ p.state0.R, Pi)
    return _cast(p.system, dtype), _cast(states, dtype)


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.max(np.abs(a - b)) / np.max(np.abs(b))


@pytest.mark.parametrize("name,torque,dtype", DTYPE_CASES)
def test_kernel_restates_the_method(name, torque, dtype):
    method = integrators.get(name)
    system, states = _setup(torque, dtype)
    assert kernels.supports(method, system)
    dt, t0 = jnp.asarray(1e-3, dtype), jnp.asarray(0.1, dtype)
    got = kernels.fused_frames(method, system, states, dt, t0, 10, 100)
    want = reference(method, system, states, dt, t0, 10, 100, first_step=True)
    assert got[0].shape == (3, 10, 3, 3) and got[1].shape == (3, 10, 3)
    assert got[0].dtype == dtype and got[2].dtype == jnp.int32 and got[3].dtype == jnp.int32
    rtol64 = kernels.KERNELS[name].rtol64  # float32: as many roundings of float32
    tol = rtol64 if dtype == jnp.float64 else max(F32_RTOL, rtol64 / np.finfo(np.float64).eps * F32_RTOL / 1000)
    assert _rel(got[0], want[0]) <= tol
    assert _rel(got[1], want[1]) <= tol
    if dtype == jnp.float64:  # one step: a few roundings (more for an ill-conditioned solve, see the registry)
        one = kernels.fused_frames(method, system, states, dt, t0, 1, 1)
        ref1 = want[4]  # the reference's first step (its own compiled run would cost a second compilation)
        tol1 = kernels.KERNELS[name].step_eps * np.finfo(np.float64).eps
        assert max(_rel(one[0][:, 0], ref1[0]), _rel(one[1][:, 0], ref1[1])) <= tol1
    np.testing.assert_array_equal(np.asarray(got[2]), -1)
    np.testing.assert_array_equal(np.asarray(got[3]), 0)


# float64 with every torque; float32 (the same code at its own series lengths) with the gravity gradient
@pytest.mark.parametrize("torque,dtype", [(t, jnp.float64) for t in kernels.KERNELS["rkmk8"].torques]
                         + [("gravity_gradient", jnp.float32)],
                         ids=[f"{t}-f64" for t in kernels.KERNELS["rkmk8"].torques] + ["gravity_gradient-f32"])
def test_rkmk8_kernel_at_large_steps(torque, dtype):
    """rkmk8's kernel takes a stage's exp and dexp^-1 coefficients from their Taylor polynomials at
    small angles and from sines and cosines beyond (the JAX method's switch): bodies spun so that one
    step turns them by 0.05 to 2.5 rad (both sides of it) agree with the JAX method after one step and
    after 20 to within 20 times what a one-rounding change of the initial momentum moves the method
    itself, plus 10 roundings (steps this large amplify roundings: up to ~400-fold after 20 steps)."""
    method = integrators.get("rkmk8")
    eps = float(np.finfo(dtype).eps)
    system, states = _setup(torque, dtype, n=6)
    angles = jnp.asarray([0.05, 0.3, 0.8, 1.2, 1.9, 2.5], dtype)
    w = jnp.linalg.norm(states.Pi / system.body.J, axis=-1)
    dt, t0 = jnp.asarray(0.1, dtype), jnp.asarray(0.1, dtype)
    states = jaxrot.State(states.R, states.Pi * (angles / (dt * w))[:, None])
    nudged = jaxrot.State(states.R, states.Pi * (1 + eps * jnp.asarray([1.0, -1.0, 1.0], dtype)))
    run = jax.jit(lambda s: reference(method, system, s, dt, t0, 2, 10, first_step=True))  # one compilation
    want, spread = run(states), run(nudged)
    one = kernels.fused_frames(method, system, states, dt, t0, 1, 1)
    got = kernels.fused_frames(method, system, states, dt, t0, 2, 10)
    # (after one step: the kernel's one-step run against the reference's first step; after 20: frames)
    for label, g, w, sp in (("one step", (one[0][:, 0], one[1][:, 0]), want[4], spread[4]),
                            ("20 steps", got[:2], want[:2], spread[:2])):
        for b in range(6):
            allowed = 20 * max(_rel(sp[0][b], w[0][b]), _rel(sp[1][b], w[1][b])) + 10 * eps
            assert max(_rel(g[0][b], w[0][b]), _rel(g[1][b], w[1][b])) <= allowed, (label, b)


def test_a_nan_flags_its_body_only():
    method = integrators.get("buss2p")
    system, states = _setup("gravity")
    states = jaxrot.State(states.R, states.Pi.at[1, 2].set(jnp.nan))
    R, Pi, failed, result = kernels.fused_frames(method, system, states, 1e-3, 0.0, 2, 5)
    np.testing.assert_array_equal(np.asarray(failed), [-1, 1, -1])
    np.testing.assert_array_equal(np.asarray(result), [0, int(jaxrot.RESULTS.nonfinite_state._value), 0])
    assert np.all(np.isfinite(np.asarray(Pi[0]))) and np.all(np.isnan(np.asarray(Pi[1])))
    # a body that overflows later is flagged at the step it happens, as the XLA loop does
    big = jaxrot.State(states.R[:1], jnp.full((1, 3), 1e155))
    want = reference(method, system, big, jnp.asarray(1.0), jnp.asarray(0.0), 4, 1)
    got = kernels.fused_frames(method, system, big, 1.0, 0.0, 4, 1)
    np.testing.assert_array_equal(np.asarray(got[2]), np.asarray(want[2]))
    np.testing.assert_array_equal(np.asarray(got[3]), np.asarray(want[3]))


# one kernel's derivative by default (the custom_jvp around fused_frames is the same for every
# kernel); buss4 (30 s compile) and buss2p with the polynomial torque in the slow tier
@pytest.mark.parametrize("name,torque", [pytest.param("buss4", "gravity", marks=pytest.mark.slow),
                                         ("rk4", "gravity"), pytest.param("buss2p", "poly", marks=pytest.mark.slow),
                                         ("rk4", "user")])
def test_gradients_come_from_the_reference(name, torque):
    method = integrators.get(name)
    system, states = _setup(torque, n=2)
    w = jnp.asarray(np.random.default_rng(1).normal(size=(2, 4, 3)))

    def loss(run, states, dt, t0, system):
        R, Pi, _, _ = run(method, system, states, dt, t0, 4, 5)
        return jnp.sum(w * Pi) + jnp.sum(R[:, :, 0, :] * w)

    fused = lambda *a: kernels.fused_frames(*a, reference=reference)  # noqa: E731
    args = (states, jnp.asarray(1e-3), jnp.asarray(0.2), system)
    g = jax.jit(jax.grad(lambda *a: loss(fused, *a), argnums=(0, 1, 2, 3)))(*args)
    h = jax.grad(lambda *a: loss(reference, *a), argnums=(0, 1, 2, 3))(*args)
    for a, b in zip(jax.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(h)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-12 * np.max(np.abs(b)))
    assert np.any(np.asarray(g[3].body.J) != 0)  # the system's leaves get gradients
    if torque == "user":  # and a plain-function torque's parameters
        assert all(np.any(np.asarray(x) != 0) for x in jax.tree_util.tree_leaves(g[3].torque.args))
    # forward mode too: a directional derivative in (states, dt) equals the reference's
    tangents = (jax.tree_util.tree_map(lambda x: 1e-2 * jnp.ones_like(x), states), jnp.asarray(1.0))
    jf = jax.jvp(lambda s, dt: loss(fused, s, dt, *args[2:]), args[:2], tangents)[1]
    jr = jax.jvp(lambda s, dt: loss(reference, s, dt, *args[2:]), args[:2], tangents)[1]
    np.testing.assert_allclose(float(jf), float(jr), rtol=1e-12)
    # the forward value under jit is the kernel's
    v = jax.jit(lambda *a: loss(fused, *a))(*args)
    np.testing.assert_allclose(float(v), float(loss(reference, *args)), rtol=1e-13)


class _FourierStep(jaxrot.integrators.AbstractIntegrator):
    """A step through values no kernel restates (an FFT's complex numbers), for the refusals."""

    order = 1

    def init(self, system, t0, state0, dt):
        return ()

    def step(self, system, t, state, aux, dt):
        return jaxrot.State(state.R, jnp.real(jnp.fft.ifft(jnp.fft.fft(state.Pi)))), aux, jaxrot.StepStats.explicit()


def test_supports_and_bad_input():
    free, _ = _setup("free")
    # a method that is not enrolled: its kernel generated the same way (tests/test_kernels_generated.py)
    assert kernels.supports(integrators.get("liemid_ea"), free) and kernels.method_name(integrators.get("liemid_ea")) is None
    assert kernels.supports("rkmk8", free) and kernels.supports("euler_svd", free)  # by name too
    assert not kernels.supports(_FourierStep(), free) and "complex128" in kernels.why_not(_FourierStep(), free)
    assert not kernels.supports(integrators.get("split4_231"), _setup("gravity")[0])  # torque-free only
    wall = problems.get("coulomb_wall").system  # a torque the method's enrolment does not name: generated too
    assert kernels.supports(integrators.get("buss2p"), wall) and kernels.hand_kernel("buss2p", wall) is None
    _, states = _setup("free")
    with pytest.raises(ValueError, match="no fused kernel"):
        kernels.fused_frames(_FourierStep(), free, states, 1e-3, 0.0, 2, 2)
    with pytest.raises(ValueError, match="save_every"):
        kernels.fused_frames(integrators.get("buss2p"), free, states, 1e-3, 0.0, 2, 0)
    with pytest.raises(ValueError, match="states0"):
        kernels.fused_frames(integrators.get("buss2p"), free, jaxrot.State(states.R[0], states.Pi[0]), 1e-3, 0.0, 2, 2)
    R, Pi, failed, result = kernels.fused_frames(integrators.get("buss2p"), free, states, 1e-3, 0.0, 0, 2)
    assert R.shape == (3, 0, 3, 3) and np.all(np.asarray(failed) == -1)


def test_the_fused_executor_equals_xla(monkeypatch):
    from jaxrot.driver.executors import fused

    p = problems.get("fast_top")
    _, states = _setup("gravity", n=4)
    for state0 in (states, jaxrot.State(states.R[1], states.Pi[1])):
        a = jaxrot.simulate("buss4", p, 1e-3, 300, state0=state0, saveat=jaxrot.SaveAt(steps=100), executor=jaxrot.Fused())
        with monkeypatch.context() as m:  # repeated, the call goes straight to the program bound the first time
            m.setattr(fused, "_program", lambda *a: pytest.fail("a repeated call was planned again"))
            again = jaxrot.simulate("buss4", p, 1e-3, 300, state0=state0, saveat=jaxrot.SaveAt(steps=100),
                                    executor=jaxrot.Fused())
        np.testing.assert_array_equal(np.asarray(again.states.R), np.asarray(a.states.R))
        np.testing.assert_array_equal(np.asarray(again.ts), np.asarray(a.ts))
        b = jaxrot.simulate("buss4", p, 1e-3, 300, state0=state0, saveat=jaxrot.SaveAt(steps=100), executor=jaxrot.XLA())
        assert a.info["executor"] == "Fused"
        for x, y in ((a.states.R, b.states.R), (a.states.Pi, b.states.Pi), (a.ts, b.ts)):
            assert x.shape == y.shape
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-13, atol=1e-13)
        np.testing.assert_array_equal(np.asarray(a.failed_step), np.asarray(b.failed_step))
    # asked for explicitly, Fused refuses what it cannot run, saying why; the automatic choice runs it on XLA
    with pytest.raises(ValueError, match=r"Fused\(\) cannot run this job: no fused kernel for the method _FourierStep"):
        jaxrot.simulate(_FourierStep(), p, 1e-3, 10, executor=jaxrot.Fused())
    with pytest.raises(ValueError, match=r"Fused\(\) cannot run this job: .*invariant monitor"):
        jaxrot.simulate("buss4", p, 1e-3, 10, executor=jaxrot.Fused(), monitor=jaxrot.InvariantMonitor(1e-3))
    assert jaxrot.simulate("liemid_ea", p, 1e-3, 10).info["executor"] == "XLA"
    mon = jaxrot.simulate("buss4", p, 1e-3, 10, monitor=jaxrot.InvariantMonitor(1e-3))
    assert mon.info["executor"] == "XLA"


# one kernel of each family that steps with the torque, each with the T-handle's flip (the long axis's
# world-y component through zero, downwards) and a clock event, terminal or not; float32 with rk4; a
# torque with parameters (buss_torqued's polynomial), which the dense output reads beside the method
EVENT_CASES = [("rk4", "free", jnp.float64), ("buss4", "gravity", jnp.float64), ("rkmk8", "user", jnp.float64),
               ("rkmk8", "poly", jnp.float64), ("split2_231", "free", jnp.float64), ("dmv", "free", jnp.float64),
               ("rk4", "free", jnp.float32)]


@pytest.mark.parametrize("name,torque,dtype", EVENT_CASES, ids=[f"{n}-{t}-{jnp.dtype(d).name}" for n, t, d in EVENT_CASES])
def test_a_kernel_with_an_event_equals_the_xla_loop(name, torque, dtype):
    """With an event the constant-step kernel gives the XLA executor's frames, event times and
    states, and step counts (a terminal event stops each body at its own crossing step)."""
    p = PROBLEM_OF[torque]() if callable(PROBLEM_OF[torque]) else problems.get(PROBLEM_OF[torque])
    _, states = _setup(torque, dtype, n=5)  # (the run casts the problem to the states' dtype)
    # a condition of the time and the attitude, crossing within the span at a different time per body
    flip = jaxrot.Event(lambda t, s, a: t - 0.2137 + 0.02 * s.R[1, 1], direction=1)
    clock = jaxrot.Event(lambda t, s, a: t - 0.2137, direction=None, terminal=False)
    tol = 1e-12 if dtype == jnp.float64 else 1e-4
    for ev in (flip, clock):
        runs = [jaxrot.simulate(name, p, 1e-3, 400, state0=states, event=ev, saveat=jaxrot.SaveAt(steps=40),
                                executor=ex()) for ex in (jaxrot.Fused, jaxrot.XLA)]
        a, b = runs
        assert a.info["executor"] == "Fused" and a.event_time.dtype == dtype
        found = np.isfinite(np.asarray(b.event_time))
        assert found.all() and np.isfinite(np.asarray(a.event_time)).all()
        np.testing.assert_allclose(np.asarray(a.event_time)[found], np.asarray(b.event_time)[found], rtol=tol)
        np.testing.assert_allclose(np.asarray(a.event_state.R)[found], np.asarray(b.event_state.R)[found],
                                   rtol=0, atol=10 * tol)
        np.testing.assert_array_equal(np.asarray(a.controller.n_accepted), np.asarray(b.controller.n_accepted))
        np.testing.assert_allclose(np.asarray(a.ts), np.asarray(b.ts), rtol=1e-15)
        np.testing.assert_allclose(np.asarray(a.states.R), np.asarray(b.states.R), rtol=0, atol=10 * tol)
        if ev.terminal:  # each body stopped at its crossing step
            assert np.asarray(a.controller.n_accepted).max() < 400 and np.ptp(np.asarray(a.event_time)) > 0


def test_a_fused_event_time_differentiates_as_the_xla_loops():
    th = problems.get("t_handle")
    s0 = jaxrot.State(jnp.stack([th.state0.R] * 3), th.state0.Pi * jnp.array([[1.0], [1.05], [1.1]]))
    flip = jaxrot.Event(lambda t, s, a: s.R[1, 1], direction=-1)

    def flip_times(scale, executor):
        return jaxrot.simulate("rk4", th, 1e-2, 800, state0=jaxrot.State(s0.R, s0.Pi * scale), event=flip,
                               executor=executor).event_time.sum()

    g = jax.grad(flip_times)(1.0, jaxrot.Fused())
    assert np.isfinite(float(g)) and float(g) == pytest.approx(float(jax.grad(flip_times)(1.0, jaxrot.XLA())), rel=1e-12)
    # a condition the kernels cannot restate is refused, naming why
    # (loops are restated now; lgamma is not)
    unknown = jaxrot.Event(lambda t, s, a: jax.lax.lgamma(2.0 + s.R[1, 1]), direction=-1)
    with pytest.raises(ValueError, match=r"Fused\(\) cannot run this job: the event condition cannot be restated"):
        jaxrot.simulate("rk4", th, 1e-2, 10, state0=s0, event=unknown, executor=jaxrot.Fused())


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32], ids=["f64", "f32"])
def test_a_cpu_batch_is_split_over_the_cores(monkeypatch, dtype):
    # on a CPU a batch of at least 2 x 32 bodies is launched in slices, one per core, from a thread pool
    # (Warp's own custom call runs the whole batch on one core): the same kernel on every body, so the
    # same bits as one launch, also under jit and with a failing body
    from jaxrot.kernels import host_threads

    if jax.default_backend() != "cpu":
        pytest.skip("a CPU split: on a GPU the batch is one CUDA launch")
    calls = []
    split = host_threads.call
    monkeypatch.setattr(host_threads, "call", lambda *a, **k: calls.append(a[2]) or split(*a, **k))
    method = integrators.get("rk4")
    system, states = _setup("user", dtype, n=100)
    states = jaxrot.State(states.R, states.Pi.at[57].set(1e30))  # overflows: flagged in its slice

    def run():
        return jax.jit(lambda s: kernels.fused_frames(method, system, s, 1e-3, 0.1, 3, 40))(states)

    monkeypatch.setattr(host_threads, "cores", lambda: 3)
    monkeypatch.setattr(host_threads, "MIN_BODY_STEPS_PER_THREAD", 1000)
    assert host_threads.threads_for(100, 120) == 3 and host_threads.threads_for(63, 120) == 1
    assert host_threads.threads_for(100, 20) == 2 and host_threads.threads_for(100, 19) == 1
    # a kernel whose body-steps cost twice the cheapest's splits from half as many
    assert host_threads.threads_for(100, 10, 2.0) == 2 and host_threads.threads_for(100, 9, 2.0) == 1
    # (a generated step's weight: its source's length, rkmk8's (two branches of each SO(3) coefficient,
    # power series and closed form, written out) two to four times the cheapest kernels')
    weights = {n: generate.split_weight(generate.lower(integrators.get(n), system, dtype).key) for n in ("rk4", "rkmk8")}
    assert weights["rk4"] == 1.0 and 1.8 <= weights["rkmk8"] <= 4.0, weights
    got = run()
    assert calls == [3]
    monkeypatch.setattr(host_threads, "cores", lambda: 1)
    want = run()
    assert calls == [3]  # one launch through Warp's custom call
    for x, y in zip(got, want):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    failed = np.asarray(got[2])
    assert failed[57] > 0 and np.all(np.delete(failed, 57) == -1)


def test_on_a_gpu_the_automatic_choice_is_fused(monkeypatch):
    # on a GPU the fused run was measured faster from 100 steps on, one body or a batch, final state or
    # frames (docs/benchmarks.md); the choice is made from the platform's name, so it is tested here
    # by naming the platform (the fused kernel itself then runs on this machine's CPU)
    from jaxrot.driver import executors

    monkeypatch.setattr(executors, "_platform", lambda: "gpu")
    replay.forget()  # the executor's choice is part of a remembered plan
    monkeypatch.setattr(executors, "_one_cuda_gpu", lambda: True)
    replay.forget()  # the executor's choice is part of a remembered plan
    p = problems.get("fast_top")
    _, states = _setup("gravity", n=4)
    n = executors.FUSED_MIN_STEPS_GPU
    a = jaxrot.simulate("buss4", p, 1e-3, n, state0=states, saveat=jaxrot.SaveAt(steps=n))
    b = jaxrot.simulate("buss4", p, 1e-3, n, state0=states, saveat=jaxrot.SaveAt(steps=n), executor=jaxrot.XLA())
    assert a.info["executor"] == "Fused" and b.info["executor"] == "XLA"
    np.testing.assert_allclose(np.asarray(a.states.R), np.asarray(b.states.R), rtol=1e-13, atol=1e-13)
    one = jaxrot.simulate("buss4", p, 1e-3, n, state0=jaxrot.State(states.R[0], states.Pi[0]))
    assert one.info["executor"] == "Fused"
    # fewer steps, a method whose kernel drops its statistics: the XLA loop
    assert jaxrot.simulate("buss4", p, 1e-3, n - 1, state0=states, saveat=jaxrot.SaveAt(steps=n - 1)).info["executor"] == "Sharded"
    free = problems.get("t_handle")
    assert jaxrot.simulate("buss2p_ep", free, 1e-3, n, state0=states, saveat=jaxrot.SaveAt(steps=n)).info["executor"] == "Sharded"
    seen = {}

    def traced(s):
        traj = jaxrot.simulate("buss4", p, 1e-3, n, state0=s, saveat=jaxrot.SaveAt(steps=n))
        seen["executor"] = traj.info["executor"]
        return traj.states.R

    jax.jit(traced)(states)  # inside jit as in a plain call: decided from shapes and options
    assert seen["executor"] == "Fused"
    # differentiated: fused too, the kernels taking the derivative (tests/test_kernels_fixed_derivatives.py)
    jax.grad(lambda s: jnp.sum(traced(jaxrot.State(states.R, s))))(states.Pi)
    assert seen["executor"] == "Fused"
    # unroll asks for XLA's loop; a run with an event keeps it on a GPU (the kernel's events are measured on a CPU)
    assert jaxrot.simulate("buss4", p, 1e-3, n, state0=states, saveat=jaxrot.SaveAt(steps=n), unroll=2).info["executor"] == "Sharded"
    ev = jaxrot.Event(lambda t, s, args: s.Pi[0])
    assert jaxrot.simulate("buss4", p, 1e-3, n, state0=states, saveat=jaxrot.SaveAt(steps=n), event=ev).info["executor"] == "Sharded"
    # several GPUs or processes, or a GPU Warp cannot launch on: as before
    monkeypatch.setattr(executors, "_one_cuda_gpu", lambda: False)
    replay.forget()  # the executor's choice is part of a remembered plan
    assert jaxrot.simulate("buss4", p, 1e-3, n, state0=states, saveat=jaxrot.SaveAt(steps=n)).info["executor"] == "Sharded"
    monkeypatch.setattr(executors, "_platform", lambda: "cpu")
    replay.forget()  # the executor's choice is part of a remembered plan
    assert jaxrot.simulate("buss4", p, 1e-3, n, state0=states, saveat=jaxrot.SaveAt(steps=n)).info["executor"] == "Sharded"


def test_on_one_cpu_device_a_large_batch_runs_fused(monkeypatch):
    # a batch on one CPU device runs fused from FUSED_MIN_BODY_STEPS_CPU body-steps on, final state or
    # frames (measured faster, docs/benchmarks.md), to round-off of XLA's loop; fewer body-steps, or
    # several devices, keep Sharded
    from jaxrot.driver import executors

    if jax.default_backend() != "cpu":
        pytest.skip("the CPU rule")
    monkeypatch.setattr(executors, "FUSED_MIN_BODY_STEPS_CPU", 400)
    replay.forget()  # the executor's choice is part of a remembered plan
    p = problems.get("fast_top")
    _, states = _setup("gravity", n=4)
    a = jaxrot.simulate("buss4", p, 1e-3, 100, state0=states, saveat=jaxrot.SaveAt(steps=100))
    b = jaxrot.simulate("buss4", p, 1e-3, 100, state0=states, saveat=jaxrot.SaveAt(steps=100), executor=jaxrot.Sharded())
    assert a.info["executor"] == "Fused" and b.info["executor"] == "Sharded"
    np.testing.assert_allclose(np.asarray(a.states.R), np.asarray(b.states.R), rtol=0, atol=1e-13)
    assert jaxrot.simulate("buss4", p, 1e-3, 100, state0=states, saveat=jaxrot.SaveAt(steps=10)).info["executor"] == "Fused"
    assert jaxrot.simulate("buss4", p, 1e-3, 99, state0=states, saveat=jaxrot.SaveAt(steps=99)).info["executor"] == "Sharded"
    # with an event too (a terminal one ends each body's thread): on a CPU measured faster than XLA's while loop
    stop = jaxrot.Event(lambda t, s, a: t - 0.05, direction=1)
    ev = jaxrot.simulate("buss4", p, 1e-3, 100, state0=states, saveat=jaxrot.SaveAt(steps=100), event=stop)
    assert ev.info["executor"] == "Fused" and np.all(np.asarray(ev.controller.n_accepted) == 50)
    one = jaxrot.State(states.R[0], states.Pi[0])  # one body: its own rule (FUSED_MIN_STEPS, frames)
    assert jaxrot.simulate("buss4", p, 1e-3, 400, state0=one, saveat=jaxrot.SaveAt(steps=400)).info["executor"] == "XLA"
    monkeypatch.setattr(executors, "_one_device", lambda: False)
    replay.forget()  # the executor's choice is part of a remembered plan
    assert jaxrot.simulate("buss4", p, 1e-3, 100, state0=states, saveat=jaxrot.SaveAt(steps=100)).info["executor"] == "Sharded"


def _python(code, XLA_FLAGS="", **env):
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         env=subprocess_env(XLA_FLAGS, **env), timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_two_cpu_devices_one_launch_each():
    """A batch sharded over two CPU devices (shard_map, one launch per device; padded to a multiple)."""
    out = _python("""
        import jax, numpy as np
        jax.config.update("jax_enable_x64", True)
        import jaxrot
        assert len(jax.devices()) == 2
        p = jaxrot.problems.get("fast_top")
        R = jax.vmap(jaxrot.so3.exp)(jax.numpy.asarray(0.3 * np.random.default_rng(0).normal(size=(5, 3))))
        s = jaxrot.State(R, jax.numpy.broadcast_to(p.state0.Pi, (5, 3)))
        a = jaxrot.simulate("buss2p", p, 1e-3, 200, state0=s, saveat=jaxrot.SaveAt(steps=50), executor=jaxrot.Fused(jax.devices()))
        b = jaxrot.simulate("buss2p", p, 1e-3, 200, state0=s, saveat=jaxrot.SaveAt(steps=50), executor=jaxrot.XLA())
        assert a.info["executor"] == "Fused" and a.states.R.shape == (5, 5, 3, 3)
        print(float(np.max(np.abs(np.asarray(a.states.R) - np.asarray(b.states.R)))))
        # 131 bodies, 400 steps: each device's part split again over the cores (a foreign function call in shard_map)
        R = jax.vmap(jaxrot.so3.exp)(jax.numpy.asarray(0.3 * np.random.default_rng(1).normal(size=(131, 3))))
        s = jaxrot.State(R, jax.numpy.broadcast_to(p.state0.Pi, (131, 3)))
        a = jaxrot.simulate("buss2p", p, 1e-3, 400, state0=s, saveat=jaxrot.SaveAt(steps=100), executor=jaxrot.Fused(jax.devices()))
        b = jaxrot.simulate("buss2p", p, 1e-3, 400, state0=s, saveat=jaxrot.SaveAt(steps=100), executor=jaxrot.XLA())
        assert a.states.R.shape == (131, 5, 3, 3)
        # one device named: the run is placed there, repeated too
        for _ in range(2):
            c = jaxrot.simulate("buss2p", p, 1e-3, 400, state0=s, saveat=jaxrot.SaveAt(steps=100),
                                executor=jaxrot.Fused([jax.devices()[1]]))
            assert c.states.R.devices() == {jax.devices()[1]}, c.states.R.devices()
        # a failure flag spread over both devices: reduced there, the largest read back
        from jaxrot.driver import failures
        mesh = jax.sharding.Mesh(np.array(jax.devices()), ("b",))
        flags = jax.device_put(jax.numpy.full((8,), -1, jax.numpy.int32).at[5].set(3),
                               jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("b")))
        assert len(flags.devices()) == 2 and failures.largest_flag(flags) == 3
        ev = jaxrot.Event(lambda t, s, args: s.R[1, 1])  # with an event as well
        c = jaxrot.simulate("buss2p", p, 1e-3, 40, state0=s, event=ev, executor=jaxrot.Fused([jax.devices()[1]]))
        assert c.states.R.devices() == {jax.devices()[1]}, c.states.R.devices()
        print(float(np.max(np.abs(np.asarray(a.states.R) - np.asarray(b.states.R)))))
        """, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    diffs = [float(x) for x in out.strip().splitlines()[-2:]]
    assert max(diffs) < 1e-13, diffs


def test_jaxrot_imports_without_warp_and_a_kernel_names_the_extra():
    out = _python("""
        import sys
        sys.modules["warp"] = None  # as if warp-lang were not installed
        import jax
        jax.config.update("jax_enable_x64", True)
        import jaxrot
        from jaxrot import kernels
        p = jaxrot.problems.get("fast_top")
        s0 = jax.tree_util.tree_map(lambda x: x[None], p.state0)
        assert kernels.supports(jaxrot.integrators.get("buss2p"), p.system)
        try:
            kernels.fused_frames(jaxrot.integrators.get("buss2p"), p.system, s0, 1e-3, 0.0, 1, 1)
        except ImportError as e:
            print("ImportError:", e)
        """, JAX_PLATFORMS="cpu")
    assert "jaxrot[fast]" in out
    out = _python("import sys, jaxrot; print('warp' in sys.modules)", JAX_PLATFORMS="cpu")
    assert out.strip() == "False"


@pytest.mark.parametrize("stepsize", [jaxrot.Fixed(0.01), jaxrot.Adaptive(1e-9, 1e-9)], ids=["constant", "adaptive"])
def test_jax_vmap_over_a_torque_parameter_and_an_event_level_runs_each_element(stepsize):
    """``jax.vmap`` over a torque's ``args`` and an event's level through a fused run: each element is
    its own run (the kernels' custom calls are mapped one element after another), equal to a loop of
    fused runs. (Warp's default mapping handed the kernel the whole batch as if it were one element:
    every element got the first one's result.)"""
    p = problems.get("t_handle")
    S = jaxrot.State(jnp.stack([p.state0.R] * 2), jnp.stack([p.state0.Pi, 1.1 * p.state0.Pi]))
    method = "rkmk8(5,3)" if isinstance(stepsize, jaxrot.Adaptive) else "rk4"

    def run(k, c):
        q = jaxrot.Problem(p.body, jaxrot.Torque(lambda t, R, Pi, k: -k * (R @ Pi), args=k), p.state0, 1.0)
        flip = jaxrot.Event(lambda t, s, args: s.R[1, 1] - c, direction=-1)
        tr = jaxrot.simulate(method, q, t1=10.0, state0=S, stepsize=stepsize, event=flip, executor=jaxrot.Fused())
        return tr.event_time, tr.final.Pi

    ks, cs = jnp.array([0.0, 0.01]), jnp.array([0.0, 0.2])
    mapped = jax.vmap(run)(ks, cs)
    for i in range(2):
        one = run(ks[i], cs[i])
        np.testing.assert_allclose(np.asarray(mapped[0][i]), np.asarray(one[0]), rtol=1e-13)
        np.testing.assert_allclose(np.asarray(mapped[1][i]), np.asarray(one[1]), rtol=1e-12, atol=1e-12)
    assert abs(float(mapped[0][1, 0] - mapped[0][0, 0])) > 1e-3  # the two elements differ (equal before)
