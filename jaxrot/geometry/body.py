"""A rigid body is its principal moments of inertia ``J = (J1, J2, J3)`` (body frame = principal frame)."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np


class RigidBody(eqx.Module):
    """Principal moments ``J`` (a pytree leaf: it can be fitted, batched and differentiated).

    ``J`` must be positive and satisfy the triangle inequality ``J_i <= J_j + J_k`` (a physical
    mass distribution); :func:`validate_inertia` checks this on concrete values.
    """

    J: jax.Array
    #: False only for test problems with non-physical moments (Buss's torqued test problem uses J = (1, 2, 3.5)).
    physical: bool = eqx.field(static=True, default=True)

    def __init__(self, J, physical: bool = True):
        self.J = jnp.asarray(J)
        self.physical = physical

    def __check_init__(self):
        if not isinstance(self.J, jax.core.Tracer) and not _is_placeholder(self.J):
            validate_inertia(self.J, self.physical)

    @classmethod
    def box(cls, a: float, b: float, c: float, mass: float = 1.0) -> "RigidBody":
        """Uniform box with edges ``a, b, c`` along body x, y, z."""
        return cls(mass / 12.0 * np.array([b * b + c * c, a * a + c * c, a * a + b * b]))

    @classmethod
    def cylinder(cls, radius: float, length: float, mass: float = 1.0) -> "RigidBody":
        """Uniform solid cylinder with its axis along body z."""
        t = mass * (3 * radius**2 + length**2) / 12.0
        return cls(np.array([t, t, 0.5 * mass * radius**2]))

    @classmethod
    def from_tensor(cls, I) -> tuple["RigidBody", np.ndarray]:
        """Diagonalise a symmetric inertia tensor: returns ``(body, Q)`` with ``I = Q diag(J) Q^T``.

        ``Q`` is a rotation (det +1) whose columns are the principal axes; use ``R0 @ Q`` as the
        attitude of the principal frame when ``I`` is given in a body frame with attitude ``R0``.
        """
        I = np.asarray(I, dtype=np.float64)
        if I.shape != (3, 3) or not np.all(np.isfinite(I)):
            raise ValueError(f"inertia tensor must be a finite 3x3 matrix, got shape {I.shape}")
        if np.abs(I - I.T).max() > 1e-9 * max(1.0, np.abs(I).max()):
            raise ValueError("inertia tensor must be symmetric")
        J, Q = np.linalg.eigh(I)
        if np.linalg.det(Q) < 0:
            Q[:, 2] = -Q[:, 2]
        return cls(J), Q

    @classmethod
    def from_points(cls, points, masses=1.0) -> tuple["RigidBody", np.ndarray]:
        """Point masses (e.g. the 8 corners of a particle book) about their centre of mass.

        Returns ``(body, Q)`` as :meth:`from_tensor`: ``Q``'s columns are the principal axes in the
        points' frame.
        """
        X = np.asarray(points, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != 3 or len(X) < 3:
            raise ValueError(f"points must have shape (n >= 3, 3), got {X.shape}")
        m = np.broadcast_to(np.asarray(masses, dtype=np.float64), (len(X),))
        if np.any(m <= 0):
            raise ValueError("masses must be positive")
        return cls.from_tensor(point_inertia_tensor(X, m))

    def omega(self, Pi: jax.Array) -> jax.Array:
        """Body angular velocity ``Pi / J``."""
        return Pi / self.J

    def kinetic_energy(self, Pi: jax.Array) -> jax.Array:
        """``0.5 * Pi . (Pi / J)``."""
        return kinetic_energy(self.J, Pi)


def kinetic_energy(J, Pi):
    """``0.5 Pi . (Pi / J)`` (the one definition: ``RigidBody.kinetic_energy`` and
    ``jaxrot.analysis.kinetic_energy`` are this)."""
    return 0.5 * jnp.sum(Pi * Pi / J, axis=-1)


def violates_triangle(J, xp=jnp):
    """``J_i > J_j + J_k`` for some i (no mass distribution has these moments), per body.
    ``J_i <= J_j + J_k  <=>  2 J_i <= sum(J)``; a 1e-12 slack admits thin rods and discs given in
    floats. ``xp``: ``numpy`` for the host check, ``jax.numpy`` for the traced one."""
    return xp.any(2 * J > xp.sum(J, axis=-1, keepdims=True) * (1 + 1e-12), axis=-1)


def _is_placeholder(x) -> bool:
    # jax.eval_shape / tree utilities build modules with ShapeDtypeStruct or object leaves
    return not hasattr(x, "dtype") or isinstance(x, jax.ShapeDtypeStruct)


def validate_inertia(J, physical: bool = True) -> None:
    """Raise ``ValueError`` unless ``J`` holds 3 finite, positive (and, if ``physical``, realisable)
    moments; for moments of several bodies (shape ``(..., 3)``) the message names the first bad body."""
    try:
        J = np.asarray(J, dtype=np.float64)
    except Exception:  # pragma: no cover - exotic leaf types
        return
    message = inertia_message(J, physical)
    if message is not None:
        raise ValueError(message)


def inertia_message(J, physical: bool = True) -> str | None:
    """What is wrong with the moments ``J`` (a NumPy array of shape ``(..., 3)``), or None: the one
    message of the check of concrete moments and of traced ones (from a host callback). A refused
    symmetric 3x3 ``J`` is most likely an inertia tensor given where three principal moments are
    expected: the message says so and names :meth:`RigidBody.from_tensor`."""
    J = np.asarray(J, dtype=np.float64)
    if J.shape[-1:] != (3,):
        return f"principal moments J must have shape (..., 3), got {J.shape}"
    bad = ~np.all(np.isfinite(J), axis=-1) | np.any(J <= 0, axis=-1)
    if physical:
        with np.errstate(invalid="ignore"):
            bad = bad | violates_triangle(J, np)
    if not np.any(bad):
        return None
    message = _moments_message(J, bad)
    if J.shape == (3, 3) and np.allclose(J, J.T, rtol=1e-9, atol=0, equal_nan=True):
        return tensor_message(f" {J.tolist()}", f"read as the moments of 3 bodies, {message}")
    return message


def tensor_message(values: str, then: str) -> str:
    """The message for a 3x3 matrix given where three principal moments are expected (``values``: the
    matrix as printed, or ""), with the remedy, then ``then``."""
    return (f"three principal moments J = (J1, J2, J3) were expected, got a 3x3 matrix{values}: for a full inertia "
            f"tensor I use `body, Q = jaxrot.RigidBody.from_tensor(I)`, which diagonalises it (Q: the principal "
            f"axes); {then}")


def _moments_message(J, bad) -> str:
    where = ""
    if J.ndim > 1:
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        where = f" of body {idx[0] if len(idx) == 1 else idx}"
        J = J[idx]
    if not np.all(np.isfinite(J)):
        return f"principal moments J{where} must be finite, got {J}"
    if np.any(J <= 0):
        return f"principal moments J{where} must be positive, got {J}"
    return (f"principal moments J{where}{' = ' if where else '='}{J} violate the triangle inequality J_i <= J_j + J_k; "
            "no mass distribution has these moments (RigidBody(J, physical=False) skips this check)")


def point_inertia_tensor(points, masses=1.0) -> np.ndarray:
    """Inertia tensor of point masses about their centre of mass, ``sum m (|x|^2 1 - x x^T)``."""
    X = np.asarray(points, dtype=np.float64)
    m = np.broadcast_to(np.asarray(masses, dtype=np.float64), (len(X),))
    X = X - (m[:, None] * X).sum(0) / m.sum()
    S = np.einsum("i,ij,ik->jk", m, X, X)
    return np.eye(3) * np.trace(S) - S
