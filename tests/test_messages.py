"""What a user reads when something is wrong: short, specific messages that say what to do."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import RESULTS, problems
from jaxrot.driver import failures
from jaxrot.driver.checks import run_time_check

jax.config.update("jax_enable_x64", True)
P = problems.get("t_handle")


# --- names -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("lookup", [jaxrot.integrators.get, jaxrot.integrators.info,
                                    lambda name: jaxrot.simulate(name, P, 0.01, 10)])
def test_a_mistyped_method_name_suggests_the_close_ones(lookup):
    with pytest.raises(KeyError) as e:
        lookup("bus4")
    text = str(e.value)
    assert text.startswith("unknown method 'bus4'; known:")  # not quoted as a KeyError's key
    assert "Did you mean 'buss4'" in text and "jaxrot list" in text
    assert "saba2" not in text and len(text) < 250  # not the whole registry


def test_a_mistyped_problem_name_suggests_the_close_ones():
    with pytest.raises(KeyError) as e:
        problems.get("fast_tops")
    text = str(e.value)
    assert text.startswith("unknown problem 'fast_tops'") and "Did you mean 'fast_top'" in text
    assert "jaxrot list problems" in text and "dancing_pole" not in text
    with pytest.raises(KeyError, match="known: ") as e:  # nothing close: no guess
        problems.get("zzz")
    assert "Did you mean" not in str(e.value)


# --- State.from_quaternion -------------------------------------------------------------------------------------
@pytest.mark.parametrize("q", [jnp.zeros(4), jnp.array([jnp.nan, 0.0, 0.0, 1.0]), jnp.array([1e-200, 0.0, 0.0, 0.0])])
def test_a_quaternion_without_an_attitude_is_refused(q):
    with pytest.raises(ValueError, match=r"from_quaternion: q must be a finite, nonzero quaternion"):
        jaxrot.State.from_quaternion(q, jnp.ones(3), order="wxyz")


def test_a_bad_quaternion_is_named_in_a_batch_and_under_transforms():
    q = jnp.array([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match=r"q \(entry 1\) must be"):
        jaxrot.State.from_quaternion(q, jnp.ones(3), order="wxyz")
    with pytest.raises(ValueError, match=r"q \(entry 1\) must be"):  # vmap: the values are known
        jax.vmap(lambda q: jaxrot.State.from_quaternion(q, jnp.ones(3), order="wxyz").R)(q)
    f = jax.jit(lambda q: jaxrot.State.from_quaternion(q, jnp.ones(3), order="wxyz").R)
    np.testing.assert_allclose(f(q[0]), np.eye(3))
    with pytest.raises(ValueError, match="q must be a finite, nonzero quaternion"), jaxrot.simulation_errors():
        jax.block_until_ready(f(q[1]))


# --- RESULTS -------------------------------------------------------------------------------------------------------
def test_results_print_as_their_names():
    assert repr(RESULTS.successful) == str(RESULTS.successful) == "RESULTS.successful"
    assert repr(RESULTS.max_steps_reached) == "RESULTS.max_steps_reached"
    traj = jaxrot.simulate("buss2p", P, 0.01, 3)
    assert repr(traj.result) == "RESULTS.successful" and "result=RESULTS.successful" in repr(traj)
    batch = failures.result_of(jnp.array([0, 1, 0]))
    assert repr(batch) == "RESULTS per body (3 bodies): 2 successful, 1 solve_failed"
    assert bool(traj.result == RESULTS.successful) and list(np.asarray(batch == RESULTS.solve_failed)) == [0, 1, 0]


# --- Problem -------------------------------------------------------------------------------------------------------
def test_a_problem_without_a_torque_model_says_which_to_use():
    with pytest.raises(TypeError, match=r"torque is None: for a torque-free body pass jaxrot.torques.FreeTorque\(\)"):
        jaxrot.Problem(P.body, None, P.state0, 1.0)


@pytest.mark.parametrize("fields, error, message", [
    ((P.body.J, P.torque, P.state0, 1.0), TypeError, r"body must be a jaxrot.RigidBody, got \w+ \(the moments"),
    ((P.body, P.torque, (P.state0.R, P.state0.Pi), 1.0), TypeError, r"state0 must be a jaxrot.State, got tuple"),
    ((P.body, P.torque, jaxrot.State(jnp.eye(3), jnp.ones(2)), 1.0), ValueError,
     r"state0 must have R of shape .* Pi \(\.\.\., 3\); got \(3, 3\), \(2,\)"),
    ((P.body, P.torque, P.state0, None), TypeError, "t_end must be a number"),
    ((P.body, P.torque, P.state0, 0.0), ValueError, "t_end must be a finite number > 0"),
    ((P.body, P.torque, P.state0, 1.0, 7), TypeError, "name must be a string, got int 7"),
])
def test_problem_fields_are_checked_by_name(fields, error, message):
    with pytest.raises(error, match="Problem: " + message):
        jaxrot.Problem(*fields)


# --- the exact flow of a batch ---------------------------------------------------------------------------------
def test_free_flow_takes_leading_batch_axes():
    J, s0 = P.body.J, P.state0
    Pi = jnp.stack([s0.Pi, 0.5 * s0.Pi, jnp.array([0.3, -2.0, 0.4])])
    batch = jaxrot.State(jnp.stack([s0.R, s0.R.T, jnp.eye(3)]), Pi)
    out = jaxrot.exact.free_flow(J, batch, 1.5)
    for i in range(3):
        one = jaxrot.exact.free_flow(J, jaxrot.State(batch.R[i], batch.Pi[i]), 1.5)
        np.testing.assert_allclose(out.R[i], one.R, atol=1e-13)
        np.testing.assert_allclose(out.Pi[i], one.Pi, atol=1e-13)
    ts = jnp.array([0.5, 1.5])  # several times of one state; then times x bodies
    np.testing.assert_allclose(jaxrot.exact.free_flow(J, s0, ts).R[1], jaxrot.exact.free_flow(J, s0, 1.5).R, atol=1e-13)
    assert jaxrot.exact.free_flow(J, batch, ts[:, None]).R.shape == (2, 3, 3, 3)
    with pytest.raises(ValueError, match="do not broadcast"):
        jaxrot.exact.free_flow(J, batch, ts)


# --- advice after a failed run ---------------------------------------------------------------------------------
def _advice(name, where=""):
    code = int(getattr(RESULTS, name)._value)
    err = failures.failure_error(np.array(4), np.array(code), where)
    assert failures._MESSAGE.search(str(err))["name"] == name  # simulation_errors() still reads it back
    return str(err)


def test_the_advice_depends_on_the_reason():
    solve = _advice("solve_failed")
    assert "reduce dt" in solve and "jaxrot.integrators.AdaptiveKantorovich(method)" in solve
    blowup = _advice("nonfinite_state")
    assert "reduce dt" in blowup and "AdaptiveKantorovich" not in blowup
    assert "tighten rtol/atol" in _advice("nonfinite_state", "adaptive run: ")
    assert "InvariantMonitor" in _advice("invariant_drift")
    budget = _advice("max_steps_reached", "adaptive run: ")
    assert "max_steps" in budget and "loosen rtol/atol" in budget and "float32" in budget
    assert "dt" not in budget.replace("float", "") and "AdaptiveKantorovich" not in budget
    assert all(a.endswith("pass throw=False to get the per-body flags.") for a in (solve, blowup, budget))


def test_an_adaptive_run_out_of_steps_is_told_about_max_steps():
    with pytest.raises(jaxrot.SimulationError, match=r"max_steps_reached\)\. Raise jaxrot.Adaptive\(max_steps") as e:
        jaxrot.simulate("buss4(3)", P, t1=1.0, stepsize=jaxrot.Adaptive(rtol=1e-8, atol=1e-8, max_steps=3))
    assert "Reduce dt" not in str(e.value)


# --- errors under jit and vmap ---------------------------------------------------------------------------------
def _run(dt, Pi):
    return jaxrot.simulate("buss2p", P, dt, 10, state0=jaxrot.State(P.state0.R, Pi)).final.R


def test_a_bad_traced_input_is_reported_once_without_equinox_banner(caplog):
    run = jax.jit(_run)
    with caplog.at_level(logging.ERROR), pytest.raises(jax.errors.JaxRuntimeError) as e:
        jax.block_until_ready(run(0.0, P.state0.Pi))
    assert "dt must be finite and > 0, got 0.0" in str(e.value)
    assert "filter_jit" not in str(e.value) and str(e.value).count("dt must be finite") == 1
    assert not [r for r in caplog.records if "callback failed" in r.getMessage()]  # JAX's log of the same error


def test_simulation_errors_reraises_the_plain_value_error_on_every_dispatch_path():
    # a compiled function called again goes through JAX's fast path, which reports a callback's
    # error as a ValueError with JAX's text (a JaxRuntimeError from a Python dispatch)
    f = jax.jit(lambda x: run_time_check(x, x < 0, lambda v: f"x must be >= 0, got {v}", (x,)) * 2)
    assert float(f(1.0)) == 2.0
    for bad in (-1.0, -2.0):
        with pytest.raises(ValueError) as e, jaxrot.simulation_errors():
            jax.block_until_ready(f(bad))
        assert str(e.value) == f"x must be >= 0, got {bad}"

    run = jax.jit(_run)
    jax.block_until_ready(run(0.01, P.state0.Pi))  # a good call: later calls take JAX's fast path
    with pytest.raises(ValueError) as plain:
        _run(0.0, P.state0.Pi)
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError) as e, jaxrot.simulation_errors():
            jax.block_until_ready(run(bad, P.state0.Pi))
        assert str(e.value) == str(plain.value).replace("0.0", str(bad))


def test_vmap_names_the_bad_body():
    Pi = jnp.stack([P.state0.Pi, P.state0.Pi.at[1].set(jnp.nan), P.state0.Pi])
    with pytest.raises(ValueError, match=r"^initial state of body 1 contains NaN or inf"):
        jax.vmap(_run, in_axes=(None, 0))(0.01, Pi)
    with pytest.raises(ValueError, match=r"^initial state of body 1 contains NaN or inf"), jaxrot.simulation_errors():
        jax.block_until_ready(jax.jit(jax.vmap(_run, in_axes=(None, 0)))(0.01, Pi))
    # a shared (unbatched) dt is not a body's
    with pytest.raises(ValueError, match=r"^dt must be finite and > 0, got 0.0$"), jaxrot.simulation_errors():
        jax.block_until_ready(jax.jit(jax.vmap(_run, in_axes=(None, 0)))(0.0, Pi[::2]))


# --- wording found in a new user's trial -------------------------------------------------------------------------
def test_an_unknown_name_is_a_value_error_too():
    with pytest.raises(ValueError, match="unknown method 'bus4'"):
        jaxrot.simulate("bus4", P, 0.01, 10)
    with pytest.raises(ValueError, match="unknown problem"):
        problems.get("fast_tops")


def test_a_span_that_ends_before_it_starts_says_so():
    with pytest.raises(ValueError, match=r"^t1 must be after t0 \(runs go forward in time\), got t0 = 0.0, t1 = -1.0$"):
        jaxrot.simulate("buss4", P, 0.01, t1=-1.0)


def test_a_file_in_place_of_the_output_folder_is_named_as_such(tmp_path):
    from jaxrot.present import output

    (tmp_path / "afile").write_text("")
    with pytest.raises(output.OutputError, match="is a file, not a folder"):
        output.check_file(tmp_path / "afile" / "x.npz", "--save")
    with pytest.raises(output.OutputError, match="does not exist"):
        output.check_file(tmp_path / "nothing" / "x.npz", "--save")


def test_problems_that_cannot_be_stacked_say_where_they_differ():
    lean = jaxrot.Problem(jaxrot.RigidBody(P.body.J, physical=False), P.torque, P.state0, P.t_end)
    with pytest.raises(ValueError, match=r"problem 1's body has physical=False, problem 0's physical=True"):
        jaxrot.stack_problems([P, lean, P])
    with pytest.raises(ValueError, match=r"problem 1's torque is a GravityTorque, problem 0's a FreeTorque"):
        jaxrot.stack_problems([P, problems.get("fast_top")])
