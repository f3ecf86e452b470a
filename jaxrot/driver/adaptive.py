"""Error-controlled stepping: an embedded pair of one-step methods and a PI step-size controller.

Each attempt advances the current state by a step ``h`` with both methods of a pair (order p and a
lower order q) and measures their difference in a mixed absolute/relative RMS norm over the 12
numbers of ``(R, Pi)``,

    err = sqrt(mean(((y_p - y_q) / (atol + rtol max(|y|, |y_p|)))^2)),

accepts the step (keeping the higher-order result: local extrapolation) when ``err <= 1`` and sets
the next step by the PI controller of Gustafsson / Hairer & Wanner (Solving ODEs II, IV.2),

    h_new = h * clip(0.9 err^(-0.7/(q+1)) err_prev^(0.4/(q+1)), 0.2, 5).

Steps are shortened to land on every requested output time. The loop is a ``lax.while_loop``: jit-able,
vmap-able (each body takes its own steps; a vmapped loop runs until the slowest body is done,
masking the others, as diffrax does) and differentiable in forward mode (``jax.jvp``,
``jax.jacfwd``); reverse mode would need a bounded loop with checkpoints (not provided).

Pairs (``PAIRS``): ``buss4(3)``, ``lie_taylor5(4)``, ``exact_split_tj4(2)`` (the triple-jump composition of the
exact splitting against the splitting itself; any torque). Any ``(high, low)`` pair of registered
methods can be passed. Both methods of the pair take every attempted step in full (measured in
``jaxrot bench precision``: a pair costs 2-5x its higher-order method at a fixed step of the same
accuracy, 2.0-3.3x in the run at 9ac188f).
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..integrators import get as _get_method
from ..physics.flow import pack_body
from ..physics.problems import Problem
from ..geometry.state import State

#: name -> (higher-order method, lower-order method); the estimate is of the lower one's local error
PAIRS: dict[str, tuple[str, str]] = {
    "buss4(3)": ("buss4", "buss3"),
    "lie_taylor5(4)": ("lie_taylor5", "lie_taylor4"),
    "exact_split_tj4(2)": ("exact_split_tj4", "exact_split"),
}


class AdaptiveTrajectory(eqx.Module):
    """States at the requested times ``ts`` (leading axis), with the controller's counts.

    ``n_accepted``/``n_rejected``: attempts kept / repeated with a smaller step; ``err_estimate``:
    the last accepted step's scaled error estimate (<= 1); ``success``: False if ``max_steps``
    attempts were not enough (the states after that point are the last reached state).
    """

    ts: jax.Array
    states: State
    n_accepted: jax.Array
    n_rejected: jax.Array
    err_estimate: jax.Array
    success: jax.Array
    #: :func:`simulate_to_tolerance` only: the estimated global error (units of the tolerance), the
    #: local ``rtol`` of the returned run, and the attempts spent in its calibration runs
    global_error: jax.Array | None = None
    tolerance: jax.Array | None = None
    n_calibration: jax.Array | None = None

    @property
    def final(self) -> State:
        """The state at the last requested time (per body in a batch)."""
        if self.ts.ndim == 1:
            return jax.tree_util.tree_map(lambda x: x[-1], self.states)
        return jax.tree_util.tree_map(lambda x: x[:, -1], self.states)


def _resolve_pair(pair):
    if isinstance(pair, str):
        if pair not in PAIRS:
            raise KeyError(f"unknown adaptive pair {pair!r}; known: {', '.join(PAIRS)}")
        pair = PAIRS[pair]
    hi, lo = (_get_method(m) if isinstance(m, str) else m for m in pair)
    if not hi.order > lo.order:
        raise ValueError(f"an embedded pair needs a higher-order first method; got orders {hi.order} and {lo.order}")
    return hi, lo


def _scaled_error(y, yp, yq, rtol, atol):
    sc = atol + rtol * jnp.maximum(jnp.abs(y), jnp.abs(yp))
    return jnp.sqrt(jnp.mean(((yp - yq) / sc) ** 2))


@eqx.filter_jit
def _solve(hi, lo, problem, state0, t0, ts, rtol, atol, dt0, max_steps: int):
    dtype = state0.R.dtype
    q1 = float(lo.order) + 1.0
    alpha, beta = 0.7 / q1, 0.4 / q1
    n_out = ts.shape[0]
    out0 = jax.tree_util.tree_map(lambda x: jnp.zeros((n_out,) + x.shape, x.dtype), state0)
    aux0 = hi.init(problem, t0, state0, dt0)

    def cond(c):
        t, state, aux, h, err_prev, i, out, acc, rej = c
        return (i < n_out) & (acc + rej < max_steps)

    def body(c):
        t, state, aux, h, err_prev, i, out, acc, rej = c
        target = ts[i]
        hit = t + h >= target - 1e-12 * jnp.maximum(1.0, jnp.abs(target))
        step = jnp.where(hit, target - t, h)
        yp, aux_p, _ = hi.step(problem, t, state, aux, step)
        yq, _, _ = lo.step(problem, t, state, lo.init(problem, t, state, step), step)
        err = _scaled_error(pack_body(state.R, state.Pi), pack_body(yp.R, yp.Pi), pack_body(yq.R, yq.Pi), rtol, atol)
        err = jnp.where(jnp.isfinite(err), err, jnp.inf)
        ok = err <= 1.0
        e = jnp.maximum(err, 1e-10)
        fac = jnp.where(ok, 0.9 * e ** (-alpha) * err_prev ** beta, 0.9 * e ** (-alpha))
        fac = jnp.clip(fac, 0.2, 5.0)
        # a step shortened to land on an output time does not shrink the next one
        h_new = jnp.where(ok & hit, jnp.maximum(h, step * fac), step * fac)
        t_new = jnp.where(ok, jnp.where(hit, target, t + step), t)
        state_new = jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), yp, state)
        aux_new = jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), aux_p, aux)
        save = ok & hit
        out = jax.tree_util.tree_map(lambda o, s: o.at[i].set(jnp.where(save, s, o[i])), out, state_new)
        return (t_new, state_new, aux_new, h_new, jnp.where(ok, e, err_prev), i + save.astype(jnp.int32), out,
                acc + ok.astype(jnp.int32), rej + (~ok).astype(jnp.int32))

    c0 = (jnp.asarray(t0, dtype), state0, aux0, jnp.asarray(dt0, dtype), jnp.asarray(1.0, dtype),
          jnp.asarray(0, jnp.int32), out0, jnp.asarray(0, jnp.int32), jnp.asarray(0, jnp.int32))
    t, state, aux, h, err_prev, i, out, acc, rej = lax.while_loop(cond, body, c0)
    # outputs never reached (max_steps exhausted) hold the last state
    out = jax.tree_util.tree_map(
        lambda o, s: jnp.where((jnp.arange(n_out, dtype=jnp.int32) < i).reshape((-1,) + (1,) * s.ndim), o, s), out, state)
    return AdaptiveTrajectory(ts, out, acc, rej, err_prev, i == n_out)


def _prepare(pair, problem, t1, rtol, atol, saveat, state0, t0, dt0, max_steps):
    from .simulate import _check_capability, _check_problem, _check_state, cast

    hi, lo = _resolve_pair(pair)
    _check_problem(problem)
    _check_capability(hi, problem)
    _check_capability(lo, problem)
    state0 = problem.state0 if state0 is None else state0
    _check_state(state0, batched=True)
    for name, v in (("rtol", rtol), ("atol", atol)):
        if not (np.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    if rtol == 0 and atol == 0:
        raise ValueError("rtol and atol cannot both be 0")
    if dt0 is not None and not (np.isfinite(dt0) and dt0 > 0):
        raise ValueError(f"dt0 must be a finite number > 0 or None, got {dt0!r}")
    if not isinstance(max_steps, (int, np.integer)) or max_steps < 1:
        raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
    dtype = state0.R.dtype
    times = [t1] if saveat is None else saveat
    if not any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves((times, t0))):
        tsn = np.asarray(times, np.float64).reshape(-1)
        if not np.all(np.isfinite(tsn)) or np.any(np.diff(tsn) <= 0) or tsn[0] <= t0:
            raise ValueError("saveat (or t1) must be finite, increasing and after t0")
        ts = jnp.asarray(tsn, dtype)  # concrete inside a caller's jit too
    else:
        ts = jnp.asarray(times, dtype).reshape(-1)
    return hi, lo, cast(problem.system, dtype), state0, ts


def _run(hi, lo, physics, state0, ts, t0, rtol, atol, dt0, max_steps) -> AdaptiveTrajectory:
    """One error-controlled run; ``rtol``/``atol``: scalars, or one per body of a batch."""
    dtype = state0.R.dtype

    def one(s, rtol, atol):
        h0 = dt0
        if h0 is None:
            w = jnp.linalg.norm(s.Pi / physics.body.J)
            h0 = 0.1 * jnp.maximum(rtol, 1e-16) ** (1.0 / (float(lo.order) + 1.0)) / jnp.maximum(w, 1e-12)
            h0 = jnp.minimum(h0, ts[0] - t0)
        return _solve(hi, lo, physics, s, jnp.asarray(t0, dtype), ts, jnp.asarray(rtol, dtype),
                      jnp.asarray(atol, dtype), jnp.asarray(h0, dtype), int(max_steps))

    if state0.R.ndim == 2:
        return one(state0, rtol, atol)
    B = state0.R.shape[0]
    return jax.vmap(one)(state0, *(jnp.broadcast_to(jnp.asarray(x, dtype), (B,)) for x in (rtol, atol)))


def simulate_adaptive(pair, problem: Problem, t1, *, rtol: float = 1e-6, atol: float = 1e-9, saveat=None,
                      state0: State | None = None, t0: float = 0.0, dt0: float | None = None,
                      max_steps: int = 100_000) -> AdaptiveTrajectory:
    """Integrate from ``t0`` to ``t1`` with error control; states at ``saveat`` (default: ``[t1]``).

    ``pair``: a name of :data:`PAIRS` or ``(high, low)`` methods (names or instances). ``state0`` may
    carry a leading batch axis: the bodies are vmapped, each with its own steps. ``dt0``: first trial
    step (default ``0.1 rtol^(1/(q+1)) / |Omega_0|``, q the lower order). Returns an
    :class:`AdaptiveTrajectory`; the counts are per body.

    ``rtol``/``atol`` bound each step's *local* error (the standard control). Over a long span the
    global error can be many times larger (13.6-31x over the free body's T = 100, bench precision at 99196ce):
    :func:`simulate_to_tolerance` targets the global error instead.

    Example::

        sol = jaxrot.simulate_adaptive("buss4(3)", problems.get("fast_top"), 1.0, rtol=1e-8)
        sol.final, sol.n_accepted, sol.n_rejected
    """
    hi, lo, physics, state0, ts = _prepare(pair, problem, t1, rtol, atol, saveat, state0, t0, dt0, max_steps)
    return _run(hi, lo, physics, state0, ts, t0, rtol, atol, dt0, max_steps)


def _scaled_difference(a: State, b: State, rtol: float, atol: float) -> jax.Array:
    """max over save times and the 12 numbers of |a - b| / (atol + rtol |b|), per body."""
    ya, yb = pack_body(a.R, a.Pi), pack_body(b.R, b.Pi)  # (..., save times, 12)
    return jnp.max(jnp.abs(ya - yb) / (atol + rtol * jnp.abs(yb)), axis=(-2, -1))


def simulate_to_tolerance(pair, problem: Problem, t1, *, rtol: float = 1e-6, atol: float = 1e-9, saveat=None,
                          state0: State | None = None, t0: float = 0.0, dt0: float | None = None,
                          max_steps: int = 100_000, ratio: float = 10.0, safety: float = 0.5) -> AdaptiveTrajectory:
    """Like :func:`simulate_adaptive`, but for the **global** error: every saved state within
    ``atol + rtol |y|`` (each of the 12 numbers of ``(R, Pi)``) of the exact solution, as estimated.

    Tolerance calibration (global error estimation by two tolerances, Hairer, Nørsett & Wanner,
    Solving ODEs I, II.4; Shampine, Numerical Solution of ODEs, 1994, 5.3): the PI-controlled runs are
    tolerance proportional, global error ``e(tau) ~ K tau`` for a local tolerance ``tau`` (checked:
    ``test_free_body_error_is_proportional_to_the_tolerance``), so runs at ``tau`` and ``tau/ratio``
    differ by ``d ~ K tau (1 - 1/ratio)`` and the second one's error is ``d / (ratio - 1)``, per body
    in units of the tolerance. If that is at most ``safety``, the second run is returned; otherwise a
    third run at ``tau / ratio * safety / (d / (ratio - 1))`` (per body), whose estimate is ``safety``.

    Cost: 2-3 runs (the steps of all runs in ``n_calibration``); 2.2-2.5x the one run whose local
    tolerance happens to give the requested global error on the free body, 2.5-5.3x on the fast top
    (bench precision at 99196ce), a tolerance not known in advance.
    ``global_error`` holds the estimate (units of the tolerance: <= 1 is within it). The estimate
    assumes proportionality; a method whose error does not follow its tolerance (e.g. at round-off)
    is flagged by ``global_error > 1``.

    Example::

        sol = jaxrot.simulate_to_tolerance("lie_taylor5(4)", problems.get("free_body_mz"), 100.0,
                                           rtol=1e-8, atol=1e-8)
        sol.final, sol.global_error, sol.tolerance
    """
    if not (np.isfinite(ratio) and ratio > 1):
        raise ValueError(f"ratio must be a finite number > 1, got {ratio!r}")
    if not (0 < safety <= 1):
        raise ValueError(f"safety must be in (0, 1], got {safety!r}")
    hi, lo, physics, state0, ts = _prepare(pair, problem, t1, rtol, atol, saveat, state0, t0, dt0, max_steps)
    first = _run(hi, lo, physics, state0, ts, t0, rtol, atol, dt0, max_steps)
    tight = _run(hi, lo, physics, state0, ts, t0, rtol / ratio, atol / ratio, dt0, max_steps)
    est = _scaled_difference(first.states, tight.states, rtol, atol) / (ratio - 1.0)
    spent = first.n_accepted + first.n_rejected
    if not isinstance(est, jax.core.Tracer) and bool(jnp.all(est <= safety)):  # traced: the third run always
        return dataclasses.replace(tight, global_error=est, tolerance=jnp.full_like(est, rtol / ratio),
                                   n_calibration=spent)
    # per body: the tolerance whose estimated global error is `safety`; bodies already within it rerun
    # at tau/ratio, which repeats the second run exactly
    scale = jnp.where(est > safety, safety / jnp.maximum(est, 1e-300), 1.0) / ratio
    final = _run(hi, lo, physics, state0, ts, t0, rtol * scale, atol * scale, dt0, max_steps)
    return dataclasses.replace(final, global_error=jnp.minimum(est, safety), tolerance=rtol * scale,
                               n_calibration=spent + tight.n_accepted + tight.n_rejected)
