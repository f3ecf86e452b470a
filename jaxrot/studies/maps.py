"""Batched maps over grids: one-step solver convergence, energy change, any scalar outcome.

Every map flattens its grid, evaluates a ``vmap``-ed function in fixed-size chunks (so a 1024x1024
grid fits in memory and compiles once: the last chunk is padded) and, with several local devices,
shards each chunk over them (``jax.sharding``; results identical to one device), across processes
too under ``jax.distributed`` (every process passes the whole grid and gets the whole map).
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..integrators.exponential import midpoint_residual, trapezoid_object_residual, trapezoid_world_residual
from ..driver.sharding import batch_mesh, default_devices, gather, per_device, shard

#: one-step rules of the Roblox article: residual builders ``(J, O, ell) -> F(v)``
RULES = {
    "midpoint": midpoint_residual,
    "trapezoid_object": trapezoid_object_residual,
    "trapezoid_world": trapezoid_world_residual,
}


def grid_map(fn: Callable, *grids, grid_shape=None, chunk: int = 65536, devices=None):
    """``fn`` (scalar inputs -> pytree) over grids of equal shape; returns NumPy arrays of that shape.

    ``grids`` are arrays of one shape ``S`` (e.g. from ``np.meshgrid``) or with a trailing vector
    axis ``S + (k,)`` when ``fn`` takes a vector (then pass ``grid_shape=S`` if every grid is
    vector-valued). Raises on an empty grid or non-finite entries.
    """
    if not grids:
        raise ValueError("grid_map needs at least one grid")
    arrays = [np.asarray(g) for g in grids]
    # the grid shape is the common leading shape (vector-valued grids carry one extra axis)
    shapes = [a.shape for a in arrays]
    shape = tuple(grid_shape) if grid_shape is not None else min(shapes, key=len)
    for a in arrays:
        if a.shape[: len(shape)] != shape:
            raise ValueError(f"grids must share a shape; got {shapes}")
        if not np.all(np.isfinite(a)):
            raise ValueError("grid contains NaN or inf")
    n = math.prod(shape)
    if n == 0:
        raise ValueError(f"empty grid (shape {shape})")
    if chunk < 1:
        raise ValueError(f"chunk must be positive, got {chunk}")
    flat = [a.reshape((n,) + a.shape[len(shape):]) for a in arrays]
    devices = default_devices(devices)
    size = min(chunk, n)
    size += (-size) % len(devices)
    f = jax.jit(per_device(jax.vmap(fn), batch_mesh(devices)))
    outs = []
    for s in range(0, n, size):
        part = [x[s:s + size] for x in flat]
        m = part[0].shape[0]
        if m < size:  # pad to the compiled size
            part = [np.concatenate([x, np.repeat(x[-1:], size - m, axis=0)]) for x in part]
        if len(devices) == 1:
            part = [jnp.asarray(x) for x in part]
        else:
            part = shard(part, devices, 0)
        res = f(*part)
        outs.append(jax.tree_util.tree_map(lambda r: r[:m], gather(res)))
    return jax.tree_util.tree_map(lambda *rs: np.concatenate(rs).reshape(shape + rs[0].shape[1:]), *outs)


def iterate_solve(F: Callable, v0, *, solver: str = "newton", tol: float = 1e-6, max_iters: int = 10):
    """Iterations until the update ``|dv| < tol`` (or -1 if not within ``max_iters``) and the final v.

    ``solver="newton"``: ``v <- v - F'(v)^-1 F(v)`` with ``F'`` from ``jax.jacfwd``;
    ``"fixed_point"``: ``v <- v - F(v)`` (for ``F(v) = v - G(v)`` that is ``v <- G(v)``).
    """
    if solver not in ("newton", "fixed_point"):
        raise ValueError(f"solver must be 'newton' or 'fixed_point', got {solver!r}")

    def update(v):
        if solver == "fixed_point":
            return -F(v)
        return -jnp.linalg.solve(jax.jacfwd(F)(v), F(v))

    def body(c, k):
        v, done = c
        dv = update(v)
        ok = jnp.all(jnp.isfinite(dv))
        v1 = jnp.where(done | ~ok, v, v + dv)
        now = ~done & ok & (jnp.linalg.norm(dv) < tol)
        return (v1, done | now), jnp.where(now, k + 1, 0)

    (v, done), ks = lax.scan(body, (v0, jnp.asarray(False)), jnp.arange(max_iters))
    return jnp.where(done, ks.max(), -1), v


def convergence_map(rule: str, J, ells, *, solver: str = "newton", tol: float = 1e-6, max_iters: int = 10,
                    guess: str = "zero", chunk: int = 65536, devices=None) -> np.ndarray:
    """Iterations of one step's solve at each ``ell = dt L`` (world = body frame, O = 1); -1: failed.

    ``rule`` is one of :data:`RULES`; ``guess`` "zero" (v0 = 0) or "explicit" (v0 = I^-1 ell).
    """
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; known: {', '.join(RULES)}")
    if guess not in ("zero", "explicit"):
        raise ValueError(f"guess must be 'zero' or 'explicit', got {guess!r}")
    J = jnp.asarray(J)
    if J.shape != (3,) or not bool(jnp.all(J > 0)):
        raise ValueError(f"J must be three positive principal moments, got {J}")
    O = jnp.eye(3, dtype=J.dtype)

    def one(ell):
        F = RULES[rule](J, O, ell)
        v0 = jnp.zeros_like(ell) if guess == "zero" else ell / J
        return iterate_solve(F, v0, solver=solver, tol=tol, max_iters=max_iters)[0]

    ells = np.asarray(ells)
    if ells.ndim < 1 or ells.shape[-1] != 3:
        raise ValueError(f"ells must have a trailing axis of 3, got shape {ells.shape}")
    return grid_map(one, ells, grid_shape=ells.shape[:-1], chunk=chunk, devices=devices)


def energy_change_map(method, body, Ls, *, t_total: float = 1.0, n_steps: int = 1, chunk: int = 16384,
                      devices=None) -> np.ndarray:
    """Relative energy change ``(E(T) - E0)/E0`` of ``method`` after ``n_steps`` steps of
    ``t_total / n_steps`` from ``R = 1, Pi = L`` (torque-free), for each ``L`` of the grid; NaN
    where a step's solve failed (never silently dropped)."""
    from .. import integrators
    from ..physics.problems import Problem
    from ..driver.loop import run_steps
    from ..geometry.state import State
    from ..physics.torques import FreeTorque

    if isinstance(method, str):
        method = integrators.get(method)
    if not t_total > 0 or n_steps < 1:
        raise ValueError(f"need t_total > 0 and n_steps >= 1, got {t_total}, {n_steps}")

    def one(L):
        s0 = State(jnp.eye(3, dtype=L.dtype), L)
        p = Problem(body, FreeTorque(), s0, t_total)
        dt = jnp.asarray(t_total / n_steps, L.dtype)
        c, _ = run_steps(method, p, s0, dt, jnp.zeros((), L.dtype), jnp.asarray(n_steps, jnp.int32))
        s, failed = c[0], c[3]
        E0 = body.kinetic_energy(L)
        rel = (body.kinetic_energy(s.Pi) - E0) / jnp.where(E0 > 0, E0, 1.0)  # L = 0: no energy, 0 change
        return jnp.where(failed < 0, rel, jnp.nan)  # NaN: a solve failed

    Ls = np.asarray(Ls)
    if Ls.ndim < 1 or Ls.shape[-1] != 3:
        raise ValueError(f"Ls must have a trailing axis of 3, got shape {Ls.shape}")
    return grid_map(one, Ls, grid_shape=Ls.shape[:-1], chunk=chunk, devices=devices)
