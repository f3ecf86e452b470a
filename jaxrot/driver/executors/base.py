"""The executor interface: how a checked run is carried out on the hardware.

An executor decides only *how* the loop runs (which devices, cache-sized blocks, one fused kernel),
never *what* it computes: every executor gives the same states for the same run (tests compare them).
:func:`jaxrot.simulate` checks the inputs, builds a :class:`RunSpec` and hands it to the executor's
:meth:`~AbstractExecutor.run`, which returns the :class:`~jaxrot.Trajectory` (without provenance).
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Callable

import equinox as eqx
import jax

from ..results import Trajectory


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """A checked fixed-step run: everything an executor needs.

    ``system`` is already cast to the run's dtype; ``state0`` is one body (``R`` of shape ``(3, 3)``)
    or a batch (a leading axis); ``stacked``: the system's array leaves carry the batch axis too
    (problems stacked by :func:`jaxrot.stack_problems`). Frame ``k`` of the result is the state after
    ``(k + 1) * save_every`` steps, preceded by the initial state. ``final_only``: only the last state
    is wanted (the loop may then take its step count as a traced bound). ``report``: an optional
    progress callback ``report(frames_done, n_frames)``."""

    method: Any
    system: Any
    state0: Any
    dt: Any
    t0: Any
    n_steps: int
    save_every: int
    monitor: Any = None
    unroll: int = 1
    stacked: bool = False
    final_only: bool = False
    report: Callable | None = None

    @property
    def batched(self) -> bool:
        return self.state0.R.ndim == 3

    @property
    def n_frames(self) -> int:
        return self.n_steps // self.save_every


class AbstractExecutor(eqx.Module):
    """Carries out a :class:`RunSpec`. Subclasses are final ``eqx.Module`` s holding their options
    (devices, block size); a new backend is one new file implementing :meth:`run` (and, if it can
    only run some methods, :meth:`supports`)."""

    @abc.abstractmethod
    def run(self, spec: RunSpec) -> Trajectory:
        """The trajectory of ``spec`` (initial state first, ``failed_step`` and ``result`` per body)."""

    def supports(self, spec: RunSpec) -> bool:
        """Whether this executor can carry out ``spec`` (its method, torque, dtype)."""
        return True

    def map_bodies(self, fn: Callable, *trees):
        """``fn`` (a function of one body's arrays) applied to every body of ``trees`` (array leaves
        with a leading batch axis; other leaves static). Runs that are not a fixed-step scan (the
        error-controlled loop: every body its own steps) go through this, so each executor places
        them as it places its own loop; the default is one ``vmap``."""
        return jax.vmap(fn)(*trees)
