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

# Below this squared angle the Taylor polynomials (through a^8) are used. Their truncation error is
# < 1e-17 there, and the closed forms lose at most ~3 digits of S3 above it (which multiplies a^2).
_SMALL_ANGLE2 = 1e-2


# Tiny products written out component by component: XLA fuses them with the surrounding
# elementwise code into one kernel (vectorised over a vmapped batch), whereas a 3x3 ``dot`` is a
# separate small-GEMM call. Measured once during development (raw buss2p step, 1 000 bodies,
# 2-core CPU): 10.6 M vs 6.1 M body-steps/s; for a single body the dots were faster (1.5 vs 1.2 M).
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
    return f


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
    small = a2 < _SMALL_ANGLE2
    return small, jnp.where(small, jnp.ones_like(a2), a2)


def _poly(a2, coeffs):
    out = jnp.zeros_like(a2) + coeffs[-1]
    for c in coeffs[-2::-1]:
        out = out * a2 + c
    return out


def rodrigues_coefficients(a2: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(S1, S2, S3) as functions of the squared angle ``a2`` (see module docstring)."""
    small, a2s = _safe_angle2(a2)
    a = jnp.sqrt(a2s)
    s = jnp.sin(a)
    h = jnp.sin(0.5 * a)
    s1 = s / a
    s2 = 2.0 * h * h / a2s  # 1 - cos a = 2 sin^2(a/2): no cancellation
    s3 = (a - s) / (a * a2s)
    t1 = _poly(a2, [1.0, -1 / 6, 1 / 120, -1 / 5040, 1 / 362880])
    t2 = _poly(a2, [1 / 2, -1 / 24, 1 / 720, -1 / 40320, 1 / 3628800])
    t3 = _poly(a2, [1 / 6, -1 / 120, 1 / 5040, -1 / 362880, 1 / 39916800])
    return (jnp.where(small, t1, s1), jnp.where(small, t2, s2), jnp.where(small, t3, s3))


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


def left_jacobian_inv(v: jax.Array) -> jax.Array:
    """``T(v)^-1`` (Krysl's dexpinv); singular at ``|v| = 2 pi``."""
    a2 = jnp.dot(v, v)
    small, a2s = _safe_angle2(a2)
    a = jnp.sqrt(a2s)
    half = 0.5 * a
    c_closed = (1.0 - half * jnp.cos(half) / jnp.sin(half)) / a2s
    c_taylor = _poly(a2, [1 / 12, 1 / 720, 1 / 30240, 1 / 1209600, 1 / 47900160])
    c = jnp.where(small, c_taylor, c_closed)
    return (1.0 - c * a2) * jnp.eye(3, dtype=v.dtype) - 0.5 * hat(v) + c * jnp.outer(v, v)


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
    f_taylor = _poly(s2, [1.0, 1 / 6, 3 / 40, 5 / 112])
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


# --- Rotations in and out: quaternions (both orders) and Euler angles (SciPy's conventions) -----------------------
# Public, batched over leading axes. Inside the library quaternions are (w, x, y, z); the public functions
# take ``order`` explicitly because SciPy, ROS and Eigen's coefficient vector put the scalar last.

_ORDERS = ("wxyz", "xyzw")
_AXIS_INDEX = {"x": 0, "y": 1, "z": 2}
#: second Euler angle within this of 0 or pi (radians): gimbal lock, the third angle is set to 0 (SciPy's rule)
GIMBAL_EPS = 1e-7


def _check_order(order, where: str) -> None:
    if order not in _ORDERS:
        raise ValueError(f"{where}: order must be 'wxyz' (scalar first) or 'xyzw' (scalar last, SciPy), got {order!r}")


def _check_trailing(x, shape: tuple, name: str, where: str) -> jax.Array:
    x = jnp.asarray(x)
    if x.ndim < len(shape) or tuple(x.shape[x.ndim - len(shape):]) != shape:
        raise ValueError(f"{where}: {name} must have shape (..., {', '.join(map(str, shape))}), got {x.shape}")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.zeros(()).dtype)
    return x


def to_quaternion(R: jax.Array, order: str) -> jax.Array:
    """Unit quaternion of a rotation matrix, ``w >= 0``, batched over leading axes.

    ``q = (w, x, y, z) = (cos(theta/2), sin(theta/2) n)`` for the rotation by ``theta`` about the unit
    axis ``n`` (``R = exp(theta hat n)``, body -> world); ``order="xyzw"`` returns ``(x, y, z, w)``
    (SciPy's ``Rotation.as_quat()``). Shepperd's method: of the four expressions for ``4 w q``,
    ``4 x q``, ... the one with the largest diagonal (>= 1 in magnitude) is normalised, so the result
    is accurate to round-off and its gradient finite everywhere, at 0 and pi included. ``q`` and
    ``-q`` are the same rotation; for a sign continuous in time see :func:`quaternion_continuous`.

    Args:
      R: rotation matrices, shape ``(..., 3, 3)``.
      order: ``"wxyz"`` or ``"xyzw"`` (required: there is no safe default).

    Returns:
      quaternions, shape ``(..., 4)``.

    Example::

        so3.to_quaternion(so3.exp(jnp.array([0.0, 0.0, jnp.pi / 2])), "wxyz")  # (0.7071, 0, 0, 0.7071)

    Reference: S. W. Shepperd, "Quaternion from rotation matrix", J. Guidance Control 1 (1978).
    """
    _check_order(order, "to_quaternion")
    R = _check_trailing(R, (3, 3), "R", "to_quaternion")
    q = jnp.vectorize(matrix_to_quat, signature="(3,3)->(4)")(R)
    return q if order == "wxyz" else jnp.concatenate([q[..., 1:], q[..., :1]], axis=-1)


def from_quaternion(q: jax.Array, order: str) -> jax.Array:
    """Rotation matrix of a quaternion (normalised first), batched over leading axes.

    ``R = ((w^2 - v.v) 1 + 2 v v^T + 2 w hat(v)) / |q|^2`` with ``v = (x, y, z)``: the inverse of
    :func:`to_quaternion` (``q`` and ``-q``, and any positive multiple of ``q``, give the same ``R``).

    Args:
      q: quaternions, shape ``(..., 4)``, nonzero.
      order: ``"wxyz"`` (scalar first) or ``"xyzw"`` (scalar last, SciPy's ``Rotation.from_quat``).

    Returns:
      rotation matrices, shape ``(..., 3, 3)``.

    Example::

        R = so3.from_quaternion(jnp.array([0.0, 0.0, 0.0, 1.0]), "xyzw")  # the identity
    """
    _check_order(order, "from_quaternion")
    q = _check_trailing(q, (4,), "q", "from_quaternion")
    if order == "xyzw":
        q = jnp.concatenate([q[..., 3:], q[..., :3]], axis=-1)
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    ww, xx, yy, zz = w * w, x * x, y * y, z * z
    # the homogeneous form over |q|^2: one rounding fewer than normalising q first (<= 1.5 ulp of 1)
    rows = [
        [ww + xx - yy - zz, 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), ww - xx + yy - zz, 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), ww - xx - yy + zz],
    ]
    M = jnp.stack([jnp.stack(r, axis=-1) for r in rows], axis=-2)
    return M / (ww + xx + yy + zz)[..., None, None]


def quaternion_continuous(q: jax.Array, axis: int = 0) -> jax.Array:
    """Flip signs along a time axis so that consecutive quaternions have a non-negative dot product.

    ``q_k`` and ``-q_k`` are the same rotation; :func:`to_quaternion` picks ``w >= 0``, which jumps
    where ``w`` changes sign. This returns ``s_k q_k`` with ``s_0 = 1`` and ``s_k = s_{k-1}`` unless
    ``q_k . q_{k-1} < 0`` (either order: the dot product does not depend on it); the result is
    continuous whenever the frames are close enough (rotation between frames below pi).

    Args:
      q: quaternions, shape ``(..., 4)``.
      axis: the time axis (one of the leading axes; default 0, negative counts from the end, so
        ``-2`` is the axis just before the components).

    Returns:
      ``q`` with signs flipped, same shape.

    Example::

        q = so3.quaternion_continuous(so3.to_quaternion(traj.states.R, "wxyz"))
    """
    q = _check_trailing(q, (4,), "q", "quaternion_continuous")
    ax = axis + q.ndim if axis < 0 else axis
    if not 0 <= ax < q.ndim - 1:
        raise ValueError(f"quaternion_continuous: axis must be a leading (time) axis of q, shape {q.shape}, "
                         f"not the component axis; got {axis}")
    qt = jnp.moveaxis(q, ax, 0)
    if qt.shape[0] < 2:
        return q
    flips = jnp.sum(qt[1:] * qt[:-1], axis=-1) < 0
    odd = (jnp.cumsum(flips.astype(jnp.int32), axis=0) % 2) == 1
    odd = jnp.concatenate([jnp.zeros_like(odd[:1]), odd], axis=0)
    return jnp.moveaxis(jnp.where(odd[..., None], -qt, qt), 0, ax)


def _parse_seq(seq, where: str) -> tuple[list[int], bool]:
    """Axis indices and ``extrinsic`` of an Euler sequence, SciPy's rules (3 axes, all lower or all upper case)."""
    if not isinstance(seq, str) or len(seq) != 3:
        raise ValueError(f"{where}: seq must be 3 axes such as 'xyz' (extrinsic) or 'ZYX' (intrinsic), got {seq!r}")
    extrinsic, intrinsic = set(seq) <= set("xyz"), set(seq) <= set("XYZ")
    if not (extrinsic or intrinsic):
        raise ValueError(f"{where}: seq must be all lowercase (extrinsic, 'xyz') or all uppercase "
                         f"(intrinsic, 'XYZ') axes from x, y, z, got {seq!r}")
    if seq[0] == seq[1] or seq[1] == seq[2]:
        raise ValueError(f"{where}: consecutive axes of seq must differ, got {seq!r}")
    return [_AXIS_INDEX[c] for c in seq.lower()], extrinsic


def _elementary(axis: int, angle: jax.Array) -> jax.Array:
    """Rotation matrices about coordinate axis ``axis`` by ``angle`` (any shape), shape ``angle.shape + (3, 3)``."""
    c, s = jnp.cos(angle), jnp.sin(angle)
    one, zero = jnp.ones_like(c), jnp.zeros_like(c)
    i, j = (axis + 1) % 3, (axis + 2) % 3
    M = [[None] * 3 for _ in range(3)]
    M[axis][axis], M[axis][i], M[axis][j], M[i][axis], M[j][axis] = one, zero, zero, zero, zero
    M[i][i], M[i][j], M[j][i], M[j][j] = c, -s, s, c
    return jnp.stack([jnp.stack(row, axis=-1) for row in M], axis=-2)


def from_euler(angles: jax.Array, seq: str, degrees: bool = False) -> jax.Array:
    """Rotation matrix from three Euler angles, SciPy's ``Rotation.from_euler(seq, angles)``.

    Lowercase ``seq`` is *extrinsic* (rotations about the fixed world axes, applied in the order
    written): ``"xyz"`` with angles ``(a, b, c)`` is ``R = R_z(c) R_y(b) R_x(a)``. Uppercase is
    *intrinsic* (about the body's rotated axes): ``"XYZ"`` is ``R = R_x(a) R_y(b) R_z(c)``. All 12
    sequences (6 Tait-Bryan, ``"xyz"``..., 6 proper Euler, ``"zxz"``...) in either case. Batched over
    leading axes; differentiable everywhere.

    Args:
      angles: shape ``(..., 3)``, radians (or degrees with ``degrees=True``).
      seq: the axis sequence, e.g. ``"xyz"``, ``"ZYX"``, ``"zxz"``.
      degrees: angles in degrees.

    Returns:
      rotation matrices ``(..., 3, 3)`` (body -> world).

    Example::

        R = so3.from_euler(jnp.array([30.0, 0.0, 90.0]), "ZYX", degrees=True)  # yaw 30, pitch 0, roll 90
    """
    axes, extrinsic = _parse_seq(seq, "from_euler")
    angles = _check_trailing(angles, (3,), "angles", "from_euler")
    if degrees:
        angles = jnp.deg2rad(angles)
    Rs = [_elementary(a, angles[..., k]) for k, a in enumerate(axes)]
    if extrinsic:  # R3 R2 R1
        return Rs[2] @ Rs[1] @ Rs[0]
    return Rs[0] @ Rs[1] @ Rs[2]


def _safe_atan2(y, x):
    """``atan2(y, x)`` with a finite gradient (zero) at ``y = x = 0``, where its value is 0."""
    zero = (y == 0) & (x == 0)
    return jnp.where(zero, 0.0, jnp.arctan2(jnp.where(zero, 0.0, y), jnp.where(zero, 1.0, x)))


def _safe_hypot(x, y):
    """``sqrt(x^2 + y^2)`` with a finite gradient (zero) at the origin."""
    n2 = x * x + y * y
    pos = n2 > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, n2, 1.0)), 0.0)


def to_euler(R: jax.Array, seq: str, degrees: bool = False) -> jax.Array:
    """Euler angles of rotation matrices, SciPy's ``Rotation.as_euler(seq)`` (same values).

    ``seq`` as in :func:`from_euler` (lowercase extrinsic, uppercase intrinsic, all 12 sequences);
    ``from_euler(to_euler(R, seq), seq) == R``. Ranges: first and third angle in ``[-pi, pi]``,
    second in ``[0, pi]`` (proper Euler) or ``[-pi/2, pi/2]`` (Tait-Bryan). Method: Bernardes and
    Viollet's quaternion formula, SciPy's: with the quaternion's components permuted to
    ``(a, b, c, d)``, the second angle is ``2 atan2(|(c, d)|, |(a, b)|)`` and the others
    ``atan2(b, a) -/+ atan2(d, c)``. At gimbal lock (second angle within :data:`GIMBAL_EPS` of 0 or
    pi, where only the sum or difference of the first and third is defined) the third angle is set to 0,
    as SciPy does (without its warning: this function is traced). Values and gradients are finite
    everywhere (the arctangents are guarded at 0/0); gradients at gimbal lock are not meaningful.

    Args:
      R: rotation matrices ``(..., 3, 3)``.
      seq: the axis sequence, e.g. ``"xyz"``, ``"ZYX"``, ``"zxz"``.
      degrees: return degrees.

    Returns:
      angles ``(..., 3)``.

    Example::

        yaw, pitch, roll = so3.to_euler(R, "ZYX", degrees=True)

    Reference: E. Bernardes, S. Viollet, "Quaternion to Euler angles conversion: a direct, general
    and computationally efficient method", PLoS ONE 17 (2022) e0276302.
    """
    axes, extrinsic = _parse_seq(seq, "to_euler")
    R = _check_trailing(R, (3, 3), "R", "to_euler")
    q = to_quaternion(R, "wxyz")
    w, v = q[..., 0], [q[..., 1], q[..., 2], q[..., 3]]
    i, j, k = axes if extrinsic else axes[::-1]
    proper = i == k
    if proper:
        k = 3 - i - j
    sign = (i - j) * (j - k) * (k - i) // 2
    if proper:
        a, b, c, d = w, v[i], v[j], v[k] * sign
    else:
        a, b, c, d = w - v[j], v[i] + v[k] * sign, v[j] + w, v[k] * sign - v[i]
    second = 2.0 * jnp.arctan2(_safe_hypot(c, d), _safe_hypot(a, b))
    half_sum, half_diff = _safe_atan2(b, a), _safe_atan2(d, c)
    at_zero = jnp.abs(second) <= GIMBAL_EPS
    at_pi = jnp.abs(second - jnp.pi) <= GIMBAL_EPS
    locked = at_zero | at_pi
    # gimbal lock: the third angle is 0 and the first carries the one defined combination
    locked_value = jnp.where(at_zero, 2.0 * half_sum, 2.0 * half_diff * (-1.0 if extrinsic else 1.0))
    s = float(sign) if not proper else 1.0  # Tait-Bryan: the permutation's sign on the last angle
    if extrinsic:
        first = jnp.where(locked, locked_value, half_sum - half_diff)
        third = jnp.where(locked, 0.0, half_sum + half_diff) * s
    else:  # the algorithm works on the reversed sequence: its first and third angles swap
        first = jnp.where(locked, locked_value, half_sum + half_diff) * s
        third = jnp.where(locked, 0.0, half_sum - half_diff)
    if not proper:
        second = second - 0.5 * jnp.pi
    # first and third into [-pi, pi] (each is within 2 pi of it); the second is in range already
    first, third = (jnp.where(x < -jnp.pi, x + 2.0 * jnp.pi, jnp.where(x > jnp.pi, x - 2.0 * jnp.pi, x))
                    for x in (first, third))
    out = jnp.stack([first, second, third], axis=-1)
    return jnp.rad2deg(out) if degrees else out
