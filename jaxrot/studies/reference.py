"""High-accuracy reference solutions computed inside jaxrot (never by a method under test).

The body-frame equations ``R' = R hat(Pi/J)``, ``Pi' = Pi x (Pi/J) + R^T t(time, R, Pi)`` are
integrated on the embedding R^12 by the 8th-order Dormand-Prince method (DOP853's 12-stage
solution) at a small fixed step, so the error is at round-off level for the step the caller picks
(default: rotation angle per step <= 0.01 rad, i.e. local error ~1e-18). R leaves SO(3) only by
the truncation error. ``tests/test_reference.py`` checks it against SciPy's adaptive DOP853.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..integrators.dop853_coefficients import A as _A
from ..integrators.dop853_coefficients import B as _B
from ..integrators.dop853_coefficients import C as _C
from ..physics.flow import body_vector_field, pack_body, unpack_body  # body_vector_field re-exported
from ..physics.problems import Problem
from ..geometry.state import State
from ..integrators.stats import StepStats
from ..driver.results import Trajectory
from ..driver.precision import full_precision


def _dop853_step(f, t, y, h):
    A = jnp.asarray(_A, y.dtype)
    ks = []
    for i in range(len(_C)):
        yi = y
        for j in range(i):
            if _A[i, j] != 0.0:
                yi = yi + h * A[i, j] * ks[j]
        ks.append(f(t + _C[i] * h, yi))
    return y + h * sum(float(b) * k for b, k in zip(_B, ks) if b != 0.0)


def default_step(problem: Problem, state0: State | None = None) -> float:
    """A step giving at most ~0.01 rad of rotation per step for the initial rate (>= 1e-4 of it)."""
    s = problem.state0 if state0 is None else state0
    rate = float(np.linalg.norm(np.asarray(s.Pi) / np.asarray(problem.body.J)))
    return 0.01 / max(rate, 1.0)


@eqx.filter_jit
def _integrate(problem, y0, t0, h, n_frames, substeps):
    # substeps is traced (one compilation for any span and step); the reference is not meant to
    # be reverse-differentiated
    f = body_vector_field(problem)

    def outer(c, _):
        def inner(i, c):
            y, k = c
            return _dop853_step(f, t0 + k * h, y, h), k + 1.0

        c = lax.fori_loop(0, substeps, inner, c)
        return c, c[0]

    _, ys = lax.scan(outer, (y0, jnp.asarray(0.0, y0.dtype)), None, length=n_frames)
    return ys


@full_precision
def reference_solution(
    problem: Problem,
    t_end: float | None = None,
    *,
    n_frames: int = 1,
    state0: State | None = None,
    t0: float = 0.0,
    max_step: float | None = None,
) -> Trajectory:
    """Reference trajectory on ``n_frames`` equal intervals of ``[t0, t_end]`` (frames include t0).

    Args:
      problem: the problem (its torque, body and default initial state).
      t_end: final time (default ``problem.t_end``).
      n_frames: number of saved intervals.
      max_step: largest DOP853 step (default :func:`default_step`).
    """
    s0 = problem.state0 if state0 is None else state0
    t_end = problem.t_end if t_end is None else float(t_end)
    if not t_end > t0:
        raise ValueError(f"t_end ({t_end}) must exceed t0 ({t0})")
    if n_frames < 1:
        raise ValueError("n_frames must be >= 1")
    max_step = default_step(problem, s0) if max_step is None else float(max_step)
    frame = (t_end - t0) / n_frames
    substeps = max(1, math.ceil(frame / max_step))
    dtype = s0.R.dtype
    h = jnp.asarray(frame / substeps, dtype)
    y0 = pack_body(s0.R, s0.Pi)
    ys = _integrate(problem, y0, jnp.asarray(t0, dtype), h, n_frames, jnp.asarray(substeps, jnp.int32))
    ys = jnp.concatenate([y0[None], ys])
    states = State(*unpack_body(ys))
    ts = t0 + (t_end - t0) * jnp.arange(n_frames + 1, dtype=dtype) / n_frames
    ok = StepStats.explicit(substeps)
    stats = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (n_frames,)), ok)
    return Trajectory(ts=ts, states=states, stats=stats, failed_step=jnp.asarray(-1, jnp.int32))
