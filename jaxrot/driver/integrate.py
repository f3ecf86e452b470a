"""From a checked run to its :class:`~jaxrot.Trajectory`: the loop is run by the chosen executor, and
what the loop collected (:class:`~jaxrot.driver.layout.Frames`) becomes the trajectory here, in one
place: events located on their step's dense output, a terminal event's later frames set to the event
state, outputs at ``SaveAt.ts`` taken from the dense output, the frames ``SaveAt`` did not ask for
dropped, and the provenance attached.
"""

from __future__ import annotations

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp

from ..geometry.state import State
from .dense import DenseOutput, StepDenseOutput, StoppedDenseOutput
from .adjoint import reverse_only
from .events import freeze_after, locate, method_step
from .forward_vjp import by_jacobian
from .failures import result_of
from .layout import Frames, LocatedEvent
from .results import AdaptiveStats, Provenance, Trajectory, built

__all__ = ["Finish", "trajectory", "trajectory_of"]


def _per_body(fn, batched: bool, stacked: bool, system, *trees):
    if not batched:
        return fn(system, *trees)
    return jax.vmap(fn, in_axes=(0 if stacked else None,) + (0,) * len(trees))(system, *trees)


class _Static:
    """The array-free part of a method or an event as a static argument of a compiled function: matched by value
    where it can be hashed (every registered method), by identity where it cannot."""

    __slots__ = ("method",)

    def __init__(self, method):
        self.method = method

    def __hash__(self):
        try:
            return hash(self.method)
        except TypeError:
            return id(self.method)

    def __eq__(self, other):
        if not isinstance(other, _Static):
            return NotImplemented
        if self.method is other.method:
            return True
        try:
            return bool(self.method == other.method)
        except Exception:  # noqa: BLE001 - an array field: not comparable by value
            return False


def _events(event, method, batched, stacked, system, ts, states, ev):
    """Event times and states per body (located on the crossing step's dense output and polished with
    ``method``'s own steps, or as the executor located them); a terminal event's later frames set to
    its state. The method's arrays (a user's method may hold some, or tracers) are arguments."""
    arrays, rest = eqx.partition(method, eqx.is_array)
    ev_arrays, ev_rest = eqx.partition(event, eqx.is_array)  # (a condition's closed-over traced values)
    reverse = reverse_only(jax.tree_util.tree_leaves((ev_arrays, arrays, system, ev)))
    return _events_compiled(_Static(ev_rest), _Static(rest), batched, stacked, reverse, ev_arrays, arrays, system, ts,
                            states, ev)


def _located(args, event_rest, rest):
    ev_arrays, arrays, system, ev = args
    event = eqx.combine(ev_arrays, event_rest.method)
    ev = dataclasses.replace(ev, found=ev.found > 0.5) if jnp.issubdtype(ev.found.dtype, jnp.floating) else ev
    return locate(event, system, ev, method_step(eqx.combine(arrays, rest.method)))


#: perturbed numbers up to which an event's location is differentiated by forward tangents in reverse
#: mode (the crossing step's endpoints are 24 of them; the location's cost is a few steps)
EVENT_DIRECTIONS = 64


@functools.partial(jax.jit, static_argnames=("event_rest", "rest", "batched", "stacked", "reverse"))
def _events_compiled(event_rest, rest, batched, stacked, reverse, ev_arrays, arrays, system, ts, states, ev):
    event = eqx.combine(ev_arrays, event_rest.method)
    at = functools.partial(_located, event_rest=event_rest, rest=rest)

    def one(system, ts, states, ev):
        if isinstance(ev, LocatedEvent):
            t_ev, s_ev = ev.time, ev.state
        elif reverse:  # jax.grad: the location's derivatives by forward tangents (one program, no transpose)
            # (the crossing's flag as a number: a flag computed from perturbed values reaches a custom
            # derivative rule as perturbed, which only inexact arguments may be)
            ev = dataclasses.replace(ev, found=ev.found.astype(ev.t_a.dtype))
            t_ev, s_ev = by_jacobian(at, (ev_arrays, arrays, system, ev), 16, most=EVENT_DIRECTIONS)
        else:
            t_ev, s_ev = at((ev_arrays, arrays, system, ev))
        if event.terminal:
            states = freeze_after(ts, states, t_ev, s_ev)
        return t_ev, s_ev, states

    return _per_body(one, batched, stacked, system, ts, states, ev)


@jax.jit
def _ends(ts, x: State):
    """The first and last frames (of the dense output's checkpoints)."""
    pick = jnp.array([0, ts.shape[-1] - 1])
    return ts[..., pick], State(x.R[..., pick, :, :], x.Pi[..., pick, :])


@functools.partial(jax.jit, static_argnames=("keep_first", "keep_last"))
def _drop(ts, x: State, keep_first: bool, keep_last: bool):
    """The frames ``SaveAt`` kept (the first and last are the loop's), in one compiled call rather than
    three eager slices, whose dispatch is a noticeable part of a short run (docs/benchmarks.md)."""
    lo, hi = (0 if keep_first else 1), (None if keep_last else -1)
    return ts[..., lo:hi], State(x.R[..., lo:hi, :, :], x.Pi[..., lo:hi, :])


class Finish:
    """How the frames of a run become its trajectory: what ``SaveAt`` kept, and where outputs come from.

    ``ts_out``: times to take from the dense output (constant steps with ``SaveAt(ts=...)``) or None;
    ``dense_fixed``: ``(method, t0, dt, checkpoint interval, n_steps)`` of a constant-step run's dense
    output, or None; ``keep_first``/``keep_last``: whether the loop's first (t0) and last frames are
    kept; ``frames_from``: ``"loop"`` (the loop's frames), ``"steps"`` or ``"dense"`` (an
    error-controlled run's kept steps); ``n_steps``: a constant-step run's count; ``method``: the
    integrator or pair whose own steps polish an event's time (None: the dense output's root); ``t_end``:
    the end of the span asked for (a run stopped by a terminal event has its dense output up to there);
    ``ends_only``: the loop's frames are the dense output's checkpoints, and only its first and last are
    the run's (constant steps with ``SaveAt(dense=True)`` alone)."""

    def __init__(self, *, keep_first=True, keep_last=True, ts_out=None, dense_fixed=None, frames_from="loop",
                 want_dense=False, n_steps=None, method=None, t_end=None, ends_only=False):
        self.method, self.t_end, self.ends_only = method, t_end, ends_only
        self.keep_first, self.keep_last, self.ts_out = keep_first, keep_last, ts_out
        self.dense_fixed, self.frames_from, self.want_dense, self.n_steps = dense_fixed, frames_from, want_dense, n_steps


def trajectory(fr: Frames, finish: Finish, *, system, event, batched: bool, stacked: bool,
               provenance: Provenance, extra_counts: dict | None = None) -> Trajectory:
    """The :class:`~jaxrot.Trajectory` of a run's frames (see the module docstring)."""
    ts, states, stats = fr.ts, fr.states, fr.stats
    event_time = event_state = None
    if event is not None:
        event_time, event_state, states = _events(event, finish.method, batched, stacked, system, ts, states,
                                                  fr.event)
    dense = None
    if finish.dense_fixed is not None:
        method, t0, dt, c, n = finish.dense_fixed
        dense = DenseOutput(method, system, states, t0, dt, c, n)
    elif fr.dense is not None and fr.dense[1] is not None:
        dense = StepDenseOutput(system, *fr.dense[1], method=finish.method)
    if dense is not None and event is not None and event.terminal:  # the event's state after it, as the frames
        dense = StoppedDenseOutput(dense, event_time, event_state, finish.t_end)
    if finish.ts_out is not None:  # constant steps: the outputs from the dense output
        out = dense(finish.ts_out)
        if event is not None and event.terminal:
            out = (jax.vmap(freeze_after, in_axes=(None, 0, 0, 0)) if batched else freeze_after)(
                finish.ts_out, out, event_time, event_state)
        ts = jnp.broadcast_to(finish.ts_out, ts.shape[:-1] + finish.ts_out.shape)
        states = out
    elif finish.frames_from == "steps":  # an error-controlled run's every k-th step, after the initial state
        times, kept = fr.dense[0]
        ts = jnp.concatenate([ts[..., :1], times], axis=-1)
        states = State(jnp.concatenate([states.R[..., :1, :, :], kept.R], axis=-3),
                       jnp.concatenate([states.Pi[..., :1, :], kept.Pi], axis=-2))
        if event is not None and event.terminal:
            states = (jax.vmap(freeze_after) if batched else freeze_after)(ts, states, event_time, event_state)
    if finish.ends_only:
        ts, states = _ends(ts, states)
    if finish.ts_out is None and not (finish.keep_first and finish.keep_last):
        ts, states = _drop(ts, states, keep_first=finish.keep_first, keep_last=finish.keep_last)
    counts = fr.counts
    if counts is None:  # the fused kernels: every step taken
        shape = fr.failed.shape
        counts = (jnp.full(shape, finish.n_steps, jnp.int32), jnp.zeros(shape, jnp.int32), None)
    controller = built(AdaptiveStats, None, *counts, *_extra(extra_counts))
    return built(Trajectory, provenance, ts, states, stats, fr.failed, result_of(fr.reason), controller, system,
                 dense if finish.want_dense else None, event_time, event_state)


def _extra(extra_counts: dict | None) -> tuple:
    """``AdaptiveStats``' global-error fields, in order (None where not given)."""
    extra = extra_counts or {}
    return tuple(extra.get(k) for k in ("global_error", "tolerance", "n_calibration"))


def trajectory_of(finish: Finish, *, system, event, batched: bool, stacked: bool, provenance: Provenance):
    """:func:`trajectory` with these arguments, as a function of the frames (for a call repeated as it
    is). Where the trajectory's leaves are the frames' and the system's, unchanged and in order (a run
    that keeps the loop's frames as they are), it is unflattened from them with the structure of the
    first one: a small run spends a noticeable part of its time building the trajectory."""
    def general(fr):
        return trajectory(fr, finish, system=system, event=event, batched=batched, stacked=stacked,
                          provenance=provenance)

    system_leaves = jax.tree_util.tree_leaves(system)
    known: dict = {}  # the frames' structure -> the trajectory's, or None where the leaves are not passed on

    def build(fr):
        leaves, structure = jax.tree_util.tree_flatten(fr)
        hit = known.get(structure, False)
        if hit:
            return jax.tree_util.tree_unflatten(hit, leaves + system_leaves)
        traj = general(fr)
        if hit is False:
            out, out_structure = jax.tree_util.tree_flatten(traj)
            same = len(out) == len(leaves) + len(system_leaves) and all(
                a is b for a, b in zip(out, leaves + system_leaves))
            known[structure] = out_structure if same else None
        return traj

    def from_leaves(leaves: list, structure):
        """The trajectory of the frames with these leaves and this structure (a compiled call's outputs,
        :class:`~jaxrot.driver.lean_jit.Bound`), without building the frames where it need not."""
        hit = known.get(structure, False)
        if hit:
            return jax.tree_util.tree_unflatten(hit, leaves + system_leaves)
        return build(jax.tree_util.tree_unflatten(structure, leaves))

    build.from_leaves = from_leaves
    return build
