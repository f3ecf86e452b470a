"""Runs in pieces, for a progress report (:mod:`jaxrot.driver.progress`): the same compiled loop called
again and again on the host, each call a piece sized to take about half of the report's interval, a line
between pieces. Every kind of run has its pieces, and they give the numbers of the run in one call:

- constant steps with frames: calls of the compiled chunk with fewer valid frames
  (:func:`~jaxrot.driver.layout.run_chunks` with a report);
- constant steps, the final state only: calls of the step loop from the last carry, for a count of
  steps (:func:`steps_in_pieces`);
- error-controlled steps: calls of the attempts' while loop from its last state, for a number of
  attempts (:func:`jaxrot.driver.attempts.attempts_in_pieces`); the lines say the time the slowest
  unfinished body has reached and how many bodies have finished;
- a fused run (one kernel launch): the batch in groups of bodies, one launch each (:func:`in_groups`;
  one body is one launch, reported while it runs and when it ends);
- constant steps with a terminal event (a while loop over frames): one call, reported while it runs
  and when it ends (:func:`one_call`).

Each kind first calls its program on nothing (no frame, step, attempt, or one body): the time of that
call is reported as the compilation.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from .checks import is_concrete
from .progress import Pacer, RunProgress

__all__ = ["steps_in_pieces", "in_groups", "one_call", "subset"]


def steps_in_pieces(report: RunProgress, total: int, start, piece):
    """A final-state run of ``total`` constant steps in pieces: ``start()`` the state before the first
    step, ``piece(state, n)`` the state ``n`` steps later (one compiled program for any ``n``, compiled
    by a piece of none first). Returns the final state."""
    state = report.compile(lambda: piece(start(), 0))
    pacer, done = Pacer(), 0
    while done < total:
        n = min(pacer.n, total - done)
        state = pacer.run(report, n, lambda k: piece(state, k))
        done += n
        report.steps(done)
    return state


def one_call(report: RunProgress, run, total: int):
    """``run()`` with a line every interval while it lasts, and ``total`` steps done when it ends."""
    with report.waiting("running (one call)"):
        out = jax.block_until_ready(run())
    report.steps(total)
    return out


def subset(spec, idx):
    """``spec`` (a :class:`~jaxrot.driver.executors.base.RunSpec` or an ``AttemptSpec``) for the bodies
    ``idx`` of its batch: the initial states, and the tolerances and first steps given per body."""
    B = spec.state0.R.shape[0]
    take = jax.tree_util.tree_map(lambda x: x[idx], spec.state0)
    fields = {"state0": take}
    for name in ("rtol", "atol", "dt0"):
        x = getattr(spec, name, None)
        if x is not None and jnp.ndim(x) >= 1 and jnp.shape(x)[0] == B:
            fields[name] = jnp.asarray(x)[idx]
    return dataclasses.replace(spec, **fields)


#: bodies in a fused run's first group (its time is reported as the compilation's)
FIRST_GROUP = 2


def in_groups(report: RunProgress, spec, run):
    """``run(spec)`` (a fused run: one launch) on ``spec``'s batch in groups of bodies, the first of
    :data:`FIRST_GROUP` (its time reported as the compilation's), each next group a power of two sized
    to take about half the report's interval, or the rest (one body left is run with another); the
    frames of the batch. One body, or a traced run, is one call."""
    if not spec.batched or not all(map(is_concrete, jax.tree_util.tree_leaves(spec.state0))):
        with report.waiting("running (one launch)"):
            out = jax.block_until_ready(run(spec))
        report.bodies_done(1, 1)
        return out
    B = spec.state0.R.shape[0]
    # groups of at least two bodies: XLA compiles a batch of one otherwise (a fused error-controlled
    # run's first steps, computed outside the kernel, then round apart from the same body's in a batch)
    done = min(FIRST_GROUP, B)
    parts = [report.compile(lambda: run(subset(spec, np.arange(done))))]
    # a group's time is mostly its bodies' (a launch costs little): no cap on the growth, and few sizes,
    # each a compiled program of its own
    pacer = Pacer(first=2, growth=None)
    report.bodies_done(done, B)
    while done < B:
        rest = B - done
        size = min(pacer.n, rest)
        # a power of two (few sizes), or the rest where it is less than twice that (at least two bodies)
        size = max(2, rest) if 2 * size > rest else 1 << (max(2, size).bit_length() - 1)
        idx = np.minimum(np.arange(done, done + size), B - 1)
        out = pacer.run(report, size, lambda _: run(subset(spec, idx)))
        valid = min(size, B - done)
        parts.append(out if valid == size else jax.tree_util.tree_map(lambda x: x[:valid], out))
        done += valid
        report.bodies_done(done, B)
    return jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs, axis=0), *parts)
