"""The fused loop's pieces generated from their JAX code (jaxrot.kernels.generate_pieces): the PI
controller is :func:`jaxrot.integrators.pairs.adapt` restated, the same bits at every kind of error
(small, accepted, rejected, infinite, NaN); a NaN error, which a pair's own ``error_norm`` may give,
rejects the attempt and shrinks the step by ``FACTOR_MIN`` on the XLA loop and in the kernel alike.
An event's location in its crossing step, generated from
:func:`jaxrot.integrators.dense_output.locate`, gives that function's time to a rounding and its
state to 1e-14 (of the momentum's size), polished on the method's own steps (rkmk8) or not (buss4)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import kernels
from jaxrot.integrators import EmbeddedPair
from jaxrot.integrators.pairs import FACTOR_MIN, adapt, scaled_rms

pytestmark = pytest.mark.skipif(not kernels.have_warp(), reason="needs warp-lang (the fast extra)")

ERRORS = [0.0, 1e-14, 3e-3, 0.7, 1.0, 1.0 + 1e-15, 4.0, 1e7, np.inf, np.nan]


def _controller_in_warp(order, err, err_prev, h, step, hit):
    from jaxrot.kernels._common import warp
    from jaxrot.kernels.generate_pieces import controller

    wp = warp()
    S = wp.float64
    control = controller(S, order)

    def run(err: wp.array(dtype=S), err_prev: wp.array(dtype=S), h: wp.array(dtype=S), step: wp.array(dtype=S),
            hit: wp.array(dtype=wp.int32), ok: wp.array(dtype=wp.int32), h_new: wp.array(dtype=S),
            e_new: wp.array(dtype=S)):
        i = wp.tid()
        a, b, c = control(err[i], err_prev[i], h[i], step[i], hit[i] != 0)
        ok[i] = wp.where(a, 1, 0)
        h_new[i] = b
        e_new[i] = c

    run.__name__ = run.__qualname__ = f"test_controller_{order}"
    kernel = wp.kernel(run, module="unique", enable_backward=False)
    n = len(err)
    arr = [wp.array(np.asarray(x, np.float64), dtype=S, device="cpu") for x in (err, err_prev, h, step)]
    outs = [wp.zeros(n, dtype=wp.int32, device="cpu"), wp.zeros(n, dtype=S, device="cpu"),
            wp.zeros(n, dtype=S, device="cpu")]
    wp.launch(kernel, dim=n, device="cpu", inputs=[*arr, wp.array(np.asarray(hit, np.int32), dtype=wp.int32,
                                                                    device="cpu"), *outs])
    return outs[0].numpy().astype(bool), outs[1].numpy(), outs[2].numpy()


@pytest.mark.parametrize("order", [3, 5])
def test_the_generated_controller_is_adapt(order):
    grid = np.array([(e, p, hit) for e in ERRORS for p in (1e-10, 0.37, 1.0) for hit in (0, 1)], np.float64)
    err, err_prev, hit = grid[:, 0], grid[:, 1], grid[:, 2].astype(bool)
    h = np.full(err.shape, 0.25)
    step = np.where(hit, 0.0625, h)
    got = _controller_in_warp(order, err, err_prev, h, step, hit)
    want = jax.vmap(lambda *a: adapt(order, *a))(*(jnp.asarray(x) for x in (err, err_prev, h, step, hit)))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, np.asarray(w))  # (the same bits: NaN where NaN)


def test_a_nonfinite_error_rejects_and_shrinks_the_step():
    for err in (np.inf, np.nan):
        ok, h_new, e = adapt(5, jnp.asarray(err), jnp.asarray(0.5), jnp.asarray(0.1), jnp.asarray(0.1),
                             jnp.asarray(False))
        assert not bool(ok) and float(h_new) == 0.1 * FACTOR_MIN and float(e) == 0.5


class NaNRejecting(EmbeddedPair):
    """buss4(3) whose error norm says NaN for every attempt it would reject."""

    def error_norm(self, y, y1, y_err, rtol, atol):
        err = scaled_rms(y, y1, y_err, rtol, atol)
        return jnp.where(err > 1.0, jnp.nan, err)


def test_a_pair_whose_norm_gives_nan_runs_on_both_loops_with_the_same_steps():
    """A too long first step (NaN error) is rejected and shrunk by FACTOR_MIN until one is accepted; the
    XLA loop and the kernel take the same steps."""
    p = jaxrot.problems.get("asymmetric_top")
    pair = NaNRejecting(jaxrot.get("buss4"), jaxrot.get("buss3"))
    runs = [jaxrot.simulate(pair, p, 0.5, t1=0.5, stepsize=jaxrot.Adaptive(1e-8, 1e-8), executor=ex,
                            saveat=jaxrot.SaveAt(t1=True), throw=False) for ex in (jaxrot.XLA(), jaxrot.Fused())]
    for tr in runs:
        assert tr.result == jaxrot.RESULTS.successful
        assert int(tr.controller.n_rejected) >= 1 and np.all(np.isfinite(np.asarray(tr.final.R)))
    assert int(runs[0].controller.n_accepted) == int(runs[1].controller.n_accepted)
    assert int(runs[0].controller.n_rejected) == int(runs[1].controller.n_rejected)
    np.testing.assert_allclose(np.asarray(runs[1].final.R), np.asarray(runs[0].final.R), rtol=0, atol=1e-12)



@pytest.mark.parametrize("name", ["buss4", "rkmk8"])
def test_the_generated_event_location_is_the_xla_loops(name):
    """The kernels' location of an event in its crossing step (generated from
    ``jaxrot.integrators.dense_output.locate``: the dense output's bisection and Newton step, and for
    rkmk8, of order above 4, the Newton steps on the method's own steps with the slope along its step)
    against that function in JAX on the same steps: the same times and states to a few roundings."""
    from jaxrot.integrators import dense_output
    from jaxrot.kernels import event_restate, generate, generate_dh, transpile
    from jaxrot.kernels._common import so3_funcs, warp
    from jaxrot.kernels.generate_pieces import locator

    wp = warp()
    S = wp.float64
    V, M = so3_funcs(S).V, so3_funcs(S).M
    p = jaxrot.problems.get("asymmetric_top")
    method, system = jaxrot.get(name), p.system
    n = 4
    rng = np.random.default_rng(1)
    R0 = jax.vmap(jaxrot.so3.exp)(jnp.asarray(0.4 * rng.normal(size=(n, 3)))) @ p.state0.R
    Pi0 = p.state0.Pi * jnp.asarray(1 + 0.1 * rng.normal(size=(n, 3)))
    tk = jnp.asarray(rng.uniform(0.0, 1.0, n))
    h = jnp.full((n,), 0.05)

    def one(t, R, Pi, hh):
        s0 = jaxrot.State(R, Pi)
        s1 = method.step(system, t, s0, method.init(system, t, s0, hh), hh)[0]
        return s1.R, s1.Pi

    R1, Pi1 = jax.vmap(one)(tk, R0, Pi0, h)

    def base(t, s):
        return s.R[2, 1] - 0.8 * s.R[0, 2] + 3.0 * t

    # a level per body that the condition crosses within its step: a closed-over array, read from Q
    level = 0.5 * (jax.vmap(lambda t, R, Pi: base(t, jaxrot.State(R, Pi)))(tk, R0, Pi0)
                   + jax.vmap(lambda t, R, Pi: base(t, jaxrot.State(R, Pi)))(tk + h, R1, Pi1))

    def cond_of(k):
        c = jnp.reshape(level[k], (1,))
        return lambda t, s, a: base(t, s) - c[0]

    low_t = transpile.lower(system.torque, jnp.float64)
    low = generate.lower(method, system, jnp.float64)
    init, step, _ = generate.funcs(S, low.key)

    @wp.func
    def one_step(R: M, Pi: V, t: S, h: S, J: V, P: wp.array(dtype=S)):
        A = init(R, Pi, J, P, h)
        R1, Pi1, A1 = step(R, Pi, A, t, h, J, P)
        return R1, Pi1

    polished = dense_output.polishes(method.order)
    keys = {event_restate.lower(cond_of(k), jnp.float64)[0] for k in range(n)}
    assert len(keys) == 1  # (one restatement: the level is a parameter)
    locate = locator(S, low_t.key, keys.pop(), one_step if polished else None,
                     generate_dh.step_dh(S, low.key) if polished else None)

    def run(tk: wp.array(dtype=S), h: wp.array(dtype=S), R0: wp.array(dtype=M), Pi0: wp.array(dtype=V),
            R1: wp.array(dtype=M), Pi1: wp.array(dtype=V), J: wp.array(dtype=V), P: wp.array(dtype=S),
            Q: wp.array(dtype=S), t_out: wp.array(dtype=S), R_out: wp.array(dtype=M), Pi_out: wp.array(dtype=V)):
        i = wp.tid()
        t, R, Pi = locate(tk[i], h[i], R0[i], Pi0[i], R1[i], Pi1[i], J[0], P, Q)
        t_out[i] = t
        R_out[i] = R
        Pi_out[i] = Pi

    run.__name__ = run.__qualname__ = f"test_locate_{name}"
    kernel = wp.kernel(run, module="unique", enable_backward=False)
    for k in range(n):
        t_out, R_out, Pi_out = (wp.zeros(1, dtype=T, device="cpu") for T in (S, M, V))
        arrs = [wp.array(np.asarray(x)[k:k + 1], dtype=T, device="cpu")
                for x, T in ((tk, S), (h, S), (R0, M), (Pi0, V), (R1, M), (Pi1, V))]
        # the parameters as a fused run lays them out: the method's in P, the condition's then the torque's in Q
        _, _, P, Q = (np.asarray(x) if i > 1 else x for i, x in
                      enumerate(kernels.event_parameters(system, jaxrot.Event(cond_of(k)), jnp.float64, low.params)))
        wp.launch(kernel, dim=1, device="cpu", inputs=[*arrs, wp.array(np.asarray(system.body.J)[None], dtype=V, device="cpu"),
                                                       wp.array(P, dtype=S, device="cpu"), wp.array(Q, dtype=S, device="cpu"),
                                                       t_out, R_out, Pi_out])
        t_ev, s_ev = dense_output.locate(lambda t, s: cond_of(k)(t, s, None), system, tk[k], h[k],
                                         jaxrot.State(R0[k], Pi0[k]), jaxrot.State(R1[k], Pi1[k]), jnp.asarray(True),
                                         dense_output.method_step(method))
        assert tk[k] < float(t_ev) < tk[k] + h[k]
        np.testing.assert_allclose(t_out.numpy()[0], float(t_ev), rtol=4e-16, atol=0)
        np.testing.assert_allclose(R_out.numpy()[0], np.asarray(s_ev.R), rtol=0, atol=1e-14)
        # (the momentum to 1e-14 of its size: a small component carries the large one's roundings)
        np.testing.assert_allclose(Pi_out.numpy()[0], np.asarray(s_ev.Pi), rtol=0,
                                   atol=1e-14 * float(np.max(np.abs(np.asarray(s_ev.Pi)))))


@jax.custom_jvp
def _length(h):
    return h


@_length.defjvp
def _length_jvp(primals, tangents):
    # the tangent itself (lgamma(1 + 1e-300 h) rounds to 0), written with a function the kernels do not
    # restate, of the step's length so that it is not computed when the source is written
    return primals[0], tangents[0] * jnp.exp(jax.lax.lgamma(1.0 + 1e-300 * primals[0]))


class DerivativeNotRestated(EmbeddedPair):
    """buss4(3) of undeclared order (its events are polished on its own steps), its steps' length passed
    through a function whose derivative the kernels cannot restate (its value they can)."""

    order = property(lambda self: None)

    def step_with_error(self, system, t, state, aux, dt):
        return super().step_with_error(system, t, state, aux, _length(dt))


def test_pairs_written_out_alike_keep_their_own_orders_and_derivatives():
    """A pair whose attempt writes out as another's (buss4(3) with its order undeclared and its step's
    derivative in its length not restatable) gets a generated pair of its own: met first, it does not
    decide the other's order or how the other's events are polished."""
    from jaxrot.kernels import adaptive_pairs, generate

    p = jaxrot.problems.get("asymmetric_top")
    odd = DerivativeNotRestated(jaxrot.get("buss4"), jaxrot.get("buss3"))
    name_odd, _ = adaptive_pairs.generated_pair(odd, p.system, jnp.float64)
    name, _ = adaptive_pairs.generated_pair(jaxrot.integrators.get("buss4(3)"), p.system, jnp.float64)
    pairs = adaptive_pairs.GENERATED_PAIRS
    assert name != name_odd and (pairs[name].high_order, pairs[name_odd].high_order) == (4, None)
    assert generate.polish_reason(jaxrot.integrators.get("buss4(3)"), p.system, jnp.float64, pair=True) is None
    assert "lgamma" in generate.polish_reason(odd, p.system, jnp.float64, pair=True)


def test_an_event_the_kernel_cannot_polish_is_refused_and_located_by_the_xla_loop():
    """An event located on a method's own steps needs its step's derivative in the step's length; where
    that cannot be restated (though the step can), ``Fused()`` refuses the run naming why, and the
    automatic choice runs it on the XLA loop instead of failing when the kernel is built."""
    p = jaxrot.problems.get("asymmetric_top")
    pair = DerivativeNotRestated(jaxrot.get("buss4"), jaxrot.get("buss3"))
    event = jaxrot.Event(lambda t, s, a: s.R[1, 1] - 0.5)
    run = dict(t1=3.0, stepsize=jaxrot.Adaptive(1e-8, 1e-8), saveat=jaxrot.SaveAt(t1=True))
    assert jaxrot.simulate(pair, p, **run, executor=jaxrot.Fused()).info["executor"] == "Fused"  # its step is
    with pytest.raises(ValueError, match="derivative in its length.*lgamma"):
        jaxrot.simulate(pair, p, **run, event=event, executor=jaxrot.Fused())
    auto = jaxrot.simulate(pair, p, **run, event=event)
    xla = jaxrot.simulate(pair, p, **run, event=event, executor=jaxrot.XLA())
    assert auto.info["executor"] == "XLA"
    assert np.isfinite(float(auto.event_time)) and float(auto.event_time) == float(xla.event_time)


def _checked_afresh(monkeypatch, verdicts: str, moved: bool):
    """No verdict kept in this process (``generate_checks``' table ``verdicts`` emptied) or on disk; with
    ``moved`` the JAX side of the comparison moved by 1e-9 relative."""
    from jaxrot.kernels import generate, generate_checks

    monkeypatch.setattr(generate, "_LOWERED", {})
    monkeypatch.setattr(generate_checks, verdicts, {})
    monkeypatch.setenv("JAXROT_KEEP_CHECKS", "off")
    if moved:
        exact = generate_checks.reference_values
        monkeypatch.setattr(generate_checks, "reference_values",
                            lambda fn, *a: jax.tree_util.tree_map(lambda x: x * (1 + 1e-9), exact(fn, *a)))


@pytest.mark.parametrize("with_event", [False, True], ids=["plain", "event"])
def test_the_step_is_checked_on_the_kernel_the_run_launches(monkeypatch, with_event):
    """A generated step is compared with its JAX code on the kernel its run launches (with an event,
    the event's kernel: no second kernel is compiled for the check), and refused where the two differ
    (here the JAX side moved by 1e-9 relative)."""
    from jaxrot.kernels import fixed_loop

    p = jaxrot.problems.get("buss_torqued")  # (a torque with parameters: the dense output reads them from Q)
    event = jaxrot.Event(lambda t, s, a: s.R[2, 2] - 0.9) if with_event else None
    built = []
    kernel = fixed_loop.kernel
    monkeypatch.setattr(fixed_loop, "kernel", lambda *key: built.append(key) or kernel(*key))
    for moved in (False, True):
        _checked_afresh(monkeypatch, "_CHECKED", moved)
        built.clear()
        why = kernels.why_not("rkmk8", p.system, event)
        assert (why is not None and "differs from the JAX code" in why) if moved else why is None, why
        assert [k[2] is not None for k in built] == [with_event]  # (dtype, step, event, given): one kernel


@pytest.mark.parametrize("with_event", [False, True], ids=["plain", "event"])
def test_a_pairs_attempt_is_checked_in_the_module_of_its_plain_kernel(monkeypatch, with_event):
    """The kernel checking a pair's generated attempt against its JAX code shares one Warp module with
    the pair's kernel without an event: a first fused error-controlled run compiles the long attempt
    once. A run with an event launches another kernel: the check is then compiled alone, and the plain
    kernel not at all. The check still refuses an attempt that differs from the JAX code (here by 1e-9
    relative)."""
    import warp._src.context as wctx

    from jaxrot.kernels import adaptive_pairs, generate

    from .helpers import user_pair

    pair = user_pair()
    p = jaxrot.problems.get("fast_top")
    B = 4
    s0 = jaxrot.State(jnp.broadcast_to(p.state0.R, (B, 3, 3)), p.state0.Pi * jnp.linspace(0.8, 1.2, B)[:, None])
    event = jaxrot.Event(lambda t, s, a: s.R[2, 2] - 0.9) if with_event else None
    loaded = []
    load = wctx.Module.load
    monkeypatch.setattr(wctx.Module, "load", lambda self, *a, **k: loaded.append(self.name) or load(self, *a, **k))
    for moved in (False, True):
        _checked_afresh(monkeypatch, "_CHECKED_PAIRS", moved)
        loaded.clear()
        why = adaptive_pairs.why_not_adaptive(pair, p.system, event)
        if moved:
            assert why is not None and "differs from the JAX code" in why, why
            continue
        assert why is None, why
        run = jaxrot.simulate(pair, p, t1=0.5, state0=s0, stepsize=jaxrot.Adaptive(1e-8, 1e-8), event=event,
                              executor=jaxrot.Fused())
        assert run.info["executor"] == "Fused" and np.isfinite(np.asarray(run.final.R)).all()
        key = generate.lower_pair(pair, p.system, jnp.float64).key
        shared = {n for n in loaded if n.startswith(f"jaxrot_attempt_gen_{key}_float64_q")}
        alone = {n for n in loaded if n.startswith(f"attempt_{key}_float64_")}  # (a module of its own)
        launched = {n for n in loaded if n.startswith(f"adaptive_gen_{key}_float64_")}  # (the event's kernel)
        # (with an event: the check's module and the event kernel's; without: the one shared module)
        assert (len(shared), len(alone), len(launched)) == ((0, 1, 1) if with_event else (1, 0, 0)), sorted(set(loaded))


def test_a_differentiated_first_call_compiles_no_plain_kernel(monkeypatch):
    """Under jax.jit around jax.grad, JAX traces the fused run's primal function without running it,
    and the run launches the kernel that keeps its record and the derivative kernels: the pair's plain
    kernel (with the check's module it would share) is not compiled; the check is compiled alone."""
    import warp._src.context as wctx

    from jaxrot.kernels import generate

    from .helpers import user_pair

    pair = user_pair()
    p = jaxrot.problems.get("fast_top")
    B = 4
    s0 = jaxrot.State(jnp.broadcast_to(p.state0.R, (B, 3, 3)), p.state0.Pi * jnp.linspace(0.8, 1.2, B)[:, None])
    loaded = []
    load = wctx.Module.load
    monkeypatch.setattr(wctx.Module, "load", lambda self, *a, **k: loaded.append(self.name) or load(self, *a, **k))
    _checked_afresh(monkeypatch, "_CHECKED_PAIRS", False)

    def loss(Pi0):
        run = jaxrot.simulate(pair, p, t1=0.5, state0=jaxrot.State(s0.R, Pi0), stepsize=jaxrot.Adaptive(1e-8, 1e-8),
                              executor=jaxrot.Fused())
        return jnp.sum(run.final.R[:, 2, :]) + jnp.sum(run.final.Pi ** 2)

    g = jax.jit(jax.grad(loss))(s0.Pi)
    assert np.isfinite(np.asarray(g)).all() and float(jnp.max(jnp.abs(g))) > 0
    key = generate.lower_pair(pair, p.system, jnp.float64).key
    shared = {n for n in loaded if n.startswith(f"jaxrot_attempt_gen_{key}_float64_q")}
    alone = {n for n in loaded if n.startswith(f"attempt_{key}_float64_")}
    recorded = {n for n in loaded if n.startswith(f"adaptive_gen_{key}_float64_rec")}
    assert (len(shared), len(alone), len(recorded)) == (0, 1, 1), sorted(set(loaded))
