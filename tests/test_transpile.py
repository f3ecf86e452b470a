"""Plain-function torques restated as Warp functions (jaxrot.kernels.transpile).

Each torque below is evaluated by its Warp restatement at random points and compared with the JAX
function itself (float64: a few roundings; the two codes may order sums and fuse multiply-adds
differently). The integration runs of rk4, euler_quat and rkmk8 with a plain-function torque are in
tests/test_kernels.py (torque kind "user"), generated from the kernel registry.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jaxrot
from jaxrot import kernels, so3
from jaxrot.kernels import jaxpr_warp, transpile
from jaxrot.physics.problems import Problem, RigidBody

pytestmark = pytest.mark.skipif(not kernels.have_warp(), reason="needs warp-lang (the fast extra)")

J = jnp.array([4.6, 4.3, 1.8])
UP = jnp.array([0.0, 0.0, 1.0])


def elementary(t, R, Pi):
    """Element-wise functions, comparisons, selects, powers, reductions and indexing."""
    w = R @ (Pi / J.astype(Pi.dtype))
    s = jnp.linalg.norm(Pi)
    a = jnp.where(t > 0.5, jnp.tanh(w), jnp.exp(-jnp.abs(w)))
    b = jnp.clip(Pi, -1.0, 2.0) ** 3 + jnp.sqrt(1.0 + Pi ** 2) + (1.0 + s) ** -2 + (2.0 + Pi ** 2) ** 0.5
    c = jnp.stack([jnp.arctan2(Pi[1], Pi[0]), jnp.arcsin(jnp.clip(R[2, 0], -1, 1)), jnp.cosh(0.1 * Pi[2])])
    d = jnp.sum(R, axis=0) * jnp.max(Pi) - jnp.min(R[2]) * jnp.sign(Pi) + jnp.log1p(jnp.abs(Pi))
    e = -20.0 * jnp.cross(R[:, 2], UP.astype(R.dtype)) + jnp.maximum(Pi, 0.5) * jnp.minimum(w, -0.5)
    return a + b + c + d + e + jnp.sin(3.0 * t) * jnp.cos(Pi) + 0.25 * jnp.square(Pi) / (2 + t)


def special(t, R, Pi):
    """The other elementary functions, a traced exponent, remainders, rounding, finiteness, sign at 0."""
    x = 0.3 * Pi
    a = jnp.tan(x) + jnp.arccos(jnp.clip(R[0], -1, 1)) + jnp.arctan(Pi) + jnp.sinh(x) + jnp.cbrt(Pi)
    b = jax.scipy.special.erf(x) + jnp.exp2(x) + jnp.expm1(x) + jax.nn.sigmoid(Pi) + jnp.floor(Pi) * jnp.ceil(x)
    c = jnp.remainder(Pi, 1.3) + jnp.fmod(Pi, 0.7) + (1.0 + R[1] ** 2) ** t + jnp.isfinite(Pi / t).astype(Pi.dtype)
    d = jnp.sign(jnp.floor(0.2 * Pi)) + jnp.sign(R[2]) + 1 / jnp.sqrt(2.0 + Pi * Pi) + jnp.log(2.0 + jnp.abs(x))
    return a + b + c + d


@jax.custom_vjp
def _clipped(x):
    return jnp.clip(x, -2.0, 2.0)


_clipped.defvjp(lambda x: (_clipped(x), x), lambda x, g: (g,))


def edges(t, R, Pi):
    """NaN propagation (max, min, clamp, sign, argmax), small arguments of log1p and expm1, a float32
    rounding inside a float64 function, integer powers, custom derivatives, checkpointing, products,
    dynamic slices at constant offsets, splits, reversals."""
    x = 1e-9 * Pi
    a = jnp.log1p(x) / 1e-9 + jnp.expm1(x) / 1e-9 + (Pi.astype(jnp.float32).astype(Pi.dtype) - Pi) * 1e7
    m = jnp.maximum(Pi, 0.5) + jnp.minimum(Pi, -0.5) + lax.clamp(jnp.asarray(-1.0, Pi.dtype), Pi, jnp.asarray(1.0, Pi.dtype)) + jnp.sign(Pi) + jnp.max(Pi)
    k = jnp.argmax(Pi).astype(jnp.int32)
    b = Pi * (k ** 2).astype(Pi.dtype) + lax.pow(jnp.abs(Pi) + 1.0, k) + jnp.maximum(Pi > 0, Pi > 1).astype(Pi.dtype)
    c = jax.nn.relu(Pi) + jax.nn.softplus(Pi) + _clipped(Pi) + jax.checkpoint(jnp.sin)(Pi) + jnp.prod(R, axis=1)
    d = lax.dynamic_slice(jnp.concatenate([Pi, Pi]), (2,), (3,)) + jnp.flip(Pi) + jnp.concatenate(jnp.split(R[0], 3))
    return a + m + b + c + d


def structural(t, R, Pi, args):
    """A body-frame torque with a PyTree of parameters: contractions, reshapes, transposes, outer
    products, concatenation, integer ranges, arg-extrema, booleans converted to numbers, a cond."""
    K, v = args["K"], args["v"]
    M = jnp.einsum("ij,jk->ik", R.T, K) @ R
    outer = jnp.outer(Pi, v).reshape(9).reshape(3, 3).T
    flags = (jnp.arange(3) == jnp.argmax(jnp.array([1.0, 3.0, 2.0]))).astype(Pi.dtype)  # constant-folded
    flags = flags + (jnp.arange(3) == jnp.argmin(Pi)).astype(Pi.dtype)
    flags = flags + lax.cond(t > 1.0, lambda p: -p, lambda p: 2 * p, Pi)
    big = jnp.logical_and(Pi > 0.0, jnp.abs(Pi) < 5.0)
    top = jnp.concatenate([Pi[:1], jnp.dot(v, Pi)[None], jnp.trace(M)[None]])
    frob = jnp.linalg.norm(R - jnp.eye(3, dtype=R.dtype))
    return M @ Pi + outer @ v + flags * jnp.where(big, 1.0, -1.0) + 0.1 * top + frob


def _points(dtype, n=40, seed=0):
    rng = np.random.default_rng(seed)
    t = rng.uniform(0.0, 2.0, n)
    R = np.asarray(jax.vmap(jaxrot.so3.exp)(jnp.asarray(rng.normal(size=(n, 3)))))
    Pi = 3.0 * rng.normal(size=(n, 3))
    return t.astype(dtype), R.astype(dtype), Pi.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("which", ["elementary", "special", "edges", "structural"])
def test_restatement_equals_the_function(which, dtype):
    if which != "structural":
        torque = jaxrot.Torque({"elementary": elementary, "special": special, "edges": edges}[which])
    else:
        rng = np.random.default_rng(3)
        torque = jaxrot.Torque(structural, frame="body",
                               args={"K": jnp.asarray(rng.normal(size=(3, 3))), "v": jnp.asarray(rng.normal(size=3))})
    torque = jax.tree_util.tree_map(lambda x: x.astype(dtype) if isinstance(x, jax.Array) else x, torque)
    t, R, Pi = _points(dtype)
    Pi[0, 1] = np.nan  # (NaN propagates as in lax)
    got = transpile.evaluate(torque, t, R, Pi)
    with jax.default_matmul_precision("highest"):  # a GPU's default rounds float32 products to TF32
        want = np.asarray(jax.vmap(torque)(jnp.asarray(t), jnp.asarray(R), jnp.asarray(Pi)))
    assert got.dtype == dtype and got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.all(np.isnan(want[0])) or which != "edges"
    got, want = got[1:], want[1:]
    eps = np.finfo(dtype).eps
    scale = np.max(np.abs(want), axis=1, keepdims=True)
    # a few hundred operations per value, summed and fused in another order; measured: at most 2.0 eps
    # of the row's size (both precisions)
    worst = float(np.max(np.abs(got - want) / scale))
    assert worst <= 16 * eps, worst / eps


def test_parameters_enter_by_value_not_by_source():
    """The source depends on the function and the parameters' shapes: new values reuse the kernel,
    and the parameter array carries them (so they can be traced, e.g. under jax.grad)."""
    f = lambda t, R, Pi, c: -c * (R @ (Pi / J))  # noqa: E731
    a, b = jaxrot.Torque(f, args=jnp.asarray(0.1)), jaxrot.Torque(f, args=jnp.asarray(0.7))
    la, lb = transpile.lower(a, jnp.float64), transpile.lower(b, jnp.float64)
    assert la.key == lb.key and la.source == lb.source
    np.testing.assert_array_equal(np.asarray(la.params), [4.6, 4.3, 1.8, 0.1])  # constants, then args
    np.testing.assert_array_equal(np.asarray(lb.params), [4.6, 4.3, 1.8, 0.7])
    t, R, Pi = _points(np.float64, n=5)
    np.testing.assert_allclose(transpile.evaluate(b, t, R, Pi), 7 * transpile.evaluate(a, t, R, Pi), rtol=1e-14)
    # traced parameters: the array is built inside jit
    P = jax.jit(lambda c: transpile.lower(jaxrot.Torque(f, args=c), jnp.float64).params)(jnp.asarray(0.3))
    np.testing.assert_array_equal(np.asarray(P), [4.6, 4.3, 1.8, 0.3])


def test_python_numbers_in_args_are_part_of_the_key():
    """A Python number in ``args`` is written into the source: another value is another restatement."""
    f = lambda t, R, Pi, c: -c * Pi  # noqa: E731
    a, b = jaxrot.Torque(f, args=0.1), jaxrot.Torque(f, args=0.7)
    assert transpile.key_of(a, jnp.float64) != transpile.key_of(b, jnp.float64)
    t, R, Pi = _points(np.float64, n=4)
    np.testing.assert_allclose(transpile.evaluate(b, t, R, Pi), -0.7 * Pi, rtol=1e-15)
    np.testing.assert_allclose(transpile.evaluate(a, t, R, Pi), -0.1 * Pi, rtol=1e-15)


def test_a_wrong_restatement_stays_on_xla(monkeypatch):
    """The restatement is compared with the function at random points before it is used: a template
    made wrong on purpose (subtraction written as addition) is refused, not run."""
    monkeypatch.setitem(jaxpr_warp.BINARY, "sub", "({0} + {1})")

    def fn(t, R, Pi):
        return Pi - R[0]

    torque = jaxrot.Torque(fn)
    why = transpile.reason(torque, jnp.float64)
    assert why is not None and "differs" in why, why
    assert kernels.torque_kind(torque) is None


def _sort(t, R, Pi):  # the order of the components changes with the state: a sorting network
    return jnp.sort(Pi)


def _gather(t, R, Pi):  # an index known only when the step runs: restated as a choice among the cases
    return Pi * Pi[jnp.argmax(jnp.abs(Pi))]


def _eigh(t, R, Pi):
    return Pi * jnp.linalg.eigvalsh(R + R.T)[0]


def _random(t, R, Pi):
    return jax.random.normal(jax.random.key(0), (3,)) * Pi


@pytest.mark.parametrize("fn,names", [(_eigh, "eigh"), (_random, ("random", "key"))])
def test_an_unsupported_function_stays_on_xla(fn, names):
    torque = jaxrot.Torque(fn)
    why = transpile.reason(torque, jnp.float64)
    assert why is not None and any(n in why for n in np.atleast_1d(names)), why
    body = RigidBody(J)
    p = Problem(body, torque, jaxrot.State(jnp.eye(3), jnp.array([0.3, -1.0, 2.0])), t_end=1.0)
    assert kernels.torque_kind(torque) is None and not kernels.supports("rkmk8", p.system)
    # asked for explicitly, the fused executor refuses with the reason; the automatic choice runs XLA
    with pytest.raises(ValueError, match="Fused\\(\\) cannot run this job: .*cannot be restated"):
        jaxrot.simulate("rkmk8", p, 0.1, 5, executor=jaxrot.Fused())
    sol = jaxrot.simulate("rkmk8", p, 0.1, 5)
    assert sol.info["executor"] == "XLA" and np.all(np.isfinite(np.asarray(sol.states.Pi)))


def test_without_warps_cpu_compiler_a_restatement_is_refused_with_the_reason(monkeypatch):
    """A restated torque or event condition is compared with the function on the CPU, on a GPU machine
    too: a Warp whose CPU compiler did not load gets that reason from a fixed-step, an adaptive and an
    event run, not Warp's internal error (seen on a GPU with the compiler left out of the install)."""
    from jaxrot.kernels import _common

    monkeypatch.setattr(_common.warp(), "is_cpu_available", lambda: False)

    def fn(t, R, Pi):  # a torque no other test restates, so no earlier verdict is remembered
        return -0.0123 * Pi

    body = RigidBody(J)
    p = Problem(body, jaxrot.Torque(fn), jaxrot.State(jnp.eye(3), jnp.array([0.3, -1.0, 2.0])), t_end=1.0)
    free = Problem(body, jaxrot.torques.FreeTorque(), p.state0, t_end=1.0)
    flip = jaxrot.Event(lambda t, s, args: s.R[1, 1] - 0.0123)
    for run in (lambda: jaxrot.simulate("rk4", p, 0.1, 5, executor=jaxrot.Fused()),
                lambda: jaxrot.simulate("rkmk8(5)", p, t1=0.5, stepsize=jaxrot.Adaptive(rtol=1e-8, atol=1e-8),
                                        executor=jaxrot.Fused()),
                lambda: jaxrot.simulate("rk4", free, 0.1, 5, event=flip, executor=jaxrot.Fused())):
        with pytest.raises(ValueError, match="cannot be restated in a kernel.*Warp's CPU compiler"):
            run()
    monkeypatch.undo()  # with the compiler, the same torque runs fused
    assert jaxrot.simulate("rk4", p, 0.1, 5, executor=jaxrot.Fused()).info["executor"] == "Fused"


def test_fused_run_of_a_plain_function_equals_xla():
    """simulate with executor=Fused(): the plain-function torque runs in the kernel, with the XLA run's
    states; suggest names the fused executor for it."""
    c, e = 0.1, jnp.array([0.0, 0.6, 0.8])

    def damped_forced(t, R, Pi):
        return -c * (R @ (Pi / J)) + 1.6 * jnp.sin(2.0 * t) * e

    body = RigidBody(J)
    p = Problem(body, jaxrot.Torque(damped_forced), jaxrot.State(jnp.eye(3), jnp.array([0.3, -4.0, 2.0])), t_end=2.0)
    a = jaxrot.simulate("rkmk8", p, 0.05, 40, saveat=jaxrot.SaveAt(steps=10), executor=jaxrot.Fused())
    b = jaxrot.simulate("rkmk8", p, 0.05, 40, saveat=jaxrot.SaveAt(steps=10), executor=jaxrot.XLA())
    assert a.info["executor"] == "Fused" and b.info["executor"] == "XLA"
    np.testing.assert_allclose(np.asarray(a.states.Pi), np.asarray(b.states.Pi), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(np.asarray(a.states.R), np.asarray(b.states.R), rtol=1e-13, atol=1e-13)
    assert isinstance(jaxrot.suggest(p, 1e-6).executor, jaxrot.Fused)


def test_a_torque_with_a_loop_is_restated():
    def fn(t, R, Pi):  # halves Pi until below 1 in norm: a loop whose count depends on the state
        return -0.1 * lax.while_loop(lambda p: jnp.sum(p * p) > 1.0, lambda p: 0.5 * p, Pi)

    p = Problem(RigidBody(J), jaxrot.Torque(fn), jaxrot.State(jnp.eye(3), jnp.array([0.3, -1.0, 2.0])), t_end=1.0)
    assert kernels.torque_kind(p.torque) is not None
    fused = jaxrot.simulate("rkmk8", p, 0.1, 5, executor=jaxrot.Fused())
    xla = jaxrot.simulate("rkmk8", p, 0.1, 5, executor=jaxrot.XLA())
    np.testing.assert_allclose(np.asarray(fused.states.Pi), np.asarray(xla.states.Pi), rtol=0, atol=1e-13)


def test_a_torque_the_hand_written_kernels_do_not_restate_runs_in_a_generated_kernel():
    """A torque model with no hand-written restatement (the Coulomb wall): the method's step is
    generated with the torque inside it, and the run is fused."""
    p = jaxrot.problems.get("coulomb_wall")
    assert kernels.torque_kind(p.torque) is None and kernels.method_name(jaxrot.integrators.get("rk4")) == "rk4"
    assert kernels.supports("rk4", p.system)
    fused = jaxrot.simulate("rk4", p, 1e-3, 40, executor=jaxrot.Fused())
    xla = jaxrot.simulate("rk4", p, 1e-3, 40, executor=jaxrot.XLA())
    np.testing.assert_allclose(np.asarray(fused.states.Pi), np.asarray(xla.states.Pi), rtol=0,
                               atol=1e-12 * float(jnp.max(jnp.abs(xla.states.Pi))))


@pytest.mark.parametrize("fn", [_gather, _sort])
def test_an_element_picked_by_a_state_dependent_index_or_a_sort_is_restated(fn):
    torque = jaxrot.Torque(fn)
    assert transpile.reason(torque, jnp.float64) is None
    rng = np.random.default_rng(3)
    t, Pi = rng.uniform(size=5), rng.normal(size=(5, 3))
    R = np.asarray(jax.vmap(so3.exp)(jnp.asarray(rng.normal(size=(5, 3)))))
    got = transpile.evaluate(torque, t, R, Pi)
    np.testing.assert_allclose(got, np.asarray(jax.vmap(fn)(t, R, Pi)), rtol=1e-15, atol=0)


def _as_python(fn, *names):
    """``fn`` of scalar arguments restated (the kernels' source), run as Python: ``(source, function)``."""
    import math
    import types

    from jaxrot.kernels.jaxpr_inputs import as_float, named

    closed = jax.make_jaxpr(fn)(*(jnp.zeros((), jnp.float64) for _ in names))
    g = jaxpr_warp.Source(True)
    outs = jaxpr_warp.restate(g, closed.jaxpr, [g.array(np.asarray(c)) for c in closed.consts],
                              [named(lambda i, a=a: a, ()) for a in names])
    rets = [as_float(g, e) for o in outs for e in np.asarray(o).reshape(-1)]
    src = f"def f({', '.join(names)}):\n" + "\n".join(g.lines) + f"\n    return ({', '.join(rets)},)\n"
    env = dict(wp=types.SimpleNamespace(sqrt=math.sqrt, sin=math.sin, cos=math.cos, static=lambda x: x),
               S=float, LIT=g.lits)
    exec(src, env)  # noqa: S102 - the generated source of a function written above
    return src, env["f"]


def test_selects_on_one_predicate_share_one_block():
    """The Rodrigues coefficients' three values and their three slopes are six selects on one
    predicate: one if/else (and within its series side one more, on the series' tier), one square root
    and two sines; equal to JAX on both sides of it, and a select whose case needs a value computed
    after the first stays in a block of its own."""

    def fn(a2, da2):
        return jax.jvp(so3.rodrigues_coefficients, (a2,), (da2,))

    src, f = _as_python(fn, "a2", "da2")
    assert (src.count("if "), src.count("wp.sqrt("), src.count("wp.sin(")) == (2, 1, 2)
    for a2 in (1e-3, 0.07, 1.0, 2.2, 2.3, 9.0):  # (the series below 2.25, the shorter one below 0.0625)
        want = np.concatenate([np.ravel(x) for x in jax.tree_util.tree_leaves(fn(jnp.float64(a2), jnp.float64(0.7)))])
        np.testing.assert_array_equal(np.asarray(f(a2, 0.7)), want)

    def later(x, y):
        small = x < 1.0
        first = jnp.where(small, x * x, jnp.sin(x))
        z = first * y  # computed after the first select, used only by the second's case
        return first, jnp.where(small, jnp.cos(z), z + 1.0)

    src, f = _as_python(later, "x", "y")
    assert src.count("if ") == 2
    for x, y in ((0.5, 2.0), (1.5, 3.0)):
        np.testing.assert_array_equal(np.asarray(f(x, y)), np.asarray(later(jnp.float64(x), jnp.float64(y))))


@pytest.mark.skipif(not kernels.have_warp(), reason="needs warp-lang (the fast extra)")
def test_an_agreement_is_kept_for_the_next_process_only_where_values_were_compared(tmp_path, monkeypatch):
    """A restatement's agreement with JAX is kept beside Warp's kernel cache: the next process (a new
    in-memory table) reads it back instead of comparing again. A disagreement (it may belong to the
    sampled system alone), a check that compared no values (known only inside a trace), a failed
    compilation, or a check made with ``JAXROT_KEEP_CHECKS=off`` is not kept."""
    from jaxrot.kernels import generate_checks
    from jaxrot.kernels._common import warp

    monkeypatch.setattr(warp().config, "kernel_cache_dir", str(tmp_path))
    monkeypatch.setenv("JAXROT_KEEP_CHECKS", "on")
    calls = []

    def agree():
        calls.append("agree")
        return None if np.all(generate_checks.within(np.zeros(2), np.zeros(2), 0.0)) else "no"

    def differ():
        calls.append("differ")
        return None if np.all(generate_checks.within(np.zeros(2), np.ones(2), 0.0)) else "differs at a test state"

    def unchecked():  # another check compared values inside it; this one compared none
        calls.append("unchecked")
        ask("inner", agree)
        return None

    def broken():
        calls.append("broken")
        raise RuntimeError("the compiler stopped")

    def ask(key, fn):
        try:
            generate_checks.verdict({}, (key, "float64"), fn, "a test function")
            return None
        except jaxpr_warp.Unsupported as err:
            return str(err)

    cases = (("a", agree), ("d", differ), ("u", unchecked), ("b", broken))
    answers = [ask(k, f) for k, f in cases]
    assert answers[0] is None and "differs" in answers[1] and answers[2] is None and "could not compile" in answers[3]
    calls.clear()  # the next process
    assert [ask(k, f) for k, f in cases] == answers
    assert calls == ["differ", "unchecked", "broken"]  # (the inner check's agreement was kept)
    monkeypatch.setenv("JAXROT_KEEP_CHECKS", "off")
    calls.clear()
    assert ask("a", agree) is None and ask("a2", agree) is None and ask("a2", agree) is None
    assert calls == ["agree", "agree", "agree"]


def _read_outside_their_block(src: str) -> list:
    """The locals of a generated source read outside the block (``if``/``else``/loop body) that first
    assigned them, or any block around it: Python runs such a read, Warp's code need not."""
    import re

    defined, bad, stack = {}, [], [(0, ())]  # (indentation, block path)
    n_blocks = 0
    for line in src.splitlines()[1:]:
        if not line.strip() or line.strip().startswith("return"):
            continue
        indent = len(line) - len(line.lstrip())
        while indent < stack[-1][0]:
            stack.pop()
        if indent > stack[-1][0]:
            n_blocks += 1
            stack.append((indent, stack[-1][1] + (n_blocks,)))
        path = stack[-1][1]
        target, _, expr = line.strip().partition(" = ")
        for v in re.findall(r"\bv\d+\b", expr if expr else target):
            if v in defined and defined[v] != path[:len(defined[v])]:
                bad.append(v)
        if expr and re.fullmatch(r"v\d+", target):
            defined.setdefault(target, path)
    return bad


def test_a_select_computed_in_one_block_is_computed_again_in_another():
    """Two selects on one predicate, joined, inside the cases of two selects on another predicate that
    cannot be joined (the second needs the first's result): each outer block computes both inner ones
    (a local assigned in one ``if`` block is not read in another), and once each."""

    def fn(x, y):
        p, q = y < 1.0, x < 0.5
        s = jnp.where(q, x * 2.0, jnp.sin(x))
        s2 = jnp.where(q, x * 3.0, jnp.cos(x))
        first = jnp.where(p, s * s2 + 1.0, y)
        return first, jnp.where(p, s * s2 * first, y * 2.0)

    src, f = _as_python(fn, "x", "y")
    assert _read_outside_their_block(src) == []
    assert (src.count("wp.sin("), src.count("wp.cos(")) == (2, 2)  # (once in each outer block)
    for x, y in ((0.2, 0.3), (0.7, 0.3), (0.2, 2.0), (0.7, 2.0)):
        np.testing.assert_array_equal(np.asarray(f(x, y)), np.asarray(fn(jnp.float64(x), jnp.float64(y))))


def test_the_exclusive_cones_are_those_of_their_definition(monkeypatch):
    """A select's exclusive cone, walked from its operands through the cone's own equations, equals
    its definition on every select of a long step (rkmk8's: hundreds of Rodrigues and dexp^-1
    branches): every equation reachable backwards whose results only the cone and the allowed uses
    take, consumers decided first."""
    from jaxrot.kernels import generate, jaxpr_branches

    def by_definition(eqns, producer, preds, uses, outputs, allowed, vars):
        reach, stack = set(), [producer[v] for v in vars if not hasattr(v, "val") and v in producer]
        while stack:
            j = stack.pop()
            if j not in reach:
                reach.add(j)
                stack.extend(producer[v] for v in eqns[j].invars if not hasattr(v, "val") and v in producer)
        cone = set()
        for j in sorted(reach, reverse=True):
            e = eqns[j]
            if any(v in outputs for v in e.outvars) or e.effects:
                continue
            if all(all(i in cone or i in allowed or (i, pos) in allowed for i, pos in uses[v]) for v in e.outvars):
                cone.add(j)
        return cone

    walked = jaxpr_branches._cone
    sizes = []

    def both(*args):
        got, want = walked(*args), by_definition(*args)
        assert got == want, (sorted(got ^ want)[:10], len(got), len(want))
        sizes.append(len(got))
        return got

    monkeypatch.setattr(jaxpr_branches, "_cone", both)
    p = jaxrot.problems.get("fast_top")
    generate._generate(jaxrot.integrators.get("rkmk8"), p.system, jnp.float64)
    assert len(sizes) >= 20 and max(sizes) >= 10, sizes


def test_a_loops_body_forgets_the_expressions_of_its_carry():
    """Inside a loop (or an if/else block) the expressions naming a local the loop assigns again are
    not reused, inside it or after it; the others are, and the body's own are forgotten after it."""
    g = jaxpr_warp.Source(True)
    a, b = g.emit("(x * y)", "f"), g.emit("(x + y)", "f")
    ab, ba = g.emit(f"({a.code} * {b.code})", "f"), g.emit(f"({b.code} + x)", "f")
    with g.loop([np.asarray([a])]):
        assert g.emit("(x * y)", "f") is a and g.emit("(x + y)", "f") is b  # (the carry's own expression stays)
        assert g.emit(f"({b.code} + x)", "f") is ba
        inner = g.emit(f"({a.code} * {b.code})", "f")
        assert inner is not ab
        body = g.emit("(y * y)", "f")
    after = g.emit(f"({a.code} * {b.code})", "f")
    assert after is not ab and after is not inner
    assert g.emit("(y * y)", "f") is not body and g.emit(f"({b.code} + x)", "f") is ba


def test_a_scan_over_known_slices_is_one_loop_each_slice_picked_by_the_pass():
    """A long scan whose slices are known (a composition's coefficients) is a Warp loop, not unrolled:
    forward and reversed, the restatement equals the function."""
    def fn(t, R, Pi):
        def body(x, c):
            for _ in range(20):  # (50 passes of 100 equations: past what is unrolled)
                x = x * jnp.cos(c * x) + 0.01 * c
            return x, None

        # (computed here, so that they fold: a torque's array constants are read from its parameter array)
        c = 0.1 + 0.016 * jnp.arange(50, dtype=Pi.dtype)
        return -0.1 * lax.scan(body, Pi, c)[0] + 0.1 * lax.scan(body, R[0], c, reverse=True)[0]

    def indexed(t, R, Pi):  # a slice made an index: written out pass by pass, where it is known
        def body(x, c):
            for _ in range(20):
                x = x * jnp.cos(c * x) + 0.01 * c
            return x.at[(10 * c).astype(jnp.int32) % 3].add(c), None

        return lax.scan(body, Pi, 0.1 * jnp.arange(50, dtype=Pi.dtype))[0]

    torque = jaxrot.Torque(fn)
    src = transpile._SOURCES[transpile.lower(torque, np.float64).key][0]
    assert src.count("for _k") == 2 and src.count("\n") < 2000, src.count("\n")
    t, R, Pi = _points(np.float64)
    want = np.asarray(jax.vmap(fn)(jnp.asarray(t), jnp.asarray(R), jnp.asarray(Pi)))
    np.testing.assert_allclose(transpile.evaluate(torque, t, R, Pi), want, rtol=1e-12, atol=1e-13)
    torque = jaxrot.Torque(indexed)
    assert "for _k" not in transpile._SOURCES[transpile.lower(torque, np.float64).key][0]
    want = np.asarray(jax.vmap(indexed)(jnp.asarray(t), jnp.asarray(R), jnp.asarray(Pi)))
    np.testing.assert_allclose(transpile.evaluate(torque, t, R, Pi), want, rtol=1e-12, atol=1e-13)


def test_a_cond_computes_the_taken_branch_only():
    """``lax.cond``/``lax.switch`` on an index known when the step runs: one ``if``/``elif`` block per
    branch (the costly branch, a loop here, is not computed where the cheap one is taken), the index
    clamped as JAX clamps it; equal to JAX."""
    def costly(x):
        return lax.fori_loop(0, 16, lambda i, y: jnp.sqrt(y * y + 1.0) - 0.5, x)

    def fn(t, R, Pi):
        y = lax.cond(Pi[0] > 0.0, lambda x: (costly(x), 2.0), lambda x: (-x, 3.0), Pi[1])
        k = jnp.sum(R[0, 0] > jnp.array([-0.6, -0.2, 0.2, 0.6])) - 1  # (-1 to 3: below 0 and past the last)
        z = lax.switch(k, [lambda x: x + 1.0, lambda x: x * x, lambda x: jnp.sin(x)], Pi[2])
        return jnp.stack([y[0], y[1] * z, t + y[1]])

    t, R, Pi = _points(np.float64)
    Pi = Pi * np.where(np.arange(len(Pi)) % 2, 1.0, -1.0)[:, None]  # (both branches taken)
    R = R * np.linspace(-1.0, 1.0, len(R))[:, None, None]
    torque = jaxrot.Torque(fn)
    src = transpile._SOURCES[transpile.lower(torque, np.float64).key][0]
    assert src.count("for _k") == 1 and src.count("<= int(0):") == 2 and src.count("else:") == 2, src
    assert set(np.asarray(R)[:, 0, 0] > 0.6) == set(np.asarray(R)[:, 0, 0] < -0.6) == {True, False}
    want = np.asarray(jax.vmap(fn)(jnp.asarray(t), jnp.asarray(R), jnp.asarray(Pi)))
    np.testing.assert_allclose(transpile.evaluate(torque, t, R, Pi), want, rtol=1e-14, atol=1e-15)


def test_a_select_inside_a_case_on_the_same_predicate_takes_that_case():
    """Inside the block of a ``where``'s case, a ``where`` on the same predicate (here in a loop of
    that case) is known: only its case is written, no block of its own; equal to JAX."""
    def fn(t, R, Pi):
        p = Pi[0] > 0.0
        body = lambda i, x: jnp.where(p, jnp.sin(x) * 1.1 + jnp.cos(x * x), jnp.cos(x) - jnp.sin(x * 0.5))  # noqa: E731
        y = jnp.where(p, lax.fori_loop(0, 20, body, Pi[1]), jnp.exp(Pi[1] * 0.2) + Pi[0])
        return jnp.stack([y, Pi[2], t])

    t, R, Pi = _points(np.float64)
    Pi = Pi * np.where(np.arange(len(Pi)) % 2, 1.0, -1.0)[:, None]  # (both cases taken)
    torque = jaxrot.Torque(fn)
    src = transpile._SOURCES[transpile.lower(torque, np.float64).key][0]
    ifs = [line.strip() for line in src.splitlines() if line.strip().startswith(("if ", "else:"))]
    assert len(ifs) == 2 and src.count("for _k") == 1, src
    want = np.asarray(jax.vmap(fn)(jnp.asarray(t), jnp.asarray(R), jnp.asarray(Pi)))
    np.testing.assert_allclose(transpile.evaluate(torque, t, R, Pi), want, rtol=1e-13, atol=1e-14)


def test_a_fori_loop_over_its_carry_is_one_loop_unless_its_count_is_an_index():
    """An AGM-like ``fori_loop`` (16 passes of a few equations, the carry the state's) is a Warp loop;
    one whose body makes the pass's count an index is written out pass by pass; both equal JAX."""
    def agm(t, R, Pi):
        a, b = lax.fori_loop(0, 16, lambda i, ab: ((ab[0] + ab[1]) / 2, jnp.sqrt(ab[0] * ab[1])),
                             (1.0 + Pi[0] ** 2, 1.0 + R[0, 1] ** 2))
        return jnp.stack([a, b, a - b])

    def indexed(t, R, Pi):
        return lax.fori_loop(0, 16, lambda i, x: x.at[i % 3].multiply(0.9) + 0.01 * x[(i + 1) % 3], Pi)

    t, R, Pi = _points(np.float64)
    for fn, loops in ((agm, 1), (indexed, 0)):
        torque = jaxrot.Torque(fn)
        src = transpile._SOURCES[transpile.lower(torque, np.float64).key][0]
        assert src.count("for _k") == loops, src
        want = np.asarray(jax.vmap(fn)(jnp.asarray(t), jnp.asarray(R), jnp.asarray(Pi)))
        np.testing.assert_allclose(transpile.evaluate(torque, t, R, Pi), want, rtol=1e-14, atol=1e-15)


def test_a_loop_that_permutes_its_carry_reads_every_value_before_writing():
    """``(a, b) -> (b / 2, a)`` in a while loop: each pass reads both before either is assigned."""
    def fn(t, R, Pi):
        a, b = lax.while_loop(lambda c: jnp.abs(c[0]) + jnp.abs(c[1]) > 0.5, lambda c: (c[1] / 2, c[0]),
                              (Pi[0], Pi[1] + 3.0))
        return jnp.stack([a, b, a - b])

    torque = jaxrot.Torque(fn)
    t, R, Pi = _points(np.float64)
    want = np.asarray(jax.vmap(fn)(jnp.asarray(t), jnp.asarray(R), jnp.asarray(Pi)))
    np.testing.assert_allclose(transpile.evaluate(torque, t, R, Pi), want, rtol=1e-15, atol=0)


def test_a_long_function_called_with_a_known_and_an_unknown_argument_is_two_functions():
    """A called function is written once per pattern of known inputs: ``f(y, 1.0)`` (the second input
    known, folded in) and ``f(y, z)`` are two functions, though the literal 1.0 equals the second
    parameter's index."""
    from jaxrot.kernels import jaxpr_calls

    @jax.jit
    def f(x, y):
        for _ in range(200):
            y = jnp.sin(x * y) + 0.5 * y * x + y
        return y

    closed = jax.make_jaxpr(lambda y, z: f(y, 1.0) + f(y, z))(1.0, 2.0)
    g = jaxpr_warp.Source(True)
    g.functions, g.called = [], jaxpr_calls.calls(closed.jaxpr)
    y, z = np.empty((), dtype=object), np.empty((), dtype=object)
    y[()], z[()] = jaxpr_warp.Element("y", "f"), jaxpr_warp.Element("z", "f")
    jaxpr_warp.restate(g, closed.jaxpr, [], [y, z])
    assert len(g.functions) == 2 and "def fn0(a0: S):" in g.functions[0] and "def fn1(a0: S, a1: S):" in g.functions[1]
    assert [line.split("= ")[1] for line in g.lines if "fn" in line] == ["fn0(y)", "fn1(y, z)"]
