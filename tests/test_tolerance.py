"""The precision floors of a floating-point type (jaxrot.driver.tolerance): what they are, how a
tolerance below them is raised with one warning, and that the floors hold on float32 runs."""

import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import analysis, problems
from jaxrot.driver.tolerance import PrecisionWarning, global_floor, local_floor, reachable, warn_over_span
from jaxrot.studies.step_count import rotation_angle

EPS32 = float(jnp.finfo(jnp.float32).eps)


def _float32(name, t_end):
    """The registered problem over [0, t_end] as float32 data (the suite runs with x64 enabled)."""
    p = problems.get(name)
    return jaxrot.cast(jaxrot.Problem(p.body, p.torque, p.state0, t_end, p.name), jnp.float32)


def test_the_floors_are_multiples_of_the_types_epsilon():
    assert local_floor(jnp.float32) == pytest.approx(32 * EPS32) and local_floor("float32") < 4e-6
    assert local_floor(np.float64) == pytest.approx(32 * np.finfo(np.float64).eps)
    assert global_floor(jnp.float32, 100) == pytest.approx(200 * EPS32)
    assert global_floor(jnp.float32, 100, angle=10.0) == pytest.approx(280 * EPS32)
    assert global_floor(jnp.float32, 1000) > global_floor(jnp.float32, 100)
    assert global_floor(jnp.float32, 0) == global_floor(jnp.float32, 1)
    with pytest.raises(TypeError, match="floating"):
        local_floor(jnp.int32)
    for bad in (-1, float("nan")):
        with pytest.raises(ValueError, match="n_steps"):
            global_floor(jnp.float32, bad)
    with pytest.raises(ValueError, match="angle"):
        global_floor(jnp.float32, 10, angle=-1.0)


def test_a_tolerance_below_the_floor_is_raised_with_one_warning():
    where = "Adaptive(rtol=1e-08, atol=1e-08)"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rtol, atol = reachable(1e-8, 1e-8, jnp.float32, where=where)
    assert rtol == atol == local_floor(jnp.float32)
    assert [w.category for w in caught] == [PrecisionWarning]
    msg = str(caught[0].message)
    for part in (where, "rtol=1e-08 and atol=1e-08", "float32", "3.8e-06", 'jax.config.update("jax_enable_x64", True)'):
        assert part in msg, msg
    assert caught[0].filename == __file__  # attributed to the caller
    # one of the two only
    with pytest.warns(PrecisionWarning, match=r"Adaptive\(rtol=1e-08, atol=1e-05\): rtol=1e-08 is below"):
        assert reachable(1e-8, 1e-5, jnp.float32, where="Adaptive(rtol=1e-08, atol=1e-05)") == (
            local_floor(jnp.float32), 1e-5)
    # tolerances on the global error of a run of n steps: the global floor where it is higher
    with pytest.warns(PrecisionWarning, match="about 2000 steps"):
        rtol, atol = reachable(1e-5, 1e-5, jnp.float32, where="GlobalError", n_steps=2000, angle=100.0)
    assert rtol == atol == global_floor(jnp.float32, 2000, angle=100.0)


def test_reachable_tolerances_are_left_alone():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert reachable(1e-6, 1e-9, jnp.float64, where="Adaptive()") == (1e-6, 1e-9)
        assert reachable(1e-4, 1e-5, jnp.float32, where="Adaptive()") == (1e-4, 1e-5)
        assert reachable(0.0, 1e-4, jnp.float32, where="Adaptive()") == (0.0, 1e-4)  # no relative term
        assert reachable(1e-4, None, jnp.float32, where="x") == (1e-4, None)


def test_per_body_and_traced_tolerances():
    floor = local_floor(jnp.float32)
    with pytest.warns(PrecisionWarning, match=r"rtol \(down to 1e-09\)"):
        rtol, atol = reachable(np.array([1e-3, 1e-9]), jnp.array([1e-4, 1e-4]), jnp.float32, where="batch")
    assert isinstance(rtol, np.ndarray) and np.allclose(rtol, [1e-3, floor])
    assert isinstance(atol, jax.Array) and np.allclose(atol, [1e-4, 1e-4])
    with pytest.warns(PrecisionWarning):
        _, atol = reachable(1e-3, jnp.array([1e-9, 1e-3], jnp.float32), jnp.float32, where="batch")
    assert isinstance(atol, jax.Array) and atol.dtype == jnp.float32 and np.allclose(atol, [floor, 1e-3])

    # inside a trace the values are unknown: passed through, no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = jax.jit(lambda r, a: reachable(r, a, jnp.float32, where="traced"))(1e-9, 1e-9)
    assert np.allclose(np.asarray(out), 1e-9)


@pytest.mark.parametrize("pair", ["lie_taylor5(4)", "buss4(3)"])
def test_a_float32_run_meets_the_local_floor(pair):
    """At the floor a float32 pair keeps to its tolerance law on the fast-spinning asymmetric top (the
    hardest problem measured): its steps at 1/8 of 8 times the floor are within 1.3 times the law's
    8^(1/(q+1)). At 1/4 of the floor both pairs stalled there (docs/choosing.md)."""
    p = _float32("asymmetric_top", 2.0)
    floor = local_floor(jnp.float32)
    q = {"lie_taylor5(4)": 4, "buss4(3)": 3}[pair]

    def run(tol):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tr = jaxrot.simulate(pair, p, t1=2.0, stepsize=jaxrot.Adaptive(rtol=tol, atol=tol, max_steps=20_000),
                                 saveat=jaxrot.SaveAt(t0=False), throw=False)
        # the floor itself is reachable per step: not raised (the final error, 100 rad turned, is
        # announced as above the tolerance: warn_over_span)
        assert not [w for w in caught if "raised to" in str(w.message)], [str(w.message) for w in caught]
        assert tr.final.R.dtype == jnp.float32
        return int(np.asarray(tr.controller.n_accepted)), int(np.asarray(tr.controller.n_rejected)), tr.result

    loose, at_floor = run(8 * floor), run(floor)
    assert at_floor[2] == jaxrot.RESULTS.successful, at_floor
    assert at_floor[0] <= 1.3 * 8 ** (1 / (q + 1)) * loose[0] and at_floor[1] <= 0.1 * at_floor[0], (loose, at_floor)


@pytest.mark.parametrize("name, method", [("asymmetric_top", "rkmk8"), ("gravity_gradient", "buss4")])
def test_the_global_floor_bounds_float32_round_off(name, method):
    """A float32 run ends within global_floor of the same run in float64 (same data, same steps: the
    difference is the float32 round-off), for a fast spin (500 rad turned; rkmk8 ended at 0.3-0.5 of
    the floor there) and a slow libration."""
    p32 = _float32(name, problems.get(name).t_end)
    T = float(p32.t_end)
    p64 = jaxrot.cast(p32, jnp.float64)
    s64 = jaxrot.State(jaxrot.so3.nearest_rotation(p64.state0.R), p64.state0.Pi)  # orthogonal to float64 precision
    angle = rotation_angle(p32)
    for n in (128, 512):
        fin = [jaxrot.simulate(method, q, T / n, n, state0=s, saveat=jaxrot.SaveAt(t0=False)).final
               for q, s in ((p32, None), (p64, s64))]
        assert fin[0].R.dtype == jnp.float32 and fin[1].R.dtype == jnp.float64
        roundoff = float(analysis.attitude_error(jnp.asarray(fin[0].R, jnp.float64), fin[1].R))
        assert roundoff <= global_floor(jnp.float32, n, angle=angle), (n, roundoff)


def test_tolerances_below_the_round_off_over_the_span_are_announced():
    """An error-controlled run whose tolerances are below the global floor for the angle its bodies
    turn through says so, with the final error to expect, and leaves the tolerances as they are."""
    J, Pi = np.array([1.0, 1.0, 1.0]), np.array([0.0, 0.0, 50.0])  # 50 rad/s: 500 rad in 10 s
    floor = global_floor(jnp.float32, 1, angle=500.0)
    with pytest.warns(PrecisionWarning, match=r"run: .*float32 run .* 500 rad: expect a final error up to about "
                      + f"{floor:.2g}".replace(".", r"\.")):
        assert warn_over_span(1e-5, 1e-5, jnp.float32, J, Pi, 10.0, where="run")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not warn_over_span(1e-5, 1e-5, jnp.float64, J, Pi, 10.0, where="run")  # float64: 8.9e-13
        assert not warn_over_span(1e-3, 1e-5, jnp.float32, J, Pi, 10.0, where="run")  # the larger counts
        assert not warn_over_span(1e-5, 1e-5, jnp.float32, J, Pi, 0.1, where="run")  # 5 rad: 4.9e-6
        # traced values cannot be compared before the run
        assert not jax.jit(lambda r: warn_over_span(r, 1e-9, jnp.float32, J, Pi, 10.0, where="run"))(1e-9)
    # per body: the bodies below their floor are counted
    with pytest.warns(PrecisionWarning, match=r"\(1 of 2 bodies\)"):
        warn_over_span(1e-5, 1e-5, jnp.float32, J, np.array([[0.0, 0.0, 50.0], [0.0, 0.0, 0.5]]), 10.0, where="b")


def test_a_float32_adaptive_run_announces_the_error_it_will_end_with():
    """The asymmetric top in float32 at rtol = atol = 1e-5 (above the per-step floor): over 10 s it
    turns 500 rad, and round-off leaves it 25 times the tolerance from the truth. The run says so
    before it starts, and ends within what it announced."""
    p = _float32("asymmetric_top", 10.0)
    floor = global_floor(jnp.float32, 1, angle=rotation_angle(p))
    with pytest.warns(PrecisionWarning, match=r"Adaptive\(rtol=1e-05, atol=1e-05\): .* expect a final error") as rec:
        tr = jaxrot.simulate("rkmk8(5,3)", p, t1=10.0, stepsize=jaxrot.Adaptive(rtol=1e-5, atol=1e-5),
                             saveat=jaxrot.SaveAt(t0=False))
    assert len(rec) == 1 and rec[0].filename == __file__
    assert tr.final.R.dtype == jnp.float32 and float(tr.info["rtol"]) == 1e-5  # kept
    p64 = jaxrot.cast(p, jnp.float64)
    s64 = jaxrot.State(jaxrot.so3.nearest_rotation(p64.state0.R), p64.state0.Pi)
    truth = jaxrot.reference.reference_solution(p64, state0=s64).final.R
    err = float(analysis.attitude_error(jnp.asarray(tr.final.R, jnp.float64), truth))
    assert 1e-5 < err <= floor, (err, floor)


def _spun_up(dtype, T):
    """A body spun up about its third axis by a torque along its momentum: turned (0.5 t + 5 t^2) / 1.5 rad,
    the rotation about z by that angle exactly (a flow the methods follow to round-off in float64)."""
    def spin_up(t, R, Pi):
        return 10.0 * Pi / jnp.linalg.norm(Pi)

    J = jnp.array([1.0, 1.2, 1.5], dtype)
    return jaxrot.Problem(jaxrot.RigidBody(J), jaxrot.Torque(spin_up),
                          jaxrot.State(jnp.eye(3, dtype=dtype), jnp.array([0.0, 0.0, 0.5], dtype)), T)


def test_a_body_spun_up_by_its_torque_is_announced_after_the_run():
    """The check before the run sees the initial spin only (1.3 rad over 4 s here: silent). Spun up to
    55 rad, the float32 run ends 5 times its tolerance from the exact rotation; the check after the
    run says so from the saved states, on a first call and on a repeated one; float64 is silent."""
    T, theta = 4.0, (0.5 * 4.0 + 5.0 * 16.0) / 1.5
    c, s = np.cos(theta), np.sin(theta)
    exact = jnp.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    p = _spun_up(jnp.float32, T)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not warn_over_span(1e-5, 1e-5, jnp.float32, p.body.J, p.state0.Pi, T, where="run")
    for _ in range(2):  # the second call replays the remembered plan
        with pytest.warns(PrecisionWarning, match=r"turned through up to 5[45]\.\d rad, more than their initial spin"
                          r" foretold .* float32 .* expect a final error up to about") as rec:
            tr = jaxrot.simulate("rkmk8(5,3)", p, t1=T, stepsize=jaxrot.Adaptive(rtol=1e-5, atol=1e-5))
        assert len(rec) == 1 and rec[0].filename == __file__
    err = float(analysis.attitude_error(jnp.asarray(tr.final.R, jnp.float64), exact))
    assert err > 1e-5, err  # the warning was due: the tolerance was not met
    announced = global_floor(jnp.float32, 1, angle=theta)
    assert err <= 2 * announced, (err, announced)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionWarning)
        tr64 = jaxrot.simulate("rkmk8(5,3)", _spun_up(jnp.float64, T), t1=T,
                               stepsize=jaxrot.Adaptive(rtol=1e-5, atol=1e-5))
        jax.jit(lambda Pi: jaxrot.simulate("rkmk8(5,3)", p, t1=T, state0=jaxrot.State(p.state0.R, Pi),
                                           stepsize=jaxrot.Adaptive(rtol=1e-5, atol=1e-5)).final.R)(p.state0.Pi)
    assert float(analysis.attitude_error(tr64.final.R, exact)) < 1e-10


def test_a_spin_up_is_announced_after_the_run_whatever_was_said_before_it():
    """The same body over 8 s (216 rad turned, 2.7 foreseen) at 1e-7: the error-controlled run raises its
    tolerance before the run, and the fixed steps of suggest announce an error for the angle foreseen;
    both say again after the run what it will end with, and end within that."""
    T, theta = 8.0, (0.5 * 8.0 + 5.0 * 64.0) / 1.5
    c, s = np.cos(theta), np.sin(theta)
    exact = jnp.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    p = _spun_up(jnp.float32, T)
    runs = {"Adaptive": lambda: jaxrot.simulate("rkmk8(5,3)", p, t1=T, stepsize=jaxrot.Adaptive(rtol=1e-7, atol=1e-7)),
            "Suggestion.run": lambda: jaxrot.suggest(p, 1e-7).run(p)}
    for name, run in runs.items():
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always", PrecisionWarning)
            tr = run()
        said = [str(w.message) for w in rec if issubclass(w.category, PrecisionWarning)]
        assert len(said) == 2, (name, said)  # one before the run, one after it
        after = said[-1]
        assert after.startswith(name) and re.search(r"turned through (up to )?21\d rad", after), after
        announced = float(re.search(r"expect a final error up to about ([0-9.e+-]+)", after).group(1))
        err = float(analysis.attitude_error(jnp.asarray(tr.final.R, jnp.float64), exact))
        assert 1e-5 < err <= 1.5 * announced, (name, err, announced)


def test_the_angle_after_the_run_counts_what_the_bodies_turned():
    """turned_angle integrates |Pi/J| over the saved times: a terminal event caps each body's times at
    its event, unused frames (infinite times, NaN states) count nothing, and a run that only saves
    its end counts the spin at both ends; the check after the run stays silent where the spin did
    not grow past the initial one, and where a run stops early at an event."""
    from jaxrot.driver.tolerance import turned_angle, warn_turned

    J = jnp.array([1.0, 1.0, 2.0])
    ts = jnp.array([1.0, 2.0, 3.0, jnp.inf])
    Pi = jnp.array([[0.0, 0.0, 2.0], [0.0, 0.0, 4.0], [0.0, 0.0, 6.0], [jnp.nan] * 3])  # |w| = 1, 2, 3
    np.testing.assert_allclose(turned_angle(J, 0.0, jnp.array([0.0, 0.0, 0.0]), ts, Pi), 0.5 + 1.5 + 2.5)
    two = turned_angle(J, 0.0, jnp.zeros((2, 3)), ts, jnp.stack([Pi, Pi]), jnp.array([2.0, jnp.nan]))
    np.testing.assert_allclose(two, [0.5 + 1.5, 4.5])  # the first stopped at t = 2; the second found none
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not warn_turned(1e-5, 1e-5, jnp.float32, np.array([600.0]), np.array([600.0]), where="run")
        # the same body stopped by a terminal event at 1.5 s: 8 rad, silent (its whole run would warn)
        p = _spun_up(jnp.float32, 4.0)
        ev = jaxrot.Event(lambda t, s, args: t - 1.5)
        tr = jaxrot.simulate("rkmk8(5,3)", p, t1=4.0, event=ev, stepsize=jaxrot.Adaptive(rtol=1e-5, atol=1e-5))
        assert float(tr.event_time) == pytest.approx(1.5)
        # every k-th step saved: frames past the last step lie at infinite times, nothing said
        jaxrot.simulate("rkmk8(5,3)", _float32("asymmetric_top", 0.5), t1=0.5,
                        stepsize=jaxrot.Adaptive(rtol=1e-4, atol=1e-4), saveat=jaxrot.SaveAt(steps=5))
    assert warn_turned(1e-5, 1e-5, jnp.float32, np.array([600.0]), np.array([1.0]), where="run")


def test_the_warnings_of_a_run_point_at_its_call():
    """A tolerance raised to the floor and the round-off over the span: the warning (one, saying both)
    names the line of the user's simulate call (once it named jaxrot's own wrapper)."""
    p = _float32("asymmetric_top", 10.0)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        jaxrot.simulate("rkmk8(5,3)", p, t1=0.2, stepsize=jaxrot.Adaptive(rtol=1e-7, atol=1e-7))
    assert [w.category for w in rec] == [PrecisionWarning], [str(w.message) for w in rec]
    assert "raised to" in str(rec[0].message) and "even so" in str(rec[0].message)
    assert [w.filename for w in rec] == [__file__]


def test_float32_save_times_end_at_t1():
    """Save times made in float32 up to t1 = 0.2 lie just above the float 0.2: accepted, with error
    control and with constant steps; times past t1 are refused saying so."""
    p = _float32("asymmetric_top", 0.2)
    tr = jaxrot.simulate("rkmk8(5,3)", p, t1=0.2, stepsize=jaxrot.Adaptive(rtol=1e-4, atol=1e-4),
                         saveat=jaxrot.SaveAt(ts=jnp.linspace(0.05, 0.2, 4, dtype=jnp.float32)))
    assert tr.ts.shape == (5,)
    with pytest.raises(ValueError, match="save times run past t1 = 0.2"):
        jaxrot.simulate("rkmk8(5,3)", p, t1=0.2, stepsize=jaxrot.Adaptive(rtol=1e-4, atol=1e-4),
                        saveat=jaxrot.SaveAt(ts=jnp.linspace(0.05, 0.21, 4)))
    # the last save time 1.5e-6 short of t1: the run still goes on to t1 (it once stopped there)
    tr = jaxrot.simulate("rkmk8(5,3)", p, t1=0.2, stepsize=jaxrot.Adaptive(rtol=1e-4, atol=1e-4),
                         saveat=jaxrot.SaveAt(ts=[0.1, 0.1999985]))
    np.testing.assert_allclose(np.asarray(tr.ts), [0.0, 0.1, 0.1999985, 0.2], rtol=1e-7)
    # constant steps: 20 steps of 0.01 end at float32's 0.19999999, and a save time of float32's 0.2 is
    # that end; a time past the span by more than round-off is refused
    tr = jaxrot.simulate("rk4", p, 0.01, 20, saveat=jaxrot.SaveAt(ts=jnp.linspace(0.05, 0.2, 4, dtype=jnp.float32)))
    assert tr.ts.shape == (5,) and float(tr.ts[-1]) == pytest.approx(0.2, rel=1e-6)
    with pytest.raises(ValueError, match="must lie within the span"):
        jaxrot.simulate("rk4", p, 0.01, 20, saveat=jaxrot.SaveAt(ts=[0.1, 0.2001]))


def test_inside_a_trace_the_span_is_not_checked():
    """Under ``jax.jit`` the state is traced: nothing can be compared before the run, and the check
    must neither fail nor warn (a jitted gradient once failed converting the span to a float)."""
    p = _float32("asymmetric_top", 10.0)

    def final(Pi):
        tr = jaxrot.simulate("rkmk8(5,3)", p, t1=10.0, state0=jaxrot.State(p.state0.R, Pi),
                             stepsize=jaxrot.Adaptive(rtol=1e-5, atol=1e-5), saveat=jaxrot.SaveAt(t0=False))
        return tr.final.R

    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionWarning)
        R = jax.jit(final)(p.state0.Pi)
    assert R.dtype == jnp.float32 and np.all(np.isfinite(np.asarray(R)))


def test_a_suggestion_keeps_the_steps_its_measuring_runs_needed():
    """Runs from initial states a few roundings apart fail at 4-16 steps of this spin-up (the trial runs
    from the state on the axis agreed by chance): the count suggested is where they ran through, and a
    run from a nudged state stays finite; float64 says nothing after the run (its envelope is far above
    its round-off); a stacked problem runs."""
    p = _spun_up(jnp.float32, 6.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrecisionWarning)
        s = jaxrot.suggest(p, 1e-4)
        nudged = jaxrot.State(p.state0.R @ jaxrot.so3.exp(jnp.array([5e-7, 0.0, 0.0], jnp.float32)), p.state0.Pi)
        tr = s.run(p, state0=nudged, throw=False)
    assert round(6.0 / s.dt) >= 32 and bool(jnp.all(jnp.isfinite(tr.final.R))), (s.dt, tr.result)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionWarning)
        p64 = _spun_up(jnp.float64, 8.0)
        jaxrot.suggest(p64, 1e-12).run(p64)
    q = problems.get("asymmetric_top")
    stacked = jaxrot.stack_problems([q, jaxrot.Problem(jaxrot.RigidBody(q.body.J * 1.1), q.torque, q.state0, q.t_end)])
    assert jaxrot.suggest(stacked, 1e-6).run(stacked).final.R.shape == (2, 3, 3)


def test_a_global_error_run_raised_to_the_floor_reports_the_error_its_law_predicts_there():
    """GlobalError in float32 whose calibration chose a local tolerance below the per-step floor: the
    warning and the trajectory's statistics give the global error the calibration's law puts at the
    raised tolerance (not the aim), and the run ends near it."""
    from jaxrot.driver.global_error import scaled_difference

    p = _float32("asymmetric_top", 2.0)
    q = problems.get("asymmetric_top")
    ref = jaxrot.simulate("rkmk8(5)", jaxrot.Problem(q.body, q.torque, q.state0, 2.0), t1=2.0, stepsize=jaxrot.Adaptive(1e-13, 1e-13),
                          saveat=jaxrot.SaveAt(t0=False))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        tr = jaxrot.simulate("buss4(3)", p, t1=2.0, stepsize=jaxrot.GlobalError(jaxrot.Adaptive(1e-5, 1e-5)),
                             saveat=jaxrot.SaveAt(t0=False))
    said = [str(x.message) for x in w if "calibration chose" in str(x.message)]
    assert len(said) == 1, [str(x.message) for x in w]
    chosen = float(re.search(r"rtol=([0-9.e+-]+)", said[0]).group(1))
    predicted = float(tr.controller.global_error)
    # buss4(3): the law's least exponent p / (q + 1) = 1
    assert predicted == pytest.approx(local_floor(jnp.float32) / chosen, rel=1e-4) and predicted > 1.5
    assert f"about {predicted:.2g} times the tolerance asked" in said[0]
    assert float(tr.controller.tolerance) == pytest.approx(local_floor(jnp.float32))
    final = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float64), tr.states)
    error = float(scaled_difference(final, ref.states, 1e-5, 1e-5))
    assert 0.5 * predicted < error < 2.0 * predicted


@pytest.mark.parametrize("rtol, atol", [(1e-6, 1e-6), pytest.param(1e-8, 1e-6, marks=pytest.mark.slow)])
def test_a_global_error_request_below_the_floor_reports_in_units_of_the_tolerance_asked(rtol, atol):
    """GlobalError(Adaptive(rtol, atol)) in float32 below the per-step floor: the request itself is
    raised to the floor before the calibration; the global error reported, and the one the warning
    states, are measured in units of the tolerances asked (the mixed norm with rtol and atol as
    given, also where only one of them was raised), and the run ends near it."""
    from jaxrot.driver.global_error import scaled_difference

    p = _float32("asymmetric_top", 2.0)
    q = problems.get("asymmetric_top")
    ref = jaxrot.simulate("rkmk8(5)", jaxrot.Problem(q.body, q.torque, q.state0, 2.0), t1=2.0,
                          stepsize=jaxrot.Adaptive(1e-13, 1e-13), saveat=jaxrot.SaveAt(t0=False))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        tr = jaxrot.simulate("buss4(3)", p, t1=2.0, stepsize=jaxrot.GlobalError(jaxrot.Adaptive(rtol, atol)),
                             saveat=jaxrot.SaveAt(t0=False))
    reported = float(tr.controller.global_error)
    said = [str(x.message) for x in w if "calibration chose" in str(x.message)]
    assert len(said) == 1 and f"about {reported:.2g} times the tolerance asked" in said[0], said
    final = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float64), tr.states)
    error = float(scaled_difference(final, ref.states, rtol, atol))
    assert error > 5 and 0.5 * reported < error < 2.0 * reported  # (measured: 33 against 26; 55 against 44)


def test_default_tolerances_in_float32_give_one_warning_saying_both_floors():
    """Adaptive()'s defaults (1e-6, 1e-9) are below float32's per-step floor, and the raised tolerance
    is still below the round-off over the span: one warning says both."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        jaxrot.simulate("buss4(3)", _float32("asymmetric_top", 2.0), t1=2.0, stepsize=jaxrot.Adaptive())
    said = [str(x.message) for x in w if issubclass(x.category, PrecisionWarning)]
    assert len(said) == 1, said
    assert "raised to 3.8e-06" in said[0] and "even so they are below the round-off" in said[0]


def test_float64_warnings_and_failures_do_not_advise_float64():
    """The advice to run in float64 is given to runs that are not float64 only."""
    p = problems.get("asymmetric_top")
    with pytest.warns(PrecisionWarning) as w64:
        jaxrot.simulate("rkmk8(5)", p, t1=0.1, stepsize=jaxrot.Adaptive(1e-16, 1e-16))
    assert w64 and not any("jax_enable_x64" in str(x.message) for x in w64)
    with pytest.warns(PrecisionWarning) as w32:
        jaxrot.simulate("rkmk8(5)", _float32("asymmetric_top", 0.1), t1=0.1, stepsize=jaxrot.Adaptive(1e-8, 1e-8))
    assert any("jax_enable_x64" in str(x.message) for x in w32)
    for problem, float32 in ((p, False), (_float32("asymmetric_top", 1.0), True)):
        with pytest.raises(jaxrot.SimulationError, match="max_steps") as e:
            jaxrot.simulate("rkmk8(5)", problem, t1=1.0, stepsize=jaxrot.Adaptive(1e-5, 1e-5, max_steps=3))
        assert ("jax_enable_x64" in str(e.value)) == float32, str(e.value)


def test_a_calibrated_batch_whose_check_runs_stall_in_float32_keeps_its_prediction():
    """GlobalError on a batch calibrated on a subset: where the law's tolerance lies far below the
    calibration runs, the worst bodies are run there to check it; in float32 below the per-step floor
    those runs stall, and the law's prediction (raised with the tolerance) is reported, not 0."""
    p = _float32("asymmetric_top", 2.0)
    B = 256
    S = jaxrot.State(jnp.broadcast_to(p.state0.R, (B, 3, 3)),
                     p.state0.Pi * jnp.linspace(0.5, 1.5, B, dtype=jnp.float32)[:, None])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        tr = jaxrot.simulate("buss4(3)", p, t1=2.0, state0=S, stepsize=jaxrot.GlobalError(jaxrot.Adaptive(1e-5, 1e-5)),
                             saveat=jaxrot.SaveAt(t0=False))
    said = [str(x.message) for x in w if "calibration chose" in str(x.message)]
    assert len(said) == 1
    predicted = np.asarray(tr.controller.global_error)
    assert predicted.shape == (B,) and np.all(predicted > 1.0)
    assert f"about {float(predicted.max()):.2g} times the tolerance asked" in said[0]
