"""Kernels generated from a method's own JAX code (jaxrot.kernels.generate) against the XLA loop.

Every registered method is enrolled: its generated kernel agrees with the XLA run (1e-12 relative
after 60 float64 steps; implicit methods to their Newton tolerance). A method written here, outside the package (a third-order
Crouch-Grossman step), runs fused with no line of Warp written for it.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import State, integrators, kernels, so3
from jaxrot.driver import failures
from jaxrot.kernels import adaptive, adaptive_pairs, generate

from .helpers import user_pair

pytestmark = pytest.mark.skipif(not kernels.have_warp(), reason="needs warp-lang (the fast extra)")

#: one method of each family the kernel table does not enrol in the default run (each is a Warp
#: compilation of its own, 1-8 s on an empty cache; tests/test_kernels.py runs the enrolled ones, Buss's,
#: the splittings, DMV and the energy projection, through the same generated kernels); the slow tier runs
#: every registered method
DEFAULT = {"lie_taylor3", "rkmk4", "rkmk8(5)", "simo_wong_explicit", "liemid_ea", "midpoint_exp", "nmb", "rk4_svd"}


def _problem(name):
    return jaxrot.problems.get("fast_top" if integrators.REGISTRY[name].torque else "free_body_mz")


def _batch(p, n=3, dtype=jnp.float64):
    scale = jnp.linspace(0.8, 1.2, n, dtype=dtype)[:, None]
    R0 = jnp.stack([so3.exp(jnp.asarray([0.1 * k, -0.2, 0.05 * k], dtype)) for k in range(n)]) @ p.state0.R.astype(dtype)
    return State(R0, p.state0.Pi.astype(dtype) * scale)


def _compare(method, p, dtype=jnp.float64, n_steps=60, every=20, dt=1e-3, rtol=1e-12):
    s0 = _batch(p, dtype=dtype)
    kw = dict(state0=s0, saveat=jaxrot.SaveAt(steps=every))
    fused = jaxrot.simulate(method, p, jnp.asarray(dt, dtype), n_steps, executor=jaxrot.Fused(), **kw)
    xla = jaxrot.simulate(method, p, jnp.asarray(dt, dtype), n_steps, executor=jaxrot.XLA(), **kw)
    assert dict(fused.provenance)["executor"].startswith("Fused"), dict(fused.provenance)
    for a, b in ((fused.states.R, xla.states.R), (fused.states.Pi, xla.states.Pi)):
        scale = float(jnp.max(jnp.abs(b)))
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=rtol * scale)
    assert np.all(np.asarray(fused.failed_step) == -1)


@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if n in DEFAULT else [pytest.mark.slow])
                                  for n in integrators.REGISTRY])
def test_every_method_runs_generated(name):
    m, p = integrators.get(name), _problem(name)
    # (every one: a splitting's exact flows are one called function, a composition's stages one loop)
    assert generate.reason(m, p.system, jnp.float64) is None
    # (the kernel itself: an error-controlled pair's constant-step run too)
    low = generate.lower(m, p.system, jnp.float64)
    s0 = _batch(p)
    dt, t0 = jnp.asarray(1e-3), jnp.asarray(0.0)
    R, Pi, failed, code = kernels._launch(("float64", low.key, None, False), s0, dt, t0, p.system, low.params, 3, 20)
    xla = jaxrot.simulate(m, p, dt, 60, state0=s0, saveat=jaxrot.SaveAt(steps=20, t0=False), executor=jaxrot.XLA())
    rtol = 1e-10 if m.implicit else 1e-12  # (Newton iterations stop at a tolerance, not at one rounding)
    np.testing.assert_allclose(np.asarray(Pi), np.asarray(xla.states.Pi), rtol=0,
                               atol=rtol * float(jnp.max(jnp.abs(xla.states.Pi))))
    np.testing.assert_allclose(np.asarray(R), np.asarray(xla.states.R), rtol=0, atol=rtol)
    assert np.all(np.asarray(failed) == -1) and np.all(np.asarray(code) == 0)


def test_methods_the_automatic_choice_does_not_fuse_run_fused_through_simulate():
    _compare("lie_taylor3", jaxrot.problems.get("fast_top"))
    _compare("liemid_ea", jaxrot.problems.get("fast_top"), rtol=1e-10)


def test_float32():
    _compare("rkmk4", jaxrot.problems.get("fast_top"), dtype=jnp.float32, rtol=2e-5)


def test_the_result_codes_are_the_drivers():
    assert generate.SOLVE_FAILED == failures.SOLVE_FAILED
    assert generate.NONFINITE_STATE == failures.NONFINITE_STATE


def test_a_failed_newton_solve_is_reported_per_body():
    from jaxrot.integrators import MidpointExp
    from jaxrot.integrators.newton import Newton

    m = MidpointExp(newton=Newton(max_iters=2))  # too few iterations for the faster bodies' steps
    p = jaxrot.problems.get("free_body_mz")
    s0 = State(jnp.stack([p.state0.R] * 3), p.state0.Pi * jnp.array([[1e-3], [1.0], [30.0]]))
    kw = dict(state0=s0, throw=False, saveat=jaxrot.SaveAt(steps=2))
    fused = jaxrot.simulate(m, p, 0.1, 4, executor=jaxrot.Fused(), **kw)
    xla = jaxrot.simulate(m, p, 0.1, 4, executor=jaxrot.XLA(), **kw)
    assert np.array_equal(np.asarray(fused.result._value), np.asarray(xla.result._value))
    assert np.array_equal(np.asarray(fused.failed_step), np.asarray(xla.failed_step))
    assert np.asarray(fused.result._value).tolist()[0] == failures.SUCCESSFUL
    assert failures.SOLVE_FAILED in np.asarray(fused.result._value).tolist()




def test_a_method_written_outside_the_package_runs_fused_with_constant_steps():
    p = jaxrot.problems.get("fast_top")
    m = user_pair()
    assert kernels.supports(m, p.system) and kernels.keeps_stats(m, p.system)
    _compare(m, p)
    # third order: the error at t = 0.5 falls by 2^3 when the step is halved
    ref = jaxrot.simulate("rkmk8", p, 1e-3, 500, executor=jaxrot.XLA()).final.Pi
    errs = [float(jnp.max(jnp.abs(jaxrot.simulate(m, p, 0.5 / n, n, executor=jaxrot.Fused()).final.Pi - ref)))
            for n in (25, 50, 100)]
    slopes = np.diff(np.log(errs)) / np.log(0.5)
    assert np.all(np.abs(slopes - 3) < 0.15), (errs, slopes)


def test_a_pair_written_outside_the_package_runs_fused_with_error_control_and_an_event():
    p = jaxrot.problems.get("fast_top")
    m = user_pair()
    s0 = _batch(p, n=4)
    flip = jaxrot.Event(lambda t, s, args: s.R[0, 0] - 0.5, direction=-1, terminal=True)  # the spin turns the x axis
    kw = dict(state0=s0, t1=0.5, stepsize=jaxrot.Adaptive(rtol=1e-7, atol=1e-7), event=flip,
              saveat=jaxrot.SaveAt(ts=jnp.linspace(0.1, 0.5, 5)))
    assert adaptive.supports_adaptive(m, p.system, flip)
    fused = jaxrot.simulate(m, p, executor=jaxrot.Fused(), **kw)
    xla = jaxrot.simulate(m, p, executor=jaxrot.XLA(), **kw)
    assert dict(fused.provenance)["executor"].startswith("Fused")
    np.testing.assert_array_equal(np.asarray(fused.controller.n_accepted), np.asarray(xla.controller.n_accepted))
    np.testing.assert_allclose(np.asarray(fused.event_time), np.asarray(xla.event_time), rtol=1e-10)
    assert np.all(np.isfinite(np.asarray(fused.event_time)))
    np.testing.assert_allclose(np.asarray(fused.states.Pi), np.asarray(xla.states.Pi), rtol=0,
                               atol=1e-9 * float(jnp.max(jnp.abs(xla.states.Pi))))


@pytest.mark.parametrize("name", ["lie_taylor5(4)", pytest.param("buss4(3)", marks=pytest.mark.slow)])
def test_registered_pairs_take_their_generated_attempt(name):
    """Registered pairs run with their attempt generated (lie_taylor5(4) torque-free, buss4(3) with the
    Coulomb wall's torque), the same steps as XLA's loop."""
    p = jaxrot.problems.get("coulomb_wall" if name == "buss4(3)" else "free_body_mz")
    m = integrators.get(name)
    assert adaptive_pairs.attempt_within(m, p.system, None, 10_000)
    kw = dict(state0=_batch(p), t1=1.0, stepsize=jaxrot.Adaptive(rtol=1e-8, atol=1e-8))
    fused = jaxrot.simulate(name, p, executor=jaxrot.Fused(), **kw)
    xla = jaxrot.simulate(name, p, executor=jaxrot.XLA(), **kw)
    np.testing.assert_array_equal(np.asarray(fused.controller.n_accepted), np.asarray(xla.controller.n_accepted))
    np.testing.assert_allclose(np.asarray(fused.states.Pi), np.asarray(xla.states.Pi), rtol=0,
                               atol=1e-11 * float(jnp.max(jnp.abs(xla.states.Pi))))


def test_the_choice_asked_again_does_not_count_the_source_again():
    """The automatic choice asks at every call whether an attempt's source is short enough to fuse
    (:func:`jaxrot.kernels.generate.written_within`); the counted length is kept per source, not read
    again from its text at each call."""
    from jaxrot.kernels import jaxpr_calls

    jaxpr_calls.counted_lines.cache_clear()
    m, p = integrators.get("lie_taylor5(4)"), jaxrot.problems.get("free_body_mz")
    answers = [adaptive_pairs.attempt_within(m, p.system, None, 10_000) for _ in range(3)]
    assert answers == [True] * 3
    info = jaxpr_calls.counted_lines.cache_info()
    assert (info.misses, info.hits) == (1, 2), info


def test_a_loop_tried_and_written_out_counts_once_towards_the_fusion_limit():
    """The bound on a source written to decide the default fusion (``generate._Bounded``, for
    :func:`~jaxrot.kernels.generate.written_within`) counts the lines the source keeps: a loop tried and
    undone (its body needs the pass's count as an index) and written out pass by pass counts once."""
    from jax import lax

    from jaxrot.kernels import jaxpr_warp
    from jaxrot.kernels.jaxpr_inputs import named

    def indexed(a, b):
        def body(i, x):
            for _ in range(10):
                x = jnp.sin(x) + 0.1
            return x.at[i % 3].multiply(0.9)
        return lax.fori_loop(0, 16, body, jnp.stack([a, b, a * b]))

    closed = jax.make_jaxpr(indexed)(0.0, 0.0)

    def write(g):
        ins = [named(lambda i, a=a: a, ()) for a in ("a0", "a1")]
        jaxpr_warp.restate(g, closed.jaxpr, [g.array(np.asarray(c)) for c in closed.consts], ins)
        return g.lines

    kept = write(jaxpr_warp.Source(True))
    assert not any("for _k" in line for line in kept) and len(kept) > 16 * 10 * 3  # (written out)
    assert len(write(generate._Bounded(True, len(kept)))) == len(kept)
    with pytest.raises(generate._TooLong):
        write(generate._Bounded(True, len(kept) - 1))


def test_the_automatic_choice_keeps_xla_where_only_a_generated_kernel_runs_the_job():
    """rk4 is enrolled (jaxrot.kernels.KERNELS) with gravity, not with the Coulomb wall's torque: a batch
    large enough to be fused automatically (10^5 body-steps) stays on XLA there, as for a method that is
    not enrolled; with gravity it is fused."""
    wall, top = jaxrot.problems.get("coulomb_wall"), jaxrot.problems.get("fast_top")
    for p, want in ((wall, "Sharded"), (top, "Fused")):
        s0 = State(jnp.broadcast_to(p.state0.R, (100, 3, 3)), jnp.broadcast_to(p.state0.Pi, (100, 3)))
        got = dict(jaxrot.simulate("rk4", p, 1e-3, 1000, state0=s0).provenance)["executor"]
        assert got.startswith(want), (p.name, got)


def test_a_step_traced_with_its_calls_is_written_as_the_step_traced_in_place(monkeypatch):
    """The generator traces SO(3)'s functions as calls (:func:`jaxrot.kernels.jaxpr_inputs.jaxpr_of`) and
    writes them out in place: the source of the step traced with its bodies in place, character for
    character, for a method whose step nothing transforms (``rkmk4``: its trace keeps the calls) and
    for one that differentiates inside (``liemid_ea``'s Newton iteration: its first trace is given up
    and made in place). (Every registered method and pair, with their derivatives:
    ``benchmarks/generated_sources.py``.)"""
    import contextlib

    from jaxrot.geometry import series
    from jaxrot.kernels import jaxpr_inputs

    p = jaxrot.problems.get("fast_top")
    watches = []

    @contextlib.contextmanager
    def recorded():
        with series.watched() as w:
            watches.append(w)
            yield w

    @contextlib.contextmanager
    def in_place():  # (a trace as if a transformation had been met: made again in place)
        w = series.Watch()
        w.seen = True
        yield w

    def source(name, watching):
        watches.clear()
        with monkeypatch.context() as m:
            m.setattr(jaxpr_inputs, "watched", watching)
            key = generate._generate(integrators.get(name), p.system, jnp.float64, False)[0]
        return generate._SOURCES[key]

    for name, met in (("rkmk4", False), ("liemid_ea", True)):
        with_calls = source(name, recorded)
        assert watches and any(w.seen for w in watches) == met, name
        assert with_calls == source(name, in_place), name


@jax.jit
def _euler_substeps(Pi, J, h):
    """Euler's equations by 100 explicit substeps: a called function long enough to be outlined."""
    for _ in range(100):
        Pi = Pi + (h / 100) * jnp.cross(Pi, Pi / J)
    return Pi


class _TwiceCalled(integrators.AbstractIntegrator):
    """A step that calls one long function twice (as a splitting applies the exact flow)."""

    order = 1
    torque = False

    def step(self, system, t, state, aux, dt):
        J = system.body.J
        Pi = _euler_substeps(state.Pi, J, 0.5 * dt)
        E = so3.exp(dt * Pi / J)
        return State(state.R @ E, _euler_substeps(E.T @ Pi, J, 0.5 * dt)), aux, jaxrot.StepStats.explicit()


def test_a_long_called_function_is_one_warp_function_called_at_each_use(monkeypatch):
    """A ``jax.jit`` function of many equations applied more than once (the exact flow, in the
    splittings) is restated once, as a Warp function the step calls at each use; the run equals the XLA
    loop's, and the step counts its lines at each call towards splitting a batch over the cores."""
    from jaxrot.kernels import adaptive_tangents, jaxpr_calls

    p, m = jaxrot.problems.get("free_body_mz"), _TwiceCalled()
    key = generate._generate(m, p.system, jnp.float64)[0]
    src = generate._SOURCES[key][0]
    assert src.count("def fn") == 1 and src.count("fn0(") == 3, src[:2000]
    _compare(m, p)
    monkeypatch.setattr(jaxpr_calls, "OUTLINE_EQUATIONS", 10 ** 9)
    in_place = generate._generate(m, p.system, jnp.float64)[0]
    assert "def fn" not in generate._SOURCES[in_place][0]
    assert generate._SOURCES[in_place][0].count("\n") > 1.7 * src.count("\n")
    assert abs(generate.split_weight(key) / generate.split_weight(in_place) - 1) < 0.05
    monkeypatch.undo()
    # the exact flow: written in place where a step applies it once, one function for a splitting's three
    once = generate._SOURCES[generate._generate(integrators.get("exact_free"), p.system, jnp.float64)[0]][0]
    top = jaxrot.problems.get("fast_top").system
    thrice = generate._SOURCES[generate._generate(integrators.get("saba2"), top, jnp.float64)[0]][0]
    assert "def fn" not in once and thrice.count("def fn") == 1 and thrice.count("fn0(") == 4
    # the flow's short loops are one loop each, counted at each pass for what compiling costs: the
    # splitting's step carrying tangents (forward mode) is refused where, written out, it would be past the limit
    assert once.count("for _k") >= 3 and jaxpr_calls.counted_lines(once)[1] > 3 * once.count("\n")
    assert "its loops counted at each pass" in adaptive_tangents.carried_reason(integrators.get("saba2"), top,
                                                                                 jnp.float64, pair=False)
    # a long body (a composition's stage) compiles once: its lines count once
    body = lambda n: "".join(f"        v{k} = v{k} * S(2.0)\n" for k in range(n))  # noqa: E731
    short, long = (f"def step(x: S):\n    for _k0 in range(16):\n{body(n)}    return x\n" for n in (2, 1001))
    assert jaxpr_calls.counted_lines(short) == (16 * 2 + 2, 16 * 2 + 2)  # (the header and the return once)
    assert jaxpr_calls.counted_lines(long) == (16 * 1001 + 2, 1001 + 2)
