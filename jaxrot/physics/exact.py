"""Closed-form facts of the free rigid body: the complete elliptic integral K(m) and the period.

Euler's equations without torque are solved by Jacobi elliptic functions (Landau & Lifshitz,
Mechanics, section 37). With the principal moments sorted ``I1 < I2 < I3``, ``|Pi|^2 = L^2`` and
``2E = sum Pi^2 / J``, for ``L^2 > 2E I2`` (rotation about the I3 side of the separatrix)

    Pi(t) is periodic with period  T = 4 K(m) sqrt(I1 I2 I3 / ((I3 - I2)(L^2 - 2E I1))),
    m = k^2 = (I2 - I1)(2E I3 - L^2) / ((I3 - I2)(L^2 - 2E I1)),

and the same with I1 and I3 exchanged for ``L^2 < 2E I2``. The intermediate component changes sign
every half period: a body spun near its intermediate axis flips (the Dzhanibekov effect) every
``T/2``. ``K(m)`` is computed by the arithmetic-geometric mean, ``K = pi / (2 AGM(1, sqrt(1 - m)))``,
which converges quadratically, also as ``m -> 1`` (the separatrix, where ``K ~ log(4/sqrt(1-m))``).
All functions are jit-able and differentiable.

The full exact flow :func:`free_flow` follows Celledoni, Fasso, Safstrom & Zanna, "The exact
computation of the free rigid body motion and its use in splitting methods", SIAM J. Sci. Comput.
30 (2008) 2084: Pi(t) by the Jacobi amplitude ``theta = am(u)``, and the attitude as
``R(t) = Y0 Rz(psi(t)) P(Pi(t))`` where ``P`` rotates ``Pi/|Pi|`` onto a fixed axis and ``psi`` is an
elliptic integral of the third kind. Here every integral is in Carlson's symmetric form (RF, RJ by
duplication, a fixed number of steps, so it jits, vmaps and differentiates; the RC of each RJ step in
closed form, cheaper than by duplication): exact to round-off on
both sides of the separatrix and on it, and for symmetric bodies and spheres.

Derivatives (forward and reverse mode) are those of the closed form, except at a steady spin of an
asymmetric body (Pi exactly along a principal axis): the amplitudes there are square roots of zero,
so the derivative in Pi is NaN (or, on the intermediate axis, meaningless) although the flow's value is
exact. Start a differentiated run off the axis, or take its first step with a method that does
not use the exact flow.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..geometry import so3
from ..geometry.series import inlining, traced_once
from ..geometry.state import State

# AGM steps: b_0 = sqrt(mc) >= 1e-150 (mc clipped at 1e-300) is within a factor 2 of a_n after ~9
# steps, then converges quadratically (float64 round-off at 12 in a check down to mc = 1e-300);
# further steps are exact no-ops. (XLA flushes subnormal mc to 0: K is then that of the separatrix.)
_AGM_ITERS = 16


def ellipk(m):
    """Complete elliptic integral of the first kind ``K(m) = int_0^{pi/2} (1 - m sin^2)^{-1/2}``, ``m < 1``."""
    m = jnp.asarray(m)
    return _ellipk_c(1.0 - m)


def _ellipk_c(mc):
    """K from the complementary parameter ``mc = 1 - m`` (accurate near the separatrix, mc -> 0)."""
    a, b = jnp.ones_like(mc), jnp.sqrt(mc)

    def body(_, ab):
        a, b = ab
        return 0.5 * (a + b), jnp.sqrt(a * b)

    a, b = lax.fori_loop(0, _AGM_ITERS, body, (a, b))
    return jnp.pi / (a + b)


def free_body_period(J, Pi):
    """Period of the body momentum ``Pi(t)`` of a torque-free body with distinct moments ``J``.

    Returns ``(T, m)``: the period and the elliptic parameter. On the separatrix ``T`` is infinite.
    """
    J, Pi = jnp.asarray(J), jnp.asarray(Pi)
    I1, I2, I3 = jnp.sort(J)
    L2 = jnp.sum(Pi * Pi)
    E2 = jnp.sum(Pi * Pi / J)
    upper = L2 > E2 * I2  # closer to the I3 axis
    a, c = jnp.where(upper, I1, I3), jnp.where(upper, I3, I1)
    # for the upper case (a, c) = (I1, I3); for the lower the roles swap, and every factor below
    # changes sign in pairs, so one formula with absolute values serves both
    m = jnp.abs((I2 - a) * (E2 * c - L2)) / jnp.abs((c - I2) * (L2 - E2 * a))
    T = 4.0 * ellipk(m) * jnp.sqrt(I1 * I2 * I3 / jnp.abs((c - I2) * (L2 - E2 * a)))
    return T, m


# --- Carlson's symmetric integrals (duplication; Carlson, Numer. Algorithms 10 (1995) 13) ------------
_DUP_ITERS = 14  # the spread shrinks 4x per step, the series is 6th order: 4^-84 << eps


def _sqrt0(x):
    """``sqrt(x)`` whose derivative at ``x = 0`` is 0 instead of infinite ("safe where"). Where an
    argument of RF/RJ is 0 (the complete integrals, ``x = cos^2`` at a half period) its tangent is 0
    too, and the plain sqrt's forward-mode rule gives 0 * inf = NaN there; the product's limit is 0."""
    pos = x > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, x, 1.0)), 0.0)


def carlson_rf(x, y, z):
    """``RF(x, y, z) = 1/2 int_0^inf ((t+x)(t+y)(t+z))^{-1/2} dt`` for x, y, z >= 0, at most one zero."""

    def dup(_, xyz):
        x, y, z = xyz
        sx, sy, sz = _sqrt0(x), _sqrt0(y), _sqrt0(z)
        lam = sx * (sy + sz) + sy * sz
        return 0.25 * (x + lam), 0.25 * (y + lam), 0.25 * (z + lam)

    x, y, z = lax.fori_loop(0, _DUP_ITERS, dup, tuple(jnp.broadcast_arrays(x, y, z)))
    A = (x + y + z) / 3.0
    X, Y = 1.0 - x / A, 1.0 - y / A
    Z = -(X + Y)
    E2, E3 = X * Y - Z * Z, X * Y * Z
    return (1.0 - E2 / 10.0 + E3 / 14.0 + E2 * E2 / 24.0 - 3.0 * E2 * E3 / 44.0) / jnp.sqrt(A)


_RC_SERIES = 10  # terms of the series below |t| < 1e-2: 1e-20 / 21 << eps


def carlson_rc(x, y):
    """``RC(x, y) = 1/2 int_0^inf (t+x)^{-1/2} (t+y)^{-1} dt`` for x > 0, y > 0, in closed form
    (DLMF 19.2.17-19): with ``t = (y - x)/x``, ``RC = x^{-1/2} g(t)``, ``g = arctan(sqrt t)/sqrt t``
    for t > 0 and ``artanh(sqrt(-t))/sqrt(-t)`` for t < 0; near t = 0 (and for its derivative) the
    series ``g = sum (-t)^n / (2n + 1)``."""
    x, y = jnp.broadcast_arrays(jnp.asarray(x), jnp.asarray(y))
    t = (y - x) / x
    small = jnp.abs(t) < 1e-2
    ts = jnp.where(small, 1.0, t)
    r = jnp.sqrt(jnp.abs(ts))
    # artanh r = log((1 + r) / sqrt(1 - r^2)) with 1 - r^2 = y/x exactly: no cancellation as y/x -> 0
    q = jnp.where(ts > 0, 1.0, y / x)
    closed = jnp.where(ts > 0, jnp.arctan(r), jnp.log((1.0 + r) / jnp.sqrt(q))) / r
    tt = jnp.where(small, t, 0.0)
    series = sum((-tt) ** n / (2 * n + 1) for n in range(_RC_SERIES))
    return jnp.where(small, series, closed) / jnp.sqrt(x)


def carlson_rj(x, y, z, p):
    """``RJ(x, y, z, p) = 3/2 int_0^inf ((t+x)(t+y)(t+z))^{-1/2} (t+p)^{-1} dt``, p > 0."""
    def dup(i, c):
        x, y, z, p, acc = c
        sx, sy, sz = _sqrt0(x), _sqrt0(y), _sqrt0(z)
        lam = sx * (sy + sz) + sy * sz
        alpha = (p * (sx + sy + sz) + sx * sy * sz) ** 2
        beta = p * (p + lam) ** 2
        acc = acc + 0.25 ** i * carlson_rc(alpha, beta)
        return 0.25 * (x + lam), 0.25 * (y + lam), 0.25 * (z + lam), 0.25 * (p + lam), acc

    x, y, z, p = jnp.broadcast_arrays(x, y, z, p)
    x, y, z, p, acc = lax.fori_loop(0, _DUP_ITERS, dup, (x, y, z, p, jnp.zeros_like(p)))
    fac = 0.25 ** _DUP_ITERS
    A = (x + y + z + 2.0 * p) / 5.0
    dx, dy, dz, dp = (A - x) / A, (A - y) / A, (A - z) / A, (A - p) / A
    ea = dx * (dy + dz) + dy * dz
    eb = dx * dy * dz
    ec = dp * dp
    ed = ea - 3.0 * ec
    ee = eb + 2.0 * dp * (ea - ec)
    c1, c2, c3, c4 = 3.0 / 14.0, 1.0 / 3.0, 3.0 / 22.0, 3.0 / 26.0
    c5, c6, c7, c8 = 0.75 * c3, 1.5 * c4, 0.5 * c2, 2.0 * c3
    series = (1.0 + ed * (-c1 + c5 * ed - c6 * ee) + eb * (c7 + dp * (-c8 + dp * c4))
              + dp * ea * (c2 - dp * c3) - c2 * dp * ec)
    return 3.0 * acc + fac * series / (A * jnp.sqrt(A))


def _unwrap(theta):
    """theta = theta_r + k pi with |theta_r| <= pi/2."""
    k = jnp.round(theta / jnp.pi)
    return theta - k * jnp.pi, k


def ellipf(theta, m):
    """Incomplete elliptic integral of the first kind ``F(theta|m)`` for any real theta, m <= 1."""
    return _ellipf_c(theta, 1.0 - jnp.asarray(m))


def _ellipf_c(theta, mc):
    tr, k = _unwrap(theta)
    s, c = jnp.sin(tr), jnp.cos(tr)
    part = s * carlson_rf(c * c, c * c + mc * s * s, jnp.ones_like(s))  # 1 - m s^2 = c^2 + mc s^2
    return part + jnp.where(k == 0, 0.0, 2.0 * k * _ellipk_c(jnp.maximum(mc, 1e-300)))


def ellippi(n, theta, m):
    """Incomplete elliptic integral of the third kind
    ``Pi(n; theta|m) = int_0^theta dt / ((1 - n sin^2 t) sqrt(1 - m sin^2 t))``, n < 1, any real theta."""
    return _ellippi_c(n, theta, 1.0 - jnp.asarray(m))


def _ellippi_c(n, theta, mc):
    part, k = _ellippi_part(n, theta, mc)
    return part + jnp.where(k == 0, 0.0, 2.0 * k * _ellippi_complete(n, mc))


def _ellippi_part(n, theta, mc):
    """Pi(n; theta_r|m) on the reduced angle and the number k of half periods: Pi = part + 2 k Pi(n|m)."""
    tr, k = _unwrap(theta)
    s, c = jnp.sin(tr), jnp.cos(tr)
    one = jnp.ones_like(s)
    d2 = c * c + mc * s * s
    return s * carlson_rf(c * c, d2, one) + n / 3.0 * s ** 3 * carlson_rj(c * c, d2, one, 1.0 - n * s * s), k


def _ellippi_complete(n, mc):
    one = jnp.ones_like(mc)
    mcs = jnp.maximum(mc, 1e-300)  # the complete integral is only needed off the separatrix
    return carlson_rf(0.0 * one, mcs, one) + n / 3.0 * carlson_rj(0.0 * one, mcs, one, 1.0 - n)


def _ellippi_difference(n, theta, theta0, mc):
    """Pi(n; theta|m) - Pi(n; theta0|m), the complete integral computed once."""
    (p1, k1), (p0, k0) = _ellippi_part(n, theta, mc), _ellippi_part(n, theta0, mc)
    return p1 - p0 + jnp.where(k1 == k0, 0.0, 2.0 * (k1 - k0) * _ellippi_complete(n, mc))


def jacobi_am(u, m):
    """Jacobi amplitude ``am(u|m)`` (``sn = sin am``, ``cn = cos am``), any real u, 0 <= m <= 1.

    Descending Landen/AGM (Abramowitz & Stegun 16.4) on u reduced to [-K, K]; on the separatrix
    (m = 1) ``am = gd(u) = atan(sinh u)``.
    """
    return _am_c(u, 1.0 - jnp.asarray(m))


def _am_c(u, mc):
    """am from the complementary parameter mc = 1 - m (no cancellation near the separatrix)."""
    sep = mc <= 0.0
    mcs = jnp.where(sep, 0.5, mc)  # a harmless value on the separatrix branch
    K = _ellipk_c(mcs)
    k = jnp.round(u / (2.0 * K))
    ur = u - 2.0 * k * K
    n = _AGM_ITERS  # extra steps are exact no-ops (c_n = 0)

    def agm(ab, _):
        a, b = ab
        return (0.5 * (a + b), jnp.sqrt(a * b)), (0.5 * (a - b), 0.5 * (a + b))

    (a, _), (cs, As) = lax.scan(agm, (jnp.ones_like(mcs), jnp.sqrt(mcs)), None, length=n)

    def back(phi, ca):
        c, a = ca
        return 0.5 * (phi + jnp.arcsin(c / a * jnp.sin(phi))), None

    phi, _ = lax.scan(back, 2.0 ** n * a * ur, (cs, As), reverse=True)
    us = jnp.where(sep, u, 0.0)
    return jnp.where(sep, jnp.arctan(jnp.sinh(us)), phi + k * jnp.pi)


def _labelled_frame(J, Pi):
    """A signed permutation C (det +1) and the case: in the frame C, axis 3 is the axis the momentum
    circulates about (largest moment above the separatrix, smallest below), axis 2 the middle one."""
    order = jnp.argsort(J)
    Js = J[order]
    Ps = Pi[order]
    # G^2 - 2E I2 without cancellation: its sign says which side of the separatrix
    upper = Ps[0] ** 2 * (Js[0] - Js[1]) / Js[0] + Ps[2] ** 2 * (Js[2] - Js[1]) / Js[2] >= 0
    perm = jnp.where(upper, order, order[::-1])
    C = jax.nn.one_hot(perm, 3, dtype=Pi.dtype)  # row k picks body axis perm[k]
    sign = jnp.linalg.det(C)
    return C.at[1].multiply(sign)


_SYMMETRIC_RTOL = 1e-12


def _is_axisymmetric(J):
    Js = jnp.sort(J)
    tol = _SYMMETRIC_RTOL * Js[2]
    return (Js[1] - Js[0] <= tol) | (Js[2] - Js[1] <= tol)


def _axisymmetric_flow(J, state0: State, t) -> State:
    """Two (or three) equal moments J_s, the odd one J_k about body axis k: Omega = Pi/J_s + c e_k with
    c = Pi_k (1/J_k - 1/J_s) constant, so Pi(t) = exp(-t c hat(e_k)) Pi0 and
    R(t) = R0 exp(t hat(Pi0)/J_s) exp(t c hat(e_k)) (two Rodrigues rotations, no elliptic functions)."""
    Jm = jnp.sort(J)[1]                       # the repeated moment is the median
    k = jnp.argmax(jnp.abs(J - Jm))           # the odd axis (any axis for a sphere: c = 0)
    near = jnp.abs(J - Jm) <= _SYMMETRIC_RTOL * jnp.max(J)
    Js = jnp.sum(jnp.where(near, J, 0.0)) / jnp.sum(near.astype(J.dtype))  # symmetric in the equal moments
    e = jax.nn.one_hot(k, 3, dtype=state0.Pi.dtype)
    Pi0 = state0.Pi
    c = jnp.dot(e, Pi0) * (1.0 / jnp.dot(e, J) - 1.0 / Js)
    spin = so3.exp(c * t * e)
    return State(state0.R @ so3.exp(t / Js * Pi0) @ spin, spin.T @ Pi0)


def free_flow(J, state0: State, t) -> State:
    """The exact torque-free motion: the state at time ``t`` from ``state0`` at time 0.

    ``J`` are the principal moments (any order, equal moments allowed); ``R' = R hat(Omega)``,
    ``Pi' = Pi x Omega``, ``Omega = Pi / J``. Jit-able, vmap-able and differentiable in J, the state
    and t away from the separatrix (on it, derivatives in the initial data are unbounded).

    Leading axes broadcast like NumPy's: ``J`` of shape ``(..., 3)``, ``state0`` with ``R`` of shape
    ``(..., 3, 3)`` and ``Pi`` ``(..., 3)`` (a batch of bodies), ``t`` of any shape (several times);
    the result has the broadcast leading shape (a ``jax.vmap`` over the flattened batch, the
    arguments without leading axes shared).

    Axisymmetric bodies (two moments equal to 1e-12 relative, spheres included) take the closed form
    of two rotations (:func:`_axisymmetric_flow`, about ten times cheaper than the elliptic flow) through
    a ``lax.cond`` on J, a real branch whenever J is not batched. There, derivatives in J are exact
    along perturbations that keep the symmetry (the equal moments moved together, the odd one alone);
    a perturbation that breaks it gets the average of the equal moments' derivatives (the flow is
    smooth in J, but its first-order response to a symmetry-breaking J is not computed).

    Example::

        s = jaxrot.exact.free_flow(problem.body.J, problem.state0, 100.0)

    Reference: Celledoni, Fasso, Safstrom & Zanna, SIAM J. Sci. Comput. 30 (2008) 2084.
    """
    if not isinstance(state0, State):
        raise TypeError(f"free_flow: state0 must be a jaxrot.State, got {type(state0).__name__}")
    R, Pi = state0.R, state0.Pi
    J = jnp.asarray(J, Pi.dtype)
    t = jnp.asarray(t, Pi.dtype)
    if J.shape[-1:] != (3,) or R.shape[-2:] != (3, 3) or Pi.shape[-1:] != (3,):
        raise ValueError(f"free_flow: J must have shape (..., 3), state0.R (..., 3, 3) and state0.Pi (..., 3); got "
                         f"{J.shape}, {R.shape}, {Pi.shape}")
    leads = (J.shape[:-1], R.shape[:-2], Pi.shape[:-1], t.shape)
    try:
        batch = jnp.broadcast_shapes(*leads)
    except ValueError:
        raise ValueError(f"free_flow: the leading (batch) axes of J {leads[0]}, state0.R {leads[1]}, state0.Pi "
                         f"{leads[2]} and t {leads[3]} do not broadcast") from None
    if not batch:
        return _free_flow(J, State(R, Pi), t)
    n = int(np.prod(batch))

    def flat(x, core):  # (n, *core), or None where x has no leading axes (shared: in_axes None)
        return None if x.ndim == len(core) else jnp.broadcast_to(x, batch + core).reshape((n,) + core)

    args = (flat(J, (3,)), flat(R, (3, 3)), flat(Pi, (3,)), flat(t, ()))
    axes = tuple(None if a is None else 0 for a in args)
    args = tuple(x if a is None else a for x, a in zip((J, R, Pi, t), args))
    out = jax.vmap(lambda J, R, Pi, t: _free_flow(J, State(R, Pi), t), in_axes=axes)(*args)
    return State(out.R.reshape(batch + (3, 3)), out.Pi.reshape(batch + (3,)))


@traced_once  # (a splitting's step applies it up to seventeen times: one trace, one generated function)
def _free_flow(J, state0: State, t) -> State:
    """One body at one time."""
    return lax.cond(_is_axisymmetric(J), *_branches(inlining()), J, state0, t)


@functools.lru_cache(maxsize=None)
def _branches(in_place: bool):
    # the branches, one pair of functions for SO(3)'s functions traced as calls and one for them traced in
    # place (the kernel generator's derivatives): lax.cond keeps the trace of a function it has seen, and
    # reuses it for every flow of a step, but must not hand a trace with calls to one made in place
    return (lambda *a: _axisymmetric_flow(*a)), (lambda *a: _elliptic_flow(*a))


def _elliptic_flow(J, state0: State, t) -> State:
    """The general flow by elliptic functions (every body, symmetric ones included)."""
    C = _labelled_frame(J, state0.Pi)
    I1, I2, I3 = jnp.abs(C) @ J
    P1, P2, P3 = C @ state0.Pi
    G2 = P1 * P1 + P2 * P2 + P3 * P3
    G = jnp.sqrt(G2)
    twoT = P1 * P1 / I1 + P2 * P2 / I2 + P3 * P3 / I3
    sph = jnp.abs(I3 - I1) <= 1e-12 * jnp.abs(I3)  # a sphere: Omega is constant
    d31 = jnp.where(sph, 1.0, I3 - I1)
    d32 = jnp.where(sph | (I3 == I2), 1.0, I3 - I2)
    # the amplitudes and rates of Landau & Lifshitz, written without cancellation
    up = P1 * P1 * d31 / I1 + P2 * P2 * d32 / I2          # 2T I3 - G^2 (times sign)
    lo = P2 * P2 * (I2 - I1) / I2 + P3 * P3 * d31 / I3    # G^2 - 2T I1 (times sign)
    A1 = jnp.sqrt(jnp.maximum(I1 * up / d31, 0.0))
    A2 = jnp.sqrt(jnp.maximum(I2 * up / d32, 0.0))
    A3 = jnp.sqrt(jnp.maximum(I3 * lo / d31, 0.0))
    # u = u0 + lam t; below the separatrix (I3 < I1) the labelled frame runs the other way round
    lam = jnp.sign(d31) * jnp.sqrt(jnp.maximum(d32 * lo / (I1 * I2 * I3), 0.0))
    lo_s = jnp.where(lo == 0, 1.0, lo)
    # m = (I2 - I1) up / (d32 lo); its complement from the state directly, since near the
    # separatrix 1 - m would lose every digit
    mc = jnp.clip(d31 * (d32 * P3 * P3 / I3 - (I2 - I1) * P1 * P1 / I1) / (d32 * lo_s), 0.0, 1.0)
    nu = I3 * (I2 - I1) / (I1 * d32)
    sigma = jnp.where(P3 >= 0, 1.0, -1.0)
    th0 = jnp.arctan2(sigma * P2 * A1, P1 * A2)  # am(u0): sn = sigma P2/A2, cn = P1/A1
    u0 = _ellipf_c(th0, mc)
    th = _am_c(u0 + lam * t, mc)
    sn, cn = jnp.sin(th), jnp.cos(th)
    Pi_t = jnp.stack([A1 * cn, sigma * A2 * sn, sigma * A3 * jnp.sqrt(cn * cn + mc * sn * sn)])
    # psi' = sigma (2T/G + Omega_e)/(1 + c); see the module docstring for the decomposition
    a = A3 / G
    mu = jnp.where(A3 == 0, 0.0, A1 * A1 / jnp.where(A3 == 0, 1.0, A3 * A3))
    s1 = jnp.sqrt(1.0 + nu)

    def theta1(th):
        tr, k = _unwrap(th)
        return (jnp.arctan2(s1 * jnp.sin(tr), jnp.cos(tr)) + k * jnp.pi) / s1

    kappa = -A3 * d31 / (I1 * I3)
    lam_s = jnp.where(lam == 0, 1.0, lam)
    dpsi = (twoT / G * t + kappa / lam_s * (theta1(th) - theta1(th0) + a * mu * lam * t
            - a * (1.0 + mu) * _ellippi_difference(-nu, th, th0, mc)))
    psi = sigma * jnp.where(sph, G / I1 * t, dpsi)
    e = jnp.array([0.0, 0.0, 1.0], state0.Pi.dtype) * sigma

    def to_axis(P):  # the rotation taking P/|P| to e along the great circle (c = |n3| > 0)
        n = P / G
        v = jnp.cross(n, e)
        hv = so3.hat(v)
        return jnp.eye(3, dtype=P.dtype) + hv + hv @ hv / (1.0 + jnp.dot(n, e))

    P0 = jnp.stack([P1, P2, P3])
    Y0 = state0.R @ C.T @ to_axis(P0).T
    cp, sp = jnp.cos(psi), jnp.sin(psi)
    Rz = jnp.array([[cp, -sp, 0.0], [sp, cp, 0.0], [0.0, 0.0, 1.0]], dtype=state0.Pi.dtype)
    Pi_t = jnp.where(sph, P0, Pi_t)
    R_t = Y0 @ Rz @ to_axis(Pi_t) @ C
    return State(R_t, C.T @ Pi_t)
