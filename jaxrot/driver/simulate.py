"""The one entry point: :func:`simulate` — one body or a batch, any step-size controller, any executor.

A run is checked (:mod:`~jaxrot.driver.checks`), described by a
:class:`~jaxrot.driver.executors.base.RunSpec` (constant steps) or
:class:`~jaxrot.driver.executors.base.AttemptSpec` (error-controlled steps), carried out by an
executor (:mod:`~jaxrot.driver.executors`) through the loop (:mod:`~jaxrot.driver.loop`,
:mod:`~jaxrot.driver.attempts`), and made into one :class:`~jaxrot.Trajectory`
(:func:`~jaxrot.driver.integrate.trajectory`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..geometry.state import State
from ..integrators import AbstractPair, EmbeddedPair
from ..physics.problems import Problem
from ..physics.stacking import stack_problems
from ..physics.torques import FreeTorque
from .adjoint import adjoint_for, adjoint_of
from .arguments import controller as _controller, counts as _counts, saveat_of as _saveat
from .checks import (cast, check_capability, check_problem, checked_state0, checked_traced_times,
                     invalid_inputs, is_concrete, prepare, resolve_method, scalar, system_of, traced_checks)
from .dense import checkpoint_interval
from .events import check_event
from .executors import choose_executor
from .executors.base import AttemptSpec, RunSpec
from .failures import raise_failures
from .global_error import GlobalError, calibrate, raised_to_floor
from .integrate import Finish, trajectory, trajectory_of
from .lean_jit import Bound
from .loop import InvariantMonitor
from .precision import full_precision
from . import replay
from .progress import preparing, progress_report, reporting, span_report
from .results import Provenance, Trajectory, invalid_marked
from .saveat import SaveAt
from .tolerance import reachable_over_span, turned_angle, turning_angle, warn_turned

__all__ = ["simulate", "stack_problems", "cast", "InvariantMonitor"]


def _name(method) -> str:
    if isinstance(method, str):
        return method
    if isinstance(method, tuple):
        return "(" + ", ".join(m if isinstance(m, str) else type(m).__name__ for m in method) + ")"
    return type(method).__name__


@functools.lru_cache(maxsize=256)
def _provenance(method, problem, dt, n_steps, every, dtype, extra) -> Provenance:
    import jaxlib

    from ..version import __version__

    return Provenance(dict(method=method, problem=problem, dt=dt, n_steps=n_steps, save_every=every, dtype=dtype,
                           jaxrot=__version__, jax=jax.__version__, jaxlib=jaxlib.__version__, **dict(extra)))


def _tol_label(x):
    """A tolerance as the provenance keeps it (hashable): the number, or the range of per-body values."""
    if isinstance(x, (int, float)) or x is None:
        return x
    if not is_concrete(x):
        return "traced"
    v = np.asarray(x, np.float64)
    return float(v) if v.ndim == 0 else f"per body ({v.size}): {v.min():g} to {v.max():g}"


def _dt_label(dt) -> str:
    if dt is None:
        return "None"
    if isinstance(dt, (int, float)):
        return str(float(dt))
    return str(np.asarray(dt).reshape(())[()]) if is_concrete(dt) and np.size(dt) == 1 else "traced"


@full_precision
def simulate(method, problem: Problem, dt=None, n_steps: int | None = None, *, t0=0.0, t1=None, state0=None,
             stepsize=None, saveat: SaveAt | None = None, event=None, adjoint=None, executor=None, progress=None,
             throw: bool = True, monitor: InvariantMonitor | None = None, unroll: int = 1,
             save_every: int | None = None, on_invalid: str = "raise") -> Trajectory:
    """Integrate one body or a batch of bodies; returns a :class:`~jaxrot.Trajectory`.

    Args:
      method: a registered name (``"buss2p"``; ``jaxrot list``) or an integrator instance; with
        error-controlled steps an embedded pair (``"buss4(3)"``, ``"rkmk8(5)"``, ...).
      problem: a :class:`~jaxrot.Problem`, or problems stacked along a batch axis (:func:`stack_problems`).
      dt: the step (constant steps; may be traced) or the first trial step (error-controlled; default
        from the tolerance).
      n_steps: the number of constant steps; or ``t1``.
      t0, t1: start and end time.
      state0: the initial state (default ``problem.state0``); a leading axis on ``R``/``Pi`` is a batch.
      stepsize: the controller: :class:`~jaxrot.Fixed` (default), :class:`~jaxrot.Adaptive` or
        :class:`~jaxrot.GlobalError`.
      saveat: :class:`~jaxrot.SaveAt`, what to keep; None is ``SaveAt()`` (the initial and final states).
      event: an :class:`~jaxrot.Event` checked after every step (``traj.event_time``, ``traj.event_state``).
      adjoint: how a while loop is differentiated (:class:`~jaxrot.RecursiveCheckpointAdjoint`, the
        default; :class:`~jaxrot.ForwardMode`; :class:`~jaxrot.DirectAdjoint`).
      executor: where the loop runs (:class:`~jaxrot.XLA`, :class:`~jaxrot.CPUBlocked`,
        :class:`~jaxrot.Sharded`, :class:`~jaxrot.Fused`); None chooses. One that cannot run the job
        raises a ValueError saying why.
      progress: a progress meter (:class:`~jaxrot.TextProgressMeter`, :class:`~jaxrot.TqdmProgressMeter`;
        True: tqdm on a terminal, text otherwise).
      throw: raise :class:`~jaxrot.SimulationError` naming the first failed step and body; ``False``
        returns the per-body ``failed_step`` and ``result`` instead.
      monitor: an :class:`~jaxrot.InvariantMonitor` flagging energy/momentum drift as a failure.
      unroll: inner-scan unroll factor of constant steps (a speed knob for tiny problems on CPU).
      save_every: deprecated, the older spelling of ``saveat=jaxrot.SaveAt(steps=k)``; still accepted,
        with a ``DeprecationWarning`` (not together with ``saveat``).
      on_invalid: what an invalid input value does: ``"raise"`` (default) raises the ``ValueError``
        naming the argument and the body (at once where the value is known; from the running program
        under ``jit``, see :func:`~jaxrot.simulation_errors`); ``"nan"`` returns the run with NaN
        states (and times, where the step or ``t0`` was invalid) for each body whose moments ``J``
        (non-finite, not positive, or breaking the triangle inequality of a physical body), initial
        state (non-finite, not a rotation), traced ``dt`` (not finite and > 0) or traced ``t0`` (not
        finite) is invalid, with ``failed_step`` 0 and ``result`` ``RESULTS.invalid_input`` there and no
        error, whatever ``throw`` says (``throw`` still raises for the other bodies' failed steps). The
        same under ``jit``, ``vmap`` and ``grad``: a loss on the run is NaN, which an optimiser's line
        search backs away from, and the gradients of the valid bodies of a batch stay finite. Shapes,
        types, names and concrete ``dt``/``t0``/``t1`` (which fix the run's steps) are checked at once
        either way, and ``jaxrot.RigidBody`` refuses concrete bad moments when it is made.

    Details (the loop, saving, events, adjoints, executors): docs/user_guide/running.md and
    docs/user_guide/saveat_events.md.

    Example::

        p = jaxrot.problems.get("fast_top")
        traj = jaxrot.simulate("buss2p", p, 1e-3, 1000, saveat=jaxrot.SaveAt(steps=10))
        sol = jaxrot.simulate("buss4(3)", p, t1=1.0, stepsize=jaxrot.Adaptive(rtol=1e-8, atol=1e-8))
    """
    if on_invalid not in ("raise", "nan"):
        raise ValueError(f'on_invalid must be "raise" or "nan", got {on_invalid!r}')
    # (a run that marks invalid inputs is not remembered: its checks are part of its run)
    plan_key = None if on_invalid != "raise" else replay.key(
        method, problem, dt, n_steps, t0, t1, state0, stepsize, saveat, event, adjoint, executor, progress, throw,
        monitor, unroll, save_every)
    plan = replay.lookup(plan_key)
    if plan is not None:  # the same call again: checked already
        return plan()
    # the same call with option objects made anew (equal values)
    value_key = replay.by_value(plan_key, stepsize, saveat, adjoint, executor, monitor)
    plan = replay.lookup(value_key)
    if plan is not None:
        return plan()
    inputs = (method, problem, state0, stepsize, saveat, event, adjoint, executor, monitor)
    if plan_key is not None:  # a plan that may be remembered keeps its own copy of a scalar matched by value
        dt, t0, t1 = replay.own(dt), replay.own(t0), replay.own(t1)
    controller, dt = _controller(stepsize, dt)
    saveat = _saveat(saveat, save_every)
    adjoint = adjoint_of(adjoint)
    if controller.adaptive:
        if n_steps is not None:
            raise ValueError("error-controlled steps take t1 (and saveat), not n_steps")
        return _adaptive(method, problem, controller, dt, t0, t1, state0, saveat, event, adjoint, executor, progress,
                         throw, monitor, plan_key, inputs, value_key, on_invalid)
    if dt is None:
        raise ValueError("a run of constant steps needs dt")
    n_steps = _counts(dt, n_steps, t0, t1)
    stacked = state0 is None and isinstance(problem, Problem) and jnp.ndim(problem.body.J) == 2
    given = (method, problem, dt)
    dense_run = saveat.ts is not None or saveat.dense
    every = saveat.every
    if dense_run:  # checkpoint frames for the dense output (or the steps asked, if also asked)
        if not is_concrete(dt) or not is_concrete(t0):
            if saveat.ts is not None:
                raise ValueError("SaveAt(ts=...) with constant steps needs a concrete dt and t0")
        every = every or checkpoint_interval(int(n_steps))
    final_only = every is None
    every = int(n_steps) if final_only else every
    method, state0, dt, t0, system = prepare(method, problem, state0, dt, t0, n_steps, every, "SaveAt(steps={})",
                                             values=on_invalid == "raise")
    if event is not None:
        check_event(event, state0, state0.R.dtype)
    system, state0, dt, t0, invalid = _values_checked(on_invalid, system, state0, dt, t0)
    n_steps, every = int(n_steps), int(every)  # NumPy integers would be traced
    batched = state0.R.ndim == 3
    report = progress_report(progress, n_steps // every, every, n_steps)
    if event is not None and event.terminal:
        adjoint = adjoint_for(adjoint, jax.tree_util.tree_leaves((system, state0, dt, t0, event)))
    spec = RunSpec(method, system, state0, dt, t0, n_steps, every, monitor, unroll, stacked, final_only, report, event,
                   adjoint)
    with preparing(report, spec.system, spec.state0, spec.dt, spec.t0, event):
        runner = choose_executor(executor, spec)
    ts_out = None
    if saveat.ts is not None:
        ts_out = jnp.asarray(_output_times(saveat, float(t0), float(t0) + n_steps * float(dt), dt.dtype), dt.dtype)
    finish = Finish(keep_first=saveat.t0, keep_last=True, ts_out=ts_out, n_steps=n_steps, want_dense=saveat.dense,
                    dense_fixed=(method, t0, dt, every, n_steps) if dense_run else None, method=method,
                    t_end=t0 + n_steps * dt, ends_only=saveat.dense and saveat.ts is None and saveat.every is None)
    extra = (("executor", type(runner).__name__),) + ((("batch", state0.R.shape[0]),) if batched else ())
    prov = _provenance(_name(given[0]), getattr(given[1], "name", None) or "(unnamed)", _dt_label(given[2]), n_steps,
                       every, str(state0.R.dtype), extra)
    build = trajectory_of(finish, system=spec.system, event=event, batched=batched, stacked=stacked, provenance=prov)
    plan = functools.partial(_carry_out, runner.plan(spec), build, throw, "batched simulation: " if batched else "",
                             invalid)
    if report is None:  # the plan's own values too: made inside someone's trace, they may be its tracers
        replay.remember(plan_key, plan, *inputs, spec.method, spec.system, spec.state0, spec.dt, spec.t0,
                        finish.ts_out, alias=value_key)
    with reporting(report, spec.system, spec.state0, spec.dt, spec.t0, event):
        return plan()


def _values_checked(on_invalid: str, system, state0, dt, t0):
    """The checks of the values ``on_invalid`` asks for: ``"raise"``, :func:`~jaxrot.driver.checks.traced_checks`
    (``invalid`` None); ``"nan"``, :func:`~jaxrot.driver.checks.invalid_inputs`. Returns
    ``(system, state0, dt, t0, invalid)``."""
    if on_invalid == "raise":
        return (*traced_checks(system, state0, dt, t0), None)
    return invalid_inputs(system, state0, dt, t0)


def _carry_out(run, build, throw, where, invalid=None) -> Trajectory:
    """Carry out a checked constant-step run (``run``: the executor's plan) and make its trajectory
    (``build``: :func:`~jaxrot.driver.integrate.trajectory_of`); a repeated call starts here.
    ``invalid``: the bodies whose inputs were invalid (``on_invalid="nan"``), or None."""
    if isinstance(run, Bound):  # a compiled call's leaves straight into the trajectory
        leaves = run.leaves()
        traj = build.from_leaves(leaves, run.structure())
    else:
        traj = build(run())
    return _finished(traj, throw, where, invalid)


def _finished(traj, throw, where, invalid) -> Trajectory:
    """The run's failures raised (``throw``), but not those of the bodies whose inputs were invalid,
    which are marked instead (:func:`~jaxrot.driver.results.invalid_marked`)."""
    if throw:
        failed = traj.failed_step if invalid is None else jnp.where(invalid.bodies, -1, traj.failed_step)
        raise_failures(failed, traj.result, where, traj.states.R.dtype)
    return traj if invalid is None else invalid_marked(traj, invalid)


def _output_times(saveat, t0: float, t_end: float, dtype=np.float64):
    """The output times of ``SaveAt(t0, t1, ts)`` with constant steps: ``[t0] + ts + [t_end]`` (as
    flagged), checked; a time past the span by the run's round-off (float32 0.2 after 20 steps of 0.01)
    is taken as its end."""
    out = []
    if saveat.ts is not None:
        if isinstance(saveat.ts, jax.core.Tracer):
            raise ValueError("SaveAt(ts=...) with constant steps needs concrete times")
        ts = np.asarray(saveat.ts, np.float64).reshape(-1)
        if ts.size == 0 or not np.all(np.isfinite(ts)) or np.any(np.diff(ts) <= 0):
            raise ValueError("SaveAt.ts must be finite and increasing")
        tol = max(1e-9, 8 * float(np.finfo(dtype).eps)) * max(1.0, abs(t0), abs(t_end))
        if ts[0] < t0 - tol or ts[-1] > t_end + tol:
            raise ValueError(f"SaveAt.ts must lie within the span [{t0}, {t_end}], got [{ts[0]}, {ts[-1]}]")
        out = list(np.clip(ts, t0, t_end))
    if saveat.t0 and not (out and np.isclose(out[0], t0, rtol=0, atol=1e-12 * max(1.0, abs(t0)))):
        out = [t0] + out
    if saveat.t1 and not (out and np.isclose(out[-1], t_end, rtol=1e-12, atol=0)):
        out = out + [t_end]
    return np.asarray(out, np.float64)


def _pair(method):
    """The embedded pair of an error-controlled run: a registered pair's name, a pair instance, or a
    ``(high, low)`` tuple of methods."""
    if isinstance(method, tuple):
        if len(method) != 2:
            raise ValueError(f"a pair is given as (high, low), got {len(method)} methods")
        hi, lo = (resolve_method(m) for m in method)
        return EmbeddedPair(hi, lo)
    m = resolve_method(method)
    if not isinstance(m, AbstractPair):
        from ..integrators import REGISTRY

        pairs = ", ".join(repr(n) for n, i in REGISTRY.items() if i.error_order is not None)
        raise ValueError(f"stepsize=jaxrot.Adaptive(...) needs an embedded pair, whose steps estimate their error: "
                         f"{pairs} (or (high, low) methods); got {_name(method)!r}, for which use constant steps "
                         "(dt=...)")
    return m


def _targets(saveat, t0, t1, dtype):
    """The output times of an error-controlled run after t0 (the last ends it), whether the last is kept,
    and whether the initial state is (``SaveAt.t0``, or a save time at t0 itself, as with constant steps)."""
    times = None if saveat.ts is None else np.asarray(saveat.ts, np.float64).reshape(-1) if not isinstance(
        saveat.ts, jax.core.Tracer) else saveat.ts
    if times is None:
        if t1 is None:
            raise ValueError("an error-controlled run needs t1 (or saveat=SaveAt(ts=...))")
        times, keep_last = [t1], True
    else:
        keep_last = True
        if t1 is not None and is_concrete(t1) and not isinstance(times, jax.core.Tracer) and times.size:
            # compared in the run's type: float32 times made from 0.2 lie just above the float 0.2
            last, end = (float(np.asarray(x, np.float64).astype(dtype)) for x in (np.max(times), t1))
            if last > end * (1 + 1e-12) + 1e-300:
                raise ValueError(f"save times run past t1 = {t1} (the latest is {np.max(times):.17g})")
            final = float(np.asarray(times[-1], np.float64).astype(dtype))
            if not abs(final - end) <= 1e-12 * abs(end) + 1e-300:  # the run goes on to t1
                times, keep_last = np.concatenate([times, [float(t1)]]), saveat.t1
        elif isinstance(times, jax.core.Tracer):
            # traced save times are checked as the run starts; they cannot be compared with t1 before:
            # the run goes on to t1 (a save time at t1 is then written twice, the second without a step).
            # Concrete times with a traced t1 end the run at the last of them (docs: saveat_events.md)
            times = checked_traced_times(jnp.reshape(times, (-1,)).astype(dtype), t0, t1)
            if t1 is not None:
                times = jnp.concatenate([times, jnp.reshape(jnp.asarray(t1, dtype), (1,))])
                keep_last = saveat.t1
    keep_first = saveat.t0
    if not any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves((times, t0))):
        tsn = np.asarray(times, np.float64).reshape(-1)
        if tsn.size > 1 and tsn[0] == float(t0):  # the initial state's frame, asked for by its time
            tsn, keep_first = tsn[1:], True
        if tsn.size == 0 or not np.all(np.isfinite(tsn)) or np.any(np.diff(tsn) <= 0) or tsn[0] <= float(t0):
            raise ValueError("the save times (or t1) must be finite, increasing and after t0")
        with jax.ensure_compile_time_eval():  # concrete inside a caller's jit too
            return jnp.asarray(tsn, dtype), keep_last, keep_first
    return jnp.asarray(times, dtype).reshape(-1), keep_last, keep_first


def _adaptive(method, problem, controller, dt0, t0, t1, state0, saveat, event, adjoint, executor, progress, throw,
              monitor, plan_key=None, inputs=(), value_key=None, on_invalid="raise") -> Trajectory:
    given = method
    pair = _pair(method)
    values = on_invalid == "raise"
    check_problem(problem, values)
    check_capability(pair, problem)
    stacked = state0 is None and jnp.ndim(problem.body.J) == 2
    state0 = checked_state0(problem, state0, t0, values)
    dtype = state0.R.dtype
    if dt0 is not None and is_concrete(dt0) and not (np.isfinite(dt0) and float(dt0) > 0):
        raise ValueError(f"dt (the first trial step) must be finite and > 0, got {dt0!r}")
    if event is not None:
        check_event(event, state0, dtype)
    targets, keep_last, keep_first = _targets(saveat, t0, t1, dtype)
    system = system_of(problem, dtype)
    system, state0, _, t0, invalid = _values_checked(on_invalid, system, state0, scalar(1.0, dtype), scalar(t0, dtype))
    local = controller.controller if isinstance(controller, GlobalError) else controller
    adjoint = adjoint_for(adjoint, jax.tree_util.tree_leaves((system, state0, t0, dt0, targets, event, local)))
    every = saveat.every
    # a tolerance below what the dtype resolves is raised to its floor, with a warning, before the run
    where = f"Adaptive(rtol={_tol_label(local.rtol)!r}, atol={_tol_label(local.atol)!r})"
    _check_tolerance_shapes(local, state0, where)
    # the final error cannot go below the round-off over the span: said before the run, steps unchanged
    concrete = all(is_concrete(x) for x in (t0, targets))  # (NumPy: jnp ops inside a trace are traced)
    span = float(np.asarray(targets)[-1] - np.asarray(t0)) if concrete else None
    rtol, atol, spoken = reachable_over_span(local.rtol, local.atol, dtype, system.body.J, state0.Pi, span,
                                             where=where)
    # float32 with a torque: the check again after the run, from the angle the saved states show (a
    # torque can spin a body up; a torque-free body keeps |Pi|), whatever was said before it (the angle
    # seen before the run may be far short of the one turned); the tolerances as raised, not a calibration's
    turned = None if (dtype != jnp.float32 or isinstance(system.torque, FreeTorque)
                      or not concrete or not is_concrete(state0.Pi)) \
        else functools.partial(_warn_turned, rtol, atol, dtype, system.body.J, t0, state0.Pi, span,
                               event is not None and event.terminal, where)
    spec = AttemptSpec(pair, system, state0, t0, targets, jnp.asarray(rtol, dtype), jnp.asarray(atol, dtype), dt0,
                       local.max_steps, adjoint, monitor, event, every, saveat.dense, stacked)
    report = span_report(progress, t0, targets[-1], state0.R.shape[0] if state0.R.ndim == 3 else None)
    with preparing(report, spec):
        runner = choose_executor(executor, spec)
    extra_counts = check = None
    if isinstance(controller, GlobalError):
        # errors against the tolerance asked, where it was raised to the floor before the calibration
        with report.waiting("calibrating the tolerance") if report is not None else contextlib.nullcontext():
            rtol, atol, counts, check = calibrate(spec, runner, controller, units=(local.rtol, local.atol))
        rtol, atol, extra_counts = raised_to_floor(rtol, atol, counts, dtype, pair)
        spec = dataclasses.replace(spec, rtol=jnp.asarray(rtol, dtype), atol=jnp.asarray(atol, dtype))
    finish = Finish(keep_first=keep_first, keep_last=keep_last, t_end=targets[-1], frames_from="steps" if every is not None else "loop",
                    want_dense=saveat.dense, method=pair)
    batched = state0.R.ndim == 3
    extra = (("executor", type(runner).__name__), ("rtol", _tol_label(local.rtol)), ("atol", _tol_label(local.atol)),
             ("controller", type(controller).__name__)) + ((("batch", state0.R.shape[0]),) if batched else ())
    prov = _provenance(_name(given), getattr(problem, "name", None) or "(unnamed)", _dt_label(dt0), "adaptive", every,
                       str(dtype), extra)
    if report is None and extra_counts is None and not spoken and rtol is local.rtol and atol is local.atol:
        # a plan is remembered only where nothing was said (no tolerance raised, no calibration)
        build = trajectory_of(finish, system=system, event=event, batched=batched, stacked=stacked, provenance=prov)
        plan = functools.partial(_carry_out, functools.partial(type(runner).run_attempts, runner, spec), build, throw,
                                 "adaptive run: ", invalid)
        if turned is not None:
            plan = functools.partial(_then, plan, turned)
        replay.remember(plan_key, plan, *inputs, spec, alias=value_key)
        return plan()
    with reporting(report, spec):  # the executor reports to it
        frames = type(runner).run_attempts(runner, spec)
    if check is not None and event is None and every is None and not saveat.dense:
        # the calibration's law against the final run's states at the output times (after the first)
        extra_counts = check(State(frames.states.R[..., 1:, :, :], frames.states.Pi[..., 1:, :]), extra_counts)
    traj = trajectory(frames, finish, system=system, event=event, batched=batched, stacked=stacked, provenance=prov,
                      extra_counts=extra_counts)
    traj = _finished(traj, throw, "adaptive run: ", invalid)
    return traj if turned is None else turned(traj)


def _check_tolerance_shapes(local, state0, where) -> None:
    """Tolerances are one number, or one per body of a batch."""
    bodies = state0.R.shape[0] if state0.R.ndim == 3 else None
    for name in ("rtol", "atol"):
        shape = np.shape(getattr(local, name))
        if shape != () and not (bodies is not None and shape == (bodies,)) and int(np.prod(shape)) != 1:
            per = f"or one per body, shape ({bodies},)" if bodies is not None else "for one body"
            raise ValueError(f"{where}: {name} must be one number {per}; got shape {shape}")


def _then(plan, after):
    return after(plan())


def _warn_turned(rtol, atol, dtype, J, t0, Pi0, span, terminal, where, traj):
    if is_concrete(traj.states.Pi):  # a caller's trace gives no numbers to check
        stop = traj.event_time if terminal else None
        angle = _turned(J, t0, Pi0, traj.ts, traj.states.Pi, stop)  # one number per body back from the device
        warn_turned(rtol, atol, dtype, angle, turning_angle(J, Pi0, span), where=where)
    return traj


_turned = jax.jit(turned_angle)
