"""Wall-clock cost per step, measured the same way for every method (for relative-cost tables)."""

from __future__ import annotations

import time

import jax

from ..physics.problems import Problem
from ..driver.simulate import final_state


def seconds_per_step(method, problem: Problem, dt: float, n_steps: int = 20000, repeats: int = 3) -> float:
    """Best-of-``repeats`` wall time per step of one body over ``n_steps`` steps (after compiling).

    Only ratios between methods measured in the same process mean anything; absolute times depend
    on the machine and its load.
    """
    if n_steps < 1 or repeats < 1:
        raise ValueError("need n_steps >= 1 and repeats >= 1")
    jax.block_until_ready(final_state(method, problem, dt, n_steps, throw=False))  # compile + warm up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(final_state(method, problem, dt, n_steps, throw=False))
        best = min(best, time.perf_counter() - t0)
    return best / n_steps
