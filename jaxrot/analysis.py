"""Invariants, errors against a reference, observed orders and convergence studies.

All functions take arrays (with any leading axes) and return arrays; nothing here integrates
except :func:`convergence_study`, which calls :func:`jaxrot.simulate`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from . import so3
from .problems import Problem
from .state import State


def world_momentum(states: State) -> jax.Array:
    """``L = R @ Pi`` for every frame."""
    return states.L


def kinetic_energy(J, Pi) -> jax.Array:
    """``0.5 Pi . (Pi / J)``."""
    return 0.5 * jnp.sum(Pi * Pi / J, axis=-1)


def energy(problem: Problem, states: State, ts=None) -> jax.Array:
    """Hamiltonian ``kinetic + V(t, R)`` (kinetic only when the torque has no potential)."""
    ke = kinetic_energy(problem.body.J, states.Pi)
    t = jnp.zeros(states.R.shape[:-2], states.R.dtype) if ts is None else jnp.broadcast_to(ts, states.R.shape[:-2])
    if problem.torque.potential(t.reshape(-1)[0], states.R.reshape(-1, 3, 3)[0]) is None:
        return ke
    flat_R = states.R.reshape(-1, 3, 3)
    V = jax.vmap(problem.torque.potential)(t.reshape(-1), flat_R).reshape(ke.shape)
    return ke + V


def orthogonality_error(R) -> jax.Array:
    """``max |R^T R - 1|`` per attitude."""
    E = jnp.swapaxes(R, -1, -2) @ R - jnp.eye(3, dtype=R.dtype)
    return jnp.max(jnp.abs(E), axis=(-2, -1))


def attitude_error(R, R_ref) -> jax.Array:
    """Rotation angle (rad) between attitudes ``R`` and ``R_ref``."""
    f = so3.rotation_angle
    for _ in range(R.ndim - 2):
        f = jax.vmap(f)
    return f(R, R_ref)


def matrix_error(A, B) -> jax.Array:
    """Spectral norm ``||A - B||_2`` (Krysl's error measure; MATLAB's ``norm``)."""
    return jnp.linalg.norm(A - B, ord=2, axis=(-2, -1))


def observed_order(dts, errors) -> float:
    """Least-squares slope of ``log(error)`` against ``log(dt)``."""
    dts, errors = np.asarray(dts, np.float64), np.asarray(errors, np.float64)
    if dts.shape != errors.shape or dts.size < 2:
        raise ValueError("observed_order needs matching arrays of at least two step sizes and errors")
    if np.any(errors <= 0) or np.any(~np.isfinite(errors)):
        raise ValueError(f"errors must be positive and finite to fit an order, got {errors}")
    return float(np.polyfit(np.log(dts), np.log(errors), 1)[0])


def local_orders(dts, errors) -> np.ndarray:
    """Slopes between consecutive step sizes (to see an order change, e.g. E1/E2 falling to 1)."""
    dts, errors = np.asarray(dts, np.float64), np.asarray(errors, np.float64)
    return np.diff(np.log(errors)) / np.diff(np.log(dts))


def convergence_study(method, problem: Problem, t_end: float, ns, reference: State, metric: str = "angle",
                      floor: float = 0.0):
    """Final-time errors of ``method`` for each step count in ``ns`` over ``[0, t_end]``.

    ``metric``: ``"angle"`` (rotation angle of R), ``"R2"`` (spectral norm of R - R_ref),
    ``"Pi2"`` (norm of Pi - Pi_ref). Errors at or below ``floor`` (a round-off level) are kept in
    the output but left out of the fitted order. Returns ``dict(dts, errors, order)``.
    """
    from .simulate import final_state

    errs, dts = [], []
    for n in ns:
        dt = t_end / n
        fin = final_state(method, problem, dt, int(n))
        errs.append(float(final_error(fin, reference, metric)))
        dts.append(dt)
    fit = [(d, e) for d, e in zip(dts, errs) if e > floor]
    if len(fit) < 2:
        raise ValueError(f"fewer than two errors above the floor {floor:g}: {errs}; use larger steps")
    order = observed_order(*zip(*fit))
    return {"dts": dts, "errors": errs, "order": order, "fitted_points": len(fit)}


def final_error(state: State, reference: State, metric: str = "angle"):
    """Error of one state against a reference by ``metric`` (see :func:`convergence_study`)."""
    if metric == "angle":
        return attitude_error(state.R, reference.R)
    if metric == "R2":
        return matrix_error(state.R, reference.R)
    if metric == "Pi2":
        return jnp.linalg.norm(state.Pi - reference.Pi, axis=-1)
    raise ValueError(f"unknown metric {metric!r}; use 'angle', 'R2' or 'Pi2'")
