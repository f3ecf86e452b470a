"""The fused executor: the whole run of an explicit method in one compiled kernel per device.

Every step of every body runs in one launch of a Warp kernel (:mod:`jaxrot.kernels`), one thread per
body, writing only the saved frames; the XLA loop stays the reference and carries the gradients
(``jax.custom_jvp``: tangents, forward or reverse, come from the XLA run). Needs the ``fast`` extra.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ...geometry.state import State
from ..layout import assemble
from ..lean_jit import lean_jit
from ..loop import empty_stats, init_carry, scan_frames
from ..layout import Frames
from ..sharding import per_device
from .base import AbstractExecutor, RunSpec
from .batch import place_batch


def xla_frames(method, system, states0, dt, t0, n_frames: int, save_every: int):
    """The XLA loop with the outputs of :func:`jaxrot.kernels.fused_frames` (its reference):
    ``(R_frames, Pi_frames, failed_step, result)`` of a batch of bodies."""

    def one(s):
        carry = init_carry(method, system, s, dt, t0)
        carry, (states, _, _) = scan_frames(method, system, carry, dt, t0, n_frames, save_every, 1)
        return states.R, states.Pi, carry[3], carry[4]

    return jax.vmap(one)(states0)


@lean_jit
def _program(method, system, states0, dt, t0, n_frames: int, save_every: int, mesh, batch: int, one: bool):
    """The whole run in one compiled program (one dispatch a call): the kernel on each device's part
    of the batch, the padding dropped, the trajectory assembled (``one``: a single body, unbatched)."""
    if one:
        states0 = jax.tree_util.tree_map(lambda x: x[None], states0)

    from ... import kernels

    def run(s):
        return kernels.fused_frames(method, system, s, dt, t0, n_frames, save_every, reference=xla_frames)

    R, Pi, failed, reason = (x[:batch] for x in per_device(run, mesh)(states0))
    states0 = jax.tree_util.tree_map(lambda x: x[:batch], states0)
    ts = t0 + (jnp.arange(1, n_frames + 1, dtype=jnp.int32) * save_every).astype(dt.dtype) * dt
    stats = jax.tree_util.tree_map(lambda z: jnp.broadcast_to(z, (n_frames,)), empty_stats())

    def body(s0, R, Pi, failed, reason):
        return assemble(s0, t0, State(R, Pi), ts, stats, failed, reason)

    traj = jax.vmap(body)(states0, R, Pi, failed, reason)
    return jax.tree_util.tree_map(lambda x: x[0], traj) if one else traj


class Fused(AbstractExecutor):
    """The whole run in one fused kernel launch per device (NVIDIA Warp; ``pip install 'jaxrot[fast]'``):
    one thread per body, its state in registers, only the saved frames written. Runs the methods and
    torques of :data:`jaxrot.kernels.KERNELS` (explicit methods), without an invariant monitor or an
    event; any other run is refused with the reason. One body runs as a batch of one. A batch is split over ``devices``,
    one launch each (default: every accelerator; on CPUs the default device only, whose launch is
    itself split over the cores, :mod:`jaxrot.kernels.host_threads`). Gradients (``jax.grad``
    through :func:`jaxrot.simulate`) come from the XLA loop, so they equal the :class:`XLA`
    executor's. The kernels keep no step statistics: they are zero in the trajectory, as they are for
    most explicit methods (the ``_ep`` methods' count of projections that missed the polhode is the
    exception, see :func:`jaxrot.kernels.keeps_stats`).

    Example::

        jaxrot.simulate("buss2p", problem, 1e-3, 100_000, saveat=jaxrot.SaveAt(steps=1000), executor=jaxrot.Fused())
    """

    devices: Any = None

    def supports(self, spec) -> bool:
        return self.refusal(spec) is None

    def refusal(self, spec) -> str | None:
        """Why this run cannot be fused, or None."""
        from ... import kernels  # Warp's code generators load only where a fused run is considered

        if not kernels.have_warp():
            return "the fused kernels need NVIDIA Warp: pip install 'jaxrot[fast]'"
        if not isinstance(spec, RunSpec):
            return "error-controlled steps (stepsize=jaxrot.Adaptive) have no fused kernel yet"
        if spec.monitor is not None:
            return "the fused kernels keep no invariant monitor (monitor=)"
        if spec.event is not None:
            return "the fused kernels of constant steps check no events (event=)"
        if spec.stacked:
            return "the fused kernels share one system among the bodies (stacked problems are not fused)"
        if not kernels.supports(spec.method, spec.system):
            return kernels.why_not(spec.method, spec.system)
        return None

    def _devices(self) -> list:
        if self.devices is not None:
            return list(self.devices)
        devices = jax.devices()
        # one CPU device's launch of 64 bodies or more already runs on every core (kernels.host_threads):
        # more CPU devices would only share the same cores
        return devices[:1] if devices[0].platform == "cpu" else list(devices)

    def run(self, spec: RunSpec) -> Frames:
        states0 = spec.state0
        batch = states0.R.shape[0] if spec.batched else 1
        devices = self._devices()[:batch]
        mesh = None
        if len(devices) > 1:
            placed = RunSpec(spec.method, spec.system, states0, spec.dt, spec.t0, spec.n_steps, spec.save_every)
            _, states0, _, mesh = place_batch(placed, devices)
        if spec.report is not None:
            spec.report(0)  # one launch: the whole run is one "chunk"
        traj = _program(spec.method, spec.system, states0, spec.dt, spec.t0, spec.n_frames, spec.save_every, mesh,
                        batch, not spec.batched)
        if spec.report is not None:
            jax.block_until_ready(traj.states.R)
            spec.report(spec.n_frames)
        return traj
