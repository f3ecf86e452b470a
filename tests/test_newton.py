import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrot
from jaxrot import problems, so3
from jaxrot.integrators import LieMidI
from jaxrot.integrators.exponential import midpoint_residual
from jaxrot.integrators.newton import Newton, newton


def test_newton_solves_and_counts():
    x, st = newton(lambda x: x**3 - jnp.array([1.0, 8.0, 27.0]), jnp.ones(3))
    np.testing.assert_allclose(x, [1.0, 2.0, 3.0], rtol=1e-15)
    assert bool(st.converged) and 3 <= int(st.iters) <= 30


def test_newton_reports_failure():
    # x^2 + 1 = 0 has no real root
    x, st = newton(lambda x: x * x + 1.0, jnp.full(3, 0.3), max_iters=20)
    assert not bool(st.converged) and 1 <= int(st.iters) <= 20


def test_jacobian_matches_central_differences():
    # the Jacobian Newton uses (jacfwd) against central differences, and against Krysl's closed-form Jacobian
    J = jnp.array([2.5, 1.4, 1.3])
    ell = jnp.array([3.0, 1.0, 0.0])
    F = midpoint_residual(J, jnp.eye(3), ell)
    v = jnp.array([0.7, -0.3, 0.2])
    Jac = jax.jacfwd(F)(v)
    e = 1e-6
    fd = np.stack([(F(v + e * d) - F(v - e * d)) / (2 * e) for d in np.eye(3)], -1)
    np.testing.assert_allclose(Jac, fd, atol=1e-9)
    spec = np.eye(3) - 0.5 * np.diag(1 / J) @ so3.hat(so3.rotate(-v / 2, ell)) @ so3.left_jacobian(-v / 2)
    np.testing.assert_allclose(Jac, spec, atol=1e-14)


def test_implicit_gradient_equals_unrolled_and_fd():
    def sol(a, implicit):
        return newton(lambda x: x**3 + a * x - jnp.array([1.0, 2.0, 3.0]), jnp.zeros(3), implicit_diff=implicit)[0]

    g_impl = jax.grad(lambda a: jnp.sum(sol(a, True) ** 2))(2.0)
    g_unr = jax.grad(lambda a: jnp.sum(sol(a, False) ** 2))(2.0)
    fd = (jnp.sum(sol(2.0 + 1e-6, True) ** 2) - jnp.sum(sol(2.0 - 1e-6, True) ** 2)) / 2e-6
    assert abs(float(g_impl - g_unr)) < 1e-12
    assert abs(float(g_impl - fd)) < 1e-8


def _liemid_i_loss(J, Pi0):
    p = problems.get("fast_top")
    q = jaxrot.Problem(jaxrot.RigidBody(J), p.torque, jaxrot.State(p.state0.R, Pi0), 1.0)
    method = LieMidI(newton=Newton(max_iters=12))
    fin = jaxrot.simulate(method, q, 0.01, 30, saveat=jaxrot.SaveAt(steps=30)).final
    return jnp.sum(fin.R * jnp.arange(9.0).reshape(3, 3)) + jnp.dot(fin.Pi, jnp.array([0.3, -0.2, 0.1]))


def test_liemid_i_trajectory_gradients():
    p = problems.get("fast_top")
    J, Pi0 = p.body.J, p.state0.Pi
    # (implicit = unrolled gradients of a Newton solve: test_implicit_gradient_equals_unrolled_and_fd)
    gJ, gP = jax.grad(_liemid_i_loss, argnums=(0, 1))(J, Pi0)
    for x, g, arg in [(J, gJ, 0), (Pi0, gP, 1)]:
        for i in range(3):
            h = 1e-6 * max(1.0, abs(float(x[i])))
            args_p, args_m = [J, Pi0], [J, Pi0]
            args_p[arg] = x.at[i].add(h)
            args_m[arg] = x.at[i].add(-h)
            fd = (_liemid_i_loss(*args_p) - _liemid_i_loss(*args_m)) / (2 * h)
            assert abs(float(g[i] - fd)) <= 1e-6 * max(1.0, abs(float(fd))), (arg, i, g[i], fd)


def test_failed_solve_raises_and_flags():
    # Newton capped at 1 iteration cannot converge to the tolerance
    p = problems.get("t_handle")
    m = jaxrot.integrators.MidpointExp(newton=Newton(max_iters=1))
    with pytest.raises(jaxrot.SimulationError, match="step 1 "):
        jaxrot.simulate(m, p, 0.1, 10, saveat=jaxrot.SaveAt(steps=5))
    tr = jaxrot.simulate(m, p, 0.1, 10, saveat=jaxrot.SaveAt(steps=5), throw=False)
    assert int(tr.failed_step) == 1 and not bool(tr.stats.converged[0])


def test_failed_solve_inside_jit_raises():
    p = problems.get("t_handle")
    m = jaxrot.integrators.MidpointExp(newton=Newton(max_iters=1))

    @eqx.filter_jit
    def f(Pi0):
        return jaxrot.simulate(m, p, 0.1, 4, state0=jaxrot.State(p.state0.R, Pi0)).final.Pi

    with pytest.raises(Exception, match="did not converge"):
        f(p.state0.Pi)


def test_newton_stats_in_trajectory():
    tr = jaxrot.simulate("liemid_ea", problems.get("fast_top"), 0.01, 20, saveat=jaxrot.SaveAt(steps=10))
    assert np.all(np.asarray(tr.stats.newton_iters) >= 2)  # two solves per step
    assert bool(tr.stats.converged.all())


def test_closed_form_3x3_solve_matches_lapack_and_flags_singular_systems():
    from jaxrot.integrators.newton import solve

    rng = np.random.default_rng(3)
    for _ in range(5):
        A, b = jnp.asarray(rng.normal(size=(3, 3))), jnp.asarray(rng.normal(size=3))
        np.testing.assert_allclose(solve(A, b), jnp.linalg.solve(A, b), rtol=1e-12, atol=1e-12)
    singular = jnp.asarray([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 1.0, 1.0]])
    assert not np.all(np.isfinite(np.asarray(solve(singular, jnp.ones(3)))))


def test_chord_iterations_reach_newtons_solution_and_fall_back_to_newton():
    """Newton(chord=m): at small steps the chord iterations alone converge (m iterations counted);
    at a large step they do not, and the Newton loop that follows still converges, to the same root."""
    from jaxrot.integrators.midpoint_lie import solve_midpoint
    J = jnp.array([2.5, 1.4, 1.3])
    P = jnp.asarray(np.random.default_rng(0).normal(size=(64, 3)))
    for tau, chord_only in ((5e-4, True), (0.5, False)):
        xc, sc = jax.vmap(lambda p: solve_midpoint(J, tau, p, Newton(chord=2)))(P)
        xn, sn = jax.vmap(lambda p: solve_midpoint(J, tau, p, Newton()))(P)
        assert bool(sc.converged.all()) and bool(sn.converged.all())
        np.testing.assert_allclose(xc, xn, rtol=0, atol=1e-15)
        assert bool((sc.iters == 2).all()) == chord_only
        assert int(sc.iters.max()) <= 30


def test_chord_gradients_are_the_implicit_ones():
    from jaxrot.integrators.midpoint_lie import solve_midpoint
    J = jnp.array([2.5, 1.4, 1.3])
    P = jnp.array([0.4, -1.2, 0.9])

    def f(P, newton):
        return jnp.sum(jnp.sin(solve_midpoint(J, 0.3, P, newton)[0]))

    g_chord = jax.grad(f)(P, Newton(chord=2))
    g_unrolled = jax.grad(f)(P, Newton(implicit_diff=False))
    np.testing.assert_allclose(g_chord, g_unrolled, rtol=1e-12)


def test_materialize_leaves_values_and_gradients_unchanged():
    from jaxrot.integrators.fusion import materialize
    x, y = jnp.array([0.3, -1e-300, 7.0]), jnp.array(2.5)
    a, b = jax.jit(materialize)(x, y)
    assert np.array_equal(a, x) and np.array_equal(b, y) and a.shape == (3,) and b.shape == ()
    g = jax.grad(lambda x: jnp.sum(jnp.sin(materialize(x)[0])))(x)
    np.testing.assert_array_equal(g, jnp.cos(x))
    # an exact identity in every float format, the extremes included
    for dt in (jnp.float64, jnp.float32, jnp.float16, jnp.bfloat16):
        fi = jnp.finfo(dt)
        z = jnp.array([fi.max, -fi.max, fi.tiny, fi.smallest_subnormal, -0.0, jnp.inf, 1 / 3], dt)
        (w,) = jax.jit(materialize)(z)
        assert w.dtype == z.dtype and np.array_equal(np.asarray(w, np.float64), np.asarray(z, np.float64))
        assert np.signbit(np.asarray(w, np.float64)[4])
    assert np.isnan(jax.jit(materialize)(jnp.array([jnp.nan]))[0][0])
