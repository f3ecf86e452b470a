"""The eight-particle spring model of a book (Postma & Nerbonne, "Books in space", Groningen 2011).

Equal masses ``m`` at the corners of a cuboid, a spring between every pair (28 springs) with rest
length the initial distance. The slides' "force" is an acceleration::

    a_i = sum_{j != i} (k/m) (d0_ij / |x_i - x_j| - 1) (x_i - x_j)        (magnitude (k/m)(d0 - d))

Time stepping (``scheme``):

* ``"euler"`` -- explicit Euler *as printed*: ``v <- v + a dt``; ``x <- x + v_old dt`` (the
  position uses the old velocity). First order; gains energy and eventually explodes.
* ``"symplectic_euler"`` -- ``v <- v + a dt``; ``x <- x + v_new dt``. First order, symplectic.
* ``"verlet"`` -- velocity Verlet (kick-drift-kick). Second order, symplectic, time-reversible.
  The slides ask "can you improve this model?": these two are the standard answers.

Optional ``damping`` adds a dashpot along each spring, ``-c ((v_i - v_j).e_ij) e_ij``, which removes
vibration but keeps linear and angular momentum (central pair forces).

``normalize=True`` applies the slides' "normalise using conservation of energy" after each step
(the rule itself is a reconstruction): with ``E = 1/2 m sum |v|^2 + sum_{i<j} 1/2 k (d_ij - d0_ij)^2``,
the velocities relative to the centre-of-mass velocity are scaled by
``s = sqrt((E0 - U - K_cm) / K_rel)`` whenever that is real. Energy is then exact, but every
spring vibration the Euler error feeds in is paid for from the rotation: angular momentum is
"transformed into vibration" (the slides' words) and the rotation dies out.

Every pair force is central and antisymmetric, so total linear momentum is conserved exactly by
all schemes; explicit Euler changes angular momentum by ``dt^2 sum v_i x a_i`` per step.

The rigid-body counterpart of a book is :meth:`jaxrot.RigidBody.from_points` of its corners.
"""

from __future__ import annotations

import itertools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..geometry import so3

SCHEMES = ("euler", "symplectic_euler", "verlet")
_PAIRS = np.array(list(itertools.combinations(range(8), 2)), dtype=np.int32)  # 28 springs
SPRINGS = _PAIRS  # (28, 2) particle index pairs


def cuboid_corners(a: float, b: float, c: float) -> np.ndarray:
    """The 8 corners of an ``a x b x c`` cuboid centred at the origin, edges along x, y, z."""
    return np.array([[sx * a / 2, sy * b / 2, sz * c / 2] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)])


class SpringBook(eqx.Module):
    """Eight equal masses joined by 28 springs; rest lengths from ``X_rest`` (8 x 3).

    ``k_over_m`` and ``damping`` are array leaves: they can be batched with ``vmap`` (a sweep over
    spring constants) and differentiated.
    """

    X_rest: jax.Array
    k_over_m: jax.Array
    mass: jax.Array
    damping: jax.Array

    def __init__(self, X_rest, k_over_m=2000.0, mass=1.0, damping=0.0):
        X_rest = jnp.asarray(X_rest)
        self.X_rest = X_rest
        self.k_over_m = jnp.asarray(k_over_m, X_rest.dtype)
        self.mass = jnp.asarray(mass, X_rest.dtype)
        self.damping = jnp.asarray(damping, X_rest.dtype)

    def __check_init__(self):
        concrete = not any(isinstance(x, jax.core.Tracer) for x in (self.X_rest, self.k_over_m, self.mass))
        if concrete and hasattr(self.X_rest, "shape"):
            if self.X_rest.shape[-2:] != (8, 3):
                raise ValueError(f"X_rest must hold 8 points in 3-D, got shape {self.X_rest.shape}")
            if np.any(np.asarray(self.k_over_m) <= 0) or np.any(np.asarray(self.mass) <= 0):
                raise ValueError("k_over_m and mass must be positive")
            if np.any(np.asarray(self.damping) < 0):
                raise ValueError("damping must be >= 0")
            d0 = np.linalg.norm(np.asarray(self.X_rest)[..., _PAIRS[:, 0], :] - np.asarray(self.X_rest)[..., _PAIRS[:, 1], :],
                                axis=-1)
            if np.any(d0 <= 0):
                raise ValueError("two particles of X_rest coincide: a spring needs a positive rest length")

    @classmethod
    def cuboid(cls, a=0.2, b=1.0, c=1.5, **kw) -> "SpringBook":
        """A book of size ``a x b x c`` (default 0.2 x 1.0 x 1.5, the size we chose; the slides give none)."""
        return cls(jnp.asarray(cuboid_corners(a, b, c)), **kw)

    def rest_lengths(self):
        return _pair_lengths(self.X_rest)

    def rigid_body(self):
        """The rigid body of the same point masses (for an axis-aligned cuboid the principal axes
        are x, y, z, so the moments are returned in that order, unsorted)."""
        from ..geometry.body import RigidBody, point_inertia_tensor

        I = point_inertia_tensor(np.asarray(self.X_rest), float(self.mass))
        return RigidBody(jnp.asarray(np.diag(I).copy()))


class ParticleState(eqx.Module):
    """Positions ``X`` and velocities ``V`` of the 8 particles (8 x 3 each)."""

    X: jax.Array
    V: jax.Array


class ParticleTrajectory(eqx.Module):
    """Saved frames: ``ts`` (n+1,), ``states`` with leading axis n+1 (the initial state first)."""

    ts: jax.Array
    states: ParticleState


def _pair_lengths(X):
    return jnp.linalg.norm(X[..., _PAIRS[:, 0], :] - X[..., _PAIRS[:, 1], :], axis=-1)


def acceleration(book: SpringBook, X, V=None):
    """``a_i`` of every particle (8 x 3), with the optional dashpot if ``V`` is given."""
    i, j = _PAIRS[:, 0], _PAIRS[:, 1]
    r = X[i] - X[j]
    d = jnp.linalg.norm(r, axis=-1)
    f = (book.k_over_m * (book.rest_lengths() / d - 1.0))[:, None] * r  # on i; -f on j
    if V is not None:
        e = r / d[:, None]
        f = f - book.damping * jnp.sum((V[i] - V[j]) * e, axis=-1, keepdims=True) * e
    return jnp.zeros_like(X).at[i].add(f).at[j].add(-f)


def energy(book: SpringBook, state: ParticleState):
    """``1/2 m sum |v|^2 + sum_{i<j} 1/2 k (d - d0)^2`` (``k = m k_over_m``)."""
    K = 0.5 * book.mass * jnp.sum(state.V * state.V, axis=(-2, -1))
    U = 0.5 * book.mass * book.k_over_m * jnp.sum((_pair_lengths(state.X) - book.rest_lengths()) ** 2, axis=-1)
    return K + U


def linear_momentum(book: SpringBook, state: ParticleState):
    return book.mass * jnp.sum(state.V, axis=-2)


def angular_momentum(book: SpringBook, state: ParticleState):
    """About the origin: ``m sum x_i x v_i``."""
    return book.mass * jnp.sum(jnp.cross(state.X, state.V), axis=-2)


def spin(book: SpringBook, omega, R0=None) -> ParticleState:
    """The book at rest shape, turned by ``R0``, rotating rigidly with world angular velocity ``omega``."""
    X = book.X_rest if R0 is None else book.X_rest @ jnp.asarray(R0).T
    X = X - jnp.mean(X, axis=0)
    return ParticleState(X, jnp.cross(jnp.broadcast_to(jnp.asarray(omega, X.dtype), X.shape), X))


def attitude(book: SpringBook, X):
    """Best-fit rotation (Kabsch) taking the rest shape to the particles ``X``: ``X - c ~ X_rest R^T``."""
    A = (X - jnp.mean(X, axis=-2, keepdims=True)).swapaxes(-1, -2) @ (book.X_rest - jnp.mean(book.X_rest, axis=0))
    return so3.nearest_rotation(A) if A.ndim == 2 else jax.vmap(so3.nearest_rotation)(A)


def axis_momentum_cosine(book: SpringBook, X, V, axis: int):
    """Cosine between the book's body axis ``axis`` (of the Kabsch attitude) and its angular
    momentum, per frame (leading axes of ``X``, ``V``); the particle twin of
    :func:`jaxrot.analysis.body_axis_momentum_cosine`."""
    R = attitude(book, X)
    L = angular_momentum(book, ParticleState(X, V))
    return jnp.sum(R[..., :, axis] * L, axis=-1) / jnp.linalg.norm(L, axis=-1)


def _normalize(book, state, E0):
    vcm = jnp.mean(state.V, axis=0)
    Vrel = state.V - vcm
    K_cm = 0.5 * book.mass * 8 * jnp.sum(vcm * vcm)
    K_rel = 0.5 * book.mass * jnp.sum(Vrel * Vrel)
    U = energy(book, ParticleState(state.X, jnp.zeros_like(state.V)))
    target = E0 - U - K_cm
    ok = (target > 0) & (K_rel > 0)
    s = jnp.sqrt(jnp.where(ok, target, 1.0) / jnp.where(ok, K_rel, 1.0))
    return ParticleState(state.X, vcm + jnp.where(ok, s, 1.0) * Vrel)


def particle_step(book: SpringBook, state: ParticleState, dt, scheme: str = "euler") -> ParticleState:
    """One step of ``scheme`` (see the module docstring)."""
    X, V = state.X, state.V
    if scheme == "euler":
        return ParticleState(X + dt * V, V + dt * acceleration(book, X, V))
    if scheme == "symplectic_euler":
        V1 = V + dt * acceleration(book, X, V)
        return ParticleState(X + dt * V1, V1)
    if scheme == "verlet":
        Vh = V + 0.5 * dt * acceleration(book, X, V)
        X1 = X + dt * Vh
        return ParticleState(X1, Vh + 0.5 * dt * acceleration(book, X1, Vh))
    raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")


def simulate_particles(book: SpringBook, state0: ParticleState, dt, n_steps: int, *, save_every: int = 1,
                       scheme: str = "euler", normalize: bool = False) -> ParticleTrajectory:
    """Integrate the book (``lax.scan``; ``jit``, ``vmap`` over books/states and ``grad`` work)."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)) or n_steps < 1:
        raise ValueError(f"n_steps must be a positive int, got {n_steps!r}")
    if isinstance(save_every, bool) or not isinstance(save_every, (int, np.integer)) or save_every < 1:
        raise ValueError(f"save_every must be a positive int, got {save_every!r}")
    if n_steps % save_every:
        raise ValueError(f"n_steps ({n_steps}) must be a multiple of save_every ({save_every})")
    if not isinstance(dt, jax.core.Tracer) and not (np.isfinite(dt) and dt > 0):
        raise ValueError(f"dt must be finite and > 0, got {dt}")
    return _simulate(book, state0, jnp.asarray(dt, state0.X.dtype), n_steps // save_every, save_every, scheme,
                     normalize)


@eqx.filter_jit
def _simulate(book, state0, dt, n_frames, save_every, scheme, normalize):
    E0 = energy(book, state0)

    def step(s, _):
        s = particle_step(book, s, dt, scheme)
        return (_normalize(book, s, E0) if normalize else s), None

    def frame(s, _):
        s, _ = lax.scan(step, s, None, length=save_every)
        return s, s

    _, frames = lax.scan(frame, state0, None, length=n_frames)
    states = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), state0, frames)
    ts = dt * save_every * jnp.arange(n_frames + 1, dtype=dt.dtype)
    return ParticleTrajectory(ts, states)
