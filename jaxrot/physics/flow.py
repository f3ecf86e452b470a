"""Time derivatives along the exact flow, by Taylor-mode automatic differentiation.

Methods that need ``L', L'', L'''`` or ``omega', omega'', ...`` (Buss's higher orders, Lie-Taylor)
take them from here, never from hand-derived formulas: the world-frame system
``t' = 1, R' = hat(omega) R, L' = torque(t, R, R^T L)`` with ``omega = R diag(1/J) R^T L`` is
differentiated with ``jax.experimental.jet`` (nested ``jax.jvp`` where ``jet`` lacks a rule).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import jet as _jet

from .torques import AbstractTorque


def taylor_derivatives(f, x0, n: int):
    """Derivatives ``[x', x'', ..., x^(n)]`` at ``x0`` of the solution of the autonomous ``x' = f(x)``.

    Uses the recursion ``x^(k+1) = (f o x)^(k)``: each ``jet`` call with the first k derivatives
    returns the first k derivatives of ``f(x(t))``, one more correct than before. O(n^2) cost.
    """
    f0 = f(x0)
    derivs = [f0]
    if n <= 1:
        return derivs[:n]
    try:
        for k in range(1, n):
            _, series = _jet.jet(f, (x0,), (list(derivs),))
            derivs = [f0] + list(series[:k])
        return derivs
    except NotImplementedError:
        return _nested_jvp_derivatives(f, x0, n)


def _nested_jvp_derivatives(f, x0, n):
    # g_{k+1}(x) = D g_k(x) f(x): exponential in n but supports every primitive jvp supports.
    gs = [f]
    for _ in range(1, n):
        g = gs[-1]
        gs.append(lambda x, g=g: jax.jvp(g, (x,), (f(x),))[1])
    return [g(x0) for g in gs]


def _pack(t, R, L):
    return jnp.concatenate([jnp.reshape(t, (1,)), R.reshape(9), L])


def _unpack(x):
    return x[0], x[1:10].reshape(3, 3), x[10:13]


def world_vector_field(J, torque: AbstractTorque):
    """The packed world-frame rigid-body vector field ``x' = f(x)``, ``x = (t, vec R, L)``."""

    def f(x):
        t, R, L = _unpack(x)
        Pi = R.T @ L
        omega = R @ (Pi / J)
        Rdot = jnp.cross(omega[:, None], R, axis=0)  # hat(omega) @ R, column by column
        return _pack(jnp.ones_like(t), Rdot, torque(t, R, Pi))

    return f


def momentum_derivatives(J, torque: AbstractTorque, t, R, L, n: int):
    """``[L', ..., L^(n)]`` (world frame) at ``(t, R, L)`` along the exact flow."""
    if n <= 0:
        return []
    if torque.is_free:
        return [jnp.zeros_like(L)] * n
    Pi = R.T @ L
    if n == 1:
        return [torque(t, R, Pi)]
    t = jnp.asarray(t, L.dtype)
    if torque.time_only:  # L^(k) = d^(k-1)/dt^(k-1) torque(t): no need to carry R
        tau = lambda s: torque(s, R, Pi)  # noqa: E731
        unit = [jnp.ones_like(t)] + [jnp.zeros_like(t)] * (n - 2)
        tau0, series = _jet.jet(tau, (t,), (unit,))
        return [tau0] + list(series)
    ds = taylor_derivatives(world_vector_field(J, torque), _pack(t, R, L), n)
    return [d[10:13] for d in ds]


def omega_derivatives(J, torque: AbstractTorque, t, R, L, n: int):
    """``[omega, omega', ..., omega^(n)]`` (world frame) along the exact flow, by AD.

    Independent of Buss's closed formulas (used to test them, and by the Lie-Taylor methods).
    """
    x0 = _pack(jnp.asarray(t, L.dtype), R, L)
    f = world_vector_field(J, torque)

    def omega_of(x):
        _, Rx, Lx = _unpack(x)
        return Rx @ ((Rx.T @ Lx) / J)

    w0 = omega_of(x0)
    if n == 0:
        return [w0]
    xs = taylor_derivatives(f, x0, n)
    _, ws = _jet.jet(omega_of, (x0,), (xs,))
    return [w0] + list(ws)


def pack_body(R, Pi):
    """``(vec R, Pi)``: the 12 numbers of the body-frame equations."""
    return jnp.concatenate([R.reshape(R.shape[:-2] + (9,)), Pi], axis=-1)


def unpack_body(y):
    """Inverse of :func:`pack_body`: ``(R, Pi)``."""
    return y[..., :9].reshape(y.shape[:-1] + (3, 3)), y[..., 9:]


def body_vector_field(problem):
    """``f(t, y)`` for ``y = (vec R, Pi)`` (12 numbers) of a problem: body-frame equations, world torque."""
    J, torque = problem.body.J, problem.torque

    def f(t, y):
        R, Pi = unpack_body(y)
        Om = Pi / J
        Rdot = jnp.cross(R, Om)  # row r of R @ hat(Om) is R[r] x Om
        Pidot = jnp.cross(Pi, Om) + R.T @ torque(t, R, Pi)
        return pack_body(Rdot, Pidot)

    return f
