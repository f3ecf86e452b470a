"""The one entry point: :func:`simulate` — one body or a batch, fixed or adaptive steps, any executor.

A run is checked (:mod:`~jaxrot.driver.checks`), described by a
:class:`~jaxrot.driver.executors.base.RunSpec` and carried out by an executor
(:mod:`~jaxrot.driver.executors`); error-controlled runs go to :mod:`~jaxrot.driver.adaptive`. Every
run returns one :class:`~jaxrot.Trajectory`.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time as _time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from ..physics.problems import Problem
from .checks import cast, is_concrete, prepare, traced_checks
from .executors import choose_executor
from .progress import Progress
from .executors.base import AbstractExecutor, RunSpec
from .executors.sharded import Sharded
from .executors.xla import XLA
from .failures import raise_failures
from .loop import InvariantMonitor
from .precision import full_precision
from .results import Trajectory
from .saveat import SaveAt
from .stepsize import Adaptive, Fixed

__all__ = ["simulate", "simulate_batch", "final_state", "stack_problems", "cast", "InvariantMonitor"]


def _counts(dt, n_steps, t0, t1):
    """``n_steps`` given, or from the span ``t1 - t0`` (an integer number of steps ``dt``)."""
    if n_steps is not None:
        if t1 is not None:
            raise ValueError("give n_steps or t1, not both")
        return n_steps
    if t1 is None:
        raise ValueError("a fixed-step run needs n_steps or t1")
    if not (is_concrete(t1) and is_concrete(dt) and is_concrete(t0)):
        raise ValueError("with a traced dt, t0 or t1 give n_steps (the number of steps is static)")
    span, h = float(t1) - float(t0), float(dt)
    n = round(span / h)
    if n < 1 or abs(n * h - span) > 1e-9 * max(abs(span), h):
        raise ValueError(f"t1 - t0 = {span!r} is not a whole number of steps dt = {h!r} "
                         f"({span / h:.6g} steps); adjust dt or t1, or give n_steps")
    return n


def _save_every(saveat: SaveAt | None, save_every, n_steps) -> tuple[int, bool]:
    """``(steps between saved frames, final_only)``."""
    if save_every is not None:
        if saveat is not None:
            raise ValueError("give saveat or save_every, not both (save_every=k is SaveAt(every=k))")
        return save_every, False
    if saveat is None:
        return 1, False
    if not saveat.t1 and saveat.save_every is None:
        raise ValueError("SaveAt(t1=False) with neither steps nor every saves nothing past t0")
    every = saveat.save_every
    return (n_steps, True) if every is None else (every, False)


def _progress_report(n_frames: int, save_every: int, n_steps: int):
    """The report of a run with ``progress=True``: ``report(None, seconds)`` after the compilation,
    then ``report(frames_done)`` (a bar of steps on a terminal, a line every ~10 s otherwise)."""
    bar = Progress(n_steps, "steps")
    done = [0]

    def report(frames, compile_seconds=None):
        if frames is None:
            bar.compiled(compile_seconds)
            return
        bar.update((frames - done[0]) * save_every)
        done[0] = frames
        if frames >= n_frames:
            bar.close()

    return report


def _provenance(traj: Trajectory, method, problem, dt, n_steps, save_every, **extra) -> Trajectory:
    """Record how ``traj`` was made (strings; a traced dt is recorded as such)."""
    name = method if isinstance(method, str) else (
        "(" + ", ".join(m if isinstance(m, str) else type(m).__name__ for m in method) + ")"
        if isinstance(method, tuple) else type(method).__name__)
    if isinstance(dt, (int, float)):
        d = float(dt)
    else:
        d = np.asarray(dt).reshape(())[()] if is_concrete(dt) and np.size(dt) == 1 else "traced"
    items = _provenance_items(name, getattr(problem, "name", None) or "(unnamed)", str(d), n_steps, save_every,
                              str(traj.states.R.dtype), tuple(sorted(extra.items())))
    # traj was just made by an unflatten and is seen by no one else: set the static field as that
    # unflatten does (a dataclass replace would run __init__ again)
    object.__setattr__(traj, "provenance", items)
    return traj


@functools.lru_cache(maxsize=256)
def _provenance_items(method, problem, dt, n_steps, save_every, dtype, extra) -> tuple:
    import jaxlib

    from ..version import __version__

    info = dict(method=method, problem=problem, dt=dt, n_steps=n_steps, save_every=save_every, dtype=dtype,
                jaxrot=__version__, jax=jax.__version__, jaxlib=jaxlib.__version__, **dict(extra))
    return tuple(sorted((k, str(v)) for k, v in info.items()))


@jax.jit
def _drop_first(traj: Trajectory) -> Trajectory:
    def cut(x):
        return x[..., 1:, :, :] if x.ndim >= 3 and x.shape[-2:] == (3, 3) else x[..., 1:, :]
    return Trajectory(traj.ts[..., 1:], jax.tree_util.tree_map(cut, traj.states), traj.stats, traj.failed_step,
                      traj.result, traj.controller, traj.system)


@full_precision
def simulate(
    method,
    problem: Problem,
    dt=None,
    n_steps: int | None = None,
    *,
    t0=0.0,
    t1=None,
    state0=None,
    stepsize=None,
    saveat: SaveAt | None = None,
    save_every: int | None = None,
    executor=None,
    throw: bool = True,
    progress: bool = False,
    unroll: int = 1,
    monitor: InvariantMonitor | None = None,
    adjoint: str = "forward",
    event=None,
) -> Trajectory:
    """Integrate one body or a batch of bodies; returns a :class:`~jaxrot.Trajectory`.

    Args:
      method: a registered name (``"buss2p"``) or an integrator instance; with adaptive steps, a pair
        (a name of :data:`jaxrot.PAIRS` such as ``"buss4(3)"``, or ``(high, low)`` methods).
      problem: a :class:`~jaxrot.Problem` (body, torque, initial state), or problems stacked along a
        batch axis (:func:`stack_problems`; then ``state0`` is None).
      dt: step size (> 0; may be traced, i.e. differentiable); or ``stepsize=Fixed(dt)``.
      n_steps: number of steps; or ``t1`` (then ``t1 - t0`` must be a whole number of steps).
      t0, t1: start time; end time.
      state0: initial state (default ``problem.state0``); a leading axis on ``R``/``Pi`` is a batch.
      stepsize: :class:`~jaxrot.Fixed` (default) or :class:`~jaxrot.Adaptive` (error control).
      saveat: :class:`~jaxrot.SaveAt` — what to keep (default: every step);
        ``save_every=k`` is shorthand for ``SaveAt(every=k)``. With fixed steps, ``SaveAt(ts=...)``
        gives states at those times and ``SaveAt(dense=True)`` makes ``traj.evaluate(t)`` work, both
        from the dense output (:mod:`jaxrot.driver.dense`; checkpoint frames, memory bounded).
      executor: how the loop runs (:class:`~jaxrot.XLA`, :class:`~jaxrot.CPUBlocked`,
        :class:`~jaxrot.Sharded`, :class:`~jaxrot.Fused`); None chooses (one body: XLA; a batch:
        sharded over all devices, cache-blocked on CPUs). Every executor gives the same states.
      throw: raise :class:`~jaxrot.SimulationError` naming the first failed step and body; ``False``
        returns the per-body ``failed_step`` and ``result`` instead.
      progress: report steps done and time left on stderr after each compiled chunk.
      unroll: inner-scan unroll factor (a speed knob for tiny problems on CPU).
      monitor: an :class:`~jaxrot.InvariantMonitor` flagging energy/momentum drift as a failure.
      adjoint: how an adaptive run is differentiated: ``"forward"`` (a ``lax.while_loop``; ``jax.jvp``,
        ``jax.jacfwd``) or ``"checkpointed"`` (``jax.grad`` by recursive checkpointing, memory growing
        like the log of ``max_steps``; diffrax's ``RecursiveCheckpointAdjoint``). Fixed-step runs are
        differentiable in both modes whatever this is.
      event: an :class:`~jaxrot.Event` (fixed steps): the trajectory's ``event_time`` and
        ``event_state`` (per body, NaN where none); a terminal event's body repeats its event state
        in the frames after it (:mod:`jaxrot.driver.events`).

    Matrix products are traced at full precision (``jax.default_matmul_precision("highest")``, the
    torque's too), so a float32 run on a GPU computes in float32, not TF32.

    Returns:
      :class:`~jaxrot.Trajectory`: ``ts``, ``states`` (leading batch axis first, if any), ``stats``,
      ``failed_step``, ``result``, ``controller`` (adaptive runs), ``system`` and ``provenance``.

    Example::

        p = jaxrot.problems.get("fast_top")
        traj = jaxrot.simulate("buss2p", p, 1e-3, 1000, save_every=10)
        batch = jaxrot.simulate("buss2p", p, 1e-3, 1000, state0=states)              # states: (B, ...)
        sol = jaxrot.simulate("buss4(3)", p, t1=1.0, stepsize=jaxrot.Adaptive(rtol=1e-8))
    """
    if stepsize is not None and not isinstance(stepsize, (Fixed, Adaptive)):
        raise TypeError(f"stepsize must be jaxrot.Fixed(...) or jaxrot.Adaptive(...), got {stepsize!r}")
    if saveat is not None and not isinstance(saveat, SaveAt):
        raise TypeError(f"saveat must be a jaxrot.SaveAt, got {saveat!r}")
    if event is not None:
        return _with_event(event, method, problem, dt, n_steps, t0=t0, t1=t1, state0=state0, stepsize=stepsize,
                           saveat=saveat, save_every=save_every, executor=executor, throw=throw, progress=progress,
                           unroll=unroll, monitor=monitor)
    if isinstance(stepsize, Adaptive):
        if dt is not None or n_steps is not None or save_every is not None:
            raise ValueError("adaptive steps take t1 (and saveat), not dt, n_steps or save_every")
        from .adaptive import run_adaptive

        if executor is not None and not isinstance(executor, AbstractExecutor):
            raise TypeError(f"executor must be a jaxrot executor or None, got {executor!r}")
        traj = run_adaptive(method, problem, t0, t1, stepsize, saveat, state0, executor, adjoint)
        traj = _provenance(traj, method, problem, None, "adaptive", None, rtol=stepsize.rtol, atol=stepsize.atol,
                           error=stepsize.error, executor=type(executor or XLA()).__name__)
        if throw:
            raise_failures(traj.failed_step, traj.result, "adaptive run: ")
        return traj
    if isinstance(stepsize, Fixed) and stepsize.dt is not None:
        if dt is not None:
            raise ValueError("give dt or stepsize=Fixed(dt), not both")
        dt = stepsize.dt
    if dt is None:
        raise ValueError("a fixed-step run needs dt (or stepsize=jaxrot.Fixed(dt))")
    n_steps = _counts(dt, n_steps, t0, t1)
    if saveat is not None and (saveat.ts is not None or saveat.dense):
        if save_every is not None:
            raise ValueError("give saveat or save_every, not both (save_every=k is SaveAt(every=k))")
        from .dense import dense_run

        return dense_run(simulate, method, problem, dt, n_steps, saveat, t0=t0, state0=state0, executor=executor,
                         throw=throw, progress=progress, unroll=unroll, monitor=monitor)
    every, final_only = _save_every(saveat, save_every, n_steps)
    stacked = state0 is None and isinstance(problem, Problem) and jnp.ndim(problem.body.J) == 2
    given = (method, problem, dt)
    method, state0, dt, t0, system = prepare(method, problem, state0, dt, t0, n_steps, every)
    system, state0, dt, t0 = traced_checks(system, state0, dt, t0)
    n_steps, every = int(n_steps), int(every)  # NumPy integers would be traced
    batched = state0.R.ndim == 3
    report = _progress_report(n_steps // every, every, n_steps) if progress else None
    spec = RunSpec(method, system, state0, dt, t0, n_steps, every, monitor, unroll, stacked, final_only, report)
    runner = choose_executor(executor, spec)
    traj = type(runner).run(runner, spec)  # a method looked up on an eqx.Module instance is rebuilt per access
    if saveat is not None and not saveat.t0:
        traj = _drop_first(traj)
    object.__setattr__(traj, "system", system)  # a fresh unflattened module, as for the provenance
    extra = {"executor": type(runner).__name__}
    if batched:
        extra["batch"] = state0.R.shape[0]
    traj = _provenance(traj, given[0], given[1], given[2], n_steps, every, **extra)
    if throw:
        raise_failures(traj.failed_step, traj.result, "batched simulation: " if batched else "")
    return traj


def _with_event(event, method, problem, dt, n_steps, *, t0, t1, state0, stepsize, saveat, **kw) -> Trajectory:
    """A fixed-step run and the first event of each body (:func:`jaxrot.driver.events.locate_events`)."""
    from .events import Event, freeze_after, locate_events

    if not isinstance(event, Event):
        raise TypeError(f"event must be a jaxrot.Event, got {event!r}")
    if isinstance(stepsize, Adaptive):
        raise ValueError("event= needs fixed steps (stepsize=jaxrot.Fixed or dt)")
    if isinstance(stepsize, Fixed) and stepsize.dt is not None and dt is None:
        dt = stepsize.dt
    n = _counts(dt, n_steps, t0, t1)
    meth, s0, dt_, t0_, system = prepare(method, problem, state0, dt, t0, n, 1)
    if kw.get("executor") is None:
        # the frames from XLA's loop, as the events are located: a fused run agrees to round-off, which
        # a chaotic body amplifies, and an event's state should be one of the run's
        kw["executor"] = Sharded() if s0.R.ndim == 3 else XLA()
    traj = simulate(method, problem, dt, n_steps, t0=t0, t1=t1 if n_steps is None else None, state0=state0,
                    saveat=saveat, **kw)
    et, es = locate_events(event, meth, system, s0, t0_, dt_, n)
    states = freeze_after(traj.ts, traj.states, et, es) if event.terminal else traj.states
    out = dataclasses.replace(traj, states=states, event_time=et, event_state=es)
    object.__setattr__(out, "provenance", traj.provenance)
    object.__setattr__(out, "dense", traj.dense)
    return out


def stack_problems(problems: list[Problem]) -> Problem:
    """Stack problems with the same kind of torque (e.g. different J, torque parameters or initial
    states) along a batch axis. The span, name and description are not per body: the stack takes
    the longest span and joins the names."""
    if not problems:
        raise ValueError("stack_problems needs at least one problem")
    if isinstance(problems[0], Problem):
        first = problems[0]
        t_end = max(q.t_end for q in problems)
        name = "+".join(dict.fromkeys(q.name for q in problems))
        problems = [Problem(q.body, q.torque, q.state0, t_end, name, first.description) for q in problems]
    try:
        return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *problems)
    except ValueError as e:
        raise ValueError(f"stack_problems needs problems of the same structure (the same kind of torque): {e}") \
            from None


def _deprecated(old: str, new: str):
    warnings.warn(f"jaxrot.{old} is deprecated: use {new}", DeprecationWarning, stacklevel=3)


def simulate_batch(method, problems, dt, n_steps, *, states0=None, save_every=1, t0=0.0, throw=True, devices=None,
                   unroll=1, block_size="auto", monitor=None) -> Trajectory:
    """Deprecated: ``simulate(method, problems, dt, n_steps, state0=states0, ...,
    executor=Sharded(devices, block_size))``."""
    _deprecated("simulate_batch", "jaxrot.simulate(..., state0=batch, executor=jaxrot.Sharded(devices, block_size))")
    return simulate(method, problems, dt, n_steps, state0=states0, save_every=save_every, t0=t0, throw=throw,
                    unroll=unroll, monitor=monitor, executor=_sharded(devices, block_size, states0, problems))


def _sharded(devices, block_size, states0, problems):
    from .executors.sharded import Sharded

    if states0 is None and isinstance(problems, Problem) and jnp.ndim(problems.body.J) != 2:
        raise ValueError("without states0, problems must be stacked (leading batch axis): use stack_problems")
    if states0 is not None and jnp.ndim(states0.R) != 3:
        raise ValueError(f"states0 must have one leading batch axis, got R of shape {jnp.shape(states0.R)}")
    return Sharded(devices, block_size)


def final_state(method, problem, dt, n_steps, *, state0=None, t0=0.0, throw=True):
    """Deprecated: ``simulate(method, problem, dt, n_steps, state0=state0, saveat=SaveAt(t0=False)).final``
    (only the final state; the step count a traced loop bound, one compilation for every count)."""
    _deprecated("final_state", "jaxrot.simulate(..., saveat=jaxrot.SaveAt(t0=False)).final")
    return simulate(method, problem, dt, n_steps, state0=state0, t0=t0, throw=throw, saveat=_FINAL).final


_FINAL = SaveAt(t0=False)
