"""Dense output on SO(3): states between the steps of a fixed-step run.

Between two step endpoints ``(R0, Pi0)`` at ``t`` and ``(R1, Pi1)`` at ``t + h`` the attitude is
``R(s) = R0 exp(hat xi(s))`` with ``xi`` the cubic Hermite interpolant in the Lie algebra,

    xi(0) = 0,   xi(h) = log(R0^T R1),   xi'(0) = Omega0,   xi'(h) = dexp_r^{-1}(xi(h)) Omega1,

(``Omega = J^-1 Pi`` the body angular velocity; ``dexp_r^{-1}(v) = T(-v)^{-1}`` the inverse right
Jacobian, :func:`jaxrot.so3.dexpinv` at ``-v``), and the body momentum is the cubic Hermite
interpolant with the derivatives of Euler's equations ``Pi' = Pi x Omega + R^T tau(t, R, Pi)``.
Both interpolate the exact flow to O(h^4) locally, so the dense output of a method of order
``p <= 4`` converges at order ``p`` (order 4 for a method of higher order). Cost: one ``log``, one
``exp``, one inverse Jacobian (matrix-free) and two torque evaluations per query. Finite values and
gradients at zero angle (``log``, ``exp`` and the inverse Jacobian switch to their Taylor series).

What the loop collects for it: with constant steps, checkpoint frames every ``c`` steps (``c`` the
divisor of the step count nearest to its square root; memory bounded) — a query re-runs, from the
checkpoint before it, the steps up to the step that brackets it (a ``lax.scan`` of fixed length ``c``
with masking, so reverse-differentiable), takes one more step and interpolates
(:class:`DenseOutput`; a method's auxiliary state is rebuilt from the checkpoint with
``method.init``: exact for one-step methods, multistep methods restart there); with error-controlled
steps, every accepted step's endpoint (:class:`StepDenseOutput`; memory ``max_steps`` states).

Reference: Hermite interpolation on Lie groups as in Hairer, Lubich & Wanner, Geometric Numerical
Integration (2006), IV.8 (Lie group methods) with the right-trivialised derivative of ``exp``.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..geometry import so3
from ..geometry.state import State
from ..physics.torques import body_torque
from .precision import full_precision

__all__ = ["interpolate", "momentum_rate", "DenseOutput", "StepDenseOutput", "checkpoint_interval"]


def momentum_rate(system, t, state: State):
    """``dPi/dt = Pi x omega + tau_body``: Euler's equations for the body momentum at ``t``."""
    return jnp.cross(state.Pi, state.Pi / system.body.J) + body_torque(system, t, state.R, state.Pi)


def _hermite(u):
    u2, u3 = u * u, u * u * u
    return 2 * u3 - 3 * u2 + 1, u3 - 2 * u2 + u, -2 * u3 + 3 * u2, u3 - u2


def interpolate(system, t, h, s0: State, s1: State, s) -> State:
    """The state at ``t + s`` (``0 <= s <= h``) between the step endpoints ``s0`` (at ``t``) and ``s1``
    (at ``t + h``) of one body: cubic Hermite in the Lie algebra for ``R``, cubic Hermite for ``Pi``
    (see the module docstring); O(h^4) local error.

    Args:
      system: the body and torque (``system.body.J``, ``system.torque``).
      t, h: start of the step and its length.
      s0, s1: states at ``t`` and ``t + h``.
      s: offset into the step.

    Returns:
      the interpolated :class:`~jaxrot.State`.

    Example::

        mid = interpolate(problem.system, 0.0, dt, s0, s1, 0.5 * dt)
    """
    J = system.body.J
    w0, w1 = s0.Pi / J, s1.Pi / J
    xi1 = so3.log(so3.mtm(s0.R, s1.R))
    m1 = so3.dexpinv(-xi1, w1)
    d0 = momentum_rate(system, t, s0)
    d1 = momentum_rate(system, t + h, s1)
    a, b, c, d = _hermite(s / h)
    xi = (b * h) * w0 + c * xi1 + (d * h) * m1
    R = so3.mm(s0.R, so3.exp(xi))
    Pi = a * s0.Pi + (b * h) * d0 + c * s1.Pi + (d * h) * d1
    return State(R, Pi)


def _check_in_span(tn: np.ndarray, lo: float, hi: float) -> None:
    """Query times ``tn`` must be finite and within the run's span ``[lo, hi]`` (to round-off)."""
    if np.any(~np.isfinite(tn)) or np.any(tn < lo - 1e-12 * max(1.0, abs(lo))) or \
            np.any(tn > hi + 1e-9 * max(1.0, abs(hi))):
        raise ValueError(f"t must lie within the run's span [{lo}, {hi}], got {tn}")


def checkpoint_interval(n_steps: int) -> int:
    """Steps between checkpoint frames: the divisor ``c`` of ``n_steps`` minimising ``c + n_steps / c``
    (the frames kept plus the steps a query re-runs)."""
    n = int(n_steps)
    best = 1
    for c in range(1, int(np.sqrt(n)) + 2):
        if n % c == 0:
            for d in (c, n // c):
                if d + n // d < best + n // best:
                    best = d
    return best


def _state_at(method, system, ckpt: State, t0, dt, c: int, n_steps: int, t):
    """One body's state at time ``t`` from its checkpoint frames ``ckpt`` (every ``c`` steps)."""
    k = jnp.clip(jnp.floor((t - t0) / dt).astype(jnp.int32), 0, n_steps - 1)
    j = k // c
    r = k - j * c
    s0 = jax.tree_util.tree_map(lambda x: x[j], ckpt)
    tj = t0 + (j * c).astype(dt.dtype) * dt
    aux0 = method.init(system, tj, s0, dt)

    def body(carry, i):
        s, aux = carry
        s2, aux2, _ = method.step(system, tj + i.astype(dt.dtype) * dt, s, aux, dt)
        keep = i < r
        pick = lambda a, b: jnp.where(keep, a, b)  # noqa: E731
        return (jax.tree_util.tree_map(pick, s2, s), jax.tree_util.tree_map(pick, aux2, aux)), None

    (sk, auxk), _ = lax.scan(body, (s0, aux0), jnp.arange(c, dtype=jnp.int32))
    tk = t0 + k.astype(dt.dtype) * dt
    sk1, _, _ = method.step(system, tk, sk, auxk, dt)
    return interpolate(system, tk, dt, sk, sk1, t - tk)


class DenseOutput(eqx.Module):
    """What :meth:`jaxrot.Trajectory.evaluate` needs: the method, the system, checkpoint frames every
    ``c`` steps (``(K, ...)``, or ``(B, K, ...)`` for a batch), ``t0``, ``dt`` and the step count.

    Calling it with times ``t`` (a scalar or an array within ``[t0, t0 + n_steps dt]``) gives the
    states there, shape ``t.shape`` (after the batch axis, if any); differentiable in ``t`` and in the
    run's inputs.
    """

    method: Any
    system: Any
    checkpoints: State
    t0: jax.Array
    dt: jax.Array
    every: int = eqx.field(static=True)
    n_steps: int = eqx.field(static=True)

    @full_precision
    def __call__(self, t) -> State:
        t = jnp.asarray(t, self.dt.dtype)
        if not isinstance(t, jax.core.Tracer) and not isinstance(self.dt, jax.core.Tracer):
            lo, hi = float(self.t0), float(self.t0) + self.n_steps * float(self.dt)
            _check_in_span(np.asarray(t), lo, hi)
        return _evaluate(self, t)

    def _at(self, t) -> State:
        flat = t.reshape(-1)
        batched = self.checkpoints.R.ndim == 4
        stacked = batched and jnp.ndim(self.system.body.J) == 2

        def one(system, ckpt):
            f = lambda s: _state_at(self.method, system, ckpt, self.t0, self.dt, self.every, self.n_steps, s)  # noqa: E731
            return jax.vmap(f)(flat)

        out = jax.vmap(one, in_axes=(0 if stacked else None, 0))(self.system, self.checkpoints) if batched \
            else one(self.system, self.checkpoints)
        lead = out.R.shape[:1] if batched else ()
        return State(out.R.reshape(lead + t.shape + (3, 3)), out.Pi.reshape(lead + t.shape + (3,)))


class StepDenseOutput(eqx.Module):
    """The dense output of an error-controlled run: every accepted step's end time ``times``
    (``(n,)``, unused entries +inf after the last) and state, after the initial one, per body.

    Calling it with times ``t`` within the run's span interpolates within the step that brackets each
    (:func:`interpolate`); differentiable in ``t`` and in the run's inputs."""

    system: Any
    times: jax.Array
    states: State

    @full_precision
    def __call__(self, t) -> State:
        t = jnp.asarray(t, self.times.dtype)
        batched = self.states.R.ndim == 4
        stacked = batched and jnp.ndim(self.system.body.J) == 2
        if not isinstance(t, jax.core.Tracer) and not isinstance(self.times, jax.core.Tracer):
            times = np.asarray(self.times)
            lo, hi = times[..., 0].max(), np.where(np.isfinite(times), times, -np.inf).max(axis=-1).min()
            _check_in_span(np.asarray(t), lo, hi)
        return _evaluate(self, t)

    def _at(self, t) -> State:
        batched = self.states.R.ndim == 4
        stacked = batched and jnp.ndim(self.system.body.J) == 2
        flat = t.reshape(-1)

        def one(system, times, states):
            def at(s):
                k = jnp.clip(jnp.searchsorted(times, s, side="left") - 1, 0, times.shape[0] - 2)
                a, b = (jax.tree_util.tree_map(lambda x: x[i], states) for i in (k, k + 1))
                h = times[k + 1] - times[k]
                h = jnp.where(jnp.isfinite(h) & (h > 0), h, 1.0)
                return interpolate(system, times[k], h, a, b, s - times[k])
            return jax.vmap(at)(flat)

        out = jax.vmap(one, in_axes=(0 if stacked else None, 0, 0))(self.system, self.times, self.states) if batched \
            else one(self.system, self.times, self.states)
        lead = out.R.shape[:1] if batched else ()
        return State(out.R.reshape(lead + t.shape + (3, 3)), out.Pi.reshape(lead + t.shape + (3,)))


@eqx.filter_jit  # one compiled program per output shape (eager, the interpolation is dozens of dispatches)
def _evaluate(dense, t) -> State:
    return dense._at(t)
