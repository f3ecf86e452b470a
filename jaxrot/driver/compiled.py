"""A run compiled once for a fixed configuration, for inner loops (sweeps, searches, fitting loops
that re-run the same simulation from new initial states or step sizes).

``jaxrot.compile(method, problem, dt, n_steps, ...)`` checks the inputs once, compiles the whole run
ahead of time (``jax.jit(...).lower(...).compile()``) and returns a callable ``run(state0=None,
dt=None)``: a call does no validation, no tracing and no Python-side assembly beyond handing the
arrays to the executable, so its cost is XLA's dispatch. A batch size fixes a leading axis of
``state0`` (vmapped bodies). Failures are reported in ``Trajectory.failed_step``/``result`` (never
raised: checking would need a device-to-host transfer per call).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..physics.problems import Problem
from .checks import prepare
from ..geometry.state import State
from .executors.base import RunSpec
from .executors.xla import XLA
from .failures import result_of
from .precision import full_precision
from .results import AdaptiveStats, Trajectory


class CompiledRun:
    """``run(state0=None, dt=None) -> Trajectory`` for the configuration given to :func:`compile`."""

    def __init__(self, executable, state0: State, dt, n_steps: int, save_every: int, batch: int | None):
        self._exe, self._state0, self._dt = executable, state0, dt
        self.n_steps, self.save_every, self.batch = n_steps, save_every, batch

    def __call__(self, state0: State | None = None, dt=None) -> Trajectory:
        return self._exe(self._state0 if state0 is None else state0, self._dt if dt is None else dt)

    def __repr__(self):
        return f"CompiledRun(n_steps={self.n_steps}, save_every={self.save_every}, batch={self.batch})"


@full_precision
def compile(method, problem: Problem, dt, n_steps: int, *, save_every: int | None = None, t0=0.0,
            batch: int | None = None) -> CompiledRun:
    """Check once and compile a run of ``n_steps`` steps; returns a :class:`CompiledRun`.

    Args:
      method, problem, dt, n_steps, t0: as for :func:`jaxrot.simulate` (``dt`` gives the dtype
        and the default step; each call may pass another ``dt`` of that dtype).
      save_every: steps between saved frames (default: ``n_steps``, only the final state saved).
      batch: number of bodies of a batched run (``state0`` of shape ``(batch, 3, 3)``/``(batch, 3)``).

    Example::

        run = jaxrot.compile("buss4", problem, 1e-3, 100)
        for s in initial_states:
            final = run(s).final
    """
    save_every = int(n_steps if save_every is None else save_every)
    method, state0, dt, t0, system = prepare(method, problem, None, dt, t0, n_steps, save_every)
    if batch is not None:
        if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
            raise ValueError(f"batch must be a positive integer or None, got {batch!r}")
        state0 = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (batch,) + x.shape), state0)

    def run(s0, h):  # simulate's loop, as the XLA executor runs it inside a trace (a batch vmapped)
        fr = XLA().run(RunSpec(method, system, s0, h, t0, int(n_steps), save_every))
        return Trajectory(fr.ts, fr.states, fr.stats, fr.failed, result_of(fr.reason), AdaptiveStats(*fr.counts))

    exe = jax.jit(run).lower(state0, dt).compile()
    return CompiledRun(exe, state0, dt, int(n_steps), save_every, batch)
