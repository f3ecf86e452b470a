"""The loop of error-controlled runs: attempts of an embedded pair under the PI controller, one body,
in a bounded while loop run through the adjoint object.

Each attempt steps from the current state by ``h`` (shortened to land exactly on the next output
time, so saved states carry the pair's full accuracy), measures the pair's error estimate
(the pair's :meth:`~jaxrot.integrators.AbstractPair.error_norm`), and is accepted or rejected by the PI controller
(:func:`~jaxrot.integrators.pairs.adapt`), which also proposes the next step. The attempt is the
step body of every XLA loop (:func:`~jaxrot.driver.loop.advance`, a constant step's too, judged here
by the controller): checked, the event moved on; an accepted step then writes what :class:`~jaxrot.SaveAt` asks:
the state at an output time, every ``k``-th step, every step for the dense output. The loop ends at
the last output time, at a terminal event, at a failed step (constant steps go on past one, as
scanned ones do), or after ``max_steps`` attempts.
In reverse mode the loop is differentiated along the steps it accepted (:func:`_recorded`). With a
progress report a concrete run goes in pieces of attempts (:func:`attempts_in_pieces`), the same
attempts as the loop in one call.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..geometry.state import State, tree_where
from ..integrators.pairs import LANDING, adapt, first_interval, first_step
from ..physics.flow import pack_body
from .adjoint import ForwardMode
from .events import event_start, stopped
from . import forward_vjp, progress
from .checks import is_concrete
from .failures import MAX_STEPS_REACHED, SUCCESSFUL
from .layout import Frames
from .loop import advance, empty_stats, fold, invariants, masked_steps

__all__ = ["Attempts", "while_attempts", "attempts_frames", "attempts_frames_on", "attempts_in_pieces"]


class Attempts(eqx.Module):
    """What one body's error-controlled run returns (see :func:`while_attempts`)."""

    states: State          # at the output times (n_out, ...); never reached: the last state
    stats: object          # StepStats folded over each output interval
    n_accepted: jax.Array
    n_rejected: jax.Array
    err_estimate: jax.Array
    failed: jax.Array      # first failed step (1-based) or the attempts spent (max_steps), or -1
    reason: jax.Array      # RESULTS code
    event: object          # EventCarry or None
    steps: tuple | None    # (times, states) of every k-th accepted step, or None
    dense: tuple | None    # (times, states) of every accepted step, t0 first, or None
    final: State


def _buffers(c):
    # the outputs are the loop's buffers: written in place, not copied into every checkpoint
    return c[6], c[13], c[14], c[16]


def _cond(event, n_out, max_steps, constant=False):
    def cond(c):
        (_, _, _, _, _, i, _, acc, rej, _, failed, _, ev, _, _, _, _) = c
        go = (i < n_out) & (acc + rej < max_steps) & ~stopped(event, ev)
        # constant steps go on past a failed step, as the scanned ones do
        return go if constant else go & (failed < 0)
    return cond


def _body(method, event, monitor, shape, replay=None):
    """The loop's body. ``replay``: the signed steps a recorded run accepted (negative: landed on an
    output time), taken again in order without the controller (see :func:`_recorded`). With
    ``shape``'s ``constant = (per_frame, group)`` (constant steps, ``consts``' tolerances replaced by
    ``dt, t0``): ``group`` steps a turn (:func:`~jaxrot.driver.loop.masked_steps`, those past the
    frame's end or a terminal event leaving the state as it was), the ``k``-th from ``t0 + k dt`` (no
    accumulated round-off), every one kept, a frame every ``per_frame`` steps."""
    q, every, n_out, max_steps, constant = shape

    def body(c):
        t, state, aux, h, err_prev, i, out, acc, rej, folded, failed, reason, ev, sbuf, dbuf, consts, rec = c
        system, targets, rtol, atol, ref = consts
        if constant is not None:
            (per_frame, group), dt, t0 = constant, rtol, atol
            end = (acc // per_frame + 1) * per_frame

            def go(ca):
                return (ca[2] < end) & ~stopped(event, ca[6])

            (state_new, aux_new, n, failed, reason, _, ev), stats = masked_steps(
                method, system, (state, aux, acc, failed, reason, ref, ev), dt, t0, group, go if group > 1 else None,
                monitor, event)
            t_new, h_new, err_new, step = t0 + n.astype(dt.dtype) * dt, h, err_prev, dt
            ok, hit, now = jnp.asarray(True), n % per_frame == 0, jnp.asarray(False)
            return _save(c, t_new, state_new, aux_new, h_new, err_new, n, failed, reason, ev, stats, ok, hit, now, step)
        target = targets[i]
        if replay is None:
            hit = t + h >= target - LANDING * jnp.maximum(1.0, jnp.abs(target))
            step = jnp.where(hit, target - t, h)
        else:
            taken = replay[jnp.minimum(acc, replay.shape[0] - 1)]
            hit = taken < 0
            step = jnp.where(hit, target - t, taken)
        # a save time at t itself (a traced SaveAt(ts) beginning at t0): its frame is the state as it is,
        # written without a step that would count or move the controller
        now = target <= t

        def judge(state, yp, y_err):
            if replay is None:
                err = method.error_norm(pack_body(state.R, state.Pi), pack_body(yp.R, yp.Pi), y_err, rtol, atol)
                ok, h_new, err_new = adapt(q, err, err_prev, h, step, hit)
            else:
                ok, h_new, err_new = jnp.asarray(True), h, err_prev
            return ok & ~now, (jnp.where(now, h, h_new), jnp.where(now, err_prev, err_new))

        t_end = jnp.where(hit, target, t + step)
        (state_new, aux_new, n, failed, reason, _, ev), stats, ok, (h_new, err_new) = advance(
            method, system, (state, aux, acc, failed, reason, ref, ev), t, step, monitor, event, judge, t_end)
        t_new = jnp.where(ok, t_end, t)
        return _save(c, t_new, state_new, aux_new, h_new, err_new, n, failed, reason, ev, stats, ok, hit, now, step)

    def _save(c, t_new, state_new, aux_new, h_new, err_new, n, failed, reason, ev, stats, ok, hit, now, step):
        """The attempt's outputs written (what SaveAt asks, the record), and the loop's next state."""
        i, out, acc, rej, folded, sbuf, dbuf, consts, rec = c[5:10] + c[13:]
        save = (ok & hit) | now
        folded_new = tree_where(ok, fold(folded, stats), folded)
        out = jax.tree_util.tree_map(lambda x, o: o.at[i].set(x, pred=save), (state_new, folded_new), out)
        folded_new = tree_where(save, empty_stats(), folded_new)
        if rec is not None:
            rec = rec.at[acc].set(jnp.where(hit, -step, step), pred=ok)
        if sbuf is not None:
            keep = ok & (n % every == 0)
            j = jnp.maximum(n // every - 1, 0)
            sbuf = jax.tree_util.tree_map(lambda x, o: o.at[j].set(x, pred=keep), (t_new, state_new), sbuf)
        if dbuf is not None:
            dbuf = jax.tree_util.tree_map(lambda x, o: o.at[n].set(x, pred=ok), (t_new, state_new), dbuf)
        return (t_new, state_new, aux_new, h_new, err_new, i + save.astype(jnp.int32), out, n,
                rej + (~ok & ~now).astype(jnp.int32), folded_new, failed, reason, ev, sbuf, dbuf, consts, rec)

    return body


def _loop(args, shape, adjoint=ForwardMode(), *, record: bool = False, replay=None, most=None):
    """The loop from ``args = (c0, method, event, monitor)`` through ``adjoint``'s while loop (by default
    a plain one: no derivative through it), handing on its carry without the problem's arrays (not JAX
    types throughout). ``record``: also the signed step each accepted attempt took, the steps accepted
    and the output frames written; ``replay``: such a record, its steps taken again in order, and the
    frames the recorded run wrote after its last step (save times equal in the run's type) written
    too; ``most``: the attempts (may be traced) after which the loop stops short of ``max_steps`` (a
    piece of a run, for a progress report: the same attempts as one loop)."""
    c0, method, event, monitor = args
    max_steps = shape[3]
    turns = max_steps
    if shape[4] is not None:  # constant steps: a turn of group steps a frame, no step of theirs to record
        per_frame, group = shape[4]
        turns = shape[2] * -(-per_frame // group)
    elif record:
        c0 = c0[:16] + (jnp.zeros((max_steps,), c0[0].dtype),)
    if replay is None:
        cond = _cond(event, shape[2], max_steps if most is None else most, shape[4] is not None)
    else:
        def cond(c):
            return (c[7] < replay[1]) | (c[5] < replay[2])
    body = _body(method, event, monitor, shape, None if replay is None else replay[0])
    final = adjoint.while_loop(cond, body, c0, max_steps=turns, buffers=_buffers)
    out = final[:15] + (None, None)
    return (out, (final[16], final[7], final[5])) if record else out


@eqx.filter_custom_vjp
def _recorded(args, adjoint, shape):
    """The loop under a reverse-mode adjoint: the run as it is, differentiated along the steps it accepted.

    A reverse pass recomputes the loop from checkpoints, and a recomputation rounds differently from
    the run it repeats (another compiled program): an error estimate near round-off then moves the
    next step, the recomputed steps drift from the run's, and the derivative is taken along other
    steps than the run's (docs/user_guide/saveat_events.md, "Gradients of adaptive runs"). So the run
    records the step it accepts each time (``max_steps`` numbers per body), and the backward pass
    differentiates the loop that takes exactly those steps again (:func:`_loop`, through ``adjoint``'s
    checkpointed while loop), the step to each output time still its distance from it. The
    controller's choice carries no derivative in any mode (as diffrax's PIDController).
    """
    return _loop(args, shape)


def _forward(perturbed, args, shape) -> bool:
    """Whether ``_recorded``'s derivative is taken in forward mode (:mod:`jaxrot.driver.forward_vjp`): a
    few numbers perturbed, and no buffer of every (``every``-th) step, whose tangents would be kept."""
    return shape[1] is None and args[0][14] is None and 0 < forward_vjp.directions(perturbed, args) <= forward_vjp.MOST


@_recorded.def_fwd
def _recorded_fwd(perturbed, args, adjoint, shape):
    if _forward(perturbed, args, shape):  # the loop with its tangents: one loop, no checkpoints
        return forward_vjp.jacobian(lambda a: _loop(a, shape), args, perturbed)
    return _loop(args, shape, record=True)


@_recorded.def_bwd
def _recorded_bwd(residuals, grad_obj, perturbed, args, adjoint, shape):
    if _forward(perturbed, args, shape):
        return forward_vjp.pull_back(residuals, grad_obj, args, perturbed)
    out, vjp = eqx.filter_vjp(lambda a: _loop(a, shape, adjoint, replay=residuals), args)
    zero = jax.tree_util.tree_map(
        lambda o, g: g if g is not None else (jnp.zeros_like(o) if eqx.is_inexact_array(o) else None),
        out, grad_obj, is_leaf=lambda x: x is None)
    (grad,) = vjp(zero)
    return grad


@eqx.filter_custom_jvp
def _recorded_both(args, *, adjoint, shape):
    """:func:`_recorded` for an adjoint that differentiates in both modes (``DirectAdjoint``, a bounded
    loop): the tangent is that of the loop taking the recorded steps again, which reverse mode
    transposes."""
    return _loop(args, shape)


@_recorded_both.def_jvp
def _recorded_both_jvp(primals, tangents, *, adjoint, shape):
    (args,), (t_args,) = primals, tangents
    out, record = _loop(args, shape, record=True)
    _, t_out = eqx.filter_jvp(lambda a: _loop(a, shape, adjoint, replay=record), (args,), (t_args,))
    return out, t_out


def while_attempts(method, system, state0: State, t0, targets, rtol, atol, dt0, max_steps: int, adjoint, *,
                   monitor=None, event=None, every: int | None = None, dense: bool = False) -> Attempts:
    """One body's run over the output times ``targets`` (increasing, after ``t0``; the last is the end
    of the run) by the pair ``method`` (:class:`~jaxrot.integrators.AbstractPair`) at tolerances
    ``rtol``, ``atol`` (scalars, may be traced), the first trial step ``dt0`` (None: from the
    tolerance and the initial angular speed), at most ``max_steps`` attempts; ``every``: also keep
    every ``every``-th accepted step; ``dense``: keep every accepted step."""
    c0, shape = attempts_start(method, system, state0, t0, targets, rtol, atol, dt0, max_steps, monitor=monitor,
                               event=event, every=every, dense=dense)
    return attempts_end(run_through(adjoint, (c0, method, event, monitor), shape), event, shape)


def run_through(adjoint, args, shape):
    """The loop's final state, run through ``adjoint`` (see :func:`_loop`)."""
    if adjoint.kind == "lax":
        return _loop(args, shape, adjoint)
    if adjoint.kind == "bounded":
        return _recorded_both(args, adjoint=adjoint, shape=shape)
    return _recorded(args, adjoint, shape)


def attempts_start(method, system, state0: State, t0, targets, rtol, atol, dt0, max_steps: int, *, monitor=None,
                   event=None, every: int | None = None, dense: bool = False, constant: tuple | None = None):
    """The loop state before the first attempt, and the loop's ``shape`` (see :func:`while_attempts`);
    ``constant``: constant steps ``dt0`` (``rtol``, ``atol`` unused; see :func:`_body`)."""
    dtype = state0.R.dtype
    q = None if constant is not None else method.error_order()
    n_out = targets.shape[0]
    t0 = jnp.asarray(t0, dtype)
    if constant is not None:  # the constant step is differentiated, as the state
        h0, rtol, atol = dt0, dt0, t0
    else:  # the first trial step is the controller's choice, as every later one: no derivative through it
        h0 = first_step(q, system.body.J, state0.Pi, rtol, first_interval(t0, targets)) if dt0 is None \
            else jax.lax.stop_gradient(dt0)
    z32 = jnp.asarray(0, jnp.int32)

    def frames(n):
        return jax.tree_util.tree_map(lambda x: jnp.zeros((n,) + x.shape, x.dtype), state0)

    out0 = (frames(n_out), jax.tree_util.tree_map(lambda x: jnp.zeros((n_out,) + x.shape, x.dtype), empty_stats()))
    sbuf = None if every is None else (jnp.full((max_steps // every,), jnp.inf, dtype), frames(max_steps // every))
    dbuf = None
    if dense:
        dbuf = (jnp.full((max_steps + 1,), jnp.inf, dtype).at[0].set(t0),
                jax.tree_util.tree_map(lambda f, x: f.at[0].set(x), frames(max_steps + 1), state0))
    ref = invariants(system, t0, state0) if monitor is not None else None
    ev = event_start(event, t0, state0) if event is not None else None

    # the problem's arrays travel in the loop state (unchanged) rather than by closure: their
    # cotangents then accumulate through the checkpointed loop's recomputations
    c0 = (t0, state0, method.init(system, t0, state0, h0), jnp.asarray(h0, dtype), jnp.asarray(1.0, dtype), z32,
          out0, z32, z32, empty_stats(), jnp.asarray(-1, jnp.int32), jnp.asarray(SUCCESSFUL, jnp.int32), ev, sbuf,
          dbuf, (system, None if constant else targets, jnp.asarray(rtol, dtype), jnp.asarray(atol, dtype), ref), None)
    return c0, (q, every, n_out, max_steps, constant)


def attempts_piece(method, event, monitor, shape, c, budget):
    """At most ``budget`` (may be traced) more attempts of the loop from its state ``c`` (a run in
    pieces, for a progress report: the same attempts as one loop): ``(c, finished)``."""
    c = _loop((c, method, event, monitor), shape, most=jnp.minimum(c[7] + c[8] + budget, shape[3]))
    return c, ~_cond(event, shape[2], shape[3], shape[4] is not None)(c)


def attempts_end(final, event, shape) -> Attempts:
    """What the loop's final state ``final`` says (:class:`Attempts`)."""
    _, every, n_out, max_steps, _ = shape
    t, state, _, _, err, i, (out, stats), acc, rej, _, failed, reason, ev, sbuf, dbuf, _, _ = final

    def hold(frames, reached):  # frames never reached hold the last state
        return jax.tree_util.tree_map(
            lambda o, s: jnp.where(reached.reshape((-1,) + (1,) * s.ndim), o, s), frames, state)

    out = hold(out, jnp.arange(n_out, dtype=jnp.int32) < i)
    done = (i == n_out) | stopped(event, ev)
    short = ~done & (failed < 0)  # max_steps used up
    failed = jnp.where(short, acc + rej, failed)
    reason = jnp.where(short, MAX_STEPS_REACHED, reason)
    if sbuf is not None:
        m = sbuf[0].shape[0]
        sbuf = (sbuf[0], hold(sbuf[1], jnp.arange(m, dtype=jnp.int32) < acc // every))
    if dbuf is not None:
        dbuf = (dbuf[0], hold(dbuf[1], jnp.arange(max_steps + 1, dtype=jnp.int32) <= acc))
    return Attempts(out, stats, acc, rej, err, failed.astype(jnp.int32), reason.astype(jnp.int32), ev, sbuf, dbuf,
                    state)


def frames_of(a: Attempts, state0: State, t0, targets) -> Frames:
    """One body's :class:`~jaxrot.driver.layout.Frames`: the initial state, then the output times'."""
    ts = jnp.concatenate([jnp.reshape(t0, (1,)).astype(targets.dtype), targets])
    states = jax.tree_util.tree_map(lambda x0, x: jnp.concatenate([x0[None], x]), state0, a.states)
    dense = None
    if a.steps is not None or a.dense is not None:
        dense = (a.steps, a.dense)
    return Frames(ts, states, a.stats, a.failed, a.reason, a.event, (a.n_accepted, a.n_rejected, a.err_estimate),
                  dense)


def attempts_frames_on(spec, executor) -> Frames:
    """:func:`attempts_frames` with the bodies placed by ``executor``'s ``map_bodies``, compiled; with a
    progress report (:func:`~jaxrot.driver.progress.active`) and concrete inputs, in pieces
    (:func:`attempts_in_pieces`)."""
    report = progress.active()
    if report is not None and all(map(is_concrete, jax.tree_util.tree_leaves(spec))):
        return attempts_in_pieces(spec, executor, report)
    return _attempts_compiled(spec, executor)


@eqx.filter_jit  # one compiled program per configuration (the loop is traced once)
def _attempts_compiled(spec, executor) -> Frames:
    return attempts_frames(spec, _placement(executor))


def attempts_frames(spec, map_bodies) -> Frames:
    """The frames of an error-controlled run (:class:`~jaxrot.driver.executors.base.AttemptSpec`): one
    body's :func:`while_attempts`, or a batch's through ``map_bodies(fn, *trees)`` (an executor's
    placement of a per-body function; per-body tolerances ride along)."""
    dtype = spec.state0.R.dtype

    def one(system, rtol, atol, s0, dt0):
        a = while_attempts(spec.method, system, s0, spec.t0, spec.targets, rtol, atol, dt0, spec.max_steps,
                           spec.adjoint, monitor=spec.monitor, event=spec.event, every=spec.every, dense=spec.dense)
        return frames_of(a, s0, jnp.asarray(spec.t0, dtype), spec.targets)

    return _per_body(spec, map_bodies, one, spec.state0, _first_steps(spec))


def attempts_in_pieces(spec, executor, report):
    """An error-controlled run (:class:`~jaxrot.driver.executors.base.AttemptSpec`, concrete) in pieces
    of attempts, its bodies placed by ``executor``'s ``map_bodies``: its
    :class:`~jaxrot.driver.layout.Frames`."""
    carry = report.compile(lambda: _attempts_piece(spec, executor, _attempts_init(spec, executor),
                                                   np.asarray(0, np.int32))[0])
    pacer = progress.Pacer()
    while True:
        carry, (t_slowest, finished, every) = pacer.run(
            report, pacer.n, lambda k: _attempts_piece(spec, executor, carry, np.asarray(k, np.int32)))
        report.reached(float(t_slowest), int(finished))
        if bool(every):
            return _attempts_frames(spec, executor, carry)


def _shape(spec):
    return spec.method.error_order(), spec.every, spec.targets.shape[0], spec.max_steps, None


def _per_body(spec, map_bodies, fn, *trees):
    """``fn(system, rtol, atol, *trees)`` for one body, or each body of a batch through ``map_bodies``
    (an executor's placement; tolerances one per body, trees with a leading batch axis)."""
    if not spec.batched:
        return fn(spec.system, spec.rtol, spec.atol, *trees)
    B, dtype = spec.state0.R.shape[0], spec.state0.R.dtype
    rtol, atol = (jnp.broadcast_to(jnp.asarray(x, dtype), (B,)) for x in (spec.rtol, spec.atol))
    if spec.stacked:
        return map_bodies(fn, spec.system, rtol, atol, *trees)
    return map_bodies(lambda r, a, *t: fn(spec.system, r, a, *t), rtol, atol, *trees)


def _first_steps(spec):
    """The first trial step (None: from the tolerance), one per body of a batch."""
    if not spec.batched or spec.dt0 is None:
        return spec.dt0
    return jnp.broadcast_to(jnp.asarray(spec.dt0, spec.state0.R.dtype), spec.state0.R.shape[:1])


def _placement(executor):
    return type(executor).map_bodies.__get__(executor)


@eqx.filter_jit
def _attempts_init(spec, executor):
    """Each body's loop state before its first attempt (without the problem's arrays) and the monitor's
    reference (or None)."""
    def one(system, rtol, atol, s0, d0):
        c0, _ = attempts_start(spec.method, system, s0, spec.t0, spec.targets, rtol, atol, d0, spec.max_steps,
                               monitor=spec.monitor, event=spec.event, every=spec.every, dense=spec.dense)
        return c0[:15], c0[15][4]

    return _per_body(spec, _placement(executor), one, spec.state0, _first_steps(spec))


def _consts(spec, system, rtol, atol, ref):
    dtype = spec.state0.R.dtype
    return system, spec.targets, jnp.asarray(rtol, dtype), jnp.asarray(atol, dtype), ref


@eqx.filter_jit
def _attempts_piece(spec, executor, carry, budget):
    """At most ``budget`` more attempts of every body: the loop states, and the slowest unfinished
    body's time, the bodies finished and whether all are."""
    def one(system, rtol, atol, c, ref):
        c, done = attempts_piece(spec.method, spec.event, spec.monitor, _shape(spec),
                                 c + (_consts(spec, system, rtol, atol, ref), None), budget)
        return c[:15], done

    c, done = _per_body(spec, _placement(executor), one, *carry)
    t_slowest = jnp.min(jnp.where(done, spec.targets[-1], c[0]))
    return (c, carry[1]), (t_slowest, jnp.sum(done.astype(jnp.int32)), jnp.all(done))


@eqx.filter_jit
def _attempts_frames(spec, executor, carry):
    dtype = spec.state0.R.dtype

    def one(system, rtol, atol, c, ref, s0):
        a = attempts_end(c + (None, None), spec.event, _shape(spec))
        return frames_of(a, s0, jnp.asarray(spec.t0, dtype), spec.targets)

    return _per_body(spec, _placement(executor), one, *carry, spec.state0)
