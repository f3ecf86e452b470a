"""Rotations in and out: quaternions in both orders and Euler angles in SciPy's conventions.

Public, batched over leading axes. Inside the library quaternions are (w, x, y, z); these functions
take ``order`` explicitly because SciPy, ROS and Eigen's coefficient vector put the scalar last.
Values agree with ``scipy.spatial.transform.Rotation`` (tested).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .so3 import matrix_to_quat


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
