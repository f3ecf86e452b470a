"""Typed failure reasons (RESULTS), per step and per body, and the invariant monitor."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import RESULTS, InvariantMonitor, problems

jax.config.update("jax_enable_x64", True)
P = problems.get("t_handle")


def test_solve_failure_is_named_and_typed():
    t = jaxrot.simulate("midpoint_exp", P, 20.0, 10, throw=False)
    assert int(t.failed_step) > 0 and t.result == RESULTS.solve_failed
    with pytest.raises(jaxrot.SimulationError, match=r"step \d+ failed: its nonlinear solve") as e:
        jaxrot.simulate("midpoint_exp", P, 20.0, 10)
    assert e.value.reason == RESULTS.solve_failed and e.value.step == int(t.failed_step) and e.value.body is None


def test_nonfinite_state_is_named():
    s = jaxrot.State(P.state0.R, P.state0.Pi * 1e307)
    t = jaxrot.simulate("rk4", P, 10.0, 5, state0=s, throw=False)
    assert t.result == RESULTS.nonfinite_state and int(t.failed_step) >= 1


def test_monitor_flags_energy_drift_and_stays_quiet_for_conserving_methods():
    mon = InvariantMonitor(energy_rtol=1e-2, momentum_rtol=1e-12)
    bad = jaxrot.simulate("euler_svd", P, 0.05, 400, throw=False, monitor=mon, saveat=jaxrot.SaveAt(steps=1))
    assert bad.result == RESULTS.invariant_drift
    # the flagged step is the first whose energy error exceeds 1%
    E = np.asarray(jaxrot.analysis.energy(P, bad.states))
    first = int(np.argmax(np.abs(E / E[0] - 1) > 1e-2))
    assert int(bad.failed_step) == first
    good = jaxrot.simulate("buss3_ep", P, 0.05, 400, monitor=mon)  # raises if it flagged anything
    assert good.result == RESULTS.successful
    plain = jaxrot.simulate("euler_svd", P, 0.05, 400)  # off by default: no flag
    assert int(plain.failed_step) == -1


def test_batch_reports_per_body_and_keeps_the_good_bodies():
    Pi = jnp.stack([P.state0.Pi, 100 * P.state0.Pi, 0.5 * P.state0.Pi])
    s = jaxrot.State(jnp.stack([P.state0.R] * 3), Pi)
    b = jaxrot.simulate_batch("midpoint_exp", P, 2.0, 10, states0=s, throw=False)
    assert list(np.asarray(b.result == RESULTS.successful)) == [True, False, True]
    assert np.asarray(b.failed_step)[1] > 0
    good = jaxrot.simulate_batch("midpoint_exp", P, 2.0, 10, states0=jaxrot.State(s.R[::2], s.Pi[::2]))
    # the good bodies' states are kept, to the Newton tolerance: the batched Newton iterates until every
    # body of its batch has converged, so a body's extra (contracting) iterations depend on its batch
    # (equal on a CPU, 1.5e-13 apart on an H200)
    np.testing.assert_allclose(np.asarray(b.states.R)[::2], np.asarray(good.states.R), rtol=0, atol=1e-12)
    with pytest.raises(jaxrot.SimulationError, match=r"\(body \(1,\)\) failed") as e:
        jaxrot.simulate_batch("midpoint_exp", P, 2.0, 10, states0=s)
    assert e.value.body == (1,) and e.value.reason == RESULTS.solve_failed


def test_results_survive_save_and_load(tmp_path):
    t = jaxrot.simulate("midpoint_exp", P, 20.0, 10, throw=False)
    t.save(tmp_path / "f.npz")
    assert jaxrot.load(tmp_path / "f.npz").result == RESULTS.solve_failed


def test_an_event_a_free_system_and_the_want_of_a_dense_output_survive_save_and_load(tmp_path):
    """The event's time and state come back bit for bit; a torque-free run's system comes back (its
    physics works on the loaded trajectory); a torqued one's does not (its torque may be a function);
    a dense output is not stored, and evaluate on the loaded trajectory says so."""
    free = jaxrot.problems.get("free_body_hlw")
    clock = jaxrot.Event(lambda t, s, a: t - 0.055)
    t = jaxrot.simulate("buss4", free, 1e-2, 10, event=clock, saveat=jaxrot.SaveAt(dense=True))
    t.save(tmp_path / "e.npz")
    u = jaxrot.load(tmp_path / "e.npz")
    assert np.isfinite(float(t.event_time))
    np.testing.assert_array_equal(np.asarray(u.event_time), np.asarray(t.event_time))
    np.testing.assert_array_equal(np.asarray(u.event_state.R), np.asarray(t.event_state.R))
    np.testing.assert_array_equal(np.asarray(u.energy), np.asarray(t.energy))
    with pytest.raises(ValueError, match="read from a file, which keeps no dense output"):
        u.evaluate(0.5)
    g = jaxrot.simulate("buss4", jaxrot.problems.get("fast_top"), 1e-2, 10)
    g.save(tmp_path / "g.npz")
    v = jaxrot.load(tmp_path / "g.npz")
    assert v.system is None and v.event_time is None
    with pytest.raises(ValueError, match="has no system"):
        v.energy


def test_evaluate_past_a_run_that_stopped_early_says_so():
    p = jaxrot.problems.get("fast_top")
    tr = jaxrot.simulate("rkmk8(5)", p, t1=1.0, stepsize=jaxrot.Adaptive(1e-8, 1e-8, max_steps=5),
                         saveat=jaxrot.SaveAt(dense=True), throw=False)
    assert tr.result == RESULTS.max_steps_reached
    with pytest.raises(ValueError, match="stopped before the end of its span: a step failed"):
        tr.evaluate(0.9)


def test_traced_failures_name_the_step_body_and_reason():
    """Under jit the failure carries the plain call's message (step, body, reason) inside JAX's
    runtime error, and jaxrot.simulation_errors() re-raises it as the SimulationError itself; under
    vmap with throw=False the good bodies are returned."""
    plain = jaxrot.simulate("midpoint_exp", P, 20.0, 10, throw=False)
    run = jax.jit(lambda s: jaxrot.simulate("midpoint_exp", P, 20.0, 10, state0=s).final.R)
    with pytest.raises(jax.errors.JaxRuntimeError, match=rf"step {int(plain.failed_step)} failed: its nonlinear"):
        jax.block_until_ready(run(P.state0))
    with pytest.raises(jaxrot.SimulationError) as e, jaxrot.simulation_errors():
        jax.block_until_ready(run(P.state0))
    assert e.value.step == int(plain.failed_step) and e.value.reason == RESULTS.solve_failed

    Pi = jnp.stack([P.state0.Pi, 100 * P.state0.Pi, 0.5 * P.state0.Pi])
    s = jaxrot.State(jnp.stack([P.state0.R] * 3), Pi)
    batch = jax.jit(lambda s: jaxrot.simulate_batch("midpoint_exp", P, 2.0, 10, states0=s).final.R)
    with pytest.raises(jaxrot.SimulationError) as e, jaxrot.simulation_errors():
        jax.block_until_ready(batch(s))
    assert e.value.body == (1,) and e.value.reason == RESULTS.solve_failed
    fin = jax.jit(lambda s: jaxrot.final_state("midpoint_exp", P, 2.0, 10, state0=s).R)
    with pytest.raises(jaxrot.SimulationError, match=r"\(body \(1,\)\) failed") as e, jaxrot.simulation_errors():
        jax.block_until_ready(fin(s))

    quiet = jax.vmap(lambda s: jaxrot.simulate("midpoint_exp", P, 2.0, 10, state0=s, throw=False))(s)
    assert list(np.asarray(quiet.result == RESULTS.successful)) == [True, False, True]
    good = jaxrot.simulate("midpoint_exp", P, 2.0, 10, state0=jaxrot.State(s.R[2], s.Pi[2]))
    # to the Newton tolerance, not bit for bit: under vmap the batched Newton iterates until every
    # body has converged, so the good bodies take extra (contracting) iterations (measured 1.8e-14)
    np.testing.assert_allclose(np.asarray(quiet.states.R[2]), np.asarray(good.states.R), rtol=0, atol=1e-12)


def test_large_batches_on_an_accelerator_are_checked_on_the_device_first(monkeypatch):
    """A large batch's flags are reduced where they live before any is read back (the path a GPU
    takes; forced here on the CPU): a clean run reads one number, a failed one still names the body."""
    from jaxrot.driver import failures

    monkeypatch.setattr(failures, "_on_accelerator", lambda failed: True)
    reads = []
    real = failures._max_flag_into_host

    def spied(device):  # the reduction compiled to write into the host's memory, its inputs recorded
        reduce = real(device)
        assert reduce is not None, "the CPU has pinned host memory too"
        return lambda f: reads.append(f.shape) or reduce(f)

    monkeypatch.setattr(failures, "_max_flag_into_host", spied)
    n = failures.ACCELERATOR_CHECK_MIN
    flags = jnp.full((n,), -1, jnp.int32)
    failures.raise_failures(flags, jnp.zeros((n,), jnp.int32))
    assert reads == [(n,)]
    bad = flags.at[n - 3].set(7)
    with pytest.raises(jaxrot.SimulationError, match=rf"step 7 \(body \({n - 3},\)\) failed: .*nonfinite_state") as e:
        failures.raise_failures(bad, jnp.zeros((n,), jnp.int32).at[n - 3].set(RESULTS.nonfinite_state._value))
    assert e.value.body == (n - 3,) and e.value.reason == RESULTS.nonfinite_state
