import dataclasses

import equinox as eqx
import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import problems
from jaxrot.physics.torques import AbstractTorque


def test_frames_and_times():
    p = problems.get("fast_top")
    tr = jaxrot.simulate("buss2p", p, 1e-3, 100, saveat=jaxrot.SaveAt(steps=10))
    assert tr.states.R.shape == (11, 3, 3) and tr.ts.shape == (11,)
    np.testing.assert_allclose(tr.ts, np.linspace(0, 0.1, 11), atol=1e-15)
    np.testing.assert_array_equal(tr.states.R[0], p.state0.R)
    assert int(tr.failed_step) == -1
    assert tr.stats.converged.shape == (10,) and bool(tr.stats.converged.all())
    # saving less often does not change the trajectory
    tr1 = jaxrot.simulate("buss2p", p, 1e-3, 100, saveat=jaxrot.SaveAt(steps=True))
    np.testing.assert_allclose(tr1.states.R[::10], tr.states.R, atol=1e-15)


def test_progress_same_result(capsys):
    p = problems.get("fast_top")
    a = jaxrot.simulate("buss2", p, 1e-3, 200, saveat=jaxrot.SaveAt(steps=5), progress=True)
    b = jaxrot.simulate("buss2", p, 1e-3, 200, saveat=jaxrot.SaveAt(steps=5))
    np.testing.assert_allclose(a.states.R, b.states.R, atol=1e-15)
    err = capsys.readouterr().err
    assert "compiled in" in err and "200/200 steps" in err


def test_gradient_matches_finite_differences():
    p = problems.get("fast_top")

    def loss(J, Pi0):
        q = jaxrot.Problem(jaxrot.RigidBody(J), p.torque, jaxrot.State(p.state0.R, Pi0), p.t_end)
        fin = jaxrot.simulate("buss3", q, 2e-3, 50, saveat=jaxrot.SaveAt(steps=50)).final
        return jnp.sum(fin.R * jnp.arange(9.0).reshape(3, 3)) + jnp.dot(fin.Pi, jnp.array([0.3, -0.2, 0.1]))

    J, Pi0 = p.body.J, p.state0.Pi
    gJ, gP = jax.grad(loss, argnums=(0, 1))(J, Pi0)
    for x, g, arg in [(J, gJ, 0), (Pi0, gP, 1)]:
        for i in range(3):
            e = jnp.zeros(3).at[i].set(1e-6 * max(1.0, abs(float(x[i]))))
            args_p = [J, Pi0]
            args_m = [J, Pi0]
            args_p[arg] = x + e
            args_m[arg] = x - e
            fd = (loss(*args_p) - loss(*args_m)) / (2 * e[i])
            assert abs(float(g[i]) - float(fd)) <= 1e-6 * max(1.0, abs(float(fd))), (arg, i, g[i], fd)


def test_grad_wrt_dt():
    p = problems.get("fast_top")
    f = lambda dt: jaxrot.simulate("buss2p", p, dt, 20, saveat=jaxrot.SaveAt(steps=20)).final.Pi[0]  # noqa: E731
    g = jax.grad(f)(1e-3)
    fd = (f(1e-3 + 1e-8) - f(1e-3 - 1e-8)) / 2e-8
    assert abs(float(g - fd)) < 1e-5 * max(1.0, abs(float(fd)))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(dt=0.0), "dt must be finite and > 0"),
        (dict(dt=-1e-3), "dt must be finite and > 0"),
        (dict(dt=float("nan")), "dt must be finite"),
        (dict(n_steps=0), "n_steps must be >= 1"),
        (dict(n_steps=10, save_every=3), r"multiple of the steps between frames \(SaveAt\(steps=3\)\)"),
        (dict(save_every=0), "steps must be True, False or a positive int"),
        (dict(dt=np.array([1e-3])), "dt must be a scalar"),
        (dict(t0=float("nan")), "t0 must be a finite scalar"),
    ],
)
def test_bad_counts_and_dt(kwargs, match):
    args = dict(dt=1e-3, n_steps=10, save_every=1, t0=0.0) | kwargs
    with pytest.raises(ValueError, match=match):
        jaxrot.simulate("buss2p", problems.get("fast_top"), args["dt"], args["n_steps"], saveat=jaxrot.SaveAt(steps=args["save_every"]),
                        t0=args["t0"])


def test_numpy_integer_steps_work():
    tr = jaxrot.simulate("buss2p", problems.get("fast_top"), 1e-3, np.int64(20), saveat=jaxrot.SaveAt(steps=np.int64(10)))
    assert tr.states.R.shape[0] == 3


def test_bad_batch_arguments():
    p = problems.get("t_handle")
    one = jax.tree_util.tree_map(lambda x: x[None], p.state0)
    with pytest.raises(ValueError, match="non-empty list of JAX devices"):
        jaxrot.simulate_batch("buss2p", p, 0.01, 10, states0=one, devices=[])
    with pytest.raises(ValueError, match="empty batch"):
        jaxrot.simulate_batch("buss2p", p, 0.01, 10, states0=jax.tree_util.tree_map(lambda x: x[:0], one))
    with pytest.raises(ValueError, match="t0 must be a finite scalar"):
        jaxrot.simulate_batch("buss2p", p, 0.01, 10, states0=one, t0=float("inf"))


def test_bad_method_name():
    with pytest.raises(KeyError, match="unknown method 'nope'; known:"):
        jaxrot.simulate("nope", problems.get("fast_top"), 1e-3, 10)


@pytest.mark.parametrize(
    "J,match",
    [([1.0, -1.0, 1.0], "positive"), ([0.0, 1.0, 1.0], "positive"), ([1.0, 1.0, 3.0], "triangle"),
     ([1.0, float("nan"), 1.0], "finite")],
)
def test_bad_inertia(J, match):
    with pytest.raises(ValueError, match=match):
        jaxrot.RigidBody(jnp.asarray(J))


def test_bad_inertia_traced():
    p = problems.get("fast_top")

    def f(J):
        q = jaxrot.Problem(jaxrot.RigidBody(J), p.torque, p.state0, 1.0)
        return jaxrot.simulate("buss2p", q, 1e-3, 4).final.Pi.sum()

    with pytest.raises(Exception, match="J_i <= J_j"):
        eqx.filter_jit(f)(jnp.array([1.0, 1.0, 3.0]))


def test_bad_state():
    p = problems.get("fast_top")
    R_bad = p.state0.R.at[0, 0].add(1e-3)
    with pytest.raises(ValueError, match="not orthogonal"):
        jaxrot.simulate("buss2p", p, 1e-3, 10, state0=jaxrot.State(R_bad, p.state0.Pi))
    with pytest.raises(ValueError, match="reflection"):
        jaxrot.simulate("buss2p", p, 1e-3, 10, state0=jaxrot.State(-p.state0.R, p.state0.Pi))
    with pytest.raises(ValueError, match="NaN"):
        jaxrot.simulate("buss2p", p, 1e-3, 10, state0=jaxrot.State(p.state0.R, p.state0.Pi.at[1].set(jnp.nan)))
    with pytest.raises(ValueError, match="shape"):
        jaxrot.simulate("buss2p", p, 1e-3, 10, state0=jaxrot.State(p.state0.R[:2], p.state0.Pi))


class _BlowUp(AbstractTorque):
    def __call__(self, t, R, Pi):
        return jnp.where(t > 0.05, jnp.nan, 0.0) * Pi


def test_nonfinite_state_raises_naming_step():
    p = problems.get("t_handle")
    q = jaxrot.Problem(p.body, _BlowUp(), p.state0, 1.0)
    with pytest.raises(jaxrot.SimulationError, match="step 7 "):
        jaxrot.simulate("buss1", q, 0.01, 20, saveat=jaxrot.SaveAt(steps=5))
    tr = jaxrot.simulate("buss1", q, 0.01, 20, saveat=jaxrot.SaveAt(steps=5), throw=False)
    assert int(tr.failed_step) == 7


def test_simulate_batch_stacked_problems():
    ps = [problems.t_handle(omega0=(0.01, w, 0.01)) for w in (1.0, 2.0, 3.0)]
    tr = jaxrot.simulate_batch("buss2p", jaxrot.stack_problems(ps), 0.01, 40, save_every=10)
    assert tr.states.R.shape == (3, 5, 3, 3)
    for i, p in enumerate(ps):
        one = jaxrot.simulate("buss2p", p, 0.01, 40, saveat=jaxrot.SaveAt(steps=10))
        np.testing.assert_allclose(tr.states.R[i], one.states.R, atol=1e-14)


def test_simulate_batch_bad_input():
    p = problems.get("t_handle")
    with pytest.raises(ValueError, match="stacked"):
        jaxrot.simulate_batch("buss2p", p, 0.01, 10)
    with pytest.raises(ValueError, match="batch axis"):
        jaxrot.simulate_batch("buss2p", p, 0.01, 10, states0=p.state0)


def test_from_tensor():
    R = jaxrot.so3.exp(jnp.array([0.3, 0.2, -0.4]))
    I = np.asarray(R @ jnp.diag(jnp.array([1.0, 2.0, 2.5])) @ R.T)
    body, Q = jaxrot.RigidBody.from_tensor(I)
    np.testing.assert_allclose(body.J, [1.0, 2.0, 2.5], atol=1e-12)
    np.testing.assert_allclose(Q @ np.diag(body.J) @ Q.T, I, atol=1e-12)
    assert np.linalg.det(Q) > 0
    with pytest.raises(ValueError, match="symmetric"):
        jaxrot.RigidBody.from_tensor(I + np.triu(np.ones((3, 3)), 1))


def test_box_and_cylinder():
    np.testing.assert_allclose(jaxrot.RigidBody.box(1, 4, 18).J, [(16 + 324) / 12, (1 + 324) / 12, 17 / 12])
    c = jaxrot.RigidBody.cylinder(1.0, 2.0, mass=3.0)
    np.testing.assert_allclose(c.J, [3 * (3 + 4) / 12, 3 * 7 / 12, 1.5])


# liemid_ea (the implicit path, 12 s in its own process) in the slow tier: test_executors.py checks the
# blocked executor's agreement on it to round-off
@pytest.mark.default_xla
@pytest.mark.parametrize("method", ["buss2p", pytest.param("liemid_ea", marks=pytest.mark.slow)])
def test_blocked_batch_is_identical_to_unblocked(method):
    """Cache blocking (lax.map over blocks, padded when the block does not divide the batch) changes
    nothing: bit-identical trajectories and flags."""
    p = problems.get("fast_top")
    key = jax.random.PRNGKey(3)
    R0 = jax.vmap(jaxrot.so3.exp)(jax.random.normal(key, (300, 3)))
    Pi0 = p.state0.Pi * (1 + 0.1 * jax.random.normal(key, (300, 3)))
    s = jaxrot.State(R0, Pi0)
    a = jaxrot.simulate_batch(method, p, 1e-3, 20, states0=s, save_every=10, block_size=None)
    b = jaxrot.simulate_batch(method, p, 1e-3, 20, states0=s, save_every=10, block_size=64)
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        assert np.shape(x) == np.shape(y) and np.array_equal(np.asarray(x), np.asarray(y))


def test_blocked_stacked_problems_and_bad_block_size():
    ps = [problems.t_handle(omega0=(0.1, w, 0.1)) for w in np.linspace(1, 4, 7)]
    stacked = jaxrot.stack_problems(ps)
    a = jaxrot.simulate_batch("buss4", stacked, 0.01, 30, save_every=10, block_size=None)
    b = jaxrot.simulate_batch("buss4", stacked, 0.01, 30, save_every=10, block_size=3)
    np.testing.assert_array_equal(np.asarray(a.states.R), np.asarray(b.states.R))
    for bad in [0, -4, 2.5, "big", True]:
        with pytest.raises(ValueError, match="block_size"):
            jaxrot.simulate_batch("buss4", stacked, 0.01, 30, block_size=bad)


def test_new_step_count_or_span_does_not_recompile_the_run():
    """The step loop is compiled once per (method, shapes, save_every): a new n_steps or t_end reuses
    it (only tiny eager slices/concatenations of the outputs are new)."""
    from jax import monitoring

    compiled = []
    monitoring.register_event_duration_secs_listener(
        lambda name, dur, **kw: compiled.append(kw.get("fun_name", "")) if name.endswith("backend_compile_duration")
        else None)
    p = problems.get("slow_top")
    xla = jaxrot.XLA()  # XLA's chunked loop (on a GPU the automatic choice is the fused kernel)
    jaxrot.simulate("buss3", p, 1e-3, 100, saveat=jaxrot.SaveAt(steps=10), executor=xla)  # one chunk: init and frames in one program
    jaxrot.simulate("buss3", p, 1e-3, 10_250, saveat=jaxrot.SaveAt(steps=10), executor=xla)  # two chunks: the repeated chunk
    assert any("_one_short" in f for f in compiled)  # the listener sees the runs' compilation
    assert "jit(_one_chunk)" in compiled
    compiled.clear()
    a = jaxrot.simulate("buss3", p, 1e-3, 2370, saveat=jaxrot.SaveAt(steps=10), executor=xla)  # 237 frames: another count
    q = jaxrot.Problem(p.body, p.torque, p.state0, 123.0, "other", "another span")
    b = jaxrot.simulate("buss3", q, 1e-3, 20_480 + 30, saveat=jaxrot.SaveAt(steps=10), executor=xla)  # two chunks, another span
    heavy = [f for f in compiled if "_one_" in f]
    assert not heavy, heavy
    np.testing.assert_allclose(np.asarray(b.states.R[:238]), np.asarray(a.states.R), atol=0, rtol=0)
    assert b.states.R.shape[0] == 2052 and a.ts[-1] == pytest.approx(2.37)


def test_batch_new_step_count_or_span_does_not_recompile():
    """simulate_batch runs chunks of a length fixed by the batch size: a new n_steps or t_end
    reuses the compiled chunk."""
    from jax import monitoring

    compiled = []
    monitoring.register_event_duration_secs_listener(
        lambda name, dur, **kw: compiled.append(kw.get("fun_name", "")) if name.endswith("backend_compile_duration")
        else None)
    p = problems.get("slow_top")
    s = jax.tree_util.tree_map(lambda x: jnp.stack([x, 1.1 * x]) if x.ndim == 1 else jnp.stack([x, x]), p.state0)
    jaxrot.simulate_batch("buss2p", p, 1e-3, 100, states0=s, save_every=10)
    assert any("_batch_chunk" in f for f in compiled)
    compiled.clear()
    a = jaxrot.simulate_batch("buss2p", p, 1e-3, 2370, states0=s, save_every=10)
    q = jaxrot.Problem(p.body, p.torque, p.state0, 55.0, "other", "another span")
    b = jaxrot.simulate_batch("buss2p", q, 1e-3, 10_270, states0=s, save_every=10)  # two chunks, another span
    heavy = [f for f in compiled if "_batch_chunk" in f or "_batch_init" in f]
    assert not heavy, heavy
    assert a.states.R.shape == (2, 238, 3, 3) and b.states.R.shape == (2, 1028, 3, 3)
    np.testing.assert_allclose(np.asarray(b.states.R[:, :238]), np.asarray(a.states.R), atol=0, rtol=0)
    np.testing.assert_allclose(np.asarray(b.ts[:, -1]), 10.27, rtol=1e-12)


def test_traced_call_runs_exactly_its_frames_and_equals_the_plain_call():
    """Inside jit (and vmap) simulate scans exactly n_steps/save_every frames instead of masked
    1 024-frame chunks; the trajectory is the plain call's."""
    p = problems.get("slow_top")
    plain = jaxrot.simulate("buss3", p, 1e-2, 36, saveat=jaxrot.SaveAt(steps=4))
    traced = jax.jit(lambda s: jaxrot.simulate("buss3", p, 1e-2, 36, saveat=jaxrot.SaveAt(steps=4), state0=s))(p.state0)
    assert traced.states.R.shape == plain.states.R.shape == (10, 3, 3)
    np.testing.assert_allclose(np.asarray(traced.states.R), np.asarray(plain.states.R), rtol=0, atol=1e-15)
    np.testing.assert_allclose(np.asarray(traced.ts), np.asarray(plain.ts), rtol=0, atol=0)
    both = jax.vmap(lambda s: jaxrot.simulate("buss3", p, 1e-2, 36, saveat=jaxrot.SaveAt(steps=4), state0=s).final.Pi)(
        jax.tree_util.tree_map(lambda x: jnp.stack([x, x]), p.state0))
    np.testing.assert_allclose(np.asarray(both[1]), np.asarray(plain.final.Pi), rtol=0, atol=1e-15)


def test_traced_save_times_with_error_control_go_on_to_t1_as_concrete_ones():
    """Save times traced by jit cannot be compared with t1 before the run: the run still goes on to t1
    and keeps its state there, as with the same times concrete (same frames). The times are checked as
    the run starts (decreasing, or past t1: the plain call's ValueError)."""
    p = problems.get("asymmetric_top")
    run = dict(t1=2.0, stepsize=jaxrot.Adaptive(1e-8, 1e-8))
    ts = np.array([0.25, 0.5, 1.0])
    plain = jaxrot.simulate("rkmk8(5,3)", p, saveat=jaxrot.SaveAt(ts=ts), **run)
    traced_run = jax.jit(lambda x: jaxrot.simulate("rkmk8(5,3)", p, saveat=jaxrot.SaveAt(ts=x), **run))
    traced = traced_run(jnp.asarray(ts))
    np.testing.assert_array_equal(np.asarray(traced.ts), [0.0, 0.25, 0.5, 1.0, 2.0])
    np.testing.assert_allclose(np.asarray(traced.states.R), np.asarray(plain.states.R), rtol=0, atol=1e-12)
    assert int(traced.controller.n_accepted) == int(plain.controller.n_accepted)
    # concrete save times and a t1 array closed over by the jit (a concrete value): on to t1 as well
    end = jnp.asarray(2.0)
    closed_over = jax.jit(lambda: jaxrot.simulate("rkmk8(5,3)", p, saveat=jaxrot.SaveAt(ts=ts), t1=end,
                                                  stepsize=run["stepsize"]))()
    np.testing.assert_array_equal(np.asarray(closed_over.ts), [0.0, 0.25, 0.5, 1.0, 2.0])
    np.testing.assert_allclose(np.asarray(closed_over.states.R), np.asarray(plain.states.R), rtol=0, atol=1e-12)
    # checked as the run starts: past t1, or decreasing; under vmap too, the ends batched as well
    with pytest.raises(ValueError, match="save times must be finite, not decreasing"), jaxrot.simulation_errors():
        both = jax.vmap(lambda x, t1: jaxrot.simulate("rkmk8(5,3)", p, saveat=jaxrot.SaveAt(ts=x), t1=t1,
                                                       stepsize=run["stepsize"]).final.Pi)
        jax.block_until_ready(both(jnp.asarray([[0.25, 0.5], [0.25, 0.5]]), jnp.asarray([1.0, 0.4])))
    for bad in ([0.25, 0.5, 2.5], [0.5, 0.25, 1.0]):
        with pytest.raises(ValueError, match="save times must be finite, not decreasing and within the span"), \
                jaxrot.simulation_errors():
            jax.block_until_ready(traced_run(jnp.asarray(bad)).ts)


def test_traced_save_times_ending_at_t1_without_t1_or_of_integers():
    """The cases beside: a traced last save time equal to t1 is written, then t1's frame again without
    a step; SaveAt(t1=False) keeps exactly the traced times; integer times with t1 in the run's type."""
    p = problems.get("asymmetric_top")
    run = dict(t1=2.0, stepsize=jaxrot.Adaptive(1e-8, 1e-8))
    ts = np.array([0.25, 0.5, 1.0])
    at_end = jax.jit(lambda x: jaxrot.simulate("rkmk8(5,3)", p, saveat=jaxrot.SaveAt(ts=x), **run))(
        jnp.asarray([1.0, 2.0]))
    np.testing.assert_array_equal(np.asarray(at_end.ts), [0.0, 1.0, 2.0, 2.0])
    np.testing.assert_array_equal(np.asarray(at_end.states.R[-1]), np.asarray(at_end.states.R[-2]))
    same = jaxrot.simulate("rkmk8(5,3)", p, saveat=jaxrot.SaveAt(ts=np.array([1.0, 2.0])), **run)
    np.testing.assert_allclose(np.asarray(at_end.states.R[:3]), np.asarray(same.states.R), rtol=0, atol=1e-12)
    dropped = jax.jit(lambda x: jaxrot.simulate("rkmk8(5,3)", p, saveat=jaxrot.SaveAt(ts=x, t1=False), **run))(
        jnp.asarray(ts))
    np.testing.assert_array_equal(np.asarray(dropped.ts), [0.0, 0.25, 0.5, 1.0])
    # integer save times: t1 kept in the run's type
    ints = jax.jit(lambda x: jaxrot.simulate("rkmk8(5,3)", p, saveat=jaxrot.SaveAt(ts=x), **dict(run, t1=2.5)))(
        jnp.arange(1, 3))
    np.testing.assert_array_equal(np.asarray(ints.ts), [0.0, 1.0, 2.0, 2.5])


def test_repeated_calls_reuse_the_system_per_problem_and_dtype_but_see_numpy_changes():
    """simulate remembers a problem's cast System by identity (a loop of calls builds it once): per
    dtype, and never for a problem holding NumPy arrays, which can change in place."""
    p = problems.get("fast_top")
    a = jaxrot.simulate("buss2p", p, 1e-3, 20)
    b = jaxrot.simulate("buss2p", p, 1e-3, 20, state0=jaxrot.cast(p.state0, jnp.float32))
    assert b.states.R.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(b.states.R), np.asarray(a.states.R), atol=1e-5)
    c = jaxrot.simulate("buss2p", p, 1e-3, 20)
    assert c.states.R.dtype == jnp.float64
    np.testing.assert_array_equal(np.asarray(c.states.R), np.asarray(a.states.R))
    com = np.array([0.0, 0.0, 1.0])  # float64: a float32 run casts a copy of it
    q = eqx.tree_at(lambda p: p.torque.com, p, com)
    s32 = jaxrot.cast(p.state0, jnp.float32)
    before = jaxrot.simulate("buss2p", q, 1e-3, 20, state0=s32).final.Pi
    np.testing.assert_array_equal(np.asarray(before), np.asarray(b.final.Pi))
    com[:] = [0.0, 1.0, 0.0]  # moved in place: the next call must use it
    after = jaxrot.simulate("buss2p", q, 1e-3, 20, state0=s32).final.Pi
    moved = eqx.tree_at(lambda p: p.torque.com, p, (0.0, 1.0, 0.0))
    expect = jaxrot.simulate("buss2p", moved, 1e-3, 20, state0=s32).final.Pi
    np.testing.assert_array_equal(np.asarray(after), np.asarray(expect))
    assert not np.allclose(np.asarray(after), np.asarray(before))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_frame_rows_pack_and_unpack_exactly(dtype):
    """simulate's chunk stores a frame as one row of numbers; integers and flags go through bit casts."""
    from jaxrot.driver.layout import row_packing

    rng = np.random.default_rng(0)
    tree = (jaxrot.State(jnp.asarray(rng.normal(size=(3, 3)), dtype), jnp.asarray([np.nan, -0.0, 1e-30], dtype)),
            jnp.asarray(-7, jnp.int32), jnp.asarray([True, False]), jnp.asarray(2**31 - 1, jnp.int32),
            jnp.asarray(1.5, jnp.float16))  # a narrower float: converted, exactly
    pack, unpack, width = row_packing(jax.eval_shape(lambda: tree), dtype)
    assert width == 9 + 3 + 1 + 2 + 1 + 1
    back = jax.jit(lambda t: unpack(jnp.stack([pack(t), pack(t)])))(tree)
    for a, b in zip(jax.tree_util.tree_leaves(tree), jax.tree_util.tree_leaves(back)):
        assert b.dtype == a.dtype and b.shape == (2,) + a.shape
        np.testing.assert_array_equal(np.asarray(b[1]), np.asarray(a))
        assert np.array_equal(np.signbit(np.asarray(b[0])), np.signbit(np.asarray(a)))


def test_chunk_frames_and_statistics_equal_the_traced_scan():
    """The plain call's chunk (a fori_loop writing packed rows) and the traced call's scan agree,
    Newton statistics included, for frames of several steps and of one step."""
    p = problems.get("fast_top")
    for save_every in (3, 1):
        plain = jaxrot.simulate("liemid_ea", p, 0.01, 12, saveat=jaxrot.SaveAt(steps=save_every))
        traced = jax.jit(lambda s: jaxrot.simulate("liemid_ea", p, 0.01, 12, saveat=jaxrot.SaveAt(steps=save_every), state0=s))(
            p.state0)
        assert int(jnp.sum(plain.stats.newton_iters)) > 0
        for a, b in zip(jax.tree_util.tree_leaves(plain.stats), jax.tree_util.tree_leaves(traced.stats)):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        np.testing.assert_allclose(np.asarray(plain.states.R), np.asarray(traced.states.R), atol=1e-15)
        np.testing.assert_array_equal(np.asarray(plain.ts), np.asarray(traced.ts))


@pytest.mark.default_xla
def test_short_and_chunked_runs_give_the_same_frames():
    """Runs of at most SHORT_RUN_FRAMES frames take one small program (frames as columns); longer
    ones the repeated chunk (frames as rows): the same frames, bit for bit, statistics included."""
    from jaxrot.driver.layout import SHORT_RUN_FRAMES

    p = problems.get("fast_top")
    n = SHORT_RUN_FRAMES
    short = jaxrot.simulate("liemid_ea", p, 0.01, n, saveat=jaxrot.SaveAt(steps=True))
    long = jaxrot.simulate("liemid_ea", p, 0.01, n + 1, saveat=jaxrot.SaveAt(steps=True))
    for a, b in zip(jax.tree_util.tree_leaves((short.states, short.ts, short.stats)),
                    jax.tree_util.tree_leaves((long.states, long.ts, long.stats))):
        assert a.dtype == b.dtype and a.shape[0] + 1 == b.shape[0]
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b[: a.shape[0]]))


def test_final_state_runs_in_blocks_and_matches_the_last_frame():
    """A final-state run of a batch in blocks of 4 (10 bodies: the last block padded) equals the
    unblocked run's last frame bit for bit; the automatic block size on one CPU device is CPU_BLOCK."""
    from jaxrot.driver.executors.batch import CPU_BLOCK, auto_block

    p = problems.get("t_handle")
    rng = np.random.default_rng(3)
    s = jaxrot.State(jax.vmap(jaxrot.so3.exp)(jnp.asarray(rng.normal(size=(10, 3)))), jnp.asarray(rng.normal(size=(10, 3))))
    a = jaxrot.simulate("buss4", p, 1e-2, 30, state0=s, saveat=jaxrot.SaveAt(t0=False), executor=jaxrot.CPUBlocked(4))
    b = jaxrot.simulate("buss4", p, 1e-2, 30, state0=s, saveat=jaxrot.SaveAt(steps=30), executor=jaxrot.XLA()).final
    assert a.info["executor"] == "CPUBlocked" and a.ts.shape == (10, 1)
    assert auto_block("auto", 10_000, jax.devices()[:1]) == (CPU_BLOCK if jax.default_backend() == "cpu" else None)
    np.testing.assert_array_equal(np.asarray(a.final.R), np.asarray(b.R))
    np.testing.assert_array_equal(np.asarray(a.final.Pi), np.asarray(b.Pi))


def _dot_precisions(jaxpr):
    """The precision of every dot_general in ``jaxpr`` and its sub-jaxprs."""
    out = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            out.append(eqn.params["precision"])
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            out += _dot_precisions(sub)
    return out


def test_runs_are_traced_at_full_matmul_precision():
    # on a GPU the default precision rounds float32 products with a long contraction to TF32; a run's
    # program (the torque's products included) is traced at HIGHEST instead
    seen = []

    def torque(t, R, Pi):
        seen.append(jax.config.jax_default_matmul_precision)
        return jnp.zeros(3, Pi.dtype)

    p = problems.get("asymmetric_top")
    p = dataclasses.replace(p, torque=jaxrot.Torque(torque))
    before = jax.config.jax_default_matmul_precision
    seen.clear()  # (Torque calls the function once to check its output)
    traj = jaxrot.simulate("rk4", p, 1e-3, 3, executor=jaxrot.XLA(), saveat=jaxrot.SaveAt(dense=True))
    assert seen and set(seen) == {"highest"}
    # the other entry points that trace a run: dense output, compiled runs, the reference
    for trace in (lambda: traj.evaluate(jnp.asarray([1.5e-3])), lambda: jaxrot.compile("rk4", p, 1e-3, 3)(p.state0),
                  lambda: jaxrot.reference.reference_solution(p, 3e-3)):
        seen.clear()
        trace()
        assert seen and set(seen) == {"highest"}
    assert jax.config.jax_default_matmul_precision == before  # restored after each call


def test_rkmk8_combines_its_stages_at_full_precision():
    # the 13-stage tableau products are the step's long contractions: HIGHEST in the step itself, so
    # a user calling method.step under any default gets float32 stages
    m, p = jaxrot.get("rkmk8"), problems.get("asymmetric_top")
    s = jax.tree_util.tree_map(lambda x: jnp.stack([x, x]), p.state0)
    jaxpr = jax.make_jaxpr(jax.vmap(lambda s: m.step(p.system, 0.0, s, m.init(p.system, 0.0, s, 1e-2), 1e-2)[0]))(s)
    highest = (jax.lax.Precision.HIGHEST, jax.lax.Precision.HIGHEST)
    assert sum(q == highest for q in _dot_precisions(jaxpr.jaxpr)) >= 2 * 13


@pytest.mark.parametrize("batch", [False, True], ids=["one body", "batch"])
def test_saveat_without_t0_drops_exactly_the_first_frame(batch):
    """``SaveAt(steps=k, t0=False)``: the frames of ``SaveAt(steps=k)`` less the first; times, attitudes
    and momenta alike."""
    p = problems.get("fast_top")
    s0 = None
    if batch:
        s0 = jaxrot.State(jnp.stack([p.state0.R] * 3), p.state0.Pi * jnp.array([[1.0], [1.1], [0.9]]))

    def run(saveat):
        return jaxrot.simulate("buss4", p, 1e-3, 40, state0=s0, saveat=saveat, executor=jaxrot.XLA())

    full, cut = run(jaxrot.SaveAt(steps=10)), run(jaxrot.SaveAt(steps=10, t0=False))
    assert cut.ts.shape[-1] == full.ts.shape[-1] - 1 == 4
    np.testing.assert_array_equal(np.asarray(cut.ts), np.asarray(full.ts)[..., 1:])
    np.testing.assert_array_equal(np.asarray(cut.states.R), np.asarray(full.states.R)[..., 1:, :, :])
    np.testing.assert_array_equal(np.asarray(cut.states.Pi), np.asarray(full.states.Pi)[..., 1:, :])
