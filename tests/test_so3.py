import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrot import so3
from jaxrot.geometry import series

rng = np.random.default_rng(0)


def _axis():
    a = rng.normal(size=3)
    return a / np.linalg.norm(a)


ANGLES = [0.0, 1e-8, 1e-3, 0.09, 0.11, 0.4, 0.6, 1.0, 2.0, 3.0, np.pi - 1e-6]


def _vecs():
    out = [a * _axis() for a in ANGLES for _ in range(3)]
    out += [rng.uniform(0, np.pi) * _axis() for _ in range(10)]  # log is the inverse for |v| < pi
    return [jnp.asarray(v) for v in out]


def _rodrigues_closed(v):
    v = np.asarray(v, np.float64)
    a = np.linalg.norm(v)
    V = np.array(so3.hat(jnp.asarray(v)))
    if a == 0:
        return np.eye(3)
    return np.eye(3) + np.sin(a) / a * V + (1 - np.cos(a)) / a**2 * V @ V


def _series_exp(v, terms=40):
    V = np.array(so3.hat(jnp.asarray(v)), dtype=np.float64)
    out, term = np.eye(3), np.eye(3)
    for k in range(1, terms):
        term = term @ V / k
        out = out + term
    return out


def test_hat_vee():
    v = jnp.asarray(rng.normal(size=3))
    x = jnp.asarray(rng.normal(size=3))
    np.testing.assert_allclose(so3.hat(v) @ x, jnp.cross(v, x), atol=1e-15)
    np.testing.assert_allclose(so3.vee(so3.hat(v)), v, atol=1e-15)


@pytest.mark.parametrize("v", _vecs())
def test_exp_matches_series_and_is_rotation(v):
    R = np.asarray(so3.exp(v))
    np.testing.assert_allclose(R, _series_exp(v), atol=2e-15)
    assert np.abs(R.T @ R - np.eye(3)).max() < 1e-15
    assert abs(np.linalg.det(R) - 1) < 1e-14


@pytest.mark.parametrize("v", _vecs())
def test_log_exp_round_trip(v):
    # exp(log(R)) == R and log(exp(v)) == v for |v| < pi
    np.testing.assert_allclose(so3.log(so3.exp(v)), v, atol=1e-14 * max(1.0, float(jnp.linalg.norm(v))) * 2)
    R = so3.exp(v)
    np.testing.assert_allclose(so3.exp(so3.log(R)), R, atol=1e-14)


def test_log_at_exactly_pi_and_identity():
    for n in [jnp.array([1.0, 0, 0]), jnp.array([0, 0.6, 0.8])]:
        R = so3.exp(np.pi * n)
        v = so3.log(R)
        assert abs(float(jnp.linalg.norm(v)) - np.pi) < 1e-14
        np.testing.assert_allclose(so3.exp(v), R, atol=1e-14)
    np.testing.assert_array_equal(so3.log(jnp.eye(3)), jnp.zeros(3))


@pytest.mark.parametrize("v", _vecs())
def test_left_jacobian_identities(v):
    T = so3.left_jacobian(v)
    np.testing.assert_allclose(T @ v, v, atol=1e-15)
    np.testing.assert_allclose(T.T, so3.left_jacobian(-v), atol=1e-15)
    np.testing.assert_allclose(so3.exp(v) @ so3.left_jacobian(-v), T, atol=1e-15)
    np.testing.assert_allclose(so3.left_jacobian_inv(v) @ T, np.eye(3), atol=1e-14)
    x = jnp.asarray([0.3, -0.2, 0.9])
    np.testing.assert_allclose(so3.dexpinv(v, T @ x), x, atol=1e-14)  # the matrix-free inverse
    # T(v) = int_0^1 exp(s v) ds, by 41-point Gauss-Legendre
    x, w = np.polynomial.legendre.leggauss(41)
    quad = sum(wi / 2 * np.asarray(so3.exp((xi + 1) / 2 * v)) for xi, wi in zip(x, w))
    np.testing.assert_allclose(T, quad, atol=1e-15)


@pytest.mark.parametrize("v", _vecs()[::3])
def test_left_trivialised_derivative(v):
    # d/de R(v + e d) = hat(T(v) d) R(v), with forward-mode AD
    d = jnp.asarray(rng.normal(size=3))
    _, dR = jax.jvp(so3.exp, (v,), (d,))
    np.testing.assert_allclose(dR, so3.hat(so3.left_jacobian(v) @ d) @ so3.exp(v), atol=1e-14)


def test_double_angle_rule():
    u = jnp.asarray(0.4 * _axis())
    np.testing.assert_allclose(so3.exp(2 * u), so3.exp(u) @ so3.exp(u), atol=1e-15)
    np.testing.assert_allclose(
        so3.left_jacobian(2 * u), 0.5 * (np.eye(3) + so3.exp(u)) @ so3.left_jacobian(u), atol=1e-15
    )


def test_cayley():
    v = jnp.asarray(rng.normal(size=3))
    V = so3.hat(v)
    I = jnp.eye(3)
    np.testing.assert_allclose(so3.cayley(v), jnp.linalg.solve(I - V / 2, I + V / 2), atol=1e-14)
    C = so3.cayley(v)
    np.testing.assert_allclose(C.T @ C, I, atol=1e-15)
    # agrees with exp to second order only: error ~ |v|^3 / 12
    e = [float(jnp.abs(so3.cayley(s * v) - so3.exp(s * v)).max()) for s in (1e-2, 5e-3)]
    assert 7 < e[0] / e[1] < 9


@pytest.mark.parametrize("f", [so3.exp, so3.left_jacobian, so3.left_jacobian_inv, lambda v: so3.log(so3.exp(v))])
@pytest.mark.parametrize("a", [0.0, 1e-8, 0.3, 2.0, np.pi - 1e-3])
def test_gradients_agree_and_finite(f, a):
    v = jnp.asarray(a * _axis() if a else np.zeros(3))
    Jf = jax.jacfwd(f)(v)
    Jr = jax.jacrev(f)(v)
    assert np.all(np.isfinite(Jf)) and np.all(np.isfinite(Jr))
    np.testing.assert_allclose(Jf, Jr, atol=1e-12)
    eps = 1e-6
    fd = np.stack([(np.asarray(f(v + eps * e)) - np.asarray(f(v - eps * e))) / (2 * eps) for e in np.eye(3)], -1)
    np.testing.assert_allclose(Jf, fd, atol=1e-7)


@pytest.mark.parametrize("angle", [0.0, np.pi])
def test_log_gradient_finite_at_0_and_pi(angle):
    n = jnp.asarray([0.0, 0.6, 0.8])
    R = so3.exp(angle * n)
    g = jax.grad(lambda M: jnp.sum(so3.log(M) * jnp.array([1.0, 2.0, 3.0])))(R)
    assert np.all(np.isfinite(g))
    g2 = jax.grad(lambda M: so3.rotation_angle(M, jnp.eye(3)))(R)
    assert np.all(np.isfinite(g2))


def test_rotation_angle():
    n = _axis()
    for a in [0.0, 1e-7, 1.0, np.pi - 1e-6]:
        R1 = so3.exp(jnp.asarray(rng.normal(size=3)))
        R2 = so3.exp(jnp.asarray(a * n)) @ R1
        assert abs(float(so3.rotation_angle(R2, R1)) - a) < 1e-13


def test_quaternions():
    for v in _vecs()[::4]:
        R = so3.exp(v)
        q = so3.matrix_to_quat(R)
        assert abs(float(jnp.linalg.norm(q)) - 1) < 1e-15
        np.testing.assert_allclose(so3.quat_to_matrix(q), R, atol=1e-14)
    # the Hamilton product composes rotations
    q1 = so3.matrix_to_quat(so3.exp(jnp.asarray([0.3, -0.1, 0.2])))
    q2 = so3.matrix_to_quat(so3.exp(jnp.asarray([-1.0, 0.5, 2.0])))
    np.testing.assert_allclose(
        so3.quat_to_matrix(so3.quat_multiply(q1, q2)), so3.quat_to_matrix(q1) @ so3.quat_to_matrix(q2), atol=1e-14
    )


def test_nearest_rotation():
    R = so3.exp(jnp.asarray([0.3, 1.0, -2.0]))
    M = R + 1e-3 * jnp.asarray(rng.normal(size=(3, 3)))
    Q = so3.nearest_rotation(M)
    # round-off of the SVD: LAPACK's is within 1e-15, an H100's (cuSOLVER) up to 3.7e-15
    np.testing.assert_allclose(Q.T @ Q, np.eye(3), atol=1e-14)
    assert float(jnp.linalg.det(Q)) > 0
    assert float(jnp.abs(Q - R).max()) < 3e-3
    np.testing.assert_allclose(so3.nearest_rotation(R), R, atol=1e-14)
    # a reflection is mapped to a proper rotation
    assert float(jnp.linalg.det(so3.nearest_rotation(jnp.diag(jnp.array([1.0, 1.0, -1.0]))))) > 0


def test_float32_works():
    v = jnp.asarray([0.3, -0.2, 0.5], jnp.float32)
    R = so3.exp(v)
    assert R.dtype == jnp.float32
    np.testing.assert_allclose(so3.log(R), v, atol=1e-6)
    for a in [0.0, 1e-4, 1.0]:
        u = jnp.asarray(a * np.array([0.0, 0.6, 0.8]), jnp.float32)
        np.testing.assert_allclose(so3.exp(u), _rodrigues_closed(u), atol=3e-7)
        assert np.all(np.isfinite(jax.jacfwd(so3.exp)(u)))


def test_vmap_batches():
    vs = jnp.asarray(rng.normal(size=(16, 3)))
    Rs = jax.vmap(so3.exp)(vs)
    for v, R in zip(vs, Rs):
        np.testing.assert_allclose(R, so3.exp(v), atol=1e-15)


def test_rotation_angle_of_a_diverged_attitude_is_nan():
    """A NaN attitude (a failed run) must not read as zero error (log's small-angle branch would)."""
    bad = jnp.full((3, 3), jnp.nan)
    assert np.isnan(float(so3.rotation_angle(bad, jnp.eye(3))))
    assert np.isnan(float(so3.rotation_angle(jnp.eye(3), bad.at[0, 0].set(jnp.inf))))


@pytest.mark.parametrize("kind", ["s1", "s2", "s3", "dexpinv"])
@pytest.mark.parametrize("x_max", [1e-2, 0.25, 1.0, 2.25])
def test_series_coefficients_reach_the_rounding(kind, x_max):
    """The truncated series (so3.series_coefficients, so3's coefficients below SMALL_ANGLE2) agree with the closed
    forms, evaluated in extended precision, to a few roundings on their whole range, and one term
    fewer would not."""
    eps = float(np.finfo(np.float64).eps)
    c = so3.series_coefficients(kind, x_max, eps)
    assert [round(1 / v) for v in c[:2]] == {"s1": [1, -6], "s2": [2, -24], "s3": [6, -120], "dexpinv": [12, 720]}[kind]

    xs = np.linspace(0.0, x_max, 9)[1:]
    want = np.array([_exact_series(kind, x) for x in xs])
    horner = lambda cs, x: functools.reduce(lambda r, a: r * x + a, cs[::-1], 0.0)  # noqa: E731
    got = np.array([horner(c, x) for x in xs])
    assert np.max(np.abs(got / want - 1)) <= 4 * eps
    shorter = np.array([horner(c[:-1], x) for x in xs])
    assert np.max(np.abs(shorter / want - 1)) > eps / 4
    # the library's own evaluation of the series (even and odd terms apart) is as accurate
    split = np.asarray(series.poly(jnp.asarray(xs), c))
    assert np.max(np.abs(split / want - 1)) <= 4 * eps
    with pytest.raises(ValueError, match="outside the range"):
        so3.series_coefficients(kind, 50.0, eps)


def _exact_series(kind, x, derivative=False):
    """The coefficient ``kind`` (or its derivative in ``x = a^2``) at ``x`` from a 60-term sum in exact
    fractions."""
    import math
    from fractions import Fraction

    B = series.bernoulli(122)
    X, total = Fraction(x), Fraction(0)
    for k in range(60):
        t = {"s1": lambda: Fraction((-1) ** k, math.factorial(2 * k + 1)),
             "s2": lambda: Fraction((-1) ** k, math.factorial(2 * k + 2)),
             "s3": lambda: Fraction((-1) ** k, math.factorial(2 * k + 3)),
             "dexpinv": lambda: abs(B[2 * k + 2]) / math.factorial(2 * k + 2)}[kind]()
        if derivative:
            total += k * t * X ** (k - 1) if k else 0
        else:
            total += t * X ** k
    return float(total)


def test_the_coefficients_and_their_slopes_are_exact_to_a_few_roundings_in_every_tier():
    """S1, S2, S3 and dexp^-1's c, and their derivatives in a^2 (the custom JVP rules), against exact
    sums on each side of the tiers' bounds (TINY_ANGLE2: a shorter series below it, SMALL_ANGLE2: sines
    and cosines above it)."""
    eps = float(np.finfo(np.float64).eps)
    xs = [1e-8, 0.01, so3.TINY_ANGLE2 * (1 - 1e-12), so3.TINY_ANGLE2, 0.3, 1.7, so3.SMALL_ANGLE2 * (1 - 1e-12),
          so3.SMALL_ANGLE2, 3.0]
    fns = {"s1": lambda x: so3.rodrigues_coefficients(x)[0], "s2": lambda x: so3.rodrigues_coefficients(x)[1],
           "s3": lambda x: so3.rodrigues_coefficients(x)[2], "dexpinv": so3._dexpinv_coefficient}
    for kind, fn in fns.items():
        for x in xs:
            value, slope = jax.jvp(fn, (jnp.asarray(x),), (jnp.asarray(1.0),))
            want, want_slope = _exact_series(kind, x), _exact_series(kind, x, True)
            assert abs(float(value) / want - 1) <= 8 * eps, (kind, x)
            assert abs(float(slope) / want_slope - 1) <= 64 * eps, (kind, x)


def test_a_function_traced_once_is_one_call_in_a_trace_and_inlined_for_the_generator():
    """A :func:`~jaxrot.geometry.series.traced_once` function's body is traced once however often a trace
    applies it (its jaxpr is reused, as a call); inside ``inlined()`` at each use, with no call left in
    the jaxpr. so3's coefficient functions and products are such calls. The generator's traces
    (``jaxpr_of``, the only way the kernels trace) keep them where nothing transforms them and have
    none where a derivative goes through them, said or found. Values and forward-mode derivatives are
    the same bits either way; a reverse-mode derivative to round-off."""
    from jaxrot.kernels.jaxpr_inputs import jaxpr_of

    bodies = []

    def f(x):
        bodies.append(1)
        return jnp.sin(x) * x

    g = series.traced_once(f)

    def calls(closed, names):  # the named calls, at any depth (in calls, branches, loop bodies)
        found = []
        for e in getattr(closed, "jaxpr", closed).eqns:
            if e.primitive.name in ("pjit", "jit") and e.params["name"] in names:
                found.append(e.params["name"])
            for x in e.params.values():
                for sub in (x if isinstance(x, (tuple, list)) else (x,)):
                    if hasattr(getattr(sub, "jaxpr", sub), "eqns"):
                        found += calls(sub, names)
        return found

    def uses(x):
        return g(x) + g(2.0 * x) + g(x * x)

    assert calls(jax.make_jaxpr(uses)(1.0), {"f"}) == ["f"] * 3 and len(bodies) == 1
    with series.inlined():  # (a function of its own: make_jaxpr keeps the trace of one it has seen)
        closed = jax.make_jaxpr(lambda x: uses(x))(1.0)
    assert len(bodies) == 4 and not calls(closed, {"f"})
    names = {"rodrigues_coefficients", "_dexpinv", "_mv_fast", "_mtv_fast", "_mm_fast", "_mtm_fast"}
    v = jnp.asarray([0.3, -1.1, 0.7])

    def step(v):
        return so3.mm(so3.exp(v), so3.left_jacobian_inv(v)) + so3.dexpinv(v, so3.mtv(so3.exp(v), v))[:, None]

    assert set(calls(jax.make_jaxpr(step)(v), names)) == {"rodrigues_coefficients", "_dexpinv", "_mm_fast",
                                                          "_mtv_fast"}
    spec = jax.ShapeDtypeStruct((3,), jnp.float64)
    assert set(calls(jaxpr_of(step, spec), names)) == {"rodrigues_coefficients", "_dexpinv", "_mm_fast", "_mtv_fast"}
    assert not calls(jaxpr_of(step, spec, differentiates=True), names)
    with series.watched() as watch:
        jax.make_jaxpr(lambda v: step(v))(v)
    assert not watch.seen
    with series.watched() as watch:  # (given up at the first transformed call; nothing escapes)
        jax.make_jaxpr(lambda v: jax.jvp(step, (v,), (v,)))(v)
    assert watch.seen
    for derivative in (lambda v: jax.jvp(step, (v,), (v,))[1], lambda v: jax.jacfwd(step)(v),
                       lambda v: jax.vmap(step)(jnp.stack([v, v]))):
        assert calls(jax.make_jaxpr(derivative)(v), names)  # (a plain trace keeps them)
        assert not calls(jaxpr_of(derivative, spec), names)
    # a trace JAX keeps by function (lax.cond's branches: the exact free flow's) is not handed from a
    # trace with calls to a derivative traced in place
    from jaxrot.geometry.state import State
    from jaxrot.physics.exact import free_flow

    J = jnp.asarray([1.0, 2.0, 3.0])

    def flow(Pi):
        return free_flow(J, State(jnp.eye(3), Pi), 0.3).R

    assert calls(jaxpr_of(flow, spec), names)
    assert not calls(jaxpr_of(lambda Pi: jax.jvp(flow, (Pi,), (Pi,)), spec, differentiates=True), names)
    # every trace the kernels make goes through jaxpr_of
    import pathlib

    import jaxrot.kernels

    for path in pathlib.Path(jaxrot.kernels.__file__).parent.glob("*.py"):
        if path.name != "jaxpr_inputs.py":
            assert "make_jaxpr(" not in path.read_text(), path
    once = jax.jit(lambda v: (step(v), jax.jvp(step, (v,), (v,))[1]))(v)
    with series.inlined():
        inline = jax.jit(lambda v: (step(v), jax.jvp(step, (v,), (v,))[1]))(v)
    for a, b in zip(once, inline):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    grads = [jax.jit(jax.grad(lambda v: jnp.sum(step(v) ** 2)))(v)]
    with series.inlined():
        grads.append(jax.jit(jax.grad(lambda v: jnp.sum(step(v) ** 2)))(v))
    np.testing.assert_allclose(np.asarray(grads[0]), np.asarray(grads[1]), rtol=1e-14, atol=1e-14)
