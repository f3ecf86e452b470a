"""Wall-clock cost per step, measured the same way for every method (for relative-cost tables)."""

from __future__ import annotations

import functools
import time

import jax

from ..driver.saveat import SaveAt
from ..driver.simulate import simulate
from ..physics.problems import Problem


def seconds_per_step(method, problem: Problem, dt: float, n_steps: int = 20000, repeats: int = 3) -> float:
    """Best-of-``repeats`` wall time per step of one body over ``n_steps`` steps (after compiling).

    Only ratios between methods measured in the same process mean anything; absolute times depend
    on the machine and its load.
    """
    if n_steps < 1 or repeats < 1:
        raise ValueError("need n_steps >= 1 and repeats >= 1")
    run = functools.partial(simulate, method, problem, dt, n_steps, saveat=SaveAt(t0=False), throw=False)
    jax.block_until_ready(run().states)  # compile + warm up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(run().states)
        best = min(best, time.perf_counter() - t0)
    return best / n_steps
