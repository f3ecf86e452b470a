"""The global search of :func:`jaxrot.studies.identify.identify` and the compiled pieces it shares
with the fit: residuals and Jacobians of every throw, the Levenberg-Marquardt runs (one, or several
starts one after another), the covariance.

The search's candidates cover every physical inertia: ``J = 1 - (a, b, c)`` (trace 2; scaled to 1
in the model) for ``(a, b, c)`` on the simplex ``a + b + c = 1, a, b, c >= 0``, drawn as a
low-discrepancy set (the R2 sequence folded onto the triangle by the square root), then a second
round around the first round's best, plus each throw's energy-conserving body
(:func:`energy_candidates`). Thin bodies (books, phones, racquets) lie near the simplex's edge
``c -> 0`` (``J3 -> J1 + J2``): the candidates reach to ``1e-4`` of it.
"""

from __future__ import annotations

import math
import time

import jax
import jax.numpy as jnp
import numpy as np

from . import identify_model as im
from .identify_model import Model, moments_from_u
from .levenberg_marquardt import covariance, levenberg_marquardt

def make_model(throws, layout, torque, options, span=None) -> Model:
    span = max(t.duration for t in throws) if span is None else span
    n_steps = int(math.ceil(span / options.dt)) + 1
    return Model(layout, torque, options.method, float(options.dt), n_steps)


_DATA_AXES = im.Data(0, 0, 0, 0, None, None)  # the weights are one for all throws


def _vmap_throws(fn):
    return jax.vmap(fn, in_axes=(None, 0, _DATA_AXES))


def residuals_all(model, shared, own, data):
    return _vmap_throws(model.residuals)(shared, own, data)


#: the residuals of every throw, compiled (once per model and shapes)
residuals_jit = jax.jit(residuals_all)


def linearise_all(model, shared, own, data):
    return _vmap_throws(model.linearise)(shared, own, data)


def _solve_one(model, data, shared0, own0, robust, fixed, max_iters):
    return levenberg_marquardt(lambda s, o: linearise_all(model, s, o, data),
                               lambda s, o: residuals_all(model, s, o, data), shared0, own0, robust=robust,
                               fixed=fixed, max_iters=max_iters)


solve = jax.jit(_solve_one, static_argnames=("max_iters",))


def _starts_impl(model, data, shared0, own0, robust, fixed, max_iters):
    # one after another (lax.map), not vmap-ped: mapped, the solver's while loop and its branches are
    # traced again for the batch (seconds of a first call) and each start's iterations run while the
    # slowest goes on, both branches of every lax.cond evaluated
    return jax.lax.map(lambda so: _solve_one(model, data, so[0], so[1], robust, fixed, max_iters), (shared0, own0))


solve_starts = jax.jit(_starts_impl, static_argnames=("max_iters",))


_moments_of_rows = jax.jit(jax.vmap(moments_from_u))


@jax.jit
def covariance_of(blocks):
    return covariance(blocks)


def _costs_impl(model, data, shared_base, U, own, chunk):
    def one(u):
        shared = shared_base.at[:2].set(u)
        r = residuals_all(model, shared, own, data)
        c = 0.5 * jnp.sum(r * r)
        return jnp.where(jnp.isfinite(c), c, jnp.inf)

    return jax.lax.map(one, U, batch_size=chunk)


candidate_costs = jax.jit(_costs_impl, static_argnames=("chunk",))


def _simplex_points(n: int, offset: int = 0) -> np.ndarray:
    """``n`` low-discrepancy points ``(a, b, c)`` on the simplex (the R2 sequence, folded by the square root)."""
    g = 1.32471795724474602596  # the plastic number
    i = np.arange(offset + 1, offset + n + 1)[:, None]
    x = np.mod(0.5 + i * np.array([1 / g, 1 / g ** 2]), 1.0)
    r = np.sqrt(x[:, 0])
    return np.stack([1 - r, r * (1 - x[:, 1]), r * x[:, 1]], axis=1)


def _u_of_abc(abc, floor=1e-4):
    abc = np.clip(abc, floor, None)
    return np.log(abc[:, :2] / abc[:, 2:3])


def energy_candidates(throws) -> np.ndarray:
    """Per throw, the moments (trace 1) whose kinetic energy ``sum J_i w_i^2 / 2`` is most nearly
    constant over its rate samples (the smallest singular vector of ``[w^2, -1]``); the physical ones,
    as ``u`` parameters. A start, not an estimate: bias, misalignment and drag shift it."""
    out = []
    for t in throws:
        if t.omega is None:
            continue
        w2 = t.omega ** 2
        M = np.concatenate([w2 / np.mean(w2), -np.ones((len(w2), 1))], axis=1)
        v = np.linalg.svd(M, full_matrices=False)[2][-1]
        J = v[:3] * np.sign(v[:3].sum())
        if np.all(J > 0) and np.all(2 * J < J.sum()):
            out.append(im.u_from_moments(J))
    return np.asarray(out).reshape(-1, 2)


def _distinct(U, costs, k, min_dist=0.05):
    """The ``k`` lowest-cost rows of ``U`` at least ``min_dist`` apart (in the moments' space)."""
    order = np.argsort(costs)
    J = np.asarray(_moments_of_rows(jnp.asarray(U)))
    chosen = []
    for i in order:
        if not np.isfinite(costs[i]):
            break
        if all(np.abs(J[i] - J[j]).max() > min_dist * 0.5 for j in chosen):
            chosen.append(i)
        if len(chosen) == k:
            break
    return np.asarray(chosen, int)


def search(model, data, throws, shared_base, own_start, options, progress) -> tuple[np.ndarray, dict]:
    """The best ``options.starts`` candidate ratios ``u`` (rows), and a record of the search."""
    t0 = time.perf_counter()
    n = int(options.candidates)
    U1 = _u_of_abc(_simplex_points(n))
    c1 = np.asarray(candidate_costs(model, data, shared_base, jnp.asarray(U1), own_start, chunk=options.chunk))
    # round two: around the best of round one, at about a quarter of its spacing, plus the energy starts
    best = _distinct(U1, c1, 8)
    abc = np.exp(np.concatenate([U1, np.zeros((n, 1))], axis=1))
    abc /= abc.sum(1, keepdims=True)
    spacing = math.sqrt(1.0 / n)
    rng = np.random.default_rng(12345)
    pts = []
    per = n // max(len(best), 1)
    for i in best:
        d = rng.normal(0, spacing, (per, 3))
        d -= d.mean(1, keepdims=True)  # stay on the plane a + b + c = 1
        pts.append(np.clip(abc[i] + d, 1e-4, None))
    en = energy_candidates(throws)
    U2 = np.concatenate([_u_of_abc(np.concatenate(pts)) if pts else np.zeros((0, 2)), en])
    pad = n - len(U2) % n if len(U2) % n else 0
    U2 = np.concatenate([U2, np.repeat(U2[:1], pad, 0)]) if len(U2) else U1
    c2 = np.concatenate([np.asarray(candidate_costs(model, data, shared_base, jnp.asarray(U2[k:k + n]), own_start,
                                                     chunk=options.chunk)) for k in range(0, len(U2), n)])
    U, c = np.concatenate([U1, U2]), np.concatenate([c1, c2])
    pick = _distinct(U, c, options.starts)
    record = {"candidates": int(len(U)), "energy_starts": int(len(en)), "best_costs": c[pick].tolist(),
              "seconds": time.perf_counter() - t0}
    if progress:
        print(f"  global search: {len(U)} candidate bodies x {data.ts.shape[0]} throw(s) in "
              f"{record['seconds']:.1f} s", flush=True)
    return U[pick], record


