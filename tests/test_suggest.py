"""suggest() decides from the facts of a problem, and its choice meets the tolerance, on problems
it was not written for as well."""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import analysis, integrators, kernels, problems, reference
from jaxrot.driver.executors import FUSED_ADAPTIVE_MAX_LINES
from jaxrot.kernels import generate
from jaxrot.physics.torques import GravityTorque
from jaxrot.studies.step_count import steps_for_tolerance
from jaxrot.studies.suggest import _lagrange_top, suggest


def test_choices_follow_the_facts_not_the_names():
    assert suggest(problems.get("free_body_mz"), 1e-8).method == "exact_free"
    lagrange = suggest(problems.get("fast_top"), 1e-8)  # axisymmetric; its kernel is past what is fused by default
    assert lagrange.method == "exact_split_kl8" and lagrange.executor is None
    if kernels.have_warp():  # (the length decides: its step counts more than 5 000 lines, its flow's
        # short loops at each pass as they compile, though written out in about 3 000)
        kl8, top = integrators.get("exact_split_kl8"), problems.get("fast_top").system
        assert not generate.written_within(kl8, top, jnp.float64, FUSED_ADAPTIVE_MAX_LINES, pair=False)
        assert generate.written_within(kl8, top, jnp.float64, 4 * FUSED_ADAPTIVE_MAX_LINES, pair=False)
    assert suggest(problems.get("buss_torqued"), 1e-8).method == "rkmk8"  # prescribed L(t)
    assert suggest(problems.get("asymmetric_top"), 1e-6).method == "rkmk8"
    p = problems.get("fast_top")
    renamed = jaxrot.Problem(jaxrot.RigidBody(jnp.array([5.0, 4.0, 1.0])), p.torque, p.state0, p.t_end, name="fast_top")
    assert suggest(renamed, 1e-6).method == "rkmk8"  # the body decides, not the name
    off_axis = jaxrot.Problem(p.body, GravityTorque(mgl=20.0, com=(0.6, 0.0, 0.8)), p.state0, p.t_end)
    assert _lagrange_top(p) and not _lagrange_top(off_axis)  # axisymmetric, but the com is off the axis: rkmk8
    for bad in (0.0, -1e-6, float("nan")):  # (checked with or without Warp installed)
        with pytest.raises(ValueError, match="tol"):
            suggest(p, bad)


def test_the_suggestion_runs_in_a_fused_kernel_where_one_exists():
    p = problems.get("asymmetric_top")
    p = jaxrot.Problem(p.body, p.torque, p.state0, 0.2, p.name)
    s = suggest(p, 1e-6)
    if not kernels.have_warp():
        assert s.executor is None
        return
    assert isinstance(s.executor, jaxrot.Fused) and "fused kernel" in s.reason
    fused = s.run(p, saveat=jaxrot.SaveAt(t0=False))
    xla = s.run(p, saveat=jaxrot.SaveAt(t0=False), executor=jaxrot.XLA())
    assert dict(fused.provenance)["executor"] == "Fused" and dict(xla.provenance)["executor"] == "XLA"
    np.testing.assert_allclose(np.asarray(fused.final.R), np.asarray(xla.final.R), rtol=0, atol=1e-13)
    # a plain-function torque runs in the kernel too (restated from its jaxpr), unless it uses something
    # the restatement does not cover (here an eigendecomposition)
    damped = jaxrot.Problem(p.body, lambda t, R, Pi: -0.1 * R @ (Pi / p.body.J), p.state0, 0.2)
    assert isinstance(suggest(damped, 1e-6).executor, jaxrot.Fused)
    eigh = jaxrot.Problem(p.body, lambda t, R, Pi: -0.1 * Pi * jnp.linalg.eigvalsh(R + R.T)[0], p.state0, 0.2)
    assert suggest(eigh, 1e-6).executor is None


def test_steps_follow_the_order_and_the_estimate_is_close():
    """Fixed steps from the asymptotic error of trial runs: 1e-4 times the tolerance needs
    10^(4/8) = 3.2x the steps of an eighth-order method, and the run meets the tolerance within 2x."""
    p = problems.get("asymmetric_top")
    p = jaxrot.Problem(p.body, p.torque, p.state0, 1.0, p.name)
    ref = reference.reference_solution(p, 1.0).final
    n6, n10 = (steps_for_tolerance("rkmk8", p, tol) for tol in (1e-6, 1e-10))
    assert 2.5 <= n10.n_steps / n6.n_steps <= 4.0 and abs(n10.observed_order - 8) < 1, (n6, n10)
    for n, tol in ((n6, 1e-6), (n10, 1e-10)):
        got = jaxrot.simulate("rkmk8", p, 1.0 / n.n_steps, n.n_steps, saveat=jaxrot.SaveAt(t0=False)).final
        assert 0.3 * tol <= float(analysis.attitude_error(got.R, ref.R)) <= 2 * tol, n
    with pytest.raises(ValueError, match="asymptotic"):
        steps_for_tolerance("rkmk8", p, 1e-10, max_steps=16)


@pytest.mark.parametrize("name, tol", [("gravity_gradient", 1e-6), ("asymmetric_top", 1e-6), ("fast_top", 1e-8),
                                       ("t_handle", 1e-8)])
def test_the_suggested_run_meets_the_tolerance(name, tol):
    p = problems.get(name)
    T = min(p.t_end, 2.0)
    p = jaxrot.Problem(p.body, p.torque, p.state0, T, p.name)
    s = suggest(p, tol)
    got = s.run(p, saveat=jaxrot.SaveAt(t0=False)).final
    ref = reference.reference_solution(p, T).final
    err = float(analysis.attitude_error(got.R, ref.R))
    assert err <= 3 * tol, (s, err)


def test_an_unseen_body_and_torque():
    """A damped asymmetric body with a plain-function torque: not a problem the rules were written for."""
    body = jaxrot.RigidBody(jnp.array([1.0, 2.5, 3.2]))
    damping = lambda t, R, Pi: -0.3 * R @ (Pi / jnp.array([1.0, 2.5, 3.2]))  # noqa: E731
    p = jaxrot.Problem(body, damping, jaxrot.State(jnp.eye(3), jnp.array([0.3, 2.0, -0.5])), t_end=3.0)
    s = suggest(p, 1e-7)
    got = s.run(p, saveat=jaxrot.SaveAt(t0=False)).final
    fine = jaxrot.simulate("rk4", p, 3.0 / 6000, 6000, saveat=jaxrot.SaveAt(t0=False)).final
    assert float(analysis.attitude_error(got.R, fine.R)) <= 3e-7, s


def test_a_satellite_whose_coarse_trial_runs_are_far_off():
    """100 satellites (random body and orbit, from `jaxrot bench unseen`, perturbed) whose 16-step trial
    run is 1 rad off: a ratio of differences that large is no convergence rate (it once read as order
    9 and gave 4x the tolerance); the estimate waits for small differences and meets the tolerance."""
    from jaxrot.experiments import bench_unseen
    from jaxrot.experiments.precision_runs import max_error, perturbed_batch

    p = bench_unseen.unseen_problems()["satellite, random body and orbit"]
    S = perturbed_batch(p, 100)
    tol = 1e-5
    n = steps_for_tolerance("rkmk8", p, tol, state0=S)
    assert n.observed_order is not None, n
    def final(N):
        return jaxrot.simulate("rkmk8", p, p.t_end / N, N, state0=S, saveat=jaxrot.SaveAt(t0=False)).final

    err = max_error(final(n.n_steps), final(4 * n.n_steps))  # the reference: 4x the steps, 4^8 x smaller error
    assert 0.1 * tol <= err <= 2 * tol, (n, err)


# float32: tests run with x64 enabled (conftest), so a float32 run is built by casting the problem's data
def _float32(name, t_end=None):
    p = problems.get(name)
    p = jaxrot.Problem(p.body, p.torque, p.state0, p.t_end if t_end is None else t_end, p.name)
    return jaxrot.cast(p, jnp.float32)


def _truth(p32):
    """The reference of the float32 data (the attitude made orthogonal to float64 precision)."""
    p = jaxrot.cast(p32, jnp.float64)
    s = jaxrot.State(jaxrot.so3.nearest_rotation(p.state0.R), p.state0.Pi)
    if p.torque.is_free:
        return jaxrot.exact.free_flow(p.body.J, s, p.t_end).R
    return reference.reference_solution(p, state0=s).final.R


@pytest.mark.parametrize("name, t_end, tol", [("gravity_gradient", None, 1e-4), ("buss_torqued", None, 1e-6),
                                              ("slow_top", None, 1e-4), ("free_body_hlw", None, 1e-5)])
def test_a_float32_suggestion_meets_the_error_it_announces(name, t_end, tol):
    """In float32 the suggestion meets the tolerance, or warns before anything runs and announces the
    error it will meet instead (the slow top amplifies round-off well above the floor of
    well-conditioned problems: the announcement there rests on the runs that measure it)."""
    from jaxrot.driver.tolerance import PrecisionWarning

    p32 = _float32(name, t_end)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = suggest(p32, tol)
    warned = [str(w.message) for w in caught if issubclass(w.category, PrecisionWarning)]
    assert s.dtype == jnp.float32 and s.expected_error >= tol and "expected final error" in s.reason, s
    assert len(warned) == (1 if s.expected_error > tol else 0), (s, warned)
    if warned:
        assert f"{s.expected_error:.2g}" in warned[0] and "float32" in warned[0], warned
    traj = s.run(p32, saveat=jaxrot.SaveAt(t0=False))
    assert traj.final.R.dtype == jnp.float32 and traj.info["dtype"] == "float32"
    err = float(analysis.attitude_error(jnp.asarray(traj.final.R, jnp.float64), _truth(p32)))
    assert err <= s.expected_error, (s, err)


def test_a_tolerance_float32_cannot_reach_is_raised_and_announced():
    """1e-8 on the asymmetric top (500 rad turned in 10 s): float32 round-off alone is ~1e-4 rad. The
    suggestion for a float32 run (dtype=) says so with one warning and announces what it reaches;
    the same tolerance in float64 is reachable and announced as such."""
    from jaxrot.driver.tolerance import PrecisionWarning, global_floor

    p = problems.get("asymmetric_top")
    with pytest.warns(PrecisionWarning, match=r"suggest\(tol=1e-08\): a float32 run of rkmk8 .*jax_enable_x64") as rec:
        s = suggest(p, 1e-8, dtype=jnp.float32)
    assert [w.filename for w in rec if issubclass(w.category, PrecisionWarning)] == [__file__]  # the caller's line
    n = round(p.t_end / s.dt)
    assert s.dtype == jnp.float32 and s.expected_error >= global_floor(jnp.float32, n, angle=500.0) > 1e-4, s
    assert f"expected final error {s.expected_error:.2g} rad in float32" in s.reason
    traj = s.run(p, saveat=jaxrot.SaveAt(t0=False))  # run in float32 (the suggestion's dtype)
    assert traj.final.R.dtype == jnp.float32
    err = float(analysis.attitude_error(jnp.asarray(traj.final.R, jnp.float64), _truth(jaxrot.cast(p, jnp.float32))))
    assert err <= s.expected_error, (s, err)

    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionWarning)
        s64 = suggest(p, 1e-8)
    assert s64.dtype == jnp.float64 and s64.expected_error == 1e-8


def test_float32_trial_runs_stop_at_round_off():
    """Trial runs in float32 asked for 1e-8: their differences bottom out at round-off (~1e-4), where
    doubling the steps only adds round-off; the search stops there instead of running to max_steps."""
    p32 = _float32("asymmetric_top")
    n = steps_for_tolerance("rkmk8", p32, 1e-8, max_steps=1 << 13)
    assert n.roundoff_limited and n.n_steps <= 1024 and n.steps_for(1e-12) == n.n_steps, n
