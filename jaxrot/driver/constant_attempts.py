"""Constant steps in the loop of attempts (:mod:`jaxrot.driver.attempts`): a run a terminal event may
end, each step kept, a frame every ``save_every`` steps; the same step body as a scanned run
(:func:`~jaxrot.driver.loop.masked_steps`), so the same states, times and statistics."""

from __future__ import annotations

import functools

import jax.numpy as jnp

from .adjoint import ForwardMode
from .attempts import attempts_end, attempts_start, run_through
from .forward_vjp import by_jacobian
from ..geometry.state import tree_where
from .layout import Frames, assemble
from .loop import FRAME_NUMBERS

#: constant steps a turn of the loop of attempts where only the final state is kept
WHILE_GROUP = 8


def constant_frames(args, n_steps: int, save_every: int, final_only: bool, adjoint, reverse: bool = False) -> Frames:
    """One body's constant steps in the loop of attempts, every step kept (a terminal event ends it),
    ``args = (method, system, state0, dt, t0, monitor, event)``: a frame every ``save_every`` steps,
    or only the final state. ``reverse`` (``jax.grad`` only): differentiated by forward tangents of the
    loop as a plain while loop (:func:`~jaxrot.driver.forward_vjp.by_jacobian`) where the numbers
    perturbed are few, through ``adjoint``'s loop otherwise (taking the same steps again)."""
    if reverse:
        run = functools.partial(constant_frames, n_steps=n_steps, save_every=save_every, final_only=final_only)
        frames = 1 if final_only else n_steps // save_every
        return by_jacobian(functools.partial(run, adjoint=ForwardMode()), args, frames * FRAME_NUMBERS,
                           reverse=functools.partial(run, adjoint=adjoint))
    method, system, state0, dt, t0, monitor, event = args
    per_frame = n_steps if final_only else save_every
    # steps a turn of the while loop (whose overhead a turn is about a step's): a frame's, or a few
    group = min(WHILE_GROUP, n_steps) if final_only else save_every
    t0 = jnp.asarray(t0, dt.dtype)
    j = jnp.arange(n_steps // per_frame, dtype=jnp.int32)
    targets = t0 + (per_frame * (j + 1)).astype(dt.dtype) * dt  # where the frames are written: t0 + k dt
    c0, shape = attempts_start(method, system, state0, t0, targets, None, None, dt, n_steps, monitor=monitor,
                               event=event, constant=(per_frame, group))
    final = run_through(adjoint, (c0, method, event, monitor), shape)
    a = attempts_end(final, event, shape)
    # after a terminal event: the frame it cut short at the time the run ended, with the statistics of
    # its steps; the frames never begun at their times on the grid of frames
    i = final[5]
    cut = (j == i) & (a.n_accepted > i * per_frame)
    ts = jnp.where(j < i, targets, jnp.where(cut, t0 + a.n_accepted.astype(dt.dtype) * dt,
                                             t0 + (j + 1).astype(dt.dtype) * (per_frame * dt)))
    stats = tree_where(cut, final[9], a.stats)
    return assemble(state0, t0, a.states, ts, stats, a.failed, a.reason, a.event, a.n_accepted)
