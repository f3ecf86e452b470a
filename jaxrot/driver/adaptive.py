"""Error-controlled stepping: an embedded pair of one-step methods and a PI step-size controller.

Each attempt advances the current state by a step ``h`` with both methods of a pair (order p and a
lower order q) and measures their difference in a mixed absolute/relative RMS norm over the 12
numbers of ``(R, Pi)``,

    err = sqrt(mean(((y_p - y_q) / (atol + rtol max(|y|, |y_p|)))^2)),

accepts the step (keeping the higher-order result: local extrapolation) when ``err <= 1`` and sets
the next step by the PI controller of Gustafsson / Hairer & Wanner (Solving ODEs II, IV.2),

    h_new = h * clip(0.9 err^(-0.7/(q+1)) err_prev^(0.4/(q+1)), 0.2, 5).

Steps are shortened to land on every requested output time. The loop is jit-able and vmap-able (each
body takes its own steps; a vmapped loop runs until the slowest body is done, masking the others, as
diffrax does). Two loops, as diffrax's adjoints (``simulate(..., adjoint=...)``):

- ``"forward"`` (default): a ``lax.while_loop``, differentiable in forward mode (``jax.jvp``,
  ``jax.jacfwd``);
- ``"checkpointed"``: ``equinox.internal.while_loop(kind="checkpointed")``, the same forward loop,
  differentiable in reverse mode (``jax.grad``) by recursive (treeverse) checkpointing over at most
  ``max_steps`` attempts: the backward pass keeps O(log max_steps) copies of the loop state and
  recomputes the rest (Griewank & Walther, Algorithm 799; diffrax's ``RecursiveCheckpointAdjoint``).
  Not forward-differentiable.

Pairs (``PAIRS``): ``buss4(3)``, ``lie_taylor5(4)``, ``exact_split_tj4(2)`` (the triple-jump composition of the
exact splitting against the splitting itself; any torque), ``rkmk8(5)`` (RKMK8 and the fifth-order
solution embedded in its stages). Any ``(high, low)`` pair of registered methods can be passed. Both
methods of a pair take every attempted step in full, except an embedded one (``rkmk8(5)``), whose
two solutions come from one set of stages (their cost against fixed steps of the same accuracy is in
``docs/benchmarks.md``).
"""

from __future__ import annotations

import functools

import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np

import warnings

from ..geometry.state import State
from ..integrators import RKMK8Embedded5
from ..integrators import get as get_method
from ..physics.flow import pack_body
from ..physics.problems import Problem
from .checks import cast, check_capability, check_problem, check_state, is_concrete
from .failures import MAX_STEPS_REACHED, SUCCESSFUL, result_of
from .loop import empty_stats, fold
from .results import AdaptiveStats, Trajectory
from .saveat import SaveAt
from .stepsize import Adaptive

#: name -> (higher-order method, lower-order method); the estimate is of the lower one's local error
PAIRS: dict[str, tuple] = {  # (high, low): names or methods
    "buss4(3)": ("buss4", "buss3"),
    "lie_taylor5(4)": ("lie_taylor5", "lie_taylor4"),
    "exact_split_tj4(2)": ("exact_split_tj4", "exact_split"),
    "rkmk8(5)": ("rkmk8", RKMK8Embedded5()),
}


def _resolve_pair(pair):
    if isinstance(pair, str):
        if pair not in PAIRS:
            raise KeyError(f"unknown adaptive pair {pair!r}; known: {', '.join(PAIRS)}")
        pair = PAIRS[pair]
    hi, lo = (get_method(m) if isinstance(m, str) else m for m in pair)
    if not hi.order > lo.order:
        raise ValueError(f"an embedded pair needs a higher-order first method; got orders {hi.order} and {lo.order}")
    return hi, lo


@jax.custom_jvp
def _sqrt_zero_safe(x):
    """``sqrt(x)``, whose derivative at 0 is taken as 0: a body of a vmapped loop that is done takes
    steps of length 0, whose error estimate is 0, and sqrt's infinite derivative there times a zero
    tangent gave NaN in reverse mode (the values are ``jnp.sqrt``'s, the same program)."""
    return jnp.sqrt(x)


@_sqrt_zero_safe.defjvp
def _sqrt_zero_safe_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    y = jnp.sqrt(x)
    pos = x > 0
    return y, jnp.where(pos, 0.5 / jnp.where(pos, y, 1.0), 0.0) * dx


def _scaled_error(y, yp, yq, rtol, atol):
    sc = atol + rtol * jnp.maximum(jnp.abs(y), jnp.abs(yp))
    return _sqrt_zero_safe(jnp.mean(((yp - yq) / sc) ** 2))


#: the reverse-differentiable loop of ``adjoint="checkpointed"`` and the plain one of ``"forward"``
ADJOINTS = {"forward": "lax", "checkpointed": "checkpointed"}


def check_adjoint(adjoint) -> str:
    """The loop kind of an ``adjoint`` name; ValueError naming the argument otherwise."""
    if not isinstance(adjoint, str) or adjoint not in ADJOINTS:
        raise ValueError(f"adjoint must be one of {', '.join(map(repr, ADJOINTS))}, got {adjoint!r}")
    return ADJOINTS[adjoint]


@eqx.filter_jit
def _solve(hi, lo, system, state0, t0, ts, rtol, atol, dt0, max_steps: int, kind: str = "lax"):
    """``(states at ts, StepStats per output interval, accepted, rejected, last error, success)``."""
    dtype = state0.R.dtype
    q1 = float(lo.order) + 1.0
    alpha, beta = 0.7 / q1, 0.4 / q1
    n_out = ts.shape[0]
    zeros = jax.tree_util.tree_map(lambda x: jnp.zeros((n_out,) + x.shape, x.dtype), (state0, empty_stats()))
    out0 = zeros
    aux0 = hi.init(system, t0, state0, dt0)

    def cond(c):
        t, state, aux, h, err_prev, i, out, acc, rej, folded, consts = c
        return (i < n_out) & (acc + rej < max_steps)

    def body(c):
        t, state, aux, h, err_prev, i, out, acc, rej, folded, consts = c
        system, ts, rtol, atol = consts
        target = ts[i]
        hit = t + h >= target - 1e-12 * jnp.maximum(1.0, jnp.abs(target))
        step = jnp.where(hit, target - t, h)
        if isinstance(hi, getattr(lo, "embedded_in", ())):  # both solutions from one set of stages
            yp, aux_p, stats, yq = hi.step_embedded(system, t, state, aux, step)
        else:
            yp, aux_p, stats = hi.step(system, t, state, aux, step)
            yq, _, _ = lo.step(system, t, state, lo.init(system, t, state, step), step)
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
        folded_new = jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), fold(folded, stats), folded)
        out = jax.tree_util.tree_map(lambda s, o: o.at[i].set(s, pred=save), (state_new, folded_new), out)
        folded_new = jax.tree_util.tree_map(lambda a, b: jnp.where(save, a, b), empty_stats(), folded_new)
        return (t_new, state_new, aux_new, h_new, jnp.where(ok, e, err_prev), i + save.astype(jnp.int32), out,
                acc + ok.astype(jnp.int32), rej + (~ok).astype(jnp.int32), folded_new, consts)

    # the problem's arrays travel in the loop state (unchanged) rather than by closure: their
    # cotangents then accumulate through the checkpointed loop's recomputations
    c0 = (jnp.asarray(t0, dtype), state0, aux0, jnp.asarray(dt0, dtype), jnp.asarray(1.0, dtype),
          jnp.asarray(0, jnp.int32), out0, jnp.asarray(0, jnp.int32), jnp.asarray(0, jnp.int32), empty_stats(),
          (system, ts, rtol, atol))
    # the outputs are the loop's buffers: written in place, not copied into every checkpoint
    t, state, aux, h, err_prev, i, (out, stats), acc, rej, _, _ = eqxi.while_loop(
        cond, body, c0, max_steps=max_steps, buffers=lambda c: c[6], kind=kind)
    # outputs never reached (max_steps exhausted) hold the last state
    out = jax.tree_util.tree_map(
        lambda o, s: jnp.where((jnp.arange(n_out, dtype=jnp.int32) < i).reshape((-1,) + (1,) * s.ndim), o, s), out, state)
    return out, stats, acc, rej, err_prev, i == n_out


def _prepare(pair, problem, t1, rtol, atol, times, state0, t0, dt0, max_steps):
    hi, lo = _resolve_pair(pair)
    check_problem(problem)
    check_capability(hi, problem)
    check_capability(lo, problem)
    state0 = problem.state0 if state0 is None else state0
    if not isinstance(state0, State):
        raise TypeError(f"state0 must be a jaxrot State, got {type(state0).__name__}")
    check_state(state0)
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
    if times is None:
        if t1 is None:
            raise ValueError("an adaptive run needs t1 or saveat=SaveAt(ts=...)")
        times = [t1]
    if not any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves((times, t0))):
        tsn = np.asarray(times, np.float64).reshape(-1)
        if not np.all(np.isfinite(tsn)) or np.any(np.diff(tsn) <= 0) or tsn[0] <= t0:
            raise ValueError("the save times (or t1) must be finite, increasing and after t0")
        if t1 is not None and is_concrete(t1) and tsn[-1] > float(t1) * (1 + 1e-12) + 1e-300:
            raise ValueError(f"save times run past t1 = {t1}")
        ts = jnp.asarray(tsn, dtype)  # concrete inside a caller's jit too
    else:
        ts = jnp.asarray(times, dtype).reshape(-1)
    return hi, lo, cast(problem.system, dtype), state0, ts


def run_pair(hi, lo, system, state0, ts, t0, rtol, atol, dt0, max_steps, executor=None, kind="lax"):
    """One error-controlled run; ``rtol``/``atol``: scalars, or one per body of a batch, whose bodies
    ``executor`` places (:meth:`~jaxrot.driver.executors.base.AbstractExecutor.map_bodies`; None: one
    ``vmap``). Returns ``(states, stats, AdaptiveStats, success)``."""
    dtype = state0.R.dtype

    def one(s, rtol, atol):
        h0 = dt0
        if h0 is None:
            w = jnp.linalg.norm(s.Pi / system.body.J)
            h0 = 0.1 * jnp.maximum(rtol, 1e-16) ** (1.0 / (float(lo.order) + 1.0)) / jnp.maximum(w, 1e-12)
            h0 = jnp.minimum(h0, ts[0] - t0)
        return _solve(hi, lo, system, s, jnp.asarray(t0, dtype), ts, jnp.asarray(rtol, dtype),
                      jnp.asarray(atol, dtype), jnp.asarray(h0, dtype), int(max_steps), kind)

    if state0.R.ndim == 2:
        out, stats, acc, rej, err, ok = one(state0, rtol, atol)
    else:
        B = state0.R.shape[0]
        mapped = jax.vmap(one) if executor is None else functools.partial(executor.map_bodies, one)
        out, stats, acc, rej, err, ok = mapped(state0, *(jnp.broadcast_to(jnp.asarray(x, dtype), (B,))
                                                         for x in (rtol, atol)))
    return out, stats, AdaptiveStats(acc, rej, err), ok


def _trajectory(state0, t0, ts, out, stats, ctrl: AdaptiveStats, ok, with_t0: bool, system) -> Trajectory:
    """The :class:`Trajectory` of an adaptive run (per body: ``ts`` broadcast over a batch)."""
    batched = state0.R.ndim == 3
    lead = (state0.R.shape[0],) if batched else ()
    times = jnp.broadcast_to(ts, lead + ts.shape)
    if with_t0:
        t0a = jnp.broadcast_to(jnp.asarray(t0, ts.dtype), lead + (1,))
        times = jnp.concatenate([t0a, times], axis=-1)
        out = State(jnp.concatenate([state0.R[..., None, :, :], out.R], axis=-3),
                    jnp.concatenate([state0.Pi[..., None, :], out.Pi], axis=-2))
    attempts = ctrl.n_accepted + ctrl.n_rejected
    failed = jnp.where(ok, -1, attempts).astype(jnp.int32)
    result = result_of(jnp.where(ok, SUCCESSFUL, MAX_STEPS_REACHED))
    return Trajectory(times, out, stats, failed, result, ctrl, system)


def run_adaptive(pair, problem: Problem, t0, t1, stepsize, saveat, state0, executor=None,
                 adjoint: str = "forward") -> Trajectory:
    """The error-controlled run of :func:`jaxrot.simulate` with ``stepsize=Adaptive(...)``; a batch's
    bodies placed by ``executor`` (None: one ``vmap`` on the default device); ``adjoint``: ``"forward"``
    (``lax.while_loop``, forward-mode derivatives) or ``"checkpointed"`` (reverse mode)."""
    kind = check_adjoint(adjoint)
    if saveat is not None and (saveat.steps or saveat.every is not None or saveat.dense):
        raise ValueError("adaptive steps save at given times: SaveAt(t0=..., t1=..., ts=...)")
    times = None if saveat is None or saveat.ts is None else saveat.ts
    if times is not None and saveat.t1 and t1 is not None:
        times = np.concatenate([np.asarray(times, np.float64).reshape(-1), [float(t1)]]) if (
            is_concrete(t1) and not np.isclose(np.asarray(times, np.float64).reshape(-1)[-1], float(t1))) else times
    hi, lo, system, state0, ts = _prepare(pair, problem, t1, stepsize.rtol, stepsize.atol, times, state0, t0,
                                          stepsize.dt0, stepsize.max_steps)
    args = (hi, lo, system, state0, ts, t0, stepsize.rtol, stepsize.atol, stepsize.dt0, stepsize.max_steps, executor,
            kind)
    if stepsize.error == "global":
        from .global_error import global_run  # (which runs its calibration through run_pair)

        out, stats, ctrl, ok = global_run(*args, stepsize.measure, stepsize.calibration_bodies, aim=stepsize.aim)
    else:
        out, stats, ctrl, ok = run_pair(*args)
    with_t0 = saveat is None or saveat.t0
    return _trajectory(state0, t0, ts, out, stats, ctrl, ok, with_t0, system)


def simulate_adaptive(pair, problem: Problem, t1, *, rtol: float = 1e-6, atol: float = 1e-9, saveat=None,
                      state0: State | None = None, t0: float = 0.0, dt0: float | None = None,
                      max_steps: int = 100_000) -> Trajectory:
    """Deprecated: ``simulate(pair, problem, t1=t1, stepsize=Adaptive(rtol, atol, dt0=dt0, max_steps=...),
    saveat=SaveAt(t0=False, ts=saveat), throw=False)``."""
    warnings.warn("jaxrot.simulate_adaptive is deprecated: use jaxrot.simulate(pair, problem, t1=..., "
                  "stepsize=jaxrot.Adaptive(rtol, atol))", DeprecationWarning, stacklevel=2)
    return _alias(pair, problem, t1, Adaptive(rtol, atol, "local", dt0, max_steps), saveat, state0, t0)


def simulate_to_tolerance(pair, problem: Problem, t1, *, rtol: float = 1e-6, atol: float = 1e-9, saveat=None,
                          state0: State | None = None, t0: float = 0.0, dt0: float | None = None,
                          max_steps: int = 100_000) -> Trajectory:
    """Deprecated: ``simulate(..., stepsize=Adaptive(rtol, atol, error="global"))``: every saved state
    within ``atol + rtol |y|`` of the exact solution, as estimated by tolerance calibration."""
    warnings.warn("jaxrot.simulate_to_tolerance is deprecated: use jaxrot.simulate(pair, problem, t1=..., "
                  "stepsize=jaxrot.Adaptive(rtol, atol, error='global'))", DeprecationWarning, stacklevel=2)
    return _alias(pair, problem, t1, Adaptive(rtol, atol, "global", dt0, max_steps), saveat, state0, t0)


def _alias(pair, problem, t1, stepsize, saveat, state0, t0):
    from .simulate import simulate

    at = SaveAt(t0=False, t1=saveat is None, ts=saveat)
    return simulate(pair, problem, t0=t0, t1=t1 if saveat is None else None, stepsize=stepsize, saveat=at,
                    state0=state0, throw=False)
