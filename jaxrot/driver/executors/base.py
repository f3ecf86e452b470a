"""The executor interface: how a checked run is carried out on the hardware.

An executor decides only *where* the loop runs (which devices, cache-sized blocks, one fused kernel),
never *what* it computes: every executor gives the same states for the same run (tests compare them).
:func:`jaxrot.simulate` checks the inputs, builds a :class:`RunSpec` (constant steps) or an
:class:`AttemptSpec` (error-controlled steps) and hands it to the executor's :meth:`~AbstractExecutor.run`
or :meth:`~AbstractExecutor.run_attempts`, which return the :class:`~jaxrot.driver.layout.Frames` of
the run; :func:`jaxrot.driver.integrate.trajectory` makes the trajectory of them.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
from typing import Any, Callable

import equinox as eqx
import jax

from ..attempts import attempts_frames_on
from ..layout import Frames


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """A checked run of constant steps: everything an executor needs.

    ``system`` is already cast to the run's dtype; ``state0`` is one body (``R`` of shape ``(3, 3)``)
    or a batch (a leading axis); ``stacked``: the system's array leaves carry the batch axis too
    (problems stacked by :func:`jaxrot.stack_problems`). Frame ``k`` of the result is the state after
    ``(k + 1) * save_every`` steps, preceded by the initial state. ``final_only``: only the last state
    is wanted (the loop may then take its step count as a traced bound). ``report``: an optional
    progress callback ``report(frames_done, n_frames)``. ``event``: an :class:`~jaxrot.Event` checked
    after every step (a terminal one makes the loop a while loop, run through ``adjoint``)."""

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
    event: Any = None
    adjoint: Any = None

    @property
    def batched(self) -> bool:
        return self.state0.R.ndim == 3

    @property
    def n_frames(self) -> int:
        return self.n_steps // self.save_every

    @property
    def terminal(self) -> bool:
        return self.event is not None and self.event.terminal


class AttemptSpec(eqx.Module):
    """A checked error-controlled run: the pair ``method``, ``system`` and ``state0`` (as in
    :class:`RunSpec`), the output times ``targets`` (the last ends the run), the tolerances ``rtol``,
    ``atol`` (scalars or one per body), the first trial step ``dt0`` (or None), ``max_steps``, the
    ``adjoint``, and what else is kept: every ``every``-th accepted step, every step (``dense``)."""

    method: Any
    system: Any
    state0: Any
    t0: Any
    targets: Any
    rtol: Any
    atol: Any
    dt0: Any
    max_steps: int = eqx.field(static=True)
    adjoint: Any
    monitor: Any = None
    event: Any = None
    every: int | None = eqx.field(static=True, default=None)
    dense: bool = eqx.field(static=True, default=False)
    stacked: bool = eqx.field(static=True, default=False)

    @property
    def batched(self) -> bool:
        return self.state0.R.ndim == 3


class AbstractExecutor(eqx.Module):
    """Carries out a :class:`RunSpec`. Subclasses are final ``eqx.Module`` s holding their options
    (devices, block size); a new backend is one new file implementing :meth:`run` (and, if it can
    only run some methods, :meth:`supports`)."""

    @abc.abstractmethod
    def run(self, spec: RunSpec) -> Frames:
        """The frames of a constant-step run ``spec`` (initial state first)."""

    def plan(self, spec: RunSpec) -> Callable[[], Frames]:
        """:meth:`run` of ``spec`` as a function of no arguments, with what can be decided once decided
        (a repeated :func:`jaxrot.simulate` call runs it again)."""
        return functools.partial(type(self).run, self, spec)

    def run_attempts(self, spec: AttemptSpec) -> Frames:
        """The frames of an error-controlled run: the loop of every body placed by :meth:`map_bodies`."""
        return attempts_frames_on(spec, self)

    def supports(self, spec) -> bool:
        """Whether this executor can carry out ``spec`` (its method, torque, dtype, controller)."""
        return True

    def refusal(self, spec) -> str | None:
        """Why this executor cannot carry out ``spec``, or None if it can (said when it was asked for
        explicitly)."""
        return None if type(self).supports(self, spec) else f"{type(self).__name__} cannot run this"

    def map_bodies(self, fn: Callable, *trees):
        """``fn`` (a function of one body's arrays) applied to every body of ``trees`` (array leaves
        with a leading batch axis; other leaves static). Runs that are not a fixed-step scan (the
        error-controlled loop: every body its own steps) go through this, so each executor places
        them as it places its own loop; the default is one ``vmap``."""
        return jax.vmap(fn)(*trees)
