"""The fused adaptive kernels (jaxrot.kernels.adaptive) against XLA's error-controlled loop, through
``jaxrot.simulate(pair, ..., stepsize=jaxrot.Adaptive(rtol, atol), executor=jaxrot.Fused())`` and the
kernel's own function.

Every pair of ``PAIRS`` (the registered pairs whose kernels were once written by hand; the others
are enrolled in ``tests/test_kernels_generated.py``) runs a batch of six bodies (spins spread over
0.5-2x the problem's, attitudes turned at random) fused and on XLA's loop; in float64 the accepted
and rejected counts are equal body by body and the final states agree within 1e-12 relative (3e-12
on the asymmetric heavy top, which is not integrable). The fast tier runs every pair on the heavy
top at 1e-10; the other torque kinds, and 1e-8, run in the slow tier (each XLA configuration
compiles for ~10 s on two cores).

Equal counts need a run whose steps are a function of the arithmetic, not of its round-off, and
XLA's loop has two places where round-off sets them. An error estimate below about 1e-6 of the
tolerance is rounding noise (the two solutions agree to their last bits), and through the PI
controller's memory, ``err_prev^beta``, it moves the next steps by up to ~15 %: from the default
first step, ``0.1 rtol^(1/(q+1)) / |omega|``, rkmk8(5)'s fifth-order estimate starts there (about
1e-10 of the tolerance on the tops), and so does the step shortened to land on an output time just
after a step's end. Measured: XLA's own counts change on 5 of 6 bodies of the asymmetric top when the
initial momenta move by one rounding. So the exact comparisons start from a first step whose
estimate is about half the tolerance for the fastest body (found by one attempt of the kernel) and
save at one output time, whose landing step is the last. With several output times, and from the
default first step, the kernel's counts are compared with XLA's own spread when its initial momenta
move by one rounding (+-1) and its states within 1e-9; the first attempt from the default first step
is the same, and a run to the first of several output times alone saves the same bits there.

Events: the T-handle's flip (Dzhanibekov) located in the kernel agrees with the exact elliptic
solution within 1e-9; a terminal event stops its body. Gradients through ``simulate(...,
executor=jaxrot.Fused())`` are the XLA executor's. float32 runs (1e-5) agree loosely: counts within
5 % (or 2), states within 50 rtol.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import kernels, problems
from jaxrot.kernels import adaptive as ka
from jaxrot.kernels import adaptive_launch

pytestmark = pytest.mark.skipif(not kernels.have_warp(), reason="needs warp-lang (the fast extra)")


def _plain_function_problem():
    """A torque written as a plain function with parameters (kind "user", restated from its jaxpr)."""
    J = jnp.array([4.6, 4.3, 1.8])

    def fn(t, R, Pi, a):
        up = jnp.array([0.0, 0.0, 1.0], R.dtype)
        return -a["c"] * (R @ (Pi / J.astype(Pi.dtype))) + jnp.sin(2.0 * t) * a["e"] - 5.0 * jnp.cross(R[:, 2], up)

    torque = jaxrot.Torque(fn, args={"c": jnp.asarray(0.1), "e": jnp.array([0.0, 0.6, 0.8])})
    return jaxrot.Problem(jaxrot.RigidBody(J), torque, jaxrot.State(jnp.eye(3), jnp.array([0.5, -3.0, 2.0])), t_end=2.0)


#: torque kind -> (problem, span): spans of up to ~200 rad of turning (round-off in the spin's phase
#: grows with the angle turned: 1e-12 holds to about there)
PROBLEM_OF = {"free": ("free_body_mz", 30.0), "gravity": ("asymmetric_top", 2.0), "poly": ("buss_torqued", 2.0),
              "gravity_gradient": ("gravity_gradient", 12.0), "user": (_plain_function_problem, 2.0)}
PAIRS = ["rkmk8(5)", "rkmk8(5,3)", "buss4(3)"]
#: every (pair, torque kind); the heavy top ("gravity") of each pair in the fast tier
CASES = [pytest.param(pair, torque, id=f"{pair}-{torque}", marks=() if torque == "gravity" else pytest.mark.slow)
         for pair in PAIRS for torque in PROBLEM_OF]
B = 6
RTOL64 = 1e-12
#: the asymmetric heavy top ("gravity") is not integrable: a rounding's difference between the two loops
#: grows along the run (one step agrees to a rounding or two); buss4(3)'s ~10^4 steps at 1e-10 end
#: 1.3e-12 apart in the attitude under the suite's XLA flags (its momenta 2e-14)
RTOL64_TOP = 3e-12
#: the order of each pair's lower solution (the first step's scaling, _first_step_at_half_tolerance)
LOW_ORDER = {"rkmk8(5)": 5, "rkmk8(5,3)": 5, "buss4(3)": 3}


def _problem(torque):
    name, T = PROBLEM_OF[torque]
    return (name() if callable(name) else problems.get(name)), T


def _batch(p, dtype, seed=0, n=B):
    rng = np.random.default_rng(seed)
    R = jax.vmap(jaxrot.so3.exp)(jnp.asarray(0.3 * rng.normal(size=(n, 3)))) @ jnp.asarray(p.state0.R)
    spread = np.linspace(0.5, 2.0, n)[:, None] * (1 + 0.05 * rng.normal(size=(n, 3)))
    Pi = jnp.asarray(p.state0.Pi) * jnp.asarray(spread)
    return jaxrot.State(R.astype(dtype), Pi.astype(dtype))


def _cast(system, dtype):
    return jax.tree_util.tree_map(
        lambda x: x.astype(dtype) if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.floating) else x, system)


def _dt0(p, S):
    """A first step turning the fastest body by 0.2 rad."""
    w = np.linalg.norm(np.asarray(S.Pi, np.float64) / np.asarray(p.body.J, np.float64), axis=-1)
    return float(0.2 / np.max(w))


def _first_step_at_half_tolerance(pair, system, S, ts, tol):
    """A first step whose error estimate is about half the tolerance for the body that has the largest
    (one kernel attempt at a guess, then scaled by the estimate's order; halved while rejected)."""
    q1 = LOW_ORDER[pair] + 1
    w = np.linalg.norm(np.asarray(S.Pi, np.float64) / np.asarray(system.body.J, np.float64), axis=-1)
    h = 0.2 / float(np.max(w))
    for _ in range(20):
        one = ka.fused_adaptive(pair, system, S, 0.0, ts, tol, tol, h, max_steps=1)
        if bool(np.all(np.asarray(one.n_accepted) == 1)):
            break
        h *= 0.5
    e = float(np.max(np.asarray(one.err_estimate)))
    return h * min(4.0, (0.5 / e) ** (1.0 / q1))


def xla(pair, p, S, ts, tol, dt0=None, max_steps=100_000, executor=None):
    """XLA's loop (or ``executor``) through the public API: ``(states at ts, n_accepted, n_rejected,
    err, result codes)``. The first trial step ``dt0`` goes in as an array (one compiled loop for any)."""
    dt0 = None if dt0 is None else jnp.asarray(dt0, S.R.dtype)
    tr = jaxrot.simulate(pair, p, dt0, t1=float(ts[-1]), state0=S,
                         stepsize=jaxrot.Adaptive(rtol=tol, atol=tol, max_steps=max_steps),
                         saveat=jaxrot.SaveAt(ts=ts, t0=False), executor=executor or jaxrot.XLA(), throw=False)
    c = tr.controller
    return (tr.states, np.asarray(c.n_accepted), np.asarray(c.n_rejected), np.asarray(c.err_estimate),
            np.asarray(getattr(tr.result, "_value", tr.result)))


def _nudged(S, k):
    eps = float(np.finfo(S.Pi.dtype).eps)
    return jaxrot.State(S.R, S.Pi * (1 + k * eps))


def _rel(a, b):
    """Per body: the largest difference over its largest entry."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    n = a.shape[0]
    return np.max(np.abs(a - b).reshape(n, -1), axis=1) / np.max(np.abs(b).reshape(n, -1), axis=1)


def _compare(pair, torque, tol, ts_of, dt0_of, nudged=True):
    p, T = _problem(torque)
    S = _batch(p, jnp.float64)
    system = _cast(p.system, jnp.float64)
    ts = ts_of(T)
    dt0 = dt0_of(pair, system, S, ts, tol)
    got = ka.fused_adaptive(pair, system, S, 0.0, ts, tol, tol, dt0)
    want = xla(pair, p, S, ts, tol, dt0)
    others = [xla(pair, p, _nudged(S, k), ts, tol, dt0) for k in ((1, -1) if nudged else ())]
    return got, want, others


@pytest.mark.parametrize("tol", [pytest.param(1e-8, id="1e-8", marks=pytest.mark.slow), pytest.param(1e-10, id="1e-10")])
@pytest.mark.parametrize("pair,torque", CASES)
def test_same_steps_as_xla(pair, torque, tol):
    """The kernel through ``simulate(..., executor=jaxrot.Fused())`` against XLA's loop: the same
    accepted and rejected steps per body, the final states within 1e-12 relative."""
    p, T = _problem(torque)
    S = _batch(p, jnp.float64)
    ts = np.array([T])
    dt0 = _first_step_at_half_tolerance(pair, _cast(p.system, jnp.float64), S, ts, tol)
    got = xla(pair, p, S, ts, tol, dt0, executor=jaxrot.Fused())
    want = xla(pair, p, S, ts, tol, dt0)
    assert got[0].R.shape == (B, 1, 3, 3) and got[0].Pi.shape == (B, 1, 3) and got[1].dtype == np.int32
    np.testing.assert_array_equal(got[4], 0)
    np.testing.assert_array_equal(want[4], 0)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[2], want[2])
    assert len(set(want[1].tolist())) > 1  # (the bodies take their own steps)
    for x, y in ((got[0].R, want[0].R), (got[0].Pi, want[0].Pi)):
        assert np.all(_rel(x, y) <= (RTOL64_TOP if torque == "gravity" else RTOL64)), _rel(x, y)
    # the last accepted error estimate (of the step that lands on the output time, whose length moves
    # with the round-off in the time reached: ~1e-3 of a step after 10^4 steps at 1e-10)
    e_k, e_x = got[3], want[3]
    big = e_x > 1e-2
    np.testing.assert_allclose(e_k[big], e_x[big], rtol=0.1)


def _spread(want, others):
    """XLA's counts from the initial momenta as given and moved by +-1 rounding (rows)."""
    return np.array([want[1]] + [o[1] for o in others])


@pytest.mark.slow  # (an XLA configuration of its own: ~10 s of compilation each)
@pytest.mark.parametrize("pair", PAIRS)
def test_several_output_times(pair):
    """States at three output times: the kernel's run to the first time alone lands on the same state
    (bit for bit: the same steps until then); against XLA, counts within its own spread under one
    rounding (+-1) and states within 1e-9 (a step sequence moved by round-off at an output time)."""
    got, want, others = _compare(pair, "gravity", 1e-8, lambda T: np.array([T / 3, T / 2, T]),
                                 _first_step_at_half_tolerance)
    p, T = _problem("gravity")
    S = _batch(p, jnp.float64)
    system = _cast(p.system, jnp.float64)
    dt0 = _first_step_at_half_tolerance(pair, system, S, np.array([T / 3, T / 2, T]), 1e-8)
    first = ka.fused_adaptive(pair, system, S, 0.0, np.array([T / 3]), 1e-8, 1e-8, dt0)
    np.testing.assert_array_equal(np.asarray(first.R[:, 0]), np.asarray(got.R[:, 0]))
    np.testing.assert_array_equal(np.asarray(first.Pi[:, 0]), np.asarray(got.Pi[:, 0]))
    assert np.all(np.asarray(first.n_accepted) < np.asarray(got.n_accepted))
    acc = np.asarray(got.n_accepted)
    spread = _spread(want, others)
    assert np.all((acc >= spread.min(0) - 1) & (acc <= spread.max(0) + 1)), (acc, spread)
    assert np.all(_rel(got.R, want[0].R) <= 1e-9) and np.all(_rel(got.Pi, want[0].Pi) <= 1e-9)


@pytest.mark.slow  # (an XLA configuration of its own: ~10 s of compilation each)
@pytest.mark.parametrize("pair", PAIRS)
def test_default_first_step(pair):
    """From the default first step: one attempt lands on the same state (the same first step); then
    counts within XLA's own spread under one rounding (+-1) and states within 1e-9 (the first
    estimates are round-off there, see the module docstring)."""
    p, T = _problem("gravity")
    S = _batch(p, jnp.float64)
    ts = np.array([T])
    one = ka.fused_adaptive(pair, _cast(p.system, jnp.float64), S, 0.0, ts, 1e-8, 1e-8, max_steps=1)
    ref = xla(pair, p, S, ts, 1e-8, max_steps=1)
    assert np.all(_rel(one.Pi[:, 0], ref[0].Pi[:, 0]) <= 1e-15) and np.all(_rel(one.R[:, 0], ref[0].R[:, 0]) <= 1e-15)
    np.testing.assert_array_equal(np.asarray(one.n_accepted) + np.asarray(one.n_rejected), 1)
    np.testing.assert_array_equal(np.asarray(one.n_accepted), ref[1])
    got, want, others = _compare(pair, "gravity", 1e-8, lambda T: np.array([T]), lambda *a: None)
    acc = np.asarray(got.n_accepted)
    spread = _spread(want, others)
    assert np.all((acc >= spread.min(0) - 1) & (acc <= spread.max(0) + 1)), (acc, spread)
    assert np.all(_rel(got.R, want[0].R) <= 1e-9) and np.all(_rel(got.Pi, want[0].Pi) <= 1e-9)


@pytest.mark.slow  # (an XLA configuration of its own: ~10 s of compilation each)
@pytest.mark.parametrize("pair", PAIRS)
def test_float32_agrees_loosely(pair):
    p, T = _problem("gravity")
    S = _batch(p, jnp.float32)
    ts = np.array([T / 3, T / 2, T], np.float32)
    tol = 1e-5
    dt0 = _dt0(p, S)
    got = ka.fused_adaptive(pair, _cast(p.system, jnp.float32), S, 0.0, ts, tol, tol, dt0)
    want = xla(pair, p, S, ts, tol, dt0)
    assert got.R.dtype == jnp.float32 and got.err_estimate.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(got.result), 0)
    acc = np.asarray(got.n_accepted)
    assert np.all(np.abs(acc - want[1]) <= np.maximum(2, 0.05 * want[1])), (acc, want[1])
    assert np.all(_rel(got.R, want[0].R) <= 50 * tol) and np.all(_rel(got.Pi, want[0].Pi) <= 50 * tol)


@pytest.mark.slow  # (an XLA configuration of its own: ~10 s of compilation each)
def test_max_steps_reached_holds_the_last_state():
    pair = "rkmk8(5)"
    p, T = _problem("gravity")
    S = _batch(p, jnp.float64)
    system = _cast(p.system, jnp.float64)
    ts = np.array([T / 3, T / 2, T])
    dt0 = _first_step_at_half_tolerance(pair, system, S, ts, 1e-8)
    full = ka.fused_adaptive(pair, system, S, 0.0, ts, 1e-8, 1e-8, dt0)
    attempts = np.asarray(full.n_accepted) + np.asarray(full.n_rejected)
    n = int(np.sort(attempts)[2]) + 1  # the three slowest bodies stop before their last output time
    got = ka.fused_adaptive(pair, system, S, 0.0, ts, 1e-8, 1e-8, dt0, max_steps=n)
    want = xla(pair, p, S, ts, 1e-8, dt0, max_steps=n)
    code = int(jaxrot.RESULTS.max_steps_reached._value)
    res = np.asarray(got.result)
    np.testing.assert_array_equal(res, np.where(attempts > n, code, 0))
    np.testing.assert_array_equal(res, want[4])
    np.testing.assert_array_equal(np.asarray(got.success), res == 0)
    spent = np.asarray(got.n_accepted) + np.asarray(got.n_rejected)
    np.testing.assert_array_equal(spent[res == code], n)
    np.testing.assert_array_equal(spent[res == 0], attempts[res == 0])
    done = res == 0
    assert np.all(_rel(got.R[done], want[0].R[done]) <= 1e-9)
    for b in np.flatnonzero(res == code):
        # the outputs reached are the unlimited run's (the same steps); the rest repeat the last state
        k = int(np.sum(np.any(np.asarray(got.R[b]) == np.asarray(full.R[b]), axis=(1, 2))))
        assert k < 3
        np.testing.assert_array_equal(np.asarray(got.R[b, :k]), np.asarray(full.R[b, :k]))
        assert np.all(_rel(got.R[b:b + 1, :k], want[0].R[b:b + 1, :k]) <= 1e-9)
        for j in range(k + 1, 3):
            np.testing.assert_array_equal(np.asarray(got.R[b, j]), np.asarray(got.R[b, k]))
            np.testing.assert_array_equal(np.asarray(got.Pi[b, j]), np.asarray(got.Pi[b, k]))


def test_nonfinite_initial_state_and_per_body_tolerances():
    pair = "rkmk8(5)"
    p, T = _problem("gravity")
    S = _batch(p, jnp.float64)
    system = _cast(p.system, jnp.float64)
    ts = np.array([T / 2, T])
    bad = jaxrot.State(S.R, S.Pi.at[2, 1].set(jnp.nan))
    run = ka.fused_adaptive(pair, system, bad, 0.0, ts, 1e-8, 1e-8)
    res = np.asarray(run.result)
    assert res[2] == int(jaxrot.RESULTS.nonfinite_state._value) and np.all(np.delete(res, 2) == 0)
    assert int(run.n_accepted[2]) == 0 and int(run.n_rejected[2]) == 0
    # each body at its own tolerance: the same as running each tolerance alone
    tols = jnp.asarray([1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11])
    mixed = ka.fused_adaptive(pair, system, S, 0.0, ts, tols, 0.5 * tols)
    for b in (0, 3, 5):
        alone = ka.fused_adaptive(pair, system, S, 0.0, ts, float(tols[b]), 0.5 * float(tols[b]))
        assert int(mixed.n_accepted[b]) == int(alone.n_accepted[b])
        np.testing.assert_array_equal(np.asarray(mixed.R[b]), np.asarray(alone.R[b]))
    assert len(set(np.asarray(mixed.n_accepted).tolist())) == B


@pytest.mark.slow  # (~30 s on two cores: 80 bodies in one launch, in five slices and alone)
def test_cpu_slices_and_order_give_the_same_bits(monkeypatch):
    """A CPU batch cut into slices over the cores, and launched fastest body first: the same kernel on
    each body, the same bits, in the caller's order."""
    pair = "rkmk8(5)"
    p, T = _problem("gravity")
    S = _batch(p, jnp.float64, n=80)
    system = _cast(p.system, jnp.float64)
    ts = np.array([T / 4, T / 2])
    monkeypatch.setattr(adaptive_launch, "slices_for", lambda bodies: 1)
    monkeypatch.setattr(adaptive_launch, "SORT_MIN_BODIES", 10 ** 9)
    one = ka.fused_adaptive(pair, system, S, 0.0, ts, 1e-8, 1e-8)
    monkeypatch.setattr(adaptive_launch, "SORT_MIN_BODIES", 64)
    monkeypatch.setattr(adaptive_launch, "slices_for", lambda bodies: 5)
    many = ka.fused_adaptive(pair, system, S, 0.0, ts, 1e-8, 1e-8)
    for a, b in zip(one, many):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert len(set(np.asarray(one.n_accepted).tolist())) > 5  # the bodies took their own steps
    b = 7  # and a body run alone is the same
    alone = ka.fused_adaptive(pair, system, jax.tree_util.tree_map(lambda x: x[b:b + 1], S), 0.0, ts, 1e-8, 1e-8)
    np.testing.assert_array_equal(np.asarray(alone.R[0]), np.asarray(many.R[b]))


def _eigh_pair():
    """The Crouch-Grossman 3(2) pair of a user's file with an eigendecomposition in its step."""
    from .helpers import user_pair

    class EighPair(type(user_pair())):
        def step_with_error(self, system, t, state, aux, dt):
            high, aux, stats, err = super().step_with_error(system, t, state, aux, dt)
            w = jnp.linalg.eigvalsh(high.R @ high.R.T)
            return type(high)(high.R, high.Pi * (w[0] / w[0])), aux, stats, err

    return EighPair()


def test_support_and_refusals():
    p = problems.get("asymmetric_top")
    assert ka.supports_adaptive("rkmk8(5)", p.system) and ka.supports_adaptive("buss4(3)", p.system)
    assert ka.supports_adaptive("lie_taylor5(4)", p.system)
    # a (high, low) tuple is an embedded pair, as simulate takes it (names or methods)
    assert ka.supports_adaptive(("buss4", "buss2"), p.system)
    assert ka.supports_adaptive(("rkmk8", jaxrot.integrators.RKMK8Embedded5()), p.system)
    assert "higher-order first method" in ka.why_not_adaptive(("buss3", "buss4"), p.system)
    # a pair whose step uses a primitive with no restatement (an eigendecomposition) is refused, naming it
    eigh_pair = _eigh_pair()
    assert "'eigh'" in ka.why_not_adaptive(eigh_pair, p.system)
    gg = problems.get("gravity_gradient")
    assert ka.supports_adaptive("rkmk8(5)", gg.system) and ka.supports_adaptive("buss4(3)", gg.system)
    # an event condition the restatement cannot write out (an eigendecomposition) is refused, with the reason
    sorted_ = jaxrot.Event(lambda t, s, a: jnp.linalg.eigvalsh(s.R + s.R.T)[0])
    assert not ka.supports_adaptive("rkmk8(5)", p.system, sorted_)
    assert "event condition" in ka.why_not_adaptive("rkmk8(5)", p.system, sorted_)
    S = _batch(p, jnp.float64, n=2)
    with pytest.raises(ValueError, match="event condition"):
        ka.fused_adaptive("rkmk8(5)", p.system, S, 0.0, np.array([1.0]), 1e-8, 1e-8, event=sorted_)
    with pytest.raises(ValueError, match="no fused adaptive kernel"):
        ka.fused_adaptive(eigh_pair, p.system, S, 0.0, np.array([1.0]), 1e-8, 1e-8)
    with pytest.raises(ValueError, match="max_steps"):
        ka.fused_adaptive("rkmk8(5)", p.system, S, 0.0, np.array([1.0]), 1e-8, 1e-8, max_steps=0)


def test_the_automatic_choice_fuses_generated_attempts_up_to_a_length(monkeypatch):
    """By default an error-controlled batch on a CPU runs fused for a registered pair and a user's
    alike, where the attempt generated from the pair's JAX code is at most FUSED_ADAPTIVE_MAX_LINES
    long; a longer one keeps XLA's loop (measured written out, before anything is compiled)."""
    from jaxrot.driver import executors

    from .helpers import user_pair

    if jax.devices()[0].platform != "cpu" or len(jax.devices()) != 1:
        pytest.skip("the choice measured on one CPU device")
    p = problems.get("fast_top")
    S = _batch(p, jnp.float64, n=3)
    run = dict(state0=S, stepsize=jaxrot.Adaptive(1e-8, 1e-8))
    for pair in ("rkmk8(5)", user_pair()):
        assert jaxrot.simulate(pair, p, t1=0.2, **run).info["executor"] == "Fused"
    monkeypatch.setattr(executors, "FUSED_ADAPTIVE_MAX_LINES", 2000)  # (rkmk8(5)'s attempt: about 2 200 lines)
    assert jaxrot.simulate("rkmk8(5)", p, t1=0.3, **run).info["executor"] == "Sharded"


def test_controller_orders_are_the_pairs():
    """The controller's exponents come from the order the JAX pair gives them (its lower method's, or
    DOP853's 7 for its combined estimate)."""
    from jaxrot import integrators
    from jaxrot.kernels import adaptive_pairs

    p = problems.get("asymmetric_top")
    for name in PAIRS:
        key, _ = adaptive_pairs.generated_pair(integrators.get(name), p.system, jnp.float64)
        entry = adaptive_pairs.GENERATED_PAIRS[key]
        assert entry.controller_order == integrators.info(name).error_order == (7 if name == "rkmk8(5,3)" else
                                                                                 LOW_ORDER[name]), name
        assert entry.high_order == integrators.get(name).order


def test_result_codes_are_the_drivers():
    """The kernels restate the RESULTS codes they write (they sit below the driver)."""
    assert ka.RESULT_NONFINITE_STATE == int(jaxrot.RESULTS.nonfinite_state._value)
    assert ka.RESULT_MAX_STEPS_REACHED == int(jaxrot.RESULTS.max_steps_reached._value)


def _xla_reference(pair, system, states0, t0, ts, rtol, atol, dt0, max_steps, adjoint="forward"):
    """The XLA loop with fused_adaptive's outputs (``adjoint="forward"``: forward-mode differentiable,
    ``"checkpointed"``: reverse-mode)."""
    problem = jaxrot.Problem(system.body, system.torque, jaxrot.State(states0.R[0], states0.Pi[0]), 1.0)
    adjoint = {"forward": jaxrot.ForwardMode(), "checkpointed": jaxrot.RecursiveCheckpointAdjoint()}[adjoint]
    tr = jaxrot.simulate(pair, problem, dt0, t0=t0, t1=float(ts[-1]), state0=states0,
                         stepsize=jaxrot.Adaptive(rtol=rtol, atol=atol, max_steps=max_steps),
                         saveat=jaxrot.SaveAt(ts=ts, t0=False), executor=jaxrot.XLA(), throw=False,
                         adjoint=adjoint)
    c = tr.controller
    return (tr.states.R, tr.states.Pi, c.n_accepted, c.n_rejected, c.err_estimate,
            jnp.asarray(getattr(tr.result, "_value", tr.result), jnp.int32))


@pytest.mark.slow  # (the simulate-level gradient test below covers the same custom JVP)
def test_tangents_come_from_the_reference():
    pair = "rkmk8(5)"
    p, T = _problem("gravity")
    S = _batch(p, jnp.float64, n=3)
    ts = np.array([T / 4, T / 2])
    dt0 = _dt0(p, S)
    w = jnp.asarray(np.random.default_rng(1).normal(size=(3, 2, 3)))

    def loss(run, S, J):
        system = eqx.tree_at(lambda s: s.body.J, p.system, J)
        out = run(pair, system, S, 0.0, ts, 1e-8, 1e-8, dt0, 100_000)
        return jnp.sum(w * out[1]) + jnp.sum(out[0][:, :, 0, :] * w)

    fused = lambda *a: ka.fused_adaptive(*a, reference=_xla_reference)  # noqa: E731
    J = jnp.asarray(p.body.J, jnp.float64)
    tS = jax.tree_util.tree_map(lambda x: 1e-3 * jnp.ones_like(x), S)
    tJ = jnp.asarray([0.01, -0.02, 0.03])
    v1, d1 = jax.jvp(lambda S, J: loss(fused, S, J), (S, J), (tS, tJ))
    v2, d2 = jax.jvp(lambda S, J: loss(_xla_reference, S, J), (S, J), (tS, tJ))
    np.testing.assert_allclose(float(d1), float(d2), rtol=1e-12)
    np.testing.assert_allclose(float(v1), float(v2), rtol=1e-12)
    assert float(d1) != 0.0


@pytest.mark.slow  # (XLA compiles the checkpointed loop's reverse pass: minutes on a 2-core CPU)
def test_gradients_in_reverse_mode_equal_the_checkpointed_xla_loops():
    """``adjoint="reverse"``: the kernels' backward pass (the pair's step VJP generated from its JAX
    code, over the steps the run recorded) equals the checkpointed XLA loop's gradient to 1e-10 of its
    largest component. (It was the reference's own backward pass, equal to its last rounding, before
    the kernels took reverse mode; now two arithmetics: 9e-12 measured over 410 steps of body 1, whose
    gradient spans 2.4 to 6650.)"""
    import functools

    pair = "buss4(3)"
    p, T = _problem("gravity")
    S = _batch(p, jnp.float64, n=2)
    ts = np.array([T / 8])
    dt0 = _dt0(p, S)
    ref = functools.partial(_xla_reference, adjoint="checkpointed")

    def loss(run, J, S):
        system = eqx.tree_at(lambda s: s.body.J, p.system, J)
        out = run(pair, system, S, 0.0, ts, 1e-8, 1e-8, dt0, 10_000)
        return jnp.sum(out[1][:, -1] ** 2) + jnp.sum(out[0][:, -1, 0, :])

    fused = lambda *a: ka.fused_adaptive(*a, reference=ref, adjoint="reverse")  # noqa: E731
    J = jnp.asarray(p.body.J, jnp.float64)
    g1 = jax.grad(lambda J, S: loss(fused, J, S), argnums=(0, 1))(J, S)
    g2 = jax.grad(lambda J, S: loss(ref, J, S), argnums=(0, 1))(J, S)
    for a, b in zip(jax.tree_util.tree_leaves(g1), jax.tree_util.tree_leaves(g2)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-10 * np.max(np.abs(b)))
    assert np.any(np.asarray(g1[0]) != 0)


# ---------------------------------------------------------------------------------------------------
# events

def _flip():
    return jaxrot.Event(lambda t, s, args: s.R[1, 1], direction=-1)  # the T-handle's long axis' world-y


#: an event is located on the crossing step's dense output, the cubic Hermite interpolant, whose error
#: grows as h^4: rkmk8(5,3) takes about three times rkmk8(5)'s steps at the same tolerance (its estimate
#: does not overestimate the eighth-order error), and its event times are those of the interpolant
#: (2.8e-7 relative on the T-handle at 1e-12), not of the method (docs/user_guide/saveat_events.md)
@pytest.mark.parametrize("pair", PAIRS)
def test_t_handle_flip_time_matches_the_exact_solution(pair):
    import scipy.optimize as so

    from jaxrot import exact

    P = problems.get("t_handle")
    S = jaxrot.State(jnp.stack([P.state0.R, P.state0.R]), jnp.stack([P.state0.Pi, 1.1 * P.state0.Pi]))
    ts = np.array([2.0, 4.0, 6.0, 8.0, 10.0])
    run = ka.fused_adaptive(pair, P.system, S, 0.0, ts, 1e-12, 1e-12, event=_flip())
    np.testing.assert_array_equal(np.asarray(run.result), 0)
    for b in range(2):
        s0 = jaxrot.State(S.R[b], S.Pi[b])
        t = float(run.event_time[b])
        te = so.brentq(lambda s: float(exact.free_flow(P.body.J, s0, s).R[1, 1]), t - 0.01, t + 0.01,
                       xtol=1e-15, rtol=1e-15)
        assert abs(t - te) <= 1e-9 * te, (b, t, te)
        assert abs(float(run.event_R[b, 1, 1])) < 1e-12
        # terminal: the outputs after the event hold the event state, those before are the run's
        after = ts > t
        assert after.any() and (~after).any()
        np.testing.assert_array_equal(np.asarray(run.R[b][after]), np.broadcast_to(run.event_R[b], (after.sum(), 3, 3)))
    free = ka.fused_adaptive(pair, P.system, S, 0.0, ts, 1e-12, 1e-12)
    before = ts < float(run.event_time[0])
    np.testing.assert_array_equal(np.asarray(run.R[0][before]), np.asarray(free.R[0][before]))
    assert int(run.n_accepted[0]) < int(free.n_accepted[0])
    # through simulate: the kernel's event time and state are the trajectory's, each body stopped there
    tr = jaxrot.simulate(pair, P, t1=10.0, state0=S, stepsize=jaxrot.Adaptive(1e-12, 1e-12),
                         saveat=jaxrot.SaveAt(ts=ts[:-1]), event=_flip(), executor=jaxrot.Fused())
    assert tr.info["executor"] == "Fused"
    np.testing.assert_array_equal(np.asarray(tr.event_time), np.asarray(run.event_time))
    np.testing.assert_array_equal(np.asarray(tr.event_state.R), np.asarray(run.event_R))
    np.testing.assert_array_equal(np.asarray(tr.event_state.Pi), np.asarray(run.event_Pi))
    np.testing.assert_array_equal(np.asarray(tr.states.R[:, 1:]), np.asarray(run.R))
    np.testing.assert_array_equal(np.asarray(tr.controller.n_accepted), np.asarray(run.n_accepted))
    np.testing.assert_array_equal(np.asarray(tr.ts[0]), [0.0, *ts])


@pytest.mark.parametrize("pair", PAIRS)
def test_a_terminal_event_in_the_kernel_stops_each_body(pair):
    """A terminal event at a time of its own for each body (a clock condition with a per-body rate):
    each body stops there, having taken only the steps up to it, its later outputs the event state."""
    p = problems.get("asymmetric_top")
    S = _batch(p, jnp.float64, n=4)
    ts = np.array([0.5, 1.0, 2.0])
    rate = jnp.asarray(1.0)
    stop = jaxrot.Event(lambda t, s, args: rate * t - 0.75)  # at t = 0.75 for every body
    run = dict(t1=2.0, state0=S, stepsize=jaxrot.Adaptive(1e-9, 1e-9), saveat=jaxrot.SaveAt(ts=ts[:-1]),
               executor=jaxrot.Fused())
    full = jaxrot.simulate(pair, p, **run)
    tr = jaxrot.simulate(pair, p, event=stop, **run)
    np.testing.assert_allclose(np.asarray(tr.event_time), 0.75, rtol=0, atol=1e-12)
    assert np.all(np.asarray(tr.controller.n_accepted) < np.asarray(full.controller.n_accepted) / 2)
    np.testing.assert_array_equal(np.asarray(tr.states.R[:, 1]), np.asarray(full.states.R[:, 1]))  # before
    for k in (2, 3):  # after: the event state
        np.testing.assert_array_equal(np.asarray(tr.states.R[:, k]), np.asarray(tr.event_state.R))
    # the event state is the method's step to the event time: the flow's at 0.75 to the tolerance
    at = jaxrot.simulate(pair, p, **{**run, "t1": 0.75, "saveat": jaxrot.SaveAt()})
    np.testing.assert_allclose(np.asarray(tr.event_state.R), np.asarray(at.final.R), rtol=0, atol=1e-7)


def test_a_save_time_at_a_terminal_event_holds_the_step_landing_there():
    """A terminal event whose time is a save time: the step that lands there is the crossing step, and
    that frame is the step's state, as in a run without the event (bit for bit), and as XLA's loop
    writes it; the frames after it hold the event state. The kernel locates a terminal event after its
    loop, taking the crossing step again: this checks that the step taken again is the same step."""
    p = problems.get("asymmetric_top")
    S = _batch(p, jnp.float64, n=3)
    ts = np.array([0.25, 0.5, 1.0])
    stop = jaxrot.Event(lambda t, s, args: t - 0.5)
    run = dict(t1=2.0, state0=S, stepsize=jaxrot.Adaptive(1e-9, 1e-9), saveat=jaxrot.SaveAt(ts=ts))
    pair = "rkmk8(5,3)"
    free = jaxrot.simulate(pair, p, executor=jaxrot.Fused(), **run)
    fused, xla = (jaxrot.simulate(pair, p, event=stop, executor=ex, **run) for ex in (jaxrot.Fused(), jaxrot.XLA()))
    assert fused.info["executor"] == "Fused"
    np.testing.assert_array_equal(np.asarray(fused.event_time), 0.5)
    np.testing.assert_array_equal(np.asarray(fused.states.R[:, :3]), np.asarray(free.states.R[:, :3]))
    np.testing.assert_array_equal(np.asarray(fused.states.R[:, 3]), np.asarray(fused.event_state.R))
    np.testing.assert_allclose(np.asarray(fused.states.R), np.asarray(xla.states.R), rtol=0, atol=1e-13)
    np.testing.assert_array_equal(np.asarray(fused.controller.n_accepted), np.asarray(xla.controller.n_accepted))


def test_an_event_on_a_landing_step_is_evaluated_at_the_save_time_in_both_loops():
    """A step that lands on a save time ends at the save time, not at ``t + (target - t)``, which can
    round below it: both loops evaluate the condition there, so a clock event at the save time is
    crossed on the same step in the kernel and in XLA's loop (the same accepted steps)."""
    p = problems.get("t_handle")
    S = _batch(p, jnp.float64, n=2)
    t0, tg = 0.3935491537443417, 0.9433740520564143
    assert t0 + (tg - t0) < tg  # the case: the step's end rounds below the save time
    ev = jaxrot.Event(lambda t, s, a: t - tg)
    runs = [jaxrot.simulate("rkmk8(5,3)", p, t0=t0, t1=2.0, state0=S, dt=1.0, stepsize=jaxrot.Adaptive(1e-6, 1e-6),
                            saveat=jaxrot.SaveAt(ts=np.array([tg, 1.5, 2.0])), event=ev, executor=ex)
            for ex in (jaxrot.Fused(), jaxrot.XLA())]
    np.testing.assert_array_equal(np.asarray(runs[0].controller.n_accepted), np.asarray(runs[1].controller.n_accepted))
    np.testing.assert_array_equal(np.asarray(runs[0].controller.n_accepted), [1, 2])
    np.testing.assert_allclose(np.asarray(runs[0].states.R), np.asarray(runs[1].states.R), rtol=0, atol=1e-13)


def _flip_loss():
    """A loss of an error-controlled run of two T-handles with an event (its time, final momentum and
    attitude) as a function of the initial momenta and the executor, and those momenta."""
    pair = PAIRS[-1]
    P = problems.get("t_handle")
    S = jaxrot.State(jnp.stack([P.state0.R, P.state0.R]), jnp.stack([P.state0.Pi, 1.1 * P.state0.Pi]))
    w = jnp.asarray(np.random.default_rng(2).normal(size=(2, 3)))

    def loss(Pi, executor):
        tr = jaxrot.simulate(pair, P, t1=9.0, state0=jaxrot.State(S.R, Pi), stepsize=jaxrot.Adaptive(1e-9, 1e-9),
                             event=_flip(), executor=executor)
        return jnp.sum(w * tr.final.Pi) + jnp.sum(tr.event_time) + jnp.sum(tr.final.R[:, 0, 1])

    return loss, S.Pi


def test_forward_mode_through_simulate_is_the_xla_executors():
    """``jax.jvp`` through ``simulate(..., executor=jaxrot.Fused())`` of an error-controlled run with an
    event: the derivatives come from XLA's loop, so they are the XLA executor's."""
    loss, Pi0 = _flip_loss()
    t = jnp.asarray(np.random.default_rng(3).normal(size=(2, 3)))
    (v1, d1), (v2, d2) = (jax.jvp(lambda x: loss(x, ex), (Pi0,), (t,)) for ex in (jaxrot.Fused(), jaxrot.XLA()))
    np.testing.assert_allclose(float(v1), float(v2), rtol=1e-9)
    np.testing.assert_allclose(float(d1), float(d2), rtol=1e-12)
    assert float(d1) != 0.0


@pytest.mark.slow  # two reverse-mode compilations at XLA's default settings (a fresh process, ~2 min)
@pytest.mark.default_xla
def test_reverse_mode_equals_the_xla_executors_to_1e_10_at_default_settings():
    """``jax.grad`` through the fused error-controlled run with an event equals the XLA executor's to
    1e-10 relative where both programs are compiled as users compile them (XLA's default settings):
    the derivatives are the reverse pass of the same loop, and the accepted steps coincide. (Under the
    suite's fast-compile flags the two programs' reverse passes differed by 3e-8: an accepted step
    decided by the last bits in one of them.)"""
    loss, Pi0 = _flip_loss()
    g1, g2 = (np.asarray(jax.grad(loss)(Pi0, ex)) for ex in (jaxrot.Fused(), jaxrot.XLA()))
    assert np.all(np.abs(g1) > 1e-3)  # every component far from zero: a relative comparison
    np.testing.assert_allclose(g1, g2, rtol=1e-10, atol=0)


def test_events_not_terminal_and_not_found():
    pair = "rkmk8(5)"
    P = problems.get("t_handle")
    S = jaxrot.State(P.state0.R[None], P.state0.Pi[None])
    ts = np.array([5.0, 10.0])
    up = jaxrot.Event(lambda t, s, args: s.R[1, 1], direction=+1)  # no upward crossing before t = 10
    run = ka.fused_adaptive(pair, P.system, S, 0.0, ts, 1e-10, 1e-10, event=up)
    assert np.isnan(float(run.event_time[0])) and np.all(np.isnan(np.asarray(run.event_R)))
    c = jnp.asarray(1.2345)
    clock = jaxrot.Event(lambda t, s, args: t - c, terminal=False)  # (a closed-over array: a parameter)
    run = ka.fused_adaptive(pair, P.system, S, 0.0, ts, 1e-10, 1e-10, event=clock)
    assert float(run.event_time[0]) == pytest.approx(1.2345, abs=1e-13)
    free = ka.fused_adaptive(pair, P.system, S, 0.0, ts, 1e-10, 1e-10)
    np.testing.assert_array_equal(np.asarray(run.R), np.asarray(free.R))
    np.testing.assert_array_equal(np.asarray(run.n_accepted), np.asarray(free.n_accepted))
