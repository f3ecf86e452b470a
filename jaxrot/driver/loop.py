"""The loop of every XLA run: one step body (:func:`advance`: the step, judged by a controller where
the method has an error estimate, checked for failure, the event moved on, statistics kept), driven
by what is known before the run.

- Constant steps (:func:`fixed_step`), count known, no terminal event: frames of ``save_every`` steps
  scanned by ``lax.scan`` (:func:`scan_frames`; memory O(saved frames), compile time independent of
  the count, reverse mode at no extra cost); with only the final state wanted, a ``fori_loop`` to a
  traced count (:func:`steps_from`, one program for every count).
- Otherwise the bounded while loop of attempts (:mod:`jaxrot.driver.attempts`), run through the
  adjoint object: error-controlled steps under the PI controller (:func:`~jaxrot.driver.attempts.while_attempts`),
  or constant steps, every one kept, where a terminal event may end the run
  (:func:`~jaxrot.driver.constant_attempts.constant_frames`).

One body each; batches ``vmap`` them (or an executor places them).
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from ..geometry.state import State, tree_where
from ..integrators.stats import StepStats
from .events import event_start, event_update
from .failures import INVARIANT_DRIFT, NONFINITE_STATE, SOLVE_FAILED, SUCCESSFUL
from .forward_vjp import by_jacobian
from .layout import SKIP_GROUP, Columns, Frames, assemble, row_packing


class InvariantMonitor(eqx.Module):
    """Flag a step whose energy (kinetic + potential) or, without torque, world momentum has moved
    more than a relative tolerance from its initial value (``None`` switches a check off).

    Example::

        jaxrot.simulate("split4_231", p, 0.1, 1000, monitor=InvariantMonitor(energy_rtol=1e-3))
    """

    energy_rtol: float | None = None
    momentum_rtol: float | None = None


def invariants(system, t, state):
    E = system.body.kinetic_energy(state.Pi)
    V = system.torque.potential(t, state.R)
    return (E if V is None else E + V), state.L


def step_reason(system, t, new_state, stats, ref, monitor):
    reason = jnp.where(~_finite(new_state), NONFINITE_STATE,
                       jnp.where(~stats.converged, SOLVE_FAILED, SUCCESSFUL))
    if monitor is not None and ref is not None:
        E0, L0 = ref
        E, L = invariants(system, t, new_state)
        drift = jnp.asarray(False)
        if monitor.energy_rtol is not None:
            drift = drift | (jnp.abs(E - E0) > monitor.energy_rtol * jnp.abs(E0))
        if monitor.momentum_rtol is not None and system.torque.is_free:
            drift = drift | (jnp.linalg.norm(L - L0) > monitor.momentum_rtol * jnp.linalg.norm(L0))
        reason = jnp.where((reason == SUCCESSFUL) & drift, INVARIANT_DRIFT, reason)
    return reason.astype(jnp.int32)


def fold(acc: StepStats, s: StepStats) -> StepStats:
    """Running per-frame aggregate: max iterations, all converged, clamp and sub-step counts."""
    return StepStats(
        newton_iters=jnp.maximum(acc.newton_iters, jnp.asarray(s.newton_iters, jnp.int32)),
        converged=acc.converged & s.converged,
        clamped=acc.clamped + jnp.asarray(s.clamped, jnp.int32),
        substeps=acc.substeps + jnp.asarray(s.substeps, jnp.int32),
    )


def empty_stats() -> StepStats:
    z = jnp.asarray(0, jnp.int32)
    return StepStats(newton_iters=z, converged=jnp.asarray(True), clamped=z, substeps=z)


def _finite(state: State):
    # Pi only: a non-finite R reaches Pi within the same step in every method, and this check
    # runs every step, so it is kept to 3 numbers
    return jnp.isfinite(jnp.sum(state.Pi))


def advance(method, system, c, t, step, monitor=None, event=None, judge=None, t_end=None):
    """One step of one body, the body of every XLA loop: from ``c = (state, aux, k, failed, reason,
    ref, ev)`` at time ``t`` (``k``: the steps kept so far; ``ref``: the monitor's initial invariants;
    ``ev``: the event's carry), the step ``step``, checked (:func:`step_reason`), the event moved on.
    ``judge(state, new, y_err) -> (ok, verdict)``: a controller judging the pair's error estimate,
    the state moving only where ``ok`` (None: constant steps, ``method.step`` without an estimate,
    every step kept); ``t_end``: the time the step ends at where not ``t + step`` (a landing on a save
    time). Returns ``(carry, StepStats, ok, verdict)``."""
    state, aux, k, failed, reason, ref, ev = c
    if judge is None:
        new, aux_new, stats = method.step(system, t, state, aux, step)
        ok, verdict = True, None
    else:
        new, aux_new, stats, y_err = method.step_with_error(system, t, state, aux, step)
        ok, verdict = judge(state, new, y_err)
    r = step_reason(system, t + step, new, stats, ref, monitor)
    first = (failed < 0) & (r != SUCCESSFUL)
    if event is not None:
        ev = event_update(event, ev, t, step, state, new, ok, t_end=t_end)
    if ok is True:
        k = k + 1
    else:
        first, k = ok & first, k + ok.astype(jnp.int32)
        new, aux_new = tree_where(ok, new, state), tree_where(ok, aux_new, aux)
    failed = jnp.where(first, k, failed)
    reason = jnp.where(first, r, reason)
    return (new, aux_new, k, failed, reason, ref, ev), stats, ok, verdict


def fixed_step(method, system, c, dt, t0, monitor=None, event=None):
    """One constant step of one body (:func:`advance`, the step starting at ``t0 + k dt``: no
    accumulated round-off in time): ``(carry, StepStats)``."""
    t = t0 + c[2].astype(dt.dtype) * dt
    c, stats, _, _ = advance(method, system, c, t, dt, monitor, event)
    return c, stats


def scan_frames(method, system, carry, dt, t0, n_frames: int, save_every: int, unroll: int, monitor=None,
                n_valid=None, reverse_differentiable: bool = True, columns: bool = False, event=None):
    """Scan ``n_frames`` frames of ``save_every`` steps from ``carry`` (:func:`init_carry`).
    With a (traced) ``n_valid``, frames from ``n_valid`` on are skipped by ``lax.cond`` (carry
    unchanged; their outputs are to be dropped), so one compiled length serves any count; with
    ``reverse_differentiable=False`` the frames run in a ``fori_loop`` to ``n_valid`` writing into
    ``n_frames``-long outputs instead (no per-frame conditional; forward-mode only, as any while
    loop), a frame's outputs packed in one row (:func:`~jaxrot.driver.layout.row_packing`: one write a
    frame). ``columns=True`` (with it): the outputs as :class:`~jaxrot.driver.layout.Columns`, one
    ``n_frames`` buffer per number, unpacked by :func:`~jaxrot.driver.layout.join`. A non-terminal
    ``event`` is checked after every step (a terminal one needs the loop of attempts,
    :func:`~jaxrot.driver.constant_attempts.constant_frames`)."""

    def frame(c):
        c, acc = masked_steps(method, system, c, dt, t0, save_every, None, monitor, event, min(unroll, save_every))
        return c, (c[0], t0 + c[2].astype(dt.dtype) * dt, acc)

    if n_frames > 1:
        # rematerialised under reverse-mode AD: the backward pass keeps one carry per frame, not every
        # step's residuals for the whole chunk (skipped frames included), at the cost of one re-run. A
        # single frame (a final state's gradient) would keep every step's residuals in its re-run
        # anyway: there the re-run only adds compile and tracing time (docs/user_guide/compile_time.md)
        frame = jax.checkpoint(frame)

    def skip(c):
        return c, (c[0], t0 + c[2].astype(dt.dtype) * dt, empty_stats())

    def outer(c, i):
        if n_valid is None:
            return frame(c)
        return lax.cond(i < n_valid, frame, skip, c)

    if n_valid is not None and not reverse_differentiable:
        # a frame's outputs packed into one row of one buffer (integers bit-cast, exact): one write a
        # frame keeps the loop body a short sequence, which XLA's CPU runtime executes inline instead
        # of dispatching it to its thread pool as it does for >8 operations touching >512-byte buffers
        shapes = jax.eval_shape(lambda c: frame(c)[1], carry)
        pack, unpack, width = row_packing(shapes, dt.dtype)
        # a 1-step frame in a loop of a count XLA cannot see (n_valid >= 1 inside), so it is not inlined
        # into the body either (a longer frame's scan stays a loop, and runs faster than this one)
        trips = jnp.where(n_valid > 0, save_every, 0)

        def steps(c):
            if unroll > 1 or save_every > 1:
                return frame(c)
            c, acc = steps_from(method, system, c, empty_stats(), dt, t0, trips, monitor, event)
            return c, (c[0], t0 + c[2].astype(dt.dtype) * dt, acc)

        def body(i, val):
            c, buf = val
            c, y = steps(c)
            if columns:
                row = pack(y)
                return c, tuple(lax.dynamic_update_index_in_dim(b, row[j], i, 0) for j, b in enumerate(buf))
            return c, lax.dynamic_update_index_in_dim(buf, pack(y), i, 0)

        buf0 = (tuple(jnp.zeros((n_frames,), dt.dtype) for _ in range(width)) if columns
                else jnp.zeros((n_frames, width), dt.dtype))
        carry, buf = lax.fori_loop(0, jnp.minimum(n_valid, n_frames), body, (carry, buf0))
        if columns:
            leaves, treedef = jax.tree_util.tree_flatten(shapes)
            return carry, Columns(buf, (treedef, tuple((v.shape, jnp.dtype(v.dtype)) for v in leaves)))
        return carry, unpack(buf)

    if n_valid is None or n_frames % SKIP_GROUP or n_frames == SKIP_GROUP:
        return lax.scan(outer, carry, jnp.arange(n_frames, dtype=jnp.int32))

    # blocks of SKIP_GROUP frames, a whole block skipped by one cond: a short run in a long chunk pays
    # ~n_frames/SKIP_GROUP skipped conds, not n_frames
    def block(c, b):
        idx = b * SKIP_GROUP + jnp.arange(SKIP_GROUP, dtype=jnp.int32)

        def run(c):
            return lax.scan(outer, c, idx)

        def skip_block(c):
            c, y = skip(c)
            return c, jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (SKIP_GROUP,) + jnp.shape(x)), y)

        return lax.cond(b * SKIP_GROUP < n_valid, run, skip_block, c)

    carry, ys = lax.scan(block, carry, jnp.arange(n_frames // SKIP_GROUP, dtype=jnp.int32))
    return carry, jax.tree_util.tree_map(lambda x: x.reshape((n_frames,) + x.shape[2:]), ys)


def masked_steps(method, system, carry, dt, t0, length: int, go=None, monitor=None, event=None, unroll: int = 1):
    """``length`` constant steps from ``carry`` (:func:`init_carry`) in a scan (reverse-differentiable),
    a step where ``go(carry)`` is false leaving the carry as it was (None: every step taken):
    ``(carry, StepStats folded over the steps taken)``: a frame of every constant-step loop with a
    known count (:func:`scan_frames`, a dense output's query re-run) and of a turn of the loop of
    attempts at constant steps (:mod:`jaxrot.driver.constant_attempts`)."""
    def inner(ca, _):
        ca, acc = ca
        new, stats = fixed_step(method, system, ca, dt, t0, monitor, event)
        if go is not None:
            g = go(ca)
            new, stats = tree_where(g, (new, stats), (ca, empty_stats()))
        return (new, fold(acc, stats)), None

    (c, acc), _ = lax.scan(inner, (carry, empty_stats()), None, length=length, unroll=unroll)
    return c, acc


#: numbers in one body's frame and its share of the final carry, at most (a bound for the tangents kept)
FRAME_NUMBERS = 64


def exact_frames(args, n_frames: int, save_every: int, unroll: int, reverse: bool = False) -> Frames:
    """One body's frames from a scan of exactly ``n_frames`` frames (a run inside someone's trace);
    ``args`` is ``(method, system, state0, dt, t0, monitor, event)``. ``reverse`` (``jax.grad`` only): a
    few perturbed numbers (the moments, say) differentiated by forward tangents
    (:func:`~jaxrot.driver.forward_vjp.by_jacobian`: one program of the loop and its tangents, where the
    reverse pass would compile the loop's transpose and a second program)."""
    if reverse:
        run = functools.partial(exact_frames, n_frames=n_frames, save_every=save_every, unroll=unroll)
        return by_jacobian(run, args, n_frames * FRAME_NUMBERS)
    method, system, state0, dt, t0, monitor, event = args
    c = init_carry(method, system, state0, dt, t0, monitor, event)
    c, (states, ts, stats) = scan_frames(method, system, c, dt, t0, n_frames, save_every, unroll, monitor, event=event)
    return assemble(state0, t0, states, ts, stats, c[3], c[4], c[6], c[2])


def init_carry(method, system, state0, dt, t0, monitor=None, event=None, k0=0):
    """The loop's carry with ``state0`` at step ``k0`` (time ``t0 + k0 dt``) of a run from ``t0``."""
    t = t0 if isinstance(k0, int) and k0 == 0 else t0 + jnp.asarray(k0).astype(dt.dtype) * dt
    k0 = jnp.asarray(k0, jnp.int32)
    aux = method.init(system, t, state0, dt)
    ref = invariants(system, t, state0) if monitor is not None else None
    ev = event_start(event, jnp.asarray(t, dt.dtype), state0) if event is not None else None
    return (state0, aux, k0, jnp.asarray(-1, jnp.int32), jnp.asarray(SUCCESSFUL, jnp.int32), ref, ev)


def run_steps(method, system, state0, dt, t0, n_steps, monitor=None, event=None):
    """The unsaved step loop: ``(final carry, StepStats folded over the steps)``; ``n_steps`` may be
    traced (a ``fori_loop``: forward-mode differentiable only). Used inside one's own ``jit``/``vmap``
    too (the maps do); callers validate inputs."""
    return steps_from(method, system, init_carry(method, system, state0, dt, t0, monitor, event), empty_stats(), dt,
                      t0, n_steps, monitor, event)


def steps_from(method, system, carry, stats, dt, t0, n_steps, monitor=None, event=None):
    """``n_steps`` (may be traced) more constant steps from ``carry`` (:func:`init_carry`), their
    statistics folded into ``stats``: ``(carry, stats)``. A run in pieces of this (a progress report's)
    takes the steps of one :func:`run_steps`, and folds the same statistics."""
    def body(_, c):
        c, acc = c
        c, s = fixed_step(method, system, c, dt, t0, monitor, event)
        return c, fold(acc, s)

    return lax.fori_loop(0, n_steps, body, (carry, stats))


def last_frame(state0, t0, dt, carry, stats) -> Frames:
    """A final-state run's frames (the initial state, then the final) from its final carry and folded
    statistics."""
    t1 = t0 + carry[2].astype(dt.dtype) * dt
    one = jax.tree_util.tree_map(lambda x: x[None], (carry[0], t1, stats))
    return assemble(state0, t0, *one, carry[3], carry[4], carry[6], carry[2])


def loop_args(spec) -> tuple:
    """A run's inputs (a :class:`~jaxrot.driver.executors.base.RunSpec`'s) as :func:`exact_frames` and
    :func:`~jaxrot.driver.constant_attempts.constant_frames` take them."""
    return spec.method, spec.system, spec.state0, spec.dt, spec.t0, spec.monitor, spec.event
