"""Events: the first time a scalar function of the state changes sign, located on the dense output.

``Event(cond_fn, direction=None, terminal=True)``; ``cond_fn(t, state, args)`` returns a scalar
(``args`` is None: the function closes over whatever it needs). A fixed-step run with ``event=``
evaluates ``cond_fn`` after every step; at the first step across which it changes sign (from < 0 to
>= 0 for ``direction=+1``, from > 0 to <= 0 for ``-1``, either for None) the time is located within
the step on the dense output (:func:`jaxrot.driver.dense.interpolate`, order 4) by bisection to the
last bit of the step followed by a Newton step,

    s* = s_b - g(s_b) / g'(s_b),   g(s) = cond_fn(t_k + s, interpolate(s)),

where ``s_b`` carries no derivative: the derivative of ``s*`` is then that of the implicit function
theorem, ``ds*/dtheta = -(dg/dtheta) / (dg/ds)`` at the root, in forward and reverse mode alike.

The run's :class:`~jaxrot.Trajectory` carries ``event_time`` (NaN where no sign change was found)
and ``event_state`` (NaN likewise), one per body. A terminal event stops each body at its own
time: its saved frames after the event repeat the event state (the times ``ts`` are unchanged),
while the other bodies of a batch go on. Cost: one more pass over the steps (a ``lax.scan``,
vmapped over bodies) plus 64 interpolations per body.

Example::

    flip = jaxrot.Event(lambda t, s, args: s.R[1, 1], direction=-1)
    traj = jaxrot.simulate("buss4", problem, 1e-3, 5000, event=flip)
    traj.event_time
"""

from __future__ import annotations

from typing import Any, Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from ..geometry.state import State
from .dense import interpolate

__all__ = ["Event", "locate_events"]

_BISECTIONS = 64


class Event(eqx.Module):
    """A sign change of ``cond_fn(t, state, args)`` (a scalar; ``args`` is None).

    Args:
      cond_fn: the event function.
      direction: +1 (upward crossings only), -1 (downward) or None (both).
      terminal: stop each body at its event (later frames repeat the event state).

    Example::

        jaxrot.Event(lambda t, s, args: s.R[1, 1], direction=-1)
    """

    cond_fn: Callable
    direction: int | None = eqx.field(static=True, default=None)
    terminal: bool = eqx.field(static=True, default=True)

    def __check_init__(self):
        if not callable(self.cond_fn):
            raise TypeError(f"Event.cond_fn must be callable, got {self.cond_fn!r}")
        if self.direction not in (None, 1, -1):
            raise ValueError(f"Event.direction must be +1, -1 or None, got {self.direction!r}")
        if not isinstance(self.terminal, bool):
            raise TypeError(f"Event.terminal must be a bool, got {self.terminal!r}")


def _crossed(event, ga, gb):
    up = (ga < 0) & (gb >= 0)
    down = (ga > 0) & (gb <= 0)
    return up if event.direction == 1 else down if event.direction == -1 else up | down


def _scan_one(event, method, system, state0, t0, dt, n_steps: int):
    """First crossing of one body: ``(found, k, state at step k, state at step k + 1)``."""
    g0 = event.cond_fn(t0, state0, None)

    def body(c, i):
        s, aux, g, found, k, sa, sb = c
        t = t0 + i.astype(dt.dtype) * dt
        s2, aux2, _ = method.step(system, t, s, aux, dt)
        g2 = event.cond_fn(t + dt, s2, None)
        new = (~found) & _crossed(event, g, g2)
        pick = lambda a, b: jnp.where(new, a, b)  # noqa: E731
        sa = jax.tree_util.tree_map(pick, s, sa)
        sb = jax.tree_util.tree_map(pick, s2, sb)
        return (s2, aux2, g2, found | new, jnp.where(new, i, k), sa, sb), None

    c0 = (state0, method.init(system, t0, state0, dt), g0, jnp.asarray(False), jnp.asarray(0, jnp.int32),
          state0, state0)
    (_, _, _, found, k, sa, sb), _ = lax.scan(body, c0, jnp.arange(n_steps, dtype=jnp.int32))
    return found, k, sa, sb


def _root_one(event, system, t0, dt, found, k, sa: State, sb: State):
    """Event time and state within the bracketing step ``[t_k, t_k + dt]`` (IFT derivatives)."""
    tk = t0 + k.astype(dt.dtype) * dt

    def g(s):
        return event.cond_fn(tk + s, interpolate(system, tk, dt, sa, sb, s), None)

    ga = lax.stop_gradient(g(jnp.zeros_like(dt)))

    def bisect(c, _):
        lo, hi = c
        mid = 0.5 * (lo + hi)
        same = jnp.sign(lax.stop_gradient(g(mid))) == jnp.sign(ga)
        return (jnp.where(same, mid, lo), jnp.where(same, hi, mid)), None

    h = lax.stop_gradient(dt)
    (lo, hi), _ = lax.scan(bisect, (jnp.zeros_like(h), h), None, length=_BISECTIONS)
    sb_ = lax.stop_gradient(0.5 * (lo + hi))
    gv, gs = jax.value_and_grad(g)(sb_)
    ok = found & (gs != 0) & jnp.isfinite(gs)
    s = sb_ - jnp.where(ok, gv, 0.0) / jnp.where(ok, gs, 1.0)
    t_ev = jnp.where(found, tk + s, jnp.nan)
    st = interpolate(system, tk, dt, sa, sb, s)
    st = jax.tree_util.tree_map(lambda x: jnp.where(found, x, jnp.nan), st)
    return t_ev, st


def locate_events(event: Event, method, system, state0: State, t0, dt, n_steps: int) -> tuple[Any, State]:
    """``(event_time, event_state)`` per body of a fixed-step run (NaN where none was found)."""
    dtype = state0.R.dtype
    t0, dt = jnp.asarray(t0, dtype), jnp.asarray(dt, dtype)

    def one(system, s0):
        found, k, sa, sb = _scan_one(event, method, system, s0, t0, dt, int(n_steps))
        return _root_one(event, system, t0, dt, found, k, sa, sb)

    if state0.R.ndim == 3:
        stacked = jnp.ndim(system.body.J) == 2
        return jax.vmap(one, in_axes=(0 if stacked else None, 0))(system, state0)
    return one(system, state0)


def freeze_after(ts, states: State, event_time, event_state: State) -> State:
    """Frames after each body's event time replaced by its event state (terminal events)."""
    batched = states.R.ndim == 4
    et = event_time[..., None] if batched else event_time
    after = (ts > et) & jnp.isfinite(et)  # (B, n) or (n,)
    R = jnp.where(after[..., None, None], (event_state.R[:, None] if batched else event_state.R), states.R)
    Pi = jnp.where(after[..., None], (event_state.Pi[:, None] if batched else event_state.Pi), states.Pi)
    return State(R, Pi)
