"""Events: the first time a scalar function of the state changes sign, checked inside the loop after
every accepted step and located on that step's dense output after the loop.

``Event(cond_fn, direction=None, terminal=True)``; ``cond_fn(t, state, args)`` returns a scalar
(``args`` is None: close over what you need). The loop carries the last value of ``cond_fn`` and, at
the first accepted step across which it changes sign (from < 0 to >= 0 for ``direction=+1``, from
> 0 to <= 0 for ``-1``, either for None), the step's endpoints. A terminal event ends that body's
loop. After the loop the time is located within that step (:func:`locate`: bisection on the step's
dense output, Newton steps, polished on the method's own steps above :data:`DENSE_ORDER`, with the
implicit function theorem's derivatives in forward and reverse mode alike), by the function defined
once in :func:`jaxrot.integrators.dense_output.locate`, which the fused kernels' location is
generated from. See docs/user_guide/saveat_events.md.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import equinox as eqx
import jax
import jax.numpy as jnp

from ..closures import hoist
from ..geometry.state import State, tree_where
from ..integrators import dense_output
from ..integrators.dense_output import BISECTIONS, DENSE_ORDER, POLISH, crossed, method_step, polishes

__all__ = ["Event", "EventCarry", "check_event", "event_start", "event_update", "locate", "method_step",
           "polishes", "BISECTIONS", "DENSE_ORDER", "POLISH"]


class Event(eqx.Module):
    """A sign change of ``cond_fn(t, state, args)`` (a scalar; ``args`` is None).

    Args:
      cond_fn: the event function of the time and one body's :class:`~jaxrot.State`.
      direction: +1 (upward crossings only), -1 (downward) or None (both).
      terminal: end each body's run at its event (its later frames repeat the event state).

    Example::

        flip = jaxrot.Event(lambda t, s, args: s.R[1, 1], direction=-1)
        traj = jaxrot.simulate("buss4", problem, 1e-3, 8000, event=flip)
        traj.event_time, traj.event_state
    """

    cond_fn: Callable
    direction: int | None = eqx.field(static=True, default=None)
    terminal: bool = eqx.field(static=True, default=True)

    def __init__(self, cond_fn: Callable, direction: int | None = None, terminal: bool = True):
        if callable(cond_fn):  # (a non-callable: __check_init__ says so)
            _takes_three(cond_fn)
        # a condition closing over a value that jax.grad/jit traces (a threshold being differentiated,
        # say): that value becomes a leaf of the event, so derivatives reach it
        self.cond_fn = hoist(cond_fn)
        self.direction = direction
        self.terminal = terminal

    def __check_init__(self):
        if not callable(self.cond_fn):
            raise TypeError(f"Event.cond_fn must be callable, got {self.cond_fn!r}")
        if self.direction not in (None, 1, -1):
            raise ValueError(f"Event.direction must be +1, -1 or None, got {self.direction!r}")
        if not isinstance(self.terminal, bool):
            raise TypeError(f"Event.terminal must be a bool, got {self.terminal!r}")


def _takes_three(fn) -> None:
    """A ``TypeError`` where ``fn``'s signature cannot take ``(t, state, args)`` (nothing where it has no
    signature to read: a builtin is checked by evaluating it)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(0.0, None, None)
    except TypeError:
        raise TypeError(f"Event.cond_fn must take (t, state, args); {getattr(fn, '__name__', 'it')} has the "
                        f"signature {sig}") from None


def check_event(event, state0: State, dtype) -> None:
    """Refuse, before anything is traced, an event that is not an :class:`Event`, whose ``cond_fn``
    does not take ``(t, state, args)`` or does not return one real number."""
    if not isinstance(event, Event):
        raise TypeError(f"event must be a jaxrot.Event, got {event!r}")
    _takes_three(event.cond_fn)  # (made otherwise than by Event(...): by tree_unflatten, say)
    one = State(state0.R[0], state0.Pi[0]) if state0.R.ndim == 3 else state0
    try:
        out = jax.eval_shape(lambda t, s: event.cond_fn(t, s, None), jax.ShapeDtypeStruct((), dtype), one)
    except Exception as err:  # noqa: BLE001 - any failure of the user's function, said once, with its cause
        raise ValueError(f"Event.cond_fn(t, state, None) failed on one body's state: {type(err).__name__}: {err}") \
            from err
    if not hasattr(out, "shape") or out.shape != () or not jnp.issubdtype(out.dtype, jnp.floating):
        what = f"shape {out.shape} of {out.dtype}" if hasattr(out, "shape") else type(out).__name__
        raise ValueError(f"Event.cond_fn must return one real number (a scalar) for one body's state, got {what}; "
                         "for a batch, simulate maps it over the bodies")


class EventCarry(eqx.Module):
    """What the loop carries for an event: the last value ``g``, whether the crossing was ``found``,
    and the crossing step's start time, length and endpoints."""

    g: jax.Array
    found: jax.Array
    t_a: jax.Array
    h_a: jax.Array
    s_a: State
    s_b: State


def _g(event, t, state, dtype):
    return jnp.asarray(event.cond_fn(t, state, None), dtype)


def event_start(event: Event, t0, state0: State) -> EventCarry:
    dtype = state0.Pi.dtype
    z = jnp.zeros((), dtype)
    return EventCarry(_g(event, t0, state0, dtype), jnp.asarray(False), t0 + z, z, state0, state0)


def event_update(event: Event, ec: EventCarry, t, h, s0: State, s1: State, accepted=True, t_end=None) -> EventCarry:
    """After an attempted step ``[t, t + h]`` from ``s0`` to ``s1``: the crossing recorded if it is the
    first, the last value moved on if the step was ``accepted``. ``t_end``: the time the loop puts the
    step's end at, where that is not ``t + h`` in floating point (a step that lands on a save time ends
    at the save time; the fused kernels evaluate the condition there too)."""
    g1 = _g(event, t + h if t_end is None else t_end, s1, ec.g.dtype)
    new = accepted & (~ec.found) & crossed(event.direction, ec.g, g1)

    return EventCarry(jnp.where(accepted, g1, ec.g), ec.found | new, jnp.where(new, t, ec.t_a),
                      jnp.where(new, h, ec.h_a), tree_where(new, s0, ec.s_a), tree_where(new, s1, ec.s_b))


def stopped(event: Event | None, ec) -> jax.Array:
    """Whether a terminal event has ended this body's run."""
    return jnp.asarray(False) if event is None or not event.terminal else ec.found


def locate(event: Event, system, ec: EventCarry, advance=None) -> tuple[Any, State]:
    """``(event time, event state)`` of one body (NaN where none was found), by bisection on the
    crossing step's dense output and one Newton step (implicit-function derivatives), then, with
    ``advance`` (:func:`method_step`), :data:`POLISH` Newton steps on the method's own steps
    (:func:`jaxrot.integrators.dense_output.locate`)."""
    return dense_output.locate(lambda t, s: event.cond_fn(t, s, None), system, ec.t_a, ec.h_a, ec.s_a, ec.s_b,
                               ec.found, advance)


def freeze_after(ts, states: State, event_time, event_state: State) -> State:
    """One body's frames after its event time replaced by its event state (a terminal event)."""
    after = (ts > event_time) & jnp.isfinite(event_time)
    return State(jnp.where(after[:, None, None], event_state.R, states.R),
                 jnp.where(after[:, None], event_state.Pi, states.Pi))
