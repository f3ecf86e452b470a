"""The one time loop: nested ``lax.scan`` (frames x steps), batched by ``vmap``, sharded over devices.

Memory is O(saved frames) and compile time does not grow with ``n_steps``. Inputs are checked on
the host before tracing (``ValueError`` naming the problem); traced inputs (under ``jax.grad`` or
``jit``) are checked with ``eqx.error_if``. A step whose solve fails or whose state becomes
non-finite is recorded in ``Trajectory.failed_step`` and, with ``throw=True``, raised.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import math
import sys
import threading
import time as _time
import weakref

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .lean_jit import lean_jit
from ..geometry.body import validate_inertia, violates_triangle
from ..integrators import AbstractIntegrator
from ..integrators import get as _get_method
from ..physics.problems import Problem
from .sharding import batch_mesh, default_devices, gather, is_multiprocess, per_device, shard
from ..geometry.state import State
from ..integrators.stats import StepStats
from .results import Trajectory


class SimulationError(RuntimeError):
    """A step's solve did not converge or the state became non-finite.

    ``step`` is the first failed step (1-based), ``body`` its index in a batch (None for one body)
    and ``reason`` a :class:`RESULTS` member.
    """

    def __init__(self, message: str, step: int | None = None, body: tuple | None = None, reason=None):
        super().__init__(message)
        self.step, self.body, self.reason = step, body, reason


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


@functools.lru_cache(maxsize=None)
def _method_named(name: str) -> AbstractIntegrator:
    return _get_method(name)  # integrators are immutable: one instance per name serves every call


def _resolve_method(method) -> AbstractIntegrator:
    if isinstance(method, str):
        return _method_named(method)
    if not isinstance(method, AbstractIntegrator):
        raise TypeError(f"method must be a registered name or an AbstractIntegrator, got {method!r}")
    return method


def _check_counts(n_steps, save_every):
    if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)):
        raise TypeError(f"n_steps must be an int, got {n_steps!r}")
    if isinstance(save_every, bool) or not isinstance(save_every, (int, np.integer)):
        raise TypeError(f"save_every must be an int, got {save_every!r}")
    if n_steps < 1:
        raise ValueError(f"n_steps must be >= 1, got {n_steps}")
    if save_every < 1:
        raise ValueError(f"save_every must be >= 1, got {save_every}")
    if n_steps % save_every:
        raise ValueError(
            f"n_steps ({n_steps}) must be a multiple of save_every ({save_every}); "
            f"e.g. n_steps={n_steps - n_steps % save_every or save_every}"
        )


def _check_dt(dt):
    if isinstance(dt, (str, bytes)) or (_is_concrete(dt) and not np.issubdtype(np.asarray(dt).dtype, np.number)):
        raise TypeError(f"dt must be a number, got {type(dt).__name__} {dt!r}")
    if jnp.ndim(dt) != 0:  # shapes are static: checked for traced values too
        raise ValueError(f"dt must be a scalar, got shape {jnp.shape(dt)}")
    if _is_concrete(dt):
        d = np.asarray(dt)
        if not np.isfinite(d) or d <= 0:
            raise ValueError(f"dt must be finite and > 0, got {dt}")


def _check_t0(t0):
    if jnp.ndim(t0) != 0 or (_is_concrete(t0) and not np.isfinite(np.asarray(t0, np.float64))):
        raise ValueError(f"t0 must be a finite scalar, got {t0!r}")


def _check_state(state: State, batched: bool):
    R, Pi = state.R, state.Pi
    lead = R.shape[:-2]
    if R.shape[-2:] != (3, 3) or Pi.shape[-1:] != (3,) or Pi.shape[:-1] != lead:
        raise ValueError(f"state must have R of shape (..., 3, 3) and Pi (..., 3); got {R.shape}, {Pi.shape}")
    if not batched and lead:
        raise ValueError(f"simulate takes one body (R of shape (3, 3)); got {R.shape}: use simulate_batch")
    if R.size == 0:
        raise ValueError("empty batch: states0 has no bodies")
    if _is_concrete(R) and _is_concrete(Pi):
        if _checked_before((R, Pi)):
            return
        with jax.ensure_compile_time_eval():  # concrete values inside someone's trace: evaluate now
            finite, err, det_min = np.asarray(_state_defects(R, Pi)).tolist()  # one compiled pass, one transfer
            tol = _orthogonality_tol(R.dtype)
            if not finite or err > tol or det_min <= 0:
                codes = np.asarray(_state_codes(R, Pi, tol))  # only on failure: which body, which defect
                idx = tuple(int(i) for i in np.argwhere(codes > 0)[0])
                _raise_bad_state(int(codes[idx]), idx if lead else None, tol, None if lead else err)
        _remember_checked((R, Pi))


_BAD_STATE = {
    1: "initial state{where} contains NaN or inf",
    2: "initial attitude R{where} is not orthogonal (max|R^T R - 1| {err}); project it with jaxrot.so3.nearest_rotation",
    3: "initial attitude R{where} has det <= 0: it is a reflection, not a rotation",
}


def _orthogonality_tol(dtype):
    return 1e-5 if dtype == jnp.float32 else 1e-8


def _raise_bad_state(code: int, body, tol, err=None):
    """The one message for a bad initial state (host check and traced batch check alike); ``body``:
    the index of the first bad body in a batch, else None."""
    where = "" if body is None else f" of body {body[0] if len(body) == 1 else body}"
    err = f"> {tol:g}" if err is None else f"= {err:.3g} > {tol:g}"
    raise ValueError(_BAD_STATE[code].format(where=where, err=err))


@functools.partial(jax.jit, static_argnums=2)
def _state_codes(R, Pi, tol):
    """Per body: 0 good, 1 non-finite, 2 not orthogonal, 3 a reflection (the first that applies)."""
    finite, err, det = _body_defects(R, Pi)
    return jnp.where(~finite, 1, jnp.where(err > tol, 2, jnp.where(det <= 0, 3, 0)))


def _raise_bad_body(codes, tol):
    """Host callback of a traced batch check: the same ValueError, naming the first bad body."""
    codes = np.asarray(codes)
    if np.any(codes > 0):
        idx = tuple(int(i) for i in np.argwhere(codes > 0)[0])
        _raise_bad_state(int(codes[idx]), idx, tol)


#: the last inputs that passed the value checks, as ((weakrefs to arrays), static extra): JAX arrays
#: are immutable, so an initial state (R, Pi) or moments (J, physical) seen before need no new pass
#: (a loop of calls pays each check once)
_CHECKED: list = []


def _checked_before(arrays: tuple, extra=None) -> bool:
    return any(e == extra and all(r() is a for r, a in zip(refs, arrays)) for refs, e in _CHECKED
               if len(refs) == len(arrays))


def _remember_checked(arrays: tuple, extra=None):
    if all(isinstance(a, jax.Array) for a in arrays):  # NumPy arrays are mutable: never cached
        _CHECKED.insert(0, (tuple(weakref.ref(a) for a in arrays), extra))
        del _CHECKED[16:]


@jax.jit
def _state_defects(R, Pi):
    """(all finite, max |R^T R - 1|, min det R) over any batch, on the device."""
    finite, err, det = _body_defects(R, Pi)
    return jnp.stack([jnp.all(finite).astype(R.dtype), jnp.max(err), jnp.min(det)])


def _body_defects(R, Pi):
    """Per body: finite, max |R^T R - 1|, det R (3x3 closed form); the one formula of both checks."""
    finite = jnp.all(jnp.isfinite(R), axis=(-1, -2)) & jnp.all(jnp.isfinite(Pi), axis=-1)
    err = jnp.max(jnp.abs(jnp.swapaxes(R, -1, -2) @ R - jnp.eye(3, dtype=R.dtype)), axis=(-1, -2))
    det = jnp.sum(R[..., 0, :] * jnp.cross(R[..., 1, :], R[..., 2, :]), axis=-1)
    return finite, err, det


def _check_capability(method, problem: Problem):
    """The one check of a free-only method's capability (a class fact), before anything is traced."""
    if not getattr(method, "torque", True) and not problem.torque.is_free:
        raise ValueError(f"{type(method).__name__} is for torque-free problems (no torque; it declares "
                         f"torque = False); use a torque-capable method (e.g. liemid_ea or buss4) for "
                         f"{type(problem.torque).__name__}")


def _check_problem(problem: Problem):
    if not isinstance(problem, Problem):
        raise TypeError(f"problem must be a jaxrot Problem, got {type(problem).__name__}")
    J = problem.body.J
    physical = bool(problem.body.physical)
    if _is_concrete(J) and not _checked_before((J,), physical):
        validate_inertia(J, physical)
        _remember_checked((J,), physical)


def _traced_checks(problem: Problem, state0: State, dt, t0):
    """``eqx.error_if`` versions of the host checks, for values that are traced (under ``jit``,
    ``grad`` or ``vmap``), with the same messages; works for one body or a leading batch axis."""
    J = problem.body.J
    if not _is_concrete(J):
        bad = jnp.any(J <= 0) | ~jnp.all(jnp.isfinite(J))
        if problem.body.physical:
            bad = bad | jnp.any(violates_triangle(J))
        J = eqx.error_if(J, bad, "principal moments J must be finite, positive and satisfy J_i <= J_j + J_k")
        problem = eqx.tree_at(lambda p: p.body.J, problem, J)
    if not _is_concrete(dt):
        dt = eqx.error_if(dt, ~(jnp.isfinite(dt) & (dt > 0)), "dt must be finite and > 0")
    R, Pi = state0.R, state0.Pi
    if not _is_concrete(t0):  # on Pi, which every output depends on (a free body's states do not on t0)
        Pi = eqx.error_if(Pi, ~jnp.isfinite(t0), "t0 must be a finite scalar")
        state0 = State(R, Pi)
    if (not _is_concrete(Pi) or not _is_concrete(R)) and R.ndim == 3:
        # a batch: a host callback names the first bad body (eqx.error_if's message is fixed)
        tol = _orthogonality_tol(R.dtype)
        jax.debug.callback(functools.partial(_raise_bad_body, tol=tol), _state_codes(R, Pi, tol))
    elif not _is_concrete(Pi) or not _is_concrete(R):
        finite, orth, det_min = _state_defects(R, Pi)  # the host check's computation, staged
        finite = finite > 0
        tol = _orthogonality_tol(R.dtype)
        msg = {c: m.format(where="", err=f"> {tol:g}") for c, m in _BAD_STATE.items()}
        Pi = eqx.error_if(Pi, ~finite, msg[1])
        R = eqx.error_if(R, finite & (orth > tol), msg[2])
        R = eqx.error_if(R, finite & (det_min <= 0), msg[3])
        state0 = State(R, Pi)
    return problem, state0, dt, t0


def _fold(acc: StepStats, s: StepStats) -> StepStats:
    """Running per-frame aggregate: max iterations, all converged, clamp and sub-step counts."""
    return StepStats(
        newton_iters=jnp.maximum(acc.newton_iters, jnp.asarray(s.newton_iters, jnp.int32)),
        converged=acc.converged & s.converged,
        clamped=acc.clamped + jnp.asarray(s.clamped, jnp.int32),
        substeps=acc.substeps + jnp.asarray(s.substeps, jnp.int32),
    )


def _empty_stats() -> StepStats:
    z = jnp.asarray(0, jnp.int32)
    return StepStats(newton_iters=z, converged=jnp.asarray(True), clamped=z, substeps=z)


def _finite(state: State):
    # Pi only: a non-finite R reaches Pi within the same step in every method, and this check
    # runs every step, so it is kept to 3 numbers
    return jnp.isfinite(jnp.sum(state.Pi))


class RESULTS(enum.IntEnum):
    """Why a trajectory stopped being trustworthy: the reason of the first failed step, per body."""

    successful = 0
    #: a nonlinear solve (Newton, Kantorovich sub-stepping) hit its iteration limit
    solve_failed = 1
    #: the state became NaN or inf
    nonfinite_state = 2
    #: energy or momentum drifted beyond the :class:`InvariantMonitor`'s tolerance
    invariant_drift = 3


_REASON_TEXT = {
    RESULTS.solve_failed: "its nonlinear solve did not converge",
    RESULTS.nonfinite_state: "the state became non-finite",
    RESULTS.invariant_drift: "an invariant drifted beyond the monitor's tolerance",
}


class InvariantMonitor(eqx.Module):
    """Flag a step whose energy (kinetic + potential) or, without torque, world momentum has moved
    more than a relative tolerance from its initial value (``None`` switches a check off).

    Example::

        jaxrot.simulate("split4_231", p, 0.1, 1000, monitor=InvariantMonitor(energy_rtol=1e-3))
    """

    energy_rtol: float | None = None
    momentum_rtol: float | None = None


def _invariants(problem, t, state):
    E = problem.body.kinetic_energy(state.Pi)
    V = problem.torque.potential(t, state.R)
    return (E if V is None else E + V), state.L


def _step_reason(problem, t, new_state, stats, ref, monitor):
    reason = jnp.where(~_finite(new_state), RESULTS.nonfinite_state,
                       jnp.where(~stats.converged, RESULTS.solve_failed, RESULTS.successful))
    if monitor is not None and ref is not None:
        E0, L0 = ref
        E, L = _invariants(problem, t, new_state)
        drift = jnp.asarray(False)
        if monitor.energy_rtol is not None:
            drift = drift | (jnp.abs(E - E0) > monitor.energy_rtol * jnp.abs(E0))
        if monitor.momentum_rtol is not None and problem.torque.is_free:
            drift = drift | (jnp.linalg.norm(L - L0) > monitor.momentum_rtol * jnp.linalg.norm(L0))
        reason = jnp.where((reason == RESULTS.successful) & drift, RESULTS.invariant_drift, reason)
    return reason.astype(jnp.int32)


def _run_frames(method, problem, carry, dt, t0, n_frames: int, save_every: int, unroll: int, monitor=None,
                n_valid=None, reverse_differentiable: bool = True, columns: bool = False):
    """Scan ``n_frames`` frames of ``save_every`` steps from
    ``carry = (state, aux, k, failed, reason, ref)`` (``ref``: initial invariants for the monitor).
    With a (traced) ``n_valid``, frames from ``n_valid`` on are skipped by ``lax.cond`` (carry
    unchanged; their outputs are to be dropped), so one compiled length serves any count; with
    ``reverse_differentiable=False`` the frames run in a ``fori_loop`` to ``n_valid`` writing into
    ``n_frames``-long outputs instead (no per-frame conditional: the chunk of a 10-step call
    200/222 -> 154/153 us on CPU, A/B in separate processes; forward-mode only, as any while loop),
    a frame's outputs packed in one row (a 1-body run of 20 480 steps, alternated in one process
    against the code before: saving every step 2.64 -> 1.23 us per step, every 2nd 1.36 -> 0.87,
    one frame 0.63 -> 0.48). ``columns=True`` (with it): the outputs as :class:`_Columns`, one
    ``n_frames`` buffer per number, unpacked by :func:`_join`."""

    def inner(c, _):
        (state, aux, k, failed, reason, ref), acc = c
        t = t0 + k.astype(dt.dtype) * dt  # no accumulated round-off in time
        new_state, aux, stats = method.step(problem, t, state, aux, dt)
        k = k + 1
        r = _step_reason(problem, t + dt, new_state, stats, ref, monitor)
        first = (failed < 0) & (r != RESULTS.successful)
        failed = jnp.where(first, k, failed)
        reason = jnp.where(first, r, reason)
        return ((new_state, aux, k, failed, reason, ref), _fold(acc, stats)), None

    # rematerialised under reverse-mode AD: the backward pass keeps one carry per frame, not every
    # step's residuals for the whole chunk (skipped frames included), at the cost of one re-run
    @jax.checkpoint
    def frame(c):
        (c, acc), _ = lax.scan(inner, (c, _empty_stats()), None, length=save_every, unroll=min(unroll, save_every))
        return c, (c[0], t0 + c[2].astype(dt.dtype) * dt, acc)

    def skip(c):
        return c, (c[0], t0 + c[2].astype(dt.dtype) * dt, _empty_stats())

    def outer(c, i):
        if n_valid is None:
            return frame(c)
        return lax.cond(i < n_valid, frame, skip, c)

    if n_valid is not None and not reverse_differentiable:
        # a frame's outputs packed into one row of one buffer (integers bit-cast, exact): one write a
        # frame keeps the loop body a short sequence, which XLA's CPU runtime executes inline instead
        # of dispatching it to its thread pool as it does for >8 operations touching >512-byte buffers
        shapes = jax.eval_shape(lambda c: frame(c)[1], carry)
        pack, unpack, width = _row_packing(shapes, dt.dtype)
        # a 1-step frame in a loop of a count XLA cannot see (n_valid >= 1 inside), so it is not inlined
        # into the body either (a longer frame's scan stays a loop, and runs faster than this one)
        trips = jnp.where(n_valid > 0, save_every, 0)

        def steps(c):
            if unroll > 1 or save_every > 1:
                return frame(c)
            c, acc = lax.fori_loop(0, trips, lambda _, ca: inner(ca, None)[0], (c, _empty_stats()))
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
            return carry, _Columns(buf, (treedef, tuple((v.shape, jnp.dtype(v.dtype)) for v in leaves)))
        return carry, unpack(buf)

    if n_valid is None or n_frames % _BLOCK or n_frames == _BLOCK:
        return lax.scan(outer, carry, jnp.arange(n_frames, dtype=jnp.int32))

    # blocks of _BLOCK frames, a whole block skipped by one cond: a short run in a long chunk pays
    # ~n_frames/_BLOCK skipped conds, not n_frames (a 1-frame call: 2.9 ms -> see the README)
    def block(c, b):
        idx = b * _BLOCK + jnp.arange(_BLOCK, dtype=jnp.int32)

        def run(c):
            return lax.scan(outer, c, idx)

        def skip_block(c):
            c, y = skip(c)
            return c, jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (_BLOCK,) + jnp.shape(x)), y)

        return lax.cond(b * _BLOCK < n_valid, run, skip_block, c)

    carry, ys = lax.scan(block, carry, jnp.arange(n_frames // _BLOCK, dtype=jnp.int32))
    return carry, jax.tree_util.tree_map(lambda x: x.reshape((n_frames,) + x.shape[2:]), ys)


_BLOCK = 32


def _row_packing(shapes, dtype):
    """``(pack, unpack, width)``: a pytree of arrays of ``shapes`` as one row of ``dtype`` numbers and
    back (for a leading axis of rows); integers and flags are bit-cast through the same-width integer
    (exact), other floating types converted."""
    leaves, treedef = jax.tree_util.tree_flatten(shapes)
    dtype = jnp.dtype(dtype)
    as_int = jnp.int64 if dtype.itemsize == 8 else jnp.int32
    sizes = [int(np.prod(v.shape)) for v in leaves]

    def bits(v):
        return not jnp.issubdtype(v.dtype, jnp.floating)

    def pack(tree):
        return jnp.concatenate([
            lax.bitcast_convert_type(jnp.ravel(v).astype(as_int), dtype) if bits(v) else jnp.ravel(v).astype(dtype)
            for v in jax.tree_util.tree_leaves(tree)])

    def unpack(rows):
        out, k = [], 0
        for v, n in zip(leaves, sizes):
            x = rows[:, k:k + n]
            x = (lax.bitcast_convert_type(x, as_int) if bits(v) else x).astype(v.dtype)
            out.append(x.reshape(rows.shape[:1] + v.shape))
            k += n
        return jax.tree_util.tree_unflatten(treedef, out)

    return pack, unpack, sum(sizes)


class _Columns(eqx.Module):
    """A short run's frames as one buffer per number (``layout``: the frame's tree and leaf shapes).

    XLA's CPU runtime runs a program inline only if it has at most 8 operations or touches no buffer
    over 512 bytes; otherwise it goes through its thread pool, ~30-50 us a program on the development
    machine. 64 frames of one number are 512 bytes in float64, so a short run's whole program qualifies
    where a (frames, 17) buffer would not (the 10-step call 200 -> 161 us, alternated in one process)."""

    cols: tuple
    layout: tuple = eqx.field(static=True)

    def unpack(self):
        treedef, specs = self.layout
        shapes = jax.tree_util.tree_unflatten(treedef, [jax.ShapeDtypeStruct(sh, d) for sh, d in specs])
        return _row_packing(shapes, self.cols[0].dtype)[1](jnp.stack(self.cols, axis=1))


#: frames of a run short enough for :class:`_Columns` (one compiled program for any such run)
SHORT_RUN_FRAMES = 64


#: frames per compiled chunk of :func:`simulate`: a run is a sequence of such chunks, the last one
#: partly skipped, so a new ``n_steps`` (same ``save_every``) reuses the compiled chunk
FRAMES_PER_CHUNK = 1024


@lean_jit
def _simulate_chunk(method, problem, carry, dt, t0, n_valid, save_every, unroll, monitor=None):
    # only for concrete inputs (traced calls take _simulate_exact), so never reverse-differentiated
    return _run_frames(method, problem, carry, dt, t0, FRAMES_PER_CHUNK, save_every, unroll, monitor, n_valid,
                       reverse_differentiable=False)


@lean_jit
def _simulate_short(method, problem, state0, dt, t0, n_valid, save_every, unroll, monitor=None):
    """A run of at most :data:`SHORT_RUN_FRAMES` frames: the initial carry and the frames in one
    program, its frames as :class:`_Columns` (one dispatch plus the join)."""
    carry = _init_carry(method, problem, state0, dt, t0, monitor)
    return _run_frames(method, problem, carry, dt, t0, SHORT_RUN_FRAMES, save_every, unroll, monitor, n_valid,
                       reverse_differentiable=False, columns=True)


@lean_jit
def _simulate_exact(method, problem, state0, dt, t0, n_frames: int, save_every: int, unroll: int, monitor=None):
    """The initial carry and a scan of exactly ``n_frames`` frames (for calls inside a trace; jitted,
    so repeated calls with one configuration inside a trace are traced once)."""
    carry = _init_carry(method, problem, state0, dt, t0, monitor)
    return _run_frames(method, problem, carry, dt, t0, n_frames, save_every, unroll, monitor)


def _run_chunks(run_chunk, carry, n_frames: int, per_chunk: int, report=None):
    """All frames in chunks of ``per_chunk`` frames, ``run_chunk(carry, n_valid) -> (carry, out)``
    being one compiled program for any count: ``(carry, chunk outputs, valid frames of each)``;
    :func:`_join` cuts and joins them. Shared by :func:`simulate` and :func:`simulate_batch`."""
    parts, nvs = [], []
    for start in range(0, n_frames, per_chunk):
        nv = min(per_chunk, n_frames - start)
        carry, part = run_chunk(carry, np.asarray(nv, np.int32))
        parts.append(part)
        nvs.append(nv)
        if report is not None:
            jax.block_until_ready(part)
            report(start + nv)
    return carry, tuple(parts), tuple(nvs)


@functools.partial(jax.jit, static_argnames=("nvs", "batched"))
def _join(state0, t0, parts, nvs, failed, reason, batched=False):
    """The trajectory from the chunks' outputs: valid frames cut, joined, the initial frame
    prepended — one dispatch (a tiny program per distinct ``nvs``) instead of dozens of eager ops;
    ``batched``: every leaf has a leading body axis."""
    parts = tuple(p.unpack() if isinstance(p, _Columns) else p for p in parts)

    def one(state0, parts, failed, reason):
        states, ts, stats = jax.tree_util.tree_map(
            lambda *xs: jnp.concatenate([x[:nv] for x, nv in zip(xs, nvs)], axis=0), *parts)
        return _assemble(state0, t0, states, ts, stats, failed, reason)

    return jax.vmap(one)(state0, parts, failed, reason) if batched else one(state0, parts, failed, reason)


def _init_carry(method, problem, state0, dt, t0, monitor=None):
    aux = method.init(problem, t0, state0, dt)
    ref = _invariants(problem, t0, state0) if monitor is not None else None
    return (state0, aux, jnp.asarray(0, jnp.int32), jnp.asarray(-1, jnp.int32),
            jnp.asarray(RESULTS.successful, jnp.int32), ref)


@lean_jit
def _init_carry_jit(method, problem, state0, dt, t0, monitor=None):
    return _init_carry(method, problem, state0, dt, t0, monitor)


def _assemble(state0, t0, states, ts, stats, failed, reason):
    R = jnp.concatenate([state0.R[None], states.R], axis=0)
    Pi = jnp.concatenate([state0.Pi[None], states.Pi], axis=0)
    ts = jnp.concatenate([jnp.reshape(t0, (1,)), ts])
    return Trajectory(ts=ts, states=State(R, Pi), stats=stats, failed_step=failed, result=reason)


def _failure(f: np.ndarray, result, where: str) -> SimulationError | None:
    """The :class:`SimulationError` for per-body first-failed steps ``f`` (-1: none), or None."""
    if not np.any(f >= 0):
        return None
    idx = np.argwhere(f >= 0)[0]
    step = int(f[tuple(idx)])
    body = tuple(int(i) for i in idx) if f.ndim else None
    reason = RESULTS(int(np.asarray(result)[tuple(idx)])) if result is not None else RESULTS.solve_failed
    n_bad = int(np.sum(f >= 0))
    return SimulationError(
        f"{where}step {step}{f' (body {body}' + (f', and {n_bad - 1} more' if n_bad > 1 else '') + ')' if body else ''}"
        f" failed: {_REASON_TEXT[reason]} ({reason.name}). Reduce dt, use a safeguarded method "
        "(e.g. AdaptiveKantorovich), or pass throw=False to get the flags.",
        step=step, body=body, reason=reason,
    )


_TRACED = threading.local()


def _raise_traced_failure(failed, result, where):
    """Host callback of a traced run: raise the same :class:`SimulationError` as a plain call (JAX
    wraps it in its runtime error under ``jit``; :func:`simulation_errors` unwraps it)."""
    err = _failure(np.asarray(failed), None if result is None else np.asarray(result), where)
    if err is not None:
        _TRACED.error = err
        raise err


@contextlib.contextmanager
def simulation_errors():
    """Re-raise a failed step detected inside ``jax.jit`` (which JAX reports as its own runtime
    error, with the message inside) as the :class:`SimulationError` itself, with ``.step``,
    ``.body`` and ``.reason``.

    Example::

        with jaxrot.simulation_errors():
            jax.jit(lambda s: jaxrot.simulate("liemid_ea", p, 0.5, 10, state0=s).final)(s0)
    """
    _TRACED.error = None
    try:
        yield
    except jax.errors.JaxRuntimeError as e:
        err = getattr(_TRACED, "error", None)
        if err is not None and str(err) in str(e):
            raise err from e
        raise
    finally:
        _TRACED.error = None


def _raise_failures(failed, result, where: str = ""):
    """Raise the :class:`SimulationError` of the first failed step, if any: at once for concrete
    flags, from a host callback when the run is traced (under jit/grad/vmap; same message)."""
    if _is_concrete(failed):
        # every process sees every body's flag (a collective under jax.distributed)
        err = _failure(gather(failed), None if result is None else gather(result), where)
        if err is not None:
            raise err
    else:
        jax.debug.callback(functools.partial(_raise_traced_failure, where=where), failed, result)


def _raise_or_flag(traj: Trajectory, throw: bool, where: str = "") -> Trajectory:
    if throw:
        _raise_failures(traj.failed_step, traj.result, where)
    return traj


def _provenance(traj: Trajectory, method, problem: Problem, dt, n_steps, save_every, **extra) -> Trajectory:
    """Record how ``traj`` was made (strings; a traced dt is recorded as such)."""
    name = method if isinstance(method, str) else type(method).__name__
    if isinstance(dt, (int, float)):
        d = float(dt)
    else:
        d = np.asarray(dt).reshape(())[()] if _is_concrete(dt) and np.size(dt) == 1 else "traced"  # shortest repr
    items = _provenance_items(name, problem.name or "(unnamed)", str(d), n_steps, save_every,
                              str(traj.states.R.dtype), tuple(sorted(extra.items())))
    # traj was just made by _join's unflatten and is seen by no one else: set the static field as
    # that unflatten does, not by dataclasses.replace (a second __init__: 20% of a small call's Python, cProfile of 300 calls)
    object.__setattr__(traj, "provenance", items)
    return traj


@functools.lru_cache(maxsize=256)
def _provenance_items(method, problem, dt, n_steps, save_every, dtype, extra) -> tuple:
    import jaxlib

    from ..version import __version__

    info = dict(method=method, problem=problem, dt=dt, n_steps=n_steps, save_every=save_every, dtype=dtype,
                jaxrot=__version__, jax=jax.__version__, jaxlib=jaxlib.__version__, **dict(extra))
    return tuple(sorted((k, str(v)) for k, v in info.items()))


def cast(tree, dtype):
    """``tree`` (a Problem, State, RigidBody, ...) with every floating-point array leaf cast to ``dtype``.

    ``simulate`` runs in the dtype of the initial state and casts the problem's data to it, so
    ``simulate(m, cast(problem, jnp.float32), ...)`` is a float32 run.
    """
    def one(x):
        if isinstance(x, (jax.Array, np.ndarray)) and jnp.issubdtype(x.dtype, jnp.floating) and x.dtype != dtype:
            return jnp.asarray(x, dtype)
        return x

    return jax.tree_util.tree_map(one, tree)


@functools.lru_cache(maxsize=64)
def _scalar_of_float(x: float, dtype) -> jax.Array:
    with jax.ensure_compile_time_eval():  # concrete even when first made inside someone's trace
        return jnp.asarray(x, dtype)


def _scalar(x, dtype):
    """``jnp.asarray(x, dtype)``; a Python float's device array is reused (arrays are immutable;
    creating one costs ~27 us, a tenth of a small simulate call)."""
    if type(x) in (float, int):
        return _scalar_of_float(x, jnp.dtype(dtype))
    return jnp.asarray(x, dtype)


def _prepare(method, problem, state0, dt, t0, n_steps, save_every, batched):
    method = _resolve_method(method)
    _check_problem(problem)
    _check_capability(method, problem)
    _check_counts(n_steps, save_every)
    _check_dt(dt)
    state0 = problem.state0 if state0 is None else state0
    if not isinstance(state0, State):
        raise TypeError(f"state0 must be a jaxrot State, got {type(state0).__name__}")
    _check_state(state0, batched)
    _check_t0(t0)
    dtype = state0.R.dtype
    if state0.Pi.dtype != dtype:
        raise TypeError(f"state0.R is {dtype} but state0.Pi is {state0.Pi.dtype}; pass both in one dtype "
                        "(jaxrot.cast(state0, dtype))")
    dt, t0 = _scalar(dt, dtype), _scalar(t0, dtype)
    return method, state0, dt, t0, _system(problem, dtype)  # the run's dtype is the state's; the scenario stays out


#: (problem, dtype, its system cast to dtype), most recent first: a loop of calls on one problem
#: builds and casts its System once (14% of a small call's Python, cProfile of 300 calls)
_SYSTEMS: list = []


def _system(problem: Problem, dtype):
    for p, d, system in _SYSTEMS:
        if p is problem and d == dtype:
            return system
    system = cast(problem.system, dtype)
    leaves = jax.tree_util.tree_leaves((problem.body, problem.torque))
    if not any(isinstance(x, np.ndarray) or not _is_concrete(x) for x in leaves):  # NumPy is mutable, tracers local
        _SYSTEMS.insert(0, (problem, dtype, system))
        del _SYSTEMS[8:]
    return system


def _progress_report(run_chunk, carry, n_frames, save_every, n_steps):
    """For :func:`_run_chunks`: compiles ``run_chunk`` first, reporting that as its own phase, and
    returns the report of steps done, elapsed and remaining time (stderr)."""
    print("  compiling ...", end="", file=sys.stderr, flush=True)
    start = _time.perf_counter()
    # compile by running an empty chunk (every frame skipped): the timed phase below is pure running
    jax.block_until_ready(run_chunk(carry, jnp.asarray(0, jnp.int32)))
    print(f" {_time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    start = _time.perf_counter()

    def report(done):
        el = _time.perf_counter() - start
        print(f"\r  {done * save_every}/{n_steps} steps ({100 * done / n_frames:5.1f}%), {el:.1f} s running, "
              f"~{el * (n_frames - done) / done:.1f} s left", end="" if done < n_frames else "\n",
              file=sys.stderr, flush=True)

    return report


def simulate(
    method,
    problem: Problem,
    dt,
    n_steps: int,
    *,
    save_every: int = 1,
    state0: State | None = None,
    t0=0.0,
    throw: bool = True,
    progress: bool = False,
    unroll: int = 1,
    monitor: InvariantMonitor | None = None,
) -> Trajectory:
    """Integrate one body for ``n_steps`` steps of size ``dt``, saving every ``save_every`` steps.

    Args:
      method: a registered name (``"buss2p"``) or an integrator instance.
      problem: a :class:`~jaxrot.problems.Problem` (body, torque, initial state).
      dt: step size (> 0); may be traced (differentiable).
      n_steps: number of steps (a multiple of ``save_every``).
      save_every: steps between saved frames.
      state0: initial state (default ``problem.state0``).
      t0: initial time.
      throw: raise :class:`SimulationError` naming the first failed step; ``False`` returns the
        flags in ``Trajectory.failed_step`` / ``stats.converged``.
      progress: print compilation time, then progress after each chunk of 1024 frames, to stderr.
      unroll: inner-scan unroll factor (a speed knob for tiny problems on CPU).
      monitor: an :class:`InvariantMonitor` flagging energy/momentum drift as a failure
        (``RESULTS.invariant_drift``); off by default.

    Returns:
      :class:`~jaxrot.driver.results.Trajectory` with ``n_steps // save_every + 1`` frames.

    Example::

        traj = simulate("buss2p", jaxrot.problems.get("fast_top"), 1e-3, 1000, save_every=10)
    """
    given_method, given_problem, given_dt = method, problem, dt
    method, state0, dt, t0, problem = _prepare(method, problem, state0, dt, t0, n_steps, save_every, False)
    problem, state0, dt, t0 = _traced_checks(problem, state0, dt, t0)
    n_steps, save_every = int(n_steps), int(save_every)  # NumPy integers would be traced by filter_jit
    n_frames = n_steps // save_every
    if not all(map(_is_concrete, jax.tree_util.tree_leaves((method, problem, state0, dt, t0, monitor)))):
        # inside someone's jit/grad/vmap the caller's program is compiled for this call anyway: one
        # scan of exactly n_frames, not chunks of 1 024 frames with the unused ones skipped (which
        # a long traced run would also inline chunk by chunk)
        carry, part = _simulate_exact(method, problem, state0, dt, t0, n_frames, save_every, unroll, monitor)
        parts, nvs = (part,), (n_frames,)
    elif n_frames <= SHORT_RUN_FRAMES and not progress:  # one small program: the initial carry and the frames
        carry, part = _simulate_short(method, problem, state0, dt, t0, np.asarray(n_frames, np.int32), save_every,
                                      unroll, monitor)
        parts, nvs = (part,), (n_frames,)
    else:  # the initial carry, then the repeated 1 024-frame chunk
        carry = _init_carry_jit(method, problem, state0, dt, t0, monitor)

        def run_chunk(c, nv):
            return _simulate_chunk(method, problem, c, dt, t0, nv, save_every, unroll, monitor)

        report = _progress_report(run_chunk, carry, n_frames, save_every, n_steps) if progress else None
        carry, parts, nvs = _run_chunks(run_chunk, carry, n_frames, FRAMES_PER_CHUNK, report)
    traj = _join(state0, t0, parts, nvs, carry[3], carry[4])
    traj = _provenance(traj, given_method, given_problem, given_dt, n_steps, save_every)
    return _raise_or_flag(traj, throw)


#: bodies per block on CPU: a block's state and intermediates stay in cache across its whole time
#: loop. One run, buss2p, 10^5 bodies, 2-core CPU, body-steps/s: 256 -> 1.29e7, 512 -> 1.27e7,
#: 1 024 -> 1.22e7, 4 096 -> 9.4e6, unblocked 6.8e6 (the README's table uses 512)
CPU_BLOCK = 512


def _auto_block(block, part: int, devices) -> int | None:
    """The block size to use: ``None`` (one vmap over each device's part) on accelerators and for
    parts that fit one block; else ``block`` (``"auto"``: :data:`CPU_BLOCK` on CPU devices, each
    device blocking its own part)."""
    if isinstance(block, str) and block == "auto":
        block = CPU_BLOCK if all(d.platform == "cpu" for d in devices) else None
    elif block is not None and (isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1):
        raise ValueError(f"block_size must be a positive int, None or 'auto', got {block!r}")
    if block is None or block >= part:
        return None
    return int(block)


def _blocks(fn, block, *trees):
    """``fn(*trees)`` for trees with a leading batch axis, run as ``lax.map`` over blocks of
    ``block`` bodies (the last block padded by repeating the last body; padding dropped)."""
    if block is None:
        return fn(*trees)
    arrays, static = eqx.partition(trees, eqx.is_array)
    B = jax.tree_util.tree_leaves(arrays)[0].shape[0]
    nb = -(-B // block)

    def split(x):
        x = jnp.concatenate([x, jnp.repeat(x[-1:], nb * block - B, axis=0)], axis=0)
        return x.reshape((nb, block) + x.shape[1:])

    out = lax.map(lambda a: fn(*eqx.combine(a, static)), jax.tree_util.tree_map(split, arrays))
    return jax.tree_util.tree_map(lambda x: x.reshape((nb * block,) + x.shape[2:])[:B], out)


def _blocked(fn, block, mesh, *trees):
    """:func:`_blocks` on each device's part of the batch (:func:`per_device`: every device runs
    its own part, blocks and loops with no communication)."""
    return per_device(lambda *t: _blocks(fn, block, *t), mesh)(*trees)


@lean_jit
def _batch_init(method, problem, state0, dt, t0, problem_axis, monitor=None):
    """The initial carry of every body (vmapped :func:`_init_carry`)."""
    return jax.vmap(lambda p, s: _init_carry(method, p, s, dt, t0, monitor), in_axes=(problem_axis, 0))(problem, state0)


@lean_jit
def _batch_chunk(method, problem, carry, dt, t0, n_valid, n_frames, save_every, problem_axis, unroll, block=None,
                 monitor=None, mesh=None):
    """``n_frames`` frames of every body (frames from ``n_valid`` on skipped), cache-blocked when
    ``block`` is set. The compiled program depends on ``n_frames`` (fixed per batch size), not on
    the run's length."""

    def one(p, c):
        return _run_frames(method, p, c, dt, t0, n_frames, save_every, unroll, monitor, n_valid)

    if problem_axis is None:
        return _blocked(lambda c: jax.vmap(lambda c1: one(problem, c1))(c), block, mesh, carry)
    return _blocked(lambda p, c: jax.vmap(one)(p, c), block, mesh, problem, carry)


#: saved-frame memory of one compiled chunk of a batch: a chunk holds as many frames (a power of
#: two, at most :data:`FRAMES_PER_CHUNK`) as fit, so 10^6 bodies run one frame per chunk
BATCH_CHUNK_BYTES = 1 << 22


def _batch_frames_per_chunk(batch: int, itemsize: int) -> int:
    per_frame = batch * 16 * itemsize  # R (9), Pi (3), t and the frame's stats
    f = int(max(1, min(FRAMES_PER_CHUNK, BATCH_CHUNK_BYTES // per_frame)))
    return 1 << (f.bit_length() - 1)


def _batch_frames(method, problem, state0, dt, t0, n_frames, save_every, problem_axis, unroll, block, monitor,
                  mesh=None):
    """Every frame of every body, in chunks of a length fixed by the batch size (a new ``n_steps``
    reuses the compiled chunk): ``(carry, chunk outputs, valid frames of each)``."""
    carry = _batch_init(method, problem, state0, dt, t0, problem_axis, monitor)
    F = _batch_frames_per_chunk(state0.R.shape[0], jnp.dtype(dt.dtype).itemsize)
    return _run_chunks(lambda c, nv: _batch_chunk(method, problem, c, dt, t0, nv, F, save_every, problem_axis,
                                                  unroll, block, monitor, mesh), carry, n_frames, F)


def stack_problems(problems: list[Problem]) -> Problem:
    """Stack same-structured problems (e.g. different J or initial states) along a batch axis."""
    if not problems:
        raise ValueError("stack_problems needs at least one problem")
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *problems)


def simulate_batch(
    method,
    problems: Problem,
    dt,
    n_steps: int,
    *,
    states0: State | None = None,
    save_every: int = 1,
    t0=0.0,
    throw: bool = True,
    devices=None,
    unroll: int = 1,
    block_size="auto",
    monitor: InvariantMonitor | None = None,
) -> Trajectory:
    """Integrate a batch of bodies at once (``vmap``), sharded over ``devices``.

    Either ``states0`` is a :class:`State` with a leading batch axis (all bodies share ``problems``),
    or ``problems`` is a stacked problem (:func:`stack_problems`) and ``states0`` is None. The batch
    is split over all devices (or ``devices``) with ``jax.sharding``; results are identical to a
    single-device run. Returns a :class:`Trajectory` whose leaves have a leading batch axis.
    Under ``jax.distributed`` (several processes) every process calls it with the whole batch, each
    computes its devices' shards, and :func:`jaxrot.gather` collects the result on every process.

    ``block_size``: on CPU devices each device's part of the batch runs in blocks of this many
    bodies (``lax.map`` over blocks, each scanned over all its steps), so a block's data stay in
    cache: ``"auto"`` (default) uses :data:`CPU_BLOCK` on CPU devices and no blocking on
    accelerators; ``None`` never blocks. Results are identical to the unblocked run.

    On a multi-core CPU, make the cores separate JAX devices (:func:`jaxrot.use_cpu_cores`, right
    after importing JAX) and the batch is split over them: XLA runs one device's program on one
    core, where a single device spreads each small kernel over the cores and gains nothing from
    the second (buss2p, 2 cores, 16 384 bodies: 2.2e7 body-steps/s on one device, the same pinned
    to one core; 4.2e7 on two devices in blocks of 512).
    """
    given_method, given_problem = method, problems
    stacked = states0 is None
    if stacked and isinstance(problems, Problem) and jnp.ndim(problems.body.J) != 2:
        raise ValueError("without states0, problems must be stacked (leading batch axis): use stack_problems")
    if not stacked and isinstance(states0, State) and jnp.ndim(states0.R) != 3:
        raise ValueError(f"states0 must have one leading batch axis, got R of shape {jnp.shape(states0.R)}")
    # the one input check (shared with simulate and final_state)
    method, states0, dt, t0, system = _prepare(method, problems, states0, dt, t0, n_steps, save_every, True)
    n_steps, save_every = int(n_steps), int(save_every)
    batch = states0.R.shape[0]
    system, states0, dt, t0 = _traced_checks(system, states0, dt, t0)
    problem_axis = 0 if stacked else None  # the system's array leaves are batched with the states
    devices = default_devices(devices)
    batched = (system, states0) if stacked else states0
    pad = (-batch) % len(devices)
    if is_multiprocess(devices) and not all(_is_concrete(x) for x in jax.tree_util.tree_leaves(batched)):
        raise ValueError("under jax.distributed simulate_batch takes concrete (not traced) initial states: "
                         "every process passes the whole batch")
    if len(devices) > 1:
        batched = shard(batched, devices, pad)
    system, states0 = batched if stacked else (system, batched)
    block = _auto_block(block_size, (batch + pad) // len(devices), devices)
    carry, parts, nvs = _batch_frames(method, system, states0, dt, t0, n_steps // save_every, save_every,
                                      problem_axis, unroll, block, monitor, batch_mesh(devices))
    traj = _join(states0, t0, parts, nvs, carry[3], carry[4], batched=True)
    if pad:
        traj = jax.tree_util.tree_map(lambda x: x[:batch], traj)
    traj = _provenance(traj, given_method, given_problem, dt, n_steps, save_every, batch=batch)
    return _raise_or_flag(traj, throw, "batched simulation: ")


def run_steps(method, problem, state0, dt, t0, n_steps):
    """The unchecked step loop: ``(state after n_steps, first failed step or -1, its RESULTS code)``;
    ``n_steps`` may be traced. For use inside one's own ``jit``/``vmap`` (the maps do); callers
    validate inputs."""
    def body(k, c):
        state, aux, failed, reason = c
        t = t0 + k.astype(dt.dtype) * dt
        new, aux, stats = method.step(problem, t, state, aux, dt)
        r = _step_reason(problem, t + dt, new, stats, None, None)
        first = (failed < 0) & (r != RESULTS.successful)
        return new, aux, jnp.where(first, k + 1, failed), jnp.where(first, r, reason)

    aux = method.init(problem, t0, state0, dt)
    init = (state0, aux, jnp.asarray(-1, jnp.int32), jnp.asarray(RESULTS.successful, jnp.int32))
    state, _, failed, reason = lax.fori_loop(0, n_steps, body, init)
    return state, failed, reason


_final_state_jit = lean_jit(run_steps)


@lean_jit
def _final_state_batch_jit(method, problem, states0, dt, t0, n_steps, block=None):
    return _blocks(jax.vmap(lambda s: run_steps(method, problem, s, dt, t0, n_steps)), block, states0)


def final_state(method, problem: Problem, dt, n_steps: int, *, state0: State | None = None, t0=0.0,
                throw: bool = True) -> State:
    """Only the state after ``n_steps`` steps, compiled once for every ``n_steps`` and ``dt``.

    The step count is a traced loop bound, so convergence studies over many step counts compile
    once; the price is that it supports forward-mode but not reverse-mode differentiation (use
    :func:`simulate` for ``jax.grad``). ``state0`` may carry a leading batch axis (bodies vmapped,
    one compilation for every batch of that size; on a CPU in blocks of :data:`CPU_BLOCK` bodies,
    as :func:`simulate_batch`).
    """
    batched = state0 is not None and jnp.ndim(state0.R) == 3
    method, state0, dt, t0, problem = _prepare(method, problem, state0, dt, t0, n_steps, 1, batched)
    problem, state0, dt, t0 = _traced_checks(problem, state0, dt, t0)
    if batched:  # cache-blocked on CPU, as simulate_batch on one device
        block = _auto_block("auto", state0.R.shape[0], jax.devices()[:1])
        state, failed, reason = _final_state_batch_jit(method, problem, state0, dt, t0,
                                                       jnp.asarray(n_steps, jnp.int32), block)
    else:
        state, failed, reason = _final_state_jit(method, problem, state0, dt, t0, jnp.asarray(n_steps, jnp.int32))
    if throw:
        _raise_failures(failed, reason, "")
    return state
