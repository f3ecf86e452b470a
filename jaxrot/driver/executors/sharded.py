"""Executors for batches on several devices or in cache-sized blocks on a CPU."""

from __future__ import annotations

from typing import Any

import jax

from ..layout import Frames
from .base import AbstractExecutor, RunSpec
from .batch import CPU_BLOCK, batch_final, batch_frames, batch_while, map_batch
from .xla import XLA, traced


class Sharded(AbstractExecutor):
    """A batch split over ``devices`` (default: every device of every process), each device running
    its own part with no communication (``shard_map``), in blocks of ``block_size`` bodies on CPU
    devices (``"auto"``: :data:`~jaxrot.driver.executors.batch.CPU_BLOCK` on CPUs, none on
    accelerators; ``None``: never). One body runs as :class:`XLA`.

    On a multi-core CPU make the cores separate devices first (:func:`jaxrot.use_cpu_cores`, right
    after importing JAX): one CPU device spreads each small kernel of a step over the cores, which
    gains nothing over one core. Under ``jax.distributed`` every process passes the whole batch and
    :func:`jaxrot.gather` collects the result.

    Example::

        jaxrot.simulate("buss2p", problem, 1e-3, 1000, state0=states, executor=jaxrot.Sharded())
    """

    devices: Any = None
    block_size: Any = "auto"

    def run(self, spec: RunSpec) -> Frames:
        if not spec.batched:
            return XLA().run(spec)
        if spec.terminal:
            return batch_while(spec, self)
        if spec.final_only and not traced(spec) and (len(self._devices()) == 1 or spec.report is not None):
            return batch_final(spec, self.block_size, self._devices())
        return batch_frames(spec, self.block_size, self._devices())

    def map_bodies(self, fn, *trees):
        return map_batch(fn, self.block_size, self._devices(), *trees)

    def _devices(self):
        return list(jax.devices() if self.devices is None else self.devices)


class CPUBlocked(AbstractExecutor):
    """A batch on one device in cache-sized blocks of ``block_size`` bodies (``lax.map`` over blocks,
    each block scanned over all its steps, so its state stays in cache). One body runs as
    :class:`XLA`.

    Example::

        jaxrot.simulate("buss2p", problem, 1e-3, 1000, state0=states, executor=jaxrot.CPUBlocked(256))
    """

    block_size: int = CPU_BLOCK

    def __check_init__(self):
        if isinstance(self.block_size, bool) or not isinstance(self.block_size, int) or self.block_size < 1:
            raise ValueError(f"block_size must be a positive int, got {self.block_size!r}")

    def run(self, spec: RunSpec) -> Frames:
        if not spec.batched:
            return XLA().run(spec)
        if spec.terminal:
            return batch_while(spec, self)
        if spec.final_only and not traced(spec):
            return batch_final(spec, self.block_size)
        return batch_frames(spec, self.block_size, None)

    def map_bodies(self, fn, *trees):
        return map_batch(fn, self.block_size, None, *trees)
