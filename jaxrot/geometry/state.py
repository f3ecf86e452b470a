"""The state ``(R, Pi)`` of one body."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..errors import run_time_check
from . import so3


class State(eqx.Module):
    """Attitude ``R`` (body -> world, 3x3) and **body** angular momentum ``Pi = J * Omega``.

    World momentum is ``R @ Pi``; world angular velocity ``R @ (Pi / J)``. Besides ``State(R, Pi)``,
    the attitude can be given as a quaternion (:meth:`from_quaternion`), Euler angles
    (:meth:`from_euler`) or a SciPy ``Rotation`` (:meth:`from_scipy`).
    """

    R: jax.Array
    Pi: jax.Array

    @property
    def L(self) -> jax.Array:
        """World angular momentum ``R @ Pi``."""
        return jnp.einsum("...ij,...j->...i", self.R, self.Pi)

    @classmethod
    def from_quaternion(cls, q, Pi, *, order: str) -> "State":
        """State with attitude the quaternion ``q`` (normalised; shape ``(..., 4)``) and body momentum ``Pi``.

        ``order`` is ``"wxyz"`` (scalar first) or ``"xyzw"`` (scalar last, SciPy's); required. ``Pi``
        is cast to ``R``'s dtype. A zero or non-finite ``q`` has no attitude: it raises a
        ``ValueError`` naming ``q`` (under ``jit``, from the running program, reported inside JAX's
        runtime error; ``jaxrot.simulation_errors()`` re-raises the ``ValueError``).

        Example::

            s0 = jaxrot.State.from_quaternion(jnp.array([1.0, 0.0, 0.0, 0.0]), J * omega0, order="wxyz")
        """
        R = _checked_attitude(q, so3.from_quaternion(q, order))
        return cls(R, _momentum(Pi, R))

    @classmethod
    def from_euler(cls, angles, seq: str, Pi, *, degrees: bool = False) -> "State":
        """State with attitude given by Euler angles (SciPy's ``seq``: ``"xyz"`` extrinsic, ``"XYZ"``
        intrinsic; see :func:`jaxrot.so3.from_euler`) and body momentum ``Pi``.

        Example::

            s0 = jaxrot.State.from_euler(jnp.array([0.0, 20.0, 0.0]), "ZYX", J * omega0, degrees=True)
        """
        R = so3.from_euler(angles, seq, degrees=degrees)
        return cls(R, _momentum(Pi, R))

    @classmethod
    def from_scipy(cls, rotation, Pi) -> "State":
        """State with attitude a ``scipy.spatial.transform.Rotation`` (one or several: the leading axes
        of ``rotation.as_matrix()``) and body momentum ``Pi``. SciPy is optional and only imported here.

        Example::

            s0 = jaxrot.State.from_scipy(Rotation.from_rotvec([0.0, 0.3, 0.0]), J * omega0)
        """
        try:
            from scipy.spatial.transform import Rotation
        except ImportError as err:  # pragma: no cover - SciPy is installed with the test extras
            raise ImportError("State.from_scipy needs SciPy (pip install scipy)") from err
        if not isinstance(rotation, Rotation):
            raise TypeError(f"State.from_scipy: rotation must be a scipy.spatial.transform.Rotation, "
                            f"got {type(rotation).__name__}")
        # through the quaternion: exact for SciPy's stored representation, orthogonal to round-off
        R = so3.from_quaternion(jnp.asarray(rotation.as_quat()), "xyzw")
        return cls(R, _momentum(Pi, R))


def _momentum(Pi, R) -> jax.Array:
    Pi = jnp.asarray(Pi, R.dtype)
    if Pi.shape[-1:] != (3,):
        raise ValueError(f"Pi must have shape (..., 3), got {Pi.shape}")
    return Pi


def _checked_attitude(q, R) -> jax.Array:
    """``R``, the matrix of the quaternion ``q``, once ``q`` is known to have one: a zero quaternion
    (or one whose squared norm under- or overflows, or a NaN/inf entry) gives NaN in every entry."""
    if not isinstance(R, jax.core.Tracer):
        if not np.all(np.isfinite(np.asarray(R))):
            raise ValueError(_quaternion_message(np.asarray(q), np.asarray(R).dtype) or
                             "State.from_quaternion: q gives a non-finite attitude")
        return R
    bad = ~jnp.all(jnp.isfinite(R), axis=(-2, -1))
    return run_time_check(R, bad, lambda q: _quaternion_message(q, R.dtype), (jnp.asarray(q),))


def _quaternion_message(q: np.ndarray, dtype) -> str | None:
    """What is wrong with the quaternions ``q`` (NumPy, shape ``(..., 4)``) as attitudes in ``dtype``,
    or None; several name the first bad one."""
    q = q.astype(dtype)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        n2 = np.sum(q * q, axis=-1)
        bad = ~np.all(np.isfinite(q), axis=-1) | ~((n2 > 0) & np.isfinite(n2))
    if not np.any(bad):
        return None
    idx = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.ndim else ()
    where = "" if not idx else f" (entry {idx[0] if len(idx) == 1 else idx})"
    return (f"State.from_quaternion: q{where} must be a finite, nonzero quaternion, got {q[idx]} "
            f"(it has no attitude: the rotation matrix would be NaN)")


def tree_where(c, a, b):
    """``a`` where ``c``, ``b`` elsewhere, leaf by leaf (states, loop carries; ``c`` broadcast)."""
    return jax.tree_util.tree_map(lambda x, y: jnp.where(c, x, y), a, b)
