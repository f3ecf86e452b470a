"""The plain XLA executor: the loop compiled by XLA on one device.

One body of constant steps: a run of at most :data:`~jaxrot.driver.layout.SHORT_RUN_FRAMES` frames is
one small program (initial carry and frames); a longer one is the initial carry and a repeated chunk
of :data:`~jaxrot.driver.layout.FRAMES_PER_CHUNK` frames, compiled once for any number of steps;
inside someone's ``jit``/``grad``/``vmap`` it is one scan of exactly its frames (reverse-differentiable,
each frame rematerialised); with a terminal event, the loop of attempts at constant steps. A batch is the same loop
under ``vmap``.
"""

from __future__ import annotations

import functools

import jax
import numpy as np

from ..adjoint import reverse_only
from ..checks import is_concrete
from ..layout import FRAMES_PER_CHUNK, SHORT_RUN_FRAMES, Frames, join, run_chunks
from ..lean_jit import lean_jit
from ..constant_attempts import constant_frames
from ..loop import empty_stats, exact_frames, init_carry, last_frame, run_steps, scan_frames, steps_from, loop_args
from ..paced import one_call, steps_in_pieces
from .base import AbstractExecutor, RunSpec
from .batch import batch_final, batch_frames, batch_while, inputs


@lean_jit
def _one_chunk(method, system, carry, dt, t0, n_valid, save_every, unroll, monitor=None, event=None):
    # only for concrete inputs (traced calls take _one_exact), so never reverse-differentiated
    return scan_frames(method, system, carry, dt, t0, FRAMES_PER_CHUNK, save_every, unroll, monitor, n_valid,
                       reverse_differentiable=False, event=event)


@lean_jit
def _one_short(method, system, state0, dt, t0, n_valid, save_every, unroll, monitor=None, event=None):
    """A run of at most SHORT_RUN_FRAMES frames: the initial carry and the frames in one program."""
    carry = init_carry(method, system, state0, dt, t0, monitor, event)
    return scan_frames(method, system, carry, dt, t0, SHORT_RUN_FRAMES, save_every, unroll, monitor, n_valid,
                       reverse_differentiable=False, columns=True, event=event)


_one_exact = lean_jit(exact_frames)  # a run inside someone's trace: exactly its frames


@lean_jit
def _one_init(method, system, state0, dt, t0, monitor=None, event=None):
    return init_carry(method, system, state0, dt, t0, monitor, event)


@lean_jit
def _one_final(method, system, state0, dt, t0, n_steps, monitor=None, event=None):
    """Only the final state, the step count a traced loop bound (one program for any count)."""
    c, stats = run_steps(method, system, state0, dt, t0, n_steps, monitor, event)
    return last_frame(state0, t0, dt, c, stats)


_one_steps = lean_jit(steps_from)  # a final-state run in pieces (a progress report's): its steps
_one_last = lean_jit(last_frame)


_one_while = lean_jit(constant_frames)  # the loop of attempts, which a terminal event ends


@jax.jit
def _stats0():
    return empty_stats()


def traced(spec) -> bool:
    """Whether any input of ``spec`` is traced (the run is part of someone's ``jit``/``grad``/``vmap``)."""
    return not all(map(is_concrete, inputs(spec)))


def one_body(spec: RunSpec) -> Frames:
    """The run of one body on the default device (shared by every executor for a single body)."""
    m, s, x0, dt, t0, se = spec.method, spec.system, spec.state0, spec.dt, spec.t0, spec.save_every
    n_frames, is_traced, mon, ev = spec.n_frames, traced(spec), spec.monitor, spec.event
    if spec.terminal:
        reverse = is_traced and reverse_only(inputs(spec))
        loop = (loop_args(spec), spec.n_steps, se, spec.final_only, spec.adjoint)
        if spec.report is not None and not is_traced:
            return one_call(spec.report, lambda: _one_while(*loop), spec.n_steps)
        return _one_while(*loop, reverse)
    if spec.final_only and not is_traced:  # the step count a traced loop bound: one program for any count
        if spec.report is not None:
            carry, stats = steps_in_pieces(
                spec.report, spec.n_steps, lambda: (_one_init(m, s, x0, dt, t0, mon, ev), _stats0()),
                lambda c, n: _one_steps(m, s, c[0], c[1], dt, t0, np.asarray(n, np.int32), mon, ev))
            return _one_last(x0, t0, dt, carry, stats)
        return _one_final(m, s, x0, dt, t0, np.asarray(spec.n_steps, np.int32), mon, ev)
    if is_traced:
        # inside someone's jit/grad/vmap the caller's program is compiled for this call anyway: one scan of
        # exactly n_frames, not chunks with the unused frames skipped
        return _one_exact(loop_args(spec), n_frames, se, spec.unroll, reverse_only(inputs(spec)))
    if n_frames <= SHORT_RUN_FRAMES and spec.report is None:
        carry, part = _one_short(m, s, x0, dt, t0, np.asarray(n_frames, np.int32), se, spec.unroll, mon, ev)
        parts, nvs = (part,), (n_frames,)
    else:  # the initial carry, then the repeated chunk
        carry = _one_init(m, s, x0, dt, t0, mon, ev)

        def run_chunk(c, nv):
            return _one_chunk(m, s, c, dt, t0, nv, se, spec.unroll, mon, ev)

        carry, parts, nvs = run_chunks(run_chunk, carry, n_frames, FRAMES_PER_CHUNK, spec.report)
    return join(x0, t0, parts, nvs, (carry[3], carry[4], carry[6], carry[2]))


def one_body_plan(spec: RunSpec):
    """:func:`one_body` of ``spec`` as a function of no arguments; a final-state-only run's program
    and arguments are bound once."""
    if spec.final_only and not spec.terminal and spec.report is None and not traced(spec):
        m, s, x0, dt, t0 = spec.method, spec.system, spec.state0, spec.dt, spec.t0
        return _one_final.bind(m, s, x0, dt, t0, np.asarray(spec.n_steps, np.int32), spec.monitor, spec.event)
    return functools.partial(one_body, spec)


class XLA(AbstractExecutor):
    """The loop compiled by XLA on one device; a batch is ``vmap`` ped, unblocked.

    Example::

        jaxrot.simulate("buss4", problem, 1e-3, 1000, executor=jaxrot.XLA())
    """

    def run(self, spec: RunSpec) -> Frames:
        if not spec.batched:
            return one_body(spec)
        if spec.terminal:
            return batch_while(spec, self)
        if spec.final_only and not traced(spec):
            return batch_final(spec, block=None)
        return batch_frames(spec, block=None, devices=None)

    def plan(self, spec: RunSpec):
        return one_body_plan(spec) if not spec.batched else super().plan(spec)
