"""Every executor gives the same states for the same run (one body and a batch)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import kernels, problems

# buss2p and buss4 have fused kernels, liemid_ea and dmv10 (implicit) do not; lie_taylor5 repeats
# liemid_ea's path through the executors (no kernel, explicit) and runs in the slow tier.
METHODS = ["buss2p", "buss4", "liemid_ea", pytest.param("lie_taylor5", marks=pytest.mark.slow), "dmv10"]


def _problem(method):
    return problems.get("free_body_mz" if method.startswith("dmv") else "fast_top")


def _batch(p, n=6, seed=0):
    rng = np.random.default_rng(seed)
    R = jax.vmap(jaxrot.so3.exp)(jnp.asarray(0.3 * rng.normal(size=(n, 3))))
    Pi = p.state0.Pi * (1 + 0.1 * jnp.asarray(rng.normal(size=(n, 3))))
    return jaxrot.State(R @ p.state0.R, Pi)


EXECUTORS = [jaxrot.XLA(), jaxrot.CPUBlocked(4), jaxrot.Sharded(), jaxrot.Sharded(block_size=None)]
if jaxrot.kernels.have_warp():
    EXECUTORS.append(jaxrot.Fused())


def _runs(ex, method, p) -> bool:
    """Whether ``ex`` runs ``method`` itself (the fused executor only where a kernel exists)."""
    if isinstance(ex, jaxrot.Fused):
        return jaxrot.kernels.supports(jaxrot.integrators.get(method), p.system)
    return True


@pytest.mark.parametrize("method", METHODS)
def test_executors_agree(method):
    p = _problem(method)
    s = _batch(p)
    ref = jaxrot.simulate(method, p, 1e-2, 40, state0=s, saveat=jaxrot.SaveAt(steps=10), executor=jaxrot.XLA())
    one = jaxrot.simulate(method, p, 1e-2, 40, state0=jaxrot.State(s.R[2], s.Pi[2]), saveat=jaxrot.SaveAt(steps=10))
    np.testing.assert_allclose(np.asarray(one.states.R), np.asarray(ref.states.R[2]), rtol=0, atol=1e-13)
    for ex in EXECUTORS[1:]:
        if not _runs(ex, method, p):  # asked for explicitly, Fused refuses a method without a kernel
            with pytest.raises(ValueError, match="Fused\\(\\) cannot run this job: no fused kernel"):
                jaxrot.simulate(method, p, 1e-2, 40, state0=s, saveat=jaxrot.SaveAt(steps=10), executor=ex)
            continue
        got = jaxrot.simulate(method, p, 1e-2, 40, state0=s, saveat=jaxrot.SaveAt(steps=10), executor=ex)
        assert got.info["executor"] == type(ex).__name__
        for a, b in ((got.states.R, ref.states.R), (got.states.Pi, ref.states.Pi), (got.ts, ref.ts)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-13, atol=1e-13)
        fin = jaxrot.simulate(method, p, 1e-2, 40, state0=s, saveat=jaxrot.SaveAt(t0=False), executor=ex)
        np.testing.assert_allclose(np.asarray(fin.final.R), np.asarray(ref.final.R), rtol=0, atol=1e-13)


@pytest.mark.parametrize("pair", ["buss4(3)", pytest.param("lie_taylor5(4)", marks=pytest.mark.slow)])  # slow: a second pair, without a kernel
def test_executors_agree_on_adaptive_runs(pair):
    """Every body takes its own steps; the executor only places the bodies (blocks, devices). The
    fused adaptive kernel runs the pairs it has a kernel for (the automatic choice on a CPU, where it
    was measured faster) and refuses the others when asked for explicitly."""
    from jaxrot.driver import executors
    from jaxrot.kernels import adaptive, adaptive_pairs

    p = problems.get("fast_top")
    s = _batch(p, n=5)
    run = dict(t1=0.5, state0=s, stepsize=jaxrot.Adaptive(1e-8, 1e-8), saveat=jaxrot.SaveAt(ts=[0.25, 0.5]))
    ref = jaxrot.simulate(pair, p, executor=jaxrot.XLA(), **run)
    fusable = kernels.have_warp() and adaptive.supports_adaptive(pair, p.system)
    on_cpu = jax.devices()[0].platform == "cpu" and len(jax.devices()) == 1
    # the automatic choice also asks for an attempt of at most FUSED_ADAPTIVE_MAX_LINES lines, as written
    # out here (under the tests' settings lie_taylor5(4)'s is longer than in a plain session)
    within = adaptive_pairs.attempt_within(pair, p.system, None, executors.FUSED_ADAPTIVE_MAX_LINES)
    assert jaxrot.simulate(pair, p, **run).info["executor"] == ("Fused" if fusable and within and on_cpu
                                                               else "Sharded")
    for ex in EXECUTORS[1:]:
        if isinstance(ex, jaxrot.Fused) and not fusable:
            with pytest.raises(ValueError, match="Fused\\(\\) cannot run this job: no fused adaptive kernel"):
                jaxrot.simulate(pair, p, executor=ex, **run)
            continue
        got = jaxrot.simulate(pair, p, executor=ex, **run)
        assert got.info["executor"] == type(ex).__name__
        # each executor runs its own compiled program (the kernel: XLA's arithmetic in another order):
        # round-off in the error estimate moves the step sizes by about eps / tol, which the controller
        # carries on (~5e-10 here, and a step more or less; tests/test_kernels_adaptive.py)
        same = 1e-9
        np.testing.assert_allclose(np.asarray(got.states.R), np.asarray(ref.states.R), rtol=0, atol=same)
        np.testing.assert_allclose(np.asarray(got.states.Pi), np.asarray(ref.states.Pi), rtol=same, atol=same)
        moved = np.abs(np.asarray(got.controller.n_accepted) - np.asarray(ref.controller.n_accepted))
        assert np.all(moved <= 1), moved


def test_one_body_under_any_executor_runs_as_xla():
    p = problems.get("fast_top")
    a = jaxrot.simulate("buss4", p, 1e-3, 50, executor=jaxrot.Sharded())
    b = jaxrot.simulate("buss4", p, 1e-3, 50)
    assert a.info["executor"] == "Sharded" and b.info["executor"] == "XLA"
    np.testing.assert_array_equal(np.asarray(a.states.R), np.asarray(b.states.R))


def test_bad_executor_options_are_named():
    with pytest.raises(ValueError, match="block_size"):
        jaxrot.CPUBlocked(0)
    with pytest.raises(TypeError, match="executor"):
        jaxrot.simulate("buss4", problems.get("fast_top"), 1e-3, 10, executor="xla")


@pytest.mark.skipif(not kernels.have_warp(), reason="needs the fast extra")
def test_an_explicit_executor_that_cannot_run_the_job_says_why():
    """Asked for explicitly, Fused never hands the job to another executor: it runs it or says why."""
    p = problems.get("fast_top")
    # no Warp restatement of an eigendecomposition
    eigh = jaxrot.Torque(lambda t, R, Pi: -0.1 * Pi * jnp.linalg.eigvalsh(R @ R.T)[0], frame="body")
    q = jaxrot.Problem(p.body, eigh, p.state0, 1.0)
    with pytest.raises(ValueError, match="Fused\\(\\) cannot run this job: .*'eigh'"):
        jaxrot.simulate("rk4", q, 1e-3, 10, executor=jaxrot.Fused())
    with pytest.raises(ValueError, match="monitor"):
        jaxrot.simulate("rk4", p, 1e-3, 10, executor=jaxrot.Fused(), monitor=jaxrot.InvariantMonitor(energy_rtol=1))
    # the automatic choice falls back, and says which executor ran
    assert jaxrot.simulate("rk4", q, 1e-3, 10).info["executor"] == "XLA"


def test_saveat_and_span_options():
    p = problems.get("fast_top")
    every = jaxrot.simulate("buss4", p, 1e-3, 100, saveat=jaxrot.SaveAt(steps=25))
    with pytest.warns(DeprecationWarning, match="SaveAt\\(steps=k\\)"):  # the older spellings, still working
        legacy = jaxrot.simulate("buss4", p, 1e-3, 100, saveat=jaxrot.SaveAt(every=25))
    np.testing.assert_array_equal(np.asarray(every.states.R), np.asarray(legacy.states.R))
    with pytest.warns(DeprecationWarning, match="SaveAt\\(steps=k\\)"):
        legacy = jaxrot.simulate("buss4", p, 1e-3, 100, save_every=25)
    np.testing.assert_array_equal(np.asarray(every.states.R), np.asarray(legacy.states.R))
    by_t1 = jaxrot.simulate("buss4", p, 1e-3, t1=0.1, saveat=jaxrot.SaveAt(steps=25))
    np.testing.assert_array_equal(np.asarray(by_t1.states.R), np.asarray(every.states.R))
    with pytest.warns(DeprecationWarning, match="pass the step as simulate's dt"):
        fixed = jaxrot.simulate("buss4", p, n_steps=100, stepsize=jaxrot.Fixed(1e-3), saveat=jaxrot.SaveAt(steps=25))
    np.testing.assert_array_equal(np.asarray(fixed.states.R), np.asarray(every.states.R))
    # saveat=None is SaveAt(): the initial and the final state
    default = jaxrot.simulate("buss4", p, 1e-3, 100)
    assert default.ts.shape == (2,)
    np.testing.assert_array_equal(np.asarray(default.states.R), np.asarray(every.states.R[::4]))
    last = jaxrot.simulate("buss4", p, 1e-3, 100, saveat=jaxrot.SaveAt(t0=False))
    assert last.ts.shape == (1,) and last.states.R.shape == (1, 3, 3)
    np.testing.assert_allclose(np.asarray(last.final.R), np.asarray(every.final.R), rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="whole number of steps"):
        jaxrot.simulate("buss4", p, 3e-3, t1=0.1)
    with pytest.raises(ValueError, match="not both"):
        jaxrot.simulate("buss4", p, 1e-3, 100, save_every=10, saveat=jaxrot.SaveAt(steps=10))
    with pytest.raises(ValueError, match="steps"):
        jaxrot.SaveAt(steps=0)
    with pytest.raises(ValueError, match="ts or steps"):
        jaxrot.SaveAt(ts=[0.1], steps=2)


def test_deprecated_aliases_equal_the_new_call():
    p = problems.get("fast_top")
    s = _batch(p)
    with pytest.warns(DeprecationWarning):
        old = jaxrot.simulate_batch("buss4", p, 1e-3, 40, states0=s, save_every=10)
    new = jaxrot.simulate("buss4", p, 1e-3, 40, state0=s, saveat=jaxrot.SaveAt(steps=10))
    np.testing.assert_array_equal(np.asarray(old.states.R), np.asarray(new.states.R))
    with pytest.warns(DeprecationWarning):
        old = jaxrot.final_state("buss4", p, 1e-3, 40)
    new = jaxrot.simulate("buss4", p, 1e-3, 40, saveat=jaxrot.SaveAt(t0=False)).final
    np.testing.assert_array_equal(np.asarray(old.R), np.asarray(new.R))
