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

Bounded memory: a run with dense output (``SaveAt(ts=...)`` or ``SaveAt(dense=True)`` with fixed
steps) keeps checkpoint frames every ``c`` steps (``c`` the divisor of the step count nearest to its
square root); a query re-runs, from the checkpoint before it, the steps up to the step that brackets
it (a ``lax.scan`` of fixed length ``c`` with masking, so reverse-differentiable), takes one more
step and interpolates. A method's auxiliary state is rebuilt from the checkpoint (``method.init``):
exact for one-step methods; multistep methods restart there.

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

__all__ = ["interpolate", "DenseOutput", "checkpoint_interval"]


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
    d0 = jnp.cross(s0.Pi, w0) + body_torque(system, t, s0.R, s0.Pi)
    d1 = jnp.cross(s1.Pi, w1) + body_torque(system, t + h, s1.R, s1.Pi)
    a, b, c, d = _hermite(s / h)
    xi = (b * h) * w0 + c * xi1 + (d * h) * m1
    R = so3.mm(s0.R, so3.exp(xi))
    Pi = a * s0.Pi + (b * h) * d0 + c * s1.Pi + (d * h) * d1
    return State(R, Pi)


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
            tn = np.asarray(t)
            if np.any(~np.isfinite(tn)) or np.any(tn < lo - 1e-12 * max(1.0, abs(lo))) or \
                    np.any(tn > hi + 1e-9 * max(1.0, abs(hi))):
                raise ValueError(f"t must lie within the run's span [{lo}, {hi}], got {tn}")
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


def _times(saveat, t0: float, t_end: float):
    """The output times of ``SaveAt(t0, t1, ts)``: ``[t0] + ts + [t_end]`` (as flagged), checked."""
    out = []
    if saveat.ts is not None:
        if isinstance(saveat.ts, jax.core.Tracer):
            raise ValueError("SaveAt(ts=...) with fixed steps needs concrete times")
        ts = np.asarray(saveat.ts, np.float64).reshape(-1)
        if ts.size == 0 or not np.all(np.isfinite(ts)) or np.any(np.diff(ts) <= 0):
            raise ValueError("SaveAt.ts must be finite and increasing")
        tol = 1e-9 * max(1.0, abs(t0), abs(t_end))
        if ts[0] < t0 - tol or ts[-1] > t_end + tol:
            raise ValueError(f"SaveAt.ts must lie within the span [{t0}, {t_end}], got [{ts[0]}, {ts[-1]}]")
        out = list(np.clip(ts, t0, t_end))
    if saveat.t0 and not (out and np.isclose(out[0], t0, rtol=0, atol=1e-12 * max(1.0, abs(t0)))):
        out = [t0] + out
    if saveat.t1 and not (out and np.isclose(out[-1], t_end, rtol=1e-12, atol=0)):
        out = out + [t_end]
    return np.asarray(out, np.float64)


def dense_run(simulate, method, problem, dt, n_steps, saveat, *, t0, state0, executor, throw, **kw):
    """A fixed-step run with ``SaveAt(ts=...)`` and/or ``SaveAt(dense=True)``: checkpoint frames every
    :func:`checkpoint_interval` steps through ``simulate`` (the chosen executor), then the states at
    ``ts`` from :class:`DenseOutput`. The trajectory's ``stats`` are the checkpoint intervals'; with
    ``dense=True`` it carries the :class:`DenseOutput` (``traj.evaluate``), and without ``ts`` its frames
    are the checkpoint frames (``t0`` first if ``SaveAt.t0``)."""
    from ..integrators import get as get_method
    from .results import Trajectory
    from .saveat import SaveAt

    if not (isinstance(t0, (int, float, np.floating)) or (hasattr(t0, "shape") and jnp.ndim(t0) == 0)):
        raise ValueError(f"t0 must be a scalar with SaveAt(ts=...) or SaveAt(dense=True), got {t0!r}")
    c = checkpoint_interval(n_steps)
    run = simulate(method, problem, dt, n_steps, t0=t0, state0=state0, saveat=SaveAt(every=c), executor=executor,
                   throw=throw, **kw)
    dtype = run.states.R.dtype
    dense = DenseOutput(get_method(method) if isinstance(method, str) else method, run.system, run.states,
                        jnp.asarray(t0, dtype), jnp.asarray(dt, dtype), c, int(n_steps))
    if saveat.ts is None:
        out = run if saveat.t0 else Trajectory(
            run.ts[..., 1:], jax.tree_util.tree_map(lambda x: x[..., 1:, :] if x.ndim == run.states.Pi.ndim
                                                    else x[..., 1:, :, :], run.states),
            run.stats, run.failed_step, run.result, run.controller, run.system)
    else:
        if isinstance(dt, jax.core.Tracer) or isinstance(t0, jax.core.Tracer):
            raise ValueError("SaveAt(ts=...) with fixed steps needs a concrete dt and t0")
        times = _times(saveat, float(t0), float(t0) + int(n_steps) * float(dt))
        ts = jnp.asarray(times, dtype)
        states = dense(ts)
        out = Trajectory(jnp.broadcast_to(ts, run.ts.shape[:-1] + ts.shape), states, run.stats, run.failed_step,
                         run.result, run.controller, run.system)
    object.__setattr__(out, "provenance", run.provenance)
    if saveat.dense:
        object.__setattr__(out, "dense", dense)
    return out
