"""Wall-clock cost per step, measured the same way for every method (for relative-cost tables)."""

from __future__ import annotations

import functools
import time

import jax
import numpy as np

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


def median_seconds(f, reps: int = 3, min_seconds: float = 0.0, max_reps: int = 51) -> float:
    """Median wall time of ``f()`` (its result waited for) over ``reps`` calls, after one untimed call
    that compiles and warms the caches; with ``min_seconds``, more calls (at most ``max_reps``) until
    the timed ones add up to it, so that a call of a millisecond is not judged on three samples of a
    shared machine's noise."""
    return median_seconds_interleaved([f], reps, min_seconds, max_reps)[0]


def median_seconds_interleaved(fs, reps: int = 3, min_seconds: float = 0.0, max_reps: int = 51) -> list[float]:
    """:func:`median_seconds` of each of ``fs``, their calls taken in turn (after one untimed call of
    each), so that a ratio of two of them sees the same moments of a shared machine's load; more
    rounds (at most ``max_reps``) until each one's timed calls add up to ``min_seconds``."""
    if reps < 1 or max_reps < reps:
        raise ValueError("need 1 <= reps <= max_reps")
    for f in fs:
        jax.block_until_ready(f())
    ts = [[] for _ in fs]
    while len(ts[0]) < reps or (min(sum(t) for t in ts) < min_seconds and len(ts[0]) < max_reps):
        for f, t in zip(fs, ts):
            t0 = time.perf_counter()
            jax.block_until_ready(f())
            t.append(time.perf_counter() - t0)
    return [float(np.median(t)) for t in ts]
