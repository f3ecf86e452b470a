"""The fused executor: the whole run of an explicit method in one compiled kernel per device.

Every step of every body runs in one launch of a Warp kernel (:mod:`jaxrot.kernels`), one thread per
body, writing only the saved frames; the XLA loop stays the reference. Error-controlled runs of an
enrolled pair run in the fused adaptive kernel (:mod:`jaxrot.kernels.adaptive`), each body at its own
pace, events located in the kernel. Derivatives (``jax.grad``, ``jax.jvp``, ``jax.jacfwd``) of a run
without an event, constant steps or error control, saving at output times, are taken in the kernels
through the method's step derivative generated from its JAX code
(:mod:`jaxrot.kernels.adaptive_derivatives`); the others (an event, ``SaveAt(steps=k)``,
``SaveAt(dense=True)``, a step derivative that cannot be generated) come from the XLA loop. Needs the
``fast`` extra.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

import equinox as eqx

from ...geometry.state import State
from ..adjoint import ForwardMode, RecursiveCheckpointAdjoint, differentiated_twice, mode, reverse_only
from ..attempts import attempts_frames
from ..events import locate, method_step
from .. import progress
from ..layout import Frames, LocatedEvent, assemble
from ..lean_jit import lean_jit
from ..loop import empty_stats, init_carry, scan_frames
from ..paced import in_groups
from ..sharding import per_device
from .base import AbstractExecutor, AttemptSpec, RunSpec
from .batch import place_batch
from .xla import traced


def xla_frames(method, system, states0, dt, t0, n_frames: int, save_every: int, event=None):
    """The XLA loop with the outputs of :func:`jaxrot.kernels.fused_frames` (its reference, for the
    derivatives): ``(R_frames, Pi_frames, failed_step, result)`` of a batch of bodies, and with an
    event ``(t_event, R_event, Pi_event, steps)`` too. A terminal event's run is continued past the
    event here (a scan, differentiable both ways): the frames after it differ from the kernel's, but
    the trajectory replaces them by the event state, whose derivatives are the located event's."""

    def one(s):
        carry = init_carry(method, system, s, dt, t0, None, event)
        carry, (states, _, _) = scan_frames(method, system, carry, dt, t0, n_frames, save_every, 1, event=event)
        out = (states.R, states.Pi, carry[3], carry[4])
        if event is None:
            return out
        t_ev, s_ev = locate(event, system, carry[6], method_step(method))
        return (*out, t_ev, s_ev.R, s_ev.Pi, carry[2])

    return jax.vmap(one)(states0)


@lean_jit
def _program(method, system, states0, dt, t0, n_frames: int, save_every: int, mesh, batch: int, one: bool,
             derivative: str | None = None):
    """The whole run in one compiled program (one dispatch a call): the kernel on each device's part
    of the batch, the padding dropped, the trajectory assembled (``one``: a single body, unbatched).
    ``derivative``: the derivative the kernels take (:func:`kernel_derivative`), or None."""
    if one:
        states0 = jax.tree_util.tree_map(lambda x: x[None], states0)

    from ... import kernels

    def run(s):
        return kernels.fused_frames(method, system, s, dt, t0, n_frames, save_every, reference=xla_frames,
                                    derivative=derivative)

    R, Pi, failed, reason = (x[:batch] for x in per_device(run, mesh)(states0))
    states0 = jax.tree_util.tree_map(lambda x: x[:batch], states0)
    ts = t0 + (jnp.arange(1, n_frames + 1, dtype=jnp.int32) * save_every).astype(dt.dtype) * dt
    stats = jax.tree_util.tree_map(lambda z: jnp.broadcast_to(z, (n_frames,)), empty_stats())

    n_steps = jnp.asarray(n_frames * save_every, jnp.int32)  # every step taken (made here: no eager op after)

    def body(s0, R, Pi, failed, reason):
        return assemble(s0, t0, State(R, Pi), ts, stats, failed, reason, steps=n_steps)

    traj = jax.vmap(body)(states0, R, Pi, failed, reason)
    return jax.tree_util.tree_map(lambda x: x[0], traj) if one else traj


@lean_jit
def _program_event(method, system, states0, dt, t0, n_frames: int, save_every: int, batch: int, one: bool, event):
    """A run with an event in one compiled program: the kernel, the event located in it, and the
    frames as the XLA loop gives them (a terminal event's frame holds the time its run stopped)."""
    if one:
        states0 = jax.tree_util.tree_map(lambda x: x[None], states0)

    from ... import kernels

    R, Pi, failed, reason, t_ev, R_ev, Pi_ev, steps = kernels.fused_frames(
        method, system, states0, dt, t0, n_frames, save_every, event=event, reference=xla_frames)
    idx = jnp.arange(n_frames, dtype=jnp.int32)
    reached = ((idx + 1) * save_every).astype(dt.dtype) * dt
    not_reached = (idx + 1).astype(dt.dtype) * (save_every * dt)
    stats = jax.tree_util.tree_map(lambda z: jnp.broadcast_to(z, (n_frames,)), empty_stats())
    n_steps = n_frames * save_every

    def body(s0, R, Pi, failed, reason, t_ev, R_ev, Pi_ev, k):
        # the times as the XLA loop writes them: a frame's steps times dt; after a terminal event the
        # frame in which it fell at the last step taken, the frames never reached at their nominal times
        stopped = k < n_steps
        last = (k - 1) // save_every
        ts = t0 + jnp.where(stopped & (idx == last), k.astype(dt.dtype) * dt,
                            jnp.where(stopped & (idx > last), not_reached, reached))
        return assemble(s0, t0, State(R, Pi), ts, stats, failed, reason, LocatedEvent(t_ev, State(R_ev, Pi_ev)), k)

    fr = jax.vmap(body)(states0, R, Pi, failed, reason, t_ev, R_ev, Pi_ev, steps)
    return jax.tree_util.tree_map(lambda x: x[0], fr) if one else fr


def xla_attempts(spec: AttemptSpec):
    """The XLA loop of ``spec``'s pair with the outputs of :func:`jaxrot.kernels.adaptive.fused_adaptive`
    (its ``reference``: the derivatives of a fused error-controlled run are this run's)."""

    def reference(pair, system, states0, t0, ts, rtol, atol, dt0, max_steps, event=None):
        sub = AttemptSpec(pair, system, states0, t0, ts, rtol, atol, dt0, max_steps, spec.adjoint, None, event)
        fr = attempts_frames(sub, lambda fn, *trees: jax.vmap(fn)(*trees))
        out = (fr.states.R[:, 1:], fr.states.Pi[:, 1:], *fr.counts, fr.reason)
        if event is None:
            return out
        t_ev, s_ev = jax.vmap(lambda ev: locate(event, system, ev, method_step(pair)))(fr.event)
        return (*out, t_ev, s_ev.R, s_ev.Pi)

    return reference


@eqx.filter_jit
def _attempts_program(spec: AttemptSpec) -> Frames:
    """An error-controlled run in the fused adaptive kernel, as :class:`~jaxrot.driver.layout.Frames`."""
    from ...kernels import adaptive, adaptive_saved

    one = not spec.batched
    states0 = jax.tree_util.tree_map(lambda x: x[None], spec.state0) if one else spec.state0
    # jax.grad: the kernels' backward pass where it applies, else the checkpointed XLA loop (a custom VJP);
    # ForwardMode: tangents through the kernels where they apply (in_kernels); DirectAdjoint (both modes): a custom JVP
    # whose tangents are the XLA loop's
    mode = ("reverse" if isinstance(spec.adjoint, RecursiveCheckpointAdjoint)
            else "tangents" if isinstance(spec.adjoint, ForwardMode) and spec.adjoint.in_kernels else "forward")
    saved = None
    if spec.every is not None or spec.dense:
        # every k-th accepted step, every step: gathers of the record of the accepted steps
        # (kernels.adaptive_saved); not differentiated (refused in _attempts_refusal)
        run, rec = adaptive.fused_adaptive(spec.method, spec.system, states0, spec.t0, spec.targets, spec.rtol,
                                           spec.atol, spec.dt0, spec.max_steps, event=spec.event,
                                           record=_record_steps(spec))
        saved = adaptive_saved.buffers(rec, run, spec.t0, jnp.asarray(spec.targets)[-1], spec.every, spec.dense,
                                       spec.max_steps, terminal=spec.event is not None and spec.event.terminal)
        saved = adaptive_saved.no_derivative(saved, "SaveAt(steps=...) and SaveAt(dense=True) frames")
    else:
        run = adaptive.fused_adaptive(spec.method, spec.system, states0, spec.t0, spec.targets, spec.rtol, spec.atol,
                                      spec.dt0, spec.max_steps, event=spec.event, reference=xla_attempts(spec),
                                      adjoint=mode, stored_steps=getattr(spec.adjoint, "checkpoints", None))
    B, n_out = run.R.shape[:2]
    dtype = run.R.dtype
    ts = jnp.concatenate([jnp.reshape(jnp.asarray(spec.t0, dtype), (1,)), jnp.asarray(spec.targets, dtype)])
    states = State(jnp.concatenate([states0.R[:, None], run.R], axis=1),
                   jnp.concatenate([states0.Pi[:, None], run.Pi], axis=1))
    stats = jax.tree_util.tree_map(lambda z: jnp.broadcast_to(z, (B, n_out)), empty_stats())
    # the first failed step as the XLA loop reports it: the attempts spent at max_steps, the first
    # step for a body that could not start (a non-finite initial state), else -1
    spent = run.n_accepted + run.n_rejected
    failed = jnp.where(run.result == adaptive.RESULT_MAX_STEPS_REACHED, spent, jnp.where(run.result != 0, 1, -1))
    event = None if spec.event is None else LocatedEvent(run.event_time, State(run.event_R, run.event_Pi))
    fr = Frames(jnp.broadcast_to(ts, (B, n_out + 1)), states, stats, failed.astype(jnp.int32), run.result, event,
                (run.n_accepted, run.n_rejected, run.err_estimate), saved)
    return jax.tree_util.tree_map(lambda x: x[0], fr) if one else fr


def _record_steps(spec: AttemptSpec) -> int:
    """The accepted steps a body's record holds for ``SaveAt(steps=...)``/``dense``: every step the run
    may take where the batch's record fits in the kernels' budget, else as many as fit (a body that
    takes more fails with a message)."""
    from ...kernels.adaptive_backward import capacity_for

    bodies = spec.state0.R.shape[0] if spec.batched else 1
    # (a terminal event: one more, the state after the crossing step, kernels.adaptive_saved)
    terminal = spec.event is not None and spec.event.terminal
    return capacity_for(bodies, spec.max_steps + terminal, jnp.dtype(spec.state0.R.dtype).itemsize)


class Fused(AbstractExecutor):
    """The whole run in one fused kernel launch per device (NVIDIA Warp; ``pip install 'jaxrot[fast]'``):
    one thread per body, its state in registers, only the saved frames written. Runs the methods and
    torques of :data:`jaxrot.kernels.KERNELS` (explicit methods) with constant steps, without an
    invariant monitor, with or without an event whose condition the kernel restates (on one device;
    :mod:`jaxrot.kernels.fixed_loop`); and error-controlled runs (``stepsize=jaxrot.Adaptive``) of any
    embedded pair whose attempt is generated from its JAX code (:mod:`jaxrot.kernels.adaptive`), saving at output times
    (``SaveAt(t1=True)``, ``SaveAt(ts=...)``), every ``k``-th accepted step (``SaveAt(steps=k)``) or the dense
    output (``SaveAt(dense=True)``; not differentiated), with or without an event whose condition the kernel
    restates, on one device (``devices`` is not used for them); any other run is refused with the
    reason (docs/kernels.md has the table). One body runs as a batch of one. A batch is split over ``devices``,
    one launch each (default: every accelerator; on CPUs the default device only, whose launch is
    itself split over the cores, :mod:`jaxrot.kernels.host_threads`). Derivatives (``jax.grad``,
    ``jax.jvp`` through :func:`jaxrot.simulate`) of a run without an event that saves at output times
    are taken in the kernels (the step's derivative generated from its JAX code), the others from the
    XLA loop; both equal the :class:`XLA` executor's to round-off. The kernels keep no step statistics: they are zero in the trajectory, as they are for
    most explicit methods (the ``_ep`` methods' count of projections that missed the polhode is the
    exception, see :func:`jaxrot.kernels.keeps_stats`).

    Example::

        jaxrot.simulate("buss2p", problem, 1e-3, 100_000, saveat=jaxrot.SaveAt(steps=1000), executor=jaxrot.Fused())
        jaxrot.simulate("rkmk8(5)", problem, t1=10.0, state0=batch, stepsize=jaxrot.Adaptive(1e-10, 1e-10),
                        executor=jaxrot.Fused())
    """

    devices: Any = None

    def supports(self, spec) -> bool:
        return self.refusal(spec) is None

    def refusal(self, spec) -> str | None:
        """Why this run cannot be fused, or None."""
        from ... import kernels  # Warp's code generators load only where a fused run is considered

        if not kernels.have_warp():
            return "the fused kernels need NVIDIA Warp: pip install 'jaxrot[fast]'"
        if isinstance(spec, AttemptSpec):
            return _attempts_refusal(spec)
        if spec.monitor is not None:
            return "the fused kernels keep no invariant monitor (monitor=)"
        if spec.stacked:
            return "the fused kernels share one system among the bodies (stacked problems are not fused)"
        if spec.event is not None and kernels.method_name(spec.method) is None:
            return ("a constant-step run with an event is fused for the methods of jaxrot.kernels.KERNELS only "
                    "(error-controlled runs locate events in the kernel)")
        # (the step checked on the kernel the run launches, its event's where it has one)
        why = kernels.why_not(spec.method, spec.system, spec.event)
        if why is not None or spec.event is None:
            return why
        from ...kernels.adaptive_pairs import event_refusal

        return event_refusal(spec.event, spec.method, spec.system, spec.state0.R.dtype)

    def run_attempts(self, spec: AttemptSpec) -> Frames:
        """An error-controlled run in the fused adaptive kernel (:mod:`jaxrot.kernels.adaptive`): one
        thread per body, each taking its own steps, the states written at the output times, an event
        located in the kernel (with a progress report, the batch in groups of bodies)."""
        report = progress.active()
        return _attempts_program(spec) if report is None else in_groups(report, spec, _attempts_program)

    def plan(self, spec: RunSpec):
        """A run on one device without an event or progress report is bound to its compiled program
        once: a repeated call goes straight to the launch (on a GPU the time before the launch is
        spent with the device idle)."""
        batch = spec.state0.R.shape[0] if spec.batched else 1
        devices = _devices(self)[:batch]
        if spec.event is None and spec.report is None and len(devices) == 1 and not traced(spec):
            return _program.bind(spec.method, spec.system, _placed(self, spec.state0), spec.dt, spec.t0,
                                 spec.n_frames, spec.save_every, None, batch, not spec.batched)
        return super().plan(spec)

    def run(self, spec: RunSpec) -> Frames:
        if spec.report is not None:  # one launch per group of bodies, a line between them
            return in_groups(spec.report, spec, lambda sub: type(self).run(self, dataclasses.replace(sub, report=None)))
        states0 = spec.state0
        batch = states0.R.shape[0] if spec.batched else 1
        devices = _devices(self)[:batch]
        mesh = None
        if len(devices) > 1:
            placed = RunSpec(spec.method, spec.system, states0, spec.dt, spec.t0, spec.n_steps, spec.save_every)
            _, states0, _, mesh = place_batch(placed, devices)
        else:
            states0 = _placed(self, states0)
        if spec.event is not None:  # on one device (the first named, if any)
            traj = _program_event(spec.method, spec.system, _placed(self, spec.state0), spec.dt, spec.t0, spec.n_frames,
                                  spec.save_every, batch, not spec.batched, spec.event)
        else:
            traj = _program(spec.method, spec.system, states0, spec.dt, spec.t0, spec.n_frames, spec.save_every,
                            mesh, batch, not spec.batched, None if mesh is not None else kernel_derivative(spec))
        return traj


def kernel_derivative(spec: RunSpec) -> str | None:
    """The derivative of a constant-step run that the kernels take, read from how the run is being
    transformed (never from values): ``"vjp"`` under reverse mode alone (``jax.grad``), ``"jvp"`` under
    forward mode (``jax.jvp``, ``jax.jacfwd``), else None (a plain run; a derivative taken outside a
    ``jax.jit`` around the call: then the XLA loop's, by the kernel's custom JVP)."""
    leaves = jax.tree_util.tree_leaves((spec.system, spec.state0, spec.dt, spec.t0))
    if reverse_only(leaves):
        return "vjp"
    return "jvp" if mode(leaves) == "forward" and not differentiated_twice(leaves) else None


def _devices(executor: Fused) -> list:
    """The devices a fused run is split over (a function, not a method: a method looked up on a module
    instance is built anew on every call)."""
    if executor.devices is not None:
        return list(executor.devices)
    devices = jax.devices()
    # one CPU device's launch of 64 bodies or more already runs on every core (kernels.host_threads):
    # more CPU devices would only share the same cores
    return devices[:1] if devices[0].platform == "cpu" else list(devices)


def _placed(executor: Fused, states0):
    """The initial states on the first device an executor was given, for a run on one device (the run
    follows them there); as they are where no device was named."""
    named = None if executor.devices is None else list(executor.devices)
    return jax.device_put(states0, named[0]) if named else states0


def _attempts_refusal(spec: AttemptSpec) -> str | None:
    """Why the fused adaptive kernel cannot run this error-controlled run, or None."""
    from ...kernels import adaptive

    if spec.monitor is not None:
        return "the fused kernels keep no invariant monitor (monitor=)"
    derivative = mode(jax.tree_util.tree_leaves((spec.system, spec.state0, spec.t0, spec.targets, spec.rtol,
                                                 spec.atol, spec.dt0, spec.event)))
    if spec.every is not None or spec.dense:
        if derivative is not None:
            return ("the kernels do not differentiate SaveAt(steps=...) and SaveAt(dense=True) frames (the XLA "
                    "loop does)")
    if spec.stacked:
        return "the fused kernels share one system among the bodies (stacked problems are not fused)"
    if jnp.dtype(spec.state0.R.dtype) not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64)):
        return f"the fused kernels run float32 or float64, not {spec.state0.R.dtype}"
    record = spec.every is not None or spec.dense or derivative is not None
    return adaptive.why_not_adaptive(spec.method, spec.system, spec.event, record=record)
