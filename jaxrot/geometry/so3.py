"""Pure, unbatched SO(3) / so(3) functions.

Vectors have shape (3,), matrices (3, 3); batch with ``jax.vmap``. Every function is safe under
``jit``, ``vmap`` and ``grad``: closed forms are evaluated on a *safe* argument and Taylor
polynomials are selected near zero with ``jnp.where``, so neither values nor gradients are NaN at
0 (and ``log`` is finite at pi). Conventions (docs/conventions.md): ``R`` maps body to world,
``hat(v) @ x = v x x``.

With ``a = |v|``:  S1 = sin a / a,  S2 = (1 - cos a) / a^2,  S3 = (a - sin a) / a^3;
``exp(v) = 1 + S1 V + S2 V^2`` (Rodrigues), ``T(v) = 1 + S2 V + S3 V^2`` (left Jacobian, dexp),
``T(v)^-1 = 1 - V/2 + C V^2`` with ``C = (1 - (a/2) cot(a/2)) / a^2``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .series import poly, series_coefficients, slope_poly, traced_once

# Below this squared angle (1.5 rad) the coefficients below come from their power series, truncated
# where the remainder is below a quarter of float64's rounding (series_coefficients: 10 to 13 terms;
# below TINY_ANGLE2, 0.25 rad, 6 or 7), above it from sines and cosines. A step's rotation is mostly
# smaller: a generated kernel then evaluates one polynomial (multiply-adds, the tier its angle falls in,
# :func:`jaxrot.geometry.series.poly`) instead of a square root, sines, cosines and divisions, and the
# closed forms are never taken near zero angle, where they cancel. (XLA evaluates both tiers and selects.)
SMALL_ANGLE2 = 2.25
TINY_ANGLE2 = 0.0625


# Taylor coefficients in a^2 (lowest first) of S1 = sin a / a, S2 = (1 - cos a) / a^2,
# S3 = (a - sin a) / a^3 and of c(a) = (1 - (a/2) cot(a/2)) / a^2 (dexp^-1) on [0, SMALL_ANGLE2] and on
# [0, TINY_ANGLE2]; the fused kernels use the same numbers
RODRIGUES_TAYLOR = tuple(tuple(series_coefficients(k, SMALL_ANGLE2, 2.0 ** -52)) for k in ("s1", "s2", "s3"))
DEXPINV_TAYLOR = tuple(series_coefficients("dexpinv", SMALL_ANGLE2, 2.0 ** -52))
# (below TINY_ANGLE2 truncated 16 times finer: the slopes, a derivative's coefficients, then stay within
# 64 roundings as above it, tests/test_so3.py, where the shortest series' are 250 off near the bound)
RODRIGUES_TINY = tuple(tuple(series_coefficients(k, TINY_ANGLE2, 2.0 ** -56)) for k in ("s1", "s2", "s3"))
DEXPINV_TINY = tuple(series_coefficients("dexpinv", TINY_ANGLE2, 2.0 ** -56))


def _series(a2, lo, tiny, full):
    """A power series at ``a2 < SMALL_ANGLE2``: the coefficients ``tiny`` where ``lo`` (``a2 < TINY_ANGLE2``,
    one predicate for all the coefficients of a function, so that a kernel takes them in one block) and
    ``full`` elsewhere."""
    return jnp.where(lo, poly(a2, tiny), poly(a2, full))


# Tiny products written out component by component: XLA fuses them with the surrounding
# elementwise code into one kernel (vectorised over a vmapped batch), whereas a 3x3 ``dot`` is a
# separate small-GEMM call. That is faster for a vmapped batch and slower for one body (the
# comparison is in docs/benchmarks.md), hence the two forms below.
def _entries(A):
    """Rows of entries ``a[i][j]`` by ``unstack``, which transposes to one ``stack`` under reverse-mode
    AD (each ``A[i, j]`` index would transpose to a padded 3x3 array summed with the others)."""
    return [jnp.unstack(r) for r in jnp.unstack(A)]


def _mv(A, x):
    a, x = _entries(A), jnp.unstack(x)
    return jnp.stack([a[i][0] * x[0] + a[i][1] * x[1] + a[i][2] * x[2] for i in range(3)])


def _mtv(A, x):
    a, x = _entries(A), jnp.unstack(x)
    return jnp.stack([a[0][i] * x[0] + a[1][i] * x[1] + a[2][i] * x[2] for i in range(3)])


def _mm(A, B):
    a, b = _entries(A), _entries(B)
    return jnp.stack([jnp.stack([a[i][0] * b[0][j] + a[i][1] * b[1][j] + a[i][2] * b[2][j] for j in range(3)])
                      for i in range(3)])


def _mtm(A, B):
    a, b = _entries(A), _entries(B)
    return jnp.stack([jnp.stack([a[0][i] * b[0][j] + a[1][i] * b[1][j] + a[2][i] * b[2][j] for j in range(3)])
                      for i in range(3)])


def _bilinear(fast, linear):
    """``fast`` for values, ``linear`` (the same product) for tangents. The indexed form vectorises
    best forward (the unstacked one ran buss2p at 0.6x); the unstacked tangents keep gradients cheap
    to compile (buss4_ep, 20 steps, jax.grad, compile and run: 19.4 -> 7.5 s, same run)."""
    f = jax.custom_jvp(fast)

    @f.defjvp
    def _jvp(primals, tangents):
        (A, B), (dA, dB) = primals, tangents
        return fast(A, B), linear(dA, B) + linear(A, dB)

    f.__doc__ = fast.__doc__
    return traced_once(f)


def _mv_fast(A: jax.Array, x: jax.Array) -> jax.Array:
    """``A @ x`` for a 3x3 matrix and a 3-vector."""
    return jnp.stack([A[i, 0] * x[0] + A[i, 1] * x[1] + A[i, 2] * x[2] for i in range(3)])


def _mtv_fast(A: jax.Array, x: jax.Array) -> jax.Array:
    """``A.T @ x``."""
    return jnp.stack([A[0, i] * x[0] + A[1, i] * x[1] + A[2, i] * x[2] for i in range(3)])


def _mm_fast(A: jax.Array, B: jax.Array) -> jax.Array:
    """``A @ B`` for 3x3 matrices."""
    return jnp.stack(
        [jnp.stack([A[i, 0] * B[0, j] + A[i, 1] * B[1, j] + A[i, 2] * B[2, j] for j in range(3)]) for i in range(3)]
    )


def _mtm_fast(A: jax.Array, B: jax.Array) -> jax.Array:
    """``A.T @ B`` for 3x3 matrices."""
    return jnp.stack(
        [jnp.stack([A[0, i] * B[0, j] + A[1, i] * B[1, j] + A[2, i] * B[2, j] for j in range(3)]) for i in range(3)]
    )


mv = _bilinear(_mv_fast, _mv)
mtv = _bilinear(_mtv_fast, _mtv)
mm = _bilinear(_mm_fast, _mm)
mtm = _bilinear(_mtm_fast, _mtm)


def reorthogonalize(R: jax.Array) -> jax.Array:
    """One Bjorck step ``R (3 I - R^T R) / 2``: an orthogonality defect ``d`` becomes ``O(d^2)``.

    Applied after every step it keeps ``R`` orthogonal to round-off for ever (the defect cannot
    random-walk), at the cost of two 3x3 products; an exactly orthogonal ``R`` is unchanged.
    """
    E = jnp.eye(3, dtype=R.dtype) - mtm(R, R)
    return R + 0.5 * mm(R, E)


def hat(v: jax.Array) -> jax.Array:
    """Skew matrix of ``v``: ``hat(v) @ x == cross(v, x)``."""
    x, y, z = v[0], v[1], v[2]
    o = jnp.zeros_like(x)
    return jnp.stack(
        [jnp.stack([o, -z, y]), jnp.stack([z, o, -x]), jnp.stack([-y, x, o])]
    )


def vee(M: jax.Array) -> jax.Array:
    """Inverse of :func:`hat` (uses the antisymmetric part of ``M``)."""
    return 0.5 * jnp.stack([M[2, 1] - M[1, 2], M[0, 2] - M[2, 0], M[1, 0] - M[0, 1]])


def _safe_angle2(a2):
    small = a2 < SMALL_ANGLE2
    return small, jnp.where(small, jnp.ones_like(a2), a2)


# The coefficients below take their derivatives by rules of their own (``jax.custom_jvp``): the slope in
# ``a2`` is one ``jnp.where`` of the Taylor series' slope and the closed form's (from the value's sines),
# so a derivative multiplies by one coefficient instead of carrying cotangents through both sides of the
# value's ``where`` (a derivative, and its kernel, computes only the side taken); finite at zero angle.
def _rodrigues_closed(a2s):
    """Closed forms of (S1, S2, S3) and of their slopes in ``a2s`` (away from zero)."""
    a = jnp.sqrt(a2s)
    s = jnp.sin(a)
    h = jnp.sin(0.5 * a)
    s1 = s / a
    s2 = 2.0 * h * h / a2s  # 1 - cos a = 2 sin^2(a/2): no cancellation
    s3 = (a - s) / (a * a2s)
    d1 = (1.0 - s2 * a2s - s1) / (2.0 * a2s)  # d(sin a / a)/d(a^2) = (cos a - S1) / (2 a^2)
    d2 = (0.5 * s1 - s2) / a2s  # d((1 - cos a)/a^2)/d(a^2)
    d3 = (-d1 - s3) / a2s  # S3 = (1 - S1)/a^2
    return (s1, s2, s3), (d1, d2, d3)


@jax.custom_jvp
def _rodrigues(a2):
    (small, a2s), lo = _safe_angle2(a2), a2 < TINY_ANGLE2
    closed, _ = _rodrigues_closed(a2s)
    return tuple(jnp.where(small, _series(a2, lo, ct, c), x) for ct, c, x in zip(RODRIGUES_TINY, RODRIGUES_TAYLOR, closed))


@_rodrigues.defjvp
def _rodrigues_jvp(primals, tangents):
    # values and slopes from the same sines: each is one ``where`` on the same predicate
    (a2,), (da2,) = primals, tangents
    (small, a2s), lo = _safe_angle2(a2), a2 < TINY_ANGLE2
    closed, slopes = _rodrigues_closed(a2s)
    out = tuple(jnp.where(small, _series(a2, lo, ct, c), x) for ct, c, x in zip(RODRIGUES_TINY, RODRIGUES_TAYLOR, closed))
    return out, tuple(jnp.where(small, _series(a2, lo, slope_poly(ct), slope_poly(c)), d) * da2
                      for ct, c, d in zip(RODRIGUES_TINY, RODRIGUES_TAYLOR, slopes))


@traced_once
def rodrigues_coefficients(a2: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(S1, S2, S3) as functions of the squared angle ``a2`` (see module docstring)."""
    return _rodrigues(a2)


def exp(v: jax.Array) -> jax.Array:
    """Rotation matrix ``exp(hat(v))`` (Rodrigues): rotation about ``v`` by angle ``|v|``."""
    a2 = jnp.dot(v, v)
    s1, s2, _ = rodrigues_coefficients(a2)
    c = 1.0 - s2 * a2  # cos a
    return c * jnp.eye(3, dtype=v.dtype) + s1 * hat(v) + s2 * jnp.outer(v, v)


def rotate(v: jax.Array, x: jax.Array) -> jax.Array:
    """``exp(hat v) @ x`` without forming the matrix: ``cos(a) x + S1 v x x + S2 (v . x) v``.

    (``v x (v x x) = (v . x) v - a^2 x``: one cross product instead of two, which XLA on a CPU runs
    as fewer kernels: ``liemid_ea`` 4.7 -> 4.4x ``buss2p`` per body-step, alternated runs.)"""
    a2 = jnp.dot(v, v)
    s1, s2, _ = rodrigues_coefficients(a2)
    return (1.0 - s2 * a2) * x + s1 * jnp.cross(v, x) + (s2 * jnp.dot(v, x)) * v


def left_jacobian(v: jax.Array) -> jax.Array:
    """``T(v) = int_0^1 exp(s hat v) ds`` (Roblox's T, Krysl's dexp_v); ``T(v) @ v == v``."""
    a2 = jnp.dot(v, v)
    s1, s2, s3 = rodrigues_coefficients(a2)
    return s1 * jnp.eye(3, dtype=v.dtype) + s2 * hat(v) + s3 * jnp.outer(v, v)


def _dexpinv_closed(a2s):
    """The closed form of ``c`` and of its slope in ``a2s`` (away from zero): ``c = f(h)/a^2`` with
    ``f(h) = 1 - h cot h``, ``h = a/2``, ``dc/d(a^2) = f'(h)/(8 h a^2) - c/a^2``."""
    half = 0.5 * jnp.sqrt(a2s)
    sh = jnp.sin(half)
    ch = jnp.cos(half)
    c = (1.0 - half * ch / sh) / a2s
    return c, (half / (sh * sh) - ch / sh) / (8.0 * half * a2s) - c / a2s


@jax.custom_jvp
def _dexpinv(a2):
    """``c(a) = (1 - (a/2) cot(a/2)) / a^2`` of ``a^2`` (its Taylor series at small angles)."""
    (small, a2s), lo = _safe_angle2(a2), a2 < TINY_ANGLE2
    return jnp.where(small, _series(a2, lo, DEXPINV_TINY, DEXPINV_TAYLOR), _dexpinv_closed(a2s)[0])


@_dexpinv.defjvp
def _dexpinv_coefficient_jvp(primals, tangents):
    (a2,), (da2,) = primals, tangents
    (small, a2s), lo = _safe_angle2(a2), a2 < TINY_ANGLE2
    c, slope = _dexpinv_closed(a2s)
    return (jnp.where(small, _series(a2, lo, DEXPINV_TINY, DEXPINV_TAYLOR), c),
            jnp.where(small, _series(a2, lo, slope_poly(DEXPINV_TINY), slope_poly(DEXPINV_TAYLOR)), slope) * da2)


_dexpinv_coefficient = traced_once(_dexpinv)


def left_jacobian_inv(v: jax.Array) -> jax.Array:
    """``T(v)^-1`` (Krysl's dexpinv); singular at ``|v| = 2 pi``."""
    a2 = jnp.dot(v, v)
    c = _dexpinv_coefficient(a2)
    return (1.0 - c * a2) * jnp.eye(3, dtype=v.dtype) - 0.5 * hat(v) + c * jnp.outer(v, v)


def dexpinv(v: jax.Array, x: jax.Array) -> jax.Array:
    """``T(v)^-1 @ x = x - v x x / 2 + c(|v|) v x (v x x)`` without forming the matrix (the inverse
    differential of the exponential, ``dexp^{-1}_v``, of Runge-Kutta-Munthe-Kaas methods)."""
    c = _dexpinv_coefficient(jnp.dot(v, v))
    vx = jnp.cross(v, x)
    return x - 0.5 * vx + c * jnp.cross(v, vx)


def cayley(v: jax.Array) -> jax.Array:
    """Cayley map ``(1 - V/2)^-1 (1 + V/2)``; agrees with :func:`exp` only to second order."""
    V = hat(v)
    return jnp.eye(3, dtype=v.dtype) + (4.0 / (4.0 + jnp.dot(v, v))) * (V + 0.5 * V @ V)


def log(R: jax.Array) -> jax.Array:
    """Rotation vector ``v`` with ``exp(v) == R`` and ``|v| <= pi``.

    Two branches: for angles below pi/2 ``v = (theta / sin theta) vee(R - R^T)/2``; above, the axis
    comes from the symmetric part ``(R + R^T)/2 - cos(theta) 1 = (1 - cos theta) n n^T`` so that
    accuracy does not degrade as ``sin theta -> 0`` near pi. Values and gradients are finite at 0
    and at pi.
    """
    w = vee(R)  # sin(theta) * n
    c = jnp.clip(0.5 * (jnp.trace(R) - 1.0), -1.0, 1.0)
    s2 = jnp.dot(w, w)
    pos = s2 > 0
    s = jnp.where(pos, jnp.sqrt(jnp.where(pos, s2, 1.0)), 0.0)  # sin(theta), safe at 0
    theta = jnp.arctan2(s, c)
    # small-angle branch: theta / sin(theta) = asin(s)/s for c > 0
    tiny = s2 < 1e-12
    f_closed = theta / jnp.where(tiny, jnp.ones_like(s), s)
    f_taylor = poly(s2, [1.0, 1 / 6, 3 / 40, 5 / 112])
    v_small = jnp.where(tiny, f_taylor, f_closed) * w
    # near-pi branch
    B = 0.5 * (R + R.T) - c * jnp.eye(3, dtype=R.dtype)
    k = jnp.argmax(jnp.diagonal(B))
    col = B[:, k]
    n = col / jnp.sqrt(jnp.maximum(jnp.dot(col, col), jnp.finfo(R.dtype).tiny))
    n = jnp.where(jnp.dot(n, w) < 0, -n, n)
    v_large = theta * n
    return jnp.where(c < 0.0, v_large, v_small)


def rotation_angle(R1: jax.Array, R2: jax.Array) -> jax.Array:
    """Angle (radians, in [0, pi]) of the rotation ``R1 @ R2.T`` between two attitudes (NaN if either
    holds a NaN or inf: a diverged run must never read as a perfect one)."""
    v = log(R1 @ R2.T)
    a2 = jnp.dot(v, v)
    safe = jnp.where(a2 > 0, a2, 1.0)
    angle = jnp.where(a2 > 0, jnp.sqrt(safe), 0.0)
    return jnp.where(jnp.all(jnp.isfinite(R1)) & jnp.all(jnp.isfinite(R2)), angle, jnp.nan)


@jax.custom_jvp
def nearest_rotation(M: jax.Array) -> jax.Array:
    """Closest rotation to ``M`` in the Frobenius norm (SVD / polar factor with det = +1).

    Differentiable where the plain SVD is not: after one Euler step ``I + h hat(w)`` has a double
    singular value, where the SVD's derivative is 0/0. The polar factor's derivative is not
    (``dQ = U W V^T`` with ``W_ij = (M_ij - M_ji)/(s_i + s_j)``, ``M = U^T dX V``, signed ``s``).
    """
    return _nearest_rotation(M)[0]


def _nearest_rotation(M):
    U, s, Vt = jnp.linalg.svd(M)
    d = jnp.sign(jnp.linalg.det(U @ Vt))
    d = jnp.where(d == 0, 1.0, d)
    D = jnp.stack([jnp.ones_like(d), jnp.ones_like(d), d])
    return (U * D) @ Vt, U * D, s * D, Vt


@nearest_rotation.defjvp
def _nearest_rotation_jvp(primals, tangents):
    (M,), (dM,) = primals, tangents
    Q, U, s, Vt = _nearest_rotation(M)
    A = U.T @ dM @ Vt.T
    denom = s[:, None] + s[None, :]
    W = (A - A.T) / jnp.where(denom == 0, 1.0, denom)
    return Q, U @ W @ Vt


def quat_multiply(p: jax.Array, q: jax.Array) -> jax.Array:
    """Hamilton product of quaternions stored as ``(w, x, y, z)``."""
    pw, pv = p[0], p[1:]
    qw, qv = q[0], q[1:]
    return jnp.concatenate(
        [jnp.stack([pw * qw - jnp.dot(pv, qv)]), pw * qv + qw * pv + jnp.cross(pv, qv)]
    )


def quat_to_matrix(q: jax.Array) -> jax.Array:
    """Rotation matrix of a quaternion ``(w, x, y, z)`` (normalised first)."""
    q = q / jnp.linalg.norm(q)
    w, x, y, z = q[0], q[1], q[2], q[3]
    return jnp.stack(
        [
            jnp.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)]),
            jnp.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)]),
            jnp.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]),
        ]
    )


def matrix_to_quat(R: jax.Array) -> jax.Array:
    """Unit quaternion ``(w, x, y, z)`` with ``w >= 0`` of a rotation matrix (Shepperd's method)."""
    t = jnp.trace(R)
    cands = jnp.stack(
        [
            jnp.stack([1 + t, R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]]),
            jnp.stack([R[2, 1] - R[1, 2], 1 + 2 * R[0, 0] - t, R[0, 1] + R[1, 0], R[0, 2] + R[2, 0]]),
            jnp.stack([R[0, 2] - R[2, 0], R[0, 1] + R[1, 0], 1 + 2 * R[1, 1] - t, R[1, 2] + R[2, 1]]),
            jnp.stack([R[1, 0] - R[0, 1], R[0, 2] + R[2, 0], R[1, 2] + R[2, 1], 1 + 2 * R[2, 2] - t]),
        ]
    )
    # the largest diagonal candidate has the best-conditioned normalisation
    k = jnp.argmax(jnp.stack([t, R[0, 0], R[1, 1], R[2, 2]]))
    q = cands[k]
    q = q / jnp.linalg.norm(q)
    return jnp.where(q[0] < 0, -q, q)


def is_rotation(R, atol: float = 1e-6) -> bool:
    """Host-side check (NumPy values): orthogonal to ``atol`` with determinant +1."""
    import numpy as np

    R = np.asarray(R, dtype=np.float64)
    if R.shape[-2:] != (3, 3) or not np.all(np.isfinite(R)):
        return False
    eye = np.eye(3)
    err = np.abs(np.swapaxes(R, -1, -2) @ R - eye).max()
    return bool(err <= atol and np.all(np.linalg.det(R) > 0))


# the conversions live in .rotations; reached as so3.to_quaternion etc. as well (imported last: rotations
# builds on the functions above)
from .rotations import (GIMBAL_EPS, from_euler, from_quaternion, quaternion_continuous,  # noqa: E402
                        to_euler, to_quaternion)
