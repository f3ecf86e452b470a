"""Dense output on SO(3): states between the steps of a run.

Between two step endpoints the state is the cubic Hermite interpolant on SO(3) of
:func:`jaxrot.integrators.dense_output.interpolate` (O(h^4) locally, so the dense output of a method of
order ``p <= 4`` converges at order ``p``). A method of higher order (:func:`polishes`) has its dense
output from one step of its own from the step's start to the query time instead: its own accuracy,
at the cost of one step per query.

What the loop collects for it: with constant steps, checkpoint frames every ``c`` steps (``c`` the
divisor of the step count nearest to its square root; memory bounded) — a query re-runs, from the
checkpoint before it, the steps up to the step that brackets it (the run's own frame of ``c`` steps,
:func:`jaxrot.driver.loop.masked_steps`, the steps past the query masked: reverse-differentiable),
takes one more step and interpolates
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

from ..geometry.state import State
from ..integrators.dense_output import DENSE_ORDER, interpolate, interpolate_momentum, method_step, momentum_rate, \
    polishes
from .loop import init_carry, masked_steps
from .precision import full_precision

__all__ = ["interpolate", "interpolate_momentum", "momentum_rate", "DenseOutput", "StepDenseOutput",
           "StoppedDenseOutput", "checkpoint_interval", "DENSE_ORDER", "polishes", "method_step"]

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
    """One body's state at time ``t`` from its checkpoint frames ``ckpt`` (every ``c`` steps): the run's
    own loop (:func:`~jaxrot.driver.loop.masked_steps`, the steps at the run's times ``t0 + k dt``) from
    the checkpoint before ``t`` to the step that brackets it."""
    k = jnp.clip(jnp.floor((t - t0) / dt).astype(jnp.int32), 0, n_steps - 1)
    j = k // c
    s0 = jax.tree_util.tree_map(lambda x: x[j], ckpt)
    carry = init_carry(method, system, s0, dt, t0, k0=j * c)
    (sk, auxk, *_), _ = masked_steps(method, system, carry, dt, t0, c, go=lambda ca: ca[2] < k)
    tk = t0 + k.astype(dt.dtype) * dt
    advance = method_step(method)
    if advance is not None:  # a step of the method itself to t: its own accuracy, not the interpolant's
        return advance(system, tk, sk, t - tk)
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

    def _at(self, t, upto=None) -> State:
        """The states at ``t``; ``upto``: a time per body (``()`` or ``(B,)``) the queries are capped at."""
        flat = t.reshape(-1)
        batched = self.checkpoints.R.ndim == 4
        stacked = batched and jnp.ndim(self.system.body.J) == 2
        upto = jnp.full(self.checkpoints.R.shape[:-3], jnp.inf, flat.dtype) if upto is None else upto

        def one(system, ckpt, cap):
            f = lambda s: _state_at(self.method, system, ckpt, self.t0, self.dt, self.every, self.n_steps,  # noqa: E731
                                    jnp.minimum(s, cap))
            return jax.vmap(f)(flat)

        out = jax.vmap(one, in_axes=(0 if stacked else None, 0, 0))(self.system, self.checkpoints, upto) if batched \
            else one(self.system, self.checkpoints, upto)
        lead = out.R.shape[:1] if batched else ()
        return State(out.R.reshape(lead + t.shape + (3, 3)), out.Pi.reshape(lead + t.shape + (3,)))


class StepDenseOutput(eqx.Module):
    """The dense output of an error-controlled run: every accepted step's end time ``times``
    (``(n,)``, unused entries +inf after the last) and state, after the initial one, per body.

    Calling it with times ``t`` within the run's span interpolates within the step that brackets each
    (:func:`interpolate`), or, for a ``method`` of order above :data:`DENSE_ORDER`, takes one step of the
    method from the step's start to ``t``; differentiable in ``t`` and in the run's inputs."""

    system: Any
    times: jax.Array
    states: State
    method: Any = None

    @full_precision
    def __call__(self, t) -> State:
        t = jnp.asarray(t, self.times.dtype)
        if not isinstance(t, jax.core.Tracer) and not isinstance(self.times, jax.core.Tracer):
            times = np.asarray(self.times)
            lo, hi = times[..., 0].max(), np.where(np.isfinite(times), times, -np.inf).max(axis=-1).min()
            _check_in_span(np.asarray(t), lo, hi)
        return _evaluate(self, t)

    def _at(self, t, upto=None) -> State:
        """The states at ``t``; ``upto``: a time per body (``()`` or ``(B,)``) the queries are capped at."""
        batched = self.states.R.ndim == 4
        stacked = batched and jnp.ndim(self.system.body.J) == 2
        flat = t.reshape(-1)
        upto = jnp.full(self.times.shape[:-1], jnp.inf, flat.dtype) if upto is None else upto
        advance = method_step(self.method)

        def one(system, times, states, cap):
            def at(s):
                s = jnp.minimum(s, cap)
                k = jnp.clip(jnp.searchsorted(times, s, side="left") - 1, 0, times.shape[0] - 2)
                a, b = (jax.tree_util.tree_map(lambda x: x[i], states) for i in (k, k + 1))
                if advance is not None:
                    return advance(system, times[k], a, s - times[k])
                h = times[k + 1] - times[k]
                h = jnp.where(jnp.isfinite(h) & (h > 0), h, 1.0)
                return interpolate(system, times[k], h, a, b, s - times[k])
            return jax.vmap(at)(flat)

        out = jax.vmap(one, in_axes=(0 if stacked else None, 0, 0, 0))(self.system, self.times, self.states, upto) \
            if batched else one(self.system, self.times, self.states, upto)
        lead = out.R.shape[:1] if batched else ()
        return State(out.R.reshape(lead + t.shape + (3, 3)), out.Pi.reshape(lead + t.shape + (3,)))


class StoppedDenseOutput(eqx.Module):
    """The dense output of a run with a terminal event: the run's own (``inner``) up to each body's event
    time ``stop`` (``()`` or ``(B,)``; non-finite where the body found none), and the event's state
    ``state`` after it, as the saved frames hold it; queries within ``[t0, t_end]``, the span asked for."""

    inner: Any
    stop: jax.Array
    state: State
    t_end: jax.Array

    @full_precision
    def __call__(self, t) -> State:
        t = jnp.asarray(t, self.stop.dtype)
        if not any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves((t, self))):
            inner = self.inner
            if isinstance(inner, DenseOutput):
                lo = float(inner.t0)
                last = lo + inner.n_steps * float(inner.dt)
            else:
                times = np.asarray(inner.times)
                lo, last = float(times[..., 0].max()), np.where(np.isfinite(times), times, -np.inf).max(axis=-1)
            # a body that found its event reaches the span's end (its state held); one that did not, as far
            # as its steps went (short of it after a failure)
            reached = np.where(np.isfinite(np.asarray(self.stop)), float(self.t_end), last)
            _check_in_span(np.asarray(t), lo, float(np.min(reached)))
        return _evaluate(self, t)

    def _at(self, t) -> State:
        stop = jnp.where(jnp.isfinite(self.stop), self.stop, jnp.inf)
        out = self.inner._at(t, stop)  # (capped at the event: no query past the steps a body took)
        after = t.reshape(-1) >= stop[..., None]  # (..., T)
        after = after.reshape(after.shape[:-1] + t.shape)
        frozen = State(jnp.expand_dims(self.state.R, tuple(range(stop.ndim, stop.ndim + t.ndim))),
                       jnp.expand_dims(self.state.Pi, tuple(range(stop.ndim, stop.ndim + t.ndim))))
        return State(jnp.where(after[..., None, None], frozen.R, out.R), jnp.where(after[..., None], frozen.Pi, out.Pi))


@eqx.filter_jit  # one compiled program per output shape (eager, the interpolation is dozens of dispatches)
def _evaluate(dense, t) -> State:
    return dense._at(t)
